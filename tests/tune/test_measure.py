"""Measurement and isolation: each failure kind becomes its own status and the worker is replaced."""

from __future__ import annotations

import os

import pytest
import torch

from kernelgen.check.compare import compare, make_inputs
from kernelgen.check.measure import Bench, TimingPolicy
from kernelgen.check.worker import IsolatedMeasurer
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, Status, TensorSpec

from tune_fakes import FakeImpl, relu_add_graph

FAST = TimingPolicy(min_time=0.002, warmup=1, min_repeats=3, threads=1)


def test_inputs_are_deterministic_and_respect_strides() -> None:
    spec = TensorSpec((4, 3), "float32", (1, 4))
    (_, a), = make_inputs((spec,), seed=3)
    (_, b), = make_inputs((spec,), seed=3)
    (_, c), = make_inputs((spec,), seed=4)
    assert a.stride() == (1, 4) and torch.equal(a, b) and not torch.equal(a, c)


def test_compare_tolerates_rounding_but_not_errors() -> None:
    ref = torch.linspace(-3, 3, 100)
    assert compare(ref * (1 + 1e-6), ref, "float32") is None
    assert "outside" in compare(ref + 0.5, ref, "float32")
    assert compare(torch.tensor([float("nan"), 1.0]), torch.tensor([float("nan"), 1.0]), "float32") is None
    assert compare(torch.tensor([float("nan")]), torch.tensor([1.0]), "float32") is not None
    assert "differ" in compare(torch.tensor([1, 2]), torch.tensor([1, 3]), "int64")


def test_in_process_bench_checks_then_times() -> None:
    bench = Bench(FakeImpl(relu_add_graph()), Target.current("cpp"), policy=FAST)
    ok = bench.measure(Config(mode="ok", reps=1))
    assert ok.status is Status.OK and ok.time.repeats >= 3 and ok.threads == 1
    wrong = bench.measure(Config(mode="garbage", reps=1))
    assert wrong.status is Status.WRONG_RESULT and "outside" in wrong.message
    invalid = bench.measure(Config(mode="ok", reps=8))
    assert invalid.status is Status.INVALID and "forbidden" in invalid.message
    broken = bench.measure(Config(mode="syntax", reps=1))
    assert broken.status is Status.COMPILE_ERROR and ".cpp" in broken.message


def test_in_place_kernel_sees_restored_inputs() -> None:
    bench = Bench(FakeImpl(relu_add_graph()), Target.current("cpp"), policy=FAST)
    # The kernel overwrites x; without restoring, every later check would fail.
    first = bench.measure(Config(mode="inplace", reps=1))
    assert first.status is Status.OK and "restored" in first.message
    assert bench.measure(Config(mode="inplace", reps=1)).status is Status.OK
    assert bench.measure(Config(mode="ok", reps=1)).status is Status.OK


@pytest.mark.timeout(120)
def test_isolated_worker_is_replaced_after_a_crash() -> None:
    impl = FakeImpl(relu_add_graph())
    with IsolatedMeasurer(impl, policy=FAST, timeout=3.0) as measurer:
        crashed = measurer.measure(Config(mode="segv", reps=1))
        after = measurer.measure(Config(mode="ok", reps=2))
    assert crashed.status is Status.RUNTIME_ERROR and "SIGSEGV" in crashed.message
    assert after.status is Status.OK and measurer.restarts == 1  # a fresh worker took over


class _FakeProbe:
    """Stands in for LoadProbe: each timed region reads the next of ``fractions`` as its CPU wait."""

    fractions: list[float] = []
    used = 0

    def __init__(self) -> None:
        self.wait_fraction = 0.0

    def __enter__(self):
        return self

    def __exit__(self, *_):
        cls = type(self)
        self.wait_fraction = cls.fractions[min(cls.used, len(cls.fractions) - 1)]
        cls.used += 1


@pytest.mark.parametrize("fractions, attempts, unsteady", [([0.0], 1, False), ([0.9, 0.0], 2, False),
                                                           ([0.9], 3, True)])
def test_a_timing_whose_threads_waited_for_a_cpu_is_timed_again(monkeypatch, fractions, attempts, unsteady) -> None:
    import kernelgen.check.measure as measure

    monkeypatch.setattr(measure, "LoadProbe", _FakeProbe)
    monkeypatch.setattr(_FakeProbe, "fractions", fractions)
    monkeypatch.setattr(_FakeProbe, "used", 0)
    # Only the faked CPU waits may call for another attempt: a loaded machine (CI's workers share two CPUs)
    # scatters a microsecond kernel's real repeats past MAX_SPREAD now and then, which is another reason.
    monkeypatch.setattr(measure, "MAX_SPREAD", float("inf"))
    policy = TimingPolicy(min_time=0.002, warmup=1, min_repeats=3, threads=1, retries=2)
    bench = Bench(FakeImpl(relu_add_graph()), Target.current("cpp"), policy=policy)
    m = bench.measure(Config(mode="ok", reps=1))
    assert m.status is Status.OK and _FakeProbe.used == attempts
    assert measure.is_unsteady(m) is unsteady
    if unsteady:
        assert "waited for a CPU 90%" in m.message and "3 attempts" in m.message


@pytest.mark.parametrize("fractions, timed", [([0.9, 0.0], True), ([0.9], False)])
def test_an_eager_timing_contended_in_every_attempt_is_dropped(monkeypatch, fractions, timed) -> None:
    import kernelgen.check.measure as measure

    monkeypatch.setattr(measure, "LoadProbe", _FakeProbe)
    monkeypatch.setattr(_FakeProbe, "fractions", fractions)
    monkeypatch.setattr(_FakeProbe, "used", 0)
    # Only the faked CPU waits may call for another attempt: a loaded machine (CI's workers share two CPUs)
    # scatters a microsecond kernel's real repeats past MAX_SPREAD now and then, which is another reason.
    monkeypatch.setattr(measure, "MAX_SPREAD", float("inf"))
    policy = TimingPolicy(min_time=0.002, warmup=1, min_repeats=3, threads=1, retries=2)
    bench = Bench(FakeImpl(relu_add_graph()), Target.current("cpp"), policy=policy)
    stats = bench.time_eager()  # no "vs eager" from a timing that never had the CPU to itself
    assert (stats is not None) is timed and (not timed or stats.repeats >= 3)


def test_scattered_repeats_or_cpu_waits_make_a_timing_unsteady() -> None:
    from kernelgen.check.measure import MAX_SPREAD, unsteadiness
    from kernelgen.ir.values import TimeStats

    steady = TimeStats.from_samples([1e-5, 1.01e-5, 1.02e-5, 0.99e-5])
    scattered = TimeStats.from_samples([1e-5, 1e-5, 5e-3, 5e-3, 1e-5, 6e-3])  # a barrier waiting for a time slice
    assert scattered.spread > MAX_SPREAD
    assert unsteadiness(steady, 0.0) == ""
    assert "scatter" in unsteadiness(scattered, 0.0)
    assert "waited for a CPU" in unsteadiness(steady, 0.5)


def test_load_probe_is_run_queue_wait_over_wall_time(monkeypatch) -> None:
    from types import SimpleNamespace

    from kernelgen.check import load

    waits, clock = iter([2.0, 2.25]), iter([10.0, 10.5])
    monkeypatch.setattr(load, "_run_queue_wait", lambda: next(waits))
    monkeypatch.setattr(load, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    with load.LoadProbe() as probe:
        pass
    assert probe.wait_fraction == pytest.approx(0.5) and probe.contended


@pytest.mark.timeout(120)
def test_worker_check_gives_each_fault_its_exact_status() -> None:
    with IsolatedMeasurer(FakeImpl(relu_add_graph()), policy=FAST, timeout=3.0) as measurer:
        outcomes = {mode: measurer.check(Config(mode=mode, reps=1))
                    for mode in ("ok", "garbage", "syntax", "segv", "hang", "inplace")}
    assert outcomes["ok"] is None and outcomes["inplace"] is None
    statuses = {mode: m.status for mode, m in outcomes.items() if m is not None}
    assert statuses == {"garbage": Status.WRONG_RESULT, "syntax": Status.COMPILE_ERROR,
                        "segv": Status.RUNTIME_ERROR, "hang": Status.TIMEOUT}, outcomes
    assert "SIGSEGV" in outcomes["segv"].message and "3 s" in outcomes["hang"].message


@pytest.mark.timeout(90)  # before the fix a build had 600 s whatever the timeout: this test timed out
def test_timeout_bounds_a_build_that_never_finishes() -> None:
    from isolation_fakes import StuckBuildImpl

    with IsolatedMeasurer(StuckBuildImpl(relu_add_graph()), policy=FAST, timeout=2.0) as measurer:
        stuck = measurer.measure(Config(mode="ok", reps=2))
        after = measurer.measure(Config(mode="ok", reps=1))
    assert stuck.status is Status.TIMEOUT and "2 s" in stuck.message
    assert after.status is Status.OK


@pytest.mark.timeout(90)
def test_tune_graph_timeout_bounds_building_too(tmp_path) -> None:
    from isolation_fakes import StuckDefaultBuildImpl

    from kernelgen.db import open_db
    from kernelgen.tune.tuner import tune_graph

    impl = StuckDefaultBuildImpl(relu_add_graph())
    db = open_db(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        result = tune_graph(impl.graph, db=db, trials=1, implementations=[impl], isolate=True, timeout=2.0, policy=FAST)
    finally:
        db.close()
    assert [r.measurement.status for r in result.trials] == [Status.TIMEOUT] and result.best is None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs: one for the busy loop, one for the test")
def test_a_cpu_held_by_a_busy_loop_counts_as_busy_elsewhere() -> None:
    import subprocess
    import sys
    import time

    from kernelgen.check.load import cpus_busy_elsewhere

    cpu = sorted(os.sched_getaffinity(0))[0]
    hog = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
    try:
        time.sleep(0.3)
        assert cpus_busy_elsewhere(0.3) >= 1
    finally:
        hog.kill()
        hog.wait()


def test_tuning_times_with_the_cpus_other_work_leaves_free(monkeypatch, caplog) -> None:
    import kernelgen.check.load as load
    from kernelgen.tune.tuner import _threads_free_here

    monkeypatch.setattr(load, "cpus_busy_elsewhere", lambda interval=0.1: 1)
    monkeypatch.setattr(TimingPolicy, "resolved_threads", lambda self: self.threads or 4)
    with caplog.at_level("WARNING"):
        assert _threads_free_here(TimingPolicy()).threads == 3
    assert "1 of 4 CPUs are busy" in caplog.text
    assert _threads_free_here(TimingPolicy(threads=4)).threads == 4  # an explicit thread count stands
    monkeypatch.setattr(load, "cpus_busy_elsewhere", lambda interval=0.1: 0)
    assert _threads_free_here(TimingPolicy()).threads is None  # a quiet machine: the backend's default
