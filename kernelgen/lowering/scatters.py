"""Lowering of out-of-place writes at computed positions to the IR's ``scatter`` and ``index_put``
(``kernelgen.ir.graph.SCATTER_OPS``): ``scatter`` (a tensor or a number), ``scatter_add``, ``scatter_reduce``
(sum, prod, amax, amin; ``include_self``), ``index_put`` with one index tensor (``accumulate``), its unchecked forms
``_unsafe_index_put``, ``_unsafe_masked_index_put_accumulate`` and ``embedding_dense_backward`` (the embedding
backward), and ``index_add``;
the scatter template renders them.

Registered in the table of ``kernelgen.lowering.rules``. Eager's errors are kept: an index out of range raises
eager's exception type before the kernel runs (the node's ``error``), so those index tensors must be inputs of the
graph (the runtime reads them); what eager computes specially (``reduce="mean"``, several index tensors, empty
tensors) stays eager's.
"""

from __future__ import annotations

from typing import Any

from kernelgen.errors import UnsupportedOpError
from kernelgen.ir.values import TensorSpec
from kernelgen.lowering.rules import arg, cast_to, handles, is_node, ref

_REDUCE = {"sum": "sum", "add": "sum", "prod": "prod", "multiply": "prod", "amax": "amax", "amin": "amin"}


def _checked(b: Any, x: Any, index: Any, src: Any, meta: Any, where: str) -> tuple[int, int, int]:
    if meta is None or not (is_node(x) and is_node(index)):
        raise UnsupportedOpError(f"scatter into {x!r} by {index!r} at `{where}`")
    x, index = int(x), int(index)
    if b.spec(index).dtype not in ("int32", "int64") or 0 in meta.shape or 0 in b.spec(index).shape:
        raise UnsupportedOpError(f"scatter by a {b.spec(index).dtype}{list(b.spec(index).shape)} index into "
                                 f"{list(meta.shape)} at `{where}`; eager PyTorch runs it")
    if is_node(src):
        src = cast_to(b, int(src), meta.dtype)
    elif isinstance(src, (bool, int, float)):
        src = b.const(src, meta.dtype)
    else:
        raise UnsupportedOpError(f"scatter of {src!r} at `{where}`")
    return cast_to(b, x, meta.dtype), index, src


def _scatter(b: Any, x: Any, dim: Any, index: Any, src: Any, reduce: str, include_self: bool, meta: Any,
             where: str) -> int:
    x, index, src = _checked(b, x, index, src, meta, where)
    shape, ishape = b.spec(x).shape, b.spec(index).shape
    if not isinstance(dim, int) or not -len(shape) <= dim < max(len(shape), 1) or len(ishape) != len(shape):
        raise UnsupportedOpError(f"scatter along dim {dim!r} by a rank-{len(ishape)} index at `{where}`")
    d = dim % len(shape)
    sshape = b.spec(src).shape
    if any(i > n for e, (i, n) in enumerate(zip(ishape, shape)) if e != d) or \
            (sshape and any(i > n for i, n in zip(ishape, sshape))):
        raise UnsupportedOpError(f"scatter index {list(ishape)} larger than its operands at `{where}`; eager raises")
    if reduce != "none" and meta.dtype == "bool":
        raise UnsupportedOpError(f"scatter reduction of bool at `{where}`; eager decides")
    # (eager's scatter reductions sum float16/bfloat16 in float32 and round once: opmath)
    return b.add("scatter", (x, index, src), TensorSpec(tuple(meta.shape), meta.dtype), dim=d, reduce=reduce,
                 include_self=include_self, checked=True, wrap=False, error="RuntimeError", opmath=True)


@handles("scatter")
def _scatter_rule(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """scatter(x, dim, index, src | value, reduce=None): ``reduce`` "add"/"multiply" is the old spelling of sum/prod."""
    src = arg(args, kwargs, 3, "src", kwargs.get("value"))
    reduce = kwargs.get("reduce")
    if reduce is not None and reduce not in ("add", "multiply"):
        raise UnsupportedOpError(f"scatter(reduce={reduce!r}) at `{where}`; eager decides")
    return _scatter(b, arg(args, kwargs, 0, "input", kwargs.get("self")), arg(args, kwargs, 1, "dim"),
                    arg(args, kwargs, 2, "index"), src, "none" if reduce is None else _REDUCE[reduce], True, meta,
                    where)


@handles("scatter_add")
def _scatter_add(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    return _scatter(b, arg(args, kwargs, 0, "input", kwargs.get("self")), arg(args, kwargs, 1, "dim"),
                    arg(args, kwargs, 2, "index"), arg(args, kwargs, 3, "src"), "sum", True, meta, where)


@handles("scatter_reduce")
def _scatter_reduce(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    reduce = arg(args, kwargs, 4, "reduce")
    include_self = arg(args, kwargs, 5, "include_self", True)
    if reduce not in ("sum", "prod", "amax", "amin") or not isinstance(include_self, bool):
        raise UnsupportedOpError(f"scatter_reduce(reduce={reduce!r}) at `{where}`; eager PyTorch runs it")
    if meta is not None and meta.dtype == "bool":
        raise UnsupportedOpError(f"scatter_reduce of bool at `{where}`; eager decides")
    return _scatter(b, arg(args, kwargs, 0, "input", kwargs.get("self")), arg(args, kwargs, 1, "dim"),
                    arg(args, kwargs, 2, "index"), arg(args, kwargs, 3, "src"), reduce, include_self, meta, where)


def _put(b: Any, x: Any, dim: int, index: Any, values: Any, accumulate: bool, meta: Any, where: str, *,
         checked: bool, wrap: bool, error: str, opmath: bool = False) -> int:
    """x with ``values`` written (or added) along ``dim`` at the positions ``index`` names. ``opmath``: eager sums
    float16/bfloat16 in float32 and rounds once (``index_add``), where ``index_put`` rounds at every add."""
    x, index, values = _checked(b, x, index, values, meta, where)
    shape, ishape = b.spec(x).shape, b.spec(index).shape
    want = shape[:dim] + ishape + shape[dim + 1:]
    vshape = b.spec(values).shape
    if len(vshape) > len(want) or any(v not in (1, w) for v, w in zip(reversed(vshape), reversed(want))):
        raise UnsupportedOpError(f"index_put of {list(vshape)} values at {list(ishape)} positions of {list(shape)} "
                                 f"at `{where}`; eager decides")
    if accumulate and meta.dtype == "bool":
        raise UnsupportedOpError(f"accumulating index_put of bool at `{where}`; eager decides")
    return b.add("index_put", (x, index, values), TensorSpec(tuple(meta.shape), meta.dtype), dim=dim,
                 reduce="sum" if accumulate else "none", include_self=True, checked=checked, wrap=wrap, error=error,
                 opmath=opmath)


def _one_index(indices: Any, where: str) -> Any:
    if not isinstance(indices, (list, tuple)) or len(indices) != 1 or not is_node(indices[0]):
        raise UnsupportedOpError(f"index_put by {indices!r} at `{where}`; only one index tensor on dim 0 is a scatter")
    return indices[0]


@handles("index_put")
def _index_put(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """index_put(x, (index,), values, accumulate=False): negative indices count from the end, as ``x[index]``."""
    index = _one_index(arg(args, kwargs, 1, "indices"), where)
    if b.spec(int(index)).dtype == "bool":
        raise UnsupportedOpError(f"index_put by a mask at `{where}`; eager PyTorch runs it")
    return _put(b, arg(args, kwargs, 0, "input", kwargs.get("self")), 0, index, arg(args, kwargs, 2, "values"),
                bool(arg(args, kwargs, 3, "accumulate", False)), meta, where, checked=True, wrap=True, error="IndexError")


@handles("_unsafe_index_put")
def _unsafe_index_put(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    index = _one_index(arg(args, kwargs, 1, "indices"), where)
    return _put(b, args[0], 0, index, args[2], bool(arg(args, kwargs, 3, "accumulate", False)), meta, where,
                checked=False, wrap=True, error="IndexError")


@handles("_unsafe_masked_index_put_accumulate")
def _masked_index_put(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """The embedding backward's ``x.index_put(clamp(index), values.masked_fill(~mask, 0), accumulate=True)``:
    unchecked (the index is clamped, as ATen's decomposition clamps it)."""
    x, mask, indices, values = args
    index = _one_index(indices, where)
    if not (is_node(mask) and is_node(values)) or meta is None:
        raise UnsupportedOpError(f"masked index_put of {values!r} at `{where}`")
    values = cast_to(b, int(values), meta.dtype)
    masked = ref(b.elementwise("where", (int(mask), values, b.const(0, meta.dtype)), meta.dtype))
    return _put(b, x, 0, index, masked, True, meta, where, checked=False, wrap=True, error="IndexError")


@handles("embedding_dense_backward")
def _embedding_backward(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq): ATen's CPU kernel
    adds ``grad[i]`` into row ``indices[i]`` of a zero table in increasing ``i``, skipping ``padding_idx``, each
    add rounded to the dtype (as index_put's); the forward already raised for an index out of range."""
    grad, indices, rows, padding, by_freq = (arg(args, kwargs, i, n) for i, n in enumerate(
        ("grad_output", "indices", "num_weights", "padding_idx", "scale_grad_by_freq")))
    if by_freq or meta is None or not (is_node(grad) and is_node(indices)) or not isinstance(padding, int):
        raise UnsupportedOpError(f"embedding backward (scale_grad_by_freq={by_freq!r}) at `{where}`; eager runs it")
    grad, indices = int(grad), int(indices)
    keep = b.elementwise("ne", (indices, b.const(padding, b.spec(indices).dtype)))
    column = b.add("reshape", (keep,), TensorSpec(b.spec(keep).shape + (1,), "bool"))
    masked = ref(b.elementwise("where", (column, cast_to(b, grad, meta.dtype), b.const(0, meta.dtype)), meta.dtype))
    zeros = ref(b.add("cast", (b.const(0, meta.dtype),), TensorSpec(tuple(meta.shape), meta.dtype)))
    return _put(b, zeros, 0, ref(indices), masked, True, meta, where, checked=False, wrap=True, error="IndexError")


@handles("index_add")
def _index_add(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """index_add(x, dim, index, source, alpha=1): ``index`` is 1-d; a negative index is out of range in eager."""
    x, dim, index, source = (arg(args, kwargs, i, n) for i, n in enumerate(("input", "dim", "index", "source")))
    alpha = arg(args, kwargs, 4, "alpha", 1)
    if not is_node(x) or not isinstance(dim, int) or not is_node(source) or not is_node(index):
        raise UnsupportedOpError(f"index_add of {source!r} at `{where}`")
    rank = b.spec(int(x)).rank
    if b.spec(int(index)).rank != 1 or not -max(rank, 1) <= dim < max(rank, 1) or rank == 0:
        raise UnsupportedOpError(f"index_add along {dim} by a {list(b.spec(int(index)).shape)} index at `{where}`")
    if alpha != 1:
        source = ref(b.elementwise("mul", (int(source), b.scalar_or_node(alpha, int(source)))))
    # eager's 1-d kernel raises IndexError ("index out of range in self"), the general one RuntimeError
    return _put(b, x, dim % rank, index, source, True, meta, where, checked=True, wrap=False,
                error="IndexError" if rank == 1 else "RuntimeError", opmath=True)


__all__: list[str] = []
