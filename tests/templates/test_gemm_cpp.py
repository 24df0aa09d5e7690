"""The C++ GEMM template against eager PyTorch and the IR reference: ragged sizes, one row, K=1, batches
(folded and not), transposed weights, fused epilogues, fp16/bf16/fp64, several configs of the space."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import kernelgen
from kernelgen.backends import get_backend
from kernelgen.ir.reference import evaluate
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap
from kernelgen.templates import gemm_cpp, match

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-10, atol=1e-10),
       torch.float16: dict(rtol=3e-3, atol=3e-3), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}
TARGET = Target.current("cpp")
# The same machine seen as AVX2 only: on an AVX-512 host this renders (and runs) the ymm micro-kernels too,
# so both ISAs' code is checked whichever machine CI lands on.
AVX2_VIEW = Target(**{**TARGET.__dict__, "features": tuple(f for f in TARGET.features if not f.startswith("avx512"))})
TARGETS = [TARGET] if AVX2_VIEW == TARGET else [TARGET, AVX2_VIEW]


def problem_of(fn: Any, *inputs: Any) -> Any:
    graph = kernelgen.trace(fn, *inputs)
    found = match(graph)
    assert found is not None and found[0].name == "gemm", f"the GEMM template did not match\n{graph}"
    return found[1]


def check(fn: Any, *inputs: Any, threads: int | None = None, target: Target = TARGET,
          **overrides: Any) -> torch.Tensor:
    """Run the kernel (default config with ``overrides``) and compare with the reference and with ``fn``."""
    problem = problem_of(fn, *inputs)
    config = Config({**gemm_cpp.space(problem, target).default().to_json(), **overrides})
    kernel = get_backend("cpp").compile(gemm_cpp.render(problem, config, target))
    if threads is not None:
        kernel.num_threads = threads
    spec = problem.graph.output_specs[0]
    out = torch.full(spec.shape, float("nan")).to(getattr(torch, spec.dtype))
    kernel(*inputs, out)
    want = fn(*inputs)
    tol = TOL[want.dtype]
    torch.testing.assert_close(out, evaluate(problem.graph, list(inputs))[0], **tol)
    torch.testing.assert_close(out, want, **tol)
    return out


def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


# ------------------------------------------------------------------------------------ space and layout

def test_default_config_is_valid_and_registers_bound_the_micro_tile() -> None:
    problem = problem_of(lambda a, b: a @ b, randn(64, 64), randn(64, 64))
    space = gemm_cpp.space(problem, TARGET)
    assert space.is_valid(space.default())
    vector_bytes, registers = gemm_cpp.vector_isa(TARGET)
    lanes = vector_bytes // 4
    # The widest NR of the space with the most rows: its accumulators alone overflow the register file
    # (16 ymm with AVX2, 32 zmm with AVX-512), so the constraint must reject it on either ISA.
    nr = max(n for n in gemm_cpp.NR_CHOICES if n % lanes == 0)
    mr = max(gemm_cpp.MR_CHOICES)
    assert mr * nr // lanes > registers, "the space has no tile too large for this register file"
    too_many = Config({**space.default().to_json(), "MR": mr, "NR": nr})
    assert not space.is_valid(too_many)
    assert any("vector registers" in v for v in space.violations(too_many))


def test_cache_sizes_of_the_target_constrain_blocks() -> None:
    problem = problem_of(lambda a, b: a @ b, randn(64, 64), randn(64, 64))
    tiny = Target(**{**TARGET.__dict__, "caches": FrozenMap(l1d=8 * 1024, l2=64 * 1024, l3=1024 * 1024)})
    config = Config({"MR": 6, "NR": 16, "MC": 144, "NC": 4096, "KC": 256, "SCHED": "static"})
    assert gemm_cpp.space(problem, TARGET).is_valid(config)
    assert not gemm_cpp.space(problem, tiny).is_valid(config)
    assert gemm_cpp.space(problem, tiny).is_valid(gemm_cpp.space(problem, tiny).default())


def test_avx512_target_gets_zmm_tiles_and_the_code_still_runs_here() -> None:
    # GCC splits 64-byte vectors on AVX2, so the AVX-512 rendering is checked for correctness on any x86
    wide = Target(**{**TARGET.__dict__, "features": (*TARGET.features, "avx512f"),
                     "caches": FrozenMap(l1d=48 * 1024, l2=2 * 2**20, l3=2**25)})
    inputs = (randn(50, 70), randn(70, 40), randn(40))
    problem = problem_of(lambda x, w, b: torch.relu(x @ w + b), *inputs)
    space = gemm_cpp.space(problem, wide)
    default = space.default()
    assert default["NR"] % 16 == 0 and default["MR"] * default["NR"] // 16 > 16  # more accumulators than ymm
    assert not space.is_valid(Config({**default.to_json(), "NR": 8}))  # half a zmm
    source = gemm_cpp.render(problem, default, wide)
    assert "vector_size(64)" in source.text
    out = torch.empty(50, 40)
    get_backend("cpp").compile(source)(*inputs, out)
    torch.testing.assert_close(out, torch.relu(inputs[0] @ inputs[1] + inputs[2]), **TOL[torch.float32])


def test_invalid_config_is_rejected_by_render() -> None:
    problem = problem_of(lambda a, b: a @ b, randn(8, 8), randn(8, 8))
    with pytest.raises(ValueError, match="NC is a multiple of NR"):
        gemm_cpp.render(problem, Config({"MR": 4, "NR": 24, "MC": 96, "NC": 2048, "KC": 256, "SCHED": "static"}), TARGET)
    with pytest.raises(ValueError, match="not one of"):
        gemm_cpp.render(problem, Config({"MR": 6, "NR": 16, "MC": 64, "NC": 2048, "KC": 256, "SCHED": "static"}), TARGET)
    with pytest.raises(ValueError):
        gemm_cpp.render(problem, Config({"MR": 6, "NR": 16}), TARGET)


def test_broadcast_weight_batch_folds_into_m() -> None:
    layout = gemm_cpp.fold(problem_of(lambda x, w, b: x @ w + b, randn(3, 5, 7, 8), randn(8, 4), randn(4)))
    assert (layout.batch, layout.m) == ((), 105)
    # per-batch weights cannot fold; a batch-invariant bias still lets the two batch dims merge together
    layout = gemm_cpp.fold(problem_of(lambda x, w, b: x @ w + b, randn(3, 5, 7, 8), randn(3, 5, 8, 4), randn(4)))
    assert (layout.batch, layout.m) == ((15,), 7)
    # a residual broadcast over m (stride 0) blocks folding the batch into m
    layout = gemm_cpp.fold(problem_of(lambda x, w, r: x @ w + r, randn(3, 7, 8), randn(8, 4), randn(3, 1, 4)))
    assert (layout.batch, layout.m) == ((3,), 7)


# ------------------------------------------------------------------------------------------ correctness

# NR in fp32 vectors ("NRV"): one vector is 8 lanes with AVX2 and 16 with AVX-512.
CONFIGS = [
    {},  # the default
    {"MR": 1, "NRV": 1, "MC": 24, "NC": 256, "KC": 64},
    {"MR": 4, "NRV": 3, "MC": 48, "NC": 384, "KC": 64, "SCHED": "dynamic"},
    {"MR": 8, "NRV": 1, "MC": 24, "NC": 256, "KC": 128},
]


def in_lanes(overrides: dict, target: Target) -> dict:
    """``overrides`` with NRV (vectors) turned into NR (fp32 lanes) for ``target``'s vector width."""
    lanes = gemm_cpp.vector_isa(target)[0] // 4
    out = {k: v for k, v in overrides.items() if k != "NRV"}
    if "NRV" in overrides:
        out["NR"] = overrides["NRV"] * lanes
    return out


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: "avx512" if "avx512f" in t.features else "avx2")
@pytest.mark.parametrize("overrides", CONFIGS, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()) or "default")
def test_ragged_sizes_with_several_k_blocks(overrides: dict, target: Target) -> None:
    # 67x45 is no multiple of any tile; K=200 spans several KC blocks, so partial sums round-trip via memory
    check(lambda x, w, b: torch.relu(x @ w + b), randn(67, 200), randn(200, 45), randn(45), target=target,
          **in_lanes(overrides, target))


@pytest.mark.parametrize("sched", ["static", "dynamic"])
def test_one_row_splits_columns_across_threads(sched: str) -> None:
    check(lambda x, w: x @ w, randn(1, 300), randn(300, 520), threads=2, SCHED=sched)


def test_k_equal_one() -> None:
    check(lambda x, w: x @ w, randn(67, 1), randn(1, 45))


def test_linear_with_bias_gelu_and_residual() -> None:
    check(lambda x, w, b, r: F.gelu(F.linear(x, w, b)) + r, randn(67, 33), randn(45, 33), randn(45), randn(67, 45))


def test_batched_input_with_broadcast_weight() -> None:
    check(lambda x, w, b: torch.tanh(x @ w + b) * 2.0, randn(3, 67, 40), randn(40, 45), randn(45), threads=2)


def test_unfoldable_batch_transposed_activations() -> None:
    # A is transposed per batch, so each batch is its own GEMM; B is broadcast over the batch
    check(lambda a, w: a.transpose(-1, -2) @ w, randn(5, 33, 67), randn(33, 45), threads=2)


def test_many_small_batches_run_batch_parallel() -> None:
    check(lambda a, b: a @ b * 0.5, randn(4, 8, 24, 40), randn(4, 8, 40, 20), threads=2)


def test_float16_batched_with_partial_sums_in_a_workspace() -> None:
    # fp16 output cannot hold fp32 partial sums: K=150 > KC=64 needs the accumulator workspace, per thread
    check(lambda a, b, s: (a @ b) * s, randn(8, 20, 150, dtype=torch.float16), randn(8, 150, 30, dtype=torch.float16),
          randn(20, 1, dtype=torch.float16), threads=2, KC=64)


def test_bfloat16_with_sigmoid() -> None:
    check(lambda a, b: torch.sigmoid(a @ b), randn(37, 90, dtype=torch.bfloat16), randn(90, 19, dtype=torch.bfloat16))


def test_float64() -> None:
    problem = problem_of(lambda a, b: a @ b + 1.0, randn(37, 90, dtype=torch.float64), randn(90, 19, dtype=torch.float64))
    assert gemm_cpp.acc_type(problem) == "double"
    check(lambda a, b: a @ b + 1.0, randn(37, 90, dtype=torch.float64), randn(90, 19, dtype=torch.float64),
          MR=4, NR=8, MC=48, KC=64)
