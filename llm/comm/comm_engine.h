// comm_engine.h: the engine of llm/comm/comm.h: one function, comm_run, runs every kind of collective and
// P2P in every build. It checks the group, the peer and the buffers (device memory; the in-place
// layouts), adds the call to the ledger, numbers it for the watchdog, then copies locally (a group of
// one), enqueues it on NCCL's communication stream (after the compute stream's work, an event; its
// completion event timed for the wait) or starts it over MPI (16-bit buffers: llm/comm/comm_mpi16.h).
// Its transport's files come with it: the watchdog of the transport (llm/comm/watchdog_nccl.h, or
// llm/comm/watchdog_mpi.h and the CPU build's 16-bit reductions llm/comm/comm_mpi16.h), so that the API
// above it (llm/comm/comm.h, llm/comm/comm_p2p.h) reaches them here.
#pragma once

#include "../core/device.h"
#include "comm_types.h"
#include "comm_ledger.h"
#include "watchdog.h"
#if COMM_NCCL
#include "watchdog_nccl.h"
#elif COMM_MPI
#include "watchdog_mpi.h"
#include "comm_mpi16.h"
#endif

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

#if COMM_NCCL
static inline ncclDataType_t comm_nccl_type(CommDtype dt) {
    return dt == COMM_BF16 ? ncclBfloat16 : (dt == COMM_FP16 ? ncclFloat16 : ncclFloat32);
}
// the comm stream waits for everything already enqueued on the compute stream
static inline void comm_stream_begin(Comm* c, cudaStream_t compute) {
    cudaCheck(cudaEventRecord(c->begin_event, compute));
    cudaCheck(cudaStreamWaitEvent(c->stream, c->begin_event, 0));
}
// all_to_all over NCCL, which has no such call: block j of send to rank j of group g, block i of recv
// from rank i, as one group of sends and receives (none waits for another), on the comm stream after
// comm_stream_begin. The rank's own block is copied on the comm stream too, so that the completion
// event the compute stream waits for (comm_stream_end) covers it like the blocks received. Returns
// ncclGroupEnd's result for nccl_settle; the calls inside the group only queue (checked at once).
static ncclResult_t comm_nccl_all_to_all(Comm* c, CommGroup g, const void* send, void* recv, size_t n, CommDtype dt) {
    const int N = c->group_size[g], me = c->group_rank[g];
    const size_t bytes = n * comm_dtype_size(dt);
    const char* s = (const char*)send;
    char* r = (char*)recv;
    ncclDataType_t nt = comm_nccl_type(dt);
    if (bytes > 0) copy_device_to_device(r + me * bytes, s + me * bytes, bytes, c->stream);
    ncclCheck(ncclGroupStart());
    for (int k = 1; k < N; k++) {  // to the k-th next rank, from the k-th previous: each pair meets once
        int to = (me + k) % N, from = (me + N - k) % N;
        ncclCheck(ncclSend(s + to * bytes, n, nt, to, c->nccl[g], c->stream));
        ncclCheck(ncclRecv(r + from * bytes, n, nt, from, c->nccl[g], c->stream));
    }
    return ncclGroupEnd();
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

// the compute stream of h waits for h's work on the comm stream (the wait timed by an event pair: see
// comm_take_wait_ms in llm/comm/comm.h)
static inline void comm_stream_wait_handle(Comm* c, CommHandle* h) {
    if (h->gen == c->done_gen[h->slot]) {
        cudaCheck(cudaEventRecord(c->ready_events[h->slot], h->stream));
        c->wait_unread[h->slot] = 1;
    } else {
        c->waits_untimed++;  // its event was re-recorded for a later collective: ordered, not timed
    }
    cudaCheck(cudaStreamWaitEvent(h->stream, h->event, 0));
    h->pending = 0;
}
#endif

// n: elements of all_reduce / broadcast / send / recv; the block (per-rank) count of reduce_scatter,
// all_gather and all_to_all. peer: the root of broadcast, the destination of send, the source of
// recv. at: the API call's site (the watchdog's line).
static CommHandle comm_run_body(Comm* c, CommKind kind, CommGroup g, const void* send, void* recv, size_t n,
                                CommDtype dt, CommReduce op, int peer, cudaStream_t stream, int nonblocking,
                                CommSite at) {
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
    if (kind == COMM_REDUCE_SCATTER || kind == COMM_ALL_TO_ALL) send_bytes *= N;
    if (kind == COMM_ALL_GATHER || kind == COMM_ALL_TO_ALL) recv_bytes *= N;
    if (kind == COMM_SEND || kind == COMM_RECV || kind == COMM_BROADCAST) {
        if (peer < 0 || peer >= N) fatal("%s: rank %d is not in the %s group of %d ranks", name, peer, comm_group_name(g), N);
    }
    if ((kind == COMM_SEND || kind == COMM_RECV) && peer == me) {
        fatal("%s: rank %d of the %s group cannot %s itself", name, me, comm_group_name(g),
              kind == COMM_SEND ? "send to" : "receive from");
    }
    // buffers and the in-place conventions
    int in_place = 0;
    if (kind == COMM_ALL_REDUCE || kind == COMM_REDUCE_SCATTER || kind == COMM_ALL_GATHER || kind == COMM_ALL_TO_ALL) {
        comm_check_buffer(send, send_bytes, "send", name);
        comm_check_buffer(recv, recv_bytes, "recv", name);
        if (kind == COMM_ALL_REDUCE) in_place = (send == recv);
        if (kind == COMM_REDUCE_SCATTER) in_place = ((const char*)recv == (const char*)send + me * n * esz);
        if (kind == COMM_ALL_GATHER) in_place = ((const char*)send == (const char*)recv + me * n * esz);
        // all_to_all has no in-place layout: any overlap is refused below
        if (!in_place && n > 0 && comm_ranges_overlap(send, send_bytes, recv, recv_bytes)) {
            fatal("%s: send and recv buffers overlap %s (see llm/comm/comm.h)", name,
                  kind == COMM_ALL_TO_ALL ? "(it has no in-place form)" : "but are not the in-place layout");
        }
    } else {
        comm_check_buffer(kind == COMM_SEND ? send : recv, n * esz, "the", name);
    }
    double payload = (double)(kind == COMM_REDUCE_SCATTER || kind == COMM_ALL_TO_ALL ? send_bytes : recv_bytes);
    ledger_add(c, kind, g, payload, kind == COMM_BROADCAST && peer == me);
    int p2p = kind == COMM_SEND || kind == COMM_RECV;
    h.kind = kind;
    h.group = g;
    h.seq = p2p ? 0 : ++c->wd.seq[g];
    h.at = at;

    // a group of one: local copies (and an average over one rank is the identity)
    if (N == 1) {
        if (!in_place && n > 0 && (kind == COMM_ALL_REDUCE || kind == COMM_REDUCE_SCATTER || kind == COMM_ALL_GATHER ||
                                   kind == COMM_ALL_TO_ALL)) {
            copy_device_to_device(recv, send, n * esz, stream);  // (all_to_all: its one block, n elements)
        }
        return h;
    }

#if COMM_NCCL
    ncclComm_t nc = c->nccl[g];
    ncclDataType_t nt = comm_nccl_type(dt);
    ncclRedOp_t nop = op == COMM_AVG ? ncclAvg : (op == COMM_MAX ? ncclMax : ncclSum);
    comm_stream_begin(c, stream);
    double t0 = wall_ms();
    int wi = wd_nccl_begin(c, name, g, h.seq, at);
    ncclResult_t r = ncclSuccess;
    switch (kind) {
        case COMM_ALL_REDUCE: r = ncclAllReduce(send, recv, n, nt, nop, nc, c->stream); break;
        case COMM_REDUCE_SCATTER: r = ncclReduceScatter(send, recv, n, nt, nop, nc, c->stream); break;
        case COMM_ALL_GATHER: r = ncclAllGather(send, recv, n, nt, nc, c->stream); break;
        case COMM_BROADCAST: r = ncclBroadcast(recv, recv, n, nt, peer, nc, c->stream); break;
        case COMM_SEND: r = ncclSend(send, n, nt, peer, nc, c->stream); break;
        case COMM_RECV: r = ncclRecv(recv, n, nt, peer, nc, c->stream); break;
        case COMM_ALL_TO_ALL: r = comm_nccl_all_to_all(c, g, send, recv, n, dt); break;
        default: fatal("comm: unknown collective %d", (int)kind);
    }
    nccl_settle(nc, r, __FILE__, __LINE__);
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
    MPI_Datatype mt = comm_mpi_type(dt);  // 16-bit: llm/comm/comm_mpi16.h's user ops reduce them
    MPI_Request* req = &h.req;  // blocking forms too: wd_wait bounds the wait (llm/comm/watchdog.h)
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
        case COMM_ALL_TO_ALL: {  // (16-bit blocks travel as MPI_UINT16_T: nothing is reduced)
            if ((size_t)N * n > (size_t)INT_MAX) comm_mpi_count((size_t)N * n, name);
            mpiCheck(MPI_Ialltoall(send, cnt, mt, recv, cnt, mt, mc, req));
            break;
        }
        default: fatal("comm: unknown collective %d", (int)kind);
    }
    if (!nonblocking) {
        WdWait w = p2p ? wd_p2p(c, name, g, &peer, 1, at) : wd_collective(c, name, g, h.seq, at);
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
                           CommDtype dt, CommReduce op, int peer, cudaStream_t stream, int nonblocking, CommSite at) {
    double t0 = wall_ms();
    CommHandle h = comm_run_body(c, kind, g, send, recv, n, dt, op, peer, stream, nonblocking, at);
    if (!nonblocking) c->blocking_ms[g] += wall_ms() - t0;  // (g was checked by the body)
    return h;
}
