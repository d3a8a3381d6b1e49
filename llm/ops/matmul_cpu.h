// matmul_cpu.h: the CPU forms of llm/ops/matmul.cuh's products (one part of matmul.cuh, which includes
// it first; users include matmul.cuh):
//   - the math as plain loops (*_naive_cpu: FP32, always compiled, the oracle of the tests);
//   - the CPU build's implementation (*_cpu: OpenBLAS sgemm for the products; bias, GELU and dbias
//     in OpenMP loops), and its 16-bit floatX views (*_cpu_x: FP32 copies, each output rounded once;
//     BF16 products by sbgemm where LLM_HAVE_SBGEMM).
// The contracts (row-major, epilogues, aux layout) are stated at matmul_batched_naive_cpu below and
// at the top of matmul.cuh.
#pragma once
#include "../core/common.h"
#include "../core/context.h"  // llm_ctx.prof: each product's time and shape (llm/core/op_profile.h)
#include "gelu.cuh"  // gelu_scalar / gelu_grad_scalar
#include "matmul_epilogue.h"  // MatmulEpilogue

#if LLM_BUILD_CPU
#include <cblas.h>
#endif

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

// BATCH row-major products C_b = alpha op(A_b) op(B_b) + beta C_b by sgemm, one after the other, or one per
// OpenMP thread (each single-threaded) where PER_THREAD; timed as one GEMM of its shape (op_profile.h)
static void sgemm_cpu(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* a, int lda,
                      const float* b, int ldb, float beta, float* c, int ldc, int batch = 1, size_t strideA = 0,
                      size_t strideB = 0, size_t strideC = 0, int per_thread = 0) {
    OpScope scope(&llm_ctx.prof, OP_GEMM);
    // two loops, not one with OpenMP's if clause: inside a parallel region, even an inactive one, OpenBLAS runs
    // each sgemm on one thread (the make train step 23.8 -> 82.0 ms when they were one)
    if (per_thread) {
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
    scope.gemm({ta == CblasTrans, tb == CblasTrans, M, N, K, batch, beta, 0, 0, 0.0});
}

static void matmul_forward_cpu(float* out /*(BT,OC)*/, float* pre_gelu /*(BT,OC) or NULL*/, const float* inp /*(BT,C)*/,
                               const float* weight /*(OC,C)*/, const float* bias /*(OC) or NULL*/, int BT, int C, int OC) {
    float* dst = pre_gelu != NULL ? pre_gelu : out;
    sgemm_cpu(CblasNoTrans, CblasTrans, BT, OC, C, 1.0f, inp, C, weight, C, 0.0f, dst, OC);
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
        sgemm_cpu(CblasNoTrans, CblasNoTrans, BT, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
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
    if (dweight != NULL) sgemm_cpu(CblasTrans, CblasNoTrans, OC, C, BT, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
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
    sgemm_cpu(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, batch, strideA, strideB, strideC, per_batch_threads);
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
    OpScope scope(&llm_ctx.prof, OP_GEMM);
    cblas_sbgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, (const bfloat16*)a, lda, (const bfloat16*)b, ldb, beta, c, ldc);
    scope.gemm({ta == CblasTrans, tb == CblasTrans, M, N, K, 1, beta, 1, 0, 0.0});
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
