"""Attention backward template, matching: the gradients of softmax(Q Kᵀ · scale [+ causal mask] [+ attn_mask]) V
with respect to Q, K and V (``attention_grad`` nodes, any subset, one kernel), recomputed flash-style from the
forward's saved output and row logsumexp, as ATen's CPU flash backward computes them:

    P = exp(scale · Q Kᵀ [+ mask] - lse),  Δ = rowsum(dO ∘ O),  dS = P ∘ (dO Vᵀ - Δ)
    dV = Pᵀ dO,  dK = scale · dSᵀ Q,  dQ = scale · dS K

With grouped-query attention (K and V with ``heads // group`` heads), dK and dV of a key/value head sum those of
the ``group`` query heads that read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelgen.ir.graph import Graph
from kernelgen.templates.attention import MASK_DTYPES, grouping, mask_strides
from kernelgen.templates.base import Problem, Template
from kernelgen.templates.gemm import Operand

PARTS = ("q", "k", "v")


@dataclass(frozen=True)
class AttentionGradProblem(Problem):
    """Operands index ``(batch, heads, seq, dim)`` (rank-3 inputs get heads = 1); ``lse`` indexes ``(batch, heads,
    seq)`` and the mask ``(batch, heads, query, key)``, 0 along broadcast dims. ``outputs`` names the graph's
    outputs in order among ``"q"``, ``"k"``, ``"v"`` (each contiguous, of its operand's shape and dtype)."""

    batch: int
    heads: int
    q_len: int
    kv_len: int
    head_dim: int
    v_dim: int
    causal: bool
    scale: float
    grad: Operand
    q: Operand
    k: Operand
    v: Operand
    out: Operand
    lse: Operand
    mask: Operand | None = None
    outputs: tuple[str, ...] = PARTS
    group: int = 1  # query heads per key/value head (grouped-query attention)

    def output_arg(self, part: str) -> int | None:
        """The kernel argument index of gradient ``part`` (after the graph's inputs), or None when not computed."""
        return len(self.graph.signature) + self.outputs.index(part) if part in self.outputs else None


def _rank4(shape: tuple, strides: tuple) -> tuple[tuple, tuple]:
    return ((shape[0], 1) + shape[1:], (strides[0], 0) + strides[1:]) if len(shape) == 3 else (shape, strides)


class AttentionGradTemplate(Template):
    name = "attention_grad"

    def tolerance(self, problem: AttentionGradProblem, dtype: str) -> tuple[float, float] | None:
        """dS = P ∘ (dP - Δ) cancels by construction, so a gradient near 0 is a difference of terms as large as the
        rest: its error is absolute, growing like the square root of the keys summed (on the check's random
        inputs at [4, 12, 256, 64], one element of 786432 was 1.1e-4 off where the shared table allows 1e-4)."""
        base = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 4e-2}.get(dtype)
        if base is None:
            return None
        rtol = {"float64": 1e-6, "float32": 1e-3}.get(dtype, base)
        return rtol, base * max(problem.kv_len, problem.q_len) ** 0.5

    def match(self, graph: Graph) -> AttentionGradProblem | None:
        grads = [i for i, n in enumerate(graph.nodes) if n.op == "attention_grad"]
        if not grads or any(n.op not in ("input", "attention_grad") for n in graph.nodes):
            return None
        first = graph.nodes[grads[0]]
        if any(graph.nodes[g].inputs != first.inputs or graph.nodes[g].attr("causal") != first.attr("causal")
               or graph.nodes[g].attr("scale") != first.attr("scale") for g in grads):
            return None  # the gradients of one attention
        outputs = tuple(graph.nodes[o].attr("part") if graph.nodes[o].op == "attention_grad" else None
                        for o in graph.outputs)
        if None in outputs or len(set(outputs)) != len(outputs):
            return None
        sources = [graph.nodes[i] for i in first.inputs]
        if len(sources) not in (6, 7) or any(s.op != "input" for s in sources):
            return None
        specs = [s.spec for s in sources]
        if any(s.rank not in (3, 4) for s in (specs[0], *specs[1:5])) or specs[5].rank not in (2, 3):
            return None
        operands, shapes = [], []
        for source in sources[:5]:
            shape, strides = _rank4(source.spec.shape, source.spec.effective_strides())
            operands.append(Operand(source.attr("index"), strides, source.spec.dtype))
            shapes.append(shape)
        gs, qs, ks, vs, os_ = shapes
        group = grouping(qs, ks, vs)
        if group is None or gs != os_ or gs != qs[:3] + vs[3:]:
            return None  # no broadcasting
        dtype = specs[1].dtype
        if any(s.dtype != dtype for s in (specs[0], specs[2], specs[3], specs[4])) or dtype not in \
                ("float16", "bfloat16", "float32", "float64"):
            return None
        lse_spec = specs[5]
        lse_shape, lse_strides = (lse_spec.shape[:1] + (1,) + lse_spec.shape[1:],
                                  lse_spec.effective_strides()[:1] + (0,) + lse_spec.effective_strides()[1:]) \
            if lse_spec.rank == 2 else (lse_spec.shape, lse_spec.effective_strides())
        if lse_shape != qs[:3] or lse_spec.dtype not in ("float32", "float64"):
            return None
        lse = Operand(sources[5].attr("index"), lse_strides, lse_spec.dtype)
        mask = None
        if len(sources) == 7:
            m = sources[6].spec
            strides = mask_strides(m.shape, m.effective_strides(), (qs[0], qs[1], qs[2], ks[2]))
            if strides is None or m.dtype not in MASK_DTYPES or (m.dtype != "bool" and m.dtype != dtype):
                return None
            mask = Operand(sources[6].attr("index"), strides, m.dtype)
        grad, q, k, v, out = operands
        return AttentionGradProblem(graph=graph, batch=qs[0], heads=qs[1], q_len=qs[2], kv_len=ks[2], head_dim=qs[3],
                                    v_dim=vs[3], causal=bool(first.attr("causal")), scale=float(first.attr("scale")),
                                    grad=grad, q=q, k=k, v=v, out=out, lse=lse, mask=mask, outputs=outputs,
                                    group=group)


TEMPLATE = AttentionGradTemplate()
