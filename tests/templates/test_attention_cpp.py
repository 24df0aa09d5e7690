"""The C++ attention template against torch's scaled_dot_product_attention and the IR reference: causal and
not, q_len != kv_len both ways, head dims 64 and 40, v_dim != head_dim, strided and rank-3 inputs,
fp16/bf16/fp64, several configs of the space; on this machine's ISA and, on an AVX-512 host, its AVX2 view."""

from __future__ import annotations

from typing import Any

import math

import pytest
import torch
import torch.nn.functional as F

import kernelgen
from kernelgen.backends import get_backend
from kernelgen.ir.reference import evaluate
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap
from kernelgen.templates import attention_cpp, match

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10),
       torch.float16: dict(rtol=3e-3, atol=3e-3), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}
TARGET = Target.current("cpp")
# The same machine seen as AVX2 only: on an AVX-512 host this renders (and runs) the 32-byte vector code too,
# so both ISAs' code is checked whichever machine CI lands on.
AVX2_VIEW = Target(**{**TARGET.__dict__, "features": tuple(f for f in TARGET.features if not f.startswith("avx512"))})
TARGETS = [TARGET] if AVX2_VIEW == TARGET else [TARGET, AVX2_VIEW]
by_isa = pytest.mark.parametrize("target", TARGETS, ids=lambda t: "avx512" if "avx512f" in t.features else "avx2")


def sdpa(causal: bool = False, scale: float | None = None) -> Any:
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def problem_of(fn: Any, *inputs: Any) -> Any:
    graph = kernelgen.trace(fn, *inputs)
    found = match(graph)
    assert found is not None and found[0].name == "attention", f"the attention template did not match\n{graph}"
    return found[1]


def check(fn: Any, *inputs: Any, threads: int | None = None, target: Target = TARGET, problem: Any = None,
          **overrides: Any) -> list:
    """Run the kernel of ``fn``'s graph (or of ``problem``) on ``inputs``; its outputs equal the IR reference's
    and ``fn``'s (eager). Returns the kernel's outputs."""
    problem = problem or problem_of(fn, *inputs)
    config = Config({**attention_cpp.space(problem, target).default().to_json(), **overrides})
    kernel = get_backend("cpp").compile(attention_cpp.render(problem, config, target))
    if threads is not None:
        kernel.num_threads = threads
    outs = [torch.full(spec.shape, float("nan")).to(getattr(torch, spec.dtype)) for spec in problem.graph.output_specs]
    kernel(*inputs, *outs)
    want = fn(*inputs)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    tol = TOL[inputs[0].dtype]
    for got, ref, eager in zip(outs, evaluate(problem.graph, list(inputs)), want, strict=True):
        torch.testing.assert_close(got, ref, **tol)
        torch.testing.assert_close(got, eager, **tol)
    return outs


def qkv(b: int, h: int, lq: int, lk: int, d: int, dv: int | None = None, dtype: torch.dtype = torch.float32):
    return (torch.randn(b, h, lq, d).to(dtype), torch.randn(b, h, lk, d).to(dtype),
            torch.randn(b, h, lk, dv or d).to(dtype))


def lanes(target: Target, dtype: str = "float32") -> int:
    return attention_cpp.vector_isa(target)[0] // (8 if dtype == "float64" else 4)


@by_isa
def test_default_config_is_valid_and_blocks_must_fit_l2(target: Target) -> None:
    problem = problem_of(sdpa(), *qkv(1, 2, 64, 64, 128))
    space = attention_cpp.space(problem, target)
    assert space.is_valid(space.default())
    small = Target(**{**target.__dict__, "caches": FrozenMap(l1d=32768, l2=96 * 1024, l3=2**25)})
    assert not attention_cpp.space(problem, small).is_valid(space.default())
    assert attention_cpp.space(problem, small).is_valid(attention_cpp.space(problem, small).default())


@by_isa
def test_vector_width_and_register_file_follow_the_target(target: Target) -> None:
    problem = problem_of(sdpa(), *qkv(1, 2, 64, 64, 64))
    space = attention_cpp.space(problem, target)
    default = space.default()
    vector_bytes, registers = attention_cpp.vector_isa(target)
    n = lanes(target)
    assert f"VBYTES = {vector_bytes};" in attention_cpp.render(problem, default, target).text
    assert default["NR"] % n == 0
    assert not space.is_valid(Config({**default.to_json(), "NR": n // 2}))  # half a vector
    # 12 rows of 2 vectors: 27 registers, which only AVX-512's 32 hold
    big = Config({"BLOCK_M": 6 * n, "BLOCK_N": 64, "MR": 12, "NR": 2 * n})
    assert space.is_valid(big) == (registers == 32), space.violations(big)
    if registers == 32:
        used = default["MR"] * default["NR"] // n + default["NR"] // n + 1
        assert used > 16  # more vector registers than AVX2 has


def test_one_query_gets_a_small_query_block_and_is_correct() -> None:
    inputs = qkv(2, 2, 1, 300, 64)
    default = attention_cpp.space(problem_of(sdpa(), *inputs), TARGET).default()
    assert default["BLOCK_M"] < 64
    check(sdpa(), *inputs)


def test_invalid_config_is_rejected_by_render() -> None:
    problem = problem_of(sdpa(), *qkv(1, 1, 8, 8, 16))
    with pytest.raises(ValueError, match="multiple of MR"):
        attention_cpp.render(problem, Config({"BLOCK_M": 32, "BLOCK_N": 64, "MR": 6, "NR": 16}), TARGET)


@by_isa
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_more_keys_than_queries_head_dim_64(causal: bool, target: Target) -> None:
    check(sdpa(causal), *qkv(2, 3, 70, 150, 64), threads=2, target=target)


@by_isa
def test_causal_more_queries_than_keys_ragged_dims(target: Target) -> None:
    # head dim 40 and v_dim 36 are no multiples of the vector tiles; query rows past kv_len see every key
    check(sdpa(True), *qkv(1, 2, 150, 70, 40, 36), target=target)


# BLOCK_M and NR in fp32 vectors ("BMV", "NRV"): one vector is 8 lanes with AVX2 and 16 with AVX-512.
CONFIGS = [
    {"BMV": 1, "BLOCK_N": 16, "MR": 2, "NRV": 1},
    {"BMV": 3, "BLOCK_N": 32, "MR": 6, "NRV": 1},  # a ragged group of keys in every block
    {"BMV": 3, "BLOCK_N": 64, "MR": 3, "NRV": 3},
    {"BMV": 4, "BLOCK_N": 128, "MR": 4, "NRV": 2},
]


def in_lanes(overrides: dict, target: Target) -> dict:
    n = lanes(target)
    out = {k: v for k, v in overrides.items() if k not in ("BMV", "NRV")}
    out.update({name: overrides[key] * n for key, name in (("BMV", "BLOCK_M"), ("NRV", "NR")) if key in overrides})
    return out


@by_isa
@pytest.mark.parametrize("overrides", CONFIGS, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_configs_from_the_space(overrides: dict, target: Target) -> None:
    config = in_lanes(overrides, target)
    problem = problem_of(sdpa(True), *qkv(1, 2, 77, 77, 40))
    assert attention_cpp.space(problem, target).is_valid(Config(config)), config
    check(sdpa(True), *qkv(1, 2, 77, 77, 40), target=target, **config)


def test_twelve_row_tiles_with_avx512() -> None:
    if attention_cpp.vector_isa(TARGET)[1] < 32:
        pytest.skip("12x2-vector tiles need 32 vector registers")
    check(sdpa(True), *qkv(1, 2, 130, 150, 64), BLOCK_M=96, BLOCK_N=64, MR=12, NR=32)


@by_isa
def test_rank3_inputs_and_explicit_scale(target: Target) -> None:
    q, k, v = (t[0] for t in qkv(1, 2, 33, 45, 24))
    check(sdpa(False, scale=0.3), q, k, v, target=target)


@by_isa
def test_strided_inputs_in_bshd_layout(target: Target) -> None:
    # [batch, seq, heads, dim] storage seen as [batch, heads, seq, dim]: K and V rows are read in place
    q, k, v = (torch.randn(2, s, 3, 64).transpose(1, 2) for s in (50, 90, 90))
    check(sdpa(True), q, k, v, threads=2, target=target)


@by_isa
def test_float16_causal(target: Target) -> None:
    check(sdpa(True), *qkv(1, 2, 100, 100, 64, dtype=torch.float16), target=target)


@by_isa
def test_bfloat16(target: Target) -> None:
    check(sdpa(), *qkv(1, 2, 50, 77, 32, dtype=torch.bfloat16), target=target)


@by_isa
def test_float64(target: Target) -> None:
    # NR = 8 doubles: one zmm, or two ymm
    check(sdpa(True), *qkv(1, 2, 50, 77, 32, dtype=torch.float64), target=target, MR=4, NR=8)


# ------------------------------------------------- masks and the logsumexp output (ATen's CPU flash op)

FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default


def flash(causal: bool = False, scale: float | None = None) -> Any:
    """ATen's CPU flash op with (out, logsumexp) as a training forward reads them; the mask, if any, last."""
    def fn(q, k, v, *mask):
        out, lse = FLASH(q, k, v, 0.0, causal, attn_mask=mask[0] if mask else None, scale=scale)
        return out, lse
    return fn


def aten_problem(fn: Any, *inputs: Any) -> Any:
    """The attention problem of ``fn`` as the torch.compile backend lowers it (ATen graph, both outputs)."""
    from kernelgen.frontend.patterns import aten_graph_of
    from kernelgen.ir.values import TensorSpec

    graph = aten_graph_of(fn, [TensorSpec.of(t) for t in inputs])
    assert graph is not None, "the flash op did not lower as one region"
    found = match(graph)
    assert found is not None and found[0].name == "attention", f"the attention template did not match\n{graph}"
    return found[1]


@by_isa
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_logsumexp_is_atens_statistic(causal: bool, target: Target) -> None:
    inputs = qkv(2, 3, 37, 53, 24)
    problem = aten_problem(flash(causal), *inputs)
    assert problem.outputs == ("out", "lse")
    out, lse = check(flash(causal), *inputs, problem=problem, target=target, threads=2)
    assert lse.dtype == torch.float32 and lse.shape == (2, 3, 37)


def test_logsumexp_of_float16_is_float32_and_float64_stays_float64() -> None:
    for dtype, lse_dtype in ((torch.float16, torch.float32), (torch.float64, torch.float64)):
        inputs = qkv(1, 2, 20, 30, 16, dtype=dtype)
        # the narrowest tile column the space has for this dtype's vectors (float64 on AVX2: 4 lanes, NR 8)
        nr = next(n for n in attention_cpp.NR_CHOICES if n % lanes(TARGET, str(dtype)[6:]) == 0)
        _, lse = check(flash(True), *inputs, problem=aten_problem(flash(True), *inputs), MR=4, NR=nr)
        assert lse.dtype == lse_dtype


@by_isa
def test_bert_padding_mask_broadcast_over_heads_and_queries(target: Target) -> None:
    # BERT's additive [B, 1, 1, T] mask: 0 where a token is kept, a large negative number on padding
    q, k, v = qkv(2, 3, 29, 29, 16)
    mask = torch.zeros(2, 1, 1, 29)
    mask[1, ..., 20:] = torch.finfo(torch.float32).min
    problem = aten_problem(flash(), q, k, v, mask)
    assert problem.mask is not None and problem.mask.strides[1:3] == (0, 0)
    check(flash(), q, k, v, mask, problem=problem, target=target)


@by_isa
def test_additive_full_mask_with_causal(target: Target) -> None:
    q, k, v = qkv(1, 2, 40, 40, 24)
    mask = torch.randn(1, 2, 40, 40)
    check(flash(True), q, k, v, mask, problem=aten_problem(flash(True), q, k, v, mask), target=target)


@by_isa
@pytest.mark.parametrize("shape", [(2, 3, 33, 45), (33, 45), (3, 1, 45)], ids=["full", "rank2", "per-head"])
def test_bool_mask_hides_keys_where_false(shape: tuple, target: Target) -> None:
    q, k, v = qkv(2, 3, 33, 45, 16)
    mask = torch.rand(shape) > 0.3
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, mask, target=target)


def test_additive_mask_in_float16_and_transposed() -> None:
    q, k, v = qkv(1, 2, 24, 24, 16, dtype=torch.float16)
    mask = torch.randn(1, 2, 24, 24).to(torch.float16).transpose(-1, -2)  # read through its strides
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, mask)


@by_isa
def test_fully_masked_rows_give_zero_as_aten(target: Target) -> None:
    # ATen's CPU kernel: a query with every key at -inf gets output 0 and logsumexp 0 (not NaN); one with every
    # key at the most negative float is an ordinary softmax (uniform weights)
    q, k, v = qkv(2, 2, 20, 37, 16)
    mask = torch.randn(2, 2, 20, 37)
    mask[0, 1, 3] = -math.inf
    mask[1, 0, 7:9] = -math.inf
    mask[1, 1, 5] = torch.finfo(torch.float32).min
    mask[0, 0, 11, :30] = -math.inf  # only the last key block visible
    out, lse = check(flash(), q, k, v, mask, problem=aten_problem(flash(), q, k, v, mask), target=target)
    assert out[0, 1, 3].eq(0).all() and lse[0, 1, 3] == 0 and not out[1, 1, 5].eq(0).all()
    bool_mask = mask > -math.inf
    check(flash(True), q, k, v, mask, problem=aten_problem(flash(True), q, k, v, mask), target=target)
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, bool_mask, target=target)


@by_isa
@pytest.mark.parametrize("overrides", CONFIGS, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_masked_causal_logsumexp_configs_from_the_space(overrides: dict, target: Target) -> None:
    # ragged query and key blocks, the mask's -inf entries in every block, a per-head [1, H, Tq, 1] mask
    q, k, v = qkv(2, 2, 61, 77, 40)
    mask = torch.randn(1, 2, 61, 1).expand(1, 2, 61, 77).clone()
    mask[..., ::3] = -math.inf
    problem = aten_problem(flash(True), q, k, v, mask)
    check(flash(True), q, k, v, mask, problem=problem, target=target, **in_lanes(overrides, target))


# ------------------------------------------------- grouped-query attention (fewer key/value heads)

@by_isa
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_grouped_query_attention_reads_each_key_head_for_its_group(causal: bool, target: Target) -> None:
    # 6 query heads over 2 key/value heads (SDPA's enable_gqa=True); strided K and V (a [B, T, H, D] layout)
    q = torch.randn(2, 6, 29, 16)
    k, v = (torch.randn(2, 37, 2, 16).transpose(1, 2) for _ in range(2))
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)  # noqa: E731
    problem = problem_of(fn, q, k, v)
    assert problem.group == 3 and problem.heads == 6
    check(fn, q, k, v, problem=problem, target=target)


def test_grouped_query_flash_op_with_mask_and_logsumexp() -> None:
    q, k, v = torch.randn(2, 4, 21, 16), torch.randn(2, 1, 21, 16), torch.randn(2, 1, 21, 16)
    mask = torch.randn(2, 4, 21, 21)
    mask[..., ::4] = -math.inf
    problem = aten_problem(flash(True), q, k, v, mask)
    assert problem.group == 4 and problem.outputs == ("out", "lse")
    check(flash(True), q, k, v, mask, problem=problem)


def test_heads_that_do_not_divide_and_gqa_without_the_flag_stay_eagers() -> None:
    # eager raises for 3 query heads over 2 key heads, and for 4 over 2 without enable_gqa (here already on meta
    # tensors); K and V broadcast over heads without the flag: no region either (the template reads groups only
    # where SDPA was asked for them)
    from kernelgen.errors import KernelgenError, UnsupportedOpError

    gqa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # noqa: E731
    plain = lambda q, k, v: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
    k, v = torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
    with pytest.raises(KernelgenError, match="heads"):
        kernelgen.trace(gqa, torch.randn(1, 3, 8, 16), k, v)
    with pytest.raises(KernelgenError, match="size of tensor"):
        kernelgen.trace(plain, torch.randn(1, 4, 8, 16), k, v)
    with pytest.raises(UnsupportedOpError, match="key/value heads"):
        kernelgen.trace(plain, torch.randn(1, 4, 8, 16), k[:, :1], v[:, :1])
