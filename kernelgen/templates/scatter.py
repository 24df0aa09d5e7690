"""Scatter template, matching: one out-of-place write at computed positions (``scatter``, ``index_put``: scatter_add,
scatter_reduce, the embedding backward's accumulation, index_add) whose operands may be computed by an elementwise
prologue (the embedding backward's zero table is a folded constant, its values a masked gradient).

Every write goes along one dim (``dim``), so elements that differ in any other coordinate (a "column") never
meet: a kernel gives each task a tile of columns, copies ``x`` into them, then walks the index in eager's order
(row-major), combining each value into its column at the position the index names. No atomics, no sort, and each
position sees its values in eager's order: a float32 scatter_add is eager's to the bit.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelgen.codegen.renderer import INT_LIMITS
from kernelgen.ir.graph import ELEMENTWISE_OPS, MOVE_OPS, SCATTER_OPS, Graph
from kernelgen.templates.base import Problem, Template
from kernelgen.templates.indexing import input_view, is_input_view
from kernelgen.templates.moves import Coords, renderable

IDENTITY = {"sum": 0, "prod": 1, "amax": "-inf", "amin": "inf"}
"""Where a position ``include_self=False`` writes starts from (integers: their lowest/highest for amax/amin)."""


def identity(reduce: str, dtype: str) -> int | float | str:
    """The value a position restarts from for ``reduce`` over ``dtype`` (non-finite floats spelled as the IR does)."""
    if dtype in INT_LIMITS and reduce in ("amax", "amin"):
        return INT_LIMITS[dtype][0 if reduce == "amax" else 1]
    return IDENTITY[reduce]


@dataclass(frozen=True)
class ScatterProblem(Problem):
    """The write ``node`` (``graph.outputs == (node,)``) of ``src`` into ``x`` along ``dim`` at ``index``."""

    node: int
    shape: tuple[int, ...]

    @property
    def op(self) -> str:
        return self.graph.nodes[self.node].op

    @property
    def dim(self) -> int:
        return int(self.graph.nodes[self.node].attr("dim"))

    @property
    def reduce(self) -> str:
        return self.graph.nodes[self.node].attr("reduce")

    @property
    def include_self(self) -> bool:
        return bool(self.graph.nodes[self.node].attr("include_self", True))

    @property
    def x(self) -> int:
        return self.graph.nodes[self.node].inputs[0]

    @property
    def index(self) -> int:
        return self.graph.nodes[self.node].inputs[1]

    @property
    def src(self) -> int:
        return self.graph.nodes[self.node].inputs[2]

    @property
    def index_shape(self) -> tuple[int, ...]:
        return self.graph.nodes[self.index].spec.shape

    @property
    def columns(self) -> list[int]:
        """The dims a write keeps (every dim but ``dim``), outermost first: the last one is tiled."""
        return [e for e in range(len(self.shape)) if e != self.dim]

    def src_at(self, coords: dict[int, str], where: Coords) -> Coords:
        """Coordinates in ``src`` of the value written from index position ``where`` into column ``coords``
        (every dim but ``dim``): for ``scatter`` the index position itself; for ``index_put`` the column with
        ``dim`` replaced by the index position."""
        if self.op == "scatter":
            return where
        rank = len(self.shape)
        return tuple(coords[e] for e in range(self.dim)) + tuple(where) + \
            tuple(coords[e] for e in range(self.dim + 1, rank))


def buffered(problem: ScatterProblem) -> bool:
    """Whether the sums go through float32: eager's scatter reductions and index_add sum float16/bfloat16 in
    float32 and round once (``opmath``), where index_put rounds at every add."""
    node = problem.graph.nodes[problem.node]
    return bool(node.attr("opmath", False)) and node.spec.dtype in ("float16", "bfloat16") and \
        problem.reduce in ("sum", "prod")


def offset(problem: ScatterProblem, coords: dict[int, str]) -> str:
    """The element offset, in the (contiguous) output, of the coordinates ``coords`` (one expression per dim)."""
    strides, acc = [], 1
    for size in reversed(problem.shape):
        strides.append(acc)
        acc *= size
    strides.reverse()
    return " + ".join(f"({coords[e]}) * {st}" if st != 1 else f"({coords[e]})"
                      for e, st in enumerate(strides) if problem.shape[e] != 1) or "0"


class ScatterTemplate(Template):
    name = "scatter"

    def match(self, graph: Graph) -> ScatterProblem | None:
        writes = [i for i, n in enumerate(graph.nodes) if n.op in SCATTER_OPS]
        if len(writes) != 1 or graph.outputs != (writes[0],):
            return None  # one write, returned alone (an epilogue would read positions out of order)
        node = graph.nodes[writes[0]]
        allowed = ELEMENTWISE_OPS | MOVE_OPS | {"reshape"}  # (a computed mask given a size-1 dim: index arithmetic)
        if any(i != writes[0] and not is_input_view(graph, i) and n.op not in allowed
               for i, n in enumerate(graph.nodes)) or not renderable(graph):
            return None
        if node.attr("checked", False) and input_view(graph, node.inputs[1]) is None:
            return None  # eager's range error is raised from the index tensor before the kernel runs
        shape = node.spec.shape
        if not shape or 0 in shape:
            return None
        return ScatterProblem(graph=graph, node=writes[0], shape=shape)


TEMPLATE = ScatterTemplate()
