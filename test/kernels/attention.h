// test/kernels/attention.h: attention_forward and attention_backward (CUDA path: the fused causal
// kernels of llm/ops/attention.cuh, FlashAttention-2 loop order: mma.sync tensor-core products with
// the scores and accumulators in registers for 16-bit floatX, FP32 loops in shared memory for FP32) against
// attention_forward_cpu / attention_backward_cpu on the same floatX-rounded inputs, and kernels and
// references against a float64 attention written here: softmax_{j <= t}(q_t . k_j / sqrt(hs)) v
// (Vaswani et al. 2017, eq. 1, with GPT-2's causal mask), its row log-sum-exp
// lse_t = log sum_{j <= t} exp(q_t . k_j / sqrt(hs)) and its gradient, with 1/sqrt(hs) in float64. The
// kernels and the references take the same scale = 1/sqrtf(hs), so their agreement alone cannot see a
// wrong scale or softmax-backward expression; the float64 comparison does.
//
// Shapes (B,T,C,NH), hs = C/NH; the kernels' tiles are BR = 64 positions in 16 bits, 32 in FP32,
// the head padded to HD = 16, 32, 64 or 128 columns:
//   (1,1,16,2)    hs 8 (HD 16), a single position: one tile of 1 row
//   (2,7,24,2)    hs 12 (HD 16): not a multiple of a 128-bit chunk in 16 bits (the scalar tile loads)
//   (2,33,64,4)   hs 16, T = 33 (a partial tile); inp, out, dout, dinp one element off 16-byte
//                 alignment (the scalar tile loads in every build)
//   (1,65,64,2)   hs 32, T = 65: two key tiles, the second of 1 row (the online rescale runs once; FP32: three of 32)
//   (1,130,64,1)  hs 64 (HD 64), three key tiles, the last of 2 rows (FP32: five of 32)
//   (1,70,256,2)  hs 128 (HD 128): two tiles of 64, the last of 6 rows (FP32: three of 32)
// Inputs: q ~ N(0,4) (2 x N(0,1), exact in every floatX), k, v, dout ~ N(0,1): the logits
// q.k/sqrt(hs) ~ N(0,4), sharp enough that a row's running max moves between key tiles, so a missing
// or wrong rescale shows. Before every launch the outputs (out, lse, dinp) and the backward's scratch
// are poisoned (NaN bytes), so an element the kernels leave unwritten fails; the emulator fills
// dynamic shared memory with 0xFF too (a tile row not zeroed past T or hs poisons the products).
// The backward runs on the kernel forward's own out (floatX, as stored) and lse (FP32), as training
// does; its bound carries their errors (below). Forward and backward each run twice from fresh
// poison: bitwise equal results (determinism: no atomics in the dq pass).
//
// Tolerances: an error bound per element, propagated in double from the inputs along the kernels'
// rounding points (attention_kernels.cuh), first order, every error at its maximum with the
// same sign. u: the unit roundoff of a stored floatX (2^-8 BF16, 2^-11 FP16 with ax = KC_AX = 2^-25
// absolute for its subnormals, 2^-24 FP32); e = 2^-24, FP32 arithmetic. A FP32 sum of n terms
// (mma.sync: exact products of 16-bit values, accumulated in FP32, chained through the accumulator; the
// zero padding adds exactly) errs by <= n e sum|terms|. Per row t of a head, keys j <= t, with
// l_j = scale q.k_j (float64), M = max_j l_j, x_j = M - l_j >= 0, w_j = e^-x_j / Z, Z = sum e^-x_j,
// nt = the number of key tiles of row t (t/BR + 1: each adds one online rescale):
//   E_j = scale hs e S_j + 3 e |l_j| + e x_j + (2 + 1.17 x_j) 2e      the relative error of e^(l_j - m):
//         the score's FP32 sum of hs products (S_j = sum |q k_j|); the product by scale and scale's own
//         rounding (1/sqrtf: 2e); the subtraction of the running max; __expf under --use_fast_math
//         (2 + 1.17|x| ulp; an ulp of a value <= 1 is <= 2e of it). The computed maxes m themselves cancel:
//         the same floats are subtracted in P and in the rescale factors e^(m_old - m_new), which
//         multiply O and l alike, so their errors (and the factors' __expf errors) cancel in O / l.
//   out = O / l:  bound = sum_j w_j |v_j| (E_j + u)             each term's exponent, P rounded to floatX
//                         + sum_j w_j |v_j| (t + 1 + nt) e       O's FP32 sums, its nt rescalings
//                         + |y| (Ebar + (t + 1 + 2 nt + 2) e)   l (unrounded P: Ebar = sum w_j E_j), its
//                                                               sums and rescalings, 1/l and O * (1/l)
//                         + u |y| + ax (1 + sum_j |v_j| / Z)     out rounded once; FP16: P's subnormals
//   lse = m + log l:  bound = Ebar + (t + 1 + 2 nt) e            the terms and sums of l
//                         + 4 (nt - 1) e + 3.34 e (M - m_1)     the rescale factors do not cancel here:
//                                                               each __expf(d) errs by (2 + 1.17|d|) ulp
//                                                               plus the subtraction's e|d|, and the
//                                                               |d| of a row's rescalings sum to M - m_1
//                                                               (m_1: the max over the first key tile)
//                         + 2^-21.41 + 6 e |log Z| + e |lse|   __logf (absolute 2^-21.41 on [0.5, 2],
//                                                               else 3 ulp), the final add
// Backward, from the kernel's own out (error bo per element, the forward bound) and lse (error bL_t):
//   P_tj = e^(scale S_tj - lse_t) recomputed:  EP_tj = scale hs e S_tj + 3 e |l_tj| + e x_tj
//                                              + (2 + 1.17 x_tj) 2e + bL_t    (relative)
//   dP_tj = dy_t . v_j (FP32):                 ddP = hs e sum|dy_t v_j|
//   D_t = dy_t . out_t, out as stored:         dD = sum_c |dy_tc| bo_tc + hs e sum|dy_t out_t|
//   dS_tj = P (dP - D), rounded to floatX:     ddS = w (ddP + dD + e (|dP| + |D|) + EP |dP - D|)
//                                              + (u + e) |dS| + ax
//   dq_t = scale sum_j dS_tj k_j:              scale sum_j ddS |k_j| + (t + 1) e scale sum_j |dS k_j|
//                                              + (u + 3e) |dq| + ax     (the product by scale, its 2e)
//   dk_j = scale sum_{t >= j} dS_tj q_t:       the same over the T - j queries
//   dv_j = sum_{t >= j} Round(P_tj) dy_t:      sum_t w |dy_t| (EP + u) + (T - j) e sum w |dy_t|
//                                              + u |dv| + ax (1 + sum_t |dy_t|)
// The CPU references (attention_forward_cpu / attention_backward_cpu, FP32 throughout, row by row)
// get the same bounds with u = e (they store nothing in 16 bits), one key tile (nt = 1), and in the
// backward their own recomputed probabilities: EP_tj = E_j + Ebar + (t + 3) e (the forward's max,
// sum, 1/sum and product) and D_t = sum_j p_tj dP_tj (dD = sum_j w (EP |dP| + ddP) + (t + 1) e
// sum_j w |dP|). Kernel vs reference: |got - ref| within the sum of both bounds.
// A check passes when |got - want| <= 2 bound (the factor 2 covers the second-order terms) and reports
// the largest ratio |got - want| / bound. Observed worst ratios (31 seeds, random thread order, kernel vs
// float64: out, lse, dinp): BF16 0.80, 0.09, 0.94; FP16 0.75, 0.14, 0.92; FP32 0.09, 0.14, 0.08 (the
// references vs float64: <= 0.14). In 16 bits the roundings of P, dS and the outputs dominate and the
// bound is near tight; in FP32 it is a worst case over summation orders. lse's bound is mostly __logf's
// 2^-21.41, which the emulator's logf does not show. Planted bugs move these ratios to 1e2..1e5 or NaN
// (test/mutations.py, k-fa-*).
#pragma once
#include <algorithm>
#include "../kernel_check.h"
#include "../../llm/ops/attention.cuh"

// |got - want| <= 2 bound elementwise (NaN fails); reports the worst ratio. want: float or double
template <class W>
static int attn_check(const char* what, const std::vector<float>& got, const std::vector<W>& want,
                      const std::vector<double>& bound) {
    double worst = 0.0;
    size_t wi = 0;
    int bad = 0;
    for (size_t i = 0; i < got.size(); i++) {
        double err = fabs((double)got[i] - (double)want[i]);
        double lim = 2.0 * bound[i] + 1e-30;
        if (!(err <= lim)) bad = 1;
        double ratio = isnan(err) ? INFINITY : err / (bound[i] + 1e-30);
        if (ratio > worst) { worst = ratio; wi = i; }
    }
    return check(!bad, "%s: n=%zu max |err|/bound = %.3g (limit 2) at [%zu] %.9g vs %.9g", what, got.size(), worst,
                 wi, got.size() ? got[wi] : 0.0f, got.size() ? (double)want[wi] : 0.0);
}

static std::vector<double> attn_add(const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> r(a.size());
    for (size_t i = 0; i < a.size(); i++) r[i] = a[i] + b[i];
    return r;
}

template <class T>
static bool attn_bitwise_equal(const T* d1, const T* d2, size_t n) {
    std::vector<T> h1 = kc_download_raw(d1, n), h2 = kc_download_raw(d2, n);
    return memcmp(h1.data(), h2.data(), n * sizeof(T)) == 0;
}

// one head's row t in float64: scaled scores l, their max M, Z = sum e^(l - M), S = sum |q k| per key
struct AttnRow {
    std::vector<double> l, S, w;  // w: the probabilities
    double M, Z;
};
static AttnRow attn_row(const std::vector<float>& inp, int b, int h, int t, int T, int C, int NH) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    AttnRow r;
    r.l.resize(t + 1); r.S.resize(t + 1); r.w.resize(t + 1);
    const float* q = &inp[((size_t)b * T + t) * 3 * C + h * hs];
    r.M = -INFINITY;
    for (int j = 0; j <= t; j++) {
        const float* k = &inp[((size_t)b * T + j) * 3 * C + C + h * hs];
        double s = 0.0, a = 0.0;
        for (int d = 0; d < hs; d++) { s += (double)q[d] * k[d]; a += fabs((double)q[d] * k[d]); }
        r.l[j] = scale * s; r.S[j] = a;
        r.M = fmax(r.M, r.l[j]);
    }
    r.Z = 0.0;
    for (int j = 0; j <= t; j++) { r.w[j] = exp(r.l[j] - r.M); r.Z += r.w[j]; }
    for (int j = 0; j <= t; j++) r.w[j] /= r.Z;
    return r;
}

// the relative error of one term e^(l_j - m) (E_j, top of this file)
static double attn_term_err(double l, double x, double S, int hs) {
    const double e = KC_U32;
    return e * hs * S / sqrt((double)hs) + 3.0 * e * fabs(l) + e * x + (2.0 + 1.17 * x) * 2.0 * e;
}

// the forward in float64 (out64 (B,T,C), lse64 (B,NH,T)) and the bounds of a path with stored-value
// unit roundoff u and key tiles of BR positions (top of this file)
static void attn_forward_f64(const std::vector<float>& inp, int B, int T, int C, int NH, double u, int BR,
                             std::vector<double>& out64, std::vector<double>& lse64, std::vector<double>& bound_out,
                             std::vector<double>& bound_lse) {
    const double e = KC_U32, ax = u > e ? KC_AX : 0.0;
    int hs = C / NH;
    out64.assign((size_t)B * T * C, 0.0); bound_out.assign((size_t)B * T * C, 0.0);
    lse64.assign((size_t)B * NH * T, 0.0); bound_lse.assign((size_t)B * NH * T, 0.0);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                AttnRow r = attn_row(inp, b, h, t, T, C, NH);
                int nt = t / BR + 1;
                std::vector<double> E(t + 1);
                double Ebar = 0.0, m1 = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    E[j] = attn_term_err(r.l[j], r.M - r.l[j], r.S[j], hs);
                    Ebar += r.w[j] * E[j];
                    if (j < BR) m1 = fmax(m1, r.l[j]);
                }
                size_t row = ((size_t)b * NH + h) * T + t;
                double L = r.M + log(r.Z);
                lse64[row] = L;
                bound_lse[row] = Ebar + (t + 1 + 2.0 * nt) * e + 4.0 * (nt - 1) * e + 3.34 * e * (r.M - m1) +
                                 pow(2.0, -21.41) + 6.0 * e * fabs(log(r.Z)) + e * fabs(L);
                for (int d = 0; d < hs; d++) {
                    double y = 0.0, A = 0.0, AE = 0.0, V1 = 0.0;
                    for (int j = 0; j <= t; j++) {
                        double v = inp[((size_t)b * T + j) * 3 * C + 2 * C + h * hs + d];
                        y += r.w[j] * v; A += r.w[j] * fabs(v); AE += r.w[j] * fabs(v) * (E[j] + u); V1 += fabs(v);
                    }
                    size_t o = ((size_t)b * T + t) * C + h * hs + d;
                    out64[o] = y;
                    bound_out[o] = AE + A * (t + 1 + nt) * e + fabs(y) * (Ebar + (t + 1 + 2.0 * nt + 2) * e) + u * fabs(y) +
                                   ax * (1.0 + V1 / r.Z);
                }
            }
}

// the backward in float64 (dinp64 (B,T,3C)) and its bounds (top of this file): kernel = 1: P from the
// given lse (error bL per row), D from the given out (error bo per element), P and dS rounded to a
// floatX of unit roundoff u; kernel = 0: the FP32 reference (u = e), its probabilities recomputed
static void attn_backward_f64(const std::vector<float>& inp, const std::vector<float>& dout, int B, int T, int C,
                              int NH, double u, int kernel, const std::vector<double>& bo,
                              const std::vector<double>& bL, std::vector<double>& dinp64, std::vector<double>& bound) {
    const double e = KC_U32, ax = u > e ? KC_AX : 0.0;
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    dinp64.assign((size_t)B * T * 3 * C, 0.0);
    bound.assign((size_t)B * T * 3 * C, 0.0);
    std::vector<double> w((size_t)T * T), dS((size_t)T * T), ddS((size_t)T * T), EP((size_t)T * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            auto at = [&](int t, int m, int d) { return (double)inp[((size_t)b * T + t) * 3 * C + m * C + h * hs + d]; };
            auto dy = [&](int t, int d) { return (double)dout[((size_t)b * T + t) * C + h * hs + d]; };
            for (int t = 0; t < T; t++) {
                AttnRow r = attn_row(inp, b, h, t, T, C, NH);
                std::vector<double> dP(t + 1), ddP(t + 1), E(t + 1);
                double Ebar = 0.0;
                for (int j = 0; j <= t; j++) {
                    double s = 0.0, a = 0.0;
                    for (int d = 0; d < hs; d++) { s += dy(t, d) * at(j, 2, d); a += fabs(dy(t, d) * at(j, 2, d)); }
                    dP[j] = s; ddP[j] = hs * e * a;
                    E[j] = attn_term_err(r.l[j], r.M - r.l[j], r.S[j], hs);
                    Ebar += r.w[j] * E[j];
                }
                double D = 0.0, dD = 0.0;
                for (int j = 0; j <= t; j++) {
                    w[(size_t)t * T + j] = r.w[j];
                    D += r.w[j] * dP[j];
                    // kernel: P from lse (the row's log-sum-exp, l_j - lse = -x_j - log Z); reference: the forward's p
                    double x = r.M + log(r.Z) - r.l[j];
                    EP[(size_t)t * T + j] = kernel ? attn_term_err(r.l[j], x, r.S[j], hs) + bL[((size_t)b * NH + h) * T + t]
                                                   : E[j] + Ebar + (t + 3) * e;
                }
                if (kernel) {
                    for (int d = 0; d < hs; d++) {
                        size_t o = ((size_t)b * T + t) * C + h * hs + d;
                        double yo = 0.0;  // out in float64: sum_j w v
                        for (int j = 0; j <= t; j++) yo += r.w[j] * at(j, 2, d);
                        dD += fabs(dy(t, d)) * bo[o] + hs * e * fabs(dy(t, d) * yo);
                    }
                } else {
                    double aP = 0.0;
                    for (int j = 0; j <= t; j++) { dD += r.w[j] * (EP[(size_t)t * T + j] * fabs(dP[j]) + ddP[j]); aP += r.w[j] * fabs(dP[j]); }
                    dD += (t + 1) * e * aP;
                }
                for (int j = 0; j <= t; j++) {
                    double g = r.w[j] * (dP[j] - D);
                    dS[(size_t)t * T + j] = g;
                    ddS[(size_t)t * T + j] = r.w[j] * (ddP[j] + dD + e * (fabs(dP[j]) + fabs(D)) + EP[(size_t)t * T + j] * fabs(dP[j] - D)) +
                                             (u + e) * fabs(g) + ax;
                }
            }
            for (int t = 0; t < T; t++)
                for (int d = 0; d < hs; d++) {
                    // dq[t] (sum over keys j <= t), dk[t] and dv[t] (sums over queries i >= t)
                    double dq = 0.0, bq = 0.0, aq = 0.0, dk = 0.0, bk = 0.0, ak = 0.0, dv = 0.0, bv = 0.0, av = 0.0, y1 = 0.0;
                    for (int j = 0; j <= t; j++) {
                        double kj = at(j, 1, d), g = dS[(size_t)t * T + j];
                        dq += g * kj; bq += ddS[(size_t)t * T + j] * fabs(kj); aq += fabs(g * kj);
                    }
                    for (int i = t; i < T; i++) {
                        double qi = at(i, 0, d), g = dS[(size_t)i * T + t], p = w[(size_t)i * T + t];
                        dk += g * qi; bk += ddS[(size_t)i * T + t] * fabs(qi); ak += fabs(g * qi);
                        dv += p * dy(i, d); bv += p * fabs(dy(i, d)) * (EP[(size_t)i * T + t] + (kernel ? u : 0.0));
                        av += p * fabs(dy(i, d)); y1 += fabs(dy(i, d));
                    }
                    dq *= scale; dk *= scale;
                    size_t base = ((size_t)b * T + t) * 3 * C + h * hs + d;
                    dinp64[base] = dq;
                    dinp64[base + C] = dk;
                    dinp64[base + 2 * C] = dv;
                    bound[base] = scale * (bq + (t + 1) * e * aq) + (u + 3 * e) * fabs(dq) + ax;
                    bound[base + C] = scale * (bk + (T - t) * e * ak) + (u + 3 * e) * fabs(dk) + ax;
                    bound[base + 2 * C] = bv + (T - t) * e * av + u * fabs(dv) + ax * (1.0 + y1);
                }
        }
}

// the kernels' key tile for head size hs (AttentionTile in attention.cuh): it sets how many online
// rescalings a row goes through
static int attn_tile_rows(int hs) {
    int BR = 0;
    attention_for_head_size(hs, [&](auto tile) { BR = decltype(tile)::BR; });
    return BR;
}

static void test_attention(void) {
    struct { int B, T, C, NH, misalign; } shapes[] = {
        {1, 1, 16, 2, 0}, {2, 7, 24, 2, 0}, {2, 33, 64, 4, 1}, {1, 65, 64, 2, 0}, {1, 130, 64, 1, 0}, {1, 70, 256, 2, 0},
    };
    for (auto s : shapes) {
        int B = s.B, T = s.T, C = s.C, NH = s.NH, off = s.misalign, hs = C / NH, BR = attn_tile_rows(hs);
        size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C, nl = (size_t)B * NH * T;
        char tag[96], what[160];
        snprintf(tag, sizeof(tag), "B=%d T=%d C=%d NH=%d (hs %d, BR %d)%s", B, T, C, NH, hs, BR, off ? " misaligned" : "");

        // ---- forward
        std::vector<float> inp = kc_randn(n3, 1.0f);
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int c = 0; c < C; c++) inp[r * 3 * C + c] *= 2.0f;  // q ~ N(0,4): sharper rows
        std::vector<float> out_ref(n1), lse_ref(nl);
        attention_forward_cpu(out_ref.data(), lse_ref.data(), inp.data(), B, T, C, NH);
        floatX* d_inp_buf = kc_alloc_poisoned<floatX>(n3 + off);
        floatX* d_out_buf = kc_alloc_poisoned<floatX>(n1 + off);
        floatX* d_inp = d_inp_buf + off;
        floatX* d_out = d_out_buf + off;
        copy_floats_to_device(d_inp, inp.data(), n3);
        float* d_lse = kc_alloc_poisoned<float>(nl);
        attention_forward(d_out, d_lse, d_inp, B, T, C, NH, 0);
        std::vector<float> out = kc_download(d_out, n1), lse = kc_download_f32(d_lse, nl);

        // float64 and the bounds: the kernel's (u of floatX, tiles of BR) and the reference's (u = 2^-24, one tile)
        std::vector<double> out64, lse64, bound_out, bound_lse, bound_out_ref, bound_lse_ref;
        attn_forward_f64(inp, B, T, C, NH, KC_UX, BR, out64, lse64, bound_out, bound_lse);
        attn_forward_f64(inp, B, T, C, NH, KC_U32, T, out64, lse64, bound_out_ref, bound_lse_ref);
        snprintf(what, sizeof(what), "attention_forward out %s vs float64", tag);
        attn_check(what, out, out64, bound_out);
        snprintf(what, sizeof(what), "attention_forward lse %s vs float64", tag);
        attn_check(what, lse, lse64, bound_lse);
        snprintf(what, sizeof(what), "attention_forward out %s vs attention_forward_cpu", tag);
        attn_check(what, out, out_ref, attn_add(bound_out, bound_out_ref));
        snprintf(what, sizeof(what), "attention_forward lse %s vs attention_forward_cpu", tag);
        attn_check(what, lse, lse_ref, attn_add(bound_lse, bound_lse_ref));
        snprintf(what, sizeof(what), "attention_forward_cpu out %s vs float64", tag);
        attn_check(what, out_ref, out64, bound_out_ref);
        snprintf(what, sizeof(what), "attention_forward_cpu lse %s vs float64", tag);
        attn_check(what, lse_ref, lse64, bound_lse_ref);

        // determinism: a second forward from fresh poison gives the same bits
        {
            floatX* d_out2_buf = kc_alloc_poisoned<floatX>(n1 + off);
            float* d_lse2 = kc_alloc_poisoned<float>(nl);
            attention_forward(d_out2_buf + off, d_lse2, d_inp, B, T, C, NH, 0);
            snprintf(what, sizeof(what), "attention_forward twice: bitwise equal out and lse %s", tag);
            check(attn_bitwise_equal(d_out, d_out2_buf + off, n1) && attn_bitwise_equal(d_lse, d_lse2, nl), "%s", what);
            device_free(d_out2_buf);
            device_free(d_lse2);
        }

        // ---- backward, from the kernel forward's out and lse
        std::vector<float> dout = kc_randn(n1, 1.0f), dinp_ref(n3);
        attention_backward_cpu(dinp_ref.data(), dout.data(), inp.data(), B, T, C, NH);
        floatX* d_dout_buf = kc_alloc_poisoned<floatX>(n1 + off);
        floatX* d_dinp_buf = kc_alloc_poisoned<floatX>(n3 + off);
        floatX* d_dout = d_dout_buf + off;
        floatX* d_dinp = d_dinp_buf + off;
        copy_floats_to_device(d_dout, dout.data(), n1);
        float* d_scratch = kc_alloc_poisoned<float>(nl);
        attention_backward(d_dinp, d_scratch, d_dout, d_inp, d_out, d_lse, B, T, C, NH, 0);
        std::vector<float> dinp = kc_download(d_dinp, n3);

        std::vector<double> dinp64, bound_dinp, bound_dinp_ref;
        attn_backward_f64(inp, dout, B, T, C, NH, KC_UX, 1, bound_out, bound_lse, dinp64, bound_dinp);
        attn_backward_f64(inp, dout, B, T, C, NH, KC_U32, 0, bound_out_ref, bound_lse_ref, dinp64, bound_dinp_ref);
        snprintf(what, sizeof(what), "attention_backward dinp %s vs float64", tag);
        attn_check(what, dinp, dinp64, bound_dinp);
        snprintf(what, sizeof(what), "attention_backward dinp %s vs attention_backward_cpu", tag);
        attn_check(what, dinp, dinp_ref, attn_add(bound_dinp, bound_dinp_ref));
        snprintf(what, sizeof(what), "attention_backward_cpu dinp %s vs float64", tag);
        attn_check(what, dinp_ref, dinp64, bound_dinp_ref);

        // determinism: a second backward from fresh poison gives the same bits
        {
            floatX* d_dinp2_buf = kc_alloc_poisoned<floatX>(n3 + off);
            kc_poison(d_scratch, nl * sizeof(float));
            attention_backward(d_dinp2_buf + off, d_scratch, d_dout, d_inp, d_out, d_lse, B, T, C, NH, 0);
            snprintf(what, sizeof(what), "attention_backward twice: bitwise equal dinp %s", tag);
            check(attn_bitwise_equal(d_dinp, d_dinp2_buf + off, n3), "%s", what);
            device_free(d_dinp2_buf);
        }

        device_free(d_inp_buf);
        device_free(d_out_buf);
        device_free(d_lse);
        device_free(d_scratch);
        device_free(d_dout_buf);
        device_free(d_dinp_buf);
    }
}

// attention_decode (one query against a KV cache, the sampler's step) against an independent float64
// evaluation of softmax(q k^T / sqrt(hs)) v per head, and its CPU reference against the last row of
// attention_forward_cpu on the same q, k, v (the cache holds exactly the keys and values the full
// attention would see). Tolerances: FP32: dot products of hs <= 48 terms and sums of len <= 300
// probabilities in float, ~1e-6 relative to the output's scale (|v| ~ 1): atol 2e-6 (x scale), rtol
// 1e-5 (observed ~2e-7). BF16: the inputs are the same bf16 values for the kernel and the float64
// evaluation, and the kernel's FP32 result is rounded once to bf16: the FP32 atol 2e-6, and rtol 4e-3
// (2^-8 plus the FP32 rtol). A wrong scale (no 1/sqrt(hs)), a dropped position, or a head's channels
// misplaced moves outputs by > 1e-2.
static void test_attention_decode(void) {
    // the last case has one key 16 q (a score ~110 above the others) at position 40, which the
    // kernel's second warp scores: the softmax must take the block's max, not one warp's, or e^(s - max)
    // overflows (the output is then still one convex combination of v, dominated by v[40])
    struct { int len, maxT, C, NH, peak; } cases[] = {{1, 4, 16, 2, -1}, {7, 9, 32, 4, -1}, {64, 64, 64, 4, -1},
                                                      {300, 320, 96, 2, -1}, {300, 320, 96, 2, 40}};
    for (auto cs : cases) {
        int len = cs.len, maxT = cs.maxT, C = cs.C, NH = cs.NH, hs = C / NH;
        std::vector<float> q = kc_randn(C, 1.0f), kc = kc_randn((size_t)maxT * C, 1.0f), vc = kc_randn((size_t)maxT * C, 1.0f);
        if (cs.peak >= 0) for (int c = 0; c < C; c++) kc[(size_t)cs.peak * C + c] = 16.0f * q[c];  // exact in bf16 too
        floatX* d_q = kc_upload(q);
        floatX* d_k = kc_upload(kc);
        floatX* d_v = kc_upload(vc);
        floatX* d_out = kc_alloc_poisoned<floatX>(C);
        float* d_scores = kc_alloc_poisoned<float>((size_t)NH * maxT);
        attention_decode(d_out, d_scores, d_q, d_k, d_v, len, maxT, C, NH, 0);
        std::vector<float> want(C);
        for (int h = 0; h < NH; h++) {  // float64: the math as written
            std::vector<double> s(len);
            double m = -1e300, sum = 0.0;
            for (int t = 0; t < len; t++) {
                double d = 0.0;
                for (int i = 0; i < hs; i++) d += (double)q[h * hs + i] * kc[(size_t)t * C + h * hs + i];
                s[t] = d / sqrt((double)hs);
                m = s[t] > m ? s[t] : m;
            }
            for (int t = 0; t < len; t++) { s[t] = exp(s[t] - m); sum += s[t]; }
            for (int i = 0; i < hs; i++) {
                double o = 0.0;
                for (int t = 0; t < len; t++) o += s[t] / sum * vc[(size_t)t * C + h * hs + i];
                want[h * hs + i] = (float)o;
            }
        }
        char what[128];
        snprintf(what, sizeof(what), "attention_decode len=%d maxT=%d C=%d NH=%d%s vs float64", len, maxT, C, NH,
                 cs.peak >= 0 ? " (one dominant key, in the second warp)" : "");
        kc_compare(what, kc_download(d_out, C), want, 2e-6f, 1e-5f, 2e-6f, 4e-3f);
        // the CPU reference is the last row of the full causal attention over the same positions
        std::vector<float> inp((size_t)len * 3 * C), full((size_t)len * C), lse((size_t)NH * len);
        for (int t = 0; t < len; t++) {
            for (int c = 0; c < C; c++) {
                inp[(size_t)t * 3 * C + c] = t == len - 1 ? q[c] : 0.0f;
                inp[(size_t)t * 3 * C + C + c] = kc[(size_t)t * C + c];
                inp[(size_t)t * 3 * C + 2 * C + c] = vc[(size_t)t * C + c];
            }
        }
        attention_forward_cpu(full.data(), lse.data(), inp.data(), 1, len, C, NH);
        std::vector<float> ref(C), scores((size_t)NH * maxT);
        attention_decode_cpu(ref.data(), scores.data(), q.data(), kc.data(), vc.data(), len, maxT, C, NH);
        snprintf(what, sizeof(what), "attention_decode_cpu len=%d C=%d NH=%d vs the last row of attention_forward_cpu", len, C, NH);
        check_close(what, ref.data(), full.data() + (size_t)(len - 1) * C, C, 1e-6f, 1e-5f);
        device_free(d_q); device_free(d_k); device_free(d_v); device_free(d_out); device_free(d_scores);
    }
}
