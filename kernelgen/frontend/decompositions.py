"""The decomposition table the kernelgen Dynamo backend (and a pattern traced the backend's way) uses."""

from __future__ import annotations

from typing import Any


def decompositions() -> dict:
    """Inductor's decomposition table (core ATen plus Inductor's own rewrites). Why not the plain core-ATen
    table (``torch._decomp.core_aten_decompositions()``): in torch 2.13 a GPT-2 block's causal-attention
    backward decomposed with it gives wrong gradients (errors of ~4 against eager; Inductor's table and no
    table are exact), and Inductor's table is the one torch keeps correct for whole models. It keeps
    ``_softmax``, ``gelu`` and the GEMMs whole (one lowering rule each) and decomposes the ``*_backward``
    ops into the pointwise ops and reductions the partitioner groups."""
    from torch._inductor.decomposition import select_decomp_table

    return {op: fn for op, fn in select_decomp_table().items() if not _keep_whole(op)}


def _keep_whole(op: Any) -> bool:
    """Ops kept whole rather than decomposed: pooling, which the window template runs as one reduce-window op
    (``kernelgen.lowering.windows``). Inductor's rules for it emit Inductor-only prims
    (``_low_memory_max_pool_with_offsets``) plus index arithmetic that then runs op by op (a small CNN's forward:
    56 ATen launches instead of 11, 0.51x eager) and need ``torch._inductor.lowering`` imported, which a process
    where Inductor never ran lacks."""
    return str(getattr(op, "_schema", "")).startswith("aten::") and "pool" in op.name()


__all__ = ["decompositions"]
