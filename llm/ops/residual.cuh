// residual.cuh: the residual connection of a transformer block (He et al. 2016; Vaswani et al. 2017,
// sec. 3.1): out = inp1 + inp2, elementwise. The block's output stream is its input stream plus what
// the MLP adds (x_out = residual2 + fcproj). Its backward is the identity into both inputs, so it has
// no backward op: the gradient of the stream flows on unchanged (llm/model/block.h).
#pragma once
#include "../core/common.h"
#include "../core/context.h"  // OP_PROFILE

// ----------------------------------------------------------------------------
// CPU reference

// T: float, or the CPU build's 16-bit floatX (the sum in FP32, rounded once)
template <class T>
static void residual_forward_cpu(T* out, const T* inp1, const T* inp2, size_t N) {  // (N) each
    #pragma omp parallel for simd
    for (size_t i = 0; i < N; i++) out[i] = (float)inp1[i] + (float)inp2[i];
}

// ----------------------------------------------------------------------------
// CUDA kernel
#if LLM_HAS_KERNELS
#include "../core/cuda_utils.cuh"

// one 16-byte chunk per thread; the sum is rounded once to floatX.
// Per element: reads 2 floatX, writes 1 floatX.
__global__ void residual_forward_kernel(floatX* out,          // (N)
                                        const floatX* inp1,   // (N)
                                        const floatX* inp2,   // (N)
                                        size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= N) return;
    if (i + x128::size <= N) {
        x128 a = load128cs(inp1 + i);
        x128 b = load128cs(inp2 + i);
        x128 o;
        #pragma unroll
        for (int k = 0; k < x128::size; k++) o[k] = (floatX)((float)a[k] + (float)b[k]);
        store128(out + i, o);  // read next by the LayerNorm: keep it cacheable
    } else {
        for (; i < N; i++) out[i] = (floatX)((float)inp1[i] + (float)inp2[i]);
    }
}

#define RESIDUAL_BLOCK_SIZE 512
#endif

// ----------------------------------------------------------------------------
// launcher: out = inp1 + inp2 (N values; 16-byte aligned pointers in the kernel builds)

static void residual_forward(floatX* out, const floatX* inp1, const floatX* inp2, size_t N, cudaStream_t stream) {
    OP_PROFILE(OP_RESIDUAL);
#if LLM_BUILD_CPU
    (void)stream;
    residual_forward_cpu(out, inp1, inp2, N);
#else
    if (N == 0) return;
    if (!is_aligned16(out) || !is_aligned16(inp1) || !is_aligned16(inp2)) {
        fatal("residual_forward: expected 16-byte aligned pointers (128-bit loads), found %p %p %p", (void*)out,
              (const void*)inp1, (const void*)inp2);
    }
    size_t threads = ceil_div_sz(N, x128::size);
    LAUNCH(residual_forward_kernel, dim3((unsigned)ceil_div_sz(threads, RESIDUAL_BLOCK_SIZE)), dim3(RESIDUAL_BLOCK_SIZE), 0,
           stream, out, inp1, inp2, N);
#endif
}
