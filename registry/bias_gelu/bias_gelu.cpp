// Fused bias + exact GELU for the CPU: y = gelu(x + b), b broadcast over rows (float32, contiguous).
// OpenMP over row blocks, the column loop vectorised (erf is vectorised by libmvec under -ffast-math).
#include <cmath>
#include <cstdint>

extern "C" void kernelgen_bias_gelu_f32(const float* __restrict x, const float* __restrict b, float* __restrict y,
                                        int64_t rows, int64_t cols, int64_t rows_per_task, int64_t threads) {
    const float inv_sqrt2 = 0.70710678118654752f;
#pragma omp parallel for schedule(static, rows_per_task) num_threads(threads)
    for (int64_t r = 0; r < rows; ++r) {
        const float* __restrict xr = x + r * cols;
        float* __restrict yr = y + r * cols;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) {
            const float v = xr[c] + b[c];
            yr[c] = 0.5f * v * (1.0f + std::erf(v * inv_sqrt2));
        }
    }
}
