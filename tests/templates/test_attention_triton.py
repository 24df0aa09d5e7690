"""Flash-attention template on Triton (interpreter without a GPU) against torch's scaled_dot_product_attention."""

from __future__ import annotations

import os

import pytest

from tests.triton_env import DEVICE, needs_triton, torch  # TRITON_INTERPRET before triton loads

import torch.nn.functional as F  # noqa: E402

import kernelgen  # noqa: E402
from kernelgen.backends import get_backend  # noqa: E402
from kernelgen.ir.reference import evaluate  # noqa: E402
from kernelgen.ir.target import Target  # noqa: E402
from kernelgen.templates import attention_triton, match  # noqa: E402

pytestmark = needs_triton
TOL = {torch.float32: 1e-5, torch.float16: 2e-3}
SMALL = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}


def run(fn, q, k, v, config=None):
    graph = kernelgen.trace(fn, q, k, v)
    template, problem = match(graph)
    assert template.name == "attention"
    target = get_backend("triton").target()
    source = template.render(problem, config or template.default_config(problem, target), target)
    kernel = get_backend("triton").compile(source)
    spec = graph.output_specs[0]
    out = torch.full(spec.shape, float("nan"), device=DEVICE).to(getattr(torch, spec.dtype))
    kernel(q, k, v, out)
    tol = TOL[out.dtype]
    torch.testing.assert_close(out, evaluate(graph, [q, k, v])[0], atol=tol, rtol=tol)
    torch.testing.assert_close(out, fn(q, k, v), atol=2 * tol, rtol=2 * tol)
    return source


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE).to(dtype)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("q_len,kv_len", [(37, 21), (21, 50)])
def test_q_len_differs_from_kv_len_with_several_key_blocks(causal, q_len, kv_len):
    # head_dim 24 and v_dim 20 are padded to 32: masks on the head dims too
    source = run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                 rand(1, 2, q_len, 24), rand(1, 2, kv_len, 24), rand(1, 2, kv_len, 20), config=SMALL)
    assert "exp2" in source.text and ("offs_n[None, :] <= offs_m[:, None]" in source.text) == causal


@pytest.mark.parametrize("causal", [False, True])
def test_default_config_equal_lengths(causal):
    run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        rand(2, 1, 33, 16), rand(2, 1, 33, 16), rand(2, 1, 33, 16))


def test_fp16_rank3_inputs_and_explicit_scale():
    q = rand(2, 19, 32, dtype=torch.float16)
    k, v = rand(2, 45, 32, dtype=torch.float16), rand(2, 45, 32, dtype=torch.float16)
    run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3), q, k, v, config=SMALL)


def test_gpu_space_respects_shared_memory_and_threads():
    os.environ["KERNELGEN_TRITON_AOT"] = "0"  # analytic constraints only
    try:
        t = torch.empty(4, 8, 1024, 128, dtype=torch.float16)
        graph = kernelgen.trace(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), t, t, t)
        problem = match(graph)[1]
        for arch in ("sm_90", "gfx942"):
            target = Target.gpu(arch)
            space = attention_triton.space(problem, target)
            assert space.is_valid(space.default())
            for config in space:
                assert attention_triton.shared_memory_estimate(problem, config) <= target.limits["shared_memory"]
        big = {"BLOCK_M": 256, "BLOCK_N": 128, "num_warps": 8, "num_stages": 4}
        assert any("shared memory" in v for v in attention_triton.space(problem, Target.gpu("gfx942")).violations(big))
    finally:
        del os.environ["KERNELGEN_TRITON_AOT"]


def _visible_keys_reference(q, k, v, causal):
    """torch's reference attention (SDPBackend.MATH) where each query sees only its visible keys: a masked
    key is absent (the math kernel adds -inf to a NaN score and gets NaN, eager's fused kernel skips it)."""
    math = torch.ops.aten._scaled_dot_product_attention_math
    if not causal:
        return math(q, k, v)[0]
    return torch.cat([math(q[:, :, i:i + 1], k[:, :, :i + 1], v[:, :, :i + 1])[0] for i in range(q.shape[2])], 2)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("config", [None, SMALL])
def test_nan_and_inf_inputs_land_where_torch_puts_them(causal, config):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 21, 16, generator=g) for _ in range(3))
    q[0, 0, 1, 2] = float("nan")  # one query: its row is NaN
    q[0, 1, 4] = -float("inf")  # scores of +-inf and NaN: NaN row
    k[0, 1, 9, 0] = float("nan")  # key 9: causal queries before it never see it, the others are NaN
    v[0, 0, 0, 1] = float("inf")  # column 1 of every query (all see key 0)
    k[0, 0, 20] = -1e30  # a key every query scores ~-inf: weight 0, no NaN
    q, k, v = q.to(DEVICE), k.to(DEVICE), v.to(DEVICE)
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    graph = kernelgen.trace(fn, q, k, v)
    template, problem = match(graph)
    target = get_backend("triton").target()
    kernel = get_backend("triton").compile(template.render(problem, config or template.default_config(problem, target),
                                                           target))
    out = torch.full(graph.output_specs[0].shape, 123.0, device=DEVICE)
    kernel(q, k, v, out)
    torch.testing.assert_close(out, _visible_keys_reference(q, k, v, causal), atol=1e-5, rtol=1e-5, equal_nan=True)
    # Eager's fused CPU kernel writes 0 (not NaN) for a query whose scores are all NaN or -inf, where torch's
    # math reference and the definition give NaN: kernelgen keeps the NaN there and equals eager elsewhere.
    # On a GPU eager's own backends disagree where V holds inf (the math backend's p * inf is NaN for p = 0,
    # the fused kernels skip hidden keys): there an element must equal one of them.
    eager = fn(q, k, v)
    zeroed_by_eager = out.isnan().all(-1, keepdim=True) & ~eager.isnan().all(-1, keepdim=True)
    like_eager = zeroed_by_eager | torch.isclose(out, eager, atol=1e-5, rtol=1e-5, equal_nan=True)
    if DEVICE != "cpu":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.MATH]):
            like_eager |= torch.isclose(out, fn(q, k, v), atol=1e-5, rtol=1e-5, equal_nan=True)
    assert like_eager.all(), f"{int((~like_eager).sum())} elements differ from every eager backend"
    if causal:
        before = [0, 1, 2, 3, 5, 6, 7, 8]  # not the -inf query 4
        assert not out[0, 1, before].isnan().any()  # the NaN key 9 is after these queries' diagonal
    assert out[0, 1, 9:].isnan().all() and out[0, 0, 1].isnan().all()


# ------------------------------------------------- masks and the logsumexp output (ATen's CPU flash op)

def run_graph(graph, inputs, want, config=None):
    """Run the Triton kernel of attention ``graph`` on ``inputs``; every output equals the IR reference's and
    ``want`` (eager's outputs). Returns the kernel's outputs."""
    template, problem = match(graph)
    assert template.name == "attention"
    target = get_backend("triton").target()
    kernel = get_backend("triton").compile(template.render(problem, config or SMALL, target))
    outs = [torch.full(s.shape, float("nan"), device=DEVICE).to(getattr(torch, s.dtype)) for s in graph.output_specs]
    kernel(*inputs, *outs)
    for got, ref, eager in zip(outs, evaluate(graph, list(inputs)), want, strict=True):
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got, eager, atol=2e-5, rtol=2e-5)
    return outs


def flash_graph(causal, *inputs):
    """The graph the torch.compile backend lowers for ATen's CPU flash op reading (out, logsumexp)."""
    from kernelgen.frontend.patterns import aten_graph_of
    from kernelgen.ir.values import TensorSpec

    def fn(q, k, v, *mask):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, causal, attn_mask=mask[0] if mask else None)
        return out, lse

    graph = aten_graph_of(fn, [TensorSpec.of(t) for t in inputs])
    assert graph is not None
    return graph, [t.to(DEVICE) for t in fn(*(t.cpu() for t in inputs))]  # the op is CPU-only


@pytest.mark.parametrize("causal", [False, True])
def test_logsumexp_output_is_atens(causal):
    inputs = [rand(1, 2, 21, 16), rand(1, 2, 19, 16), rand(1, 2, 19, 16)]
    graph, want = flash_graph(causal, *inputs)
    run_graph(graph, inputs, want)


def test_bert_padding_mask_and_fully_masked_rows():
    q, k, v = rand(2, 2, 17, 16), rand(2, 2, 17, 16), rand(2, 2, 17, 16)
    mask = torch.zeros(2, 1, 1, 17, device=DEVICE)
    mask[1, ..., 12:] = torch.finfo(torch.float32).min
    graph, want = flash_graph(False, q, k, v, mask)
    run_graph(graph, [q, k, v, mask], want)
    full = torch.randn(2, 2, 17, 17, device=DEVICE)
    full[0, 1, 3] = float("-inf")
    full[1, 0, 5, :16] = float("-inf")  # only the key tail visible
    graph, want = flash_graph(True, q, k, v, full)
    out, lse = run_graph(graph, [q, k, v, full], want)
    assert out[0, 1, 3].eq(0).all() and lse[0, 1, 3] == 0


def test_bool_mask_broadcast_over_batch():
    q, k, v = rand(2, 2, 17, 16), rand(2, 2, 20, 16), rand(2, 2, 20, 16)
    mask = torch.rand(17, 20, device=DEVICE) > 0.4
    mask[4] = False

    def fn(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    run_graph(kernelgen.trace(fn, q, k, v, mask), [q, k, v, mask], [fn(q, k, v, mask)])


@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_attention(causal):
    # 4 query heads over 2 key/value heads (SDPA's enable_gqa=True), with several key blocks
    source = run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True),
                 rand(1, 4, 21, 16), rand(1, 2, 37, 16), rand(1, 2, 37, 16), config=SMALL)
    assert "kh = h // 2" in source.text
