// test/kernels/fused_classifier.h: fused_classifier (softmax + cross-entropy + dlogits in place)
// against fused_classifier_cpu on the same floatX-rounded logits.
//
// Tolerances (|got - want| <= atol + rtol |want|):
// - losses: FP32: the kernel sums exp in FP32 over at most 50k terms in a tree (error ~1e-6 relative
//   on the sum, so ~1e-6 absolute on the loss, since d(log s) = ds/s); the reference sums in double.
//   expf/logf of the kernel (fast-math on a GPU: ~2 ulp, plus ~|x| ulp for the range reduction of
//   __expf) add a few ulps of the loss (|loss| < 20 here). atol 1e-5, rtol 1e-5.
//   BF16: the loss is written in FP32 from the same bf16 inputs, so the same tolerance holds.
// - dlogits: FP32: p = exp(x - lse) carries the lse error (~1e-6 absolute) as ~1e-6 relative error of
//   p, plus the error of exp(x - lse) itself (__expf on a GPU: 2 + 1.16|x - lse| ulp, ~25 ulp = 3e-6
//   at x - lse = -20): rtol 3e-5; atol 1e-8 covers tiny p (dloss ~ 1e-2 times p ~ 1e-7).
//   BF16: the output is rounded to nearest bf16 (relative error <= 2^-9 = 0.2%) on top of the FP32
//   error: rtol 4e-3 (twice one rounding), atol 1e-6 (dloss * p below it is noise to the model).
// The padded columns V..Vp-1 must be exactly 0 (the comparison covers them: the reference writes 0).
#pragma once
#include "../kernel_check.h"
#include "../../llm/fused_classifier.cuh"

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
    snprintf(what, sizeof(what), "fused_classifier losses BT=%d V=%d Vp=%d dlogits=%d", BT, V, Vp, write_dlogits);
    kc_compare(what, kc_download_f32(d_losses, BT), want_losses, 1e-5f, 1e-5f, 1e-5f, 1e-5f);
    std::vector<float> got_logits = kc_download(d_logits, (size_t)BT * Vp);
    if (write_dlogits) {
        snprintf(what, sizeof(what), "fused_classifier dlogits BT=%d V=%d Vp=%d", BT, V, Vp);
        kc_compare(what, got_logits, want_logits, 1e-8f, 3e-5f, 1e-6f, 4e-3f);
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
static void test_loss_accumulate(void) {
    const int sizes[] = {1, 31, 1000, 4099};
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
