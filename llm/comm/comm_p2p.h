// comm_p2p.h: point to point within a group (pipeline stages): a blocking send and receive, an
// exchange (sendrecv), and batches of sends and receives posted together (comm_p2p_batch), whose
// sends may start early (comm_p2p_post_send). Over the collectives' engine (llm/comm/comm_engine.h:
// comm_run, the ledger, the watchdog; NCCL's stream ordering from llm/comm/comm_engine_nccl.h through
// it); each call takes its caller's site as its last argument (CommSite, llm/comm/comm_types.h), which
// the caller leaves out.
#pragma once

#include "comm_engine.h"

// point to point; dst / src are ranks within the group. A matching recv must be posted by the peer
// (blocking sends of two ranks to each other can deadlock: use comm_sendrecv for exchanges).
template <typename T>
static void comm_send(Comm* c, CommGroup g, const T* buf, size_t n, int dst, cudaStream_t stream,
                      CommSite at = comm_here()) {
    comm_run(c, COMM_SEND, g, buf, NULL, n, comm_dtype_of(buf), COMM_SUM, dst, stream, 0, at);
}
template <typename T>
static void comm_recv(Comm* c, CommGroup g, T* buf, size_t n, int src, cudaStream_t stream,
                      CommSite at = comm_here()) {
    comm_run(c, COMM_RECV, g, NULL, buf, n, comm_dtype_of(buf), COMM_SUM, src, stream, 0, at);
}
// send n_send elements to dst and receive n_recv elements from src at once (no ordering deadlock);
// dst == src == own rank copies. Counted in the ledger as one send and one recv.
template <typename T>
static void comm_sendrecv(Comm* c, CommGroup g, const T* send, size_t n_send, int dst, T* recv, size_t n_recv,
                          int src, cudaStream_t stream, CommSite at = comm_here()) {
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
    int wi = wd_nccl_begin(c, "sendrecv", g, 0, at);
    ncclCheck(ncclGroupStart());  // (calls inside a group are deferred: ncclGroupEnd settles them)
    ncclCheck(ncclSend(send, n_send, nt, dst, c->nccl[g], c->stream));
    ncclCheck(ncclRecv(recv, n_recv, nt, src, c->nccl[g], c->stream));
    nccl_settle(c->nccl[g], ncclGroupEnd(), __FILE__, __LINE__);
    wd_nccl_end(c, wi);
    cudaCheck(cudaStreamWaitEvent(stream, c->done_events[comm_stream_end(c)], 0));
#elif COMM_MPI
    (void)stream;
    MPI_Datatype mt = comm_mpi_type(dt);
    MPI_Status st[2];
    MPI_Request req[2];
    int nr = comm_mpi_count(n_recv, "sendrecv");
    mpiCheck(MPI_Irecv(recv, nr, mt, src, 0, c->mpi[g], &req[0]));
    mpiCheck(MPI_Isend(send, comm_mpi_count(n_send, "sendrecv"), mt, dst, 0, c->mpi[g], &req[1]));
    int peers[2] = {src, dst};
    WdWait w = wd_p2p(c, "sendrecv", g, peers, 2, at);
    wd_wait(c, 2, req, st, &w);
    int got = 0;
    mpiCheck(MPI_Get_count(&st[0], mt, &got));
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
    if (peer < 0 || peer >= c->group_size[g] || peer == c->group_rank[g]) fatal("p2p_post_send: no rank %d to send to in the %s group", peer, comm_group_name(g));
    mpiCheck(MPI_Isend(buf, comm_mpi_count(n, "p2p_post_send"), comm_mpi_type(dt), peer, tag, c->mpi[g], &h.req));
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
static void comm_p2p_batch(Comm* c, CommGroup g, const CommP2P* ops, int n, CommDtype dt, cudaStream_t stream,
                           CommSite at = comm_here()) {
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
    int wi = wd_nccl_begin(c, "p2p_batch", g, 0, at);
    ncclCheck(ncclGroupStart());  // (calls inside a group are deferred: ncclGroupEnd settles them)
    for (int i = 0; i < n; i++) {
        if (ops[i].send) ncclCheck(ncclSend(ops[i].buf, ops[i].n, nt, ops[i].peer, c->nccl[g], c->stream));
        else ncclCheck(ncclRecv(ops[i].buf, ops[i].n, nt, ops[i].peer, c->nccl[g], c->stream));
    }
    nccl_settle(c->nccl[g], ncclGroupEnd(), __FILE__, __LINE__);
    wd_nccl_end(c, wi);
    cudaCheck(cudaStreamWaitEvent(stream, c->done_events[comm_stream_end(c)], 0));
#elif COMM_MPI
    (void)stream;
    MPI_Request* req = (MPI_Request*)mallocCheck((size_t)n * sizeof(MPI_Request));
    double t0 = wall_ms();
    for (int i = 0; i < n; i++) {
        int cnt = comm_mpi_count(ops[i].n, "p2p_batch");
        if (ops[i].send && ops[i].posted && ops[i].posted->pending) { req[i] = ops[i].posted->req; ops[i].posted->pending = 0; }
        else if (ops[i].send) mpiCheck(MPI_Isend(ops[i].buf, cnt, comm_mpi_type(dt), ops[i].peer, ops[i].tag, c->mpi[g], &req[i]));
        else mpiCheck(MPI_Irecv(ops[i].buf, cnt, comm_mpi_type(dt), ops[i].peer, ops[i].tag, c->mpi[g], &req[i]));
    }
    int* peers = (int*)mallocCheck((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) peers[i] = ops[i].peer;
    WdWait w = wd_p2p(c, "p2p_batch", g, peers, n, at);
    wd_wait(c, n, req, MPI_STATUSES_IGNORE, &w);
    c->blocking_ms[g] += wall_ms() - t0;
    free(peers);
    free(req);
#else
    (void)stream; (void)dt;
    fatal("p2p_batch: a group of %d ranks in a build without MPI", N);  // unreachable: peers were checked
#endif
}

// A non-blocking exchange within group g: n elements of send to rank dst, n elements from rank src into recv,
// started now and completed by comm_exchange_wait (the pair ring attention overlaps with its compute: the next
// K/V block travels while the current one is computed, llm/sharded/context_parallel.h). Over NCCL it runs on the
// communication stream after the work already on `stream`, and the wait makes `stream` wait for it; over MPI an
// Irecv and an Isend that the wait completes. Counted in the ledger as one send and one recv.
typedef struct {
    int pending;
    CommGroup g;
    int peers[2];  // dst, src
#if COMM_NCCL
    CommHandle h;  // the event recorded after the pair on the comm stream
#elif COMM_MPI
    MPI_Request req[2];
    int n;         // elements expected from src
    MPI_Datatype mt;
#endif
} CommExchange;

static CommExchange comm_exchange_start(Comm* c, CommGroup g, const void* send, void* recv, size_t n, int dst, int src,
                                        CommDtype dt, cudaStream_t stream, CommSite at = comm_here()) {
    CommExchange x;
    memset(&x, 0, sizeof(x));
    if ((int)g < 0 || (int)g >= COMM_NUM_GROUPS) fatal("exchange: invalid group %d", (int)g);
    const int N = c->group_size[g], me = c->group_rank[g];
    if (dst < 0 || dst >= N || src < 0 || src >= N || dst == me || src == me) {
        fatal("exchange: rank %d of the %s group of %d ranks cannot send to %d and receive from %d", me, comm_group_name(g), N, dst, src);
    }
    size_t esz = comm_dtype_size(dt);
    comm_check_buffer(send, n * esz, "send", "exchange");
    comm_check_buffer(recv, n * esz, "recv", "exchange");
    if (n > 0 && comm_ranges_overlap(send, n * esz, recv, n * esz)) fatal("exchange: the send and recv buffers overlap");
    ledger_add(c, COMM_SEND, g, (double)(n * esz), 0);
    ledger_add(c, COMM_RECV, g, (double)(n * esz), 0);
    x.g = g;
    x.peers[0] = dst;
    x.peers[1] = src;
    x.pending = 1;
#if COMM_NCCL
    ncclDataType_t nt = comm_nccl_type(dt);
    comm_stream_begin(c, stream);
    int wi = wd_nccl_begin(c, "exchange", g, 0, at);
    ncclCheck(ncclGroupStart());  // (calls inside a group are deferred: ncclGroupEnd settles them)
    ncclCheck(ncclSend(send, n, nt, dst, c->nccl[g], c->stream));
    ncclCheck(ncclRecv(recv, n, nt, src, c->nccl[g], c->stream));
    nccl_settle(c->nccl[g], ncclGroupEnd(), __FILE__, __LINE__);
    wd_nccl_end(c, wi);
    int slot = comm_stream_end(c);
    x.h.pending = 1;
    x.h.kind = COMM_SEND;
    x.h.group = g;
    x.h.at = at;
    x.h.event = c->done_events[slot];
    x.h.stream = stream;
    x.h.slot = slot;
    x.h.gen = c->done_gen[slot];
#elif COMM_MPI
    (void)stream; (void)at;
    x.mt = comm_mpi_type(dt);
    x.n = comm_mpi_count(n, "exchange");
    mpiCheck(MPI_Irecv(recv, x.n, x.mt, src, 0, c->mpi[g], &x.req[0]));
    mpiCheck(MPI_Isend(send, x.n, x.mt, dst, 0, c->mpi[g], &x.req[1]));
#else
    (void)stream; (void)at; (void)send; (void)recv;
    fatal("exchange: a group of %d ranks in a build without MPI", N);  // unreachable: peers were checked
#endif
    return x;
}

static void comm_exchange_wait(Comm* c, CommExchange* x, CommSite at = comm_here()) {
    if (!x->pending) return;
    x->pending = 0;
#if COMM_NCCL
    (void)at;
    comm_stream_wait_handle(c, &x->h);
#elif COMM_MPI
    double t0 = wall_ms();
    MPI_Status st[2];
    WdWait w = wd_p2p(c, "exchange", x->g, x->peers, 2, at);
    wd_wait(c, 2, x->req, st, &w);
    int got = 0;
    mpiCheck(MPI_Get_count(&st[0], x->mt, &got));
    if (got != x->n) fatal("exchange: expected %d elements from rank %d of the %s group, got %d", x->n, x->peers[1], comm_group_name(x->g), got);
    c->wait_ms += wall_ms() - t0;
#else
    (void)c; (void)at;
#endif
}
