"""The database lookup and tuning job of ``CompiledFunction``: the best recorded (implementation, config) of a
graph on a target, tuned first with ``tune="auto"`` through the tuner the public API installs.

A mixin: it reads ``db_arg``, ``team_db``, ``trials``, ``seconds``, ``tune``, ``__name__`` and
``workload_name`` of the compiled function, and its ``_log_once``.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from kernelgen.errors import KernelgenError
from kernelgen.runtime.seams import installed_tuner

log = logging.getLogger("kernelgen.runtime")
_DBS: dict[tuple, Any] = {}  # open databases by (url, team url): opening one costs ~30 ms
_DB_LOCK = threading.Lock()


class RecordChoice:
    """Choose a graph's (implementation, config) from the tuning database, tuning it first when asked."""

    def _choose(self, graph: Any, impls: list, backend: str, target: Any) -> tuple[Any, Any, str]:
        """The best recorded (implementation, config), tuning first when asked; else the first default."""
        record = self._lookup(graph, impls, target)
        if record is None and self.tune:
            record = self._tune(graph, backend)
            source = "tuned"
        else:
            source = "db"
        if record is not None:
            for impl in impls:
                if impl.name == record.implementation and impl.space(target).is_valid(record.config):
                    return impl, record.config, source
            log.info("%s: the recorded %s %s is not valid here; using the default config", self.__name__,
                     record.implementation, dict(record.config))
        else:
            log.debug("%s: no tuning record for workload %s on %s", self.__name__, graph.workload_key[:12],
                      target.fingerprint[:12])
        return impls[0], impls[0].default_config(target), "default"

    def _open_db(self) -> Any:
        """The database object the caller passed, or one opened once per process per URL pair."""
        if self.db_arg is not None and not isinstance(self.db_arg, str):
            return self.db_arg
        from kernelgen.db import TEAM_DB_ENV, open_db  # deferred: SQLAlchemy costs ~0.2 s, a call with a record

        key = (self.db_arg or os.environ.get("KERNELGEN_DB"), self.team_db or os.environ.get(TEAM_DB_ENV))
        with _DB_LOCK:
            if key not in _DBS:
                _DBS[key] = open_db(self.db_arg, team_url=self.team_db)
            return _DBS[key]

    def _lookup(self, graph: Any, impls: list, target: Any) -> Any:
        try:
            db = self._open_db()
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("kernelgen.db"):
                return None
            raise
        except KernelgenError as exc:
            self._log_once(f"tuning database unavailable ({exc}); using default configs")
            return None
        try:
            return db.best(graph.workload_key, target.fingerprint,
                           implementations={impl.name: impl.source_hash() for impl in impls})
        except KernelgenError as exc:
            self._log_once(f"tuning database lookup failed ({exc}); using default configs")
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


__all__ = ["RecordChoice"]
