// test_split_backward.cu: the split backward of zero-bubble pipeline schedules (B = stage_backward_input,
// W = stage_backward_weight, llm/model/stage.h) under tensor parallelism, with and without sequence
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
#include "../llm/core/common.h"
#include "../llm/core/context.h"
#include "../llm/comm/comm.h"
#include "../llm/model/units.h"
#include "../llm/model/stage.h"
#include "../llm/parallel/dp.h"
#include "../llm/parallel/dp_step.h"
#include "../llm/parallel/dp_export.h"
#include "../llm/ckpt/checkpoint.h"
#include "../llm/core/rand.h"
#include "split_backward_check.h"
#include "world_check.h"
#include "../llm/core/usage.h"

#ifndef FIXTURES
#define FIXTURES "test/fixtures"
#endif

static Comm g_comm;
// a check of every rank (test/world_check.h), in the form split_backward_checks takes
static int world_verdict(int ok, const char* what) { return world_check(&g_comm, ok, what); }

static const char* USAGE =
    "[--tp N]   (under mpirun -np N; test/test_split_backward.sh)\n"
    "Tests the split backward (B then W) against the unsplit one under tensor parallelism, bit for bit, and\n"
    "the tp group's traffic.\n"
    "  --tp N  tensor-parallel ranks (default 1)\n";

int main(int argc, char** argv) {
    usage_if_help(argc, argv, USAGE);
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
    dp_init(&dp, &g_comm, cfg, NULL);
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
    int rc = world_summary(&g_comm, "test_split_backward");
    context_free();
    comm_free(&g_comm);
    return rc;
}
