"""Written-out attention (softmax(q @ kᵀ / c [+ mask]) @ v) in a torch.compile'd graph becomes one attention
region when nothing else reads its scores or probabilities, with eager's values; otherwise it is left as it is."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from kernelgen.frontend import dynamo_backend  # noqa: E402
from kernelgen.frontend.attention_pattern import fuse_written_attention  # noqa: E402

dynamo_backend.register()


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def gpt2_attention(q, k, v, keep):
    # HF's eager GPT-2: a boolean causal buffer, hidden scores filled with the dtype's min
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = torch.where(keep, s, torch.finfo(s.dtype).min)
    return torch.softmax(s, dim=-1) @ v


def bert_attention(q, k, v, additive):
    s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + additive
    return torch.matmul(torch.softmax(s, dim=-1), v)


def compiled(fn, *inputs):
    with torch.no_grad(), dynamo_backend.collect() as graphs:
        got = torch.compile(fn, backend="kernelgen")(*inputs)
    torch.testing.assert_close(got, fn(*inputs))
    return graphs


def qkv(b=2, h=3, t=7, d=8, layout="bhtd"):
    if layout == "bthd":  # heads split out of a [B, T, H*D] projection, as the models do
        return [torch.randn(b, t, h, d).transpose(1, 2) for _ in range(3)]
    return [torch.randn(b, h, t, d) for _ in range(3)]


@pytest.mark.parametrize("layout", ["bhtd", "bthd"])
def test_gpt2_causal_fill_is_one_attention_region(layout):
    keep = torch.tril(torch.ones(7, 7, dtype=torch.bool))
    keep[2] = False  # a query that sees no key: eager's fill gives it uniform weights, so must we
    graphs = compiled(gpt2_attention, *qkv(layout=layout), keep)
    assert graphs[0].templates["attention"] == 1 and "gemm" not in graphs[0].templates
    assert not any("bmm" in op or "clone" in op for op in graphs[0].left), graphs[0].left


def test_bert_additive_padding_mask_is_one_attention_region():
    keep = torch.ones(2, 7)
    keep[1, 5:] = 0
    additive = (1.0 - keep[:, None, None, :]) * torch.finfo(torch.float32).min
    graphs = compiled(bert_attention, *qkv(layout="bthd"), additive)
    assert graphs[0].templates["attention"] == 1 and "gemm" not in graphs[0].templates


def test_no_mask_and_a_multiplied_scale():
    graphs = compiled(lambda q, k, v: torch.softmax((q @ k.transpose(-1, -2)) * 0.3, -1) @ v, *qkv())
    assert graphs[0].templates["attention"] == 1


def test_probabilities_read_elsewhere_are_not_rewritten():
    def fn(q, k, v):
        p = torch.softmax(q @ k.transpose(-1, -2) / 3.0, -1)
        return p @ v, p

    gm = make_fx(fn, tracing_mode="fake")(*qkv())
    assert fuse_written_attention(gm) == 0
    gm = make_fx(lambda q, k, v: fn(q, k, v)[0], tracing_mode="fake")(*qkv())
    assert fuse_written_attention(gm) == 1
    assert "flash_attention" in gm.code and "bmm" not in gm.code


def test_training_keeps_the_pattern_for_the_backward_and_matches_eager():
    # the backward reads the probabilities: no rewrite, and eager's gradients
    q, k, v = (t.requires_grad_() for t in qkv())
    keep = torch.tril(torch.ones(7, 7, dtype=torch.bool))
    with dynamo_backend.collect() as graphs:
        got = torch.compile(gpt2_attention, backend="kernelgen")(q, k, v, keep)
        got_grads = torch.autograd.grad(got.sum(), (q, k, v))
    want = gpt2_attention(q, k, v, keep)
    torch.testing.assert_close(got, want)
    for a, b in zip(got_grads, torch.autograd.grad(want.sum(), (q, k, v))):
        torch.testing.assert_close(a, b)
    assert "attention" not in next(g for g in graphs if g.name == "forward").templates
