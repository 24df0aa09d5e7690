"""The comparison the op-table sweeps (C++ and Triton) make against eager PyTorch on special values."""

from __future__ import annotations

import torch

RTOL = {torch.float16: 1e-3, torch.bfloat16: 1.6e-2, torch.float32: 2e-5, torch.float64: 1e-10}


def assert_like_eager(got: torch.Tensor, want: torch.Tensor, wide: torch.Tensor | None, what: str,
                      one: object = None) -> None:
    """``got`` equals eager's ``want`` (NaN where eager has NaN); a float element may instead equal ``wide``,
    eager's float64 result rounded to the dtype, where eager's own vectorised kernel disagrees with it
    (float32 gelu(+inf) is NaN in eager's AVX kernels but +inf on one element, in float64 and on CUDA), or
    eager's result for that element alone (``one(k)``: float64 fmod of a quotient past the float range is NaN
    in eager's AVX lanes and libm's exact fmod on one element)."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if not want.dtype.is_floating_point:
        bad = (got != want).nonzero().flatten()[:8].tolist()
        assert not bad, f"{what}: at {bad} got {got[bad].tolist()}, eager {want[bad].tolist()}"
        return
    tiny = torch.finfo(want.dtype).tiny

    def close(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = a.double(), b.double()
        same = (a == b) | (a.isnan() & b.isnan())
        return same | ((a - b).abs() <= tiny + RTOL[want.dtype] * b.abs())

    ok = close(got, want)
    if wide is not None:
        ok |= close(got, wide)
    for k in (~ok).nonzero().flatten().tolist() if one is not None else ():
        ok[k] = bool(close(got[k:k + 1], one(k)).all())
    bad = (~ok).nonzero().flatten()[:8].tolist()
    assert not bad, f"{what}: at {bad} got {got[bad].tolist()}, eager {want[bad].tolist()}"


def eager_on_cpu(fn, *args):
    """Eager's result on CPU copies of ``args``, moved back to their device. Where eager's CPU and CUDA kernels
    disagree (measured on an H100: CUDA's float64 hardsigmoid multiplies by the float32 constant 1/6, CUDA's
    half logit keeps eps in float32, CUDA's clamp ignores a NaN bound), kernelgen follows the CPU kernels and
    the tests accept either device's eager."""
    device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
    out = fn(*(a.cpu() if isinstance(a, torch.Tensor) else a for a in args))
    return tuple(o.to(device) for o in out) if isinstance(out, tuple) else out.to(device)


def assert_close_to_either(got, want, want_cpu, **tol) -> None:
    """``torch.testing.assert_close(got, want)``, or, on a GPU, to eager's CPU result (see ``eager_on_cpu``)."""
    try:
        torch.testing.assert_close(got, want, equal_nan=True, **tol)
    except AssertionError:
        first = want[0] if isinstance(want, (tuple, list)) else want
        if first.device.type == "cpu":
            raise
        torch.testing.assert_close(got, want_cpu, equal_nan=True, **tol)
