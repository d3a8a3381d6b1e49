// split_backward_check.h: the split backward of zero-bubble pipeline schedules (llm/model/stage.h:
// stage_backward_input = B, stage_backward_weight = W; Qi et al. 2023) against the unsplit
// stage_backward, on the stages of one rank. Included by test/test_gpt.cu (one process: the CPU build,
// the emulated CUDA builds FP32 and BF16) and test/test_split_backward.cu (tp 2 under mpirun, with and
// without sequence parallelism: each rank against its own unsplit backward).
//
// For each recompute policy, the whole model as one stage and as two stages ([emb, 0, 1) | [1, L,
// head): the activation handed forward, its gradient back), one micro-batch and two in flight: the
// same forwards, then the backward as
//   reference   stage_backward per micro-batch
//   BBWW        B of every micro-batch, then W of every one (B0 B1 W0 W1; with one micro-batch B0 W0)
//   BWBW        B0 W0 B1 W1
// Checked bit for bit, with no tolerance: B and W run the same kernels on the same values as the
// unsplit backward, and each tensor's accumulation over micro-batches keeps its order, so any
// difference is a bug:
//   identity  every gradient unit after the step, and st->dx (the gradient handed to the previous
//             stage, or the embedding's output's) after each micro-batch's B, equal the reference's
//   deferral  (BBWW) after every B and before any W, the weight and bias gradients of every block's
//             four linears are untouched (exactly 0, as dp_step_begin left them) while the
//             reference's are not all 0, and every other gradient already equals the reference's
//             (at the same point: before dp_finish_grads). A W that did nothing fails here and in
//             identity.
//             A moe layer (test/moe_model_check.h runs these checks on a moe model) computes its router's
//             and experts' gradients in B: they are among the "other" tensors, equal after B alone.
//   hooks     B calls grads_ready for the embedding and final units as often as the reference and
//             never for a block unit; W calls it for each block unit as often as the reference, and
//             never calls params or params_done (W must gather nothing under ZeRO-3)
//   traffic   (tp > 1) B + W make the tp group's collectives of the unsplit backward, the same calls
//             and bytes by kind; W's own are only, with sequence parallelism, the all-gathers of QKV's
//             and fc's inputs (2 per block and micro-batch, moved from B: dW needs the gathered
//             input, dinp does not), and without it none
//   memory    split_w_bytes, the bytes B keeps for W per layer and micro-batch as allocated, against
//             the formula written next to it in llm/model/stage.h (each of the <= 8 fields rounded up to 64
//             bytes: + <= 8 * 63 B), and stage_enable_split_backward's whole allocation = that times
//             slots x layers
// Each check goes through `verdict` (test_gpt: one process's check(); the tp test: every rank's).
#pragma once
#include "../llm/model/stage.h"
#include "../llm/parallel/dp.h"
#include "../llm/parallel/dp_step.h"

typedef int (*SplitVerdict)(int ok, const char* what);

// ----------------------------------------------------------------------------
// hooks that count the calls by phase, then call the data-parallel policy's

enum { SPLIT_FWD = 0, SPLIT_REF = 1, SPLIT_B = 2, SPLIT_W = 3, SPLIT_PHASES = 4 };

typedef struct {
    ParamHooks* inner;   // the policy's hooks
    ParamHooks hooks;    // what the stages are given
    int phase;           // set by the driver before each op
    int units;
    int* ready;          // (SPLIT_PHASES, units) grads_ready calls
    int params[SPLIT_PHASES], params_done[SPLIT_PHASES];
} SplitCounter;

static floatX* split_hook_params(void* ctx, int u, int pass) {
    SplitCounter* c = (SplitCounter*)ctx;
    c->params[c->phase]++;
    return c->inner->params(c->inner->ctx, u, pass);
}
static void split_hook_params_done(void* ctx, int u, int pass) {
    SplitCounter* c = (SplitCounter*)ctx;
    c->params_done[c->phase]++;
    c->inner->params_done(c->inner->ctx, u, pass);
}
static floatX* split_hook_grads(void* ctx, int u) {
    SplitCounter* c = (SplitCounter*)ctx;
    return c->inner->grads(c->inner->ctx, u);
}
static void split_hook_grads_ready(void* ctx, int u) {
    SplitCounter* c = (SplitCounter*)ctx;
    c->ready[c->phase * c->units + u]++;
    c->inner->grads_ready(c->inner->ctx, u);
}
static int split_hook_agree_token(void* ctx, int token) {
    SplitCounter* c = (SplitCounter*)ctx;
    return c->inner->agree_token(c->inner->ctx, token);
}

static void split_counter_init(SplitCounter* c, ParamHooks* inner, int units) {
    memset(c, 0, sizeof(*c));
    c->inner = inner;
    c->units = units;
    c->ready = (int*)mallocCheck((size_t)SPLIT_PHASES * units * sizeof(int));
    memset(c->ready, 0, (size_t)SPLIT_PHASES * units * sizeof(int));
    ParamHooks h = {c, split_hook_params, split_hook_params_done, split_hook_grads, split_hook_grads_ready, split_hook_agree_token};
    c->hooks = h;
}

// ----------------------------------------------------------------------------
// one step's backward in one order

enum { ORDER_REF = 0, ORDER_BBWW = 1, ORDER_BWBW = 2 };
static const char* split_order_name(int order, int M) {
    if (order == ORDER_REF) return "stage_backward";
    if (M == 1) return "B0 W0";
    return order == ORDER_BBWW ? "B0 B1 W0 W1" : "B0 W0 B1 W1";
}

typedef struct {
    unsigned char* grads;    // (packed_size floatX) after the step (dp_finish_grads)
    unsigned char* mid;      // (packed_size floatX) reference: before dp_finish_grads; BBWW: after every B, before any W
    unsigned char* dx;       // (M, stages, R*C floatX) each stage's st->dx after each micro-batch's backward or B
    size_t dx_bytes;         // of one stage's dx
    SplitCounter count;
    long long tp_calls[SPLIT_PHASES][COMM_NUM_KINDS];  // the tp group's collectives during each phase
    double tp_bytes[SPLIT_PHASES][COMM_NUM_KINDS];     // and their payload bytes
    int sp;                  // sequence parallelism
} SplitRun;

// one op of the backward, its tp collectives added to its phase
#define SPLIT_OP(run, dp, ph, op) do {                                                          \
        CommLedger before_ = (dp)->comm->ledger;                                               \
        (run)->count.phase = (ph);                                                             \
        op;                                                                                    \
        for (int k_ = 0; k_ < COMM_NUM_KINDS; k_++) {                                          \
            (run)->tp_calls[ph][k_] += (dp)->comm->ledger.calls[k_][GROUP_TP] - before_.calls[k_][GROUP_TP]; \
            (run)->tp_bytes[ph][k_] += (dp)->comm->ledger.payload_bytes[k_][GROUP_TP] - before_.payload_bytes[k_][GROUP_TP]; \
        }                                                                                      \
    } while (0)

static void split_run_free(SplitRun* run) {
    free(run->grads); free(run->mid); free(run->dx); free(run->count.ready);
    memset(run, 0, sizeof(*run));
}

static void split_grads_to_host(DataParallel* dp, unsigned char* out) {
    copy_to_host(out, dp->grads, dp->lay.packed_size * sizeof(floatX));
}

// The forwards of M micro-batches (tokens x, targets y: (M, B*T) host), then the backward in `order`,
// on one stage (two = 0) or two, under policy r, with the policy's hooks counted. DDP (stage 0) only:
// its gradients are dp->grads.
static void split_run(SplitRun* run, DataParallel* dp, TPGroup tp, int two, int M, int order, Recompute r,
                      const int* x, const int* y, int B, int T) {
    GPTConfig cfg = dp->lay.cfg;
    int BT = B * T, ns = two ? 2 : 1;
    memset(run, 0, sizeof(*run));
    split_counter_init(&run->count, &dp->hooks, num_units(cfg));
    SplitCounter* sc = &run->count;
    run->sp = tp.sequence_parallel;
    StageRange ra = {0, two ? 1 : cfg.num_layers, 1, !two}, rb = {1, cfg.num_layers, 0, 1};
    Stage st[2];  // st[0]: the embedding's stage, st[1]: the head's (two stages)
    stage_init(&st[0], &dp->lay, &sc->hooks, tp, ra, B, T, r, M);
    if (two) stage_init(&st[1], &dp->lay, &sc->hooks, tp, rb, B, T, r, M);
    if (order != ORDER_REF) for (int k = 0; k < ns; k++) stage_enable_split_backward(&st[k]);
    Stage* head = &st[ns - 1];
    size_t packed = dp->lay.packed_size * sizeof(floatX);
    run->dx_bytes = (size_t)tp_rows(&tp, BT) * cfg.channels * sizeof(floatX);
    run->grads = (unsigned char*)mallocCheck(packed);
    run->mid = (unsigned char*)mallocCheck(packed);
    run->dx = (unsigned char*)mallocCheck((size_t)M * ns * run->dx_bytes);
    float dloss = 1.0f / (float)(BT * M);

    dp_step_begin(dp);
    sc->phase = SPLIT_FWD;
    for (int m = 0; m < M; m++) {
        dp_micro_begin(dp, m, M);
        // (dloss on both stages, as the pipeline gives it: a moe layer's aux and z gradients scale by it)
        stage_forward(&st[0], m, x + (size_t)m * BT, NULL, two ? NULL : y + (size_t)m * BT, dloss);
        if (two) stage_forward(&st[1], m, NULL, stage_output(&st[0], m), y + (size_t)m * BT, dloss);
    }
    // the backward of micro-batch m, head's stage first; each stage's dx kept (stage k at index ns-1-k)
    for (int m = 0; m < M; m++) {
        dp_micro_begin(dp, m, M);
        for (int k = ns - 1; k >= 0; k--) {
            const floatX* dx_out = k == ns - 1 ? NULL : st[k + 1].dx;
            if (order == ORDER_REF) SPLIT_OP(run, dp, SPLIT_REF, stage_backward(&st[k], m, dx_out));
            else SPLIT_OP(run, dp, SPLIT_B, stage_backward_input(&st[k], m, dx_out));
            copy_to_host(run->dx + ((size_t)m * ns + (ns - 1 - k)) * run->dx_bytes, st[k].dx, run->dx_bytes);
        }
        if (order == ORDER_BWBW) {
            for (int k = ns - 1; k >= 0; k--) SPLIT_OP(run, dp, SPLIT_W, stage_backward_weight(&st[k], m));
        }
    }
    if (order != ORDER_BWBW) split_grads_to_host(dp, run->mid);  // every B (or backward) done, no W yet
    if (order == ORDER_BBWW) {
        for (int m = 0; m < M; m++) {
            dp_micro_begin(dp, m, M);
            for (int k = ns - 1; k >= 0; k--) SPLIT_OP(run, dp, SPLIT_W, stage_backward_weight(&st[k], m));
        }
    }
    sc->phase = SPLIT_FWD;
    dp_finish_grads(dp);
    split_grads_to_host(dp, run->grads);
    stage_take_loss(head);
    for (int k = 0; k < ns; k++) stage_free(&st[k]);
}

// ----------------------------------------------------------------------------
// the checks

static int split_is_linear(int t) {
    return t == T_QKVW || t == T_QKVB || t == T_ATTPROJW || t == T_ATTPROJB || t == T_FCW || t == T_FCB ||
           t == T_FCPROJW || t == T_FCPROJB;
}

// units and values of two packed gradient buffers that differ (bitwise)
static void split_diff(const ParamLayout* lay, const unsigned char* a, const unsigned char* b, size_t* units, size_t* values) {
    *units = *values = 0;
    for (int u = 0; u < lay->num_units; u++) {
        size_t d = 0;
        for (size_t i = lay->units[u].start; i < lay->units[u].start + lay->units[u].n; i++) {
            d += memcmp(a + i * sizeof(floatX), b + i * sizeof(floatX), sizeof(floatX)) != 0;
        }
        *units += d > 0;
        *values += d;
    }
}

static void split_compare(SplitVerdict verdict, const char* tag, DataParallel* dp, const SplitRun* ref, const SplitRun* run,
                          int two, int M, int order) {
    const ParamLayout* lay = &dp->lay;
    int ns = two ? 2 : 1, L = lay->cfg.num_layers, U = lay->num_units;
    const char* what = two ? "two stages" : "one stage";
    char line[600];
    // identity
    size_t du, dv, ddx = 0;
    split_diff(lay, run->grads, ref->grads, &du, &dv);
    for (size_t i = 0; i < (size_t)M * ns; i++) ddx += memcmp(run->dx + i * run->dx_bytes, ref->dx + i * ref->dx_bytes, ref->dx_bytes) != 0;
    snprintf(line, sizeof(line), "%s, %s, %d micro-batch%s, %s: all %d gradient units and the %d dx bit-identical to "
             "stage_backward (%zu units, %zu values, %zu dx differ)", tag, what, M, M > 1 ? "es" : "",
             split_order_name(order, M), U, M * ns, du, dv, ddx);
    verdict(du == 0 && ddx == 0, line);
    // deferral: after the Bs alone
    if (order == ORDER_BBWW) {
        size_t lin_touched = 0, lin_ref_nonzero = 0, other_diff = 0, n_lin = 0, n_other = 0;
        int ts[NUM_TENSORS];
        for (int u = 0; u < U; u++) {
            int k = unit_tensors(lay, u, ts), block = u != UNIT_EMBED && u != unit_final(lay->cfg);
            for (int j = 0; j < k; j++) {
                int t = ts[j];
                size_t a = lay->units[u].start + lay->unit_offset[t], e = a + lay->layer_size[t];
                if (block && split_is_linear(t)) {
                    n_lin++;
                    const unsigned char zero[sizeof(floatX)] = {0};  // +0 in FP32 and BF16
                    for (size_t i = a; i < e; i++) {
                        lin_touched += memcmp(run->mid + i * sizeof(floatX), zero, sizeof(floatX)) != 0;
                        lin_ref_nonzero += memcmp(ref->mid + i * sizeof(floatX), zero, sizeof(floatX)) != 0;
                    }
                } else {
                    n_other++;
                    other_diff += memcmp(run->mid + a * sizeof(floatX), ref->mid + a * sizeof(floatX), (e - a) * sizeof(floatX)) != 0;
                }
            }
        }
        snprintf(line, sizeof(line), "%s, %s, %d micro-batch%s, B alone defers: after every B, before W, the %zu linear "
                 "weight/bias tensors of the %d blocks untouched (%zu values not +0; the reference's: %zu values not +0), "
                 "the other %zu tensors bit-identical to the reference's (%zu differ)", tag, what, M, M > 1 ? "es" : "",
                 n_lin, L, lin_touched, lin_ref_nonzero, n_other, other_diff);
        verdict(lin_touched == 0 && lin_ref_nonzero > 0 && other_diff == 0, line);
    }
    // hooks
    const SplitCounter* c = &run->count;
    const SplitCounter* rc = &ref->count;
    int e = UNIT_EMBED, f = unit_final(lay->cfg), bad = 0, blocks_b = 0, blocks_w_min = 1 << 30, blocks_w_max = 0;
    int ref_blocks_min = 1 << 30;
    for (int u = 0; u < U; u++) {
        int rr = rc->ready[SPLIT_REF * U + u], b = c->ready[SPLIT_B * U + u], w = c->ready[SPLIT_W * U + u];
        if (u == e || u == f) {
            bad += b != rr || w != 0 || rr < 1;
        } else {
            bad += b != 0 || w != rr;
            blocks_b += b;
            if (w < blocks_w_min) blocks_w_min = w;
            if (w > blocks_w_max) blocks_w_max = w;
            if (rr < ref_blocks_min) ref_blocks_min = rr;
        }
    }
    bad += ref_blocks_min < M;
    snprintf(line, sizeof(line), "%s, %s, %d micro-batch%s, %s, hooks: grads_ready in B: embed %d, final %d (reference "
             "%d, %d), blocks %d; in W: each block %d..%d (reference %d), embed/final %d; params/params_done in W: %d/%d",
             tag, what, M, M > 1 ? "es" : "", split_order_name(order, M), c->ready[SPLIT_B * U + e],
             c->ready[SPLIT_B * U + f], rc->ready[SPLIT_REF * U + e], rc->ready[SPLIT_REF * U + f], blocks_b, blocks_w_min,
             blocks_w_max, ref_blocks_min, c->ready[SPLIT_W * U + e] + c->ready[SPLIT_W * U + f], c->params[SPLIT_W],
             c->params_done[SPLIT_W]);
    verdict(bad == 0 && c->params[SPLIT_W] == 0 && c->params_done[SPLIT_W] == 0, line);
    // the tp group's traffic (tensor parallelism): B + W move what the unsplit backward moves
    if (dp->comm->group_size[GROUP_TP] > 1) {
        // W's own: with sequence parallelism the all-gathers of QKV's and fc's inputs (2 per block and
        // micro-batch), nothing else; without it nothing
        int sp = run->sp, same = 1, n = 0;
        long long w_calls = 0;
        for (int k = 0; k < COMM_NUM_KINDS; k++) w_calls += run->tp_calls[SPLIT_W][k];
        same &= w_calls == run->tp_calls[SPLIT_W][COMM_ALL_GATHER] && w_calls == (sp ? 2LL * L * M : 0);
        n += snprintf(line + n, sizeof(line) - n, "%s, %s, %d micro-batch%s, %s, tp traffic: B + W =", tag, what, M,
                      M > 1 ? "es" : "", split_order_name(order, M));
        for (int k = 0; k < COMM_NUM_KINDS; k++) {
            long long cr = ref->tp_calls[SPLIT_REF][k], cb = run->tp_calls[SPLIT_B][k], cw = run->tp_calls[SPLIT_W][k];
            double br = ref->tp_bytes[SPLIT_REF][k], bb = run->tp_bytes[SPLIT_B][k], bw = run->tp_bytes[SPLIT_W][k];
            same &= cb + cw == cr && bb + bw == br;
            if (cr + cb + cw > 0 && n < (int)sizeof(line)) {
                n += snprintf(line + n, sizeof(line) - n, " %s %lld + %lld calls (%.0f + %.0f B)", comm_kind_name(k), cb, cw, bb, bw);
            }
        }
        if (n < (int)sizeof(line)) {
            snprintf(line + n, sizeof(line) - n, ", as stage_backward's; W's: %lld all-gathers (expected %d)", w_calls,
                     sp ? 2 * L * M : 0);
        }
        verdict(same, line);
    }
}

// split_w_bytes against llm/model/stage.h's formula, and the whole allocation against it
static void split_memory_check(SplitVerdict verdict, const char* tag, DataParallel* dp, TPGroup tp, Recompute r, int B, int T) {
    GPTConfig cfg = dp->lay.cfg;
    int slots = 2;
    Stage st;
    stage_init(&st, &dp->lay, &dp->hooks, tp, stage_range_all(cfg), B, T, r, slots);
    size_t before = mem_live(MEM_ACTIVATIONS);
    stage_enable_split_backward(&st);
    size_t total = mem_live(MEM_ACTIVATIONS) - before;
    double b = sizeof(floatX), BT = (double)B * T, C = cfg.channels, tp_size = tp.size, R = tp.sequence_parallel ? BT / tp_size : BT;
    // per layer: a dense layer keeps the four linears' output gradients and, as the policy recomputes them, their
    // inputs ln1, atty, ln2 (and fch_gelu under full recompute); a moe layer only those of qkv and attproj (its
    // router's and experts' gradients are all B's: llm/model/block.h)
    double formula[64] = {0.0}, sum = 0.0, slack = 0.0;
    int fields0 = 0;
    for (int l = 0; l < cfg.num_layers && l < 64; l++) {
        int moe = layer_is_moe(cfg, l);
        double douts = moe ? BT * (3 * C / tp_size + C) : BT * (3 * C / tp_size + C + 4 * C / tp_size + C);
        double inputs = r == RECOMPUTE_NONE ? 0.0 : R * C + BT * C / tp_size;
        if (r != RECOMPUTE_NONE && !moe) inputs += R * C + (r == RECOMPUTE_FULL ? BT * 4 * C / tp_size : 0.0);
        int fields = (moe ? 2 : 4) + (r == RECOMPUTE_NONE ? 0 : (moe ? 2 : (r == RECOMPUTE_SELECTIVE ? 3 : 4)));
        formula[l] = b * (douts + inputs);
        sum += formula[l];
        slack += fields * 63;
        if (l == 0) fields0 = fields;
    }
    double measured = (double)st.split_w_bytes;  // (layer 0's)
    char line[600];
    snprintf(line, sizeof(line), "%s, --recompute %s: B keeps %.0f B per micro-batch for W in layer 0 (allocated), formula "
             "%.0f B (+ <= %d B of alignment); all %d slots x %d layers: %zu B, formula %d x %.0f B (+ <= %.0f)", tag,
             recompute_name(r), measured, formula[0], fields0 * 63, slots, cfg.num_layers, total, slots, sum, slots * slack);
    verdict(formula[0] <= measured && measured <= formula[0] + fields0 * 63 && (double)total >= slots * sum &&
            (double)total <= slots * (sum + slack), line);
    stage_free(&st);
}

// everything above, for each recompute policy. x, y: (2, B*T) host, two micro-batches' tokens and targets
static void split_backward_checks(SplitVerdict verdict, const char* tag, DataParallel* dp, TPGroup tp, const int* x,
                                  const int* y, int B, int T) {
    for (int ri = RECOMPUTE_NONE; ri <= RECOMPUTE_FULL; ri++) {
        Recompute r = (Recompute)ri;
        char rtag[200];
        snprintf(rtag, sizeof(rtag), "%s --recompute %s", tag, recompute_name(r));
        split_memory_check(verdict, tag, dp, tp, r, B, T);
        for (int two = 0; two <= 1; two++) {
            for (int M = 1; M <= 2; M++) {
                SplitRun ref, run;
                split_run(&ref, dp, tp, two, M, ORDER_REF, r, x, y, B, T);
                for (int order = ORDER_BBWW; order <= (M == 1 ? ORDER_BBWW : ORDER_BWBW); order++) {
                    split_run(&run, dp, tp, two, M, order, r, x, y, B, T);
                    split_compare(verdict, rtag, dp, &ref, &run, two, M, order);
                    split_run_free(&run);
                }
                split_run_free(&ref);
            }
        }
    }
}
