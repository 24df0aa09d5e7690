"""Differential testing of ``kernelgen.compile`` against eager PyTorch on PyTorch's own OpInfo samples.

For every OpInfo whose op kernelgen's lowering claims (derived from the lowering's handler table, never a hand
list), each sample of each dtype kernelgen supports runs through ``kernelgen.compile(..., backend=...)`` and
eagerly, as given and in variants: a non-contiguous copy, NaN/±Inf written into float inputs, integer
extremes written into integer inputs, float inputs that require grad. Each run has one outcome:

- ``pass``: a kernelgen kernel ran and equals eager (dtype, shape, structure, values within the dtype's
  tolerance with NaN placement, input mutation), or eager raised and kernelgen raised the same type or a
  ``KernelgenError``;
- ``fallback``: kernelgen ran the function eagerly (``explain()['implementation'] == 'eager'``), allowed
  (compiled with ``partition=False``: the sweep checks kernelgen's own lowering of each op, so a sample it
  does not lower runs eagerly instead of through the torch.compile backend's regions);
- ``fail``: a mismatch, or an exception eager did not raise.

The ``grad`` variant makes float inputs require grad and also compares the gradients of the outputs' sum.

It lives in the package (like ``torch.testing``) so that the CI test and ``benchmarks/bench_opinfo.py`` share
one harness without path tricks; nothing in kernelgen imports it. ``torch.testing._internal`` needs the
``expecttest`` package (in kernelgen's ``dev`` extra).
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

import kernelgen
from kernelgen.lowering.lower import handled_ops, op_name
from kernelgen.testing import device_for

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32,
          torch.int64, torch.uint8, torch.bool)
VARIANTS = ("sample", "noncontig", "nonfinite", "extremes", "grad")
STATUSES = ("pass", "fallback", "fail")


@dataclass(frozen=True)
class Case:
    """One run: which op, dtype, sample (index and variant), and what kind of inputs it had."""

    op: str  # OpInfo full name, e.g. "nn.functional.gelu" or "max.binary"
    dtype: torch.dtype
    index: int
    variant: str
    kinds: frozenset[str]  # "0-d", "empty", "grad": input kinds another part of kernelgen owns


@dataclass(frozen=True)
class Outcome:
    case: Case
    status: str  # one of STATUSES
    detail: str = ""


def op_infos(names: Iterable[str] | None = None) -> list[Any]:
    """OpInfos whose op (or method variant) is an op kernelgen's lowering has a handler for, optionally only
    those whose full name, name or lowered op name (``lowered_name``) is in ``names``."""
    wanted = set(names) if names is not None else None
    return [info for info in _lowered_op_infos()
            if wanted is None or {info.full_name, info.name, lowered_name(info)} & wanted]


@functools.lru_cache(maxsize=1)
def _lowered_op_infos() -> tuple[Any, ...]:
    from torch.testing._internal.common_methods_invocations import op_db  # ~7 s: once per process

    lowered = handled_ops()
    return tuple(info for info in op_db if _callable(info, lowered) is not None)


def lowered_name(info: Any) -> str | None:
    """The lowering handler's name that runs ``info``'s op ("gelu" for nn.functional.gelu), or None."""
    if _callable(info, handled_ops()) is None:
        return None
    name = op_name(info.op) if info.op is not None else None
    return name if name in handled_ops() else getattr(info.method_variant, "__name__", None)


def _callable(info: Any, lowered: frozenset[str]) -> Callable[..., Any] | None:
    """The function the compiled lambda calls: the OpInfo's op, else its method variant, when lowered."""
    if info.op is not None and op_name(info.op) in lowered:  # torch.masked.sum is not torch.sum
        return info.op
    name = getattr(info.method_variant, "__name__", None)
    if name in lowered:  # call it as a method: fx proxies take x.float(), not torch.Tensor.float(x)
        return lambda x, *args, **kwargs: getattr(x, name)(*args, **kwargs)
    return None


def dtypes_of(info: Any, only: Iterable[torch.dtype] | None = None) -> list[torch.dtype]:
    supported = info.supported_dtypes("cpu")
    return [d for d in (only or DTYPES) if d in supported]


# ------------------------------------------------------------------------------------------ input variants

def _noncontig(t: torch.Tensor) -> torch.Tensor:
    """The same values in a tensor whose last dim has stride 2 (a view into a buffer twice as wide)."""
    if t.dim() == 0 or t.numel() <= 1:
        return t.clone()
    wide = torch.empty((*t.shape, 2), dtype=t.dtype, device=t.device)
    out = wide[..., 0]
    out.copy_(t)
    return out


def _flat(t: torch.Tensor) -> torch.Tensor:
    """Every element of ``t`` (a fresh clone: dense, in its own memory order) as one 1-d view (``view(-1)``
    refuses a channels-last sample)."""
    return t.as_strided((t.numel(),), (1,))


def _nonfinite(t: torch.Tensor) -> torch.Tensor:
    """A copy with NaN, +inf and -inf at fixed, spread positions (float tensors only)."""
    t = t.clone()
    if t.is_floating_point() and t.numel():
        flat = _flat(t)
        for k, v in enumerate((float("nan"), float("inf"), -float("inf"))):
            flat[(k * 7 + 1) % flat.numel()::11] = v
    return t


def _extremes(t: torch.Tensor, lowest: bool = True) -> torch.Tensor:
    """A copy with the dtype's max and min (min + 1 unless ``lowest``) at fixed positions (integer tensors)."""
    t = t.clone()
    if not t.is_floating_point() and t.dtype != torch.bool and t.numel():
        info = torch.iinfo(t.dtype)
        flat = _flat(t)
        flat[1 % flat.numel()::5] = info.max
        flat[3 % flat.numel()::7] = info.min if lowest or info.min == 0 else info.min + 1
    return t


# Eager's integer division traps (SIGFPE, the process dies) on INT_MIN / -1, so these ops get min + 1
_INTEGER_DIVISION = frozenset({"div", "floor_divide", "remainder", "fmod"})


_TRANSFORMS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sample": lambda t: t, "noncontig": _noncontig, "nonfinite": _nonfinite, "extremes": _extremes,
    "grad": lambda t: t.clone().requires_grad_(True) if t.is_floating_point() else t}


def _applies(variant: str, tensors: list[torch.Tensor]) -> bool:
    if variant in ("nonfinite", "grad"):
        return any(t.is_floating_point() and t.numel() for t in tensors)
    if variant == "extremes":
        return any(not t.is_floating_point() and t.dtype != torch.bool and t.numel() for t in tensors)
    if variant == "noncontig":
        return any(t.dim() and t.numel() > 1 for t in tensors)
    return True


# ----------------------------------------------------------------------------------------- one sample run

# fx makes one placeholder per named parameter, so the compiled function has a fixed arity
_ARITY: tuple[Callable[[Callable[..., Any]], Callable[..., Any]], ...] = (
    lambda c: lambda a: c(a), lambda c: lambda a, b: c(a, b), lambda c: lambda a, b, d: c(a, b, d),
    lambda c: lambda a, b, d, e: c(a, b, d, e), lambda c: lambda a, b, d, e, f: c(a, b, d, e, f),
    lambda c: lambda a, b, d, e, f, g: c(a, b, d, e, f, g))


def _split(sample: Any) -> tuple[list[torch.Tensor], Callable[[list[Any]], tuple[Any, tuple, dict]]]:
    """The sample's tensors, and a function rebuilding (input, args, kwargs) from replacements for them
    (non-tensor arguments stay closure constants)."""
    leaves, spec = pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]

    def rebuild(tensors: list[Any]) -> tuple[Any, tuple, dict]:
        values = list(leaves)
        for slot, t in zip(slots, tensors):
            values[slot] = t
        return pytree.tree_unflatten(values, spec)

    return [leaves[i] for i in slots], rebuild


def _kinds(tensors: list[torch.Tensor]) -> frozenset[str]:
    kinds = set()
    if any(t.dim() == 0 for t in tensors):
        kinds.add("0-d")
    if any(t.numel() == 0 for t in tensors):
        kinds.add("empty")
    if any(t.requires_grad for t in tensors):
        kinds.add("grad")
    return frozenset(kinds)


def _tolerance(dtype: torch.dtype) -> dict[str, float]:
    if not dtype.is_floating_point:
        return dict(rtol=0, atol=0)
    # torch.testing's defaults, a little wider for float32/float64 reductions summed in another order
    return {torch.float16: dict(rtol=1e-3, atol=1e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2),
            torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-7, atol=1e-7)}[dtype]


def _compare(got: Any, want: Any) -> str:
    """'' when ``got`` is eager's ``want`` in structure, dtype, shape and value; else why not."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"returned {type(got).__name__}, eager a tensor"
        if got.dtype != want.dtype or got.shape != want.shape:
            return f"returned {got.dtype}{list(got.shape)}, eager {want.dtype}{list(want.shape)}"
        try:
            torch.testing.assert_close(got, want, equal_nan=True, check_stride=False, **_tolerance(want.dtype))
        except AssertionError as exc:
            return " ".join(str(exc).split())[:300]
        return ""
    if isinstance(want, (tuple, list)):
        if type(got) is not type(want) or len(got) != len(want):
            return f"returned {type(got).__name__} of {len(got) if isinstance(got, (tuple, list)) else '-'}, " \
                   f"eager {type(want).__name__} of {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            why = _compare(g, w)
            if why:
                return f"[{i}] {why}"
        return ""
    return "" if got == want else f"returned {got!r}, eager {want!r}"


def run_case(fn: Callable[..., Any], sample: Any, case: Case, backend: str) -> Outcome:
    """Run one (sample, variant) through kernelgen and eagerly and classify the outcome."""
    tensors, rebuild = _split(sample)
    transform = _TRANSFORMS[case.variant]
    if case.variant == "extremes" and case.op.split(".")[0] in _INTEGER_DIVISION:
        transform = functools.partial(_extremes, lowest=False)
    inputs = [transform(t.detach()) for t in tensors]

    def call(*ts: Any) -> Any:
        x, args, kwargs = rebuild(list(ts))
        return fn(x, *args, **kwargs)

    eager_inputs = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]  # leaves, like inputs
    try:
        want = call(*eager_inputs)
        eager_error: Exception | None = None
    except Exception as exc:  # eager's own error is the contract too
        want, eager_error = None, exc
    if not inputs:
        return Outcome(case, "fallback", "no tensor inputs")
    if len(inputs) > len(_ARITY):
        return Outcome(case, "fallback", f"{len(inputs)} tensor inputs (harness supports {len(_ARITY)})")
    compiled = kernelgen.compile(_ARITY[len(inputs) - 1](call), backend=backend, partition=False)
    try:
        got = compiled(*inputs)
    except Exception as exc:
        # eager's error type, or a KernelgenError (which names the problem and the fix, issue 15 item 4)
        if eager_error is not None and (type(exc) is type(eager_error) or isinstance(exc, kernelgen.KernelgenError)):
            return Outcome(case, "pass", f"raised {type(exc).__name__} where eager raised {type(eager_error).__name__}")
        return Outcome(case, "fail", f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
                       + (f" (eager raised {type(eager_error).__name__})" if eager_error else ""))
    if eager_error is not None:
        return Outcome(case, "fail", f"returned a value; eager raised {type(eager_error).__name__}: {eager_error}")
    why, note = _compare(got, want), ""
    if why and not _compare(got, _eager_in_other_layout(call, inputs)):
        # eager disagrees with itself (float32 gelu(+inf) is nan on contiguous tensors, inf on strided ones):
        # either of its answers is eager's
        why, note = "", f"matches eager on another layout; on this one: {why}"
    why = why or _compare(inputs, eager_inputs) or _compare_grads(got, want, inputs, eager_inputs)
    if why:
        return Outcome(case, "fail", why)
    try:
        eager = compiled.explain(*inputs)["implementation"] == "eager"
    except Exception as exc:  # explain re-enters dispatch; its failure is a finding, not a crash of the suite
        return Outcome(case, "fail", f"explain() raised {type(exc).__name__}: {exc}")
    return Outcome(case, "fallback" if eager else "pass", note)


def _eager_in_other_layout(call: Callable[..., Any], inputs: list[torch.Tensor]) -> Any:
    """Eager's result on the same values laid out differently (strided copies of contiguous inputs, and
    contiguous copies of strided ones), or None when it raises."""
    with torch.no_grad():
        other = [t.contiguous().clone() if not t.is_contiguous() else _noncontig(t) for t in inputs]
        try:
            return call(*other)
        except Exception:
            return None


def _compare_grads(got: Any, want: Any, inputs: list[torch.Tensor], eager_inputs: list[torch.Tensor]) -> str:
    """'' when ``got`` carries eager's gradients: outputs that require grad in eager do here, and the grads of
    the sum of the float outputs with respect to the inputs are equal."""
    wants = [w for w in pytree.tree_leaves(want) if isinstance(w, torch.Tensor) and w.requires_grad]
    if not wants:
        return ""
    gots = [g for g in pytree.tree_leaves(got) if isinstance(g, torch.Tensor) and g.is_floating_point()]
    if not gots or not all(g.requires_grad for g in gots):
        return "output carries no gradient (eager's has a grad_fn): autograd dropped"
    leaves = [i for i, t in enumerate(inputs) if t.requires_grad]
    try:
        g_want = torch.autograd.grad(sum(w.sum() for w in wants), [eager_inputs[i] for i in leaves], allow_unused=True)
    except RuntimeError as exc:  # eager has no derivative (floor_divide): the kernel's backward must refuse too
        eager_error: RuntimeError | None = exc
    else:
        eager_error = None
    try:
        g_got = torch.autograd.grad(sum(g.sum() for g in gots), [inputs[i] for i in leaves], allow_unused=True)
    except RuntimeError as exc:
        return "" if eager_error is not None else f"backward raised RuntimeError: {' '.join(str(exc).split())[:200]}"
    if eager_error is not None:
        return f"backward ran where eager's raised: {' '.join(str(eager_error).split())[:200]}"
    return _compare([g if g is not None else torch.zeros(0) for g in g_got],
                    [w if w is not None else torch.zeros(0) for w in g_want])


def _spread(samples: list[Any], k: int) -> list[Any]:
    """``k`` samples evenly spaced over the list: OpInfo lists samples by rank (the reductions' first four are
    0-d), so the first ``k`` would test one kind of input only."""
    if len(samples) <= k:
        return samples
    if k == 1:
        return samples[len(samples) // 2:][:1]
    return [samples[round(i * (len(samples) - 1) / (k - 1))] for i in range(k)]


def run_op(info: Any, backend: str = "cpp", dtypes: Iterable[torch.dtype] | None = None, max_samples: int = 4,
           variants: Iterable[str] = VARIANTS, max_variant_samples: int = 2) -> list[Outcome]:
    """Outcomes of ``max_samples`` of ``info``'s samples per dtype (spread over its list) as given, and of the
    first ``max_variant_samples`` of those in each other variant that applies to their inputs."""
    fn = _callable(info, handled_ops())
    if fn is None:
        return []
    outcomes = []
    logger = logging.getLogger("kernelgen")
    level = logger.level
    logger.setLevel(logging.ERROR)  # every fallback logs a warning once per function: thousands here
    try:
        with warnings.catch_warnings():  # eager's own warnings on OpInfo's edge samples (var of one element...)
            warnings.simplefilter("ignore")
            for dtype in dtypes_of(info, dtypes):
                samples = _spread(sample_inputs(info, device_for(backend), dtype), max_samples)
                for index, sample in enumerate(samples):
                    tensors, _ = _split(sample)
                    for variant in variants:
                        if variant != "sample" and (index >= max_variant_samples or not _applies(variant, tensors)):
                            continue
                        kinds = _kinds(tensors) | ({"grad"} if variant == "grad" else set())
                        case = Case(info.full_name, dtype, index, variant, frozenset(kinds))
                        outcomes.append(run_case(fn, sample, case, backend))
    finally:
        logger.setLevel(level)
    return outcomes


def table(outcomes: Iterable[Outcome]) -> list[tuple[str, int, int, int]]:
    """(op, passed, fell back, failed) per op, in first-seen order."""
    counts: dict[str, list[int]] = {}
    for o in outcomes:
        counts.setdefault(o.case.op, [0, 0, 0])[STATUSES.index(o.status)] += 1
    return [(op, *c) for op, c in counts.items()]  # type: ignore[misc]


def sample_inputs(info: Any, device: str, dtype: torch.dtype, requires_grad: bool = False) -> list:
    """``info.sample_inputs(device, dtype, requires_grad=...)`` as a list, without PyTorch's search for the test.

    PyTorch's sample iterator (``TrackedInputIter``, ``OpInfo._sample_callback_fn``) walks the whole call stack
    with ``inspect.stack()``, which reads every frame's source lines, looking for a ``unittest.TestCase`` to hang
    sample skips and the tracked input on. This harness and the tests calling it are not ``TestCase`` methods,
    so the walk always returns None; measured here, 0.21 s per call (two walks under pytest's deep stack), 45% of
    a C++ OpInfo test (``add``: 4.3 of 9.1 s, ten dtypes). The lookup is answered None for these calls."""
    from unittest import mock

    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core

    def no_test_fn() -> None:
        return None

    with mock.patch.object(common_utils, "extract_test_fn", no_test_fn), \
            mock.patch.object(core, "extract_test_fn", no_test_fn):
        return list(info.sample_inputs(device, dtype, requires_grad=requires_grad))


__all__ = ["Case", "DTYPES", "Outcome", "STATUSES", "VARIANTS", "dtypes_of", "lowered_name", "op_infos", "run_case",
           "run_op", "sample_inputs", "table"]
