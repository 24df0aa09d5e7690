"""Lowering handlers for data movement that templates render as index arithmetic: ``torch.cat`` (``aten.cat``),
constant padding (``F.pad(mode="constant")``, ``aten.constant_pad_nd``), row gathers (``F.embedding``,
``aten.embedding``, ``aten.index`` with index tensors on the leading dims), the functional writes into views
(``slice_scatter``, ``select_scatter``, ``diagonal_scatter``, ``copy``) and ``diagonal_copy``, to the IR's moves.

Registered in the table of ``kernelgen.lowering.rules``. The result's
dtype and shape are the node's meta (eager's type promotion over every operand); what eager would refuse or
treat specially (legacy empty 1-D operands, a fill value the dtype cannot hold) is left to eager.
"""

from __future__ import annotations

from typing import Any

from kernelgen.errors import KernelgenError, UnsupportedOpError
from kernelgen.ir.graph import broadcast_shapes, encode_pads
from kernelgen.ir.values import TensorSpec
from kernelgen.lowering.rules import arg, cast_to, handles, is_node


@handles("cat", "concat", "concatenate")
def _cat(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    tensors = arg(args, kwargs, 0, "tensors")
    dim = arg(args, kwargs, 1, "dim", 0)
    if kwargs.get("axis") is not None:
        dim = kwargs["axis"]
    if meta is None or not isinstance(tensors, (list, tuple)) or not all(is_node(t) for t in tensors) or not tensors:
        raise UnsupportedOpError(f"cat of something other than a list of tensors at `{where}`")
    rank = len(meta.shape)
    if rank == 0 or any(b.spec(int(t)).rank != rank for t in tensors):
        # eager skips 1-D empty operands of any other rank (legacy); so does not the index arithmetic
        raise UnsupportedOpError(f"cat of tensors of different ranks at `{where}`; eager PyTorch runs it")
    dim = int(dim) % rank
    parts = [cast_to(b, int(t), meta.dtype) for t in tensors if b.spec(int(t)).shape[dim] != 0]
    if not parts:
        raise UnsupportedOpError(f"cat of empty tensors at `{where}`; eager PyTorch makes the empty result")
    if len(parts) == 1:
        return parts[0]
    return b.add("cat", parts, TensorSpec(tuple(meta.shape), meta.dtype), dim=dim)


def _pad(b: Any, x: Any, pad: Any, value: Any, meta: Any, where: str) -> int:
    if meta is None or not is_node(x) or not isinstance(pad, (list, tuple)) or len(pad) % 2:
        raise UnsupportedOpError(f"constant pad of {x!r} by {pad!r} at `{where}`")
    x = int(x)
    spec = b.spec(x)
    if len(pad) // 2 > spec.rank or any(not isinstance(p, int) for p in pad) or 0 in meta.shape:
        raise UnsupportedOpError(f"constant pad by {list(pad)} of a {list(spec.shape)} tensor at `{where}`; "
                                 "eager PyTorch runs it")
    pairs = [(0, 0)] * spec.rank
    for k in range(len(pad) // 2):  # pad lists (before, after) pairs from the last dim backwards
        pairs[spec.rank - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    if all(p == (0, 0) for p in pairs):
        return x
    value = 0 if value is None else value
    dtype = meta.dtype
    if is_node(value) or not isinstance(value, (bool, int, float)):
        raise UnsupportedOpError(f"pad value {value!r} at `{where}` is not a Python number")
    if dtype == "bool" and value not in (0, 1) or \
            not (dtype.startswith("float") or dtype == "bfloat16") and float(value) != int(value):
        raise UnsupportedOpError(f"pad value {value!r} does not fit {dtype} at `{where}`; eager PyTorch decides")
    if not (dtype.startswith("float") or dtype == "bfloat16"):
        value = bool(value) if dtype == "bool" else int(value)
    fill = b.const(value, dtype)
    return b.add("pad", (cast_to(b, x, dtype), fill), TensorSpec(tuple(meta.shape), dtype), pads=encode_pads(pairs))


@handles("constant_pad_nd")
def _constant_pad_nd(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    return _pad(b, arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "pad"), arg(args, kwargs, 2, "value", 0),
                meta, where)


@handles("pad")
def _f_pad(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    mode = arg(args, kwargs, 2, "mode", "constant")
    if mode != "constant":
        raise UnsupportedOpError(f"F.pad mode {mode!r} at `{where}`; only mode='constant' is index arithmetic here")
    return _pad(b, arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "pad"), arg(args, kwargs, 3, "value"),
                meta, where)


def _gather(b: Any, x: Any, indices: Any, meta: Any, where: str, wrap: bool) -> int:
    """``x[i0, i1, ...]``: the element of ``x``'s leading dims that the index tensors name (broadcast together, as
    advanced indexing does), at every position of the other dims; one index is a row gather. ``wrap``: a negative
    index counts from the end (``x[index]``), else it is out of range (``F.embedding``). An index out of range
    raises eager's ``IndexError`` before the kernel runs (``kernelgen.runtime.bounds``)."""
    if meta is None or not is_node(x) or not indices or not all(is_node(i) for i in indices) \
            or b.spec(int(x)).rank < len(indices):
        raise UnsupportedOpError(f"gather of {x!r} by {indices!r} at `{where}`")
    x, indices = int(x), [int(i) for i in indices]
    for i in indices:
        if b.spec(i).dtype not in ("int32", "int64"):
            raise UnsupportedOpError(f"indexing by a {b.spec(i).dtype} tensor at `{where}`; eager PyTorch runs it")
    try:
        lead = broadcast_shapes(*(b.spec(i).shape for i in indices))
    except KernelgenError:
        raise UnsupportedOpError(f"index tensors that do not broadcast at `{where}`; eager raises") from None
    shape = lead + b.spec(x).shape[len(indices):]
    if tuple(meta.shape) != shape or 0 in shape:
        raise UnsupportedOpError(f"gather of shape {list(meta.shape)} at `{where}`; eager PyTorch runs it")
    return b.add("gather", (cast_to(b, x, meta.dtype), *indices), TensorSpec(shape, meta.dtype), wrap=wrap)


@handles("embedding")
def _embedding(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """F.embedding(input, weight, padding_idx, max_norm, ...): max_norm renormalises the weight in place."""
    if arg(args, kwargs, 3, "max_norm") is not None:
        raise UnsupportedOpError(f"embedding with max_norm at `{where}` writes into the weight; eager PyTorch runs it")
    return _gather(b, arg(args, kwargs, 1, "weight"), [arg(args, kwargs, 0, "input")], meta, where, False)


@handles("aten.embedding")
def _aten_embedding(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    return _gather(b, arg(args, kwargs, 0, "weight"), [arg(args, kwargs, 1, "indices")], meta, where, False)


@handles("aten.index")
def _aten_index(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """``x[i0, i1, ...]`` with index tensors on the leading dims (Mistral's sliding-window mask reads positions
    by ``[batch index, query index]``); a ``None`` among them (``x[:, i]``) or a bool mask stays eager's."""
    indices = arg(args, kwargs, 1, "indices")
    if not isinstance(indices, (list, tuple)) or not indices or any(i is None for i in indices):
        raise UnsupportedOpError(f"indexing by {indices!r} at `{where}`; index tensors on the leading dims, with "
                                 "no None (a full slice) among them, are a gather")
    return _gather(b, arg(args, kwargs, 0, "self"), list(indices), meta, where, True)


# ------------------------------------------------------------------- writes into views, functionalized
# (AOTAutograd turns ``cache[:, :, pos] = new`` into slice_scatter(cache, copy(slice, new)), ``x[:, 2] = y`` into
# select_scatter, ``x.diagonal().copy_(y)`` into diagonal_scatter: all index arithmetic over ``x``'s coordinates)

def _operand(b: Any, value: Any, dtype: str, where: str) -> int:
    if not is_node(value):
        raise UnsupportedOpError(f"scatter into a view of {value!r} at `{where}`")
    return cast_to(b, int(value), dtype)


def _write_operands(b: Any, args: tuple, kwargs: dict, meta: Any, where: str, name: str) -> tuple[int, int]:
    """``(x, src)`` of a functional write into a view of ``x``, in the result's dtype."""
    if meta is None or 0 in meta.shape:
        raise UnsupportedOpError(f"{name} of an empty tensor at `{where}`; eager PyTorch runs it")
    return (_operand(b, arg(args, kwargs, 0, "input"), meta.dtype, where),
            _operand(b, arg(args, kwargs, 1, "src"), meta.dtype, where))


def _dim(value: Any, rank: int, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not -rank <= value < rank:
        raise UnsupportedOpError(f"dim {value!r} of a rank-{rank} tensor at `{where}`; eager decides")
    return value % rank


@handles("slice_scatter")
def _slice_scatter(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """slice_scatter(x, src, dim=0, start=None, end=None, step=1): the slice's bounds as eager normalises them."""
    x, src = _write_operands(b, args, kwargs, meta, where, "slice_scatter")
    shape = b.spec(x).shape
    d = _dim(arg(args, kwargs, 2, "dim", 0), len(shape), where)
    start, end, step = (arg(args, kwargs, i, n, v) for i, n, v in ((3, "start", None), (4, "end", None), (5, "step", 1)))
    if not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in (start, end, step)) or step < 1:
        raise UnsupportedOpError(f"slice_scatter bounds {start!r}:{end!r}:{step!r} at `{where}`; eager decides")
    start, end, _ = slice(start, end, step).indices(shape[d])
    count = len(range(start, end, step))
    if b.spec(src).shape[d] != count or count == 0:
        raise UnsupportedOpError(f"slice_scatter of {list(b.spec(src).shape)} into {count} positions at `{where}`")
    if count == shape[d] and step == 1:  # the whole of x replaced: src (broadcast to x's shape)
        return src if b.spec(src).shape == shape else b.add("cast", (src,), TensorSpec(shape, meta.dtype))
    return b.add("slice_scatter", (x, src), TensorSpec(tuple(meta.shape), meta.dtype), dim=d, start=start, end=end,
                 step=step)


@handles("select_scatter")
def _select_scatter(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x, src = _write_operands(b, args, kwargs, meta, where, "select_scatter")
    shape = b.spec(x).shape
    d = _dim(arg(args, kwargs, 2, "dim"), len(shape), where)
    index = arg(args, kwargs, 3, "index")
    if not isinstance(index, int) or isinstance(index, bool) or not -shape[d] <= index < shape[d]:
        raise UnsupportedOpError(f"select_scatter at index {index!r} of a dim of {shape[d]} at `{where}`; eager raises")
    return b.add("select_scatter", (x, src), TensorSpec(tuple(meta.shape), meta.dtype), dim=d, index=index % shape[d])


def _diagonal_dims(b: Any, x: int, args: tuple, kwargs: dict, first: int, where: str) -> tuple[int, int, int]:
    rank = b.spec(x).rank
    offset = arg(args, kwargs, first, "offset", 0)
    d1 = _dim(arg(args, kwargs, first + 1, "dim1", 0), rank, where)
    d2 = _dim(arg(args, kwargs, first + 2, "dim2", 1), rank, where)
    if not isinstance(offset, int) or isinstance(offset, bool) or d1 == d2:
        raise UnsupportedOpError(f"diagonal({offset!r}, {d1}, {d2}) at `{where}`; eager decides")
    return offset, d1, d2


@handles("diagonal_copy")
def _diagonal_copy(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    if meta is None or 0 in meta.shape:
        raise UnsupportedOpError(f"an empty diagonal at `{where}`; eager PyTorch makes it")
    x = _operand(b, arg(args, kwargs, 0, "input"), meta.dtype, where)
    offset, d1, d2 = _diagonal_dims(b, x, args, kwargs, 1, where)
    return b.add("diagonal", (x,), TensorSpec(tuple(meta.shape), meta.dtype), offset=offset, dim1=d1, dim2=d2)


@handles("diagonal_scatter")
def _diagonal_scatter(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x, src = _write_operands(b, args, kwargs, meta, where, "diagonal_scatter")
    offset, d1, d2 = _diagonal_dims(b, x, args, kwargs, 2, where)
    if 0 in b.spec(src).shape:
        return x
    return b.add("diagonal_scatter", (x, src), TensorSpec(tuple(meta.shape), meta.dtype), offset=offset, dim1=d1,
                 dim2=d2)


@handles("gather")
def _take_along(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """torch.gather(x, dim, index): ``x`` read along ``dim`` where ``index`` says (same rank; an index out of
    range raises eager's RuntimeError before the kernel runs)."""
    x, dim, index = arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "dim"), arg(args, kwargs, 2, "index")
    if meta is None or not (is_node(x) and is_node(index)) or kwargs.get("sparse_grad"):
        raise UnsupportedOpError(f"gather of {x!r} by {index!r} at `{where}`; eager PyTorch runs it")
    x, index = int(x), int(index)
    shape, ishape = b.spec(x).shape, b.spec(index).shape
    if (b.spec(index).dtype != "int64" and b.spec(index).numel) or len(shape) != len(ishape) or not shape \
            or 0 in shape:  # (eager takes an empty index of any integer dtype: an empty result)
        raise UnsupportedOpError(f"gather of {list(shape)} by a {b.spec(index).dtype}{list(ishape)} index at "
                                 f"`{where}`; eager decides")
    d = _dim(dim, len(shape), where)
    if any(i > n for e, (i, n) in enumerate(zip(ishape, shape)) if e != d):
        raise UnsupportedOpError(f"gather index {list(ishape)} larger than {list(shape)} at `{where}`; eager raises")
    return b.add("take_along", (cast_to(b, x, meta.dtype), index), TensorSpec(tuple(meta.shape), meta.dtype), dim=d)


@handles("unfold_copy")
def _unfold_copy(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    x, dim, size, step = (arg(args, kwargs, i, n) for i, n in enumerate(("input", "dimension", "size", "step")))
    if meta is None or not is_node(x) or 0 in meta.shape or not all(isinstance(v, int) for v in (size, step)):
        raise UnsupportedOpError(f"unfold_copy of {x!r} at `{where}`; eager PyTorch runs it")
    x = int(x)
    rank = b.spec(x).rank
    if rank == 0 or step < 1:
        raise UnsupportedOpError(f"unfold_copy of a rank-{rank} tensor at `{where}`; eager decides")
    return b.add("unfold", (cast_to(b, x, meta.dtype),), TensorSpec(tuple(meta.shape), meta.dtype),
                 dim=_dim(dim, rank, where), size=size, step=step)


@handles("aten.copy")
def _copy(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """The functional copy(x, src): ``src`` broadcast to ``x``'s shape in ``x``'s dtype (what ``x.copy_(src)``
    writes); ``x``'s values are not read."""
    if meta is None or not is_node(args[1]):
        raise UnsupportedOpError(f"copy of {args[1]!r} at `{where}`")
    src = int(args[1])
    if b.spec(src).shape == tuple(meta.shape):
        return cast_to(b, src, meta.dtype)
    return b.add("cast", (src,), TensorSpec(tuple(meta.shape), meta.dtype))


__all__: list[str] = []

