// optimizer.h: the optimizer step of the trainer: the learning-rate schedule (linear warm-up, then
// cosine decay to a final fraction, as in GPT-3's appendix B), global-norm gradient clipping, and
// AdamW over the 16 parameter tensors (weight decay on the 2-D ones only). This is the one-process
// form; llm/zero.h runs the same AdamW on the part of the model a data-parallel rank owns and
// computes the global norm across shards.
#pragma once
#include "common.h"
#include "device.h"
#include "gpt.h"
#include "adamw.cuh"
#include "global_norm.cuh"

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

// AdamW state: of the whole model (one process), or of the part this rank owns (llm/zero.h: n is
// then the rank's shard, or under DDP the whole model in the units' packed layout)
typedef struct {
    float* m;        // (n) first moment, device
    float* v;        // (n) second moment, device
    float* master;   // (n) FP32 master weights when floatX is BF16, else NULL
    float* norm;     // (1) device accumulator for the squared gradient norm
    size_t n;
    int t;           // number of updates done (the bias-correction step)
} AdamWState;

// 1 in the builds whose parameters are BF16 and keep FP32 master weights
#if LLM_HAS_KERNELS && !defined(ENABLE_FP32)
#define ADAMW_HAS_MASTER 1
#else
#define ADAMW_HAS_MASTER 0
#endif

// m = v = 0 for n values; master allocated (contents undefined) in the BF16 builds
static void adamw_state_alloc(AdamWState* st, size_t n, cudaStream_t stream) {
    st->n = n;
    st->t = 0;
    st->m = (float*)device_malloc(n * sizeof(float));
    st->v = (float*)device_malloc(n * sizeof(float));
    device_memset_zero(st->m, n * sizeof(float), stream);
    device_memset_zero(st->v, n * sizeof(float), stream);
    st->norm = (float*)device_malloc(sizeof(float));
    global_norm_init();
    st->master = ADAMW_HAS_MASTER ? (float*)device_malloc(n * sizeof(float)) : NULL;
}

// the whole model's state (one process)
static void adamw_state_init(AdamWState* st, const GPT* model) {
    size_t n = model->num_parameters;
    adamw_state_alloc(st, n, model->stream);
    if (st->master) {
        // FP32 master weights start as the (BF16) parameters, exactly
        float* tmp = (float*)mallocCheck(n * sizeof(float));
        gpt_get_parameters(model, tmp);
        copy_to_device(st->master, tmp, n * sizeof(float));
        free(tmp);
    }
}

static void adamw_state_free(AdamWState* st) {
    device_free(st->m);
    device_free(st->v);
    device_free(st->master);
    device_free(st->norm);
    global_norm_free();
}

// the global L2 norm of all gradients
static float gpt_grad_norm(GPT* model, AdamWState* st) {
    device_memset_zero(st->norm, sizeof(float), model->stream);
    global_norm_squared(st->norm, model->grads_memory, model->num_parameters, model->stream);
    float norm2;
    copy_to_host(&norm2, st->norm, sizeof(float));
    return sqrtf(norm2);
}

// the factor of global-norm clipping: min(1, grad_clip / grad_norm), 1 when clipping is off
static float grad_clip_scale(const OptimConfig* oc, float grad_norm) {
    if (oc->grad_clip > 0.0f && grad_norm > oc->grad_clip) return oc->grad_clip / grad_norm;
    return 1.0f;
}

// one AdamW step at learning rate lr; grads are scaled by min(1, grad_clip / grad_norm) first
static void gpt_update(GPT* model, AdamWState* st, const OptimConfig* oc, float lr, float grad_norm,
                       unsigned int seed) {
    float grad_scale = grad_clip_scale(oc, grad_norm);
    st->t += 1;
    size_t offset = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t n = model->param_sizes[i];
        float wd = parameter_is_decayed(i) ? oc->weight_decay : 0.0f;
        adamw_update(model->params_memory + offset, st->master ? st->master + offset : NULL,
                     model->grads_memory + offset, st->m + offset, st->v + offset, n, lr,
                     oc->beta1, oc->beta2, st->t, oc->eps, wd, grad_scale, seed + (unsigned)i, model->stream);
        offset += n;
    }
}
