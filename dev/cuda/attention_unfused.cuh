// dev/cuda/attention_unfused.cuh: the CUDA build's attention before the fused kernels (version 1 of
// dev/cuda/attention.cu's whole-attention ladder; llm/ops/attention.cuh holds version 2, the fused kernels
// the model runs). Each step goes through global memory: the (B,NH,T,T) scores are written by a batched
// cuBLASLt product, read and rewritten by a softmax kernel, and kept for the backward, which rebuilds
// the softmax's gradient in the same (B,NH,T,T) matrix. Kept as the baseline the benchmark measures the
// fused kernels against, and as a second, independent implementation the check compares them with.
#pragma once
#include <float.h>
#include "../../llm/core/common.h"
#include "../../llm/core/context.h"
#include "../../llm/core/cuda_utils.cuh"
#include "../../llm/ops/matmul.cuh"  // matmul_batched: the products QK^T, AV and their gradients

// CUDA kernels
//
// The CUDA path runs attention as separate steps, each through global memory:
//   forward:  permute qkv -> q,k,v (B,NH,T,hs);  preatt = q k^T (cuBLASLt, into att);
//             softmax in place (att);  y = att v (cuBLASLt, into scratch);  unpermute y -> out
//   backward: dy = unpermute^-1(dout);  datt = dy v^T;  dv = att^T dy;  softmax backward in place
//             (datt -> dpreatt);  dq = dpreatt k;  dk = dpreatt^T q;  permute^-1 dq,dk,dv -> dinp
// The causal products skip the blocks above the diagonal: rows are cut into chunks of
// attention_chunk_rows(T) rows, and chunk [r0,r1) only involves key positions [0,r1) (see
// attention_for_chunks). For T = 1024 in 4 chunks that is 10/16 of the full products' FLOPs and bytes.
//
// What the fused kernels (llm/ops/attention.cuh) save: every tensor of shape (B,NH,T,T) here crosses
// global memory several times per layer. In BF16, GPT-2 124M at B = 64, T = 1024 (NH = 12, C = 768):
// one (B,NH,T,T) tensor is 64*12*1024^2*2 B = 1.61 GB, against 0.40 GB for q, k, v and y together.
// Per layer, in units of one such tensor, with the products cut in 4 chunks (each touching 10/16 of
// the matrix) and the softmax passes reading the lower half and writing whole rows:
//   forward:  QK^T writes 0.625, softmax reads 0.5 and writes 1, AV reads 0.625          2.75 = 4.4 GB
//   backward: dy v^T writes 0.625, att^T dy reads 0.625, softmax backward reads 0.5 + 0.5
//             (att, datt) and writes 1, dpre k and dpre^T q read 0.625 each               4.5 = 7.2 GB
// about 11.7 GB per layer: 3.5 ms at H100 SXM's 3.35 TB/s, 42 ms per step for 12 layers, plus
// 12 x 1.61 = 19 GB of memory to keep att for the backward.

// 1. permutes. "tokens" is the layout of the model, (B,T,nmat*C) with head h of matrix m in channels
// [m*C + h*hs, m*C + (h+1)*hs); "heads" is nmat matrices of (B,NH,T,hs), one after the other, the
// layout the batched products want. One thread moves VEC consecutive elements of one head (VEC
// divides hs; VEC = x128::size: one 128-bit load and store). The index runs over the heads layout,
// so consecutive threads write (permute) or read (unpermute) consecutive addresses there, and hs/VEC
// consecutive threads cover one head's contiguous slice of a token row on the other side.

// offset in the tokens layout of element idx of the heads layout (idx < nmat*B*NH*T*hs)
__device__ __forceinline__ size_t attention_token_offset(size_t idx, int B, int T, int NH, int hs, int nmat) {
    int d = (int)(idx % hs);
    size_t r = idx / hs;
    int t = (int)(r % T);
    r /= T;
    int h = (int)(r % NH);
    r /= NH;
    int b = (int)(r % B);
    int m = (int)(r / B);
    size_t C = (size_t)NH * hs;
    return ((size_t)b * T + t) * nmat * C + m * C + (size_t)h * hs + d;
}

template <int VEC>
__device__ __forceinline__ void attention_copy(floatX* dst, const floatX* src) {
    if constexpr (VEC == x128::size) {
        store128(dst, load128(src));
    } else {
        for (int k = 0; k < VEC; k++) dst[k] = src[k];
    }
}

// tokens (B,T,nmat*C) -> heads nmat x (B,NH,T,hs)
template <int VEC>
__global__ void attention_permute_kernel(floatX* heads /*(nmat,B,NH,T,hs)*/, const floatX* tokens /*(B,T,nmat*C)*/,
                                         int B, int T, int NH, int hs, int nmat) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (idx >= (size_t)nmat * B * NH * T * hs) return;
    attention_copy<VEC>(heads + idx, tokens + attention_token_offset(idx, B, T, NH, hs, nmat));
}

// heads nmat x (B,NH,T,hs) -> tokens (B,T,nmat*C)
template <int VEC>
__global__ void attention_unpermute_kernel(floatX* tokens /*(B,T,nmat*C)*/, const floatX* heads /*(nmat,B,NH,T,hs)*/,
                                           int B, int T, int NH, int hs, int nmat) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (idx >= (size_t)nmat * B * NH * T * hs) return;
    attention_copy<VEC>(tokens + attention_token_offset(idx, B, T, NH, hs, nmat), heads + idx);
}

// 2. the causal softmax and its backward: one warp per row (b,h,t) of a (B,NH,T,T) tensor, FP32 math
// whatever floatX is. Lane l handles the chunks l, l+32, ... of VEC columns (VEC = x128::size when T
// is a multiple of it: one 128-bit access per chunk; else 1). Only columns 0..t are read; columns
// t+1..T-1 are written with 0 and never read (the chunked products leave some of them unwritten).
// A block of ATTENTION_SOFTMAX_WARPS warps takes that many consecutive rows t of one head; blocks
// run from the last (longest) rows to the first, heads innermost, so the long rows start early and
// the short ones fill the tail of the grid.
#define ATTENTION_SOFTMAX_WARPS 8

template <int VEC>
__device__ __forceinline__ void attention_load(float (&x)[VEC], const floatX* p) {
    if constexpr (VEC == x128::size) {
        x128 v = load128(p);
        for (int k = 0; k < VEC; k++) x[k] = (float)v[k];
    } else {
        for (int k = 0; k < VEC; k++) x[k] = (float)p[k];
    }
}

template <int VEC>
__device__ __forceinline__ void attention_store(floatX* p, const float (&x)[VEC]) {
    if constexpr (VEC == x128::size) {
        x128 v;
        for (int k = 0; k < VEC; k++) v[k] = (floatX)x[k];
        store128(p, v);
    } else {
        for (int k = 0; k < VEC; k++) p[k] = (floatX)x[k];
    }
}

// the row this warp owns: its (b,h) index and t; false if t is past the end (last block of a head)
__device__ __forceinline__ bool attention_softmax_row(int BNH, int T, int* bh, int* t) {
    int groups = (T + ATTENTION_SOFTMAX_WARPS - 1) / ATTENTION_SOFTMAX_WARPS;
    int group = groups - 1 - (int)(blockIdx.x / BNH);
    *bh = (int)(blockIdx.x % BNH);
    *t = group * ATTENTION_SOFTMAX_WARPS + (int)(threadIdx.x / 32);
    return *t < T;
}

// att (B,NH,T,T): in: preatt = q k^T (unscaled) on and below the diagonal; out: the probabilities
// softmax_{t2 <= t}(scale * preatt[t, t2]) on and below, exactly 0 above.
// One pass with an online max: each lane keeps a running max m and a sum s of exp(x - m) over its
// columns, rescaling s when m grows (once per chunk); the lanes' (m, s) are then merged.
template <int VEC>
__global__ void attention_softmax_forward_kernel(floatX* att /*(B,NH,T,T)*/, int BNH, int T, float scale) {
    int bh, t;
    if (!attention_softmax_row(BNH, T, &bh, &t)) return;
    int lane = threadIdx.x % 32;
    floatX* row = att + ((size_t)bh * T + t) * T;
    int nvalid = t / VEC + 1;  // chunks holding columns 0..t
    float m = -FLT_MAX, s = 0.0f;
    for (int c = lane; c < nvalid; c += 32) {
        float x[VEC];
        attention_load<VEC>(x, row + c * VEC);
        float cmax = -FLT_MAX;
        for (int k = 0; k < VEC; k++) {
            x[k] = c * VEC + k <= t ? x[k] * scale : -FLT_MAX;
            cmax = fmaxf(cmax, x[k]);
        }
        if (cmax > m) {
            s *= expf(m - cmax);
            m = cmax;
        }
        for (int k = 0; k < VEC; k++) s += c * VEC + k <= t ? expf(x[k] - m) : 0.0f;
    }
    float row_max = warp_reduce_max(m);
    float sum = warp_reduce_sum(s * expf(m - row_max));  // a lane with no columns has s = 0
    float inv_sum = 1.0f / sum;
    for (int c = lane; c < T / VEC; c += 32) {
        float p[VEC];
        if (c < nvalid) {
            attention_load<VEC>(p, row + c * VEC);
            for (int k = 0; k < VEC; k++) p[k] = c * VEC + k <= t ? expf(p[k] * scale - row_max) * inv_sum : 0.0f;
        } else {
            for (int k = 0; k < VEC; k++) p[k] = 0.0f;
        }
        attention_store<VEC>(row + c * VEC, p);
    }
}

// datt (B,NH,T,T): in: d loss / d att on and below the diagonal; out: d loss / d preatt =
// scale * att * (datt - sum_t2 att[t2] datt[t2]) on and below, exactly 0 above.
template <int VEC>
__global__ void attention_softmax_backward_kernel(floatX* datt /*(B,NH,T,T)*/, const floatX* att /*(B,NH,T,T)*/,
                                                  int BNH, int T, float scale) {
    int bh, t;
    if (!attention_softmax_row(BNH, T, &bh, &t)) return;
    int lane = threadIdx.x % 32;
    size_t off = ((size_t)bh * T + t) * T;
    floatX* drow = datt + off;
    const floatX* arow = att + off;
    int nvalid = t / VEC + 1;
    float dot = 0.0f;
    for (int c = lane; c < nvalid; c += 32) {
        float a[VEC], d[VEC];
        attention_load<VEC>(a, arow + c * VEC);
        attention_load<VEC>(d, drow + c * VEC);
        for (int k = 0; k < VEC; k++) dot += c * VEC + k <= t ? a[k] * d[k] : 0.0f;
    }
    dot = warp_reduce_sum(dot);
    for (int c = lane; c < T / VEC; c += 32) {
        float g[VEC];
        if (c < nvalid) {
            float a[VEC];
            attention_load<VEC>(a, arow + c * VEC);
            attention_load<VEC>(g, drow + c * VEC);
            for (int k = 0; k < VEC; k++) g[k] = c * VEC + k <= t ? a[k] * (g[k] - dot) * scale : 0.0f;
        } else {
            for (int k = 0; k < VEC; k++) g[k] = 0.0f;
        }
        attention_store<VEC>(drow + c * VEC, g);
    }
}

// ----------------------------------------------------------------------------
// kernel launchers


// one relayout between tokens (B,T,nmat*C) and heads nmat x (B,NH,T,hs), either way: the 128-bit
// kernel when a head's row and both pointers allow it, else the scalar one
typedef void (*AttentionRelayoutKernel)(floatX*, const floatX*, int, int, int, int, int);
static void attention_relayout(AttentionRelayoutKernel vec_kernel, AttentionRelayoutKernel scalar_kernel, floatX* dst,
                               const floatX* src, int B, int T, int NH, int hs, int nmat, cudaStream_t stream) {
    size_t n = (size_t)nmat * B * NH * T * hs;
    if (n == 0) return;
    const int threads = 256, V = x128::size;
    if (hs % V == 0 && is_aligned16(dst) && is_aligned16(src)) {
        LAUNCH(vec_kernel, dim3((unsigned)ceil_div_sz(n / V, threads)), dim3(threads), 0, stream, dst, src, B, T, NH, hs, nmat);
    } else {
        LAUNCH(scalar_kernel, dim3((unsigned)ceil_div_sz(n, threads)), dim3(threads), 0, stream, dst, src, B, T, NH, hs, nmat);
    }
}

// tokens (B,T,nmat*C) -> heads nmat x (B,NH,T,hs)
static void attention_to_heads(floatX* heads, const floatX* tokens, int B, int T, int NH, int hs, int nmat,
                               cudaStream_t stream) {
    attention_relayout(attention_permute_kernel<x128::size>, attention_permute_kernel<1>, heads, tokens, B, T, NH, hs,
                       nmat, stream);
}

// heads nmat x (B,NH,T,hs) -> tokens (B,T,nmat*C)
static void attention_to_tokens(floatX* tokens, const floatX* heads, int B, int T, int NH, int hs, int nmat,
                                cudaStream_t stream) {
    attention_relayout(attention_unpermute_kernel<x128::size>, attention_unpermute_kernel<1>, tokens, heads, B, T, NH,
                       hs, nmat, stream);
}

static void attention_softmax_forward(floatX* att /*(B,NH,T,T)*/, int BNH, int T, float scale, cudaStream_t stream) {
    if (BNH == 0 || T == 0) return;
    dim3 grid((unsigned)(ceil_div(T, ATTENTION_SOFTMAX_WARPS) * BNH)), block(32 * ATTENTION_SOFTMAX_WARPS);
    if (T % x128::size == 0 && is_aligned16(att)) {
        LAUNCH(attention_softmax_forward_kernel<x128::size>, grid, block, 0, stream, att, BNH, T, scale);
    } else {
        LAUNCH(attention_softmax_forward_kernel<1>, grid, block, 0, stream, att, BNH, T, scale);
    }
}

static void attention_softmax_backward(floatX* datt /*(B,NH,T,T)*/, const floatX* att /*(B,NH,T,T)*/, int BNH, int T,
                                       float scale, cudaStream_t stream) {
    if (BNH == 0 || T == 0) return;
    dim3 grid((unsigned)(ceil_div(T, ATTENTION_SOFTMAX_WARPS) * BNH)), block(32 * ATTENTION_SOFTMAX_WARPS);
    if (T % x128::size == 0 && is_aligned16(datt) && is_aligned16(att)) {
        LAUNCH(attention_softmax_backward_kernel<x128::size>, grid, block, 0, stream, datt, att, BNH, T, scale);
    } else {
        LAUNCH(attention_softmax_backward_kernel<1>, grid, block, 0, stream, datt, att, BNH, T, scale);
    }
}

// Rows per chunk of the causal products. Query rows [r0,r1) only see keys [0,r1), so chunk i of n
// computes (r1-r0) x r1 of the T x T scores instead of T x T: (n+1)/(2n) of the work in total. More
// chunks skip more but make smaller products, each one more cuBLASLt call: 4 chunks from T = 1024,
// 2 from T = 512, none below. Chunk boundaries are multiples of 8 rows, so every chunk's pointers
// stay 16-byte aligned. llm_ctx.attention_chunk_rows > 0 forces that many rows per chunk (tests).

static int attention_chunk_rows(int T) {
    if (llm_ctx.attention_chunk_rows > 0) return llm_ctx.attention_chunk_rows;
    int n = T >= 1024 ? 4 : (T >= 512 ? 2 : 1);
    return n == 1 ? T : ceil_div(ceil_div(T, n), 8) * 8;
}

// calls f(r0, r1) for each chunk [r0, r1) of the T query rows
template <class F>
static void attention_for_chunks(int T, F f) {
    int R = attention_chunk_rows(T);
    for (int r0 = 0; r0 < T; r0 += R) f(r0, r0 + R < T ? r0 + R : T);
}

// ----------------------------------------------------------------------------
// the whole attention, unfused
// qkvr (B,T,3C) is scratch for the permuted q,k,v of the CUDA path (kept for the backward);
// att (B,NH,T,T) keeps the softmax probabilities for the backward.

// what both launchers start from: q, k, v are (B,NH,T,hs) each, one after the other in qkvr (B,T,3C)
// (and their gradients likewise in dqkvr); every product is batched over the B*NH heads
typedef struct {
    int hs, BNH;              // head size; heads, the batch count of the products
    float scale;              // the softmax's 1/sqrt(hs)
    size_t BTC, sTh, sTT;     // elements of one of q, k, v; a head's stride in them (T x hs) and in att (T x T)
    const floatX *q, *k, *v;  // in qkvr
} AttentionUnfused;
static AttentionUnfused attention_unfused_start(const floatX* qkvr, int B, int T, int C, int NH) {
    AttentionUnfused a;
    a.hs = C / NH, a.BNH = B * NH;
    a.scale = 1.0f / sqrtf((float)a.hs);
    a.BTC = (size_t)B * T * C, a.sTh = (size_t)T * a.hs, a.sTT = (size_t)T * T;
    a.q = qkvr, a.k = qkvr + a.BTC, a.v = qkvr + 2 * a.BTC;
    return a;
}

// scratch (B,T,C) is free for the kernels' use during the forward (e.g. the (B,NH,T,hs) output of AV)
static void attention_forward_unfused(floatX* out,        // (B,T,C)
                                      floatX* qkvr,       // (B,T,3C)
                                      floatX* att,        // (B,NH,T,T)
                                      floatX* scratch,    // (B,T,C)
                                      const floatX* inp,  // (B,T,3C)
                              int B, int T, int C, int NH, cudaStream_t stream) {
    // q, k, v: (B,NH,T,hs) each, one after the other in qkvr; y: (B,NH,T,hs) in scratch
    AttentionUnfused a = attention_unfused_start(qkvr, B, T, C, NH);
    const int hs = a.hs, BNH = a.BNH;
    const size_t sTh = a.sTh, sTT = a.sTT;
    floatX* y = scratch;
    attention_to_heads(qkvr, inp, B, T, NH, hs, 3, stream);
    // preatt[r0:r1, 0:r1] (in att) = q[r0:r1] @ k[0:r1]^T, per (b,h); the rest of att is left alone
    attention_for_chunks(T, [&](int r0, int r1) {
        matmul_batched(att + (size_t)r0 * T, a.q + (size_t)r0 * hs, a.k, NULL, NULL, r1 - r0, r1, hs, false, true,
                       hs, hs, T, BNH, sTh, sTh, sTT, 1.0f, 0.0f, MATMUL_EPILOGUE_NONE, stream);
    });
    attention_softmax_forward(att, BNH, T, a.scale, stream);
    // y[r0:r1] = att[r0:r1, 0:r1] @ v[0:r1] (att is 0 past the diagonal, so the sum stops at r1)
    attention_for_chunks(T, [&](int r0, int r1) {
        matmul_batched(y + (size_t)r0 * hs, att + (size_t)r0 * T, a.v, NULL, NULL, r1 - r0, hs, r1, false, false,
                       T, hs, hs, BNH, sTT, sTh, sTh, 1.0f, 0.0f, MATMUL_EPILOGUE_NONE, stream);
    });
    attention_to_tokens(out, y, B, T, NH, hs, 1, stream);
}

// dinp is overwritten; dqkvr (B,T,3C), datt (B,NH,T,T) and scratch (B,T,C) are scratch buffers
static void attention_backward_unfused(floatX* dinp,        // (B,T,3C)
                                       floatX* dqkvr,       // (B,T,3C)
                                       floatX* datt,        // (B,NH,T,T)
                                       floatX* scratch,     // (B,T,C)
                                       const floatX* dout,  // (B,T,C)
                                       const floatX* inp,   // (B,T,3C) the forward's input
                                       const floatX* qkvr,  // (B,T,3C) the forward's permuted q,k,v
                                       const floatX* att,   // (B,NH,T,T)
                                       int B, int T, int C, int NH, cudaStream_t stream) {
    // q, k, v and their gradients dq, dk, dv: (B,NH,T,hs) each, in qkvr and dqkvr; dy: (B,NH,T,hs)
    // in scratch. (inp is not needed: qkvr holds the same values, permuted.)
    (void)inp;
    AttentionUnfused a = attention_unfused_start(qkvr, B, T, C, NH);
    const int hs = a.hs, BNH = a.BNH;
    const size_t sTh = a.sTh, sTT = a.sTT;
    floatX *dq = dqkvr, *dk = dqkvr + a.BTC, *dv = dqkvr + 2 * a.BTC;
    floatX* dy = scratch;
    attention_to_heads(dy, dout, B, T, NH, hs, 1, stream);
    attention_for_chunks(T, [&](int r0, int r1) {
        // datt[r0:r1, 0:r1] = dy[r0:r1] @ v[0:r1]^T
        matmul_batched(datt + (size_t)r0 * T, dy + (size_t)r0 * hs, a.v, NULL, NULL, r1 - r0, r1, hs, false, true,
                       hs, hs, T, BNH, sTh, sTh, sTT, 1.0f, 0.0f, MATMUL_EPILOGUE_NONE, stream);
        // dv[r0:r1] = att[r0:T, r0:r1]^T @ dy[r0:T] (queries before r0 give these keys weight 0)
        matmul_batched(dv + (size_t)r0 * hs, att + (size_t)r0 * T + r0, dy + (size_t)r0 * hs, NULL, NULL,
                       r1 - r0, hs, T - r0, true, false, T, hs, hs, BNH, sTT, sTh, sTh, 1.0f, 0.0f,
                       MATMUL_EPILOGUE_NONE, stream);
    });
    attention_softmax_backward(datt, att, BNH, T, a.scale, stream);  // datt now holds dpreatt
    attention_for_chunks(T, [&](int r0, int r1) {
        // dq[r0:r1] = dpreatt[r0:r1, 0:r1] @ k[0:r1]
        matmul_batched(dq + (size_t)r0 * hs, datt + (size_t)r0 * T, a.k, NULL, NULL, r1 - r0, hs, r1, false, false,
                       T, hs, hs, BNH, sTT, sTh, sTh, 1.0f, 0.0f, MATMUL_EPILOGUE_NONE, stream);
        // dk[r0:r1] = dpreatt[r0:T, r0:r1]^T @ q[r0:T]
        matmul_batched(dk + (size_t)r0 * hs, datt + (size_t)r0 * T + r0, a.q + (size_t)r0 * hs, NULL, NULL,
                       r1 - r0, hs, T - r0, true, false, T, hs, hs, BNH, sTT, sTh, sTh, 1.0f, 0.0f,
                       MATMUL_EPILOGUE_NONE, stream);
    });
    attention_to_tokens(dinp, dqkvr, B, T, NH, hs, 3, stream);
}
