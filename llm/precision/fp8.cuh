// fp8.cuh: FP8 numbers and the quantizers of the FP8 scaling recipes.
//
// Formats (Micikevicius et al. 2022, "FP8 Formats for Deep Learning"):
//   E4M3 ("fn": finite + NaN): 1 sign, 4 exponent (bias 7), 3 mantissa bits; max 448 (0x7E);
//        no infinity; NaN is S.1111.111 (0x7F / 0xFF); smallest subnormal 2^-9.
//   E5M2: 1 sign, 5 exponent (bias 15), 2 mantissa bits; max 57344 (0x7B); inf 0x7C / 0xFC;
//        NaN 0x7D..0x7F (we write 0x7E / 0xFE); smallest subnormal 2^-16.
// Conventions of fp8_encode (the same for both formats, bit-checked against ml_dtypes by
// test/test_fp8.cu + test/fp8_reference.py):
//   - round to nearest, ties to even, subnormals exact (a float below half the smallest subnormal
//     becomes a signed zero);
//   - a FINITE value beyond the format max SATURATES to +-max (the usual training choice, as
//     Transformer Engine and CUDA's __NV_SATFINITE). ml_dtypes' astype does not saturate (E4M3FN
//     overflow -> NaN, E5M2 overflow -> inf); the reference therefore clips finite values to +-max
//     before ml_dtypes rounds them, which is the same thing;
//   - +-inf: E4M3 -> NaN with the sign (0x7F / 0xFF), E5M2 -> +-inf (0x7C / 0xFC); NaN -> NaN with
//     the sign (E4M3 0x7F / 0xFF, E5M2 0x7E / 0xFE). Both exactly as ml_dtypes.
//
// Recipes (a scale multiplies before encoding: q = encode(x * scale), x ~ decode(q) / scale):
//   current  per-tensor scale = fp8_max / amax(this tensor)
//   delayed  per-tensor scale = (fp8_max / reduce(amax history)) / 2^margin (Transformer Engine)
//   block    DeepSeek-V3 (sec. 3.3): 1x128 tiles (activations, gradients) and 128x128 blocks
//            (weights), one FP32 scale = fp8_max / tile_amax per tile
//   mx       OCP Microscaling Formats (MX) v1.0: 32-element blocks along the inner dimension with a
//            power-of-two E8M0 scale X = 2^(floor(log2(amax)) - emax_elem), emax_elem = 8 (E4M3),
//            15 (E5M2) (spec sec. 6.3, as restated by public MX quantizer docs: the spec PDF itself was
//            not at hand); elements = encode(x / X) (saturating)
// Layout (the house style): the CPU reference of each recipe, one section each (plain C), then the
// CUDA kernels, again one section per recipe (per tensor, block, mx).
#pragma once
#include "../core/common.h"
#include <float.h>

// ----------------------------------------------------------------------------
// the two formats

enum { FP8_E4M3 = 0, FP8_E5M2 = 1 };
#define FP8_E4M3_MAX 448.0f
#define FP8_E5M2_MAX 57344.0f

LLM_HD static inline float fp8_max(int fmt) { return fmt == FP8_E4M3 ? FP8_E4M3_MAX : FP8_E5M2_MAX; }
// the largest exponent of a normal element, emax_elem of the OCP MX spec (448 = 1.75 * 2^8)
LLM_HD static inline int fp8_emax(int fmt) { return fmt == FP8_E4M3 ? 8 : 15; }

LLM_HD static inline uint32_t fp8_f2u(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
LLM_HD static inline float fp8_u2f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

// 2^k exactly, for k in [-149, 127] (subnormal floats below -126)
LLM_HD static inline float fp8_exp2i(int k) {
    if (k >= -126) return fp8_u2f((uint32_t)(k + 127) << 23);
    return fp8_u2f(1u << (k + 149));
}

// a / b correctly rounded: nvcc's --use_fast_math makes '/' approximate in kernels, and the scales
// must be bit-identical to the CPU's. (Only the '/' branch runs without a GPU: the emulated build
// has no __CUDA_ARCH__.)
LLM_HD static inline float fp8_div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

// max that propagates NaN (fmaxf drops it), on values >= 0 or NaN
LLM_HD static inline float fp8_nanmax(float a, float b) { return (a > b || a != a) ? a : b; }
LLM_HD static inline bool fp8_isfinite(float x) { return (fp8_f2u(x) & 0x7f800000u) != 0x7f800000u; }

// float -> FP8 code: round to nearest even, finite overflow saturates, inf/NaN as stated on top.
// Without branches (selects, min, shifts by a per-element amount) so that g++ vectorizes the CPU
// quantizers' loops over it: the CPU build's FP8 step was mostly this function, about 7 ns an element
// as a chain of early returns, under 1 ns vectorized (the same code for every float: checked on all
// 2^32 of them against the early-return form when it was rewritten, and against ml_dtypes by
// test/test_fp8.cu). The kernels run it too.
LLM_HD static inline uint8_t fp8_encode(float x, int fmt) {
    const int M = fmt == FP8_E4M3 ? 3 : 2;          // mantissa bits
    const int bias = fmt == FP8_E4M3 ? 7 : 15;
    const int maxcode = fmt == FP8_E4M3 ? 0x7E : 0x7B;
    const int nancode = fmt == FP8_E4M3 ? 0x7F : 0x7E;
    const int infcode = fmt == FP8_E4M3 ? 0x7F : 0x7C;  // E4M3 has no inf: NaN
    uint32_t u = fp8_f2u(x);
    uint32_t a = u & 0x7fffffffu;
    int e = (int)(a >> 23) - 127;               // x = mant24 * 2^(e - 23); a float subnormal or zero has
    uint32_t mant24 = (a & 0x7fffffu) | 0x800000u;  // e = -127 and rounds to 0 below (s = 25)
    int sub = 1 - bias - e > 0 ? 1 - bias - e : 0;  // E - e, E the FP8 exponent (the subnormals' one below the normals)
    int s = 23 - M + sub;                       // units of 2^(E - M) = mant24 >> s, s >= 20
    s = s < 25 ? s : 25;                        // s >= 25: below half the smallest step, 0 (as s = 25 gives)
    // round to nearest, ties to even: a remainder above half carries, exactly half carries when the kept
    // lsb is odd (mant24 < 2^24 and half <= 2^24: no overflow)
    uint32_t units = (mant24 + ((1u << (s - 1)) - 1u) + ((mant24 >> s) & 1u)) >> s;
    // normal: ((E + bias) << M) | (units - 2^M); subnormal (E + bias = 1, units < 2^M): units.
    // One formula for both; units = 2^(M+1) after rounding carries into the exponent.
    int code = ((e + sub + bias - 1) << M) + (int)units;
    code = code < maxcode ? code : maxcode;    // saturate finite overflow
    code = a == 0x7f800000u ? infcode : code;  // +-inf
    code = a > 0x7f800000u ? nancode : code;   // NaN
    return (uint8_t)(((u >> 31) << 7) | (uint32_t)code);
}
LLM_HD static inline uint8_t fp8_encode_e4m3(float x) { return fp8_encode(x, FP8_E4M3); }
LLM_HD static inline uint8_t fp8_encode_e5m2(float x) { return fp8_encode(x, FP8_E5M2); }

// FP8 code -> float (exact)
LLM_HD static inline float fp8_decode(uint8_t q, int fmt) {
    const int M = fmt == FP8_E4M3 ? 3 : 2;
    const int bias = fmt == FP8_E4M3 ? 7 : 15;
    uint32_t sign = (uint32_t)(q >> 7) << 31;
    int ef = (q & 0x7f) >> M, mf = q & ((1 << M) - 1);
    if (fmt == FP8_E4M3 && (q & 0x7f) == 0x7f) return fp8_u2f(sign | 0x7fc00000u);
    if (fmt == FP8_E5M2 && ef == 31) return fp8_u2f(sign | (mf == 0 ? 0x7f800000u : 0x7fc00000u));
    if (ef == 0) return fp8_u2f(sign | fp8_f2u((float)mf * fp8_exp2i(1 - bias - M)));
    return fp8_u2f(sign | ((uint32_t)(ef - bias + 127) << 23) | ((uint32_t)mf << (23 - M)));
}
LLM_HD static inline float fp8_decode_e4m3(uint8_t q) { return fp8_decode(q, FP8_E4M3); }
LLM_HD static inline float fp8_decode_e5m2(uint8_t q) { return fp8_decode(q, FP8_E5M2); }

// ----------------------------------------------------------------------------
// per-tensor scaling: the scale, quantize and dequantize (CPU reference)

// fp8_max / amax, in FP32, correctly rounded; a quotient that overflows becomes FLT_MAX (a tiny
// amax must not give an inf scale: 0 * inf would be NaN)
LLM_HD static inline float fp8_scale_from_amax(float amax, int fmt) {
    float s = fp8_div_rn(fp8_max(fmt), amax);
    return fp8_isfinite(s) ? s : FLT_MAX;
}

static float fp8_amax_cpu(const float* x, size_t n) {  // x (n)
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fp8_nanmax(m, fabsf(x[i]));
    return m;
}

// current scaling: the scale from this tensor's own amax. amax 0 -> 1 (nothing to scale);
// amax inf or NaN -> prev_scale (the tensor's inf/NaN then show up in its codes)
LLM_HD static inline float fp8_current_scale(float amax, float prev_scale, int fmt) {
    if (!fp8_isfinite(amax)) return prev_scale;
    if (amax == 0.0f) return 1.0f;
    return fp8_scale_from_amax(amax, fmt);
}

// delayed scaling (Transformer Engine's recipe): the scale of step t comes from the amaxes of the
// steps before it. Order, per step: (1) reduce the history (max over its H entries, or the most
// recent entry), (2) scale = (fp8_max / amax_reduced) / 2^margin, where amax_reduced 0, inf or NaN
// keeps the previous scale, (3) quantize this step's tensor with that scale, (4) push this step's
// amax into the history (a ring of H entries, zeros at first). A NaN amax stays in a max-reduced
// history for H steps, keeping the scale that long.
enum { FP8_AMAX_REDUCE_MAX = 0, FP8_AMAX_REDUCE_MOST_RECENT = 1 };
typedef struct {
    float* history;  // (H) past amaxes, a ring
    int H;
    int pos;         // where the next amax goes
    int reduce;      // FP8_AMAX_REDUCE_*
    int margin;
    float scale;     // the scale of the current step
} Fp8DelayedState;

static void fp8_delayed_init(Fp8DelayedState* st, float* history, int H, int reduce, int margin) {  // history (H)
    st->history = history; st->H = H; st->pos = 0; st->reduce = reduce; st->margin = margin; st->scale = 1.0f;
    for (int i = 0; i < H; i++) history[i] = 0.0f;
}
// steps (1) and (2): the scale for this step, from the history
static float fp8_delayed_scale(Fp8DelayedState* st, int fmt) {
    float amax = 0.0f;
    if (st->reduce == FP8_AMAX_REDUCE_MAX) {
        for (int i = 0; i < st->H; i++) amax = fp8_nanmax(amax, st->history[i]);
    } else {
        amax = st->history[(st->pos + st->H - 1) % st->H];
    }
    if (fp8_isfinite(amax) && amax != 0.0f) {
        float s = fp8_div_rn(fp8_max(fmt), amax) / fp8_exp2i(st->margin);
        st->scale = fp8_isfinite(s) ? s : FLT_MAX;
    }
    return st->scale;
}
// step (4): record this step's amax
static void fp8_delayed_push(Fp8DelayedState* st, float amax) {
    st->history[st->pos] = amax;
    st->pos = (st->pos + 1) % st->H;
}

// The CPU loops below are the references of the kernels and the CPU build's implementation: their
// rows are independent, so OpenMP splits them over the cores (the same values in any order).
static void fp8_quantize_cpu(uint8_t* q, const float* x, size_t n, float scale, int fmt) {  // q (n), x (n)
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) q[i] = fp8_encode(x[i] * scale, fmt);
}
static void fp8_dequantize_cpu(float* x, const uint8_t* q, size_t n, float scale, int fmt) {  // x (n), q (n)
    for (size_t i = 0; i < n; i++) x[i] = fp8_div_rn(fp8_decode(q[i], fmt), scale);
}
// the quantized transpose: qt[c][r] = encode(x[r][c] * scale)
static void fp8_quantize_transpose_cpu(uint8_t* qt, const float* x, int rows, int cols, float scale, int fmt) {  // qt (cols, rows), x (rows, cols)
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) qt[(size_t)c * rows + r] = fp8_encode(x[(size_t)r * cols + c] * scale, fmt);
}

// ----------------------------------------------------------------------------
// block scaling (DeepSeek-V3 sec. 3.3): one FP32 scale per tile; tiles at the edges may be partial

#define FP8_BLOCK 128

// a tile's scale: fp8_max / tile_amax; tile amax 0 -> 1; a tile with inf or NaN has no previous
// scale to keep: scale 1, so its inf/NaN show in its codes and its finite values saturate
LLM_HD static inline float fp8_tile_scale(float amax, int fmt) {
    if (!fp8_isfinite(amax) || amax == 0.0f) return 1.0f;
    return fp8_scale_from_amax(amax, fmt);
}

// max |x[i]| over a tile's row segment x (n), with fp8_nanmax's NaN rule (a NaN if the segment has
// one), computed on the bits so that g++ vectorizes it (an unsigned max; fp8_nanmax's select does
// not): non-negative floats order as their bits and every NaN lies above +inf. The NaN it returns may
// carry another payload than fp8_nanmax's: fp8_tile_scale treats every NaN alike.
static inline float fp8_tile_amax_cpu(const float* x, int n) {
    uint32_t m = 0;
    for (int i = 0; i < n; i++) {
        uint32_t a = fp8_f2u(x[i]) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    return fp8_u2f(m);
}

// 1x128 tiles along the inner dimension (activations and gradients)
static void fp8_quantize_1x128_cpu(uint8_t* q, float* scales, const float* x, int rows, int cols, int fmt) {
    // q (rows, cols), scales (rows, ceil(cols/128)), x (rows, cols)
    int nt = (cols + FP8_BLOCK - 1) / FP8_BLOCK;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        for (int t = 0; t < nt; t++) {
            int c0 = t * FP8_BLOCK, c1 = c0 + FP8_BLOCK < cols ? c0 + FP8_BLOCK : cols;
            const float* xr = x + (size_t)r * cols;
            float s = fp8_tile_scale(fp8_tile_amax_cpu(xr + c0, c1 - c0), fmt);
            scales[(size_t)r * nt + t] = s;
            for (int c = c0; c < c1; c++) q[(size_t)r * cols + c] = fp8_encode(xr[c] * s, fmt);
        }
    }
}

// 128x128 blocks (weights)
static void fp8_quantize_128x128_cpu(uint8_t* q, float* scales, const float* x, int rows, int cols, int fmt) {
    // q (rows, cols), scales (ceil(rows/128), ceil(cols/128)), x (rows, cols)
    int nbr = (rows + FP8_BLOCK - 1) / FP8_BLOCK, nbc = (cols + FP8_BLOCK - 1) / FP8_BLOCK;
    // every block to the threads (a weight of 128 rows is one block row: split over br alone, one thread worked)
#pragma omp parallel for collapse(2) schedule(static)
    for (int br = 0; br < nbr; br++) {
        for (int bc = 0; bc < nbc; bc++) {
            int r0 = br * FP8_BLOCK, r1 = r0 + FP8_BLOCK < rows ? r0 + FP8_BLOCK : rows;
            int c0 = bc * FP8_BLOCK, c1 = c0 + FP8_BLOCK < cols ? c0 + FP8_BLOCK : cols;
            float amax = 0.0f;
            for (int r = r0; r < r1; r++) amax = fp8_nanmax(amax, fp8_tile_amax_cpu(x + (size_t)r * cols + c0, c1 - c0));
            float s = fp8_tile_scale(amax, fmt);
            scales[(size_t)br * nbc + bc] = s;
            for (int r = r0; r < r1; r++)
                for (int c = c0; c < c1; c++) q[(size_t)r * cols + c] = fp8_encode(x[(size_t)r * cols + c] * s, fmt);
        }
    }
}

// ----------------------------------------------------------------------------
// MX scaling (OCP Microscaling Formats v1.0): 32-element blocks, an E8M0 power-of-two scale

#define FP8_MX_BLOCK 32
#define FP8_E8M0_NAN 0xFF

// floor(log2(a)) of a finite a > 0, from the bits (subnormals included)
LLM_HD static inline int fp8_floor_log2(float a) {
    uint32_t u = fp8_f2u(a) & 0x7fffffffu;
    if (u >= 0x00800000u) return (int)(u >> 23) - 127;
    int k = -150;
    while (u) { u >>= 1; k++; }  // the subnormal's top bit: 2^(k) with u = m, a = m * 2^-149
    return k;
}
// the block's E8M0 code: X = 2^(floor(log2(amax)) - emax_elem), the exponent clamped to E8M0's
// [-127, 127] (code = exponent + 127); amax 0 -> code 0 (2^-127: any scale gives zeros);
// amax inf or NaN -> the E8M0 NaN (0xFF), and every element of the block is NaN
LLM_HD static inline uint8_t fp8_mx_scale_code(float amax, int fmt) {
    if (!fp8_isfinite(amax)) return FP8_E8M0_NAN;
    if (amax == 0.0f) return 0;
    int e = fp8_floor_log2(amax) - fp8_emax(fmt);
    if (e < -127) e = -127;
    if (e > 127) e = 127;
    return (uint8_t)(e + 127);
}
// one element of a block with E8M0 code sc: encode(x / 2^(sc - 127)), x * 2^-(sc-127) exactly
LLM_HD static inline uint8_t fp8_mx_encode(float x, uint8_t sc, int fmt) {
    if (sc == FP8_E8M0_NAN) return fmt == FP8_E4M3 ? 0x7F : 0x7E;
    return fp8_encode(x * fp8_exp2i(127 - (int)sc), fmt);
}
LLM_HD static inline float fp8_mx_decode(uint8_t q, uint8_t sc, int fmt) {
    if (sc == FP8_E8M0_NAN) return fp8_u2f(0x7fc00000u);
    return fp8_decode(q, fmt) * fp8_exp2i((int)sc - 127);
}

static void fp8_quantize_mx_cpu(uint8_t* q, uint8_t* scales, const float* x, int rows, int cols, int fmt) {
    // q (rows, cols), scales (rows, ceil(cols/32)) E8M0 codes, x (rows, cols)
    int nb = (cols + FP8_MX_BLOCK - 1) / FP8_MX_BLOCK;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float* xr = x + (size_t)r * cols;
        for (int b = 0; b < nb; b++) {
            int c0 = b * FP8_MX_BLOCK, c1 = c0 + FP8_MX_BLOCK < cols ? c0 + FP8_MX_BLOCK : cols;
            float amax = 0.0f;
            for (int c = c0; c < c1; c++) amax = fp8_nanmax(amax, fabsf(xr[c]));
            uint8_t sc = fp8_mx_scale_code(amax, fmt);
            scales[(size_t)r * nb + b] = sc;
            if (sc == FP8_E8M0_NAN) {  // fp8_mx_encode's rule, with the block's 2^-(sc-127) computed once
                for (int c = c0; c < c1; c++) q[(size_t)r * cols + c] = fmt == FP8_E4M3 ? 0x7F : 0x7E;
                continue;
            }
            float inv = fp8_exp2i(127 - (int)sc);
            for (int c = c0; c < c1; c++) q[(size_t)r * cols + c] = fp8_encode(xr[c] * inv, fmt);
        }
    }
}

// the wgrad operands (dy^T, x^T: the inner dimension is the rows of x) are quantized transposed, with
// the recipe's tiles along x^T's rows: the reference transposes (this), then quantizes
// (llm/precision/fp8_matrix.cuh)
static float* fp8_transpose_cpu(const float* x, int rows, int cols) {  // returns (cols, rows), malloc'd
    float* t = (float*)mallocCheck((size_t)rows * cols * sizeof(float));
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) t[(size_t)c * rows + r] = x[(size_t)r * cols + c];
    return t;
}

// ----------------------------------------------------------------------------
// CUDA kernels (Tin: float or floatX; every value goes through float)
#if LLM_HAS_KERNELS
#include "../core/cuda_utils.cuh"

// the NaN-propagating max as a reduction op (cuda_utils.cuh: warp_reduce, block_reduce; the values are >= 0 or NaN)
struct Fp8NanMax { __device__ __forceinline__ float operator()(float a, float b) const { return fp8_nanmax(a, b); } };

// --- per tensor (current and delayed scaling) ---

// *amax = max(*amax, max |x|): grid-stride, a block reduction, then one atomicMax on the bits
// (non-negative floats order as their bits; a NaN, made positive, is above +inf)
template <typename Tin>
__global__ void fp8_amax_kernel(float* amax,      // (1), zeroed before the launch
                                const Tin* x,     // (n)
                                size_t n) {
    float m = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        m = fp8_nanmax(m, fabsf((float)x[i]));
    m = block_reduce(m, Fp8NanMax());
    if (threadIdx.x == 0) atomicMax((unsigned*)amax, __float_as_uint(m));
}

// the current-scaling scale on the device, from the amax the kernel above wrote
__global__ void fp8_current_scale_kernel(float* scale,       // (1): the previous scale in, the new out
                                         const float* amax,  // (1)
                                         int fmt) {
    if (threadIdx.x == 0 && blockIdx.x == 0) *scale = fp8_current_scale(*amax, *scale, fmt);
}

// q = encode(x * *scale)
template <typename Tin>
__global__ void fp8_quantize_kernel(uint8_t* q,            // (n)
                                    const Tin* x,          // (n)
                                    const float* scale,    // (1)
                                    size_t n, int fmt) {
    float s = *scale;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        q[i] = fp8_encode((float)x[i] * s, fmt);
}

// qt = encode(x^T * *scale): 32x32 tiles through shared memory, read and written along rows.
// Block (32, 8); grid (ceil(cols/32), ceil(rows/32)).
template <typename Tin>
__global__ void fp8_quantize_transpose_kernel(uint8_t* qt,          // (cols, rows)
                                              const Tin* x,         // (rows, cols)
                                              const float* scale,   // (1)
                                              int rows, int cols, int fmt) {
    __shared__ uint8_t tile[32][33];
    float s = *scale;
    int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    for (int dr = threadIdx.y; dr < 32; dr += 8) {
        int r = r0 + dr, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[dr][threadIdx.x] = fp8_encode((float)x[(size_t)r * cols + c] * s, fmt);
    }
    __syncthreads();
    for (int dc = threadIdx.y; dc < 32; dc += 8) {
        int c = c0 + dc, r = r0 + threadIdx.x;
        if (r < rows && c < cols) qt[(size_t)c * rows + r] = tile[threadIdx.x][dc];
    }
}

static void fp8_amax(float* amax, const float* x, size_t n, cudaStream_t stream) {  // amax (1), x (n) device
    cudaCheck(cudaMemsetAsync(amax, 0, sizeof(float), stream));
    int grid = (int)((n + 255) / 256 < 256 ? (n + 255) / 256 : 256);
    LAUNCH(fp8_amax_kernel<float>, dim3(grid > 0 ? grid : 1), dim3(256), 0, stream, amax, x, n);
}
static void fp8_current_scale_update(float* scale, const float* amax, int fmt, cudaStream_t stream) {  // (1), (1) device
    LAUNCH(fp8_current_scale_kernel, dim3(1), dim3(32), 0, stream, scale, amax, fmt);
}
static void fp8_quantize(uint8_t* q, const float* x, const float* scale, size_t n, int fmt, cudaStream_t stream) {
    // q (n), x (n), scale (1) device
    int grid = (int)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024);
    LAUNCH(fp8_quantize_kernel<float>, dim3(grid > 0 ? grid : 1), dim3(256), 0, stream, q, x, scale, n, fmt);
}
static void fp8_quantize_transpose(uint8_t* qt, const float* x, const float* scale, int rows, int cols, int fmt,
                                   cudaStream_t stream) {  // qt (cols, rows), x (rows, cols), scale (1) device
    dim3 grid((cols + 31) / 32, (rows + 31) / 32);
    LAUNCH(fp8_quantize_transpose_kernel<float>, grid, dim3(32, 8), 0, stream, qt, x, scale, rows, cols, fmt);
}

// --- block scaling ---

// 1x128: one warp per tile, 4 elements per lane. Grid: rows * ceil(cols/128) warps, 8 warps a block.
template <typename Tin>
__global__ void fp8_quantize_1x128_kernel(uint8_t* q,        // (rows, cols)
                                          float* scales,     // (rows, ceil(cols/128))
                                          const Tin* x,      // (rows, cols)
                                          int rows, int cols, int fmt) {
    int nt = (cols + FP8_BLOCK - 1) / FP8_BLOCK;
    size_t tile = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (tile >= (size_t)rows * nt) return;  // a whole warp leaves together
    int r = (int)(tile / nt), c0 = (int)(tile % nt) * FP8_BLOCK;
    const Tin* xr = x + (size_t)r * cols;
    float v[4], m = 0.0f;
    for (int k = 0; k < 4; k++) {
        int c = c0 + lane + 32 * k;
        v[k] = c < cols ? (float)xr[c] : 0.0f;
        m = fp8_nanmax(m, fabsf(v[k]));
    }
    float s = fp8_tile_scale(warp_reduce(m, Fp8NanMax()), fmt);
    if (lane == 0) scales[tile] = s;
    for (int k = 0; k < 4; k++) {
        int c = c0 + lane + 32 * k;
        if (c < cols) q[(size_t)r * cols + c] = fp8_encode(v[k] * s, fmt);
    }
}

// the transpose with 1x128 tiles along ITS inner dimension: qt = quantize_1x128(x^T), i.e. x read in
// 128x1 tiles. A block of (32, 8) threads takes 128 rows x 32 columns of x through shared memory;
// warp w then owns columns w, w+8, w+16, w+24, each one tile of qt. Grid (ceil(cols/32), ceil(rows/128)).
template <typename Tin>
__global__ void fp8_quantize_transpose_1x128_kernel(uint8_t* qt,      // (cols, rows)
                                                    float* scales,    // (cols, ceil(rows/128))
                                                    const Tin* x,     // (rows, cols)
                                                    int rows, int cols, int fmt) {
    __shared__ float tile[FP8_BLOCK][33];
    int c0 = blockIdx.x * 32, r0 = blockIdx.y * FP8_BLOCK;
    int nt = (rows + FP8_BLOCK - 1) / FP8_BLOCK;
    for (int dr = threadIdx.y; dr < FP8_BLOCK; dr += 8) {
        int r = r0 + dr, c = c0 + threadIdx.x;
        tile[dr][threadIdx.x] = (r < rows && c < cols) ? (float)x[(size_t)r * cols + c] : 0.0f;
    }
    __syncthreads();
    int lane = threadIdx.x;
    for (int dc = threadIdx.y; dc < 32; dc += 8) {
        int c = c0 + dc;
        if (c >= cols) break;  // the same for the whole warp
        float m = 0.0f;
        for (int k = 0; k < 4; k++) m = fp8_nanmax(m, fabsf(tile[lane + 32 * k][dc]));
        float s = fp8_tile_scale(warp_reduce(m, Fp8NanMax()), fmt);
        if (lane == 0) scales[(size_t)c * nt + blockIdx.y] = s;
        for (int k = 0; k < 4; k++) {
            int r = r0 + lane + 32 * k;
            if (r < rows) qt[(size_t)c * rows + r] = fp8_encode(tile[lane + 32 * k][dc] * s, fmt);
        }
    }
}

// the first pass of both 128x128 quantizers: the amax of the 128x128 block of x (rows, cols) whose
// top-left element is (r0, c0), elements past the edges left out; the whole thread block calls it
// (block_reduce) and every thread gets the result
template <typename Tin>
__device__ float fp8_amax_128x128(const Tin* x /*(rows, cols)*/, int rows, int cols, int r0, int c0) {
    float m = 0.0f;
    for (int i = threadIdx.x; i < FP8_BLOCK * FP8_BLOCK; i += blockDim.x) {
        int r = r0 + i / FP8_BLOCK, c = c0 + i % FP8_BLOCK;
        if (r < rows && c < cols) m = fp8_nanmax(m, fabsf((float)x[(size_t)r * cols + c]));
    }
    return block_reduce(m, Fp8NanMax());
}

// 128x128: one block of 256 threads per block of x, two passes over it (amax, then encode).
// Grid (ceil(cols/128), ceil(rows/128)).
template <typename Tin>
__global__ void fp8_quantize_128x128_kernel(uint8_t* q,        // (rows, cols)
                                            float* scales,     // (ceil(rows/128), ceil(cols/128))
                                            const Tin* x,      // (rows, cols)
                                            int rows, int cols, int fmt) {
    int r0 = blockIdx.y * FP8_BLOCK, c0 = blockIdx.x * FP8_BLOCK;
    float s = fp8_tile_scale(fp8_amax_128x128(x, rows, cols, r0, c0), fmt);
    if (threadIdx.x == 0) scales[(size_t)blockIdx.y * gridDim.x + blockIdx.x] = s;
    for (int i = threadIdx.x; i < FP8_BLOCK * FP8_BLOCK; i += blockDim.x) {
        int r = r0 + i / FP8_BLOCK, c = c0 + i % FP8_BLOCK;
        if (r < rows && c < cols) q[(size_t)r * cols + c] = fp8_encode((float)x[(size_t)r * cols + c] * s, fmt);
    }
}

// the transpose with 128x128 blocks: qt = quantize_128x128(x^T). A block of x^T is the transpose of a block
// of x (same amax), so each thread block takes one block of x as above and writes its codes transposed.
// Grid (ceil(cols/128), ceil(rows/128)); scales (ceil(cols/128), ceil(rows/128)) are x^T's.
template <typename Tin>
__global__ void fp8_quantize_transpose_128x128_kernel(uint8_t* qt,      // (cols, rows)
                                                      float* scales,    // (ceil(cols/128), ceil(rows/128))
                                                      const Tin* x,     // (rows, cols)
                                                      int rows, int cols, int fmt) {
    int r0 = blockIdx.y * FP8_BLOCK, c0 = blockIdx.x * FP8_BLOCK;
    float s = fp8_tile_scale(fp8_amax_128x128(x, rows, cols, r0, c0), fmt);
    if (threadIdx.x == 0) scales[(size_t)blockIdx.x * gridDim.y + blockIdx.y] = s;
    for (int i = threadIdx.x; i < FP8_BLOCK * FP8_BLOCK; i += blockDim.x) {
        int c = c0 + i / FP8_BLOCK, r = r0 + i % FP8_BLOCK;  // consecutive threads write consecutive qt
        if (r < rows && c < cols) qt[(size_t)c * rows + r] = fp8_encode((float)x[(size_t)r * cols + c] * s, fmt);
    }
}

static void fp8_quantize_1x128(uint8_t* q, float* scales, const float* x, int rows, int cols, int fmt,
                               cudaStream_t stream) {  // q (rows, cols), scales (rows, ceil(cols/128)), x (rows, cols) device
    size_t tiles = (size_t)rows * ((cols + FP8_BLOCK - 1) / FP8_BLOCK);
    LAUNCH(fp8_quantize_1x128_kernel<float>, dim3((unsigned)((tiles + 7) / 8)), dim3(256), 0, stream, q, scales, x,
           rows, cols, fmt);
}
static void fp8_quantize_transpose_1x128(uint8_t* qt, float* scales, const float* x, int rows, int cols, int fmt,
                                         cudaStream_t stream) {  // qt (cols, rows), scales (cols, ceil(rows/128)), x (rows, cols) device
    dim3 grid((cols + 31) / 32, (rows + FP8_BLOCK - 1) / FP8_BLOCK);
    LAUNCH(fp8_quantize_transpose_1x128_kernel<float>, grid, dim3(32, 8), 0, stream, qt, scales, x, rows, cols, fmt);
}
static void fp8_quantize_128x128(uint8_t* q, float* scales, const float* x, int rows, int cols, int fmt,
                                 cudaStream_t stream) {  // q (rows, cols), scales (ceil(rows/128), ceil(cols/128)), x device
    dim3 grid((cols + FP8_BLOCK - 1) / FP8_BLOCK, (rows + FP8_BLOCK - 1) / FP8_BLOCK);
    LAUNCH(fp8_quantize_128x128_kernel<float>, grid, dim3(256), 0, stream, q, scales, x, rows, cols, fmt);
}

// --- MX scaling ---

// one warp per 32-element block, one element per lane. Grid: rows * ceil(cols/32) warps, 8 a block.
template <typename Tin>
__global__ void fp8_quantize_mx_kernel(uint8_t* q,         // (rows, cols)
                                       uint8_t* scales,    // (rows, ceil(cols/32)) E8M0
                                       const Tin* x,       // (rows, cols)
                                       int rows, int cols, int fmt) {
    int nb = (cols + FP8_MX_BLOCK - 1) / FP8_MX_BLOCK;
    size_t blk = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (blk >= (size_t)rows * nb) return;  // a whole warp leaves together
    int r = (int)(blk / nb), c = (int)(blk % nb) * FP8_MX_BLOCK + lane;
    float v = c < cols ? (float)x[(size_t)r * cols + c] : 0.0f;
    uint8_t sc = fp8_mx_scale_code(warp_reduce(fabsf(v), Fp8NanMax()), fmt);
    if (lane == 0) scales[blk] = sc;
    if (c < cols) q[(size_t)r * cols + c] = fp8_mx_encode(v, sc, fmt);
}

// the transpose with MX blocks: qt = quantize_mx(x^T): 32 consecutive rows of one column of x form a
// block. One warp per block, one element per lane (lane = row; the loads stride by cols).
// Grid: cols * ceil(rows/32) warps, 8 a block.
template <typename Tin>
__global__ void fp8_quantize_transpose_mx_kernel(uint8_t* qt,       // (cols, rows)
                                                 uint8_t* scales,   // (cols, ceil(rows/32)) E8M0
                                                 const Tin* x,      // (rows, cols)
                                                 int rows, int cols, int fmt) {
    int nb = (rows + FP8_MX_BLOCK - 1) / FP8_MX_BLOCK;
    size_t blk = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (blk >= (size_t)cols * nb) return;  // a whole warp leaves together
    int c = (int)(blk / nb), r = (int)(blk % nb) * FP8_MX_BLOCK + lane;
    float v = r < rows ? (float)x[(size_t)r * cols + c] : 0.0f;
    uint8_t sc = fp8_mx_scale_code(warp_reduce(fabsf(v), Fp8NanMax()), fmt);
    if (lane == 0) scales[blk] = sc;
    if (r < rows) qt[(size_t)c * rows + r] = fp8_mx_encode(v, sc, fmt);
}

static void fp8_quantize_mx(uint8_t* q, uint8_t* scales, const float* x, int rows, int cols, int fmt,
                            cudaStream_t stream) {  // q (rows, cols), scales (rows, ceil(cols/32)), x (rows, cols) device
    size_t blocks = (size_t)rows * ((cols + FP8_MX_BLOCK - 1) / FP8_MX_BLOCK);
    LAUNCH(fp8_quantize_mx_kernel<float>, dim3((unsigned)((blocks + 7) / 8)), dim3(256), 0, stream, q, scales, x,
           rows, cols, fmt);
}

#endif  // LLM_HAS_KERNELS
