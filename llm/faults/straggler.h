// straggler.h: the straggler detector (--straggler-every N, --straggler-factor F). In synchronous
// training the slowest rank sets everyone's pace: a GPU with a throttled clock or a noisy neighbour
// makes the whole job slow without any error (Llama 3 report, sec. 3.3.4; Megatron-LM's straggler
// detector, which gathers per-rank performance scores every N steps and names the outliers).
//
// Each rank measures its compute time per step: the step's wall time minus the time it was blocked
// in communication (the waits of non-blocking collectives, comm_take_wait_ms, plus the host time
// inside blocking collectives and P2P, Comm.blocking_ms). A fast rank waiting for a slow one spends
// the difference blocked, so its compute time stays its own. (Over NCCL the host time of a blocking
// collective is only its enqueue; the GPU's wait for it lands in the step's synchronize and so in the
// compute time: there the detector sees the slow rank's delay on every rank it holds back.) Every N steps the ranks all-gather the
// mean of their last N steps, and each rank whose compute time exceeds the median of the other ranks'
// by more than the factor is named by rank 0 on the console and in log.jsonl, with its ratio (the
// median of the others: with two ranks the median of both would be their mean, and a straggler could
// never be more than 2x it):
//
//   straggler: step 10: rank 1 computes 212.4 ms per step, 2.31 x the median 92.0 ms of the other ranks (--straggler-factor 1.5)
//   {"step": 10, "straggler_rank": 1, "straggler_ratio": 2.31, "compute_ms": 212.4, "median_ms": 92.0}
//
// The median is taken over the ranks of the same pipeline stage (the dp x cp x tp ranks that run the same
// layers, those with the same pp coordinate of the mesh: llm/comm/mesh.h): stages do different work (the last one has the LM head), so comparing across them would
// name a healthy last stage. With one rank per stage there is nothing to compare it with.
#pragma once
#include "../core/common.h"
#include "../comm/comm.h"
#include "../train/logger.h"

typedef struct {
    int every;           // steps between checks, 0 = off
    float factor;        // ratio to the median above which a rank is named
    double compute_ms;   // summed over the steps since the last check
    int steps;           // how many
    double blocked_ms;   // sum over the groups of Comm.blocking_ms at the start of the step
    int named;           // stragglers named so far (all checks)
} Straggler;

static void straggler_init(Straggler* s, int every, float factor) {
    memset(s, 0, sizeof(*s));
    s->every = every;
    s->factor = factor;
}

static double straggler_blocked(const Comm* c) {
    double b = 0.0;
    for (int g = 0; g < COMM_NUM_GROUPS; g++) b += c->blocking_ms[g];
    return b;
}

// at the start of a step's timing
static void straggler_step_begin(Straggler* s, const Comm* c) { s->blocked_ms = straggler_blocked(c); }

// after the step: ms its wall time, wait_ms what comm_take_wait_ms returned for it. Every N steps
// (every rank calls it at the same steps) the exchange and the verdict; returns the stragglers named.
static int straggler_step_end(Straggler* s, Comm* c, Logger* lg, int step, double ms, double wait_ms) {
    if (s->every <= 0) return 0;
    double compute = ms - wait_ms - (straggler_blocked(c) - s->blocked_ms);
    s->compute_ms += compute > 0.0 ? compute : 0.0;
    s->steps++;
    if (step % s->every != 0) return 0;
    int W = c->world_size, found = 0;
    double* all = (double*)mallocCheck((size_t)W * sizeof(double));
    comm_all_gather_host(c, s->compute_ms / s->steps, all);
    s->compute_ms = 0.0;
    s->steps = 0;
    // per pipeline stage (the ranks with the same pp_rank), each rank against the median of the others
    double* v = (double*)mallocCheck((size_t)W * sizeof(double));
    for (int r = 0; r < W; r++) {
        int p = mesh_coord(&c->mesh, r, AXIS_PP), n = 0;
        for (int q = 0; q < W; q++) if (q != r && mesh_coord(&c->mesh, q, AXIS_PP) == p) v[n++] = all[q];
        if (n < 1) continue;
        for (int i = 1; i < n; i++) {  // insertion sort: a handful of values
            double x = v[i];
            int j = i - 1;
            while (j >= 0 && v[j] > x) { v[j + 1] = v[j]; j--; }
            v[j + 1] = x;
        }
        double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
        if (median <= 0.0) continue;
        double ratio = all[r] / median;
        if (ratio <= s->factor) continue;
        found++;
        if (c->world_rank != 0) continue;
        printf("straggler: step %d: rank %d computes %.1f ms per step, %.2f x the median %.1f ms of the other ranks%s (--straggler-factor %g)\n",
               step, r, all[r], ratio, median, c->mesh.pp.size > 1 ? " of its pipeline stage" : "", (double)s->factor);
        fflush(stdout);
        if (lg->f != NULL) {
            char line[256];
            snprintf(line, sizeof(line), "{\"step\": %d, \"straggler_rank\": %d", step, r);
            logger_append_float(line, sizeof(line), "straggler_ratio", (float)ratio);
            logger_append_float(line, sizeof(line), "compute_ms", (float)all[r]);
            logger_append_float(line, sizeof(line), "median_ms", (float)median);
            size_t used = strlen(line);
            snprintf(line + used, sizeof(line) - used, "}");
            logger_write_line(lg, line);
        }
    }
    s->named += found;
    free(v);
    free(all);
    return found;
}
