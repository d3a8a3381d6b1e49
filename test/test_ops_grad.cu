// test_ops_grad.cu: finite-difference checks of every op's backward (the CPU references in llm/*.cuh)
// on tiny shapes with fresh random inputs (the seed is printed; pass one as argv[1] to repeat a run).
//
// Each op is checked through a scalar L = sum_i R_i * out_i with a fixed random R, so dL/dout = R.
// The numeric derivative is Richardson-extrapolated central differences in float inputs:
//   D(h) = (L(x+h) - L(x-h)) / 2h,   D* = (4 D(h/2) - D(h)) / 3,   h = 1e-2,
// whose truncation error is O(h^4) ~ 1e-8 * |f^(5)|. L itself is summed in double from float outputs,
// so the rounding error of L is about 6e-8 * sum|R_i out_i| (float's relative precision times the
// size of the terms); divided by the step it gives an error of ~6e-8 * S / h, with S = sum|R_i out_i|.
// The tolerance is |D* - analytic| <= 3e-7 * S / h + 1e-3 * |analytic|: the first term is 5x the rounding
// bound, the second covers the O(h^4) truncation of curved ops (GELU, softmax).
// Every check also asserts that the analytic gradient it compares is not all near zero, so a backward
// that writes nothing cannot pass. A wrong term, index or sign gives errors of the size of the gradient.
#include "../llm/core/common.h"
#include "../llm/core/rand.h"
#include "../llm/ops/encoder.cuh"
#include "../llm/ops/layernorm.cuh"
#include "../llm/ops/gelu.cuh"
#include "../llm/ops/matmul.cuh"
#include "../llm/ops/attention.cuh"
#include "../llm/ops/fused_classifier.cuh"
#include "test_common.h"
#include "../llm/core/usage.h"
#include <functional>
#include <vector>

static Rng rng;

static std::vector<float> randn(size_t n, float std) {
    std::vector<float> v(n);
    rng_normal(&rng, v.data(), n, 0.0f, std);
    return v;
}

// L = sum R_i out_i in double, and S = sum |R_i out_i| (the size of the terms)
static double dot(const std::vector<float>& out, const std::vector<float>& R, double* S) {
    double s = 0.0, a = 0.0;
    for (size_t i = 0; i < out.size(); i++) { s += (double)out[i] * R[i]; a += fabs((double)out[i] * R[i]); }
    if (S) *S = a;
    return s;
}

// checks `samples` random entries of x (n) against the analytic gradient; loss() recomputes L from x
static void fd_check(const char* what, float* x, size_t n, const float* analytic,
                     const std::function<double(double*)>& loss, int samples) {
    const float h = 1e-2f;
    double S;
    loss(&S);
    float worst = 0.0f, maxg = 0.0f;
    int bad = 0;
    for (int s = 0; s < samples; s++) {
        size_t i = (size_t)(rng_u64(&rng) % n);
        float x0 = x[i];
        double d[2];
        for (int k = 0; k < 2; k++) {
            float hk = k == 0 ? h : h / 2;
            x[i] = x0 + hk; double lp = loss(NULL);
            x[i] = x0 - hk; double lm = loss(NULL);
            x[i] = x0;
            d[k] = (lp - lm) / ((double)(x0 + hk) - (double)(x0 - hk));  // the step actually taken in float
        }
        double fd = (4.0 * d[1] - d[0]) / 3.0;
        double err = fabs(fd - analytic[i]);
        double tol = 3e-7 * S / h + 1e-3 * fabs(analytic[i]);
        if (err > tol) bad = 1;
        if (err > worst) worst = (float)err;
        maxg = fmaxf(maxg, fabsf(analytic[i]));
    }
    check(!bad && maxg > 1e-3f, "%s: %d entries, max |fd - analytic| = %.2e, max |grad| = %.3f, S = %.2f", what,
          samples, worst, maxg, S);
}

static const char* USAGE =
    "[SEED]\n"
    "Checks every op's backward (the CPU references) against Richardson-extrapolated finite differences on\n"
    "tiny shapes.\n"    "  SEED  the random inputs' seed, to repeat a run (default: from the clock; printed)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : (uint64_t)time(NULL);
    printf("seed %llu\n", (unsigned long long)seed);
    rng_init(&rng, seed);
    const int B = 2, T = 5, C = 12, NH = 3, V = 11, Vp = 16, maxT = 7;
    const int BT = B * T;

    {  // encoder
        std::vector<int> inp(BT);
        for (int i = 0; i < BT; i++) inp[i] = (int)(rng_u64(&rng) % V);
        auto wte = randn((size_t)Vp * C, 1.0f), wpe = randn((size_t)maxT * C, 1.0f), R = randn((size_t)BT * C, 1.0f);
        std::vector<float> out((size_t)BT * C), dwte((size_t)Vp * C, 0.0f), dwpe((size_t)maxT * C, 0.0f);
        auto L = [&](double* S) { encoder_forward_cpu(out.data(), inp.data(), wte.data(), wpe.data(), 0, INT_MAX, B, T, C); return dot(out, R, S); };
        encoder_backward_cpu(dwte.data(), dwpe.data(), R.data(), inp.data(), 0, INT_MAX, B, T, C);
        fd_check("encoder dwte", wte.data(), wte.size(), dwte.data(), L, 40);
        fd_check("encoder dwpe", wpe.data(), wpe.size(), dwpe.data(), L, 40);
    }
    {  // layernorm
        auto inp = randn((size_t)BT * C, 1.0f), w = randn(C, 1.0f), b = randn(C, 1.0f), R = randn((size_t)BT * C, 1.0f);
        std::vector<float> out((size_t)BT * C), mean(BT), rstd(BT), dinp((size_t)BT * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
        auto L = [&](double* S) { layernorm_forward_cpu(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), BT, C); return dot(out, R, S); };
        L(NULL);
        layernorm_backward_cpu(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(), mean.data(), rstd.data(), BT, C);
        fd_check("layernorm dinp", inp.data(), inp.size(), dinp.data(), L, 40);
        fd_check("layernorm dweight", w.data(), w.size(), dw.data(), L, 12);
        fd_check("layernorm dbias", b.data(), b.size(), db.data(), L, 12);
    }
    {  // gelu
        auto inp = randn((size_t)BT * C, 2.0f), R = randn((size_t)BT * C, 1.0f);
        std::vector<float> out((size_t)BT * C), dinp((size_t)BT * C);
        auto L = [&](double* S) { gelu_forward_cpu(out.data(), inp.data(), out.size()); return dot(out, R, S); };
        gelu_backward_cpu(dinp.data(), inp.data(), R.data(), inp.size());
        fd_check("gelu dinp", inp.data(), inp.size(), dinp.data(), L, 40);
    }
    for (int fused_gelu = 0; fused_gelu <= 1; fused_gelu++) {  // matmul, plain and with the GELU epilogue
        const int OC = 7;
        auto inp = randn((size_t)BT * C, 1.0f), w = randn((size_t)OC * C, 0.5f), b = randn(OC, 0.5f), R = randn((size_t)BT * OC, 1.0f);
        std::vector<float> out((size_t)BT * OC), pre((size_t)BT * OC), dinp((size_t)BT * C), dw((size_t)OC * C, 0.0f), db(OC, 0.0f);
        // out = gelu(inp @ w^T + b) with the epilogue; its backward is the dGELU applied to dout, then
        // the plain backward: matmul_backward's pre_gelu argument fuses dGELU on its *input* side, so we
        // check it as the backward of gelu(inp) @ w^T + b (inp = the pre-activation), as the MLP uses it.
        std::vector<float> act((size_t)BT * C);
        auto L = [&](double* S) {
            const float* in = inp.data();
            if (fused_gelu) { gelu_forward_cpu(act.data(), inp.data(), act.size()); in = act.data(); }
            matmul_forward_cpu(out.data(), NULL, in, w.data(), b.data(), BT, C, OC);
            return dot(out, R, S);
        };
        L(NULL);
        matmul_backward_cpu(dinp.data(), dw.data(), db.data(), R.data(), fused_gelu ? act.data() : inp.data(), w.data(),
                            fused_gelu ? inp.data() : NULL, BT, C, OC);
        const char* names[2][3] = {{"matmul dinp", "matmul dweight", "matmul dbias"},
                                   {"matmul+dGELU dinp", "matmul+dGELU dweight", "matmul+dGELU dbias"}};
        fd_check(names[fused_gelu][0], inp.data(), inp.size(), dinp.data(), L, 40);
        fd_check(names[fused_gelu][1], w.data(), w.size(), dw.data(), L, 30);
        fd_check(names[fused_gelu][2], b.data(), b.size(), db.data(), L, 7);
    }
    {  // matmul forward with the GELU epilogue against gelu(matmul)
        const int OC = 9;
        auto inp = randn((size_t)BT * C, 1.0f), w = randn((size_t)OC * C, 0.5f), b = randn(OC, 0.5f);
        std::vector<float> out((size_t)BT * OC), pre((size_t)BT * OC), plain((size_t)BT * OC), want((size_t)BT * OC);
        matmul_forward_cpu(out.data(), pre.data(), inp.data(), w.data(), b.data(), BT, C, OC);
        matmul_forward_cpu(plain.data(), NULL, inp.data(), w.data(), b.data(), BT, C, OC);
        gelu_forward_cpu(want.data(), plain.data(), plain.size());
        check_close("matmul GELU epilogue: pre_gelu", pre.data(), plain.data(), pre.size(), 0.0f, 0.0f);
        check_close("matmul GELU epilogue: out = gelu(pre)", out.data(), want.data(), out.size(), 1e-6f, 1e-6f);
    }
    {  // attention
        auto inp = randn((size_t)BT * 3 * C, 1.0f), R = randn((size_t)BT * C, 1.0f);
        std::vector<float> out((size_t)BT * C), lse((size_t)B * NH * T), dinp((size_t)BT * 3 * C);
        auto L = [&](double* S) { attention_forward_cpu(out.data(), lse.data(), inp.data(), B, T, C, NH); return dot(out, R, S); };
        L(NULL);
        attention_backward_cpu(dinp.data(), R.data(), inp.data(), B, T, C, NH);
        fd_check("attention dinp (q, k, v)", inp.data(), inp.size(), dinp.data(), L, 60);
        // causality: the output at t must not depend on positions > t
        L(NULL);  // out from the unperturbed input (fd_check leaves the last perturbed one)
        std::vector<float> out2((size_t)BT * C);
        std::vector<float> inp2 = inp;
        for (int c = 0; c < 3 * C; c++) inp2[((size_t)0 * T + (T - 1)) * 3 * C + c] += 1.0f;  // perturb b=0, t=T-1
        attention_forward_cpu(out2.data(), lse.data(), inp2.data(), B, T, C, NH);
        int same = 1;
        for (int t = 0; t < T - 1; t++)
            for (int c = 0; c < C; c++) same &= out2[(size_t)t * C + c] == out[(size_t)t * C + c];
        check(same, "attention is causal: perturbing the last position leaves earlier outputs unchanged");
    }
    {  // fused classifier: L = dloss * sum_i loss_i, dlogits written in place
        auto logits = randn((size_t)BT * Vp, 2.0f);
        std::vector<int> tgt(BT);
        for (int i = 0; i < BT; i++) tgt[i] = (int)(rng_u64(&rng) % V);
        const float dloss = 1.0f / BT;
        std::vector<float> work((size_t)BT * Vp), losses(BT), dlogits((size_t)BT * Vp);
        auto L = [&](double* S) {
            work = logits;
            fused_classifier_cpu(work.data(), losses.data(), dloss, tgt.data(), BT, V, Vp, 0);
            double s = 0.0;
            for (int i = 0; i < BT; i++) s += (double)losses[i] * dloss;
            if (S) *S = fabs(s);
            return s;
        };
        L(NULL);
        dlogits = logits;
        fused_classifier_cpu(dlogits.data(), losses.data(), dloss, tgt.data(), BT, V, Vp, 1);
        fd_check("fused classifier dlogits", logits.data(), logits.size(), dlogits.data(), L, 60);
        int pad_zero = 1;
        for (int i = 0; i < BT; i++)
            for (int v = V; v < Vp; v++) pad_zero &= dlogits[(size_t)i * Vp + v] == 0.0f;
        check(pad_zero, "fused classifier: padded vocabulary columns get zero gradient");
    }
    {  // exp_fast (common.h), used by the CPU classifier and GELU: relative error against double exp
        double worst = 0.0;
        for (float x = -87.0f; x <= 88.0f; x += 1.0e-3f) {
            double e = exp((double)x), r = fabs(exp_fast(x) - e) / e;
            if (r > worst) worst = r;
        }
        check(worst < 2e-7, "exp_fast: max relative error %.2e over [-87, 88] (bound 2e-7)", worst);
    }
    return test_summary("test_ops_grad");
}
