"""Rules for ops that are more than one elementwise op: softmax and layer_norm written out over reductions,
views (reshape, transpose), GEMMs (matmul, linear, addmm), convolutions, attention, custom calls and size queries."""

from __future__ import annotations

import math
from typing import Any

from kernelgen.errors import UnsupportedOpError
from kernelgen.ir.values import TensorSpec
from kernelgen.lowering import reduction
from kernelgen.lowering.rules import Refused, arg, cast_to, float_result, handles, is_node

# ---------------------------------------------------------------------------------------- reductions

@handles("getitem")
def _getitem(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> Any:
    container, index = args
    if isinstance(container, tuple) and isinstance(index, int) and isinstance(container[index], Refused):
        raise UnsupportedOpError(f"{container[index].reason} (`{where}`)")
    if isinstance(container, tuple) and isinstance(index, int) and container[index] is not None:
        return container[index]
    raise UnsupportedOpError(f"indexing at `{where}`; only `.max(dim)[0]` / `.values` is supported")


@handles("getattr")
def _getattr(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> Any:
    obj, attr = args
    if isinstance(obj, tuple) and attr == "values":
        return obj[0]
    if is_node(obj) and attr in ("T", "mT"):
        return _transpose_last(b, int(obj))
    if is_node(obj) and attr == "shape":
        return b.spec(int(obj)).shape
    raise UnsupportedOpError(f"attribute {attr!r} at `{where}`")


def _softmax(log: bool, b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = int(args[0])
    float_result("log_softmax" if log else "softmax", meta, where)
    dim = arg(args, kwargs, 1, "dim")
    if dim is None:  # F.softmax's legacy implicit dim (torch.nn.functional._get_softmax_dim)
        dim = 0 if b.spec(x).rank in (0, 1, 3) else 1
    if not isinstance(dim, int):
        raise UnsupportedOpError(f"softmax over dim={dim!r} at `{where}`; eager takes one int dim")
    dims = reduction.reduced_dims(b, x, dim, "softmax", where)
    if kwargs.get("dtype") is not None:
        x = cast_to(b, x, meta.dtype)
    shifted = b.elementwise("sub", (x, b.reduce("max", x, dims)))
    e = b.elementwise("exp", (shifted,))
    total = b.reduce("sum", e, dims)
    if log:
        out = b.elementwise("sub", (shifted, b.elementwise("log", (total,))))
    else:  # times the row's reciprocal, as eager's vectorised softmax computes it (not a division per element)
        out = b.elementwise("mul", (e, b.elementwise("reciprocal", (total,))))
    return cast_to(b, out, meta.dtype) if meta is not None else out


handles("softmax")(lambda *a: _softmax(False, *a))
handles("log_softmax")(lambda *a: _softmax(True, *a))


@handles("layer_norm")
def _layer_norm(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = int(args[0])
    float_result("layer_norm", meta, where)
    normalized_shape = tuple(arg(args, kwargs, 1, "normalized_shape"))
    weight, bias = arg(args, kwargs, 2, "weight"), arg(args, kwargs, 3, "bias")
    eps = float(arg(args, kwargs, 4, "eps", 1e-5))
    if len(normalized_shape) != 1:
        raise UnsupportedOpError(f"layer_norm over {len(normalized_shape)} dims at `{where}`; only the last dim")
    row = (b.spec(x).rank - 1,)
    var = reduction.variance(b, x, row, 0)
    n = b.spec(x).shape[-1]
    mean = b.elementwise("mul", (b.reduce("sum", x), b.scalar_or_node(1.0 / n, x)))
    rstd = b.elementwise("rsqrt", (b.elementwise("add", (var, b.scalar_or_node(eps, x))),))
    y = b.elementwise("mul", (b.elementwise("sub", (x, mean)), reduction.overflow_is_nan(b, x, rstd, row)))
    if is_node(weight):
        y = b.elementwise("mul", (y, int(weight)))
    if is_node(bias):
        y = b.elementwise("add", (y, int(bias)))
    return cast_to(b, y, meta.dtype) if meta is not None else y


# --------------------------------------------------------------------------------------- views, GEMM

def _transpose_last(b: Any, x: int) -> int:
    spec = b.spec(x)
    if spec.rank < 2:
        return x
    strides = list(spec.effective_strides())
    shape = list(spec.shape)
    shape[-1], shape[-2] = shape[-2], shape[-1]
    strides[-1], strides[-2] = strides[-2], strides[-1]
    return b.add("transpose", (x,), TensorSpec(tuple(shape), spec.dtype, tuple(strides)))


@handles("t", "transpose", "swapaxes")
def _transpose(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = int(args[0])
    rank = b.spec(x).rank
    if rank < 2:  # t() / transpose(0, -1) of a 0-d or 1-d tensor is the tensor itself
        return x
    dims = {d % rank for d in args[1:3]} if len(args) >= 3 else {rank - 2, rank - 1}
    if dims != {rank - 2, rank - 1}:
        raise UnsupportedOpError(f"transpose of dims {args[1:3]} at `{where}`; only the last two dims")
    return _transpose_last(b, x)


@handles("unsqueeze", "view", "reshape", "squeeze", "expand_as")
def _reshape(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = int(args[0])
    if meta is None or meta.dtype != b.spec(x).dtype:  # x.view(torch.int32) reinterprets bits, it is no cast
        raise UnsupportedOpError(f"`{where}` reinterprets the bits of {b.spec(x).dtype} as another dtype; "
                                 "kernelgen has no bitcast, so this graph runs eagerly")
    old, new = b.spec(x).shape, meta.shape
    if [s for s in old if s != 1] != [s for s in new if s != 1] or not b.spec(x).is_contiguous:
        raise UnsupportedOpError(f"reshape {list(old)} -> {list(new)} at `{where}`; only adding or dropping "
                                 "size-1 dimensions is supported inside a compiled function")
    return x if old == new else b.add("reshape", (x,), TensorSpec(new, b.spec(x).dtype))


@handles("matmul", "mm", "bmm")
def _matmul(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x, w = int(args[0]), int(args[1])
    sx, sw = b.spec(x), b.spec(w)
    if sx.rank < 2 or sw.rank < 2:
        raise UnsupportedOpError(f"matmul of rank {sx.rank} and {sw.rank} at `{where}`; both need rank >= 2")
    if sx.shape[-1] != sw.shape[-2]:
        raise UnsupportedOpError(f"matmul of {list(sx.shape)} and {list(sw.shape)} at `{where}`: inner sizes differ")
    return b.add("matmul", (x, w), meta)


@handles("linear")
def _linear(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x, w = int(args[0]), int(args[1])
    if b.spec(x).rank < 2 or b.spec(w).rank != 2:
        raise UnsupportedOpError(f"linear of a rank-{b.spec(x).rank} input and a rank-{b.spec(w).rank} weight at "
                                 f"`{where}`; the GEMM needs a rank >= 2 input and a 2-d weight")
    bias = arg(args, kwargs, 2, "bias")
    out_spec = TensorSpec(meta.shape, meta.dtype)
    y = b.add("matmul", (x, _transpose_last(b, w)), out_spec)
    return b.elementwise("add", (y, int(bias))) if is_node(bias) else y


@handles("addmm", "baddbmm")
def _addmm(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """addmm / baddbmm(input, x, w, beta=1, alpha=1) = beta * input + alpha * (x @ w); with beta 0 eager ignores
    ``input`` altogether (its NaN and inf do not propagate), so the GEMM is the result."""
    bias, x, w = int(args[0]), int(args[1]), int(args[2])
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    if meta is None or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (beta, alpha)) \
            or alpha == 0:
        raise UnsupportedOpError(f"addmm with beta={beta!r}, alpha={alpha!r} at `{where}`; eager decides")
    if b.spec(x).rank != b.spec(w).rank or b.spec(x).shape[-1] != b.spec(w).shape[-2]:
        raise UnsupportedOpError(f"addmm of {list(b.spec(x).shape)} and {list(b.spec(w).shape)} at `{where}`")
    y = b.add("matmul", (x, w), TensorSpec(meta.shape, meta.dtype))
    if alpha != 1:
        y = b.elementwise("mul", (y, b.scalar_or_node(alpha, y)))
    if beta == 0:
        return y
    if beta != 1:
        bias = b.elementwise("mul", (bias, b.scalar_or_node(beta, bias)))
    return b.elementwise("add", (y, bias))


@handles("scaled_dot_product_attention")
def _attention(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    q, k, v = (int(a) for a in args[:3])
    mask = arg(args, kwargs, 3, "attn_mask")
    if arg(args, kwargs, 4, "dropout_p", 0.0):
        raise UnsupportedOpError(f"attention with dropout at `{where}`; pass dropout_p=0")
    if mask is not None and not is_node(mask):
        raise UnsupportedOpError(f"attention with a constant attn_mask at `{where}`; pass the mask as an argument")
    heads = [b.spec(x).shape[-3] if b.spec(x).rank == 4 else 1 for x in (q, k, v)]
    if heads[1:] != [heads[0]] * 2 and not (kwargs.get("enable_gqa") and heads[1] == heads[2]
                                             and heads[1] and heads[0] % heads[1] == 0):
        # grouped-query attention (fewer key/value heads) only where eager takes it: with enable_gqa=True
        raise UnsupportedOpError(f"attention of {heads[0]} query heads over {heads[1]}/{heads[2]} key/value heads at "
                                 f"`{where}`; eager PyTorch decides")
    causal = bool(arg(args, kwargs, 5, "is_causal", False))
    scale = kwargs.get("scale")
    head_dim = b.spec(q).shape[-1]
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(head_dim)
    operands = (q, k, v) if mask is None else (q, k, v, int(mask))  # bool (False hides a key) or additive
    return b.add("attention", operands, TensorSpec(meta.shape, meta.dtype), causal=causal, scale=scale)


@handles("custom_call")
def _custom_call(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    name, operands = args[0], args[1:]
    if not all(is_node(o) for o in operands) or kwargs:
        raise UnsupportedOpError(f"custom_call({name!r}) at `{where}` takes tensors only, positionally")
    return b.add("custom_call", tuple(int(o) for o in operands), meta, name=name)


@handles("dim")
def _rank(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> Any:
    return b.spec(int(args[0])).rank


@handles("size")
def _size(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> Any:
    spec = b.spec(int(args[0]))
    dim = arg(args, kwargs, 1, "dim")
    return spec.shape if dim is None else spec.shape[dim]


# ------------------------------------------------------------------------------------------ convolution

def _triple(value: Any, spatial: int, name: str, where: str) -> tuple[int, ...]:
    """A convolution's per-dim integer argument (an int, or one int per spatial dim) as a tuple."""
    values = (value,) * spatial if isinstance(value, int) else tuple(value)
    if len(values) == 1 and spatial > 1:
        values = values * spatial
    if len(values) != spatial or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise UnsupportedOpError(f"convolution {name}={value!r} at `{where}`; one int per spatial dim")
    return values


def _convolution(b: Any, x: Any, w: Any, bias: Any, stride: Any, padding: Any, dilation: Any, groups: Any,
                 meta: Any, where: str, spatial: int | None = None) -> int:
    if not (is_node(x) and is_node(w)) or (bias is not None and not is_node(bias)) or meta is None:
        raise UnsupportedOpError(f"convolution at `{where}` takes tensors for its input, weight and bias")
    if spatial is not None and b.spec(int(x)).rank != spatial + 2:
        raise UnsupportedOpError(f"unbatched conv{spatial}d at `{where}`; a batched input is lowered")
    spatial = b.spec(int(x)).rank - 2
    if not 1 <= spatial <= 3 or b.spec(int(w)).rank != spatial + 2 or not isinstance(groups, int) or groups < 1:
        raise UnsupportedOpError(f"convolution of a rank-{b.spec(int(x)).rank} input at `{where}`; a batched 1-3d "
                                 "convolution is lowered")
    if isinstance(padding, str):
        raise UnsupportedOpError(f"convolution padding={padding!r} at `{where}`; give the pads as ints")
    attrs = {"stride": _triple(stride, spatial, "stride", where), "padding": _triple(padding, spatial, "padding", where),
             "dilation": _triple(dilation, spatial, "dilation", where), "groups": groups}
    operands = (int(x), int(w)) if bias is None else (int(x), int(w), int(bias))
    return b.add("conv", operands, TensorSpec(meta.shape, meta.dtype), **attrs)


@handles("aten.convolution")
def _aten_convolution(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """``aten.convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups)``; a transposed
    one stays ATen's."""
    x, w, bias, stride, padding, dilation, transposed, _, groups = (
        arg(args, kwargs, i, n) for i, n in enumerate(("input", "weight", "bias", "stride", "padding", "dilation",
                                                        "transposed", "output_padding", "groups")))
    if transposed:
        raise UnsupportedOpError(f"transposed convolution at `{where}`; it stays ATen's")
    return _convolution(b, x, w, bias, stride, padding, dilation, groups, meta, where)


def _conv_nd(spatial: int) -> Any:
    """``F.conv{spatial}d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1)`` (int pads only)."""

    def rule(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
        return _convolution(b, arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "weight"),
                            arg(args, kwargs, 2, "bias"), arg(args, kwargs, 3, "stride", 1),
                            arg(args, kwargs, 4, "padding", 0), arg(args, kwargs, 5, "dilation", 1),
                            arg(args, kwargs, 6, "groups", 1), meta, where, spatial)

    return rule


for _spatial in (1, 2, 3):
    handles(f"conv{_spatial}d")(_conv_nd(_spatial))
