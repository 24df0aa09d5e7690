"""Ask/tell search over a ``SearchSpace`` through an Optuna study: samplers by name, budgets, early stop.

The only module of kernelgen that creates Optuna studies. A study may live in any SQLAlchemy URL, so
several processes or hosts can work on one study: each asks for configs nobody has evaluated or is
evaluating. Every evaluated config is one trial carrying its ``Measurement`` in user attributes. A tuning
opens its database's Optuna storage once (``StudyStorage``) for all its studies, and a driver error raised
inside Optuna reaches the caller as kernelgen's one-line ``DatabaseError``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import time
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import Trial, TrialState

from kernelgen.db.engine import (CONNECT_TIMEOUT_S, OPTUNA_POOL, SQLITE_BUSY_TIMEOUT_MS, database_error, parse_url,
                                 pool_options, serialise_sqlite, shown)
from kernelgen.db.locks import SCHEMA_LOCK, named_lock
from kernelgen.errors import KernelgenError
from kernelgen.ir.space import SearchSpace
from kernelgen.ir.values import Config, Measurement
from kernelgen.tune.domain import Domain
from kernelgen.tune.leases import Heartbeat, fail_stale
from kernelgen.tune.samplers import (ATTR_SKIPPED, ATTR_STATUS, BayesSampler, DomainSampler,
                                     ExhaustiveSampler, History, ParamValues, ProjectedSampler, RandomSampler,
                                     distributions)

optuna.logging.set_verbosity(optuna.logging.WARNING)
log = logging.getLogger(__name__)

ATTR_MEASUREMENT = "kg_measurement"
# Study user attribute naming what dispatch runs of the study's implementation (kernelgen.db.verdict): the
# dashboard's "best trial" is the fastest single sample, which the tuner's confirmation rounds may overrule.
ATTR_BEST = "kernelgen_best"
# What "auto" means. Chosen by replaying six recorded GPU landscapes, 30 seeds (benchmarks/bench_search.py):
# GP expected improvement on log times, with value alignment as a feature, after a maximin start, needs
# 0.29x random search's evaluations to reach 5% of the optimum (geometric mean of medians; TPE 0.67x, Kernel
# Tuner's strategies 0.36-0.74x) and has the best result after 50 evaluations (geometric mean of medians
# 1.085x the optimum over 30 seeds, 1.048x over 60, 1.071x over 180 with a 90% bootstrap interval of
# 1.05-1.10x; Kernel Tuner's best 1.161x over 30). On the convolution landscapes about half the runs find
# the best basin within 50 evaluations, so those medians move with the seed set. Each part (log times,
# alignment, maximin start) was kept only if it also helped on sub-landscapes cut from them
# (benchmarks/cut_landscapes.py: one parameter restricted, so the optimum moves). On a landscape never used
# to choose it (convolution on an RTX 2080 Ti over another space, benchmarks/fetch_landscapes.py; 60 seeds,
# Kernel Tuner 30) it reaches 5% in 24 evaluations (0.06x random; Kernel Tuner's best, dual annealing, 64)
# and its median after 50 is the optimum (Kernel Tuner's best 1.126x). Its weak spot is a single-config
# needle (convolution/A100: median 1.43x after 50 over 180 seeds; one of its 4201 configs that run is within
# 5%, and no Kernel Tuner strategy gets a median below 1.26x over 30 seeds). Pooled over all 1080 runs,
# best-after-50 has median 1.003x and 69% of runs end within 5% of the optimum (random 54%, Kernel Tuner's
# best 57% over its 180).
# Two knobs only: start size and candidate count.
DEFAULT_SAMPLER = "bo"
PENALISE_FAILURES = True  # how failures reach Optuna's samplers (tpe, cmaes, qmc); see Searcher.tell
def _tpe(domain: Domain, seed: int | None) -> DomainSampler:
    with warnings.catch_warnings():  # "group" is marked experimental
        warnings.simplefilter("ignore")
        inner = optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True)
    return ProjectedSampler(domain, inner, seed)


def _cmaes(domain: Domain, seed: int | None) -> DomainSampler:
    try:
        import cmaes  # noqa: F401  (Optuna's CmaEsSampler needs it)
    except ImportError:
        raise KernelgenError("sampler 'cmaes' needs the cmaes package: pip install cmaes") from None
    inner = optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False,
                                         independent_sampler=optuna.samplers.RandomSampler(seed=seed))
    return ProjectedSampler(domain, inner, seed)


def _qmc(domain: Domain, seed: int | None) -> DomainSampler:
    with warnings.catch_warnings():  # QMCSampler is marked experimental
        warnings.simplefilter("ignore")
        inner = optuna.samplers.QMCSampler(seed=seed, warn_asynchronous_seeding=False)
    return ProjectedSampler(domain, inner, seed)


# The search strategies by name: a new one is one row here (a factory of a DomainSampler over a Domain).
STRATEGIES: dict[str, Callable[[Domain, int | None], DomainSampler]] = {
    "bo": BayesSampler, "random": RandomSampler, "tpe": _tpe, "cmaes": _cmaes, "qmc": _qmc,
    "exhaustive": ExhaustiveSampler,
}
SAMPLERS: tuple[str, ...] = ("auto", *STRATEGIES)
_HEARTBEAT = Heartbeat()  # one per process: it renews every trial this process is measuring


def make_sampler(name: str, domain: Domain, seed: int | None = None) -> DomainSampler:
    """The sampler called ``name`` over ``domain`` (``auto``: ``DEFAULT_SAMPLER``); raises ``KernelgenError``
    naming the valid names."""
    factory = STRATEGIES.get(DEFAULT_SAMPLER if name == "auto" else name)
    if factory is None:
        raise KernelgenError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")
    return factory(domain, seed)


def _shown(storage: str | None) -> str:
    if storage is None:
        return "memory"
    try:
        return shown(parse_url(storage))
    except KernelgenError:
        return "an invalid URL"


def open_storage(storage: str | None) -> "optuna.storages.BaseStorage | None":
    """Optuna's RDBStorage at the URL ``storage`` (None: in memory), safe for several processes.

    Call it under the database's schema lock (``StudyStorage`` does): RDBStorage creates its tables and stamps
    its alembic version with check-then-write steps that two processes on a fresh database would both take
    ("table ... already exists", "UniqueViolation alembic_version_pkc"). On a server its pool is
    ``OPTUNA_POOL``: opening it holds two connections at once, the heartbeat thread one beside the search's.
    """
    if storage is None:
        return None
    backend = parse_url(storage).get_backend_name()
    if backend == "sqlite":
        kwargs: dict[str, Any] = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}}
    else:
        kwargs = {"connect_args": {"connect_timeout": CONNECT_TIMEOUT_S} if backend == "postgresql" else {},
                  **pool_options(OPTUNA_POOL)}
    rdb = optuna.storages.RDBStorage(storage, engine_kwargs=kwargs)
    serialise_sqlite(rdb.engine)
    return rdb


class StudyStorage:
    """The Optuna storage of one database, opened on first use and shared by every study of a tuning (each
    ``Searcher``, ``mark_best``), then closed: one engine and its bounded pool, where an RDBStorage per study
    left an engine with idle connections behind each one until the garbage collector found it.

    ``lock`` is the database's schema lock as a context manager factory (``lambda: db.lock(SCHEMA_LOCK)``), so
    it is held on one of the tuning database's own connections; without it a short-lived connection holds it.
    Table creation, study creation and warm-start queues are check-then-write steps, each run under it.
    """

    def __init__(self, url: str | None, lock: Callable[[], Any] | None = None) -> None:
        self.url = url
        self._lock = lock
        self._rdb: Any = None
        self._opened = False

    def locked(self) -> Any:
        """The database's schema lock (nothing to lock for an in-memory storage)."""
        if self.url is None:
            return contextlib.nullcontext()
        return self._lock() if self._lock is not None else named_lock(self.url, SCHEMA_LOCK)

    def storage(self) -> "optuna.storages.BaseStorage | None":
        """The storage, opened on first use: call it under ``locked()``."""
        if not self._opened:
            self._rdb = open_storage(self.url)
            self._opened = True
        return self._rdb

    def error(self, exc: BaseException) -> KernelgenError | None:
        """``exc`` (raised inside Optuna) as kernelgen's one-line DatabaseError, or None when it is not a driver's."""
        if self.url is None:
            return None
        try:
            return database_error(exc, parse_url(self.url))
        except KernelgenError as bad_url:
            return bad_url

    def close(self) -> None:
        if self._rdb is not None:
            self._rdb.engine.dispose()
        self._rdb, self._opened = None, False

    def __enter__(self) -> "StudyStorage":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _as_storage(storage: "str | StudyStorage | None") -> StudyStorage:
    return storage if isinstance(storage, StudyStorage) else StudyStorage(storage)


def _database_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """Let a driver error raised inside Optuna leave a ``Searcher`` method as a one-line DatabaseError (a full
    server: ``TooManyConnectionsError``, the environment's failure), never as a SQLAlchemy traceback."""
    @functools.wraps(method)
    def wrapper(self: "Searcher", *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except KernelgenError:
            raise
        except Exception as exc:
            storage = getattr(self, "_storage", None)  # None: __init__ failed before it opened anything
            error = None if storage is None else storage.error(exc)
            if error is None:
                raise
            raise error from None
    return wrapper


@dataclass(frozen=True)
class SearchResult:
    """This run's measurements in evaluation order, the best OK measurement of the study, why it stopped."""

    evaluated: tuple[Measurement, ...]
    best: Measurement | None
    stop_reason: str  # "trials", "seconds", "patience" or "exhausted"


class Searcher:
    """Ask/tell over a SearchSpace through an Optuna study.

    ``ask`` returns a valid config that no trial of the study has evaluated or is evaluating, or None once
    the valid space is exhausted; ``tell`` records its measurement (failures included, as data). Several
    Searchers may share one study through ``storage`` (a SQLAlchemy URL, or a tuning's ``StudyStorage``) and
    ``study_name``. One Searcher is not thread-safe. ``superseded``: owner tokens whose RUNNING trials are stale
    at once (their lease on this work was taken over: ``kernelgen.tune.claims``).
    """

    @_database_errors
    def __init__(self, space: SearchSpace, *, sampler: str = "auto", seed: int | None = None,
                 storage: "str | StudyStorage | None" = None, study_name: str | None = None,
                 warm_start: Sequence[Config] = (), objective_name: str = "time",
                 user_attrs: Mapping[str, Any] | None = None, superseded: Collection[str] = ()) -> None:
        self.space = space
        self.domain = Domain(space)
        self.sampler_name = DEFAULT_SAMPLER if sampler == "auto" else sampler
        self._sampler = make_sampler(sampler, self.domain, seed)
        self._pending: dict[Config, Trial] = {}
        self._penalise_failures = PENALISE_FAILURES and isinstance(self._sampler, ProjectedSampler)
        self._storage = _as_storage(storage)
        # Processes opening one study at once: table creation, study creation and the warm-start queue are
        # each check-then-write, so they run under the database's schema lock (re-checked inside it).
        with self._storage.locked():
            try:
                self.study = optuna.create_study(storage=self._storage.storage(), study_name=study_name,
                                                 sampler=self._sampler, direction="minimize", load_if_exists=True)
            except KernelgenError:
                raise
            except Exception as exc:  # bad URL, unreachable server, incompatible schema
                error = self._storage.error(exc)
                if error is not None:
                    raise error from None
                raise KernelgenError(f"cannot open the Optuna study {study_name!r} at {_shown(self._storage.url)}: "
                                     f"{' '.join(str(exc).split())}") from exc
            if self.study.metric_names is None:
                with warnings.catch_warnings():  # experimental in some Optuna versions; the name is cosmetic
                    warnings.simplefilter("ignore")
                    self.study.set_metric_names([objective_name])
            for key, value in (user_attrs or {}).items():  # what the study tunes, for the dashboard
                if self.study.user_attrs.get(key) != value:
                    self.study.set_user_attr(key, value)
            # A trial left RUNNING by a process that died is failed and its config queued again: else it
            # would count as taken for ever and never be measured (kernelgen.tune.leases).
            fail_stale(self.study, superseded)
            self._enqueue(warm_start)

    def _penalty(self) -> float:
        worst = [t.value for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                 if t.user_attrs.get(ATTR_STATUS) == "ok"]
        return 2.0 * max(worst) if worst else 1e3

    def _enqueue(self, configs: Sequence[Config]) -> None:
        hist = History.of(self.study, self.domain)
        for config in configs:
            config = Config(dict(config))
            if not self.space.is_valid(config):
                continue
            row = self.domain.encode(config)
            if row in hist.seen:
                continue
            hist.seen.add(row)
            # Not Optuna's skip_if_exists: it skips params of any trial, failed ones included, so the config of a
            # trial abandoned for the machine's failure (a full disk) would never be queued again. ``hist.seen``
            # is the test that counts: configs evaluated or taken, read under the schema lock.
            self.study.enqueue_trial(ParamValues.of(self.domain).params(row))

    def _history(self) -> History:
        return History.of(self.study, self.domain)

    @_database_errors
    def ask(self) -> Config | None:
        for _ in range(16):
            hist = self._history()
            size = self.domain.size
            if size is not None and len(hist.seen) >= size and not hist.waiting:
                return None
            trial = self.study.ask(distributions(self.domain))
            row = ParamValues.of(self.domain).row(trial.params)
            config = None if row is None else self.domain.decode(row)
            taken = History.of(self.study, self.domain, exclude=trial.number).seen
            if row is None or config is None or row in taken or not self.space.is_valid(config):
                # A warm start another worker took meanwhile, or nothing unseen was left to propose.
                trial.set_user_attr(ATTR_SKIPPED, True)
                self.study.tell(trial, state=TrialState.FAIL)
                continue
            trial.set_user_attr("config", config.to_json())
            _HEARTBEAT.claim(trial)  # owner and heartbeat: a later run can tell if this process died mid-trial
            self._pending[config] = trial
            return config
        return None

    @_database_errors
    def tell(self, config: Config, measurement: Measurement) -> None:
        trial = self._pending.pop(Config(dict(config)), None)
        if trial is None:
            raise KernelgenError(f"tell() for config {dict(config)} that this Searcher did not ask")
        _HEARTBEAT.release(trial)

        def told() -> None:
            trial.set_user_attr(ATTR_STATUS, measurement.status.value)
            trial.set_user_attr(ATTR_MEASUREMENT, measurement.to_json())
            if measurement.ok:
                assert measurement.time is not None
                self.study.tell(trial, measurement.time.median, skip_if_finished=True)
            elif self._penalise_failures:
                # Optuna's own samplers skip FAIL trials and would keep proposing the failing region: they are
                # told twice the worst time instead (the status stays in the user attributes).
                self.study.tell(trial, self._penalty(), skip_if_finished=True)
            else:
                # FAIL keeps the study honest (dashboard, best trial); kernelgen's samplers read the status and
                # treat the config as the worst time seen, so failing regions are avoided.
                self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)

        _unless_finished(told, trial, "its measurement stands in kernelgen's records")

    @_database_errors
    def abandon(self, config: Config) -> None:
        """Close an asked config without a measurement (the measurer raised); it may be asked again."""
        trial = self._pending.pop(Config(dict(config)), None)
        if trial is not None:
            _HEARTBEAT.release(trial)
            _unless_finished(lambda: self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True), trial,
                             "nothing of it was kept")

    @_database_errors
    def measurements(self) -> list[Measurement]:
        """Every measurement of the study in trial order (this and other workers, earlier runs)."""
        out = []
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
            data = t.user_attrs.get(ATTR_MEASUREMENT)
            if data is not None:
                out.append(Measurement.from_json(data))
        return out

    @property
    def best(self) -> tuple[Config, float] | None:
        """The study's fastest single measurement, what the sampler minimises; not the verdict dispatch runs
        (``kernelgen.db.verdict``), which the tuner's confirmation rounds decide and ``mark_best`` records."""
        best = _best(self.measurements())
        return None if best is None else (best.config, best.time.median)  # type: ignore[union-attr]

    @property
    @_database_errors
    def n_evaluated(self) -> int:
        return len(self._history().rows)


def _unless_finished(update: Callable[[], None], trial: Trial, kept: str) -> None:
    """Run ``update`` of an asked trial, unless another process finished it meanwhile: a tuner that took this one
    for dead or stalled (``kernelgen.tune.leases``) failed it and queued its config again. That is no crash: the
    study keeps the other's state, and the caller's measurement, committed before the tell, is ``kept``."""
    try:
        update()
    except UpdateFinishedTrialError:
        log.warning("trial %d was finished by another process meanwhile (it took this one for gone, and queued the "
                    "config again); %s", trial.number, kept)


def mark_best(storage: "str | StudyStorage", study_name: str, mark: Mapping[str, Any]) -> bool:
    """Set the study's ``ATTR_BEST`` user attribute to ``mark``; False (nothing done) when there is no such
    study (its records came from an import, or another database)."""
    studies = _as_storage(storage)
    try:
        with studies.locked():
            study = optuna.load_study(study_name=study_name, storage=studies.storage())
            study.set_user_attr(ATTR_BEST, dict(mark))
            return True
    except KeyError:
        return False
    except KernelgenError:
        raise
    except Exception as exc:
        error = studies.error(exc)
        if error is None:
            raise
        raise error from None
    finally:
        if studies is not storage:  # opened here for this one mark
            studies.close()


def _best(measurements: Sequence[Measurement]) -> Measurement | None:
    ok = [m for m in measurements if m.ok]
    # Ties break on the config key so every worker and rerun names the same winner.
    return min(ok, key=lambda m: (m.time.median, m.config.key())) if ok else None  # type: ignore[union-attr]


def run_search(space: SearchSpace, measure: Callable[[Config], Measurement], *, trials: int | None = None,
               seconds: float | None = None, patience: int | None = None, sampler: str = "auto",
               seed: int | None = None, storage: str | None = None, study_name: str | None = None,
               warm_start: Sequence[Config] = (),
               on_trial: Callable[[int, Config, Measurement], None] | None = None) -> SearchResult:
    """Ask, measure, tell until a budget ends: ``trials`` evaluations by this call, ``seconds`` of wall time,
    ``patience`` evaluations without a new best, or the valid space is exhausted (with no budget given,
    exhaustion is the only stop). A measurer that raises ends the run with that exception; a failed config
    must come back as a ``Measurement`` with a failure status instead.
    """
    for name, value in (("trials", trials), ("seconds", seconds), ("patience", patience)):
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise KernelgenError(f"budget {name}={value} must be a positive number (or omitted)")
    searcher = Searcher(space, sampler=sampler, seed=seed, storage=storage, study_name=study_name,
                        warm_start=warm_start)
    start = time.monotonic()
    evaluated: list[Measurement] = []
    best = math.inf
    since_best = 0
    stop = "exhausted"
    while True:
        if trials is not None and len(evaluated) >= trials:
            stop = "trials"
            break
        if seconds is not None and time.monotonic() - start >= seconds:
            stop = "seconds"
            break
        if patience is not None and since_best >= patience:
            stop = "patience"
            break
        config = searcher.ask()
        if config is None:
            break
        try:
            measurement = measure(config)
        except BaseException:
            searcher.abandon(config)
            raise
        if not isinstance(measurement, Measurement):
            searcher.abandon(config)
            raise TypeError(f"the measurer returned {type(measurement).__name__}, not a Measurement")
        searcher.tell(config, measurement)
        evaluated.append(measurement)
        if measurement.ok and measurement.time.median < best:  # type: ignore[union-attr]
            best = measurement.time.median  # type: ignore[union-attr]
            since_best = 0
        else:
            since_best += 1
        if on_trial is not None:
            on_trial(len(evaluated) - 1, config, measurement)
    return SearchResult(tuple(evaluated), _best(searcher.measurements()), stop)


__all__ = ["ATTR_BEST", "SAMPLERS", "STRATEGIES", "SearchResult", "Searcher", "StudyStorage", "make_sampler", "mark_best",
           "open_storage", "run_search"]
