// test_split_backward.cu: the split backward of zero-bubble pipeline schedules (B = stage_backward_input,
// W = stage_backward_weight, llm/gpt.h) under tensor parallelism, with and without sequence
// parallelism: on every tp rank, B then W give that rank's unsplit stage_backward's gradients and dx
// bit for bit, and the tp group's traffic of B + W is the unsplit backward's:
//
//   mpirun -np 2 build/test_split_backward_cpu --tp 2      (the emulated builds the same; test/test_split_backward.sh)
//
// The checks are test/split_backward_check.h's (each recompute policy, one and two stages, one and two
// micro-batches, the deferral, the hooks, the memory formula), on the tiny fixture model (L=2, NH=4,
// C=32: 2 heads and C/tp = 16 channels per rank at tp 2) at B=4, T=8 (T/tp = 4 tokens per rank under
// sequence parallelism), tokens drawn from a fixed seed (the same on every rank). No tolerance: see there.
// Each check runs on every rank; rank 0 prints one line per check with the number of ranks that failed
// it, then "test_split_backward: N passed, M failed, 0 skipped".
#include "../llm/common.h"
#include "../llm/context.h"
#include "../llm/comm.h"
#include "../llm/tensors.h"
#include "../llm/gpt.h"
#include "../llm/dp.h"
#include "../llm/checkpoint.h"
#include "../llm/rand.h"
#include "split_backward_check.h"

#ifndef FIXTURES
#define FIXTURES "test/fixtures"
#endif

static Comm g_comm;
static int g_pass = 0, g_fail = 0;

// every rank's verdict summed over the world; rank 0 prints
static int world_verdict(int ok, const char* what) {
    float* d = (float*)device_malloc(sizeof(float), MEM_WORKSPACE);
    float bad = ok ? 0.0f : 1.0f;
    copy_to_device(d, &bad, sizeof(float));
    comm_all_reduce(&g_comm, GROUP_WORLD, d, d, 1, COMM_SUM, llm_ctx.stream);
    copy_to_host(&bad, d, sizeof(float));
    device_free(d);
    if (bad == 0.0f) g_pass++; else g_fail++;
    if (g_comm.world_rank == 0) {
        printf("%s %s (%d of %d ranks differ)\n", bad == 0.0f ? "ok  " : "FAIL", what, (int)bad, g_comm.world_size);
        fflush(stdout);
    }
    return bad == 0.0f;
}

int main(int argc, char** argv) {
    int tp = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tp") && i + 1 < argc) tp = atoi(argv[++i]);
        else fatal("test_split_backward: unknown argument %s (expected --tp N)", argv[i]);
    }
    comm_init(&g_comm, &argc, &argv, 1, tp, 1);
    context_init();
    GPTConfig cfg;
    float* params = checkpoint_load(FIXTURES "/tiny_model.bin", &cfg);
    int B = 4, T = 8, BT = B * T;
    if (g_comm.world_rank == 0) {
        printf("test_split_backward: tp %d, %s, L=%d NH=%d C=%d Vp=%d, B=%d T=%d\n", g_comm.group_size[GROUP_TP],
               PRECISION_MODE, cfg.num_layers, cfg.num_heads, cfg.channels, cfg.padded_vocab_size, B, T);
    }
    Rng rng;
    rng_init(&rng, 4242);  // the same tokens on every rank (tp ranks run the same micro-batches)
    int* x = (int*)mallocCheck(2 * (size_t)BT * sizeof(int));
    int* y = (int*)mallocCheck(2 * (size_t)BT * sizeof(int));
    for (int i = 0; i < 2 * BT; i++) {
        x[i] = (int)(rng_f32(&rng) * cfg.vocab_size) % cfg.vocab_size;
        y[i] = (int)(rng_f32(&rng) * cfg.vocab_size) % cfg.vocab_size;
    }
    DataParallel dp;
    dp_init(&dp, &g_comm, cfg, 0);
    dp_import_params(&dp, params, 0);  // this tp rank's shards
    for (int sp = 0; sp <= (g_comm.group_size[GROUP_TP] > 1 ? 1 : 0); sp++) {
        TPGroup g = tp_group(&g_comm, sp);
        dp.sequence_parallel = sp;  // the LayerNorms' gradients summed over tp in dp_finish_grads, as the trainer does
        char tag[64];
        snprintf(tag, sizeof(tag), "tp %d sp %d split backward", g.size, sp);
        split_backward_checks(world_verdict, tag, &dp, g, x, y, B, T);
    }
    dp_free(&dp);
    free(params); free(x); free(y);
    if (g_comm.world_rank == 0) printf("test_split_backward: %d passed, %d failed, 0 skipped\n", g_pass, g_fail);
    context_free();
    comm_free(&g_comm);
    return g_fail ? 1 : 0;
}
