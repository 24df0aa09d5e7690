"""Lowering of one fx node (``lower``): its op's canonical name, the refusal of mutation, and the rule table's lookup.

Every rule module is imported here so the table (``kernelgen.lowering.rules.RULES``) is complete before the
first lookup: ``elementwise``, ``composite``, ``reduction``, ``pointwise``, ``moves``, ``scans``, ``windows``,
``scatters``, ``sorts`` and ``aten``.
"""

from __future__ import annotations

import operator
from typing import Any

from kernelgen.errors import UnsupportedOpError
from kernelgen.ir.graph import NodeRef
from kernelgen.ir.values import TensorSpec
# Imported for their registrations: the table is complete once this module is.
from kernelgen.lowering import (composite, elementwise, moves, pointwise, reduction, scans, scatters,  # noqa: F401
                                sorts, windows)
from kernelgen.lowering.aten import aten_name
from kernelgen.lowering.rules import REFUSED, RULES

# Methods whose arguments are not the function's: x.where(cond, y) is torch.where(cond, x, y)
_METHOD_NAMES = {"where": "Tensor.where"}


def canonical_name(kind: str, target: Any) -> str:
    """'add', 'softmax', 'gelu', ... for a call_function target or a call_method name."""
    if kind == "call_method":
        return _METHOD_NAMES.get(str(target), str(target))
    if kind == "call_function":
        if _is_aten_overload(target):  # Dynamo / AOTAutograd graphs: rules in kernelgen.lowering.aten
            return aten_name(target)
        if target is operator.getitem:
            return "getitem"
        special = {operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
                   operator.neg: "neg", operator.pow: "pow", operator.matmul: "matmul", operator.gt: "gt",
                   operator.ge: "ge", operator.lt: "lt", operator.le: "le", operator.eq: "eq", operator.ne: "ne",
                   operator.and_: "bitwise_and", operator.or_: "bitwise_or", operator.xor: "bitwise_xor",
                   operator.invert: "bitwise_not", operator.lshift: "bitwise_left_shift",
                   operator.rshift: "bitwise_right_shift", operator.floordiv: "floor_divide",
                   operator.mod: "remainder", abs: "abs",
                   operator.abs: "abs", getattr: "getattr"}
        if target in special:
            return special[target]
        if getattr(target, "_kernelgen_custom_call", False):  # set on kernelgen.custom_call
            return "custom_call"
        name = getattr(target, "__name__", None)
        if name is not None and any(getattr(ns, name, None) is target for ns in _torch_namespaces()):
            return name
        # torch.masked.sum, a user's own `sum`...: same __name__, other semantics (a mask), so not the handler's op
        return f"{getattr(target, '__module__', None) or ''}.{name or target}".lstrip(".")
    raise UnsupportedOpError(f"fx node kind {kind!r} is not supported")


def _is_aten_overload(target: Any) -> bool:
    import torch

    return isinstance(target, torch._ops.OpOverload)


def _torch_namespaces() -> tuple[Any, ...]:
    """Where the functions the handlers are named after live: a call target is the op only if it is one of these."""
    import torch

    return (torch, torch.nn.functional, torch.special, torch._C._nn, torch._C._special, torch.Tensor)


def lower(b: Any, kind: str, target: Any, args: tuple, kwargs: dict, meta: TensorSpec | None, where: str) -> Any:
    """Append the primitives for one fx node to builder ``b``; return its node ref (or a Python value)."""
    if kind == "get_attr":
        raise UnsupportedOpError(f"module attribute {target!r} at {where}; pass tensors as function arguments")
    name = canonical_name(kind, target)
    _refuse_mutation(name, kwargs, where)
    if name in REFUSED:
        raise UnsupportedOpError(f"{REFUSED[name]} (`{where}`)")
    handler = RULES.get(name)
    if handler is None:
        raise UnsupportedOpError(f"unsupported op {name!r} at `{where}`; supported: {', '.join(sorted(RULES))}")
    result = handler(b, args, kwargs, meta, where)
    if isinstance(result, int) and not isinstance(result, NodeRef) and not isinstance(result, bool) \
            and name not in ("size", "dim", "getattr"):
        result = NodeRef(result)
    return result


def _refuse_mutation(name: str, kwargs: dict, where: str) -> None:
    """Kernels only write their own outputs: an op that writes into a tensor (``x.relu_()``, ``out=``,
    ``inplace=True``) would lose eager's mutation, so the graph runs eagerly instead."""
    if kwargs.get("out") is not None or kwargs.get("inplace") is True:
        raise UnsupportedOpError(f"`{where}` writes into an existing tensor (out= / inplace=True); kernelgen "
                                 "kernels do not mutate tensors, so this graph runs eagerly: return a new tensor instead")
    if name.endswith("_") and not name.startswith("__"):
        raise UnsupportedOpError(f"in-place op {name!r} at `{where}`; kernelgen kernels do not mutate tensors, so "
                                 f"this graph runs eagerly: use {name.rstrip('_')!r}, which returns a new tensor")


def refusal(target: Any) -> str | None:
    """Why a call of ``target`` stays ATen whatever its arguments (``kernelgen.lowering.rules.REFUSED``), or None."""
    return REFUSED.get(canonical_name("call_function", target))


def op_name(target: Any) -> str:
    """The handler name a call of function ``target`` is lowered by ('gelu' for F.gelu); unhandled names too."""
    return canonical_name("call_function", target)


def handled_ops() -> frozenset[str]:
    """Names of every PyTorch op (function or method) the lowering has a handler for."""
    return frozenset(RULES)
