// sampler.h: text generation from the model: sampling from the softmax of the logits (or greedy
// argmax), one token at a time, by running the model on the growing sequence. Under data
// parallelism every rank generates (the same tokens); see GPTHooks.agree_token.
#pragma once
#include "common.h"
#include "device.h"
#include "rand.h"
#include "gpt.h"

// index of the largest of the first n logits
static int sample_argmax(const float* logits, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (logits[i] > logits[best]) best = i;
    return best;
}

// a draw from softmax(logits[0..n)), coin uniform in [0, 1)
static int sample_softmax(const float* logits, int n, float coin) {
    float maxv = logits[0];
    for (int i = 1; i < n; i++) maxv = fmaxf(maxv, logits[i]);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += expf(logits[i] - maxv);
    double cdf = 0.0, target = coin * sum;
    for (int i = 0; i < n; i++) {
        cdf += expf(logits[i] - maxv);
        if (target < cdf) return i;
    }
    return n - 1;
}

// Extends tokens[0..len) by up to `max_new` tokens (tokens must have room for len + max_new), stopping
// after a token equal to stop_token (-1: never) or at the model's context length. rng == NULL means
// greedy. Returns the new length.
static int gpt_generate(GPT* model, int* tokens, int len, int max_new, int stop_token, Rng* rng) {
    GPTConfig c = model->config;
    float* logits = (float*)mallocCheck((size_t)c.padded_vocab_size * sizeof(float));  // (Vp)
    for (int i = 0; i < max_new && len < c.max_seq_len; i++) {
        gpt_forward(model, tokens, NULL, 1, len, 0.0f);
        copy_to_host_float(logits, model->acts.output + (size_t)(len - 1) * c.padded_vocab_size, c.padded_vocab_size);
        int next = rng ? sample_softmax(logits, c.vocab_size, rng_f32(rng)) : sample_argmax(logits, c.vocab_size);
        // ZeRO-3: every rank takes dp rank 0's token, so every rank runs the same forwards (each
        // forward all-gathers the parameters with the whole group)
        if (model->hooks && model->hooks->agree_token) next = model->hooks->agree_token(model->hooks->ctx, next);
        tokens[len++] = next;
        if (next == stop_token) break;
    }
    free(logits);
    return len;
}
