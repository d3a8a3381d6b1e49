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
#include "llm/report.h"
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
    comm_exit(c, EXIT_FAILURE);  // every rank gets here (same arguments), then all exit non-zero
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

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    // 1. arguments, then the processes: the mesh, and the layout checked before any allocation
    Args args;
    parse_args(&args, argc, argv);
    Comm comm;
    comm_init(&comm, &argc, &argv, args.dp, args.tp, args.pp);
    check_layout(&args, &comm);
    int rank0 = comm.world_rank == 0;  // prints, logs, writes checkpoints
    int B = args.B, T = args.T;

    // 2. the model
    GPTConfig cfg;
    float* init_params = NULL;  // (num_parameters) FP32 on the host
    int from_descriptor = gpt_config_from_descriptor(args.model, &cfg);
    if (!from_descriptor) init_params = checkpoint_load(args.model, &cfg);
    if (T > cfg.max_seq_len) {
        fatal("--seq-len: expected T <= the model's context length maxT = %d, found %d", cfg.max_seq_len, T);
    }
    // check the data before allocating the model; dp rank r reads its slice of every batch
    DataLoader train_loader, val_loader;
    dataloader_init(&train_loader, args.train_data, "--train-data", B, T, comm.dp_rank, comm.dp, args.shuffle,
                    (uint64_t)args.seed, cfg.vocab_size);
    if (args.val_data) dataloader_init(&val_loader, args.val_data, "--val-data", B, T, 0, 1, 0, 0, cfg.vocab_size);
    Tokenizer tok;
    int have_tok = 0;
    if (args.tokenizer) {
        FILE* tf = fopen(args.tokenizer, "rb");
        if (tf != NULL) { fclose(tf); tokenizer_init(&tok, args.tokenizer); have_tok = 1; }
        else if (rank0) printf("tokenizer %s not found: samples print token ids\n", args.tokenizer);
    }
    int eot = have_tok ? (int)tok.eot_token : 50256;

    // the model and what this rank keeps of its states (llm/zero.h: everything for one process or
    // DDP; a 1/dp shard of the optimizer states, gradients, parameters under ZeRO-1, 2, 3)
    Zero zero;
    zero_layout(&zero, &comm, cfg, args.zero);
    GPT model;
    zero_allocate(&zero, &model);
    AdamWState opt;
    zero_adamw_init(&zero, &opt);
    if (from_descriptor) {
        init_params = (float*)mallocCheck(model.num_parameters * sizeof(float));
        gpt_random_parameters(cfg, (uint64_t)args.seed, init_params);
    }
    int grad_accum = (int)(args.total_batch / ((long)B * T * comm.dp));
    int steps = args.steps;
    if (steps < 0) steps = (int)(dataloader_num_samples(&train_loader) / (args.total_batch / T));
    if (steps <= 0) steps = 1;
    if (rank0) {
        printf("model: %s | L=%d NH=%d C=%d maxT=%d V=%d (Vp %d) | %.2fM parameters | %s %s\n", args.model,
               cfg.num_layers, cfg.num_heads, cfg.channels, cfg.max_seq_len, cfg.vocab_size, cfg.padded_vocab_size,
               model.num_parameters / 1e6, LLM_BUILD_CPU ? "CPU" : (LLM_BUILD_EMU ? "emulated CUDA" : "CUDA"), PRECISION_MODE);
        if (comm.world_size > 1 || args.zero > 0) {
            printf("processes: %d = dp %d x tp %d x pp %d | %s | MPI start %.0f ms\n", comm.world_size, comm.dp,
                   comm.tp, comm.pp, stage_name(args.zero), comm.init_ms);
        }
        printf("batch: B=%d T=%d | %ld tokens per step = %d micro-steps x %d ranks | %d steps | train samples per epoch %lld\n",
               B, T, args.total_batch, grad_accum, comm.dp, steps, (long long)dataloader_num_samples(&train_loader));
    }

    // 4. optimizer state and parameters (fresh, or resumed: each rank keeps its part of the state file)
    OptimConfig oc = {args.lr, args.lr_final, args.warmup, steps, 0.9f, 0.95f, 1e-8f, args.weight_decay, args.grad_clip};
    Rng sample_rng;
    rng_init(&sample_rng, (uint64_t)args.seed * 0x2545F4914F6CDD1Dull + 1);
    int start_step = 0;
    if (args.resume) {
        char path[1100];
        if (!strcmp(args.resume, "1") || !strcmp(args.resume, "latest")) find_latest_state(args.output_dir, path, sizeof(path));
        else snprintf(path, sizeof(path), "%s", args.resume);
        TrainState ts;
        float *p, *m, *v;
        state_load(path, cfg, &ts, &p, &m, &v);
        zero_import_params(&zero, &opt, p, 1);
        zero_import_moments(&zero, &opt, m, v);
        opt.t = ts.adam_t;
        dataloader_seek(&train_loader, ts.data);
        sample_rng.state = ts.rng;
        start_step = ts.step;
        free(p); free(m); free(v);
        if (rank0) printf("resumed from %s at step %d\n", path, start_step);
    } else {
        zero_import_params(&zero, &opt, init_params, 0);
    }
    free(init_params);
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
        mkdir(args.output_dir, 0755);  // may already exist; writes below fail loudly if it is unusable
        logger_init(&logger, log_path, args.resume != NULL);
        printf("log: %s\n", log_path);
    } else {
        logger_init(&logger, NULL, 0);
    }
    gpt_allocate_activations(&model, B, T);
    if (rank0 && zero.enabled) print_memory(&zero, &opt, args.zero);

    // 5. the training loop: optimizer steps start_step+1 .. steps. Every rank runs all of it (val
    // loss, samples and the evaluation too: under ZeRO-3 every forward needs the whole group).
    int* gen = (int*)mallocCheck((size_t)cfg.max_seq_len * sizeof(int));
    double total_ms = 0.0, total_grad_wait = 0.0, total_gather_wait = 0.0;
    int timed_steps = 0;
    CommLedger step_ledger;  // the collectives of the last optimizer step
    memset(&step_ledger, 0, sizeof(step_ledger));
    if (args.val_data && args.val_every > 0) {
        float vloss = val_loss(&model, &val_loader, args.val_steps, B, T);
        if (rank0) printf("step %d: val loss %.6f\n", start_step, vloss);
        logger_log_eval(&logger, start_step, "val_loss", vloss);
    }
    for (int step = start_step + 1; step <= steps; step++) {
        int last = step == steps;
        if (step == args.debug_die_at_step && comm.world_rank == (comm.world_size > 1 ? 1 : 0)) {
            fprintf(stderr, "error: rank %d exits at step %d on purpose (--debug-die-at-step)\n", comm.world_rank, step);
            fflush(stderr);
            exit(EXIT_FAILURE);
        }
        // one optimizer step: grad_accum micro-batches of B x T on every rank, the gradients averaged
        // over the ranks during the last backward (llm/ddp.h, llm/zero.h), then clip and AdamW
        ledger_reset(&comm);
        double t0 = wall_ms();
        zero_step_begin(&zero);
        double loss_sum = 0.0;
        for (int micro = 0; micro < grad_accum; micro++) {
            zero_micro_begin(&zero, micro, grad_accum);
            dataloader_next_batch(&train_loader);
            gpt_forward(&model, train_loader.inputs, train_loader.targets, B, T, 1.0f / ((float)B * T * grad_accum));
            gpt_backward(&model);
            zero_micro_end(&zero);
            loss_sum += model.mean_loss;
        }
        float train_loss = zero_mean(&zero, (float)(loss_sum / grad_accum));  // the mean over all ranks
        float norm = zero_grad_norm(&zero, &opt);
        float lr = lr_schedule(&oc, step - 1);
        zero_update(&zero, &opt, &oc, lr, norm, (unsigned int)(args.seed + 7919u * (unsigned)step));
        device_synchronize();
        double ms = wall_ms() - t0;
        step_ledger = comm.ledger;
        double grad_wait = zero_grad_wait_ms(&zero), gather_wait = zero_gather_wait_ms(&zero);
        if (step > start_step + 1) {  // the first step warms up
            total_ms += ms;
            total_grad_wait += grad_wait;
            total_gather_wait += gather_wait;
            timed_steps++;
        }
        float tok_s = (float)(args.total_batch / (ms / 1e3));
        if (!isfinite(train_loss)) fatal("step %d: the train loss is %f: training diverged", step, train_loss);

        // val loss, log line, sample and checkpoint of the model after this step
        float vloss = NAN;
        if (args.val_data && args.val_every > 0 && (step % args.val_every == 0 || last)) {
            vloss = val_loss(&model, &val_loader, args.val_steps, B, T);
        }
        if (rank0) {
            printf("step %4d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s", step, steps, train_loss, lr,
                   norm, ms, tok_s);
            if (zero.enabled) printf(" | comm wait %.1f ms", grad_wait);
            if (zero.enabled && args.zero > 0) printf(" (+ gather %.1f ms)", gather_wait);
            if (!isnan(vloss)) printf(" | val loss %.6f", vloss);
            printf("\n");
        }
        logger_log_step(&logger, step, train_loss, vloss, lr, norm, (float)ms, tok_s, zero.enabled ? (float)grad_wait : NAN);
        if (args.sample_every > 0 && (step % args.sample_every == 0 || last)) {
            gen[0] = eot;
            int len = gpt_generate(&model, gen, 1, args.sample_len, -1, &sample_rng);
            if (rank0) {
                printf("sample: ");
                print_tokens(have_tok ? &tok : NULL, gen + 1, len - 1);
                printf("\n");
            }
        }
        if (args.checkpoint_every > 0 && (step % args.checkpoint_every == 0 || last)) {
            // the whole model and optimizer state, gathered from the shards (every rank takes part)
            size_t n = model.num_parameters;
            float* p = (float*)mallocCheck(n * sizeof(float));
            float* m = (float*)mallocCheck(n * sizeof(float));
            float* v = (float*)mallocCheck(n * sizeof(float));
            zero_export(&zero, &opt, p, m, v);
            if (rank0) {
                char path[1100];
                // llm.c's format: version 5 (BF16, the master weights rounded to nearest) when the model
                // runs in BF16, else version 3 (FP32); the state file keeps the FP32 master exactly
                snprintf(path, sizeof(path), "%s/model_%08d.bin", args.output_dir, step);
                checkpoint_save(path, cfg, p, sizeof(floatX) == 2 ? 5 : 3);
                TrainState ts = {step, opt.t, dataloader_position(&train_loader), sample_rng.state};
                snprintf(path, sizeof(path), "%s/state_%08d.bin", args.output_dir, step);
                state_save(path, cfg, &ts, p, m, v);
                printf("saved %s/model_%08d.bin and state_%08d.bin\n", args.output_dir, step, step);
            }
            free(p); free(m); free(v);
        }
    }
    if (rank0 && timed_steps > 0) {
        printf("average step time %.1f ms", total_ms / timed_steps);
        if (zero.enabled) printf(" | comm wait %.2f ms per step", total_grad_wait / timed_steps);
        if (zero.enabled && args.zero > 0) printf(" (+ gather %.2f ms)", total_gather_wait / timed_steps);
        printf("\n");
    }

    // 6. held-out exact-match evaluation
    if (args.eval_file) {
        if (rank0) printf("exact-match evaluation on %s:\n", args.eval_file);
        float acc = exact_match_eval(&model, args.eval_file, eot, have_tok ? &tok : NULL, rank0 ? 8 : 0);
        if (rank0) printf("held-out exact-match accuracy: %.2f%%\n", 100.0f * acc);
        logger_log_eval(&logger, steps, "exact_match", acc);
    }

    // the memory and the collectives of the last step, beside the ZeRO paper's numbers
    gpt_allocate_activations(&model, B, T);  // (sampling may have left other sizes)
    comm.ledger = step_ledger;
    if (rank0 && zero.enabled) {
        print_memory(&zero, &opt, args.zero);
        ledger_print(&comm, stdout);
        double sent = ledger_sent_bytes(&comm, COMM_ALL_KINDS, GROUP_DP);
        printf("  sent per step %.0f B; ZeRO paper (sec. 7, ring model) %.0f B for the gradients and parameters "
               "(the rest: the loss and norm scalars)\n", sent, paper_sent_bytes(&zero, args.zero, grad_accum));
    }
    if (args.report_json) {
        write_report(args.report_json, args.zero, &zero, &opt, &comm, grad_accum, timed_steps ? total_grad_wait / timed_steps : 0.0,
                     timed_steps ? total_gather_wait / timed_steps : 0.0, timed_steps);
    }

    free(gen);
    logger_free(&logger);
    if (have_tok) tokenizer_free(&tok);
    dataloader_free(&train_loader);
    if (args.val_data) dataloader_free(&val_loader);
    adamw_state_free(&opt);
    zero_free(&zero);
    gpt_free(&model);
    comm_free(&comm);
    return 0;
}
