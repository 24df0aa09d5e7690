"""The lowering's one rule table, and the helpers every rule module shares.

A rule lowers one PyTorch op (a torch function, a Tensor method or an ATen overload packet, by name) to
primitive ops appended to a ``GraphBuilder``: ``handler(builder, args, kwargs, meta, where)`` gets the fx
node's arguments with tensors already lowered to ``NodeRef``s, ``meta`` (the result's ``TensorSpec``, None
when unknown) and ``where`` (the source text, for messages), and returns a ``NodeRef`` (or a Python value for
size queries and tuples). Rule modules register with ``@handles("name", ...)``; ``kernelgen.lowering.lower``
looks them up here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernelgen.errors import UnsupportedOpError
from kernelgen.ir.graph import NodeRef

Handler = Callable[..., Any]
RULES: dict[str, Handler] = {}
# Ops the lowering knows and leaves to ATen, with the reason: refused before the node's arguments are lowered
# (an argument kernelgen has no dtype for, such as a philox seed, must not hide the real reason).
REFUSED: dict[str, str] = {}


def handles(*names: str) -> Callable[[Handler], Handler]:
    """Register the decorated handler as the rule of every op in ``names`` (a later registration wins)."""
    def register(fn: Handler) -> Handler:
        for name in names:
            RULES[name] = fn
        return fn

    return register


def ref(x: Any) -> Any:
    """Node id ``x`` as a lowered tensor value (what handlers receive for tensor arguments)."""
    return NodeRef(x)


def is_node(x: Any) -> bool:
    """Whether ``x`` is a lowered tensor value rather than a Python scalar or container."""
    return isinstance(x, NodeRef)


def is_float_dtype(dtype: str) -> bool:
    """Whether ``dtype`` (a kernelgen dtype name) is a floating-point type."""
    return dtype.startswith("float") or dtype == "bfloat16"


class Refused:
    """An output of a multi-output op that a rule does not lower, in place of its value in the returned tuple:
    reading it (the ``getitem`` rule) raises ``UnsupportedOpError`` with ``reason``, so a region never holds an
    op whose unlowered output something reads, and the partitioner logs why it stayed ATen."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def arg(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    """Argument ``index`` of the call, else its keyword ``name``, else ``default``."""
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def operand(b: Any, value: Any, like: Any) -> int:
    """A node id for a tensor operand or a Python scalar (as a const of the tensor's dtype)."""
    if is_node(value):
        return int(value)
    if isinstance(value, (bool, int, float)):
        return b.scalar_or_node(value, like)
    raise UnsupportedOpError(f"operand {value!r} of type {type(value).__name__} is not a tensor or a number")


def cast_to(b: Any, x: int, dtype: str) -> int:
    """Node ``x`` converted to ``dtype`` (``x`` itself when it already is)."""
    if b.spec(x).dtype == dtype:
        return x
    return b.elementwise("cast", (x,), dtype)


def float_result(name: str, meta: Any, where: str) -> None:
    """Float math whose eager result is not a float (gelu of int64) is an eager error: let eager raise it."""
    if meta is None or not is_float_dtype(meta.dtype):
        raise UnsupportedOpError(f"{name} of {getattr(meta, 'dtype', 'unknown')} at `{where}` is float math; eager "
                                 "decides (it raises for integer inputs)")
