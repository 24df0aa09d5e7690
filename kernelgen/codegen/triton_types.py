"""Triton's typed helpers for kernelgen values: dtype names, compute dtypes, conversions on load and store,
literals, and the interpreter-safe spellings the Triton op table (``triton_renderer``) builds on.

Values live in variables holding their *compute* dtype (float32 for float16/bfloat16/float32, as the IR
prescribes). Formulas use core ``tl`` functions that exist both in the interpreter and on CUDA/ROCm; the one
libdevice call (``fmod``, whose ``frem`` lowering on NVPTX is not C's fmod) is rendered for GPUs only.

Division and square root are the IEEE round-to-nearest forms (``tl.div_rn``, ``tl.sqrt_rn``) because eager's
CUDA kernels are: Triton's ``/`` on float32 is ``div.full.f32`` (2 ulp, 0 for divisors above 2^126) and
``tl.sqrt`` is ``sqrt.approx``; measured on an H100 against eager, those moved NaN/inf/zero placements.
"""

from __future__ import annotations

import math

HEADER = '''import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def kg_div_rn(a, b):
    # IEEE division of two values of any shapes: tl.div_rn itself does not broadcast
    a, b = tl.broadcast(a, b)
    return tl.div_rn(a, b)


'''
"""The imports every generated Triton module starts with: the Triton renderer's prelude."""

TL_DTYPE = {
    "float16": "tl.float16", "bfloat16": "tl.bfloat16", "float32": "tl.float32", "float64": "tl.float64",
    "int8": "tl.int8", "uint8": "tl.uint8", "int16": "tl.int16", "int32": "tl.int32", "int64": "tl.int64",
    "bool": "tl.int1",
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


def scalar(value: object, dtype: str) -> str:
    """A scalar of ``dtype``'s compute dtype equal to IR constant ``value`` converted as eager converts a
    Python scalar: into an integer dtype with truncation and wraparound (int8 x < 1000 compares with -24;
    ``tl.full`` refuses a value out of range), into bool as ``value != 0``."""
    if not isinstance(value, str) and dtype in INT_BITS:
        bits = INT_BITS[dtype]
        value = int(value) % 2**bits
        value = value - 2**bits if dtype != "uint8" and value >= 2 ** (bits - 1) else value
    elif not isinstance(value, str) and dtype == "bool":
        value = bool(value)
    return f"tl.full([], {const_literal(value)}, {TL_DTYPE[compute_dtype(dtype)]})"


def div_expr(a: str, b: str, dtype: str) -> str:
    """``a / b`` correctly rounded, as eager's CUDA division (float64 ``/`` already is)."""
    if compute_dtype(dtype) == "float64":
        return f"({a} / {b})"
    a, b = (f"tl.full([], {x}, tl.float32)" if _is_number(x) else x for x in (a, b))  # jit helpers take tensors
    return f"kg_div_rn({a}, {b})"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def sqrt_expr(a: str, dtype: str) -> str:
    """IEEE square root (``tl.sqrt`` is ``sqrt.approx`` on NVIDIA GPUs for float32)."""
    return f"tl.sqrt({a})" if compute_dtype(dtype) == "float64" else f"tl.sqrt_rn({a})"


def fmod_expr(a: str, b: str, interpreter: bool) -> str:
    """C's fmod of floats: libdevice's on GPUs (NVPTX lowers ``%`` to a - b * trunc(a / b), wrong for infinite
    operands and large quotients); numpy's exact fmod, which ``%`` is, in the interpreter (no libdevice there)."""
    return f"({a} % {b})" if interpreter else f"libdevice.fmod({a}, {b})"


def and_(a: str, b: str) -> str:
    """Boolean and of two int1 values as a select: the interpreter fails on ``scalar & block`` of bools
    (a scalar input's comparison with a loaded block); compilers turn the select back into an and."""
    return f"tl.where({a}, {b}, False)"


def or_(a: str, b: str) -> str:
    return f"tl.where({a}, True, {b})"


INT_BITS = {"int8": 8, "uint8": 8, "int16": 16, "int32": 32, "int64": 64}
NARROW = ("float16", "bfloat16")
INF, NINF, NAN = 'float("inf")', 'float("-inf")', 'float("nan")'

__all__ = ["HEADER", "INF", "INT_BITS", "NAN", "NARROW", "NINF", "TL_DTYPE", "and_", "bf16_round", "div_expr", "fmod_expr", "sqrt_expr",
           "compute_dtype", "const_literal", "is_float", "or_", "scalar", "tanh", "to_compute", "to_storage"]
