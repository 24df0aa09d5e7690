"""A tuned model checked as a whole: the records its regions were tuned to, tried inside the model's real step.

A region is tuned in isolation (``kernelgen.tune.tuner``: its kernels against its own ATen ops on the step's
inputs, each call alone). Inside the step its neighbours change what it costs: which data is still in cache,
whether OpenMP's threads are awake after an ATen op, how the load follower caps the threads. So after a model's
regions are tuned, ``check_model`` times the compiled step, interleaved with eager's step, with every region in
each of three variants:

- ``tuned``: what dispatch chooses now, with the database's records;
- ``untuned``: what dispatch chooses with no record (an empty database): the step the tuning replaced;
- ``aten``: the region's own ATen ops (its eager replay).

Each region's time is measured inside those steps (per workload key: its calls summed over a step). A region
whose tuned record loses to another variant by more than the rounds' spread takes that variant; the mix is then
timed against the three whole variants and kept only when no whole variant beats it beyond the spread (else the
fastest whole variant is kept). What changed is written to the database as a verdict measured in the step
(``Evidence.DECLARED``, newest verdict first: ``TuningDB.best``), so every later process dispatches it; the
other variants' in-step times are written beside it from the same rounds, so ``report --model`` reads a
region's speedup over its ATen ops from them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kernelgen.backends import get_backend
from kernelgen.frontend import dynamo_backend, region_op
from kernelgen.ir.values import CONFIRM_PREFIX, DECLARED_PREFIX, Evidence, Measurement, Status, TimeStats
from kernelgen.runtime.aten import NAME as ATEN
from kernelgen.runtime import step_verdicts
from kernelgen.runtime.implementations import candidates_for

log = logging.getLogger("kernelgen.tune")

VARIANTS = ("tuned", "untuned", "aten")  # what each region can run in the step; "tuned" is what dispatch runs now
PREFERENCE = ("mixed", "tuned", "untuned", "aten")  # among whole steps within the spread of the fastest
STEPS_PER_ROUND = 3  # steps of one variant in a round: its median is the round's time
MIN_ROUNDS = 5
MAX_ROUNDS = 15
MIN_MARGIN = 0.02  # a variant must beat another by more than this (or the rounds' spread, when larger)


@dataclass
class RegionCheck:
    """One distinct region (workload key) in the step: its calls per step, what each variant ran (implementation,
    config) and took inside the step (all its calls in one step: the smallest round median, and the spread)."""

    key: str
    template: str
    graph: Any
    calls: int = 0
    runs: dict[str, tuple[str, Any]] = field(default_factory=dict)  # variant -> (implementation, Config or None)
    times: dict[str, TimeStats] = field(default_factory=dict)
    choice: str = "tuned"

    def to_json(self) -> dict[str, Any]:
        return {"workload_key": self.key, "template": self.template, "calls": self.calls, "choice": self.choice,
                "runs": {v: {"implementation": impl, "config": None if config is None else dict(config)}
                         for v, (impl, config) in self.runs.items()},
                "step_ms": {v: t.median * 1e3 for v, t in self.times.items()}}


@dataclass
class ModelCheck:
    """The whole step in each variant (``eager`` too) and what was kept: ``kept`` is a variant of ``PREFERENCE``."""

    steps: dict[str, TimeStats]
    regions: list[RegionCheck]
    kept: str
    changed: list[str]  # workload keys whose dispatch changed (a new verdict was written)
    rounds: int
    seconds: float
    eager_step: bool = False  # eager's step beat every compiled one: the model's graphs now run eagerly

    def to_json(self) -> dict[str, Any]:
        return {"kept": self.kept, "rounds": self.rounds, "seconds": self.seconds, "changed": len(self.changed),
                "eager_step": self.eager_step,
                "step_ms": {v: t.median * 1e3 for v, t in self.steps.items()},
                "spread": {v: t.spread for v, t in self.steps.items()},
                "regions": [r.to_json() for r in self.regions]}


def check_model(spec: Any, db: Any, run: Callable[[], Any], eager: Callable[[], Any], graphs: list,
                seconds: float = 30.0) -> ModelCheck:
    """Time ``run`` (the model compiled through the backend: ``graphs`` are its ``GraphStats``) in each variant
    with eager's step ``eager`` interleaved, keep what is fastest and write what changed to ``db``. ``seconds``
    bounds the timed rounds (at least ``MIN_ROUNDS`` are run)."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kernelgen-untuned-") as tmp, _untuned_db(tmp) as untuned_db:
        # (the first step with this process's threads may compile the model again: Dynamo guards the thread count)
        with dynamo_backend.collect() as more:
            run()
        ran: Counter[int] = Counter()  # region kernels by id: how often one step calls each
        with region_op.observe(lambda kernel, inputs: ran.update((id(kernel),))):
            run()
        kernels = _kernels_by_key([*graphs, *more], ran)
        variants = {key: _variants(group, db, untuned_db) for key, group in kernels.items()}
        checks = {key: RegionCheck(key, group[0][1].template, _graph_of(group[0][1]),
                                   sum(ran[id(kernel)] for _, kernel in group)) for key, group in kernels.items()}
        keys = {name: key for key, group in kernels.items() for name, _ in group}
        per_step = {v: _whole(variants, v) for v in VARIANTS}
        for name, subs in per_step.items():  # warm up: each variant's kernels chosen, checked and built
            with _substituted(subs):
                run()
        deadline = start + seconds
        steps, regions, rounds = _rounds(run, eager, per_step, keys, deadline)
        for key, check in checks.items():
            check.times = {v: _robust(regions[v][key]) for v in VARIANTS if regions[v][key]}
            check.runs = {v: _what_ran(variants[key][v]) for v in VARIANTS}
            check.choice = _region_choice(check)
        mixed = {key: variants[key][checks[key].choice] for key in checks}
        if any(c.choice != "tuned" for c in checks.values()):
            per_step["mixed"] = _whole({k: {"mixed": v} for k, v in mixed.items()}, "mixed")
            with _substituted(per_step["mixed"]):
                run()
            steps, _, more_rounds = _rounds(run, eager, per_step, None, time.monotonic() + seconds / 2)
            rounds += more_rounds
        whole = {v: _robust(steps[v]) for v in per_step}
        kept = _step_choice(whole)
        if kept != "mixed":
            for c in checks.values():
                c.choice = kept
        changed = _record(spec, db, checks, whole, kept, rounds)
        eager_step = _record_step(spec, db, [*graphs, *more], _robust(steps["eager"]), whole, kept, rounds)
    out = ModelCheck({v: _robust(steps[v]) for v in steps}, list(checks.values()), kept, changed, rounds,
                     time.monotonic() - start, eager_step)
    _log(spec, out)
    return out


# --- the variants ------------------------------------------------------------------------------------

@contextlib.contextmanager
def _untuned_db(tmp: str) -> Iterator[Any]:
    """An empty database: what dispatch sees before any tuning (the benchmark's ``kg-untuned`` column)."""
    from kernelgen.db import open_db  # deferred: SQLAlchemy (~0.2 s), only for the check's empty database

    db = open_db(f"sqlite:///{os.path.join(tmp, 'untuned.sqlite')}")
    try:
        yield db
    finally:
        db.close()


def _kernels_by_key(graphs: list, ran: Counter[int]) -> dict[str, list[tuple[str, Any]]]:
    """The region kernels of ``graphs`` (with their registered names) that a step runs (``ran``, by id) with one
    static signature, by the workload key dispatch looks their records up by."""
    out: dict[str, list[tuple[str, Any]]] = {}
    seen: set[str] = set()
    for stats in graphs:
        for name in stats.keys:
            if name in seen:
                continue
            seen.add(name)
            kernel = region_op.kernel_of(name)
            choices = kernel.compiled.choices()
            if id(kernel) not in ran or kernel.orders is not None or len(choices) != 1:
                continue  # symbolic shapes or several signatures: the region keeps its dispatch
            out.setdefault(choices[0]["graph"].workload_key, []).append((name, kernel))
    return out


def _variants(group: list[tuple[str, Any]], db: Any, untuned_db: Any) -> dict[str, list[tuple[str, Any]]]:
    """For each variant, (registered region name, its replacement) for every kernel of one workload key: a twin
    region choosing with ``db``'s records (``tuned``) or none (``untuned``), or the region's ATen replay."""
    out: dict[str, list[tuple[str, Any]]] = {v: [] for v in VARIANTS}
    for name, kernel in group:
        for variant, database in (("tuned", db), ("untuned", untuned_db)):
            twin = region_op.RegionKernel(kernel.gm, kernel.graph, kernel.template,
                                          {**kernel.options, "db": database, "tune": False}, None, kernel.strides)
            out[variant].append((name, twin))
        out["aten"].append((name, region_op.AtenReplay(kernel)))
    return out


def _whole(variants: dict[str, dict[str, list]], variant: str) -> dict[str, Any]:
    """Region name -> its replacement, every region in ``variant``."""
    return {name: runner for per_key in variants.values() for name, runner in per_key[variant]}


def _what_ran(runners: list[tuple[str, Any]]) -> tuple[str, Any]:
    """(implementation, config) a variant's first kernel ran (config None: the implementation's default)."""
    runner = runners[0][1]
    if isinstance(runner, region_op.AtenReplay):
        return ATEN, None
    choices = runner.compiled.choices()
    if not choices:  # no kernel could run: its ATen nodes replayed
        return ATEN, None
    return choices[0]["implementation"], choices[0]["config"]


def _graph_of(kernel: Any) -> Any:
    """The workload graph dispatch traced for a (static, once-called) region kernel: its records' key."""
    return kernel.compiled.choices()[0]["graph"]


# --- timing ------------------------------------------------------------------------------------------

def _substituted(runners: dict[str, Any], sink: dict[str, float] | None = None,
                 keys: dict[str, str] | None = None) -> Any:
    """Every region in ``runners`` runs its replacement; with ``sink`` (workload key -> seconds of this step),
    each call's time is added to its key's (``keys``: region name -> workload key) entry."""
    if sink is None or keys is None:
        return region_op.substituted({name: runner.run for name, runner in runners.items()})
    import torch

    sync = torch.cuda.synchronize if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    keyed = {}
    for name, runner in runners.items():
        keyed[name] = _timed(runner.run, keys[name], sink, sync)
    return region_op.substituted(keyed)


def _timed(fn: Callable[[list], list], key: str, sink: dict[str, float], sync: Any) -> Callable[[list], list]:
    clock = time.perf_counter

    def run(inputs: list) -> list:
        if sync is not None:  # (a GPU region's time is its kernels', not the launch's)
            sync()
        t0 = clock()
        out = fn(inputs)
        if sync is not None:
            sync()
        sink[key] = sink.get(key, 0.0) + clock() - t0
        return out
    return run


def _rounds(run: Callable[[], Any], eager: Callable[[], Any], per_step: dict[str, dict], keys: dict[str, str] | None,
            deadline: float) -> tuple[dict[str, list[TimeStats]], dict[str, dict[str, list[TimeStats]]], int]:
    """Interleaved rounds (a different order each round) of ``STEPS_PER_ROUND`` steps per variant and of eager's
    step, until ``deadline`` (at least ``MIN_ROUNDS``, at most ``MAX_ROUNDS``): each variant's round medians of
    the step and, with ``keys`` (region name -> workload key), of each workload key's time in the step."""
    names = ["eager", *per_step]
    steps: dict[str, list[TimeStats]] = {n: [] for n in names}
    distinct = sorted(set((keys or {}).values()))
    regions: dict[str, dict[str, list[TimeStats]]] = {v: {k: [] for k in distinct} for v in per_step}
    rounds = 0
    while rounds < MIN_ROUNDS or (rounds < MAX_ROUNDS and time.monotonic() < deadline):
        order = names[rounds % len(names):] + names[:rounds % len(names)]
        for name in order:
            times, inside = [], []
            for _ in range(STEPS_PER_ROUND):
                sink: dict[str, float] = {}
                context = contextlib.nullcontext() if name == "eager" else \
                    _substituted(per_step[name], sink, keys)
                with context:
                    t0 = time.perf_counter()
                    (eager if name == "eager" else run)()
                    times.append(time.perf_counter() - t0)
                inside.append(sink)
            steps[name].append(_stats(times))
            if keys is not None and name != "eager":
                for key in distinct:
                    regions[name][key].append(_stats([s.get(key, 0.0) for s in inside]))
        rounds += 1
    return steps, regions, rounds


def _robust(rounds: list[TimeStats]) -> TimeStats:
    """A variant's time over the rounds, as the tuner's confirmation takes it (``kernelgen.tune.confirm``): the
    fastest round median (load only ever adds time), its spread how far the second-fastest lands above it."""
    meds = sorted(t.median for t in rounds)
    best = meds[0]
    return TimeStats(median=best, min=min(t.min for t in rounds),
                     spread=meds[1] / best - 1 if len(meds) > 1 and best > 0 else 0.0,
                     repeats=sum(t.repeats for t in rounds))


def _stats(samples: list[float]) -> TimeStats:
    med = statistics.median(samples)
    return TimeStats(median=med, min=min(samples), spread=(max(samples) - min(samples)) / med if med > 0 else 0.0,
                     repeats=len(samples))


# --- the decisions -----------------------------------------------------------------------------------

def _margin(*stats: TimeStats) -> float:
    return max(MIN_MARGIN, *(s.spread for s in stats))


def _region_choice(check: RegionCheck) -> str:
    """``tuned`` unless a variant running something else ran the region faster in the step by more than the
    rounds' spread (a variant running the same kernel as the record is no evidence against it)."""
    tuned = check.times.get("tuned")
    others = [v for v in check.times if v != "tuned" and check.runs.get(v) != check.runs.get("tuned")]
    if tuned is None or not others:
        return "tuned"
    best = min(others, key=lambda v: check.times[v].median)
    if check.times[best].median < tuned.median * (1 - _margin(tuned, check.times[best])):
        return best
    return "tuned"


def _step_choice(whole: dict[str, TimeStats]) -> str:
    """The first of ``PREFERENCE`` whose step is within the spread of the fastest compiled step."""
    fastest = min(whole.values(), key=lambda t: t.median)
    for variant in PREFERENCE:
        if variant in whole and whole[variant].median <= fastest.median * (1 + _margin(whole[variant], fastest)):
            return variant
    return "tuned"


def _record(spec: Any, db: Any, checks: dict[str, RegionCheck], whole: dict[str, TimeStats], kept: str,
            rounds: int) -> list[str]:
    """Write a verdict measured in the step for each region whose choice runs something else than its record,
    with the other variants' in-step times from the same rounds. Returns the changed workload keys."""
    from kernelgen.tune.tuner import Recorder  # deferred: Optuna, which the tuner imports

    target = get_backend(spec.backend).target()
    tag = uuid.uuid4().hex[:8]  # names these rounds in every record (``kernelgen.db.verdict.rounds_tag``)
    steps = ", ".join(f"{v} {whole[v].median * 1e3:.2f} ms" for v in whole)
    changed = []
    for key, check in checks.items():
        if check.runs.get(check.choice) == check.runs.get("tuned") or check.choice not in check.times:
            continue
        impls = {impl.name: impl for impl in candidates_for(check.graph, spec.backend)}
        written: set[tuple] = set()
        for variant in (check.choice, *VARIANTS):  # the verdict first; one record per kernel
            name, config = check.runs[variant]
            impl = impls.get(name)
            if impl is None or variant not in check.times or (name, config) in written:
                continue
            written.add((name, config))
            declared = variant == check.choice
            prefix, evidence = (DECLARED_PREFIX, Evidence.DECLARED) if declared else (CONFIRM_PREFIX, Evidence.CONFIRMED)
            t, calls = check.times[variant], max(1, check.calls)
            message = (f"{prefix}: fastest round median of {rounds} interleaved rounds (rounds {tag}) inside model "
                       f"{spec.label}'s {spec.mode} step, against the region's other variants (whole steps: {steps}; "
                       f"kept {kept})")
            measurement = Measurement(config=config if config is not None else impl.default_config(target),
                                      status=Status.OK, message=message,
                                      time=TimeStats(median=t.median / calls, min=t.min / calls, spread=t.spread,
                                                     repeats=t.repeats))
            Recorder(db, check.graph, impl, target, f"{spec.label}:{check.template}:{key[:8]}").commit(
                measurement, evidence)
        changed.append(key)
    return changed


def _record_step(spec: Any, db: Any, graphs: list, eager: TimeStats, whole: dict[str, TimeStats], kept: str,
                 rounds: int) -> bool:
    """Whether eager's step was at least as fast as the kept compiled step (fastest round medians); either way the
    verdict is written for each Dynamo graph of the step (``kernelgen.runtime.step_verdicts``), so a later compile
    of the model runs what won (a newer check's verdict replaces an older one).

    The burden is the compiled step's: eager is the contract's floor, so a tie, or a loss within the rounds'
    spread, goes to eager. With the spread as the margin (as between compiled variants), the first benchmark run
    with this check (docs/performance.md, 2026-11-29 09:12) found eager 2.9-6.3% faster than the kept step in the
    GPT-2, Llama and BERT training checks, within their spreads, and kept the compiled steps, which the benchmark then
    timed at 0.88-0.97x eager."""
    best = whole[kept]
    eager_wins = eager.median <= best.median
    # Every Dynamo graph of the step gets the same verdict: the rounds timed the step as a whole, and with all its
    # graphs eager it is eager's step, which is what was measured faster.
    keys = list(dict.fromkeys(g.step for g in graphs if getattr(g, "step", None) is not None))
    message = (f"fastest round median of {rounds} interleaved rounds of model {spec.label}'s {spec.mode} step: eager "
               f"{eager.median * 1e3:.2f} ms, compiled ({kept}) {best.median * 1e3:.2f} ms")
    target = get_backend(spec.backend).target()
    for key in keys:
        step_verdicts.record_verdict(db, key, target, spec.backend, eager_wins, eager, best, message,
                                     f"{spec.label}:{spec.mode}:step")
    return eager_wins and bool(keys)


def _log(spec: Any, out: ModelCheck) -> None:
    steps = ", ".join(f"{v} {t.median * 1e3:.2f} ms" for v, t in out.steps.items())
    moved = {}
    for r in out.regions:
        if r.key in out.changed:
            moved[r.choice] = moved.get(r.choice, 0) + 1
    what = "; ".join(f"{n} region(s) now run {v}" for v, n in moved.items()) or "every region keeps its record"
    log.info("kernelgen tune: model %s (%s) checked as a whole in %d rounds: %s; kept %s: %s%s", spec.label, spec.mode,
             out.rounds, steps, out.kept, what,
             "; eager's step is faster than every compiled one: the model runs eagerly" if out.eager_step else "")


__all__ = ["ModelCheck", "RegionCheck", "VARIANTS", "check_model"]
