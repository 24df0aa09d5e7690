"""A CNN's convolutions through the torch.compile backend (issue 33 item 3): conv + batch norm + ReLU (and the residual
add) is one ``conv`` region in inference, whose weight input is marked constant; in training the forward's
convolutions are regions with no constant input, ``convolution_backward`` and training batch norm stay ATen's, and
every gradient is eager's. With the packed weight forced as the default, an in-place update of a weight between
calls gives eager's new answer, and an unchanged weight is packed once."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from kernelgen.frontend import dynamo_backend, region_op  # noqa: E402
from kernelgen.ir.space import SearchSpace  # noqa: E402
from kernelgen.templates import vendor_conv  # noqa: E402
from kernelgen.templates.vendor_conv import CALL, PACK, VendorConvImplementation  # noqa: E402


class Block(nn.Module):
    """ResNet's basic block with a downsampling shortcut, after a stem."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.conv1, self.bn1 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16)
        self.conv2, self.bn2 = nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.down = nn.Sequential(nn.Conv2d(8, 16, 1, stride=2, bias=False), nn.BatchNorm2d(16))

    def forward(self, x):
        x = self.stem(x)
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.down(x))


def _model(seed=0):
    torch.manual_seed(seed)
    model = Block()
    for bn in (m for m in model.modules() if isinstance(m, nn.BatchNorm2d)):  # statistics that are not 0 and 1
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    return model, torch.randn(2, 3, 12, 12)


def _conv_graphs(graphs):
    kernels = [region_op.kernel_of(k) for g in graphs for k in g.keys]
    return [k.graph for k in kernels if k.template == "conv"]


def test_inference_conv_bn_relu_is_one_region_with_a_constant_weight():
    dynamo_backend.register()
    torch._dynamo.reset()
    model, x = _model()
    model.eval()
    compiled = torch.compile(copy.deepcopy(model), backend="kernelgen")
    with torch.no_grad(), dynamo_backend.collect() as graphs:
        got = compiled(x)
        want = model(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert not any("convolution" in op for g in graphs for op in g.left), [g.as_dict() for g in graphs]
    convs = _conv_graphs(graphs)
    assert len(convs) == 4, [g.as_dict() for g in graphs]
    for graph in convs:
        weight = graph.nodes[next(n for n in graph.nodes if n.op == "conv").inputs[1]]
        assert weight.attr("constant") is True
    # every batch norm (and ReLU, and the residual add) went into its convolution's region
    assert sum(n.op == "relu" for g in convs for n in g.nodes) == 3
    assert not any(g.runs.get("eager") for g in graphs) and sum(g.runs.get("kernel", 0) for g in graphs)


def test_training_convolutions_are_regions_and_gradients_are_eagers():
    dynamo_backend.register()
    torch._dynamo.reset()
    model, x = _model()
    model.train()
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, backend="kernelgen")
    with dynamo_backend.collect() as graphs:
        got = compiled(x)
        got.sum().backward()
    want = model(x)
    want.sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for (name, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    for (name, b), (_, c) in zip(model.named_buffers(), twin.named_buffers()):  # running statistics updated alike
        torch.testing.assert_close(c, b, msg=lambda m, n=name: f"{n}: {m}")
    convs = _conv_graphs(graphs)
    assert len(convs) == 4
    assert not any(n.attr("constant") for g in convs for n in g.nodes)  # a training step's weights change
    left = [op for g in graphs for op in g.left]
    assert any("convolution_backward" in op for op in left) and any("batch_norm" in op for op in left)


@pytest.fixture
def packed_default(monkeypatch):
    """Untuned dispatch runs oneDNN's call with the packed weight wherever it is offered; counts the packs."""
    if not torch.backends.mkldnn.is_available():
        pytest.skip("no oneDNN in this torch")
    space = VendorConvImplementation.space

    def packed(self, target):
        found = space(self, target)
        if PACK not in found.names:
            return found
        return SearchSpace(found.params, found.constraints, {**found.default(), CALL: "onednn", PACK: True})

    packs = []
    reorder = vendor_conv.ConvLauncher._reorder

    def counted(self, weight, x):
        packs.append(weight)
        return reorder(self, weight, x)

    monkeypatch.setattr(VendorConvImplementation, "space", packed)
    monkeypatch.setattr(vendor_conv.ConvLauncher, "_reorder", counted)
    return packs


def test_packed_weights_follow_in_place_updates_between_calls(packed_default):
    dynamo_backend.register()
    torch._dynamo.reset()
    model, x = _model()
    model.eval()
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, backend="kernelgen")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
        first = len(packed_default)
        assert first >= 4  # each convolution's weight packed (the dispatch check may pack once more)
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
        assert len(packed_default) == first  # unchanged weights: packed once, not per call
        for module in ("conv2", "down.0"):  # an optimizer step's in-place update, between calls
            for m in (model, twin):
                m.get_submodule(module).weight.mul_(-1.5)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
        twin.load_state_dict(_model(seed=1)[0].state_dict())
        model.load_state_dict(_model(seed=1)[0].state_dict())
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    assert len(packed_default) > first
