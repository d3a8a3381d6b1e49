// world_check.h: a check made on every rank of an mpirun test program: each rank's verdict is summed
// over the world (one all-reduce), counted once, and printed by rank 0 with how many ranks failed it.
#pragma once
#include "../llm/core/common.h"
#include "../llm/core/device.h"
#include "../llm/core/context.h"
#include "../llm/comm/comm.h"

static int g_world_pass = 0, g_world_fail = 0;

// every rank calls it with its own ok; returns 1 if it held on every rank
static int world_check(Comm* c, int ok, const char* what) {
    float* d = (float*)device_malloc(sizeof(float), MEM_WORKSPACE);
    float bad = ok ? 0.0f : 1.0f;
    copy_to_device(d, &bad, sizeof(float));
    comm_all_reduce(c, GROUP_WORLD, d, d, 1, COMM_SUM, llm_ctx.stream);
    copy_to_host(&bad, d, sizeof(float));
    device_free(d);
    if (bad == 0.0f) g_world_pass++; else g_world_fail++;
    if (c->world_rank == 0) {
        printf("%s %s (%d of %d ranks differ)\n", bad == 0.0f ? "ok  " : "FAIL", what, (int)bad, c->world_size);
        fflush(stdout);
    }
    return bad == 0.0f;
}

// rank 0 prints "name: N passed, M failed"; the exit status for main
static int world_summary(const Comm* c, const char* name) {
    if (c->world_rank == 0) printf("%s: %d passed, %d failed\n", name, g_world_pass, g_world_fail);
    return g_world_fail ? 1 : 0;
}
