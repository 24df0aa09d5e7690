"""The one checker of a kernel against eager PyTorch: its inputs, its tolerance table, its comparison.

Templates (``kernelgen.check.measure.Bench``) and custom calls (the same ``Bench``, in the same isolated
worker) draw inputs with ``make_inputs`` and compare each output with ``compare`` under ``tolerance``: the
shared per-dtype table, or a custom call's registered ``tolerance=`` in its place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernelgen.ir.values import TensorSpec

# (rtol, atol) per output dtype. Loose enough for vectorised erf/tanh approximations and reordered sums,
# tight enough that a wrong tile index or an unwritten block is far outside. Other dtypes compare exactly.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-6, 1e-7),
    "float32": (1e-3, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (4e-2, 4e-2),
}


FLOAT_RESULTS = frozenset(TOLERANCES)
LOW_PRECISION = frozenset({"float16", "bfloat16"})  # a graph computing in these is judged by ``judge``


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


def _fill(base: Any, kind: str, gen: Any) -> Any:
    """``base`` (a flat random buffer) turned into one value class; see ``VALUE_CLASSES``."""
    import torch

    dtype = base.dtype
    if kind == "zeros":
        return torch.zeros_like(base)
    if dtype == torch.bool:
        return torch.ones_like(base)  # all True: the other extreme of random coins
    if dtype.is_floating_point:
        if kind == "large":  # finite and far from 1: overflow in a square, an index computed from a value
            big = min(torch.finfo(dtype).max ** 0.5, 1e6)
            return base.sign() * big
        special = torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=dtype)
        out = base.clone()
        picks = torch.randint(0, max(1, base.numel()), (max(1, base.numel() // 16),), generator=gen)
        out[picks] = special[torch.arange(picks.numel()) % 3]
        return out
    info = torch.iinfo(dtype)
    if kind == "large":
        return torch.where(base < 0, torch.full_like(base, info.min), torch.full_like(base, info.max))
    return base  # integers have no NaN or Inf: the random values again


# What a hand-written kernel (``Implementation.check_value_classes``) is checked on besides random normals: the
# value classes real data holds that random normals never do.
VALUE_CLASSES = ("zeros", "large", "nan_inf")


def value_class_inputs(signature: Sequence[TensorSpec], kind: str, seed: int = 0) -> list[tuple[Any, Any]]:
    """``make_inputs`` turned into the value class ``kind`` (one of ``VALUE_CLASSES``), same layout."""
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    out = []
    for base, view in make_inputs(signature, seed):
        filled = _fill(base, kind, gen)
        out.append((filled, filled.as_strided(view.shape, view.stride())))
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


# How much further from the exact values than eager's own computation in the same dtype a kernel may be (its error
# beyond its own final rounding, as a root mean square over the tensor and at its worst element). 3 is PyTorch's
# multiplier for the same judgement (``torch._dynamo.utils.same`` with an fp64 reference).
EAGER_ERROR_MULTIPLE = 3.0
# Room for float32 accumulation in another order where eager's own error happens to be ~0, in units of float32's
# epsilon times the exact values' root mean square (a sum of K terms reordered moves ~sqrt(K) epsilons).
ACCUMULATION_EPSILONS = 64.0
# What a cached check verdict was judged by (``kernelgen.check.verdicts`` keys on it): a verdict of another rule
# is judged again, never trusted. 2: low-precision results judged by ``judge`` (1: the table alone).
JUDGEMENT = (2, EAGER_ERROR_MULTIPLE, ACCUMULATION_EPSILONS)


def judge(actual: Any, exact: Any, eager: Any, dtype: str) -> str | None:
    """None when ``actual`` (a float output of ``dtype``) is as close to ``exact`` (the graph in float64,
    ``kernelgen.ir.reference`` precision "exact") as eager's own computation ``eager`` (precision "eager": every op
    rounded to its dtype) is, within ``EAGER_ERROR_MULTIPLE``; else a one-line description.

    A low-precision result is judged as one: a bfloat16 GEMM rounds its output (1/512 of the value) wherever it
    runs, so a fixed relative tolerance either refuses eager's own answer (float32's, on a bfloat16 GEMM cast up)
    or lets a dropped term of a long sum through (bfloat16's 4%, on a K=8192 sum of size ~90). The kernel's error
    is counted beyond half an ulp of its output dtype (the rounding every correct kernel makes at its store), and
    compared at the tensor's root mean square and at its worst element with eager's. Positions where eager or the
    exact values are not finite are not compared; a non-finite result where both are finite fails."""
    import torch

    if tuple(actual.shape) != tuple(exact.shape):
        return f"output shape {list(actual.shape)} differs from the reference's {list(exact.shape)}"
    a, t, e = actual.double(), exact.to(actual.device).double(), eager.to(actual.device).double()
    compared = torch.isfinite(t) & torch.isfinite(e)
    if bool((compared & ~torch.isfinite(a)).any()):
        index = tuple(int(i) for i in torch.nonzero(compared & ~torch.isfinite(a))[0])
        return f"non-finite result where eager's is finite; first at {list(index)}: got {a[index].item()}, " \
               f"expected {t[index].item():.6g}"
    if not bool(compared.any()):
        return None
    a, t, e = a[compared], t[compared], e[compared]
    half_ulp = torch.finfo(getattr(torch, dtype)).eps / 2 * t.abs()
    err = ((a - t).abs() - half_ulp).clamp(min=0)
    eager_err = (e - t).abs()
    floor = ACCUMULATION_EPSILONS * torch.finfo(torch.float32).eps * float(t.square().mean().sqrt())
    rms, eager_rms = float(err.square().mean().sqrt()), float(eager_err.square().mean().sqrt())
    worst, eager_worst = float(err.max()), float(eager_err.max())
    m = EAGER_ERROR_MULTIPLE
    if rms <= m * eager_rms + floor and worst <= m * eager_worst + floor:
        return None
    where = int((err - (m * eager_worst + floor)).argmax()) if worst > m * eager_worst + floor else int(err.argmax())
    return (f"error against the exact values {rms:.3g} rms, {worst:.3g} at worst, where eager's own {dtype} "
            f"computation is {eager_rms:.3g} rms, {eager_worst:.3g} at worst (allowed {m:g}x + {floor:.2g}); "
            f"e.g. got {a[where].item():.6g}, exact {t[where].item():.6g}")


__all__ = ["ACCUMULATION_EPSILONS", "EAGER_ERROR_MULTIPLE", "FLOAT_RESULTS", "JUDGEMENT", "LOW_PRECISION", "judge", "TOLERANCES", "VALUE_CLASSES", "compare", "make_inputs", "poison", "tolerance", "value_class_inputs"]
