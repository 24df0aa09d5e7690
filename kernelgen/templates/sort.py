"""Sort template, matching: one stable sort (``sort`` values and/or ``argsort`` positions of one input, along any
dim) with an elementwise prologue computing its input and an elementwise epilogue reading the sorted values and
positions, one row per task (a row: every element along the sorted dim at one coordinate of the others).

It is the scan template's shape of problem (``kernelgen.templates.scan.ScanProblem``: rows, coordinates, strides):
the prologue is evaluated at the input coordinate ``k`` into a row of keys, the row is sorted, and the epilogue
at the output coordinate ``k`` sees the named values ``sv`` (the key sorted to position ``k``) and ``si`` (where it
came from). Keys are the input rounded to its dtype (a float16 value as eager holds it), so ties are eager's.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelgen.ir.graph import SORT_OPS, Graph
from kernelgen.templates.base import Template
from kernelgen.templates.scan import ScanProblem, fuses_around


@dataclass(frozen=True)
class SortProblem(ScanProblem):
    """``scan`` is the first sort node; ``values`` / ``indices`` the ``sort`` / ``argsort`` node (None if absent)."""

    descending: bool = False
    values: int | None = None
    indices: int | None = None

    def given(self) -> dict[int, str]:
        """The kernel's names for the sort's results, as ``kernelgen.templates.moves.expand`` takes them."""
        names = {self.values: "sv", self.indices: "si"}
        return {i: name for i, name in names.items() if i is not None}


class SortTemplate(Template):
    name = "sort"

    def match(self, graph: Graph) -> SortProblem | None:
        sorts = [i for i, n in enumerate(graph.nodes) if n.op in SORT_OPS]
        if not sorts or not graph.outputs:
            return None
        first = graph.nodes[sorts[0]]
        if any(graph.nodes[i].inputs != first.inputs or graph.nodes[i].attrs != first.attrs for i in sorts) \
                or len({graph.nodes[i].op for i in sorts}) != len(sorts):
            return None  # one sort of one input (its values and positions at most once each)
        shape = first.spec.shape
        if not shape or 0 in shape or any(spec.shape != shape for spec in graph.output_specs):
            return None
        if not fuses_around(graph, sorts):
            return None
        by_op = {graph.nodes[i].op: i for i in sorts}
        return SortProblem(graph=graph, shape=shape, scan=sorts[0], source=first.inputs[0], dim=first.attr("dim"),
                           descending=bool(first.attr("descending")), values=by_op.get("sort"),
                           indices=by_op.get("argsort"))


TEMPLATE = SortTemplate()
