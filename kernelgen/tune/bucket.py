"""Tuning a shape family at one size bucket: its generic kernels measured at the bucket's size, recorded
under the static graph of that size.

``kernelgen.compile(fn, tune="auto")`` (``kernelgen.tune.auto``) tunes a shape family (``kernelgen.runtime.families``) once per size bucket,
not per size. What runs at every size of a bucket is the family's generic kernel (the batch size a run-time
argument), so that is what is measured: a ``BucketMember`` (``kernelgen.runtime.bucket_member``) builds the generic implementation, while its
``graph`` is the static graph at the bucket's size (``bucket(n)``, its representative), which draws the
inputs, computes the eager reference and keys the records. The records are those ``kernelgen tune`` writes
for a manifest size range (the plain workload key of the static graph, the implementation's own name and
source hash), so dispatch finds them by bucket and needs no schema of its own. Tuning a static kernel at the
bucket's size instead would measure another kernel: sizes baked in as constants let the compiler unroll and
drop the tails the generic kernel keeps, and its best config need not be the generic kernel's.

``kernelgen tune`` does the same for a manifest size range that is the batch (dim 0) of its inputs
(``range_family``, ``range_implementations``): each representative size tunes the generic kernels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kernelgen.backends import get_backend
from kernelgen.errors import KernelgenError
from kernelgen.frontend.capture import trace
from kernelgen.ir.graph import Graph
from kernelgen.ir.implementation import Implementation
from kernelgen.runtime.bucket_member import BucketMember
from kernelgen.runtime.dynamic import eligible, family_graph, substitute
from kernelgen.runtime.implementations import implementations_for


def members(generic: Sequence[Implementation], graph: Graph) -> list[BucketMember]:
    """The generic implementations ``generic`` of a family at the static graph ``graph`` (one bucket's size)."""
    return [BucketMember(impl, graph) for impl in generic]


@dataclass(frozen=True)
class _Traced:
    graph: Graph  # what ``family_graph`` asks of a trace (it replaces the graph with the marked one)


def range_family(fn: Any, specs: Sequence[Any], dims: Sequence[int]) -> Graph | None:
    """The shape-generic graph of ``fn`` over the ``TensorSpec``s ``specs`` with dim 0 of the inputs ``dims``
    the run-time batch size (a manifest size range used as the batch), as ``kernelgen.compile`` builds a shape
    family; None when those dims cannot be a batch size (``eligible``) or the graph is not one family."""
    specs = list(specs)
    sizes = {specs[i].shape[0] for i in dims}
    if not dims or len(sizes) != 1 or not all(eligible(specs[i]) for i in dims):
        return None
    try:
        got = family_graph(lambda values: _Traced(trace(fn, *values)), specs, dims)
    except KernelgenError:
        return None
    return None if got is None else got[0].graph


def batch_size(family: Graph, graph: Graph) -> int | None:
    """The batch size at which ``graph`` is the static graph of the shape-generic ``family``, when it is one a
    family serves (>= 2: sizes 0 and 1 are specialised); else None."""
    dynamic = next((i for i, spec in enumerate(family.signature) if spec.shape[:1] == (family.dynamic,)), None)
    if not family.dynamic or dynamic is None or dynamic >= len(graph.signature) or not graph.signature[dynamic].shape:
        return None
    n = graph.signature[dynamic].shape[0]
    return n if n >= 2 and substitute(family, family.dynamic, n).workload_key == graph.workload_key else None


def range_implementations(family: Graph, graph: Graph, impls: Sequence[Implementation],
                          backend: str) -> list[Implementation]:
    """What ``kernelgen tune`` tunes at one representative size ``graph`` of a manifest size range: each of
    ``impls`` that has a generic version in ``family`` becomes that one's ``BucketMember`` (the kernel dispatch
    runs at every size of the bucket); the others (custom calls, a template that bakes the size in) stay as
    they are. ``impls`` unchanged at a size the family does not serve (1)."""
    if batch_size(family, graph) is None:
        return list(impls)
    target = get_backend(backend).target()
    generic = {i.name: i for i in implementations_for(family, backend) if i.shape_generic(target)}
    return [BucketMember(generic[i.name], graph) if i.name in generic else i for i in impls]


__all__ = ["batch_size", "members", "range_family", "range_implementations"]
