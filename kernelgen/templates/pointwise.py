"""Pointwise template, matching: any DAG of elementwise ops over broadcastable inputs, one iteration space."""

from __future__ import annotations

from dataclasses import dataclass

from kernelgen.ir import ELEMENTWISE_OPS, Graph
from kernelgen.templates.base import Problem, Template
from kernelgen.templates.indexing import Load, consumer_loads, is_input_view


@dataclass(frozen=True)
class PointwiseProblem(Problem):
    """Every output has shape ``shape``; each graph input (or view of one) is read through a ``Load``."""

    shape: tuple[int, ...]
    loads: tuple[Load, ...]

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
        if any(not is_input_view(graph, i) and n.op not in ELEMENTWISE_OPS for i, n in enumerate(graph.nodes)):
            return None
        found = consumer_loads(graph, shape)
        if found is None:
            return None
        loads = sorted(found.values(), key=lambda ld: ld.node)
        if any(is_input_view(graph, o) for o in graph.outputs) or len(set(graph.outputs)) != len(graph.outputs):
            return None  # returning an input (or the same value twice) is a copy, not a kernel
        return PointwiseProblem(graph=graph, shape=shape, loads=tuple(loads))


TEMPLATE = PointwiseTemplate()
