// RMSNorm over the last dimension for the CPU: y = x * rsqrt(mean(x^2) + eps) * w (float32, contiguous).
// One row per iteration, OpenMP over rows; LANES independent partial sums (a compile-time param) hide
// the FMA latency of the sum of squares, which a single vector accumulator would be bound by.
#include <cmath>
#include <cstdint>

#ifndef LANES
#define LANES 32
#endif

extern "C" void kernelgen_rms_norm_f32(const float* __restrict x, const float* __restrict w, float* __restrict y,
                                       int64_t rows, int64_t cols, float eps, int64_t rows_per_task,
                                       int64_t threads) {
    const float inv_n = 1.0f / static_cast<float>(cols);
#pragma omp parallel for schedule(static, rows_per_task) num_threads(threads)
    for (int64_t r = 0; r < rows; ++r) {
        const float* __restrict xr = x + r * cols;
        float* __restrict yr = y + r * cols;
        float part[LANES] = {};
        int64_t c = 0;
        for (; c + LANES <= cols; c += LANES) {
#pragma omp simd
            for (int k = 0; k < LANES; ++k) part[k] += xr[c + k] * xr[c + k];
        }
        float acc = 0.0f;
        for (; c < cols; ++c) acc += xr[c] * xr[c];
#pragma omp simd reduction(+ : acc)
        for (int k = 0; k < LANES; ++k) acc += part[k];
        const float scale = 1.0f / std::sqrt(acc * inv_n + eps);
#pragma omp simd
        for (int64_t i = 0; i < cols; ++i) yr[i] = xr[i] * scale * w[i];
    }
}
