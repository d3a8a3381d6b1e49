// report.h: what a run measured, beside what the papers predict. Memory per rank comes from the
// tagged allocator (llm/core/context.h: the live and peak bytes of each kind that were allocated), bytes
// sent from the comm ledger (llm/comm/comm.h: what was sent); the formulas are predictions and are
// printed as such:
//   model states per rank    ZeRO (Rajbhandari et al. 2019), Table 1, for its switches (llm/parallel/dp.h)
//   bytes sent per step      ZeRO sec. 7, ring model
//   activations per layer    Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
//                            Transformer Models", sec. 4.1 and Table 2, adapted to this model
//                            (activation_formula_bytes below)
// Printed by rank 0; written for every rank with --report-json. And the run's first lines (print_run_header).
#pragma once
#include "../core/common.h"
#include "../core/context.h"
#include "../core/atomic_file.h"  // the report file, through a temporary name (af_write_text)
#include "../comm/comm.h"
#include "../parallel/dp.h"
#include "../model/block.h"
#include "../model/stage.h"
#include "../parallel/pipeline_report.h"
#include "../precision/fp8_linear.h"
#include "args.h"
#include "dataloader.h"
#include "mfu.h"

// the paper's bytes per parameter as text (Table 1: p + g + K, the partitioned ones' sum divided by N),
// e.g. "4+4+8/N"
static void paper_formula_text(ZeroConfig zero, char* buf, size_t cap) {
    int p = (int)sizeof(floatX), K = ADAMW_HAS_MASTER ? 12 : 8, parted = 0;
    size_t len = 0;
    buf[0] = '\0';
    if (!zero.shard_params) len += snprintf(buf + len, cap - len, "%d", p); else parted += p;
    if (!zero.shard_grads) len += snprintf(buf + len, cap - len, "%s%d", len ? "+" : "", p); else parted += p;
    if (!zero.shard_optim) len += snprintf(buf + len, cap - len, "%s%d", len ? "+" : "", K); else parted += K;
    if (parted) snprintf(buf + len, cap - len, "%s%d/N", len ? "+" : "", parted);
}

// The bytes one rank sends per step for the gradients and parameters, ZeRO paper sec. 7 (ring
// model), without the all-reduces of the loss and the norm (4 bytes each). S: the gradient (Psi
// values), P: the padded units. ZeRO-3 gathers the parameters in every micro-batch's forward and
// backward: with gradient accumulation 2 * grad_accum all-gathers per step.
static double paper_sent_bytes(const DataParallel* dp, int grad_accum) {
    double N = dp->size, f = (N - 1) / N;
    double S = (double)sizeof(floatX) * dp->lay.shard_parameters, P = (double)sizeof(floatX) * dp->lay.packed_size;
    if (!dp->zero.shard_optim) return 2 * f * S;   // all-reduce of the gradients
    if (!dp->zero.shard_params) return 2 * f * P;  // P_os, P_os+g: reduce-scatter + all-gather (sec. 7.2.1)
    return (2 * grad_accum + 1) * f * P;           // all-gather forward + all-gather backward + reduce-scatter
}

// The activation bytes one transformer layer keeps per micro-batch, Korthikanti et al. 2022 sec. 4.1
// adapted to this model. The paper counts, in 16-bit values for a sequence s, micro-batch b, hidden
// size h and a heads: attention 11 sbh + 5 as^2 b (the QKV input, Q and K, the softmax output, its
// dropout mask and output, V, the projection input and its dropout mask), MLP 19 sbh (fc input, GELU
// input and output, dropout mask), two LayerNorm inputs 4 sbh: 34 sbh + 5 as^2 b per layer without
// recompute, 2 sbh with full recompute (the layer's input only). GPT-2 here has no dropout: the three
// masks (2 sbh + as^2 b) and the attention dropout's output (2 as^2 b) do not exist. With e bytes per
// value of the build (2 in BF16, 4 in FP32), what this implementation keeps (llm/model/block.h's table):
//   none       x_in, ln1, q k v, atty, residual2, ln2: 8 e sbh; fc output and GELU output: 8 e sbh;
//              the two LayerNorms' mean and rstd (FP32) 16 sb; and of the attention core only its
//              row log-sum-exp (FP32) 4 as b: the fused kernels (llm/ops/attention.cuh) recompute the
//              softmax output in the backward, so the paper's as^2 b terms are gone and the bytes
//              grow linearly in s. In BF16: 32 sbh + 4 asb + 16 sb, the paper's 34 sbh + 5 as^2 b
//              less dropout (2 sbh + 3 as^2 b) and less the softmax output (2 as^2 b, traded for 4 asb).
//   selective  x_in, q k v, residual2, fc output, GELU output: 13 e sbh (the attention core and the
//              LayerNorm outputs are recomputed)
//   full       x_in: e sbh (the paper's 2 sbh)
// With tensor parallelism over t ranks (sec. 4.2.1: 10 sbh + 24 sbh / t + 5 as^2 b / t in the paper)
// the attention's and the MLP's inner activations are split, the LayerNorms' inputs and outputs are not:
//   none       4 e sbh + 16 sb + (12 e sbh + 4 asb) / t
//   selective  2 e sbh + 11 e sbh / t
//   full       e sbh
// With sequence parallelism as well (sec. 4.2.2: (34 sbh + 5 as^2 b) / t) every term is divided by t:
// the LayerNorm/residual region holds 1/t of the tokens, and the gathered inputs of the column-
// parallel linears are not kept (gathered again in the backward, llm/sharded/tensor_parallel.h).
// With context parallelism over N ranks (llm/sharded/context_parallel.h) s is the rank's T/N tokens:
// every term falls as 1/N. Ulysses keeps, without recompute, the head split of q, k, v and the output
// (the rank's H/N heads over all s N tokens: 4 e sbh / t more); ring attention keeps nothing more.
static double activation_formula_bytes(GPTConfig cfg, int B, int T, Recompute r, int tp, int sp, int ulysses) {
    double s = T, b = B, h = cfg.channels, a = cfg.num_heads, e = (double)sizeof(floatX), t = tp;
    double sbh = s * b * h, split = sp && tp > 1 ? t : 1.0;  // the divisor of the replicated regions
    switch (r) {
        case RECOMPUTE_NONE:
            return (4 * e * sbh + 16 * s * b) / split + (12 * e * sbh + 4 * a * s * b + (ulysses ? 4 * e * sbh : 0.0)) / t;
        case RECOMPUTE_SELECTIVE: return 2 * e * sbh / split + 11 * e * sbh / t;
        default: return e * sbh / split;
    }
}

static void print_memory(const DataParallel* dp, const Stage* st) {
    double psi = (double)dp->lay.shard_parameters;  // Psi of the paper: what one model-parallel rank holds
    double states = (double)(mem_live(MEM_PARAMS) + mem_live(MEM_GRADS) + mem_live(MEM_MOMENTS) + mem_live(MEM_MASTER));
    double paper = dp_layout_paper_bytes(dp);
    char formula[32];
    paper_formula_text(dp->zero, formula, sizeof(formula));
    int cp = dp->comm != NULL ? dp->comm->mesh.cp.size : 1;  // (context parallelism: the gradient group is dp x cp)
    if (cp > 1) printf("memory per rank: %s over dp x cp = %d x %d", zero_name(dp->zero.level), dp->size / cp, cp);
    else printf("memory per rank: %s over dp = %d", zero_name(dp->zero.level), dp->size);
    printf(", %s, Psi = %zu parameters (%d units padded to %zu values)", PRECISION_MODE, dp->lay.shard_parameters,
           dp->lay.num_units, dp->lay.packed_size);
    if (dp->lay.tp_size > 1) printf(", this tp rank's shards of the model's %zu (tp = %d)", dp->lay.num_parameters, dp->lay.tp_size);
    printf("\n");
    printf("  measured (allocated now | peak):");
    for (int k = 0; k < MEM_NUM_KINDS; k++) {
        printf("%s %s %zu | %zu B", k ? ";" : "", mem_kind_name(k), mem_live((MemKind)k), mem_peak((MemKind)k));
    }
    printf("\n  model states %.0f B = %.3f B/parameter measured | ZeRO paper (Table 1) predicts %s = %.3f B/parameter = %.0f B (+%.0f B of padding)\n",
           states, states / psi, formula, paper / psi, paper, states - paper);
    printf("  activations per layer per micro-batch (--recompute %s): %zu B measured | %.0f B predicted (Korthikanti et al. 2022, adapted)\n",
           recompute_name(st->recompute), st->layer_act_bytes, activation_formula_bytes(st->cfg, st->B, st->T, st->recompute, st->tp.size, st->tp.sequence_parallel,
                                                    st->cp.size > 1 && st->cp.impl == CP_ULYSSES));
}

// this rank's part of the report, one JSON object: "*_bytes" are measured (allocated), "*_peak_bytes" the peaks
// extra: more "key":value pairs of this rank (the pipeline's), or NULL
static void rank_report_json(const DataParallel* dp, const Stage* st, const Comm* c, const DpTrace* trace,
                             double comm_wait_ms, const char* extra, char* buf, size_t cap) {
    static const char* keys[MEM_NUM_KINDS] = {"params", "grads", "moments", "master", "activations", "comm_buffers", "workspace"};
    size_t len = 0;
#define REPORT_PUT(...) do { int w_ = snprintf(len < cap ? buf + len : NULL, len < cap ? cap - len : 0, __VA_ARGS__); \
                             if (w_ > 0) len += (size_t)w_; } while (0)
    int chunks[2];  // the chunks of each sequence this rank holds (llm/sharded/cp_group.h; without cp: both of 2)
    cp_chunks(&st->cp, st->cp.rank, chunks);
    REPORT_PUT("{\"rank\":%d,\"dp_rank\":%d,\"tp_rank\":%d,\"pp_rank\":%d,\"cp_rank\":%d,\"cp_chunks\":[%d,%d]", c->world_rank,
               c->mesh.dp.rank, c->mesh.tp.rank, c->mesh.pp.rank, c->mesh.cp.rank, chunks[0], chunks[1]);
    // what this rank's pipeline stage holds (every rank alike without a pipeline)
    REPORT_PUT(",\"shard_parameters\":%zu,\"packed_parameters\":%zu,\"paper_model_states_bytes\":%.0f", dp->lay.shard_parameters,
               dp->lay.packed_size, dp_layout_paper_bytes(dp));
    if (extra) REPORT_PUT(",%s", extra);
    for (int k = 0; k < MEM_NUM_KINDS; k++) REPORT_PUT(",\"%s_bytes\":%zu,\"%s_peak_bytes\":%zu", keys[k], mem_live((MemKind)k), keys[k], mem_peak((MemKind)k));
    REPORT_PUT(",\"activations_per_layer_bytes\":%zu,\"comm_wait_ms_per_step\":%.3f,\"dp_events_dropped\":%d,\"dp_events\":\"",
               st->layer_act_bytes, comm_wait_ms, trace->dropped);
    for (int i = 0; i < trace->n; i++) {  // the last step's data-parallel operations (llm/parallel/ddp.h), e.g. "F0 F1 B3 R3"
        if (trace->unit[i] >= 0) REPORT_PUT("%s%c%d", i ? " " : "", trace->what[i], trace->unit[i]);
        else REPORT_PUT("%s%c", i ? " " : "", trace->what[i]);
    }
    REPORT_PUT("\",\"ledger_step\":");
#undef REPORT_PUT
    if (len >= cap) fatal("--report-json: the report of rank %d is too long", c->world_rank);
    int lj = ledger_json(c, buf + len, cap - len);
    if (lj < 0 || len + (size_t)lj + 2 > cap) fatal("--report-json: the report of rank %d is too long", c->world_rank);
    snprintf(buf + len + lj, cap - (len + (size_t)lj), "}");
}

#define REPORT_RANK_BYTES 65536

// every rank's object gathered to rank 0, which writes the file (through a temporary name)
static void write_report(const char* path, const DataParallel* dp, const Stage* st, Comm* c, const DpTrace* trace,
                         int grad_accum, double comm_wait_ms, int timed_steps, const char* extra) {
    char* mine = (char*)mallocCheck(REPORT_RANK_BYTES);
    memset(mine, 0, REPORT_RANK_BYTES);
    rank_report_json(dp, st, c, trace, comm_wait_ms, extra, mine, REPORT_RANK_BYTES);
    char* all = c->world_rank == 0 ? (char*)mallocCheck((size_t)c->world_size * REPORT_RANK_BYTES) : NULL;
    // host text, not a collective of the training: outside the ledger
    comm_gather_bytes(c, mine, REPORT_RANK_BYTES, all);
    if (c->world_rank == 0) {
        char formula[32];
        paper_formula_text(dp->zero, formula, sizeof(formula));
        char* text = NULL;
        size_t len = 0;
        FILE* mf = open_memstream(&text, &len);  // the whole report, then written through a temporary name
        if (mf == NULL) fatal("%s: open_memstream failed: %s", path, strerror(errno));
        fprintf(mf, "{\"note\":\"*_bytes: measured by the tagged allocator (live at the end of the run; *_peak_bytes: the most "
                "at once); paper_*: predictions of the formulas\",\"stage\":%d,\"world\":%d,\"dp\":%d,\"tp\":%d,\"pp\":%d,\"cp\":%d,\"cp_impl\":\"%s\",\"cp_balance\":\"%s\","
                "\"build\":\"%s\",\"precision\":\"%s\",\"bytes_per_value\":%d,\"optimizer_bytes_per_param\":%d,"
                "\"num_parameters\":%zu,\"shard_parameters\":%zu,\"num_units\":%d,\"packed_parameters\":%zu,\"grad_accum\":%d,\"B\":%d,\"T\":%d,"
                "\"L\":%d,\"C\":%d,\"NH\":%d,\"sequence_parallel\":%d,\"recompute\":\"%s\",\"paper_formula\":\"%s\",\"paper_model_states_bytes\":%.0f,"
                "\"paper_activations_per_layer_bytes\":%.0f,\"paper_sent_bytes_per_step\":%.1f,\"timed_steps\":%d,\"ranks\":[",
                dp->zero.level, c->world_size, c->mesh.dp.size, c->mesh.tp.size, c->mesh.pp.size, c->mesh.cp.size, cp_impl_name(st->cp.impl), cp_balance_name(st->cp.balance), LLM_BUILD_CPU ? "CPU" : (LLM_BUILD_EMU ? "emulated CUDA" : "CUDA"),
                PRECISION_MODE, (int)sizeof(floatX), ADAMW_HAS_MASTER ? 12 : 8, dp->lay.num_parameters, dp->lay.shard_parameters, dp->lay.num_units,
                dp->lay.packed_size, grad_accum, st->B, st->T, st->cfg.num_layers, st->cfg.channels, st->cfg.num_heads,
                st->tp.sequence_parallel, recompute_name(st->recompute), formula, dp_layout_paper_bytes(dp),
                activation_formula_bytes(st->cfg, st->B, st->T, st->recompute, st->tp.size, st->tp.sequence_parallel,
                                                    st->cp.size > 1 && st->cp.impl == CP_ULYSSES), paper_sent_bytes(dp, grad_accum), timed_steps);
        for (int r = 0; r < c->world_size; r++) fprintf(mf, "%s%s", r ? "," : "", all + (size_t)r * REPORT_RANK_BYTES);
        fprintf(mf, "]}\n");
        if (fclose(mf) != 0) fatal("%s: open_memstream failed", path);
        af_write_text(path, text);
        free(text);
        printf("report: %s\n", path);
    }
    free(mine);
    free(all);
}

// The run's first lines (rank 0): the model, the processes of the mesh, the batch, the MFU's peak, recompute,
// FP8 and the pipeline
static void print_run_header(const Args* a, const Comm* comm, const GPTConfig* cfg, const DataParallel* dp, const Pipeline* pipe,
                             const Fp8State* fp8, const DataLoader* loader, int grad_accum, int steps, double peak_tflops, int peak_n) {
    const Mesh* mesh = &comm->mesh;
    printf("model: %s | L=%d NH=%d C=%d maxT=%d V=%d (Vp %d) | %.2fM parameters | %s %s\n", a->model, cfg->num_layers,
           cfg->num_heads, cfg->channels, cfg->max_seq_len, cfg->vocab_size, cfg->padded_vocab_size, dp->lay.num_parameters / 1e6,
           LLM_BUILD_CPU ? "CPU" : (LLM_BUILD_EMU ? "emulated CUDA" : "CUDA"), PRECISION_MODE);
    if (comm->world_size > 1 || dp->zero.shard_optim) {
        printf("processes: %d = dp %d x tp %d x pp %d", comm->world_size, mesh->dp.size, mesh->tp.size, mesh->pp.size);
        if (mesh->cp.size > 1) printf(" x cp %d (%s%s%s)", mesh->cp.size, cp_impl_name(a->cp_impl), a->cp_impl == CP_RING ? ", " : "",
                                      a->cp_impl == CP_RING ? cp_balance_name(a->cp_balance) : "");
        printf(" | %s | MPI start %.0f ms\n", zero_name(dp->zero.level), comm->init_ms);
    }
    printf("batch: B=%d T=%d | %ld tokens per step = %d micro-steps x %d ranks | %d steps | train samples per epoch %lld\n", a->B,
           a->T, a->total_batch, grad_accum, mesh->dp.size, steps, (long long)dataloader_num_samples(loader));
    mfu_print(cfg, a->T, peak_tflops, peak_n, comm->world_size);
    if (a->recompute) printf("activation recompute: %s\n", recompute_name((Recompute)a->recompute));
    if (a->fp8) fp8_print(fp8);
    if (mesh->pp.size > 1) pipeline_print(pipe);
}

// The collectives of the last step (rank 0): the ledger by kind and group, and what the gradient group sent
// beside the ZeRO paper's ring model
static void print_step_traffic(const Comm* comm, const DataParallel* dp, int grad_accum) {
    ledger_print(comm, stdout);
    double sent = ledger_sent_bytes(comm, COMM_ALL_KINDS, GROUP_DP);
    printf("  sent per step %.0f B; ZeRO paper (sec. 7, ring model) %.0f B for the gradients and parameters "
           "(the rest: the loss and norm scalars)\n", sent, paper_sent_bytes(dp, grad_accum));
}
