"""Triton for kernelgen's elementwise ops as the Triton templates call it: the per-graph ``ExprEmitter``, the
typed helpers and the kernel scaffolding (parameters, offsets), over ``kernelgen.codegen.triton_renderer``
(the op table, ``TritonRenderer.code_for_op``) and ``kernelgen.codegen.triton_types``.

Eager PyTorch is the contract, NaN/inf placement and integer wraparound included. ``OPS`` names every op with
a rule; a rule that cannot match eager for a node raises ``UnsupportedOpError`` and dispatch runs that graph
eagerly; ``REFUSED`` names the ops the Triton renderer always leaves to eager.
"""

from __future__ import annotations

from kernelgen.codegen.triton_renderer import OPS, REFUSED, ExprEmitter, TritonRenderer
from kernelgen.codegen.triton_types import (HEADER, TL_DTYPE, bf16_round, compute_dtype, const_literal,
                                            is_float, tanh, to_compute, to_storage)
from kernelgen.ir.graph import Graph
from kernelgen.ir.values import TensorSpec



# ------------------------------------------------------------------------------------ kernel scaffolding

def kernel_params(graph: Graph) -> list[str]:
    """Pointer parameters: ``in<k>`` per graph input (argument order), then ``out<j>`` per output."""
    return [f"in{k}" for k in range(len(graph.input_ids))] + [f"out{j}" for j in range(len(graph.outputs))]


def signature_json(graph: Graph) -> str:
    """Source.meta["signature"]: the inputs' specs then the (contiguous) outputs' specs."""
    import json

    specs = list(graph.signature) + [TensorSpec(s.shape, s.dtype) for s in graph.output_specs]
    return json.dumps([s.to_json() for s in specs])


def offset_expr(index: str, shape: tuple[int, ...], strides: tuple[int, ...]) -> str:
    """Element offset of flat (row-major) iteration index ``index`` over ``shape`` for a view with
    ``strides`` (0 on broadcast dims): coordinates are recovered only for dims that move the pointer."""
    if not shape:
        return "0"
    contiguous, acc = [], 1
    for size in reversed(shape):
        contiguous.append(acc)
        acc *= max(size, 1)
    contiguous.reverse()
    if all(st == c or size == 1 for st, c, size in zip(strides, contiguous, shape)):
        return index
    terms = []
    for d, (size, stride) in enumerate(zip(shape, strides)):
        if stride == 0 or size == 1:
            continue
        inner = contiguous[d]
        coord = index if inner == 1 else f"({index} // {inner})"
        if d > 0:
            coord = f"({coord} % {size})"
        terms.append(coord if stride == 1 else f"{coord} * {stride}")
    return " + ".join(terms) if terms else "0"


def tile_offset(terms: list[tuple[str, int]]) -> str:
    """``a * sa + b * sb ...`` for index tensors with element strides, dropping stride-0 (broadcast) terms."""
    parts = [idx if st == 1 else f"{idx} * {st}" for idx, st in terms if st != 0]
    return " + ".join(parts) if parts else "0"


def pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


__all__ = ["HEADER", "OPS", "REFUSED", "ExprEmitter", "TL_DTYPE", "TritonRenderer", "bf16_round",
           "compute_dtype", "const_literal", "is_float", "kernel_params", "offset_expr", "pow2_at_least",
           "signature_json", "tanh", "tile_offset", "to_compute", "to_storage"]
