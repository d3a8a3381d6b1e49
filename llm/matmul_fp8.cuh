// matmul_fp8.cuh: TEMPORARY CPU-only stand-in with the interface of the FP8 GEMM file (replaced at merge)
#pragma once
#include "common.h"
#include "context.h"
#include "fp8.cuh"
#include "gelu.cuh"
#if LLM_BUILD_CPU || LLM_BUILD_EMU
#include <cblas.h>
#endif

typedef enum { FP8_SCALE_TENSOR = 0, FP8_SCALE_1x128, FP8_SCALE_128x128, FP8_SCALE_MX32 } Fp8Scaling;
typedef struct {
    uint8_t* q; float* scale; uint8_t* e8m0; int rows, K, fmt; Fp8Scaling scaling;
} Fp8Matrix;

static void fp8_matrix_alloc(Fp8Matrix* m, size_t max_elems, MemKind kind) {
    memset(m, 0, sizeof(*m));
    m->q = (uint8_t*)device_malloc(max_elems, kind);
    m->scale = (float*)device_malloc((max_elems / 32 + 64) * sizeof(float), kind);
    m->e8m0 = (uint8_t*)device_malloc(max_elems / 32 + 64, kind);
}
static void fp8_matrix_free(Fp8Matrix* m) { device_free(m->q); device_free(m->scale); device_free(m->e8m0); }
static void fp8_amax_floatx(float* amax, const floatX* x, size_t n, cudaStream_t stream) {
    (void)stream; float m = 0.0f; for (size_t i = 0; i < n; i++) m = fp8_nanmax(m, fabsf((float)x[i])); *amax = m;
}
static void fp8_matrix_quantize(Fp8Matrix* m, const floatX* x, int transpose, const float* tensor_scale, cudaStream_t stream) {
    (void)stream;
    int rows = m->rows, K = m->K;
    float* tmp = (float*)mallocCheck((size_t)rows * K * sizeof(float));
    for (int k = 0; k < K; k++) for (int r = 0; r < rows; r++)
        tmp[(size_t)r * K + k] = (float)(transpose ? x[(size_t)k * rows + r] : x[(size_t)r * K + k]);
    const float* src = tmp;
    switch (m->scaling) {
        case FP8_SCALE_TENSOR: m->scale[0] = *tensor_scale; fp8_quantize_cpu(m->q, src, (size_t)rows * K, *tensor_scale, m->fmt); break;
        case FP8_SCALE_1x128: fp8_quantize_1x128_cpu(m->q, m->scale, src, rows, K, m->fmt); break;
        case FP8_SCALE_128x128: fp8_quantize_128x128_cpu(m->q, m->scale, src, rows, K, m->fmt); break;
        case FP8_SCALE_MX32: fp8_quantize_mx_cpu(m->q, m->e8m0, src, rows, K, m->fmt); break;
    }
    free(tmp);
}
static void fp8_matrix_dequant(float* out, const Fp8Matrix* m) {
    int nt = (m->K + 127) / 128, nb = (m->K + 31) / 32;
    for (int r = 0; r < m->rows; r++) for (int k = 0; k < m->K; k++) {
        size_t i = (size_t)r * m->K + k; uint8_t q = m->q[i];
        float v;
        switch (m->scaling) {
            case FP8_SCALE_TENSOR: v = fp8_decode(q, m->fmt) * fp8_div_rn(1.0f, m->scale[0]); break;
            case FP8_SCALE_1x128: v = fp8_decode(q, m->fmt) * fp8_div_rn(1.0f, m->scale[(size_t)r * nt + k / 128]); break;
            case FP8_SCALE_128x128: v = fp8_decode(q, m->fmt) * fp8_div_rn(1.0f, m->scale[(size_t)(r / 128) * nt + k / 128]); break;
            default: v = fp8_mx_decode(q, m->e8m0[(size_t)r * nb + k / 32], m->fmt); break;
        }
        out[i] = v;
    }
}
static void matmul_fp8(floatX* out, floatX* pre_gelu, const floatX* dgelu_pre, const Fp8Matrix* a, const Fp8Matrix* b,
                       const floatX* bias, int accumulate, cudaStream_t stream) {
    (void)stream;
    int M = a->rows, N = b->rows, K = a->K;
    if (b->K != K) fatal("matmul_fp8: K mismatch %d vs %d", a->K, b->K);
    float* da = (float*)mallocCheck((size_t)M * K * 4); float* db = (float*)mallocCheck((size_t)N * K * 4);
    fp8_matrix_dequant(da, a); fp8_matrix_dequant(db, b);
    float* c = (float*)mallocCheck((size_t)M * N * 4);
#if LLM_BUILD_CUDA
    fatal("matmul_fp8: the stand-in has no CUDA path");
#else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, da, K, db, K, 0.0f, c, N);
#endif
    for (int i = 0; i < M; i++) for (int j = 0; j < N; j++) {
        size_t o = (size_t)i * N + j; float v = c[o];
        if (bias) v += (float)bias[j];
        if (accumulate) v += (float)out[o];
        if (pre_gelu) { pre_gelu[o] = (floatX)v; v = gelu_scalar((float)pre_gelu[o]); }
        if (dgelu_pre) v *= gelu_grad_scalar((float)dgelu_pre[o]);
        out[o] = (floatX)v;
    }
    free(da); free(db); free(c);
}
static const char* matmul_fp8_path(Fp8Scaling sa, Fp8Scaling sb, int fa, int fb) {
    (void)sa; (void)sb; (void)fa; (void)fb; return "fallback: dequantize + FP32 GEMM (stand-in)";
}
