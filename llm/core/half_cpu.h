// half_cpu.h: the 16-bit storage types of the CPU build (make train_gpt_cpu PRECISION=BF16 or FP16):
// bf16_cpu and fp16_cpu hold the bits of a bfloat16 / IEEE binary16 number, convert from float
// rounding exactly as the CUDA toolkit's __float2bfloat16 / __float2half do (round to nearest, ties
// to even; NaN becomes the canonical quiet NaN 0x7fff; overflow goes to inf; subnormals exact), and
// to float exactly. The ops of the CPU build compute in FP32: their launchers take FP32 views of the
// floatX arrays (f32_in / f32_out) and round each output once into floatX (f32_store), as a CUDA
// kernel rounds its FP32 result once when it stores it. In the FP32 CPU build the views are the
// arrays themselves (no copy, nothing rounded).
// Also here: the round-toward-zero conversions that stochastic rounding (llm/ops/adamw.cuh) starts from.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <type_traits>

static inline uint32_t half_cpu_f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float half_cpu_u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

// ----------------------------------------------------------------------------
// bfloat16: the top 16 bits of an FP32 word

// float -> bf16 bits, round to nearest even (rtz != 0: toward zero). NaN -> 0x7fff (quiet).
static inline uint16_t bf16_bits_from_float(float f, int rtz = 0) {
    uint32_t u = half_cpu_f2u(f);
    // ties to even: adding 0x7fff plus the kept part's lowest bit carries into the kept 16 bits exactly
    // when the dropped 16 are above half, or at half with an odd kept part; a carry out of the mantissa
    // steps the exponent (to inf above the largest finite). Branch-free, so conversion loops vectorize.
    uint32_t r = rtz ? u : u + 0x7fffu + ((u >> 16) & 1u);
    return ((u & 0x7fffffffu) > 0x7f800000u) ? (uint16_t)0x7fffu : (uint16_t)(r >> 16);
}
static inline float bf16_bits_to_float(uint16_t h) { return half_cpu_u2f((uint32_t)h << 16); }

// ----------------------------------------------------------------------------
// binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; subnormals down to 2^-24

// float -> fp16 bits, round to nearest even (rtz != 0: toward zero). NaN -> 0x7fff (quiet); values
// that round past 65504 become inf (toward zero: they stay 65504).
static inline uint16_t fp16_bits_from_float(float f, int rtz = 0) {
    uint32_t u = half_cpu_f2u(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7fffu;
    if (a == 0x7f800000u) return sign | 0x7c00u;
    int e = (int)(a >> 23) - 127;                    // unbiased exponent (float subnormals: -127, tiny anyway)
    uint32_t M = (a & 0x7fffffu) | 0x800000u;         // 24-bit significand, value = M * 2^(e-23)
    uint32_t h, rem, halfway;
    if (e > 15) {                                     // at least 2^16: past the largest finite
        return rtz ? (sign | 0x7bffu) : (sign | 0x7c00u);
    } else if (e >= -14) {                            // a normal binary16: keep 10 of the 23 mantissa bits
        h = ((uint32_t)(e + 15) << 10) | ((a & 0x7fffffu) >> 13);
        rem = a & 0x1fffu;
        halfway = 0x1000u;
    } else {                                          // subnormal: units of 2^-24, M * 2^(e+1) of them
        int shift = -e - 1;                           // >= 14
        if (shift > 25) return sign;                  // below 2^-26: rounds to zero either way
        h = M >> shift;
        rem = M & ((1u << shift) - 1u);
        halfway = 1u << (shift - 1);
    }
    if (!rtz && (rem > halfway || (rem == halfway && (h & 1u)))) h++;  // carries step the exponent
    if (rtz && h >= 0x7c00u) h = 0x7bffu;
    return sign | (uint16_t)h;
}
static inline float fp16_bits_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return half_cpu_u2f(sign | 0x7f800000u | (m << 13));  // inf, NaN (payload kept)
    if (e == 0) {                                                        // zero, subnormal: m * 2^-24
        float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return half_cpu_u2f(sign | ((e + 112u) << 23) | (m << 13));
}

// ----------------------------------------------------------------------------
// n values at a time: the conversions above, bit for bit, 8 lanes at a time with the F16C instructions
// (vcvtph2ps, vcvtps2ph: every x86 CPU since 2012; -march=native turns them on where the CPU has them).
// Both round as above (to nearest even, subnormals exact, overflow to inf); only NaN differs (F16C
// quiets it and keeps part of its payload, the scalar conversions give 0x7fff / keep the payload), so a
// block of 8 with a NaN in it goes through the scalar code. Without F16C: the scalar code. The FP16 CPU
// build spent 43% of its step in these conversions one value at a time (perf, d2 C=128 B=8 T=64).
#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#define HALF_CPU_F16C 1
#else
#define HALF_CPU_F16C 0
#endif

static inline void fp16_bits_to_float_n(const uint16_t* h /*(n)*/, float* f /*(n)*/, size_t n) {
    size_t i = 0;
#if HALF_CPU_F16C
    for (; i + 8 <= n; i += 8) {
        __m128i hv = _mm_loadu_si128((const __m128i*)(h + i));
        // a NaN: exponent all ones, mantissa not zero, i.e. (h & 0x7fff) > 0x7c00
        __m128i a = _mm_and_si128(hv, _mm_set1_epi16(0x7fff));
        if (_mm_movemask_epi8(_mm_cmpgt_epi16(a, _mm_set1_epi16(0x7c00))) != 0) {
            for (size_t j = i; j < i + 8; j++) f[j] = fp16_bits_to_float(h[j]);
            continue;
        }
        _mm256_storeu_ps(f + i, _mm256_cvtph_ps(hv));
    }
#endif
    for (; i < n; i++) f[i] = fp16_bits_to_float(h[i]);
}

static inline void fp16_bits_from_float_n(const float* f /*(n)*/, uint16_t* h /*(n)*/, size_t n) {
    size_t i = 0;
#if HALF_CPU_F16C
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(f + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
            for (size_t j = i; j < i + 8; j++) h[j] = fp16_bits_from_float(f[j]);
            continue;
        }
        _mm_storeu_si128((__m128i*)(h + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
#endif
    for (; i < n; i++) h[i] = fp16_bits_from_float(f[i]);
}

// ----------------------------------------------------------------------------
// the storage types: a float goes in rounded to nearest even, comes out exactly

struct bf16_cpu {
    uint16_t bits;
    bf16_cpu() = default;
    bf16_cpu(float f) : bits(bf16_bits_from_float(f)) {}
    operator float() const { return bf16_bits_to_float(bits); }
    static bf16_cpu from_bits(uint16_t b) { bf16_cpu x; x.bits = b; return x; }
    bf16_cpu& operator+=(float x) { *this = bf16_cpu((float)*this + x); return *this; }
    bf16_cpu& operator*=(float x) { *this = bf16_cpu((float)*this * x); return *this; }
};

struct fp16_cpu {
    uint16_t bits;
    fp16_cpu() = default;
    fp16_cpu(float f) : bits(fp16_bits_from_float(f)) {}
    operator float() const { return fp16_bits_to_float(bits); }
    static fp16_cpu from_bits(uint16_t b) { fp16_cpu x; x.bits = b; return x; }
    fp16_cpu& operator+=(float x) { *this = fp16_cpu((float)*this + x); return *this; }
    fp16_cpu& operator*=(float x) { *this = fp16_cpu((float)*this * x); return *this; }
};
static_assert(sizeof(bf16_cpu) == 2 && sizeof(fp16_cpu) == 2, "16-bit storage types");

// ----------------------------------------------------------------------------
// stochastic rounding of an FP32 value into a 16-bit type, from 32 random bits (llm/ops/adamw.cuh draws
// them from (seed, element index)); the rule of each type is the one of the kernels' adamw_round.

// bf16: add 16 random bits to the 16 that are dropped, then truncate; inf and NaN converted plainly
static inline bf16_cpu bf16_round_stochastic(float x, unsigned int bits) {
    uint32_t u = half_cpu_f2u(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return bf16_cpu(x);
    u += bits & 0xffffu;
    return bf16_cpu::from_bits((uint16_t)(u >> 16));
}

// fp16: t = x truncated toward zero, a = the next fp16 away from zero; a with probability
// (|x| - |t|) / |a - t|, the comparison against u = (bits >> 8) * 2^-24 in [0, 1). Inf, NaN and |x|
// above the largest finite fp16 (65504) are converted plainly.
static inline fp16_cpu fp16_round_stochastic(float x, unsigned int bits) {
    float ax = fabsf(x);
    if (!(ax <= 65504.0f)) return fp16_cpu(x);  // also NaN
    uint16_t tb = fp16_bits_from_float(x, 1);
    fp16_cpu t = fp16_cpu::from_bits(tb), a = fp16_cpu::from_bits((uint16_t)(tb + 1));  // +1 ulp in magnitude
    float tf = (float)t;
    float ulp = fabsf((float)a - tf);
    float u = (float)(bits >> 8) * (1.0f / 16777216.0f);
    return (ax - fabsf(tf) > u * ulp) ? a : t;
}

// the rule of each storage type, for templates (float: the value itself)
template <class T> static inline T round_stochastic(float x, unsigned int bits);
template <> inline float round_stochastic<float>(float x, unsigned int bits) { (void)bits; return x; }
template <> inline bf16_cpu round_stochastic<bf16_cpu>(float x, unsigned int bits) { return bf16_round_stochastic(x, bits); }
template <> inline fp16_cpu round_stochastic<fp16_cpu>(float x, unsigned int bits) { return fp16_round_stochastic(x, bits); }

// ----------------------------------------------------------------------------
// FP32 views of storage arrays, for ops that compute in FP32 (see the top of this file).
// T is float (the view is the array) or a 16-bit type (the view is a malloc'ed FP32 copy).

// The FP32 rooms come from a small pool of released buffers (the ops are called from one host thread):
// a fresh malloc of a large buffer is an mmap whose pages fault in one by one, ~15% of a step of a
// model with GPT-2's vocabulary. Each buffer carries its capacity in a 64-byte header. The pool keeps
// at most F32_POOL buffers (the largest ones released); it is host scratch, outside the tagged
// allocator's model-state counts.
#define F32_POOL 8
struct F32Pool { float* buf[F32_POOL]; size_t cap[F32_POOL]; };
static inline F32Pool* f32_pool(void) { static F32Pool pool; return &pool; }
static inline size_t f32_capacity(const float* p) { size_t c; memcpy(&c, (const char*)p - 64, sizeof(c)); return c; }
static inline float* f32_alloc(size_t n) {
    F32Pool* pl = f32_pool();
    int best = -1;  // the smallest pooled buffer that holds n
    for (int i = 0; i < F32_POOL; i++) {
        if (pl->buf[i] != NULL && pl->cap[i] >= n && (best < 0 || pl->cap[i] < pl->cap[best])) best = i;
    }
    if (best >= 0) { float* p = pl->buf[best]; pl->buf[best] = NULL; return p; }
    char* raw = (char*)malloc(64 + (n > 0 ? n : 1) * sizeof(float));
    if (raw == NULL) { fprintf(stderr, "error: out of host memory (%zu floats) (%s:%d)\n", n, __FILE__, __LINE__); exit(1); }
    memcpy(raw, &n, sizeof(n));
    return (float*)(raw + 64);
}
static inline void f32_release(float* p) {
    F32Pool* pl = f32_pool();
    size_t c = f32_capacity(p);
    int slot = -1;  // an empty slot, else the smallest buffer if it is smaller than this one
    for (int i = 0; i < F32_POOL; i++) {
        if (pl->buf[i] == NULL) { slot = i; break; }
        if (slot < 0 || pl->cap[i] < pl->cap[slot]) slot = i;
    }
    if (pl->buf[slot] != NULL) {
        if (pl->cap[slot] >= c) { free((char*)p - 64); return; }
        free((char*)pl->buf[slot] - 64);
    }
    pl->buf[slot] = p;
    pl->cap[slot] = c;
}

// an FP32 copy of x (n), or x itself when T is float; NULL for NULL
template <class T> static inline float* f32_in(const T* x, size_t n) {
    if constexpr (std::is_same<T, float>::value) {
        (void)n;
        return (float*)x;
    } else {
        if (x == NULL) return NULL;
        float* p = f32_alloc(n);
        if constexpr (std::is_same<T, fp16_cpu>::value) {
            #pragma omp parallel for if (n > 65536)
            for (size_t b = 0; b < n; b += 4096) fp16_bits_to_float_n(&x[b].bits, p + b, n - b < 4096 ? n - b : 4096);
        } else {
            #pragma omp parallel for simd if (n > 65536)
            for (size_t i = 0; i < n; i++) p[i] = (float)x[i];
        }
        return p;
    }
}
// FP32 room for an output the op overwrites (contents undefined), or x itself when T is float
template <class T> static inline float* f32_out(T* x, size_t n) {
    if constexpr (std::is_same<T, float>::value) {
        (void)n;
        return x;
    } else {
        if (x == NULL) return NULL;
        return f32_alloc(n);
    }
}
// dst (n) = p rounded to T (once, to nearest even), and p freed; nothing when T is float
template <class T> static inline void f32_store(T* dst, float* p, size_t n) {
    if constexpr (std::is_same<T, float>::value) {
        (void)dst; (void)p; (void)n;
    } else {
        if (dst == NULL) return;
        if constexpr (std::is_same<T, fp16_cpu>::value) {
            #pragma omp parallel for if (n > 65536)
            for (size_t b = 0; b < n; b += 4096) fp16_bits_from_float_n(p + b, &dst[b].bits, n - b < 4096 ? n - b : 4096);
        } else {
            #pragma omp parallel for simd if (n > 65536)
            for (size_t i = 0; i < n; i++) dst[i] = T(p[i]);
        }
        f32_release(p);
    }
}
// frees a view taken with f32_in (nothing when T is float)
template <class T> static inline void f32_free(const T* x, const float* p) {
    if constexpr (std::is_same<T, float>::value) {
        (void)x; (void)p;
    } else {
        if (x != NULL) f32_release((float*)p);
    }
}
