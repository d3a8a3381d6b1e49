// test/kernels/gelu.h: gelu_forward and gelu_backward_inplace against gelu_forward_cpu and
// gelu_backward_cpu on the same floatX-rounded inputs, for sizes that are and are not multiples of
// the 8 (BF16) / 4 (FP32) elements of a 128-bit chunk and of the block size.
//
// Inputs: x ~ N(0, 1.5^2) (|x| up to ~7: both tails of GELU and its curved middle), dout ~ N(0, 1).
//
// Tolerances (|got - want| <= atol + rtol |want|):
// - FP32: the kernel evaluates the same formula with tanh(u) = 1 - 2 / (1 + e^(2u)) (see gelu.cuh), so
//   tanh differs from tanhf by a few ulps of 1, <= ~4e-7 absolute (also with --use_fast_math on a GPU:
//   ex2.approx and the fast division are within 2 ulps). The forward multiplies that by 0.5 |x| <= ~4:
//   <= ~2e-6; the derivative multiplies its 1 - tanh^2 error (<= ~1e-6) by
//   0.5 |x| sqrt(2/pi) (1 + 0.134 x^2) <= ~20 and by |dout| <= ~5. Plus a few ulps of rounding of the
//   result. Forward: atol 4e-6, rtol 1e-6; backward: atol 2e-5 (the bound at the extreme corner; the
//   typical error is ~1e-7), rtol 1e-6.
// - BF16: the result is rounded once to bf16 (8 significant bits: relative error <= 2^-8 = 3.9e-3),
//   on top of the FP32 error above. rtol 4e-3, atol as in FP32.
#pragma once
#include "../kernel_check.h"
#include "../../llm/gelu.cuh"

static void test_gelu(void) {
    const size_t sizes[] = {1, 7, 33, 4103, 257 * 64};
    for (size_t N : sizes) {
        std::vector<float> x = kc_randn(N, 1.5f);
        std::vector<float> dout = kc_randn(N, 1.0f);
        floatX* d_x = kc_upload(x);
        char what[128];

        // forward
        floatX* d_out = kc_alloc_poisoned<floatX>(N);
        gelu_forward(d_out, d_x, N, 0);
        std::vector<float> want(N);
        gelu_forward_cpu(want.data(), x.data(), N);
        snprintf(what, sizeof(what), "gelu_forward N=%zu", N);
        kc_compare(what, kc_download(d_out, N), want, 4e-6f, 1e-6f, 4e-6f, 4e-3f);

        // backward, in place: d_g holds dout on entry
        floatX* d_g = kc_upload(dout);
        gelu_backward_inplace(d_g, d_x, N, 0);
        gelu_backward_cpu(want.data(), x.data(), dout.data(), N);
        snprintf(what, sizeof(what), "gelu_backward_inplace N=%zu", N);
        kc_compare(what, kc_download(d_g, N), want, 2e-5f, 1e-6f, 2e-5f, 4e-3f);

        device_free(d_x);
        device_free(d_out);
        device_free(d_g);
    }
}
