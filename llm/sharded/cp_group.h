// cp_group.h: context parallelism's group: this rank's place on the mesh's cp axis (llm/comm/mesh.h), how the
// sequence is cut into chunks and which a rank holds (--cp-balance), the layout's checks, the attention's
// workspaces and the measured attention time. The algorithms that use it: llm/sharded/ring_attention.h,
// llm/sharded/ulysses_attention.h; what the model calls: llm/sharded/context_parallel.h.
//
//   load balance (--cp-balance): the sequence is cut into 2N chunks of c = T/(2N) tokens. contiguous:
//   rank r holds chunks 2r and 2r+1 (its T/N consecutive tokens): under the causal mask the last rank
//   computes 2N-1 times as many pairs as the first. zigzag (Megatron / Transformer Engine's load balancing;
//   Brandon et al. 2023, "Striped Attention", the same idea by stripes): rank r holds chunks r and
//   2N-1-r, and every rank computes the same 2N pairs' worth (2 half-blocks at each step but its own).
#pragma once
#include <time.h>
#include "../core/common.h"
#include "../core/device.h"
#include "../comm/comm.h"

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
    int* tokens;        // (B, Tl) host: the rank's tokens of a micro-batch's inputs or targets (cp_local_tokens)
    floatX* wpe;        // (Tl, C) the position embeddings of the rank's positions (cp_local_wpe)
    floatX* dwpe;       // (Tl, C) their gradients (cp_local_dwpe)
    float* loss;        // (2) the loss's sum over the group (cp_mean_loss)
    int C;              // the channels of the embedding's rows
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

// the group of this process: the mesh's cp axis (comm NULL or cp 1: none)
static CPGroup cp_group(Comm* comm, int T, int impl, int balance) {
    CPGroup g = cp_none(T);
    if (comm == NULL || comm->mesh.cp.size <= 1) return g;
    g.comm = comm;
    g.size = comm->mesh.cp.size;
    g.rank = comm->mesh.cp.rank;
    g.impl = (CPImpl)impl;
    g.balance = (CPBalance)balance;
    g.c = T / (2 * g.size);
    return g;
}

static inline int cp_local_T(const CPGroup* g) { return g->T / g->size; }

// the workspaces for micro-batches of B sequences, embeddings of C channels and attention over Ca channels
// in H heads (the rank's share under tensor parallelism). One set per stage: the attention of one layer at a
// time uses them. None without cp.
static void cp_alloc(CPGroup* g, int B, int C, int Ca, int H) {
    g->B = B; g->C = C; g->Ca = Ca; g->H = H;
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
    bytes += 2 * Tl * (size_t)C * sizeof(floatX) + 2 * sizeof(float);  // the embedding's rows, the loss
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
    g->wpe = (floatX*)take(Tl * C * sizeof(floatX));
    g->dwpe = (floatX*)take(Tl * C * sizeof(floatX));
    g->loss = (float*)take(2 * sizeof(float));
    g->tokens = (int*)mallocCheck((size_t)B * Tl * sizeof(int));
}

static void cp_free(CPGroup* g) {
    if (g->mem == NULL) return;
    device_free(g->mem);
    g->mem = NULL;
    free(g->tokens);
    g->tokens = NULL;
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

