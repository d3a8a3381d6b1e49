// watchdog_nccl.h: the communication watchdog over real NCCL (llm/comm/watchdog.h says what it does).
// The host does not block in a collective but later, in a stream or event synchronize; so the
// communicators are non-blocking (ncclConfig_t.blocking = 0; each call's ncclInProgress settled by
// nccl_settle, llm/comm/comm_transport.h), and a watchdog thread watches the oldest collective still in
// flight: past report_s it reports it on MPI's side channel (llm/comm/watchdog_mpi.h) as wd_wait does
// (NCCL builds ask MPI for MPI_THREAD_MULTIPLE, so that this thread may call MPI beside the main
// thread; the side channel's state is under a mutex); past the deadline, or on an asynchronous NCCL
// error, it prints the line (step, collective, group, call site, and the missing ranks from the
// reports), tells the others, ncclCommAbort's every communicator and exits non-zero (mpirun ends the
// job). Without MPI_THREAD_MULTIPLE the line says it cannot name them. The emulated build runs this
// code against nccl_emu.h, whose calls complete inside the call.
#pragma once

#include "watchdog_mpi.h"  // the side channel (NCCL runs over MPI)
#include <thread>
#include <mutex>
#include <atomic>
#if !COMM_NCCL
#error "llm/comm/watchdog_nccl.h is the NCCL transport's watchdog: include it only in builds with NCCL (COMM_NCCL)"
#endif

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
    wd_cat_call(c, &ww, by_peer ? c->wd.expired_by : -1, waited_s, nccl_error, line, sizeof(line));
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

// before an NCCL call made at `at`: an entry in flight; returns its index (or -1 when the watchdog is off)
static int wd_nccl_begin(Comm* c, const char* name, CommGroup g, long long seq, CommSite at) {
    WdNccl* w = c->wd.nccl;
    if (w == NULL) return -1;
    std::lock_guard<std::mutex> lock(w->mu);
    if (w->head - w->tail == WD_RING) w->tail++;  // full: the oldest is dropped (later ones cover it)
    int i = (int)(w->head % WD_RING);
    w->e[i] = WdEntry{wall_ms(), name, (int)g, c->wd.step, at.line, seq, at.file ? at.file : "?", 1};
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
    if (w == NULL || std::this_thread::get_id() == w->thread.get_id()) return;  // (not from the thread itself)
    w->stop.store(1);
    w->thread.join();
#if LLM_BUILD_CUDA
    for (int i = 0; i < WD_RING; i++) cudaCheck(cudaEventDestroy(w->ev[i]));
#endif
    delete w;
    c->wd.nccl = NULL;
}
