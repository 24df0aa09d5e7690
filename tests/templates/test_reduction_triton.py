"""Row-reduction template on Triton (interpreter without a GPU) against eager PyTorch and the IR reference."""

from __future__ import annotations

import os

import pytest

from tests.triton_env import DEVICE, needs_triton, torch  # TRITON_INTERPRET before triton loads

import torch.nn.functional as F  # noqa: E402

import kernelgen  # noqa: E402
from kernelgen.backends import get_backend  # noqa: E402
from kernelgen.ir.reference import evaluate  # noqa: E402
from kernelgen.ir.target import Target  # noqa: E402
from kernelgen.templates import match, reduction_triton  # noqa: E402

pytestmark = needs_triton
TOL = {torch.float32: 2e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}


def run(fn, *inputs, config=None, looped=None):
    graph = kernelgen.trace(fn, *inputs)
    template, problem = match(graph)
    assert template.name == "reduction"
    target = get_backend("triton").target()
    config = config or template.default_config(problem, target)
    source = template.render(problem, config, target)
    if looped is not None:
        assert ("for start in range" in source.text) == looped
    kernel = get_backend("triton").compile(source)
    outs = [torch.full(s.shape, float("nan"), device=DEVICE).to(getattr(torch, s.dtype)) for s in graph.output_specs]
    kernel(*inputs, *outs)
    eager = fn(*inputs)
    eager = list(eager) if isinstance(eager, tuple) else [eager]
    for out, ref, ea in zip(outs, evaluate(graph, inputs), eager):
        tol = TOL[out.dtype]
        torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
        torch.testing.assert_close(out, ea.to(out.dtype).reshape(out.shape), atol=2 * tol, rtol=2 * tol)
    return source


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=DEVICE).to(dtype)


# forces the looped path on rows longer than 32 (one warp on a GPU, whose space refuses idle warps)
LOOP = {"ROWS": 1, "BLOCK_N": 32, "num_warps": 4 if DEVICE == "cpu" else 1}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_softmax_single_pass_rows_not_multiple_of_tile(dtype):
    run(lambda x: torch.softmax(x, -1), rand(13, 37, dtype=dtype), looped=False)


def test_softmax_looped_over_a_wide_row_uses_an_online_max_and_sum():
    x = rand(3, 100)
    x[1, 70:] += 30.0  # the max arrives late in the row: earlier partial sums must be rescaled
    source = run(lambda x: torch.softmax(x * 0.5, -1), x, config=LOOP, looped=True)
    assert source.text.count("for start in range") == 2  # max+sum in one pass, then the outputs
    source = run(lambda x: torch.logsumexp(x, -1), x, config=LOOP, looped=True)
    assert source.text.count("for start in range") == 1


@pytest.mark.parametrize("config", [None, LOOP])
def test_layer_norm_with_broadcast_weight_and_bias(config):
    w, b = rand(45), rand(45)
    run(lambda x, w, b: F.layer_norm(x, (45,), w, b, eps=1e-5), rand(5, 45), w, b, config=config)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_written_out(dtype):
    x, w = rand(6, 40, dtype=dtype), rand(40, dtype=dtype)
    run(lambda x, w: x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(dtype) * w, x, w)


@pytest.mark.parametrize("config", [None, LOOP])
def test_logsumexp_log_softmax_and_row_statistics(config):
    x = rand(1, 70)  # one row
    run(lambda x: torch.logsumexp(x, -1), x, config=config)
    run(lambda x: F.log_softmax(x, -1), x, config=config)
    run(lambda x: (x.var(-1), x.amax(-1), x.amin(-1), x.mean(-1, keepdim=True)), rand(9, 70), config=config)


def test_one_dimensional_input_and_integer_reductions():
    run(lambda x: torch.softmax(x, -1), rand(37))
    ints = torch.randint(-50, 50, (4, 90), dtype=torch.int32, device=DEVICE)
    for config in (None, LOOP):
        graph = kernelgen.trace(lambda x: (x.amax(-1), x.sum(-1)), ints)
        template, problem = match(graph)
        target = get_backend("triton").target()
        config = config or template.default_config(problem, target)
        kernel = get_backend("triton").compile(template.render(problem, config, target))
        outs = [torch.empty(s.shape, dtype=getattr(torch, s.dtype), device=DEVICE) for s in graph.output_specs]
        kernel(ints, *outs)
        assert torch.equal(outs[0], ints.amax(-1)) and torch.equal(outs[1], ints.sum(-1).to(outs[1].dtype))


@pytest.mark.parametrize("config", [None, LOOP])
def test_max_and_min_propagate_nan_like_torch(config):
    x = rand(4, 90)
    x[1, 5], x[2, 80] = float("nan"), float("nan")
    graph = kernelgen.trace(lambda x: (x.amax(-1), x.amin(-1)), x)
    template, problem = match(graph)
    target = get_backend("triton").target()
    kernel = get_backend("triton").compile(template.render(problem, config or template.default_config(problem, target),
                                                           target))
    outs = [torch.empty(4, device=DEVICE), torch.empty(4, device=DEVICE)]
    kernel(x, *outs)
    torch.testing.assert_close(outs[0], x.amax(-1), equal_nan=True)
    torch.testing.assert_close(outs[1], x.amin(-1), equal_nan=True)


def test_per_row_input_in_the_epilogue_and_3d_leading_dims():
    run(lambda x, s: torch.softmax(x, -1) * s, rand(2, 3, 21), rand(2, 3, 1))


def test_several_rows_per_program_and_masked_tail_rows():
    source = run(lambda x: x - x.amax(-1, keepdim=True), rand(7, 5), config={"ROWS": 4, "BLOCK_N": 8, "num_warps": LOOP["num_warps"]})
    assert '"ROWS": 4' in source.meta["constexprs"] and source.meta["grid"] == "[2]"


def test_gpu_space_prunes_by_threads_and_elements_per_thread():
    os.environ["KERNELGEN_TRITON_AOT"] = "0"  # analytic constraints only
    try:
        graph = kernelgen.trace(lambda x: torch.softmax(x, -1), torch.empty(64, 3000))
        problem = match(graph)[1]
        for arch in ("sm_90", "gfx942"):
            target = Target.gpu(arch)
            space = reduction_triton.space(problem, target)
            default = space.default()
            assert default["BLOCK_N"] >= 3000  # the row fits: single pass by default
            warp = target.limits["warp_size"]
            for config in space:
                assert config["num_warps"] * warp <= target.limits["max_threads"]
                assert config["ROWS"] * config["BLOCK_N"] <= 64 * config["num_warps"] * warp
            assert not space.is_valid({"ROWS": 16, "BLOCK_N": 4096, "num_warps": 1})
    finally:
        del os.environ["KERNELGEN_TRITON_AOT"]


# -- NaN / inf placement equals eager (issue 15) ------------------------------------------------------------

def special_rows(n: int = 70) -> torch.Tensor:
    """Rows: a NaN, all +inf, all -inf, one +inf, one -inf, +inf and -inf, a NaN last, an ordinary one."""
    x = torch.randn(8, n, generator=torch.Generator().manual_seed(0)).to(DEVICE)
    x[0, 3] = float("nan")
    x[1] = float("inf")
    x[2] = -float("inf")
    x[3, 5] = float("inf")
    x[4, 7] = -float("inf")
    x[5, 1], x[5, 9] = float("inf"), -float("inf")
    x[6, n - 1] = float("nan")
    return x


def run_like_eager(fn, *inputs, config=None):
    """Render with ``config`` (default: the template's), run, and compare every output with eager, NaN and
    inf placement included."""
    graph = kernelgen.trace(fn, *inputs)
    template, problem = match(graph)
    assert template.name == "reduction"
    target = get_backend("triton").target()
    source = template.render(problem, config or template.default_config(problem, target), target)
    kernel = get_backend("triton").compile(source)
    outs = [torch.full(s.shape, 123.0, device=DEVICE).to(getattr(torch, s.dtype)) for s in graph.output_specs]
    kernel(*inputs, *outs)
    eager = fn(*inputs)
    for out, ea in zip(outs, eager if isinstance(eager, tuple) else (eager,)):
        torch.testing.assert_close(out, ea.reshape(out.shape), atol=1e-5, rtol=1e-5, equal_nan=True)
    return source


def _rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _logsumexp_as_torch_writes_it(x):
    # ATen's logsumexp: the max is replaced by 0 where it is infinite, so an all-inf row gives +-inf
    m = x.amax(-1, keepdim=True)
    m = torch.where(m.abs() == float("inf"), 0.0, m)
    return torch.log(torch.exp(x - m).sum(-1, keepdim=True)) + m


SPECIAL_FNS = {
    "softmax": lambda x, w: torch.softmax(x, -1),
    "log_softmax": lambda x, w: F.log_softmax(x, -1),
    "logsumexp_formula": lambda x, w: _logsumexp_as_torch_writes_it(x),
    "rms_norm": _rms_norm,
    "amax_amin": lambda x, w: (x.amax(-1), x.amin(-1)),
    "softmax_and_its_max": lambda x, w: (torch.softmax(x, -1), x.amax(-1)),
    "layer_norm": lambda x, w: F.layer_norm(x, (x.shape[-1],), w, w, 1e-5),
    "var_mean_sum": lambda x, w: (x.var(-1), x.mean(-1), x.sum(-1)),
}


@pytest.mark.parametrize("config", [None, LOOP], ids=["single_pass", "looped"])
@pytest.mark.parametrize("name", sorted(SPECIAL_FNS))
def test_nan_and_inf_rows_land_where_eager_puts_them(name, config):
    run_like_eager(SPECIAL_FNS[name], special_rows(), torch.rand(70, device=DEVICE) + 0.5, config=config)


@pytest.mark.parametrize("config", [None, LOOP], ids=["single_pass", "looped"])
def test_logsumexp_of_infinite_rows_is_infinite_like_eager(config):
    run_like_eager(lambda x: torch.logsumexp(x, -1), special_rows(), config=config)


def test_online_softmax_max_propagates_nan_on_gpus_too():
    # the interpreter's tl.maximum propagates NaN whatever it is told; a GPU's only with PropagateNan.ALL
    source = run_like_eager(lambda x: (torch.softmax(x, -1), x.amax(-1)), special_rows(), config=LOOP)
    assert "tl.maximum(" in source.text
    assert all("PropagateNan.ALL" in line for line in source.text.splitlines() if "tl.maximum(" in line)
