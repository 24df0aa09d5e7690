"""Untuned choices from the records of similar devices: the same workload's record on a CPU of a neighbouring ISA
level (``similar_families``), and the ATen-GEMM / generated-GEMM order from the verdicts of the family."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import kernelgen
from kernelgen.api import compile
from kernelgen.backends import get_backend
from kernelgen.db import open_db
from kernelgen.ir.target import similar_families
from kernelgen.ir.values import (Config, Evidence, FrozenMap, Measurement, Provenance, Status, TimeStats,
                                 TuningRecord)
from kernelgen.runtime import records
from kernelgen.runtime.implementations import candidates_for


def test_similar_families_put_the_nearest_isa_level_first():
    assert similar_families("cpp:cpu:x86_64:amx")[:3] == ("cpp:cpu:x86_64:amx", "cpp:cpu:x86_64:avx512f",
                                                          "cpp:cpu:x86_64:avx2")
    # at equal distance the older level first: its instructions exist on this CPU
    assert similar_families("cpp:cpu:x86_64:avx512f")[1:3] == ("cpp:cpu:x86_64:avx2", "cpp:cpu:x86_64:amx")
    assert similar_families("triton:gpu:sm_90") == ("triton:gpu:sm_90",)


def _record(graph, impl, config, family, fingerprint="elsewhere", seconds=1e-5, declared=True):
    target = get_backend("cpp").target()
    return TuningRecord(
        workload_key=graph.workload_key, workload_family=graph.family_key, signature=graph.signature,
        implementation=impl.name, implementation_hash="0" * 16, backend="cpp", target_fingerprint=fingerprint,
        target_family=family, device=target.device_name, toolchain=FrozenMap({"compiler": "other"}),
        measurement=Measurement(Config(config), Status.OK, TimeStats(seconds, seconds, 0.0, 5)),
        provenance=Provenance("host", "user", kernelgen.__version__, 0.0),
        evidence=Evidence.DECLARED if declared else Evidence.TRIAL)


def _other_family() -> str:
    # a neighbour of this CPU's family on its ladder (an amx record on this avx512f CPU, and so on)
    return similar_families(get_backend("cpp").target().family)[1]


def bias_gelu(x, b):
    return F.gelu(x + b)


def test_a_similar_devices_record_is_the_untuned_choice(tmp_path):
    x, b = torch.randn(64, 48), torch.randn(48)
    graph = kernelgen.trace(bias_gelu, x, b)
    impl = candidates_for(graph, "cpp")[0]
    target = get_backend("cpp").target()
    default = dict(impl.default_config(target))
    other = next(c for c in impl.space(target) if dict(c) != default)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_db(url) as db:
        db.commit(_record(graph, impl, dict(other), _other_family()))
    f = compile(bias_gelu, backend="cpp", db=url)
    torch.testing.assert_close(f(x, b), bias_gelu(x, b))
    what = f.explain(x, b)
    assert what["source"] == "similar" and what["config"] == dict(other)
    plain = compile(bias_gelu, backend="cpp", db=f"sqlite:///{tmp_path / 'empty.sqlite'}")
    assert plain.explain(x, b)["source"] == "default"


def test_untuned_gemms_follow_the_familys_verdicts(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "_FAVOURITES", {})
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with open_db(url) as db:  # three other GEMM workloads whose verdict went to ATen's matmul on this family
        for n in (96, 160, 224):
            a, w = torch.randn(n, 64), torch.randn(32, 64)
            graph = kernelgen.trace(lambda a, w: torch.relu(F.linear(a, w)), a, w)
            vendor = next(i for i in candidates_for(graph, "cpp") if i.name == "aten_gemm")
            db.commit(_record(graph, vendor, dict(vendor.default_config(get_backend("cpp").target())),
                              get_backend("cpp").target().family))
    a, w = torch.randn(128, 64), torch.randn(32, 64)
    fn = lambda a, w: torch.relu(F.linear(a, w))  # noqa: E731
    tuned_family = compile(fn, backend="cpp", db=url)
    torch.testing.assert_close(tuned_family(a, w), fn(a, w))
    assert tuned_family.explain(a, w)["implementation"] == "aten_gemm"
    monkeypatch.setattr(records, "_FAVOURITES", {})
    nothing = compile(fn, backend="cpp", db=f"sqlite:///{tmp_path / 'empty.sqlite'}")
    assert nothing.explain(a, w)["implementation"] == "gemm"  # float32 on C++: the constant's order


@pytest.mark.parametrize(("fn", "numel", "aten"), [
    (torch.sigmoid, 64, True), (torch.sigmoid, 1 << 17, True),  # one op: nothing to fuse, at any size
    (lambda x: torch.sigmoid(x * 2), 64, True), (lambda x: torch.sigmoid(x * 2), 1 << 13, False),
    (lambda x: torch.sigmoid(x * 2 + 1), 64, False),  # three ops fused win from the smallest size
])
def test_a_region_too_small_to_win_runs_aten_untuned(monkeypatch, fn, numel, aten):
    # the second call takes the region's shortcut
    runs = _untuned_runs(monkeypatch, fn, torch.randn(numel), calls=2)
    assert runs.get("aten", 0) == (2 if aten else 0) and runs.get("kernel", 0) == (0 if aten else 2), runs


def _untuned_runs(monkeypatch, fn, x, calls: int) -> dict:
    """What ``calls`` calls of ``fn`` through the backend ran with the untuned rule as shipped (each checked)."""
    from kernelgen.frontend import dynamo_backend

    monkeypatch.setattr("kernelgen.runtime.aten.ENABLED", True)
    dynamo_backend.register()
    model = torch.compile(fn, backend="kernelgen")
    with dynamo_backend.collect() as graphs:
        for _ in range(calls):
            torch.testing.assert_close(model(x), fn(x))
    torch._dynamo.reset()
    return graphs[0].runs


@pytest.mark.parametrize(("fn", "shape", "aten"), [
    (lambda x: torch.nn.functional.max_pool2d(x, 3, 2, 1), (2, 8, 32, 32), False),  # ATen's pool loses 3.9x
    (lambda x: torch.nn.functional.avg_pool2d(x, 3, 2, 1), (2, 8, 32, 32), False),
    (lambda x: torch.nn.functional.max_pool2d(x, 3, 2, 1), (1, 1, 8, 8), True),  # too small for a call to pay
    (lambda x: torch.cumsum(x, 1), (64, 256), True),  # a scan: not a lone op kernelgen measured faster
])
def test_a_lone_op_whose_kernel_beats_atens_runs_its_kernel_untuned(monkeypatch, fn, shape, aten):
    runs = _untuned_runs(monkeypatch, fn, torch.randn(shape), calls=1)
    assert runs.get("aten", 0) == (1 if aten else 0) and runs.get("kernel", 0) == (0 if aten else 1), runs


def test_the_gemm_order_needs_several_verdicts_and_a_clear_majority(monkeypatch):
    from types import SimpleNamespace

    target = get_backend("cpp").target()

    class Db:
        def __init__(self, winners):
            self.winners = winners

        def records(self, target=None):
            fam = get_backend("cpp").target().family
            return [SimpleNamespace(evidence=Evidence.DECLARED, implementation=w) for w in self.winners] \
                if target == fam else []

    for winners, expected in ((["aten_gemm"] * 2, None), (["aten_gemm"] * 3, "aten_gemm"),
                              (["aten_gemm", "aten_gemm", "gemm", "gemm"], None), (["gemm"] * 4, "gemm")):
        monkeypatch.setattr(records, "_FAVOURITES", {})
        assert records.gemm_favourite(Db(winners), target) == expected, winners
