"""Every model of examples/models.py, forward and forward+backward, through kernelgen's torch.compile backend
against a float64 run of the same model: kernelgen's float32 distance from float64 must be within a small
factor of eager float32's. A memory-layout change (channels_last, transposed weights) of eager float32 measures
the model's own sensitivity to summation order (ReLU masks and pool ties flip), so a model that amplifies
rounding is not mistaken for a kernel that loses precision.

Before (a CNN with BatchNorm in train mode): batch norm's channel sums folded thousands of values into one
float accumulator in sequence, 7x eager's error per region, which the model amplified into gradients 5x
further from float64 than eager's; they now accumulate in double (``reduction_cpp_ops.WIDE_SUMS``).
"""

from __future__ import annotations

import copy

import pytest
import torch

from examples.models import make, names, training_loss

FACTOR = 4.0  # kernelgen's distance may be this many times the larger of eager's and the layout change's ...
FLOOR = 5e-7  # ... plus a few float32 roundings (eps = 1.2e-7) of slack for reordered sums


def _relayout(module: torch.nn.Module, inputs: tuple) -> tuple[torch.nn.Module, tuple]:
    """The same model and inputs in other memory layouts: channels_last 4-d tensors, transposed 2-d weights."""
    other = copy.deepcopy(module)
    with torch.no_grad():
        for p in other.parameters():
            if p.dim() == 4:
                p.data = p.data.contiguous(memory_format=torch.channels_last)
            elif p.dim() == 2:
                p.data = p.data.t().contiguous().t()
    moved = tuple(x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else
                  x.transpose(-1, -2).contiguous().transpose(-1, -2) if x.dim() >= 2 and x.is_floating_point()
                  else x for x in inputs)
    return other, moved


def _step(module: torch.nn.Module, inputs: tuple, mode: str) -> list[torch.Tensor]:
    """The output and (fwd+bwd) every parameter's gradient, in float64 for comparing."""
    if mode == "fwd":
        with torch.no_grad():
            return [module(*inputs).double()]
    module.zero_grad(set_to_none=True)
    out = module(*inputs)
    training_loss(out).backward()
    return [out.detach().double()] + [p.grad.double() for _, p in module.named_parameters()]


def distance(got: list[torch.Tensor], ref: list[torch.Tensor]) -> float:
    """Max over tensors of max|got - ref| / max|ref|, each tensor's scale floored at 1e-3 of the run's largest
    (a gradient that cancels to ~0 in exact arithmetic is not divided by its own rounding noise)."""
    floor = 1e-3 * max(float(r.abs().max()) for r in ref)
    return max(float((g - r).abs().max()) / max(float(r.abs().max()), floor) for g, r in zip(got, ref))


def _distances(name: str, mode: str, train: bool) -> dict[str, float]:
    from kernelgen.frontend import dynamo_backend

    dynamo_backend.register()
    module, inputs = make(name, "test")
    if train:
        module.train()  # BatchNorm on the batch's statistics
    ref = _step(copy.deepcopy(module).double(), tuple(x.double() if x.is_floating_point() else x for x in inputs),
                mode)
    eager = _step(copy.deepcopy(module), inputs, mode)
    layout = _step(*_relayout(module, inputs), mode)
    torch._dynamo.reset()
    compiled = torch.compile(copy.deepcopy(module), backend="kernelgen", options={"backend": "cpp"})
    with dynamo_backend.collect() as graphs:
        ours = _step(compiled, inputs, mode)
    torch._dynamo.reset()
    assert sum(g.runs.get("kernel", 0) for g in graphs) > 0, "no kernelgen kernel ran"
    return {"eager": distance(eager, ref), "layout": distance(layout, ref), "kernelgen": distance(ours, ref)}


_FAST = {"bert", "cnn"}


def _cases():
    cases = [pytest.param(n, m, False, marks=[] if n in _FAST else [pytest.mark.slow])
             for n in names() for m in ("fwd", "fwd+bwd")]
    return cases + [pytest.param("cnn", "fwd+bwd", True, id="cnn-fwd+bwd-train")]


@pytest.mark.parametrize(("name", "mode", "train"), _cases())
def test_kernelgen_is_as_close_to_float64_as_eager_float32(name: str, mode: str, train: bool) -> None:
    d = _distances(name, mode, train)
    assert d["kernelgen"] <= FACTOR * max(d["eager"], d["layout"]) + FLOOR, d


def test_the_distance_sees_a_precision_loss() -> None:
    """The measure itself: a float16 round trip of one gradient (a real loss of precision) is far outside."""
    ref = [torch.linspace(-3, 3, 101, dtype=torch.float64)]
    lossy = [ref[0].half().double()]
    assert distance(lossy, ref) > FACTOR * distance([ref[0].float().double()], ref) + FLOOR


@pytest.mark.parametrize("shape", [(32, 64, 32, 32), (256, 32, 7, 7)], ids=["bn-32x64x32x32", "bn-256x32x7x7"])
def test_batch_norm_channel_sums_are_as_accurate_as_eagers(shape) -> None:
    """The region that lost precision: batch norm backward's per-channel sums over (N, H, W), run by rows of
    nested groups. Its distance from float64 must not exceed eager float32's (cascade summation) by more than
    one rounding."""
    import kernelgen

    g = torch.Generator().manual_seed(0)
    dy, x = torch.randn(*shape, generator=g), torch.randn(*shape, generator=g) + 3.0  # an offset: sums grow

    def sums(dy, x):
        return (dy * x).sum((0, 2, 3)), dy.sum((0, 2, 3)), x.sum((0, 2, 3))

    fast = kernelgen.compile(sums)
    ours, eager, ref = fast(dy, x), sums(dy, x), sums(dy.double(), x.double())
    assert fast.explain(dy, x)["implementation"] == "reduction"
    for o, e, r in zip(ours, eager, ref):
        assert distance([o.double()], [r]) <= distance([e.double()], [r]) + 1.2e-7
