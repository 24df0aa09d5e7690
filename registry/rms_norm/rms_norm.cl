// RMSNorm in OpenCL C, run through dpctl on a SYCL device: one work-item per row. The Intel CPU
// OpenCL runtime vectorises across work-items, so neighbouring rows share a SIMD register.
__kernel void kernelgen_rms_norm_cl(__global const float* x, __global const float* w, __global float* y,
                                    const long cols, const float eps) {
    const long row = get_global_id(0);
    __global const float* xr = x + row * cols;
    __global float* yr = y + row * cols;
    float acc = 0.0f;
    for (long c = 0; c < cols; ++c) acc += xr[c] * xr[c];
    const float scale = rsqrt(acc / (float)cols + eps);
    for (long c = 0; c < cols; ++c) yr[c] = xr[c] * scale * w[c];
}
