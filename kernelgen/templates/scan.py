"""Scan template, matching: one inclusive scan (``cumsum``/``cumprod``/``logcumsumexp``) along any dim, with an elementwise
prologue computing its input and an elementwise epilogue reading its running value, one row per task (a row:
every element along the scanned dim at one coordinate of the others, read and written through strides).

Every element-by-element part (prologue, epilogue, cat/pad among them) is evaluated at the coordinate whose
scanned dim is ``k`` through ``kernelgen.templates.moves.expand``; the scan node itself is the named value ``sv``
(the running value converted to the node's dtype), so the renderers only write the loop and the accumulator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kernelgen.ir.graph import ELEMENTWISE_OPS, MOVE_OPS, SCAN_OPS, Graph
from kernelgen.templates.base import Problem, Template
from kernelgen.templates.indexing import is_input_view
from kernelgen.templates.moves import renderable

ACCUMULATOR = {"float16": "float32", "bfloat16": "float32", "float32": "float64", "float64": "float64"}
"""Eager's CPU accumulator dtype per result dtype (``at::acc_type<T, false>``); every integer is int64."""
IDENTITY = {"cumsum": 0, "cumprod": 1, "logcumsumexp": "-inf"}


def accumulator(dtype: str) -> str:
    return ACCUMULATOR.get(dtype, "int64")


def fuses_around(graph: Graph, centers: set[int] | list[int]) -> bool:
    """Whether everything but the ``centers`` (a scan's, sort's or search's node, whose value exists at the
    current coordinate only) is an elementwise or move op ``expand`` renders around them: no move reads a value
    computed from a center (it would shift it), and no output is an input or the same value twice (a copy, not a
    kernel). (Here, not in ``templates.moves``: every template's implementation hash covers the modules it
    imports, and the pointwise template's records should not change with the row templates' rule.)"""
    below = set(centers)
    if any(i not in below and not is_input_view(graph, i) and n.op not in ELEMENTWISE_OPS | MOVE_OPS
           for i, n in enumerate(graph.nodes)) or not renderable(graph):
        return False
    for i, node in enumerate(graph.nodes):
        if any(j in below for j in node.inputs):
            if node.op in MOVE_OPS:
                return False
            below.add(i)
    return not any(is_input_view(graph, o) for o in graph.outputs) and len(set(graph.outputs)) == len(graph.outputs)


@dataclass(frozen=True)
class ScanProblem(Problem):
    """Every coordinate of ``shape`` but dim ``dim`` is a row, scanned along ``dim``: node ``scan`` reads ``source``."""

    shape: tuple[int, ...]
    scan: int
    source: int
    dim: int

    @property
    def rows(self) -> int:
        return math.prod(self.shape) // self.length

    @property
    def length(self) -> int:
        return self.shape[self.dim]

    def coords(self) -> tuple[str, ...]:
        """The coordinate of each dim: ``k`` along the scan, ``i<d>`` on the other dims, "0" on size-1 dims."""
        return tuple(("0" if self.length == 1 else "k") if d == self.dim else "0" if size == 1 else f"i{d}"
                     for d, size in enumerate(self.shape))

    def row_dims(self) -> list[int]:
        """The row dims of size > 1, outermost first."""
        return [d for d, size in enumerate(self.shape) if d != self.dim and size != 1]

    def out_strides(self) -> tuple[int, ...]:
        strides, acc = [], 1
        for size in reversed(self.shape):
            strides.append(acc)
            acc *= size
        return tuple(reversed(strides))

    def row_offsets(self) -> tuple[str, str]:
        """The offsets (C++ and Python alike) of row ``i<d>``'s start and of lane ``k`` along it in the outputs."""
        strides = self.out_strides()
        base = " + ".join(f"i{d} * {strides[d]}" for d in self.row_dims()) or "0"
        return base, "k" if strides[self.dim] == 1 else f"k * {strides[self.dim]}"


class ScanTemplate(Template):
    name = "scan"

    def match(self, graph: Graph) -> ScanProblem | None:
        scans = [i for i, n in enumerate(graph.nodes) if n.op in SCAN_OPS]
        if len(scans) != 1 or not graph.outputs:
            return None
        scan = scans[0]
        shape = graph.nodes[scan].spec.shape
        if not shape or 0 in shape or any(spec.shape != shape for spec in graph.output_specs):
            return None
        if not fuses_around(graph, [scan]):
            return None
        return ScanProblem(graph=graph, shape=shape, scan=scan, source=graph.nodes[scan].inputs[0],
                           dim=graph.nodes[scan].attr("dim", len(shape) - 1))


TEMPLATE = ScanTemplate()
