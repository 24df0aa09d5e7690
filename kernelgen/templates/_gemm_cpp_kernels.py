"""C++ text of the CPU GEMM: dtype helpers, packing, the register micro-kernels and the blocked driver.

``gemm_cpp.render`` fills the ``@NAME@`` placeholders with the problem's constants; everything here is
problem-independent so a change of this file is a change of ``source_hash``.
"""

from __future__ import annotations

# Scalar conversions used while packing operands and storing results (fp32/fp64 accumulate).
PRELUDE = r"""
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <algorithm>
#include <omp.h>

namespace kg {
static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A growable, 64-byte aligned scratch buffer; one per thread, kept between calls.
struct Scratch {
  void* ptr = nullptr; size_t size = 0;
  void* get(size_t bytes) {
    if (bytes > size) {
      std::free(ptr);
      size = (bytes + 63) / 64 * 64;
      ptr = std::aligned_alloc(64, size);
    }
    return ptr;
  }
  ~Scratch() { std::free(ptr); }
};
}  // namespace kg
"""

# Packing of A into MR-row panels and of B into NR-column panels, [k][r] inside a panel, zero padded.
PACKING = r"""
// Pack A[m0:m0+mc, k0:k0+kc] as ceil(mc/MR) panels of kc x MR values.
static void pack_a(const a_t* __restrict A, int64_t m0, int64_t mc, int64_t k0, int64_t kc, acc_t* __restrict out) {
  for (int64_t p = 0; p < mc; p += MR) {
    const int64_t rows = std::min<int64_t>(MR, mc - p);
    acc_t* __restrict dst = out + p * kc;
    if (A_SK == 1) {  // row-major A: read rows contiguously
      for (int64_t r = 0; r < rows; ++r) {
        const a_t* src = A + (m0 + p + r) * A_SM + k0;
        for (int64_t k = 0; k < kc; ++k) dst[k * MR + r] = load_a(src[k]);
      }
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        const a_t* src = A + (m0 + p) * A_SM + (k0 + k) * A_SK;
        for (int64_t r = 0; r < rows; ++r) dst[k * MR + r] = load_a(src[r * A_SM]);
      }
    }
    for (int64_t r = rows; r < MR; ++r)
      for (int64_t k = 0; k < kc; ++k) dst[k * MR + r] = acc_t(0);
  }
}

// Pack the NR-column panel starting at column n0 (panel index p of the block) of B[k0:k0+kc, :].
static void pack_b_panel(const b_t* __restrict B, int64_t k0, int64_t kc, int64_t n0, int64_t cols, acc_t* __restrict dst) {
  if (B_SN == 1 || B_SK != 1) {  // row-major B (or neither stride unit): copy NR-wide rows
    for (int64_t k = 0; k < kc; ++k) {
      const b_t* src = B + (k0 + k) * B_SK + n0 * B_SN;
      acc_t* d = dst + k * NR;
      if (cols == NR) {
        for (int64_t c = 0; c < NR; ++c) d[c] = load_b(src[c * B_SN]);
      } else {
        for (int64_t c = 0; c < cols; ++c) d[c] = load_b(src[c * B_SN]);
        for (int64_t c = cols; c < NR; ++c) d[c] = acc_t(0);
      }
    }
  } else {  // transposed B (e.g. F.linear weights): read columns contiguously
    for (int64_t c = 0; c < cols; ++c) {
      const b_t* src = B + (n0 + c) * B_SN + k0;
      for (int64_t k = 0; k < kc; ++k) dst[k * NR + c] = load_b(src[k]);
    }
    for (int64_t c = cols; c < NR; ++c)
      for (int64_t k = 0; k < kc; ++k) dst[k * NR + c] = acc_t(0);
  }
}
"""

# The MR x NR register tile: t[MR][NR] = sum_k a[k][:] (outer) b[k][:]. GCC vector extensions instead of
# intrinsics: the same code is AVX2 or AVX-512 FMA on x86 (64-byte vectors where the target has zmm;
# -ffp-contract=fast contracts c += a * b into vfmadd), NEON elsewhere, serves float64 too, and spares every
# compile the 0.6 s <immintrin.h> costs.
MICROKERNEL = r"""
typedef acc_t vacc __attribute__((vector_size(@VECTOR_BYTES@)));
static constexpr int VL = @VECTOR_BYTES@ / (int)sizeof(acc_t);
static_assert(NR % VL == 0, "NR must be a multiple of the vector length");

static inline void micro_tile(int64_t kc, const acc_t* __restrict a, const acc_t* __restrict b, acc_t* __restrict t) {
  constexpr int NV = NR / VL;
  vacc c[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) c[i][j] = vacc{};
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    vacc bv[NV];
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) bv[j] = *(const vacc*)(b + j * VL);  // packed panels are 64-byte aligned
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const vacc av = vacc{} + a[i];
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) c[i][j] += av * bv[j];
    }
    a += MR;
    b += NR;
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) *(vacc*)(t + i * NR + j * VL) = c[i][j];
}
"""

# Blocked driver: jc -> pc -> ic -> jr -> ir (BLIS order). Partial sums over K blocks live in W (the
# output itself when it has the accumulator's dtype); the epilogue runs when the last K block lands.
DRIVER = r"""
// Write the valid mr x nr part of a computed micro tile at (m0, n0): store the first K block's partial sums,
// add later ones, and after the last one run the epilogue into the output.
__attribute__((always_inline)) static inline void write_rows(const Ctx& cx, const acc_t* __restrict t, int64_t m0, int64_t mr, int64_t n0,
                              int64_t nr, bool first, bool last) {
  alignas(64) acc_t row[NR];
  for (int64_t i = 0; i < mr; ++i) {
    const int64_t m = m0 + i;
    const acc_t* __restrict ti = t + i * NR;
    acc_t* __restrict w = cx.W + m * N + n0;
    if (last) {
      if (first) {
        for (int64_t j = 0; j < nr; ++j) row[j] = ti[j];
      } else {
        for (int64_t j = 0; j < nr; ++j) row[j] = w[j] + ti[j];
      }
      finish_row(cx, row, m, n0, nr, cx.C + cx.off.c + m * N + n0);
    } else if (first) {
      for (int64_t j = 0; j < nr; ++j) w[j] = ti[j];
    } else {
      for (int64_t j = 0; j < nr; ++j) w[j] += ti[j];
    }
  }
}

static inline void write_tile(const Ctx& cx, const acc_t* __restrict t, int64_t m0, int64_t mr, int64_t n0,
                              int64_t nr, bool first, bool last) {
  if (mr == MR && nr == NR) {  // full tile: constant trip counts let gcc unroll and vectorise exactly
    write_rows(cx, t, m0, MR, n0, NR, first, last);
  } else {
    write_rows(cx, t, m0, mr, n0, nr, first, last);
  }
}

// Multiply the packed A block (mc rows at m0) by packed B panels [p0, p1) of the block at column jc.
static inline void macro_kernel(const Ctx& cx, const acc_t* __restrict ap, const acc_t* __restrict bp, int64_t m0,
                                int64_t mc, int64_t jc, int64_t nc, int64_t p0, int64_t p1, int64_t kc,
                                bool first, bool last) {
  alignas(64) acc_t t[MR * NR];
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t n0 = jc + p * NR, nr = std::min<int64_t>(NR, nc - p * NR);
    for (int64_t ir = 0; ir < mc; ir += MR) {
      if (!first) {  // the partial sums in W come from memory: start fetching them before the FMAs
        for (int64_t i = 0; i < std::min<int64_t>(MR, mc - ir); ++i)
          for (int64_t j = 0; j < nr; j += 64 / (int64_t)sizeof(acc_t))
            __builtin_prefetch(cx.W + (m0 + ir + i) * N + n0 + j, 1, 3);
      }
      micro_tile(kc, ap + ir * kc, bp + p * kc * NR, t);
      write_tile(cx, t, m0 + ir, std::min<int64_t>(MR, mc - ir), n0, nr, first, last);
    }
  }
}

static kg::Scratch& scratch_a() { static thread_local kg::Scratch s; return s; }
static kg::Scratch& scratch_b() { static thread_local kg::Scratch s; return s; }

static constexpr int64_t KC_ = (K < KC ? (K > 0 ? K : 1) : KC);
static constexpr int64_t K_ITERS = (K == 0 ? 1 : (K + KC - 1) / KC);

// One whole GEMM on the calling thread (batch-parallel mode and single-threaded calls).
static void gemm_serial(const Ctx& cx) {
  acc_t* ap = (acc_t*)scratch_a().get(sizeof(acc_t) * std::min<int64_t>(MC, kg::cdiv(M, MR) * MR) * KC_);
  acc_t* bp = (acc_t*)scratch_b().get(sizeof(acc_t) * std::min<int64_t>(NC, kg::cdiv(N, NR) * NR) * KC_);
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min<int64_t>(NC, N - jc), np = kg::cdiv(nc, NR);
    for (int64_t it = 0; it < K_ITERS; ++it) {
      const int64_t pc = it * KC, kc = std::min<int64_t>(KC, K - pc);
      for (int64_t p = 0; p < np; ++p)
        pack_b_panel(cx.B + cx.off.b, pc, kc, jc + p * NR, std::min<int64_t>(NR, nc - p * NR), bp + p * kc * NR);
      for (int64_t ic = 0; ic < M; ic += MC) {
        const int64_t mc = std::min<int64_t>(MC, M - ic);
        pack_a(cx.A + cx.off.a, ic, mc, pc, kc, ap);
        macro_kernel(cx, ap, bp, ic, mc, jc, nc, 0, np, kc, it == 0, it == K_ITERS - 1);
      }
    }
  }
}

// One GEMM shared by the threads of the enclosing parallel region (every thread must call it): B panels
// are packed together, then the threads, arranged as a tm x tn grid, each take an equal share of rows
// (in MR units) and of column panels, so a ragged last MC block does not leave a thread idle.
static void gemm_coop(const Ctx& cx, acc_t* bp, int nt) {
  acc_t* ap = (acc_t*)scratch_a().get(sizeof(acc_t) * std::min<int64_t>(MC, kg::cdiv(M, MR) * MR) * KC_);
  const int tid = omp_get_thread_num();
  const int64_t ru = kg::cdiv(M, MR);
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min<int64_t>(NC, N - jc), np = kg::cdiv(nc, NR);
    // The grid whose busiest thread has the least work (ties: more row ways, which share packed B).
    int tm = nt;
    double best = -1;
    for (int d = nt; d >= 1; --d) {
      if (nt % d) continue;
      const double work = double(kg::cdiv(ru, d) * MR) * double(kg::cdiv(np, nt / d) * NR);
      if (best < 0 || work < best) { best = work; tm = d; }
    }
    const int tn = nt / tm, ti = tid / tn, tj = tid % tn;
    const int64_t r0 = ru * ti / tm * MR, r1 = std::min<int64_t>(M, ru * (ti + 1) / tm * MR);
    const int64_t p0 = np * tj / tn, p1 = np * (tj + 1) / tn;
    // Dynamic mode: (row block, column chunk) tasks handed out as threads free up, which keeps a busy
    // machine from stalling everyone on a descheduled thread; enough tasks for 8 per thread.
    const int64_t mb = kg::cdiv(M, MC);
    int64_t js = 1;
    while (mb * js < 8 * nt && js < np) ++js;
    for (int64_t it = 0; it < K_ITERS; ++it) {
      const int64_t pc = it * KC, kc = std::min<int64_t>(KC, K - pc);
#pragma omp for schedule(static)
      for (int64_t p = 0; p < np; ++p)
        pack_b_panel(cx.B + cx.off.b, pc, kc, jc + p * NR, std::min<int64_t>(NR, nc - p * NR), bp + p * kc * NR);
      if (DYNAMIC) {
        int64_t packed = -1;
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < mb * js; ++task) {
          const int64_t ib = task / js, jb = task % js, ic = ib * MC, mc = std::min<int64_t>(MC, M - ic);
          if (packed != ib) { pack_a(cx.A + cx.off.a, ic, mc, pc, kc, ap); packed = ib; }
          macro_kernel(cx, ap, bp, ic, mc, jc, nc, np * jb / js, np * (jb + 1) / js, kc, it == 0, it == K_ITERS - 1);
        }
        continue;  // the loop's implicit barrier protects bp
      }
      if (p0 < p1) {
        for (int64_t ic = r0; ic < r1; ic += MC) {
          const int64_t mc = std::min<int64_t>(MC, r1 - ic);
          pack_a(cx.A + cx.off.a, ic, mc, pc, kc, ap);
          macro_kernel(cx, ap, bp, ic, mc, jc, nc, p0, p1, kc, it == 0, it == K_ITERS - 1);
        }
      }
#pragma omp barrier
    }
  }
}

@ENTRY_HEAD@
  if (M == 0 || N == 0 || NBATCH == 0) return;
  int nt = num_threads < 1 ? 1 : int(num_threads);
  // Small problems are not worth waking the thread pool.
  if (double(M) * double(N) * double(K > 0 ? K : 1) * double(NBATCH) < 65536.0) nt = 1;
  const a_t* A = (const a_t*)ptrs[A_ARG];
  const b_t* B = (const b_t*)ptrs[B_ARG];
  out_t* C = (out_t*)ptrs[OUT_ARG];
  const bool batch_parallel = nt > 1 && NBATCH >= nt && (NBATCH >= 4 * nt || NBATCH % nt == 0);
  // Partial sums need an accumulator-typed buffer unless the output itself is one.
  const bool own_w = !OUT_IS_ACC && K_ITERS > 1;
  // Buffers shared by the team live in the calling thread's scratch, kept between calls: a fresh
  // allocation per call costs page faults comparable to a medium GEMM.
  static thread_local kg::Scratch shared_w, shared_b;
  const int64_t w_count = own_w ? M * N * (batch_parallel ? nt : 1) : 0;
  acc_t* wbuf = own_w ? (acc_t*)shared_w.get(sizeof(acc_t) * w_count) : nullptr;
  auto make_ctx = [&](int64_t bi, acc_t* w) {
    Ctx cx{A, B, C, w, batch_offsets(bi), bi, ptrs, M};
    if (!own_w) cx.W = (acc_t*)(void*)(C + cx.off.c);
    return cx;
  };
  if (nt == 1) {
    for (int64_t bi = 0; bi < NBATCH; ++bi) gemm_serial(make_ctx(bi, wbuf));
  } else if (batch_parallel) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t bi = 0; bi < NBATCH; ++bi)
      gemm_serial(make_ctx(bi, own_w ? wbuf + M * N * omp_get_thread_num() : nullptr));
  } else {
    acc_t* bp = (acc_t*)shared_b.get(sizeof(acc_t) * std::min<int64_t>(NC, kg::cdiv(N, NR) * NR) * KC_);
#pragma omp parallel num_threads(nt)
    for (int64_t bi = 0; bi < NBATCH; ++bi) gemm_coop(make_ctx(bi, wbuf), bp, nt);
  }
}
"""
