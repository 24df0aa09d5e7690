"""Lowering handlers for data movement that templates render as index arithmetic: ``torch.cat`` (``aten.cat``),
constant padding (``F.pad(mode="constant")``, ``aten.constant_pad_nd``) and row gathers (``F.embedding``,
``aten.embedding``, ``aten.index`` with one index tensor on dim 0), to the IR's ``cat``, ``pad`` and ``gather``.

Registered in the table of ``kernelgen.lowering.rules``. The result's
dtype and shape are the node's meta (eager's type promotion over every operand); what eager would refuse or
treat specially (legacy empty 1-D operands, a fill value the dtype cannot hold) is left to eager.
"""

from __future__ import annotations

from typing import Any

from kernelgen.errors import UnsupportedOpError
from kernelgen.ir.graph import encode_pads
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


def _gather(b: Any, x: Any, index: Any, meta: Any, where: str, wrap: bool) -> int:
    """Rows ``x[index]``; ``wrap``: a negative index counts from the end (``x[index]``), else it is out of range
    (``F.embedding``). An index out of range raises eager's ``IndexError`` before the kernel runs
    (``kernelgen.runtime.bounds``)."""
    if meta is None or not (is_node(x) and is_node(index)) or b.spec(int(x)).rank == 0:
        raise UnsupportedOpError(f"row gather of {x!r} by {index!r} at `{where}`")
    x, index = int(x), int(index)
    if b.spec(index).dtype not in ("int32", "int64"):
        raise UnsupportedOpError(f"indexing by a {b.spec(index).dtype} tensor at `{where}`; eager PyTorch runs it")
    shape = b.spec(index).shape + b.spec(x).shape[1:]
    if tuple(meta.shape) != shape or 0 in shape:
        raise UnsupportedOpError(f"row gather of shape {list(meta.shape)} at `{where}`; eager PyTorch runs it")
    return b.add("gather", (cast_to(b, x, meta.dtype), index), TensorSpec(shape, meta.dtype), wrap=wrap)


@handles("embedding")
def _embedding(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """F.embedding(input, weight, padding_idx, max_norm, ...): max_norm renormalises the weight in place."""
    if arg(args, kwargs, 3, "max_norm") is not None:
        raise UnsupportedOpError(f"embedding with max_norm at `{where}` writes into the weight; eager PyTorch runs it")
    return _gather(b, arg(args, kwargs, 1, "weight"), arg(args, kwargs, 0, "input"), meta, where, False)


@handles("aten.embedding")
def _aten_embedding(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    return _gather(b, arg(args, kwargs, 0, "weight"), arg(args, kwargs, 1, "indices"), meta, where, False)


@handles("aten.index")
def _aten_index(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    indices = arg(args, kwargs, 1, "indices")
    if not isinstance(indices, (list, tuple)) or len(indices) != 1:
        raise UnsupportedOpError(f"indexing by {indices!r} at `{where}`; only one index tensor on dim 0 is a gather")
    return _gather(b, arg(args, kwargs, 0, "self"), indices[0], meta, where, True)


__all__: list[str] = []

