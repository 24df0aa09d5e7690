"""A shape family at run time: one traced graph, generic kernels, and an (implementation, config) per size bucket.

``Family.create`` traces the function once at a sentinel batch size (``kernelgen.runtime.dynamic``) and
keeps every implementation of it that serves any batch size with one built kernel (``shape_generic``: the
generated templates that take the size as an argument, and ATen's GEMM with a generic epilogue, in
``implementations_for``'s order). ``Family.at(n)`` then serves batch size ``n`` with no trace: the
(implementation, config) is the tuning database's record for the exact size, else the record of the size's
bucket (looked up once per bucket); with ``tune="auto"`` a bucket with no record is tuned once, at the
bucket's size, on the family's generic kernels (the tuner ``kernelgen.api`` installs); else a neighbouring bucket's
record, else the first implementation's default. A kernel is built (and checked in a worker) once per
distinct (implementation, config), never per size.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kernelgen.check.verdicts import build_checked, candidates_after
from kernelgen.runtime.bounds import guarded, index_checks
from kernelgen.runtime.bucket_member import BucketMember
from kernelgen.runtime.dynamic import bucket, neighbour_buckets, substitute
from kernelgen.runtime.implementations import implementations_for

log = logging.getLogger("kernelgen")


@dataclass(frozen=True)
class Served:
    """What one batch size runs: a generic launcher, its implementation and config, where the config came from."""

    launch: Any
    impl: Any  # the generic Implementation
    config: Any
    source: str  # "db" (exact size), "bucket" (the bucket's record), "tuned" (tuned now), "default"
    bucket: int
    outputs: tuple  # ((torch.Size, torch dtype), ...) at this size
    path: Any = None  # the generated source file of the launcher (explain shows it)
    capped: bool = False  # the bucket's choice was not built, or not tuned, for the caller's variant cap


@dataclass
class Family:
    """The generic implementations of a graph family, thread-safe (one lock around first uses)."""

    key: str  # short hash of the family graph, shown by ``explain()``
    cap: Any  # the Capture at the sentinel size (plan, picks, replay are the same at every size)
    sentinel: int
    impls: tuple  # the generic Implementations, the untuned choice first
    target: Any
    lookup: Any  # (graph, impls, target) -> record or None: the dispatcher's database lookup
    rivals: tuple = ()  # implementations of the graph that are not generic: they win sizes by their records only
    known: frozenset | None = None  # workload keys of this graph with records here (None: ask each time)
    # (static graph at a bucket's size, generic impls, bucket) -> record or None: tune="auto" for one bucket
    tuner: Callable[[Any, tuple, int], Any] | None = None
    kernels: dict = field(default_factory=dict)  # (implementation, config key) -> launcher
    sources: dict = field(default_factory=dict)  # (implementation, config key) -> the generated source file
    configs: dict = field(default_factory=dict)  # bucket -> (implementation, config, source)
    lock: Any = field(default_factory=threading.Lock)

    @classmethod
    def create(cls, cap: Any, sentinel: int, backend: Any, lookup: Any, tuner: Any = None) -> "Family | None":
        """The family of ``cap.graph`` (marked shape-generic), or None when no implementation serves every
        batch size of it with one kernel (the caller compiles per size)."""
        target = backend.target()
        impls = tuple(i for i in implementations_for(cap.graph, backend.name) if i.shape_generic(target))
        if not impls:
            return None
        # The graph's other implementations (registered custom calls, a template that bakes the size in)
        # compete per size: where the database says one of them wins at a size (or its bucket), ``at``
        # declines and the dispatcher runs that size's winner.
        static = substitute(cap.graph, sentinel, sentinel)
        names = {i.name for i in impls}
        rivals = tuple(i for i in implementations_for(static, backend.name) if i.name not in names)
        return cls(cap.graph.workload_key[:12], cap, sentinel, impls, target, lookup, rivals=rivals, tuner=tuner)

    @property
    def impl(self) -> Any:
        """The untuned choice: the implementation whose default runs where no record says otherwise."""
        return self.impls[0]

    def _by_name(self, name: str) -> Any:
        return next((i for i in self.impls if i.name == name), None)

    def _record(self, n: int) -> tuple[Any, Any] | None:
        """``(implementation, config)`` of the database's record of the graph at size ``n``, asked only when
        the family's first look at the database saw one (so a new size with no record costs no query)."""
        graph = self.static_graph(n)
        if self.known is not None and graph.workload_key not in self.known:
            return None
        return self._usable(self.lookup(graph, list(self.impls), self.target))

    def _usable(self, record: Any) -> tuple[Any, Any] | None:
        impl = None if record is None else self._by_name(record.implementation)
        if impl is None or not impl.space(self.target).is_valid(record.config):
            return None
        return impl, record.config

    def static_graph(self, n: int) -> Any:
        """The graph at batch size ``n``: the one ``kernelgen tune`` records under at that size."""
        return substitute(self.cap.graph, self.sentinel, n)

    def config_for(self, n: int, may_tune: bool = True) -> tuple[Any, Any, str]:
        """``(implementation, config, source)`` for size ``n``: the exact record, else the bucket's record, else
        (with a tuner and ``may_tune``) the bucket tuned now, else a neighbouring bucket's record, else the
        first implementation's default."""
        exact = self._record(n)
        if exact is not None:
            return (*exact, "db")
        b = bucket(n)
        with self.lock:
            hit = self.configs.get(b)
        if hit is not None:
            return hit
        found = self._record(b) if b != n else None
        source = "bucket"
        if found is None and self.tuner is not None:
            if may_tune:
                found, source = self._tune(b), "tuned"
            else:
                self._untuned.add(b)
        if found is None:  # the nearest tuned size, one bucket away
            found = next((r for r in (self._record(s) for s in neighbour_buckets(b)[1:]) if r is not None), None)
            source = "bucket"
        if found is None:  # no record: a kernel already built serves (a default is not worth a compile at a new size)
            with self.lock:
                built = next(iter(self._chosen.values()), None)
            found, source = built or (self.impl, self._bucket_default(self.impl, b)), "default"
        with self.lock:  # later sizes of the bucket: its record, no tuning, no lookup
            self.configs[b] = (*found, "bucket" if source == "tuned" else source)
        return (*found, source)

    def _tune(self, b: int) -> tuple[Any, Any] | None:
        """Tune the family's generic implementations at the bucket's size; the winner, or None."""
        graph = self.static_graph(b)
        found = self._usable(self.tuner(graph, self.impls, b))  # type: ignore[misc]
        if found is not None and self.known is not None:
            self.known = self.known | {graph.workload_key}
        return found

    def _bucket_default(self, impl: Any, b: int) -> Any:
        """``impl``'s default config for the bucket's size, when its generic kernel accepts it."""
        return BucketMember(impl, self.static_graph(b)).default_config(self.target)

    def launcher(self, impl: Any, config: Any, may_build: bool) -> tuple[Any, Any, Any] | None:
        """``(implementation, config, launcher)`` for ``config`` of ``impl``, built and checked once; when
        ``may_build`` is False or every candidate fails its check, the family's first built kernel (None when
        there is none yet). The candidates after the choice: each implementation's default, in rank order."""
        with self.lock:
            key = (impl.name, config.key())
            built = self.kernels.get(key)
            if built is not None:
                return impl, config, built
            if not may_build and self.kernels:
                key, built = next(iter(self.kernels.items()))
                return (*self._chosen[key], built)
            picked = build_checked(candidates_after((impl, config), self.impls, self.target), self.target)
            if picked is None:
                return None
            launch = guarded(getattr(picked.launcher, "launch", picked.launcher), index_checks(self.cap.graph))
            key = (picked.impl.name, picked.config.key())
            self.kernels[key] = launch
            self.sources[key] = getattr(picked.launcher, "source_file", None)
            self._chosen[key] = (picked.impl, picked.config)
            return picked.impl, picked.config, launch

    def __post_init__(self) -> None:
        self._chosen: dict = {}  # (implementation, config key) -> (implementation, config) of each built kernel
        self._untuned: set[int] = set()  # buckets left untuned for the caller's variant cap
        import torch

        self._outputs = [(spec.shape[:1] == (self.sentinel,), spec.shape, getattr(torch, spec.dtype))
                         for spec in self.cap.graph.output_specs]

    def outputs(self, n: int) -> tuple:
        import torch

        return tuple((torch.Size((n, *shape[1:]) if dyn else shape), dtype) for dyn, shape, dtype in self._outputs)

    def rival_wins(self, n: int) -> bool:
        """Whether the database's best record for size ``n`` (else its bucket) is a rival's."""
        if not self.rivals:
            return False
        names = {i.name for i in self.impls}
        for size in dict.fromkeys((n, bucket(n))):
            graph = self.static_graph(size)
            if self.known is not None and graph.workload_key not in self.known:
                continue
            record = self.lookup(graph, [*self.impls, *self.rivals], self.target)
            if record is not None:
                return record.implementation not in names
        return False

    def at(self, n: int, may_build: bool = True) -> Served | None:
        """What batch size ``n`` runs (None: no kernel of this family passed its check here, or a rival's
        record wins this size: the caller dispatches it per shape). ``may_build`` False (the caller's cap on
        compiled variants is reached): no tuning and no new kernel, a kernel the family built serves."""
        if self.rival_wins(n):
            return None
        impl, config, source = self.config_for(n, may_tune=may_build or not self.kernels)
        got = self.launcher(impl, config, may_build or not self.kernels)
        if got is None:
            return None
        used_impl, used, launch = got
        substituted = used != config or used_impl is not impl
        if substituted:
            source = "default"
        capped = not may_build and (substituted or bucket(n) in self._untuned)
        return Served(launch, used_impl, used, source, bucket(n), self.outputs(n),
                      self.sources.get((used_impl.name, used.key())), capped)


__all__ = ["Family", "Served"]
