// ckpt_run.h: the training run's checkpoints, from the loop's side. What a checkpoint holds (RunState:
// the model and AdamW's state in the data-parallel storage and its hyperparameters, the FP8 recipes' state, the loss scaler, the
// sampler's RNG, the health checks' windows and streak, the data position, the moe layers' selection bias), saving it after a step in
// the run's format (--checkpoint-format gathered: llm.c's model_<step>.bin and the resumable
// state_<step>.bin, llm/ckpt/checkpoint.h; sharded: ckpt_<step>/, llm/ckpt/ckpt_shard.h, in the background with
// --async-checkpoint; or both) with the verdict of the step it follows, and putting one back into the run
// (a resume, or the rollback that llm/faults/health.h calls for: run_rollback below). A failed save ends
// every rank with one line and leaves nothing of that step on disk; the earlier checkpoints are untouched.
#pragma once
#include "../core/common.h"
#include "../comm/comm.h"
#include "../parallel/dp.h"
#include "../parallel/dp_export.h"
#include "../precision/fp8_linear.h"
#include "../precision/loss_scale.h"
#include "../core/rand.h"
#include "../train/dataloader.h"
#include "../faults/inject.h"
#include "../faults/health.h"
#include "../faults/preempt.h"
#include "../train/logger.h"
#include "../train/moe_balance.h"
#include "checkpoint.h"
#include "ckpt_dir.h"
#include "ckpt_shard.h"
#include "ckpt_resume.h"

// what a checkpoint holds, where the run keeps it
typedef struct {
    DataParallel* dp;
    Fp8State* fp8;
    LossScaler* scaler;
    Rng* sample_rng;
    Health* health;
    DataLoader* loader;    // the training data
    OptimConfig* oc;       // AdamW's beta1, beta2, eps are saved; the rest of it comes from the flags
    float adamw_given[3];  // --beta1, --beta2, --eps as given (NAN: not given: a resumed run keeps its checkpoint's)
    MoeBalance* moe_bias;  // --expert-bias-rate's selection bias (saved while the routers read it)
} RunState;

typedef struct {
    Comm* comm;
    const char* out_dir;
    int format;            // 0 gathered, 1 sharded, 2 both
    const InjectPlan* inject;
    Ckpt shards;           // the sharded (and asynchronous) saves, formats 1 and 2
} RunCkpt;

static void run_ckpt_init(RunCkpt* rc, Comm* comm, DataParallel* dp, const InjectPlan* inject, const char* out_dir, int format,
                          int async, int keep, const char* schedule, int vpp) {
    memset(rc, 0, sizeof(*rc));
    rc->comm = comm; rc->out_dir = out_dir; rc->format = format; rc->inject = inject;
    if (format > 0) ckpt_init(&rc->shards, comm, dp, inject, out_dir, async, keep, schedule, vpp);
}

// after a step: the save in flight, if it is done on every rank, gets its manifest (every rank calls it)
static void run_ckpt_poll(RunCkpt* rc) { if (rc->format > 0) ckpt_poll(&rc->shards); }
// the save in flight, finished (before a rollback reads the list, and at the end of the run)
static void run_ckpt_finish(RunCkpt* rc) { if (rc->format > 0) ckpt_finish(&rc->shards); }
static void run_ckpt_free(RunCkpt* rc) { if (rc->format > 0) ckpt_free(&rc->shards); }

// The state after `step` into a checkpoint, every rank together. verdict: the health checks' word on the
// step (CKPT_HEALTHY: a last-known-good checkpoint once complete).
static void run_ckpt_save(RunCkpt* rc, const RunState* rs, int step, int verdict) {
    DataParallel* dp = rs->dp;
    Comm* c = rc->comm;
    int rank0 = c->world_rank == 0;
    Fp8State* fp8 = rs->fp8;
    const Health* h = rs->health;
    float* fp8_state = (float*)mallocCheck((fp8_state_floats(fp8) + 1) * sizeof(float));  // (fp8_state_floats)
    fp8_state_export(fp8, fp8_state);
    float* health_state = (float*)mallocCheck(2 * (size_t)h->cfg.window * sizeof(float));  // (2, window)
    int health_n = health_export(h, health_state);
    const LossScaler* ls = rs->scaler;
    TrainState ts = {step, dp->opt.t, dataloader_position(rs->loader), rs->sample_rng->state, (int)fp8->cfg.recipe,
                     fp8_state_floats(fp8), fp8_state, STATE_FLOATX_KIND, ls->mode != LOSS_SCALE_NONE ? ls->scale : 0.0f,
                     ls->good_steps, ls->skipped, health_n, health_state, h->bad_streak, h->skipped, verdict,
                     rs->oc->beta1, rs->oc->beta2, rs->oc->eps, (int)moe_balance_saved(rs->moe_bias), rs->moe_bias->host};
    if (rc->format != 1) {
        // the whole model and optimizer state, gathered from the shards (every rank takes part); rank 0 writes
        size_t n = dp->lay.num_parameters;
        float* p = (float*)mallocCheck(n * sizeof(float));                                // (Psi)
        float* m = (float*)mallocCheck(n * sizeof(float));                                // (Psi)
        float* v = (float*)mallocCheck(n * sizeof(float));                                // (Psi)
        float* p16 = ADAMW_HAS_MASTER ? (float*)mallocCheck(n * sizeof(float)) : NULL;  // (Psi) the 16-bit parameters
        dp_export(dp, p, m, v);
        if (p16) dp_export_floatx(dp, p16);
        AtomicFile af;
        memset(&af, 0, sizeof(af));
        int failed = 0;
        char model_path[1100], state_path[1100];
        snprintf(model_path, sizeof(model_path), "%s/model_%08d.bin", rc->out_dir, step);
        snprintf(state_path, sizeof(state_path), "%s/state_%08d.bin", rc->out_dir, step);
        if (rank0) {
            const InjectFault* f = inject_find(rc->inject, INJECT_DISKFAIL, step, 0);
            const InjectFault* slow = inject_find(rc->inject, INJECT_SLOWDISK, step, 0);
            long fail_at = f ? f->bytes : -1;
            int slow_ms = slow ? slow->ms : 0;
            if (verdict == CKPT_HEALTHY) ckpt_good_add(rc->out_dir, (CkptRef){step, 0});  // (listed as its save starts)
            // llm.c's version 5 is BF16; an FP16 run writes its model as version 3 (FP32)
            failed = !checkpoint_save(&af, model_path, dp->lay.cfg, p, STATE_FLOATX_KIND == 1 ? 5 : 3, fail_at, slow_ms);
            if (!failed) failed = !state_save(&af, state_path, dp->lay.cfg, &ts, p, m, v, p16, fail_at >= 0 ? fail_at - (long)af.bytes : -1, slow_ms);
            if (failed) {  // nothing of this step stays (the model file may be whole, but the checkpoint is not)
                remove(model_path);
                ckpt_good_drop_after(rc->out_dir, step - 1);
            } else {
                printf("saved %s and %s%s\n", model_path, state_path,
                       verdict == CKPT_HEALTHY ? "" : verdict == CKPT_IN_STREAK ? " (not good: saved inside a streak of bad steps)"
                                                                            : " (not good: rejected by the SDC check)");
            }
        }
        free(p); free(m); free(v); free(p16);
        if (ckpt_first_bad(c, failed) >= 0) {
            if (failed) fprintf(stderr, "error: checkpoint of step %d not saved: %s; training state and earlier checkpoints intact\n", step, af.why);
            comm_exit(c, EXIT_FAILURE);
        }
    }
    // each rank its own part, in the background with --async-checkpoint (llm/ckpt/ckpt_shard.h)
    if (rc->format > 0) ckpt_save(&rc->shards, dp, &ts);
    free(fp8_state);
    free(health_state);
}

// A checkpoint read back (llm/ckpt/ckpt_resume.h) into the run: the model, the AdamW moments and step, the FP8
// state, the loss scaler, the sampler's RNG, the health checks' windows and streak; and the data position
// when with_data (a resume; a rollback keeps the data where they are). path: for messages.
static void run_state_import(const RunState* rs, const LoadedState* st, int with_data, const char* path) {
    DataParallel* dp = rs->dp;
    const TrainState* ts = &st->ts;
    dp_import_params(dp, st->params, 1);
    if (st->params16 != NULL && ADAMW_HAS_MASTER && ts->params16_kind == STATE_FLOATX_KIND) dp_import_floatx(dp, st->params16);  // the 16-bit parameters exactly
    dp_import_moments(dp, st->m, st->v);
    dp->opt.t = ts->adam_t;
    fp8_resume(rs->fp8, ts->fp8_recipe, ts->fp8, ts->fp8_n, path);
    if (with_data) dataloader_seek(rs->loader, ts->data);
    health_import(rs->health, ts->health, ts->health_n, ts->bad_streak, ts->bad_skipped);
    LossScaler* ls = rs->scaler;
    if (ts->loss_scale > 0.0f && ls->mode != LOSS_SCALE_NONE) {  // the scaler goes on where it was
        ls->scale = ts->loss_scale;
        ls->good_steps = ts->loss_scale_good_steps;
        ls->skipped = ts->loss_scale_skipped;
    }
    rs->sample_rng->state = ts->rng;
    moe_balance_set(rs->moe_bias, ts->moe_bias, (size_t)ts->moe_bias_n);  // (none saved: zero)
    // AdamW's hyperparameters: the checkpoint's, where no flag gave them (a rollback keeps the run's own)
    float saved[3] = {ts->beta1, ts->beta2, ts->eps};
    float* now[3] = {&rs->oc->beta1, &rs->oc->beta2, &rs->oc->eps};
    const char* flag[3] = {"--beta1", "--beta2", "--eps"};
    for (int i = 0; with_data && i < 3; i++) {
        if (isnan(rs->adamw_given[i])) *now[i] = saved[i];
        else if (rs->adamw_given[i] != saved[i]) note("%s %g given: %s was trained with %g until now", flag[i], rs->adamw_given[i], path, saved[i]);
    }
}

// --resume: latest (the newest good checkpoint of the output directory) or a path; every rank. The state
// goes into the run (data position included); returns its step, the checkpoint's path in path.
static int run_resume(Comm* c, const char* resume, const char* out_dir, const RunState* rs, char* path, size_t cap) {
    LoadedState st;
    if (!strcmp(resume, "1") || !strcmp(resume, "latest")) {
        if (ckpt_read_newest_good(c, out_dir, INT_MAX, &rs->dp->lay, &st, path, cap, "resume") < 0) {
            if (c->world_rank == 0) {
                fprintf(stderr, "error: --resume latest: no good checkpoint in --output-dir %s (each one tried is named above with why "
                        "it was skipped)\n", out_dir);
            }
            comm_exit(c, EXIT_FAILURE);
        }
    } else {
        snprintf(path, cap, "%s", resume);
        ckpt_read_explicit(c, path, &rs->dp->lay, &st);
    }
    run_state_import(rs, &st, 1, path);
    int step = st.ts.step;
    loaded_state_free(&st);
    note("resumed from %s at step %d", path, step);
    return step;
}

// A SIGTERM or SIGINT on rank sig_rank (llm/faults/preempt.h) after the state of `step` was saved: the save
// finished, one line, and every rank ends with 128 + the signal's number.
static void run_preempted_exit(RunCkpt* rc, int step, int sig, int sig_rank) {
    run_ckpt_finish(rc);
    if (rc->comm->world_rank == 0) {
        printf("step %d: %s on rank %d: the state after step %d is saved in %s; exiting with status %d (128 + %s); "
               "--resume latest goes on from here\n", step, preempt_signal_name(sig), sig_rank, step, rc->out_dir, 128 + sig,
               preempt_signal_name(sig));
    }
    comm_exit(rc->comm, 128 + sig);
}

// The rollback's checkpoint, on every rank (after a streak of bad steps, or sdc_msg non-empty: an SDC
// mismatch): the newest last-known-good one at or before `step` (llm/ckpt/ckpt_dir.h) read into st
// (llm/ckpt/ckpt_resume.h; the caller puts it into the run and frees it), why it was needed into why, its
// path into path; returns its step; rank 0 drops the list's entries after it, and the health state h
// records it (the streak ends). Without one, or when it is the one the previous rollback went to, rank 0
// prints one line and every rank exits with HEALTH_EXIT_CODE (llm/faults/health.h).
static int run_rollback_read(Health* h, Comm* c, const char* dir, int step, const char* sdc_msg, const ParamLayout* lay,
                             LoadedState* st, char* why, size_t why_cap, char* path, size_t path_cap) {
    if (sdc_msg[0] != '\0') snprintf(why, why_cap, "%s", sdc_msg);
    else snprintf(why, why_cap, "%d bad steps in a row (the last: %s)", h->bad_streak, h->reason);
    comm_barrier(c, GROUP_WORLD);  // (rank 0's list is complete: every rank reads it)
    int to = ckpt_read_newest_good(c, dir, step, lay, st, path, path_cap, "rollback");
    if (to < 0 || to == h->last_rollback) {
        if (to >= 0) loaded_state_free(st);
        if (c->world_rank == 0) {
            fprintf(stderr, "error: step %d: %s, and %s: stopping (exit %d)\n", step, why,
                    to < 0 ? "no last-known-good checkpoint to roll back to"
                           : "the last-known-good checkpoint is the one the previous rollback restored",
                    HEALTH_EXIT_CODE);
        }
        comm_exit(c, HEALTH_EXIT_CODE);
    }
    comm_barrier(c, GROUP_WORLD);  // every rank has chosen before rank 0 rewrites the list
    if (c->world_rank == 0) ckpt_good_drop_after(dir, to);
    h->last_rollback = to;
    h->bad_streak = 0;
    return to;
}

// The rollback that llm/faults/health.h calls for (health_needs_rollback: a streak of bad steps; or an SDC
// mismatch, sdc_msg non-empty) at `step`: the save in flight completes, the newest last-known-good
// checkpoint goes back into the run (or one line and exit 3); the data go on from where they are. Returns
// the step restored: the loop goes on with the one after it.
static int run_rollback(RunCkpt* rc, const RunState* rs, Logger* lg, int step, const char* sdc_msg) {
    run_ckpt_finish(rc);
    char why[500], path[1100];
    LoadedState st;
    int to = run_rollback_read(rs->health, rc->comm, rc->out_dir, step, sdc_msg, &rs->dp->lay, &st, why, sizeof(why), path, sizeof(path));
    run_state_import(rs, &st, 0, path);
    loaded_state_free(&st);
    DataPosition at = dataloader_position(rs->loader);
    if (rc->comm->world_rank == 0) {
        printf("step %d: rollback: %s: restored %s (step %d); the data go on from epoch %lld sample %lld\n", step, why, path, to,
               (long long)at.epoch, (long long)at.sample);
    }
    logger_log_rollback(lg, step, to, why);
    return to;
}
