"""Triton formulas for the ops that need more than one expression: the op table's rows in
``triton_renderer`` point here. Each rule takes the emitter, the node id and node, and its converted
inputs, and returns statements whose last one is the value (temporaries are suffixed with the node id).

Every formula uses core ``tl`` functions (libdevice's fmod on GPUs only: the interpreter has no libdevice), and follows eager's
special cases: Kahan's expm1/log1p stay accurate near 0, floor division and remainder round as Python does,
shifts past the width give 0 or the sign, pow follows C's ``pow``.
"""

from __future__ import annotations

from typing import Any

from kernelgen.codegen.renderer import integer_divisor
from kernelgen.codegen.triton_types import (INF, INT_BITS, NAN, NINF, TL_DTYPE, and_, bf16_round, compute_dtype,
                                            div_expr, fmod_expr, is_float, or_, sqrt_expr, tanh)
from kernelgen.errors import UnsupportedOpError
from kernelgen.ir.graph import Node

Lines = list[str]
_LN2 = 0.6931471805599453


def gelu(em: Any, i: int, n: Node, a: str) -> Lines:
    if n.attr("approximate", "none") == "tanh":
        return [f"t{i} = 0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a})",
                f"0.5 * {a} * (1.0 + {tanh(f't{i}')})"]
    return [f"0.5 * {a} * (1.0 + tl.erf({a} * 0.7071067811865476))"]


def cast(em: Any, i: int, n: Node) -> Lines:
    src = em.graph.nodes[n.inputs[0]].spec.dtype
    a = em.names[n.inputs[0]]
    dst = n.spec.dtype
    if src in ("float16", "bfloat16") and dst != src:  # eager converts the value as stored in its dtype
        a = em.narrow(a, src)
    if dst == "bool":
        return [a if src == "bool" else f"({a} != 0)"]
    if dst == "bfloat16" and em.interpreter:
        return [bf16_round(a if src in ("float16", "bfloat16", "float32") else f"{a}.to(tl.float32)")]
    if dst in ("float16", "bfloat16"):  # round to the narrow type, keep computing in float32
        return [f"{a}.to({TL_DTYPE[dst]}).to(tl.float32)"]
    if dst == "uint8" and is_float(src):
        # c10 converts floats to uint8 through int64 so negative values wrap alike on CPUs and GPUs (a direct
        # float -> u8 conversion saturates to 0 on NVIDIA GPUs: -1.5 gave 0 where eager gives 255)
        return [f"{a}.to(tl.int64).to(tl.uint8)"]
    return [f"{a}.to({TL_DTYPE[dst]})"]


# ------------------------------------------------------------------------------------------------- pow

def pow_(em: Any, i: int, n: Node, a: str, b: str) -> Lines:
    dt = n.spec.dtype
    exponent = em.graph.nodes[n.inputs[1]]
    const = exponent.attr("value") if exponent.op == "const" and not isinstance(exponent.attr("value"), str) \
        else None
    if not is_float(dt):
        return _int_pow(i, dt, a, b, const)
    if const is not None:
        special = {1.0: a, 2.0: f"{a} * {a}", 3.0: f"{a} * {a} * {a}", 0.5: sqrt_expr(a, dt),
                   -1.0: div_expr("1.0", a, dt), -0.5: f"tl.rsqrt({a})", -2.0: div_expr("1.0", f"({a} * {a})", dt)}
        if float(const) in special:
            return [special[float(const)]]
    return _float_pow(i, dt, a, b)


def _int_pow(i: int, dt: str, a: str, b: str, const: object) -> Lines:
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
    one = f"tl.full([], 1, {TL_DTYPE[dt]})"
    lines = [f"e{i} = tl.where({b} < 0, 0, {b})",  # negative exponents are settled after the loop
             f"s{i} = {a} + 0 * {b}",  # the base at the broadcast shape
             f"p{i} = {one} + 0 * s{i}",
             f"for _k{i} in tl.static_range({INT_BITS[dt] - (0 if dt == 'uint8' else 1)}):",
             f"    p{i} = tl.where((e{i} & 1) != 0, p{i} * s{i}, p{i})",
             f"    s{i} = s{i} * s{i}",
             f"    e{i} = e{i} >> 1"]
    if dt == "uint8":
        return lines + [f"p{i}"]
    return lines + [f"tl.where({b} >= 0, p{i}, tl.where({a} == 1, 1, tl.where({a} == -1, "
                    f"tl.where(({b} & 1) != 0, -1, 1), 0)).to({TL_DTYPE[dt]}))"]


def _float_pow(i: int, dt: str, a: str, b: str) -> Lines:
    """``a ** b`` with C's ``pow`` special cases (what eager computes): |a|^b from exp2/log2, the sign of an
    odd integer power taken from a's sign bit (so (-0.0)^-1 = -inf), NaN only for a finite negative base
    and a non-integer exponent, a for b == 1, and 1 for b == 0, a == 1 (even against NaN) and (-1)^(+-inf)."""
    bits = "tl.int64" if dt == "float64" else "tl.int32"
    # float32 exp2/log2 lose ~|b log2 a| ulps (max ** 1 overflowed to inf): a float32 power goes through
    # float64; a float64 one keeps ~1e-13 relative error (exact for b == 1).
    wide = "" if dt == "float64" else ".to(tl.float64)"
    narrow = "" if dt == "float64" else ".to(tl.float32)"
    finite_negative = and_(f"{a} < 0", f"{a} > {NINF}")
    one = or_(or_(f"{b} == 0", f"{a} == 1"), and_(f"{a} == -1", f"tl.abs({b}) == {INF}"))
    return [
        f"r{i} = tl.exp2({b}{wide} * tl.log2(tl.abs({a}){wide})){narrow}",
        f"int{i} = tl.floor({b}) == {b}",
        f"odd{i} = {and_(f'int{i}', f'(tl.floor({b} * 0.5) * 2.0) != {b}')}",
        f"neg{i} = {a}.to({bits}, bitcast=True) < 0",
        f"r{i} = tl.where({and_(f'neg{i}', f'odd{i}')}, -r{i}, "
        f"tl.where({and_(finite_negative, f'int{i} == 0')}, {NAN}, r{i}))",
        f"r{i} = tl.where({b} == 1, {a}, r{i})",
        f"tl.where({one}, 1.0, r{i})",
    ]


# ------------------------------------------------------------------------------- exp / log family

def _expm1(x: str, t: str) -> Lines:
    """Kahan's expm1: (u - 1) x / log(u) with u = e^x cancels the rounding of u; exact limits at +-inf."""
    return [f"{t}u = tl.exp({x})", f"{t}m = {t}u - 1.0",
            f"tl.where({t}u == 1.0, {x}, tl.where({t}m == -1.0, -1.0, tl.where({t}u == {INF}, {t}u, "
            f"{t}m * {x} / tl.log({t}u))))"]


def _log1p(x: str, t: str) -> Lines:
    """Kahan's log1p: log(u) x / (u - 1) with u = 1 + x cancels the rounding of u."""
    return [f"{t}u = 1.0 + {x}",
            f"tl.where({t}u == 1.0, {x}, tl.where({t}u == {INF}, {t}u, tl.log({t}u) * ({x} / ({t}u - 1.0))))"]


def _named(lines: Lines, name: str) -> Lines:
    """``lines`` with their value assigned to ``name`` (to use it inside a longer formula)."""
    return lines[:-1] + [f"{name} = {lines[-1]}"]


# atan(u) = u + u^3 P(u^2) on |u| <= tan(pi/8): P fitted by least squares on Chebyshev nodes against mpmath's atan
# (relative error 2.2e-16 in float64, so one polynomial serves float32 and float64)
_ATAN_P = (-0.33333333333330045, 0.1999999999907035, -0.14285714194068053, 0.11111106614679571, -0.09090781680011496,
           0.07690059869168361, -0.06641060951766276, 0.05692278600125354, -0.04358472545666657, 0.02125353380245026)


def _atan(x: str, t: str) -> Lines:
    """atan: |x| > 1 folds to pi/2 - atan(1/|x|), above tan(pi/8) to pi/4 + atan((s - 1) / (s + 1)), then the
    polynomial; odd, NaN stays NaN, +-inf gives +-pi/2."""
    horner = [f"{t}p = {_ATAN_P[-1]} * {t}z + {_ATAN_P[-2]}"]
    horner += [f"{t}p = {t}p * {t}z + {c}" for c in reversed(_ATAN_P[:-2])]
    return [f"{t}a = tl.abs({x})", f"{t}inv = {t}a > 1.0", f"{t}s = tl.where({t}inv, 1.0 / {t}a, {t}a)",
            f"{t}hi = {t}s > 0.41421356237309503", f"{t}u = tl.where({t}hi, ({t}s - 1.0) / ({t}s + 1.0), {t}s)",
            f"{t}z = {t}u * {t}u", *horner,
            f"{t}r = {t}u + {t}u * {t}z * {t}p",  # pi/4 is added to the tensor (tl.where of two floats is float32)
            f"{t}r = tl.where({t}hi, {t}r + 0.7853981633974483, {t}r)",
            f"{t}r = tl.where({t}inv, 1.5707963267948966 - {t}r, {t}r)", f"tl.where({x} < 0, -{t}r, {t}r)"]


def atan(em: Any, i: int, n: Node, a: str) -> Lines:
    return _atan(a, f"t{i}")


def atan2(em: Any, i: int, n: Node, y: str, x: str) -> Lines:
    """C's atan2 from atan(|y| / |x|): 0/0 is 0 and inf/inf is 1 (so +-0 and +-inf pairs land on the multiples
    of pi/4 C gives), then x's sign bit (-0.0 included) reflects to pi - r and y's sign bit negates; NaN stays."""
    bits = "tl.int64" if n.spec.dtype == "float64" else "tl.int32"
    return [f"ay{i} = tl.abs({y})", f"ax{i} = tl.abs({x})",
            f"q{i} = tl.where({and_(f'ay{i} == 0', f'ax{i} == 0')}, 0.0, "
            f"tl.where({and_(f'ay{i} == {INF}', f'ax{i} == {INF}')}, 1.0, ay{i} / ax{i}))",
            *_named(_atan(f"q{i}", f"t{i}"), f"r{i}"),
            f"r{i} = tl.where({x}.to({bits}, bitcast=True) < 0, 3.141592653589793 - r{i}, r{i})",
            f"tl.where({y}.to({bits}, bitcast=True) < 0, -r{i}, r{i})"]


def asin(em: Any, i: int, n: Node, a: str) -> Lines:
    """2 atan(x / (1 + sqrt(1 - x^2))): the argument stays in [-1, 1]; (1 - |x|)(1 + |x|) keeps 1 - x^2 exact
    near 1; |x| > 1 takes the square root of a negative: NaN."""
    return [f"m{i} = tl.abs({a})", f"v{i}_ = {a} / (1.0 + tl.sqrt((1.0 - m{i}) * (1.0 + m{i})))",
            *_named(_atan(f"v{i}_", f"t{i}"), f"r{i}"), f"2.0 * r{i}"]


def acos(em: Any, i: int, n: Node, a: str) -> Lines:
    """2 atan(sqrt((1 - x) / (1 + x))): pi at -1, 0 at 1, NaN outside [-1, 1]."""
    return [f"v{i}_ = tl.sqrt((1.0 - {a}) / (1.0 + {a}))", *_named(_atan(f"v{i}_", f"t{i}"), f"r{i}"), f"2.0 * r{i}"]


def expm1(em: Any, i: int, n: Node, a: str) -> Lines:
    return _expm1(a, f"t{i}")


def log1p(em: Any, i: int, n: Node, a: str) -> Lines:
    return _log1p(a, f"t{i}")


def tanh_(em: Any, i: int, n: Node, a: str) -> Lines:
    """float32: the exp form with a short series near 0 (``triton_types.tanh``); float64: expm1(2x) / (expm1(2x) + 2),
    accurate to a few ulps everywhere (the float32 series' x^7 term is 3e-9 off at |x| = 0.06)."""
    if n.spec.dtype != "float64":
        return [tanh(a)]
    return [*_named(_expm1(f"(2.0 * {a})", f"t{i}"), f"em{i}"),
            f"tl.where({a} > 20.0, 1.0, tl.where({a} < -20.0, -1.0, em{i} / (em{i} + 2.0)))"]


def sinh(em: Any, i: int, n: Node, a: str) -> Lines:
    """expm1-based near 0 (no cancellation), from e^(|x|/2) squared elsewhere (finite up to the float max)."""
    return [*_named(_expm1(a, f"t{i}"), f"em{i}"), f"h{i} = tl.exp(tl.abs({a}) * 0.5)",
            f"big{i} = 0.5 * h{i} * h{i} - 0.5 / (h{i} * h{i})",
            f"tl.where(tl.abs({a}) < 1.0, 0.5 * (em{i} + em{i} / (em{i} + 1.0)), tl.where({a} < 0, -big{i}, big{i}))"]


def cosh(em: Any, i: int, n: Node, a: str) -> Lines:
    return [f"h{i} = tl.exp(tl.abs({a}) * 0.5)", f"0.5 * h{i} * h{i} + 0.5 / (h{i} * h{i})"]


def asinh(em: Any, i: int, n: Node, a: str) -> Lines:
    """log1p(x + x^2 / (1 + sqrt(1 + x^2))) for |x|, log(x) + ln 2 where x^2 would overflow; odd."""
    return [f"x{i} = tl.abs({a})", *_named(_log1p(f"(x{i} + x{i} * x{i} / (1.0 + tl.sqrt(1.0 + x{i} * x{i})))",
                                                   f"t{i}"), f"r{i}"),
            f"r{i} = tl.where(x{i} > 268435456.0, tl.log(x{i}) + {_LN2}, r{i})", f"tl.where({a} < 0, -r{i}, r{i})"]


def acosh(em: Any, i: int, n: Node, a: str) -> Lines:
    return [f"d{i} = {a} - 1.0", *_named(_log1p(f"(d{i} + tl.sqrt(d{i} * ({a} + 1.0)))", f"t{i}"), f"r{i}"),
            f"tl.where({a} < 1.0, {NAN}, tl.where({a} > 268435456.0, tl.log({a}) + {_LN2}, r{i}))"]


def atanh(em: Any, i: int, n: Node, a: str) -> Lines:
    return [*_named(_log1p(f"(2.0 * {a} / (1.0 - {a}))", f"t{i}"), f"r{i}"), f"0.5 * r{i}"]


# ---------------------------------------------------------------------------------------- rounding

def rounding(name: str) -> Any:
    def render(em: Any, i: int, n: Node, a: str) -> Lines:
        if not is_float(n.spec.dtype):
            return [a]  # an integer rounds to itself
        if name in ("floor", "ceil"):
            return [f"tl.{name}({a})"]
        if name == "trunc":
            return [f"tl.where({a} < 0, tl.ceil({a}), tl.floor({a}))"]
        # half to even: the fraction d = a - floor(a) is exact; a tie goes to the even neighbour
        return [f"f{i} = tl.floor({a})", f"d{i} = {a} - f{i}",
                f"r{i} = tl.where(d{i} > 0.5, f{i} + 1.0, tl.where(d{i} < 0.5, f{i}, "
                f"f{i} + (f{i} - 2.0 * tl.floor(f{i} * 0.5))))",
                f"tl.where(tl.abs({a}) == {INF}, {a}, r{i})"]

    return render


def sign(em: Any, i: int, n: Node, a: str) -> Lines:
    dt = n.spec.dtype
    if dt == "bool":
        return [a]
    if is_float(dt):  # NaN and -0.0 give +0, as eager
        return [f"tl.where({a} > 0, 1.0, tl.where({a} < 0, -1.0, 0.0)).to({TL_DTYPE[compute_dtype(dt)]})"]
    return [f"tl.where({a} > 0, 1, tl.where({a} < 0, -1, 0)).to({TL_DTYPE[dt]})"]


def classify(float_test: str, int_value: str) -> Any:
    """isnan / isinf / isfinite of the input as eager holds it (a float16 intermediate rounded to float16)."""
    def render(em: Any, i: int, n: Node, a: str) -> Lines:
        if is_float(em.graph.nodes[n.inputs[0]].spec.dtype):
            return [float_test.format(x=a)]
        return [f"{a} {'==' if int_value == 'True' else '!='} {a}"]  # a bool block of the input's shape

    return render


# ---------------------------------------------------------------------------------------- integers

def bitwise(op: str) -> Any:
    def render(em: Any, i: int, n: Node, a: str, b: str | None = None) -> Lines:
        if n.spec.dtype == "bool":
            bools = {"and": and_(a, b or ""), "or": or_(a, b or ""), "xor": f"{a} != {b}",
                     "not": f"tl.where({a}, False, True)"}
            return [bools[op]]
        return [{"and": f"{a} & {b}", "or": f"{a} | {b}", "xor": f"{a} ^ {b}", "not": f"~{a}"}[op]]

    return render


def shift(left: bool) -> Any:
    """A count outside [0, bits) gives 0 (left) or the sign fill (right), as eager; the count used in the
    shift itself is clamped so that no lane shifts by more than the width (poison on GPUs)."""
    def render(em: Any, i: int, n: Node, a: str, b: str) -> Lines:
        dt = TL_DTYPE[n.spec.dtype]
        lines = [f"bad{i} = {or_(f'{b} < 0', f'{b} >= {INT_BITS[n.spec.dtype]}')}",
                 f"c{i} = tl.where(bad{i}, 0, {b}).to({dt})"]
        if left:
            return lines + [f"tl.where(bad{i}, 0, {a} << c{i}).to({dt})"]
        return lines + [f"tl.where(bad{i}, tl.where({a} < 0, -1, 0).to({dt}), {a} >> c{i}).to({dt})"]

    return render


def _int_divisor_sign(em: Any, i: int) -> int:
    return 1 if integer_divisor(em.graph, i, "Triton") > 0 else -1


def fmod(em: Any, i: int, n: Node, a: str, b: str) -> Lines:
    if not is_float(n.spec.dtype):
        _int_divisor_sign(em, i)
        return [f"{a} % {b}"]  # truncating, as C (srem)
    return [fmod_expr(a, b, em.interpreter)]


def remainder(em: Any, i: int, n: Node, a: str, b: str) -> Lines:
    """fmod, then the divisor added where the sign differs from the divisor's (Python's %)."""
    if not is_float(n.spec.dtype):
        wrong = "< 0" if _int_divisor_sign(em, i) > 0 else "> 0"
        return [f"m{i} = {a} % {b}", f"tl.where(m{i} {wrong}, m{i} + {b}, m{i})"]
    return [f"m{i} = {fmod_expr(a, b, em.interpreter)}",
            f"tl.where({and_(f'm{i} != 0', f'({b} < 0) != (m{i} < 0)')}, m{i} + {b}, m{i})"]


def floor_divide(em: Any, i: int, n: Node, a: str, b: str) -> Lines:
    """Python's floor division; floats as c10's div_floor_floating: (a - fmod(a, b)) / b, corrected by one
    where the remainder's sign differs from b's, then rounded to the nearest integer; zero keeps a / b's sign."""
    dt = n.spec.dtype
    if not is_float(dt):
        wrong = "< 0" if _int_divisor_sign(em, i) > 0 else "> 0"
        return [f"q{i} = {a} // {b}", f"tl.where(({a} % {b}) {wrong}, q{i} - 1, q{i})"]
    bits = "tl.int64" if dt == "float64" else "tl.int32"
    return [f"m{i} = {fmod_expr(a, b, em.interpreter)}", f"q{i} = {div_expr(a, b, dt)}",
            f"d{i} = {div_expr(f'({a} - m{i})', b, dt)}",
            f"d{i} = tl.where({and_(f'm{i} != 0', f'({b} < 0) != (m{i} < 0)')}, d{i} - 1.0, d{i})",
            f"f{i} = tl.floor(d{i})", f"f{i} = tl.where(d{i} - f{i} > 0.5, f{i} + 1.0, f{i})",
            f"z{i} = tl.where(q{i}.to({bits}, bitcast=True) < 0, -0.0, 0.0)",
            f"tl.where({b} == 0, q{i}, tl.where(d{i} == 0, z{i}, f{i}))"]


def refuse(reason: str) -> Any:
    def render(em: Any, i: int, n: Node, *args: str) -> Lines:
        raise UnsupportedOpError(f"the Triton renderer has no rule for op {n.op!r} (node %{i}): {reason}; eager "
                                 "PyTorch runs this graph")

    return render


__all__ = ["acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "tanh_", "bitwise", "cast", "classify", "cosh", "expm1", "floor_divide", "fmod", "gelu",
           "log1p", "pow_", "refuse", "remainder", "rounding", "shift", "sign", "sinh"]
