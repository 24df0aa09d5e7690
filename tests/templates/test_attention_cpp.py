"""The C++ attention template against torch's scaled_dot_product_attention and the IR reference: causal and
not, q_len != kv_len both ways, head dims 64 and 40, v_dim != head_dim, strided and rank-3 inputs,
fp16/bf16/fp64, several configs of the space."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import kernelgen
from kernelgen.backends import get_backend
from kernelgen.reference import evaluate
from kernelgen.target import Target
from kernelgen.templates import attention_cpp, match
from kernelgen.values import Config, FrozenMap

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10),
       torch.float16: dict(rtol=3e-3, atol=3e-3), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}
TARGET = Target.current("cpp")


def sdpa(causal: bool = False, scale: float | None = None) -> Any:
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def problem_of(fn: Any, *inputs: Any) -> Any:
    graph = kernelgen.trace(fn, *inputs)
    found = match(graph)
    assert found is not None and found[0].name == "attention", f"the attention template did not match\n{graph}"
    return found[1]


def check(fn: Any, *inputs: Any, threads: int | None = None, **overrides: Any) -> None:
    problem = problem_of(fn, *inputs)
    config = Config({**attention_cpp.space(problem, TARGET).default().to_json(), **overrides})
    kernel = get_backend("cpp").compile(attention_cpp.render(problem, config, TARGET))
    if threads is not None:
        kernel.num_threads = threads
    spec = problem.graph.output_specs[0]
    out = torch.full(spec.shape, float("nan")).to(getattr(torch, spec.dtype))
    kernel(*inputs, out)
    want = fn(*inputs)
    tol = TOL[want.dtype]
    torch.testing.assert_close(out, evaluate(problem.graph, list(inputs))[0], **tol)
    torch.testing.assert_close(out, want, **tol)


def qkv(b: int, h: int, lq: int, lk: int, d: int, dv: int | None = None, dtype: torch.dtype = torch.float32):
    return (torch.randn(b, h, lq, d).to(dtype), torch.randn(b, h, lk, d).to(dtype),
            torch.randn(b, h, lk, dv or d).to(dtype))


def test_default_config_is_valid_and_blocks_must_fit_l2() -> None:
    problem = problem_of(sdpa(), *qkv(1, 2, 64, 64, 128))
    space = attention_cpp.space(problem, TARGET)
    assert space.is_valid(space.default())
    small = Target(**{**TARGET.__dict__, "caches": FrozenMap(l1d=32768, l2=64 * 1024, l3=2**25)})
    assert not attention_cpp.space(problem, small).is_valid(space.default())
    assert attention_cpp.space(problem, small).is_valid(attention_cpp.space(problem, small).default())


def test_one_query_gets_a_small_query_block_and_is_correct() -> None:
    inputs = qkv(2, 2, 1, 300, 64)
    default = attention_cpp.space(problem_of(sdpa(), *inputs), TARGET).default()
    assert default["BLOCK_M"] < 64
    check(sdpa(), *inputs)


def test_invalid_config_is_rejected_by_render() -> None:
    problem = problem_of(sdpa(), *qkv(1, 1, 8, 8, 16))
    with pytest.raises(ValueError, match="multiple of MR"):
        attention_cpp.render(problem, Config({"BLOCK_M": 32, "BLOCK_N": 64, "MR": 6, "NR": 16}), TARGET)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_more_keys_than_queries_head_dim_64(causal: bool) -> None:
    check(sdpa(causal), *qkv(2, 3, 70, 150, 64), threads=2)


def test_causal_more_queries_than_keys_ragged_dims() -> None:
    # head dim 40 and v_dim 36 are no multiples of the vector tiles; query rows past kv_len see every key
    check(sdpa(True), *qkv(1, 2, 150, 70, 40, 36))


CONFIGS = [
    {"BLOCK_M": 16, "BLOCK_N": 16, "MR": 2, "NR": 8},
    {"BLOCK_M": 48, "BLOCK_N": 32, "MR": 6, "NR": 16},  # a ragged group of keys in every block
    {"BLOCK_M": 24, "BLOCK_N": 64, "MR": 3, "NR": 24},
]


@pytest.mark.parametrize("overrides", CONFIGS, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_configs_from_the_space(overrides: dict) -> None:
    problem = problem_of(sdpa(True), *qkv(1, 2, 77, 77, 40))
    assert attention_cpp.space(problem, TARGET).is_valid(Config(overrides))
    check(sdpa(True), *qkv(1, 2, 77, 77, 40), **overrides)


def test_rank3_inputs_and_explicit_scale() -> None:
    q, k, v = (t[0] for t in qkv(1, 2, 33, 45, 24))
    check(sdpa(False, scale=0.3), q, k, v)


def test_strided_inputs_in_bshd_layout() -> None:
    # [batch, seq, heads, dim] storage seen as [batch, heads, seq, dim]: K and V rows are read in place
    q, k, v = (torch.randn(2, s, 3, 64).transpose(1, 2) for s in (50, 90, 90))
    check(sdpa(True), q, k, v, threads=2)


def test_float16_causal() -> None:
    check(sdpa(True), *qkv(1, 2, 100, 100, 64, dtype=torch.float16))


def test_bfloat16() -> None:
    check(sdpa(), *qkv(1, 2, 50, 77, 32, dtype=torch.bfloat16))


def test_float64() -> None:
    check(sdpa(True), *qkv(1, 2, 50, 77, 32, dtype=torch.float64), MR=4, NR=8)
