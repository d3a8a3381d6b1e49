// dev/bench_breakdown.h: where a CPU training step's time goes (dev/bench_train.cu prints it). The ops time
// themselves (llm/core/op_profile.h: GEMMs, bias and GELU, attention, LayerNorm, the classifier, AdamW, ...);
// what the step spent outside every op is the step's time less their sum. Then every GEMM shape the step ran
// is run again bare, on its own warm buffers, the best of several runs, on the same library, kernels and
// threads: the sgemm peak on the step's own shapes. The last lines put the whole step's model FLOPs per
// second beside that peak, the one figure a faster step must raise: against the best bare times, and step by
// step against the replays made right after each step (BenchBare: the host's speed drifts).
#pragma once
#include "../llm/core/common.h"
#include "../llm/core/context.h"
#include "../llm/core/rand.h"
#include "../llm/ops/matmul.cuh"
#include "bench_common.h"  // bench_median
#include <algorithm>
#include <vector>

#if LLM_BUILD_CPU

// the FLOPs of one call of G (2 M N K per product)
static double bench_gemm_flops(const GemmShape* g) { return 2.0 * g->M * g->N * g->K * g->batch; }

// one GEMM shape's operands (random values, packed row-major), made once, and one bare call of it
typedef struct {
    GemmShape g;
    std::vector<float> a, b, c;
    std::vector<floatX> ah, bh;  // the BF16 shapes' operands (sbgemm)
} BenchGemm;

static void bench_gemm_init(BenchGemm* x, const GemmShape* g) {
    x->g = *g;
    size_t batch = (size_t)g->batch;
    x->a.resize((size_t)g->M * g->K * batch);
    x->b.resize((size_t)g->K * g->N * batch);
    x->c.assign((size_t)g->M * g->N * batch, 0.0f);
    Rng rng;
    rng_init(&rng, 7);
    for (float& v : x->a) v = rng_f32(&rng) - 0.5f;
    for (float& v : x->b) v = rng_f32(&rng) - 0.5f;
    if (g->bf16) {
        x->ah.assign(x->a.begin(), x->a.end());
        x->bh.assign(x->b.begin(), x->b.end());
    }
}

// the time of one call (ms), the profile off: the replay is not part of the step
static double bench_gemm_once(BenchGemm* x) {
    const GemmShape* g = &x->g;
    size_t a_n = (size_t)g->M * g->K, b_n = (size_t)g->K * g->N, c_n = (size_t)g->M * g->N;
    int lda = g->transA ? g->M : g->K, ldb = g->transB ? g->K : g->N, ldc = g->N;
    int on = llm_ctx.prof.on;
    llm_ctx.prof.on = 0;
    double t0 = wall_ms();
#if MATMUL_SBGEMM
    if (g->bf16)
        matmul_sbgemm(g->transA ? CblasTrans : CblasNoTrans, g->transB ? CblasTrans : CblasNoTrans, g->M, g->N, g->K,
                      x->ah.data(), lda, x->bh.data(), ldb, g->beta, x->c.data(), ldc);
    else
#endif
    {
        if (g->bf16) fatal("bench: a BF16 GEMM shape in a build without sbgemm");
        matmul_batched_cpu(x->c.data(), x->a.data(), x->b.data(), NULL, NULL, g->M, g->N, g->K, g->transA, g->transB, lda,
                           ldb, ldc, g->batch, a_n, b_n, c_n, 1.0f, g->beta, MATMUL_EPILOGUE_NONE);
    }
    double ms = wall_ms() - t0;
    llm_ctx.prof.on = on;
    return ms;
}

// the best time of one call of G run bare: one warm-up, then the best of 5 timings, each of enough calls to
// last a few milliseconds
static double bench_gemm_bare_ms(BenchGemm* x) {
    bench_gemm_once(x);
    int reps = (int)(2e7 / bench_gemm_flops(&x->g)) + 1;
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double ms = 0.0;
        for (int i = 0; i < reps; i++) ms += bench_gemm_once(x);
        if (ms / reps < best) best = ms / reps;
    }
    return best;
}

// The step's GEMMs replayed bare beside the steps. The machine's speed drifts over seconds (a shared host: the
// same GEMM took 29 to 52 ms minutes apart, this project's 2-core Xeon, 2026-11-29), so a peak measured once
// after the steps may come from a faster or a slower moment than theirs. After each timed step one round: every
// shape of one step called once to warm its operands and once timed; the round's time is one step's GEMMs run
// bare (each shape's time times its calls per step). Each step is put beside the round right after it, and the
// median over the steps of that ratio is printed.
typedef struct {
    std::vector<BenchGemm> gemms;  // one step's shapes (g.calls: its calls per step)
    std::vector<double> round_ms;  // (rounds)
} BenchBare;

// the shapes of one step (PROF holds exactly one: the warm-up's)
static void bench_bare_init(BenchBare* bb, const OpProfile* prof) {
    bb->gemms.resize(prof->n_shapes);
    for (int i = 0; i < prof->n_shapes; i++) bench_gemm_init(&bb->gemms[i], &prof->shapes[i]);
}

static void bench_bare_round(BenchBare* bb) {
    double ms = 0.0;
    for (BenchGemm& x : bb->gemms) {
        bench_gemm_once(&x);
        ms += x.g.calls * bench_gemm_once(&x);
    }
    bb->round_ms.push_back(ms);
}

// PROF: the ops' times summed over STEPS steps whose mean time was STEP_MS, of MODEL_FLOPS model FLOPs each;
// STEP_TIMES: each step's time, BB: the round of replays after each (its operands serve the best-of-5 runs too)
static void bench_print_breakdown(const OpProfile* prof, int steps, double step_ms, double model_flops,
                                  const std::vector<double>& step_times, BenchBare* bb) {
    printf("where the step goes (mean of %d steps, %.1f ms; the ops time themselves, llm/core/op_profile.h):\n", steps,
           step_ms);
    double in_ops = op_profile_total_ms(prof) / steps;
    for (int k = 0; k < OP_NUM_KINDS; k++) {
        if (prof->calls[k] == 0) continue;
        printf("  %-15s %8.2f ms %5.1f%%  (%ld calls per step)\n", op_kind_name(k), prof->ms[k] / steps,
               100.0 * prof->ms[k] / steps / step_ms, prof->calls[k] / steps);
    }
    printf("  %-15s %8.2f ms %5.1f%%  (zeroing, copies, the loop)\n", "outside the ops", step_ms - in_ops,
           100.0 * (step_ms - in_ops) / step_ms);
    // the GEMMs, shape by shape, against the same shapes run bare
    printf("the step's GEMM shapes (C (M,N) = op(A) (M,K) op(B) (K,N) + beta C) against the same shapes run bare:\n");
    printf("  %-5s %6s %6s %6s %5s %6s %9s %10s %10s %6s\n", "op", "M", "N", "K", "beta", "calls", "ms/step", "GFLOP/s",
           "bare", "ratio");
    double flops = 0.0, ms_step = 0.0, ms_bare = 0.0;
    for (int i = 0; i < prof->n_shapes; i++) {
        const GemmShape* g = &prof->shapes[i];
        BenchGemm own, *x = &own;  // the replays' operands (own ones for a shape the warm-up step did not run)
        size_t k = 0;
        while (k < bb->gemms.size() && !gemm_shape_same(&bb->gemms[k].g, g)) k++;
        if (k < bb->gemms.size()) x = &bb->gemms[k];
        else bench_gemm_init(&own, g);
        double f = bench_gemm_flops(g), calls = (double)g->calls / steps, ms = g->ms / steps, bare = bench_gemm_bare_ms(x);
        flops += f * calls, ms_step += ms, ms_bare += bare * calls;
        printf("  %s%s%s %6d %6d %6d %5.0f %6.0f %9.2f %10.1f %10.1f %5.0f%%\n", g->bf16 ? "bf" : "  ", g->transA ? "T" : "N",
               g->transB ? "T" : "N", g->M, g->N, g->K, g->beta, calls, ms, f * calls / ms / 1e6, f / bare / 1e6,
               100.0 * bare * calls / ms);
    }
    if (prof->n_shapes == 0 || ms_bare <= 0.0) return;
    double peak = flops / ms_bare / 1e6;  // GFLOP/s: the bare shapes' FLOPs over their best times
    printf("GEMMs: %.2f GFLOP per step in %.1f ms = %.1f GFLOP/s, %.0f%% of the same shapes run bare (%.1f ms = %.1f GFLOP/s)\n",
           flops / 1e9, ms_step, flops / ms_step / 1e6, 100.0 * ms_bare / ms_step, ms_bare, peak);
    printf("step: %.2f GFLOP of model FLOPs in %.1f ms = %.1f GFLOP/s = %.1f%% of the sgemm peak on the step's own GEMM shapes "
           "(%.1f GFLOP/s, their best bare times)\n", model_flops / 1e9, step_ms, model_flops / step_ms / 1e6,
           100.0 * model_flops / step_ms / 1e6 / peak, peak);
    // step i against the round right after it: (model FLOPs / step time) / (the GEMMs' FLOPs / the round's time)
    size_t n = bb->round_ms.size() < step_times.size() ? bb->round_ms.size() : step_times.size();
    if (n == 0) return;
    std::vector<double> r(n);
    for (size_t i = 0; i < n; i++) r[i] = 100.0 * (model_flops / step_times[i]) / (flops / bb->round_ms[i]);
    double lo = *std::min_element(r.begin(), r.end()), hi = *std::max_element(r.begin(), r.end());
    printf("step beside its replays: %.1f%% of the sgemm peak on the step's own GEMM shapes, the median over %zu steps of each "
           "step against the same GEMMs run bare right after it (%.1f%% to %.1f%%; median step %.1f ms, median round %.1f ms "
           "= %.1f GFLOP/s)\n", bench_median(r), n, lo, hi, bench_median(step_times), bench_median(bb->round_ms),
           flops / bench_median(bb->round_ms) / 1e6);
}

#endif  // LLM_BUILD_CPU
