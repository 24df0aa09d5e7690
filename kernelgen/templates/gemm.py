"""GEMM template, matching: one (batched) matmul whose operands are inputs (or transposed views of them),
followed by any pointwise epilogue on its output (bias, activation, residual, scale)."""

from __future__ import annotations

from dataclasses import dataclass

from kernelgen.ir.graph import ELEMENTWISE_OPS, Graph
from kernelgen.templates.base import Problem, Template
from kernelgen.templates.indexing import Load, broadcast_strides, consumer_loads, input_view, is_input_view


@dataclass(frozen=True)
class Operand:
    """A matmul operand: kernel argument ``arg`` with element strides over ``(*batch, rows, cols)``."""

    arg: int
    strides: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class GemmProblem(Problem):
    """``out[*batch, m, n] = epilogue(sum_k a[*batch, m, k] * b[*batch, k, n], loads...)``.

    ``a.strides`` index ``(*batch, m, k)``, ``b.strides`` index ``(*batch, k, n)`` (0 on broadcast batch
    dims; transposes are folded in). ``matmul`` is the node id of the accumulator inside the graph;
    epilogue ``loads`` index ``(*batch, m, n)``.
    """

    batch: tuple[int, ...]
    m: int
    n: int
    k: int
    a: Operand
    b: Operand
    matmul: int
    loads: tuple[Load, ...]
    out_dtype: str

    @property
    def has_epilogue(self) -> bool:
        return self.graph.outputs != (self.matmul,)


class GemmTemplate(Template):
    name = "gemm"

    def match(self, graph: Graph) -> GemmProblem | None:
        matmuls = [i for i, n in enumerate(graph.nodes) if n.op == "matmul"]
        if len(matmuls) != 1 or len(graph.outputs) != 1:
            return None
        mm = matmuls[0]
        out_shape = graph.nodes[mm].spec.shape
        if graph.nodes[graph.outputs[0]].spec.shape != out_shape or is_input_view(graph, graph.outputs[0]):
            return None
        batch, (m, n) = out_shape[:-2], out_shape[-2:]
        operands = []
        for operand_id in graph.nodes[mm].inputs:
            view = input_view(graph, operand_id)
            if view is None:
                return None
            arg, shape, strides = view
            try:
                full = broadcast_strides(shape[:-2], strides[:-2], batch) + strides[-2:]
            except ValueError:
                return None
            operands.append(Operand(arg, full, graph.nodes[operand_id].spec.dtype))
        k = graph.nodes[graph.nodes[mm].inputs[0]].spec.shape[-1]
        found = consumer_loads(graph, out_shape, skip=frozenset({mm}))
        if found is None or any(not (is_input_view(graph, i) or i == mm or n.op in ELEMENTWISE_OPS)
                                for i, n in enumerate(graph.nodes)):
            return None
        loads = sorted(found.values(), key=lambda ld: ld.node)
        a, b = operands
        if a.dtype != b.dtype or a.dtype not in ("float16", "bfloat16", "float32", "float64"):
            return None
        return GemmProblem(graph=graph, batch=batch, m=m, n=n, k=k, a=a, b=b, matmul=mm, loads=tuple(loads),
                           out_dtype=graph.nodes[graph.outputs[0]].spec.dtype)


TEMPLATE = GemmTemplate()
