// test/kernels/fused_classifier.h: fused_classifier (softmax + cross-entropy + dlogits in place)
// against fused_classifier_cpu on the same floatX-rounded logits, and both against a float64
// evaluation written here:
//   loss = log sum_{v < V} e^(x_v) - x_target (with the row max taken out),
//   dlogits_v = dloss (e^(x_v - lse) - [v == target]) for v < V, 0 for the padding v >= V.
// The kernel (expf, a tree of online-softmax states) and the reference (exp_fast, float chunks added
// in double) share no arithmetic, only the formula; the float64 check is what validates the formula.
//
// Kernel vs reference tolerances (|got - want| <= atol + rtol |want|), kept as they were and sized for a
// GPU, where --use_fast_math makes expf/logf the approximate __expf (2 + 1.17 |x| ulp) / __logf:
// - losses: FP32: the kernel sums exp in FP32 over at most 50k terms in a tree (error ~1e-6 relative
//   on the sum, so ~1e-6 absolute on the loss, since d(log s) = ds/s); the reference sums in double.
//   expf/logf of the kernel (fast-math on a GPU: ~2 ulp, plus ~|x| ulp for the range reduction of
//   __expf) add a few ulps of the loss (|loss| < 20 here). atol 1e-5, rtol 1e-5 (on a CPU, where
//   expf/logf are within 1 ulp, the observed difference is ~2e-6).
//   BF16: the loss is written in FP32 from the same bf16 inputs, so the same tolerance holds.
// - dlogits: FP32: p = exp(x - lse) carries the lse error (~1e-6 absolute) as ~1e-6 relative error of
//   p, plus the error of exp(x - lse) itself (__expf on a GPU: 2 + 1.16|x - lse| ulp, ~25 ulp = 3e-6
//   at x - lse = -20): rtol 3e-5; atol 1e-8 covers tiny p (dloss ~ 1e-2 times p ~ 1e-7).
//   BF16: the output is rounded to nearest bf16 (relative error <= 2^-8) on top of the FP32
//   error: rtol 4e-3, atol 1e-6 (dloss * p below it is noise to the model).
// The padded columns V..Vp-1 must be exactly 0 (the comparison covers them: the reference writes 0).
//
// Against float64, per row, with u = 2^-24, a_v = x_v - max, s = sum_v e^(a_v), lse = max + log s:
// - the sum's relative error: each term's exp error weighted by its share of s,
//   E = sum_v e^(a_v) r_v / s, plus the summation: kernel: r_v = (4 + 2.4 |a_v|) u (a GPU's __expf,
//   which covers expf's 1 ulp and the rounding of a_v), and a depth of S k terms in sequence per
//   thread (k = ceil(ceil(V / S) / blockDim) chunks of S = x128::size) plus 10 merges of (max, sum)
//   states of ~4 roundings each: (S k + 40) u; reference: r_v = 3.4u + u |a_v| (exp_fast's 2e-7 and
//   the rounding of a_v), and float chunk sums of 1024 terms in an unknown SIMD order:
//   kc_sum_err(min(V, 1024)) (kernel_check.h).
// - log s: kernel: 2^-21.41 + 6u |log s| (__logf: 2^-21.41 absolute on [0.5, 2], else 3 ulp; logf
//   1 ulp); reference: log in double, rounded to float: u |log s|.  lse: + u |lse|; loss: + u |loss|.
// - dlogits: p = e^(x - lse) carries lse's error and its own exp error; p - [v == target], times dloss,
//   one rounding each; BF16: the kernel's output rounded once to bf16 on top.
// Observed on a CPU: losses up to ~0.2 (kernel; its bound allows for a GPU's __expf/__logf) and ~0.4
// (reference) of these bounds, dlogits up to ~0.5 (FP32) and ~1 (BF16, the final rounding). A log in
// another base, a missing max or target term, dloss applied twice or not at all, or padded logits
// counted in the sum are off by orders of magnitude.
#pragma once
#include "../kernel_check.h"
#include "../../llm/ops/fused_classifier.cuh"

static void fused_classifier_case(int BT, int V, int write_dlogits) {
    int Vp = ((V + 127) / 128) * 128;
    float dloss = 1.0f / (float)(BT * 3);  // as the model's 1/(B*T*grad_accum)
    // logits ~ N(0, 2^2): a peaked but not degenerate softmax; padded columns hold garbage (the model
    // leaves whatever the matmul wrote there), which must not reach the loss
    std::vector<float> logits = kc_randn((size_t)BT * Vp, 2.0f);
    for (int i = 0; i < BT; i++)
        for (int v = V; v < Vp; v++) logits[(size_t)i * Vp + v] = (float)(floatX)(100.0f + v);
    std::vector<int> targets = kc_randint(BT, V);
    if (BT > 1) targets[0] = V - 1;  // the last valid column (the tail of the last chunk)
    if (BT > 2) targets[1] = 0;

    floatX* d_logits = kc_upload(logits);
    int* d_targets = kc_upload_raw(targets);
    float* d_losses = kc_alloc_poisoned<float>(BT);
    fused_classifier(d_logits, d_losses, dloss, d_targets, BT, V, Vp, write_dlogits, 0);
    cudaCheck(cudaDeviceSynchronize());

    std::vector<float> want_logits = logits, want_losses(BT);
    fused_classifier_cpu(want_logits.data(), want_losses.data(), dloss, targets.data(), BT, V, Vp,
                         write_dlogits);
    char what[160];
    std::vector<float> got_losses = kc_download_f32(d_losses, BT);
    snprintf(what, sizeof(what), "fused_classifier losses BT=%d V=%d Vp=%d dlogits=%d", BT, V, Vp, write_dlogits);
    kc_compare(what, got_losses, want_losses, 1e-5f, 1e-5f, 1e-5f, 1e-5f);
    std::vector<float> got_logits = kc_download(d_logits, (size_t)BT * Vp);

    // float64, row by row, with the bounds of the kernel (k) and of the reference (r) (top of this file)
    const double u = KC_U32;
    const int S = x128::size, chunks = Vp / S, block = chunks >= 1024 ? 1024 : ((chunks + 31) / 32) * 32;
    const double depth_k = S * (double)(((V + S - 1) / S + block - 1) / block) + 40.0;
    std::vector<double> loss64(BT), bl_k(BT), bl_r(BT), dl64((size_t)BT * Vp, 0.0), bd_k((size_t)BT * Vp, 0.0),
        bd_r((size_t)BT * Vp, 0.0);
    for (int i = 0; i < BT; i++) {
        const float* x = &logits[(size_t)i * Vp];
        double mx = x[0], s = 0.0, Ek = 0.0, Er = 0.0;
        for (int v = 1; v < V; v++) mx = fmax(mx, (double)x[v]);
        for (int v = 0; v < V; v++) {
            double a = x[v] - mx, e = exp(a);
            s += e;
            Ek += e * (4.0 + 2.4 * fabs(a)) * u;
            Er += e * (3.4 * u + u * fabs(a));
        }
        double ls = log(s), lse = mx + ls, loss = lse - x[targets[i]];
        double ds_k = Ek / s + depth_k * u, ds_r = Er / s + kc_sum_err(V < 1024 ? V : 1024, s) / s;
        double dlse_k = ds_k + exp2(-21.41) + 6.0 * u * fabs(ls) + u * fabs(lse);
        double dlse_r = ds_r + u * fabs(ls) + u * fabs(lse);
        loss64[i] = loss;
        bl_k[i] = dlse_k + u * fabs(loss);
        bl_r[i] = dlse_r + u * fabs(loss);
        for (int v = 0; v < V; v++) {
            size_t q = (size_t)i * Vp + v;
            double a = x[v] - lse, p = exp(a), oh = v == targets[i] ? 1.0 : 0.0, d = dloss * (p - oh);
            dl64[q] = d;
            bd_k[q] = kc_round_x(dloss * (p * (dlse_k + (4.0 + 2.4 * fabs(a)) * u) + u * fabs(p - oh)) + u * fabs(d), d);
            bd_r[q] = dloss * (p * (ds_r + 3.4 * u + u * fabs(x[v] - mx) + 3.0 * u) + u * fabs(p - oh)) + u * fabs(d);
        }
    }
    snprintf(what, sizeof(what), "fused_classifier losses BT=%d V=%d Vp=%d dlogits=%d vs float64", BT, V, Vp, write_dlogits);
    kc_check_bound(what, got_losses, loss64, bl_k);
    snprintf(what, sizeof(what), "fused_classifier_cpu losses BT=%d V=%d Vp=%d dlogits=%d vs float64", BT, V, Vp,
             write_dlogits);
    kc_check_bound(what, want_losses, loss64, bl_r);
    if (write_dlogits) {
        snprintf(what, sizeof(what), "fused_classifier dlogits BT=%d V=%d Vp=%d", BT, V, Vp);
        kc_compare(what, got_logits, want_logits, 1e-8f, 3e-5f, 1e-6f, 4e-3f);
        snprintf(what, sizeof(what), "fused_classifier dlogits BT=%d V=%d Vp=%d vs float64", BT, V, Vp);
        kc_check_bound(what, got_logits, dl64, bd_k);
        snprintf(what, sizeof(what), "fused_classifier_cpu dlogits BT=%d V=%d Vp=%d vs float64", BT, V, Vp);
        kc_check_bound(what, want_logits, dl64, bd_r);
    } else {
        // without write_dlogits the logits are left untouched, bit for bit
        snprintf(what, sizeof(what), "fused_classifier leaves logits BT=%d V=%d Vp=%d", BT, V, Vp);
        kc_compare(what, got_logits, logits, 0.0f, 0.0f, 0.0f, 0.0f);
    }
    device_free(d_logits);
    device_free(d_targets);
    device_free(d_losses);
}

static void test_fused_classifier(void) {
    const int BTs[] = {1, 5, 64};
    const int Vs[] = {1, 7, 100, 1000};
    for (int b = 0; b < 3; b++)
        for (int v = 0; v < 4; v++) fused_classifier_case(BTs[b], Vs[v], 1);
    fused_classifier_case(5, 1000, 0);
    fused_classifier_case(3, 9001, 1);   // more chunks than threads (1024): the block-strided loops
    fused_classifier_case(2, 50257, 1);  // GPT-2's vocabulary (Vp = 50304)
    fused_classifier_case(2, 50257, 0);
}

// loss_accumulate: acc += (float)(mean of the losses), against a float64 mean of the same values
// rounded to float. The kernel sums in double in another order than index order, so the double sums
// differ by ~1e-16 relative and the float mean can differ in its last bit where the double lands on a
// float rounding boundary: tolerance 1 float ulp of the mean (2^-23 relative), on an accumulator that
// starts at a known value (the add is checked, not just the mean), in both precisions (the losses
// are FP32 in every build).
// The sizes go down: a launch of one warp after one of 32 would read stale partial sums if the kernel
// read past its own warps' slots.
static void test_loss_accumulate(void) {
    const int sizes[] = {4099, 1000, 31, 1};
    for (int BT : sizes) {
        std::vector<float> losses(BT);
        for (int i = 0; i < BT; i++) losses[i] = 3.0f + 2.0f * rng_f32(&g_rng);
        float* d_losses = kc_upload_raw(losses);
        double start = 1.25;
        double* d_acc = kc_upload_raw(std::vector<double>(1, start));
        loss_accumulate(d_acc, d_losses, BT, 0);
        loss_accumulate(d_acc, d_losses, BT, 0);
        double got = kc_download_raw(d_acc, 1)[0];
        double sum = 0.0;
        for (int i = 0; i < BT; i++) sum += (double)losses[i];
        double mean = (double)(float)(sum / BT), want = start + 2 * mean;
        double tol = 2 * mean * 1.2e-7;
        check(fabs(got - want) <= tol, "loss_accumulate BT=%d twice: %.12g vs float64 %.12g (tol %.2g)", BT, got, want, tol);
        device_free(d_losses);
        device_free(d_acc);
    }
}
