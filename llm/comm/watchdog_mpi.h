// watchdog_mpi.h: the communication watchdog over MPI (llm/comm/watchdog.h says what it does): the
// CPU build's transport, and the side channel of the NCCL builds (their NCCL runs over MPI).
//
//   1. every blocking MPI call of llm/comm/ is its non-blocking form, waited by wd_wait: MPI_Testall
//      in a poll loop with a deadline of timeout_s seconds;
//   2. the side channel (a duplicate of MPI_COMM_WORLD) on which a rank that has waited longer than
//      report_s tells every other rank where it waits (wd_tell), and "done" when that wait ends;
//   3. at the deadline the rank reads the reports (wd_drain), names the missing ranks
//      (wd_cat_missing), prints the line, tells the others that it expired (they print their own
//      line at once), and ends the whole job with MPI_Abort, so that mpirun exits non-zero.
// The side channel also carries the error lines every rank sees alike (printed once per job).
#pragma once

#include "watchdog.h"
#include <pthread.h>
#include <unistd.h>
#if !COMM_MPI
#error "llm/comm/watchdog_mpi.h is the MPI transport's watchdog: include it only in builds with MPI (COMM_MPI)"
#endif

#define WD_WAITING 1  // message types on the side channel
#define WD_DONE 2
#define WD_EXPIRED 3
#define WD_TAG 7

// the side channel: collective over the world, in comm_init
static void wd_init(Comm* c) {
    mpiCheck(MPI_Comm_dup(MPI_COMM_WORLD, &c->wd.side));
    mpiCheck(MPI_Comm_set_errhandler(c->wd.side, MPI_ERRORS_RETURN));
    c->wd.where = (int*)mallocCheck((size_t)c->world_size * WD_MSG * sizeof(int));
    memset(c->wd.where, 0, (size_t)c->world_size * WD_MSG * sizeof(int));
    for (int i = 0; i < WD_POOL; i++) c->wd.pool_req[i] = MPI_REQUEST_NULL;
    c->wd.expired_by = -1;
    int level = 0;
    mpiCheck(MPI_Query_thread(&level));
    c->wd.thread_multiple = level >= MPI_THREAD_MULTIPLE;
    int rc = pthread_mutex_init(&c->wd.side_mu, NULL);
    if (rc != 0) fatal("pthread_mutex_init: %s", strerror(rc));
}

// receives every report that has arrived: where[src] is the last one of rank src
static void wd_drain(Comm* c) {
    pthread_mutex_lock(&c->wd.side_mu);
    for (;;) {
        int flag = 0;
        MPI_Status st;
        mpiCheck(MPI_Iprobe(MPI_ANY_SOURCE, WD_TAG, c->wd.side, &flag, &st));
        if (!flag) break;
        int msg[WD_MSG];
        mpiCheck(MPI_Recv(msg, WD_MSG, MPI_INT, st.MPI_SOURCE, WD_TAG, c->wd.side, MPI_STATUS_IGNORE));
        if (msg[0] == WD_EXPIRED) {  // it expired waiting there: still a report of where it waits
            if (c->wd.expired_by < 0) c->wd.expired_by = st.MPI_SOURCE;
            msg[0] = WD_WAITING;
        }
        memcpy(c->wd.where + (size_t)st.MPI_SOURCE * WD_MSG, msg, sizeof(msg));
    }
    pthread_mutex_unlock(&c->wd.side_mu);
}

// tells every other rank (type, step, group, seq, collective); never blocks: a report that finds no
// free send slot is dropped (the slots are freed as the small eager sends complete)
static void wd_tell(Comm* c, int type, const WdWait* w) {
    int msg[WD_MSG] = {type, w->step, (int)w->g, (int)w->seq, w->collective, 0};
    pthread_mutex_lock(&c->wd.side_mu);
    for (int r = 0; r < c->world_size; r++) {
        if (r == c->world_rank) continue;
        int slot = -1;
        for (int i = 0; i < WD_POOL && slot < 0; i++) {
            int done = 1;
            if (c->wd.pool_req[i] != MPI_REQUEST_NULL) mpiCheck(MPI_Test(&c->wd.pool_req[i], &done, MPI_STATUS_IGNORE));
            if (done) slot = i;
        }
        if (slot < 0) break;
        memcpy(c->wd.pool_msg[slot], msg, sizeof(msg));
        mpiCheck(MPI_Isend(c->wd.pool_msg[slot], WD_MSG, MPI_INT, r, WD_TAG, c->wd.side, &c->wd.pool_req[slot]));
    }
    pthread_mutex_unlock(&c->wd.side_mu);
}

// rank m reported waiting at the same point as w (same collective of the same group, or a P2P of the
// same group at the same step)
static int wd_at_same_point(const Comm* c, int m, const WdWait* w) {
    const int* rep = c->wd.where + (size_t)m * WD_MSG;
    if (rep[0] != WD_WAITING || rep[2] != (int)w->g || rep[4] != w->collective) return 0;
    return w->collective ? rep[3] == (int)w->seq : rep[1] == w->step;
}

// appends to line: the missing ranks of w (members of a collective, peers of a P2P, not reported
// waiting at the same point), each with where it waits if it said so, then every rank with no report
// at all (where a chain of waits ends)
static void wd_cat_missing(Comm* c, const WdWait* w, char* line, size_t cap) {
    int* m = (int*)mallocCheck((size_t)c->world_size * sizeof(int));
    int n = wd_members(c, w->g, m);
    pthread_mutex_lock(&c->wd.side_mu);  // (where[]: the other thread may be draining)
    const int* who = w->collective ? m : w->peers;
    int nwho = w->collective ? n : w->npeers, missing = 0;
    for (int i = 0; i < nwho; i++) {
        int r = who[i];
        if (r == c->world_rank || wd_at_same_point(c, r, w)) continue;
        const int* rep = c->wd.where + (size_t)r * WD_MSG;
        wd_cat(line, cap, "%s%d", missing ? ", rank " : ": missing rank ", r);
        if (rep[0] == WD_WAITING) {
            if (rep[4]) wd_cat(line, cap, " (waiting in collective #%d of the %s group at step %d)", rep[3], comm_group_name(rep[2]), rep[1]);
            else wd_cat(line, cap, " (waiting in a P2P of the %s group at step %d)", comm_group_name(rep[2]), rep[1]);
        } else {
            wd_cat(line, cap, " (no report: dead or hung)");
        }
        missing++;
    }
    if (!missing && nwho > 0) wd_cat(line, cap, ": every rank of it reported waiting here");
    int silent = 0;
    for (int r = 0; r < c->world_size; r++) {
        if (r == c->world_rank || c->wd.where[(size_t)r * WD_MSG] == WD_WAITING) continue;
        wd_cat(line, cap, "%s%d", silent ? "," : "; no report from rank ", r);
        silent++;
    }
    pthread_mutex_unlock(&c->wd.side_mu);
    free(m);
}

// before the line: the reports of ranks that began to wait just before, a short grace to read them
// (unless another rank's watchdog expired first: then at once). Returns 1 when one did.
static int wd_grace(Comm* c) {
    double t0 = wall_ms();
    while (wall_ms() - t0 < (c->wd.report_s + 0.2) * 1e3 && c->wd.expired_by < 0) { wd_drain(c); usleep(10000); }
    wd_drain(c);
    return c->wd.expired_by >= 0;
}

// the one line, then the end of the whole job. by_peer: another rank's watchdog expired first.
[[noreturn]] static void wd_expire(Comm* c, const WdWait* w, double waited_s) {
    int by_peer = wd_grace(c);
    char line[2048] = "";
    wd_cat_call(c, w, by_peer ? c->wd.expired_by : -1, waited_s, NULL, line, sizeof(line));
    wd_cat_missing(c, w, line, sizeof(line));
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
    if (!by_peer) {
        WdWait e = *w;
        wd_tell(c, WD_EXPIRED, &e);
    }
    usleep(1000000);  // the others print their line, then the first MPI_Abort ends every process
    comm_abort_all(EXIT_FAILURE);
}

// waits for n requests (statuses into st, or MPI_STATUSES_IGNORE), bounded by the timeout
static void wd_wait(Comm* c, int n, MPI_Request* req, MPI_Status* st, const WdWait* w) {
    if (c->wd.timeout_s <= 0.0) {
        mpiCheck(MPI_Waitall(n, req, st));
        return;
    }
    double t0 = wall_ms();
    int reported = 0;
    for (long spins = 0;; spins++) {
        int done = 0;
        mpiCheck(MPI_Testall(n, req, &done, st));
        if (done) break;
        if ((spins & 63) == 0) wd_drain(c);
        double waited = (wall_ms() - t0) / 1e3;
        if (!reported && waited > c->wd.report_s) {
            wd_tell(c, WD_WAITING, w);
            reported = 1;
        }
        if (waited > c->wd.timeout_s || c->wd.expired_by >= 0) wd_expire(c, w, waited);
        if (spins > 1000) usleep(waited > 0.1 ? 1000 : 50);  // long waits: poll, do not spin
    }
    if (reported) wd_tell(c, WD_DONE, w);
}

// Error lines (llm/core/common.h's llm_job), over the side channel: a rank with an error line tells every other
// rank its hash (WD_LINE_TAG) and listens for the lower ranks' until each of them told its own, or a
// second passed: a lower rank with the same line prints it, this one stays quiet. Once it printed (or
// not) it tells every rank it is done (WD_DONE_TAG) and waits, before it exits (which may end the job),
// until every rank it heard of with an error line said done too, or 1.5 s: their own lines get out.
// Raw MPI calls: an error here (MPI itself may be what failed) means "print", and no wait.
#define WD_LINE_TAG 8
#define WD_DONE_TAG 9

static void wd_error_send(Comm* c, int tag, const int* msg) {  // to every other rank; their completion waited (bounded)
    MPI_Request* req = (MPI_Request*)malloc((size_t)c->world_size * sizeof(MPI_Request));
    if (req == NULL) return;
    int k = 0;
    for (int r = 0; r < c->world_size; r++) {
        if (r != c->world_rank && MPI_Isend(msg, 2, MPI_INT, r, tag, c->wd.side, &req[k]) == MPI_SUCCESS) k++;
    }
    for (double t0 = wall_ms(); k > 0 && wall_ms() - t0 < 200.0; usleep(1000)) {
        int done = 0;
        if (MPI_Testall(k, req, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS || done) break;
    }
    free(req);
}

// one message of tag from anyone, if there is one: its source, msg filled; -1 when none (or an error)
static int wd_error_take(Comm* c, int tag, int* msg) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, tag, c->wd.side, &flag, &st) != MPI_SUCCESS || !flag) return -1;
    if (MPI_Recv(msg, 2, MPI_INT, st.MPI_SOURCE, tag, c->wd.side, MPI_STATUS_IGNORE) != MPI_SUCCESS) return -1;
    return st.MPI_SOURCE;
}

static int wd_error_begin(void* ctx, const char* line) {
    Comm* c = (Comm*)ctx;
    if (c->wd.err_state != NULL) return 1;  // (an error while handling one: print it)
    c->wd.err_state = (int*)calloc((size_t)c->world_size, sizeof(int));  // (per rank: 1 failing, 2 done)
    if (c->wd.err_state == NULL) return 1;
    uint64_t h = fnv1a(FNV_START, line, strlen(line));
    int mine[2] = {(int)(uint32_t)h, (int)(uint32_t)(h >> 32)}, msg[2];
    wd_error_send(c, WD_LINE_TAG, mine);
    int lower = 0, said = 0;
    for (double t0 = wall_ms(); !said && lower < c->world_rank && wall_ms() - t0 < 1000.0;) {
        int src = wd_error_take(c, WD_LINE_TAG, msg);
        if (src < 0) { usleep(1000); continue; }
        if (c->wd.err_state[src] == 0 && src < c->world_rank) lower++;
        c->wd.err_state[src] = 1;
        said = src < c->world_rank && msg[0] == mine[0] && msg[1] == mine[1];
    }
    return !said;
}

static void wd_error_end(void* ctx) {
    Comm* c = (Comm*)ctx;
    int* st = c->wd.err_state;
    if (st == NULL) return;
    int done[2] = {0, 0}, msg[2];
    wd_error_send(c, WD_DONE_TAG, done);
    for (double t0 = wall_ms(); wall_ms() - t0 < 1500.0;) {
        int src, got = 0;
        while ((src = wd_error_take(c, WD_LINE_TAG, msg)) >= 0) { if (st[src] == 0) st[src] = 1; got = 1; }
        while ((src = wd_error_take(c, WD_DONE_TAG, msg)) >= 0) { st[src] = 2; got = 1; }
        int waiting = 0;
        for (int r = 0; r < c->world_size; r++) waiting |= st[r] == 1;
        if (!waiting && wall_ms() - t0 > 200.0) break;  // (200 ms for the lines of ranks that failed just after)
        if (!got) usleep(1000);
    }
}

// completes this rank's reports in flight and takes the ones sent to it (comm_free: every rank)
static void wd_free(Comm* c) {
    mpiCheck(MPI_Waitall(WD_POOL, c->wd.pool_req, MPI_STATUSES_IGNORE));
    WdWait w = wd_collective(c, "barrier (end of the run)", GROUP_WORLD, 0, comm_here());
    MPI_Request req;
    mpiCheck(MPI_Ibarrier(c->wd.side, &req));
    wd_wait(c, 1, &req, MPI_STATUSES_IGNORE, &w);
    mpiCheck(MPI_Waitall(WD_POOL, c->wd.pool_req, MPI_STATUSES_IGNORE));  // a report sent while waiting there
    wd_drain(c);
    llm_job.error_begin = NULL;  // (error lines from now on: this rank's alone)
    llm_job.error_end = NULL;
    llm_job.ctx = NULL;
    mpiCheck(MPI_Comm_free(&c->wd.side));
    free(c->wd.where);
    c->wd.where = NULL;
}
