/*
train_gpt.cu: trains a GPT-2 model, on one process or over many (mpirun), every layout of the mesh. Read it top
to bottom: the training step, then main's setup steps in order, then the loop.
  train_step         one optimizer step: this rank's micro-batches forward and backward in the pipeline
                     schedule's order (llm/parallel/pipeline.h, schedule.h), the gradients averaged over the
                     gradient group as they are ready (llm/parallel/dp.h: DDP or ZeRO-1/2/3), the global norm,
                     the health verdict (llm/faults/health.h), clip, AdamW (llm/parallel/dp_step.h)
  1. setup_processes the flags (llm/train/args.h), the processes and the mesh of named axes dp x pp x cp x tp
                     (llm/comm/mesh.h, comm.h), the layout checked before anything is allocated, the context
  2. setup_model     an llm.c checkpoint or a fresh GPT-2 from a descriptor like d12 (llm/model/tensors.h:
                     the parameter tensors as one table); the model's layout errors on this mesh
  3. setup_data      llm.c token shards, each dp rank reading its slice of every step's batch; the tokenizer;
                     HellaSwag's examples (llm/train/hellaswag.h)
  4. setup_parts     each part takes what it needs from the mesh: the units this pipeline rank runs, what it
                     holds of them (dp), its stages (llm/model/stage.h, the blocks of llm/model/block.h; tp and
                     cp's operators in llm/sharded/), the executor of the schedule, FP8, the sampler
  5. setup_state     the optimizer, loss scaling, health checks, checkpoints (llm/ckpt/ckpt_run.h): fresh or
                     resumed; the log
  6. train_loop      val loss, HellaSwag's acc_norm, samples, checkpoints, faults on purpose (--inject,
                     llm/faults/inject.h), stragglers, preemption, rollback; one train_step per step
  7. finish          held-out exact-match evaluation, the memory and communication report, the trace
  or, with --generate N, after step 2: generate, the model's continuation of a prompt (steps 4's parts and the
                     sampler of the training's samples, so every layout; no data, no training, nothing written)
Every rank runs the same program; only rank 0 prints progress, writes the log and checkpoints, and every rank
prints the errors it sees itself. The same file builds three ways (docs/architecture.md): g++ -> train_gpt_cpu,
nvcc -> train_gpt, and the emulated CUDA build used by the tests. What a step moves through a GPU's memory, and
why the step is bound by its products: docs/training.md.
*/
#include "llm/core/common.h"
#include "llm/core/context.h"
#include "llm/core/device.h"
#include "llm/core/rand.h"
#include "llm/train/args.h"
#include "llm/comm/comm.h"
#include "llm/model/units.h"
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
#include "llm/train/moe_balance.h"
#include "llm/faults/inject.h"
#include "llm/ckpt/ckpt_run.h"
#include "llm/model/sampler.h"
#include "llm/train/eval.h"
#include "llm/train/hellaswag.h"
#include "llm/train/generate.h"
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
// update); unscale, clip and AdamW on what this rank owns (llm/parallel/dp_step.h). (StepResult:
// llm/train/progress.h, whose step line prints it.)
// A moe model's aux and z losses of this step (r->aux, r->z: the mean over the micro-batches of their sums over
// the moe layers, summed over the pipeline's stages and averaged over the dp ranks, as the loss) added to r->loss;
// NaN for a dense model. And r->moe_log: the step's routed and dropped assignments per moe layer and expert,
// summed over the micro-batches, the pp stages and the dp (and cp) ranks, and over tp under sequence parallelism
// (each tp rank routes its own tokens; without it every tp rank routes the same tokens), as log.jsonl keys: "moe_layers": [l, ...], "moe_routed" and "moe_dropped": one list of E per moe layer.
// (FP32 sums: exact below 2^24 assignments per step and expert.) The counts stay in ml->counts for the selection
// bias's update (llm/train/moe_balance.h), whose result moe_log_bias adds to the text.
typedef struct {
    float* counts;  // (L, 2, E) the step's routed and dropped counts, summed over every rank that routes
    char* text;     // (cap) r->moe_log's text (one step at a time)
    size_t cap;
} MoeStepLog;

static void moe_step_counts(Pipeline* pipe, DataParallel* dp, MoeStepLog* ml, StepResult* r) {
    GPTConfig c = pipe->cfg;
    int L = c.num_layers, E = c.num_experts;
    size_t n = (size_t)L * 2 * E;
    if (ml->counts == NULL) ml->counts = (float*)mallocCheck(n * sizeof(float));
    float* f = ml->counts;
    for (size_t i = 0; i < n; i++) f[i] = (float)pipe->moe_counts[i];
    memset(pipe->moe_counts, 0, n * sizeof(long long));
    if (dp->size > 1 || pipe->pp_size > 1 || dp->sequence_parallel) {
        copy_to_device(pipe->moe_counts_dev, f, n * sizeof(float));
        if (dp->size > 1) comm_all_reduce(dp->comm, GROUP_DP, pipe->moe_counts_dev, pipe->moe_counts_dev, n, COMM_SUM, llm_ctx.stream);
        if (dp->sequence_parallel) comm_all_reduce(dp->comm, GROUP_TP, pipe->moe_counts_dev, pipe->moe_counts_dev, n, COMM_SUM, llm_ctx.stream);
        if (pipe->pp_size > 1) comm_all_reduce(dp->comm, GROUP_PP, pipe->moe_counts_dev, pipe->moe_counts_dev, n, COMM_SUM, llm_ctx.stream);
        copy_to_host(f, pipe->moe_counts_dev, n * sizeof(float));
    }
    if (ml->text == NULL) {
        ml->cap = 96 + (size_t)L * 8 + n * 14 + (size_t)L * E * 18;  // (and the bias's %.9g values)
        ml->text = (char*)mallocCheck(ml->cap);
    }
    size_t cap = ml->cap;
    char* b = ml->text;
    size_t k = (size_t)snprintf(b, cap, ", \"moe_layers\": [");
    for (int l = 0, first = 1; l < L; l++) {
        if (layer_is_moe(c, l)) { k += (size_t)snprintf(b + k, cap - k, "%s%d", first ? "" : ", ", l); first = 0; }
    }
    for (int d = 0; d < 2; d++) {
        k += (size_t)snprintf(b + k, cap - k, "], \"%s\": [", d == 0 ? "moe_routed" : "moe_dropped");
        for (int l = 0, first = 1; l < L; l++) {
            if (!layer_is_moe(c, l)) continue;
            k += (size_t)snprintf(b + k, cap - k, "%s[", first ? "" : ", ");
            first = 0;
            for (int e = 0; e < E; e++) {
                k += (size_t)snprintf(b + k, cap - k, "%s%.0f", e ? ", " : "", f[((size_t)l * 2 + d) * E + e]);
            }
            k += (size_t)snprintf(b + k, cap - k, "]");
        }
    }
    snprintf(b + k, cap - k, "]");
    r->moe_log = b;
}

// the selection bias after the step's update (while the routers read one), as the log.jsonl key "moe_bias": one
// list of E per moe layer, each value printed to round-trip FP32 (%.9g)
static void moe_log_bias(const MoeBalance* bal, MoeStepLog* ml, StepResult* r) {
    if (r->moe_log == NULL || !bal->active) return;
    GPTConfig c = bal->cfg;
    char* b = ml->text;
    size_t k = strlen(b), cap = ml->cap;
    k += (size_t)snprintf(b + k, cap - k, ", \"moe_bias\": [");
    for (int l = 0, first = 1; l < c.num_layers; l++) {
        if (!layer_is_moe(c, l)) continue;
        k += (size_t)snprintf(b + k, cap - k, "%s[", first ? "" : ", ");
        first = 0;
        for (int e = 0; e < c.num_experts; e++) {
            k += (size_t)snprintf(b + k, cap - k, "%s%.9g", e ? ", " : "", bal->host[(size_t)l * c.num_experts + e]);
        }
        k += (size_t)snprintf(b + k, cap - k, "]");
    }
    snprintf(b + k, cap - k, "]");
}

static void moe_step_losses(Pipeline* pipe, DataParallel* dp, MoeStepLog* ml, StepResult* r) {
    r->aux = r->z = NAN;
    r->moe_log = NULL;
    if (pipe->cfg.num_experts == 0) return;
    double sum[2] = {0.0, 0.0}, one[2];
    for (int c = 0; c < pipe->vpp; c++) {
        stage_take_moe(&pipe->chunks[c], one, pipe->moe_counts);
        sum[0] += one[0];
        sum[1] += one[1];
    }
    float v[2] = {(float)(sum[0] / pipe->m), (float)(sum[1] / pipe->m)};
    if (pipe->pp_size > 1) {
        copy_to_device(dp->scalars, v, 2 * sizeof(float));
        comm_all_reduce(dp->comm, GROUP_PP, dp->scalars, dp->scalars, 2, COMM_SUM, llm_ctx.stream);
        copy_to_host(v, dp->scalars, 2 * sizeof(float));
    }
    r->aux = dp_mean(dp, v[0]);
    r->z = dp_mean(dp, v[1]);
    r->loss += r->aux + r->z;
    moe_step_counts(pipe, dp, ml, r);
}

static StepResult train_step(Pipeline* pipe, DataParallel* dp, LossScaler* scaler, Fp8State* fp8, Health* health,
                             MoeBalance* bal, MoeStepLog* ml, const OptimConfig* oc, const InjectPlan* faults, const int* inputs,
                             const int* targets, int step, unsigned int seed) {
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
    moe_step_losses(pipe, dp, ml, &r);  // a moe model: its aux and z losses join the loss
    r.norm = dp_grad_norm(dp);
    float unscale;
    loss_scaler_unscale(scaler, &r.norm, &unscale);
    r.skipped = health_verdict(health, r.loss, r.norm);
    loss_scaler_update(scaler, !isfinite(r.norm), r.skipped != NULL);
    fp8_step_end(fp8, r.skipped != NULL);  // (a skipped step's amaxes stay out of the histories)
    r.lr = lr_schedule(oc, step - 1);
    if (r.skipped == NULL) dp_update(dp, oc, r.lr, r.norm, seed, unscale);  // clip, AdamW
    // --expert-bias-rate: each moe layer's selection bias moved by the step's routed counts (a skipped step, none)
    if (r.skipped == NULL && r.moe_log != NULL) moe_balance_step(bal, ml->counts);
    moe_log_bias(bal, ml, &r);
    device_synchronize();
    pipe_event(pipe, "optimizer", "optimizer", t);
    return r;
}

// Everything one process of the run holds, made by the setup steps below in order and used by the loop. Its
// parts point at each other (the checkpoints' RunState at the policy, the optimizer, ...): it stays in main.
typedef struct {
    Args args;
    Comm comm;                 // the processes and the mesh (llm/comm/mesh.h)
    InjectPlan faults;         // --inject (llm/faults/inject.h)
    int rank0;                 // world rank 0: prints, logs, writes checkpoints
    GPTConfig cfg;
    float* init_params;        // (Psi) a checkpoint's parameters, until they are imported
    int from_descriptor;       // the model is a fresh one (d12, ...), not a checkpoint
    int grad_accum, steps;     // m: the micro-batches of a step; the last step
    DataLoader train_loader, val_loader;
    Tokenizer tok;
    int have_tok, eot;
    HellaSwag hs;              // --hellaswag's examples (llm/train/hellaswag.h), checked at the start
    MfuPeak peak;              // the MFU's denominator (llm/train/mfu.h): given, or measured on a GEMM
    DataParallel dp;           // what this rank holds of the parameters, gradients and optimizer state
    Pipeline pipe;             // its stages and the executor of the schedule
    Fp8State fp8;
    Sampler sampler;
    MoeBalance moe_bias;       // --expert-bias-rate: the moe layers' selection bias (llm/train/moe_balance.h)
    MoeStepLog moe_log;        // a moe model's step: its routed and dropped counts and their log.jsonl text
    OptimConfig oc;
    LossScaler scaler;
    Rng sample_rng;            // the samples' draws
    Health health;
    RunState run;              // what a checkpoint holds (llm/ckpt/ckpt_run.h)
    RunCkpt ck;                // where and how checkpoints are written
    int start_step;            // the step the run starts after (resumed: its checkpoint's)
    char resumed_from[1100], log_path[1100];
    Logger logger;
} Trainer;

// 1. the processes: the mesh and its layout, checked before any allocation; the watchdog; the context
static void setup_processes(Trainer* tr, int* argc, char*** argv) {
    Args* a = &tr->args;
    blas_choose_kernels(*argv);  // the best BLAS kernels this CPU has (llm/ops/blas_cpu.h): may re-execute once
    parse_args(a, *argc, *argv);
    args_check_default_data(a);  // the default data not made yet: one line saying how to make it
    comm_init(&tr->comm, argc, argv, a->dp, a->tp, a->pp, a->cp, a->ep);
    args_check_layout(a, &tr->comm);
    inject_parse(&tr->faults, a->inject, tr->comm.world_size);
    wd_set_timeout(&tr->comm, a->comm_timeout);  // every collective and P2P bounded (llm/comm/watchdog.h)
    context_init();
    llm_ctx.mem.budget = (size_t)((double)a->max_memory * (1 << 30));  // --max-memory: a device of that size
    tr->rank0 = tr->comm.world_rank == 0;
}

// 2. the model's config and its first parameters (FP32, checkpoint order); every layout error of the model on
// this mesh, before anything is allocated
static void setup_model(Trainer* tr) {
    const Args* a = &tr->args;
    const Mesh* mesh = &tr->comm.mesh;
    GPTConfig* cfg = &tr->cfg;
    tr->from_descriptor = gpt_config_from_descriptor(a->model, cfg);
    if (tr->from_descriptor) {  // the experts are the architecture: a checkpoint's header has its own
        cfg->num_experts = a->experts;
        cfg->top_k = a->experts > 0 ? (a->top_k ? a->top_k : 2) : 0;
        cfg->moe_every = a->experts > 0 ? a->moe_every : 0;
    }
    if (!tr->from_descriptor) tr->init_params = checkpoint_load(a->model, cfg);
    if (a->T > cfg->max_seq_len) fatal("--seq-len: expected T <= the model's context length maxT = %d, found %d", cfg->max_seq_len, a->T);
    tr->grad_accum = (int)(a->total_batch / ((long)a->B * a->T * mesh->dp.size));
    char err[256] = "";
    if (args_moe_error(a, cfg->num_experts, cfg->top_k, err, sizeof(err)) || args_bias_error(a, cfg->num_experts, err, sizeof(err)) ||
        tp_layout_error(cfg->num_heads, cfg->padded_vocab_size, cfg->channels, mesh->tp.size, err, sizeof(err)) ||
        cp_layout_error(a->T, cfg->num_heads / mesh->tp.size, mesh->tp.size, mesh->cp.size, a->cp_impl, err, sizeof(err)) ||
        pipe_layout_error(*cfg, mesh->pp.size, a->vpp, tr->grad_accum, a->schedule, err, sizeof(err)) ||
        fp8_layout_error((Fp8Recipe)a->fp8, cfg->channels, mesh->tp.size, err, sizeof(err))) {
        if (tr->rank0) fprintf(stderr, "error: %s\n", err);
        comm_exit(&tr->comm, EXIT_FAILURE);
    }
}

// 3. data, checked before anything large is allocated: dp rank r reads its slice of every batch (the cp and tp
// ranks of one dp rank read the same); HellaSwag's examples, the whole file checked against the model's
// vocabulary and T; the tokenizer for samples; the MFU's peak
static void setup_data(Trainer* tr) {
    const Args* a = &tr->args;
    const Mesh* mesh = &tr->comm.mesh;
    dataloader_init(&tr->train_loader, a->train_data, "--train-data", a->B, a->T, mesh->dp.rank, mesh->dp.size, a->shuffle,
                    (uint64_t)a->seed, tr->cfg.vocab_size);
    if (a->val_data) dataloader_init(&tr->val_loader, a->val_data, "--val-data", a->B, a->T, 0, 1, 0, 0, tr->cfg.vocab_size);
    if (a->hellaswag) {
        hellaswag_load(&tr->hs, a->hellaswag, "--hellaswag", tr->cfg.vocab_size, a->T);
        int every = a->hellaswag_every > 0 ? a->hellaswag_every : a->val_every;
        if (tr->rank0) {
            printf("hellaswag: %s, %d examples: acc_norm ", a->hellaswag, tr->hs.num_examples);
            if (every > 0) printf("every %d steps and ", every);
            printf("after the last step\n");
        }
    }
    tr->have_tok = a->tokenizer && tokenizer_init_if_found(&tr->tok, a->tokenizer, tr->rank0,
                                                           strcmp(a->tokenizer, DEFAULT_TOKENIZER) ? "" : DEFAULT_DATA_HOW " makes it");
    tr->eot = tr->have_tok ? (int)tr->tok.eot_token : 50256;
    // --peak-tflops, or a GEMM measured now on every rank at once
    tr->peak.tflops = a->peak_tflops > 0.0f ? (double)a->peak_tflops : measure_peak_tflops(&tr->peak.n);
    tr->steps = a->steps;
    if (tr->steps < 0) tr->steps = (int)(dataloader_num_samples(&tr->train_loader) / (a->total_batch / a->T));
    if (tr->steps <= 0) tr->steps = 1;
}

// the selection bias (llm/train/moe_balance.h) where the routers read it: every chunk's moe layers, the sampler's;
// NULL while inactive (--expert-bias-rate 0 and no bias from a checkpoint). Again after a resume or a rollback.
static void moe_bias_attach(Trainer* tr) {
    for (int c = 0; c < tr->pipe.vpp; c++) {
        for (int l = 0; l < tr->cfg.num_layers; l++) {
            if (layer_is_moe(tr->cfg, l)) stage_set_moe_bias(&tr->pipe.chunks[c], l, moe_balance_layer(&tr->moe_bias, l));
        }
    }
    tr->sampler.moe_bias = tr->moe_bias.active ? tr->moe_bias.dev : NULL;
}

// 4. the parts, each taking what it needs from the mesh: the units this pipeline rank runs
// (llm/parallel/pipeline.h), what it holds of them (llm/parallel/dp.h: DDP or ZeRO-1/2/3, with --inject's
// gradient faults behind its hook), its stages that run them on a micro-batch (llm/model/stage.h: the
// linears split over tp, the sequences over cp) and the executor of the schedule, FP8, and the sampler
static void setup_parts(Trainer* tr) {
    const Args* a = &tr->args;
    Comm* comm = &tr->comm;
    int* held = (int*)mallocCheck((size_t)num_units(tr->cfg) * sizeof(int));
    int vshape = schedule_is_v(a->schedule);  // the V: the first and the last stage on pp rank 0
    pipe_held_units(tr->cfg, comm->mesh.pp.size, a->vpp, vshape, comm->mesh.pp.rank, held);
    DpConfig dc = {a->zero, held, a->sequence_parallel, inject_grad_hook(&tr->faults), vshape};
    dp_init(&tr->dp, comm, tr->cfg, &dc);
    free(held);
    pipeline_init(&tr->pipe, comm, &tr->dp, tp_group(comm, a->sequence_parallel), cp_group(comm, a->T, a->cp_impl, a->cp_balance),
                  a->schedule, a->vpp, tr->grad_accum, a->B, a->T, (Recompute)a->recompute);
    tr->pipe.overlap_pairs = a->overlap_pairs != 0;  // (dualpipev's pairs: llm/parallel/pipeline_pair.h)
    for (int c = 0; c < tr->pipe.vpp; c++) stage_set_moe(&tr->pipe.chunks[c], a->capacity_factor, a->aux_loss_coef, a->z_loss_coef);
    moe_balance_init(&tr->moe_bias, tr->cfg, a->expert_bias_rate);
    // FP8 linear layers: the recipe's scales and amax histories (llm/precision/fp8_linear.h)
    Fp8Config fc = {(Fp8Recipe)a->fp8, a->fp8_e4m3, a->fp8_history, a->fp8_reduce, a->fp8_margin};
    pipeline_enable_fp8(&tr->pipe, &tr->fp8, fc);
    sampler_init(&tr->sampler, tr->pipe.chunks, tr->pipe.vpp);  // the chunks' stages, decoded over the pipeline's messages
    pipeline_sampler_link(&tr->pipe, &tr->sampler);
    moe_bias_attach(tr);
    if (tr->rank0 && !a->generate) print_run_header(&tr->args, &tr->comm, &tr->cfg, &tr->dp, &tr->pipe, &tr->fp8, &tr->train_loader, tr->grad_accum,
                                    tr->steps, tr->peak.tflops, tr->peak.n);
}

// 5. the state of the run: the optimizer's, the loss scaler's, the health checks', the checkpoints'; the
// parameters fresh or resumed (each rank keeps its part of the state file); the log
static void setup_state(Trainer* tr) {
    const Args* a = &tr->args;
    tr->oc = args_optim_config(a, tr->steps);
    LossScaler* sc = &tr->scaler;  // loss scaling (llm/precision/loss_scale.h): --loss-scale, default dynamic in FP16 builds
    loss_scaler_init(sc, (LossScaleMode)a->loss_scale, a->loss_scale_init, a->loss_scale_window);
    if (tr->rank0) loss_scaler_print(sc);
    rng_init(&tr->sample_rng, (uint64_t)a->seed * 0x2545F4914F6CDD1Dull + 1);
    // the health checks (llm/faults/health.h): spikes and NaN/inf skip a step, streaks and SDC roll back
    HealthConfig hc = {a->spike_zscore, a->spike_window, a->spike_factor, a->max_bad_steps, a->sdc_check_every};
    health_init(&tr->health, hc, sc->mode != LOSS_SCALE_NONE, sc->mode == LOSS_SCALE_DYNAMIC);
    // the checkpoints (llm/ckpt/ckpt_run.h): what they hold, where the run keeps it, and how they are written
    tr->run = (RunState){&tr->dp, &tr->fp8, sc, &tr->sample_rng, &tr->health, &tr->train_loader, &tr->oc, {a->beta1, a->beta2, a->eps}, &tr->moe_bias};
    run_ckpt_init(&tr->ck, &tr->comm, &tr->dp, &tr->faults, a->output_dir, a->checkpoint_format, a->async_checkpoint,
                  a->keep_checkpoints, a->schedule, a->vpp);
    if (a->resume) {
        // the newest good checkpoint of --output-dir (latest), or the one named, verified (llm/ckpt/ckpt_resume.h)
        tr->start_step = run_resume(&tr->comm, a->resume, a->output_dir, &tr->run, tr->resumed_from, sizeof(tr->resumed_from));
        moe_bias_attach(tr);  // (a checkpoint's bias)
    } else {
        if (tr->from_descriptor) {
            tr->init_params = (float*)mallocCheck(tr->dp.lay.num_parameters * sizeof(float));
            init_parameters(tr->cfg, (uint64_t)a->seed, tr->init_params);
        }
        dp_import_params(&tr->dp, tr->init_params, 0);
    }
    free(tr->init_params);  // (imported: no longer needed)
    tr->faults.reached = tr->start_step;  // an injected fault of a step run before (by an earlier process) does not strike again
    dataloader_probe(&tr->train_loader);  // a bad shard reported before the log or any checkpoint is written
    if (a->val_data) dataloader_probe(&tr->val_loader);
    if (a->log_path) snprintf(tr->log_path, sizeof(tr->log_path), "%s", a->log_path);
    else snprintf(tr->log_path, sizeof(tr->log_path), "%s/log.jsonl", a->output_dir);
    if (!tr->rank0) { logger_init(&tr->logger, NULL, 0); return; }
    args_make_output_dirs(a);
    logger_init(&tr->logger, tr->log_path, a->resume != NULL);
    if (a->resume == NULL) ckpt_good_reset(a->output_dir);  // a fresh run: no good checkpoint yet
    else ckpt_good_drop_after(a->output_dir, tr->start_step);  // resumed: none from after its start
    if (a->resume != NULL) logger_log_resume(&tr->logger, tr->start_step, tr->resumed_from);  // (the steps after it start over)
    printf("log: %s\n", tr->log_path);
    print_memory(&tr->dp, pipeline_first(&tr->pipe));
    printf("AdamW: lr %g, beta1 %g, beta2 %g, eps %g, weight decay %g, grad clip %g\n", tr->oc.lr, tr->oc.beta1, tr->oc.beta2,
           tr->oc.eps, tr->oc.weight_decay, tr->oc.grad_clip);
    if (a->sdc_check_every > 0 && tr->dp.zero.shard_params && tr->comm.mesh.dp.size > 1) {
        printf("sdc check: ZeRO-3 keeps no replica of a parameter in the dp group: nothing to compare\n");
    }
}

// what the loop measured, for the end of the run: the steps after the first (which warms up)
typedef struct {
    double total_ms, total_wait, total_cp_ms;
    int timed_steps;
    CommLedger step_ledger;  // the collectives of the last optimizer step
    DpTrace* step_trace;     // and the order of its data-parallel operations
    Progress progress;       // the elapsed time and the time left on the step line, the summary at the end
} LoopStats;

// 6. the training loop: optimizer steps start_step+1 .. steps. Every rank runs all of it (val loss, samples and
// the evaluation too: under ZeRO-3 every forward needs the whole group).
static void train_loop(Trainer* tr, LoopStats* ls) {
    const Args* a = &tr->args;
    Comm* comm = &tr->comm;
    int B = a->B, T = a->T, m = tr->grad_accum, steps = tr->steps, rank0 = tr->rank0;
    int* step_inputs = (int*)mallocCheck((size_t)m * B * T * sizeof(int));   // (m, B, T)
    int* step_targets = (int*)mallocCheck((size_t)m * B * T * sizeof(int));  // (m, B, T)
    memset(ls, 0, sizeof(*ls));
    ls->step_trace = (DpTrace*)mallocCheck(sizeof(DpTrace));
    memset(ls->step_trace, 0, sizeof(DpTrace));
    Straggler straggler;  // every N steps, the ranks' compute times compared (llm/faults/straggler.h)
    straggler_init(&straggler, a->straggler_every, a->straggler_factor);
    if (a->val_data && a->val_every > 0) {
        float vloss = val_loss_said(&tr->pipe, &tr->val_loader, a->val_steps, tr->start_step, rank0);
        logger_log_eval(&tr->logger, tr->start_step, "val_loss", vloss);
    }
    Progress* progress = &ls->progress;
    progress_init(progress, tr->start_step + 1, steps, a->print_every, a->total_batch);
    preempt_install(a->save_on_signal);  // from now on SIGTERM / SIGINT save the step in flight (llm/faults/preempt.h)
    for (int step = tr->start_step + 1; step <= steps; step++) {
        int last = step == steps;
        comm->wd.step = step;  // the watchdog's line names it
        ledger_reset(comm);
        comm_take_wait_ms(comm);  // what val, samples and checkpoints waited is not this step's
        tr->pipe.trace_on = a->trace != NULL && last;
        dataloader_next_step(&tr->train_loader, m, step_inputs, step_targets);  // every rank reads the step's batches

        // the step, timed: faults first (--inject: die, hang, slow, spike, NaN), then the update, then a flipped bit
        pipeline_cp_attention_ms(&tr->pipe);  // (what val and samples computed is not this step's)
        double t0 = wall_ms();
        straggler_step_begin(&straggler, comm);
        inject_before_step(&tr->faults, comm, step, step_targets, (size_t)m * B * T, tr->cfg.vocab_size);
        StepResult r = train_step(&tr->pipe, &tr->dp, &tr->scaler, &tr->fp8, &tr->health, &tr->moe_bias, &tr->moe_log, &tr->oc, &tr->faults, step_inputs,
                                  step_targets, step, (unsigned int)(a->seed + 7919u * (unsigned)step));
        inject_after_update(&tr->faults, &tr->dp, step);
        double ms = wall_ms() - t0;
        double wait = comm_take_wait_ms(comm);  // how long the computation waited for reductions and gathers
        ls->step_ledger = comm->ledger;
        *ls->step_trace = tr->dp.trace;
        double cp_ms = pipeline_cp_attention_ms(&tr->pipe);
        if (step > tr->start_step + 1) { ls->total_ms += ms; ls->total_wait += wait; ls->total_cp_ms += cp_ms; ls->timed_steps++; }
        straggler_step_end(&straggler, comm, &tr->logger, step, ms, wait);

        // a SIGTERM or SIGINT on any rank saves this step and ends the run (llm/faults/preempt.h); silent data
        // corruption: the replicas' parameter hashes, every N steps and before a checkpoint (llm/faults/health.h)
        int sig_rank = -1, sig = a->save_on_signal ? preempt_agree(comm, &sig_rank) : 0;
        int ckpt_step = sig || (a->checkpoint_every > 0 && (step % a->checkpoint_every == 0 || last));
        char sdc_msg[400] = "";
        if (a->sdc_check_every > 0 && (step % a->sdc_check_every == 0 || ckpt_step) && sdc_check(&tr->dp, sdc_msg, sizeof(sdc_msg))) {
            if (rank0) printf("step %d: %s\n", step, sdc_msg);
        }

        // val loss, HellaSwag, the step's line, a sample, the checkpoint of the model after this step with the health
        // checks' verdict on it (llm/ckpt/ckpt_run.h)
        float vloss = NAN;
        if (!sig && a->val_data && a->val_every > 0 && (step % a->val_every == 0 || last)) {
            vloss = val_loss_said(&tr->pipe, &tr->val_loader, a->val_steps, step, rank0);
        }
        EvalCounts hs_counts = {0, 0};  // (examples 0: not evaluated at this step)
        if (!sig && a->hellaswag && hellaswag_due(a->hellaswag_every, a->val_every, step, steps)) {
            hs_counts = hellaswag_said(&tr->pipe, &tr->hs, step, rank0, a->hellaswag_losses);
        }
        double tok_s = (float)(a->total_batch / (ms / 1e3));
        double mfu = mfu_of_step(&tr->peak, model_flops_per_token(&tr->cfg, T), tok_s, comm->world_size, &tr->logger, rank0, step);
        progress_step_line(progress, &tr->logger, rank0, step, steps, &r, vloss, ms, tok_s, mfu,
                    comm->mesh.dp.size > 1 || tr->dp.zero.shard_optim ? wait : NAN, tr->scaler.mode != LOSS_SCALE_NONE, hs_counts);
        if (!sig && a->sample_every > 0 && (step % a->sample_every == 0 || last)) {
            print_sample(&tr->sampler, tr->eot, a->sample_len, &tr->sample_rng, tr->have_tok ? &tr->tok : NULL, rank0, step);
        }
        if (ckpt_step) {
            if (rank0) printf("step %d: saving the checkpoint into %s/%s\n", step, a->output_dir, a->async_checkpoint ? " (written in the background)" : "");
            progress->ckpt_step = step;
            run_ckpt_save(&tr->ck, &tr->run, step, sdc_msg[0] ? CKPT_SDC : tr->health.bad_streak > 0 ? CKPT_IN_STREAK : CKPT_HEALTHY);
        }
        run_ckpt_poll(&tr->ck);  // an async save done on every rank gets its manifest
        if (sig) run_preempted_exit(&tr->ck, step, sig, sig_rank);
        // after max_bad_steps bad steps in a row, or an SDC mismatch: back to the newest last-known-good checkpoint
        if (sdc_msg[0] != '\0' || health_needs_rollback(&tr->health)) {
            step = run_rollback(&tr->ck, &tr->run, &tr->logger, step, sdc_msg);
            moe_bias_attach(tr);  // (the checkpoint's bias)
        }
    }
    run_ckpt_finish(&tr->ck);  // the last save, waited for
    free(step_inputs);
    free(step_targets);
}

// 7. the end: the averages, the held-out exact-match evaluation, the memory and the collectives of the last step
// beside the papers' numbers, the report and the trace
static void finish(Trainer* tr, LoopStats* ls) {
    const Args* a = &tr->args;
    Comm* comm = &tr->comm;
    DataParallel* dp = &tr->dp;
    int rank0 = tr->rank0, timed = ls->timed_steps, dp_comm = comm->mesh.dp.size > 1 || dp->zero.shard_optim;
    if (rank0 && timed > 0) {
        printf("average step time %.1f ms", ls->total_ms / timed);
        if (dp_comm) printf(" | comm wait %.2f ms per step", ls->total_wait / timed);
        printf("\n");
    }
    if (comm->mesh.cp.size > 1 && timed > 0) pipeline_print_cp_balance(&tr->pipe, ls->total_cp_ms / timed);
    double diff = comm->mesh.pp.size > 1 ? dp_tied_embedding_diff(dp) : 0.0;  // the tied embedding's two copies stay identical
    if (rank0 && comm->mesh.pp.size > 1 && dp->embed_local) printf("tied embedding: one copy, the first and the last stage on pp rank 0\n");
    else if (rank0 && comm->mesh.pp.size > 1) printf("tied embedding: max |first stage - last stage| = %g over %zu values\n", diff, dp->lay.units[UNIT_EMBED].n);
    if (a->eval_file) {
        if (rank0) printf("exact-match evaluation on %s:\n", a->eval_file);
        float acc = exact_match_eval(&tr->sampler, a->eval_file, tr->eot, tr->have_tok ? &tr->tok : NULL, rank0 ? 8 : 0);
        if (rank0) printf("held-out exact-match accuracy: %.2f%%\n", 100.0f * acc);
        logger_log_eval(&tr->logger, tr->steps, "exact_match", acc);
    }
    comm->ledger = ls->step_ledger;
    const Stage* stage = pipeline_first(&tr->pipe);  // the report's per-layer figures
    if (rank0) print_memory(dp, stage);  // the peaks now include the training steps
    if (rank0 && dp_comm) print_step_traffic(comm, dp, tr->grad_accum);
    if (a->report_json) {
        char pipe_json[512];
        pipeline_report_json(&tr->pipe, pipe_json, sizeof(pipe_json));
        write_report(a->report_json, dp, stage, comm, ls->step_trace, tr->grad_accum, timed ? ls->total_wait / timed : 0.0, timed, pipe_json);
    }
    if (a->trace) {  // the last step, from every rank
        double sim_bubble = 0.0, bubble = pipeline_write_trace(&tr->pipe, a->trace, tr->steps, &sim_bubble);
        if (rank0) printf("trace of step %d: %s | pipeline bubble measured %.3f, simulated with the measured op times %.3f\n",
                          tr->steps, a->trace, bubble, sim_bubble);
    }
    if (rank0) progress_summary(&ls->progress, tr->log_path, a->output_dir, a->checkpoint_format);  // what was done, where it is
}

// --generate N: the model's continuation of --prompt-tokens, N new tokens (at most to the model's context), printed
// by rank 0 (llm/train/generate.h), then the end. The parts of step 4 hold the parameters as a training run of
// this layout would (a checkpoint or, from a descriptor, a fresh model of the seed) and the sampler decodes them
// with its KV cache over the pipeline's messages, drawing at --temperature among the --sample-top-k most likely
// tokens from the seed's generator (the training samples' own), greedy at temperature 0. Nothing is written.
static int generate(Trainer* tr) {
    const Args* a = &tr->args;
    GPTConfig c = tr->cfg;
    tr->have_tok = a->tokenizer && tokenizer_init_if_found(&tr->tok, a->tokenizer, 0, "");
    tr->eot = tr->have_tok ? (int)tr->tok.eot_token : 50256;
    int* tokens = (int*)mallocCheck((size_t)c.max_seq_len * sizeof(int));  // (maxT)
    int len = 0;
    prompt_tokens_parse(a->prompt_tokens, c.vocab_size, c.max_seq_len, tr->eot, tokens, &len);  // before any allocation
    setup_parts(tr);
    if (tr->from_descriptor) {
        tr->init_params = (float*)mallocCheck(tr->dp.lay.num_parameters * sizeof(float));
        init_parameters(c, (uint64_t)a->seed, tr->init_params);
    }
    dp_import_params(&tr->dp, tr->init_params, 0);
    free(tr->init_params);
    rng_init(&tr->sample_rng, (uint64_t)a->seed * 0x2545F4914F6CDD1Dull + 1);
    tr->sampler.temperature = a->temperature;
    tr->sampler.top_k = a->sample_top_k;
    int prompt_len = len;
    len = sampler_generate(&tr->sampler, tokens, len, a->generate, -1, a->temperature > 0.0f ? &tr->sample_rng : NULL);
    if (tr->rank0) {
        fprintf(stderr, "generate: %d prompt tokens + %d new (temperature %g, sample-top-k %d, seed %d)%s\n", prompt_len,
                len - prompt_len, a->temperature, a->sample_top_k, a->seed,
                len - prompt_len < a->generate ? ": stopped at the model's context length maxT" : "");
        if (a->tokenizer && !tr->have_tok) fprintf(stderr, "generate: tokenizer %s not found: printing token ids\n", a->tokenizer);
        generate_print(tr->have_tok ? &tr->tok : NULL, tokens, len, tr->eot);
    }
    free(tokens);
    if (tr->have_tok) tokenizer_free(&tr->tok);
    sampler_free(&tr->sampler);
    moe_balance_free(&tr->moe_bias);
    pipeline_free(&tr->pipe);
    fp8_free(&tr->fp8);
    dp_free(&tr->dp);
    context_free();
    comm_free(&tr->comm);
    return 0;
}

int main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);  // each line as it is printed, also into a file or a pipe (tee, a job's log)
    Trainer tr = {};  // (zeroed; the parts point into it: it stays here for the whole run)
    setup_processes(&tr, &argc, &argv);
    setup_model(&tr);
    if (tr.args.generate > 0) return generate(&tr);  // a prompt in, text out: no data, no training
    setup_data(&tr);
    setup_parts(&tr);
    setup_state(&tr);
    LoopStats ls;  // (the loop's measurements, for the end)
    train_loop(&tr, &ls);
    finish(&tr, &ls);
    health_free(&tr.health);
    free(ls.step_trace);
    logger_free(&tr.logger);
    if (tr.have_tok) tokenizer_free(&tr.tok);
    dataloader_free(&tr.train_loader);
    if (tr.args.val_data) dataloader_free(&tr.val_loader);
    if (tr.args.hellaswag) hellaswag_free(&tr.hs);
    sampler_free(&tr.sampler);
    moe_balance_free(&tr.moe_bias);
    pipeline_free(&tr.pipe);
    fp8_free(&tr.fp8);
    run_ckpt_free(&tr.ck);
    dp_free(&tr.dp);
    context_free();
    comm_free(&tr.comm);
    return 0;
}
