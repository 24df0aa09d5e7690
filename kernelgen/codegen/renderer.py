"""The renderer seam: one class per target language holds the op table, the prelude and typed helpers.

An op table maps an IR op name to an ``OpRule``: how its inputs are converted before the op applies (the
``operand`` mode), which dtype kinds it accepts and the function that writes the expression. Adding an op
is one row in ``CppRenderer.code_for_op`` and one in ``TritonRenderer.code_for_op`` (modelled on tinygrad's
``renderer/cstyle.py``). A rule that cannot match eager for a node raises ``UnsupportedOpError`` (a
``KernelgenError``), so dispatch runs that graph eagerly and logs the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from kernelgen.errors import UnsupportedOpError
from kernelgen.ir.graph import Graph

FLOAT, INT, BOOL = "float", "int", "bool"
ANY = frozenset({FLOAT, INT, BOOL})
NUMBER = frozenset({FLOAT, INT})
REAL = frozenset({FLOAT})
INTEGRAL = frozenset({INT, BOOL})

RANK = {"bool": 0, "uint8": 1, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "float16": 5, "bfloat16": 5,
        "float32": 6, "float64": 7}


_BITS = {"int8": 8, "uint8": 8, "int16": 16, "int32": 32, "int64": 64}
INT_LIMITS = {d: (0, 2**b - 1) if d == "uint8" else (-2**(b - 1), 2**(b - 1) - 1) for d, b in _BITS.items()}
"""The lowest and highest value of each integer dtype (where a max or a min over integers starts)."""


def kind(dtype: str) -> str:
    """``"float"``, ``"int"`` or ``"bool"``: the dtype category a rule accepts or refuses."""
    if dtype == "bool":
        return BOOL
    return FLOAT if dtype.startswith("float") or dtype == "bfloat16" else INT


def promote(a: str, b: str) -> str:
    """torch's type promotion of two tensor dtypes (``torch.promote_types``)."""
    if a == b:
        return a
    if {a, b} == {"uint8", "int8"}:
        return "int16"
    if {a, b} == {"float16", "bfloat16"}:
        return "float32"
    return max(a, b, key=RANK.__getitem__)


@dataclass(frozen=True)
class OpRule:
    """How one IR op renders in one language.

    ``operand`` names the dtype the inputs are converted to before ``render`` sees them: ``"result"`` (the
    node's dtype), ``"promote"`` (the inputs' promoted dtype: comparisons), ``"bool"`` (logical ops),
    ``"input"`` (each input as it is: isnan) or ``"node"`` (nothing converted: the rule reads the node).
    ``accepts`` holds the kinds of that operand dtype the rule can match eager for; for another one the
    renderer raises ``UnsupportedOpError``. ``render`` is called with a language's per-node context and
    the converted input expressions; it returns the expression (or, in Triton, statements ending in it).
    """

    render: Callable[..., Any]
    operand: str = "result"
    accepts: frozenset[str] = ANY


class Renderer:
    """Base of the per-language renderers: a name, a prelude and an op table (``code_for_op``).

    Subclasses fill the table; ``rule`` finds a node's row and checks its dtype kind. Renderers are
    stateless and thread-safe: per-graph state lives in the emitters that use them.
    """

    language: ClassVar[str] = ""
    prelude: ClassVar[str] = ""
    code_for_op: ClassVar[Mapping[str, OpRule]] = {}

    @classmethod
    def ops(cls) -> frozenset[str]:
        """Every IR op this renderer has a row for (the row may still refuse some dtypes)."""
        return frozenset(cls.code_for_op)

    @classmethod
    def operand_dtype(cls, graph: Graph, node_id: int) -> str:
        """The dtype node ``node_id``'s inputs are converted to before its op applies."""
        node = graph.nodes[node_id]
        mode = cls.code_for_op[node.op].operand
        if mode == "promote":
            dtypes = [graph.nodes[j].spec.dtype for j in node.inputs]
            result = dtypes[0]
            for d in dtypes[1:]:
                result = promote(result, d)
            return result
        if mode == "bool":
            return "bool"
        if mode in ("input", "node") and node.inputs:
            return graph.nodes[node.inputs[0]].spec.dtype
        return node.spec.dtype

    @classmethod
    def rule(cls, graph: Graph, node_id: int) -> OpRule:
        """The row for node ``node_id``; ``UnsupportedOpError`` when there is none or it refuses the dtype."""
        node = graph.nodes[node_id]
        row = cls.code_for_op.get(node.op)
        if row is None:
            raise UnsupportedOpError(f"the {cls.language} renderer has no rule for op {node.op!r} (node %{node_id}); "
                                     "eager PyTorch runs this graph")
        dtype = cls.operand_dtype(graph, node_id)
        if kind(dtype) not in row.accepts:
            raise UnsupportedOpError(f"the {cls.language} renderer has no {dtype} rule for op {node.op!r} "
                                     f"(node %{node_id}); eager PyTorch runs this graph")
        return row


def integer_divisor(graph: Graph, node_id: int, language: str) -> int:
    """The constant divisor of integer division node ``node_id``: eager raises for a zero divisor (a kernel
    cannot), and INT_MIN / -1 traps in C, so only a constant other than 0 and -1 renders."""
    node = graph.nodes[node_id]
    divisor = graph.nodes[node.inputs[1]]
    value = divisor.attr("value") if divisor.op == "const" else None
    if value is not None and not isinstance(value, str) and int(value) == value and divisor.spec.dtype in _BITS:
        bits = _BITS[divisor.spec.dtype]  # the constant as the kernel holds it: wrapped into its dtype
        value = int(value) % 2**bits
        value = value - 2**bits if divisor.spec.dtype != "uint8" and value >= 2 ** (bits - 1) else value
    if value is None or isinstance(value, str) or int(value) in (0, -1) or int(value) != value:
        raise UnsupportedOpError(f"integer {node.op} by {'a tensor' if value is None else value!r} (node %{node_id}); "
                                 f"the {language} renderer divides integers only by a constant other than 0 and -1 "
                                 "(eager raises ZeroDivisionError for 0), so eager PyTorch runs this graph")
    return int(value)


__all__ = ["ANY", "BOOL", "FLOAT", "INT", "INTEGRAL", "INT_LIMITS", "NUMBER", "OpRule", "RANK", "REAL", "Renderer",
           "integer_divisor", "kind", "promote"]
