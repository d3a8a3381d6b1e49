// comm.h: the process mesh (dp x pp x tp), the collectives the parallel stages call, each naming its
// group, over NCCL (CUDA build, and the emulated build through dev/emu/nccl_emu.h) or MPI (CPU
// build), a per-rank byte ledger, and the time the computation waits for communication.
//
// The mesh. World size = dp * pp * tp. Rank order puts tp innermost (the ranks of a Megatron tensor-
// parallel group are consecutive, so they share a node and its NVLink: Shoeybi et al. 2019,
// "Megatron-LM", sec. 3, and Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
// on GPU Clusters", sec. 3.3), then pp, then dp:
//
//     world_rank = (dp_rank * pp + pp_rank) * tp + tp_rank
//
// Five groups are built once with MPI_Comm_split:
//     GROUP_WORLD  every rank
//     GROUP_DP     the ranks with my (pp_rank, tp_rank), ordered by dp_rank   (DDP, ZeRO)
//     GROUP_TP     the ranks with my (dp_rank, pp_rank), ordered by tp_rank   (Megatron)
//     GROUP_PP     the ranks with my (dp_rank, tp_rank), ordered by pp_rank   (pipeline P2P)
//     GROUP_EMBED  the first and the last pipeline stage with my (dp_rank, tp_rank): the two copies
//                  of the tied token embedding, whose gradients are summed (llm/pipeline.h); a
//                  middle stage is a group of one it never uses, and with pp = 1 it is the rank itself
// "rank" and "root"/"peer" arguments of the collectives are ranks within the named group.
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
// The collectives (all in this file, on floatX or float buffers; float for the FP32 optimizer
// state and norms). In the CUDA build the buffers are device memory, in the emulated build they
// are cudaMalloc'd emulated device memory (checked), in the CPU build host memory.
//     all_reduce      recv[i] = sum over ranks of send[i]  (or the average); n elements each
//     reduce_scatter  send has size*block elements; rank r gets block r of the sum (or average)
//     all_gather      send has block elements; recv (size*block) gets every rank's block in order
//     broadcast       buf of root to every rank
//     send / recv     point to point within a group (pipeline stages), sendrecv for both at once,
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
// summing; both exact for power-of-two N away from the subnormals. The MPI path is FP32 only (the
// CPU build has no bf16 buffers). Over MPI the average is the sum times 1/N.
//
// The ledger. Every collective adds to a per-rank table, per kind and per group: the number of
// calls, the payload bytes (the size of the full logical buffer: n elements for all_reduce,
// broadcast, send, recv; the size*block input of reduce_scatter; the size*block output of
// all_gather), and the bytes this rank sends under a ring algorithm, the communication model of the
// ZeRO paper (Rajbhandari et al. 2019, "ZeRO: Memory Optimizations Toward Training Trillion
// Parameter Models", sec. 7, "Analysis of communication volume"). For a group of N ranks and a
// payload of S bytes:
//
//     all_reduce      2 (N-1)/N * S   (a ring reduce-scatter followed by a ring all-gather)
//     reduce_scatter    (N-1)/N * S   (S = the full input, N blocks)
//     all_gather        (N-1)/N * S   (S = the full output)
//     broadcast       S on the root, 0 on the others (N > 1), the bytes the root injects
//     send            S
//     recv            0 (the payload S is still recorded)
//
// With N = 1 every collective sends 0 bytes. So for Psi gradient/parameter bytes on a DP group of N:
// DDP's one all-reduce of the gradients sends 2 Psi (N-1)/N per rank; ZeRO-3 sends an all-gather
// of the parameters in the forward pass, another in the backward pass, and a reduce-scatter of the
// gradients: 3 Psi (N-1)/N, i.e. 1.5x DDP (ZeRO sec. 7.2); ZeRO-1/2 send a reduce-scatter and an
// all-gather, 2 Psi (N-1)/N, the same as DDP (sec. 7.2.1).
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
typedef enum { COMM_SUM = 0, COMM_AVG = 1 } CommReduce;
typedef enum { COMM_FLOAT = 0, COMM_BF16 = 1 } CommDtype;

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
    float* scale_buf;  // average: multiply by 1/N (MPI has no average)
    size_t scale_n;
    float scale;
#endif
} CommHandle;

static inline size_t comm_dtype_size(CommDtype dt) { return dt == COMM_BF16 ? 2 : 4; }
static inline const char* comm_dtype_name(CommDtype dt) { return dt == COMM_BF16 ? "bf16" : "float"; }
static inline CommDtype comm_dtype_of(const float*) { return COMM_FLOAT; }
#if LLM_HAS_KERNELS
static inline CommDtype comm_dtype_of(const __nv_bfloat16*) { return COMM_BF16; }
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

// ----------------------------------------------------------------------------
// the mesh

static inline int comm_world_rank_of(const Comm* c, int dp_rank, int pp_rank, int tp_rank) {
    return (dp_rank * c->pp + pp_rank) * c->tp + tp_rank;
}
static inline int comm_group_size(const Comm* c, CommGroup g) { return c->group_size[g]; }
static inline int comm_group_rank(const Comm* c, CommGroup g) { return c->group_rank[g]; }

// the layout error for dp x tp x pp on `world` processes, or "" (dp = 0 is resolved in *dp)
static void comm_layout_error(int world, int* dp, int tp, int pp, char* err, size_t cap) {
    err[0] = '\0';
    if (tp < 1 || pp < 1 || *dp < 0) {
        snprintf(err, cap, "invalid layout --dp %d --tp %d --pp %d: expected tp >= 1, pp >= 1, "
                 "dp >= 0 (0 = world size / (tp*pp))", *dp, tp, pp);
    } else if (*dp == 0 && world % ((long long)tp * pp) != 0) {
        snprintf(err, cap, "invalid layout: --tp %d x --pp %d = %lld must divide the world size, "
                 "found a world size of %d (mpirun -np)", tp, pp, (long long)tp * pp, world);
    } else {
        if (*dp == 0) *dp = world / (tp * pp);
        long long want = (long long)*dp * tp * pp;
        if (want != world) {
            snprintf(err, cap, "invalid layout: --dp %d x --tp %d x --pp %d = %lld processes "
                     "expected, found a world size of %d (mpirun -np)", *dp, tp, pp, want, world);
        }
    }
}

#if !COMM_MPI
// the launcher's process count when one started this process (Open MPI, MPICH/Hydra, ...), else 1
static inline int comm_launcher_size(int* rank) {
    const char* size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"};
    const char* rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK"};
    for (int i = 0; i < 3; i++) {
        const char* s = getenv(size_vars[i]);
        if (s != NULL && atoi(s) > 1) {
            const char* r = getenv(rank_vars[i]);
            *rank = r ? atoi(r) : 0;
            return atoi(s);
        }
    }
    *rank = 0;
    return 1;
}
#endif

// Start MPI (unless the caller did), check the layout, build the groups; over NCCL also pick the
// GPU and create the NCCL communicators and the communication stream. Without MPI: one process.
// dp = 0: dp = world size / (tp * pp). Exits (rank 0 printing one line) on an invalid layout.
static void comm_init(Comm* c, int* argc, char*** argv, int dp, int tp, int pp) {
    memset(c, 0, sizeof(*c));
    char err[400] = "";
#if COMM_MPI
    int inited = 0;
    mpiCheck(MPI_Initialized(&inited));
    if (!inited) {
        double t0 = wall_ms();
        int provided = 0;
        // funneled: only the main thread calls MPI (OpenMP threads never do)
        mpiCheck(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
        c->init_ms = wall_ms() - t0;
        c->owns_mpi = 1;
    }
    // errors come back to mpiCheck, which names the file:line, instead of aborting inside MPI
    mpiCheck(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &c->world_size));
    int world = c->world_size;

    // the layout, before anything is allocated
    comm_layout_error(world, &dp, tp, pp, err, sizeof(err));
    if (err[0]) {
        if (c->world_rank == 0) {
            fprintf(stderr, "error: %s\n", err);
            fflush(stderr);
        }
        MPI_Finalize();  // every rank gets here (same arguments), then all exit non-zero
        exit(EXIT_FAILURE);
    }
#else
    // one process: refuse a launch of several, and any layout of more than one
    (void)argc; (void)argv;
    int launched_rank = 0, launched = comm_launcher_size(&launched_rank);
    const int world = 1;
    if (launched > 1) {
        snprintf(err, sizeof(err), "this program was built without MPI and runs as one process, but the launcher "
                 "started %d (mpirun -np %d): rebuild with MPI (libopenmpi-dev) and NCCL for more", launched, launched);
    } else if (tp < 1 || pp < 1 || dp < 0) {
        comm_layout_error(world, &dp, tp, pp, err, sizeof(err));
    } else if ((long long)(dp > 0 ? dp : 1) * tp * pp != 1) {
        char layout[64];
        if (dp > 0) snprintf(layout, sizeof(layout), "--dp %d x --tp %d x --pp %d", dp, tp, pp);
        else snprintf(layout, sizeof(layout), "--tp %d x --pp %d", tp, pp);
        snprintf(err, sizeof(err), "invalid layout: %s asks for more than one process, but this program was built "
                 "without MPI and runs as one process (rebuild with MPI and NCCL for more)", layout);
    } else {
        dp = 1;
    }
    if (err[0]) {
        if (launched_rank == 0) {
            fprintf(stderr, "error: %s\n", err);
            fflush(stderr);
        }
        exit(EXIT_FAILURE);
    }
    c->world_rank = 0;
    c->world_size = 1;
#endif

    c->dp = dp; c->tp = tp; c->pp = pp;
    int r = c->world_rank;
    c->tp_rank = r % tp;
    c->pp_rank = (r / tp) % pp;
    c->dp_rank = r / (tp * pp);

#if COMM_MPI
    // the groups: color selects the members, key orders them
    mpiCheck(MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi[GROUP_WORLD]));
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, c->pp_rank * tp + c->tp_rank, c->dp_rank, &c->mpi[GROUP_DP]));
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, c->dp_rank * pp + c->pp_rank, c->tp_rank, &c->mpi[GROUP_TP]));
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, c->dp_rank * tp + c->tp_rank, c->pp_rank, &c->mpi[GROUP_PP]));
    int end_stage = c->pp_rank == 0 || c->pp_rank == pp - 1;  // the stages holding the token embedding
    mpiCheck(MPI_Comm_split(MPI_COMM_WORLD, end_stage ? c->dp_rank * tp + c->tp_rank : MPI_UNDEFINED, c->pp_rank,
                            &c->mpi[GROUP_EMBED]));
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        c->group_rank[g] = 0;
        c->group_size[g] = 1;
        if (c->mpi[g] == MPI_COMM_NULL) continue;  // a middle stage's embed group: itself alone
        mpiCheck(MPI_Comm_set_errhandler(c->mpi[g], MPI_ERRORS_RETURN));
        mpiCheck(MPI_Comm_rank(c->mpi[g], &c->group_rank[g]));
        mpiCheck(MPI_Comm_size(c->mpi[g], &c->group_size[g]));
    }
    const int want_rank[COMM_NUM_GROUPS] = {c->world_rank, c->dp_rank, c->tp_rank, c->pp_rank,
                                            c->pp_rank == pp - 1 && pp > 1 ? 1 : 0};
    const int want_size[COMM_NUM_GROUPS] = {world, dp, tp, pp, end_stage && pp > 1 ? 2 : 1};
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        if (c->group_rank[g] != want_rank[g] || c->group_size[g] != want_size[g]) {
            fprintf(stderr, "error: rank %d: %s group is rank %d of %d, expected %d of %d (%s:%d)\n", r,
                    comm_group_name(g), c->group_rank[g], c->group_size[g], want_rank[g], want_size[g],
                    __FILE__, __LINE__);
            comm_abort_all(EXIT_FAILURE);
        }
    }
    mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL, &c->node));
    mpiCheck(MPI_Comm_rank(c->node, &c->local_rank));
    mpiCheck(MPI_Comm_size(c->node, &c->local_size));
#else
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        c->group_rank[g] = 0;
        c->group_size[g] = 1;
    }
    c->local_rank = 0;
    c->local_size = 1;
#endif

#if LLM_HAS_KERNELS
    // one GPU per process, chosen by the node-local rank
    int ndev = 0;
    cudaCheck(cudaGetDeviceCount(&ndev));
    if (ndev < 1 || c->local_size > ndev) {
        if (c->local_rank == 0) {
            fprintf(stderr, "error: %d processes on this node but %d GPUs: one GPU per process is needed%s\n",
                    c->local_size, ndev, LLM_BUILD_EMU ? " (emulated: set EMU_DEVICES)" : "");
            fflush(stderr);
        }
        exit(EXIT_FAILURE);
    }
    c->device = c->local_rank % ndev;
    cudaCheck(cudaSetDevice(c->device));
#endif
#if COMM_NCCL
    cudaCheck(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&c->begin_event, cudaEventDisableTiming));
    for (int i = 0; i < COMM_NUM_EVENTS; i++) {
        // with timing: comm_take_wait_ms reads them (recording costs about the same)
        cudaCheck(cudaEventCreateWithFlags(&c->done_events[i], cudaEventDefault));
        cudaCheck(cudaEventCreateWithFlags(&c->ready_events[i], cudaEventDefault));
    }
    // one NCCL communicator per group: its rank 0 makes the id, the group's MPI communicator carries
    // it. Groups of one rank need none (their collectives are local copies); a group as large as the
    // world is the world. All ranks walk the groups in the same order, so the blocking inits match.
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        c->nccl[g] = NULL;
        c->nccl_owned[g] = 0;
        if (c->group_size[g] == 1) continue;
        if (g != GROUP_WORLD && c->group_size[g] == world) {
            c->nccl[g] = c->nccl[GROUP_WORLD];
            continue;
        }
        ncclUniqueId id;
        if (c->group_rank[g] == 0) ncclCheck(ncclGetUniqueId(&id));
        mpiCheck(MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, c->mpi[g]));
        ncclCheck(ncclCommInitRank(&c->nccl[g], c->group_size[g], id, c->group_rank[g]));
        c->nccl_owned[g] = 1;
    }
#endif
}

static void comm_free(Comm* c) {
#if COMM_NCCL
    cudaCheck(cudaStreamSynchronize(c->stream));
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        if (c->nccl_owned[g]) ncclCheck(ncclCommDestroy(c->nccl[g]));
        c->nccl[g] = NULL;
    }
    for (int i = 0; i < COMM_NUM_EVENTS; i++) {
        cudaCheck(cudaEventDestroy(c->done_events[i]));
        cudaCheck(cudaEventDestroy(c->ready_events[i]));
    }
    cudaCheck(cudaEventDestroy(c->begin_event));
    cudaCheck(cudaStreamDestroy(c->stream));
#endif
#if COMM_MPI
    mpiCheck(MPI_Comm_free(&c->node));
    for (int g = 0; g < COMM_NUM_GROUPS; g++) if (c->mpi[g] != MPI_COMM_NULL) mpiCheck(MPI_Comm_free(&c->mpi[g]));
    if (c->owns_mpi) mpiCheck(MPI_Finalize());
#endif
    c->owns_mpi = 0;
}

// Every rank calls it together (same arguments, e.g. after rank 0 printed why): finalize MPI and
// exit with status. For an error seen by one rank alone use comm_abort_all.
[[noreturn]] static inline void comm_exit(Comm* c, int status) {
    (void)c;
    fflush(stdout);
    fflush(stderr);
#if COMM_MPI
    MPI_Finalize();
#endif
    exit(status);
}

// Host bytes of every rank to world rank 0: `all` (world_size * bytes, rank r's at r * bytes) is
// written on rank 0 only (NULL elsewhere). Plain host data, outside the ledger (reports, logs).
static void comm_gather_bytes(Comm* c, const void* mine, size_t bytes, void* all) {
    if (bytes > (size_t)INT_MAX) fatal("comm_gather_bytes: %zu bytes exceed MPI's int count", bytes);
#if COMM_MPI
    mpiCheck(MPI_Gather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, 0, c->mpi[GROUP_WORLD]));
#else
    (void)c;
    if (bytes > 0) memcpy(all, mine, bytes);
#endif
}

// ----------------------------------------------------------------------------
// the ledger

static inline void ledger_reset(Comm* c) { memset(&c->ledger, 0, sizeof(c->ledger)); }

// bytes this rank sends for one call (ring model, see the top of the file)
static inline double comm_ring_bytes(CommKind kind, int N, double S, int is_root) {
    if (N <= 1) return 0.0;
    switch (kind) {
        case COMM_ALL_REDUCE: return 2.0 * (N - 1) / N * S;
        case COMM_REDUCE_SCATTER: return (double)(N - 1) / N * S;
        case COMM_ALL_GATHER: return (double)(N - 1) / N * S;
        case COMM_BROADCAST: return is_root ? S : 0.0;
        case COMM_SEND: return S;
        default: return 0.0;  // COMM_RECV
    }
}

static inline void ledger_add(Comm* c, CommKind kind, CommGroup g, double payload, int is_root) {
    c->ledger.calls[kind][g] += 1;
    c->ledger.payload_bytes[kind][g] += payload;
    c->ledger.sent_bytes[kind][g] += comm_ring_bytes(kind, c->group_size[g], payload, is_root);
}

// sums over kinds (COMM_ALL_KINDS) and/or groups (GROUP_ALL) when asked
static inline double ledger_sum(const Comm* c, int which, CommKind kind, CommGroup g) {
    double s = 0.0;
    for (int k = 0; k < COMM_NUM_KINDS; k++) {
        if (kind != COMM_ALL_KINDS && k != (int)kind) continue;
        for (int q = 0; q < COMM_NUM_GROUPS; q++) {
            if (g != GROUP_ALL && q != (int)g) continue;
            s += which == 0 ? (double)c->ledger.calls[k][q]
               : which == 1 ? c->ledger.payload_bytes[k][q] : c->ledger.sent_bytes[k][q];
        }
    }
    return s;
}
static inline long long ledger_calls(const Comm* c, CommKind kind, CommGroup g) {
    return (long long)ledger_sum(c, 0, kind, g);
}
static inline double ledger_payload_bytes(const Comm* c, CommKind kind, CommGroup g) {
    return ledger_sum(c, 1, kind, g);
}
static inline double ledger_sent_bytes(const Comm* c, CommKind kind, CommGroup g) {
    return ledger_sum(c, 2, kind, g);
}

// a small table of this rank's non-empty rows
static void ledger_print(const Comm* c, FILE* f) {
    fprintf(f, "comm ledger, rank %d (sent = ring model, ZeRO paper sec. 7)\n", c->world_rank);
    fprintf(f, "  %-15s %-6s %5s %10s %14s %14s\n", "collective", "group", "size", "calls", "payload MB", "sent MB");
    for (int k = 0; k < COMM_NUM_KINDS; k++) {
        for (int g = 0; g < COMM_NUM_GROUPS; g++) {
            if (c->ledger.calls[k][g] == 0) continue;
            fprintf(f, "  %-15s %-6s %5d %10lld %14.3f %14.3f\n", comm_kind_name(k), comm_group_name(g),
                    c->group_size[g], c->ledger.calls[k][g], c->ledger.payload_bytes[k][g] / 1e6,
                    c->ledger.sent_bytes[k][g] / 1e6);
        }
    }
    fprintf(f, "  %-15s %-6s %5s %10lld %14.3f %14.3f\n", "total", "", "",
            ledger_calls(c, COMM_ALL_KINDS, GROUP_ALL),
            ledger_payload_bytes(c, COMM_ALL_KINDS, GROUP_ALL) / 1e6,
            ledger_sent_bytes(c, COMM_ALL_KINDS, GROUP_ALL) / 1e6);
}

// JSON object of the non-empty rows, for --report-json:
//   {"rank":0,"rows":[{"kind":"all_reduce","group":"dp","size":2,"calls":1,"payload_bytes":..,
//     "sent_bytes":..},...],"total_calls":..,"total_payload_bytes":..,"total_sent_bytes":..}
// Returns the length of the whole text (as snprintf); the text is complete iff it is < cap.
static int ledger_json(const Comm* c, char* buf, size_t cap) {
    size_t len = 0;
#define LEDGER_PUT(...) do { \
        int w_ = snprintf(len < cap ? buf + len : NULL, len < cap ? cap - len : 0, __VA_ARGS__); \
        if (w_ > 0) len += (size_t)w_; } while (0)
    LEDGER_PUT("{\"rank\":%d,\"rows\":[", c->world_rank);
    int first = 1;
    for (int k = 0; k < COMM_NUM_KINDS; k++) {
        for (int g = 0; g < COMM_NUM_GROUPS; g++) {
            if (c->ledger.calls[k][g] == 0) continue;
            LEDGER_PUT("%s{\"kind\":\"%s\",\"group\":\"%s\",\"size\":%d,\"calls\":%lld,"
                       "\"payload_bytes\":%.0f,\"sent_bytes\":%.1f}", first ? "" : ",", comm_kind_name(k),
                       comm_group_name(g), c->group_size[g], c->ledger.calls[k][g],
                       c->ledger.payload_bytes[k][g], c->ledger.sent_bytes[k][g]);
            first = 0;
        }
    }
    LEDGER_PUT("],\"total_calls\":%lld,\"total_payload_bytes\":%.0f,\"total_sent_bytes\":%.1f}",
               ledger_calls(c, COMM_ALL_KINDS, GROUP_ALL), ledger_payload_bytes(c, COMM_ALL_KINDS, GROUP_ALL),
               ledger_sent_bytes(c, COMM_ALL_KINDS, GROUP_ALL));
#undef LEDGER_PUT
    if (cap > 0 && len >= cap) buf[cap - 1] = '\0';
    return (int)len;
}

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
// multiply n floats by s in place (the MPI average); host memory in this build
static inline void comm_finish_host(CommHandle* h) {
    if (h->move_bytes > 0) memmove(h->move_dst, h->move_src, h->move_bytes);
    for (size_t i = 0; i < h->scale_n; i++) h->scale_buf[i] *= h->scale;
    h->move_bytes = 0;
    h->scale_n = 0;
    h->pending = 0;
}
static inline int comm_mpi_count(size_t n, const char* op) {
    if (n > (size_t)INT_MAX) {
        fatal("%s: %zu elements exceed MPI's int count (%d); split the buffer into buckets", op, n, INT_MAX);
    }
    return (int)n;
}
#endif

#if COMM_NCCL
static inline ncclDataType_t comm_nccl_type(CommDtype dt) { return dt == COMM_BF16 ? ncclBfloat16 : ncclFloat32; }
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
    ncclRedOp_t nop = op == COMM_AVG ? ncclAvg : ncclSum;
    comm_stream_begin(c, stream);
    double t0 = wall_ms();
    switch (kind) {
        case COMM_ALL_REDUCE: ncclCheck(ncclAllReduce(send, recv, n, nt, nop, nc, c->stream)); break;
        case COMM_REDUCE_SCATTER: ncclCheck(ncclReduceScatter(send, recv, n, nt, nop, nc, c->stream)); break;
        case COMM_ALL_GATHER: ncclCheck(ncclAllGather(send, recv, n, nt, nc, c->stream)); break;
        case COMM_BROADCAST: ncclCheck(ncclBroadcast(recv, recv, n, nt, peer, nc, c->stream)); break;
        case COMM_SEND: ncclCheck(ncclSend(send, n, nt, peer, nc, c->stream)); break;
        case COMM_RECV: ncclCheck(ncclRecv(recv, n, nt, peer, nc, c->stream)); break;
        default: fatal("comm: unknown collective %d", (int)kind);
    }
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
    if (dt != COMM_FLOAT) fatal("%s: %s buffers over MPI: the MPI path is FP32 only (bf16 goes over NCCL)", name, comm_dtype_name(dt));
    MPI_Comm mc = c->mpi[g];
    int cnt = comm_mpi_count(n, name);
    MPI_Datatype mt = MPI_FLOAT;
    MPI_Request* req = nonblocking ? &h.req : NULL;
    if (op == COMM_AVG && (kind == COMM_ALL_REDUCE || kind == COMM_REDUCE_SCATTER)) {
        h.scale_buf = (float*)recv;
        h.scale_n = n;
        h.scale = 1.0f / (float)N;
    }
    switch (kind) {
        case COMM_ALL_REDUCE: {
            const void* sb = in_place ? MPI_IN_PLACE : send;
            if (req) mpiCheck(MPI_Iallreduce(sb, recv, cnt, mt, MPI_SUM, mc, req));
            else mpiCheck(MPI_Allreduce(sb, recv, cnt, mt, MPI_SUM, mc));
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
            if (req) mpiCheck(MPI_Ireduce_scatter_block(sb, rb, cnt, mt, MPI_SUM, mc, req));
            else mpiCheck(MPI_Reduce_scatter_block(sb, rb, cnt, mt, MPI_SUM, mc));
            break;
        }
        case COMM_ALL_GATHER: {
            const void* sb = in_place ? MPI_IN_PLACE : send;
            if ((size_t)N * n > (size_t)INT_MAX) comm_mpi_count((size_t)N * n, name);
            if (req) mpiCheck(MPI_Iallgather(sb, cnt, mt, recv, cnt, mt, mc, req));
            else mpiCheck(MPI_Allgather(sb, cnt, mt, recv, cnt, mt, mc));
            break;
        }
        case COMM_BROADCAST: mpiCheck(MPI_Bcast(recv, cnt, mt, peer, mc)); break;
        case COMM_SEND: mpiCheck(MPI_Send(send, cnt, mt, peer, 0, mc)); break;
        case COMM_RECV: {
            MPI_Status st;
            mpiCheck(MPI_Recv(recv, cnt, mt, peer, 0, mc, &st));
            int got = 0;
            mpiCheck(MPI_Get_count(&st, mt, &got));
            if (got != cnt) {
                fatal("recv: expected %d elements from rank %d of the %s group, got %d", cnt, peer,
                      comm_group_name(g), got);
            }
            break;
        }
        default: fatal("comm: unknown collective %d", (int)kind);
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
// the API: T is float or floatX (__nv_bfloat16 in the BF16 kernel builds)

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
// point to point; dst / src are ranks within the group. A matching recv must be posted by the peer
// (blocking sends of two ranks to each other can deadlock: use comm_sendrecv for exchanges).
template <typename T>
static void comm_send(Comm* c, CommGroup g, const T* buf, size_t n, int dst, cudaStream_t stream) {
    comm_run(c, COMM_SEND, g, buf, NULL, n, comm_dtype_of(buf), COMM_SUM, dst, stream, 0);
}
template <typename T>
static void comm_recv(Comm* c, CommGroup g, T* buf, size_t n, int src, cudaStream_t stream) {
    comm_run(c, COMM_RECV, g, NULL, buf, n, comm_dtype_of(buf), COMM_SUM, src, stream, 0);
}
// send n_send elements to dst and receive n_recv elements from src at once (no ordering deadlock);
// dst == src == own rank copies. Counted in the ledger as one send and one recv.
template <typename T>
static void comm_sendrecv(Comm* c, CommGroup g, const T* send, size_t n_send, int dst, T* recv, size_t n_recv,
                          int src, cudaStream_t stream) {
    if ((int)g < 0 || (int)g >= COMM_NUM_GROUPS) fatal("sendrecv: invalid group %d", (int)g);
    const int N = c->group_size[g], me = c->group_rank[g];
    if (dst < 0 || dst >= N || src < 0 || src >= N) {
        fatal("sendrecv: ranks %d / %d are not both in the %s group of %d ranks", dst, src, comm_group_name(g), N);
    }
    CommDtype dt = comm_dtype_of(send);
    size_t esz = comm_dtype_size(dt);
    comm_check_buffer(send, n_send * esz, "send", "sendrecv");
    comm_check_buffer(recv, n_recv * esz, "recv", "sendrecv");
    if ((dst == me) != (src == me)) fatal("sendrecv: rank %d of the %s group exchanges with itself on one side only", me, comm_group_name(g));
    ledger_add(c, COMM_SEND, g, (double)(n_send * esz), 0);
    ledger_add(c, COMM_RECV, g, (double)(n_recv * esz), 0);
    if (dst == me) {
        if (n_send != n_recv) fatal("sendrecv: to itself with %zu sent and %zu received elements", n_send, n_recv);
        if (n_send > 0 && (const void*)send != (const void*)recv) copy_device_to_device(recv, send, n_send * esz, stream);
        return;
    }
#if COMM_NCCL
    ncclDataType_t nt = comm_nccl_type(dt);
    comm_stream_begin(c, stream);
    ncclCheck(ncclGroupStart());
    ncclCheck(ncclSend(send, n_send, nt, dst, c->nccl[g], c->stream));
    ncclCheck(ncclRecv(recv, n_recv, nt, src, c->nccl[g], c->stream));
    ncclCheck(ncclGroupEnd());
    cudaCheck(cudaStreamWaitEvent(stream, c->done_events[comm_stream_end(c)], 0));
#elif COMM_MPI
    (void)stream;
    MPI_Datatype mt = MPI_FLOAT;
    MPI_Status st;
    int nr = comm_mpi_count(n_recv, "sendrecv");
    mpiCheck(MPI_Sendrecv(send, comm_mpi_count(n_send, "sendrecv"), mt, dst, 0, recv, nr, mt, src, 0, c->mpi[g], &st));
    int got = 0;
    mpiCheck(MPI_Get_count(&st, mt, &got));
    if (got != nr) fatal("sendrecv: expected %d elements from rank %d of the %s group, got %d", nr, src, comm_group_name(g), got);
#else
    (void)stream;
    fatal("sendrecv: a group of %d ranks in a build without MPI", N);  // unreachable
#endif
}

// One send or receive of a batch: n elements of buf to / from rank `peer` of the group. tag tells
// the messages between two ranks apart over MPI; over NCCL (no tags) the sends from a to b match
// the receives of b from a in the order each side lists them, so both sides list a batch's
// messages in the same order.
typedef struct {
    int send;            // 1: send buf, 0: receive into buf
    void* buf;
    size_t n;
    int peer;
    int tag;
    CommHandle* posted;  // a send started early by comm_p2p_post_send (same buf, n, peer, tag), or NULL
} CommP2P;

// Starts a send as soon as its data is ready, ahead of the batch that completes it (pass the handle
// in that batch's CommP2P.posted). Over MPI it is an MPI_Isend: the receiver can take the data
// whenever it posts its receive, while this rank computes. Over NCCL a send is issued on the
// communication stream and would hold it until received, so it waits for its batch: nothing happens
// here.
static CommHandle comm_p2p_post_send(Comm* c, CommGroup g, const void* buf, size_t n, int peer, int tag, CommDtype dt) {
    CommHandle h;
    memset(&h, 0, sizeof(h));
#if COMM_MPI && !COMM_NCCL
    if (dt != COMM_FLOAT) fatal("p2p_post_send: the MPI transport carries float only, found %s", comm_dtype_name(dt));
    if (peer < 0 || peer >= c->group_size[g] || peer == c->group_rank[g]) fatal("p2p_post_send: no rank %d to send to in the %s group", peer, comm_group_name(g));
    mpiCheck(MPI_Isend(buf, comm_mpi_count(n, "p2p_post_send"), MPI_FLOAT, peer, tag, c->mpi[g], &h.req));
    h.pending = 1;
#else
    (void)c; (void)g; (void)buf; (void)n; (void)peer; (void)tag; (void)dt;
#endif
    return h;
}

// Posts every send and receive of ops together and returns when all are done (the compute stream
// waits for them over NCCL): no message of the batch waits for another, so two ranks may send to
// each other in one batch. Each is counted in the ledger as a send or a recv of the group. A send
// posted early (MPI) is only waited here.
static void comm_p2p_batch(Comm* c, CommGroup g, const CommP2P* ops, int n, CommDtype dt, cudaStream_t stream) {
    if ((int)g < 0 || (int)g >= COMM_NUM_GROUPS) fatal("p2p_batch: invalid group %d", (int)g);
    const int N = c->group_size[g], me = c->group_rank[g];
    size_t esz = comm_dtype_size(dt);
    for (int i = 0; i < n; i++) {
        const CommP2P* o = &ops[i];
        if (o->peer < 0 || o->peer >= N || o->peer == me) {
            fatal("p2p_batch: rank %d of the %s group of %d ranks cannot %s rank %d", me, comm_group_name(g), N,
                  o->send ? "send to" : "receive from", o->peer);
        }
        comm_check_buffer(o->buf, o->n * esz, o->send ? "send" : "recv", "p2p_batch");
        ledger_add(c, o->send ? COMM_SEND : COMM_RECV, g, (double)(o->n * esz), 0);
    }
    if (n == 0) return;
#if COMM_NCCL
    ncclDataType_t nt = comm_nccl_type(dt);
    comm_stream_begin(c, stream);
    ncclCheck(ncclGroupStart());
    for (int i = 0; i < n; i++) {
        if (ops[i].send) ncclCheck(ncclSend(ops[i].buf, ops[i].n, nt, ops[i].peer, c->nccl[g], c->stream));
        else ncclCheck(ncclRecv(ops[i].buf, ops[i].n, nt, ops[i].peer, c->nccl[g], c->stream));
    }
    ncclCheck(ncclGroupEnd());
    cudaCheck(cudaStreamWaitEvent(stream, c->done_events[comm_stream_end(c)], 0));
#elif COMM_MPI
    (void)stream;
    if (dt != COMM_FLOAT) fatal("p2p_batch: the MPI transport carries float only, found %s", comm_dtype_name(dt));
    MPI_Request* req = (MPI_Request*)mallocCheck((size_t)n * sizeof(MPI_Request));
    double t0 = wall_ms();
    for (int i = 0; i < n; i++) {
        int cnt = comm_mpi_count(ops[i].n, "p2p_batch");
        if (ops[i].send && ops[i].posted && ops[i].posted->pending) { req[i] = ops[i].posted->req; ops[i].posted->pending = 0; }
        else if (ops[i].send) mpiCheck(MPI_Isend(ops[i].buf, cnt, MPI_FLOAT, ops[i].peer, ops[i].tag, c->mpi[g], &req[i]));
        else mpiCheck(MPI_Irecv(ops[i].buf, cnt, MPI_FLOAT, ops[i].peer, ops[i].tag, c->mpi[g], &req[i]));
    }
    mpiCheck(MPI_Waitall(n, req, MPI_STATUSES_IGNORE));
    c->blocking_ms[g] += wall_ms() - t0;
    free(req);
#else
    (void)stream; (void)dt;
    fatal("p2p_batch: a group of %d ranks in a build without MPI", N);  // unreachable: peers were checked
#endif
}

// host-side barrier of the group (it does not wait for queued GPU work)
static void comm_barrier(Comm* c, CommGroup g) {
    if ((int)g < 0 || (int)g >= COMM_NUM_GROUPS) fatal("barrier: invalid group %d", (int)g);
#if COMM_MPI
    mpiCheck(MPI_Barrier(c->mpi[g]));
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
    mpiCheck(MPI_Wait(&h->req, MPI_STATUS_IGNORE));
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
