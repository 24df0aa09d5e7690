"""One timing method per device: every candidate whose tensors live on a GPU (a generated kernel, a custom call,
the vendor GEMM, the graph's own ATen ops) is timed by that device's clock with the same warm-up and repeats,
and the host's load rules (the run-queue probe, the thread cap) stay with host timing.

On the H200 the ATen candidate of bias_gelu [8192, 4096] float32 was recorded at 38.8 ms where eager's kernel
takes 0.17 ms: its launcher named no device, so the measurer kept its inputs on the CPU and the GPU's events
timed the host evaluating it. Without a GPU here, the placement is recorded rather than done and the GPU's
clock is a fake that counts what it times."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kernelgen.backends import clocks
from kernelgen.backends.clocks import HostClock
from kernelgen.check.measure import Bench, TimingPolicy
from kernelgen.frontend.capture import trace
from kernelgen.ir.implementation import Implementation
from kernelgen.ir.space import SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, Status, TensorSpec
from kernelgen.runtime.aten import AtenImplementation
from kernelgen.templates.vendor_gemm import VendorGemmImplementation

from tune_fakes import relu_add_graph

POLICY = TimingPolicy(min_time=0.0, warmup=2, min_repeats=4, max_repeats=4, threads=1, retries=0)
GPU = Target.gpu("sm_90")


class _FakeGpuClock(HostClock):
    """A GPU's clock as the measurer sees it: not host-bound, a cold-cache step before every run."""

    host_bound = False

    def __init__(self) -> None:
        self.timed: list[dict[str, Any]] = []
        self.flushes = 0

    def cold_cache(self):
        def flush() -> None:
            self.flushes += 1
        return flush

    def time(self, fn, **kwargs):
        self.timed.append({k: v for k, v in kwargs.items() if k != "before"})
        return super().time(fn, **kwargs)


class _NoProbe:
    def __init__(self) -> None:
        raise AssertionError("the CPU load probe ran around a GPU timing")


class _OnDevice(Implementation):
    """A generated kernel or custom call on the target's device (its launcher says where, as Triton's does)."""

    name = "kernel"
    backend = "triton"

    def __init__(self, graph) -> None:
        self.graph = graph

    def source_hash(self) -> str:
        return "on-device-v1"

    def space(self, target: Target) -> SearchSpace:
        return SearchSpace(())

    def build(self, config: Config, target: Target):
        def launch(x, y, out):
            torch.add(x, y, out=out).relu_()
        launch.device = target.tensor_device
        return launch


@pytest.fixture
def gpu(monkeypatch):
    """Measure as on a GPU: the device a launcher names is recorded (not moved to), its clock is a fake."""
    clock = _FakeGpuClock()
    placed: list[str] = []

    def place(self, device: str) -> None:
        placed.append(device)
        self._device = device

    monkeypatch.setitem(clocks.CLOCKS, "cuda", clock)
    monkeypatch.setattr(Bench, "_place_on", place)
    monkeypatch.setattr("kernelgen.check.measure.LoadProbe", _NoProbe)
    return clock, placed


def test_aten_candidate_takes_its_tensors_on_the_targets_device() -> None:
    graph = relu_add_graph()
    assert AtenImplementation(graph, "triton").build(Config({}), GPU).device == "cuda"
    assert AtenImplementation(graph, "cpp").build(Config({}), Target.current("cpp")).device == "cpu"


def test_every_gpu_candidate_goes_through_the_one_device_clock(gpu) -> None:
    clock, placed = gpu
    graph = relu_add_graph()
    gemm = trace(lambda a, b: a @ b, TensorSpec((16, 8), "float32"), TensorSpec((8, 4), "float32"))
    candidates = [(AtenImplementation(graph, "triton"), Config({})), (_OnDevice(graph), Config({}))]
    from kernelgen.runtime.implementations import implementations_for

    vendor = next(i for i in implementations_for(gemm, "triton") if isinstance(i, VendorGemmImplementation))
    candidates.append((vendor, vendor.space(GPU).default()))
    for impl, config in candidates:
        m = Bench(impl, GPU, policy=POLICY).measure(config)
        assert m.status is Status.OK, (impl.name, m.message)
    assert placed == ["cuda"] * len(candidates)  # ATen's inputs go to the device like everyone else's
    assert len(clock.timed) == len(candidates)  # each timed by the device's clock, none by the host's
    assert all(t == clock.timed[0] for t in clock.timed)  # the same warm-up and repeats for all
    assert clock.flushes == len(candidates) * (POLICY.warmup + POLICY.min_repeats)  # cold cache before every run


def test_host_candidates_keep_the_host_clock_and_its_load_probe(monkeypatch) -> None:
    probes: list[object] = []

    class _Probe:
        wait_fraction = 0.0

        def __enter__(self):
            probes.append(self)
            return self

        def __exit__(self, *_):
            return None

    monkeypatch.setattr("kernelgen.check.measure.LoadProbe", _Probe)
    m = Bench(AtenImplementation(relu_add_graph(), "cpp"), Target.current("cpp"), policy=POLICY).measure(Config({}))
    assert m.status is Status.OK and len(probes) == 1


def test_the_cpu_load_rule_is_not_applied_to_gpu_timing(monkeypatch, caplog) -> None:
    import kernelgen.check.load as load
    from kernelgen.tune.tuner import _threads_free_here

    monkeypatch.setattr(load, "cpus_busy_elsewhere", lambda interval=0.1: 1)
    monkeypatch.setattr(TimingPolicy, "resolved_threads", lambda self: self.threads or 16)
    with caplog.at_level("WARNING"):
        assert _threads_free_here(TimingPolicy(), "cuda").threads is None  # no "1 of 16 CPUs are busy" for a GPU
    assert "busy" not in caplog.text
    assert _threads_free_here(TimingPolicy(), "cpu").threads == 15  # the host's kernels still make room
