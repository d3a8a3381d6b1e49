// test_op_profile.cu: the ops' own timers (llm/core/op_profile.h), which dev/bench_train.cu's breakdown prints.
//   1. One product with a bias, timed by the ops: the bias pass and the product are told apart (a scope's time is
//      its own less its nested scopes'): the bias pass over (BT, OC) costs less than the product of 2 BT OC C
//      FLOPs; the two add up to at most the call's time from outside; the shape is kept as it ran (N, T, M, N, K).
//   2. Training steps of a small GPT-2 (the trainer's data-parallel policy over one rank): every product of the
//      step is seen, and their FLOPs add up, shape by shape, to exactly 3 x 2 B T (12 L C^2 + C Vp) (forward,
//      the inputs' and the weights' gradients of every linear layer and of the tied LM head); the calls per step
//      of each kind are the model's, counted here from its structure (2L attention calls, 2(2L + 1) LayerNorms,
//      one classifier, one AdamW call per parameter tensor and layer, ...); the kinds add up to no more than the steps'
//      time from outside.
//   3. Off (the default), the ops record nothing.
//   4. The zeroing each step starts with (llm/core/device.h's device_memset_zero, which the op timers showed at 5.6-7.7
//      ms a step on one core and now splits over the threads): buffers below, at and past the size where it splits,
//      of whole and partial slices, are all zero afterwards, and the bytes around them untouched.
#include "../llm/core/common.h"
#include "../llm/core/context.h"
#include "../llm/core/rand.h"
#include "../llm/core/device.h"
#include "../llm/comm/comm.h"
#include "../llm/model/units.h"
#include "../llm/model/stage.h"
#include "../llm/parallel/dp.h"
#include "../llm/parallel/dp_step.h"
#include "../llm/parallel/dp_export.h"
#include "../llm/ops/matmul.cuh"
#include "../llm/ops/optimizer.h"
#include "../llm/core/usage.h"
#include "test_common.h"
#include <vector>

static const char* USAGE = "\nTests the ops' timers (llm/core/op_profile.h) on one product and on training steps.\n";

// STEPS training steps of the stage on fresh random tokens; returns their time from outside (ms)
static double run_steps(DataParallel* dp, Stage* st, GPTConfig cfg, int B, int T, int steps, Rng* rng) {
    OptimConfig oc = {3e-4f, 1.0f, 0, steps, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    std::vector<int> x(B * T), y(B * T);
    double t0 = wall_ms();
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < B * T; i++) { x[i] = (int)(rng_u64(rng) % cfg.vocab_size); y[i] = (int)(rng_u64(rng) % cfg.vocab_size); }
        dp_step_begin(dp);
        dp_micro_begin(dp, 0, 1);
        stage_forward(st, 0, x.data(), NULL, y.data(), 1.0f / (B * T));
        stage_backward(st, 0, NULL);
        dp_finish_grads(dp);
        float norm = dp_grad_norm(dp);
        dp_update(dp, &oc, 3e-4f, norm, (unsigned)s);
        (void)stage_take_loss(st);
    }
    device_synchronize();
    return wall_ms() - t0;
}

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    Comm comm;
    comm_init(&comm, &argc, &argv, 1, 1, 1);
    context_init();
    OpProfile* prof = &llm_ctx.prof;
    Rng rng;
    rng_init(&rng, 1234);

    // 1. one product with a bias
    {
        const int BT = 512, C = 384, OC = 640;  // three sizes: a shape kept with two swapped shows
        std::vector<float> inp((size_t)BT * C), w((size_t)OC * C), bias(OC), out((size_t)BT * OC);
        rng_normal(&rng, inp.data(), inp.size(), 0.0f, 1.0f);
        rng_normal(&rng, w.data(), w.size(), 0.0f, 0.05f);
        rng_normal(&rng, bias.data(), bias.size(), 0.0f, 0.1f);
        matmul_forward(out.data(), NULL, inp.data(), w.data(), bias.data(), BT, C, OC, llm_ctx.stream);  // warm-up
        // five times: a scope preempted by the other programs on the cores gets their time too, so the best ratio
        // of the five is compared (counting the product's time in the launcher's too gives a ratio >= 1 every time)
        double best = 1e30, bias_ms = 0.0, gemm_ms = 0.0, outside = 0.0;
        int nested_ok = 1;
        prof->on = 1;
        for (int trial = 0; trial < 5; trial++) {
            op_profile_reset(prof);
            double t0 = wall_ms();
            matmul_forward(out.data(), NULL, inp.data(), w.data(), bias.data(), BT, C, OC, llm_ctx.stream);
            double ms = wall_ms() - t0;
            nested_ok = nested_ok && prof->calls[OP_GEMM] == 1 && prof->calls[OP_BIAS_GELU] == 1 && prof->ms[OP_BIAS_GELU] >= 0.0 &&
                        prof->ms[OP_GEMM] + prof->ms[OP_BIAS_GELU] <= ms;
            if (prof->ms[OP_BIAS_GELU] / prof->ms[OP_GEMM] < best) {
                best = prof->ms[OP_BIAS_GELU] / prof->ms[OP_GEMM];
                bias_ms = prof->ms[OP_BIAS_GELU], gemm_ms = prof->ms[OP_GEMM], outside = ms;
            }
        }
        prof->on = 0;
        check(nested_ok, "one product, five times: one GEMM scope inside one launcher scope, the two adding up to at most the "
              "call's time from outside (best: %.4f + %.4f <= %.4f ms)", gemm_ms, bias_ms, outside);
        check(best < 1.0, "the bias pass (%.4f ms) is told apart from the product of %.0f MFLOP (%.4f ms)", bias_ms,
              2.0 * BT * C * OC / 1e6, gemm_ms);
        const GemmShape* g = &prof->shapes[0];
        check(prof->n_shapes == 1 && !g->transA && g->transB && g->M == BT && g->N == OC && g->K == C && g->beta == 0.0f &&
              g->batch == 1 && !g->bf16 && g->calls == 1, "its shape as it ran: NT M=%d N=%d K=%d beta %g batch %d, %ld call",
              g->M, g->N, g->K, g->beta, g->batch, g->calls);
    }

    // 2. training steps of a small GPT-2
    {
        GPTConfig cfg;
        if (!gpt_config_from_descriptor("d3,C=64,NH=4,maxT=32,V=250", &cfg)) fatal("bad descriptor");
        const int B = 2, T = 32, steps = 3;
        DataParallel dp;
        dp_init(&dp, &comm, cfg, NULL);
        std::vector<float> p(dp.lay.num_parameters);
        init_parameters(cfg, 1337, p.data());
        dp_import_params(&dp, p.data(), 0);
        Stage st;
        stage_init(&st, &dp.lay, &dp.hooks, tp_group(dp.comm, 0), stage_range_all(cfg), B, T, RECOMPUTE_NONE, 1);
        run_steps(&dp, &st, cfg, B, T, 1, &rng);  // warm-up

        // 3. off: nothing recorded
        op_profile_reset(prof);
        run_steps(&dp, &st, cfg, B, T, 1, &rng);
        check(op_profile_total_ms(prof) == 0.0 && prof->n_shapes == 0 && prof->calls[OP_GEMM] == 0,
              "off (the default): a step records nothing");

        prof->on = 1;
        op_profile_reset(prof);
        double outside = run_steps(&dp, &st, cfg, B, T, steps, &rng);
        prof->on = 0;
        double L = cfg.num_layers, C = cfg.channels, Vp = cfg.padded_vocab_size, BT = (double)B * T;
        double want = 3.0 * 2.0 * BT * (12.0 * L * C * C + C * Vp) * steps, got = 0.0;
        long gemm_calls = 0;
        for (int i = 0; i < prof->n_shapes; i++) {
            const GemmShape* g = &prof->shapes[i];
            got += 2.0 * g->M * g->N * g->K * g->batch * g->calls;
            gemm_calls += g->calls;
        }
        check(got == want, "the step's products, shape by shape: %.0f FLOPs = 3 x 2 B T (12 L C^2 + C Vp) = %.0f over %d steps "
              "(%d shapes)", got, want, steps, prof->n_shapes);
        check(gemm_calls == prof->calls[OP_GEMM], "every GEMM call has its shape: %ld = %ld", gemm_calls, prof->calls[OP_GEMM]);
        int nl = cfg.num_layers, tensors = 0;  // AdamW updates each unit's piece of a tensor on its own (each layer's
        for (int u = 0; u < num_units(cfg); u++)  // piece of a per-layer tensor; a dense model has no expert rows)
            for (int t = 0; t < NUM_TENSORS; t++) tensors += kind_holds(unit_kind(cfg, u), t);
        struct { OpKind k; long per_step; const char* why; } want_calls[] = {
            {OP_GEMM, 3 * (4 * nl + 1), "3 x (4 linears per layer + the LM head)"},
            {OP_BIAS_GELU, 2 * (4 * nl + 1), "the linears' launchers, forward and backward"},
            {OP_ATTENTION, 2 * nl, "forward and backward per layer"},
            {OP_LAYERNORM, 2 * (2 * nl + 1), "two per layer and the final one, forward and backward"},
            {OP_RESIDUAL, nl, "the second residual add of each layer (the first is fused into LayerNorm)"},
            {OP_ENCODER, 2, "the embeddings, forward and backward"},
            {OP_CLASSIFIER, 1, "softmax and cross-entropy with its gradient, once"},
            {OP_GRAD_NORM, 1, "the global norm, once"},
            {OP_ADAMW, tensors, "one update per parameter tensor, per layer"},
            {OP_GELU, 0, "none: GELU is fused into the fc product's epilogue"},
        };
        for (auto& w : want_calls) {
            check(prof->calls[w.k] == w.per_step * steps, "%s: %ld calls per step (%s), got %ld", op_kind_name(w.k),
                  w.per_step, w.why, prof->calls[w.k] / steps);
            if (w.per_step > 0) check(prof->ms[w.k] > 0.0, "%s: its time is counted (%.4f ms)", op_kind_name(w.k), prof->ms[w.k]);
        }
        double in_ops = op_profile_total_ms(prof);
        check(in_ops > 0.0 && in_ops <= outside, "the kinds add up to %.2f ms, at most the steps' %.2f ms from outside", in_ops,
              outside);
        stage_free(&st);
        dp_free(&dp);
    }
    // 4. the zeroing
    {
        const size_t slice = (size_t)1 << 16;
        size_t sizes[] = {1, slice - 3, 4 * slice - 1, 4 * slice, 4 * slice + 1, 7 * slice + 12345, 64 * slice + 5};
        for (size_t n : sizes) {
            std::vector<unsigned char> buf(n + 128, 0xAB);
            device_memset_zero(buf.data() + 64, n, llm_ctx.stream);
            size_t nonzero = 0, outside = 0;
            for (size_t i = 0; i < n; i++) nonzero += buf[64 + i] != 0;
            for (size_t i = 0; i < 64; i++) outside += (buf[i] != 0xAB) + (buf[64 + n + i] != 0xAB);
            check(nonzero == 0 && outside == 0, "device_memset_zero of %zu bytes (%.2f slices of 64 KiB): %zu bytes left "
                  "non-zero, %zu bytes around it touched", n, (double)n / slice, nonzero, outside);
        }
    }
    context_free();
    comm_free(&comm);
    return test_summary("op_profile");
}
