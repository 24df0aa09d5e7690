"""Lowering rules for ATen ``OpOverload`` targets (what Dynamo + AOTAutograd graphs call).

An overload is lowered by the same handler table as a traced torch function (``kernelgen.lowering.rules``):
``aten.add.Tensor`` goes to the ``add`` handler, ``aten._softmax.default`` to ``_softmax`` and so on,
named after the overload packet. Where ATen's argument conventions differ from the torch function's
(``_to_copy`` takes keyword dtypes, ``native_layer_norm`` and ``var_mean`` return several values,
``_softmax`` has no ``dtype=``), an aten-only handler is registered here under ``aten.<packet>`` and wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kernelgen.errors import UnsupportedOpError
from kernelgen.ir.values import TensorSpec
from kernelgen.lowering import reduction
from kernelgen.lowering.rules import REFUSED, RULES, Handler, Refused, arg, cast_to, handles, is_node, operand, ref


def aten_name(target: Any) -> str:
    """The handler name for an ATen overload: ``aten.<packet>`` when an aten-only rule exists, else the packet
    name shared with the torch function (``add``); the qualified overload name when nothing handles it."""
    packet = target.overloadpacket.__name__
    namespace = target.namespace
    for name in (f"{namespace}.{packet}", packet if namespace in ("aten", "prims") else None):
        if name is not None and (name in RULES or name in REFUSED):
            return name
    return f"{namespace}.{packet}.{target._overloadname}"


# ------------------------------------------------------------------------------------- copies and moves
# (view ops never reach the lowering: the partitioner leaves them to ATen and regions read them by strides)

@handles("aten.alias", "aten.clone", "aten.lift_fresh_copy")
def _alias(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    # The value is the input's; the layout (clone(memory_format=...)) is the region output's strides.
    return int(args[0])


@handles("aten._to_copy", "prims.convert_element_type", "aten.convert_element_type")
def _to_copy(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    # A device move has a result on another device than its input: the partitioner keeps it out of regions.
    if meta is None:
        raise UnsupportedOpError(f"cannot tell the result dtype of `{where}`")
    return cast_to(b, int(args[0]), meta.dtype)


# ------------------------------------------------------------------------------------------ constants

def _const_of(b: Any, value: Any, meta: Any, where: str) -> int:
    if meta is None or not isinstance(value, (bool, int, float)):
        raise UnsupportedOpError(f"constant {value!r} at `{where}` is not a number of a known dtype")
    node = b.const(value, meta.dtype)
    if tuple(meta.shape) == ():
        return node
    return b.add("cast", (node,), TensorSpec(tuple(meta.shape), meta.dtype))


# The value is the fill; shape and dtype are the node's meta. full / scalar_tensor / zeros / ones read no
# tensor: a region folds them in (kernelgen.frontend.partition), and its eager replay makes them as new_full of
# one of its inputs (kernelgen.frontend.region_op), which fx retraces as a value of the region's inputs.
handles("aten.zeros_like", "aten.zeros", "aten.new_zeros")(lambda b, args, kwargs, meta, where: _const_of(b, 0, meta, where))
handles("aten.ones_like", "aten.ones", "aten.new_ones")(lambda b, args, kwargs, meta, where: _const_of(b, 1, meta, where))
handles("aten.full_like", "aten.full")(lambda b, args, kwargs, meta, where: _const_of(b, args[1], meta, where))
handles("aten.scalar_tensor")(lambda b, args, kwargs, meta, where: _const_of(b, args[0], meta, where))
handles("aten.new_full")(lambda b, args, kwargs, meta, where: _const_of(b, args[2], meta, where))


# ------------------------------------------------------------------------------------ composite ops

def _clamp_side(op: str) -> Handler:
    def handler(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
        x = int(args[0])
        return b.elementwise(op, (x, operand(b, args[1], x)), meta.dtype if meta is not None else None)

    return handler


handles("aten.clamp_min")(_clamp_side("maximum"))
handles("aten.clamp_max")(_clamp_side("minimum"))


def _softmax(name: str) -> Handler:
    # _softmax(x, dim, half_to_float): the torch function without its dtype= keyword
    return lambda b, args, kwargs, meta, where: RULES[name](b, (args[0], args[1]), {}, meta, where)


handles("aten._softmax")(_softmax("softmax"))
handles("aten._log_softmax")(_softmax("log_softmax"))


@handles("aten.native_layer_norm")
def _native_layer_norm(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> tuple:
    """(y, mean, rstd) with mean/rstd kept as [..., 1] rows, as ATen returns them: float math in float32 for
    bfloat16/float16 inputs (eager's CPU kernel computes in float and returns all three in the input's dtype). The
    backend keeps this op whole (``kernelgen.frontend.decompositions``) so that its rows of overflowing values are
    NaN as in eager (``reduction.overflow_is_nan``)."""
    x, shape, weight, bias, eps = args
    dtype = b.spec(int(x)).dtype
    if len(shape) != 1 or dtype not in ("float32", "float64", "bfloat16", "float16"):
        raise UnsupportedOpError(f"native_layer_norm over {list(shape)} of {dtype} at `{where}`")
    math_dtype = "float64" if dtype == "float64" else "float32"
    x = int(x)
    x = cast_to(b, x, math_dtype)
    n = b.spec(x).shape[-1]
    mean = b.elementwise("mul", (b.reduce("sum", x), b.scalar_or_node(1.0 / n, x)))
    centered = b.elementwise("sub", (x, mean))
    var = b.elementwise("mul", (b.reduce("sum", b.elementwise("mul", (centered, centered))),
                                b.scalar_or_node(1.0 / n, x)))
    rstd = b.elementwise("rsqrt", (b.elementwise("add", (var, b.scalar_or_node(float(eps), x))),))
    rstd = reduction.overflow_is_nan(b, x, rstd, (b.spec(x).rank - 1,))
    y = b.elementwise("mul", (centered, rstd))
    if is_node(weight):
        y = b.elementwise("mul", (y, cast_to(b, int(weight), math_dtype)))
    if is_node(bias):
        y = b.elementwise("add", (y, cast_to(b, int(bias), math_dtype)))
    return tuple(ref(cast_to(b, v, dtype)) for v in (y, mean, rstd))


def _moments(name: str) -> Handler:
    """(var or std, mean) over any dims (Inductor's layer_norm and batch_norm decompositions): the
    ``.correction`` overload takes ``correction`` and ``keepdim`` by keyword only, where the torch function
    has ``unbiased`` third."""

    def handler(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> tuple:
        keywords = {"correction": kwargs.get("correction"), "keepdim": bool(kwargs.get("keepdim", False))}
        return RULES[name](b, (args[0], arg(args, kwargs, 1, "dim")), keywords, meta, where)

    return handler


handles("aten.var_mean")(_moments("var_mean"))
handles("aten.std_mean")(_moments("std_mean"))


@dataclass(frozen=True)
class FusedAttention:
    """Where one of ATen's fused attention ops (what ``scaled_dot_product_attention`` becomes on each device) keeps
    its arguments, how many outputs it has, and whether its ``logsumexp`` is the statistic kernelgen computes
    (``attention_lse``: [B, H, Tq] in float32, float64 for float64 inputs, natural log of the scaled, masked row
    sums, 0 on a row whose keys are all hidden; what the CPU flash backward and the attention backward template
    read). ``lse`` is None when it is, else why it is not: then the op's statistics (and philox seed/offset,
    sequence offsets, debug mask) are refused, a training forward, whose backward reads them, keeps the ATen op
    whole, and so does its backward (``backward`` names it)."""

    outputs: int
    dropout: int  # position of dropout_p
    causal: int  # position of is_causal
    mask: tuple[int | None, str] | None = None  # (position or None: keyword-only, keyword) of the mask / attn_bias
    debug: int | None = None  # position of return_debug_mask
    lse: str | None = None
    backward: str = ""


# The GPU ops' statistics are not ours: cuDNN's is [B, H, Tq, 1]; the memory-efficient kernel pads the query
# dim to a multiple of 32; FlashAttention's has our shape, but its value on a row with no visible key and the
# philox state beside it were never checked on a GPU against ours. Lowering one would need that check (and the
# backward ops would then read the template's statistic): until then ATen's forward and backward run in training.
_UNCHECKED = "on a GPU against kernelgen's attention_lse"
FUSED_ATTENTION = {
    "_scaled_dot_product_flash_attention_for_cpu": FusedAttention(2, 3, 4, mask=(None, "attn_mask")),
    "_scaled_dot_product_flash_attention": FusedAttention(
        9, 3, 4, debug=5, backward="_scaled_dot_product_flash_attention_backward",
        lse=f"FlashAttention's logsumexp ([B, H, Tq] float32, its hidden rows and philox state not checked "
            f"{_UNCHECKED})"),
    "_scaled_dot_product_cudnn_attention": FusedAttention(
        9, 5, 6, mask=(3, "attn_bias"), debug=7, backward="_scaled_dot_product_cudnn_attention_backward",
        lse="cuDNN attention's logsumexp ([B, H, Tq, 1] float32, not kernelgen's [B, H, Tq] statistic)"),
    "_scaled_dot_product_efficient_attention": FusedAttention(
        4, 5, 6, mask=(3, "attn_bias"), backward="_scaled_dot_product_efficient_attention_backward",
        lse="memory-efficient attention's logsumexp ([B, H, Tq rounded up to a multiple of 32] float32)"),
}


def _fused_attention(b: Any, args: tuple, kwargs: dict, where: str, op: FusedAttention) -> tuple:
    """SDPA as one of ATen's fused ops (``FUSED_ATTENTION``): (out, logsumexp, ...). ``out`` lowers to an
    ``attention`` node with the op's mask (a float mask of the query's dtype; a bool one was turned into it by
    SDPA's own decomposition), causal flag and scale; the logsumexp to ``attention_lse`` where it is kernelgen's
    statistic, so a training forward's attention is a region too. Dropout and a debug mask are refused (the
    template has neither)."""
    q, k, v = (int(a) for a in args[:3])
    if arg(args, kwargs, op.dropout, "dropout_p", 0.0):
        raise UnsupportedOpError(f"attention with dropout at `{where}` (kernelgen's template has no dropout)")
    if op.debug is not None and arg(args, kwargs, op.debug, "return_debug_mask", False):
        raise UnsupportedOpError(f"attention returning its debug mask at `{where}`")
    mask = None
    if op.mask is not None:
        position, name = op.mask
        mask = kwargs.get(name) if position is None else arg(args, kwargs, position, name)
    if mask is not None and not is_node(mask):
        raise UnsupportedOpError(f"attention with a constant mask {mask!r} at `{where}`")
    mask = None if mask is None or _hides_nothing(b, int(mask)) else mask
    causal = bool(arg(args, kwargs, op.causal, "is_causal", False))
    scale = kwargs.get("scale")
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(b.spec(q).shape[-1])
    operands = (q, k, v) if mask is None else (q, k, v, int(mask))
    q_spec = b.spec(q)
    out = b.add("attention", operands, TensorSpec(q_spec.shape[:-1] + b.spec(v).shape[-1:], q_spec.dtype),
                causal=causal, scale=scale)
    if op.lse is not None:
        reason = f"{op.lse}: the op stays ATen where its statistics are read (its backward keeps ATen's too)"
        return (ref(out),) + (Refused(reason),) * (op.outputs - 1)
    lse_dtype = "float64" if q_spec.dtype == "float64" else "float32"
    lse = b.add("attention_lse", operands, TensorSpec(q_spec.shape[:-1], lse_dtype), causal=causal, scale=scale)
    return (ref(out), ref(lse))


def _hides_nothing(b: Any, mask: int) -> bool:
    """Whether attention mask node ``mask`` is a constant that changes no score: an additive 0 (T5's cross-attention
    adds a position bias of ``torch.zeros``, which reaches the op as ``full(..., 0)``, folded in as a literal
    broadcast by a cast) or a bool True everywhere. ``s + 0`` is ``s`` for every float ``s`` (NaN and infinities
    included; -0 becomes +0, which no softmax tells apart), so the attention without a mask computes the same
    values, and the template, which reads a mask only from an input, covers it."""
    node = b.nodes[mask]
    while node.op == "cast" and len(node.inputs) == 1:
        node = b.nodes[node.inputs[0]]
    if node.op != "const":
        return False
    value = node.attr("value")
    if b.spec(mask).dtype == "bool":
        return value is True or value == 1
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0


for _name, _op in FUSED_ATTENTION.items():
    handles(f"aten.{_name}")(lambda b, args, kwargs, meta, where, _op=_op: _fused_attention(b, args, kwargs, where, _op))
    if _op.backward:
        REFUSED[f"aten.{_op.backward}"] = (f"attention backward reading {_op.lse}; kernelgen's attention backward reads "
                                           f"its own statistic, so ATen's backward runs")


@handles("aten._scaled_dot_product_flash_attention_for_cpu_backward")
def _sdpa_flash_backward(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> tuple:
    """(grad_q, grad_k, grad_v) of the CPU flash op from its saved output and logsumexp: three ``attention_grad``
    nodes over the same inputs, which the attention backward template computes in one kernel."""
    grad, q, k, v, out, lse = args[:6]
    dropout, causal = arg(args, kwargs, 6, "dropout_p", 0.0), bool(arg(args, kwargs, 7, "is_causal", False))
    mask = kwargs.get("attn_mask")
    if dropout or not all(is_node(t) for t in (grad, q, k, v, out, lse)) or (mask is not None and not is_node(mask)):
        raise UnsupportedOpError(f"attention backward with dropout or constant operands at `{where}`")
    q, k, v = int(q), int(k), int(v)
    mask = None if mask is None or _hides_nothing(b, int(mask)) else mask
    scale = kwargs.get("scale")
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(b.spec(q).shape[-1])
    operands = (int(grad), q, k, v, int(out), int(lse)) + (() if mask is None else (int(mask),))
    return tuple(ref(b.add("attention_grad", operands, TensorSpec(b.spec(x).shape, b.spec(x).dtype), part=part,
                           causal=causal, scale=scale)) for part, x in (("q", q), ("k", k), ("v", v)))


@handles("aten.mean")
def _mean(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    return RULES["mean"](b, args[:2], {"keepdim": arg(args, kwargs, 2, "keepdim", False)}, meta, where)


__all__ = ["FUSED_ATTENTION", "FusedAttention", "aten_name"]
