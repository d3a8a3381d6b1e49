// optimizer.h: the optimizer step's pieces that do not depend on how the model is laid out over
// ranks: the learning-rate schedule (linear warm-up, then cosine decay to a final fraction, as in
// GPT-3's appendix B), global-norm gradient clipping (Pascanu et al. 2013), and AdamW's state
// (Loshchilov & Hutter 2019): the moments m, v and, when the parameters are BF16, the FP32 master
// weights. llm/parallel/dp.h runs the update (llm/ops/adamw.cuh) on what this rank owns: everything under DDP, its
// blocks under ZeRO.
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "adamw.cuh"

typedef struct {
    float lr;             // peak learning rate
    float lr_final_frac;  // the cosine decays to lr * lr_final_frac at the last step
    int warmup_steps;     // linear warm-up from lr/warmup to lr
    int total_steps;
    float beta1, beta2, eps;
    float weight_decay;
    float grad_clip;      // clip the global gradient norm to this (0 = no clipping)
} OptimConfig;

// learning rate of optimizer step `step` (0-based)
static float lr_schedule(const OptimConfig* oc, int step) {
    if (step < oc->warmup_steps) return oc->lr * (float)(step + 1) / (float)oc->warmup_steps;
    if (oc->total_steps <= oc->warmup_steps) return oc->lr;
    float ratio = (float)(step - oc->warmup_steps) / (float)(oc->total_steps - oc->warmup_steps);
    if (ratio > 1.0f) ratio = 1.0f;
    float coeff = 0.5f * (1.0f + cosf((float)M_PI * ratio));  // 1 -> 0
    float lr_final = oc->lr * oc->lr_final_frac;
    return lr_final + coeff * (oc->lr - lr_final);
}

// the factor of global-norm clipping: min(1, grad_clip / grad_norm), 1 when clipping is off
static float grad_clip_scale(const OptimConfig* oc, float grad_norm) {
    if (oc->grad_clip > 0.0f && grad_norm > oc->grad_clip) return oc->grad_clip / grad_norm;
    return 1.0f;
}

// AdamW state of the n values this rank updates
typedef struct {
    float* m;        // (n) first moment, device
    float* v;        // (n) second moment, device
    float* master;   // (n) FP32 master weights when floatX is BF16 or FP16, else NULL
    float* norm;     // (1) device accumulator of the squared gradient norm
    size_t n;
    int t;           // number of updates done (the bias-correction step)
} AdamWState;

// 1 in the builds whose parameters are 16-bit (BF16, FP16) and keep FP32 master weights
#if !defined(LLM_FLOATX_IS_FLOAT)
#define ADAMW_HAS_MASTER 1
#else
#define ADAMW_HAS_MASTER 0
#endif

// m = v = 0 for n values; master allocated (contents set by the caller) in the BF16 builds
static void adamw_state_alloc(AdamWState* st, size_t n, cudaStream_t stream) {
    st->n = n;
    st->t = 0;
    st->m = (float*)device_malloc(n * sizeof(float), MEM_MOMENTS);
    st->v = (float*)device_malloc(n * sizeof(float), MEM_MOMENTS);
    device_memset_zero(st->m, n * sizeof(float), stream);
    device_memset_zero(st->v, n * sizeof(float), stream);
    st->norm = (float*)device_malloc(sizeof(float), MEM_WORKSPACE);
    st->master = ADAMW_HAS_MASTER ? (float*)device_malloc(n * sizeof(float), MEM_MASTER) : NULL;
}

static void adamw_state_free(AdamWState* st) {
    device_free(st->m);
    device_free(st->v);
    device_free(st->master);
    device_free(st->norm);
    memset(st, 0, sizeof(*st));
}
