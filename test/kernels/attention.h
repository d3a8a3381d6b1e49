// test/kernels/attention.h: attention_forward and attention_backward (CUDA path: permutes, batched
// cuBLASLt products, causal softmax kernels) against attention_forward_cpu / attention_backward_cpu
// on the same floatX-rounded inputs, and kernels and references against a float64 attention written
// here: softmax_{j <= t}(q_t . k_j / sqrt(hs)) v (Vaswani et al. 2017, eq. 1, with GPT-2's causal mask)
// and its gradient, with 1/sqrt(hs) computed in float64. The kernels and the references both take
// scale = 1/sqrtf(hs) and the same formulas, so their agreement alone cannot see a wrong scale (1/hs,
// 1/sqrt(C)) or softmax-backward expression; the float64 comparison does (a wrong scale moves the
// probabilities by tens of percent).
//
// Shapes (B,T,C,NH), hs = C/NH:
//   (1,1,16,2)    hs 8, a single position
//   (2,7,32,4)    hs 8, T not a multiple of the 8 (BF16) / 4 (FP32) columns of a 128-bit chunk:
//                 the scalar softmax kernels
//   (2,33,64,4)   hs 16, T = 33 (one row longer than a warp's 32 lanes); run twice: once with the
//                 token-layout tensors (inp, out, dout, dinp) one element off 16-byte alignment (the
//                 scalar permute kernels), once with the causal products cut into chunks of 8 rows
//                 (5 chunks, the last of 1 row)
//   (1,64,128,2)  hs 64, the 128-bit softmax kernels; also in chunks of 16 rows
//   (2,40,64,1)   hs 64, one head, chunks of 8 rows
//   (1,264,32,2)  hs 16, rows of more than 32 chunks of 128 bits: some lanes take two or more chunks
//                 (the online max rescales a lane's running sum)
//   (1,520,16,2)  hs 8, T >= 512: the default cut of the causal products into 2 chunks (264 + 256 rows)
// Inputs: qkv and dout ~ N(0,1) (the logits q.k/sqrt(hs) are then ~N(0,1) whatever hs is).
// Before every launch the outputs and the scratch buffers are poisoned (NaN bytes), so an element
// the kernels leave unwritten fails (including att above the diagonal, which must be exactly 0).
// The backward runs on the reference's att rounded to floatX (the tensor the forward would have
// kept) and on the kernel forward's qkvr, which must be an exact permutation of inp (checked
// bitwise). Forward and backward each run twice: bitwise equal results (determinism).
//
// Tolerances: an error bound per element, propagated along the CUDA path in double precision from
// the inputs, with u the unit roundoff of a stored value (2^-8 in BF16: 8 significant bits; 2^-11 in
// FP16, where every stored value also carries KC_AX = 2^-25 absolute for the subnormals; 2^-24 in FP32) and e = 2^-24 for FP32 arithmetic. A sum of n terms in FP32 is off by at most n e sum|terms|
// (counted twice: the kernel's and the reference's orders differ). Forward, per row t of a head:
//   pre_j = q.k_j (stored in att):  hs e sum|q k_j| (x2), then rounded: u |pre_j|
//   logit l_j = scale pre_j:        dl_j = scale (2 hs e sum|q k_j| + u |pre_j|) + 2 e |l_j|
//   exp(x_j), x_j = l_j - max:      E_j = dl_j + e |x_j| + (3 + 1.2 |x_j|) 2^-23 (the kernel's fast
//                                   __expf: 2 + 1.17 |x| ulp; the reference's expf: 1 ulp)
//   p_j = exp(x_j) / sum:           dp_j = p_j (E_j + sum_k p_k E_k + (T+2) e + u)   (the max cancels)
//   y = sum_j p_j v_j (stored):     sum_j dp_j |v_j| + 2 T e sum_j p_j |v_j| + u |y|
// Backward, with a = the given att (the same for kernel and reference):
//   datt_ij = dy_i.v_j (stored):    d = 2 hs e sum|dy_i v_j| + u |datt_ij|
//   dot_i = sum_j a_ij datt_ij:     sum_j a_ij d_ij + 2 T e sum_j a_ij |datt_ij|
//   dpre_ij = scale a_ij (datt_ij - dot_i) (stored):
//                                   scale a_ij (d_ij + ddot_i + 2 e (|datt_ij| + |dot_i|)) + (u + e) |dpre_ij|
//   dq_i = sum_j dpre_ij k_j:       sum_j ddpre_ij |k_j| + 2 T e sum_j |dpre_ij k_j| + u |dq_i|
//   dk_j = sum_i dpre_ij q_i:       sum_i ddpre_ij |q_i| + 2 T e sum_i |dpre_ij q_i| + u |dk_j|
//   dv_j = sum_i a_ij dy_i:         2 T e sum_i a_ij |dy_i| + u |dv_j|
// These are first-order worst cases (every rounding error at its maximum, all with the same sign);
// a check passes when |got - want| <= 2 bound (the factor 2 covers second-order terms) and
// reports the largest ratio |got - want| / bound seen. The permutes only copy: exact.
// The same bounds serve against float64 (they count both sides' FP32 sums, so they cover one side):
// the kernel with u of its floatX, the reference with u = 2^-24 (it stores nothing in bf16). Observed:
// up to ~0.1 of the bound in FP32, where it is a worst case over summation orders (the products'
// order is the library's choice on a GPU), and up to ~1 in BF16, where the roundings to bf16 of att and
// of the outputs dominate.
#pragma once
#include "../kernel_check.h"
#include "../../llm/ops/attention.cuh"

// (B,T,3C) -> q, k, v as (B,NH,T,hs) each, one after the other: what qkvr must hold
static std::vector<float> attn_heads(const std::vector<float>& inp, int B, int T, int C, int NH) {
    int hs = C / NH;
    std::vector<float> r(inp.size());
    for (int m = 0; m < 3; m++)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < T; t++)
                    for (int d = 0; d < hs; d++)
                        r[((((size_t)m * B + b) * NH + h) * T + t) * hs + d] =
                            inp[((size_t)b * T + t) * 3 * C + m * C + h * hs + d];
    return r;
}

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

static bool attn_bitwise_equal(const floatX* d1, const floatX* d2, size_t n) {
    std::vector<floatX> h1(n), h2(n);
    copy_to_host(h1.data(), d1, n * sizeof(floatX));
    copy_to_host(h2.data(), d2, n * sizeof(floatX));
    return memcmp(h1.data(), h2.data(), n * sizeof(floatX)) == 0;
}

// the forward in float64 (out64, att64) and the error bounds of the CUDA path (top of this file), with
// u the unit roundoff of a stored value; heads: q, k, v as attn_heads gives them
static void attn_forward_f64(const std::vector<float>& heads, int B, int T, int C, int NH, double u,
                             std::vector<double>& out64, std::vector<double>& att64, std::vector<double>& bound_out,
                             std::vector<double>& bound_att) {
    const double e = KC_U32, ax = u > e ? KC_AX : 0.0;  // ax: a stored floatX's absolute error (FP16 subnormals)
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    out64.assign((size_t)B * T * C, 0.0);
    att64.assign((size_t)B * NH * T * T, 0.0);
    bound_out.assign((size_t)B * T * C, 0.0);
    bound_att.assign((size_t)B * NH * T * T, 0.0);
    std::vector<double> l(T), S(T), pre(T), p(T), E(T), dp(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float* q = &heads[(((size_t)0 * B + b) * NH + h) * T * hs + (size_t)t * hs];
                double m = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    const float* k = &heads[(((size_t)1 * B + b) * NH + h) * T * hs + (size_t)j * hs];
                    double sum = 0.0, sabs = 0.0;
                    for (int d = 0; d < hs; d++) { sum += (double)q[d] * k[d]; sabs += fabs((double)q[d] * k[d]); }
                    pre[j] = sum; S[j] = sabs; l[j] = scale * sum;
                    m = fmax(m, l[j]);
                }
                double z = 0.0, Ebar = 0.0;
                for (int j = 0; j <= t; j++) { p[j] = exp(l[j] - m); z += p[j]; }
                for (int j = 0; j <= t; j++) {
                    p[j] /= z;
                    double x = fabs(l[j] - m);
                    double dl = scale * (2.0 * hs * e * S[j] + u * fabs(pre[j]) + ax) + 2.0 * e * fabs(l[j]);
                    E[j] = dl + e * x + (3.0 + 1.2 * x) * 2.0 * e;
                    Ebar += p[j] * E[j];
                }
                size_t arow = (((size_t)b * NH + h) * T + t) * T;
                for (int j = 0; j <= t; j++) {
                    dp[j] = p[j] * (E[j] + Ebar + (T + 2) * e + u);
                    att64[arow + j] = p[j];
                    bound_att[arow + j] = dp[j] + ax;
                }
                for (int d = 0; d < hs; d++) {
                    double ey = 0.0, pv = 0.0, y = 0.0;
                    for (int j = 0; j <= t; j++) {
                        double vj = heads[(((size_t)2 * B + b) * NH + h) * T * hs + (size_t)j * hs + d];
                        ey += dp[j] * fabs(vj); pv += p[j] * fabs(vj); y += p[j] * vj;
                    }
                    size_t o = ((size_t)b * T + t) * C + h * hs + d;
                    out64[o] = y;
                    bound_out[o] = ey + 2.0 * T * e * pv + u * fabs(y) + ax;
                }
            }
}

// the backward in float64 (dinp64, (B,T,3C)) from the given att a and dout, and the error bounds of the
// CUDA path (top of this file), with u the unit roundoff of a stored value
static void attn_backward_f64(const std::vector<float>& heads, const std::vector<float>& a_in,
                              const std::vector<float>& dout, int B, int T, int C, int NH, double u,
                              std::vector<double>& dinp64, std::vector<double>& bound_dinp) {
    const double e = KC_U32, ax = u > e ? KC_AX : 0.0;  // ax: a stored floatX's absolute error (FP16 subnormals)
    int hs = C / NH;
    size_t n1 = (size_t)B * T * C;
    double scale = 1.0 / sqrt((double)hs);
    dinp64.assign(3 * n1, 0.0);
    bound_dinp.assign(3 * n1, 0.0);
    std::vector<double> datt((size_t)T * T), ddatt((size_t)T * T), dpre((size_t)T * T), ddpre((size_t)T * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t hoff = ((size_t)b * NH + h) * T * hs;
            const float* q = &heads[(size_t)0 * n1 + hoff];
            const float* k = &heads[(size_t)1 * n1 + hoff];
            const float* v = &heads[(size_t)2 * n1 + hoff];
            const float* a = &a_in[((size_t)b * NH + h) * T * T];
            auto dy = [&](int t, int d) { return (double)dout[((size_t)b * T + t) * C + h * hs + d]; };
            for (int i = 0; i < T; i++) {
                double dot = 0.0, ddot = 0.0, adabs = 0.0;
                for (int j = 0; j <= i; j++) {
                    double sm = 0.0, sabs = 0.0;
                    for (int d = 0; d < hs; d++) { sm += dy(i, d) * v[(size_t)j * hs + d]; sabs += fabs(dy(i, d) * v[(size_t)j * hs + d]); }
                    datt[(size_t)i * T + j] = sm;
                    ddatt[(size_t)i * T + j] = 2.0 * hs * e * sabs + u * fabs(sm) + ax;
                    double aij = a[(size_t)i * T + j];
                    dot += aij * sm; ddot += aij * ddatt[(size_t)i * T + j]; adabs += aij * fabs(sm);
                }
                ddot += 2.0 * T * e * adabs;
                for (int j = 0; j <= i; j++) {
                    double aij = a[(size_t)i * T + j], dij = datt[(size_t)i * T + j];
                    double g = scale * aij * (dij - dot);
                    dpre[(size_t)i * T + j] = g;
                    ddpre[(size_t)i * T + j] = scale * aij * (ddatt[(size_t)i * T + j] + ddot + 2.0 * e * (fabs(dij) + fabs(dot))) +
                                               (u + e) * fabs(g) + ax;
                }
            }
            for (int t = 0; t < T; t++)
                for (int d = 0; d < hs; d++) {
                    // dq[t] (sum over keys j <= t), dk[t] and dv[t] (sums over queries i >= t)
                    double dq = 0.0, bq = 0.0, aq = 0.0, dk = 0.0, bk = 0.0, ak = 0.0, dv = 0.0, av = 0.0;
                    for (int j = 0; j <= t; j++) {
                        double kj = k[(size_t)j * hs + d];
                        dq += dpre[(size_t)t * T + j] * kj;
                        bq += ddpre[(size_t)t * T + j] * fabs(kj);
                        aq += fabs(dpre[(size_t)t * T + j] * kj);
                    }
                    for (int i = t; i < T; i++) {
                        double qi = q[(size_t)i * hs + d];
                        dk += dpre[(size_t)i * T + t] * qi;
                        bk += ddpre[(size_t)i * T + t] * fabs(qi);
                        ak += fabs(dpre[(size_t)i * T + t] * qi);
                        dv += a[(size_t)i * T + t] * dy(i, d);
                        av += a[(size_t)i * T + t] * fabs(dy(i, d));
                    }
                    size_t base = ((size_t)b * T + t) * 3 * C + h * hs + d;
                    dinp64[base] = dq;
                    dinp64[base + C] = dk;
                    dinp64[base + 2 * C] = dv;
                    bound_dinp[base] = bq + 2.0 * T * e * aq + u * fabs(dq) + ax;
                    bound_dinp[base + C] = bk + 2.0 * T * e * ak + u * fabs(dk) + ax;
                    bound_dinp[base + 2 * C] = 2.0 * T * e * av + u * fabs(dv) + ax;
                }
        }
}

static void test_attention(void) {
    struct { int B, T, C, NH, chunk_rows, misalign; } shapes[] = {
        {1, 1, 16, 2, 0, 0}, {2, 7, 32, 4, 0, 0}, {2, 33, 64, 4, 0, 1}, {2, 33, 64, 4, 8, 0},
        {1, 64, 128, 2, 0, 0}, {1, 64, 128, 2, 16, 0}, {2, 40, 64, 1, 8, 0}, {1, 264, 32, 2, 0, 0},
        {1, 520, 16, 2, 0, 0},
    };
    for (auto s : shapes) {
        int B = s.B, T = s.T, C = s.C, NH = s.NH, off = s.misalign;
        size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
        llm_ctx.attention_chunk_rows = s.chunk_rows;
        char tag[96], what[160];
        snprintf(tag, sizeof(tag), "B=%d T=%d C=%d NH=%d%s%s", B, T, C, NH, off ? " misaligned" : "",
                 s.chunk_rows ? " chunked" : "");

        // ---- forward
        std::vector<float> inp = kc_randn(n3, 1.0f);
        std::vector<float> out_ref(n1), att_ref(natt);
        attention_forward_cpu(out_ref.data(), att_ref.data(), inp.data(), B, T, C, NH);
        floatX* d_inp_buf = kc_alloc_poisoned<floatX>(n3 + off);
        floatX* d_out_buf = kc_alloc_poisoned<floatX>(n1 + off);
        floatX* d_inp = d_inp_buf + off;
        floatX* d_out = d_out_buf + off;
        copy_floats_to_device(d_inp, inp.data(), n3);
        floatX* d_qkvr = kc_alloc_poisoned<floatX>(n3);
        floatX* d_att = kc_alloc_poisoned<floatX>(natt);
        floatX* d_scratch = kc_alloc_poisoned<floatX>(n1);
        attention_forward(d_out, d_qkvr, d_att, d_scratch, d_inp, B, T, C, NH, 0);
        std::vector<float> out = kc_download(d_out, n1), att = kc_download(d_att, natt);
        std::vector<float> qkvr = kc_download(d_qkvr, n3), heads = attn_heads(inp, B, T, C, NH);
        snprintf(what, sizeof(what), "attention_forward qkvr is inp permuted (exact) %s", tag);
        check(memcmp(qkvr.data(), heads.data(), n3 * sizeof(float)) == 0, "%s", what);

        // float64 and the bounds: the kernel's (u of floatX) and the reference's (u = 2^-24)
        std::vector<double> out64, att64, bound_out, bound_att, bound_out_ref, bound_att_ref;
        attn_forward_f64(heads, B, T, C, NH, KC_UX, out64, att64, bound_out, bound_att);
        attn_forward_f64(heads, B, T, C, NH, KC_U32, out64, att64, bound_out_ref, bound_att_ref);
        snprintf(what, sizeof(what), "attention_forward out %s", tag);
        attn_check(what, out, out_ref, bound_out);
        snprintf(what, sizeof(what), "attention_forward att %s", tag);
        attn_check(what, att, att_ref, bound_att);
        snprintf(what, sizeof(what), "attention_forward out %s vs float64", tag);
        attn_check(what, out, out64, bound_out);
        snprintf(what, sizeof(what), "attention_forward att %s vs float64", tag);
        attn_check(what, att, att64, bound_att);
        snprintf(what, sizeof(what), "attention_forward_cpu out %s vs float64", tag);
        attn_check(what, out_ref, out64, bound_out_ref);
        snprintf(what, sizeof(what), "attention_forward_cpu att %s vs float64", tag);
        attn_check(what, att_ref, att64, bound_att_ref);

        // determinism: a second forward from fresh poison gives the same bits
        {
            floatX* d_out2_buf = kc_alloc_poisoned<floatX>(n1 + off);
            floatX* d_att2 = kc_alloc_poisoned<floatX>(natt);
            kc_poison(d_qkvr, n3 * sizeof(floatX));
            kc_poison(d_scratch, n1 * sizeof(floatX));
            attention_forward(d_out2_buf + off, d_qkvr, d_att2, d_scratch, d_inp, B, T, C, NH, 0);
            snprintf(what, sizeof(what), "attention_forward twice: bitwise equal out and att %s", tag);
            check(attn_bitwise_equal(d_out, d_out2_buf + off, n1) && attn_bitwise_equal(d_att, d_att2, natt), "%s", what);
            device_free(d_out2_buf);
            device_free(d_att2);
        }

        // ---- backward, from the reference att rounded to floatX and the kernel's (exact) qkvr
        std::vector<float> a_in(natt), dout = kc_randn(n1, 1.0f), dinp_ref(n3);
        for (size_t i = 0; i < natt; i++) a_in[i] = (float)(floatX)att_ref[i];
        attention_backward_cpu(dinp_ref.data(), dout.data(), inp.data(), a_in.data(), B, T, C, NH);
        floatX* d_a = kc_upload(a_in);
        floatX* d_dout_buf = kc_alloc_poisoned<floatX>(n1 + off);
        floatX* d_dinp_buf = kc_alloc_poisoned<floatX>(n3 + off);
        floatX* d_dout = d_dout_buf + off;
        floatX* d_dinp = d_dinp_buf + off;
        copy_floats_to_device(d_dout, dout.data(), n1);
        floatX* d_dqkvr = kc_alloc_poisoned<floatX>(n3);
        floatX* d_datt = kc_alloc_poisoned<floatX>(natt);
        kc_poison(d_scratch, n1 * sizeof(floatX));
        attention_backward(d_dinp, d_dqkvr, d_datt, d_scratch, d_dout, d_inp, d_qkvr, d_a, B, T, C, NH, 0);
        std::vector<float> dinp = kc_download(d_dinp, n3);

        std::vector<double> dinp64, bound_dinp, bound_dinp_ref;
        attn_backward_f64(heads, a_in, dout, B, T, C, NH, KC_UX, dinp64, bound_dinp);
        attn_backward_f64(heads, a_in, dout, B, T, C, NH, KC_U32, dinp64, bound_dinp_ref);
        snprintf(what, sizeof(what), "attention_backward dinp %s", tag);
        attn_check(what, dinp, dinp_ref, bound_dinp);
        snprintf(what, sizeof(what), "attention_backward dinp %s vs float64", tag);
        attn_check(what, dinp, dinp64, bound_dinp);
        snprintf(what, sizeof(what), "attention_backward_cpu dinp %s vs float64", tag);
        attn_check(what, dinp_ref, dinp64, bound_dinp_ref);

        // determinism: a second backward from fresh poison gives the same bits
        {
            floatX* d_dinp2_buf = kc_alloc_poisoned<floatX>(n3 + off);
            kc_poison(d_dqkvr, n3 * sizeof(floatX));
            kc_poison(d_datt, natt * sizeof(floatX));
            kc_poison(d_scratch, n1 * sizeof(floatX));
            attention_backward(d_dinp2_buf + off, d_dqkvr, d_datt, d_scratch, d_dout, d_inp, d_qkvr, d_a, B, T, C, NH, 0);
            snprintf(what, sizeof(what), "attention_backward twice: bitwise equal dinp %s", tag);
            check(attn_bitwise_equal(d_dinp, d_dinp2_buf + off, n3), "%s", what);
            device_free(d_dinp2_buf);
        }

        device_free(d_inp_buf);
        device_free(d_out_buf);
        device_free(d_qkvr);
        device_free(d_att);
        device_free(d_scratch);
        device_free(d_a);
        device_free(d_dout_buf);
        device_free(d_dinp_buf);
        device_free(d_dqkvr);
        device_free(d_datt);
    }
    llm_ctx.attention_chunk_rows = 0;
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
        std::vector<float> inp((size_t)len * 3 * C), full((size_t)len * C), att((size_t)NH * len * len);
        for (int t = 0; t < len; t++) {
            for (int c = 0; c < C; c++) {
                inp[(size_t)t * 3 * C + c] = t == len - 1 ? q[c] : 0.0f;
                inp[(size_t)t * 3 * C + C + c] = kc[(size_t)t * C + c];
                inp[(size_t)t * 3 * C + 2 * C + c] = vc[(size_t)t * C + c];
            }
        }
        attention_forward_cpu(full.data(), att.data(), inp.data(), 1, len, C, NH);
        std::vector<float> ref(C), scores((size_t)NH * maxT);
        attention_decode_cpu(ref.data(), scores.data(), q.data(), kc.data(), vc.data(), len, maxT, C, NH);
        snprintf(what, sizeof(what), "attention_decode_cpu len=%d C=%d NH=%d vs the last row of attention_forward_cpu", len, C, NH);
        check_close(what, ref.data(), full.data() + (size_t)(len - 1) * C, C, 1e-6f, 1e-5f);
        device_free(d_q); device_free(d_k); device_free(d_v); device_free(d_out); device_free(d_scores);
    }
}
