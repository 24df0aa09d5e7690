"""Every row of the C++ op table against eager torch on special values, for every dtype (issue 16, item 2).

The cases are derived from ``CppRenderer.code_for_op``: a new row is swept without editing this file. Per dtype
one kernel computes every unary op eager accepts for that dtype over NaN, +-inf, +-0, extremes, tiny and
ordinary values (integer extremes for ints), and one kernel every binary op over every ordered pair of them:
two g++ runs per dtype. The kernel must run (no eager fallback) and equal eager within the dtype's tolerance
with NaN in the same places; integers and bools exactly, wraparound included.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import kernelgen
from kernelgen.backends import get_backend
from kernelgen.codegen.cpp_renderer import CppRenderer
from kernelgen.ir.graph import BINARY_OPS, UNARY_OPS
from tests.codegen.eager_compare import assert_like_eager

pytestmark = [pytest.mark.skipif(not get_backend("cpp").is_available(), reason="needs g++")]

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.bool)
SWEPT_OPS = sorted(CppRenderer.ops() - {"const", "cast", "where", "gelu"})  # gelu: tests/codegen/test_cpp_expr.py


def special_values(dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.tensor([False, True])
    if dtype.is_floating_point:
        fi = torch.finfo(dtype)
        values = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 40.0, 100.0,
                  fi.max, -fi.max, fi.tiny, 1e-3, 0.75, -0.3, 1.5, 2.5]
        return torch.tensor(values, dtype=torch.float64).to(dtype)
    ii = torch.iinfo(dtype)
    values = {ii.min, ii.min + 1, ii.max - 1, ii.max, 0, 1, 2, 3, 5, 7, 31, 64, 127 if ii.min else 200}
    if ii.min:
        values |= {-1, -3, -7}
    return torch.tensor(sorted(values), dtype=dtype)


def eager_op(op: str):
    return getattr(torch, op, None) or getattr(F, op)


def _accepted(ops: list[str], inputs: tuple[torch.Tensor, ...]) -> list[str]:
    """The ops eager computes for these inputs (it rejects some dtypes, and integer division by zero)."""
    kept = []
    for op in ops:
        try:
            eager_op(op)(*inputs)
        except (RuntimeError, TypeError):
            continue
        kept.append(op)
    return kept


def _sweep(ops: list[str], inputs: tuple[torch.Tensor, ...], dtype: torch.dtype) -> None:
    ops = _accepted(ops, inputs)
    fns = [eager_op(op) for op in ops]
    if len(inputs) == 1:
        def fn(x):
            return tuple(f(x) for f in fns)
    else:
        def fn(x, y):
            return tuple(f(x, y) for f in fns)
    compiled = kernelgen.compile(fn, backend="cpp")
    got = compiled(*inputs)
    assert compiled.explain(*inputs)["implementation"] == "pointwise", "the C++ kernel did not run"
    wide_inputs = tuple(t.double() if t.is_floating_point() else t for t in inputs)
    for op, g, w in zip(ops, got, fn(*inputs)):
        wide = eager_op(op)(*wide_inputs).to(w.dtype) if w.is_floating_point() and dtype != torch.float64 else None
        assert_like_eager(g, w, wide, f"{op} on {dtype}", lambda k, op=op: eager_op(op)(*(t[k:k + 1] for t in inputs)))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_every_unary_row_matches_eager_on_special_values(dtype):
    _sweep([op for op in SWEPT_OPS if op in UNARY_OPS], (special_values(dtype),), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_every_binary_row_matches_eager_on_special_values(dtype):
    v = special_values(dtype)
    n = v.numel()
    x, y = v.repeat_interleave(n), v.repeat(n)  # every ordered pair
    ops = [op for op in SWEPT_OPS if op in BINARY_OPS]
    if not dtype.is_floating_point:  # integer division by the zeros in y: eager raises, the kernel is refused
        ops = [op for op in ops if op not in ("fmod", "remainder", "floor_divide")]
    _sweep(ops, (x, y), dtype)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("divisor", [7, -3, 1, 2, -128])
def test_integer_division_by_a_constant_rounds_like_python(dtype, divisor):
    x = special_values(dtype)

    def fn(x):
        return (x // divisor, x % divisor, torch.fmod(x, divisor), torch.div(x, divisor, rounding_mode="trunc"),
                torch.div(x, divisor, rounding_mode="floor"))

    if dtype == torch.uint8 and divisor < 0:
        pytest.skip("a negative divisor wraps into uint8 differently in eager's scalar path")
    compiled = kernelgen.compile(fn, backend="cpp")
    got = compiled(x)
    assert compiled.explain(x)["implementation"] == "pointwise"
    for g, w in zip(got, fn(x)):
        assert g.dtype == w.dtype and torch.equal(g, w), (g, w)


@pytest.mark.parametrize("fn", [lambda x, y: x // y, lambda x, y: x % y, lambda x, y: torch.fmod(x, y),
                                lambda x, y: x // 0, lambda x, y: x % -1],
                         ids=["floordiv", "remainder", "fmod", "by-zero", "by-minus-one"])
def test_integer_division_that_can_trap_runs_eagerly(fn):
    x = torch.tensor([7, -7, 5], dtype=torch.int32)
    y = torch.tensor([2, 0, -1], dtype=torch.int32)
    compiled = kernelgen.compile(fn, backend="cpp", partition=False)  # the lowering refuses it
    try:
        want = fn(x, y)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            compiled(x, y)
    else:
        assert torch.equal(compiled(x, y), want)
    assert compiled.explain(x, y)["implementation"] == "eager"
