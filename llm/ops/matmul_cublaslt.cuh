// matmul_cublaslt.cuh: the cuBLASLt wrapper of llm/ops/matmul.cuh (one part of matmul.cuh; users
// include matmul.cuh):
//   - MatmulLtArgs and matmul_cublaslt_call: one cuBLASLt product in cuBLAS's column-major terms, with
//     any cudaDataType, bias / GELU / dGELU epilogues, and the FP8 plumbing (scale pointers, the
//     block-scaling scale modes of cuBLAS >= 12.8, D's scale and amax; llm/precision/matmul_fp8.cuh calls it);
//   - matmul_cublaslt: the row-major floatX product of matmul_batched, GELU / dGELU fused when
//     cuBLASLt can, otherwise by the kernels of llm/ops/matmul_kernels.cuh after the product.
// The row-major to column-major swap is explained at the top of matmul.cuh.
#pragma once
#include "../core/common.h"
#include "../core/context.h"  // the cuBLASLt handle and workspace, cublasCheck
#include "../core/cuda_utils.cuh"
#include "matmul_epilogue.h"  // MatmulEpilogue
#include "matmul_kernels.cuh"  // MATMUL_X128, matmul_gelu_forward_kernel, matmul_dgelu_inplace_kernel

// ----------------------------------------------------------------------------
// 3. cuBLASLt
#if LLM_HAS_KERNELS

// cublasCheck: llm/core/context.h

#if defined(ENABLE_FP32)
#define MATMUL_CUDA_FLOATX CUDA_R_32F
#elif defined(ENABLE_FP16)
#define MATMUL_CUDA_FLOATX CUDA_R_16F
#else
#define MATMUL_CUDA_FLOATX CUDA_R_16BF
#endif

// The cuBLASLt handle and its workspace live in the process's context (llm/core/context.h), as does the
// knob llm_ctx.matmul_fuse_gelu: 1 lets cuBLASLt fuse GELU / dGELU into the product whenever its
// heuristic offers an algorithm for it; 0 always uses the separate kernels of llm/ops/matmul_kernels.cuh
// (the tests run both).

// One cuBLASLt call in cuBLAS's own terms (column-major, see the top of llm/ops/matmul.cuh), per batch b:
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
    int heuristic_only;                  // 1: ask the heuristic, run nothing (llm/precision/matmul_fp8.cuh's describe)
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
// are swapped into the column-major product C^T = op(B)^T op(A)^T (top of llm/ops/matmul.cuh). GELU and dGELU
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
