"""Tune one graph (``tune_graph``) or one manifest workload (``tune_workload``) and record every trial.

Per implementation of the graph: skip it when the database already holds a finished tuning of this exact
(workload key, implementation hash, target fingerprint); otherwise warm-start the search (earlier trials of
this key first, which are told to the searcher from the database and never re-measured, then the default
config, then the best configs of the nearest records), run it within the budgets, commit each trial the
moment it is measured, and finally re-measure the top few and the default config in interleaved rounds
(``kernelgen.tune.confirm``). Those re-measurements are committed as *confirmation* records (message
``confirmed: ...``) and mark the tuning finished, so a rerun does zero measurements. When several
implementations (templates, custom calls) compete, their winners and defaults are then re-measured side by
side; the winner of that, or of the only implementation's confirmation, is committed as the *verdict*
(``kernelgen.ir.values.Evidence.DECLARED``) that ``TuningDB.best`` hands to dispatch. The rounds that declare
the verdict also time eager PyTorch and torch.compile, so "vs default", "vs eager" and "vs torch.compile" are
figures of the same minutes. When the leader's confirmed time stays far from its search trial, no verdict is
declared (logged, and said in the records), and the next run confirms again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kernelgen.backends import get_backend
from kernelgen.backends.clocks import clock_for
from kernelgen.check import load
from kernelgen.check.baselines import contestants
from kernelgen.check.measure import TimingPolicy
from kernelgen.check.worker import InProcessMeasurer, IsolatedMeasurer
from kernelgen.db import open_db
from kernelgen.db.locks import SCHEMA_LOCK
from kernelgen.db.verdict import NO_VERDICT, is_refused, note_of, rounds_tag
from kernelgen.errors import NoTemplateError
from kernelgen.ir.graph import Graph
from kernelgen.ir.implementation import Implementation
from kernelgen.ir.target import Target, similar_families
from kernelgen.ir.values import (Config, Evidence, FrozenMap, Measurement, Provenance, TimeStats, TuningRecord,
                                 content_hash)
from kernelgen.runtime.implementations import candidates_for
from kernelgen.tune.claims import LeaseLost, Progress, hold
from kernelgen.tune.confirm import CONFIRM_ROUNDS, Confirmation, Finalist, commit_confirmation, confirm
from kernelgen.tune.manifest import workload_implementations
from kernelgen.tune.preflight import check_budget, usable_implementations
from kernelgen.tune.search import StudyStorage, mark_best
from kernelgen.tune.trial_loop import (ENVIRONMENT_STOP, FunctionMeasurer, SearchState, TrialEvent, is_confirmation,
                                       pick_winner, run_workers)
from kernelgen.version import __version__

log = logging.getLogger("kernelgen.tune")

CONFIRM_TOP = 3  # configs re-measured before the best is declared
DEFAULT_TRIALS = 40  # when neither trials nor seconds is given
NEAREST_LIMIT = 5


@dataclass
class TuneResult:
    """The outcome of tuning one graph: the declared best, every trial, and how much was measured now."""

    graph: Graph
    backend: str
    target: Target
    best: TuningRecord | None
    trials: list[TuningRecord]  # every record of the tuned implementations, confirmations included
    measured: int  # new measurements by this call (0 when already tuned)
    default: TuningRecord | None = None  # the best implementation's default config, from the verdict's rounds
    stop_reasons: dict[str, str] = field(default_factory=dict)  # implementation -> why its search ended
    seconds: float = 0.0
    eager: TimeStats | None = None  # eager PyTorch, timed in the verdict's rounds (None when none ran now)
    name: str = ""
    note: str = ""  # what the verdict's rounds had to say: why no verdict was declared, or a caveat

    @property
    def trial_time(self) -> float | None:
        """The fastest search trial of the best config: what the search measured for the verdict."""
        if self.best is None:
            return None
        times = [r.measurement.time.median for r in self.search_trials if r.measurement.time is not None
                 and r.implementation == self.best.implementation and r.config == self.best.config]
        return min(times, default=None)

    @property
    def workload_key(self) -> str:
        return self.graph.workload_key

    @property
    def search_trials(self) -> list[TuningRecord]:
        return [r for r in self.trials if not is_confirmation(r)]

    @property
    def failures(self) -> int:
        return sum(1 for r in self.search_trials if not r.measurement.ok)

    def to_json(self) -> dict[str, Any]:
        def t(r: TuningRecord | None) -> float | None:
            return None if r is None or r.measurement.time is None else r.measurement.time.median
        best, default, eager = t(self.best), t(self.default), None if self.eager is None else self.eager.median
        # Rounds too disturbed to declare a verdict give no ratios either: they would be the load's, not the kernels'.
        trusted = not self.note.startswith(NO_VERDICT)
        return {
            "name": self.name, "workload_key": self.workload_key, "backend": self.backend,
            "signature": [s.to_json() for s in self.graph.signature],
            "implementation": None if self.best is None else self.best.implementation,
            "config": None if self.best is None else self.best.config.to_json(),
            "time": best, "default_time": default, "eager_time": eager, "trial_time": self.trial_time,
            "speedup_vs_default": None if not (trusted and best and default) else default / best,
            "speedup_vs_eager": None if not (trusted and best and eager) else eager / best,
            "trials": len(self.search_trials), "failures": self.failures, "measured": self.measured,
            "statuses": _status_counts(self.search_trials), "stop_reasons": self.stop_reasons,
            "seconds": self.seconds, "note": self.note,
        }


def _status_counts(records: Sequence[TuningRecord]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in records:
        counts[r.measurement.status.value] = counts.get(r.measurement.status.value, 0) + 1
    return counts


def study_name(graph: Graph, impl: Implementation, target: Target, name: str | None = None) -> str:
    """One Optuna study per (workload name, workload, implementation source, target): every worker and host
    shares it. Readable first (``kernelgen:bias_gelu:pointwise:<hash>``, as optuna-dashboard lists it); the
    hash of the workload key, implementation source and target keeps distinct studies apart."""
    digest = content_hash([graph.workload_key, impl.name, impl.source_hash(), target.fingerprint], 12)
    return f"kernelgen:{name or graph.workload_key[:16]}:{impl.name}:{digest}"


def study_attrs(graph: Graph, impl: Implementation, target: Target, name: str | None) -> dict[str, Any]:
    """The user attributes a study carries, so the dashboard says what it tunes."""
    return {"name": name, "workload_key": graph.workload_key, "implementation": impl.name,
            "implementation_hash": impl.source_hash(), "backend": impl.backend, "target": target.fingerprint,
            "target_family": target.family, "device": target.device_name,
            "signature": [s.to_json() for s in graph.signature]}


class Recorder:
    """Turns measurements into records for one (graph, implementation, target) and commits them."""

    def __init__(self, db: Any, graph: Graph, impl: Implementation, target: Target, name: str | None) -> None:
        self.db = db
        self.fields = dict(
            name=name or None,
            workload_key=graph.workload_key, workload_family=graph.family_key, signature=graph.signature,
            implementation=impl.name, implementation_hash=impl.source_hash(), backend=impl.backend,
            target_fingerprint=target.fingerprint, target_family=target.family, device=target.device_name,
            toolchain=FrozenMap({"kernelgen": __version__, **target.versions.to_json()}),
        )

    def commit(self, measurement: Measurement, evidence: Evidence = Evidence.TRIAL) -> TuningRecord:
        record = TuningRecord(measurement=measurement, provenance=Provenance.here(), evidence=evidence,
                              **self.fields)
        self.db.commit(record)
        return record


@dataclass
class _Options:
    trials: int | None
    seconds: float | None
    patience: int | None
    sampler: str
    workers: int
    seed: int | None
    isolate: bool
    timeout: float
    policy: TimingPolicy
    retune: bool
    on_trial: Callable[[TrialEvent], None] | None
    measure: Callable[[Implementation, Config], Measurement] | None = None
    time_eager: bool = False
    name: str | None = None
    studies: Any = None  # the database's Optuna storage (StudyStorage), opened by tune_graph for all its studies
    progress: Progress = field(default_factory=Progress)  # the work's leases renew while it advances (tune.claims)


def tune_graph(graph: Graph, *, backend: str = "cpp", db: Any = None, trials: int | None = None,
               seconds: float | None = None, sampler: str = "auto", patience: int | None = None, workers: int = 1,
               seed: int | None = None, isolate: bool = True, on_trial: Callable[[TrialEvent], None] | None = None,
               implementations: Sequence[Implementation] | None = None, timeout: float = 60.0,
               policy: TimingPolicy | None = None, retune: bool = False,
               measure: Callable[[Implementation, Config], Measurement] | None = None,
               time_eager: bool = False, name: str | None = None, progress: Progress | None = None) -> TuneResult:
    """Tune every implementation of ``graph`` on ``backend``; commits each trial to ``db`` as it is measured.

    Budgets are per implementation: ``trials`` counts configs measured for this exact key (earlier runs
    included, so a rerun after an interruption completes the budget), ``seconds`` is wall time of this
    call, ``patience`` stops after that many trials without a new best. Without trials or seconds the
    budget is ``DEFAULT_TRIALS``. ``retune=True`` continues a finished tuning instead of skipping it.
    ``measure(impl, config)`` replaces the real measurement (tests, simulations; with an ``eager(impl)``
    method it times eager too); ``isolate=False`` measures in this process instead of a worker.
    ``time_eager`` times eager PyTorch in the verdict's rounds (``TuneResult.eager``). ``name`` is the
    workload's human name (manifest name or ``module.qualname``), stored with every record and on the study.
    ``TuneResult.best`` is what dispatch will run (``TuningDB.best`` over the tuned implementations).
    Raises ``NoTemplateError`` when nothing implements the graph; per-config failures are records.
    Without ``implementations``, the graph's own ATen ops compete too (``kernelgen.runtime.aten``): a kernel
    is declared only when it beats them in the same rounds. ``progress`` is the caller's when it holds a lease on
    this work (a model's region): every measurement advances it, and it raises ``LeaseLost`` out of this call,
    with nothing more committed, once that lease was taken over (``kernelgen.tune.claims``).
    """
    check_budget(trials, seconds, patience, workers, timeout)
    if trials is None and seconds is None:
        trials = DEFAULT_TRIALS
    impls = list(implementations) if implementations is not None else candidates_for(graph, backend)
    target = get_backend(backend).target()
    impls, unusable = usable_implementations(impls, target)
    if not impls:
        raise NoTemplateError(f"no template or custom call implements this graph on backend {backend!r} "
                              f"(ops: {', '.join(sorted(graph.ops() - {'input'}))})"
                              + (f"; {'; '.join(unusable)}" if unusable else ""))
    opts = _Options(trials, seconds, patience, sampler, workers, seed, isolate, timeout,
                    _threads_free_here(policy or TimingPolicy(), get_backend(backend).tensor_device())
                    if measure is None else policy or TimingPolicy(),
                    retune, on_trial, measure, time_eager, name or None,
                    progress=progress or Progress(patience_s=3 * timeout))  # a build and a run, each within the timeout
    own_db = db is None
    if own_db:
        db = open_db()
    start, started = time.monotonic(), time.time()
    check_writable = getattr(db, "check_writable", None)
    if check_writable is not None:  # every trial is committed: a read-only database is refused before the first
        try:
            check_writable()
        except BaseException:
            if own_db:
                db.close()
            raise
    # One Optuna storage for every study of this call, its schema lock taken on the database's own connections:
    # with an RDBStorage per study, each left an engine and its idle connections behind (kernelgen.db.engine).
    opts.studies = StudyStorage(db.optuna_storage_url, lock=lambda: db.lock(SCHEMA_LOCK))
    try:
        result = TuneResult(graph=graph, backend=backend, target=target, best=None, trials=[], measured=0,
                            name=name or "")
        winners: list[TuningRecord] = []
        rounds: tuple[Confirmation[Any], list[TuningRecord]] | None = None  # the rounds that were to declare
        for impl in impls:
            outcome = _tune_implementation(db, graph, impl, target, opts, declare=len(impls) == 1)
            result.trials.extend(outcome.records)
            result.measured += outcome.measured
            result.stop_reasons[impl.name] = outcome.stop_reason
            if outcome.winner is not None:
                winners.append(outcome.winner)
            rounds = outcome.rounds or rounds
        verdicts = [r for r in result.trials if r.evidence is Evidence.DECLARED]
        stopped = [reason for reason in result.stop_reasons.values() if reason.startswith(ENVIRONMENT_STOP)]
        if len(impls) > 1 and winners and (result.measured > 0 or not verdicts) and not stopped:
            # One process at a time declares the verdict of a workload and target; a verdict another process
            # declared since this call began stands (one per workload and target).
            verdict = f"verdict:{graph.workload_key}:{target.fingerprint}"
            try:
                with hold(db, verdict, opts.progress, wait=True):
                    meanwhile = _declared_since(db, graph, impls, target, started)
                    if meanwhile:
                        result.trials.extend(r for r in meanwhile if r not in result.trials)
                        rounds = None
                    else:
                        # Each implementation's winner was timed at a different moment: only side by side is the
                        # comparison fair on a shared machine. (With one winner left, its default and eager still
                        # need the verdict's rounds.)
                        rounds = _showdown(db, graph, result.trials, winners, impls, target, opts)
                        result.trials.extend(rounds[1])
                        result.measured += rounds[0].measured
            except LeaseLost as lost:
                _taken_over(lost, verdict)
                rounds = None
        # What dispatch will run, by the one definition of best (kernelgen.db.verdict, TuningDB.best's order):
        # the table, explain() and the study's mark all name it. Without a verdict (rounds in doubt) that is
        # the fastest confirmed finalist, shown with the reason.
        result.best = db.best(graph.workload_key, target.fingerprint,
                              implementations={impl.name: impl.source_hash() for impl in impls})
        if result.measured:
            _mark_studies(db, graph, impls, target, opts, result.best)
        if rounds is not None:
            result.eager = rounds[0].eager
            _log_rounds(graph, rounds[0])
        if result.best is not None:
            result.default = _default_record(result.trials, result.best, impls, target)
            result.note = note_of(result.best)
            if rounds is not None and rounds[0].doubt and rounds[0].winner is not None:
                # This call's rounds refused a verdict: say why, whichever earlier finalist dispatch runs.
                result.note = note_of(rounds[1][rounds[0].winner])
        if stopped:  # said beside the result: the rerun, once the resource is back, completes the tuning
            result.note = f"{stopped[0]} (no config was judged by it)"
    finally:
        opts.studies.close()
        if own_db:
            db.close()
    result.seconds = time.monotonic() - start
    return result


def _taken_over(lost: LeaseLost, name: str) -> None:
    """This process lost its lease on ``name`` (it stalled, and another process took that work over and does
    it): said, and the tuning goes on without it. The loss of any other lease (the caller's: a model's region)
    goes up to the caller."""
    if lost.lease.name != name:
        raise lost
    log.warning("kernelgen tune: %s", lost)


def _mark_studies(db: Any, graph: Graph, impls: Sequence[Implementation], target: Target, opts: "_Options",
                  best: TuningRecord | None) -> None:
    """Mark each implementation's study with what dispatch runs of it (``search.ATTR_BEST``) and whether that
    is the workload's verdict: the dashboard's "best trial" is one lucky sample, this is the verdict."""
    for impl in impls:
        mine = best if best is not None and best.implementation == impl.name else \
            db.best(graph.workload_key, target.fingerprint, implementations={impl.name: impl.source_hash()})
        if mine is None:
            continue
        mark_best(opts.studies, study_name(graph, impl, target, opts.name), {
            "config": mine.config.to_json(), "time": mine.measurement.time.median,  # type: ignore[union-attr]
            "record_id": mine.record_id, "implementation": mine.implementation, "evidence": mine.evidence.name,
            "workload_best": best is not None and mine.record_id == best.record_id})


def _declared_since(db: Any, graph: Graph, impls: Sequence[Implementation], target: Target,
                    since: float) -> list[TuningRecord]:
    """Verdicts for the graph on ``target`` committed at or after ``since`` (by any process)."""
    return [r for impl in impls
            for r in db.trials(graph.workload_key, target.fingerprint, implementation=impl.name,
                               implementation_hash=impl.source_hash())
            if r.evidence is Evidence.DECLARED and r.provenance.created_at >= since]


def _threads_free_here(policy: TimingPolicy, device: str = "cpu") -> TimingPolicy:
    """``policy`` with as many timing threads as there are CPUs not held by other work, when it leaves the
    thread count to the machine: a thread sharing a CPU with another process makes every barrier of an
    OpenMP kernel wait a time slice, and the timings measure that wait (``load.cpus_busy_elsewhere``). Each
    record keeps the thread count it was timed with. Kernels on ``device`` whose clock the host's load does not
    enter (a GPU's events, ``kernelgen.backends.clocks``) keep ``policy`` as it is."""
    from dataclasses import replace

    if policy.threads is not None or not clock_for(device).host_bound:
        return policy
    threads = policy.resolved_threads()
    busy = load.cpus_busy_elsewhere() if threads > 1 else 0
    if not busy:
        return policy
    free = max(1, threads - busy)
    log.warning("kernelgen tune: %d of %d CPUs are busy with other work; timing with %d thread%s so that no "
                "kernel thread waits for a CPU another process holds (set threads in the timing policy to "
                "override)", busy, threads, free, "" if free == 1 else "s")
    return replace(policy, threads=free)


def _speed_key(record: TuningRecord) -> tuple[float, str, str]:
    assert record.measurement.time is not None
    return record.measurement.time.median, record.implementation, record.config.key()


def _log_rounds(graph: Graph, conf: Confirmation[Any]) -> None:
    if conf.doubt:
        log.warning("kernelgen tune %s: no verdict declared: %s; the next run confirms again",
                    graph.workload_key[:16], conf.doubt)
    elif conf.caveat:
        log.info("kernelgen tune %s: verdict declared with a caveat: %s", graph.workload_key[:16], conf.caveat)
    elif conf.winner is not None:
        log.info("kernelgen tune %s: verdict after %d confirmation rounds: %s", graph.workload_key[:16], conf.rounds,
                 dict(conf.results[conf.winner][1].config))


def _trial_times(records: Sequence[TuningRecord]) -> dict[tuple[str, Config], float]:
    """(implementation, config) -> its fastest ok search trial: what the search measured for it."""
    out: dict[tuple[str, Config], float] = {}
    for r in sorted((r for r in records if r.measurement.ok and not is_confirmation(r)), key=_speed_key):
        out.setdefault((r.implementation, r.config), r.measurement.time.median)  # type: ignore[union-attr]
    return out


def _showdown(db: Any, graph: Graph, records: Sequence[TuningRecord], winners: list[TuningRecord],
              impls: Sequence[Implementation], target: Target,
              opts: "_Options") -> tuple[Confirmation[Any], list[TuningRecord]]:
    """Re-measure every implementation's winner and default (and eager) in interleaved rounds and declare
    the fastest; ties go to a default (ATen's ops are one: their only config), and a margin within the rounds'
    spread is a tie (``confirm.round_spread``), then to the smallest implementation name, so the verdict is
    deterministic and never measurably slower than a default."""
    from contextlib import ExitStack

    by_name = {impl.name: impl for impl in impls}
    trials = _trial_times(records)
    entries: list[tuple[str, Config]] = []
    for w in winners:
        default = by_name[w.implementation].default_config(target)
        entries.append((w.implementation, w.config))
        if default != w.config and (w.implementation, default) in trials:
            entries.append((w.implementation, default))
    with ExitStack() as stack:
        measurers = {name: stack.enter_context(_measurer_factory(by_name[name], opts)())
                     for name in dict.fromkeys(name for name, _ in entries)}
        finalists = [Finalist(e, partial(measurers[e[0]].measure, e[1]), trials.get(e),
                              e[1] == by_name[e[0]].default_config(target)) for e in entries]
        baselines = contestants(measurers[entries[0][0]]) if opts.time_eager else None
        conf = confirm(finalists, lambda e: (e[0], e[1].key()), references=baselines)
    opts.progress.check()  # a holder that lost its lease while confirming commits nothing
    recorders = {name: Recorder(db, graph, by_name[name], target, opts.name) for name in measurers}
    committed = commit_confirmation(conf, True, lambda e, m, ev: recorders[e[0]].commit(m, ev),
                                    f"the winners of {len(winners)} implementations")
    return conf, committed


def _default_record(records: list[TuningRecord], best: TuningRecord, impls: Sequence[Implementation],
                    target: Target) -> TuningRecord | None:
    """The default config of the best implementation as measured in the verdict's own rounds (None when it
    was not, e.g. it failed): a default timed minutes apart from the verdict would not compare."""
    impl = next(i for i in impls if i.name == best.implementation)
    default = impl.default_config(target)
    tag = rounds_tag(best)
    if best.config == default:
        return best
    same = [r for r in records if r.implementation == impl.name and r.config == default and r.measurement.ok
            and tag is not None and rounds_tag(r) == tag]
    return same[-1] if same else None


@dataclass
class _Outcome:
    records: list[TuningRecord]
    measured: int
    stop_reason: str
    winner: TuningRecord | None
    rounds: tuple[Confirmation[Any], list[TuningRecord]] | None = None  # when it declared (or refused) a verdict


def _tune_implementation(db: Any, graph: Graph, impl: Implementation, target: Target, opts: _Options,
                         declare: bool) -> _Outcome:
    """Search, then re-measure the top configs; with ``declare`` (the graph's only implementation) the
    winner is committed as the tuner's verdict, else it goes on to the showdown between implementations."""
    recorder = Recorder(db, graph, impl, target, opts.name)
    prior = db.trials(graph.workload_key, target.fingerprint, implementation=impl.name,
                      implementation_hash=recorder.fields["implementation_hash"])
    confirmations = [r for r in prior if is_confirmation(r)]
    # Finished unless the newest rounds refused a verdict: then the search budget is spent, and this run
    # only confirms again (on a quieter machine, it declares).
    latest = max(confirmations, key=lambda r: (r.provenance.created_at, r.record_id), default=None)
    if latest is not None and not is_refused(latest) and not opts.retune:
        return _Outcome(prior, 0, "already tuned", pick_winner(confirmations))
    space = impl.space(target)
    known: dict[Config, TuningRecord] = {}
    for r in prior:
        if not is_confirmation(r) and not r.measurement.retryable:  # the machine's failure: measure it again
            known.setdefault(r.config, r)
    warm = [*known, impl.default_config(target)]
    # Warm start: this family's records first, then those of similar devices (similar_families: the same
    # architecture at the nearest ISA levels), each ranked by the database's nearest().
    for family in similar_families(target.family):
        for near in db.nearest(workload_key=graph.workload_key, workload_family=graph.family_key,
                               target_fingerprint=target.fingerprint, target_family=family,
                               signature=graph.signature, implementation=impl.name, limit=NEAREST_LIMIT):
            if near.config not in warm and space.is_valid(near.config):
                warm.append(near.config)
    mine = set(known)  # configs this process measured or is committing: the rest of the key's trials are others'

    def commit(measurement: Measurement) -> TuningRecord:
        mine.add(measurement.config)  # before the row exists, so no other thread counts it as another's
        return recorder.commit(measurement)

    def measured_elsewhere() -> int:
        return len({r.config for r in db.trials(graph.workload_key, target.fingerprint, implementation=impl.name,
                                                implementation_hash=recorder.fields["implementation_hash"])
                    if not is_confirmation(r) and not r.measurement.retryable} - mine)

    state = SearchState(known, trials=opts.trials, seconds=opts.seconds, patience=opts.patience,
                        on_trial=opts.on_trial, measured_elsewhere=measured_elsewhere)
    storage = opts.studies
    make_measurer = _measurer_factory(impl, opts)
    progress = opts.progress
    # superseded: the owners whose lease on this work this process took over, whose RUNNING trials are stale
    searcher_args = dict(sampler=opts.sampler, storage=storage, study_name=study_name(graph, impl, target, opts.name),
                         warm_start=warm, user_attrs=study_attrs(graph, impl, target, opts.name),
                         superseded=progress.superseded)
    run_workers(space, state, commit, make_measurer, searcher_args, workers=opts.workers, seed=opts.seed)
    measured = len(state.new_records)
    if state.stop_reason.startswith(ENVIRONMENT_STOP):
        # No confirmation on a machine that cannot build: the next run searches on, then confirms.
        log.warning("kernelgen tune %s %s: %s", graph.workload_key[:16], impl.name, state.stop_reason)
        return _Outcome(prior + state.new_records, measured, state.stop_reason, None)
    # One process at a time confirms a study and declares its verdict; a process that searched alongside
    # takes the verdict committed meanwhile instead of declaring a second one.
    confirming = f"confirm:{searcher_args['study_name']}"
    try:
        with hold(db, confirming, progress, wait=True):
            records = db.trials(graph.workload_key, target.fingerprint, implementation=impl.name,
                                implementation_hash=recorder.fields["implementation_hash"])
            before = {r.record_id for r in confirmations}
            meanwhile = [r for r in records if is_confirmation(r) and r.record_id not in before]
            if meanwhile:
                return _Outcome(records, measured, state.stop_reason or "confirmed by another process",
                                pick_winner(meanwhile))
            ok = sorted((r for r in records if r.measurement.ok and not is_confirmation(r)), key=_speed_key)
            winner, rounds = None, None
            if ok:
                trials = {config: t for (_, config), t in _trial_times(ok).items()}  # fastest first
                chosen = list(trials)[:CONFIRM_TOP]
                default = impl.default_config(target)
                if default in trials and default not in chosen:
                    chosen.append(default)  # re-measured alongside, so "speedup over default" compares like with like
                with make_measurer() as measurer:
                    # The default too: if it re-measures fastest, it wins. Ties (within the rounds' spread,
                    # confirm.round_spread) go to it as well, so a config replaces the default only when it is
                    # measurably faster, not on noise.
                    conf = confirm([Finalist(c, partial(measurer.measure, c), trials[c], c == default) for c in chosen],
                                   lambda c: c.key(),
                                   references=contestants(measurer) if declare and opts.time_eager else None)
                progress.check()  # a holder that lost its lease while confirming commits nothing
                confirmed = commit_confirmation(conf, declare, lambda _c, m, ev: recorder.commit(m, ev),
                                                f"the top {len(chosen)} configs", state)
                records.extend(confirmed)
                measured += conf.measured
                winner = None if conf.winner is None else confirmed[conf.winner]
                rounds = (conf, confirmed) if declare else None
    except LeaseLost as lost:
        _taken_over(lost, confirming)
        return _Outcome(prior + state.new_records, measured, "confirmed by another process (this one stalled)", None)
    return _Outcome(records, measured, state.stop_reason, winner, rounds)


def _measurer_factory(impl: Implementation, opts: _Options) -> Callable[[], Any]:
    seed = 0  # inputs: the same for every config and every run, so results compare
    if opts.measure is not None:
        make: Callable[[], Any] = lambda: FunctionMeasurer(impl, opts.measure)  # type: ignore[arg-type]
    elif opts.isolate:
        make = lambda: IsolatedMeasurer(impl, seed=seed, policy=opts.policy, timeout=opts.timeout)
    else:
        make = lambda: InProcessMeasurer(impl, seed=seed, policy=opts.policy)
    return lambda: _Advancing(make(), opts.progress)  # type: ignore[arg-type]


class _Advancing:
    """A measurer whose every finished measurement advances the tuning's ``Progress``: the leases the work holds
    are renewed only while measurements finish, and a measurement that finishes after its lease was taken over
    raises ``LeaseLost`` instead of being committed (the taker measures that config)."""

    def __init__(self, inner: Any, progress: Progress) -> None:
        self._inner, self._progress = inner, progress

    def measure(self, config: Config) -> Measurement:
        measurement = self._inner.measure(config)
        self._progress.advance()
        return measurement

    def __getattr__(self, name: str) -> Any:  # eager, compiled, check, kill: the measurer's own
        return getattr(self._inner, name)

    def __enter__(self) -> "_Advancing":
        self._inner.__enter__()
        return self

    def __exit__(self, *exc: object) -> Any:
        return self._inner.__exit__(*exc)


def tune_workload(workload: Any, *, db: Any = None, trials: int | None = None, seconds: float | None = None,
                  sampler: str | None = None, patience: int | None = None, workers: int = 1,
                  seed: int | None = None, isolate: bool = True, on_trial: Callable[[TrialEvent], None] | None = None,
                  timeout: float = 60.0, policy: TimingPolicy | None = None, retune: bool = False,
                  time_eager: bool = True) -> list[TuneResult]:
    """Tune every problem size of a manifest ``Workload``: one ``TuneResult`` per shape, in manifest order.

    Arguments given here override the workload's own budget and sampler. With ``time_eager``, eager
    PyTorch (the workload's graph, op by op) is timed in the verdict's rounds on the same inputs, for the
    "vs eager" figure; an already tuned shape has none.
    """
    check_budget(trials, seconds, patience, workers, timeout)
    results = []
    for graph in workload.graphs:
        result = tune_graph(
            graph, backend=workload.backend, db=db, trials=trials if trials is not None else workload.trials,
            seconds=seconds if seconds is not None else workload.seconds,
            sampler=sampler or workload.sampler or "auto",
            patience=patience if patience is not None else workload.patience, workers=workers, seed=seed,
            isolate=isolate, on_trial=on_trial, implementations=workload_implementations(workload, graph),
            timeout=timeout, policy=policy, retune=retune, time_eager=time_eager, name=workload.name)
        results.append(result)
    return results


__all__ = ["CONFIRM_ROUNDS", "Recorder", "TrialEvent", "TuneResult", "check_budget",
           "is_confirmation", "study_attrs", "study_name", "tune_graph", "tune_workload"]
