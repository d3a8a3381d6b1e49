// test/kernels/residual.h: residual_forward (out = inp1 + inp2) against an independent float64 sum,
// for sizes that are and are not multiples of a 128-bit chunk and of the block size.
//
// Tolerance: none. The inputs are floatX values, so their sum is exact in float (FP32: the float sum
// is the correctly rounded one; BF16: two 8-bit significands add exactly in 24 bits), and the kernel
// rounds it once to floatX, as rounding the float64 sum to float and then to floatX does. Any other
// arithmetic (a dropped operand, a scale, a wrong index) shows as a mismatch.
#pragma once
#include "../kernel_check.h"
#include "../../llm/ops/residual.cuh"

static void test_residual(void) {
    const size_t sizes[] = {1, 7, 33, 4103, 257 * 64};
    for (size_t N : sizes) {
        std::vector<float> a = kc_randn(N, 1.0f), b = kc_randn(N, 3.0f);
        floatX* d_a = kc_upload(a);
        floatX* d_b = kc_upload(b);
        floatX* d_out = kc_alloc_poisoned<floatX>(N);
        residual_forward(d_out, d_a, d_b, N, 0);
        std::vector<float> want(N);
        for (size_t i = 0; i < N; i++) want[i] = (float)(floatX)(float)((double)a[i] + (double)b[i]);
        char what[96];
        snprintf(what, sizeof(what), "residual_forward N=%zu (exact)", N);
        kc_compare(what, kc_download(d_out, N), want, 0.0f, 0.0f, 0.0f, 0.0f);
        device_free(d_a);
        device_free(d_b);
        device_free(d_out);
    }
}
