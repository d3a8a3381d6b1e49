// test_gpt.cu: the whole model against the independent PyTorch reference (dev/reference/, float64,
// stored as float32): logits, loss, the gradients of all 16 parameter tensors, the losses of 10
// AdamW steps, and the parameters after them. Builds as the CPU build and as the emulated CUDA build.
//
// Tolerances (FP32 builds). Each value here is a float32 computation of a float64 result, so it differs
// by rounding only. The deepest chain is 2 layers of dot products of length <= 4C = 128 with
// LayerNorms between them; float32 keeps 2^-24 = 6e-8 relative per operation, and sums of ~100 terms
// give errors of ~1e-6 of the tensor's scale at the worst. So logits and each gradient tensor are
// compared with |got - ref| <= 1e-5 * max|ref| (the tensor's scale) + 1e-4 * |ref|: 10x that bound
// (observed: 1.2e-7 absolute on logits of scale 0.6, <= 1e-7 on gradients). A real bug (a wrong
// index, a missing term, a transposed weight) moves values by >= 1e-3 of the scale, 100x more.
// The loss within 1e-5 absolute (observed 0). For the 10 AdamW steps the errors of each step carry
// into the next: losses within 1e-4 absolute (observed 5e-7); parameters within 2e-4 * max|param|
// (= 2e-5 here) + 1e-4 * |ref| (observed 3e-6). The parameters need the most room: the key bias has an
// exact gradient of 0 (softmax ignores a shift shared by a query's scores), so its float gradient is
// pure rounding noise, which AdamW's m / sqrt(v) turns into updates of up to lr = 1e-3 per step in a
// random direction; its observed drift is 3e-6 after 10 steps.
// BF16 builds keep 8 mantissa bits (relative rounding 2^-9 per value stored): logits and gradients
// are compared within 2e-2 of the tensor's scale + 2e-2 relative, the loss within 2e-2.
#include "../llm/common.h"
#include "../llm/gpt.h"
#include "../llm/optimizer.h"
#include "../llm/checkpoint.h"
#include "test_common.h"

#ifndef FIXTURES
#define FIXTURES "test/fixtures"
#endif

#if LLM_HAS_KERNELS && !defined(ENABLE_FP32)
static const int BF16 = 1;
#else
static const int BF16 = 0;
#endif

// compare with a tolerance scaled to the tensor's largest reference value in BF16 builds
// atol is relative to the tensor's largest reference value (scale), rtol to each value
static int compare(const char* what, const float* got, const float* want, size_t n, float atol, float rtol) {
    float scale = 0.0f;
    for (size_t i = 0; i < n; i++) scale = fmaxf(scale, fabsf(want[i]));
    if (BF16) { atol = 2e-2f; rtol = 2e-2f; }
    return check_close(what, got, want, n, atol * scale, rtol);
}

int main(void) {
    // the reference model and its debug state
    GPTConfig cfg;
    float* params = checkpoint_load(FIXTURES "/tiny_model.bin", &cfg);
    GPT model;
    gpt_allocate(&model, cfg);
    gpt_set_parameters(&model, params);
    size_t n = model.num_parameters;
    int V = cfg.vocab_size, Vp = cfg.padded_vocab_size;

    FILE* f = fopenCheck(FIXTURES "/tiny_debug_state.bin", "rb");
    int header[256];
    freadCheck(header, sizeof(int), 256, f, "debug state");
    if (header[0] != 20240327 || header[1] != 2) fatal("debug state: bad magic/version %d %d", header[0], header[1]);
    int B = header[2], T = header[3];
    int* x = (int*)mallocCheck(B * T * sizeof(int));
    int* y = (int*)mallocCheck(B * T * sizeof(int));
    float* want_logits = (float*)mallocCheck((size_t)B * T * V * sizeof(float));
    float want_loss;
    float* want_grads = (float*)mallocCheck(n * sizeof(float));
    freadCheck(x, sizeof(int), B * T, f, "debug state x");
    freadCheck(y, sizeof(int), B * T, f, "debug state y");
    freadCheck(want_logits, sizeof(float), (size_t)B * T * V, f, "debug state logits");
    freadCheck(&want_loss, sizeof(float), 1, f, "debug state loss");
    freadCheck(want_grads, sizeof(float), n, f, "debug state grads");
    fcloseCheck(f, "debug state");
    printf("tiny model: L=%d NH=%d C=%d V=%d Vp=%d maxT=%d, batch B=%d T=%d, %zu parameters (%s)\n",
           cfg.num_layers, cfg.num_heads, cfg.channels, V, Vp, cfg.max_seq_len, B, T, n, PRECISION_MODE);

    // forward: logits (the unpadded V columns) and loss
    gpt_forward(&model, x, y, B, T, 0.0f);
    float* logits = (float*)mallocCheck((size_t)B * T * Vp * sizeof(float));
    copy_to_host_float(logits, model.acts.output, (size_t)B * T * Vp);
    float* got_logits = (float*)mallocCheck((size_t)B * T * V * sizeof(float));
    for (int i = 0; i < B * T; i++) memcpy(got_logits + (size_t)i * V, logits + (size_t)i * Vp, V * sizeof(float));
    compare("logits", got_logits, want_logits, (size_t)B * T * V, 1e-5f, 1e-4f);
    float loss_tol = BF16 ? 2e-2f : 1e-5f;
    check(fabsf(model.mean_loss - want_loss) <= loss_tol, "loss %.7f vs reference %.7f (tol %.0e)", model.mean_loss, want_loss, loss_tol);

    // backward: all 16 gradients
    gpt_zero_grad(&model);
    gpt_forward(&model, x, y, B, T, 1.0f / (B * T));
    gpt_backward(&model);
    float* grads = (float*)mallocCheck(n * sizeof(float));
    copy_to_host_float(grads, model.grads_memory, n);
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        char what[64];
        snprintf(what, sizeof(what), "grad %s", PARAMETER_NAMES[i]);
        compare(what, grads + off, want_grads + off, model.param_sizes[i], 1e-5f, 1e-4f);
        off += model.param_sizes[i];
    }

    // 10 AdamW steps on the same batch, hyperparameters as in the fixture's header
    OptimConfig oc = {1e-3f, 1.0f, 0, 10, 0.9f, 0.95f, 1e-8f, 0.1f, 0.0f};
    AdamWState opt;
    adamw_state_init(&opt, &model);
    f = fopenCheck(FIXTURES "/tiny_adamw_losses.txt", "r");
    char line[256];
    float want_losses[10];
    int nl = 0;
    while (fgets(line, sizeof(line), f) && nl < 10) {
        if (line[0] == '#') continue;
        want_losses[nl++] = strtof(line, NULL);
    }
    fcloseCheck(f, "losses");
    if (nl != 10) fatal("tiny_adamw_losses.txt: expected 10 losses, found %d", nl);
    float step_tol = BF16 ? 5e-2f : 1e-4f;
    for (int step = 0; step < 10; step++) {
        gpt_zero_grad(&model);
        gpt_forward(&model, x, y, B, T, 1.0f / (B * T));
        gpt_backward(&model);
        float norm = gpt_grad_norm(&model, &opt);
        gpt_update(&model, &opt, &oc, lr_schedule(&oc, step), norm, 1234u + step);
        check(fabsf(model.mean_loss - want_losses[step]) <= step_tol, "AdamW step %d loss %.7f vs %.7f (tol %.0e)",
              step + 1, model.mean_loss, want_losses[step], step_tol);
    }
    GPTConfig cfg10;
    float* want_params10 = checkpoint_load(FIXTURES "/tiny_model_step10.bin", &cfg10);
    float* got_params10 = (float*)mallocCheck(n * sizeof(float));
    gpt_get_parameters(&model, got_params10);
    compare("parameters after 10 AdamW steps", got_params10, want_params10, n, 2e-4f, 1e-4f);

    free(params); free(x); free(y); free(want_logits); free(want_grads); free(logits); free(got_logits);
    free(grads); free(want_params10); free(got_params10);
    adamw_state_free(&opt);
    gpt_free(&model);
    return test_summary("test_gpt");
}
