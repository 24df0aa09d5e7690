// Fused bias + exact GELU in SYCL 2020 (icpx -fsycl / acpp): one work-item per element. Takes host
// pointers: buffers copy in and write back when they go out of scope.
#include <cstdint>
#include <sycl/sycl.hpp>

extern "C" void kernelgen_bias_gelu_sycl(const float* x, const float* b, float* y, int64_t rows, int64_t cols,
                                         int64_t group) {
    static sycl::queue queue;  // the default device; created once per process
    const int64_t n = rows * cols, padded = (n + group - 1) / group * group;
    {
        sycl::buffer<float, 1> xb(x, sycl::range<1>(n));
        sycl::buffer<float, 1> bb(b, sycl::range<1>(cols));
        sycl::buffer<float, 1> yb(y, sycl::range<1>(n));
        queue.submit([&](sycl::handler& h) {
            sycl::accessor xa(xb, h, sycl::read_only);
            sycl::accessor ba(bb, h, sycl::read_only);
            sycl::accessor ya(yb, h, sycl::write_only, sycl::no_init);
            h.parallel_for(sycl::nd_range<1>(padded, group), [=](sycl::nd_item<1> it) {
                const int64_t i = it.get_global_id(0);
                if (i >= n) return;
                const float v = xa[i] + ba[i % cols];
                ya[i] = 0.5f * v * (1.0f + sycl::erf(v * 0.70710678118654752f));
            });
        });
    }
}
