// schedule.h: pipeline schedules as data, and a simulator that runs them with op costs and no model.
// A schedule gives each pipeline rank the list of what it runs, in order: F (a micro-batch's
// forward through one of the rank's chunks of layers), B (its backward; in the split schedules only
// the input gradient) and W (the weight gradient, split out of B by zero-bubble schedules). The
// schedules are pure functions of (P ranks, m micro-batches, V chunks per rank):
//   gpipe        Huang et al. 2019, "GPipe": all m forwards, then all m backwards
//   1f1b         Narayanan et al. 2019, "PipeDream" (1F1B flush, as in Narayanan et al. 2021 sec.
//                2.2.1): rank r runs min(P - r - 1, m) forwards, then alternates one forward and
//                one backward, then the remaining backwards; at most P - r micro-batches alive
//   interleaved  Narayanan et al. 2021, sec. 2.2.2: each rank holds V chunks, chunk c of rank r is
//                virtual stage c P + r; forwards go through the chunks in groups of P micro-batches;
//                m must be a multiple of P (the rule this construction needs, as Megatron's)
//   zb-h1        Qi et al. 2023, "Zero Bubble Pipeline Parallelism", ZB-H1: 1F1B with B split into B
//                (input gradient, on the critical path) and W (weight gradient), the W's put off
//                into the time where 1F1B waits, the micro-batches in flight bounded as in 1F1B
//   zbv, dualpipev  the V-shaped schedules of llm/parallel/schedule_v.h (two chunks per rank in a V)
// Virtual stage s of S = P V runs where the schedule's placement puts it (llm/parallel/schedule_list.h:
// rank s % P as chunk s / P, or the V of zbv and dualpipev). F(mb, s) needs F(mb, s - 1) from the rank
// before (a receive), B(mb, s) needs B(mb, s + 1) (or, on the last stage, F(mb, S - 1)), W(mb, s) needs
// B(mb, s). The simulator plays the lists with blocking receives: a rank runs its next op when the
// op's inputs have arrived; if no rank can go on before all are done, the schedule deadlocks.
#pragma once
#include "../core/common.h"
#include "schedule_list.h"
#include "schedule_v.h"

// why (P, m, V) cannot be scheduled by `name`, or NULL
static const char* schedule_error(const char* name, int P, int m, int V, char* buf, size_t n) {
    if (P < 1 || m < 1 || V < 1) { snprintf(buf, n, "pipeline: expected P, m, V >= 1, found P=%d m=%d V=%d", P, m, V); return buf; }
    if (strcmp(name, "gpipe") && strcmp(name, "1f1b") && strcmp(name, "interleaved") && strcmp(name, "zb-h1") && !schedule_is_v(name)) {
        snprintf(buf, n, "--schedule: expected gpipe, 1f1b, interleaved, zb-h1, zbv or dualpipev, found '%s'", name);
        return buf;
    }
    if (schedule_is_v(name)) {
        if (V != 2) { snprintf(buf, n, "--schedule %s: two chunks per rank (the V), expected --vpp 2 (its default), found --vpp %d", name, V); return buf; }
        if (m < 2 * P) {
            snprintf(buf, n, "--schedule %s: expected at least 2 x the pipeline ranks (2P = %d) micro-batches per step, found m = %d", name,
                     2 * P, m);
            return buf;
        }
        return NULL;
    }
    if (strcmp(name, "interleaved") != 0 && V != 1) {
        snprintf(buf, n, "--schedule %s: one chunk per rank; --vpp %d needs --schedule interleaved", name, V);
        return buf;
    }
    if (!strcmp(name, "interleaved") && m % P != 0) {
        snprintf(buf, n, "--schedule interleaved: expected the micro-batches per step (m = %d) to be a multiple of "
                 "the pipeline ranks (P = %d)", m, P);
        return buf;
    }
    return NULL;
}

// ----------------------------------------------------------------------------
// the schedules

static void schedule_gpipe(Schedule* s, int P, int m) {
    schedule_alloc(s, "gpipe", P, m, 1, 0);
    for (int r = 0; r < P; r++) {
        for (int i = 0; i < m; i++) schedule_push(s, r, PIPE_F, i, 0);
        for (int i = 0; i < m; i++) schedule_push(s, r, PIPE_B, i, 0);
    }
}

static void schedule_1f1b(Schedule* s, int P, int m) {
    schedule_alloc(s, "1f1b", P, m, 1, 0);
    for (int r = 0; r < P; r++) {
        int warm = P - r - 1 < m ? P - r - 1 : m, f = 0, b = 0;
        for (; f < warm; f++) schedule_push(s, r, PIPE_F, f, 0);
        for (; f < m; f++, b++) { schedule_push(s, r, PIPE_F, f, 0); schedule_push(s, r, PIPE_B, b, 0); }
        for (; b < m; b++) schedule_push(s, r, PIPE_B, b, 0);
    }
}

// the k-th forward (or backward) of a rank in the interleaved order: groups of P micro-batches go
// through chunk 0, 1, .. V-1 (backwards: V-1 .. 0) before the next group
static inline void interleaved_op(int k, int P, int V, int backward, int* mb, int* chunk) {
    int c = (k / P) % V;
    *chunk = backward ? V - 1 - c : c;
    *mb = (k / (P * V)) * P + k % P;
}

static void schedule_interleaved(Schedule* s, int P, int m, int V) {
    schedule_alloc(s, "interleaved", P, m, V, 0);
    int total = m * V;
    for (int r = 0; r < P; r++) {
        // warm-up: enough forwards that the first backward's gradient can arrive (Narayanan et al. 2021)
        int warm = (P - r - 1) * 2 + (V - 1) * P;
        if (V == 1) warm = P - r - 1;
        if (warm > total) warm = total;
        int f = 0, b = 0, mb, c;
        for (; f < warm; f++) { interleaved_op(f, P, V, 0, &mb, &c); schedule_push(s, r, PIPE_F, mb, c); }
        for (; f < total; f++, b++) {
            interleaved_op(f, P, V, 0, &mb, &c); schedule_push(s, r, PIPE_F, mb, c);
            interleaved_op(b, P, V, 1, &mb, &c); schedule_push(s, r, PIPE_B, mb, c);
        }
        for (; b < total; b++) { interleaved_op(b, P, V, 1, &mb, &c); schedule_push(s, r, PIPE_B, mb, c); }
    }
}

// ZB-H1 as a list: each rank, whenever it is free, runs a W if P - 1 of its B's already wait for
// theirs, else a B whose gradient has arrived, else the next F if its input has arrived and fewer
// than P - r micro-batches are between F and B (1F1B's bound), else a pending W, else it waits.
// Played once with unit costs (F = B = W = 1, no latency), this fixes each rank's order: F's and B's
// keep their 1F1B places on the critical path and the W's land in what would be 1F1B's bubbles, a
// third of 1F1B's bubble time for m >= P. The bound on deferred W's (at most P - 1, so at most 2P - 1
// micro-batches between F and W, measured by the simulator's peak) keeps them from piling up at the
// end: with other costs (on this project's CPU, W is about a third of B) the same list still beats
// 1F1B, where an unbounded deferral would not. A micro-batch between B and W holds only the inputs of
// the weight gradients, less than a whole micro-batch's activations. The list is a pure function of
// (P, m).
static void schedule_zb_h1(Schedule* s, int P, int m) {
    schedule_alloc(s, "zb-h1", P, m, 1, 1);
    int* f = (int*)calloc((size_t)P, sizeof(int));
    int* b = (int*)calloc((size_t)P, sizeof(int));
    int* w = (int*)calloc((size_t)P, sizeof(int));
    int* fdone = (int*)mallocCheck((size_t)P * m * sizeof(int));  // time F(mb) ended on rank r; -1: not yet
    int* bdone = (int*)mallocCheck((size_t)P * m * sizeof(int));
    for (int i = 0; i < P * m; i++) fdone[i] = bdone[i] = -1;
    for (int t = 0, left = 3 * P * m; left > 0; t++) {
        for (int r = 0; r < P; r++) {  // each rank picks what to run in [t, t + 1)
            int* F = fdone + r * m; int* Bd = bdone + r * m;
            int bin = b[r] < m && F[b[r]] >= 0 && F[b[r]] <= t &&
                      (r == P - 1 || (bdone[(r + 1) * m + b[r]] >= 0 && bdone[(r + 1) * m + b[r]] <= t));
            int fin = f[r] < m && f[r] - b[r] < P - r &&
                      (r == 0 || (fdone[(r - 1) * m + f[r]] >= 0 && fdone[(r - 1) * m + f[r]] <= t));
            if (b[r] - w[r] > P - 1) { schedule_push(s, r, PIPE_W, w[r]++, 0); left--; }  // W put off no further
            else if (bin) { schedule_push(s, r, PIPE_B, b[r], 0); Bd[b[r]++] = t + 1; left--; }
            else if (fin) { schedule_push(s, r, PIPE_F, f[r], 0); F[f[r]++] = t + 1; left--; }
            else if (w[r] < b[r]) { schedule_push(s, r, PIPE_W, w[r]++, 0); left--; }
        }
    }
    free(f); free(b); free(w); free(fdone); free(bdone);
}

// the schedule `name` for (P, m, V); ends the program with schedule_error's line if it cannot
static void schedule_make(Schedule* s, const char* name, int P, int m, int V) {
    char err[256];
    if (schedule_error(name, P, m, V, err, sizeof(err))) fatal("%s", err);
    if (!strcmp(name, "gpipe")) schedule_gpipe(s, P, m);
    else if (!strcmp(name, "1f1b")) schedule_1f1b(s, P, m);
    else if (!strcmp(name, "interleaved")) schedule_interleaved(s, P, m, V);
    else if (!strcmp(name, "zbv")) schedule_zbv(s, P, m);
    else if (!strcmp(name, "dualpipev")) schedule_dualpipev(s, P, m);
    else schedule_zb_h1(s, P, m);
}

// ----------------------------------------------------------------------------
// the simulator

typedef struct {
    double f, b, w;   // durations of one chunk's F, B (the whole backward when not split) and W
    double p2p;       // latency of a send to the next / previous rank
} PipeCosts;

typedef struct {
    int deadlock;          // 1: no rank could go on before all ops were done
    double makespan;       // the time the last op ends
    double* busy;          // (P) time each rank computed
    double bubble;         // idle / (P makespan): the fraction of the ranks' time spent waiting
    int* peak_live;        // (P) the most micro-batch chunks with activations alive at once on each rank
                           // (after their F, until their B, or W when split)
    double* start;         // (P, 3 m V) the start of each rank's ops, in list order (for traces)
} PipeSim;

static inline int pipe_idx(int m, int mb, int s) { return s * m + mb; }

static void pipe_sim_free(PipeSim* r) { free(r->busy); free(r->peak_live); free(r->start); }

static PipeSim pipe_simulate(const Schedule* s, PipeCosts c) {
    int P = s->P, m = s->m, V = s->V, S = P * V;
    PipeSim out;
    memset(&out, 0, sizeof(out));
    out.busy = (double*)calloc((size_t)P, sizeof(double));
    out.peak_live = (int*)calloc((size_t)P, sizeof(int));
    out.start = (double*)calloc((size_t)P * 3 * m * V, sizeof(double));
    // when each (kind, mb, virtual stage) finished; < 0: not yet
    double* done[3];
    for (int k = 0; k < 3; k++) {
        done[k] = (double*)mallocCheck((size_t)m * S * sizeof(double));
        for (int i = 0; i < m * S; i++) done[k][i] = -1.0;
    }
    int* next = (int*)calloc((size_t)P, sizeof(int));
    int* live = (int*)calloc((size_t)P, sizeof(int));
    double* clock = (double*)calloc((size_t)P, sizeof(double));
    int remaining = 0;
    for (int r = 0; r < P; r++) remaining += s->n[r];
    while (remaining > 0) {
        int progressed = 0;
        for (int r = 0; r < P; r++) {
            while (next[r] < s->n[r]) {
                PipeOp op = s->ops[r][next[r]];
                int st = schedule_stage(s, r, op.chunk);
                double ready = clock[r];
                double dep;  // when the op's input is here (a hand-off within the rank: no latency); < 0: not yet
                if (op.kind == PIPE_F) {
                    double in = st == 0 ? 0.0 : done[PIPE_F][pipe_idx(m, op.mb, st - 1)];
                    dep = st == 0 ? 0.0 : (in < 0 ? -1.0 : in + (schedule_rank(s, st - 1) == r ? 0.0 : c.p2p));
                } else if (op.kind == PIPE_B) {
                    if (done[PIPE_F][pipe_idx(m, op.mb, st)] < 0) dep = -1.0;  // its own forward first
                    else if (st == S - 1) dep = done[PIPE_F][pipe_idx(m, op.mb, st)];
                    else {
                        double in = done[PIPE_B][pipe_idx(m, op.mb, st + 1)];
                        dep = in < 0 ? -1.0 : in + (schedule_rank(s, st + 1) == r ? 0.0 : c.p2p);
                    }
                } else dep = done[PIPE_B][pipe_idx(m, op.mb, st)];
                if (dep < 0) break;  // blocked in a receive (or on its own earlier op)
                double t0 = ready > dep ? ready : dep;
                double d = op.kind == PIPE_F ? c.f : (op.kind == PIPE_B ? c.b : c.w);
                out.start[(size_t)r * 3 * m * V + next[r]] = t0;
                clock[r] = t0 + d;
                out.busy[r] += d;
                done[op.kind][pipe_idx(m, op.mb, st)] = clock[r];
                if (op.kind == PIPE_F) { live[r]++; if (live[r] > out.peak_live[r]) out.peak_live[r] = live[r]; }
                if ((op.kind == PIPE_B && !s->split_w) || op.kind == PIPE_W) live[r]--;
                next[r]++;
                remaining--;
                progressed = 1;
            }
        }
        if (!progressed) { out.deadlock = 1; break; }
    }
    double idle = 0.0;
    for (int r = 0; r < P; r++) if (clock[r] > out.makespan) out.makespan = clock[r];
    for (int r = 0; r < P; r++) idle += out.makespan - out.busy[r];
    out.bubble = out.makespan > 0 ? idle / (P * out.makespan) : 0.0;
    for (int k = 0; k < 3; k++) free(done[k]);
    free(next); free(live); free(clock);
    return out;
}

// Writes the simulated run as a Chrome / Perfetto trace (chrome://tracing, ui.perfetto.dev): one row
// per rank, a box per op labelled like "F3" or "B3.1" (micro-batch 3, chunk 1), times in units of the
// costs (shown as microseconds). Returns 0 if the file could not be written.
static int pipe_sim_trace(const Schedule* s, const PipeSim* sim, PipeCosts c, const char* path) {
    FILE* f = fopen(path, "w");
    if (f == NULL) return 0;
    fprintf(f, "{\"traceEvents\":[");
    int first = 1;
    for (int r = 0; r < s->P; r++) {
        fprintf(f, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"rank %d\"}}",
                first ? "" : ",", r, r);
        first = 0;
        for (int i = 0; i < s->n[r]; i++) {
            PipeOp op = s->ops[r][i];
            double d = op.kind == PIPE_F ? c.f : (op.kind == PIPE_B ? c.b : c.w);
            char label[32];
            if (s->V > 1) snprintf(label, sizeof(label), "%c%d.%d", PIPE_OP_NAMES[op.kind], op.mb, op.chunk);
            else snprintf(label, sizeof(label), "%c%d", PIPE_OP_NAMES[op.kind], op.mb);
            fprintf(f, ",{\"name\":\"%s\",\"cat\":\"%c\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.6f,\"dur\":%.6f}", label,
                    PIPE_OP_NAMES[op.kind], r, sim->start[(size_t)r * 3 * s->m * s->V + i], d);
        }
    }
    fprintf(f, "],\"otherData\":{\"schedule\":\"%s\",\"P\":%d,\"m\":%d,\"V\":%d,\"bubble\":%.6f}}\n", s->name, s->P,
            s->m, s->V, sim->bubble);
    return fclose(f) == 0;
}

// ----------------------------------------------------------------------------
// the communication plan: when each rank sends and receives, so that no schedule can deadlock
//
// On a GPU a send finishes only when its receiver takes it (NCCL; MPI's rendezvous for large
// messages), so "send when the data is ready, receive when it is needed" can deadlock: with ZB-H1 at
// P = 2, rank 0 sends F's output while rank 1 sends B's, and each waits for the other to receive.
// The plan fixes one global order instead. The schedule is played once by the simulator (F = 1,
// B = 2, or B = W = 1 when split: the usual ratios; no latency); each message (the activation of
// F(mb, s) for F(mb, s + 1), the gradient of B(mb, s) for B(mb, s - 1)) is given the time its
// consumer starts. Each rank then performs its messages in order of time, those of one time together
// in one batch (comm_p2p_batch: posted at once, so two ranks may exchange), each batch just before its
// first op that starts at or after that time. Every rank meets its batches in the same global order
// of times, and a rank between two batches only computes; so the earliest unfinished time always has
// every party to it there, and finishes: no deadlock, whatever the schedule, on any transport. The
// receive of an op's input is in the batch at its start; a send comes after the op that produced it
// (the consumer starts after the producer ends). On a real run the order is the simulated one, not the
// measured one: a rank may wait at a batch for a partner that is still computing, which the trace shows.
typedef struct {
    int send;        // 1: this rank sends, 0: it receives
    int peer;        // the other pipeline rank
    int kind;        // PIPE_F: the output of F(mb, stage) for F(mb, stage + 1);
                     // PIPE_B: the input gradient of B(mb, stage) for B(mb, stage - 1)
    int mb, stage;   // the producer's micro-batch and virtual stage
    double t;        // the simulated start of the consumer
    int before;      // performed just before this rank's op number `before` (its op count: after all)
} PipeXfer;

typedef struct {
    int P;
    int* n;          // (P) messages per rank
    PipeXfer** x;    // (P) each rank's, in the order performed
} PipePlan;

// a message's place in the global order (ties by kind, micro-batch, stage: the same on both sides)
static int pipe_xfer_cmp(const void* a, const void* b) {
    const PipeXfer* x = (const PipeXfer*)a;
    const PipeXfer* y = (const PipeXfer*)b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    if (x->kind != y->kind) return x->kind - y->kind;
    if (x->mb != y->mb) return x->mb - y->mb;
    return x->stage - y->stage;
}

// the costs the plan's order comes from
static PipeCosts pipe_plan_costs(const Schedule* s) {
    PipeCosts c = {1.0, s->split_w ? 1.0 : 2.0, 1.0, 0.0};
    return c;
}

static void pipe_plan_free(PipePlan* p) {
    for (int r = 0; r < p->P; r++) free(p->x[r]);
    free(p->x);
    free(p->n);
}

static PipePlan pipe_plan(const Schedule* s) {
    int P = s->P, m = s->m, V = s->V, S = P * V, cap = 3 * m * V;
    PipeSim sim = pipe_simulate(s, pipe_plan_costs(s));
    if (sim.deadlock) fatal("pipe_plan: the %s schedule deadlocks (P=%d m=%d V=%d)", s->name, P, m, V);
    PipePlan p;
    p.P = P;
    p.n = (int*)calloc((size_t)P, sizeof(int));
    p.x = (PipeXfer**)mallocCheck((size_t)P * sizeof(PipeXfer*));
    for (int r = 0; r < P; r++) p.x[r] = (PipeXfer*)mallocCheck((size_t)2 * m * V * 2 * sizeof(PipeXfer));
    for (int r = 0; r < P; r++) {
        for (int i = 0; i < s->n[r]; i++) {  // each op with an input from another stage: its receive, and the peer's send
            PipeOp op = s->ops[r][i];
            int st = schedule_stage(s, r, op.chunk), from;
            PipeXfer x;
            if (op.kind == PIPE_F && st > 0) { from = st - 1; x.kind = PIPE_F; }
            else if (op.kind == PIPE_B && st < S - 1) { from = st + 1; x.kind = PIPE_B; }
            else continue;
            int peer = schedule_rank(s, from);
            if (peer == r) continue;  // a hand-off within the rank (the V's turn): no message
            x.mb = op.mb; x.stage = from; x.t = sim.start[(size_t)r * cap + i]; x.before = 0;
            PipeXfer recv = x, send = x;
            recv.send = 0; recv.peer = peer;
            send.send = 1; send.peer = r;
            p.x[r][p.n[r]++] = recv;
            p.x[peer][p.n[peer]++] = send;
        }
    }
    for (int r = 0; r < P; r++) {
        qsort(p.x[r], (size_t)p.n[r], sizeof(PipeXfer), pipe_xfer_cmp);
        for (int k = 0, i = 0; k < p.n[r]; k++) {  // before the first op starting at or after its time
            while (i < s->n[r] && sim.start[(size_t)r * cap + i] < p.x[r][k].t) i++;
            p.x[r][k].before = i;
        }
    }
    pipe_sim_free(&sim);
    return p;
}

// ----------------------------------------------------------------------------
// what a rank's list holds at once (the executor sizes its buffers by these; the planner, scripts/plan.py, reads
// them through build/pipeline_sim --json)

// the most micro-batches alive at once in each chunk of rank's list (after F, until B, or W when split)
static void pipe_peak_slots(const Schedule* s, int rank, int* peak /*(V)*/) {
    int* live = (int*)calloc((size_t)s->V, sizeof(int));
    for (int c = 0; c < s->V; c++) peak[c] = 0;
    for (int i = 0; i < s->n[rank]; i++) {
        PipeOp op = s->ops[rank][i];
        if (op.kind == PIPE_F && ++live[op.chunk] > peak[op.chunk]) peak[op.chunk] = live[op.chunk];
        if ((op.kind == PIPE_B && !s->split_w) || op.kind == PIPE_W) live[op.chunk]--;
    }
    free(live);
}

// the most B outputs this rank holds before their sends (or, handed to a stage of its own, before that
// stage's B), walking its ops and messages in plan order
static int pipe_peak_sends(const Schedule* s, const PipePlan* p, int rank) {
    int held = 0, peak = 0, k = 0;
    for (int i = 0; i <= s->n[rank]; i++) {
        for (; k < p->n[rank] && p->x[rank][k].before == i; k++) if (p->x[rank][k].send && p->x[rank][k].kind == PIPE_B) held--;
        if (i == s->n[rank]) break;
        PipeOp op = s->ops[rank][i];
        int st = schedule_stage(s, rank, op.chunk);
        if (op.kind != PIPE_B) continue;
        if (st < s->P * s->V - 1 && schedule_rank(s, st + 1) == rank) held--;  // its input, handed over here, is used
        if (st > 0 && ++held > peak) peak = held;
    }
    return peak;
}
