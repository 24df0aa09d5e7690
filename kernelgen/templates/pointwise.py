"""Pointwise template, matching: any DAG of elementwise ops over broadcastable inputs, one iteration space,
with concatenations and constant pads inside it rendered as index arithmetic (``kernelgen.templates.moves``)."""

from __future__ import annotations

from dataclasses import dataclass

from kernelgen.ir.graph import ELEMENTWISE_OPS, MOVE_OPS, Graph
from kernelgen.templates.base import Problem, Template
from kernelgen.templates.indexing import Load, consumer_loads, is_input_view
from kernelgen.templates.moves import renderable


@dataclass(frozen=True)
class PointwiseProblem(Problem):
    """Every output has shape ``shape``; each graph input (or view of one) is read through a ``Load``. With
    ``moves`` (a ``cat``/``pad`` in the graph) inputs are read at shifted coordinates instead and ``loads`` is
    empty: the renderers go through ``kernelgen.templates.moves.expand``."""

    shape: tuple[int, ...]
    loads: tuple[Load, ...]
    moves: bool = False

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


class PointwiseTemplate(Template):
    name = "pointwise"

    def match(self, graph: Graph) -> PointwiseProblem | None:
        if not graph.outputs:
            return None
        shape = graph.output_specs[0].shape
        if any(spec.shape != shape for spec in graph.output_specs):
            return None
        allowed = ELEMENTWISE_OPS | MOVE_OPS
        if any(not is_input_view(graph, i) and n.op not in allowed for i, n in enumerate(graph.nodes)):
            return None
        if any(is_input_view(graph, o) for o in graph.outputs) or len(set(graph.outputs)) != len(graph.outputs):
            return None  # returning an input (or the same value twice) is a copy, not a kernel
        if any(n.op in MOVE_OPS for n in graph.nodes):
            if not renderable(graph):
                return None
            # operands are read at shifted coordinates (IR broadcasting already holds for every edge)
            return PointwiseProblem(graph=graph, shape=shape, loads=(), moves=True)
        found = consumer_loads(graph, shape)
        if found is None:
            return None
        loads = sorted(found.values(), key=lambda ld: ld.node)
        return PointwiseProblem(graph=graph, shape=shape, loads=tuple(loads))


TEMPLATE = PointwiseTemplate()
