// test/kernels/vocab_parallel.h: the vocabulary-parallel pieces of tensor parallelism
// (llm/sharded/tensor_parallel.h), each rank's kernels run here one rank after another on its slice, with the
// all-gather done on the host:
// - vp_classifier_stats + vp_classifier_finish over tp ranks' slices of the logits against the one-rank
//   classifier fused_classifier_cpu on the whole rows (the independent reference: one pass over the
//   whole row, a different formula for the sum), and the CPU reference of the split the same way.
//   Losses and dlogits must agree within the one-rank kernel's tolerances against the same reference
//   (test/kernels/fused_classifier.h, where their sizes are derived): the split only adds tp merges of
//   (max, sum) states, a few roundings each. A lost target logit, a rank's sum counted twice or
//   rescaled to the wrong max, padding counted, or the target's -1 on the wrong rank is off by ~1e-1
//   or more.
// - encoder_forward_range / encoder_backward_range over tp vocabulary ranges (wpe on rank 0 only): the
//   sum of the ranks' outputs is the whole embedding's output bit for bit (one non-zero wte term plus
//   wpe, one rounding, as in one process), the ranks' dwte slices put together are the whole dwte bit
//   for bit (each token's positions are summed by one rank in the same order), and dwpe is the same
//   on every rank.
#pragma once
#include "../kernel_check.h"
#include "../../llm/ops/fused_classifier.cuh"
#include "../../llm/ops/vocab_parallel_classifier.cuh"
#include "../../llm/ops/encoder.cuh"

static void vp_classifier_case(int BT, int V, int tp_size, int write_dlogits) {
    int Vp = ((V + 127) / 128) * 128, Vl = Vp / tp_size;
    float dloss = 1.0f / (float)(BT * 3);
    std::vector<float> logits = kc_randn((size_t)BT * Vp, 2.0f);
    for (int i = 0; i < BT; i++)
        for (int v = V; v < Vp; v++) logits[(size_t)i * Vp + v] = (float)(floatX)(100.0f + v);  // padding: garbage
    std::vector<int> targets = kc_randint(BT, V);
    if (BT > 1) targets[0] = V - 1;
    if (BT > 2) targets[1] = Vl < V ? Vl : 0;  // the first column of rank 1
    // the one-rank reference on the whole rows (floatX-rounded logits, as the kernels see them)
    std::vector<float> want_logits(logits.size()), want_losses(BT);
    for (size_t q = 0; q < logits.size(); q++) want_logits[q] = (float)(floatX)logits[q];
    fused_classifier_cpu(want_logits.data(), want_losses.data(), dloss, targets.data(), BT, V, Vp, write_dlogits);

    // each rank's slice of the logits, its stats by the kernel and by the CPU reference
    std::vector<std::vector<float>> slice(tp_size);
    std::vector<float> all_k((size_t)tp_size * BT * 3), all_r((size_t)tp_size * BT * 3);
    int* d_targets = kc_upload_raw(targets);
    for (int r = 0; r < tp_size; r++) {
        slice[r].resize((size_t)BT * Vl);
        for (int i = 0; i < BT; i++)
            for (int j = 0; j < Vl; j++) slice[r][(size_t)i * Vl + j] = (float)(floatX)logits[(size_t)i * Vp + r * Vl + j];
        floatX* d_slice = kc_upload(slice[r]);
        float* d_stats = kc_alloc_poisoned<float>((size_t)3 * BT);
        vp_classifier_stats(d_stats, d_slice, d_targets, r * Vl, Vl, V, BT, 0);
        cudaCheck(cudaDeviceSynchronize());
        std::vector<float> st = kc_download_f32(d_stats, (size_t)3 * BT);
        std::copy(st.begin(), st.end(), all_k.begin() + (size_t)r * BT * 3);
        vp_classifier_stats_cpu(all_r.data() + (size_t)r * BT * 3, slice[r].data(), targets.data(), r * Vl, Vl, V, BT);
        device_free(d_slice);
        device_free(d_stats);
    }
    // every rank finishes from the gathered stats: losses (the same on every rank) and its dlogits
    float* d_all = kc_upload_raw(all_k);
    std::vector<float> got_logits(logits.size()), ref_logits(logits.size());
    char what[200];
    for (int r = 0; r < tp_size; r++) {
        floatX* d_slice = kc_upload(slice[r]);
        float* d_losses = kc_alloc_poisoned<float>(BT);
        vp_classifier_finish(d_slice, d_losses, d_all, tp_size, dloss, d_targets, r * Vl, Vl, V, BT, write_dlogits, 0);
        cudaCheck(cudaDeviceSynchronize());
        std::vector<float> got_losses = kc_download_f32(d_losses, BT), got = kc_download(d_slice, (size_t)BT * Vl);
        std::vector<float> ref = slice[r], ref_losses(BT);
        vp_classifier_finish_cpu(ref.data(), ref_losses.data(), all_r.data(), tp_size, dloss, targets.data(), r * Vl, Vl, V,
                                 BT, write_dlogits);
        snprintf(what, sizeof(what), "vp_classifier losses BT=%d V=%d tp=%d rank %d vs one-rank fused_classifier_cpu", BT, V, tp_size, r);
        kc_compare(what, got_losses, want_losses, 1e-5f, 1e-5f, 1e-5f, 1e-5f);
        snprintf(what, sizeof(what), "vp_classifier_cpu losses BT=%d V=%d tp=%d rank %d vs one-rank fused_classifier_cpu", BT, V, tp_size, r);
        kc_compare(what, ref_losses, want_losses, 1e-5f, 1e-5f, 1e-5f, 1e-5f);
        for (int i = 0; i < BT; i++)
            for (int j = 0; j < Vl; j++) {
                got_logits[(size_t)i * Vp + r * Vl + j] = got[(size_t)i * Vl + j];
                ref_logits[(size_t)i * Vp + r * Vl + j] = ref[(size_t)i * Vl + j];
            }
        device_free(d_slice);
        device_free(d_losses);
    }
    if (write_dlogits) {
        snprintf(what, sizeof(what), "vp_classifier dlogits BT=%d V=%d tp=%d vs one-rank fused_classifier_cpu", BT, V, tp_size);
        kc_compare(what, got_logits, want_logits, 1e-8f, 3e-5f, 1e-6f, 4e-3f);
        snprintf(what, sizeof(what), "vp_classifier_cpu dlogits BT=%d V=%d tp=%d vs one-rank fused_classifier_cpu", BT, V, tp_size);
        kc_compare(what, ref_logits, want_logits, 1e-8f, 3e-5f, 1e-6f, 4e-3f);
    } else {
        std::vector<float> orig(logits.size());
        for (size_t q = 0; q < logits.size(); q++) orig[q] = (float)(floatX)logits[q];
        snprintf(what, sizeof(what), "vp_classifier leaves logits BT=%d V=%d tp=%d", BT, V, tp_size);
        kc_compare(what, got_logits, orig, 0.0f, 0.0f, 0.0f, 0.0f);
    }
    device_free(d_all);
    device_free(d_targets);
}

static void vp_encoder_case(int B, int T, int C, int Vp, int tp_size) {
    int maxT = T + 3, BT = B * T, Vl = Vp / tp_size;
    std::vector<float> wte = kc_randn((size_t)Vp * C, 1.0f), wpe = kc_randn((size_t)maxT * C, 1.0f);
    std::vector<float> dout = kc_randn((size_t)BT * C, 1.0f), dwte0 = kc_randn((size_t)Vp * C, 1.0f);
    std::vector<float> dwpe0 = kc_randn((size_t)maxT * C, 1.0f);
    std::vector<int> inp = kc_randint(BT, Vp);
    int* d_inp = kc_upload_raw(inp);
    floatX *d_wte = kc_upload(wte), *d_wpe = kc_upload(wpe), *d_dout = kc_upload(dout);
    floatX *d_out = kc_alloc_poisoned<floatX>((size_t)BT * C), *d_dwte = kc_upload(dwte0), *d_dwpe = kc_upload(dwpe0);
    float* scratch = kc_alloc_poisoned<float>((size_t)BT * C);
    encoder_forward(d_out, d_inp, d_wte, d_wpe, B, T, C, 0);
    encoder_backward(d_dwte, d_dwpe, scratch, d_dout, d_inp, inp.data(), B, T, C, 0);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<float> want = kc_download(d_out, (size_t)BT * C), want_dwte = kc_download(d_dwte, (size_t)Vp * C);
    std::vector<float> want_dwpe = kc_download(d_dwpe, (size_t)maxT * C);
    std::vector<float> sum((size_t)BT * C, 0.0f), dwte((size_t)Vp * C);
    int dwpe_same = 1;
    for (int r = 0; r < tp_size; r++) {
        std::vector<float> wte_r(wte.begin() + (size_t)r * Vl * C, wte.begin() + (size_t)(r + 1) * Vl * C);
        std::vector<float> dwte_r(dwte0.begin() + (size_t)r * Vl * C, dwte0.begin() + (size_t)(r + 1) * Vl * C);
        floatX *dw = kc_upload(wte_r), *ddw = kc_upload(dwte_r), *ddp = kc_upload(dwpe0);
        encoder_forward_range(d_out, d_inp, dw, r == 0 ? d_wpe : NULL, r * Vl, Vl, B, T, C, 0);
        encoder_backward_range(ddw, ddp, scratch, d_dout, d_inp, inp.data(), r * Vl, Vl, B, T, C, 0);
        cudaCheck(cudaDeviceSynchronize());
        std::vector<float> out = kc_download(d_out, (size_t)BT * C), g = kc_download(ddw, (size_t)Vl * C);
        for (size_t q = 0; q < sum.size(); q++) sum[q] = (float)(floatX)(sum[q] + out[q]);  // the all-reduce
        std::copy(g.begin(), g.end(), dwte.begin() + (size_t)r * Vl * C);
        dwpe_same &= kc_download(ddp, (size_t)maxT * C) == want_dwpe;
        device_free(dw); device_free(ddw); device_free(ddp);
    }
    char what[160];
    snprintf(what, sizeof(what), "encoder_forward_range over %d vocabulary ranges, summed, B=%d T=%d C=%d Vp=%d", tp_size, B, T, C, Vp);
    kc_compare(what, sum, want, 0.0f, 0.0f, 0.0f, 0.0f);
    snprintf(what, sizeof(what), "encoder_backward_range dwte over %d vocabulary ranges B=%d T=%d C=%d Vp=%d", tp_size, B, T, C, Vp);
    kc_compare(what, dwte, want_dwte, 0.0f, 0.0f, 0.0f, 0.0f);
    check(dwpe_same, "encoder_backward_range dwpe the same on each of %d ranks as one rank's, B=%d T=%d C=%d", tp_size, B, T, C);
    device_free(d_inp); device_free(d_wte); device_free(d_wpe); device_free(d_dout); device_free(d_out);
    device_free(d_dwte); device_free(d_dwpe); device_free(scratch);
}

static void test_vocab_parallel(void) {
    const int BTs[] = {1, 5};
    const int Vs[] = {7, 100, 1000};
    for (int tp_size : {2, 4})
        for (int b : BTs)
            for (int v : Vs) vp_classifier_case(b, v, tp_size, 1);
    vp_classifier_case(3, 1000, 4, 0);
    vp_classifier_case(2, 9001, 2, 1);  // more chunks than threads on a rank: the block-strided loops
    vp_encoder_case(2, 33, 40, 128, 2);
    vp_encoder_case(3, 20, 264, 256, 4);
}
