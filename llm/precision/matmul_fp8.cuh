// matmul_fp8.cuh: the FP8 GEMM of the FP8 linear layers (llm/precision/fp8_linear.h):
//
//   out (M, N) = epilogue( A (M, K) B (N, K)^T  [+ bias] [+ out] )     A, B: Fp8Matrix (llm/precision/fp8_matrix.cuh)
//
// where A and B are the dequantized operands (each code times its tile's 1/scale), the products are
// accumulated in FP32 and the result is rounded once to floatX. Epilogues (those of matmul.cuh):
// bias (N), accumulate (out +=), GELU (pre_gelu gets the pre-activation, out its GELU), or dGELU (out
// times gelu'(dgelu_pre)).
//
// Paths, the first that the library accepts:
//   1. cuBLASLt FP8: E4M3/E5M2 codes as CUDA_R_8F_E4M3/E5M2 operands, "TN" (both K contiguous, as
//      cuBLASLt requires for FP8), the scales as A/B_SCALE_POINTER with the recipe's A/B_SCALE_MODE:
//        per tensor  CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F     (1/s: cuBLASLt multiplies by the scale)
//        1x128       CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
//        128x128     CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
//        mx          CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0
//      Which GPUs have them (cuBLAS maintainers, NVIDIA/CUDALibrarySamples issues #270 and #310, pointing
//      at the table of the cuBLAS docs): VEC128_32F and BLK128x128_32F "were introduced in cuBLAS 12.9"
//      and are "currently only supported on SM90"; "On SM100+ supports CUBLASLT_MATMUL_MATRIX_SCALE_
//      VEC32_UE8M0"; per-tensor scalars on every FP8 GPU (sm_89, sm_90, sm_100+). E5M2 x E5M2 has no
//      kernel. So on sm_90 (H100): delayed and current take cuBLASLt (scalar scales), block takes cuBLASLt
//      (VEC128 x BLK128x128 forward and dgrad, VEC128 x VEC128 wgrad), mx takes the fallback; on sm_100
//      mx takes cuBLASLt and block the fallback. (The block pairs are the three of the DeepSeek recipe as
//      public scaled-GEMM callers list them: 1x128 x 1x128, 1x128 x 128x128, 128x128 x 1x128; not
//      128x128 x 128x128, which no GEMM here needs.) The program asks the heuristic at start-up and prints
//      what it answered (matmul_fp8_describe), so the line is the library's word, not this comment's.
//      Block modes are tried only when K is a whole number of blocks (K % 128 == 0 for VEC128/BLK, % 32
//      for VEC32): the partial-block semantics of the library were not documented where we looked.
//      The epilogue is fused into cuBLASLt when it can be (bias and GELU_AUX in BF16); otherwise the
//      product goes to an FP32 temporary and one kernel applies bias, accumulate, GELU / dGELU and rounds.
//   2. fallback (the library refuses: no FP8 on this GPU, a scale mode it lacks, E5M2 x E5M2, shapes it
//      does not take): both operands dequantized to FP32 by a kernel (the same products decode(q) * 1/s),
//      an FP32 cuBLASLt GEMM with FP32 accumulation into an FP32 temporary, and the same epilogue kernel.
//      Same numerics as path 1: FP32 values of the same products, FP32 sums, one rounding to floatX.
//      (Not BF16 operands: decode(q) * 1/s has up to 4 + 24 significant bits, so BF16 would add a
//      rounding of 2^-9 per element that the FP8 path does not have; FP32 keeps each product exact
//      up to one FP32 rounding. The price is FP32 GEMM speed, for the recipes this GPU lacks.)
// The CPU build computes the same numbers: dequantize (fp8_matrix_dequant), sgemm, the epilogue loop.
//
// Layout: the CPU reference (also the CPU build), the epilogue kernel, the cuBLASLt paths, the launcher.
#pragma once
#include "../core/common.h"
#include "../core/context.h"
#include "fp8.cuh"
#include "fp8_matrix.cuh"
#include "../ops/gelu.cuh"
#include "../ops/matmul.cuh"

enum { FP8_GEMM_CPU = 0, FP8_GEMM_CUBLASLT = 1, FP8_GEMM_FALLBACK = 2 };  // what matmul_fp8 returns

// ----------------------------------------------------------------------------
// 1. CPU reference: the epilogue of one element, and the whole GEMM on the host

// v: the FP32 product (+ nothing else yet); returns what out gets (before the rounding to floatX)
LLM_HD static inline float fp8_epilogue(float v, int j, float* pre_gelu_out, const floatX* bias, const floatX* out_old,
                                        const floatX* dgelu_pre) {
    if (bias != NULL) v += (float)bias[j];
    if (out_old != NULL) v += (float)*out_old;
    if (pre_gelu_out != NULL) { *pre_gelu_out = v; v = gelu_scalar(v); }  // GELU of the FP32 value, as cuBLASLt's GELU_AUX
    if (dgelu_pre != NULL) v *= gelu_grad_scalar((float)*dgelu_pre);
    return v;
}

// out, pre_gelu, dgelu_pre (M, N), bias (N): host memory. a, b: host Fp8Matrix.
static void matmul_fp8_cpu(floatX* out, floatX* pre_gelu, const floatX* dgelu_pre, const Fp8Matrix* a, const Fp8Matrix* b,
                           const floatX* bias, int accumulate) {
    int M = a->rows, N = b->rows, K = a->K;
    float* da = (float*)mallocCheck((size_t)M * K * sizeof(float) + 1);
    float* db = (float*)mallocCheck((size_t)N * K * sizeof(float) + 1);
    float* c = (float*)mallocCheck((size_t)M * N * sizeof(float) + 1);
    fp8_matrix_dequant_cpu(da, a);
    fp8_matrix_dequant_cpu(db, b);
#if LLM_BUILD_CPU
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, da, K, db, K, 0.0f, c, N);
#else
    matmul_batched_naive_cpu(c, da, db, NULL, NULL, M, N, K, false, true, K, K, N, 1, 0, 0, 0, 1.0f, 0.0f, MATMUL_EPILOGUE_NONE);
#endif
    #pragma omp parallel for
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            size_t o = (size_t)i * N + j;
            float pre;
            float v = fp8_epilogue(c[o], j, pre_gelu ? &pre : NULL, bias, accumulate ? out + o : NULL,
                                   dgelu_pre ? dgelu_pre + o : NULL);
            if (pre_gelu) pre_gelu[o] = (floatX)pre;
            out[o] = (floatX)v;
        }
    }
    free(da); free(db); free(c);
}

// ----------------------------------------------------------------------------
// 2. the epilogue kernel (paths that do not fuse it into cuBLASLt)
#if LLM_HAS_KERNELS

__global__ void fp8_epilogue_kernel(floatX* out,               // (M, N): written (read first with accumulate)
                                    floatX* pre_gelu,          // (M, N) or NULL
                                    const floatX* dgelu_pre,   // (M, N) or NULL
                                    const float* acc,          // (M, N) the FP32 products
                                    const floatX* bias,        // (N) or NULL
                                    int accumulate, int M, int N) {
    size_t n = (size_t)M * N;
    for (size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x; o < n; o += (size_t)gridDim.x * blockDim.x) {
        // two calls rather than `pre_gelu ? &pre : NULL`: a pointer that may point at `pre` puts it in local
        // memory (a stack slot, one STL and LDL per element: scripts/kernel_report.py found it); each call's
        // pointer is known, so `pre` stays in a register
        float pre = 0.0f;
        const floatX* old = accumulate ? out + o : NULL;
        const floatX* dg = dgelu_pre ? dgelu_pre + o : NULL;
        float v = pre_gelu ? fp8_epilogue(acc[o], (int)(o % N), &pre, bias, old, dg)
                           : fp8_epilogue(acc[o], (int)(o % N), NULL, bias, old, dg);
        if (pre_gelu) pre_gelu[o] = (floatX)pre;
        out[o] = (floatX)v;
    }
}

// ----------------------------------------------------------------------------
// 3. cuBLASLt

#if CUBLAS_VERSION >= 120900
#define FP8_LT_BLOCK_MODES 1  // VEC128_32F / BLK128x128_32F / VEC32_UE8M0 in the headers
#else
#define FP8_LT_BLOCK_MODES 0  // older cuBLAS: per-tensor scales only, the block recipes take the fallback
#endif

// the scale mode of a scaling, or -1 if this cuBLAS has none
static int fp8_lt_scale_mode(Fp8Scaling s) {
    if (s == FP8_SCALE_TENSOR) return 0;  // CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F
#if FP8_LT_BLOCK_MODES
    if (s == FP8_SCALE_1x128) return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    if (s == FP8_SCALE_128x128) return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    return CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;
#else
    return -1;
#endif
}
static const char* fp8_lt_scale_mode_name(Fp8Scaling s) {
    static const char* names[] = {"SCALAR_32F", "VEC128_32F", "BLK128x128_32F", "VEC32_UE8M0"};
    return names[s];
}

// our K-divisibility rule for the block modes (see the top)
static int fp8_lt_shape_ok(Fp8Scaling s, int K) {
    if (s == FP8_SCALE_1x128 || s == FP8_SCALE_128x128) return K % FP8_BLOCK == 0;
    if (s == FP8_SCALE_MX32) return K % FP8_MX_BLOCK == 0;
    return 1;
}

// the cuBLASLt FP8 call for out (M,N) = a b^T (column-major: out^T (N,M) = b (N,K) a^T, b is cuBLAS's A,
// transposed; see matmul.cuh's top). d: floatX out, or an FP32 temporary (d_fp32). Returns the status.
static cublasStatus_t matmul_fp8_lt(void* d, int d_fp32, const void* c, float beta, const Fp8Matrix* a, const Fp8Matrix* b,
                                    const floatX* bias, floatX* aux, int heuristic_only, cudaStream_t stream) {
    int ma = fp8_lt_scale_mode(a->scaling), mb = fp8_lt_scale_mode(b->scaling);
    if (ma < 0 || mb < 0 || !fp8_lt_shape_ok(a->scaling, a->K) || !fp8_lt_shape_ok(b->scaling, b->K)) {
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    MatmulLtArgs g;
    memset(&g, 0, sizeof(g));
    int M = a->rows, N = b->rows, K = a->K;
    g.m = N; g.n = M; g.k = K; g.batch = 1;
    g.a = b->q; g.a_type = b->fmt == FP8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; g.trans_a = true; g.lda = K;
    g.b = a->q; g.b_type = a->fmt == FP8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; g.trans_b = false; g.ldb = K;
    cudaDataType_t dt = d_fp32 ? CUDA_R_32F : MATMUL_CUDA_FLOATX;
    g.c = c != NULL ? c : d; g.c_type = dt; g.ldc = N;
    g.d = d; g.d_type = dt; g.ldd = N;
    g.alpha = 1.0f; g.beta = beta;
    g.scale_a = b->lt_scale; g.scale_mode_a = mb;
    g.scale_b = a->lt_scale; g.scale_mode_b = ma;
    g.heuristic_only = heuristic_only;
    g.bias = bias;
    if (aux != NULL) {
        g.aux = aux; g.aux_ld = N;
        g.epilogue = bias != NULL ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    } else {
        g.epilogue = bias != NULL ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    }
    return matmul_cublaslt_call(&g, stream);
}

// FP32 scratch of at least `bytes` (llm_ctx.fp8_scratch, grown on demand)
static float* fp8_scratch(size_t bytes) {
    if (bytes > llm_ctx.fp8_scratch_bytes) {
        if (llm_ctx.fp8_scratch != NULL) {
            cudaCheck(cudaStreamSynchronize(llm_ctx.stream));
            device_free(llm_ctx.fp8_scratch);
        }
        llm_ctx.fp8_scratch = device_malloc(bytes, MEM_WORKSPACE);
        llm_ctx.fp8_scratch_bytes = bytes;
    }
    return (float*)llm_ctx.fp8_scratch;
}

static void fp8_epilogue_launch(floatX* out, floatX* pre_gelu, const floatX* dgelu_pre, const float* acc, const floatX* bias,
                                int accumulate, int M, int N, cudaStream_t stream) {
    size_t n = (size_t)M * N;
    int grid = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
    LAUNCH(fp8_epilogue_kernel, dim3(grid), dim3(256), 0, stream, out, pre_gelu, dgelu_pre, acc, bias, accumulate, M, N);
}

// the fallback: dequantize both operands to FP32, an FP32 GEMM into an FP32 temporary, the epilogue kernel
static void matmul_fp8_fallback(floatX* out, floatX* pre_gelu, const floatX* dgelu_pre, const Fp8Matrix* a, const Fp8Matrix* b,
                                const floatX* bias, int accumulate, cudaStream_t stream) {
    int M = a->rows, N = b->rows, K = a->K;
    size_t na = fp8_align256((size_t)M * K * 4), nb = fp8_align256((size_t)N * K * 4);
    char* s = (char*)fp8_scratch(na + nb + (size_t)M * N * 4);
    float* da = (float*)s; float* db = (float*)(s + na); float* acc = (float*)(s + na + nb);
    fp8_matrix_dequant(da, a, stream);
    fp8_matrix_dequant(db, b, stream);
    MatmulLtArgs g;
    memset(&g, 0, sizeof(g));
    g.m = N; g.n = M; g.k = K; g.batch = 1;
    g.a = db; g.a_type = CUDA_R_32F; g.trans_a = true; g.lda = K;
    g.b = da; g.b_type = CUDA_R_32F; g.trans_b = false; g.ldb = K;
    g.c = acc; g.c_type = CUDA_R_32F; g.ldc = N;
    g.d = acc; g.d_type = CUDA_R_32F; g.ldd = N;
    g.alpha = 1.0f; g.beta = 0.0f;
    if (matmul_cublaslt_call(&g, stream) != CUBLAS_STATUS_SUCCESS) {
        fatal("matmul_fp8: no FP32 cuBLASLt algorithm for the fallback, M=%d N=%d K=%d (%s:%d)", M, N, K, __FILE__, __LINE__);
    }
    fp8_epilogue_launch(out, pre_gelu, dgelu_pre, acc, bias, accumulate, M, N, stream);
}

#endif  // LLM_HAS_KERNELS

// ----------------------------------------------------------------------------
// 4. the launcher and the start-up description

// out (M, N) = epilogue(a (M, K) b (N, K)^T [+ bias] [+ out]), see the top. All pointers device (host in
// the CPU build). Returns the path taken: FP8_GEMM_CUBLASLT, FP8_GEMM_FALLBACK, or FP8_GEMM_CPU.
static int matmul_fp8(floatX* out /*(M,N)*/, floatX* pre_gelu /*(M,N) or NULL*/, const floatX* dgelu_pre /*(M,N) or NULL*/,
                      const Fp8Matrix* a /*(M,K)*/, const Fp8Matrix* b /*(N,K)*/, const floatX* bias /*(N) or NULL*/,
                      int accumulate, cudaStream_t stream) {
    int M = a->rows, N = b->rows, K = a->K;
    if (b->K != K) fatal("matmul_fp8: inner dimensions differ: A (%d, %d), B (%d, %d)", M, a->K, N, b->K);
    if (pre_gelu != NULL && dgelu_pre != NULL) fatal("matmul_fp8: GELU and dGELU epilogues together");
#if LLM_BUILD_CPU
    (void)stream;
    matmul_fp8_cpu(out, pre_gelu, dgelu_pre, a, b, bias, accumulate);
    return FP8_GEMM_CPU;
#else
    if (M == 0 || N == 0) return FP8_GEMM_CUBLASLT;
    if (!llm_ctx.fp8_gemm_fallback) {
        // (a) the epilogue fused: bias and GELU_AUX in BF16 (cuBLASLt's FP8 bias type is BF16), no dGELU
        int bf16 = MATMUL_CUDA_FLOATX == CUDA_R_16BF;
        int fusable = dgelu_pre == NULL && (bias == NULL || bf16) &&
                      (pre_gelu == NULL || (bf16 && llm_ctx.matmul_fuse_gelu && N % 8 == 0));
        if (fusable && pre_gelu == NULL) {
            if (matmul_fp8_lt(out, 0, out, accumulate ? 1.0f : 0.0f, a, b, bias, NULL, 0, stream) == CUBLAS_STATUS_SUCCESS)
                return FP8_GEMM_CUBLASLT;
        } else if (fusable && !accumulate) {
            if (matmul_fp8_lt(out, 0, NULL, 0.0f, a, b, bias, pre_gelu, 0, stream) == CUBLAS_STATUS_SUCCESS)
                return FP8_GEMM_CUBLASLT;
        }
        // (b) the FP8 product into an FP32 temporary, then the epilogue kernel
        float* acc = fp8_scratch((size_t)M * N * sizeof(float));
        if (matmul_fp8_lt(acc, 1, NULL, 0.0f, a, b, NULL, NULL, 0, stream) == CUBLAS_STATUS_SUCCESS) {
            fp8_epilogue_launch(out, pre_gelu, dgelu_pre, acc, bias, accumulate, M, N, stream);
            return FP8_GEMM_CUBLASLT;
        }
    }
    matmul_fp8_fallback(out, pre_gelu, dgelu_pre, a, b, bias, accumulate, stream);
    return FP8_GEMM_FALLBACK;
#endif
}

// One start-up line's part: the path of an (M, K) x (N, K) product with these scalings and formats on
// this GPU, as cuBLASLt's heuristic answers for the plain product into floatX (path 1a without an
// epilogue: the dgrad and, with beta = 1, the wgrad call). E.g. "cuBLASLt FP8 E4M3 x E4M3, scales
// VEC128_32F x BLK128x128_32F".
static void matmul_fp8_describe(char* buf, size_t len, int M, int N, int K, Fp8Scaling sa, Fp8Scaling sb, int fa, int fb) {
    const char* fn[2] = {"E4M3", "E5M2"};
#if LLM_BUILD_CPU
    (void)M; (void)N; (void)K; (void)sa; (void)sb;
    snprintf(buf, len, "CPU: %s x %s dequantized, FP32 sgemm", fn[fa], fn[fb]);
#else
    context_require("matmul_fp8_describe");
    // the heuristic sees no data: operands with the right shapes, formats and scaling, no memory
    Fp8Matrix a, b;
    memset(&a, 0, sizeof(a)); memset(&b, 0, sizeof(b));
    a.rows = M; a.K = K; a.fmt = fa; a.scaling = sa; a.q = (uint8_t*)(uintptr_t)256; a.lt_scale = (void*)(uintptr_t)512;
    b.rows = N; b.K = K; b.fmt = fb; b.scaling = sb; b.q = (uint8_t*)(uintptr_t)768; b.lt_scale = (void*)(uintptr_t)1024;
    cublasStatus_t st = matmul_fp8_lt((void*)(uintptr_t)1280, 0, NULL, 0.0f, &a, &b, NULL, NULL, 1, llm_ctx.stream);
    int dev = 0, major = 0, minor = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (llm_ctx.fp8_gemm_fallback) {
        snprintf(buf, len, "fallback (forced): %s x %s dequantized, FP32 GEMM", fn[fa], fn[fb]);
    } else if (st == CUBLAS_STATUS_SUCCESS) {
        snprintf(buf, len, "cuBLASLt FP8 %s x %s, scales %s x %s", fn[fa], fn[fb], fp8_lt_scale_mode_name(sa),
                 fp8_lt_scale_mode_name(sb));
    } else {
        snprintf(buf, len, "fallback: %s x %s dequantized, FP32 GEMM (cuBLASLt %d.%d has no FP8 %s x %s kernel on sm_%d%d%s)",
                 fn[fa], fn[fb], CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, fp8_lt_scale_mode_name(sa), fp8_lt_scale_mode_name(sb),
                 major, minor, (fp8_lt_shape_ok(sa, K) && fp8_lt_shape_ok(sb, K)) ? "" : " for this K");
    }
#endif
}
