// context.h: the one per-process context of the library, and the tagged allocator.
//
// Everything the library keeps for the life of a process lives in one visible struct, `llm_ctx`:
// the compute stream, the cuBLASLt handle and its workspace, the scratch of the global-norm
// reduction, two tuning knobs the tests turn, the ops' timers and the allocator's counts. context_init() creates it
// once at the start of a program (train_gpt.cu, each test), context_free() frees it once at the end;
// models, optimizers and data-parallel policies come and go without touching it.
//
// The tagged allocator. Every allocation of model state and working memory goes through
// device_malloc(bytes, kind): device memory in the CUDA and emulated builds, host memory in the CPU
// build (where "device" memory is host memory). The kind says what the bytes are for:
//     MEM_PARAMS       the parameters (all of them, or this rank's shard)
//     MEM_GRADS        the gradients held between steps (all, or this rank's shard)
//     MEM_MOMENTS      AdamW's m and v
//     MEM_MASTER       FP32 master weights (BF16 builds)
//     MEM_ACTIVATIONS  what the forward pass keeps for the backward pass
//     MEM_COMM         communication buffers (the units gathered or reduce-scattered by ZeRO)
//     MEM_WORKSPACE    everything else: activation gradients, recompute buffers, scratch, cuBLASLt
// The allocator counts the live bytes of each kind and their peak, per process (= per rank). The
// memory report prints these counts: they are measured, not computed from layout sizes, so a stage
// that allocated a full buffer by mistake shows it. Free with device_free (the kind is remembered).
#pragma once
#include "common.h"
#include "op_profile.h"  // OpProfile, OpScope: where a CPU step's time goes
#if LLM_BUILD_CUDA
#include <cublasLt.h>
#elif LLM_BUILD_EMU
#include "cublaslt_emu.h"
#endif

typedef enum {
    MEM_PARAMS = 0,
    MEM_GRADS,
    MEM_MOMENTS,
    MEM_MASTER,
    MEM_ACTIVATIONS,
    MEM_COMM,
    MEM_WORKSPACE,
    MEM_NUM_KINDS
} MemKind;

static inline const char* mem_kind_name(int k) {
    static const char* names[MEM_NUM_KINDS] = {"parameters", "gradients", "optimizer moments", "master weights",
                                               "activations", "communication buffers", "workspace"};
    return (k >= 0 && k < MEM_NUM_KINDS) ? names[k] : "?";
}

typedef struct {
    void* ptr;
    size_t bytes;
    MemKind kind;
} MemRecord;

typedef struct {
    size_t live[MEM_NUM_KINDS];  // bytes allocated now
    size_t peak[MEM_NUM_KINDS];  // the most ever allocated at once, per kind
    size_t live_total, peak_total;
    MemRecord* recs;             // (cap) the live allocations, unordered
    int n, cap;
    size_t budget;               // --max-memory: an allocation past this many live bytes ends the run (0: none)
} MemCounts;

#if LLM_HAS_KERNELS
#ifndef cublasCheck
static inline void cublas_check(cublasStatus_t status, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "error: cuBLAS: %s (%s) (%s:%d)\n", cublasLtGetStatusName(status),
                cublasLtGetStatusString(status), file, line);
        exit(EXIT_FAILURE);
    }
}
#define cublasCheck(status) cublas_check((status), __FILE__, __LINE__)
#endif
#endif

typedef struct {
    int ready;                     // context_init has run
    cudaStream_t stream;           // the compute stream (NULL in the CPU build)
    MemCounts mem;                 // the tagged allocator's counts
    // tuning knobs (the tests run both settings)
    int matmul_fuse_gelu;          // 1: let cuBLASLt fuse GELU / dGELU into products when it can
    int attention_chunk_rows;      // > 0: attention's causal chunk height (0: the default)
    OpProfile prof;                // the ops' timers (llm/core/op_profile.h), off unless a benchmark turns them on
#if LLM_HAS_KERNELS
    cublasLtHandle_t lt;           // cuBLASLt (llm/ops/matmul.cuh)
    void* lt_workspace;            // (lt_workspace_bytes) its workspace
    size_t lt_workspace_bytes;
    float* norm_partials;          // (GLOBAL_NORM_MAX_BLOCKS) the global norm's partial sums
    int norm_grid_cap;             // blocks that fill the device once
    int fp8_gemm_fallback;         // 1: llm/precision/matmul_fp8.cuh always takes its fallback (the tests compare both)
    void* fp8_scratch;             // (fp8_scratch_bytes) matmul_fp8's FP32 temporaries, grown on demand
    size_t fp8_scratch_bytes;
#endif
} Context;

static Context llm_ctx;  // the process's context: the library's only global state

// the first line of an op's launcher: its time, less its nested scopes', to KIND while llm_ctx.prof.on
// (the CPU build, where an op has finished when its launcher returns; nothing in the kernel builds)
#if LLM_BUILD_CPU
#define OP_PROFILE(kind) OpScope op_scope_(&llm_ctx.prof, (kind))
#else
#define OP_PROFILE(kind) ((void)0)
#endif

// ----------------------------------------------------------------------------
// the tagged allocator

static void mem_note(void* p, size_t bytes, MemKind kind) {
    MemCounts* m = &llm_ctx.mem;
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 256;
        m->recs = (MemRecord*)realloc(m->recs, (size_t)m->cap * sizeof(MemRecord));
        if (m->recs == NULL) { fprintf(stderr, "error: out of host memory (%s:%d)\n", __FILE__, __LINE__); exit(EXIT_FAILURE); }
    }
    m->recs[m->n++] = (MemRecord){p, bytes, kind};
    m->live[kind] += bytes;
    m->live_total += bytes;
    if (m->live[kind] > m->peak[kind]) m->peak[kind] = m->live[kind];
    if (m->live_total > m->peak_total) m->peak_total = m->live_total;
}

// n bytes of device memory (host memory in the CPU build) for what `kind` says; contents undefined
static inline void* device_malloc_at(size_t n, MemKind kind, const char* file, int line) {
    if ((int)kind < 0 || kind >= MEM_NUM_KINDS) { fprintf(stderr, "error: device_malloc: bad kind %d (%s:%d)\n", (int)kind, file, line); exit(EXIT_FAILURE); }
    void* p = NULL;
    MemCounts* m = &llm_ctx.mem;
    if (m->budget > 0 && m->live_total + n > m->budget) {  // a device of that size would be full: say so, once
        fatal("--max-memory %.4g GiB: this rank needs %zu B more (%s) with %zu B already allocated, past the budget of %zu B "
              "(%s:%d)", (double)m->budget / (1 << 30), n, mem_kind_name(kind), m->live_total, m->budget, file, line);
    }
#if LLM_HAS_KERNELS
    cuda_check(cudaMalloc(&p, n > 0 ? n : 1), file, line);
#else
    // 64-byte aligned so that the OpenMP/BLAS loops get aligned rows
    if (posix_memalign(&p, 64, n > 0 ? ((n + 63) / 64) * 64 : 64) != 0) {
        fprintf(stderr, "error: out of host memory allocating %zu bytes (%s:%d)\n", n, file, line);
        exit(EXIT_FAILURE);
    }
#endif
    mem_note(p, n, kind);
    return p;
}
#define device_malloc(n, kind) device_malloc_at((n), (kind), __FILE__, __LINE__)

static inline void device_free_at(void* p, const char* file, int line) {
    if (p == NULL) return;
    MemCounts* m = &llm_ctx.mem;
    int i = m->n - 1;
    while (i >= 0 && m->recs[i].ptr != p) i--;
    if (i < 0) { fprintf(stderr, "error: device_free: %p was not allocated by device_malloc (%s:%d)\n", p, file, line); exit(EXIT_FAILURE); }
    m->live[m->recs[i].kind] -= m->recs[i].bytes;
    m->live_total -= m->recs[i].bytes;
    m->recs[i] = m->recs[--m->n];
#if LLM_HAS_KERNELS
    cuda_check(cudaFree(p), file, line);
#else
    free(p);
#endif
}
#define device_free(p) device_free_at((p), __FILE__, __LINE__)

static inline size_t mem_live(MemKind k) { return llm_ctx.mem.live[k]; }
static inline size_t mem_peak(MemKind k) { return llm_ctx.mem.peak[k]; }

// ----------------------------------------------------------------------------
// the context's life

#define MATMUL_LT_WORKSPACE_BYTES ((size_t)32 * 1024 * 1024)  // what Hopper's cuBLASLt kernels want
#define GLOBAL_NORM_MAX_BLOCKS 1024                            // pass-1 blocks of the global norm
#define GLOBAL_NORM_BLOCK 512                                  // threads per pass-1 block

// Once per process, before anything else of the library (the CUDA build has picked its GPU by then:
// llm/comm/comm.h's comm_init does it, so call context_init after comm_init).
static void context_init(void) {
    if (llm_ctx.ready) { fprintf(stderr, "error: context_init called twice (%s:%d)\n", __FILE__, __LINE__); exit(EXIT_FAILURE); }
    llm_ctx.matmul_fuse_gelu = 1;
    llm_ctx.attention_chunk_rows = 0;
#if LLM_HAS_KERNELS
    cudaCheck(cudaStreamCreate(&llm_ctx.stream));
    cublasCheck(cublasLtCreate(&llm_ctx.lt));
    llm_ctx.lt_workspace_bytes = MATMUL_LT_WORKSPACE_BYTES;
    llm_ctx.lt_workspace = device_malloc(llm_ctx.lt_workspace_bytes, MEM_WORKSPACE);
    int device = 0, sms = 0, threads_per_sm = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    cudaCheck(cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device));
    int cap = sms * (threads_per_sm / GLOBAL_NORM_BLOCK);
    llm_ctx.norm_grid_cap = cap < 1 ? 1 : (cap > GLOBAL_NORM_MAX_BLOCKS ? GLOBAL_NORM_MAX_BLOCKS : cap);
    llm_ctx.norm_partials = (float*)device_malloc(GLOBAL_NORM_MAX_BLOCKS * sizeof(float), MEM_WORKSPACE);
#else
    llm_ctx.stream = NULL;
#endif
    llm_ctx.ready = 1;
}

// Once, at the end. Every other allocation must be freed by then (a leak is reported).
static void context_free(void) {
    if (!llm_ctx.ready) return;
#if LLM_HAS_KERNELS
    cudaCheck(cudaStreamSynchronize(llm_ctx.stream));
    device_free(llm_ctx.norm_partials);
    device_free(llm_ctx.lt_workspace);
    if (llm_ctx.fp8_scratch != NULL) device_free(llm_ctx.fp8_scratch);
    cublasCheck(cublasLtDestroy(llm_ctx.lt));
    cudaCheck(cudaStreamDestroy(llm_ctx.stream));
#endif
    MemCounts* m = &llm_ctx.mem;
    if (m->n > 0) {
        fprintf(stderr, "error: %d allocations (%zu bytes) still live at context_free, e.g. %zu bytes of %s (%s:%d)\n",
                m->n, m->live_total, m->recs[0].bytes, mem_kind_name(m->recs[0].kind), __FILE__, __LINE__);
        exit(EXIT_FAILURE);
    }
    free(m->recs);
    memset(&llm_ctx, 0, sizeof(llm_ctx));
}

// the context must exist before a library call that uses it
static inline void context_require(const char* who) {
    if (!llm_ctx.ready) { fprintf(stderr, "error: %s: context_init() has not been called\n", who); exit(EXIT_FAILURE); }
}
