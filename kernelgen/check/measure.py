"""Checking and timing one config of one implementation: the body of every measurement, in or out of a worker.

A ``Bench`` owns random inputs drawn from the graph's signature with a fixed seed, the eager reference's
outputs for them, and the timing policy. ``Bench.measure(config)`` builds the kernel, checks it against the
reference (``kernelgen.check.compare``: the one input generator and tolerance table of templates and custom calls;
``wrong_result`` otherwise) and only then times it with the one timing loop (``kernelgen.backends.timing``):
warm-up, then repeats until a minimum total time, median and spread, on a fixed and recorded CPU thread count. A timing whose
repeats scatter or whose threads waited for a CPU is taken again (``TimingPolicy.retries`` times); one that
stays unsteady says so in its message (``UNSTEADY``), which the confirmation rounds read. Inputs are
restored from a pristine copy before every check and, for kernels that write their inputs, between runs.
"""

from __future__ import annotations

import os
import traceback
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from typing import Any

from kernelgen.backends import get_backend
from kernelgen.backends.clocks import clock_for
from kernelgen.backends.cpp import default_threads
from kernelgen.check.baselines import compile_reference
from kernelgen.check.compare import (FLOAT_RESULTS, LOW_PRECISION, VALUE_CLASSES, compare, judge, make_inputs, poison,
                                     value_class_inputs)
from kernelgen.check.load import WAIT_LIMIT, LoadProbe
from kernelgen.errors import CompileError, EnvironmentFailure, KernelgenError, environment_cause
from kernelgen.ir.graph import Graph
from kernelgen.ir.implementation import Implementation, allocate_outputs
from kernelgen.ir.reference import evaluate
from kernelgen.ir.target import Target
from kernelgen.ir.values import RETRYABLE_PREFIX, Config, Measurement, Status, TimeStats

# Marks an ok measurement whose every timing attempt was unsteady; the rest of the message says how.
UNSTEADY = "unsteady timing"
# Interquartile range / median of the repeats above which a timing is too scattered to trust. A quiet
# machine stays well under it even for microsecond kernels; a run sharing its cores with another process
# (an OpenMP barrier waiting for a descheduled thread) lands far above.
MAX_SPREAD = 0.3


@dataclass(frozen=True)
class TimingPolicy:
    """How a config is timed. ``threads=None`` means the backend's default CPU thread count."""

    min_time: float = 0.05  # seconds of timed runs per config, at least
    warmup: int = 2
    min_repeats: int = 5
    max_repeats: int = 2000
    threads: int | None = None
    retries: int = 2  # extra timing attempts when one is unsteady (scattered repeats, threads waiting for a CPU)

    def resolved_threads(self) -> int:
        if self.threads is not None:
            return self.threads
        return default_threads()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TimingPolicy":
        return cls(**{k: data[k] for k in ("min_time", "warmup", "min_repeats", "max_repeats", "threads", "retries")
                      if k in data})


class Bench:
    """One implementation of one graph ready to be measured: inputs, reference outputs, timing policy.

    Not thread-safe (it owns the input and output buffers). ``measure`` never raises for a
    per-config failure: it returns a ``Measurement`` with the status.
    """

    def __init__(self, impl: Implementation, target: Target, *, seed: int = 0,
                 policy: TimingPolicy = TimingPolicy(), reference: Any = None) -> None:
        import torch  # deferred: kernelgen imports without torch until a kernel is measured

        self.impl, self.target, self.policy = impl, target, policy
        self.graph: Graph = impl.graph
        self.backend = get_backend(impl.backend)
        self.threads = policy.resolved_threads()
        torch.set_num_threads(self.threads)
        self._pristine = make_inputs(self.graph.signature, seed)
        copies = [base.clone() for base, _ in self._pristine]
        self._work = [(c, c.as_strided(view.shape, view.stride())) for c, (_, view) in zip(copies, self._pristine)]
        self.inputs = [view for _, view in self._work]
        self.outputs = allocate_outputs(self.graph)
        custom = impl.custom_call_reference if "custom_call" in self.graph.ops() else None
        self.expected = reference if reference is not None else \
            reference_outputs(self.graph, [v for _, v in self._pristine], custom)
        self._space = impl.space(target)
        self._launchers: dict[Config, Any] = {}
        self._low_precision = any(spec.dtype in LOW_PRECISION for spec in (*self.graph.signature,
                                                                            *(n.spec for n in self.graph.nodes)))
        self._judged: dict[str, tuple[list[Any], list[Any]] | None] = {}  # label -> (exact, eager) outputs

    # -------------------------------------------------------------------------------------- phases

    def build(self, config: Config) -> Measurement | None:
        """Compile ``config`` (cached); a failure ``Measurement`` when it cannot be built, else None."""
        if config in self._launchers:
            return None
        problems = self._space.violations(config)
        if problems:
            return Measurement.failure(config, Status.INVALID, "; ".join(problems))
        try:
            launcher = self.impl.build(config, self.target)
        except (EnvironmentFailure, OSError) as exc:  # the machine failed: retryable, no verdict on the config
            cause = environment_cause(exc)
            if cause is None:
                return Measurement.failure(config, Status.COMPILE_ERROR, _unexpected(exc))
            return Measurement.failure(config, Status.COMPILE_ERROR, RETRYABLE_PREFIX + cause)
        except CompileError as exc:
            return Measurement.failure(config, Status.COMPILE_ERROR, str(exc))
        except ValueError as exc:  # renderers reject configs their space should have excluded
            return Measurement.failure(config, Status.INVALID, str(exc))
        except KernelgenError as exc:
            return Measurement.failure(config, Status.COMPILE_ERROR, str(exc))
        except Exception as exc:  # a renderer bug is this config's failure, not the end of the run
            return Measurement.failure(config, Status.COMPILE_ERROR, _unexpected(exc))
        if hasattr(launcher, "num_threads"):
            launcher.num_threads = self.threads
        self._place_on(getattr(launcher, "device", "cpu"))
        self._launchers[config] = launcher
        return None

    def check(self, config: Config) -> Measurement | None:
        """Run the built ``config`` once and compare with the reference (then the implementation's own
        check); a ``runtime_error`` / ``wrong_result`` measurement, or None when it passes."""
        self._restore()
        return self._launch_and_compare(config, self.inputs, self.outputs, self.expected, "",
                                        [v for _, v in self._pristine])

    def _launch_and_compare(self, config: Config, inputs: list[Any], outputs: list[Any], expected: list[Any],
                            label: str, sources: list[Any]) -> Measurement | None:
        poison(outputs)
        where = f"on {label} inputs: " if label else ""
        try:
            self._launchers[config](*inputs, *outputs)
            self.backend.synchronize()
        except Exception as exc:
            message = str(exc) if isinstance(exc, KernelgenError) else _unexpected(exc)
            return self._failed(config, Status.RUNTIME_ERROR, where + message)
        for i, (out, exp, spec) in enumerate(zip(outputs, expected, self.graph.output_specs)):
            problem = self._problem(i, out, exp, spec.dtype, label, sources)
            if problem is not None:
                return self._failed(config, Status.WRONG_RESULT, f"{where}output {i}: {problem}")
        return None

    def _problem(self, i: int, out: Any, expected: Any, dtype: str, label: str, sources: list[Any]) -> str | None:
        """What is wrong with output ``i``, or None. A float result of a graph that computes in float16/bfloat16 is
        judged against the exact values beside eager's own error in that dtype (``compare.judge``: the table's
        fixed rows are too strict for eager's own rounding and too loose for a dropped term of a long sum); a
        float32/float64 one passes the table, or else that judgement (a reordered K=8192 sum whose value is near
        0). An implementation's own tolerance (a custom call's ``tolerance=``, a template's) governs alone."""
        registered = self.impl.tolerance(dtype)
        table = compare(out, expected, dtype, registered)
        if dtype not in FLOAT_RESULTS or registered is not None or (table is None and not self._low_precision):
            return table
        judged = self._references(label, sources)
        if judged is None:  # no exact reference (a custom call's own reference that takes no float64)
            return table
        verdict = judge(out, judged[0][i], judged[1][i], dtype)
        if verdict is None:
            return None
        return verdict if self._low_precision else table

    def _references(self, label: str, sources: list[Any]) -> tuple[list[Any], list[Any]] | None:
        """The graph's exact (float64) and eager-rounded outputs on ``sources``, once per input set."""
        if label not in self._judged:
            custom = self.impl.custom_call_reference if "custom_call" in self.graph.ops() else None
            try:
                self._judged[label] = tuple(  # type: ignore[assignment]
                    [t.clone() for t in evaluate(self.graph, [t.clone() for t in sources], custom, precision)]
                    for precision in ("exact", "eager"))
            except Exception:  # noqa: BLE001 - e.g. a custom call's reference that takes no float64
                self._judged[label] = None
        return self._judged[label]

    def check_classes(self, config: Config, data: list[tuple[Any, Any]] | None = None) -> Measurement | None:
        """Run the built ``config`` once on each value class real inputs hold (``VALUE_CLASSES``: zeros, large,
        NaN/Inf), then on ``data`` (a call's own inputs, ``(storage, view)`` pairs) when given, each against the
        reference on the same inputs: the first failure, or None. A class the reference itself cannot run on
        (it raises) is skipped: there is nothing to compare with."""
        sets = [(kind, value_class_inputs(self.graph.signature, kind)) for kind in VALUE_CLASSES]
        sets += [("the call's own", data)] if data else []
        for label, pairs in sets:
            failure = self._check_on(config, pairs, label)
            if failure is not None:
                return failure
        return None

    def _check_on(self, config: Config, pairs: list[tuple[Any, Any]], label: str) -> Measurement | None:
        device = getattr(self, "_device", "cpu")
        moved = [base.to(device) for base, _ in pairs]
        custom = self.impl.custom_call_reference if "custom_call" in self.graph.ops() else None
        try:
            expected = reference_outputs(self.graph, [b.as_strided(v.shape, v.stride()) for b, (_, v) in
                                                      zip(moved, pairs)], custom)
        except Exception:  # noqa: BLE001 - eager rejects these values: no reference to hold the kernel to
            return None
        inputs = [b.clone().as_strided(v.shape, v.stride()) for b, (_, v) in zip(moved, pairs)]
        outputs = [o.to(device) for o in allocate_outputs(self.graph)]
        return self._launch_and_compare(config, inputs, outputs, expected, label,
                                        [b.as_strided(v.shape, v.stride()) for b, (_, v) in zip(moved, pairs)])

    def run(self, config: Config) -> Measurement:
        """Check the built ``config`` against the reference, then time it."""
        failure = self.check(config)
        if failure is not None:
            return failure
        launcher = self._launchers[config]
        writes_inputs = not self._inputs_intact()
        fast = getattr(launcher, "launch", launcher)  # skip per-call argument checks while timing
        args = (*self.inputs, *self.outputs)
        try:
            stats, unsteady = self._time(lambda: fast(*args), restore=writes_inputs)
        except Exception as exc:
            return self._failed(config, Status.RUNTIME_ERROR, str(exc))
        notes = ["kernel writes its inputs: restored before every run"] if writes_inputs else []
        if unsteady:
            notes.append(f"{UNSTEADY}: {unsteady}")
        return Measurement(config=config, status=Status.OK, time=stats, threads=self.threads,
                           message="; ".join(notes))

    def measure(self, config: Config) -> Measurement:
        failure = self.build(config)
        return failure if failure is not None else self.run(config)

    def time_eager(self) -> TimeStats | None:
        """Time the eager reference on the same inputs (PyTorch ops one by one); None when the timing stayed
        unsteady through every attempt: a "vs eager" figure from a contended timing is noise, not a ratio."""
        stats, unsteady = self._time(lambda: evaluate(self.graph, self.inputs), restore=False)
        return None if unsteady else stats

    def time_compiled(self) -> TimeStats | None:
        """Time torch.compile (Inductor) of the eager reference on the same inputs, compiled and checked once
        before its first timing; None when unsteady, as ``time_eager``. Raises
        ``kernelgen.check.baselines.ReferenceSkipped`` when Inductor fails or disagrees with the reference."""
        inputs, run = getattr(self, "_compiled", (None, None))
        if inputs is not self.inputs:  # first call, or the inputs moved to a kernel's device since
            run = compile_reference(self.graph, self.inputs, self.expected)
            self._compiled = (self.inputs, run)
        stats, unsteady = self._time(run, restore=False)
        return None if unsteady else stats

    # ------------------------------------------------------------------------------------- helpers

    def _failed(self, config: Config, status: Status, message: str) -> Measurement:
        m = Measurement.failure(config, status, message)
        return Measurement(config=config, status=status, message=m.message, threads=self.threads)

    def _place_on(self, device: str) -> None:
        # A GPU kernel (Triton on a GPU, a CUDA/HIP custom call) takes tensors on its device; the inputs are
        # drawn on the CPU so every process draws the same values, then moved once.
        if device == getattr(self, "_device", "cpu"):
            return
        self._device = device
        moved = [(base.to(device), view) for base, view in self._pristine]
        self._pristine = [(base, base.as_strided(v.shape, v.stride())) for base, v in moved]
        copies = [base.clone() for base, _ in self._pristine]
        self._work = [(c, c.as_strided(v.shape, v.stride())) for c, (_, v) in zip(copies, self._pristine)]
        self.inputs = [view for _, view in self._work]
        self.outputs = [t.to(device) for t in self.outputs]
        self.expected = [t.to(device) for t in self.expected]

    def _restore(self) -> None:
        for (work, _), (pristine, _) in zip(self._work, self._pristine):
            work.copy_(pristine)

    def _inputs_intact(self) -> bool:
        import torch

        return all(torch.equal(work, pristine) for (work, _), (pristine, _) in zip(self._work, self._pristine))

    def _time(self, fn: Any, *, restore: bool) -> tuple[TimeStats, str]:
        """Time ``fn``, again while unsteady (at most ``policy.retries`` more times): the first steady
        timing, else the attempt with the smallest median (contention only ever adds time) and why it is
        unsteady."""
        attempts: list[tuple[TimeStats, str]] = []
        for _ in range(1 + max(0, self.policy.retries)):
            # The host's load is the timing's business only where the host runs the kernel: a GPU's events
            # time the device, which other processes on the CPUs do not slow.
            probe = LoadProbe() if self._clock().host_bound else None
            with probe or nullcontext():
                stats = self._time_once(fn, restore=restore)
            why = unsteadiness(stats, probe.wait_fraction if probe is not None else 0.0)
            if not why:
                return stats, ""
            attempts.append((stats, why))
        stats, why = min(attempts, key=lambda a: a[0].median)
        return stats, f"{why} in each of {len(attempts)} attempts"

    def _clock(self) -> Any:
        """The clock of the device the inputs live on (``kernelgen.backends.clocks``): one for every candidate
        there, templates, custom calls, the vendor GEMM and ATen alike, whichever backend built it."""
        return clock_for(getattr(self, "_device", "cpu"))

    def _time_once(self, fn: Any, *, restore: bool) -> TimeStats:
        p = self.policy
        # An in-place kernel gets its inputs restored before every run, outside the timed region.
        return self._clock().time(fn, min_time=p.min_time, warmup=p.warmup, min_repeats=p.min_repeats,
                                  max_repeats=p.max_repeats, before=self._restore if restore else None)


def unsteadiness(stats: TimeStats, wait_fraction: float) -> str:
    """Why a timing cannot be trusted as it stands ("" when it can): scattered repeats or a contended CPU."""
    why = []
    if stats.spread > MAX_SPREAD:
        why.append(f"repeats scatter (IQR/median {stats.spread:.2f} > {MAX_SPREAD})")
    if wait_fraction > WAIT_LIMIT:
        why.append(f"threads waited for a CPU {wait_fraction:.0%} of the timed wall time (> {WAIT_LIMIT:.0%})")
    return ", ".join(why)


def is_unsteady(measurement: Measurement) -> bool:
    """True for an ok measurement that stayed unsteady through every timing attempt."""
    return UNSTEADY in measurement.message


def reference_outputs(graph: Graph, inputs: list[Any], custom_calls: Any = None) -> list[Any]:
    """The eager reference's outputs for ``inputs``; ``custom_calls(name)`` gives the function a ``custom_call``
    node computes (an implementation's ``custom_call_reference``)."""
    return [t.clone() for t in evaluate(graph, [t.clone() for t in inputs], custom_calls)]


def _unexpected(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" at {where[0].filename}:{where[0].lineno}" if where else ""
    return f"{type(exc).__name__}: {exc}{at}"


def pin_threads(threads: int) -> None:
    """Fix the CPU thread count for this process (OpenMP and torch) before anything runs."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        pass


__all__ = ["Bench", "MAX_SPREAD", "TimingPolicy", "UNSTEADY", "is_unsteady", "pin_threads", "reference_outputs",
           "unsteadiness"]
