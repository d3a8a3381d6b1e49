// checkpoint.h: model checkpoints in llm.c's format (docs/formats.md: version 3 = FP32, 5 = BF16) and the
// trainer's own resumable state (parameters, AdamW moments, step, data position, RNG, the FP8, loss-scale
// and health state), which is independent of the process layout. Every file goes through
// llm/core/atomic_file.h's writer (a temporary name, fsync, rename: a crash never leaves a half-written file
// under the real name; a failed write removes the temporary file) and carries a checksum of all its
// bytes, written last, that every read verifies before anything is used. Every header field is
// range-checked. A file without a checksum (written before it existed, or an llm.c file) is read with a
// line saying that it is unverified.
#pragma once
#include <unistd.h>
#include "../core/common.h"
#include "../model/units.h"
#include "../train/dataloader.h"
#include "../core/atomic_file.h"

#define CHECKPOINT_MAGIC 20240326
#define STATE_MAGIC 20261122      // this trainer's resumable state
#define STATE_VERSION 4           // 4: with the moe layers' selection bias (header[41]); 3: with AdamW's beta1,
                                  // beta2, eps (header[38..40]); 2: the verdict and the checksum (header[34..37]);
                                  // 1: before them
#define HEADER_INTS 256
// a mixture-of-experts model (GPTConfig.num_experts > 0) cannot be an llm.c file: its own versions, the llm.c
// version + 3 (6 = FP32, 8 = BF16), with header[8..10] = E, K, M (docs/formats.md); llm.c readers refuse them
#define CHECKPOINT_MOE_VERSION(v) ((v) + 3)
#define CKPT_SUM_MARK 0x4d555343  // "CSUM": the header slot before a checksum says one is there

// the 16-bit parameters this build's state carries beside the FP32 master (header[18]): 1 BF16, 2 FP16,
// 0 none (FP32 builds keep no master: their parameters are the FP32 values)
#if defined(LLM_FLOATX_IS_FLOAT)
#define STATE_FLOATX_KIND 0
#elif defined(ENABLE_FP16)
#define STATE_FLOATX_KIND 2
#else
#define STATE_FLOATX_KIND 1
#endif

// what the health checks said of the step a checkpoint was saved after (header[34]): only a healthy one is
// a last-known-good checkpoint that --resume latest and the rollback take
#define CKPT_HEALTHY 0
#define CKPT_IN_STREAK 1          // saved inside a streak of bad (skipped) steps
#define CKPT_SDC 2                // the SDC check found the replicas' parameters different at that step
static const char* ckpt_verdict_name(int v) {
    return v == CKPT_HEALTHY ? "healthy" : v == CKPT_IN_STREAK ? "saved inside a streak of bad steps" : "rejected by the SDC check";
}

// where a header keeps its checksum: the mark, then the sum (lo, hi); summed with these three slots 0
#define STATE_SUM_SLOT 35         // the resumable state (and a shard's header: the slots are the same)
#define MODEL_SUM_SLOT 253        // an llm.c model file (slots llm.c leaves 0 and does not read)

static void put64(int* h, int slot, uint64_t x) { h[slot] = (int)(uint32_t)x; h[slot + 1] = (int)(uint32_t)(x >> 32); }
static uint64_t get64(const int* h, int slot) { return (uint64_t)(uint32_t)h[slot] | ((uint64_t)(uint32_t)h[slot + 1] << 32); }

// Writes path from the buffers of job (the header first, its checksum slots 0, then the body, in file
// order), summed by a second thread beside the writes, then puts the checksum into the header's slots
// at `slot` and closes: af_close's answer.
static int af_write_sealed(AtomicFile* af, const char* path, SumJob* job, int slot, long fail_at, int slow_ms) {
    sum_job_start(job, 0);
    af_open(af, path, fail_at, slow_ms);
    af->summing = 0;
    for (int i = 0; i < job->k; i++) af_write(af, job->p[i], job->n[i]);
    int s[3] = {CKPT_SUM_MARK, 0, 0};
    put64(s, 1, sum_job_finish(job, 0));
    af_patch(af, (long)(slot * sizeof(int)), s, sizeof(s));
    return af_close(af);
}

// ----------------------------------------------------------------------------
// reading a file whole, with its checksum

// A file read whole into buffers planned in advance (rd_plan), summed by a second thread that follows
// the reads (a SumJob): the header first (its checksum slots as 0), then each buffer in file order.
typedef struct {
    FILE* f;
    long size;
    int header[HEADER_INTS];
    int zeroed[HEADER_INTS];   // the header with its checksum slots 0: what was summed
    SumJob job;
    size_t done;               // the bytes of the planned buffers read so far
} SumReader;

// opens path and reads its header; 0 with why on failure
static int rd_open(SumReader* r, const char* path, char* why, size_t cap) {
    memset(r, 0, sizeof(*r));
    r->f = fopen(path, "rb");
    if (r->f == NULL) { snprintf(why, cap, "cannot open: %s", strerror(errno)); return 0; }
    if (fseek(r->f, 0, SEEK_END) != 0 || (r->size = ftell(r->f)) < 0 || fseek(r->f, 0, SEEK_SET) != 0) {
        snprintf(why, cap, "cannot read: %s", strerror(errno));
        return 0;
    }
    if (fread(r->header, sizeof(int), HEADER_INTS, r->f) != HEADER_INTS) {
        snprintf(why, cap, "expected a 1024-byte header, found a file of %ld bytes", r->size);
        return 0;
    }
    return 1;
}

// the header (its checksum's three slots at `slot` as 0) goes first into the sum
static void rd_plan_header(SumReader* r, int slot) {
    memcpy(r->zeroed, r->header, sizeof(r->zeroed));
    r->zeroed[slot] = r->zeroed[slot + 1] = r->zeroed[slot + 2] = 0;
    sum_job_add(&r->job, r->zeroed, sizeof(r->zeroed));
    r->done = sizeof(r->zeroed);
}
static void rd_plan(SumReader* r, void* dst, size_t bytes) { sum_job_add(&r->job, dst, bytes); }

// reads every planned buffer after the header, in chunks, the summing thread following; 1, or 0 with why
static int rd_read_all(SumReader* r, char* why, size_t cap) {
    sum_job_start(&r->job, 1);
    sum_job_ready(&r->job, r->done);
    for (int i = 1; i < r->job.k; i++) {
        char* dst = (char*)r->job.p[i];
        for (size_t off = 0; off < r->job.n[i];) {
            size_t len = r->job.n[i] - off < SUM_JOB_CHUNK ? r->job.n[i] - off : SUM_JOB_CHUNK;
            if (fread(dst + off, 1, len, r->f) != len) {
                snprintf(why, cap, "read failed: %s", ferror(r->f) ? strerror(errno) : "truncated");
                sum_job_finish(&r->job, 1);
                return 0;
            }
            off += len;
            r->done += len;
            sum_job_ready(&r->job, r->done);
        }
    }
    return 1;
}

// after rd_read_all: 1 when the sum matches the one the header holds at slot (verified: 1), or the header
// holds none (verified: 0); 0 with why on a mismatch
static int rd_check_sum(SumReader* r, int slot, int* verified, char* why, size_t cap) {
    uint64_t got = sum_job_finish(&r->job, 0);
    *verified = r->header[slot] == CKPT_SUM_MARK;
    if (!*verified) return 1;
    uint64_t want = get64(r->header, slot + 1);
    if (want == got) return 1;
    snprintf(why, cap, "checksum %016llx, the header says %016llx: the file was damaged after it was written",
             (unsigned long long)got, (unsigned long long)want);
    return 0;
}

static void rd_close(SumReader* r) { if (r->f) fclose(r->f); r->f = NULL; }

// ----------------------------------------------------------------------------
// llm.c model checkpoints

// Reads the header of an llm.c checkpoint into cfg and returns the parameters as FP32 on the host
// (malloc'd, num_parameters). Any mismatch ends the program with one line naming the file.
static float* checkpoint_load(const char* path, GPTConfig* cfg) {
    SumReader r;
    char why[600];
    if (!rd_open(&r, path, why, sizeof(why))) fatal("--model: checkpoint %s: %s", path, why);
    const int* header = r.header;
    if (header[0] != CHECKPOINT_MAGIC) {
        fatal("checkpoint %s: expected magic %d, found %d", path, CHECKPOINT_MAGIC, header[0]);
    }
    int version = header[1];
    int moe = version == CHECKPOINT_MOE_VERSION(3) || version == CHECKPOINT_MOE_VERSION(5);
    if (moe) version -= 3;  // the parameters' precision as llm.c's
    if (version != 3 && version != 5) {
        fatal("checkpoint %s: expected version 3 (fp32) or 5 (bf16), or 6 or 8 (a mixture-of-experts model), found %d", path, version);
    }
    cfg->num_experts = moe ? header[8] : 0;
    cfg->top_k = moe ? header[9] : 0;
    cfg->moe_every = moe ? header[10] : 0;
    if (moe && (cfg->num_experts <= 0 || cfg->top_k <= 0 || cfg->top_k > cfg->num_experts || cfg->moe_every <= 0)) {
        fatal("checkpoint %s: invalid experts in header (E=%d K=%d M=%d)", path, cfg->num_experts, cfg->top_k, cfg->moe_every);
    }
    cfg->max_seq_len = header[2];
    cfg->vocab_size = header[3];
    cfg->num_layers = header[4];
    cfg->num_heads = header[5];
    cfg->channels = header[6];
    cfg->padded_vocab_size = header[7];
    if (cfg->max_seq_len <= 0 || cfg->vocab_size <= 0 || cfg->num_layers <= 0 || cfg->num_heads <= 0 ||
        cfg->channels <= 0 || cfg->padded_vocab_size < cfg->vocab_size || cfg->channels % cfg->num_heads != 0) {
        fatal("checkpoint %s: invalid config in header (maxT=%d V=%d L=%d NH=%d C=%d Vp=%d)", path,
              cfg->max_seq_len, cfg->vocab_size, cfg->num_layers, cfg->num_heads, cfg->channels,
              cfg->padded_vocab_size);
    }
    size_t n = num_parameters(*cfg);
    size_t elem = version == 3 ? 4 : 2;
    size_t expected = HEADER_INTS * sizeof(int) + n * elem;
    if ((size_t)r.size != expected) {
        fatal("checkpoint %s: expected %zu bytes (header + %zu parameters of %zu bytes), found %ld", path,
              expected, n, elem, r.size);
    }
    float* params = (float*)mallocCheck(n * sizeof(float));
    uint16_t* tmp = version == 5 ? (uint16_t*)mallocCheck(n * sizeof(uint16_t)) : NULL;  // (n) version 5's BF16 bits
    rd_plan_header(&r, MODEL_SUM_SLOT);
    if (tmp) rd_plan(&r, tmp, n * sizeof(uint16_t));
    else rd_plan(&r, params, n * sizeof(float));
    int verified;
    if (!rd_read_all(&r, why, sizeof(why)) || !rd_check_sum(&r, MODEL_SUM_SLOT, &verified, why, sizeof(why))) fatal("checkpoint %s: %s", path, why);
    for (size_t i = 0; tmp && i < n; i++) params[i] = bf16_bits_to_float(tmp[i]);
    free(tmp);
    rd_close(&r);
    if (!verified) note("checkpoint %s has no checksum (an llm.c file, or one written before them): read unverified", path);
    return params;
}

// Writes params (num_parameters FP32, checkpoint order) as an llm.c checkpoint of version 3 or 5, with
// its checksum in header[253..255]. Through af_open's budget (fail_at, slow_ms); returns af_close's answer.
static int checkpoint_save(AtomicFile* af, const char* path, GPTConfig cfg, const float* params, int version, long fail_at,
                           int slow_ms) {
    int header[HEADER_INTS];
    memset(header, 0, sizeof(header));
    header[0] = CHECKPOINT_MAGIC;
    header[1] = cfg.num_experts > 0 ? CHECKPOINT_MOE_VERSION(version) : version;
    if (cfg.num_experts > 0) { header[8] = cfg.num_experts; header[9] = cfg.top_k; header[10] = cfg.moe_every; }
    header[2] = cfg.max_seq_len;
    header[3] = cfg.vocab_size;
    header[4] = cfg.num_layers;
    header[5] = cfg.num_heads;
    header[6] = cfg.channels;
    header[7] = cfg.padded_vocab_size;
    size_t n = num_parameters(cfg);
    uint16_t* tmp = NULL;  // (n) the BF16 values of version 5
    if (version == 5) {
        tmp = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) tmp[i] = bf16_bits_from_float(params[i]);
    }
    SumJob job;
    memset(&job, 0, sizeof(job));
    sum_job_add(&job, header, sizeof(header));
    if (tmp) sum_job_add(&job, tmp, n * sizeof(uint16_t));
    else sum_job_add(&job, params, n * sizeof(float));
    int ok = af_write_sealed(af, path, &job, MODEL_SUM_SLOT, fail_at, slow_ms);
    free(tmp);
    return ok;
}

// ----------------------------------------------------------------------------
// resumable training state: one self-contained file, the same whatever the process layout
//
// header int32[256]: 0 magic, 1 version, 2 step (optimizer steps done), 3 adam t,
//   4..9 config (maxT, V, L, NH, C, Vp), 10..11 num_parameters (lo, hi),
//   12..13 data epoch (lo, hi), 14..15 data sample cursor (lo, hi), 16..17 sampler RNG (lo, hi),
//   18: 1 if the BF16 parameters follow the FP32 arrays (written by BF16 builds), 2 if FP16 ones do
//       (FP16 builds), else 0,
//   19: the FP8 recipe (llm/precision/fp8_linear.h's Fp8Recipe, 0 none), 20..21: its state's floats (lo, hi),
//   22..24: the loss scaler (llm/precision/loss_scale.h): its scale (float bits; 0: no scaler state, as in files
//       of runs without one), its run of good steps, the steps it skipped
//   31..33: the health checks (llm/faults/health.h): H, the values in each spike window (0 in files of runs
//       before them), the bad steps in a row, the bad steps skipped so far
//   34: the verdict of the step it was saved after (CKPT_HEALTHY, CKPT_IN_STREAK, CKPT_SDC)
//   35..37: CKPT_SUM_MARK and the checksum (lo, hi) of the whole file, summed with 35..37 as 0
//   38..40: AdamW's beta1, beta2, eps (float bits) the moments were made with (files of version 1 and 2: the
//       0.9, 0.95, 1e-8 every run used then)
//   41: the floats of the moe layers' selection bias that follow last (llm/train/moe_balance.h: L x E, or 0 when
//       the run kept none; files before version 4: 0)
//   (25..30: a sharded checkpoint's shard header, llm/ckpt/ckpt_shard.h; unused here)
// then FP32 arrays of num_parameters each: parameters (the master copy when there is one), m, v;
// then, if header[18] = 1 (2), num_parameters BF16 (FP16) values (uint16): the parameters the model
// computes with; then the FP8 recipes' state (fp8_state_export's floats: delayed scaling's amax
// histories and scales), if any; then the health windows, 2 * H floats: the last H healthy losses,
// then gradient norms, oldest first (so that a resumed run takes the same skip decisions as one that
// never stopped); then, if header[41] > 0, the selection bias (L, E) FP32 of --expert-bias-rate. A BF16
// build keeps both parameter copies: its parameters are the master rounded stochastically at every update, which rounding the master to nearest on resuming would not give
// back, and resuming must continue the run bit for bit. (A BF16 run resumed from a file without them
// starts from the master rounded to nearest.) All arrays are in checkpoint order.
// Version 1 files (before the verdict and the checksum) are read unverified, their verdict from the streak.

typedef struct {
    int step;          // optimizer steps completed
    int adam_t;
    DataPosition data;
    uint64_t rng;      // the sampler's RNG state
    int fp8_recipe;    // the FP8 state's recipe (0: none)
    size_t fp8_n;      // its floats (fp8_state_floats)
    float* fp8;        // (fp8_n) fp8_state_export's; state_load mallocs it (NULL when the file has none)
    int params16_kind; // what params16 holds: 1 BF16, 2 FP16 (header[18]; 0 when there are none)
    float loss_scale;  // the loss scaler's state (0: none saved)
    int loss_scale_good_steps, loss_scale_skipped;
    int health_n;      // the values in each health window (llm/faults/health.h), 0: none
    float* health;     // (2, health_n) losses then gradient norms, oldest first; state_load mallocs it
    int bad_streak, bad_skipped;  // the health checks' bad steps in a row, and skipped so far
    int verdict;       // CKPT_HEALTHY, CKPT_IN_STREAK or CKPT_SDC
    float beta1, beta2, eps;  // AdamW's hyperparameters (llm/ops/optimizer.h OptimConfig)
    int moe_bias_n;    // the selection bias's floats (llm/train/moe_balance.h): L x E, or 0: none
    float* moe_bias;   // (L, E) FP32 or NULL; state_load mallocs it
} TrainState;

// a state read back (a state file, or a sharded checkpoint's pieces for this rank): the arrays are
// malloc'd, num_parameters FP32 each in checkpoint order
typedef struct {
    TrainState ts;
    float *params, *m, *v;   // (Psi) each
    float* params16;         // (Psi) the BF16/FP16 parameters as FP32 values, or NULL
    int verified;            // 0: a file without checksums, read as it is
} LoadedState;

static void loaded_state_free(LoadedState* st) {
    free(st->params); free(st->m); free(st->v); free(st->params16); free(st->ts.fp8); free(st->ts.health); free(st->ts.moe_bias);
    memset(st, 0, sizeof(*st));
}

// the fields of a state header (a state file's or a shard's) into ts, the config checked against cfg,
// every count range-checked; 1, or 0 with why (naming the slot)
static int state_header_read(const int* h, GPTConfig cfg, TrainState* ts, char* why, size_t cap) {
    int want[6] = {cfg.max_seq_len, cfg.vocab_size, cfg.num_layers, cfg.num_heads, cfg.channels, cfg.padded_vocab_size};
    for (int i = 0; i < 6; i++) {
        if (h[4 + i] != want[i]) {
            snprintf(why, cap, "model config (maxT V L NH C Vp) expected %d %d %d %d %d %d, found %d %d %d %d %d %d", want[0],
                     want[1], want[2], want[3], want[4], want[5], h[4], h[5], h[6], h[7], h[8], h[9]);
            return 0;
        }
    }
    if (get64(h, 10) != num_parameters(cfg)) {
        snprintf(why, cap, "expected %zu parameters, found %llu", num_parameters(cfg), (unsigned long long)get64(h, 10));
        return 0;
    }
    memset(ts, 0, sizeof(*ts));
    ts->step = h[2]; ts->adam_t = h[3];
    ts->data.epoch = (int64_t)get64(h, 12); ts->data.sample = (int64_t)get64(h, 14); ts->rng = get64(h, 16);
    ts->params16_kind = h[18];
    ts->fp8_recipe = h[19]; ts->fp8_n = get64(h, 20);
    memcpy(&ts->loss_scale, &h[22], sizeof(float));
    ts->loss_scale_good_steps = h[23]; ts->loss_scale_skipped = h[24];
    ts->health_n = h[31]; ts->bad_streak = h[32]; ts->bad_skipped = h[33];
    ts->verdict = h[1] >= 2 ? h[34] : (ts->bad_streak > 0 ? CKPT_IN_STREAK : CKPT_HEALTHY);
    if (h[1] >= 3) {
        memcpy(&ts->beta1, &h[38], sizeof(float)); memcpy(&ts->beta2, &h[39], sizeof(float)); memcpy(&ts->eps, &h[40], sizeof(float));
    } else {  // before version 3 every run used these (llm/train/args.h's defaults)
        ts->beta1 = 0.9f; ts->beta2 = 0.95f; ts->eps = 1e-8f;
    }
    ts->moe_bias_n = h[1] >= 4 ? h[41] : 0;
    // every step either updated (AdamW's t) or was skipped (bad_skipped): together at most the step
    int S = ts->step;
    const char* bad = NULL;
    char what[200];
    if (S < 0) bad = "header[2] (step): expected >= 0";
    else if (ts->adam_t < 0 || ts->bad_skipped < 0 || (long)ts->adam_t + ts->bad_skipped > S)
        bad = "header[3], header[33] (AdamW's step, steps skipped): expected each >= 0 and together at most the step";
    else if (ts->bad_streak < 0 || ts->bad_streak > ts->bad_skipped) bad = "header[32] (bad steps in a row): expected 0 .. the steps skipped";
    else if (ts->data.epoch < 0 || ts->data.sample < 0) bad = "header[12..15] (data position): expected epoch >= 0 and sample >= 0";
    else if (ts->params16_kind < 0 || ts->params16_kind > 2) bad = "header[18] (16-bit parameters): expected 0, 1 (BF16) or 2 (FP16)";
    else if (!(ts->loss_scale >= 0.0f && isfinite(ts->loss_scale)) || ts->loss_scale_good_steps < 0 || ts->loss_scale_good_steps > S ||
             ts->loss_scale_skipped < 0 || ts->loss_scale_skipped > S)
        bad = "header[22..24] (loss scaler): expected a finite scale >= 0 and counts 0 .. the step";
    else if (ts->fp8_recipe < 0 || ts->fp8_recipe > 4 || (ts->fp8_n > 0) != (ts->fp8_recipe > 0) || ts->fp8_n > ((size_t)1 << 32))
        bad = "header[19..21] (FP8): expected a recipe 0..4 with a state of 1..2^32 floats (none for 0)";
    else if (ts->health_n < 0 || ts->health_n > S || ts->health_n > (1 << 24)) bad = "header[31] (health window): expected 0 .. min(step, 2^24) values";
    else if (ts->verdict < CKPT_HEALTHY || ts->verdict > CKPT_SDC || (ts->verdict == CKPT_HEALTHY && ts->bad_streak > 0))
        bad = "header[34] (verdict): expected 0 (healthy, no bad step in a row), 1 or 2";
    else if (!(ts->beta1 >= 0.0f && ts->beta1 < 1.0f && ts->beta2 >= 0.0f && ts->beta2 < 1.0f && ts->eps > 0.0f && ts->eps <= 1.0f))
        bad = "header[38..40] (AdamW's beta1, beta2, eps): expected betas in [0, 1) and eps in (0, 1]";
    else if (ts->moe_bias_n != 0 && (cfg.num_experts == 0 || (long)ts->moe_bias_n != (long)cfg.num_layers * cfg.num_experts))
        bad = "header[41] (the moe selection bias's floats): expected 0 or the model's layers x experts";
    if (bad == NULL) return 1;
    snprintf(what, sizeof(what), " (step %d, adam t %d, skipped %d, in a row %d, epoch %lld, sample %lld, window %d, verdict %d, "
             "betas %g %g, eps %g, moe bias %d floats)", S, ts->adam_t, ts->bad_skipped, ts->bad_streak, (long long)ts->data.epoch,
             (long long)ts->data.sample, ts->health_n, ts->verdict, ts->beta1, ts->beta2, ts->eps, ts->moe_bias_n);
    snprintf(why, cap, "%s, found%s", bad, what);
    return 0;
}

// the header of a state (a state file's, or a shard's with its own fields added) from ts and cfg
static void state_header_fill(int* h, GPTConfig cfg, const TrainState* ts, int magic, int version, int params16_kind) {
    memset(h, 0, HEADER_INTS * sizeof(int));
    h[0] = magic; h[1] = version; h[2] = ts->step; h[3] = ts->adam_t;
    h[4] = cfg.max_seq_len; h[5] = cfg.vocab_size; h[6] = cfg.num_layers; h[7] = cfg.num_heads; h[8] = cfg.channels;
    h[9] = cfg.padded_vocab_size;
    put64(h, 10, num_parameters(cfg));
    put64(h, 12, (uint64_t)ts->data.epoch);
    put64(h, 14, (uint64_t)ts->data.sample);
    put64(h, 16, ts->rng);
    h[18] = params16_kind;
    h[19] = ts->fp8_n > 0 ? ts->fp8_recipe : 0;
    put64(h, 20, ts->fp8_n);
    memcpy(&h[22], &ts->loss_scale, sizeof(float));
    h[23] = ts->loss_scale_good_steps;
    h[24] = ts->loss_scale_skipped;
    h[31] = ts->health_n;
    h[32] = ts->bad_streak;
    h[33] = ts->bad_skipped;
    h[34] = ts->verdict;
    memcpy(&h[38], &ts->beta1, sizeof(float)); memcpy(&h[39], &ts->beta2, sizeof(float)); memcpy(&h[40], &ts->eps, sizeof(float));
    h[41] = ts->moe_bias_n;
}

// params16: NULL, or the BF16 (ts->params16_kind 1) or FP16 (2) parameters as FP32 values (exactly
// representable in that type). Through af (fail_at, slow_ms: llm/core/atomic_file.h); returns af_close's answer.
static int state_save(AtomicFile* af, const char* path, GPTConfig cfg, const TrainState* ts, const float* params,
                      const float* m, const float* v, const float* params16, long fail_at, int slow_ms) {
    size_t n = num_parameters(cfg);
    int fp16 = params16 != NULL && ts->params16_kind == 2;
    int header[HEADER_INTS];
    state_header_fill(header, cfg, ts, STATE_MAGIC, STATE_VERSION, params16 == NULL ? 0 : (fp16 ? 2 : 1));
    uint16_t* tmp = NULL;  // (n) the 16-bit parameters' bits
    if (params16 != NULL) {
        tmp = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) {
            tmp[i] = fp16 ? fp16_bits_from_float(params16[i]) : bf16_bits_from_float(params16[i]);
            float back = fp16 ? fp16_bits_to_float(tmp[i]) : bf16_bits_to_float(tmp[i]);
            if (back != params16[i] && params16[i] == params16[i]) {
                fatal("state %s: parameter %zu = %.9g is not a %s value", path, i, params16[i], fp16 ? "FP16" : "BF16");
            }
        }
    }
    SumJob job;  // the file's bytes in order
    memset(&job, 0, sizeof(job));
    sum_job_add(&job, header, sizeof(header));
    sum_job_add(&job, params, n * sizeof(float));
    sum_job_add(&job, m, n * sizeof(float));
    sum_job_add(&job, v, n * sizeof(float));
    if (tmp) sum_job_add(&job, tmp, n * sizeof(uint16_t));
    if (ts->fp8_n > 0) sum_job_add(&job, ts->fp8, ts->fp8_n * sizeof(float));
    if (ts->health_n > 0) sum_job_add(&job, ts->health, 2 * (size_t)ts->health_n * sizeof(float));
    if (ts->moe_bias_n > 0) sum_job_add(&job, ts->moe_bias, (size_t)ts->moe_bias_n * sizeof(float));
    int ok = af_write_sealed(af, path, &job, STATE_SUM_SLOT, fail_at, slow_ms);
    free(tmp);
    return ok;
}

// Reads a state file whole, every byte summed and checked against its checksum, every header field
// checked; cfg must match the model being trained. 1 with st filled (free with loaded_state_free), or
// 0 with why (nothing allocated is left). Nothing is printed.
static int state_read(const char* path, GPTConfig cfg, LoadedState* st, char* why, size_t cap) {
    memset(st, 0, sizeof(*st));
    SumReader r;
    if (!rd_open(&r, path, why, cap)) { rd_close(&r); return 0; }
    const int* h = r.header;
    int ok = 0;
    if (h[0] != STATE_MAGIC) snprintf(why, cap, "expected magic %d (a state file), found %d", STATE_MAGIC, h[0]);
    else if (h[1] < 1 || h[1] > STATE_VERSION) snprintf(why, cap, "expected version 1 to %d, found %d", STATE_VERSION, h[1]);
    else if (state_header_read(h, cfg, &st->ts, why, cap)) {
        TrainState* ts = &st->ts;
        size_t n = num_parameters(cfg);
        size_t expected = HEADER_INTS * sizeof(int) + 3 * n * sizeof(float) + (ts->params16_kind ? n * sizeof(uint16_t) : 0) +
                          ts->fp8_n * sizeof(float) + 2 * (size_t)ts->health_n * sizeof(float) + (size_t)ts->moe_bias_n * sizeof(float);
        if ((size_t)r.size != expected) {
            snprintf(why, cap, "expected %zu bytes (from its header), found %ld", expected, r.size);
        } else {
            st->params = (float*)mallocCheck(n * sizeof(float));
            st->m = (float*)mallocCheck(n * sizeof(float));
            st->v = (float*)mallocCheck(n * sizeof(float));
            uint16_t* tmp = ts->params16_kind ? (uint16_t*)mallocCheck(n * sizeof(uint16_t)) : NULL;  // (n) 16-bit bits
            if (ts->fp8_n > 0) ts->fp8 = (float*)mallocCheck(ts->fp8_n * sizeof(float));
            if (ts->health_n > 0) ts->health = (float*)mallocCheck(2 * (size_t)ts->health_n * sizeof(float));
            if (ts->moe_bias_n > 0) ts->moe_bias = (float*)mallocCheck((size_t)ts->moe_bias_n * sizeof(float));
            rd_plan_header(&r, STATE_SUM_SLOT);  // the file's parts in order, summed as they are read
            rd_plan(&r, st->params, n * sizeof(float));
            rd_plan(&r, st->m, n * sizeof(float));
            rd_plan(&r, st->v, n * sizeof(float));
            if (tmp) rd_plan(&r, tmp, n * sizeof(uint16_t));
            if (ts->fp8) rd_plan(&r, ts->fp8, ts->fp8_n * sizeof(float));
            if (ts->health) rd_plan(&r, ts->health, 2 * (size_t)ts->health_n * sizeof(float));
            if (ts->moe_bias) rd_plan(&r, ts->moe_bias, (size_t)ts->moe_bias_n * sizeof(float));
            ok = rd_read_all(&r, why, cap) && rd_check_sum(&r, STATE_SUM_SLOT, &st->verified, why, cap);
            if (ok && tmp) {
                st->params16 = (float*)mallocCheck(n * sizeof(float));
                for (size_t i = 0; i < n; i++) st->params16[i] = ts->params16_kind == 2 ? fp16_bits_to_float(tmp[i]) : bf16_bits_to_float(tmp[i]);
            }
            free(tmp);
        }
    }
    rd_close(&r);
    if (!ok) loaded_state_free(st);
    return ok;
}
