// moe_model_check.h: the whole mixture-of-experts model's gradients (llm/model/stage.h running llm/model/moe.h in
// block.h's MLP place) against central finite differences of the loss the trainer minimises on one micro-batch:
// the cross-entropy's mean + the moe layers' aux and z losses (with their coefficients). Included by
// test/test_gpt.cu, run in its FP32 builds (a finite difference needs FP32's resolution; the emulated FP32 build
// runs the K = 1 cases only, the CPU build all four).
//
// Tiny models (L = 2, C = 16, NH = 2, V = 64, B x T = 2 x 8 = 16 tokens, E = 4), four cases: K = 1 and K = 2,
// each without drops (capacity factor 0) and with drops (a capacity below the tokens' share: some
// assignments dropped, checked > 0), the last with moe_every = 2 (layer 0 moe, layer 1 dense). The
// coefficients are large (aux 0.3, z 0.05) so that both losses' router gradients weigh in the check.
//
// The loss is piecewise smooth: a routing decision (a token's K-th chosen expert against its best unchosen,
// an expert's lowest kept assignment against its highest dropped) flips at a tie. The parameters are drawn
// (the router at N(0, 0.5)) until every decision of both layers is >= 0.02 in probability from its tie, and
// each perturbed forward must route exactly as the unperturbed one (experts and kept rows identical), else
// the check fails: it compares smooth pieces only.
//
// Then the split backward's checks (test/split_backward_check.h: B then W = the unsplit backward, bit for bit)
// on a moe model (layer 0 moe, layer 1 dense).
//
// Per tensor: a random unit direction v over its values; the analytic directional derivative g . v
// against (loss(p + h v) - loss(p - h v)) / 2h with h = 1e-2 (quartered, at most 3 times, while a perturbed
// forward routes differently); |fd - g.v| <= 2e-3 + 1e-2 |g.v| (FP32 forwards: the loss's rounding ~1e-6
// over 2h, the truncation ~h^2).
#pragma once
#include "../llm/model/stage.h"
#include "../llm/parallel/dp.h"
#include "../llm/parallel/dp_step.h"
#include "../llm/parallel/dp_export.h"

typedef struct {
    GPTConfig c;
    DataParallel dp;
    Stage st;
    int B, T;
    int *x, *y;          // (B, T) host
    size_t n;            // Psi
    int* route;          // (moe layers, N K, 2) the base forward's experts and kept rows
    int* route_now;      // the same, of the last forward
} MoEModel;

// the routing decisions of the last forward (expert and kept row of every assignment) into out
static void moe_model_routes(MoEModel* m, int* out) {
    int N = m->B * m->T, K = m->c.top_k, i = 0;
    for (int l = 0; l < m->c.num_layers; l++) {
        if (!layer_is_moe(m->c, l)) continue;
        const MoERouting* r = &m->st.slots[0].moe[l].route;
        copy_to_host(out + (size_t)i * 2 * N * K, r->expert, (size_t)N * K * sizeof(int));
        copy_to_host(out + (size_t)i * 2 * N * K + (size_t)N * K, r->assign_row, (size_t)N * K * sizeof(int));
        i++;
    }
}

// the smallest gap in probability between a routing decision and its tie, over the moe layers' last forward
static double moe_model_margin(MoEModel* m) {
    int N = m->B * m->T, E = m->c.num_experts, K = m->c.top_k;
    float* probs = (float*)mallocCheck((size_t)N * E * sizeof(float));
    int* ex = (int*)mallocCheck((size_t)N * K * sizeof(int));
    int* row = (int*)mallocCheck((size_t)N * K * sizeof(int));
    double mg = INFINITY;
    for (int l = 0; l < m->c.num_layers; l++) {
        if (!layer_is_moe(m->c, l)) continue;
        const MoERouting* r = &m->st.slots[0].moe[l].route;
        copy_to_host(probs, r->probs, (size_t)N * E * sizeof(float));
        copy_to_host(ex, r->expert, (size_t)N * K * sizeof(int));
        copy_to_host(row, r->assign_row, (size_t)N * K * sizeof(int));
        for (int t = 0; t < N; t++) {
            double worst_in = INFINITY, best_out = -INFINITY;
            for (int e = 0; e < E; e++) {
                int in = 0;
                for (int k = 0; k < K; k++) in |= ex[t * K + k] == e;
                if (in) worst_in = fmin(worst_in, probs[t * E + e]);
                else best_out = fmax(best_out, probs[t * E + e]);
            }
            mg = fmin(mg, worst_in - best_out);
        }
        for (int e = 0; e < E; e++) {
            double kept = INFINITY, dropped = -INFINITY;
            for (int a = 0; a < N * K; a++) {
                if (ex[a] != e) continue;
                double p = probs[(a / K) * E + e];
                if (row[a] >= 0) kept = fmin(kept, p);
                else dropped = fmax(dropped, p);
            }
            mg = fmin(mg, kept - dropped);
        }
    }
    free(probs); free(ex); free(row);
    return mg;
}

// the trainer's loss of one micro-batch at params (checkpoint order): the cross-entropy's mean + aux + z;
// with grads != NULL also its gradient (checkpoint order; else the forward alone); dropped (if not NULL): the
// assignments dropped
static double moe_model_loss(MoEModel* m, const float* params, float* grads, long long* dropped) {
    dp_import_params(&m->dp, params, 0);
    float dloss = 1.0f / (float)(m->B * m->T);
    dp_step_begin(&m->dp);
    dp_micro_begin(&m->dp, 0, 1);
    stage_forward(&m->st, 0, m->x, NULL, m->y, dloss);
    double ce = stage_take_loss(&m->st), moe[2];
    size_t nc = (size_t)m->c.num_layers * 2 * m->c.num_experts;
    long long* counts = (long long*)mallocCheck(nc * sizeof(long long));
    memset(counts, 0, nc * sizeof(long long));
    stage_take_moe(&m->st, moe, counts);
    if (dropped != NULL) {
        *dropped = 0;
        for (int l = 0; l < m->c.num_layers; l++)
            for (int e = 0; e < m->c.num_experts; e++) *dropped += counts[((size_t)l * 2 + 1) * m->c.num_experts + e];
    }
    free(counts);
    moe_model_routes(m, m->route_now);
    if (grads != NULL) {
        stage_backward(&m->st, 0, NULL);
        dp_finish_grads(&m->dp);
        float* packed = (float*)mallocCheck(m->dp.lay.packed_size * sizeof(float));
        copy_to_host_float(packed, m->dp.grads, m->dp.lay.packed_size);
        layout_to_checkpoint(&m->dp.lay, packed, grads);
        free(packed);
    }
    return ce + moe[0] + moe[1];
}

static void moe_model_case(SplitVerdict verdict, Comm* comm, int K, float F, int every) {
    MoEModel m;
    memset(&m, 0, sizeof(m));
    GPTConfig c = {16, 64, 128, 2, 2, 16, 4, K, every};
    m.c = c; m.B = 2; m.T = 8;
    int N = m.B * m.T, moe_layers = moe_layers_before(c, c.num_layers);
    dp_init(&m.dp, comm, c, NULL);
    m.n = m.dp.lay.num_parameters;
    stage_init(&m.st, &m.dp.lay, &m.dp.hooks, tp_group(comm, 0), stage_range_all(c), m.B, m.T, RECOMPUTE_NONE, 1);
    stage_set_moe(&m.st, F, 0.3f, 0.05f);
    m.x = (int*)mallocCheck((size_t)N * sizeof(int));
    m.y = (int*)mallocCheck((size_t)N * sizeof(int));
    size_t nr = (size_t)moe_layers * 2 * N * K;
    m.route = (int*)mallocCheck(nr * sizeof(int));
    m.route_now = (int*)mallocCheck(nr * sizeof(int));
    float* p = (float*)mallocCheck(m.n * sizeof(float));
    float* q = (float*)mallocCheck(m.n * sizeof(float));
    float* g = (float*)mallocCheck(m.n * sizeof(float));
    // parameters and tokens drawn until every routing decision is >= 0.02 from its tie
    Rng rng;
    rng_init(&rng, 1234u + (unsigned)(K * 100 + every * 10) + (F > 0.0f));
    double margin = 0.0;
    int draws = 0;
    long long dropped = 0;
    for (; draws < 2000 && margin < 0.02; draws++) {
        init_parameters(c, 7u + (uint64_t)draws, p);
        for (int l = 0; l < c.num_layers; l++) {
            if (!layer_is_moe(c, l)) continue;
            int u = unit_of_layer(c, l);
            rng_normal(&rng, p + unit_tensor_ckpt_offset(&m.dp.lay, u, T_ROUTER), tensor_layer_size(c, T_ROUTER), 0.0f, 0.5f);
        }
        for (int i = 0; i < N; i++) { m.x[i] = (int)(rng_u64(&rng) % (uint64_t)c.vocab_size); m.y[i] = (int)(rng_u64(&rng) % (uint64_t)c.vocab_size); }
        double loss = moe_model_loss(&m, p, NULL, &dropped);
        (void)loss;
        margin = moe_model_margin(&m);
    }
    char what[160];
    snprintf(what, sizeof(what), "moe model K=%d F=%g moe_every=%d (%lld of %d assignments dropped)", K, F, every, dropped,
             moe_layers * N * K);
    char line[400];
    snprintf(line, sizeof(line), "%s: parameters with every routing decision >= 0.02 from a tie after %d draws (margin %.3g); %s",
             what, draws, margin, F == 0.0f ? "no drops" : "drops happen");
    verdict(margin >= 0.02 && (F == 0.0f ? dropped == 0 : dropped > 0), line);
    double l0 = moe_model_loss(&m, p, g, NULL);
    memcpy(m.route, m.route_now, nr * sizeof(int));
    float* v = (float*)mallocCheck(m.n * sizeof(float));
    for (int t = 0; t < NUM_TENSORS; t++) {
        size_t off = m.dp.lay.ckpt_offset[t], n = tensor_size(c, t);
        if (n == 0) continue;
        if (t == T_WTE) n = (size_t)c.vocab_size * c.channels;  // (the padded rows: no gradient, no effect)
        rng_normal(&rng, v, n, 0.0f, 1.0f);
        double norm = 0.0, gv = 0.0;
        for (size_t i = 0; i < n; i++) norm += (double)v[i] * v[i];
        norm = sqrt(norm);
        for (size_t i = 0; i < n; i++) { v[i] = (float)(v[i] / norm); gv += (double)g[off + i] * v[i]; }
        // h = 1e-2, quartered while a perturbed forward routes differently (the residual-stream biases move every
        // token's LN2 input at once: a step that flips no decision is smaller there)
        double lp = 0.0, lm = 0.0, h = 1e-2;
        int flips = 1;
        for (int tries = 0; tries < 4 && flips; tries++, h = flips ? h / 4 : h) {
            flips = 0;
            memcpy(q, p, m.n * sizeof(float));
            for (size_t i = 0; i < n; i++) q[off + i] = (float)(p[off + i] + h * v[i]);
            lp = moe_model_loss(&m, q, NULL, NULL);
            flips += memcmp(m.route_now, m.route, nr * sizeof(int)) != 0;
            for (size_t i = 0; i < n; i++) q[off + i] = (float)(p[off + i] - h * v[i]);
            lm = moe_model_loss(&m, q, NULL, NULL);
            flips += memcmp(m.route_now, m.route, nr * sizeof(int)) != 0;
        }
        double fd = (lp - lm) / (2.0 * h), tol = 2e-3 + 1e-2 * fabs(gv);
        snprintf(line, sizeof(line), "%s: d loss / d %s along a unit direction: analytic %.6f, fd %.6f (|diff| %.2g, tol %.2g; "
                 "h %.2g; loss %.5f; routing unchanged: %s)", what, TENSORS[t].name, gv, fd, fabs(fd - gv), tol, h, l0,
                 flips ? "no" : "yes");
        verdict(fabs(fd - gv) <= tol && !flips, line);
    }
    free(v); free(p); free(q); free(g); free(m.x); free(m.y); free(m.route); free(m.route_now);
    stage_free(&m.st);
    dp_free(&m.dp);
}

// the split backward (test/split_backward_check.h) on a moe model: K = 2, capacity factor 1 (drops), layer 0
// moe, layer 1 dense (moe_every 2), so both kinds of block are split
static void moe_model_split_checks(SplitVerdict verdict, Comm* comm) {
    GPTConfig c = {16, 64, 128, 2, 2, 16, 4, 2, 2};
    int B = 2, T = 8, BT = B * T;
    DataParallel dp;
    dp_init(&dp, comm, c, NULL);
    float* p = (float*)mallocCheck(dp.lay.num_parameters * sizeof(float));
    init_parameters(c, 11u, p);
    dp_import_params(&dp, p, 0);
    int* x2 = (int*)mallocCheck(2 * (size_t)BT * sizeof(int));
    int* y2 = (int*)mallocCheck(2 * (size_t)BT * sizeof(int));
    Rng rng;
    rng_init(&rng, 99u);
    for (int i = 0; i < 2 * BT; i++) { x2[i] = (int)(rng_u64(&rng) % 64u); y2[i] = (int)(rng_u64(&rng) % 64u); }
    split_backward_checks(verdict, "moe model split backward", &dp, tp_group(comm, 0), x2, y2, B, T);
    free(x2); free(y2); free(p);
    dp_free(&dp);
}

static void moe_model_checks(SplitVerdict verdict, Comm* comm) {
    moe_model_split_checks(verdict, comm);
    moe_model_case(verdict, comm, 1, 0.0f, 1);
    moe_model_case(verdict, comm, 1, 1.0f, 1);
    if (LLM_BUILD_EMU) return;  // (the emulated build: K = 1 alone; K = 2's draws away from ties take it minutes)
    moe_model_case(verdict, comm, 2, 0.0f, 1);
    moe_model_case(verdict, comm, 2, 0.75f, 2);
}
