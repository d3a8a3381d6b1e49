// args.h: the trainer's flags: their table (long name, llm.c's short alias, where the value goes, its
// valid range, help), the one parser, and the checks of the layout that need the process count (run
// once the processes are known, before anything is allocated). Bad values end the program with one
// line naming the flag, what was expected (the range) and what was found.
#pragma once
#include <stddef.h>
#include <ctype.h>
#include <unistd.h>
#include "../core/common.h"
#include "../comm/comm.h"
#include "../ops/optimizer.h"
#include "../parallel/schedule_list.h"

typedef struct {
    const char* model;          // checkpoint path or descriptor
    const char* train_data;
    const char* val_data;
    const char* tokenizer;
    const char* output_dir;
    const char* log_path;
    const char* resume;         // state file, "latest"/"1" (newest in output dir), or NULL/"0"
    const char* eval_file;      // held-out exact-match problems (shard)
    const char* hellaswag;      // HellaSwag in llm.c's eval format (llm/train/hellaswag.h), or NULL: none
    int hellaswag_every;        // its acc_norm every N steps and at the last; 0: at the val loss's steps (--val-every)
    const char* hellaswag_losses;  // each example's four completion losses written here after each evaluation, or NULL
    int B, T;
    long total_batch;
    int steps;
    float lr, lr_final, weight_decay, grad_clip;
    int warmup;
    int seed;
    int shuffle;
    int val_every, val_steps, sample_every, sample_len, checkpoint_every;
    int checkpoint_format;      // 0 gathered (model_/state_ files), 1 sharded (ckpt_<step>/, llm/ckpt/ckpt_shard.h), 2 both
    int async_checkpoint;       // 1: sharded saves written by a background thread while training goes on
    int keep_checkpoints;       // sharded: keep the K newest good checkpoints and the K newest of any kind (0: all)
    int save_on_signal;         // 1: SIGTERM/SIGINT save the step in flight and exit 128 + signal (llm/faults/preempt.h)
    int dp, tp, pp;             // the process mesh; dp 0 = world size / (tp * pp * cp)
    int ep;                     // expert-parallel ranks, folded into dp: the experts split over them (llm/sharded/expert_parallel.h)
    int cp;                     // context-parallel ranks: the sequence split inside attention too (llm/sharded/context_parallel.h)
    int cp_impl;                // 0 ring attention, 1 Ulysses (all-to-alls to a head split)
    int cp_balance;             // ring's split of the sequence: 0 zigzag (chunks i and 2N-1-i), 1 contiguous
    int zero;                   // ZeRO level: 0 = DDP, 1, 2, 3 (its switches: llm/parallel/zero.h)
    const char* report_json;    // memory and communication report, or NULL
    int recompute;              // activation recompute: 0 none, 1 selective, 2 full (llm/model/block.h)
    int sequence_parallel;      // 1: the LayerNorm/residual regions split over the tp ranks (llm/sharded/tensor_parallel.h)
    const char* schedule;       // the pipeline schedule (llm/parallel/schedule.h): gpipe, 1f1b, interleaved, zb-h1
    int vpp;                    // chunks of layers per pipeline rank (interleaved; 2 for the V schedules)
    const char* trace;          // Chrome/Perfetto trace of the last training step, or NULL
    int overlap_pairs;          // dualpipev: 1 a pair's F and B interleaved at the moe all-to-alls, 0 one after the other;
                                // -1 not given (1)
    int fp8;                    // FP8 linear layers (llm/precision/fp8_linear.h): 0 none, 1 delayed, 2 current, 3 block, 4 mx
    int fp8_e4m3;               // 1: E4M3 gradients too (--fp8-format e4m3); 0: hybrid (E5M2 gradients)
    int fp8_history, fp8_reduce, fp8_margin;  // delayed scaling: amax history length, reduction (0 max, 1 most recent), margin
    int experts, top_k, moe_every;  // the model's experts E (0: dense), K (0: the default, 2) and M (llm/model/tensors.h)
    float capacity_factor, aux_loss_coef, z_loss_coef, expert_bias_rate;  // the moe layers' training (docs/moe.md)
    const char* inject;         // --inject: faults to cause on purpose (llm/faults/inject.h), or NULL
    int loss_scale;             // llm/precision/loss_scale.h LossScaleMode: 0 none, 1 fixed (loss_scale_init), 2 dynamic
    float loss_scale_init;      // the fixed scale, or dynamic scaling's first one
    int loss_scale_window;      // dynamic: good steps in a row before the scale doubles
    float spike_zscore;         // llm/faults/health.h: a step is bad when its loss or norm has a z-score above this (0: off)
    int spike_window;           // over the last this many healthy steps
    float spike_factor;         // or is more than this times their max (0: off)
    int max_bad_steps;          // bad steps in a row before the rollback to the last good checkpoint (0: never)
    int sdc_check_every;        // parameter hashes compared over the dp replicas every N steps (0: never)
    float comm_timeout;         // seconds a collective or P2P may wait before the job ends (llm/comm/watchdog.h); 0 = off
    int straggler_every;        // compare the ranks' compute time every N steps (llm/faults/straggler.h); 0 = off
    float straggler_factor;     // a rank slower than the median by more than this is named
    float max_memory;           // GiB a rank may allocate (the tagged allocator, llm/core/context.h); 0 = no limit
    float peak_tflops;          // the MFU's peak TFLOP/s of one process's device; 0 = measured at start-up (llm/train/mfu.h)
    float beta1, beta2, eps;    // AdamW's; NAN when not given: the defaults (ADAMW_DEFAULT_*), or a resumed run's own
    int print_every;            // the step line every N steps (and the first, the last, and those with news)
    int generate;               // > 0: generation mode (train_gpt.cu's generate): this many tokens after the prompt, no training
    const char* prompt_tokens;  // generation's prompt: "id,id,..." or a file of ids; NULL: <|endoftext|> alone
    float temperature;          // the draws of samples and generation (llm/model/sampler.h sample_next): 0 greedy
    int sample_top_k;           // draws among the top k logits; 0: all
} Args;

// AdamW's hyperparameters when no flag gives them (llm.c's CUDA trainer's; its CPU trainer uses beta2 0.999).
// A resumed run goes on with those its checkpoint was trained with (llm/ckpt/checkpoint.h) unless a flag says
// otherwise.
#define ADAMW_DEFAULT_BETA1 0.9f
#define ADAMW_DEFAULT_BETA2 0.95f
#define ADAMW_DEFAULT_EPS 1e-8f

// where dev/data/shakespeare.py writes the complete works in GPT-2's tokens: the default data, so that the
// trainer with no flags trains on real text once `make shakespeare` (or the script) has made it
#define DEFAULT_DATA_DIR "data/shakespeare"
#define DEFAULT_TRAIN_DATA DEFAULT_DATA_DIR "/shakespeare_train.bin"
#define DEFAULT_VAL_DATA DEFAULT_DATA_DIR "/shakespeare_val.bin"
#define DEFAULT_TOKENIZER DEFAULT_DATA_DIR "/gpt2_tokenizer.bin"
#define DEFAULT_DATA_HOW "python3 dev/data/shakespeare.py (or make shakespeare, which also trains)"
// where dev/data/hellaswag.py writes HellaSwag's validation set: llm.c's -h 1 reads it (llm.c's own place is
// dev/data/hellaswag/hellaswag_val.bin; --hellaswag FILE names any)
#define DEFAULT_HELLASWAG "data/hellaswag/hellaswag_val.bin"

// One row per flag: its names, what it stores where in Args, its valid range (numbers: inclusive bounds;
// choices: the words, stored as their index), and its help. One parser reads them all: a number must be
// the whole value (no spaces, no unit), an integer has no decimal point, and anything outside the row's
// range ends the program with one line naming the flag, the range and the value.
typedef enum { FLAG_STRING, FLAG_INT, FLAG_LONG, FLAG_FLOAT, FLAG_CHOICE, FLAG_LOSS_SCALE } FlagKind;

typedef struct {
    const char* long_name;
    char short_name;        // llm.c's flag with the same meaning, 0 if none
    FlagKind kind;
    size_t offset;          // of the field in Args
    double lo, hi;          // FLAG_INT, FLAG_LONG, FLAG_FLOAT: the valid range, inclusive
    const char* choices;    // FLAG_CHOICE: "none|selective|full" (stored: the index); FLAG_FLOAT: NULL, or "lo-open" /
                            // "hi-open" when that bound is excluded (AdamW's betas below 1, eps above 0)
    const char* help;
} FlagDoc;

#define A_(field) offsetof(Args, field)
#define BIG 1e9             // "any sensible count"
static const FlagDoc FLAGS[] = {
    {"--model", 'e', FLAG_STRING, A_(model), 0, 0, NULL, "llm.c checkpoint path, or a fresh model: dN[,C=..][,NH=..][,maxT=..][,V=..] (default d12)"},
    {"--train-data", 'i', FLAG_STRING, A_(train_data), 0, 0, NULL, "glob of train token shards (default " DEFAULT_TRAIN_DATA ")"},
    {"--val-data", 'j', FLAG_STRING, A_(val_data), 0, 0, NULL, "glob of val token shards, empty: no validation (default " DEFAULT_VAL_DATA ")"},
    {"--tokenizer", 0, FLAG_STRING, A_(tokenizer), 0, 0, NULL, "llm.c tokenizer file for decoding samples, empty: print token ids (default " DEFAULT_TOKENIZER ")"},
    {"--batch", 'b', FLAG_INT, A_(B), 1, 1 << 20, NULL, "micro-batch size B per process (default 4)"},
    {"--seq-len", 't', FLAG_INT, A_(T), 1, 1 << 24, NULL, "sequence length T (default 1024, at most the model's maxT)"},
    {"--total-batch", 'd', FLAG_LONG, A_(total_batch), 1, 1e15, NULL, "tokens per optimizer step; a multiple of B*T*dp (default B*T*dp): gradient accumulation"},
    {"--steps", 'x', FLAG_INT, A_(steps), -1, BIG, NULL, "optimizer steps (default -1: one epoch of the train data)"},
    {"--lr", 'l', FLAG_FLOAT, A_(lr), 0, 1, NULL, "peak learning rate (default 3e-4)"},
    {"--warmup", 'u', FLAG_INT, A_(warmup), 0, BIG, NULL, "linear warm-up steps (default 0)"},
    {"--lr-final", 'q', FLAG_FLOAT, A_(lr_final), 0, 1, NULL, "final learning rate as a fraction of --lr, the end of the cosine decay (default 1.0)"},
    {"--beta1", 0, FLAG_FLOAT, A_(beta1), 0, 1, "hi-open", "AdamW's beta1, the first moment's decay (default 0.9; resumed: the checkpoint's)"},
    {"--beta2", 0, FLAG_FLOAT, A_(beta2), 0, 1, "hi-open", "AdamW's beta2, the second moment's decay (default 0.95; resumed: the checkpoint's)"},
    {"--eps", 0, FLAG_FLOAT, A_(eps), 0, 1, "lo-open", "AdamW's epsilon (default 1e-8; resumed: the checkpoint's)"},
    {"--weight-decay", 'c', FLAG_FLOAT, A_(weight_decay), 0, 1, NULL, "AdamW decoupled weight decay of the 2-D tensors (default 0.0)"},
    {"--grad-clip", 0, FLAG_FLOAT, A_(grad_clip), 0, 1e6, NULL, "clip the global gradient norm to this, 0 = off (default 1.0)"},
    {"--seed", 0, FLAG_INT, A_(seed), 0, 2147483647.0, NULL, "seed of initialisation, data order and sampling (default 1337)"},
    {"--shuffle", 0, FLAG_INT, A_(shuffle), 0, 1, NULL, "1: shuffle shards and samples each epoch, from the seed; 0: in order (default 1)"},
    {"--val-every", 'v', FLAG_INT, A_(val_every), 0, BIG, NULL, "val loss every N steps, 0 = never (default 20)"},
    {"--val-steps", 'm', FLAG_INT, A_(val_steps), 1, BIG, NULL, "batches per val loss (default 20)"},
    {"--sample-every", 's', FLAG_INT, A_(sample_every), 0, BIG, NULL, "print a sample every N steps, 0 = never (default 20)"},
    {"--print-every", 0, FLAG_INT, A_(print_every), 1, BIG, NULL, "print the step line every N steps (and the first, the last, and those with a val loss or a skip) (default 1)"},
    {"--sample-len", 'g', FLAG_INT, A_(sample_len), 1, 1 << 24, NULL, "tokens per sample (default 64)"},
    {"--generate", 0, FLAG_INT, A_(generate), 0, 1 << 24, NULL, "generation mode: print the --model's continuation of --prompt-tokens, this many new tokens (at most to maxT), and exit; no training, no data (default 0: train)"},
    {"--prompt-tokens", 0, FLAG_STRING, A_(prompt_tokens), 0, 0, NULL, "with --generate: the prompt's token ids, \"id,id,...\" or a file of ids (scripts/prompt.py encodes text) (default <|endoftext|>)"},
    {"--temperature", 0, FLAG_FLOAT, A_(temperature), 0, 100, NULL, "samples and --generate: draw from softmax(logits / temperature), 0 = greedy (the argmax) (default 1.0)"},
    {"--sample-top-k", 0, FLAG_INT, A_(sample_top_k), 0, BIG, NULL, "samples and --generate: draw among the k most likely tokens, 0 = all (default 0)"},
    {"--checkpoint-every", 'n', FLAG_INT, A_(checkpoint_every), 0, BIG, NULL, "save model and resumable state every N steps and at the end, 0 = never (default 0)"},
    {"--checkpoint-format", 0, FLAG_CHOICE, A_(checkpoint_format), 0, 0, "gathered|sharded|both",
     "gathered (model_<step>.bin + state_<step>.bin), sharded (ckpt_<step>/: a shard per rank + manifest) or both (default gathered)"},
    {"--async-checkpoint", 0, FLAG_INT, A_(async_checkpoint), 0, 1, NULL, "1: sharded checkpoints copied aside and written by a background thread while training goes on (default 0)"},
    {"--keep-checkpoints", 0, FLAG_INT, A_(keep_checkpoints), 0, 1e6, NULL, "sharded checkpoints: keep the K newest good ones and the K newest of any kind, 0 = all (default 0)"},
    {"--save-on-signal", 0, FLAG_INT, A_(save_on_signal), 0, 1, NULL, "1: SIGTERM / SIGINT finish the step, save it, and exit with 128 + the signal; 0: end at once (default 1)"},
    {"--output-dir", 'o', FLAG_STRING, A_(output_dir), 0, 0, NULL, "directory for the log and checkpoints (default out)"},
    {"--resume", 'y', FLAG_STRING, A_(resume), 0, 0, NULL, "resume from a state file or checkpoint directory, or 1/latest = the newest good one in --output-dir (default 0)"},
    {"--log", 0, FLAG_STRING, A_(log_path), 0, 0, NULL, "JSON-lines log, one object per step (default <output-dir>/log.jsonl)"},
    {"--eval-file", 0, FLAG_STRING, A_(eval_file), 0, 0, NULL, "held-out shard of 'prompt=answer' documents: greedy exact-match accuracy at the end"},
    {"--hellaswag", 0, FLAG_STRING, A_(hellaswag), 0, 0, NULL, "HellaSwag in llm.c's eval format (python3 dev/data/hellaswag.py writes " DEFAULT_HELLASWAG "): acc_norm on the step line and in the log; llm.c's -h 1 is this file, -h 0 none (-h otherwise: --help)"},
    {"--hellaswag-every", 0, FLAG_INT, A_(hellaswag_every), 0, BIG, NULL, "with --hellaswag: acc_norm every N steps and at the last; 0 = at the val loss's steps, --val-every (default 0)"},
    {"--hellaswag-losses", 0, FLAG_STRING, A_(hellaswag_losses), 0, 0, NULL, "with --hellaswag: write each example's label, winner and four completion losses here after each evaluation"},
    {"--dp", 0, FLAG_INT, A_(dp), 0, 1 << 20, NULL, "data-parallel ranks (default 0: the world size / (tp*pp*cp)); world size = dp*tp*pp*cp"},
    {"--tp", 0, FLAG_INT, A_(tp), 1, 1 << 16, NULL, "tensor-parallel ranks (default 1): Megatron's split of every weight matrix (llm/sharded/tensor_parallel.h)"},
    {"--sequence-parallel", 0, FLAG_INT, A_(sequence_parallel), 0, 1, NULL, "1: with --tp, LayerNorms and residual adds on 1/tp of the tokens each (Korthikanti et al. 2022) (default 0)"},
    {"--ep", 0, FLAG_INT, A_(ep), 1, 1 << 16, NULL, "expert-parallel ranks (default 1): each moe layer's experts split over ep of the dp ranks, tokens sent to them by two all-to-alls (llm/sharded/expert_parallel.h; docs/moe.md)"},
    {"--cp", 0, FLAG_INT, A_(cp), 1, 1 << 16, NULL, "context-parallel ranks (default 1): every sequence split over cp ranks, inside attention too (llm/sharded/context_parallel.h)"},
    {"--cp-impl", 0, FLAG_CHOICE, A_(cp_impl), 0, 0, "ring|ulysses", "with --cp: ring attention (K/V blocks around the ring) or Ulysses (all-to-alls to a head split) (default ring)"},
    {"--cp-balance", 0, FLAG_CHOICE, A_(cp_balance), 0, 0, "zigzag|contiguous", "with --cp: the chunks of the sequence a rank holds: zigzag (i and 2cp-1-i, balanced under the causal mask) or contiguous (default zigzag)"},
    {"--pp", 0, FLAG_INT, A_(pp), 1, 1 << 16, NULL, "pipeline-parallel stages (default 1): the layers split over pp ranks (llm/parallel/pipeline.h)"},
    {"--schedule", 0, FLAG_STRING, A_(schedule), 0, 0, NULL, "pipeline schedule: gpipe, 1f1b, interleaved (with --vpp), zb-h1, zbv or dualpipev (default 1f1b)"},
    {"--vpp", 0, FLAG_INT, A_(vpp), 1, 1 << 16, NULL, "chunks of layers per pipeline rank, with --schedule interleaved (default 1; zbv and dualpipev: 2, the V)"},
    {"--overlap-pairs", 0, FLAG_INT, A_(overlap_pairs), 0, 1, NULL, "with --schedule dualpipev: 1 each F&B pair's two directions interleaved at the moe all-to-alls, each all-to-all in flight while the other direction computes; 0 one after the other (default 1)"},
    {"--trace", 0, FLAG_STRING, A_(trace), 0, 0, NULL, "write a Chrome/Perfetto trace of the last training step here (scripts/plot_trace.py draws it)"},
    {"--zero", 0, FLAG_INT, A_(zero), 0, 3, NULL, "ZeRO over the dp ranks: 0 = DDP, 1 = optimizer states, 2 = + gradients, 3 = + parameters (default 0)"},
    {"--report-json", 0, FLAG_STRING, A_(report_json), 0, 0, NULL, "write each rank's memory (bytes per kind vs the ZeRO paper) and per-step comm ledger here"},
    {"--recompute", 0, FLAG_CHOICE, A_(recompute), 0, 0, "none|selective|full", "activation recompute: none, selective (attention core + LayerNorms) or full (default none)"},
    {"--fp8", 0, FLAG_CHOICE, A_(fp8), 0, 0, "none|delayed|current|block|mx", "FP8 block linears (llm/precision/fp8_linear.h): none, delayed, current, block (DeepSeek-V3 tiles) or mx (default none)"},
    {"--fp8-format", 0, FLAG_CHOICE, A_(fp8_e4m3), 0, 0, "hybrid|e4m3", "hybrid (E4M3 forward, E5M2 gradients) or e4m3 (E4M3 everywhere) (default hybrid)"},
    {"--experts", 0, FLAG_INT, A_(experts), 0, 1 << 16, NULL, "a fresh model's experts per moe layer, 0 = dense (default 0; docs/moe.md)"},
    {"--top-k", 0, FLAG_INT, A_(top_k), 1, 1 << 16, NULL, "experts per token, at most --experts (default 2 with --experts)"},
    {"--moe-every", 0, FLAG_INT, A_(moe_every), 1, 1 << 16, NULL, "layer l has experts when l % M == 0 (default 1: every layer)"},
    {"--capacity-factor", 0, FLAG_FLOAT, A_(capacity_factor), 0, 1e6, NULL, "each expert keeps at most ceil(F K N / E) of a call's N tokens' assignments, 0 = no drops (default 0)"},
    {"--aux-loss-coef", 0, FLAG_FLOAT, A_(aux_loss_coef), 0, 1e6, NULL, "the load-balancing loss's coefficient (default 0.01)"},
    {"--z-loss-coef", 0, FLAG_FLOAT, A_(z_loss_coef), 0, 1e6, NULL, "the router z-loss's coefficient (default 0.001)"},
    {"--expert-bias-rate", 0, FLAG_FLOAT, A_(expert_bias_rate), 0, 1e6, NULL, "aux-loss-free balancing (DeepSeek-V3): the selection bias moves by R * sign(mean load - load) per step, 0 = off (default 0)"},
    {"--fp8-history", 0, FLAG_INT, A_(fp8_history), 1, 4096, NULL, "delayed scaling: amax history length in steps (default 16)"},
    {"--fp8-amax-reduce", 0, FLAG_CHOICE, A_(fp8_reduce), 0, 0, "max|most_recent", "delayed scaling: the history's reduction, max or most_recent (default max)"},
    {"--fp8-margin", 0, FLAG_INT, A_(fp8_margin), 0, 32, NULL, "delayed scaling: scale = fp8_max / amax / 2^margin (default 0)"},
    {"--loss-scale", 0, FLAG_LOSS_SCALE, A_(loss_scale), 0x1p-24, 0x1p64, NULL, "loss scaling (llm/precision/loss_scale.h): dynamic, none or a fixed scale (default dynamic in FP16 builds, else none)"},
    {"--loss-scale-init", 0, FLAG_FLOAT, A_(loss_scale_init), 0x1p-24, 0x1p64, NULL, "dynamic loss scaling: the first scale (default 65536)"},
    {"--loss-scale-window", 0, FLAG_INT, A_(loss_scale_window), 1, BIG, NULL, "dynamic loss scaling: good steps in a row before the scale doubles (default 1000)"},
    {"--inject", 0, FLAG_STRING, A_(inject), 0, 0, NULL, "faults on purpose, ';'-separated (llm/faults/inject.h): die@step=N,rank=R[,at=reduce]  hang@..  nan@..[,count=C]  spike@..[,count=C]  "
                    "gradspike@..[,count=C,factor=F]  slow@rank=R,ms=M[,step=N]  bitflip@step=N,rank=R[,index=I,bit=B]  diskfail@step=N,rank=R,bytes=B  "
                    "slowdisk@rank=R,ms=M[,step=N]"},
    {"--spike-zscore", 0, FLAG_FLOAT, A_(spike_zscore), 0, 1e6, NULL, "a step whose loss or grad norm is more than Z std above the window's mean is skipped, 0 = off (default 0)"},
    {"--spike-window", 0, FLAG_INT, A_(spike_window), 2, 1000000, NULL, "the healthy steps the spike rules look back over (default 100)"},
    {"--spike-factor", 0, FLAG_FLOAT, A_(spike_factor), 0, 1e6, NULL, "a step whose loss or grad norm is more than K (> 1) times the window's max is skipped, 0 = off (default 0)"},
    {"--max-bad-steps", 0, FLAG_INT, A_(max_bad_steps), 0, BIG, NULL, "this many skipped steps in a row roll back to the last good checkpoint, or stop with exit 3; 0 = never (default 5)"},
    {"--sdc-check-every", 0, FLAG_INT, A_(sdc_check_every), 0, BIG, NULL, "compare parameter hashes over the dp replicas every N steps (and at checkpoints), 0 = never (default 0)"},
    {"--comm-timeout", 0, FLAG_FLOAT, A_(comm_timeout), 0, 86400, NULL, "seconds a collective or P2P may wait: then every rank names the step, call, group and missing rank, and the job ends; 0 = off (default 300)"},
    {"--straggler-every", 0, FLAG_INT, A_(straggler_every), 0, BIG, NULL, "every N steps compare the ranks' compute time per step and name the slow ones, 0 = never (default 0)"},
    {"--straggler-factor", 0, FLAG_FLOAT, A_(straggler_factor), 1.000001, 1000, NULL, "a rank whose compute time exceeds the median's by more than this factor (> 1) is a straggler (default 1.5)"},
    {"--max-memory", 0, FLAG_FLOAT, A_(max_memory), 0, 1e6, NULL, "GiB of device memory a rank may allocate, as if its device had that much: past it the run ends with one line (default 0: no limit)"},
    {"--peak-tflops", 0, FLAG_FLOAT, A_(peak_tflops), 0, 1e6, NULL, "the peak TFLOP/s of one process's device, the denominator of the MFU on the step line and in the log; 0 = measure a dense GEMM at start-up (llm/train/mfu.h) (default 0)"},
};
#undef A_
#undef BIG
#define NUM_FLAGS ((int)(sizeof(FLAGS) / sizeof(FLAGS[0])))

// the row's valid values as text: "an integer in [1, 4096]", "0 or 1", "none, delayed, ... or mx"
static void flag_range_text(const FlagDoc* f, char* out, size_t cap) {
    if (f->kind == FLAG_CHOICE) {
        size_t k = 0;
        out[0] = '\0';
        for (const char* p = f->choices; *p && k + 8 < cap;) {
            const char* bar = strchr(p, '|');
            size_t n = bar ? (size_t)(bar - p) : strlen(p);
            k += snprintf(out + k, cap - k, "%s%.*s", p == f->choices ? "" : (bar ? ", " : " or "), (int)n, p);
            p += n + (bar ? 1 : 0);
        }
    } else if (f->kind == FLAG_LOSS_SCALE) {
        snprintf(out, cap, "dynamic, none or a positive number in [%g, %g]", f->lo, f->hi);
    } else if ((f->kind == FLAG_INT || f->kind == FLAG_LONG) && f->lo == 0 && f->hi == 1) {
        snprintf(out, cap, "0 or 1");
    } else {
        int lo_open = f->choices && !strcmp(f->choices, "lo-open"), hi_open = f->choices && !strcmp(f->choices, "hi-open");
        snprintf(out, cap, "%s in %c%.10g, %.10g%c", f->kind == FLAG_FLOAT ? "a number" : "an integer", lo_open ? '(' : '[', f->lo,
                 f->hi, hi_open ? ')' : ']');
    }
}

static void print_usage(void) {
    printf("usage: train_gpt [flags]   (%s build, %s)\n", LLM_BUILD_CPU ? "CPU" : (LLM_BUILD_EMU ? "emulated CUDA" : "CUDA"), PRECISION_MODE);
    for (int i = 0; i < NUM_FLAGS; i++) {
        char shortf[8] = "", range[200] = "";
        if (FLAGS[i].short_name) snprintf(shortf, sizeof(shortf), "-%c", FLAGS[i].short_name);
        if (FLAGS[i].kind != FLAG_STRING && FLAGS[i].kind != FLAG_CHOICE) flag_range_text(&FLAGS[i], range, sizeof(range));
        printf("  %-20s %-3s %s%s%s\n", FLAGS[i].long_name, shortf, FLAGS[i].help, range[0] ? "; " : "", range);
    }
    printf("  --help                   this text\n");
}

// a value out of its row's range, or not a number: one line naming the flag, the range and the value
[[noreturn]] static void flag_bad(const FlagDoc* f, const char* v) {
    char range[300];
    flag_range_text(f, range, sizeof(range));
    fatal("%s: expected %s, found '%s'", f->long_name, range, v);
}

// v as a number of the row's kind within its range, or flag_bad: the whole value, no spaces
static double flag_number(const FlagDoc* f, const char* v) {
    if (v[0] == '\0' || isspace((unsigned char)v[0])) flag_bad(f, v);
    char* end;
    errno = 0;
    double x;
    if (f->kind == FLAG_FLOAT || f->kind == FLAG_LOSS_SCALE) {
        x = strtod(v, &end);
        if (!isfinite(x)) flag_bad(f, v);
    } else {
        long long i = strtoll(v, &end, 10);
        x = (double)i;
    }
    if (errno != 0 || *end != '\0' || x < f->lo || x > f->hi) flag_bad(f, v);
    if (f->kind == FLAG_FLOAT && f->choices && ((!strcmp(f->choices, "lo-open") && (float)x == (float)f->lo) ||
                                                (!strcmp(f->choices, "hi-open") && (float)x == (float)f->hi))) flag_bad(f, v);
    return x;
}

// the value v of flag row f into a
static void flag_set(Args* a, const FlagDoc* f, const char* v, float* fixed_scale) {
    char* field = (char*)a + f->offset;
    switch (f->kind) {
        case FLAG_STRING: *(const char**)field = v; break;
        case FLAG_INT: *(int*)field = (int)flag_number(f, v); break;
        case FLAG_LONG: *(long*)field = (long)flag_number(f, v); break;
        case FLAG_FLOAT: *(float*)field = (float)flag_number(f, v); break;
        case FLAG_CHOICE: {
            int k = 0, found = -1;
            for (const char* p = f->choices; *p; k++) {
                const char* bar = strchr(p, '|');
                size_t n = bar ? (size_t)(bar - p) : strlen(p);
                if (strlen(v) == n && !strncmp(v, p, n)) found = k;
                p += n + (bar ? 1 : 0);
            }
            if (found < 0) flag_bad(f, v);
            *(int*)field = found;
            break;
        }
        case FLAG_LOSS_SCALE:  // dynamic, none, or a fixed scale
            if (!strcmp(v, "none")) *(int*)field = 0;
            else if (!strcmp(v, "dynamic")) *(int*)field = 2;
            else { *fixed_scale = (float)flag_number(f, v); *(int*)field = 1; }
            break;
    }
}

static void parse_args(Args* a, int argc, char** argv) {
    a->model = "d12";
    a->train_data = DEFAULT_TRAIN_DATA;
    a->val_data = DEFAULT_VAL_DATA;
    a->tokenizer = DEFAULT_TOKENIZER;
    a->output_dir = "out";
    a->log_path = NULL;
    a->resume = NULL;
    a->eval_file = NULL;
    a->hellaswag = NULL; a->hellaswag_every = 0; a->hellaswag_losses = NULL;
    a->B = 4; a->T = 1024; a->total_batch = -1; a->steps = -1;
    a->lr = 3e-4f; a->lr_final = 1.0f; a->weight_decay = 0.0f; a->grad_clip = 1.0f; a->warmup = 0;
    a->seed = 1337; a->shuffle = 1;
    a->val_every = 20; a->val_steps = 20; a->sample_every = 20; a->sample_len = 64; a->checkpoint_every = 0;
    a->dp = 0; a->tp = 1; a->pp = 1; a->cp = 1; a->ep = 1; a->cp_impl = 0; a->cp_balance = 0; a->zero = 0; a->report_json = NULL; a->recompute = 0;
    a->sequence_parallel = 0;
    a->schedule = "1f1b"; a->vpp = 0; a->trace = NULL;  // vpp 0: the schedule's (args_check_layout)
    a->overlap_pairs = -1;
    a->fp8 = 0; a->fp8_e4m3 = 0; a->fp8_history = 16; a->fp8_reduce = 0; a->fp8_margin = 0;
    a->inject = NULL;
    a->experts = 0; a->top_k = 0; a->moe_every = 1;
    a->capacity_factor = 0.0f; a->aux_loss_coef = 0.01f; a->z_loss_coef = 0.001f; a->expert_bias_rate = 0.0f;
    a->checkpoint_format = 0; a->async_checkpoint = 0; a->keep_checkpoints = 0; a->save_on_signal = 1;
#if defined(ENABLE_FP16)
    a->loss_scale = 2;  // FP16 needs it (llm/precision/loss_scale.h)
#else
    a->loss_scale = 0;
#endif
    a->loss_scale_init = 65536.0f; a->loss_scale_window = 1000;
    a->spike_zscore = 0.0f; a->spike_window = 100; a->spike_factor = 0.0f; a->max_bad_steps = 5; a->sdc_check_every = 0;
    a->comm_timeout = 300.0f; a->straggler_every = 0; a->straggler_factor = 1.5f;
    a->peak_tflops = 0.0f;
    a->max_memory = 0.0f;
    a->beta1 = a->beta2 = a->eps = NAN;
    a->print_every = 1;
    a->generate = 0; a->prompt_tokens = NULL; a->temperature = 1.0f; a->sample_top_k = 0;
    float fixed_scale = 0.0f;
    for (int i = 1; i < argc; i++) {
        const char* arg = argv[i];
        // llm.c's -h 0 / -h 1: HellaSwag off / on (--hellaswag DEFAULT_HELLASWAG); -h otherwise is --help
        if (strcmp(arg, "-h") == 0 && i + 1 < argc && (!strcmp(argv[i + 1], "0") || !strcmp(argv[i + 1], "1"))) {
            a->hellaswag = argv[++i][0] == '1' ? DEFAULT_HELLASWAG : NULL;
            continue;
        }
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) { print_usage(); exit(0); }
        // a short alias or a long name: the flag's row
        const FlagDoc* f = NULL;
        for (int k = 0; k < NUM_FLAGS; k++) {
            if (strcmp(arg, FLAGS[k].long_name) == 0 ||
                (FLAGS[k].short_name && arg[0] == '-' && arg[1] == FLAGS[k].short_name && arg[2] == '\0')) {
                f = &FLAGS[k];
            }
        }
        if (f == NULL) fatal("unknown flag '%s' (see --help)", arg);
        if (i + 1 >= argc) fatal("%s: expected a value, found the end of the command line", arg);
        flag_set(a, f, argv[++i], &fixed_scale);
    }
    // what a row's range cannot say
    if (a->spike_factor != 0.0f && !(a->spike_factor > 1.0f)) fatal("--spike-factor: expected 0 (off) or a number in (1, 1e+06], found %g", a->spike_factor);
    if (a->loss_scale == 1) a->loss_scale_init = fixed_scale;
    if (a->async_checkpoint && a->checkpoint_format == 0) a->checkpoint_format = 1;  // async saves are sharded
    if (a->resume && (!strcmp(a->resume, "0") || !strcmp(a->resume, ""))) a->resume = NULL;
    if (a->val_data && a->val_data[0] == '\0') a->val_data = NULL;
    if (a->tokenizer && a->tokenizer[0] == '\0') a->tokenizer = NULL;
    if (a->report_json && a->report_json[0] == '\0') a->report_json = NULL;
    if (a->trace && a->trace[0] == '\0') a->trace = NULL;
    if (a->hellaswag && a->hellaswag[0] == '\0') a->hellaswag = NULL;
    if (a->hellaswag_losses && a->hellaswag_losses[0] == '\0') a->hellaswag_losses = NULL;
    if (a->hellaswag_losses && !a->hellaswag) fatal("--hellaswag-losses: expected with --hellaswag FILE (the examples scored), found no --hellaswag");
    if (a->hellaswag && a->generate > 0) fatal("--hellaswag: expected a training run, found --generate %d (generation evaluates nothing)", a->generate);
    if (a->prompt_tokens && a->generate == 0) fatal("--prompt-tokens: expected with --generate N (the tokens to print after it), found no --generate");
    if (a->generate > 0) {
        // generation reads no data and decodes one position at a time: the smallest batch any layout takes (one
        // sequence of 2 cp tokens, one micro-batch), the layers split as 1F1B splits them (the split moves no token)
        a->train_data = a->val_data = NULL;
        a->B = 1; a->T = 2 * a->cp; a->total_batch = -1;
        a->schedule = "1f1b"; a->vpp = 1; a->sequence_parallel = 0;
    }
}

// The default data (DEFAULT_DATA_DIR) is made by dev/data/shakespeare.py, not shipped: when --train-data or
// --val-data left at its default names a file that is not there, one line saying how to make it (rather than the
// data loader's "cannot open"). A path given on the command line is the user's, and its errors are the loader's.
// (A missing tokenizer is no error: the samples print token ids, train_gpt.cu.)
static void args_check_default_data(const Args* a) {
    const char* flag[2] = {"--train-data", "--val-data"};
    const char* path[2] = {a->train_data, a->val_data};
    const char* dflt[2] = {DEFAULT_TRAIN_DATA, DEFAULT_VAL_DATA};
    for (int i = 0; i < 2; i++) {
        if (path[i] != NULL && strcmp(path[i], dflt[i]) == 0 && access(path[i], R_OK) != 0) {
            fatal("%s: the default, %s, is not there (%s): make it with %s, or name your data with --train-data, "
                  "--val-data and --tokenizer", flag[i], path[i], strerror(errno), DEFAULT_DATA_HOW);
        }
    }
}

// why the experts flags cannot run (E experts, K per token: the model's), or 0. (Context and sequence parallelism,
// apart or together, route the whole micro-batch on every rank: llm/sharded/moe_sequence.h. FP8 runs the experts'
// linears in FP8 too: llm/model/moe.h.)
static int args_moe_error(const Args* a, int E, int K, char* err, size_t n, int model_known = 1) {
    if (E == 0) {
        if (a->top_k) snprintf(err, n, "--top-k %d: expected --experts > 0, found --experts 0", a->top_k);
        else if (a->ep > 1 && model_known) snprintf(err, n, "--ep %d: expected a model with experts (--experts > 0), found a dense one", a->ep);
        return err[0] != '\0';
    }
    if (K > E) snprintf(err, n, "--top-k: expected at most --experts %d, found %d", E, K);
    else if (E % a->ep != 0) snprintf(err, n, "--ep %d: expected a divisor of the experts per layer %d (each ep rank holds E/ep of them)", a->ep, E);
    return err[0] != '\0';
}

// --expert-bias-rate R > 0 (the aux-loss-free balancing, llm/train/moe_balance.h) needs a model with experts (E: the
// model's, from --experts or the model file): why not, or 0
static int args_bias_error(const Args* a, int E, char* err, size_t n) {
    if (a->expert_bias_rate > 0.0f && E == 0) {
        snprintf(err, n, "--expert-bias-rate %g: expected a model with experts (--experts > 0), found a dense model", a->expert_bias_rate);
    }
    return err[0] != '\0';
}

// The layout, once the processes are known and before anything is allocated: the ZeRO level, the
// parallelisms implemented so far, the batch over the dp ranks (comm_init, which builds the groups,
// has checked dp * tp * pp against the world size). On an error rank 0 prints one line and every
// rank exits non-zero. Sets a->total_batch when it was left to its default.
static void args_check_layout(Args* a, Comm* c) {
    char err[512] = "";
    long bt = (long)a->B * a->T, btdp = bt * c->mesh.dp.size;
    if (a->total_batch == -1) a->total_batch = btdp;  // one micro-step per rank
    if (a->vpp == 0) a->vpp = schedule_is_v(a->schedule) ? 2 : 1;  // --vpp not given: the V has two chunks, others one
    if (args_moe_error(a, a->experts, a->top_k, err, sizeof(err), 0)) {  // (the model: setup_model)
    } else if (a->overlap_pairs >= 0 && strcmp(a->schedule, "dualpipev") != 0) {
        snprintf(err, sizeof(err), "--overlap-pairs: expected --schedule dualpipev (the only schedule with F&B pairs), found %s", a->schedule);
    } else if (a->sequence_parallel && c->mesh.tp.size > 1 && a->T % c->mesh.tp.size != 0) {
        snprintf(err, sizeof(err), "--sequence-parallel 1: expected the sequence length -t %d to divide evenly over --tp %d",
                 a->T, c->mesh.tp.size);
    } else if (a->total_batch <= 0 || a->total_batch % btdp != 0) {
        if (c->mesh.dp.size == 1) {
            snprintf(err, sizeof(err), "--total-batch: expected a positive multiple of B*T = %d*%d = %ld, found %ld",
                     a->B, a->T, bt, a->total_batch);
        } else {
            snprintf(err, sizeof(err), "--total-batch: expected a positive multiple of B*T*dp = %d*%d*%d = %ld "
                     "(every dp rank reads B*T tokens per micro-step), found %ld", a->B, a->T, c->mesh.dp.size, btdp, a->total_batch);
        }
    }
    if (err[0] == '\0') return;
    if (c->world_rank == 0) {
        fprintf(stderr, "error: %s\n", err);
        fflush(stderr);
    }
    comm_exit(c, EXIT_FAILURE);  // every rank gets here (same arguments), then all exit non-zero
}

// AdamW and the lr schedule over `steps` steps, as the flags say (a resumed run: beta1, beta2, eps from its
// checkpoint unless given, llm/ckpt/ckpt_run.h)
static OptimConfig args_optim_config(const Args* a, int steps) {
    OptimConfig oc = {a->lr, a->lr_final, a->warmup, steps, isnan(a->beta1) ? ADAMW_DEFAULT_BETA1 : a->beta1,
                      isnan(a->beta2) ? ADAMW_DEFAULT_BETA2 : a->beta2, isnan(a->eps) ? ADAMW_DEFAULT_EPS : a->eps,
                      a->weight_decay, a->grad_clip};
    return oc;
}

// Every directory the run writes into (--output-dir, the parents of --log, --report-json, --trace,
// --hellaswag-losses), made with its parents: all checked first, so that nothing is created if one cannot be (rank 0)
static void args_make_output_dirs(const Args* a) {
    for (int create = 0; create <= 1; create++) {
        make_dirs("--output-dir", a->output_dir, create);
        if (a->log_path) make_parent_dirs("--log", a->log_path, create);
        if (a->report_json) make_parent_dirs("--report-json", a->report_json, create);
        if (a->trace) make_parent_dirs("--trace", a->trace, create);
        if (a->hellaswag_losses) make_parent_dirs("--hellaswag-losses", a->hellaswag_losses, create);
    }
}
