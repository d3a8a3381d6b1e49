// ckpt_shard.h: sharded, asynchronous checkpoints that survive a kill -9, a failing disk and a change
// of layout (the scheme of the Llama 3 report sec. 3.3.4 and of distributed
// checkpoint formats: every rank writes what it owns in parallel, and a manifest written last is what
// makes a checkpoint complete). This file: the format and the save. llm/ckpt/ckpt_dir.h: what saving and
// resuming share (names, the manifest check, the last-known-good list); llm/ckpt/ckpt_resume.h: the resume.
//
// The checkpoint of step S is the directory <output-dir>/ckpt_<S>/ (S with 8 digits):
//   shard_<r>.bin  written by world rank r alone: the values of the layout-independent state
//                  (llm/ckpt/checkpoint.h's checkpoint order: parameters, AdamW m and v, and the BF16/FP16
//                  parameters of builds that keep them) that rank owns under its layout, with an index
//                  of which (unit, offset, length) pieces of that space they are. What a rank owns: the
//                  units of its pipeline stage (the tied embedding: the first stage's), of those its
//                  tensor-parallel shard (the replicated tensors: tp rank 0's), of that its ZeRO blocks
//                  (ZeRO-1/2/3), or under DDP its 1/dp of every unit, so that every value is written
//                  exactly once and every rank writes about 1/world of the state.
//   manifest.txt   written by rank 0 after every rank reported its shard written, fsynced, renamed into
//                  place and the directory fsynced after (llm/core/atomic_file.h): the step, the verdict, the layout, the config,
//                  and each shard's name, size and checksum (llm/core/atomic_file.h's ckpt_sum; FNV-1a 64 of
//                  the bytes in manifests of version 1), ending with the line "complete".
// A directory without a complete manifest, or whose shards do not match it (size, checksum), is no
// checkpoint: resuming prints one line saying why it is ignored and takes the previous one.
//
// Shard file: header int32[256] as llm/ckpt/checkpoint.h's state file (0 magic SHARD_MAGIC, 1 version,
// 2 step, 3 adam t, 4..9 config, 10..11 Psi, 12..17 data position and sampler RNG, 18 the 16-bit
// parameters' kind, 19..21 FP8 recipe and state size, 22..24 loss scaler, 31..33 health checks, 34 the
// verdict, 38..40 AdamW's beta1, beta2, eps, 41 the moe selection bias's floats; its checksum is the manifest's), then
// 25 rank, 26 world size, 27..28 pieces, 29..30 values (the pieces' total length); then the index,
// int64 (unit, offset in checkpoint order, length) per piece; then FP32 arrays of `values` each:
// parameters, m, v; then `values` uint16 (BF16/FP16 bits) if header[18] != 0; then rank 0's shard
// alone the FP8 state, the health windows and the moe selection bias. Only rank 0's training position (step,
// data, RNG, scaler, FP8, health, bias) is read back; all ranks write theirs.
//
// --async-checkpoint: the save copies this rank's part to host memory (the snapshot) and a background
// thread writes it while training goes on; after every step the ranks agree (one host all-reduce of
// an int) whether all are done, and then rank 0 writes the manifest. The next save, and the end of
// the run, wait for the previous one first. Without it the save is the same, written in place.
//
// Disk errors: every byte goes through llm/core/atomic_file.h's writer, which stops at the first failed
// fwrite/fflush/fsync/rename (or at the simulated one: --inject diskfail@step=S,rank=R,bytes=B fails
// with ENOSPC after B bytes; slowdisk@rank=R,ms=M sleeps M ms per 4 KiB). The rank that failed prints
// one line (the file, the error), its temporary file is removed, no manifest is written, rank 0 removes
// the checkpoint's directory, and every rank ends with status 1: the earlier checkpoints are untouched.
#pragma once
#include <pthread.h>
#include <sys/stat.h>
#include <fcntl.h>
#include "../core/common.h"
#include "checkpoint.h"
#include "../parallel/dp.h"
#include "../faults/inject.h"
#include "../core/atomic_file.h"
#include "ckpt_dir.h"

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
    float* health;         // (2, health_n) rank 0 only: the health windows (llm/faults/health.h)
    int health_n;
    float* moe_bias;       // (moe_bias_n) rank 0 only: the moe layers' selection bias (llm/train/moe_balance.h)
    int moe_bias_n;
    int verdict;           // of the step it follows (llm/ckpt/checkpoint.h): only a healthy one is good
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
    AtomicFile w;
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
    snprintf(ck->layout, sizeof(ck->layout), "dp %d tp %d pp %d zero %d schedule %s vpp %d", comm->mesh.dp.size, comm->mesh.tp.size, comm->mesh.pp.size,
             dp->zero.level, schedule, vpp);
    ckpt_build_map(ck, &dp->lay);
}

static void ckpt_free(Ckpt* ck) { free(ck->ckpt_of); }


// this rank's pieces and their values, copied from its storage into host memory (no communication)
static void ckpt_snapshot(Ckpt* ck, DataParallel* dp, const TrainState* ts, int rank0, CkptSnapshot* s) {
    const ParamLayout* lay = &dp->lay;
    size_t mine_n = dp_state_size(dp), pn = lay->packed_size;
    // this rank's storage on the host: master (BF16/FP16 builds), m, v, the parameters it computes with
    float* master = dp->opt.master ? (float*)mallocCheck(mine_n * sizeof(float)) : NULL;  // (mine_n) or NULL
    float* m = (float*)mallocCheck(mine_n * sizeof(float));                               // (mine_n)
    float* v = (float*)mallocCheck(mine_n * sizeof(float));                               // (mine_n)
    size_t px_n = dp->zero.shard_params ? mine_n : pn;
    float* px = (float*)mallocCheck(px_n * sizeof(float));  // (px_n) the floatX parameters: all, or the shard (shard_params)
    device_synchronize();
    if (master) copy_to_host(master, dp->opt.master, mine_n * sizeof(float));
    copy_to_host(m, dp->opt.m, mine_n * sizeof(float));
    copy_to_host(v, dp->opt.v, mine_n * sizeof(float));
    copy_to_host_float(px, dp->zero.shard_params ? dp->params_shard : dp->params, px_n);
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
        if (dp->zero.shard_optim) dp_owned(dp, u, &lo, &hi);
        else {  // DDP: 1/N each over the unit's group (an experts unit with ep: the ranks that hold its experts)
            size_t N = (size_t)dp_unit_size(dp, u), b = (n + N - 1) / N;
            lo = (size_t)dp_unit_rank(dp, u) * b; hi = lo + b;
        }
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
                size_t si = !dp->zero.shard_optim ? packed : dp_index(dp, u, pos);
                if (s->values == cap) fatal("checkpoint: rank owns more values than its state holds (%zu)", cap);
                float xval = px[dp->zero.shard_params ? si : packed];
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
    // the header: the state file's fields, then the shard's own (only rank 0's carries the FP8 state and
    // the health windows)
    GPTConfig cfg = lay->cfg;
    int* h = s->header;
    state_header_fill(h, cfg, ts, SHARD_MAGIC, SHARD_VERSION, has16 ? STATE_FLOATX_KIND : 0);
    s->fp8_n = rank0 ? ts->fp8_n : 0;
    s->fp8 = NULL;
    if (s->fp8_n > 0) { s->fp8 = (float*)mallocCheck(s->fp8_n * sizeof(float)); memcpy(s->fp8, ts->fp8, s->fp8_n * sizeof(float)); }
    h[19] = s->fp8_n > 0 ? ts->fp8_recipe : 0;
    put64(h, 20, s->fp8_n);
    s->health_n = rank0 ? ts->health_n : 0;
    s->health = NULL;
    if (s->health_n > 0) {
        s->health = (float*)mallocCheck(2 * (size_t)s->health_n * sizeof(float));
        memcpy(s->health, ts->health, 2 * (size_t)s->health_n * sizeof(float));
    }
    h[31] = s->health_n;
    s->moe_bias_n = rank0 ? ts->moe_bias_n : 0;
    s->moe_bias = NULL;
    if (s->moe_bias_n > 0) {
        s->moe_bias = (float*)mallocCheck((size_t)s->moe_bias_n * sizeof(float));
        memcpy(s->moe_bias, ts->moe_bias, (size_t)s->moe_bias_n * sizeof(float));
    }
    h[41] = s->moe_bias_n;
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
    free(s->index); free(s->p); free(s->m); free(s->v); free(s->p16); free(s->fp8); free(s->health); free(s->moe_bias);
    memset(s, 0, sizeof(*s));
}

// writes the snapshot to <dir>/shard_<r>.bin through a temporary name; w says how it went
static void ckpt_write_shard(const CkptSnapshot* s, int rank, AtomicFile* w) {
    char final_path[1200];
    snprintf(final_path, sizeof(final_path), "%s/shard_%d.bin", s->dir, rank);
    af_open(w, final_path, s->fail_at, s->slow_ms);
    af_write(w, s->header, sizeof(s->header));
    af_write(w, s->index, s->pieces * 3 * sizeof(int64_t));
    af_write(w, s->p, s->values * sizeof(float));
    af_write(w, s->m, s->values * sizeof(float));
    af_write(w, s->v, s->values * sizeof(float));
    if (s->p16) af_write(w, s->p16, s->values * sizeof(uint16_t));
    if (s->fp8_n > 0) af_write(w, s->fp8, s->fp8_n * sizeof(float));
    if (s->health_n > 0) af_write(w, s->health, 2 * (size_t)s->health_n * sizeof(float));
    if (s->moe_bias_n > 0) af_write(w, s->moe_bias, (size_t)s->moe_bias_n * sizeof(float));
    af_close(w);
}

static void* ckpt_thread(void* arg) {
    Ckpt* ck = (Ckpt*)arg;
    ckpt_write_shard(&ck->snap, ck->comm->world_rank, &ck->w);
    __atomic_store_n(&ck->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

// rank 0, all shards written: the manifest (through a temporary name, with the checked writer: the
// byte budget of --inject diskfail goes on from the shard's), then --keep-checkpoints. Returns 0 with
// w->why when the manifest could not be written.
static int ckpt_write_manifest(Ckpt* ck, const uint64_t* info /*(world, 2): bytes, hash*/, AtomicFile* w) {
    const CkptSnapshot* s = &ck->snap;
    char path[1200];
    snprintf(path, sizeof(path), "%s/manifest.txt", s->dir);
    // (every shard is on the disk for good: its writer fsynced it before its rename, and the directory after
    // it, before reporting it written)
    char* text = NULL;
    size_t len = 0;
    FILE* mf = open_memstream(&text, &len);
    if (mf == NULL) fatal("checkpoint: open_memstream failed: %s", strerror(errno));
    fprintf(mf, "llm-ckpt manifest 2\nstep %d\nverdict %d %s\nlayout %s\nconfig maxT %d V %d L %d NH %d C %d Vp %d\nparameters %llu\nshards %d\n",
            s->step, s->verdict, ckpt_verdict_name(s->verdict), ck->layout, s->header[4], s->header[5], s->header[6], s->header[7],
            s->header[8], s->header[9], (unsigned long long)get64(s->header, 10), ck->comm->world_size);
    for (int r = 0; r < ck->comm->world_size; r++) {
        fprintf(mf, "shard %d shard_%d.bin %llu %016llx\n", r, r, (unsigned long long)info[2 * r], (unsigned long long)info[2 * r + 1]);
    }
    fprintf(mf, "complete\n");
    if (fclose(mf) != 0) fatal("checkpoint: open_memstream failed: %s", strerror(errno));
    af_open(w, path, s->fail_at >= 0 ? s->fail_at - (long)ck->w.bytes : -1, 0);
    af_write(w, text, len);
    af_close(w);  // (the directory fsynced after the rename)
    free(text);
    if (w->failed) return 0;
    printf("saved checkpoint %s (%d shards)%s\n", s->dir, ck->comm->world_size,
           s->verdict == CKPT_HEALTHY ? "" : s->verdict == CKPT_IN_STREAK ? ", not good: saved inside a streak of bad steps" : ", not good: rejected by the SDC check");
    ckpt_rotate(ck->out_dir, ck->keep);
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
    int first = ckpt_first_bad(c, failed);
    if (first >= 0) {
        if (first == c->world_rank) {  // the lowest failing rank speaks
            fprintf(stderr, "error: checkpoint of step %d not saved: %s; training state and earlier checkpoints intact\n",
                    ck->snap.step, ck->w.why);
        }
        if (c->world_rank == 0) {  // (every rank is done with it: the others' shards go too, and its line in the list)
            ckpt_remove_dir(ck->snap.dir);
            ckpt_good_drop_after(ck->out_dir, ck->snap.step - 1);
        }
        comm_exit(c, EXIT_FAILURE);
    }
    uint64_t mine[2] = {ck->w.bytes, ckpt_sum_final(&ck->w.sum)};
    uint64_t* all = c->world_rank == 0 ? (uint64_t*)mallocCheck((size_t)c->world_size * sizeof(mine)) : NULL;
    comm_gather_bytes(c, mine, sizeof(mine), all);
    AtomicFile mw;  // rank 0's manifest
    memset(&mw, 0, sizeof(mw));
    int manifest_failed = c->world_rank == 0 && !ckpt_write_manifest(ck, all, &mw);
    free(all);
    if (ckpt_first_bad(c, manifest_failed) >= 0) {  // every rank ends; rank 0 says why
        if (manifest_failed) {
            fprintf(stderr, "error: checkpoint of step %d not saved: %s; training state and earlier checkpoints intact\n",
                    ck->snap.step, mw.why);
            ckpt_remove_dir(ck->snap.dir);
            ckpt_good_drop_after(ck->out_dir, ck->snap.step - 1);
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
    if (ckpt_first_bad(ck->comm, !done) < 0) ckpt_finish(ck);
}

// a save of the state after ts->step (every rank calls it): waits for the previous one, copies this
// rank's part aside, and writes it (in the background with --async-checkpoint). ts->verdict healthy: the
// list of good checkpoints names it from now on (llm/ckpt/ckpt_dir.h; until its manifest is written a
// resume finds it incomplete and takes the one before).
static void ckpt_save(Ckpt* ck, DataParallel* dp, const TrainState* ts) {
    ckpt_finish(ck);
    Comm* c = ck->comm;
    ckpt_snapshot(ck, dp, ts, c->world_rank == 0, &ck->snap);
    ck->snap.verdict = ts->verdict;
    // the directory, without a manifest (a stale one from an earlier run of this step goes first)
    if (c->world_rank == 0) {
        make_dirs("--output-dir", ck->snap.dir, 1);
        char path[1200];
        snprintf(path, sizeof(path), "%s/manifest.txt", ck->snap.dir);
        remove(path);
        if (ts->verdict == CKPT_HEALTHY) ckpt_good_add(ck->out_dir, (CkptRef){ts->step, 1});
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
