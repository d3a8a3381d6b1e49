// test_cublaslt.cu: the emulated cuBLASLt (dev/emu/cublaslt_emu.h) against a naive triple loop in
// double precision, written here from cuBLAS's column-major definition, independently of the
// emulator's code. Random shapes with odd sizes, all transpose combinations, leading dimensions
// larger than needed, strided batches, alpha/beta, every emulated epilogue, FP32/BF16 and FP8
// inputs with scales; then the misuses the emulator must refuse with an error status.
//
// Every output buffer starts as NaN. Elements the call must write are compared with the reference;
// elements it must not write (ld padding, gaps between batches) must still be NaN afterwards. With
// beta = 0, C is filled with NaN too: cuBLAS does not read C then.
//
// Tolerances (per element, u = 2^-24, the FP32 unit roundoff):
//   accumulation: the reference sums exact products in double; the emulator sums k float products
//     in float, so |err| <= (k + 1) u S, S = |alpha sA sB| sum_p |a_ip b_pj|; alpha, beta*C and bias
//     add a few more roundings: tol_pre = (k + 8) u (S + |beta sC c| + |bias|).
//   GELU/dGELU epilogue: |gelu'| <= 1.13 and |gelu''| <= 0.8 carry tol_pre through; tanhf adds a
//     few ulps: tol = 1.2 tol_pre + 16 u (|x| + |y|).
//   storage: one round-to-nearest into D's (or aux's) type: BF16 (8 significant bits) 2^-8 |y|,
//     E4M3 (4) 2^-4 |y| + 2^-10, E5M2 (3) 2^-3 |y| + 2^-17 (half the subnormal spacing), each bound
//     doubled because the value being rounded is itself inexact by tol.
//
// Usage: build/test_cublaslt [seed]     (prints the seed; the same seed reproduces the run)
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include "../dev/emu/cublaslt_emu.h"
#include "../llm/core/rand.h"
#include "test_common.h"
#include "../llm/core/usage.h"

static Rng g_rand;  // llm/core/rand.h's splitmix64, seeded from argv[1] or the clock
static uint64_t rng_u64(void) { return rng_u64(&g_rand); }
static float rng_uniform(float lo, float hi) { return lo + (hi - lo) * rng_f32(&g_rand); }
static int rng_int(int n) { return (int)(rng_u64() % (uint64_t)n); }

static const char* type_name(int t) {
    switch (t) {
        case CUDA_R_32F: return "f32";
        case CUDA_R_16BF: return "bf16";
        case CUDA_R_8F_E4M3: return "e4m3";
        case CUDA_R_8F_E5M2: return "e5m2";
        default: return "?";
    }
}
static const char* epi_name(uint32_t e) {
    switch (e) {
        case CUBLASLT_EPILOGUE_DEFAULT: return "default";
        case CUBLASLT_EPILOGUE_BIAS: return "bias";
        case CUBLASLT_EPILOGUE_GELU: return "gelu";
        case CUBLASLT_EPILOGUE_GELU_BIAS: return "gelu_bias";
        case CUBLASLT_EPILOGUE_GELU_AUX: return "gelu_aux";
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "gelu_aux_bias";
        case CUBLASLT_EPILOGUE_DGELU: return "dgelu";
        default: return "?";
    }
}

// ----------------------------------------------------------------------------
// typed buffers, written independently of the emulator's helpers

static size_t tsize(int t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF ? 2 : 1; }

static float tget(const void* p, int t, size_t i) {
    if (t == CUDA_R_32F) return ((const float*)p)[i];
    if (t == CUDA_R_16BF) { uint32_t b = (uint32_t)((const uint16_t*)p)[i] << 16; float f; memcpy(&f, &b, 4); return f; }
    __nv_fp8_storage_t s = ((const __nv_fp8_storage_t*)p)[i];
    __half_raw h = __nv_cvt_fp8_to_halfraw(s, t == CUDA_R_8F_E4M3 ? __NV_E4M3 : __NV_E5M2);
    return __half2float(__half(h));
}
static void tput(void* p, int t, size_t i, float v) {
    if (t == CUDA_R_32F) ((float*)p)[i] = v;
    else if (t == CUDA_R_16BF) ((__nv_bfloat16*)p)[i] = __float2bfloat16(v);
    else ((__nv_fp8_storage_t*)p)[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, t == CUDA_R_8F_E4M3 ? __NV_E4M3 : __NV_E5M2);
}
// NaN of each type, as a byte pattern: 0xFF bytes are NaN in f32, bf16, e4m3 (S.1111.111) and e5m2
static void* nan_buffer(int t, size_t n) {
    void* p = malloc(n * tsize(t) + 16);
    memset(p, 0xFF, n * tsize(t) + 16);
    return p;
}
static int is_nan_pattern(const void* p, int t, size_t i) {
    const unsigned char* b = (const unsigned char*)p + i * tsize(t);
    for (size_t q = 0; q < tsize(t); q++) if (b[q] != 0xFF) return 0;
    return 1;
}
static void* random_buffer(int t, size_t n, float lo, float hi) {
    void* p = nan_buffer(t, n);
    for (size_t i = 0; i < n; i++) tput(p, t, i, rng_uniform(lo, hi));
    return p;
}
// FP8 needs 16-byte aligned matrices: the emulator checks it; aligned_alloc gives it
static void* aligned_copy(void* p, size_t bytes) {
    void* q = aligned_alloc(64, (bytes + 63) / 64 * 64);
    memcpy(q, p, bytes);
    free(p);
    return q;
}

static double gelu_d(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_grad_d(double x) {
    double s = 0.7978845608028654, u = s * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
}
static double type_max(int t) { return t == CUDA_R_8F_E4M3 ? 448.0 : t == CUDA_R_8F_E5M2 ? 57344.0 : INFINITY; }
// rounding tolerance of storing y in type t (see the header comment)
static double store_tol(int t, double y) {
    y = fabs(y);
    switch (t) {
        case CUDA_R_16BF: return 2.0 * ldexp(y, -8) + 1e-37;
        case CUDA_R_8F_E4M3: return 2.0 * (ldexp(y, -4) + ldexp(1.0, -10));
        case CUDA_R_8F_E5M2: return 2.0 * (ldexp(y, -3) + ldexp(1.0, -17));
        default: return 0.0;
    }
}

// ----------------------------------------------------------------------------
// one matmul case

typedef struct {
    int m, n, k;
    int transa, transb;          // CUBLAS_OP_N / CUBLAS_OP_T
    int pad_a, pad_b, pad_c, pad_d;  // ld = rows + pad
    int batch;
    int atype, btype, ctype, dtype;
    uint32_t epi;
    float alpha, beta;
    int in_place;                // C == D
    int bias_batched;            // BIAS_BATCH_STRIDE = m (else 0: one bias for all batches)
    float scale_a, scale_b, scale_c, scale_d;  // 0: not set
    int amax;                    // request AMAX_D
} Case;

static int align_ld(int ld, int t) {  // FP8 matmuls need ld * size % 16 == 0
    int q = 16 / (int)tsize(t);
    return (ld + q - 1) / q * q;
}

static void run_case(cublasLtHandle_t h, Case c, const char* label) {
    int fp8 = c.atype == CUDA_R_8F_E4M3 || c.atype == CUDA_R_8F_E5M2;
    int arows = c.transa == CUBLAS_OP_N ? c.m : c.k, acols = c.transa == CUBLAS_OP_N ? c.k : c.m;
    int brows = c.transb == CUBLAS_OP_N ? c.k : c.n, bcols = c.transb == CUBLAS_OP_N ? c.n : c.k;
    int64_t lda = arows + c.pad_a, ldb = brows + c.pad_b, ldc = c.m + c.pad_c, ldd = c.m + c.pad_d;
    if (fp8) { lda = align_ld((int)lda, c.atype); ldb = align_ld((int)ldb, c.btype); ldc = align_ld((int)ldc, c.ctype); ldd = align_ld((int)ldd, c.dtype); }
    if (c.in_place) { c.ctype = c.dtype; ldc = ldd; }
    // batch strides: a matrix plus a gap (the gap must stay untouched in D)
    int64_t sa = lda * acols + 3 * (fp8 ? 16 : 1), sb = ldb * bcols + 5 * (fp8 ? 16 : 1);
    int64_t sd = ldd * c.n + 7 * (fp8 ? 16 : 1), sc = c.in_place ? sd : ldc * c.n + 2 * (fp8 ? 16 : 1);
    if (c.batch == 1) { sa = sb = sc = sd = 0; }
    size_t na = (size_t)(c.batch == 1 ? lda * acols : sa * c.batch), nb = (size_t)(c.batch == 1 ? ldb * bcols : sb * c.batch);
    size_t nc = (size_t)(c.batch == 1 ? ldc * c.n : sc * c.batch), nd = (size_t)(c.batch == 1 ? ldd * c.n : sd * c.batch);
    float range = fp8 ? 4.0f : 1.0f;
    void* A = aligned_copy(random_buffer(c.atype, na, -range, range), na * tsize(c.atype));
    void* B = aligned_copy(random_buffer(c.btype, nb, -range, range), nb * tsize(c.btype));
    void* D = aligned_copy(nan_buffer(c.dtype, nd), nd * tsize(c.dtype));
    void* C = NULL;
    if (c.in_place) {
        C = D;
        if (c.beta != 0.0f) {  // D holds the old values inside the matrices, NaN in the gaps
            for (int b = 0; b < c.batch; b++) for (int j = 0; j < c.n; j++) for (int i = 0; i < c.m; i++)
                tput(D, c.dtype, (size_t)(b * sd + i + j * ldd), rng_uniform(-1, 1));
        }
    } else {
        C = c.beta != 0.0f ? random_buffer(c.ctype, nc, -1, 1) : nan_buffer(c.ctype, nc);
        C = aligned_copy(C, nc * tsize(c.ctype));
    }
    void* Cold = malloc(nc * tsize(c.ctype) + 16);  // C before the call (in-place overwrites it)
    memcpy(Cold, C, nc * tsize(c.ctype));
    int bias_type = fp8 ? CUDA_R_16BF : c.dtype;
    int has_bias = c.epi == CUBLASLT_EPILOGUE_BIAS || c.epi == CUBLASLT_EPILOGUE_GELU_BIAS || c.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int aux_out = c.epi == CUBLASLT_EPILOGUE_GELU_AUX || c.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int aux_in = c.epi == CUBLASLT_EPILOGUE_DGELU;
    int gelu = c.epi == CUBLASLT_EPILOGUE_GELU || c.epi == CUBLASLT_EPILOGUE_GELU_BIAS || aux_out;
    int64_t bias_stride = c.bias_batched ? c.m : 0;
    void* bias = has_bias ? random_buffer(bias_type, (size_t)c.m * (c.bias_batched ? c.batch : 1), -1, 1) : NULL;
    int64_t aux_ld = (c.m + 7) / 8 * 8 + 8 * rng_int(2), aux_stride = c.batch == 1 ? 0 : aux_ld * c.n + 8;
    size_t naux = (size_t)(c.batch == 1 ? aux_ld * c.n : aux_stride * c.batch);
    void* aux = aux_out ? nan_buffer(c.dtype, naux) : aux_in ? random_buffer(c.dtype, naux, -3, 3) : NULL;
    float amax_d = NAN;

    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    int st = 0;
    st |= cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    st |= cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &c.transa, sizeof(c.transa));
    st |= cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &c.transb, sizeof(c.transb));
    st |= cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epi, sizeof(c.epi));
    if (has_bias) {
        st |= cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
        if (c.batch > 1) st |= cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bias_stride, sizeof(bias_stride));
    }
    if (aux != NULL) {
        st |= cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux));
        st |= cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld));
        if (c.batch > 1) st |= cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &aux_stride, sizeof(aux_stride));
    }
    float* sp[4] = {&c.scale_a, &c.scale_b, &c.scale_c, &c.scale_d};
    cublasLtMatmulDescAttributes_t sattr[4] = {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                               CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER};
    for (int q = 0; q < 4; q++) {
        if (*sp[q] != 0.0f) { const void* p = sp[q]; st |= cublasLtMatmulDescSetAttribute(desc, sattr[q], &p, sizeof(p)); }
    }
    if (c.amax) { void* p = &amax_d; st |= cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &p, sizeof(p)); }
    st |= cublasLtMatrixLayoutCreate(&la, (cudaDataType)c.atype, arows, acols, lda);
    st |= cublasLtMatrixLayoutCreate(&lb, (cudaDataType)c.btype, brows, bcols, ldb);
    st |= cublasLtMatrixLayoutCreate(&lc, (cudaDataType)c.ctype, c.m, c.n, ldc);
    st |= cublasLtMatrixLayoutCreate(&ld, (cudaDataType)c.dtype, c.m, c.n, ldd);
    if (c.batch > 1) {
        cublasLtMatrixLayout_t ls[4] = {la, lb, lc, ld};
        int64_t strides[4] = {sa, sb, sc, sd};
        for (int q = 0; q < 4; q++) {
            st |= cublasLtMatrixLayoutSetAttribute(ls[q], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &c.batch, sizeof(c.batch));
            st |= cublasLtMatrixLayoutSetAttribute(ls[q], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[q], sizeof(strides[q]));
        }
    }
    st |= cublasLtMatmulPreferenceCreate(&pref);
    uint64_t ws = 0;
    st |= cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    {   // the odd batch gaps leave later batches' matrices misaligned: declare how aligned they are
        const void* ptrs[4] = {A, B, C, D};
        int64_t strides[4] = {sa, sb, sc, sd};
        int ts[4] = {c.atype, c.btype, c.ctype, c.dtype};
        cublasLtMatmulPreferenceAttributes_t attrs[4] = {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                         CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
        for (int q = 0; q < 4; q++) {
            uintptr_t bits = (uintptr_t)ptrs[q] | (uintptr_t)(strides[q] * (int64_t)tsize(ts[q]));
            uint32_t align = 256;
            while (align > 1 && bits % align != 0) align /= 2;
            st |= cublasLtMatmulPreferenceSetAttribute(pref, attrs[q], &align, sizeof(align));
        }
    }
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    st |= cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, ld, pref, 1, &res, &nres);
    double t0 = (double)clock() / CLOCKS_PER_SEC;
    struct timespec ts0, ts1;
    clock_gettime(CLOCK_MONOTONIC, &ts0);
    if (st == 0 && nres == 1) {
        st |= cublasLtMatmul(h, desc, &c.alpha, A, la, B, lb, &c.beta, C, lc, D, ld, &res.algo, NULL, 0, 0);
    }
    clock_gettime(CLOCK_MONOTONIC, &ts1);
    (void)t0;
    double ms = (ts1.tv_sec - ts0.tv_sec) * 1e3 + (ts1.tv_nsec - ts0.tv_nsec) * 1e-6;
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc); cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);

    // the reference, element by element, and the untouched gaps
    const double u = ldexp(1.0, -24);
    double sab = (c.scale_a != 0 ? c.scale_a : 1.0) * (c.scale_b != 0 ? c.scale_b : 1.0);
    double scl = c.scale_c != 0 ? c.scale_c : 1.0, sd_ = (c.scale_d != 0 && (c.dtype == CUDA_R_8F_E4M3 || c.dtype == CUDA_R_8F_E5M2)) ? c.scale_d : 1.0;
    double worst = 0.0, amax_ref = 0.0;  // worst err/tol
    long bad = 0, gap_bad = 0;
    for (int b = 0; b < c.batch; b++) {
        for (int j = 0; j < c.n; j++) {
            for (int i = 0; i < c.m; i++) {
                double acc = 0.0, mag = 0.0;
                for (int p = 0; p < c.k; p++) {
                    size_t ai = (size_t)(b * sa) + (c.transa == CUBLAS_OP_N ? i + (size_t)p * lda : p + (size_t)i * lda);
                    size_t bi = (size_t)(b * sb) + (c.transb == CUBLAS_OP_N ? p + (size_t)j * ldb : j + (size_t)p * ldb);
                    double prod = (double)tget(A, c.atype, ai) * (double)tget(B, c.btype, bi);
                    acc += prod;
                    mag += fabs(prod);
                }
                double x = c.alpha * sab * acc;
                double M = fabs(c.alpha * sab) * mag;
                if (c.beta != 0.0f) {
                    double cv = tget(Cold, c.ctype, (size_t)(b * sc + i + j * ldc));
                    x += c.beta * scl * cv;
                    M += fabs(c.beta * scl * cv);
                }
                if (has_bias) {
                    double bv = tget(bias, bias_type, (size_t)(b * bias_stride + i));
                    x += bv;
                    M += fabs(bv);
                }
                double tol = (c.k + 8) * u * M + 1e-30;
                size_t auxi = (size_t)(b * aux_stride + i + (size_t)j * aux_ld);
                if (aux_out) {
                    double got = tget(aux, c.dtype, auxi), t = tol + store_tol(c.dtype, x);
                    double e = fabs(got - x) / t;
                    if (!(e <= 1.0)) bad++;
                    if (e > worst || e != e) worst = e != e ? INFINITY : e;
                }
                double y = x;
                if (gelu) { y = gelu_d(x); tol = 1.2 * tol + 16 * u * (fabs(x) + fabs(y)); }
                if (aux_in) {
                    double g = gelu_grad_d(tget(aux, c.dtype, auxi));
                    y = x * g;
                    tol = 1.2 * tol + 16 * u * (fabs(x) + fabs(y));
                }
                amax_ref = fmax(amax_ref, fabs(y));
                double yt = y * sd_;
                double mx = type_max(c.dtype);
                if (yt > mx) yt = mx;
                if (yt < -mx) yt = -mx;
                double got = tget(D, c.dtype, (size_t)(b * sd + i + j * ldd));
                double t = tol * sd_ + store_tol(c.dtype, yt);
                double e = fabs(got - yt) / t;
                if (!(e <= 1.0)) bad++;
                if (e > worst || e != e) worst = e != e ? INFINITY : e;
            }
        }
    }
    // gaps of D: ld padding rows, and the space between batches, must still be NaN
    for (size_t q = 0; q < nd; q++) {
        int64_t within = c.batch == 1 ? (int64_t)q : (int64_t)q % sd;
        int64_t bidx = c.batch == 1 ? 0 : (int64_t)q / sd;
        int inside = bidx < c.batch && within < ldd * c.n && (within % ldd) < c.m;
        if (!inside && !is_nan_pattern(D, c.dtype, q)) gap_bad++;
    }
    int amax_ok = 1;
    if (c.amax) amax_ok = fabs(amax_d - amax_ref) <= 1e-3 * amax_ref + 1e-6;
    char shape[256];
    snprintf(shape, sizeof(shape), "%s m=%d n=%d k=%d op=%c%c ld+=(%d,%d,%d,%d) batch=%d %s,%s->%s,%s epi=%s alpha=%.3g beta=%.3g%s%s%s",
             label, c.m, c.n, c.k, c.transa == CUBLAS_OP_N ? 'N' : 'T', c.transb == CUBLAS_OP_N ? 'N' : 'T', c.pad_a, c.pad_b,
             c.pad_c, c.pad_d, c.batch, type_name(c.atype), type_name(c.btype), type_name(c.ctype), type_name(c.dtype),
             epi_name(c.epi), c.alpha, c.beta, c.in_place ? " in-place" : "", c.scale_a != 0 ? " scaled" : "", c.amax ? " amax" : "");
    if (st != 0 || nres != 1) {
        check(0, "%s: status %d, %d algorithms", shape, st, nres);
    } else {
        check(bad == 0 && gap_bad == 0 && amax_ok, "%s: worst err/tol %.3f, %ld bad, %ld gap writes%s (%.1f ms)", shape, worst, bad, gap_bad,
              amax_ok ? "" : ", amax wrong", ms);
    }
    free(A); free(B); free(D); free(Cold);
    if (!c.in_place) free(C);
    free(bias); free(aux);
}

static Case base_case(int m, int n, int k, int t) {
    Case c;
    memset(&c, 0, sizeof(c));
    c.m = m; c.n = n; c.k = k;
    c.transa = CUBLAS_OP_N; c.transb = CUBLAS_OP_N;
    c.pad_a = rng_int(4); c.pad_b = rng_int(4); c.pad_c = rng_int(4); c.pad_d = rng_int(4);
    c.batch = 1;
    c.atype = c.btype = c.ctype = c.dtype = t;
    c.epi = CUBLASLT_EPILOGUE_DEFAULT;
    c.alpha = 1.0f;
    c.beta = 0.0f;
    return c;
}

static const int sizes[] = {1, 7, 33, 100, 129};
static int rsize(void) { return sizes[rng_int(5)]; }

// ----------------------------------------------------------------------------
// misuse: the emulator must refuse these with the status the real library gives

static cublasStatus_t try_config(cublasLtHandle_t h, int atype, int btype, int ctype, int dtype, int ta, int tb,
                                 int m, int n, int k, int64_t lda, int64_t ldb, int64_t ldd, uint32_t epi, int set_a_scale,
                                 int64_t aux_ld, int run) {
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
    static float one = 1.0f;
    static float buf[1 << 16];
    if (set_a_scale) { const void* p = &one; cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p, sizeof(p)); }
    if (aux_ld > 0) {
        void* p = buf;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p, sizeof(p));
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld));
    }
    cublasLtMatrixLayoutCreate(&la, (cudaDataType)atype, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda);
    cublasLtMatrixLayoutCreate(&lb, (cudaDataType)btype, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb);
    cublasLtMatrixLayoutCreate(&lc, (cudaDataType)ctype, m, n, ldd);
    cublasLtMatrixLayoutCreate(&ld, (cudaDataType)dtype, m, n, ldd);
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, ld, pref, 1, &res, &nres);
    if (run) {
        float alpha = 1.0f, beta = 0.0f;
        st = cublasLtMatmul(h, desc, &alpha, buf, la, buf, lb, &beta, buf, lc, buf, ld, NULL, NULL, 0, 0);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc); cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
    return st;
}

static void misuse_checks(cublasLtHandle_t h) {
    const int N = CUBLAS_OP_N, T = CUBLAS_OP_T;
    const uint32_t DEF = CUBLASLT_EPILOGUE_DEFAULT;
    cublasStatus_t st;
    st = try_config(h, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, N, N, 8, 8, 8, 8, 8, 8, DEF, 0, 0, 1);
    check(st == CUBLAS_STATUS_SUCCESS, "misuse: a valid FP32 call (NULL algo) succeeds: %s", cublasLtGetStatusName(st));
    st = try_config(h, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, N, N, 8, 8, 8, 7, 8, 8, DEF, 0, 0, 0);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "misuse: lda < rows refused: %s", cublasLtGetStatusName(st));
    st = try_config(h, CUDA_R_16BF, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, N, N, 8, 8, 8, 8, 8, 8, DEF, 0, 0, 0);
    check(st == CUBLAS_STATUS_NOT_SUPPORTED, "misuse: mixed bf16 x f32 inputs refused: %s", cublasLtGetStatusName(st));
    st = try_config(h, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, N, N, 8, 8, 8, 8, 8, 8, DEF, 1, 0, 0);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "misuse: A scale on bf16 inputs refused: %s", cublasLtGetStatusName(st));
    st = try_config(h, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_16BF, N, N, 16, 16, 16, 16, 16, 16, DEF, 0, 0, 0);
    check(st == CUBLAS_STATUS_NOT_SUPPORTED, "misuse: FP8 with op NN (not TN) refused: %s", cublasLtGetStatusName(st));
    st = try_config(h, CUDA_R_8F_E5M2, CUDA_R_8F_E5M2, CUDA_R_16BF, CUDA_R_16BF, T, N, 16, 16, 16, 16, 16, 16, DEF, 0, 0, 0);
    check(st == CUBLAS_STATUS_NOT_SUPPORTED, "misuse: FP8 e5m2 x e5m2 refused: %s", cublasLtGetStatusName(st));
    st = try_config(h, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, CUDA_R_16BF, T, N, 16, 16, 24, 24, 24, 16, DEF, 0, 0, 0);
    check(st == CUBLAS_STATUS_NOT_SUPPORTED, "misuse: FP8 lda not a multiple of 16 refused: %s", cublasLtGetStatusName(st));
    st = try_config(h, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, N, N, 8, 8, 8, 8, 8, 8, CUBLASLT_EPILOGUE_RELU, 0, 0, 0);
    check(st == CUBLAS_STATUS_NOT_SUPPORTED, "misuse: RELU epilogue (not emulated) refused: %s", cublasLtGetStatusName(st));
    st = try_config(h, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, N, N, 12, 8, 8, 12, 8, 12, CUBLASLT_EPILOGUE_GELU_AUX, 0, 12, 0);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "misuse: aux ld not divisible by 8 refused: %s", cublasLtGetStatusName(st));
    st = try_config(h, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, N, N, 8, 8, 8, 8, 8, 8, CUBLASLT_EPILOGUE_BIAS, 0, 0, 1);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "misuse: bias epilogue without a bias pointer refused: %s", cublasLtGetStatusName(st));
    st = try_config(h, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, N, N, 8, 8, 8, 8, 8, 8, CUBLASLT_EPILOGUE_DGELU, 0, 0, 1);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "misuse: DGELU without an aux pointer refused: %s", cublasLtGetStatusName(st));
    // alignment: an algorithm chosen for the default (256-byte) alignment must not get a matrix
    // aligned to 4 bytes; declared with CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 4, it may
    {
        static float buf[4096];
        for (int q = 0; q < 2; q++) {
            cublasLtMatmulDesc_t desc = NULL;
            cublasLtMatrixLayout_t la = NULL, ld = NULL;
            cublasLtMatmulPreference_t pref = NULL;
            cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
            cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 8, 8, 8);
            cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, 8, 8, 8);
            cublasLtMatmulPreferenceCreate(&pref);
            uint32_t align = 4;
            if (q == 1) cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof(align));
            cublasLtMatmulHeuristicResult_t res;
            int nres = 0;
            cublasLtMatmulAlgoGetHeuristic(h, desc, la, la, ld, ld, pref, 1, &res, &nres);
            float alpha = 1.0f, beta = 0.0f;
            float* base = (float*)(((uintptr_t)buf + 255) / 256 * 256);
            st = cublasLtMatmul(h, desc, &alpha, base + 1, la, base + 256, la, &beta, base + 512, ld, base + 512, ld,
                                &res.algo, NULL, 0, 0);
            if (q == 0) {
                check(st == CUBLAS_STATUS_NOT_SUPPORTED, "misuse: A 4-byte aligned with the default alignment preference refused: %s",
                      cublasLtGetStatusName(st));
            } else {
                check(st == CUBLAS_STATUS_SUCCESS, "misuse: A 4-byte aligned, declared in the preference, accepted: %s",
                      cublasLtGetStatusName(st));
            }
            cublasLtMatmulPreferenceDestroy(pref);
            cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(ld);
            cublasLtMatmulDescDestroy(desc);
        }
    }
    // shape mismatch: B's rows do not match A's columns
    {
        cublasLtMatmulDesc_t desc;
        cublasLtMatrixLayout_t la, lb, ld;
        cublasLtMatmulPreference_t pref;
        cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 8, 9, 8);
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 10, 8, 10);
        cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, 8, 8, 8);
        cublasLtMatmulPreferenceCreate(&pref);
        cublasLtMatmulHeuristicResult_t res;
        int nres = 0;
        st = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1, &res, &nres);
        check(st == CUBLAS_STATUS_INVALID_VALUE && nres == 0, "misuse: k of A (9) != k of B (10) refused: %s", cublasLtGetStatusName(st));
        // wrong attribute size: an int where int64_t is expected
        int ld32 = 8;
        st = cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_LD, &ld32, sizeof(ld32));
        check(st == CUBLAS_STATUS_INVALID_VALUE, "misuse: LD set with a 4-byte int refused: %s", cublasLtGetStatusName(st));
        int order = CUBLASLT_ORDER_ROW;
        cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof(order));
        st = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1, &res, &nres);
        check(st == CUBLAS_STATUS_NOT_SUPPORTED, "misuse: ROW order refused: %s", cublasLtGetStatusName(st));
        int batch = 2;
        order = CUBLASLT_ORDER_COL;
        cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof(order));
        uint64_t rows = 9;
        cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof(rows));
        cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch));
        st = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1, &res, &nres);
        check(st == CUBLAS_STATUS_INVALID_VALUE, "misuse: batch count of B (2) != D (1) refused: %s", cublasLtGetStatusName(st));
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(ld);
        cublasLtMatmulDescDestroy(desc);
    }
}

static const char* USAGE =
    "[SEED]\n"
    "Tests the emulated cuBLASLt (dev/emu/cublaslt_emu.h) against a double-precision triple loop: random shapes,\n"
    "transposes, strides, epilogues, FP32/BF16/FP8 inputs, and the misuses it must refuse.\n"    "  SEED  the random inputs' seed, to repeat a run (default: from the clock; printed)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
    rng_init(&g_rand, seed);
    printf("test_cublaslt: seed %llu\n", (unsigned long long)seed);
    cublasLtHandle_t h;
    if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) { printf("cublasLtCreate failed\n"); return 1; }
    const int ops[2] = {CUBLAS_OP_N, CUBLAS_OP_T};

    // 1. FP32: every transpose combination on odd shapes, ld padding, batches, alpha/beta, in-place
    for (int ta = 0; ta < 2; ta++) {
        for (int tb = 0; tb < 2; tb++) {
            for (int r = 0; r < 5; r++) {
                Case c = base_case(rsize(), rsize(), rsize(), CUDA_R_32F);
                if (r == 0) { c.m = 1; c.n = 1; c.k = 1; }
                c.transa = ops[ta]; c.transb = ops[tb];
                c.batch = r % 2 == 0 ? 1 : 3;
                c.alpha = r == 0 ? 1.0f : rng_uniform(-2, 2);
                c.beta = r < 2 ? 0.0f : rng_uniform(-2, 2);
                c.in_place = r == 4;
                run_case(h, c, "f32");
            }
        }
    }
    // 2. every epilogue with FP32, BF16 -> BF16, BF16 -> FP32; bias shared or per batch
    const uint32_t epis[7] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS,
                              CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU};
    const int types[3][2] = {{CUDA_R_32F, CUDA_R_32F}, {CUDA_R_16BF, CUDA_R_16BF}, {CUDA_R_16BF, CUDA_R_32F}};
    for (int e = 0; e < 7; e++) {
        for (int t = 0; t < 3; t++) {
            for (int r = 0; r < 2; r++) {
                Case c = base_case(rsize(), rsize(), rsize(), types[t][0]);
                c.ctype = c.dtype = types[t][1];
                c.transa = ops[rng_int(2)]; c.transb = ops[rng_int(2)];
                c.epi = epis[e];
                c.batch = r == 0 ? 1 : 2;
                c.bias_batched = r == 1 && rng_int(2);
                c.alpha = rng_uniform(0.5f, 2.0f);
                c.beta = r == 1 ? rng_uniform(-1, 1) : 0.0f;
                run_case(h, c, "epilogue");
            }
        }
    }
    // 3. FP8 inputs with scales, "TN", every output type, bias and GELU_AUX_BIAS, amax, saturation
    const int fp8_ab[3][2] = {{CUDA_R_8F_E4M3, CUDA_R_8F_E4M3}, {CUDA_R_8F_E4M3, CUDA_R_8F_E5M2}, {CUDA_R_8F_E5M2, CUDA_R_8F_E4M3}};
    const int fp8_cd[4][2] = {{CUDA_R_32F, CUDA_R_32F}, {CUDA_R_16BF, CUDA_R_16BF}, {CUDA_R_16BF, CUDA_R_8F_E4M3}, {CUDA_R_16BF, CUDA_R_8F_E5M2}};
    for (int ab = 0; ab < 3; ab++) {
        for (int cd = 0; cd < 4; cd++) {
            for (int r = 0; r < 2; r++) {
                Case c = base_case(rsize(), rsize(), rsize(), fp8_ab[ab][0]);
                c.btype = fp8_ab[ab][1];
                c.ctype = fp8_cd[cd][0]; c.dtype = fp8_cd[cd][1];
                c.transa = CUBLAS_OP_T; c.transb = CUBLAS_OP_N;
                int fp8d = c.dtype == CUDA_R_8F_E4M3 || c.dtype == CUDA_R_8F_E5M2;
                c.epi = r == 0 ? CUBLASLT_EPILOGUE_DEFAULT : fp8d ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
                c.batch = 1 + r;
                c.scale_a = 0.5f; c.scale_b = 0.125f;
                c.scale_d = fp8d ? (r == 0 ? 0.25f : 64.0f) : 0.0f;  // 64: some outputs saturate
                c.beta = r == 1 ? 0.5f : 0.0f;
                c.scale_c = r == 1 ? 2.0f : 0.0f;
                c.alpha = 1.5f;
                c.amax = 1;
                run_case(h, c, "fp8");
            }
        }
    }
    // 4. the largest shapes the emulated tests use, with the time they take
    {
        Case c = base_case(1024, 256, 1024, CUDA_R_32F);
        c.transa = CUBLAS_OP_T;
        run_case(h, c, "large");
        c = base_case(1024, 256, 1024, CUDA_R_16BF);
        c.epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
        c.transa = CUBLAS_OP_T;
        c.pad_a = c.pad_b = c.pad_c = c.pad_d = 0;
        run_case(h, c, "large");
    }
    // 5. misuse
    misuse_checks(h);

    cublasLtDestroy(h);
    return test_summary("test_cublaslt");
}
