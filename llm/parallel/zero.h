// zero.h: what ZeRO adds to data parallelism (Rajbhandari et al. 2019, "ZeRO: Memory Optimizations
// Toward Training Trillion Parameter Models", sec. 5): the model states partitioned over the N ranks of
// the dp group instead of replicated on each. Three switches, each a question the code asks:
//     shard_optim   P_os      (sec. 5.1): rank r keeps and updates the optimizer state (AdamW m, v, and
//                             the FP32 master weights of BF16 builds) of its blocks only; after the update
//                             an all-gather of the updated parameters gives every rank the whole model
//     shard_grads   P_os+g    (sec. 5.2): the gradients too: each unit's gradients are reduce-scattered as
//                             soon as the backward has finished them; rank r keeps the averaged block it
//                             updates
//     shard_params  P_os+g+p  (sec. 5.3): the parameters too: a unit's parameters are all-gathered just
//                             before its forward and again before its backward (the next unit
//                             prefetched), and dropped after use
// --zero N turns on the first N of them (zero_config; each implies the ones before it): 0 is DDP
// (llm/parallel/ddp.h), 1, 2, 3 the paper's P_os, P_os+g, P_os+g+p. The number is kept for printing only.
// llm/parallel/dp.h asks the switches behind the hooks the model calls, and allocates by them (the
// paper's Table 1, dp_paper_bytes there). Where each one acts:
//     shard_optim   what a rank updates (dp_owned, dp_index), its gradients' reduce-scatter
//                   (zero_reduce_scatter, from the grads-ready hook) and, the parameters being
//                   replicated, their all-gather after the update (zero_gather_updated, dp_update)
//     shard_grads   the units' gradient working buffers (zero_unit_grads) and the shard (dp_grad_at)
//     shard_params  each unit's parameters gathered just in time (zero_params_acquire / _release,
//                   from the params hooks)
//
// Blocks. The parameter layout pads every unit to a multiple of ZERO_ALIGN * dp values
// (llm/model/tensors.h), so a unit splits into dp equal blocks, each 16-byte aligned: rank r owns block r
// of every unit, and its shard is its blocks of all units back to back (about Psi/dp values). The
// pads are zero and stay zero (AdamW runs on the tensors' values only).
//
// Communication per step (sec. 7; comm.h's ring model: all-reduce sends 2 (N-1)/N S bytes,
// reduce-scatter and all-gather (N-1)/N S, for S bytes):
//     DDP       all-reduce of the gradients                                   2 (N-1)/N Psi
//     P_os      reduce-scatter of the gradients (in place in the full gradient buffer: only this rank's
//               block is reduced) + all-gather of the updated parameters      2 (N-1)/N Psi = DDP
//     P_os+g    reduce-scatter + all-gather                                   2 (N-1)/N Psi = DDP
//               (sec. 7.2.1: P_os and P_os+g add no communication to DDP)
//     P_os+g+p  all-gather (forward) + all-gather (backward) + reduce-scatter 3 (N-1)/N Psi = 1.5 DDP
//               (sec. 7.2.2; with gradient accumulation the gathers happen in every micro-batch)
// Each rank's comm.h ledger records what was sent; test/test_ddp_zero.sh checks it against these.
//
// Working buffers. With the optimizer states alone partitioned, the gradients are reduce-scattered and
// the parameters all-gathered in place, in the full gradient and parameter buffers. With the gradients
// (and the parameters) partitioned too, units move through a pool (llm/parallel/bufpool.h) of MEM_COMM
// buffers: a unit's gradient buffer is held from its first micro-batch to its reduce-scatter in the last
// one (so the full gradient never exists with one micro-batch); partitioned parameters hold the
// embedding's from the encoder to the LM head, and two more units (one prefetched).
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../model/units.h"
#include "../comm/comm.h"
#include "ddp.h"
#include "bufpool.h"

#define ZERO_ALIGN 8             // values: 16 bytes of BF16, 32 of FP32
#define ZERO_MAX_INFLIGHT 2      // gradient reduce-scatters in flight before the oldest is waited

// the three switches, set once from --zero N (0..3) when data parallelism is set up
typedef struct {
    int level;         // N as given: for printing and the report only, never asked
    int shard_optim;   // P_os: optimizer states partitioned (N >= 1)
    int shard_grads;   // P_os+g: gradients too (N >= 2)
    int shard_params;  // P_os+g+p: parameters too (N = 3)
} ZeroConfig;

static ZeroConfig zero_config(int level) {
    ZeroConfig z = {level, level >= 1, level >= 2, level >= 3};
    return z;
}

static const char* zero_name(int level) {
    static const char* names[4] = {"DDP", "ZeRO-1 (P_os)", "ZeRO-2 (P_os+g)", "ZeRO-3 (P_os+g+p)"};
    return names[level];
}

typedef struct {
    ZeroConfig zero;
    int size, rank;         // the gradient group's (llm/comm/mesh.h: mesh.grad, dp x cp): N and this rank's place
    int esize, erank;       // expert parallelism: the experts' gradient group (mesh.egrad, GROUP_EDP), which
                            // shards the experts units (the ranks that hold the same experts); else size, rank
    int* expert;            // (U) 1: an experts unit sharded over GROUP_EDP (ep > 1); 0: over GROUP_DP
    int num_units;
    size_t* block;          // (U) values of each block of unit u: padded / N
    size_t* shard_off;      // (U) where this rank's block of unit u starts in its shard
    size_t shard_size;      // sum of the blocks
    BufPool pool;           // unit working buffers (MEM_COMM)
    size_t pool_keep_bytes; // what the pool keeps between steps: one step's working set
    floatX** unit_params;   // (U) shard_params: unit u's gathered parameters, NULL when not held
    CommHandle* gathers;    // (U) shard_params: the all-gather into unit_params[u]
    floatX** unit_grads;    // (U) shard_grads: unit u's gradient working buffer this step
    int* order;             // (2 (U+1)) shard_params: the units held in forward order, then in backward order
    int order_n;            // how many units each half lists (U, U + 1 with the embedding twice, or fewer on a stage)
    int cursor[2];          // per pass: the position in its order of the unit acquired last
    int* done;              // (U+1) scratch: the units whose gradient reductions just finished
    DpTrace* trace;         // where the gathers are recorded (llm/parallel/ddp.h), or NULL
} ZeroState;

// each unit's group: its ranks, this rank's place, the communicator (an experts unit with ep > 1: GROUP_EDP)
static inline int zero_usize(const ZeroState* z, int u) { return z->expert[u] ? z->esize : z->size; }
static inline int zero_urank(const ZeroState* z, int u) { return z->expert[u] ? z->erank : z->rank; }
static inline CommGroup zero_ugroup(const ZeroState* z, int u) { return z->expert[u] ? GROUP_EDP : GROUP_DP; }

// embed_twice: this rank runs the encoder and the LM head in two stages (the V placement of the pipeline
// schedules, llm/parallel/schedule_list.h), each of which acquires the tied embedding itself: the orders list it twice.
// esize, erank: the experts' gradient group (mesh.egrad) when the layout splits the experts (lay->ep_size > 1)
static void zero_init(ZeroState* z, const ParamLayout* lay, ZeroConfig zero, int size, int rank, int embed_twice,
                      int esize, int erank) {
    memset(z, 0, sizeof(*z));
    z->zero = zero; z->size = size; z->rank = rank; z->esize = esize; z->erank = erank;
    int U = lay->num_units;
    z->num_units = U;
    z->block = (size_t*)mallocCheck((size_t)U * sizeof(size_t));
    z->shard_off = (size_t*)mallocCheck((size_t)U * sizeof(size_t));
    z->expert = (int*)mallocCheck((size_t)U * sizeof(int));
    for (int u = 0; u < U; u++) {
        z->expert[u] = lay->ep_size > 1 && unit_kind(lay->cfg, u) == UNIT_KIND_EXPERTS;
        int n = zero_usize(z, u);
        if (lay->units[u].padded % ((size_t)ZERO_ALIGN * n) != 0) fatal("zero_init: unit %d is not padded for %d ranks", u, n);
        z->block[u] = lay->units[u].padded / n;
        z->shard_off[u] = z->shard_size;
        z->shard_size += z->block[u];
    }
    z->unit_params = (floatX**)mallocCheck((size_t)U * sizeof(floatX*));
    z->unit_grads = (floatX**)mallocCheck((size_t)U * sizeof(floatX*));
    z->gathers = (CommHandle*)mallocCheck((size_t)U * sizeof(CommHandle));
    memset(z->unit_params, 0, (size_t)U * sizeof(floatX*));
    memset(z->unit_grads, 0, (size_t)U * sizeof(floatX*));
    memset(z->gathers, 0, (size_t)U * sizeof(CommHandle));
    z->order = (int*)mallocCheck((size_t)2 * (U + 1) * sizeof(int));
    z->done = (int*)mallocCheck((size_t)(U + 1) * sizeof(int));
    // forward: embed, layer 0 .. L-1, final (embed again: the LM head); backward: embed (LM head),
    // final, layer L-1 .. 0 (embed again: the encoder). A pipeline stage holds some of them: the first
    // uses the embedding only as the encoder (first in the forward, last in the backward), the last
    // only as the LM head (last in the forward, first in the backward). A rank of the V placement with both
    // (embed_twice) runs them as two stages, each acquiring the embedding: it is listed at both places.
    // A moe layer's experts unit comes right after its layer unit, in both passes (the stage uses them in
    // that order: llm/model/stage.h).
    GPTConfig c = lay->cfg;
    int L = c.num_layers, nf = 0, nb = 0, F = unit_final(c);
    int encoder = lay->units[unit_of_layer(c, 0)].held && lay->units[UNIT_EMBED].held;
    int head = lay->units[F].held;
    if (encoder) z->order[nf++] = UNIT_EMBED;
    for (int l = 0; l < L; l++) {
        if (!lay->units[unit_of_layer(c, l)].held) continue;
        z->order[nf++] = unit_of_layer(c, l);
        if (layer_is_moe(c, l)) z->order[nf++] = unit_experts_of_layer(c, l);
    }
    if (head) z->order[nf++] = F;
    if (head && (!encoder || embed_twice)) z->order[nf++] = UNIT_EMBED;
    int* back = z->order + U + 1;
    if (head) { back[nb++] = UNIT_EMBED; back[nb++] = F; }
    for (int l = L - 1; l >= 0; l--) {
        if (!lay->units[unit_of_layer(c, l)].held) continue;
        back[nb++] = unit_of_layer(c, l);
        if (layer_is_moe(c, l)) back[nb++] = unit_experts_of_layer(c, l);
    }
    if (encoder && (!head || embed_twice)) back[nb++] = UNIT_EMBED;
    if (nf != nb) fatal("zero_init: the forward order lists %d units, the backward %d", nf, nb);
    z->order_n = nf;
    z->cursor[0] = z->cursor[1] = nf - 1;  // the first search starts at the order's first unit
    // the steady-state working set, so that steps do not allocate (P_os alone needs none: it reduce-
    // scatters and gathers in place). Partitioned gradients: during the backward, the embedding's
    // gradients (held from the LM head to the encoder) and ZERO_MAX_INFLIGHT + 1 more units;
    // partitioned parameters add the embedding's parameters and two more units' (one prefetched).
    size_t largest = 0, layer = 0, keep = 0;  // (a pipeline stage holds some of the layers)
    for (int u = 0; u < U; u++) if (lay->units[u].padded > largest) largest = lay->units[u].padded;
    for (int u = 1; u < F; u++) if (lay->units[u].padded > layer) layer = lay->units[u].padded;  // layer and experts units
    if (zero.shard_grads) keep += largest + (ZERO_MAX_INFLIGHT + 1) * layer;
    if (zero.shard_params) keep += largest + 2 * layer;
    z->pool_keep_bytes = keep * sizeof(floatX);
}

static void zero_free(ZeroState* z) {
    free(z->block); free(z->shard_off); free(z->expert); free(z->unit_params); free(z->unit_grads); free(z->gathers); free(z->order); free(z->done);
    pool_free(&z->pool);
    memset(z, 0, sizeof(*z));
}

// the positions [lo, hi) of unit u (of n values) that this rank owns: its block, less the pad
static inline void zero_owned(const ZeroState* z, int u, size_t n, size_t* lo, size_t* hi) {
    *lo = (size_t)zero_urank(z, u) * z->block[u];
    *hi = *lo + z->block[u] < n ? *lo + z->block[u] : n;
    if (*lo > *hi) *lo = *hi;
}

// where unit position pos (inside this rank's block of unit u) lives in the shard
static inline size_t zero_shard_index(const ZeroState* z, int u, size_t pos) {
    return z->shard_off[u] + pos - (size_t)zero_urank(z, u) * z->block[u];
}

// a unit's gradient reduction finished: its working buffer goes back to the pool (partitioned gradients)
static void zero_grads_done(ZeroState* z, int u) {
    if (z->zero.shard_grads && u >= 0 && z->unit_grads[u] != NULL) {
        pool_put(&z->pool, z->unit_grads[u]);
        z->unit_grads[u] = NULL;
    }
}

// drives the gradient reductions in flight (MPI progresses a request only inside MPI calls); the
// finished ones release their working buffers
static void zero_poll_grads(ZeroState* z, Comm* c, CommQueue* q) {
    int n = commq_poll(c, q, z->done);
    for (int i = 0; i < n; i++) zero_grads_done(z, z->done[i]);
}

// ----------------------------------------------------------------------------
// P_os+g+p (shard_params): parameters gathered just in time

static void zero_gather_start(ZeroState* z, Comm* c, int u, const floatX* params_shard, cudaStream_t s) {
    if (z->unit_params[u] != NULL) return;  // started already (prefetched)
    dp_trace(z->trace, 'G', u);
    z->unit_params[u] = pool_get(&z->pool, z->block[u] * zero_usize(z, u));
    z->gathers[u] = comm_all_gather_start(c, zero_ugroup(z, u), params_shard + z->shard_off[u], z->unit_params[u], z->block[u], s);
}

// unit u's whole parameters for pass 0 (forward) or 1 (backward): gathered unless prefetched, the next
// unit of the pass prefetched, then waited. The gradient reductions in flight get MPI progress too. The
// unit's place in the order is searched from the one acquired last (a unit listed twice, the V's
// embedding, is then found at the place of this use), and nothing is prefetched after the order's end.
static floatX* zero_params_acquire(ZeroState* z, Comm* c, CommQueue* grad_queue, int u, int pass,
                                   const floatX* params_shard, cudaStream_t s) {
    const int* order = z->order + (pass ? z->num_units + 1 : 0);
    int n = z->order_n, at = -1;
    zero_gather_start(z, c, u, params_shard, s);
    for (int k = 1; k <= n && at < 0; k++) {
        int i = (z->cursor[pass] + k) % n;
        if (order[i] == u) at = i;
    }
    if (at >= 0) {
        z->cursor[pass] = at;
        if (at + 1 < n) zero_gather_start(z, c, order[at + 1], params_shard, s);
    }
    zero_poll_grads(z, c, grad_queue);
    comm_wait(c, &z->gathers[u]);
    return z->unit_params[u];
}

static void zero_params_release(ZeroState* z, int u) {
    pool_put(&z->pool, z->unit_params[u]);
    z->unit_params[u] = NULL;
}

// after the update: no unit may still hold gathered parameters (a prefetch the step did not use would
// keep the old values into the next step). The orders above end each pass with its last unit, so
// none is left; this makes a schedule or order that breaks that an error instead of a silent one.
static void zero_check_released(const ZeroState* z) {
    for (int u = 0; u < z->num_units; u++) {
        if (z->unit_params[u] != NULL) fatal("ZeRO-3: unit %d was gathered but not used this step (its values would go stale)", u);
    }
}

// ----------------------------------------------------------------------------
// P_os, P_os+g, P_os+g+p: the gradients reduce-scattered

// shard_grads: where the backward accumulates unit u's gradients: a working buffer, zeroed when the
// step's first micro-batch asks for it
static floatX* zero_unit_grads(ZeroState* z, int u, cudaStream_t s) {
    if (z->unit_grads[u] == NULL) {
        size_t n = z->block[u] * zero_usize(z, u);
        z->unit_grads[u] = pool_get(&z->pool, n);
        device_memset_zero(z->unit_grads[u], n * sizeof(floatX), s);
    }
    return z->unit_grads[u];
}

// Starts the average of unit u's gradients over the group, this rank's block of it landing in dst:
// in place with replicated gradients (dst = this rank's block of grads, the unit's whole gradient),
// from the working buffer into the shard with partitioned ones. The finished reductions release their
// working buffers; at most ZERO_MAX_INFLIGHT stay in flight then (each holds a working buffer).
static void zero_reduce_scatter(ZeroState* z, Comm* c, CommQueue* q, int u, floatX* grads, floatX* dst, cudaStream_t s) {
    commq_push(q, comm_reduce_scatter_start(c, zero_ugroup(z, u), grads, dst, z->block[u], COMM_AVG, s), u);
    zero_poll_grads(z, c, q);
    while (z->zero.shard_grads && q->count > ZERO_MAX_INFLIGHT) zero_grads_done(z, commq_wait_oldest(c, q));
}

// ----------------------------------------------------------------------------
// P_os and P_os+g (replicated parameters): the updated parameters all-gathered

// Every rank updated its blocks in params (the whole packed parameters); each unit is all-gathered
// in place from the owners of its blocks, the next unit's gather started before the current one is
// waited.
static void zero_gather_updated(ZeroState* z, Comm* c, const ParamLayout* lay, floatX* params, cudaStream_t s) {
    CommHandle h[2];
    int U = z->num_units;
    for (int u = 0; u <= U; u++) {
        if (u < U && z->block[u] == 0) {  // a unit of another pipeline stage: nothing to gather
            if (u > 0) comm_wait(c, &h[(u - 1) % 2]);
            h[u % 2].pending = 0;
            continue;
        }
        if (u < U) {
            dp_trace(z->trace, 'G', u);
            floatX* unit = params + lay->units[u].start;
            h[u % 2] = comm_all_gather_start(c, zero_ugroup(z, u), unit + (size_t)zero_urank(z, u) * z->block[u], unit, z->block[u], s);
        }
        if (u > 0) comm_wait(c, &h[(u - 1) % 2]);
    }
}
