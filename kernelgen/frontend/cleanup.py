"""Clean-ups of an ATen graph before partitioning: drop dtype conversions that convert nothing, and copies
(``clone``) whose result nobody could tell from their input; run the remaining conversions as ATen's C++ op rather
than as a prim; compute sequences made from no tensor (``iota``/``arange``) once, when the graph is compiled.

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

from kernelgen.frontend.fx_nodes import VIEW_OPS, op_packet

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
    return _recompiled(gm, dropped)


def aten_conversions(gm: Any) -> int:
    """Replace every ``prims.convert_element_type(x, dtype)`` by ``aten._to_copy(x, dtype=dtype)`` (the same
    values: a conversion rounds to nearest either way); returns how many. Why: the prim runs as torch's Python
    reference wherever it is not inside a region (a region that runs its ATen ops, eager's replay of a region whose
    kernel failed): ~325 us a call on an H200, where ``_to_copy`` is one C++ kernel. Regions lower both alike."""
    import torch

    prim = torch.ops.prims.convert_element_type.default
    swapped = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not prim:
            continue
        source, dtype = node.args
        with gm.graph.inserting_before(node):
            _replace(node, gm.graph.call_function(torch.ops.aten._to_copy.default, (source,), {"dtype": dtype}))
        swapped += 1
    return _recompiled(gm, swapped)


# Ops whose value is fixed by their arguments alone (no tensor input, no randomness, defined contents) and that
# no region can fold in as a literal. (``full``, ``scalar_tensor``, ``zeros`` and ``ones`` are such literals:
# ``kernelgen.frontend.fx_nodes.CONSTANT_OPS``; a region computes them for free, where a buffer would be read.)
_SEQUENCE_OPS = frozenset({"iota", "arange"})


def fold_constants(gm: Any) -> int:
    """Compute each sequence made from no tensor input (position ids, a causal mask's ``iota``/``arange``) once,
    now, and let the graph read it as a buffer; returns how many. Why: each ran every step (~250 us a call
    through the prim's Python on an H200) for a value that never changes. Kept: a node with a symbolic size (its
    value depends on the call), and one the graph returns (directly or through views: the caller could write into
    it, and the next call would read that)."""
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    folded = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or op_packet(node) not in _SEQUENCE_OPS or _has_node_or_symbol(node) \
                or _reaches_output(node):
            continue
        with unset_fake_temporarily():
            value = node.target(*node.args, **node.kwargs)
        if type(value) is not torch.Tensor:  # noqa: E721 - a subclass (fake, functional) is no value to keep
            continue
        name = f"_kernelgen_constant_{folded}"
        while hasattr(gm, name):
            name += "_"
        gm.register_buffer(name, value, persistent=False)
        with gm.graph.inserting_before(node):
            _replace(node, gm.graph.get_attr(name))
        folded += 1
    return _recompiled(gm, folded)


def _replace(node: Any, new: Any) -> None:
    """``new`` in ``node``'s place: its meta (the value it stands for) and its users; ``node`` erased."""
    new.meta = dict(node.meta)
    node.replace_all_uses_with(new)
    node.graph.erase_node(node)


def _recompiled(gm: Any, changes: int) -> int:
    if changes:
        gm.graph.lint()
        gm.recompile()
    return changes


def _has_node_or_symbol(node: Any) -> bool:
    import torch

    found = []

    def visit(a: Any) -> Any:
        if isinstance(a, (torch.fx.Node, torch.SymInt, torch.SymFloat, torch.SymBool)):
            found.append(a)
        return a

    torch.fx.node.map_aggregate((node.args, node.kwargs), visit)
    return bool(found)


def _reaches_output(node: Any) -> bool:
    """Whether ``node``'s tensor, or a view of it, is a graph output."""
    return any(u.op == "output" or (u.op == "call_function" and op_packet(u) in VIEW_OPS and _reaches_output(u))
               for u in node.users)


def _writes(node: Any) -> bool:
    """Whether call ``node`` writes into a tensor (``copy_`` of an input's mutation, an in-place op)."""
    return getattr(getattr(node.target, "_schema", None), "is_mutable", False)


def _mutated(node: Any) -> bool:
    """Whether some op writes into ``node``'s tensor: a copy taken before it differs from the tensor after it."""
    return any(_writes(u) for u in node.users)


__all__ = ["aten_conversions", "drop_noop_conversions", "fold_constants"]
