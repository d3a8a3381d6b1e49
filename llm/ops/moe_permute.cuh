// moe_permute.cuh: the tokens of a mixture-of-experts MLP moved into the layout llm/ops/moe_router.cuh
// computes (the kept assignments, expert-major, rows [offsets[e], offsets[e+1]) for expert e) and back,
// weighted by the gates (llm/model/moe.h is the layer that uses them):
//   moe_permute_forward / _backward         xp[row] = x[token]; dx[n] = sum_k dxp[row(n, k)]
//   moe_unpermute_forward / _backward       y[n] = sum_k gate yp[row(n, k)]; dyp, dgates
// The unpermute and the permute backward are written as gathers over each token's K rows (assign_row),
// not as scatter-adds over rows: the same sums, deterministic, no atomics. Each op: its CPU reference,
// its CUDA kernel, its launcher (same signature in every build).
#pragma once
#include "../core/common.h"
#include "../core/context.h"  // OP_PROFILE
#include "moe_router.cuh"     // MOE_BLOCK, moe_launch (kernel builds)

// ----------------------------------------------------------------------------
// CPU reference
// xp[row] = x[token of row], rows [0, Np)
template <class T>
static void moe_permute_forward_cpu(T* xp /*(Np,C)*/, const T* x /*(N,C)*/, const int* row_assign /*(Np)*/, int Np,
                                    int K, int C) {
    #pragma omp parallel for
    for (int r = 0; r < Np; r++) {
        int n = row_assign[r] / K;
        for (int c = 0; c < C; c++) xp[(size_t)r * C + c] = x[(size_t)n * C + c];
    }
}

// dx[n] = sum over n's kept assignments of dxp[row] (overwritten; 0 for a token whose every assignment dropped)
template <class T>
static void moe_permute_backward_cpu(T* dx /*(N,C)*/, const T* dxp /*(Np,C)*/, const int* assign_row /*(N*K)*/, int N,
                                     int K, int C) {
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++) {
                int row = assign_row[n * K + k];
                if (row >= 0) s += (float)dxp[(size_t)row * C + c];
            }
            dx[(size_t)n * C + c] = s;
        }
    }
}

// y[n] = sum over n's kept assignments of gate * yp[row] (overwritten)
template <class T>
static void moe_unpermute_forward_cpu(T* y /*(N,C)*/, const T* yp /*(Np,C)*/, const int* assign_row /*(N*K)*/,
                                      const float* gates /*(N,K)*/, int N, int K, int C) {
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++) {
                int row = assign_row[n * K + k];
                if (row >= 0) s += gates[n * K + k] * (float)yp[(size_t)row * C + c];
            }
            y[(size_t)n * C + c] = s;
        }
    }
}

// dyp[row] = gate dy[n]; dgates[a] = dy[n] . yp[row] (0 for a dropped assignment). Both overwritten.
template <class T>
static void moe_unpermute_backward_cpu(T* dyp /*(Np,C)*/, float* dgates /*(N,K)*/, const T* dy /*(N,C)*/,
                                       const T* yp /*(Np,C)*/, const int* assign_row /*(N*K)*/,
                                       const float* gates /*(N,K)*/, int N, int K, int C) {
    #pragma omp parallel for
    for (int a = 0; a < N * K; a++) {
        int row = assign_row[a], n = a / K;
        float d = 0.0f;
        if (row >= 0) {
            for (int c = 0; c < C; c++) {
                float g = (float)dy[(size_t)n * C + c];
                dyp[(size_t)row * C + c] = gates[a] * g;
                d += g * (float)yp[(size_t)row * C + c];
            }
        }
        dgates[a] = d;
    }
}

// ----------------------------------------------------------------------------
// CUDA kernels
#if LLM_HAS_KERNELS
// one thread per (row, c): xp[row, c] = x[token, c]
__global__ void moe_permute_kernel(floatX* xp, const floatX* x, const int* row_assign, int Np, int K, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)Np * C) return;
    int r = (int)(i / C), c = (int)(i % C);
    xp[i] = x[(size_t)(row_assign[r] / K) * C + c];
}

// one thread per (n, c): dx[n, c] = sum_k dxp[row(n, k), c]
__global__ void moe_permute_backward_kernel(floatX* dx, const floatX* dxp, const int* assign_row, int N, int K, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    int n = (int)(i / C), c = (int)(i % C);
    float s = 0.0f;
    for (int k = 0; k < K; k++) {
        int row = assign_row[n * K + k];
        if (row >= 0) s += (float)dxp[(size_t)row * C + c];
    }
    dx[i] = (floatX)s;
}

// one thread per (n, c): y[n, c] = sum_k gate yp[row(n, k), c]
__global__ void moe_unpermute_kernel(floatX* y, const floatX* yp, const int* assign_row, const float* gates, int N, int K,
                                     int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    int n = (int)(i / C), c = (int)(i % C);
    float s = 0.0f;
    for (int k = 0; k < K; k++) {
        int row = assign_row[n * K + k];
        if (row >= 0) s += gates[n * K + k] * (float)yp[(size_t)row * C + c];
    }
    y[i] = (floatX)s;
}

// one warp per assignment: dyp[row] = gate dy[n] (lanes over c) and dgates[a] = dy[n] . yp[row]
__global__ void moe_unpermute_backward_kernel(floatX* dyp, float* dgates, const floatX* dy, const floatX* yp,
                                              const int* assign_row, const float* gates, int N, int K, int C) {
    int a = (int)((blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (a >= N * K) return;  // whole warps leave together
    int row = assign_row[a], n = a / K;
    if (row < 0) {
        if (lane == 0) dgates[a] = 0.0f;
        return;
    }
    float g = gates[a], d = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float v = (float)dy[(size_t)n * C + c];
        dyp[(size_t)row * C + c] = (floatX)(g * v);
        d += v * (float)yp[(size_t)row * C + c];
    }
    d = warp_reduce_sum(d);
    if (lane == 0) dgates[a] = d;
}

#endif

// ----------------------------------------------------------------------------
// launchers

// xp (Np,C): row r = x's row of the token of assignment row_assign[r]
static void moe_permute_forward(floatX* xp, const floatX* x, const int* row_assign, int Np, int K, int C,
                                cudaStream_t stream) {
    OP_PROFILE(OP_MOE);
#if LLM_BUILD_CPU
    (void)stream;
    moe_permute_forward_cpu(xp, x, row_assign, Np, K, C);
#else
    moe_launch(moe_permute_kernel, (size_t)Np * C, stream, xp, x, row_assign, Np, K, C);
#endif
}

// dx (N,C), overwritten: each token's sum of its kept rows of dxp (Np,C)
static void moe_permute_backward(floatX* dx, const floatX* dxp, const int* assign_row, int N, int K, int C,
                                 cudaStream_t stream) {
    OP_PROFILE(OP_MOE);
#if LLM_BUILD_CPU
    (void)stream;
    moe_permute_backward_cpu(dx, dxp, assign_row, N, K, C);
#else
    moe_launch(moe_permute_backward_kernel, (size_t)N * C, stream, dx, dxp, assign_row, N, K, C);
#endif
}

// y (N,C), overwritten: each token's gate-weighted sum of its kept rows of yp (Np,C)
static void moe_unpermute_forward(floatX* y, const floatX* yp, const int* assign_row, const float* gates, int N, int K,
                                  int C, cudaStream_t stream) {
    OP_PROFILE(OP_MOE);
#if LLM_BUILD_CPU
    (void)stream;
    moe_unpermute_forward_cpu(y, yp, assign_row, gates, N, K, C);
#else
    moe_launch(moe_unpermute_kernel, (size_t)N * C, stream, y, yp, assign_row, gates, N, K, C);
#endif
}

// dyp (Np,C) = gate dy[token] per kept row; dgates (N,K) = dy[token] . yp[row] (0: dropped); both overwritten
static void moe_unpermute_backward(floatX* dyp, float* dgates, const floatX* dy, const floatX* yp, const int* assign_row,
                                   const float* gates, int N, int K, int C, cudaStream_t stream) {
    OP_PROFILE(OP_MOE);
#if LLM_BUILD_CPU
    (void)stream;
    moe_unpermute_backward_cpu(dyp, dgates, dy, yp, assign_row, gates, N, K, C);
#else
    moe_launch(moe_unpermute_backward_kernel, (size_t)N * K * 32, stream, dyp, dgates, dy, yp, assign_row, gates, N, K, C);
#endif
}
