"""Lowering of sorting and searching: ``torch.sort`` / ``Tensor.sort`` / ``torch.argsort`` and ATen's ``sort``
(``.default`` and ``.stable``) to the IR's ``sort`` / ``argsort`` (``kernelgen.ir.graph.SORT_OPS``), which the sort
template renders; ``torch.bucketize`` and ``torch.searchsorted`` with 1-d boundaries to ``bucketize``
(``SEARCH_OPS``), which the search template renders.

Registered in the table of ``kernelgen.lowering.rules``. The IR's sort is stable. Eager's ``stable=False`` sort
(the default, and ATen's ``sort.default``) orders the positions of equal keys its own way (on CPU: stably up to 16
elements a row, otherwise not, as an introsort does), which no kernel can promise to copy: there only the values
are lowered (equal keys are equal values; -0.0 and 0.0 may trade places, which compare equal), and a use of the
positions runs eagerly (``getitem`` refuses the missing one).
"""

from __future__ import annotations

from typing import Any

from kernelgen.errors import UnsupportedOpError
from kernelgen.ir.values import TensorSpec
from kernelgen.lowering.rules import arg, cast_to, handles, is_node, ref

_DTYPE_ORDER = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")


def _sort_nodes(b: Any, args: tuple, kwargs: dict, where: str) -> tuple[int, int, bool]:
    """(values, indices) of sort(x, dim=-1, descending=False[, stable]) as the torch function and both ATen
    overloads spell it (``sort.stable`` takes everything by keyword), and whether the call asked for a stable sort."""
    x = arg(args, kwargs, 0, "input", kwargs.get("self"))
    dim, descending = arg(args, kwargs, 1, "dim", -1), arg(args, kwargs, 2, "descending", False)
    if not is_node(x) or not isinstance(dim, int) or isinstance(dim, bool) or not isinstance(descending, bool):
        raise UnsupportedOpError(f"sort of {x!r} over dim={dim!r} at `{where}`; eager decides")
    stable = arg(args, kwargs, 3, "stable", False)
    if not isinstance(stable, (bool, type(None))):
        raise UnsupportedOpError(f"sort with stable={stable!r} at `{where}`; eager decides")
    x = int(x)
    spec = b.spec(x)
    if spec.rank and not -spec.rank <= dim < spec.rank or not spec.rank and dim not in (0, -1):
        raise UnsupportedOpError(f"sort over dim={dim} of a rank-{spec.rank} tensor at `{where}`; eager raises")
    if spec.rank == 0 or spec.shape[dim % spec.rank] == 1:  # one element per row: itself, at position 0
        zeros = b.add("cast", (b.const(0, "int64"),), TensorSpec(spec.shape, "int64"))
        return b.elementwise("clone", (x,)), zeros, True  # (one element: any sort is stable)
    d = dim % spec.rank
    return (b.add("sort", (x,), TensorSpec(spec.shape, spec.dtype), dim=d, descending=descending),
            b.add("argsort", (x,), TensorSpec(spec.shape, "int64"), dim=d, descending=descending), bool(stable))


@handles("sort")
def _sort(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> tuple:
    values, indices, stable = _sort_nodes(b, args, kwargs, where)
    return (ref(values), ref(indices) if stable else None)


@handles("argsort")
def _argsort(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> Any:
    _, indices, stable = _sort_nodes(b, args, kwargs, where)
    if not stable:
        raise UnsupportedOpError(f"argsort with stable=False at `{where}`: eager's order of equal keys is its own; "
                                 "eager runs it (stable=True is lowered)")
    return ref(indices)


def _common(a: str, c: str) -> str:
    """``torch.result_type`` of two tensors of the same category rank (the searches' comparison dtype)."""
    kind = {d: (0 if d == "bool" else 1 if not d.startswith(("float", "bfloat")) else 2) for d in (a, c)}
    if kind[a] != kind[c]:
        return a if kind[a] > kind[c] else c
    if {a, c} == {"float16", "bfloat16"}:
        return "float32"
    if {a, c} == {"uint8", "int8"}:
        return "int16"
    return max(a, c, key=_DTYPE_ORDER.index)


def _search(b: Any, x: Any, boundaries: Any, right: Any, side: Any, out_int32: Any, sorter: Any, where: str) -> int:
    if side is not None:
        if side not in ("left", "right") or (right and side == "left"):
            raise UnsupportedOpError(f"searchsorted side={side!r} right={right!r} at `{where}`; eager raises")
        right = side == "right"
    if sorter is not None or not is_node(x) or not is_node(boundaries) or not isinstance(right, bool) \
            or not isinstance(out_int32, bool):
        raise UnsupportedOpError(f"bucketize/searchsorted of {x!r} at `{where}` (sorter, scalars); eager runs it")
    x, boundaries = int(x), int(boundaries)
    xs, bs = b.spec(x), b.spec(boundaries)
    if bs.rank != 1 or "bool" in (xs.dtype, bs.dtype):
        raise UnsupportedOpError(f"bucketize of {xs.dtype} in {bs.dtype}{list(bs.shape)} boundaries at `{where}`; "
                                 "only 1-d boundaries of a number dtype; eager runs it")
    dtype = _common(xs.dtype, bs.dtype)
    if dtype != bs.dtype:  # the kernel compares against the boundaries as stored
        raise UnsupportedOpError(f"bucketize of {xs.dtype} in {bs.dtype} boundaries at `{where}` compares in {dtype}; "
                                 "eager runs it")
    return b.add("bucketize", (cast_to(b, x, dtype), boundaries), TensorSpec(xs.shape, "int32" if out_int32 else "int64"),
                 right=right)


@handles("bucketize")
def _bucketize(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> Any:
    """bucketize(input, boundaries, *, out_int32=False, right=False)."""
    return ref(_search(b, arg(args, kwargs, 0, "input", kwargs.get("self")), arg(args, kwargs, 1, "boundaries"),
                       kwargs.get("right", False), None, kwargs.get("out_int32", False), None, where))


@handles("searchsorted")
def _searchsorted(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> Any:
    """searchsorted(sorted_sequence, input, *, out_int32, right, side, sorter) with a 1-d sequence: bucketize."""
    return ref(_search(b, arg(args, kwargs, 1, "input", kwargs.get("self")), arg(args, kwargs, 0, "sorted_sequence"),
                       kwargs.get("right", False), kwargs.get("side"), kwargs.get("out_int32", False),
                       kwargs.get("sorter"), where))


__all__: list[str] = []
