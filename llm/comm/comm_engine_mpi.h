// comm_engine_mpi.h: the engine's MPI transport (the CPU build's: MPI on host buffers, without NCCL):
// comm_run_mpi runs a call of a group of more than one rank once llm/comm/comm_engine.h has checked it,
// counted it and numbered it. Every call starts as MPI's non-blocking form (16-bit buffers travel as
// MPI_UINT16_T and are reduced by llm/comm/comm_mpi16.h's user ops); a blocking call is then waited
// under the watchdog (wd_wait, llm/comm/watchdog_mpi.h) and finished on the host at once (the average's
// 1/N, the in-place reduce_scatter's move: comm_finish_host), a non-blocking one by comm_wait later.
#pragma once

#include "comm_types.h"
#if !(COMM_MPI && !COMM_NCCL)
#error "llm/comm/comm_engine_mpi.h is the engine's MPI transport: include it only in builds with MPI and without NCCL"
#endif
#include "watchdog_mpi.h"
#include "comm_mpi16.h"

// the call over MPI; h: its handle (h->req is MPI_REQUEST_NULL), numbered by the engine (h->seq)
static void comm_run_mpi(Comm* c, const CommCall* call, CommHandle* h) {
    const char* name = comm_kind_name(call->kind);
    const int N = c->group_size[call->g], me = c->group_rank[call->g];
    const int p2p = call->kind == COMM_SEND || call->kind == COMM_RECV;
    MPI_Comm mc = c->mpi[call->g];
    int cnt = comm_mpi_count(call->n, name);
    MPI_Datatype mt = comm_mpi_type(call->dt);  // 16-bit: llm/comm/comm_mpi16.h's user ops reduce them
    MPI_Request* req = &h->req;  // blocking forms too: wd_wait bounds the wait (llm/comm/watchdog.h)
    const int is_max = call->op == COMM_MAX;
    MPI_Op mop = call->dt != COMM_FLOAT ? comm_mpi_op16(call->dt, is_max) : (is_max ? MPI_MAX : MPI_SUM);
    if (call->op == COMM_AVG && (call->kind == COMM_ALL_REDUCE || call->kind == COMM_REDUCE_SCATTER)) {
        h->scale_buf = call->recv;
        h->scale_n = call->n;
        h->scale = 1.0f / (float)N;
        h->scale_dt = call->dt;
    }
    switch (call->kind) {
        case COMM_ALL_REDUCE: {
            const void* sb = call->in_place ? MPI_IN_PLACE : call->send;
            mpiCheck(MPI_Iallreduce(sb, call->recv, cnt, mt, mop, mc, req));
            break;
        }
        case COMM_REDUCE_SCATTER: {
            // in place, MPI reads the whole input from the receive buffer and leaves the result at
            // its front: move it to this rank's block afterwards
            const void* sb = call->in_place ? MPI_IN_PLACE : call->send;
            void* rb = call->in_place ? (void*)call->send : call->recv;
            if ((size_t)N * call->n > (size_t)INT_MAX) comm_mpi_count((size_t)N * call->n, name);
            if (call->in_place && me != 0) {
                h->move_dst = call->recv;
                h->move_src = call->send;
                h->move_bytes = call->n * comm_dtype_size(call->dt);
            }
            mpiCheck(MPI_Ireduce_scatter_block(sb, rb, cnt, mt, mop, mc, req));
            break;
        }
        case COMM_ALL_GATHER: {
            const void* sb = call->in_place ? MPI_IN_PLACE : call->send;
            if ((size_t)N * call->n > (size_t)INT_MAX) comm_mpi_count((size_t)N * call->n, name);
            mpiCheck(MPI_Iallgather(sb, cnt, mt, call->recv, cnt, mt, mc, req));
            break;
        }
        case COMM_BROADCAST: mpiCheck(MPI_Ibcast(call->recv, cnt, mt, call->peer, mc, req)); break;
        case COMM_SEND: mpiCheck(MPI_Isend(call->send, cnt, mt, call->peer, 0, mc, req)); break;
        case COMM_RECV: mpiCheck(MPI_Irecv(call->recv, cnt, mt, call->peer, 0, mc, req)); break;
        case COMM_ALL_TO_ALL: {  // (16-bit blocks travel as MPI_UINT16_T: nothing is reduced)
            if ((size_t)N * call->n > (size_t)INT_MAX) comm_mpi_count((size_t)N * call->n, name);
            mpiCheck(MPI_Ialltoall(call->send, cnt, mt, call->recv, cnt, mt, mc, req));
            break;
        }
        default: fatal("comm: unknown collective %d", (int)call->kind);
    }
    if (!call->nonblocking) {
        WdWait w = p2p ? wd_p2p(c, name, call->g, &call->peer, 1, call->at)
                       : wd_collective(c, name, call->g, h->seq, call->at);
        MPI_Status st;
        wd_wait(c, 1, req, &st, &w);
        if (call->kind == COMM_RECV) {
            int got = 0;
            mpiCheck(MPI_Get_count(&st, mt, &got));
            if (got != cnt) {
                fatal("recv: expected %d elements from rank %d of the %s group, got %d", cnt, call->peer,
                      comm_group_name(call->g), got);
            }
        }
    }
    if (call->nonblocking) h->pending = 1;
    else comm_finish_host(h);
}
