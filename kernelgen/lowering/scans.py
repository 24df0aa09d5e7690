"""Lowering handlers for the cumulative ops (``torch.cumsum``, ``torch.cumprod``, ``torch.logcumsumexp`` and their
ATen overloads) to the IR's scans (``kernelgen.ir.graph.SCAN_OPS``), which the scan template renders (``kernelgen.templates.scan``).

Registered in the table of ``kernelgen.lowering.rules``.
"""

from __future__ import annotations

from typing import Any

from kernelgen.errors import UnsupportedOpError
from kernelgen.ir.values import TensorSpec
from kernelgen.lowering.rules import arg, cast_to, handles, is_node


def _scan(op: str) -> Any:
    """cumsum/cumprod(x, dim, dtype=None): eager converts x to the result dtype first (integers and bool to
    int64 unless ``dtype`` says otherwise), then scans; a scan over a size-1 dim is that conversion."""

    def handler(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
        x, dim = arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "dim")
        if meta is None or not is_node(x) or not isinstance(dim, int) or isinstance(dim, bool):
            raise UnsupportedOpError(f"{op} of {x!r} over dim={dim!r} at `{where}`")
        if meta.dtype == "bool":
            raise UnsupportedOpError(f"{op} to bool at `{where}`; eager PyTorch runs it")
        x = int(x)
        shape = b.spec(x).shape
        rank = len(shape)
        if rank == 0 or shape[dim % rank] == 1:
            return cast_to(b, x, meta.dtype)
        return b.add(op, (cast_to(b, x, meta.dtype),), TensorSpec(shape, meta.dtype), dim=dim % rank)

    return handler


handles("cumsum")(_scan("cumsum"))
handles("cumprod")(_scan("cumprod"))


@handles("logcumsumexp")
def _logcumsumexp(b: Any, args: tuple, kwargs: dict, meta: Any, where: str) -> int:
    """logcumsumexp(x, dim): float only (eager refuses integers); a size-1 dim is the value itself."""
    if meta is None or not (meta.dtype.startswith("float") or meta.dtype == "bfloat16"):
        raise UnsupportedOpError(f"logcumsumexp to {getattr(meta, 'dtype', None)} at `{where}`; eager decides")
    return _scan("logcumsumexp")(b, args, kwargs, meta, where)


__all__: list[str] = []
