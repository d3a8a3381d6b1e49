// global_norm.cuh: the sum of squares of a gradient tensor, accumulated into one FP32 value, for
// global-norm gradient clipping (Pascanu et al. 2013): norm = sqrt(sum over all tensors).
#pragma once
#include "../core/common.h"
#include "../core/context.h"

// ----------------------------------------------------------------------------
// CPU reference

static float global_norm_squared_cpu(const float* values, size_t n) {  // (n)
    // float sums over chunks of 4096 (vectorized), added up in double. A whole chunk is read as four streams of
    // 1024, each with its own sum: four runs of loads in flight at once, where one leaves the cores waiting on
    // memory (a 64 MB gradient at 2 threads: ~2.5-4 ms as one stream, ~1.7-2.1 as four, this project's 2-core
    // Xeon, 2026-11-29)
    double sum = 0.0;
    size_t chunks = (n + 4095) / 4096;
    #pragma omp parallel for reduction(+:sum)
    for (size_t c = 0; c < chunks; c++) {
        const float* x = values + c * 4096;
        size_t len = (c + 1) * 4096 < n ? 4096 : n - c * 4096;
        float part = 0.0f;
        if (len == 4096) {
            float p0 = 0.0f, p1 = 0.0f, p2 = 0.0f, p3 = 0.0f;
            #pragma omp simd reduction(+:p0, p1, p2, p3)
            for (size_t i = 0; i < 1024; i++) {
                p0 += x[i] * x[i];
                p1 += x[i + 1024] * x[i + 1024];
                p2 += x[i + 2048] * x[i + 2048];
                p3 += x[i + 3072] * x[i + 3072];
            }
            part = (p0 + p1) + (p2 + p3);
        } else {
            #pragma omp simd reduction(+:part)
            for (size_t i = 0; i < len; i++) part += x[i] * x[i];
        }
        sum += part;
    }
    return (float)sum;
}

// ----------------------------------------------------------------------------
// CUDA kernels
#if LLM_HAS_KERNELS
#include "../core/cuda_utils.cuh"

// *acc += *x / d, one thread: correctly rounded (__fdiv_rn, __fadd_rn) under --use_fast_math, so the same bits as
// the host's float arithmetic
__global__ void global_norm_add_scaled_kernel(float* acc /*(1)*/, const float* x /*(1)*/, float d) {
    *acc = __fadd_rn(*acc, __fdiv_rn(*x, d));
}

// Deterministic two-pass reduction: pass 1 runs a fixed grid (its size depends only on n and the
// device) where each block writes one partial sum; pass 2, one block, adds the partials in a fixed
// order into *out. No float atomics, so the result is the same bits on every run.
// GLOBAL_NORM_BLOCK (threads per pass-1 block) and GLOBAL_NORM_MAX_BLOCKS are set in llm/core/context.h,
// which holds the scratch of the partials (llm_ctx.norm_partials, one float per pass-1 block) and the
// grid cap (llm_ctx.norm_grid_cap: the blocks that fill the device once). One scratch serves every call:
// the calls must be ordered (one stream), as the optimizer's are.

// Pass 1: grid-stride over the 16-byte chunks of values, FP32 sum of squares per thread, one partial
// per block. The (< x128::size) elements before the first 16-byte boundary and the (< x128::size)
// after the last whole chunk are taken one by one by the first threads of the grid.
// Bytes per element: sizeof(floatX) read; per block 4 bytes written.
__global__ void __launch_bounds__(GLOBAL_NORM_BLOCK)
global_norm_partials_kernel(float* partials,        // (gridDim.x) out
                            const floatX* values,   // (n)
                            size_t n) {
    const int S = x128::size;
    size_t misalign = ((uintptr_t)values % 16) / sizeof(floatX);  // floatX is 4 or 2 bytes aligned
    size_t head = misalign == 0 ? 0 : S - misalign;
    if (head > n) head = n;
    size_t nvec = (n - head) / S;
    size_t tail = head + nvec * S;  // first element after the whole chunks
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    const floatX* body = values + head;
    float acc = 0.0f;
    for (size_t c = tid; c < nvec; c += stride) {
        x128 packed = load128cs(body + c * S);
        #pragma unroll
        for (int k = 0; k < S; k++) {
            float x = (float)packed[k];
            acc += x * x;
        }
    }
    if (tid < head) { float x = (float)values[tid]; acc += x * x; }
    if (tid < n - tail) { float x = (float)values[tail + tid]; acc += x * x; }
    float block_sum = block_reduce_sum(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = block_sum;
}

// Pass 2: one block adds the num_partials partials into *out (order fixed by the block shape).
// Bytes: 4 per partial read, 4 read and written for *out.
__global__ void __launch_bounds__(1024)
global_norm_finish_kernel(float* out,               // (1) in/out: *out += sum of partials
                          const float* partials,    // (num_partials)
                          int num_partials) {
    float acc = 0.0f;
    for (int i = threadIdx.x; i < num_partials; i += blockDim.x) acc += partials[i];
    float total = block_reduce_sum(acc);
    if (threadIdx.x == 0) *out += total;
}

#endif

// ----------------------------------------------------------------------------
#if LLM_HAS_KERNELS
// the pass-1 grid for n values: enough blocks for one 16-byte chunk per thread, at most one full wave of
// the device (also the number of partial sums the finishing block adds up)
static int global_norm_grid(size_t n) {
    size_t want = ceil_div_sz(ceil_div_sz(n, (size_t)x128::size), (size_t)GLOBAL_NORM_BLOCK);
    return want < (size_t)llm_ctx.norm_grid_cap ? (int)want : llm_ctx.norm_grid_cap;
}
#endif

// launcher: *out += sum(values^2); out is one float in device memory

static void global_norm_squared(float* out, const floatX* values, size_t n, cudaStream_t stream) {
    OP_PROFILE(OP_GRAD_NORM);
#if LLM_BUILD_CPU
    (void)stream;
    float* x = f32_in(values, n);  // (16-bit floatX: an FP32 copy; FP32: values itself)
    *out += global_norm_squared_cpu(x, n);
    f32_free(values, x);
#else
    if (n == 0) return;
    context_require("global_norm_squared");
    int grid = global_norm_grid(n);
    LAUNCH(global_norm_partials_kernel, dim3(grid), dim3(GLOBAL_NORM_BLOCK), 0, stream,
           llm_ctx.norm_partials, values, n);
    int finish_block = grid >= 1024 ? 1024 : ((grid + 31) / 32) * 32;
    LAUNCH(global_norm_finish_kernel, dim3(1), dim3(finish_block), 0, stream, out,
           (const float*)llm_ctx.norm_partials, grid);
#endif
}

// launcher: *acc += *x / d, both one float in device memory (another group's sum of squares, scaled by 1/d: the
// experts' gradients under expert parallelism, llm/parallel/dp_step.h), on the device: no host round trip
static void global_norm_add_scaled(float* acc, const float* x, float d, cudaStream_t stream) {
#if LLM_BUILD_CPU
    (void)stream;
    *acc += *x / d;
#else
    LAUNCH(global_norm_add_scaled_kernel, dim3(1), dim3(1), 0, stream, acc, x, d);
#endif
}
