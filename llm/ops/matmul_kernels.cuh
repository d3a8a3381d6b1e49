// matmul_kernels.cuh: the CUDA kernels of llm/ops/matmul.cuh (one part of matmul.cuh; include
// matmul.cuh): the bias gradient as a deterministic two-stage column sum (matmul_dbias and its
// kernels), and the GELU / dGELU epilogue kernels that run after the product where cuBLASLt does not
// fuse them (matmul_cublaslt, llm/ops/matmul_cublaslt.cuh, launches those). Kernels first, then the launcher.
#pragma once
#include "../core/common.h"
#include "gelu.cuh"  // gelu_scalar / gelu_grad_scalar
#include "../core/cuda_utils.cuh"
#include "matmul_epilogue.h"  // MATMUL_DBIAS_MAX_SPLITS (defined in every build)

// ----------------------------------------------------------------------------
// 2. CUDA kernels
#if LLM_HAS_KERNELS

// VEC consecutive floatX, aligned to their size: VEC = MATMUL_X128 makes one 128-bit load or store
template <int VEC>
struct alignas(VEC * sizeof(floatX)) matmul_pack {
    floatX v[VEC];
};
#define MATMUL_X128 ((int)(16 / sizeof(floatX)))

// Bias gradient, stage 1: per-split column sums of dout (BT,OC) into partial (gridDim.y, OC), FP32.
// A block owns 4*VEC adjacent columns and every gridDim.y-th group of 64 rows. Inside a warp, lane =
// 8 rows x 4 column groups: each lane reads VEC columns (one 128-bit load) of every 8th row, so a warp
// reads 8 rows x 64 contiguous bytes at a time. The 8 lanes of a column group are then summed with
// shuffles, the 8 warps through shared memory, in a fixed order: the result does not depend on timing.
#define MATMUL_DBIAS_WARPS 8

template <int VEC>
__global__ void matmul_dbias_partial_kernel(float* partial /*(gridDim.y, OC)*/, const floatX* dout /*(BT,OC)*/,
                                            int BT, int OC) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int lcol = lane % 4, lrow = lane / 4;
    int col0 = (blockIdx.x * 4 + lcol) * VEC;  // with VEC > 1, OC % VEC == 0: a pack is all in or all out
    float acc[VEC];
    for (int k = 0; k < VEC; k++) acc[k] = 0.0f;
    if (col0 < OC) {
        for (int row = (blockIdx.y * MATMUL_DBIAS_WARPS + warp) * 8 + lrow; row < BT;
             row += gridDim.y * MATMUL_DBIAS_WARPS * 8) {
            matmul_pack<VEC> p = *reinterpret_cast<const matmul_pack<VEC>*>(dout + (size_t)row * OC + col0);
            for (int k = 0; k < VEC; k++) acc[k] += (float)p.v[k];
        }
    }
    // lanes of one column group differ in lane bits 2..4
    for (int k = 0; k < VEC; k++) {
        for (int off = 4; off < 32; off *= 2) acc[k] += __shfl_xor_sync(0xffffffff, acc[k], off);
    }
    __shared__ float sums[MATMUL_DBIAS_WARPS][4 * VEC];
    if (lrow == 0) {
        for (int k = 0; k < VEC; k++) sums[warp][lcol * VEC + k] = acc[k];
    }
    __syncthreads();
    if (threadIdx.x < 4 * VEC) {
        float s = 0.0f;
        for (int w = 0; w < MATMUL_DBIAS_WARPS; w++) s += sums[w][threadIdx.x];
        int col = blockIdx.x * 4 * VEC + threadIdx.x;
        if (col < OC) partial[(size_t)blockIdx.y * OC + col] = s;
    }
}

// Bias gradient, stage 2: dbias[col] += sum of the splits, in order
__global__ void matmul_dbias_finish_kernel(floatX* dbias /*(OC)*/, const float* partial /*(splits, OC)*/,
                                           int splits, int OC) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= OC) return;
    float s = 0.0f;
    for (int j = 0; j < splits; j++) s += partial[(size_t)j * OC + col];
    dbias[col] = (floatX)((float)dbias[col] + s);
}

// GELU and dGELU when cuBLASLt does not fuse them (see matmul_cublaslt). Both walk a batch of row-major
// (M,N) matrices element by element, VEC at a time (VEC divides N, the row strides and batch strides):
//   forward:   out = gelu(pre)            out, pre: (batch, M, N), row strides ldo/ldp, batch strides so/sp
//   backward:  d *= gelu'(pre)            d: (batch, M, N) with ldd/sd; pre packed (batch, M, N)
template <int VEC>
__global__ void matmul_gelu_forward_kernel(floatX* out, int ldo, size_t so, const floatX* pre, int ldp, size_t sp,
                                           int M, int N, int batch) {
    size_t e = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (e >= (size_t)batch * M * N) return;
    size_t r = e / N;
    int j = (int)(e % N), i = (int)(r % M), b = (int)(r / M);
    const floatX* src = pre + b * sp + (size_t)i * ldp + j;
    floatX* dst = out + b * so + (size_t)i * ldo + j;
    matmul_pack<VEC> p = *reinterpret_cast<const matmul_pack<VEC>*>(src);
    for (int k = 0; k < VEC; k++) p.v[k] = (floatX)gelu_scalar((float)p.v[k]);
    *reinterpret_cast<matmul_pack<VEC>*>(dst) = p;
}

template <int VEC>
__global__ void matmul_dgelu_inplace_kernel(floatX* d, int ldd, size_t sd, const floatX* pre /*packed*/,
                                            int M, int N, int batch) {
    size_t e = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (e >= (size_t)batch * M * N) return;
    size_t r = e / N;
    int j = (int)(e % N), i = (int)(r % M), b = (int)(r / M);
    floatX* dst = d + b * sd + (size_t)i * ldd + j;
    matmul_pack<VEC> g = *reinterpret_cast<const matmul_pack<VEC>*>(pre + e);
    matmul_pack<VEC> p = *reinterpret_cast<const matmul_pack<VEC>*>(dst);
    for (int k = 0; k < VEC; k++) p.v[k] = (floatX)((float)p.v[k] * gelu_grad_scalar((float)g.v[k]));
    *reinterpret_cast<matmul_pack<VEC>*>(dst) = p;
}


// dbias (OC) += column sums of dout (BT,OC); scratch: MATMUL_DBIAS_MAX_SPLITS * OC floats
static void matmul_dbias(floatX* dbias /*(OC)*/, float* scratch /*(MATMUL_DBIAS_MAX_SPLITS*OC)*/,
                         const floatX* dout /*(BT,OC)*/, int BT, int OC, cudaStream_t stream) {
    if (BT <= 0 || OC <= 0) return;
    if (scratch == NULL) {
        die_at(__FILE__, __LINE__, "matmul_backward: dbias needs dbias_scratch (MATMUL_DBIAS_MAX_SPLITS * OC floats)");
    }
    const int threads = 32 * MATMUL_DBIAS_WARPS;
    bool vec = OC % MATMUL_X128 == 0 && is_aligned16(dout);
    int cols_per_block = 4 * (vec ? MATMUL_X128 : 1);
    int gx = ceil_div(OC, cols_per_block);
    // enough blocks to fill a large GPU (~1024), each with at least 64 rows; the split depends only
    // on the shape, so the summation order (and the result) is the same on every run
    int splits = ceil_div(1024, gx);
    if (splits > ceil_div(BT, 64)) splits = ceil_div(BT, 64);
    if (splits > MATMUL_DBIAS_MAX_SPLITS) splits = MATMUL_DBIAS_MAX_SPLITS;
    if (splits < 1) splits = 1;
    dim3 grid(gx, splits);
    if (vec) {
        LAUNCH(matmul_dbias_partial_kernel<MATMUL_X128>, grid, dim3(threads), 0, stream, scratch, dout, BT, OC);
    } else {
        LAUNCH(matmul_dbias_partial_kernel<1>, grid, dim3(threads), 0, stream, scratch, dout, BT, OC);
    }
    LAUNCH(matmul_dbias_finish_kernel, dim3(ceil_div(OC, 256)), dim3(256), 0, stream, dbias, scratch, splits, OC);
}

#endif  // LLM_HAS_KERNELS
