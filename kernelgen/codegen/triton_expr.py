"""Triton expressions for kernelgen's elementwise ops, shared by every Triton template renderer.

Values live in variables holding their *compute* dtype (float32 for float16/bfloat16/float32, as the IR
prescribes); only stores and ``cast`` nodes round. Every formula uses core ``tl`` functions that exist
both in the interpreter and on CUDA/ROCm (no libdevice), e.g. ``tanh`` is written out from ``exp``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

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


def to_compute(expr: str, dtype: str) -> str:
    """``expr`` (a value of ``dtype``, e.g. just loaded) converted to its compute dtype."""
    return f"{expr}.to(tl.float32)" if compute_dtype(dtype) != dtype else expr


def to_storage(expr: str, value_dtype: str, out_dtype: str, interpreter: bool = False) -> str:
    """``expr`` (held in ``value_dtype``'s compute dtype) rounded to ``out_dtype`` for a store."""
    if out_dtype == "bool":
        return expr if value_dtype == "bool" else f"({expr} != 0)"
    if compute_dtype(value_dtype) == out_dtype:
        return expr
    if out_dtype == "bfloat16" and interpreter:
        return f"{bf16_round(expr)}.to(tl.bfloat16)"
    return f"{expr}.to({TL_DTYPE[out_dtype]})"


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


class ExprEmitter:
    """Turns graph nodes into Triton statements ``v<i> = ...`` over named values.

    ``names`` maps node id -> variable holding that node's value in its compute dtype; the caller seeds
    it with the loaded inputs and reads the results from it.
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
        """Input ``j`` converted to ``dtype``'s compute dtype when it is held in another one."""
        name = self.names[j]
        have = compute_dtype(self.graph.nodes[j].spec.dtype)
        if dtype is None or have == compute_dtype(dtype):
            return name
        return f"{name}.to({TL_DTYPE[compute_dtype(dtype)]})"

    def _bool(self, j: int) -> str:
        name = self.names[j]
        return name if self.graph.nodes[j].spec.dtype == "bool" else f"({name} != 0)"

    def node(self, i: int) -> list[str]:
        n = self.graph.nodes[i]
        out = f"v{i}"
        self.names[i] = out
        if n.op == "const":
            return [f"{out} = tl.full([], {const_literal(n.attr('value'))}, {TL_DTYPE[compute_dtype(n.spec.dtype)]})"]
        if n.op == "gelu" and n.attr("approximate", "none") == "tanh":
            a = self._arg(n.inputs[0], n.spec.dtype)
            return [f"t{i} = 0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a})",
                    f"{out} = 0.5 * {a} * (1.0 + {tanh(f't{i}')})"]
        if n.op == "pow":
            return self._pow(i, n)
        return [f"{out} = {self._expr(n)}"]

    def _expr(self, n: Node) -> str:
        op, dt = n.op, n.spec.dtype
        if op in ("eq", "ne", "lt", "le", "gt", "ge"):
            a, b = (self.names[j] for j in n.inputs)
            sym = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[op]
            return f"({a} {sym} {b})"
        if op in ("logical_and", "logical_or"):
            return f"({self._bool(n.inputs[0])} {'&' if op == 'logical_and' else '|'} {self._bool(n.inputs[1])})"
        if op == "where":
            c = self._bool(n.inputs[0])
            return f"tl.where({c}, {self._arg(n.inputs[1], dt)}, {self._arg(n.inputs[2], dt)})"
        if op == "cast":
            return self._cast(n)
        args = [self._arg(j, dt) for j in n.inputs]
        a = args[0]
        b = args[1] if len(args) > 1 else ""
        nan = ", propagate_nan=tl.PropagateNan.ALL" if is_float(dt) else ""  # torch propagates NaN
        table = {
            "neg": f"-{a}", "abs": f"tl.abs({a})", "exp": f"tl.exp({a})", "log": f"tl.log({a})",
            "sqrt": f"tl.sqrt({a})", "rsqrt": f"tl.rsqrt({a})", "tanh": tanh(a), "erf": f"tl.erf({a})",
            "sigmoid": f"tl.sigmoid({a})", "relu": f"tl.where({a} < 0, 0, {a})",
            "silu": f"{a} * tl.sigmoid({a})", "reciprocal": f"1.0 / {a}",
            "gelu": f"0.5 * {a} * (1.0 + tl.erf({a} * 0.7071067811865476))",
            "add": f"({a} + {b})", "sub": f"({a} - {b})", "mul": f"({a} * {b})", "div": f"({a} / {b})",
            "maximum": f"tl.maximum({a}, {b}{nan})", "minimum": f"tl.minimum({a}, {b}{nan})",
        }
        if op not in table:
            raise ValueError(f"the Triton renderer has no rule for op {op!r}")
        return table[op]

    def _cast(self, n: Node) -> str:
        src = self.graph.nodes[n.inputs[0]].spec.dtype
        a = self.names[n.inputs[0]]
        dst = n.spec.dtype
        if dst == "bool":
            return a if src == "bool" else f"({a} != 0)"
        if dst == "bfloat16" and self.interpreter:
            return bf16_round(a if is_float(src) else f"{a}.to(tl.float32)")
        if dst in ("float16", "bfloat16"):  # round to the narrow type, keep computing in float32
            return f"{a}.to({TL_DTYPE[dst]}).to(tl.float32)"
        return f"{a}.to({TL_DTYPE[dst]})"

    def _pow(self, i: int, n: Node) -> list[str]:
        out = f"v{i}"
        a = self._arg(n.inputs[0], n.spec.dtype)
        exponent = self.graph.nodes[n.inputs[1]]
        if exponent.op == "const" and not isinstance(exponent.attr("value"), str):
            e = float(exponent.attr("value"))
            special = {1.0: a, 2.0: f"{a} * {a}", 3.0: f"{a} * {a} * {a}", 0.5: f"tl.sqrt({a})",
                       -1.0: f"1.0 / {a}", -0.5: f"tl.rsqrt({a})", -2.0: f"1.0 / ({a} * {a})"}
            if e in special:
                return [f"{out} = {special[e]}"]
        b = self._arg(n.inputs[1], n.spec.dtype)
        if not is_float(n.spec.dtype):  # integer powers: go through float32 and truncate back
            return [f"{out} = tl.exp2({b}.to(tl.float32) * tl.log2({a}.to(tl.float32))).to({TL_DTYPE[n.spec.dtype]})"]
        # |a|^b, then the sign for negative bases: odd integer b -> negative, non-integer b -> NaN.
        return [
            f"r{i} = tl.exp2({b} * tl.log2(tl.abs({a})))",
            f"int{i} = tl.floor({b}) == {b}",
            f"odd{i} = int{i} & ((tl.floor({b} * 0.5) * 2.0) != {b})",
            f"{out} = tl.where({b} == 0, 1.0, tl.where({a} < 0, tl.where(int{i}, tl.where(odd{i}, -r{i}, r{i}), "
            f"float(\"nan\")), r{i}))",
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


__all__ = ["HEADER", "ExprEmitter", "POINTER_TYPE", "TL_DTYPE", "bf16_round", "compute_dtype", "const_literal",
           "is_float", "kernel_params", "offset_expr", "pow2_at_least", "signature_json", "tanh", "tile_offset",
           "to_compute", "to_storage"]
