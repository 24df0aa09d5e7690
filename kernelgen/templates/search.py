"""Search template, matching: one ``bucketize`` (``torch.bucketize`` / ``torch.searchsorted`` with 1-d boundaries)
with an elementwise prologue computing the searched values and an elementwise epilogue reading the bucket, over
every element of its shape (flat, as the pointwise template iterates).

Each element runs eager's binary search over the boundaries (an input, read through its stride): ``lo + (hi - lo)
/ 2`` midpoints and eager's tests, ``!(b >= x)`` (``right``: ``!(b > x)``) to go right, so a NaN value (and a
boundary list with NaN in it) lands where eager's search lands. The bucket is the named value ``bv``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kernelgen.ir.graph import SEARCH_OPS, Graph
from kernelgen.templates.base import Problem, Template
from kernelgen.templates.indexing import input_view
from kernelgen.templates.scan import fuses_around


@dataclass(frozen=True)
class SearchProblem(Problem):
    """Node ``search`` looks node ``source`` up in graph input ``arg`` (``count`` boundaries ``stride`` apart)."""

    shape: tuple[int, ...]
    search: int
    source: int
    arg: int
    count: int
    stride: int
    right: bool

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def coords(self) -> tuple[str, ...]:
        """``c<d>`` on every dim of size > 1 (the renderers define them from the flat index), "0" on the others."""
        return tuple("0" if size == 1 else f"c{d}" for d, size in enumerate(self.shape))


class SearchTemplate(Template):
    name = "search"

    def match(self, graph: Graph) -> SearchProblem | None:
        searches = [i for i, n in enumerate(graph.nodes) if n.op in SEARCH_OPS]
        if len(searches) != 1 or not graph.outputs:
            return None
        search = graph.nodes[searches[0]]
        shape = search.spec.shape
        view = input_view(graph, search.inputs[1])
        if 0 in shape or view is None or any(spec.shape != shape for spec in graph.output_specs):
            return None
        if not fuses_around(graph, [searches[0]]):
            return None
        arg, (count,), (stride,) = view
        return SearchProblem(graph=graph, shape=shape, search=searches[0], source=search.inputs[0], arg=arg,
                             count=count, stride=stride if count > 1 else 0, right=bool(search.attr("right")))


TEMPLATE = SearchTemplate()
