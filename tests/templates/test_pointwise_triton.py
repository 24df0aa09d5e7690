"""Pointwise template on Triton (interpreter without a GPU) against eager PyTorch and the IR reference."""

from __future__ import annotations

import pytest

from tests.triton_env import DEVICE, needs_triton, torch  # TRITON_INTERPRET before triton loads

import torch.nn.functional as F  # noqa: E402

import kernelgen  # noqa: E402
from kernelgen.backends import get_backend  # noqa: E402
from kernelgen.ir.reference import evaluate  # noqa: E402
from kernelgen.ir.target import Target  # noqa: E402
from kernelgen.templates import match  # noqa: E402
from kernelgen.templates import pointwise_triton  # noqa: E402
from tests.codegen.eager_compare import assert_close_to_either, eager_on_cpu  # noqa: E402

pytestmark = needs_triton
TOL = {torch.float32: 2e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}


def run(fn, *inputs, config=None):
    graph = kernelgen.trace(fn, *inputs)
    template, problem = match(graph)
    assert template.name == "pointwise"
    target = get_backend("triton").target()
    source = template.render(problem, config or template.default_config(problem, target), target)
    kernel = get_backend("triton").compile(source)
    outs = [torch.empty(s.shape, dtype=getattr(torch, s.dtype), device=DEVICE) for s in graph.output_specs]
    kernel(*inputs, *outs)
    expected = evaluate(graph, inputs)
    eager = fn(*inputs)
    eager = list(eager) if isinstance(eager, tuple) else [eager]
    for out, ref, ea in zip(outs, expected, eager):
        tol = TOL.get(out.dtype, 0)
        torch.testing.assert_close(out, ref, atol=tol, rtol=tol, equal_nan=True)
        torch.testing.assert_close(out, ea.to(out.dtype), atol=2 * tol, rtol=2 * tol, equal_nan=True)
    return source


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_bias_gelu_broadcast_rows_not_multiple_of_block(dtype):
    run(lambda x, b: F.gelu(x + b), rand(37, 29, dtype=dtype), rand(29, dtype=dtype),
        config={"BLOCK_SIZE": 256, "num_warps": 4})


def test_every_elementwise_op_in_one_chain():
    def fn(x, y, c):
        a = F.gelu(x, approximate="tanh") + torch.tanh(y) * torch.sigmoid(x) - F.silu(y) + torch.erf(x)
        b = torch.exp(-x.abs()) + torch.log(y.abs() + 1) + torch.sqrt(x.abs()) + torch.rsqrt(y.abs() + 0.5)
        d = torch.where(x > y, torch.relu(x), torch.maximum(x, y)) + torch.minimum(x, c) / (1 + y * y)
        e = torch.pow(x.abs(), 1.7) + torch.pow(x, 2) + torch.pow(y, 3) + torch.reciprocal(c + 3)
        f = ((x >= 0) & (y < 0.5) | (x == c)).float() + (x != y).to(torch.float16).float() + (x <= y).float()
        return a + b + d + e + f - x.to(torch.bfloat16).float()
    run(fn, rand(5, 19), rand(5, 19), rand(5, 1))


def test_tanh_is_accurate_near_zero_and_at_extremes():
    x = torch.tensor([0.0, 1e-6, -3e-4, 0.06, 0.07, -0.5, 9.0, -40.0, 100.0, float("inf"), float("-inf")],
                     device=DEVICE)
    run(lambda x: torch.tanh(x) * 1.0 + 0.0, x)


def test_pow_with_negative_bases_and_tensor_exponents():
    x = torch.tensor([-2.0, -2.0, -2.0, 0.0, 0.0, 3.0, -1.5, 4.0], device=DEVICE)
    y = torch.tensor([3.0, 2.0, 0.5, 0.0, 2.0, -1.0, 0.0, 0.5], device=DEVICE)
    run(lambda x, y: torch.pow(x, y) + 1.0, x, y)


def test_nan_propagates_through_maximum_like_torch():
    x = torch.tensor([float("nan"), 1.0, -1.0], device=DEVICE)
    y = torch.tensor([0.0, float("nan"), 2.0], device=DEVICE)
    run(lambda x, y: torch.maximum(x, y) + torch.minimum(x, y), x, y)


def test_two_outputs_and_a_comparison_output():
    source = run(lambda x, y: (x * y + 1, x > y), rand(3, 7), rand(3, 7))
    assert "out1" in source.text


def test_one_row_scalar_input_and_transposed_view():
    run(lambda x, s: x * s + 1.0, rand(1, 5), rand(1, 1))
    base = rand(6, 4)
    run(lambda x, y: x.t() * 2.0 + y, base, rand(4, 6))


def test_noncontiguous_input_is_read_through_its_strides():
    x = rand(9, 16)[:, ::2]
    run(lambda x: torch.relu(x) - 1.0, x)


def test_integer_inputs_promote_to_float():
    i = torch.arange(-6, 6, device=DEVICE, dtype=torch.int32).reshape(3, 4)
    run(lambda i, x: i * x + i, i, rand(3, 4))


def test_offsets_widen_to_int64_only_past_2_31_elements():
    from kernelgen.ir.values import TensorSpec

    target = get_backend("triton").target()
    for numel, wide in ((2**20, False), (2**31 + 64, True)):
        graph = kernelgen.trace(lambda x: x * 2.0, TensorSpec((numel // 64, 64), "float16"))
        template, problem = match(graph)
        text = template.render(problem, template.default_config(problem, target), target).text
        assert ("tl.int64" in text) == wide


def test_space_respects_gpu_thread_and_element_limits():
    graph = kernelgen.trace(lambda x: x + 1.0, torch.empty(1000, 1000))
    _, problem = match(graph)
    import os as _os

    old = _os.environ.get("KERNELGEN_TRITON_AOT")
    _os.environ["KERNELGEN_TRITON_AOT"] = "0"  # analytic constraints only: fast
    try:
        for arch in ("sm_90", "gfx942"):
            target = Target.gpu(arch)
            space = pointwise_triton.space(problem, target)
            configs = list(space)
            assert configs and space.is_valid(space.default())
            warp = target.limits["warp_size"]
            assert all(c["num_warps"] * warp <= target.limits["max_threads"] for c in configs)
            assert all(c["BLOCK_SIZE"] >= c["num_warps"] * warp for c in configs)
            assert not space.is_valid({"BLOCK_SIZE": 128, "num_warps": 16})
    finally:
        if old is None:
            del _os.environ["KERNELGEN_TRITON_AOT"]
        else:
            _os.environ["KERNELGEN_TRITON_AOT"] = old
    # the interpreter space stays tiny: its timings mean nothing
    assert pointwise_triton.space(problem, get_backend("triton").target()).cardinality() <= 4 or DEVICE == "cuda"


# -- issue 15: NaN / inf placement through kernelgen.compile --------------------------------------------------

NAN, INF = float("nan"), float("inf")


def compiled_like_eager(fn, *inputs):
    compiled = kernelgen.compile(fn, backend="triton")
    got = compiled(*inputs)
    assert compiled.explain(*inputs)["implementation"] == "pointwise"
    assert_close_to_either(got, fn(*inputs), eager_on_cpu(fn, *inputs))  # CUDA's clamp ignores a NaN bound
    return got


def test_relu_of_a_chain_keeps_nan():
    x = torch.tensor([NAN, 1.0, -1.0, INF, -INF, -0.0], device=DEVICE)
    y, z = torch.ones(6, device=DEVICE), torch.full((6,), 2.0, device=DEVICE)
    assert compiled_like_eager(lambda x, y, z: torch.relu((x + y) * z), x, y, z)[0].isnan()


def test_maximum_minimum_and_clamp_propagate_nan_from_either_side_and_from_the_bounds():
    x = torch.tensor([NAN, 1.0, -1.0, 0.5, INF, -INF], device=DEVICE)
    y = torch.tensor([0.0, NAN, 2.0, NAN, 0.0, 0.0], device=DEVICE)
    compiled_like_eager(lambda x, y: (torch.maximum(x, y), torch.minimum(x, y)), x, y)
    compiled_like_eager(lambda x, lo, hi: torch.clamp(x, lo, hi), x, y, y + 1.0)
    compiled_like_eager(lambda x: torch.clamp(x, min=-0.5, max=0.5), x)
    compiled_like_eager(lambda x: torch.clamp(x, min=NAN), x)
    # the interpreter's maximum propagates NaN whatever it is told; a GPU's only when asked
    graph = kernelgen.trace(lambda x, y: torch.clamp(torch.maximum(x, y), max=0.5), x, y)
    template, problem = match(graph)
    target = get_backend("triton").target()
    text = template.render(problem, template.default_config(problem, target), target).text
    extrema = [line for line in text.splitlines() if "tl.maximum(" in line or "tl.minimum(" in line]
    assert len(extrema) == 2 and all("PropagateNan.ALL" in line for line in extrema)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_gelu_at_nan_and_the_infinities(approximate, dtype):
    x = torch.tensor([NAN, INF, -INF, -0.0, 3.0, -30.0], device=DEVICE).to(dtype)
    got = kernelgen.compile(lambda x: F.gelu(x, approximate=approximate), backend="triton")(x)
    want = F.gelu(x.double(), approximate=approximate)
    # eager's float64 (= its scalar path and CUDA): gelu(+inf) = +inf, gelu(-inf) = NaN (-inf * 0), NaN stays.
    # Eager's vectorised float32/bfloat16 erf kernel gives NaN at +inf instead (one element gives +inf).
    torch.testing.assert_close(got.double(), want, equal_nan=True, atol=1e-3, rtol=1e-2)
    eager = F.gelu(x, approximate=approximate)
    same = torch.ones(6, dtype=torch.bool)
    if approximate == "none" and dtype in (torch.float32, torch.bfloat16):
        same[1] = False  # +inf: kernelgen gives +inf with eager's float64, scalar and CUDA paths
        assert got[1].item() == INF
    assert torch.equal(got.isnan()[same], eager.isnan()[same])
