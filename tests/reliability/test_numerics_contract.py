"""Numerics where eager's own answer needed deciding: var of huge rows in eager's accumulator, and, where
eager's vectorised and reference (scalar / math) paths disagree, the reference path is the contract.

Before: ``var`` of rows scaled to 1e19 gave inf where eager gives ~1e38 (a float sum of squares overflowed;
eager accumulates float32 in double on CPUs).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import kernelgen

FLT_MAX = torch.finfo(torch.float32).max


@pytest.mark.parametrize("fn", [lambda x: torch.var(x, -1), lambda x: torch.var(x), lambda x: torch.std(x, 0),
                                lambda x: torch.var_mean(x, -1, correction=0)],
                         ids=["var-rows", "var-all", "std-cols", "var_mean"])
def test_variance_of_huge_rows_is_eagers_finite_value(fn) -> None:
    x = torch.randn(8, 1024, generator=torch.Generator().manual_seed(0)) * 1e19
    want = fn(x)
    fast = kernelgen.compile(fn)
    got = fast(x)
    assert fast.explain(x)["implementation"] != "eager"
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert torch.isfinite(w).all() and g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=1e-5, atol=0)


def _attention_inputs(value: float):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 8, generator=g) for _ in range(3))
    q[0, 0, 3, 2] = value
    return q, k, v


@pytest.mark.parametrize("value", [FLT_MAX, float("inf"), -float("inf"), float("nan")],
                         ids=["flt_max", "inf", "-inf", "nan"])
def test_attention_follows_eagers_reference_math(value: float) -> None:
    """FLT_MAX in q: eager's CPU flash kernel multiplies before it scales and overflows to NaN; its reference
    (``_scaled_dot_product_attention_math``, what the documentation defines) stays finite, and so does
    kernelgen. Inf and NaN in q give the NaN row every eager path gives."""
    q, k, v = _attention_inputs(value)
    fast = kernelgen.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v))
    got = fast(q, k, v)
    assert fast.explain(q, k, v)["implementation"] == "attention"
    reference = torch.ops.aten._scaled_dot_product_attention_math(q, k, v)[0]
    torch.testing.assert_close(got, reference, rtol=1e-4, atol=1e-5, equal_nan=True)
    assert torch.equal(got.isnan(), reference.isnan())


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_at_infinity_is_eagers_scalar_path(approximate: str) -> None:
    """Eager's vectorised exact gelu gives NaN at +inf, its scalar path +inf (the IEEE value of
    x/2 * (1 + erf(x/sqrt 2))); kernelgen gives the scalar path's answer at every size: +inf at +inf, and
    -inf * 0 = NaN at -inf, as both eager paths do."""
    fast = kernelgen.compile(lambda x: F.gelu(x, approximate=approximate))
    scalar = [F.gelu(torch.tensor([v]), approximate=approximate).item() for v in (float("inf"), -float("inf"))]
    for n in (1, 3, 64):
        x = torch.tensor([float("inf"), -float("inf")] * n)
        got = fast(x)
        assert got[0].item() == scalar[0] == float("inf")
        assert got[1].isnan() and torch.tensor(scalar[1]).isnan()


def _overflowing_rows(dtype: torch.dtype) -> torch.Tensor:
    """Rows of the dtype's largest value, of +-that value, one row with a single 2**70 among normals, and a
    row of normals: eager's float32 moments overflow on the first three."""
    big = torch.finfo(dtype).max
    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(0))
    x[0] = big
    x[1] = big
    x[1, ::2] = -big
    x[2, 100] = 2.0 ** 70
    return x.to(dtype)


def _layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b).relu()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("path", ["compile", "backend"])
def test_layer_norm_of_overflowing_rows_is_nan_as_in_eager(dtype: torch.dtype, path: str) -> None:
    """Eager's CPU layer norm computes a row's moments in float32 and has no statistics for a row holding a value
    of 2**64 or more: NaN for rows of +-FLT_MAX, NaN or zeros (by where the value sits among its vector lanes) for
    one huge value. kernelgen gives such rows NaN, in ``kernelgen.compile`` and through the backend alike (which
    gave 0.0: its decomposed ``var_mean`` stayed finite), and every other row eager's values."""
    from kernelgen.frontend import dynamo_backend

    x = _overflowing_rows(dtype)
    g = torch.Generator().manual_seed(1)
    w, b = torch.randn(256, generator=g).to(dtype), torch.randn(256, generator=g).to(dtype)
    want = _layer_norm(x, w, b)
    if path == "compile":
        fast = kernelgen.compile(_layer_norm)
        got = fast(x, w, b)
        assert fast.explain(x, w, b)["implementation"] == "reduction"
    else:
        torch._dynamo.reset()
        with dynamo_backend.collect() as graphs:
            got = torch.compile(_layer_norm, backend="kernelgen")(x, w, b)
        assert sum(s.runs.get("kernel", 0) for s in graphs) >= 1  # a kernel computed it, not eager's replay
    assert want[:2].isnan().all()  # eager: rows of +-max are NaN
    # eager's row with one huge value: NaN, or no normalised value left (zeros times w, plus b)
    assert want[2].isnan().all() or torch.equal(want[2], b.relu())
    assert got[:3].isnan().all()
    torch.testing.assert_close(got[3], want[3], equal_nan=False)
