// checkpoint.h: model checkpoints in llm.c's format (FORMATS.md: version 3 = FP32, 5 = BF16) and the
// trainer's own resumable state (parameters, AdamW moments, step, data position, RNG), which is
// independent of the process layout. Every file is written to a temporary name, flushed, and renamed,
// so a crash never leaves a half-written file under the real name.
#pragma once
#include <unistd.h>
#include "common.h"
#include "tensors.h"
#include <dirent.h>
#include "dataloader.h"

#define CHECKPOINT_MAGIC 20240326
#define STATE_MAGIC 20261122      // this trainer's resumable state
#define STATE_VERSION 1
#define HEADER_INTS 256

// ----------------------------------------------------------------------------
// writing through a temporary name

typedef struct {
    FILE* f;
    char final_path[1024];
    char tmp_path[1100];
} AtomicFile;

static void atomic_open(AtomicFile* af, const char* path) {
    if (strlen(path) >= sizeof(af->final_path)) fatal("output path too long: %s", path);
    snprintf(af->final_path, sizeof(af->final_path), "%s", path);
    snprintf(af->tmp_path, sizeof(af->tmp_path), "%s.tmp.%d", path, (int)getpid());
    af->f = fopenCheck(af->tmp_path, "wb");
}

static void atomic_commit(AtomicFile* af) {
    if (fflush(af->f) != 0 || fsync(fileno(af->f)) != 0) {
        fprintf(stderr, "error: %s: flush failed: %s (%s:%d)\n", af->tmp_path, strerror(errno), __FILE__, __LINE__);
        remove(af->tmp_path);
        exit(EXIT_FAILURE);
    }
    fcloseCheck(af->f, af->tmp_path);
    if (rename(af->tmp_path, af->final_path) != 0) {
        fprintf(stderr, "error: rename %s -> %s failed: %s (%s:%d)\n", af->tmp_path, af->final_path,
                strerror(errno), __FILE__, __LINE__);
        remove(af->tmp_path);
        exit(EXIT_FAILURE);
    }
}

// ----------------------------------------------------------------------------
// llm.c model checkpoints

// Reads the header of an llm.c checkpoint into cfg and returns the parameters as FP32 on the host
// (malloc'd, num_parameters). Any mismatch ends the program with one line naming the file.
static float* checkpoint_load(const char* path, GPTConfig* cfg) {
    FILE* f = fopen(path, "rb");
    if (f == NULL) fatal("--model: cannot open checkpoint %s: %s", path, strerror(errno));
    int header[HEADER_INTS];
    if (fread(header, sizeof(int), HEADER_INTS, f) != HEADER_INTS) {
        fatal("checkpoint %s: expected a 1024-byte header, found a shorter file", path);
    }
    if (header[0] != CHECKPOINT_MAGIC) {
        fatal("checkpoint %s: expected magic %d, found %d", path, CHECKPOINT_MAGIC, header[0]);
    }
    int version = header[1];
    if (version != 3 && version != 5) {
        fatal("checkpoint %s: expected version 3 (fp32) or 5 (bf16), found %d", path, version);
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
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    size_t expected = HEADER_INTS * sizeof(int) + n * elem;
    if (size < 0 || (size_t)size != expected) {
        fatal("checkpoint %s: expected %zu bytes (header + %zu parameters of %zu bytes), found %ld", path,
              expected, n, elem, size);
    }
    fseek(f, HEADER_INTS * sizeof(int), SEEK_SET);
    float* params = (float*)mallocCheck(n * sizeof(float));
    if (version == 3) {
        freadCheck(params, sizeof(float), n, f, path);
    } else {
        uint16_t* tmp = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        freadCheck(tmp, sizeof(uint16_t), n, f, path);
        for (size_t i = 0; i < n; i++) params[i] = bf16_bits_to_float(tmp[i]);
        free(tmp);
    }
    fcloseCheck(f, path);
    return params;
}

// Writes params (num_parameters FP32, checkpoint order) as an llm.c checkpoint of version 3 or 5.
static void checkpoint_save(const char* path, GPTConfig cfg, const float* params, int version) {
    int header[HEADER_INTS];
    memset(header, 0, sizeof(header));
    header[0] = CHECKPOINT_MAGIC;
    header[1] = version;
    header[2] = cfg.max_seq_len;
    header[3] = cfg.vocab_size;
    header[4] = cfg.num_layers;
    header[5] = cfg.num_heads;
    header[6] = cfg.channels;
    header[7] = cfg.padded_vocab_size;
    size_t n = num_parameters(cfg);
    AtomicFile af;
    atomic_open(&af, path);
    fwriteCheck(header, sizeof(int), HEADER_INTS, af.f, path);
    if (version == 3) {
        fwriteCheck(params, sizeof(float), n, af.f, path);
    } else {
        uint16_t* tmp = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) tmp[i] = bf16_bits_from_float(params[i]);
        fwriteCheck(tmp, sizeof(uint16_t), n, af.f, path);
        free(tmp);
    }
    atomic_commit(&af);
}

// ----------------------------------------------------------------------------
// resumable training state: one self-contained file, the same whatever the process layout
//
// header int32[256]: 0 magic, 1 version, 2 step (optimizer steps done), 3 adam t,
//   4..9 config (maxT, V, L, NH, C, Vp), 10..11 num_parameters (lo, hi),
//   12..13 data epoch (lo, hi), 14..15 data sample cursor (lo, hi), 16..17 sampler RNG (lo, hi),
//   18: 1 if the BF16 parameters follow the FP32 arrays (written by BF16 builds), 2 if FP16 ones do
//       (FP16 builds), else 0,
//   19: the FP8 recipe (llm/fp8_linear.h's Fp8Recipe, 0 none), 20..21: its state's floats (lo, hi),
//   22..24: the loss scaler (llm/loss_scale.h): its scale (float bits; 0: no scaler state, as in files
//       of runs without one), its run of good steps, the steps it skipped
//   31..33: the health checks (llm/health.h): H, the values in each spike window (0 in files of runs
//       before them), the bad steps in a row, the bad steps skipped so far
//   (25..30: a sharded checkpoint's shard header, llm/ckpt_shard.h; unused here)
// then FP32 arrays of num_parameters each: parameters (the master copy when there is one), m, v;
// then, if header[18] = 1 (2), num_parameters BF16 (FP16) values (uint16): the parameters the model
// computes with; then the FP8 recipes' state (fp8_state_export's floats: delayed scaling's amax histories and
// scales), if any; then the health windows, 2 * H floats: the last H healthy losses, then gradient norms,
// oldest first (so that a resumed run takes the same skip decisions as one that never stopped). A BF16 build keeps both: its parameters are the master rounded stochastically at every update,
// which rounding the master to nearest on resuming would not give back, and resuming must continue
// the run bit for bit. (A BF16 run resumed from a file without them starts from the master rounded to
// nearest.) All arrays are in checkpoint order.

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
    int health_n;      // the values in each health window (llm/health.h), 0: none
    float* health;     // (2, health_n) losses then gradient norms, oldest first; state_load mallocs it
    int bad_streak, bad_skipped;  // the health checks' bad steps in a row, and skipped so far
} TrainState;

static void put64(int* h, int slot, uint64_t x) { h[slot] = (int)(uint32_t)x; h[slot + 1] = (int)(uint32_t)(x >> 32); }
static uint64_t get64(const int* h, int slot) { return (uint64_t)(uint32_t)h[slot] | ((uint64_t)(uint32_t)h[slot + 1] << 32); }

// params16: NULL, or the BF16 (ts->params16_kind 1) or FP16 (2) parameters as FP32 values (exactly
// representable in that type)
static void state_save(const char* path, GPTConfig cfg, const TrainState* ts, const float* params,
                       const float* m, const float* v, const float* params16) {
    size_t n = num_parameters(cfg);
    int header[HEADER_INTS];
    memset(header, 0, sizeof(header));
    header[0] = STATE_MAGIC;
    header[1] = STATE_VERSION;
    header[2] = ts->step;
    header[3] = ts->adam_t;
    header[4] = cfg.max_seq_len;
    header[5] = cfg.vocab_size;
    header[6] = cfg.num_layers;
    header[7] = cfg.num_heads;
    header[8] = cfg.channels;
    header[9] = cfg.padded_vocab_size;
    put64(header, 10, n);
    put64(header, 12, (uint64_t)ts->data.epoch);
    put64(header, 14, (uint64_t)ts->data.sample);
    put64(header, 16, ts->rng);
    int fp16 = params16 != NULL && ts->params16_kind == 2;
    header[18] = params16 == NULL ? 0 : (fp16 ? 2 : 1);
    header[19] = ts->fp8_n > 0 ? ts->fp8_recipe : 0;
    put64(header, 20, ts->fp8_n);
    memcpy(&header[22], &ts->loss_scale, sizeof(float));
    header[23] = ts->loss_scale_good_steps;
    header[24] = ts->loss_scale_skipped;
    header[31] = ts->health_n;
    header[32] = ts->bad_streak;
    header[33] = ts->bad_skipped;
    AtomicFile af;
    atomic_open(&af, path);
    fwriteCheck(header, sizeof(int), HEADER_INTS, af.f, path);
    fwriteCheck(params, sizeof(float), n, af.f, path);
    fwriteCheck(m, sizeof(float), n, af.f, path);
    fwriteCheck(v, sizeof(float), n, af.f, path);
    if (params16 != NULL) {
        uint16_t* tmp = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) {
            tmp[i] = fp16 ? fp16_bits_from_float(params16[i]) : bf16_bits_from_float(params16[i]);
            float back = fp16 ? fp16_bits_to_float(tmp[i]) : bf16_bits_to_float(tmp[i]);
            if (back != params16[i] && params16[i] == params16[i]) {
                fatal("state %s: parameter %zu = %.9g is not a %s value", path, i, params16[i], fp16 ? "FP16" : "BF16");
            }
        }
        fwriteCheck(tmp, sizeof(uint16_t), n, af.f, path);
        free(tmp);
    }
    if (ts->fp8_n > 0) fwriteCheck(ts->fp8, sizeof(float), ts->fp8_n, af.f, path);
    if (ts->health_n > 0) fwriteCheck(ts->health, sizeof(float), 2 * (size_t)ts->health_n, af.f, path);
    atomic_commit(&af);
}

// Reads a state file; cfg must match the model being trained. params, m, v: malloc'd FP32 (n each);
// params16: malloc'd FP32 values of the BF16 / FP16 parameters if the file has them (ts->params16_kind
// says which), else NULL.
static void state_load(const char* path, GPTConfig cfg, TrainState* ts, float** params, float** m, float** v,
                       float** params16) {
    FILE* f = fopen(path, "rb");
    if (f == NULL) fatal("--resume: cannot open state file %s: %s", path, strerror(errno));
    int header[HEADER_INTS];
    if (fread(header, sizeof(int), HEADER_INTS, f) != HEADER_INTS) {
        fatal("--resume: state file %s: expected a 1024-byte header, found a shorter file", path);
    }
    if (header[0] != STATE_MAGIC) fatal("--resume: state file %s: expected magic %d, found %d", path, STATE_MAGIC, header[0]);
    if (header[1] != STATE_VERSION) fatal("--resume: state file %s: expected version %d, found %d", path, STATE_VERSION, header[1]);
    int want[6] = {cfg.max_seq_len, cfg.vocab_size, cfg.num_layers, cfg.num_heads, cfg.channels, cfg.padded_vocab_size};
    for (int i = 0; i < 6; i++) {
        if (header[4 + i] != want[i]) {
            fatal("--resume: state file %s: model config (maxT V L NH C Vp) expected %d %d %d %d %d %d, found %d %d %d %d %d %d",
                  path, want[0], want[1], want[2], want[3], want[4], want[5], header[4], header[5], header[6],
                  header[7], header[8], header[9]);
        }
    }
    size_t n = num_parameters(cfg);
    if (get64(header, 10) != n) fatal("--resume: state file %s: expected %zu parameters, found %llu", path, n, (unsigned long long)get64(header, 10));
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    if (header[18] < 0 || header[18] > 2) fatal("--resume: state file %s: expected 0, 1 or 2 in header[18], found %d", path, header[18]);
    float ls_scale;
    memcpy(&ls_scale, &header[22], sizeof(float));
    if (!(ls_scale >= 0.0f && isfinite(ls_scale)) || header[23] < 0 || header[24] < 0) {
        fatal("--resume: state file %s: expected a loss scale >= 0 and counts >= 0 in header[22..24], found %g %d %d",
              path, ls_scale, header[23], header[24]);
    }
    size_t fp8_n = get64(header, 20);
    if (header[19] < 0 || header[19] > 4 || (fp8_n > 0) != (header[19] > 0) || fp8_n > ((size_t)1 << 32)) {
        fatal("--resume: state file %s: expected an FP8 recipe 0..4 with its state size in header[19..21], found %d and %zu",
              path, header[19], fp8_n);
    }
    if (header[31] < 0 || header[31] > (1 << 24) || header[32] < 0 || header[33] < 0) {
        fatal("--resume: state file %s: expected a health window size 0..2^24 and counts >= 0 in header[31..33], found %d %d %d",
              path, header[31], header[32], header[33]);
    }
    size_t expected = HEADER_INTS * sizeof(int) + 3 * n * sizeof(float) + (header[18] ? n * sizeof(uint16_t) : 0) +
                      fp8_n * sizeof(float) + 2 * (size_t)header[31] * sizeof(float);
    if (size < 0 || (size_t)size != expected) fatal("--resume: state file %s: expected %zu bytes, found %ld", path, expected, size);
    fseek(f, HEADER_INTS * sizeof(int), SEEK_SET);
    ts->step = header[2];
    ts->adam_t = header[3];
    ts->data.epoch = (int64_t)get64(header, 12);
    ts->data.sample = (int64_t)get64(header, 14);
    ts->rng = get64(header, 16);
    *params = (float*)mallocCheck(n * sizeof(float));
    *m = (float*)mallocCheck(n * sizeof(float));
    *v = (float*)mallocCheck(n * sizeof(float));
    freadCheck(*params, sizeof(float), n, f, path);
    freadCheck(*m, sizeof(float), n, f, path);
    freadCheck(*v, sizeof(float), n, f, path);
    *params16 = NULL;
    if (header[18]) {
        uint16_t* tmp = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        freadCheck(tmp, sizeof(uint16_t), n, f, path);
        *params16 = (float*)mallocCheck(n * sizeof(float));
        for (size_t i = 0; i < n; i++) (*params16)[i] = header[18] == 2 ? fp16_bits_to_float(tmp[i]) : bf16_bits_to_float(tmp[i]);
        free(tmp);
    }
    ts->params16_kind = header[18];
    ts->loss_scale = ls_scale;
    ts->loss_scale_good_steps = header[23];
    ts->loss_scale_skipped = header[24];
    ts->fp8_recipe = header[19];
    ts->fp8_n = fp8_n;
    ts->fp8 = NULL;
    if (fp8_n > 0) {
        ts->fp8 = (float*)mallocCheck(fp8_n * sizeof(float));
        freadCheck(ts->fp8, sizeof(float), fp8_n, f, path);
    }
    ts->health_n = header[31];
    ts->bad_streak = header[32];
    ts->bad_skipped = header[33];
    ts->health = NULL;
    if (ts->health_n > 0) {
        ts->health = (float*)mallocCheck(2 * (size_t)ts->health_n * sizeof(float));
        freadCheck(ts->health, sizeof(float), 2 * (size_t)ts->health_n, f, path);
    }
    fcloseCheck(f, path);
}

// ----------------------------------------------------------------------------
// a run's files in its output directory

// Writes <dir>/model_<step>.bin (llm.c's format: version 5, BF16, the master weights rounded to
// nearest, when the model runs in BF16; else version 3, FP32) and <dir>/state_<step>.bin (the
// resumable state, the FP32 master exactly, and params16, the BF16 parameters, unless NULL). params,
// m, v, params16: Psi FP32 values, checkpoint order.
static void checkpoint_save_run(const char* dir, GPTConfig cfg, const TrainState* ts, const float* params,
                                const float* m, const float* v, const float* params16, int version) {
    char path[1100];
    snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, ts->step);
    checkpoint_save(path, cfg, params, version);
    snprintf(path, sizeof(path), "%s/state_%08d.bin", dir, ts->step);
    state_save(path, cfg, ts, params, m, v, params16);
}

// the newest state_<step>.bin in dir (for --resume latest)
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
