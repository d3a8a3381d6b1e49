// moe_sequence.h: a mixture-of-experts layer's routing when the tokens of a micro-batch are split over ranks:
// context parallelism (--cp: each cp rank holds two chunks of every sequence, llm/sharded/cp_group.h), sequence
// parallelism (--tp with --sequence-parallel 1: each tp rank holds a contiguous block of the B*T tokens,
// llm/sharded/tensor_parallel.h), or both (each tp rank a contiguous block of its cp rank's B*Tl tokens). The capacity
// (ceil(F K N / E) per micro-batch), the load-balancing loss (f_i and P_i over the micro-batch's N tokens) and the
// z-loss's mean are defined over the whole micro-batch, so that a rank routing only its N_l = N / size tokens would
// drop and balance differently from one process. Here each rank (llm/model/moe.h's moe_forward calls these between
// the router's logits and the permutation):
//
//   1. all-gathers the router logits of its N_l tokens over the sequence group (N_l x E FP32 a rank), rank-major:
//      cp alone over GROUP_CP, sp alone over GROUP_TP; cp x sp in two levels, first over GROUP_TP (the cp rank's B Tl
//      tokens in its order: sp's blocks are contiguous), then those over GROUP_CP. The mesh has no cp x tp group, and
//      two gathers send what one over cp x tp ranks would (ring model: (tp - 1) N_l + (cp - 1) tp N_l = (cp tp - 1)
//      N_l rows a rank), so the ledger's all_gather rows of GROUP_TP and GROUP_CP show both levels
//   2. moves each gathered row to its token's place in the micro-batch (one process's order, n = b T + t) by the
//      map gmap, which the group's layout gives: row (i tp + j) N_l + k of the two-level gather is cp rank i's local
//      token j N_l + k (tp rank j's k-th: sp's split of the cp rank's tokens), which cp's chunks (zigzag or
//      contiguous) place in the micro-batch; cp alone or sp alone are the cases tp = 1 or cp = 1. (The routing is
//      the same under any relabelling of the micro-batch's tokens but for exact ties of probability at the capacity,
//      which go to the lower token index: the map must agree with the gather's order and the rank's place in it,
//      rank, and gives one process's order for those ties.)
//   3. runs one process's routing (llm/ops/moe_router.cuh) on all N tokens: the same drops and the same losses on
//      every rank, one process's
//   4. keeps its own tokens' part: their probs, lse, experts and gates, the layout of their kept assignments
//      (expert-major, in the rank's token order within an expert), their routed and dropped counts (what log.jsonl
//      and the selection bias sum over the ranks), the whole micro-batch's routed counts (the aux loss's f, for its
//      gradient) and the two losses
//
// The backward (moe_route_backward with the whole micro-batch's counts and N) writes the gradients of the rank's
// tokens' logits only: nothing to exchange. The parameters' gradients are then partial sums over the rank's tokens:
// with cp the gradient group (dp x cp) averages them, as it does every dense gradient (each rank's share of the
// cross-entropy is the mean over its own tokens, cp times its share of the whole mean), so the aux and z gradients
// are scaled by cp (grad_factor) to match; with sp the router and the experts are TP_NORM tensors
// (llm/model/tensors.h), summed over tp as the LayerNorms are (llm/parallel/dp_step.h), no factor; cp x sp: cp.
// Megatron-Core instead computes the capacity and the aux loss per rank's shard; here the routing is one process's.
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../comm/comm.h"
#include "../ops/moe_router.cuh"
#include "cp_group.h"

typedef struct MoESeqGroup {
    Comm* comm;
    int size, rank;     // cp x tp ranks (tp 1 without sp), rank cp_rank tp + tp_rank; size 1: the whole micro-batch
                        // here, and every function below the identity
    int cp_size;        // the outer level: gathered over GROUP_CP (1: none)
    int tp_size;        // the inner level: gathered over GROUP_TP first (1: none; sequence parallelism only)
    int n_local;        // N_l: the tokens of a micro-batch on each rank
    float grad_factor;  // the aux and z gradients' factor: cp (the gradient group averages over it; tp sums under sp)
    int* gmap;          // (size N_l) device: row q of the rank-major gathered logits -> its token in the micro-batch
} MoESeqGroup;

// the whole micro-batch in every rank's hands (size 1)
static MoESeqGroup moe_seq_none(void) {
    MoESeqGroup g;
    memset(&g, 0, sizeof(g));
    g.size = g.cp_size = g.tp_size = 1;
    g.grad_factor = 1.0f;
    return g;
}

static inline int moe_seq_split(const MoESeqGroup* g) { return g != NULL && g->size > 1; }
// the tokens of the whole micro-batch of which this rank holds N
static inline int moe_seq_all(const MoESeqGroup* g, int N) { return moe_seq_split(g) ? N * g->size : N; }

// The group of a stage's micro-batches of B sequences split over cp (cp->size ranks, their chunks: cp rank i's local
// token b Tl + k c + o is position ids_i[k] c + o of sequence b, llm/sharded/context_parallel.h's cp_local_tokens)
// and, under sequence parallelism (sp 1, tp_size > 1), each cp rank's B Tl tokens over tp in contiguous blocks of
// N_l = B Tl / tp (llm/sharded/tensor_parallel.h's tp_rows). Neither: none.
static void moe_seq_init(MoESeqGroup* g, const CPGroup* cp, Comm* tp_comm, int tp_size, int tp_rank, int sp, int B) {
    *g = moe_seq_none();
    int tp = sp && tp_size > 1 ? tp_size : 1, Tl = cp_local_T(cp), BTl = B * Tl;
    if (cp->size <= 1 && tp <= 1) return;
    if (BTl % tp != 0) fatal("moe: the %d tokens of a cp rank's micro-batch do not split over --tp %d", BTl, tp);
    g->comm = cp->size > 1 ? cp->comm : tp_comm;
    g->cp_size = cp->size;
    g->tp_size = tp;
    g->size = cp->size * tp;
    g->rank = (cp->size > 1 ? cp->rank : 0) * tp + (tp > 1 ? tp_rank : 0);
    g->n_local = BTl / tp;
    g->grad_factor = (float)cp->size;
    size_t n = (size_t)g->size * g->n_local;
    int* host = (int*)mallocCheck(n * sizeof(int));
    for (int i = 0; i < cp->size; i++) {
        int ids[2];
        cp_chunks(cp, i, ids);
        for (int j = 0; j < tp; j++)
            for (int k = 0; k < g->n_local; k++) {
                int m = j * g->n_local + k, b = m / Tl, t = m % Tl;  // cp rank i's local token m: tp rank j's k-th
                int pos = cp->size > 1 ? ids[t / cp->c] * cp->c + t % cp->c : t;  // (no cp: the sequence in order)
                host[((size_t)i * tp + j) * g->n_local + k] = b * cp->T + pos;
            }
    }
    g->gmap = (int*)device_malloc(n * sizeof(int), MEM_WORKSPACE);
    copy_to_device(g->gmap, host, n * sizeof(int));
    free(host);
}

static void moe_seq_free(MoESeqGroup* g) {
    if (g->gmap != NULL) device_free(g->gmap);
    *g = moe_seq_none();
}

// ----------------------------------------------------------------------------
// the rank's part of the whole micro-batch's routing

// local token i (mine[i]: its token in the micro-batch): probs, lse, experts and gates from the whole routing w
LLM_HD static inline void moe_seq_token(MoERouting l /*N_l tokens*/, MoERouting w /*size N_l*/, const int* mine /*(N_l)*/,
                                        int i, int E, int K) {
    size_t n = (size_t)mine[i];
    for (int e = 0; e < E; e++) l.probs[(size_t)i * E + e] = w.probs[n * E + e];
    l.lse[i] = w.lse[n];
    for (int k = 0; k < K; k++) {
        l.expert[(size_t)i * K + k] = w.expert[n * K + k];
        l.gates[(size_t)i * K + k] = w.gates[n * K + k];
    }
}

// after moe_seq_token for every local token: the local counts (routed and dropped assignments of the rank's tokens),
// offsets and index maps (an assignment is kept exactly when the whole routing kept it), the whole micro-batch's
// routed counts and the losses. Serial (one thread in the kernel builds): O(N_l K + E), a counting sort whose cursors
// are the offsets themselves (each expert's rows in the order of its assignments, as one process's permutation).
LLM_HD static inline void moe_seq_layout(MoERouting l /*N tokens*/, MoERouting w /*size N*/, const int* mine /*(N)*/, int N,
                                         int E, int K) {
    int *routed = moe_routed(l.counts, E), *dropped = moe_dropped(l.counts, E), *off = moe_offsets(l.counts, E);
    for (int e = 0; e < E; e++) routed[e] = dropped[e] = 0;
    for (int a = 0; a < N * K; a++) {
        int e = l.expert[a];
        routed[e]++;
        if (w.assign_row[(size_t)mine[a / K] * K + a % K] < 0) dropped[e]++;
    }
    off[0] = 0;
    for (int e = 0; e < E; e++) off[e + 1] = off[e] + routed[e] - dropped[e];
    for (int a = 0; a < N * K; a++) {  // off[e] is expert e's cursor here, and ends at its end, off[e + 1]
        if (w.assign_row[(size_t)mine[a / K] * K + a % K] < 0) { l.assign_row[a] = -1; continue; }
        int row = off[l.expert[a]]++;
        l.assign_row[a] = row;
        l.row_assign[row] = a;
    }
    for (int e = E; e > 0; e--) off[e] = off[e - 1];  // the cursors back to the starts
    off[0] = 0;
    for (int e = 0; e < E; e++) l.routed_all[e] = moe_routed(w.counts, E)[e];
    l.loss[0] = w.loss[0];
    l.loss[1] = w.loss[1];
}

#if LLM_HAS_KERNELS
// one thread per (gathered row, expert): logits[gmap[q], e] = gathered[q, e]
__global__ void moe_seq_scatter_kernel(float* logits /*(Nall,E)*/, const float* gathered /*(Nall,E)*/, const int* gmap /*(Nall)*/,
                                       int Nall, int E) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)Nall * E) return;
    size_t q = i / E, e = i % E;
    logits[(size_t)gmap[q] * E + e] = gathered[i];
}
__global__ void moe_seq_token_kernel(MoERouting l, MoERouting w, const int* mine /*(N)*/, int N, int E, int K) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) moe_seq_token(l, w, mine, i, E, K);
}
__global__ void moe_seq_layout_kernel(MoERouting l, MoERouting w, const int* mine /*(N)*/, int N, int E, int K) {
    if (blockIdx.x == 0 && threadIdx.x == 0) moe_seq_layout(l, w, mine, N, E, K);
}
#endif

// logits (size N, E) FP32 in the micro-batch's token order from the rank's local (N, E); gathered: (size N, E) scratch.
// cp x sp: the tp level lands in logits' first tp N rows (its scratch until the scatter), the cp level in gathered.
static void moe_seq_gather_logits(const MoESeqGroup* g, float* logits /*(size N, E)*/, float* gathered /*(size N, E)*/,
                                  const float* local /*(N,E)*/, int N, int E, cudaStream_t st) {
    if (N != g->n_local) fatal("moe_seq_gather_logits: the group holds %d tokens a rank, called with %d", g->n_local, N);
    size_t n = (size_t)N * E;
    if (g->cp_size == 1) comm_all_gather(g->comm, GROUP_TP, local, gathered, n, st);
    else if (g->tp_size == 1) comm_all_gather(g->comm, GROUP_CP, local, gathered, n, st);
    else {
        comm_all_gather(g->comm, GROUP_TP, local, logits, n, st);                     // the cp rank's tokens (tp N, E)
        comm_all_gather(g->comm, GROUP_CP, logits, gathered, n * g->tp_size, st);  // every rank's, cp-major
    }
    int Nall = N * g->size;
#if LLM_BUILD_CPU
    (void)st;
    for (int q = 0; q < Nall; q++) memcpy(logits + (size_t)g->gmap[q] * E, gathered + (size_t)q * E, (size_t)E * sizeof(float));
#else
    moe_launch(moe_seq_scatter_kernel, (size_t)Nall * E, st, logits, gathered, g->gmap, Nall, E);
#endif
}

// l (the rank's N tokens' routing; its routed_all field set) from w, the whole micro-batch's (moe_route_forward's)
static void moe_seq_local_routing(const MoESeqGroup* g, const MoERouting* l, const MoERouting* w, int N, int E, int K,
                                  cudaStream_t st) {
    const int* mine = g->gmap + (size_t)g->rank * g->n_local;
#if LLM_BUILD_CPU
    (void)st;
    for (int i = 0; i < N; i++) moe_seq_token(*l, *w, mine, i, E, K);
    moe_seq_layout(*l, *w, mine, N, E, K);
#else
    moe_launch(moe_seq_token_kernel, (size_t)N, st, *l, *w, mine, N, E, K);
    LAUNCH(moe_seq_layout_kernel, dim3(1), dim3(32), 0, st, *l, *w, mine, N, E, K);
#endif
}
