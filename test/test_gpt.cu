// test_gpt.cu: the whole model against the independent PyTorch reference (dev/reference/, float64,
// stored as float32): logits, loss, the gradients of all 16 parameter tensors (also with the batch cut into two
// micro-batches, the pipeline executor seeding the loss's gradient as the trainer does), the losses of 10
// AdamW steps, and the update those steps made (parameters after minus before); the same 10 steps with
// global-norm gradient clipping, and clipping's effect on AdamW's moments. The model runs as
// the trainer runs it: a stage (llm/model/stage.h) whose parameters come from the data-parallel policy
// (llm/parallel/dp.h) over one rank. The gradients are also checked under each activation-recompute policy
// (llm/model/block.h): bit-identical to no recompute. And the split backward of zero-bubble schedules (B and
// W, llm/model/stage.h) against the unsplit one, bit for bit, under each policy, on one and two stages, with
// one and two micro-batches in flight (test/split_backward_check.h says what and why). In FP32, a
// mixture-of-experts model's gradients against finite differences (test/moe_model_check.h). Builds as the
// CPU build and as the emulated CUDA build, FP32, BF16 and FP16.
//
// Tolerances, FP32 builds. Each value is a float32 computation of a float64 result, so it differs by
// rounding only. The deepest chain is 2 layers of dot products of length <= 4C = 128 with LayerNorms
// between them; float32 keeps 2^-24 = 6e-8 relative per operation, and sums of ~100 terms give
// errors of ~1e-6 of the tensor's scale at the worst. So logits and each gradient tensor are compared
// with |got - ref| <= 1e-5 * max|ref| (the tensor's scale) + 1e-4 * |ref|: 10x that bound (observed:
// 1.2e-7 absolute on logits of scale 0.6, <= 1e-7 on gradients). A real bug (a wrong index, a missing
// term, a transposed weight) moves values by >= 1e-3 of the scale, 100x more. The loss within 1e-5
// absolute (observed 0). For the 10 AdamW steps the errors of each step carry into the next: losses
// within 1e-4 absolute (observed 5e-7). The update of each parameter over the 10 steps (up to 1e-2:
// AdamW moves a parameter by at most ~lr = 1e-3 per step) within 2e-5 absolute + 1e-3 relative
// (observed 1.7e-6), 500x less than the largest movement, and the whole update within 1e-4 in
// relative L2 (observed 2e-6), so an update that was skipped, halved, or applied to the wrong tensor
// fails. The key bias is left out of that comparison: its exact gradient is 0 (softmax ignores a
// shift shared by a query's scores), so its float gradient is rounding noise, which AdamW's
// m / sqrt(v) turns into updates of up to lr per step in a random direction (observed drift 3e-6 in
// FP32, 6e-3 in BF16); its own check bounds that drift by 10 lr.
//
// BF16 builds keep 8 mantissa bits (relative rounding 2^-9 per value stored) in every activation and
// gradient, and the FP32 master weights see those BF16 gradients. Logits and gradients within
// 2e-2 of the tensor's scale + 2e-2 relative (observed: 3e-3 absolute on logits, gradients within
// a third of the bound). The loss and the 10 losses within 5e-3 (observed 1e-5 and 3.5e-4): the
// loss falls by 0.04 to 0.14 per step, so a step whose update went missing fails. The update: AdamW
// divides m by sqrt(v), so parameters whose gradient is near 0 move by noise-driven amounts (up to
// lr per step, like the key bias in FP32), and one element may be off by 2.6e-3 (observed) of a largest
// movement of 1e-2. So each element within 5e-3 absolute, and the update as a whole within 0.05 in
// relative L2 (observed 0.017), where a skipped update scores 1 and a halved one 0.5.
//
// FP16 builds keep 11 significant bits (relative rounding 2^-12 per value stored, 8x less than BF16's
// 2^-9), and no value of this test falls below FP16's normal range by more than its subnormals hold
// (gradients >= ~1e-7 here, spacing 2^-24 = 6e-8 there; the test runs without loss scaling). So the
// BF16 bounds divided by 8: logits and gradients within 2.5e-3 of the scale + 2.5e-3 relative
// (observed errors 7-10x below BF16's, within a third of these bounds); the losses and norms within
// 1e-3 (observed 1.2e-4 and 5.6e-5 relative); the update's relative L2 within 0.02 (observed 0.0052).
// The update's elementwise bound stays 5e-3 (observed 2.1e-3, as in BF16): the parameters whose
// gradient is near 0 move by AdamW's noise-driven m / sqrt(v), which more bits do not shrink.
#include "../llm/core/common.h"
#include "../llm/core/context.h"
#include "../llm/comm/comm.h"
#include "../llm/model/units.h"
#include "../llm/model/stage.h"
#include "../llm/parallel/dp.h"
#include "../llm/parallel/dp_step.h"
#include "../llm/parallel/dp_export.h"
#include "../llm/parallel/pipeline.h"
#include "../llm/ops/optimizer.h"
#include "../llm/ckpt/checkpoint.h"
#include "../llm/train/report.h"
#include "test_common.h"
#include "split_backward_check.h"
#include "moe_model_check.h"
#include "../llm/core/usage.h"

#ifndef FIXTURES
#define FIXTURES "test/fixtures"
#endif

// BF16: floatX is 16-bit: the emulated (and CUDA) BF16 build, the CPU build with 16-bit storage (make
// build/test_gpt_cpu_bf16: the same BF16 rounding of activations, gradients and parameters, so the same
// tolerances and reasons), or an FP16 build (FP16 = 1 too)
#if !defined(LLM_FLOATX_IS_FLOAT)
static const int BF16 = 1;
#else
static const int BF16 = 0;
#endif
#if defined(ENABLE_FP16)
static const int FP16 = 1;
#else
static const int FP16 = 0;
#endif

// atol is relative to the tensor's largest reference value (scale), rtol to each value
static int compare(const char* what, const float* got, const float* want, size_t n, float atol, float rtol) {
    float scale = 0.0f;
    for (size_t i = 0; i < n; i++) scale = fmaxf(scale, fabsf(want[i]));
    if (BF16) { atol = FP16 ? 2.5e-3f : 2e-2f; rtol = FP16 ? 2.5e-3f : 2e-2f; }
    return check_close(what, got, want, n, atol * scale, rtol);
}

// the model's gradients (the policy's packed buffer) in checkpoint order, FP32 on the host (Psi)
static void grads_to_host(DataParallel* dp, float* out) {
    float* packed = (float*)mallocCheck(dp->lay.packed_size * sizeof(float));
    copy_to_host_float(packed, dp->grads, dp->lay.packed_size);
    layout_to_checkpoint(&dp->lay, packed, out);
    free(packed);
}

static int split_verdict(int ok, const char* what) { return check(ok, "%s", what); }

// one training micro-batch, its gradients accumulated into the policy's buffers
static void forward_backward(DataParallel* dp, Stage* st, const int* x, const int* y) {
    dp_step_begin(dp);
    dp_micro_begin(dp, 0, 1);
    stage_forward(st, 0, x, NULL, y, 1.0f / (st->B * st->T));
    stage_backward(st, 0, NULL);
    dp_finish_grads(dp);
}

static const char* USAGE =
    "(no arguments; run from the repository root: it reads test/fixtures/)\n"
    "Tests the whole model against the PyTorch reference (dev/reference/): logits, loss, every gradient and 10\n"
    "AdamW steps, with and without clipping; each recompute policy and the split backward bit for bit.\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    // one process: the data-parallel policy over one rank, as the trainer runs it
    Comm comm;
    comm_init(&comm, &argc, &argv, 0, 1, 1);
    context_init();
    GPTConfig cfg;
    float* params = checkpoint_load(FIXTURES "/tiny_model.bin", &cfg);
    size_t n = num_parameters(cfg);
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

    DataParallel dp;
    dp_init(&dp, &comm, cfg, NULL);
    dp_import_params(&dp, params, 0);
    float* params0 = (float*)mallocCheck(n * sizeof(float));  // what the model starts from (BF16: rounded)
    dp_export(&dp, params0, NULL, NULL);
    Stage st;
    stage_init(&st, &dp.lay, &dp.hooks, tp_group(&comm, 0), stage_range_all(cfg), B, T, RECOMPUTE_NONE, 1);

    // forward: logits (the unpadded V columns) and loss
    stage_forward(&st, 0, x, NULL, y, 0.0f);
    float loss = (float)stage_take_loss(&st);
    float* logits = (float*)mallocCheck((size_t)B * T * Vp * sizeof(float));
    copy_to_host_float(logits, st.slots[0].logits, (size_t)B * T * Vp);
    float* got_logits = (float*)mallocCheck((size_t)B * T * V * sizeof(float));
    for (int i = 0; i < B * T; i++) memcpy(got_logits + (size_t)i * V, logits + (size_t)i * Vp, V * sizeof(float));
    compare("logits", got_logits, want_logits, (size_t)B * T * V, 1e-5f, 1e-4f);
    float loss_tol = FP16 ? 1e-3f : (BF16 ? 5e-3f : 1e-5f);
    check(fabsf(loss - want_loss) <= loss_tol, "loss %.7f vs reference %.7f (tol %.0e)", loss, want_loss, loss_tol);

    // backward: all 16 gradients
    forward_backward(&dp, &st, x, y);
    float* grads = (float*)mallocCheck(n * sizeof(float));
    grads_to_host(&dp, grads);
    for (int t = 0; t < NUM_TENSORS; t++) {
        char what[64];
        snprintf(what, sizeof(what), "grad %s", TENSORS[t].name);
        size_t off = dp.lay.ckpt_offset[t];
        compare(what, grads + off, want_grads + off, tensor_size(cfg, t), 1e-5f, 1e-4f);
    }

    // The loss's scale, written once (llm/parallel/pipeline.h's pipeline_dloss): the batch as m = 2 micro-batches
    // of B/2 sequences, run by the pipeline executor as the trainer runs a step, gives the gradient of the whole
    // batch's mean loss, the reference's, within the same bounds. A seed without the 1/m doubles every gradient
    // (100% off, against a bound of about 1e-4 of the tensor's scale in FP32, 2e-2 in BF16).
    {
        DataParallel dm;
        dp_init(&dm, &comm, cfg, NULL);
        dp_import_params(&dm, params, 0);
        Pipeline pipe;
        pipeline_init(&pipe, &comm, &dm, tp_group(&comm, 0), cp_none(T), "1f1b", 1, 2, B / 2, T, RECOMPUTE_NONE);
        dp_step_begin(&dm);
        float lm = pipeline_step(&pipe, x, y, pipeline_dloss(&pipe));  // (x, y: (B, T) = (2, B/2, T))
        dp_finish_grads(&dm);
        float* gm = (float*)mallocCheck(n * sizeof(float));
        grads_to_host(&dm, gm);
        check(B % 2 == 0 && fabsf(lm - want_loss) <= loss_tol, "m = 2 micro-batches of B/2 = %d: the step's loss %.7f vs reference %.7f "
              "(tol %.0e)", B / 2, lm, want_loss, loss_tol);
        for (int t = 0; t < NUM_TENSORS; t++) {
            char what[96];
            snprintf(what, sizeof(what), "m = 2 micro-batches, pipeline_dloss: grad %s", TENSORS[t].name);
            size_t off = dm.lay.ckpt_offset[t];
            compare(what, gm + off, want_grads + off, tensor_size(cfg, t), 1e-5f, 1e-4f);
        }
        free(gm);
        pipeline_free(&pipe);
        dp_free(&dm);
    }

    // activation recompute: the bytes each layer keeps, as allocated, against the paper's per-layer
    // formula adapted to this model (llm/train/report.h), each field rounded up to its 64-byte alignment
    // at most (12 fields + x_in); then the same gradients, bit for bit, under each policy
    const int ACT_SLACK = 13 * 63;
    for (int r = RECOMPUTE_NONE; r <= RECOMPUTE_FULL; r++) {
        Stage sr;
        stage_init(&sr, &dp.lay, &dp.hooks, tp_group(&comm, 0), stage_range_all(cfg), B, T, (Recompute)r, 1);
        double formula = activation_formula_bytes(cfg, B, T, (Recompute)r, 1, 0, 0), measured = (double)sr.layer_act_bytes;
        check(formula <= measured && measured <= formula + ACT_SLACK, "--recompute %s: a layer keeps %.0f B per micro-batch "
              "(allocated), formula %.0f B (Korthikanti et al. 2022 adapted; + <= %d B of alignment)",
              recompute_name((Recompute)r), measured, formula, ACT_SLACK);
        if (r == RECOMPUTE_NONE) {
            // without the (B,NH,T,T) probabilities (the fused attention keeps one log-sum-exp per row) a
            // layer's bytes grow linearly in T: at the model's longest T1 = maxT they are twice those at
            // T1/2, up to the alignment of both allocations. Keeping the probabilities would add
            // NH*B*(T1^2 - 2 (T1/2)^2) * e = NH*B*T1^2*e/2 bytes to the difference, far over the slack
            // at T1 = maxT (the check prints both).
            int T1 = cfg.max_seq_len;
            Stage s1, sh;
            stage_init(&s1, &dp.lay, &dp.hooks, tp_group(&comm, 0), stage_range_all(cfg), B, T1, RECOMPUTE_NONE, 1);
            stage_init(&sh, &dp.lay, &dp.hooks, tp_group(&comm, 0), stage_range_all(cfg), B, T1 / 2, RECOMPUTE_NONE, 1);
            double full = (double)s1.layer_act_bytes, half = (double)sh.layer_act_bytes;
            double quad = (double)cfg.num_heads * B * T1 * T1 * sizeof(floatX) / 2;
            check(T1 % 2 == 0 && fabs(full - 2 * half) <= 2 * ACT_SLACK && quad > 2 * ACT_SLACK,
                  "activations linear in T: a layer keeps %.0f B at T = %d, %.0f B at T = %d (|diff - 2x| %.0f <= %d B "
                  "of alignment; a kept T x T matrix would add %.0f B)", full, T1, half, T1 / 2,
                  fabs(full - 2 * half), 2 * ACT_SLACK, quad);
            stage_free(&s1);
            stage_free(&sh);
        }
        if (r == RECOMPUTE_NONE) { stage_free(&sr); continue; }
        forward_backward(&dp, &sr, x, y);
        float* gr = (float*)mallocCheck(n * sizeof(float));
        grads_to_host(&dp, gr);
        size_t ndiff = 0;
        for (size_t i = 0; i < n; i++) ndiff += memcmp(&gr[i], &grads[i], sizeof(float)) != 0;
        float lr_ = (float)stage_take_loss(&sr);
        check(ndiff == 0 && memcmp(&lr_, &loss, sizeof(float)) == 0,
              "--recompute %s: loss and all %zu gradients bit-identical to no recompute (%zu differ)", recompute_name((Recompute)r), n, ndiff);
        free(gr);
        stage_free(&sr);
    }
    stage_take_loss(&st);

    // the stage seam (llm/model/stage.h): two stages, the embedding and layer 0 | layer 1 and the head, the
    // activation handed forward and its gradient back, give the one stage's loss and gradients bit for bit
    {
        StageRange ra = {0, 1, 1, 0}, rb = {1, cfg.num_layers, 0, 1};
        Stage sa, sb;
        stage_init(&sa, &dp.lay, &dp.hooks, tp_group(&comm, 0), ra, B, T, RECOMPUTE_NONE, 1);
        stage_init(&sb, &dp.lay, &dp.hooks, tp_group(&comm, 0), rb, B, T, RECOMPUTE_NONE, 1);
        dp_step_begin(&dp);
        dp_micro_begin(&dp, 0, 1);
        stage_forward(&sa, 0, x, NULL, NULL, 0.0f);
        stage_forward(&sb, 0, NULL, stage_output(&sa, 0), y, 1.0f / (B * T));
        stage_backward(&sb, 0, NULL);
        stage_backward(&sa, 0, sb.dx);
        dp_finish_grads(&dp);
        float* g2 = (float*)mallocCheck(n * sizeof(float));
        grads_to_host(&dp, g2);
        size_t ndiff = 0;
        for (size_t i = 0; i < n; i++) ndiff += memcmp(&g2[i], &grads[i], sizeof(float)) != 0;
        float l2 = (float)stage_take_loss(&sb);
        check(ndiff == 0 && memcmp(&l2, &loss, sizeof(float)) == 0, "two stages [emb, 0, 1) and [1, %d, head): loss and all %zu "
              "gradients bit-identical to one stage (%zu differ)", cfg.num_layers, n, ndiff);
        free(g2);
        stage_free(&sa);
        stage_free(&sb);
    }

    // the split backward (B, W) against stage_backward; micro-batch 1 is micro-batch 0's tokens and
    // targets shifted by one position
    {
        int* x2 = (int*)mallocCheck(2 * (size_t)B * T * sizeof(int));
        int* y2 = (int*)mallocCheck(2 * (size_t)B * T * sizeof(int));
        for (int i = 0; i < B * T; i++) {
            x2[i] = x[i]; y2[i] = y[i];
            x2[B * T + i] = x[(i + 1) % (B * T)]; y2[B * T + i] = y[(i + 1) % (B * T)];
        }
        split_backward_checks(split_verdict, "split backward", &dp, tp_group(&comm, 0), x2, y2, B, T);
        free(x2);
        free(y2);
    }

    // a mixture-of-experts model's gradients against finite differences of its loss (test/moe_model_check.h);
    // FP32 builds only (a finite difference needs FP32's resolution)
    if (!BF16) moe_model_checks(split_verdict, &comm);

    // 10 AdamW steps on the same batch, hyperparameters as in the fixture's header
    OptimConfig oc = {1e-3f, 1.0f, 0, 10, 0.9f, 0.95f, 1e-8f, 0.1f, 0.0f};
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
    float step_tol = FP16 ? 1e-3f : (BF16 ? 5e-3f : 1e-4f);
    for (int step = 0; step < 10; step++) {
        forward_backward(&dp, &st, x, y);
        float step_loss = (float)stage_take_loss(&st);
        float norm = dp_grad_norm(&dp);
        dp_update(&dp, &oc, lr_schedule(&oc, step), norm, 1234u + step);
        check(fabsf(step_loss - want_losses[step]) <= step_tol, "AdamW step %d loss %.7f vs %.7f (tol %.0e)",
              step + 1, step_loss, want_losses[step], step_tol);
    }
    // the update of the 10 steps against the reference's: (after - before) vs (ref after - ref before)
    GPTConfig cfg10;
    float* want_params10 = checkpoint_load(FIXTURES "/tiny_model_step10.bin", &cfg10);
    float* got_params10 = (float*)mallocCheck(n * sizeof(float));
    dp_export(&dp, got_params10, NULL, NULL);
    float max_move = 0.0f;
    for (size_t i = 0; i < n; i++) {
        got_params10[i] -= params0[i];
        want_params10[i] -= params[i];
        max_move = fmaxf(max_move, fabsf(want_params10[i]));
    }
    // The key bias (the middle third of qkvb, in each layer) has an exact gradient of 0: any float
    // implementation updates it by rounding noise that AdamW scales up to ~lr per step, in a direction
    // no reference can predict. It is checked on its own (its movement stays within 10 lr) and left
    // out of the comparison of the updates.
    size_t C = cfg.channels, kb_moved = 0;
    float kb_max = 0.0f;
    for (int l = 0; l < cfg.num_layers; l++) {
        size_t kb = dp.lay.ckpt_offset[T_QKVB] + (size_t)l * 3 * C + C;  // (C) this layer's key bias
        for (size_t i = kb; i < kb + C; i++) {
            kb_max = fmaxf(kb_max, fabsf(got_params10[i]));
            kb_moved += fabsf(want_params10[i]) > 1e-9f;
            got_params10[i] = want_params10[i] = 0.0f;
        }
    }
    check(kb_moved == 0 && kb_max <= 10 * oc.lr, "key bias (exact gradient 0): the reference does not move it; here it drifts by %.3g <= 10 lr", kb_max);
    float atol = BF16 ? 5e-3f : 2e-5f, rtol = BF16 ? 0.0f : 1e-3f;
    check(atol * 2 <= max_move, "the reference update moves parameters by up to %.3g, at least 2x the tolerance %.1g", max_move, atol);
    check_close("update of 10 AdamW steps (after - before) vs the reference's", got_params10, want_params10, n, atol, rtol);
    // the update as a whole: |got - ref| / |ref| in L2 is 1 for a skipped update, 0.5 for a halved one
    double e2 = 0.0, r2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got_params10[i] - want_params10[i];
        e2 += d * d;
        r2 += (double)want_params10[i] * want_params10[i];
    }
    double rel = sqrt(e2 / r2), rel_tol = FP16 ? 0.02 : (BF16 ? 0.05 : 1e-4);
    check(rel <= rel_tol, "update of 10 AdamW steps: |got - ref| / |ref| = %.3g in L2 (tol %.0e; 1 if the update is skipped)", rel, rel_tol);

    // Gradient clipping (Pascanu et al. 2013: every gradient times clip / norm when norm > clip).
    // (a) One step clipped to half the gradient's norm: AdamW's moments after it are exactly 1/2 (m) and
    // 1/4 (v) of the unclipped step's (the scale 0.5 is exact in float, and so is every product by it).
    // (b) The PyTorch case: the 10 steps again with clipping to 1.42 (5 of them clipped), losses, norms
    // and the update against tiny_adamw_clip_losses.txt and tiny_model_step10_clip.bin, with the
    // tolerances above. Clipping changes the loss of step 10 by 6e-3 (3.98343 vs 3.98947), 60x the FP32
    // tolerance: a clipping that is skipped, or applied to the wrong steps, fails.
    {
        float* mv[4];
        for (int k = 0; k < 4; k++) mv[k] = (float*)mallocCheck(n * sizeof(float));
        float norm0 = 0.0f;
        for (int k = 0; k < 2; k++) {
            DataParallel d;
            dp_init(&d, &comm, cfg, NULL);
            dp_import_params(&d, params, 0);
            Stage sc;
            stage_init(&sc, &d.lay, &d.hooks, tp_group(d.comm, 0), stage_range_all(cfg), B, T, RECOMPUTE_NONE, 1);
            forward_backward(&d, &sc, x, y);
            float norm = dp_grad_norm(&d);
            if (k == 0) norm0 = norm;
            OptimConfig oc1 = {1e-3f, 1.0f, 0, 10, 0.9f, 0.95f, 1e-8f, 0.1f, k == 0 ? 0.0f : 0.5f * norm};
            dp_update(&d, &oc1, 1e-3f, norm, 1u);
            float* p_ = (float*)mallocCheck(n * sizeof(float));
            dp_export(&d, p_, mv[2 * k], mv[2 * k + 1]);
            free(p_);
            stage_take_loss(&sc);
            stage_free(&sc);
            dp_free(&d);
        }
        size_t bad_m = 0, bad_v = 0, nonzero = 0;
        for (size_t i = 0; i < n; i++) {
            bad_m += mv[2][i] != 0.5f * mv[0][i];
            bad_v += mv[3][i] != 0.25f * mv[1][i];
            nonzero += mv[0][i] != 0.0f;
        }
        check(bad_m == 0 && bad_v == 0 && nonzero > n / 2, "clipping to half the norm (%.4f): m and v after one step are "
              "exactly 1/2 and 1/4 of the unclipped step's (%zu and %zu of %zu differ; %zu nonzero)", norm0, bad_m, bad_v, n, nonzero);
        for (int k = 0; k < 4; k++) free(mv[k]);

        f = fopenCheck(FIXTURES "/tiny_adamw_clip_losses.txt", "r");
        float clip = 0.0f, cl_loss[10], cl_norm[10];
        int nc = 0;
        while (fgets(line, sizeof(line), f) && nc < 10) {
            if (!strncmp(line, "# clip=", 7)) clip = strtof(line + 7, NULL);
            if (line[0] == '#') continue;
            if (sscanf(line, "%f %f", &cl_loss[nc], &cl_norm[nc]) == 2) nc++;
        }
        fcloseCheck(f, "clip losses");
        if (nc != 10 || clip <= 0.0f) fatal("tiny_adamw_clip_losses.txt: expected clip= and 10 lines of loss and norm, found %d", nc);
        DataParallel d;
        dp_init(&d, &comm, cfg, NULL);
        dp_import_params(&d, params, 0);
        Stage sc;
        stage_init(&sc, &d.lay, &d.hooks, tp_group(d.comm, 0), stage_range_all(cfg), B, T, RECOMPUTE_NONE, 1);
        OptimConfig occ = {1e-3f, 1.0f, 0, 10, 0.9f, 0.95f, 1e-8f, 0.1f, clip};
        float norm_tol = FP16 ? 1e-3f : (BF16 ? 5e-3f : 1e-5f);  // BF16 observed 1.1e-3, FP16 1.2e-4; every norm is >= 2.3% from the clip
        int clipped = 0;
        for (int step = 0; step < 10; step++) {
            forward_backward(&d, &sc, x, y);
            float step_loss = (float)stage_take_loss(&sc);
            float norm = dp_grad_norm(&d);
            clipped += norm > clip;
            dp_update(&d, &occ, lr_schedule(&occ, step), norm, 1234u + step);
            check(fabsf(step_loss - cl_loss[step]) <= step_tol && fabsf(norm - cl_norm[step]) <= norm_tol * cl_norm[step],
                  "clipped AdamW step %d: loss %.7f vs %.7f (tol %.0e), gradient norm %.6f vs %.6f (rel tol %.0e)%s", step + 1,
                  step_loss, cl_loss[step], step_tol, norm, cl_norm[step], norm_tol, norm > clip ? ", clipped" : "");
        }
        float* want = checkpoint_load(FIXTURES "/tiny_model_step10_clip.bin", &cfg10);
        float* got = (float*)mallocCheck(n * sizeof(float));
        dp_export(&d, got, NULL, NULL);
        double e2 = 0.0, r2 = 0.0;
        for (size_t i = 0; i < n; i++) {
            got[i] -= params0[i];
            want[i] -= params[i];
        }
        for (int l = 0; l < cfg.num_layers; l++) {  // the key bias, as above
            size_t kb = dp.lay.ckpt_offset[T_QKVB] + (size_t)l * 3 * C + C;
            for (size_t i = kb; i < kb + C; i++) got[i] = want[i] = 0.0f;
        }
        for (size_t i = 0; i < n; i++) {
            e2 += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
            r2 += (double)want[i] * want[i];
        }
        check(clipped == 5, "the clipping case clips 5 of the 10 steps here too (%d)", clipped);
        check_close("update of 10 clipped AdamW steps vs the reference's", got, want, n, atol, rtol);
        check(sqrt(e2 / r2) <= rel_tol, "update of 10 clipped AdamW steps: |got - ref| / |ref| = %.3g in L2 (tol %.0e)", sqrt(e2 / r2), rel_tol);
        free(want);
        free(got);
        stage_free(&sc);
        dp_free(&d);
    }

    // The gradient's zeroing fused into AdamW (llm/parallel/dp.h, update_clears_grads): 4 steps of 2 micro-batches
    // each (the first micro-batch accumulates onto what the last update left) give the same parameter bits as the
    // same steps with the fusion off (dp_step_begin zeroing); after every fused update the gradient is all zero,
    // without the fusion it is not. A value the fusion left stale would add the last step's gradient to this one's.
    {
        float* pk[2];
        size_t left[2] = {0, 0};
        int fused[2];
        float* g = (float*)mallocCheck(n * sizeof(float));
        OptimConfig oc2 = {1e-3f, 1.0f, 0, 10, 0.9f, 0.95f, 1e-8f, 0.1f, 0.0f};
        for (int k = 0; k < 2; k++) {
            DataParallel d;
            dp_init(&d, &comm, cfg, NULL);
            dp_import_params(&d, params, 0);
            if (k == 1) d.update_clears_grads = 0;
            fused[k] = d.update_clears_grads;
            Stage sc;
            stage_init(&sc, &d.lay, &d.hooks, tp_group(d.comm, 0), stage_range_all(cfg), B, T, RECOMPUTE_NONE, 1);
            for (int step = 0; step < 4; step++) {
                dp_step_begin(&d);
                for (int mi = 0; mi < 2; mi++) {
                    dp_micro_begin(&d, mi, 2);
                    stage_forward(&sc, 0, x, NULL, y, 0.5f / (B * T));
                    stage_backward(&sc, 0, NULL);
                }
                dp_finish_grads(&d);
                stage_take_loss(&sc);
                dp_update(&d, &oc2, lr_schedule(&oc2, step), dp_grad_norm(&d), 99u + step);
                grads_to_host(&d, g);
                for (size_t i = 0; i < n; i++) left[k] += g[i] != 0.0f;
            }
            pk[k] = (float*)mallocCheck(n * sizeof(float));
            dp_export(&d, pk[k], NULL, NULL);
            stage_free(&sc);
            dp_free(&d);
        }
        size_t differ = 0, moved = 0;
        for (size_t i = 0; i < n; i++) {
            differ += memcmp(&pk[0][i], &pk[1][i], sizeof(float)) != 0;
            moved += pk[0][i] != params0[i];
        }
        check(fused[0] == 1 && left[0] == 0 && left[1] > n / 2, "AdamW zeroes the gradient it reads (DDP, one rank: "
              "update_clears_grads %d): nonzero gradient values after 4 updates, summed: %zu with it, %zu without", fused[0],
              left[0], left[1]);
        check(differ == 0 && moved > n / 2, "4 steps of 2 micro-batches with the zeroing fused into AdamW and without: the "
              "parameters bit-identical (%zu of %zu differ; %zu moved)", differ, n, moved);
        free(pk[0]);
        free(pk[1]);
        free(g);
    }

    // Weight decay by tensor, against the reference's set (the "# decayed=" line of the fixture): one
    // AdamW step with zero gradients (m = v = 0, so only the decay moves anything) from parameters
    // that are all nonzero moves each decayed tensor by -lr wd p and leaves the others exactly alone.
    {
        char decayed[256] = "";
        f = fopenCheck(FIXTURES "/tiny_adamw_losses.txt", "r");
        while (fgets(line, sizeof(line), f)) if (!strncmp(line, "# decayed=", 10)) snprintf(decayed, sizeof(decayed), ",%s", line + 10);
        fcloseCheck(f, "losses");
        decayed[strcspn(decayed, "\n")] = ',';
        float* p1 = (float*)mallocCheck(n * sizeof(float));
        for (size_t i = 0; i < n; i++) p1[i] = 0.5f + 0.25f * (float)(i % 7);  // nonzero everywhere, exact in bf16
        DataParallel d;
        dp_init(&d, &comm, cfg, NULL);
        dp_import_params(&d, p1, 1);
        dp_step_begin(&d);  // zero gradients
        OptimConfig ocw = {1e-2f, 1.0f, 0, 1, 0.9f, 0.95f, 1e-8f, 0.5f, 0.0f};
        dp_update(&d, &ocw, ocw.lr, 0.0f, 1u);
        float* p2 = (float*)mallocCheck(n * sizeof(float));
        dp_export(&d, p2, NULL, NULL);
        int wrong = 0;
        char got_set[256] = "";
        for (int t = 0; t < NUM_TENSORS; t++) {
            char key[32];
            snprintf(key, sizeof(key), ",%s,", TENSORS[t].name);
            int want_decay = strstr(decayed, key) != NULL, moved = 0, exact = 1;
            for (size_t i = dp.lay.ckpt_offset[t]; i < dp.lay.ckpt_offset[t] + tensor_size(cfg, t); i++) {
                float w = p1[i] - ocw.lr * (ocw.weight_decay * p1[i]);  // the decoupled decay of AdamW, alone
                moved |= p2[i] != p1[i];
                exact &= p2[i] == (want_decay ? w : p1[i]);
            }
            if (moved) snprintf(got_set + strlen(got_set), sizeof(got_set) - strlen(got_set), "%s%s", got_set[0] ? "," : "", TENSORS[t].name);
            wrong += !exact || moved != want_decay;
        }
        check(wrong == 0 && strlen(decayed) > 2, "weight decay moves exactly the reference's tensors (%s) by -lr wd p: decayed here {%s}",
              decayed + 1, got_set);
        free(p1);
        free(p2);
        dp_free(&d);
    }

    // GPT-2's initialisation by each tensor's rule (init_parameters), on a model large enough for the
    // statistics: ones, zeros, N(0, 0.02), N(0, 0.02 / sqrt(2L)) for the projections into the residual
    // stream; the padded vocabulary rows zero. Each normal tensor's sample std within 2% of its rule
    // (with >= 65536 draws the sample std is within 0.6% with probability 1 - 1e-6; the residual scale
    // of another L, or 0.02 for them, is off by 29% or more) and its mean within 5 sigma / sqrt(n).
    {
        GPTConfig ci;
        memset(&ci, 0x5a, sizeof(ci));  // whatever the caller's struct held: the descriptor sets every field
        gpt_config_from_descriptor("d4,C=128,NH=4,maxT=64,V=1000", &ci);
        check(ci.num_layers == 4 && ci.channels == 128 && ci.num_heads == 4 && ci.max_seq_len == 64 && ci.vocab_size == 1000 &&
              ci.padded_vocab_size == 1024 && ci.num_experts == 0 && ci.top_k == 0 && ci.moe_every == 0,
              "descriptor d4,C=128,NH=4,maxT=64,V=1000 over a struct of 0x5a bytes: L %d C %d NH %d maxT %d V %d Vp %d, "
              "dense (experts %d, top-k %d, every %d)", ci.num_layers, ci.channels, ci.num_heads, ci.max_seq_len,
              ci.vocab_size, ci.padded_vocab_size, ci.num_experts, ci.top_k, ci.moe_every);
        size_t ni = num_parameters(ci);
        float* pi = (float*)mallocCheck(ni * sizeof(float));
        init_parameters(ci, 4321, pi);
        ParamLayout li;
        layout_init(&li, ci, 8);
        int bad = 0;
        char worst[200] = "";
        for (int t = 0; t < NUM_TENSORS; t++) {
            const float* v = pi + li.ckpt_offset[t];
            size_t m = tensor_size(ci, t), used = m;
            if (m == 0) continue;  // a moe tensor (router, experts): a dense model has none
            if (t == T_WTE) {  // the padded rows: exactly 0, and left out of the statistics
                for (size_t i = (size_t)ci.vocab_size * ci.channels; i < m; i++) bad += v[i] != 0.0f;
                used = (size_t)ci.vocab_size * ci.channels;
            }
            double sum = 0.0, sq = 0.0;
            for (size_t i = 0; i < used; i++) { sum += v[i]; sq += (double)v[i] * v[i]; }
            double mean = sum / used, sd = sqrt(sq / used - mean * mean);
            double want = TENSORS[t].init == INIT_NORMAL ? 0.02 : TENSORS[t].init == INIT_NORMAL_RESIDUAL ? 0.02 / sqrt(2.0 * ci.num_layers) : 0.0;
            int ok;
            if (TENSORS[t].init == INIT_ONES || TENSORS[t].init == INIT_ZEROS) {
                float c = TENSORS[t].init == INIT_ONES ? 1.0f : 0.0f;
                ok = 1;
                for (size_t i = 0; i < used; i++) ok &= v[i] == c;
            } else {
                ok = fabs(sd / want - 1.0) <= 0.02 && fabs(mean) <= 5.0 * want / sqrt((double)used);
            }
            if (!ok) { bad++; snprintf(worst, sizeof(worst), "%s: mean %.3g std %.4g, rule std %.4g", TENSORS[t].name, mean, sd, want); }
        }
        check(bad == 0, "initialisation of each tensor by its rule (d4, C=128): %s", bad ? worst : "ones, zeros, N(0, 0.02), N(0, 0.02/sqrt(2L)), padded rows 0");
        layout_free(&li);
        free(pi);
    }

    // (BF16 builds) Stochastic rounding of the master weights into the BF16 parameters: a master exactly
    // halfway between two BF16 values rounds up in half the cases (unbiased: E[round(x)] = x), and
    // two layers holding the same values round them independently (each tensor piece of each unit has
    // its own random bits), so about half their elements round differently. With zero gradients and no
    // decay the master does not move. 12,600 elements per layer: each fraction within 0.5 +- 0.03 (> 6 sigma).
    if (BF16) {
        float* ph = (float*)mallocCheck(n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            float lo = 0.5f + (float)(i % 64) / 128.0f;  // a bf16 (and fp16) value in [0.5, 1): spacing 2^-8 (fp16 2^-11)
            ph[i] = lo + (FP16 ? 1.0f / 4096.0f : 1.0f / 512.0f);  // halfway to the next one
        }
        for (int l = 1; l < cfg.num_layers; l++) {  // layer l's tensors = layer 0's
            for (int t = 0; t < NUM_TENSORS; t++) {
                if (!TENSORS[t].per_layer) continue;
                size_t per = tensor_layer_size(cfg, t);
                memcpy(ph + dp.lay.ckpt_offset[t] + l * per, ph + dp.lay.ckpt_offset[t], per * sizeof(float));
            }
        }
        DataParallel d;
        dp_init(&d, &comm, cfg, NULL);
        dp_import_params(&d, ph, 1);
        dp_step_begin(&d);
        OptimConfig oc0 = {1e-3f, 1.0f, 0, 1, 0.9f, 0.95f, 1e-8f, 0.0f, 0.0f};
        dp_update(&d, &oc0, oc0.lr, 0.0f, 77u);
        float* pb = (float*)mallocCheck(n * sizeof(float));
        dp_export_floatx(&d, pb);
        size_t up[2] = {0, 0}, same = 0, cnt = 0;
        for (int t = 0; t < NUM_TENSORS; t++) {
            if (!TENSORS[t].per_layer) continue;
            size_t per = tensor_layer_size(cfg, t);
            for (size_t j = 0; j < per; j++) {
                size_t i0 = dp.lay.ckpt_offset[t] + j, i1 = i0 + per;  // layers 0 and 1
                up[0] += pb[i0] > ph[i0];
                up[1] += pb[i1] > ph[i1];
                same += pb[i0] == pb[i1];
                cnt++;
            }
        }
        double f0 = (double)up[0] / cnt, f1 = (double)up[1] / cnt, fs = (double)same / cnt;
        check(fabs(f0 - 0.5) < 0.03 && fabs(f1 - 0.5) < 0.03 && fabs(fs - 0.5) < 0.03,
              "stochastic rounding of halfway masters: %.3f and %.3f of layers 0 and 1 round up, %.3f round the same in both "
              "(each ~0.5; %zu elements per layer)", f0, f1, fs, cnt);
        free(ph);
        free(pb);
        dp_free(&d);
    }

#if LLM_HAS_KERNELS && defined(ENABLE_FP16)
    // The resumable state's FP16 conversions (llm/ckpt/checkpoint.h, written without CUDA headers) against
    // the toolkit's __half: every one of the 65536 codes decodes to the same float and encodes back to
    // itself (NaNs: to a NaN), and floats at and between neighbours (ties, the subnormals, the overflow
    // threshold 65520) round to nearest even as __float2half_rn does.
    {
        size_t bad = 0, checked = 0;
        for (uint32_t h = 0; h < 65536; h++) {
            __half x = __ushort_as_half((unsigned short)h);
            float f = __half2float(x), g = fp16_bits_to_float((uint16_t)h);
            int nan = isnan(f);
            if (nan ? !isnan(g) : memcmp(&f, &g, 4) != 0) bad++;
            uint16_t back = fp16_bits_from_float(g);
            if (nan ? !isnan(fp16_bits_to_float(back)) : back != h) bad++;
            if (!nan && h < 0x7c00u) {  // the points 1/4, 1/2 (a tie), 3/4 of the way to the next code
                float nx = fp16_bits_to_float((uint16_t)(h + 1));
                for (int q = 1; q <= 3; q++) {
                    float m = g + (nx - g) * 0.25f * (float)q;
                    uint16_t want = __half_as_ushort(__float2half_rn(m));
                    if (fp16_bits_from_float(m) != want || fp16_bits_from_float(-m) != (uint16_t)(want | 0x8000u)) bad++;
                    checked++;
                }
            }
            checked++;
        }
        const float edges[] = {65504.0f, 65519.0f, 65520.0f, 1e6f, INFINITY, 0x1p-25f, 0x1.8p-25f, 0x1p-26f};
        for (float e : edges) { if (fp16_bits_from_float(e) != __half_as_ushort(__float2half_rn(e))) bad++; checked++; }
        check(bad == 0, "state file FP16 encoding (llm/ckpt/checkpoint.h) = __half on all 65536 codes and %zu values between them (%zu differ)",
              checked, bad);
    }
#endif

    free(params); free(params0); free(x); free(y); free(want_logits); free(want_grads); free(logits); free(got_logits);
    free(grads); free(want_params10); free(got_params10);
    stage_free(&st);
    dp_free(&dp);
    context_free();
    comm_free(&comm);
    return test_summary("test_gpt");
}
