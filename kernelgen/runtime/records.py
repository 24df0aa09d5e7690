"""The database lookup and tuning job of ``CompiledFunction``: the best recorded (implementation, config) of a
graph on a target, tuned first with ``tune="auto"`` through the tuner the public API installs.

A mixin: it reads ``db_arg``, ``team_db``, ``trials``, ``seconds``, ``tune``, ``__name__`` and
``workload_name`` of the compiled function. A database that cannot serve is reported once per process.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from kernelgen.errors import KernelgenError
from kernelgen.ir.target import similar_families
from kernelgen.ir.values import Evidence
from kernelgen.runtime.aten import NAME as ATEN
from kernelgen.runtime.seams import installed_tuner

log = logging.getLogger("kernelgen.runtime")
_DBS: dict[tuple, Any] = {}  # open databases by (url, team url): opening one costs ~30 ms
_DB_LOCK = threading.Lock()
_DB_WARNED: set[str] = set()  # database problems already reported: once per process, not once per region


def _warn_db(problem: str) -> None:
    """Say once that the tuning database cannot serve (kernels still run, on their default configs)."""
    with _DB_LOCK:
        if problem in _DB_WARNED:
            return
        _DB_WARNED.add(problem)
    log.warning("kernelgen: %s; kernels run on their default configs", problem)


GEMM_PAIR = ("aten_gemm", "gemm")  # ATen's matmul + epilogue vs the generated GEMM: the pair families rank
_FAVOURITES: dict[tuple[int, str], str | None] = {}
MIN_VERDICTS = 3  # verdicts between the pair a family needs before they, not the constant, order them (2/3 majority)


def gemm_favourite(db: Any, target: Any) -> str | None:
    """Which of ``GEMM_PAIR`` won at least two thirds of the declared verdicts on this target's family (else the
    nearest similar family with at least ``MIN_VERDICTS``); None without such evidence. Counted once per process
    and database."""
    key = (id(db), target.family)
    with _DB_LOCK:
        if key in _FAVOURITES:
            return _FAVOURITES[key]
    found = None
    try:
        for family in similar_families(target.family):
            wins = {name: 0 for name in GEMM_PAIR}
            for record in db.records(target=family):
                if record.evidence is Evidence.DECLARED and record.implementation in wins:
                    wins[record.implementation] += 1
            if sum(wins.values()) >= MIN_VERDICTS:  # the nearest family with evidence decides, by a clear majority
                leader = max(GEMM_PAIR, key=lambda name: wins[name])
                found = leader if 3 * wins[leader] >= 2 * sum(wins.values()) else None
                log.info("untuned GEMMs on %s: %s won %d of %d recorded verdicts on %s%s", target.family, leader,
                         wins[leader], sum(wins.values()), family, "" if found else " (no clear majority)")
                break
    except KernelgenError:
        found = None
    with _DB_LOCK:
        _FAVOURITES[key] = found
    return found


def shared_db(db_arg: Any, team_db: str | None) -> Any:
    """The database object the caller passed, or one opened once per process per URL pair (``db_arg`` a URL or
    None: ``KERNELGEN_DB``, else the default file). Raises ``KernelgenError`` when it cannot be opened."""
    if db_arg is not None and not isinstance(db_arg, str):
        return db_arg
    from kernelgen.db import TEAM_DB_ENV, open_db  # deferred: SQLAlchemy costs ~0.2 s, a call with a record

    key = (db_arg or os.environ.get("KERNELGEN_DB"), team_db or os.environ.get(TEAM_DB_ENV))
    with _DB_LOCK:
        if key not in _DBS:
            _DBS[key] = open_db(db_arg, team_url=team_db)
        return _DBS[key]


def usable_best(db: Any, workload_key: str, fingerprint: str, impls: list) -> Any:
    """``TuningDB.best`` over ``impls``, except a record of the ATen candidate that is not the declared verdict:
    ATen's hash follows only torch, the kernels' follow kernelgen's code, so after an upgrade the old rounds'
    ATen record can outlive the kernel that beat it; ATen runs by record only where it won."""
    record = db.best(workload_key, fingerprint, implementations={impl.name: impl.source_hash() for impl in impls})
    if record is not None and record.implementation == ATEN and record.evidence is not Evidence.DECLARED:
        return None
    return record


class RecordChoice:
    """Choose a graph's (implementation, config) from the tuning database, tuning it first when asked."""

    def _choose(self, graph: Any, impls: list, backend: str, target: Any) -> tuple[Any, Any, str]:
        """The best recorded (implementation, config), tuning first when asked; else a similar device's record
        of the same workload (``kernelgen.ir.target.similar_families``); else the first default, the GEMMs
        ordered by which of them won this family's recorded verdicts."""
        record = self._lookup(graph, impls, target)
        source = "db"
        if record is None and self.tune:
            record = self._tune(graph, backend)
            source = "tuned"
        elif record is None:
            record = self._similar(graph, impls, target)
            source = "similar"
        if record is not None:
            for impl in impls:
                if impl.name == record.implementation and impl.space(target).is_valid(record.config):
                    return impl, record.config, source
            log.info("%s: the recorded %s %s is not valid here; using the default config", self.__name__,
                     record.implementation, dict(record.config))
        else:
            log.debug("%s: no tuning record for workload %s on %s", self.__name__, graph.workload_key[:12],
                      target.fingerprint[:12])
        first = self._ranked(impls, target)[0]
        return first, first.default_config(target), "default"

    def _similar(self, graph: Any, impls: list, target: Any) -> Any:
        """The record a similar device holds for this workload: a declared verdict first, else its fastest ok
        record, from the nearest family that has one (this CPU's own family on other machines first)."""
        db = self._quiet_db()
        if db is None:
            return None
        names = {impl.name for impl in impls}
        try:
            for family in similar_families(target.family):
                found = [r for r in db.records(target=family, workload=graph.workload_key, workload_is_name=False)
                         if r.workload_key == graph.workload_key and r.implementation in names and r.measurement.ok
                         and r.target_fingerprint != target.fingerprint and r.measurement.time is not None]
                if found:
                    best = min(found, key=lambda r: (r.evidence is not Evidence.DECLARED, r.measurement.time.median))
                    log.info("%s: no tuning record here; using %s %s, the best record of a similar device (%s)",
                             self.__name__, best.implementation, dict(best.config), family)
                    return best
        except KernelgenError as exc:
            _warn_db(f"tuning database lookup failed ({exc})")
        return None

    def _ranked(self, impls: list, target: Any) -> list:
        """``impls`` with the ATen-GEMM / generated-GEMM pair in the order this family's verdicts favour: the
        constant of ``vendor_gemm_first`` was measured on one CPU; the records of this family (or the nearest
        similar one) say which wins on these CPUs. Unchanged without such verdicts."""
        pair = [i for i, impl in enumerate(impls) if impl.name in GEMM_PAIR]
        if len(pair) != 2:
            return impls
        db = self._quiet_db()
        favourite = None if db is None else gemm_favourite(db, target)
        if favourite is None or impls[pair[0]].name == favourite:
            return impls
        ranked = list(impls)
        ranked[pair[0]], ranked[pair[1]] = impls[pair[1]], impls[pair[0]]
        return ranked

    def _quiet_db(self) -> Any:
        try:
            return self._open_db()
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("kernelgen.db"):
                return None
            raise
        except KernelgenError:
            return None

    def _open_db(self) -> Any:
        return shared_db(self.db_arg, self.team_db)

    def _lookup(self, graph: Any, impls: list, target: Any) -> Any:
        try:
            db = self._open_db()
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("kernelgen.db"):
                return None
            raise
        except KernelgenError as exc:
            _warn_db(f"tuning database unavailable ({exc})")
            return None
        try:
            return usable_best(db, graph.workload_key, target.fingerprint, impls)
        except KernelgenError as exc:
            _warn_db(f"tuning database lookup failed ({exc})")
            return None

    def _tune(self, graph: Any, backend: str) -> Any:
        seconds = self.seconds if self.seconds is not None or self.trials is not None else 60.0
        log.info("%s: no tuning record for this signature; tuning it now (trials %s, seconds %s; one line per trial "
                 "at INFO)", self.__name__, self.trials, seconds)
        return installed_tuner().tune_graph(graph, backend=backend, db=self._open_db(), trials=self.trials,
                                            seconds=seconds, name=self.workload_name)

    def _tune_bucket(self, graph: Any, impls: tuple, size: int) -> Any:
        """tune="auto" for a shape family: tune its generic implementations at the size bucket ``size`` (``graph``
        is the static graph at that batch size); the declared best record, or None when tuning failed."""
        seconds = self.seconds if self.seconds is not None or self.trials is not None else 60.0
        log.info("%s: no tuning record for size bucket %s of its shape family; tuning %s at batch size %s now, "
                 "once for every size of the bucket (trials %s, seconds %s)", self.__name__, size,
                 ", ".join(i.name for i in impls), size, self.trials, seconds)
        try:
            return installed_tuner().tune_bucket(impls, graph, backend=impls[0].backend, db=self._open_db(),
                                                 trials=self.trials, seconds=seconds, name=self.workload_name)
        except KernelgenError as exc:  # the bucket runs its default instead; the next process tries again
            log.warning("%s: tuning size bucket %s failed (%s); it runs the default config", self.__name__, size, exc)
            return None


__all__ = ["GEMM_PAIR", "RecordChoice", "shared_db", "gemm_favourite", "usable_best"]
