// loss_scale.h: loss scaling for FP16 training (Micikevicius et al. 2018, "Mixed Precision Training",
// sec. 3.2 "Loss Scaling"), host logic around the loss gradient's seed and the global gradient norm,
// the same in every build.
//
// FP16 has 5 exponent bits: gradients below 2^-24 flush to zero, and many of a network's gradients
// live there. The paper multiplies the loss by a scale S before the backward, so that every gradient
// (linear in the loss) is S times larger and clears the underflow, then divides the weight gradients
// by S before the update. Here the backward is seeded with dloss * S (the classifier's d(loss)/d(logit)
// factor, llm/model/stage.h stage_forward), and the division is folded into the update: the global norm
// (already reduced over every rank that holds a piece of the gradient, llm/parallel/dp.h dp_grad_norm) is
// divided by S before clipping, and AdamW's gradient factor is clip_factor / S. With S a power of two
// both are exact: an FP32 run with the scaler makes the same bits as one without it.
//
// Too large an S overflows: some gradient is inf or NaN, and so is the norm, on every rank alike (the
// norm is a sum over all of them, and gradients are reduced before it). Dynamic scaling (the paper's
// "choose a large scaling factor and then ... if an overflow is detected, skip the update and reduce
// the factor"; the growth after a run of good steps is the same section's dynamic variant): a step
// whose norm is not finite is skipped (llm/faults/health.h's rule; no update, the moments and step count untouched), S is halved
// and the run of good steps restarts; after `window` good steps in a row S is doubled.
//
// Modes (--loss-scale): none (S = 1, nothing skipped: the trainer's behaviour without the scaler),
// a fixed S (skips overflowing steps, never changes S), dynamic (the default when floatX is FP16).
// The state (S, the run of good steps, the steps skipped so far) is part of the resumable state
// (llm/ckpt/checkpoint.h), so that a resumed run continues bit for bit.
#pragma once
#include "../core/common.h"

typedef enum { LOSS_SCALE_NONE = 0, LOSS_SCALE_FIXED = 1, LOSS_SCALE_DYNAMIC = 2 } LossScaleMode;

typedef struct {
    LossScaleMode mode;
    float scale;      // S: the loss gradient is seeded with dloss * S
    int good_steps;   // steps in a row with finite gradients since the last change of S
    int window;       // dynamic: S doubles after this many good steps
    int skipped;      // steps skipped so far (over the whole run, resumed runs included)
} LossScaler;

static void loss_scaler_init(LossScaler* ls, LossScaleMode mode, float init_scale, int window) {
    memset(ls, 0, sizeof(*ls));
    ls->mode = mode;
    ls->scale = mode == LOSS_SCALE_NONE ? 1.0f : init_scale;
    ls->window = window;
}

static const char* loss_scale_mode_name(LossScaleMode m) {
    return m == LOSS_SCALE_NONE ? "none" : (m == LOSS_SCALE_FIXED ? "fixed" : "dynamic");
}

// the factor of the backward's seed: dloss * S
// its line at the start of a run (a scaler that scales)
static void loss_scaler_print(const LossScaler* ls) {
    if (ls->mode == LOSS_SCALE_NONE) return;
    printf("loss scaling: %s, scale %g", loss_scale_mode_name(ls->mode), ls->scale);
    if (ls->mode == LOSS_SCALE_DYNAMIC) printf(", doubled after %d good steps, halved on an overflow", ls->window);
    printf("\n");
}

static float loss_scaler_seed(const LossScaler* ls, float dloss) { return dloss * ls->scale; }

// After the step's gradients are reduced: given the global norm of the scaled gradients, sets *norm to
// the unscaled norm and *unscale to the factor AdamW applies to the gradients on top of clipping (1 / S).
// Whether the step is applied is decided by the one skip rule of the trainer (llm/faults/health.h: a norm that
// is not finite is an "overflow" there, the same on every rank); then loss_scaler_update moves S.
static void loss_scaler_unscale(const LossScaler* ls, float* norm, float* unscale) {
    *unscale = 1.0f;
    if (ls->mode == LOSS_SCALE_NONE) return;
    *norm = *norm / ls->scale;
    *unscale = 1.0f / ls->scale;
}

// Once per optimizer step, after the decision: overflow 1 when the norm was not finite (the step is
// skipped), skipped 1 when the step was skipped for any reason. An overflow halves a dynamic S and
// restarts the run of good steps; a finite step counts in the run (a step skipped for a loss spike has
// finite gradients: S fitted it); after `window` of them S doubles.
static void loss_scaler_update(LossScaler* ls, int overflow, int skipped) {
    if (ls->mode == LOSS_SCALE_NONE) return;
    if (skipped) ls->skipped++;
    if (overflow) {
        ls->good_steps = 0;
        if (ls->mode == LOSS_SCALE_DYNAMIC && ls->scale > 0x1p-24f) ls->scale *= 0.5f;  // (1 / S stays finite)
        return;
    }
    ls->good_steps++;
    if (ls->mode == LOSS_SCALE_DYNAMIC && ls->good_steps >= ls->window) {
        if (ls->scale < 0x1p100f) ls->scale *= 2.0f;  // (stays a finite power of two)
        ls->good_steps = 0;
    }
}
