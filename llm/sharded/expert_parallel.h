// expert_parallel.h: expert parallelism (--ep N): the E experts of every moe layer split over the N ranks of an
// ep group, E/N each, and the two all-to-alls per layer that bring each token copy to its expert's rank and its
// output back (GShard, Lepikhin et al. 2020, sec. 2.2-2.3 and 3.2; Switch Transformer, Fedus et al. 2021, sec.
// 2.2; Megatron-Core's all-to-all token dispatcher). The ep group is a fold of the dp axis (llm/comm/mesh.h,
// GROUP_EP: Megatron-Core's "parallel folding"): its ranks read different batches, and each routes its own
// tokens.
//
// One moe layer's forward on rank r of N (llm/model/moe.h calls these between the router and the experts):
//
//   route, permute        xp (R, C): this rank's kept token copies, expert-major over all E experts:
//                         expert e's rows [off[e], off[e+1]); the experts of rank j, [j E/N, (j+1) E/N),
//                         are one contiguous block of rows: what rank j gets
//   ep_exchange_counts    an all_to_all of the per-expert row counts (E floats, E/N per peer): recv[i][e],
//                         the rows rank i sends to local expert e (exact: counts < 2^24)
//   ep_dispatch           the all_to_all_v (llm/comm/comm_all_to_all_v.h) of the row blocks: rank-major on
//                         arrival (rank 0's rows for local experts 0..E/N-1, then rank 1's, ...), reordered
//                         expert-major (expert 0's rows from rank 0, 1, ..., then expert 1's: xl, Rl rows)
//   the local experts     on xl, each on its rows [loff[e], loff[e+1])   -> yl
//   ep_combine            the reverse: yl reordered rank-major, the all_to_all_v back with the counts swapped;
//                         the rows land where this rank's xp rows were: yp (R, C), which unpermute weights by the gates
//
// Each row exchange is blocking, or, in DualPipeV's overlapped pairs (EPTurn, llm/parallel/pipeline_pair.h), started
// non-blocking and waited after the other direction of the pair ran its next piece (ep_exchange_rows). The counts exchange stays blocking: the host needs the counts before it can plan the rows.
//
// The backward moves gradients the same two ways, in reverse: dyp (the gradient of yp, this rank's rows)
// dispatched like xp (to the experts' ranks), the local experts' backward, dxl combined back like yl.
// The counts of the forward serve the backward (kept per layer and micro-batch in MoEActs), so the
// backward exchanges no counts. A moe layer is never recomputed (llm/model/block.h), so recompute re-sends
// nothing.
//
// Bytes (the ledger, llm/comm/comm_ledger.h, all_to_all of GROUP_EP): per moe layer and micro-batch of
// N_tok tokens, forward: one exchange of the counts (E floats), the dispatch and the combine; backward: the
// dispatch of dyp and the combine of dxl. Each row dispatch sends the rows bound for the other ranks' experts:
// under uniform routing without drops, N_tok K C bytes(floatX) (N-1)/N each way (the formula
// test/test_moe_train.sh checks), and the ledger records the real routing's rows.
//
// The experts' parameters: the layout's experts units hold the rank's E/N experts (llm/model/units.h), and
// their gradients are averaged over GROUP_EDP (the ranks holding the same experts), the dense ones over
// GROUP_DP (llm/parallel/dp.h).
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../comm/comm.h"

// DualPipeV's overlapped pairs (llm/parallel/pipeline_pair.h): while set on a group, each dispatch and combine is
// started non-blocking, then pass() lets the other direction of the pair run its next piece, and only then is the
// exchange waited (and done() told, for the trace, when it was started: the interval from start to the wait's
// return). NULL: started and waited at once, as the blocking form.
typedef struct EPTurn {
    void (*pass)(void* ctx, const char* what);           // what: "dispatch" or "combine"
    void (*done)(void* ctx, const char* what, double t0, double exposed);  // t0: wall_ms() at the start; exposed:
                                                                           // the ms spent in the start and the wait
    void* ctx;
} EPTurn;

typedef struct EPGroup {
    EPTurn* turn;    // an overlapped pair's (above), or NULL
    Comm* comm;
    int size, rank;  // the ep group (GROUP_EP); size 1: every expert here, and every function below the identity
    int E, El;       // experts, and experts per rank E / size
    float* dev;      // (2 E) device: the rows this rank sends per expert, then those it receives per (rank, local expert)
    float* host;     // (E) host
    size_t* plan;    // (4 size) host: send counts, send offsets, receive counts, receive offsets (elements)
} EPGroup;

// why E experts cannot split over ep ranks, or NULL
static const char* ep_layout_error(int E, int ep, char* buf, size_t n) {
    if (ep < 1 || (ep > 1 && (E < 1 || E % ep != 0))) {
        snprintf(buf, n, "expert parallelism: %d experts do not split evenly over --ep %d", E, ep);
        return buf;
    }
    return NULL;
}

// E experts over comm's ep group (comm NULL: one process), which must have `expect` ranks (the layout's ep_size)
static void ep_init(EPGroup* g, Comm* comm, int E, int expect) {
    memset(g, 0, sizeof(*g));
    g->comm = comm;
    g->size = comm != NULL ? comm_group_size(comm, GROUP_EP) : 1;
    g->rank = comm != NULL ? comm_group_rank(comm, GROUP_EP) : 0;
    char err[160];
    if (ep_layout_error(E, g->size, err, sizeof(err))) fatal("%s", err);
    if (g->size != expect) fatal("expert parallelism: the layout splits the experts over %d ranks, the ep group has %d", expect, g->size);
    g->E = E;
    g->El = E / g->size;
    if (g->size == 1) return;
    g->dev = (float*)device_malloc(2 * (size_t)E * sizeof(float), MEM_WORKSPACE);
    g->host = (float*)mallocCheck((size_t)E * sizeof(float));
    g->plan = (size_t*)mallocCheck(4 * (size_t)g->size * sizeof(size_t));
}

static void ep_free(EPGroup* g) {
    if (g->dev != NULL) device_free(g->dev);
    free(g->host);
    free(g->plan);
    memset(g, 0, sizeof(*g));
}

// every expert in this process: no group (NULL, a caller without one), or a group of one
static inline int ep_local(const EPGroup* g) { return g == NULL || g->size == 1; }

// The rows the local experts can receive from one rank's N tokens: each token sends at most min(K, El) copies
// to this rank's El experts, and with a capacity each expert keeps at most cap of one rank's rows. Times size.
// Every expert here: all, the rows of this rank's own tokens.
static inline int ep_local_rows(const EPGroup* g, int N, int K, int cap, int all) {
    if (ep_local(g)) return all;
    long per = (long)N * (K < g->El ? K : g->El), capped = (long)cap * g->El;
    return (int)((per < capped ? per : capped) * g->size);
}
// the rows a buffer of the local experts' rows needs of its own: none when every expert is here (they are the
// permuted rows themselves: ep_alias)
static inline size_t ep_own_rows(const EPGroup* g, size_t rows) { return ep_local(g) ? 0 : rows; }
// *p = to when every expert is here (the local experts' rows are this rank's permuted rows)
static inline void ep_alias(const EPGroup* g, floatX** p, floatX* to) { if (ep_local(g)) *p = to; }
// the counts (host ints) a layer keeps for its backward: (size, El) received rows and El + 1 local offsets
static inline void ep_counts_alloc(const EPGroup* g, int** recv, int** loff) {
    if (ep_local(g)) { *recv = *loff = NULL; return; }
    *recv = (int*)mallocCheck((size_t)g->E * sizeof(int));
    *loff = (int*)mallocCheck(((size_t)g->El + 1) * sizeof(int));
}
// the local experts and where their rows start: every expert and off (every expert here), or E/ep and loff
static inline int ep_local_experts(const EPGroup* g, int E, const int* off, const int* loff, const int** lo) {
    *lo = ep_local(g) ? off : loff;
    return ep_local(g) ? E : g->El;
}

// off (E+1, host): this rank's rows per expert, expert-major. recv (size * El, host): out, the rows rank i sends to
// local expert e at [i El + e]. loff (El+1, host): out, where each local expert's rows start in the expert-major
// layout xl (loff[El]: the rows received).
static void ep_exchange_counts(EPGroup* g, const int* off, int* recv, int* loff, cudaStream_t st) {
    if (ep_local(g)) return;
    for (int e = 0; e < g->E; e++) g->host[e] = (float)(off[e + 1] - off[e]);  // (exact below 2^24 rows)
    copy_to_device(g->dev, g->host, (size_t)g->E * sizeof(float));
    comm_all_to_all(g->comm, GROUP_EP, g->dev, g->dev + g->E, (size_t)g->El, st);
    device_synchronize();
    copy_to_host(g->host, g->dev + g->E, (size_t)g->E * sizeof(float));
    for (int k = 0; k < g->E; k++) recv[k] = (int)g->host[k];
    loff[0] = 0;
    for (int e = 0; e < g->El; e++) {
        int n = 0;
        for (int i = 0; i < g->size; i++) n += recv[i * g->El + e];
        loff[e + 1] = loff[e] + n;
    }
}

// the rank-major <-> expert-major reorder of the received rows: segment (i, e), rank i's rows of local expert e,
// lies in the rank-major buffer after rank i's earlier experts and in the expert-major one after expert e's
// rows from ranks before i. to_expert 1: rm -> em; 0: em -> rm. Experts that received nothing are empty segments.
static void ep_reorder(const EPGroup* g, const int* recv, const int* loff, floatX* rm, floatX* em, int C, int to_expert,
                       cudaStream_t st) {
    size_t c = (size_t)C, at_rm = 0;
    for (int i = 0; i < g->size; i++) {
        for (int e = 0; e < g->El; e++) {
            size_t n = (size_t)recv[i * g->El + e], at_em = (size_t)loff[e];
            for (int q = 0; q < i; q++) at_em += (size_t)recv[q * g->El + e];
            if (n > 0) {
                if (to_expert) copy_device_to_device(em + at_em * c, rm + at_rm * c, n * c * sizeof(floatX), st);
                else copy_device_to_device(rm + at_rm * c, em + at_em * c, n * c * sizeof(floatX), st);
            }
            at_rm += n;
        }
    }
}

// the plan of one all_to_all_v: this rank's rows (off, expert-major over E) on one side, the rows of the local
// experts (recv) on the other; dispatch 1: send ours, receive theirs; 0: the reverse
static void ep_plan(EPGroup* g, const int* off, const int* recv, int C, int dispatch) {
    size_t N = (size_t)g->size, c = (size_t)C, *ours = g->plan + (dispatch ? 0 : 2 * N), *theirs = g->plan + (dispatch ? 2 * N : 0);
    size_t at = 0;
    for (int j = 0; j < g->size; j++) {
        ours[j] = (size_t)(off[(j + 1) * g->El] - off[j * g->El]) * c;  // count
        ours[N + j] = (size_t)off[j * g->El] * c;                        // offset
        size_t n = 0;
        for (int e = 0; e < g->El; e++) n += (size_t)recv[j * g->El + e];
        theirs[j] = n * c;
        theirs[N + j] = at;
        at += n * c;
    }
}

// One row exchange of the group (the all_to_all_v of ep_plan's plan): blocking without a turn; in a pair (g->turn)
// started, the other direction's next piece run (pass), then waited. The send buffer stays untouched and the
// receive buffer unread until the wait returns.
static void ep_exchange_rows(EPGroup* g, const floatX* send, floatX* recv, const char* what, cudaStream_t st) {
    size_t N = (size_t)g->size, *p = g->plan;
    if (g->turn == NULL) {
        comm_all_to_all_v(g->comm, GROUP_EP, send, p, p + N, recv, p + 2 * N, p + 3 * N, st);
        return;
    }
    double t0 = wall_ms();
    CommHandle h = comm_all_to_all_v_start(g->comm, GROUP_EP, send, p, p + N, recv, p + 2 * N, p + 3 * N, st);
    double t1 = wall_ms();
    g->turn->pass(g->turn->ctx, what);
    double t2 = wall_ms();
    comm_wait(g->comm, &h);
    g->turn->done(g->turn->ctx, what, t0, (t1 - t0) + (wall_ms() - t2));
}

// xp (off[E] rows, C; this rank's rows) -> xl (loff[El] rows, C; the local experts', expert-major); rm: (loff[El], C)
// scratch for the rank-major arrivals
static void ep_dispatch(EPGroup* g, const floatX* xp, const int* off, const int* recv, const int* loff, floatX* rm,
                        floatX* xl, int C, cudaStream_t st) {
    if (ep_local(g)) return;  // (xl is xp: ep_alias)
    ep_plan(g, off, recv, C, 1);
    ep_exchange_rows(g, xp, rm, "dispatch", st);
    ep_reorder(g, recv, loff, rm, xl, C, 1, st);
}

// yl (loff[El] rows, C; the local experts' outputs, expert-major) -> yp (off[E] rows, C; this rank's rows, where
// its xp rows were); rm: scratch as above
static void ep_combine(EPGroup* g, const floatX* yl, const int* off, const int* recv, const int* loff, floatX* rm,
                       floatX* yp, int C, cudaStream_t st) {
    if (ep_local(g)) return;  // (yl is yp)
    ep_reorder(g, recv, loff, rm, (floatX*)yl, C, 0, st);
    ep_plan(g, off, recv, C, 0);
    ep_exchange_rows(g, rm, yp, "combine", st);
}
