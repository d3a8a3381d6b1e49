// cublaslt_emu.h: the subset of cuBLASLt that the trainer calls, run on the CPU for the emulated build.
//
// The functions below have the toolkit's own signatures (declared extern "C" by <cublasLt.h>) and
// cuBLAS's semantics, so llm/ops/matmul.cuh compiles unchanged against either this file or the real
// library. What is emulated:
//
//   D = epilogue(alpha * scaleA * scaleB * op(A) @ op(B) + beta * scaleC * C [+ bias])   per batch
//
//   - all matrices column-major (CUBLASLT_ORDER_COL): element (r, c) of a matrix with leading
//     dimension ld sits at ptr[r + c * ld]; op(X) = X or X^T (CUBLAS_OP_N / CUBLAS_OP_T)
//   - A is m x k after op, B is k x n after op, C and D are m x n; layouts give rows/cols of the
//     matrix as stored (before op), the leading dimension, a batch count and a strided-batch offset
//   - compute type CUBLAS_COMPUTE_32F, scale type CUDA_R_32F: inputs are converted to float and
//     accumulated in float, alpha/beta applied in float, one rounding to the type of D
//   - types (A, B -> C, D): FP32 -> FP32; BF16 -> BF16; BF16 -> FP32; FP16 -> FP16; FP16 -> FP32; FP8 (E4M3/E5M2, not both
//     E5M2) -> FP32, BF16, or FP8 D with a BF16 C. FP8 needs "TN" (transa = T, transb = N) and
//     16-byte aligned pointers and leading dimensions, as on Hopper.
//   - FP8 scales (CUBLASLT_MATMUL_DESC_{A,B,C,D}_SCALE_POINTER, float on the "device"):
//       D_temp = epilogue(alpha * scaleA * scaleB * op(A) op(B) + beta * scaleC * C [+ bias])
//       amax_D = max |D_temp|   (CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, before the D scale)
//       D      = scaleD * D_temp  (scaleD only when D is FP8), converted with saturation
//     Setting a non-NULL A/B/C scale on non-FP8 inputs, or a D scale on a non-FP8 D, is an error
//     (CUBLAS_STATUS_INVALID_VALUE), as the real library reports.
//   - FP8 scale modes (CUBLASLT_MATMUL_DESC_A/B_SCALE_MODE, cuBLAS 12.8+): the A/B scale pointer is then
//     a tensor of dequantization factors, one per block of op(A) (m x k) / op(B) (k x n) along k, each
//     element multiplied by its block's factor before the product. Layouts (as llm/precision/fp8_matrix.cuh
//     states them, with "outer" = m for A, n for B, and p the index along k):
//       SCALAR_32F      one float (the default, as above)
//       VEC128_32F      float at (p/128) * round_up(outer, 4) + outer_index
//       BLK128x128_32F  float at (outer_index/128) * round_up(ceil(k/128), 4) + p/128
//       VEC32_UE8M0     E8M0 byte (2^(e-127)) in 512-byte tiles of 128 outer x 4 blocks of 32:
//                       tile (outer_index/128) * ceil(ceil(k/32)/4) + (p/32)/4, inside it
//                       (outer_index%32)*16 + ((outer_index%128)/32)*4 + (p/32)%4
//     Which modes a GPU has (the cuBLAS maintainers, NVIDIA/CUDALibrarySamples #270 and #310):
//     VEC128_32F and BLK128x128_32F on sm_90 only, VEC32_UE8M0 on sm_100+, SCALAR_32F on every FP8
//     GPU (sm_89+). The emulated GPU is sm_90 unless CUBLASLT_EMU_ARCH says otherwise (e.g. 100, or 80
//     for a GPU without FP8), so the tests exercise both the library's block paths and its refusals.
//     Pairs: SCALAR x SCALAR, VEC128 x VEC128, VEC128 x BLK128x128 (either side), VEC32 x VEC32; block
//     modes need k a whole number of blocks and a BF16 or FP32 D (our reading; see fp8_matrix.cuh).
//   - epilogues: DEFAULT, BIAS, GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU.
//       bias: a vector of length m (rows of D) added to every column; BIAS_BATCH_STRIDE per batch.
//             Its type is D's type, except FP8 inputs, where it is BF16.
//       GELU: the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
//       *_AUX: the GELU input (after bias) is written to the aux matrix (column-major, m x n,
//             EPILOGUE_AUX_LD >= m and divisible by 8, EPILOGUE_AUX_BATCH_STRIDE), type of D.
//       DGELU: D = (alpha op(A) op(B) + beta C) * gelu'(aux), aux read (same layout rules).
//     Anything else (ReLU, BGRAD*, DGELU_BGRAD) returns CUBLAS_STATUS_NOT_SUPPORTED.
//   - beta == 0: C is not read (NaN there does not propagate), as in BLAS.
//   - alpha/beta: host pointers (CUBLASLT_POINTER_MODE_HOST) or "device" pointers (POINTER_MODE_
//     DEVICE; in the emulator device memory is host memory).
// Anything outside this subset returns an error status, so a misuse shows up in the emulated
// tests: wrong attribute sizes, shapes that do not chain, ld < rows, mismatched batch counts,
// unsupported types, orders, epilogues or attributes. The heuristic returns one "algorithm"
// (workspace 0) for every supported configuration and CUBLAS_STATUS_NOT_SUPPORTED otherwise; the
// matmul then refuses matrices less aligned than min(16, the preference's MIN_ALIGNMENT_*_BYTES,
// default 256) bytes, as a GPU kernel chosen for aligned data would fail on them.
//
// Execution is synchronous on the calling thread (emulated streams are synchronous): per batch,
// op(A) and op(B) are converted to float in a layout that makes the inner loop contiguous, then a
// register-tiled loop with OpenMP over output tiles computes the products, then the epilogue.
// Accumulation runs over k in order 0..k-1 for every element.
//
// Header-only; include it once per program (the emulated build includes it from llm/ops/matmul.cuh).
// The extern "C" functions are defined `inline`, so a second translation unit would not clash.
#pragma once

#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <new>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cublasLt.h>
#ifdef _OPENMP
#include <omp.h>
#endif

// In a racecheck build (dev/emu/emu_racecheck.h: -DEMU_RACECHECK -fsanitize=thread), every load and
// store becomes a call; these host-side loops never touch shared memory, so they are left as they are
// (the products would otherwise run about 10x slower).
#if defined(EMU_RACECHECK) && defined(__SANITIZE_THREAD__)
#define CUBLASLT_EMU_HOST_LOOP __attribute__((no_sanitize_thread))
#else
#define CUBLASLT_EMU_HOST_LOOP
#endif

// ----------------------------------------------------------------------------
// the descriptors: our own state, stored inside the toolkit's opaque structs

#define CUBLASLT_EMU_MAGIC_HANDLE 0x4c74484eu  // "LtHN"
#define CUBLASLT_EMU_MAGIC_LAYOUT 0x4c744c59u  // "LtLY"
#define CUBLASLT_EMU_MAGIC_DESC 0x4c744453u    // "LtDS"
#define CUBLASLT_EMU_MAGIC_PREF 0x4c745052u    // "LtPR"
#define CUBLASLT_EMU_MAGIC_ALGO 0x4c74414cu    // "LtAL"

struct cublasLtContext {
    uint32_t magic;
};

typedef struct {
    uint32_t magic;
    uint32_t type;       // cudaDataType
    int32_t order;       // cublasLtOrder_t; only CUBLASLT_ORDER_COL is supported
    int32_t batch;       // CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT
    uint64_t rows, cols; // as stored, before op()
    int64_t ld;          // leading dimension (elements)
    int64_t stride;      // CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET (elements)
} cublaslt_emu_layout;

typedef struct {
    uint32_t magic;
    int32_t compute;      // cublasComputeType_t
    int32_t scale_type;   // cudaDataType of alpha/beta
    int32_t pointer_mode; // cublasLtPointerMode_t
    int32_t transa, transb, transc;
    uint32_t epilogue;    // cublasLtEpilogue_t
    int32_t bias_type;    // -1: default
    int32_t aux_type;     // -1: default
    int8_t fast_accum;
    const void* bias;
    int64_t bias_stride;
    void* aux;
    int64_t aux_ld;
    int64_t aux_stride;
    const void* scale_a;
    const void* scale_b;
    const void* scale_c;
    const void* scale_d;
    void* amax_d;
    int32_t scale_mode_a, scale_mode_b;  // cublasLtMatmulMatrixScale_t
} cublaslt_emu_desc;

typedef struct {
    uint32_t magic;
    uint64_t max_workspace;
    uint32_t min_align[4];  // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES, default 256
} cublaslt_emu_pref;

static_assert(sizeof(cublaslt_emu_layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout state too big");
static_assert(sizeof(cublaslt_emu_desc) <= sizeof(cublasLtMatmulDescOpaque_t), "desc state too big");
static_assert(sizeof(cublaslt_emu_pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "pref state too big");

static inline cublaslt_emu_layout* cublaslt_emu_L(cublasLtMatrixLayout_t l) {
    cublaslt_emu_layout* s = reinterpret_cast<cublaslt_emu_layout*>(l);
    return (s != NULL && s->magic == CUBLASLT_EMU_MAGIC_LAYOUT) ? s : NULL;
}
static inline cublaslt_emu_desc* cublaslt_emu_D(cublasLtMatmulDesc_t d) {
    cublaslt_emu_desc* s = reinterpret_cast<cublaslt_emu_desc*>(d);
    return (s != NULL && s->magic == CUBLASLT_EMU_MAGIC_DESC) ? s : NULL;
}
static inline cublaslt_emu_pref* cublaslt_emu_P(cublasLtMatmulPreference_t p) {
    cublaslt_emu_pref* s = reinterpret_cast<cublaslt_emu_pref*>(p);
    return (s != NULL && s->magic == CUBLASLT_EMU_MAGIC_PREF) ? s : NULL;
}

// ----------------------------------------------------------------------------
// element access by cudaDataType

static inline int cublaslt_emu_is_fp8(int t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

static inline size_t cublaslt_emu_type_size(int t) {
    switch (t) {
        case CUDA_R_32F: return 4;
        case CUDA_R_16BF: case CUDA_R_16F: return 2;
        case CUDA_R_8F_E4M3: case CUDA_R_8F_E5M2: return 1;
        default: return 0;
    }
}

CUBLASLT_EMU_HOST_LOOP static inline float cublaslt_emu_get(const void* p, int t, int64_t i) {
    switch (t) {
        case CUDA_R_32F: return ((const float*)p)[i];
        case CUDA_R_16BF: return __bfloat162float(((const __nv_bfloat16*)p)[i]);
        case CUDA_R_16F: return __half2float(((const __half*)p)[i]);
        case CUDA_R_8F_E4M3: return (float)(((const __nv_fp8_e4m3*)p)[i]);
        case CUDA_R_8F_E5M2: return (float)(((const __nv_fp8_e5m2*)p)[i]);
        default: return NAN;
    }
}

// one rounding from float to the storage type: round-to-nearest-even; FP8 saturates to the largest
// finite value (NaN stays NaN)
CUBLASLT_EMU_HOST_LOOP static inline void cublaslt_emu_put(void* p, int t, int64_t i, float v) {
    switch (t) {
        case CUDA_R_32F: ((float*)p)[i] = v; break;
        case CUDA_R_16BF: ((__nv_bfloat16*)p)[i] = __float2bfloat16(v); break;
        case CUDA_R_16F: ((__half*)p)[i] = __float2half(v); break;  // overflow: inf, as the GPU's
        case CUDA_R_8F_E4M3:
            ((__nv_fp8_storage_t*)p)[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3); break;
        case CUDA_R_8F_E5M2:
            ((__nv_fp8_storage_t*)p)[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E5M2); break;
        default: break;
    }
}

// GELU, tanh approximation, and its derivative (the math of the GELU epilogues)
CUBLASLT_EMU_HOST_LOOP static inline float cublaslt_emu_gelu(float x) {
    const float s = 0.7978845608028654f;  // sqrt(2/pi)
    float u = s * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
CUBLASLT_EMU_HOST_LOOP static inline float cublaslt_emu_gelu_grad(float x) {
    const float s = 0.7978845608028654f;
    float u = s * (x + 0.044715f * x * x * x);
    float t = tanhf(u);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * s * (1.0f + 3.0f * 0.044715f * x * x);
}

// ----------------------------------------------------------------------------
// the float GEMM core: out(m,n) column-major (out[i + j*m]) = a(m,k) @ b(k,n), where a is row-major
// (a[i*k + p], row i contiguous) and b is row-major (b[p*n + j], row p contiguous). Tiles of
// MR x NR outputs stay in a small accumulator array; the inner loop over NR columns vectorizes
// without reassociation, so every element accumulates over p = 0..k-1 in order.

#define CUBLASLT_EMU_MR 4
#define CUBLASLT_EMU_NR 64

CUBLASLT_EMU_HOST_LOOP static inline void cublaslt_emu_gemm_f32(float* out, const float* a, const float* b, int m, int n,
                                                                 int k) {
    int mt = (m + CUBLASLT_EMU_MR - 1) / CUBLASLT_EMU_MR;
    int nt = (n + CUBLASLT_EMU_NR - 1) / CUBLASLT_EMU_NR;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int it = 0; it < mt; it++) {
        for (int jt = 0; jt < nt; jt++) {
            int i0 = it * CUBLASLT_EMU_MR, j0 = jt * CUBLASLT_EMU_NR;
            int mr = m - i0 < CUBLASLT_EMU_MR ? m - i0 : CUBLASLT_EMU_MR;
            int nr = n - j0 < CUBLASLT_EMU_NR ? n - j0 : CUBLASLT_EMU_NR;
            float acc[CUBLASLT_EMU_MR][CUBLASLT_EMU_NR];
            memset(acc, 0, sizeof(acc));
            for (int p = 0; p < k; p++) {
                const float* brow = b + (size_t)p * n + j0;
                for (int r = 0; r < mr; r++) {
                    float av = a[(size_t)(i0 + r) * k + p];
                    float* accr = acc[r];
                    #pragma omp simd
                    for (int jj = 0; jj < nr; jj++) { accr[jj] += av * brow[jj]; }
                }
            }
            for (int jj = 0; jj < nr; jj++) {
                for (int r = 0; r < mr; r++) { out[(size_t)(j0 + jj) * m + i0 + r] = acc[r][jj]; }
            }
        }
    }
}

// ----------------------------------------------------------------------------
// validation: the configuration (descriptor + layouts), shared by the heuristic and the matmul

static inline int cublaslt_emu_epilogue_supported(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU ||
           e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
           e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}
static inline int cublaslt_emu_has_bias(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
static inline int cublaslt_emu_has_gelu(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
           e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
static inline int cublaslt_emu_has_aux(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}

// the emulated GPU's compute capability x 10 + minor: CUBLASLT_EMU_ARCH (default 90)
static inline int cublaslt_emu_arch(void) {
    const char* v = getenv("CUBLASLT_EMU_ARCH");
    return v != NULL && v[0] != '\0' ? atoi(v) : 90;
}

// the dequantization factor of element (outer, p) of an operand with scale mode `mode` (not SCALAR)
CUBLASLT_EMU_HOST_LOOP static inline float cublaslt_emu_block_scale(const void* sp, int mode, int64_t outer, int64_t p,
                                                                    int64_t n_outer, int64_t k) {
    if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) {
        return ((const float*)sp)[(p / 128) * ((n_outer + 3) / 4 * 4) + outer];
    }
    if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F) {
        return ((const float*)sp)[(outer / 128) * (((k + 127) / 128 + 3) / 4 * 4) + p / 128];
    }
    int64_t kb = p / 32, kb_tiles = ((k + 31) / 32 + 3) / 4;
    int64_t i = ((outer / 128) * kb_tiles + kb / 4) * 512 + (outer % 32) * 16 + ((outer % 128) / 32) * 4 + kb % 4;
    uint8_t e = ((const uint8_t*)sp)[i];
    if (e == 0xFF) return NAN;
    return ldexpf(1.0f, (int)e - 127);
}
static inline int cublaslt_emu_mode_block(int32_t mode) {  // the k block of a mode (0: scalar)
    return mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F || mode == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F ? 128
         : mode == CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 ? 32 : 0;
}

// the bias type cuBLASLt uses for these A and D types
static inline int cublaslt_emu_default_bias_type(int atype, int dtype) {
    return cublaslt_emu_is_fp8(atype) ? CUDA_R_16BF : dtype;
}

// optional one-line diagnostics of why a configuration was refused: CUBLASLT_EMU_VERBOSE=1
static inline cublasStatus_t cublaslt_emu_refuse(cublasStatus_t st, const char* why) {
    const char* v = getenv("CUBLASLT_EMU_VERBOSE");
    if (v != NULL && v[0] == '1') { fprintf(stderr, "cublaslt_emu: %s\n", why); }
    return st;
}

// return `status` (and say why, with CUBLASLT_EMU_VERBOSE=1) unless cond holds
#define CUBLASLT_EMU_REQUIRE(cond, status, why)                                 \
    do {                                                                        \
        if (!(cond)) return cublaslt_emu_refuse(status, why);                   \
    } while (0)
#define CUBLASLT_EMU_INVALID CUBLAS_STATUS_INVALID_VALUE
#define CUBLASLT_EMU_UNSUPPORTED CUBLAS_STATUS_NOT_SUPPORTED

static inline cublasStatus_t cublaslt_emu_validate(const cublaslt_emu_desc* d, const cublaslt_emu_layout* A,
                                                   const cublaslt_emu_layout* B, const cublaslt_emu_layout* C,
                                                   const cublaslt_emu_layout* D) {
    CUBLASLT_EMU_REQUIRE(d != NULL && A != NULL && B != NULL && C != NULL && D != NULL, CUBLASLT_EMU_INVALID,
                         "NULL or destroyed descriptor");
    CUBLASLT_EMU_REQUIRE(d->compute == CUBLAS_COMPUTE_32F, CUBLASLT_EMU_UNSUPPORTED, "compute type is not CUBLAS_COMPUTE_32F");
    CUBLASLT_EMU_REQUIRE(d->scale_type == CUDA_R_32F, CUBLASLT_EMU_UNSUPPORTED, "scale type is not CUDA_R_32F");
    CUBLASLT_EMU_REQUIRE(d->pointer_mode == CUBLASLT_POINTER_MODE_HOST || d->pointer_mode == CUBLASLT_POINTER_MODE_DEVICE,
                         CUBLASLT_EMU_UNSUPPORTED, "pointer mode is not HOST or DEVICE");
    CUBLASLT_EMU_REQUIRE((d->transa == CUBLAS_OP_N || d->transa == CUBLAS_OP_T) &&
                         (d->transb == CUBLAS_OP_N || d->transb == CUBLAS_OP_T), CUBLASLT_EMU_UNSUPPORTED,
                         "transpose is not N or T");
    CUBLASLT_EMU_REQUIRE(d->transc == CUBLAS_OP_N, CUBLASLT_EMU_UNSUPPORTED, "TRANSC must be N");
    CUBLASLT_EMU_REQUIRE(cublaslt_emu_epilogue_supported(d->epilogue), CUBLASLT_EMU_UNSUPPORTED, "epilogue not emulated");
    const cublaslt_emu_layout* all[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++) {
        const cublaslt_emu_layout* l = all[i];
        CUBLASLT_EMU_REQUIRE(l->order == CUBLASLT_ORDER_COL, CUBLASLT_EMU_UNSUPPORTED, "matrix order is not COL");
        CUBLASLT_EMU_REQUIRE(l->ld >= 1 && (uint64_t)l->ld >= l->rows, CUBLASLT_EMU_INVALID, "ld < rows");
        CUBLASLT_EMU_REQUIRE(l->batch >= 1, CUBLASLT_EMU_INVALID, "batch count < 1");
        CUBLASLT_EMU_REQUIRE(l->stride >= 0, CUBLASLT_EMU_INVALID, "negative batch stride");
        CUBLASLT_EMU_REQUIRE(l->rows <= 0x7fffffffu && l->cols <= 0x7fffffffu, CUBLASLT_EMU_UNSUPPORTED,
                             "dimension beyond int32");
    }
    // shapes: op(A) is m x k, op(B) is k x n, C and D are m x n
    uint64_t m = D->rows, n = D->cols;
    uint64_t am = d->transa == CUBLAS_OP_N ? A->rows : A->cols, ak = d->transa == CUBLAS_OP_N ? A->cols : A->rows;
    uint64_t bk = d->transb == CUBLAS_OP_N ? B->rows : B->cols, bn = d->transb == CUBLAS_OP_N ? B->cols : B->rows;
    CUBLASLT_EMU_REQUIRE(am == m && bn == n && ak == bk && C->rows == m && C->cols == n, CUBLASLT_EMU_INVALID,
                         "shapes of A, B, C, D do not chain");
    CUBLASLT_EMU_REQUIRE(A->batch == D->batch && B->batch == D->batch && C->batch == D->batch, CUBLASLT_EMU_INVALID,
                         "batch counts differ");
    // types
    int at = A->type, bt = B->type, ct = C->type, dt = D->type;
    if (cublaslt_emu_is_fp8(at) || cublaslt_emu_is_fp8(bt)) {
        CUBLASLT_EMU_REQUIRE(cublaslt_emu_is_fp8(at) && cublaslt_emu_is_fp8(bt), CUBLASLT_EMU_UNSUPPORTED,
                             "FP8 A with non-FP8 B (or the reverse)");
        CUBLASLT_EMU_REQUIRE(!(at == CUDA_R_8F_E5M2 && bt == CUDA_R_8F_E5M2), CUBLASLT_EMU_UNSUPPORTED, "E5M2 x E5M2");
        int arch = cublaslt_emu_arch();
        CUBLASLT_EMU_REQUIRE(arch >= 89, CUBLASLT_EMU_UNSUPPORTED, "FP8 on a GPU before sm_89 (CUBLASLT_EMU_ARCH)");
        int32_t ma = d->scale_mode_a, mb = d->scale_mode_b;
        const int32_t V128 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, B128 = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
        const int32_t V32 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0, SC = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
        int mode_ok = (ma == SC && mb == SC) || (ma == V32 && mb == V32) ||
                      ((ma == V128 || ma == B128) && (mb == V128 || mb == B128) && !(ma == B128 && mb == B128));
        CUBLASLT_EMU_REQUIRE(mode_ok, CUBLASLT_EMU_UNSUPPORTED, "FP8 scale mode pair");
        if (ma != SC) {
            uint64_t k = d->transa == CUBLAS_OP_N ? A->cols : A->rows;
            CUBLASLT_EMU_REQUIRE(ma != V32 || arch >= 100, CUBLASLT_EMU_UNSUPPORTED, "VEC32_UE8M0 before sm_100");
            CUBLASLT_EMU_REQUIRE(ma == V32 || arch == 90, CUBLASLT_EMU_UNSUPPORTED, "VEC128/BLK128x128 scales off sm_90");
            CUBLASLT_EMU_REQUIRE(k % (uint64_t)cublaslt_emu_mode_block(ma) == 0, CUBLASLT_EMU_UNSUPPORTED,
                                 "block-scaled k not a whole number of blocks");
            CUBLASLT_EMU_REQUIRE(dt == CUDA_R_16BF || dt == CUDA_R_32F, CUBLASLT_EMU_UNSUPPORTED, "block scales with an FP8 D");
            CUBLASLT_EMU_REQUIRE(d->scale_a != NULL && d->scale_b != NULL, CUBLASLT_EMU_INVALID,
                                 "block scale mode without its scale pointers");
        }
        CUBLASLT_EMU_REQUIRE((ct == CUDA_R_32F && dt == CUDA_R_32F) || (ct == CUDA_R_16BF && dt == CUDA_R_16BF) ||
                             (ct == CUDA_R_16BF && cublaslt_emu_is_fp8(dt)), CUBLASLT_EMU_UNSUPPORTED,
                             "FP8 C/D type combination");
        CUBLASLT_EMU_REQUIRE(d->transa == CUBLAS_OP_T && d->transb == CUBLAS_OP_N, CUBLASLT_EMU_UNSUPPORTED,
                             "FP8 needs transa=T, transb=N");
        CUBLASLT_EMU_REQUIRE(A->ld % 16 == 0 && B->ld % 16 == 0 &&
                             (C->ld * (int64_t)cublaslt_emu_type_size(ct)) % 16 == 0 &&
                             (D->ld * (int64_t)cublaslt_emu_type_size(dt)) % 16 == 0, CUBLASLT_EMU_UNSUPPORTED,
                             "FP8 leading dimensions must be multiples of 16 bytes");
        CUBLASLT_EMU_REQUIRE(d->epilogue != CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EMU_UNSUPPORTED, "DGELU with FP8 inputs");
        CUBLASLT_EMU_REQUIRE(!(cublaslt_emu_has_aux(d->epilogue) && cublaslt_emu_is_fp8(dt)), CUBLASLT_EMU_UNSUPPORTED,
                             "aux epilogue with FP8 D");
    } else {
        CUBLASLT_EMU_REQUIRE((at == CUDA_R_32F && bt == CUDA_R_32F && ct == CUDA_R_32F && dt == CUDA_R_32F) ||
                             (at == CUDA_R_16BF && bt == CUDA_R_16BF && ct == dt && (dt == CUDA_R_16BF || dt == CUDA_R_32F)) ||
                             (at == CUDA_R_16F && bt == CUDA_R_16F && ct == dt && (dt == CUDA_R_16F || dt == CUDA_R_32F)),
                             CUBLASLT_EMU_UNSUPPORTED, "A/B/C/D type combination");
        CUBLASLT_EMU_REQUIRE(d->scale_a == NULL && d->scale_b == NULL && d->scale_c == NULL && d->amax_d == NULL,
                             CUBLASLT_EMU_INVALID, "A/B/C scale or amax pointer set for non-FP8 inputs");
        CUBLASLT_EMU_REQUIRE(d->scale_mode_a == 0 && d->scale_mode_b == 0, CUBLASLT_EMU_INVALID,
                             "A/B scale mode set for non-FP8 inputs");
    }
    CUBLASLT_EMU_REQUIRE(d->scale_d == NULL || cublaslt_emu_is_fp8(dt), CUBLASLT_EMU_INVALID,
                         "D scale pointer set for a non-FP8 D");
    CUBLASLT_EMU_REQUIRE(!cublaslt_emu_has_bias(d->epilogue) || d->bias_type == -1 ||
                         d->bias_type == cublaslt_emu_default_bias_type(at, dt), CUBLASLT_EMU_UNSUPPORTED, "bias data type");
    if (cublaslt_emu_has_aux(d->epilogue)) {
        CUBLASLT_EMU_REQUIRE(d->aux_type == -1 || d->aux_type == dt, CUBLASLT_EMU_UNSUPPORTED, "aux data type");
        CUBLASLT_EMU_REQUIRE(d->aux_ld >= (int64_t)m && d->aux_ld % 8 == 0, CUBLASLT_EMU_INVALID,
                             "EPILOGUE_AUX_LD must be >= rows of D and divisible by 8");
        CUBLASLT_EMU_REQUIRE(d->aux_stride >= 0 && d->aux_stride % 8 == 0, CUBLASLT_EMU_INVALID,
                             "EPILOGUE_AUX_BATCH_STRIDE must be divisible by 8");
    }
    return CUBLAS_STATUS_SUCCESS;
}

// ----------------------------------------------------------------------------
// the API

extern "C" inline const char* cublasLtGetStatusName(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
        default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

extern "C" inline const char* cublasLtGetStatusString(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "success";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
        case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
        case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
        default: return "an error (emulated cuBLASLt)";
    }
}

extern "C" inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
    if (handle == NULL) return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtContext* h = new (std::nothrow) cublasLtContext;
    if (h == NULL) return CUBLAS_STATUS_ALLOC_FAILED;
    h->magic = CUBLASLT_EMU_MAGIC_HANDLE;
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    if (handle == NULL || handle->magic != CUBLASLT_EMU_MAGIC_HANDLE) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->magic = 0;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                                            uint64_t rows, uint64_t cols, int64_t ld) {
    if (layout == NULL) return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatrixLayoutOpaque_t* o = new (std::nothrow) cublasLtMatrixLayoutOpaque_t;
    if (o == NULL) return CUBLAS_STATUS_ALLOC_FAILED;
    memset(o, 0, sizeof(*o));
    cublaslt_emu_layout* s = reinterpret_cast<cublaslt_emu_layout*>(o);
    s->magic = CUBLASLT_EMU_MAGIC_LAYOUT;
    s->type = (uint32_t)type;
    s->order = CUBLASLT_ORDER_COL;
    s->batch = 1;
    s->rows = rows;
    s->cols = cols;
    s->ld = ld;
    s->stride = 0;
    *layout = o;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    cublaslt_emu_layout* s = cublaslt_emu_L(layout);
    if (s == NULL) return layout == NULL ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    s->magic = 0;
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

// copy an attribute value of exactly `size` bytes (the real library checks the size the same way)
#define CUBLASLT_EMU_SET(field, T)                                              \
    do {                                                                        \
        if (size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;              \
        T v_;                                                                   \
        memcpy(&v_, buf, sizeof(T));                                            \
        field = v_;                                                             \
    } while (0)

extern "C" inline cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                                  cublasLtMatrixLayoutAttribute_t attr,
                                                                  const void* buf, size_t size) {
    cublaslt_emu_layout* s = cublaslt_emu_L(layout);
    if (s == NULL || buf == NULL) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
        case CUBLASLT_MATRIX_LAYOUT_TYPE: CUBLASLT_EMU_SET(s->type, uint32_t); break;
        case CUBLASLT_MATRIX_LAYOUT_ORDER: CUBLASLT_EMU_SET(s->order, int32_t); break;
        case CUBLASLT_MATRIX_LAYOUT_ROWS: CUBLASLT_EMU_SET(s->rows, uint64_t); break;
        case CUBLASLT_MATRIX_LAYOUT_COLS: CUBLASLT_EMU_SET(s->cols, uint64_t); break;
        case CUBLASLT_MATRIX_LAYOUT_LD: CUBLASLT_EMU_SET(s->ld, int64_t); break;
        case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: CUBLASLT_EMU_SET(s->batch, int32_t); break;
        case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: CUBLASLT_EMU_SET(s->stride, int64_t); break;
        default: return cublaslt_emu_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matrix layout attribute not emulated");
    }
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                                          cudaDataType_t scale_type) {
    if (desc == NULL) return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatmulDescOpaque_t* o = new (std::nothrow) cublasLtMatmulDescOpaque_t;
    if (o == NULL) return CUBLAS_STATUS_ALLOC_FAILED;
    memset(o, 0, sizeof(*o));
    cublaslt_emu_desc* s = reinterpret_cast<cublaslt_emu_desc*>(o);
    s->magic = CUBLASLT_EMU_MAGIC_DESC;
    s->compute = (int32_t)compute;
    s->scale_type = (int32_t)scale_type;
    s->pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    s->transa = CUBLAS_OP_N;
    s->transb = CUBLAS_OP_N;
    s->transc = CUBLAS_OP_N;
    s->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    s->bias_type = -1;
    s->aux_type = -1;
    *desc = o;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    cublaslt_emu_desc* s = cublaslt_emu_D(desc);
    if (s == NULL) return desc == NULL ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    s->magic = 0;
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                                cublasLtMatmulDescAttributes_t attr,
                                                                const void* buf, size_t size) {
    cublaslt_emu_desc* s = cublaslt_emu_D(desc);
    if (s == NULL || buf == NULL) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: CUBLASLT_EMU_SET(s->compute, int32_t); break;
        case CUBLASLT_MATMUL_DESC_SCALE_TYPE: CUBLASLT_EMU_SET(s->scale_type, int32_t); break;
        case CUBLASLT_MATMUL_DESC_POINTER_MODE: CUBLASLT_EMU_SET(s->pointer_mode, int32_t); break;
        case CUBLASLT_MATMUL_DESC_TRANSA: CUBLASLT_EMU_SET(s->transa, int32_t); break;
        case CUBLASLT_MATMUL_DESC_TRANSB: CUBLASLT_EMU_SET(s->transb, int32_t); break;
        case CUBLASLT_MATMUL_DESC_TRANSC: CUBLASLT_EMU_SET(s->transc, int32_t); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE: CUBLASLT_EMU_SET(s->epilogue, uint32_t); break;
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: CUBLASLT_EMU_SET(s->bias, const void*); break;
        case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: CUBLASLT_EMU_SET(s->bias_stride, int64_t); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: CUBLASLT_EMU_SET(s->aux, void*); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: CUBLASLT_EMU_SET(s->aux_ld, int64_t); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: CUBLASLT_EMU_SET(s->aux_stride, int64_t); break;
        case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: CUBLASLT_EMU_SET(s->scale_a, const void*); break;
        case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: CUBLASLT_EMU_SET(s->scale_b, const void*); break;
        case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER: CUBLASLT_EMU_SET(s->scale_c, const void*); break;
        case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER: CUBLASLT_EMU_SET(s->scale_d, const void*); break;
        case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: CUBLASLT_EMU_SET(s->amax_d, void*); break;
        case CUBLASLT_MATMUL_DESC_A_SCALE_MODE: CUBLASLT_EMU_SET(s->scale_mode_a, int32_t); break;
        case CUBLASLT_MATMUL_DESC_B_SCALE_MODE: CUBLASLT_EMU_SET(s->scale_mode_b, int32_t); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: CUBLASLT_EMU_SET(s->aux_type, int32_t); break;
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: CUBLASLT_EMU_SET(s->bias_type, int32_t); break;
        case CUBLASLT_MATMUL_DESC_FAST_ACCUM: CUBLASLT_EMU_SET(s->fast_accum, int8_t); break;
        default: return cublaslt_emu_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matmul descriptor attribute not emulated");
    }
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    if (pref == NULL) return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatmulPreferenceOpaque_t* o = new (std::nothrow) cublasLtMatmulPreferenceOpaque_t;
    if (o == NULL) return CUBLAS_STATUS_ALLOC_FAILED;
    memset(o, 0, sizeof(*o));
    cublaslt_emu_pref* s = reinterpret_cast<cublaslt_emu_pref*>(o);
    s->magic = CUBLASLT_EMU_MAGIC_PREF;
    s->max_workspace = 0;
    for (int i = 0; i < 4; i++) s->min_align[i] = 256;
    *pref = o;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    cublaslt_emu_pref* s = cublaslt_emu_P(pref);
    if (s == NULL) return pref == NULL ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    s->magic = 0;
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                      cublasLtMatmulPreferenceAttributes_t attr,
                                                                      const void* buf, size_t size) {
    cublaslt_emu_pref* s = cublaslt_emu_P(pref);
    if (s == NULL || buf == NULL) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
        case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: CUBLASLT_EMU_SET(s->max_workspace, uint64_t); break;
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: CUBLASLT_EMU_SET(s->min_align[0], uint32_t); break;
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: CUBLASLT_EMU_SET(s->min_align[1], uint32_t); break;
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: CUBLASLT_EMU_SET(s->min_align[2], uint32_t); break;
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: CUBLASLT_EMU_SET(s->min_align[3], uint32_t); break;
        default: return cublaslt_emu_refuse(CUBLAS_STATUS_NOT_SUPPORTED, "preference attribute not emulated");
    }
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                                cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                                cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                                cublasLtMatmulPreference_t pref, int requested,
                                                                cublasLtMatmulHeuristicResult_t results[], int* returned) {
    if (handle == NULL || handle->magic != CUBLASLT_EMU_MAGIC_HANDLE) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requested <= 0 || results == NULL || returned == NULL || cublaslt_emu_P(pref) == NULL) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    *returned = 0;
    cublasStatus_t st = cublaslt_emu_validate(cublaslt_emu_D(desc), cublaslt_emu_L(Adesc), cublaslt_emu_L(Bdesc),
                                              cublaslt_emu_L(Cdesc), cublaslt_emu_L(Ddesc));
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    memset(&results[0], 0, sizeof(results[0]));
    results[0].algo.data[0] = CUBLASLT_EMU_MAGIC_ALGO;
    for (int i = 0; i < 4; i++) results[0].algo.data[1 + i] = cublaslt_emu_P(pref)->min_align[i];
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" inline CUBLASLT_EMU_HOST_LOOP cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                                                cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                                                cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                                                const cublasLtMatmulAlgo_t* algo, void* workspace,
                                                size_t workspace_size, cudaStream_t stream) {
    (void)workspace; (void)workspace_size; (void)stream;
    if (handle == NULL || handle->magic != CUBLASLT_EMU_MAGIC_HANDLE) return CUBLAS_STATUS_NOT_INITIALIZED;
    const cublaslt_emu_desc* d = cublaslt_emu_D(desc);
    const cublaslt_emu_layout *la = cublaslt_emu_L(Adesc), *lb = cublaslt_emu_L(Bdesc);
    const cublaslt_emu_layout *lc = cublaslt_emu_L(Cdesc), *ld = cublaslt_emu_L(Ddesc);
    cublasStatus_t st = cublaslt_emu_validate(d, la, lb, lc, ld);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (algo != NULL && algo->data[0] != CUBLASLT_EMU_MAGIC_ALGO) {
        return cublaslt_emu_refuse(CUBLAS_STATUS_INVALID_VALUE, "algo was not returned by the heuristic");
    }
    if (alpha == NULL || beta == NULL) return cublaslt_emu_refuse(CUBLAS_STATUS_INVALID_VALUE, "alpha or beta is NULL");
    float alpha_v = *(const float*)alpha, beta_v = *(const float*)beta;
    int m = (int)ld->rows, n = (int)ld->cols;
    int k = (int)(d->transa == CUBLAS_OP_N ? la->cols : la->rows);
    int batch = ld->batch;
    uint32_t epi = d->epilogue;
    CUBLASLT_EMU_REQUIRE(A != NULL && B != NULL && D != NULL, CUBLASLT_EMU_INVALID, "A, B or D is NULL");
    CUBLASLT_EMU_REQUIRE(beta_v == 0.0f || C != NULL, CUBLASLT_EMU_INVALID, "C is NULL with beta != 0");
    CUBLASLT_EMU_REQUIRE(C != D || (lc->type == ld->type && lc->ld == ld->ld && lc->stride == ld->stride),
                         CUBLASLT_EMU_INVALID, "in-place C == D with different layouts");
    CUBLASLT_EMU_REQUIRE(!cublaslt_emu_has_bias(epi) || d->bias != NULL, CUBLASLT_EMU_INVALID,
                         "bias epilogue without BIAS_POINTER");
    CUBLASLT_EMU_REQUIRE(!cublaslt_emu_has_aux(epi) || d->aux != NULL, CUBLASLT_EMU_INVALID,
                         "aux epilogue without EPILOGUE_AUX_POINTER");
    CUBLASLT_EMU_REQUIRE(!cublaslt_emu_is_fp8(la->type) || ((uintptr_t)A | (uintptr_t)B | (uintptr_t)C | (uintptr_t)D) % 16 == 0,
                         CUBLASLT_EMU_UNSUPPORTED, "FP8 matrices must be 16-byte aligned");
    // An algorithm from the heuristic was chosen for matrices aligned as the preference promised
    // (256 bytes unless CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES says less); on a GPU, a kernel that
    // uses 128-bit loads then fails on a less aligned matrix. Refuse a matrix (of any batch) that is
    // less aligned than min(promised, 16) bytes.
    if (algo != NULL) {
        const void* ptrs[4] = {A, B, C, D};
        const cublaslt_emu_layout* lays[4] = {la, lb, lc, ld};
        for (int i = 0; i < 4; i++) {
            if (ptrs[i] == NULL) continue;
            uintptr_t bits = (uintptr_t)ptrs[i];
            if (lays[i]->batch > 1) bits |= (uintptr_t)(lays[i]->stride * (int64_t)cublaslt_emu_type_size(lays[i]->type));
            uint64_t need = algo->data[1 + i] < 16 ? algo->data[1 + i] : 16;
            CUBLASLT_EMU_REQUIRE(need == 0 || bits % need == 0, CUBLASLT_EMU_UNSUPPORTED,
                                 "a matrix is less aligned than CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES promised");
        }
    }
    float scale_ab = 1.0f, scale_c = 1.0f, scale_d = 1.0f;
    int block_a = d->scale_mode_a != 0, block_b = d->scale_mode_b != 0;  // per-block factors, applied per element
    if (d->scale_a != NULL && !block_a) scale_ab *= *(const float*)d->scale_a;
    if (d->scale_b != NULL && !block_b) scale_ab *= *(const float*)d->scale_b;
    if (d->scale_c != NULL) scale_c = *(const float*)d->scale_c;
    if (d->scale_d != NULL) scale_d = *(const float*)d->scale_d;
    int bias_type = cublaslt_emu_default_bias_type(la->type, ld->type);
    int aux_type = ld->type;
    float amax = 0.0f;
    if (m == 0 || n == 0) {
        if (d->amax_d != NULL) *(float*)d->amax_d = 0.0f;
        return CUBLAS_STATUS_SUCCESS;
    }

    float* af = (float*)malloc((size_t)m * (k > 0 ? k : 1) * sizeof(float));   // op(A), row i contiguous
    float* bf = (float*)malloc((size_t)(k > 0 ? k : 1) * n * sizeof(float));   // op(B), row p contiguous
    float* acc = (float*)malloc((size_t)m * n * sizeof(float));                // op(A) op(B), column-major
    if (af == NULL || bf == NULL || acc == NULL) { free(af); free(bf); free(acc); return CUBLAS_STATUS_ALLOC_FAILED; }

    for (int b = 0; b < batch; b++) {
        const char* Ab = (const char*)A + (size_t)b * la->stride * cublaslt_emu_type_size(la->type);
        const char* Bb = (const char*)B + (size_t)b * lb->stride * cublaslt_emu_type_size(lb->type);
        const char* Cb = C == NULL ? NULL : (const char*)C + (size_t)b * lc->stride * cublaslt_emu_type_size(lc->type);
        char* Db = (char*)D + (size_t)b * ld->stride * cublaslt_emu_type_size(ld->type);
        const char* biasb = d->bias == NULL ? NULL
                                            : (const char*)d->bias + (size_t)b * d->bias_stride * cublaslt_emu_type_size(bias_type);
        char* auxb = d->aux == NULL ? NULL : (char*)d->aux + (size_t)b * d->aux_stride * cublaslt_emu_type_size(aux_type);
        // op(A)[i][p]: N -> A[i + p*lda] (A stored m x k); T -> A[p + i*lda] (A stored k x m)
        #pragma omp parallel for schedule(static)
        for (int i = 0; i < m; i++) {
            for (int p = 0; p < k; p++) {
                int64_t idx = d->transa == CUBLAS_OP_N ? i + p * la->ld : p + i * la->ld;
                float v = cublaslt_emu_get(Ab, la->type, idx);
                if (block_a) v *= cublaslt_emu_block_scale(d->scale_a, d->scale_mode_a, i, p, m, k);
                af[(size_t)i * k + p] = v;
            }
        }
        // op(B)[p][j]: N -> B[p + j*ldb] (B stored k x n); T -> B[j + p*ldb] (B stored n x k)
        #pragma omp parallel for schedule(static)
        for (int p = 0; p < k; p++) {
            for (int j = 0; j < n; j++) {
                int64_t idx = d->transb == CUBLAS_OP_N ? p + j * lb->ld : j + p * lb->ld;
                float v = cublaslt_emu_get(Bb, lb->type, idx);
                if (block_b) v *= cublaslt_emu_block_scale(d->scale_b, d->scale_mode_b, j, p, n, k);
                bf[(size_t)p * n + j] = v;
            }
        }
        cublaslt_emu_gemm_f32(acc, af, bf, m, n, k);
        // epilogue, element by element, column by column
        #pragma omp parallel for schedule(static) reduction(max : amax)
        for (int j = 0; j < n; j++) {
            for (int i = 0; i < m; i++) {
                float x = alpha_v * scale_ab * acc[(size_t)j * m + i];
                if (beta_v != 0.0f) x += beta_v * scale_c * cublaslt_emu_get(Cb, lc->type, i + j * lc->ld);
                if (cublaslt_emu_has_bias(epi)) x += cublaslt_emu_get(biasb, bias_type, i);
                int64_t aux_idx = i + j * d->aux_ld;
                if (epi == CUBLASLT_EPILOGUE_GELU_AUX || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
                    cublaslt_emu_put(auxb, aux_type, aux_idx, x);
                }
                if (cublaslt_emu_has_gelu(epi)) x = cublaslt_emu_gelu(x);
                if (epi == CUBLASLT_EPILOGUE_DGELU) x *= cublaslt_emu_gelu_grad(cublaslt_emu_get(auxb, aux_type, aux_idx));
                float ax = fabsf(x);
                amax = ax > amax ? ax : amax;
                if (cublaslt_emu_is_fp8(ld->type)) x *= scale_d;
                cublaslt_emu_put(Db, ld->type, i + j * ld->ld, x);
            }
        }
    }
    free(af);
    free(bf);
    free(acc);
    if (d->amax_d != NULL) *(float*)d->amax_d = amax;
    return CUBLAS_STATUS_SUCCESS;
}

#undef CUBLASLT_EMU_SET
