"""Tune a whole model (``kernelgen tune --model pkg.module:make``, a manifest's ``[[model]]``): capture it through
the backend ``torch.compile(model, backend="kernelgen")`` uses, list the regions of its forward and backward
graphs, deduplicate them by workload key (the same region in 24 layers is tuned once), rank them by their
share of one profiled step, and tune them in that order within one time budget for the model.

The records land under the keys dispatch looks up: each region's graph is the one its ``CompiledFunction``
traced on the step's real inputs (``CompiledFunction.choices``, ``kernelgen.tune.model_capture``), tuned with the same candidates
(``candidates_for``: templates, vendor GEMM, custom calls and the region's own ATen ops) on the same target.
A later process with the same model and database runs the declared kernels with no tuning and no measuring.

Several processes (hosts sharing one database URL) split a model's regions: each region is claimed with a lease in
the database taken without waiting (``kernelgen.tune.claims.hold``), renewed while its tuning advances; a process
skips a region another holds and comes back to it at the end, when it is tuned (a lookup, no measurement). A
region whose holder stopped or stalled is taken over when its lease lapses, and the taker resumes it; a holder
that finds its lease taken over (``LeaseLost``) drops the region, unfinished, and comes back to it likewise.

The model, its factory and its step are ``kernelgen.tune.model_spec``'s (re-exported here).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kernelgen.backends import get_backend
from kernelgen.check.verdicts import check
from kernelgen.db.verdict import rounds_tag
from kernelgen.errors import DatabaseError, KernelgenError
from kernelgen.ir.values import Evidence
from kernelgen.runtime.aten import NAME as ATEN
from kernelgen.runtime import step_verdicts
from kernelgen.runtime.implementations import candidates_for
from kernelgen.runtime.records import usable_best
from kernelgen.tune.claims import LeaseLost, Progress, hold
from kernelgen.tune.model_capture import ModelRegion, capture, dispatched, guarded
from kernelgen.tune.model_spec import (MODES, ModelError, ModelSpec, load_model, load_models, model_spec, one_line,
                                       prepare, step, training_loss)

log = logging.getLogger("kernelgen.tune")

MIN_REGION_SECONDS = 2.0  # a region's search gets at least this much (one config of each candidate and rounds)
CLAIM_RETRY_SECONDS = 0.5  # how often a process waits for regions another process is tuning


@dataclass
class RegionOutcome:
    """What tuning one region gave: the implementation dispatch will run and its speedup over the region's ATen
    ops in the verdict's rounds (None when none ran now)."""

    region: ModelRegion
    implementation: str | None = None
    config: dict | None = None
    speedup: float | None = None
    measured: int = 0  # measurements made now, confirmation rounds included
    searched: int = 0  # search trials measured now (0: another process, or an earlier run, searched it)
    seconds: float = 0.0
    error: str | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        r = self.region
        return {"workload_key": r.key, "template": r.template, "calls": r.calls, "share": r.share,
                "aten_ms": r.aten_s * 1e3, "implementation": self.implementation, "config": self.config,
                "speedup_vs_aten": self.speedup, "measured": self.measured, "searched": self.searched,
                "seconds": self.seconds,
                "error": self.error, "note": self.note}


@dataclass
class ModelResult:
    spec: ModelSpec
    regions: list[ModelRegion]
    step_s: float  # eager's step
    outcomes: list[RegionOutcome] = field(default_factory=list)
    seconds: float = 0.0
    check: Any = None  # the whole-step check after tuning (``kernelgen.tune.model_check.ModelCheck``), if it ran

    @property
    def ok(self) -> bool:
        """Something was tuned (or found tuned): a model none of whose regions could be tuned is a failure."""
        return any(o.implementation is not None for o in self.outcomes)

    def to_json(self) -> dict[str, Any]:
        done = [o for o in self.outcomes if o.implementation is not None]
        # step_ms: eager's step with ATen on one thread, the base of each region's share (``capture``)
        return {"model": self.spec.label, "factory": self.spec.factory, "mode": self.spec.mode,
                "backend": self.spec.backend, "step_ms": self.step_s * 1e3, "regions_total": len(self.regions),
                "regions_done": len(done), "share_covered": sum(o.region.share for o in done),
                "seconds": self.seconds, "ok": self.ok, "regions": [o.to_json() for o in self.outcomes],
                "check": None if self.check is None else self.check.to_json()}


# --- tune ---------------------------------------------------------------------------------------------

def tune_model(spec: ModelSpec, *, db: Any, seconds: float | None = None, trials: int | None = None,
               workers: int = 1, timeout: float = 60.0,
               retune: bool = False, on_region: Callable[[RegionOutcome, ModelResult], None] | None = None,
               tune: Callable[..., Any] | None = None, check_step: bool = True) -> ModelResult:
    """Capture ``spec``'s model, then tune its regions, largest share first, within ``seconds`` in total (after
    the capture).

    Two passes, unless ``trials`` is given: first every region's candidates at their default configs, side by
    side with its ATen ops (a few measurements each: a model is never left slower than its ATen ops for want of
    time); then the searches, in the same order, each region getting the time left in proportion to its share
    (at least ``MIN_REGION_SECONDS``). Regions the budget does not reach stay as they are. With ``trials``, one
    pass searches each candidate that many configs. ``on_region`` is told each region's outcome as it lands;
    ``tune`` replaces ``kernelgen.tune.tuner.tune_graph`` (tests). A region whose candidates all fail is an
    outcome with its error; the other regions' records are kept.

    Then, with ``check_step``, the tuned model is checked as a whole (``kernelgen.tune.model_check``): its step
    with the tuned records, with none and with every region's ATen ops, interleaved with eager's, keeping per
    region what is fastest inside the step. The check's rounds take ``check_seconds(budget)`` of the budget."""
    from kernelgen.tune import tuner  # deferred: Optuna (~1 s), which only tuning needs

    tune = tune or tuner.tune_graph
    start = time.monotonic()
    captured = capture(spec, db)
    regions, step_s = captured.regions, captured.step_s
    result = ModelResult(spec, regions, step_s)
    budget = seconds if seconds is not None else spec.seconds
    check_s = check_seconds(budget)
    # the budget is the tuning's: capturing a large model under load can take a good part of a minute by itself
    deadline = None if budget is None else time.monotonic() + budget - (check_s if check_step else 0.0)
    fingerprint = get_backend(spec.backend).target().fingerprint
    passes = [("defaults", 1, retune), ("search", None, True)] if trials is None else [("search", trials, retune)]
    outcomes: dict[str, RegionOutcome] = {}
    for stage, stage_trials, stage_retune in passes:
        pending = list(regions)
        while pending:
            claimed_any = False
            for region in list(pending):
                # (patience: a region's tuning advances at each measurement, a build and a run within the timeout)
                claim = f"model-{stage}:{region.key}:{fingerprint}"
                with hold(db, claim, Progress(patience_s=3 * timeout), wait=False) as lease:
                    if lease is None:  # another process is tuning it: come back to it once it is done
                        continue
                    claimed_any = True
                    pending.remove(region)
                    try:
                        outcome = _pass(tune, stage, region, pending, spec, db, deadline, stage_trials, stage_retune,
                                        retune, workers, timeout, fingerprint, lease.progress)
                    except LeaseLost as lost:  # this process stalled and another took the region over
                        log.warning("kernelgen tune: %s; back to it once the other process is done", lost)
                        pending.append(region)
                        outcome = None
                if outcome is None:
                    continue
                outcomes[region.key] = _merged(outcomes.get(region.key), outcome)
                result.outcomes = [outcomes[r.key] for r in regions if r.key in outcomes]
                _log_region(outcomes[region.key], len(result.outcomes), len(regions), stage)
                if on_region is not None:
                    on_region(outcomes[region.key], result)
            if pending and not claimed_any:
                time.sleep(CLAIM_RETRY_SECONDS)
    if check_step and result.ok:
        result.check = _check_whole(spec, db, captured, check_s, fingerprint)
        if result.check is not None:
            _apply_check(result.check, outcomes)
    result.seconds = time.monotonic() - start
    return result


def _apply_check(check: Any, outcomes: dict[str, RegionOutcome]) -> None:
    """The regions whose dispatch the whole-step check changed: their outcome says what runs now and why."""
    for region in check.regions:
        outcome = outcomes.get(region.key)
        if outcome is None or region.key not in check.changed:
            continue
        name, config = region.runs[region.choice]
        mine, aten = region.times[region.choice].median, region.times.get("aten")
        outcome.implementation, outcome.config = name, None if config is None else dict(config)
        outcome.speedup = aten.median / mine if aten is not None and mine > 0 else None
        outcome.note = (f"the whole-step check kept its {region.choice} variant: {mine * 1e3:.3g} ms a step against "
                        f"the tuned record's {region.times['tuned'].median * 1e3:.3g} ms inside the step")


def check_seconds(budget: float | None) -> float:
    """The share of a model's budget its whole-step check takes: 15%, between 5 and 30 s (20 s without one)."""
    return 20.0 if budget is None else min(30.0, max(5.0, 0.15 * budget))


def _check_whole(spec: ModelSpec, db: Any, captured: Any, seconds: float, fingerprint: str) -> Any:
    """The whole-step check, by one of the processes sharing the database (the others' would repeat it)."""
    from kernelgen.tune.model_check import check_model  # deferred: it imports the tuner (Optuna) to record verdicts

    with db.lock(f"model-check:{spec.label}:{spec.mode}:{fingerprint}", wait=False) as held:
        if not held:
            log.info("kernelgen tune: model %s: another process is checking its step as a whole", spec.label)
            return None
        with guarded(spec, "checking its tuned step as a whole"), step_verdicts.ignored():
            return check_model(spec, db, captured.run, captured.eager, captured.graphs, seconds)


def _pass(tune: Callable[..., Any], stage: str, region: ModelRegion, pending: list, spec: ModelSpec, db: Any,
          deadline: float | None, trials: int | None, retune: bool, user_retune: bool, workers: int, timeout: float,
          fingerprint: str, progress: Progress) -> RegionOutcome | None:
    """One region in one pass: its outcome, or None when the pass has nothing to do for it."""
    impls = candidates_for(region.graph, spec.backend)
    left = None if deadline is None else deadline - time.monotonic()
    # Another process (or an earlier run) searched it: its records stand. Unless this process took the region over
    # from one that stalled mid-search (progress.superseded): then it resumes that search.
    if stage == "search" and trials is None and not user_retune and not progress.superseded \
            and _searched(db, region, impls, fingerprint):
        return None
    if left is not None and left <= 0:
        if stage == "search" and trials is None:
            return None  # the defaults pass decided it; no time to search
        return RegionOutcome(region, note="budget spent: untuned") if not _tuned(db, region, spec.backend,
                                                                                   fingerprint) else None
    region_s = None
    if left is not None and stage == "search":
        share_left = sum(r.share for r in (region, *pending)) or 1.0
        region_s = max(MIN_REGION_SECONDS, left * region.share / share_left)
    return _tune_region(tune, region, spec, db, impls, region_s, trials, workers, timeout, retune, progress)


def _searched(db: Any, region: ModelRegion, impls: list, fingerprint: str) -> bool:
    """Whether some candidate of the region was searched beyond its default config (by any process)."""
    trials = [r for r in db.trials(region.key, fingerprint) if r.evidence is Evidence.TRIAL]
    return len({(r.implementation, r.config.key()) for r in trials}) > len(impls)


def _merged(before: RegionOutcome | None, now: RegionOutcome) -> RegionOutcome:
    """The region's latest outcome, with the measurements and time of every pass."""
    if before is None:
        return now
    if now.implementation is None and before.implementation is not None:  # a failed search keeps the defaults'
        now.implementation, now.config, now.speedup = before.implementation, before.config, before.speedup
    now.measured += before.measured
    now.searched += before.searched
    now.seconds += before.seconds
    return now


def _tuned(db: Any, region: ModelRegion, backend: str, fingerprint: str) -> bool:
    return usable_best(db, region.key, fingerprint, candidates_for(region.graph, backend)) is not None


def _tune_region(tune: Callable[..., Any], region: ModelRegion, spec: ModelSpec, db: Any, impls: list,
                 seconds: float | None, trials: int | None, workers: int, timeout: float,
                 retune: bool, progress: Progress) -> RegionOutcome:
    # tune_graph's budgets are per candidate: the region's time is shared between the kernels (ATen has one config)
    per_impl = None if seconds is None else max(0.5, seconds / max(1, sum(i.name != ATEN for i in impls)))
    name = f"{spec.label}:{region.template}:{region.key[:8]}"
    t0 = time.monotonic()
    searched = [0]

    def on_trial(event: Any) -> None:
        searched[0] += event.measured and event.phase == "search"

    try:
        # (no eager or torch.compile baselines in the rounds: the region's own ATen ops are a candidate there, and
        # compiling each region with Inductor for a reference would cost 5-20 s a region)
        result = tune(region.graph, backend=spec.backend, db=db, seconds=per_impl, trials=trials, workers=workers,
                      timeout=timeout, retune=retune, time_eager=False, name=name, on_trial=on_trial,
                      progress=progress)
    except DatabaseError:  # the database failed, not the region: every later region would fail alike
        raise
    except LeaseLost:
        raise  # not the region's failure: another process has it now (tune_model)
    except KernelgenError as exc:
        return RegionOutcome(region, error=one_line(exc), seconds=time.monotonic() - t0, searched=searched[0])
    out = RegionOutcome(region, measured=result.measured, searched=searched[0], seconds=time.monotonic() - t0,
                        note=result.note)
    if result.best is None:
        out.error = "every candidate failed here: " + ", ".join(f"{k}: {v}" for k, v in result.stop_reasons.items())
        return out
    out.implementation, out.config = result.best.implementation, dict(result.best.config)
    _check_now(impls, result.best, spec.backend)
    out.speedup = speedup_over_aten(db, result.best, get_backend(spec.backend).target())
    return out


def speedup_over_aten(db: Any, best: Any, target: Any) -> float | None:
    """The region's ATen time over its record's, from confirmation rounds that timed them side by side: the
    record's own rounds when the ATen ops (or eager, as their reference) ran in them.

    Else the record is a finalist of its implementation's own rounds, which the ATen ops never join: dispatch runs
    the fastest confirmed finalist when the verdict's rounds between implementations refused to declare (their
    leader's time in doubt). Those verdict rounds did time the ATen ops beside that implementation's winner, a
    config the record's rounds timed too: the ratio goes through it, ATen over it in the verdict's rounds times
    it over the record in the record's rounds (the newest such rounds; the winner may be the record's own config,
    or the default its rounds kept within their spread). None when no rounds timed the ATen ops beside either."""
    if best.implementation == ATEN:
        return 1.0
    mine = best.measurement.time.median if best.measurement.time is not None else None
    tag = rounds_tag(best)
    if not mine or tag is None:
        return None
    aten = {rounds_tag(r): r.measurement.time.median
            for r in db.trials(best.workload_key, target.fingerprint, implementation=ATEN) if _timed(r)}
    if tag in aten:
        return aten[tag] / mine
    eager = next((ref.time for ref in best.measurement.references if ref.name == "eager" and ref.time), None)
    if eager is not None:
        return eager.median / mine
    ours = [r for r in db.trials(best.workload_key, target.fingerprint, implementation=best.implementation,
                                 implementation_hash=best.implementation_hash) if _timed(r)]
    in_mine = {r.config: r.measurement.time.median for r in ours if rounds_tag(r) == tag}
    for bridge in reversed(ours):  # oldest first: the newest rounds beside the ATen ops first
        other = rounds_tag(bridge)
        if other != tag and other in aten and bridge.config in in_mine:
            return aten[other] / bridge.measurement.time.median * in_mine[bridge.config] / mine
    return None


def _timed(record: Any) -> bool:
    """An ok record of some confirmation rounds, with a time to divide by."""
    t = record.measurement.time
    return record.measurement.ok and t is not None and t.median > 0 and rounds_tag(record) is not None


def _check_now(impls: list, best: Any, backend: str) -> None:
    """Dispatch's one-off check of the declared kernel, run now (its verdict cached on this machine): so a later
    process runs the tuned model without starting a measurement worker."""
    impl = next((i for i in impls if i.name == best.implementation), None)
    if impl is not None and impl.name != ATEN:
        check(impl, best.config, get_backend(backend).target(), quiet=True)


def _log_region(outcome: RegionOutcome, done: int, total: int, stage: str) -> None:
    r = outcome.region
    what = (f"{stage} pass, region {done}/{total} ({r.template}, {r.calls} call(s), {100 * r.share:.1f}% of "
            "the step)")
    if outcome.error:
        log.warning("kernelgen tune: %s not tuned: %s", what, outcome.error)
    elif outcome.implementation is None:
        log.info("kernelgen tune: %s: %s", what, outcome.note)
    else:
        why = ("no kernel beat its ATen ops in the same rounds" if outcome.implementation == "aten" else
               "fastest in the confirmation rounds, its ATen ops included")
        ratio = "" if outcome.speedup is None else f", {outcome.speedup:.2f}x its ATen ops"
        log.info("kernelgen tune: %s: %s %s (%s%s)%s", what, outcome.implementation, outcome.config or "", why, ratio,
                 "" if outcome.measured else " (already tuned)")


__all__ = ["MODES", "ModelError", "ModelRegion", "ModelResult", "ModelSpec", "RegionOutcome", "capture", "dispatched",
           "load_model", "load_models", "model_spec", "prepare", "speedup_over_aten", "step", "training_loss",
           "tune_model"]
