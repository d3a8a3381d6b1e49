// dp_step.h: one optimizer step of data parallelism (see the top of llm/parallel/dp.h for the order of the
// calls): dp_step_begin, dp_micro_begin, dp_finish_grads (the reductions waited; the LayerNorms'
// partial gradients over tp under sequence parallelism, the tied embedding's over its two pipeline
// stages), dp_mean, dp_grad_norm (the global norm over the dp, tp and pp shards, each copy counted
// once) and dp_update (AdamW on what this rank owns, then, with partitioned optimizer states but
// replicated parameters, the all-gather of the updated parameters); dp_tied_embedding_diff checks the
// tied copies.
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../model/units.h"
#include "../ops/optimizer.h"
#include "../ops/global_norm.cuh"
#include "../comm/comm.h"
#include "dp.h"
#include "zero.h"

static void dp_step_begin(DataParallel* dp) {
    dp->trace.n = dp->trace.dropped = 0;
    // the last update left the gradient zero (update_clears_grads): nothing to do
    if (!dp->zero.shard_grads && !dp->grads_clear) device_memset_zero(dp->grads, dp->lay.packed_size * sizeof(floatX), llm_ctx.stream);
    dp->grads_clear = 0;  // the backward writes it from here on
    // shard_grads: each unit's working buffer is zeroed when the first micro-batch asks for it
}

// before each micro-batch: is it the step's last (whose backward communicates)?
static void dp_micro_begin(DataParallel* dp, int micro, int num_micro) { dp->last_micro = micro == num_micro - 1; }

// With sequence parallelism each tp rank's LayerNorm gradients cover its own tokens: the pieces of the
// TP_NORM tensors this rank owns (the same positions on every tp rank: the tp ranks' layouts have the
// same units and offsets) are summed over tp, packed into one all-reduce per step. Sums over dp and
// over tp commute, so this can follow the dp reductions.
static void dp_reduce_norm_grads_tp(DataParallel* dp) {
    cudaStream_t s = llm_ctx.stream;
    size_t total = 0, at = 0;
    for (DpPiece p = {0, -1}; dp_next_piece(dp, &p);) if (TENSORS[p.t].tp == TP_NORM) total += p.e - p.a;
    if (total == 0) return;  // this dp rank owns no piece of a LayerNorm
    floatX* buf = (floatX*)device_malloc(total * sizeof(floatX), MEM_COMM);
    for (DpPiece p = {0, -1}; dp_next_piece(dp, &p);) {
        if (TENSORS[p.t].tp != TP_NORM) continue;
        copy_device_to_device(buf + at, dp_grad_at(dp, p.u, p.a), (p.e - p.a) * sizeof(floatX), s);
        at += p.e - p.a;
    }
    comm_all_reduce(dp->comm, GROUP_TP, buf, buf, total, COMM_SUM, s);
    at = 0;
    for (DpPiece p = {0, -1}; dp_next_piece(dp, &p);) {
        if (TENSORS[p.t].tp != TP_NORM) continue;
        copy_device_to_device(dp_grad_at(dp, p.u, p.a), buf + at, (p.e - p.a) * sizeof(floatX), s);
        at += p.e - p.a;
    }
    device_free(buf);
}

// Pipeline parallelism ties the LM head of the last stage to the token embedding of the first: each
// holds a copy of the embedding unit, and each copy's gradient is the part of the loss's gradient that
// flows through it. Their sum (over GROUP_EMBED, the two stages) is the gradient of the one shared
// tensor; both copies then take the same update and stay identical. (The last stage's wpe gets a zero
// gradient of its own and the first stage's through the sum: it follows along.) This rank's owned
// positions of the unit are contiguous wherever its gradient lives. In the V placement (zbv, dualpipev) the
// first and the last stage are both on rank 0: one copy, both parts summed in it, nothing to reduce
// (dp->embed_local; the mesh's GROUP_EMBED still pairs ranks 0 and P - 1, and is then not used).
static void dp_reduce_tied_embedding(DataParallel* dp) {
    size_t lo, hi;
    dp_owned(dp, UNIT_EMBED, &lo, &hi);
    if (hi > lo) comm_all_reduce(dp->comm, GROUP_EMBED, dp_grad_at(dp, UNIT_EMBED, lo), dp_grad_at(dp, UNIT_EMBED, lo), hi - lo, COMM_SUM, llm_ctx.stream);
}

// The largest |difference| between this rank's copy of the embedding unit and the other end stage's
// (0 when they are identical, as they must be); 0 on a rank without a partner. Every rank of the dp
// group calls it (with shard_params it gathers the unit).
static double dp_tied_embedding_diff(DataParallel* dp) {
    if (comm_group_size(dp->comm, GROUP_EMBED) == 1 || dp->embed_local) return 0.0;
    size_t n = dp->lay.units[UNIT_EMBED].padded;
    cudaStream_t s = llm_ctx.stream;
    floatX* both = (floatX*)device_malloc(2 * n * sizeof(floatX), MEM_COMM);  // mine, then the partner's
    if (!dp->zero.shard_params) copy_device_to_device(both, dp->params + dp->lay.units[UNIT_EMBED].start, n * sizeof(floatX), s);
    else comm_all_gather(dp->comm, GROUP_DP, dp->params_shard + dp->z.shard_off[UNIT_EMBED], both, dp->z.block[UNIT_EMBED], s);
    int peer = 1 - comm_group_rank(dp->comm, GROUP_EMBED);
    comm_sendrecv(dp->comm, GROUP_EMBED, both, n, peer, both + n, n, peer, s);
    device_synchronize();
    float* h = (float*)mallocCheck(2 * n * sizeof(float));
    copy_to_host_float(h, both, 2 * n);
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)h[i] - (double)h[n + i]));
    free(h);
    device_free(both);
    return worst;
}

// after the last backward: every gradient reduction waited (with sequence parallelism, the LayerNorms'
// gradients summed over tp; with a pipeline, the tied embedding's over its two stages)
static void dp_finish_grads(DataParallel* dp) {
    dp_trace(&dp->trace, 'E', -1);
    while (dp->grad_queue.count > 0) zero_grads_done(&dp->z, commq_wait_oldest(dp->comm, &dp->grad_queue));
    if (dp->sequence_parallel && dp->lay.tp_size > 1) dp_reduce_norm_grads_tp(dp);
    if (comm_group_size(dp->comm, GROUP_EMBED) > 1 && !dp->embed_local) dp_reduce_tied_embedding(dp);
}

// the mean of x over the dp group
static float dp_mean(DataParallel* dp, float x) {
    if (dp->size == 1) return x;
    copy_to_device(dp->scalars, &x, sizeof(float));
    comm_all_reduce(dp->comm, GROUP_DP, dp->scalars, dp->scalars, 1, COMM_AVG, llm_ctx.stream);
    copy_to_host(&x, dp->scalars, sizeof(float));
    return x;
}

// The global L2 norm of the averaged gradient: each rank's sum of squares of the gradient it owns
// (DDP: all of it; P_os: its blocks of the full buffer; shard_grads: its shard), summed over the
// group: norm = sqrt(sum_r |g_r|^2). The pads are zero and add nothing. With tensor parallelism the
// split tensors' shards are disjoint and add up over the tp group too, while the replicated tensors
// (LayerNorms, wpe, the row-parallel biases) are the same on every tp rank: only tp rank 0 counts them.
// With a pipeline each stage adds its own units (summed over the pp group too), and the tied embedding,
// held by the first and the last stage with the same gradient, is counted once, by the first.
// The copies left out still count for finiteness (llm/faults/health.h skips a step whose norm is NaN or
// inf): a NaN or inf in one of them (a fault on that rank alone) makes the norm NaN.
static float dp_grad_norm(DataParallel* dp) {
    cudaStream_t s = llm_ctx.stream;
    AdamWState* st = &dp->opt;
    const ParamLayout* lay = &dp->lay;
    device_memset_zero(st->norm, sizeof(float), s);
    int second_embed = dp->pp_size > 1 && dp->pp_rank == dp->pp_size - 1 && !dp->embed_local;  // the last stage's copy of the embedding
    // expert parallelism: the experts' squares go to dp->scalars[2], times dp_grad_factor^2 (1/ep^2); with replicated
    // gradients this rank holds its experts' whole gradients and the other ep ranks theirs: summed over the ep group
    // (under ZeRO the sum over GROUP_DP below meets each experts block once: the ep ranks hold different experts,
    // each sharded over its edp group)
    int ep = lay->ep_size;
    int copies = 0;  // this rank holds copies counted elsewhere: their squares go to dp->scalars[0]
    if (lay->tp_size > 1 || second_embed || ep > 1) {
        device_memset_zero(dp->scalars, 3 * sizeof(float), s);
        for (DpPiece p = {0, -1}; dp_next_piece(dp, &p);) {
            int copy = (tp_replicated(p.t) && lay->tp_rank != 0) || (second_embed && p.u == UNIT_EMBED);
            copies |= copy;
            float* to = copy ? dp->scalars : (dp_unit_expert(dp, p.u) ? dp->scalars + 2 : st->norm);
            global_norm_squared(to, dp_grad_at(dp, p.u, p.a), p.e - p.a, s);
        }
    } else if (!dp->zero.shard_optim) {
        global_norm_squared(st->norm, dp->grads, lay->packed_size, s);
    } else if (!dp->zero.shard_grads) {
        for (int u = 0; u < lay->num_units; u++) {
            if (dp->z.block[u] == 0) continue;  // a unit of another pipeline stage
            global_norm_squared(st->norm, dp->grads + lay->units[u].start + (size_t)dp->rank * dp->z.block[u], dp->z.block[u], s);
        }
    } else {
        global_norm_squared(st->norm, dp->grads_shard, dp->z.shard_size, s);
    }
    if (copies) {
        float c2;
        device_synchronize();
        copy_to_host(&c2, dp->scalars, sizeof(float));
        if (!isfinite(c2)) { float nan = NAN; copy_to_device(st->norm, &nan, sizeof(float)); }
    }
    if (ep > 1) {  // norm += the experts' squares / ep^2 (and with replicated gradients summed over the ep group), on the device
        if (!dp->zero.shard_optim) comm_all_reduce(dp->comm, GROUP_EP, dp->scalars + 2, dp->scalars + 2, 1, COMM_SUM, s);
        global_norm_add_scaled(st->norm, dp->scalars + 2, (float)ep * (float)ep, s);
    }
    if (dp->zero.shard_optim) comm_all_reduce(dp->comm, GROUP_DP, st->norm, st->norm, 1, COMM_SUM, s);
    if (lay->tp_size > 1) comm_all_reduce(dp->comm, GROUP_TP, st->norm, st->norm, 1, COMM_SUM, s);
    if (dp->pp_size > 1) comm_all_reduce(dp->comm, GROUP_PP, st->norm, st->norm, 1, COMM_SUM, s);
    float norm2;
    copy_to_host(&norm2, st->norm, sizeof(float));
    return sqrtf(norm2);
}

// AdamW on what this rank owns, each tensor's piece with its own weight decay (the 2-D tensors only)
// and gradients scaled by min(1, clip / norm); then, with partitioned optimizer states but replicated
// parameters, the updated parameters all-gathered (each rank updated only its blocks of them). seed
// drives the BF16 stochastic rounding. unscale: a loss scaler's 1 / S (llm/precision/loss_scale.h),
// folded into the gradient factor; grad_norm is then the norm already unscaled. With update_clears_grads each
// gradient value is zeroed as AdamW reads it: the gradient is all zero afterwards (not to be read after this call).
static void dp_update(DataParallel* dp, const OptimConfig* oc, float lr, float grad_norm, unsigned int seed,
                      float unscale = 1.0f) {
    AdamWState* st = &dp->opt;
    float grad_scale = grad_clip_scale(oc, grad_norm) * unscale;
    st->t += 1;
    cudaStream_t s = llm_ctx.stream;
    const ParamLayout* lay = &dp->lay;
    for (DpPiece p = {0, -1}; dp_next_piece(dp, &p);) {
        int t = p.t, u = p.u;
        size_t a = p.a, e = p.e, i = dp_index(dp, u, a);  // i: in m, v, master and the shards
        floatX* param = dp->zero.shard_params ? dp->params_shard + i : dp->params + lay->units[u].start + a;
        float wd = TENSORS[t].decay ? oc->weight_decay : 0.0f, gs = grad_scale * dp_grad_factor(dp, u);
        // the rounding bits of an element depend on (step, unit, tensor, its place in the tensor's
        // slice), not on how the ranks' blocks cut the slice: every layout rounds alike
        adamw_update(param, st->master ? st->master + i : NULL, dp_grad_at(dp, u, a), st->m + i, st->v + i, e - a, lr,
                     oc->beta1, oc->beta2, st->t, oc->eps, wd, gs, seed + (unsigned)t + 16u * (unsigned)u, s,
                     a - lay->unit_offset[t], dp->update_clears_grads);
    }
    dp->grads_clear = dp->update_clears_grads;
    if (dp->zero.shard_optim && !dp->zero.shard_params) zero_gather_updated(&dp->z, dp->comm, lay, dp->params, s);
    if (dp->zero.shard_params) zero_check_released(&dp->z);
    if (dp->zero.shard_grads) pool_trim(&dp->z.pool, dp->z.pool_keep_bytes);  // beyond the working set: freed
}
