// dataloader.h: reads llm.c token shards and serves (inputs, targets) batches, the same on every
// rank, resumable at any step, optionally shuffled, and independent of how a step's samples are
// split over ranks.
//
// Shard format (docs/formats.md): int32 header[256] with magic 20240520 / version 1 / N, then N uint16
// tokens; or magic 20240801 / version 7 / N, then N uint32 tokens. File size = 1024 + N*tokensize.
//
// The data is a sequence of SAMPLES. A sample is T+1 consecutive tokens of one shard (inputs are
// the first T, targets the last T). A shard of N tokens holds S = floor((N-1)/T) samples, which
// start at token offsets 0, T, 2T, ..., (S-1)T; its last (N-1) mod T tokens are never inputs.
// An epoch is every sample of every shard: shards sorted by file name (strcmp), samples in order.
//
// Shuffle: at each epoch e the order of the shards is permuted, and the order of the samples within
// each shard is permuted, by Fisher-Yates driven by splitmix64 (Steele, Lea & Flood 2014):
//   mix(x)      = splitmix64 finalizer of x + 0x9E3779B97F4A7C15
//   epoch key   = mix(mix(seed) ^ e)
//   shard order : stream seeded with mix(epoch key)
//   shard s     : stream seeded with mix(epoch key ^ (s + 1))   (s = index in sorted order)
//   draw j in [0, i]: next() % (i + 1) for i = n-1 down to 1 (bias < n / 2^64).
// So the order depends on (seed, epoch) only, never on B, world or rank.
//
// The cursor. All ranks hold the same global cursor (epoch, sample). At each call of
// dataloader_next_batch, rank r of `world` takes the B samples cursor + r*B ... cursor + r*B + B-1
// (crossing into the next epoch where the cursor passes the end), then every rank advances the
// cursor by B*world. The B*world samples of one call are therefore the same for every (B, world)
// with the same product, and in the same order when read rank by rank. DataPosition is that cursor;
// dataloader_seek(dataloader_position(dl)) reproduces the rest of the run exactly.
//
// One shard is held in memory at a time (read whole when a sample needs it; its token ids are
// checked against vocab_size then). Every bad input ends in one line on stderr naming the flag and
// the file, what was expected and what was found, then exit(1).
#pragma once

#include "../core/common.h"
#include <glob.h>
#include <sys/stat.h>

#define DATA_MAGIC_U16 20240520   // llm.c GPT-2 shards: version 1, uint16 tokens
#define DATA_MAGIC_U32 20240801   // llm.c Llama 3 shards: version 7, uint32 tokens
#define DATA_MAGIC_EVAL 20240522  // llm.c eval (hellaswag) files: recognized only to say so
#define DATA_HEADER_INTS 256

// the resumable position: a plain struct (16 bytes) the checkpoint code stores as is
typedef struct {
    int64_t epoch;   // how many full passes over the data came before, >= 0
    int64_t sample;  // global sample cursor within the epoch, in [0, num_samples)
} DataPosition;

typedef struct {
    // configuration
    int B, T;             // samples per rank per call, tokens per sample (without the +1)
    int rank, world;      // this process and the number of processes that share the cursor
    int shuffle;          // 1: permute shards and samples per epoch
    uint64_t seed;        // shuffle seed
    int vocab_size;       // token ids must be < vocab_size (0: no check)
    char* flag;           // the command-line flag the data came from, for error messages
    // the shards, sorted by name
    int num_shards;
    char** paths;           // (num_shards) file names
    int64_t* shard_tokens;  // (num_shards) N from each header
    int* shard_tokbytes;    // (num_shards) 2 (version 1) or 4 (version 7)
    int64_t* shard_samples; // (num_shards) floor((N-1)/T)
    int64_t num_samples;    // samples per epoch, sum of shard_samples
    // the cursor, shared by all ranks
    int64_t epoch;
    int64_t cursor;
    // the order of one epoch (for the epoch the last sample looked up belonged to)
    int64_t order_epoch;    // -1: none computed yet
    int* order;             // (num_shards) shard index at each place of the epoch
    int64_t* order_start;   // (num_shards + 1) first epoch sample of each place; [num_shards] = total
    // the shard in memory and its sample permutation
    int loaded_shard;       // index into paths, -1: none
    void* tokens;           // N tokens of loaded_shard, uint16 or uint32 as in the file
    size_t tokens_bytes;    // capacity of tokens
    int perm_shard;         // (perm_shard, perm_epoch) that perm belongs to; -1: none
    int64_t perm_epoch;
    int32_t* perm;          // (shard_samples[perm_shard]) sample order within the shard
    size_t perm_cap;
    // the batch of this rank
    int32_t* inputs;   // (B, T) token ids
    int32_t* targets;  // (B, T) inputs shifted left by one: the token that follows each input
} DataLoader;

// ----------------------------------------------------------------------------
// the random numbers of the shuffle

static inline uint64_t dl_mix64(uint64_t x) {
    uint64_t z = x + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t dl_next(uint64_t* state) {  // splitmix64: next value of the stream
    *state += 0x9E3779B97F4A7C15ULL;
    uint64_t z = *state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t dl_epoch_key(uint64_t seed, int64_t epoch) {
    return dl_mix64(dl_mix64(seed) ^ (uint64_t)epoch);
}

// ----------------------------------------------------------------------------
// shard files

static int dl_cmp_str(const void* a, const void* b) {
    return strcmp(*(const char* const*)a, *(const char* const*)b);
}

static int dl_has_glob_chars(const char* s) {
    return strpbrk(s, "*?[") != NULL;
}

// opens a shard, checks its header against its size, returns the open file positioned after the
// header. Fills *n_tokens and *tokbytes. Any problem is fatal.
static FILE* dl_open_shard(const char* flag, const char* path, int64_t* n_tokens, int* tokbytes) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fatal("%s: cannot open '%s': %s", flag, path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        fatal("%s: '%s': expected a regular file, found a %s", flag, path,
              S_ISDIR(st.st_mode) ? "directory" : "special file");
    }
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        fatal("%s: cannot open '%s': %s", flag, path, strerror(errno));
    }
    int32_t header[DATA_HEADER_INTS];
    size_t got = fread(header, sizeof(int32_t), DATA_HEADER_INTS, f);
    if (got != DATA_HEADER_INTS) {
        fatal("%s: '%s': truncated header: expected %d bytes, found %lld", flag, path,
              (int)(DATA_HEADER_INTS * sizeof(int32_t)), (long long)st.st_size);
    }
    int magic = header[0], version = header[1];
    if (magic == DATA_MAGIC_EVAL) {
        fatal("%s: '%s': bad magic: expected %d (or %d), found %d (an llm.c eval file, not a token "
              "shard)", flag, path, DATA_MAGIC_U16, DATA_MAGIC_U32, magic);
    }
    if (magic != DATA_MAGIC_U16 && magic != DATA_MAGIC_U32) {
        fatal("%s: '%s': bad magic: expected %d (or %d), found %d", flag, path, DATA_MAGIC_U16,
              DATA_MAGIC_U32, magic);
    }
    int expected_version = magic == DATA_MAGIC_U16 ? 1 : 7;
    if (version != expected_version) {
        fatal("%s: '%s': bad version for magic %d: expected %d, found %d", flag, path, magic,
              expected_version, version);
    }
    int tb = magic == DATA_MAGIC_U16 ? 2 : 4;
    int64_t n = header[2];
    if (n < 0) {
        fatal("%s: '%s': bad token count in header: expected >= 0, found %lld", flag, path,
              (long long)n);
    }
    int64_t expected_size = (int64_t)sizeof(header) + n * tb;
    if ((int64_t)st.st_size != expected_size) {
        fatal("%s: '%s': file size disagrees with header: expected %lld bytes (1024 + %lld tokens * "
              "%d), found %lld", flag, path, (long long)expected_size, (long long)n, tb,
              (long long)st.st_size);
    }
    *n_tokens = n;
    *tokbytes = tb;
    return f;
}

static inline uint32_t dl_token_raw(const void* tokens, int tokbytes, int64_t i) {
    return tokbytes == 2 ? ((const uint16_t*)tokens)[i] : ((const uint32_t*)tokens)[i];
}

// every token id < vocab_size (0: no check); otherwise fatal, naming the first bad position.
// Big shards are scanned in parallel.
static void dl_check_tokens(const char* flag, const char* path, const void* tokens, int tb,
                            int64_t n, int vocab_size) {
    if (vocab_size <= 0) { return; }
    uint32_t V = (uint32_t)vocab_size;
    int64_t bad = n;
    if (tb == 2) {
        const uint16_t* t = (const uint16_t*)tokens;
        #pragma omp parallel for reduction(min:bad) if (n > (1 << 20))
        for (int64_t i = 0; i < n; i++) { if (t[i] >= V && i < bad) { bad = i; } }
    } else {
        const uint32_t* t = (const uint32_t*)tokens;
        #pragma omp parallel for reduction(min:bad) if (n > (1 << 20))
        for (int64_t i = 0; i < n; i++) { if (t[i] >= V && i < bad) { bad = i; } }
    }
    if (bad < n) {
        fatal("%s: '%s': token id out of range at token position %lld: expected < vocab size %d, "
              "found %u", flag, path, (long long)bad, vocab_size, dl_token_raw(tokens, tb, bad));
    }
}

// reads shard s whole into dl->tokens and checks every token id against vocab_size
static void dl_load_shard(DataLoader* dl, int s) {
    if (dl->loaded_shard == s) { return; }
    const char* path = dl->paths[s];
    int64_t n;
    int tb;
    FILE* f = dl_open_shard(dl->flag, path, &n, &tb);
    if (n != dl->shard_tokens[s] || tb != dl->shard_tokbytes[s]) {
        fatal("%s: '%s' changed while in use: expected %lld tokens of %d bytes, found %lld of %d",
              dl->flag, path, (long long)dl->shard_tokens[s], dl->shard_tokbytes[s],
              (long long)n, tb);
    }
    size_t bytes = (size_t)n * tb;
    if (bytes > dl->tokens_bytes) {
        free(dl->tokens);
        dl->tokens = mallocCheck(bytes);
        dl->tokens_bytes = bytes;
    }
    size_t got = fread(dl->tokens, 1, bytes, f);
    if (got != bytes) {
        fatal("%s: '%s': read failed: expected %zu bytes of tokens, found %zu", dl->flag, path,
              bytes, got);
    }
    fcloseCheck(f, path);
    dl->loaded_shard = s;
    dl_check_tokens(dl->flag, path, dl->tokens, tb, n, dl->vocab_size);
}

// all tokens of one shard as int32 (for files read whole, such as a test set of documents), checked
// like a training shard (vocab_size 0: ids unchecked). Returns a malloc'd (N) array; *n_tokens = N.
static int32_t* dataloader_read_shard(const char* path, const char* flag, int vocab_size,
                                      int64_t* n_tokens) {
    if (flag == NULL) { flag = "data"; }
    int64_t n;
    int tb;
    FILE* f = dl_open_shard(flag, path, &n, &tb);
    void* raw = mallocCheck((size_t)n * tb);
    size_t got = fread(raw, 1, (size_t)n * tb, f);
    if (got != (size_t)n * tb) {
        fatal("%s: '%s': read failed: expected %zu bytes of tokens, found %zu", flag, path,
              (size_t)n * tb, got);
    }
    fcloseCheck(f, path);
    dl_check_tokens(flag, path, raw, tb, n, vocab_size);
    int32_t* out = (int32_t*)mallocCheck((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) { out[i] = (int32_t)dl_token_raw(raw, tb, i); }
    free(raw);
    *n_tokens = n;
    return out;
}

// ----------------------------------------------------------------------------
// the order of an epoch

// makes dl->order / dl->order_start describe epoch e
static void dl_layout_epoch(DataLoader* dl, int64_t e) {
    if (dl->order_epoch == e) { return; }
    int n = dl->num_shards;
    for (int i = 0; i < n; i++) { dl->order[i] = i; }
    if (dl->shuffle) {
        uint64_t state = dl_mix64(dl_epoch_key(dl->seed, e));
        for (int i = n - 1; i > 0; i--) {
            int j = (int)(dl_next(&state) % (uint64_t)(i + 1));
            int tmp = dl->order[i]; dl->order[i] = dl->order[j]; dl->order[j] = tmp;
        }
    }
    dl->order_start[0] = 0;
    for (int i = 0; i < n; i++) {
        dl->order_start[i + 1] = dl->order_start[i] + dl->shard_samples[dl->order[i]];
    }
    dl->order_epoch = e;
}

// makes dl->perm the sample order of shard s in epoch e (shuffle only)
static void dl_permute_shard(DataLoader* dl, int s, int64_t e) {
    if (dl->perm_shard == s && dl->perm_epoch == e) { return; }
    int64_t n = dl->shard_samples[s];
    if ((size_t)n > dl->perm_cap) {
        free(dl->perm);
        dl->perm = (int32_t*)mallocCheck((size_t)n * sizeof(int32_t));
        dl->perm_cap = (size_t)n;
    }
    for (int64_t i = 0; i < n; i++) { dl->perm[i] = (int32_t)i; }
    uint64_t state = dl_mix64(dl_epoch_key(dl->seed, e) ^ (uint64_t)(s + 1));
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(dl_next(&state) % (uint64_t)(i + 1));
        int32_t tmp = dl->perm[i]; dl->perm[i] = dl->perm[j]; dl->perm[j] = tmp;
    }
    dl->perm_shard = s;
    dl->perm_epoch = e;
}

// sample i (0 <= i < num_samples) of epoch e: loads its shard, returns its first token's offset
static int64_t dl_locate(DataLoader* dl, int64_t e, int64_t i) {
    dl_layout_epoch(dl, e);
    // the place k with order_start[k] <= i < order_start[k+1] (binary search)
    int lo = 0, hi = dl->num_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (dl->order_start[mid] <= i) { lo = mid; } else { hi = mid - 1; }
    }
    int s = dl->order[lo];
    int64_t j = i - dl->order_start[lo];  // sample within the shard, in epoch order
    if (dl->shuffle) {
        dl_permute_shard(dl, s, e);
        j = dl->perm[j];
    }
    dl_load_shard(dl, s);
    return j * dl->T;
}

// ----------------------------------------------------------------------------
// the API

// pattern: a glob (or one file name) of shards; flag: the command-line flag it came from (named in
// errors); B, T: the batch this rank reads per call; rank of world: the processes sharing the data;
// shuffle, seed: see the top of this file; vocab_size: bound of the token ids (0: no check).
static void dataloader_init(DataLoader* dl, const char* pattern, const char* flag, int B, int T,
                            int rank, int world, int shuffle, uint64_t seed, int vocab_size) {
    memset(dl, 0, sizeof(*dl));
    if (flag == NULL) { flag = "data"; }
    if (pattern == NULL || pattern[0] == '\0') { fatal("%s: expected a file pattern, found none", flag); }
    if (B <= 0 || T <= 0) {
        fatal("%s: batch size B and sequence length T must be positive, found B=%d, T=%d", flag, B, T);
    }
    if (world <= 0 || rank < 0 || rank >= world) {
        fatal("%s: rank must be in [0, world), found rank=%d, world=%d", flag, rank, world);
    }
    if (vocab_size < 0) { fatal("%s: vocab size must be >= 0, found %d", flag, vocab_size); }
    size_t flen = strlen(flag) + 1;
    dl->flag = (char*)mallocCheck(flen);
    memcpy(dl->flag, flag, flen);
    dl->B = B; dl->T = T; dl->rank = rank; dl->world = world;
    dl->shuffle = shuffle ? 1 : 0; dl->seed = seed; dl->vocab_size = vocab_size;

    // the file names, sorted
    if (!dl_has_glob_chars(pattern)) {
        // one plain file name: say why it cannot be read rather than "no match"
        dl->num_shards = 1;
        dl->paths = (char**)mallocCheck(sizeof(char*));
        dl->paths[0] = (char*)mallocCheck(strlen(pattern) + 1);
        memcpy(dl->paths[0], pattern, strlen(pattern) + 1);
    } else {
        glob_t g;
        int rc = glob(pattern, 0, NULL, &g);
        if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
            fatal("%s: no files match '%s'", flag, pattern);
        }
        if (rc != 0) { fatal("%s: cannot expand '%s' (glob error %d)", flag, pattern, rc); }
        if (g.gl_pathc > (size_t)1 << 30) { fatal("%s: too many files match '%s'", flag, pattern); }
        dl->num_shards = (int)g.gl_pathc;
        dl->paths = (char**)mallocCheck(g.gl_pathc * sizeof(char*));
        for (size_t i = 0; i < g.gl_pathc; i++) {
            size_t len = strlen(g.gl_pathv[i]) + 1;
            dl->paths[i] = (char*)mallocCheck(len);
            memcpy(dl->paths[i], g.gl_pathv[i], len);
        }
        globfree(&g);
        qsort(dl->paths, dl->num_shards, sizeof(char*), dl_cmp_str);  // by bytes, not by locale
    }

    // every header now (cheap); the tokens when a shard is first needed
    int n = dl->num_shards;
    dl->shard_tokens = (int64_t*)mallocCheck(n * sizeof(int64_t));
    dl->shard_tokbytes = (int*)mallocCheck(n * sizeof(int));
    dl->shard_samples = (int64_t*)mallocCheck(n * sizeof(int64_t));
    dl->num_samples = 0;
    for (int s = 0; s < n; s++) {
        FILE* f = dl_open_shard(flag, dl->paths[s], &dl->shard_tokens[s], &dl->shard_tokbytes[s]);
        fcloseCheck(f, dl->paths[s]);
        int64_t samples = dl->shard_tokens[s] > 0 ? (dl->shard_tokens[s] - 1) / T : 0;
        if (samples < 1) {
            fatal("%s: '%s': shard too small: expected at least T+1 = %lld tokens for one sample, "
                  "found %lld", flag, dl->paths[s], (long long)T + 1, (long long)dl->shard_tokens[s]);
        }
        if (samples > INT32_MAX) { fatal("%s: '%s': too many samples in one shard", flag, dl->paths[s]); }
        dl->shard_samples[s] = samples;
        dl->num_samples += samples;
    }
    dl->order = (int*)mallocCheck(n * sizeof(int));
    dl->order_start = (int64_t*)mallocCheck((n + 1) * sizeof(int64_t));
    dl->order_epoch = -1;
    dl->loaded_shard = -1;
    dl->perm_shard = -1;
    dl->perm_epoch = -1;
    dl->inputs = (int32_t*)mallocCheck((size_t)B * T * sizeof(int32_t));
    dl->targets = (int32_t*)mallocCheck((size_t)B * T * sizeof(int32_t));
    dl->epoch = 0;
    dl->cursor = 0;
}

// samples in one epoch (all shards)
static int64_t dataloader_num_samples(const DataLoader* dl) { return dl->num_samples; }

// fills dl->inputs and dl->targets (B, T) with this rank's B samples, then advances the shared
// cursor by B*world samples
static void dataloader_next_batch(DataLoader* dl) {
    int B = dl->B, T = dl->T;
    for (int b = 0; b < B; b++) {
        int64_t g = dl->cursor + (int64_t)dl->rank * B + b;  // may run past this epoch
        int64_t e = dl->epoch + g / dl->num_samples;
        int64_t i = g % dl->num_samples;
        int64_t off = dl_locate(dl, e, i);
        int tb = dl->shard_tokbytes[dl->loaded_shard];
        int32_t* inp = dl->inputs + (size_t)b * T;
        int32_t* tgt = dl->targets + (size_t)b * T;
        for (int t = 0; t < T; t++) {
            inp[t] = (int32_t)dl_token_raw(dl->tokens, tb, off + t);
            tgt[t] = (int32_t)dl_token_raw(dl->tokens, tb, off + t + 1);
        }
    }
    int64_t adv = dl->cursor + (int64_t)B * dl->world;
    dl->epoch += adv / dl->num_samples;
    dl->cursor = adv % dl->num_samples;
}

// the m micro-batches of one optimizer step, each (B, T), into inputs and targets (m, B, T)
static void dataloader_next_step(DataLoader* dl, int m, int* inputs, int* targets) {
    size_t BT = (size_t)dl->B * dl->T;
    for (int micro = 0; micro < m; micro++) {
        dataloader_next_batch(dl);
        memcpy(inputs + micro * BT, dl->inputs, BT * sizeof(int));
        memcpy(targets + micro * BT, dl->targets, BT * sizeof(int));
    }
}

// back to the first sample of epoch 0 (a validation pass starts here each time)
static void dataloader_reset(DataLoader* dl) {
    dl->epoch = 0;
    dl->cursor = 0;
}

// the cursor; the same on every rank
static DataPosition dataloader_position(const DataLoader* dl) {
    DataPosition p;
    p.epoch = dl->epoch;
    p.sample = dl->cursor;
    return p;
}

// continues from a saved position (the B and world may differ from those that saved it)
static void dataloader_seek(DataLoader* dl, DataPosition pos) {
    if (pos.epoch < 0 || pos.sample < 0 || pos.sample >= dl->num_samples) {
        fatal("%s: cannot seek: expected epoch >= 0 and sample in [0, %lld) (samples per epoch), "
              "found epoch %lld, sample %lld (is this the data the run was saved with?)", dl->flag,
              (long long)dl->num_samples, (long long)pos.epoch, (long long)pos.sample);
    }
    dl->epoch = pos.epoch;
    dl->cursor = pos.sample;
}

static void dataloader_free(DataLoader* dl) {
    for (int s = 0; s < dl->num_shards; s++) { free(dl->paths[s]); }
    free(dl->paths);
    free(dl->shard_tokens);
    free(dl->shard_tokbytes);
    free(dl->shard_samples);
    free(dl->order);
    free(dl->order_start);
    free(dl->tokens);
    free(dl->perm);
    free(dl->inputs);
    free(dl->targets);
    free(dl->flag);
    memset(dl, 0, sizeof(*dl));
}

// Reads one batch and goes back to where it was: a bad shard is reported before anything (a log, a checkpoint)
// is written
static void dataloader_probe(DataLoader* dl) {
    DataPosition here = dataloader_position(dl);
    dataloader_next_batch(dl);
    dataloader_seek(dl, here);
}
