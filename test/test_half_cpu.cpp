// test_half_cpu.cpp: llm/core/half_cpu.h's BF16 and FP16 conversions against the CUDA toolkit's own
// (the host code of cuda_bf16.h / cuda_fp16.h, compiled here by g++), bit for bit:
//   decode: every one of the 2^16 bit patterns of each type (NaNs: both NaN);
//   encode: for every 16-bit pattern, the float it stands for, the midpoints to its neighbours and one
//           float ulp either side of them (every tie and every rounding boundary), plus 2^24 floats
//           spread over all exponents (every 256th bit pattern) and the specials;
//   round toward zero: |result| <= |x| and the next 16-bit value away from zero is > |x| (finite x);
//   stochastic rounding: the two neighbours only, and the mean over many draws within 4 sigma of x.
// Build: make build/test_half_cpu (needs only the toolkit's headers; no GPU, no CUDA runtime).
// Built with -march=native, as the CPU trainers are: the 8-at-a-time conversions run on F16C where the CPU has it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>
#include <math.h>
#include <float.h>
#include <vector>
#include "../llm/core/half_cpu.h"
#include "../llm/core/usage.h"

static int fails = 0, passes = 0;
static void check(bool ok, const char* what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) fails++; else passes++;
}
static uint16_t cuda_bf16_bits(float x) { __nv_bfloat16 h = __float2bfloat16(x); uint16_t b; memcpy(&b, &h, 2); return b; }
static uint16_t cuda_fp16_bits(float x) { __half h = __float2half(x); uint16_t b; memcpy(&b, &h, 2); return b; }
static float cuda_bf16_float(uint16_t b) { __nv_bfloat16 h; memcpy(&h, &b, 2); return __bfloat162float(h); }
static float cuda_fp16_float(uint16_t b) { __half h; memcpy(&h, &b, 2); return __half2float(h); }
static bool same_float(float a, float b) { return (isnan(a) && isnan(b)) || half_cpu_f2u(a) == half_cpu_f2u(b); }

// the floats that test every rounding decision: for each 16-bit value (decoded by dec), itself, the
// midpoints to its neighbours, and one float ulp either side of each
static std::vector<float> boundary_floats(float (*dec)(uint16_t)) {
    std::vector<float> xs;
    for (uint32_t b = 0; b < 0x10000u; b++) {
        float v = dec((uint16_t)b), w = dec((uint16_t)(b + 1));
        if (!isfinite(v)) continue;
        xs.push_back(v);
        if (isfinite(w) && ((b & 0x7fffu) != 0x7fffu)) {
            float mid = (float)(((double)v + (double)w) / 2);  // exact: one more bit than the 16-bit type
            xs.push_back(mid);
            xs.push_back(nextafterf(mid, INFINITY));
            xs.push_back(nextafterf(mid, -INFINITY));
        }
    }
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX, FLT_MIN, 1e-45f, -1e-45f,
                              65504.0f, 65519.99f, 65520.0f, 65536.0f, -65520.0f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 3.0e38f,
                              3.3895314e38f, 3.3961776e38f};
    for (float s : specials) xs.push_back(s);
    for (uint64_t u = 0; u < 0x100000000ull; u += 256) xs.push_back(half_cpu_u2f((uint32_t)u + (uint32_t)(u >> 20) % 256));
    return xs;
}

static const char* USAGE =
    "(no arguments)\n"
    "Tests llm/core/half_cpu.h's BF16 and FP16 conversions bit for bit against the CUDA toolkit's (decode of\n"
    "every pattern, encode at every rounding boundary, round toward zero, stochastic rounding).\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    // decode, all patterns
    int bad_bf = 0, bad_fp = 0;
    for (uint32_t b = 0; b < 0x10000u; b++) {
        bad_bf += !same_float(bf16_bits_to_float((uint16_t)b), cuda_bf16_float((uint16_t)b));
        bad_fp += !same_float(fp16_bits_to_float((uint16_t)b), cuda_fp16_float((uint16_t)b));
    }
    char msg[256];
    snprintf(msg, sizeof(msg), "bf16 -> float: all 65536 patterns equal cuda_bf16.h's (%d differ)", bad_bf);
    check(bad_bf == 0, msg);
    snprintf(msg, sizeof(msg), "fp16 -> float: all 65536 patterns equal cuda_fp16.h's (%d differ)", bad_fp);
    check(bad_fp == 0, msg);

    // encode, round to nearest even
    for (int type = 0; type < 2; type++) {
        std::vector<float> xs = boundary_floats(type == 0 ? bf16_bits_to_float : fp16_bits_to_float);
        size_t bad = 0;
        float first = 0;
        for (float x : xs) {
            uint16_t mine = type == 0 ? bf16_cpu(x).bits : fp16_cpu(x).bits;
            uint16_t ref = type == 0 ? cuda_bf16_bits(x) : cuda_fp16_bits(x);
            if (mine != ref) { if (bad++ == 0) first = x; }
        }
        snprintf(msg, sizeof(msg), "float -> %s (nearest even): %zu floats (every tie and boundary, 2^24 spread, specials) "
                 "equal %s's bit for bit (%zu differ, first %.9g)", type == 0 ? "bf16" : "fp16", xs.size(),
                 type == 0 ? "__float2bfloat16" : "__float2half", bad, first);
        check(bad == 0, msg);
        // toward zero: |t| <= |x| < |next away|, against the decoded values
        size_t badz = 0;
        for (float x : xs) {
            if (!isfinite(x) || (type == 1 && fabsf(x) >= 65520.0f)) continue;
            uint16_t t = type == 0 ? bf16_bits_from_float(x, 1) : fp16_bits_from_float(x, 1);
            float tf = type == 0 ? bf16_bits_to_float(t) : fp16_bits_to_float(t);
            float af = type == 0 ? bf16_bits_to_float((uint16_t)(t + 1)) : fp16_bits_to_float((uint16_t)(t + 1));
            bool ok = fabsf(tf) <= fabsf(x) && (fabsf(af) > fabsf(x) || (type == 1 && fabsf(x) >= 65504.0f)) &&
                      (tf == 0.0f || signbit(tf) == signbit(x));
            if (!ok) badz++;
        }
        snprintf(msg, sizeof(msg), "float -> %s toward zero: the neighbour at or below |x| (%zu wrong)", type == 0 ? "bf16" : "fp16", badz);
        check(badz == 0, msg);
    }

    // stochastic rounding: neighbours only, unbiased (4 sigma over 2^16 draws)
    const float xs[] = {1.00390625f + 1e-3f, -3.14159f, 0.1f, 1e-6f, -2.5e-7f, 1000.3f, 6.1e-5f, 3e-8f};
    int bad_sr = 0;
    for (int type = 0; type < 2; type++) {
        for (float x : xs) {
            if (type == 0 && fabsf(x) < 1e-30f) continue;
            float t = type == 0 ? bf16_bits_to_float(bf16_bits_from_float(x, 1)) : fp16_bits_to_float(fp16_bits_from_float(x, 1));
            uint16_t tb = type == 0 ? bf16_bits_from_float(x, 1) : fp16_bits_from_float(x, 1);
            float a = type == 0 ? bf16_bits_to_float((uint16_t)(tb + 1)) : fp16_bits_to_float((uint16_t)(tb + 1));
            double sum = 0;
            const int n = 65536;
            for (int i = 0; i < n; i++) {
                unsigned int bits = (unsigned int)i * 2654435761u;  // equidistributed over 32 bits
                float r = type == 0 ? (float)bf16_round_stochastic(x, bits) : (float)fp16_round_stochastic(x, bits);
                if (r != t && r != a) bad_sr++;
                sum += r;
            }
            double p = fabs((double)x - t) / fabs((double)a - t), sigma = fabs((double)a - t) * sqrt(p * (1 - p) / n);
            if (fabs(sum / n - x) > 4 * sigma + 1e-3 * fabs((double)a - t)) {
                printf("     SR %s of %.9g: mean %.9g, expected within %.3g\n", type == 0 ? "bf16" : "fp16", x, sum / n, 4 * sigma);
                bad_sr++;
            }
        }
    }
    snprintf(msg, sizeof(msg), "stochastic rounding (bf16, fp16): only the two neighbours, the mean unbiased (%d wrong)", bad_sr);
    check(bad_sr == 0, msg);
    // the bf16 rule is the kernels' (llm/ops/adamw.cuh adamw_round<__nv_bfloat16>): add the low 16 random bits, truncate
    int bad_rule = 0;
    for (uint32_t i = 0; i < 100000; i++) {
        float x = half_cpu_u2f(0x3f800000u + i * 977u) * ((i & 1) ? -1.0f : 1.0f);
        unsigned int bits = i * 2246822519u;
        uint32_t u = half_cpu_f2u(x) + (bits & 0xffffu);
        if (bf16_round_stochastic(x, bits).bits != (uint16_t)(u >> 16)) bad_rule++;
    }
    check(bad_rule == 0, "bf16 stochastic rounding = add the low 16 random bits to the float's bits, keep the top 16");
    // the n-at-a-time conversions (F16C where the CPU has it) equal the scalar ones bit for bit, NaNs too;
    // from an odd start and with a length not a multiple of 8, so the tails and unaligned loads run
    {
        std::vector<uint16_t> hs(0x10000u), back;
        for (uint32_t b = 0; b < 0x10000u; b++) hs[b] = (uint16_t)b;
        std::vector<float> fs(hs.size());
        size_t bad = 0;
        for (size_t start : {(size_t)0, (size_t)3}) {
            fp16_bits_to_float_n(hs.data() + start, fs.data() + start, hs.size() - start);
            for (size_t i = start; i < hs.size(); i++) bad += half_cpu_f2u(fs[i]) != half_cpu_f2u(fp16_bits_to_float(hs[i]));
        }
        snprintf(msg, sizeof(msg), "fp16 -> float, 8 at a time (%s): all 65536 patterns equal the scalar conversion's bits (%zu differ)",
                 HALF_CPU_F16C ? "F16C" : "no F16C: scalar", bad);
        check(bad == 0, msg);
        std::vector<float> xs = boundary_floats(fp16_bits_to_float);
        for (uint32_t b = 0x7c01u; b < 0x7c40u; b++) xs.push_back(half_cpu_u2f(0x7f800000u | (b << 13)));  // NaN payloads
        back.resize(xs.size());
        bad = 0;
        for (size_t start : {(size_t)0, (size_t)5}) {
            fp16_bits_from_float_n(xs.data() + start, back.data() + start, xs.size() - start);
            for (size_t i = start; i < xs.size(); i++) bad += back[i] != fp16_bits_from_float(xs[i]);
        }
        snprintf(msg, sizeof(msg), "float -> fp16, 8 at a time (%s): %zu floats at every rounding boundary equal the scalar "
                 "conversion's bits (%zu differ)", HALF_CPU_F16C ? "F16C" : "no F16C: scalar", xs.size(), bad);
        check(bad == 0, msg);
    }
    printf("test_half_cpu: %d passed, %d failed, 0 skipped\n", passes, fails);
    return fails ? 1 : 0;
}
