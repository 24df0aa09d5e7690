"""SDPA as ATen's fused GPU ops (cuDNN, FlashAttention, memory-efficient) in a CUDA graph: the partitioner makes an
attention region of each whose ``out`` alone is read, with kernelgen's attention template and the ATen op as
candidates, the ATen op first untuned; statistics, dropout and the backward ops stay ATen with a reason.

No GPU here: the graphs are traced on fake CUDA tensors, and the lowered graph's values are checked on CPU
tensors against ``_scaled_dot_product_attention_math`` (eager's reference)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from kernelgen.frontend.partition import partition  # noqa: E402
from kernelgen.frontend.region_op import install, kernel_of  # noqa: E402
from kernelgen.ir.reference import evaluate  # noqa: E402
from kernelgen.runtime.implementations import candidates_for  # noqa: E402

aten = torch.ops.aten
B, H, T, D = 2, 3, 16, 8

# (op, its call from (q, k, v, bias, dropout, causal, scale), reads the bias)
FUSED = {
    "cudnn": (lambda q, k, v, bias, p, causal, scale: aten._scaled_dot_product_cudnn_attention.default(
        q, k, v, bias, False, p, causal, False, scale=scale), True),
    "flash": (lambda q, k, v, bias, p, causal, scale: aten._scaled_dot_product_flash_attention.default(
        q, k, v, p, causal, False, scale=scale), False),
    "efficient": (lambda q, k, v, bias, p, causal, scale: aten._scaled_dot_product_efficient_attention.default(
        q, k, v, bias, False, p, causal, scale=scale), True),
}


def fake_cuda_graph(fn, n_inputs=4, dtype=torch.bfloat16):
    """``fn(q, k, v, bias)`` traced on fake CUDA tensors, dead projections removed (as AOTAutograd's graphs)."""
    with FakeTensorMode():
        shapes = [(B, H, T, D)] * 3 + [(B, H, T, T)] + [(B, H, T, D)] * (n_inputs - 4)
        inputs = [torch.empty(s, device="cuda", dtype=dtype) for s in shapes]
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_gpu_attention_is_an_attention_region_with_aten_first(name, causal, monkeypatch):
    monkeypatch.setattr("kernelgen.runtime.aten.ENABLED", True)  # the untuned rules (the suite turns them off)
    call, reads_bias = FUSED[name]
    # (SDPA passes no mask with is_causal: the ops' bias is None then)
    gm = fake_cuda_graph(lambda q, k, v, bias: call(q, k, v, None if causal else bias, 0.0, causal, 0.3)[0])
    found = partition(gm)
    assert [r.template for r in found.regions] == ["attention"], found.left
    region = found.regions[0]
    reads_bias = reads_bias and not causal
    assert len(region.inputs) == (4 if reads_bias else 3)
    kernel = kernel_of(install(gm, found.regions, direct=True)[0])
    # untuned, eager's fused kernel runs (it beat the template on an H100); a tuned record may pick the template
    assert kernel.compiled.aten_first
    assert [i.name for i in candidates_for(kernel.graph, "triton", aten_first=True)] == ["aten", "attention"]

    # the lowered graph computes eager's attention (scale, causal flag, additive bias) on CPU tensors
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, dtype=torch.bfloat16) for _ in range(3))
    bias = torch.randn(B, H, T, T, dtype=torch.bfloat16)
    args = [q, k, v, bias] if reads_bias else [q, k, v]
    (got,) = evaluate(region.graph, args)
    want = aten._scaled_dot_product_attention_math(q.float(), k.float(), v.float(),
                                                   attn_mask=bias.float() if reads_bias else None,
                                                   is_causal=causal, scale=0.3)[0]
    torch.testing.assert_close(got, want.to(torch.bfloat16))


def test_cpu_flash_attention_keeps_the_template_first(monkeypatch):
    monkeypatch.setattr("kernelgen.runtime.aten.ENABLED", True)
    # the per-target rule: eager's fused GPU kernels run first, on CPUs the template does
    gm = make_fx(lambda q, k, v: aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, True)[0],
                 tracing_mode="fake")(*(torch.randn(B, H, T, D) for _ in range(3)))
    gm.graph.eliminate_dead_code()
    found = partition(gm)
    kernel = kernel_of(install(gm, found.regions, direct=True)[0])
    assert kernel.template == "attention" and not kernel.compiled.aten_first


@pytest.mark.parametrize("name,statistic", [("cudnn", "[B, H, Tq, 1]"), ("flash", "FlashAttention's logsumexp"),
                                            ("efficient", "multiple of 32")])
def test_read_statistics_keep_the_op_aten_with_the_reason(name, statistic):
    call, _ = FUSED[name]
    gm = fake_cuda_graph(lambda q, k, v, bias: call(q, k, v, bias, 0.0, True, None)[:2])
    found = partition(gm)
    assert not found.regions
    (reason,) = [r for n, r in found.left.items() if "scaled_dot_product" in n.name]
    assert statistic in reason and "stays ATen" in reason


@pytest.mark.parametrize("name", sorted(FUSED))
def test_dropout_stays_aten_with_the_reason(name):
    call, _ = FUSED[name]
    gm = fake_cuda_graph(lambda q, k, v, bias: call(q, k, v, bias, 0.1, False, None)[0])
    found = partition(gm)
    assert not found.regions
    assert any("dropout" in r for r in found.left.values()), found.left


def test_debug_mask_stays_aten_with_the_reason():
    gm = fake_cuda_graph(lambda q, k, v, bias: aten._scaled_dot_product_flash_attention.default(
        q, k, v, 0.0, False, True)[0])
    assert any("debug mask" in r for r in partition(gm).left.values())


BACKWARD = {
    "cudnn": lambda g, q, k, v, bias: aten._scaled_dot_product_cudnn_attention_backward.default(
        g, q, k, v, *_fwd("cudnn", q, k, v, bias)),
    "flash": lambda g, q, k, v, bias: aten._scaled_dot_product_flash_attention_backward.default(
        g, q, k, v, *_fwd("flash", q, k, v, bias)),
    "efficient": lambda g, q, k, v, bias: aten._scaled_dot_product_efficient_attention_backward.default(
        g, q, k, v, *_fwd("efficient", q, k, v, bias)),
}


def _fwd(name, q, k, v, bias):
    """The forward's saved values in the order its backward takes them (after grad, q, k, v)."""
    if name == "cudnn":
        r = aten._scaled_dot_product_cudnn_attention.default(q, k, v, bias, True, 0.0, True)
        return r[0], r[1], r[6], r[7], bias, None, None, T, T, 0.0, True
    if name == "flash":
        r = aten._scaled_dot_product_flash_attention.default(q, k, v, 0.0, True)
        return r[0], r[1], None, None, T, T, 0.0, True, r[6], r[7]
    r = aten._scaled_dot_product_efficient_attention.default(q, k, v, bias, True, 0.0, True)
    return bias, r[0], r[1], r[2], r[3], 0.0, [True, True, True, False], True


@pytest.mark.parametrize("name", sorted(BACKWARD))
def test_backward_ops_stay_aten_with_the_reason(name):
    gm = fake_cuda_graph(lambda q, k, v, bias, g: BACKWARD[name](g, q, k, v, bias)[:3], n_inputs=5)
    found = partition(gm)
    assert not found.regions
    backward = [r for n, r in found.left.items() if "backward" in str(n.target)]
    assert backward and "kernelgen's attention backward reads its own statistic" in backward[0], found.left
