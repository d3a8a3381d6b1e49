// schedule_list.h: what a pipeline schedule is as data (each rank's list of ops) and where its virtual
// stages live (the placement). The generators are in llm/parallel/schedule.h (gpipe, 1f1b, interleaved,
// zb-h1) and llm/parallel/schedule_v.h (zbv, dualpipev); the simulator, the communication plan and the
// executor read the lists and map stages through pipe_owner / pipe_stage_of, never by their own arithmetic.
//
// The placement. A schedule runs S = P V virtual stages on P ranks, V chunks each.
//   loop (gpipe, 1f1b, interleaved, zb-h1): virtual stage s on rank s % P as its chunk s / P; the
//        first stage (the embedding) is on rank 0, the last (the head and the loss) on rank P - 1.
//   V    (zbv, dualpipev; V = 2): rank r holds chunk 0 = virtual stage r and chunk 1 = virtual stage
//        2P - 1 - r. A micro-batch goes down the ranks and back up (a V): stages P - 1 and P are both on
//        rank P - 1 (a local hand-off, no message), and the first and the last stage are both on rank 0,
//        so the tied embedding has one copy there (Qi et al. 2024, "Pipeline Parallelism with
//        Controllable Memory"; the V of ZB-V and of DualPipeV).
#pragma once
#include "../core/common.h"

typedef enum { PIPE_F = 0, PIPE_B = 1, PIPE_W = 2 } PipeOpKind;
static const char PIPE_OP_NAMES[3] = {'F', 'B', 'W'};

typedef struct {
    int kind;   // PipeOpKind
    int mb;     // micro-batch
    int chunk;  // which of the rank's V chunks (its virtual stage: pipe_stage_of)
    int pair;   // 1: an F that runs overlapped with the next op, a B of the other chunk (DualPipeV's "F&B");
                // the simulator and the CPU executor run the two one after the other (their costs add)
} PipeOp;

typedef struct {
    const char* name;
    int P, m, V;
    int split_w;     // 1: B is the input gradient only and W ops exist (zero-bubble schedules)
    int vshape;      // 1: the V placement (above), 0: the loop placement
    int* n;          // (P) ops per rank
    PipeOp** ops;    // (P) each rank's list
} Schedule;

// 1 if schedule `name` places its stages in a V (two chunks per rank)
static inline int schedule_is_v(const char* name) { return !strcmp(name, "zbv") || !strcmp(name, "dualpipev"); }

// The one map from a virtual stage to its place: rank *r runs stage s as its chunk *c (P ranks).
static inline void pipe_owner(int vshape, int P, int s, int* r, int* c) {
    if (!vshape) { *r = s % P; *c = s / P; }
    else if (s < P) { *r = s; *c = 0; }
    else { *r = 2 * P - 1 - s; *c = 1; }
}
// its inverse: the virtual stage of chunk c of rank r
static inline int pipe_stage_of(int vshape, int P, int r, int c) { return vshape ? (c == 0 ? r : 2 * P - 1 - r) : c * P + r; }
static inline int pipe_rank_of(int vshape, int P, int s) { int r, c; pipe_owner(vshape, P, s, &r, &c); return r; }
static inline int pipe_chunk_of(int vshape, int P, int s) { int r, c; pipe_owner(vshape, P, s, &r, &c); return c; }

static inline int schedule_stage(const Schedule* s, int r, int c) { return pipe_stage_of(s->vshape, s->P, r, c); }
static inline int schedule_rank(const Schedule* s, int st) { return pipe_rank_of(s->vshape, s->P, st); }

static void schedule_alloc(Schedule* s, const char* name, int P, int m, int V, int split_w) {
    s->name = name; s->P = P; s->m = m; s->V = V; s->split_w = split_w; s->vshape = schedule_is_v(name);
    s->n = (int*)mallocCheck((size_t)P * sizeof(int));
    s->ops = (PipeOp**)mallocCheck((size_t)P * sizeof(PipeOp*));
    for (int r = 0; r < P; r++) {
        s->n[r] = 0;
        s->ops[r] = (PipeOp*)mallocCheck((size_t)(3 * m * V) * sizeof(PipeOp));
    }
}

static void schedule_free(Schedule* s) {
    for (int r = 0; r < s->P; r++) free(s->ops[r]);
    free(s->ops);
    free(s->n);
}

static inline void schedule_push(Schedule* s, int r, int kind, int mb, int chunk) {
    PipeOp op = {kind, mb, chunk, 0};
    s->ops[r][s->n[r]++] = op;
}
