"""Lowering handlers for PyTorch's composite pointwise ops (activations, clamps, lerp, masked_fill...), written
out as the IR's primitive elementwise ops in the order eager's CPU kernels compute them.

Imported by ``kernelgen.lowering`` (which owns the handler table); each handler is named after the torch
function or ATen op it lowers. Float-only activations of integer tensors are left to eager (it decides).
"""

from __future__ import annotations

from typing import Any

from kernelgen.errors import UnsupportedOpError
from kernelgen.lowering import _arg, _cast_to, _clamp, _float_result, _handles, _is_node, _operand


def _x(args: tuple, kwargs: dict, name: str, meta: Any, where: str) -> int:
    x = _arg(args, kwargs, 0, "input")
    if not _is_node(x):
        raise UnsupportedOpError(f"{name} of a Python number at `{where}`")
    _float_result(name, meta, where)
    return int(x)


def _const(b: Any, value: float, like: int) -> int:
    return b.scalar_or_node(float(value), like)


@_handles("clamp_min")
def _clamp_min(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    return _clamp(b, (args[0], _arg(args, kwargs, 1, "min"), None), {}, meta, where)


@_handles("clamp_max")
def _clamp_max(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    return _clamp(b, (args[0], None, _arg(args, kwargs, 1, "max")), {}, meta, where)


@_handles("hardtanh")
def _hardtanh(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    lo, hi = _arg(args, kwargs, 1, "min_val", -1.0), _arg(args, kwargs, 2, "max_val", 1.0)
    return _bounded(b, args, kwargs, "hardtanh", lo, hi, meta, where)


@_handles("relu6")
def _relu6(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    return _bounded(b, args[:1], {}, "relu6", 0.0, 6.0, meta, where)


def _bounded(b: Any, args: tuple, kwargs: dict, name: str, lo: float, hi: float, meta: Any, where: str) -> int:
    """clamp(x, lo, hi) in x's dtype: an integer tensor's bounds are truncated into it, as eager converts them."""
    x = _arg(args, kwargs, 0, "input")
    dtype = b.spec(int(x)).dtype if _is_node(x) else None
    if dtype is None or dtype == "bool" or (dtype == "uint8" and min(lo, hi) < 0):
        raise UnsupportedOpError(f"{name} of {dtype or 'a Python number'} at `{where}`; eager PyTorch runs it")
    if dtype.startswith("float") or dtype == "bfloat16":
        return _clamp(b, (int(x), lo, hi), {}, meta, where)
    low = b.elementwise("maximum", (int(x), b.const(int(lo), dtype)))
    return b.elementwise("minimum", (low, b.const(int(hi), dtype)))


def _relu6_clamp(b: Any, x: int) -> int:
    """min(max(x + 3, 0), 6): hardsigmoid's and hardswish's shared part (max/min propagate NaN, as eager)."""
    shifted = b.elementwise("add", (x, _const(b, 3.0, x)))
    return b.elementwise("minimum", (b.elementwise("maximum", (shifted, _const(b, 0.0, x))), _const(b, 6.0, x)))


@_handles("hardsigmoid")
def _hardsigmoid(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = _x(args, kwargs, "hardsigmoid", meta, where)
    return b.elementwise("div", (_relu6_clamp(b, x), _const(b, 6.0, x)))


@_handles("hardswish")
def _hardswish(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = _x(args, kwargs, "hardswish", meta, where)
    return b.elementwise("div", (b.elementwise("mul", (x, _relu6_clamp(b, x))), _const(b, 6.0, x)))


@_handles("leaky_relu")
def _leaky_relu(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = _x(args, kwargs, "leaky_relu", meta, where)
    slope = float(_arg(args, kwargs, 1, "negative_slope", 0.01))
    positive = b.elementwise("gt", (x, _const(b, 0.0, x)))  # NaN > 0 is false: NaN * slope is NaN
    return b.elementwise("where", (positive, x, b.elementwise("mul", (x, _const(b, slope, x)))))


@_handles("elu")
def _elu(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = _x(args, kwargs, "elu", meta, where)
    alpha = float(_arg(args, kwargs, 1, "alpha", 1.0))
    negative = b.elementwise("le", (x, _const(b, 0.0, x)))
    em1 = b.elementwise("expm1", (x,))
    scaled = b.elementwise("mul", (em1, _const(b, alpha, x))) if alpha != 1 else em1
    return b.elementwise("where", (negative, scaled, x))


@_handles("softplus")
def _softplus(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = _x(args, kwargs, "softplus", meta, where)
    beta = float(_arg(args, kwargs, 1, "beta", 1.0))
    threshold = float(_arg(args, kwargs, 2, "threshold", 20.0))
    z = b.elementwise("mul", (x, _const(b, beta, x))) if beta != 1 else x
    soft = b.elementwise("log1p", (b.elementwise("exp", (z,)),))
    if beta != 1:
        soft = b.elementwise("div", (soft, _const(b, beta, x)))
    return b.elementwise("where", (b.elementwise("gt", (z, _const(b, threshold, x))), x, soft))


@_handles("mish")
def _mish(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = _x(args, kwargs, "mish", meta, where)
    soft = b.elementwise("log1p", (b.elementwise("exp", (x,)),))
    return b.elementwise("mul", (x, b.elementwise("tanh", (soft,))))


@_handles("logit")
def _logit(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = _cast_to(b, _x(args, kwargs, "logit", meta, where), meta.dtype)  # an integer x is clamped as a float
    eps = _arg(args, kwargs, 1, "eps")
    if eps is not None:  # eager converts eps to x's dtype and computes 1 - eps in it (float16: 0.990234375)
        lo = _in_dtype(float(eps), b.spec(x).dtype)
        x = _clamp(b, (x, lo, _in_dtype(1.0 - lo, b.spec(x).dtype)), {}, meta, where)
    return b.elementwise("log", (b.elementwise("div", (x, b.elementwise("sub", (_const(b, 1.0, x), x)))),))


def _in_dtype(value: float, dtype: str) -> float:
    """``value`` rounded to ``dtype`` as torch rounds a Python float stored in a tensor of that dtype."""
    import torch

    return float(torch.tensor(value, dtype=getattr(torch, dtype)).item())


@_handles("frac")
def _frac(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = _x(args, kwargs, "frac", meta, where)  # frac(inf) = inf - inf = NaN, as eager
    return b.elementwise("sub", (x, b.elementwise("trunc", (x,))))


@_handles("lerp")
def _lerp(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """eager's lerp: a + w (b - a) for |w| < 0.5, else b - (b - a)(1 - w) (exact at w = 1)."""
    start, end, weight = (_arg(args, kwargs, k, n) for k, n in enumerate(("input", "end", "weight")))
    if not (_is_node(start) and _is_node(end)):
        raise UnsupportedOpError(f"lerp of Python numbers at `{where}`")
    _float_result("lerp", meta, where)
    a, e = int(start), int(end)
    w = _operand(b, weight, a)
    diff = b.elementwise("sub", (e, a))
    small = b.elementwise("add", (a, b.elementwise("mul", (w, diff))))
    large = b.elementwise("sub", (e, b.elementwise("mul", (diff, b.elementwise("sub", (_const(b, 1.0, a), w))))))
    if not _is_node(weight):
        return small if abs(float(weight)) < 0.5 else large
    is_small = b.elementwise("lt", (b.elementwise("abs", (w,)), _const(b, 0.5, a)))
    return b.elementwise("where", (is_small, small, large))


@_handles("masked_fill")
def _masked_fill(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x, mask, value = (_arg(args, kwargs, k, n) for k, n in enumerate(("input", "mask", "value")))
    if not (_is_node(x) and _is_node(mask)):
        raise UnsupportedOpError(f"masked_fill of a Python number at `{where}`")
    dtype = b.spec(int(x)).dtype
    fill = int(value) if _is_node(value) else b.const(value, dtype)  # the value converts to x's dtype, as eager
    return b.elementwise("where", (int(mask), fill, int(x)), dtype)


__all__: list[str] = []
