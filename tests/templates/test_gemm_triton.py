"""GEMM + fused epilogue template on Triton (interpreter without a GPU) against eager PyTorch."""

from __future__ import annotations

import os

import pytest

from tests.triton_env import DEVICE, needs_triton, torch  # TRITON_INTERPRET before triton loads

import torch.nn.functional as F  # noqa: E402

import kernelgen  # noqa: E402
from kernelgen.backends import get_backend  # noqa: E402
from kernelgen.ir.reference import evaluate  # noqa: E402
from kernelgen.ir.target import Target  # noqa: E402
from kernelgen.templates import gemm_triton, match  # noqa: E402

pytestmark = needs_triton
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float64: 1e-10}
SMALL = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 4, "num_warps": 4, "num_stages": 1}
ONE_TILE_ROW = {**SMALL, "GROUP_M": 1}  # a GPU's space refuses grouping where M fits one tile row


def run(fn, *inputs, config=None):
    graph = kernelgen.trace(fn, *inputs)
    template, problem = match(graph)
    assert template.name == "gemm"
    target = get_backend("triton").target()
    source = template.render(problem, config or template.default_config(problem, target), target)
    kernel = get_backend("triton").compile(source)
    spec = graph.output_specs[0]
    out = torch.full(spec.shape, float("nan"), device=DEVICE).to(getattr(torch, spec.dtype))
    kernel(*inputs, out)
    tol = TOL[out.dtype]
    torch.testing.assert_close(out, evaluate(graph, inputs)[0], atol=tol, rtol=tol, equal_nan=True)
    torch.testing.assert_close(out, fn(*inputs).to(out.dtype), atol=3 * tol, rtol=3 * tol, equal_nan=True)
    return source


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE).to(dtype)


@pytest.mark.parametrize("config", [None, SMALL])
def test_relu_bias_epilogue_edges_not_multiple_of_any_tile(config):
    # M=50, N=40, K=30: every tile size leaves a tail in M, N and K; SMALL walks several tiles and groups
    run(lambda a, w, b: torch.relu(a @ w + b), rand(50, 30), rand(30, 40), rand(40), config=config)


def test_fp16_linear_with_gelu_residual_and_scale():
    a, w, r = rand(33, 48, dtype=torch.float16), rand(20, 48, dtype=torch.float16), rand(33, 20, dtype=torch.float16)
    run(lambda a, w, r: F.gelu(F.linear(a, w)) * 0.5 + r, a, w, r)


@pytest.mark.skipif(DEVICE == "cpu", reason="bf16 tl.dot is wrong in Triton's interpreter; runs on a GPU")
def test_bf16_gemm():
    run(lambda a, w: a @ w, rand(20, 16, dtype=torch.bfloat16), rand(16, 24, dtype=torch.bfloat16))


def test_one_row_and_a_transposed_operand():
    run(lambda a, w: a @ w.t() + 1.0, rand(1, 19), rand(23, 19), config=ONE_TILE_ROW)


def test_batched_matmul_with_broadcast_weight_and_per_row_bias():
    run(lambda a, w, s: torch.tanh(torch.matmul(a, w) * s), rand(3, 20, 30), rand(30, 17), rand(3, 20, 1))


def test_float64_accumulates_in_float64():
    run(lambda a, w: a @ w - 1.0, rand(5, 70, dtype=torch.float64), rand(70, 3, dtype=torch.float64), config=ONE_TILE_ROW)


def test_plain_matmul_with_k_a_multiple_of_block_k():
    source = run(lambda a, w: a @ w, rand(18, 32), rand(32, 18), config=SMALL)
    assert "k_left" not in source.text  # no K mask needed


def test_gpu_space_respects_shared_memory_threads_and_registers():
    os.environ["KERNELGEN_TRITON_AOT"] = "0"  # analytic constraints only
    try:
        graph = kernelgen.trace(lambda a, w: a @ w, torch.empty(512, 512), torch.empty(512, 512))
        problem = match(graph)[1]
        for arch in ("sm_80", "gfx942"):
            target = Target.gpu(arch)
            space = gemm_triton.space(problem, target)
            assert space.is_valid(space.default())
            smem = target.limits["shared_memory"]
            for config in space:
                assert gemm_triton.shared_memory_estimate(problem, config) <= smem
            big = {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 5}
            assert any("shared memory" in v for v in space.violations(big))
    finally:
        del os.environ["KERNELGEN_TRITON_AOT"]


@pytest.mark.parametrize("config", [None, SMALL])
def test_nan_and_inf_in_operands_propagate_like_eager(config):
    # issue 15: a NaN in x of relu(x @ w + b) zeroed its row (relu dropped NaN); eager gives a NaN row
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(37, 40, generator=g), torch.randn(40, 21, generator=g), torch.randn(21, generator=g)
    x[1, 3] = float("nan")
    x[3, 0] = float("inf")  # +-inf across row 3, NaN where inf meets inf of the other sign
    w[5, 2] = -float("inf")  # column 2: -inf, or NaN with x[3, 0]
    b[4] = float("nan")
    x, w, b = x.to(DEVICE), w.to(DEVICE), b.to(DEVICE)
    fn = lambda x, w, b: torch.relu(x @ w + b)  # noqa: E731
    run(fn, x, w, b, config=config)  # kernel vs the graph's reference and eager, NaN where they have it
    assert fn(x, w, b)[1].isnan().all()
    compiled = kernelgen.compile(fn, backend="triton")  # and through the dispatcher
    torch.testing.assert_close(compiled(x, w, b), fn(x, w, b), atol=1e-4, rtol=1e-4, equal_nan=True)
    assert compiled.explain(x, w, b)["implementation"] == "aten_gemm"  # untuned: ATen matmul + Triton epilogue


@pytest.mark.parametrize("dtype", [pytest.param(torch.bfloat16, marks=pytest.mark.skipif(
    DEVICE == "cpu", reason="bf16 tl.dot is wrong in Triton's interpreter; runs on a GPU")), torch.float16],
    ids=["bfloat16", "float16"])
def test_low_precision_gemm_cast_up_passes_the_check_that_judges_it_as_low_precision(dtype):
    """Issue 31, item 1, under the interpreter: a bf16/fp16 GEMM whose result is cast to float32 is as close to
    the exact values as eager's own GEMM in that dtype (``kernelgen.check.compare.judge``), where the float32 row
    of the old table refused eager's own answer; a dropped term of its K=1024 sum is not."""
    from kernelgen.check.compare import judge

    g = torch.Generator().manual_seed(0)
    x, w = (torch.randn(32, 1024, generator=g).to(dtype).to(DEVICE), torch.randn(1024, 32, generator=g).to(dtype).to(DEVICE))
    fn = lambda x, w: (x @ w).float()  # noqa: E731
    graph = kernelgen.trace(fn, x, w)
    template, problem = match(graph)
    target = get_backend("triton").target()
    kernel = get_backend("triton").compile(template.render(problem, SMALL, target))
    out = torch.full((32, 32), float("nan"), device=DEVICE)
    kernel(x, w, out)
    exact, eager = (evaluate(graph, [x, w], precision=p)[0] for p in ("exact", "eager"))
    assert judge(out, exact, eager, "float32") is None
    assert judge(fn(x, w), exact, eager, "float32") is None  # eager's own answer
    dropped = out - (x[:, :1].float() @ w[:1].float())
    assert judge(dropped, exact, eager, "float32") is not None
