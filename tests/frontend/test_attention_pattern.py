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


# --- grouped-query attention and masks that hide nothing (issue 33 item 4) -----------------------------------

def repeat_kv(x, n):
    # Hugging Face's: each key/value head copied n times, as Mistral's and Llama-3's SDPA path does with a mask
    b, h, t, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n, t, d).reshape(b, h * n, t, d)


def gqa_sdpa(q, k, v, mask):
    return F.scaled_dot_product_attention(q, repeat_kv(k, 2), repeat_kv(v, 2), attn_mask=mask)


def gqa_inputs(requires_grad=False):
    q, k, v = torch.randn(2, 4, 9, 8), torch.randn(2, 2, 9, 8), torch.randn(2, 2, 9, 8)
    mask = torch.tril(torch.ones(9, 9, dtype=torch.bool)) & ~torch.tril(torch.ones(9, 9, dtype=torch.bool), -4)
    return [t.requires_grad_(requires_grad) for t in (q, k, v)] + [mask]  # a sliding window of 4 keys


def test_repeat_kv_copies_are_not_made_the_attention_reads_the_key_value_heads():
    graphs = compiled(gqa_sdpa, *gqa_inputs())
    assert graphs[0].templates["attention"] == 1
    assert graphs[0].templates.get("pointwise", 0) == 1  # the mask's conversion; no copy of K or V
    assert graphs[0].runs.get("kernel", 0) >= 1


def test_repeat_kv_rewrite_points_the_op_at_the_uncopied_tensors():
    from kernelgen.frontend.attention_pattern import read_kv_groups

    def fn(q, k, v):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, repeat_kv(k, 2), repeat_kv(v, 2), 0.0,
                                                                          True)[0]

    q, k, v, _ = gqa_inputs()
    gm = make_fx(fn, tracing_mode="fake")(q, k, v)
    assert read_kv_groups(gm) == 1
    assert "clone" not in gm.code and "expand" not in gm.code
    torch.testing.assert_close(gm(q, k, v), fn(q, k, v))

    def copies_read_twice(q, k, v):  # a copy something else reads is made anyway: no rewrite
        kk = repeat_kv(k, 2)
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, kk, repeat_kv(v, 2), 0.0, True)[0], kk

    assert read_kv_groups(make_fx(copies_read_twice, tracing_mode="fake")(q, k, v)) == 0


def test_repeat_kv_in_training_keeps_the_copies_for_the_backward_and_matches_eager():
    q, k, v, mask = gqa_inputs(requires_grad=True)
    with dynamo_backend.collect() as graphs:
        got = torch.compile(gqa_sdpa, backend="kernelgen")(q, k, v, mask)
        got_grads = torch.autograd.grad(got.square().sum(), (q, k, v))
    want = gqa_sdpa(q, k, v, mask)
    torch.testing.assert_close(got, want)
    for a, b in zip(got_grads, torch.autograd.grad(want.square().sum(), (q, k, v))):
        torch.testing.assert_close(a, b)
    assert {g.name: g.templates.get("attention", 0) + g.templates.get("attention_grad", 0) for g in graphs} == \
        {"forward": 1, "backward": 1}


@pytest.mark.parametrize("causal", [False, True])
def test_enable_gqa_attention_and_its_backward_are_attention_regions(causal):
    # Qwen2/Llama-3 without a mask: SDPA's enable_gqa, which ATen's CPU flash ops take as it is
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    q, k, v, _ = gqa_inputs(requires_grad=True)
    with dynamo_backend.collect() as graphs:
        got = torch.compile(fn, backend="kernelgen")(q, k, v)
        got_grads = torch.autograd.grad(got.square().sum(), (q, k, v))
    want = fn(q, k, v)
    torch.testing.assert_close(got, want)
    for a, b in zip(got_grads, torch.autograd.grad(want.square().sum(), (q, k, v))):
        torch.testing.assert_close(a, b)
    assert {g.name: (g.templates.get("attention", 0), g.templates.get("attention_grad", 0), len(g.left))
            for g in graphs} == {"forward": (1, 0, 0), "backward": (0, 1, 0)}, [g.as_dict() for g in graphs]
    assert all(g.runs.get("kernel", 0) == g.regions for g in graphs)


def test_a_mask_of_zeros_hides_nothing_and_the_attention_is_a_region():
    # T5's cross-attention: a position bias of torch.zeros made inside the model (a constant of the graph) as
    # the additive mask; left to ATen before ("no template covers ops ['attention', 'cast', 'const', 'input']")
    def fn(q, k, v):
        bias = torch.zeros(1, q.shape[1], q.shape[2], k.shape[2])
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0)

    graphs = compiled(fn, *qkv())
    assert graphs[0].templates["attention"] == 1 and not graphs[0].left, graphs[0].as_dict()

    def ones(q, k, v):  # a constant that does change the scores is not dropped: the op stays ATen's
        bias = torch.ones(1, q.shape[1], q.shape[2], k.shape[2])
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0)

    graphs = compiled(ones, *qkv())
    assert any("flash_attention" in op for op in graphs[0].left), graphs[0].as_dict()


def test_t5_decoder_bias_then_causal_mask_is_one_attention_region():
    # T5's written-out decoder attention: no scale, the relative position bias added, then the causal mask added
    def fn(q, k, v, bias, causal):
        s = torch.matmul(q, k.transpose(-1, -2))
        s = s + bias
        s = s + causal
        return torch.matmul(torch.softmax(s.float(), dim=-1).type_as(s), v)

    causal = torch.triu(torch.full((7, 7), torch.finfo(torch.float32).min), 1)[None, None]
    causal[..., 3, :] = torch.finfo(torch.float32).min  # a query that sees nothing: uniform weights, as eager's
    graphs = compiled(fn, *qkv(layout="bthd"), torch.randn(1, 3, 7, 7), causal)
    assert graphs[0].templates["attention"] == 1 and "gemm" not in graphs[0].templates, graphs[0].as_dict()
