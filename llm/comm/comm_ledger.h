// comm_ledger.h: what every collective of this rank moved, per kind and group (Comm's CommLedger).
//
// The ledger. Every collective adds to a per-rank table, per kind and per group: the number of
// calls, the payload bytes (the size of the full logical buffer: n elements for all_reduce,
// broadcast, send, recv; the size*block input of reduce_scatter and of all_to_all; the size*block
// output of all_gather), and the bytes this rank sends under a ring algorithm, the communication
// model of the ZeRO paper (Rajbhandari et al. 2019, "ZeRO: Memory Optimizations Toward Training
// Trillion Parameter Models", sec. 7, "Analysis of communication volume"). For a group of N ranks and a
// payload of S bytes:
//
//     all_reduce      2 (N-1)/N * S   (a ring reduce-scatter followed by a ring all-gather)
//     reduce_scatter    (N-1)/N * S   (S = the full input, N blocks)
//     all_gather        (N-1)/N * S   (S = the full output)
//     all_to_all        (N-1)/N * S   (S = the full input: every block but the rank's own leaves it;
//                                      direct sends, no ring, the same bytes)
//     broadcast       S on the root, 0 on the others (N > 1), the bytes the root injects
//     send            S
//     recv            0 (the payload S is still recorded)
//
// With N = 1 every collective sends 0 bytes. So for Psi gradient/parameter bytes on a DP group of N:
// DDP's one all-reduce of the gradients sends 2 Psi (N-1)/N per rank; ZeRO-3 sends an all-gather
// of the parameters in the forward pass, another in the backward pass, and a reduce-scatter of the
// gradients: 3 Psi (N-1)/N, i.e. 1.5x DDP (ZeRO sec. 7.2); ZeRO-1/2 send a reduce-scatter and an
// all-gather, 2 Psi (N-1)/N, the same as DDP (sec. 7.2.1).
#pragma once

#include "comm_types.h"

static inline void ledger_reset(Comm* c) { memset(&c->ledger, 0, sizeof(c->ledger)); }

// bytes this rank sends for one call (the ring model above)
static inline double comm_ring_bytes(CommKind kind, int N, double S, int is_root) {
    if (N <= 1) return 0.0;
    switch (kind) {
        case COMM_ALL_REDUCE: return 2.0 * (N - 1) / N * S;
        case COMM_REDUCE_SCATTER: return (double)(N - 1) / N * S;
        case COMM_ALL_GATHER: return (double)(N - 1) / N * S;
        case COMM_ALL_TO_ALL: return (double)(N - 1) / N * S;
        case COMM_BROADCAST: return is_root ? S : 0.0;
        case COMM_SEND: return S;
        default: return 0.0;  // COMM_RECV
    }
}

static inline void ledger_add(Comm* c, CommKind kind, CommGroup g, double payload, int is_root) {
    c->ledger.calls[kind][g] += 1;
    c->ledger.payload_bytes[kind][g] += payload;
    c->ledger.sent_bytes[kind][g] += comm_ring_bytes(kind, c->group_size[g], payload, is_root);
}

// sums over kinds (COMM_ALL_KINDS) and/or groups (GROUP_ALL) when asked
static inline double ledger_sum(const Comm* c, int which, CommKind kind, CommGroup g) {
    double s = 0.0;
    for (int k = 0; k < COMM_NUM_KINDS; k++) {
        if (kind != COMM_ALL_KINDS && k != (int)kind) continue;
        for (int q = 0; q < COMM_NUM_GROUPS; q++) {
            if (g != GROUP_ALL && q != (int)g) continue;
            s += which == 0 ? (double)c->ledger.calls[k][q]
               : which == 1 ? c->ledger.payload_bytes[k][q] : c->ledger.sent_bytes[k][q];
        }
    }
    return s;
}
static inline long long ledger_calls(const Comm* c, CommKind kind, CommGroup g) {
    return (long long)ledger_sum(c, 0, kind, g);
}
static inline double ledger_payload_bytes(const Comm* c, CommKind kind, CommGroup g) {
    return ledger_sum(c, 1, kind, g);
}
static inline double ledger_sent_bytes(const Comm* c, CommKind kind, CommGroup g) {
    return ledger_sum(c, 2, kind, g);
}

// a small table of this rank's non-empty rows
static void ledger_print(const Comm* c, FILE* f) {
    fprintf(f, "comm ledger, rank %d (sent = ring model, ZeRO paper sec. 7)\n", c->world_rank);
    fprintf(f, "  %-15s %-6s %5s %10s %14s %14s\n", "collective", "group", "size", "calls", "payload MB", "sent MB");
    for (int k = 0; k < COMM_NUM_KINDS; k++) {
        for (int g = 0; g < COMM_NUM_GROUPS; g++) {
            if (c->ledger.calls[k][g] == 0) continue;
            fprintf(f, "  %-15s %-6s %5d %10lld %14.3f %14.3f\n", comm_kind_name(k), comm_group_name(g),
                    c->group_size[g], c->ledger.calls[k][g], c->ledger.payload_bytes[k][g] / 1e6,
                    c->ledger.sent_bytes[k][g] / 1e6);
        }
    }
    fprintf(f, "  %-15s %-6s %5s %10lld %14.3f %14.3f\n", "total", "", "",
            ledger_calls(c, COMM_ALL_KINDS, GROUP_ALL),
            ledger_payload_bytes(c, COMM_ALL_KINDS, GROUP_ALL) / 1e6,
            ledger_sent_bytes(c, COMM_ALL_KINDS, GROUP_ALL) / 1e6);
}

// JSON object of the non-empty rows, for --report-json:
//   {"rank":0,"rows":[{"kind":"all_reduce","group":"dp","size":2,"calls":1,"payload_bytes":..,
//     "sent_bytes":..},...],"total_calls":..,"total_payload_bytes":..,"total_sent_bytes":..}
// Returns the length of the whole text (as snprintf); the text is complete iff it is < cap.
static int ledger_json(const Comm* c, char* buf, size_t cap) {
    size_t len = 0;
#define LEDGER_PUT(...) do { \
        int w_ = snprintf(len < cap ? buf + len : NULL, len < cap ? cap - len : 0, __VA_ARGS__); \
        if (w_ > 0) len += (size_t)w_; } while (0)
    LEDGER_PUT("{\"rank\":%d,\"rows\":[", c->world_rank);
    int first = 1;
    for (int k = 0; k < COMM_NUM_KINDS; k++) {
        for (int g = 0; g < COMM_NUM_GROUPS; g++) {
            if (c->ledger.calls[k][g] == 0) continue;
            LEDGER_PUT("%s{\"kind\":\"%s\",\"group\":\"%s\",\"size\":%d,\"calls\":%lld,"
                       "\"payload_bytes\":%.0f,\"sent_bytes\":%.1f}", first ? "" : ",", comm_kind_name(k),
                       comm_group_name(g), c->group_size[g], c->ledger.calls[k][g],
                       c->ledger.payload_bytes[k][g], c->ledger.sent_bytes[k][g]);
            first = 0;
        }
    }
    LEDGER_PUT("],\"total_calls\":%lld,\"total_payload_bytes\":%.0f,\"total_sent_bytes\":%.1f}",
               ledger_calls(c, COMM_ALL_KINDS, GROUP_ALL), ledger_payload_bytes(c, COMM_ALL_KINDS, GROUP_ALL),
               ledger_sent_bytes(c, COMM_ALL_KINDS, GROUP_ALL));
#undef LEDGER_PUT
    if (cap > 0 && len >= cap) buf[cap - 1] = '\0';
    return (int)len;
}
