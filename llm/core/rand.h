// rand.h: the trainer's one random number generator, small and seedable, so that initialisation,
// shuffling and sampling are reproducible from --seed and its state can be saved in a checkpoint.
// splitmix64 (Steele, Lea, Flood 2014) for 64-bit words; Box-Muller for normals.
#pragma once
#include <stdint.h>
#include <math.h>

typedef struct {
    uint64_t state;
} Rng;

static inline void rng_init(Rng* r, uint64_t seed) { r->state = seed; }

static inline uint64_t rng_u64(Rng* r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// uniform in [0, 1) with 24 random bits
static inline float rng_f32(Rng* r) { return (float)(rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

// uniform in [0, 1) with 53 random bits
static inline double rng_f64(Rng* r) { return (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

// n samples of N(mean, std^2) by Box-Muller
static inline void rng_normal(Rng* r, float* out, size_t n, float mean, float std) {
    for (size_t i = 0; i < n; i += 2) {
        double u1 = rng_f64(r), u2 = rng_f64(r);
        if (u1 < 1e-300) u1 = 1e-300;
        double rad = sqrt(-2.0 * log(u1));
        out[i] = (float)(mean + std * rad * cos(2.0 * M_PI * u2));
        if (i + 1 < n) out[i + 1] = (float)(mean + std * rad * sin(2.0 * M_PI * u2));
    }
}
