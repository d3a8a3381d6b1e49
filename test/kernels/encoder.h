// test/kernels/encoder.h: encoder_forward and encoder_backward against encoder_forward_cpu and
// encoder_backward_cpu on the same floatX-rounded inputs, and both against a float64 evaluation of the
// embedding written here (out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]; dwte[v,:] += the dout rows of the
// positions holding token v, dwpe[t,:] += the dout rows of position t), so that the reference is
// checked by something that does not share its loops.
//
// Shapes: (B, T, C) from one position to B*T = 1028, C = 8 (one 16-byte chunk in BF16), 40 (not a
// multiple of a warp's 32 chunks), 264 (two channel chunks per bucket in BF16, the second nearly
// empty) and 768; tables larger than the tokens and positions used (Vp > max token, maxT > T), so the
// rows the backward must leave alone are checked too. Tokens are skewed: half of them are one token,
// so some buckets pass ENCODER_WTE_LONG positions and take the kernel's many-warp path.
//
// The backward accumulates: dwte and dwpe start from random values (uploaded, so defined), and the
// reference adds to the same values. It is run twice from the same start: bitwise equal (determinism).
//
// Tolerances (|got - want| <= atol + rtol |want|):
// - forward: one addition of two floatX values, in FP32 by both: FP32 exact (atol 0, rtol 2^-24 for
//   a contracted or reordered add), BF16 one rounding of the sum to bf16 (rtol 2^-8 = 3.9e-3).
//   Against float64: none. The float64 sum of two floatX values is exact; rounded to float it is the
//   correctly rounded float sum, which an IEEE float addition gives (the reference), and rounded on to
//   floatX it is what the kernel writes, in every build.
// - backward: each element is the initial value plus a sum of n terms dout ~ N(0, 1) (n = the token's
//   count for dwte, B for dwpe), added in another order than the reference's. Each addition rounds by
//   at most u = 2^-24 times the partial sum; with terms of random sign these errors add like a random
//   walk, standard deviation about u n max|dout| / 3 (the worst case, u n^2 max|dout|, is vacuous for
//   the long buckets). FP32: "a few ulps times the reduction length", atol = 4 u n max|dout| plus
//   8 ulps of the result, rtol 0. BF16: the same, plus one rounding of the result to bf16 (rtol 2^-8).
//   This bounds each side's error, so it serves unchanged for the kernel and for the reference against
//   the float64 sums (observed: about 1/20 of it in FP32; in BF16 the rounding to bf16 dominates).
//   A position dropped or counted twice, or a row added to the wrong token, moves an element by ~1.
#pragma once
#include "../kernel_check.h"
#include "../../llm/ops/encoder.cuh"

static void test_encoder(void) {
    struct { int B, T, C, maxT, Vp; } shapes[] = {
        {1, 1, 8, 1, 3}, {2, 7, 40, 9, 5}, {3, 33, 264, 40, 64}, {4, 257, 768, 260, 130},
    };
    for (auto s : shapes) {
        int B = s.B, T = s.T, C = s.C, maxT = s.maxT, Vp = s.Vp;
        size_t BT = (size_t)B * T;
        char what[160];
        // tokens: half are token Vp/2, the rest uniform over [0, Vp - 1)
        std::vector<int> inp = kc_randint(BT, Vp - 1);
        std::vector<int> coin = kc_randint(BT, 2);
        int max_count = 0;
        for (size_t i = 0; i < BT; i++) if (coin[i]) inp[i] = Vp / 2;
        {
            std::vector<int> count(Vp, 0);
            for (size_t i = 0; i < BT; i++) max_count = std::max(max_count, ++count[inp[i]]);
        }
        std::vector<float> wte = kc_randn((size_t)Vp * C, 1.0f);
        std::vector<float> wpe = kc_randn((size_t)maxT * C, 1.0f);
        int* d_inp = kc_upload_raw(inp);
        floatX* d_wte = kc_upload(wte);
        floatX* d_wpe = kc_upload(wpe);

        // forward
        floatX* d_out = kc_alloc_poisoned<floatX>(BT * C);
        encoder_forward(d_out, d_inp, d_wte, d_wpe, B, T, C, 0);
        std::vector<float> want(BT * C);
        encoder_forward_cpu(want.data(), inp.data(), wte.data(), wpe.data(), 0, INT_MAX, B, T, C);
        std::vector<float> got = kc_download(d_out, BT * C);
        snprintf(what, sizeof(what), "encoder_forward B=%d T=%d C=%d", B, T, C);
        kc_compare(what, got, want, 0.0f, 6e-8f, 0.0f, 4e-3f);
        // float64: the sum rounded to float (the reference), then to floatX (the kernel); both exact
        std::vector<float> sum32(BT * C), sumx(BT * C);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int c = 0; c < C; c++) {
                    size_t i = ((size_t)b * T + t) * C + c;
                    double v = (double)wte[(size_t)inp[b * T + t] * C + c] + (double)wpe[(size_t)t * C + c];
                    sum32[i] = (float)v;
                    sumx[i] = (float)(floatX)sum32[i];
                }
        snprintf(what, sizeof(what), "encoder_forward B=%d T=%d C=%d vs float64 (exact)", B, T, C);
        kc_compare(what, got, sumx, 0.0f, 0.0f, 0.0f, 0.0f);
        snprintf(what, sizeof(what), "encoder_forward_cpu B=%d T=%d C=%d vs float64 (exact)", B, T, C);
        kc_compare(what, want, sum32, 0.0f, 0.0f, 0.0f, 0.0f);

        // backward: dwte, dwpe start from random gradients
        std::vector<float> dout = kc_randn(BT * C, 1.0f);
        std::vector<float> dwte0 = kc_randn((size_t)Vp * C, 1.0f);
        std::vector<float> dwpe0 = kc_randn((size_t)maxT * C, 1.0f);
        floatX* d_dout = kc_upload(dout);
        floatX* d_dwte = kc_upload(dwte0);
        floatX* d_dwpe = kc_upload(dwpe0);
        float* d_scratch = kc_alloc_poisoned<float>(BT * C);  // gpt.h's scratch holds >= B*T*C floats
        encoder_backward(d_dwte, d_dwpe, d_scratch, d_dout, d_inp, inp.data(), B, T, C, 0);
        std::vector<float> want_dwte = dwte0, want_dwpe = dwpe0;
        encoder_backward_cpu(want_dwte.data(), want_dwpe.data(), dout.data(), inp.data(), 0, INT_MAX, B, T, C);
        const float u = 5.96e-8f;
        float tol_wte = 4.0f * u * max_count * kc_max_abs(dout) + 8.0f * u * kc_max_abs(want_dwte);
        float tol_wpe = 4.0f * u * B * kc_max_abs(dout) + 8.0f * u * kc_max_abs(want_dwpe);
        std::vector<float> got_dwte = kc_download(d_dwte, (size_t)Vp * C), got_dwpe = kc_download(d_dwpe, (size_t)maxT * C);
        snprintf(what, sizeof(what), "encoder_backward dwte B=%d T=%d C=%d (longest bucket %d)", B, T, C, max_count);
        kc_compare(what, got_dwte, want_dwte, tol_wte, 0.0f, tol_wte, 3.9e-3f);
        snprintf(what, sizeof(what), "encoder_backward dwpe B=%d T=%d C=%d", B, T, C);
        kc_compare(what, got_dwpe, want_dwpe, tol_wpe, 0.0f, tol_wpe, 3.9e-3f);
        // float64: the initial values plus the sums, rows untouched by the batch included
        std::vector<double> dwte64(dwte0.begin(), dwte0.end()), dwpe64(dwpe0.begin(), dwpe0.end());
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int c = 0; c < C; c++) {
                    double d = dout[((size_t)b * T + t) * C + c];
                    dwte64[(size_t)inp[b * T + t] * C + c] += d;
                    dwpe64[(size_t)t * C + c] += d;
                }
        std::vector<double> b_wte(dwte64.size()), b_wpe(dwpe64.size()), b_wte_x(dwte64.size()), b_wpe_x(dwpe64.size());
        for (size_t i = 0; i < b_wte.size(); i++) { b_wte[i] = tol_wte; b_wte_x[i] = kc_round_x(tol_wte, dwte64[i]); }
        for (size_t i = 0; i < b_wpe.size(); i++) { b_wpe[i] = tol_wpe; b_wpe_x[i] = kc_round_x(tol_wpe, dwpe64[i]); }
        snprintf(what, sizeof(what), "encoder_backward dwte B=%d T=%d C=%d vs float64", B, T, C);
        kc_check_bound(what, got_dwte, dwte64, b_wte_x);
        snprintf(what, sizeof(what), "encoder_backward dwpe B=%d T=%d C=%d vs float64", B, T, C);
        kc_check_bound(what, got_dwpe, dwpe64, b_wpe_x);
        snprintf(what, sizeof(what), "encoder_backward_cpu dwte B=%d T=%d C=%d vs float64", B, T, C);
        kc_check_bound(what, want_dwte, dwte64, b_wte);
        snprintf(what, sizeof(what), "encoder_backward_cpu dwpe B=%d T=%d C=%d vs float64", B, T, C);
        kc_check_bound(what, want_dwpe, dwpe64, b_wpe);

        // determinism: again from the same start, scratch poisoned again
        std::vector<floatX> first_wte = kc_download_raw(d_dwte, (size_t)Vp * C);
        std::vector<floatX> first_wpe = kc_download_raw(d_dwpe, (size_t)maxT * C);
        device_free(d_dwte);
        device_free(d_dwpe);
        d_dwte = kc_upload(dwte0);
        d_dwpe = kc_upload(dwpe0);
        kc_poison(d_scratch, BT * C * sizeof(float));
        encoder_backward(d_dwte, d_dwpe, d_scratch, d_dout, d_inp, inp.data(), B, T, C, 0);
        std::vector<floatX> second_wte = kc_download_raw(d_dwte, (size_t)Vp * C);
        std::vector<floatX> second_wpe = kc_download_raw(d_dwpe, (size_t)maxT * C);
        check(memcmp(first_wte.data(), second_wte.data(), first_wte.size() * sizeof(floatX)) == 0 &&
                  memcmp(first_wpe.data(), second_wpe.data(), first_wpe.size() * sizeof(floatX)) == 0,
              "encoder_backward B=%d T=%d C=%d: two runs bitwise equal", B, T, C);

        device_free(d_inp);
        device_free(d_wte);
        device_free(d_wpe);
        device_free(d_out);
        device_free(d_dout);
        device_free(d_dwte);
        device_free(d_dwpe);
        device_free(d_scratch);
    }
}
