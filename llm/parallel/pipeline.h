// pipeline.h: pipeline parallelism: the layers split over the pp_size ranks of the mesh's pp axis, and one
// executor that runs a rank's list of the schedule (llm/parallel/schedule.h: GPipe, 1F1B, interleaved 1F1B,
// ZB-H1, ZB-V, DualPipeV) on the micro-batches of an optimizer step (Huang et al. 2019, "GPipe"; Narayanan et al.
// 2019 "PipeDream" and 2021 "Efficient Large-Scale Language Model Training on GPU Clusters" sec. 2.2;
// Qi et al. 2023, "Zero Bubble Pipeline Parallelism"; DeepSeek-AI 2025, DualPipe).
//
// The split of the layers over the virtual stages, the units each rank holds and the layout's refusals:
// llm/parallel/pipeline_split.h.
//
// A step. The m micro-batches of the step are its gradient-accumulation steps; the first rank reads
// their tokens, the last their targets (every rank's data loader reads the same batches). The executor
// walks its list: F(mb, c) runs chunk c's stage forward on a free micro-batch slot (its input received
// from the previous virtual stage, or the tokens; in the V's turn, stage P - 1's output on the same rank),
// B(mb, c) the backward (fused, or only the input gradient when the schedule splits W out), W(mb, c) the
// deferred weight gradients; a slot is free
// again after B (or W). Messages go as the communication plan says (llm/parallel/schedule.h: pipe_plan):
// batches of sends and receives on GROUP_PP, posted together, each just before the op that needs it,
// in one global order that cannot deadlock. A rank keeps as many slots per chunk as its list ever has
// micro-batches alive there (GPipe m, 1F1B min(P - rank, m)): the activation memory the allocator
// measures is the schedule's peak. The data-parallel policy (llm/parallel/dp.h) is told before each backward
// whether it is the micro-batch's last (its gradients then communicate). The loss is summed on the
// last stage, averaged over the micro-batches, and sent to the other stages (a broadcast on GROUP_PP).
//
// The trace. With tracing on (--trace), each rank records its ops, its message batches and the
// optimizer step with wall-clock times (the device synchronized after each, so the times are the
// work's own); an overlapped pair's ops in their pieces and its all-to-alls from start to wait (below);
// llm/parallel/pipeline_report.h writes them out.
//
// DualPipeV's F&B pairs run in turns, cut at the moe all-to-alls (the section "DualPipeV's overlapped pairs").
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../core/coroutine.h"
#include "../comm/comm.h"
#include "../model/stage.h"
#include "../model/sampler.h"
#include "dp.h"
#include "dp_step.h"
#include "schedule.h"
#include "pipeline_split.h"

// ----------------------------------------------------------------------------
// the executor

typedef struct {
    char name[40];  // "F3", "B3.1", "send F3>1 recv B2<1", "optimizer", "B3.1 L2 dispatch"
    char cat[12];   // F, B, W, p2p, optimizer, a2a (an overlapped pair's all-to-all, from its start to its wait's end)
    double ts, dur; // ms, wall clock
    int piece;      // an overlapped pair's op runs in pieces: 0 its first (or the whole op), k its (k+1)-th
    double exposed; // a2a: the ms the host spent in its start and its wait (the rest of dur the other direction ran)
} PipeEvent;

#define PIPE_MAX_EVENTS 4096

typedef struct {
    Comm* comm;
    DataParallel* dp;
    GPTConfig cfg;
    int pp_size, pp_rank;  // the pp axis of the mesh: this rank runs virtual stages pipe_stage_of(vshape, pp_size, pp_rank, c)
    int vpp;              // chunks (virtual stages) per rank: the schedule's V
    int vshape;           // the schedule's placement (llm/parallel/schedule_list.h): 1 the V, 0 the loop
    int head_rank;        // the pp rank of the last virtual stage (the head and the loss): P - 1, or 0 in the V
    int m, B, T;          // micro-batches per step, each B x T (T: the whole sequence; a stage holds its cp share)
    size_t R;             // rows of an activation message: B*T, or B*T/tp with sequence parallelism
    long long* moe_counts;  // (L, 2, E) a moe model: this rank's routed and dropped assignments per layer and expert since
                            // the caller last cleared them (the chunks' stages add theirs, stage_take_moe); else NULL
    float* moe_counts_dev;  // (L, 2, E) device: a step's counts, to sum over the dp and pp groups (train_gpt.cu)
    Schedule sched;       // every rank's list; this rank runs sched.ops[rank]
    PipePlan plan;
    Stage* chunks;        // (vpp) chunk c runs virtual stage pipe_stage_of(vshape, pp_size, pp_rank, c)
    int* slot_of;         // (vpp, m) the slot micro-batch mb holds in chunk c this step; -1: none
    int** slot_free;      // (vpp) 1 for each free slot of chunk c
    floatX* act_recv;     // (R, C) the activation received for the next F
    floatX* grad_recv;    // (R, C) the gradient received for the next B
    int num_send;         // B outputs kept until their sends (or, in the V's turn, their B on this rank): the most waiting
    floatX* grad_send;    // (num_send, R, C)
    int* send_of;         // (vpp, m) which grad_send buffer holds B(mb, c)'s output; -1: none
    int* send_busy;       // (num_send)
    float* scalar;        // (2) device: the loss sent from the last stage
    CommHandle* posted;   // (this rank's plan entries) the sends started as soon as their data was ready
    int overlap_pairs;    // DualPipeV's pairs (PipeOp.pair): 1 their F and B interleaved at the moe all-to-alls (below)
    int pairs_overlapped; // this step's pairs run by the pair runner (pipe_pair_ok), the others one op after the other
    int trace_on;
    PipeEvent* events;    // (PIPE_MAX_EVENTS) this step's
    int num_events;
    size_t act_bytes;     // measured: the activations (MEM_ACTIVATIONS) the chunks' slots took
} Pipeline;

static inline const Stage* pipeline_first(const Pipeline* pipe) { return &pipe->chunks[0]; }
static inline int pipeline_is_last(const Pipeline* pipe) { return pipe->pp_rank == pipe->head_rank; }
static inline int pipe_stage(const Pipeline* pipe, int chunk) { return pipe_stage_of(pipe->vshape, pipe->pp_size, pipe->pp_rank, chunk); }
// 1 if virtual stage s (0 .. S-1) is on this rank; *chunk: its chunk here
static inline int pipe_local(const Pipeline* pipe, int s, int* chunk) {
    int r;
    pipe_owner(pipe->vshape, pipe->pp_size, s, &r, chunk);
    return r == pipe->pp_rank;
}

// 1 if plan entry x is the send of F(mb)'s output from virtual stage vs
static inline int pipe_is_send_of(const PipeXfer* x, int mb, int vs) { return x->send && x->kind == PIPE_F && x->mb == mb && x->stage == vs; }

// Once, at init: in the batches due between each pair's F and B, the sends of the F's own output moved to the end
// of their batch (its messages are posted together: their order within it is free), so that pipeline_step can run
// the rest before the pair and those after it as two contiguous ranges
static void pipe_plan_pairs(Pipeline* pipe) {
    const Schedule* s = &pipe->sched;
    int r = pipe->pp_rank, n = pipe->plan.n[r];
    PipeXfer* x = pipe->plan.x[r];
    for (int i = 0; i + 1 < s->n[r]; i++) {
        PipeOp f = s->ops[r][i];
        if (!f.pair) continue;
        int vs = pipe_stage(pipe, f.chunk);
        for (int k = 0; k < n;) {
            int e = k + 1;
            while (e < n && x[e].before == x[k].before && x[e].t == x[k].t) e++;
            if (x[k].before == i + 1) {  // a stable partition of [k, e): the others, then the F's sends
                PipeXfer tmp[64];
                int m = 0;
                if (e - k > 64) fatal("pipeline: more than 64 messages in one batch");
                for (int j = k; j < e; j++) if (!pipe_is_send_of(&x[j], f.mb, vs)) tmp[m++] = x[j];
                for (int j = k; j < e; j++) if (pipe_is_send_of(&x[j], f.mb, vs)) tmp[m++] = x[j];
                memcpy(x + k, tmp, (size_t)(e - k) * sizeof(PipeXfer));
            }
            k = e;
        }
    }
}

// The stages of this pp rank (the mesh's pp axis: comm->mesh.pp) for `schedule` with vpp chunks per rank, m
// micro-batches of B x T, their parameters and gradients from dp (made with pipe_held_units' units), their
// linear layers split over tp and their sequences over cp. The layout was checked with pipe_layout_error.
static void pipeline_init(Pipeline* pipe, Comm* comm, DataParallel* dp, TPGroup tp, CPGroup cp, const char* schedule, int vpp,
                          int m, int B, int T, Recompute recompute) {
    memset(pipe, 0, sizeof(*pipe));
    pipe->comm = comm;
    pipe->dp = dp;
    pipe->cfg = dp->lay.cfg;
    pipe->pp_size = comm->mesh.pp.size;
    pipe->pp_rank = comm->mesh.pp.rank;
    pipe->vpp = vpp; pipe->m = m; pipe->B = B; pipe->T = T;
    pipe->overlap_pairs = 1;
    if (pipe->cfg.num_experts > 0) {
        size_t n = (size_t)pipe->cfg.num_layers * 2 * pipe->cfg.num_experts;
        pipe->moe_counts = (long long*)mallocCheck(n * sizeof(long long));
        memset(pipe->moe_counts, 0, n * sizeof(long long));
        pipe->moe_counts_dev = (float*)device_malloc(n * sizeof(float), MEM_WORKSPACE);
    }
    schedule_make(&pipe->sched, schedule, pipe->pp_size, m, vpp);
    pipe->vshape = pipe->sched.vshape;
    pipe->head_rank = pipe_rank_of(pipe->vshape, pipe->pp_size, pipe->pp_size * vpp - 1);
    pipe->plan = pipe_plan(&pipe->sched);
    pipe_plan_pairs(pipe);  // (DualPipeV's pairs: the pair runner, below)
    int* peak = (int*)mallocCheck((size_t)vpp * sizeof(int));
    pipe_peak_slots(&pipe->sched, pipe->pp_rank, peak);
    size_t before = mem_live(MEM_ACTIVATIONS);
    pipe->chunks = (Stage*)mallocCheck((size_t)vpp * sizeof(Stage));
    pipe->slot_free = (int**)mallocCheck((size_t)vpp * sizeof(int*));
    for (int c = 0; c < vpp; c++) {
        int slots = peak[c] > 0 ? peak[c] : 1;
        stage_init_cp(&pipe->chunks[c], &dp->lay, &dp->hooks, tp, cp, pipe_stage_range(pipe->cfg, pipe->pp_size, vpp, pipe->vshape, pipe->pp_rank, c), B, T,
                      recompute, slots);
        if (pipe->sched.split_w) stage_enable_split_backward(&pipe->chunks[c]);
        pipe->slot_free[c] = (int*)mallocCheck((size_t)slots * sizeof(int));
        for (int k = 0; k < slots; k++) pipe->slot_free[c][k] = 1;
    }
    pipe->act_bytes = mem_live(MEM_ACTIVATIONS) - before;
    free(peak);
    pipe->slot_of = (int*)mallocCheck((size_t)vpp * m * sizeof(int));
    pipe->send_of = (int*)mallocCheck((size_t)vpp * m * sizeof(int));
    for (int i = 0; i < vpp * m; i++) pipe->slot_of[i] = pipe->send_of[i] = -1;
    const Stage* st = &pipe->chunks[0];
    pipe->R = (size_t)tp_rows(&st->tp, st->B * st->T);  // (st->T: the rank's share of T with context parallelism)
    size_t msg = pipe->R * pipe->cfg.channels;
    pipe->num_send = pipe_peak_sends(&pipe->sched, &pipe->plan, pipe->pp_rank);
    pipe->act_recv = (floatX*)device_malloc(msg * sizeof(floatX), MEM_COMM);
    pipe->grad_recv = (floatX*)device_malloc(msg * sizeof(floatX), MEM_COMM);
    pipe->grad_send = (floatX*)device_malloc((size_t)(pipe->num_send > 0 ? pipe->num_send : 1) * msg * sizeof(floatX), MEM_COMM);
    pipe->send_busy = (int*)calloc((size_t)(pipe->num_send > 0 ? pipe->num_send : 1), sizeof(int));
    pipe->scalar = (float*)device_malloc(2 * sizeof(float), MEM_WORKSPACE);
    pipe->events = (PipeEvent*)mallocCheck(PIPE_MAX_EVENTS * sizeof(PipeEvent));
    pipe->posted = (CommHandle*)calloc((size_t)(pipe->plan.n[pipe->pp_rank] + 1), sizeof(CommHandle));
}

// FP8 linear layers in every chunk (llm/precision/fp8_linear.h): fp8_init's state, its operand workspace sized
// for this rank's largest GEMM operand. Once, after pipeline_init.
static void pipeline_enable_fp8(Pipeline* pipe, Fp8State* fp8, Fp8Config cfg) {
    size_t max_elems = 0;
    for (int c = 0; c < pipe->vpp; c++) {
        size_t e = stage_fp8_max_operand(&pipe->chunks[c]);
        if (e > max_elems) max_elems = e;
    }
    fp8_init(fp8, cfg, pipe->comm, pipe->cfg.num_layers, max_elems, pipe->cfg.num_experts);
    for (int c = 0; c < pipe->vpp; c++) stage_enable_fp8(&pipe->chunks[c], fp8);
}

static void pipeline_free(Pipeline* pipe) {
    for (int c = 0; c < pipe->vpp; c++) { stage_free(&pipe->chunks[c]); free(pipe->slot_free[c]); }
    free(pipe->moe_counts);
    device_free(pipe->moe_counts_dev);
    free(pipe->chunks); free(pipe->slot_free); free(pipe->slot_of); free(pipe->send_of); free(pipe->send_busy); free(pipe->events);
    free(pipe->posted);
    device_free(pipe->act_recv); device_free(pipe->grad_recv); device_free(pipe->grad_send); device_free(pipe->scalar);
    schedule_free(&pipe->sched);
    pipe_plan_free(&pipe->plan);
    memset(pipe, 0, sizeof(*pipe));
}

static void pipe_event_piece(Pipeline* pipe, const char* name, const char* cat, double t0, int piece) {
    if (!pipe->trace_on || pipe->num_events >= PIPE_MAX_EVENTS) return;
    device_synchronize();
    PipeEvent* e = &pipe->events[pipe->num_events++];
    snprintf(e->name, sizeof(e->name), "%s", name);
    snprintf(e->cat, sizeof(e->cat), "%s", cat);
    e->ts = t0;
    e->dur = wall_ms() - t0;
    e->piece = piece;
    e->exposed = 0.0;
}
static void pipe_event(Pipeline* pipe, const char* name, const char* cat, double t0) { pipe_event_piece(pipe, name, cat, t0, 0); }

// v (n <= 2 floats, host) of the last stage, on every stage of the pp group (a broadcast)
static void pipe_from_last_stage(Pipeline* pipe, float* v, int n) {
    copy_to_device(pipe->scalar, v, (size_t)n * sizeof(float));
    comm_broadcast(pipe->comm, GROUP_PP, pipe->scalar, (size_t)n, pipe->head_rank, llm_ctx.stream);
    copy_to_host(v, pipe->scalar, (size_t)n * sizeof(float));
}

// a message's MPI tag: unique within the step
static inline int pipe_tag(const Pipeline* pipe, const PipeXfer* x) { return (x->kind * pipe->m + x->mb) * pipe->vpp * pipe->pp_size + x->stage; }

// Starts the sends of op (kind, mb, virtual stage vs)'s output now that it is ready (MPI: posted, then
// waited in their batch; NCCL: issued in their batch, see comm_p2p_post_send). buf: the output.
static void pipe_post_sends(Pipeline* pipe, int kind, int mb, int vs, const void* buf) {
    for (int i = 0; i < pipe->plan.n[pipe->pp_rank]; i++) {
        const PipeXfer* x = &pipe->plan.x[pipe->pp_rank][i];
        if (!x->send || x->kind != kind || x->mb != mb || x->stage != vs) continue;
        pipe->posted[i] = comm_p2p_post_send(pipe->comm, GROUP_PP, buf, pipe->R * pipe->cfg.channels, x->peer, pipe_tag(pipe, x),
                                           comm_dtype_of((floatX*)NULL));
    }
}

// the messages of plan entries [k, e) of this rank, one batch
static void pipe_run_batch(Pipeline* pipe, int k, int e) {
    CommP2P ops[64];
    int n = 0;
    size_t msg = pipe->R * pipe->cfg.channels;
    double t0 = wall_ms();
    char label[40] = "";  // e.g. "send F3>1 recv B2<1": what went to / came from which rank
    for (int i = k; i < e; i++) {
        const PipeXfer* x = &pipe->plan.x[pipe->pp_rank][i];
        if (n == 64) fatal("pipeline: more than 64 messages in one batch");
        size_t at = strlen(label);
        snprintf(label + at, sizeof(label) - at, "%s%s %c%d%c%d", at ? " " : "", x->send ? "send" : "recv",
                 PIPE_OP_NAMES[x->kind], x->mb, x->send ? '>' : '<', x->peer);
        int chunk = pipe_chunk_of(pipe->vshape, pipe->pp_size, x->stage), idx = chunk * pipe->m + x->mb;  // the producer's, when this rank sends
        void* buf;
        if (!x->send) buf = x->kind == PIPE_F ? pipe->act_recv : pipe->grad_recv;
        else if (x->kind == PIPE_F) buf = (void*)stage_output(&pipe->chunks[chunk], pipe->slot_of[idx]);
        else buf = pipe->grad_send + (size_t)pipe->send_of[idx] * msg;
        CommP2P o = {x->send, buf, msg, x->peer, pipe_tag(pipe, x), x->send ? &pipe->posted[i] : NULL};
        ops[n++] = o;
    }
    comm_p2p_batch(pipe->comm, GROUP_PP, ops, n, comm_dtype_of((floatX*)NULL), llm_ctx.stream);
    for (int i = k; i < e; i++) {  // the sent gradients' buffers are free again
        const PipeXfer* x = &pipe->plan.x[pipe->pp_rank][i];
        int idx = pipe_chunk_of(pipe->vshape, pipe->pp_size, x->stage) * pipe->m + x->mb;
        if (x->send && x->kind == PIPE_B) { pipe->send_busy[pipe->send_of[idx]] = 0; pipe->send_of[idx] = -1; }
    }
    pipe_event(pipe, label, "p2p", t0);
}

// The loss's scale, written once. A step's loss is the mean of the per-token losses over its global batch:
// m micro-batches of B sequences of T tokens on each dp rank. This rank's stage holds B x T_l of them per
// micro-batch (T_l = T / cp: context parallelism splits each sequence; llm/sharded/context_parallel.h), so
// seeding its backward with dloss = 1 / (B T_l m) per token makes its gradient that of the mean over its own
// m B T_l tokens; the gradient group then averages these (mesh.grad: dp x cp ranks holding equally many
// tokens, llm/parallel/dp.h), which gives the gradient of the mean over all dp cp m B T_l = dp m B T tokens.
// (The loss scaler multiplies it: llm/precision/loss_scale.h.) Checked: test/test_gpt.cu (m = 2 micro-batches
// against the PyTorch reference's gradient of the whole batch's mean).
static float pipeline_dloss(const Pipeline* pipe) { return 1.0f / ((float)pipe->B * pipe->chunks[0].T * pipe->m); }

// an op's name in the trace: "F3", or "F3.1" (chunk 1) with several chunks
static void pipe_op_name(const Pipeline* pipe, PipeOp op, char* name, size_t n) {
    if (pipe->vpp > 1) snprintf(name, n, "%c%d.%d", PIPE_OP_NAMES[op.kind], op.mb, op.chunk);
    else snprintf(name, n, "%c%d", PIPE_OP_NAMES[op.kind], op.mb);
}

// One op of the list: F(mb, c), B(mb, c) or W(mb, c) on chunk c's stage (the top of this file), with its sends
// started as soon as its output is ready. Its messages in were received by the batches before it.
static void pipe_run_op(Pipeline* pipe, PipeOp op, const int* inputs, const int* targets, float dloss) {
    const Schedule* s = &pipe->sched;
    int r = pipe->pp_rank, S = pipe->pp_size * pipe->vpp, BT = pipe->B * pipe->T;
    size_t msg = pipe->R * pipe->cfg.channels;
    Stage* st = &pipe->chunks[op.chunk];
    int vs = pipe_stage(pipe, op.chunk), idx = op.chunk * pipe->m + op.mb, near;  // near: the neighbour's chunk, if here
    if (op.kind == PIPE_F) {
        int slot = 0;
        while (slot < st->num_slots && !pipe->slot_free[op.chunk][slot]) slot++;
        if (slot == st->num_slots) fatal("pipeline: no free slot for F%d on chunk %d (rank %d)", op.mb, op.chunk, r);
        pipe->slot_free[op.chunk][slot] = 0;
        pipe->slot_of[idx] = slot;
        const int* tok = vs == 0 ? inputs + (size_t)op.mb * BT : NULL;
        const int* tgt = vs == S - 1 ? targets + (size_t)op.mb * BT : NULL;
        const floatX* in = vs == 0 ? NULL : pipe->act_recv;
        if (vs > 0 && pipe_local(pipe, vs - 1, &near)) in = stage_output(&pipe->chunks[near], pipe->slot_of[near * pipe->m + op.mb]);
        stage_forward(st, slot, tok, in, tgt, dloss);
        if (vs < S - 1) pipe_post_sends(pipe, PIPE_F, op.mb, vs, stage_output(st, slot));
    } else {
        dp_micro_begin(pipe->dp, op.mb, pipe->m);  // the micro-batch's last backward communicates
        int slot = pipe->slot_of[idx], handed = -1;  // handed: the send buffer of a gradient from this rank's next stage
        const floatX* gin = vs == S - 1 ? NULL : pipe->grad_recv;
        if (op.kind == PIPE_B && vs < S - 1 && pipe_local(pipe, vs + 1, &near)) {
            handed = pipe->send_of[near * pipe->m + op.mb];
            gin = pipe->grad_send + (size_t)handed * msg;
        }
        if (op.kind == PIPE_W) stage_backward_weight(st, slot);
        else if (s->split_w) stage_backward_input(st, slot, gin);
        else stage_backward(st, slot, gin);
        if (handed >= 0) { pipe->send_busy[handed] = 0; pipe->send_of[near * pipe->m + op.mb] = -1; }
        if (op.kind == PIPE_B && vs > 0) {  // keep the input gradient until its send
            int b = 0;
            while (b < pipe->num_send && pipe->send_busy[b]) b++;
            if (b == pipe->num_send) fatal("pipeline: no free send buffer for B%d (rank %d)", op.mb, r);
            pipe->send_busy[b] = 1;
            pipe->send_of[idx] = b;
            copy_device_to_device(pipe->grad_send + (size_t)b * msg, st->dx, msg * sizeof(floatX), llm_ctx.stream);
            pipe_post_sends(pipe, PIPE_B, op.mb, vs, pipe->grad_send + (size_t)b * msg);
        }
        if (op.kind == PIPE_W || !s->split_w) { pipe->slot_free[op.chunk][slot] = 1; pipe->slot_of[idx] = -1; }
    }
}

// ----------------------------------------------------------------------------
// DualPipeV's overlapped pairs (DeepSeek-AI 2024, DeepSeek-V3 technical report, sec. 3.2.1; DualPipe's README)
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
        coro_init(&d->co, pipe_dir_main, d);
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

// One step's forwards and backwards: inputs and targets (m, B, T) on the host (the first rank reads
// inputs, the last targets; others may pass NULL). dloss: each token's loss gradient, pipeline_dloss times
// the loss scale. Returns the step's mean loss on every rank of the pp group (the sum over micro-batches of
// their mean losses / m).
static float pipeline_step(Pipeline* pipe, const int* inputs, const int* targets, float dloss) {
    const Schedule* s = &pipe->sched;
    int r = pipe->pp_rank, S = pipe->pp_size * pipe->vpp, k = 0;
    const PipePlan* plan = &pipe->plan;
    pipe->num_events = 0;
    pipe->pairs_overlapped = 0;
    for (int i = 0; i <= s->n[r]; i++) {
        while (k < plan->n[r] && plan->x[r][k].before == i) {  // the batches due before op i, in time order
            int e = k + 1;
            while (e < plan->n[r] && plan->x[r][e].before == i && plan->x[r][e].t == plan->x[r][k].t) e++;
            pipe_run_batch(pipe, k, e);
            k = e;
        }
        if (i == s->n[r]) break;
        PipeOp op = s->ops[r][i];
        if (op.pair && pipe_pair_ok(pipe, i, k)) {
            // DualPipeV's F&B: the messages due before the B first (but the sends of the F's own output, which the
            // pair makes), then both ops in turns, then those sends, each part in the batches' order
            // (pipe_plan_pairs put those sends last in their batches: [k, mid) before, [mid, e) after)
            int vs = pipe_stage(pipe, op.chunk), k0 = k;
            for (int part = 0; part < 2; part++) {
                for (k = k0; k < plan->n[r] && plan->x[r][k].before == i + 1;) {
                    int e = k + 1, mid;
                    while (e < plan->n[r] && plan->x[r][e].before == i + 1 && plan->x[r][e].t == plan->x[r][k].t) e++;
                    for (mid = k; mid < e && !pipe_is_send_of(&plan->x[r][mid], op.mb, vs); mid++) {}
                    if (part == 0 && mid > k) pipe_run_batch(pipe, k, mid);
                    if (part == 1 && e > mid) pipe_run_batch(pipe, mid, e);
                    k = e;
                }
                if (part == 0) pipe_run_pair(pipe, op, s->ops[r][i + 1], inputs, targets, dloss);
            }
            i++;
            continue;
        }
        char name[40], cat[2] = {PIPE_OP_NAMES[op.kind], 0};
        pipe_op_name(pipe, op, name, sizeof(name));
        double t0 = wall_ms();
        pipe_run_op(pipe, op, inputs, targets, dloss);
        pipe_event(pipe, name, cat, t0);
    }
    // the loss: the last stage's, to every stage
    float loss = 0.0f;
    if (pipeline_is_last(pipe)) loss = (float)(stage_take_loss(&pipe->chunks[pipe_chunk_of(pipe->vshape, pipe->pp_size, S - 1)]) / pipe->m);
    if (pipe->pp_size > 1) {
        pipe_from_last_stage(pipe, &loss, 1);
    }
    return loss;
}

// The chain of a forward without a schedule (validation, and the sampler's positions): the virtual
// stages in order, each receiving its input from the one before and sending its output to the next,
// blocking, where the placement puts them (a neighbour on this rank, the V's turn: nothing to send, the
// output is the next chunk's input). Each rank runs its chunks in order, which is their stages' order.
// n: elements of x.
static void pipe_recv_prev(Pipeline* pipe, int chunk, floatX* x, size_t n) {
    int vs = pipe_stage(pipe, chunk), near;
    if (!pipe_local(pipe, vs - 1, &near)) comm_recv(pipe->comm, GROUP_PP, x, n, pipe_rank_of(pipe->vshape, pipe->pp_size, vs - 1), llm_ctx.stream);
}
static void pipe_send_next(Pipeline* pipe, int chunk, const floatX* x, size_t n) {
    int vs = pipe_stage(pipe, chunk), near;
    if (!pipe_local(pipe, vs + 1, &near)) comm_send(pipe->comm, GROUP_PP, x, n, pipe_rank_of(pipe->vshape, pipe->pp_size, vs + 1), llm_ctx.stream);
}

// the sampler's link to the other stages (llm/model/sampler.h): this chain, and the sampled token from
// the last stage. One stage (P = 1): none, the sampler runs everything.
static void pipe_link_recv(void* ctx, int chunk, floatX* x, size_t n) { pipe_recv_prev((Pipeline*)ctx, chunk, x, n); }
static void pipe_link_send(void* ctx, int chunk, const floatX* x, size_t n) { pipe_send_next((Pipeline*)ctx, chunk, x, n); }
static void pipe_link_from_last(void* ctx, float* v, int n) { pipe_from_last_stage((Pipeline*)ctx, v, n); }
static void pipeline_sampler_link(Pipeline* pipe, Sampler* sp) {
    SamplerLink none = {NULL, NULL, NULL, NULL}, link = {pipe, pipe_link_recv, pipe_link_send, pipe_link_from_last};
    sp->link = pipe->pp_size > 1 ? link : none;
}

// One batch's forward without gradients (validation, llm/train/hellaswag.h): inputs, targets (B, T) host. The
// forward goes through the virtual stages in order, each receiving from the one before (blocking: one chain),
// in slot 0 of each chunk; the last stage is left holding every token's loss (its slot 0's losses) and their
// mean added to its loss accumulator.
static void pipeline_eval_forward(Pipeline* pipe, const int* inputs, const int* targets) {
    int S = pipe->pp_size * pipe->vpp;
    size_t msg = pipe->R * pipe->cfg.channels;
    for (int c = 0; c < pipe->vpp; c++) {
        int vs = pipe_stage(pipe, c), near;
        Stage* st = &pipe->chunks[c];
        const floatX* in = vs == 0 ? NULL : pipe->act_recv;
        if (vs > 0 && pipe_local(pipe, vs - 1, &near)) in = stage_output(&pipe->chunks[near], 0);
        else if (vs > 0) pipe_recv_prev(pipe, c, pipe->act_recv, msg);
        stage_forward(st, 0, vs == 0 ? inputs : NULL, in, vs == S - 1 ? targets : NULL, 0.0f);
        if (vs < S - 1) pipe_send_next(pipe, c, stage_output(st, 0), msg);
    }
}

// The mean loss of one batch without gradients (validation): inputs, targets (B, T) host, through
// pipeline_eval_forward. The loss reaches the other stages as two floats (its value and its rounding error), so
// every rank has the last stage's double.
static double pipeline_eval_loss(Pipeline* pipe, const int* inputs, const int* targets) {
    int S = pipe->pp_size * pipe->vpp;
    pipeline_eval_forward(pipe, inputs, targets);
    double loss = 0.0;
    if (pipeline_is_last(pipe)) loss = stage_take_loss(&pipe->chunks[pipe_chunk_of(pipe->vshape, pipe->pp_size, S - 1)]);
    if (pipe->pp_size > 1) {
        float two[2] = {(float)loss, (float)(loss - (double)(float)loss)};
        pipe_from_last_stage(pipe, two, 2);
        loss = (double)two[0] + (double)two[1];
    }
    return loss;
}
