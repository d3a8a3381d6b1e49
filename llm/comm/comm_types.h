// comm_types.h: the types of llm/comm/ (the mesh and its groups are llm/comm/mesh.h): the kinds of collective
// (CommKind), the reductions and element types (CommReduce, CommDtype), a call's site (CommSite), a
// rank's state (Comm, with its ledger and the watchdog's state), one call of the engine (CommCall) and
// what a non-blocking collective returns (CommHandle); the element type of a buffer (comm_dtype_of) and
// the transport's name for logs.
#pragma once

#include "comm_transport.h"
#include "mesh.h"
#include <stddef.h>
#if COMM_MPI
#include <pthread.h>
#endif

typedef enum {
    COMM_ALL_KINDS = -1,
    COMM_ALL_REDUCE = 0,
    COMM_REDUCE_SCATTER = 1,
    COMM_ALL_GATHER = 2,
    COMM_BROADCAST = 3,
    COMM_SEND = 4,
    COMM_RECV = 5,
    COMM_ALL_TO_ALL = 6  // (last: the ledger's rows and --report-json keep the other kinds' order)
} CommKind;
#define COMM_NUM_KINDS 7
typedef enum { COMM_SUM = 0, COMM_AVG = 1, COMM_MAX = 2 } CommReduce;  // MAX: FP8 amaxes (llm/precision/fp8_linear.h)
typedef enum { COMM_FLOAT = 0, COMM_BF16 = 1, COMM_FP16 = 2 } CommDtype;

static inline const char* comm_kind_name(int k) {
    static const char* names[COMM_NUM_KINDS] = {"all_reduce", "reduce_scatter", "all_gather",
                                                "broadcast", "send", "recv", "all_to_all"};
    return (k >= 0 && k < COMM_NUM_KINDS) ? names[k] : "all";
}

typedef struct {
    long long calls[COMM_NUM_KINDS][COMM_NUM_GROUPS];
    double payload_bytes[COMM_NUM_KINDS][COMM_NUM_GROUPS];  // full logical buffer per call, summed
    double sent_bytes[COMM_NUM_KINDS][COMM_NUM_GROUPS];     // this rank's sends, ring model (top)
} CommLedger;

// Where an API call of llm/comm/ was made: its last parameter, `CommSite at = comm_here()`, so that
// the watchdog's line names the caller's file:line (llm/comm/watchdog.h). As a default argument
// __builtin_FILE() and __builtin_LINE() are evaluated at the call, like C++20's
// std::source_location::current(), which they stand in for under C++17 (g++, clang, nvcc).
typedef struct {
    const char* file;
    int line;
} CommSite;
static inline CommSite comm_here(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return CommSite{file, line};
}

#define COMM_NUM_EVENTS 64  // completion events recorded on the comm stream, reused round robin

// the communication watchdog's state (llm/comm/watchdog.h)
struct WdNccl;  // its thread over NCCL's in-flight collectives (NCCL builds: llm/comm/watchdog_nccl.h)
#define WD_MSG 6    // a report: type, step, group, seq, collective, unused
#define WD_POOL 64  // reports in flight
typedef struct {
    double timeout_s;                  // --comm-timeout: a wait longer than this ends the job; 0 = off
    double report_s;                   // a wait longer than this is reported to the other ranks
    int step;                          // the training step now running (train_gpt.cu sets it; 0 before)
    long long seq[COMM_NUM_GROUPS];    // collectives called on each group so far (equal on its ranks)
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
    int* err_state;                    // (world_size) while this rank ends on an error line (llm/comm/watchdog_mpi.h):
                                       // 1 a rank that has one too, 2 one that said it is done; else NULL
#endif
    struct WdNccl* nccl;               // NCCL builds: the watchdog thread, NULL when off
} Watchdog;

typedef struct {
    int world_rank, world_size;
    Mesh mesh;        // this rank's place in dp x pp x cp x tp, and the groups (llm/comm/mesh.h)
    int local_rank, local_size;  // within the node (MPI_COMM_TYPE_SHARED)
    int group_rank[COMM_NUM_GROUPS], group_size[COMM_NUM_GROUPS];  // the communicators' own (MPI's), checked against the mesh's
    int owns_mpi;     // comm_init called MPI_Init, so comm_free calls MPI_Finalize
    double init_ms;   // how long MPI_Init took (0 when MPI was already initialized, or without MPI)
    CommLedger ledger;
    double wait_ms;         // wait time measured and not yet taken (comm_take_wait_ms)
    double blocking_ms[COMM_NUM_GROUPS];  // host time inside blocking collectives, per group (CPU build:
                                          // their whole duration; NCCL: the time to enqueue them only)
    long long waits_untimed;  // NCCL: waits whose completion event had been reused (not timed)
    Watchdog wd;              // --comm-timeout (llm/comm/watchdog.h)
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

// One call of the engine (llm/comm/comm_engine.h): what the API function asked for, as comm_run hands it
// to the part every transport shares and then to its transport's file (llm/comm/comm_engine_nccl.h,
// comm_engine_mpi.h, comm_engine_none.h).
typedef struct {
    CommKind kind;
    CommGroup g;
    const void* send;     // NULL for recv; the same as recv for broadcast
    void* recv;           // NULL for send
    size_t n;             // elements of all_reduce / broadcast / send / recv; the block (per-rank) count
                          // of reduce_scatter, all_gather and all_to_all
    CommDtype dt;
    CommReduce op;        // all_reduce and reduce_scatter
    int peer;             // the root of broadcast, the destination of send, the source of recv
    cudaStream_t stream;  // the compute stream the call is ordered after (NCCL)
    int nonblocking;      // 1: the _start forms (the handle is waited later); 0: done on return
    CommSite at;          // the API call's site (the watchdog's line)
    int in_place;         // set by the engine's checks: the in-place layout of all_reduce,
                          // reduce_scatter or all_gather (llm/comm/comm.h)
} CommCall;

// What a non-blocking collective returns; pass it to comm_wait exactly once (more is harmless).
typedef struct {
    int pending;
    CommKind kind;     // what was started, in which group, its number there and its call site (the
    CommGroup group;   // watchdog's line)
    long long seq;
    CommSite at;
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
    int* counts;         // a started all_to_all_v: its count and displacement arrays, which MPI reads until the
                         // request completes (freed then)
#endif
} CommHandle;

static inline size_t comm_dtype_size(CommDtype dt) { return dt == COMM_FLOAT ? 4 : 2; }
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
