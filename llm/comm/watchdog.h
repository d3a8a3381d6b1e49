// watchdog.h: the communication watchdog (--comm-timeout SECONDS): no collective or P2P waits
// forever. A rank that dies or hangs leaves its peers blocked inside a collective; at thousands of
// GPUs that happens every few hours (Llama 3 report, sec. 3.3.4: NCCLX's watchdog aborts the
// collectives of a stuck job and names the rank that stopped, so the job restarts in minutes
// instead of hanging). Here, in the MPI path (CPU build; the emulated build's NCCL runs on it too):
//
//   1. every blocking MPI call of llm/comm/comm.h and llm/comm/comm_p2p.h is its non-blocking form, waited by
//      wd_wait: MPI_Testall in a poll loop with a deadline of timeout_s seconds;
//   2. a side channel (a duplicate of MPI_COMM_WORLD) on which a rank that has waited longer than
//      report_s tells every other rank where it waits: (step, group, sequence number of the
//      collective in that group, kind), and "done" when that wait ends. Every collective of a group
//      is called by all of its ranks in the same order, so the same collective has the same
//      sequence number on each of them;
//   3. at the deadline the rank reads the reports, names the missing ranks (those of its group, or
//      its P2P peers, that did not report waiting at the same point; a dead or hung rank never
//      reports; a rank waiting elsewhere is named with where), prints ONE line with the step, the
//      collective or P2P (its name, the file:line of the call), its group and the missing ranks,
//      tells the others that it expired (they print their own line at once), and ends the whole
//      job with MPI_Abort, so that mpirun exits non-zero.
//
// Over real NCCL (the CUDA build) the host does not block in a collective but later, in a stream or
// event synchronize; there comm.h creates non-blocking communicators (ncclConfig_t.blocking = 0),
// settles each call's ncclInProgress by polling ncclCommGetAsyncError with the same deadline, and a
// watchdog thread (wd_nccl_*) watches the oldest collective still in flight: past report_s it reports
// it on the side channel as wd_wait does (NCCL builds ask MPI for MPI_THREAD_MULTIPLE, so that this
// thread may call MPI beside the main thread; the side channel's state is under a mutex); past the
// deadline, or on an asynchronous NCCL error, it prints the line (step, collective, group, call site,
// and the missing ranks from the reports), tells the others, ncclCommAbort's every communicator and
// exits non-zero (mpirun ends the job). Without MPI_THREAD_MULTIPLE the line says it cannot name them.
//
// Part of llm/comm/comm.h, which includes it after the types (Comm, Watchdog: llm/comm/comm_types.h), before the
// mesh.
#pragma once
#include <stdarg.h>

#define WD_WAITING 1  // message types on the side channel
#define WD_DONE 2
#define WD_EXPIRED 3
#define WD_TAG 7

// what a rank waits in: the line and the reports are made of it
typedef struct {
    const char* name;  // "all_reduce", "recv", "p2p_batch", ...
    CommGroup g;
    int collective;    // 1: every rank of g takes part (matched by seq); 0: P2P with peers[] only
    long long seq;     // the collective's number in its group (c->wd.seq[g] when it was called)
    const char* file;  // the call site (llm/comm/comm_sites.h's macros record it)
    int line;
    int npeers;        // P2P: the world ranks it waits on
    int peers[8];
    int step;          // the training step it was called in
} WdWait;

// the world rank of (dp_rank, pp_rank, tp_rank): llm/comm/comm_mesh.h's order, tp innermost
static inline int wd_rank_of(const Comm* c, int d, int p, int t) { return (d * c->pp + p) * c->tp + t; }

// the world ranks of my group g, in group order; returns how many
static int wd_members(const Comm* c, CommGroup g, int* out) {
    int n = 0;
    if (g == GROUP_WORLD) {
        for (int r = 0; r < c->world_size; r++) out[n++] = r;
    } else if (g == GROUP_DP) {
        for (int d = 0; d < c->dp; d++) out[n++] = wd_rank_of(c, d, c->pp_rank, c->tp_rank);
    } else if (g == GROUP_TP) {
        for (int t = 0; t < c->tp; t++) out[n++] = wd_rank_of(c, c->dp_rank, c->pp_rank, t);
    } else if (g == GROUP_PP) {
        for (int p = 0; p < c->pp; p++) out[n++] = wd_rank_of(c, c->dp_rank, p, c->tp_rank);
    } else if (g == GROUP_EMBED && c->pp > 1 && (c->pp_rank == 0 || c->pp_rank == c->pp - 1)) {
        out[n++] = wd_rank_of(c, c->dp_rank, 0, c->tp_rank);
        out[n++] = wd_rank_of(c, c->dp_rank, c->pp - 1, c->tp_rank);
    } else {
        out[n++] = c->world_rank;
    }
    return n;
}

// the world rank of rank r of my group g
static int wd_world_of(const Comm* c, CommGroup g, int r) {
    int* m = (int*)mallocCheck((size_t)c->world_size * sizeof(int));
    int n = wd_members(c, g, m), w = (r >= 0 && r < n) ? m[r] : -1;
    free(m);
    return w;
}

// a description of a wait of group g at this rank: the first wait fields (site, seq) filled from c
static WdWait wd_collective(Comm* c, const char* name, CommGroup g, long long seq) {
    WdWait w;
    memset(&w, 0, sizeof(w));
    w.name = name;
    w.g = g;
    w.collective = 1;
    w.seq = seq;
    w.file = c->wd.site_file ? c->wd.site_file : "?";
    w.line = c->wd.site_line;
    w.step = c->wd.step;
    return w;
}
static WdWait wd_p2p(Comm* c, const char* name, CommGroup g, const int* group_peers, int n) {
    WdWait w = wd_collective(c, name, g, 0);
    w.collective = 0;
    for (int i = 0; i < n && w.npeers < 8; i++) {
        int p = wd_world_of(c, g, group_peers[i]);
        int seen = 0;
        for (int k = 0; k < w.npeers; k++) seen |= w.peers[k] == p;
        if (!seen) w.peers[w.npeers++] = p;
    }
    return w;
}

#if COMM_MPI
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

// appends to buf (of cap) with printf's format
static void wd_cat(char* buf, size_t cap, const char* fmt, ...) {
    size_t used = strlen(buf);
    if (used + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, cap - used, fmt, ap);
    va_end(ap);
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

// the line's beginning, the same in both paths: the rank, the step, why (error: an NCCL error; by_peer:
// another rank's watchdog expired first; else the timeout), the call it waits in, its group's world
// ranks and its call site
static void wd_cat_call(Comm* c, const WdWait* w, int by_peer, double waited_s, const char* error, char* line, size_t cap) {
    wd_cat(line, cap, "watchdog: rank %d: step %d: ", c->world_rank, w->step);
    if (error) wd_cat(line, cap, "NCCL error '%s' ", error);
    else if (by_peer) wd_cat(line, cap, "rank %d's watchdog expired after %.1f s of waiting here ", c->wd.expired_by, waited_s);
    else wd_cat(line, cap, "no progress for %.1f s (--comm-timeout %g) ", waited_s, c->wd.timeout_s);
    if (w->collective) wd_cat(line, cap, "in %s #%lld of the %s group", w->name, w->seq, comm_group_name(w->g));
    else wd_cat(line, cap, "in %s of the %s group", w->name, comm_group_name(w->g));
    int* m = (int*)mallocCheck((size_t)c->world_size * sizeof(int));
    int n = wd_members(c, w->g, m);
    wd_cat(line, cap, " (world ranks");
    for (int i = 0; i < n; i++) wd_cat(line, cap, "%s%d", i ? "," : " ", m[i]);
    if (w->line > 0) wd_cat(line, cap, ") called at %s:%d", w->file, w->line);
    else wd_cat(line, cap, ") waited at %s", w->file);
    free(m);
}

// the one line, then the end of the whole job. by_peer: another rank's watchdog expired first.
[[noreturn]] static void wd_expire(Comm* c, const WdWait* w, double waited_s) {
    int by_peer = wd_grace(c);
    char line[2048] = "";
    wd_cat_call(c, w, by_peer, waited_s, NULL, line, sizeof(line));
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
    WdWait w = wd_collective(c, "barrier (end of the run)", GROUP_WORLD, 0);
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
#endif

#if COMM_NCCL  // (NCCL runs over MPI: COMM_NCCL implies COMM_MPI, the side channel is there)
// ----------------------------------------------------------------------------
// NCCL: non-blocking communicators and the watchdog thread

// A call on a non-blocking communicator returns ncclInProgress while NCCL still works on it in the
// background; the communicator may be used again once ncclCommGetAsyncError no longer reports
// ncclInProgress. r: what the call returned. An error ends the job with the call's file:line.
// (A collective that never completes on the GPU is the watchdog thread's to see, not this loop's.)
static void nccl_settle(Comm* c, ncclComm_t comm, ncclResult_t r, const char* file, int line) {
    (void)c;
    if (r != ncclInProgress) nccl_check(r, file, line);
    ncclResult_t state = r;
    for (long spins = 0; state == ncclInProgress; spins++) {
        nccl_check(ncclCommGetAsyncError(comm, &state), file, line);
        if (state == ncclInProgress && spins > 100) usleep(20);
    }
    nccl_check(state, file, line);
}

#include <thread>
#include <mutex>
#include <atomic>

#define WD_RING 256  // collectives in flight that the thread watches (more: the oldest are dropped)
typedef struct {
    double t_ms;       // when it was issued
    const char* name;
    int g, step, line;
    long long seq;
    const char* file;
    int state;         // 0 done, 1 inside the NCCL call, 2 enqueued on the GPU (ev recorded after it)
} WdEntry;

struct WdNccl {
    std::thread thread;
    std::mutex mu;
    std::atomic<int> stop;
    Comm* c;
    WdEntry e[WD_RING];
#if LLM_BUILD_CUDA
    cudaEvent_t ev[WD_RING];
#endif
    long long head, tail;  // entries [tail, head) are in flight, in issue order (one comm stream)
};

// what the reports and the line say of an entry (a P2P has no sequence number, and no peers here)
static WdWait wd_entry_wait(const WdEntry* e) {
    WdWait w;
    memset(&w, 0, sizeof(w));
    w.name = e->name; w.g = (CommGroup)e->g; w.collective = e->seq > 0; w.seq = e->seq;
    w.file = e->file; w.line = e->line; w.step = e->step;
    return w;
}

// the line, then the communicators aborted (real NCCL: their kernels return) and the process ends;
// mpirun then ends the job. When MPI lets this thread call it (MPI_THREAD_MULTIPLE), the missing ranks
// are named from the side channel's reports as in the MPI path, and the others are told.
[[noreturn]] static void wd_nccl_expire(WdNccl* w, const WdEntry* e, double waited_s, const char* nccl_error) {
    Comm* c = w->c;
    WdWait ww = wd_entry_wait(e);
    int side = c->wd.thread_multiple, by_peer = side ? wd_grace(c) : 0;
    char line[2048] = "";
    wd_cat_call(c, &ww, by_peer, waited_s, nccl_error, line, sizeof(line));
    wd_cat(line, sizeof(line), ", %s", e->state == 1 ? "inside the NCCL call" : "not completed on the GPU");
    if (side) wd_cat_missing(c, &ww, line, sizeof(line));
    else wd_cat(line, sizeof(line), ": the missing rank is not named (MPI gave this thread no MPI_THREAD_MULTIPLE for the side channel)");
    wd_cat(line, sizeof(line), "; %s", LLM_BUILD_CUDA ? "NCCL communicators aborted (ncclCommAbort), the process exits"
                                                      : "the process exits (the emulated NCCL cannot abort a call in progress)");
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
    if (side && !by_peer) {
        wd_tell(c, WD_EXPIRED, &ww);
        usleep(1000000);  // the others print their line
    }
#if LLM_BUILD_CUDA  // (the emulated NCCL's abort is not safe beside a call in progress: just exit)
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        if (c->nccl_owned[g] && c->nccl[g] != NULL) ncclCommAbort(c->nccl[g]);
    }
#endif
    _exit(EXIT_FAILURE);
}

// the thread: every 20 ms, retire the completed entries and check the oldest one in flight; past
// report_s it tells the other ranks where it waits (and "done" once it no longer does), as wd_wait does
static void wd_nccl_loop(WdNccl* w) {
    Comm* c = w->c;
#if LLM_BUILD_CUDA
    cudaSetDevice(c->device);
#endif
    long long reported = -1;  // the entry (its number) this rank reported waiting in
    WdWait rep_w;
    memset(&rep_w, 0, sizeof(rep_w));
    while (!w->stop.load()) {
        usleep(20000);
        WdEntry e;
        memset(&e, 0, sizeof(e));
        long long oldest = -1;
        {
            std::lock_guard<std::mutex> lock(w->mu);
            while (w->tail < w->head) {
                WdEntry* t = &w->e[w->tail % WD_RING];
#if LLM_BUILD_CUDA
                if (t->state == 2 && cudaEventQuery(w->ev[w->tail % WD_RING]) == cudaSuccess) t->state = 0;
#endif
                if (t->state != 0) break;
                w->tail++;
            }
            if (w->tail < w->head) { e = w->e[w->tail % WD_RING]; oldest = w->tail; }
        }
        double waited = oldest >= 0 ? (wall_ms() - e.t_ms) / 1e3 : 0.0;
        if (c->wd.thread_multiple) {  // the side channel
            if (reported >= 0 && reported != oldest) { wd_tell(c, WD_DONE, &rep_w); reported = -1; }
            if (oldest >= 0 && reported < 0 && waited > c->wd.report_s) {
                rep_w = wd_entry_wait(&e);
                wd_tell(c, WD_WAITING, &rep_w);
                reported = oldest;
            }
            wd_drain(c);
            if (oldest >= 0 && c->wd.expired_by >= 0) wd_nccl_expire(w, &e, waited, NULL);
        }
        if (oldest >= 0 && waited > c->wd.timeout_s) wd_nccl_expire(w, &e, waited, NULL);
#if LLM_BUILD_CUDA  // an asynchronous error of a communicator (a peer lost, a network error)
        for (int g = 0; g < COMM_NUM_GROUPS; g++) {
            ncclResult_t state = ncclSuccess;
            if (!c->nccl_owned[g] || ncclCommGetAsyncError(c->nccl[g], &state) != ncclSuccess) continue;
            if (state != ncclSuccess && state != ncclInProgress) {
                WdEntry x = oldest >= 0 ? e : WdEntry{wall_ms(), "(no collective)", g, c->wd.step, 0, 0, "?", 0};
                wd_nccl_expire(w, &x, 0.0, ncclGetErrorString(state));
            }
        }
#endif
    }
}

// before an NCCL call: an entry in flight; returns its index (or -1 when the watchdog is off)
static int wd_nccl_begin(Comm* c, const char* name, CommGroup g, long long seq) {
    WdNccl* w = c->wd.nccl;
    if (w == NULL) return -1;
    std::lock_guard<std::mutex> lock(w->mu);
    if (w->head - w->tail == WD_RING) w->tail++;  // full: the oldest is dropped (later ones cover it)
    int i = (int)(w->head % WD_RING);
    w->e[i] = WdEntry{wall_ms(), name, (int)g, c->wd.step, c->wd.site_line, seq, c->wd.site_file ? c->wd.site_file : "?", 1};
    w->head++;
    return i;
}
// after it: enqueued on the comm stream (emulated: already done, the call ran it)
static void wd_nccl_end(Comm* c, int i) {
    WdNccl* w = c->wd.nccl;
    if (w == NULL || i < 0) return;
#if LLM_BUILD_CUDA
    cudaCheck(cudaEventRecord(w->ev[i], c->stream));
#endif
    std::lock_guard<std::mutex> lock(w->mu);
    w->e[i].state = LLM_BUILD_CUDA ? 2 : 0;
}

static void wd_nccl_start(Comm* c) {
    WdNccl* w = new WdNccl();
    w->c = c;
    w->stop.store(0);
    w->head = w->tail = 0;
#if LLM_BUILD_CUDA
    for (int i = 0; i < WD_RING; i++) cudaCheck(cudaEventCreateWithFlags(&w->ev[i], cudaEventDisableTiming));
#endif
    c->wd.nccl = w;
    w->thread = std::thread(wd_nccl_loop, w);
}
static void wd_nccl_stop(Comm* c) {
    WdNccl* w = c->wd.nccl;
    if (w == NULL) return;
    w->stop.store(1);
    w->thread.join();
#if LLM_BUILD_CUDA
    for (int i = 0; i < WD_RING; i++) cudaCheck(cudaEventDestroy(w->ev[i]));
#endif
    delete w;
    c->wd.nccl = NULL;
}
#else
static inline int wd_nccl_begin(Comm*, const char*, CommGroup, long long) { return -1; }
static inline void wd_nccl_end(Comm*, int) {}
#endif

// --comm-timeout: 0 turns the watchdog off; reports start after a fifth of it (at most 1 s). Over
// NCCL (more than one process) it starts the watchdog thread.
static void wd_set_timeout(Comm* c, double timeout_s) {
    c->wd.timeout_s = timeout_s;
    c->wd.report_s = timeout_s / 5 < 1.0 ? timeout_s / 5 : 1.0;
#if COMM_NCCL
    if (timeout_s > 0.0 && c->world_size > 1 && c->wd.nccl == NULL) wd_nccl_start(c);
#endif
}
