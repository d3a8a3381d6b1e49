// report.h: the accounting of a run beside the ZeRO paper (Rajbhandari et al. 2019): the bytes each
// rank holds for parameters, gradients, optimizer moments and master weights against Table 1's
// formula for the stage, and the bytes it sends per step against the ring model of section 7.
// Printed by rank 0; written for every rank with --report-json (train_gpt.cu).
#pragma once
#include "common.h"
#include "comm.h"
#include "zero.h"
#include "checkpoint.h"
#include "optimizer.h"

static const char* stage_name(int stage) {
    static const char* names[4] = {"DDP", "ZeRO-1 (P_os)", "ZeRO-2 (P_os+g)", "ZeRO-3 (P_os+g+p)"};
    return names[stage];
}

// the paper's bytes per parameter for the stage as text (Table 1: p + g + K, divided per stage)
static void paper_formula_text(int stage, char* buf, size_t cap) {
    int p = (int)sizeof(floatX), K = ADAMW_HAS_MASTER ? 12 : 8;
    if (stage == 0) snprintf(buf, cap, "%d+%d+%d", p, p, K);
    else if (stage == 1) snprintf(buf, cap, "%d+%d+%d/N", p, p, K);
    else if (stage == 2) snprintf(buf, cap, "%d+%d/N", p, p + K);
    else snprintf(buf, cap, "%d/N", 2 * p + K);
}

// the bytes one rank sends per step for the gradients and parameters, ZeRO paper sec. 7 (ring
// model), without the all-reduces of the loss and the norm (4 bytes each). S: the gradient (Psi
// values), P: the padded units. ZeRO-3 gathers the parameters in every micro-step's forward and
// backward: with gradient accumulation 2 * grad_accum all-gathers per step.
static double paper_sent_bytes(const Zero* z, int stage, int grad_accum) {
    double N = z->dp, f = (N - 1) / N;
    double S = (double)sizeof(floatX) * z->num_parameters, P = (double)sizeof(floatX) * z->packed_size;
    if (stage == 0) return 2 * f * S;          // all-reduce of the gradients
    if (stage <= 2) return 2 * f * P;          // stages 1-2: reduce-scatter + all-gather (sec. 7.2.1)
    return (2 * grad_accum + 1) * f * P;       // all-gather forward + all-gather backward + reduce-scatter
}

static void print_memory(const Zero* z, const AdamWState* st, int stage) {
    ZeroMemory m = zero_memory(z, st);
    double psi = (double)z->num_parameters, states = m.params + m.grads + m.moments + m.master;
    double paper = zero_paper_bytes(stage, z->dp, psi);
    char formula[32];
    paper_formula_text(stage, formula, sizeof(formula));
    printf("memory per rank: %s over dp = %d, %s, Psi = %zu parameters (%d units padded to %zu, shard %zu)\n",
           stage_name(stage), z->dp, PRECISION_MODE, z->num_parameters, z->num_units, z->packed_size, z->shard_size);
    printf("  parameters %.0f B | gradients %.0f B | AdamW m, v %.0f B | FP32 master weights %.0f B\n", m.params,
           m.grads, m.moments, m.master);
    printf("  model states %.0f B = %.3f B/parameter | ZeRO paper (Table 1) %s = %.3f B/parameter = %.0f B (+%.0f B of padding)\n",
           states, states / psi, formula, paper / psi, paper, states - paper);
    printf("  activations %.0f B | communication buffers %.0f B | unit working buffers peak %.0f B (transient)\n",
           m.activations, m.comm_buffers, m.workspace_peak);
}

// this rank's part of the report, one JSON object
static void rank_report_json(const Zero* z, const AdamWState* st, const Comm* c, double grad_wait_ms,
                             double gather_wait_ms, char* buf, size_t cap) {
    ZeroMemory m = zero_memory(z, st);
    int len = snprintf(buf, cap, "{\"rank\":%d,\"dp_rank\":%d,\"params_bytes\":%.0f,\"grads_bytes\":%.0f,"
                       "\"moments_bytes\":%.0f,\"master_bytes\":%.0f,\"model_states_bytes\":%.0f,"
                       "\"activations_bytes\":%.0f,\"comm_buffers_bytes\":%.0f,\"workspace_peak_bytes\":%.0f,"
                       "\"comm_wait_ms_per_step\":%.3f,\"gather_wait_ms_per_step\":%.3f,\"ledger_step\":",
                       c->world_rank, c->dp_rank, m.params, m.grads, m.moments, m.master,
                       m.params + m.grads + m.moments + m.master, m.activations, m.comm_buffers, m.workspace_peak,
                       grad_wait_ms, gather_wait_ms);
    if (len < 0 || (size_t)len >= cap) fatal("--report-json: the report of rank %d is too long", c->world_rank);
    int lj = ledger_json(c, buf + len, cap - (size_t)len);
    if (lj < 0 || (size_t)(len + lj + 2) > cap) fatal("--report-json: the report of rank %d is too long", c->world_rank);
    snprintf(buf + len + lj, cap - (size_t)(len + lj), "}");
}

#define REPORT_RANK_BYTES 8192

// every rank's object gathered to rank 0, which writes the file (through a temporary name)
static void write_report(const char* path, int stage, const Zero* z, const AdamWState* st, Comm* c,
                         int grad_accum, double grad_wait_ms, double gather_wait_ms, int timed_steps) {
    char* mine = (char*)mallocCheck(REPORT_RANK_BYTES);
    memset(mine, 0, REPORT_RANK_BYTES);
    rank_report_json(z, st, c, grad_wait_ms, gather_wait_ms, mine, REPORT_RANK_BYTES);
    char* all = c->world_rank == 0 ? (char*)mallocCheck((size_t)c->world_size * REPORT_RANK_BYTES) : NULL;
    // host text, not a collective of the training: outside the ledger
    comm_gather_bytes(c, mine, REPORT_RANK_BYTES, all);
    if (c->world_rank == 0) {
        char formula[32];
        paper_formula_text(stage, formula, sizeof(formula));
        AtomicFile af;
        atomic_open(&af, path);
        fprintf(af.f, "{\"stage\":%d,\"world\":%d,\"dp\":%d,\"tp\":%d,\"pp\":%d,\"build\":\"%s\",\"precision\":\"%s\","
                "\"bytes_per_value\":%d,\"optimizer_bytes_per_param\":%d,\"num_parameters\":%zu,\"num_units\":%d,"
                "\"packed_parameters\":%zu,\"shard_parameters\":%zu,\"grad_accum\":%d,\"paper_formula\":\"%s\","
                "\"paper_model_states_bytes\":%.0f,\"paper_sent_bytes_per_step\":%.1f,\"timed_steps\":%d,\"ranks\":[",
                stage, c->world_size, c->dp, c->tp, c->pp, LLM_BUILD_CPU ? "CPU" : (LLM_BUILD_EMU ? "emulated CUDA" : "CUDA"),
                PRECISION_MODE, (int)sizeof(floatX), ADAMW_HAS_MASTER ? 12 : 8, z->num_parameters, z->num_units,
                z->packed_size, z->shard_size, grad_accum, formula, zero_paper_bytes(stage, z->dp, (double)z->num_parameters),
                paper_sent_bytes(z, stage, grad_accum), timed_steps);
        for (int r = 0; r < c->world_size; r++) fprintf(af.f, "%s%s", r ? "," : "", all + (size_t)r * REPORT_RANK_BYTES);
        fprintf(af.f, "]}\n");
        atomic_commit(&af);
        printf("report: %s\n", path);
    }
    free(mine);
    free(all);
}

