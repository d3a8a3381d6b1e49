// test/kernels/global_norm.h: global_norm_squared (*out += sum of squares) against
// global_norm_squared_cpu on the same floatX values.
//
// *out starts at a random defined value (the launcher accumulates); the check is initial + delta.
// Tolerance: every square of a floatX value is exact in FP32 (bf16: 8-bit significand, square 16
// bits), so the only error is FP32 summation of positive terms: a thread adds at most a few hundred
// terms in sequence (n / (grid * 512 threads)), then two trees of depth <= 10 and the final add; the
// relative error of a sum of positive terms is at most (terms in sequence + depth) * 2^-24 and, with
// rounding errors of random sign, typically far less. rtol 1e-5 (up to ~160 sequential terms at the
// worst case; the shapes here have at most ~8), atol 0 in both builds.
// Also: the result does not depend on the thread order or the run (same bits twice), and pointers off
// 16-byte alignment (the head elements before the first aligned chunk) are summed too.
#pragma once
#include "../kernel_check.h"
#include "../../llm/global_norm.cuh"

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

    float want = (float)((double)init + (double)global_norm_squared_cpu(x.data() + offset, n));
    char what[128];
    snprintf(what, sizeof(what), "global_norm_squared n=%zu offset=%zu", n, offset);
    kc_compare(what, std::vector<float>(1, got), std::vector<float>(1, want), 0.0f, 1e-5f, 0.0f, 1e-5f);
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
        device_free(da);
        device_free(db);
        device_free(d_out);
    }
}
