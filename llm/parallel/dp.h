// dp.h: data parallelism over the dp group, one mechanism behind the hooks the model calls (ParamHooks,
// llm/model/tensors.h), shaped by ZeRO's three switches (llm/parallel/zero.h, set once from --zero):
//     none          DDP (llm/parallel/ddp.h): every rank holds every parameter, gradient and optimizer
//                   state; each unit's gradients are all-reduced as soon as the backward finishes them
//     shard_optim   P_os: the optimizer states partitioned over the ranks; the gradients reduce-scattered
//     shard_grads   P_os+g: the gradients too
//     shard_params  P_os+g+p: the parameters too
// A single process is DDP over one rank: the same code, its collectives local no-ops.
//
// What each rank holds (the ZeRO paper's Figure 1 and Table 1; dp_paper_bytes, next to dp_init which
// allocates by it): each switch moves one kind of model state from "all" to "its blocks" (1/N of it).
//
// One step (llm/parallel/dp_step.h): dp_step_begin; for each micro-batch dp_micro_begin, the model's
// forward and backward (which call the hooks); dp_finish_grads waits for the last reductions;
// dp_grad_norm; dp_update (AdamW on what this rank owns, then, with partitioned optimizer states but
// replicated parameters, the all-gather of the updated parameters). With gradient accumulation only the
// last micro-batch's backward communicates (PyTorch DDP's no_sync): the earlier ones sum locally.
//
// Checkpoints are layout-independent (llm/parallel/dp_export.h): dp_export gathers the whole model's
// parameters and moments (FP32, checkpoint order) and dp_import_* keeps this rank's part.
//
// This file holds the state (DataParallel), what each rank owns (dp_owned, DpPiece), the hooks and the
// setup with its memory formula.
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../model/units.h"
#include "../ops/optimizer.h"
#include "../comm/comm.h"
#include "ddp.h"
#include "zero.h"

// A look at each unit gradient this rank finished, before its reduction (fn NULL: none). The data-parallel
// step knows nothing of what it does: --inject's gradient faults (llm/faults/inject.h) are one.
typedef struct {
    void* ctx;
    void (*before_reduce)(void* ctx, floatX* grad /*(n) device*/, size_t n);
} GradHook;

// What the policy is asked for at init (dp_init; NULL: DDP over every unit, nothing else)
typedef struct {
    int zero_level;         // 0 = DDP, 1-3 = ZeRO-1/2/3 (zero_config)
    const int* held;        // (num_units) the units this rank's pipeline stage holds (llm/parallel/pipeline.h's
                            // pipe_held_units), NULL: all
    int sequence_parallel;  // --sequence-parallel: the TP_NORM tensors' gradients are partial sums over the tp
                            // ranks' tokens (taken only with more than one tp rank)
    GradHook grad_hook;
    int embed_local;        // 1: the first and the last pipeline stage are on one rank (the V schedules): the tied
                            // embedding has one copy, no sum over GROUP_EMBED, and under ZeRO-3 two stages of that rank
                            // acquire it (llm/parallel/zero.h: zero_init's embed_twice); 0: the loop placement, two copies
} DpConfig;

typedef struct {
    ZeroConfig zero;        // the three switches (llm/parallel/zero.h)
    int size, rank;         // the gradient group (llm/comm/mesh.h: mesh.grad, dp x cp): N and this rank's place
    int esize, erank;       // expert parallelism (ep > 1): the experts units' gradient group (mesh.egrad, GROUP_EDP,
                            // the ranks holding the same experts); without it, size and rank
    int pp_size, pp_rank;   // the pipeline (mesh.pp): this rank's stage holds only its units (lay.units[u].held)
    Comm* comm;
    ParamLayout lay;        // the packed layout, units padded to ZERO_ALIGN * N values
    ZeroState z;            // shard_optim: the blocks this rank owns (llm/parallel/zero.h)
    floatX* params;         // (packed_size) replicated parameters: all of them
    floatX* params_shard;   // (shard_size) shard_params: this rank's blocks of them
    floatX* grads;          // (packed_size) replicated gradients: the whole gradient
    floatX* grads_shard;    // (shard_size) shard_grads: this rank's blocks of the averaged gradient
    AdamWState opt;         // of what this rank updates: packed_size values, or shard_size with shard_optim
    float* scalars;         // (3) device: a value to average, a sampled token to agree on, the experts' norm (ep)
    CommQueue grad_queue;   // gradient all-reduces (DDP) or reduce-scatters (shard_optim) in flight
    int last_micro;         // 1 in the step's last micro-batch: its backward communicates
    DpTrace trace;          // this step's data-parallel operations, in order (llm/parallel/ddp.h)
    int sequence_parallel;  // 1: the TP_NORM tensors' gradients are partial sums over the tp ranks' tokens,
                            // all-reduced over tp in dp_finish_grads
    ParamHooks hooks;       // what the model calls
    GradHook grad_hook;     // DpConfig's
    int embed_local;        // DpConfig's: the tied embedding's one copy (1) or two over GROUP_EMBED (0)
    int update_clears_grads;  // 1: dp_update's AdamW sets each gradient value to 0 once it has read it, and its pieces
                              // cover every value of grads (replicated states: DDP, with or without tp, pp, ep), so
                              // the next dp_step_begin has nothing to zero (dp_init; 0 turns the fusion off)
    int grads_clear;        // 1: grads holds only zeros (after dp_init, after an update that cleared it) until the
                            // next dp_step_begin: nothing writes the gradient between an update and the next step
} DataParallel;

// an experts unit split by expert parallelism: its gradients are averaged over GROUP_EDP (the ranks that hold
// the same experts), not over GROUP_DP; every other unit over GROUP_DP
static inline int dp_unit_expert(const DataParallel* dp, int u) {
    return dp->lay.ep_size > 1 && unit_kind(dp->lay.cfg, u) == UNIT_KIND_EXPERTS;
}
static inline CommGroup dp_unit_group(const DataParallel* dp, int u) { return dp_unit_expert(dp, u) ? GROUP_EDP : GROUP_DP; }
static inline int dp_unit_rank(const DataParallel* dp, int u) { return dp_unit_expert(dp, u) ? dp->erank : dp->rank; }
static inline int dp_unit_size(const DataParallel* dp, int u) { return dp_unit_expert(dp, u) ? dp->esize : dp->size; }
// The factor between unit u's gradient as reduced and the gradient of the step's loss. 1, but for an experts unit
// split by expert parallelism 1/ep: each rank's backward gives the gradient of its own loss (the mean over its tokens),
// and the average over GROUP_DP makes the step's mean; an expert's gradient on its rank sums the contributions of the
// ep ranks' tokens it received, and the average over GROUP_EDP divides by dp x cp / ep only. The missing 1/ep is
// applied where the gradient is read, the norm and AdamW (llm/parallel/dp_step.h): Megatron-Core likewise scales
// expert gradients by 1/dp (not 1/edp) before their reduction over the expert-data-parallel group.
static inline float dp_grad_factor(const DataParallel* dp, int u) { return dp_unit_expert(dp, u) ? 1.0f / (float)dp->lay.ep_size : 1.0f; }

// the unit positions [lo, hi) this rank updates, and where position pos of unit u lives in its
// optimizer state (and in the shards)
static inline void dp_owned(const DataParallel* dp, int u, size_t* lo, size_t* hi) {
    if (!dp->zero.shard_optim) { *lo = 0; *hi = dp->lay.units[u].n; return; }
    zero_owned(&dp->z, u, dp->lay.units[u].n, lo, hi);
}
static inline size_t dp_index(const DataParallel* dp, int u, size_t pos) {
    return dp->zero.shard_optim ? zero_shard_index(&dp->z, u, pos) : dp->lay.units[u].start + pos;
}
static inline size_t dp_state_size(const DataParallel* dp) { return dp->zero.shard_optim ? dp->z.shard_size : dp->lay.packed_size; }
// where the averaged gradient of position pos of unit u is: the full buffer, or the shard (shard_grads)
static inline floatX* dp_grad_at(const DataParallel* dp, int u, size_t pos) {
    return dp->zero.shard_grads ? dp->grads_shard + dp_index(dp, u, pos) : dp->grads + dp->lay.units[u].start + pos;
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
    floatX* p = dp->zero.shard_params ? zero_params_acquire(&dp->z, dp->comm, &dp->grad_queue, u, pass, dp->params_shard, llm_ctx.stream)
                                      : dp->params + dp->lay.units[u].start;
    dp_trace(&dp->trace, pass ? 'B' : 'F', u);
    return p;
}

static void dp_hook_params_done(void* ctx, int u, int pass) {
    (void)pass;
    DataParallel* dp = (DataParallel*)ctx;
    if (dp->zero.shard_params) zero_params_release(&dp->z, u);
}

static floatX* dp_hook_grads(void* ctx, int u) {
    DataParallel* dp = (DataParallel*)ctx;
    if (dp->zero.shard_grads) return zero_unit_grads(&dp->z, u, llm_ctx.stream);
    return dp->grads + dp->lay.units[u].start;
}

static void dp_hook_grads_ready(void* ctx, int u) {
    DataParallel* dp = (DataParallel*)ctx;
    if (!dp->last_micro) return;  // gradient accumulation: earlier micro-batches sum locally
    dp_trace(&dp->trace, 'R', u);
    cudaStream_t s = llm_ctx.stream;
    floatX* g = dp->grads + dp->lay.units[u].start;
    if (dp->grad_hook.before_reduce != NULL) {  // (every micro-batch's part is summed in by now)
        dp->grad_hook.before_reduce(dp->grad_hook.ctx, dp->zero.shard_grads ? dp->z.unit_grads[u] : g, dp->lay.units[u].n);
    }
    if (!dp->zero.shard_optim) {  // DDP: every rank needs the whole average
        ddp_bucket_ready(dp->comm, &dp->grad_queue, dp_unit_group(dp, u), g, dp->lay.units[u].n, u, s);
    } else if (!dp->zero.shard_grads) {  // in place: this rank's block of the full gradient becomes the average
        zero_reduce_scatter(&dp->z, dp->comm, &dp->grad_queue, u, g, g + (size_t)dp_unit_rank(dp, u) * dp->z.block[u], s);
    } else {  // from the unit's working buffer into the shard
        zero_reduce_scatter(&dp->z, dp->comm, &dp->grad_queue, u, dp->z.unit_grads[u], dp->grads_shard + dp->z.shard_off[u], s);
    }
}

// shard_params: every rank takes the token of dp rank 0, so all run the same forwards (each gathers)
static int dp_hook_agree_token(void* ctx, int token) {
    DataParallel* dp = (DataParallel*)ctx;
    if (!dp->zero.shard_params || dp->size == 1) return token;
    float f = (float)token;  // exact for token ids < 2^24
    copy_to_device(dp->scalars + 1, &f, sizeof(float));
    comm_broadcast(dp->comm, GROUP_DP, dp->scalars + 1, 1, 0, llm_ctx.stream);
    copy_to_host(&f, dp->scalars + 1, sizeof(float));
    return (int)f;
}

// ----------------------------------------------------------------------------
// setup

// The bytes of parameters + gradients + optimizer state one rank holds, by the ZeRO paper's Table 1
// (and Figure 1): for Psi parameters on N ranks, p bytes per parameter, g per gradient, K of optimizer
// state per parameter, each kind held whole (Psi) or, when its switch is on, as this rank's blocks
// (Psi / N):
//                 parameters   gradients   optimizer (m, v, master)   bytes per rank
//     DDP         Psi          Psi         Psi                        (p + g + K) Psi
//     P_os        Psi          Psi         Psi/N                      (p + g) Psi + K Psi/N
//     P_os+g      Psi          Psi/N       Psi/N                      p Psi + (g + K) Psi/N
//     P_os+g+p    Psi/N        Psi/N       Psi/N                      (p + g + K) Psi/N
// FP32 builds: p = g = 4, K = 8 (m, v): 16, 4+4+8/N, 4+12/N, 16/N. BF16 builds: p = g = 2, K = 12
// (FP32 master, m, v), the paper's mixed-precision case: 16, 2+2+12/N, 2+14/N, 16/N. dp_init allocates
// exactly these (plus the pads of the blocks), each buffer with its kind (llm/core/context.h), so the
// memory report prints what was allocated and test/test_ddp_zero.sh compares it with this formula.
static void dp_paper_terms(ZeroConfig zero, double* whole, double* parted) {
    double p = (double)sizeof(floatX), g = p, K = ADAMW_HAS_MASTER ? 12.0 : 8.0;
    *whole = (zero.shard_params ? 0 : p) + (zero.shard_grads ? 0 : g) + (zero.shard_optim ? 0 : K);  // per Psi
    *parted = (zero.shard_params ? p : 0) + (zero.shard_grads ? g : 0) + (zero.shard_optim ? K : 0);  // per Psi/N
}
static double dp_paper_bytes(ZeroConfig zero, int N, double psi) {
    double whole, parted;
    dp_paper_terms(zero, &whole, &parted);
    return whole * psi + parted * psi / N;
}

// dp_paper_bytes of this rank's layout: with expert parallelism the experts units this rank holds are partitioned over
// their own group (GROUP_EDP, dp->esize ranks), the other units over GROUP_DP: the table's "Psi/N" terms split in two,
// (dense values)/N + (experts values held)/N_edp; the "Psi" terms are the values held either way
static double dp_layout_paper_bytes(const DataParallel* dp) {
    double dense = 0.0, experts = 0.0;
    for (int u = 0; u < dp->lay.num_units; u++) {
        if (dp_unit_expert(dp, u)) experts += (double)dp->lay.units[u].n;
        else dense += (double)dp->lay.units[u].n;
    }
    if (experts == 0.0) return dp_paper_bytes(dp->zero, dp->size, dense);
    double whole, parted;
    dp_paper_terms(dp->zero, &whole, &parted);
    return whole * (dense + experts) + parted * (dense / dp->size + experts / dp->esize);
}

// The layout and this rank's storage for conf's ZeRO level (its switches, zero_config) over the gradient
// group of comm's mesh (mesh.grad), for the units of this rank's pipeline stage, of this tp rank's shards.
// Allocates the parameters, gradients and optimizer state the switches keep, dp_paper_bytes above (contents:
// zero gradients and moments; parameters set by dp_import_params). The layout (the level, the batch) was
// validated by the caller. conf NULL: DDP over every unit.
static void dp_init(DataParallel* dp, Comm* comm, GPTConfig cfg, const DpConfig* conf) {
    static const DpConfig ddp = {0, NULL, 0, {NULL, NULL}, 0};
    if (conf == NULL) conf = &ddp;
    memset(dp, 0, sizeof(*dp));
    const Mesh* mesh = &comm->mesh;
    dp->zero = zero_config(conf->zero_level);
    dp->comm = comm;
    dp->size = mesh->grad.size;
    dp->rank = mesh->grad.rank;
    dp->esize = mesh->ep.size > 1 ? mesh->egrad.size : dp->size;
    dp->erank = mesh->ep.size > 1 ? mesh->egrad.rank : dp->rank;
    dp->pp_size = mesh->pp.size;
    dp->pp_rank = mesh->pp.rank;
    dp->sequence_parallel = conf->sequence_parallel && mesh->tp.size > 1;
    dp->grad_hook = conf->grad_hook;
    dp->embed_local = conf->embed_local;
    layout_init_pp(&dp->lay, cfg, (size_t)ZERO_ALIGN * dp->size, mesh->tp.size, mesh->tp.rank, conf->held, mesh->ep.size,
                   mesh->ep.rank);
    if (dp->zero.shard_optim) zero_init(&dp->z, &dp->lay, dp->zero, dp->size, dp->rank, dp->embed_local, dp->esize, dp->erank);
    dp->z.trace = &dp->trace;
    cudaStream_t s = llm_ctx.stream;
    size_t packed = dp->lay.packed_size, shard = dp->z.shard_size;  // Psi (padded) and about Psi/N values
    // the model states, dp_paper_bytes term by term
    if (dp->zero.shard_params) dp->params_shard = (floatX*)device_malloc(shard * sizeof(floatX), MEM_PARAMS);  // p Psi/N
    else dp->params = (floatX*)device_malloc(packed * sizeof(floatX), MEM_PARAMS);                             // p Psi
    if (dp->zero.shard_grads) {                                                                                // g Psi/N
        dp->grads_shard = (floatX*)device_malloc(shard * sizeof(floatX), MEM_GRADS);
        device_memset_zero(dp->grads_shard, shard * sizeof(floatX), s);
    } else {                                                                                                   // g Psi
        dp->grads = (floatX*)device_malloc(packed * sizeof(floatX), MEM_GRADS);
        device_memset_zero(dp->grads, packed * sizeof(floatX), s);
        dp->grads_clear = 1;
    }
    // AdamW zeroes what it reads when its pieces are every value of the units (the pads between units are never
    // written: they stay zero): DDP, with or without tp, pp, ep; not with partitioned states over more than one
    // rank, which update only their blocks of a gradient they zero whole. In the CPU build this saves a pass over
    // the gradient's memory each step (the zeroing's 3-4 ms of a 16M-parameter model's ~140 ms, dev/bench_train.cu):
    // AdamW's loop has the line in cache when it stores the zero.
    size_t pieces = 0, values = 0;
    for (DpPiece p = {0, -1}; dp_next_piece(dp, &p);) pieces += p.e - p.a;
    for (int u = 0; u < dp->lay.num_units; u++) values += dp->lay.units[u].n;
    dp->update_clears_grads = pieces == values;
    adamw_state_alloc(&dp->opt, dp_state_size(dp), s);  // K Psi/N with shard_optim, else K Psi (llm/ops/optimizer.h)
    dp->scalars = (float*)device_malloc(3 * sizeof(float), MEM_WORKSPACE);
    commq_init(&dp->grad_queue, dp->lay.num_units + 1);
    dp->grad_queue.trace = &dp->trace;
    ParamHooks h = {dp, dp_hook_params, dp_hook_params_done, dp_hook_grads, dp_hook_grads_ready, dp_hook_agree_token};
    dp->hooks = h;
}

static void dp_free(DataParallel* dp) {
    device_free(dp->params);
    device_free(dp->params_shard);
    device_free(dp->grads);
    device_free(dp->grads_shard);
    device_free(dp->scalars);
    adamw_state_free(&dp->opt);
    commq_free(&dp->grad_queue);
    if (dp->zero.shard_optim) zero_free(&dp->z);
    layout_free(&dp->lay);
}
