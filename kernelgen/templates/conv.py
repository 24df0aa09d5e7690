"""Convolution template, matching: one ATen convolution whose input, weight and bias are graph inputs, followed by
any pointwise epilogue on its output (a CNN's inference batch norm, ReLU, residual add).

It has no generated kernel: its implementation is ``kernelgen.templates.vendor_conv`` (ATen's or oneDNN's
convolution, then the epilogue as the pointwise template's kernel). So a CNN's conv + batch norm + ReLU is one ATen
call and one kernel, not a convolution and a separate pointwise region.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelgen.ir.graph import ELEMENTWISE_OPS, Graph
from kernelgen.templates.base import Problem, Template
from kernelgen.templates.indexing import Load, consumer_loads, is_input_view

DTYPES = ("float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class ConvProblem(Problem):
    """``out = epilogue(conv(x, weight[, bias]), loads...)``: ``conv`` is the convolution's node id, ``x``/``weight``/
    ``bias`` the argument positions of its operands (``bias`` None without one), ``loads`` the epilogue's reads."""

    conv: int
    x: int
    weight: int
    bias: int | None
    loads: tuple[Load, ...]
    out_dtype: str

    @property
    def spatial(self) -> int:
        return len(self.graph.nodes[self.conv].attr("stride"))

    @property
    def has_epilogue(self) -> bool:
        return self.graph.outputs != (self.conv,)


class ConvTemplate(Template):
    name = "conv"

    def match(self, graph: Graph) -> ConvProblem | None:
        convs = [i for i, n in enumerate(graph.nodes) if n.op == "conv"]
        if len(convs) != 1 or len(graph.outputs) != 1:
            return None
        conv = convs[0]
        node = graph.nodes[conv]
        out_shape = node.spec.shape
        if graph.nodes[graph.outputs[0]].spec.shape != out_shape or is_input_view(graph, graph.outputs[0]):
            return None
        operands = [graph.nodes[i] for i in node.inputs]
        # ATen gets the operands as they are: inputs, not views the graph made of them; a contiguous input and
        # weight, so that eager's result (and ATen's here) is contiguous as the epilogue reads it (a channels-last
        # one stays ATen's convolution, which keeps its layout)
        if any(o.op != "input" for o in operands) or not all(o.spec.is_contiguous for o in operands[:2]):
            return None
        if operands[0].spec.dtype not in DTYPES or any(o.spec.dtype != operands[0].spec.dtype for o in operands):
            return None
        found = consumer_loads(graph, out_shape, skip=frozenset({conv}))
        if found is None or any(not (is_input_view(graph, i) or i == conv or n.op in ELEMENTWISE_OPS)
                                for i, n in enumerate(graph.nodes)):
            return None
        args = [o.attr("index") for o in operands]
        return ConvProblem(graph=graph, conv=conv, x=args[0], weight=args[1], bias=args[2] if len(args) > 2 else None,
                           loads=tuple(sorted(found.values(), key=lambda ld: ld.node)),
                           out_dtype=graph.nodes[graph.outputs[0]].spec.dtype)


TEMPLATE = ConvTemplate()

__all__ = ["ConvProblem", "ConvTemplate", "DTYPES", "TEMPLATE"]
