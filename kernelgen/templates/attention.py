"""Attention template, matching: softmax(Q Kᵀ · scale [+ causal mask] [+ attn_mask]) V on [batch, heads, seq,
dim] inputs, with the row logsumexp as an optional second output (what ATen's flash backward reads). K and V may
have fewer heads than Q (grouped-query attention: ``scaled_dot_product_attention(..., enable_gqa=True)``, which
ATen's CPU flash ops take as they are): query head ``h`` reads key/value head ``h // group``."""

from __future__ import annotations

from dataclasses import dataclass

from kernelgen.ir.graph import Graph
from kernelgen.templates.base import Problem, Template
from kernelgen.templates.gemm import Operand

MASK_DTYPES = ("bool", "float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class AttentionProblem(Problem):
    """``out[b, h, i, :] = softmax_j(scale * q[b,h,i,:]·k[b,h,j,:] [+ mask[b,h,i,j]] [masked j > i]) @ v[b,h,j,:]``.

    Operand strides index ``(batch, heads, seq, dim)`` (rank-3 inputs get heads = 1); the mask's index
    ``(batch, heads, query, key)``, 0 along the dims it is broadcast over. A float mask is added to the scaled
    scores, a bool mask hides the keys where it is False. A row whose keys are all hidden gives 0 (out and
    logsumexp), as ATen's CPU flash kernel does. ``outputs`` names the graph's outputs in order: ``"out"`` and,
    when the graph reads it, ``"lse"`` (``[batch, heads, q_len]``, natural log of the row's sum of exp of the
    scaled, masked scores, in the accumulation dtype: float64 for float64 inputs, else float32).
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
    mask: Operand | None = None
    outputs: tuple[str, ...] = ("out",)
    group: int = 1  # query heads per key/value head (grouped-query attention)

    def output_arg(self, name: str) -> int | None:
        """The kernel argument index of output ``name`` (after the graph's inputs), or None when not computed."""
        return len(self.graph.signature) + self.outputs.index(name) if name in self.outputs else None


def _batched(shape: tuple, strides: tuple) -> tuple[tuple, tuple]:
    """A rank-3 operand seen as rank 4 (heads = 1)."""
    return ((shape[0], 1) + shape[1:], (strides[0], 0) + strides[1:]) if len(shape) == 3 else (shape, strides)


def grouping(qs: tuple, ks: tuple, vs: tuple) -> int | None:
    """Query heads per key/value head of rank-4 shapes ``qs``, ``ks``, ``vs`` (1: plain attention), or None when
    they do not form one attention: batch and key length shared, Q and K of one head dim, K and V of one head
    count that divides Q's (what ``enable_gqa=True`` accepts)."""
    if qs[0] != ks[0] or ks[:3] != vs[:3] or qs[3] != ks[3] or ks[1] < 1 or qs[1] % ks[1]:
        return None
    return qs[1] // ks[1]


def mask_strides(shape: tuple, strides: tuple, full: tuple) -> tuple | None:
    """Strides of a mask of ``shape`` read as ``full`` = [B, H, Tq, Tk] (broadcast dims get 0), or None when
    it does not broadcast to it."""
    if len(shape) > 4:
        return None
    shape, strides = (1,) * (4 - len(shape)) + tuple(shape), (0,) * (4 - len(strides)) + tuple(strides)
    if any(s not in (1, f) for s, f in zip(shape, full)):
        return None
    return tuple(0 if s == 1 else st for s, st in zip(shape, strides))


class AttentionTemplate(Template):
    name = "attention"

    def match(self, graph: Graph) -> AttentionProblem | None:
        atts = [i for i, n in enumerate(graph.nodes) if n.op == "attention"]
        lses = [i for i, n in enumerate(graph.nodes) if n.op == "attention_lse"]
        if len(atts) != 1 or len(lses) > 1 or any(n.op not in ("input", "attention", "attention_lse")
                                                  for n in graph.nodes):
            return None
        node = graph.nodes[atts[0]]
        if lses and (graph.nodes[lses[0]].inputs != node.inputs or graph.nodes[lses[0]].attrs != node.attrs):
            return None  # the statistics of another attention
        names = {atts[0]: "out", **({lses[0]: "lse"} if lses else {})}
        if "out" not in (outputs := tuple(names.get(o) for o in graph.outputs)) or len(set(outputs)) != len(outputs):
            return None
        sources = [graph.nodes[i] for i in node.inputs]
        if len(sources) not in (3, 4) or any(s.op != "input" for s in sources):
            return None
        q_spec, k_spec, v_spec = (s.spec for s in sources[:3])
        if any(s.rank not in (3, 4) for s in (q_spec, k_spec, v_spec)):
            return None
        operands = []
        for source in sources[:3]:
            _, strides = _batched(source.spec.shape, source.spec.effective_strides())
            operands.append(Operand(source.attr("index"), strides, source.spec.dtype))
        qs, ks, vs = (_batched(s.shape, s.effective_strides())[0] for s in (q_spec, k_spec, v_spec))
        group = grouping(qs, ks, vs)
        if group is None:
            return None  # no broadcasting in this template
        if len({q_spec.dtype, k_spec.dtype, v_spec.dtype}) != 1:
            return None
        mask = None
        if len(sources) == 4:
            m = sources[3].spec
            strides = mask_strides(m.shape, m.effective_strides(), (qs[0], qs[1], qs[2], ks[2]))
            if strides is None or m.dtype not in MASK_DTYPES or (m.dtype != "bool" and m.dtype != q_spec.dtype):
                return None  # eager takes a bool mask or one of the query's dtype
            mask = Operand(sources[3].attr("index"), strides, m.dtype)
        return AttentionProblem(graph=graph, batch=qs[0], heads=qs[1], q_len=qs[2], kv_len=ks[2], head_dim=qs[3],
                                v_dim=vs[3], causal=bool(node.attr("causal")), scale=float(node.attr("scale")),
                                q=operands[0], k=operands[1], v=operands[2], out_dtype=node.spec.dtype, mask=mask,
                                outputs=outputs, group=group)


TEMPLATE = AttentionTemplate()
