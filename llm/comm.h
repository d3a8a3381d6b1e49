// comm.h: the collectives the parallel stages call, each naming its group of the process mesh, over
// NCCL (CUDA build, and the emulated build through dev/emu/nccl_emu.h) or MPI (CPU build), and the
// time the computation waits for communication. Its parts, each in its own file and included here:
//     llm/comm_mesh.h    the dp x pp x tp mesh: its groups, comm_init, one GPU per process
//     llm/comm_ledger.h  the per-rank ledger of what every collective moved (the ring model)
//     llm/comm_p2p.h     point to point within a group: send, recv, sendrecv, batches of them
//
// Transports. One code path per kind of memory:
//     CUDA build      NCCL on a communication stream; MPI only starts the processes and carries
//                     each group's ncclUniqueId
//     emulated build  the same NCCL code, against dev/emu/nccl_emu.h: NCCL's API implemented over
//                     MPI on the CPU, with NCCL's semantics and argument checks, so CI runs the code
//                     every multi-GPU run takes
//     CPU build       MPI on host memory (FP32 only)
//     without MPI     (-DLLM_NO_MPI: `make NO_MPI=1`, or the Makefile found no MPI; the CUDA build
//                     also when it found no NCCL) a one-process mesh: every group has one rank, the
//                     collectives are local copies, mpi.h is not needed. Asking for more than one
//                     process (a layout, or a launch by mpirun) is refused with one line.
//
// The collectives (here and in comm_p2p.h, on floatX or float buffers; float for the FP32 optimizer
// state and norms). In the CUDA build the buffers are device memory, in the emulated build they
// are cudaMalloc'd emulated device memory (checked), in the CPU build host memory.
//     all_reduce      recv[i] = sum over ranks of send[i]  (or the average); n elements each
//     reduce_scatter  send has size*block elements; rank r gets block r of the sum (or average)
//     all_gather      send has block elements; recv (size*block) gets every rank's block in order
//     broadcast       buf of root to every rank
//     send / recv     point to point within a group (pipeline stages; comm_p2p.h), sendrecv for both,
//                     p2p_batch for several sends and receives posted together (none waits for
//                     another of the batch: NCCL's group, MPI_Isend/Irecv + Waitall)
//     barrier         host-side barrier of the group
// In place: all_reduce with send == recv; reduce_scatter with recv == send + rank*block (the other
// blocks of send are left undefined); all_gather with send == recv + rank*block. These are NCCL's
// conventions. Any other overlap of send and recv is refused. Sizes that do not divide evenly are
// the caller's job (pad to size*block).
//
// Blocking and non-blocking. Every collective takes the caller's compute stream. Over NCCL it runs
// on a dedicated communication stream that first waits (event) for the work already on the
// compute stream; the blocking form then makes the compute stream wait for the collective, so
// later kernels on the compute stream see the result (the host must synchronize the stream before
// reading it, as with any kernel). The non-blocking form (`_start`) returns a CommHandle holding an
// event recorded on the communication stream; comm_wait makes the compute stream wait on it. This
// is what lets DDP / ZeRO overlap gradient communication with the backward pass (Li et al. 2020,
// "PyTorch Distributed", sec. 3.2.3; ZeRO sec. 5.1/5.2 for the bucketed reduce-scatter). In the
// emulated build streams are synchronous, so a collective has finished when its call returns.
// In the CPU build the blocking form returns with the result in recv, the non-blocking form starts
// MPI_Iallreduce / MPI_Ireduce_scatter_block / MPI_Iallgather and comm_wait completes it (Open MPI
// progresses a request only inside MPI calls: comm_test between compute steps moves it along).
//
// BF16. NCCL sums bf16 in bf16: every partial sum is rounded to bf16 (N-1 roundings on N ranks,
// each a relative error <= 2^-8), and ncclAvg multiplies every input by 1/N (rounded to bf16) before
// summing; both exact for power-of-two N away from the subnormals. Over MPI (the CPU build, whose
// BF16 / FP16 storage is llm/half_cpu.h's) 16-bit buffers are reduced the same way, each partial sum
// rounded to the buffer's type, by MPI user ops; the average is the sum times 1/N. FP16 (PRECISION=FP16)
// goes the same way (ncclFloat16, summed in fp16: relative error <= 2^-11 per partial sum; a sum
// beyond 65504 is inf, which the loss scaler of llm/loss_scale.h sees as an overflow and skips).
//
// The wait. comm_take_wait_ms(c) returns how long the computation waited in comm_wait for
// non-blocking collectives since its last call; call it after the step's device synchronize.
//     CUDA      comm_wait records a timing event on the compute stream where that stream starts to
//               wait; the collective's completion event on the communication stream is a timing
//               event too; the wait is max(0, done - ready), read once both have happened
//               (comm_take_wait_ms, or when the completion event is about to be reused, which
//               then synchronizes on the pair: rare, COMM_NUM_EVENTS collectives later). A handle
//               waited after its completion event was reused is ordered correctly but not timed
//               (counted in c->waits_untimed).
//     emulated  streams are synchronous, so a non-blocking collective runs inside its _start call:
//               the host time in that call is the stall (the event pair then reads <= 0)
//     CPU       the host time blocked in MPI_Wait inside comm_wait (0 for a request that
//               comm_test had already completed)
// Blocking collectives are not counted: all of their time is communication.
//
// Errors. Every MPI call goes through mpiCheck and every NCCL call through ncclCheck; a failure
// prints one line naming the call's file:line and ends the whole job (comm_abort_all: MPI_Abort).
// An invalid layout (world size != dp*tp*pp) is refused before anything is allocated: rank 0 prints
// one line, every rank exits 1.
#pragma once

#include "common.h"
#include "device.h"
#include <limits.h>
#include <pthread.h>

// which transport: MPI unless -DLLM_NO_MPI; NCCL over it in the builds with kernels
#ifdef LLM_NO_MPI
#define COMM_MPI 0
#else
#define COMM_MPI 1
#endif
#define COMM_NCCL (COMM_MPI && LLM_HAS_KERNELS)

#if COMM_MPI
// the C API only: Open MPI's deprecated C++ bindings would need -lmpi_cxx
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#endif
#if COMM_NCCL && LLM_BUILD_CUDA
#include <nccl.h>
#if NCCL_VERSION_CODE < 21000
#error "llm/comm.h needs NCCL >= 2.10 (ncclAvg)"
#endif
#elif COMM_NCCL
#include "../dev/emu/nccl_emu.h"  // NCCL's API over MPI, run on the CPU
#endif

// ----------------------------------------------------------------------------
// checks, and ending the job

// ends every process of the job now, from any one rank (MPI_Abort); without MPI, this process
[[noreturn]] static inline void comm_abort_all(int status) {
    fflush(stdout);
    fflush(stderr);
#if COMM_MPI
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized) MPI_Abort(MPI_COMM_WORLD, status);
#endif
    exit(status);
}

#if COMM_MPI
static inline void mpi_check(int err, const char* call, const char* file, int line) {
    if (err == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len] = '\0';
    fprintf(stderr, "error: MPI: %s failed: %s (%s:%d)\n", call, len ? msg : "unknown error", file, line);
    comm_abort_all(EXIT_FAILURE);
}
#define mpiCheck(call) mpi_check((call), #call, __FILE__, __LINE__)
#endif

#if COMM_NCCL
static inline void nccl_check(ncclResult_t r, const char* file, int line) {
    if (r == ncclSuccess) return;
#if NCCL_VERSION_CODE >= 21300
    const char* last = ncclGetLastError(NULL);
#else
    const char* last = "";
#endif
    fprintf(stderr, "error: NCCL: %s%s%s (%s:%d)\n", ncclGetErrorString(r), (last && last[0]) ? ": " : "",
            last ? last : "", file, line);
    comm_abort_all(EXIT_FAILURE);
}
#define ncclCheck(r) nccl_check((r), __FILE__, __LINE__)
#endif

// ----------------------------------------------------------------------------
// types

typedef enum { GROUP_ALL = -1, GROUP_WORLD = 0, GROUP_DP = 1, GROUP_TP = 2, GROUP_PP = 3, GROUP_EMBED = 4 } CommGroup;
#define COMM_NUM_GROUPS 5
typedef enum {
    COMM_ALL_KINDS = -1,
    COMM_ALL_REDUCE = 0,
    COMM_REDUCE_SCATTER = 1,
    COMM_ALL_GATHER = 2,
    COMM_BROADCAST = 3,
    COMM_SEND = 4,
    COMM_RECV = 5
} CommKind;
#define COMM_NUM_KINDS 6
typedef enum { COMM_SUM = 0, COMM_AVG = 1, COMM_MAX = 2 } CommReduce;  // MAX: FP8 amaxes (llm/fp8_linear.h)
typedef enum { COMM_FLOAT = 0, COMM_BF16 = 1, COMM_FP16 = 2 } CommDtype;

static inline const char* comm_group_name(int g) {
    static const char* names[COMM_NUM_GROUPS] = {"world", "dp", "tp", "pp", "embed"};
    return (g >= 0 && g < COMM_NUM_GROUPS) ? names[g] : "all";
}
static inline const char* comm_kind_name(int k) {
    static const char* names[COMM_NUM_KINDS] = {"all_reduce", "reduce_scatter", "all_gather",
                                                "broadcast", "send", "recv"};
    return (k >= 0 && k < COMM_NUM_KINDS) ? names[k] : "all";
}

typedef struct {
    long long calls[COMM_NUM_KINDS][COMM_NUM_GROUPS];
    double payload_bytes[COMM_NUM_KINDS][COMM_NUM_GROUPS];  // full logical buffer per call, summed
    double sent_bytes[COMM_NUM_KINDS][COMM_NUM_GROUPS];     // this rank's sends, ring model (top)
} CommLedger;

#define COMM_NUM_EVENTS 64  // completion events recorded on the comm stream, reused round robin

// the communication watchdog's state (llm/watchdog.h)
struct WdNccl;  // its thread over NCCL's in-flight collectives (NCCL builds)
#define WD_MSG 6    // a report: type, step, group, seq, collective, unused
#define WD_POOL 64  // reports in flight
typedef struct {
    double timeout_s;                  // --comm-timeout: a wait longer than this ends the job; 0 = off
    double report_s;                   // a wait longer than this is reported to the other ranks
    int step;                          // the training step now running (train_gpt.cu sets it; 0 before)
    long long seq[COMM_NUM_GROUPS];    // collectives called on each group so far (equal on its ranks)
    const char* site_file;             // the call site of the API call in progress (the macros at the
    int site_line;                     // end of this file record it)
#if COMM_MPI
    MPI_Comm side;                     // the side channel: a duplicate of MPI_COMM_WORLD
    int* where;                        // (world_size, WD_MSG): the last report of each rank
    MPI_Request pool_req[WD_POOL];
    int pool_msg[WD_POOL][WD_MSG];
    int expired_by;                    // the rank whose watchdog expired (it told us), or -1
    pthread_mutex_t side_mu;           // the side channel and where[]: the main thread and the NCCL
                                       // watchdog thread both use them
    int thread_multiple;               // MPI gave MPI_THREAD_MULTIPLE: the NCCL watchdog thread may
                                       // use the side channel
#endif
    struct WdNccl* nccl;               // NCCL builds: the watchdog thread, NULL when off
} Watchdog;

typedef struct {
    int world_rank, world_size;
    int dp_rank, dp;
    int tp_rank, tp;
    int pp_rank, pp;
    int local_rank, local_size;  // within the node (MPI_COMM_TYPE_SHARED)
    int group_rank[COMM_NUM_GROUPS], group_size[COMM_NUM_GROUPS];
    int owns_mpi;     // comm_init called MPI_Init, so comm_free calls MPI_Finalize
    double init_ms;   // how long MPI_Init took (0 when MPI was already initialized, or without MPI)
    CommLedger ledger;
    double wait_ms;         // wait time measured and not yet taken (comm_take_wait_ms)
    double blocking_ms[COMM_NUM_GROUPS];  // host time inside blocking collectives, per group (CPU build:
                                          // their whole duration; NCCL: the time to enqueue them only)
    long long waits_untimed;  // NCCL: waits whose completion event had been reused (not timed)
    Watchdog wd;              // --comm-timeout (llm/watchdog.h)
#if COMM_MPI
    MPI_Comm mpi[COMM_NUM_GROUPS];  // world is a duplicate of MPI_COMM_WORLD
    MPI_Comm node;
#endif
#if LLM_HAS_KERNELS
    int device;                           // cudaSetDevice(local_rank % device count)
#endif
#if COMM_NCCL
    ncclComm_t nccl[COMM_NUM_GROUPS];     // NULL for a group of one rank
    int nccl_owned[COMM_NUM_GROUPS];      // 0 when the group aliases the world communicator
    cudaStream_t stream;                  // the communication stream
    cudaEvent_t begin_event;              // compute -> comm ordering (consumed at once)
    cudaEvent_t done_events[COMM_NUM_EVENTS];   // after each collective on the comm stream (timing)
    unsigned done_gen[COMM_NUM_EVENTS];         // how often each was recorded; a handle keeps its count
    cudaEvent_t ready_events[COMM_NUM_EVENTS];  // where comm_wait's compute stream starts to wait
    int wait_unread[COMM_NUM_EVENTS];           // 1: (ready, done) of this slot not yet read
    int next_event;
#endif
} Comm;

// What a non-blocking collective returns; pass it to comm_wait exactly once (more is harmless).
typedef struct {
    int pending;
    CommKind kind;     // what was started, where, and its number in its group (the watchdog's line)
    CommGroup group;
    long long seq;
    const char* file;
    int line;
#if COMM_NCCL
    cudaEvent_t event;    // recorded on the comm stream after the collective (done_events[slot])
    cudaStream_t stream;  // the compute stream that comm_wait makes wait on it
    int slot;             // which done event
    unsigned gen;         // its record count then: if it has changed, the event marks a later collective
#elif COMM_MPI
    MPI_Request req;
    // work MPI cannot do, done when the request completes:
    void* move_dst;  // in-place reduce_scatter: MPI leaves the block at the front of the buffer
    const void* move_src;
    size_t move_bytes;
    void* scale_buf;  // average: multiply by 1/N (MPI has no average)
    size_t scale_n;
    float scale;
    CommDtype scale_dt;  // scale_buf's type
#endif
} CommHandle;

static inline size_t comm_dtype_size(CommDtype dt) { return dt == COMM_FLOAT ? 4 : 2; }
static inline const char* comm_dtype_name(CommDtype dt) { return dt == COMM_BF16 ? "bf16" : (dt == COMM_FP16 ? "fp16" : "float"); }
static inline CommDtype comm_dtype_of(const float*) { return COMM_FLOAT; }
#if LLM_HAS_KERNELS
static inline CommDtype comm_dtype_of(const __nv_bfloat16*) { return COMM_BF16; }
static inline CommDtype comm_dtype_of(const __half*) { return COMM_FP16; }
#else
static inline CommDtype comm_dtype_of(const bf16_cpu*) { return COMM_BF16; }  // the CPU build's 16-bit storage
static inline CommDtype comm_dtype_of(const fp16_cpu*) { return COMM_FP16; }
#endif

// which transport this build's collectives use, for logs
static inline const char* comm_transport_name(void) {
#if COMM_NCCL && LLM_BUILD_EMU
    return "NCCL (emulated over MPI, dev/emu/nccl_emu.h)";
#elif COMM_NCCL
    return "NCCL";
#elif COMM_MPI
    return "MPI";
#else
    return "none (built without MPI: one process)";
#endif
}

// the watchdog, the mesh and the ledger
#include "watchdog.h"
#include "comm_mesh.h"
#include "comm_ledger.h"

// ----------------------------------------------------------------------------
// the engine: one function runs every kind, in every build

static inline int comm_ranges_overlap(const void* a, size_t na, const void* b, size_t nb) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + nb && y < x + na;
}

// the buffer must be device memory (the emulated build can tell; a host pointer would crash NCCL)
static inline void comm_check_buffer(const void* p, size_t bytes, const char* what, const char* op) {
    if (p == NULL && bytes > 0) fatal("%s: %s buffer is NULL", op, what);
#if LLM_BUILD_EMU
    if (bytes > 0 && !emu_is_device_range(p, bytes)) {
        fatal("%s: %s buffer %p (%zu bytes) is %s; collectives take device memory", op, what, p, bytes,
              emu_ptr_kind(p));
    }
#else
    (void)p; (void)bytes; (void)what; (void)op;
#endif
}

#if COMM_MPI && !COMM_NCCL
// 16-bit buffers over MPI (BF16, FP16): moved as MPI_UINT16_T, reduced by user ops that add (or take
// the max) in float and round each partial result to the buffer's type (to nearest even), as NCCL
// reduces bf16 and fp16. The average multiplies the sum by 1/N in float and rounds once more.
static inline float comm_h16_get(CommDtype dt, uint16_t b) { return dt == COMM_FP16 ? fp16_bits_to_float(b) : bf16_bits_to_float(b); }
static inline uint16_t comm_h16_put(CommDtype dt, float x) { return dt == COMM_FP16 ? fp16_bits_from_float(x) : bf16_bits_from_float(x); }
static inline void comm_h16_reduce(const void* in, void* inout, int n, CommDtype dt, int is_max) {
    const uint16_t* a = (const uint16_t*)in;
    uint16_t* b = (uint16_t*)inout;
    for (int i = 0; i < n; i++) {
        float x = comm_h16_get(dt, a[i]), y = comm_h16_get(dt, b[i]);
        b[i] = comm_h16_put(dt, is_max ? (x > y || x != x ? x : y) : x + y);  // (max keeps NaN, as MPI_MAX on floats may not)
    }
}
static void comm_mpi_sum_bf16(void* in, void* io, int* n, MPI_Datatype*) { comm_h16_reduce(in, io, *n, COMM_BF16, 0); }
static void comm_mpi_max_bf16(void* in, void* io, int* n, MPI_Datatype*) { comm_h16_reduce(in, io, *n, COMM_BF16, 1); }
static void comm_mpi_sum_fp16(void* in, void* io, int* n, MPI_Datatype*) { comm_h16_reduce(in, io, *n, COMM_FP16, 0); }
static void comm_mpi_max_fp16(void* in, void* io, int* n, MPI_Datatype*) { comm_h16_reduce(in, io, *n, COMM_FP16, 1); }
// the MPI op of a 16-bit reduction, created on first use (commutative: x + y = y + x in float)
static MPI_Op comm_mpi_op16(CommDtype dt, int is_max) {
    static MPI_Op ops[2][2];
    static int made[2][2];
    int d = dt == COMM_FP16;
    if (!made[d][is_max]) {
        MPI_User_function* fn = d ? (is_max ? comm_mpi_max_fp16 : comm_mpi_sum_fp16) : (is_max ? comm_mpi_max_bf16 : comm_mpi_sum_bf16);
        mpiCheck(MPI_Op_create(fn, 1, &ops[d][is_max]));
        made[d][is_max] = 1;
    }
    return ops[d][is_max];
}

// multiply n values by s in place (the MPI average); host memory in this build
static inline void comm_finish_host(CommHandle* h) {
    if (h->move_bytes > 0) memmove(h->move_dst, h->move_src, h->move_bytes);
    if (h->scale_dt == COMM_FLOAT) {
        for (size_t i = 0; i < h->scale_n; i++) ((float*)h->scale_buf)[i] *= h->scale;
    } else {
        uint16_t* b = (uint16_t*)h->scale_buf;
        for (size_t i = 0; i < h->scale_n; i++) b[i] = comm_h16_put(h->scale_dt, comm_h16_get(h->scale_dt, b[i]) * h->scale);
    }
    h->move_bytes = 0;
    h->scale_n = 0;
    h->pending = 0;
}
// the MPI type that carries a buffer of dt: 16-bit values travel as 16-bit words
static inline MPI_Datatype comm_mpi_type(CommDtype dt) { return dt == COMM_FLOAT ? MPI_FLOAT : MPI_UINT16_T; }
static inline int comm_mpi_count(size_t n, const char* op) {
    if (n > (size_t)INT_MAX) {
        fatal("%s: %zu elements exceed MPI's int count (%d); split the buffer into buckets", op, n, INT_MAX);
    }
    return (int)n;
}
#endif

#if COMM_NCCL
static inline ncclDataType_t comm_nccl_type(CommDtype dt) {
    return dt == COMM_BF16 ? ncclBfloat16 : (dt == COMM_FP16 ? ncclFloat16 : ncclFloat32);
}
// the comm stream waits for everything already enqueued on the compute stream
static inline void comm_stream_begin(Comm* c, cudaStream_t compute) {
    cudaCheck(cudaEventRecord(c->begin_event, compute));
    cudaCheck(cudaStreamWaitEvent(c->stream, c->begin_event, 0));
}
// adds the wait of slot i, max(0, done - ready), to c->wait_ms (blocks until both events happened)
static inline void comm_read_wait(Comm* c, int i) {
    if (!c->wait_unread[i]) return;
    cudaCheck(cudaEventSynchronize(c->done_events[i]));
    cudaCheck(cudaEventSynchronize(c->ready_events[i]));
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, c->ready_events[i], c->done_events[i]));
    if (ms > 0.0f) c->wait_ms += ms;
    c->wait_unread[i] = 0;
}
// an event after the collective on the comm stream; returns its slot. Events are reused round robin:
// a reused event is re-recorded later on the same stream, so waiting on it still waits for this
// collective; an unread wait of the slot is read first.
static inline int comm_stream_end(Comm* c) {
    int i = c->next_event;
    c->next_event = (i + 1) % COMM_NUM_EVENTS;
    comm_read_wait(c, i);
    cudaCheck(cudaEventRecord(c->done_events[i], c->stream));
    c->done_gen[i]++;
    return i;
}
#endif

// n: elements of all_reduce / broadcast / send / recv; the block (per-rank) count of reduce_scatter
// and all_gather. peer: the root of broadcast, the destination of send, the source of recv.
static CommHandle comm_run_body(Comm* c, CommKind kind, CommGroup g, const void* send, void* recv, size_t n,
                                CommDtype dt, CommReduce op, int peer, cudaStream_t stream, int nonblocking) {
    CommHandle h;
    memset(&h, 0, sizeof(h));
#if COMM_MPI && !COMM_NCCL
    h.req = MPI_REQUEST_NULL;
#endif
    const char* name = comm_kind_name(kind);
    if ((int)g < 0 || (int)g >= COMM_NUM_GROUPS) fatal("%s: invalid group %d", name, (int)g);
    const int N = c->group_size[g], me = c->group_rank[g];
    const size_t esz = comm_dtype_size(dt);
    size_t send_bytes = n * esz, recv_bytes = n * esz;
    if (kind == COMM_REDUCE_SCATTER) send_bytes *= N;
    if (kind == COMM_ALL_GATHER) recv_bytes *= N;
    if (kind == COMM_SEND || kind == COMM_RECV || kind == COMM_BROADCAST) {
        if (peer < 0 || peer >= N) fatal("%s: rank %d is not in the %s group of %d ranks", name, peer, comm_group_name(g), N);
    }
    if ((kind == COMM_SEND || kind == COMM_RECV) && peer == me) {
        fatal("%s: rank %d of the %s group cannot %s itself", name, me, comm_group_name(g),
              kind == COMM_SEND ? "send to" : "receive from");
    }
    // buffers and the in-place conventions
    int in_place = 0;
    if (kind == COMM_ALL_REDUCE || kind == COMM_REDUCE_SCATTER || kind == COMM_ALL_GATHER) {
        comm_check_buffer(send, send_bytes, "send", name);
        comm_check_buffer(recv, recv_bytes, "recv", name);
        if (kind == COMM_ALL_REDUCE) in_place = (send == recv);
        if (kind == COMM_REDUCE_SCATTER) in_place = ((const char*)recv == (const char*)send + me * n * esz);
        if (kind == COMM_ALL_GATHER) in_place = ((const char*)send == (const char*)recv + me * n * esz);
        if (!in_place && n > 0 && comm_ranges_overlap(send, send_bytes, recv, recv_bytes)) {
            fatal("%s: send and recv buffers overlap but are not the in-place layout (see llm/comm.h)", name);
        }
    } else {
        comm_check_buffer(kind == COMM_SEND ? send : recv, n * esz, "the", name);
    }
    double payload = (double)(kind == COMM_REDUCE_SCATTER ? send_bytes : recv_bytes);
    ledger_add(c, kind, g, payload, kind == COMM_BROADCAST && peer == me);
    int p2p = kind == COMM_SEND || kind == COMM_RECV;
    h.kind = kind;
    h.group = g;
    h.seq = p2p ? 0 : ++c->wd.seq[g];
    h.file = c->wd.site_file ? c->wd.site_file : "?";
    h.line = c->wd.site_line;

    // a group of one: local copies (and an average over one rank is the identity)
    if (N == 1) {
        if (!in_place && n > 0 && (kind == COMM_ALL_REDUCE || kind == COMM_REDUCE_SCATTER || kind == COMM_ALL_GATHER)) {
            copy_device_to_device(recv, send, n * esz, stream);
        }
        return h;
    }

#if COMM_NCCL
    ncclComm_t nc = c->nccl[g];
    ncclDataType_t nt = comm_nccl_type(dt);
    ncclRedOp_t nop = op == COMM_AVG ? ncclAvg : (op == COMM_MAX ? ncclMax : ncclSum);
    comm_stream_begin(c, stream);
    double t0 = wall_ms();
    int wi = wd_nccl_begin(c, name, g, h.seq);
    ncclResult_t r = ncclSuccess;
    switch (kind) {
        case COMM_ALL_REDUCE: r = ncclAllReduce(send, recv, n, nt, nop, nc, c->stream); break;
        case COMM_REDUCE_SCATTER: r = ncclReduceScatter(send, recv, n, nt, nop, nc, c->stream); break;
        case COMM_ALL_GATHER: r = ncclAllGather(send, recv, n, nt, nc, c->stream); break;
        case COMM_BROADCAST: r = ncclBroadcast(recv, recv, n, nt, peer, nc, c->stream); break;
        case COMM_SEND: r = ncclSend(send, n, nt, peer, nc, c->stream); break;
        case COMM_RECV: r = ncclRecv(recv, n, nt, peer, nc, c->stream); break;
        default: fatal("comm: unknown collective %d", (int)kind);
    }
    nccl_settle(c, nc, r, __FILE__, __LINE__);
    wd_nccl_end(c, wi);
    // emulated streams are synchronous: the collective ran inside the call, the host stalled there
    if (LLM_BUILD_EMU && nonblocking) c->wait_ms += wall_ms() - t0;
    int slot = comm_stream_end(c);
    if (nonblocking) {
        h.pending = 1;
        h.event = c->done_events[slot];
        h.stream = stream;
        h.slot = slot;
        h.gen = c->done_gen[slot];
    } else {
        cudaCheck(cudaStreamWaitEvent(stream, c->done_events[slot], 0));
    }
#elif COMM_MPI
    (void)stream;
    MPI_Comm mc = c->mpi[g];
    int cnt = comm_mpi_count(n, name);
    MPI_Datatype mt = comm_mpi_type(dt);  // 16-bit: the user ops above reduce them
    MPI_Request* req = &h.req;  // blocking forms too: wd_wait bounds the wait (llm/watchdog.h)
    MPI_Op mop = dt != COMM_FLOAT ? comm_mpi_op16(dt, op == COMM_MAX) : (op == COMM_MAX ? MPI_MAX : MPI_SUM);
    if (op == COMM_AVG && (kind == COMM_ALL_REDUCE || kind == COMM_REDUCE_SCATTER)) {
        h.scale_buf = recv;
        h.scale_n = n;
        h.scale = 1.0f / (float)N;
        h.scale_dt = dt;
    }
    switch (kind) {
        case COMM_ALL_REDUCE: {
            const void* sb = in_place ? MPI_IN_PLACE : send;
            mpiCheck(MPI_Iallreduce(sb, recv, cnt, mt, mop, mc, req));
            break;
        }
        case COMM_REDUCE_SCATTER: {
            // in place, MPI reads the whole input from the receive buffer and leaves the result at
            // its front: move it to this rank's block afterwards
            const void* sb = in_place ? MPI_IN_PLACE : send;
            void* rb = in_place ? (void*)send : recv;
            if ((size_t)N * n > (size_t)INT_MAX) comm_mpi_count((size_t)N * n, name);
            if (in_place && me != 0) {
                h.move_dst = recv;
                h.move_src = send;
                h.move_bytes = n * esz;
            }
            mpiCheck(MPI_Ireduce_scatter_block(sb, rb, cnt, mt, mop, mc, req));
            break;
        }
        case COMM_ALL_GATHER: {
            const void* sb = in_place ? MPI_IN_PLACE : send;
            if ((size_t)N * n > (size_t)INT_MAX) comm_mpi_count((size_t)N * n, name);
            mpiCheck(MPI_Iallgather(sb, cnt, mt, recv, cnt, mt, mc, req));
            break;
        }
        case COMM_BROADCAST: mpiCheck(MPI_Ibcast(recv, cnt, mt, peer, mc, req)); break;
        case COMM_SEND: mpiCheck(MPI_Isend(send, cnt, mt, peer, 0, mc, req)); break;
        case COMM_RECV: mpiCheck(MPI_Irecv(recv, cnt, mt, peer, 0, mc, req)); break;
        default: fatal("comm: unknown collective %d", (int)kind);
    }
    if (!nonblocking) {
        WdWait w = p2p ? wd_p2p(c, name, g, &peer, 1) : wd_collective(c, name, g, h.seq);
        MPI_Status st;
        wd_wait(c, 1, req, &st, &w);
        if (kind == COMM_RECV) {
            int got = 0;
            mpiCheck(MPI_Get_count(&st, mt, &got));
            if (got != cnt) {
                fatal("recv: expected %d elements from rank %d of the %s group, got %d", cnt, peer,
                      comm_group_name(g), got);
            }
        }
    }
    if (nonblocking) h.pending = 1;
    else comm_finish_host(&h);
#else
    (void)op; (void)stream; (void)nonblocking;
    fatal("%s: a group of %d ranks in a build without MPI", name, N);  // unreachable: every group has one rank
#endif
    return h;
}

// every collective: the body above, the host time of the blocking ones counted per group
static CommHandle comm_run(Comm* c, CommKind kind, CommGroup g, const void* send, void* recv, size_t n,
                           CommDtype dt, CommReduce op, int peer, cudaStream_t stream, int nonblocking) {
    double t0 = wall_ms();
    CommHandle h = comm_run_body(c, kind, g, send, recv, n, dt, op, peer, stream, nonblocking);
    if (!nonblocking) c->blocking_ms[g] += wall_ms() - t0;  // (g was checked by the body)
    return h;
}

// ----------------------------------------------------------------------------
// the API: T is float or floatX (__nv_bfloat16 in the BF16 kernel builds, __half in the FP16 ones)

template <typename T>
static void comm_all_reduce(Comm* c, CommGroup g, const T* send, T* recv, size_t n, CommReduce op, cudaStream_t stream) {
    comm_run(c, COMM_ALL_REDUCE, g, send, recv, n, comm_dtype_of(send), op, 0, stream, 0);
}
// send: size*block elements; recv: block elements (block `rank` of the reduction)
template <typename T>
static void comm_reduce_scatter(Comm* c, CommGroup g, const T* send, T* recv, size_t block, CommReduce op, cudaStream_t stream) {
    comm_run(c, COMM_REDUCE_SCATTER, g, send, recv, block, comm_dtype_of(send), op, 0, stream, 0);
}
// send: block elements; recv: size*block elements, rank r's block at r*block
template <typename T>
static void comm_all_gather(Comm* c, CommGroup g, const T* send, T* recv, size_t block, cudaStream_t stream) {
    comm_run(c, COMM_ALL_GATHER, g, send, recv, block, comm_dtype_of(send), COMM_SUM, 0, stream, 0);
}
template <typename T>
static void comm_broadcast(Comm* c, CommGroup g, T* buf, size_t n, int root, cudaStream_t stream) {
    comm_run(c, COMM_BROADCAST, g, buf, buf, n, comm_dtype_of(buf), COMM_SUM, root, stream, 0);
}
// host-side barrier of the group (it does not wait for queued GPU work)
static void comm_barrier(Comm* c, CommGroup g) {
    if ((int)g < 0 || (int)g >= COMM_NUM_GROUPS) fatal("barrier: invalid group %d", (int)g);
#if COMM_MPI
    if (c->group_size[g] == 1) return;
    WdWait w = wd_collective(c, "barrier", g, ++c->wd.seq[g]);
    MPI_Request req;
    mpiCheck(MPI_Ibarrier(c->mpi[g], &req));
    wd_wait(c, 1, &req, MPI_STATUSES_IGNORE, &w);
#else
    (void)c;  // one process
#endif
}

// non-blocking forms: same arguments, the result is valid after comm_wait
template <typename T>
static CommHandle comm_all_reduce_start(Comm* c, CommGroup g, const T* send, T* recv, size_t n, CommReduce op, cudaStream_t stream) {
    return comm_run(c, COMM_ALL_REDUCE, g, send, recv, n, comm_dtype_of(send), op, 0, stream, 1);
}
template <typename T>
static CommHandle comm_reduce_scatter_start(Comm* c, CommGroup g, const T* send, T* recv, size_t block, CommReduce op, cudaStream_t stream) {
    return comm_run(c, COMM_REDUCE_SCATTER, g, send, recv, block, comm_dtype_of(send), op, 0, stream, 1);
}
template <typename T>
static CommHandle comm_all_gather_start(Comm* c, CommGroup g, const T* send, T* recv, size_t block, cudaStream_t stream) {
    return comm_run(c, COMM_ALL_GATHER, g, send, recv, block, comm_dtype_of(send), COMM_SUM, 0, stream, 1);
}

// NCCL: the compute stream given at the start waits for the collective (the host does not block);
// the wait is timed by an event pair (see the top of the file).
// MPI: blocks until the request completes (timed), then finishes the average / in-place move.
static void comm_wait(Comm* c, CommHandle* h) {
    if (!h->pending) return;
#if COMM_NCCL
    if (h->gen == c->done_gen[h->slot]) {
        cudaCheck(cudaEventRecord(c->ready_events[h->slot], h->stream));
        c->wait_unread[h->slot] = 1;
    } else {
        c->waits_untimed++;  // its event was re-recorded for a later collective: ordered, not timed
    }
    cudaCheck(cudaStreamWaitEvent(h->stream, h->event, 0));
    h->pending = 0;
#elif COMM_MPI
    double t0 = wall_ms();
    WdWait w = wd_collective(c, comm_kind_name(h->kind), h->group, h->seq);
    char started[300];  // the wait's site, and where the collective was started
    snprintf(started, sizeof(started), "%s:%d (started at %s:%d)", w.file, w.line, h->file, h->line);
    w.file = started;
    w.line = 0;
    wd_wait(c, 1, &h->req, MPI_STATUSES_IGNORE, &w);
    c->wait_ms += wall_ms() - t0;
    comm_finish_host(h);
#else
    (void)c;
    h->pending = 0;
#endif
}

// 1 if the collective has completed, 0 otherwise; call comm_wait all the same (over NCCL it is what
// orders the compute stream after the collective). Over MPI comm_test also drives the request
// forward: call it between compute steps to overlap.
static int comm_test(Comm* c, CommHandle* h) {
    (void)c;
    if (!h->pending) return 1;
#if COMM_NCCL
    cudaError_t e = cudaEventQuery(h->event);
    if (e == cudaErrorNotReady) return 0;
    cudaCheck(e);
    return 1;
#elif COMM_MPI
    int done = 0;
    mpiCheck(MPI_Test(&h->req, &done, MPI_STATUS_IGNORE));
    if (done) comm_finish_host(h);
    return done;
#else
    return 1;
#endif
}

// The time (ms) the computation waited in comm_wait since the last call (see the top of the file).
// Over NCCL call it after the step's device synchronize: it reads the event pairs of the waits.
static double comm_take_wait_ms(Comm* c) {
#if COMM_NCCL
    for (int i = 0; i < COMM_NUM_EVENTS; i++) comm_read_wait(c, i);
#endif
    double ms = c->wait_ms;
    c->wait_ms = 0.0;
    return ms;
}

// point to point
#include "comm_p2p.h"

// The call sites: each API call records its file:line for the watchdog's line (llm/watchdog.h)
// before the function of the same name runs (a function-like macro does not expand inside itself).
static inline void comm_site(Comm* c, const char* file, int line) {
    c->wd.site_file = file;
    c->wd.site_line = line;
}
#define COMM_AT(c) comm_site((c), __FILE__, __LINE__)
#define comm_all_reduce(c, ...) (COMM_AT(c), comm_all_reduce((c), __VA_ARGS__))
#define comm_reduce_scatter(c, ...) (COMM_AT(c), comm_reduce_scatter((c), __VA_ARGS__))
#define comm_all_gather(c, ...) (COMM_AT(c), comm_all_gather((c), __VA_ARGS__))
#define comm_broadcast(c, ...) (COMM_AT(c), comm_broadcast((c), __VA_ARGS__))
#define comm_barrier(c, ...) (COMM_AT(c), comm_barrier((c), __VA_ARGS__))
#define comm_all_reduce_start(c, ...) (COMM_AT(c), comm_all_reduce_start((c), __VA_ARGS__))
#define comm_reduce_scatter_start(c, ...) (COMM_AT(c), comm_reduce_scatter_start((c), __VA_ARGS__))
#define comm_all_gather_start(c, ...) (COMM_AT(c), comm_all_gather_start((c), __VA_ARGS__))
#define comm_wait(c, ...) (COMM_AT(c), comm_wait((c), __VA_ARGS__))
#define comm_send(c, ...) (COMM_AT(c), comm_send((c), __VA_ARGS__))
#define comm_recv(c, ...) (COMM_AT(c), comm_recv((c), __VA_ARGS__))
#define comm_sendrecv(c, ...) (COMM_AT(c), comm_sendrecv((c), __VA_ARGS__))
#define comm_p2p_batch(c, ...) (COMM_AT(c), comm_p2p_batch((c), __VA_ARGS__))
#define comm_gather_bytes(c, ...) (COMM_AT(c), comm_gather_bytes((c), __VA_ARGS__))
#define comm_all_gather_host(c, ...) (COMM_AT(c), comm_all_gather_host((c), __VA_ARGS__))
