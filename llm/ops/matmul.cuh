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
// The three forms, one file each (included below, in this order), then the launchers here:
//   1. CPU (llm/ops/matmul_cpu.h): plain loops (*_naive_cpu: the math, the oracle of the tests) and the
//      CPU build's fast implementation (*_cpu: OpenBLAS sgemm for the products; bias, GELU (with a
//      vectorizable tanh) and dbias in OpenMP loops).
//   2. CUDA kernels (llm/ops/matmul_kernels.cuh): the bias gradient (a deterministic column sum), and
//      GELU / dGELU for the cases where cuBLASLt cannot fuse them into the product.
//   3. cuBLASLt (llm/ops/matmul_cublaslt.cuh); then, in this file, the launchers the model calls
//      (matmul_forward, matmul_backward, matmul_batched), with the same signatures in every build.
//
// Row-major vs cuBLAS's column-major: cuBLAS reads a matrix in column-major order, so a row-major
// X (R rows, S columns, row stride ld) is, to cuBLAS, the column-major matrix X^T (S rows, R columns,
// same ld), with no copy. A row-major product C = op(A) @ op(B) is therefore computed as the
// column-major product C^T = op(B)^T @ op(A)^T: swap the operands, keep their transpose flags, and
// swap the output's dimensions (cuBLAS m = N, n = M). A bias along C's columns (one per output
// feature) is then cuBLAS's bias along D's rows, which is what its BIAS epilogue adds.
#pragma once
#include "../core/common.h"
#include "../core/context.h"  // the cuBLASLt handle and workspace
#include "gelu.cuh"  // gelu_scalar / gelu_grad_scalar: the one definition of GELU
#include "../core/cuda_utils.cuh"
#include "matmul_epilogue.h"   // MatmulEpilogue, MATMUL_DBIAS_MAX_SPLITS
#include "matmul_cpu.h"        // 1. the plain loops (oracle) and the CPU build's sgemm implementation
#include "matmul_kernels.cuh"  // 2. the bias-gradient and GELU / dGELU kernels (kernel builds)
#include "matmul_cublaslt.cuh" // 3. the cuBLASLt wrapper (FP8 scale modes included) and matmul_cublaslt

#if LLM_BUILD_CPU
#include <cblas.h>
#endif  // the kernel builds get cuBLASLt (real, or dev/emu's subset run on the CPU) from context.h

// the three forms, one file each (the op-file order: CPU, CUDA kernels, cuBLASLt), then the launchers

// ----------------------------------------------------------------------------
// 4. launchers: the same signatures in every build

// The generic batched product (row-major; the contract is matmul_batched_naive_cpu's, llm/ops/matmul_cpu.h):
//   C_b (M,N) = epilogue(alpha * op(A_b) @ op(B_b) + beta * C_b [+ bias]),  X_b = X + b * strideX
// e.g. attention scores per (batch, head): preatt (T,T) = q (T,hs) @ k^T: transB with k stored (T,hs).
static void matmul_batched(floatX* c /*(batch: M x ldc)*/, const floatX* a /*(batch: op(A) (M,K))*/,
                           const floatX* b /*(batch: op(B) (K,N))*/, const floatX* bias /*(N) or NULL*/,
                           floatX* aux /*(batch,M,N) or NULL*/, int M, int N, int K, bool transA, bool transB,
                           int lda, int ldb, int ldc, int batch, size_t strideA, size_t strideB, size_t strideC,
                           float alpha, float beta, MatmulEpilogue epilogue, cudaStream_t stream) {
    OP_PROFILE(OP_BIAS_GELU);
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
    OP_PROFILE(OP_BIAS_GELU);
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
// of the split backward of zero-bubble pipeline schedules (llm/model/stage.h). The parts write disjoint
// outputs from the same inputs with the same kernels, so the halves run apart give the whole call's
// results bit for bit.
static void matmul_backward(floatX* dinp /*(BT,C) or NULL*/, floatX* dweight /*(OC,C) or NULL*/, floatX* dbias /*(OC) or NULL*/,
                            const floatX* dout /*(BT,OC)*/, const floatX* inp /*(BT,C)*/, const floatX* weight /*(OC,C)*/,
                            float* dbias_scratch /*(MATMUL_DBIAS_MAX_SPLITS*OC) or NULL*/,
                            const floatX* pre_gelu_of_inp /*(BT,C) or NULL*/, int BT, int C, int OC, cudaStream_t stream) {
    OP_PROFILE(OP_BIAS_GELU);
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
