"""Tuning a shape family at one size bucket: its generic kernels measured at the bucket's size, recorded
under the static graph of that size.

``kernelgen.compile(fn, tune="auto")`` tunes a shape family (``kernelgen.families``) once per size bucket,
not per size. What runs at every size of a bucket is the family's generic kernel (the batch size a run-time
argument), so that is what is measured: a ``BucketMember`` builds the generic implementation, while its
``graph`` is the static graph at the bucket's size (``bucket(n)``, its representative), which draws the
inputs, computes the eager reference and keys the records. The records are those ``kernelgen tune`` writes
for a manifest size range (the plain workload key of the static graph, the implementation's own name and
source hash), so dispatch finds them by bucket and needs no schema of its own. Tuning a static kernel at the
bucket's size instead would measure another kernel: sizes baked in as constants let the compiler unroll and
drop the tails the generic kernel keeps, and its best config need not be the generic kernel's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernelgen.implementation import Implementation, Launcher
from kernelgen.ir import Graph
from kernelgen.space import SearchSpace
from kernelgen.target import Target
from kernelgen.values import Config


class BucketMember(Implementation):
    """The generic implementation ``generic`` (its graph shape-generic) at one batch size: ``graph`` is the
    static graph there. Same name and source hash as ``generic``, so its records are that implementation's;
    the search space is the generic kernel's, with the default the template picks for this size."""

    worker_factory = "kernelgen.tune.bucket:rebuild"  # the worker rebuilds it from ``worker_args``

    def __init__(self, generic: Implementation, graph: Graph) -> None:
        self.inner = generic
        self.graph = graph
        self.name = generic.name
        self.backend = generic.backend
        self.worker_args = {"family": generic.graph.to_json(), "implementation": generic.name}
        self._spaces: dict[str, SearchSpace] = {}

    def source_hash(self) -> str:
        return self.inner.source_hash()

    def space(self, target: Target) -> SearchSpace:
        found = self._spaces.get(target.fingerprint)
        if found is None:
            space = self.inner.space(target)
            default = self._sized_default(target, space)
            found = space if default is None else SearchSpace(space.params, space.constraints, default)
            self._spaces[target.fingerprint] = found
        return found

    def _sized_default(self, target: Target, space: SearchSpace) -> Config | None:
        """The default of the same implementation of the static graph (templates size their defaults, e.g.
        rows per task, by the problem), when the generic kernel accepts it."""
        from kernelgen.implementation import implementations_for

        try:
            static = next((i for i in implementations_for(self.graph, self.backend) if i.name == self.name), None)
            config = None if static is None else static.default_config(target)
        except Exception:  # noqa: BLE001 - a default is only a preference
            return None
        return config if config is not None and space.is_valid(config) else None

    def build(self, config: Config, target: Target) -> Launcher:
        return self.inner.build(config, target)

    def tolerance(self, dtype: str) -> tuple[float, float] | None:
        return self.inner.tolerance(dtype)

    def shape_generic(self, target: Target) -> bool:
        return True

    def __repr__(self) -> str:
        return f"BucketMember({self.inner!r}, batch {self.graph.signature[0].shape[:1]})"


def rebuild(graph: Graph, backend: str, family: dict[str, Any], implementation: str) -> BucketMember:
    """The worker's factory: the member named ``implementation`` of the family graph ``family`` at ``graph``."""
    from kernelgen.implementation import resolve

    return BucketMember(resolve(Graph.from_json(family), implementation, backend), graph)


def members(generic: Sequence[Implementation], graph: Graph) -> list[BucketMember]:
    """The generic implementations ``generic`` of a family at the static graph ``graph`` (one bucket's size)."""
    return [BucketMember(impl, graph) for impl in generic]


def tune_bucket(generic: Sequence[Implementation], graph: Graph, *, backend: str, db: Any, trials: int | None,
                seconds: float | None, name: str | None = None) -> Any:
    """Tune the family's generic implementations at the static graph ``graph`` (a bucket's size) within the
    budget; every trial is committed under ``graph``'s workload key. The declared best record, or None."""
    from kernelgen.tune.tuner import tune_graph

    return tune_graph(graph, backend=backend, db=db, trials=trials, seconds=seconds, name=name,
                      implementations=members(generic, graph)).best


__all__ = ["BucketMember", "members", "rebuild", "tune_bucket"]
