"""A custom call's ``replaces=`` pattern in the form a ``torch.compile`` region has, so the registry can match it
against regions: the pattern function traced through the backend's decompositions and lowered as one region."""

from __future__ import annotations

from typing import Any

from kernelgen.frontend.decompositions import decompositions
from kernelgen.frontend.fx_nodes import is_view
from kernelgen.frontend.partition import lower_region
from kernelgen.frontend.sink_views import sink_views


def aten_graph_of(fn: Any, specs: Any) -> Any:
    """``fn`` (plain torch) traced the way the backend sees it (ATen through the backend's decompositions,
    reshapes sunk, lowered as one region): the ``Graph`` a region computing ``fn`` has, or None when ``fn``
    does not lower as one region reading its arguments in order. Lets a custom call's ``replaces`` pattern
    match regions of ``torch.compile``'d models."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    try:
        # the pattern must take these shapes at all: a cheap check on meta tensors first (fake tracing logs
        # every shape error it meets at error level)
        fn(*[torch.empty_strided(s.shape, s.effective_strides(), dtype=getattr(torch, s.dtype), device="meta")
             for s in specs])
        examples = [torch.empty_strided(s.shape, s.effective_strides(), dtype=getattr(torch, s.dtype)) for s in specs]
        gm = make_fx(fn, tracing_mode="fake", decomposition_table=decompositions())(*examples)
        sink_views(gm)
        members = [n for n in gm.graph.nodes if n.op == "call_function" and not is_view(n)]
        lowered = lower_region(members)
        graph, inputs = lowered.graph, lowered.inputs
    except Exception:  # anything the backend could not take is simply not this pattern
        return None
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return graph if inputs == placeholders else None


__all__ = ["aten_graph_of"]
