// RMSNorm for NVIDIA GPUs: one block per row; warp-shuffle partial sums, then one warp reduces the warps.
#include <cstdint>
#include <cuda_runtime.h>

template <int BLOCK>
__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                int64_t cols, float eps) {
    const float* xr = x + blockIdx.x * cols;
    float* yr = y + blockIdx.x * cols;
    float acc = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += BLOCK) acc += xr[c] * xr[c];
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
    __shared__ float partial[BLOCK / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < BLOCK / 32 ? partial[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
        if (lane == 0) partial[0] = rsqrtf(acc / static_cast<float>(cols) + eps);
    }
    __syncthreads();
    const float scale = partial[0];
    for (int64_t c = threadIdx.x; c < cols; c += BLOCK) yr[c] = xr[c] * scale * w[c];
}

extern "C" int kernelgen_rms_norm_cuda(const float* x, const float* w, float* y, int64_t rows, int64_t cols,
                                       float eps, int64_t block, void* stream) {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (block) {
        case 64: rms_norm_kernel<64><<<rows, 64, 0, s>>>(x, w, y, cols, eps); break;
        case 128: rms_norm_kernel<128><<<rows, 128, 0, s>>>(x, w, y, cols, eps); break;
        case 256: rms_norm_kernel<256><<<rows, 256, 0, s>>>(x, w, y, cols, eps); break;
        case 512: rms_norm_kernel<512><<<rows, 512, 0, s>>>(x, w, y, cols, eps); break;
        case 1024: rms_norm_kernel<1024><<<rows, 1024, 0, s>>>(x, w, y, cols, eps); break;
        default: return static_cast<int>(cudaErrorInvalidValue);
    }
    return static_cast<int>(cudaGetLastError());
}
