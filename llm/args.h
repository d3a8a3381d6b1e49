// args.h: the trainer's flags: their table (long name, llm.c's short alias, help), the parser, and
// the checks of the layout that need the process count (run once the processes are known, before
// anything is allocated). Bad values end the program with one line naming the flag, what was
// expected and what was found.
#pragma once
#include "common.h"
#include "comm.h"

typedef struct {
    const char* model;          // checkpoint path or descriptor
    const char* train_data;
    const char* val_data;
    const char* tokenizer;
    const char* output_dir;
    const char* log_path;
    const char* resume;         // state file, "latest"/"1" (newest in output dir), or NULL/"0"
    const char* eval_file;      // held-out exact-match problems (shard)
    int B, T;
    long total_batch;
    int steps;
    float lr, lr_final, weight_decay, grad_clip;
    int warmup;
    int seed;
    int shuffle;
    int val_every, val_steps, sample_every, sample_len, checkpoint_every;
    int checkpoint_format;      // 0 gathered (model_/state_ files), 1 sharded (ckpt_<step>/, llm/ckpt_shard.h), 2 both
    int async_checkpoint;       // 1: sharded saves written by a background thread while training goes on
    int keep_checkpoints;       // sharded: keep the last K complete checkpoints (0: all)
    int dp, tp, pp;             // the process mesh; dp 0 = world size / (tp * pp)
    int zero;                   // ZeRO stage: 0 = DDP, 1, 2, 3
    const char* report_json;    // memory and communication report, or NULL
    int recompute;              // activation recompute: 0 none, 1 selective, 2 full (llm/block.h)
    int sequence_parallel;      // 1: the LayerNorm/residual regions split over the tp ranks (llm/tensor_parallel.h)
    const char* schedule;       // the pipeline schedule (llm/schedule.h): gpipe, 1f1b, interleaved, zb-h1
    int vpp;                    // chunks of layers per pipeline rank (interleaved)
    const char* trace;          // Chrome/Perfetto trace of the last training step, or NULL
    int fp8;                    // FP8 linear layers (llm/fp8_linear.h): 0 none, 1 delayed, 2 current, 3 block, 4 mx
    int fp8_e4m3;               // 1: E4M3 gradients too (--fp8-format e4m3); 0: hybrid (E5M2 gradients)
    int fp8_history, fp8_reduce, fp8_margin;  // delayed scaling: amax history length, reduction (0 max, 1 most recent), margin
    const char* inject;         // --inject: faults to cause on purpose (llm/inject.h), or NULL
    int loss_scale;             // llm/loss_scale.h LossScaleMode: 0 none, 1 fixed (loss_scale_init), 2 dynamic
    float loss_scale_init;      // the fixed scale, or dynamic scaling's first one
    int loss_scale_window;      // dynamic: good steps in a row before the scale doubles
    float spike_zscore;         // llm/health.h: a step is bad when its loss or norm has a z-score above this (0: off)
    int spike_window;           // over the last this many healthy steps
    float spike_factor;         // or is more than this times their max (0: off)
    int max_bad_steps;          // bad steps in a row before the rollback to the last good checkpoint (0: never)
    int sdc_check_every;        // parameter hashes compared over the dp replicas every N steps (0: never)
    float comm_timeout;         // seconds a collective or P2P may wait before the job ends (llm/watchdog.h); 0 = off
    int straggler_every;        // compare the ranks' compute time every N steps (llm/straggler.h); 0 = off
    float straggler_factor;     // a rank slower than the median by more than this is named
} Args;

typedef struct {
    const char* long_name;
    char short_name;  // llm.c's flag with the same meaning, 0 if none
    const char* help;
} FlagDoc;

static const FlagDoc FLAGS[] = {
    {"--model", 'e', "llm.c checkpoint path, or a fresh model: dN[,C=..][,NH=..][,maxT=..][,V=..] (default d12)"},
    {"--train-data", 'i', "glob of train token shards"},
    {"--val-data", 'j', "glob of val token shards (empty: no validation)"},
    {"--tokenizer", 0, "llm.c tokenizer file for decoding samples (empty: print token ids)"},
    {"--batch", 'b', "micro-batch size B per process (default 4)"},
    {"--seq-len", 't', "sequence length T (default 1024, at most the model's maxT)"},
    {"--total-batch", 'd', "tokens per optimizer step; a multiple of B*T*dp (default B*T*dp): gradient accumulation"},
    {"--steps", 'x', "optimizer steps (default -1: one epoch of the train data)"},
    {"--lr", 'l', "peak learning rate (default 3e-4)"},
    {"--warmup", 'u', "linear warm-up steps (default 0)"},
    {"--lr-final", 'q', "final learning rate as a fraction of --lr, the end of the cosine decay (default 1.0)"},
    {"--weight-decay", 'c', "AdamW decoupled weight decay of the 2-D tensors (default 0.0)"},
    {"--grad-clip", 0, "clip the global gradient norm to this, 0 = off (default 1.0)"},
    {"--seed", 0, "seed of initialisation, data order and sampling (default 1337)"},
    {"--shuffle", 0, "1: shuffle shards and samples each epoch, from the seed; 0: in order (default 1)"},
    {"--val-every", 'v', "val loss every N steps, 0 = never (default 20)"},
    {"--val-steps", 'm', "batches per val loss (default 20)"},
    {"--sample-every", 's', "print a sample every N steps, 0 = never (default 20)"},
    {"--sample-len", 'g', "tokens per sample (default 64)"},
    {"--checkpoint-every", 'n', "save model and resumable state every N steps and at the end, 0 = never (default 0)"},
    {"--checkpoint-format", 0, "gathered (model_<step>.bin + state_<step>.bin), sharded (ckpt_<step>/: a shard per rank + manifest) or both (default gathered)"},
    {"--async-checkpoint", 0, "1: sharded checkpoints copied aside and written by a background thread while training goes on (default 0)"},
    {"--keep-checkpoints", 0, "sharded checkpoints: keep the last K complete ones, 0 = all (default 0)"},
    {"--output-dir", 'o', "directory for the log and checkpoints (default out)"},
    {"--resume", 'y', "resume from a state file, or 1/latest = the newest in --output-dir (default 0)"},
    {"--log", 0, "JSON-lines log, one object per step (default <output-dir>/log.jsonl)"},
    {"--eval-file", 0, "held-out shard of 'prompt=answer' documents: greedy exact-match accuracy at the end"},
    {"--dp", 0, "data-parallel ranks (default: the world size / (tp*pp)); world size = dp*tp*pp"},
    {"--tp", 0, "tensor-parallel ranks (default 1): Megatron's split of every weight matrix (llm/tensor_parallel.h)"},
    {"--sequence-parallel", 0, "1: with --tp, LayerNorms and residual adds on 1/tp of the tokens each (Korthikanti et al. 2022) (default 0)"},
    {"--pp", 0, "pipeline-parallel stages (default 1): the layers split over pp ranks (llm/pipeline.h)"},
    {"--schedule", 0, "pipeline schedule: gpipe, 1f1b, interleaved (with --vpp) or zb-h1 (default 1f1b)"},
    {"--vpp", 0, "chunks of layers per pipeline rank, with --schedule interleaved (default 1)"},
    {"--trace", 0, "write a Chrome/Perfetto trace of the last training step here (scripts/plot_trace.py draws it)"},
    {"--zero", 0, "ZeRO stage over the dp ranks: 0 = DDP, 1 = optimizer states, 2 = + gradients, 3 = + parameters (default 0)"},
    {"--report-json", 0, "write each rank's memory (bytes per kind vs the ZeRO paper) and per-step comm ledger here"},
    {"--recompute", 0, "activation recompute: none, selective (attention core + LayerNorms) or full (default none)"},
    {"--fp8", 0, "FP8 block linears (llm/fp8_linear.h): none, delayed, current, block (DeepSeek-V3 tiles) or mx (default none)"},
    {"--fp8-format", 0, "hybrid (E4M3 forward, E5M2 gradients) or e4m3 (E4M3 everywhere) (default hybrid)"},
    {"--fp8-history", 0, "delayed scaling: amax history length in steps (default 16)"},
    {"--fp8-amax-reduce", 0, "delayed scaling: the history's reduction, max or most_recent (default max)"},
    {"--fp8-margin", 0, "delayed scaling: scale = fp8_max / amax / 2^margin (default 0)"},
    {"--loss-scale", 0, "loss scaling (llm/loss_scale.h): dynamic, none or a fixed scale (default dynamic in FP16 builds, else none)"},
    {"--loss-scale-init", 0, "dynamic loss scaling: the first scale (default 65536)"},
    {"--loss-scale-window", 0, "dynamic loss scaling: good steps in a row before the scale doubles (default 1000)"},
    {"--inject", 0, "faults on purpose, ';'-separated (llm/inject.h): die@step=N,rank=R  hang@..  nan@..[,count=C]  spike@..[,count=C]  "
                    "slow@rank=R,ms=M[,step=N]  bitflip@step=N,rank=R[,index=I,bit=B]  diskfail@step=N,rank=R,bytes=B  slowdisk@rank=R,ms=M"},
    {"--spike-zscore", 0, "a step whose loss or grad norm is more than Z std above the window's mean is skipped, 0 = off (default 0)"},
    {"--spike-window", 0, "the healthy steps the spike rules look back over (default 100)"},
    {"--spike-factor", 0, "a step whose loss or grad norm is more than K times the window's max is skipped, 0 = off (default 0)"},
    {"--max-bad-steps", 0, "this many skipped steps in a row roll back to the last good checkpoint, or stop with exit 3; 0 = never (default 5)"},
    {"--sdc-check-every", 0, "compare parameter hashes over the dp replicas every N steps (and at checkpoints), 0 = never (default 0)"},
    {"--comm-timeout", 0, "seconds a collective or P2P may wait: then every rank names the step, call, group and missing rank, and the job ends; 0 = off (default 300)"},
    {"--straggler-every", 0, "every N steps compare the ranks' compute time per step and name the slow ones, 0 = never (default 0)"},
    {"--straggler-factor", 0, "a rank whose compute time exceeds the median's by more than this factor is a straggler (default 1.5)"},
};
#define NUM_FLAGS ((int)(sizeof(FLAGS) / sizeof(FLAGS[0])))

static void print_usage(void) {
    printf("usage: train_gpt [flags]   (%s build, %s)\n", LLM_BUILD_CPU ? "CPU" : (LLM_BUILD_EMU ? "emulated CUDA" : "CUDA"), PRECISION_MODE);
    for (int i = 0; i < NUM_FLAGS; i++) {
        char shortf[8] = "";
        if (FLAGS[i].short_name) snprintf(shortf, sizeof(shortf), "-%c", FLAGS[i].short_name);
        printf("  %-20s %-3s %s\n", FLAGS[i].long_name, shortf, FLAGS[i].help);
    }
    printf("  --help                   this text\n");
}

static int parse_int_flag(const char* flag, const char* v) {
    char* end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || *end != '\0' || x < -2147483647L || x > 2147483647L) fatal("%s: expected an integer, found '%s'", flag, v);
    return (int)x;
}

static long parse_long_flag(const char* flag, const char* v) {
    char* end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || *end != '\0') fatal("%s: expected an integer, found '%s'", flag, v);
    return x;
}

static float parse_float_flag(const char* flag, const char* v) {
    char* end;
    errno = 0;
    float x = strtof(v, &end);
    if (errno != 0 || *end != '\0' || !isfinite(x)) fatal("%s: expected a number, found '%s'", flag, v);
    return x;
}

static void parse_args(Args* a, int argc, char** argv) {
    a->model = "d12";
    a->train_data = "dev/data/tinyshakespeare/tiny_shakespeare_train.bin";
    a->val_data = "dev/data/tinyshakespeare/tiny_shakespeare_val.bin";
    a->tokenizer = "gpt2_tokenizer.bin";
    a->output_dir = "out";
    a->log_path = NULL;
    a->resume = NULL;
    a->eval_file = NULL;
    a->B = 4; a->T = 1024; a->total_batch = -1; a->steps = -1;
    a->lr = 3e-4f; a->lr_final = 1.0f; a->weight_decay = 0.0f; a->grad_clip = 1.0f; a->warmup = 0;
    a->seed = 1337; a->shuffle = 1;
    a->val_every = 20; a->val_steps = 20; a->sample_every = 20; a->sample_len = 64; a->checkpoint_every = 0;
    a->dp = 0; a->tp = 1; a->pp = 1; a->zero = 0; a->report_json = NULL; a->recompute = 0;
    a->sequence_parallel = 0;
    a->schedule = "1f1b"; a->vpp = 1; a->trace = NULL;
    a->fp8 = 0; a->fp8_e4m3 = 0; a->fp8_history = 16; a->fp8_reduce = 0; a->fp8_margin = 0;
    a->inject = NULL;
    a->checkpoint_format = 0; a->async_checkpoint = 0; a->keep_checkpoints = 0;
#if defined(ENABLE_FP16)
    a->loss_scale = 2;  // FP16 needs it (llm/loss_scale.h)
#else
    a->loss_scale = 0;
#endif
    a->loss_scale_init = 65536.0f; a->loss_scale_window = 1000;
    a->spike_zscore = 0.0f; a->spike_window = 100; a->spike_factor = 0.0f; a->max_bad_steps = 5; a->sdc_check_every = 0;
    a->comm_timeout = 300.0f; a->straggler_every = 0; a->straggler_factor = 1.5f;
    float fixed_scale = 0.0f;
    for (int i = 1; i < argc; i++) {
        const char* arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) { print_usage(); exit(0); }
        // resolve a short alias or a long name to the flag's table entry
        const char* name = NULL;
        for (int k = 0; k < NUM_FLAGS; k++) {
            if (strcmp(arg, FLAGS[k].long_name) == 0 ||
                (FLAGS[k].short_name && arg[0] == '-' && arg[1] == FLAGS[k].short_name && arg[2] == '\0')) {
                name = FLAGS[k].long_name;
            }
        }
        if (name == NULL) fatal("unknown flag '%s' (see --help)", arg);
        if (i + 1 >= argc) fatal("%s: expected a value, found the end of the command line", arg);
        const char* v = argv[++i];
        if (!strcmp(name, "--model")) a->model = v;
        else if (!strcmp(name, "--train-data")) a->train_data = v;
        else if (!strcmp(name, "--val-data")) a->val_data = v;
        else if (!strcmp(name, "--tokenizer")) a->tokenizer = v;
        else if (!strcmp(name, "--batch")) a->B = parse_int_flag(name, v);
        else if (!strcmp(name, "--seq-len")) a->T = parse_int_flag(name, v);
        else if (!strcmp(name, "--total-batch")) a->total_batch = parse_long_flag(name, v);
        else if (!strcmp(name, "--steps")) a->steps = parse_int_flag(name, v);
        else if (!strcmp(name, "--lr")) a->lr = parse_float_flag(name, v);
        else if (!strcmp(name, "--warmup")) a->warmup = parse_int_flag(name, v);
        else if (!strcmp(name, "--lr-final")) a->lr_final = parse_float_flag(name, v);
        else if (!strcmp(name, "--weight-decay")) a->weight_decay = parse_float_flag(name, v);
        else if (!strcmp(name, "--grad-clip")) a->grad_clip = parse_float_flag(name, v);
        else if (!strcmp(name, "--seed")) a->seed = parse_int_flag(name, v);
        else if (!strcmp(name, "--shuffle")) a->shuffle = parse_int_flag(name, v);
        else if (!strcmp(name, "--val-every")) a->val_every = parse_int_flag(name, v);
        else if (!strcmp(name, "--val-steps")) a->val_steps = parse_int_flag(name, v);
        else if (!strcmp(name, "--sample-every")) a->sample_every = parse_int_flag(name, v);
        else if (!strcmp(name, "--sample-len")) a->sample_len = parse_int_flag(name, v);
        else if (!strcmp(name, "--checkpoint-every")) a->checkpoint_every = parse_int_flag(name, v);
        else if (!strcmp(name, "--output-dir")) a->output_dir = v;
        else if (!strcmp(name, "--resume")) a->resume = v;
        else if (!strcmp(name, "--log")) a->log_path = v;
        else if (!strcmp(name, "--eval-file")) a->eval_file = v;
        else if (!strcmp(name, "--dp")) a->dp = parse_int_flag(name, v);
        else if (!strcmp(name, "--tp")) a->tp = parse_int_flag(name, v);
        else if (!strcmp(name, "--pp")) a->pp = parse_int_flag(name, v);
        else if (!strcmp(name, "--zero")) a->zero = parse_int_flag(name, v);
        else if (!strcmp(name, "--schedule")) a->schedule = v;
        else if (!strcmp(name, "--vpp")) a->vpp = parse_int_flag(name, v);
        else if (!strcmp(name, "--trace")) a->trace = v;
        else if (!strcmp(name, "--report-json")) a->report_json = v;
        else if (!strcmp(name, "--inject")) a->inject = v;
        else if (!strcmp(name, "--spike-zscore")) a->spike_zscore = parse_float_flag(name, v);
        else if (!strcmp(name, "--spike-window")) a->spike_window = parse_int_flag(name, v);
        else if (!strcmp(name, "--spike-factor")) a->spike_factor = parse_float_flag(name, v);
        else if (!strcmp(name, "--max-bad-steps")) a->max_bad_steps = parse_int_flag(name, v);
        else if (!strcmp(name, "--sdc-check-every")) a->sdc_check_every = parse_int_flag(name, v);
        else if (!strcmp(name, "--loss-scale")) {
            if (!strcmp(v, "none")) a->loss_scale = 0;
            else if (!strcmp(v, "dynamic")) a->loss_scale = 2;
            else {
                char* end;
                errno = 0;
                fixed_scale = strtof(v, &end);
                if (errno != 0 || *end != '\0' || end == v || !isfinite(fixed_scale) || !(fixed_scale > 0.0f)) {
                    fatal("--loss-scale: expected dynamic, none or a positive number, found '%s'", v);
                }
                a->loss_scale = 1;
            }
        }
        else if (!strcmp(name, "--loss-scale-init")) a->loss_scale_init = parse_float_flag(name, v);
        else if (!strcmp(name, "--loss-scale-window")) a->loss_scale_window = parse_int_flag(name, v);
        else if (!strcmp(name, "--comm-timeout")) a->comm_timeout = parse_float_flag(name, v);
        else if (!strcmp(name, "--straggler-every")) a->straggler_every = parse_int_flag(name, v);
        else if (!strcmp(name, "--straggler-factor")) a->straggler_factor = parse_float_flag(name, v);
        else if (!strcmp(name, "--sequence-parallel")) {
            a->sequence_parallel = parse_int_flag(name, v);
            if (a->sequence_parallel != 0 && a->sequence_parallel != 1) fatal("--sequence-parallel: expected 0 or 1, found %s", v);
        }
        else if (!strcmp(name, "--fp8")) {
            const char* names[5] = {"none", "delayed", "current", "block", "mx"};
            a->fp8 = -1;
            for (int k = 0; k < 5; k++) if (!strcmp(v, names[k])) a->fp8 = k;
            if (a->fp8 < 0) fatal("--fp8: expected none, delayed, current, block or mx, found '%s'", v);
        }
        else if (!strcmp(name, "--fp8-format")) {
            if (!strcmp(v, "hybrid")) a->fp8_e4m3 = 0;
            else if (!strcmp(v, "e4m3")) a->fp8_e4m3 = 1;
            else fatal("--fp8-format: expected hybrid or e4m3, found '%s'", v);
        }
        else if (!strcmp(name, "--fp8-history")) a->fp8_history = parse_int_flag(name, v);
        else if (!strcmp(name, "--fp8-amax-reduce")) {
            if (!strcmp(v, "max")) a->fp8_reduce = 0;
            else if (!strcmp(v, "most_recent")) a->fp8_reduce = 1;
            else fatal("--fp8-amax-reduce: expected max or most_recent, found '%s'", v);
        }
        else if (!strcmp(name, "--fp8-margin")) a->fp8_margin = parse_int_flag(name, v);
        else if (!strcmp(name, "--checkpoint-format")) {
            if (!strcmp(v, "gathered")) a->checkpoint_format = 0;
            else if (!strcmp(v, "sharded")) a->checkpoint_format = 1;
            else if (!strcmp(v, "both")) a->checkpoint_format = 2;
            else fatal("--checkpoint-format: expected gathered, sharded or both, found '%s'", v);
        }
        else if (!strcmp(name, "--async-checkpoint")) {
            a->async_checkpoint = parse_int_flag(name, v);
            if (a->async_checkpoint != 0 && a->async_checkpoint != 1) fatal("--async-checkpoint: expected 0 or 1, found %s", v);
        }
        else if (!strcmp(name, "--keep-checkpoints")) {
            a->keep_checkpoints = parse_int_flag(name, v);
            if (a->keep_checkpoints < 0) fatal("--keep-checkpoints: expected K >= 0 (0: all), found %s", v);
        }
        else if (!strcmp(name, "--recompute")) {
            if (!strcmp(v, "none")) a->recompute = 0;
            else if (!strcmp(v, "selective")) a->recompute = 1;
            else if (!strcmp(v, "full")) a->recompute = 2;
            else fatal("--recompute: expected none, selective or full, found '%s'", v);
        }
    }
    if (a->B <= 0) fatal("--batch: expected a positive integer, found %d", a->B);
    if (a->T <= 0) fatal("--seq-len: expected a positive integer, found %d", a->T);
    // --total-batch is checked with the layout (it must divide over the dp ranks): check_layout
    if (a->warmup < 0) fatal("--warmup: expected >= 0, found %d", a->warmup);
    if (a->val_steps <= 0) fatal("--val-steps: expected a positive integer, found %d", a->val_steps);
    if (a->shuffle != 0 && a->shuffle != 1) fatal("--shuffle: expected 0 or 1, found %d", a->shuffle);
    if (a->fp8_history < 1 || a->fp8_history > 4096) fatal("--fp8-history: expected 1 to 4096 steps, found %d", a->fp8_history);
    if (a->fp8_margin < 0 || a->fp8_margin > 32) fatal("--fp8-margin: expected 0 to 32, found %d", a->fp8_margin);
    if (!(a->loss_scale_init > 0.0f)) fatal("--loss-scale-init: expected a positive number, found %g", a->loss_scale_init);
    if (a->loss_scale_window < 1) fatal("--loss-scale-window: expected a positive integer, found %d", a->loss_scale_window);
    if (a->spike_zscore < 0.0f) fatal("--spike-zscore: expected a number >= 0 (0: off), found %g", a->spike_zscore);
    if (a->spike_window < 2 || a->spike_window > 1000000) fatal("--spike-window: expected 2 to 1000000 steps, found %d", a->spike_window);
    if (a->spike_factor != 0.0f && !(a->spike_factor > 1.0f)) fatal("--spike-factor: expected a number > 1 (0: off), found %g", a->spike_factor);
    if (a->max_bad_steps < 0) fatal("--max-bad-steps: expected a count >= 0 (0: never roll back), found %d", a->max_bad_steps);
    if (a->sdc_check_every < 0) fatal("--sdc-check-every: expected a step count >= 0 (0: never), found %d", a->sdc_check_every);
    if (a->loss_scale == 1) a->loss_scale_init = fixed_scale;
    if (a->async_checkpoint && a->checkpoint_format == 0) a->checkpoint_format = 1;  // async saves are sharded
    if (a->comm_timeout < 0 || a->comm_timeout > 86400) fatal("--comm-timeout: expected 0 (off) to 86400 seconds, found %g", a->comm_timeout);
    if (a->straggler_every < 0) fatal("--straggler-every: expected 0 (off) or a positive number of steps, found %d", a->straggler_every);
    if (!(a->straggler_factor > 1.0f)) fatal("--straggler-factor: expected a factor above 1, found %g", a->straggler_factor);
    if (a->resume && (!strcmp(a->resume, "0") || !strcmp(a->resume, ""))) a->resume = NULL;
    if (a->val_data && a->val_data[0] == '\0') a->val_data = NULL;
    if (a->tokenizer && a->tokenizer[0] == '\0') a->tokenizer = NULL;
    if (a->report_json && a->report_json[0] == '\0') a->report_json = NULL;
    if (a->trace && a->trace[0] == '\0') a->trace = NULL;
}

// The layout, once the processes are known and before anything is allocated: the ZeRO stage, the
// parallelisms implemented so far, the batch over the dp ranks (comm_init, which builds the groups,
// has checked dp * tp * pp against the world size). On an error rank 0 prints one line and every
// rank exits non-zero. Sets a->total_batch when it was left to its default.
static void args_check_layout(Args* a, Comm* c) {
    char err[512] = "";
    long bt = (long)a->B * a->T, btdp = bt * c->dp;
    if (a->total_batch == -1) a->total_batch = btdp;  // one micro-step per rank
    if (a->zero < 0 || a->zero > 3) {
        snprintf(err, sizeof(err), "--zero: expected a ZeRO stage 0 (DDP), 1, 2 or 3, found %d", a->zero);
    } else if (a->sequence_parallel && c->tp > 1 && a->T % c->tp != 0) {
        snprintf(err, sizeof(err), "--sequence-parallel 1: expected the sequence length -t %d to divide evenly over --tp %d",
                 a->T, c->tp);
    } else if (a->total_batch <= 0 || a->total_batch % btdp != 0) {
        if (c->dp == 1) {
            snprintf(err, sizeof(err), "--total-batch: expected a positive multiple of B*T = %d*%d = %ld, found %ld",
                     a->B, a->T, bt, a->total_batch);
        } else {
            snprintf(err, sizeof(err), "--total-batch: expected a positive multiple of B*T*dp = %d*%d*%d = %ld "
                     "(every dp rank reads B*T tokens per micro-step), found %ld", a->B, a->T, c->dp, btdp, a->total_batch);
        }
    }
    if (err[0] == '\0') return;
    if (c->world_rank == 0) {
        fprintf(stderr, "error: %s\n", err);
        fflush(stderr);
    }
    comm_exit(c, EXIT_FAILURE);  // every rank gets here (same arguments), then all exit non-zero
}
