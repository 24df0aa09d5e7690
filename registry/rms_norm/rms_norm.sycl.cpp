// RMSNorm in SYCL 2020 (icpx -fsycl / acpp): one work-group per row, reduce_over_group for the sum of
// squares. Takes host pointers: buffers copy in and write back when they go out of scope.
#include <cstdint>
#include <sycl/sycl.hpp>

extern "C" void kernelgen_rms_norm_sycl(const float* x, const float* w, float* y, int64_t rows, int64_t cols,
                                        float eps, int64_t group) {
    static sycl::queue queue;  // the default device; created once per process
    {
        sycl::buffer<float, 1> xb(x, sycl::range<1>(rows * cols));
        sycl::buffer<float, 1> wb(w, sycl::range<1>(cols));
        sycl::buffer<float, 1> yb(y, sycl::range<1>(rows * cols));
        queue.submit([&](sycl::handler& h) {
            sycl::accessor xa(xb, h, sycl::read_only);
            sycl::accessor wa(wb, h, sycl::read_only);
            sycl::accessor ya(yb, h, sycl::write_only, sycl::no_init);
            h.parallel_for(sycl::nd_range<1>(rows * group, group), [=](sycl::nd_item<1> it) {
                const int64_t row = it.get_group(0), lid = it.get_local_id(0);
                float acc = 0.0f;
                for (int64_t c = lid; c < cols; c += group) acc += xa[row * cols + c] * xa[row * cols + c];
                acc = sycl::reduce_over_group(it.get_group(), acc, sycl::plus<float>());
                const float scale = sycl::rsqrt(acc / static_cast<float>(cols) + eps);
                for (int64_t c = lid; c < cols; c += group) ya[row * cols + c] = xa[row * cols + c] * scale * wa[c];
            });
        });
    }
}
