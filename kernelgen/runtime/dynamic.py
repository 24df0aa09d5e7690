"""Shape families: which dims of a call vary at run time, the graph one generic kernel is built from, and
the size buckets tuning records are kept per.

Which dims are dynamic (``kernelgen.compile(fn, dynamic=...)``), dim 0 of tensor arguments only (the batch
dim, the one that varies between calls of serving and training code):

- ``None`` (default): static until a second distinct dim-0 size of the same layout is seen, then dynamic,
  as ``torch.compile`` does;
- ``True``: every tensor argument's dim 0 from the first call; ``False``: every size is its own kernel;
- ``{"x": [0], ...}`` or ``{0: [0]}``: exactly these arguments' dim 0, from the first call.

A dim joins a family only where a kernel can take it as a number: size >= 2 (0 and 1 are specialised,
as Dynamo does: a size-1 dim broadcasts) and dim 0 outermost in memory (so no other stride depends on
it). By default only the highest-rank tensors' dim 0 is dynamic (a lower-rank weight or bias is
broadcast over the batch). Every dynamic dim of one call has the same size (one run-time size ``n0``);
a function whose graph is not the same at every batch size is compiled per size.

Buckets: a size ``n`` falls in bucket ``bucket(n)``, the smallest power of two >= n. A bucket's tuned
config is the record of the graph at the bucket's size (its representative), so records keep the plain
workload key of a static graph and need no schema change; a record of the exact size wins over it.
``kernelgen tune`` writes them for a manifest size range, ``tune="auto"`` for the first size of a bucket
(``kernelgen.tune.bucket``, measuring the family's generic kernel at the representative size).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from kernelgen.errors import KernelgenError
from kernelgen.ir.values import TensorSpec
from kernelgen.runtime.signature import value_key

SENTINELS = (37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97)  # primes: rarely a static dim of a graph
MAX_REPRESENTATIVES = 12  # buckets a manifest range tunes at most (spaced evenly over the range, in log2)


def bucket(n: int) -> int:
    """The size bucket of ``n``: the smallest power of two >= ``n`` (0 and 1 are their own buckets)."""
    return n if n <= 1 else 1 << (n - 1).bit_length()


def neighbour_buckets(b: int) -> tuple[int, ...]:
    """Size buckets (powers of two, ``bucket``) whose records serve bucket ``b``,
    best first: ``b`` itself, then the bucket below and the one above (one step in log2 size, the
    nearest in ``shape_distance``). A size with no record of its own runs the first tuned one."""
    return (b, b // 2, b * 2) if b >= 4 else (b, b * 2)


def representatives(lo: int, hi: int, limit: int = MAX_REPRESENTATIVES) -> list[int]:
    """One size per bucket that ``[lo, hi]`` touches (the bucket's own size), at most ``limit``, spaced
    evenly over the range: the sizes ``kernelgen tune`` tunes for a size range."""
    if lo < 1 or hi < lo:
        raise KernelgenError(f"size range {{min = {lo}, max = {hi}}} is empty or below 1; use 1 <= min <= max")
    sizes = sorted({bucket(lo)} | {1 << k for k in range(bucket(lo).bit_length(), bucket(hi).bit_length())})
    if len(sizes) > limit:
        step = (len(sizes) - 1) / (limit - 1)
        sizes = sorted({sizes[round(i * step)] for i in range(limit)})
    return sizes


def parse(dynamic: Any, param_names: Sequence[str]) -> Any:
    """``dynamic=`` of ``kernelgen.compile`` checked: None, True, False, or a frozenset of argument indices."""
    if dynamic is None or isinstance(dynamic, bool):
        return dynamic
    if not isinstance(dynamic, dict):
        raise KernelgenError(f"dynamic={dynamic!r} is not understood; use None, True, False or "
                             "{'argument name': [0]}")
    chosen = set()
    for name, dims in dynamic.items():
        index = name if isinstance(name, int) else (list(param_names).index(name) if name in param_names else None)
        if index is None:
            raise KernelgenError(f"dynamic names argument {name!r}, which the function does not take; "
                                 f"use one of {list(param_names)}")
        if list(dims) not in ([0], []):
            raise KernelgenError(f"dynamic={{{name!r}: {list(dims)}}}: only dim 0 (the batch dim) can be dynamic; "
                                 f"use {{{name!r}: [0]}}")
        if dims:
            chosen.add(index)
    return frozenset(chosen)


def eligible(t: Any) -> bool:
    """Whether tensor ``t``'s (or a ``TensorSpec``'s) dim 0 can be a run-time size: >= 2 and outermost in memory."""
    shape = t.shape
    if len(shape) == 0 or shape[0] < 2:
        return False
    strides = t.effective_strides() if hasattr(t, "effective_strides") else t.stride()
    return all(strides[0] >= strides[d] * shape[d] for d in range(1, len(shape)))


def dynamic_dims(values: Sequence[Any], allowed: frozenset[int] | None) -> tuple[int, ...]:
    """Indices of the tensor values whose dim 0 is dynamic: eligible, in ``allowed`` (None: those of the
    highest rank, the activations: a lower-rank tensor is a weight or bias broadcast over the batch, whose
    dim 0 only equals the batch size by chance), and of the size of the first one (one run-time size)."""
    import torch

    found = [(i, v) for i, v in enumerate(values)
             if isinstance(v, torch.Tensor) and (allowed is None or i in allowed) and eligible(v)]
    if allowed is None and found:
        rank = max(v.dim() for _, v in found)
        found = [(i, v) for i, v in found if v.dim() == rank]
    return tuple(i for i, v in found if v.shape[0] == found[0][1].shape[0])


def family_key(values: Sequence[Any], dims: Sequence[int]) -> tuple:
    """The key of the shape family of a call whose tensors ``dims`` have a dynamic dim 0: the call's
    signature key with those sizes left out. Calls with equal family keys run one generic kernel.

    This is the seam for callers that know the dynamic dims themselves (Dynamo's ``mark_dynamic`` or
    automatic dynamic shapes in the torch.compile backend): pass the argument indices whose dim 0 is
    dynamic."""
    dyn = set(dims)
    key: list[Any] = [tuple(dims)]
    for i, v in enumerate(values):
        part = value_key(i, v)
        if i in dyn:
            part = (part[0], (None, *part[1][1:]), *part[2:])
        key.append(part)
    return tuple(key)


def sentinel_for(values: Sequence[Any]) -> int:
    """A sentinel batch size found in no dim of any tensor value (the family graph is traced at it)."""
    used = {int(s) for v in values for s in getattr(v, "shape", ())}
    for s in SENTINELS:
        if s not in used:
            return s
    raise KernelgenError("every sentinel size is a dim of the inputs; this call is compiled for its exact shapes")


def sized_specs(values: Sequence[Any], dims: Sequence[int], size: int) -> list[Any]:
    """The call values (tensors or ``TensorSpec``s) with each dynamic one replaced by its ``TensorSpec`` at
    batch size ``size``."""
    out = list(values)
    for i in dims:
        spec = values[i] if isinstance(values[i], TensorSpec) else TensorSpec.of(values[i])
        out[i] = TensorSpec((size, *spec.shape[1:]), spec.dtype, spec.effective_strides())
    return out


def substitute(graph: Any, old: int, new: int) -> Any:
    """``graph`` with every node's dim 0 of size ``old`` set to ``new`` (strides kept: dim 0 is outermost)."""
    def spec_at(spec: TensorSpec) -> TensorSpec:
        if not spec.shape or spec.shape[0] != old:
            return spec
        strides = None if spec.strides is None else spec.strides
        return TensorSpec((new, *spec.shape[1:]), spec.dtype, strides)

    nodes = tuple(replace(n, spec=spec_at(n.spec)) for n in graph.nodes)
    return type(graph)(nodes, graph.outputs, graph.dynamic if graph.dynamic != old else 0)


def family_graph(trace: Any, values: Sequence[Any], dims: Sequence[int]) -> tuple[Any, Any] | None:
    """``(capture, sentinel)``: ``trace(values)`` (a ``Capture``) at a sentinel batch size, its graph marked
    shape-generic; None when the function's graph is not the same graph at every batch size (a size baked
    into an attribute, a dim 0 that is not the batch, a stride that depends on it).

    Verified by tracing at two sentinels: the graphs must be equal once each sentinel is renamed."""
    try:
        first = sentinel_for(values)
        second = next(s for s in SENTINELS if s > first and s not in {int(d) for v in values
                                                                     for d in getattr(v, "shape", ())})
    except (KernelgenError, StopIteration):
        return None
    try:
        cap = trace(sized_specs(values, dims, first))
        other = trace(sized_specs(values, dims, second))
    except KernelgenError:
        return None
    graph = cap.graph
    if substitute(other.graph, second, first).to_json() != graph.to_json() or \
            any(first in n.spec.shape[1:] for n in graph.nodes) or first in _attr_ints(graph):
        return None
    marked = type(graph)(graph.nodes, graph.outputs, first)
    return replace(cap, graph=marked), first


def _attr_ints(graph: Any) -> set[int]:
    return {v for n in graph.nodes for _, v in n.attrs if isinstance(v, int) and not isinstance(v, bool)}


__all__ = ["bucket", "dynamic_dims", "eligible", "family_graph", "family_key", "neighbour_buckets", "parse",
           "representatives", "sentinel_for", "sized_specs", "substitute"]
