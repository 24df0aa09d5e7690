"""A tuned model checked as a whole (``kernelgen.tune.model_check``): a region whose record loses inside the real
step is not used there, what the check decides is a verdict later processes dispatch, and a mix of per-region
choices is kept only when no whole variant beats it beyond the rounds' spread."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kernelgen.backends import get_backend
from kernelgen.db import open_db
from kernelgen.ir.values import Evidence, TimeStats
from kernelgen.runtime.implementations import candidates_for
from kernelgen.runtime.records import usable_best
from kernelgen.tune import model_check
from kernelgen.tune.model import ModelSpec, tune_model
from kernelgen.tune.model_capture import capture

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.timeout(600)


def stats(ms: float, spread: float = 0.0) -> TimeStats:
    return TimeStats(median=ms * 1e-3, min=ms * 1e-3, spread=spread, repeats=3)


def region(tuned: float, untuned: float, aten: float, same: bool = False) -> model_check.RegionCheck:
    check = model_check.RegionCheck("k" * 24, "pointwise", None, 1)
    check.times = {"tuned": stats(tuned, 0.01), "untuned": stats(untuned, 0.01), "aten": stats(aten, 0.01)}
    kernel = ("pointwise", None)
    check.runs = {"tuned": kernel, "untuned": kernel if same else ("reduction", None), "aten": ("aten", None)}
    return check


def test_a_region_keeps_its_record_unless_another_variant_wins_in_the_step_beyond_the_spread():
    assert model_check._region_choice(region(1.0, 0.99, 1.5)) == "tuned"  # within the 2% margin
    assert model_check._region_choice(region(1.0, 0.80, 1.5)) == "untuned"
    assert model_check._region_choice(region(1.0, 0.90, 0.50)) == "aten"
    # the same kernel as the record is no evidence against it: only a different one can replace it
    assert model_check._region_choice(region(1.0, 0.50, 1.5, same=True)) == "tuned"
    assert model_check._region_choice(region(1.0, 0.50, 0.8, same=True)) == "aten"


def test_the_mix_is_kept_only_when_no_whole_step_beats_it_beyond_the_spread():
    assert model_check._step_choice({"tuned": stats(10), "untuned": stats(10.5), "aten": stats(11),
                                     "mixed": stats(9.9)}) == "mixed"
    # the mix within the spread of a faster whole step: the mix (it has per-region evidence)
    assert model_check._step_choice({"tuned": stats(10), "untuned": stats(9.5, 0.1), "aten": stats(11),
                                     "mixed": stats(9.9, 0.1)}) == "mixed"
    # the regions' choices interact badly: the fastest whole step wins
    assert model_check._step_choice({"tuned": stats(10), "untuned": stats(8), "aten": stats(11),
                                     "mixed": stats(9.9)}) == "untuned"
    # no mix: the tuned step unless another beats it clearly
    assert model_check._step_choice({"tuned": stats(10), "untuned": stats(9.9), "aten": stats(11)}) == "tuned"
    assert model_check._step_choice({"tuned": stats(10), "untuned": stats(12), "aten": stats(7)}) == "aten"


@pytest.mark.slow
def test_a_record_that_loses_inside_the_step_is_replaced_by_a_verdict_later_processes_dispatch(tmp_path, monkeypatch):
    """Tune a model, then make one region's tuned variant slow inside the step (as a record measured alone can
    be): the check gives that region another variant, writes it as the newest verdict, and leaves the others."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("KERNELGEN_CACHE_DIR", str(tmp_path / "kernels"))
    db = open_db(f"sqlite:///{tmp_path / 't.sqlite'}")
    spec = ModelSpec(factory="model_fakes:make", mode="infer", backend="cpp")
    tuned = tune_model(spec, db=db, trials=1, check_step=False)
    assert tuned.ok and tuned.check is None
    captured = capture(spec, db)
    slow_key = max(captured.regions, key=lambda r: r.aten_s).key
    variants = model_check._variants

    def slowed(group, *args):  # one region's kernel costs 2 ms more a call inside the step (tuned or not)
        out = variants(group, *args)
        if group[0][1].compiled.choices()[0]["graph"].workload_key == slow_key:
            for variant in ("tuned", "untuned"):
                out[variant] = [(name, _Slow(twin)) for name, twin in out[variant]]
        return out

    monkeypatch.setattr(model_check, "_variants", slowed)
    check = model_check.check_model(spec, db, captured.run, captured.eager, captured.graphs, seconds=5.0)
    assert check.rounds >= model_check.MIN_ROUNDS
    assert set(check.steps) >= {"eager", "tuned", "untuned", "aten"}
    by_key = {r.key: r for r in check.regions}
    slow = by_key[slow_key]
    assert slow.times["tuned"].median > 2e-3 * slow.calls  # the planted cost was seen inside the step
    # (the mix, or every region's ATen ops where those beat it: on a tiny model under load they can)
    assert slow.choice == "aten" and slow_key in check.changed and check.kept in ("mixed", "aten")
    target = get_backend("cpp").target()
    impls = candidates_for(slow.graph, "cpp")
    best = usable_best(db, slow_key, target.fingerprint, impls)
    assert best.evidence is Evidence.DECLARED and "inside model" in best.measurement.message
    assert best.implementation == slow.runs[slow.choice][0]
    # regions that ran the same thing in every variant were left alone
    assert all(r.choice == "tuned" for r in check.regions if len(set(r.runs.values())) == 1)


class _Slow:
    """A twin region whose run costs 2 ms more (a record that loses inside the step)."""

    def __init__(self, twin) -> None:
        self.twin = twin
        self.compiled = twin.compiled

    def run(self, inputs):
        time.sleep(2e-3)
        return self.twin.run(inputs)
