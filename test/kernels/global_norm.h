// test/kernels/global_norm.h: global_norm_squared (*out += sum of squares) against
// global_norm_squared_cpu on the same floatX values, and both against a float64 sum of squares.
//
// *out starts at a random defined value (the launcher accumulates); the check is initial + delta.
// Every square of a floatX value is exact in float64 (and in FP32 for bf16: 8-bit significand, square
// 16 bits), and a float64 sum of up to 2.5e6 of them is off by < 1e-9 relative: the float64 value is
// the exact one for these bounds. All terms are positive, so a float sum's relative error is at most
// u = 2^-24 times the number of additions any term goes through (its depth), plus u for an FP32 square.
// - kernel vs float64: the kernel's depth (global_norm.cuh) is at most the terms one pass-1 thread adds
//   in sequence (x128::size times its grid-stride chunks, ceil(n / x128::size / (grid * 512)), plus a head
//   and a tail element), 10 levels of block_reduce_sum, the partials one pass-2 thread adds
//   (ceil(grid / 1024)), 10 more levels, and the add to *out; grid = min(blocks for one chunk per
//   thread, llm_ctx.norm_grid_cap). Bound (depth + 2) u |want|: ~2e-6 relative at most here, where
//   leaving out one element of ~1 in 1e5 moves the result by 1e-5 relative. It is the worst case
//   (every rounding of the same sign); observed up to ~0.05 of it.
// - reference vs float64: float sums over chunks of 4096 terms (vectorized, lanes unknown), added in
//   double: kc_sum_err(4096) = 8 sqrt(4096) u = 3e-5 relative (probabilistic; kernel_check.h).
// - kernel vs reference: rtol 1e-5 in both builds, as before. The reference's error dominates (up to
//   ~512 terms in sequence per SIMD lane: observed up to 1.3e-6 relative, ~8x below 1e-5; its
//   probabilistic bound 8 sqrt(512) u = 1.1e-5); the float64 checks carry the tight bound.
// Also: the result does not depend on the thread order or the run (same bits twice), and pointers off
// 16-byte alignment (the head elements before the first aligned chunk) are summed too.
#pragma once
#include "../kernel_check.h"
#include "../../llm/ops/global_norm.cuh"

// the kernel's summation depth for n values (see above)
static double global_norm_depth(size_t n) {
    size_t chunks = (n + x128::size - 1) / x128::size;
    size_t want = (chunks + GLOBAL_NORM_BLOCK - 1) / GLOBAL_NORM_BLOCK;
    size_t grid = want < (size_t)llm_ctx.norm_grid_cap ? want : (size_t)llm_ctx.norm_grid_cap;
    size_t per_thread = (chunks + grid * GLOBAL_NORM_BLOCK - 1) / (grid * GLOBAL_NORM_BLOCK);
    return (double)(x128::size * per_thread + 2 + 10 + (grid + 1023) / 1024 + 10 + 1);
}

// got (the kernel's result) and the reference's against the float64 sum init + sum of squares
static void global_norm_check_f64(const char* what, float got, float ref, double init,
                                  const std::vector<const std::vector<float>*>& parts, size_t offset) {
    double want = init, depth = 0.0;
    size_t largest = 0;
    for (const std::vector<float>* p : parts) {
        for (size_t i = offset; i < p->size(); i++) want += (double)(*p)[i] * (double)(*p)[i];
        largest = std::max(largest, p->size() - offset);
        depth += global_norm_depth(p->size() - offset);  // sequential calls: their depths add up
    }
    char w[160];
    snprintf(w, sizeof(w), "%s vs float64", what);
    kc_check_bound(w, std::vector<float>(1, got), std::vector<double>(1, want),
                   std::vector<double>(1, (depth + 2.0) * KC_U32 * want));
    snprintf(w, sizeof(w), "%s: global_norm_squared_cpu vs float64", what);
    kc_check_bound(w, std::vector<float>(1, ref), std::vector<double>(1, want),
                   std::vector<double>(1, kc_sum_err((double)std::min(largest, (size_t)4096), want) + 2.0 * KC_U32 * want));
}

static void global_norm_case(size_t n, size_t offset) {
    std::vector<float> x = kc_randn(n + offset, 1.0f);
    floatX* d_x = kc_upload(x);
    float init = 0.25f + rng_f32(&g_rng);  // a defined starting value: the launcher adds to it
    float* d_out = kc_upload_raw(std::vector<float>(1, init));
    global_norm_squared(d_out, d_x + offset, n, 0);
    float got = kc_download_f32(d_out, 1)[0];
    // again from the same start: a deterministic reduction gives the same bits
    copy_to_device(d_out, &init, sizeof(float));
    global_norm_squared(d_out, d_x + offset, n, 0);
    float again = kc_download_f32(d_out, 1)[0];

    float ref = global_norm_squared_cpu(x.data() + offset, n);
    float want = (float)((double)init + (double)ref);
    char what[128];
    snprintf(what, sizeof(what), "global_norm_squared n=%zu offset=%zu", n, offset);
    kc_compare(what, std::vector<float>(1, got), std::vector<float>(1, want), 0.0f, 1e-5f, 0.0f, 1e-5f);
    global_norm_check_f64(what, got, want, init, {&x}, offset);
    check(memcmp(&got, &again, sizeof(float)) == 0, "global_norm_squared n=%zu offset=%zu deterministic (%.9g, %.9g)",
          n, offset, got, again);
    device_free(d_x);
    device_free(d_out);
}

static void test_global_norm(void) {
    const size_t ns[] = {1, 3, 1000, 100003};
    for (int k = 0; k < 4; k++) global_norm_case(ns[k], 0);
    global_norm_case(3, 1);        // misaligned, shorter than the head
    global_norm_case(1000, 1);     // head, whole chunks, tail
    global_norm_case(100003, 3);
    global_norm_case(2500001, 0);  // more chunks than the capped grid has threads: the grid-stride loop
    // two tensors into one accumulator, as the optimizer does across shards
    {
        std::vector<float> a = kc_randn(777, 1.0f), b = kc_randn(5000, 1.0f);
        floatX* da = kc_upload(a);
        floatX* db = kc_upload(b);
        float* d_out = kc_upload_raw(std::vector<float>(1, 0.0f));
        global_norm_squared(d_out, da, a.size(), 0);
        global_norm_squared(d_out, db, b.size(), 0);
        float got = kc_download_f32(d_out, 1)[0];
        float want = (float)((double)global_norm_squared_cpu(a.data(), a.size()) +
                             (double)global_norm_squared_cpu(b.data(), b.size()));
        kc_compare("global_norm_squared two calls accumulate", std::vector<float>(1, got),
                   std::vector<float>(1, want), 0.0f, 1e-5f, 0.0f, 1e-5f);
        global_norm_check_f64("global_norm_squared two calls accumulate", got, want, 0.0, {&a, &b}, 0);
        device_free(da);
        device_free(db);
        device_free(d_out);
    }
}
