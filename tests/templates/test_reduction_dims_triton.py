"""The Triton reduction template over any dims (issue 16), under the interpreter with tiny shapes: leading,
middle, several and all dims, grouped reduced dims, keepdim, NaN/Inf, integers, float16, argmax/argmin, in a
single pass and looped (BLOCK_N smaller than the row)."""

from __future__ import annotations

import os

import pytest

from tests.triton_env import DEVICE, needs_triton, torch  # TRITON_INTERPRET before triton loads

import kernelgen  # noqa: E402
from kernelgen.backends import get_backend  # noqa: E402
from kernelgen.ir.reference import evaluate  # noqa: E402
from kernelgen.ir.target import Target  # noqa: E402
from kernelgen.ir.values import Config  # noqa: E402
from kernelgen.templates import match, reduction_triton  # noqa: E402

pytestmark = needs_triton
TOL = {torch.float32: dict(rtol=2e-5, atol=2e-5), torch.float16: dict(rtol=2e-3, atol=2e-3)}
# rows longer than 32 loop (one warp on a GPU, whose space refuses warps with no elements to hold)
WARPS = 4 if DEVICE == "cpu" else 1
LOOP = {"ROWS": 1, "BLOCK_N": 32, "num_warps": WARPS}


def run(fn, *inputs, config=None):
    graph = kernelgen.trace(fn, *inputs)
    template, problem = match(graph)
    assert template.name == "reduction"
    target = get_backend("triton").target()
    if config is not None and not template.space(problem, target).is_valid(Config(config)):
        config = None  # a row too short to loop over
    config = config or template.default_config(problem, target)
    kernel = get_backend("triton").compile(template.render(problem, config, target))
    outs = [torch.full(s.shape, 7, device=DEVICE).to(getattr(torch, s.dtype)) for s in graph.output_specs]
    kernel(*inputs, *outs)
    eager = fn(*inputs)
    eager = list(eager) if isinstance(eager, tuple) else [eager]
    for out, ref, want in zip(outs, evaluate(graph, inputs), eager):
        tol = TOL.get(want.dtype, dict(rtol=0, atol=0))
        assert out.dtype == want.dtype
        torch.testing.assert_close(out, ref, equal_nan=True, **tol)
        torch.testing.assert_close(out, want.reshape(out.shape), equal_nan=True, **tol)


def rand(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(DEVICE)


CASES = {
    "sum dim 0": (lambda x: x.sum(0), (40, 6)),
    "mean middle keepdim": (lambda x: x.mean(1, keepdim=True), (3, 37, 5)),
    "var over 0, 2, 3 (grouped)": (lambda x: torch.var_mean(x, [0, 2, 3], correction=0)[0], (2, 3, 4, 5)),
    "std correction 0 over 0 and 2": (lambda x: x.std((0, 2), correction=0), (3, 4, 13)),
    "logsumexp dim 0": (lambda x: torch.logsumexp(x, 0), (40, 5)),
    "all dims": (lambda x: x.sum(), (3, 4, 5)),
    "amin leading two": (lambda x: x.amin((0, 1)), (4, 9, 3)),
    "prod dim 0": (lambda x: (x * 0.1 + 1).prod(0), (40, 3)),
}


@pytest.mark.parametrize("looped", [False, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_reductions_over_any_dims_match_eager(name, looped):
    fn, shape = CASES[name]
    run(fn, rand(*shape), config=LOOP if looped else None)


@pytest.mark.parametrize("looped", [False, True])
def test_nan_inf_and_argmax_argmin_first_extreme(looped):
    x = torch.tensor([[1.0, float("nan"), 3.0, 2.0, 5.0, 0.0],
                      [4.0, 2.0, float("nan"), 2.0, 5.0, float("inf")],
                      [4.0, float("nan"), 3.0, 2.0, -1.0, float("-inf")]] * 12, device=DEVICE)
    config = LOOP if looped else None
    for fn in (lambda x: x.sum(0), lambda x: x.amax(0), lambda x: x.argmax(0), lambda x: x.argmin(0),
               lambda x: x.argmax(1, keepdim=True), lambda x: x.argmax(), lambda x: torch.max(x, 0)[1]):
        run(fn, x, config=config)


@pytest.mark.parametrize("looped", [False, True])
def test_integers_bool_and_half(looped):
    config = LOOP if looped else None
    g = torch.Generator().manual_seed(3)
    ints = torch.randint(-50, 50, (40, 5), generator=g, dtype=torch.int32).to(DEVICE)
    run(lambda x: x.sum(0), ints, config=config)
    run(lambda x: x.argmin(0), ints % 3, config=config)
    run(lambda x: x.sum(0), (ints > 0), config=config)
    run(lambda x: x.mean(0), rand(40, 6, dtype=torch.float16), config=config)


def test_epilogue_on_the_dropped_dims_with_a_per_column_input():
    x, w = rand(40, 6), rand(6, seed=1)
    run(lambda x, w: torch.rsqrt(x.var(0) + 1e-5) * w, x, w)
    run(lambda x, w: (x * w).sum(0), x, w, config=LOOP)


@pytest.mark.parametrize("looped", [False, True])
def test_element_outputs_of_a_leading_reduction_land_in_place(looped):
    x, w = rand(2, 3, 4, 5), rand(3, 1, 1, seed=1)

    def batch_norm(x, w):
        var, mean = torch.var_mean(x, [0, 2, 3], correction=0, keepdim=True)
        return (x - mean) * torch.rsqrt(var + 1e-5) * w, mean

    run(batch_norm, x, w, config=LOOP if looped else None)
    run(lambda x: (x - x.amax(0, keepdim=True)).exp(), rand(40, 3), config=LOOP if looped else None)


def test_any_and_all():
    x = torch.randint(0, 3, (40, 5), generator=torch.Generator().manual_seed(5), dtype=torch.uint8).to(DEVICE)
    run(lambda x: x.any(0), x, config=LOOP)
    run(lambda x: x.all(0), x)
    run(lambda x: (x > 1).all(), x)


def test_outer_reductions_tile_many_adjacent_rows():
    # sum(0) of [N, C]: rows (columns of x) are adjacent in memory; a program takes several of them and loops
    run(lambda x: x.sum(0), rand(70, 9), config={"ROWS": 4, "BLOCK_N": 32, "num_warps": WARPS})
    run(lambda x: torch.var_mean(x, (0, 1), correction=0), rand(5, 13, 6), config={"ROWS": 4, "BLOCK_N": 32, "num_warps": WARPS})
    os.environ["KERNELGEN_TRITON_AOT"] = "0"  # analytic constraints only
    try:
        problem = match(kernelgen.trace(lambda x: x.sum(0), torch.empty(8192, 768)))[1]
        assert problem.outer
        default = reduction_triton.space(problem, Target.gpu("sm_90")).default()
        assert default["ROWS"] > 1 and default["BLOCK_N"] < 8192
    finally:
        del os.environ["KERNELGEN_TRITON_AOT"]
