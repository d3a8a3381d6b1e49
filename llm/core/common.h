// common.h: what every file of the trainer needs: which build this is, floatX, the checked
// wrappers around CUDA / cuBLAS / NCCL / MPI / file calls (each failure names file:line), the one
// kernel-launch helper, and small timers and helpers.
//
// Three builds compile the same source (see docs/architecture.md):
//   LLM_BUILD_CUDA  nvcc: real CUDA kernels, cuBLASLt, NCCL
//   LLM_BUILD_EMU   g++ -DLLM_EMU: the same kernel source run on the CPU by dev/emu/
//   LLM_BUILD_CPU   g++: the CPU reference of every op (OpenMP + OpenBLAS)
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>
#include <signal.h>
#include <stdarg.h>

#if defined(__CUDACC__)
#define LLM_BUILD_CUDA 1
#define LLM_BUILD_EMU 0
#define LLM_BUILD_CPU 0
#elif defined(LLM_EMU)
#define LLM_BUILD_CUDA 0
#define LLM_BUILD_EMU 1
#define LLM_BUILD_CPU 0
#else
#define LLM_BUILD_CUDA 0
#define LLM_BUILD_EMU 0
#define LLM_BUILD_CPU 1
#endif
// kernels (and the CUDA runtime API) exist in the CUDA build and in the emulated build
#define LLM_HAS_KERNELS (LLM_BUILD_CUDA || LLM_BUILD_EMU)

#if LLM_BUILD_CUDA
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#elif LLM_BUILD_EMU
#include "emu.h"  // CUDA subset on the CPU: __global__, threadIdx, runtime API, bf16
#else
typedef void* cudaStream_t;  // the CPU build has no streams; launchers keep one signature
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

// ----------------------------------------------------------------------------
// errors: one line each, then exit(1). The line is written with one write(2), so that under mpirun no
// other rank's output lands inside it.
//
// A line every rank sees alike (a bad flag, a missing data file, a damaged checkpoint) is printed once,
// by the lowest rank that saw it; a line only some ranks see is printed by each of them. llm_job knows
// where this process sits in the job: before MPI starts, from the launcher's environment (Open MPI,
// PMIx, MPICH, Slurm), and then only world rank 0 prints (every rank parses the same command line);
// once MPI runs (llm/comm/comm_mesh.h sets it), error_begin asks the other ranks whether a lower one prints
// the same line, and error_end, once this rank printed its line or kept quiet, lets the other ranks
// that are failing too decide and print theirs before this process exits (its exit may end the job).

typedef struct {
    int rank, size;                       // world rank and size (size 0: not known from MPI yet)
    int (*error_begin)(void* ctx, const char* line);  // set while MPI runs: 1 when this rank prints the line
    void (*error_end)(void* ctx);         // and after it printed (or not), before the exit
    void* ctx;                            // theirs (the Comm)
    volatile sig_atomic_t signal;         // the first SIGTERM / SIGINT received (llm/faults/preempt.h), 0: none
} LlmJob;
static LlmJob llm_job;  // the process's place in the job: its error lines (above), the signal it got

// this process's world rank before MPI starts, from the launcher's environment; 0 without one
static inline int job_rank_from_env(void) {
    const char* vars[4] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (int i = 0; i < 4; i++) {
        const char* v = getenv(vars[i]);
        if (v != NULL && v[0] != '\0') return atoi(v);
    }
    return 0;
}

// prints line and a newline on stderr, with one write, unless a lower rank prints the same line
static inline void job_error_line(const char* line) {
    int print = llm_job.error_begin ? llm_job.error_begin(llm_job.ctx, line) : (llm_job.size > 0 || job_rank_from_env() == 0);
    if (print) {
        size_t n = strlen(line);
        char* buf = (char*)malloc(n + 2);
        if (buf != NULL) {
            memcpy(buf, line, n);
            buf[n++] = '\n';
            fflush(stdout);
            ssize_t w = write(STDERR_FILENO, buf, n);
            (void)w;
            free(buf);
        }
    }
    if (llm_job.error_end) llm_job.error_end(llm_job.ctx);
    // before MPI runs, a quiet rank waits 0.5 s before it exits: a launcher that sees any rank exit ends the
    // others, and rank 0 ended before its write reached the launcher would print nothing at all (seen
    // once in CI: `mpirun -np 4 ... --zero 5` exited 1 with no line). A failed launch ends 0.5 s later.
    else if (!print && llm_job.size == 0) usleep(500 * 1000);
}

[[noreturn]] static inline void die_at(const char* file, int line, const char* msg) {
    char buf[8192];
    snprintf(buf, sizeof(buf), "error: %s (%s:%d)", msg, file, line);
    job_error_line(buf);
    exit(EXIT_FAILURE);
}

// fatal(fmt, ...): an error about user input (file, flag): "error: " and the message, one line, exit 1.
[[noreturn]] __attribute__((format(printf, 1, 2))) static inline void fatal(const char* fmt, ...) {
    char buf[16384] = "error: ";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + 7, sizeof(buf) - 7, fmt, ap);
    va_end(ap);
    job_error_line(buf);
    exit(EXIT_FAILURE);
}

// note(fmt, ...): a line about the run on stdout, once per job (world rank 0), e.g. what a resume found
#define note(...) do { if ((llm_job.size > 0 ? llm_job.rank : job_rank_from_env()) == 0) { printf(__VA_ARGS__); \
                        printf("\n"); fflush(stdout); } } while (0)

#if LLM_HAS_KERNELS
static inline void cuda_check(cudaError_t err, const char* file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "error: CUDA: %s (%s:%d)\n", cudaGetErrorString(err), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cudaCheck(err) cuda_check((err), __FILE__, __LINE__)
#endif

// ----------------------------------------------------------------------------
// checked C library calls

static inline FILE* fopen_check(const char* path, const char* mode, const char* file, int line) {
    FILE* f = fopen(path, mode);
    if (f == NULL) {
        fprintf(stderr, "error: cannot open %s (mode %s): %s (%s:%d)\n", path, mode,
                strerror(errno), file, line);
        exit(EXIT_FAILURE);
    }
    return f;
}
#define fopenCheck(path, mode) fopen_check(path, mode, __FILE__, __LINE__)

static inline void fread_check(void* ptr, size_t size, size_t n, FILE* f, const char* what,
                               const char* file, int line) {
    size_t got = fread(ptr, size, n, f);
    if (got != n) {
        fprintf(stderr, "error: %s: expected to read %zu bytes, found %zu (truncated file?) (%s:%d)\n",
                what, size * n, got * size, file, line);
        exit(EXIT_FAILURE);
    }
}
#define freadCheck(ptr, size, n, f, what) fread_check(ptr, size, n, f, what, __FILE__, __LINE__)

static inline void fwrite_check(const void* ptr, size_t size, size_t n, FILE* f, const char* what,
                                const char* file, int line) {
    if (fwrite(ptr, size, n, f) != n) {
        fprintf(stderr, "error: %s: write failed: %s (%s:%d)\n", what, strerror(errno), file, line);
        exit(EXIT_FAILURE);
    }
}
#define fwriteCheck(ptr, size, n, f, what) fwrite_check(ptr, size, n, f, what, __FILE__, __LINE__)

static inline void fclose_check(FILE* f, const char* what, const char* file, int line) {
    if (fclose(f) != 0) {
        fprintf(stderr, "error: %s: close failed: %s (%s:%d)\n", what, strerror(errno), file, line);
        exit(EXIT_FAILURE);
    }
}
#define fcloseCheck(f, what) fclose_check(f, what, __FILE__, __LINE__)

static inline void* malloc_check(size_t size, const char* file, int line) {
    void* p = malloc(size > 0 ? size : 1);
    if (p == NULL) {
        fprintf(stderr, "error: out of host memory allocating %zu bytes (%s:%d)\n", size, file, line);
        exit(EXIT_FAILURE);
    }
    return p;
}
#define mallocCheck(size) malloc_check(size, __FILE__, __LINE__)

// Creates directory `dir` and its missing parents, like `mkdir -p`, for the flag `flag` that named
// it (create = 0: only checks that it could). The whole path is checked before anything is created:
// a component that exists but is not a directory, or a missing one under a directory this process
// cannot write, ends the program with one line naming the flag, the path and the reason, and
// nothing is created. Check every path a run writes first, then create them.
static inline void make_dirs(const char* flag, const char* dir, int create) {
    char p[PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0) return;  // the current directory
    if (n >= sizeof(p)) fatal("%s: path '%s' is longer than %d bytes", flag, dir, PATH_MAX - 1);
    // the prefixes end at each '/' after a name, and at the end of the path
    int create_from = -1;  // index of the end of the first missing prefix, -1 if all exist
    char parent[PATH_MAX] = ".";
    if (dir[0] == '/') parent[0] = '/';
    for (size_t i = 1; i <= n && create_from < 0; i++) {
        if (i < n && !(dir[i] == '/' && dir[i - 1] != '/')) continue;
        memcpy(p, dir, i);
        p[i] = '\0';
        struct stat st;
        if (stat(p, &st) == 0) {
            if (!S_ISDIR(st.st_mode)) fatal("%s: cannot create directory '%s': '%s' exists and is not a directory", flag, dir, p);
            memcpy(parent, p, i + 1);
        } else if (errno == ENOENT) {
            create_from = (int)i;
        } else {
            fatal("%s: cannot create directory '%s': '%s': %s", flag, dir, p, strerror(errno));
        }
    }
    if (access(parent, W_OK | X_OK) != 0) {
        fatal("%s: %s '%s': '%s' is not writable: %s", flag, create_from < 0 ? "cannot write into" : "cannot create directory",
              dir, parent, strerror(errno));
    }
    if (create_from < 0 || !create) return;
    for (size_t i = (size_t)create_from; i <= n; i++) {
        if (i < n && !(dir[i] == '/' && dir[i - 1] != '/')) continue;
        memcpy(p, dir, i);
        p[i] = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) fatal("%s: cannot create directory '%s': '%s': %s", flag, dir, p, strerror(errno));
    }
}

// make_dirs for the directory part of a file path (nothing when the file is in the current directory)
static inline void make_parent_dirs(const char* flag, const char* file, int create) {
    const char* slash = strrchr(file, '/');
    if (slash == NULL) return;
    char d[PATH_MAX];
    size_t n = (size_t)(slash - file);
    if (n >= sizeof(d)) fatal("%s: path '%s' is longer than %d bytes", flag, file, PATH_MAX - 1);
    memcpy(d, file, n);
    d[n] = '\0';
    make_dirs(flag, n == 0 ? "/" : d, create);
}

// ----------------------------------------------------------------------------
// floatX: the type of parameters, activations and gradients on the device.
// The CUDA and emulated builds follow PRECISION (make PRECISION=...): BF16 (default), FP16
// (-DENABLE_FP16) or FP32 (-DENABLE_FP32). The CPU build is FP32 unless PRECISION is given on its make
// command line (ENABLE_BF16 / ENABLE_FP16: 16-bit storage of llm/core/half_cpu.h, FP32 arithmetic).

#include "half_cpu.h"  // the CPU build's 16-bit storage types (and FP32 views of floatX arrays)
#if LLM_HAS_KERNELS && defined(ENABLE_FP16)
typedef __half floatX;  // FP16 (PRECISION=FP16): 5 exponent bits, so it needs loss scaling (llm/precision/loss_scale.h)
#define PRECISION_MODE "FP16"
#elif LLM_HAS_KERNELS && !defined(ENABLE_FP32)
typedef __nv_bfloat16 floatX;
#define PRECISION_MODE "BF16"
#elif LLM_BUILD_CPU && defined(ENABLE_BF16)
typedef bf16_cpu floatX;
#define PRECISION_MODE "BF16"
#elif LLM_BUILD_CPU && defined(ENABLE_FP16)
typedef fp16_cpu floatX;
#define PRECISION_MODE "FP16"
#else
typedef float floatX;
#define PRECISION_MODE "FP32"
#define LLM_FLOATX_IS_FLOAT 1  // (defined only here: every other floatX is a 16-bit type with FP32 masters)
#endif

// ----------------------------------------------------------------------------
// the kernel launch helper: the only triple-chevron launch in the project. The emulated build defines launch_kernel
// itself (dev/emu/emu.h) to run the grid on the CPU. Use it as
//   LAUNCH(my_kernel<float, 4>, grid, block, smem_bytes, stream, arg1, arg2, ...);

#if LLM_BUILD_CUDA
template <typename... KArgs, typename... Args>
static inline void launch_kernel(const char* file, int line, void (*kernel)(KArgs...), dim3 grid,
                                 dim3 block, size_t smem, cudaStream_t stream, Args... args) {
    kernel<<<grid, block, smem, stream>>>(static_cast<KArgs>(args)...);
    cuda_check(cudaGetLastError(), file, line);
}
#endif
#if LLM_HAS_KERNELS
#define LAUNCH(...) launch_kernel(__FILE__, __LINE__, __VA_ARGS__)
#endif

// dynamic shared memory: EXTERN_SHARED(float, buf); declares `buf` as the launch's dynamic shared
// memory. C++ has no `extern __shared__`, so the emulated build supplies its own definition.
#if LLM_BUILD_CUDA
#define EXTERN_SHARED(type, name) extern __shared__ __align__(16) type name[]
#endif

// ----------------------------------------------------------------------------
// small helpers

// functions callable from host code and from kernels
#if LLM_HAS_KERNELS
#define LLM_HD __host__ __device__
#else
#define LLM_HD
#endif

// e^x in plain arithmetic, so that loops over rows vectorize on the CPU (glibc's expf is a scalar call
// of ~10-20 ns) and the same code runs in kernels. x is clamped to [-87, 88], where e^x is a normal
// float. x = n ln2 + r with n = round(x / ln2) and |r| <= ln2/2 (ln2 in two parts, Cody-Waite, so r
// keeps its accuracy), e^r by its Taylor series to r^7 (truncation < 6e-9), times 2^n through the
// exponent bits. Relative error < 2e-7 over the whole range (checked in test/test_ops_grad.cu).
LLM_HD static inline float exp_fast(float x) {
    x = x > 88.0f ? 88.0f : (x < -87.0f ? -87.0f : x);
    float n = x * 1.44269504f + 12582912.0f;  // adding 1.5 * 2^23 rounds to an integer
    n -= 12582912.0f;
    float r = x - n * 0.693145752f;           // ln2 = 0.693145752 + 1.42860677e-6
    r -= n * 1.42860677e-6f;
    float p = 1.0f + r * (1.0f + r * (1.0f / 2 + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
              r * (1.0f / 720 + r * (1.0f / 5040)))))));
    int32_t bits = ((int32_t)n + 127) << 23;  // 2^n as a float, n in [-126, 127]
    float two_n;
    memcpy(&two_n, &bits, sizeof(two_n));
    return p * two_n;
}

// inside an OpenMP parallel region: the contiguous share [*lo, *hi) of n items this thread owns
static inline void omp_thread_share(int n, int* lo, int* hi) {
#ifdef _OPENMP
    int nth = omp_get_num_threads(), ith = omp_get_thread_num();
#else
    int nth = 1, ith = 0;
#endif
    *lo = (int)((long)n * ith / nth);
    *hi = (int)((long)n * (ith + 1) / nth);
}

static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// FNV-1a 64 of n bytes, going on from h (FNV_START for a new hash): the parameters' hash of the SDC check
// (llm/faults/health.h), version-1 manifests' checksums (llm/ckpt/ckpt_dir.h), an error line's identity (llm/comm/watchdog_mpi.h)
#define FNV_START 14695981039346656037ull
static inline uint64_t fnv1a(uint64_t h, const void* p, size_t n) {
    const unsigned char* b = (const unsigned char*)p;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ull; }
    return h;
}
static inline size_t ceil_div_sz(size_t a, size_t b) { return (a + b - 1) / b; }

static inline double wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
