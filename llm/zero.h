// zero.h: data parallelism over the dp group with the model states partitioned as in ZeRO
// (Rajbhandari et al. 2019, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"):
//     stage 0  DDP: every rank holds everything; gradients all-reduced (llm/ddp.h)
//     stage 1  P_os      (sec. 5.1): the optimizer states (AdamW m, v; the FP32 master weights in BF16
//              builds) are partitioned: rank r keeps and updates only its 1/N of them, then an
//              all-gather of the updated parameters gives every rank the whole model again
//     stage 2  P_os+g    (sec. 5.2): the gradients too: each unit's gradients are reduce-scattered,
//              rank r keeps only the averaged block it updates
//     stage 3  P_os+g+p  (sec. 5.3): the parameters too: a unit's parameters are all-gathered just
//              before its forward, and again before its backward, and dropped after use
//
// Memory per rank (the paper's Figure 1 and Table 1), for Psi parameters on N ranks, with p and g
// bytes per parameter and per gradient and K bytes of optimizer state per parameter:
//     stage 0  (p + g + K) Psi        stage 1  (p + g) Psi + K Psi / N
//     stage 2  p Psi + (g + K) Psi/N  stage 3  (p + g + K) Psi / N
// FP32 builds: p = g = 4, K = 8 (m, v): 16 bytes per parameter, 4+4+8/N, 4+12/N, 16/N. BF16 builds:
// p = g = 2, K = 12 (FP32 master, m, v), the paper's mixed-precision case: 2+2+12/N, 2+14/N, 16/N.
// zero_memory() measures what this rank holds and zero_paper_bytes() gives the formula;
// test/test_ddp_zero.sh checks   formula <= measured <= formula + (p+g+K) * (padding of the units).
//
// Communication per step (sec. 7, with comm.h's ring model: all-reduce sends 2 (N-1)/N S bytes,
// reduce-scatter and all-gather (N-1)/N S, for S bytes of gradients or parameters):
//     DDP      all-reduce of the gradients                       2 (N-1)/N Psi
//     stage 1  reduce-scatter of the gradients (in place: each rank keeps the full gradient buffer,
//              but only its block is reduced) + all-gather of the parameters   2 (N-1)/N Psi = DDP
//     stage 2  reduce-scatter of the gradients + all-gather of the parameters  2 (N-1)/N Psi = DDP
//              (sec. 7.2.1: P_os and P_os+g add no communication to DDP)
//     stage 3  all-gather in the forward + all-gather in the backward + reduce-scatter
//              3 (N-1)/N Psi = 1.5 x DDP (sec. 7.2.2)
// Each rank's comm.h ledger records this; test/test_ddp_zero.sh checks the bytes per step.
//
// Units, one mechanism for every stage. The parameters are grouped in units (llm/gpt.h): unit 0
// "embed" (wte, wpe), unit 1+l the 12 tensors of layer l (12 C^2 + 13 C values), unit L+1 "final"
// (lnfw, lnfb). A unit's packed vector is its tensors back to back in checkpoint order, padded with
// zeros to a multiple of ZERO_ALIGN*N values (so every unit and every block starts 16-byte aligned,
// as the 128-bit kernels need). Rank r owns the r-th of the N equal blocks of every unit; its shard
// is the concatenation of its blocks of all units (~Psi/N values). The padding is zero and stays zero
// (AdamW runs on the tensors' values only). Weight decay of an element follows the tensor it belongs
// to (2-D tensors only). Per stage, what lives where:
//     parameters  stages 0-2: the full checkpoint-order buffer of the model; stage 3: the shard, and
//                 unit working buffers gathered on demand (next unit prefetched)
//     gradients   stages 0-1: one buffer in the packed layout of all units (each unit is a DDP bucket,
//                 all-reduced in place); stages 2-3: the shard, plus a unit-sized working buffer per
//                 unit while its backward runs (reduce-scattered and released when the unit is done).
//                 So the full gradient never exists in stages 2-3 with one micro-step; with gradient
//                 accumulation each unit's working buffer lives from the first micro-step to the
//                 reduce-scatter in the last one (the sum is local, as in DDP, so 2-rank stage 2 is
//                 bit-identical to DDP), and the pool frees them after the step.
//     optimizer   stage 0: m, v (master) for the whole model in the packed layout; stages 1-3: the shard
// The working buffers come from a small pool (BufPool): acquired, released, reused; between steps it
// keeps at most the steady-state working set. Its peak is reported as the transient workspace.
//
// A single process (dp = 1, stage 0) does not use any of this: the model keeps its full buffers and
// no hooks, exactly the one-process trainer. Checkpoints stay layout-independent: zero_export
// gathers the full parameters and moments (checkpoint order, FP32) and zero_import keeps this rank's
// part of them.
#pragma once
#include "common.h"
#include "device.h"
#include "gpt.h"
#include "optimizer.h"
#include "comm.h"
#include "ddp.h"

#define ZERO_ALIGN 8             // values: 16 bytes of BF16, 32 of FP32
#define ZERO_MAX_INFLIGHT 2      // gradient reduce-scatters in flight before the oldest is waited
#define ZERO_MAX_PIECES 12

// ----------------------------------------------------------------------------
// the layout: units, their pieces, their blocks

typedef struct {
    int tensor;        // which of the 16 parameter tensors (PARAMETER_NAMES)
    size_t full_off;   // first value in the checkpoint-order buffer
    size_t unit_off;   // first value in the unit's packed vector
    size_t n;          // values
} UnitPiece;

typedef struct {
    int num_pieces;                       // 2 (embed, final) or 12 (a layer)
    UnitPiece pieces[ZERO_MAX_PIECES];    // in checkpoint order
    size_t n;                             // values of the unit, the sum of its pieces
    size_t padded;                        // n rounded up to a multiple of ZERO_ALIGN * dp
    size_t block;                         // padded / dp: what each rank owns
    size_t packed_off;                    // start of the unit in the packed layout of all units
    size_t shard_off;                     // start of this rank's block in its shard
} Unit;

// a range of one unit that lies in one tensor
typedef struct {
    int tensor;
    size_t full_off;   // in the checkpoint-order buffer
    size_t unit_pos;   // in the unit's packed vector
    size_t n;
} Segment;

// the pieces of unit u cut to the unit positions [lo, hi); returns the number of segments
static int unit_segments(const Unit* u, size_t lo, size_t hi, Segment* out /*(ZERO_MAX_PIECES)*/) {
    int k = 0;
    for (int i = 0; i < u->num_pieces; i++) {
        const UnitPiece* p = &u->pieces[i];
        size_t a = lo > p->unit_off ? lo : p->unit_off;
        size_t e = hi < p->unit_off + p->n ? hi : p->unit_off + p->n;
        if (a >= e) continue;
        out[k].tensor = p->tensor;
        out[k].full_off = p->full_off + (a - p->unit_off);
        out[k].unit_pos = a;
        out[k].n = e - a;
        k++;
    }
    return k;
}

// ----------------------------------------------------------------------------
// the pool of unit working buffers

typedef struct {
    floatX* ptr;
    size_t cap;  // values
    int in_use;
} PoolBuf;

typedef struct {
    PoolBuf* bufs;
    int num, cap;
    size_t bytes;       // allocated now
    size_t peak_bytes;  // the most ever allocated at once
} BufPool;

// a buffer of at least n values: the smallest free one that fits, else a new one
static floatX* pool_get(BufPool* pl, size_t n) {
    int best = -1;
    for (int i = 0; i < pl->num; i++) {
        if (!pl->bufs[i].in_use && pl->bufs[i].cap >= n && (best < 0 || pl->bufs[i].cap < pl->bufs[best].cap)) best = i;
    }
    if (best < 0) {
        if (pl->num == pl->cap) {
            pl->cap = pl->cap ? 2 * pl->cap : 16;
            PoolBuf* nb = (PoolBuf*)mallocCheck((size_t)pl->cap * sizeof(PoolBuf));
            if (pl->num) memcpy(nb, pl->bufs, (size_t)pl->num * sizeof(PoolBuf));
            free(pl->bufs);
            pl->bufs = nb;
        }
        best = pl->num++;
        pl->bufs[best].ptr = (floatX*)device_malloc(n * sizeof(floatX));
        pl->bufs[best].cap = n;
        pl->bytes += n * sizeof(floatX);
        if (pl->bytes > pl->peak_bytes) pl->peak_bytes = pl->bytes;
    }
    pl->bufs[best].in_use = 1;
    return pl->bufs[best].ptr;
}

static void pool_put(BufPool* pl, floatX* p) {
    for (int i = 0; i < pl->num; i++) {
        if (pl->bufs[i].ptr == p) {
            if (!pl->bufs[i].in_use) fatal("pool_put: buffer %p released twice", (void*)p);
            pl->bufs[i].in_use = 0;
            return;
        }
    }
    fatal("pool_put: %p is not a pool buffer", (void*)p);
}

// frees free buffers, largest first kept, until at most keep_bytes of free buffers remain
static void pool_trim(BufPool* pl, size_t keep_bytes) {
    size_t kept = 0;
    for (;;) {  // visit free buffers from the largest down
        int pick = -1;
        for (int i = 0; i < pl->num; i++) {
            if (pl->bufs[i].in_use || pl->bufs[i].cap == 0) continue;
            if (pick < 0 || pl->bufs[i].cap > pl->bufs[pick].cap) pick = i;
        }
        if (pick < 0) break;
        size_t b = pl->bufs[pick].cap * sizeof(floatX);
        if (kept + b <= keep_bytes) {
            kept += b;
            pl->bufs[pick].in_use = 2;  // visited (kept), restored below
        } else {
            device_free(pl->bufs[pick].ptr);
            pl->bytes -= b;
            pl->bufs[pick] = pl->bufs[--pl->num];
        }
    }
    for (int i = 0; i < pl->num; i++) if (pl->bufs[i].in_use == 2) pl->bufs[i].in_use = 0;
}

static void pool_free(BufPool* pl) {
    for (int i = 0; i < pl->num; i++) device_free(pl->bufs[i].ptr);
    free(pl->bufs);
    memset(pl, 0, sizeof(*pl));
}

// ----------------------------------------------------------------------------
// the state of one rank

typedef struct {
    int stage;              // 0 DDP, 1 P_os, 2 P_os+g, 3 P_os+g+p
    int enabled;            // 0: one process, stage 0: the plain single-process path
    int dp, rank;           // the dp group's size and this rank in it
    Comm* comm;
    GPT* model;
    GPTConfig cfg;
    int num_units;
    Unit* units;            // (num_units) 0 embed, 1+l layer l, L+1 final
    size_t num_parameters;  // Psi
    size_t packed_size;     // sum of the units' padded sizes
    size_t shard_size;      // sum of the units' blocks = packed_size / dp
    // held between steps
    floatX* params_shard;   // (shard_size) stage 3: this rank's blocks of the parameters
    floatX* grads_packed;   // (packed_size) stages 0-1: the whole gradient, unit after unit
    floatX* grads_shard;    // (shard_size) stages 2-3: this rank's blocks of the averaged gradient
    float* scalars;         // (2) device: the loss to average, the sampled token to agree on
    // working buffers and collectives in flight
    BufPool pool;
    size_t pool_keep_bytes; // what the pool keeps between steps
    floatX** unit_params;   // (num_units) stage 3: a unit's gathered parameters, NULL when not held
    CommHandle* gathers;    // (num_units) stage 3: the all-gather into unit_params[u]
    floatX** unit_grads;    // (num_units) stages 2-3: a unit's gradient working buffer this step
    int* order;             // (2 * num_units) stage 3: the units in forward order, then backward order
    CommQueue grad_queue;   // gradient all-reduces (stage 0) or reduce-scatters (1-3) in flight
    int* done;              // (num_units + 1) scratch: the units whose reductions just completed
    int last_micro;         // 1 in the last micro-step of a step: the backward communicates
    double gather_wait_ms;  // this step: host time blocked on parameter all-gathers
    GPTHooks hooks;
} Zero;

// where in this rank's storage (the packed layout in stage 0, the shard otherwise) unit position
// pos of unit u lives, and the unit range [lo, hi) of values this rank updates
static inline size_t zero_index(const Zero* z, int u, size_t pos) {
    const Unit* un = &z->units[u];
    return z->stage == 0 ? un->packed_off + pos : un->shard_off + pos - (size_t)z->rank * un->block;
}
static inline void zero_owned(const Zero* z, int u, size_t* lo, size_t* hi) {
    const Unit* un = &z->units[u];
    if (z->stage == 0) { *lo = 0; *hi = un->n; return; }
    *lo = (size_t)z->rank * un->block;
    *hi = *lo + un->block < un->n ? *lo + un->block : un->n;
    if (*lo > *hi) *lo = *hi;
}
static inline size_t zero_storage_size(const Zero* z) { return z->stage == 0 ? z->packed_size : z->shard_size; }

// ----------------------------------------------------------------------------
// the hooks of the forward and backward passes (GPTHooks)

static void zero_start_gather(Zero* z, int u) {
    if (z->unit_params[u] != NULL) return;  // started already (prefetched)
    const Unit* un = &z->units[u];
    z->unit_params[u] = pool_get(&z->pool, un->padded);
    z->gathers[u] = comm_all_gather_start(z->comm, GROUP_DP, z->params_shard + un->shard_off, z->unit_params[u],
                                          un->block, z->model->stream);
}

// a gradient reduction finished: its unit working buffer goes back to the pool (stages 2-3)
static void zero_grad_done(Zero* z, int u) {
    if (z->stage >= 2 && u >= 0 && z->unit_grads[u] != NULL) {
        pool_put(&z->pool, z->unit_grads[u]);
        z->unit_grads[u] = NULL;
    }
}

// drive the gradient reductions in flight; release the buffers of the finished ones
static void zero_poll_grads(Zero* z) {
    int n = commq_poll(z->comm, &z->grad_queue, z->done);
    for (int i = 0; i < n; i++) zero_grad_done(z, z->done[i]);
}

// stage 3: gather unit u (unless prefetched), prefetch the next unit of the pass, wait for u
static floatX* zero_params_acquire(void* ctx, int u, int pass) {
    Zero* z = (Zero*)ctx;
    const int* order = z->order + (pass ? z->num_units : 0);
    zero_start_gather(z, u);
    for (int i = 0; i + 1 < z->num_units; i++) {
        if (order[i] == u) { zero_start_gather(z, order[i + 1]); break; }
    }
    zero_poll_grads(z);  // progress for the gradient reductions in flight
    double t0 = wall_ms();
    comm_wait(z->comm, &z->gathers[u]);
    z->gather_wait_ms += wall_ms() - t0;
    return z->unit_params[u];
}

static void zero_params_release(void* ctx, int u, int pass) {
    (void)pass;
    Zero* z = (Zero*)ctx;
    pool_put(&z->pool, z->unit_params[u]);
    z->unit_params[u] = NULL;
}

static floatX* zero_grads_acquire(void* ctx, int u) {
    Zero* z = (Zero*)ctx;
    const Unit* un = &z->units[u];
    if (z->stage <= 1) return z->grads_packed + un->packed_off;
    if (z->unit_grads[u] == NULL) {  // the first micro-step of the step: a zeroed working buffer
        z->unit_grads[u] = pool_get(&z->pool, un->padded);
        device_memset_zero(z->unit_grads[u], un->padded * sizeof(floatX), z->model->stream);
    }
    return z->unit_grads[u];
}

static void zero_grads_ready(void* ctx, int u) {
    Zero* z = (Zero*)ctx;
    if (!z->last_micro) return;  // gradient accumulation: earlier micro-steps sum locally
    const Unit* un = &z->units[u];
    cudaStream_t s = z->model->stream;
    if (z->stage == 0) {
        ddp_bucket_ready(z->comm, &z->grad_queue, z->grads_packed + un->packed_off, un->n, u, s);
        return;
    }
    if (z->stage == 1) {
        // reduce-scatter in place: this rank's block of the packed gradient becomes the average (the
        // only part its optimizer shard reads); the rest of the full buffer is left as it was
        floatX* g = z->grads_packed + un->packed_off;
        commq_push(&z->grad_queue, comm_reduce_scatter_start(z->comm, GROUP_DP, g, g + (size_t)z->rank * un->block,
                                                             un->block, COMM_AVG, s), u);
        zero_poll_grads(z);
        return;
    }
    // reduce-scatter: this rank's block of the average lands in its shard
    commq_push(&z->grad_queue, comm_reduce_scatter_start(z->comm, GROUP_DP, z->unit_grads[u], z->grads_shard + un->shard_off,
                                                         un->block, COMM_AVG, s), u);
    zero_poll_grads(z);
    while (z->grad_queue.count > ZERO_MAX_INFLIGHT) zero_grad_done(z, commq_wait_oldest(z->comm, &z->grad_queue));
}

// stage 3: every rank samples the token of dp rank 0, so all ranks run the same forwards
static int zero_agree_token(void* ctx, int token) {
    Zero* z = (Zero*)ctx;
    float f = (float)token;  // exact for token ids < 2^24
    copy_to_device(z->scalars + 1, &f, sizeof(float));
    comm_broadcast(z->comm, GROUP_DP, z->scalars + 1, 1, 0, z->model->stream);
    copy_to_host(&f, z->scalars + 1, sizeof(float));
    return (int)f;
}

// ----------------------------------------------------------------------------
// setup

// Checks nothing (the layout was validated by the caller) and allocates nothing but the unit table.
static void zero_layout(Zero* z, Comm* comm, GPTConfig cfg, int stage) {
    memset(z, 0, sizeof(*z));
    z->stage = stage;
    z->comm = comm;
    z->dp = comm_group_size(comm, GROUP_DP);
    z->rank = comm_group_rank(comm, GROUP_DP);
    z->enabled = z->dp > 1 || stage > 0;
    z->cfg = cfg;
    size_t sizes[NUM_PARAMETER_TENSORS], offs[NUM_PARAMETER_TENSORS];
    fill_in_parameter_sizes(sizes, cfg);
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { offs[i] = off; off += sizes[i]; }
    z->num_parameters = off;
    int L = cfg.num_layers;
    z->num_units = num_units(cfg);
    z->units = (Unit*)mallocCheck((size_t)z->num_units * sizeof(Unit));
    size_t packed = 0, shard = 0, align = (size_t)ZERO_ALIGN * z->dp;
    for (int u = 0; u < z->num_units; u++) {
        Unit* un = &z->units[u];
        memset(un, 0, sizeof(*un));
        int first = u == UNIT_EMBED ? 0 : (u == unit_final(cfg) ? 14 : 2), count = (u == UNIT_EMBED || u == unit_final(cfg)) ? 2 : 12;
        for (int k = 0; k < count; k++) {
            int i = first + k;
            size_t per = (u == UNIT_EMBED || u == unit_final(cfg)) ? sizes[i] : sizes[i] / L;  // one layer's slice
            size_t start = (u == UNIT_EMBED || u == unit_final(cfg)) ? offs[i] : offs[i] + (size_t)(u - 1) * per;
            UnitPiece* p = &un->pieces[un->num_pieces++];
            p->tensor = i;
            p->full_off = start;
            p->unit_off = un->n;
            p->n = per;
            un->n += per;
        }
        un->padded = ceil_div_sz(un->n, align) * align;
        un->block = un->padded / z->dp;
        un->packed_off = packed;
        un->shard_off = shard;
        packed += un->padded;
        shard += un->block;
    }
    z->packed_size = packed;
    z->shard_size = shard;
}

// Allocates the model (with only the full buffers the stage keeps) and this rank's storage, and
// installs the hooks. Call after zero_layout.
static void zero_allocate(Zero* z, GPT* model) {
    z->model = model;
    if (!z->enabled) {
        gpt_allocate(model, z->cfg);
        return;
    }
    gpt_allocate_ex(model, z->cfg, z->stage < 3, 0);
    cudaStream_t s = model->stream;
    int U = z->num_units;
    if (z->stage <= 1) {
        z->grads_packed = (floatX*)device_malloc(z->packed_size * sizeof(floatX));
        device_memset_zero(z->grads_packed, z->packed_size * sizeof(floatX), s);
    } else {
        z->grads_shard = (floatX*)device_malloc(z->shard_size * sizeof(floatX));
        device_memset_zero(z->grads_shard, z->shard_size * sizeof(floatX), s);
    }
    if (z->stage == 3) {
        z->params_shard = (floatX*)device_malloc(z->shard_size * sizeof(floatX));
        device_memset_zero(z->params_shard, z->shard_size * sizeof(floatX), s);
    }
    z->scalars = (float*)device_malloc(2 * sizeof(float));
    z->unit_params = (floatX**)mallocCheck((size_t)U * sizeof(floatX*));
    z->unit_grads = (floatX**)mallocCheck((size_t)U * sizeof(floatX*));
    z->gathers = (CommHandle*)mallocCheck((size_t)U * sizeof(CommHandle));
    memset(z->unit_params, 0, (size_t)U * sizeof(floatX*));
    memset(z->unit_grads, 0, (size_t)U * sizeof(floatX*));
    memset(z->gathers, 0, (size_t)U * sizeof(CommHandle));
    z->order = (int*)mallocCheck((size_t)2 * U * sizeof(int));
    int L = z->cfg.num_layers;
    for (int i = 0; i < U; i++) z->order[i] = i;  // forward: embed, layer 0 .. L-1, final
    z->order[U] = UNIT_EMBED;                     // backward: embed, final, layer L-1 .. 0
    z->order[U + 1] = unit_final(z->cfg);
    for (int l = L - 1; l >= 0; l--) z->order[U + 2 + (L - 1 - l)] = unit_of_layer(l);
    commq_init(&z->grad_queue, U + 1);
    z->done = (int*)mallocCheck((size_t)(U + 1) * sizeof(int));
    // what the pool keeps between steps: the working set of a step of one micro-step, so that steps
    // do not allocate. Stages 1-2: the all-gather of the updated parameters, two units at a time;
    // stage 2: during the backward, the embedding's gradients (held from the LM head to the
    // encoder) and ZERO_MAX_INFLIGHT + 1 more units; stage 3: the embedding's parameters and
    // gradients, two more units' parameters (one prefetched) and ZERO_MAX_INFLIGHT + 1 gradients.
    size_t largest = 0, layer = z->units[unit_of_layer(0)].padded;
    for (int u = 0; u < U; u++) if (z->units[u].padded > largest) largest = z->units[u].padded;
    size_t keep = 0;
    if (z->stage == 1) keep = 2 * largest;
    if (z->stage == 2) keep = largest + (largest > (ZERO_MAX_INFLIGHT + 1) * layer ? largest : (ZERO_MAX_INFLIGHT + 1) * layer);
    if (z->stage == 3) keep = 2 * largest + (2 + ZERO_MAX_INFLIGHT + 1) * layer;
    z->pool_keep_bytes = keep * sizeof(floatX);
    z->hooks.ctx = z;
    z->hooks.params_acquire = z->stage == 3 ? zero_params_acquire : NULL;
    z->hooks.params_release = z->stage == 3 ? zero_params_release : NULL;
    z->hooks.grads_acquire = zero_grads_acquire;
    z->hooks.grads_ready = zero_grads_ready;
    z->hooks.agree_token = z->stage == 3 ? zero_agree_token : NULL;
    model->hooks = &z->hooks;
}

// the optimizer state of what this rank updates
// (m = v = 0; the master weights are set by zero_import_params)
static void zero_adamw_init(Zero* z, AdamWState* st) {
    adamw_state_alloc(st, z->enabled ? zero_storage_size(z) : z->num_parameters, z->model->stream);
}

// ----------------------------------------------------------------------------
// moving the whole model's FP32 host arrays (checkpoint order) in and out of this rank's storage

// this rank's part of full (Psi, checkpoint order) in its storage layout (packed in stage 0, shard
// otherwise), pads zero; dst: device, floatX (to_floatX) or float
static void zero_pack_host(const Zero* z, const float* full, void* dst, int to_floatX) {
    size_t n = zero_storage_size(z);
    float* stage_buf = (float*)mallocCheck(n * sizeof(float));
    memset(stage_buf, 0, n * sizeof(float));
    Segment seg[ZERO_MAX_PIECES];
    for (int u = 0; u < z->num_units; u++) {
        size_t lo, hi;
        zero_owned(z, u, &lo, &hi);
        int k = unit_segments(&z->units[u], lo, hi, seg);
        for (int j = 0; j < k; j++) memcpy(stage_buf + zero_index(z, u, seg[j].unit_pos), full + seg[j].full_off, seg[j].n * sizeof(float));
    }
    if (to_floatX) {
        copy_floats_to_device((floatX*)dst, stage_buf, n);
    } else {
        copy_to_device(dst, stage_buf, n * sizeof(float));
    }
    free(stage_buf);
}

// the unit's packed vector (device, padded values, floatX or float) into full (host, checkpoint order)
static void zero_unpack_unit_host(const Zero* z, int u, const void* unit_vec, int is_floatX, float* full) {
    const Unit* un = &z->units[u];
    float* tmp = (float*)mallocCheck(un->n * sizeof(float));
    if (is_floatX) copy_to_host_float(tmp, (const floatX*)unit_vec, un->n);
    else copy_to_host(tmp, unit_vec, un->n * sizeof(float));
    for (int i = 0; i < un->num_pieces; i++) {
        const UnitPiece* p = &un->pieces[i];
        memcpy(full + p->full_off, tmp + p->unit_off, p->n * sizeof(float));
    }
    free(tmp);
}

// The whole of a value this rank stores in its layout (src: device, packed in stage 0 or shard),
// as FP32 on the host in checkpoint order. In stages 1-3 an all-gather per unit over the dp group:
// every rank of the group must call it.
static void zero_gather_host(Zero* z, const void* src, int is_floatX, float* full) {
    cudaStream_t s = z->model->stream;
    size_t esz = is_floatX ? sizeof(floatX) : sizeof(float);
    for (int u = 0; u < z->num_units; u++) {
        const Unit* un = &z->units[u];
        if (z->stage == 0) {
            zero_unpack_unit_host(z, u, (const char*)src + un->packed_off * esz, is_floatX, full);
            continue;
        }
        void* tmp = device_malloc(un->padded * esz);
        if (is_floatX) comm_all_gather(z->comm, GROUP_DP, (const floatX*)src + un->shard_off, (floatX*)tmp, un->block, s);
        else comm_all_gather(z->comm, GROUP_DP, (const float*)src + un->shard_off, (float*)tmp, un->block, s);
        device_synchronize();
        zero_unpack_unit_host(z, u, tmp, is_floatX, full);
        device_free(tmp);
    }
}

// Sets the parameters (and the FP32 master weights of BF16 builds) from params (Psi FP32, host,
// checkpoint order). params_exact: 1 when params are the FP32 master values themselves (a state
// file), 0 for a checkpoint or a fresh init (the master then starts as the BF16-rounded parameters,
// as adamw_state_init does).
static void zero_import_params(Zero* z, AdamWState* st, const float* params, int params_exact) {
    if (!z->enabled) {
        gpt_set_parameters(z->model, params);
        if (st->master) {
            if (params_exact) copy_to_device(st->master, params, st->n * sizeof(float));
            else {
                float* tmp = (float*)mallocCheck(st->n * sizeof(float));
                gpt_get_parameters(z->model, tmp);
                copy_to_device(st->master, tmp, st->n * sizeof(float));
                free(tmp);
            }
        }
        return;
    }
    if (z->stage < 3) gpt_set_parameters(z->model, params);
    else zero_pack_host(z, params, z->params_shard, 1);
    if (st->master) {
        if (params_exact) {
            zero_pack_host(z, params, st->master, 0);
        } else {
            float* rounded = (float*)mallocCheck(z->num_parameters * sizeof(float));
            for (size_t i = 0; i < z->num_parameters; i++) rounded[i] = (float)(floatX)params[i];
            zero_pack_host(z, rounded, st->master, 0);
            free(rounded);
        }
    }
}

// AdamW moments m, v (Psi FP32 each, host, checkpoint order) into this rank's part
static void zero_import_moments(Zero* z, AdamWState* st, const float* m, const float* v) {
    if (!z->enabled) {
        copy_to_device(st->m, m, st->n * sizeof(float));
        copy_to_device(st->v, v, st->n * sizeof(float));
        return;
    }
    zero_pack_host(z, m, st->m, 0);
    zero_pack_host(z, v, st->v, 0);
}

// The whole model's parameters (the FP32 master weights in BF16 builds) and moments, FP32 on the
// host in checkpoint order (Psi each; m and v may be NULL). Every rank of the dp group must call it.
static void zero_export(Zero* z, const AdamWState* st, float* params, float* m, float* v) {
    if (!z->enabled) {
        if (st->master) copy_to_host(params, st->master, st->n * sizeof(float));
        else gpt_get_parameters(z->model, params);
        if (m) copy_to_host(m, st->m, st->n * sizeof(float));
        if (v) copy_to_host(v, st->v, st->n * sizeof(float));
        return;
    }
    if (st->master) zero_gather_host(z, st->master, 0, params);
    else if (z->stage < 3) gpt_get_parameters(z->model, params);
    else zero_gather_host(z, z->params_shard, 1, params);
    if (m) zero_gather_host(z, st->m, 0, m);
    if (v) zero_gather_host(z, st->v, 0, v);
}

// ----------------------------------------------------------------------------
// one optimizer step

static void zero_step_begin(Zero* z) {
    z->gather_wait_ms = 0.0;
    z->grad_queue.wait_ms = 0.0;
    if (!z->enabled) { gpt_zero_grad(z->model); return; }
    if (z->stage <= 1) device_memset_zero(z->grads_packed, z->packed_size * sizeof(floatX), z->model->stream);
    // stages 2-3: each unit's working buffer is zeroed when its first micro-step acquires it
}

// before each micro-step's forward
static void zero_micro_begin(Zero* z, int micro, int grad_accum) { z->last_micro = micro == grad_accum - 1; }

// after each micro-step's backward: in the last one, wait for every gradient reduction (timed: the
// step's gradient comm wait)
static void zero_micro_end(Zero* z) {
    if (!z->enabled || !z->last_micro) return;
    while (z->grad_queue.count > 0) zero_grad_done(z, commq_wait_oldest(z->comm, &z->grad_queue));
}

// host ms this step spent blocked on gradient communication / on parameter all-gathers
static double zero_grad_wait_ms(const Zero* z) { return z->grad_queue.wait_ms; }
static double zero_gather_wait_ms(const Zero* z) { return z->gather_wait_ms; }

// the mean of x over the dp group
static float zero_mean(Zero* z, float x) {
    if (!z->enabled || z->dp == 1) return x;
    copy_to_device(z->scalars, &x, sizeof(float));
    comm_all_reduce(z->comm, GROUP_DP, z->scalars, z->scalars, 1, COMM_AVG, z->model->stream);
    copy_to_host(&x, z->scalars, sizeof(float));
    return x;
}

// The global L2 norm of the averaged gradient. Stage 0: from the whole gradient every rank holds.
// Stages 1-3: each rank's sum of squares of the blocks it owns (stage 1: its block of every unit in the
// packed gradient; stages 2-3: its shard), summed over the group: norm = sqrt(sum_r |g_r|^2) (pads are
// zero and add nothing).
static float zero_grad_norm(Zero* z, AdamWState* st) {
    if (!z->enabled) return gpt_grad_norm(z->model, st);
    cudaStream_t s = z->model->stream;
    device_memset_zero(st->norm, sizeof(float), s);
    if (z->stage == 0) {
        global_norm_squared(st->norm, z->grads_packed, z->packed_size, s);
    } else if (z->stage == 1) {
        for (int u = 0; u < z->num_units; u++) {
            const Unit* un = &z->units[u];
            global_norm_squared(st->norm, z->grads_packed + un->packed_off + (size_t)z->rank * un->block, un->block, s);
        }
        comm_all_reduce(z->comm, GROUP_DP, st->norm, st->norm, 1, COMM_SUM, s);
    } else {
        global_norm_squared(st->norm, z->grads_shard, z->shard_size, s);
        comm_all_reduce(z->comm, GROUP_DP, st->norm, st->norm, 1, COMM_SUM, s);
    }
    float norm2;
    copy_to_host(&norm2, st->norm, sizeof(float));
    return sqrtf(norm2);
}

// stages 1-2: unit u's parameters, this rank's block packed from the full buffer, all-gathered in
// place in buf (padded values)
static CommHandle zero_start_param_gather(Zero* z, int u, floatX* buf) {
    const Unit* un = &z->units[u];
    cudaStream_t s = z->model->stream;
    size_t lo, hi;
    zero_owned(z, u, &lo, &hi);
    size_t mine = (size_t)z->rank * un->block;
    size_t pad = hi > mine ? hi : mine;  // the pad in my block: [pad, mine + block)
    if (pad < mine + un->block) device_memset_zero(buf + pad, (mine + un->block - pad) * sizeof(floatX), s);
    Segment seg[ZERO_MAX_PIECES];
    int k = unit_segments(un, lo, hi, seg);
    for (int j = 0; j < k; j++) {
        copy_device_to_device(buf + seg[j].unit_pos, z->model->params_memory + seg[j].full_off, seg[j].n * sizeof(floatX), s);
    }
    return comm_all_gather_start(z->comm, GROUP_DP, buf + mine, buf, un->block, s);
}

// stages 1-2: the gathered unit back into the full buffer
static void zero_unpack_params(Zero* z, int u, const floatX* buf) {
    const Unit* un = &z->units[u];
    for (int i = 0; i < un->num_pieces; i++) {
        const UnitPiece* p = &un->pieces[i];
        copy_device_to_device(z->model->params_memory + p->full_off, buf + p->unit_off, p->n * sizeof(floatX), z->model->stream);
    }
}

// AdamW on what this rank owns (weight decay by tensor), then in stages 1-2 the all-gather of the
// updated parameters, unit by unit (the next unit's gather started before the current one is waited)
static void zero_update(Zero* z, AdamWState* st, const OptimConfig* oc, float lr, float grad_norm, unsigned int seed) {
    if (!z->enabled) { gpt_update(z->model, st, oc, lr, grad_norm, seed); return; }
    float grad_scale = grad_clip_scale(oc, grad_norm);
    st->t += 1;
    cudaStream_t s = z->model->stream;
    Segment seg[ZERO_MAX_PIECES];
    for (int u = 0; u < z->num_units; u++) {
        const Unit* un = &z->units[u];
        size_t lo, hi;
        zero_owned(z, u, &lo, &hi);
        int k = unit_segments(un, lo, hi, seg);
        for (int j = 0; j < k; j++) {
            size_t i = zero_index(z, u, seg[j].unit_pos);  // in m, v, master (and the shards)
            floatX* param = z->stage == 3 ? z->params_shard + i : z->model->params_memory + seg[j].full_off;
            floatX* grad = z->stage <= 1 ? z->grads_packed + un->packed_off + seg[j].unit_pos : z->grads_shard + i;
            float wd = parameter_is_decayed(seg[j].tensor) ? oc->weight_decay : 0.0f;
            adamw_update(param, st->master ? st->master + i : NULL, grad, st->m + i, st->v + i, seg[j].n, lr, oc->beta1,
                         oc->beta2, st->t, oc->eps, wd, grad_scale, seed + (unsigned)seg[j].tensor + 16u * (unsigned)u, s);
        }
    }
    if (z->stage == 1 || z->stage == 2) {
        floatX* bufs[2] = {NULL, NULL};
        CommHandle h[2];
        for (int u = 0; u <= z->num_units; u++) {
            if (u < z->num_units) {
                bufs[u % 2] = pool_get(&z->pool, z->units[u].padded);
                h[u % 2] = zero_start_param_gather(z, u, bufs[u % 2]);
            }
            if (u > 0) {
                int p = (u - 1) % 2;
                double t0 = wall_ms();
                comm_wait(z->comm, &h[p]);
                z->gather_wait_ms += wall_ms() - t0;
                zero_unpack_params(z, u - 1, bufs[p]);
                pool_put(&z->pool, bufs[p]);
            }
        }
    }
    pool_trim(&z->pool, z->pool_keep_bytes);  // the per-step workspace beyond the working set goes
}

// ----------------------------------------------------------------------------
// accounting

typedef struct {
    double params, grads, moments, master;  // model states held between steps (the paper's table)
    double activations;                     // activations and backward buffers of the model
    double comm_buffers;                    // communication buffers held between steps
    double workspace_peak;                  // transient: the most the unit working buffers held at once
} ZeroMemory;

static ZeroMemory zero_memory(const Zero* z, const AdamWState* st) {
    ZeroMemory mem;
    double x = (double)sizeof(floatX), N = (double)z->num_parameters;
    if (!z->enabled) {
        mem.params = N * x;
        mem.grads = N * x;
        mem.comm_buffers = 0.0;
    } else {
        mem.params = (z->stage == 3 ? (double)z->shard_size : N) * x;
        mem.grads = (double)(z->stage <= 1 ? z->packed_size : z->shard_size) * x;
        mem.comm_buffers = (double)z->pool.bytes + 2 * sizeof(float);
    }
    mem.moments = 2.0 * st->n * sizeof(float);
    mem.master = st->master ? (double)st->n * sizeof(float) : 0.0;
    mem.activations = (double)z->model->acts_bytes;
    mem.workspace_peak = (double)z->pool.peak_bytes;
    return mem;
}

// the paper's bytes of parameters + gradients + optimizer state per rank (Table 1 / Figure 1)
static double zero_paper_bytes(int stage, int N, double psi) {
    double p = (double)sizeof(floatX), g = p, K = ADAMW_HAS_MASTER ? 12.0 : 8.0;
    switch (stage) {
        case 0: return (p + g + K) * psi;
        case 1: return (p + g) * psi + K * psi / N;
        case 2: return p * psi + (g + K) * psi / N;
        default: return (p + g + K) * psi / N;
    }
}

static void zero_free(Zero* z) {
    if (z->enabled) {
        device_free(z->params_shard);
        device_free(z->grads_packed);
        device_free(z->grads_shard);
        device_free(z->scalars);
        free(z->unit_params);
        free(z->unit_grads);
        free(z->gathers);
        free(z->order);
        free(z->done);
        commq_free(&z->grad_queue);
        pool_free(&z->pool);
        if (z->model) z->model->hooks = NULL;
    }
    free(z->units);
    z->units = NULL;
}
