"""A shape family at run time: one traced graph, generic kernels, and a config per size bucket.

``Family.create`` traces the function once at a sentinel batch size (``kernelgen.frontend.dynamic``),
matches a template and checks that it renders a shape-generic kernel. ``Family.at(n)`` then serves batch
size ``n`` with no trace and no tuning: the config is the tuning database's record for the exact size,
else for the size's bucket (looked up once per bucket), else the template's default for the bucket; a
kernel is built (and checked in a worker) once per distinct config, never per size.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from kernelgen.db.nearest import neighbour_buckets
from kernelgen.frontend.dynamic import bucket, substitute

log = logging.getLogger("kernelgen")


@dataclass(frozen=True)
class Served:
    """What one batch size runs: a generic launcher, its config, where the config came from."""

    launch: Any
    impl: str
    config: Any
    source: str  # "db" (exact size), "bucket" (the bucket's record), "default"
    bucket: int
    outputs: tuple  # ((torch.Size, torch dtype), ...) at this size


@dataclass
class Family:
    """One generic implementation of a graph family, thread-safe (one lock around first uses)."""

    key: str  # short hash of the family graph, shown by ``explain()``
    cap: Any  # the Capture at the sentinel size (plan, picks, replay are the same at every size)
    sentinel: int
    impl: Any  # the TemplateImplementation of the generic graph
    target: Any
    lookup: Any  # (graph, impls, target) -> record or None: the dispatcher's database lookup
    rivals: tuple = ()  # custom calls of the graph: they win sizes by their records, never by default
    known: frozenset | None = None  # workload keys of this graph with records here (None: ask each time)
    kernels: dict = field(default_factory=dict)  # config key -> launcher
    sources: dict = field(default_factory=dict)  # config key -> the generated source file (explain shows it)
    configs: dict = field(default_factory=dict)  # bucket -> (config, source)
    lock: Any = field(default_factory=threading.Lock)

    @classmethod
    def create(cls, cap: Any, sentinel: int, backend: Any, lookup: Any) -> "Family | None":
        """The family of ``cap.graph`` (marked shape-generic), or None when no template renders a generic
        kernel for it (the caller compiles per size)."""
        from kernelgen.implementation import TemplateImplementation, implementations_for

        impls = [i for i in implementations_for(cap.graph, backend.name) if isinstance(i, TemplateImplementation)]
        if not impls:
            return None
        # Registered custom calls of the graph compete per size: where the database says one of them wins
        # at a size (or its bucket), ``at`` declines and the dispatcher runs that size's winner.
        static = substitute(cap.graph, sentinel, sentinel)
        rivals = tuple(i for i in implementations_for(static, backend.name) if not isinstance(i, TemplateImplementation))
        impl, target = impls[0], backend.target()
        try:
            source = impl.render(impl.default_config(target), target)
        except (ValueError, Exception):  # noqa: BLE001 - a renderer bug on this graph: compile per size instead
            return None
        if "dynamic" not in source.meta:  # this template bakes the batch size in on this backend
            return None
        return cls(cap.graph.workload_key[:12], cap, sentinel, impl, target, lookup, rivals=rivals)

    def _record(self, n: int) -> Any:
        """The database's record of the graph at size ``n``, asked only when the family's first look at the
        database saw one (so a new size with no record costs no query)."""
        graph = self.static_graph(n)
        if self.known is not None and graph.workload_key not in self.known:
            return None
        record = self.lookup(graph, [self.impl], self.target)
        return record if record is not None and self.impl.space(self.target).is_valid(record.config) else None

    def static_graph(self, n: int) -> Any:
        """The graph at batch size ``n``: the one ``kernelgen tune`` records under at that size."""
        return substitute(self.cap.graph, self.sentinel, n)

    def config_for(self, n: int) -> tuple[Any, str]:
        """The config for size ``n``: exact record, else the bucket's record, else the bucket's default."""
        exact = self._record(n)
        if exact is not None:
            return exact.config, "db"
        b = bucket(n)
        with self.lock:
            hit = self.configs.get(b)
        if hit is not None:
            return hit
        # the bucket's record, else a neighbouring bucket's (the nearest tuned size, one bucket away)
        record = next((r for r in (self._record(s) for s in neighbour_buckets(b) if s != n) if r is not None), None)
        if record is not None:
            hit = (record.config, "bucket")
        else:  # no record: a kernel already built serves (a default is not worth a compile at a new size)
            with self.lock:
                built = next(iter(self._configs_by_key.values()), None)
            hit = (built if built is not None else self._bucket_default(b), "default")
        with self.lock:
            self.configs[b] = hit
        return hit

    def _bucket_default(self, b: int) -> Any:
        """The template's default config for the bucket's size, when the generic kernel accepts it."""
        from kernelgen.implementation import TemplateImplementation

        space = self.impl.space(self.target)
        try:
            graph = self.static_graph(b)
            problem = self.impl.template.match(graph)
            if problem is not None:
                config = TemplateImplementation(self.impl.template, problem, self.impl.backend).default_config(self.target)
                if space.is_valid(config):
                    return config
        except Exception:  # noqa: BLE001 - a default is only a preference
            pass
        return space.default()

    def launcher(self, config: Any, may_build: bool) -> tuple[Any, Any] | None:
        """``(config, launcher)`` for ``config``, built and checked once; when ``may_build`` is False or the
        config fails its check, the family's first built kernel (None when there is none yet)."""
        from kernelgen.tune.checked import build_checked

        with self.lock:
            built = self.kernels.get(config.key())
            if built is not None:
                return config, built
            if not may_build and self.kernels:
                key, built = next(iter(self.kernels.items()))
                return self._configs_by_key[key], built
            picked = build_checked([(self.impl, config), (self.impl, self.impl.default_config(self.target))],
                                   self.target)
            if picked is None:
                return None
            launch = getattr(picked.launcher, "launch", picked.launcher)
            self.kernels[picked.config.key()] = launch
            self.sources[picked.config.key()] = getattr(picked.launcher, "source_file", None)
            self._configs_by_key[picked.config.key()] = picked.config
            return picked.config, launch

    def __post_init__(self) -> None:
        self._configs_by_key: dict = {}
        import torch

        self._outputs = [(spec.shape[:1] == (self.sentinel,), spec.shape, getattr(torch, spec.dtype))
                         for spec in self.cap.graph.output_specs]

    def outputs(self, n: int) -> tuple:
        import torch

        return tuple((torch.Size((n, *shape[1:]) if dyn else shape), dtype) for dyn, shape, dtype in self._outputs)

    def rival_wins(self, n: int) -> bool:
        """Whether the database's best record for size ``n`` (else its bucket) is a custom call's."""
        if not self.rivals:
            return False
        for size in dict.fromkeys((n, bucket(n))):
            graph = self.static_graph(size)
            if self.known is not None and graph.workload_key not in self.known:
                continue
            record = self.lookup(graph, [self.impl, *self.rivals], self.target)
            if record is not None:
                return record.implementation != self.impl.name
        return False

    def at(self, n: int, may_build: bool = True) -> Served | None:
        """What batch size ``n`` runs (None: no config of this family passed its check here, or a custom
        call's record wins this size: the caller dispatches it per shape)."""
        if self.rival_wins(n):
            return None
        config, source = self.config_for(n)
        got = self.launcher(config, may_build)
        if got is None:
            return None
        used, launch = got
        if used != config:
            source = "default"
        return Served(launch, self.impl.name, used, source, bucket(n), self.outputs(n))


__all__ = ["Family", "Served"]
