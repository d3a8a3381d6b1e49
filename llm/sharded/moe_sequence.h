// moe_sequence.h: a mixture-of-experts layer's routing when the tokens of a micro-batch are split over ranks:
// context parallelism (--cp: each cp rank holds two chunks of every sequence, llm/sharded/cp_group.h) or sequence
// parallelism (--tp with --sequence-parallel 1: each tp rank holds a contiguous block of the B*T tokens,
// llm/sharded/tensor_parallel.h). The capacity (ceil(F K N / E) per micro-batch), the load-balancing loss (f_i and
// P_i over the micro-batch's N tokens) and the z-loss's mean are defined over the whole micro-batch, so that a rank
// routing only its N_l = N / size tokens would drop and balance differently from one process. Here each rank
// (llm/model/moe.h's moe_forward calls these between the router's logits and the permutation):
//
//   1. all-gathers the router logits of its N_l tokens over the group (N_l x E FP32 a rank: the ledger's all_gather
//      of GROUP_CP or GROUP_TP), rank-major
//   2. moves each gathered row to its token's place in the micro-batch (one process's order, n = b T + t) by the
//      map gmap, which the group's layout gives: cp's chunks (zigzag or contiguous) or sp's contiguous blocks
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
// (llm/model/tensors.h), summed over tp as the LayerNorms are (llm/parallel/dp_step.h), grad_factor 1.
// Megatron-Core instead computes the capacity and the aux loss per rank's shard; here the routing is one process's.
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../comm/comm.h"
#include "../ops/moe_router.cuh"
#include "cp_group.h"

typedef struct MoESeqGroup {
    Comm* comm;
    CommGroup group;    // GROUP_CP or GROUP_TP
    int size, rank;     // size 1: the whole micro-batch here, and every function below the identity
    int n_local;        // N_l: the tokens of a micro-batch on each rank
    float grad_factor;  // the aux and z gradients' factor: cp (the gradient group averages over it), or 1 (sp: summed)
    int* gmap;          // (size N_l) device: row q of the rank-major gathered logits -> its token in the micro-batch
} MoESeqGroup;

// the whole micro-batch in every rank's hands (size 1)
static MoESeqGroup moe_seq_none(void) {
    MoESeqGroup g;
    memset(&g, 0, sizeof(g));
    g.size = 1;
    g.grad_factor = 1.0f;
    return g;
}

static inline int moe_seq_split(const MoESeqGroup* g) { return g != NULL && g->size > 1; }
// the tokens of the whole micro-batch of which this rank holds N
static inline int moe_seq_all(const MoESeqGroup* g, int N) { return moe_seq_split(g) ? N * g->size : N; }

// the map (size N_l ints, host) onto the device
static void moe_seq_map(MoESeqGroup* g, const int* host /*(size N_l)*/) {
    size_t n = (size_t)g->size * g->n_local;
    g->gmap = (int*)device_malloc(n * sizeof(int), MEM_WORKSPACE);
    copy_to_device(g->gmap, host, n * sizeof(int));
}

// Context parallelism: micro-batches of B sequences; cp rank j holds, per sequence b, the chunks cp_chunks(j) of c
// tokens, in that order (llm/sharded/context_parallel.h's cp_local_tokens): its token b Tl + k c + o is position
// ids[k] c + o of sequence b
static void moe_seq_init_cp(MoESeqGroup* g, const CPGroup* cp, int B) {
    *g = moe_seq_none();
    if (cp->size <= 1) return;
    g->comm = cp->comm;
    g->group = GROUP_CP;
    g->size = cp->size;
    g->rank = cp->rank;
    int Tl = cp_local_T(cp);
    g->n_local = B * Tl;
    g->grad_factor = (float)cp->size;
    int* host = (int*)mallocCheck((size_t)g->size * g->n_local * sizeof(int));
    for (int j = 0; j < g->size; j++) {
        int ids[2];
        cp_chunks(cp, j, ids);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++)
                host[(size_t)j * g->n_local + (size_t)b * Tl + t] = b * cp->T + ids[t / cp->c] * cp->c + t % cp->c;
    }
    moe_seq_map(g, host);
    free(host);
}

// Sequence parallelism: tp rank j holds tokens [j R, (j+1) R) of the micro-batch's BT (R = BT / tp): the rank-major
// gather is the micro-batch's order
static void moe_seq_init_sp(MoESeqGroup* g, Comm* comm, int tp_size, int tp_rank, int BT) {
    *g = moe_seq_none();
    if (tp_size <= 1) return;
    g->comm = comm;
    g->group = GROUP_TP;
    g->size = tp_size;
    g->rank = tp_rank;
    g->n_local = BT / tp_size;
    int* host = (int*)mallocCheck((size_t)BT * sizeof(int));
    for (int q = 0; q < BT; q++) host[q] = q;
    moe_seq_map(g, host);
    free(host);
}

// The group of a stage's micro-batches of B sequences: cp's (cp split), else tp's with sequence parallelism (sp: 1,
// taken only with more than one tp rank), else none. Both: one line and the end of the program.
static void moe_seq_init(MoESeqGroup* g, const CPGroup* cp, Comm* tp_comm, int tp_size, int tp_rank, int sp, int B) {
    if (cp->size > 1 && sp) fatal("moe: experts with both context and sequence parallelism (the routing's group is one)");
    if (cp->size > 1) moe_seq_init_cp(g, cp, B);
    else if (sp) moe_seq_init_sp(g, tp_comm, tp_size, tp_rank, B * cp_local_T(cp));
    else *g = moe_seq_none();
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
// routed counts and the losses. Serial (one thread in the kernel builds): O(E N_l K).
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
    for (int e = 0; e < E; e++) {
        int row = off[e];
        for (int a = 0; a < N * K; a++) {
            if (l.expert[a] != e) continue;
            if (w.assign_row[(size_t)mine[a / K] * K + a % K] < 0) { l.assign_row[a] = -1; continue; }
            l.assign_row[a] = row;
            l.row_assign[row++] = a;
        }
    }
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

// logits (size N, E) FP32 in the micro-batch's token order from the rank's local (N, E); gathered: (size N, E) scratch
static void moe_seq_gather_logits(const MoESeqGroup* g, float* logits /*(size N, E)*/, float* gathered /*(size N, E)*/,
                                  const float* local /*(N,E)*/, int N, int E, cudaStream_t st) {
    if (N != g->n_local) fatal("moe_seq_gather_logits: the group holds %d tokens a rank, called with %d", g->n_local, N);
    comm_all_gather(g->comm, g->group, local, gathered, (size_t)N * E, st);
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
