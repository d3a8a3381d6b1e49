// fp8_matrix.cuh: an FP8 GEMM operand: the codes of a quantized (rows, K) matrix, K contiguous, with
// the scales of its recipe, in the quantizer's layout and in the layout cuBLASLt reads.
//
// A GEMM out (M, N) = A (M, K) B (N, K)^T takes two of these (llm/precision/matmul_fp8.cuh). Every operand is
// stored with its inner (K) dimension contiguous, which is cuBLASLt's FP8 "TN" layout for both sides;
// the weight gradient's operands dy^T and x^T are quantized transposed (fp8_matrix_quantize's
// transpose flag) so that their inner dimension, BT, is contiguous too.
//
// Scales (q = encode(x * s), llm/precision/fp8.cuh; the value of a code is decode(q) / s):
//   FP8_SCALE_TENSOR   one s (current / delayed scaling)
//   FP8_SCALE_1x128    s per 1x128 tile along K: scale (rows, ceil(K/128))
//   FP8_SCALE_128x128  s per 128x128 block: scale (ceil(rows/128), ceil(K/128))
//   FP8_SCALE_MX32     E8M0 code per 32 elements along K: e8m0 (rows, ceil(K/32)); value decode(q) * 2^(code-127)
// cuBLASLt wants the dequantization factor (1/s; the E8M0 code as it is) in its own layouts
// (lt_scale, fp8_lt_index below). The element value every path uses is fp8_matrix_value:
// decode(q) * fp8_div_rn(1, s), FP32, the same product cuBLASLt's scaled kernels form.
//
// Layout: the CPU reference first (value, quantize, dequantize), then the kernels, then the launchers.
#pragma once
#include "../core/common.h"
#include "../core/context.h"
#include "../core/device.h"
#include "fp8.cuh"

typedef enum { FP8_SCALE_TENSOR = 0, FP8_SCALE_1x128, FP8_SCALE_128x128, FP8_SCALE_MX32 } Fp8Scaling;

static const char* fp8_scaling_name(Fp8Scaling s) {
    static const char* names[] = {"per-tensor", "1x128", "128x128", "mx32"};
    return names[s];
}

typedef struct {
    uint8_t* q;        // (rows, K) FP8 codes, row-major: K contiguous
    float* scale;      // TENSOR (1), 1x128 (rows, ceil(K/128)), 128x128 (ceil(rows/128), ceil(K/128)); unused for MX
    uint8_t* e8m0;     // MX32: (rows, ceil(K/32)) E8M0 codes
    void* lt_scale;    // the scales in cuBLASLt's layout (fp8_lt_scale_count elements; float, or E8M0 bytes for MX)
    int rows, K, fmt;  // fmt: FP8_E4M3 / FP8_E5M2
    Fp8Scaling scaling;
    void* buf;         // one allocation for all of the above (cap bytes), grown by fp8_matrix_prepare
    size_t cap;
    MemKind kind;
} Fp8Matrix;

static inline int fp8_ceil_div(int a, int b) { return (a + b - 1) / b; }
static inline int fp8_round_up(int a, int b) { return fp8_ceil_div(a, b) * b; }

// ----------------------------------------------------------------------------
// cuBLASLt's scale layouts (the operand is (rows, K), K contiguous; "outer" = rows)
//
//   SCALAR_32F       one float: 1/s
//   VEC128_32F       (1x128 tiles) float 1/s of tile (r, kb) at kb * ld + r, ld = round_up(rows, 4): the
//                    outer dimension contiguous ("outer-dim-major"), the row count padded to 4 floats
//   BLK128x128_32F   float 1/s of block (rb, kb) at rb * ld + kb, ld = round_up(ceil(K/128), 4): the
//                    K blocks contiguous, padded to 4 floats
//   VEC32_UE8M0      E8M0 code of block (r, kb) (kb = k/32) in 512-byte tiles of 128 rows x 4 blocks,
//                    tiles ordered (row tile, then block tile), inside a tile at
//                    (r % 32) * 16 + ((r % 128) / 32) * 4 + kb % 4; rows padded to 128, blocks to 4
// Sources: the cuBLAS 12.9/13 documentation's block-scaling layout sections could not be read here
// (the search corpus has only the enum's header comments); these are the layouts that public callers
// of the same modes use: PyTorch's scaled_mm tests ("1x128 blocks need scales to be outer-dim-major"),
// block-scaled users padding the 1x128 scales' token count to a multiple of 4 and the 128x128 scales'
// K blocks to a multiple of 4, and the 128x4 interleaved ("swizzled") MX layout of Transformer Engine's
// nvte_swizzle_scaling_factors and torchao's to_blocked. The emulated cuBLASLt (dev/emu/cublaslt_emu.h)
// reads the same layouts; only a GPU run of test/test_fp8_gemm.cu checks them against the library.

static inline size_t fp8_lt_scale_count(int rows, int K, Fp8Scaling s) {
    switch (s) {
        case FP8_SCALE_TENSOR: return 1;
        case FP8_SCALE_1x128: return (size_t)fp8_ceil_div(K, FP8_BLOCK) * fp8_round_up(rows, 4);
        case FP8_SCALE_128x128: return (size_t)fp8_ceil_div(rows, FP8_BLOCK) * fp8_round_up(fp8_ceil_div(K, FP8_BLOCK), 4);
        default: return (size_t)fp8_round_up(rows, 128) * fp8_round_up(fp8_ceil_div(K, FP8_MX_BLOCK), 4);
    }
}
// the element size of lt_scale
static inline size_t fp8_lt_scale_size(Fp8Scaling s) { return s == FP8_SCALE_MX32 ? 1 : 4; }

// where the scale of element (r, k) sits in the layouts above
LLM_HD static inline size_t fp8_lt_index(int r, int k, int rows, int K, int scaling) {
    if (scaling == FP8_SCALE_TENSOR) return 0;
    if (scaling == FP8_SCALE_1x128) return (size_t)(k / FP8_BLOCK) * ((rows + 3) / 4 * 4) + r;
    if (scaling == FP8_SCALE_128x128) {
        int ld = ((K + FP8_BLOCK - 1) / FP8_BLOCK + 3) / 4 * 4;
        return (size_t)(r / FP8_BLOCK) * ld + k / FP8_BLOCK;
    }
    int kb = k / FP8_MX_BLOCK, kb_tiles = ((K + FP8_MX_BLOCK - 1) / FP8_MX_BLOCK + 3) / 4;
    size_t tile = (size_t)(r / 128) * kb_tiles + kb / 4;
    return tile * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + kb % 4;
}

// ----------------------------------------------------------------------------
// allocation: one buffer, carved into q, scale, e8m0, lt_scale (each 256-byte aligned)

static inline size_t fp8_align256(size_t n) { return (n + 255) / 256 * 256; }

static size_t fp8_matrix_bytes(int rows, int K, Fp8Scaling s) {
    size_t n = (size_t)rows * K;
    size_t ns = s == FP8_SCALE_TENSOR ? 1
              : s == FP8_SCALE_1x128 ? (size_t)rows * fp8_ceil_div(K, FP8_BLOCK)
              : s == FP8_SCALE_128x128 ? (size_t)fp8_ceil_div(rows, FP8_BLOCK) * fp8_ceil_div(K, FP8_BLOCK) : 1;
    size_t ne = s == FP8_SCALE_MX32 ? (size_t)rows * fp8_ceil_div(K, FP8_MX_BLOCK) : 1;
    return fp8_align256(n) + fp8_align256(ns * 4) + fp8_align256(ne) + fp8_align256(fp8_lt_scale_count(rows, K, s) * fp8_lt_scale_size(s));
}

// set m's shape, format and scaling; grow its buffer if this shape needs more
static void fp8_matrix_prepare(Fp8Matrix* m, int rows, int K, int fmt, Fp8Scaling s) {
    size_t need = fp8_matrix_bytes(rows, K, s);
    if (need > m->cap) {
        if (m->buf != NULL) device_free(m->buf);
        m->buf = device_malloc(need, m->kind);
        m->cap = need;
    }
    m->rows = rows; m->K = K; m->fmt = fmt; m->scaling = s;
    size_t ns = s == FP8_SCALE_TENSOR ? 1
              : s == FP8_SCALE_1x128 ? (size_t)rows * fp8_ceil_div(K, FP8_BLOCK)
              : s == FP8_SCALE_128x128 ? (size_t)fp8_ceil_div(rows, FP8_BLOCK) * fp8_ceil_div(K, FP8_BLOCK) : 1;
    size_t ne = s == FP8_SCALE_MX32 ? (size_t)rows * fp8_ceil_div(K, FP8_MX_BLOCK) : 1;
    char* p = (char*)m->buf;
    m->q = (uint8_t*)p; p += fp8_align256((size_t)rows * K);
    m->scale = (float*)p; p += fp8_align256(ns * 4);
    m->e8m0 = (uint8_t*)p; p += fp8_align256(ne);
    m->lt_scale = p;
}

static void fp8_matrix_alloc(Fp8Matrix* m, int rows, int K, int fmt, Fp8Scaling s, MemKind kind) {
    memset(m, 0, sizeof(*m));
    m->kind = kind;
    fp8_matrix_prepare(m, rows, K, fmt, s);
}
static void fp8_matrix_free(Fp8Matrix* m) {
    if (m->buf != NULL) device_free(m->buf);
    memset(m, 0, sizeof(*m));
}

// ----------------------------------------------------------------------------
// 1. CPU reference

// the value of element (r, k): decode(q) times the dequantization factor of its tile
LLM_HD static inline float fp8_matrix_value(const uint8_t* q, const float* scale, const uint8_t* e8m0, int r, int k,
                                            int rows, int K, int fmt, int scaling) {
    uint8_t c = q[(size_t)r * K + k];
    if (scaling == FP8_SCALE_MX32) return fp8_mx_decode(c, e8m0[(size_t)r * ((K + FP8_MX_BLOCK - 1) / FP8_MX_BLOCK) + k / FP8_MX_BLOCK], fmt);
    int nt = (K + FP8_BLOCK - 1) / FP8_BLOCK;
    float s = scaling == FP8_SCALE_TENSOR ? scale[0]
            : scaling == FP8_SCALE_1x128 ? scale[(size_t)r * nt + k / FP8_BLOCK]
            : scale[(size_t)(r / FP8_BLOCK) * nt + k / FP8_BLOCK];
    (void)rows;
    return fp8_decode(c, fmt) * fp8_div_rn(1.0f, s);
}

static void fp8_matrix_dequant_cpu(float* out, const Fp8Matrix* m) {  // out (rows, K) host
    float lut[256];  // fp8_decode of every code
    for (int c = 0; c < 256; c++) lut[c] = fp8_decode((uint8_t)c, m->fmt);
    int K = m->K, nt = (K + FP8_BLOCK - 1) / FP8_BLOCK;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < m->rows; r++) {
        const uint8_t* q = m->q + (size_t)r * K;
        float* o = out + (size_t)r * K;
        if (m->scaling == FP8_SCALE_MX32) {  // fp8_mx_decode, per element
            for (int k = 0; k < K; k++) o[k] = fp8_matrix_value(m->q, m->scale, m->e8m0, r, k, m->rows, K, m->fmt, m->scaling);
            continue;
        }
        for (int t = 0; t < nt; t++) {  // fp8_matrix_value with each tile's 1 / scale computed once
            float s = m->scaling == FP8_SCALE_TENSOR ? m->scale[0]
                    : m->scaling == FP8_SCALE_1x128 ? m->scale[(size_t)r * nt + t]
                    : m->scale[(size_t)(r / FP8_BLOCK) * nt + t];
            float inv = fp8_div_rn(1.0f, s);
            int k1 = (t + 1) * FP8_BLOCK < K ? (t + 1) * FP8_BLOCK : K;
            for (int k = t * FP8_BLOCK; k < k1; k++) o[k] = lut[q[k]] * inv;
        }
    }
}

// quantize x (rows, K) or, with transpose, x (K, rows) as x^T into m (m's shape set by fp8_matrix_prepare),
// on the host: the reference of the kernels below and the CPU build's implementation.
// tensor_scale: the per-tensor recipes' scale (one float), NULL for the others.
static void fp8_matrix_quantize_cpu(Fp8Matrix* m, const float* x, int transpose, const float* tensor_scale) {
    int rows = m->rows, K = m->K;
    float* t = transpose ? fp8_transpose_cpu(x, K, rows) : NULL;
    const float* src = transpose ? t : x;
    switch (m->scaling) {
        case FP8_SCALE_TENSOR: m->scale[0] = *tensor_scale; fp8_quantize_cpu(m->q, src, (size_t)rows * K, *tensor_scale, m->fmt); break;
        case FP8_SCALE_1x128: fp8_quantize_1x128_cpu(m->q, m->scale, src, rows, K, m->fmt); break;
        case FP8_SCALE_128x128: fp8_quantize_128x128_cpu(m->q, m->scale, src, rows, K, m->fmt); break;
        case FP8_SCALE_MX32: fp8_quantize_mx_cpu(m->q, m->e8m0, src, rows, K, m->fmt); break;
    }
    free(t);
}

// cuBLASLt's layout of m's scales, on the host (the kernel below does the same on the device)
static void fp8_lt_scale_cpu(void* lt, const Fp8Matrix* m) {
    size_t n = fp8_lt_scale_count(m->rows, m->K, m->scaling);
    if (m->scaling == FP8_SCALE_MX32) memset(lt, 127, n);  // padding: 2^0
    else for (size_t i = 0; i < n; i++) ((float*)lt)[i] = 1.0f;
    int step = m->scaling == FP8_SCALE_MX32 ? FP8_MX_BLOCK : FP8_BLOCK;
    int nt = fp8_ceil_div(m->K, FP8_BLOCK), nb = fp8_ceil_div(m->K, FP8_MX_BLOCK);
    for (int r = 0; r < m->rows; r++) {
        for (int k = 0; k < m->K; k += step) {
            size_t i = fp8_lt_index(r, k, m->rows, m->K, m->scaling);
            switch (m->scaling) {
                case FP8_SCALE_TENSOR: ((float*)lt)[i] = fp8_div_rn(1.0f, m->scale[0]); break;
                case FP8_SCALE_1x128: ((float*)lt)[i] = fp8_div_rn(1.0f, m->scale[(size_t)r * nt + k / FP8_BLOCK]); break;
                case FP8_SCALE_128x128: ((float*)lt)[i] = fp8_div_rn(1.0f, m->scale[(size_t)(r / FP8_BLOCK) * nt + k / FP8_BLOCK]); break;
                case FP8_SCALE_MX32: ((uint8_t*)lt)[i] = m->e8m0[(size_t)r * nb + k / FP8_MX_BLOCK]; break;
            }
        }
    }
}

// ----------------------------------------------------------------------------
// 2. CUDA kernels
#if LLM_HAS_KERNELS

// cuBLASLt's layout from the quantizer's scales, one thread per element of the layout (padding included:
// 1.0f or E8M0 127). For each layout position, the inverse of fp8_lt_index.
__global__ void fp8_lt_scale_kernel(void* lt,               // (fp8_lt_scale_count) float, or bytes for MX
                                    const float* scale,     // the quantizer's scales (TENSOR, 1x128, 128x128)
                                    const uint8_t* e8m0,    // MX: (rows, ceil(K/32))
                                    int rows, int K, int scaling, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int nt = (K + FP8_BLOCK - 1) / FP8_BLOCK;
    if (scaling == FP8_SCALE_TENSOR) {
        ((float*)lt)[0] = fp8_div_rn(1.0f, scale[0]);
    } else if (scaling == FP8_SCALE_1x128) {
        int ld = (rows + 3) / 4 * 4;
        int kb = (int)(i / ld), r = (int)(i % ld);
        ((float*)lt)[i] = r < rows ? fp8_div_rn(1.0f, scale[(size_t)r * nt + kb]) : 1.0f;
    } else if (scaling == FP8_SCALE_128x128) {
        int ld = (nt + 3) / 4 * 4;
        int rb = (int)(i / ld), kb = (int)(i % ld);
        ((float*)lt)[i] = kb < nt ? fp8_div_rn(1.0f, scale[(size_t)rb * nt + kb]) : 1.0f;
    } else {
        int nb = (K + FP8_MX_BLOCK - 1) / FP8_MX_BLOCK, kb_tiles = (nb + 3) / 4;
        size_t tile = i / 512;
        int w = (int)(i % 512);
        int r = (int)(tile / kb_tiles) * 128 + ((w % 16) / 4) * 32 + w / 16;
        int kb = (int)(tile % kb_tiles) * 4 + w % 4;
        ((uint8_t*)lt)[i] = (r < rows && kb < nb) ? e8m0[(size_t)r * nb + kb] : (uint8_t)127;
    }
}

// out (rows, K) FP32 = the operand's values (the fallback GEMM's input)
__global__ void fp8_dequant_kernel(float* out, const uint8_t* q, const float* scale, const uint8_t* e8m0, int rows,
                                   int K, int fmt, int scaling) {
    size_t n = (size_t)rows * K;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = fp8_matrix_value(q, scale, e8m0, (int)(i / K), (int)(i % K), rows, K, fmt, scaling);
}

// *amax = max |x| of a floatX tensor (fp8.cuh's kernel, instantiated for floatX)
static void fp8_amax_floatx(float* amax, const floatX* x, size_t n, cudaStream_t stream) {  // amax (1), x (n) device
    cudaCheck(cudaMemsetAsync(amax, 0, sizeof(float), stream));
    int grid = (int)((n + 255) / 256 < 256 ? (n + 255) / 256 : 256);
    LAUNCH(fp8_amax_kernel<floatX>, dim3(grid > 0 ? grid : 1), dim3(256), 0, stream, amax, x, n);
}

// quantize x (rows, K), or with transpose x (K, rows) as x^T, into m (shape set by fp8_matrix_prepare),
// then lay out m's scales for cuBLASLt. tensor_scale: device pointer to the per-tensor scale, or NULL.
static void fp8_matrix_quantize(Fp8Matrix* m, const floatX* x, int transpose, const float* tensor_scale,
                                cudaStream_t stream) {
    int rows = m->rows, K = m->K, fmt = m->fmt;
    size_t n = (size_t)rows * K;
    if (n == 0) return;
    // x as stored: (xr, xc) = (rows, K), or (K, rows) with transpose
    int xr = transpose ? K : rows, xc = transpose ? rows : K;
    switch (m->scaling) {
        case FP8_SCALE_TENSOR: {
            copy_device_to_device(m->scale, tensor_scale, sizeof(float), stream);
            if (transpose) {
                LAUNCH(fp8_quantize_transpose_kernel<floatX>, dim3(fp8_ceil_div(xc, 32), fp8_ceil_div(xr, 32)), dim3(32, 8), 0,
                       stream, m->q, x, m->scale, xr, xc, fmt);
            } else {
                int grid = (int)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024);
                LAUNCH(fp8_quantize_kernel<floatX>, dim3(grid), dim3(256), 0, stream, m->q, x, m->scale, n, fmt);
            }
            break;
        }
        case FP8_SCALE_1x128:
            if (transpose) {
                LAUNCH(fp8_quantize_transpose_1x128_kernel<floatX>, dim3(fp8_ceil_div(xc, 32), fp8_ceil_div(xr, FP8_BLOCK)),
                       dim3(32, 8), 0, stream, m->q, m->scale, x, xr, xc, fmt);
            } else {
                size_t tiles = (size_t)rows * fp8_ceil_div(K, FP8_BLOCK);
                LAUNCH(fp8_quantize_1x128_kernel<floatX>, dim3((unsigned)((tiles + 7) / 8)), dim3(256), 0, stream, m->q,
                       m->scale, x, rows, K, fmt);
            }
            break;
        case FP8_SCALE_128x128:
            if (transpose) {
                LAUNCH(fp8_quantize_transpose_128x128_kernel<floatX>, dim3(fp8_ceil_div(xc, FP8_BLOCK), fp8_ceil_div(xr, FP8_BLOCK)),
                       dim3(256), 0, stream, m->q, m->scale, x, xr, xc, fmt);
            } else {
                LAUNCH(fp8_quantize_128x128_kernel<floatX>, dim3(fp8_ceil_div(K, FP8_BLOCK), fp8_ceil_div(rows, FP8_BLOCK)),
                       dim3(256), 0, stream, m->q, m->scale, x, rows, K, fmt);
            }
            break;
        case FP8_SCALE_MX32: {
            size_t blocks = (size_t)rows * fp8_ceil_div(K, FP8_MX_BLOCK);
            if (transpose) {
                LAUNCH(fp8_quantize_transpose_mx_kernel<floatX>, dim3((unsigned)((blocks + 7) / 8)), dim3(256), 0, stream,
                       m->q, m->e8m0, x, xr, xc, fmt);
            } else {
                LAUNCH(fp8_quantize_mx_kernel<floatX>, dim3((unsigned)((blocks + 7) / 8)), dim3(256), 0, stream, m->q,
                       m->e8m0, x, rows, K, fmt);
            }
            break;
        }
    }
    size_t nl = fp8_lt_scale_count(rows, K, m->scaling);
    LAUNCH(fp8_lt_scale_kernel, dim3((unsigned)((nl + 255) / 256)), dim3(256), 0, stream, m->lt_scale, m->scale, m->e8m0,
           rows, K, (int)m->scaling, nl);
}

// out (rows, K) FP32 device = m's values
static void fp8_matrix_dequant(float* out, const Fp8Matrix* m, cudaStream_t stream) {
    size_t n = (size_t)m->rows * m->K;
    if (n == 0) return;
    int grid = (int)((n + 255) / 256 < 2048 ? (n + 255) / 256 : 2048);
    LAUNCH(fp8_dequant_kernel, dim3(grid), dim3(256), 0, stream, out, m->q, m->scale, m->e8m0, m->rows, m->K, m->fmt,
           (int)m->scaling);
}

#else  // the CPU build: the reference is the implementation (device memory is host memory)

// (x through its FP32 view: the array itself in the FP32 build, a copy of the 16-bit values otherwise)
static void fp8_amax_floatx(float* amax, const floatX* x, size_t n, cudaStream_t stream) {
    (void)stream;
    float* xf = f32_in(x, n);  // (n)
    *amax = fp8_amax_cpu(xf, n);
    f32_free(x, xf);
}
static void fp8_matrix_quantize(Fp8Matrix* m, const floatX* x, int transpose, const float* tensor_scale,
                                cudaStream_t stream) {
    (void)stream;
    float* xf = f32_in(x, (size_t)m->rows * m->K);  // (rows, K), or (K, rows) with transpose
    fp8_matrix_quantize_cpu(m, xf, transpose, tensor_scale);
    f32_free(x, xf);
    fp8_lt_scale_cpu(m->lt_scale, m);
}
static void fp8_matrix_dequant(float* out, const Fp8Matrix* m, cudaStream_t stream) {
    (void)stream;
    fp8_matrix_dequant_cpu(out, m);
}

#endif  // LLM_HAS_KERNELS
