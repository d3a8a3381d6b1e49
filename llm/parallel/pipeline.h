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
// work's own); an overlapped pair's ops in their pieces and its all-to-alls from start to wait (pipeline_pair.h);
// llm/parallel/pipeline_report.h writes them out.
//
// The parts, in the order they build on each other: llm/parallel/pipeline_exec.h (the Pipeline, its messages, one
// op), llm/parallel/pipeline_pair.h (DualPipeV's F&B pairs run in turns, cut at the moe all-to-alls), this file (the
// step, and the chain of forwards without a schedule: validation and the sampler).
#pragma once
#include "../model/sampler.h"
#include "pipeline_pair.h"

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
