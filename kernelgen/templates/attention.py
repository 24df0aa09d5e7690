"""Attention template, matching: softmax(Q Kᵀ · scale [+ causal mask]) V on [batch, heads, seq, dim] inputs."""

from __future__ import annotations

from dataclasses import dataclass

from kernelgen.ir import Graph
from kernelgen.templates.base import Problem, Template
from kernelgen.templates.gemm import Operand


@dataclass(frozen=True)
class AttentionProblem(Problem):
    """``out[b, h, i, :] = softmax_j(scale * q[b,h,i,:]·k[b,h,j,:] [masked j > i + kv_len - q_len]) @ v[b,h,j,:]``.

    Operand strides index ``(batch, heads, seq, dim)`` (rank-3 inputs get heads = 1). The causal mask is
    aligned to the bottom right, as in ``torch.nn.functional.scaled_dot_product_attention``: with equal
    lengths query i sees keys 0..i.
    """

    batch: int
    heads: int
    q_len: int
    kv_len: int
    head_dim: int
    v_dim: int
    causal: bool
    scale: float
    q: Operand
    k: Operand
    v: Operand
    out_dtype: str


class AttentionTemplate(Template):
    name = "attention"

    def match(self, graph: Graph) -> AttentionProblem | None:
        atts = [i for i, n in enumerate(graph.nodes) if n.op == "attention"]
        if len(atts) != 1 or graph.outputs != (atts[0],):
            return None
        node = graph.nodes[atts[0]]
        operands = []
        for operand_id in node.inputs:
            source = graph.nodes[operand_id]
            if source.op != "input" or source.spec.rank not in (3, 4):
                return None
            strides = source.spec.effective_strides()
            if source.spec.rank == 3:
                strides = (strides[0], 0) + strides[1:]
            operands.append(Operand(source.attr("index"), strides, source.spec.dtype))
        if any(n.op not in ("input", "attention") for n in graph.nodes):
            return None
        q_spec, k_spec, v_spec = (graph.nodes[i].spec for i in node.inputs)
        qs = q_spec.shape if q_spec.rank == 4 else (q_spec.shape[0], 1) + q_spec.shape[1:]
        ks = k_spec.shape if k_spec.rank == 4 else (k_spec.shape[0], 1) + k_spec.shape[1:]
        vs = v_spec.shape if v_spec.rank == 4 else (v_spec.shape[0], 1) + v_spec.shape[1:]
        if qs[:2] != ks[:2] or ks[:3] != vs[:3] or qs[3] != ks[3]:
            return None  # no broadcasting / grouped-query layouts in this template
        if len({q_spec.dtype, k_spec.dtype, v_spec.dtype}) != 1:
            return None
        return AttentionProblem(graph=graph, batch=qs[0], heads=qs[1], q_len=qs[2], kv_len=ks[2], head_dim=qs[3],
                                v_dim=vs[3], causal=bool(node.attr("causal")), scale=float(node.attr("scale")),
                                q=operands[0], k=operands[1], v=operands[2], out_dtype=node.spec.dtype)


TEMPLATE = AttentionTemplate()
