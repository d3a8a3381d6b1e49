// moe_balance.h: DeepSeek-V3's auxiliary-loss-free load balancing (DeepSeek-AI 2024, sec. 2.1.2), the trainer's
// side of it (--expert-bias-rate R, docs/moe.md "The bias method"). Per moe layer a selection bias b over the E
// experts, FP32, zero at the start, which the router adds to the probabilities only to choose the top K, never to
// the gates (llm/ops/moe_router.cuh, moe_route_forward's bias). After each optimizer step, for each moe layer:
//     b_e += R * sign(mean_e(load) - load_e),
// load_e the step's routed assignments to expert e (chosen by the top-K, before capacity drops, as DeepSeek-V3
// counts selections), summed over the micro-batches and over every rank that routes (train_gpt.cu's
// moe_step_counts: the dp (dp x cp) and pp groups, and tp under sequence parallelism), so every rank holds the same
// bias. The sign is taken on integers (E * load_e against the layer's total): no rounding decides it. The bias
// is training state: checkpoints save it (llm/ckpt/checkpoint.h, header[41]) and a resume or a rollback puts it
// back (moe_balance_set). Gradients never reach it: it is no tensor of the table.
#pragma once
#include "../core/common.h"
#include "../core/context.h"
#include "../core/device.h"
#include "../model/tensors.h"

typedef struct {
    GPTConfig cfg;
    float rate;   // R (--expert-bias-rate); 0: the bias does not move
    int active;   // the routers read the bias (R > 0, or a checkpoint brought one); 0: they get NULL (no bias)
    float* host;  // (L, E) FP32, the rows of dense layers stay 0
    float* dev;   // (L, E) FP32 device copy, what the routers and the sampler read; NULL for a dense model
} MoeBalance;

// the bias's floats for config c: (L, E), 0 for a dense model
static inline size_t moe_balance_floats(GPTConfig c) { return c.num_experts > 0 ? (size_t)c.num_layers * c.num_experts : 0; }

// zero bias for the moe layers of c (a dense model: nothing held, never active)
static void moe_balance_init(MoeBalance* b, GPTConfig c, float rate) {
    memset(b, 0, sizeof(*b));
    b->cfg = c;
    b->rate = rate;
    if (c.num_experts == 0) return;
    size_t n = moe_balance_floats(c);
    b->host = (float*)mallocCheck(n * sizeof(float));
    memset(b->host, 0, n * sizeof(float));
    b->dev = (float*)device_malloc(n * sizeof(float), MEM_WORKSPACE);
    copy_to_device(b->dev, b->host, n * sizeof(float));
    b->active = rate > 0.0f;
}

// the bias of moe layer l for its router, or NULL (inactive, or l a dense layer)
static const float* moe_balance_layer(const MoeBalance* b, int l) {
    if (!b->active || !layer_is_moe(b->cfg, l)) return NULL;
    return b->dev + (size_t)l * b->cfg.num_experts;
}

// a checkpoint's bias (n floats, (L, E)) into the run; n = 0: the checkpoint had none (zero bias, active only
// with R > 0). The caller checked n (state_header_read).
static void moe_balance_set(MoeBalance* b, const float* bias, size_t n) {
    if (b->host == NULL) return;
    size_t all = moe_balance_floats(b->cfg);
    if (n == all) memcpy(b->host, bias, all * sizeof(float));
    else memset(b->host, 0, all * sizeof(float));
    copy_to_device(b->dev, b->host, all * sizeof(float));
    b->active = b->rate > 0.0f || n == all;
}

// the floats a checkpoint saves: (L, E) when active, else 0 (none)
static size_t moe_balance_saved(const MoeBalance* b) { return b->active ? moe_balance_floats(b->cfg) : 0; }

// After an optimizer step: counts (L, 2, E) FP32, the step's routed (d = 0) and dropped (d = 1) assignments per
// layer and expert, summed over every rank that routes (the same on every rank). Moves each moe layer's bias by
// R * sign(mean load - load), load = the routed counts; then the device copy.
static void moe_balance_step(MoeBalance* b, const float* counts) {
    if (!b->active || b->rate == 0.0f) return;
    int L = b->cfg.num_layers, E = b->cfg.num_experts;
    for (int l = 0; l < L; l++) {
        if (!layer_is_moe(b->cfg, l)) continue;
        const float* load = counts + (size_t)l * 2 * E;  // (E) routed
        long long total = 0;
        for (int e = 0; e < E; e++) total += (long long)load[e];
        for (int e = 0; e < E; e++) {
            long long scaled = (long long)E * (long long)load[e];  // E * load_e against E * mean = total
            int sign = (total > scaled) - (total < scaled);
            b->host[(size_t)l * E + e] += b->rate * (float)sign;
        }
    }
    copy_to_device(b->dev, b->host, moe_balance_floats(b->cfg) * sizeof(float));
}

static void moe_balance_free(MoeBalance* b) {
    free(b->host);
    if (b->dev) device_free(b->dev);
    memset(b, 0, sizeof(*b));
}
