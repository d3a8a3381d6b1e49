// test/kernels/adamw.h: adamw_update against adamw_update_cpu on the same floatX-rounded gradients,
// both against a float64 AdamW written here, and (BF16, FP16) the stochastic rounding of the FP32
// master weights into the 16-bit parameters (the neighbours computed here from the format's spacing).
//
// Inputs are kept in the regime the optimizer sees: m ~ N(0, 0.1^2) and v = m^2 + z^2 with
// z ~ N(0, 0.05^2), so |m| / sqrt(v) <= 1 and, after one step, |mhat| / sqrt(vhat) <= ~1.5 (t = 3):
// the update direction is O(1) and its rounding errors stay relative. One more set has everything
// scaled by 1e-8 (gradients ~1e-8, sqrt(vhat) ~ eps = 1e-8), so that eps shapes the update: eps
// dropped, moved inside the square root or given another value changes the update by O(1) there.
//
// Why float64: the launcher computes the bias corrections exactly as the reference does and the kernel
// repeats the reference's expressions (adamw.cuh), so in both builds they agree bit for bit (observed
// error 0), whatever the formula. The float64 evaluation is Loshchilov & Hutter (2019), Algorithm 2,
// with Adam's bias correction (Kingma & Ba 2015, Algorithm 1), written out below from the same float
// hyperparameters:
//   g = grad * grad_scale;  m' = beta1 m + (1 - beta1) g;  v' = beta2 v + (1 - beta2) g^2
//   p' = p - lr (m' / (1 - beta1^t) / (sqrt(v' / (1 - beta2^t)) + eps) + weight_decay p)
//
// Error bound of one FP32 evaluation (u = 2^-24), per element, to first order; a GPU's fast division
// and square root (--use_fast_math, within 2 ulp) count 2u each, and a multiply-add contracted into an
// FMA only removes roundings:
// - g: u |g|.  m': 2u (beta1 |m| + (1 - beta1) |g|) + u |m'|.  v': 4u (beta2 v + (1 - beta2) g^2) + u v'.
// - bc = 1 - beta^t by powf (< 1 ulp of beta^t) and a subtraction: |d bc| <= 2u beta^t + u bc.
// - mhat = m' / bc1 and vhat = v' / bc2 carry those relative errors plus 2u; sqrt(vhat) half of vhat's
//   plus 2u; + eps u; the direction mhat / (sqrt + eps) their sum plus 2u; + weight_decay p: 2u wd |p|
//   and u of the sum; times lr and subtracted from p: u lr |update| and u |p'|.
//   With lr = 1e-2 the parameter's bound is ~1.1 u |p'| (its final rounding), in which a bias
//   correction dropped or taken with the other beta, or weight decay not decoupled, does not fit.
// - kernel vs reference: the sum of the two bounds.
// - BF16 params without a master: read as bf16, updated in FP32 and rounded stochastically: within one
//   bf16 spacing (2^-7 relative, at most) of the FP32 result, against the reference and float64 alike.
//   FP16: one spacing is 2^-10 relative, or 2^-24 among its subnormals (below 2^-14).
// - BF16 params with a master: exactly one of the two bf16 neighbours of the kernel's own master (bit
//   check), and the rounding is unbiased: with frac = (master - lower) / spacing, E[rounded up] = frac,
//   so over N elements mean(up - frac) has standard deviation <= 0.5 / sqrt(N); we allow 6 of those,
//   per half of the frac range (round-to-nearest would be off by ~0.25 in each half).
// - lr = 0 on masters exactly 1/4 of a spacing above a bf16 value: the fraction rounded up must be
//   1/4 within 6 sigma = 6 sqrt(0.25 * 0.75 / N) (and the master unchanged, bit for bit).
// - determinism: the same seed gives the same params bit for bit; another seed gives other params.
#pragma once
#include "../kernel_check.h"
#include "../../llm/ops/adamw.cuh"
#include <string>

typedef struct {
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
    int t;
} AdamwHyper;

typedef struct {
    std::vector<float> params, master, grads, m, v;  // host copies (params, grads floatX-rounded)
} AdamwData;

// gradients ~ N(0, scale^2), m ~ N(0, (0.1 scale)^2), v = m^2 + z^2 with z ~ N(0, (0.05 scale)^2)
static AdamwData adamw_random_data(size_t n, float scale = 1.0f) {
    AdamwData d;
    d.master.resize(n);
    rng_normal(&g_rng, d.master.data(), n, 0.0f, 0.5f);
    d.params.resize(n);
    for (size_t i = 0; i < n; i++) d.params[i] = (float)(floatX)d.master[i];
    d.grads = kc_randn(n, scale);
    d.m.resize(n);
    rng_normal(&g_rng, d.m.data(), n, 0.0f, 0.1f * scale);
    d.v.resize(n);
    rng_normal(&g_rng, d.v.data(), n, 0.0f, 0.05f * scale);
    for (size_t i = 0; i < n; i++) d.v[i] = d.m[i] * d.m[i] + d.v[i] * d.v[i];
    return d;
}

// runs the launcher on a device copy of d, every array starting `offset` elements into its buffer
// (offset 1 makes every pointer miss 16-byte alignment: the element-by-element path). Returns the
// outputs; params are poisoned first when the master is given (they are then write-only).
static AdamwData adamw_run(const AdamwData& d, size_t n, int use_master, size_t offset,
                           const AdamwHyper& h, unsigned int seed, int clear_grads = 0) {
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
                 h.lr, h.beta1, h.beta2, h.t, h.eps, h.weight_decay, h.grad_scale, seed, 0, 0, clear_grads);
    cudaCheck(cudaDeviceSynchronize());
    AdamwData out;
    out.grads = kc_download(grads + offset, n);
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

// floatX's two neighbours of x, computed in float64 from the format (not from the kernel's
// conversions): spacing = 2^(max(e, emin) - mantissa bits) with e = floor(log2 |x|), |lo| = |x|
// truncated to a multiple of it, |hi| = |lo| + spacing, both with x's sign; frac = (|x| - |lo|) / spacing.
// BF16: 7 stored bits, emin -126; FP16: 10 stored bits, emin -14 (its subnormals are spaced 2^-24).
static void adamw_neighbours(float x, float* lo, float* hi, double* frac) {
    const int mant = KC_FP16 ? 10 : 7, emin = KC_FP16 ? -14 : -126;
    double ax = fabs((double)x);
    int e = emin;
    if (ax > 0.0) { frexp(ax, &e); e -= 1; }  // ax = f 2^(e+1), f in [0.5, 1): floor(log2 ax) = e
    if (e < emin) e = emin;
    double sp = ldexp(1.0, e - mant), l = floor(ax / sp) * sp;
    *lo = (float)copysign(l, (double)x);
    *hi = (float)copysign(l + sp, (double)x);
    *frac = (ax - l) / sp;
}

// 16-bit floatX: each params[i] is the lower or upper neighbour of master[i] (exact when master[i] is
// a floatX value); `up` and `frac` (position of master between its neighbours) are returned for the
// statistics. Returns the number of violations.
static size_t adamw_neighbour_violations(const std::vector<float>& params, const std::vector<float>& master,
                                         std::vector<int>* up, std::vector<float>* frac) {
    size_t bad = 0;
    for (size_t i = 0; i < params.size(); i++) {
        float lo, hi;
        double fr;
        adamw_neighbours(master[i], &lo, &hi, &fr);
        uint32_t p = adamw_bits(params[i]);
        int is_up = p == adamw_bits(hi) && fr != 0.0;
        if (!(p == adamw_bits(lo) || is_up)) bad++;
        if (fr != 0.0 && up != NULL) {
            up->push_back(is_up);
            frac->push_back((float)fr);
        }
    }
    return bad;
}

// AdamW in float64 from the float inputs and hyperparameters, with the error bound of one FP32
// evaluation of each output (top of this file)
typedef struct {
    std::vector<double> p, m, v;     // p' (from the master if given, else from params), m', v'
    std::vector<double> bp, bm, bv;  // their bounds
} AdamwF64;

static AdamwF64 adamw_f64(const AdamwData& d, size_t n, int use_master, const AdamwHyper& h) {
    const double u = KC_U32, b1 = h.beta1, b2 = h.beta2, lr = h.lr, eps = h.eps, wd = h.weight_decay;
    double pw1 = pow(b1, h.t), pw2 = pow(b2, h.t), bc1 = 1.0 - pw1, bc2 = 1.0 - pw2;
    double k1 = (2.0 * u * pw1 + u * bc1) / bc1, k2 = (2.0 * u * pw2 + u * bc2) / bc2;  // relative errors of bc
    AdamwF64 r;
    r.p.resize(n); r.m.resize(n); r.v.resize(n); r.bp.resize(n); r.bm.resize(n); r.bv.resize(n);
    for (size_t i = 0; i < n; i++) {
        double p = use_master ? d.master[i] : d.params[i];
        double g = (double)d.grads[i] * (double)h.grad_scale;
        double m = b1 * d.m[i] + (1.0 - b1) * g, v = b2 * d.v[i] + (1.0 - b2) * g * g;
        double mhat = m / bc1, vhat = v / bc2, den = sqrt(vhat) + eps, dir = mhat / den, upd = dir + wd * p;
        double pn = p - lr * upd;
        double dm = 2.0 * u * (b1 * fabs(d.m[i]) + (1.0 - b1) * fabs(g)) + u * fabs(m);
        double dv = 4.0 * u * (b2 * d.v[i] + (1.0 - b2) * g * g) + u * v;
        double dmhat = (dm + fabs(m) * k1) / bc1 + 2.0 * u * fabs(mhat);
        double rvhat = (v > 0.0 ? dv / v : 0.0) + k2 + 2.0 * u;
        double rden = sqrt(vhat) * (0.5 * rvhat + 2.0 * u) / den + u;
        double ddir = dmhat / den + fabs(dir) * (rden + 2.0 * u);
        double dupd = ddir + 2.0 * u * wd * fabs(p) + u * fabs(upd);
        r.p[i] = pn; r.m[i] = m; r.v[i] = v;
        r.bm[i] = dm; r.bv[i] = dv;
        r.bp[i] = lr * dupd + u * lr * fabs(upd) + u * fabs(pn);
    }
    return r;
}

static void adamw_check_against_reference(const char* label, const AdamwData& d, const AdamwData& got,
                                          size_t n, int use_master, const AdamwHyper& h) {
    std::vector<float> p_ref = use_master ? d.master : d.params, m_ref = d.m, v_ref = d.v, g_ref = d.grads;
    adamw_update_cpu(p_ref.data(), g_ref.data(), m_ref.data(), v_ref.data(), n, h.lr, h.beta1, h.beta2,
                     h.t, h.eps, h.weight_decay, h.grad_scale);
    AdamwF64 f = adamw_f64(d, n, use_master, h);
    std::vector<double> bm2(n), bv2(n), bp2(n), bsr(n), bsr2(n);
    for (size_t i = 0; i < n; i++) {
        bm2[i] = 2.0 * f.bm[i];
        bv2[i] = 2.0 * f.bv[i];
        bp2[i] = 2.0 * f.bp[i];
        // stochastic rounding: one floatX spacing (2 KC_UX relative; FP16: or 2^-24 among the subnormals)
        bsr[i] = f.bp[i] + 2.0 * KC_UX * (fabs(f.p[i]) + f.bp[i]) + 2.0 * KC_AX;
        bsr2[i] = bsr[i] + f.bp[i];
    }
    std::string w = std::string("adamw ") + label;
    kc_check_bound((w + " m").c_str(), got.m, m_ref, bm2);
    kc_check_bound((w + " v").c_str(), got.v, v_ref, bv2);
    kc_check_bound((w + " m vs float64").c_str(), got.m, f.m, f.bm);
    kc_check_bound((w + " v vs float64").c_str(), got.v, f.v, f.bv);
    kc_check_bound((w + ": adamw_update_cpu m vs float64").c_str(), m_ref, f.m, f.bm);
    kc_check_bound((w + ": adamw_update_cpu v vs float64").c_str(), v_ref, f.v, f.bv);
    kc_check_bound((w + ": adamw_update_cpu params vs float64").c_str(), p_ref, f.p, f.bp);
    if (use_master) {
        kc_check_bound((w + " master").c_str(), got.master, p_ref, bp2);
        kc_check_bound((w + " master vs float64").c_str(), got.master, f.p, f.bp);
        if (KC_BF16) {
            size_t bad = adamw_neighbour_violations(got.params, got.master, NULL, NULL);
            check(bad == 0, "%s params: a floatX neighbour of the master (%zu of %zu are not)", w.c_str(), bad, n);
        } else {
            kc_compare((w + " params == master").c_str(), got.params, got.master, 0.0f, 0.0f, 0.0f, 0.0f);
        }
    } else if (KC_BF16) {
        kc_check_bound((w + " params (no master)").c_str(), got.params, p_ref, bsr2);
        kc_check_bound((w + " params (no master) vs float64").c_str(), got.params, f.p, bsr);
    } else {
        kc_check_bound((w + " params").c_str(), got.params, p_ref, bp2);
        kc_check_bound((w + " params vs float64").c_str(), got.params, f.p, f.bp);
    }
}

// adamw_round<floatX> on its own: element i rounds xs[i / draws] with the bits of (seed, i)
__global__ void adamw_round_kernel(floatX* out, const float* xs, size_t n, int draws, unsigned int seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = adamw_round<floatX>(xs[i / draws], adamw_random_bits(seed, i));
}

// Each chosen x rounded with 2^15 draws of the bits: every result one of x's two floatX neighbours,
// both reached when x is between them (never the upper one when x is a floatX value), and the mean
// of the results x within 6 standard deviations (a Bernoulli(frac) in units of the spacing: sd =
// spacing sqrt(frac (1 - frac) / draws) <= spacing / (2 sqrt(draws)) = spacing / 362; a rounding
// biased by 1/64 of a spacing or more fails). Inf, NaN and values beyond the largest finite 16-bit
// value are converted plainly (to nearest).
static void test_adamw_round(void) {
    if (!KC_BF16) return;
    std::vector<float> xs;
    const double fracs[] = {0.0, 0.01, 0.25, 0.5, 0.75, 0.99};
    const float bases[] = {1.0f, -3.0f, 0.0371f, -1234.5f, 6.1e-5f, -1e-6f, 3e-8f, 60000.0f};  // 6.1e-5.. 3e-8: FP16 subnormals
    for (float b : bases)
        for (double f : fracs) {
            float lo, hi;
            double fr;
            adamw_neighbours(b, &lo, &hi, &fr);
            xs.push_back((float)((double)lo + f * ((double)hi - (double)lo)));
        }
    const int draws = 1 << 15;
    size_t n = xs.size() * (size_t)draws;
    float* d_xs = kc_upload_raw(xs);
    floatX* d_out = kc_alloc_poisoned<floatX>(n);
    LAUNCH(adamw_round_kernel, dim3((unsigned int)ceil_div_sz(n, 256)), dim3(256), 0, (cudaStream_t)0, d_out,
           (const float*)d_xs, n, draws, 12345u);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<float> out = kc_download(d_out, n);
    for (size_t k = 0; k < xs.size(); k++) {
        float lo, hi;
        double fr;
        adamw_neighbours(xs[k], &lo, &hi, &fr);
        size_t bad = 0, nlo = 0, nhi = 0;
        double sum = 0.0;
        for (int j = 0; j < draws; j++) {
            float r = out[k * draws + j];
            if (adamw_bits(r) == adamw_bits(lo)) nlo++;
            else if (adamw_bits(r) == adamw_bits(hi) && fr != 0.0) nhi++;
            else bad++;
            sum += (double)r;
        }
        double sp = fabs((double)hi - (double)lo), mean = sum / draws;
        double sd = sp * sqrt(fr * (1.0 - fr) / draws), err = fabs(mean - (double)xs[k]);
        int both = fr == 0.0 ? nhi == 0 : (nlo > 0 && nhi > 0);
        check(bad == 0 && both && err <= 6.0 * sd + 1e-3 * sp / draws,
              "adamw_round x=%.9g (frac %.3f): mean of %d roundings off by %.3g spacings (bound %.3g); low %zu, high %zu, other %zu",
              xs[k], fr, draws, err / sp, (6.0 * sd) / sp, nlo, nhi, bad);
    }
    device_free(d_xs);
    device_free(d_out);
    // inf, NaN and beyond the largest finite value: round to nearest
    const float specials[] = {INFINITY, -INFINITY, NAN, 1e6f, -70000.0f};
    for (float x : specials) {
        std::vector<float> one(1, x);
        float* dx = kc_upload_raw(one);
        floatX* dout = kc_alloc_poisoned<floatX>(1);
        LAUNCH(adamw_round_kernel, dim3(1), dim3(32), 0, (cudaStream_t)0, dout, (const float*)dx, (size_t)1, 1, 7u);
        cudaCheck(cudaDeviceSynchronize());
        float got = kc_download(dout, 1)[0], want = (float)(floatX)x;
        check(adamw_bits(got) == adamw_bits(want) || (isnan(got) && isnan(want)),
              "adamw_round of %g converts plainly: %g (expected %g)", x, got, want);
        device_free(dx);
        device_free(dout);
    }
}

static void test_adamw(void) {
    test_adamw_round();
    AdamwHyper h = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 3};
    const size_t ns[] = {1, 3, 1000, 100003};
    char label[96];
    for (int k = 0; k < 4; k++) {
        size_t n = ns[k];
        AdamwData d = adamw_random_data(n);
        unsigned int seed = (unsigned int)rng_u64(&g_rng);
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
        // clear_grads (llm/parallel/dp.h's update_clears_grads): the same update bit for bit, and every gradient
        // value 0 afterwards (the inputs are N(0, 1): none is 0 before), on both paths
        for (size_t offset = 0; offset < 2; offset++) {
            AdamwData keep = adamw_run(d, n, KC_BF16, offset, h, seed), cl = adamw_run(d, n, KC_BF16, offset, h, seed, 1);
            size_t zeros_before = 0, zeros_after = 0, kept = 0;
            for (size_t i = 0; i < n; i++) {
                zeros_before += keep.grads[i] == 0.0f;
                zeros_after += cl.grads[i] == 0.0f && !signbit(cl.grads[i]);
                kept += adamw_bits(keep.grads[i]) == adamw_bits(d.grads[i]);
            }
            int same = keep.params == cl.params && keep.m == cl.m && keep.v == cl.v;
            check(same && zeros_after == n && zeros_before == 0 && kept == n,
                  "adamw n=%zu%s clear_grads: update bit-identical to without (%d), gradients zeroed %zu of %zu "
                  "(without: %zu zero, %zu of %zu untouched)", n, offset ? " misaligned" : "", same, zeros_after, n,
                  zeros_before, kept, n);
        }
    }

    // t = 1 (largest bias correction), no clipping, no weight decay
    {
        AdamwHyper h1 = {3e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 1};
        AdamwData d = adamw_random_data(1003);
        adamw_check_against_reference("n=1003 t=1 wd=0", d, adamw_run(d, 1003, KC_BF16, 0, h1, 7), 1003, KC_BF16, h1);
    }
    // gradients and moments ~1e-8: sqrt(vhat) ~ eps, so eps shapes every update; both modes
    {
        AdamwData d = adamw_random_data(1003, 1e-8f);
        for (int mode = 0; mode < 2; mode++) {
            snprintf(label, sizeof(label), "n=1003 master=%d gradients ~1e-8 (eps matters)", mode);
            adamw_check_against_reference(label, d, adamw_run(d, 1003, mode, 0, h, 11), 1003, mode, h);
        }
    }

    if (!KC_BF16) return;  // the rest is about stochastic rounding into bf16 / fp16

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

    // lr = 0: masters 1/4 of a spacing above a floatX value stay put and round up 1/4 of the time
    AdamwData q = adamw_random_data(n);
    for (size_t i = 0; i < n; i++) {
        float lo, hi;
        double fr;
        adamw_neighbours(q.master[i], &lo, &hi, &fr);
        q.master[i] = (float)((double)lo + 0.25 * ((double)hi - (double)lo));  // exact: 2 more bits than floatX
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
