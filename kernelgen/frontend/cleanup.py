"""Clean-ups of an ATen graph before partitioning: drop dtype conversions that convert nothing.

Why: Inductor's decompositions upcast for accuracy (``convert_element_type(x, float32)`` around batch norm's
running statistics, around reductions), which for float32 inputs is a no-op that still runs: a prims op
executed in Python, 30 us a call on this CPU (a small CNN's inference: 4 of them, 120 us of its 3 ms), and
a node no region wants (it lowers to nothing, so it cannot start one). Inductor removes them the same way.
"""

from __future__ import annotations

from typing import Any

from kernelgen.frontend.fx_nodes import op_packet

_CONVERSIONS = frozenset({"convert_element_type", "_to_copy"})


def drop_noop_conversions(gm: Any) -> int:
    """Replace every conversion of a tensor to its own dtype, device and layout by the tensor itself, where
    nothing could tell them apart (the result is no graph output, so it aliases no output); returns how many."""
    import torch

    dropped = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or op_packet(node) not in _CONVERSIONS or not node.args:
            continue
        source, result = node.args[0], node.meta.get("val")
        value = getattr(source, "meta", {}).get("val")
        if not (isinstance(value, torch.Tensor) and isinstance(result, torch.Tensor)):
            continue
        same = (value.dtype == result.dtype and value.device == result.device and value.layout == result.layout
                and value.shape == result.shape and value.stride() == result.stride())
        # _to_copy's keywords beyond dtype/device/layout (memory_format, pin_memory) change what it makes
        extra = set(node.kwargs) - {"dtype", "device", "layout"}
        if not same or extra or any(u.op == "output" for u in node.users):
            continue
        node.replace_all_uses_with(source)
        gm.graph.erase_node(node)
        dropped += 1
    if dropped:
        gm.graph.lint()
        gm.recompile()
    return dropped


__all__ = ["drop_noop_conversions"]
