"""C++ for kernelgen's elementwise IR ops: typed loads and stores, literals, and a DAG emitter.

Every C++ renderer (pointwise, row reduction, GEMM and attention epilogues) builds its loop bodies from
these pieces, so the IR's numerics live in one place (see ``kernelgen.ir``): float16/bfloat16/float32
values are computed in ``float``, float64 in ``double``; float16 and bfloat16 are stored as ``uint16_t``
and converted with integer bit tricks (``PRELUDE``) that gcc vectorises, unlike ``_Float16`` casts.

Typical use inside a loop body whose index is ``i``::

    env = {ld.node: load(ld.dtype, f"in{ld.arg}[i]") for ld in loads}   # leaves: loads, accumulators...
    lines = emit(graph, dag_nodes(graph, graph.outputs, env), env)        # one `const T vN = ...;` per node
    lines.append(store(out_dtype, "out0[i]", env[graph.outputs[0]]))      # env now names every emitted node

Leaves in ``env`` must already be in ``compute_type`` of their node's dtype (``load`` converts for you).
The emitted code is plain scalar C++: inside a simple counted loop gcc -O3 -ffast-math -fno-finite-math-only
vectorises it and calls libmvec for expf/logf/erff/tanhf (declared in ``PRELUDE``). Values follow eager
PyTorch, NaN and ±Inf included: max/min/relu/clamp propagate NaN, integer pow and overflow wrap around
(two's complement, with -fwrapv). Three float cases use inline approximations from ``PRELUDE`` that
gcc vectorises in place instead: softmax's exp(x - max(x)) (kg_exp_nonpos_f) and gelu's erf and tanh
(kg_erff_approx / kg_tanhf_approx).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, MutableMapping, Sequence

from kernelgen.ir import ELEMENTWISE_OPS, Graph, Node

PRELUDE = r"""
#include <cstdint>
#include <cstring>
#include <cmath>
#include <omp.h>

// glibc declares its vector math (libmvec) only under __FAST_MATH__, which -fno-finite-math-only turns off;
// declared here, gcc vectorises expf/logf/tanhf/erff loops again. libmvec keeps nan and +-inf like libm
// (its special cases fall back to the scalar function). tanh and erf entered libmvec in glibc 2.35.
#if defined(__x86_64__) && defined(__GLIBC__) && !defined(__FAST_MATH__)
#define KG_SIMD __attribute__((__simd__("notinbranch")))
extern "C" {
KG_SIMD float expf(float) noexcept; KG_SIMD double exp(double) noexcept;
KG_SIMD float logf(float) noexcept; KG_SIMD double log(double) noexcept;
KG_SIMD float powf(float, float) noexcept; KG_SIMD double pow(double, double) noexcept;
#if __GLIBC_PREREQ(2, 35)
KG_SIMD float tanhf(float) noexcept; KG_SIMD double tanh(double) noexcept;
KG_SIMD float erff(float) noexcept; KG_SIMD double erf(double) noexcept;
#endif
}
#endif

// float16 <-> float with integer bit tricks: gcc vectorises these (it does not vectorise _Float16 casts).
static inline float kg_h2f(uint16_t h) {
  const uint32_t em = (uint32_t)(h & 0x7fffu) << 13;
  // exponent rebias by multiplication also turns half subnormals into float normals exactly
  uint32_t u = __builtin_bit_cast(uint32_t, __builtin_bit_cast(float, em) * 0x1p112f);
  u |= (em >= (0x7c00u << 13)) ? 0x7f800000u : 0u;  // inf / nan keep an all-ones exponent
  u |= (uint32_t)(h & 0x8000u) << 16;
  return __builtin_bit_cast(float, u);
}
static inline uint16_t kg_f2h(float x) {  // round to nearest even, overflow to inf, nan stays nan
  uint32_t f = __builtin_bit_cast(uint32_t, x);
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  uint32_t o;
  if (f >= (143u << 23)) {
    o = (f > (255u << 23)) ? 0x7e00u : 0x7c00u;
  } else if (f < (113u << 23)) {  // half subnormal: let the FPU round by adding a magic number
    const float magic = __builtin_bit_cast(float, 126u << 23);
    o = __builtin_bit_cast(uint32_t, __builtin_bit_cast(float, f) + magic) - (126u << 23);
  } else {
    o = (f + 0xc8000fffu + ((f >> 13) & 1u)) >> 13;  // 0xc8000000 = (15 - 127) << 23 rebias
  }
  return (uint16_t)(o | (sign >> 16));
}
// bfloat16 is the top half of a float.
static inline float kg_bf2f(uint16_t h) { return __builtin_bit_cast(float, (uint32_t)h << 16); }
static inline uint16_t kg_f2bf(float x) {
  const uint32_t u = __builtin_bit_cast(uint32_t, x);
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? ((u >> 16) | 0x40u) : r);
}
// Sources are compiled with -ffast-math -fno-finite-math-only (see backends/cpp.py), so comparisons see nan
// and these plain selects compile to vector compare + blend. fmaxf/fminf would drop a nan (eager propagates
// it) and are scalar libm calls without -ffinite-math-only. The nested form is deliberate: gcc 12 did not
// vectorise `(a > b | a != a) ? a : b` in a loop that also held relu's select; this form it does.
static inline float kg_maxf(float a, float b) { return b != b ? b : (a < b ? b : a); }  // nan from either side
static inline float kg_minf(float a, float b) { return b != b ? b : (b < a ? b : a); }
static inline double kg_max(double a, double b) { return b != b ? b : (a < b ? b : a); }
static inline double kg_min(double a, double b) { return b != b ? b : (b < a ? b : a); }
// Integer pow as eager computes it: wraps around (two's complement, by square-and-multiply in uint64 then
// truncation, which is exact modulo 2^bits); a negative exponent gives 1 for base 1, +-1 for base -1, else 0.
static inline int64_t kg_ipow(int64_t base, int64_t e) {
  if (e < 0) return base == 1 ? 1 : (base == -1 ? ((e & 1) ? -1 : 1) : 0);
  uint64_t r = 1, b = (uint64_t)base;
  for (; e; e >>= 1, b *= b) if (e & 1) r *= b;
  return (int64_t)r;
}
// e^x for x <= 0 (softmax's x - max(x)), inline: gcc vectorises it in the loop, where libmvec's expf is a
// call that spills the loop's vectors (logsumexp [8192, 4096] fp32: 18.0 -> 15.2 ms). x = k ln2 + r with
// |r| <= ln2/2 and e^r = 1 + r + r^2 q(r), q fitted for least relative error (3.8e-9 before float rounding);
// 2^k goes straight into the exponent bits, valid for k >= -125, so x below -86.6 gives 0 (e^x < 2.4e-38).
static inline float kg_exp_nonpos_f(float x) {
  const float xc = x > -86.6f ? x : -86.6f;  // nan: any finite k, the result is replaced below
  const float k = __builtin_rintf(xc * 1.44269504088896341f);
  float r = __builtin_fmaf(k, -0.693145751953125f, xc);  // ln2 in two parts: k * high part is exact
  r = __builtin_fmaf(k, -1.428606765330187045e-06f, r);
  float q = 0.001381461275741458f;
  q = __builtin_fmaf(q, r, 0.008368710055947304f);
  q = __builtin_fmaf(q, r, 0.04166838899254799f);
  q = __builtin_fmaf(q, r, 0.1666652113199234f);
  q = __builtin_fmaf(q, r, 0.4999999403953552f);
  const float p = __builtin_fmaf(r * r, q, r) + 1.0f;
  const float e = __builtin_bit_cast(float, __builtin_bit_cast(int32_t, p) + ((int32_t)k << 23));
  const float z = x < -86.6f ? 0.0f : e;
  return x != x ? x : z;  // nan (a nan in the row, or inf - inf) stays nan; as one nested select gcc 12
                          // did not vectorise softmax's exp-and-sum loop (14x slower)
}
// erf and tanh for float gelu, which on libmvec erff / expf was compute-bound: odd rationals a P(a^2) / Q(a^2)
// of a = |x| clamped where the float result is 1 (fitted by tools/fit_rationals.py), which gcc inlines and
// vectorises (fmas and one division). Max abs error 3.6e-7 (erf) and 3.2e-7 (tanh), from float rounding in
// the Horner steps (~6 ulp just below 1): far inside gelu's tolerance, but above libmvec erff (2.4e-7) and
// tanhf (6e-8), so the erf and tanh ops keep libm. Within 3 ulp for tiny x, exactly +-1 past the clamp and
// at +-inf, nan stays nan.
static inline float kg_odd_result(float x, float a, float clamp, float r) {  // clamp, sign and nan for both
  r = a >= clamp ? 1.0f : r;
  r = __builtin_bit_cast(float, __builtin_bit_cast(uint32_t, r) | (__builtin_bit_cast(uint32_t, x) & 0x80000000u));
  return x != x ? x : r;
}
static inline float kg_erff_approx(float x) {
  const float a = kg_minf(fabsf(x), 3.92f), t = a * a;
  const float p = ((((2.0538782e-06f * t + 0.00028433884f) * t + 0.003742843f) * t + 0.05267932f) * t + 0.18987969f) * t + 1.1283792f;
  const float q = ((((3.81022e-05f * t + 0.0011569319f) * t + 0.014924014f) * t + 0.11389144f) * t + 0.50160944f) * t + 1.0f;
  return kg_odd_result(x, a, 3.92f, a * p / q);
}
static inline float kg_tanhf_approx(float x) {
  const float a = kg_minf(fabsf(x), 9.0f), t = a * a;
  const float p = (((1.34198235e-08f * t + 2.0661264e-05f) * t + 0.0034989961f) * t + 0.1338398f) * t + 1.0f;
  const float q = (((7.80473e-07f * t + 0.00032910384f) * t + 0.025890207f) * t + 0.467173f) * t + 1.0f;
  return kg_odd_result(x, a, 9.0f, a * p / q);
}
"""
"""C++ helpers every source using this module must include once, before its kernels."""

_STORAGE = {"float16": "uint16_t", "bfloat16": "uint16_t", "float32": "float", "float64": "double",
            "int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
            "bool": "uint8_t"}
_COMPUTE = {**_STORAGE, "float16": "float", "bfloat16": "float", "bool": "bool"}
_RANK = {"bool": 0, "uint8": 1, "int8": 1, "int16": 2, "int32": 3, "int64": 4,
         "float16": 5, "bfloat16": 5, "float32": 6, "float64": 7}

# libm names per compute type: float math stays in float (expf, not exp) so gcc can use libmvec.
_FLOAT_FN = {"exp": "expf", "log": "logf", "sqrt": "sqrtf", "tanh": "tanhf", "erf": "erff", "abs": "fabsf",
             "max": "kg_maxf", "min": "kg_minf", "pow": "powf"}
_DOUBLE_FN = {k: v[:-1] if k != "abs" else "fabs" for k, v in _FLOAT_FN.items()}
_DOUBLE_FN["abs"] = "fabs"


def storage_type(dtype: str) -> str:
    """The C type of one element of a tensor of ``dtype`` in memory (``uint16_t`` for float16/bfloat16)."""
    return _STORAGE[dtype]


def compute_type(dtype: str) -> str:
    """The C type values of ``dtype`` are computed in: ``float`` for float16/bfloat16/float32."""
    return _COMPUTE[dtype]


def is_float(dtype: str) -> bool:
    return dtype.startswith("float") or dtype == "bfloat16"


def load(dtype: str, ref: str) -> str:
    """Expression reading stored element ``ref`` (an lvalue such as ``in0[i]``) as ``compute_type(dtype)``."""
    if dtype == "float16":
        return f"kg_h2f({ref})"
    if dtype == "bfloat16":
        return f"kg_bf2f({ref})"
    if dtype == "bool":
        return f"({ref} != 0)"
    return ref


def convert(dtype: str, value: str) -> str:
    """Expression turning ``value`` (in ``compute_type(dtype)``) into ``storage_type(dtype)``."""
    if dtype == "float16":
        return f"kg_f2h({value})"
    if dtype == "bfloat16":
        return f"kg_f2bf({value})"
    if dtype == "bool":
        return f"(uint8_t)({value})"
    return value


def store(dtype: str, ref: str, value: str) -> str:
    """Statement writing ``value`` (in ``compute_type(dtype)``) to stored element ``ref``."""
    return f"{ref} = {convert(dtype, value)};"


def literal(value: object, dtype: str) -> str:
    """A C++ literal of ``compute_type(dtype)`` equal to IR const ``value`` rounded as torch rounds it."""
    if isinstance(value, str):  # the IR spells non-finite floats as strings (JSON has none)
        value = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[value]
    ctype = compute_type(dtype)
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


def _operand_dtype(graph: Graph, node: Node) -> str:
    """The dtype an op's inputs are converted to before it is applied."""
    if node.op in ("eq", "ne", "lt", "le", "gt", "ge"):
        return max((graph.nodes[j].spec.dtype for j in node.inputs), key=lambda d: _RANK[d])
    if node.op in ("logical_and", "logical_or"):
        return "bool"
    return node.spec.dtype


def _as(value: str, src: str, dst: str) -> str:
    if compute_type(src) == compute_type(dst):
        return value
    if dst == "bool":
        return f"({value} != 0)"
    return f"(({compute_type(dst)}){value})"


def _const_value(graph: Graph, node_id: int) -> float | None:
    node = graph.nodes[node_id]
    if node.op != "const" or isinstance(node.attr("value"), str):
        return None
    return float(node.attr("value"))


def op_expr(graph: Graph, node_id: int, args: Sequence[str]) -> str:
    """The C++ expression of elementwise node ``node_id`` given its inputs' expressions ``args``.

    ``args`` are in the compute types of the input nodes; the result is in the node's compute type.
    Raises ``ValueError`` for an op that is not elementwise.
    """
    node = graph.nodes[node_id]
    op = node.op
    if op == "const":
        return literal(node.attr("value"), node.spec.dtype)
    if op not in ELEMENTWISE_OPS:
        raise ValueError(f"node %{node_id} ({op}) is not elementwise; give its value to emit() in env")
    in_dtypes = [graph.nodes[j].spec.dtype for j in node.inputs]
    if op == "cast":  # round through the target dtype, then continue in its compute type
        src, dst = in_dtypes[0], node.spec.dtype
        x = args[0]
        if dst == "bool":
            return f"({x} != 0)"
        if dst == "float16":
            return f"kg_h2f(kg_f2h({_as(x, src, 'float32')}))"
        if dst == "bfloat16":
            return f"kg_bf2f(kg_f2bf({_as(x, src, 'float32')}))"
        return f"(({compute_type(dst)}){x})"
    if op == "where":
        ctype = compute_type(node.spec.dtype)
        a = _as(args[1], in_dtypes[1], node.spec.dtype)
        b = _as(args[2], in_dtypes[2], node.spec.dtype)
        return f"({_as(args[0], in_dtypes[0], 'bool')} ? ({ctype}){a} : ({ctype}){b})"
    operand = _operand_dtype(graph, node)
    xs = [_as(a, d, operand) for a, d in zip(args, in_dtypes)]
    ctype = compute_type(operand)
    floating = ctype in ("float", "double")
    fn = _FLOAT_FN if ctype == "float" else _DOUBLE_FN
    one = "1.0f" if ctype == "float" else ("1.0" if floating else "1")
    half = "0.5f" if ctype == "float" else "0.5"
    x = xs[0]
    if op in ("add", "sub", "mul", "div"):
        symbol = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[op]
        return f"({xs[0]} {symbol} {xs[1]})"
    if op in ("eq", "ne", "lt", "le", "gt", "ge"):
        symbol = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[op]
        return f"({xs[0]} {symbol} {xs[1]})"
    if op in ("logical_and", "logical_or"):
        return f"({xs[0]} {'&&' if op == 'logical_and' else '||'} {xs[1]})"
    if op in ("maximum", "minimum"):
        if floating:
            return f"{fn['max' if op == 'maximum' else 'min']}({xs[0]}, {xs[1]})"
        return f"({xs[0]} {'>' if op == 'maximum' else '<'} {xs[1]} ? {xs[0]} : {xs[1]})"
    if op == "neg":
        return f"(-{x})"
    if op == "abs":
        return f"{fn['abs']}({x})" if floating else f"({x} < 0 ? ({ctype})-{x} : {x})"
    if op == "relu":
        return f"({x} < 0 ? ({ctype})0 : {x})"  # nan < 0 is false: relu(nan) is nan, as in eager
    if op == "pow":
        return _pow(graph, node, xs, fn, ctype, floating)
    if not floating:  # remaining ops are float math; the IR gives them a float dtype
        raise ValueError(f"op {op} of integer dtype {node.spec.dtype} at %{node_id} has no C++ rule")
    if op == "exp" and ctype == "float" and _is_minus_its_max(graph, node.inputs[0]):
        return f"kg_exp_nonpos_f({x})"
    if op in ("exp", "log", "sqrt", "tanh", "erf"):
        return f"{fn[op]}({x})"
    if op == "rsqrt":
        return f"({one} / {fn['sqrt']}({x}))"
    if op == "reciprocal":
        return f"({one} / {x})"
    if op == "sigmoid":
        return f"({one} / ({one} + {fn['exp']}(-{x})))"
    if op == "silu":
        return f"({x} / ({one} + {fn['exp']}(-{x})))"  # silu(-inf) = -inf / inf = nan, as in eager
    if op == "gelu":
        if node.attr("approximate", "none") == "tanh":
            if ctype == "float":  # the inline tanh is ~1.7x faster than the exp form below
                c0, c1 = literal(math.sqrt(2.0 / math.pi), operand), literal(0.044715, operand)
                return f"({half} * {x} * ({one} + kg_tanhf_approx({c0} * ({x} + {c1} * {x} * {x} * {x}))))"
            # 0.5 x (1 + tanh(u)) == x / (1 + exp(-2u)): one exp instead of a (3x slower) vector tanh
            c0, c1 = literal(-2.0 * math.sqrt(2.0 / math.pi), operand), literal(0.044715, operand)
            return f"({x} / ({one} + {fn['exp']}({c0} * ({x} + {c1} * {x} * {x} * {x}))))"
        erf = "kg_erff_approx" if ctype == "float" else fn["erf"]  # ~2.5x faster than with libmvec erff
        return f"({half} * {x} * ({one} + {erf}({x} * {literal(math.sqrt(0.5), operand)})))"
    raise ValueError(f"op {op} at %{node_id} has no C++ rule")


def _is_minus_its_max(graph: Graph, node_id: int) -> bool:
    """Whether node ``node_id`` is ``a - max(a)`` (over a's last dim), so never positive: softmax's exp input."""
    node = graph.nodes[node_id]
    if node.op != "sub":
        return False
    a, m = node.inputs
    return graph.nodes[m].op == "max" and graph.nodes[m].inputs[0] == a


def _pow(graph: Graph, node: Node, xs: Sequence[str], fn: dict, ctype: str, floating: bool) -> str:
    """Small constant exponents become multiplications (x**2 in rms norm must not call powf)."""
    exponent = _const_value(graph, node.inputs[1])
    x = xs[0]
    if exponent is not None:
        if exponent == 1:
            return x
        if exponent == 2:
            return f"({x} * {x})"
        if exponent == 3:
            return f"({x} * {x} * {x})"
        if floating and exponent == 0.5:
            return f"{fn['sqrt']}({x})"
        if floating and exponent == -1:
            return f"(({ctype})1 / {x})"
        if floating and exponent == -2:
            return f"(({ctype})1 / ({x} * {x}))"
    if floating:
        return f"{fn['pow']}({x}, {xs[1]})"
    return f"(({ctype})kg_ipow((int64_t){x}, (int64_t){xs[1]}))"


def dag_nodes(graph: Graph, roots: Iterable[int], available: Iterable[int]) -> list[int]:
    """Node ids needed to compute ``roots`` that are not in ``available``, in topological order."""
    have = set(available)
    needed: set[int] = set()
    stack = [r for r in roots if r not in have]
    while stack:
        i = stack.pop()
        if i in needed:
            continue
        needed.add(i)
        stack.extend(j for j in graph.nodes[i].inputs if j not in have and j not in needed)
    return sorted(needed)


def emit(graph: Graph, node_ids: Iterable[int], env: MutableMapping[int, str], prefix: str = "v") -> list[str]:
    """Statements computing ``node_ids`` (topological order) from the values already in ``env``.

    Each node becomes ``const <compute type> <prefix><id> = <expr>;`` and ``env[id]`` is set to that
    name; constants are inlined as literals (no statement). Raises ``ValueError`` when a node is not
    elementwise and not in ``env``, naming it.
    """
    lines = []
    for i in node_ids:
        if i in env:
            continue
        node = graph.nodes[i]
        missing = [j for j in node.inputs if j not in env]
        if missing:
            raise ValueError(f"node %{i} ({node.op}) reads %{missing[0]} which is neither in env nor emitted before it")
        expr = op_expr(graph, i, [env[j] for j in node.inputs])
        if node.op == "const":
            env[i] = expr
            continue
        name = f"{prefix}{i}"
        lines.append(f"const {compute_type(node.spec.dtype)} {name} = {expr};")
        env[i] = name
    return lines


__all__ = ["PRELUDE", "compute_type", "convert", "dag_nodes", "emit", "is_float", "literal", "load", "op_expr",
           "storage_type", "store"]
