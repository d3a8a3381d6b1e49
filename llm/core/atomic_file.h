// atomic_file.h: writing a file so that neither a crash nor a full disk ever leaves it half-written under
// its name, and the checksum every checkpoint file carries.
//
// The writer (AtomicFile): the bytes go to <path>.tmp; each one is counted and, unless told not to,
// summed; the first failing write, flush, fsync, close or rename is remembered with its errno (and
// nothing is written after it); closing fsyncs the file before renaming it to <path> (so that after a
// crash the name holds the whole file or the old one, never a prefix), then fsyncs the directory (so
// that the rename itself survives a crash). On any failure the temporary file is removed: a full disk
// is left as it was found. The caller decides what a failure means (one line, every rank stops):
// af.why says "<file>: <what failed>: <errno text>". Two faults can be caused on purpose
// (llm/faults/inject.h): a full disk after a budget of bytes (diskfail) and a slow disk (slowdisk).
//
// The checksum (ckpt_sum): FNV-1a's step h = (h ^ w) * 1099511628211 over the little-endian 64-bit words
// of the bytes, in 4 lanes (word i goes to lane i mod 4; lane k starts at 14695981039346656037 ^ k; the
// bytes are zero-padded to a multiple of 32), then the 4 lanes and the byte count, as 40 little-endian
// bytes, folded into one FNV-1a 64 of bytes. Every step of a lane is a bijection of its state, so any
// change of one word changes the sum; the length is in it, so a truncation does too. About 6 GB/s on
// one core (the bytewise FNV-1a of the first sharded checkpoints: 0.8 GB/s), so that checking costs a
// few percent of a save (dev/bench_checkpoint.cu measures it). test/ckpt_verify.py recomputes it in
// Python, independently.
#pragma once
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include "common.h"

// ----------------------------------------------------------------------------
// the checksum

#define CKPT_FNV_PRIME 1099511628211ull

typedef struct {
    uint64_t lane[4];
    uint64_t bytes;            // bytes added so far
    unsigned char tail[32];    // bytes not yet in a whole 32-byte block
    int ntail;
} CkptSum;

static void ckpt_sum_init(CkptSum* s) {
    memset(s, 0, sizeof(*s));
    for (int k = 0; k < 4; k++) s->lane[k] = FNV_START ^ (uint64_t)k;
}

static inline void ckpt_sum_block(uint64_t* lane, const unsigned char* p) {  // 32 bytes: a word to each lane
    for (int k = 0; k < 4; k++) {
        uint64_t w;
        memcpy(&w, p + 8 * k, 8);  // (little-endian hosts: x86-64, aarch64)
        lane[k] = (lane[k] ^ w) * CKPT_FNV_PRIME;
    }
}

static void ckpt_sum_add(CkptSum* s, const void* data, size_t n) {
    const unsigned char* p = (const unsigned char*)data;
    s->bytes += n;
    if (s->ntail > 0) {  // complete the pending block first
        size_t k = 32 - (size_t)s->ntail < n ? 32 - (size_t)s->ntail : n;
        memcpy(s->tail + s->ntail, p, k);
        s->ntail += (int)k; p += k; n -= k;
        if (s->ntail < 32) return;
        ckpt_sum_block(s->lane, s->tail);
        s->ntail = 0;
    }
    uint64_t l0 = s->lane[0], l1 = s->lane[1], l2 = s->lane[2], l3 = s->lane[3];  // (in registers: ~6 GB/s)
    for (; n >= 32; p += 32, n -= 32) {
        uint64_t w[4];
        memcpy(w, p, 32);
        l0 = (l0 ^ w[0]) * CKPT_FNV_PRIME; l1 = (l1 ^ w[1]) * CKPT_FNV_PRIME;
        l2 = (l2 ^ w[2]) * CKPT_FNV_PRIME; l3 = (l3 ^ w[3]) * CKPT_FNV_PRIME;
    }
    s->lane[0] = l0; s->lane[1] = l1; s->lane[2] = l2; s->lane[3] = l3;
    memcpy(s->tail, p, n);
    s->ntail = (int)n;
}

static uint64_t ckpt_sum_final(const CkptSum* s) {
    uint64_t lane[4];
    memcpy(lane, s->lane, sizeof(lane));
    if (s->ntail > 0) {
        unsigned char last[32];
        memset(last, 0, sizeof(last));
        memcpy(last, s->tail, (size_t)s->ntail);
        ckpt_sum_block(lane, last);
    }
    unsigned char fold[40];
    memcpy(fold, lane, 32);
    memcpy(fold + 32, &s->bytes, 8);
    uint64_t h = FNV_START;
    for (int i = 0; i < 40; i++) h = (h ^ fold[i]) * CKPT_FNV_PRIME;
    return h;
}

// The checksum of a sequence of buffers, computed by a second thread while the caller writes them, or
// reads them: a save's or a load's sum then costs the thread that does the I/O about nothing
// (dev/bench_checkpoint.cu measures both ways). When the buffers are being read, the reader publishes
// how many of their bytes are in place (ready) and the summing thread follows behind it, a chunk at a
// time; abort stops it (a read that failed). If no thread can be started, the sum is computed when it is
// asked for.
#define SUM_JOB_MAX 8
#define SUM_JOB_CHUNK ((size_t)1 << 20)
typedef struct {
    const void* p[SUM_JOB_MAX];
    size_t n[SUM_JOB_MAX];
    int k, threaded;
    size_t ready;          // with follow: the bytes (of the buffers in order) in place so far (atomic)
    int follow, abort;     // follow: wait for ready; abort: stop (atomic)
    CkptSum sum;
    pthread_t th;
} SumJob;

static void* sum_job_run(void* arg) {
    SumJob* j = (SumJob*)arg;
    ckpt_sum_init(&j->sum);
    size_t base = 0;
    for (int i = 0; i < j->k; i++) {
        for (size_t off = 0; off < j->n[i];) {
            size_t len = j->n[i] - off < SUM_JOB_CHUNK ? j->n[i] - off : SUM_JOB_CHUNK;
            while (j->follow && __atomic_load_n(&j->ready, __ATOMIC_ACQUIRE) < base + off + len) {
                if (__atomic_load_n(&j->abort, __ATOMIC_ACQUIRE)) return NULL;
                usleep(20);
            }
            ckpt_sum_add(&j->sum, (const char*)j->p[i] + off, len);
            off += len;
        }
        base += j->n[i];
    }
    return NULL;
}
static void sum_job_add(SumJob* j, const void* p, size_t n) {
    if (j->k == SUM_JOB_MAX) fatal("sum_job_add: more than %d buffers (%s:%d)", SUM_JOB_MAX, __FILE__, __LINE__);
    j->p[j->k] = p; j->n[j->k] = n; j->k++;
}
// follow: the buffers are still being read (sum_job_ready says how far)
static void sum_job_start(SumJob* j, int follow) {
    j->follow = follow;
    j->threaded = pthread_create(&j->th, NULL, sum_job_run, j) == 0;
}
static void sum_job_ready(SumJob* j, size_t bytes) { __atomic_store_n(&j->ready, bytes, __ATOMIC_RELEASE); }
// the sum (after every byte was made ready); abort: the read failed, the sum is not wanted
static uint64_t sum_job_finish(SumJob* j, int abort) {
    if (abort) __atomic_store_n(&j->abort, 1, __ATOMIC_RELEASE);
    if (j->threaded) {
        int rc = pthread_join(j->th, NULL);
        if (rc != 0) fatal("pthread_join: %s (%s:%d)", strerror(rc), __FILE__, __LINE__);
    } else if (!abort) {
        j->follow = 0;
        sum_job_run(j);
    }
    return ckpt_sum_final(&j->sum);
}

// ----------------------------------------------------------------------------
// the writer

#define ATOMIC_CHUNK 4096  // bytes per write call (the slow disk's unit)

typedef struct {
    FILE* f;
    char path[1100];      // the final name
    char tmp[1120];       // the temporary name being written
    uint64_t bytes;       // written so far
    CkptSum sum;          // of the bytes written (but not of those patched)
    int summing;          // 0: the caller sums them (a SumJob)
    long fail_at;         // -1, or the byte count at which a simulated full disk stops the write
    int slow_ms;          // sleep per ATOMIC_CHUNK bytes (a slow disk)
    int failed;
    char why[1300];       // "<file>: <what>: <error>" of the first failure
} AtomicFile;

static void af_fail(AtomicFile* af, const char* what, int err) {
    if (af->failed) return;
    af->failed = 1;
    snprintf(af->why, sizeof(af->why), "%s: %s: %s", af->tmp, what, strerror(err));
}

// opens af on <path>.tmp. fail_at: -1, or the bytes after which writes fail with ENOSPC (--inject
// diskfail); slow_ms: sleep per 4 KiB (--inject slowdisk). A failure to create is remembered like any other.
static void af_open(AtomicFile* af, const char* path, long fail_at, int slow_ms) {
    memset(af, 0, sizeof(*af));
    snprintf(af->path, sizeof(af->path), "%s", path);
    snprintf(af->tmp, sizeof(af->tmp), "%s.tmp", path);
    if (strlen(path) >= sizeof(af->path)) { af_fail(af, "path too long", ENAMETOOLONG); return; }
    ckpt_sum_init(&af->sum);
    af->summing = 1;
    af->fail_at = fail_at;
    af->slow_ms = slow_ms;
    af->f = fopen(af->tmp, "wb");
    if (af->f == NULL) af_fail(af, "cannot create", errno);
}

static void af_write(AtomicFile* af, const void* buf, size_t n) {
    const char* p = (const char*)buf;
    while (n > 0 && !af->failed) {
        size_t k = n < ATOMIC_CHUNK ? n : ATOMIC_CHUNK;
        if (af->fail_at >= 0 && af->bytes + k > (uint64_t)af->fail_at) {
            size_t part = (size_t)((uint64_t)af->fail_at - af->bytes);
            if (part > 0 && fwrite(p, 1, part, af->f) == part) af->bytes += part;
            af_fail(af, "write failed (--inject diskfail)", ENOSPC);
            return;
        }
        if (fwrite(p, 1, k, af->f) != k) { af_fail(af, "write failed", errno ? errno : EIO); return; }
        if (af->summing) ckpt_sum_add(&af->sum, p, k);
        af->bytes += k;
        p += k;
        n -= k;
        if (af->slow_ms > 0) usleep((useconds_t)af->slow_ms * 1000);
    }
}

// rewrites n bytes at offset (already written: a header's checksum slots, once the rest is summed)
static void af_patch(AtomicFile* af, long offset, const void* buf, size_t n) {
    if (af->failed) return;
    if (fseek(af->f, offset, SEEK_SET) != 0 || fwrite(buf, 1, n, af->f) != n || fseek(af->f, 0, SEEK_END) != 0) {
        af_fail(af, "write failed", errno ? errno : EIO);
    }
}

// a directory fsynced: the names created, renamed or removed in it survive a crash. 0, or -1 with errno.
static int fsync_dir(const char* dir) {
    int fd = open(dir, O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd), err = errno;
    close(fd);
    errno = err;
    return rc;
}

// the directory of path, fsynced
static int fsync_dir_of(const char* path) {
    char d[1200];
    snprintf(d, sizeof(d), "%s", path);
    return fsync_dir(dirname(d));
}

// flushed to the disk, closed, renamed to its name, the directory fsynced. Returns 1, or 0 with af->why
// (the temporary file removed).
static int af_close(AtomicFile* af) {
    if (af->f != NULL) {
        if (!af->failed && (fflush(af->f) != 0 || fsync(fileno(af->f)) != 0)) af_fail(af, "flush failed", errno);
        if (fclose(af->f) != 0) af_fail(af, "close failed", errno);
        af->f = NULL;
    }
    if (!af->failed && rename(af->tmp, af->path) != 0) af_fail(af, "rename failed", errno);
    if (!af->failed && fsync_dir_of(af->path) != 0) af_fail(af, "fsync of its directory failed", errno);
    if (af->failed) remove(af->tmp);
    return !af->failed;
}

// a failed close ends this process with one line (files that one process writes alone)
static void af_close_or_die(AtomicFile* af) {
    if (!af_close(af)) fatal("%s", af->why);
}

// a whole text built with printf's format (the good list, a report): written through a temporary name
static void af_write_text(const char* path, const char* text) {
    AtomicFile af;
    af_open(&af, path, -1, 0);
    af_write(&af, text, strlen(text));
    af_close_or_die(&af);
}
