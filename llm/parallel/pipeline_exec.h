// pipeline_exec.h: the pipeline executor's state and its parts below the step (llm/parallel/pipeline.h describes
// the whole): the Pipeline of a rank (its chunks' stages, micro-batch slots, message buffers, the schedule's list
// and communication plan), its set-up, the trace's events, the batches of messages on GROUP_PP and one op of the
// list (F, B or W of a chunk) run on its slot.
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../core/coroutine.h"
#include "../comm/comm.h"
#include "../model/stage.h"
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
    int overlap_pairs;    // DualPipeV's pairs (PipeOp.pair): 1 their F and B interleaved at the moe all-to-alls (llm/parallel/pipeline_pair.h)
    int pairs_overlapped; // this step's pairs run by the pair runner (pipe_pair_ok), the others one op after the other
    char* pair_stacks[2]; // the pair runner's coroutine stacks, F's and B's (llm/core/coroutine.h; made at the first pair)
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
    pipe_plan_pairs(pipe);  // (DualPipeV's pairs: the pair runner, llm/parallel/pipeline_pair.h)
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
    for (int k = 0; k < 2; k++) coro_stack_free(pipe->pair_stacks[k]);
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

// One op of the list: F(mb, c), B(mb, c) or W(mb, c) on chunk c's stage (llm/parallel/pipeline.h's top), with its sends
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

