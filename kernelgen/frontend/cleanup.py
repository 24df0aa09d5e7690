"""Clean-ups of an ATen graph before partitioning: drop dtype conversions that convert nothing, and copies
(``clone``) whose result nobody could tell from their input.

Why: Inductor's decompositions upcast for accuracy (``convert_element_type(x, float32)`` around batch norm's
running statistics, around reductions), which for float32 inputs is a no-op that still runs: a prims op
executed in Python, 30 us a call on this CPU (a small CNN's inference: 4 of them, 120 us of its 3 ms), and
a node no region wants (it lowers to nothing, so it cannot start one). Inductor removes them the same way.
AOTAutograd's functional graphs clone tensors the user code copied (``.contiguous()`` that copied nothing,
``.clone()`` before an in-place op that functionalization already made out-of-place): an identity that needs
neither a region nor an ATen copy unless something could observe the copy (a graph output, a mutation).
"""

from __future__ import annotations

from typing import Any

from kernelgen.frontend.fx_nodes import op_packet

_CONVERSIONS = frozenset({"convert_element_type", "_to_copy", "clone"})
_SAME_LAYOUT_KWARGS = frozenset({"dtype", "device", "layout", "memory_format"})  # none changes an equal layout


def drop_noop_conversions(gm: Any) -> int:
    """Replace every conversion or copy of a tensor to its own dtype, device and layout by the tensor itself,
    where nothing could tell them apart (the result is no graph output, so it aliases no output, and nothing
    writes into either); returns how many."""
    import torch

    dropped = 0
    # A copy is an identity only if nothing writes into what it copied, its source or a view of it: a graph
    # with any write (an input's mutation, copy_ back at the end) keeps its copies
    writes = any(_writes(n) for n in gm.graph.nodes)
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or op_packet(node) not in _CONVERSIONS or not node.args:
            continue
        source, result = node.args[0], node.meta.get("val")
        value = getattr(source, "meta", {}).get("val")
        if not (isinstance(value, torch.Tensor) and isinstance(result, torch.Tensor)):
            continue
        same = (value.dtype == result.dtype and value.device == result.device and value.layout == result.layout
                and value.shape == result.shape and value.stride() == result.stride())
        # _to_copy's pin_memory changes what it makes; memory_format does not once the strides are equal
        extra = set(node.kwargs) - _SAME_LAYOUT_KWARGS
        if not same or extra or any(u.op == "output" for u in node.users) or _mutated(source) or _mutated(node) \
                or (op_packet(node) == "clone" and writes):
            continue
        node.replace_all_uses_with(source)
        gm.graph.erase_node(node)
        dropped += 1
    if dropped:
        gm.graph.lint()
        gm.recompile()
    return dropped


def _writes(node: Any) -> bool:
    """Whether call ``node`` writes into a tensor (``copy_`` of an input's mutation, an in-place op)."""
    return getattr(getattr(node.target, "_schema", None), "is_mutable", False)


def _mutated(node: Any) -> bool:
    """Whether some op writes into ``node``'s tensor: a copy taken before it differs from the tensor after it."""
    return any(_writes(u) for u in node.users)


__all__ = ["drop_noop_conversions"]
