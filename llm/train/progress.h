// progress.h: what a person watching a run reads. The elapsed time and an estimate of the time left on
// the step line, which step lines are printed (--print-every), and the summary at the end of the run
// (steps, tokens, time, the final losses, where the log, the plot and the checkpoints are). Rank 0 only;
// the JSON log (llm/train/logger.h) keeps every step whatever is printed.
#pragma once
#include "../core/common.h"
#include "logger.h"

typedef struct {
    double t0;             // wall ms when the loop started
    int first, last;       // the steps this process runs: first .. last
    int print_every;       // --print-every
    long tokens_per_step;  // the total batch (all ranks)
    float train_loss;      // the last step's
    float val_loss;        // the last measured (NAN: none yet)
    int val_step;
    int hs_correct, hs_examples, hs_step;  // the last HellaSwag evaluation (hs_examples 0: none yet)
    int ckpt_step;         // the last step saved (0: none)
} Progress;

static void progress_init(Progress* p, int first, int last, int print_every, long tokens_per_step) {
    memset(p, 0, sizeof(*p));
    p->t0 = wall_ms();
    p->first = first; p->last = last; p->print_every = print_every; p->tokens_per_step = tokens_per_step;
    p->train_loss = NAN; p->val_loss = NAN;
}

// seconds as a person says them: 4.2s, 3m10s, 2h05m, 3d04h
static void duration_text(double s, char* out, size_t cap) {
    if (!(s >= 0.0) || s > 1e9) { snprintf(out, cap, "?"); return; }
    long t = (long)(s + 0.5);
    if (s < 60.0) snprintf(out, cap, "%.1fs", s);
    else if (t < 3600) snprintf(out, cap, "%ldm%02lds", t / 60, t % 60);
    else if (t < 86400) snprintf(out, cap, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
    else snprintf(out, cap, "%ldd%02ldh", t / 86400, (t % 86400) / 3600);
}

// 1 when step's line is printed: every print_every-th, the first and the last, and any with news (a val
// loss, a skip)
static int progress_show(const Progress* p, int step, int news) {
    return news || step == p->first || step == p->last || step % p->print_every == 0;
}

// "elapsed 1m02s, eta 3m10s" after `step`: the time left is the mean wall time of the steps so far
// (val losses, samples and checkpoints included) times the steps left
static void progress_times(const Progress* p, int step, char* out, size_t cap) {
    double elapsed = (wall_ms() - p->t0) / 1e3;
    int done = step - p->first + 1, left = p->last - step;
    char e[32], r[32];
    duration_text(elapsed, e, sizeof(e));
    duration_text(done > 0 ? elapsed / done * left : NAN, r, sizeof(r));
    snprintf(out, cap, "elapsed %s, eta %s", e, r);
}

// the end of the run: what was done and where its files are. ckpt_format: --checkpoint-format (0
// gathered, 1 sharded, 2 both)
static void progress_summary(const Progress* p, const char* log_path, const char* out_dir, int ckpt_format) {
    double elapsed = (wall_ms() - p->t0) / 1e3;
    int n = p->last - p->first + 1;
    char e[32];
    duration_text(elapsed, e, sizeof(e));
    double tokens = (double)n * p->tokens_per_step;
    printf("done: steps %d..%d | ", p->first, p->last);
    if (tokens < 1e6) printf("%.0f tokens", tokens);
    else printf("%.2f%c tokens", tokens < 1e9 ? tokens / 1e6 : tokens / 1e9, tokens < 1e9 ? 'M' : 'B');
    printf(" | %s (%.1f ms per step, val losses, samples and checkpoints included)", e, n > 0 ? elapsed * 1e3 / n : 0.0);
    printf(" | final train loss %.4f", p->train_loss);
    if (!isnan(p->val_loss)) printf(" | val loss %.4f (step %d)", p->val_loss, p->val_step);
    if (p->hs_examples > 0) printf(" | HellaSwag acc_norm %.4f (step %d)", (double)p->hs_correct / p->hs_examples, p->hs_step);
    printf("\n");
    printf("log: %s (loss plot: python3 scripts/plot_logs.py --out %s/loss.png run=%s)\n", log_path, out_dir, log_path);
    if (p->ckpt_step > 0) {
        printf("checkpoints: %s, the last of step %d:", out_dir, p->ckpt_step);
        if (ckpt_format != 1) printf(" model_%08d.bin + state_%08d.bin", p->ckpt_step, p->ckpt_step);
        if (ckpt_format != 0) printf(" ckpt_%08d/", p->ckpt_step);
        printf(" (--resume latest goes on from the newest good one)\n");
    } else {
        printf("checkpoints: none (--checkpoint-every N saves them)\n");
    }
}

// what one optimizer step did (train_gpt.cu's train_step)
typedef struct {
    float loss, norm, lr, scale;  // the loss averaged over the ranks, the gradient norm, the lr and loss scale used
    float aux, z;                 // a moe model: the load-balancing and z losses in `loss` (NaN: dense)
    const char* moe_log;          // a moe model: the step's routed and dropped counts as log.jsonl keys, or NULL
    const char* skipped;          // why the update was skipped, or NULL
} StepResult;

// a HellaSwag evaluation at a step (llm/train/hellaswag.h): correct of examples; examples 0: none at this step
typedef struct {
    int correct, examples;
} EvalCounts;

// the step's line on the console (rank 0; every --print-every steps) and in log.jsonl (every
// step); wait: NaN without data parallelism; mfu: a fraction (llm/train/mfu.h), a percentage on the console, NaN when
// there is no peak (the emulated build without --peak-tflops); hs: the step's HellaSwag acc_norm, if evaluated
// (console "hellaswag 0.2955 (2967/10042)"; log "hellaswag_acc_norm", "hellaswag_correct", "hellaswag_examples")
static void progress_step_line(Progress* pg, Logger* lg, int rank0, int step, int steps, const StepResult* r, float vloss, double ms,
                        double tok_s, double mfu, double wait, int scaled, EvalCounts hs) {
    pg->train_loss = r->loss;
    if (!isnan(vloss)) { pg->val_loss = vloss; pg->val_step = step; }
    if (hs.examples > 0) { pg->hs_correct = hs.correct; pg->hs_examples = hs.examples; pg->hs_step = step; }
    if (rank0 && progress_show(pg, step, !isnan(vloss) || r->skipped != NULL || hs.examples > 0)) {
        char times[96];
        progress_times(pg, step, times, sizeof(times));
        printf("step %4d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s", step, steps, r->loss, r->lr, r->norm, ms, tok_s);
        if (!isnan(r->aux)) printf(" | aux %.4f z %.4f", r->aux, r->z);
        if (!isnan(mfu)) printf(" | MFU %.1f%%", 100.0 * mfu);
        printf(" | %s", times);
        if (!isnan(wait)) printf(" | comm wait %.1f ms", wait);
        if (scaled) printf(" | loss scale %g", r->scale);
        if (r->skipped) printf(" | skipped (%s)", r->skipped);
        if (!isnan(vloss)) printf(" | val loss %.6f", vloss);
        if (hs.examples > 0) printf(" | hellaswag %.4f (%d/%d)", (double)hs.correct / hs.examples, hs.correct, hs.examples);
        printf("\n");
    }
    const char* extra = r->moe_log;
    char* both = NULL;
    if (hs.examples > 0) {  // the keys after the moe counts, if any
        size_t cap = (extra ? strlen(extra) : 0) + 160;
        both = (char*)mallocCheck(cap);
        char acc[40];
        logger_format_float(acc, sizeof(acc), (float)((double)hs.correct / hs.examples));
        snprintf(both, cap, "%s, \"hellaswag_acc_norm\": %s, \"hellaswag_correct\": %d, \"hellaswag_examples\": %d", extra ? extra : "", acc,
                 hs.correct, hs.examples);
        extra = both;
    }
    logger_log_step(lg, step, r->loss, vloss, r->lr, r->norm, (float)ms, (float)tok_s, (float)mfu, (float)wait, scaled ? r->scale : NAN,
                    r->skipped, r->aux, r->z, extra);
    free(both);
}
