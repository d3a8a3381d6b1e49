// attention_blocks.h: the CPU math of FlashAttention's blocks (one part of llm/ops/attention.cuh's CPU
// reference, in its own file because attention.cuh holds the CUDA path too and the next stages -- the fused
// kernels and ring attention -- call these pieces by themselves). For one (b, h) of causal attention:
//   attention_block_cpu:          a block of queries [q0, q0+nq) against a block of keys/values
//                                 [k0, k0+nk): the unnormalised output, the row max, the row sum
//   attention_merge_cpu:          the online-softmax merge of two partial results of the same rows
//                                 (Milakov & Gimelshein 2018; Dao 2023, "FlashAttention-2", Algorithm 1)
//   attention_finalise_cpu:       out = O~ / l and the row log-sum-exp L = m + log l
//   attention_block_backward_cpu: one block pair's share of dq, dk, dv from the saved L
//                                 (FlashAttention-2, Algorithm 2)
// Merging the blocks of a row in any order and finalising gives attention_forward_cpu's output; summing the
// block backward over all block pairs gives attention_backward_cpu's dinp (test/test_attention_blocks.cu).
// Plain loops: the reference a reader checks the kernels against, not a fast path.
//
// Layout: q, k, v (and their gradients) point at position 0 of one head; position t's row of hs floats is
// at offset t * stride (in the model's (B,T,3C) qkv, stride = 3C and q/k/v at channel offsets 0/C/2C + h*hs).
#pragma once
#include <math.h>
#include "../core/common.h"  // mallocCheck

// s_ij = q_i . k_j / sqrt(hs) in double (the products of floats are exact in double, the sum of hs of
// them errs by ~hs * 2^-53: the scores are as good as the FP32 inputs allow)
static double attention_block_score(const float* q, const float* k, int hs, double scale) {
    double s = 0.0;
    for (int c = 0; c < hs; c++) s += (double)q[c] * (double)k[c];
    return s * scale;
}

// The attention of queries [q0, q0+nq) against keys/values [k0, k0+nk), causal (key j > query i masked):
//   m_i = max_j s_ij,   l_i = sum_j exp(s_ij - m_i),   O~_i = sum_j exp(s_ij - m_i) v_j   (unnormalised)
// over the unmasked j. A row whose keys are all masked gets m = -inf, l = 0, O~ = 0 (the empty result,
// which attention_merge_cpu treats as the identity). Sums in double, rounded once to float.
static void attention_block_cpu(float* O,        // (nq, hs) unnormalised output O~
                                float* m,        // (nq) row max of the scores (-inf: no unmasked key)
                                float* l,        // (nq) row sum of exp(s - m)
                                const float* q,  // (T, stride): query of position t at q + t*stride
                                const float* k,  // (T, stride)
                                const float* v,  // (T, stride)
                                int stride, int hs, int q0, int nq, int k0, int nk) {
    double scale = 1.0 / sqrt((double)hs);
    double* s = (double*)mallocCheck((size_t)(nk > 0 ? nk : 1) * sizeof(double));  // (nk) one row of scores
    double* acc = (double*)mallocCheck((size_t)hs * sizeof(double));                // (hs) one row of O~
    for (int i = 0; i < nq; i++) {
        int t = q0 + i;
        int jend = t - k0 + 1 < nk ? t - k0 + 1 : nk;  // keys j < jend are at positions <= t (causal)
        double mx = -INFINITY;
        for (int j = 0; j < jend; j++) {
            s[j] = attention_block_score(q + (size_t)t * stride, k + (size_t)(k0 + j) * stride, hs, scale);
            if (s[j] > mx) mx = s[j];
        }
        double sum = 0.0;
        for (int c = 0; c < hs; c++) acc[c] = 0.0;
        for (int j = 0; j < jend; j++) {  // jend <= 0: nothing, the empty result
            double p = exp(s[j] - mx);
            sum += p;
            const float* vj = v + (size_t)(k0 + j) * stride;
            for (int c = 0; c < hs; c++) acc[c] += p * (double)vj[c];
        }
        m[i] = jend > 0 ? (float)mx : -INFINITY;
        l[i] = (float)sum;
        for (int c = 0; c < hs; c++) O[(size_t)i * hs + c] = (float)acc[c];
    }
    free(s);
    free(acc);
}

// The online-softmax merge of two partial results (m1, l1, O1) and (m2, l2, O2) of the same nq rows, each
// over a disjoint set of keys; the result may overwrite either input (m, l, O may alias m1/l1/O1 or m2/...):
//   m = max(m1, m2),  l = l1 e^(m1-m) + l2 e^(m2-m),  O = O1 e^(m1-m) + O2 e^(m2-m)
// An empty part (m = -inf, l = 0, O = 0) gets the factor 0 outright: e^(-inf - m) is 0 for finite m, but
// two empty parts would give e^(-inf + inf) = NaN, so the factors are taken as 0 there. FP32 math: each
// merge rounds l and O by a few units of 2^-24 relative.
static void attention_merge_cpu(float* m, float* l, float* O,                    // (nq), (nq), (nq, hs)
                                const float* m1, const float* l1, const float* O1,  // (nq), (nq), (nq, hs)
                                const float* m2, const float* l2, const float* O2,  // (nq), (nq), (nq, hs)
                                int nq, int hs) {
    for (int i = 0; i < nq; i++) {
        float mi = fmaxf(m1[i], m2[i]);
        float a1 = m1[i] == -INFINITY ? 0.0f : expf(m1[i] - mi);  // rescales part 1 to the common max
        float a2 = m2[i] == -INFINITY ? 0.0f : expf(m2[i] - mi);
        float li = l1[i] * a1 + l2[i] * a2;
        for (int c = 0; c < hs; c++) {
            size_t x = (size_t)i * hs + c;
            O[x] = O1[x] * a1 + O2[x] * a2;
        }
        m[i] = mi;
        l[i] = li;
    }
}

// The end of a row: out = O~ / l (the softmax's normalisation) and the row log-sum-exp
// L = m + log l = log sum_j exp(s_ij), the one number per row the backward needs. A row with no key
// (l = 0) gets out = 0 and L = -inf.
static void attention_finalise_cpu(float* out,      // (nq, out_stride): row i at out + i*out_stride
                                   float* L,        // (nq) row log-sum-exp
                                   const float* O,  // (nq, hs) unnormalised output
                                   const float* m, const float* l,  // (nq), (nq)
                                   int out_stride, int nq, int hs) {
    for (int i = 0; i < nq; i++) {
        float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        for (int c = 0; c < hs; c++) out[(size_t)i * out_stride + c] = O[(size_t)i * hs + c] * inv;
        L[i] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
    }
}

// The backward of one block pair (queries [q0, q0+nq), keys/values [k0, k0+nk)) from the forward's row
// log-sum-exp L and output out, accumulated (+=) into dq, dk, dv (FlashAttention-2, Algorithm 2):
//   P_ij = exp(s_ij - L_i)              the probabilities, recomputed (0 where masked)
//   D_i  = rowsum(dO_i * O_i)           = sum_j P_ij dP_ij over the whole row: the softmax backward's dot
//   dV_j += sum_i P_ij dO_i             (dV += P^T dO)
//   dP_ij = dO_i . v_j                  (dP = dO V^T)
//   dS_ij = P_ij (dP_ij - D_i)
//   dQ_i += sum_j dS_ij k_j / sqrt(hs),   dK_j += sum_i dS_ij q_i / sqrt(hs)
// Summed over all block pairs of a row this is attention_backward_cpu's dinp. Per block in double, each
// gradient row rounded to float once per block pair when added.
static void attention_block_backward_cpu(float* dq, float* dk, float* dv,  // (T, stride) each, accumulated
                                         const float* dO,   // (T, o_stride) d loss / d out
                                         const float* out,  // (T, o_stride) the forward's (normalised) output
                                         const float* L,    // (T) the forward's row log-sum-exp
                                         const float* q, const float* k, const float* v,  // (T, stride) each
                                         int stride, int o_stride, int hs, int q0, int nq, int k0, int nk) {
    double scale = 1.0 / sqrt((double)hs);
    size_t nkh = (size_t)(nk > 0 ? nk : 1) * hs;
    double* dqa = (double*)mallocCheck((size_t)hs * sizeof(double));  // (hs) dQ_i of this block pair
    double* dka = (double*)mallocCheck(nkh * sizeof(double));          // (nk, hs) dK of this block pair
    double* dva = (double*)mallocCheck(nkh * sizeof(double));          // (nk, hs) dV of this block pair
    for (size_t x = 0; x < nkh; x++) { dka[x] = 0.0; dva[x] = 0.0; }
    for (int i = 0; i < nq; i++) {
        int t = q0 + i;
        int jend = t - k0 + 1 < nk ? t - k0 + 1 : nk;  // unmasked keys: j < jend
        if (jend <= 0) continue;
        const float* qi = q + (size_t)t * stride;
        const float* dOi = dO + (size_t)t * o_stride;
        const float* Oi = out + (size_t)t * o_stride;
        double D = 0.0;
        for (int c = 0; c < hs; c++) D += (double)dOi[c] * (double)Oi[c];
        for (int c = 0; c < hs; c++) dqa[c] = 0.0;
        for (int j = 0; j < jend; j++) {
            const float* kj = k + (size_t)(k0 + j) * stride;
            const float* vj = v + (size_t)(k0 + j) * stride;
            double P = exp(attention_block_score(qi, kj, hs, scale) - (double)L[t]);
            double dP = 0.0;
            for (int c = 0; c < hs; c++) {
                dP += (double)dOi[c] * (double)vj[c];
                dva[(size_t)j * hs + c] += P * (double)dOi[c];
            }
            double dS = P * (dP - D);
            for (int c = 0; c < hs; c++) {
                dqa[c] += dS * (double)kj[c] * scale;
                dka[(size_t)j * hs + c] += dS * (double)qi[c] * scale;
            }
        }
        float* dqi = dq + (size_t)t * stride;
        for (int c = 0; c < hs; c++) dqi[c] += (float)dqa[c];
    }
    for (int j = 0; j < nk; j++) {
        float* dkj = dk + (size_t)(k0 + j) * stride;
        float* dvj = dv + (size_t)(k0 + j) * stride;
        for (int c = 0; c < hs; c++) { dkj[c] += (float)dka[(size_t)j * hs + c]; dvj[c] += (float)dva[(size_t)j * hs + c]; }
    }
    free(dqa);
    free(dka);
    free(dva);
}
