"""Triton expressions for kernelgen's elementwise ops, shared by every Triton template renderer.

Values live in variables holding their *compute* dtype (float32 for float16/bfloat16/float32, as the IR
prescribes); stores and ``cast`` nodes round, and so does every place where eager would have read the value
back in its own dtype (a change of dtype, a comparison). Every formula uses core ``tl`` functions that exist
both in the interpreter and on CUDA/ROCm (no libdevice), e.g. ``tanh`` is written out from ``exp``.

Eager PyTorch is the contract, NaN/inf placement and integer wraparound included: integer powers square in
the element type, float powers follow C's ``pow`` special cases, max/min propagate NaN, Python scalars
convert as eager converts them. ``OPS`` names every op with a rule; a rule that cannot match eager for a
node raises ``UnsupportedOpError`` and dispatch runs that graph eagerly. ``tests/codegen/test_triton_expr.py``
sweeps every (op, dtype) over NaN, infinities, signed zeros, extremes and subnormals against eager.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from kernelgen.errors import UnsupportedOpError
from kernelgen.ir import Graph, Node

TL_DTYPE = {
    "float16": "tl.float16", "bfloat16": "tl.bfloat16", "float32": "tl.float32", "float64": "tl.float64",
    "int8": "tl.int8", "uint8": "tl.uint8", "int16": "tl.int16", "int32": "tl.int32", "int64": "tl.int64",
    "bool": "tl.int1",
}
POINTER_TYPE = {  # Triton signature strings, for ahead-of-time compiles
    "float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32", "float64": "*fp64", "int8": "*i8",
    "uint8": "*u8", "int16": "*i16", "int32": "*i32", "int64": "*i64", "bool": "*i1",
}
_FLOATS = ("float16", "bfloat16", "float32", "float64")


def compute_dtype(dtype: str) -> str:
    """The dtype a value of ``dtype`` is computed in (IR convention: halves and floats in float32)."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def is_float(dtype: str) -> bool:
    return dtype in _FLOATS


def to_compute(expr: str, dtype: str, interpreter: bool = False) -> str:
    """``expr`` (a value of ``dtype``, e.g. just loaded) converted to its compute dtype.

    The interpreter converts bfloat16 subnormals wrongly (1e-39 became 4.4e-39, -1.5e-39 became -0.0), so
    there a bfloat16 is widened by its bits: it is the top half of a float32.
    """
    if dtype == "bfloat16" and interpreter:
        return f"({expr}.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)"
    return f"{expr}.to(tl.float32)" if compute_dtype(dtype) != dtype else expr


def to_storage(expr: str, value_dtype: str, out_dtype: str, interpreter: bool = False) -> str:
    """``expr`` (held in ``value_dtype``'s compute dtype) rounded to ``out_dtype`` for a store."""
    if out_dtype == "bool":
        return expr if value_dtype == "bool" else f"({expr} != 0)"
    if compute_dtype(value_dtype) == out_dtype:
        return expr
    if out_dtype == "bfloat16" and interpreter:
        return f"{bf16_round(_as_float32(expr, value_dtype))}.to(tl.bfloat16)"
    return f"{expr}.to({TL_DTYPE[out_dtype]})"


def _as_float32(expr: str, dtype: str) -> str:
    """``expr`` (in ``dtype``'s compute dtype) as float32: float64 rounds once more first, as torch's
    double -> bfloat16 conversion does (it goes through float)."""
    return expr if compute_dtype(dtype) == "float32" else f"{expr}.to(tl.float32)"


def bf16_round(x: str) -> str:
    """float32 ``x`` rounded to the nearest bfloat16 (ties to even), still as float32.

    Triton's interpreter truncates float32 -> bfloat16 while GPUs and torch round to nearest; rendering
    the rounding explicitly for the interpreter makes both agree (NaN is kept as it is).
    """
    u = f"{x}.to(tl.uint32, bitcast=True)"
    return (f"tl.where({x} != {x}, {x}, (({u} + 0x7FFF + (({u} >> 16) & 1)) & 0xFFFF0000)"
            f".to(tl.float32, bitcast=True))")


def const_literal(value: object) -> str:
    if isinstance(value, str):  # the IR spells non-finite constants as strings (JSON has none)
        return {"inf": 'float("inf")', "-inf": 'float("-inf")', "nan": 'float("nan")'}[value]
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return const_literal("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))
    return repr(float(value))


def tanh(x: str) -> str:
    """tanh from exp: exact limits at ±inf; a short series near 0 where ``1 - 2/(e^2x + 1)`` cancels."""
    return (f"tl.where(tl.abs({x}) < 0.0625, {x} * (1.0 - {x} * {x} * (0.3333333333333333 - "
            f"0.13333333333333333 * {x} * {x})), 1.0 - 2.0 / (tl.exp(2.0 * {x}) + 1.0))")


_UNARY: dict[str, Callable[[str], str]] = {
    "neg": lambda a: f"-{a}", "abs": lambda a: f"tl.abs({a})", "exp": lambda a: f"tl.exp({a})",
    "log": lambda a: f"tl.log({a})", "sqrt": lambda a: f"tl.sqrt({a})", "rsqrt": lambda a: f"tl.rsqrt({a})",
    "tanh": tanh, "erf": lambda a: f"tl.erf({a})", "sigmoid": lambda a: f"tl.sigmoid({a})",
    # `a < 0` is false for NaN and -0.0, so both pass through as in eager (relu(NaN) = NaN)
    "relu": lambda a: f"tl.where({a} < 0, 0, {a})",
    "silu": lambda a: f"{a} * tl.sigmoid({a})", "reciprocal": lambda a: f"1.0 / {a}",
}
_BINARY: dict[str, Callable[[str, str], str]] = {
    "add": lambda a, b: f"({a} + {b})", "sub": lambda a, b: f"({a} - {b})", "mul": lambda a, b: f"({a} * {b})",
    "div": lambda a, b: f"({a} / {b})",
}
_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_FLOAT_ONLY = frozenset({"exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "silu", "reciprocal", "gelu",
                         "div"})  # the IR gives these a float dtype whatever their inputs
_INT_BITS = {"int8": 8, "uint8": 8, "int16": 16, "int32": 32, "int64": 64}
_NARROW = ("float16", "bfloat16")
_RANK = {"bool": 0, "uint8": 1, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "float16": 5, "bfloat16": 5,
         "float32": 6, "float64": 7}


def _promote(a: str, b: str) -> str:
    """torch's type promotion of two tensor dtypes (``torch.promote_types``)."""
    if a == b:
        return a
    if {a, b} == {"uint8", "int8"}:
        return "int16"
    if {a, b} == {"float16", "bfloat16"}:
        return "float32"
    return max(a, b, key=_RANK.__getitem__)


class ExprEmitter:
    """Turns graph nodes into Triton statements ``v<i> = ...`` over named values.

    ``names`` maps node id -> variable holding that node's value in its compute dtype; the caller seeds
    it with the loaded inputs and reads the results from it. Ops are rows of the tables above or
    ``_rule_<op>`` methods; ``OPS`` lists them all. A node whose exact eager result the renderer cannot
    produce raises ``UnsupportedOpError`` (a ``KernelgenError``), so dispatch runs that graph eagerly.
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

    def _arg(self, j: int, dtype: str | None = None) -> str:
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
            return _scalar(node.attr("value"), dtype)
        if src in _NARROW:
            name = self._narrow(name, src)
        if dtype in _NARROW:
            return self._narrow(name if compute_dtype(src) == "float32" else f"{name}.to(tl.float32)", dtype)
        if compute_dtype(src) == compute_dtype(dtype):
            return name
        return f"{name}.to({TL_DTYPE[compute_dtype(dtype)]})"

    def _narrow(self, x: str, dtype: str) -> str:
        """float32 ``x`` rounded to float16/bfloat16 (still held as float32)."""
        if dtype == "bfloat16" and self.interpreter:
            return bf16_round(x)
        return f"{x}.to({TL_DTYPE[dtype]}).to(tl.float32)"

    def _bool(self, j: int) -> str:
        name = self.names[j]
        return name if self.graph.nodes[j].spec.dtype == "bool" else f"({name} != 0)"

    def node(self, i: int) -> list[str]:
        """Statements computing node ``i`` into ``v<i>`` (the last one assigns it)."""
        n = self.graph.nodes[i]
        out = f"v{i}"
        rule = getattr(self, f"_rule_{n.op}", None)
        if rule is not None:
            lines = rule(i, n)
        elif n.op in _UNARY or n.op in _BINARY:
            dt = n.spec.dtype
            if dt == "bool" or (n.op in _FLOAT_ONLY and not is_float(dt)):
                raise UnsupportedOpError(f"the Triton renderer has no {dt} rule for op {n.op!r} (node %{i}); "
                                         "eager PyTorch runs this graph")
            args = [self._arg(j, dt) for j in n.inputs]
            lines = [(_UNARY[n.op](*args) if n.op in _UNARY else _BINARY[n.op](*args))]
        else:
            raise UnsupportedOpError(f"the Triton renderer has no rule for op {n.op!r} (node %{i}); "
                                     "eager PyTorch runs this graph")
        self.names[i] = out
        return lines[:-1] + [f"{out} = {lines[-1]}"]

    # -- ops that need more than a formula --------------------------------------------------------------
    def _rule_const(self, i: int, n: Node) -> list[str]:
        return [_scalar(n.attr("value"), n.spec.dtype)]

    def _compare(self, i: int, n: Node) -> list[str]:
        """Compared in the promoted dtype, as eager: float16/bfloat16 operands are rounded to it first (the
        IR keeps such intermediates and constants unrounded, which is within tolerance for arithmetic but
        flips a comparison: float16 x == 0.1 compares x with 0.0999755859375 in eager)."""
        operand = _promote(*(self.graph.nodes[j].spec.dtype for j in n.inputs))
        a, b = (self._narrow(self.names[j], operand) if operand in _NARROW and self.graph.nodes[j].spec.dtype == operand
                else self._arg(j, operand) for j in n.inputs)  # _arg rounds the other dtypes
        return [f"({a} {_COMPARE[n.op]} {b})"]

    _rule_eq = _rule_ne = _rule_lt = _rule_le = _rule_gt = _rule_ge = _compare

    def _logical(self, i: int, n: Node) -> list[str]:
        a, b = (self._bool(j) for j in n.inputs)
        return [_and(a, b) if n.op == "logical_and" else _or(a, b)]

    _rule_logical_and = _rule_logical_or = _logical

    def _rule_where(self, i: int, n: Node) -> list[str]:
        dt = n.spec.dtype
        return [f"tl.where({self._bool(n.inputs[0])}, {self._arg(n.inputs[1], dt)}, {self._arg(n.inputs[2], dt)})"]

    def _bool_arith(self, n: Node) -> list[str] | None:
        """add/mul/maximum/minimum of bools are or/and (eager keeps bool; int1 arithmetic would wrap)."""
        if n.spec.dtype != "bool":
            return None
        a, b = (self._bool(j) for j in n.inputs)
        return [_or(a, b) if n.op in ("add", "maximum") else _and(a, b)]

    def _rule_add(self, i: int, n: Node) -> list[str]:
        return self._bool_arith(n) or [_BINARY["add"](*(self._arg(j, n.spec.dtype) for j in n.inputs))]

    def _rule_mul(self, i: int, n: Node) -> list[str]:
        return self._bool_arith(n) or [_BINARY["mul"](*(self._arg(j, n.spec.dtype) for j in n.inputs))]

    def _extremum(self, i: int, n: Node) -> list[str]:
        bools = self._bool_arith(n)
        if bools:
            return bools
        a, b = (self._arg(j, n.spec.dtype) for j in n.inputs)
        nan = ", propagate_nan=tl.PropagateNan.ALL" if is_float(n.spec.dtype) else ""  # eager propagates NaN
        return [f"tl.{n.op}({a}, {b}{nan})"]

    _rule_maximum = _rule_minimum = _extremum

    def _rule_gelu(self, i: int, n: Node) -> list[str]:
        if not is_float(n.spec.dtype):
            raise UnsupportedOpError(f"gelu of {n.spec.dtype} (node %{i}); eager PyTorch runs this graph")
        a = self._arg(n.inputs[0], n.spec.dtype)
        if n.attr("approximate", "none") == "tanh":
            return [f"t{i} = 0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a})",
                    f"0.5 * {a} * (1.0 + {tanh(f't{i}')})"]
        return [f"0.5 * {a} * (1.0 + tl.erf({a} * 0.7071067811865476))"]

    def _rule_cast(self, i: int, n: Node) -> list[str]:
        src = self.graph.nodes[n.inputs[0]].spec.dtype
        a = self.names[n.inputs[0]]
        dst = n.spec.dtype
        if src in _NARROW and dst != src:  # eager converts the value as stored in its dtype (see _arg)
            a = self._narrow(a, src)
        if dst == "bool":
            return [a if src == "bool" else f"({a} != 0)"]
        if dst == "bfloat16" and self.interpreter:
            return [bf16_round(_as_float32(a, src))]
        if dst in ("float16", "bfloat16"):  # round to the narrow type, keep computing in float32
            return [f"{a}.to({TL_DTYPE[dst]}).to(tl.float32)"]
        return [f"{a}.to({TL_DTYPE[dst]})"]

    def _rule_pow(self, i: int, n: Node) -> list[str]:
        dt = n.spec.dtype
        if dt == "bool":
            raise UnsupportedOpError(f"pow of bool (node %{i}); eager PyTorch runs this graph")
        a = self._arg(n.inputs[0], dt)
        exponent = self.graph.nodes[n.inputs[1]]
        const = exponent.attr("value") if exponent.op == "const" and not isinstance(exponent.attr("value"), str) \
            else None
        if not is_float(dt):
            return self._int_pow(i, dt, a, const, n.inputs[1])
        if const is not None:
            special = {1.0: a, 2.0: f"{a} * {a}", 3.0: f"{a} * {a} * {a}", 0.5: f"tl.sqrt({a})",
                       -1.0: f"1.0 / {a}", -0.5: f"tl.rsqrt({a})", -2.0: f"1.0 / ({a} * {a})"}
            if float(const) in special:
                return [special[float(const)]]
        return _float_pow(i, dt, a, self._arg(n.inputs[1], dt))

    def _int_pow(self, i: int, dt: str, a: str, const: object, exponent: int) -> list[str]:
        """Integer powers exactly as eager (ATen's ``powi``): square-and-multiply in the element type, which
        wraps around like eager on overflow (products mod 2^bits do not depend on the order); a negative
        tensor exponent gives 1 for base 1, +-1 for base -1 and 0 otherwise."""
        if const is not None:
            e = int(const)
            if e < 0:  # eager raises "Integers to negative integer powers are not allowed"
                raise UnsupportedOpError(f"integer pow with negative exponent {e} (node %{i}); eager PyTorch "
                                         "runs (and rejects) it")
            if e == 0:
                return [f"tl.full([], 1, {TL_DTYPE[dt]})"]
            lines, result, base = [], "", a  # unrolled over the exponent's bits
            for k in range(e.bit_length()):
                if k:
                    lines.append(f"sq{i}_{k} = {base} * {base}")
                    base = f"sq{i}_{k}"
                if e >> k & 1:
                    result = base if not result else f"{result} * {base}"
            return lines + [result]
        b = self._arg(exponent, dt)
        one = f"tl.full([], 1, {TL_DTYPE[dt]})"
        lines = [f"e{i} = tl.where({b} < 0, 0, {b})",  # negative exponents are settled after the loop
                 f"s{i} = {a} + 0 * {b}",  # the base at the broadcast shape
                 f"p{i} = {one} + 0 * s{i}",
                 f"for _k{i} in tl.static_range({_INT_BITS[dt] - (0 if dt == 'uint8' else 1)}):",
                 f"    p{i} = tl.where((e{i} & 1) != 0, p{i} * s{i}, p{i})",
                 f"    s{i} = s{i} * s{i}",
                 f"    e{i} = e{i} >> 1"]
        if dt == "uint8":
            return lines + [f"p{i}"]
        return lines + [f"tl.where({b} >= 0, p{i}, tl.where({a} == 1, 1, tl.where({a} == -1, "
                        f"tl.where(({b} & 1) != 0, -1, 1), 0)).to({TL_DTYPE[dt]}))"]


_INF, _NINF, _NAN = 'float("inf")', 'float("-inf")', 'float("nan")'


def _scalar(value: object, dtype: str) -> str:
    """A scalar of ``dtype``'s compute dtype equal to IR constant ``value`` converted as eager converts a
    Python scalar: into an integer dtype with truncation and wraparound (int8 x < 1000 compares with -24;
    ``tl.full`` refuses a value out of range), into bool as ``value != 0``."""
    if not isinstance(value, str) and dtype in _INT_BITS:
        bits = _INT_BITS[dtype]
        value = int(value) % 2**bits
        value = value - 2**bits if dtype != "uint8" and value >= 2 ** (bits - 1) else value
    elif not isinstance(value, str) and dtype == "bool":
        value = bool(value)
    return f"tl.full([], {const_literal(value)}, {TL_DTYPE[compute_dtype(dtype)]})"


def _and(a: str, b: str) -> str:
    """Boolean and of two int1 values as a select: the interpreter fails on ``scalar & block`` of bools
    (a scalar input's comparison with a loaded block); compilers turn the select back into an and."""
    return f"tl.where({a}, {b}, False)"


def _or(a: str, b: str) -> str:
    return f"tl.where({a}, True, {b})"


OPS = frozenset(_UNARY) | frozenset(_BINARY) | frozenset(
    name.removeprefix("_rule_") for name in dir(ExprEmitter) if name.startswith("_rule_"))
"""Every IR op the Triton renderer has a rule for (the rule may still refuse some dtypes)."""


def _float_pow(i: int, dt: str, a: str, b: str) -> list[str]:
    """``a ** b`` with C's ``pow`` special cases (what eager computes): |a|^b from exp2/log2, the sign of an
    odd integer power taken from a's sign bit (so (-0.0)^-1 = -inf), NaN only for a finite negative base
    and a non-integer exponent, a for b == 1, and 1 for b == 0, a == 1 (even against NaN) and (-1)^(+-inf)."""
    bits = "tl.int64" if dt == "float64" else "tl.int32"
    # float32 exp2/log2 lose ~|b log2 a| ulps (max ** 1 overflowed to inf): a float32 power goes through
    # float64; a float64 one keeps ~1e-13 relative error (exact for b == 1).
    wide = "" if dt == "float64" else ".to(tl.float64)"
    narrow = "" if dt == "float64" else ".to(tl.float32)"
    finite_negative = _and(f"{a} < 0", f"{a} > {_NINF}")
    one = _or(_or(f"{b} == 0", f"{a} == 1"), _and(f"{a} == -1", f"tl.abs({b}) == {_INF}"))
    return [
        f"r{i} = tl.exp2({b}{wide} * tl.log2(tl.abs({a}){wide})){narrow}",
        f"int{i} = tl.floor({b}) == {b}",
        f"odd{i} = {_and(f'int{i}', f'(tl.floor({b} * 0.5) * 2.0) != {b}')}",
        f"neg{i} = {a}.to({bits}, bitcast=True) < 0",
        f"r{i} = tl.where({_and(f'neg{i}', f'odd{i}')}, -r{i}, "
        f"tl.where({_and(finite_negative, f'int{i} == 0')}, {_NAN}, r{i}))",
        f"r{i} = tl.where({b} == 1, {a}, r{i})",
        f"tl.where({one}, 1.0, r{i})",
    ]


# ------------------------------------------------------------------------------------ kernel scaffolding

HEADER = "import triton\nimport triton.language as tl\n\n\n"


def kernel_params(graph: Graph) -> list[str]:
    """Pointer parameters: ``in<k>`` per graph input (argument order), then ``out<j>`` per output."""
    return [f"in{k}" for k in range(len(graph.input_ids))] + [f"out{j}" for j in range(len(graph.outputs))]


def signature_json(graph: Graph) -> str:
    """Source.meta["signature"]: the inputs' specs then the (contiguous) outputs' specs."""
    import json

    from kernelgen.values import TensorSpec

    specs = list(graph.signature) + [TensorSpec(s.shape, s.dtype) for s in graph.output_specs]
    return json.dumps([s.to_json() for s in specs])


def offset_expr(index: str, shape: tuple[int, ...], strides: tuple[int, ...]) -> str:
    """Element offset of flat (row-major) iteration index ``index`` over ``shape`` for a view with
    ``strides`` (0 on broadcast dims): coordinates are recovered only for dims that move the pointer."""
    if not shape:
        return "0"
    contiguous, acc = [], 1
    for size in reversed(shape):
        contiguous.append(acc)
        acc *= max(size, 1)
    contiguous.reverse()
    if all(st == c or size == 1 for st, c, size in zip(strides, contiguous, shape)):
        return index
    terms = []
    for d, (size, stride) in enumerate(zip(shape, strides)):
        if stride == 0 or size == 1:
            continue
        inner = contiguous[d]
        coord = index if inner == 1 else f"({index} // {inner})"
        if d > 0:
            coord = f"({coord} % {size})"
        terms.append(coord if stride == 1 else f"{coord} * {stride}")
    return " + ".join(terms) if terms else "0"


def tile_offset(terms: list[tuple[str, int]]) -> str:
    """``a * sa + b * sb ...`` for index tensors with element strides, dropping stride-0 (broadcast) terms."""
    parts = [idx if st == 1 else f"{idx} * {st}" for idx, st in terms if st != 0]
    return " + ".join(parts) if parts else "0"


def pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


__all__ = ["HEADER", "OPS", "ExprEmitter", "POINTER_TYPE", "TL_DTYPE", "bf16_round", "compute_dtype", "const_literal",
           "is_float", "kernel_params", "offset_expr", "pow2_at_least", "signature_json", "tanh", "tile_offset",
           "to_compute", "to_storage"]
