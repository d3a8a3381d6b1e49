// ckpt_dir.h: a run's checkpoints in its output directory, and the one answer to "which of them are good"
// that resuming (--resume latest), the rollback (llm/faults/health.h) and rotation (--keep-checkpoints) share.
//
// A checkpoint is named by its step: state_<step>.bin (gathered, llm/ckpt/checkpoint.h) or ckpt_<step>/
// (sharded, llm/ckpt/ckpt_shard.h), 8 digits. It is good when it is complete (a sharded one: its manifest
// written last, its shards of the manifest's sizes and checksums; a gathered one: there, and whole by
// its checksum), verified, and saved after a healthy step (its header's verdict: not inside a streak of
// bad steps, not rejected by the SDC check).
//
// The list of good checkpoints, <output-dir>/good_checkpoints.txt, one line "<step> <name>" each, names
// relative to the output directory (so that the directory can move, and a run restarted from another
// working directory, or whose output directory is given another way, finds its own checkpoints and
// never another run's): rank 0 appends a checkpoint when its save starts, if the step it follows was
// healthy (a listed checkpoint whose save never finished is found incomplete and skipped). It is the
// course the run took: a fresh run starts it empty, a run resumed from step s or rolled back to it drops
// the entries after s (they belong to a course the run no longer takes). The candidates for a resume
// or a rollback at or before a step are its entries, newest first; in a directory without a list
// (written before lists existed, or copied without it) every checkpoint it holds, with a line saying so.
// Each candidate is then verified (llm/ckpt/ckpt_resume.h): the first that passes is taken, every one that
// fails is skipped with one line saying why.
//
// Also here: the check of a sharded checkpoint against its manifest (sizes; checksums over the ranks,
// shard r's recomputed by rank r mod world, so that the job reads each shard once), the host-side
// agreement among the ranks, and rotation.
#pragma once
#include <sys/stat.h>
#include <fcntl.h>
#include <dirent.h>
#include "../core/common.h"
#include "../comm/comm.h"
#include "../core/atomic_file.h"
#include "checkpoint.h"

#define SHARD_MAGIC 20261123
#define SHARD_VERSION 4          // 4: the moe selection bias (header[41], rank 0's shard); 3: AdamW's hyperparameters (header[38..40]); 2: the verdict and ckpt_sum checksums
                                 // in the manifest; 1: before (FNV-1a of bytes)

// ----------------------------------------------------------------------------
// host-side agreement among the world's ranks (bounded by the watchdog, outside the comm ledger): the
// lowest world rank on which bad is true, or -1 when it is false on every rank

static int ckpt_first_bad(Comm* c, int bad) {
    int y = comm_host_min(c, bad ? c->world_rank : INT_MAX);
    return y == INT_MAX ? -1 : y;
}

// ----------------------------------------------------------------------------
// names

typedef struct {
    int step;
    int sharded;             // 1: ckpt_<step>/, 0: state_<step>.bin
} CkptRef;

static void ckpt_ref_name(CkptRef r, char* out, size_t cap) {
    snprintf(out, cap, r.sharded ? "ckpt_%08d" : "state_%08d.bin", r.step);
}
static void ckpt_ref_path(const char* dir, CkptRef r, char* out, size_t cap) {
    char name[64];
    ckpt_ref_name(r, name, sizeof(name));
    snprintf(out, cap, "%s/%s", dir, name);
}
static void ckpt_dir_name(char* out, size_t cap, const char* out_dir, int step) { snprintf(out, cap, "%s/ckpt_%08d", out_dir, step); }

// a checkpoint's name (as listed, or a directory entry): 1 with r filled when it is one
static int ckpt_ref_parse(const char* name, CkptRef* r) {
    int step, used = 0;
    if (sscanf(name, "ckpt_%d%n", &step, &used) == 1 && used == 13 && name[used] == '\0' && step >= 0) { r->step = step; r->sharded = 1; return 1; }
    used = 0;
    if (sscanf(name, "state_%d.bin%n", &step, &used) == 1 && used == 18 && name[used] == '\0' && step >= 0) { r->step = step; r->sharded = 0; return 1; }
    return 0;
}

// newest first; of one step, the sharded one first
static int ckpt_ref_newer(CkptRef a, CkptRef b) { return a.step != b.step ? a.step > b.step : a.sharded > b.sharded; }
static void ckpt_ref_sort(CkptRef* r, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && ckpt_ref_newer(r[j], r[j - 1]); j--) { CkptRef t = r[j]; r[j] = r[j - 1]; r[j - 1] = t; }
}

// every checkpoint of dir (both kinds), newest first (malloc'd; n out). An unreadable directory: -1 in n
// and why (a missing one is empty).
static CkptRef* ckpt_scan(const char* dir, int* n, char* why, size_t cap) {
    *n = 0;
    DIR* d = opendir(dir);
    if (d == NULL) {
        if (errno == ENOENT) return NULL;
        snprintf(why, cap, "cannot read %s: %s", dir, strerror(errno));
        *n = -1;
        return NULL;
    }
    int cap_n = 16;
    CkptRef* r = (CkptRef*)mallocCheck(cap_n * sizeof(CkptRef));
    struct dirent* de;
    while ((de = readdir(d)) != NULL) {
        CkptRef x;
        if (!ckpt_ref_parse(de->d_name, &x)) continue;
        if (*n == cap_n) { cap_n *= 2; r = (CkptRef*)realloc(r, cap_n * sizeof(CkptRef)); if (r == NULL) fatal("out of host memory"); }
        r[(*n)++] = x;
    }
    closedir(d);
    ckpt_ref_sort(r, *n);
    return r;
}

// ----------------------------------------------------------------------------
// a sharded checkpoint's manifest and the shards it lists, checked

// a complete manifest and shards that match it: 1, else 0 with why. shards/step/world out. Every
// shard's size is checked; the checksums of shards r with r % hash_parts == hash_part are recomputed
// (hash_parts 0: none; 1: all).
typedef struct { char name[64]; uint64_t bytes, hash; } ShardEntry;
static int ckpt_check_dir(const char* dir, int* step, int* world, ShardEntry** shards, char* why, size_t cap,
                          int hash_part, int hash_parts) {
    char path[1200];
    snprintf(path, sizeof(path), "%s/manifest.txt", dir);
    *shards = NULL;
    struct stat dst;
    if (stat(dir, &dst) != 0) { snprintf(why, cap, "%s", errno == ENOENT ? "not there (removed, or never saved)" : strerror(errno)); return 0; }
    FILE* f = fopen(path, "r");
    if (f == NULL) {
        if (errno == ENOENT) snprintf(why, cap, "no manifest.txt: the save did not finish");
        else snprintf(why, cap, "cannot read manifest.txt: %s", strerror(errno));
        return 0;
    }
    char line[512];
    int ok = 0, nshards = -1, got = 0, version = 0;
    *step = -1;
    ShardEntry* e = NULL;
    if (fgets(line, sizeof(line), f) && sscanf(line, "llm-ckpt manifest %d", &version) == 1 && (version == 1 || version == 2)) {
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
    } else {
        fclose(f);
        snprintf(why, cap, "manifest.txt: expected a first line \"llm-ckpt manifest 1\" or \"2\"");
        return 0;
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
            CkptSum s;
            ckpt_sum_init(&s);
            uint64_t h = FNV_START;  // (version 1: FNV-1a of the bytes)
            const size_t bufsize = 1 << 20;
            char* buf = (char*)mallocCheck(bufsize);
            size_t k;
            while ((k = fread(buf, 1, bufsize, sf)) > 0) {
                if (version == 1) h = fnv1a(h, buf, k);
                else ckpt_sum_add(&s, buf, k);
            }
            int rerr = ferror(sf);
            fclose(sf);
            free(buf);
            if (version == 2) h = ckpt_sum_final(&s);
            if (rerr) { snprintf(why, cap, "%s: read failed", e[r].name); free(e); return 0; }
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

// Every rank calls it: 1 when dir is a complete checkpoint (a manifest, and shards of its sizes and
// checksums). Each rank recomputes the checksums of its share of the shards (shard r on rank r mod
// world), so that the job reads each shard once, not once per rank. On 0, why holds the reason on the
// lowest rank that found one, "" on the others.
static int ckpt_verify(Comm* c, const char* dir, char* why, size_t cap) {
    int step, world;
    ShardEntry* e;
    int ok = ckpt_check_dir(dir, &step, &world, &e, why, cap, c->world_rank, c->world_size);
    free(e);
    int first = ckpt_first_bad(c, !ok);
    if (first < 0) return 1;
    if (first != c->world_rank) why[0] = '\0';
    return 0;
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

// ----------------------------------------------------------------------------
// the list of good checkpoints: <dir>/good_checkpoints.txt

static void ckpt_good_path(const char* dir, char* out, size_t cap) { snprintf(out, cap, "%s/good_checkpoints.txt", dir); }

// the list's entries in the order written (malloc'd; n out); NULL with n = -1 when there is no list. A
// line that names no checkpoint of this directory is left out; a path (lists written before names were
// relative) counts by its last component, the name, in this directory.
static CkptRef* ckpt_good_read(const char* dir, int* n) {
    char path[1100];
    ckpt_good_path(dir, path, sizeof(path));
    *n = -1;
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        if (errno != ENOENT) fatal("%s: cannot read: %s", path, strerror(errno));
        return NULL;
    }
    *n = 0;
    int cap = 16;
    CkptRef* e = (CkptRef*)mallocCheck(cap * sizeof(CkptRef));
    char line[1200], name[1100];
    while (fgets(line, sizeof(line), f) != NULL) {
        int step;
        CkptRef r;
        if (sscanf(line, "%d %1099s", &step, name) != 2) continue;
        const char* base = strrchr(name, '/');
        if (!ckpt_ref_parse(base ? base + 1 : name, &r) || r.step != step) continue;
        if (*n == cap) { cap *= 2; e = (CkptRef*)realloc(e, cap * sizeof(CkptRef)); if (e == NULL) fatal("%s: out of host memory", path); }
        e[(*n)++] = r;
    }
    fclose(f);
    return e;
}

// rank 0: the list replaced by these n entries
static void ckpt_good_write(const char* dir, const CkptRef* e, int n) {
    char path[1100], name[64];
    ckpt_good_path(dir, path, sizeof(path));
    char* text = NULL;
    size_t len = 0;
    FILE* mf = open_memstream(&text, &len);
    if (mf == NULL) fatal("%s: open_memstream failed: %s", path, strerror(errno));
    for (int i = 0; i < n; i++) { ckpt_ref_name(e[i], name, sizeof(name)); fprintf(mf, "%d %s\n", e[i].step, name); }
    if (fclose(mf) != 0) fatal("%s: open_memstream failed", path);
    af_write_text(path, text);
    free(text);
}

// a fresh run (not resumed): an empty list (rank 0). Checkpoints already in the directory are another
// run's: --resume latest will not take them.
static void ckpt_good_reset(const char* dir) { ckpt_good_write(dir, NULL, 0); }

// rank 0, when the save of a checkpoint after a healthy step starts
static void ckpt_good_add(const char* dir, CkptRef r) {
    char path[1100], name[64];
    ckpt_good_path(dir, path, sizeof(path));
    ckpt_ref_name(r, name, sizeof(name));
    FILE* f = fopen(path, "ab");
    if (f == NULL) fatal("%s: cannot open for appending: %s", path, strerror(errno));
    if (fprintf(f, "%d %s\n", r.step, name) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0) fatal("%s: write failed: %s", path, strerror(errno));
    fcloseCheck(f, path);
}

// rank 0: the list without its entries after step (after a rollback to step, or a resume from it: those
// checkpoints belong to a course the run no longer takes). No list: an empty one (from now on the run's
// course is written down).
static void ckpt_good_drop_after(const char* dir, int step) {
    int n;
    CkptRef* e = ckpt_good_read(dir, &n);
    int k = 0;
    for (int i = 0; i < n; i++) if (e[i].step <= step) e[k++] = e[i];
    ckpt_good_write(dir, e, k);
    free(e);
}

// The checkpoints of dir that may serve a resume or a rollback at or before step upto, newest first: the
// list's, or (no list) all the directory holds, with a note saying so. malloc'd; n out.
static CkptRef* ckpt_candidates(const char* dir, int upto, int* n) {
    CkptRef* e = ckpt_good_read(dir, n);
    if (*n < 0) {
        char why[600];
        e = ckpt_scan(dir, n, why, sizeof(why));
        if (*n < 0) fatal("--output-dir: %s", why);
        note("resume: %s has no good_checkpoints.txt: each of its %d checkpoints is a candidate, newest first", dir, *n);
    }
    int k = 0;
    for (int i = 0; i < *n; i++) if (e[i].step <= upto) e[k++] = e[i];
    *n = k;
    ckpt_ref_sort(e, k);
    for (int i = 1; i < *n; i++) {  // (a step listed twice: once)
        if (e[i].step == e[i - 1].step && e[i].sharded == e[i - 1].sharded) { memmove(e + i, e + i + 1, (size_t)(*n - i - 1) * sizeof(CkptRef)); (*n)--; i--; }
    }
    return e;
}

// ----------------------------------------------------------------------------
// rotation (--keep-checkpoints K): rank 0, after a sharded save completed. Kept: the K newest good sharded
// checkpoints (listed, with a manifest) and the K newest sharded checkpoints of any kind (the state the run is
// in, inspected or resumed by hand); the others go, and leave the list. So the newest good checkpoint stays
// (K >= 1), and so does, during a streak of bad steps, the one a rollback would need.
static void ckpt_rotate(const char* dir, int keep) {
    if (keep <= 0) return;
    int n, ng;
    char why[600];
    CkptRef* all = ckpt_scan(dir, &n, why, sizeof(why));
    CkptRef* good = ckpt_good_read(dir, &ng);
    int kept_good = 0, kept_any = 0, changed = 0;
    for (int i = 0; i < n; i++) {  // newest first
        if (!all[i].sharded) continue;
        char path[1200], mpath[1300];
        ckpt_ref_path(dir, all[i], path, sizeof(path));
        snprintf(mpath, sizeof(mpath), "%s/manifest.txt", path);
        struct stat st;
        int listed = 0;
        for (int j = 0; j < ng; j++) listed |= good[j].step == all[i].step && good[j].sharded;
        int keep_it = 0;
        if (listed && stat(mpath, &st) == 0 && kept_good < keep) { kept_good++; keep_it = 1; }
        if (kept_any < keep) { kept_any++; keep_it = 1; }
        if (keep_it) continue;
        ckpt_remove_dir(path);
        if (listed) {
            int k = 0;
            for (int j = 0; j < ng; j++) if (!(good[j].step == all[i].step && good[j].sharded)) good[k++] = good[j];
            ng = k;
            changed = 1;
        }
    }
    if (changed) ckpt_good_write(dir, good, ng);
    free(all);
    free(good);
}
