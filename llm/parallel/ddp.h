// ddp.h: distributed data parallelism: gradients averaged over the dp group in buckets, each bucket
// launched as soon as the backward pass has finished its gradients, so that the communication of
// the later layers overlaps the backward pass of the earlier ones. After PyTorch DDP (Li et al. 2020,
// "PyTorch Distributed: Experiences on Accelerating Data Parallel Training", sec. 3.2.2 "Bucketing
// Gradients" and 3.2.3 "Overlap Computation with Communication"; sec. 3.2.4 "Gradient
// Accumulation": no communication in the micro-steps before the last one, `no_sync`).
//
// What is averaged. Rank r of N computes g_r, the mean gradient over its B*T*grad_accum tokens
// (dloss = 1/(B*T*grad_accum)); the all-reduce with COMM_AVG gives every rank
//     g = (1/N) sum_r g_r
// which is the mean gradient over all B*T*grad_accum*N tokens of the step: the gradient one process
// computes on the same global batch (test/test_ddp_zero.sh checks it, to float rounding).
//
// The buckets. A bucket is one unit of llm/model/stage.h (the 12 tensors of a layer, the final LayerNorm,
// the embedding), which llm/parallel/zero.h lays out back to back in one gradient buffer, so a bucket is
// one contiguous range and its all-reduce runs in place, without the copy into a bucket buffer
// (PyTorch DDP gets the same by making the gradients views into its buckets, sec. 3.2.2). Units
// finish in the order final, layer L-1, ..., layer 0, embed (wte also gets the LM head's gradient,
// at the start of the backward, so its bucket is ready only at the very end).
//
// Progress. In the CUDA and emulated builds a collective runs on NCCL's communication stream and the
// compute stream waits on it only at the end. Over MPI (the CPU build) a non-blocking collective
// moves only while the process is inside an MPI call, so every bucket launch also tests (MPI_Test)
// the pending ones; what is left is waited after the backward pass. How long the computation waited
// is measured by llm/comm/comm.h (comm_take_wait_ms: CUDA events on a GPU, host time over MPI): the
// step's "comm wait".
#pragma once
#include "../core/common.h"
#include "../comm/comm.h"

// ----------------------------------------------------------------------------
// the order of a step's data-parallel operations, recorded for the tests (--report-json): what no
// result shows, e.g. that a bucket's reduction starts while the backward goes on, or that ZeRO-3's
// next unit is gathered before the current one is computed
//     F u  the forward of unit u begins        B u  the backward of unit u begins
//     G u  the all-gather of unit u's parameters starts
//     R u  the reduction (all-reduce or reduce-scatter) of unit u's gradients starts
//     P n  the n reductions in flight are tested (over MPI, what moves them along)
//     E    the backward is over: the reductions still in flight are waited

#define DP_TRACE_CAP 4096
typedef struct {
    char what[DP_TRACE_CAP];
    int unit[DP_TRACE_CAP];
    int n;         // events recorded (at most DP_TRACE_CAP)
    int dropped;   // events past the cap
} DpTrace;

static inline void dp_trace(DpTrace* t, char what, int unit) {
    if (t == NULL) return;
    if (t->n == DP_TRACE_CAP) { t->dropped++; return; }
    t->what[t->n] = what;
    t->unit[t->n++] = unit;
}

// ----------------------------------------------------------------------------
// a queue of started collectives, oldest first (also used by llm/parallel/zero.h)

typedef struct {
    CommHandle* handles;  // (cap)
    int* tags;            // (cap) the caller's id of each (a unit)
    int count, cap;
    DpTrace* trace;       // where each poll is recorded, or NULL
} CommQueue;

static void commq_init(CommQueue* q, int cap) {
    q->handles = (CommHandle*)mallocCheck((size_t)cap * sizeof(CommHandle));
    q->tags = (int*)mallocCheck((size_t)cap * sizeof(int));
    q->count = 0;
    q->cap = cap;
    q->trace = NULL;
}

static void commq_free(CommQueue* q) {
    free(q->handles);
    free(q->tags);
    q->handles = NULL;
    q->tags = NULL;
}

static void commq_push(CommQueue* q, CommHandle h, int tag) {
    if (q->count == q->cap) fatal("commq_push: more than %d collectives pending", q->cap);
    q->handles[q->count] = h;
    q->tags[q->count] = tag;
    q->count++;
}

static void commq_remove(CommQueue* q, int i) {
    for (int j = i + 1; j < q->count; j++) {
        q->handles[j - 1] = q->handles[j];
        q->tags[j - 1] = q->tags[j];
    }
    q->count--;
}

// Tests every pending collective (which drives MPI's progress); the completed ones are waited
// (orders the compute stream after them in the CUDA build), removed, and their tags written to done
// (room for q->count). Returns how many completed.
static int commq_poll(Comm* c, CommQueue* q, int* done) {
    if (q->count > 0) dp_trace(q->trace, 'P', q->count);
    int n = 0;
    for (int i = 0; i < q->count;) {
        if (comm_test(c, &q->handles[i])) {
            comm_wait(c, &q->handles[i]);
            if (done) done[n] = q->tags[i];
            n++;
            commq_remove(q, i);
        } else {
            i++;
        }
    }
    return n;
}

// waits for the oldest pending collective and returns its tag (-1 if none)
static int commq_wait_oldest(Comm* c, CommQueue* q) {
    if (q->count == 0) return -1;
    comm_wait(c, &q->handles[0]);
    int tag = q->tags[0];
    commq_remove(q, 0);
    return tag;
}

// ----------------------------------------------------------------------------
// DDP's bucket launch: the all-reduce (average over the dp group) of one ready bucket, in place

// grads: (n) the bucket's gradients, contiguous; tag: its unit; g: the group that holds replicas of it (GROUP_DP, or
// GROUP_EDP for an experts unit split by expert parallelism)
static void ddp_bucket_ready(Comm* c, CommQueue* q, CommGroup g, floatX* grads, size_t n, int tag, cudaStream_t stream) {
    commq_push(q, comm_all_reduce_start(c, g, grads, grads, n, COMM_AVG, stream), tag);
    commq_poll(c, q, NULL);  // progress for the ones launched before
}
