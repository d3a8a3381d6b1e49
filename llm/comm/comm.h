// comm.h: the collectives the parallel stages call, each naming its group of the process mesh, over
// NCCL (CUDA build, and the emulated build through nccl_emu.h) or MPI (CPU build), and the time the
// computation waits for communication: the API of llm/comm/, and the one header its users include.
// The layers under it, each a header that includes what it uses (bottom up):
//     llm/comm/comm_transport.h  which transport (MPI, NCCL, none), its headers, the checks of its calls
//     llm/comm/comm_types.h      the types: kinds, CommSite, Comm (with its Mesh), CommHandle, the watchdog's state
//     llm/comm/watchdog.h        the communication watchdog (--comm-timeout): what both transports share;
//                                llm/comm/watchdog_mpi.h (MPI, the side channel), llm/comm/watchdog_nccl.h
//                                (NCCL's watchdog thread, over MPI's side channel)
//     llm/comm/mesh.h            the mesh of named axes dp x pp x cp x tp: sizes, coordinates, groups, the rank order
//     llm/comm/comm_mesh.h       the processes and the mesh's communicators: comm_init, one GPU per process, comm_free
//     llm/comm/comm_ledger.h     the per-rank ledger of what every collective moved (the ring model)
//     llm/comm/comm_mpi16.h      the CPU build's MPI path: 16-bit reductions (user ops), finishing a request
//     llm/comm/comm_engine.h     comm_run: the one function under every collective and P2P, in every build:
//                                the part every transport shares; one file per transport's part:
//                                llm/comm/comm_engine_nccl.h, llm/comm/comm_engine_mpi.h, llm/comm/comm_engine_none.h
//     llm/comm/comm_p2p.h        point to point within a group: send, recv, sendrecv, batches of them
//     llm/comm/comm_all_to_all_v.h  the all-to-all of variable block sizes (expert parallelism)
//
// The call site. Every function of the API takes, last, the caller's file:line (`CommSite at =
// comm_here()`, llm/comm/comm_types.h), which the caller leaves out: the watchdog's line names it.
//
// The transports (NCCL, MPI, none) and how each build chooses: llm/comm/comm_transport.h.
//
// The collectives (here and in comm_p2p.h, on floatX or float buffers; float for the FP32 optimizer
// state and norms). In the CUDA build the buffers are device memory, in the emulated build they
// are cudaMalloc'd emulated device memory (checked), in the CPU build host memory.
//     all_reduce      recv[i] = sum over ranks of send[i]  (or the average); n elements each
//     reduce_scatter  send has size*block elements; rank r gets block r of the sum (or average)
//     all_gather      send has block elements; recv (size*block) gets every rank's block in order
//     broadcast       buf of root to every rank
//     all_to_all      send and recv have size*block elements; block j of send goes to rank j, block i
//                     of recv is what rank i sent to this rank (DeepSpeed-Ulysses, Jacobs et al. 2023:
//                     a sequence split becomes a head split and back). Over NCCL one group of a
//                     ncclSend and a ncclRecv per other rank, the own block copied on the comm stream;
//                     over MPI MPI_Ialltoall. Blocking only.
//     send / recv     point to point within a group (pipeline stages; comm_p2p.h), sendrecv for both,
//                     p2p_batch for several sends and receives posted together (none waits for
//                     another of the batch: NCCL's group, MPI_Isend/Irecv + Waitall)
//     barrier         host-side barrier of the group
//     host data       comm_all_gather_host, comm_host_min, comm_gather_bytes: plain host values of the
//                     world's ranks (stragglers, agreements, reports), outside the ledger
// In place: all_reduce with send == recv; reduce_scatter with recv == send + rank*block (the other
// blocks of send are left undefined); all_gather with send == recv + rank*block. These are NCCL's
// conventions; all_to_all has none. Any other overlap of send and recv is refused. Sizes that do not
// divide evenly are the caller's job (pad to size*block).
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
// BF16 / FP16 storage is llm/core/half_cpu.h's) 16-bit buffers are reduced the same way, each partial sum
// rounded to the buffer's type, by MPI user ops (llm/comm/comm_mpi16.h); the average is the sum times 1/N. FP16 (PRECISION=FP16)
// goes the same way (ncclFloat16, summed in fp16: relative error <= 2^-11 per partial sum; a sum
// beyond 65504 is inf, which the loss scaler of llm/precision/loss_scale.h sees as an overflow and skips).
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
// Errors. Every MPI call goes through mpiCheck and every NCCL call through ncclCheck
// (llm/comm/comm_transport.h): a failure prints one line naming the call's file:line and ends the
// whole job (comm_abort_all: MPI_Abort). An invalid layout (world size != dp*tp*pp) is refused before
// anything is allocated: rank 0 prints one line, every rank exits 1.
#pragma once

#include "comm_types.h"
#include "comm_mesh.h"
#include "comm_ledger.h"
#include "comm_engine.h"  // (and the watchdog of this build's transport)
#include "comm_p2p.h"
#include "comm_all_to_all_v.h"

// ----------------------------------------------------------------------------
// the API: T is float or floatX (__nv_bfloat16 in the BF16 kernel builds, __half in the FP16 ones)

template <typename T>
static void comm_all_reduce(Comm* c, CommGroup g, const T* send, T* recv, size_t n, CommReduce op, cudaStream_t stream,
                            CommSite at = comm_here()) {
    comm_run(c, COMM_ALL_REDUCE, g, send, recv, n, comm_dtype_of(send), op, 0, stream, 0, at);
}
// send: size*block elements; recv: block elements (block `rank` of the reduction)
template <typename T>
static void comm_reduce_scatter(Comm* c, CommGroup g, const T* send, T* recv, size_t block, CommReduce op, cudaStream_t stream,
                                CommSite at = comm_here()) {
    comm_run(c, COMM_REDUCE_SCATTER, g, send, recv, block, comm_dtype_of(send), op, 0, stream, 0, at);
}
// send: block elements; recv: size*block elements, rank r's block at r*block
template <typename T>
static void comm_all_gather(Comm* c, CommGroup g, const T* send, T* recv, size_t block, cudaStream_t stream,
                            CommSite at = comm_here()) {
    comm_run(c, COMM_ALL_GATHER, g, send, recv, block, comm_dtype_of(send), COMM_SUM, 0, stream, 0, at);
}
// send: size*block elements, block j for rank j; recv: size*block elements, rank i's block for this
// rank at i*block. Not in place (send and recv must not overlap).
template <typename T>
static void comm_all_to_all(Comm* c, CommGroup g, const T* send, T* recv, size_t block, cudaStream_t stream,
                            CommSite at = comm_here()) {
    comm_run(c, COMM_ALL_TO_ALL, g, send, recv, block, comm_dtype_of(send), COMM_SUM, 0, stream, 0, at);
}
template <typename T>
static void comm_broadcast(Comm* c, CommGroup g, T* buf, size_t n, int root, cudaStream_t stream,
                           CommSite at = comm_here()) {
    comm_run(c, COMM_BROADCAST, g, buf, buf, n, comm_dtype_of(buf), COMM_SUM, root, stream, 0, at);
}
// host-side barrier of the group (it does not wait for queued GPU work)
static void comm_barrier(Comm* c, CommGroup g, CommSite at = comm_here()) {
    if ((int)g < 0 || (int)g >= COMM_NUM_GROUPS) fatal("barrier: invalid group %d", (int)g);
#if COMM_MPI
    if (c->group_size[g] == 1) return;
    WdWait w = wd_collective(c, "barrier", g, ++c->wd.seq[g], at);
    MPI_Request req;
    mpiCheck(MPI_Ibarrier(c->mpi[g], &req));
    wd_wait(c, 1, &req, MPI_STATUSES_IGNORE, &w);
#else
    (void)c; (void)at;  // one process
#endif
}

// non-blocking forms: same arguments, the result is valid after comm_wait
template <typename T>
static CommHandle comm_all_reduce_start(Comm* c, CommGroup g, const T* send, T* recv, size_t n, CommReduce op, cudaStream_t stream,
                                        CommSite at = comm_here()) {
    return comm_run(c, COMM_ALL_REDUCE, g, send, recv, n, comm_dtype_of(send), op, 0, stream, 1, at);
}
template <typename T>
static CommHandle comm_reduce_scatter_start(Comm* c, CommGroup g, const T* send, T* recv, size_t block, CommReduce op, cudaStream_t stream,
                                            CommSite at = comm_here()) {
    return comm_run(c, COMM_REDUCE_SCATTER, g, send, recv, block, comm_dtype_of(send), op, 0, stream, 1, at);
}
template <typename T>
static CommHandle comm_all_gather_start(Comm* c, CommGroup g, const T* send, T* recv, size_t block, cudaStream_t stream,
                                        CommSite at = comm_here()) {
    return comm_run(c, COMM_ALL_GATHER, g, send, recv, block, comm_dtype_of(send), COMM_SUM, 0, stream, 1, at);
}

// NCCL: the compute stream given at the start waits for the collective (the host does not block);
// the wait is timed by an event pair (see the top of the file).
// MPI: blocks until the request completes (timed), then finishes the average / in-place move.
static void comm_wait(Comm* c, CommHandle* h, CommSite at = comm_here()) {
    if (!h->pending) return;
#if COMM_NCCL
    (void)at;
    comm_stream_wait_handle(c, h);
#elif COMM_MPI
    double t0 = wall_ms();
    WdWait w = wd_collective(c, comm_kind_name(h->kind), h->group, h->seq, at);
    char started[300];  // the wait's site, and where the collective was started
    snprintf(started, sizeof(started), "%s:%d (started at %s:%d)", w.file, w.line, h->at.file, h->at.line);
    w.file = started;
    w.line = 0;
    wd_wait(c, 1, &h->req, MPI_STATUSES_IGNORE, &w);
    c->wait_ms += wall_ms() - t0;
    comm_finish_host(h);
#else
    (void)c; (void)at;
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

// ----------------------------------------------------------------------------
// host data: plain host values of every rank, outside the ledger, bounded by the watchdog like every
// collective

// Host doubles of every rank to every rank: all (world_size values) gets rank r's at r. Plain host
// data, outside the ledger (the straggler detector, llm/faults/straggler.h).
static void comm_all_gather_host(Comm* c, double mine, double* all, CommSite at = comm_here()) {
#if COMM_MPI
    WdWait w = wd_collective(c, "all_gather", GROUP_WORLD, ++c->wd.seq[GROUP_WORLD], at);
    MPI_Request req;
    mpiCheck(MPI_Iallgather(&mine, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, c->mpi[GROUP_WORLD], &req));
    wd_wait(c, 1, &req, MPI_STATUSES_IGNORE, &w);
#else
    (void)c; (void)at;
    all[0] = mine;
#endif
}

// The minimum of one int over the world's ranks, on every rank: the host-side agreements (a failed save,
// a damaged checkpoint, a signal received: llm/ckpt/ckpt_dir.h, llm/faults/preempt.h), bounded by the watchdog like
// every collective. Plain host data, outside the ledger.
static int comm_host_min(Comm* c, int x, CommSite at = comm_here()) {
#if COMM_MPI
    WdWait w = wd_collective(c, "all_reduce (host)", GROUP_WORLD, ++c->wd.seq[GROUP_WORLD], at);
    MPI_Request req;
    int y = x;
    mpiCheck(MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_MIN, c->mpi[GROUP_WORLD], &req));
    wd_wait(c, 1, &req, MPI_STATUSES_IGNORE, &w);
    return y;
#else
    (void)c; (void)at;
    return x;
#endif
}

// Host bytes of every rank to world rank 0: `all` (world_size * bytes, rank r's at r * bytes) is
// written on rank 0 only (NULL elsewhere). Plain host data, outside the ledger (reports, logs).
static void comm_gather_bytes(Comm* c, const void* mine, size_t bytes, void* all, CommSite at = comm_here()) {
    if (bytes > (size_t)INT_MAX) fatal("comm_gather_bytes: %zu bytes exceed MPI's int count", bytes);
#if COMM_MPI
    WdWait w = wd_collective(c, "gather", GROUP_WORLD, ++c->wd.seq[GROUP_WORLD], at);
    MPI_Request req;
    mpiCheck(MPI_Igather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, 0, c->mpi[GROUP_WORLD], &req));
    wd_wait(c, 1, &req, MPI_STATUSES_IGNORE, &w);
#else
    (void)c; (void)at;
    if (bytes > 0) memcpy(all, mine, bytes);
#endif
}
