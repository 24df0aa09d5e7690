"""Lowering handlers for PyTorch's reductions (sum, prod, mean, amax/amin, max/min, argmax/argmin, any/all,
var/std and their ``_mean`` pairs, logsumexp) over any set of dims, as the IR's ``sum``/``prod``/``max``/``min``/``argmax``/``argmin``
nodes (which keep the reduced dims as size 1) plus elementwise prologue and epilogue.

Registered in the table of ``kernelgen.lowering.rules``. Eager's numerics are the contract: sums
accumulate in the result dtype (int64 for bool and integer inputs), mean/var/std/logsumexp are float math
(eager raises for integer inputs, so those graphs run eagerly), an empty reduction runs eagerly.
"""

from __future__ import annotations

import math
from typing import Any

from kernelgen.errors import UnsupportedOpError
from kernelgen.ir.values import TensorSpec
from kernelgen.lowering.elementwise import binary
from kernelgen.lowering.rules import arg, cast_to, float_result, handles, is_float_dtype, is_node, ref


def reduced_dims(b: Any, x: int, dim: Any, kind: str, where: str) -> tuple[int, ...]:
    """The sorted dims a reduction of node ``x`` runs over (``dim=None`` or ``[]``: all of them).

    A 0-d input reduces over no dim (``()``: each reduction is of its one element). Raises
    ``UnsupportedOpError`` for a reduction over an empty dim (eager gives 0, NaN or an error there; kernels
    reduce non-empty rows) and for a dim out of range."""
    shape = b.spec(x).shape
    rank = len(shape)
    dims = dim if isinstance(dim, (tuple, list)) else ((dim,) if dim is not None else ())
    if any(not isinstance(d, int) or not -max(rank, 1) <= d < max(rank, 1) for d in dims):
        raise UnsupportedOpError(f"{kind} over dim={dim} of a rank-{rank} tensor at `{where}`; eager raises")
    if rank == 0:  # eager takes dim 0 / -1 of a 0-d tensor: one element, reduced over nothing
        return ()
    reduced = tuple(sorted({d % rank for d in dims})) if dims else tuple(range(rank))
    if any(shape[d] == 0 for d in reduced):
        raise UnsupportedOpError(f"{kind} over an empty dim of {list(shape)} at `{where}`; eager computes it")
    return reduced  # (an empty kept dim makes an empty result: nothing to reduce, no kernel runs)


def count(b: Any, x: int, dims: tuple[int, ...]) -> int:
    """How many elements each output of a reduction over ``dims`` of ``x`` reduces."""
    return math.prod(b.spec(x).shape[d] for d in dims)


def finish(b: Any, value: int, x: int, dims: tuple[int, ...], keepdim: bool) -> int:
    """``value`` (keepdim-shaped) in the result's shape: the reduced dims kept as 1 or dropped."""
    shape = b.spec(x).shape
    final = tuple(1 if d in dims else s for d, s in enumerate(shape)) if keepdim else \
        tuple(s for d, s in enumerate(shape) if d not in dims)
    spec = b.spec(value)
    return value if spec.shape == final else b.add("reshape", (value,), TensorSpec(final, spec.dtype))


def mean(b: Any, x: int, dims: tuple[int, ...]) -> int:
    return b.elementwise("mul", (b.reduce("sum", x, dims), b.scalar_or_node(1.0 / count(b, x, dims), x)))


def variance(b: Any, x: int, dims: tuple[int, ...], correction: float) -> int:
    """Two-pass variance (mean first, then the centred squares), as eager's CPU kernels compute it."""
    centered = b.elementwise("sub", (x, mean(b, x, dims)))
    ssq = b.reduce("sum", b.elementwise("mul", (centered, centered)), dims)
    denom = max(count(b, x, dims) - correction, 0)
    return b.elementwise("mul", (ssq, b.scalar_or_node(1.0 / denom if denom else float("inf"), x)))


# Where eager's CPU layer norm has no statistics for a row: it computes them in float32 (double for float64) by
# Welford's method over its vector lanes, and folding the first lane into the empty total multiplies that lane's
# squared mean by zero, so a row holding a value of magnitude >= sqrt(the type's max) (2**64 for float32) gets
# NaN statistics, or, depending on where the value sits among the lanes, an infinite variance and a row of zeros
# (tests/reliability/test_numerics_contract.py probes both). Two-pass moments with a double accumulator stay finite
# there, and a layer norm built on them returned a normalised row (rows of FLT_MAX: zeros plus the bias) where eager
# has none. ``overflow_is_nan`` gives such rows NaN statistics, as eager gives rows of FLT_MAX and of +-FLT_MAX.
# float16 holds no such value (its max is 65504).
MOMENTS_OVERFLOW = {"float32": 2.0 ** 64, "bfloat16": 2.0 ** 64, "float64": 2.0 ** 512}


def overflow_is_nan(b: Any, x: int, stat: int, dims: tuple[int, ...]) -> int:
    """``stat`` (a row statistic of ``x`` over ``dims``) as NaN where eager's float moments of the row overflow."""
    bound = MOMENTS_OVERFLOW.get(b.spec(x).dtype)
    if bound is None:
        return stat
    largest = b.reduce("max", b.elementwise("abs", (x,)), dims)
    overflow = b.elementwise("ge", (largest, b.const(bound, b.spec(largest).dtype)))
    return b.elementwise("where", (overflow, b.const(math.nan, b.spec(stat).dtype), stat))


def logsumexp(b: Any, x: int, dims: tuple[int, ...]) -> int:
    m = b.reduce("max", x, dims)
    s = b.reduce("sum", b.elementwise("exp", (b.elementwise("sub", (x, m)),)), dims)
    lse = b.elementwise("add", (m, b.elementwise("log", (s,))))
    # A max of +-inf gives that inf in eager (which shifts by 0 there), where x - m is inf - inf = nan:
    # all +inf gives inf, all -inf gives -inf. A nan max (a nan among the values) stays nan.
    infinite = b.elementwise("eq", (b.elementwise("abs", (m,)), b.const(math.inf, b.spec(m).dtype)))
    return b.elementwise("where", (infinite, m, lse))


# var/std's accumulator where it is wider than the input (eager's CPU ``acc_type<T, false>``).
VARIANCE_ACCUMULATOR = {"float32": "float64"}


def _correction(args: tuple, kwargs: dict, at: int) -> float:
    """var/std's correction: ``correction=`` by keyword, else ``unbiased`` (positional at ``at`` or keyword)."""
    correction = kwargs.get("correction")
    if correction is None:
        correction = 1 if arg(args, kwargs, at, "unbiased", True) else 0
    return correction


def _reduction(kind: str) -> Any:
    def handler(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> Any:
        x = int(args[0])
        dim = arg(args, kwargs, 1, "dim", None)
        keep_at, unbiased_at = 2, None
        if kind in ("var", "std", "var_mean", "std_mean"):
            if isinstance(dim, bool):  # var(x, unbiased): the overload over all dims
                dim, keep_at, unbiased_at = None, 99, 1
            else:
                keep_at, unbiased_at = 3, 2
        dims = reduced_dims(b, x, dim, kind, where)
        keepdim = bool(arg(args, kwargs, keep_at, "keepdim", False))
        if kind in ("mean", "logsumexp"):
            float_result(kind, meta, where)
        elif kind in ("var", "std", "var_mean", "std_mean") and not is_float_dtype(b.spec(x).dtype):
            raise UnsupportedOpError(f"{kind} of {b.spec(x).dtype} at `{where}` is float math; eager decides")
        trivial = count(b, x, dims) == 1 and kind not in ("var", "std", "var_mean", "std_mean")
        if trivial:  # only size-1 dims: each value is its own sum, max, mean (and logsumexp)
            value = x
        elif kind == "sum":  # eager accumulates in the result dtype: int8/bool sums in int64, dtype= before summing
            value = b.reduce("sum", cast_to(b, x, meta.dtype) if meta is not None else x, dims)
        elif kind == "mean":
            value = mean(b, cast_to(b, x, meta.dtype) if meta is not None else x, dims)
        elif kind in ("amax", "max"):
            value = b.reduce("max", x, dims)
        elif kind in ("amin", "min"):
            value = b.reduce("min", x, dims)
        elif kind == "logsumexp":  # of integers too: eager computes it in the default float dtype
            value = logsumexp(b, cast_to(b, x, meta.dtype) if meta is not None else x, dims)
        else:  # var, std, var_mean, std_mean
            # In eager's CPU accumulator (acc_type<float, false> is double): the squares of rows near 1e19 overflow
            # a float sum, where eager's variance (1e38) is finite. Half and bfloat16 already compute in float.
            wide = cast_to(b, x, VARIANCE_ACCUMULATOR.get(b.spec(x).dtype, b.spec(x).dtype))
            dtype = b.spec(x).dtype
            value = variance(b, wide, dims, _correction(args, kwargs, unbiased_at))
            if kind.startswith("std"):
                value = b.elementwise("sqrt", (value,))
            value = cast_to(b, value, dtype)
            if kind.endswith("_mean"):
                average = cast_to(b, mean(b, wide, dims), dtype)
                return (ref(finish(b, value, x, dims, keepdim)), ref(finish(b, average, x, dims, keepdim)))
        if meta is not None:
            value = cast_to(b, value, meta.dtype)
        return finish(b, value, x, dims, keepdim)

    return handler


for _kind in ("sum", "mean", "amax", "amin", "logsumexp", "var", "std", "var_mean", "std_mean"):
    handles(_kind)(_reduction(_kind))


@handles("prod")
def _prod(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """prod(x, dim=None, keepdim=False, *, dtype): accumulated in the result dtype, as sum (int64 for integers)."""
    x = int(args[0])
    dims = reduced_dims(b, x, arg(args, kwargs, 1, "dim", None), "prod", where)
    value = cast_to(b, x, meta.dtype) if meta is not None else x
    if count(b, x, dims) != 1:
        value = b.reduce("prod", value, dims)
    return finish(b, value, x, dims, bool(arg(args, kwargs, 2, "keepdim", False)))


def _any_all(op: str) -> Any:
    """any/all(x, dim=None, keepdim=False): max/min of ``x != 0`` as bool, in the result dtype eager gives
    (bool, or uint8 for a uint8 input)."""

    def handler(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
        x = int(args[0])
        dims = reduced_dims(b, x, arg(args, kwargs, 1, "dim", None), op, where)
        truth = x if b.spec(x).dtype == "bool" else b.elementwise("ne", (x, b.scalar_or_node(0, x)))
        value = truth if count(b, x, dims) == 1 else b.reduce("max" if op == "any" else "min", truth, dims)
        if meta is not None:
            value = cast_to(b, value, meta.dtype)
        return finish(b, value, x, dims, bool(arg(args, kwargs, 2, "keepdim", False)))

    return handler


handles("any")(_any_all("any"))
handles("all")(_any_all("all"))


def _arg_extreme(op: str) -> Any:
    """argmax/argmin(x, dim=None, keepdim=False): the int64 index of the first extreme value (NaN is the
    maximum: the first NaN wins either way); over all dims it is the flat row-major index."""

    def handler(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
        x = int(args[0])
        if b.spec(x).dtype == "bool":  # eager: "not implemented for 'Bool'"
            raise UnsupportedOpError(f"{op} of a bool tensor at `{where}`; eager raises for it")
        dim = arg(args, kwargs, 1, "dim", None)
        dims = reduced_dims(b, x, dim, op, where)
        keepdim = bool(arg(args, kwargs, 2, "keepdim", False))
        if count(b, x, dims) == 1:  # one candidate: its index is 0
            value = b.add("cast", (b.const(0, "int64"),), TensorSpec(tuple(1 if d in dims else s for d, s in
                                                                           enumerate(b.spec(x).shape)), "int64"))
        else:
            value = b.reduce(op, x, dims)
        return finish(b, value, x, dims, keepdim)

    return handler


handles("argmax")(_arg_extreme("argmax"))
handles("argmin")(_arg_extreme("argmin"))


def _max_min(name: str, b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> Any:
    other = arg(args, kwargs, 1, "other")
    if is_node(other):  # torch.max(a, b) is elementwise
        return binary("maximum" if name == "max" else "minimum")(b, args, kwargs, meta, where)
    dim = arg(args, kwargs, 1, "dim")
    if dim is None:  # torch.max(x): the value over every dim, a tensor
        value_meta = meta if not isinstance(meta, (tuple, list)) else None
        return _reduction("amax" if name == "max" else "amin")(b, args[:1], {}, value_meta, where)
    if not isinstance(dim, int):
        raise UnsupportedOpError(f"{name}(dim={dim!r}) at `{where}`; eager takes one int dim")
    keepdim = arg(args, kwargs, 2, "keepdim", False)
    values = _reduction(name)(b, (args[0], dim), {"keepdim": keepdim}, None, where)
    if b.spec(int(args[0])).dtype == "bool":  # argmax of bool is not in eager's kernels; max(dim) of bool is
        return (ref(values), None)
    indices = _arg_extreme("argmax" if name == "max" else "argmin")(b, (args[0], dim, keepdim), {}, None, where)
    return (ref(values), ref(indices))


handles("max")(lambda *a: _max_min("max", *a))
handles("min")(lambda *a: _max_min("min", *a))

__all__ = ["count", "finish", "logsumexp", "mean", "reduced_dims", "variance"]
