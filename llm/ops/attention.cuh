// attention.cuh: causal multi-head self-attention (Vaswani et al. 2017, section 3.2) as GPT-2 uses it.
// inp holds the fused QKV projection, per position [q | k | v], each C wide, head h in channels
// [h*hs, (h+1)*hs) with hs = C/NH.
//   p[b,h,t,:] = softmax_{t2 <= t}(q[b,t,h] . k[b,t2,h] / sqrt(hs)),   out[b,t,h] = sum_t2 p * v[b,t2,h]
// What the forward keeps for the backward is one FP32 number per row, the log-sum-exp of its scores
//   lse[b,h,t] = log sum_{t2 <= t} exp(q[b,t,h] . k[b,t2,h] / sqrt(hs)),
// never the (B,NH,T,T) probabilities: the backward recomputes them, p = exp(score - lse).
// The CUDA path is fused (FlashAttention-2, Dao 2023): tiles of q, k and v in shared memory, the
// scores and probabilities of a tile never written to global memory (llm/ops/attention_kernels.cuh).
// The unfused path it replaced (batched cuBLASLt products and softmax kernels through a (B,NH,T,T)
// matrix) is version 1 in dev/cuda/attention_unfused.cuh, measured against this one by
// dev/cuda/attention.cu.
#pragma once
#include <float.h>
#include "../core/common.h"
#include "../core/context.h"
// the CPU build with 16-bit floatX (the fused kernels' rounding points, attention_forward /
// attention_backward below): attention_forward_x16_cpu / attention_backward_x16_cpu
#include "attention_x16_cpu.h"
// FlashAttention's pieces on the CPU (a block of queries against a block of keys, the online-softmax merge,
// the finalisation, the block backward from the row log-sum-exp), in their own file: the fused kernels and
// ring attention are checked against them piece by piece
#include "attention_blocks.h"
// the fused kernels (FlashAttention-2), in their own file
#include "attention_kernels.cuh"      // the FP32 build's kernels, the tiles, D
#include "attention_mma_kernels.cuh"  // the 16-bit builds' tensor-core kernels
#if LLM_HAS_KERNELS
#include "../core/cuda_utils.cuh"
#endif

// ----------------------------------------------------------------------------
// CPU reference

// a . b over n floats, in SIMD lanes (their partial sums added at the end: an order of its own, fixed for
// a given build): the backward's sum of p dp over a row, and the decode step's scores
static inline float dot_cpu(const float* a, const float* b, int n) {
    float s = 0.0f;
    #pragma omp simd reduction(+:s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// One head's keys (j = 1) or values (j = 2) of sequence b, transposed: xt[i * Tp + t2] = x_t2[i] (hs, Tp), Tp = T
// rounded up to 16, the columns from T on zero. Dot products of one vector with positions 0..t are then hs vector
// FMAs over the positions (attention_dots_cpu), where one dot product per position would end each in a sum across
// the SIMD lanes.
static inline int attention_tp(int T) { return (T + 15) / 16 * 16; }
static void attention_pack_cpu(float* xt /*(hs,Tp)*/, const float* inp /*(B,T,3C)*/, int b, int h, int j, int T, int C, int hs) {
    int Tp = attention_tp(T);
    for (int t2 = 0; t2 < T; t2++) {
        const float* x = inp + ((size_t)b * T + t2) * 3 * C + j * C + h * hs;
        for (int i = 0; i < hs; i++) xt[(size_t)i * Tp + t2] = x[i];
    }
    for (int i = 0; i < hs; i++) {
        for (int t2 = T; t2 < Tp; t2++) xt[(size_t)i * Tp + t2] = 0.0f;
    }
}

// s[t2] = x . (column t2 of xt) for t2 < n, each summed over i in order in its own SIMD lane, 64 positions at a
// time: four independent chains of 16 lanes (a whole pass of 64 when there are that many, its fixed trip count
// keeping the four in registers; else the 16-position blocks needed; positions past n in the last block are
// computed and dropped)
static void attention_dots_cpu(float* s /*(n)*/, const float* x /*(hs)*/, const float* xt /*(hs,Tp)*/, int n, int Tp, int hs) {
    for (int t0 = 0; t0 < n; t0 += 64) {
        float acc[64];
        int nb = n - t0 >= 64 ? 64 : (n - t0 + 15) / 16 * 16;  // positions computed, a multiple of 16 (<= Tp - t0)
        for (int l = 0; l < 64; l++) acc[l] = 0.0f;
        if (nb == 64) {
            for (int i = 0; i < hs; i++) {
                float xi = x[i];
                const float* r = xt + (size_t)i * Tp + t0;
                #pragma omp simd
                for (int l = 0; l < 64; l++) acc[l] += xi * r[l];
            }
        } else {
            for (int i = 0; i < hs; i++) {
                float xi = x[i];
                const float* r = xt + (size_t)i * Tp + t0;
                #pragma omp simd
                for (int l = 0; l < nb; l++) acc[l] += xi * r[l];
            }
        }
        int m = n - t0 < 64 ? n - t0 : 64;
        for (int l = 0; l < m; l++) s[t0 + l] = acc[l];
    }
}

// Row t: a[0..t] = softmax_{t2 <= t}(q_t . k_t2 * scale) from the packed keys (max, exponentials, sum,
// normalisation, in that order: the forward and the backward's recomputation round alike); returns the
// row's log-sum-exp max + log(sum)
static float attention_row_cpu(float* a /*(Tp)*/, const float* q /*(hs)*/, const float* kt /*(hs,Tp)*/, int t, int T, int hs,
                               float scale) {
    int n = t + 1;
    attention_dots_cpu(a, q, kt, n, attention_tp(T), hs);
    float maxv = -INFINITY;
    for (int t2 = 0; t2 < n; t2++) {
        a[t2] *= scale;
        maxv = a[t2] > maxv ? a[t2] : maxv;
    }
    float sum = 0.0f;
    #pragma omp simd reduction(+:sum)
    for (int t2 = 0; t2 < n; t2++) { a[t2] = exp_fast(a[t2] - maxv); sum += a[t2]; }
    float inv = 1.0f / sum;
    #pragma omp simd
    for (int t2 = 0; t2 < n; t2++) a[t2] *= inv;
    return maxv + logf(sum);
}

// out and lse; the probabilities of row t live in one row of scratch (T floats per thread)
static void attention_forward_cpu(float* out,        // (B,T,C)
                                  float* lse,        // (B,NH,T) log-sum-exp of each row's scaled scores
                                  const float* inp,  // (B,T,3C)
                                  int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    int Tp = attention_tp(T);
    #pragma omp parallel
    {
        float* a = (float*)mallocCheck((size_t)(Tp > 0 ? Tp : 1) * sizeof(float));   // (Tp) one row of probabilities
        float* kt = (float*)mallocCheck((size_t)(Tp > 0 ? hs * Tp : 1) * sizeof(float));  // (hs,Tp) the head's keys
        float* acc = (float*)mallocCheck((size_t)hs * sizeof(float));                // (hs) the row's output
        #pragma omp for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                attention_pack_cpu(kt, inp, b, h, 1, T, C, hs);
                for (int t = 0; t < T; t++) {
                    const float* q = inp + ((size_t)b * T + t) * 3 * C + h * hs;
                    lse[((size_t)b * NH + h) * T + t] = attention_row_cpu(a, q, kt, t, T, hs, scale);
                    for (int i = 0; i < hs; i++) acc[i] = 0.0f;  // (summed apart from out: no aliasing with inp)
                    for (int t2 = 0; t2 <= t; t2++) {
                        const float* v = inp + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                        float w = a[t2];
                        #pragma omp simd
                        for (int i = 0; i < hs; i++) acc[i] += w * v[i];
                    }
                    memcpy(out + ((size_t)b * T + t) * C + h * hs, acc, (size_t)hs * sizeof(float));
                }
            }
        }
        free(a);
        free(kt);
        free(acc);
    }
}

// dinp = d loss / d inp (overwritten), from dout and the forward's input. The FP32 reference recomputes
// each row's probabilities exactly as attention_forward_cpu computed them (its max, its sum, in its
// order), so its gradients are bit for bit those of a backward that kept them; the fused kernels
// recompute them from lse instead (p = exp(score - lse)), which rounds differently (test/kernels/attention.h
// bounds both against float64).
static void attention_backward_cpu(float* dinp,        // (B,T,3C)
                                   const float* dout,  // (B,T,C)
                                   const float* inp,   // (B,T,3C)
                                   int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    // each (b,h) owns a disjoint slice of dinp: no races
    int Tp = attention_tp(T);
    #pragma omp parallel
    {
        float* a = (float*)mallocCheck((size_t)(Tp > 0 ? 2 * Tp : 1) * sizeof(float));  // (2,Tp) p and d p of one row
        float* datt = a + Tp;
        float* kt = (float*)mallocCheck((size_t)(Tp > 0 ? 2 * hs * Tp : 1) * sizeof(float));  // (2,hs,Tp) keys, values
        float* vt = kt + (size_t)hs * Tp;
        #pragma omp for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                attention_pack_cpu(kt, inp, b, h, 1, T, C, hs);
                attention_pack_cpu(vt, inp, b, h, 2, T, C, hs);
                for (int t = 0; t < T; t++) {
                    for (int j = 0; j < 3; j++) {
                        float* d = dinp + ((size_t)b * T + t) * 3 * C + j * C + h * hs;
                        for (int i = 0; i < hs; i++) d[i] = 0.0f;
                    }
                }
                for (int t = 0; t < T; t++) {
                    const float* q = inp + ((size_t)b * T + t) * 3 * C + h * hs;
                    attention_row_cpu(a, q, kt, t, T, hs, scale);  // the forward's row of probabilities, recomputed
                    const float* dy = dout + ((size_t)b * T + t) * C + h * hs;
                    // out = p @ v:  dp = dy . v,  dv += p * dy
                    attention_dots_cpu(datt, dy, vt, t + 1, Tp, hs);
                    for (int t2 = 0; t2 <= t; t2++) {
                        float* dv = dinp + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                        float p = a[t2];
                        #pragma omp simd
                        for (int i = 0; i < hs; i++) dv[i] += p * dy[i];
                    }
                    // softmax backward: dpre = p * (dp - sum_j p_j dp_j)
                    float dot = dot_cpu(a, datt, t + 1);
                    float* dq = dinp + ((size_t)b * T + t) * 3 * C + h * hs;
                    for (int t2 = 0; t2 <= t; t2++) {
                        float dpre = a[t2] * (datt[t2] - dot) * scale;
                        const float* k = inp + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                        float* dk = dinp + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                        #pragma omp simd
                        for (int i = 0; i < hs; i++) { dq[i] += dpre * k[i]; dk[i] += dpre * q[i]; }
                    }
                }
            }
        }
        free(a);
        free(kt);
    }
}

// One query against a KV cache (the sampler's decode step): for each head h,
//   out[h] = sum_{t < len} softmax_t(q[h] . k[t,h] / sqrt(hs)) v[t,h]
// the last row of attention_forward_cpu when the cache holds the keys and values of positions
// 0 .. len-1 and q is the query of position len-1.
static void attention_decode_cpu(float* out,          // (C)
                                 float* scores,       // (NH, maxT) scratch: the probabilities
                                 const float* q,      // (C)
                                 const float* kcache, // (len, C)
                                 const float* vcache, // (len, C)
                                 int len, int maxT, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    for (int h = 0; h < NH; h++) {
        float* a = scores + (size_t)h * maxT;
        float maxv = -INFINITY;
        for (int t = 0; t < len; t++) {
            const float* k = kcache + (size_t)t * C + h * hs;
            a[t] = dot_cpu(q + h * hs, k, hs) * scale;
            if (a[t] > maxv) maxv = a[t];
        }
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int t = 0; t < len; t++) { a[t] = exp_fast(a[t] - maxv); sum += a[t]; }
        float inv = 1.0f / sum;
        float* o = out + h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0.0f;
        for (int t = 0; t < len; t++) {
            const float* v = vcache + (size_t)t * C + h * hs;
            float w = a[t] * inv;
            #pragma omp simd
            for (int i = 0; i < hs; i++) o[i] += w * v[i];
        }
    }
}

// ----------------------------------------------------------------------------
// CUDA kernels: the fused forward and backward are in llm/ops/attention_kernels.cuh; here the decode
#if LLM_HAS_KERNELS

// decode: one query against the KV cache, one block per head. Pass 1: thread i scores positions
// i, i + blockDim, ... into the FP32 scratch and keeps its max; a block max; pass 2: e^(s - max)
// in place and a block sum; pass 3: thread d of the head sums p_t v[t, d] over the positions.
// Reads the head's slice of the cache twice (keys, then values), 2 * len * hs floatX.
__global__ void attention_decode_kernel(floatX* out,           // (C)
                                        float* scores,         // (NH, maxT)
                                        const floatX* q,       // (C)
                                        const floatX* kcache,  // (len, C)
                                        const floatX* vcache,  // (len, C)
                                        int len, int maxT, int C, int hs, float scale) {
    __shared__ float red[32];
    int h = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    float* a = scores + (size_t)h * maxT;
    float m = -INFINITY;
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
        const floatX* k = kcache + (size_t)t * C + h * hs;
        float s = 0.0f;
        for (int i = 0; i < hs; i++) s += (float)q[h * hs + i] * (float)k[i];
        a[t] = s * scale;
        m = fmaxf(m, a[t]);
    }
    m = warp_reduce_max(m);
    if (lane == 0) red[warp] = m;
    __syncthreads();
    m = warp_reduce_max(lane < nwarps ? red[lane] : -INFINITY);
    float sum = 0.0f;
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
        a[t] = expf(a[t] - m);
        sum += a[t];
    }
    sum = block_reduce_sum(sum);  // its barriers also make every a[t] visible to the block
    float inv = 1.0f / sum;
    for (int d = threadIdx.x; d < hs; d += blockDim.x) {
        float o = 0.0f;
        for (int t = 0; t < len; t++) o += a[t] * inv * (float)vcache[(size_t)t * C + h * hs + d];
        out[h * hs + d] = (floatX)o;
    }
}

#endif  // LLM_HAS_KERNELS

// ----------------------------------------------------------------------------
// launchers

#if LLM_HAS_KERNELS
// calls f(AttentionTile<HD>()) with HD the head size hs rounded up to 16, 32, 64 or 128
template <class Fn>
static void attention_for_head_size(int hs, Fn f) {
    if (hs <= 16) f(AttentionTile<16>());
    else if (hs <= 32) f(AttentionTile<32>());
    else if (hs <= 64) f(AttentionTile<64>());
    else if (hs <= 128) f(AttentionTile<128>());
    else fatal("attention: the fused kernels take head sizes up to 128 (C/NH), found %d", hs);
}

// 128-bit tile loads: every row of q, k, v, dy starts on 16 bytes and holds whole chunks
static int attention_vec(int hs, const void* a, const void* b) {
    return hs % x128::size == 0 && is_aligned16(a) && is_aligned16(b);
}

// launch `kernel` over (B*NH, T/BR tiles) with `smem` bytes of dynamic shared memory (over the 48 KiB default:
// opted in per kernel)
template <class K, class... Args>
static void attention_launch(K kernel, int warps, size_t smem, int BNH, int tiles, cudaStream_t stream, Args... args) {
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    LAUNCH(kernel, dim3((unsigned)BNH, (unsigned)tiles), dim3(32 * warps), smem, stream, args...);
}
#endif

static void attention_forward(floatX* out,        // (B,T,C)
                              float* lse,         // (B,NH,T) kept for the backward
                              const floatX* inp,  // (B,T,3C)
                              int B, int T, int C, int NH, cudaStream_t stream) {
    OP_PROFILE(OP_ATTENTION);
#if LLM_BUILD_CPU
    (void)stream;
#if defined(LLM_FLOATX_IS_FLOAT)
    attention_forward_cpu(out, lse, inp, B, T, C, NH);
#else
    attention_forward_x16_cpu(out, lse, inp, B, T, C, NH);  // the kernels' rounding points
#endif
#else
    if (B == 0 || T == 0) return;
    int hs = C / NH, vec = attention_vec(hs, inp, out);
    float scale = 1.0f / sqrtf((float)hs);
    attention_for_head_size(hs, [&](auto tile) {
        typedef decltype(tile) F;
#if defined(ENABLE_FP32)
        auto kernel = attention_forward_kernel<F::HDIM>;
#else
        auto kernel = attention_forward_mma_kernel<F::HDIM>;
#endif
        attention_launch(kernel, F::WARPS, F::FORWARD, B * NH, ceil_div(T, F::BR), stream, out, lse, inp, T, C, NH, scale, vec);
    });
#endif
}

// dinp is overwritten. scratch: (B,NH,T) floats for the kernels' row dot products D
static void attention_backward(floatX* dinp,        // (B,T,3C)
                               float* scratch,      // (B,NH,T)
                               const floatX* dout,  // (B,T,C)
                               const floatX* inp,   // (B,T,3C) the forward's input
                               const floatX* out,   // (B,T,C) the forward's output
                               const float* lse,    // (B,NH,T) the forward's log-sum-exp
                               int B, int T, int C, int NH, cudaStream_t stream) {
    OP_PROFILE(OP_ATTENTION);
#if LLM_BUILD_CPU
    (void)scratch; (void)stream;
#if defined(LLM_FLOATX_IS_FLOAT)
    (void)out; (void)lse;
    attention_backward_cpu(dinp, dout, inp, B, T, C, NH);
#else
    attention_backward_x16_cpu(dinp, dout, inp, out, lse, B, T, C, NH);  // the kernels' rounding points
#endif
#else
    if (B == 0 || T == 0) return;
    int hs = C / NH, vec = attention_vec(hs, inp, dout) && is_aligned16(dinp);
    float scale = 1.0f / sqrtf((float)hs);
    size_t rows = (size_t)B * NH * T;
    LAUNCH(attention_backward_dot_kernel, dim3((unsigned)ceil_div_sz(rows, 8)), dim3(256), 0, stream, scratch, dout, out, B,
           T, C, NH);
    attention_for_head_size(hs, [&](auto tile) {
        typedef decltype(tile) F;
        int tiles = ceil_div(T, F::BR);
#if defined(ENABLE_FP32)
        auto dkdv = attention_backward_dkdv_kernel<F::HDIM>;
        auto dq = attention_backward_dq_kernel<F::HDIM>;
#else
        auto dkdv = attention_backward_dkdv_mma_kernel<F::HDIM>;
        auto dq = attention_backward_dq_mma_kernel<F::HDIM>;
#endif
        attention_launch(dkdv, F::WARPS, F::DKDV, B * NH, tiles, stream, dinp, dout, inp, lse, (const float*)scratch, T, C, NH,
                         scale, vec);
        attention_launch(dq, F::WARPS, F::DQ, B * NH, tiles, stream, dinp, dout, inp, lse, (const float*)scratch, T, C, NH,
                         scale, vec);
    });
#endif
}

// out (C) = attention of the query q (C) over the cache's first len positions (kcache, vcache:
// (maxT, C) rows of keys and values); scores: (NH, maxT) FP32 scratch
static void attention_decode(floatX* out, float* scores, const floatX* q, const floatX* kcache, const floatX* vcache,
                             int len, int maxT, int C, int NH, cudaStream_t stream) {
    if (len < 1 || len > maxT) fatal("attention_decode: expected 1 <= len <= maxT = %d, found %d", maxT, len);
#if LLM_BUILD_CPU
    (void)stream;
    float *o = f32_out(out, C), *fq = f32_in(q, C);
    float *k = f32_in(kcache, (size_t)len * C), *v = f32_in(vcache, (size_t)len * C);
    attention_decode_cpu(o, scores, fq, k, v, len, maxT, C, NH);
    f32_store(out, o, C); f32_free(q, fq); f32_free(kcache, k); f32_free(vcache, v);
#else
    int hs = C / NH;
    LAUNCH(attention_decode_kernel, dim3(NH), dim3(128), 0, stream, out, scores, q, kcache, vcache, len, maxT, C, hs,
           1.0f / sqrtf((float)hs));
#endif
}
