"""C++/OpenMP renderer of the attention template: flash-style online softmax over key blocks, on the CPU.

Each task is one (batch, head, block of BLOCK_M queries): it keeps a running row max, row sum and a
rescaled output accumulator while it walks BLOCK_N keys at a time, computing Q·Kᵀ and P·V with an
MR×NR register micro-tile (GCC vector extensions: zmm with AVX-512, ymm otherwise). Scores are kept
transposed (Sᵀ[key][query]) so the softmax runs along vector lanes of queries: the Q·Kᵀ tile folds each
query's block max in as it stores its scores (and applies the causal mask), one pass per vector of
queries turns scores into probabilities with an inline polynomial exp, and the P·V tile rescales the
output rows it loads by exp(old max - new max), so there is no separate max or rescale pass. Causal
attention follows ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``, which the
reference evaluates: query i sees keys 0..i (top-left alignment, also when q_len != kv_len); key blocks
past a query block's last visible key are skipped, not masked. An ``attn_mask`` (additive, or bool with False
hiding a key) is read through its strides, broadcast dims at stride 0, into a block laid out as the scores and
added by the Q·Kᵀ tile as it stores them; masked scores are -inf (the kernel is built with infinities on), a
query with no visible key gets output 0 and logsumexp 0 as in ATen's CPU kernel. With a ``lse`` output the
task also writes each query's max + log(sum), the statistic ATen's flash backward reads. Grouped-query attention
(``GROUP`` query heads per key/value head) reads K and V at head ``h / GROUP``.
"""

from __future__ import annotations

import json

from kernelgen.backends.cpp import entry_declaration
from kernelgen.codegen import cpp_expr
from kernelgen.ir.space import Constraint, Param, SearchSpace
from kernelgen.ir.target import Target
from kernelgen.ir.values import Config, FrozenMap, Source
from kernelgen.templates.attention import AttentionProblem
from kernelgen.templates.indexing import dynamic_meta, dynamic_source

BLOCK_M_CHOICES = (8, 16, 24, 32, 48, 64, 96, 128)
BLOCK_N_CHOICES = (16, 32, 64, 128, 256, 512)
MR_CHOICES = (1, 2, 3, 4, 6, 8, 12)
NR_CHOICES = (8, 16, 24, 32, 48, 64)
# Preferred defaults, best first; the first one the target's constraints accept is the space's default.
_DEFAULTS = (
    # AVX-512 (16 fp32 lanes): 8 keys (queries in P.V) x 2 zmm, 16 accumulators; side by side on a 2-core
    # Xeon at b2 h16 s1024 d64 it ran 150 ms against 198 ms for 4x32 and 336 ms for the AVX2 4x16 tile.
    {"BLOCK_M": 64, "BLOCK_N": 128, "MR": 8, "NR": 32},
    # AVX2 (8 fp32 lanes), or AVX-512 in fp64: 6x2 vectors, 15 of 16 ymm; with AVX2 vectors on the same
    # Xeon (1 thread, b1 h4 s1024 d64) it ran x1.05-1.11 against 4x16 and x1.15 against 8x8.
    {"BLOCK_M": 48, "BLOCK_N": 128, "MR": 6, "NR": 16},
    {"BLOCK_M": 64, "BLOCK_N": 128, "MR": 4, "NR": 16},
    {"BLOCK_M": 32, "BLOCK_N": 64, "MR": 4, "NR": 16},
    {"BLOCK_M": 16, "BLOCK_N": 32, "MR": 4, "NR": 16},
    {"BLOCK_M": 16, "BLOCK_N": 32, "MR": 4, "NR": 8},
)


def vector_isa(target: Target) -> tuple[int, int]:
    """(bytes per vector, vector registers) of the micro-tiles: zmm x 32 with AVX-512, ymm x 16 otherwise."""
    return (64, 32) if "avx512f" in target.features else (32, 16)


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def _working_set(problem: AttentionProblem, c: Config, acc: int, lanes: int) -> int:
    """Bytes of one task's blocks: Q, K, V, scores and the output accumulator."""
    bm, bn, d, dv = c["BLOCK_M"], c["BLOCK_N"], problem.head_dim, _round_up(problem.v_dim, lanes)
    return acc * (bm * d + (bn + 2 * c["MR"]) * d + bn * dv + (bn + c["MR"]) * bm + bm * dv)


def space(problem: AttentionProblem, target: Target) -> SearchSpace:
    """Block sizes and micro-tile shape, with the register file and L2 capacity of ``target`` as limits."""
    acc = 8 if problem.q.dtype == "float64" else 4
    vector_bytes, registers = vector_isa(target)
    lanes = vector_bytes // acc
    l2 = int(target.caches.get("l2") or 256 * 1024)
    constraints = [
        Constraint(f"NR is a multiple of the vector length ({lanes})", lambda c: c["NR"] % lanes == 0),
        Constraint(f"MR*NR/{lanes} accumulators + NR/{lanes} B vectors + 1 broadcast fit in "
                   f"{registers} vector registers",
                   lambda c: c["MR"] * c["NR"] // lanes + c["NR"] // lanes + 1 <= registers),
        Constraint("BLOCK_M is a multiple of MR and of NR (queries are both tile rows and tile columns)",
                   lambda c: c["BLOCK_M"] % c["MR"] == 0 and c["BLOCK_M"] % c["NR"] == 0),
    ]
    smallest_bm = next(bm for bm in BLOCK_M_CHOICES if bm % lanes == 0)  # BLOCK_M holds whole vectors
    smallest = Config({"BLOCK_M": smallest_bm, "BLOCK_N": BLOCK_N_CHOICES[0], "MR": 1, "NR": lanes})
    if _working_set(problem, smallest, acc, lanes) <= l2 // 2:  # huge head dims fit no block: then do not prune
        constraints.append(Constraint(f"one task's Q, K, V, score and output blocks fit in half of L2 ({l2} B)",
                                      lambda c: _working_set(problem, c, acc, lanes) <= l2 // 2))
    params = [Param("BLOCK_M", BLOCK_M_CHOICES), Param("BLOCK_N", BLOCK_N_CHOICES), Param("MR", MR_CHOICES),
              Param("NR", NR_CHOICES)]
    probe = SearchSpace(params, constraints)
    default = next((d for d in map(_fit_block_m(problem.q_len), _DEFAULTS) if probe.is_valid(Config(d))), None)
    return SearchSpace(params, constraints, default)


def _fit_block_m(q_len: int):
    """Shrink a default's BLOCK_M to the fewest queries covering ``q_len``: query blocks are vector lanes."""
    def fit(d: dict) -> dict:
        fitting = [bm for bm in BLOCK_M_CHOICES if bm >= q_len and bm % d["MR"] == 0 and bm % d["NR"] == 0]
        return {**d, "BLOCK_M": min(d["BLOCK_M"], *fitting)} if fitting else d
    return fit


_KERNEL = r"""
typedef acc_t vacc __attribute__((vector_size(VBYTES)));
typedef acc_t vacc_u __attribute__((vector_size(VBYTES), aligned(sizeof(acc_t))));  // unaligned loads/stores
static constexpr int VL = VBYTES / (int)sizeof(acc_t);
static constexpr int64_t DVP = (DV + VL - 1) / VL * VL;  // output rows padded to whole vectors
// fp32 K and V rows with unit stride are read in place; anything else is converted into a block buffer.
static constexpr bool K_DIRECT = K_NATIVE && K_SD == 1;
static constexpr bool V_DIRECT = V_NATIVE && V_SD == 1 && DV % VL == 0;

// e^x for the softmax's x <= 0 on a whole vector, inline (no libmvec call, no special-case handling):
// x = n ln2 + t with |t| <= ln2/2, e^t by a Taylor polynomial (degree 6 for float, 11 for double, both below
// the type's rounding error there), 2^n through the exponent bits. Where 2^n would be subnormal (x below
// about -87 in float, -708 in double) the result is 0, which is what masked scores need.
static inline vacc vexp(vacc x) {
  constexpr bool F32 = sizeof(acc_t) == 4;
  typedef std::conditional_t<F32, int32_t, int64_t> ibits;
  typedef ibits vint __attribute__((vector_size(VBYTES)));
  const acc_t lo = F32 ? acc_t(-87.0) : acc_t(-708.0);
  const vacc xc = x < lo ? vacc{} + lo : x;
  // n = round(x / ln2): truncation of a negative number minus one half rounds to nearest
  const vint ni = __builtin_convertvector(xc * acc_t(1.4426950408889634) - acc_t(0.5), vint);
  const vacc n = __builtin_convertvector(ni, vacc);
  // ln2 split in two: n * LN2_HI is exact, so t keeps its low bits (written as two steps; -ffp-contract may
  // fuse them into FMAs, which only helps)
  const vacc t = (xc - n * acc_t(F32 ? 0.693145751953125 : 0.6931471803691238)) -
                 n * acc_t(F32 ? 1.428606765330187e-06 : 1.9082149292705877e-10);
  constexpr int DEG = F32 ? 6 : 11;
  acc_t inv_fact[DEG + 1] = {1};
  for (int i = 1; i <= DEG; ++i) inv_fact[i] = inv_fact[i - 1] / acc_t(i);  // folded by the compiler
  vacc p = vacc{} + inv_fact[DEG];
#pragma GCC unroll 16
  for (int i = DEG - 1; i >= 0; --i) p = p * t + inv_fact[i];
  const vint bits = (ni + (F32 ? 127 : 1023)) << (F32 ? 23 : 52);
  const vacc r = p * (vacc)bits;
  return x < lo ? vacc{} : r;
}

// What the micro-tile does with its sums: store them; store them and fold their column maxima into `vec`
// (rows past `nrows` are padding and excluded); the same with the causal mask applied first (score of key
// row r in column j masked when j < off + r); or add them to c after scaling c's row r by vec[r]. With
// MASKED, the stored scores first get the additive mask `mk` (laid out as c) added.
enum Epilogue { STORE_MAX, STORE_MAX_CAUSAL, ACCUMULATE_SCALED };

// c[RB][CB] (+)= sum_k a[r * lda + k * ldk] * b[k * ldb + j]: the register micro-tile of both products.
template <int RB, int CB, Epilogue EPI, bool MASKED = false>
static inline void tile(int64_t kd, const acc_t* __restrict a, int64_t lda, int64_t ldk, const acc_t* __restrict b,
                        int64_t ldb, acc_t* __restrict c, int64_t ldc, acc_t* __restrict vec, int64_t nrows = RB,
                        int64_t off = 0, const acc_t* __restrict mk = nullptr) {
  constexpr int NV = CB / VL;
  vacc s[RB][NV];
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j)
      s[r][j] = EPI == ACCUMULATE_SCALED ? (vacc)*(const vacc_u*)(c + r * ldc + j * VL) * vec[r] : vacc{};
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
  if constexpr (EPI == ACCUMULATE_SCALED) {
#pragma GCC unroll 16
    for (int r = 0; r < RB; ++r)
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) *(vacc_u*)(c + r * ldc + j * VL) = s[r][j];
  } else {
    vacc lane;
    for (int l = 0; l < VL; ++l) lane[l] = acc_t(l);
    vacc m[NV];
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) m[j] = *(const vacc_u*)(vec + j * VL);
#pragma GCC unroll 16
    for (int r = 0; r < RB; ++r) {
#pragma GCC unroll 16
      for (int j = 0; j < NV; ++j) {
        vacc x = s[r][j];
        if constexpr (MASKED) x += *(const vacc_u*)(mk + r * ldc + j * VL);
        if (EPI == STORE_MAX_CAUSAL) x = lane + acc_t(j * VL) < acc_t(off + r) ? vacc{} + NEG_BIG : x;
        *(vacc_u*)(c + r * ldc + j * VL) = x;
        if (r < nrows) m[j] = x > m[j] ? x : m[j];
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < NV; ++j) *(vacc_u*)(vec + j * VL) = m[j];
  }
}

struct Scratch {
  acc_t* ptr = nullptr;
  ~Scratch() { std::free(ptr); }
};

// Scores are kept transposed, S^T[key][query], so the online softmax runs along contiguous queries (vector
// lanes) and K rows serve directly as the broadcast operand of Q.K^T: no per-block transpose of K.
static void attend_block(void* const* ptrs, int64_t b, int64_t h, int64_t i0, acc_t* __restrict buf) {
  const q_t* q = (const q_t*)ptrs[Q_ARG] + b * Q_SB + h * Q_SH;
  const k_t* k = (const k_t*)ptrs[K_ARG] + b * K_SB + (h / GROUP) * K_SH;
  const v_t* v = (const v_t*)ptrs[V_ARG] + b * V_SB + (h / GROUP) * V_SH;
  out_t* o = (out_t*)ptrs[OUT_ARG] + ((b * H + h) * LQ) * DV;
  acc_t* __restrict qt = buf;                 // [D][BM]: Q block transposed and pre-scaled
  acc_t* __restrict kb = qt + D * BM;         // [BN + MR][D]: converted K block
  acc_t* __restrict pad = kb + (BN + MR) * D; // [MR][D]: a ragged last group of K rows, zero padded
  acc_t* __restrict vb = pad + MR * D;        // [BN][DVP]: converted V block
  acc_t* __restrict st = vb + BN * DVP;       // [BN + MR][BM]: scores, then probabilities
  acc_t* __restrict ob = st + (BN + MR) * BM; // [BM][DVP]: output accumulator
  acc_t* __restrict mx = ob + BM * DVP;       // [BM] running max
  acc_t* __restrict sum = mx + BM;            // [BM] running sum
  acc_t* __restrict alpha = sum + BM;         // [BM] this block's max, then the rescale factor
  acc_t* __restrict part = alpha + BM;        // [BM] this block's probability sums
  acc_t* __restrict mb = part + BM;           // [BN + MR][BM]: the mask block, transposed as the scores
  const int64_t rows = std::min<int64_t>(BM, LQ - i0);
  for (int64_t r = 0; r < BM; ++r) {
    const q_t* src = q + (i0 + std::min<int64_t>(r, rows - 1)) * Q_SS;
    for (int64_t d = 0; d < D; ++d) qt[d * BM + r] = r < rows ? LOAD_Q(src[d * Q_SD]) * SCALE : acc_t(0);
    for (int64_t d = 0; d < DVP; ++d) ob[r * DVP + d] = 0;
    mx[r] = NEG_BIG;
    sum[r] = 0;
  }
  // Causal: the block's last query sees keys up to its own index, so later key blocks are skipped.
  const int64_t kv_end = CAUSAL ? std::min<int64_t>(LK, i0 + rows) : LK;
  for (int64_t j0 = 0; j0 < kv_end; j0 += BN) {
    const int64_t kc = std::min<int64_t>(BN, kv_end - j0);
    if constexpr (HAS_MASK) {  // S^T's layout; a bool mask is 0 or -inf; the ragged tail's slack rows get 0
      const m_t* mrow = (const m_t*)ptrs[M_ARG] + b * M_SB + h * M_SH + j0 * M_SK;
      for (int64_t j = 0; j < kc; ++j)
        for (int64_t r = 0; r < BM; ++r) mb[j * BM + r] = LOAD_M(mrow[(i0 + std::min<int64_t>(r, rows - 1)) * M_SQ + j * M_SK]);
      for (int64_t j = kc; j < kc + MR; ++j)
        for (int64_t r = 0; r < BM; ++r) mb[j * BM + r] = 0;
    }
    const acc_t* krows;
    int64_t lda;
    if (K_DIRECT) {
      krows = (const acc_t*)(const void*)(k + j0 * K_SS);
      lda = K_SS;
    } else {
      for (int64_t j = 0; j < kc; ++j)
        for (int64_t d = 0; d < D; ++d) kb[j * D + d] = LOAD_K(k[(j0 + j) * K_SS + d * K_SD]);
      krows = kb;
      lda = D;
    }
    const acc_t* vrows;
    int64_t ldv;
    if (V_DIRECT) {
      vrows = (const acc_t*)(const void*)(v + j0 * V_SS);
      ldv = V_SS;
    } else {
      for (int64_t j = 0; j < kc; ++j) {
        for (int64_t d = 0; d < DV; ++d) vb[j * DVP + d] = LOAD_V(v[(j0 + j) * V_SS + d * V_SD]);
        for (int64_t d = DV; d < DVP; ++d) vb[j * DVP + d] = 0;
      }
      vrows = vb;
      ldv = DVP;
    }
    // S^T = K Q^T, MR keys by NR queries at a time, folding each query's block max into alpha as the tiles
    // are stored. Keys later than a query (causal) are masked in the tile; a ragged last group of keys goes
    // through zeroed rows whose scores land in st's slack rows, never read and kept out of the max.
    for (int64_t r = 0; r < BM; ++r) alpha[r] = mx[r];
    for (int64_t j = 0; j < kc; j += MR) {
      const acc_t* rows_k = krows + j * lda;
      int64_t ld = lda;
      if (j + MR > kc) {
        for (int64_t r = 0; r < MR; ++r)
          for (int64_t d = 0; d < D; ++d) pad[r * D + d] = j + r < kc ? krows[(j + r) * lda + d] : acc_t(0);
        rows_k = pad;
        ld = D;
      }
      const int64_t nrows = std::min<int64_t>(MR, kc - j);
      for (int64_t c = 0; c < BM; c += NR) {
        const int64_t off = j0 + j - (i0 + c);  // key row r is masked in columns < off + r
        if (CAUSAL && off + MR - 1 > 0)
          tile<MR, NR, STORE_MAX_CAUSAL, HAS_MASK>(D, rows_k, ld, 1, qt + c, BM, st + j * BM + c, BM, alpha + c, nrows,
                                                   off, mb + j * BM + c);
        else
          tile<MR, NR, STORE_MAX, HAS_MASK>(D, rows_k, ld, 1, qt + c, BM, st + j * BM + c, BM, alpha + c, nrows, 0,
                                            mb + j * BM + c);
      }
    }
    // Online softmax along keys, one vector of queries at a time: its max, running sum and block sum stay
    // in registers while it walks the block's scores (a column of S^T), turning them into probabilities.
    for (int64_t c = 0; c < BM; c += VL) {
      const vacc m_old = *(const vacc_u*)(mx + c), m_new = *(const vacc_u*)(alpha + c);
      // a query with no visible key yet has max -inf: subtract 0 instead, so its scores give e^-inf = 0
      const vacc m = m_new == vacc{} + NEG_BIG ? vacc{} : m_new;
      const vacc a = vexp(m_old - m);
      vacc p0 = vacc{}, p1 = vacc{};
      int64_t jj = 0;
      for (; jj + 2 <= kc; jj += 2) {  // two sums: the adds' latency does not serialise the walk
        acc_t* __restrict s0 = st + jj * BM + c;
        const vacc e0 = vexp(*(const vacc_u*)s0 - m), e1 = vexp(*(const vacc_u*)(s0 + BM) - m);
        *(vacc_u*)s0 = e0;
        *(vacc_u*)(s0 + BM) = e1;
        p0 += e0;
        p1 += e1;
      }
      if (jj < kc) {
        acc_t* __restrict s0 = st + jj * BM + c;
        const vacc e0 = vexp(*(const vacc_u*)s0 - m);
        *(vacc_u*)s0 = e0;
        p0 += e0;
      }
      *(vacc_u*)(sum + c) = *(const vacc_u*)(sum + c) * a + (p0 + p1);
      *(vacc_u*)(mx + c) = m_new;
      *(vacc_u*)(alpha + c) = a;
    }
    // O = diag(alpha) O + P^T V, MR queries by NR value columns at a time; the rescale rides on the tile's loads.
    for (int64_t r = 0; r < BM; r += MR) {
      int64_t c = 0;
      for (; c + NR <= DVP; c += NR)
        tile<MR, NR, ACCUMULATE_SCALED>(kc, st + r, 1, BM, vrows + c, ldv, ob + r * DVP + c, DVP, alpha + r);
      for (; c < DVP; c += VL)
        tile<MR, VL, ACCUMULATE_SCALED>(kc, st + r, 1, BM, vrows + c, ldv, ob + r * DVP + c, DVP, alpha + r);
    }
  }
  // A query whose keys are all hidden sums to 0: its output and logsumexp are 0, as in ATen's CPU kernel.
  for (int64_t r = 0; r < rows; ++r) {
    const acc_t inv = sum[r] > 0 ? acc_t(1) / sum[r] : acc_t(0);
    out_t* dst = o + (i0 + r) * DV;
    const acc_t* __restrict src = ob + r * DVP;
    for (int64_t d = 0; d < DV; ++d) dst[d] = STORE_OUT(src[d] * inv);
  }
  if constexpr (HAS_LSE) {
    acc_t* lse = (acc_t*)ptrs[LSE_ARG] + (b * H + h) * LQ + i0;
    for (int64_t r = 0; r < rows; ++r) lse[r] = sum[r] > 0 ? mx[r] + std::log(sum[r]) : acc_t(0);
  }
}

@ENTRY_HEAD@
  constexpr int64_t NQB = (LQ + BM - 1) / BM;
  const int64_t TASKS = B * H * NQB;
  constexpr int64_t BUF = D * BM + (BN + 2 * MR) * D + BN * DVP + (BN + MR) * BM + BM * DVP + 4 * BM +
                          (HAS_MASK ? (BN + MR) * BM : 0);
  if (TASKS == 0) return;
  int nt = num_threads < 1 ? 1 : int(num_threads);
  if (double(B * H) * double(LQ) * double(LK) * double(D + DV) < 131072.0) nt = 1;  // not worth the pool
#pragma omp parallel num_threads(nt)
  {
    static thread_local Scratch scratch;
    if (scratch.ptr == nullptr)  // BUF is fixed for this library: allocate once per thread
      scratch.ptr = (acc_t*)std::aligned_alloc(64, (sizeof(acc_t) * BUF + 63) / 64 * 64);
    // Dynamic: causal blocks differ in cost; the costliest (last query blocks) are handed out first.
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < TASKS; ++t) {
      const int64_t qb = NQB - 1 - t % NQB, bh = t / NQB;
      attend_block(ptrs, bh / H, bh % H, qb * BM, scratch.ptr);
    }
  }
}
"""


def render(problem: AttentionProblem, config: Config, target: Target) -> Source:
    """C++ source of the attention kernel for ``config``; raises ``ValueError`` for a config the space rejects."""
    problems = space(problem, target).violations(config)
    if problems:
        raise ValueError(f"attention config {dict(config)} is invalid: {'; '.join(problems)}")
    graph = problem.graph
    p = problem
    acc = "double" if p.q.dtype == "float64" else "float"
    acc_name = "float64" if acc == "double" else "float32"
    consts = {
        "B": p.batch, "H": p.heads, "LQ": p.q_len, "LK": p.kv_len, "D": p.head_dim, "DV": p.v_dim,
        "BM": config["BLOCK_M"], "BN": config["BLOCK_N"], "MR": config["MR"], "NR": config["NR"],
        "Q_ARG": p.q.arg, "K_ARG": p.k.arg, "V_ARG": p.v.arg, "OUT_ARG": p.output_arg("out"),
        "LSE_ARG": p.output_arg("lse") or 0, "M_ARG": p.mask.arg if p.mask else 0, "GROUP": p.group,
    }
    for name, operand in (("Q", p.q), ("K", p.k), ("V", p.v)):
        consts.update({f"{name}_S{axis}": stride for axis, stride in zip("BHSD", operand.strides)})
    # the mask's strides over (batch, head, query, key); 0 where it is broadcast (all 0 without a mask)
    consts.update({f"M_S{axis}": stride for axis, stride in zip("BHQK", p.mask.strides if p.mask else (0,) * 4)})
    # Shape-generic: the batch B is the run-time n0 (only the task count reads it); the rest stays static.
    dyn = dynamic_source(graph, (p.batch, p.heads, p.q_len))
    if dyn is not None:
        del consts["B"]
    head = entry_declaration("kg_attention", dyn is not None) + ("\n  const int64_t B = n0;" if dyn is not None else "")
    header = [
        "#include <cstdlib>", "#include <cmath>", "#include <algorithm>", "#include <type_traits>",
        f"typedef {acc} acc_t;",
        *(f"typedef {cpp_expr.storage_type(op.dtype)} {name}_t;" for name, op in (("q", p.q), ("k", p.k), ("v", p.v))),
        f"typedef {cpp_expr.storage_type(p.out_dtype)} out_t;",
        f"typedef {cpp_expr.storage_type(p.mask.dtype) if p.mask else acc} m_t;",
        *(f"static constexpr int64_t {name} = {value};" for name, value in consts.items()),
        f"static constexpr int VBYTES = {vector_isa(target)[0]};",
        f"static constexpr bool CAUSAL = {'true' if p.causal else 'false'};",
        f"static constexpr bool HAS_MASK = {'true' if p.mask else 'false'};",
        f"static constexpr bool HAS_LSE = {'true' if 'lse' in p.outputs else 'false'};",
        *(f"static constexpr bool {name}_NATIVE = {'true' if op.dtype == ('float64' if acc == 'double' else 'float32') else 'false'};"
          for name, op in (("K", p.k), ("V", p.v))),
        f"static constexpr acc_t SCALE = {p.scale!r};",
        "static constexpr acc_t NEG_BIG = -__builtin_huge_val();  // masked scores (compiled with infinities on)",
        *(f"#define LOAD_{name}(x) ((acc_t){cpp_expr.load(op.dtype, '(x)')})"
          for name, op in (("Q", p.q), ("K", p.k), ("V", p.v))),
        f"#define STORE_OUT(x) ({cpp_expr.convert(p.out_dtype, '(x)')})",
        "#define LOAD_M(x) (" + ("(x) ? acc_t(0) : NEG_BIG)" if p.mask and p.mask.dtype == "bool" else
                              f"(acc_t){cpp_expr.load(p.mask.dtype if p.mask else acc_name, '(x)')})"),
    ]
    entry = "kg_attention"
    text = "\n".join([cpp_expr.PRELUDE, *header, _KERNEL.replace("@ENTRY_HEAD@", head)])
    signature = [spec.to_json() for spec in (*graph.signature, *graph.output_specs)]
    return Source("cpp", text, entry, (), FrozenMap(signature=json.dumps(signature), **dynamic_meta(graph, dyn)))


__all__ = ["render", "space", "vector_isa"]
