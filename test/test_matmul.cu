// test_matmul.cu: the launchers of llm/ops/matmul.cuh against the plain loops of the same file.
//   CPU build (build/test_matmul_cpu): matmul_forward / matmul_backward / matmul_batched, i.e. the
//     OpenBLAS sgemm + OpenMP path, against matmul_*_naive_cpu.
//   emulated build (build/test_matmul_emu, BF16; build/test_matmul_emu_fp32): the same launchers
//     through the emulated cuBLASLt and the bias-gradient / GELU kernels, against the same loops.
// Inputs are fresh random numbers each run (the seed is printed; pass it as argv[1] to repeat a
// run), rounded to floatX first so that both sides multiply the same numbers. Every output buffer is
// poisoned (NaN) before each call: an element left unwritten fails. Where an output lives inside a
// larger buffer (ld padding, batch gaps), the gaps must still hold the poison afterwards.
//
// Tolerances, per element (u = 2^-24, FP32's unit roundoff; S = sum over the k terms of |a||b|,
// plus |bias| and |old value| where they are added, computed by running the same loops on |inputs|):
//   FP32 accumulation: any order of summing k products in float is off by at most about (k+1) u S
//     from the exact sum; both sides do it (the reference and the code under test), and alpha, beta,
//     bias add a few roundings: 2 (k + 8) u S. GELU's slope is at most 1.13 and dGELU multiplies by
//     gelu' <= 1.13: x 1.2. tanh is off by up to 2e-7 absolute (tanhf, or the CPU build's vectorized
//     tanh) and gelu' amplifies that by at most 5, on both sides: + 32 u (S + |y|) (S >= |x|).
//   BF16 storage (the emulated BF16 build): the inputs are identical on both sides, so only the
//     output roundings count: at most two per element (a pre-activation stored in bf16 and then the
//     output; GELU's slope <= 1.13 carries the first), each at most 2^-8 relative (8 significant
//     bits): 2^-8 (|y| + 1.13 |x|), doubled to 2^-7 (|y| + 1.13 |x|) because the values being rounded
//     are themselves inexact; x is the pre-activation (0 when there is none).
//   These are worst cases over the order of the k additions (the library picks its own order on a GPU);
//   observed in FP32: ~0.01-0.03 of them; in BF16 the output roundings dominate (~0.5 of them).
//
// Against float64. The plain loops and the CUDA path share gelu_scalar / gelu_grad_scalar (gelu.cuh:
// the reference's GELU and the separate GELU kernels), so their agreement cannot see a wrong GELU
// constant. Every output, of the launchers and of the plain loops, is also compared with a float64
// evaluation written here: dot products, bias, alpha and beta in double, and the GELU of Hendrycks &
// Gimpel (2016) with its constants (sqrt(2/pi), 0.044715) written out, within the bound of ONE float
// evaluation: (k + 8) u S for the product (half of the above), times |GELU'| <= 1.13 or |gelu'(aux)|
// when an epilogue follows, plus the epilogue's own float error (the bounds of test/kernels/gelu.h:
// GELU to 0.5 |x| 12u + 2u |y|, gelu' to about 26u |K(x)| + 10u, where K(x) = 0.5 x sqrt(2/pi)
// (1 + 3 0.044715 x^2)); for the launchers in BF16 the roundings to bf16 (one of the output, one more of
// a stored pre-activation: 2^-8 (|y| + 1.13 |x|), or 2^-8 (|x gelu'| + |y|) for dGELU), and on a GPU
// cuBLASLt's own GELU (1e-3 of |x| and |y|, as above).
// The product's bound is too wide to see a GELU constant (0.0447 for 0.044715 moves gelu by ~1e-5), so
// the GELU epilogue is also checked on its own: the output against the float64 GELU of the
// pre-activation the same call wrote (aux / pre_gelu), within the GELU bound alone (FP32: ~1e-6; BF16:
// plus the two roundings), for the launchers and for the plain loops alike.
#include "../llm/ops/matmul.cuh"
#include "../llm/core/device.h"
#include "test_common.h"
#include "../llm/core/usage.h"
#include <stdint.h>
#include <time.h>

static uint64_t g_rng;
static float rnd(void) {  // uniform in [-1, 1), splitmix64
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)((z >> 40) * (2.0 / 16777216.0) - 1.0);
}

#if defined(LLM_FLOATX_IS_FLOAT)  // (the CPU build in BF16, build/test_matmul_cpu_bf16, has the BF16 bounds)
static const int kBF16 = 0;
#else
static const int kBF16 = 1;
#endif
static const double kU = 1.0 / 16777216.0;

// ----------------------------------------------------------------------------
// host <-> device helpers

// n fresh random values in [-scale, scale), rounded to floatX precision
static float* rand_host(size_t n, float scale) {
    float* h = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = (float)(floatX)(scale * rnd());
    return h;
}
static float* abs_copy(const float* h, size_t n) {
    if (h == NULL) return NULL;
    float* a = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) a[i] = fabsf(h[i]);
    return a;
}
static floatX* dev_alloc(size_t n) { return (floatX*)device_malloc(n * sizeof(floatX) + 16, MEM_WORKSPACE); }
static void upload(floatX* d, const float* h, size_t n) {
    floatX* t = (floatX*)mallocCheck(n * sizeof(floatX));
    for (size_t i = 0; i < n; i++) t[i] = (floatX)h[i];
    copy_to_device(d, t, n * sizeof(floatX));
    free(t);
}
static floatX* to_device(const float* h, size_t n) {
    if (h == NULL) return NULL;
    floatX* d = dev_alloc(n);
    upload(d, h, n);
    return d;
}
// all bytes 0xFF: NaN in FP32 and in BF16
static void poison(floatX* d, size_t n) {
    void* t = mallocCheck(n * sizeof(floatX));
    memset(t, 0xFF, n * sizeof(floatX));
    copy_to_device(d, t, n * sizeof(floatX));
    free(t);
}
static float* download(const floatX* d, size_t n) {
    float* h = (float*)mallocCheck(n * sizeof(float));
    copy_to_host_float(h, d, n);
    return h;
}
static int is_poison(const floatX* d_host_raw, size_t i) {
    const unsigned char* b = (const unsigned char*)(d_host_raw + i);
    for (size_t q = 0; q < sizeof(floatX); q++) if (b[q] != 0xFF) return 0;
    return 1;
}

// per-element tolerance (see the top of this file); gelu: a GELU or dGELU was applied to x
static double tol_of(double S, double y, double x, int K, int gelu) {
    double t = 2.0 * (K + 8) * kU * S * 1.2 + 32.0 * kU * (S + fabs(y));
    if (kBF16) t += ldexp(fabs(y) + 1.13 * fabs(x), -7);
#if LLM_BUILD_CUDA
    // on a real GPU (nvcc --use_fast_math), tanhf is tanh.approx.f32 (|error| ~ 2^-11) and cuBLASLt's
    // own GELU epilogue is its own approximation: allow 1e-3 of |x| and |y| there
    if (gelu) t += 1e-3 * (fabs(x) + fabs(y));
#else
    (void)gelu;
#endif
    return t + 1e-30;
}

// compare n values; x: the pre-activations when a GELU or dGELU was applied, else NULL; S: magnitudes
static void compare(const char* what, const float* got, const float* ref, const float* x, const float* S, size_t n, int K) {
    size_t bad = 0, worst_i = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double t = tol_of(S[i], ref[i], x != NULL ? x[i] : 0.0, K, x != NULL);
        double e = fabs((double)got[i] - (double)ref[i]) / t;
        if (!(e <= 1.0)) bad++;
        if (!(e <= worst)) { worst = e != e ? INFINITY : e; worst_i = i; }
    }
    check(bad == 0, "%s: n=%zu worst err/tol %.3f at [%zu] %.7g vs %.7g, %zu bad", what, n, worst, worst_i,
          n ? got[worst_i] : 0.0f, n ? ref[worst_i] : 0.0f, bad);
}

// ----------------------------------------------------------------------------
// float64 evaluation (see the top of this file)

static const double kGeluS = sqrt(2.0 / M_PI), kGeluC = 0.044715;  // GELU's tanh approximation
static double gelu64(double x) { return 0.5 * x * (1.0 + tanh(kGeluS * (x + kGeluC * x * x * x))); }
static double gelu_grad64(double x) {
    double t = tanh(kGeluS * (x + kGeluC * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluS * (1.0 + 3.0 * kGeluC * x * x);
}
// the error of one float evaluation of gelu(x) and of gelu'(x) (derived in test/kernels/gelu.h)
static double gelu_err(double x) { return 0.5 * fabs(x) * 12.0 * kU + 2.0 * kU * fabs(gelu64(x)); }
static double gelu_grad_err(double x) {
    double t = tanh(kGeluS * (x + kGeluC * x * x * x)), dT = 12.0 * kU;
    double A = 0.5 * (1.0 + t), Kx = 0.5 * fabs(x) * kGeluS * (1.0 + 3.0 * kGeluC * x * x), B = Kx * (1.0 - t * t);
    return 0.5 * dT + 2.0 * kU * A + Kx * (2.0 * dT + 2.0 * kU) + 8.0 * kU * B + kU * fabs(gelu_grad64(x));
}

typedef enum { EPI_NONE, EPI_GELU, EPI_DGELU } Epi;

// the bound of one evaluation against float64, per element: S the magnitudes of the product's terms,
// y the float64 result, p the float64 product before the epilogue, a: dGELU's argument (aux);
// launcher: 1 for the code under test (its BF16 roundings, a GPU's GELU), 0 for the plain loops (FP32)
static double tol64(double S, double y, double p, double a, int K, Epi epi, int launcher) {
    double prod = (K + 8) * kU * S, t;
    if (epi == EPI_GELU) t = 1.13 * prod + gelu_err(p);
    else if (epi == EPI_DGELU) t = fabs(gelu_grad64(a)) * prod + fabs(p) * gelu_grad_err(a) + kU * fabs(y);
    else t = prod + kU * fabs(y);
    if (launcher && kBF16) {
        if (epi == EPI_GELU) t += ldexp(fabs(y) + 1.13 * fabs(p), -8) * 1.01;
        else if (epi == EPI_DGELU) t += ldexp(fabs(p * gelu_grad64(a)) + fabs(y), -8) * 1.01;
        else t += ldexp(fabs(y) + t, -8);
    }
#if LLM_BUILD_CUDA
    if (launcher && epi != EPI_NONE) t += 1e-3 * (fabs(p) + fabs(y));
#endif
    return t + 1e-30;
}

// compare n values with their float64 evaluation y64 (p64: before the epilogue; a: dGELU's argument or NULL)
static void compare64(const char* what, const float* got, const double* y64, const double* p64, const float* a,
                      const float* S, size_t n, int K, Epi epi, int launcher) {
    size_t bad = 0, worst_i = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double t = tol64(S[i], y64[i], p64[i], a != NULL ? a[i] : 0.0, K, epi, launcher);
        double e = fabs((double)got[i] - y64[i]) / t;
        if (!(e <= 1.0)) bad++;
        if (!(e <= worst)) { worst = e != e ? INFINITY : e; worst_i = i; }
    }
    check(bad == 0, "%s: n=%zu worst err/tol %.3f at [%zu] %.7g vs %.9g, %zu bad", what, n, worst, worst_i,
          n ? got[worst_i] : 0.0f, n ? y64[worst_i] : 0.0, bad);
}

// the GELU epilogue on its own: out against the float64 GELU of the pre-activation the same call wrote
static void compare_gelu_epilogue(const char* what, const float* out, const float* pre, size_t n, int launcher) {
    size_t bad = 0, worst_i = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = pre[i], y = gelu64(x), t = gelu_err(x);
        if (launcher && kBF16) t += ldexp(fabs(y) + 1.13 * fabs(x), -8) * 1.01;
#if LLM_BUILD_CUDA
        if (launcher) t += 1e-3 * (fabs(x) + fabs(y));
#endif
        double e = fabs((double)out[i] - y) / (t + 1e-30);
        if (!(e <= 1.0)) bad++;
        if (!(e <= worst)) { worst = e != e ? INFINITY : e; worst_i = i; }
    }
    check(bad == 0, "%s: n=%zu worst err/tol %.3f at [%zu] %.7g vs float64 gelu(%.7g) = %.9g, %zu bad", what, n, worst,
          worst_i, n ? out[worst_i] : 0.0f, n ? pre[worst_i] : 0.0f, n ? gelu64(pre[worst_i]) : 0.0, bad);
}

// ----------------------------------------------------------------------------
// matmul_forward / matmul_backward

static void test_forward(int BT, int C, int OC, int with_bias, int with_gelu, cudaStream_t s) {
    float* inp = rand_host((size_t)BT * C, 1.0f);
    float* w = rand_host((size_t)OC * C, 1.0f);
    float* bias = with_bias ? rand_host(OC, 1.0f) : NULL;
    size_t n = (size_t)BT * OC;
    float* out_ref = (float*)mallocCheck(n * sizeof(float));
    float* pre_ref = (float*)mallocCheck(n * sizeof(float));
    float* S = (float*)mallocCheck(n * sizeof(float));
    matmul_forward_naive_cpu(out_ref, with_gelu ? pre_ref : NULL, inp, w, bias, BT, C, OC);
    float *ainp = abs_copy(inp, (size_t)BT * C), *aw = abs_copy(w, (size_t)OC * C), *abias = abs_copy(bias, OC);
    matmul_forward_naive_cpu(S, NULL, ainp, aw, abias, BT, C, OC);

    floatX *d_inp = to_device(inp, (size_t)BT * C), *d_w = to_device(w, (size_t)OC * C), *d_bias = to_device(bias, OC);
    floatX* d_out = dev_alloc(n);
    floatX* d_pre = with_gelu ? dev_alloc(n) : NULL;
    poison(d_out, n);
    if (d_pre) poison(d_pre, n);
    matmul_forward(d_out, d_pre, d_inp, d_w, d_bias, BT, C, OC, s);
    device_synchronize();
    float* out = download(d_out, n);
    char what[160];
#if LLM_HAS_KERNELS
    const char* mode = with_gelu ? (llm_ctx.matmul_fuse_gelu ? " fused" : " unfused") : "";
#else
    const char* mode = "";
#endif
    snprintf(what, sizeof(what), "forward BT=%d C=%d OC=%d%s%s%s: out", BT, C, OC, with_bias ? " bias" : "",
             with_gelu ? " gelu" : "", mode);
    compare(what, out, out_ref, with_gelu ? pre_ref : NULL, S, n, C);
    // float64: the product plus bias, then GELU
    double* pre64 = (double*)mallocCheck(n * sizeof(double));
    double* out64 = (double*)mallocCheck(n * sizeof(double));
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++)
        for (int o = 0; o < OC; o++) {
            double v = bias != NULL ? bias[o] : 0.0;
            for (int i = 0; i < C; i++) v += (double)inp[(size_t)bt * C + i] * (double)w[(size_t)o * C + i];
            pre64[(size_t)bt * OC + o] = v;
            out64[(size_t)bt * OC + o] = with_gelu ? gelu64(v) : v;
        }
    Epi epi = with_gelu ? EPI_GELU : EPI_NONE;
    char w64[200];
    snprintf(w64, sizeof(w64), "%s vs float64", what);
    compare64(w64, out, out64, pre64, NULL, S, n, C, epi, 1);
    snprintf(w64, sizeof(w64), "%s: matmul_forward_naive_cpu vs float64", what);
    compare64(w64, out_ref, out64, pre64, NULL, S, n, C, epi, 0);
    if (with_gelu) {
        float* pre = download(d_pre, n);
        snprintf(what, sizeof(what), "forward BT=%d C=%d OC=%d%s gelu%s: pre_gelu", BT, C, OC, with_bias ? " bias" : "", mode);
        compare(what, pre, pre_ref, NULL, S, n, C);
        snprintf(w64, sizeof(w64), "%s vs float64", what);
        compare64(w64, pre, pre64, pre64, NULL, S, n, C, EPI_NONE, 1);
        snprintf(w64, sizeof(w64), "%s: matmul_forward_naive_cpu vs float64", what);
        compare64(w64, pre_ref, pre64, pre64, NULL, S, n, C, EPI_NONE, 0);
        snprintf(w64, sizeof(w64), "forward BT=%d C=%d OC=%d%s gelu%s: out = GELU(its pre_gelu)", BT, C, OC,
                 with_bias ? " bias" : "", mode);
        compare_gelu_epilogue(w64, out, pre, n, 1);
        snprintf(w64, sizeof(w64), "forward BT=%d C=%d OC=%d%s gelu: matmul_forward_naive_cpu out = GELU(its pre_gelu)",
                 BT, C, OC, with_bias ? " bias" : "");
        compare_gelu_epilogue(w64, out_ref, pre_ref, n, 0);
        free(pre);
    }
    free(out); free(pre64); free(out64);
    free(inp); free(w); free(bias); free(out_ref); free(pre_ref); free(S); free(ainp); free(aw); free(abias);
    device_free(d_inp); device_free(d_w); device_free(d_bias); device_free(d_out); device_free(d_pre);
}

static void test_backward(int BT, int C, int OC, int with_dbias, int with_gelu, cudaStream_t s) {
    float* dout = rand_host((size_t)BT * OC, 1.0f);
    float* inp = rand_host((size_t)BT * C, 1.0f);
    float* w = rand_host((size_t)OC * C, 1.0f);
    float* pre = with_gelu ? rand_host((size_t)BT * C, 3.0f) : NULL;
    float* dw0 = rand_host((size_t)OC * C, 1.0f);  // gradients accumulate onto these
    float* db0 = with_dbias ? rand_host(OC, 1.0f) : NULL;
    size_t nin = (size_t)BT * C, nw = (size_t)OC * C;
    // reference, and the magnitudes: the same loops on |inputs| (dGELU off: S bounds the product)
    float* dinp_ref = (float*)mallocCheck(nin * sizeof(float));
    float* dinp_x = (float*)mallocCheck(nin * sizeof(float));  // dout @ weight before gelu'
    float* dw_ref = (float*)mallocCheck(nw * sizeof(float));
    float* db_ref = (float*)mallocCheck(OC * sizeof(float));
    memcpy(dw_ref, dw0, nw * sizeof(float));
    if (with_dbias) memcpy(db_ref, db0, OC * sizeof(float));
    matmul_backward_naive_cpu(dinp_ref, dw_ref, with_dbias ? db_ref : NULL, dout, inp, w, pre, BT, C, OC);
    float* scratch_w = (float*)mallocCheck(nw * sizeof(float));
    memset(scratch_w, 0, nw * sizeof(float));
    matmul_backward_naive_cpu(dinp_x, scratch_w, NULL, dout, inp, w, NULL, BT, C, OC);
    float *adout = abs_copy(dout, (size_t)BT * OC), *ainp = abs_copy(inp, nin), *aw = abs_copy(w, nw);
    float* S_in = (float*)mallocCheck(nin * sizeof(float));
    float* S_w = abs_copy(dw0, nw);
    float* S_b = (float*)mallocCheck(OC * sizeof(float));
    for (int o = 0; o < OC; o++) S_b[o] = with_dbias ? fabsf(db0[o]) : 0.0f;
    matmul_backward_naive_cpu(S_in, S_w, S_b, adout, ainp, aw, NULL, BT, C, OC);

    floatX *d_dout = to_device(dout, (size_t)BT * OC), *d_inp = to_device(inp, nin), *d_w = to_device(w, nw);
    floatX *d_pre = to_device(pre, nin), *d_dw = to_device(dw0, nw), *d_db = to_device(db0, OC);
    floatX* d_dinp = dev_alloc(nin);
    poison(d_dinp, nin);
    float* d_scratch = NULL;
#if LLM_HAS_KERNELS
    d_scratch = (float*)device_malloc((size_t)MATMUL_DBIAS_MAX_SPLITS * OC * sizeof(float), MEM_WORKSPACE);
#endif
    matmul_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_scratch, d_pre, BT, C, OC, s);
    device_synchronize();
    float* dinp = download(d_dinp, nin);
    float* dw = download(d_dw, nw);
    char what[160];
#if LLM_HAS_KERNELS
    const char* mode = with_gelu ? (llm_ctx.matmul_fuse_gelu ? " fused" : " unfused") : "";
#else
    const char* mode = "";
#endif
    snprintf(what, sizeof(what), "backward BT=%d C=%d OC=%d%s%s%s: dinp", BT, C, OC, with_dbias ? " dbias" : "",
             with_gelu ? " dgelu" : "", mode);
    compare(what, dinp, dinp_ref, with_gelu ? dinp_x : NULL, S_in, nin, OC);
    // float64: dinp = (dout @ weight) * gelu'(pre), dweight = dw0 + dout^T @ inp, dbias = db0 + column sums
    double* prod64 = (double*)mallocCheck(nin * sizeof(double));
    double* dinp64 = (double*)mallocCheck(nin * sizeof(double));
    double* dw64 = (double*)mallocCheck(nw * sizeof(double));
    double* db64 = (double*)mallocCheck(OC * sizeof(double));
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        double* acc = prod64 + (size_t)bt * C;
        for (int i = 0; i < C; i++) acc[i] = 0.0;
        for (int o = 0; o < OC; o++) {
            double d = dout[(size_t)bt * OC + o];
            for (int i = 0; i < C; i++) acc[i] += d * (double)w[(size_t)o * C + i];
        }
        for (int i = 0; i < C; i++)
            dinp64[(size_t)bt * C + i] = with_gelu ? acc[i] * gelu_grad64(pre[(size_t)bt * C + i]) : acc[i];
    }
    #pragma omp parallel for
    for (int o = 0; o < OC; o++) {
        double* acc = dw64 + (size_t)o * C;
        for (int i = 0; i < C; i++) acc[i] = dw0[(size_t)o * C + i];
        double sb = with_dbias ? db0[o] : 0.0;
        for (int bt = 0; bt < BT; bt++) {
            double d = dout[(size_t)bt * OC + o];
            sb += d;
            for (int i = 0; i < C; i++) acc[i] += d * (double)inp[(size_t)bt * C + i];
        }
        db64[o] = sb;
    }
    char w64[200];
    Epi epi = with_gelu ? EPI_DGELU : EPI_NONE;
    snprintf(w64, sizeof(w64), "%s vs float64", what);
    compare64(w64, dinp, dinp64, prod64, pre, S_in, nin, OC, epi, 1);
    snprintf(w64, sizeof(w64), "%s: matmul_backward_naive_cpu vs float64", what);
    compare64(w64, dinp_ref, dinp64, prod64, pre, S_in, nin, OC, epi, 0);
    snprintf(what, sizeof(what), "backward BT=%d C=%d OC=%d%s%s%s: dweight (accumulated)", BT, C, OC,
             with_dbias ? " dbias" : "", with_gelu ? " dgelu" : "", mode);
    compare(what, dw, dw_ref, NULL, S_w, nw, BT);
    snprintf(w64, sizeof(w64), "%s vs float64", what);
    compare64(w64, dw, dw64, dw64, NULL, S_w, nw, BT, EPI_NONE, 1);
    snprintf(w64, sizeof(w64), "%s: matmul_backward_naive_cpu vs float64", what);
    compare64(w64, dw_ref, dw64, dw64, NULL, S_w, nw, BT, EPI_NONE, 0);
    if (with_dbias) {
        float* db = download(d_db, OC);
        snprintf(what, sizeof(what), "backward BT=%d C=%d OC=%d: dbias (accumulated)", BT, C, OC);
        compare(what, db, db_ref, NULL, S_b, OC, BT);
        snprintf(w64, sizeof(w64), "%s vs float64", what);
        compare64(w64, db, db64, db64, NULL, S_b, OC, BT, EPI_NONE, 1);
        snprintf(w64, sizeof(w64), "%s: matmul_backward_naive_cpu vs float64", what);
        compare64(w64, db_ref, db64, db64, NULL, S_b, OC, BT, EPI_NONE, 0);
        // determinism: the same call from the same state gives the same bits
        upload(d_db, db0, OC);
        upload(d_dw, dw0, nw);
        matmul_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_scratch, d_pre, BT, C, OC, s);
        device_synchronize();
        float* db2 = download(d_db, OC);
        check(memcmp(db, db2, OC * sizeof(float)) == 0, "backward BT=%d C=%d OC=%d: dbias bitwise identical on a rerun", BT, C, OC);
        free(db); free(db2);
    }
    free(dinp); free(dw); free(prod64); free(dinp64); free(dw64); free(db64);
    free(dout); free(inp); free(w); free(pre); free(dw0); free(db0); free(dinp_ref); free(dinp_x); free(dw_ref);
    free(db_ref); free(scratch_w); free(adout); free(ainp); free(aw); free(S_in); free(S_w); free(S_b);
    device_free(d_dout); device_free(d_inp); device_free(d_w); device_free(d_pre); device_free(d_dw); device_free(d_db);
    device_free(d_dinp); device_free(d_scratch);
}

// ----------------------------------------------------------------------------
// matmul_batched: attention-like strided products and the epilogues

typedef struct {
    const char* name;
    int M, N, K, batch;
    bool transA, transB;
    int lda, ldb, ldc;       // row strides, >= the stored row length
    size_t sA, sB, sC;       // batch strides
    float alpha, beta;
    int bias;
    MatmulEpilogue epi;
    int offset;              // elements: A, B, C start this far into their buffers (misaligned, as
                             // attention's sub-matrices are)
} BatchedCase;

static void test_batched(BatchedCase t, cudaStream_t s) {
    size_t na = t.sA * (t.batch - 1) + (size_t)(t.transA ? t.K : t.M) * t.lda;
    size_t nb = t.sB * (t.batch - 1) + (size_t)(t.transB ? t.N : t.K) * t.ldb;
    size_t nc = t.sC * (t.batch - 1) + (size_t)t.M * t.ldc;
    size_t naux = (size_t)t.batch * t.M * t.N;
    float* a = rand_host(na, 1.0f);
    float* b = rand_host(nb, 1.0f);
    float* bias = t.bias ? rand_host(t.N, 1.0f) : NULL;
    float* aux_in = t.epi == MATMUL_EPILOGUE_DGELU ? rand_host(naux, 3.0f) : NULL;
    // C: old values inside the matrices when beta != 0, poison everywhere else
    float* c0 = (float*)mallocCheck(nc * sizeof(float));
    floatX* c0x = (floatX*)mallocCheck(nc * sizeof(floatX));
    memset((void*)c0x, 0xFF, nc * sizeof(floatX));
    for (size_t q = 0; q < nc; q++) c0[q] = NAN;
    for (int bi = 0; bi < t.batch; bi++)
        for (int i = 0; i < t.M; i++)
            for (int j = 0; j < t.N; j++) {
                size_t q = bi * t.sC + (size_t)i * t.ldc + j;
                if (t.beta != 0.0f) { c0[q] = (float)(floatX)rnd(); c0x[q] = (floatX)c0[q]; }
            }
    // reference and magnitudes (|alpha|, |beta|, the loops on |inputs|, no epilogue)
    float* c_ref = (float*)mallocCheck(nc * sizeof(float));
    memcpy(c_ref, c0, nc * sizeof(float));
    float* aux_ref = (float*)mallocCheck(naux * sizeof(float));
    if (aux_in) memcpy(aux_ref, aux_in, naux * sizeof(float));
    matmul_batched_naive_cpu(c_ref, a, b, bias, aux_ref, t.M, t.N, t.K, t.transA, t.transB, t.lda, t.ldb, t.ldc,
                             t.batch, t.sA, t.sB, t.sC, t.alpha, t.beta, t.epi);
    float* x_ref = (float*)mallocCheck(nc * sizeof(float));  // the pre-activation, for the tolerance
    memcpy(x_ref, c0, nc * sizeof(float));
    matmul_batched_naive_cpu(x_ref, a, b, bias, NULL, t.M, t.N, t.K, t.transA, t.transB, t.lda, t.ldb, t.ldc,
                             t.batch, t.sA, t.sB, t.sC, t.alpha, t.beta, MATMUL_EPILOGUE_NONE);
    float *aa = abs_copy(a, na), *ab = abs_copy(b, nb), *abias = abs_copy(bias, t.N), *S = abs_copy(c0, nc);
    matmul_batched_naive_cpu(S, aa, ab, abias, NULL, t.M, t.N, t.K, t.transA, t.transB, t.lda, t.ldb, t.ldc,
                             t.batch, t.sA, t.sB, t.sC, fabsf(t.alpha), fabsf(t.beta), MATMUL_EPILOGUE_NONE);

    floatX* d_a0 = dev_alloc(na + t.offset);
    floatX* d_b0 = dev_alloc(nb + t.offset);
    floatX* d_c0 = dev_alloc(nc + t.offset);
    floatX *d_a = d_a0 + t.offset, *d_b = d_b0 + t.offset, *d_c = d_c0 + t.offset, *d_bias = to_device(bias, t.N);
    upload(d_a, a, na);
    upload(d_b, b, nb);
    copy_to_device(d_c, c0x, nc * sizeof(floatX));
    floatX* d_aux = NULL;
    if (t.epi == MATMUL_EPILOGUE_DGELU) d_aux = to_device(aux_in, naux);
    if (t.epi == MATMUL_EPILOGUE_GELU) { d_aux = dev_alloc(naux); poison(d_aux, naux); }
    matmul_batched(d_c, d_a, d_b, d_bias, d_aux, t.M, t.N, t.K, t.transA, t.transB, t.lda, t.ldb, t.ldc, t.batch,
                   t.sA, t.sB, t.sC, t.alpha, t.beta, t.epi, s);
    device_synchronize();
    float* c = download(d_c, nc);
    floatX* craw = (floatX*)mallocCheck(nc * sizeof(floatX));
    copy_to_host(craw, d_c, nc * sizeof(floatX));
    // gather the matrix elements; the gaps must still be poison
    size_t n = (size_t)t.batch * t.M * t.N, k = 0, gaps_bad = 0;
    float *g = (float*)mallocCheck(n * sizeof(float)), *r = (float*)mallocCheck(n * sizeof(float));
    float *xs = (float*)mallocCheck(n * sizeof(float)), *Ss = (float*)mallocCheck(n * sizeof(float));
    char* inside = (char*)calloc(nc, 1);
    for (int bi = 0; bi < t.batch; bi++)
        for (int i = 0; i < t.M; i++)
            for (int j = 0; j < t.N; j++, k++) {
                size_t q = bi * t.sC + (size_t)i * t.ldc + j;
                g[k] = c[q]; r[k] = c_ref[q]; Ss[k] = S[q];
                xs[k] = t.epi != MATMUL_EPILOGUE_NONE ? x_ref[q] : 0.0f;
                inside[q] = 1;
            }
    for (size_t q = 0; q < nc; q++) if (!inside[q] && !is_poison(craw, q)) gaps_bad++;
    char what[200];
#if LLM_HAS_KERNELS
    const char* mode = t.epi != MATMUL_EPILOGUE_NONE ? (llm_ctx.matmul_fuse_gelu ? " fused" : " unfused") : "";
#else
    const char* mode = "";
#endif
    snprintf(what, sizeof(what), "batched %s M=%d N=%d K=%d batch=%d op=%c%c ld=(%d,%d,%d) alpha=%g beta=%g%s%s%s%s",
             t.name, t.M, t.N, t.K, t.batch, t.transA ? 'T' : 'N', t.transB ? 'T' : 'N', t.lda, t.ldb, t.ldc, t.alpha,
             t.beta, t.bias ? " bias" : "", t.epi == MATMUL_EPILOGUE_GELU ? " gelu" : t.epi == MATMUL_EPILOGUE_DGELU ? " dgelu" : "",
             t.offset ? " misaligned" : "", mode);
    compare(what, g, r, t.epi != MATMUL_EPILOGUE_NONE ? xs : NULL, Ss, n, t.K);
    check(gaps_bad == 0, "%s: %zu writes outside the matrices", what, gaps_bad);
    // float64, in the packed (batch, M, N) order of g and r: p = alpha op(A) op(B) + beta C + bias, then
    // the epilogue (GELU of p, or p gelu'(aux))
    double* p64 = (double*)mallocCheck(n * sizeof(double));
    double* y64 = (double*)mallocCheck(n * sizeof(double));
    for (int bi = 0; bi < t.batch; bi++) {
        const float* ab = a + bi * t.sA;
        const float* bb = b + bi * t.sB;
        #pragma omp parallel for
        for (int i = 0; i < t.M; i++)
            for (int j = 0; j < t.N; j++) {
                double acc = 0.0;
                for (int q = 0; q < t.K; q++) {
                    double av = t.transA ? ab[(size_t)q * t.lda + i] : ab[(size_t)i * t.lda + q];
                    double bv = t.transB ? bb[(size_t)j * t.ldb + q] : bb[(size_t)q * t.ldb + j];
                    acc += av * bv;
                }
                double x = (double)t.alpha * acc;
                if (t.beta != 0.0f) x += (double)t.beta * c0[bi * t.sC + (size_t)i * t.ldc + j];
                if (bias != NULL) x += bias[j];
                size_t k2 = ((size_t)bi * t.M + i) * t.N + j;
                p64[k2] = x;
                y64[k2] = t.epi == MATMUL_EPILOGUE_GELU ? gelu64(x)
                          : t.epi == MATMUL_EPILOGUE_DGELU ? x * gelu_grad64(aux_in[k2]) : x;
            }
    }
    Epi epi = t.epi == MATMUL_EPILOGUE_GELU ? EPI_GELU : t.epi == MATMUL_EPILOGUE_DGELU ? EPI_DGELU : EPI_NONE;
    char w64[320];
    snprintf(w64, sizeof(w64), "%s vs float64", what);
    compare64(w64, g, y64, p64, aux_in, Ss, n, t.K, epi, 1);
    snprintf(w64, sizeof(w64), "%s: matmul_batched_naive_cpu vs float64", what);
    compare64(w64, r, y64, p64, aux_in, Ss, n, t.K, epi, 0);
    if (t.epi == MATMUL_EPILOGUE_GELU) {
        float* aux = download(d_aux, naux);
        float* Saux = (float*)mallocCheck(naux * sizeof(float));
        for (int bi = 0, kk = 0; bi < t.batch; bi++)
            for (int i = 0; i < t.M; i++)
                for (int j = 0; j < t.N; j++, kk++) Saux[kk] = S[bi * t.sC + (size_t)i * t.ldc + j];
        snprintf(w64, sizeof(w64), "%s: out = GELU(its aux)", what);
        compare_gelu_epilogue(w64, g, aux, n, 1);
        snprintf(w64, sizeof(w64), "%s: matmul_batched_naive_cpu out = GELU(its aux)", what);
        compare_gelu_epilogue(w64, r, aux_ref, n, 0);
        strncat(what, ": aux", sizeof(what) - strlen(what) - 1);
        compare(what, aux, aux_ref, NULL, Saux, naux, t.K);
        snprintf(w64, sizeof(w64), "%s vs float64", what);
        compare64(w64, aux, p64, p64, NULL, Saux, naux, t.K, EPI_NONE, 1);
        free(aux); free(Saux);
    }
    free(p64); free(y64);
    free(a); free(b); free(bias); free(aux_in); free(c0); free(c0x); free(c_ref); free(aux_ref); free(x_ref);
    free(aa); free(ab); free(abias); free(S); free(c); free(craw); free(g); free(r); free(xs); free(Ss); free(inside);
    device_free(d_a0); device_free(d_b0); device_free(d_bias); device_free(d_c0); device_free(d_aux);
}

static void batched_suite(cudaStream_t s) {
    // attention with B*NH = 6, T = 33, hs = 16, q/k/v interleaved in rows of 3*hs (lda = 48)
    const int T = 33, hs = 16, BH = 6;
    BatchedCase qk = {"q@k^T", T, T, hs, BH, false, true, 3 * hs, 3 * hs, T, (size_t)T * 3 * hs, (size_t)T * 3 * hs,
                      (size_t)T * T + 5, 0.25f, 0.0f, 0, MATMUL_EPILOGUE_NONE, 0};
    test_batched(qk, s);
    BatchedCase av = {"att@v", T, hs, T, BH, false, false, T, 3 * hs, hs + 3, (size_t)T * T, (size_t)T * 3 * hs,
                      (size_t)T * (hs + 3), 1.0f, 0.0f, 0, MATMUL_EPILOGUE_NONE, 0};
    test_batched(av, s);
    BatchedCase dv = {"att^T@dout", T, hs, T, BH, true, false, T, hs, hs, (size_t)T * T, (size_t)T * hs, (size_t)T * hs,
                      1.0f, 1.0f, 0, MATMUL_EPILOGUE_NONE, 0};
    test_batched(dv, s);
    // attention's chunked products start at element offsets: 2-byte aligned in BF16
    BatchedCase off = qk;
    off.offset = 1;
    test_batched(off, s);
    off = dv;
    off.offset = 3;
    off.sA += 1;
    test_batched(off, s);
    BatchedCase tt = {"A^T@B^T", 7, 9, 5, 3, true, true, 7, 5, 9, 40, 50, 70, -0.5f, 0.5f, 0, MATMUL_EPILOGUE_NONE, 0};
    test_batched(tt, s);
    // epilogues: N = 24 is fusable in cuBLASLt (aux ld % 8 == 0), N = 20 is not (the kernel path)
    BatchedCase gb = {"gelu", 20, 24, 40, 3, false, true, 40, 40, 24, 20 * 40, 24 * 40, 20 * 24, 1.0f, 0.0f, 1, MATMUL_EPILOGUE_GELU, 0};
    test_batched(gb, s);
    gb.N = 20; gb.ldb = 40; gb.ldc = 21; gb.sB = 20 * 40; gb.sC = 20 * 21; gb.bias = 0;
    test_batched(gb, s);
    BatchedCase dg = {"dgelu", 20, 24, 40, 3, false, false, 40, 24, 24, 20 * 40, 40 * 24, 20 * 24, 1.0f, 0.0f, 0, MATMUL_EPILOGUE_DGELU, 0};
    test_batched(dg, s);
    dg.N = 20; dg.ldb = 20; dg.ldc = 20; dg.sB = 40 * 20; dg.sC = 20 * 20;
    test_batched(dg, s);
    // many small products (the CPU build runs them one per thread) and one large
    BatchedCase many = {"many", 16, 16, 16, 37, false, true, 16, 16, 16, 256, 256, 256, 1.0f, 0.0f, 0, MATMUL_EPILOGUE_NONE, 0};
    test_batched(many, s);
    BatchedCase big = {"big", 200, 300, 256, 2, true, false, 200, 300, 300, 256 * 200, 256 * 300, 200 * 300, 1.0f, 0.0f, 1, MATMUL_EPILOGUE_NONE, 0};
    test_batched(big, s);
}

static const char* USAGE =
    "[SEED]\n"
    "Tests llm/ops/matmul.cuh's launchers (forward, backward, batched) against its plain loops, outputs poisoned\n"
    "before each call.\n"    "  SEED  the random inputs' seed, to repeat a run (default: from the clock; printed)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : ((uint64_t)time(NULL) * 2654435761ull) ^ (uint64_t)clock();
    g_rng = seed;
#if LLM_BUILD_CPU
    const char* build = "CPU (OpenBLAS)";
#else
    const char* build = "emulated CUDA";
#endif
    printf("test_matmul: %s build, floatX %s, seed %llu\n", build, PRECISION_MODE, (unsigned long long)seed);
    context_init();
    cudaStream_t s = llm_ctx.stream;
    // (BT, C, OC): odd sizes, sizes where 128-bit packs apply, and a GPT-2 small MLP slice
#if defined(EMU_RACECHECK) && EMU_RACECHECK
    // racecheck builds instrument every host load and store too, and the CPU references of the GPT-2
    // slice cost ~50 s there; the smaller shapes run the same kernels (and their 128-bit paths)
    const int shapes[][3] = {{1, 1, 1}, {7, 33, 100}, {33, 100, 129}, {64, 128, 96}};
#else
    const int shapes[][3] = {{1, 1, 1}, {7, 33, 100}, {33, 100, 129}, {64, 128, 96}, {128, 768, 3072}};
#endif
    const int nshapes = sizeof(shapes) / sizeof(shapes[0]);
#if LLM_HAS_KERNELS
    const int fuse_modes = 2;  // cuBLASLt's fused GELU/dGELU, then the separate kernels
#else
    const int fuse_modes = 1;
#endif
    for (int si = 0; si < nshapes; si++) {
        int BT = shapes[si][0], C = shapes[si][1], OC = shapes[si][2];
        test_forward(BT, C, OC, 0, 0, s);
        test_forward(BT, C, OC, 1, 0, s);
        test_backward(BT, C, OC, 1, 0, s);
        test_backward(BT, C, OC, 0, 0, s);
        for (int f = 0; f < fuse_modes; f++) {
#if LLM_HAS_KERNELS
            llm_ctx.matmul_fuse_gelu = f == 0;
#endif
            test_forward(BT, C, OC, 1, 1, s);
            test_forward(BT, C, OC, 0, 1, s);
            test_backward(BT, C, OC, 1, 1, s);
        }
#if LLM_HAS_KERNELS
        llm_ctx.matmul_fuse_gelu = 1;
#endif
    }
    for (int f = 0; f < fuse_modes; f++) {
#if LLM_HAS_KERNELS
        llm_ctx.matmul_fuse_gelu = f == 0;
#endif
        batched_suite(s);
    }
    context_free();
    return test_summary("test_matmul");
}
