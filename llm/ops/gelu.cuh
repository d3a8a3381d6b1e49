// gelu.cuh: GELU with the tanh approximation GPT-2 uses,
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// and its derivative. The MLP normally gets GELU fused into its matmul (matmul.cuh); these are the
// standalone forms.
#pragma once
#include "../core/common.h"
#include "../core/context.h"  // OP_PROFILE

#define GELU_SCALING_FACTOR 0.7978845608028654f  // sqrt(2/pi)

// ----------------------------------------------------------------------------
// CPU reference (gelu_scalar and gelu_grad_scalar also serve the kernels, here and in matmul.cuh)

// tanh(u) = 1 - 2 / (1 + e^(2u)), through exp_fast (common.h) on purpose: on the CPU it vectorizes
// (glibc's tanhf is a scalar call that made the MLP's GELU cost as much as its matmul), and in kernels
// it avoids --use_fast_math's tanh.approx.f32 (relative error up to 2^-11, a BF16-sized error even in
// FP32 builds). GELU only uses 1 + tanh and 1 - tanh^2, where this form is within ~2e-7 absolute.
LLM_HD static inline float gelu_tanh(float u) { return 1.0f - 2.0f / (1.0f + exp_fast(2.0f * u)); }

LLM_HD static inline float gelu_scalar(float x) {
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + gelu_tanh(GELU_SCALING_FACTOR * (x + cube)));
}

// d gelu(x) / dx
LLM_HD static inline float gelu_grad_scalar(float x) {
    float cube = 0.044715f * x * x * x;
    float th = gelu_tanh(GELU_SCALING_FACTOR * (x + cube));
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
}

// T: float, or the CPU build's 16-bit floatX (computed in FP32, each output rounded once)
template <class T>
static void gelu_forward_cpu(T* out, const T* inp, size_t N) {  // (N), (N)
    #pragma omp parallel for simd
    for (size_t i = 0; i < N; i++) out[i] = gelu_scalar((float)inp[i]);
}

// dinp = gelu'(inp) * dout (overwrites dinp; dinp may alias dout)
template <class T>
static void gelu_backward_cpu(T* dinp, const T* inp, const T* dout, size_t N) {
    #pragma omp parallel for simd
    for (size_t i = 0; i < N; i++) dinp[i] = gelu_grad_scalar((float)inp[i]) * (float)dout[i];
}

// ----------------------------------------------------------------------------
// CUDA kernels
#if LLM_HAS_KERNELS
#include "../core/cuda_utils.cuh"

__global__ void gelu_forward_kernel(floatX* out,        // (N)
                                    const floatX* inp,  // (N)
                                    size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= N) return;
    if (i + x128::size <= N) {
        x128 x = load128cs(inp + i);  // streaming: not read again by this pass
        x128 o;
        #pragma unroll
        for (int k = 0; k < x128::size; k++) o[k] = (floatX)gelu_scalar((float)x[k]);
        store128(out + i, o);  // the next matmul reads it: keep it cacheable
    } else {
        for (; i < N; i++) out[i] = (floatX)gelu_scalar((float)inp[i]);
    }
}

// d_in_out = gelu'(inp) * d_in_out, in place; same layout of work as the forward.
// Per element: reads 2 floatX (inp, d), writes 1 floatX.
__global__ void gelu_backward_inplace_kernel(floatX* d_in_out,   // (N)
                                             const floatX* inp,  // (N)
                                             size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= N) return;
    if (i + x128::size <= N) {
        x128 x = load128cs(inp + i);
        x128 d = load128(d_in_out + i);
        x128 r;
        #pragma unroll
        for (int k = 0; k < x128::size; k++) r[k] = (floatX)(gelu_grad_scalar((float)x[k]) * (float)d[k]);
        store128(d_in_out + i, r);
    } else {
        for (; i < N; i++) d_in_out[i] = (floatX)(gelu_grad_scalar((float)inp[i]) * (float)d_in_out[i]);
    }
}

#define GELU_BLOCK_SIZE 512

// the pointers must be 16-byte aligned (128-bit accesses); N may be anything
static void gelu_check_aligned(const char* who, const void* a, const void* b) {
    if ((((uintptr_t)a) | ((uintptr_t)b)) % 16 != 0) {
        fatal("%s: expected 16-byte aligned pointers (128-bit loads), found %p and %p", who, a, b);
    }
}
#endif

// ----------------------------------------------------------------------------
// launchers

static void gelu_forward(floatX* out, const floatX* inp, size_t N, cudaStream_t stream) {  // (N), (N)
    OP_PROFILE(OP_GELU);
#if LLM_BUILD_CPU
    (void)stream;
    gelu_forward_cpu(out, inp, N);
#else
    if (N == 0) return;
    gelu_check_aligned("gelu_forward", out, inp);
    size_t threads = ceil_div_sz(N, x128::size);
    LAUNCH(gelu_forward_kernel, dim3((unsigned)ceil_div_sz(threads, GELU_BLOCK_SIZE)), dim3(GELU_BLOCK_SIZE), 0,
           stream, out, inp, N);
#endif
}

// d_in_out: dout on entry, dinp = gelu'(inp) * dout on exit
static void gelu_backward_inplace(floatX* d_in_out, const floatX* inp, size_t N, cudaStream_t stream) {
    OP_PROFILE(OP_GELU);
#if LLM_BUILD_CPU
    (void)stream;
    gelu_backward_cpu(d_in_out, inp, d_in_out, N);
#else
    if (N == 0) return;
    gelu_check_aligned("gelu_backward_inplace", d_in_out, inp);
    size_t threads = ceil_div_sz(N, x128::size);
    LAUNCH(gelu_backward_inplace_kernel, dim3((unsigned)ceil_div_sz(threads, GELU_BLOCK_SIZE)), dim3(GELU_BLOCK_SIZE),
           0, stream, d_in_out, inp, N);
#endif
}
