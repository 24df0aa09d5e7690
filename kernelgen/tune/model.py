"""Tune a whole model (``kernelgen tune --model pkg.module:make``, a manifest's ``[[model]]``): capture it through
the backend ``torch.compile(model, backend="kernelgen")`` uses, list the regions of its forward and backward
graphs, deduplicate them by workload key (the same region in 24 layers is tuned once), rank them by their
share of one profiled step, and tune them in that order within one time budget for the model.

The records land under the keys dispatch looks up: each region's graph is the one its ``CompiledFunction``
traced on the step's real inputs (``CompiledFunction.graphs``), tuned with the same candidates
(``candidates_for``: templates, vendor GEMM, custom calls and the region's own ATen ops) on the same target.
A later process with the same model and database runs the declared kernels with no tuning and no measuring.

Several processes (hosts sharing one database URL) split a model's regions: each region is claimed with a
database lock taken without waiting (``TuningDB.lock(wait=False)``); a process skips a region another holds and
comes back to it at the end, when it is tuned (a lookup, no measurement).

A factory ``"pkg.module:make"`` returns ``(model, inputs)``: ``inputs`` a tensor, a tuple/list of positional
tensors, or a dict of keyword tensors (a Hugging Face model's ``input_ids``, ...). ``infer`` runs
``model.eval()`` under ``torch.no_grad()``; ``train`` runs ``model.train()``, the forward, ``training_loss`` and
the backward.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, published as tomli before it joined the standard library
    import tomli as tomllib

from kernelgen.backends import backend_names, get_backend
from kernelgen.check.verdicts import check
from kernelgen.db.verdict import rounds_tag
from kernelgen.errors import KernelgenError, ManifestError
from kernelgen.frontend import dynamo_backend, region_op
from kernelgen.ir.values import Evidence
from kernelgen.runtime.aten import NAME as ATEN
from kernelgen.runtime.implementations import candidates_for
from kernelgen.runtime.records import usable_best
from kernelgen.tune.manifest import import_function, importable_from_cwd

log = logging.getLogger("kernelgen.tune")

MODES = ("infer", "train")
MIN_REGION_SECONDS = 2.0  # a region's search gets at least this much (one config of each candidate and rounds)
PROFILE_REPEATS = 3  # each region's ATen ops timed this many times per call in the profiled step (the minimum kept)
CLAIM_RETRY_SECONDS = 0.5  # how often a process waits for regions another process is tuning


class ModelError(KernelgenError):
    """A model that cannot be tuned: its factory, its inputs, or its capture."""


@dataclass(frozen=True)
class ModelSpec:
    """One model to tune: ``factory`` (``"pkg.module:make"``), ``mode`` (infer or train), the backend."""

    factory: str
    mode: str = "infer"
    name: str = ""
    backend: str = "cpp"
    seconds: float | None = None
    dynamic: bool | None = None  # torch.compile's: None lets Dynamo decide, True makes sizes symbolic

    @property
    def label(self) -> str:
        return self.name or self.factory.rpartition(":")[2]


@dataclass
class ModelRegion:
    """One distinct region of the model (by workload key): its graph, how often a step runs it, and the time
    its ATen ops take per step (all its calls) on the step's real inputs."""

    graph: Any
    template: str
    calls: int = 0
    aten_s: float = 0.0
    share: float = 0.0  # of eager's step time

    @property
    def key(self) -> str:
        return self.graph.workload_key


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
                "seconds": self.seconds, "ok": self.ok, "regions": [o.to_json() for o in self.outcomes]}


# --- manifests ----------------------------------------------------------------------------------------

MODEL_KEYS = ("name", "factory", "mode", "backend", "seconds", "dynamic")


def load_models(path: str) -> list[ModelSpec]:
    """The ``[[model]]`` tables of manifest ``path`` (``kernelgen tune`` reads ``[[workload]]`` ones through
    ``kernelgen.tune.manifest``)::

        [[model]]
        name = "gpt2"
        factory = "mypkg.models:make_gpt2"   # returns (model, inputs)
        mode = "train"                       # or "infer" (the default)
        seconds = 600                        # the model's whole budget (--seconds overrides it)
        dynamic = false                      # optional, torch.compile's dynamic=
    """
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read the manifest: {exc}") from None
    tables = data.get("model", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ManifestError(f"{path}: [[model]] must be tables with a factory")
    return [model_spec(table, f"{path}: model {table.get('name', f'#{i + 1}')!r}") for i, table in enumerate(tables)]


def model_spec(table: dict[str, Any], where: str) -> ModelSpec:
    """One ``[[model]]`` table (or the command line's ``--model``/``--mode``) validated into a ``ModelSpec``."""
    unknown = sorted(set(table) - set(MODEL_KEYS))
    if unknown:
        raise ManifestError(f"{where}: unknown key {unknown[0]!r}; allowed keys: {', '.join(MODEL_KEYS)}")
    factory = table.get("factory")
    if not isinstance(factory, str) or factory.count(":") != 1 or not all(factory.split(":")):
        raise ManifestError(f"{where}: factory must be \"module:function\" returning (model, inputs), got {factory!r}")
    mode = table.get("mode", "infer")
    if mode not in MODES:
        raise ManifestError(f"{where}: mode {mode!r} is not understood; use {' or '.join(MODES)}")
    backend = table.get("backend", "cpp")
    if backend not in backend_names():
        raise ManifestError(f"{where}: unknown backend {backend!r}; choose one of {', '.join(backend_names())}")
    seconds = table.get("seconds")
    if seconds is not None and (not isinstance(seconds, (int, float)) or seconds <= 0):
        raise ManifestError(f"{where}: seconds must be a positive number, got {seconds!r}")
    dynamic = table.get("dynamic")
    if dynamic is not None and not isinstance(dynamic, bool):
        raise ManifestError(f"{where}: dynamic must be true or false, got {dynamic!r}")
    return ModelSpec(factory, mode, str(table.get("name") or ""), backend,
                     None if seconds is None else float(seconds), dynamic)


# --- the model and its step ---------------------------------------------------------------------------

def load_model(factory: str) -> tuple[Any, tuple, dict]:
    """``(model, args, kwargs)`` from the factory ``"pkg.module:make"``; ``ModelError`` with the reason."""
    import torch

    importable_from_cwd()
    try:
        make = import_function(factory, f"model {factory!r}")
    except ManifestError as exc:
        raise ModelError(str(exc)) from None
    try:
        made = make()
    except Exception as exc:
        raise ModelError(f"model factory {factory!r} raised {type(exc).__name__}: {_line(exc)}") from None
    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module)):
        raise ModelError(f"model factory {factory!r} returned {type(made).__name__}; it must return "
                         "(model, inputs): an nn.Module and a tensor, a tuple of tensors or a dict of them")
    model, inputs = made
    if isinstance(inputs, torch.Tensor):
        return model, (inputs,), {}
    if isinstance(inputs, (tuple, list)):
        return model, tuple(inputs), {}
    if isinstance(inputs, dict):
        return model, (), dict(inputs)
    raise ModelError(f"model factory {factory!r} returned inputs of type {type(inputs).__name__}; give a tensor, "
                     "a tuple of tensors or a dict of keyword tensors")


def training_loss(out: Any) -> Any:
    """A scalar loss from whatever the model returns (a tensor, a tuple, a Hugging Face output): the mean square
    of every floating-point tensor in it, in float32, so every output gets a gradient."""
    import torch
    from torch.utils._pytree import tree_leaves

    leaves = out.to_tuple() if hasattr(out, "to_tuple") else out
    tensors = [t for t in tree_leaves(leaves) if isinstance(t, torch.Tensor) and t.is_floating_point()
               and t.requires_grad]
    if not tensors:
        raise ModelError("the model's output holds no floating-point tensor that requires grad: nothing to train")
    return sum(t.float().square().mean() for t in tensors)


def step(model: Any, args: tuple, kwargs: dict, mode: str) -> Callable[[], Any]:
    """One step of ``model`` in ``mode`` as a no-argument callable (``train`` zeroes the grads first, so every
    step does the same work)."""
    import torch

    if mode not in MODES:
        raise ModelError(f"mode {mode!r} is not understood; use {' or '.join(MODES)}")
    if mode == "infer":
        def infer() -> Any:
            with torch.no_grad():
                return model(*args, **kwargs)
        return infer
    params = [p for p in model.parameters() if p.requires_grad]

    def train() -> Any:
        for p in params:
            p.grad = None
        out = model(*args, **kwargs)
        training_loss(out).backward()
        return out
    return train


def prepare(model: Any, mode: str) -> Any:
    """The model in the mode's state: ``eval()`` to infer, ``train()`` to train."""
    return model.eval() if mode == "infer" else model.train()


# --- capture and profile ------------------------------------------------------------------------------

def capture(spec: ModelSpec, db: Any = None, timed: list | None = None) -> tuple[list[ModelRegion], float, list[Any]]:
    """The model's distinct regions, largest share of eager's step time first; eager's step time; the graphs'
    coverage statistics. Runs eager once (inputs that do not fit the model fail here, in one line), then the
    model through the kernelgen backend twice: once to compile, once profiled. Shares are measured with ATen on
    one thread (``_one_thread``). With ``timed`` (a list), eager's and the kernelgen step's times (with ``db``'s
    records), minima of interleaved calls, are appended to it."""
    import torch

    model, args, kwargs = load_model(spec.factory)
    prepare(model, spec.mode)
    eager = step(model, args, kwargs, spec.mode)
    try:
        eager()
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(f"model {spec.label}: its inputs do not fit it: eager PyTorch raised "
                         f"{type(exc).__name__}: {_line(exc)}") from None
    # (one thread throughout: torch's thread count is part of Dynamo's guards, so changing it between the compile
    # and the profiled step would compile the model again, with regions that have not run yet)
    with _one_thread(torch):
        regions, step_s, graphs, run = _profile(spec, model, args, kwargs, eager, db)
    if timed is not None:  # eager and kernelgen, interleaved, with the threads the user has
        pairs = [(_min_time(eager, 1), _min_time(run, 1)) for _ in range(5)]
        timed.extend((min(p[0] for p in pairs), min(p[1] for p in pairs)))
    return regions, step_s, graphs


def _profile(spec: ModelSpec, model: Any, args: tuple, kwargs: dict, eager: Callable[[], Any],
             db: Any) -> tuple[list[ModelRegion], float, list[Any], Callable[[], Any]]:
    """``capture``'s measurements: eager's step, the compile step, the profiled step (ATen on one thread)."""
    import copy

    import torch

    step_s = _min_time(eager)
    dynamo_backend.register()
    torch._dynamo.reset()
    options = {"backend": spec.backend, **({"db": db} if db is not None else {})}
    compiled = torch.compile(copy.deepcopy(model), backend="kernelgen", options=options, dynamic=spec.dynamic)
    run = step(compiled, args, kwargs, spec.mode)
    try:
        with dynamo_backend.collect() as graphs:
            run()
    except Exception as exc:
        raise ModelError(f"model {spec.label}: torch.compile with the kernelgen backend cannot capture it: "
                         f"{type(exc).__name__}: {_line(exc)}") from None
    found: dict[str, ModelRegion] = {}

    def time_aten(kernel: Any, inputs: list) -> None:
        with torch.no_grad():
            times = []
            for _ in range(PROFILE_REPEATS):
                t0 = time.perf_counter()
                kernel.gm(*inputs)
                times.append(time.perf_counter() - t0)
        for graph in (c["graph"] for c in kernel.compiled.choices()):
            if tuple(s.shape for s in graph.signature) == tuple(tuple(x.shape) for x in inputs):
                region = found.setdefault(graph.workload_key, ModelRegion(graph, kernel.template))
                region.calls += 1
                region.aten_s += min(times)
                return

    with region_op.observe(time_aten):
        run()
    if not found:
        left = sorted({reason for g in graphs for reason in g.left.values()})
        raise ModelError(f"model {spec.label}: the kernelgen backend found no region to tune (Dynamo handed it "
                         f"{len(graphs)} graph(s){'; ATen kept ops because ' + left[0] if left else ''})")
    regions = sorted(found.values(), key=lambda r: (-r.aten_s, r.key))
    for r in regions:
        r.share = r.aten_s / step_s if step_s > 0 else 0.0
    return regions, step_s, graphs, run


def dispatched(graphs: list[Any]) -> list[dict[str, Any]]:
    """What each region of the backend's compiled ``graphs`` (``dynamo_backend.collect()``) runs: per region
    and signature, its ``template``, ``workload_key``, ``implementation``, ``config`` and ``source``."""
    out = []
    for stats in graphs:
        for key in stats.keys:
            kernel = region_op.kernel_of(key)
            for choice in kernel.compiled.choices():
                out.append({"graph": stats.name, "template": kernel.template,
                            "workload_key": choice["graph"].workload_key, "implementation": choice["implementation"],
                            "config": None if choice["config"] is None else dict(choice["config"]),
                            "source": choice["source"]})
    return out


@contextlib.contextmanager
def _one_thread(torch: Any) -> Iterator[None]:
    """ATen on one thread while shares are measured: with two threads, a machine whose CPUs other processes hold
    stalls each parallel op at its barrier for a scheduler slice (a 2-layer GPT-2 step took 14 ms in one window
    and 392 ms in the next), so minima of a few calls measure the load, not the ops; one thread is slowed only
    by the share of a CPU it gets, alike for the step and for each region."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _min_time(fn: Callable[[], Any], repeats: int = 5) -> float:
    # The minimum, as for each region's ATen ops: on a shared machine a step's first calls after a pause can
    # wait a scheduler slice for a CPU (100 ms on this project's 2-core machine), which is not the model's time.
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


# --- tune ---------------------------------------------------------------------------------------------

def tune_model(spec: ModelSpec, *, db: Any, seconds: float | None = None, trials: int | None = None,
               workers: int = 1, timeout: float = 60.0,
               retune: bool = False, on_region: Callable[[RegionOutcome, ModelResult], None] | None = None,
               tune: Callable[..., Any] | None = None) -> ModelResult:
    """Capture ``spec``'s model, then tune its regions, largest share first, within ``seconds`` in total.

    Two passes, unless ``trials`` is given: first every region's candidates at their default configs, side by
    side with its ATen ops (a few measurements each: a model is never left slower than its ATen ops for want of
    time); then the searches, in the same order, each region getting the time left in proportion to its share
    (at least ``MIN_REGION_SECONDS``). Regions the budget does not reach stay as they are. With ``trials``, one
    pass searches each candidate that many configs. ``on_region`` is told each region's outcome as it lands;
    ``tune`` replaces ``kernelgen.tune.tuner.tune_graph`` (tests). A region whose candidates all fail is an
    outcome with its error; the other regions' records are kept."""
    from kernelgen.tune import tuner  # deferred: Optuna (~1 s), which only tuning needs

    tune = tune or tuner.tune_graph
    start = time.monotonic()
    regions, step_s, _ = capture(spec, db)
    result = ModelResult(spec, regions, step_s)
    budget = seconds if seconds is not None else spec.seconds
    deadline = None if budget is None else start + budget
    fingerprint = get_backend(spec.backend).target().fingerprint
    passes = [("defaults", 1, retune), ("search", None, True)] if trials is None else [("search", trials, retune)]
    outcomes: dict[str, RegionOutcome] = {}
    for stage, stage_trials, stage_retune in passes:
        pending = list(regions)
        while pending:
            claimed_any = False
            for region in list(pending):
                with db.lock(f"model-{stage}:{region.key}:{fingerprint}", wait=False) as held:
                    if not held:  # another process is tuning it: come back to it once it is done
                        continue
                    claimed_any = True
                    pending.remove(region)
                    outcome = _pass(tune, stage, region, pending, spec, db, deadline, stage_trials, stage_retune,
                                    retune, workers, timeout, fingerprint)
                if outcome is None:
                    continue
                outcomes[region.key] = _merged(outcomes.get(region.key), outcome)
                result.outcomes = [outcomes[r.key] for r in regions if r.key in outcomes]
                _log_region(outcomes[region.key], len(result.outcomes), len(regions), stage)
                if on_region is not None:
                    on_region(outcomes[region.key], result)
            if pending and not claimed_any:
                time.sleep(CLAIM_RETRY_SECONDS)
    result.seconds = time.monotonic() - start
    return result


def _pass(tune: Callable[..., Any], stage: str, region: ModelRegion, pending: list, spec: ModelSpec, db: Any,
          deadline: float | None, trials: int | None, retune: bool, user_retune: bool, workers: int, timeout: float,
          fingerprint: str) -> RegionOutcome | None:
    """One region in one pass: its outcome, or None when the pass has nothing to do for it."""
    impls = candidates_for(region.graph, spec.backend)
    left = None if deadline is None else deadline - time.monotonic()
    if stage == "search" and trials is None and not user_retune and _searched(db, region, impls, fingerprint):
        return None  # another process (or an earlier run) searched it: its records stand
    if left is not None and left <= 0:
        if stage == "search" and trials is None:
            return None  # the defaults pass decided it; no time to search
        return RegionOutcome(region, note="budget spent: untuned") if not _tuned(db, region, spec.backend,
                                                                                   fingerprint) else None
    region_s = None
    if left is not None and stage == "search":
        share_left = sum(r.share for r in (region, *pending)) or 1.0
        region_s = max(MIN_REGION_SECONDS, left * region.share / share_left)
    return _tune_region(tune, region, spec, db, impls, region_s, trials, workers, timeout, retune)


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
                 retune: bool) -> RegionOutcome:
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
                      timeout=timeout, retune=retune, time_eager=False, name=name, on_trial=on_trial)
    except KernelgenError as exc:
        return RegionOutcome(region, error=_line(exc), seconds=time.monotonic() - t0, searched=searched[0])
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
    """The region's ATen time over its record's, both from the record's own confirmation rounds."""
    if best.implementation == ATEN:
        return 1.0
    mine = best.measurement.time.median if best.measurement.time is not None else None
    tag = rounds_tag(best)
    if not mine or tag is None:
        return None
    for record in db.trials(best.workload_key, target.fingerprint, implementation=ATEN):
        if rounds_tag(record) == tag and record.measurement.ok and record.measurement.time is not None:
            return record.measurement.time.median / mine
    eager = next((ref.time for ref in best.measurement.references if ref.name == "eager" and ref.time), None)
    return None if eager is None else eager.median / mine


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


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


__all__ = ["MODEL_KEYS", "MODES", "load_models", "model_spec", "ModelError", "ModelRegion", "ModelResult", "ModelSpec", "RegionOutcome", "capture", "dispatched", "geomean", "speedup_over_aten",
           "load_model", "prepare", "step", "training_loss", "tune_model"]
