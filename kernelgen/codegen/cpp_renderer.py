"""The C-style renderers: ``CStyleRenderer`` (rows that are plain C) and ``CppRenderer`` (those plus libm,
the prelude's helpers and float16/bfloat16), one ``OpRule`` per IR op, over typed literals and conversions.

Numerics (see ``kernelgen.ir.graph``): float16/bfloat16/float32 values are computed in ``float``, float64 in
``double``; float16 and bfloat16 are stored as ``uint16_t`` and converted with the integer bit tricks of
``cpp_prelude.PRELUDE`` that gcc vectorises. Float math stays in float (``expf``, not ``exp``) so gcc can
call libmvec. Values follow eager PyTorch, NaN and ±Inf included: max/min/relu/clamp propagate NaN, integer
pow, shifts and overflow wrap around (-fwrapv), floor division and remainder round as Python does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from kernelgen.codegen.cpp_prelude import PRELUDE
from kernelgen.codegen.renderer import INTEGRAL, NUMBER, REAL, OpRule, Renderer, integer_divisor
from kernelgen.ir.graph import ELEMENTWISE_OPS, Graph, Node

STORAGE = {"float16": "uint16_t", "bfloat16": "uint16_t", "float32": "float", "float64": "double",
           "int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
           "bool": "uint8_t"}
COMPUTE = {**STORAGE, "float16": "float", "bfloat16": "float", "bool": "bool"}

# libm functions whose float version is the name plus "f"; the rest map explicitly
_LIBM_F = {"abs": "fabsf", "max": "kg_maxf", "min": "kg_minf"}
_LIBM_D = {"abs": "fabs", "max": "kg_max", "min": "kg_min", "round": "rint"}


def is_float(dtype: str) -> bool:
    return dtype.startswith("float") or dtype == "bfloat16"


def literal(value: object, dtype: str) -> str:
    """A C++ literal of ``COMPUTE[dtype]`` equal to IR const ``value`` rounded as torch rounds it."""
    if isinstance(value, str):  # the IR spells non-finite floats as strings (JSON has none)
        value = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[value]
    ctype = COMPUTE[dtype]
    if dtype == "bool":
        return "true" if value else "false"
    if not is_float(dtype):
        return f"(({ctype}){int(value)}LL)"
    value = float(value)
    suffix = "f" if ctype == "float" else ""
    if math.isnan(value):
        return f"__builtin_nan{suffix}(\"\")"
    if math.isinf(value):
        return f"({'-' if value < 0 else ''}__builtin_inf{suffix}())"
    # A double literal rounded once to float matches torch.tensor(python_float, dtype=float32).
    return f"(({ctype}){value!r})" if ctype == "float" else repr(value)


def convert_value(value: str, src: str, dst: str) -> str:
    """``value`` (in ``COMPUTE[src]``) in ``COMPUTE[dst]``, without rounding through a narrow dtype."""
    if COMPUTE[src] == COMPUTE[dst]:
        return value
    if dst == "bool":
        return f"({value} != 0)"
    return f"(({COMPUTE[dst]}){value})"


@dataclass(frozen=True)
class CppOp:
    """What a C++ rule sees: the node, its operand dtype and the typed spellings of that dtype."""

    graph: Graph
    node_id: int
    dtype: str  # the operand dtype the inputs were converted to
    args: tuple[str, ...]  # the inputs as given (in their own compute types)

    @property
    def node(self) -> Node:
        return self.graph.nodes[self.node_id]

    @property
    def ctype(self) -> str:
        return COMPUTE[self.dtype]

    @property
    def floating(self) -> bool:
        return self.ctype in ("float", "double")

    def fn(self, name: str) -> str:
        """The libm (or prelude) function ``name`` for this compute type: ``expm1f`` for float."""
        if self.ctype == "float":
            return _LIBM_F.get(name, ("rint" if name == "round" else name) + "f")
        return _LIBM_D.get(name, name)

    def lit(self, value: object) -> str:
        return literal(value, self.dtype)

    @property
    def one(self) -> str:
        return {"float": "1.0f", "double": "1.0"}.get(self.ctype, "1")

    def in_dtype(self, k: int) -> str:
        return self.graph.nodes[self.node.inputs[k]].spec.dtype

    def const_input(self, k: int) -> float | None:
        node = self.graph.nodes[self.node.inputs[k]]
        if node.op != "const" or isinstance(node.attr("value"), str):
            return None
        return float(node.attr("value"))


def _infix(symbol: str) -> OpRule:
    return OpRule(lambda c, a, b: f"({a} {symbol} {b})")


def _call(name: str, accepts: frozenset[str] = REAL) -> OpRule:
    return OpRule(lambda c, *xs: f"{c.fn(name)}({', '.join(xs)})", accepts=accepts)


def _rounding(name: str) -> OpRule:
    """floor/ceil/trunc/round: libm for floats; an integer is its own value."""
    return OpRule(lambda c, a: f"{c.fn(name)}({a})" if c.floating else a, accepts=NUMBER)


def _cast(c: CppOp, x: str) -> str:
    src, dst = c.in_dtype(0), c.node.spec.dtype
    if dst == "bool":
        return f"({x} != 0)"
    if dst == "float16":
        return f"kg_h2f(kg_f2h({convert_value(x, src, 'float32')}))"
    if dst == "bfloat16":
        return f"kg_bf2f(kg_f2bf({convert_value(x, src, 'float32')}))"
    return f"(({COMPUTE[dst]}){x})"


def _where(c: CppOp, cond: str, a: str, b: str) -> str:
    dt = c.node.spec.dtype
    a, b = convert_value(a, c.in_dtype(1), dt), convert_value(b, c.in_dtype(2), dt)
    return f"({convert_value(cond, c.in_dtype(0), 'bool')} ? ({COMPUTE[dt]}){a} : ({COMPUTE[dt]}){b})"


def _extremum(op: str) -> OpRule:
    def render(c: CppOp, a: str, b: str) -> str:
        if c.floating:
            return f"{c.fn('max' if op == 'maximum' else 'min')}({a}, {b})"
        return f"({a} {'>' if op == 'maximum' else '<'} {b} ? {a} : {b})"

    return OpRule(render)


def _exp(c: CppOp, a: str) -> str:
    if c.ctype == "float" and _is_minus_its_max(c.graph, c.node.inputs[0]):
        return f"kg_exp_nonpos_f({a})"
    return f"{c.fn('exp')}({a})"


def _is_minus_its_max(graph: Graph, node_id: int) -> bool:
    """Whether node ``node_id`` is ``a - max(a)`` (over a's last dim), so never positive: softmax's exp input."""
    node = graph.nodes[node_id]
    if node.op != "sub":
        return False
    a, m = node.inputs
    return graph.nodes[m].op == "max" and graph.nodes[m].inputs[0] == a


def _gelu(c: CppOp, x: str) -> str:
    one, half = c.one, ("0.5f" if c.ctype == "float" else "0.5")
    if c.node.attr("approximate", "none") == "tanh":
        if c.ctype == "float":  # the inline tanh is ~1.7x faster than the exp form below
            c0, c1 = c.lit(math.sqrt(2.0 / math.pi)), c.lit(0.044715)
            return f"({half} * {x} * ({one} + kg_tanhf_approx({c0} * ({x} + {c1} * {x} * {x} * {x}))))"
        # 0.5 x (1 + tanh(u)) == x / (1 + exp(-2u)): one exp instead of a (3x slower) vector tanh
        c0, c1 = c.lit(-2.0 * math.sqrt(2.0 / math.pi)), c.lit(0.044715)
        return f"({x} / ({one} + {c.fn('exp')}({c0} * ({x} + {c1} * {x} * {x} * {x}))))"
    erf = "kg_erff_approx" if c.ctype == "float" else c.fn("erf")  # ~2.5x faster than with libmvec erff
    return f"({half} * {x} * ({one} + {erf}({x} * {c.lit(math.sqrt(0.5))})))"


def _pow(c: CppOp, x: str, y: str) -> str:
    """Small constant exponents become multiplications (x**2 in rms norm must not call powf)."""
    exponent, ctype = c.const_input(1), c.ctype
    if exponent is not None:
        special = {1: x, 2: f"({x} * {x})", 3: f"({x} * {x} * {x})"}
        if c.floating:
            special.update({0.5: f"{c.fn('sqrt')}({x})", -1: f"(({ctype})1 / {x})", -2: f"(({ctype})1 / ({x} * {x}))"})
        if exponent in special:
            return special[exponent]
    if c.floating:
        return f"{c.fn('pow')}({x}, {y})"
    return f"(({ctype})kg_ipow((int64_t){x}, (int64_t){y}))"


def _division(fp: str, integer: str) -> OpRule:
    """fmod / remainder / floor_divide: a prelude helper per kind; integers need a safe constant divisor."""
    def render(c: CppOp, a: str, b: str) -> str:
        if c.floating:
            return f"{fp}<{c.ctype}>({a}, {b})" if fp.startswith("kg_") else f"{c.fn(fp)}({a}, {b})"
        integer_divisor(c.graph, c.node_id, "C++")
        return f"{integer}<{c.ctype}>({a}, {b})" if integer.startswith("kg_") else f"(({c.ctype})({a} {integer} {b}))"

    return OpRule(render, accepts=NUMBER)


def _round_trip(c: CppOp, x: str) -> str:
    """``x`` as eager holds it: a float16/bfloat16 intermediate rounded to its dtype (isinf(exp(x)) of half)."""
    dt = c.in_dtype(0)
    return {"float16": f"kg_h2f(kg_f2h({x}))", "bfloat16": f"kg_bf2f(kg_f2bf({x}))"}.get(dt, x)


def _classify(float_test: str, int_value: str) -> OpRule:
    def render(c: CppOp, x: str) -> str:
        if not c.floating:
            return int_value
        inf = c.lit("inf")
        return "(" + float_test.format(x=_round_trip(c, x), abs=c.fn("abs"), inf=inf) + ")"

    return OpRule(render, operand="input")


def _sign(c: CppOp, x: str) -> str:
    if c.dtype == "bool":
        return x
    return f"(({c.ctype})((({c.ctype})0 < {x}) - ({x} < ({c.ctype})0)))"  # NaN and -0.0 give +0, as eager


class CStyleRenderer(Renderer):
    """The C-style base: rows that are plain C expressions over C scalar types (operators, selects, C casts),
    shared by every C-family renderer; ``expr`` converts the inputs and applies the op's row."""

    language: ClassVar[str] = "C"
    code_for_op: ClassVar[dict[str, OpRule]] = {
        "const": OpRule(lambda c: c.lit(c.node.attr("value")), operand="node"),
        "where": OpRule(_where, operand="node"),
        **{op: _infix(sym) for op, sym in (("add", "+"), ("sub", "-"), ("mul", "*"), ("div", "/"))},
        **{op: OpRule(_infix(sym).render, operand="promote")
           for op, sym in (("eq", "=="), ("ne", "!="), ("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="))},
        "logical_and": OpRule(_infix("&&").render, operand="bool"),
        "logical_or": OpRule(_infix("||").render, operand="bool"),
        "logical_xor": OpRule(_infix("!=").render, operand="bool"),
        "logical_not": OpRule(lambda c, a: f"(!{a})", operand="bool"),
        "clone": OpRule(lambda c, a: a),  # a fresh copy of its input: the value itself
        "neg": OpRule(lambda c, a: f"(-{a})"),
        "relu": OpRule(lambda c, a: f"({a} < 0 ? ({c.ctype})0 : {a})"),  # nan < 0 is false: relu(nan) is nan
        "sign": OpRule(_sign),
        "bitwise_and": OpRule(lambda c, a, b: f"(({c.ctype})({a} & {b}))", accepts=INTEGRAL),
        "bitwise_or": OpRule(lambda c, a, b: f"(({c.ctype})({a} | {b}))", accepts=INTEGRAL),
        "bitwise_xor": OpRule(lambda c, a, b: f"(({c.ctype})({a} ^ {b}))", accepts=INTEGRAL),
        "bitwise_not": OpRule(lambda c, a: f"(!{a})" if c.dtype == "bool" else f"(({c.ctype})~{a})", accepts=INTEGRAL),
    }

    @classmethod
    def expr(cls, graph: Graph, node_id: int, args: Sequence[str]) -> str:
        """The expression of elementwise node ``node_id`` given its inputs' expressions ``args`` (in their
        compute types); the result is in the node's compute type. ``ValueError`` for a non-elementwise op,
        ``UnsupportedOpError`` for an op or dtype this renderer cannot match eager for."""
        node = graph.nodes[node_id]
        if node.op not in ELEMENTWISE_OPS:
            raise ValueError(f"node %{node_id} ({node.op}) is not elementwise; give its value to emit() in env")
        row = cls.rule(graph, node_id)
        operand = cls.operand_dtype(graph, node_id)
        c = CppOp(graph, node_id, operand, tuple(args))
        if row.operand in ("node", "input"):
            return row.render(c, *args)
        xs = [convert_value(a, graph.nodes[j].spec.dtype, operand) for a, j in zip(args, node.inputs)]
        return row.render(c, *xs)


class CppRenderer(CStyleRenderer):
    """C++ (g++ with libm/libmvec and ``PRELUDE``'s helpers): the C-style rows plus math, NaN-propagating
    max/min, float16/bfloat16 casts, Python-style division and eager's shifts."""

    language: ClassVar[str] = "C++"
    prelude: ClassVar[str] = PRELUDE
    code_for_op: ClassVar[dict[str, OpRule]] = {
        **CStyleRenderer.code_for_op,
        "cast": OpRule(_cast, operand="node"),
        "maximum": _extremum("maximum"), "minimum": _extremum("minimum"),
        "abs": OpRule(lambda c, a: f"{c.fn('abs')}({a})" if c.floating else f"({a} < 0 ? ({c.ctype})-{a} : {a})"),
        "pow": OpRule(_pow),
        "exp": OpRule(_exp, accepts=REAL),
        **{op: _call(op) for op in ("log", "sqrt", "tanh", "erf", "expm1", "log1p", "log2", "log10", "exp2", "sin",
                                    "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                                    "atan2")},
        "rsqrt": OpRule(lambda c, a: f"({c.one} / {c.fn('sqrt')}({a}))", accepts=REAL),
        "reciprocal": OpRule(lambda c, a: f"({c.one} / {a})", accepts=REAL),
        "sigmoid": OpRule(lambda c, a: f"({c.one} / ({c.one} + {c.fn('exp')}(-{a})))", accepts=REAL),
        # silu(-inf) = -inf / inf = nan, as in eager
        "silu": OpRule(lambda c, a: f"({a} / ({c.one} + {c.fn('exp')}(-{a})))", accepts=REAL),
        "gelu": OpRule(_gelu, accepts=REAL),
        **{op: _rounding(op) for op in ("floor", "ceil", "trunc", "round")},  # round: rint, half to even
        "isnan": _classify("{x} != {x}", "false"),
        "isinf": _classify("{abs}({x}) == {inf}", "false"),
        "isfinite": _classify("{abs}({x}) < {inf}", "true"),
        "bitwise_left_shift": OpRule(lambda c, a, b: f"kg_shl<{c.ctype}>({a}, {b})", accepts=frozenset({"int"})),
        "bitwise_right_shift": OpRule(lambda c, a, b: f"kg_shr<{c.ctype}>({a}, {b})", accepts=frozenset({"int"})),
        "fmod": _division("fmod", "%"),
        "remainder": _division("kg_remainder_fp", "kg_remainder_int"),
        "floor_divide": _division("kg_floordiv_fp", "kg_floordiv_int"),
    }


__all__ = ["COMPUTE", "STORAGE", "CStyleRenderer", "CppOp", "CppRenderer", "convert_value", "is_float", "literal"]
