// dev/bench_breakdown.h: where a CPU training step's time goes (dev/bench_train.cu prints it). The ops time
// themselves (llm/core/op_profile.h: GEMMs, bias and GELU, attention, LayerNorm, the classifier, AdamW, ...);
// what the step spent outside every op is the step's time less their sum. Then every GEMM shape the step ran
// is run again bare, on its own warm buffers, the best of several runs, on the same library, kernels and
// threads: the sgemm peak on the step's own shapes. The last line puts the whole step's model FLOPs per
// second beside that peak, the one figure a faster step must raise.
#pragma once
#include "../llm/core/common.h"
#include "../llm/core/context.h"
#include "../llm/core/rand.h"
#include "../llm/ops/matmul.cuh"
#include <vector>

#if LLM_BUILD_CPU

// the FLOPs of one call of G (2 M N K per product)
static double bench_gemm_flops(const GemmShape* g) { return 2.0 * g->M * g->N * g->K * g->batch; }

// the best time of one call of G run bare: packed row-major operands of random values, one warm-up, then the
// best of 5 timings, each of enough calls to last a few milliseconds
static double bench_gemm_bare_ms(const GemmShape* g) {
    size_t a_n = (size_t)g->M * g->K, b_n = (size_t)g->K * g->N, c_n = (size_t)g->M * g->N, batch = (size_t)g->batch;
    int lda = g->transA ? g->M : g->K, ldb = g->transB ? g->K : g->N, ldc = g->N;
    std::vector<float> a(a_n * batch), b(b_n * batch), c(c_n * batch, 0.0f);
    Rng rng;
    rng_init(&rng, 7);
    for (float& x : a) x = rng_f32(&rng) - 0.5f;
    for (float& x : b) x = rng_f32(&rng) - 0.5f;
#if MATMUL_SBGEMM
    std::vector<floatX> ah(a.size()), bh(b.size());
    for (size_t i = 0; i < a.size(); i++) ah[i] = (floatX)a[i];
    for (size_t i = 0; i < b.size(); i++) bh[i] = (floatX)b[i];
#endif
    auto once = [&]() {
#if MATMUL_SBGEMM
        if (g->bf16) {
            matmul_sbgemm(g->transA ? CblasTrans : CblasNoTrans, g->transB ? CblasTrans : CblasNoTrans, g->M, g->N, g->K,
                          ah.data(), lda, bh.data(), ldb, g->beta, c.data(), ldc);
            return;
        }
#endif
        if (g->bf16) fatal("bench: a BF16 GEMM shape in a build without sbgemm");
        matmul_batched_cpu(c.data(), a.data(), b.data(), NULL, NULL, g->M, g->N, g->K, g->transA, g->transB, lda, ldb, ldc,
                           g->batch, a_n, b_n, c_n, 1.0f, g->beta, MATMUL_EPILOGUE_NONE);
    };
    int on = llm_ctx.prof.on;
    llm_ctx.prof.on = 0;  // the replay is not part of the step
    once();
    int reps = (int)(2e7 / bench_gemm_flops(g)) + 1;
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = wall_ms();
        for (int i = 0; i < reps; i++) once();
        double ms = (wall_ms() - t0) / reps;
        if (ms < best) best = ms;
    }
    llm_ctx.prof.on = on;
    return best;
}

// PROF: the ops' times summed over STEPS steps whose mean time was STEP_MS, of MODEL_FLOPS model FLOPs each
static void bench_print_breakdown(const OpProfile* prof, int steps, double step_ms, double model_flops) {
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
        double f = bench_gemm_flops(g), calls = (double)g->calls / steps, ms = g->ms / steps, bare = bench_gemm_bare_ms(g);
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
           "(%.1f GFLOP/s)\n", model_flops / 1e9, step_ms, model_flops / step_ms / 1e6,
           100.0 * model_flops / step_ms / 1e6 / peak, peak);
}

#endif  // LLM_BUILD_CPU
