"""Lowering handlers for PyTorch's composite pointwise ops (activations, clamps, lerp, masked_fill...), written
out as the IR's primitive elementwise ops in the order eager's CPU kernels compute them.

Registered in the table of ``kernelgen.lowering.rules``; each handler is named after the torch
function or ATen op it lowers. Float-only activations of integer tensors are left to eager (it decides).
"""

from __future__ import annotations

import math
from typing import Any

from kernelgen.errors import UnsupportedOpError
from kernelgen.lowering.elementwise import clamp
from kernelgen.lowering.rules import arg, cast_to, float_result, handles, is_node, operand


def _x(args: tuple, kwargs: dict, name: str, meta: Any, where: str) -> int:
    x = arg(args, kwargs, 0, "input")
    if not is_node(x):
        raise UnsupportedOpError(f"{name} of a Python number at `{where}`")
    float_result(name, meta, where)
    return int(x)


def _const(b: Any, value: float, like: int) -> int:
    return b.scalar_or_node(float(value), like)


@handles("clamp_min")
def _clamp_min(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    return clamp(b, (args[0], arg(args, kwargs, 1, "min"), None), {}, meta, where)


@handles("clamp_max")
def _clamp_max(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    return clamp(b, (args[0], None, arg(args, kwargs, 1, "max")), {}, meta, where)


@handles("hardtanh")
def _hardtanh(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    lo, hi = arg(args, kwargs, 1, "min_val", -1.0), arg(args, kwargs, 2, "max_val", 1.0)
    return _bounded(b, args, kwargs, "hardtanh", lo, hi, meta, where)


@handles("relu6")
def _relu6(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    return _bounded(b, args[:1], {}, "relu6", 0.0, 6.0, meta, where)


def _bounded(b: Any, args: tuple, kwargs: dict, name: str, lo: float, hi: float, meta: Any, where: str) -> int:
    """clamp(x, lo, hi) in x's dtype: an integer tensor's bounds are truncated into it, as eager converts them."""
    x = arg(args, kwargs, 0, "input")
    dtype = b.spec(int(x)).dtype if is_node(x) else None
    if dtype is None or dtype == "bool" or (dtype == "uint8" and min(lo, hi) < 0):
        raise UnsupportedOpError(f"{name} of {dtype or 'a Python number'} at `{where}`; eager PyTorch runs it")
    if dtype.startswith("float") or dtype == "bfloat16":
        return clamp(b, (int(x), lo, hi), {}, meta, where)
    low = b.elementwise("maximum", (int(x), b.const(int(lo), dtype)))
    return b.elementwise("minimum", (low, b.const(int(hi), dtype)))


def _relu6_clamp(b: Any, x: int) -> int:
    """min(max(x + 3, 0), 6): hardsigmoid's and hardswish's shared part (max/min propagate NaN, as eager)."""
    shifted = b.elementwise("add", (x, _const(b, 3.0, x)))
    return b.elementwise("minimum", (b.elementwise("maximum", (shifted, _const(b, 0.0, x))), _const(b, 6.0, x)))


@handles("hardsigmoid")
def _hardsigmoid(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = _x(args, kwargs, "hardsigmoid", meta, where)
    return b.elementwise("div", (_relu6_clamp(b, x), _const(b, 6.0, x)))


@handles("hardswish")
def _hardswish(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = _x(args, kwargs, "hardswish", meta, where)
    return b.elementwise("div", (b.elementwise("mul", (x, _relu6_clamp(b, x))), _const(b, 6.0, x)))


@handles("leaky_relu")
def _leaky_relu(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = _x(args, kwargs, "leaky_relu", meta, where)
    slope = float(arg(args, kwargs, 1, "negative_slope", 0.01))
    positive = b.elementwise("gt", (x, _const(b, 0.0, x)))  # NaN > 0 is false: NaN * slope is NaN
    return b.elementwise("where", (positive, x, b.elementwise("mul", (x, _const(b, slope, x)))))


@handles("elu")
def _elu(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = _x(args, kwargs, "elu", meta, where)
    alpha = float(arg(args, kwargs, 1, "alpha", 1.0))
    negative = b.elementwise("le", (x, _const(b, 0.0, x)))
    em1 = b.elementwise("expm1", (x,))
    scaled = b.elementwise("mul", (em1, _const(b, alpha, x))) if alpha != 1 else em1
    return b.elementwise("where", (negative, scaled, x))


@handles("softplus")
def _softplus(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = _x(args, kwargs, "softplus", meta, where)
    beta = float(arg(args, kwargs, 1, "beta", 1.0))
    threshold = float(arg(args, kwargs, 2, "threshold", 20.0))
    z = b.elementwise("mul", (x, _const(b, beta, x))) if beta != 1 else x
    soft = b.elementwise("log1p", (b.elementwise("exp", (z,)),))
    if beta != 1:
        soft = b.elementwise("div", (soft, _const(b, beta, x)))
    return b.elementwise("where", (b.elementwise("gt", (z, _const(b, threshold, x))), x, soft))


@handles("mish")
def _mish(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = _x(args, kwargs, "mish", meta, where)
    soft = b.elementwise("log1p", (b.elementwise("exp", (x,)),))
    return b.elementwise("mul", (x, b.elementwise("tanh", (soft,))))


@handles("logit")
def _logit(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = cast_to(b, _x(args, kwargs, "logit", meta, where), meta.dtype)  # an integer x is clamped as a float
    eps = arg(args, kwargs, 1, "eps")
    if eps is not None:  # eager converts eps to x's dtype and computes 1 - eps in it (float16: 0.990234375)
        lo = _in_dtype(float(eps), b.spec(x).dtype)
        x = clamp(b, (x, lo, _in_dtype(1.0 - lo, b.spec(x).dtype)), {}, meta, where)
    return b.elementwise("log", (b.elementwise("div", (x, b.elementwise("sub", (_const(b, 1.0, x), x)))),))


def _in_dtype(value: float, dtype: str) -> float:
    """``value`` rounded to ``dtype`` as torch rounds a Python float stored in a tensor of that dtype."""
    import torch

    return float(torch.tensor(value, dtype=getattr(torch, dtype)).item())


@handles("frac")
def _frac(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = _x(args, kwargs, "frac", meta, where)  # frac(inf) = inf - inf = NaN, as eager
    return b.elementwise("sub", (x, b.elementwise("trunc", (x,))))


@handles("lerp")
def _lerp(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """eager's lerp: a + w (b - a) for |w| < 0.5, else b - (b - a)(1 - w) (exact at w = 1)."""
    start, end, weight = (arg(args, kwargs, k, n) for k, n in enumerate(("input", "end", "weight")))
    if not (is_node(start) and is_node(end)):
        raise UnsupportedOpError(f"lerp of Python numbers at `{where}`")
    float_result("lerp", meta, where)
    a, e = int(start), int(end)
    w = operand(b, weight, a)
    diff = b.elementwise("sub", (e, a))
    small = b.elementwise("add", (a, b.elementwise("mul", (w, diff))))
    large = b.elementwise("sub", (e, b.elementwise("mul", (diff, b.elementwise("sub", (_const(b, 1.0, a), w))))))
    if not is_node(weight):
        return small if abs(float(weight)) < 0.5 else large
    is_small = b.elementwise("lt", (b.elementwise("abs", (w,)), _const(b, 0.5, a)))
    return b.elementwise("where", (is_small, small, large))


@handles("masked_fill")
def _masked_fill(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x, mask, value = (arg(args, kwargs, k, n) for k, n in enumerate(("input", "mask", "value")))
    if not (is_node(x) and is_node(mask)):
        raise UnsupportedOpError(f"masked_fill of a Python number at `{where}`")
    dtype = b.spec(int(x)).dtype
    fill = int(value) if is_node(value) else b.const(value, dtype)  # the value converts to x's dtype, as eager
    return b.elementwise("where", (int(mask), fill, int(x)), dtype)


__all__: list[str] = []


def _selu_celu(name: str, b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """eager's elu kernel: x <= 0 ? expm1(x * input_scale) * (alpha * scale) : x * scale."""
    x = _x(args, kwargs, name, meta, where)
    if name == "celu":
        alpha = float(arg(args, kwargs, 1, "alpha", 1.0))
        scale, input_scale = 1.0, 1.0 / alpha
    else:
        alpha, scale, input_scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946, 1.0
    z = b.elementwise("mul", (x, _const(b, input_scale, x))) if input_scale != 1 else x
    negative = b.elementwise("mul", (b.elementwise("expm1", (z,)), _const(b, alpha * scale, x)))
    positive = b.elementwise("mul", (x, _const(b, scale, x))) if scale != 1 else x
    return b.elementwise("where", (b.elementwise("le", (x, _const(b, 0.0, x))), negative, positive))


handles("selu")(lambda *a: _selu_celu("selu", *a))
handles("celu")(lambda *a: _selu_celu("celu", *a))


@handles("softsign")
def _softsign(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = _x(args, kwargs, "softsign", meta, where)  # F.softsign: x / (|x| + 1), the + 1 in x's dtype (int8 wraps)
    return b.elementwise("div", (x, b.elementwise("add", (b.elementwise("abs", (x,)), b.scalar_or_node(1, x)))),
                         meta.dtype)


@handles("tanhshrink")
def _tanhshrink(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = _x(args, kwargs, "tanhshrink", meta, where)
    return b.elementwise("sub", (x, b.elementwise("tanh", (x,))))


@handles("threshold", "_threshold")  # F.threshold is F._threshold
def _threshold(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """eager: x <= threshold ? value : x (so NaN passes through)."""
    x = _x(args, kwargs, "threshold", meta, where)
    th, value = arg(args, kwargs, 1, "threshold"), arg(args, kwargs, 2, "value")
    if is_node(th) or is_node(value):
        raise UnsupportedOpError(f"threshold with tensor bounds at `{where}`")
    below = b.elementwise("le", (x, _const(b, th, x)))
    return b.elementwise("where", (below, _const(b, value, x), x))


def _scaled(name: str, factor: float) -> Any:
    def handler(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
        x = _x(args, kwargs, name, meta, where)
        return b.elementwise("mul", (x, _const(b, factor, x)))

    return handler


handles("rad2deg")(_scaled("rad2deg", 180.0 / math.pi))
handles("deg2rad")(_scaled("deg2rad", math.pi / 180.0))


@handles("log_sigmoid", "logsigmoid")
def _log_sigmoid(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """eager: min(x, 0) - log1p(exp(-|x|)), stable for both signs."""
    x = _x(args, kwargs, "log_sigmoid", meta, where)
    tail = b.elementwise("log1p", (b.elementwise("exp", (b.elementwise("neg", (b.elementwise("abs", (x,)),)),)),))
    return b.elementwise("sub", (b.elementwise("minimum", (x, _const(b, 0.0, x))), tail))


@handles("nan_to_num")
def _nan_to_num(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    import torch

    x = arg(args, kwargs, 0, "input")
    if not is_node(x):
        raise UnsupportedOpError(f"nan_to_num of a Python number at `{where}`")
    x = int(x)
    dtype = b.spec(x).dtype
    if not (dtype.startswith("float") or dtype == "bfloat16"):
        return x  # integers have no NaN or infinity
    big = torch.finfo(getattr(torch, dtype)).max
    nan, pos, neg = (arg(args, kwargs, k, n) for k, n in ((1, "nan"), (2, "posinf"), (3, "neginf")))
    fills = (0.0 if nan is None else nan, big if pos is None else pos, -big if neg is None else neg)
    inf = b.const(math.inf, dtype)
    out = b.elementwise("where", (b.elementwise("eq", (x, b.elementwise("neg", (inf,)))), b.const(fills[2], dtype), x))
    out = b.elementwise("where", (b.elementwise("eq", (x, inf)), b.const(fills[1], dtype), out))
    return b.elementwise("where", (b.elementwise("isnan", (x,)), b.const(fills[0], dtype), out))


@handles("xlogy", "special_xlogy")
def _xlogy(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """eager: NaN where y is NaN, else 0 where x == 0, else x * log(y)."""
    x, y = arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "other")
    if meta is None or not (is_node(x) or is_node(y)):
        raise UnsupportedOpError(f"xlogy of Python numbers at `{where}`")
    float_result("xlogy", meta, where)
    like = x if is_node(x) else y
    a, c = cast_to(b, operand(b, x, like), meta.dtype), cast_to(b, operand(b, y, like), meta.dtype)
    value = b.elementwise("mul", (a, b.elementwise("log", (c,))))
    value = b.elementwise("where", (b.elementwise("eq", (a, b.const(0.0, meta.dtype))), b.const(0.0, meta.dtype), value))
    return b.elementwise("where", (b.elementwise("isnan", (c,)), b.const(math.nan, meta.dtype), value))


def _fmax_fmin(op: str, b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """maximum/minimum that ignore a NaN operand (NaN only when both are)."""
    x, y = arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "other")
    if meta is None or not (is_node(x) and is_node(y)):
        raise UnsupportedOpError(f"fmax/fmin needs two tensors at `{where}`")
    a, c = cast_to(b, int(x), meta.dtype), cast_to(b, int(y), meta.dtype)
    value = b.elementwise(op, (a, c))
    if not (meta.dtype.startswith("float") or meta.dtype == "bfloat16"):
        return value
    value = b.elementwise("where", (b.elementwise("isnan", (c,)), a, value))
    return b.elementwise("where", (b.elementwise("isnan", (a,)), c, value))


handles("fmax")(lambda *a: _fmax_fmin("maximum", *a))
handles("fmin")(lambda *a: _fmax_fmin("minimum", *a))


@handles("heaviside")
def _heaviside(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """eager: values where x == 0, else x > 0 in x's dtype (NaN gives 0)."""
    x, values = arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "values")
    if meta is None or not (is_node(x) and is_node(values)):
        raise UnsupportedOpError(f"heaviside needs two tensors at `{where}`")
    x, values = cast_to(b, int(x), meta.dtype), cast_to(b, int(values), meta.dtype)
    step = b.elementwise("cast", (b.elementwise("gt", (x, b.const(0, meta.dtype))),), meta.dtype)
    return b.elementwise("where", (b.elementwise("eq", (x, b.const(0, meta.dtype))), values, step))


@handles("positive")
def _positive(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    return int(args[0])


@handles("prims.fma")
def _fma(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """Inductor's ``prims.fma(a, b, c)`` (its softmax backward): eager computes ``a * b + c`` with the product
    rounded, so the IR's mul then add is eager's value (the C++ compiler may still contract it, as for any
    written-out ``a * b + c``)."""
    x, y, z = (arg(args, kwargs, k, n) for k, n in enumerate(("a", "b", "c")))
    like = next((v for v in (x, y, z) if is_node(v)), None)
    if like is None:
        raise UnsupportedOpError(f"fma of Python numbers at `{where}`")
    product = b.elementwise("mul", (operand(b, x, like), operand(b, y, like)))
    return b.elementwise("add", (product, operand(b, z, like)), meta.dtype if meta is not None else None)

