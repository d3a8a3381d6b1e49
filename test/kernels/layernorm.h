// test/kernels/layernorm.h: layernorm_forward, fused_residual_layernorm_forward and layernorm_backward
// against their CPU references on the same floatX-rounded inputs.
//
// Shapes (N rows, C channels): N = 1, 7, 33, 257 (not multiples of the 8 rows of a forward block nor
// of the backward's rows per block), C = 8 (one 16-byte chunk in BF16), 40 (a partial warp of chunks),
// 64, 768, 1600 (GPT-2 XL: 6.25 chunks per lane in BF16), 4096 and the largest C the kernels take
// (1024 chunks: 8192 in BF16, 4096 in FP32; the forward's largest row cache, the backward's 1024-thread
// blocks), and N = 40000, C = 8, where the backward grid is capped and each block takes ~20 rows.
// Inputs have a per-row offset (mean up to +-2) and a per-row scale (0.5 to 2), weight ~ 1 + N(0, 0.1^2),
// bias ~ N(0, 0.1^2).
//
// The backward accumulates: dinp, dweight, dbias start from random values (uploaded, so defined) and
// the reference adds to the same values; mean and rstd are the reference forward's, given to both.
// The backward runs twice from the same start: bitwise equal (determinism).
//
// Tolerances (|got - want| <= atol + rtol |want|), with u = 2^-24 (the unit roundoff of FP32). The
// kernel and the reference add the same terms in different orders; a sum rounds each partial sum p_k
// by at most u |p_k|.
// - mean (n = C terms, partial sums <= k max|x| as rows have offsets): |err of the sum| <= u n^2/2
//   max|x| per order, so the means differ by <= u C max|x|: atol 2 C u max|x|.
// - rstd: the variance is a sum of C positive terms: relative error <= C u per order (the mean's error
//   enters only at second order), rstd = var^-1/2 halves it, plus a few ulps for the square root and
//   the divisions: rtol 2 C u + 8 u.
// - out = (x - mean) rstd w + b: the mean's error times rstd |w|, xhat |w| times rstd's relative
//   error, plus 8 ulps of the largest term: atol = max|rstd| max|w| atol(mean) + max|xhat| max|w|
//   rtol(rstd) + 8 u (max|xhat| max|w| + max|b|).
// - dinp += (dnorm - mean(dnorm) - xhat mean(dnorm xhat)) rstd: the two row means of n = C terms
//   (dnorm = dout w) err by <= u C max|term| each (the same bound as the mean's), times rstd and
//   |xhat|, plus 16 ulps of the largest term of the formula (the initial dinp included).
// - dweight, dbias: sums over n = N rows of terms of random sign. The worst-case bound, u n^2 max|term|,
//   is vacuous at N = 40000; the rounding errors add like a random walk, with standard deviation about
//   u n max|term| / 3, so we allow 4 u N max|term| + 8 ulps (~12 standard deviations).
// - BF16: each output is rounded once to bf16 (8 significant bits: relative error <= 2^-8 = 3.9e-3) on
//   top of the FP32 error above (statistics and sums are FP32 in both, on the same bf16 inputs):
//   rtol + 3.9e-3, same atol. The fused residual is compared the same way (FP32: exact, one addition),
//   and the reference LayerNorm runs on the bf16-rounded residual, the tensor the kernel normalizes
//   (and the backward later sees).
#pragma once
#include "../kernel_check.h"
#include "../../llm/layernorm.cuh"

// rows with an offset and a scale each, rounded to floatX
static std::vector<float> ln_random_rows(int N, int C) {
    std::vector<float> x = kc_randn((size_t)N * C, 1.0f);
    for (int i = 0; i < N; i++) {
        float offset = 4.0f * rng_f32(&g_rng) - 2.0f, scale = 0.5f + 1.5f * rng_f32(&g_rng);
        for (int c = 0; c < C; c++) {
            float& v = x[(size_t)i * C + c];
            v = (float)(floatX)(v * scale + offset);
        }
    }
    return x;
}

static std::vector<float> ln_weight(int C) {
    std::vector<float> w = kc_randn(C, 0.1f);
    for (float& v : w) v = (float)(floatX)(1.0f + v);
    return w;
}

// the forward's tolerances (see the top of this file) for inputs x with the reference's mean and rstd
struct LnTol { float mean, rstd, out, xhat; };
static LnTol ln_forward_tol(const std::vector<float>& x, const std::vector<float>& mean,
                            const std::vector<float>& rstd, float wmax, float bmax, int N, int C) {
    const float u = 5.96e-8f;
    float xhmax = 0.0f;
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) xhmax = fmaxf(xhmax, fabsf((x[(size_t)i * C + c] - mean[i]) * rstd[i]));
    LnTol t;
    t.xhat = xhmax;
    t.mean = 2.0f * C * u * kc_max_abs(x);
    t.rstd = 2.0f * C * u + 8.0f * u;
    t.out = kc_max_abs(rstd) * wmax * t.mean + xhmax * wmax * t.rstd + 8.0f * u * (xhmax * wmax + bmax);
    return t;
}

static void test_layernorm(void) {
    const float u = 5.96e-8f, bf = 3.9e-3f;
    struct { int N, C; } shapes[] = {{1, 8},    {7, 40},   {33, 64},  {257, 768},
                                     {5, 1600}, {3, 4096}, {2, 1024 * x128::size}, {40000, 8}};
    for (auto s : shapes) {
        int N = s.N, C = s.C;
        size_t NC = (size_t)N * C;
        char what[160];
        std::vector<float> x = ln_random_rows(N, C), w = ln_weight(C), b = kc_randn(C, 0.1f);
        floatX* d_x = kc_upload(x);
        floatX* d_w = kc_upload(w);
        floatX* d_b = kc_upload(b);
        float wmax = kc_max_abs(w), bmax = kc_max_abs(b);

        // forward
        floatX* d_out = kc_alloc_poisoned<floatX>(NC);
        float* d_mean = kc_alloc_poisoned<float>(N);
        float* d_rstd = kc_alloc_poisoned<float>(N);
        layernorm_forward(d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C, 0);
        std::vector<float> out(NC), mean(N), rstd(N);
        layernorm_forward_cpu(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
        LnTol t = ln_forward_tol(x, mean, rstd, wmax, bmax, N, C);
        snprintf(what, sizeof(what), "layernorm_forward out N=%d C=%d", N, C);
        kc_compare(what, kc_download(d_out, NC), out, t.out, 0.0f, t.out, bf);
        snprintf(what, sizeof(what), "layernorm_forward mean N=%d C=%d", N, C);
        kc_compare(what, kc_download_f32(d_mean, N), mean, t.mean, 0.0f, t.mean, 0.0f);
        snprintf(what, sizeof(what), "layernorm_forward rstd N=%d C=%d", N, C);
        kc_compare(what, kc_download_f32(d_rstd, N), rstd, 0.0f, t.rstd, 0.0f, t.rstd);

        // fused residual + forward: inp1 = x, inp2 a second random tensor
        std::vector<float> x2 = ln_random_rows(N, C);
        floatX* d_x2 = kc_upload(x2);
        floatX* d_res = kc_alloc_poisoned<floatX>(NC);
        kc_poison(d_out, NC * sizeof(floatX));
        kc_poison(d_mean, N * sizeof(float));
        kc_poison(d_rstd, N * sizeof(float));
        fused_residual_layernorm_forward(d_res, d_out, d_mean, d_rstd, d_x, d_x2, d_w, d_b, N, C, 0);
        std::vector<float> res(NC), res_rounded(NC), out2(NC), mean2(N), rstd2(N);
        fused_residual_layernorm_forward_cpu(res.data(), out2.data(), mean2.data(), rstd2.data(), x.data(),
                                             x2.data(), w.data(), b.data(), N, C);
        for (size_t i = 0; i < NC; i++) res_rounded[i] = (float)(floatX)res[i];  // identity in FP32
        layernorm_forward_cpu(out2.data(), mean2.data(), rstd2.data(), res_rounded.data(), w.data(), b.data(), N, C);
        LnTol t2 = ln_forward_tol(res_rounded, mean2, rstd2, wmax, bmax, N, C);
        snprintf(what, sizeof(what), "fused_residual_layernorm_forward residual N=%d C=%d", N, C);
        kc_compare(what, kc_download(d_res, NC), res, 0.0f, 6e-8f, 0.0f, bf);
        snprintf(what, sizeof(what), "fused_residual_layernorm_forward out N=%d C=%d", N, C);
        kc_compare(what, kc_download(d_out, NC), out2, t2.out, 0.0f, t2.out, bf);
        snprintf(what, sizeof(what), "fused_residual_layernorm_forward mean N=%d C=%d", N, C);
        kc_compare(what, kc_download_f32(d_mean, N), mean2, t2.mean, 0.0f, t2.mean, 0.0f);
        snprintf(what, sizeof(what), "fused_residual_layernorm_forward rstd N=%d C=%d", N, C);
        kc_compare(what, kc_download_f32(d_rstd, N), rstd2, 0.0f, t2.rstd, 0.0f, t2.rstd);

        // backward, from random initial gradients, with the reference's mean and rstd
        std::vector<float> dout = kc_randn(NC, 1.0f);
        std::vector<float> dinp0 = kc_randn(NC, 1.0f), dw0 = kc_randn(C, 1.0f), db0 = kc_randn(C, 1.0f);
        floatX* d_dout = kc_upload(dout);
        float* d_mean_ref = kc_upload_raw(mean);
        float* d_rstd_ref = kc_upload_raw(rstd);
        size_t scratch_n = std::max(NC, (size_t)1024 * 4 * C);  // gpt.h's BackwardBuffers.scratch
        float* d_scratch = kc_alloc_poisoned<float>(scratch_n);
        floatX* d_dinp = kc_upload(dinp0);
        floatX* d_dw = kc_upload(dw0);
        floatX* d_db = kc_upload(db0);
        layernorm_backward(d_dinp, d_dw, d_db, d_scratch, d_dout, d_x, d_w, d_mean_ref, d_rstd_ref, N, C, 0);
        std::vector<float> dinp = dinp0, dw = dw0, db = db0;
        layernorm_backward_cpu(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                               rstd.data(), N, C);
        // the largest terms: dnorm = dout w, xhat, dout xhat, rstd, the initial dinp
        float rmax = kc_max_abs(rstd), dmax = kc_max_abs(dout), dnmax = dmax * wmax, xhmax = t.xhat;
        float dw_tol = 4.0f * N * u * dmax * xhmax + 8.0f * u * kc_max_abs(dw);
        float db_tol = 4.0f * N * u * dmax + 8.0f * u * kc_max_abs(db);
        float dinp_tol = rmax * C * u * (dnmax + xhmax * dnmax * xhmax) +
                         16.0f * u * (kc_max_abs(dinp0) + rmax * dnmax * (1.0f + 2.0f * xhmax * xhmax));
        snprintf(what, sizeof(what), "layernorm_backward dinp N=%d C=%d", N, C);
        kc_compare(what, kc_download(d_dinp, NC), dinp, dinp_tol, 0.0f, dinp_tol, bf);
        snprintf(what, sizeof(what), "layernorm_backward dweight N=%d C=%d", N, C);
        kc_compare(what, kc_download(d_dw, C), dw, dw_tol, 0.0f, dw_tol, bf);
        snprintf(what, sizeof(what), "layernorm_backward dbias N=%d C=%d", N, C);
        kc_compare(what, kc_download(d_db, C), db, db_tol, 0.0f, db_tol, bf);

        // determinism: again from the same start, scratch poisoned again
        std::vector<floatX> r1 = kc_download_raw(d_dinp, NC), w1 = kc_download_raw(d_dw, C);
        std::vector<floatX> b1 = kc_download_raw(d_db, C);
        device_free(d_dinp);
        device_free(d_dw);
        device_free(d_db);
        d_dinp = kc_upload(dinp0);
        d_dw = kc_upload(dw0);
        d_db = kc_upload(db0);
        kc_poison(d_scratch, scratch_n * sizeof(float));
        layernorm_backward(d_dinp, d_dw, d_db, d_scratch, d_dout, d_x, d_w, d_mean_ref, d_rstd_ref, N, C, 0);
        std::vector<floatX> r2 = kc_download_raw(d_dinp, NC), w2 = kc_download_raw(d_dw, C);
        std::vector<floatX> b2 = kc_download_raw(d_db, C);
        check(memcmp(r1.data(), r2.data(), NC * sizeof(floatX)) == 0 &&
                  memcmp(w1.data(), w2.data(), C * sizeof(floatX)) == 0 &&
                  memcmp(b1.data(), b2.data(), C * sizeof(floatX)) == 0,
              "layernorm_backward N=%d C=%d: two runs bitwise equal", N, C);

        device_free(d_x);
        device_free(d_w);
        device_free(d_b);
        device_free(d_out);
        device_free(d_mean);
        device_free(d_rstd);
        device_free(d_x2);
        device_free(d_res);
        device_free(d_dout);
        device_free(d_mean_ref);
        device_free(d_rstd_ref);
        device_free(d_scratch);
        device_free(d_dinp);
        device_free(d_dw);
        device_free(d_db);
    }
}
