"""C++/OpenMP renderer of the attention backward template: flash-style, recomputing the probabilities from the
saved logsumexp, on the CPU.

Each task is one (batch, head): it converts Q, dO (and their transposes) into padded buffers once and computes
Δ = rowsum(dO ∘ O), then walks key blocks; per key block it keeps dK and dV in registers-friendly buffers and walks
the query blocks that see it (a causal mask skips the earlier ones): Sᵀ = K Qᵀ and dPᵀ = V dOᵀ (keys by queries, so
the softmax statistics run along vector lanes of queries), Pᵀ = exp(scale·Sᵀ [+ mask] - lse) and dSᵀ = Pᵀ ∘ (dPᵀ - Δ)
in one vectorised pass, then dV += Pᵀ dO, dK += dSᵀ Q and dQ += dS K, five products through one register
micro-tile (GCC vector extensions). dQ stays in the task's buffer across key blocks, so no two tasks write one
element: no atomics, and the result does not depend on the schedule. Queries and keys a causal or boolean mask
hides have probability 0; a query whose keys are all hidden (logsumexp 0 in ATen's forward) gets 0 gradients.
Grouped-query attention (``GROUP`` query heads per key/value head): a task is one (batch, key/value head) and walks
its ``GROUP`` query heads in turn, adding each one's dK and dV into the task's accumulators (in the accumulation
dtype), written once at the end; dQ is each query head's own, as before.
"""

from __future__ import annotations

import json

from kernelgen.backends.cpp import entry_declaration
from kernelgen.codegen import cpp_expr
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source
from kernelgen.templates.attention_cpp import vector_isa
from kernelgen.templates.attention_grad import AttentionGradProblem

ENTRY = "kg_attention_grad"
BLOCK_M_CHOICES = (16, 32, 48, 64, 96, 128)
BLOCK_N_CHOICES = (16, 32, 64, 128, 256)
MR_CHOICES = (1, 2, 4, 6, 8)
NR_CHOICES = (8, 16, 32, 48, 64)
_DEFAULTS = ({"BLOCK_M": 64, "BLOCK_N": 64, "MR": 8, "NR": 32}, {"BLOCK_M": 64, "BLOCK_N": 64, "MR": 6, "NR": 16},
             {"BLOCK_M": 32, "BLOCK_N": 64, "MR": 4, "NR": 16}, {"BLOCK_M": 16, "BLOCK_N": 32, "MR": 4, "NR": 8},
             {"BLOCK_M": 16, "BLOCK_N": 16, "MR": 1, "NR": 8})


def space(problem: AttentionGradProblem, target: Target) -> SearchSpace:
    """Query and key blocks and the micro-tile, with the target's vector register file as the limit."""
    acc = 8 if problem.q.dtype == "float64" else 4
    vector_bytes, registers = vector_isa(target)
    lanes = vector_bytes // acc
    constraints = [
        Constraint(f"NR is a multiple of the vector length ({lanes})", lambda c: c["NR"] % lanes == 0),
        Constraint(f"BLOCK_M is a multiple of the vector length ({lanes}): queries are vector lanes",
                   lambda c: c["BLOCK_M"] % lanes == 0),
        Constraint(f"MR*NR/{lanes} accumulators + NR/{lanes} B vectors + 1 broadcast fit in {registers} registers",
                   lambda c: c["MR"] * c["NR"] // lanes + c["NR"] // lanes + 1 <= registers),
    ]
    params = [Param("BLOCK_M", BLOCK_M_CHOICES), Param("BLOCK_N", BLOCK_N_CHOICES), Param("MR", MR_CHOICES),
              Param("NR", NR_CHOICES)]
    probe = SearchSpace(params, constraints)
    default = next((d for d in _DEFAULTS if probe.is_valid(Config(d))), None)
    return SearchSpace(params, constraints, default)


_KERNEL = r"""
typedef acc_t vacc __attribute__((vector_size(VBYTES)));
typedef acc_t vacc_u __attribute__((vector_size(VBYTES), aligned(sizeof(acc_t))));  // unaligned loads/stores
static constexpr int VL = VBYTES / (int)sizeof(acc_t);
static constexpr int64_t DP = (D + VL - 1) / VL * VL, DVP = (DV + VL - 1) / VL * VL;  // rows padded to vectors
static constexpr int64_t LQP = (LQ + BM - 1) / BM * BM;  // queries padded to whole blocks

// c[RB][CB] (+)= sum_k a[r * lda + k * ldk] * b[k * ldb + j]: the register micro-tile of every product.
template <int RB, int CB, bool ACC>
static inline void tile(int64_t kd, const acc_t* __restrict a, int64_t lda, int64_t ldk, const acc_t* __restrict b,
                        int64_t ldb, acc_t* __restrict c, int64_t ldc) {
  constexpr int NV = CB / VL;
  vacc s[RB][NV];
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) s[r][j] = ACC ? (vacc)*(const vacc_u*)(c + r * ldc + j * VL) : vacc{};
#pragma GCC unroll 2
  for (int64_t k = 0; k < kd; ++k) {
    vacc bv[NV];
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) bv[j] = *(const vacc_u*)(b + k * ldb + j * VL);
#pragma GCC unroll 16
    for (int r = 0; r < RB; ++r) {
      const vacc av = vacc{} + a[r * lda + k * ldk];
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) s[r][j] += av * bv[j];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) *(vacc_u*)(c + r * ldc + j * VL) = s[r][j];
}

// C[m][n] (+)= A B for m x n x kd, n a multiple of VL: MR x NR tiles, then the ragged rows and columns.
template <bool ACC>
static void mm(int64_t m, int64_t n, int64_t kd, const acc_t* a, int64_t lda, int64_t ldk, const acc_t* b,
               int64_t ldb, acc_t* c, int64_t ldc) {
  int64_t r = 0;
  for (; r + MR <= m; r += MR) {
    int64_t j = 0;
    for (; j + NR <= n; j += NR) tile<MR, NR, ACC>(kd, a + r * lda, lda, ldk, b + j, ldb, c + r * ldc + j, ldc);
    for (; j < n; j += VL) tile<MR, VL, ACC>(kd, a + r * lda, lda, ldk, b + j, ldb, c + r * ldc + j, ldc);
  }
  for (; r < m; ++r) {
    int64_t j = 0;
    for (; j + NR <= n; j += NR) tile<1, NR, ACC>(kd, a + r * lda, lda, ldk, b + j, ldb, c + r * ldc + j, ldc);
    for (; j < n; j += VL) tile<1, VL, ACC>(kd, a + r * lda, lda, ldk, b + j, ldb, c + r * ldc + j, ldc);
  }
}

struct Scratch {
  acc_t* ptr = nullptr;
  ~Scratch() { std::free(ptr); }
};

static constexpr int64_t HKV = H / GROUP;  // key/value heads
// the group's dK and dV sums over all keys (grouped-query attention only)
static constexpr int64_t GROUP_BUF = GROUP > 1 ? LK * D + LK * DV : 0;
static constexpr int64_t BUF = LQP * DP + D * LQP + LQP * DVP + DV * LQP + 2 * LQP + LQP * DP +
                               2 * BN * DP + 2 * BN * DVP + 3 * BN * BM + GROUP_BUF;

static void backward_head(void* const* ptrs, int64_t b, int64_t h, acc_t* __restrict buf) {
  const g_t* g = (const g_t*)ptrs[G_ARG] + b * G_SB + h * G_SH;
  const in_t* q = (const in_t*)ptrs[Q_ARG] + b * Q_SB + h * Q_SH;
  const in_t* k = (const in_t*)ptrs[K_ARG] + b * K_SB + (h / GROUP) * K_SH;
  const in_t* v = (const in_t*)ptrs[V_ARG] + b * V_SB + (h / GROUP) * V_SH;
  const in_t* o = (const in_t*)ptrs[O_ARG] + b * O_SB + h * O_SH;
  const lse_t* lse_in = (const lse_t*)ptrs[L_ARG] + b * L_SB + h * L_SH;
  acc_t* __restrict qr = buf;               // [LQP][DP] Q
  acc_t* __restrict qt = qr + LQP * DP;     // [D][LQP] Q transposed
  acc_t* __restrict dor = qt + D * LQP;     // [LQP][DVP] dO
  acc_t* __restrict dot = dor + LQP * DVP;  // [DV][LQP] dO transposed
  acc_t* __restrict delta = dot + DV * LQP; // [LQP] rowsum(dO * O)
  acc_t* __restrict lse = delta + LQP;      // [LQP]
  acc_t* __restrict dq = lse + LQP;         // [LQP][DP] dQ accumulator
  acc_t* __restrict kr = dq + LQP * DP;     // [BN][DP] K block
  acc_t* __restrict dk = kr + BN * DP;      // [BN][DP]
  acc_t* __restrict vr = dk + BN * DP;      // [BN][DVP] V block
  acc_t* __restrict dv = vr + BN * DVP;     // [BN][DVP]
  acc_t* __restrict pt = dv + BN * DVP;     // [BN][BM] scores, then probabilities (keys by queries)
  acc_t* __restrict dst = pt + BN * BM;     // [BN][BM] dP, then dS
  acc_t* __restrict mb = dst + BN * BM;     // [BN][BM] the mask block, laid out as the scores
  acc_t* __restrict dk_sum = mb + BN * BM;  // [LK][D] the group's dK (GROUP > 1)
  acc_t* __restrict dv_sum = dk_sum + (GROUP > 1 ? LK * D : 0);  // [LK][DV] the group's dV (GROUP > 1)
  for (int64_t i = 0; i < LQP; ++i) {
    const bool in = i < LQ;
    acc_t d_sum = 0;
    for (int64_t d = 0; d < DP; ++d) {
      const acc_t x = in && d < D ? LOAD_IN(q[i * Q_SS + d * Q_SD]) : acc_t(0);
      qr[i * DP + d] = x;
      if (d < D) qt[d * LQP + i] = x;
    }
    for (int64_t d = 0; d < DVP; ++d) {
      const acc_t x = in && d < DV ? LOAD_G(g[i * G_SS + d * G_SD]) : acc_t(0);
      dor[i * DVP + d] = x;
      if (d < DV) {
        dot[d * LQP + i] = x;
        if (in) d_sum += x * LOAD_IN(o[i * O_SS + d * O_SD]);
      }
    }
    delta[i] = d_sum;
    lse[i] = in ? (acc_t)lse_in[i * L_SS] : acc_t(0);
    for (int64_t d = 0; d < DP; ++d) dq[i * DP + d] = 0;
  }
  for (int64_t j0 = 0; j0 < LK; j0 += BN) {
    const int64_t kc = std::min<int64_t>(BN, LK - j0);
    for (int64_t j = 0; j < BN; ++j) {
      for (int64_t d = 0; d < DP; ++d) {
        kr[j * DP + d] = j < kc && d < D ? LOAD_IN(k[(j0 + j) * K_SS + d * K_SD]) : acc_t(0);
        dk[j * DP + d] = 0;
      }
      for (int64_t d = 0; d < DVP; ++d) {
        vr[j * DVP + d] = j < kc && d < DV ? LOAD_IN(v[(j0 + j) * V_SS + d * V_SD]) : acc_t(0);
        dv[j * DVP + d] = 0;
      }
    }
    // causal: query i sees keys <= i, so the query blocks ending before j0 see none of this block
    for (int64_t i0 = CAUSAL ? j0 / BM * BM : 0; i0 < LQ; i0 += BM) {
      const int64_t rows = std::min<int64_t>(BM, LQ - i0);
      if constexpr (HAS_MASK) {
        const m_t* mrow = (const m_t*)ptrs[M_ARG] + b * M_SB + h * M_SH;
        for (int64_t j = 0; j < kc; ++j)
          for (int64_t c = 0; c < BM; ++c)
            mb[j * BM + c] = c < rows ? LOAD_M(mrow[(i0 + c) * M_SQ + (j0 + j) * M_SK]) : acc_t(0);
      }
      mm<false>(kc, BM, D, kr, DP, 1, qt + i0, LQP, pt, BM);     // S^T = K Q^T
      mm<false>(kc, BM, DV, vr, DVP, 1, dot + i0, LQP, dst, BM);  // dP^T = V dO^T
      for (int64_t j = 0; j < kc; ++j) {
        acc_t* __restrict p = pt + j * BM;
        acc_t* __restrict ds = dst + j * BM;
        const acc_t* __restrict mk = mb + j * BM;
        const acc_t* __restrict l = lse + i0;
        const acc_t* __restrict dl = delta + i0;
        const int64_t key = j0 + j;
#pragma omp simd
        for (int64_t c = 0; c < BM; ++c) {
          acc_t s = p[c] * SCALE;
          if constexpr (HAS_MASK) s += mk[c];
          const bool hidden = c >= rows || (CAUSAL && key > i0 + c);
          const acc_t e = hidden ? acc_t(0) : std::exp(s - l[c]);
          p[c] = e;
          ds[c] = e * (ds[c] - dl[c]);
        }
      }
      mm<true>(kc, DVP, rows, pt, BM, 1, dor + i0 * DVP, DVP, dv, DVP);  // dV += P^T dO
      mm<true>(kc, DP, rows, dst, BM, 1, qr + i0 * DP, DP, dk, DP);      // dK += dS^T Q
      mm<true>(rows, DP, kc, dst, 1, BM, kr, DP, dq + i0 * DP, DP);      // dQ += dS K
    }
    if constexpr (HAS_DK && GROUP == 1) {
      dk_t* out = (dk_t*)ptrs[DK_ARG] + ((b * H + h) * LK + j0) * D;
      for (int64_t j = 0; j < kc; ++j)
        for (int64_t d = 0; d < D; ++d) out[j * D + d] = STORE_DK(dk[j * DP + d] * SCALE);
    } else if constexpr (HAS_DK) {  // the group's first head starts the sums
      for (int64_t j = 0; j < kc; ++j)
        for (int64_t d = 0; d < D; ++d)
          dk_sum[(j0 + j) * D + d] = (h % GROUP ? dk_sum[(j0 + j) * D + d] : acc_t(0)) + dk[j * DP + d];
    }
    if constexpr (HAS_DV && GROUP == 1) {
      dv_t* out = (dv_t*)ptrs[DV_ARG] + ((b * H + h) * LK + j0) * DV;
      for (int64_t j = 0; j < kc; ++j)
        for (int64_t d = 0; d < DV; ++d) out[j * DV + d] = STORE_DV(dv[j * DVP + d]);
    } else if constexpr (HAS_DV) {
      for (int64_t j = 0; j < kc; ++j)
        for (int64_t d = 0; d < DV; ++d)
          dv_sum[(j0 + j) * DV + d] = (h % GROUP ? dv_sum[(j0 + j) * DV + d] : acc_t(0)) + dv[j * DVP + d];
    }
  }
  if constexpr (HAS_DQ) {
    dq_t* out = (dq_t*)ptrs[DQ_ARG] + (b * H + h) * LQ * D;
    for (int64_t i = 0; i < LQ; ++i)
      for (int64_t d = 0; d < D; ++d) out[i * D + d] = STORE_DQ(dq[i * DP + d] * SCALE);
  }
}

// One task: (batch, key/value head), its GROUP query heads in turn; with GROUP > 1 the summed dK and dV are
// written after the last of them.
static void backward_task(void* const* ptrs, int64_t b, int64_t kh, acc_t* __restrict buf) {
  for (int64_t g = 0; g < GROUP; ++g) backward_head(ptrs, b, kh * GROUP + g, buf);
  if constexpr (GROUP > 1) {
    const acc_t* __restrict dk_sum = buf + (BUF - GROUP_BUF);
    const acc_t* __restrict dv_sum = dk_sum + LK * D;
    if constexpr (HAS_DK) {
      dk_t* out = (dk_t*)ptrs[DK_ARG] + (b * HKV + kh) * LK * D;
      for (int64_t i = 0; i < LK * D; ++i) out[i] = STORE_DK(dk_sum[i] * SCALE);
    }
    if constexpr (HAS_DV) {
      dv_t* out = (dv_t*)ptrs[DV_ARG] + (b * HKV + kh) * LK * DV;
      for (int64_t i = 0; i < LK * DV; ++i) out[i] = STORE_DV(dv_sum[i]);
    }
  }
}

@ENTRY_HEAD@
  const int64_t TASKS = B * HKV;
  if (TASKS == 0) return;
  int nt = num_threads < 1 ? 1 : int(num_threads);
  if (double(B * H) * double(LQ) * double(LK) * double(D + DV) < 131072.0) nt = 1;  // not worth the pool
#pragma omp parallel num_threads(nt)
  {
    static thread_local Scratch scratch;
    if (scratch.ptr == nullptr)  // BUF is fixed for this library: allocate once per thread
      scratch.ptr = (acc_t*)std::aligned_alloc(64, (sizeof(acc_t) * BUF + 63) / 64 * 64);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < TASKS; ++t) backward_task(ptrs, t / HKV, t % HKV, scratch.ptr);
  }
}
"""


def render(problem: AttentionGradProblem, config: Config, target: Target) -> Source:
    """C++ source of the attention backward kernel; raises ``ValueError`` for a config the space rejects."""
    problems = space(problem, target).violations(config)
    if problems:
        raise ValueError(f"attention_grad config {dict(config)} is invalid: {'; '.join(problems)}")
    p, graph = problem, problem.graph
    acc = "double" if p.q.dtype == "float64" else "float"
    consts = {"B": p.batch, "H": p.heads, "LQ": p.q_len, "LK": p.kv_len, "D": p.head_dim, "DV": p.v_dim,
              "BM": config["BLOCK_M"], "BN": config["BLOCK_N"], "MR": config["MR"], "NR": config["NR"],
              "G_ARG": p.grad.arg, "Q_ARG": p.q.arg, "K_ARG": p.k.arg, "V_ARG": p.v.arg, "O_ARG": p.out.arg,
              "L_ARG": p.lse.arg, "M_ARG": p.mask.arg if p.mask else 0, "GROUP": p.group,
              **{f"D{part.upper()}_ARG": p.output_arg(part) or 0 for part in ("q", "k", "v")}}
    for name, operand in (("G", p.grad), ("Q", p.q), ("K", p.k), ("V", p.v), ("O", p.out)):
        consts.update({f"{name}_S{axis}": stride for axis, stride in zip("BHSD", operand.strides)})
    consts.update({f"L_S{axis}": stride for axis, stride in zip("BHS", p.lse.strides)})
    consts.update({f"M_S{axis}": stride for axis, stride in zip("BHQK", p.mask.strides if p.mask else (0,) * 4)})
    dtype = p.q.dtype
    header = [
        "#include <cstdlib>", "#include <cmath>", "#include <algorithm>",
        f"typedef {acc} acc_t;", f"typedef {cpp_expr.storage_type(dtype)} in_t;",
        f"typedef {cpp_expr.storage_type(p.grad.dtype)} g_t;", f"typedef {cpp_expr.storage_type(p.lse.dtype)} lse_t;",
        *(f"typedef {cpp_expr.storage_type(dtype)} d{part}_t;" for part in ("q", "k", "v")),
        f"typedef {cpp_expr.storage_type(p.mask.dtype) if p.mask else acc} m_t;",
        *(f"static constexpr int64_t {name} = {value};" for name, value in consts.items()),
        f"static constexpr int VBYTES = {vector_isa(target)[0]};",
        f"static constexpr bool CAUSAL = {'true' if p.causal else 'false'};",
        f"static constexpr bool HAS_MASK = {'true' if p.mask else 'false'};",
        *(f"static constexpr bool HAS_D{part.upper()} = {'true' if part in p.outputs else 'false'};"
          for part in ("q", "k", "v")),
        f"static constexpr acc_t SCALE = {p.scale!r};",
        f"#define LOAD_IN(x) ((acc_t){cpp_expr.load(dtype, '(x)')})",
        f"#define LOAD_G(x) ((acc_t){cpp_expr.load(p.grad.dtype, '(x)')})",
        *(f"#define STORE_D{part.upper()}(x) ({cpp_expr.convert(dtype, '(x)')})" for part in ("q", "k", "v")),
        "#define LOAD_M(x) (" + ("(x) ? acc_t(0) : -__builtin_huge_val())" if p.mask and p.mask.dtype == "bool" else
                              f"(acc_t){cpp_expr.load(p.mask.dtype if p.mask else 'float32', '(x)')})"),
    ]
    text = "\n".join([cpp_expr.PRELUDE, *header, _KERNEL.replace("@ENTRY_HEAD@", entry_declaration(ENTRY, False))])
    signature = [spec.to_json() for spec in (*graph.signature, *graph.output_specs)]
    return Source("cpp", text, ENTRY, (), FrozenMap(signature=json.dumps(signature), template="attention_grad"))


__all__ = ["ENTRY", "render", "space"]
