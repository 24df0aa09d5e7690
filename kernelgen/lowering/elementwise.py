"""Lowering of torch.fx nodes to kernelgen's primitive ops, one small handler per PyTorch op.

Composite ops are written out here as primitives (softmax = exp(x - max) / sum(...)), so that the
templates only ever see elementwise ops, reductions, matmul and attention.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

from kernelgen.errors import UnsupportedOpError
from kernelgen.ir.values import TensorSpec

Handler = Callable[..., Any]
_HANDLERS: dict[str, Handler] = {}


def _handles(*names: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for name in names:
            _HANDLERS[name] = fn
        return fn

    return register


# Methods whose arguments are not the function's: x.where(cond, y) is torch.where(cond, x, y)
_METHOD_NAMES = {"where": "Tensor.where"}


def _canonical_name(kind: str, target: Any) -> str:
    """'add', 'softmax', 'gelu', ... for a call_function target or a call_method name."""
    if kind == "call_method":
        return _METHOD_NAMES.get(str(target), str(target))
    if kind == "call_function":
        if _is_aten_overload(target):  # Dynamo / AOTAutograd graphs: rules in kernelgen.frontend.aten_lowering
            from kernelgen.frontend.aten_lowering import aten_name

            return aten_name(target)
        if target is operator.getitem:
            return "getitem"
        special = {operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
                   operator.neg: "neg", operator.pow: "pow", operator.matmul: "matmul", operator.gt: "gt",
                   operator.ge: "ge", operator.lt: "lt", operator.le: "le", operator.eq: "eq", operator.ne: "ne",
                   operator.and_: "bitwise_and", operator.or_: "bitwise_or", operator.xor: "bitwise_xor",
                   operator.invert: "bitwise_not", operator.lshift: "bitwise_left_shift",
                   operator.rshift: "bitwise_right_shift", operator.floordiv: "floor_divide",
                   operator.mod: "remainder", abs: "abs",
                   operator.abs: "abs", getattr: "getattr"}
        if target in special:
            return special[target]
        if getattr(target, "_kernelgen_custom_call", False):  # set on kernelgen.custom_call
            return "custom_call"
        name = getattr(target, "__name__", None)
        if name is not None and any(getattr(ns, name, None) is target for ns in _torch_namespaces()):
            return name
        # torch.masked.sum, a user's own `sum`...: same __name__, other semantics (a mask), so not the handler's op
        return f"{getattr(target, '__module__', None) or ''}.{name or target}".lstrip(".")
    raise UnsupportedOpError(f"fx node kind {kind!r} is not supported")


def _is_aten_overload(target: Any) -> bool:
    import torch

    return isinstance(target, torch._ops.OpOverload)


def _torch_namespaces() -> tuple[Any, ...]:
    """Where the functions the handlers are named after live: a call target is the op only if it is one of these."""
    import torch

    return (torch, torch.nn.functional, torch.special, torch._C._nn, torch._C._special, torch.Tensor)


def lower(b: Any, kind: str, target: Any, args: tuple, kwargs: dict, meta: TensorSpec | None, where: str) -> Any:
    """Append the primitives for one fx node to builder ``b``; return its node ref (or a Python value)."""
    from kernelgen.ir.graph import NodeRef

    if kind == "get_attr":
        raise UnsupportedOpError(f"module attribute {target!r} at {where}; pass tensors as function arguments")
    name = _canonical_name(kind, target)
    _refuse_mutation(name, kwargs, where)
    handler = _HANDLERS.get(name)
    if handler is None:
        raise UnsupportedOpError(f"unsupported op {name!r} at `{where}`; supported: {', '.join(sorted(_HANDLERS))}")
    result = handler(b, args, kwargs, meta, where)
    if isinstance(result, int) and not isinstance(result, NodeRef) and not isinstance(result, bool) \
            and name not in ("size", "dim", "getattr"):
        result = NodeRef(result)
    return result


def _refuse_mutation(name: str, kwargs: dict, where: str) -> None:
    """Kernels only write their own outputs: an op that writes into a tensor (``x.relu_()``, ``out=``,
    ``inplace=True``) would lose eager's mutation, so the graph runs eagerly instead."""
    if kwargs.get("out") is not None or kwargs.get("inplace") is True:
        raise UnsupportedOpError(f"`{where}` writes into an existing tensor (out= / inplace=True); kernelgen "
                                 "kernels do not mutate tensors, so this graph runs eagerly: return a new tensor instead")
    if name.endswith("_") and not name.startswith("__"):
        raise UnsupportedOpError(f"in-place op {name!r} at `{where}`; kernelgen kernels do not mutate tensors, so "
                                 f"this graph runs eagerly: use {name.rstrip('_')!r}, which returns a new tensor")


def _ref(x: Any) -> Any:
    from kernelgen.ir.graph import NodeRef

    return NodeRef(x)


def _is_node(x: Any) -> bool:
    from kernelgen.ir.graph import NodeRef

    return isinstance(x, NodeRef)


def _is_float_dtype(dtype: str) -> bool:
    return dtype.startswith("float") or dtype == "bfloat16"


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def _operand(b: Any, value: Any, like: Any) -> int:
    """A node id for a tensor operand or a Python scalar (as a const of the tensor's dtype)."""
    if _is_node(value):
        return int(value)
    if isinstance(value, (bool, int, float)):
        return b.scalar_or_node(value, like)
    raise UnsupportedOpError(f"operand {value!r} of type {type(value).__name__} is not a tensor or a number")


# -------------------------------------------------------------------------------------- elementwise

def _binary(op: str) -> Handler:
    def handler(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
        x, y = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "other")
        if not _is_node(x) and not _is_node(y):
            raise UnsupportedOpError(f"{op} of two Python numbers at `{where}`")
        if op == "div" and kwargs.get("rounding_mode") is not None:
            return _rounded_div(b, x, y, kwargs["rounding_mode"], meta, where)
        if op in _DIVISIONS and meta is not None and not _is_float_dtype(meta.dtype) and _is_node(y):
            raise UnsupportedOpError(f"integer {op} by a tensor at `{where}`: eager raises ZeroDivisionError for a "
                                     "zero divisor, which a kernel cannot, so this graph runs eagerly (divide by a "
                                     "number)")
        if op == "pow" and _is_node(x) and isinstance(y, int) and y < 0 and not _is_float_dtype(b.spec(int(x)).dtype):
            raise UnsupportedOpError(f"integer tensor to the negative power {y} at `{where}` (eager raises for it)")
        like = x if _is_node(x) else y
        a, c = _operand(b, x, like), _operand(b, y, like)
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
    _handles(*_names)(_binary(_op))

_DIVISIONS = frozenset({"floor_divide", "remainder", "fmod"})


def _rounded_div(b: Any, x: Any, y: Any, mode: str, meta: Any, where: str) -> int:
    """div(rounding_mode=...): "floor" is floor_divide; "trunc" truncates the true quotient of floats, and of
    integers is floor_divide of a - fmod(a, b), an exact multiple of b (no overflow: it moves toward zero)."""
    if mode not in ("floor", "trunc"):
        raise UnsupportedOpError(f"div(rounding_mode={mode!r}) at `{where}`; use None, 'trunc' or 'floor'")
    if mode == "floor":
        return _binary("floor_divide")(b, (x, y), {}, meta, where)
    if meta is not None and _is_float_dtype(meta.dtype):
        quotient = _binary("div")(b, (x, y), {}, meta, where)
        if meta.dtype in ("float16", "bfloat16"):  # eager truncates the quotient rounded to the dtype (17.96 -> 18)
            quotient = b.elementwise("cast", (quotient,), meta.dtype)
        return b.elementwise("trunc", (quotient,), meta.dtype)
    exact = _binary("sub")(b, (x, _ref(_binary("fmod")(b, (x, y), {}, meta, where))), {}, meta, where)
    return _binary("floor_divide")(b, (_ref(exact), y), {}, meta, where)


@_handles("rsub")
def _rsub(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    alpha = _arg(args, kwargs, 2, "alpha", 1)  # rsub(x, y, alpha) = y - alpha * x
    return _binary("sub")(b, (_arg(args, kwargs, 1, "other"), args[0]), {"alpha": alpha}, meta, where)


def _float_result(name: str, meta: Any, where: str) -> None:
    """Float math whose eager result is not a float (gelu of int64) is an eager error: let eager raise it."""
    if meta is None or not _is_float_dtype(meta.dtype):
        raise UnsupportedOpError(f"{name} of {getattr(meta, 'dtype', 'unknown')} at `{where}` is float math; eager "
                                 "decides (it raises for integer inputs)")


_FLOAT_MATH = frozenset({"exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "silu", "gelu", "reciprocal",
                         "expm1", "log1p", "log2", "log10", "exp2", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
                         "cosh", "asinh", "acosh", "atanh"})


def _unary(op: str, **attrs: Any) -> Handler:
    def handler(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
        x = _arg(args, kwargs, 0, "input")
        if not _is_node(x):
            raise UnsupportedOpError(f"{op} of a Python number at `{where}`")
        if op in _FLOAT_MATH:
            _float_result(op, meta, where)
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
    _handles(_op)(_unary(_op))
for _alias, _op in {"negative": "neg", "absolute": "abs", "special_erf": "erf", "special_expm1": "expm1",
                    "special_log1p": "log1p", "special_exp2": "exp2", "arcsin": "asin", "arccos": "acos",
                    "arctan": "atan", "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh", "fix": "trunc",
                    "sgn": "sign", "__invert__": "bitwise_not", "special_expit": "sigmoid"}.items():
    _handles(_alias)(_unary(_op))


@_handles("round")
def _round(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    if kwargs.get("decimals", 0) != 0:
        raise UnsupportedOpError(f"round(decimals={kwargs['decimals']}) at `{where}`; only decimals=0 is lowered")
    return _unary("round")(b, args[:1], {}, meta, where)


@_handles("gelu")
def _gelu(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    approximate = _arg(args, kwargs, 1, "approximate", "none")
    if approximate not in ("none", "tanh"):
        raise UnsupportedOpError(f"gelu(approximate={approximate!r}) at `{where}`; use 'none' or 'tanh'")
    return _unary("gelu", approximate=approximate)(b, args[:1], {}, meta, where)


@_handles("square")
def _square(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = int(args[0])
    if meta is not None:  # square(bool) is int64 in eager (it is pow(x, 2))
        x = _cast_to(b, x, meta.dtype)
    return b.elementwise("mul", (x, x))


@_handles("clamp", "clip")
def _clamp(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = int(args[0])
    lo, hi = _arg(args, kwargs, 1, "min"), _arg(args, kwargs, 2, "max")
    if lo is not None:
        x = b.elementwise("maximum", (x, _operand(b, lo, x)))
    if hi is not None:
        x = b.elementwise("minimum", (x, _operand(b, hi, x)))
    return x


@_handles("where")
def _where(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    cond, x, y = (_arg(args, kwargs, i, n) for i, n in enumerate(("condition", "input", "other")))
    if not _is_node(cond):
        raise UnsupportedOpError(f"where() with a Python condition at `{where}`")
    like = x if _is_node(x) else (y if _is_node(y) else cond)
    dtype = meta.dtype if meta is not None else None
    return b.elementwise("where", (int(cond), _operand(b, x, like), _operand(b, y, like)), dtype)


@_handles("Tensor.where")
def _tensor_where(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x, cond, other = (_arg(args, kwargs, i, n) for i, n in enumerate(("self", "condition", "other")))
    return _where(b, (cond, x, other), {}, meta, where)


def _cast_to(b: Any, x: int, dtype: str) -> int:
    if b.spec(x).dtype == dtype:
        return x
    return b.elementwise("cast", (x,), dtype)


@_handles("to", "type", "float", "half", "bfloat16", "double", "type_as")
def _cast(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    if meta is None:
        raise UnsupportedOpError(f"cannot tell the result dtype of `{where}`")
    if kwargs.get("device") is not None or any(isinstance(a, str) for a in args[1:]):
        raise UnsupportedOpError(f"device move at `{where}`; move tensors outside the compiled function")
    return _cast_to(b, int(args[0]), meta.dtype)


@_handles("contiguous", "clone", "detach")
def _identity(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    return int(args[0])


# ---------------------------------------------------------------------------------------- reductions
# (the handlers live in kernelgen.lowering_reduction, imported at the end of this module)

@_handles("getitem")
def _getitem(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> Any:
    container, index = args
    if isinstance(container, tuple) and isinstance(index, int) and container[index] is not None:
        return container[index]
    raise UnsupportedOpError(f"indexing at `{where}`; only `.max(dim)[0]` / `.values` is supported")


@_handles("getattr")
def _getattr(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> Any:
    obj, attr = args
    if isinstance(obj, tuple) and attr == "values":
        return obj[0]
    if _is_node(obj) and attr in ("T", "mT"):
        return _transpose_last(b, int(obj))
    if _is_node(obj) and attr == "shape":
        return b.spec(int(obj)).shape
    raise UnsupportedOpError(f"attribute {attr!r} at `{where}`")


def _softmax(log: bool, b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = int(args[0])
    _float_result("log_softmax" if log else "softmax", meta, where)
    dim = _arg(args, kwargs, 1, "dim")
    if dim is None:  # F.softmax's legacy implicit dim (torch.nn.functional._get_softmax_dim)
        dim = 0 if b.spec(x).rank in (0, 1, 3) else 1
    if not isinstance(dim, int):
        raise UnsupportedOpError(f"softmax over dim={dim!r} at `{where}`; eager takes one int dim")
    dims = lowering_reduction.reduced_dims(b, x, dim, "softmax", where)
    if kwargs.get("dtype") is not None:
        x = _cast_to(b, x, meta.dtype)
    shifted = b.elementwise("sub", (x, b.reduce("max", x, dims)))
    e = b.elementwise("exp", (shifted,))
    total = b.reduce("sum", e, dims)
    if log:
        out = b.elementwise("sub", (shifted, b.elementwise("log", (total,))))
    else:
        out = b.elementwise("div", (e, total))
    return _cast_to(b, out, meta.dtype) if meta is not None else out


_handles("softmax")(lambda *a: _softmax(False, *a))
_handles("log_softmax")(lambda *a: _softmax(True, *a))


@_handles("layer_norm")
def _layer_norm(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = int(args[0])
    _float_result("layer_norm", meta, where)
    normalized_shape = tuple(_arg(args, kwargs, 1, "normalized_shape"))
    weight, bias = _arg(args, kwargs, 2, "weight"), _arg(args, kwargs, 3, "bias")
    eps = float(_arg(args, kwargs, 4, "eps", 1e-5))
    if len(normalized_shape) != 1:
        raise UnsupportedOpError(f"layer_norm over {len(normalized_shape)} dims at `{where}`; only the last dim")
    var = lowering_reduction.variance(b, x, (b.spec(x).rank - 1,), 0)
    n = b.spec(x).shape[-1]
    mean = b.elementwise("mul", (b.reduce("sum", x), b.scalar_or_node(1.0 / n, x)))
    y = b.elementwise("mul", (b.elementwise("sub", (x, mean)),
                              b.elementwise("rsqrt", (b.elementwise("add", (var, b.scalar_or_node(eps, x))),))))
    if _is_node(weight):
        y = b.elementwise("mul", (y, int(weight)))
    if _is_node(bias):
        y = b.elementwise("add", (y, int(bias)))
    return _cast_to(b, y, meta.dtype) if meta is not None else y


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


@_handles("t", "transpose", "swapaxes")
def _transpose(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x = int(args[0])
    rank = b.spec(x).rank
    if rank < 2:  # t() / transpose(0, -1) of a 0-d or 1-d tensor is the tensor itself
        return x
    dims = {d % rank for d in args[1:3]} if len(args) >= 3 else {rank - 2, rank - 1}
    if dims != {rank - 2, rank - 1}:
        raise UnsupportedOpError(f"transpose of dims {args[1:3]} at `{where}`; only the last two dims")
    return _transpose_last(b, x)


@_handles("unsqueeze", "view", "reshape", "squeeze", "expand_as")
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


@_handles("matmul", "mm", "bmm")
def _matmul(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x, w = int(args[0]), int(args[1])
    sx, sw = b.spec(x), b.spec(w)
    if sx.rank < 2 or sw.rank < 2:
        raise UnsupportedOpError(f"matmul of rank {sx.rank} and {sw.rank} at `{where}`; both need rank >= 2")
    if sx.shape[-1] != sw.shape[-2]:
        raise UnsupportedOpError(f"matmul of {list(sx.shape)} and {list(sw.shape)} at `{where}`: inner sizes differ")
    return b.add("matmul", (x, w), meta)


@_handles("linear")
def _linear(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x, w = int(args[0]), int(args[1])
    if b.spec(x).rank < 2 or b.spec(w).rank != 2:
        raise UnsupportedOpError(f"linear of a rank-{b.spec(x).rank} input and a rank-{b.spec(w).rank} weight at "
                                 f"`{where}`; the GEMM needs a rank >= 2 input and a 2-d weight")
    bias = _arg(args, kwargs, 2, "bias")
    out_spec = TensorSpec(meta.shape, meta.dtype)
    y = b.add("matmul", (x, _transpose_last(b, w)), out_spec)
    return b.elementwise("add", (y, int(bias))) if _is_node(bias) else y


@_handles("addmm")
def _addmm(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    bias, x, w = int(args[0]), int(args[1]), int(args[2])
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    y = b.add("matmul", (x, w), TensorSpec(meta.shape, meta.dtype))
    if alpha != 1:
        y = b.elementwise("mul", (y, b.scalar_or_node(alpha, y)))
    if beta != 1:
        bias = b.elementwise("mul", (bias, b.scalar_or_node(beta, bias)))
    return b.elementwise("add", (y, bias))


@_handles("scaled_dot_product_attention")
def _attention(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    q, k, v = (int(a) for a in args[:3])
    mask = _arg(args, kwargs, 3, "attn_mask")
    if _arg(args, kwargs, 4, "dropout_p", 0.0):
        raise UnsupportedOpError(f"attention with dropout at `{where}`; pass dropout_p=0")
    if mask is not None and not _is_node(mask):
        raise UnsupportedOpError(f"attention with a constant attn_mask at `{where}`; pass the mask as an argument")
    if kwargs.get("enable_gqa"):
        raise UnsupportedOpError(f"grouped-query attention at `{where}`")
    causal = bool(_arg(args, kwargs, 5, "is_causal", False))
    scale = kwargs.get("scale")
    head_dim = b.spec(q).shape[-1]
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(head_dim)
    operands = (q, k, v) if mask is None else (q, k, v, int(mask))  # bool (False hides a key) or additive
    return b.add("attention", operands, TensorSpec(meta.shape, meta.dtype), causal=causal, scale=scale)


@_handles("custom_call")
def _custom_call(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    name, operands = args[0], args[1:]
    if not all(_is_node(o) for o in operands) or kwargs:
        raise UnsupportedOpError(f"custom_call({name!r}) at `{where}` takes tensors only, positionally")
    return b.add("custom_call", tuple(int(o) for o in operands), meta, name=name)


@_handles("dim")
def _rank(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> Any:
    return b.spec(int(args[0])).rank


@_handles("size")
def _size(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> Any:
    spec = b.spec(int(args[0]))
    dim = _arg(args, kwargs, 1, "dim")
    return spec.shape if dim is None else spec.shape[dim]


from kernelgen import lowering_pointwise  # noqa: E402,F401  (registers the composite pointwise handlers)
from kernelgen import lowering_reduction  # noqa: E402  (registers the reductions; layer_norm uses its variance)


def op_name(target: Any) -> str:
    """The handler name a call of function ``target`` is lowered by ('gelu' for F.gelu); unhandled names too."""
    return _canonical_name("call_function", target)


def handled_ops() -> frozenset[str]:
    """Names of every PyTorch op (function or method) the lowering has a handler for."""
    return frozenset(_HANDLERS)
