"""CUDA graphs for the backend's compiled graphs (``mode="reduce-overhead"``, ``options={"cudagraphs": True}``): which
graphs run uncaptured and why, capture only after the warm-up call, the index checks' device-side form while
captured, and a CPU model with the option on (capture skipped, said once) equal to eager.

No GPU here: graphs are traced on fake CUDA tensors and torch's ``cudagraphify`` is replaced where it would run."""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402
from torch.fx.experimental.symbolic_shapes import ShapeEnv  # noqa: E402

from kernelgen.errors import KernelgenError  # noqa: E402
from kernelgen.frontend import cuda_graphs, dynamo_backend  # noqa: E402
from kernelgen.runtime import bounds  # noqa: E402

dynamo_backend.register()


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    torch._dynamo.reset()
    monkeypatch.setattr(cuda_graphs, "_LOGGED", set())
    yield
    torch._dynamo.reset()


def cuda_graph(fn, shape=(4, 8)):
    with FakeTensorMode():
        x = torch.empty(shape, device="cuda")
    return make_fx(fn, tracing_mode="fake")(x)


def with_placeholder_first(gm, value):
    """``gm`` with one more input in front, whose meta value is ``value`` (as Dynamo's size inputs)."""
    first = next(iter(gm.graph.nodes))
    with gm.graph.inserting_before(first):
        node = gm.graph.placeholder("s0")
    node.meta["val"] = value
    gm.recompile()
    return gm


def size_symbol():
    """A symbolic size, as Dynamo passes a dynamic dim to the graph."""
    from torch._dynamo.source import ConstantSource

    env = ShapeEnv()
    return env.create_symintnode(env.create_symbol(4, ConstantSource("s0")), hint=4)


def with_host_read(gm):
    """``gm`` with an ``.item()`` of its input (an unbacked size: a host sync)."""
    placeholder = next(iter(gm.graph.nodes))
    out = next(n for n in gm.graph.nodes if n.op == "output")
    with gm.graph.inserting_before(out):
        node = gm.graph.call_function(torch.ops.aten._local_scalar_dense.default, (placeholder,))
    node.meta["val"] = ShapeEnv().create_unbacked_symint()
    gm.recompile()
    return gm


def test_a_clean_cuda_graph_is_captured():
    assert cuda_graphs.skip_reason(cuda_graph(lambda x: x * 2 + 1), 0) is None


@pytest.mark.parametrize("make,reason", [
    (lambda: make_fx(lambda x: x * 2)(torch.randn(4, 8)), "no CUDA tensor"),
    (lambda: cuda_graph(lambda x: x * 2 + torch.ones(8, device="cpu").sum()), "cpu device"),
    (lambda: cuda_graph(lambda x: x.add_(1)), "mutated inputs"),
    (lambda: with_placeholder_first(cuda_graph(lambda x: x * 2), size_symbol()), "dynamic shapes"),
    (lambda: with_host_read(cuda_graph(lambda x: x * 2)), "cannot be captured or a host read"),
])
def test_unsafe_graphs_run_uncaptured_with_the_reason_logged_once(make, reason, monkeypatch, caplog):
    monkeypatch.setattr(cuda_graphs, "cudagraphify", lambda *a, **k: pytest.fail("captured an unsafe graph"))
    gm = make()
    assert reason in cuda_graphs.skip_reason(gm, 0)
    calls = []

    def run(args):
        calls.append(args)
        return args

    with caplog.at_level(logging.WARNING, logger="kernelgen"):
        step = cuda_graphs.Step()
        for _ in range(2):  # a second graph with the same reason logs nothing more
            wrapped = cuda_graphs.wrap(run, gm, 0, "forward", step)
            assert wrapped is run and not step.forward_captured
    assert len([r for r in caplog.records if reason in r.getMessage()]) == 1
    # its backward stays uncaptured too, without a second message
    assert cuda_graphs.wrap(run, cuda_graph(lambda x: x * 2), 0, "backward", step) is run


def test_capture_starts_only_after_the_warm_up_call(monkeypatch):
    gm = cuda_graph(lambda x: x * 2 + 1)
    captured, runs = [], []

    def fake_cudagraphify(run, inputs, static, **kwargs):
        captured.append((list(inputs), kwargs))
        return lambda args: ("replayed", args)

    monkeypatch.setattr(cuda_graphs, "cudagraphify", fake_cudagraphify)
    step = cuda_graphs.Step()
    wrapped = cuda_graphs.wrap(lambda args: runs.append(args) or "plain", gm, 0, "inference", step)
    assert isinstance(wrapped, cuda_graphs.CudaGraphed) and step.forward_captured

    assert wrapped(["first"]) == "plain" and not captured  # every region chooses and builds its kernel here
    assert wrapped(["second"]) == ("replayed", ["second"])
    assert len(captured) == 1 and captured[0][0] == ["second"]
    assert captured[0][1]["is_inference"] and not captured[0][1]["is_backward"]
    assert wrapped(["third"]) == ("replayed", ["third"]) and len(captured) == 1 and runs == [["first"]]


def test_a_backward_beside_a_captured_forward_tells_the_tree_manager(monkeypatch):
    step = cuda_graphs.Step(forward_captured=True, device_index=0)
    told = []

    class Manager:
        def set_to_running_backward(self):
            told.append(True)

    import torch._inductor.cudagraph_trees as trees

    monkeypatch.setattr(trees, "get_manager", lambda index, create_if_none_exists=True: Manager())
    backward = cuda_graphs.wrap(lambda args: "grads", cuda_graph(lambda x: x.add_(1)), 0, "backward", step)
    assert backward(["g"]) == "grads" and told == [True]


def test_index_checks_assert_on_the_device_while_captured(monkeypatch):
    # a host read of the index range would fail a capture: the check becomes a device-side assert
    checks = ((1, 10, False, "IndexError", 0),)
    asserted = []
    monkeypatch.setattr(bounds, "capturing", lambda index: True)
    monkeypatch.setattr(torch, "_assert_async", lambda cond, msg: asserted.append((bool(cond), msg)))
    bounds.check((torch.zeros(3), torch.tensor([0, 12])), checks)
    assert asserted == [(False, "index out of bounds for dimension 0 with size 10")]
    monkeypatch.setattr(bounds, "capturing", lambda index: False)
    with pytest.raises(IndexError):  # uncaptured (the warm-up call included): eager's error
        bounds.check((torch.zeros(3), torch.tensor([0, 12])), checks)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))).sum(-1)


@pytest.mark.parametrize("how", [{"options": {"cudagraphs": True}}, {"mode": "reduce-overhead"}])
def test_cpu_model_with_cuda_graphs_asked_runs_uncaptured_and_equals_eager(how, caplog):
    torch.manual_seed(0)
    model, x = MLP(), torch.randn(4, 8)
    compiled = torch.compile(model, backend="kernelgen", **how)
    with caplog.at_level(logging.WARNING, logger="kernelgen"):
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x))
            got = torch.autograd.grad(compiled(x).sum(), list(model.parameters()))
            want = torch.autograd.grad(model(x).sum(), list(model.parameters()))
            torch.testing.assert_close(got, want)
    said = [r.getMessage() for r in caplog.records if "without CUDA graphs" in r.getMessage()]
    assert len(said) == 1 and "no CUDA tensor" in said[0]


def test_unknown_mode_is_a_kernelgen_error():
    with pytest.raises(Exception) as info:
        torch.compile(lambda x: x + 1, backend="kernelgen", mode="max-autotune")(torch.randn(3))
    chain = [info.value, getattr(info.value, "inner_exception", None), info.value.__cause__]
    assert any(isinstance(e, KernelgenError) and "reduce-overhead" in str(e) for e in chain)
