"""Linear layers' weights through the torch.compile backend (issue 33 item 3): in inference a GEMM region's B,
a Linear's ``t(weight)`` made outside the region, is marked constant (and nothing else is); a training graph marks
none. With ATen's GEMM first and the packed weight forced as the default, an MLP and GPT-2 equal eager, an
unchanged weight is packed once over repeated calls, and an in-place update or ``load_state_dict`` between calls
gives eager's new answer."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from kernelgen.frontend import dynamo_backend, region_op  # noqa: E402
from kernelgen.ir.space import SearchSpace  # noqa: E402
from kernelgen.templates import candidates  # noqa: E402
from kernelgen.templates.vendor_gemm import PACK, PACKED_LINEARS, PackedLinear, VendorGemmImplementation  # noqa: E402

TOL = {"rtol": 1e-5, "atol": 1e-5}


def _mlp(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 24, bias=False), nn.Tanh(), nn.Linear(24, 8))
    return model.eval(), torch.randn(3, 5, 16)


def _gemm_graphs(graphs):
    kernels = [region_op.kernel_of(k) for g in graphs for k in g.keys]
    return [k.graph for k in kernels if k.template == "gemm"]


def _marked(graph):
    """The argument positions of the region's inputs marked constant, and of its matmul's B."""
    b = graph.nodes[next(n for n in graph.nodes if n.op == "matmul").inputs[1]]
    while b.op != "input":
        b = graph.nodes[b.inputs[0]]
    return {n.attr("index") for n in graph.nodes if n.op == "input" and n.attr("constant")}, {b.attr("index")}


def _compile(model, x, train=False):
    dynamo_backend.register()
    torch._dynamo.reset()
    compiled = torch.compile(copy.deepcopy(model), backend="kernelgen")
    with dynamo_backend.collect() as graphs:
        if train:
            compiled(x).sum().backward()
        else:
            with torch.no_grad():
                compiled(x)
    return _gemm_graphs(graphs)


def test_inference_marks_each_linears_weight_and_nothing_else():
    model, x = _mlp()
    gemms = _compile(model, x)
    assert len(gemms) == 3
    for graph in gemms:
        marked, b = _marked(graph)
        assert marked == b  # the weight, not the bias nor the activations
    training = _compile(model.train(), x, train=True)
    assert training and not any(n.attr("constant") for g in training for n in g.nodes)
    keys = {g.workload_key for g in gemms}
    assert not keys & {g.workload_key for g in training}


@pytest.fixture
def packed_default(monkeypatch):
    """Untuned dispatch runs ATen's GEMM with the packed weight wherever it is offered; counts the packs."""
    if not PACKED_LINEARS["float32"].available():
        pytest.skip("no MKL linear in this torch")
    space = VendorGemmImplementation.space

    def packed(self, target):
        found = space(self, target)
        if PACK not in found.names:
            return found
        return SearchSpace(found.params, found.constraints, {**found.default(), PACK: True})

    packs = []
    real = PACKED_LINEARS["float32"]

    def pack(w, m):
        packs.append(w)
        return real.pack(w, m)

    monkeypatch.setattr(VendorGemmImplementation, "space", packed)
    monkeypatch.setattr(candidates, "vendor_gemm_first", lambda problem, backend: True)
    monkeypatch.setitem(PACKED_LINEARS, "float32", PackedLinear(real.available, pack, real.run))
    return packs


def test_packed_weights_follow_in_place_updates_between_calls(packed_default):
    dynamo_backend.register()
    torch._dynamo.reset()
    model, x = _mlp()
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, backend="kernelgen")
    with torch.no_grad(), dynamo_backend.collect() as graphs:
        torch.testing.assert_close(compiled(x), model(x), **TOL)
        first = len(packed_default)
        assert first >= 3  # each Linear's weight packed (the dispatch check may pack once more)
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x), **TOL)
        assert len(packed_default) == first  # unchanged weights: packed once, not per call
        for index in (0, 2):  # an optimizer step's in-place update, between calls
            for m in (model, twin):
                m[index].weight.mul_(-1.5)
            torch.testing.assert_close(compiled(x), model(x), **TOL)
        twin.load_state_dict(_mlp(seed=1)[0].state_dict())
        model.load_state_dict(_mlp(seed=1)[0].state_dict())
        torch.testing.assert_close(compiled(x), model(x), **TOL)
    assert len(packed_default) > first
    assert not any(g.runs.get("eager") for g in graphs) and sum(g.runs.get("kernel", 0) for g in graphs)


def test_gpt2_inference_with_packed_weights_equals_eager(packed_default):
    pytest.importorskip("transformers", reason="transformers is not installed: pip install -e '.[models]'")
    from tests.models.eager_contract import compare_with_eager

    graphs = compare_with_eager("gpt2", "infer")
    gemms = _gemm_graphs(graphs)
    assert any(_marked(g)[0] for g in gemms)  # the projections' weights are marked
    for graph in gemms:
        marked, b = _marked(graph)
        assert marked <= b  # never an activation (attention's q @ k.T reads none)
    assert packed_default  # and the packed call ran
