// test/kernels/layernorm.h: layernorm_forward, fused_residual_layernorm_forward and layernorm_backward
// against their CPU references on the same floatX-rounded inputs, and kernels and references against
// a float64 LayerNorm written here.
//
// Shapes (N rows, C channels): N = 1, 7, 33, 257 (not multiples of the 8 rows of a forward block nor
// of the backward's rows per block), C = 8 (one 16-byte chunk in BF16), 40 (a partial warp of chunks),
// 64, 768, 1600 (GPT-2 XL: 6.25 chunks per lane in BF16), 4096 and the largest C the kernels take
// (1024 chunks: 8192 in BF16, 4096 in FP32; the forward's largest row cache, the backward's 1024-thread
// blocks), and N = 40000, C = 8, where the backward grid is capped and each block takes ~20 rows.
// Inputs have a per-row offset (mean up to +-2) and a per-row scale (0.5 to 2), weight ~ 1 + N(0, 0.1^2),
// bias ~ N(0, 0.1^2). One more shape, N = 64, C = 768, has rows of variance ~eps (no offset, scale
// 0.002 to 0.006): there eps is a large part of var + eps, so its value shows at full strength.
//
// The backward accumulates: dinp, dweight, dbias start from random values (uploaded, so defined) and
// the reference adds to the same values; mean and rstd are the reference forward's, given to both.
// The backward runs twice from the same start: bitwise equal (determinism).
//
// Why float64: the kernels and the references share LAYERNORM_EPS and the same formulas, so their
// agreement says nothing about eps, the variance's divisor or the backward's 1/C. The float64
// evaluation is the math of Ba, Kiros & Hinton (2016) with GPT-2's eps = 1e-5, written out below:
//   mean = sum x / C, var = sum (x - mean)^2 / C (biased), rstd = 1 / sqrt(var + 1e-5),
//   out = (x - mean) rstd w + b;  dinp += (dnorm - mean(dnorm) - xhat mean(dnorm xhat)) rstd with
//   xhat = (x - mean) rstd, dnorm = dout w (given the same mean and rstd as the kernel);
//   dweight += sum over rows of dout xhat, dbias += sum over rows of dout.
//
// Error bounds of one FP32 evaluation (kernel or reference), per row and per element, with u = 2^-24
// and kc_sum_err(n, a) the error of a float sum of n terms of total magnitude a (kernel_check.h):
// - mean: dm = kc_sum_err(C, sum |x|) / C + u |mean|.
// - var: the float mean's error enters at second order (sum (x - m')^2 = C var + C (m' - mean)^2),
//   each (x - m')^2 rounds by 3u, the sum of C positive terms by kc_sum_err(C, C var), the division by
//   u: dv = dm^2 + 4u var + kc_sum_err(C, C var) / C.
// - rstd: relative error 0.5 (dv + u (var + eps)) / (var + eps) + 4u (square root and division, 2u
//   each for a GPU's fast-math versions).
// - out = (x - m') s w + b: |w| rstd dm + |xhat w| (rstd's relative error + 3u) + u |out|.
// - dinp: the two row means carry kc_sum_err(C, sum |term|) / C plus their terms' own roundings (dnorm:
//   u, dnorm xhat: 4u) and the division; the expression and the accumulation add a few roundings of
//   its terms; all times rstd (see ln_backward_f64).
// - dweight, dbias: sums over n = N rows of terms of random sign. The worst-case bound, u n^2 max|term|,
//   is vacuous at N = 40000; the rounding errors add like a random walk, with standard deviation about
//   u n max|term| / 3, so we allow 4 u N max|term| + 8 ulps (~12 standard deviations).
// - BF16: each floatX output of a kernel is rounded once to bf16 (relative error <= 2^-8) on top
//   (statistics and sums are FP32 in both, on the same bf16 inputs); mean and rstd are FP32 outputs.
// Kernel vs float64 and reference vs float64 use these bounds; kernel vs reference their sum. The
// fused residual is compared exactly (it is one addition of two floatX values, rounded to float by the
// reference and to floatX by the kernel), and the reference LayerNorm runs on the bf16-rounded residual,
// the tensor the kernel normalizes (and the backward later sees).
// Observed: up to ~0.5 of these bounds (at C = 8, where the sums' bound is the worst case; the longer
// rows' probabilistic bounds are ~8 standard deviations, observed ~0.05 of them). What they exclude:
// eps = 1e-3 or 1e-6 instead of 1e-5 (on the small-variance rows rstd moves by 11% to 67%), the
// unbiased variance (1/(C-1): a relative 1/(2C) on rstd, at least 6e-5 here, against bounds of ~2e-5).
#pragma once
#include "../kernel_check.h"
#include "../../llm/ops/layernorm.cuh"

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

static const double LN64_EPS = 1e-5;  // GPT-2's LayerNorm eps

// rows of variance ~eps: no offset, scale 0.002 to 0.006
static std::vector<float> ln_small_rows(int N, int C) {
    std::vector<float> x = kc_randn((size_t)N * C, 1.0f);
    for (int i = 0; i < N; i++) {
        float scale = 0.002f + 0.004f * rng_f32(&g_rng);
        for (int c = 0; c < C; c++) {
            float& v = x[(size_t)i * C + c];
            v = (float)(floatX)(v * scale);
        }
    }
    return x;
}

// float64 LayerNorm forward, and the bounds of one FP32 evaluation (top of this file)
typedef struct {
    std::vector<double> out, mean, rstd;        // float64 values
    std::vector<double> b_out, b_mean, b_rstd;  // bounds of one FP32 evaluation
} Ln64;

static Ln64 ln_forward_f64(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                           int N, int C) {
    const double u = KC_U32;
    Ln64 r;
    r.out.resize((size_t)N * C); r.b_out.resize((size_t)N * C);
    r.mean.resize(N); r.rstd.resize(N); r.b_mean.resize(N); r.b_rstd.resize(N);
    for (int i = 0; i < N; i++) {
        const float* xi = &x[(size_t)i * C];
        double sum = 0.0, sabs = 0.0, ss = 0.0;
        for (int c = 0; c < C; c++) { sum += xi[c]; sabs += fabs((double)xi[c]); }
        double m = sum / C;
        for (int c = 0; c < C; c++) ss += ((double)xi[c] - m) * ((double)xi[c] - m);
        double var = ss / C, rs = 1.0 / sqrt(var + LN64_EPS);
        double dm = kc_sum_err(C, sabs) / C + u * fabs(m);
        double dv = dm * dm + 4.0 * u * var + kc_sum_err(C, ss) / C;
        double drel = 0.5 * (dv + u * (var + LN64_EPS)) / (var + LN64_EPS) + 4.0 * u;
        r.mean[i] = m; r.rstd[i] = rs; r.b_mean[i] = dm; r.b_rstd[i] = drel * rs;
        for (int c = 0; c < C; c++) {
            size_t q = (size_t)i * C + c;
            double xw = ((double)xi[c] - m) * rs * w[c];
            r.out[q] = xw + b[c];
            r.b_out[q] = fabs((double)w[c]) * rs * dm + fabs(xw) * (drel + 3.0 * u) + u * fabs(r.out[q]);
        }
    }
    return r;
}

// float64 LayerNorm backward from the given (float) mean and rstd, starting from dinp0, dw0, db0; the bound
// of one FP32 evaluation of dinp (top of this file)
typedef struct { std::vector<double> dinp, dw, db, b_dinp; } LnBwd64;

static LnBwd64 ln_backward_f64(const std::vector<float>& dout, const std::vector<float>& x, const std::vector<float>& w,
                               const std::vector<float>& mean, const std::vector<float>& rstd,
                               const std::vector<float>& dinp0, const std::vector<float>& dw0,
                               const std::vector<float>& db0, int N, int C) {
    const double u = KC_U32;
    LnBwd64 r;
    r.dinp.resize((size_t)N * C); r.b_dinp.resize((size_t)N * C);
    r.dw.assign(dw0.begin(), dw0.end());
    r.db.assign(db0.begin(), db0.end());
    std::vector<double> xhat(C), dnorm(C);
    for (int i = 0; i < N; i++) {
        double m = mean[i], s = rstd[i], sa = 0.0, sb = 0.0, aa = 0.0, ab = 0.0;
        for (int c = 0; c < C; c++) {
            size_t q = (size_t)i * C + c;
            xhat[c] = ((double)x[q] - m) * s;
            dnorm[c] = (double)dout[q] * w[c];
            sa += dnorm[c]; aa += fabs(dnorm[c]);
            sb += dnorm[c] * xhat[c]; ab += fabs(dnorm[c] * xhat[c]);
            r.dw[c] += (double)dout[q] * xhat[c];
            r.db[c] += dout[q];
        }
        double a = sa / C, bb = sb / C;
        double da = (kc_sum_err(C, aa) + u * aa) / C + u * fabs(a);
        double db = (kc_sum_err(C, ab) + 4.0 * u * ab) / C + u * fabs(bb);
        for (int c = 0; c < C; c++) {
            size_t q = (size_t)i * C + c;
            double in = dnorm[c] - a - xhat[c] * bb, g = in * s;
            r.dinp[q] = dinp0[q] + g;
            double din = u * fabs(dnorm[c]) + da + fabs(bb) * 2.0 * u * fabs(xhat[c]) + fabs(xhat[c]) * db +
                         u * fabs(xhat[c] * bb) + 2.0 * u * (fabs(dnorm[c]) + fabs(a) + fabs(xhat[c] * bb));
            r.b_dinp[q] = s * din + u * fabs(g) + u * fabs(r.dinp[q]);
        }
    }
    return r;
}

// a kernel's bound: one FP32 evaluation's, then rounded once more to floatX
static std::vector<double> ln_kernel_bound(const std::vector<double>& b32, const std::vector<double>& value) {
    std::vector<double> r(b32.size());
    for (size_t i = 0; i < b32.size(); i++) r[i] = kc_round_x(b32[i], value[i]);
    return r;
}
static std::vector<double> ln_add(const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> r(a.size());
    for (size_t i = 0; i < a.size(); i++) r[i] = a[i] + b[i];
    return r;
}

// the forward checks of one kernel output set (out as floatX, mean, rstd) against the reference's and float64
static void ln_check_forward(const char* name, const char* tag, int N, int C, const std::vector<float>& got_out,
                             const std::vector<float>& got_mean, const std::vector<float>& got_rstd,
                             const std::vector<float>& ref_out, const std::vector<float>& ref_mean,
                             const std::vector<float>& ref_rstd, const Ln64& f) {
    std::vector<double> bk = ln_kernel_bound(f.b_out, f.out);
    const std::vector<float>* got[3] = {&got_out, &got_mean, &got_rstd};
    const std::vector<float>* ref[3] = {&ref_out, &ref_mean, &ref_rstd};
    const std::vector<double>* f64[3] = {&f.out, &f.mean, &f.rstd};
    const std::vector<double>* b32[3] = {&f.b_out, &f.b_mean, &f.b_rstd};
    const std::vector<double>* bkern[3] = {&bk, &f.b_mean, &f.b_rstd};  // mean and rstd are FP32 outputs
    const char* field[3] = {"out", "mean", "rstd"};
    char what[192];
    for (int k = 0; k < 3; k++) {
        snprintf(what, sizeof(what), "%s%s %s N=%d C=%d", name, tag, field[k], N, C);
        kc_check_bound(what, *got[k], *ref[k], ln_add(*bkern[k], *b32[k]));
        snprintf(what, sizeof(what), "%s%s %s N=%d C=%d vs float64", name, tag, field[k], N, C);
        kc_check_bound(what, *got[k], *f64[k], *bkern[k]);
        snprintf(what, sizeof(what), "%s_cpu%s %s N=%d C=%d vs float64", name, tag, field[k], N, C);
        kc_check_bound(what, *ref[k], *f64[k], *b32[k]);
    }
}

static void test_layernorm(void) {
    const float u = 5.96e-8f, bf = 3.9e-3f;
    struct { int N, C, small; } shapes[] = {{1, 8, 0},    {7, 40, 0},   {33, 64, 0},  {257, 768, 0},
                                            {5, 1600, 0}, {3, 4096, 0}, {2, 1024 * x128::size, 0}, {40000, 8, 0},
                                            {64, 768, 1}};
    for (auto s : shapes) {
        int N = s.N, C = s.C;
        size_t NC = (size_t)N * C;
        char what[192];
        std::vector<float> x = s.small ? ln_small_rows(N, C) : ln_random_rows(N, C), w = ln_weight(C),
                           b = kc_randn(C, 0.1f);
        floatX* d_x = kc_upload(x);
        floatX* d_w = kc_upload(w);
        floatX* d_b = kc_upload(b);
        const char* tag = s.small ? " (var ~eps)" : "";

        // forward
        floatX* d_out = kc_alloc_poisoned<floatX>(NC);
        float* d_mean = kc_alloc_poisoned<float>(N);
        float* d_rstd = kc_alloc_poisoned<float>(N);
        layernorm_forward(d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C, 0);
        std::vector<float> out(NC), mean(N), rstd(N);
        layernorm_forward_cpu(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
        ln_check_forward("layernorm_forward", tag, N, C, kc_download(d_out, NC), kc_download_f32(d_mean, N), kc_download_f32(d_rstd, N),
                         out, mean, rstd, ln_forward_f64(x, w, b, N, C));

        // fused residual + forward: inp1 = x, inp2 a second random tensor
        std::vector<float> x2 = s.small ? ln_small_rows(N, C) : ln_random_rows(N, C);
        floatX* d_x2 = kc_upload(x2);
        floatX* d_res = kc_alloc_poisoned<floatX>(NC);
        kc_poison(d_out, NC * sizeof(floatX));
        kc_poison(d_mean, N * sizeof(float));
        kc_poison(d_rstd, N * sizeof(float));
        fused_residual_layernorm_forward(d_res, d_out, d_mean, d_rstd, d_x, d_x2, d_w, d_b, N, C, 0);
        std::vector<float> res(NC), res_rounded(NC), out2(NC), mean2(N), rstd2(N), res32(NC);
        fused_residual_layernorm_forward_cpu(res.data(), out2.data(), mean2.data(), rstd2.data(), x.data(),
                                             x2.data(), w.data(), b.data(), N, C);
        for (size_t i = 0; i < NC; i++) {
            res32[i] = (float)((double)x[i] + (double)x2[i]);  // float64 sum: exact in float, then
            res_rounded[i] = (float)(floatX)res32[i];          // one rounding to floatX (identity in FP32)
        }
        layernorm_forward_cpu(out2.data(), mean2.data(), rstd2.data(), res_rounded.data(), w.data(), b.data(), N, C);
        std::vector<float> got_res = kc_download(d_res, NC);
        snprintf(what, sizeof(what), "fused_residual_layernorm_forward%s residual N=%d C=%d", tag, N, C);
        kc_compare(what, got_res, res, 0.0f, 6e-8f, 0.0f, bf);
        snprintf(what, sizeof(what), "fused_residual_layernorm_forward%s residual N=%d C=%d vs float64 (exact)", tag, N, C);
        kc_compare(what, got_res, res_rounded, 0.0f, 0.0f, 0.0f, 0.0f);
        snprintf(what, sizeof(what), "fused_residual_layernorm_forward_cpu%s residual N=%d C=%d vs float64 (exact)", tag,
                 N, C);
        kc_compare(what, res, res32, 0.0f, 0.0f, 0.0f, 0.0f);
        ln_check_forward("fused_residual_layernorm_forward", tag, N, C, kc_download(d_out, NC), kc_download_f32(d_mean, N), kc_download_f32(d_rstd, N),
                         out2, mean2, rstd2, ln_forward_f64(res_rounded, w, b, N, C));

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
        LnBwd64 g = ln_backward_f64(dout, x, w, mean, rstd, dinp0, dw0, db0, N, C);
        // dweight, dbias: the random-walk bound of a sum over N rows (top of this file)
        float dmax = kc_max_abs(dout), xhmax = 0.0f;
        for (int i = 0; i < N; i++)
            for (int c = 0; c < C; c++) xhmax = fmaxf(xhmax, fabsf((x[(size_t)i * C + c] - mean[i]) * rstd[i]));
        float dw_tol = 4.0f * N * u * dmax * xhmax + 8.0f * u * kc_max_abs(dw);
        float db_tol = 4.0f * N * u * dmax + 8.0f * u * kc_max_abs(db);
        std::vector<double> b_dw(C, dw_tol), b_db(C, db_tol);
        std::vector<float> got_dinp = kc_download(d_dinp, NC), got_dw = kc_download(d_dw, C), got_db = kc_download(d_db, C);
        std::vector<double> bk_dinp = ln_kernel_bound(g.b_dinp, g.dinp);
        snprintf(what, sizeof(what), "layernorm_backward%s dinp N=%d C=%d", tag, N, C);
        kc_check_bound(what, got_dinp, dinp, ln_add(bk_dinp, g.b_dinp));
        snprintf(what, sizeof(what), "layernorm_backward%s dweight N=%d C=%d", tag, N, C);
        kc_compare(what, got_dw, dw, dw_tol, 0.0f, dw_tol, bf);
        snprintf(what, sizeof(what), "layernorm_backward%s dbias N=%d C=%d", tag, N, C);
        kc_compare(what, got_db, db, db_tol, 0.0f, db_tol, bf);
        snprintf(what, sizeof(what), "layernorm_backward%s dinp N=%d C=%d vs float64", tag, N, C);
        kc_check_bound(what, got_dinp, g.dinp, bk_dinp);
        snprintf(what, sizeof(what), "layernorm_backward%s dweight N=%d C=%d vs float64", tag, N, C);
        kc_check_bound(what, got_dw, g.dw, ln_kernel_bound(b_dw, g.dw));
        snprintf(what, sizeof(what), "layernorm_backward%s dbias N=%d C=%d vs float64", tag, N, C);
        kc_check_bound(what, got_db, g.db, ln_kernel_bound(b_db, g.db));
        snprintf(what, sizeof(what), "layernorm_backward_cpu%s dinp N=%d C=%d vs float64", tag, N, C);
        kc_check_bound(what, dinp, g.dinp, g.b_dinp);
        snprintf(what, sizeof(what), "layernorm_backward_cpu%s dweight N=%d C=%d vs float64", tag, N, C);
        kc_check_bound(what, dw, g.dw, b_dw);
        snprintf(what, sizeof(what), "layernorm_backward_cpu%s dbias N=%d C=%d vs float64", tag, N, C);
        kc_check_bound(what, db, g.db, b_db);

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
              "layernorm_backward%s N=%d C=%d: two runs bitwise equal", tag, N, C);

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
