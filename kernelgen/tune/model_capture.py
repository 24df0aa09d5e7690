"""A model's regions, captured through ``torch.compile(model, backend="kernelgen")`` and ranked by their share of
a profiled step: what ``kernelgen tune --model`` tunes and ``kernelgen report --model`` shows.

Each region's workload graph comes from its ``CompiledFunction.choices()``: the graph dispatch traced and looks
its records up by. Distinct graphs (by workload key) are one ``ModelRegion`` each, however many layers run them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from kernelgen.errors import KernelgenError
from kernelgen.frontend import dynamo_backend, region_op
from kernelgen.runtime import step_verdicts
from kernelgen.tune.guards import contained, time_limit
from kernelgen.tune.model_spec import CAPTURE_FIX, ModelError, ModelSpec, load_model, one_line, prepare, step

PROFILE_REPEATS = 3  # each region's ATen ops timed this many times per call in the profiled step (the minimum kept)


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


# --- capture and profile ------------------------------------------------------------------------------

class Captured(NamedTuple):
    """What ``capture`` found: the model's distinct regions (largest share of eager's step first), eager's step
    time on one thread, the compiled graphs' statistics, and the compiled and the eager step as callables (run
    them inside ``guarded``)."""

    regions: list[ModelRegion]
    step_s: float
    graphs: list[Any]
    run: Callable[[], Any]
    eager: Callable[[], Any]


def capture(spec: ModelSpec, db: Any = None, timed: list | None = None) -> Captured:
    """The model's distinct regions, largest share of eager's step time first; eager's step time; the graphs'
    coverage statistics; the steps (``Captured``). Runs eager once (inputs that do not fit the model fail here, in one line), then the
    model through the kernelgen backend twice: once to compile, once profiled. Shares are measured with ATen on
    one thread (``_one_thread``). With ``timed`` (a list), eager's and the kernelgen step's times (with ``db``'s
    records), minima of interleaved calls, are appended to it. Each stage (the factory, the first eager step, the
    capture and profiling, the timed steps) may take ``spec.capture_timeout`` seconds: past it the process ends in
    one line naming the stage (``kernelgen.tune.guards.time_limit``)."""
    import torch

    model, args, kwargs = load_model(spec.factory, spec.capture_timeout)
    prepare(model, spec.mode)
    eager = step(model, args, kwargs, spec.mode)

    with guarded(spec, "its first eager step"):
        try:
            eager()
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(f"model {spec.label}: its inputs do not fit it: eager PyTorch raised "
                             f"{type(exc).__name__}: {one_line(exc)}") from None
    # (one thread throughout: torch's thread count is part of Dynamo's guards, so changing it between the
    # compile and the profiled step would compile the model again, with regions that have not run yet)
    # (the regions are what is captured, even where the model's last whole-step check ran it eagerly)
    with guarded(spec, "capturing it through torch.compile and profiling its steps"), _one_thread(torch), \
            step_verdicts.ignored():
        regions, step_s, graphs, run = _profile(spec, model, args, kwargs, eager, db)
    if timed is not None:  # eager and kernelgen, interleaved, with the threads the user has
        with guarded(spec, "timing its eager and kernelgen steps"):
            pairs = [(_min_time(eager, 1), _min_time(run, 1)) for _ in range(5)]
        timed.extend((min(p[0] for p in pairs), min(p[1] for p in pairs)))
    return Captured(regions, step_s, graphs, run, eager)


@contextlib.contextmanager
def guarded(spec: ModelSpec, what: str) -> Iterator[None]:
    """A stage that runs the user's model: an exit or a ``BaseException`` in it is the model's one-line error
    (``contained``), and past ``spec.capture_timeout`` seconds the process ends in one line naming the stage."""
    with contained(f"model {spec.label}: its step", "a model's forward must return, not exit: remove the exit",
                   ModelError), time_limit(f"model {spec.label}: {what}", spec.capture_timeout, CAPTURE_FIX):
        yield


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
        inner = getattr(exc, "inner_exception", None)  # what the backend raised, inside Dynamo's BackendCompilerFailed
        if isinstance(inner, KernelgenError):  # kernelgen's own refusal (a malformed switch): its line, not Dynamo's
            raise ModelError(f"model {spec.label}: {inner}") from None
        raise ModelError(f"model {spec.label}: torch.compile with the kernelgen backend cannot capture it: "
                         f"{type(exc).__name__}: {one_line(exc)}") from None
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



__all__ = ["Captured", "ModelRegion", "PROFILE_REPEATS", "capture", "dispatched", "guarded"]
