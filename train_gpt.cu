/*
train_gpt.cu: trains a GPT-2 model, on one process or data-parallel over many (mpirun). Read it top
to bottom:
  1. arguments, processes (llm/train/args.h: flags with llm.c's short aliases; llm/comm/comm.h: the dp x tp x pp
                           mesh; the layout checked before anything is allocated; llm/core/context.h: the
                           process's context)
  2. the model            (an llm.c checkpoint, or a fresh GPT-2 from a descriptor like d12;
                           llm/model/tensors.h: the parameter tensors as one table)
  3. data                 (llm.c token shards, each dp rank reading its slice of every step's batch;
                           tokenizer for decoding)
  4. the parts            (llm/parallel/pipeline.h: which layers this pipeline rank runs; llm/parallel/dp.h: what this
                           rank holds of their parameters, gradients and optimizer state: DDP, or
                           ZeRO-1/2/3, llm/parallel/zero.h; llm/model/stage.h: the stage that runs the embedding, the
                           blocks (llm/model/block.h, with --recompute) and the head on one micro-batch;
                           llm/model/sampler.h: generation, block_decode with a KV cache)
  5. the training loop    (val loss, samples, checkpoints; then one optimizer step: this rank's
                           micro-batches forward + backward in the order of the pipeline schedule
                           (llm/parallel/schedule.h; one rank: forward, backward, forward, ...), the gradients
                           averaged over the dp ranks as they are ready, the global norm, the
                           health check (llm/faults/health.h: a NaN/inf or spike step is skipped, a streak
                           of them or a parameter mismatch between replicas rolls back to the last
                           good checkpoint), clip, AdamW; faults on purpose with --inject, llm/faults/inject.h;
                           log)
  6. held-out exact-match evaluation (optional), memory and communication report, clean-up
Every rank runs the same program; only rank 0 prints progress, writes the log and checkpoints, and
every rank prints the errors it sees itself.
The same file builds three ways (docs/architecture.md): g++ -> train_gpt_cpu, nvcc -> train_gpt, and the
emulated CUDA build used by the tests.

Bytes moved per training step on a GPU (GPT-2 124M, B=64, T=1024, BF16; X = B*T*C*2 = 100.7 MB, one
(B,T,C) activation). Counted from the kernels' reads and writes, weights excluded (7 MB per layer, read
once or twice):
  per layer, forward:  LN 2X (fused residual+LN 4X) + QKV 4X + fused attention 4X (q, k, v read from
                       the QKV output, k and v again per query tile mostly from L2; out written; no
                       (B,NH,T,T) matrix, llm/ops/attention.cuh) + attproj 2X + fc 9X (writes pre-GELU and
                       GELU) + fcproj 5X                                                   ~ 2.6 GB
  per layer, backward: about twice the forward's activation traffic                        ~ 5.2 GB
  12 layers                                                                                ~ 94 GB
  LM head + classifier: logits B*T*Vp*2 = 6.6 GB written, read and overwritten by dlogits in one fused
                       pass (13.2 GB), read twice by the backward matmuls (13.2 GB)          ~ 33 GB
  AdamW: 124M x (2 grad + 2 param + 12 master/m/v read, 12 written)                       ~ 3.5 GB
  total ~ 130 GB per step: ~40 ms at an H100's 3.35 TB/s, beside ~52 TFLOP of matmuls (6 N per token
  plus attention), ~80 ms at a dense BF16 peak of ~650 TFLOP/s: the step is bound by the products. The
  unfused attention (dev/cuda/attention_unfused.cuh) moved ~11.7 GB more per layer through its
  (B,NH,T,T) matrices, ~140 GB per step, which made the step bound by memory.
*/
#include "llm/core/common.h"
#include "llm/core/context.h"
#include "llm/core/device.h"
#include "llm/core/rand.h"
#include "llm/train/args.h"
#include "llm/comm/comm.h"
#include "llm/model/tensors.h"
#include "llm/model/stage.h"
#include "llm/parallel/dp.h"
#include "llm/parallel/dp_step.h"
#include "llm/parallel/dp_export.h"
#include "llm/parallel/pipeline.h"
#include "llm/parallel/pipeline_report.h"
#include "llm/ops/optimizer.h"
#include "llm/precision/loss_scale.h"
#include "llm/train/dataloader.h"
#include "llm/train/tokenizer.h"
#include "llm/train/logger.h"
#include "llm/faults/inject.h"
#include "llm/ckpt/ckpt_run.h"
#include "llm/model/sampler.h"
#include "llm/train/eval.h"
#include "llm/train/report.h"
#include "llm/train/mfu.h"
#include "llm/train/progress.h"
#include "llm/faults/health.h"
#include "llm/faults/straggler.h"
#include "llm/faults/preempt.h"

// One optimizer step, the data-parallel training step of the papers (PyTorch DDP's Algorithm 1, ZeRO
// sec. 5): this rank's micro-batches forward and backward in the pipeline schedule's order, the backward
// seeded with the loss gradient times the loss scale and each unit's gradients averaged over the dp ranks
// as soon as they are ready (llm/parallel/pipeline.h, dp.h); the gradients finished; the global norm over
// every rank; the health verdict on the loss and norm (llm/faults/health.h: a NaN/inf or a spike skips the
// update); unscale, clip and AdamW on what this rank owns (llm/parallel/dp_step.h).
typedef struct {
    float loss, norm, lr, scale;  // the loss averaged over the ranks, the gradient norm, the lr and loss scale used
    const char* skipped;          // why the update was skipped, or NULL
} StepResult;

// context parallelism: the attention compute time of this rank's stages since the last call (ms)
static double cp_attention_ms(Pipeline* pipe) {
    double ms = 0.0;
    for (int c = 0; c < pipe->vpp; c++) ms += cp_take_ms(&pipe->chunks[c].cp);
    return ms;
}

// Context parallelism's balance, measured: the attention compute time per step of each rank of the cp group of
// world rank 0, mean over the timed steps (every rank calls it; rank 0 prints)
static void print_cp_balance(Comm* c, double mine_ms, int impl, int balance) {
    double* all = (double*)mallocCheck((size_t)c->world_size * sizeof(double));
    comm_all_gather_host(c, mine_ms, all);
    if (c->world_rank == 0) {
        double lo = INFINITY, hi = 0.0;
        printf("context parallelism (%s%s%s): attention compute per step by cp rank:", cp_impl_name(impl),
               impl == CP_RING ? " " : "", impl == CP_RING ? cp_balance_name(balance) : "");
        int* cp_ranks = (int*)mallocCheck((size_t)c->world_size * sizeof(int));
        mesh_group_members(&c->mesh, GROUP_CP, 0, cp_ranks);
        for (int q = 0; q < c->mesh.cp.size; q++) {
            double ms = all[cp_ranks[q]];
            printf(" %.2f", ms);
            if (ms < lo) lo = ms;
            if (ms > hi) hi = ms;
        }
        printf(" ms | max/min %.2f\n", lo > 0.0 ? hi / lo : NAN);
        free(cp_ranks);
    }
    free(all);
}

static StepResult train_step(Pipeline* pipe, DataParallel* dp, LossScaler* scaler, Fp8State* fp8, Health* health,
                             const OptimConfig* oc, const InjectPlan* faults, const int* inputs, const int* targets,
                             int step, unsigned int seed) {
    StepResult r;
    dp_step_begin(dp);
    fp8_step_begin(fp8);
    r.scale = scaler->scale;
    float loss = pipeline_step(pipe, inputs, targets, loss_scaler_seed(scaler, pipeline_dloss(pipe)));  // forward, backward
    inject_before_reductions(faults, step, dp->comm->world_rank);
    double t = wall_ms();
    dp_finish_grads(dp);
    pipe_event(pipe, "gradient reductions", "collective", t);  // (the last ones, waited)
    t = wall_ms();
    r.loss = dp_mean(dp, loss);
    r.norm = dp_grad_norm(dp);
    float unscale;
    loss_scaler_unscale(scaler, &r.norm, &unscale);
    r.skipped = health_verdict(health, r.loss, r.norm);
    loss_scaler_update(scaler, !isfinite(r.norm), r.skipped != NULL);
    fp8_step_end(fp8, r.skipped != NULL);  // (a skipped step's amaxes stay out of the histories)
    r.lr = lr_schedule(oc, step - 1);
    if (r.skipped == NULL) dp_update(dp, oc, r.lr, r.norm, seed, unscale);  // clip, AdamW
    device_synchronize();
    pipe_event(pipe, "optimizer", "optimizer", t);
    return r;
}

// the step's line on the console (rank 0; every --print-every steps, llm/train/progress.h) and in log.jsonl (every
// step); wait: NaN without data parallelism; mfu: a fraction (llm/train/mfu.h), a percentage on the console, NaN when
// there is no peak (the emulated build without --peak-tflops)
static void report_step(Logger* lg, Progress* pg, int rank0, int step, int steps, const StepResult* r, float vloss, double ms,
                        double tok_s, double mfu, double wait, int scaled) {
    pg->train_loss = r->loss;
    if (!isnan(vloss)) { pg->val_loss = vloss; pg->val_step = step; }
    if (rank0 && progress_show(pg, step, !isnan(vloss) || r->skipped != NULL)) {
        char times[96];
        progress_times(pg, step, times, sizeof(times));
        printf("step %4d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s", step, steps, r->loss, r->lr, r->norm, ms, tok_s);
        if (!isnan(mfu)) printf(" | MFU %.1f%%", 100.0 * mfu);
        printf(" | %s", times);
        if (!isnan(wait)) printf(" | comm wait %.1f ms", wait);
        if (scaled) printf(" | loss scale %g", r->scale);
        if (r->skipped) printf(" | skipped (%s)", r->skipped);
        if (!isnan(vloss)) printf(" | val loss %.6f", vloss);
        printf("\n");
    }
    logger_log_step(lg, step, r->loss, vloss, r->lr, r->norm, (float)ms, (float)tok_s, (float)mfu, (float)wait, scaled ? r->scale : NAN,
                    r->skipped);
}

int main(int argc, char** argv) {
    // 1. arguments, then the processes: the mesh, the layout checked before any allocation, the context
    setvbuf(stdout, NULL, _IOLBF, 0);  // each line as it is printed, also into a file or a pipe (tee, a job's log)
    Args args;
    parse_args(&args, argc, argv);
    args_check_default_data(&args);  // the default data not made yet: one line saying how to make it
    Comm comm;
    comm_init(&comm, &argc, &argv, args.dp, args.tp, args.pp, args.cp);
    args_check_layout(&args, &comm);
    InjectPlan inject_plan;
    inject_parse(&inject_plan, args.inject, comm.world_size);
    wd_set_timeout(&comm, args.comm_timeout);  // every collective and P2P bounded (llm/comm/watchdog.h)
    context_init();
    llm_ctx.mem.budget = (size_t)((double)args.max_memory * (1 << 30));  // --max-memory: a device of that size
    int rank0 = comm.world_rank == 0;  // prints, logs, writes checkpoints
    int B = args.B, T = args.T;

    // 2. the model's config and its first parameters (FP32, checkpoint order)
    GPTConfig cfg;
    float* init_params = NULL;  // (Psi)
    int from_descriptor = gpt_config_from_descriptor(args.model, &cfg);
    if (!from_descriptor) init_params = checkpoint_load(args.model, &cfg);
    if (T > cfg.max_seq_len) {
        fatal("--seq-len: expected T <= the model's context length maxT = %d, found %d", cfg.max_seq_len, T);
    }
    char tp_err[256];
    int grad_accum = (int)(args.total_batch / ((long)B * T * comm.mesh.dp.size));  // m: the micro-batches of a step
    if (tp_layout_error(cfg, comm.mesh.tp.size, tp_err, sizeof(tp_err)) ||  // before anything is allocated
        cp_layout_error(T, cfg.num_heads / comm.mesh.tp.size, comm.mesh.tp.size, comm.mesh.cp.size, args.cp_impl, tp_err, sizeof(tp_err)) ||
        pipe_layout_error(cfg, comm.mesh.pp.size, args.vpp, grad_accum, args.schedule, tp_err, sizeof(tp_err)) ||
        fp8_layout_error((Fp8Recipe)args.fp8, cfg.channels, comm.mesh.tp.size, tp_err, sizeof(tp_err))) {
        if (rank0) fprintf(stderr, "error: %s\n", tp_err);
        comm_exit(&comm, EXIT_FAILURE);
    }

    // 3. data, checked before anything large is allocated; dp rank r reads its slice of every batch
    DataLoader train_loader, val_loader;
    dataloader_init(&train_loader, args.train_data, "--train-data", B, T, comm.mesh.dp.rank, comm.mesh.dp.size, args.shuffle,
                    (uint64_t)args.seed, cfg.vocab_size);
    if (args.val_data) dataloader_init(&val_loader, args.val_data, "--val-data", B, T, 0, 1, 0, 0, cfg.vocab_size);
    Tokenizer tok;
    int have_tok = 0;
    if (args.tokenizer) {
        FILE* tf = fopen(args.tokenizer, "rb");
        if (tf != NULL) { fclose(tf); tokenizer_init(&tok, args.tokenizer); have_tok = 1; }
        else if (rank0) printf("tokenizer %s not found: samples print token ids%s\n", args.tokenizer,
                               strcmp(args.tokenizer, DEFAULT_TOKENIZER) ? "" : " (" DEFAULT_DATA_HOW " makes it)");
    }
    int eot = have_tok ? (int)tok.eot_token : 50256;
    // the MFU's denominator (llm/train/mfu.h): --peak-tflops, or a GEMM measured now on every rank at once
    int peak_n = 0;
    double peak_tflops = args.peak_tflops > 0.0f ? (double)args.peak_tflops : measure_peak_tflops(&peak_n);

    // 4. the parts: the units this pipeline rank runs (llm/parallel/pipeline.h), what it holds of them
    // (llm/parallel/dp.h), its stages that run them on a micro-batch (llm/model/stage.h) and the executor of the
    // schedule, and the sampler
    int* held = (int*)mallocCheck((size_t)num_units(cfg) * sizeof(int));
    pipe_held_units(cfg, comm.mesh.pp.size, args.vpp, comm.mesh.pp.rank, held);
    DataParallel dp;
    DpConfig dpc = {args.zero, held, args.sequence_parallel, inject_grad_hook(&inject_plan)};
    dp_init(&dp, &comm, cfg, &dpc);
    free(held);
    Pipeline pipe;
    pipeline_init(&pipe, &comm, &dp, tp_group(&comm, args.sequence_parallel), cp_group(&comm, T, args.cp_impl, args.cp_balance),
                  args.schedule, args.vpp, grad_accum, B, T, (Recompute)args.recompute);
    Fp8State fp8;  // FP8 linear layers: the recipe's scales and amax histories (llm/precision/fp8_linear.h)
    Fp8Config fp8_cfg = {(Fp8Recipe)args.fp8, args.fp8_e4m3, args.fp8_history, args.fp8_reduce, args.fp8_margin};
    pipeline_enable_fp8(&pipe, &fp8, fp8_cfg);
    const Stage* stage = pipeline_first(&pipe);  // the memory report's per-layer figures
    Sampler sampler;  // decodes the chunks' stages, FP8 linears included, over the pipeline's messages
    sampler_init(&sampler, pipe.chunks, pipe.vpp);
    pipeline_sampler_link(&pipe, &sampler);
    int steps = args.steps;
    if (steps < 0) steps = (int)(dataloader_num_samples(&train_loader) / (args.total_batch / T));
    if (steps <= 0) steps = 1;
    if (rank0) {
        printf("model: %s | L=%d NH=%d C=%d maxT=%d V=%d (Vp %d) | %.2fM parameters | %s %s\n", args.model,
               cfg.num_layers, cfg.num_heads, cfg.channels, cfg.max_seq_len, cfg.vocab_size, cfg.padded_vocab_size,
               dp.lay.num_parameters / 1e6, LLM_BUILD_CPU ? "CPU" : (LLM_BUILD_EMU ? "emulated CUDA" : "CUDA"), PRECISION_MODE);
        if (comm.world_size > 1 || dp.zero.shard_optim) {
            printf("processes: %d = dp %d x tp %d x pp %d", comm.world_size, comm.mesh.dp.size, comm.mesh.tp.size, comm.mesh.pp.size);
            if (comm.mesh.cp.size > 1) printf(" x cp %d (%s%s%s)", comm.mesh.cp.size, cp_impl_name(args.cp_impl), args.cp_impl == CP_RING ? ", " : "",
                                    args.cp_impl == CP_RING ? cp_balance_name(args.cp_balance) : "");
            printf(" | %s | MPI start %.0f ms\n", zero_name(dp.zero.level), comm.init_ms);
        }
        printf("batch: B=%d T=%d | %ld tokens per step = %d micro-steps x %d ranks | %d steps | train samples per epoch %lld\n",
               B, T, args.total_batch, grad_accum, comm.mesh.dp.size, steps, (long long)dataloader_num_samples(&train_loader));
        mfu_print(&cfg, T, peak_tflops, peak_n, comm.world_size);
        if (args.recompute) printf("activation recompute: %s\n", recompute_name((Recompute)args.recompute));
        if (args.fp8) fp8_print(&fp8);
        if (comm.mesh.pp.size > 1) pipeline_print(&pipe);
    }

    // the parameters and optimizer state: fresh, or resumed (each rank keeps its part of the state file)
    OptimConfig oc = {args.lr, args.lr_final, args.warmup, steps, isnan(args.beta1) ? ADAMW_DEFAULT_BETA1 : args.beta1,
                      isnan(args.beta2) ? ADAMW_DEFAULT_BETA2 : args.beta2, isnan(args.eps) ? ADAMW_DEFAULT_EPS : args.eps,
                      args.weight_decay, args.grad_clip};  // (a resumed run: beta1, beta2, eps from its checkpoint unless given)
    LossScaler scaler;  // loss scaling (llm/precision/loss_scale.h): --loss-scale, default dynamic in FP16 builds
    loss_scaler_init(&scaler, (LossScaleMode)args.loss_scale, args.loss_scale_init, args.loss_scale_window);
    if (rank0 && scaler.mode != LOSS_SCALE_NONE) {
        printf("loss scaling: %s, scale %g", loss_scale_mode_name(scaler.mode), scaler.scale);
        if (scaler.mode == LOSS_SCALE_DYNAMIC) printf(", doubled after %d good steps, halved on an overflow", scaler.window);
        printf("\n");
    }
    Rng sample_rng;
    rng_init(&sample_rng, (uint64_t)args.seed * 0x2545F4914F6CDD1Dull + 1);
    int start_step = 0;
    // the health checks (llm/faults/health.h): spikes and NaN/inf skip a step, streaks and SDC roll back
    HealthConfig hcfg = {args.spike_zscore, args.spike_window, args.spike_factor, args.max_bad_steps, args.sdc_check_every};
    Health health;
    health_init(&health, hcfg, scaler.mode != LOSS_SCALE_NONE, scaler.mode == LOSS_SCALE_DYNAMIC);
    // the checkpoints (llm/ckpt/ckpt_run.h): what they hold, where the run keeps it, and how they are written
    RunState run = {&dp, &fp8, &scaler, &sample_rng, &health, &train_loader, &oc, {args.beta1, args.beta2, args.eps}};
    RunCkpt ck;
    run_ckpt_init(&ck, &comm, &dp, &inject_plan, args.output_dir, args.checkpoint_format, args.async_checkpoint,
                  args.keep_checkpoints, args.schedule, args.vpp);
    char resumed_from[1100] = "";
    if (args.resume) {
        // the newest good checkpoint of --output-dir (latest), or the one named, verified (llm/ckpt/ckpt_resume.h)
        start_step = run_resume(&comm, args.resume, args.output_dir, &run, resumed_from, sizeof(resumed_from));
    } else {
        if (from_descriptor) {
            init_params = (float*)mallocCheck(dp.lay.num_parameters * sizeof(float));
            init_parameters(cfg, (uint64_t)args.seed, init_params);
        }
        dp_import_params(&dp, init_params, 0);
    }
    free(init_params);
    inject_plan.reached = start_step;  // an injected fault of a step run before (by an earlier process) does not strike again
    // read one batch of each loader now (then rewind), so that a bad shard is reported before the
    // log or any checkpoint is written
    DataPosition first = dataloader_position(&train_loader);
    dataloader_next_batch(&train_loader);
    dataloader_seek(&train_loader, first);
    if (args.val_data) { dataloader_next_batch(&val_loader); dataloader_reset(&val_loader); }
    char log_path[1100];
    if (args.log_path) snprintf(log_path, sizeof(log_path), "%s", args.log_path);
    else snprintf(log_path, sizeof(log_path), "%s/log.jsonl", args.output_dir);
    Logger logger;
    if (rank0) {
        // every directory this run writes into, with its parents (nothing is created if one cannot be)
        for (int create = 0; create <= 1; create++) {
            make_dirs("--output-dir", args.output_dir, create);
            if (args.log_path) make_parent_dirs("--log", args.log_path, create);
            if (args.report_json) make_parent_dirs("--report-json", args.report_json, create);
            if (args.trace) make_parent_dirs("--trace", args.trace, create);
        }
        logger_init(&logger, log_path, args.resume != NULL);
        if (args.resume == NULL) ckpt_good_reset(args.output_dir);  // a fresh run: no good checkpoint yet
        else ckpt_good_drop_after(args.output_dir, start_step);     // resumed: none from after its start
        if (args.resume != NULL) logger_log_resume(&logger, start_step, resumed_from);  // (the steps after it start over)
        printf("log: %s\n", log_path);
    } else {
        logger_init(&logger, NULL, 0);
    }
    if (rank0) print_memory(&dp, stage);
    if (rank0) printf("AdamW: lr %g, beta1 %g, beta2 %g, eps %g, weight decay %g, grad clip %g\n", oc.lr, oc.beta1, oc.beta2, oc.eps,
                      oc.weight_decay, oc.grad_clip);
    if (rank0 && args.sdc_check_every > 0 && dp.zero.shard_params && comm.mesh.dp.size > 1) {
        printf("sdc check: ZeRO-3 keeps no replica of a parameter in the dp group: nothing to compare\n");
    }

    // 5. the training loop: optimizer steps start_step+1 .. steps. Every rank runs all of it (val
    // loss, samples and the evaluation too: under ZeRO-3 every forward needs the whole group).
    int* step_inputs = (int*)mallocCheck((size_t)grad_accum * B * T * sizeof(int));   // (m, B, T)
    int* step_targets = (int*)mallocCheck((size_t)grad_accum * B * T * sizeof(int));  // (m, B, T)
    double total_ms = 0.0, total_wait = 0.0, total_cp_ms = 0.0;
    int timed_steps = 0;
    Straggler straggler;  // every N steps, the ranks' compute times compared (llm/faults/straggler.h)
    straggler_init(&straggler, args.straggler_every, args.straggler_factor);
    CommLedger step_ledger;  // the collectives of the last optimizer step
    memset(&step_ledger, 0, sizeof(step_ledger));
    DpTrace* step_trace = (DpTrace*)mallocCheck(sizeof(DpTrace));  // and the order of its data-parallel operations
    memset(step_trace, 0, sizeof(*step_trace));
    if (args.val_data && args.val_every > 0) {
        float vloss = val_loss_said(&pipe, &val_loader, args.val_steps, start_step, rank0);
        logger_log_eval(&logger, start_step, "val_loss", vloss);
    }
    Progress progress;  // the elapsed time and the time left on the step line, the summary at the end
    progress_init(&progress, start_step + 1, steps, args.print_every, args.total_batch);
    preempt_install(args.save_on_signal);  // from now on SIGTERM / SIGINT save the step in flight (llm/faults/preempt.h)
    for (int step = start_step + 1; step <= steps; step++) {
        int last = step == steps;
        comm.wd.step = step;  // the watchdog's line names it
        ledger_reset(&comm);
        comm_take_wait_ms(&comm);  // what val, samples and checkpoints waited is not this step's
        pipe.trace_on = args.trace != NULL && last;
        dataloader_next_step(&train_loader, grad_accum, step_inputs, step_targets);  // every rank reads the step's batches

        // the step, timed: faults first (--inject: die, hang, slow, spike, NaN), then the update, then a flipped bit
        cp_attention_ms(&pipe);  // (what val and samples computed is not this step's)
        double t0 = wall_ms();
        straggler_step_begin(&straggler, &comm);
        inject_before_step(&inject_plan, &comm, step, step_targets, (size_t)grad_accum * B * T, cfg.vocab_size);
        StepResult r = train_step(&pipe, &dp, &scaler, &fp8, &health, &oc, &inject_plan, step_inputs, step_targets,
                                  step, (unsigned int)(args.seed + 7919u * (unsigned)step));
        inject_after_update(&inject_plan, &dp, step);
        double ms = wall_ms() - t0;
        double wait = comm_take_wait_ms(&comm);  // how long the computation waited for reductions and gathers
        step_ledger = comm.ledger;
        *step_trace = dp.trace;
        double cp_ms = cp_attention_ms(&pipe);
        if (step > start_step + 1) { total_ms += ms; total_wait += wait; total_cp_ms += cp_ms; timed_steps++; }  // the first step warms up
        straggler_step_end(&straggler, &comm, &logger, step, ms, wait);

        // a SIGTERM or SIGINT on any rank saves this step and ends the run (llm/faults/preempt.h); silent data
        // corruption: the replicas' parameter hashes, every N steps and before a checkpoint (llm/faults/health.h)
        int sig_rank = -1, sig = args.save_on_signal ? preempt_agree(&comm, &sig_rank) : 0;
        int ckpt_step = sig || (args.checkpoint_every > 0 && (step % args.checkpoint_every == 0 || last));
        char sdc_msg[400] = "";
        if (args.sdc_check_every > 0 && (step % args.sdc_check_every == 0 || ckpt_step) && sdc_check(&dp, sdc_msg, sizeof(sdc_msg))) {
            if (rank0) printf("step %d: %s\n", step, sdc_msg);
        }

        // val loss, the step's line, a sample, the checkpoint of the model after this step with the health
        // checks' verdict on it (llm/ckpt/ckpt_run.h)
        float vloss = NAN;
        if (!sig && args.val_data && args.val_every > 0 && (step % args.val_every == 0 || last)) {
            vloss = val_loss_said(&pipe, &val_loader, args.val_steps, step, rank0);
        }
        double tok_s = (float)(args.total_batch / (ms / 1e3));
        double mfu = peak_tflops > 0.0 ? mfu_fraction(model_flops_per_token(&cfg, T), tok_s, peak_tflops, comm.world_size) : NAN;
        report_step(&logger, &progress, rank0, step, steps, &r, vloss, ms, tok_s, mfu, comm.mesh.dp.size > 1 || dp.zero.shard_optim ? wait : NAN,
                    scaler.mode != LOSS_SCALE_NONE);
        if (!sig && args.sample_every > 0 && (step % args.sample_every == 0 || last)) {
            print_sample(&sampler, eot, args.sample_len, &sample_rng, have_tok ? &tok : NULL, rank0, step);
        }
        if (ckpt_step) {
            if (rank0) printf("step %d: saving the checkpoint into %s/%s\n", step, args.output_dir, args.async_checkpoint ? " (written in the background)" : "");
            progress.ckpt_step = step;
            run_ckpt_save(&ck, &run, step, sdc_msg[0] ? CKPT_SDC : health.bad_streak > 0 ? CKPT_IN_STREAK : CKPT_HEALTHY);
        }
        run_ckpt_poll(&ck);  // an async save done on every rank gets its manifest
        if (sig) run_preempted_exit(&ck, step, sig, sig_rank);
        // after max_bad_steps bad steps in a row, or an SDC mismatch: back to the newest last-known-good checkpoint
        if (sdc_msg[0] != '\0' || health_needs_rollback(&health)) step = run_rollback(&ck, &run, &logger, step, sdc_msg);
    }
    run_ckpt_finish(&ck);  // the last save, waited for
    if (rank0 && timed_steps > 0) {
        printf("average step time %.1f ms", total_ms / timed_steps);
        if (comm.mesh.dp.size > 1 || dp.zero.shard_optim) printf(" | comm wait %.2f ms per step", total_wait / timed_steps);
        printf("\n");
    }
    if (comm.mesh.cp.size > 1 && timed_steps > 0) print_cp_balance(&comm, total_cp_ms / timed_steps, args.cp_impl, args.cp_balance);

    if (comm.mesh.pp.size > 1) {  // the tied embedding's two copies (the first and the last stage) stay identical
        double diff = dp_tied_embedding_diff(&dp);
        if (rank0) printf("tied embedding: max |first stage - last stage| = %g over %zu values\n", diff, dp.lay.units[UNIT_EMBED].n);
    }

    // 6. held-out exact-match evaluation
    if (args.eval_file) {
        if (rank0) printf("exact-match evaluation on %s:\n", args.eval_file);
        float acc = exact_match_eval(&sampler, args.eval_file, eot, have_tok ? &tok : NULL, rank0 ? 8 : 0);
        if (rank0) printf("held-out exact-match accuracy: %.2f%%\n", 100.0f * acc);
        logger_log_eval(&logger, steps, "exact_match", acc);
    }

    // the memory and the collectives of the last step, beside the papers' numbers
    comm.ledger = step_ledger;
    if (rank0) print_memory(&dp, stage);  // the peaks now include the training steps
    if (rank0 && (comm.mesh.dp.size > 1 || dp.zero.shard_optim)) {
        ledger_print(&comm, stdout);
        double sent = ledger_sent_bytes(&comm, COMM_ALL_KINDS, GROUP_DP);
        printf("  sent per step %.0f B; ZeRO paper (sec. 7, ring model) %.0f B for the gradients and parameters "
               "(the rest: the loss and norm scalars)\n", sent, paper_sent_bytes(&dp, grad_accum));
    }
    if (args.report_json) {
        char pipe_json[512];
        pipeline_report_json(&pipe, pipe_json, sizeof(pipe_json));
        write_report(args.report_json, &dp, stage, &comm, step_trace, grad_accum, timed_steps ? total_wait / timed_steps : 0.0,
                     timed_steps, pipe_json);
    }

    if (args.trace) {  // the last step, from every rank
        double sim_bubble = 0.0, bubble = pipeline_write_trace(&pipe, args.trace, steps, &sim_bubble);
        if (rank0) {
            printf("trace of step %d: %s | pipeline bubble measured %.3f, simulated with the measured op times %.3f\n", steps,
                   args.trace, bubble, sim_bubble);
        }
    }

    if (rank0) progress_summary(&progress, log_path, args.output_dir, args.checkpoint_format);  // what was done, where it is

    health_free(&health);
    free(step_inputs);
    free(step_targets);
    free(step_trace);
    logger_free(&logger);
    if (have_tok) tokenizer_free(&tok);
    dataloader_free(&train_loader);
    if (args.val_data) dataloader_free(&val_loader);
    sampler_free(&sampler);
    pipeline_free(&pipe);
    fp8_free(&fp8);
    run_ckpt_free(&ck);
    dp_free(&dp);
    context_free();
    comm_free(&comm);
    return 0;
}
