"""Whole-graph verdicts (``kernelgen.runtime.step_verdicts``): a model whose compiled step lost to eager's in its
whole-step check runs eagerly under ``torch.compile(model, backend="kernelgen")``, with eager's values and
gradients, until a newer check says otherwise; tuning compiles it regardless."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from kernelgen.backends import get_backend
from kernelgen.db import open_db
from kernelgen.frontend import dynamo_backend
from kernelgen.ir.values import Evidence, TimeStats
from kernelgen.runtime import step_verdicts
from kernelgen.tune import model_check
from kernelgen.tune.model import ModelSpec
from kernelgen.tune.model_capture import capture

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.timeout(600)


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.up = torch.nn.LayerNorm(16), torch.nn.Linear(16, 32)

    def forward(self, x):
        return torch.nn.functional.gelu(self.up(self.norm(x))).sum(-1)


def keys_of(model, *inputs, grad=True):
    """The step keys Dynamo's graphs of ``model(*inputs)`` get (a backend that only reads them)."""
    seen = []

    def backend(gm, example_inputs):
        seen.append(step_verdicts.graph_key(gm, example_inputs, torch.is_grad_enabled()))
        return gm.forward

    torch._dynamo.reset()
    with torch.set_grad_enabled(grad):
        torch.compile(model, backend=backend)(*inputs)
    return seen


def test_a_graph_key_names_the_graph_and_its_inputs_not_the_objects():
    torch.manual_seed(0)
    a, b = Block(), Block()  # other weights, other objects: the same graph
    x = torch.randn(4, 16)
    first, again, other = keys_of(a, x), keys_of(b, x.clone()), keys_of(a, torch.randn(5, 16))
    assert len(first) == 1 and first == again
    assert other != first and other[0].family == first[0].family  # another shape: same structure
    assert keys_of(a, x, grad=False) != first  # inference and training steps are different graphs
    assert keys_of(a, x.t().contiguous().t()) != first  # another layout
    assert (4, 16) in [s.shape for s in first[0].signature]  # the input, beside the lifted parameters


def verdict(db, key, eager_wins: bool) -> None:
    t = TimeStats(median=1e-3, min=1e-3, spread=0.01, repeats=3)
    slower = TimeStats(median=2e-3, min=2e-3, spread=0.01, repeats=3)
    step_verdicts.record_verdict(db, key, get_backend("cpp").target(), "cpp", eager_wins,
                                 t if eager_wins else slower, slower if eager_wins else t, "test rounds", "block")


def test_a_graph_with_an_eager_verdict_runs_eagerly_until_a_newer_verdict_compiles_it(tmp_path):
    db = open_db(f"sqlite:///{tmp_path / 'v.sqlite'}")
    torch.manual_seed(0)
    model = Block()
    x = torch.randn(4, 16, requires_grad=True)
    [key] = keys_of(model, x)
    verdict(db, key, eager_wins=True)
    record = db.best(key.key, get_backend("cpp").target().fingerprint)
    assert record.implementation == step_verdicts.STEP_EAGER and record.evidence is Evidence.DECLARED

    def compiled_run():
        torch._dynamo.reset()
        with dynamo_backend.collect() as graphs:
            fn = torch.compile(model, backend="kernelgen", options={"db": db})
            xx = x.detach().clone().requires_grad_()
            out = fn(xx)
            out.sum().backward()
        return graphs, out, xx.grad

    graphs, out, grad = compiled_run()
    xe = x.detach().clone().requires_grad_()
    expected = model(xe)
    expected.sum().backward()
    assert [g.name for g in graphs] == ["eager"] and graphs[0].regions == 0 and graphs[0].step == key
    assert "faster eagerly" in next(iter(graphs[0].left.values()))
    torch.testing.assert_close(out, expected, rtol=0, atol=0)  # eager's own ops: bit for bit
    torch.testing.assert_close(grad, xe.grad, rtol=0, atol=0)

    with step_verdicts.ignored():  # tuning compiles it whatever the verdict says
        graphs, out, grad = compiled_run()
    assert {g.name for g in graphs} == {"forward", "backward"} and all(g.step == key for g in graphs)

    time.sleep(0.01)  # a newer verdict: the compiled step won a later check
    verdict(db, key, eager_wins=False)
    graphs, out, grad = compiled_run()
    assert {g.name for g in graphs} == {"forward", "backward"} and sum(g.regions for g in graphs) > 0
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grad, xe.grad)


def test_an_unreachable_database_compiles_the_graph(tmp_path):
    torch._dynamo.reset()
    with dynamo_backend.collect() as graphs:
        fn = torch.compile(Block(), backend="kernelgen", options={"db": "postgresql://nobody@127.0.0.1:9/none"})
        fn(torch.randn(4, 16))
    assert graphs and all(g.name != "eager" for g in graphs)


@pytest.mark.slow
def test_a_check_whose_compiled_steps_lose_to_eager_runs_the_model_eagerly_afterwards(tmp_path, monkeypatch):
    """Every region costs 3 ms more inside the step (a compiled step slower than eager's in every variant): the
    check says so, and a later compile of the model hands Dynamo its graph back."""
    monkeypatch.syspath_prepend(str(HERE))
    db = open_db(f"sqlite:///{tmp_path / 't.sqlite'}")
    spec = ModelSpec(factory="model_fakes:make", mode="infer", backend="cpp")
    torch._dynamo.reset()
    with step_verdicts.ignored():
        captured = capture(spec, db)
    variants = model_check._variants

    def slowed(group, *args):
        out = variants(group, *args)
        for runners in out.values():
            for _, runner in runners:
                runner.run = _slow(runner.run)
        return out

    monkeypatch.setattr(model_check, "_variants", slowed)
    with step_verdicts.ignored():
        check = model_check.check_model(spec, db, captured.run, captured.eager, captured.graphs, seconds=2.0)
    assert check.eager_step and check.to_json()["eager_step"]
    assert check.steps["eager"].median < min(t.median for v, t in check.steps.items() if v != "eager")

    import model_fakes

    model, x = model_fakes.make()
    torch._dynamo.reset()
    with torch.no_grad(), dynamo_backend.collect() as graphs:
        out = torch.compile(model, backend="kernelgen", options={"db": db})(x)
    assert [g.name for g in graphs] == ["eager"]
    torch.testing.assert_close(out, model(x), rtol=0, atol=0)


def _slow(run):
    """A region's variant whose every call costs 3 ms more."""

    def slower(inputs):
        time.sleep(3e-3)
        return run(inputs)
    return slower
