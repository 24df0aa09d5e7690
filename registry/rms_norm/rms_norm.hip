// RMSNorm for AMD GPUs: one block per row; a shared-memory tree reduction (wavefront-size agnostic).
#include <cstdint>
#include <hip/hip_runtime.h>

template <int BLOCK>
__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                int64_t cols, float eps) {
    const float* xr = x + blockIdx.x * cols;
    float* yr = y + blockIdx.x * cols;
    __shared__ float partial[BLOCK];
    float acc = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += BLOCK) acc += xr[c] * xr[c];
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    const float scale = rsqrtf(partial[0] / static_cast<float>(cols) + eps);
    for (int64_t c = threadIdx.x; c < cols; c += BLOCK) yr[c] = xr[c] * scale * w[c];
}

extern "C" int kernelgen_rms_norm_hip(const float* x, const float* w, float* y, int64_t rows, int64_t cols,
                                      float eps, int64_t block, void* stream) {
    hipStream_t s = static_cast<hipStream_t>(stream);
    switch (block) {
        case 64: hipLaunchKernelGGL(rms_norm_kernel<64>, dim3(rows), dim3(64), 0, s, x, w, y, cols, eps); break;
        case 128: hipLaunchKernelGGL(rms_norm_kernel<128>, dim3(rows), dim3(128), 0, s, x, w, y, cols, eps); break;
        case 256: hipLaunchKernelGGL(rms_norm_kernel<256>, dim3(rows), dim3(256), 0, s, x, w, y, cols, eps); break;
        case 512: hipLaunchKernelGGL(rms_norm_kernel<512>, dim3(rows), dim3(512), 0, s, x, w, y, cols, eps); break;
        case 1024: hipLaunchKernelGGL(rms_norm_kernel<1024>, dim3(rows), dim3(1024), 0, s, x, w, y, cols, eps); break;
        default: return static_cast<int>(hipErrorInvalidValue);
    }
    return static_cast<int>(hipGetLastError());
}
