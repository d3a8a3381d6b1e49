// comm_engine.h: the engine of llm/comm/comm.h: one function, comm_run, runs every kind of collective and
// P2P in every build. This file is the part every transport shares: it checks the group, the peer and
// the buffers (device memory; the in-place layouts), adds the call to the ledger, numbers it for the
// watchdog, copies locally for a group of one, and otherwise hands the call (CommCall,
// llm/comm/comm_types.h) to its transport's file, one per transport, each with the same signature
// (as the watchdog is split, llm/comm/watchdog.h):
//     llm/comm/comm_engine_nccl.h  NCCL (CUDA and emulated builds): enqueued on the communication stream
//                                  after the compute stream's work, its completion event timed for the wait
//     llm/comm/comm_engine_mpi.h   MPI (CPU build): started as a non-blocking MPI call (16-bit buffers:
//                                  llm/comm/comm_mpi16.h), waited under the watchdog unless non-blocking
//     llm/comm/comm_engine_none.h  without MPI: one process, so every group has one rank
// The transport's file brings its watchdog (llm/comm/watchdog_nccl.h, llm/comm/watchdog_mpi.h) and,
// over MPI, the 16-bit reductions, so that the API above (llm/comm/comm.h, llm/comm/comm_p2p.h) reaches
// them here.
#pragma once

#include "../core/device.h"
#include "comm_types.h"
#include "comm_ledger.h"
#if COMM_NCCL
#include "comm_engine_nccl.h"
#elif COMM_MPI
#include "comm_engine_mpi.h"
#else
#include "comm_engine_none.h"
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

// the part of comm_run every transport shares: the checks, the ledger, the watchdog's number, a group of
// one; then the transport. call->in_place is set here.
static CommHandle comm_run_body(Comm* c, CommCall* call) {
    CommHandle h;
    memset(&h, 0, sizeof(h));
#if COMM_MPI && !COMM_NCCL
    h.req = MPI_REQUEST_NULL;
#endif
    const CommKind kind = call->kind;
    const CommGroup g = call->g;
    const void* send = call->send;
    void* recv = call->recv;
    const size_t n = call->n;
    const int peer = call->peer;
    const char* name = comm_kind_name(kind);
    if ((int)g < 0 || (int)g >= COMM_NUM_GROUPS) fatal("%s: invalid group %d", name, (int)g);
    const int N = c->group_size[g], me = c->group_rank[g];
    const size_t esz = comm_dtype_size(call->dt);
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
    call->in_place = in_place;
    double payload = (double)(kind == COMM_REDUCE_SCATTER || kind == COMM_ALL_TO_ALL ? send_bytes : recv_bytes);
    ledger_add(c, kind, g, payload, kind == COMM_BROADCAST && peer == me);
    int p2p = kind == COMM_SEND || kind == COMM_RECV;
    h.kind = kind;
    h.group = g;
    h.seq = p2p ? 0 : ++c->wd.seq[g];
    h.at = call->at;

    // a group of one: local copies (and an average over one rank is the identity)
    if (N == 1) {
        if (!in_place && n > 0 && (kind == COMM_ALL_REDUCE || kind == COMM_REDUCE_SCATTER || kind == COMM_ALL_GATHER ||
                                   kind == COMM_ALL_TO_ALL)) {
            copy_device_to_device(recv, send, n * esz, call->stream);  // (all_to_all: its one block, n elements)
        }
        return h;
    }
#if COMM_NCCL
    comm_run_nccl(c, call, &h);
#elif COMM_MPI
    comm_run_mpi(c, call, &h);
#else
    comm_run_none(c, call, &h);
#endif
    return h;
}

// every collective and P2P: the call (what each parameter is: CommCall, llm/comm/comm_types.h) through
// the body above, the host time of the blocking ones counted per group
static CommHandle comm_run(Comm* c, CommKind kind, CommGroup g, const void* send, void* recv, size_t n,
                           CommDtype dt, CommReduce op, int peer, cudaStream_t stream, int nonblocking, CommSite at) {
    CommCall call = {kind, g, send, recv, n, dt, op, peer, stream, nonblocking, at, 0};
    double t0 = wall_ms();
    CommHandle h = comm_run_body(c, &call);
    if (!nonblocking) c->blocking_ms[g] += wall_ms() - t0;  // (g was checked by the body)
    return h;
}
