"""Move leading-dim reshapes below elementwise ops and last-dim reductions in an ATen graph.

Why: a ``Linear`` on a ``[B, T, C]`` input is ``view(addmm(b, view(x, [B*T, C]), wᵀ), [B, T, N])``, so its
activation, residual add or norm reads a *view* of the GEMM's output and cannot join the GEMM's region
(the IR's reshape only adds or drops size-1 dims). ``op(view(y, S)) == view(op(y), S)`` when ``view`` only
regroups the leading dims and keeps the last one, so the view is moved after the op (other operands are
viewed the same way, for free); the op then reads the GEMM's 2-d output directly and fuses as its epilogue.
"""

from __future__ import annotations

from typing import Any

from kernelgen.frontend.fx_nodes import op_packet

# Packets computed element by element (same result whatever the leading shape).
ELEMENTWISE = frozenset({
    "add", "sub", "mul", "div", "pow", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid",
    "relu", "silu", "gelu", "reciprocal", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "where",
    "clamp", "clamp_min", "clamp_max", "logical_and", "logical_or", "_to_copy", "convert_element_type",
})
# Reductions over the last dim: (dims argument position, keepdim argument position).
ROW_REDUCTIONS = {"sum": (1, 2), "amax": (1, 2), "amin": (1, 2), "mean": (1, 2)}
_RESHAPES = frozenset({"view", "_unsafe_view", "reshape"})


def sink_views(gm: Any) -> int:
    """Rewrite ``gm`` in place; returns how many ops were moved above a reshape."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()  # the new nodes' metadata; stand-ins are made in it from the inputs' metadata
    moved = 0
    progress = True
    while progress:
        progress = False
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or op_packet(node) not in _RESHAPES or not _regroups_leading(node):
                continue
            for user in list(node.users):
                if _sink(gm.graph, node, user, mode):
                    moved += 1
                    progress = True
                    break
            if progress:
                break
    _collapse(gm.graph)
    for node in reversed(list(gm.graph.nodes)):  # reshapes left unread (only those: other ops may be impure)
        if node.op == "call_function" and op_packet(node) in _RESHAPES and not node.users:
            gm.graph.erase_node(node)
    gm.recompile()
    return moved


def _collapse(graph: Any) -> None:
    """``view(view(y, S), T)`` -> ``view(y, T)``, and ``y`` itself when ``T`` is its shape (an op sunk after its
    operand was viewed leaves such chains behind)."""
    import torch
    import torch.fx

    for node in list(graph.nodes):
        if node.op != "call_function" or op_packet(node) not in _RESHAPES:
            continue
        source = node.args[0]
        while isinstance(source, torch.fx.Node) and source.op == "call_function" and op_packet(source) in _RESHAPES \
                and isinstance(_val(source.args[0]), torch.Tensor) and _val(source.args[0]).is_contiguous():
            source = source.args[0]
        if source is node.args[0]:
            continue
        if list(_val(source).shape) == list(_val(node).shape):
            node.replace_all_uses_with(source)
        else:
            node.args = (source, *node.args[1:])


def _val(node: Any) -> Any:
    return node.meta.get("val") if hasattr(node, "meta") else None


def _regroups_leading(view: Any) -> bool:
    import torch

    src, out = _val(view.args[0]), _val(view)
    return (isinstance(src, torch.Tensor) and isinstance(out, torch.Tensor) and src.dim() == 2 and out.dim() >= 2
            and src.is_contiguous() and out.shape[-1] == src.shape[-1] and src.shape[-1] > 1
            and all(isinstance(d, int) for d in (*src.shape, *out.shape)))


def _sink(graph: Any, view: Any, user: Any, mode: Any) -> bool:
    import torch
    import torch.fx

    packet = op_packet(user)
    src = view.args[0]
    shape2d = list(_val(src).shape)
    out = _val(user)
    if user.op != "call_function" or not isinstance(out, torch.Tensor) or user.kwargs.get("out") is not None:
        return False
    if packet in ELEMENTWISE:
        if list(out.shape) != list(_val(view).shape):
            return False
        new_shape = shape2d
    elif packet in ROW_REDUCTIONS:
        dims_at, keep_at = ROW_REDUCTIONS[packet]
        dims = user.args[dims_at] if len(user.args) > dims_at else user.kwargs.get("dim")
        rank = _val(view).dim()
        if user.args[0] is not view or not isinstance(dims, (list, tuple)) or [d % rank for d in dims] != [rank - 1]:
            return False
        keep = bool(user.args[keep_at] if len(user.args) > keep_at else user.kwargs.get("keepdim", False))
        new_shape = [shape2d[0], 1] if keep else [shape2d[0]]
    else:
        return False
    operands = []
    for arg in user.args:
        if arg is view:
            operands.append(src)
        elif isinstance(arg, torch.fx.Node):
            operand = _operand_2d(graph, arg, view, shape2d, user, mode)
            if operand is None:
                return False
            operands.append(operand)
        elif isinstance(arg, (list, tuple)) and packet in ROW_REDUCTIONS and arg is user.args[1]:
            operands.append([-1])
        else:
            operands.append(arg)
    with graph.inserting_before(user):
        moved = graph.call_function(user.target, tuple(operands), dict(user.kwargs))
        back = graph.call_function(torch.ops.aten.view.default, (moved, list(out.shape)))
    try:
        _set_val(moved, mode)
        _set_val(back, mode)
        fits = list(_val(moved).shape) == new_shape and _val(back).stride() == out.stride()
    except Exception:  # the op does not take the 2-d operands after all: leave it where it is
        fits = False
    if not fits:
        graph.erase_node(back)
        graph.erase_node(moved)
        return False  # operand views made for it are dead code, removed at the end
    user.replace_all_uses_with(back)
    graph.erase_node(user)
    return True


def _operand_2d(graph: Any, arg: Any, view: Any, shape2d: list, user: Any, mode: Any) -> Any:
    """``arg`` seen in the 2-d shape: itself when it broadcasts over rows already, a free view when it has the
    viewed shape (contiguous) or only size-1 leading dims; None when no free view gives it."""
    import torch

    value = _val(arg)
    if not isinstance(value, torch.Tensor):
        return None
    target = list(_val(view).shape)
    if value.dim() <= 1:
        return arg
    if list(value.shape) == target and value.is_contiguous():
        shape = shape2d
    elif all(d == 1 for d in value.shape[:-1]):
        shape = [1, value.shape[-1]]
    else:
        return None
    # view(view(y, S), shape) is view(y, shape), and y itself when it has that shape: a view of a region's
    # output would keep the op out of that region
    while arg.op == "call_function" and op_packet(arg) in _RESHAPES and isinstance(_val(arg.args[0]), torch.Tensor) \
            and _val(arg.args[0]).is_contiguous():
        arg = arg.args[0]
    if list(_val(arg).shape) == shape:
        return arg
    with graph.inserting_before(user):
        node = graph.call_function(torch.ops.aten.view.default, (arg, shape))
        _set_val(node, mode)
    return node


def _set_val(node: Any, mode: Any) -> None:
    import torch
    import torch.fx

    def stand_in(n: Any) -> Any:
        v = n.meta["val"]
        return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device)

    with mode:
        args = torch.fx.node.map_arg(node.args, stand_in)
        kwargs = torch.fx.node.map_arg(node.kwargs, stand_in)
        node.meta["val"] = node.target(*args, **kwargs)


__all__ = ["ELEMENTWISE", "ROW_REDUCTIONS", "sink_views"]
