// ckpt_dir.h: what saving and resuming sharded checkpoints share (llm/ckpt_shard.h has the format):
// the directory names, the check of a checkpoint against its manifest (sizes, FNV-1a checksums; over
// the ranks, each shard's checksum recomputed by one of them), the listing of a run's checkpoints, the
// list of last-known-good ones (good_checkpoints.txt, which the rollback of llm/health.h reads), and
// the host-side agreement among the ranks.
#pragma once
#include <sys/stat.h>
#include <fcntl.h>
#include <dirent.h>
#include "common.h"
#include "comm.h"
#include "checkpoint.h"  // AtomicFile

#define SHARD_MAGIC 20261123
#define SHARD_VERSION 1

// ----------------------------------------------------------------------------
// host-side agreement among the world's ranks (one MPI_Allreduce of an int, outside the comm ledger):
// the lowest world rank on which bad is true, or -1 when it is false on every rank

static int ckpt_first_bad(Comm* c, int bad) {
    int x = bad ? c->world_rank : INT_MAX, y = x;
#if COMM_MPI
    mpiCheck(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_MIN, c->mpi[GROUP_WORLD]));
#else
    (void)c;
#endif
    return y == INT_MAX ? -1 : y;
}

// ----------------------------------------------------------------------------
// names and checksums

static uint64_t fnv1a(uint64_t h, const void* p, size_t n) {
    const unsigned char* b = (const unsigned char*)p;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ull; }
    return h;
}
#define FNV_START 14695981039346656037ull

static void ckpt_dir_name(char* out, size_t cap, const char* out_dir, int step) { snprintf(out, cap, "%s/ckpt_%08d", out_dir, step); }

// ----------------------------------------------------------------------------
// the manifest and the shards it lists, checked

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

// the list's entries, in the order written (malloc'd; n out; NULL when there is no list)
typedef struct { int step; char path[1100]; } GoodEntry;
static GoodEntry* ckpt_good_read(const char* dir, int* n) {
    char path[1100];
    ckpt_good_path(dir, path, sizeof(path));
    *n = 0;
    FILE* f = fopen(path, "rb");
    if (f == NULL) return NULL;
    int cap = 16;
    GoodEntry* e = (GoodEntry*)mallocCheck(cap * sizeof(GoodEntry));
    char line[1200];
    while (fgets(line, sizeof(line), f) != NULL) {
        if (*n == cap) {
            cap *= 2;
            e = (GoodEntry*)realloc(e, cap * sizeof(GoodEntry));
            if (e == NULL) fatal("%s: out of host memory", path);
        }
        if (sscanf(line, "%d %1099s", &e[*n].step, e[*n].path) == 2) (*n)++;
    }
    fcloseCheck(f, path);
    return e;
}

// The newest listed checkpoint at or before step `upto` that is still whole (a state file that exists;
// a sharded checkpoint whose manifest and shards match, ckpt_verify): its step, and its path in out;
// -1 when there is none. Candidates are tried newest first (of one step, the one listed last). Every
// rank calls it (ckpt_verify is collective) and reaches the same answer.
static int ckpt_good_find(Comm* c, const char* dir, int upto, char* out, size_t cap) {
    int n;
    GoodEntry* e = ckpt_good_read(dir, &n);
    out[0] = '\0';
    int found = -1;
    while (found < 0) {
        int pick = -1;  // the newest untried entry at or before upto
        for (int i = 0; i < n; i++) if (e[i].step <= upto && e[i].step >= 0 && (pick < 0 || e[i].step >= e[pick].step)) pick = i;
        if (pick < 0) break;
        struct stat st;
        int whole = stat(e[pick].path, &st) == 0;  // (removed since: kept checkpoints rotate)
        char why[600];
        if (whole && S_ISDIR(st.st_mode)) whole = ckpt_verify(c, e[pick].path, why, sizeof(why));
        if (whole) { found = e[pick].step; snprintf(out, cap, "%s", e[pick].path); }
        e[pick].step = -1;  // tried
    }
    free(e);
    return found;
}

// rank 0: the list without its entries after step (after a rollback to step, or a resume from it:
// those checkpoints belong to a course the run no longer takes)
static void ckpt_good_drop_after(const char* dir, int step) {
    int n;
    GoodEntry* e = ckpt_good_read(dir, &n);
    if (e == NULL) return;
    char path[1100];
    ckpt_good_path(dir, path, sizeof(path));
    AtomicFile af;
    atomic_open(&af, path);
    for (int i = 0; i < n; i++) if (e[i].step <= step) fprintf(af.f, "%d %s\n", e[i].step, e[i].path);
    if (ferror(af.f)) fatal("%s: write failed: %s", af.tmp_path, strerror(errno));
    atomic_commit(&af);
    free(e);
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
