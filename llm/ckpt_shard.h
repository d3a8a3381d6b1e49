// ckpt_shard.h: sharded, asynchronous checkpoints that survive a kill -9, a failing disk and a change
// of layout (issue 12, items 6 and 7; the scheme of the Llama 3 report sec. 3.3.4 and of distributed
// checkpoint formats: every rank writes what it owns in parallel, and a manifest written last is what
// makes a checkpoint complete).
//
// The checkpoint of step S is the directory <output-dir>/ckpt_<S>/ (S with 8 digits):
//   shard_<r>.bin  written by world rank r alone: the values of the layout-independent state
//                  (llm/checkpoint.h's checkpoint order: parameters, AdamW m and v, and the BF16/FP16
//                  parameters of builds that keep them) that rank owns under its layout, with an index
//                  of which (unit, offset, length) pieces of that space they are. What a rank owns: the
//                  units of its pipeline stage (the tied embedding: the first stage's), of those its
//                  tensor-parallel shard (the replicated tensors: tp rank 0's), of that its ZeRO blocks
//                  (stages 1-3), or under DDP its 1/dp of every unit, so that every value is written
//                  exactly once and every rank writes about 1/world of the state.
//   manifest.txt   written by rank 0 after every rank reported its shard written, fsynced and renamed
//                  into place: the step, the layout, the config, and each shard's name, size and
//                  checksum (FNV-1a 64), ending with the line "complete".
// A directory without a complete manifest, or whose shards do not match it (size, checksum), is no
// checkpoint: resuming prints one line saying why it is ignored and takes the previous one.
//
// Shard file: header int32[256] as llm/checkpoint.h's state file (0 magic SHARD_MAGIC, 1 version,
// 2 step, 3 adam t, 4..9 config, 10..11 Psi, 12..17 data position and sampler RNG, 18 the 16-bit
// parameters' kind, 19..21 FP8 recipe and state size, 22..24 loss scaler, 31..33 health checks), then
// 25 rank, 26 world size, 27..28 pieces, 29..30 values (the pieces' total length); then the index,
// int64 (unit, offset in checkpoint order, length) per piece; then FP32 arrays of `values` each:
// parameters, m, v; then `values` uint16 (BF16/FP16 bits) if header[18] != 0; then rank 0's shard
// alone the FP8 state and the health windows. Only rank 0's training position (step, data, RNG,
// scaler, FP8, health) is read back; all ranks write theirs.
//
// --async-checkpoint: the save copies this rank's part to host memory (the snapshot) and a background
// thread writes it while training goes on; after every step the ranks agree (one host all-reduce of
// an int) whether all are done, and then rank 0 writes the manifest. The next save, and the end of
// the run, wait for the previous one first. Without it the save is the same, written in place.
//
// Disk errors: every byte goes through ckpt_write, which stops at the first failed fwrite/fflush/
// fsync/rename (or at the simulated one: --inject diskfail@step=S,rank=R,bytes=B fails with ENOSPC
// after B bytes; slowdisk@rank=R,ms=M sleeps M ms per 4 KiB). The rank that failed prints one line
// (the file, the error), the temporary file is removed, no manifest is written, and every rank ends
// with status 1: the earlier checkpoints are untouched.
#pragma once
#include <pthread.h>
#include <sys/stat.h>
#include <fcntl.h>
#include "common.h"
#include "checkpoint.h"
#include "dp.h"
#include "inject.h"

#define SHARD_MAGIC 20261123
#define SHARD_VERSION 1
#define CKPT_CHUNK 4096  // bytes per write call (the slow disk's unit)

// ----------------------------------------------------------------------------
// host-side agreement among the world's ranks (plain MPI on host ints, outside the comm ledger)

static int ckpt_sum_int(Comm* c, int x) {
#if COMM_MPI
    int y = 0;
    mpiCheck(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, c->mpi[GROUP_WORLD]));
    return y;
#else
    (void)c;
    return x;
#endif
}

static int ckpt_min_int(Comm* c, int x) {
#if COMM_MPI
    int y = 0;
    mpiCheck(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_MIN, c->mpi[GROUP_WORLD]));
    return y;
#else
    (void)c;
    return x;
#endif
}

// ----------------------------------------------------------------------------
// the checked writer: counts bytes, checksums them, fails for real or on purpose

static uint64_t fnv1a(uint64_t h, const void* p, size_t n) {
    const unsigned char* b = (const unsigned char*)p;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ull; }
    return h;
}
#define FNV_START 14695981039346656037ull

typedef struct {
    FILE* f;
    char path[1300];     // the temporary name being written
    uint64_t bytes, hash;
    long fail_at;        // -1, or the byte count at which a simulated full disk stops the write
    int slow_ms;         // sleep per CKPT_CHUNK bytes (a slow disk)
    int failed;
    char why[1600];      // "<file>: <error>" of the first failure
} CkptWriter;

static void ckw_fail(CkptWriter* w, const char* what, int err) {
    if (w->failed) return;
    w->failed = 1;
    snprintf(w->why, sizeof(w->why), "%s: %s: %s", w->path, what, strerror(err));
}

static void ckpt_write(CkptWriter* w, const void* buf, size_t n) {
    const char* p = (const char*)buf;
    while (n > 0 && !w->failed) {
        size_t k = n < CKPT_CHUNK ? n : CKPT_CHUNK;
        if (w->fail_at >= 0 && w->bytes + k > (uint64_t)w->fail_at) {
            size_t part = (size_t)((uint64_t)w->fail_at - w->bytes);
            if (part > 0 && fwrite(p, 1, part, w->f) == part) { w->bytes += part; }
            ckw_fail(w, "write failed (--inject diskfail)", ENOSPC);
            return;
        }
        if (fwrite(p, 1, k, w->f) != k) { ckw_fail(w, "write failed", errno ? errno : EIO); return; }
        w->hash = fnv1a(w->hash, p, k);
        w->bytes += k;
        p += k;
        n -= k;
        if (w->slow_ms > 0) usleep((useconds_t)w->slow_ms * 1000);
    }
}

// opens w on <final_path>.tmp (with the simulated full disk at fail_at bytes and the slow disk)
static void ckw_open(CkptWriter* w, const char* final_path, long fail_at, int slow_ms) {
    memset(w, 0, sizeof(*w));
    snprintf(w->path, sizeof(w->path), "%s.tmp", final_path);
    w->hash = FNV_START; w->fail_at = fail_at; w->slow_ms = slow_ms;
    w->f = fopen(w->path, "wb");
    if (w->f == NULL) ckw_fail(w, "cannot create", errno);
}

// flushed to the disk, closed and renamed to final_path; after a failure the temporary file goes
static void ckw_close(CkptWriter* w, const char* final_path) {
    if (w->f != NULL) {
        if (!w->failed && (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0)) ckw_fail(w, "flush failed", errno);
        if (fclose(w->f) != 0) ckw_fail(w, "close failed", errno);
        w->f = NULL;
    }
    if (!w->failed && rename(w->path, final_path) != 0) ckw_fail(w, "rename failed", errno);
    if (w->failed) remove(w->path);
}

// ----------------------------------------------------------------------------
// what one rank writes: its pieces, copied aside

typedef struct {
    int step;
    int header[HEADER_INTS];
    int64_t* index;        // (pieces, 3): unit, offset (checkpoint order), length
    size_t pieces, values;
    float *p, *m, *v;      // (values) each
    uint16_t* p16;         // (values) or NULL
    float* fp8;            // (fp8_n) rank 0 only
    size_t fp8_n;
    float* health;         // (2, health_n) rank 0 only: the health windows (llm/health.h)
    int health_n;
    int good;              // saved right after a healthy step: last-known-good once complete (llm/health.h)
    char dir[1100];
    long fail_at;
    int slow_ms;
} CkptSnapshot;

typedef struct {
    Comm* comm;
    const InjectPlan* inject;
    const char* out_dir;
    int async, keep;       // --async-checkpoint, --keep-checkpoints (0: all)
    char layout[160];      // the manifest's layout line
    size_t* ckpt_of;       // (packed_size) checkpoint-order index of each packed position, SIZE_MAX for pads
    // the save in flight (written, not yet in a manifest)
    int pending, running;
    pthread_t thread;
    int done;              // set by the writer (atomic)
    CkptWriter w;
    CkptSnapshot snap;
} Ckpt;

// the map from this rank's packed positions to checkpoint order, through layout_to_packed itself: an
// array holding (index + 1) split in 24-bit halves (exact in FP32) goes through it twice
static void ckpt_build_map(Ckpt* ck, const ParamLayout* lay) {
    size_t n = lay->num_parameters, pn = lay->packed_size;
    float* idx = (float*)mallocCheck(n * sizeof(float));  // (Psi) checkpoint order
    float* lo = (float*)mallocCheck(pn * sizeof(float));  // (packed_size)
    float* hi = (float*)mallocCheck(pn * sizeof(float));  // (packed_size)
    for (size_t i = 0; i < n; i++) idx[i] = (float)((i + 1) & 0xffffff);
    layout_to_packed(lay, idx, lo);
    for (size_t i = 0; i < n; i++) idx[i] = (float)((i + 1) >> 24);
    layout_to_packed(lay, idx, hi);
    ck->ckpt_of = (size_t*)mallocCheck((pn + 1) * sizeof(size_t));
    for (size_t j = 0; j < pn; j++) {
        size_t k = (size_t)lo[j] + ((size_t)hi[j] << 24);
        ck->ckpt_of[j] = k == 0 ? SIZE_MAX : k - 1;
    }
    free(idx); free(lo); free(hi);
}

static void ckpt_init(Ckpt* ck, Comm* comm, const DataParallel* dp, const InjectPlan* inject, const char* out_dir,
                      int async, int keep, const char* schedule, int vpp) {
    memset(ck, 0, sizeof(*ck));
    ck->comm = comm; ck->inject = inject; ck->out_dir = out_dir; ck->async = async; ck->keep = keep;
    snprintf(ck->layout, sizeof(ck->layout), "dp %d tp %d pp %d zero %d schedule %s vpp %d", comm->dp, comm->tp, comm->pp,
             dp->stage, schedule, vpp);
    ckpt_build_map(ck, &dp->lay);
}

static void ckpt_free(Ckpt* ck) { free(ck->ckpt_of); }

static void ckpt_dir_name(char* out, size_t cap, const char* out_dir, int step) { snprintf(out, cap, "%s/ckpt_%08d", out_dir, step); }

// this rank's pieces and their values, copied from its storage into host memory (no communication)
static void ckpt_snapshot(Ckpt* ck, DataParallel* dp, const TrainState* ts, int rank0, CkptSnapshot* s) {
    const ParamLayout* lay = &dp->lay;
    size_t mine_n = dp_state_size(dp), pn = lay->packed_size;
    // this rank's storage on the host: master (BF16/FP16 builds), m, v, the parameters it computes with
    float* master = dp->opt.master ? (float*)mallocCheck(mine_n * sizeof(float)) : NULL;  // (mine_n) or NULL
    float* m = (float*)mallocCheck(mine_n * sizeof(float));                               // (mine_n)
    float* v = (float*)mallocCheck(mine_n * sizeof(float));                               // (mine_n)
    size_t px_n = dp->stage == 3 ? mine_n : pn;
    float* px = (float*)mallocCheck(px_n * sizeof(float));  // (px_n) the floatX parameters: all (stages 0-2) or the shard
    device_synchronize();
    if (master) copy_to_host(master, dp->opt.master, mine_n * sizeof(float));
    copy_to_host(m, dp->opt.m, mine_n * sizeof(float));
    copy_to_host(v, dp->opt.v, mine_n * sizeof(float));
    copy_to_host_float(px, dp->stage == 3 ? dp->params_shard : dp->params, px_n);
    int has16 = master != NULL;
    // the owned positions, in order: at most mine_n values
    size_t cap = mine_n, cap_pieces = 64;
    s->p = (float*)mallocCheck((cap + 1) * sizeof(float));
    s->m = (float*)mallocCheck((cap + 1) * sizeof(float));
    s->v = (float*)mallocCheck((cap + 1) * sizeof(float));
    s->p16 = has16 ? (uint16_t*)mallocCheck((cap + 1) * sizeof(uint16_t)) : NULL;
    s->index = (int64_t*)mallocCheck(cap_pieces * 3 * sizeof(int64_t));
    s->pieces = 0; s->values = 0;
    int ts_[NUM_TENSORS];
    for (int u = 0; u < lay->num_units; u++) {
        if (!lay->units[u].held || (u == 0 && dp->pp_rank > 0)) continue;  // the tied embedding: the first stage's
        size_t lo, hi, n = lay->units[u].n;
        if (dp->stage > 0) dp_owned(dp, u, &lo, &hi);
        else { size_t b = (n + dp->dp - 1) / dp->dp; lo = (size_t)dp->rank * b; hi = lo + b; }  // DDP: 1/dp each
        if (hi > n) hi = n;
        int k = unit_tensors(lay, u, ts_);
        for (int i = 0; i < k; i++) {
            int t = ts_[i];
            if (lay->tp_rank > 0 && (TENSORS[t].tp == TP_REPLICATED || TENSORS[t].tp == TP_NORM)) continue;
            size_t a = lay->unit_offset[t], e = a + lay->layer_size[t];
            if (a < lo) a = lo;
            if (e > hi) e = hi;
            for (size_t pos = a; pos < e; pos++) {
                size_t packed = lay->units[u].start + pos, c = ck->ckpt_of[packed];
                if (c == SIZE_MAX) continue;
                size_t si = dp->stage == 0 ? packed : dp_index(dp, u, pos);
                if (s->values == cap) fatal("checkpoint: rank owns more values than its state holds (%zu)", cap);
                float xval = px[dp->stage == 3 ? si : packed];
                s->p[s->values] = master ? master[si] : xval;
                s->m[s->values] = m[si];
                s->v[s->values] = v[si];
                if (has16) s->p16[s->values] = STATE_FLOATX_KIND == 2 ? fp16_bits_from_float(xval) : bf16_bits_from_float(xval);
                int64_t* last = s->pieces ? s->index + 3 * (s->pieces - 1) : NULL;
                if (last && last[0] == u && (size_t)(last[1] + last[2]) == c) {
                    last[2]++;
                } else {
                    if (s->pieces == cap_pieces) {
                        cap_pieces *= 2;
                        s->index = (int64_t*)realloc(s->index, cap_pieces * 3 * sizeof(int64_t));
                        if (s->index == NULL) fatal("checkpoint: out of host memory for the shard index");
                    }
                    int64_t* p = s->index + 3 * s->pieces++;
                    p[0] = u; p[1] = (int64_t)c; p[2] = 1;
                }
                s->values++;
            }
        }
    }
    free(master); free(m); free(v); free(px);
    // the header: the state file's fields, then the shard's own
    GPTConfig cfg = lay->cfg;
    int* h = s->header;
    memset(h, 0, sizeof(s->header));
    h[0] = SHARD_MAGIC; h[1] = SHARD_VERSION; h[2] = ts->step; h[3] = ts->adam_t;
    h[4] = cfg.max_seq_len; h[5] = cfg.vocab_size; h[6] = cfg.num_layers; h[7] = cfg.num_heads; h[8] = cfg.channels;
    h[9] = cfg.padded_vocab_size;
    put64(h, 10, lay->num_parameters);
    put64(h, 12, (uint64_t)ts->data.epoch);
    put64(h, 14, (uint64_t)ts->data.sample);
    put64(h, 16, ts->rng);
    h[18] = has16 ? STATE_FLOATX_KIND : 0;
    s->fp8_n = rank0 ? ts->fp8_n : 0;
    s->fp8 = NULL;
    if (s->fp8_n > 0) { s->fp8 = (float*)mallocCheck(s->fp8_n * sizeof(float)); memcpy(s->fp8, ts->fp8, s->fp8_n * sizeof(float)); }
    h[19] = s->fp8_n > 0 ? ts->fp8_recipe : 0;
    put64(h, 20, s->fp8_n);
    memcpy(&h[22], &ts->loss_scale, sizeof(float));
    h[23] = ts->loss_scale_good_steps; h[24] = ts->loss_scale_skipped;
    s->health_n = rank0 ? ts->health_n : 0;
    s->health = NULL;
    if (s->health_n > 0) {
        s->health = (float*)mallocCheck(2 * (size_t)s->health_n * sizeof(float));
        memcpy(s->health, ts->health, 2 * (size_t)s->health_n * sizeof(float));
    }
    h[31] = s->health_n; h[32] = ts->bad_streak; h[33] = ts->bad_skipped;
    h[25] = ck->comm->world_rank; h[26] = ck->comm->world_size;
    put64(h, 27, s->pieces);
    put64(h, 29, s->values);
    s->step = ts->step;
    ckpt_dir_name(s->dir, sizeof(s->dir), ck->out_dir, ts->step);
    const InjectFault* f = inject_find(ck->inject, INJECT_DISKFAIL, ts->step, ck->comm->world_rank);
    s->fail_at = f ? f->bytes : -1;
    const InjectFault* slow = inject_find(ck->inject, INJECT_SLOWDISK, ts->step, ck->comm->world_rank);
    s->slow_ms = slow ? slow->ms : 0;
}

static void ckpt_snapshot_free(CkptSnapshot* s) {
    free(s->index); free(s->p); free(s->m); free(s->v); free(s->p16); free(s->fp8); free(s->health);
    memset(s, 0, sizeof(*s));
}

// writes the snapshot to <dir>/shard_<r>.bin through a temporary name; w says how it went
static void ckpt_write_shard(const CkptSnapshot* s, int rank, CkptWriter* w) {
    char final_path[1200];
    snprintf(final_path, sizeof(final_path), "%s/shard_%d.bin", s->dir, rank);
    ckw_open(w, final_path, s->fail_at, s->slow_ms);
    ckpt_write(w, s->header, sizeof(s->header));
    ckpt_write(w, s->index, s->pieces * 3 * sizeof(int64_t));
    ckpt_write(w, s->p, s->values * sizeof(float));
    ckpt_write(w, s->m, s->values * sizeof(float));
    ckpt_write(w, s->v, s->values * sizeof(float));
    if (s->p16) ckpt_write(w, s->p16, s->values * sizeof(uint16_t));
    if (s->fp8_n > 0) ckpt_write(w, s->fp8, s->fp8_n * sizeof(float));
    if (s->health_n > 0) ckpt_write(w, s->health, 2 * (size_t)s->health_n * sizeof(float));
    ckw_close(w, final_path);
}

static void* ckpt_thread(void* arg) {
    Ckpt* ck = (Ckpt*)arg;
    ckpt_write_shard(&ck->snap, ck->comm->world_rank, &ck->w);
    __atomic_store_n(&ck->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

// ----------------------------------------------------------------------------
// the manifest, and reading it back

static void fsync_dir(const char* dir) {
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) { fsync(fd); close(fd); }
}

// a complete manifest and shards that match it: 1, else 0 with why. shards/step/world out. Every
// shard's size is checked; the checksums of shards r with r % hash_parts == hash_part are recomputed
// (hash_parts 0: none; 1: all).
typedef struct { char name[64]; uint64_t bytes, hash; } ShardEntry;
static int ckpt_check_dir(const char* dir, int* step, int* world, ShardEntry** shards, char* why, size_t cap,
                          int hash_part, int hash_parts) {
    char path[1200];
    snprintf(path, sizeof(path), "%s/manifest.txt", dir);
    *shards = NULL;
    FILE* f = fopen(path, "r");
    if (f == NULL) { snprintf(why, cap, "no manifest (manifest.txt: %s): the save did not finish", strerror(errno)); return 0; }
    char line[512];
    int ok = 0, nshards = -1, got = 0;
    *step = -1;
    ShardEntry* e = NULL;
    if (!fgets(line, sizeof(line), f) || strcmp(line, "llm-ckpt manifest 1\n") != 0) { snprintf(why, cap, "manifest.txt: bad first line"); fclose(f); return 0; }
    while (fgets(line, sizeof(line), f)) {
        int r; char name[64]; unsigned long long b, hsh;
        if (sscanf(line, "step %d", step) == 1) continue;
        if (sscanf(line, "shards %d", &nshards) == 1) {
            if (nshards <= 0 || nshards > (1 << 20) || e) break;
            e = (ShardEntry*)calloc((size_t)nshards, sizeof(ShardEntry));
            continue;
        }
        if (sscanf(line, "shard %d %63s %llu %llx", &r, name, &b, &hsh) == 4) {
            if (!e || r != got || r >= nshards) break;
            snprintf(e[r].name, sizeof(e[r].name), "%s", name);
            e[r].bytes = b; e[r].hash = hsh;
            got++;
            continue;
        }
        if (!strcmp(line, "complete\n")) { ok = 1; break; }
    }
    fclose(f);
    if (!ok || !e || got != nshards || *step < 0) {
        snprintf(why, cap, "manifest.txt incomplete (no \"complete\" line after %d of %d shards)", got, nshards);
        free(e);
        return 0;
    }
    for (int r = 0; r < nshards; r++) {
        snprintf(path, sizeof(path), "%s/%s", dir, e[r].name);
        struct stat st;
        if (stat(path, &st) != 0) { snprintf(why, cap, "%s: %s", e[r].name, strerror(errno)); free(e); return 0; }
        if ((uint64_t)st.st_size != e[r].bytes) {
            snprintf(why, cap, "%s: %llu bytes, the manifest says %llu", e[r].name, (unsigned long long)st.st_size,
                     (unsigned long long)e[r].bytes);
            free(e); return 0;
        }
        if (hash_parts > 0 && r % hash_parts == hash_part) {
            FILE* sf = fopen(path, "rb");
            if (sf == NULL) { snprintf(why, cap, "%s: %s", e[r].name, strerror(errno)); free(e); return 0; }
            uint64_t h = FNV_START;
            char buf[1 << 16];
            size_t k;
            while ((k = fread(buf, 1, sizeof(buf), sf)) > 0) h = fnv1a(h, buf, k);
            fclose(sf);
            if (h != e[r].hash) {
                snprintf(why, cap, "%s: checksum %016llx, the manifest says %016llx", e[r].name, (unsigned long long)h,
                         (unsigned long long)e[r].hash);
                free(e); return 0;
            }
        }
    }
    *world = nshards;
    *shards = e;
    return 1;
}

// removes a checkpoint directory: the manifest first (it stops being a checkpoint), then the rest
static void ckpt_remove_dir(const char* dir) {
    char path[1400];
    snprintf(path, sizeof(path), "%s/manifest.txt", dir);
    remove(path);
    DIR* d = opendir(dir);
    if (d == NULL) return;
    struct dirent* de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        remove(path);
    }
    closedir(d);
    rmdir(dir);
}

// the steps of out_dir's ckpt_<step> directories, newest first (malloc'd; n out)
static int* ckpt_list(const char* out_dir, int* n) {
    *n = 0;
    DIR* d = opendir(out_dir);
    if (d == NULL) return NULL;
    int cap = 16, *steps = (int*)mallocCheck(cap * sizeof(int));
    struct dirent* de;
    while ((de = readdir(d)) != NULL) {
        int step, used = 0;
        if (sscanf(de->d_name, "ckpt_%d%n", &step, &used) == 1 && de->d_name[used] == '\0' && used == 13) {
            if (*n == cap) { cap *= 2; steps = (int*)realloc(steps, cap * sizeof(int)); if (!steps) fatal("out of memory"); }
            steps[(*n)++] = step;
        }
    }
    closedir(d);
    for (int i = 0; i < *n; i++)
        for (int j = i + 1; j < *n; j++)
            if (steps[j] > steps[i]) { int t = steps[i]; steps[i] = steps[j]; steps[j] = t; }
    return steps;
}

// ----------------------------------------------------------------------------
// the last-known-good list: <dir>/good_checkpoints.txt (llm/health.h's rollback reads it)

static void ckpt_good_path(const char* dir, char* out, size_t cap) { snprintf(out, cap, "%s/good_checkpoints.txt", dir); }

// a fresh run (not resumed) starts its list empty (rank 0)
static void ckpt_good_reset(const char* dir) {
    char path[1100];
    ckpt_good_path(dir, path, sizeof(path));
    if (remove(path) != 0 && errno != ENOENT) fatal("%s: cannot remove: %s", path, strerror(errno));
}

// rank 0, once the checkpoint of step `step` (a state file, or a sharded checkpoint's directory) saved
// right after a healthy step is complete
static void ckpt_good_add(const char* dir, int step, const char* state_path) {
    char path[1100];
    ckpt_good_path(dir, path, sizeof(path));
    FILE* f = fopen(path, "ab");
    if (f == NULL) fatal("%s: cannot open for appending: %s", path, strerror(errno));
    if (fprintf(f, "%d %s\n", step, state_path) < 0) fatal("%s: write failed: %s", path, strerror(errno));
    fcloseCheck(f, path);
}

// The newest listed checkpoint at or before step `upto` that is still whole (a state file that exists;
// a sharded checkpoint whose manifest and shards match, ckpt_check_dir): its step, and its path in
// out; -1 when there is none. keep_upto >= 0 (rank 0): the list is rewritten without the entries after
// keep_upto.
static int ckpt_good_find(const char* dir, int upto, char* out, size_t cap, int keep_upto) {
    char path[1100];
    ckpt_good_path(dir, path, sizeof(path));
    int best = -1;
    out[0] = '\0';
    FILE* f = fopen(path, "rb");
    if (f == NULL) return -1;
    size_t kept_cap = 1 << 12, kept_n = 0;
    char* kept = (char*)mallocCheck(kept_cap);  // the lines that stay, when rewriting
    char line[1200];
    while (fgets(line, sizeof(line), f) != NULL) {
        int step;
        char file[1100];
        if (sscanf(line, "%d %1099s", &step, file) != 2) continue;
        size_t len = strlen(line);
        if (keep_upto >= 0 && step <= keep_upto) {
            if (kept_n + len + 1 > kept_cap) {
                kept_cap = 2 * (kept_n + len + 1);
                kept = (char*)realloc(kept, kept_cap);
                if (kept == NULL) fatal("%s: out of host memory", path);
            }
            memcpy(kept + kept_n, line, len);
            kept_n += len;
        }
        if (step > upto || step < best) continue;
        struct stat st;
        if (stat(file, &st) != 0) continue;  // removed since (kept checkpoints rotate)
        if (S_ISDIR(st.st_mode)) {
            int s_step, world;
            ShardEntry* e;
            char why[600];
            if (!ckpt_check_dir(file, &s_step, &world, &e, why, sizeof(why), 0, 1)) continue;
            free(e);
        }
        best = step;
        snprintf(out, cap, "%s", file);
    }
    fcloseCheck(f, path);
    if (keep_upto >= 0) {
        f = fopen(path, "wb");
        if (f == NULL) fatal("%s: cannot rewrite: %s", path, strerror(errno));
        if (kept_n > 0) fwriteCheck(kept, 1, kept_n, f, path);
        fcloseCheck(f, path);
    }
    free(kept);
    return best;
}

// rank 0, all shards written: the manifest (through a temporary name, with the checked writer: the
// byte budget of --inject diskfail goes on from the shard's), then the last-known-good list, then
// --keep-checkpoints. Returns 0 with w->why when the manifest could not be written.
static int ckpt_write_manifest(Ckpt* ck, const uint64_t* info /*(world, 2): bytes, hash*/, CkptWriter* w) {
    const CkptSnapshot* s = &ck->snap;
    char path[1200];
    snprintf(path, sizeof(path), "%s/manifest.txt", s->dir);
    fsync_dir(s->dir);  // the shards' renames first
    char* text = NULL;
    size_t len = 0;
    FILE* mf = open_memstream(&text, &len);
    if (mf == NULL) fatal("checkpoint: open_memstream failed: %s", strerror(errno));
    fprintf(mf, "llm-ckpt manifest 1\nstep %d\nlayout %s\nconfig maxT %d V %d L %d NH %d C %d Vp %d\nparameters %llu\nshards %d\n",
            s->step, ck->layout, s->header[4], s->header[5], s->header[6], s->header[7], s->header[8], s->header[9],
            (unsigned long long)get64(s->header, 10), ck->comm->world_size);
    for (int r = 0; r < ck->comm->world_size; r++) {
        fprintf(mf, "shard %d shard_%d.bin %llu %016llx\n", r, r, (unsigned long long)info[2 * r], (unsigned long long)info[2 * r + 1]);
    }
    fprintf(mf, "complete\n");
    if (fclose(mf) != 0) fatal("checkpoint: open_memstream failed: %s", strerror(errno));
    ckw_open(w, path, s->fail_at >= 0 ? s->fail_at - (long)ck->w.bytes : -1, 0);
    ckpt_write(w, text, len);
    ckw_close(w, path);
    free(text);
    if (w->failed) return 0;
    fsync_dir(s->dir);
    printf("saved checkpoint %s (%d shards)\n", s->dir, ck->comm->world_size);
    if (s->good) ckpt_good_add(ck->out_dir, s->step, s->dir);
    if (ck->keep > 0) {  // the last K complete ones stay; older ones, and older partial ones, go
        int n, complete = 0;
        int* steps = ckpt_list(ck->out_dir, &n);
        for (int i = 0; i < n; i++) {
            if (steps[i] > s->step) continue;
            char dir[1100], mpath[1200];
            ckpt_dir_name(dir, sizeof(dir), ck->out_dir, steps[i]);
            snprintf(mpath, sizeof(mpath), "%s/manifest.txt", dir);
            struct stat st;
            int has = stat(mpath, &st) == 0;
            if (has && complete < ck->keep) { complete++; continue; }
            if (complete == 0) continue;  // (nothing complete is newer: keep it)
            ckpt_remove_dir(dir);
        }
        free(steps);
    }
    return 1;
}

// waits for the save in flight, agrees on how it went, and (all well) has rank 0 write its manifest.
// A failed write: the first failing rank prints its line and every rank exits with status 1.
static void ckpt_finish(Ckpt* ck) {
    if (!ck->pending) return;
    if (ck->running) {
        int rc = pthread_join(ck->thread, NULL);
        if (rc != 0) { fprintf(stderr, "error: pthread_join: %s (%s:%d)\n", strerror(rc), __FILE__, __LINE__); exit(EXIT_FAILURE); }
        ck->running = 0;
    }
    Comm* c = ck->comm;
    int failed = ck->w.failed;
    int nfailed = ckpt_sum_int(c, failed);
    if (nfailed > 0) {
        int lowest = ckpt_min_int(c, failed ? c->world_rank : INT_MAX);  // the lowest failing rank speaks
        if (failed && lowest == c->world_rank) {
            fprintf(stderr, "error: checkpoint of step %d not saved: %s; training state and earlier checkpoints intact\n",
                    ck->snap.step, ck->w.why);
        }
        comm_exit(c, EXIT_FAILURE);
    }
    uint64_t mine[2] = {ck->w.bytes, ck->w.hash};
    uint64_t* all = c->world_rank == 0 ? (uint64_t*)mallocCheck((size_t)c->world_size * sizeof(mine)) : NULL;
    comm_gather_bytes(c, mine, sizeof(mine), all);
    CkptWriter mw;  // rank 0's manifest
    int manifest_failed = c->world_rank == 0 && !ckpt_write_manifest(ck, all, &mw);
    free(all);
    if (ckpt_sum_int(c, manifest_failed) > 0) {  // every rank ends; rank 0 says why
        if (manifest_failed) {
            fprintf(stderr, "error: checkpoint of step %d not saved: %s; training state and earlier checkpoints intact\n",
                    ck->snap.step, mw.why);
        }
        comm_exit(c, EXIT_FAILURE);
    }
    ckpt_snapshot_free(&ck->snap);
    ck->pending = 0;
}

// after a step: if the save in flight is done on every rank, finish it (every rank calls it)
static void ckpt_poll(Ckpt* ck) {
    if (!ck->pending) return;
    int done = __atomic_load_n(&ck->done, __ATOMIC_ACQUIRE);
    if (ckpt_sum_int(ck->comm, done) == ck->comm->world_size) ckpt_finish(ck);
}

// a save of the state after ts->step (every rank calls it): waits for the previous one, copies this
// rank's part aside, and writes it (in the background with --async-checkpoint). good: saved right after
// a healthy step, so the last-known-good list gets it once it is complete (llm/health.h).
static void ckpt_save(Ckpt* ck, DataParallel* dp, const TrainState* ts, int good) {
    ckpt_finish(ck);
    Comm* c = ck->comm;
    ckpt_snapshot(ck, dp, ts, c->world_rank == 0, &ck->snap);
    ck->snap.good = good;
    // the directory, without a manifest (a stale one from an earlier run of this step goes first)
    if (c->world_rank == 0) {
        make_dirs("--output-dir", ck->snap.dir, 1);
        char path[1200];
        snprintf(path, sizeof(path), "%s/manifest.txt", ck->snap.dir);
        remove(path);
    }
    comm_barrier(c, GROUP_WORLD);
    ck->pending = 1;
    ck->done = 0;
    if (ck->async) {
        int rc = pthread_create(&ck->thread, NULL, ckpt_thread, ck);
        if (rc != 0) { fprintf(stderr, "error: pthread_create: %s (%s:%d)\n", strerror(rc), __FILE__, __LINE__); exit(EXIT_FAILURE); }
        ck->running = 1;
    } else {
        ckpt_write_shard(&ck->snap, c->world_rank, &ck->w);
        ck->done = 1;
        ckpt_finish(ck);
    }
}

// ----------------------------------------------------------------------------
// resuming: the newest complete checkpoint, read into this rank's layout

// Every rank calls it: 1 when dir is a complete checkpoint (a manifest, and shards of its sizes and
// checksums). Each rank recomputes the checksums of its share of the shards (shard r on rank r mod
// world), so that the job reads each shard once, not once per rank. On 0, why holds the reason on the
// lowest rank that found one, "" on the others.
static int ckpt_verify(Comm* c, const char* dir, char* why, size_t cap) {
    int step, world;
    ShardEntry* e;
    int ok = ckpt_check_dir(dir, &step, &world, &e, why, cap, c->world_rank, c->world_size);
    free(e);
    if (ckpt_sum_int(c, !ok) == 0) return 1;
    if (ckpt_min_int(c, ok ? INT_MAX : c->world_rank) != c->world_rank) why[0] = '\0';
    return 0;
}

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

// reads the checkpoint in dir (every rank calls it): the training position into ts (rank 0's shard), and
// the values of the units this rank's layout holds into params, m, v (and params16 when the shards
// have them), malloc'd Psi FP32 each, checkpoint order, zero elsewhere. An incomplete checkpoint: one
// line from the rank that saw it, and every rank exits with status 1.
static void ckpt_load(Comm* c, const char* dir, const ParamLayout* lay, TrainState* ts, float** params, float** m,
                      float** v, float** params16) {
    int step, world;
    ShardEntry* e;
    char why[600];
    if (!ckpt_verify(c, dir, why, sizeof(why))) {
        if (why[0] != '\0') fprintf(stderr, "error: --resume: %s is not a complete checkpoint: %s\n", dir, why);
        comm_exit(c, EXIT_FAILURE);
    }
    if (!ckpt_check_dir(dir, &step, &world, &e, why, sizeof(why), 0, 0)) fatal("--resume: %s changed while being read: %s", dir, why);
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

// the step of the newest state_<step>.bin (a gathered checkpoint) in out_dir, or -1
static int ckpt_latest_state_step(const char* out_dir) {
    DIR* d = opendir(out_dir);
    if (d == NULL) return -1;
    int best = -1;
    struct dirent* de;
    while ((de = readdir(d)) != NULL) {
        int step;
        char tail[8];
        if (sscanf(de->d_name, "state_%d%7s", &step, tail) == 2 && !strcmp(tail, ".bin") && step > best) best = step;
    }
    closedir(d);
    return best;
}
