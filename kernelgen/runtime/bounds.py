"""Eager's index errors for kernels that gather rows: checked on the index tensors before the kernel runs.

A ``gather`` node (``F.embedding``, ``x[index]``; ``kernelgen.ir.graph.MOVE_OPS``) reads row ``index`` of its
source. Its kernels clamp the index so nothing is read out of bounds, but eager raises ``IndexError`` for an
index out of range (and ``F.embedding`` for any negative one), and eager's error is the contract: so every
launch of such a kernel first checks the index inputs' range (one min and one max over the index tensor,
a few microseconds for the index tensors of embedding lookups) and raises eager's error type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernelgen.templates.indexing import input_view

Check = tuple[int, int, bool]  # (kernel argument holding the index, rows of the source, negative indices wrap)


def index_checks(graph: Any) -> tuple[Check, ...]:
    """The range checks the gathers of ``graph`` need (empty for a graph without gathers)."""
    checks = []
    for node in graph.nodes:
        if node.op != "gather":
            continue
        view = input_view(graph, node.inputs[1])
        if view is None:  # the templates refuse a computed index (kernelgen.templates.moves)
            continue
        checks.append((view[0], graph.nodes[node.inputs[0]].spec.shape[0], bool(node.attr("wrap", False))))
    return tuple(dict.fromkeys(checks))


def check(args: tuple, checks: tuple[Check, ...]) -> None:
    """Raise eager's ``IndexError`` when an index argument holds a row outside its source."""
    for arg, rows, wrap in checks:
        index = args[arg]
        if index.numel() == 0:
            continue
        low, high = int(index.min()), int(index.max())
        if high >= rows or low < (-rows if wrap else 0):
            bad = high if high >= rows else low
            raise IndexError(f"index {bad} is out of bounds for dimension 0 with size {rows}")


def guarded(launch: Callable[..., None], checks: tuple[Check, ...]) -> Callable[..., None]:
    """``launch`` preceded by the range checks (``launch`` itself when there are none)."""
    if not checks:
        return launch

    def checked_launch(*args: Any) -> None:
        check(args, checks)
        launch(*args)

    return checked_launch


__all__ = ["check", "guarded", "index_checks"]
