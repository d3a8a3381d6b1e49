/*
train_gpt.cu: trains a GPT-2 model, on one process or data-parallel over many (mpirun). Read it top
to bottom:
  1. arguments, processes (flags, with llm.c's short aliases; the dp x tp x pp mesh of llm/comm.h,
                           the layout checked before anything is allocated)
  2. the model            (an llm.c checkpoint, or a fresh GPT-2 from a descriptor like d12; under
                           ZeRO each rank keeps only its part of the model states: llm/zero.h)
  3. data                 (llm.c token shards, each dp rank reading its slice of every step's batch;
                           tokenizer for decoding)
  4. optimizer state      (AdamW, or the saved state of a run being resumed)
  5. the training loop    (val loss, samples, checkpoints; then one optimizer step:
                           micro-batches forward + backward with the gradients averaged over the dp
                           ranks, grad norm, clip, schedule, AdamW; log)
  6. held-out exact-match evaluation (optional), memory and communication report, clean-up
Every rank runs the same program; only rank 0 prints progress, writes the log and checkpoints, and
every rank prints the errors it sees itself.
The same file builds three ways (see DESIGN.md): g++ -> train_gpt_cpu, nvcc -> train_gpt, and the
emulated CUDA build used by the tests.

Bytes moved per training step on a GPU (GPT-2 124M, B=64, T=1024, BF16; X = B*T*C*2 = 100.7 MB, one
(B,T,C) activation; A = B*NH*T*T*2 = 1.61 GB, one attention matrix). Counted from the kernels' reads
and writes, weights excluded (7 MB per layer, read once or twice):
  per layer, forward:  LN 2X (fused residual+LN 4X) + QKV 4X + permute 6X + attention ~2.75A (QK^T write,
                       softmax read+write, AV read; causal chunking skips ~3/8) + unpermute 2X + attproj 2X
                       + fc 9X (writes pre-GELU and GELU) + fcproj 5X                      ~ 3.4 GB + 4.4 GB
  per layer, backward: about twice the forward's activation traffic, attention ~4.5A       ~ 7 GB + 7.2 GB
  12 layers                                                                                ~ 265 GB
  LM head + classifier: logits B*T*Vp*2 = 6.6 GB written, read and overwritten by dlogits in one fused
                       pass (13.2 GB), read twice by the backward matmuls (13.2 GB)          ~ 33 GB
  AdamW: 124M x (2 grad + 2 param + 12 master/m/v read, 12 written)                       ~ 3.5 GB
  total ~ 300 GB per step: ~90 ms at an H100's 3.35 TB/s, beside ~52 TFLOP of matmuls (6 N per token
  plus attention), ~80 ms at a dense BF16 peak of ~650 TFLOP/s. The attention matrix is the largest
  single item: a fused (flash) attention kernel would remove ~140 GB of it (see attention.cuh).
*/
#include "llm/common.h"
#include "llm/device.h"
#include "llm/rand.h"
#include "llm/gpt.h"
#include "llm/optimizer.h"
#include "llm/dataloader.h"
#include "llm/tokenizer.h"
#include "llm/logger.h"
#include "llm/checkpoint.h"
#include "llm/sampler.h"
#include "llm/comm.h"
#include "llm/zero.h"
#include <sys/stat.h>
#include <dirent.h>

// ----------------------------------------------------------------------------
// 1. arguments

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
    int dp, tp, pp;             // the process mesh; dp 0 = world size / (tp * pp)
    int zero;                   // ZeRO stage: 0 = DDP, 1, 2, 3
    const char* report_json;    // memory and communication report, or NULL
    int debug_die_at_step;      // a rank exits(1) at this step (the failure test), 0 = never
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
    {"--lr-final", 'q', "final learning rate as a fraction of --lr, reached by cosine decay (default 1.0)"},
    {"--weight-decay", 'c', "AdamW decoupled weight decay of the 2-D tensors (default 0.0)"},
    {"--grad-clip", 0, "clip the global gradient norm to this, 0 = off (default 1.0)"},
    {"--seed", 0, "seed of initialisation, data order and sampling (default 1337)"},
    {"--shuffle", 0, "1: shuffle shards and samples each epoch, from the seed; 0: in order (default 1)"},
    {"--val-every", 'v', "val loss every N steps, 0 = never (default 20)"},
    {"--val-steps", 'm', "batches per val loss (default 20)"},
    {"--sample-every", 's', "print a sample every N steps, 0 = never (default 20)"},
    {"--sample-len", 'g', "tokens per sample (default 64)"},
    {"--checkpoint-every", 'n', "save model and resumable state every N steps and at the end, 0 = never (default 0)"},
    {"--output-dir", 'o', "directory for the log and checkpoints (default out)"},
    {"--resume", 'y', "resume from a state file, or 1/latest = the newest in --output-dir (default 0)"},
    {"--log", 0, "JSON-lines log, one object per step (default <output-dir>/log.jsonl)"},
    {"--eval-file", 0, "held-out shard of 'prompt=answer' documents: greedy exact-match accuracy at the end"},
    {"--dp", 0, "data-parallel ranks (default: the world size / (tp*pp)); world size = dp*tp*pp"},
    {"--tp", 0, "tensor-parallel ranks (default 1; > 1 not implemented yet)"},
    {"--pp", 0, "pipeline-parallel stages (default 1; > 1 not implemented yet)"},
    {"--zero", 0, "ZeRO stage over the dp ranks: 0 = DDP, 1 = optimizer states, 2 = + gradients, 3 = + parameters (default 0)"},
    {"--report-json", 0, "write each rank's memory (bytes per kind vs the ZeRO paper) and per-step comm ledger here"},
    {"--debug-die-at-step", 0, "debug: rank 1 (rank 0 alone) exits with status 1 at this step (default 0 = never)"},
};
#define NUM_FLAGS ((int)(sizeof(FLAGS) / sizeof(FLAGS[0])))

static void print_usage(void) {
    printf("usage: train_gpt [flags]   (%s build, %s)\n", LLM_BUILD_CPU ? "CPU" : (LLM_BUILD_EMU ? "emulated CUDA" : "CUDA"), PRECISION_MODE);
    for (int i = 0; i < NUM_FLAGS; i++) {
        char shortf[8] = "";
        if (FLAGS[i].short_name) snprintf(shortf, sizeof(shortf), "-%c", FLAGS[i].short_name);
        printf("  %-18s %-3s %s\n", FLAGS[i].long_name, shortf, FLAGS[i].help);
    }
    printf("  --help                 this text\n");
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
    a->dp = 0; a->tp = 1; a->pp = 1; a->zero = 0; a->report_json = NULL; a->debug_die_at_step = 0;
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
        else if (!strcmp(name, "--report-json")) a->report_json = v;
        else if (!strcmp(name, "--debug-die-at-step")) a->debug_die_at_step = parse_int_flag(name, v);
    }
    if (a->B <= 0) fatal("--batch: expected a positive integer, found %d", a->B);
    if (a->T <= 0) fatal("--seq-len: expected a positive integer, found %d", a->T);
    // --total-batch is checked with the layout (it must divide over the dp ranks): check_layout
    if (a->warmup < 0) fatal("--warmup: expected >= 0, found %d", a->warmup);
    if (a->val_steps <= 0) fatal("--val-steps: expected a positive integer, found %d", a->val_steps);
    if (a->shuffle != 0 && a->shuffle != 1) fatal("--shuffle: expected 0 or 1, found %d", a->shuffle);
    if (a->resume && (!strcmp(a->resume, "0") || !strcmp(a->resume, ""))) a->resume = NULL;
    if (a->val_data && a->val_data[0] == '\0') a->val_data = NULL;
    if (a->tokenizer && a->tokenizer[0] == '\0') a->tokenizer = NULL;
    if (a->report_json && a->report_json[0] == '\0') a->report_json = NULL;
}

// The layout, once the processes are known and before anything is allocated: the ZeRO stage, the
// parallelisms implemented so far, the batch over the dp ranks. comm_init has checked the world size
// against dp*tp*pp. On an error rank 0 prints one line and every rank exits non-zero.
static void check_layout(Args* a, Comm* c) {
    char err[512] = "";
    long bt = (long)a->B * a->T, btdp = bt * c->dp;
    if (a->total_batch == -1) a->total_batch = btdp;  // one micro-step per rank
    if (a->zero < 0 || a->zero > 3) {
        snprintf(err, sizeof(err), "--zero: expected a ZeRO stage 0 (DDP), 1, 2 or 3, found %d", a->zero);
    } else if (c->tp > 1 || c->pp > 1) {
        snprintf(err, sizeof(err), "--tp %d --pp %d: tensor and pipeline parallelism are not implemented yet "
                 "(later issue); expected --tp 1 --pp 1", c->tp, c->pp);
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
    mpiCheck(MPI_Finalize());  // every rank gets here (same arguments), then all exit non-zero
    exit(EXIT_FAILURE);
}

// ----------------------------------------------------------------------------
// helpers of the loop

static float val_loss(GPT* model, DataLoader* val, int steps, int B, int T) {
    dataloader_reset(val);
    double sum = 0.0;
    for (int i = 0; i < steps; i++) {
        dataloader_next_batch(val);
        gpt_forward(model, val->inputs, val->targets, B, T, 0.0f);
        sum += model->mean_loss;
    }
    return (float)(sum / steps);
}

static void print_tokens(const Tokenizer* tok, const int* tokens, int n) {
    for (int i = 0; i < n; i++) {
        if (tok) tokenizer_print_safe(tokenizer_decode(tok, (uint32_t)tokens[i]));
        else printf("%d ", tokens[i]);
    }
}

// the newest state_<step>.bin in dir, or "" if none
static void find_latest_state(const char* dir, char* out, size_t cap) {
    out[0] = '\0';
    DIR* d = opendir(dir);
    if (d == NULL) fatal("--resume: cannot open --output-dir %s: %s", dir, strerror(errno));
    int best = -1;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int step;
        char tail[8];
        if (sscanf(e->d_name, "state_%d%7s", &step, tail) == 2 && !strcmp(tail, ".bin") && step > best) {
            best = step;
            snprintf(out, cap, "%s/%s", dir, e->d_name);
        }
    }
    closedir(d);
    if (best < 0) fatal("--resume: expected a state_<step>.bin in %s, found none", dir);
}

// Greedy exact-match accuracy on held-out problems: each document (split at EOT) of the shard is a
// prompt through the first '=' and an answer up to '\n'; the model must produce the answer exactly.
// The first print_n problems are printed.
static float exact_match_eval(GPT* model, const char* path, int eot, const Tokenizer* tok, int print_n) {
    int64_t n_tokens;
    int32_t* raw = dataloader_read_shard(path, "--eval-file", model->config.vocab_size, &n_tokens);  // (n_tokens)
    int maxT = model->config.max_seq_len;
    int* seq = (int*)mallocCheck((size_t)maxT * sizeof(int));
    int total = 0, correct = 0;
    for (int64_t i = 0; i < n_tokens;) {
        // one document: [i, j)
        int64_t j = i + 1;
        while (j < n_tokens && raw[j] != eot) j++;
        int64_t eq = i;
        while (eq < j && raw[eq] != '=') eq++;
        int64_t nl = eq;
        while (nl < j && raw[nl] != '\n') nl++;
        int plen = (int)(eq - i + 1), alen = (int)(nl - eq - 1);
        if (eq < j && alen > 0 && plen + alen + 1 <= maxT) {
            for (int k = 0; k < plen; k++) seq[k] = raw[i + k];
            int len = gpt_generate(model, seq, plen, alen + 1, '\n', NULL);
            int ok = len >= plen + alen;
            for (int k = 0; ok && k < alen; k++) ok = seq[plen + k] == raw[eq + 1 + k];
            if (ok && len > plen + alen) ok = seq[plen + alen] == '\n' || seq[plen + alen] == eot;
            correct += ok;
            total++;
            if (total <= print_n) {
                printf("  ");
                print_tokens(tok, seq + (seq[0] == eot), plen - (seq[0] == eot));
                printf(" -> ");
                int shown = len - plen;
                if (shown > 0 && seq[len - 1] == '\n') shown--;
                print_tokens(tok, seq + plen, shown);
                printf("   %s\n", ok ? "correct" : "WRONG");
            }
        }
        i = j;
    }
    free(raw);
    free(seq);
    if (total == 0) fatal("--eval-file: %s: expected documents of the form 'prompt=answer\\n', found none", path);
    return (float)correct / (float)total;
}

