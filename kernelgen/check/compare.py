"""The one checker of a kernel against eager PyTorch: its inputs, its tolerance table, its comparison.

Templates (``kernelgen.check.measure.Bench``) and custom calls (the same ``Bench``, in the same isolated
worker) draw inputs with ``make_inputs`` and compare each output with ``compare`` under ``tolerance``: the
shared per-dtype table, or a custom call's registered ``tolerance=`` in its place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernelgen.ir.values import TensorSpec

# (rtol, atol) per output dtype. Loose enough for -ffast-math (vectorised erf/tanh, reassociated sums),
# tight enough that a wrong tile index or an unwritten block is far outside. Other dtypes compare exactly.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-6, 1e-7),
    "float32": (1e-3, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (4e-2, 4e-2),
}


def tolerance(dtype: str, registered: float | None = None) -> tuple[float, float] | None:
    """``(rtol, atol)`` for outputs of ``dtype``: ``registered`` for both when given (a custom call's
    ``tolerance=``), else the table's row; None means exact (integers, bool)."""
    if registered is not None:
        return (registered, registered)
    return TOLERANCES.get(dtype)


def make_inputs(signature: Sequence[TensorSpec], seed: int = 0) -> list[tuple[Any, Any]]:
    """``(storage, view)`` pairs: random values in a flat buffer, viewed with each spec's shape and strides.

    Values are standard normal for floats, small integers for ints, fair coins for bools; the same seed
    gives the same inputs in every process.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for spec in signature:
        strides = spec.effective_strides()
        size = 1 + sum((n - 1) * s for n, s in zip(spec.shape, strides)) if spec.numel else 0
        dtype = getattr(torch, spec.dtype)
        if dtype.is_floating_point:
            base = torch.randn(size, generator=gen, dtype=torch.float32).to(dtype)
        elif dtype == torch.bool:
            base = torch.randint(0, 2, (size,), generator=gen).bool()
        else:  # drawn in its own dtype (the same values as drawing int64 and casting, 1/9 of the memory)
            low = 0 if dtype == torch.uint8 else -8
            base = torch.randint(low, 9, (size,), generator=gen, dtype=dtype)
        out.append((base, base.as_strided(spec.shape, strides)))
    return out


def poison(outputs: Sequence[Any]) -> None:
    """Fill outputs with values no kernel computes by luck, so one it forgets to write fails the check."""
    import torch

    for out in outputs:
        out.fill_(float("nan") if out.dtype.is_floating_point else (True if out.dtype == torch.bool else 77))


def compare(actual: Any, expected: Any, dtype: str, tol: tuple[float, float] | None = None) -> str | None:
    """None when ``actual`` matches ``expected`` within ``tol`` (default ``tolerance(dtype)``), else a
    one-line description of what differs.

    Positions where the reference is not finite are not compared: inputs are random, so log/sqrt of
    negatives is expected there; a kernel that gives a non-finite value where the reference is finite fails.
    """
    import torch

    if tuple(actual.shape) != tuple(expected.shape):
        return f"output shape {list(actual.shape)} differs from the reference's {list(expected.shape)}"
    tol = tol if tol is not None else tolerance(dtype)
    if tol is None:
        bad = actual != expected
        if not bool(bad.any()):
            return None
        index = tuple(int(i) for i in torch.nonzero(bad)[0])
        return (f"{int(bad.sum())} of {bad.numel()} elements differ from the reference (exact {dtype}); "
                f"first at {list(index)}: got {actual[index].item()}, expected {expected[index].item()}")
    rtol, atol = tol
    a, e = actual.double(), expected.to(actual.device).double()
    finite = torch.isfinite(e)
    err = torch.where(finite, (a - e).abs(), torch.zeros_like(e))
    err = torch.where(finite & ~torch.isfinite(a), torch.full_like(e, float("inf")), err)
    bad = err > atol + rtol * e.abs().nan_to_num(0.0)
    if not bool(bad.any()):
        return None
    index = tuple(int(i) for i in torch.nonzero(bad)[0])
    return (f"{int(bad.sum())} of {bad.numel()} elements outside rtol={rtol} atol={atol}; "
            f"max abs error {float(err.max()):.3g}; first at {list(index)}: got {a[index].item():.6g}, "
            f"expected {e[index].item():.6g}")


__all__ = ["TOLERANCES", "compare", "make_inputs", "poison", "tolerance"]
