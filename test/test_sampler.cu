// test_sampler.cu: generation (llm/model/sampler.h) against independent references.
//   1. The KV-cache forward: the logits it computes at each position equal those of the stage's full
//      forward of the whole sequence (llm/model/stage.h: causal attention, so position t of one full forward
//      sees exactly tokens 0..t), for a random model and sequence.
//   2. Its cost: generating n tokens after a prompt of p runs p + n - 1 single-position forwards.
//   3. Greedy generation: every generated token is the argmax of the full forward's logits.
//   4. Sampling draws from softmax(logits): sample_softmax on fixed logits, and (CPU build) the whole
//      path (model -> logits -> coin -> token) many times from one prompt, tested by Pearson's
//      chi-square against the softmax of the full forward's logits. A sampler that is greedy, or uses
//      another temperature (logits scaled by 2 or 1/2), or an off-by-one cdf, fails by a wide margin
//      (the checks show the same draws rejected against temperatures 2 and 1/2).
//   5. FP8: the sampler of a stage with FP8 linears (an --fp8 run's) decodes through them: its logits
//      equal the FP8 stage's full forward's within the tolerance of 1, and differ from the floatX
//      model's by more than twice that tolerance (FP32 builds; every build: the sampler's linears are the FP8 stage's).
//   6. A mixture-of-experts model with a selection bias (--expert-bias-rate's, llm/train/moe_balance.h): the
//      sampler given the bias (Sampler.moe_bias) decodes what the stage's full forward with the same bias gives
//      (tolerance of 1), and the bias matters: the full forward without it differs by more than twice that.
// Tolerances of 1. FP32: the decode path multiplies one row at a time (other BLAS blocking, other
// summation order) and sums attention over the cache in its own order: ~1e-6 of the logits' scale:
// 1e-5 * scale + 1e-4 relative. BF16: activations are rounded to bf16 at every op in both paths, but
// at different points of different kernels: 3e-2 * scale (observed up to 1% of the scale over seeds;
// a wrong position, a missing cache entry or a misplaced head changes logits by O(scale)).
#include "../llm/core/common.h"
#include "../llm/core/context.h"
#include "../llm/comm/comm.h"
#include "../llm/model/units.h"
#include "../llm/model/stage.h"
#include "../llm/parallel/dp.h"
#include "../llm/parallel/dp_export.h"
#include "../llm/model/sampler.h"
#include "test_common.h"
#include "../llm/core/usage.h"

#if LLM_HAS_KERNELS && !defined(ENABLE_FP32)
static const int BF16 = 1;
#else
static const int BF16 = 0;
#endif

// Pearson's chi-square of counts against probabilities p (n categories, total draws); categories with
// expected count < 5 are pooled (the statistic's usual condition)
static double chi_square(const long* counts, const double* p, int n, long total, int* dof) {
    double chi = 0.0, pool_obs = 0.0, pool_exp = 0.0;
    int cats = 0;
    for (int i = 0; i < n; i++) {
        double e = p[i] * total;
        if (e < 5.0) { pool_obs += counts[i]; pool_exp += e; continue; }
        chi += (counts[i] - e) * (counts[i] - e) / e;
        cats++;
    }
    if (pool_exp > 0.0) { chi += (pool_obs - pool_exp) * (pool_obs - pool_exp) / (pool_exp > 1e-9 ? pool_exp : 1e-9); cats++; }
    *dof = cats - 1;
    return chi;
}
// the chi-square quantile at p = 1e-6 (Wilson-Hilferty: chi2/dof is about normal after a cube root;
// z = 4.75), so a correct sampler fails one run in a million
static double chi_threshold(int dof) {
    double k = dof, a = 2.0 / (9.0 * k), z = 4.75, c = 1.0 - a + z * sqrt(a);
    return k * c * c * c;
}

static void softmax64(const float* logits, int n, double* p) {
    double m = logits[0], s = 0.0;
    for (int i = 1; i < n; i++) m = logits[i] > m ? logits[i] : m;
    for (int i = 0; i < n; i++) { p[i] = exp((double)logits[i] - m); s += p[i]; }
    for (int i = 0; i < n; i++) p[i] /= s;
}

static const char* USAGE =
    "(no arguments)\n"
    "Tests generation (llm/model/sampler.h): the KV-cache forward against the full forward, its cost, greedy\n"
    "decoding, sampling by a chi-square test, and decoding through FP8 linears.\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    Comm comm;
    comm_init(&comm, &argc, &argv, 0, 1, 1);
    context_init();
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
    printf("test_sampler: seed %llu, %s\n", (unsigned long long)seed, PRECISION_MODE);
    Rng rng;
    rng_init(&rng, seed);

    // 4a. sample_softmax alone: fixed logits, 200000 coins
    {
        const int n = 8;
        const double probs[n] = {0.3, 0.2, 0.15, 0.1, 0.1, 0.08, 0.05, 0.02};
        float logits[n];
        for (int i = 0; i < n; i++) logits[i] = (float)log(probs[i]) + 1.5f;  // a shift does not change softmax
        long counts[n] = {0};
        const long draws = 200000;
        for (long d = 0; d < draws; d++) counts[sample_softmax(logits, n, rng_f32(&rng))]++;
        int dof;
        double chi = chi_square(counts, probs, n, draws, &dof);
        check(chi < chi_threshold(dof), "sample_softmax: %ld draws vs softmax(logits): chi-square %.1f, %d dof (threshold %.0f)",
              draws, chi, dof, chi_threshold(dof));
        // the test has power: the same counts against the softmax at temperature 2 and 1/2 are rejected
        float hot[n], cold[n];
        double ph[n], pc[n];
        for (int i = 0; i < n; i++) { hot[i] = logits[i] / 2; cold[i] = logits[i] * 2; }
        softmax64(hot, n, ph);
        softmax64(cold, n, pc);
        double ch = chi_square(counts, ph, n, draws, &dof), cc = chi_square(counts, pc, n, draws, &dof);
        check(ch > 10 * chi_threshold(dof) && cc > 10 * chi_threshold(dof),
              "the same draws against temperature 2 and 1/2: chi-square %.0f and %.0f (both rejected)", ch, cc);
    }

    // a random model, one process (the data-parallel policy over one rank)
    GPTConfig cfg = {32, 61, pad_vocab(61), 2, 4, 32};  // maxT V Vp L NH C
    DataParallel dp;
    dp_init(&dp, &comm, cfg, NULL);
    float* params = (float*)mallocCheck(dp.lay.num_parameters * sizeof(float));
    init_parameters(cfg, seed, params);
    // weights 3x those of GPT-2's init: logits spread enough that the argmax is clear and the softmax
    // far from uniform, while BF16 still follows (at 8x, attention is so peaked that BF16's rounding
    // flips heads from one position to another: 13% of the logits' scale between the two paths)
    for (size_t i = 0; i < dp.lay.num_parameters; i++) params[i] *= 3.0f;
    dp_import_params(&dp, params, 0);
    free(params);
    int V = cfg.vocab_size, Vp = cfg.padded_vocab_size, N = 20;
    int tokens[32];
    for (int i = 0; i < N; i++) tokens[i] = (int)(rng_u64(&rng) % V);

    // 1. the cache's logits at each position vs one full forward of the sequence
    Stage st;
    stage_init(&st, &dp.lay, &dp.hooks, tp_group(&comm, 0), stage_range_all(cfg), 1, N, RECOMPUTE_NONE, 1);
    Sampler sp;
    sampler_init(&sp, &st, 1);
    stage_forward(&st, 0, tokens, NULL, NULL, 0.0f);
    float* full = (float*)mallocCheck((size_t)N * Vp * sizeof(float));
    copy_to_host_float(full, st.slots[0].logits, (size_t)N * Vp);
    float* cached = (float*)mallocCheck((size_t)N * Vp * sizeof(float));
    for (int t = 0; t < N; t++) {
        sampler_forward(&sp, tokens[t], t, 1);
        memcpy(cached + (size_t)t * Vp, sp.logits_host, Vp * sizeof(float));
    }
    float scale = 0.0f;
    for (int t = 0; t < N; t++) for (int v = 0; v < V; v++) scale = fmaxf(scale, fabsf(full[(size_t)t * Vp + v]));
    float* a = (float*)mallocCheck((size_t)N * V * sizeof(float));
    float* b = (float*)mallocCheck((size_t)N * V * sizeof(float));
    for (int t = 0; t < N; t++) {
        memcpy(a + (size_t)t * V, cached + (size_t)t * Vp, V * sizeof(float));
        memcpy(b + (size_t)t * V, full + (size_t)t * Vp, V * sizeof(float));
    }
    check_close("KV-cache logits at positions 0..19 vs the full forward", a, b, (size_t)N * V,
                (BF16 ? 3e-2f : 1e-5f) * scale, BF16 ? 0.0f : 1e-4f);

    // 2. and 3. greedy generation: 12 new tokens after a prompt of 8, each the argmax of the full forward
    int gen[32], p = 8, n_new = 12;
    memcpy(gen, tokens, p * sizeof(int));
    long long before = sp.positions;
    int len = sampler_generate(&sp, gen, p, n_new, -1, NULL);
    check(len == p + n_new && sp.positions - before == p + n_new - 1,
          "generating %d tokens after a prompt of %d ran %lld single-position forwards (p + n - 1 = %d)", n_new, p,
          sp.positions - before, p + n_new - 1);
    Stage st2;
    stage_init(&st2, &dp.lay, &dp.hooks, tp_group(&comm, 0), stage_range_all(cfg), 1, len, RECOMPUTE_NONE, 1);
    stage_forward(&st2, 0, gen, NULL, NULL, 0.0f);
    float* full2 = (float*)mallocCheck((size_t)len * Vp * sizeof(float));
    copy_to_host_float(full2, st2.slots[0].logits, (size_t)len * Vp);
    int agree = 0, bad = 0;
    float tie = (BF16 ? 3e-2f : 1e-5f) * scale;  // logits closer than the tolerance of 1 are a tie
    for (int t = p - 1; t < len - 1; t++) {
        const float* l = full2 + (size_t)t * Vp;
        int best = sample_argmax(l, V);
        agree += gen[t + 1] == best;
        bad += gen[t + 1] != best && l[best] - l[gen[t + 1]] > tie;
    }
    check(bad == 0, "greedy generation: %d of %d tokens are the argmax of the full forward's logits, the others ties within %.2g",
          agree, n_new, tie);

    // generation stops at the model's context: a prompt of maxT - 1 tokens asked for 5 more ends at maxT
    {
        int* buf = (int*)mallocCheck((size_t)(cfg.max_seq_len + 8) * sizeof(int));
        for (int i = 0; i < cfg.max_seq_len - 1; i++) buf[i] = (int)(rng_u64(&rng) % V);
        int got = sampler_generate(&sp, buf, cfg.max_seq_len - 1, 5, -1, NULL);
        check(got == cfg.max_seq_len, "a prompt of maxT - 1 = %d tokens and 5 new ones stops at maxT = %d tokens (got %d)",
              cfg.max_seq_len - 1, cfg.max_seq_len, got);
        free(buf);
    }

    // 4b. (CPU build) the whole path: one prompt, 20000 sampled next tokens vs softmax of the full forward
    if (LLM_BUILD_CPU) {
        const long draws = 20000;
        long* counts = (long*)calloc(V, sizeof(long));
        double* probs = (double*)mallocCheck(V * sizeof(double));
        softmax64(full + (size_t)(4 - 1) * Vp, V, probs);  // the logits after the prompt tokens[0..4)
        for (long d = 0; d < draws; d++) {
            int g[8] = {0};
            memcpy(g, tokens, 4 * sizeof(int));
            sampler_generate(&sp, g, 4, 1, -1, &rng);
            counts[g[4]]++;
        }
        int dof;
        double chi = chi_square(counts, probs, V, draws, &dof);
        double pmax = 0.0;
        for (int v = 0; v < V; v++) pmax = probs[v] > pmax ? probs[v] : pmax;
        check(chi < chi_threshold(dof) && pmax < 0.9,
              "sampler_generate: %ld draws of the next token vs softmax of the model's logits: chi-square %.1f, %d dof "
              "(threshold %.0f; the most likely token has p = %.2f, so greedy would fail)", draws, chi, dof, chi_threshold(dof), pmax);
        float hot[128], cold[128];
        double* ph = (double*)mallocCheck(V * sizeof(double));
        for (int v = 0; v < V; v++) { hot[v] = full[(size_t)3 * Vp + v] / 2; cold[v] = full[(size_t)3 * Vp + v] * 2; }
        softmax64(hot, V, ph);
        int dh, dc;
        double ch = chi_square(counts, ph, V, draws, &dh);
        softmax64(cold, V, ph);
        double cc = chi_square(counts, ph, V, draws, &dc);
        check(ch > chi_threshold(dh) && cc > chi_threshold(dc),
              "the same draws against the model's softmax at temperature 2 and 1/2: chi-square %.0f and %.0f (both rejected)", ch, cc);
        free(ph);
        free(counts);
        free(probs);
    }

    // 5. FP8: the sampler of a stage with FP8 linears (--fp8) decodes through them: its KV-cache logits
    //    equal the FP8 stage's full forward's (tolerance of 1: the mx recipe scales 32-element blocks
    //    along each row's inner dimension, so one token's row is quantized as it is in the whole
    //    sequence) and differ from the floatX model's (section 1's full forward) by more than twice that
    //    tolerance: E4M3 keeps 3 bits of mantissa (each operand moves by up to 2^-4 relative), which moves
    //    these logits by 11-16% of their scale (measured in FP32), against the tolerance's 1e-3 %;
    //    decoding in floatX stays within the tolerance (section 1). FP32 builds only: BF16 rounds
    //    the two paths' activations at different points (a bf16 ulp, 2^-8), which FP8's steps
    //    (2^-4 to 2^-3) turn into whole steps on the elements near a boundary: measured 0.23 = 7% of the
    //    scale between the FP8 decode and the FP8 full forward, about as far as FP8 is from BF16 (0.38).
    //    Every build checks that the sampler's linears are the FP8 stage's (recipe state, slot, precision).
    {
        Stage st8;
        stage_init(&st8, &dp.lay, &dp.hooks, tp_group(&comm, 0), stage_range_all(cfg), 1, N, RECOMPUTE_NONE, 1);
        Fp8State fp8;
        Fp8Config fc = {FP8_RECIPE_MX, 0, 1, FP8_AMAX_REDUCE_MAX, 0};
        fp8_init(&fp8, fc, dp.comm, cfg.num_layers, stage_fp8_max_operand(&st8), cfg.num_experts);
        stage_enable_fp8(&st8, &fp8);
        Sampler sp8;
        sampler_init(&sp8, &st8, 1);
        // every build: each of the sampler's linears is the FP8 stage's (its recipe state and precision)
        int same = 0;
        for (int l = 0; l < cfg.num_layers; l++) {
            const LinearSpec* d[4] = {&sp8.lin[l].qkv, &sp8.lin[l].attproj, &sp8.lin[l].fc, &sp8.lin[l].fcproj};
            const BlockLinears* sl = stage_linears(&st8, l);
            const LinearSpec* w[4] = {&sl->qkv, &sl->attproj, &sl->fc, &sl->fcproj};
            for (int k = 0; k < 4; k++) same += d[k]->fp8 == &fp8 && d[k]->fp8_slot == w[k]->fp8_slot && d[k]->precision == w[k]->precision;
        }
        check(same == 4 * cfg.num_layers, "--fp8 mx: %d of the sampler's %d linears decode with the FP8 stage's recipe and precision", same,
              4 * cfg.num_layers);
        if (!BF16) {  // FP32 builds: the logits themselves (in BF16 they cannot tell the two apart: see above)
            stage_forward(&st8, 0, tokens, NULL, NULL, 0.0f);
            float* full8 = (float*)mallocCheck((size_t)N * Vp * sizeof(float));
            copy_to_host_float(full8, st8.slots[0].logits, (size_t)N * Vp);
            float* c8 = (float*)mallocCheck((size_t)N * V * sizeof(float));
            float* f8 = (float*)mallocCheck((size_t)N * V * sizeof(float));
            double off = 0.0;  // the largest difference of the FP8 decode from the floatX model's logits
            for (int t = 0; t < N; t++) {
                sampler_forward(&sp8, tokens[t], t, 1);
                memcpy(c8 + (size_t)t * V, sp8.logits_host, V * sizeof(float));
                memcpy(f8 + (size_t)t * V, full8 + (size_t)t * Vp, V * sizeof(float));
                for (int v = 0; v < V; v++) off = fmax(off, fabs((double)sp8.logits_host[v] - full[(size_t)t * Vp + v]));
            }
            float tol = 1e-5f * scale;
            check_close("--fp8 mx: KV-cache logits at positions 0..19 vs the FP8 stage's full forward", c8, f8, (size_t)N * V, tol,
                        1e-4f);
            check(off > 2.0 * tol, "--fp8 mx: the KV-cache logits differ from the %s model's by up to %.3g = %.1fx the tolerance "
                  "(the FP8 linears are used)", PRECISION_MODE, off, off / tol);
            free(c8); free(f8); free(full8);
        }
        sampler_free(&sp8);
        stage_free(&st8);
        fp8_free(&fp8);
    }

    // 6. a moe model (E = 4, K = 1, every layer) with a selection bias that sends every token to expert 0
    {
        GPTConfig mc = cfg;
        mc.num_experts = 4; mc.top_k = 1; mc.moe_every = 1;
        int E = mc.num_experts, L = mc.num_layers;
        DataParallel mdp;
        dp_init(&mdp, &comm, mc, NULL);
        float* mp = (float*)mallocCheck(mdp.lay.num_parameters * sizeof(float));  // (Psi)
        init_parameters(mc, seed + 1, mp);
        for (size_t i = 0; i < mdp.lay.num_parameters; i++) mp[i] *= 3.0f;  // (as above)
        dp_import_params(&mdp, mp, 0);
        free(mp);
        // (L, E): +2 on expert 0, which then wins every choice (probabilities are in [0, 1]): no near-tie that BF16's
        // rounding in one path and not the other could flip (a bias of 0.5 flipped one token in ~8 BF16 runs)
        float bias_host[2 * 4];
        for (int i = 0; i < L * E; i++) bias_host[i] = i % E == 0 ? 2.0f : 0.0f;
        float* bias = (float*)device_malloc((size_t)L * E * sizeof(float), MEM_WORKSPACE);  // (L, E)
        copy_to_device(bias, bias_host, (size_t)L * E * sizeof(float));
        Stage ms;
        stage_init(&ms, &mdp.lay, &mdp.hooks, tp_group(&comm, 0), stage_range_all(mc), 1, N, RECOMPUTE_NONE, 1);
        stage_set_moe(&ms, 0.0f, 0.0f, 0.0f);
        Sampler msp;
        sampler_init(&msp, &ms, 1);
        stage_forward(&ms, 0, tokens, NULL, NULL, 0.0f);  // without the bias
        float* plain = (float*)mallocCheck((size_t)N * V * sizeof(float));   // (N, V)
        float* biased = (float*)mallocCheck((size_t)N * V * sizeof(float));  // (N, V)
        float* dec = (float*)mallocCheck((size_t)N * V * sizeof(float));     // (N, V)
        float* row = (float*)mallocCheck((size_t)N * Vp * sizeof(float));    // (N, Vp)
        copy_to_host_float(row, ms.slots[0].logits, (size_t)N * Vp);
        for (int t = 0; t < N; t++) memcpy(plain + (size_t)t * V, row + (size_t)t * Vp, V * sizeof(float));
        for (int l = 0; l < L; l++) stage_set_moe_bias(&ms, l, bias + (size_t)l * E);
        msp.moe_bias = bias;
        stage_forward(&ms, 0, tokens, NULL, NULL, 0.0f);  // with it
        copy_to_host_float(row, ms.slots[0].logits, (size_t)N * Vp);
        float mscale = 0.0f;
        for (int t = 0; t < N; t++) {
            memcpy(biased + (size_t)t * V, row + (size_t)t * Vp, V * sizeof(float));
            for (int v = 0; v < V; v++) mscale = fmaxf(mscale, fabsf(row[(size_t)t * Vp + v]));
        }
        double off = 0.0;  // how far the bias moves the logits
        for (int t = 0; t < N; t++) {
            sampler_forward(&msp, tokens[t], t, 1);
            memcpy(dec + (size_t)t * V, msp.logits_host, V * sizeof(float));
        }
        for (size_t i = 0; i < (size_t)N * V; i++) off = fmax(off, fabs((double)biased[i] - plain[i]));
        float tol = (BF16 ? 3e-2f : 1e-5f) * mscale;
        check_close("moe model E=4 K=1 with a selection bias: KV-cache logits vs the full forward with the bias", dec, biased,
                    (size_t)N * V, tol, BF16 ? 0.0f : 1e-4f);
        check(off > 2.0 * tol, "moe model: the bias moves the full forward's logits by up to %.3g = %.1fx the tolerance (it re-routes)",
              off, off / tol);
        free(plain); free(biased); free(dec); free(row);
        sampler_free(&msp);
        stage_free(&ms);
        device_free(bias);
        dp_free(&mdp);
    }

    free(full); free(cached); free(a); free(b); free(full2);
    stage_free(&st);
    stage_free(&st2);
    sampler_free(&sp);
    dp_free(&dp);
    context_free();
    comm_free(&comm);
    return test_summary("test_sampler");
}
