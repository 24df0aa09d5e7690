"""A shape family's generic implementation at one size bucket: what runs at every size of the bucket, measured
and recorded under the static graph of the bucket's size (``kernelgen.tune.bucket`` tunes it; dispatch's
shape families take its default).
"""

from __future__ import annotations

from typing import Any

from kernelgen.ir.graph import Graph
from kernelgen.ir.implementation import Implementation, Launcher
from kernelgen.ir.space import SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config
from kernelgen.runtime.implementations import implementations_for, resolve


class BucketMember(Implementation):
    """The generic implementation ``generic`` (its graph shape-generic) at one batch size: ``graph`` is the
    static graph there. Same name and source hash as ``generic``, so its records are that implementation's;
    the search space is the generic kernel's, with the default the template picks for this size."""

    worker_factory = "kernelgen.runtime.bucket_member:rebuild"  # the worker rebuilds it from ``worker_args``

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
    return BucketMember(resolve(Graph.from_json(family), implementation, backend), graph)


__all__ = ["BucketMember", "rebuild"]
