// test/kernels/gelu.h: gelu_forward and gelu_backward_inplace against gelu_forward_cpu and
// gelu_backward_cpu on the same floatX-rounded inputs, and both against a float64 GELU written here,
// for sizes that are and are not multiples of the 8 (BF16) / 4 (FP32) elements of a 128-bit chunk and
// of the block size.
//
// Inputs: x ~ N(0, 1.5^2) (|x| up to ~7: both tails of GELU and its curved middle), dout ~ N(0, 1).
//
// Why float64: the kernels and the references call the same gelu_scalar / gelu_grad_scalar (gelu.cuh),
// so in FP32 they agree bit for bit (observed error 0) whatever the constants are. The float64
// evaluation is the tanh approximation of Hendrycks & Gimpel (2016, sec. 2) as GPT-2 uses it,
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),  gelu'(x) from it by the chain rule,
// with its constants written out below. The test checks its own formulas first: gelu_f64 within 4.8e-4
// of the exact GELU x Phi(x) (the approximation's largest deviation is 4.73e-4, at x = -2.70) and
// gelu_grad_f64 against a central difference of gelu_f64.
//
// Error bound of one FP32 evaluation (u = 2^-24), per element. tanh(a) = 1 - 2 / (1 + e^(2a)) (gelu.cuh):
// - a = s (x + c x^3): 3 roundings in c x x x, 1 in the add (same signs), 1 in the product, and s and c
//   rounded to float: |da| <= 7u |a|, which moves tanh by sech^2(a) |da| <= 7u max(a sech^2 a) < 3.2u;
// - e^(2a) by exp_fast: relative error <= 2e-7 = 3.4u (test_ops_grad), moving tanh by at most
//   2e / (1 + e)^2 <= 1/2 of that: 1.7u;
// - 1 + e and 2 / (1 + e): u each (2u for a GPU's fast division), on q = 2 / (1 + e) < 2: 6u; 1 - q: u.
//   So |dt| <= dT = 12u (absolute).
// - forward y = 0.5 x (1 + t): |dy| <= 0.5 |x| dT + 2u |y|;
// - backward g = A + B, A = 0.5 (1 + t), B = K (1 - t^2) with K = 0.5 x s (1 + 3 c x^2): 1 - t t is off
//   by <= 2 dT + 2u, the products and 1 + 3 c x^2 add <= 8u |B|, A + B and the product with dout one
//   rounding each: |d(g dout)| <= |dout| (0.5 dT + 2u |A| + |K| (2 dT + 2u) + 8u |B| + u |g|) + u |g dout|.
// BF16: the kernel's result is rounded once to bf16 (relative error <= 2^-8), on top.
// Kernel vs reference: the sum of the two bounds (0 is what FP32 shows on a CPU; a GPU contracts
// multiply-adds and divides approximately, which the bounds cover).
// Tight enough to see a wrong constant: c = 0.0447 instead of 0.044715 moves gelu by ~1e-5 where the
// bound is ~1e-6; a dropped factor 3 in gelu' moves it by ~2e-2.
#pragma once
#include "../kernel_check.h"
#include "../../llm/ops/gelu.cuh"

static const double GELU64_S = sqrt(2.0 / M_PI);
static const double GELU64_C = 0.044715;
static const double GELU64_DT = 12.0 * KC_U32;           // bound on the error of tanh (above)

static double gelu_f64(double x) { return 0.5 * x * (1.0 + tanh(GELU64_S * (x + GELU64_C * x * x * x))); }

static double gelu_grad_f64(double x) {
    double t = tanh(GELU64_S * (x + GELU64_C * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU64_S * (1.0 + 3.0 * GELU64_C * x * x);
}

// error bounds of one FP32 evaluation (top of this file)
static double gelu_fwd_err(double x) { return 0.5 * fabs(x) * GELU64_DT + 2.0 * KC_U32 * fabs(gelu_f64(x)); }
static double gelu_bwd_err(double x, double dout) {
    const double u = KC_U32;
    double t = tanh(GELU64_S * (x + GELU64_C * x * x * x));
    double A = 0.5 * (1.0 + t), K = 0.5 * fabs(x) * GELU64_S * (1.0 + 3.0 * GELU64_C * x * x), B = K * (1.0 - t * t);
    double g = gelu_grad_f64(x);
    return fabs(dout) * (0.5 * GELU64_DT + 2.0 * u * A + K * (2.0 * GELU64_DT + 2.0 * u) + 8.0 * u * B + u * fabs(g)) +
           u * fabs(g * dout);
}

// the test's own float64 formulas: the approximation against the exact GELU, the derivative against a
// central difference (step 1e-4: truncation ~1e-9, rounding ~1e-12)
static void test_gelu_f64_formulas(void) {
    double worst_exact = 0.0, worst_grad = 0.0;
    for (int i = -8000; i <= 8000; i++) {
        double x = i * 1e-3;
        double exact = 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
        worst_exact = fmax(worst_exact, fabs(gelu_f64(x) - exact));
        double h = 1e-4, fd = (gelu_f64(x + h) - gelu_f64(x - h)) / (2.0 * h);
        worst_grad = fmax(worst_grad, fabs(gelu_grad_f64(x) - fd));
    }
    check(worst_exact <= 4.8e-4, "gelu_f64: max |gelu_f64 - x Phi(x)| = %.3g over [-8, 8] (bound 4.8e-4)", worst_exact);
    check(worst_grad <= 1e-7, "gelu_grad_f64 vs a central difference of gelu_f64: max |diff| = %.3g (bound 1e-7)",
          worst_grad);
}

static void test_gelu(void) {
    test_gelu_f64_formulas();
    const size_t sizes[] = {1, 7, 33, 4103, 257 * 64};
    for (size_t N : sizes) {
        std::vector<float> x = kc_randn(N, 1.5f);
        std::vector<float> dout = kc_randn(N, 1.0f);
        floatX* d_x = kc_upload(x);
        char what[128];
        std::vector<double> want64(N), grad64(N), b_ref(N), b_kernel(N), b_both(N);

        // forward
        floatX* d_out = kc_alloc_poisoned<floatX>(N);
        gelu_forward(d_out, d_x, N, 0);
        std::vector<float> got = kc_download(d_out, N), want(N);
        gelu_forward_cpu(want.data(), x.data(), N);
        for (size_t i = 0; i < N; i++) {
            want64[i] = gelu_f64(x[i]);
            b_ref[i] = gelu_fwd_err(x[i]);
            b_kernel[i] = kc_round_x(b_ref[i], want64[i]);
            b_both[i] = b_kernel[i] + b_ref[i];
        }
        snprintf(what, sizeof(what), "gelu_forward N=%zu", N);
        kc_check_bound(what, got, want, b_both);
        snprintf(what, sizeof(what), "gelu_forward N=%zu vs float64", N);
        kc_check_bound(what, got, want64, b_kernel);
        snprintf(what, sizeof(what), "gelu_forward_cpu N=%zu vs float64", N);
        kc_check_bound(what, want, want64, b_ref);

        // backward, in place: d_g holds dout on entry
        floatX* d_g = kc_upload(dout);
        gelu_backward_inplace(d_g, d_x, N, 0);
        gelu_backward_cpu(want.data(), x.data(), dout.data(), N);
        got = kc_download(d_g, N);
        for (size_t i = 0; i < N; i++) {
            grad64[i] = gelu_grad_f64(x[i]) * (double)dout[i];
            b_ref[i] = gelu_bwd_err(x[i], dout[i]);
            b_kernel[i] = kc_round_x(b_ref[i], grad64[i]);
            b_both[i] = b_kernel[i] + b_ref[i];
        }
        snprintf(what, sizeof(what), "gelu_backward_inplace N=%zu", N);
        kc_check_bound(what, got, want, b_both);
        snprintf(what, sizeof(what), "gelu_backward_inplace N=%zu vs float64", N);
        kc_check_bound(what, got, grad64, b_kernel);
        snprintf(what, sizeof(what), "gelu_backward_cpu N=%zu vs float64", N);
        kc_check_bound(what, want, grad64, b_ref);

        device_free(d_x);
        device_free(d_out);
        device_free(d_g);
    }
}
