// ckpt_resume.h: reading a checkpoint back, whatever layout wrote it (dp, tp, pp, ZeRO level, schedule):
// a sharded one's pieces this rank needs (llm/ckpt/ckpt_shard.h has the format), or a gathered state file
// (llm/ckpt/checkpoint.h), every byte verified once (a sharded checkpoint's shard r by rank r mod world; a
// state file by each rank as it reads it whole) and every header field range-checked; and choosing one:
// for --resume latest and the rollback, the newest good one (llm/ckpt/ckpt_dir.h) that passes, each that does
// not skipped with one line; for an explicit --resume PATH, that one or one line and exit 1.
#pragma once
#include <sys/stat.h>
#include "../core/common.h"
#include "checkpoint.h"
#include "../model/units.h"
#include "ckpt_dir.h"

// ----------------------------------------------------------------------------
// a sharded checkpoint: the pieces this rank's layout holds

// Reads the checkpoint in dir: the training position into st->ts (rank 0's shard), and the values of the
// units this rank's layout holds into st's arrays (malloc'd Psi FP32 each, checkpoint order, zero
// elsewhere). Its checksums were recomputed by ckpt_verify before; here the manifest, the sizes and every
// header are checked. 1, or 0 with why (nothing left allocated).
static int ckpt_load(const char* dir, const ParamLayout* lay, LoadedState* st, char* why, size_t cap) {
    memset(st, 0, sizeof(*st));
    int step, world;
    ShardEntry* e;
    if (!ckpt_check_dir(dir, &step, &world, &e, why, cap, 0, 0)) return 0;
    size_t n = lay->num_parameters;
    GPTConfig cfg = lay->cfg;
    TrainState* ts = &st->ts;
    st->params = (float*)calloc(n, sizeof(float));
    st->m = (float*)calloc(n, sizeof(float));
    st->v = (float*)calloc(n, sizeof(float));
    st->verified = 1;
    if (!st->params || !st->m || !st->v) fatal("--resume: out of host memory");
    size_t covered = 0, wanted = 0;
    int ts_[NUM_TENSORS];
    for (int u = 0; u < lay->num_units; u++) {
        if (!lay->units[u].held) continue;
        int k = unit_tensors(lay, u, ts_);
        for (int i = 0; i < k; i++) wanted += tensor_layer_size(cfg, ts_[i]);
    }
    int ok = 1;
    int64_t* index = NULL;
    FILE* f = NULL;
    uint16_t* tmp = NULL;
    char path[1300], msg[600];
#define LOAD_FAIL(...) do { snprintf(msg, sizeof(msg), __VA_ARGS__); snprintf(why, cap, "%s: %s", e[r].name, msg); ok = 0; } while (0)
    for (int r = 0; r < world && ok; r++) {
        snprintf(path, sizeof(path), "%s/%s", dir, e[r].name);
        f = fopen(path, "rb");
        int h[HEADER_INTS];
        TrainState hs;
        if (f == NULL) { LOAD_FAIL("cannot open: %s", strerror(errno)); break; }
        if (fread(h, sizeof(int), HEADER_INTS, f) != HEADER_INTS) { LOAD_FAIL("truncated header"); break; }
        if (h[0] != SHARD_MAGIC || h[1] < 1 || h[1] > SHARD_VERSION || h[25] != r || h[26] != world) {
            LOAD_FAIL("expected a shard (magic %d version 1 to %d) of rank %d of %d, found magic %d version %d rank %d of %d", SHARD_MAGIC,
                      SHARD_VERSION, r, world, h[0], h[1], h[25], h[26]);
            break;
        }
        if (!state_header_read(h, cfg, &hs, msg, sizeof(msg))) { snprintf(why, cap, "%s: %s", e[r].name, msg); ok = 0; break; }
        if (h[2] != step) { LOAD_FAIL("step %d, the manifest says %d", h[2], step); break; }
        size_t pieces = get64(h, 27), values = get64(h, 29);
        if (r == 0) {
            *ts = hs;  // the training position: rank 0's (its FP8 state and health windows are read below)
            ts->fp8 = NULL; ts->health = NULL; ts->moe_bias = NULL;
            if (ts->params16_kind) { st->params16 = (float*)calloc(n, sizeof(float)); if (!st->params16) fatal("--resume: out of host memory"); }
        }
        if (hs.params16_kind != ts->params16_kind) { LOAD_FAIL("16-bit parameters of kind %d, rank 0's shard has %d", hs.params16_kind, ts->params16_kind); break; }
        size_t body = HEADER_INTS * sizeof(int) + pieces * 3 * sizeof(int64_t) + values * (3 * sizeof(float) + (hs.params16_kind ? 2 : 0)) +
                      (r == 0 ? ts->fp8_n * sizeof(float) + 2 * (size_t)ts->health_n * sizeof(float) + (size_t)ts->moe_bias_n * sizeof(float) : 0);
        if (pieces > n || values > n || body != e[r].bytes) { LOAD_FAIL("%zu pieces of %zu values: %zu bytes, the manifest says %llu", pieces, values, body, (unsigned long long)e[r].bytes); break; }
        index = (int64_t*)mallocCheck((pieces + 1) * 3 * sizeof(int64_t));
        if (fread(index, sizeof(int64_t), pieces * 3, f) != pieces * 3) { LOAD_FAIL("truncated index"); break; }
        long base = (long)(HEADER_INTS * sizeof(int) + pieces * 3 * sizeof(int64_t));
        size_t at = 0;  // values before this piece
        for (size_t p = 0; p < pieces && ok; p++) {
            int64_t u = index[3 * p], off = index[3 * p + 1], len = index[3 * p + 2];
            if (u < 0 || u >= lay->num_units || off < 0 || len <= 0 || (size_t)(off + len) > n || at + (size_t)len > values) {
                LOAD_FAIL("piece %zu (unit %lld, offset %lld, length %lld) outside the model", p, (long long)u, (long long)off, (long long)len);
                break;
            }
            if (lay->units[u].held) {  // the pieces this layout needs
                float* dst[3] = {st->params, st->m, st->v};
                for (int a = 0; a < 3 && ok; a++) {
                    if (fseek(f, base + (long)((a * values + at) * sizeof(float)), SEEK_SET) != 0 ||
                        fread(dst[a] + off, sizeof(float), (size_t)len, f) != (size_t)len) LOAD_FAIL("read failed");
                }
                if (ok && hs.params16_kind) {
                    tmp = (uint16_t*)mallocCheck((size_t)len * sizeof(uint16_t));
                    if (fseek(f, base + (long)(3 * values * sizeof(float) + at * sizeof(uint16_t)), SEEK_SET) != 0 ||
                        fread(tmp, sizeof(uint16_t), (size_t)len, f) != (size_t)len) LOAD_FAIL("read failed");
                    for (int64_t i = 0; ok && i < len; i++) st->params16[off + i] = hs.params16_kind == 2 ? fp16_bits_to_float(tmp[i]) : bf16_bits_to_float(tmp[i]);
                    free(tmp);
                    tmp = NULL;
                }
                covered += (size_t)len;
            }
            at += (size_t)len;
        }
        long tail = base + (long)(3 * values * sizeof(float) + (hs.params16_kind ? values * sizeof(uint16_t) : 0));
        if (ok && r == 0 && ts->fp8_n > 0) {  // the FP8 state, then the health windows
            ts->fp8 = (float*)mallocCheck(ts->fp8_n * sizeof(float));
            if (fseek(f, tail, SEEK_SET) != 0 || fread(ts->fp8, sizeof(float), ts->fp8_n, f) != ts->fp8_n) LOAD_FAIL("read failed");
        }
        if (ok && r == 0 && ts->health_n > 0) {
            ts->health = (float*)mallocCheck(2 * (size_t)ts->health_n * sizeof(float));
            if (fseek(f, tail + (long)(ts->fp8_n * sizeof(float)), SEEK_SET) != 0 ||
                fread(ts->health, sizeof(float), 2 * (size_t)ts->health_n, f) != 2 * (size_t)ts->health_n) LOAD_FAIL("read failed");
        }
        if (ok && r == 0 && ts->moe_bias_n > 0) {  // then the moe selection bias
            ts->moe_bias = (float*)mallocCheck((size_t)ts->moe_bias_n * sizeof(float));
            if (fseek(f, tail + (long)((ts->fp8_n + 2 * (size_t)ts->health_n) * sizeof(float)), SEEK_SET) != 0 ||
                fread(ts->moe_bias, sizeof(float), (size_t)ts->moe_bias_n, f) != (size_t)ts->moe_bias_n) LOAD_FAIL("read failed");
        }
        free(index);
        index = NULL;
        fclose(f);
        f = NULL;
    }
#undef LOAD_FAIL
    free(index);
    if (f) fclose(f);
    free(e);
    if (ok && covered != wanted) { snprintf(why, cap, "the shards hold %zu of the %zu values this rank needs", covered, wanted); ok = 0; }
    if (!ok) loaded_state_free(st);
    return ok;
}

// ----------------------------------------------------------------------------
// choosing and reading a checkpoint (every rank, together)

// The checkpoint at path (a state file, or a sharded checkpoint's directory) read into st, every byte
// verified. 1 (the same on every rank), or 0 with why on the lowest rank that found one ("" elsewhere).
static int ckpt_read(Comm* c, const char* path, const ParamLayout* lay, LoadedState* st, char* why, size_t cap) {
    struct stat sb;
    int ok;
    why[0] = '\0';
    memset(st, 0, sizeof(*st));
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (!ckpt_verify(c, path, why, cap)) return 0;  // (its checksums, shared out over the ranks)
        ok = ckpt_load(path, lay, st, why, cap);
    } else {
        ok = state_read(path, lay->cfg, st, why, cap);
    }
    int first = ckpt_first_bad(c, !ok);
    if (first < 0) {
        if (!st->verified) note("resume: %s has no checksum (written before checksums existed): read unverified", path);
        return 1;
    }
    if (ok) loaded_state_free(st);
    if (first != c->world_rank) why[0] = '\0';
    return 0;
}

// --resume latest and the rollback: the newest good checkpoint of dir at or before step upto that reads
// and verifies, into st (llm/ckpt/ckpt_dir.h's candidates, newest first; what: "resume" or "rollback", for the
// line each skipped one gets). Its step, with its path in path; -1 when none passes.
static int ckpt_read_newest_good(Comm* c, const char* dir, int upto, const ParamLayout* lay, LoadedState* st, char* path,
                                 size_t cap, const char* what) {
    int n;
    CkptRef* cand = ckpt_candidates(dir, upto, &n);
    int found = -1;
    for (int i = 0; i < n && found < 0; i++) {
        char why[700];
        ckpt_ref_path(dir, cand[i], path, cap);
        if (!ckpt_read(c, path, lay, st, why, sizeof(why))) {
            if (why[0] != '\0') printf("%s: %s skipped: %s\n", what, path, why);
            continue;
        }
        if (st->ts.verdict != CKPT_HEALTHY || st->ts.step != cand[i].step) {  // (the same on every rank)
            if (st->ts.step != cand[i].step) note("%s: %s skipped: it holds step %d", what, path, st->ts.step);
            else note("%s: %s skipped: %s", what, path, ckpt_verdict_name(st->ts.verdict));
            loaded_state_free(st);
            continue;
        }
        found = cand[i].step;
    }
    fflush(stdout);
    free(cand);
    if (found < 0) path[0] = '\0';
    return found;
}

// an explicit --resume PATH: read and verified into st, or one line naming it and what failed and every
// rank exits with status 1. One rejected by the SDC check is refused (its replicas' parameters differed:
// resuming it would copy one replica's bits everywhere and hide the corruption); one saved inside a
// streak of bad steps is taken as asked, with a line.
static void ckpt_read_explicit(Comm* c, const char* path, const ParamLayout* lay, LoadedState* st) {
    char why[700];
    if (!ckpt_read(c, path, lay, st, why, sizeof(why))) {
        if (why[0] != '\0') fprintf(stderr, "error: --resume: %s: %s\n", path, why);
        comm_exit(c, EXIT_FAILURE);
    }
    if (st->ts.verdict == CKPT_SDC) {
        if (c->world_rank == 0) {
            fprintf(stderr, "error: --resume: %s was rejected by the SDC check when it was saved (the replicas' parameters "
                    "differed): not resumed; --resume latest takes the newest good checkpoint\n", path);
        }
        comm_exit(c, EXIT_FAILURE);
    }
    if (st->ts.verdict == CKPT_IN_STREAK) {
        note("resume: %s was saved inside a streak of %d bad steps: resumed as asked (--resume latest would skip it)", path,
             st->ts.bad_streak);
    }
}
