// test/kernels/adamw.h: adamw_update against adamw_update_cpu on the same floatX-rounded gradients,
// and (BF16) the stochastic rounding of the FP32 master weights into the bf16 parameters.
//
// Inputs are kept in the regime the optimizer sees: m ~ N(0, 0.1^2) and v = m^2 + z^2 with
// z ~ N(0, 0.05^2), so |m| / sqrt(v) <= 1 and, after one step, |mhat| / sqrt(vhat) <= ~1.5 (t = 3):
// the update direction is O(1) and its rounding errors stay relative.
//
// Tolerances (|got - want| <= atol + rtol |want|), the same in both builds because m, v and the FP32
// master are FP32 in both, and the gradients are the same floatX values for kernel and reference:
// - m, v: one multiply-add of two products; a GPU may contract it into an FMA (1 ulp of the larger
//   term, <= 1.5 here: ~1.2e-7 absolute). atol 3e-7, rtol 1e-6.
// - master (FP32 build without master: params): p - lr (mhat / (sqrt(vhat) + eps) + wd p). The update
//   direction has a few ulps of relative error (fast-math division and sqrt on a GPU: ~2 ulp each,
//   plus the m, v errors), |direction| <= ~1.5, so lr * error < 1e-8 at lr = 1e-2; the subtraction
//   rounds to 1 ulp of p, maybe 2 with FMA. atol 1e-7, rtol 1e-6 (8 ulps).
// - BF16 params: exactly one of the two bf16 neighbours of the kernel's own master (bit check), and
//   the rounding is unbiased: with frac = (master - lower) / spacing, E[rounded up] = frac, so over
//   N elements mean(up - frac) has standard deviation <= 0.5 / sqrt(N); we allow 6 of those, per
//   half of the frac range (round-to-nearest would be off by ~0.25 in each half).
// - lr = 0 on masters exactly 1/4 of a spacing above a bf16 value: the fraction rounded up must be
//   1/4 within 6 sigma = 6 sqrt(0.25 * 0.75 / N) (and the master unchanged, bit for bit).
// - determinism: the same seed gives the same params bit for bit; another seed gives other params.
#pragma once
#include "../kernel_check.h"
#include "../../llm/adamw.cuh"
#include <string>

typedef struct {
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
    int t;
} AdamwHyper;

typedef struct {
    std::vector<float> params, master, grads, m, v;  // host copies (params, grads floatX-rounded)
} AdamwData;

static AdamwData adamw_random_data(size_t n) {
    AdamwData d;
    d.master.resize(n);
    rng_normal(&g_rng, d.master.data(), n, 0.0f, 0.5f);
    d.params.resize(n);
    for (size_t i = 0; i < n; i++) d.params[i] = (float)(floatX)d.master[i];
    d.grads = kc_randn(n, 1.0f);
    d.m.resize(n);
    rng_normal(&g_rng, d.m.data(), n, 0.0f, 0.1f);
    d.v.resize(n);
    rng_normal(&g_rng, d.v.data(), n, 0.0f, 0.05f);
    for (size_t i = 0; i < n; i++) d.v[i] = d.m[i] * d.m[i] + d.v[i] * d.v[i];
    return d;
}

// runs the launcher on a device copy of d, every array starting `offset` elements into its buffer
// (offset 1 makes every pointer miss 16-byte alignment: the element-by-element path). Returns the
// outputs; params are poisoned first when the master is given (they are then write-only).
static AdamwData adamw_run(const AdamwData& d, size_t n, int use_master, size_t offset,
                           const AdamwHyper& h, unsigned int seed) {
    auto with_offset = [&](const std::vector<float>& x) {
        std::vector<float> y(offset, 0.0f);
        y.insert(y.end(), x.begin(), x.end());
        return y;
    };
    floatX* params = kc_upload(with_offset(d.params));
    if (use_master) kc_poison(params + offset, n * sizeof(floatX));
    floatX* grads = kc_upload(with_offset(d.grads));
    float* m = kc_upload_raw(with_offset(d.m));
    float* v = kc_upload_raw(with_offset(d.v));
    float* master = use_master ? kc_upload_raw(with_offset(d.master)) : NULL;
    adamw_update(params + offset, master ? master + offset : NULL, grads + offset, m + offset, v + offset, n,
                 h.lr, h.beta1, h.beta2, h.t, h.eps, h.weight_decay, h.grad_scale, seed, 0);
    cudaCheck(cudaDeviceSynchronize());
    AdamwData out;
    out.params = kc_download(params + offset, n);
    out.m = kc_download_f32(m + offset, n);
    out.v = kc_download_f32(v + offset, n);
    if (use_master) out.master = kc_download_f32(master + offset, n);
    device_free(params);
    device_free(grads);
    device_free(m);
    device_free(v);
    device_free(master);
    return out;
}

static uint32_t adamw_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }

// BF16: each params[i] is the lower or upper bf16 neighbour of master[i] (exact when master[i] is a
// bf16 value); `up` and `frac` (position of master between its neighbours) are returned for the
// statistics. Returns the number of violations.
static size_t adamw_neighbour_violations(const std::vector<float>& params, const std::vector<float>& master,
                                         std::vector<int>* up, std::vector<float>* frac) {
    size_t bad = 0;
    for (size_t i = 0; i < params.size(); i++) {
        uint32_t u = adamw_bits(master[i]), p = adamw_bits(params[i]);
        uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;  // toward / away from zero in magnitude
        int is_up = p == hi && (u & 0xffffu) != 0;
        if (!(p == lo || is_up)) bad++;
        if ((u & 0xffffu) != 0 && up != NULL) {
            up->push_back(is_up);
            frac->push_back((float)(u & 0xffffu) / 65536.0f);
        }
    }
    return bad;
}

static void adamw_check_against_reference(const char* label, const AdamwData& d, const AdamwData& got,
                                          size_t n, int use_master, const AdamwHyper& h) {
    std::vector<float> p_ref = use_master ? d.master : d.params, m_ref = d.m, v_ref = d.v;
    adamw_update_cpu(p_ref.data(), d.grads.data(), m_ref.data(), v_ref.data(), n, h.lr, h.beta1, h.beta2,
                     h.t, h.eps, h.weight_decay, h.grad_scale);
    std::string w = std::string("adamw ") + label;
    kc_compare((w + " m").c_str(), got.m, m_ref, 3e-7f, 1e-6f, 3e-7f, 1e-6f);
    kc_compare((w + " v").c_str(), got.v, v_ref, 3e-7f, 1e-6f, 3e-7f, 1e-6f);
    if (use_master) {
        kc_compare((w + " master").c_str(), got.master, p_ref, 1e-7f, 1e-6f, 1e-7f, 1e-6f);
        if (KC_BF16) {
            size_t bad = adamw_neighbour_violations(got.params, got.master, NULL, NULL);
            check(bad == 0, "%s params: a bf16 neighbour of the master (%zu of %zu are not)", w.c_str(), bad, n);
        } else {
            kc_compare((w + " params == master").c_str(), got.params, got.master, 0.0f, 0.0f, 0.0f, 0.0f);
        }
    } else if (KC_BF16) {
        // no master: params were read as bf16, updated in FP32 and rounded stochastically; within one
        // bf16 spacing (2^-7 relative, at most) of the FP32 reference
        kc_compare((w + " params (no master)").c_str(), got.params, p_ref, 1e-6f, 1.0f / 128, 1e-6f, 1.0f / 128);
    } else {
        kc_compare((w + " params").c_str(), got.params, p_ref, 1e-7f, 1e-6f, 1e-7f, 1e-6f);
    }
}

static void test_adamw(void) {
    AdamwHyper h = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 3};
    const size_t ns[] = {1, 3, 1000, 100003};
    for (int k = 0; k < 4; k++) {
        size_t n = ns[k];
        AdamwData d = adamw_random_data(n);
        unsigned int seed = (unsigned int)rng_u64(&g_rng);
        char label[96];
        // the build's own mode first (BF16: with master; FP32: without), then the other one
        int modes[2] = {KC_BF16, !KC_BF16};
        for (int mi = 0; mi < 2; mi++) {
            snprintf(label, sizeof(label), "n=%zu master=%d", n, modes[mi]);
            adamw_check_against_reference(label, d, adamw_run(d, n, modes[mi], 0, h, seed), n, modes[mi], h);
        }
        if (n >= 1000) {  // misaligned pointers: the element-by-element path
            snprintf(label, sizeof(label), "n=%zu master=%d misaligned", n, KC_BF16);
            adamw_check_against_reference(label, d, adamw_run(d, n, KC_BF16, 1, h, seed), n, KC_BF16, h);
        }
    }

    // t = 1 (largest bias correction), no clipping, no weight decay
    {
        AdamwHyper h1 = {3e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 1};
        AdamwData d = adamw_random_data(1003);
        adamw_check_against_reference("n=1003 t=1 wd=0", d, adamw_run(d, 1003, KC_BF16, 0, h1, 7), 1003, KC_BF16, h1);
    }

    if (!KC_BF16) return;  // the rest is about stochastic rounding into bf16

    // unbiased rounding of a real update, conditioned on where the master falls between neighbours
    const size_t n = 100003;
    AdamwData d = adamw_random_data(n);
    unsigned int seed = (unsigned int)rng_u64(&g_rng);
    AdamwData a = adamw_run(d, n, 1, 0, h, seed);
    std::vector<int> up;
    std::vector<float> frac;
    adamw_neighbour_violations(a.params, a.master, &up, &frac);
    for (int half = 0; half < 2; half++) {
        double sum = 0.0;
        size_t cnt = 0;
        for (size_t i = 0; i < up.size(); i++)
            if ((frac[i] >= 0.5f) == (half == 1)) { sum += up[i] - frac[i]; cnt++; }
        double mean = cnt ? sum / cnt : 0.0, bound = 6.0 * 0.5 / sqrt((double)(cnt ? cnt : 1));
        check(cnt > 1000 && fabs(mean) <= bound,
              "adamw stochastic rounding unbiased, frac in [%.1f, %.1f): mean(up - frac) = %.5f over %zu (bound %.5f)",
              0.5 * half, 0.5 * half + 0.5, mean, cnt, bound);
    }

    // determinism: same seed, same bits; another seed, other bits
    AdamwData b = adamw_run(d, n, 1, 0, h, seed);
    check(memcmp(a.params.data(), b.params.data(), n * sizeof(float)) == 0 &&
          memcmp(a.master.data(), b.master.data(), n * sizeof(float)) == 0,
          "adamw deterministic for a fixed seed (n=%zu)", n);
    AdamwData c = adamw_run(d, n, 1, 0, h, seed + 1);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += a.params[i] != c.params[i];
    check(differ > n / 10, "adamw another seed rounds differently (%zu of %zu params differ)", differ, n);

    // lr = 0: masters 1/4 of a spacing above a bf16 value stay put and round up 1/4 of the time
    AdamwData q = adamw_random_data(n);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (adamw_bits(q.master[i]) & 0xffff0000u) | 0x4000u;
        memcpy(&q.master[i], &u, 4);
    }
    AdamwHyper h0 = h;
    h0.lr = 0.0f;
    AdamwData r = adamw_run(q, n, 1, 0, h0, seed);
    check(memcmp(r.master.data(), q.master.data(), n * sizeof(float)) == 0, "adamw lr=0 leaves the master unchanged");
    std::vector<int> up0;
    std::vector<float> frac0;
    size_t bad = adamw_neighbour_violations(r.params, r.master, &up0, &frac0);
    double ups = 0.0;
    for (size_t i = 0; i < up0.size(); i++) ups += up0[i];
    double rate = up0.empty() ? 0.0 : ups / up0.size(), bound = 6.0 * sqrt(0.25 * 0.75 / (double)n);
    check(bad == 0 && up0.size() == n && fabs(rate - 0.25) <= bound,
          "adamw lr=0: rounded up %.5f of the time at frac 1/4 (bound +-%.5f, %zu not neighbours)", rate, bound, bad);
}
