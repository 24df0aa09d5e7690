"""The C++ reduction template over any dims (issue 16): leading, middle, several and all dims, keepdim, size-1
and odd sizes, NaN/Inf, integers, float16, argmax/argmin, var/std with correction; both loop structures (rows
and columns) against eager PyTorch and the IR reference."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import kernelgen
from kernelgen.backends import get_backend
from kernelgen.ir.reference import evaluate
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config
from kernelgen.templates import match
from kernelgen.templates import reduction_cpp_columns as columns

pytestmark = pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")

TOL = {torch.float32: dict(rtol=2e-5, atol=2e-5), torch.float64: dict(rtol=1e-10, atol=1e-10),
       torch.float16: dict(rtol=2e-3, atol=2e-3)}
COLUMNS = {"layout": "columns", "online": False, "cache_row": False, "prefetch": False}


def _problem(fn: Any, *inputs: Any):
    graph = kernelgen.trace(fn, *inputs)
    found = match(graph)
    assert found is not None and found[0].name == "reduction", f"no reduction matched\n{graph}"
    return graph, found[0], found[1]


def check(fn: Any, *inputs: Any, layout: str | None = None, **config: Any) -> Config:
    """Run the kernel (``layout`` forced, or the default config) and compare with eager and the IR reference,
    NaN in the same places; returns the config it ran."""
    graph, tpl, problem = _problem(fn, *inputs)
    target = Target.current("cpp")
    cfg = {**tpl.default_config(problem, target).to_json(), **config}
    if layout == "columns":
        cfg.update(COLUMNS)
    elif layout == "rows":
        cfg.update(layout="rows", tile=columns.TILES[1])  # the one tile value the row structure takes
    cfg = Config(cfg)
    kernel = get_backend("cpp").compile(tpl.render(problem, cfg, target))
    outs = [torch.full(s.shape, 7).to(getattr(torch, s.dtype)) for s in graph.output_specs]
    kernel(*inputs, *outs)
    eager = fn(*inputs)
    eager = list(eager) if isinstance(eager, tuple) else [eager]
    for got, ref, want in zip(outs, evaluate(graph, list(inputs)), eager):
        tol = TOL.get(want.dtype, dict(rtol=0, atol=0))
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, ref, equal_nan=True, **tol)
        torch.testing.assert_close(got, want.reshape(got.shape), equal_nan=True, **tol)
    return cfg


def _x(*shape: int, dtype=torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


CASES = {
    "sum dim 0": (lambda x: x.sum(0), (37, 70)),
    "sum leading two": (lambda x: x.sum([0, 1]), (3, 5, 33)),
    "mean middle": (lambda x: x.mean(1), (3, 7, 18)),
    "mean middle keepdim": (lambda x: x.mean(1, keepdim=True), (3, 7, 18)),
    "amax dims 0 and 2": (lambda x: x.amax((0, 2), keepdim=True), (3, 4, 5)),
    "batch-norm statistics": (lambda x: torch.var_mean(x, [0, 2, 3], correction=0)[0], (2, 3, 4, 5)),
    "std with correction 2": (lambda x: torch.std(x, 1, correction=2, keepdim=True), (4, 9, 6)),
    "logsumexp dim 0": (lambda x: torch.logsumexp(x, 0), (30, 17)),
    "all dims": (lambda x: x.sum(), (3, 4, 5)),
    "all dims keepdim": (lambda x: x.mean((0, 1, 2), keepdim=True), (3, 4, 5)),
    "size-1 and odd dims": (lambda x: x.sum((0, 1, 3)), (1, 5, 3, 1, 7)),
    "negative dims": (lambda x: x.amin((-3, -1)), (4, 3, 6)),
    "prod dim 0": (lambda x: (x * 0.5 + 1).prod(0), (9, 13)),
    "prod all dims": (lambda x: (x * 0.1 + 1).prod(), (3, 4, 5)),
}


@pytest.mark.parametrize("layout", ["rows", "columns"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_reductions_over_any_dims_match_eager(name, layout):
    fn, shape = CASES[name]
    x = _x(*shape)
    graph, tpl, problem = _problem(fn, x)
    if layout == "columns" and "columns" not in tpl.space(problem, Target.current("cpp")).param("layout").choices:
        pytest.skip("no kept dim to tile: the column structure does not apply")
    check(fn, x, layout=layout)


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_nan_and_inf_land_where_eager_puts_them(layout):
    x = _x(9, 6)
    x[2, 0] = float("nan")
    x[:, 1] = float("inf")
    x[3, 2] = float("-inf")
    x[:, 3] = float("-inf")
    x[4, 4], x[6, 4] = float("nan"), float("inf")
    for fn in (lambda x: x.sum(0), lambda x: x.amax(0), lambda x: x.amin(0), lambda x: torch.logsumexp(x, 0),
               lambda x: x.var(0)):
        check(fn, x, layout=layout)


@pytest.mark.parametrize("layout", ["rows", "columns"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.bool, torch.uint8])
def test_integer_and_bool_sums_accumulate_in_int64_like_eager(dtype, layout):
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 2, (33, 10), generator=g).bool() if dtype == torch.bool else \
        torch.randint(torch.iinfo(dtype).min, torch.iinfo(dtype).max, (33, 10), generator=g, dtype=dtype)
    check(lambda x: x.sum(0), x, layout=layout)
    if dtype != torch.bool:
        check(lambda x: x.amax(0), x, layout=layout)


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_float16_accumulates_in_float32(layout):
    check(lambda x: x.mean(0), _x(300, 17, dtype=torch.float16), layout=layout)
    check(lambda x: x.sum((0, 1)), _x(20, 30, 9, dtype=torch.float16), layout=layout)


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_argmax_argmin_first_index_of_ties_and_first_nan(layout):
    x = torch.tensor([[1.0, float("nan"), 3.0, 2.0, 5.0],
                      [4.0, 2.0, float("nan"), 2.0, 5.0],
                      [4.0, float("nan"), 3.0, 2.0, -1.0]])
    for fn in (lambda x: x.argmax(0), lambda x: x.argmin(0), lambda x: x.argmax(1, keepdim=True),
               lambda x: torch.max(x, 0)[1], lambda x: torch.min(x, 1)[1]):
        check(fn, x, layout=layout)
    ties = torch.randint(0, 3, (9, 21), generator=torch.Generator().manual_seed(2)).int()
    check(lambda x: x.argmin(0), ties, layout=layout)
    check(lambda x: x.argmax(0), ties, layout=layout)


def test_argmax_over_all_dims_is_the_flat_index():
    x = _x(4, 5, 6)
    x[2, 3, 1] = 10.0
    x[3, 0, 0] = 10.0  # a later tie loses
    check(lambda x: x.argmax(), x)
    check(lambda x: x.argmin(), x)
    check(lambda x: x.argmax(keepdim=True), x)


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_prologue_and_epilogue_with_per_column_inputs(layout):
    x, w, b = _x(8, 6), _x(6, seed=1), _x(6, seed=2)
    check(lambda x, w: (x * w).sum(0), x, w, layout=layout)  # a bias-gradient-like prologue
    check(lambda x, w, b: torch.rsqrt(x.var(0) + 1e-5) * w + b, x, w, b, layout=layout)  # epilogue on the dropped dims
    check(lambda x, w: torch.rsqrt(x.var(0, keepdim=True) + 1e-5) * w, x, w, layout=layout)


def test_transposed_and_permuted_inputs_are_read_through_strides():
    x = _x(5, 6)
    check(lambda x: x.t().sum(0), x)
    y = _x(4, 3, 5).permute(2, 0, 1)  # [5, 4, 3], no dim contiguous in order
    for dims in (0, 1, (0, 2), (1, 2)):
        check(lambda y, d=dims: y.sum(d), y)


def test_element_outputs_beside_trailing_reductions():
    x = _x(3, 4, 5)
    check(lambda x: x - x.mean((1, 2), keepdim=True), x)


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_element_outputs_of_leading_and_middle_reductions_land_in_place(layout):
    x, w, b = _x(4, 3, 5, 6), _x(3, 1, 1, seed=1), _x(3, 1, 1, seed=2)

    def batch_norm(x, w, b):  # training forward: statistics over (0, 2, 3), normalised output, all in one kernel
        var, mean = torch.var_mean(x, [0, 2, 3], correction=0, keepdim=True)
        return (x - mean) * torch.rsqrt(var + 1e-5) * w + b, mean, var

    check(batch_norm, x, w, b, layout=layout)
    check(lambda x: (x - x.amax(0, keepdim=True)).exp(), _x(7, 9), layout=layout)
    check(lambda x: x * x.sum(1, keepdim=True), _x(3, 5, 4), layout=layout)


def test_default_structure_follows_the_memory_layout():
    target = Target.current("cpp")
    for fn, x, layout in ((lambda x: x.sum(0), _x(64, 256), "columns"),
                          (lambda x: x.sum([0, 1]), _x(4, 16, 256), "columns"),
                          (lambda x: x.sum(-1), _x(256, 64), "rows"),
                          (lambda x: x.t().sum(0), _x(64, 256), "rows"),
                          (lambda x: torch.var_mean(x, [0, 2, 3])[1], _x(4, 8, 6, 6), "rows")):
        _, tpl, problem = _problem(fn, x)
        assert tpl.default_config(problem, target)["layout"] == layout


def test_a_row_of_several_groups_is_walked_by_nested_loops():
    # batch norm's (0, 2, 3) of NCHW: the row is N groups of H*W contiguous elements; the row structure walks
    # them as nested loops (the inner one contiguous, vectorisable) instead of dividing a flat index per element
    target = Target.current("cpp")
    x = _x(4, 8, 6, 6)
    _, tpl, problem = _problem(lambda x: x.sum([0, 2, 3]), x)
    assert problem.grouped
    text = tpl.render(problem, tpl.default_config(problem, target), target).text
    assert "for (int64_t jo = 0; jo < 4; ++jo)" in text and "for (int64_t ji = 0; ji < 36; ++ji)" in text
    check(lambda x: x.sum([0, 2, 3]), x, layout="rows")


def test_reduced_dims_that_do_not_merge_are_read_group_by_group():
    _, _, problem = _problem(lambda x: x.sum([0, 2]), _x(3, 4, 5))
    assert problem.row_shape == (3, 5) and problem.shape == (4, 15)
    _, _, problem = _problem(lambda x: x.sum([1, 2]), _x(3, 4, 5))
    assert problem.row_shape == (20,) and not problem.grouped


def test_softmax_and_log_softmax_over_a_leading_or_middle_dim():
    x = _x(5, 4, 7)
    check(lambda x: torch.softmax(x, 0), x)
    check(lambda x: torch.log_softmax(x, 1), x)
    check(lambda x: torch.nn.functional.softmax(x, dim=None, _stacklevel=5), x)  # legacy implicit dim: 0 for 3-d


def test_tuple_results_come_back_in_eager_containers():
    x = _x(5, 7)
    for fn in (lambda x: torch.max(x, 0), lambda x: torch.min(x, 1, keepdim=True),
               lambda x: torch.var_mean(x, 1), lambda x: torch.std_mean(x, 0, correction=0)):
        compiled = kernelgen.compile(fn)
        got, want = compiled(x), fn(x)
        assert type(got) is type(want) and compiled.explain(x)["implementation"] == "reduction"
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)


def test_reductions_of_a_0d_tensor_are_of_its_one_element():
    # they lower (no reduction node: the value, or 0 for argmax), so a 0-d reduction no longer stops a graph
    x = torch.tensor(-2.5)
    for fn in (lambda x: x.sum() * 2, lambda x: x.mean(0) + 1, lambda x: x.amax(-1).exp(), lambda x: x.argmax(),
               lambda x: torch.logsumexp(x, 0) - x):
        graph = kernelgen.trace(fn, x)
        assert not {"sum", "max", "argmax"} & graph.ops()
        torch.testing.assert_close(evaluate(graph, [x])[0], fn(x))
        torch.testing.assert_close(kernelgen.compile(fn)(x), fn(x))


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_integer_prod_wraps_around_in_int64_like_eager(layout):
    x = torch.randint(-9, 10, (70, 5), generator=torch.Generator().manual_seed(4), dtype=torch.int32)
    check(lambda x: x.prod(0), x, layout=layout)


@pytest.mark.parametrize("split", [False, True])
def test_a_full_reduction_split_among_threads(split):
    """One row (a full reduction) is shared out among the threads: partial results meet in shared accumulators,
    argmax keeps the first index whatever order the threads arrive in."""
    x = _x(300, 200)  # above the parallel threshold
    x[150, 7] = 9.0
    x[20, 100] = 9.0  # the first of two equal maxima, in an earlier thread's stretch
    for fn in (lambda x: x.sum(), lambda x: x.var(), lambda x: x.argmax(), lambda x: x.amin(),
               lambda x: torch.logsumexp(x, (0, 1)), lambda x: x - x.mean(), lambda x: (x * 1e-3 + 1).prod()):
        cfg = check(fn, x, split=split, online=False, prefetch=False)
        assert cfg["split"] == split
    y = x.clone()
    y[250, 3] = float("nan")
    y[100, 0] = float("nan")  # the first NaN wins argmax
    check(lambda x: x.argmax(), y, split=split, online=False, prefetch=False)
    check(lambda x: x.amax(), y, split=split, online=False, prefetch=False)


def test_full_reductions_split_by_default_when_large():
    target = Target.current("cpp")
    _, tpl, problem = _problem(lambda x: x.sum(), _x(300, 200))
    assert tpl.default_config(problem, target)["split"]
    _, tpl, problem = _problem(lambda x: x.sum(), _x(30, 20))
    assert not tpl.default_config(problem, target)["split"]


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_per_row_epilogue_of_a_middle_reduction_with_kept_shape_inputs(layout):
    # var(1) of [B, T, C] is [B, C]: its epilogue reads a [B, C] input, which broadcasts against the kept dims
    x, w = _x(3, 5, 4), _x(3, 4, seed=1)
    check(lambda x, w: x.var(1) * w + x.mean(1), x, w, layout=layout)


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_any_and_all_over_dims_keep_eagers_dtype(layout):
    x = torch.randint(0, 3, (9, 7), generator=torch.Generator().manual_seed(5), dtype=torch.uint8)  # any/all of uint8: uint8
    check(lambda x: x.any(0), x, layout=layout)
    check(lambda x: x.all(0), x, layout=layout)
    y = _x(9, 7).round()
    y[3, 2] = float("nan")  # NaN is true
    check(lambda y: torch.all(y, 0, keepdim=True), y, layout=layout)
    check(lambda y: (y > 0).any(0), y, layout=layout)
