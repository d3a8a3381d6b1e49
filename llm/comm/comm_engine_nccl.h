// comm_engine_nccl.h: the engine's NCCL transport (the CUDA build's, and the emulated build's against
// nccl_emu.h): comm_run_nccl runs a call of a group of more than one rank once llm/comm/comm_engine.h has
// checked it, counted it and numbered it. The call is enqueued on the communication stream after the
// compute stream's work (an event), inside the watchdog thread's begin and end (llm/comm/watchdog_nccl.h),
// and a completion event is recorded after it: a blocking call makes the compute stream wait for it, a
// non-blocking one leaves it in the handle for comm_wait, which times the wait with a second event.
// Also here, as the NCCL side of llm/comm/comm_p2p.h and llm/comm/comm.h use them: NCCL's element type,
// the stream ordering (comm_stream_begin, comm_stream_end, comm_stream_wait_handle, comm_read_wait) and
// the all_to_all NCCL does not have.
#pragma once

#include "../core/device.h"
#include "comm_types.h"
#if !COMM_NCCL
#error "llm/comm/comm_engine_nccl.h is the engine's NCCL transport: include it only in builds with NCCL (COMM_NCCL)"
#endif
#include "watchdog_nccl.h"

static inline ncclDataType_t comm_nccl_type(CommDtype dt) {
    return dt == COMM_BF16 ? ncclBfloat16 : (dt == COMM_FP16 ? ncclFloat16 : ncclFloat32);
}
// the comm stream waits for everything already enqueued on the compute stream
static inline void comm_stream_begin(Comm* c, cudaStream_t compute) {
    cudaCheck(cudaEventRecord(c->begin_event, compute));
    cudaCheck(cudaStreamWaitEvent(c->stream, c->begin_event, 0));
}
// all_to_all over NCCL, which has no such call: one group of sends and receives (none waits for another),
// on the comm stream after comm_stream_begin. Block j of send (send_count[j] elements at send_off[j]) goes
// to rank j of group g, block i of recv (recv_count[i] at recv_off[i]) comes from rank i; NULL counts and
// offsets: equal blocks of n elements, block j at j n (the fixed-size all_to_all is the variable one with
// equal blocks). The rank's own block is copied on the comm stream too, so that the completion event the
// compute stream waits for (comm_stream_end) covers it like the blocks received; empty blocks are not
// sent. Returns ncclGroupEnd's result for nccl_settle; the calls inside the group only queue (checked at
// once). (llm/comm/comm_all_to_all_v.h's variable sizes and comm_run_nccl's all_to_all both run it.)
static ncclResult_t comm_nccl_all_to_all_v(Comm* c, CommGroup g, const void* send, const size_t* send_count,
                                           const size_t* send_off, void* recv, const size_t* recv_count,
                                           const size_t* recv_off, size_t n, CommDtype dt) {
    const int N = c->group_size[g], me = c->group_rank[g];
    const size_t esz = comm_dtype_size(dt);
    const char* s = (const char*)send;
    char* r = (char*)recv;
    ncclDataType_t nt = comm_nccl_type(dt);
    auto count = [&](const size_t* cnt, int j) { return cnt != NULL ? cnt[j] : n; };               // block j's elements
    auto at = [&](const size_t* off, int j) { return (off != NULL ? off[j] : (size_t)j * n) * esz; };  // its byte offset
    if (count(send_count, me) > 0) copy_device_to_device(r + at(recv_off, me), s + at(send_off, me), count(send_count, me) * esz, c->stream);
    ncclCheck(ncclGroupStart());
    for (int k = 1; k < N; k++) {  // to the k-th next rank, from the k-th previous: each pair meets once
        int to = (me + k) % N, from = (me + N - k) % N;
        if (count(send_count, to) > 0) ncclCheck(ncclSend(s + at(send_off, to), count(send_count, to), nt, to, c->nccl[g], c->stream));
        if (count(recv_count, from) > 0) ncclCheck(ncclRecv(r + at(recv_off, from), count(recv_count, from), nt, from, c->nccl[g], c->stream));
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

// the call over NCCL; h: its handle, numbered by the engine (h->seq), made pending when non-blocking
static void comm_run_nccl(Comm* c, const CommCall* call, CommHandle* h) {
    const char* name = comm_kind_name(call->kind);
    ncclComm_t nc = c->nccl[call->g];
    ncclDataType_t nt = comm_nccl_type(call->dt);
    ncclRedOp_t nop = call->op == COMM_AVG ? ncclAvg : (call->op == COMM_MAX ? ncclMax : ncclSum);
    comm_stream_begin(c, call->stream);
    double t0 = wall_ms();
    int wi = wd_nccl_begin(c, name, call->g, h->seq, call->at);
    ncclResult_t r = ncclSuccess;
    switch (call->kind) {
        case COMM_ALL_REDUCE: r = ncclAllReduce(call->send, call->recv, call->n, nt, nop, nc, c->stream); break;
        case COMM_REDUCE_SCATTER: r = ncclReduceScatter(call->send, call->recv, call->n, nt, nop, nc, c->stream); break;
        case COMM_ALL_GATHER: r = ncclAllGather(call->send, call->recv, call->n, nt, nc, c->stream); break;
        case COMM_BROADCAST: r = ncclBroadcast(call->recv, call->recv, call->n, nt, call->peer, nc, c->stream); break;
        case COMM_SEND: r = ncclSend(call->send, call->n, nt, call->peer, nc, c->stream); break;
        case COMM_RECV: r = ncclRecv(call->recv, call->n, nt, call->peer, nc, c->stream); break;
        case COMM_ALL_TO_ALL: r = comm_nccl_all_to_all_v(c, call->g, call->send, NULL, NULL, call->recv, NULL, NULL, call->n, call->dt); break;
        default: fatal("comm: unknown collective %d", (int)call->kind);
    }
    nccl_settle(nc, r, __FILE__, __LINE__);
    wd_nccl_end(c, wi);
    // emulated streams are synchronous: the collective ran inside the call, the host stalled there
    if (LLM_BUILD_EMU && call->nonblocking) c->wait_ms += wall_ms() - t0;
    int slot = comm_stream_end(c);
    if (call->nonblocking) {
        h->pending = 1;
        h->event = c->done_events[slot];
        h->stream = call->stream;
        h->slot = slot;
        h->gen = c->done_gen[slot];
    } else {
        cudaCheck(cudaStreamWaitEvent(call->stream, c->done_events[slot], 0));
    }
}
