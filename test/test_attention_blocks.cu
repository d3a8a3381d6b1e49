// test_attention_blocks.cu: FlashAttention's blocks on the CPU (llm/ops/attention_blocks.h) against the plain
// attention reference (attention_forward_cpu / attention_backward_cpu in llm/ops/attention.cuh), with fresh
// random inputs each run (the seed is printed; pass one as argv[1] to repeat a run).
//
// For several shapes (T = 1, T not a multiple of the block sizes, hs 64 and 128, blocks of 16 and 64):
//   forward:  each row block of queries starts from the empty result (m = -inf, l = 0, O = 0) and merges the
//             attention_block_cpu results of ALL key blocks (those above the diagonal are fully masked: the
//             merge must pass their -inf through without NaN), once in forward order and once in a random
//             order, then finalises: out must equal attention_forward_cpu's, and L the log-sum-exp of the
//             plain scores (computed here in double) and attention_forward_cpu's lse (itself checked against
//             the double log-sum-exp).
//   backward: attention_block_backward_cpu summed over all block pairs, in a random order, from the merged
//             out and L, must equal attention_backward_cpu's dinp (dq, dk, dv checked separately).
//   the empty block: a block wholly above the diagonal gives m = -inf, l = 0, O = 0, and merging two empty
//             results gives the empty result, no NaN.
// Every output buffer is NaN-poisoned before it is written; the backward's accumulators start at zero, and
// each gradient check also asserts that the reference gradient is far above its tolerance, so a block
// backward that adds nothing fails.
//
// Bounds (u = 2^-24, first order; the block functions sum in double, so the reference's FP32 rounding
// dominates). The reference attention_forward_cpu computes each score as an FP32 sum of hs products
// (error <= (hs+1) u smax, smax = max scale * sum_c |q_c k_c|), exponentiates, sums T terms and divides:
// each probability is off by at most eps_a = (2 (hs+1) smax + T + 5) u relative; out = FP32 sum of T
// products a * v adds (T+1) u sum a|v|, and sum a = 1, so its error is <= (T + 1 + eps_a/u) u vmax. That is
// the "T * 2^-24 relative" of an FP32 sum of T positive terms, plus the scores' share. Ours adds per merge
// ~4u relative (expf, product, sum) on O and on l, ~8u per merge on out: 8 nb u vmax (nb = key blocks).
//   tol_out = (T + 1 + eps_a/u + 8 nb + 4) u vmax
// L = m + log l: the block rounds m once (u |m|), each merge rounds l by ~4u relative, log and the final
// add by u |log l| + u |L|; with L - log T <= m <= L:
//   tol_L = (4 nb + 8 + 3 (|L| + log T + 1)) u        per row
// attention_forward_cpu's lse = maxv + logf(sum): its max cancels to first order; each term's exponent and
// the sum err by at most eps_a u relative (below), logf and the add as above:
//   tol_ref = (eps_a + 3 (|L| + log T + 1)) u          per row
// The backward reference: datt = dy . v (hs terms), dot = sum a datt (T terms), dpre = a (datt - dot) scale,
// dq = sum dpre k (T terms), dk = sum dpre q, dv = sum a dy, each an FP32 sum whose error is at most its
// number of terms times u times the sum of its terms' magnitudes. Those magnitudes are computed here per
// element, in double: with E_tt2 = |dy_t|.|v_t2| + sum_t2' a_tt2' |dy_t|.|v_t2'| (which bounds |datt - dot|),
//   Mdq[t] = scale sum_t2 a E |k_t2|,   Mdk[t2] = scale sum_t a E |q_t|,   Mdv[t2] = sum_t a |dy_t|
// and, following the rounding of datt (hs u), dot ((T + hs) u + eps_a), dpre (2 u + eps_a) and the final
// sum (T u), plus ours (P = exp(s - L) with our L: tol_L relative; D = dO . out with our out, whose own
// error is (8 nb + 4) u vmax; the block sums in double, one float add per block pair: (nb + nqb) u, nqb = query blocks):
//   tol_dq = Mdq ((3T + 2hs + 3 eps_a/u + nb + nqb + 8) u + 2 tol_Lmax) + scale Y1 (8 nb + 4) u vmax kmax
//   tol_dk = Mdk (same) + scale Y1 (8 nb + 4) u vmax A qmax
//   tol_dv = Mdv ((T + eps_a/u + nb + nqb + 3) u + tol_Lmax)
// (Y1: the largest 1-norm of a dy row; A: the largest column sum of att). Worst-case bounds: the measured
// errors, printed beside them, are 100-1000x smaller; a wrong term (no D, no rescaling) moves the result by
// the size of the gradient, and each check asserts that the gradient is > 10x its largest tolerance.
#include "../llm/core/common.h"
#include "../llm/core/rand.h"
#include "../llm/ops/attention.cuh"
#include "test_common.h"
#include "../llm/core/usage.h"
#include <time.h>
#include <vector>

static Rng rng;
static const double U = 1.0 / 16777216.0;  // 2^-24, FP32's unit roundoff

static void shuffle(std::vector<int>& a) {
    for (int i = (int)a.size() - 1; i > 0; i--) {
        int j = (int)(rng_u64(&rng) % (uint64_t)(i + 1));
        int t = a[i]; a[i] = a[j]; a[j] = t;
    }
}

static void poison(float* p, size_t n) { for (size_t i = 0; i < n; i++) p[i] = NAN; }

// the largest |a - b| over n elements; NaN counts as infinite
static double max_err(const float* a, const float* b, size_t n, size_t stride, int width) {
    double e = 0.0;
    for (size_t r = 0; r < n; r++)
        for (int c = 0; c < width; c++) {
            double d = fabs((double)a[r * stride + c] - (double)b[r * stride + c]);
            if (!(d <= e)) e = isnan(d) ? INFINITY : d;
        }
    return e;
}
static double max_abs(const float* a, size_t n, size_t stride, int width) {
    double e = 0.0;
    for (size_t r = 0; r < n; r++)
        for (int c = 0; c < width; c++) e = fmax(e, fabs((double)a[r * stride + c]));
    return e;
}

struct Shape { int B, T, NH, hs, Bq, Bk; };

// the forward by blocks: out (B,T,C) and L (B,NH,T), each query block merging all key blocks in order
// (random = shuffled per query block)
static void blocks_forward(float* out, float* L, const float* inp, const Shape& s, int random) {
    int C = s.NH * s.hs, hs = s.hs;
    int nqb = (s.T + s.Bq - 1) / s.Bq, nkb = (s.T + s.Bk - 1) / s.Bk;
    std::vector<float> m(s.Bq), l(s.Bq), O((size_t)s.Bq * hs), mb(s.Bq), lb(s.Bq), Ob((size_t)s.Bq * hs);
    std::vector<int> order(nkb);
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.NH; h++) {
            const float* q = inp + (size_t)b * s.T * 3 * C + h * hs;
            for (int qb = 0; qb < nqb; qb++) {
                int q0 = qb * s.Bq, nq = s.T - q0 < s.Bq ? s.T - q0 : s.Bq;
                for (int i = 0; i < nq; i++) { m[i] = -INFINITY; l[i] = 0.0f; }
                for (size_t x = 0; x < (size_t)nq * hs; x++) O[x] = 0.0f;
                for (int j = 0; j < nkb; j++) order[j] = j;
                if (random) shuffle(order);
                for (int j = 0; j < nkb; j++) {
                    int k0 = order[j] * s.Bk, nk = s.T - k0 < s.Bk ? s.T - k0 : s.Bk;
                    poison(mb.data(), mb.size()); poison(lb.data(), lb.size()); poison(Ob.data(), Ob.size());
                    attention_block_cpu(Ob.data(), mb.data(), lb.data(), q, q + C, q + 2 * C, 3 * C, hs, q0, nq, k0, nk);
                    attention_merge_cpu(m.data(), l.data(), O.data(), m.data(), l.data(), O.data(),
                                        mb.data(), lb.data(), Ob.data(), nq, hs);
                }
                attention_finalise_cpu(out + ((size_t)b * s.T + q0) * C + h * hs, L + ((size_t)b * s.NH + h) * s.T + q0,
                                       O.data(), m.data(), l.data(), C, nq, hs);
            }
        }
}

static void run_shape(const Shape& s) {
    int B = s.B, T = s.T, NH = s.NH, hs = s.hs, C = NH * hs;
    double scale = 1.0 / sqrt((double)hs);
    size_t nin = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    std::vector<float> inp(nin), dout(nout);
    rng_normal(&rng, inp.data(), nin, 0.0f, 1.0f);
    for (size_t r = 0; r < (size_t)B * T; r++)  // sharper softmaxes (scores of std 1.5): the max moves between blocks
        for (int c = 0; c < C; c++) inp[r * 3 * C + c] *= 1.5f;
    rng_normal(&rng, dout.data(), nout, 0.0f, 1.0f);
    std::vector<float> out_ref(nout), lse_ref((size_t)B * NH * T), dinp_ref(nin);
    attention_forward_cpu(out_ref.data(), lse_ref.data(), inp.data(), B, T, C, NH);
    attention_backward_cpu(dinp_ref.data(), dout.data(), inp.data(), B, T, C, NH);
    // the probabilities (B,NH,T,T), in double, for the bounds' magnitudes (the reference keeps only lse)
    std::vector<double> att((size_t)B * NH * T * T, 0.0);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                double* a = &att[(((size_t)b * NH + h) * T + t) * T];
                const float* q = &inp[((size_t)b * T + t) * 3 * C + h * hs];
                double mx = -INFINITY, z = 0.0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = &inp[((size_t)b * T + t2) * 3 * C + C + h * hs];
                    double d = 0.0;
                    for (int c = 0; c < hs; c++) d += (double)q[c] * k[c];
                    a[t2] = d * scale;
                    mx = fmax(mx, a[t2]);
                }
                for (int t2 = 0; t2 <= t; t2++) { a[t2] = exp(a[t2] - mx); z += a[t2]; }
                for (int t2 = 0; t2 <= t; t2++) a[t2] /= z;
            }

    // the magnitudes the bounds need (see the top of the file)
    double smax = 0.0, vmax = 0.0, kmax = 0.0, qmax = 0.0, Y1 = 0.0, A = 0.0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float* q = &inp[((size_t)b * T + t) * 3 * C + h * hs];
                const float* dy = &dout[((size_t)b * T + t) * C + h * hs];
                double y1 = 0.0, col = 0.0;
                for (int c = 0; c < hs; c++) {
                    qmax = fmax(qmax, fabs(q[c])); kmax = fmax(kmax, fabs(q[C + c])); vmax = fmax(vmax, fabs(q[2 * C + c]));
                    y1 += fabs(dy[c]);
                }
                Y1 = fmax(Y1, y1);
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = &inp[((size_t)b * T + t2) * 3 * C + C + h * hs];
                    double a = 0.0;
                    for (int c = 0; c < hs; c++) a += fabs((double)q[c] * k[c]);
                    smax = fmax(smax, a * scale);
                }
                for (int t1 = t; t1 < T; t1++) col += att[(((size_t)b * NH + h) * T + t1) * T + t];
                A = fmax(A, col);
            }
    int nb = (T + s.Bk - 1) / s.Bk;
    double eps_a = 2.0 * (hs + 1) * smax + T + 5;  // in units of u
    double tol_out = (T + 1 + eps_a + 8.0 * nb + 4) * U * vmax;
    char what[160];
    snprintf(what, sizeof what, "B=%d T=%d NH=%d hs=%d Bq=%d Bk=%d", B, T, NH, hs, s.Bq, s.Bk);

    std::vector<float> out((size_t)nout), L((size_t)B * NH * T);
    double tol_Lmax = 0.0;
    for (int random = 0; random < 2; random++) {
        poison(out.data(), out.size()); poison(L.data(), L.size());
        blocks_forward(out.data(), L.data(), inp.data(), s, random);
        double e = max_err(out.data(), out_ref.data(), nout, 1, 1);
        check(e <= tol_out, "%s, %s order: merged blocks = attention_forward_cpu: max|err| %.3g <= tol %.3g (max|out| %.3g)",
              what, random ? "random" : "forward", e, tol_out, max_abs(out_ref.data(), nout, 1, 1));
        // L against log sum_t2 exp(s) of the plain scores, in double
        double worst = -INFINITY, eL = 0.0, tolL_at = 0.0, worst_ref = -INFINITY, eR = 0.0, tolR_at = 0.0;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < T; t++) {
                    const float* q = &inp[((size_t)b * T + t) * 3 * C + h * hs];
                    double mx = -INFINITY;
                    std::vector<double> sc(t + 1);
                    for (int t2 = 0; t2 <= t; t2++) {
                        const float* k = &inp[((size_t)b * T + t2) * 3 * C + C + h * hs];
                        double d = 0.0;
                        for (int c = 0; c < hs; c++) d += (double)q[c] * k[c];
                        sc[t2] = d * scale;
                        mx = fmax(mx, sc[t2]);
                    }
                    double sum = 0.0;
                    for (int t2 = 0; t2 <= t; t2++) sum += exp(sc[t2] - mx);
                    double Lref = mx + log(sum);
                    double tol = (4.0 * nb + 8 + 3.0 * (fabs(Lref) + log((double)T) + 1)) * U;
                    tol_Lmax = fmax(tol_Lmax, tol);
                    double err = fabs((double)L[((size_t)b * NH + h) * T + t] - Lref);
                    if (isnan(err)) err = INFINITY;
                    if (!(err - tol <= worst)) { worst = err - tol; eL = err; tolL_at = tol; }
                    // attention_forward_cpu's lse (maxv + logf(sum), FP32): the scores' error and the sum's
                    // (eps_a, which bounds each probability's relative error), logf and the add:
                    //   tol_ref = (eps_a + 3 (|L| + log T + 1)) u; the blocks' L is within tol + tol_ref of it
                    double tol_ref = (eps_a + 3.0 * (fabs(Lref) + log((double)T) + 1)) * U;
                    float lr = lse_ref[((size_t)b * NH + h) * T + t];
                    double e1 = fabs((double)lr - Lref), e2 = fabs((double)L[((size_t)b * NH + h) * T + t] - (double)lr);
                    if (isnan(e1)) e1 = INFINITY;
                    if (isnan(e2)) e2 = INFINITY;
                    double r1 = e1 - tol_ref, r2 = e2 - (tol + tol_ref);
                    if (!(r1 <= worst_ref)) { worst_ref = r1; eR = e1; tolR_at = tol_ref; }
                    if (!(r2 <= worst_ref)) { worst_ref = r2; eR = e2; tolR_at = tol + tol_ref; }
                }
        check(worst <= 0.0, "%s, %s order: L = log-sum-exp of the scores: worst row |err| %.3g (its tol %.3g; "
              "tol = (4 nb + 8 + 3 (|L| + log T + 1)) u)", what, random ? "random" : "forward", eL, tolL_at);
        check(worst_ref <= 0.0, "%s, %s order: attention_forward_cpu's lse = log-sum-exp of the scores, and L = it: "
              "worst row |err| %.3g (its tol %.3g; tol_ref = (eps_a + 3 (|L| + log T + 1)) u, L: tol + tol_ref)", what,
              random ? "random" : "forward", eR, tolR_at);
    }

    // the backward by block pairs, in a random order, from the (random-order) out and L above
    std::vector<float> dinp(nin, 0.0f);
    int nqb = (T + s.Bq - 1) / s.Bq, nkb = nb;
    std::vector<int> pairs(nqb * nkb);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t base = (size_t)b * T * 3 * C + h * hs;
            const float* q = &inp[base];
            float* dq = &dinp[base];
            for (int p = 0; p < nqb * nkb; p++) pairs[p] = p;
            shuffle(pairs);
            for (int p = 0; p < nqb * nkb; p++) {
                int q0 = pairs[p] / nkb * s.Bq, k0 = pairs[p] % nkb * s.Bk;
                int nq = T - q0 < s.Bq ? T - q0 : s.Bq, nk = T - k0 < s.Bk ? T - k0 : s.Bk;
                attention_block_backward_cpu(dq, dq + C, dq + 2 * C, &dout[(size_t)b * T * C + h * hs],
                                             &out[(size_t)b * T * C + h * hs], &L[((size_t)b * NH + h) * T],
                                             q, q + C, q + 2 * C, 3 * C, C, hs, q0, nq, k0, nk);
            }
        }
    // componentwise magnitudes of the reference backward's terms (see the top of the file):
    //   E_tt2 = |dy_t|.|v_t2| + sum_t2' a_tt2' |dy_t|.|v_t2'|    (bounds |datt - dot|)
    //   Mdq[t] = scale sum_t2 a E |k_t2|,  Mdk[t2] = scale sum_t a E |q_t|,  Mdv[t2] = sum_t a |dy_t|
    std::vector<double> M(nin, 0.0), Ad(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double* a = &att[(((size_t)b * NH + h) * T + t) * T];
                const float* dy = &dout[((size_t)b * T + t) * C + h * hs];
                size_t qt = ((size_t)b * T + t) * 3 * C + h * hs;
                double dotabs = 0.0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = &inp[((size_t)b * T + t2) * 3 * C + 2 * C + h * hs];
                    Ad[t2] = 0.0;
                    for (int c = 0; c < hs; c++) Ad[t2] += fabs((double)dy[c] * v[c]);
                    dotabs += a[t2] * Ad[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    size_t kt = ((size_t)b * T + t2) * 3 * C + h * hs;
                    double w = a[t2] * (Ad[t2] + dotabs) * scale;
                    for (int c = 0; c < hs; c++) {
                        M[qt + c] += w * fabs(inp[kt + C + c]);
                        M[kt + C + c] += w * fabs(inp[qt + c]);
                        M[kt + 2 * C + c] += a[t2] * fabs(dy[c]);
                    }
                }
            }
    double tol_out_ours = (8.0 * nb + 4) * U * vmax;  // our out's own error: D = dO . out errs by <= Y1 of it
    double rel[3] = {(3.0 * T + 2 * hs + 3 * eps_a + nb + nqb + 8) * U + 2 * tol_Lmax,
                     (3.0 * T + 2 * hs + 3 * eps_a + nb + nqb + 8) * U + 2 * tol_Lmax,
                     (T + eps_a + nb + nqb + 3) * U + tol_Lmax};
    double add[3] = {scale * Y1 * tol_out_ours * kmax, scale * Y1 * tol_out_ours * A * qmax, 0.0};
    const char* names[3] = {"dq", "dk", "dv"};
    for (int j = 0; j < 3; j++) {
        double worst = -INFINITY, e_at = 0.0, tol_at = 0.0, e = 0.0, g = 0.0, tmax = 0.0;
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int c = 0; c < C; c++) {
                size_t x = r * 3 * C + j * C + c;
                double err = fabs((double)dinp[x] - (double)dinp_ref[x]);
                if (isnan(err)) err = INFINITY;
                double tol = M[x] * rel[j] + add[j];
                if (!(err - tol <= worst)) { worst = err - tol; e_at = err; tol_at = tol; }
                e = fmax(e, err); g = fmax(g, fabs(dinp_ref[x])); tmax = fmax(tmax, tol);
            }
        // with T = 1 the only probability is 1 whatever q and k: dq = dk = 0 exactly, nothing to dwarf tol
        int nontrivial = T == 1 && j < 2 ? 1 : g > 10 * tmax;
        check(worst <= 0.0 && nontrivial, "%s: block backward summed over block pairs = attention_backward_cpu %s: "
              "max|err| %.3g; worst element |err| %.3g <= its tol %.3g (largest tol %.3g, max|%s| %.3g%s)", what,
              names[j], e, e_at, tol_at, tmax, names[j], g, T == 1 && j < 2 ? ", 0 at T = 1" : " > 10x it");
    }
}

static const char* USAGE =
    "[SEED]\n"
    "Tests FlashAttention's blocks on the CPU (llm/ops/attention_blocks.h): forward merges and the block backward\n"
    "against the plain attention reference, on several shapes.\n"    "  SEED  the random inputs' seed, to repeat a run (default: from the clock; printed)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : (uint64_t)time(NULL);
    printf("seed %llu\n", (unsigned long long)seed);
    rng_init(&rng, seed);

    {  // the empty block and the merge of two empty results: m = -inf, l = 0, O = 0, no NaN
        const int hs = 64, T = 32, C = hs;
        std::vector<float> qkv((size_t)T * 3 * C);
        rng_normal(&rng, qkv.data(), qkv.size(), 0.0f, 1.0f);
        std::vector<float> O(16 * hs), m(16), l(16), O2(16 * hs), m2(16), l2(16);
        poison(O.data(), O.size()); poison(m.data(), 16); poison(l.data(), 16);
        attention_block_cpu(O.data(), m.data(), l.data(), qkv.data(), qkv.data() + C, qkv.data() + 2 * C, 3 * C, hs,
                            0, 16, 16, 16);  // queries 0..15 against keys 16..31: all masked
        int ok = 1;
        for (int i = 0; i < 16; i++) ok &= m[i] == -INFINITY && l[i] == 0.0f;
        for (int x = 0; x < 16 * hs; x++) ok &= O[x] == 0.0f;
        check(ok, "a block above the diagonal gives m = -inf, l = 0, O~ = 0");
        O2 = O; m2 = m; l2 = l;
        attention_merge_cpu(m.data(), l.data(), O.data(), m.data(), l.data(), O.data(), m2.data(), l2.data(), O2.data(), 16, hs);
        ok = 1;
        for (int i = 0; i < 16; i++) ok &= m[i] == -INFINITY && l[i] == 0.0f;
        for (int x = 0; x < 16 * hs; x++) ok &= O[x] == 0.0f;
        check(ok, "merging two empty results gives the empty result (no NaN from e^(-inf + inf))");
    }

    const Shape shapes[] = {
        {1, 1, 2, 64, 16, 16},     // T = 1
        {2, 37, 2, 64, 16, 16},    // T not a multiple of the blocks
        {1, 100, 1, 128, 64, 16},  // hs 128, Bq != Bk
        {1, 130, 1, 64, 64, 64},   // two full blocks and one of 2 rows
        {1, 77, 2, 128, 16, 64},   // Bq < Bk
    };
    for (const Shape& s : shapes) run_shape(s);
    printf("attention_blocks: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}
