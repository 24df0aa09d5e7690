// Fused bias + exact GELU in OpenCL C, run through dpctl on a SYCL device: one work-item per element.
__kernel void kernelgen_bias_gelu_cl(__global const float* x, __global const float* b, __global float* y,
                                     const long cols) {
    const long i = get_global_id(0);
    const float v = x[i] + b[i % cols];
    y[i] = 0.5f * v * (1.0f + erf(v * 0.70710678118654752f));
}
