// bench_fp8_cpu.cu: the training step of the CPU build in BF16 and in each FP8 recipe (delayed, current,
// block, mx; llm/precision/fp8_linear.h), on one model, in one process, and each recipe's step time as a
// ratio to BF16's: what FP8's quantizers cost the CPU build (its GEMMs are the same FP32 sgemm either way,
// llm/precision/matmul_fp8.cuh). Built as the BF16 CPU build (build/bench_fp8_cpu_bf16, `make bench-fp8`).
//   ./build/bench_fp8_cpu_bf16 MODEL_DESCRIPTOR B T STEPS [RECIPES]     RECIPES: default bf16,delayed,current,block,mx
// The steps of the recipes are interleaved (step s of every recipe, then step s + 1): on a machine shared
// with other work a slow spell then lands on all of them alike, not on one recipe's whole run, and each
// recipe's median is compared. Beside the wall time, the process's CPU time of the step (user + system,
// all threads): with OMP_NUM_THREADS=1 that is the step's work alone, which other processes on the cores
// do not inflate (with more threads it also counts OpenMP's threads spinning at barriers). One set of parameters (a fresh GPT-2 init) and one optimizer serve every
// recipe, each with its own activations and FP8 state (the trainer's step: llm/parallel/dp_step.h and the
// stage, delayed scaling's fp8_step_begin / fp8_step_end around it); random tokens. The first step of
// each recipe is a warm-up, not timed.
#include "../llm/core/common.h"
#include "../llm/core/context.h"
#include "../llm/comm/comm.h"
#include "../llm/model/units.h"
#include "../llm/model/stage.h"
#include "../llm/parallel/dp.h"
#include "../llm/parallel/dp_step.h"
#include "../llm/ops/optimizer.h"
#include "../llm/core/usage.h"
#include "../llm/ops/blas_cpu.h"
#include "bench_common.h"  // the arguments, the model's setup, random tokens, the median

static const char* USAGE =
    "MODEL_DESCRIPTOR B T STEPS [RECIPES]\n"
    "Times the BF16 CPU build's training step in BF16 and each FP8 recipe, interleaved in one process, and\n"
    "prints each recipe's median step time (wall and CPU) as a ratio to BF16's.\n"
    "  MODEL_DESCRIPTOR  e.g. d2,C=128,NH=4,maxT=64,V=257\n"
    "  B T STEPS         batch size, sequence length, timed steps (after one warm-up step)\n"
    "  RECIPES           comma-separated bf16, delayed, current, block, mx (default all five)\n";
#include <vector>

static double cpu_ms(void) {  // this process's CPU time, all threads
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) fatal("bench_fp8: clock_gettime(CLOCK_PROCESS_CPUTIME_ID) failed");
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    blas_choose_kernels(argv);  // the CPU's best OpenBLAS kernels, as the trainer runs on (llm/ops/blas_cpu.h)
    if (argc < 5 || argc > 6) {
        fprintf(stderr, "usage: %s MODEL_DESCRIPTOR B T STEPS [RECIPES: bf16,delayed,current,block,mx]\n", argv[0]);
        return 1;
    }
    BenchShape shape = bench_shape_args(argv, "bench_fp8", "d2,C=128,NH=4,maxT=64,V=257");
    GPTConfig cfg = shape.cfg;
    int B = shape.B, T = shape.T, steps = shape.steps;
    std::vector<Fp8Recipe> recipes;
    const char* list = argc == 6 ? argv[5] : "bf16,delayed,current,block,mx";
    bench_for_each_word(list, [&](const char* p, size_t len) {
        int found = -1;
        if (len == 4 && !strncmp(p, "bf16", 4)) found = FP8_RECIPE_NONE;
        for (int r = FP8_RECIPE_DELAYED; r <= FP8_RECIPE_MX; r++)
            if (len == strlen(fp8_recipe_name((Fp8Recipe)r)) && !strncmp(p, fp8_recipe_name((Fp8Recipe)r), len)) found = r;
        if (found < 0) fatal("bench_fp8: RECIPES: expected bf16, delayed, current, block or mx, found '%.*s'", (int)len, p);
        recipes.push_back((Fp8Recipe)found);
    });
    if (recipes[0] != FP8_RECIPE_NONE) fatal("bench_fp8: RECIPES must start with bf16 (the ratios' base)");
    Comm comm;
    comm_init(&comm, &argc, &argv, 1, 1, 1);
    context_init();
    DataParallel dp;
    bench_model_init(&dp, &comm, cfg);
    OptimConfig oc = bench_optim_config(steps);
    int threads = bench_threads();
    printf("bench_fp8: L=%d NH=%d C=%d maxT=%d V=%d, %.1fM parameters, B=%d T=%d, CPU %s, %d OpenMP threads, %d steps "
           "(+1 warm-up) of each recipe, interleaved\n", cfg.num_layers, cfg.num_heads, cfg.channels, cfg.max_seq_len,
           cfg.vocab_size, dp.lay.num_parameters / 1e6, B, T, PRECISION_MODE, threads, steps);
    size_t nr = recipes.size();
    std::vector<Stage> st(nr);
    std::vector<Fp8State> fp8(nr);
    for (size_t i = 0; i < nr; i++) {
        stage_init(&st[i], &dp.lay, &dp.hooks, tp_group(dp.comm, 0), stage_range_all(cfg), B, T, RECOMPUTE_NONE, 1);
        Fp8Config fc = {recipes[i], 0, 16, FP8_AMAX_REDUCE_MAX, 0};  // the trainer's defaults: hybrid formats, history 16, max
        fp8_init(&fp8[i], fc, &comm, cfg.num_layers, stage_fp8_max_operand(&st[i]));
        stage_enable_fp8(&st[i], &fp8[i]);
    }
    Rng rng;
    rng_init(&rng, 42);
    std::vector<int> x(B * T), y(B * T);
    std::vector<std::vector<double>> ms(nr), cpu(nr);
    for (int s = 0; s <= steps; s++) {
        for (size_t i = 0; i < nr; i++) {
            bench_random_tokens(&rng, cfg.vocab_size, x, y);
            double t0 = wall_ms(), c0 = cpu_ms();
            dp_step_begin(&dp);
            fp8_step_begin(&fp8[i]);
            dp_micro_begin(&dp, 0, 1);
            stage_forward(&st[i], 0, x.data(), NULL, y.data(), 1.0f / (B * T));
            stage_backward(&st[i], 0, NULL);
            dp_finish_grads(&dp);
            float norm = dp_grad_norm(&dp);
            fp8_step_end(&fp8[i]);
            dp_update(&dp, &oc, 3e-4f, norm, (unsigned)s);
            (void)stage_take_loss(&st[i]);
            device_synchronize();
            if (s > 0) { ms[i].push_back(wall_ms() - t0); cpu[i].push_back(cpu_ms() - c0); }
        }
    }
    double base = bench_median(ms[0]), cbase = bench_median(cpu[0]);
    for (size_t i = 0; i < nr; i++) {
        const char* name = recipes[i] == FP8_RECIPE_NONE ? "bf16" : fp8_recipe_name(recipes[i]);
        printf("%-8s median step %8.1f ms wall (%.2f x bf16) | %8.1f ms CPU (%.2f x bf16)\n", name, bench_median(ms[i]),
               bench_median(ms[i]) / base, bench_median(cpu[i]), bench_median(cpu[i]) / cbase);
    }
    for (size_t i = 0; i < nr; i++) { fp8_free(&fp8[i]); stage_free(&st[i]); }
    bench_free(&dp, &comm);
    return 0;
}
