// ckpt_resume.h: resuming from a sharded checkpoint (llm/ckpt_shard.h has the format): which one (the
// newest complete one, every shard's checksum recomputed once over the ranks), and reading it into
// this run's layout, whatever layout wrote it (dp, tp, pp, ZeRO stage, schedule).
#pragma once
#include "common.h"
#include "checkpoint.h"
#include "tensors.h"
#include "ckpt_dir.h"

// ----------------------------------------------------------------------------
// resuming: the newest complete checkpoint, read into this rank's layout

// the newest complete checkpoint of out_dir at or below max_step (every rank calls it and gets the same
// answer; the rank that saw why a newer one is ignored says so); its step, or -1
static int ckpt_find_latest(Comm* c, const char* out_dir, int max_step) {
    int n;
    int* steps = ckpt_list(out_dir, &n);
    int found = -1;
    for (int i = 0; i < n && found < 0; i++) {
        if (steps[i] > max_step) continue;
        char dir[1100], why[600];
        ckpt_dir_name(dir, sizeof(dir), out_dir, steps[i]);
        if (ckpt_verify(c, dir, why, sizeof(why))) found = steps[i];
        else if (why[0] != '\0') printf("resume: %s ignored: %s\n", dir, why);
    }
    free(steps);
    return found;
}

// an explicit --resume PATH (every rank): when PATH is a checkpoint directory, it must be complete
// (ckpt_verify); if not, one line from the rank that saw why, and every rank exits with status 1
static void ckpt_require(Comm* c, const char* path) {
    struct stat st;
    char why[600];
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode) || ckpt_verify(c, path, why, sizeof(why))) return;
    if (why[0] != '\0') fprintf(stderr, "error: --resume: %s is not a complete checkpoint: %s\n", path, why);
    comm_exit(c, EXIT_FAILURE);
}

// reads the checkpoint in dir: the training position into ts (rank 0's shard), and the values of the
// units this rank's layout holds into params, m, v (and params16 when the shards have them), malloc'd
// Psi FP32 each, checkpoint order, zero elsewhere. Its checksums were recomputed by whoever chose it
// (ckpt_find_latest, ckpt_require, ckpt_good_find); here the manifest and the sizes are read again.
static void ckpt_load(const char* dir, const ParamLayout* lay, TrainState* ts, float** params, float** m, float** v,
                      float** params16) {
    int step, world;
    ShardEntry* e;
    char why[600];
    if (!ckpt_check_dir(dir, &step, &world, &e, why, sizeof(why), 0, 0)) fatal("--resume: %s is not a complete checkpoint: %s", dir, why);
    size_t n = lay->num_parameters;
    GPTConfig cfg = lay->cfg;
    *params = (float*)calloc(n, sizeof(float));
    *m = (float*)calloc(n, sizeof(float));
    *v = (float*)calloc(n, sizeof(float));
    *params16 = NULL;
    if (!*params || !*m || !*v) fatal("--resume: out of host memory");
    size_t covered = 0, wanted = 0;
    int ts_[NUM_TENSORS];
    for (int u = 0; u < lay->num_units; u++) {
        if (!lay->units[u].held) continue;
        int k = unit_tensors(lay, u, ts_);
        for (int i = 0; i < k; i++) wanted += tensor_layer_size(cfg, ts_[i]);
    }
    for (int r = 0; r < world; r++) {
        char path[1300];
        snprintf(path, sizeof(path), "%s/%s", dir, e[r].name);
        FILE* f = fopenCheck(path, "rb");
        int h[HEADER_INTS];
        freadCheck(h, sizeof(int), HEADER_INTS, f, path);
        int want[6] = {cfg.max_seq_len, cfg.vocab_size, cfg.num_layers, cfg.num_heads, cfg.channels, cfg.padded_vocab_size};
        if (h[0] != SHARD_MAGIC || h[1] != SHARD_VERSION || h[25] != r || h[26] != world) {
            fatal("--resume: %s: expected a shard (magic %d version %d) of rank %d of %d, found magic %d version %d rank %d of %d",
                  path, SHARD_MAGIC, SHARD_VERSION, r, world, h[0], h[1], h[25], h[26]);
        }
        for (int i = 0; i < 6; i++) {
            if (h[4 + i] != want[i]) fatal("--resume: %s: model config (maxT V L NH C Vp) expected %d %d %d %d %d %d, found %d %d %d %d %d %d",
                                           path, want[0], want[1], want[2], want[3], want[4], want[5], h[4], h[5], h[6], h[7], h[8], h[9]);
        }
        if (get64(h, 10) != n) fatal("--resume: %s: expected %zu parameters, found %llu", path, n, (unsigned long long)get64(h, 10));
        if (h[2] != step) fatal("--resume: %s: step %d, the manifest says %d", path, h[2], step);
        size_t pieces = get64(h, 27), values = get64(h, 29);
        int kind16 = h[18];
        if (r == 0) {
            ts->step = h[2]; ts->adam_t = h[3];
            ts->data.epoch = (int64_t)get64(h, 12); ts->data.sample = (int64_t)get64(h, 14); ts->rng = get64(h, 16);
            ts->params16_kind = kind16;
            memcpy(&ts->loss_scale, &h[22], sizeof(float));
            ts->loss_scale_good_steps = h[23]; ts->loss_scale_skipped = h[24];
            ts->fp8_recipe = h[19]; ts->fp8_n = get64(h, 20); ts->fp8 = NULL;
            ts->health_n = h[31]; ts->bad_streak = h[32]; ts->bad_skipped = h[33]; ts->health = NULL;
            if (h[31] < 0 || h[31] > (1 << 24)) fatal("--resume: %s: expected a health window size 0..2^24 in header[31], found %d", path, h[31]);
            if (kind16) { *params16 = (float*)calloc(n, sizeof(float)); if (!*params16) fatal("--resume: out of host memory"); }
        }
        if (kind16 != ts->params16_kind) fatal("--resume: %s: 16-bit parameters of kind %d, rank 0's shard has %d", path, kind16, ts->params16_kind);
        int64_t* index = (int64_t*)mallocCheck((pieces + 1) * 3 * sizeof(int64_t));
        freadCheck(index, sizeof(int64_t), pieces * 3, f, path);
        long base = (long)(HEADER_INTS * sizeof(int) + pieces * 3 * sizeof(int64_t));
        size_t at = 0;  // values before this piece
        for (size_t p = 0; p < pieces; p++) {
            int64_t u = index[3 * p], off = index[3 * p + 1], len = index[3 * p + 2];
            if (u < 0 || u >= lay->num_units || off < 0 || len <= 0 || (size_t)(off + len) > n || at + (size_t)len > values) {
                fatal("--resume: %s: piece %zu (unit %lld, offset %lld, length %lld) outside the model", path, p, (long long)u,
                      (long long)off, (long long)len);
            }
            if (lay->units[u].held) {  // the pieces this layout needs
                float* dst[3] = {*params, *m, *v};
                for (int a = 0; a < 3; a++) {
                    if (fseek(f, base + (long)((a * values + at) * sizeof(float)), SEEK_SET) != 0) fatal("--resume: %s: seek failed", path);
                    freadCheck(dst[a] + off, sizeof(float), (size_t)len, f, path);
                }
                if (kind16) {
                    uint16_t* tmp = (uint16_t*)mallocCheck((size_t)len * sizeof(uint16_t));
                    if (fseek(f, base + (long)(3 * values * sizeof(float) + at * sizeof(uint16_t)), SEEK_SET) != 0) fatal("--resume: %s: seek failed", path);
                    freadCheck(tmp, sizeof(uint16_t), (size_t)len, f, path);
                    for (int64_t i = 0; i < len; i++) (*params16)[off + i] = kind16 == 2 ? fp16_bits_to_float(tmp[i]) : bf16_bits_to_float(tmp[i]);
                    free(tmp);
                }
                covered += (size_t)len;
            }
            at += (size_t)len;
        }
        if (r == 0 && ts->fp8_n > 0) {
            ts->fp8 = (float*)mallocCheck(ts->fp8_n * sizeof(float));
            long fp8_at = base + (long)(3 * values * sizeof(float) + (kind16 ? values * sizeof(uint16_t) : 0));
            if (fseek(f, fp8_at, SEEK_SET) != 0) fatal("--resume: %s: seek failed", path);
            freadCheck(ts->fp8, sizeof(float), ts->fp8_n, f, path);
        }
        if (r == 0 && ts->health_n > 0) {  // (right after the FP8 state)
            long health_at = base + (long)(3 * values * sizeof(float) + (kind16 ? values * sizeof(uint16_t) : 0) +
                                           ts->fp8_n * sizeof(float));
            ts->health = (float*)mallocCheck(2 * (size_t)ts->health_n * sizeof(float));
            if (fseek(f, health_at, SEEK_SET) != 0) fatal("--resume: %s: seek failed", path);
            freadCheck(ts->health, sizeof(float), 2 * (size_t)ts->health_n, f, path);
        }
        free(index);
        fcloseCheck(f, path);
    }
    free(e);
    if (covered != wanted) fatal("--resume: %s: the shards hold %zu of the %zu values this rank needs", dir, covered, wanted);
}
