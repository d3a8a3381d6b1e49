// context_parallel.h: context parallelism, the sequence of every micro-batch split over the cp ranks of
// the mesh (llm/comm/comm_mesh.h: GROUP_CP, next to tp in the rank order) inside attention too.
// Sequence parallelism (Korthikanti et al. 2022) splits the tokens only between the linear layers; the
// attention core still sees the whole sequence on every rank. Here each rank keeps its own tokens from
// the embedding to the loss: the embedding looks up its tokens at their positions, LayerNorms, the MLP and
// the residual adds are per token, the loss is the mean over its targets (the ranks' means are averaged:
// equally many tokens each). Only attention, where a query needs every earlier key, talks:
//
//   ring attention (--cp-impl ring; Liu et al. 2023, "Ring Attention with Blockwise Transformers for
//   Near-Infinite Context", sec. 3): the K/V block of each rank travels around the ring of N ranks; at
//   step s rank r holds the block of rank r - s, computes its queries against it while the next block is
//   already on its way, and merges the partial result with the online softmax (Milakov & Gimelshein 2018;
//   the block pieces of llm/ops/attention_ring.cuh, whose CPU reference is llm/ops/attention_blocks.h; rows
//   move between buffers with llm/ops/rows.cuh).
//   The backward sends the K/V blocks around again, and each block's dK/dV accumulator travels with it
//   back to its owner. Sent per rank, per layer and micro-batch, with S = B (T/N) 2 C bytes of K/V in
//   floatX (b bytes each) and 2 C (T/N) B 4 bytes of FP32 dK/dV:
//       forward   (N-1) K/V blocks                        (N-1) b B T/N 2C
//       backward  (N-1) K/V blocks + (N-1) dK/dV blocks   (N-1) (b + 4) B T/N 2C
//   (a block's dK/dV accumulator starts one rank on and reaches its owner after N-1 hops, where the owner adds
//   its own queries' part last).
//   Causal blocks: a pair (query chunk, key chunk) is skipped when every key is after every query,
//   masked on its diagonal, full below it.
//
//   load balance (--cp-balance): the sequence is cut into 2N chunks of c = T/(2N) tokens. contiguous:
//   rank r holds chunks 2r and 2r+1 (its T/N consecutive tokens): under the causal mask the last rank
//   computes 2N-1 times as many pairs as the first. zigzag (Megatron / Transformer Engine's load balancing;
//   Brandon et al. 2023, "Striped Attention", the same idea by stripes): rank r holds chunks r and
//   2N-1-r, and every rank computes the same 2N pairs' worth (2 half-blocks at each step but its own).
//
//   Ulysses (--cp-impl ulysses; Jacobs et al. 2023, "DeepSpeed Ulysses", sec. 3.1): an all-to-all over cp
//   turns the sequence split of q, k, v into a head split (rank j gets every token of heads
//   [j H/N, (j+1) H/N)), the unchanged attention runs on the whole sequence for H/N heads, and an
//   all-to-all turns its output back. Sent per rank: (N-1)/N of each all-to-all's buffer: forward q,k,v
//   (3 slices of B T/N C b bytes) and out (1 slice); backward dout (1) and dq,dk,dv (3). The heads must
//   split: H divisible by tp x cp.
//
// The one-process layout is the special case N = 1 (plain attention). A rank's chunks are cp_chunks; the
// stage (llm/model/stage.h) picks a micro-batch's tokens with cp_take_tokens and their rows of the position
// embedding, and averages the loss over the cp group.
// Checked: test/test_cp.sh (every layout against one process, the ledger against the counts above, the
// activation bytes per rank against 1/N) and test/test_attention_ring.cu (the block pieces).
#pragma once
#include <time.h>
#include "../core/common.h"
#include "../core/device.h"
#include "../comm/comm.h"
#include "../ops/attention.cuh"
#include "../ops/attention_ring.cuh"
#include "../ops/rows.cuh"

typedef enum { CP_RING = 0, CP_ULYSSES = 1 } CPImpl;
#define CP_TIMED 256  // GPU: timed stretches between two reads of the events
typedef enum { CP_ZIGZAG = 0, CP_CONTIGUOUS = 1 } CPBalance;
static inline const char* cp_impl_name(int i) { return i == CP_ULYSSES ? "ulysses" : "ring"; }
static inline const char* cp_balance_name(int b) { return b == CP_CONTIGUOUS ? "contiguous" : "zigzag"; }

// this rank's place in the cp group (size 1, comm NULL: the whole sequence on every rank) and the
// attention's workspaces (cp_alloc)
typedef struct {
    Comm* comm;
    int size, rank;
    CPImpl impl;
    CPBalance balance;
    int T;              // the whole sequence; the rank holds Tl = T / size tokens, 2 chunks of c = T / (2 size)
    int c;
    int B, Ca, H;       // the shapes the workspaces were made for: channels and heads of the rank's attention
    floatX* kv[2];      // ring: (B, Tl, 2Ca) the K/V block being computed on, and the next one arriving
    float* acc;         // ring forward: (2, B, H, c, hs) O~, then (2, B, H, c) m and l; backward: dq (B, Tl, Ca)
    float* dkv[2];      // ring backward: (B, Tl, 2Ca) FP32 dK/dV: the travelling accumulator and the next one
    float* D;           // ring backward: (B, H, Tl) rowsum(dO * O)
    floatX* send;       // Ulysses: (3 B Tl Ca) an all-to-all's send buffer (N blocks)
    floatX* recv;       // Ulysses: (3 B Tl Ca) its receive buffer
    floatX* dh;         // Ulysses backward: (B, T, 4 Ca/N) dout and dqkv in the head split
    float* scratch;     // Ulysses backward: (B, H/N, T) the attention backward's row dots
    void* mem;
    double attn_ms;     // the attention's compute time (its blocks, not its communication) since cp_take_ms
    double t0;          // CPU builds: the process CPU time at cp_time_begin
#if LLM_BUILD_CUDA
    cudaEvent_t ev[2 * CP_TIMED];  // the GPU: an event pair around each timed stretch of kernels, read by cp_take_ms
    int n_ev;
#endif
} CPGroup;

static CPGroup cp_none(int T) {
    CPGroup g;
    memset(&g, 0, sizeof(g));
    g.size = 1;
    g.T = T;
    g.c = T / 2;
    return g;
}

// the chunk indices (0 .. 2N-1) rank r holds, in its local order
static inline void cp_chunks(const CPGroup* g, int r, int ids[2]) {
    int N = g->size;
    if (g->balance == CP_ZIGZAG) { ids[0] = r; ids[1] = 2 * N - 1 - r; }
    else { ids[0] = 2 * r; ids[1] = 2 * r + 1; }
}

// The layout error of --cp in err and 1, or 0: T splits into 2N chunks; Ulysses needs the rank's heads to split
static int cp_layout_error(int T, int heads_per_tp, int tp, int cp, int impl, char* err, size_t cap) {
    err[0] = '\0';
    if (cp <= 1) return 0;
    if (T % (2 * cp) != 0) {
        snprintf(err, cap, "--cp %d: expected the sequence length -t %d to divide into 2 x cp = %d chunks", cp, T, 2 * cp);
    } else if (impl == CP_ULYSSES && heads_per_tp % cp != 0) {
        snprintf(err, cap, "--cp-impl ulysses: expected the %d heads to divide over --tp %d x --cp %d (each rank attends "
                 "with whole heads), found %d heads per tp rank", heads_per_tp * tp, tp, cp, heads_per_tp);
    }
    return err[0] != '\0';
}

// the group of this process (comm NULL or cp 1: none)
static CPGroup cp_group(Comm* comm, int T, int impl, int balance) {
    CPGroup g = cp_none(T);
    if (comm == NULL || comm->cp <= 1) return g;
    g.comm = comm;
    g.size = comm->cp;
    g.rank = comm->cp_rank;
    g.impl = (CPImpl)impl;
    g.balance = (CPBalance)balance;
    g.c = T / (2 * g.size);
    return g;
}

static inline int cp_local_T(const CPGroup* g) { return g->T / g->size; }

// dst (B, Tl) = the rank's tokens of src (B, T) (host)
static void cp_take_tokens(const CPGroup* g, int* dst, const int* src, int B) {
    int Tl = cp_local_T(g), ids[2];
    cp_chunks(g, g->rank, ids);
    for (int b = 0; b < B; b++)
        for (int k = 0; k < 2; k++)
            memcpy(dst + (size_t)b * Tl + k * g->c, src + (size_t)b * g->T + (size_t)ids[k] * g->c, (size_t)g->c * sizeof(int));
}

// the workspaces for micro-batches of B sequences, attention over Ca channels in H heads (the rank's
// share under tensor parallelism). One set per stage: the attention of one layer at a time uses them.
static void cp_alloc(CPGroup* g, int B, int Ca, int H) {
    g->B = B; g->Ca = Ca; g->H = H;
    if (g->size <= 1) return;
#if LLM_BUILD_CUDA
    for (int i = 0; i < 2 * CP_TIMED; i++) cudaCheck(cudaEventCreate(&g->ev[i]));
#endif
    size_t Tl = (size_t)cp_local_T(g), kv = (size_t)B * Tl * 2 * Ca, hs = (size_t)(Ca / H);
    size_t acc = 2 * (size_t)B * H * g->c * (hs + 2);  // O~, m, l of both chunks
    if (acc < (size_t)B * Tl * Ca) acc = (size_t)B * Tl * Ca;  // (the backward's dq)
    size_t bytes = 0;
    if (g->impl == CP_RING) {
        bytes = 2 * kv * sizeof(floatX) + acc * sizeof(float) + 2 * kv * sizeof(float) + (size_t)B * H * Tl * sizeof(float);
    } else {
        size_t T = (size_t)g->T, Cn = (size_t)(Ca / g->size);
        bytes = 2 * 3 * (size_t)B * Tl * Ca * sizeof(floatX) + (size_t)B * T * 4 * Cn * sizeof(floatX) +
                (size_t)B * (H / g->size) * T * sizeof(float);
    }
    bytes += 16 * 64;  // alignment
    char* p = (char*)device_malloc(bytes, MEM_WORKSPACE);
    g->mem = p;
    auto take = [&](size_t n) { char* q = p; p += (n + 63) / 64 * 64; return (void*)q; };
    if (g->impl == CP_RING) {
        g->kv[0] = (floatX*)take(kv * sizeof(floatX));
        g->kv[1] = (floatX*)take(kv * sizeof(floatX));
        g->acc = (float*)take(acc * sizeof(float));
        for (int i = 0; i < 2; i++) g->dkv[i] = (float*)take(kv * sizeof(float));
        g->D = (float*)take((size_t)B * H * Tl * sizeof(float));
    } else {
        size_t T = (size_t)g->T, Cn = (size_t)(Ca / g->size);
        g->send = (floatX*)take(3 * (size_t)B * Tl * Ca * sizeof(floatX));
        g->recv = (floatX*)take(3 * (size_t)B * Tl * Ca * sizeof(floatX));
        g->dh = (floatX*)take((size_t)B * T * 4 * Cn * sizeof(floatX));
        g->scratch = (float*)take((size_t)B * (H / g->size) * T * sizeof(float));
    }
}

static void cp_free(CPGroup* g) {
    if (g->mem == NULL) return;
    device_free(g->mem);
    g->mem = NULL;
#if LLM_BUILD_CUDA
    for (int i = 0; i < 2 * CP_TIMED; i++) cudaCheck(cudaEventDestroy(g->ev[i]));
#endif
}

// The attention's compute time, measured per rank (the balance of --cp-balance): on the CPU (and the emulated
// build, whose kernels run on the host) the process CPU time of the block computations, which a rank sharing
// its cores with others does not inflate; on a GPU an event pair around each stretch of kernels on the stream.
static inline double cp_cpu_ms(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) fatal("clock_gettime failed (%s:%d)", __FILE__, __LINE__);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
static void cp_events_read(CPGroup* g) {
#if LLM_BUILD_CUDA
    for (int i = 0; i < g->n_ev; i++) {
        float ms = 0.0f;
        cudaCheck(cudaEventSynchronize(g->ev[2 * i + 1]));
        cudaCheck(cudaEventElapsedTime(&ms, g->ev[2 * i], g->ev[2 * i + 1]));
        g->attn_ms += ms;
    }
    g->n_ev = 0;
#else
    (void)g;
#endif
}
static inline void cp_time_begin(CPGroup* g, cudaStream_t s) {
#if LLM_BUILD_CUDA
    if (g->n_ev == CP_TIMED) cp_events_read(g);
    cudaCheck(cudaEventRecord(g->ev[2 * g->n_ev], s));
#else
    (void)s;
    g->t0 = cp_cpu_ms();
#endif
}
static inline void cp_time_end(CPGroup* g, cudaStream_t s) {
#if LLM_BUILD_CUDA
    cudaCheck(cudaEventRecord(g->ev[2 * g->n_ev + 1], s));
    g->n_ev++;
#else
    (void)s;
    g->attn_ms += cp_cpu_ms() - g->t0;
#endif
}

// the attention compute time since the last call (ms), and the counter back to zero
static double cp_take_ms(CPGroup* g) {
    cp_events_read(g);
    double t = g->attn_ms;
    g->attn_ms = 0.0;
    return t;
}

// elements of the Ulysses activation a block keeps beside qkv: the head split's q,k,v and output
static inline size_t cp_heads_elems(const CPGroup* g, int B, int Tl, int Ca) {
    return g != NULL && g->size > 1 && g->impl == CP_ULYSSES ? (size_t)4 * B * Tl * Ca : 0;
}

// ----------------------------------------------------------------------------
// ring attention

// one ring step's exchange, blocking: send `mine` to the next rank, receive the previous rank's into `next`
static void cp_ring_exchange(CPGroup* g, const void* mine, void* next, size_t n, CommDtype dt, cudaStream_t s) {
    int N = g->size, r = g->rank;
    CommExchange x = comm_exchange_start(g->comm, GROUP_CP, mine, next, n, (r + 1) % N, (r + N - 1) % N, dt, s);
    comm_exchange_wait(g->comm, &x);
}

// K and V of the rank's tokens out of qkv (B, Tl, 3Ca) into kv (B, Tl, 2Ca)
static void cp_pack_kv(const CPGroup* g, floatX* kv, const floatX* qkv, int B, int Tl, int Ca, cudaStream_t s) {
    (void)g;
    rows_copy(kv, (size_t)Tl * 2 * Ca, 2 * Ca, qkv + Ca, (size_t)Tl * 3 * Ca, 3 * Ca, B, Tl, 2 * Ca, s);
}

// calls f(qi, ki, causal) for the block pairs of the rank's query chunks against the key chunks of rank o
// that are not fully masked
template <class F>
static void cp_ring_pairs(const CPGroup* g, int o, F f) {
    int mine[2], theirs[2];
    cp_chunks(g, g->rank, mine);
    cp_chunks(g, o, theirs);
    for (int qi = 0; qi < 2; qi++)
        for (int ki = 0; ki < 2; ki++)
            if (theirs[ki] <= mine[qi]) f(qi, ki, theirs[ki] == mine[qi]);
}

static void cp_ring_forward(CPGroup* g, floatX* out /*(B,Tl,Ca)*/, float* lse /*(B,H,Tl)*/, const floatX* qkv /*(B,Tl,3Ca)*/,
                            int B, int Tl, int Ca, int H, cudaStream_t s) {
    int N = g->size, r = g->rank, c = g->c, hs = Ca / H;
    size_t o_elems = (size_t)B * H * c * hs, ml = (size_t)B * H * c;
    float* O[2] = {g->acc, g->acc + o_elems};
    float* m[2] = {g->acc + 2 * o_elems, g->acc + 2 * o_elems + ml};
    float* l[2] = {g->acc + 2 * o_elems + 2 * ml, g->acc + 2 * o_elems + 3 * ml};
    for (int k = 0; k < 2; k++) attention_pair_init(O[k], m[k], l[k], B, H, c, hs, s);
    cp_pack_kv(g, g->kv[0], qkv, B, Tl, Ca, s);
    size_t q_bs = (size_t)Tl * 3 * Ca, kv_bs = (size_t)Tl * 2 * Ca, n_kv = (size_t)B * Tl * 2 * Ca;
    for (int step = 0; step < N; step++) {
        int o = (r - step + N) % N, cur = step % 2;
        const floatX* kv = g->kv[cur];
        CommExchange ahead;  // the next block on its way (from rank r-1; this one to r+1) while this one is computed
        if (step < N - 1) ahead = comm_exchange_start(g->comm, GROUP_CP, kv, g->kv[1 - cur], n_kv, (r + 1) % N, (r + N - 1) % N, comm_dtype_of(kv), s);
        cp_time_begin(g, s);
        cp_ring_pairs(g, o, [&](int qi, int ki, int causal) {
            attention_pair_forward(O[qi], m[qi], l[qi], qkv + (size_t)qi * c * 3 * Ca, q_bs, 3 * Ca,
                                   kv + (size_t)ki * c * 2 * Ca, kv + (size_t)ki * c * 2 * Ca + Ca, kv_bs, 2 * Ca,
                                   B, H, hs, c, c, causal, s);
        });
        cp_time_end(g, s);
        if (step < N - 1) comm_exchange_wait(g->comm, &ahead);
    }
    cp_time_begin(g, s);
    for (int k = 0; k < 2; k++) {
        attention_pair_finalise(out + (size_t)k * c * Ca, (size_t)Tl * Ca, Ca, lse + (size_t)k * c, Tl, O[k], m[k], l[k], B,
                                H, hs, c, s);
    }
    cp_time_end(g, s);
}

static void cp_ring_backward(CPGroup* g, floatX* dqkv /*(B,Tl,3Ca)*/, const floatX* dout /*(B,Tl,Ca)*/,
                             const floatX* qkv /*(B,Tl,3Ca)*/, const floatX* out /*(B,Tl,Ca)*/, const float* lse /*(B,H,Tl)*/,
                             int B, int Tl, int Ca, int H, cudaStream_t s) {
    int N = g->size, r = g->rank, c = g->c, hs = Ca / H;
    size_t q_bs = (size_t)Tl * 3 * Ca, kv_bs = (size_t)Tl * 2 * Ca, n_kv = (size_t)B * Tl * 2 * Ca, o_bs = (size_t)Tl * Ca;
    float* dq = g->acc;                              // (B, Tl, Ca)
    float *travel = g->dkv[0], *next = g->dkv[1];    // (B, Tl, 2Ca) each: a block's dK/dV on its way home
    // the pairs of the rank's queries with the K/V block of rank o (k, v: its rows, strides kbs, kts), dK/dV into dkv
    auto pairs = [&](int o, const floatX* k, const floatX* v, size_t kbs, size_t kts, float* dkv) {
        cp_time_begin(g, s);
        cp_ring_pairs(g, o, [&](int qi, int ki, int causal) {
            size_t qo = (size_t)qi * c, ko = (size_t)ki * c;
            attention_pair_backward(dq + qo * Ca, o_bs, Ca, dkv + ko * 2 * Ca, dkv + ko * 2 * Ca + Ca, kv_bs, 2 * Ca,
                                    dout + qo * Ca, o_bs, Ca, lse + qo, g->D + qo, Tl, qkv + qo * 3 * Ca, q_bs, 3 * Ca,
                                    k + ko * kts, v + ko * kts, kbs, kts, B, H, hs, c, c, causal, s);
        });
        cp_time_end(g, s);
    };
    cp_time_begin(g, s);
    rows_zero_f32(dq, o_bs, Ca, B, Tl, Ca, s);
    attention_pair_dot(g->D, Tl, dout, out, o_bs, Ca, B, H, hs, Tl, s);
    cp_time_end(g, s);
    cp_pack_kv(g, g->kv[0], qkv, B, Tl, Ca, s);
    // steps 1 .. N-1: the other ranks' blocks; block o's dK/dV accumulator starts at rank o+1 (step 1) and
    // is handed on after each step, reaching o after N-1 hops. The rank's own block is computed last, into
    // the accumulator that came home (its K and V read in place from qkv).
    for (int step = 0; step < N; step++) {
        int o = (r - step + N) % N, cur = step % 2;
        const floatX* kv = g->kv[cur];
        CommExchange ahead;  // the next K/V block travels while this one is computed
        if (step < N - 1) ahead = comm_exchange_start(g->comm, GROUP_CP, kv, g->kv[1 - cur], n_kv, (r + 1) % N, (r + N - 1) % N, comm_dtype_of(kv), s);
        if (step >= 1) {
            if (step == 1) rows_zero_f32(travel, kv_bs, 2 * Ca, B, Tl, 2 * Ca, s);  // block r-1's accumulator starts here
            pairs(o, kv, kv + Ca, kv_bs, 2 * Ca, travel);
        }
        if (step < N - 1) comm_exchange_wait(g->comm, &ahead);
        if (step >= 1) {  // block o's accumulator on to the next rank (its owner after the last step)
            cp_ring_exchange(g, travel, next, n_kv, COMM_FLOAT, s);
            float* t = travel; travel = next; next = t;
        }
    }
    pairs(r, qkv + Ca, qkv + 2 * Ca, q_bs, 3 * Ca, travel);  // the own block, into what came home
    cp_time_begin(g, s);
    rows_store_f32(dqkv, q_bs, 3 * Ca, dq, o_bs, Ca, B, Tl, Ca, s);
    rows_store_f32(dqkv + Ca, q_bs, 3 * Ca, travel, kv_bs, 2 * Ca, B, Tl, 2 * Ca, s);
    cp_time_end(g, s);
}

// ----------------------------------------------------------------------------
// Ulysses

// send blocks j of `width` channels [j w, (j+1) w) of each of `parts` parts (part p at src + p*Ca) of the
// rank's tokens: send (N, B, Tl, parts * w)
static void cp_ulysses_pack(const CPGroup* g, floatX* send, const floatX* src, size_t src_ts, int parts, int B, int Tl,
                            int Ca, cudaStream_t s) {
    int N = g->size, w = Ca / N;
    size_t blk = (size_t)B * Tl * parts * w;
    for (int j = 0; j < N; j++)
        for (int p = 0; p < parts; p++)
            rows_copy(send + j * blk + (size_t)p * w, (size_t)Tl * parts * w, (size_t)parts * w, src + (size_t)p * Ca + (size_t)j * w,
                      (size_t)Tl * src_ts, src_ts, B, Tl, w, s);
}

// Between the all-to-all's blocks and the sequence order: blocks (N, B, Tl, rowlen), block i holding rank i's
// tokens (its chunks, cp_chunks), and seq (B, T, rowlen) in position order. to_seq = 1: seq = blocks reordered
// (after an all-to-all); 0: blocks = seq's rows by rank (before one).
static void cp_ulysses_reorder(const CPGroup* g, floatX* blocks, floatX* seq, int rowlen, int B, int to_seq, cudaStream_t s) {
    int N = g->size, Tl = cp_local_T(g), c = g->c;
    size_t blk = (size_t)B * Tl * rowlen, bbs = (size_t)Tl * rowlen, sbs = (size_t)g->T * rowlen;
    for (int i = 0; i < N; i++) {
        int ids[2];
        cp_chunks(g, i, ids);
        for (int k = 0; k < 2; k++) {
            floatX* b = blocks + i * blk + (size_t)k * c * rowlen;  // rank i's chunk k
            floatX* q = seq + (size_t)ids[k] * c * rowlen;          // its positions
            if (to_seq) rows_copy(q, sbs, rowlen, b, bbs, rowlen, B, c, rowlen, s);
            else rows_copy(b, bbs, rowlen, q, sbs, rowlen, B, c, rowlen, s);
        }
    }
}

// recv (N, B, Tl, parts * w): block j holds heads j's channels of every part; to dst (B, Tl, dst_ts), part p at p*Ca
static void cp_ulysses_unpack(const CPGroup* g, floatX* dst, size_t dst_ts, const floatX* recv, int parts, int B, int Tl,
                              int Ca, cudaStream_t s) {
    int N = g->size, w = Ca / N;
    size_t blk = (size_t)B * Tl * parts * w;
    for (int j = 0; j < N; j++)
        for (int p = 0; p < parts; p++)
            rows_copy(dst + (size_t)p * Ca + (size_t)j * w, (size_t)Tl * dst_ts, dst_ts, recv + j * blk + (size_t)p * w,
                      (size_t)Tl * parts * w, (size_t)parts * w, B, Tl, w, s);
}

// heads (B, T, 4 Ca/N): [q k v | out] of the rank's heads over the whole sequence, kept for the backward
static void cp_ulysses_forward(CPGroup* g, floatX* out /*(B,Tl,Ca)*/, float* lse /*(B,H/N,T)*/, floatX* heads,
                               const floatX* qkv /*(B,Tl,3Ca)*/, int B, int Tl, int Ca, int H, cudaStream_t s) {
    int N = g->size, w = Ca / N, T = g->T;
    size_t n3 = (size_t)B * Tl * 3 * w, n1 = (size_t)B * Tl * w;
    floatX* qkv_h = heads;                        // (B, T, 3w)
    floatX* out_h = heads + (size_t)B * T * 3 * w;  // (B, T, w)
    cp_ulysses_pack(g, g->send, qkv, 3 * Ca, 3, B, Tl, Ca, s);
    comm_all_to_all(g->comm, GROUP_CP, g->send, g->recv, n3, s);
    cp_ulysses_reorder(g, g->recv, qkv_h, 3 * w, B, 1, s);
    cp_time_begin(g, s);
    attention_forward(out_h, lse, qkv_h, B, T, w, H / N, s);
    cp_time_end(g, s);
    cp_ulysses_reorder(g, g->send, out_h, w, B, 0, s);
    comm_all_to_all(g->comm, GROUP_CP, g->send, g->recv, n1, s);
    cp_ulysses_unpack(g, out, Ca, g->recv, 1, B, Tl, Ca, s);
}

static void cp_ulysses_backward(CPGroup* g, floatX* dqkv /*(B,Tl,3Ca)*/, const floatX* dout /*(B,Tl,Ca)*/,
                                const floatX* heads /*(B,T,4Ca/N)*/, const float* lse, int B, int Tl, int Ca, int H,
                                cudaStream_t s) {
    int N = g->size, w = Ca / N, T = g->T;
    size_t n3 = (size_t)B * Tl * 3 * w, n1 = (size_t)B * Tl * w;
    const floatX* qkv_h = heads;
    const floatX* out_h = heads + (size_t)B * T * 3 * w;
    floatX* dout_h = g->dh;                         // (B, T, w)
    floatX* dqkv_h = g->dh + (size_t)B * T * w;     // (B, T, 3w)
    cp_ulysses_pack(g, g->send, dout, Ca, 1, B, Tl, Ca, s);
    comm_all_to_all(g->comm, GROUP_CP, g->send, g->recv, n1, s);
    cp_ulysses_reorder(g, g->recv, dout_h, w, B, 1, s);
    cp_time_begin(g, s);
    attention_backward(dqkv_h, g->scratch, dout_h, qkv_h, out_h, lse, B, T, w, H / N, s);
    cp_time_end(g, s);
    cp_ulysses_reorder(g, g->send, dqkv_h, 3 * w, B, 0, s);
    comm_all_to_all(g->comm, GROUP_CP, g->send, g->recv, n3, s);
    cp_ulysses_unpack(g, dqkv, 3 * Ca, g->recv, 3, B, Tl, Ca, s);
}

// ----------------------------------------------------------------------------
// the block's attention core: plain attention (no cp), ring or Ulysses. qkv, out: the rank's Tl tokens.
// lse: (B, H, Tl) elements (Ulysses: (B, H/N, T), the same count). heads: Ulysses' kept head split
// (cp_heads_elems), else unused.

static void context_attention_forward(CPGroup* g, floatX* out, float* lse, floatX* heads, const floatX* qkv, int B, int Tl,
                                      int Ca, int H, cudaStream_t s) {
    if (g == NULL || g->size <= 1) attention_forward(out, lse, qkv, B, Tl, Ca, H, s);
    else if (g->impl == CP_RING) cp_ring_forward(g, out, lse, qkv, B, Tl, Ca, H, s);
    else cp_ulysses_forward(g, out, lse, heads, qkv, B, Tl, Ca, H, s);
}

// dqkv overwritten; scratch: the plain attention's (B,H,Tl) floats
static void context_attention_backward(CPGroup* g, floatX* dqkv, float* scratch, const floatX* dout, const floatX* qkv,
                                       const floatX* out, const float* lse, const floatX* heads, int B, int Tl, int Ca, int H,
                                       cudaStream_t s) {
    if (g == NULL || g->size <= 1) attention_backward(dqkv, scratch, dout, qkv, out, lse, B, Tl, Ca, H, s);
    else if (g->impl == CP_RING) cp_ring_backward(g, dqkv, dout, qkv, out, lse, B, Tl, Ca, H, s);
    else cp_ulysses_backward(g, dqkv, dout, heads, lse, B, Tl, Ca, H, s);
}
