// pipeline_report.h: what a pipeline run reports (llm/parallel/pipeline.h): its split and schedule for the log,
// its figures for --report-json (the slots against the simulator's peak), and the trace of a step:
// every rank's events gathered into one Chrome / Perfetto trace (a row per rank) with the measured
// bubble, the ranks' idle time between the step's first op and last op over P times that span, beside
// the simulator's bubble for the same schedule with the measured mean op times.
#pragma once
#include "../core/common.h"
#include "../comm/comm.h"
#include "schedule.h"
#include "pipeline.h"

// the split and the schedule, for the log (rank 0)
static void pipeline_print(const Pipeline* pipe) {
    int S = pipe->pp_size * pipe->vpp;
    printf("pipeline: pp %d x vpp %d | schedule %s | m = %d micro-batches | layers per virtual stage:", pipe->pp_size, pipe->vpp,
           pipe->sched.name, pipe->m);
    for (int v = 0; v < S; v++) {
        int l0, l1;
        pipe_stage_layers(pipe->cfg.num_layers, S, v, &l0, &l1);
        printf(" [%d,%d)", l0, l1);
    }
    PipeSim sim = pipe_simulate(&pipe->sched, pipe_plan_costs(&pipe->sched));
    printf(" | simulated bubble %.3f (F = 1, B = %g%s)\n", sim.bubble, pipe_plan_costs(&pipe->sched).b, pipe->sched.split_w ? ", W = 1" : "");
    pipe_sim_free(&sim);
}

// this rank's pipeline figures for the report (llm/train/report.h), as "key":value pairs: the slots its
// chunks hold (the most micro-batches its list has alive), the simulator's peak of live micro-batches
// for this rank (llm/parallel/schedule.h), the activation bytes the slots took (the tagged allocator), the virtual
// stages of its chunks and the pp rank of the head (the placement); dualpipev: whether its pairs overlap
// (--overlap-pairs) and how many of the last step's ran through the pair runner (llm/parallel/pipeline_pair.h)
static void pipeline_report_json(const Pipeline* pipe, char* buf, size_t cap) {
    int slots = 0;
    for (int c = 0; c < pipe->vpp; c++) slots += pipe->chunks[c].num_slots;
    PipeSim sim = pipe_simulate(&pipe->sched, pipe_plan_costs(&pipe->sched));
    int n = snprintf(buf, cap, "\"schedule\":\"%s\",\"m\":%d,\"V\":%d,\"activation_slots\":%d,\"sim_peak_live\":%d,"
                     "\"pipeline_activation_bytes\":%zu,\"layers\":%d,\"head_pp_rank\":%d,\"overlap_pairs\":%d,\"pairs_overlapped\":%d,"
                     "\"stages\":[", pipe->sched.name, pipe->m, pipe->vpp, slots,
                     sim.peak_live[pipe->pp_rank], pipe->act_bytes, pipe->chunks[0].range.last_layer - pipe->chunks[0].range.first_layer,
                     pipe->head_rank, pipe->overlap_pairs, pipe->pairs_overlapped);
    for (int c = 0; c < pipe->vpp && n > 0 && (size_t)n < cap; c++) n += snprintf(buf + n, cap - n, "%s%d", c ? "," : "", pipe_stage(pipe, c));
    if (n > 0 && (size_t)n < cap) snprintf(buf + n, cap - n, "]");
    pipe_sim_free(&sim);
}

// ----------------------------------------------------------------------------
// the trace (Chrome's format: pid the rank, tid 0 its ops and messages, tids 1 and 2 an overlapped pair's all-to-alls
// of the forward and the backward, from the start to the wait's end, with args.exposed the microseconds the host spent
// in the start and the wait)

// the measured bubble of the events of every rank (each rank's, all_n[r] of them): the idle time of
// the ranks between the first op's start and the last op's end, over P times that span (F, B, W only)
static double pipe_measured_bubble(const PipeEvent* all, const int* all_n, int pp_size) {
    double t0 = 1e300, t1 = -1e300, busy = 0.0;
    for (int r = 0; r < pp_size; r++) {
        for (int i = 0; i < all_n[r]; i++) {
            const PipeEvent* e = &all[(size_t)r * PIPE_MAX_EVENTS + i];
            if (strlen(e->cat) != 1) continue;  // F, B, W
            if (e->ts < t0) t0 = e->ts;
            if (e->ts + e->dur > t1) t1 = e->ts + e->dur;
            busy += e->dur;
        }
    }
    if (t1 <= t0) return 0.0;
    return 1.0 - busy / (pp_size * (t1 - t0));
}

// Gathers every rank's events to world rank 0, which writes them as a Chrome / Perfetto trace at path
// (a row per rank; times from the earliest event). Every rank calls it. Returns the measured bubble of
// the pp group of rank 0 (every rank of it: dp, tp) and writes it into the trace's otherData.
// sim_bubble: the simulator's bubble for this schedule with the measured mean F, B, W times.
static double pipeline_write_trace(Pipeline* pipe, const char* path, int step, double* sim_bubble) {
    Comm* c = pipe->comm;
    int W = c->world_size;
    PipeEvent* all = c->world_rank == 0 ? (PipeEvent*)mallocCheck((size_t)W * PIPE_MAX_EVENTS * sizeof(PipeEvent)) : NULL;
    int* all_n = c->world_rank == 0 ? (int*)mallocCheck((size_t)W * sizeof(int)) : NULL;
    comm_gather_bytes(c, pipe->events, PIPE_MAX_EVENTS * sizeof(PipeEvent), all);
    comm_gather_bytes(c, &pipe->num_events, sizeof(int), all_n);
    double bubble = 0.0;
    if (c->world_rank == 0) {
        // the pp group of world rank 0 (llm/comm/mesh.h)
        PipeEvent* ppev = (PipeEvent*)mallocCheck((size_t)pipe->pp_size * PIPE_MAX_EVENTS * sizeof(PipeEvent));
        int* ppn = (int*)mallocCheck((size_t)pipe->pp_size * sizeof(int));
        int* members = (int*)mallocCheck((size_t)W * sizeof(int));
        mesh_group_members(&c->mesh, GROUP_PP, 0, members);
        for (int q = 0; q < pipe->pp_size; q++) {
            int w = members[q];
            memcpy(ppev + (size_t)q * PIPE_MAX_EVENTS, all + (size_t)w * PIPE_MAX_EVENTS, PIPE_MAX_EVENTS * sizeof(PipeEvent));
            ppn[q] = all_n[w];
        }
        bubble = pipe_measured_bubble(ppev, ppn, pipe->pp_size);
        double sum[3] = {0, 0, 0};
        int cnt[3] = {0, 0, 0};
        for (int q = 0; q < pipe->pp_size; q++) {
            for (int i = 0; i < ppn[q]; i++) {
                const PipeEvent* e = &ppev[(size_t)q * PIPE_MAX_EVENTS + i];
                for (int k = 0; k < 3; k++) {  // (an overlapped pair's later pieces add to their op's time, not the count)
                    if (e->cat[0] == PIPE_OP_NAMES[k] && e->cat[1] == 0) { sum[k] += e->dur; cnt[k] += e->piece == 0; }
                }
            }
        }
        PipeCosts mc = {cnt[0] ? sum[0] / cnt[0] : 0, cnt[1] ? sum[1] / cnt[1] : 0, cnt[2] ? sum[2] / cnt[2] : 0, 0.0};
        PipeSim sim = pipe_simulate(&pipe->sched, mc);
        *sim_bubble = sim.bubble;
        pipe_sim_free(&sim);
        free(ppev); free(ppn); free(members);
        double t0 = 1e300;
        for (int w = 0; w < W; w++) for (int i = 0; i < all_n[w]; i++) if (all[(size_t)w * PIPE_MAX_EVENTS + i].ts < t0) t0 = all[(size_t)w * PIPE_MAX_EVENTS + i].ts;
        FILE* f = fopen(path, "w");
        if (f == NULL) fatal("--trace: cannot write %s: %s", path, strerror(errno));
        fprintf(f, "{\"traceEvents\":[");
        for (int w = 0; w < W; w++) {
            char coords[64];
            mesh_coords_label(&c->mesh, w, coords, sizeof(coords));
            fprintf(f, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d (%s)\"}}",
                    w ? "," : "", w, w, coords);
            // an overlapped pair's all-to-alls: two rows of their own under the rank's ops, the forward's (tid 1) and
            // the backward's (tid 2), so that the two directions' exchanges in flight at once do not hide each other
            int a2a = 0;
            for (int i = 0; i < all_n[w]; i++) a2a += strcmp(all[(size_t)w * PIPE_MAX_EVENTS + i].cat, "a2a") == 0;
            for (int tid = 0; a2a > 0 && tid < 3; tid++) {
                const char* rows[3] = {"ops", "all-to-all F", "all-to-all B"};
                fprintf(f, ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", w, tid, rows[tid]);
            }
            for (int i = 0; i < all_n[w]; i++) {
                const PipeEvent* e = &all[(size_t)w * PIPE_MAX_EVENTS + i];
                int tid = strcmp(e->cat, "a2a") == 0 ? 1 + (e->name[0] == 'B') : 0;
                fprintf(f, ",{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"piece\":%d,\"exposed\":%.3f}}",
                        e->name, e->cat, w, tid, (e->ts - t0) * 1e3, e->dur * 1e3, e->piece, e->exposed * 1e3);
            }
        }
        fprintf(f, "],\"otherData\":{\"schedule\":\"%s\",\"P\":%d,\"m\":%d,\"V\":%d,\"step\":%d,\"measured_bubble\":%.6f,\"simulated_bubble\":%.6f}}\n",
                pipe->sched.name, pipe->pp_size, pipe->m, pipe->vpp, step, bubble, *sim_bubble);
        if (fclose(f) != 0) fatal("--trace: error writing %s: %s", path, strerror(errno));
    }
    free(all); free(all_n);
    return bubble;
}

// context parallelism: the attention compute time of this rank's stages since the last call (ms)
static double pipeline_cp_attention_ms(Pipeline* pipe) {
    double ms = 0.0;
    for (int c = 0; c < pipe->vpp; c++) ms += cp_take_ms(&pipe->chunks[c].cp);
    return ms;
}

// Context parallelism's balance, measured: the attention compute time per step of each rank of the cp group of
// world rank 0, mine_ms this rank's mean over the timed steps (every rank calls it; rank 0 prints)
static void pipeline_print_cp_balance(Pipeline* pipe, double mine_ms) {
    Comm* c = pipe->comm;
    const CPGroup* g = &pipe->chunks[0].cp;
    double* all = (double*)mallocCheck((size_t)c->world_size * sizeof(double));
    comm_all_gather_host(c, mine_ms, all);
    if (c->world_rank == 0) {
        double lo = INFINITY, hi = 0.0;
        printf("context parallelism (%s%s%s): attention compute per step by cp rank:", cp_impl_name(g->impl),
               g->impl == CP_RING ? " " : "", g->impl == CP_RING ? cp_balance_name(g->balance) : "");
        int* cp_ranks = (int*)mallocCheck((size_t)c->world_size * sizeof(int));
        mesh_group_members(&c->mesh, GROUP_CP, 0, cp_ranks);
        for (int q = 0; q < c->mesh.cp.size; q++) {
            double ms = all[cp_ranks[q]];
            printf(" %.2f", ms);
            if (ms < lo) lo = ms;
            if (ms > hi) hi = ms;
        }
        printf(" ms | max/min %.2f\n", lo > 0.0 ? hi / lo : NAN);
        free(cp_ranks);
    }
    free(all);
}
