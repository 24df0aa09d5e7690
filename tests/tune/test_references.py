"""The baselines of the confirmation rounds: torch.compile compiled once and checked, skipped with a reason
when Inductor fails; their times round-trip in the record's JSON."""

from __future__ import annotations

import pytest

from kernelgen.ir.values import Config, Measurement, Reference, Status, TimeStats


def _bench():
    import torch.nn.functional as F

    from kernelgen.runtime.implementations import implementations_for
    from kernelgen.frontend.capture import trace
    from kernelgen.ir.target import Target
    from kernelgen.check.measure import Bench, TimingPolicy
    from kernelgen.ir.values import TensorSpec

    graph = trace(lambda x, b: F.gelu(x + b), TensorSpec((8, 16), "float32"), TensorSpec((16,), "float32"))
    impl = implementations_for(graph, "cpp")[0]
    return Bench(impl, Target.current("cpp"), policy=TimingPolicy(min_time=0.001, min_repeats=3, retries=0))


def test_references_round_trip_and_records_without_them_keep_their_json() -> None:
    stats = TimeStats(median=2e-5, min=1.9e-5, spread=0.01, repeats=9)
    plain = Measurement(Config(block=64), Status.OK, stats)
    assert "references" not in plain.to_json()  # old records keep their format and record_id
    refs = (Reference("eager", stats), Reference("torch.compile", None, "torch.compile failed: X: y"))
    m = Measurement(Config(block=64), Status.OK, stats, message="confirmed", references=refs)
    assert Measurement.from_json(m.to_json()) == m
    with pytest.raises(ValueError, match="reference"):
        Measurement.from_json({**m.to_json(), "references": [{"time": None}]})


def test_references_survive_export_and_import(tmp_path) -> None:
    from dataclasses import replace

    from kernelgen.db import open_db
    from tests.db.factories import record

    stats = TimeStats(median=2e-5, min=1.9e-5, spread=0.01, repeats=9)
    base = record(message="confirmed best: fastest round median of 3 interleaved rounds (rounds 0a1b2c3d)")
    rec = replace(base, measurement=replace(base.measurement, references=(
        Reference("eager", stats), Reference("torch.compile", None, "torch.compile failed: X: y"))))
    with open_db(f"sqlite:///{tmp_path / 'a.sqlite'}") as a, open_db(f"sqlite:///{tmp_path / 'b.sqlite'}") as b:
        a.commit(rec)
        a.export(tmp_path / "records.jsonl")
        b.import_file(tmp_path / "records.jsonl")
        assert list(b.records()) == [rec]


def test_inductor_failing_skips_torch_compile_with_the_reason(monkeypatch) -> None:
    import torch

    from kernelgen.check.baselines import ReferenceSkipped

    bench = _bench()

    def broken(fn, *args, **kwargs):
        def run(*a):
            raise RuntimeError("backend='inductor' raised:\nCppCompileError: no compiler")
        return run

    monkeypatch.setattr(torch, "compile", broken)
    with pytest.raises(ReferenceSkipped, match="torch.compile failed: RuntimeError: backend='inductor' raised: "
                                               "CppCompileError: no compiler"):
        bench.time_compiled()


def test_torch_compile_that_disagrees_with_eager_is_skipped_not_timed(monkeypatch) -> None:
    import torch

    from kernelgen.check.baselines import ReferenceSkipped

    bench = _bench()
    monkeypatch.setattr(torch, "compile", lambda fn, *a, **k: (lambda *xs: [t + 1 for t in fn(*xs)]))
    with pytest.raises(ReferenceSkipped, match="disagrees with eager: output 0"):
        bench.time_compiled()


def test_torch_compile_is_compiled_once_and_later_calls_only_time(monkeypatch) -> None:
    import torch

    bench = _bench()
    compiles = []

    def counting(fn, *args, **kwargs):
        compiles.append(fn)
        return fn  # the traced ATen graph itself: no Inductor here (slow), the path around it is the same

    monkeypatch.setattr(torch, "compile", counting)
    first, second = bench.time_compiled(), bench.time_compiled()
    assert len(compiles) == 1
    bench.inputs = [t.clone() for t in bench.inputs]  # what moving them to a kernel's device does
    bench.time_compiled()
    assert len(compiles) == 2  # compiled for the new inputs, never run on the old ones
    assert all(t is None or t.median > 0 for t in (first, second))  # None: a disturbed timing, as eager's


@pytest.mark.slow
def test_inductor_compiles_the_reference_and_matches_eager() -> None:
    import torch

    from kernelgen.ir.reference import evaluate
    from kernelgen.check.baselines import compile_reference

    bench = _bench()
    run = compile_reference(bench.graph, bench.inputs, bench.expected)
    (out,) = run()
    torch.testing.assert_close(out, evaluate(bench.graph, bench.inputs)[0], rtol=1e-4, atol=1e-5)
