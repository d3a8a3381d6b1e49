// attention_mma_kernels.cuh: the fused causal attention kernels of the 16-bit builds (BF16, FP16), with
// the scores, probabilities and accumulators in registers (Dao 2023, "FlashAttention-2": Algorithm 1
// for the forward, Algorithm 2 for the backward, its work split of section 3.2, and its section 3.3:
// each warp owns whole rows, so the softmax needs no shared memory and no block barrier). The FP32
// build keeps the plain kernels of attention_kernels.cuh (no tensor cores take FP32 operands);
// attention.cuh chooses, and its CPU references are the math of both.
//
// Tiles: BR = 64 positions (queries or keys) per block, 4 warps of 16 rows each; key (query) tiles of
// 64 as well, so a row of the forward goes through t / 64 + 1 online rescalings, as in the other
// kernels. Shared memory holds only the floatX tiles copied from the model's layout (B,T,3C), zero-padded
// past T and past hs to HD (attention_load_tile); every product is PTX's mma.sync.m16n8k16 on fragments
// read straight from those tiles (llm/core/mma_ptx.cuh), with FP32 accumulation:
//
//   forward (grid: query tiles x B*NH): Q's fragments stay in registers; per key tile j <= i:
//            S (16 x 64 a warp, 8 accumulators) = Q K_j^T; per row the online softmax over the 4 lanes
//            that hold it (running max m and sum l in registers, O rescaled by e^(m_old - m_new));
//            P rounded to floatX becomes the A fragment of O += P V_j with no trip through memory
//            (two accumulators side by side are one A fragment). Then out = O / l, lse = m + log l.
//   backward: D = rowsum(dy * out) (attention_backward_dot_kernel), then
//     dk, dv (grid: key tiles x B*NH), per query tile i >= j: S^T = K Q_i^T, P^T = e^(scale S^T - lse);
//            dV += Round(P^T) dY; dP^T = V dY^T; dS^T = P^T (dP^T - D); dK += Round(dS^T) Q
//     dq     (grid: query tiles x B*NH), per key tile j <= i: S, dP = dY V^T, dS = P (dP - D) again,
//            dQ += Round(dS) K. No atomics: the gradients are the same bits on every run.
// The rounding points are those of attention_x16_cpu.h and test/kernels/attention.h's bounds: S, P and
// dP in FP32, P rounded to floatX for P V and P^T dY only, dS rounded for its two products.
//
// Shared-memory reads: a fragment register is one 32-bit load of two adjacent elements (A, and B of
// K^T and dY^T) or two 16-bit loads (B of V, dY, Q, K in the P V-like products); with rows padded by 8
// elements (16 bytes) the 32 lanes of a load hit 32 different banks.
// What it does not do (FlashAttention-2's and -3's further steps): cp.async / TMA double buffering of the
// next tile while this one computes, ldmatrix, wgmma on Hopper, warp specialisation.
#pragma once
#include <type_traits>
#include "../core/common.h"
#if LLM_HAS_KERNELS && !defined(ENABLE_FP32)
#include "../core/cuda_utils.cuh"
#include "../core/mma_ptx.cuh"
#include "attention_kernels.cuh"  // AttentionTile, attention_carve, attention_load_tile, attention_head

// max and sum over the 4 lanes of a quad: the lanes that hold one row of an accumulator
__device__ __forceinline__ float attention_quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float attention_quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// The tile code: the products of both the fused kernels (below) and ring attention's block-pair kernels
// (attention_ring_mma_kernels.cuh), each one warp's 16 rows. A product whose A operand is an FP32 accumulator (P, dS)
// takes it as NT floatX terms: NT = 1 rounds it once to floatX (the fused kernels' rounding point, attention_x16_cpu.h);
// NT = 3 splits it into p1 = X(P), p2 = X((P - p1) 2^d), p3 = X(((P - p1) 2^d - p2) 2^d), with d the significand bits
// of floatX (8 BF16, 11 FP16, so each scaled remainder is again about P's size and stays clear of FP16's subnormals),
// multiplies each term, and sums P V = p1 V + 2^-d (p2 V + 2^-d p3 V). Three terms of 8 or 11 bits hold P's 24
// significand bits: exact in BF16 (FP32's exponent range), and in FP16 wherever |P| >= 2^-14 (FP16's smallest normal),
// to 2^-47 absolute below it; a P or dS past 65504 overflows FP16 as in the fused kernels. The ring's pairs use it to
// keep the precision of their FP32 CPU reference. Costs: NT MMAs for each such product.
//
// zeroes N accumulators of 16 x 8 FP32 (float[N][4], mma_ptx.cuh's C layout). Where the backward runs two
// products over the same operands' loop (S^T and dP^T, dV and dK in dk/dv; S and dP in dq) the loop is one tile
// routine, shared (attention_mma_qkt2, attention_mma_pv2): one loop per product costs registers (dk/dv at HD 64 184
// instead of 176, 12 bytes of spills at HD 128; dq at HD 128 255 instead of 176; ptxas, sm_90).
template <int N>
__device__ __forceinline__ void attention_mma_zero(float (*acc)[4]) {
    for (int n = 0; n < N; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}
// 2^d, d the significand bits of floatX (above)
__device__ __forceinline__ float attention_mma_term_scale() {
    return std::is_same<floatX, __nv_bfloat16>::value ? 256.0f : 2048.0f;
}
// the A fragments (16 x 16) of two FP32 accumulators side by side (c0 columns [0, 8), c1 [8, 16)) as NT floatX terms
// (above): pa[x] is term x. Each remainder P - X(P) is exact in FP32 (X(P) is within a factor 2 of P), and so is its
// scaling by a power of 2.
template <int NT>
__device__ __forceinline__ void attention_mma_split_a(uint32_t (*pa)[4], const float* c0, const float* c1) {
    if (NT == 1) {
        mma_pack_a(pa[0], c0, c1);
        return;
    }
    float r[8] = {c0[0], c0[1], c0[2], c0[3], c1[0], c1[1], c1[2], c1[3]};
    for (int x = 0; x < NT; x++) {
        floatX h[8];
        for (int e = 0; e < 8; e++) {
            h[e] = (floatX)r[e];
            r[e] = (r[e] - (float)h[e]) * attention_mma_term_scale();
        }
        for (int e = 0; e < 4; e++) pa[x][e] = mma_pack(h[2 * e], h[2 * e + 1]);
    }
}
// acc (16 x 8) += (the sum of pa's NT terms, term x scaled by 2^-dx) B. NT > 1: the lower terms first into a zeroed
// partial, Horner's way (t = p3 B, t = 2^-d t + p2 B), then the leading term into acc, then 2^-d t: the partial's sums
// round at its own, smaller, magnitude, and acc takes one FP32 add per 16 keys more than with NT = 1
template <int NT>
__device__ __forceinline__ void attention_mma_terms(float* acc, const uint32_t (*pa)[4], const uint32_t* b) {
    if (NT == 1) {
        mma_16816(acc, pa[0], b);
        return;
    }
    const float down = 1.0f / attention_mma_term_scale();
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int x = NT - 1; x >= 1; x--) {
        for (int e = 0; e < 4; e++) t[e] *= down;
        mma_16816(t, pa[x], b);
    }
    mma_16816(acc, pa[0], b);
    for (int e = 0; e < 4; e++) acc[e] += t[e] * down;
}
// s (16, 8 NS) = Q K^T: Q's KT A fragments in registers (the warp's 16 rows, HD = 16 KT columns), K a (8 NS, HD)
// floatX tile of row stride LDX (the forward's scores)
template <int KT, int NS, int LDX>
__device__ __forceinline__ void attention_mma_qkt(float (*s)[4], const uint32_t (*qa)[4], const floatX* K) {
    attention_mma_zero<NS>(s);
    for (int n = 0; n < NS; n++)
        for (int kk = 0; kk < KT; kk++) {
            uint32_t b[2];
            mma_load_bt(b, K + n * 8 * LDX + kk * 16, LDX);
            mma_16816(s[n], qa[kk], b);
        }
}
// s1 (16, 8 NS) = A1 B1^T and s2 = A2 B2^T over one loop: A1, A2 the warp's 16 rows of (16, HD) floatX tiles, B1, B2
// (8 NS, HD) tiles, row stride LDX (the backward's S = Q K^T with dP = dY V^T, and S^T = K Q^T with dP^T = V dY^T)
template <int KT, int NS, int LDX>
__device__ __forceinline__ void attention_mma_qkt2(float (*s1)[4], const floatX* A1, const floatX* B1, float (*s2)[4],
                                                   const floatX* A2, const floatX* B2) {
    attention_mma_zero<NS>(s1);
    attention_mma_zero<NS>(s2);
    for (int kk = 0; kk < KT; kk++) {
        uint32_t a1[4], a2[4];
        mma_load_a(a1, A1 + kk * 16, LDX);
        mma_load_a(a2, A2 + kk * 16, LDX);
        for (int n = 0; n < NS; n++) {
            uint32_t b[2];
            mma_load_bt(b, B1 + n * 8 * LDX + kk * 16, LDX);
            mma_16816(s1[n], a1, b);
            mma_load_bt(b, B2 + n * 8 * LDX + kk * 16, LDX);
            mma_16816(s2[n], a2, b);
        }
    }
}
// acc (16, 8 NO) += P V: P (16, 16 NK) FP32 accumulators, taken as NT floatX terms (above); V a (16 NK, 8 NO) floatX
// tile of row stride LDX (the forward's O += P V, the dq pass's dQ += dS K)
template <int NK, int NO, int LDX, int NT = 1>
__device__ __forceinline__ void attention_mma_pv(float (*acc)[4], const float (*P)[4], const floatX* V) {
#pragma unroll  // P[2 kk] must name registers: a loop left rolled (NT = 3 makes the body long) puts P in local memory
    for (int kk = 0; kk < NK; kk++) {
        uint32_t pa[NT][4];
        attention_mma_split_a<NT>(pa, P[2 * kk], P[2 * kk + 1]);
        for (int d = 0; d < NO; d++) {
            uint32_t b[2];
            mma_load_b(b, V + kk * 16 * LDX + d * 8, LDX);
            attention_mma_terms<NT>(acc[d], pa, b);
        }
    }
}
// acc1 += P1 X1 and acc2 += P2 X2 over one loop, as attention_mma_pv (the dk/dv pass's dV += P^T dY, dK += dS^T Q)
template <int NK, int NO, int LDX, int NT = 1>
__device__ __forceinline__ void attention_mma_pv2(float (*acc1)[4], const float (*P1)[4], const floatX* X1, float (*acc2)[4],
                                                  const float (*P2)[4], const floatX* X2) {
#pragma unroll  // as in attention_mma_pv
    for (int kk = 0; kk < NK; kk++) {
        uint32_t pa[NT][4], sa[NT][4];
        attention_mma_split_a<NT>(pa, P1[2 * kk], P1[2 * kk + 1]);
        attention_mma_split_a<NT>(sa, P2[2 * kk], P2[2 * kk + 1]);
        for (int d = 0; d < NO; d++) {
            uint32_t b[2];
            mma_load_b(b, X1 + kk * 16 * LDX + d * 8, LDX);
            attention_mma_terms<NT>(acc1[d], pa, b);
            mma_load_b(b, X2 + kk * 16 * LDX + d * 8, LDX);
            attention_mma_terms<NT>(acc2[d], sa, b);
        }
    }
}
// One key tile of the forward's online softmax on the warp's 16 rows (this lane: rows t0 and t0 + 8; the tile's keys
// key0 + n*8 + 2 (lane % 4) + {0, 1} in s[n]): the scores scaled and masked (key < nk; and key <= t where causal), the
// running max m raised, l and O rescaled by e^(m_old - m_new), and s turned into P = e^(x - m). Every row must have
// an unmasked key in the tile (the callers' tiles: key0 <= t), so the new max is finite and the rescale factor
// e^(m_old - m_new) is 0 on the first tile.
template <int NS, int NO>
__device__ __forceinline__ void attention_mma_softmax_tile(float (*s)[4], float (*o)[4], float* m, float* l, int t0, int key0,
                                                           int nk, int causal, float scale) {
    int tq = threadIdx.x % 4;
    float mx[2] = {-INFINITY, -INFINITY};
    for (int n = 0; n < NS; n++)
        for (int e = 0; e < 4; e++) {
            int t = t0 + (e >> 1) * 8, key = key0 + n * 8 + 2 * tq + (e & 1);
            float x = (!causal || key <= t) && key < nk ? s[n][e] * scale : -INFINITY;
            s[n][e] = x;
            mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
    float alpha[2], sum[2] = {0.0f, 0.0f};
    for (int r = 0; r < 2; r++) {
        float m_new = fmaxf(m[r], attention_quad_max(mx[r]));
        alpha[r] = expf(m[r] - m_new);
        m[r] = m_new;
    }
    for (int n = 0; n < NS; n++)
        for (int e = 0; e < 4; e++) {
            float pe = expf(s[n][e] - m[e >> 1]);
            s[n][e] = pe;
            sum[e >> 1] += pe;
        }
    for (int r = 0; r < 2; r++) l[r] = l[r] * alpha[r] + attention_quad_sum(sum[r]);
    for (int d = 0; d < NO; d++) { o[d][0] *= alpha[0]; o[d][1] *= alpha[0]; o[d][2] *= alpha[1]; o[d][3] *= alpha[1]; }
}

// Shared memory: the tiles are carved from the dynamic shared memory by pointer arithmetic on `smem` (its
// alignment to 128 bytes included), so that the compiler knows every tile pointer is a shared-memory address and
// emits shared loads (LDS); aligning through an integer cast left it generic pointers, and loads that resolve
// the address space at run time (LD: 208 of them in the forward's SASS at HD = 64 on sm_90, and about 20 more registers).
// Local memory (scripts/kernel_report.py, docs/kernels.md lists it per target): ptxas gives some instances on
// some targets an 8-byte stack slot, one value stored before the loop over tiles and loaded after it (one STL
// and one LDL per thread per kernel, read in the SASS); and the HD = 128 backward dk/dv kernel, whose dK and dV
// accumulators alone take 128 FP32 registers per thread, sits near the 255-register limit, where ptxas may spill
// (docs/kernels.md says on which targets and how much: with CUDA 13 and the product loops unrolled, #pragma unroll in
// attention_mma_pv and _pv2, none; the ring's pair dk/dv kernel, whose three-term products take more registers, does);
// HD = 128 serves head sizes 65..128 only (GPT-2's is 64), and there spills are L1 traffic beside each tile's 70 KiB
// of shared-memory loads.
template <int HD>
__global__ void __launch_bounds__(AttentionTile<HD>::WARPS * 32)
attention_forward_mma_kernel(floatX* out,        // (B,T,C)
                             float* lse,         // (B,NH,T)
                             const floatX* inp,  // (B,T,3C)
                             int T, int C, int NH, float scale, int vec) {
    typedef AttentionTile<HD> F;
    constexpr int BR = F::BR, KT = HD / 16, NS = BR / 8, NO = HD / 8;
    EXTERN_SHARED(char, smem);
    char* p = smem + (-(uintptr_t)smem & 127);  // aligned up to 128 bytes, still a pointer into shared memory
    floatX* Q = attention_carve<floatX>(p, F::X);  // (BR, LDX)
    floatX* K = attention_carve<floatX>(p, F::X);  // (BR, LDX) the current key tile
    floatX* V = attention_carve<floatX>(p, F::X);  // (BR, LDX)
    AttentionHead hd = attention_head(NH, T);
    int hs = C / NH, lane = threadIdx.x % 32, r0 = threadIdx.x / 32 * 16, tq = lane % 4;
    int i = (int)(gridDim.y - 1 - blockIdx.y), q0 = i * BR;  // the longest rows first
    int t0 = q0 + r0 + lane / 4;                            // this lane's rows: t0 and t0 + 8
    const floatX* qkv = inp + hd.tok * 3 * C + hd.h * hs;
    attention_load_tile<HD>(Q, qkv, 3 * (size_t)C, q0, T, hs, vec);
    __syncthreads();
    uint32_t qa[KT][4];  // the warp's 16 rows of Q, as A fragments
    for (int kk = 0; kk < KT; kk++) mma_load_a(qa[kk], Q + r0 * F::LDX + kk * 16, F::LDX);
    float o[NO][4];  // (16, HD) unnormalised output
    attention_mma_zero<NO>(o);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows t0, t0 + 8
    for (int j = 0; j <= i; j++) {
        __syncthreads();  // every warp is done with the previous K, V
        attention_load_tile<HD>(K, qkv + C, 3 * (size_t)C, j * BR, T, hs, vec);
        attention_load_tile<HD>(V, qkv + 2 * C, 3 * (size_t)C, j * BR, T, hs, vec);
        __syncthreads();
        float s[NS][4];  // (16, BR) scores, then P
        attention_mma_qkt<KT, NS, F::LDX>(s, qa, K);  // S = Q K^T
        attention_mma_softmax_tile<NS, NO>(s, o, m, l, t0, j * BR, T, 1, scale);
        attention_mma_pv<BR / 16, NO, F::LDX>(o, s, V);  // O += P V, P rounded to floatX
    }
    for (int r = 0; r < 2; r++) {
        int t = t0 + 8 * r;
        if (t >= T) continue;
        float inv = 1.0f / l[r];
        floatX* dst = out + (hd.tok + t) * C + hd.h * hs;
        for (int d = 0; d < NO; d++)
            for (int h = 0; h < 2; h++) {
                int c = d * 8 + 2 * tq + h;
                if (c < hs) dst[c] = (floatX)(o[d][2 * r + h] * inv);
            }
        if (tq == 0) lse[(size_t)hd.bh * T + t] = m[r] + logf(l[r]);
    }
}

// dk and dv of key tile j = blockIdx.y, over the query tiles i >= j
template <int HD>
__global__ void __launch_bounds__(AttentionTile<HD>::WARPS * 32)
attention_backward_dkdv_mma_kernel(floatX* dinp,        // (B,T,3C): its k and v parts written
                                   const floatX* dout,  // (B,T,C)
                                   const floatX* inp,   // (B,T,3C)
                                   const float* lse,    // (B,NH,T)
                                   const float* D,      // (B,NH,T)
                                   int T, int C, int NH, float scale, int vec) {
    typedef AttentionTile<HD> F;
    constexpr int BR = F::BR, KT = HD / 16, NS = BR / 8, NO = HD / 8;
    EXTERN_SHARED(char, smem);
    char* p = smem + (-(uintptr_t)smem & 127);  // aligned up to 128 bytes, still a pointer into shared memory
    floatX* K = attention_carve<floatX>(p, F::X);   // (BR, LDX) this block's keys
    floatX* V = attention_carve<floatX>(p, F::X);   // (BR, LDX)
    floatX* Q = attention_carve<floatX>(p, F::X);   // (BR, LDX) the current query tile
    floatX* dY = attention_carve<floatX>(p, F::X);  // (BR, LDX)
    float* L = attention_carve<float>(p, F::R);     // (BR) lse of the query tile
    float* Dq = attention_carve<float>(p, F::R);    // (BR) D of the query tile
    AttentionHead hd = attention_head(NH, T);
    int hs = C / NH, lane = threadIdx.x % 32, r0 = threadIdx.x / 32 * 16, tq = lane % 4;
    int j = blockIdx.y, k0 = j * BR, ntiles = (int)gridDim.y;  // key tile j has ntiles - j query tiles: first blocks longest
    int key0 = k0 + r0 + lane / 4;                               // this lane's keys: key0 and key0 + 8
    const floatX* qkv = inp + hd.tok * 3 * C + hd.h * hs;
    const floatX* dy = dout + hd.tok * C + hd.h * hs;
    attention_load_tile<HD>(K, qkv + C, 3 * (size_t)C, k0, T, hs, vec);
    attention_load_tile<HD>(V, qkv + 2 * C, 3 * (size_t)C, k0, T, hs, vec);
    float dk[NO][4], dv[NO][4];  // (16, HD) each
    attention_mma_zero<NO>(dk);
    attention_mma_zero<NO>(dv);
    for (int i = j; i < ntiles; i++) {
        int q0 = i * BR;
        __syncthreads();  // every warp is done with the previous Q, dY, L, D
        attention_load_query_tile<HD>(Q, dY, L, Dq, qkv, dy, lse, D, hd.bh, q0, T, C, hs, vec);
        __syncthreads();
        float pt[NS][4], dpt[NS][4];  // (16 keys, BR queries): S^T then P^T; dP^T then dS^T
        attention_mma_qkt2<KT, NS, F::LDX>(pt, K + r0 * F::LDX, Q, dpt, V + r0 * F::LDX, dY);  // S^T = K Q^T, dP^T = V dY^T
        for (int n = 0; n < NS; n++)
            for (int e = 0; e < 4; e++) {  // P^T = e^(scale S^T - lse), 0 where the query is before the key or past T
                int key = key0 + (e >> 1) * 8, c = n * 8 + 2 * tq + (e & 1), t = q0 + c;
                float pv = t >= key && t < T && key < T ? expf(pt[n][e] * scale - L[c]) : 0.0f;
                pt[n][e] = pv;
                dpt[n][e] = pv * (dpt[n][e] - Dq[c]);  // dS^T = P^T (dP^T - D)
            }
        // dV += Round(P^T) dY, dK += Round(dS^T) Q
        attention_mma_pv2<BR / 16, NO, F::LDX>(dv, pt, dY, dk, dpt, Q);
    }
    for (int r = 0; r < 2; r++) {
        int key = key0 + 8 * r;
        if (key >= T) continue;
        floatX* dst = dinp + (hd.tok + key) * 3 * C + hd.h * hs;
        for (int d = 0; d < NO; d++)
            for (int h = 0; h < 2; h++) {
                int c = d * 8 + 2 * tq + h;
                if (c < hs) {
                    dst[C + c] = (floatX)(dk[d][2 * r + h] * scale);
                    dst[2 * C + c] = (floatX)dv[d][2 * r + h];
                }
            }
    }
}

// dq of query tile i, over the key tiles j <= i
template <int HD>
__global__ void __launch_bounds__(AttentionTile<HD>::WARPS * 32)
attention_backward_dq_mma_kernel(floatX* dinp,        // (B,T,3C): its q part written
                                 const floatX* dout,  // (B,T,C)
                                 const floatX* inp,   // (B,T,3C)
                                 const float* lse,    // (B,NH,T)
                                 const float* D,      // (B,NH,T)
                                 int T, int C, int NH, float scale, int vec) {
    typedef AttentionTile<HD> F;
    constexpr int BR = F::BR, KT = HD / 16, NS = BR / 8, NO = HD / 8;
    EXTERN_SHARED(char, smem);
    char* p = smem + (-(uintptr_t)smem & 127);  // aligned up to 128 bytes, still a pointer into shared memory
    floatX* Q = attention_carve<floatX>(p, F::X);   // (BR, LDX)
    floatX* dY = attention_carve<floatX>(p, F::X);  // (BR, LDX)
    floatX* K = attention_carve<floatX>(p, F::X);   // (BR, LDX) the current key tile
    floatX* V = attention_carve<floatX>(p, F::X);   // (BR, LDX)
    AttentionHead hd = attention_head(NH, T);
    int hs = C / NH, lane = threadIdx.x % 32, r0 = threadIdx.x / 32 * 16, tq = lane % 4;
    int i = (int)(gridDim.y - 1 - blockIdx.y), q0 = i * BR;
    int t0 = q0 + r0 + lane / 4;  // this lane's rows: t0 and t0 + 8
    const floatX* qkv = inp + hd.tok * 3 * C + hd.h * hs;
    attention_load_tile<HD>(Q, qkv, 3 * (size_t)C, q0, T, hs, vec);
    attention_load_tile<HD>(dY, dout + hd.tok * C + hd.h * hs, (size_t)C, q0, T, hs, vec);
    float Lr[2], Dr[2];  // lse and D of rows t0, t0 + 8
    for (int r = 0; r < 2; r++) {
        int t = t0 + 8 * r;
        Lr[r] = t < T ? lse[(size_t)hd.bh * T + t] : 0.0f;
        Dr[r] = t < T ? D[(size_t)hd.bh * T + t] : 0.0f;
    }
    float dq[NO][4];  // (16, HD)
    attention_mma_zero<NO>(dq);
    for (int j = 0; j <= i; j++) {
        int k0 = j * BR;
        __syncthreads();  // every warp is done with the previous K, V (the first time: Q, dY loaded)
        attention_load_tile<HD>(K, qkv + C, 3 * (size_t)C, k0, T, hs, vec);
        attention_load_tile<HD>(V, qkv + 2 * C, 3 * (size_t)C, k0, T, hs, vec);
        __syncthreads();
        float s[NS][4], dp[NS][4];  // (16, BR): S, then dP and dS
        attention_mma_qkt2<KT, NS, F::LDX>(s, Q + r0 * F::LDX, K, dp, dY + r0 * F::LDX, V);  // S = Q K^T, dP = dY V^T
        for (int n = 0; n < NS; n++)
            for (int e = 0; e < 4; e++) {  // dS = P (dP - D), P = e^(scale S - lse) recomputed
                int r = e >> 1, t = t0 + 8 * r, key = k0 + n * 8 + 2 * tq + (e & 1);
                float pv = key <= t && key < T && t < T ? expf(s[n][e] * scale - Lr[r]) : 0.0f;
                dp[n][e] = pv * (dp[n][e] - Dr[r]);
            }
        attention_mma_pv<BR / 16, NO, F::LDX>(dq, dp, K);  // dQ += dS K, dS rounded
    }
    for (int r = 0; r < 2; r++) {
        int t = t0 + 8 * r;
        if (t >= T) continue;
        floatX* dst = dinp + (hd.tok + t) * 3 * C + hd.h * hs;
        for (int d = 0; d < NO; d++)
            for (int h = 0; h < 2; h++) {
                int c = d * 8 + 2 * tq + h;
                if (c < hs) dst[c] = (floatX)(dq[d][2 * r + h] * scale);
            }
    }
}

#endif  // LLM_HAS_KERNELS && !ENABLE_FP32
