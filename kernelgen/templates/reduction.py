"""Row-reduction template, matching: reductions over the last dimension with elementwise prologue and
epilogue (softmax, log_softmax, layer_norm, rms norm, logsumexp, var, ...)."""

from __future__ import annotations

from dataclasses import dataclass

from kernelgen.errors import KernelgenError
from kernelgen.ir import ELEMENTWISE_OPS, REDUCTION_OPS, Graph, broadcast_shapes
from kernelgen.templates.base import Problem, Template
from kernelgen.templates.indexing import Load, consumer_loads, is_input_view


@dataclass(frozen=True)
class ReductionProblem(Problem):
    """Iteration space ``shape = (*leading, row_len)``, seen as ``rows`` rows of ``row_len`` elements.

    ``kinds[i]`` is ``"row"`` when node i is constant along a row (reductions, what is computed from
    them and from per-row inputs, constants) and ``"element"`` otherwise. Row outputs are stored one
    value per row; element outputs one value per element.
    """

    shape: tuple[int, ...]
    loads: tuple[Load, ...]
    kinds: tuple[str, ...]
    reductions: tuple[int, ...]  # reduction node ids, topological order

    @property
    def rows(self) -> int:
        n = 1
        for s in self.shape[:-1]:
            n *= s
        return n

    @property
    def row_len(self) -> int:
        return self.shape[-1]


class ReductionTemplate(Template):
    name = "reduction"

    def match(self, graph: Graph) -> ReductionProblem | None:
        reductions = tuple(i for i, n in enumerate(graph.nodes) if n.op in REDUCTION_OPS)
        if not reductions:
            return None
        shape = graph.nodes[graph.nodes[reductions[0]].inputs[0]].spec.shape
        if len(shape) == 0 or shape[-1] == 0:
            return None
        users = graph.users()
        found = consumer_loads(graph, shape)
        if found is None:
            return None
        loads = sorted(found.values(), key=lambda ld: ld.node)
        kinds: list[str] = []
        for i, node in enumerate(graph.nodes):
            if is_input_view(graph, i):
                kinds.append("row" if i in found and found[i].strides[-1:] in ((0,), ()) else "element")
            elif node.op in REDUCTION_OPS:
                if graph.nodes[node.inputs[0]].spec.shape != shape:
                    return None
                kinds.append("row")
            elif node.op == "reshape":
                # only a row value dropping its trailing 1, read by outputs only
                if kinds[node.inputs[0]] != "row" or any(u not in graph.outputs for u in users[i]) \
                        or i not in graph.outputs:
                    return None
                kinds.append("row")
            elif node.op in ELEMENTWISE_OPS:
                if node.op == "const":
                    kinds.append("row")
                    continue
                kinds.append("element" if any(kinds[j] == "element" for j in node.inputs) else "row")
                try:
                    if broadcast_shapes(node.spec.shape, shape) != shape:
                        return None
                except KernelgenError:
                    return None
            else:
                return None
        row_shape = shape[:-1] + (1,)
        for out in graph.outputs:
            spec = graph.nodes[out].spec
            if kinds[out] == "element" and spec.shape != shape:
                return None
            if kinds[out] == "row" and spec.shape not in (row_shape, shape[:-1]):
                return None
            if is_input_view(graph, out):
                return None
        if len(set(graph.outputs)) != len(graph.outputs):
            return None
        return ReductionProblem(graph=graph, shape=shape, loads=tuple(loads), kinds=tuple(kinds),
                                reductions=reductions)


TEMPLATE = ReductionTemplate()
