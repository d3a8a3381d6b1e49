// dp.h: data parallelism over the dp group, one mechanism with four policies, behind the hooks the
// model calls (ParamHooks, llm/tensors.h):
//     stage 0  DDP (llm/ddp.h): every rank holds every parameter, gradient and optimizer state; each
//              unit's gradients are all-reduced as soon as the backward finishes them
//     stage 1  ZeRO P_os, 2 P_os+g, 3 P_os+g+p (llm/zero.h): the optimizer states, then the gradients,
//              then the parameters partitioned over the ranks
// A single process is DDP over one rank: the same code, its collectives local no-ops.
//
// What each rank holds, by stage (the ZeRO paper's Figure 1 and Table 1: for Psi parameters on N
// ranks, p and g bytes per parameter and per gradient, K bytes of optimizer state per parameter):
//                 parameters        gradients         optimizer (m, v, master)   bytes per rank
//     stage 0     all (packed)      all (packed)      all                        (p + g + K) Psi
//     stage 1     all               all               its blocks                 (p + g) Psi + K Psi/N
//     stage 2     all               its blocks        its blocks                 p Psi + (g + K) Psi/N
//     stage 3     its blocks        its blocks        its blocks                 (p + g + K) Psi / N
// FP32 builds: p = g = 4, K = 8 (m, v): 16, 4+4+8/N, 4+12/N, 16/N. BF16 builds: p = g = 2, K = 12
// (FP32 master, m, v), the paper's mixed-precision case: 16, 2+2+12/N, 2+14/N, 16/N. Every buffer is
// allocated with its kind (llm/context.h), so the memory report prints what was allocated, and
// test/test_ddp_zero.sh compares that with the table.
//
// One step: dp_step_begin; for each micro-batch dp_micro_begin, the model's forward and backward
// (which call the hooks); dp_finish_grads waits for the last reductions; dp_grad_norm; dp_update
// (AdamW on what this rank owns, then under stages 1-2 the all-gather of the updated parameters).
// With gradient accumulation only the last micro-batch's backward communicates (PyTorch DDP's no_sync):
// the earlier ones sum locally.
//
// Checkpoints are layout-independent: dp_export gathers the whole model's parameters and moments (FP32,
// checkpoint order) and dp_import keeps this rank's part.
#pragma once
#include "common.h"
#include "device.h"
#include "tensors.h"
#include "optimizer.h"
#include "global_norm.cuh"
#include "comm.h"
#include "ddp.h"
#include "zero.h"

typedef struct {
    int stage, dp, rank;
    int pp, pp_rank;        // the pipeline: this rank's stage holds only its units (lay.units[u].held)
    Comm* comm;
    ParamLayout lay;        // the packed layout, units padded to ZERO_ALIGN * dp values
    ZeroState z;            // stages 1-3: the blocks this rank owns (llm/zero.h)
    floatX* params;         // (packed_size) stages 0-2: all parameters
    floatX* params_shard;   // (shard_size) stage 3: this rank's blocks of them
    floatX* grads;          // (packed_size) stages 0-1: the whole gradient
    floatX* grads_shard;    // (shard_size) stages 2-3: this rank's blocks of the averaged gradient
    AdamWState opt;         // of what this rank updates: packed_size values (stage 0) or shard_size
    float* scalars;         // (2) device: a value to average, a sampled token to agree on
    CommQueue grad_queue;   // gradient all-reduces (stage 0) or reduce-scatters (1-3) in flight
    int last_micro;         // 1 in the step's last micro-batch: its backward communicates
    DpTrace trace;          // this step's data-parallel operations, in order (llm/ddp.h)
    int sequence_parallel;  // 1: the TP_NORM tensors' gradients are partial sums over the tp ranks' tokens,
                            // all-reduced over tp in dp_finish_grads (set by the caller after dp_init)
    ParamHooks hooks;       // what the model calls
    int inject_nan;         // --inject nan (llm/inject.h): 1 puts a NaN into the next unit gradient this rank
                            // finishes, before its reduction (then back to 0)
} DataParallel;

// the unit positions [lo, hi) this rank updates, and where position pos of unit u lives in its
// optimizer state (and in the shards)
static inline void dp_owned(const DataParallel* dp, int u, size_t* lo, size_t* hi) {
    if (dp->stage == 0) { *lo = 0; *hi = dp->lay.units[u].n; return; }
    zero_owned(&dp->z, u, dp->lay.units[u].n, lo, hi);
}
static inline size_t dp_index(const DataParallel* dp, int u, size_t pos) {
    return dp->stage == 0 ? dp->lay.units[u].start + pos : zero_shard_index(&dp->z, u, pos);
}
static inline size_t dp_state_size(const DataParallel* dp) { return dp->stage == 0 ? dp->lay.packed_size : dp->z.shard_size; }
// where the averaged gradient of position pos of unit u is: the full buffer (stages 0-1) or the shard
static inline floatX* dp_grad_at(const DataParallel* dp, int u, size_t pos) {
    return dp->stage <= 1 ? dp->grads + dp->lay.units[u].start + pos : dp->grads_shard + dp_index(dp, u, pos);
}

// The pieces this rank owns, one per (unit, tensor): positions [a, e) of unit u, all in tensor t.
// for (DpPiece p = {0, -1}; dp_next_piece(dp, &p);) visits them unit by unit, tensors in table order.
typedef struct {
    int u, j;     // the cursor: unit, and the index of the tensor among the unit's
    int t;        // the tensor
    size_t a, e;  // the piece, positions within the unit
} DpPiece;

static int dp_next_piece(const DataParallel* dp, DpPiece* p) {
    const ParamLayout* lay = &dp->lay;
    int ts[NUM_TENSORS];
    for (; p->u < lay->num_units; p->u++, p->j = -1) {
        size_t lo, hi;
        dp_owned(dp, p->u, &lo, &hi);
        int k = unit_tensors(lay, p->u, ts);
        while (++p->j < k) {
            int t = ts[p->j];
            size_t a = lay->unit_offset[t], e = a + lay->layer_size[t];
            if (a < lo) a = lo;
            if (e > hi) e = hi;
            if (a < e) { p->t = t; p->a = a; p->e = e; return 1; }
        }
    }
    return 0;
}

// ----------------------------------------------------------------------------
// the hooks

static floatX* dp_hook_params(void* ctx, int u, int pass) {
    DataParallel* dp = (DataParallel*)ctx;
    floatX* p = dp->stage < 3 ? dp->params + dp->lay.units[u].start
                              : zero_params_acquire(&dp->z, dp->comm, &dp->grad_queue, u, pass, dp->params_shard, llm_ctx.stream);
    dp_trace(&dp->trace, pass ? 'B' : 'F', u);
    return p;
}

static void dp_hook_params_done(void* ctx, int u, int pass) {
    (void)pass;
    DataParallel* dp = (DataParallel*)ctx;
    if (dp->stage == 3) zero_params_release(&dp->z, u);
}

static floatX* dp_hook_grads(void* ctx, int u) {
    DataParallel* dp = (DataParallel*)ctx;
    if (dp->stage <= 1) return dp->grads + dp->lay.units[u].start;
    return zero_unit_grads(&dp->z, u, llm_ctx.stream);
}

static void dp_hook_grads_ready(void* ctx, int u) {
    DataParallel* dp = (DataParallel*)ctx;
    if (!dp->last_micro) return;  // gradient accumulation: earlier micro-batches sum locally
    dp_trace(&dp->trace, 'R', u);
    cudaStream_t s = llm_ctx.stream;
    floatX* g = dp->grads + dp->lay.units[u].start;
    if (dp->inject_nan) {  // the fault: this rank's gradient of unit u gets a NaN before the reduction
        floatX nan_x = float_to_floatX(NAN);
        device_synchronize();
        copy_to_device(dp->stage <= 1 ? g : dp->z.unit_grads[u], &nan_x, sizeof(floatX));
        dp->inject_nan = 0;
    }
    if (dp->stage == 0) {
        ddp_bucket_ready(dp->comm, &dp->grad_queue, g, dp->lay.units[u].n, u, s);
    } else if (dp->stage == 1) {  // in place: this rank's block of the full gradient becomes the average
        zero_reduce_scatter(&dp->z, dp->comm, &dp->grad_queue, u, g, g + (size_t)dp->rank * dp->z.block[u], s);
    } else {  // from the unit's working buffer into the shard
        zero_reduce_scatter(&dp->z, dp->comm, &dp->grad_queue, u, dp->z.unit_grads[u], dp->grads_shard + dp->z.shard_off[u], s);
    }
}

// stage 3: every rank takes the token of dp rank 0, so all run the same forwards (each gathers)
static int dp_hook_agree_token(void* ctx, int token) {
    DataParallel* dp = (DataParallel*)ctx;
    if (dp->stage < 3 || dp->dp == 1) return token;
    float f = (float)token;  // exact for token ids < 2^24
    copy_to_device(dp->scalars + 1, &f, sizeof(float));
    comm_broadcast(dp->comm, GROUP_DP, dp->scalars + 1, 1, 0, llm_ctx.stream);
    copy_to_host(&f, dp->scalars + 1, sizeof(float));
    return (int)f;
}

// ----------------------------------------------------------------------------
// setup

// The layout and this rank's storage for ZeRO stage `stage` (0 = DDP) over the dp group of comm.
// Allocates the parameters, gradients and optimizer state the stage keeps (contents: zero gradients
// and moments; parameters set by dp_import_params). The layout (the stage, the batch) was validated
// by the caller.
// held: the units this rank's pipeline stage holds (NULL: all; llm/pipeline.h's pipe_held_units).
static void dp_init_pp(DataParallel* dp, Comm* comm, GPTConfig cfg, int stage, const int* held) {
    memset(dp, 0, sizeof(*dp));
    dp->stage = stage;
    dp->comm = comm;
    dp->dp = comm_group_size(comm, GROUP_DP);
    dp->rank = comm_group_rank(comm, GROUP_DP);
    dp->pp = comm_group_size(comm, GROUP_PP);
    dp->pp_rank = comm_group_rank(comm, GROUP_PP);
    layout_init_pp(&dp->lay, cfg, (size_t)ZERO_ALIGN * dp->dp, comm_group_size(comm, GROUP_TP), comm_group_rank(comm, GROUP_TP),
                   held);
    if (stage > 0) zero_init(&dp->z, &dp->lay, stage, dp->dp, dp->rank);
    dp->z.trace = &dp->trace;
    cudaStream_t s = llm_ctx.stream;
    size_t packed = dp->lay.packed_size, shard = dp->z.shard_size;
    if (stage < 3) dp->params = (floatX*)device_malloc(packed * sizeof(floatX), MEM_PARAMS);
    else dp->params_shard = (floatX*)device_malloc(shard * sizeof(floatX), MEM_PARAMS);
    if (stage <= 1) {
        dp->grads = (floatX*)device_malloc(packed * sizeof(floatX), MEM_GRADS);
        device_memset_zero(dp->grads, packed * sizeof(floatX), s);
    } else {
        dp->grads_shard = (floatX*)device_malloc(shard * sizeof(floatX), MEM_GRADS);
        device_memset_zero(dp->grads_shard, shard * sizeof(floatX), s);
    }
    adamw_state_alloc(&dp->opt, dp_state_size(dp), s);
    dp->scalars = (float*)device_malloc(2 * sizeof(float), MEM_WORKSPACE);
    commq_init(&dp->grad_queue, dp->lay.num_units + 1);
    dp->grad_queue.trace = &dp->trace;
    ParamHooks h = {dp, dp_hook_params, dp_hook_params_done, dp_hook_grads, dp_hook_grads_ready, dp_hook_agree_token};
    dp->hooks = h;
}

static void dp_init(DataParallel* dp, Comm* comm, GPTConfig cfg, int stage) { dp_init_pp(dp, comm, cfg, stage, NULL); }

static void dp_free(DataParallel* dp) {
    device_free(dp->params);
    device_free(dp->params_shard);
    device_free(dp->grads);
    device_free(dp->grads_shard);
    device_free(dp->scalars);
    adamw_state_free(&dp->opt);
    commq_free(&dp->grad_queue);
    if (dp->stage > 0) zero_free(&dp->z);
    layout_free(&dp->lay);
}

// ----------------------------------------------------------------------------
// the whole model's FP32 host arrays (checkpoint order) in and out of this rank's storage

// this rank's part of a packed host array: all of it (stage 0), or its blocks (its shard)
static void dp_mine_from_packed(const DataParallel* dp, const float* packed, float* mine) {
    if (dp->stage == 0) { memcpy(mine, packed, dp->lay.packed_size * sizeof(float)); return; }
    for (int u = 0; u < dp->lay.num_units; u++) {
        memcpy(mine + dp->z.shard_off[u], packed + dp->lay.units[u].start + (size_t)dp->rank * dp->z.block[u],
               dp->z.block[u] * sizeof(float));
    }
}

// the whole packed array from every rank's part (src: device, floatX or float): every rank of the
// group must call it (one all-gather per unit under stages 1-3)
static void dp_gather_to_packed(DataParallel* dp, const void* src, int is_floatX, float* packed) {
    size_t esz = is_floatX ? sizeof(floatX) : sizeof(float);
    if (dp->stage == 0) {
        if (is_floatX) copy_to_host_float(packed, (const floatX*)src, dp->lay.packed_size);
        else copy_to_host(packed, src, dp->lay.packed_size * sizeof(float));
        return;
    }
    cudaStream_t s = llm_ctx.stream;
    for (int u = 0; u < dp->lay.num_units; u++) {
        size_t padded = dp->lay.units[u].padded, block = dp->z.block[u];
        if (padded == 0) continue;  // a unit of another pipeline stage
        void* tmp = device_malloc(padded * esz, MEM_COMM);
        const char* mine = (const char*)src + dp->z.shard_off[u] * esz;
        if (is_floatX) comm_all_gather(dp->comm, GROUP_DP, (const floatX*)mine, (floatX*)tmp, block, s);
        else comm_all_gather(dp->comm, GROUP_DP, (const float*)mine, (float*)tmp, block, s);
        device_synchronize();
        if (is_floatX) copy_to_host_float(packed + dp->lay.units[u].start, (const floatX*)tmp, padded);
        else copy_to_host(packed + dp->lay.units[u].start, tmp, padded * sizeof(float));
        device_free(tmp);
    }
}

// Sets the parameters (and the FP32 master weights of BF16 builds) from params (Psi FP32, host,
// checkpoint order). exact: 1 when params are the FP32 master values themselves (a state file), 0
// for a checkpoint or a fresh init (the master then starts as the parameters rounded to floatX).
static void dp_import_params(DataParallel* dp, const float* params, int exact) {
    size_t packed_n = dp->lay.packed_size, mine_n = dp_state_size(dp);
    float* packed = (float*)mallocCheck(packed_n * sizeof(float));
    float* mine = (float*)mallocCheck(mine_n * sizeof(float));
    layout_to_packed(&dp->lay, params, packed);
    if (dp->stage < 3) copy_floats_to_device(dp->params, packed, packed_n);
    dp_mine_from_packed(dp, packed, mine);
    if (dp->stage == 3) copy_floats_to_device(dp->params_shard, mine, mine_n);
    if (dp->opt.master) {
        if (!exact) for (size_t i = 0; i < mine_n; i++) mine[i] = (float)(floatX)mine[i];
        copy_to_device(dp->opt.master, mine, mine_n * sizeof(float));
    }
    free(packed);
    free(mine);
}

// AdamW's moments m, v (Psi FP32 each, host, checkpoint order) into this rank's part
static void dp_import_moments(DataParallel* dp, const float* m, const float* v) {
    float* packed = (float*)mallocCheck(dp->lay.packed_size * sizeof(float));
    float* mine = (float*)mallocCheck(dp_state_size(dp) * sizeof(float));
    const float* src[2] = {m, v};
    float* dst[2] = {dp->opt.m, dp->opt.v};
    for (int k = 0; k < 2; k++) {
        layout_to_packed(&dp->lay, src[k], packed);
        dp_mine_from_packed(dp, packed, mine);
        copy_to_device(dst[k], mine, dp_state_size(dp) * sizeof(float));
    }
    free(packed);
    free(mine);
}

// packed (this tp rank's shards, host FP32) into the whole model in checkpoint order: with tp > 1 the
// tp group all-gathers the packed shards (every rank of the tp group must call it) and each rank's
// shards go to their places (the replicated tensors are the same on every tp rank)
static void dp_pp_to_first_stage(DataParallel* dp, float* ckpt);
static void dp_packed_to_checkpoint(DataParallel* dp, const float* packed, float* ckpt) {
    const ParamLayout* lay = &dp->lay;
    if (lay->tp == 1) {
        layout_to_checkpoint(lay, packed, ckpt);
        dp_pp_to_first_stage(dp, ckpt);
        return;
    }
    size_t n = lay->packed_size;
    float* dev = (float*)device_malloc((size_t)(lay->tp + 1) * n * sizeof(float), MEM_COMM);
    float* all = (float*)mallocCheck((size_t)lay->tp * n * sizeof(float));
    copy_to_device(dev + (size_t)lay->tp * n, packed, n * sizeof(float));
    comm_all_gather(dp->comm, GROUP_TP, dev + (size_t)lay->tp * n, dev, n, llm_ctx.stream);
    device_synchronize();
    copy_to_host(all, dev, (size_t)lay->tp * n * sizeof(float));
    for (int r = 0; r < lay->tp; r++) layout_to_checkpoint_rank(lay, r, all + (size_t)r * n, ckpt);
    free(all);
    device_free(dev);
    dp_pp_to_first_stage(dp, ckpt);
}

// Pipeline parallelism: every later stage sends its units (in checkpoint order: the whole Psi array,
// followed by its held flags, U values) to the first stage of its pp group, which copies them into
// ckpt, so the first stage (and world rank 0, which writes checkpoints) ends with the whole model.
// The tied embedding comes from the first stage (the last stage's copy is the same).
static void dp_pp_to_first_stage(DataParallel* dp, float* ckpt) {
    if (dp->pp == 1) return;
    const ParamLayout* lay = &dp->lay;
    size_t n = lay->num_parameters, U = (size_t)lay->num_units;
    float* dev = (float*)device_malloc((n + U) * sizeof(float), MEM_COMM);
    float* host = (float*)mallocCheck((n + U) * sizeof(float));
    cudaStream_t s = llm_ctx.stream;
    if (dp->pp_rank > 0) {
        memcpy(host, ckpt, n * sizeof(float));
        for (size_t u = 0; u < U; u++) host[n + u] = (float)lay->units[u].held;
        copy_to_device(dev, host, (n + U) * sizeof(float));
        comm_send(dp->comm, GROUP_PP, dev, n + U, 0, s);
    } else {
        for (int q = 1; q < dp->pp; q++) {
            comm_recv(dp->comm, GROUP_PP, dev, n + U, q, s);
            device_synchronize();
            copy_to_host(host, dev, (n + U) * sizeof(float));
            int ts[NUM_TENSORS];
            for (int u = 1; u < (int)U; u++) {  // unit 0, the embedding, is the first stage's own
                if (host[n + u] == 0.0f) continue;
                int k = unit_tensors(lay, u, ts);
                for (int i = 0; i < k; i++) {
                    size_t at = unit_tensor_ckpt_offset(lay, u, ts[i]);
                    memcpy(ckpt + at, host + at, tensor_layer_size(lay->cfg, ts[i]) * sizeof(float));
                }
            }
        }
    }
    device_synchronize();
    free(host);
    device_free(dev);
}

// The parameters the model computes with, as they are (BF16 builds: the master rounded stochastically
// at the last update), FP32 on the host in checkpoint order (Psi). Every rank of the dp and tp groups
// must call it.
static void dp_export_floatx(DataParallel* dp, float* params) {
    float* packed = (float*)mallocCheck(dp->lay.packed_size * sizeof(float));
    if (dp->stage < 3) copy_to_host_float(packed, dp->params, dp->lay.packed_size);  // every rank has them all
    else dp_gather_to_packed(dp, dp->params_shard, 1, packed);
    dp_packed_to_checkpoint(dp, packed, params);
    free(packed);
}

// The whole model's parameters (the FP32 master weights in BF16 builds, else those of dp_export_floatx)
// and moments, FP32 on the host in checkpoint order (Psi each; m and v may be NULL). Every rank of the
// dp and tp groups must call it.
static void dp_export(DataParallel* dp, float* params, float* m, float* v) {
    float* packed = (float*)mallocCheck(dp->lay.packed_size * sizeof(float));
    if (dp->opt.master) {
        dp_gather_to_packed(dp, dp->opt.master, 0, packed);
        dp_packed_to_checkpoint(dp, packed, params);
    } else {
        dp_export_floatx(dp, params);
    }
    float* dst[2] = {m, v};
    const float* src[2] = {dp->opt.m, dp->opt.v};
    for (int k = 0; k < 2; k++) {
        if (dst[k] == NULL) continue;
        dp_gather_to_packed(dp, src[k], 0, packed);
        dp_packed_to_checkpoint(dp, packed, dst[k]);
    }
    free(packed);
}

// sets the parameters the model computes with to params (Psi FP32 values that floatX holds exactly,
// checkpoint order), leaving the master weights as they are (a resumed BF16 run)
static void dp_import_floatx(DataParallel* dp, const float* params) {
    float* packed = (float*)mallocCheck(dp->lay.packed_size * sizeof(float));
    layout_to_packed(&dp->lay, params, packed);
    if (dp->stage < 3) {
        copy_floats_to_device(dp->params, packed, dp->lay.packed_size);
    } else {
        float* mine = (float*)mallocCheck(dp->z.shard_size * sizeof(float));
        dp_mine_from_packed(dp, packed, mine);
        copy_floats_to_device(dp->params_shard, mine, dp->z.shard_size);
        free(mine);
    }
    free(packed);
}

// ----------------------------------------------------------------------------
// one optimizer step

static void dp_step_begin(DataParallel* dp) {
    dp->trace.n = dp->trace.dropped = 0;
    if (dp->stage <= 1) device_memset_zero(dp->grads, dp->lay.packed_size * sizeof(floatX), llm_ctx.stream);
    // stages 2-3: each unit's working buffer is zeroed when the first micro-batch asks for it
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
// positions of the unit are contiguous wherever its gradient lives.
static void dp_reduce_tied_embedding(DataParallel* dp) {
    size_t lo, hi;
    dp_owned(dp, UNIT_EMBED, &lo, &hi);
    if (hi > lo) comm_all_reduce(dp->comm, GROUP_EMBED, dp_grad_at(dp, UNIT_EMBED, lo), dp_grad_at(dp, UNIT_EMBED, lo), hi - lo, COMM_SUM, llm_ctx.stream);
}

// The largest |difference| between this rank's copy of the embedding unit and the other end stage's
// (0 when they are identical, as they must be); 0 on a rank without a partner. Every rank of the dp
// group calls it (ZeRO-3 gathers the unit).
static double dp_tied_embedding_diff(DataParallel* dp) {
    if (comm_group_size(dp->comm, GROUP_EMBED) == 1) return 0.0;
    size_t n = dp->lay.units[UNIT_EMBED].padded;
    cudaStream_t s = llm_ctx.stream;
    floatX* both = (floatX*)device_malloc(2 * n * sizeof(floatX), MEM_COMM);  // mine, then the partner's
    if (dp->stage < 3) copy_device_to_device(both, dp->params + dp->lay.units[UNIT_EMBED].start, n * sizeof(floatX), s);
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
    if (dp->sequence_parallel && dp->lay.tp > 1) dp_reduce_norm_grads_tp(dp);
    if (comm_group_size(dp->comm, GROUP_EMBED) > 1) dp_reduce_tied_embedding(dp);
}

// the mean of x over the dp group
static float dp_mean(DataParallel* dp, float x) {
    if (dp->dp == 1) return x;
    copy_to_device(dp->scalars, &x, sizeof(float));
    comm_all_reduce(dp->comm, GROUP_DP, dp->scalars, dp->scalars, 1, COMM_AVG, llm_ctx.stream);
    copy_to_host(&x, dp->scalars, sizeof(float));
    return x;
}

// The global L2 norm of the averaged gradient: each rank's sum of squares of the gradient it owns
// (stage 0: all of it; stage 1: its blocks of the full buffer; stages 2-3: its shard), summed over the
// group: norm = sqrt(sum_r |g_r|^2). The pads are zero and add nothing. With tensor parallelism the
// split tensors' shards are disjoint and add up over the tp group too, while the replicated tensors
// (LayerNorms, wpe, the row-parallel biases) are the same on every tp rank: only tp rank 0 counts them.
// With a pipeline each stage adds its own units (summed over the pp group too), and the tied embedding,
// held by the first and the last stage with the same gradient, is counted once, by the first.
// The copies left out still count for finiteness (llm/health.h skips a step whose norm is NaN or
// inf): a NaN or inf in one of them (a fault on that rank alone) makes the norm NaN.
static float dp_grad_norm(DataParallel* dp) {
    cudaStream_t s = llm_ctx.stream;
    AdamWState* st = &dp->opt;
    const ParamLayout* lay = &dp->lay;
    device_memset_zero(st->norm, sizeof(float), s);
    int second_embed = dp->pp > 1 && dp->pp_rank == dp->pp - 1;  // the last stage's copy of the embedding
    int copies = 0;  // this rank holds copies counted elsewhere: their squares go to dp->scalars[0]
    if (lay->tp > 1 || second_embed) {
        device_memset_zero(dp->scalars, sizeof(float), s);
        for (DpPiece p = {0, -1}; dp_next_piece(dp, &p);) {
            int copy = (tp_replicated(p.t) && lay->tp_rank != 0) || (second_embed && p.u == UNIT_EMBED);
            copies |= copy;
            global_norm_squared(copy ? dp->scalars : st->norm, dp_grad_at(dp, p.u, p.a), p.e - p.a, s);
        }
    } else if (dp->stage == 0) {
        global_norm_squared(st->norm, dp->grads, lay->packed_size, s);
    } else if (dp->stage == 1) {
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
    if (dp->stage > 0) comm_all_reduce(dp->comm, GROUP_DP, st->norm, st->norm, 1, COMM_SUM, s);
    if (lay->tp > 1) comm_all_reduce(dp->comm, GROUP_TP, st->norm, st->norm, 1, COMM_SUM, s);
    if (dp->pp > 1) comm_all_reduce(dp->comm, GROUP_PP, st->norm, st->norm, 1, COMM_SUM, s);
    float norm2;
    copy_to_host(&norm2, st->norm, sizeof(float));
    return sqrtf(norm2);
}

// AdamW on what this rank owns, each tensor's piece with its own weight decay (the 2-D tensors only)
// and gradients scaled by min(1, clip / norm); then, under stages 1-2, the updated parameters
// all-gathered. seed drives the BF16 stochastic rounding. unscale: a loss scaler's 1 / S
// (llm/loss_scale.h), folded into the gradient factor; grad_norm is then the norm already unscaled.
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
        floatX* param = dp->stage == 3 ? dp->params_shard + i : dp->params + lay->units[u].start + a;
        float wd = TENSORS[t].decay ? oc->weight_decay : 0.0f;
        // the rounding bits of an element depend on (step, unit, tensor, its place in the tensor's
        // slice), not on how the ranks' blocks cut the slice: every layout rounds alike
        adamw_update(param, st->master ? st->master + i : NULL, dp_grad_at(dp, u, a), st->m + i, st->v + i, e - a, lr,
                     oc->beta1, oc->beta2, st->t, oc->eps, wd, grad_scale, seed + (unsigned)t + 16u * (unsigned)u, s,
                     a - lay->unit_offset[t]);
    }
    if (dp->stage == 1 || dp->stage == 2) zero_gather_updated(&dp->z, dp->comm, lay, dp->params, s);
    if (dp->stage == 3) zero_check_released(&dp->z);
    if (dp->stage >= 2) pool_trim(&dp->z.pool, dp->z.pool_keep_bytes);  // beyond the working set: freed
}

// the paper's bytes of parameters + gradients + optimizer state per rank (Table 1 / Figure 1)
static double dp_paper_bytes(int stage, int N, double psi) {
    double p = (double)sizeof(floatX), g = p, K = ADAMW_HAS_MASTER ? 12.0 : 8.0;
    switch (stage) {
        case 0: return (p + g + K) * psi;
        case 1: return (p + g) * psi + K * psi / N;
        case 2: return p * psi + (g + K) * psi / N;
        default: return (p + g + K) * psi / N;
    }
}
