// matmul.cuh: the linear layers of GPT-2 and their gradients, plus one generic batched matrix
// product that other ops (attention's QK^T and AV) call.
//
//   forward:  out = inp @ weight^T + bias                       inp (BT,C), weight (OC,C), out (BT,OC)
//             with pre_gelu: pre_gelu = inp @ weight^T + bias, out = gelu(pre_gelu)   (the MLP's fc)
//   backward: dinp = dout @ weight            (overwrites; times gelu'(pre_gelu_of_inp) when given)
//             dweight += dout^T @ inp         (accumulates)
//             dbias += column sums of dout    (accumulates)
//             (each part optional: the input and weight halves can run at different times, for the
//             split backward of zero-bubble pipeline schedules, with the same results)
//
// GELU is the tanh approximation GPT-2 uses: gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// All tensors are row-major, as in the rest of the trainer.
//
// The three forms, top to bottom:
//   1. CPU: plain loops (*_naive_cpu: the math, the oracle of the tests) and the CPU build's fast
//      implementation (*_cpu: OpenBLAS sgemm for the products; bias, GELU (with a vectorizable tanh)
//      and dbias in OpenMP loops).
//   2. CUDA kernels: the bias gradient (a deterministic column sum), and GELU / dGELU for the cases
//      where cuBLASLt cannot fuse them into the product.
//   3. cuBLASLt and the launchers the model calls (matmul_forward, matmul_backward, matmul_batched),
//      with the same signatures in every build.
//
// Row-major vs cuBLAS's column-major: cuBLAS reads a matrix in column-major order, so a row-major
// X (R rows, S columns, row stride ld) is, to cuBLAS, the column-major matrix X^T (S rows, R columns,
// same ld), with no copy. A row-major product C = op(A) @ op(B) is therefore computed as the
// column-major product C^T = op(B)^T @ op(A)^T: swap the operands, keep their transpose flags, and
// swap the output's dimensions (cuBLAS m = N, n = M). A bias along C's columns (one per output
// feature) is then cuBLAS's bias along D's rows, which is what its BIAS epilogue adds.
#pragma once
#include "common.h"
#include "context.h"  // the cuBLASLt handle and workspace
#include "gelu.cuh"  // gelu_scalar / gelu_grad_scalar: the one definition of GELU
#include "cuda_utils.cuh"

#if LLM_BUILD_CPU
#include <cblas.h>
#endif  // the kernel builds get cuBLASLt (real, or dev/emu's subset run on the CPU) from context.h

// the bias gradient of the CUDA builds sums dout in at most this many row splits, so matmul_backward's
// dbias_scratch needs MATMUL_DBIAS_MAX_SPLITS * OC floats (defined in every build, for the model's sizes)
#define MATMUL_DBIAS_MAX_SPLITS 32

// what follows a generic product (matmul_batched)
typedef enum {
    MATMUL_EPILOGUE_NONE = 0,  // C = alpha op(A) op(B) + beta C [+ bias]
    MATMUL_EPILOGUE_GELU = 1,  // aux = alpha op(A) op(B) + beta C [+ bias] (if aux != NULL), C = gelu(that)
    MATMUL_EPILOGUE_DGELU = 2, // C = (alpha op(A) op(B) + beta C) * gelu'(aux)  (aux read; no bias)
} MatmulEpilogue;

// ----------------------------------------------------------------------------
// 1. CPU: the math as plain loops. Always compiled (FP32), so that every build's tests can use them.

static void matmul_forward_naive_cpu(float* out /*(BT,OC)*/, float* pre_gelu /*(BT,OC) or NULL*/,
                                     const float* inp /*(BT,C)*/, const float* weight /*(OC,C)*/,
                                     const float* bias /*(OC) or NULL*/, int BT, int C, int OC) {
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        for (int o = 0; o < OC; o++) {
            float val = bias != NULL ? bias[o] : 0.0f;
            for (int i = 0; i < C; i++) { val += inp[(size_t)bt * C + i] * weight[(size_t)o * C + i]; }
            if (pre_gelu != NULL) {
                pre_gelu[(size_t)bt * OC + o] = val;
                val = gelu_scalar(val);
            }
            out[(size_t)bt * OC + o] = val;
        }
    }
}

static void matmul_backward_naive_cpu(float* dinp /*(BT,C)*/, float* dweight /*(OC,C)*/, float* dbias /*(OC) or NULL*/,
                                      const float* dout /*(BT,OC)*/, const float* inp /*(BT,C)*/,
                                      const float* weight /*(OC,C)*/, const float* pre_gelu_of_inp /*(BT,C) or NULL*/,
                                      int BT, int C, int OC) {
    // dinp = dout @ weight, times gelu'(pre-activation) when inp was gelu(pre-activation).
    // (Each sum runs over o in order; a row of partial sums keeps the memory access contiguous.)
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        float* s = (float*)mallocCheck((size_t)C * sizeof(float));
        memset(s, 0, (size_t)C * sizeof(float));
        for (int o = 0; o < OC; o++) {
            float d = dout[(size_t)bt * OC + o];
            for (int i = 0; i < C; i++) { s[i] += d * weight[(size_t)o * C + i]; }
        }
        for (int i = 0; i < C; i++) {
            float v = s[i];
            if (pre_gelu_of_inp != NULL) v *= gelu_grad_scalar(pre_gelu_of_inp[(size_t)bt * C + i]);
            dinp[(size_t)bt * C + i] = v;
        }
        free(s);
    }
    // dweight += dout^T @ inp (sums over bt in order), dbias += sum over rows of dout
    #pragma omp parallel for
    for (int o = 0; o < OC; o++) {
        float* s = (float*)mallocCheck((size_t)C * sizeof(float));
        memset(s, 0, (size_t)C * sizeof(float));
        for (int bt = 0; bt < BT; bt++) {
            float d = dout[(size_t)bt * OC + o];
            for (int i = 0; i < C; i++) { s[i] += d * inp[(size_t)bt * C + i]; }
        }
        for (int i = 0; i < C; i++) { dweight[(size_t)o * C + i] += s[i]; }
        free(s);
        if (dbias != NULL) {
            float sb = 0.0f;
            for (int bt = 0; bt < BT; bt++) { sb += dout[(size_t)bt * OC + o]; }
            dbias[o] += sb;
        }
    }
}

// The generic product, row-major, for each batch index b (X_b = X + b * strideX):
//   C_b (M,N) = epilogue(alpha * op(A_b) @ op(B_b) + beta * C_b [+ bias])
//   op(A) is (M,K): A is stored (M,K) with row stride lda, or, with transA, stored (K,M) and transposed
//   op(B) is (K,N): B is stored (K,N) with row stride ldb, or, with transB, stored (N,K) and transposed
//   C is (M,N) with row stride ldc. beta == 0: C is not read (NaN there does not propagate).
//   bias (N) or NULL: one value per column of C, the same for every batch (only with NONE or GELU)
//   aux: packed (batch, M, N) (row stride N, batch stride M*N): GELU writes the pre-activation
//        there (if not NULL); DGELU reads it
static void matmul_batched_naive_cpu(float* c /*(batch: M x ldc)*/, const float* a /*(batch: op(A) (M,K))*/,
                                     const float* b /*(batch: op(B) (K,N))*/, const float* bias /*(N) or NULL*/,
                                     float* aux /*(batch,M,N) or NULL*/, int M, int N, int K, bool transA, bool transB,
                                     int lda, int ldb, int ldc,
                                     int batch, size_t strideA, size_t strideB, size_t strideC,
                                     float alpha, float beta, MatmulEpilogue epilogue) {
    for (int bi = 0; bi < batch; bi++) {
        const float* ab = a + bi * strideA;
        const float* bb = b + bi * strideB;
        float* cb = c + bi * strideC;
        #pragma omp parallel for
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < N; j++) {
                float s = 0.0f;
                for (int p = 0; p < K; p++) {
                    float av = transA ? ab[(size_t)p * lda + i] : ab[(size_t)i * lda + p];
                    float bv = transB ? bb[(size_t)j * ldb + p] : bb[(size_t)p * ldb + j];
                    s += av * bv;
                }
                float x = alpha * s;
                if (beta != 0.0f) x += beta * cb[(size_t)i * ldc + j];
                if (bias != NULL) x += bias[j];
                size_t ai = ((size_t)bi * M + i) * N + j;
                if (epilogue == MATMUL_EPILOGUE_GELU) {
                    if (aux != NULL) aux[ai] = x;
                    x = gelu_scalar(x);
                } else if (epilogue == MATMUL_EPILOGUE_DGELU) {
                    x *= gelu_grad_scalar(aux[ai]);
                }
                cb[(size_t)i * ldc + j] = x;
            }
        }
    }
}

// The CPU build's implementation: the same math, the products by OpenBLAS's sgemm (row-major
// cblas), bias/GELU/dGELU in one OpenMP pass over the rows the product just wrote, and the bias
// gradient as column sums with each thread owning whole columns (no races, and every column sums its
// rows in order 0..BT-1 whatever the thread count, so the result is deterministic).
#if LLM_BUILD_CPU


static void matmul_forward_cpu(float* out /*(BT,OC)*/, float* pre_gelu /*(BT,OC) or NULL*/, const float* inp /*(BT,C)*/,
                               const float* weight /*(OC,C)*/, const float* bias /*(OC) or NULL*/, int BT, int C, int OC) {
    float* dst = pre_gelu != NULL ? pre_gelu : out;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BT, OC, C, 1.0f, inp, C, weight, C, 0.0f, dst, OC);
    if (bias == NULL && pre_gelu == NULL) return;
    // one pass over each row the product just wrote: + bias, then GELU
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < BT; bt++) {
        float* d = dst + (size_t)bt * OC;
        if (bias != NULL) {
            #pragma omp simd
            for (int o = 0; o < OC; o++) d[o] += bias[o];
        }
        if (pre_gelu != NULL) {
            float* y = out + (size_t)bt * OC;
            #pragma omp simd
            for (int o = 0; o < OC; o++) y[o] = gelu_scalar(d[o]);
        }
    }
}

// dbias (OC) += sum over the BT rows of dout (BT,OC), 64 columns per task
static void matmul_dbias_cpu(float* dbias /*(OC)*/, const float* dout /*(BT,OC)*/, int BT, int OC) {
    const int W = 64;
    #pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += W) {
        int n = OC - o0 < W ? OC - o0 : W;
        float acc[64] = {0.0f};
        for (int bt = 0; bt < BT; bt++) {
            const float* row = dout + (size_t)bt * OC + o0;
            for (int j = 0; j < n; j++) acc[j] += row[j];
        }
        for (int j = 0; j < n; j++) dbias[o0 + j] += acc[j];
    }
}

// (any of dinp, dweight, dbias may be NULL: that part is skipped; see matmul_backward)
static void matmul_backward_cpu(float* dinp /*(BT,C) or NULL*/, float* dweight /*(OC,C) or NULL*/, float* dbias /*(OC) or NULL*/,
                                const float* dout /*(BT,OC)*/, const float* inp /*(BT,C)*/, const float* weight /*(OC,C)*/,
                                const float* pre_gelu_of_inp /*(BT,C) or NULL*/, int BT, int C, int OC) {
    if (dbias != NULL) matmul_dbias_cpu(dbias, dout, BT, OC);
    if (dinp != NULL) {
        // dinp (BT,C) = dout (BT,OC) @ weight (OC,C)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BT, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
        if (pre_gelu_of_inp != NULL) {
            #pragma omp parallel for schedule(static)
            for (int bt = 0; bt < BT; bt++) {
                float* d = dinp + (size_t)bt * C;
                const float* x = pre_gelu_of_inp + (size_t)bt * C;
                #pragma omp simd
                for (int i = 0; i < C; i++) d[i] *= gelu_grad_scalar(x[i]);
            }
        }
    }
    // dweight (OC,C) += dout^T (OC,BT) @ inp (BT,C)
    if (dweight != NULL) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, BT, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
}

// matmul_batched_naive_cpu's contract (see there), with sgemm. Many small products (attention's
// per-head matrices) run one per OpenMP thread with a single-threaded sgemm each; few large ones run
// one after the other with OpenBLAS's own threads.
static void matmul_batched_cpu(float* c /*(batch: M x ldc)*/, const float* a /*(batch: op(A) (M,K))*/,
                               const float* b /*(batch: op(B) (K,N))*/, const float* bias /*(N) or NULL*/,
                               float* aux /*(batch,M,N) or NULL*/, int M, int N, int K, bool transA, bool transB,
                               int lda, int ldb, int ldc,
                               int batch, size_t strideA, size_t strideB, size_t strideC,
                               float alpha, float beta, MatmulEpilogue epilogue) {
    CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans, tb = transB ? CblasTrans : CblasNoTrans;
    int per_batch_threads = batch > 1 && (double)M * N * K < 4.0e6;
    if (per_batch_threads) {
        #pragma omp parallel for schedule(static)
        for (int bi = 0; bi < batch; bi++) {
            cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, a + bi * strideA, lda, b + bi * strideB, ldb, beta,
                        c + bi * strideC, ldc);
        }
    } else {
        for (int bi = 0; bi < batch; bi++) {
            cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, a + bi * strideA, lda, b + bi * strideB, ldb, beta,
                        c + bi * strideC, ldc);
        }
    }
    if (bias == NULL && epilogue == MATMUL_EPILOGUE_NONE) return;
    #pragma omp parallel for schedule(static)
    for (long r = 0; r < (long)batch * M; r++) {  // one row of one batch's C
        float* crow = c + (r / M) * strideC + (size_t)(r % M) * ldc;
        float* arow = aux != NULL ? aux + (size_t)r * N : NULL;
        if (bias != NULL) {
            for (int j = 0; j < N; j++) crow[j] += bias[j];
        }
        if (epilogue == MATMUL_EPILOGUE_GELU) {
            if (arow != NULL) memcpy(arow, crow, (size_t)N * sizeof(float));
            #pragma omp simd
            for (int j = 0; j < N; j++) crow[j] = gelu_scalar(crow[j]);
        } else if (epilogue == MATMUL_EPILOGUE_DGELU) {
            #pragma omp simd
            for (int j = 0; j < N; j++) crow[j] *= gelu_grad_scalar(arow[j]);
        }
    }
}

// The CPU build with 16-bit floatX (PRECISION=BF16 / FP16): the operands converted to FP32, the
// products by sgemm (FP32 accumulation) and the epilogue in FP32, each output rounded once to floatX,
// as cuBLASLt rounds D once (and the GELU input, written to aux, once). With LLM_HAVE_SBGEMM (an
// OpenBLAS whose cblas_sbgemm links, and a CPU with AVX512_BF16; the Makefile checks both) the BF16
// products of the linear layers go to sbgemm instead, which reads the BF16 operands as they are and
// accumulates in FP32 too. In the FP32 CPU build the views are the arrays themselves.
#if defined(LLM_HAVE_SBGEMM) && defined(ENABLE_BF16)
#define MATMUL_SBGEMM 1
// C (M,N) FP32 = op(A) op(B) + beta C, A and B BF16 (row-major)
static inline void matmul_sbgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const floatX* a, int lda,
                                 const floatX* b, int ldb, float beta, float* c, int ldc) {
    cblas_sbgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, (const bfloat16*)a, lda, (const bfloat16*)b, ldb, beta, c, ldc);
}
#else
#define MATMUL_SBGEMM 0
#endif

// the extent in elements of row-major (rows, cols) matrices with leading dimension ld, batch of them
// stride apart
static inline size_t matmul_extent(int rows, int cols, int ld, int batch, size_t stride) {
    if (rows <= 0 || cols <= 0 || batch <= 0) return 0;
    return (size_t)(batch - 1) * stride + (size_t)(rows - 1) * ld + cols;
}

static void matmul_forward_cpu_x(floatX* out /*(BT,OC)*/, floatX* pre_gelu /*(BT,OC) or NULL*/, const floatX* inp /*(BT,C)*/,
                                 const floatX* weight /*(OC,C)*/, const floatX* bias /*(OC) or NULL*/, int BT, int C, int OC) {
    size_t no = (size_t)BT * OC;
    float *o = f32_out(out, no), *pg = f32_out(pre_gelu, no), *b = f32_in(bias, OC);
#if MATMUL_SBGEMM
    // the product into pre_gelu's (or out's) FP32 room, then matmul_forward_cpu's epilogue pass
    float* dst = pg != NULL ? pg : o;
    matmul_sbgemm(CblasNoTrans, CblasTrans, BT, OC, C, inp, C, weight, C, 0.0f, dst, OC);
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < BT; bt++) {
        float* d = dst + (size_t)bt * OC;
        if (b != NULL) for (int j = 0; j < OC; j++) d[j] += b[j];
        if (pg != NULL) for (int j = 0; j < OC; j++) o[(size_t)bt * OC + j] = gelu_scalar(d[j]);
    }
#else
    float *x = f32_in(inp, (size_t)BT * C), *w = f32_in(weight, (size_t)OC * C);
    matmul_forward_cpu(o, pg, x, w, b, BT, C, OC);
    f32_free(inp, x); f32_free(weight, w);
#endif
    f32_store(out, o, no); f32_store(pre_gelu, pg, no); f32_free(bias, b);
}

static void matmul_backward_cpu_x(floatX* dinp /*(BT,C) or NULL*/, floatX* dweight /*(OC,C) or NULL*/,
                                  floatX* dbias /*(OC) or NULL*/, const floatX* dout /*(BT,OC)*/, const floatX* inp /*(BT,C)*/,
                                  const floatX* weight /*(OC,C)*/, const floatX* pre_gelu_of_inp /*(BT,C) or NULL*/,
                                  int BT, int C, int OC) {
    size_t nbc = (size_t)BT * C, noc = (size_t)OC * C;
    float* d = f32_in(dout, (size_t)BT * OC);
    float* db = f32_in(dbias, OC);
    if (db != NULL) matmul_dbias_cpu(db, d, BT, OC);
    f32_store(dbias, db, OC);
#if MATMUL_SBGEMM
    if (dinp != NULL) {
        float* di = f32_out(dinp, nbc);
        matmul_sbgemm(CblasNoTrans, CblasNoTrans, BT, C, OC, dout, OC, weight, C, 0.0f, di, C);
        if (pre_gelu_of_inp != NULL) {
            #pragma omp parallel for schedule(static)
            for (size_t i = 0; i < nbc; i++) di[i] *= gelu_grad_scalar((float)pre_gelu_of_inp[i]);
        }
        f32_store(dinp, di, nbc);
    }
    if (dweight != NULL) {
        float* dw = f32_in(dweight, noc);
        matmul_sbgemm(CblasTrans, CblasNoTrans, OC, C, BT, dout, OC, inp, C, 1.0f, dw, C);
        f32_store(dweight, dw, noc);
    }
#else
    float* di = f32_out(dinp, nbc);
    float* dw = f32_in(dweight, noc);
    float* x = dweight != NULL ? f32_in(inp, nbc) : NULL;
    float* w = dinp != NULL ? f32_in(weight, noc) : NULL;
    float* pg = dinp != NULL ? f32_in(pre_gelu_of_inp, nbc) : NULL;
    matmul_backward_cpu(di, dw, NULL, d, x, w, pg, BT, C, OC);
    f32_store(dinp, di, nbc);
    f32_store(dweight, dw, noc);
    if (x != NULL) f32_free(inp, x);
    if (w != NULL) f32_free(weight, w);
    if (pg != NULL) f32_free(pre_gelu_of_inp, pg);
#endif
    f32_free(dout, d);
}

static void matmul_batched_cpu_x(floatX* c, const floatX* a, const floatX* b, const floatX* bias, floatX* aux, int M,
                                 int N, int K, bool transA, bool transB, int lda, int ldb, int ldc, int batch,
                                 size_t strideA, size_t strideB, size_t strideC, float alpha, float beta,
                                 MatmulEpilogue epilogue) {
    size_t na = transA ? matmul_extent(K, M, lda, batch, strideA) : matmul_extent(M, K, lda, batch, strideA);
    size_t nb = transB ? matmul_extent(N, K, ldb, batch, strideB) : matmul_extent(K, N, ldb, batch, strideB);
    size_t nc = matmul_extent(M, N, ldc, batch, strideC), nx = (size_t)batch * M * N;
    // C is read whole (beta), and only its (M,N) matrices written back
    float *fc = f32_in((const floatX*)c, nc), *fa = f32_in(a, na), *fb = f32_in(b, nb), *fbias = f32_in(bias, N);
    float* fx = epilogue == MATMUL_EPILOGUE_DGELU ? f32_in((const floatX*)aux, nx) : f32_out(aux, nx);
    matmul_batched_cpu(fc, fa, fb, fbias, fx, M, N, K, transA, transB, lda, ldb, ldc, batch, strideA, strideB, strideC,
                       alpha, beta, epilogue);
#if !defined(LLM_FLOATX_IS_FLOAT)
    // only the (M,N) matrices go back: the gaps between C's rows and batches stay as they were
    #pragma omp parallel for schedule(static)
    for (long r = 0; r < (long)batch * M; r++) {
        size_t o = (r / M) * strideC + (size_t)(r % M) * ldc;
        for (int j = 0; j < N; j++) c[o + j] = fc[o + j];
    }
    f32_release(fc);
#endif
    if (epilogue == MATMUL_EPILOGUE_DGELU) f32_free((const floatX*)aux, fx);
    else f32_store(aux, fx, nx);
    f32_free(a, fa); f32_free(b, fb); f32_free(bias, fbias);
}

#endif  // LLM_BUILD_CPU

// ----------------------------------------------------------------------------
// 2. CUDA kernels
#if LLM_HAS_KERNELS

// VEC consecutive floatX, aligned to their size: VEC = MATMUL_X128 makes one 128-bit load or store
template <int VEC>
struct alignas(VEC * sizeof(floatX)) matmul_pack {
    floatX v[VEC];
};
#define MATMUL_X128 ((int)(16 / sizeof(floatX)))

// Bias gradient, stage 1: per-split column sums of dout (BT,OC) into partial (gridDim.y, OC), FP32.
// A block owns 4*VEC adjacent columns and every gridDim.y-th group of 64 rows. Inside a warp, lane =
// 8 rows x 4 column groups: each lane reads VEC columns (one 128-bit load) of every 8th row, so a warp
// reads 8 rows x 64 contiguous bytes at a time. The 8 lanes of a column group are then summed with
// shuffles, the 8 warps through shared memory, in a fixed order: the result does not depend on timing.
#define MATMUL_DBIAS_WARPS 8

template <int VEC>
__global__ void matmul_dbias_partial_kernel(float* partial /*(gridDim.y, OC)*/, const floatX* dout /*(BT,OC)*/,
                                            int BT, int OC) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int lcol = lane % 4, lrow = lane / 4;
    int col0 = (blockIdx.x * 4 + lcol) * VEC;  // with VEC > 1, OC % VEC == 0: a pack is all in or all out
    float acc[VEC];
    for (int k = 0; k < VEC; k++) acc[k] = 0.0f;
    if (col0 < OC) {
        for (int row = (blockIdx.y * MATMUL_DBIAS_WARPS + warp) * 8 + lrow; row < BT;
             row += gridDim.y * MATMUL_DBIAS_WARPS * 8) {
            matmul_pack<VEC> p = *reinterpret_cast<const matmul_pack<VEC>*>(dout + (size_t)row * OC + col0);
            for (int k = 0; k < VEC; k++) acc[k] += (float)p.v[k];
        }
    }
    // lanes of one column group differ in lane bits 2..4
    for (int k = 0; k < VEC; k++) {
        for (int off = 4; off < 32; off *= 2) acc[k] += __shfl_xor_sync(0xffffffff, acc[k], off);
    }
    __shared__ float sums[MATMUL_DBIAS_WARPS][4 * VEC];
    if (lrow == 0) {
        for (int k = 0; k < VEC; k++) sums[warp][lcol * VEC + k] = acc[k];
    }
    __syncthreads();
    if (threadIdx.x < 4 * VEC) {
        float s = 0.0f;
        for (int w = 0; w < MATMUL_DBIAS_WARPS; w++) s += sums[w][threadIdx.x];
        int col = blockIdx.x * 4 * VEC + threadIdx.x;
        if (col < OC) partial[(size_t)blockIdx.y * OC + col] = s;
    }
}

// Bias gradient, stage 2: dbias[col] += sum of the splits, in order
__global__ void matmul_dbias_finish_kernel(floatX* dbias /*(OC)*/, const float* partial /*(splits, OC)*/,
                                           int splits, int OC) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= OC) return;
    float s = 0.0f;
    for (int j = 0; j < splits; j++) s += partial[(size_t)j * OC + col];
    dbias[col] = (floatX)((float)dbias[col] + s);
}

// GELU and dGELU when cuBLASLt does not fuse them (see matmul_cublaslt). Both walk a batch of row-major
// (M,N) matrices element by element, VEC at a time (VEC divides N, the row strides and batch strides):
//   forward:   out = gelu(pre)            out, pre: (batch, M, N), row strides ldo/ldp, batch strides so/sp
//   backward:  d *= gelu'(pre)            d: (batch, M, N) with ldd/sd; pre packed (batch, M, N)
template <int VEC>
__global__ void matmul_gelu_forward_kernel(floatX* out, int ldo, size_t so, const floatX* pre, int ldp, size_t sp,
                                           int M, int N, int batch) {
    size_t e = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (e >= (size_t)batch * M * N) return;
    size_t r = e / N;
    int j = (int)(e % N), i = (int)(r % M), b = (int)(r / M);
    const floatX* src = pre + b * sp + (size_t)i * ldp + j;
    floatX* dst = out + b * so + (size_t)i * ldo + j;
    matmul_pack<VEC> p = *reinterpret_cast<const matmul_pack<VEC>*>(src);
    for (int k = 0; k < VEC; k++) p.v[k] = (floatX)gelu_scalar((float)p.v[k]);
    *reinterpret_cast<matmul_pack<VEC>*>(dst) = p;
}

template <int VEC>
__global__ void matmul_dgelu_inplace_kernel(floatX* d, int ldd, size_t sd, const floatX* pre /*packed*/,
                                            int M, int N, int batch) {
    size_t e = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (e >= (size_t)batch * M * N) return;
    size_t r = e / N;
    int j = (int)(e % N), i = (int)(r % M), b = (int)(r / M);
    floatX* dst = d + b * sd + (size_t)i * ldd + j;
    matmul_pack<VEC> g = *reinterpret_cast<const matmul_pack<VEC>*>(pre + e);
    matmul_pack<VEC> p = *reinterpret_cast<const matmul_pack<VEC>*>(dst);
    for (int k = 0; k < VEC; k++) p.v[k] = (floatX)((float)p.v[k] * gelu_grad_scalar((float)g.v[k]));
    *reinterpret_cast<matmul_pack<VEC>*>(dst) = p;
}


// dbias (OC) += column sums of dout (BT,OC); scratch: MATMUL_DBIAS_MAX_SPLITS * OC floats
static void matmul_dbias(floatX* dbias /*(OC)*/, float* scratch /*(MATMUL_DBIAS_MAX_SPLITS*OC)*/,
                         const floatX* dout /*(BT,OC)*/, int BT, int OC, cudaStream_t stream) {
    if (BT <= 0 || OC <= 0) return;
    if (scratch == NULL) {
        die_at(__FILE__, __LINE__, "matmul_backward: dbias needs dbias_scratch (MATMUL_DBIAS_MAX_SPLITS * OC floats)");
    }
    const int threads = 32 * MATMUL_DBIAS_WARPS;
    bool vec = OC % MATMUL_X128 == 0 && is_aligned16(dout);
    int cols_per_block = 4 * (vec ? MATMUL_X128 : 1);
    int gx = ceil_div(OC, cols_per_block);
    // enough blocks to fill a large GPU (~1024), each with at least 64 rows; the split depends only
    // on the shape, so the summation order (and the result) is the same on every run
    int splits = ceil_div(1024, gx);
    if (splits > ceil_div(BT, 64)) splits = ceil_div(BT, 64);
    if (splits > MATMUL_DBIAS_MAX_SPLITS) splits = MATMUL_DBIAS_MAX_SPLITS;
    if (splits < 1) splits = 1;
    dim3 grid(gx, splits);
    if (vec) {
        LAUNCH(matmul_dbias_partial_kernel<MATMUL_X128>, grid, dim3(threads), 0, stream, scratch, dout, BT, OC);
    } else {
        LAUNCH(matmul_dbias_partial_kernel<1>, grid, dim3(threads), 0, stream, scratch, dout, BT, OC);
    }
    LAUNCH(matmul_dbias_finish_kernel, dim3(ceil_div(OC, 256)), dim3(256), 0, stream, dbias, scratch, splits, OC);
}

// ----------------------------------------------------------------------------
// 3. cuBLASLt

// cublasCheck: llm/context.h

#if defined(ENABLE_FP32)
#define MATMUL_CUDA_FLOATX CUDA_R_32F
#elif defined(ENABLE_FP16)
#define MATMUL_CUDA_FLOATX CUDA_R_16F
#else
#define MATMUL_CUDA_FLOATX CUDA_R_16BF
#endif

// The cuBLASLt handle and its workspace live in the process's context (llm/context.h), as does the
// knob llm_ctx.matmul_fuse_gelu: 1 lets cuBLASLt fuse GELU / dGELU into the product whenever its
// heuristic offers an algorithm for it; 0 always uses the separate kernels above (the tests run both).

// One cuBLASLt call in cuBLAS's own terms (column-major, see the top of this file), per batch b:
//   D_b (m,n) = epilogue(alpha * scale_a * scale_b * op(A_b) op(B_b) + beta * C_b [+ bias_b])
//   op(A) is (m,k): A stored (m,k) or, with trans_a, (k,m); op(B) is (k,n): B stored (k,n) or (n,k)
// Types are cudaDataType values, so that FP8 callers can use it too; scale pointers are device
// pointers to one float, NULL for none. Returns CUBLAS_STATUS_NOT_SUPPORTED when the library has no
// algorithm for the configuration (the caller decides what to do); any other failure is fatal.
typedef struct {
    int m, n, k, batch;
    const void* a; cudaDataType_t a_type; bool trans_a; int64_t lda; int64_t stride_a;
    const void* b; cudaDataType_t b_type; bool trans_b; int64_t ldb; int64_t stride_b;
    const void* c; cudaDataType_t c_type; int64_t ldc; int64_t stride_c;  // c may equal d
    void* d; cudaDataType_t d_type; int64_t ldd; int64_t stride_d;
    float alpha, beta;
    cublasLtEpilogue_t epilogue;               // 0 means CUBLASLT_EPILOGUE_DEFAULT
    const void* bias; int64_t bias_stride;     // (m) per batch; BIAS epilogues
    void* aux; int64_t aux_ld; int64_t aux_stride;  // GELU_AUX* (written) / DGELU (read)
    const void* scale_a; const void* scale_b; const float* scale_d; float* amax_d;  // FP8
    int32_t scale_mode_a, scale_mode_b;  // FP8: cublasLtMatmulMatrixScale_t of scale_a/b (0: one float each)
    int heuristic_only;                  // 1: ask the heuristic, run nothing (llm/matmul_fp8.cuh's describe)
} MatmulLtArgs;

static inline int64_t matmul_lt_type_size(cudaDataType_t t) {
    return t == CUDA_R_32F ? 4 : (t == CUDA_R_16BF || t == CUDA_R_16F) ? 2 : 1;  // the types used here: FP32, BF16, FP16, FP8
}

// set one attribute of a matmul descriptor / matrix layout from a variable, checked (file:line of the use)
#define MATMUL_LT_DESC_SET(desc, attr, var) cublasCheck(cublasLtMatmulDescSetAttribute(desc, attr, &(var), sizeof(var)))
#define MATMUL_LT_LAYOUT_SET(layout, attr, var) cublasCheck(cublasLtMatrixLayoutSetAttribute(layout, attr, &(var), sizeof(var)))

static cublasStatus_t matmul_cublaslt_call(const MatmulLtArgs* g, cudaStream_t stream) {
    context_require("matmul");
    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    MATMUL_LT_DESC_SET(desc, CUBLASLT_MATMUL_DESC_TRANSA, ta);
    MATMUL_LT_DESC_SET(desc, CUBLASLT_MATMUL_DESC_TRANSB, tb);
    cublasLtEpilogue_t epi = g->epilogue != 0 ? g->epilogue : CUBLASLT_EPILOGUE_DEFAULT;
    MATMUL_LT_DESC_SET(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
    if (g->bias != NULL) {
        MATMUL_LT_DESC_SET(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g->bias);
        if (g->batch > 1) MATMUL_LT_DESC_SET(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, g->bias_stride);
    }
    if (g->aux != NULL) {  // cuBLASLt wants the aux leading dimension (and batch stride) divisible by 8
        MATMUL_LT_DESC_SET(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g->aux);
        MATMUL_LT_DESC_SET(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g->aux_ld);
        if (g->batch > 1) MATMUL_LT_DESC_SET(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, g->aux_stride);
    }
    if (g->scale_a != NULL) MATMUL_LT_DESC_SET(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, g->scale_a);
    if (g->scale_b != NULL) MATMUL_LT_DESC_SET(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, g->scale_b);
#if CUBLAS_VERSION >= 120800  // the scale-mode attributes (block scaling) came with cuBLAS 12.8
    if (g->scale_mode_a != 0) MATMUL_LT_DESC_SET(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, g->scale_mode_a);
    if (g->scale_mode_b != 0) MATMUL_LT_DESC_SET(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, g->scale_mode_b);
#endif
    if (g->scale_d != NULL) MATMUL_LT_DESC_SET(desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, g->scale_d);
    if (g->amax_d != NULL) MATMUL_LT_DESC_SET(desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, g->amax_d);

    // layouts: rows/cols as stored (before op), column-major, leading dimension, strided batch
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasCheck(cublasLtMatrixLayoutCreate(&la, g->a_type, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, g->b_type, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&lc, g->c_type, g->m, g->n, g->ldc));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld, g->d_type, g->m, g->n, g->ldd));
    if (g->batch > 1) {
        cublasLtMatrixLayout_t layouts[4] = {la, lb, lc, ld};
        int64_t strides[4] = {g->stride_a, g->stride_b, g->stride_c, g->stride_d};
        int32_t count = g->batch;
        for (int i = 0; i < 4; i++) {
            MATMUL_LT_LAYOUT_SET(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count);
            MATMUL_LT_LAYOUT_SET(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, strides[i]);
        }
    }
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = llm_ctx.lt_workspace_bytes;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // the heuristic never sees the matrices and assumes 256-byte alignment unless told: tell it how
    // aligned they are (attention passes sub-matrices at arbitrary element offsets)
    const void* ptrs[4] = {g->a, g->b, g->c, g->d};
    cudaDataType_t types[4] = {g->a_type, g->b_type, g->c_type, g->d_type};
    int64_t batch_strides[4] = {g->stride_a, g->stride_b, g->stride_c, g->stride_d};
    cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++) {
        uintptr_t bits = (uintptr_t)ptrs[i];
        if (g->batch > 1) bits |= (uintptr_t)(batch_strides[i] * matmul_lt_type_size(types[i]));
        uint32_t align = 256;
        while (align > 1 && bits % align != 0) align /= 2;
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align, sizeof(align)));
    }

    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(llm_ctx.lt, desc, la, lb, lc, ld, pref, 1, &heuristic, &found);
    // an FP8 configuration this GPU or library lacks (a scale mode, a type pair, FP8 on sm_80) may be
    // refused as invalid or as an arch mismatch rather than unsupported: the FP8 caller falls back
    bool fp8 = g->a_type == CUDA_R_8F_E4M3 || g->a_type == CUDA_R_8F_E5M2;
    bool refused = st == CUBLAS_STATUS_NOT_SUPPORTED ||
                   (fp8 && (st == CUBLAS_STATUS_INVALID_VALUE || st == CUBLAS_STATUS_ARCH_MISMATCH));
    if (!refused) cublasCheck(st);
    if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
        if (!g->heuristic_only) {
            cublasCheck(cublasLtMatmul(llm_ctx.lt, desc, &g->alpha, g->a, la, g->b, lb, &g->beta, g->c, lc, g->d, ld,
                                       &heuristic.algo, llm_ctx.lt_workspace, llm_ctx.lt_workspace_bytes, stream));
        }
    } else {
        st = CUBLAS_STATUS_NOT_SUPPORTED;
    }
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(lc));
    cublasCheck(cublasLtMatrixLayoutDestroy(ld));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
    return st;
}

// matmul_batched_naive_cpu's contract (row-major, see there) on floatX, by cuBLASLt: the operands
// are swapped into the column-major product C^T = op(B)^T op(A)^T (top of this file). GELU and dGELU
// are fused into the product when llm_ctx.matmul_fuse_gelu is on, the aux layout allows it (cuBLASLt wants
// its leading dimension, here N, divisible by 8) and the library offers an algorithm; otherwise the
// product runs plain and a kernel applies them after.
static void matmul_cublaslt(floatX* c /*(batch: M x ldc)*/, const floatX* a /*(batch: op(A) (M,K))*/,
                            const floatX* b /*(batch: op(B) (K,N))*/, const floatX* bias /*(N) or NULL*/,
                            floatX* aux /*(batch,M,N) or NULL*/, int M, int N, int K, bool transA, bool transB,
                            int lda, int ldb, int ldc,
                            int batch, size_t strideA, size_t strideB, size_t strideC,
                            float alpha, float beta, MatmulEpilogue epilogue, cudaStream_t stream) {
    if (epilogue == MATMUL_EPILOGUE_DGELU && (aux == NULL || bias != NULL)) {
        die_at(__FILE__, __LINE__, "matmul: the DGELU epilogue needs aux (the pre-activation) and no bias");
    }
    if (M <= 0 || N <= 0 || batch <= 0) return;
    MatmulLtArgs g;
    memset(&g, 0, sizeof(g));
    g.m = N; g.n = M; g.k = K; g.batch = batch;
    g.a = b; g.a_type = MATMUL_CUDA_FLOATX; g.trans_a = transB; g.lda = ldb; g.stride_a = (int64_t)strideB;
    g.b = a; g.b_type = MATMUL_CUDA_FLOATX; g.trans_b = transA; g.ldb = lda; g.stride_b = (int64_t)strideA;
    g.c = c; g.c_type = MATMUL_CUDA_FLOATX; g.ldc = ldc; g.stride_c = (int64_t)strideC;
    g.d = c; g.d_type = MATMUL_CUDA_FLOATX; g.ldd = ldc; g.stride_d = (int64_t)strideC;
    g.alpha = alpha; g.beta = beta;
    g.bias = bias; g.bias_stride = 0;
    cublasLtEpilogue_t plain = bias != NULL ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (epilogue == MATMUL_EPILOGUE_NONE) {
        g.epilogue = plain;
        if (matmul_cublaslt_call(&g, stream) != CUBLAS_STATUS_SUCCESS) {
            fprintf(stderr, "error: cuBLASLt has no algorithm for M=%d N=%d K=%d batch=%d transA=%d transB=%d "
                    "(%s:%d)\n", M, N, K, batch, transA, transB, __FILE__, __LINE__);
            exit(EXIT_FAILURE);
        }
        return;
    }
    // the fused attempt
    if (llm_ctx.matmul_fuse_gelu && N % 8 == 0 && (aux == NULL || is_aligned16(aux))) {
        g.aux = aux; g.aux_ld = N; g.aux_stride = (int64_t)M * N;
        if (epilogue == MATMUL_EPILOGUE_GELU) {
            g.epilogue = aux != NULL ? (bias != NULL ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                     : (bias != NULL ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
        } else {
            g.epilogue = CUBLASLT_EPILOGUE_DGELU;
        }
        if (matmul_cublaslt_call(&g, stream) == CUBLAS_STATUS_SUCCESS) return;
        g.aux = NULL; g.aux_ld = 0; g.aux_stride = 0;
    }
    // unfused: the product (+ bias) by cuBLASLt, then the kernel. GELU with aux: the product goes to
    // aux (packed), then c = gelu(aux); without aux: in place in c.
    g.epilogue = plain;
    floatX* pre = c;
    int ldp = ldc;
    size_t sp = strideC;
    if (epilogue == MATMUL_EPILOGUE_GELU && aux != NULL) {
        pre = aux; ldp = N; sp = (size_t)M * N;
        g.d = aux; g.ldd = N; g.stride_d = (int64_t)sp;
    }
    if (matmul_cublaslt_call(&g, stream) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "error: cuBLASLt has no algorithm for M=%d N=%d K=%d batch=%d (%s:%d)\n", M, N, K, batch,
                __FILE__, __LINE__);
        exit(EXIT_FAILURE);
    }
    size_t total = (size_t)batch * M * N;
    if (total == 0) return;
    const int threads = 256;
    const int V = MATMUL_X128;
    bool vec = N % V == 0 && ldc % V == 0 && strideC % V == 0 && ldp % V == 0 && sp % V == 0 &&
               is_aligned16(c) && is_aligned16(pre) && (aux == NULL || is_aligned16(aux));
    dim3 grid((unsigned)ceil_div_sz(vec ? total / V : total, threads));
    if (epilogue == MATMUL_EPILOGUE_GELU) {
        if (vec) {
            LAUNCH(matmul_gelu_forward_kernel<MATMUL_X128>, grid, dim3(threads), 0, stream, c, ldc, strideC,
                   (const floatX*)pre, ldp, sp, M, N, batch);
        } else {
            LAUNCH(matmul_gelu_forward_kernel<1>, grid, dim3(threads), 0, stream, c, ldc, strideC, (const floatX*)pre, ldp,
                   sp, M, N, batch);
        }
    } else {
        if (vec) {
            LAUNCH(matmul_dgelu_inplace_kernel<MATMUL_X128>, grid, dim3(threads), 0, stream, c, ldc, strideC,
                   (const floatX*)aux, M, N, batch);
        } else {
            LAUNCH(matmul_dgelu_inplace_kernel<1>, grid, dim3(threads), 0, stream, c, ldc, strideC, (const floatX*)aux, M, N,
                   batch);
        }
    }
}

#endif  // LLM_HAS_KERNELS

// ----------------------------------------------------------------------------
// 4. launchers: the same signatures in every build

// The generic batched product (row-major; the contract is matmul_batched_naive_cpu's, above):
//   C_b (M,N) = epilogue(alpha * op(A_b) @ op(B_b) + beta * C_b [+ bias]),  X_b = X + b * strideX
// e.g. attention scores per (batch, head): preatt (T,T) = q (T,hs) @ k^T: transB with k stored (T,hs).
static void matmul_batched(floatX* c /*(batch: M x ldc)*/, const floatX* a /*(batch: op(A) (M,K))*/,
                           const floatX* b /*(batch: op(B) (K,N))*/, const floatX* bias /*(N) or NULL*/,
                           floatX* aux /*(batch,M,N) or NULL*/, int M, int N, int K, bool transA, bool transB,
                           int lda, int ldb, int ldc, int batch, size_t strideA, size_t strideB, size_t strideC,
                           float alpha, float beta, MatmulEpilogue epilogue, cudaStream_t stream) {
#if LLM_BUILD_CPU
    (void)stream;
    matmul_batched_cpu_x(c, a, b, bias, aux, M, N, K, transA, transB, lda, ldb, ldc, batch, strideA, strideB, strideC,
                         alpha, beta, epilogue);
#else
    matmul_cublaslt(c, a, b, bias, aux, M, N, K, transA, transB, lda, ldb, ldc, batch, strideA, strideB, strideC,
                    alpha, beta, epilogue, stream);
#endif
}

// forward: out = inp @ weight^T + bias. If pre_gelu != NULL: pre_gelu = inp @ weight^T + bias and
// out = gelu(pre_gelu).
static void matmul_forward(floatX* out /*(BT,OC)*/, floatX* pre_gelu /*(BT,OC) or NULL*/, const floatX* inp /*(BT,C)*/,
                           const floatX* weight /*(OC,C)*/, const floatX* bias /*(OC) or NULL*/, int BT, int C, int OC,
                           cudaStream_t stream) {
#if LLM_BUILD_CPU
    (void)stream;
    matmul_forward_cpu_x(out, pre_gelu, inp, weight, bias, BT, C, OC);
#else
    // out (BT,OC) = inp (BT,C) @ weight^T, weight stored (OC,C): transB
    matmul_cublaslt(out, inp, weight, bias, pre_gelu, BT, OC, C, false, true, C, C, OC, 1, 0, 0, 0, 1.0f, 0.0f,
                    pre_gelu != NULL ? MATMUL_EPILOGUE_GELU : MATMUL_EPILOGUE_NONE, stream);
#endif
}

// backward: dinp = dout @ weight (OVERWRITES dinp); dweight += dout^T @ inp (ACCUMULATES);
// dbias += column sums of dout (ACCUMULATES, if dbias != NULL).
// If pre_gelu_of_inp != NULL: inp is gelu(pre_gelu_of_inp) and dinp is also multiplied elementwise by
// gelu'(pre_gelu_of_inp) (the MLP's fused dGELU: the fcproj layer's call, given fc's pre-activation).
// dbias_scratch: FP32 scratch of MATMUL_DBIAS_MAX_SPLITS * OC floats for the bias gradient in the
// CUDA builds (unused, may be NULL, in the CPU build or when dbias is NULL).
// Each of the three parts is skipped when its output is NULL: dinp == NULL (weight and pre_gelu_of_inp
// unused) is the weight-gradient half, dweight == dbias == NULL (inp unused) the input-gradient half
// of the split backward of zero-bubble pipeline schedules (llm/gpt.h). The parts write disjoint
// outputs from the same inputs with the same kernels, so the halves run apart give the whole call's
// results bit for bit.
static void matmul_backward(floatX* dinp /*(BT,C) or NULL*/, floatX* dweight /*(OC,C) or NULL*/, floatX* dbias /*(OC) or NULL*/,
                            const floatX* dout /*(BT,OC)*/, const floatX* inp /*(BT,C)*/, const floatX* weight /*(OC,C)*/,
                            float* dbias_scratch /*(MATMUL_DBIAS_MAX_SPLITS*OC) or NULL*/,
                            const floatX* pre_gelu_of_inp /*(BT,C) or NULL*/, int BT, int C, int OC, cudaStream_t stream) {
#if LLM_BUILD_CPU
    (void)stream;
    (void)dbias_scratch;
    matmul_backward_cpu_x(dinp, dweight, dbias, dout, inp, weight, pre_gelu_of_inp, BT, C, OC);
#else
    if (dbias != NULL) matmul_dbias(dbias, dbias_scratch, dout, BT, OC, stream);
    // dinp (BT,C) = dout (BT,OC) @ weight (OC,C) [* gelu'(pre_gelu_of_inp)]
    if (dinp != NULL) {
        matmul_cublaslt(dinp, dout, weight, NULL, (floatX*)pre_gelu_of_inp, BT, C, OC, false, false, OC, C, C, 1, 0, 0, 0,
                        1.0f, 0.0f, pre_gelu_of_inp != NULL ? MATMUL_EPILOGUE_DGELU : MATMUL_EPILOGUE_NONE, stream);
    }
    // dweight (OC,C) += dout^T @ inp: dout stored (BT,OC) = (K,M): transA
    if (dweight != NULL) {
        matmul_cublaslt(dweight, dout, inp, NULL, NULL, OC, C, BT, true, false, OC, C, C, 1, 0, 0, 0, 1.0f, 1.0f,
                        MATMUL_EPILOGUE_NONE, stream);
    }
#endif
}
