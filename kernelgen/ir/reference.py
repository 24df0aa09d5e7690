"""Eager evaluation of a kernelgen ``Graph`` with torch ops: the reference every kernel is checked against.

It lets a worker process that only has the graph (as JSON) compute the expected result, and it defines
the IR's semantics executably: float16/bfloat16/float32 arithmetic in float32, rounding at casts and
outputs (see ``kernelgen.ir.graph``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from kernelgen.errors import KernelgenError
from kernelgen.ir.graph import INDEX_REDUCTIONS, REDUCTION_OPS, Graph, Node, pad_pairs, reduced_dims

TORCH_NAMED_OPS = ("clone", "expm1", "log1p", "log2", "log10", "exp2", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
                   "cosh", "asinh", "acosh", "atanh", "floor", "ceil", "round", "trunc", "sign", "isnan", "isinf",
                   "isfinite", "logical_not", "bitwise_not", "logical_xor", "atan2", "bitwise_and", "bitwise_or",
                   "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift", "fmod", "remainder", "floor_divide")


def _compute_dtype(torch: Any, dtype: Any) -> Any:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _exact_dtype(torch: Any, dtype: Any) -> Any:
    return torch.float64 if dtype.is_floating_point else dtype


# How ``evaluate`` computes float values (``kernelgen.check.compare.judge`` holds a kernel to the first two):
# - "ir": the IR's semantics, what kernels compute: float16/bfloat16/float32 math in float32, rounded at casts and
#   outputs (the default: the reference a kernel is compared with);
# - "eager": how far eager's own computation in a low-precision dtype is from the exact values: the IR's semantics,
#   plus the GEMM and attention results rounded to their dtype (eager's kernels write them in the inputs' dtype
#   before anything reads them, where a kernel may keep them in float32). Every other node stays in float32:
#   softmax, layer norm and the other ops a lowering writes out as several nodes compute in float32 inside eager's
#   one kernel too, so rounding each of their nodes would credit eager with errors it does not make;
# - "exact": every float node in float64, nothing rounded (the values a computation in any dtype approximates).
PRECISIONS = ("ir", "eager", "exact")
_ROUNDED_BY_EAGER = frozenset({"matmul", "conv", "attention"})


def _const(value: Any) -> float:
    return {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}.get(value, value) if isinstance(value, str) else value


def _ops(torch: Any) -> dict[str, Callable[..., Any]]:
    F = torch.nn.functional
    return {
        "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
        "rsqrt": torch.rsqrt, "tanh": torch.tanh, "erf": torch.erf, "sigmoid": torch.sigmoid, "relu": torch.relu,
        "silu": F.silu, "reciprocal": torch.reciprocal,
        "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
        "maximum": torch.maximum, "minimum": torch.minimum, "eq": torch.eq, "ne": torch.ne, "lt": torch.lt,
        "le": torch.le, "gt": torch.gt, "ge": torch.ge, "logical_and": torch.logical_and,
        "logical_or": torch.logical_or, "where": torch.where,
        # the IR's other elementwise ops are named after the torch function they compute
        **{op: getattr(torch, op) for op in TORCH_NAMED_OPS},
    }


def _float_mask(torch: Any, args: list) -> Any:
    """An attention's mask (its fourth input) as an additive one of the query's dtype (bool: False is -inf)."""
    if len(args) < 4:
        return None
    mask = args[3]
    if mask.dtype == torch.bool:
        dtype = args[0].dtype
        return torch.where(mask, torch.zeros((), dtype=dtype), torch.full((), -math.inf, dtype=dtype))
    return mask.to(args[0].dtype)


def evaluate(graph: Graph, inputs: Sequence[Any], custom_calls: Callable[[str], Callable[..., Any]] | None = None,
             precision: str = "ir") -> list[Any]:
    """The graph's outputs for torch tensors ``inputs`` (in argument order), computed eagerly in ``precision``
    (``PRECISIONS``; "exact" returns float outputs in float64)."""
    import torch

    if precision not in PRECISIONS:
        raise KernelgenError(f"reference precision {precision!r}; one of {', '.join(PRECISIONS)}")
    compute = _exact_dtype if precision == "exact" else _compute_dtype

    ops = _ops(torch)
    values: list[Any] = []
    for node in graph.nodes:
        shapes = [graph.nodes[j].spec.shape for j in node.inputs]  # a const's value is 0-d whatever its spec
        if node.op in ("sort", "argsort"):  # keys as eager holds them: a float16 value rounded to float16
            key = graph.nodes[node.inputs[0]].spec.dtype
            values.append(_sort(torch, node, values[node.inputs[0]].expand(shapes[0]).to(getattr(torch, key))))
            continue
        if node.op == "bucketize":  # eager's search on x rounded to its dtype, against the boundaries as stored
            x, edges = (graph.nodes[j].spec for j in node.inputs)
            values.append(torch.bucketize(values[node.inputs[0]].expand(x.shape).to(getattr(torch, x.dtype)),
                                          values[node.inputs[1]].to(getattr(torch, edges.dtype)),
                                          right=node.attr("right")).to(getattr(torch, node.spec.dtype)))
            continue
        value = _eval_node(torch, ops, node, values, inputs, custom_calls, shapes, compute)
        if precision == "eager" and node.op in _ROUNDED_BY_EAGER and node.spec.dtype in ("float16", "bfloat16"):
            value = value.to(getattr(torch, node.spec.dtype)).to(torch.float32)
        values.append(value)
    return [values[i].to(compute(torch, getattr(torch, graph.nodes[i].spec.dtype)) if precision == "exact" else
                         getattr(torch, graph.nodes[i].spec.dtype)).reshape(graph.nodes[i].spec.shape)
            for i in graph.outputs]


def _eval_node(torch: Any, ops: dict, node: Node, values: list, inputs: Sequence[Any],
               custom_calls: Callable[[str], Callable[..., Any]] | None, input_shapes: Sequence[Any] = (),
               compute: Callable[[Any, Any], Any] = _compute_dtype) -> Any:
    dtype = getattr(torch, node.spec.dtype)
    args = [values[i] for i in node.inputs]
    op = node.op
    if op == "input":
        t = inputs[node.attr("index")]
        return t.to(compute(torch, t.dtype))
    if op == "const":
        value = _const(node.attr("value"))
        if isinstance(value, int) and not isinstance(value, bool) and not dtype.is_floating_point and dtype != torch.bool:
            # eager wraps a Python int into the tensor's integer dtype (int8 x - 2**40 is x - 0): so does the IR
            return torch.tensor(value, dtype=torch.int64).to(dtype)
        return torch.tensor(value, dtype=compute(torch, dtype))
    if op == "cast":
        if compute is _exact_dtype and dtype.is_floating_point and args[0].dtype.is_floating_point:
            return args[0]  # exact values: a float cast rounds nothing
        return args[0].to(dtype).to(compute(torch, dtype))
    if op == "gelu":
        return torch.nn.functional.gelu(args[0], approximate=node.attr("approximate", "none"))
    if op in ops:
        return ops[op](*args)
    if op in REDUCTION_OPS:
        x = args[0]
        dims = reduced_dims(node, x.dim())
        if op in INDEX_REDUCTIONS:  # flat index over the reduced dims, row-major: move them last, flatten
            kept = [d for d in range(x.dim()) if d not in dims]
            flat = x.permute(*kept, *dims).reshape(*(x.shape[d] for d in kept), -1)
            return getattr(flat, op)(-1).reshape(node.spec.shape)
        if op == "prod":  # torch.prod takes one dim at a time
            for d in dims:
                x = x.prod(d, keepdim=True)
            return x
        return {"sum": x.sum, "max": x.amax, "min": x.amin}[op](dims, keepdim=True)
    if op in ("reshape", "transpose"):
        return args[0].reshape(node.spec.shape) if op == "reshape" else args[0].transpose(-1, -2)
    if op == "cat":  # operands are already in the node's dtype (the lowering casts them)
        return torch.cat([values[j].expand(spec) for j, spec in zip(node.inputs, input_shapes)], node.attr("dim"))
    if op == "pad":  # (before, after) per dim; F.pad lists them from the last dim backwards
        flat = [p for pair in reversed(pad_pairs(node)) for p in pair]
        return torch.nn.functional.pad(args[0].expand(input_shapes[0]), flat, value=args[1].item())
    if op == "gather":  # an out-of-range index reads the nearest row, as the kernels do (eager raises)
        indices = []
        for dim, index in enumerate(args[1:]):
            rows = input_shapes[0][dim]
            indices.append(torch.where(index < 0, index + rows, index).clamp(0, rows - 1).long())
        return args[0].expand(input_shapes[0])[tuple(indices)]
    if op == "slice_scatter":
        return torch.slice_scatter(args[0].expand(input_shapes[0]), args[1].expand(input_shapes[1]), node.attr("dim"),
                                   node.attr("start"), node.attr("end"), node.attr("step"))
    if op == "select_scatter":
        return torch.select_scatter(args[0].expand(input_shapes[0]), args[1].expand(input_shapes[1]), node.attr("dim"),
                                    node.attr("index"))
    if op == "diagonal":
        return torch.diagonal(args[0].expand(input_shapes[0]), node.attr("offset"), node.attr("dim1"), node.attr("dim2"))
    if op == "diagonal_scatter":
        return torch.diagonal_scatter(args[0].expand(input_shapes[0]), args[1].expand(input_shapes[1]),
                                      node.attr("offset"), node.attr("dim1"), node.attr("dim2"))
    if op == "take_along":  # eager raises for an index out of range (checked before a launch); the check's random
        # indices are read as the kernels read them: a negative one wraps once, then the nearest element
        x = args[0].expand(input_shapes[0])
        size = x.shape[node.attr("dim")]
        index = args[1].expand(input_shapes[1]).long()
        index = torch.where(index < 0, index + size, index).clamp(0, size - 1)
        return torch.gather(x, node.attr("dim"), index)
    if op == "unfold":
        return args[0].expand(input_shapes[0]).unfold(node.attr("dim"), node.attr("size"), node.attr("step"))
    if op in ("cumsum", "cumprod", "logcumsumexp"):  # eager's own scan in the node's dtype (its accumulator rules)
        return getattr(torch, op)(args[0].expand(input_shapes[0]).to(compute(torch, dtype) if compute is _exact_dtype
                                                                       else dtype), node.attr("dim")).to(compute(torch, dtype))
    if op in ("window", "window_grad"):
        return _window(torch, node, args, input_shapes)
    if op in ("scatter", "index_put"):
        return _scatter(torch, node, [a.expand(shape) for a, shape in zip(args, input_shapes)])
    if op == "matmul":
        return torch.matmul(args[0], args[1])
    if op == "conv":
        stride = list(node.attr("stride"))
        return torch.convolution(args[0], args[1], args[2] if len(args) > 2 else None, stride,
                                 list(node.attr("padding")), list(node.attr("dilation")), False, [0] * len(stride),
                                 node.attr("groups"))
    if op == "attention":
        grouped = args[0].dim() == 4 and args[1].shape[-3] != args[0].shape[-3]  # fewer key/value heads
        return torch.nn.functional.scaled_dot_product_attention(*args[:3], attn_mask=_float_mask(torch, args),
                                                                is_causal=node.attr("causal"), scale=node.attr("scale"),
                                                                **({"enable_gqa": True} if grouped else {}))
    if op == "attention_lse":
        # ATen's CPU flash op defines the statistic (fully hidden rows give 0): it is what the backward reads
        # (a CPU-only op: GPU tensors are evaluated on CPU copies, the statistic moved back)
        q, k, v = (a.cpu() if a.dim() == 4 else a.cpu().unsqueeze(1) for a in args[:3])
        mask = _float_mask(torch, args)
        lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, node.attr("causal"), attn_mask=None if mask is None else mask.cpu(),
            scale=node.attr("scale"))[1].to(args[0].device)
        return lse if args[0].dim() == 4 else lse.squeeze(1)
    if op == "attention_grad":  # ATen's CPU flash backward (GPU tensors: on CPU copies, moved back)
        grad, q, k, v, out = (a.cpu() if a.dim() == 4 else a.cpu().unsqueeze(1) for a in args[:5])
        lse = args[5].cpu() if args[5].dim() == 3 else args[5].cpu().unsqueeze(1)  # [batch, (heads,) queries]
        mask = _float_mask(torch, [args[1], args[2], args[3], args[6]]) if len(args) > 6 else None
        grads = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad, q, k, v, out, lse.float() if q.dtype != torch.float64 else lse, 0.0, node.attr("causal"),
            attn_mask=None if mask is None else mask.cpu(), scale=node.attr("scale"))
        result = grads["qkv".index(node.attr("part"))].to(args[0].device)
        return result if args[1].dim() == 4 else result.squeeze(1)
    if op == "custom_call":
        if custom_calls is None:
            raise KernelgenError(f"custom call {node.attr('name')!r} needs the registry to evaluate")
        return custom_calls(node.attr("name"))(*args)
    raise KernelgenError(f"reference evaluation has no rule for op {op!r}")


def _sort(torch: Any, node: Node, x: Any) -> Any:
    """A sort node through eager's stable sort: the values (in their compute dtype) or the int64 positions."""
    pair = torch.sort(x, dim=node.attr("dim"), descending=node.attr("descending"), stable=True)
    return pair.values.to(_compute_dtype(torch, x.dtype)) if node.op == "sort" else pair.indices


def _window(torch: Any, node: Node, args: list, input_shapes: Sequence[Any]) -> Any:
    """A window op through ATen's own pooling kernels (and their backwards), on the window dims with every
    leading dim flattened into one batch dim; a 1-d window is a 2-d one over a size-1 dim."""
    aten = torch.ops.aten
    kernel, k = tuple(node.attr("kernel") or ()), int(node.attr("spatial"))
    grad = node.op == "window_grad"
    x = args[0].expand(input_shapes[0])
    in_shape = tuple(node.spec.shape) if grad else tuple(x.shape)
    out_shape = tuple(x.shape) if grad else tuple(node.spec.shape)
    lead = in_shape[:-k]

    def planes(t: Any, spatial: tuple) -> Any:  # [B, (1,) *spatial]: the batched 2-d/3-d form ATen takes
        return t.reshape(-1, *((1,) if k == 1 else ()), *spatial)

    def widen(v: tuple, fill: int) -> list:
        return [fill, *v] if k == 1 else list(v)

    dims = max(k, 2)
    reduce, adaptive = node.attr("reduce"), node.attr("adaptive", False)
    window = (widen(kernel, 1), widen(tuple(node.attr("stride")), 1), widen(tuple(node.attr("padding")), 0)) \
        if not adaptive else ()
    ceil, include, divisor = node.attr("ceil_mode", False), node.attr("count_include_pad", True), \
        node.attr("divisor", 0) or None
    out_sizes = widen(out_shape[-k:], 1)
    if not grad:
        src = planes(x, in_shape[-k:])
        if reduce == "avg":
            result = getattr(aten, f"_adaptive_avg_pool{dims}d")(src, out_sizes) if adaptive else \
                getattr(aten, f"avg_pool{dims}d")(src, *window, ceil, include, divisor)
        else:
            pair = getattr(aten, f"adaptive_max_pool{dims}d")(src, out_sizes) if adaptive else \
                getattr(aten, f"max_pool{dims}d_with_indices")(src, *window, widen(tuple(node.attr("dilation")), 1), ceil)
            result = pair[1] if reduce == "argmax" else pair[0]
        return result.reshape(*lead, *out_shape[-k:])
    g = planes(x, out_shape[-k:])
    base = planes(torch.zeros(in_shape, dtype=g.dtype, device=g.device), in_shape[-k:])  # (only its shape is read)
    if reduce == "avg":
        result = getattr(aten, f"_adaptive_avg_pool{dims}d_backward")(g, base) if adaptive else \
            getattr(aten, f"avg_pool{dims}d_backward")(g, base, *window, ceil, include, divisor)
    else:
        result = _argmax_grad(torch, node, g.reshape(-1, *out_shape[-k:]),
                              args[1].expand(input_shapes[1]).reshape(-1, *out_shape[-k:]).long(), in_shape[-k:])
    return result.reshape(in_shape)


def _argmax_grad(torch: Any, node: Node, grad: Any, index: Any, sizes: tuple) -> Any:
    """A max window's gradient: ``grad`` added, in output order, at the input element its argmax ``index``
    names, where that element is one of its window's taps (as every argmax a forward made is; ATen's own
    backward writes anywhere an index points, out of bounds included, so it cannot define the others)."""
    k = len(sizes)
    outs = grad.shape[1:]
    inside = (index >= 0) & (index < math.prod(sizes))
    rest = index.clamp(0, math.prod(sizes) - 1)
    for d in range(k - 1, -1, -1):  # the index's coordinate along each window dim, innermost first
        at = rest % sizes[d]
        rest = rest // sizes[d]
        o = torch.arange(outs[d], device=grad.device).reshape((-1,) + (1,) * (k - 1 - d))
        if node.attr("adaptive", False):
            lo, hi = (o * sizes[d]) // outs[d], ((o + 1) * sizes[d] + outs[d] - 1) // outs[d]
            inside &= (at >= lo) & (at < hi)
        else:
            step = node.attr("dilation")[d]
            offset = at - (o * node.attr("stride")[d] - node.attr("padding")[d])
            inside &= (offset >= 0) & (offset <= (node.attr("kernel")[d] - 1) * step) & (offset % step == 0)
    flat = grad.shape[0]
    result = torch.zeros(flat, math.prod(sizes), dtype=grad.dtype, device=grad.device)
    return result.scatter_add_(1, torch.where(inside, index, 0).reshape(flat, -1),
                               torch.where(inside, grad, 0).reshape(flat, -1))


_SCATTER_REDUCE = {"sum": "sum", "prod": "prod", "amax": "amax", "amin": "amin"}


def _scatter(torch: Any, node: Node, args: list) -> Any:
    """A scatter through ATen's ``scatter`` / ``scatter_reduce`` / ``index_put``, with the index wrapped and
    clamped into range as the kernels do (an index out of range raised eager's error before them)."""
    x, index, src = args
    d, reduce = node.attr("dim"), node.attr("reduce")
    size = x.shape[d]
    index = index.long()
    if node.attr("wrap", False):
        index = torch.where(index < 0, index + size, index)
    index = index.clamp(0, size - 1)
    src = src.to(x.dtype)
    if node.op == "index_put":
        # x[..., index, ...] along d: move d first, put the rows, move it back
        moved = x.movedim(d, 0)
        values = src.movedim(tuple(range(d, d + index.dim())), tuple(range(index.dim())))
        if reduce in ("none", "sum"):
            result = moved.index_put((index,), values, accumulate=reduce == "sum")
        else:  # (the lowering makes none and sum only)
            raise KernelgenError(f"reference index_put has no reduce {reduce!r}")
        return result.movedim(0, d)
    src = src.expand(index.shape) if src.dim() == 0 else src[tuple(slice(0, n) for n in index.shape)]
    if reduce == "none":
        return torch.scatter(x, d, index, src)
    return torch.scatter_reduce(x, d, index, src, _SCATTER_REDUCE[reduce], include_self=node.attr("include_self", True))
