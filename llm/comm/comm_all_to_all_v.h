// comm_all_to_all_v.h: the all-to-all of variable sizes that expert parallelism sends its tokens with
// (llm/sharded/expert_parallel.h): rank i sends send_count[j] elements, from send + send_off[j], to rank j of
// the group, and receives recv_count[i'] elements from each rank i' into recv + recv_off[i']. The counts
// must agree (what i sends to j is what j expects from i): the caller exchanges them first (a fixed-size
// all_to_all, llm/comm/comm.h). MPI_Alltoallv over MPI; over NCCL one group of a ncclSend and a ncclRecv
// per other rank (NCCL has no all-to-all), the own block copied on the comm stream: the loop the fixed-size
// all_to_all runs too (llm/comm/comm_engine_nccl.h's comm_nccl_all_to_all_v). Blocking (comm_all_to_all_v), or
// started (comm_all_to_all_v_start) and completed by comm_wait (llm/comm/comm.h), as the other collectives' _start
// forms: over NCCL enqueued on the comm stream after an event of the compute stream, its completion event in the
// handle, so the compute stream's later kernels run beside it until comm_wait orders them after it; over MPI an
// MPI_Ialltoallv whose count arrays the handle keeps until the request completes (Open MPI moves a request only
// inside MPI calls: the other MPI calls made meanwhile, and the wait). The send buffer must stay unchanged and the
// receive buffer unread until comm_wait. DualPipeV's overlapped pairs start expert parallelism's dispatches and
// combines this way (llm/sharded/expert_parallel.h).
//
// The ledger counts it as an all_to_all of the group (llm/comm/comm_ledger.h): the payload is the whole
// send buffer (sum of send_count), and the bytes sent are exactly those that leave the rank (all blocks but
// its own), not the ring model's (N-1)/N of the payload: with uneven routing they differ, and the ledger
// records what was sent. (Equal blocks give the ring model's figure.)
#pragma once

#include "comm_engine.h"

// the body of both forms: nonblocking 0 returns done (a handle with nothing pending), 1 a handle for comm_wait
template <typename T>
static CommHandle comm_all_to_all_v_run(Comm* c, CommGroup g, const T* send, const size_t* send_count, const size_t* send_off,
                                        T* recv, const size_t* recv_count, const size_t* recv_off, cudaStream_t stream,
                                        int nonblocking, CommSite at) {
    const char* name = "all_to_all";
    CommHandle h;
    memset(&h, 0, sizeof(h));
#if COMM_MPI && !COMM_NCCL
    h.req = MPI_REQUEST_NULL;
#endif
    if ((int)g < 0 || (int)g >= COMM_NUM_GROUPS) fatal("%s: invalid group %d", name, (int)g);
    const int N = c->group_size[g], me = c->group_rank[g];
    const CommDtype dt = comm_dtype_of(send);
    const size_t esz = comm_dtype_size(dt);
    size_t total_send = 0, away = 0;
    for (int j = 0; j < N; j++) {
        comm_check_buffer(send + send_off[j], send_count[j] * esz, "send", name);
        comm_check_buffer(recv + recv_off[j], recv_count[j] * esz, "recv", name);
        total_send += send_count[j];
        if (j != me) away += send_count[j];
    }
    if (send_count[me] != recv_count[me]) {
        fatal("%s: rank %d of the %s group sends %zu elements to itself but expects %zu", name, me, comm_group_name(g),
              send_count[me], recv_count[me]);
    }
    c->ledger.calls[COMM_ALL_TO_ALL][g] += 1;
    c->ledger.payload_bytes[COMM_ALL_TO_ALL][g] += (double)(total_send * esz);
    c->ledger.sent_bytes[COMM_ALL_TO_ALL][g] += (double)(away * esz);
    long long seq = ++c->wd.seq[g];
    h.kind = COMM_ALL_TO_ALL;
    h.group = g;
    h.seq = seq;
    h.at = at;
    double t0 = wall_ms();
    if (N == 1) {
        if (send_count[0] > 0) copy_device_to_device(recv + recv_off[0], send + send_off[0], send_count[0] * esz, stream);
        return h;
    }
#if COMM_NCCL
    comm_stream_begin(c, stream);
    int wi = wd_nccl_begin(c, name, g, seq, at);
    nccl_settle(c->nccl[g], comm_nccl_all_to_all_v(c, g, send, send_count, send_off, recv, recv_count, recv_off, 0, dt),
                __FILE__, __LINE__);  // (the calls inside its group are deferred: ncclGroupEnd settles them)
    wd_nccl_end(c, wi);
    int slot = comm_stream_end(c);
    if (nonblocking) {  // (as comm_run_nccl's non-blocking calls: comm_wait orders the compute stream after it)
        if (LLM_BUILD_EMU) c->wait_ms += wall_ms() - t0;  // emulated streams are synchronous: the host stalled here
        h.pending = 1;
        h.event = c->done_events[slot];
        h.stream = stream;
        h.slot = slot;
        h.gen = c->done_gen[slot];
        return h;
    }
    cudaCheck(cudaStreamWaitEvent(stream, c->done_events[slot], 0));
#elif COMM_MPI
    (void)stream;
    int* cnt = (int*)mallocCheck(4 * (size_t)N * sizeof(int));  // send counts, send displacements, recv ..., recv ...
    for (int j = 0; j < N; j++) {
        cnt[j] = comm_mpi_count(send_count[j], name);
        cnt[N + j] = comm_mpi_count(send_off[j], name);
        cnt[2 * N + j] = comm_mpi_count(recv_count[j], name);
        cnt[3 * N + j] = comm_mpi_count(recv_off[j], name);
    }
    MPI_Datatype mt = comm_mpi_type(dt);  // (16-bit values travel as MPI_UINT16_T: nothing is reduced)
    mpiCheck(MPI_Ialltoallv(send, cnt, cnt + N, mt, recv, cnt + 2 * N, cnt + 3 * N, mt, c->mpi[g], &h.req));
    h.counts = cnt;  // (MPI reads them until the request completes: comm_finish_host frees them)
    if (nonblocking) {
        h.pending = 1;
        return h;
    }
    WdWait w = wd_collective(c, name, g, seq, at);
    wd_wait(c, 1, &h.req, MPI_STATUSES_IGNORE, &w);
    comm_finish_host(&h);
#else
    (void)stream; (void)seq; (void)at; (void)nonblocking;
    fatal("%s: a group of %d ranks in a build without MPI", name, N);  // unreachable: every group has one rank
#endif
    c->blocking_ms[g] += wall_ms() - t0;
    return h;
}

template <typename T>
static void comm_all_to_all_v(Comm* c, CommGroup g, const T* send, const size_t* send_count, const size_t* send_off,
                              T* recv, const size_t* recv_count, const size_t* recv_off, cudaStream_t stream,
                              CommSite at = comm_here()) {
    comm_all_to_all_v_run(c, g, send, send_count, send_off, recv, recv_count, recv_off, stream, 0, at);
}

// started: the result is in recv after comm_wait (llm/comm/comm.h), which also frees what the handle holds
template <typename T>
static CommHandle comm_all_to_all_v_start(Comm* c, CommGroup g, const T* send, const size_t* send_count, const size_t* send_off,
                                          T* recv, const size_t* recv_count, const size_t* recv_off, cudaStream_t stream,
                                          CommSite at = comm_here()) {
    return comm_all_to_all_v_run(c, g, send, send_count, send_off, recv, recv_count, recv_off, stream, 1, at);
}
