"""The trial loop of one implementation's tuning: budgets, measuring threads around one shared Searcher,
commit-then-tell of every trial. (The interleaved confirmation that follows lives in ``kernelgen.tune.confirm``.)

Used by ``kernelgen.tune.tuner``; kept apart so the policy (what to tune, warm starts, skipping finished
work) and the mechanics (threads, budgets, interruption) each stay small.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kernelgen.db.verdict import is_refused
from kernelgen.ir.implementation import Implementation
from kernelgen.ir.values import RETRYABLE_PREFIX, Config, Evidence, Measurement, TimeStats, TuningRecord
from kernelgen.report.units import fmt_time
from kernelgen.tune.confirm import CONFIRM_ROUNDS, TIE_TOLERANCE, fastest
from kernelgen.tune.search import Searcher

log = logging.getLogger(__name__)  # one INFO line per trial: the CLI shows them when stdout is not a tty
ENVIRONMENT_STOP = "stopped by an environment failure"  # a stop reason: free the resource and rerun


@dataclass(frozen=True)
class TrialEvent:
    """What ``on_trial`` receives after each trial: the record, whether it was measured now, progress."""

    record: TuningRecord
    measured: bool  # False when told to the search from the database
    phase: str  # "search" or "confirm"
    done: int  # trials of this implementation so far (earlier runs included)
    budget: int | None
    best: float | None  # best median seconds of this implementation so far

    def line(self) -> str:
        """One plain progress line: implementation, phase, trial n/budget, config, status, time, best so far."""
        m = self.record.measurement
        status = m.status.value + ("" if self.measured else " (recorded)")
        if not m.ok and m.message:
            status += f": {' '.join(m.message.split())[:120]}"
        # A confirmation re-measures a finalist; it is not one more trial of the budget.
        label = "confirmation round" if self.phase == "confirm" else f"trial {self.done}/{self.budget or '?'}"
        params = " ".join(f"{k}={v}" for k, v in sorted(self.record.config.items()))
        measured = fmt_time(m.time.median) if m.time is not None else "-"
        best = fmt_time(self.best) if self.best is not None else "none yet"
        return (f"{self.record.implementation} {self.record.workload_key[:12]} {label} {params} {status} "
                f"{measured} (best {best})")


def is_confirmation(record: TuningRecord) -> bool:
    """A re-measurement of a finalist (declared or not), not a search trial."""
    return record.evidence is not Evidence.TRIAL



class SearchState:
    """Budgets, progress and new records of one implementation's search, shared by its worker threads."""

    def __init__(self, known: dict[Config, TuningRecord], *, trials: int | None, seconds: float | None,
                 patience: int | None, on_trial: Callable[[TrialEvent], None] | None,
                 measured_elsewhere: Callable[[], int] | None = None) -> None:
        self.lock = threading.Lock()
        self.known = known
        # Configs other processes sharing the database measured for this key since this search began: with
        # it, processes tuning the same key at once spend one ``trials`` budget between them, not one each.
        self.measured_elsewhere = measured_elsewhere
        self.trials, self.seconds, self.patience, self.on_trial = trials, seconds, patience, on_trial
        self.done = len(known)  # configs measured for this key, earlier runs included
        self.reserved = 0
        self.start = time.monotonic()
        times = [r.measurement.time.median for r in known.values() if r.measurement.time is not None]
        self.best: float | None = min(times) if times else None
        self.since_best = 0
        self.new_records: list[TuningRecord] = []
        self.stop_reason = ""
        self.interrupted = threading.Event()

    def take_slot(self) -> bool:
        """Reserve one trial of the budget; False (and the reason recorded) once a budget is spent."""
        o = self
        with self.lock:
            if self.stop_reason or self.interrupted.is_set():
                return False
            if o.trials is not None and self.done + self.reserved + self._measured_elsewhere() >= o.trials:
                self.stop_reason = "trials"
            elif o.seconds is not None and time.monotonic() - self.start >= o.seconds and self.done + self.reserved:
                # A time budget stops the search only after its first trial: every run yields a result.
                self.stop_reason = "seconds"
            elif o.patience is not None and self.since_best >= o.patience:
                self.stop_reason = "patience"
            else:
                self.reserved += 1
                return True
            return False

    def _measured_elsewhere(self) -> int:
        return self.measured_elsewhere() if self.measured_elsewhere is not None else 0

    def stop(self, reason: str) -> None:
        """End the search for every thread with ``reason`` (the first reason given stands)."""
        with self.lock:
            self.stop_reason = self.stop_reason or reason

    def finish(self, reason: str) -> None:
        with self.lock:
            self.reserved -= 1
            self.stop_reason = self.stop_reason or reason

    def report(self, record: TuningRecord, *, measured: bool, phase: str = "search") -> None:
        with self.lock:
            if phase == "search":
                self.reserved -= 1
                if measured:
                    self.new_records.append(record)
                    # A retryable failure (the machine's) spends no budget: the config is measured again.
                    self.done += 0 if record.measurement.retryable else 1
                    if not record.measurement.retryable:
                        # Asked again (another process failed its trial under us and queued the config again):
                        # told from this record, not measured twice.
                        self.known.setdefault(record.config, record)
                t = record.measurement.time
                if t is not None and (self.best is None or t.median < self.best):
                    self.best, self.since_best = t.median, 0
                else:
                    self.since_best += 1
            event = TrialEvent(record, measured, phase, self.done, self.trials, self.best)
        log.info("%s", event.line())
        if self.on_trial is not None:
            self.on_trial(event)


def _search_worker(searcher: Any, lock: threading.Lock, state: SearchState, commit: Callable[[Measurement], TuningRecord],
                   make_measurer: Callable[[], Any], measurers: list[Any]) -> None:
    """One measuring thread. The searcher is shared and serialised by ``lock``; measuring runs in parallel."""
    with make_measurer() as measurer:
        measurers.append(measurer)
        while state.take_slot():
            with lock:
                config = searcher.ask()
                earlier = None if config is None else state.known.get(config)
                if earlier is not None:  # measured by an earlier run: tell it, do not measure it again
                    searcher.tell(config, earlier.measurement)
            if config is None:
                state.finish("exhausted")
                return
            if earlier is not None:
                state.report(earlier, measured=False)
                continue
            try:
                measurement = measurer.measure(config)
            except BaseException:
                with lock:
                    searcher.abandon(config)
                state.finish("interrupted")
                raise
            if state.interrupted.is_set():  # the worker was killed under us: not a real result
                with lock:
                    searcher.abandon(config)
                state.finish("interrupted")
                return
            try:
                record = commit(measurement)  # commit before tell: a kill in between loses nothing
            except BaseException:
                # Not stored (the server full or gone): the config is to be measured again, by this process's
                # next run or another process now, so its trial must not stay RUNNING under a live owner.
                with lock, contextlib.suppress(Exception):
                    searcher.abandon(config)
                state.finish("interrupted")
                raise
            if measurement.retryable:
                # The machine failed (a full disk, no file descriptors): no verdict on this config, so the study
                # does not count it as evaluated, and the search stops: every other config would fail alike.
                with lock:
                    searcher.abandon(config)
                state.report(record, measured=True)
                state.stop(f"{ENVIRONMENT_STOP}: {measurement.message[len(RETRYABLE_PREFIX):]}")
                return
            with lock:
                searcher.tell(config, measurement)
            state.report(record, measured=True)


def run_workers(space: Any, state: SearchState, commit: Callable[[Measurement], TuningRecord],
                make_measurer: Callable[[], Any], searcher_args: dict[str, Any], *, workers: int = 1,
                seed: int | None = None) -> None:
    """Search with ``opts.workers`` measuring threads (each with its own worker process) on one study.

    Local threads share one Searcher: Optuna's hand-out of enqueued trials is not atomic on SQLite, so
    separate Searchers in one process could measure a warm start twice. Other processes and hosts join
    the same study through its storage URL.
    """
    measurers: list[Any] = []
    lock = threading.Lock()
    searcher = Searcher(space, seed=seed, **searcher_args)
    state.start = time.monotonic()  # opening the study is not search time
    if workers == 1:
        _search_worker(searcher, lock, state, commit, make_measurer, measurers)
        return
    errors: list[BaseException] = []

    def body() -> None:
        try:
            _search_worker(searcher, lock, state, commit, make_measurer, measurers)
        except BaseException as exc:
            errors.append(exc)
            state.interrupted.set()

    threads = [threading.Thread(target=body, daemon=True, name=f"kernelgen-tune-{i}") for i in range(workers)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    except KeyboardInterrupt:
        state.interrupted.set()
        for m in list(measurers):
            m.kill()  # unblocks threads waiting on a worker; their results are discarded
        for t in threads:
            t.join(10)
        raise
    if errors:
        raise errors[0]


class FunctionMeasurer:
    """An injected ``measure(impl, config)`` behind the measurer interface. When ``fn`` also has an
    ``eager(impl)`` method, that times eager PyTorch in the confirmation rounds; else eager goes untimed.
    Likewise ``compiled(impl)`` for torch.compile; without one, torch.compile is no contestant."""

    def __init__(self, impl: Implementation, fn: Callable[[Implementation, Config], Measurement]) -> None:
        self.impl, self.fn = impl, fn
        compiled = getattr(fn, "compiled", None)
        self.compiled = None if compiled is None else (lambda: compiled(impl))

    def measure(self, config: Config) -> Measurement:
        return self.fn(self.impl, config)

    def eager(self) -> TimeStats | None:
        eager = getattr(self.fn, "eager", None)
        return None if eager is None else eager(self.impl)

    def kill(self) -> None:
        pass

    def __enter__(self) -> "FunctionMeasurer":
        return self

    def __exit__(self, *_: object) -> None:
        pass


def pick_winner(records: Sequence[TuningRecord]) -> TuningRecord | None:
    """The verdict among already committed re-measurements: the newest declared record if any (as
    ``TuningDB.best`` does), else the fastest confirmed one with ``fastest``'s tie rule, preferring records
    of rounds that did not refuse a verdict."""
    ok = [r for r in records if r.measurement.ok]
    ok = [r for r in ok if not is_refused(r)] or ok
    declared = [r for r in ok if r.evidence is Evidence.DECLARED]
    if declared:
        return max(declared, key=lambda r: (r.provenance.created_at, r.record_id))
    pairs = [(r, r.measurement) for r in ok]
    i = fastest(pairs, lambda r: (r.implementation, r.config.key(), r.record_id))
    return None if i is None else ok[i]


__all__ = ["CONFIRM_ROUNDS", "FunctionMeasurer", "SearchState", "TIE_TOLERANCE", "TrialEvent", "fastest",
           "is_confirmation", "pick_winner", "run_workers"]
