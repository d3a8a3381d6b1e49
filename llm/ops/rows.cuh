// rows.cuh: moving (B, n, width) rows between buffers of different row strides: element (b, t, c) at
// base + b*bs + t*ts + c on each side (bs, ts in elements). Ring attention and Ulysses
// (llm/sharded/context_parallel.h) pack K/V out of the model's qkv, place a rank's chunks in the sequence, and
// round their FP32 gradient accumulators into dqkv with these.
//   rows_copy       dst row (b,t)[0..width) = src row (b,t)[0..width)
//   rows_store_f32  the same from an FP32 source, rounded to floatX once
//   rows_zero_f32   an FP32 buffer's rows to zero
// Each op: the CPU reference, the CUDA kernel, the launcher.
#pragma once
#include <string.h>
#include "../core/common.h"
#if LLM_HAS_KERNELS
#include "../core/cuda_utils.cuh"
#endif

// ----------------------------------------------------------------------------
// CPU reference

static void rows_copy_cpu(floatX* dst, size_t d_bs, size_t d_ts, const floatX* src, size_t s_bs, size_t s_ts,
                          int B, int n, int width) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < n; t++)
            memcpy(dst + (size_t)b * d_bs + (size_t)t * d_ts, src + (size_t)b * s_bs + (size_t)t * s_ts, (size_t)width * sizeof(floatX));
}

static void rows_store_f32_cpu(floatX* dst, size_t d_bs, size_t d_ts, const float* src, size_t s_bs, size_t s_ts,
                               int B, int n, int width) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < n; t++) {
            floatX* d = dst + (size_t)b * d_bs + (size_t)t * d_ts;
            const float* s = src + (size_t)b * s_bs + (size_t)t * s_ts;
            for (int c = 0; c < width; c++) d[c] = (floatX)s[c];
        }
}

static void rows_zero_f32_cpu(float* dst, size_t d_bs, size_t d_ts, int B, int n, int width) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < n; t++) memset(dst + (size_t)b * d_bs + (size_t)t * d_ts, 0, (size_t)width * sizeof(float));
}

// ----------------------------------------------------------------------------
// CUDA kernels

#if LLM_HAS_KERNELS
// The rows kernels: one thread per element (b, t, c) of B*n rows of width elements (c fastest, so
// consecutive threads touch consecutive elements). Each reads its element of src and writes its element of dst.
__global__ void rows_copy_kernel(floatX* dst, size_t d_bs, size_t d_ts, const floatX* src, size_t s_bs, size_t s_ts,
                                 int n, int width, size_t total) {
    size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= total) return;
    size_t bt = x / width;
    int c = (int)(x % width), t = (int)(bt % n), b = (int)(bt / n);
    dst[(size_t)b * d_bs + (size_t)t * d_ts + c] = src[(size_t)b * s_bs + (size_t)t * s_ts + c];
}
__global__ void rows_store_f32_kernel(floatX* dst, size_t d_bs, size_t d_ts, const float* src, size_t s_bs, size_t s_ts,
                                      int n, int width, size_t total) {
    size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= total) return;
    size_t bt = x / width;
    int c = (int)(x % width), t = (int)(bt % n), b = (int)(bt / n);
    dst[(size_t)b * d_bs + (size_t)t * d_ts + c] = (floatX)src[(size_t)b * s_bs + (size_t)t * s_ts + c];
}
__global__ void rows_zero_f32_kernel(float* dst, size_t d_bs, size_t d_ts, int n, int width, size_t total) {
    size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= total) return;
    size_t bt = x / width;
    int c = (int)(x % width), t = (int)(bt % n), b = (int)(bt / n);
    dst[(size_t)b * d_bs + (size_t)t * d_ts + c] = 0.0f;
}
#endif  // LLM_HAS_KERNELS

// ----------------------------------------------------------------------------
// launchers

// dst row (b,t)[0..width) = src row (b,t)[0..width)
static void rows_copy(floatX* dst, size_t d_bs, size_t d_ts, const floatX* src, size_t s_bs, size_t s_ts,
                      int B, int n, int width, cudaStream_t s) {
#if LLM_BUILD_CPU
    (void)s;
    rows_copy_cpu(dst, d_bs, d_ts, src, s_bs, s_ts, B, n, width);
#else
    size_t total = (size_t)B * n * width;
    if (total == 0) return;
    LAUNCH(rows_copy_kernel, dim3((unsigned)ceil_div_sz(total, 256)), dim3(256), 0, s, dst, d_bs, d_ts, src, s_bs, s_ts, n, width,
           total);
#endif
}

// the same from an FP32 source, rounded to floatX once
static void rows_store_f32(floatX* dst, size_t d_bs, size_t d_ts, const float* src, size_t s_bs, size_t s_ts,
                           int B, int n, int width, cudaStream_t s) {
#if LLM_BUILD_CPU
    (void)s;
    rows_store_f32_cpu(dst, d_bs, d_ts, src, s_bs, s_ts, B, n, width);
#else
    size_t total = (size_t)B * n * width;
    if (total == 0) return;
    LAUNCH(rows_store_f32_kernel, dim3((unsigned)ceil_div_sz(total, 256)), dim3(256), 0, s, dst, d_bs, d_ts, src, s_bs, s_ts, n,
           width, total);
#endif
}

// dst row (b,t)[0..width) = 0
static void rows_zero_f32(float* dst, size_t d_bs, size_t d_ts, int B, int n, int width, cudaStream_t s) {
#if LLM_BUILD_CPU
    (void)s;
    rows_zero_f32_cpu(dst, d_bs, d_ts, B, n, width);
#else
    size_t total = (size_t)B * n * width;
    if (total == 0) return;
    LAUNCH(rows_zero_f32_kernel, dim3((unsigned)ceil_div_sz(total, 256)), dim3(256), 0, s, dst, d_bs, d_ts, n, width, total);
#endif
}
