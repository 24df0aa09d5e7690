"""Eager's index errors for kernels that gather or scatter rows: checked on the index tensors before the kernel runs.

A ``gather`` node (``F.embedding``, ``x[index]``; ``kernelgen.ir.graph.MOVE_OPS``) reads row ``index`` of its
source; a checked ``scatter``/``index_put`` node (``kernelgen.ir.graph.SCATTER_OPS``) writes there. Their kernels
clamp the index so nothing is touched out of bounds, but eager raises for an index out of range (``IndexError``,
or ``RuntimeError`` for scatter and index_add: the node's ``error``), and eager's error is the contract: so every
launch of such a kernel first checks the index inputs' range (one min and one max over the index tensor,
a few microseconds for the index tensors of embedding lookups) and raises eager's error type.

Reading the range is a host sync, which a stream being captured into a CUDA graph refuses
(``kernelgen.frontend.cuda_graphs``): there the check asserts on the device instead (``torch._assert_async``, no
sync, replayed with the graph), as eager's own CUDA kernels do for an index out of range. Uncaptured calls, the
first call of every captured graph among them, keep eager's Python error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernelgen.templates.indexing import input_view

# (kernel argument holding the index, size of the dim it indexes, negative indices wrap, eager's error, that dim)
Check = tuple[int, int, bool, str, int]
_ERRORS = {"IndexError": IndexError, "RuntimeError": RuntimeError}


def index_checks(graph: Any) -> tuple[Check, ...]:
    """The range checks the gathers and checked scatters of ``graph`` need (empty for a graph without them)."""
    checks = []
    for node in graph.nodes:
        if node.op == "gather":  # one index per leading dim of the source
            for dim, index in enumerate(node.inputs[1:]):
                view = input_view(graph, index)
                if view is not None:
                    checks.append((view[0], graph.nodes[node.inputs[0]].spec.shape[dim], bool(node.attr("wrap", False)),
                                   "IndexError", dim))
            continue
        if node.op == "take_along":  # torch.gather: no negative index, RuntimeError
            dim, error, wrap = int(node.attr("dim")), "RuntimeError", False
        elif node.op in ("scatter", "index_put") and node.attr("checked", False):
            dim, error, wrap = int(node.attr("dim")), node.attr("error", "IndexError"), bool(node.attr("wrap", False))
        else:
            continue
        view = input_view(graph, node.inputs[1])
        if view is None:  # the templates refuse a computed index (kernelgen.templates.moves, .scatter)
            continue
        checks.append((view[0], graph.nodes[node.inputs[0]].spec.shape[dim], wrap, error, dim))
    return tuple(dict.fromkeys(checks))


def check(args: tuple, checks: tuple[Check, ...]) -> None:
    """Raise eager's error when an index argument holds a position outside the dim it indexes."""
    for arg, rows, wrap, error, dim in checks:
        index = args[arg]
        if index.numel() == 0:
            continue
        if capturing(index):
            import torch

            low = -rows if wrap else 0
            torch._assert_async(((index >= low) & (index < rows)).all(),
                                f"index out of bounds for dimension {dim} with size {rows}")
            continue
        low, high = int(index.min()), int(index.max())
        if high >= rows or low < (-rows if wrap else 0):
            bad = high if high >= rows else low
            raise _ERRORS[error](f"index {bad} is out of bounds for dimension {dim} with size {rows}")


def capturing(index: Any) -> bool:
    """Whether ``index`` lives on a GPU whose current stream is being captured into a CUDA graph."""
    if not index.is_cuda:
        return False
    import torch

    return torch.cuda.is_current_stream_capturing()


def guarded(launch: Callable[..., None], checks: tuple[Check, ...]) -> Callable[..., None]:
    """``launch`` preceded by the range checks (``launch`` itself when there are none)."""
    if not checks:
        return launch

    def checked_launch(*args: Any) -> None:
        check(args, checks)
        launch(*args)

    return checked_launch


__all__ = ["capturing", "check", "guarded", "index_checks"]
