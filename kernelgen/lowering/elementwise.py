"""Rules for elementwise ops: arithmetic and comparisons (``binary``), math functions (``unary``), clamps,
``where``, casts and identities. ``binary`` and ``clamp`` are shared with the reduction and pointwise rules."""

from __future__ import annotations

from typing import Any

from kernelgen.errors import UnsupportedOpError
from kernelgen.lowering.rules import (Handler, arg, cast_to, float_result, handles, is_float_dtype, is_node, operand,
                                      ref)

# -------------------------------------------------------------------------------------- elementwise

def binary(op: str) -> Handler:
    def handler(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
        x, y = arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "other")
        if not is_node(x) and not is_node(y):
            raise UnsupportedOpError(f"{op} of two Python numbers at `{where}`")
        if op == "div" and kwargs.get("rounding_mode") is not None:
            return _rounded_div(b, x, y, kwargs["rounding_mode"], meta, where)
        if op in _DIVISIONS and meta is not None and not is_float_dtype(meta.dtype) and is_node(y):
            raise UnsupportedOpError(f"integer {op} by a tensor at `{where}`: eager raises ZeroDivisionError for a "
                                     "zero divisor, which a kernel cannot, so this graph runs eagerly (divide by a "
                                     "number)")
        if op == "pow" and is_node(x) and isinstance(y, int) and y < 0 and not is_float_dtype(b.spec(int(x)).dtype):
            raise UnsupportedOpError(f"integer tensor to the negative power {y} at `{where}` (eager raises for it)")
        like = x if is_node(x) else y
        a, c = operand(b, x, like), operand(b, y, like)
        alpha = kwargs.get("alpha", 1)
        if op in ("add", "sub") and alpha != 1:
            c = b.elementwise("mul", (c, b.scalar_or_node(alpha, c)))
        dtype = meta.dtype if meta is not None else None
        return b.elementwise(op, (a, c), dtype)

    return handler


for _op, _names in {
    "add": ("add", "__add__", "__radd__"), "sub": ("sub", "subtract", "__sub__"), "mul": ("mul", "multiply"),
    "div": ("div", "divide", "true_divide"), "pow": ("pow",), "maximum": ("maximum",), "minimum": ("minimum",),
    "eq": ("eq",), "ne": ("ne",), "lt": ("lt",), "le": ("le",), "gt": ("gt",), "ge": ("ge",),
    "logical_and": ("logical_and",), "logical_or": ("logical_or",), "logical_xor": ("logical_xor",),
    "atan2": ("atan2", "arctan2"), "bitwise_and": ("bitwise_and", "__and__"), "bitwise_or": ("bitwise_or", "__or__"),
    "bitwise_xor": ("bitwise_xor", "__xor__"), "bitwise_left_shift": ("bitwise_left_shift", "__lshift__"),
    "bitwise_right_shift": ("bitwise_right_shift", "__rshift__"), "fmod": ("fmod",),
    "remainder": ("remainder", "__mod__"), "floor_divide": ("floor_divide", "__floordiv__"),
}.items():
    handles(*_names)(binary(_op))

_DIVISIONS = frozenset({"floor_divide", "remainder", "fmod"})


def _rounded_div(b: Any, x: Any, y: Any, mode: str, meta: Any, where: str) -> int:
    """div(rounding_mode=...): "floor" is floor_divide; "trunc" truncates the true quotient of floats, and of
    integers is floor_divide of a - fmod(a, b), an exact multiple of b (no overflow: it moves toward zero)."""
    if mode not in ("floor", "trunc"):
        raise UnsupportedOpError(f"div(rounding_mode={mode!r}) at `{where}`; use None, 'trunc' or 'floor'")
    if mode == "floor":
        return binary("floor_divide")(b, (x, y), {}, meta, where)
    if meta is not None and is_float_dtype(meta.dtype):
        quotient = binary("div")(b, (x, y), {}, meta, where)
        if meta.dtype in ("float16", "bfloat16"):  # eager truncates the quotient rounded to the dtype (17.96 -> 18)
            quotient = b.elementwise("cast", (quotient,), meta.dtype)
        return b.elementwise("trunc", (quotient,), meta.dtype)
    exact = binary("sub")(b, (x, ref(binary("fmod")(b, (x, y), {}, meta, where))), {}, meta, where)
    return binary("floor_divide")(b, (ref(exact), y), {}, meta, where)


@handles("rsub")
def _rsub(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    alpha = arg(args, kwargs, 2, "alpha", 1)  # rsub(x, y, alpha) = y - alpha * x
    return binary("sub")(b, (arg(args, kwargs, 1, "other"), args[0]), {"alpha": alpha}, meta, where)




_FLOAT_MATH = frozenset({"exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "silu", "gelu", "reciprocal",
                         "expm1", "log1p", "log2", "log10", "exp2", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
                         "cosh", "asinh", "acosh", "atanh"})


def _unary(op: str, **attrs: Any) -> Handler:
    def handler(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
        x = arg(args, kwargs, 0, "input")
        if not is_node(x):
            raise UnsupportedOpError(f"{op} of a Python number at `{where}`")
        if op in _FLOAT_MATH:
            float_result(op, meta, where)
        dtype = meta.dtype if meta is not None else None
        x = int(x)
        if op in ("isnan", "isinf", "isfinite") and b.spec(x).dtype in ("float16", "bfloat16") \
                and b.nodes[x].op not in ("input", "const"):
            # the IR holds a float16 intermediate unrounded; eager tests the stored value (exp(12) is inf in float16)
            x = b.elementwise("cast", (x,), b.spec(x).dtype)
        return b.elementwise(op, (x,), dtype, **attrs)

    return handler


for _op in ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "relu", "silu", "reciprocal",
            "expm1", "log1p", "log2", "log10", "exp2", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
            "asinh", "acosh", "atanh", "floor", "ceil", "trunc", "sign", "isnan", "isinf", "isfinite", "logical_not",
            "bitwise_not"):
    handles(_op)(_unary(_op))
for _alias, _op in {"negative": "neg", "absolute": "abs", "special_erf": "erf", "special_expm1": "expm1",
                    "special_log1p": "log1p", "special_exp2": "exp2", "arcsin": "asin", "arccos": "acos",
                    "arctan": "atan", "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh", "fix": "trunc",
                    "sgn": "sign", "__invert__": "bitwise_not", "special_expit": "sigmoid"}.items():
    handles(_alias)(_unary(_op))


@handles("round")
def _round(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    if kwargs.get("decimals", 0) != 0:
        raise UnsupportedOpError(f"round(decimals={kwargs['decimals']}) at `{where}`; only decimals=0 is lowered")
    return _unary("round")(b, args[:1], {}, meta, where)


@handles("gelu")
def _gelu(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    approximate = arg(args, kwargs, 1, "approximate", "none")
    if approximate not in ("none", "tanh"):
        raise UnsupportedOpError(f"gelu(approximate={approximate!r}) at `{where}`; use 'none' or 'tanh'")
    return _unary("gelu", approximate=approximate)(b, args[:1], {}, meta, where)


@handles("square")
def _square(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = int(args[0])
    if meta is not None:  # square(bool) is int64 in eager (it is pow(x, 2))
        x = cast_to(b, x, meta.dtype)
    return b.elementwise("mul", (x, x))


@handles("clamp", "clip")
def clamp(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = int(args[0])
    lo, hi = arg(args, kwargs, 1, "min"), arg(args, kwargs, 2, "max")
    if lo is not None:
        x = b.elementwise("maximum", (x, operand(b, lo, x)))
    if hi is not None:
        x = b.elementwise("minimum", (x, operand(b, hi, x)))
    return x


@handles("where")
def _where(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    cond, x, y = (arg(args, kwargs, i, n) for i, n in enumerate(("condition", "input", "other")))
    if not is_node(cond):
        raise UnsupportedOpError(f"where() with a Python condition at `{where}`")
    like = x if is_node(x) else (y if is_node(y) else cond)
    dtype = meta.dtype if meta is not None else None
    return b.elementwise("where", (int(cond), operand(b, x, like), operand(b, y, like)), dtype)


@handles("Tensor.where")
def _tensor_where(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x, cond, other = (arg(args, kwargs, i, n) for i, n in enumerate(("self", "condition", "other")))
    return _where(b, (cond, x, other), {}, meta, where)




@handles("to", "type", "float", "half", "bfloat16", "double", "type_as")
def _cast(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    if meta is None:
        raise UnsupportedOpError(f"cannot tell the result dtype of `{where}`")
    if kwargs.get("device") is not None or any(isinstance(a, str) for a in args[1:]):
        raise UnsupportedOpError(f"device move at `{where}`; move tensors outside the compiled function")
    return cast_to(b, int(args[0]), meta.dtype)


@handles("contiguous", "clone", "detach")
def _identity(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    return int(args[0])
