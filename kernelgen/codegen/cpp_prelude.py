"""The C++ prelude every kernelgen C++ source includes once: libmvec declarations, float16/bfloat16
conversions and the typed helpers the C++ op table (``kernelgen.codegen.cpp_renderer``) calls.
"""

from __future__ import annotations

PRELUDE = r"""
#include <cstdint>
#include <cstring>
#include <cmath>
#include <omp.h>
#include <type_traits>

// glibc declares its vector math (libmvec) only under __FAST_MATH__, which -fno-finite-math-only turns off;
// declared here, gcc vectorises expf/logf/tanhf/erff/sinf/expm1f... loops again. libmvec keeps nan and +-inf like libm
// (its special cases fall back to the scalar function). tanh and erf entered libmvec in glibc 2.35.
#if defined(__x86_64__) && defined(__GLIBC__) && !defined(__FAST_MATH__)
#define KG_SIMD __attribute__((__simd__("notinbranch")))
extern "C" {
KG_SIMD float expf(float) noexcept; KG_SIMD double exp(double) noexcept;
KG_SIMD float logf(float) noexcept; KG_SIMD double log(double) noexcept;
KG_SIMD float powf(float, float) noexcept; KG_SIMD double pow(double, double) noexcept;
KG_SIMD float sinf(float) noexcept; KG_SIMD double sin(double) noexcept;
KG_SIMD float cosf(float) noexcept; KG_SIMD double cos(double) noexcept;
#if __GLIBC_PREREQ(2, 35)
KG_SIMD float tanhf(float) noexcept; KG_SIMD double tanh(double) noexcept;
KG_SIMD float erff(float) noexcept; KG_SIMD double erf(double) noexcept;
KG_SIMD float expm1f(float) noexcept; KG_SIMD double expm1(double) noexcept;
KG_SIMD float log1pf(float) noexcept; KG_SIMD double log1p(double) noexcept;
KG_SIMD float exp2f(float) noexcept; KG_SIMD double exp2(double) noexcept;
KG_SIMD float log2f(float) noexcept; KG_SIMD double log2(double) noexcept;
KG_SIMD float log10f(float) noexcept; KG_SIMD double log10(double) noexcept;
KG_SIMD float tanf(float) noexcept; KG_SIMD double tan(double) noexcept;
KG_SIMD float asinf(float) noexcept; KG_SIMD double asin(double) noexcept;
KG_SIMD float acosf(float) noexcept; KG_SIMD double acos(double) noexcept;
KG_SIMD float atanf(float) noexcept; KG_SIMD double atan(double) noexcept;
KG_SIMD float sinhf(float) noexcept; KG_SIMD double sinh(double) noexcept;
KG_SIMD float coshf(float) noexcept; KG_SIMD double cosh(double) noexcept;
KG_SIMD float asinhf(float) noexcept; KG_SIMD double asinh(double) noexcept;
KG_SIMD float acoshf(float) noexcept; KG_SIMD double acosh(double) noexcept;
KG_SIMD float atanhf(float) noexcept; KG_SIMD double atanh(double) noexcept;
KG_SIMD float atan2f(float, float) noexcept; KG_SIMD double atan2(double, double) noexcept;
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
// Sources are compiled with IEEE semantics (no -ffast-math, see backends/cpp.py), so comparisons see nan
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
// Integer and float division as eager rounds it (c10's div_floor_floating / div_floor_integer and ATen's
// remainder kernels): Python's floor division and a remainder with the divisor's sign. Integer divisors are
// constants other than 0 and -1 (the renderer refuses the rest: eager raises on 0, INT_MIN / -1 traps).
// Signs of zeros are read from the bits: under -ffast-math (no signed zeros, the old flags) gcc replaced b by +0.0 inside
// `if (b == 0)`, so x // -0.0 gave +inf.
template <typename T> static inline T kg_floordiv_fp(T a, T b) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  const U ub = __builtin_bit_cast(U, b);
  const U sign = (__builtin_bit_cast(U, a) ^ ub) & ((U)1 << (sizeof(T) * 8 - 1));  // the sign of a / b
  if ((U)(ub << 1) == 0)  // a / +-0: nan for a nan or zero a, else an infinity
    return (a != a || a == 0) ? (T)NAN : __builtin_bit_cast(T, __builtin_bit_cast(U, (T)INFINITY) | sign);
  const T mod = std::fmod(a, b);
  T div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
  if (div == 0) return __builtin_bit_cast(T, sign);  // +-0 with a / b's sign
  T fl = std::floor(div);
  return div - fl > (T)0.5 ? fl + 1 : fl;
}
template <typename T> static inline T kg_remainder_fp(T a, T b) {
  const T mod = std::fmod(a, b);
  return (mod != 0 && ((b < 0) != (mod < 0))) ? mod + b : mod;
}
template <typename T> static inline T kg_floordiv_int(T a, T b) {
  const T q = (T)(a / b), r = (T)(a % b);
  return (r != 0 && ((r < 0) != (b < 0))) ? (T)(q - 1) : q;
}
template <typename T> static inline T kg_remainder_int(T a, T b) {
  const T r = (T)(a % b);
  return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r;
}
// Shifts as eager: a shift count outside [0, bits) gives 0 (left) or the sign fill (right); the left shift is
// done unsigned so that it wraps instead of overflowing.
template <typename T> static inline T kg_shl(T a, T b) {
  constexpr int64_t bits = sizeof(T) * 8;
  return ((int64_t)b < 0 || (int64_t)b >= bits) ? (T)0 : (T)((std::make_unsigned_t<T>)a << b);
}
template <typename T> static inline T kg_shr(T a, T b) {
  constexpr int64_t bits = sizeof(T) * 8;
  return ((int64_t)b < 0 || (int64_t)b >= bits) ? (T)(a < 0 ? -1 : 0) : (T)(a >> b);
}
"""
__all__ = ["PRELUDE"]
