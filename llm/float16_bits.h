// float16_bits.h: BF16 and FP16 values as their 16 bits on the host, without CUDA headers (the CPU
// build has none): llm.c's version-5 checkpoints (BF16), the resumable state's 16-bit parameters
// (llm/checkpoint.h) and 16-bit buffers reduced over MPI (llm/comm.h).
#pragma once
#include <stdint.h>
#include <string.h>
#include <math.h>

// BF16 (round to nearest even), for llm.c's version-5 checkpoints and BF16 buffers over MPI

static inline uint16_t f32_to_bf16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float bf16_bits_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// FP16 on the host without CUDA headers, for the resumable state of FP16 builds: 1 sign, 5 exponent
// (bias 15), 10 mantissa bits; below 2^-14 subnormal, spaced 2^-24. Round to nearest even
// (nearbyintf in the default rounding mode), 65520 and above to inf, NaN stays NaN.
static inline uint16_t f32_to_f16_bits(float x) {
    uint16_t sign = signbit(x) ? 0x8000u : 0u;
    float a = fabsf(x);
    if (isnan(x)) return (uint16_t)(sign | 0x7e00u);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00u);
    if (a < 0x1p-14f) return (uint16_t)(sign | (uint16_t)nearbyintf(a * 0x1p24f));  // (1024: the smallest normal)
    int k;
    frexpf(a, &k);  // a = f 2^k, f in [0.5, 1): the exponent is k - 1
    int e = k - 1;
    uint32_t mant = (uint32_t)nearbyintf(ldexpf(a, 10 - e));  // in [1024, 2048]; 2048 carries into the exponent
    return (uint16_t)(sign | ((uint32_t)((e + 15) << 10) + (mant - 1024u)));
}

static inline float f16_bits_to_f32(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    float a = e == 0 ? ldexpf((float)m, -24) : (e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(1024 + m), e - 25));
    return (h & 0x8000u) ? -a : a;
}
