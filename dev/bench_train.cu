// bench_train.cu: times training steps on a stated config and prints the median step time broken
// down by phase (forward, backward, optimizer), tokens/s and, given the hardware's peak FLOP/s, the
// model FLOPs utilisation (MFU). Random tokens, a fresh GPT-2 init, one process (the data-parallel
// policy over one rank, as the trainer runs it). Builds as the CPU build (build/bench_cpu,
// `make bench-cpu`, `make bench-recompute`) and the CUDA build (build/bench_gpu, scripts/gpu_check.sh).
//   bench MODEL_DESCRIPTOR B T STEPS [PEAK_TFLOPS [RECOMPUTE,... [TP]]]
// RECOMPUTE: a comma-separated list of none, selective, full (default none); each is timed in turn,
// in this one process, and the step times are printed as ratios to the first, beside the expected
// cost from the FLOPs each recomputes.
// TP: run under `mpirun -np TP` with the model split over TP tensor-parallel ranks (llm/parallel/tensor_parallel.h);
// rank 0 prints, and each step's time spent inside the tp group's blocking collectives (the host time
// in comm.h: in the CPU build the collectives' whole duration, waiting for the other rank included)
// is printed beside the step (dev/bench_tp.sh compares tp 2 with tp 1 in one run).
// MFU counts the model FLOPs of a training step as in the PaLM paper (appendix B), by the trainer's one
// formula (llm/train/mfu.h: 6 N + 6 L T C per token, the causal half of attention's products),
// against PEAK_TFLOPS (e.g. the measured dense bf16 matmul peak of the GPU). Recomputed FLOPs are not
// model FLOPs: MFU falls by the recompute's cost.
#include "../llm/core/common.h"
#include "../llm/core/context.h"
#include "../llm/comm/comm.h"
#include "../llm/model/units.h"
#include "../llm/model/stage.h"
#include "../llm/parallel/dp.h"
#include "../llm/parallel/dp_step.h"
#include "../llm/ops/optimizer.h"
#include "../llm/train/report.h"
#include "../llm/train/mfu.h"
#include "../llm/core/usage.h"
#include "../llm/ops/blas_cpu.h"
#include "bench_common.h"  // the arguments, the model's setup, random tokens, the median
#include "bench_breakdown.h"  // the CPU build: where the step goes, op by op, and its GEMMs run bare

static const char* USAGE =
    "MODEL_DESCRIPTOR B T STEPS [PEAK_TFLOPS [RECOMPUTE,... [TP]]]\n"
    "Times training steps (random tokens, a fresh GPT-2 init) and prints the median step time by phase,\n"
    "tokens/s and, given PEAK_TFLOPS, the MFU.\n"
    "  MODEL_DESCRIPTOR  e.g. d12 or d4,C=256,NH=4,maxT=256,V=50257\n"
    "  B T STEPS         batch size, sequence length, timed steps\n"
    "  PEAK_TFLOPS       the hardware's peak, for the MFU (default 0: no MFU)\n"
    "  RECOMPUTE         comma-separated none, selective, full, each timed in turn (default none)\n"
    "  TP                tensor-parallel ranks, run under mpirun -np TP (default 1)\n";
#include <vector>

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    blas_choose_kernels(argv);  // the CPU's best OpenBLAS kernels, as the trainer runs on (llm/ops/blas_cpu.h)
    if (argc < 5 || argc > 8) {
        fprintf(stderr, "usage: %s MODEL_DESCRIPTOR B T STEPS [PEAK_TFLOPS [RECOMPUTE,... [TP]]]\n", argv[0]);
        return 1;
    }
    double peak_tflops = argc >= 6 ? atof(argv[5]) : 0.0;
    BenchShape shape = bench_shape_args(argv, "bench", "d4,C=256,NH=4,maxT=256,V=50257");
    GPTConfig cfg = shape.cfg;
    int B = shape.B, T = shape.T, steps = shape.steps;
    std::vector<Recompute> modes;
    const char* list = argc >= 7 ? argv[6] : "none";
    int tp = argc == 8 ? atoi(argv[7]) : 1;
    bench_for_each_word(list, [&](const char* p, size_t len) {
        if (len == 4 && !strncmp(p, "none", 4)) modes.push_back(RECOMPUTE_NONE);
        else if (len == 9 && !strncmp(p, "selective", 9)) modes.push_back(RECOMPUTE_SELECTIVE);
        else if (len == 4 && !strncmp(p, "full", 4)) modes.push_back(RECOMPUTE_FULL);
        else fatal("bench: RECOMPUTE: expected none, selective or full, found '%.*s'", (int)len, p);
    });
    Comm comm;
    comm_init(&comm, &argc, &argv, 1, tp, 1);
    context_init();
    int rank0 = comm.world_rank == 0;
    char tp_err[256];
    if (tp_layout_error(cfg.num_heads, cfg.padded_vocab_size, cfg.channels, tp, tp_err, sizeof(tp_err))) fatal("bench: %s", tp_err);
    DataParallel dp;
    bench_model_init(&dp, &comm, cfg);
    OptimConfig oc = bench_optim_config(steps);
    int threads = bench_threads();
    if (rank0) printf("bench: L=%d NH=%d C=%d maxT=%d V=%d (Vp %d), %.1fM parameters, B=%d T=%d, %s %s, %d OpenMP threads, "
                      "tp %d, %d steps (+1 warm-up)\n", cfg.num_layers, cfg.num_heads, cfg.channels, cfg.max_seq_len,
                      cfg.vocab_size, cfg.padded_vocab_size, dp.lay.num_parameters / 1e6, B, T,
                      LLM_BUILD_CPU ? "CPU" : "CUDA", PRECISION_MODE, threads, tp, steps);
    // model FLOPs per token (llm/train/mfu.h) and what each recompute policy adds
    double L = cfg.num_layers, C = cfg.channels, Tt = T;
    double n_blocks = L * (12 * C * C + 13 * C);                 // the blocks' parameters
    double flops_per_token = model_flops_per_token(&cfg, T);
    double extra[3] = {0.0, 2.0 * L * Tt * C,                      // selective: attention's forward products
                       2.0 * n_blocks + 2.0 * L * Tt * C};        // full: the blocks' whole forward
    Rng rng;
    rng_init(&rng, 42);
    std::vector<int> x(B * T), y(B * T);
    double base_ms = 0.0;
    for (size_t mi = 0; mi < modes.size(); mi++) {
        Recompute r = modes[mi];
        Stage st;
        stage_init(&st, &dp.lay, &dp.hooks, tp_group(dp.comm, 0), stage_range_all(cfg), B, T, r, 1);
        std::vector<double> tf, tb, to, tt, ttp;
        llm_ctx.prof.on = LLM_BUILD_CPU;  // the ops time themselves (the CPU build; a branch per op when off)
#if LLM_BUILD_CPU
        BenchBare bare;  // the step's GEMMs replayed bare after each step (dev/bench_breakdown.h)
#endif
        for (int s = 0; s <= steps; s++) {
#if LLM_BUILD_CPU
            if (s == 1) bench_bare_init(&bare, &llm_ctx.prof);  // the warm-up's shapes: one step's
#endif
            if (s <= 1) op_profile_reset(&llm_ctx.prof);  // the profile holds the warm-up alone, then the timed steps
            bench_random_tokens(&rng, cfg.vocab_size, x, y);
            double t0 = wall_ms(), tp0 = comm.blocking_ms[GROUP_TP];
            dp_step_begin(&dp);
            dp_micro_begin(&dp, 0, 1);
            stage_forward(&st, 0, x.data(), NULL, y.data(), 1.0f / (B * T));
            device_synchronize();
            double t1 = wall_ms();
            stage_backward(&st, 0, NULL);
            dp_finish_grads(&dp);
            device_synchronize();
            double t2 = wall_ms();
            float norm = dp_grad_norm(&dp);
            dp_update(&dp, &oc, 3e-4f, norm, (unsigned)s);
            float loss = (float)stage_take_loss(&st);
            device_synchronize();
            double t3 = wall_ms();
            if (s == 0) continue;  // warm-up
            tf.push_back(t1 - t0); tb.push_back(t2 - t1); to.push_back(t3 - t2); tt.push_back(t3 - t0);
            ttp.push_back(comm.blocking_ms[GROUP_TP] - tp0);
            if (rank0) printf("  [%s] step %d: %.1f ms (loss %.4f)\n", recompute_name(r), s, t3 - t0, loss);
#if LLM_BUILD_CPU
            bench_bare_round(&bare);
#endif
        }
        llm_ctx.prof.on = 0;
        double ms = bench_median(tt), tok_s = B * T / (ms / 1e3);
        if (mi == 0) base_ms = ms;
        if (rank0) {
            printf("recompute %-9s median step %.1f ms | forward %.1f ms | backward %.1f ms | optimizer %.1f ms | %.0f tok/s | %.2f TFLOP/s",
                   recompute_name(r), ms, bench_median(tf), bench_median(tb), bench_median(to), tok_s, tok_s * flops_per_token / 1e12);
            if (peak_tflops > 0) printf(" | MFU %.1f%% of %.0f TFLOP/s", 100.0 * tok_s * flops_per_token / 1e12 / peak_tflops, peak_tflops);
            if (tp > 1) printf(" | tp collectives %.1f ms (%.1f%%)", bench_median(ttp), 100.0 * bench_median(ttp) / ms);
            printf("\n");
            printf("recompute %-9s step time / %s's: %.3f | expected from the FLOPs: %.3f | activations per layer: %zu B measured, %.0f B predicted\n",
                   recompute_name(r), recompute_name(modes[0]), ms / base_ms,
                   (flops_per_token + extra[r]) / (flops_per_token + extra[modes[0]]), st.layer_act_bytes,
                   activation_formula_bytes(cfg, B, T, r, tp, 0, 0));
#if LLM_BUILD_CPU
            double sum = 0.0;
            for (double t : tt) sum += t;
            bench_print_breakdown(&llm_ctx.prof, steps, sum / steps, flops_per_token * B * T, tt, &bare);
#endif
        }
        stage_free(&st);
    }
    bench_free(&dp, &comm);
    return 0;
}
