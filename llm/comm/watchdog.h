// watchdog.h: the communication watchdog (--comm-timeout SECONDS): no collective or P2P waits
// forever. A rank that dies or hangs leaves its peers blocked inside a collective; at thousands of
// GPUs that happens every few hours (Llama 3 report, sec. 3.3.4: NCCLX's watchdog aborts the
// collectives of a stuck job and names the rank that stopped, so the job restarts in minutes
// instead of hanging). Every wait of llm/comm/ is bounded by timeout_s (wd_set_timeout, in
// llm/comm/comm_mesh.h); past it the rank prints ONE line and the whole job ends:
//
//   watchdog: rank R: step S: no progress for T s (--comm-timeout X) in all_reduce #N of the dp group
//   (world ranks a,b,...) called at FILE:LINE: missing rank r (why), ...; no report from rank q
//
// the collective or P2P (its name, its number in its group, the file:line of the API call: each API
// function of llm/comm/ takes the caller's CommSite, llm/comm/comm_types.h), its group and the ranks
// missing from it. To name them the ranks tell each other where they wait over a side channel: a rank
// that has waited longer than report_s tells every other rank (step, group, sequence number of the
// collective in that group, kind), and "done" when that wait ends. Every collective of a group is
// called by all of its ranks in the same order, so the same collective has the same sequence number on
// each of them; a missing rank is one of the group (or a P2P peer) that did not report waiting at the
// same point: a dead or hung rank never reports, a rank waiting elsewhere is named with where.
//
// This file is what both transports share: the description of a wait (WdWait), the mesh's members of
// a group, and the line's beginning. The side channel and the bounded wait are MPI's
// (llm/comm/watchdog_mpi.h: the CPU build, and under the emulated NCCL); real NCCL blocks the host
// elsewhere, so a thread watches its collectives (llm/comm/watchdog_nccl.h, over the same side
// channel). Without MPI there is one process and nothing to wait for.
#pragma once

#include "comm_types.h"
#include <stdarg.h>

// what a rank waits in: the line and the reports are made of it
typedef struct {
    const char* name;  // "all_reduce", "recv", "p2p_batch", ...
    CommGroup g;
    int collective;    // 1: every rank of g takes part (matched by seq); 0: P2P with peers[] only
    long long seq;     // the collective's number in its group (c->wd.seq[g] when it was called)
    const char* file;  // the call site (the API call's CommSite), or where it is waited (line 0)
    int line;
    int npeers;        // P2P: the world ranks it waits on
    int peers[8];
    int step;          // the training step it was called in
} WdWait;

// the world ranks of my group g, in group order (llm/comm/mesh.h); returns how many
static int wd_members(const Comm* c, CommGroup g, int* out) {
    if (g < 0 || g >= COMM_NUM_GROUPS) { out[0] = c->world_rank; return 1; }
    return mesh_group_members(&c->mesh, g, c->world_rank, out);
}

// the world rank of rank r of my group g
static int wd_world_of(const Comm* c, CommGroup g, int r) {
    int* m = (int*)mallocCheck((size_t)c->world_size * sizeof(int));
    int n = wd_members(c, g, m), w = (r >= 0 && r < n) ? m[r] : -1;
    free(m);
    return w;
}

// a description of a wait of group g at this rank, called at `at`
static WdWait wd_collective(const Comm* c, const char* name, CommGroup g, long long seq, CommSite at) {
    WdWait w;
    memset(&w, 0, sizeof(w));
    w.name = name;
    w.g = g;
    w.collective = 1;
    w.seq = seq;
    w.file = at.file ? at.file : "?";
    w.line = at.line;
    w.step = c->wd.step;
    return w;
}
static WdWait wd_p2p(const Comm* c, const char* name, CommGroup g, const int* group_peers, int n, CommSite at) {
    WdWait w = wd_collective(c, name, g, 0, at);
    w.collective = 0;
    for (int i = 0; i < n && w.npeers < 8; i++) {
        int p = wd_world_of(c, g, group_peers[i]);
        int seen = 0;
        for (int k = 0; k < w.npeers; k++) seen |= w.peers[k] == p;
        if (!seen) w.peers[w.npeers++] = p;
    }
    return w;
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

// A header's __FILE__ is the path it was included by: "llm/model/../sharded/tensor_parallel.h" from
// llm/model/block.h. The line names the file as a reader finds it in the tree: each "dir/../" of buf
// is dropped (a "../" with nothing to drop before it stays).
static void wd_drop_dotdot(char* buf) {
    char* up = buf;
    while ((up = strstr(up, "/../")) != NULL) {
        char* seg = up;
        while (seg > buf && seg[-1] != '/' && seg[-1] != ' ') seg--;
        if (seg == up || (up - seg == 2 && seg[0] == '.' && seg[1] == '.')) { up += 3; continue; }
        memmove(seg, up + 4, strlen(up + 4) + 1);
        up = seg > buf ? seg - 1 : buf;  // (the "/" before seg: "a/b/../../" drops both)
    }
}

// The line's beginning, the same over MPI and NCCL: the rank, the step, why (error: an NCCL error;
// expired_by >= 0: that rank's watchdog expired first and told this one; else the timeout), the call it
// waits in, its group's world ranks and its call site. The transport's file appends the missing ranks.
static void wd_cat_call(const Comm* c, const WdWait* w, int expired_by, double waited_s, const char* error, char* line, size_t cap) {
    wd_cat(line, cap, "watchdog: rank %d: step %d: ", c->world_rank, w->step);
    if (error) wd_cat(line, cap, "NCCL error '%s' ", error);
    else if (expired_by >= 0) wd_cat(line, cap, "rank %d's watchdog expired after %.1f s of waiting here ", expired_by, waited_s);
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
    wd_drop_dotdot(line);
}
