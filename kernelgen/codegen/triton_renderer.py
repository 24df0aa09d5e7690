"""The Triton renderer: the op table (one ``OpRule`` per IR op) and the per-graph ``ExprEmitter`` using it.

Values live in variables holding their compute dtype (float32 for float16/bfloat16/float32, as the IR
prescribes); stores and ``cast`` nodes round, and so does every place where eager would have read the value
back in its own dtype (a change of dtype, a comparison). Eager PyTorch is the contract, NaN/inf placement and
integer wraparound included. A row that cannot match eager for a node raises ``UnsupportedOpError`` and
dispatch runs that graph eagerly. ``tests/codegen/test_triton_expr.py`` sweeps every (op, dtype) of the table
over NaN, infinities, signed zeros, extremes and subnormals against eager.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from kernelgen.codegen import triton_rules as rules
from kernelgen.codegen.renderer import INTEGRAL, NUMBER, REAL, OpRule, Renderer
from kernelgen.codegen.triton_types import (HEADER, INF, NARROW, TL_DTYPE, and_, bf16_round, compute_dtype, div_expr,
                                            is_float, or_, scalar, sqrt_expr)
from kernelgen.ir.graph import Graph, Node

_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _formula(text: str, accepts: frozenset[str] = REAL, operand: str = "result") -> OpRule:
    """A one-expression row: ``text`` with ``{a}`` (and ``{b}``) standing for the converted inputs."""
    return OpRule(lambda em, i, n, *xs: [text.format(**dict(zip("ab", xs)))], operand=operand, accepts=accepts)


def _bool_or(op: str) -> OpRule:
    """add/mul/maximum/minimum: of bools they are or/and (eager keeps bool; int1 arithmetic would wrap)."""
    def render(em: "ExprEmitter", i: int, n: Node, a: str, b: str) -> list[str]:
        if n.spec.dtype == "bool":
            return [or_(a, b) if op in ("add", "maximum") else and_(a, b)]
        if op in ("maximum", "minimum"):
            nan = ", propagate_nan=tl.PropagateNan.ALL" if is_float(n.spec.dtype) else ""  # eager propagates NaN
            return [f"tl.{op}({a}, {b}{nan})"]
        return [f"({a} {'+' if op == 'add' else '*'} {b})"]

    return OpRule(render)


def _compare(em: "ExprEmitter", i: int, n: Node) -> list[str]:
    """Compared in the promoted dtype, as eager: float16/bfloat16 operands are rounded to it first (the IR
    keeps such intermediates and constants unrounded, which is within tolerance for arithmetic but flips a
    comparison: float16 x == 0.1 compares x with 0.0999755859375 in eager)."""
    operand = TritonRenderer.operand_dtype(em.graph, i)
    a, b = (em.narrow(em.names[j], operand) if operand in NARROW and em.graph.nodes[j].spec.dtype == operand
            else em.arg(j, operand) for j in n.inputs)  # arg rounds the other dtypes
    return [f"({a} {_COMPARE[n.op]} {b})"]


def _where(em: "ExprEmitter", i: int, n: Node) -> list[str]:
    dt = n.spec.dtype
    return [f"tl.where({em.as_bool(n.inputs[0])}, {em.arg(n.inputs[1], dt)}, {em.arg(n.inputs[2], dt)})"]




class TritonRenderer(Renderer):
    """Triton's op table. Rows take (emitter, node id, node, converted inputs) and return statements."""

    language: ClassVar[str] = "Triton"
    prelude: ClassVar[str] = HEADER
    code_for_op: ClassVar[dict[str, OpRule]] = {
        "const": OpRule(lambda em, i, n: [scalar(n.attr("value"), n.spec.dtype)], operand="node"),
        "cast": OpRule(rules.cast, operand="node"),
        "where": OpRule(_where, operand="node"),
        **{op: OpRule(_compare, operand="promote") for op in _COMPARE},
        "logical_and": OpRule(lambda em, i, n, a, b: [and_(a, b)], operand="bool"),
        "logical_or": OpRule(lambda em, i, n, a, b: [or_(a, b)], operand="bool"),
        "logical_xor": OpRule(lambda em, i, n, a, b: [f"{a} != {b}"], operand="bool"),
        "logical_not": OpRule(lambda em, i, n, a: [f"tl.where({a}, False, True)"], operand="bool"),
        "add": _bool_or("add"), "mul": _bool_or("mul"), "maximum": _bool_or("maximum"), "minimum": _bool_or("minimum"),
        "sub": _formula("({a} - {b})", NUMBER), "div": OpRule(lambda em, i, n, a, b: [div_expr(a, b, n.spec.dtype)]),
        "clone": _formula("{a}", frozenset({"float", "int", "bool"})),  # a fresh copy: the value itself
        "neg": _formula("-{a}", NUMBER), "abs": _formula("tl.abs({a})", NUMBER),
        # `a < 0` is false for NaN and -0.0, so both pass through as in eager (relu(NaN) = NaN)
        "relu": _formula("tl.where({a} < 0, 0, {a})", NUMBER),
        "exp": _formula("tl.exp({a})"), "log": _formula("tl.log({a})"), "sqrt": OpRule(lambda em, i, n, a: [sqrt_expr(a, n.spec.dtype)]),
        "rsqrt": _formula("tl.rsqrt({a})"), "tanh": OpRule(rules.tanh_, accepts=REAL),
        "erf": _formula("tl.erf({a})"), "sigmoid": _formula("tl.sigmoid({a})"),
        "silu": _formula("{a} * tl.sigmoid({a})"), "reciprocal": OpRule(lambda em, i, n, a: [div_expr("1.0", a, n.spec.dtype)]),
        "gelu": OpRule(rules.gelu, accepts=REAL),
        "pow": OpRule(rules.pow_, accepts=NUMBER),
        "expm1": OpRule(rules.expm1, accepts=REAL), "log1p": OpRule(rules.log1p, accepts=REAL),
        "exp2": _formula("tl.exp2({a})"), "log2": _formula("tl.log2({a})"),
        "log10": _formula("tl.log({a}) * 0.4342944819032518"),
        "sin": _formula("tl.sin({a})"), "cos": _formula("tl.cos({a})"), "tan": OpRule(lambda em, i, n, a: [div_expr(f"tl.sin({a})", f"tl.cos({a})", n.spec.dtype)]),
        "sinh": OpRule(rules.sinh, accepts=REAL), "cosh": OpRule(rules.cosh, accepts=REAL),
        "asinh": OpRule(rules.asinh, accepts=REAL), "acosh": OpRule(rules.acosh, accepts=REAL),
        "atanh": OpRule(rules.atanh, accepts=REAL),
        "asin": OpRule(rules.asin, accepts=REAL), "acos": OpRule(rules.acos, accepts=REAL),
        "atan": OpRule(rules.atan, accepts=REAL),
        "atan2": OpRule(rules.atan2, accepts=REAL),
        **{op: OpRule(rules.rounding(op), accepts=NUMBER) for op in ("floor", "ceil", "trunc", "round")},
        "sign": OpRule(rules.sign),
        "isnan": OpRule(rules.classify("{x} != {x}", "False"), operand="input"),
        "isinf": OpRule(rules.classify("tl.abs({x}) == " + INF, "False"), operand="input"),
        "isfinite": OpRule(rules.classify("tl.abs({x}) < " + INF, "True"), operand="input"),
        **{f"bitwise_{op}": OpRule(rules.bitwise(op), accepts=INTEGRAL) for op in ("and", "or", "xor", "not")},
        "bitwise_left_shift": OpRule(rules.shift(True), accepts=frozenset({"int"})),
        "bitwise_right_shift": OpRule(rules.shift(False), accepts=frozenset({"int"})),
        "fmod": OpRule(rules.fmod, accepts=NUMBER), "remainder": OpRule(rules.remainder, accepts=NUMBER),
        "floor_divide": OpRule(rules.floor_divide, accepts=NUMBER),
    }


OPS = frozenset(op for op, row in TritonRenderer.code_for_op.items() if row.accepts)
"""Every IR op the Triton renderer renders for some dtype (a row may still refuse some dtypes)."""
REFUSED = frozenset(TritonRenderer.code_for_op) - OPS
"""IR ops the Triton renderer always refuses (eager runs them), with the reason in the error."""


class ExprEmitter:
    """Turns graph nodes into Triton statements ``v<i> = ...`` over named values.

    ``names`` maps node id -> variable holding that node's value in its compute dtype; the caller seeds
    it with the loaded inputs and reads the results from it. Ops are rows of ``TritonRenderer.code_for_op``.
    A node whose exact eager result the renderer cannot produce raises ``UnsupportedOpError`` (a
    ``KernelgenError``), so dispatch runs that graph eagerly.
    """

    def __init__(self, graph: Graph, names: dict[int, str] | None = None, interpreter: bool = False) -> None:
        self.graph = graph
        self.names: dict[int, str] = dict(names or {})
        self.interpreter = interpreter  # render interpreter-safe formulas (see bf16_round)

    def emit(self, ids: Iterable[int]) -> list[str]:
        lines: list[str] = []
        for i in ids:
            if i not in self.names:
                lines.extend(self.node(i))
        return lines

    def node(self, i: int) -> list[str]:
        """Statements computing node ``i`` into ``v<i>`` (the last one assigns it)."""
        n = self.graph.nodes[i]
        row = TritonRenderer.rule(self.graph, i)
        dt = TritonRenderer.operand_dtype(self.graph, i)
        if row.operand == "bool":
            args = [self.as_bool(j) for j in n.inputs]
        elif row.operand == "input":  # as eager holds it: a float16/bfloat16 intermediate is rounded
            args = [self.narrow(self.names[j], self.graph.nodes[j].spec.dtype)
                    if self.graph.nodes[j].spec.dtype in NARROW else self.names[j] for j in n.inputs]
        elif row.operand in ("node", "promote"):  # the rule converts its inputs itself
            args = []
        else:
            args = [self.arg(j, dt) for j in n.inputs]
        lines = row.render(self, i, n, *args)
        out = f"v{i}"
        self.names[i] = out
        return lines[:-1] + [f"{out} = {lines[-1]}"]

    def arg(self, j: int, dtype: str | None = None) -> str:
        """Input ``j`` converted to ``dtype``'s compute dtype when it is held in another one.

        Where the dtype changes, eager has the value stored in its own dtype and converts that: a float16 or
        bfloat16 input (which the IR holds unrounded in float32) is rounded to its dtype first, and a value
        of another dtype becoming float16/bfloat16 is rounded to that (int32 2049 + float16 1.0 is
        2048 + 1.0 in eager)."""
        name = self.names[j]
        node = self.graph.nodes[j]
        src = node.spec.dtype
        if dtype is None or src == dtype:
            return name
        if node.op == "const":  # a Python scalar becomes the consumer's dtype directly: -1 / uint8 y is -1.0 / y
            return scalar(node.attr("value"), dtype)
        if src in NARROW:
            name = self.narrow(name, src)
        if dtype in NARROW:
            return self.narrow(name if compute_dtype(src) == "float32" else f"{name}.to(tl.float32)", dtype)
        if compute_dtype(src) == compute_dtype(dtype):
            return name
        return f"{name}.to({TL_DTYPE[compute_dtype(dtype)]})"

    def narrow(self, x: str, dtype: str) -> str:
        """float32 ``x`` rounded to float16/bfloat16 (still held as float32)."""
        if dtype == "bfloat16" and self.interpreter:
            return bf16_round(x)
        return f"{x}.to({TL_DTYPE[dtype]}).to(tl.float32)"

    def as_bool(self, j: int) -> str:
        name = self.names[j]
        return name if self.graph.nodes[j].spec.dtype == "bool" else f"({name} != 0)"


__all__ = ["OPS", "REFUSED", "ExprEmitter", "TritonRenderer"]
