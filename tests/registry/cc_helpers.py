"""Small C++ kernels and torch references shared by the registry tests (imported as a helper module)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

BIAS_GELU_CPP = r"""
#include <cmath>
#include <cstdint>
extern "C" void bias_gelu(const float* x, const float* b, float* y, int64_t rows, int64_t cols, int64_t repeat) {
    // `repeat` > 1 recomputes the row that many times: a deliberately slow variant of the same kernel.
    // Single-threaded on purpose: an OpenMP barrier on a loaded 2-core machine adds noise of its own.
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < repeat; ++k)
            #pragma omp simd
            for (int64_t c = 0; c < cols; ++c) {
                const float v = x[r * cols + c] + b[c];
                y[r * cols + c] = 0.5f * v * (1.0f + std::erf(v * 0.70710678f)) + 0.0f * (float)k;
            }
}
extern "C" void bias_only(const float* x, const float* b, float* y, int64_t rows, int64_t cols, int64_t repeat) {
    // Wrong on purpose: forgets the GELU.
    for (int64_t i = 0; i < rows * cols; ++i) y[i] = x[i] + b[i % cols];
}
"""


def bias_gelu(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(x + b)


def launch(repeat: int = 1):
    def launcher(inputs, outputs, config, kernel):
        x, b = inputs
        kernel(x, b, outputs[0], x.numel() // x.shape[-1], x.shape[-1], repeat)

    return launcher
