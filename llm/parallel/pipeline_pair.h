// pipeline_pair.h: DualPipeV's overlapped pairs (DeepSeek-AI 2024, DeepSeek-V3 technical report, sec. 3.2.1;
// DualPipe's README), run by the pipeline executor (llm/parallel/pipeline.h's step) for each pair of its list.
//
// A pair is an F of one chunk and a B of the other (PipeOp.pair, llm/parallel/schedule_v.h): two micro-batches
// in opposite directions whose work does not depend on each other. DualPipe cuts each at its all-to-alls and
// interleaves the pieces, so that each direction's dispatch and combine travel while the other direction
// computes. Here each direction runs as a coroutine (llm/core/coroutine.h) of the ordinary op (pipe_run_op:
// stage_forward, stage_backward_input), and the chunks' ep groups get a turn (EPTurn,
// llm/sharded/expert_parallel.h): at every moe layer's dispatch and combine the running direction starts the
// all-to-all non-blocking and gives the turn to the other, which runs up to its own next all-to-all (or its end);
// the first is waited only when it is resumed. So the F's two all-to-alls per moe layer overlap the B's compute
// and the B's two (the gradients' dispatch and combine) the F's, in turns:
//
//   F: attention, router, counts | dispatch started ....... | wait, experts, combine started ......... | wait ...
//   B:                           | unpermute^T, dispatch started | ........ wait, experts^T, combine started | ...
//
// Over NCCL (CUDA and emulated builds) a started all-to-all is enqueued on the comm stream after an event of the
// compute stream, so it runs beside the other direction's kernels (the emulated build's streams are synchronous:
// there it finishes inside its start, the code path is the same). Over MPI (the CPU build) it is an
// MPI_Ialltoallv, which Open MPI progresses inside MPI calls: the other direction's own all-to-alls and
// collectives, and the wait (docs/moe.md measures how much of it is hidden).
//
// What the two directions share, and why it is safe: they run on different chunks, so different Stages: their
// slots, BlockBuffers, MoEBuffers (the rank-major staging rows rm, dyp, dxl), EPGroups (the counts and the
// plan) and loss and moe accumulators are their own; only one direction runs at a time (a coroutine, not a
// thread), so the host state they share (the dp hooks, the ledger, the watchdog's numbers, an FP8 state whose
// entries are per layer and expert) sees calls one at a time; the collectives' order on every communicator is
// the interleaving's, which depends on the schedule alone (the same list on every rank of an ep, dp or tp group),
// so every rank issues the same sequence. The counts exchange stays blocking (the host needs the counts to plan
// the rows). The B's messages in are received before the pair starts, the F's output sent after it: the messages the
// list has between the F and the B are split around the pair (pipe_pair_ok: none may receive into the F's input
// buffer; a pair with one would run one op after the other: the lists have none).
// --overlap-pairs 0 runs every pair through the same runner without giving the turn away (each all-to-all waited
// at once): the same arithmetic in the same order, the baseline the trace and the tests compare with.

#pragma once
#include "../core/coroutine.h"
#include "../sharded/expert_parallel.h"
#include "pipeline_exec.h"

typedef struct PipePair PipePair;
typedef struct {
    PipePair* pair;
    PipeOp op;
    Coro co;
    EPTurn turn;
    char name[16];       // the op's, e.g. "B2.1"
    int moe_layers[64];  // the moe layers of its chunk in the order it meets them (F ascending, B descending)
    int num_moe, a2a;    // how many; all-to-alls done so far (two per layer: dispatch, combine)
} PipeDir;

struct PipePair {
    Pipeline* pipe;
    const int* inputs;
    const int* targets;
    float dloss;
    PipeDir dir[2];      // 0 the F, 1 the B
};

static void pipe_dir_main(void* arg) {
    PipeDir* d = (PipeDir*)arg;
    pipe_run_op(d->pair->pipe, d->op, d->pair->inputs, d->pair->targets, d->pair->dloss);
}

// EPTurn.pass: a started all-to-all of direction d; the other direction's next piece runs (if overlapping and it
// has not finished)
static void pipe_dir_pass(void* ctx, const char* what) {
    (void)what;
    PipeDir* d = (PipeDir*)ctx;
    PipeDir* other = &d->pair->dir[d == &d->pair->dir[0]];
    if (d->pair->pipe->overlap_pairs && !other->co.done) coro_yield(&d->co);
}

// EPTurn.done: its wait returned; the trace's a2a event from its start, named by direction, layer and micro-batch
static void pipe_dir_done(void* ctx, const char* what, double t0, double exposed) {
    PipeDir* d = (PipeDir*)ctx;
    Pipeline* pipe = d->pair->pipe;
    int k = d->a2a++ / 2, layer = k < d->num_moe ? d->moe_layers[k] : -1;
    char name[40];
    snprintf(name, sizeof(name), "%s L%d %s", d->name, layer, what);
    int n = pipe->num_events;
    pipe_event_piece(pipe, name, "a2a", t0, 0);
    if (pipe->num_events > n) pipe->events[n].exposed = exposed;
}

// 1 if the pair at op i of this rank's list (an F with pair = 1, then a B of the other chunk) can run overlapped:
// the messages due between the two (plan entries from k on with before == i + 1) can be split around the pair, the
// receives (the B's input gradient) and the sends of earlier outputs before the F, the sends of the F's own output
// after the B (pipeline_step): none receives an F's input (act_recv, which the F reads; the lists have none there)
static int pipe_pair_ok(const Pipeline* pipe, int i, int k) {
    const Schedule* s = &pipe->sched;
    int r = pipe->pp_rank;
    if (i + 1 >= s->n[r]) return 0;
    PipeOp f = s->ops[r][i], b = s->ops[r][i + 1];
    if (!f.pair || f.kind != PIPE_F || b.kind != PIPE_B || b.chunk == f.chunk) return 0;
    for (int e = k; e < pipe->plan.n[r] && pipe->plan.x[r][e].before == i + 1; e++) {
        const PipeXfer* x = &pipe->plan.x[r][e];
        if (x->kind == PIPE_F && !x->send) return 0;
    }
    return 1;
}

// the moe layers of chunk c, ascending (forward) or descending (backward)
static int pipe_moe_layers(const Pipeline* pipe, int c, int descending, int* out, int cap) {
    StageRange rg = pipe->chunks[c].range;
    int n = 0;
    for (int j = 0; j < rg.last_layer - rg.first_layer; j++) {
        int l = descending ? rg.last_layer - 1 - j : rg.first_layer + j;
        if (layer_is_moe(pipe->cfg, l) && n < cap) out[n++] = l;
    }
    return n;
}

// Runs the pair F, B (pipe_pair_ok) in turns: each direction up to its next all-to-all, then the other. The trace
// gets each piece (cat F or B; piece 0, 1, ... of the op) and each all-to-all (cat a2a).
static void pipe_run_pair(Pipeline* pipe, PipeOp f, PipeOp b, const int* inputs, const int* targets, float dloss) {
    PipePair pair;
    memset(&pair, 0, sizeof(pair));
    pair.pipe = pipe; pair.inputs = inputs; pair.targets = targets; pair.dloss = dloss;
    PipeOp ops[2] = {f, b};
    for (int k = 0; k < 2; k++) {
        PipeDir* d = &pair.dir[k];
        d->pair = &pair;
        d->op = ops[k];
        pipe_op_name(pipe, ops[k], d->name, sizeof(d->name));
        d->num_moe = pipe_moe_layers(pipe, ops[k].chunk, k == 1, d->moe_layers, 64);
        d->turn.pass = pipe_dir_pass;
        d->turn.done = pipe_dir_done;
        d->turn.ctx = d;
        pipe->chunks[ops[k].chunk].ep.turn = &d->turn;
        if (pipe->pair_stacks[k] == NULL) pipe->pair_stacks[k] = coro_stack_alloc();
        coro_init(&d->co, pipe->pair_stacks[k], pipe_dir_main, d);
    }
    int pieces[2] = {0, 0};
    for (int k = 0; !pair.dir[0].co.done || !pair.dir[1].co.done; k ^= 1) {
        PipeDir* d = &pair.dir[k];
        if (d->co.done) continue;
        char cat[2] = {PIPE_OP_NAMES[d->op.kind], 0};
        double t0 = wall_ms();
        coro_resume(&d->co);
        pipe_event_piece(pipe, d->name, cat, t0, pieces[k]++);
    }
    for (int k = 0; k < 2; k++) {
        pipe->chunks[ops[k].chunk].ep.turn = NULL;
        coro_free(&pair.dir[k].co);
    }
    pipe->pairs_overlapped++;
}

