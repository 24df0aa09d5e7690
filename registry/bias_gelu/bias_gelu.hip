// Fused bias + exact GELU for AMD GPUs: a grid-stride loop, float4 loads and stores when VEC == 4.
#include <cstdint>
#include <hip/hip_runtime.h>

__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }

__global__ void bias_gelu_kernel(const float* __restrict__ x, const float* __restrict__ b, float* __restrict__ y,
                                 int64_t n, int64_t cols) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = gelu(x[i] + b[i % cols]);
}

__global__ void bias_gelu_kernel4(const float4* __restrict__ x, const float4* __restrict__ b, float4* __restrict__ y,
                                  int64_t n4, int64_t cols4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 v = x[i], c = b[i % cols4];
        y[i] = make_float4(gelu(v.x + c.x), gelu(v.y + c.y), gelu(v.z + c.z), gelu(v.w + c.w));
    }
}

extern "C" int kernelgen_bias_gelu_hip(const float* x, const float* b, float* y, int64_t rows, int64_t cols,
                                       int64_t block, int64_t vec, void* stream) {
    hipStream_t s = static_cast<hipStream_t>(stream);
    const int64_t n = rows * cols;
    if (vec == 4 && cols % 4 == 0) {
        const int64_t grid = (n / 4 + block - 1) / block;
        hipLaunchKernelGGL(bias_gelu_kernel4, dim3(grid < 65535 ? grid : 65535), dim3(block), 0, s,
                           reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(b),
                           reinterpret_cast<float4*>(y), n / 4, cols / 4);
    } else {
        const int64_t grid = (n + block - 1) / block;
        hipLaunchKernelGGL(bias_gelu_kernel, dim3(grid < 65535 ? grid : 65535), dim3(block), 0, s, x, b, y, n, cols);
    }
    return static_cast<int>(hipGetLastError());
}
