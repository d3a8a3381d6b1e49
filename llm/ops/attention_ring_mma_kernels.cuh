// attention_ring_mma_kernels.cuh: ring attention's block-pair kernels of the 16-bit builds (BF16, FP16) on tensor
// cores: the forward merge of one (query block, key block) pair into the online-softmax accumulators O, m, l, and the
// backward's dk/dv and dq of one pair, written on the fused attention kernels' tile code (attention_mma_kernels.cuh:
// attention_mma_qkt, attention_mma_qkt2, attention_mma_softmax_tile, attention_mma_pv, attention_mma_pv2, the tiles
// and loads of attention_kernels.cuh). The ops, their layouts, the CPU reference and the launchers are in
// attention_ring.cuh; the FP32 build keeps the scalar kernels of attention_ring_kernels.cuh (no tensor core takes
// FP32 operands).
//
// What differs from the fused kernels:
//   - the operands are rows buffers (attention_ring.cuh: element (b, t, h, c) at base + b*bs + t*ts + h*hs + c), the
//     queries' rows bounded by nq, the keys' by nk, with nq != nk allowed off the diagonal;
//   - the mask: causal (the diagonal pair, nq == nk, query i sees keys j <= i) or none (a pair below the diagonal:
//     every key before every query), and the key tiles above the diagonal skipped in the causal pair only;
//   - the products with an FP32 accumulator as the A operand (P V, P^T dY, dS^T Q, dS K) take it as three floatX
//     terms (NT = RING_MMA_TERMS = 3, attention_mma_kernels.cuh): exact in BF16 (and in FP16 but for values under
//     2^-14, to 2^-47), so the pairs keep the precision of their FP32 CPU reference (attention_ring.cuh), which the
//     ring's merges and test/test_attention_ring.cu's bounds assume, where the fused kernels round P and dS once
//     (attention_x16_cpu.h); with one term (rounded once) the op-by-op check fails by 20 to 60 times its bound,
//     with two (16 or 22 bits) the errors are 5x those of three and no longer covered by the bound's derivation.
//     Cost: 3 MMAs for each of those products, so a pair's forward does 4 tile products where the fused forward does
//     2, its backward 13 where the fused does 7 (both recompute S and dP for dq), and registers (HD 64, sm_90:
//     forward 160, dk/dv 183, dq 129, against the fused kernels' 128, 166, 128; dk/dv at HD 128 spills 40 to 88
//     bytes a thread: docs/kernels.md);
//   - the forward merges the pair's (O~, m~, l~) into the running (O, m, l) as the scalar kernel does (an empty part
//     gets the factor 0) instead of finishing out and lse; the backward adds (+=) into FP32 dq, dk, dv (the ring's
//     accumulators) instead of writing floatX gradients, and a row with lse = -inf (no key in the forward) gets
//     P = 0 (no gradient), as the CPU reference skips it.
// Tiles of BR = 64 rows, 4 warps of 16 rows a block, as the fused kernels (AttentionTile<HD>, HD = hs rounded up to
// 16, 32, 64 or 128), with the same dynamic shared memory (F::FORWARD, F::DKDV, F::DQ). Every output row has one
// writer (the lanes of one warp, each its own columns) and every sum a fixed order: no atomics, the same bits every
// run.
#pragma once
#include "../core/common.h"
#if LLM_HAS_KERNELS && !defined(ENABLE_FP32)
#include "../core/cuda_utils.cuh"
#include "../core/mma_ptx.cuh"
#include "attention_kernels.cuh"      // AttentionTile, attention_carve, attention_load_tile
#include "attention_mma_kernels.cuh"  // the tile code

#define RING_MMA_TERMS 3  // floatX terms of an FP32 A operand (attention_mma_split_a): exact in BF16

// the forward of one block pair, merged into (O, m, l). grid (ceil(nq / BR), B*H), F::WARPS warps, F::FORWARD bytes of
// dynamic shared memory. Query tile i = blockIdx.x against the key tiles [0, i] (causal) or all (none); reads the
// tile's rows of q and the (b, h) slice of k, v; reads and writes the tile's rows of O (B,H,nq,hs), m, l (B,H,nq).
template <int HD>
__global__ void __launch_bounds__(AttentionTile<HD>::WARPS * 32)
attention_pair_forward_mma_kernel(float* O, float* m, float* l, const floatX* q, size_t q_bs, size_t q_ts,
                                  const floatX* k, const floatX* v, size_t kv_bs, size_t kv_ts,
                                  int H, int hs, int nq, int nk, int causal, float scale, int vec) {
    typedef AttentionTile<HD> F;
    constexpr int BR = F::BR, KT = HD / 16, NS = BR / 8, NO = HD / 8;
    EXTERN_SHARED(char, smem);
    char* p = smem + (-(uintptr_t)smem & 127);  // aligned up to 128 bytes, still a pointer into shared memory
    floatX* Q = attention_carve<floatX>(p, F::X);  // (BR, LDX)
    floatX* K = attention_carve<floatX>(p, F::X);  // (BR, LDX) the current key tile
    floatX* V = attention_carve<floatX>(p, F::X);  // (BR, LDX)
    int b = blockIdx.y / H, h = blockIdx.y % H, lane = threadIdx.x % 32, r0 = threadIdx.x / 32 * 16, tq = lane % 4;
    int i = (int)blockIdx.x, q0 = i * BR;
    int t0 = q0 + r0 + lane / 4;  // this lane's rows: t0 and t0 + 8
    size_t ch = (size_t)h * hs;
    const floatX* kb = k + (size_t)b * kv_bs + ch;
    const floatX* vb = v + (size_t)b * kv_bs + ch;
    attention_load_tile<HD>(Q, q + (size_t)b * q_bs + ch, q_ts, q0, nq, hs, vec);
    __syncthreads();
    uint32_t qa[KT][4];  // the warp's 16 rows of Q, as A fragments
    for (int kk = 0; kk < KT; kk++) mma_load_a(qa[kk], Q + r0 * F::LDX + kk * 16, F::LDX);
    float o[NO][4];  // (16, HD) this pair's unnormalised output
    attention_mma_zero<NO>(o);
    float mb[2] = {-INFINITY, -INFINITY}, lb[2] = {0.0f, 0.0f};  // this pair's running max and sum, rows t0, t0 + 8
    int jend = causal ? i : (nk - 1) / BR;  // the last key tile: the diagonal (causal: nq == nk, the same tiles) or the last
    for (int j = 0; j <= jend; j++) {
        __syncthreads();  // every warp is done with the previous K, V
        attention_load_tile<HD>(K, kb, kv_ts, j * BR, nk, hs, vec);
        attention_load_tile<HD>(V, vb, kv_ts, j * BR, nk, hs, vec);
        __syncthreads();
        float s[NS][4];  // (16, BR) scores, then P
        attention_mma_qkt<KT, NS, F::LDX>(s, qa, K);  // S = Q K^T
        // key j*BR is unmasked for every row: j <= i where causal, j*BR < nk always
        attention_mma_softmax_tile<NS, NO>(s, o, mb, lb, t0, j * BR, nk, causal, scale);
        attention_mma_pv<BR / 16, NO, F::LDX, RING_MMA_TERMS>(o, s, V);  // O += P V, P in three floatX terms
    }
    // the merge into the accumulators (attention_merge_cpu's rules): every lane of a row's quad reads m, l before one writes
    float mo[2], lo[2];
    size_t row[2];
    for (int r = 0; r < 2; r++) {
        int t = t0 + 8 * r;
        row[r] = (size_t)blockIdx.y * nq + t;  // (b, h, t) of the dense accumulators
        mo[r] = t < nq ? m[row[r]] : -INFINITY;
        lo[r] = t < nq ? l[row[r]] : 0.0f;
    }
    __syncwarp();
    for (int r = 0; r < 2; r++) {
        if (t0 + 8 * r >= nq) continue;
        float mi = fmaxf(mo[r], mb[r]);
        float a1 = mo[r] == -INFINITY ? 0.0f : expf(mo[r] - mi);  // rescales the accumulated part to the common max
        float a2 = mb[r] == -INFINITY ? 0.0f : expf(mb[r] - mi);  // and this pair's part
        float* Or = O + row[r] * hs;
        for (int d = 0; d < NO; d++)
            for (int e = 0; e < 2; e++) {
                int c = d * 8 + 2 * tq + e;
                if (c < hs) Or[c] = Or[c] * a1 + o[d][2 * r + e] * a2;
            }
        if (tq == 0) { m[row[r]] = mi; l[row[r]] = lo[r] * a1 + lb[r] * a2; }
    }
}

// the row values lse, D of query tile q0 into (BR) shared arrays: lse -inf past nq (no gradient), D 0. The whole block.
template <int HD>
__device__ __forceinline__ void ring_load_rows_f32(float* L, float* Dq, const float* lse, const float* D, int q0, int nq) {
    for (int r = threadIdx.x; r < AttentionTile<HD>::BR; r += blockDim.x) {
        L[r] = q0 + r < nq ? lse[q0 + r] : -INFINITY;
        Dq[r] = q0 + r < nq ? D[q0 + r] : 0.0f;
    }
}

// the backward's dk, dv of one block pair. grid (ceil(nk / BR), B*H), F::WARPS warps, F::DKDV bytes of dynamic shared
// memory. Key tile j = blockIdx.x over the query tiles [j, last] (causal) or all: P^T and dS^T recomputed from lse and D
// (rows (b,h) at lse + (b*H + h)*ls), dV += P^T dY, dK += dS^T Q; adds (+=) scale dK and dV into the tile's rows of dk, dv.
template <int HD>
__global__ void __launch_bounds__(AttentionTile<HD>::WARPS * 32)
attention_pair_backward_dkdv_mma_kernel(float* dk, float* dv, size_t dkv_bs, size_t dkv_ts, const floatX* dout, size_t o_bs,
                                        size_t o_ts, const float* lse, const float* D, size_t ls, const floatX* q, size_t q_bs,
                                        size_t q_ts, const floatX* k, const floatX* v, size_t kv_bs, size_t kv_ts,
                                        int H, int hs, int nq, int nk, int causal, float scale, int vec) {
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
    int b = blockIdx.y / H, h = blockIdx.y % H, lane = threadIdx.x % 32, r0 = threadIdx.x / 32 * 16, tq = lane % 4;
    int j = (int)blockIdx.x, k0 = j * BR;
    int key0 = k0 + r0 + lane / 4;  // this lane's keys: key0 and key0 + 8
    size_t ch = (size_t)h * hs;
    const floatX* qb = q + (size_t)b * q_bs + ch;
    const floatX* dyb = dout + (size_t)b * o_bs + ch;
    const float* lb = lse + (size_t)blockIdx.y * ls;
    const float* Db = D + (size_t)blockIdx.y * ls;
    attention_load_tile<HD>(K, k + (size_t)b * kv_bs + ch, kv_ts, k0, nk, hs, vec);
    attention_load_tile<HD>(V, v + (size_t)b * kv_bs + ch, kv_ts, k0, nk, hs, vec);
    float adk[NO][4], adv[NO][4];  // (16, HD) each
    attention_mma_zero<NO>(adk);
    attention_mma_zero<NO>(adv);
    int ntiles = (nq + BR - 1) / BR;
    for (int i = causal ? j : 0; i < ntiles; i++) {  // causal: the query tiles before the diagonal see none of these keys
        int q0 = i * BR;
        __syncthreads();  // every warp is done with the previous Q, dY, L, D
        attention_load_tile<HD>(Q, qb, q_ts, q0, nq, hs, vec);
        attention_load_tile<HD>(dY, dyb, o_ts, q0, nq, hs, vec);
        ring_load_rows_f32<HD>(L, Dq, lb, Db, q0, nq);
        __syncthreads();
        float pt[NS][4], dpt[NS][4];  // (16 keys, BR queries): S^T then P^T; dP^T then dS^T
        attention_mma_qkt2<KT, NS, F::LDX>(pt, K + r0 * F::LDX, Q, dpt, V + r0 * F::LDX, dY);  // S^T = K Q^T, dP^T = V dY^T
        for (int n = 0; n < NS; n++)
            for (int e = 0; e < 4; e++) {  // P^T = e^(scale S^T - lse): 0 where masked, past nq or nk, or lse = -inf
                int key = key0 + (e >> 1) * 8, c = n * 8 + 2 * tq + (e & 1), t = q0 + c;
                float pv = (!causal || t >= key) && key < nk && L[c] != -INFINITY ? expf(pt[n][e] * scale - L[c]) : 0.0f;
                pt[n][e] = pv;
                dpt[n][e] = pv * (dpt[n][e] - Dq[c]);  // dS^T = P^T (dP^T - D)
            }
        // dV += P^T dY, dK += dS^T Q, each A operand in three floatX terms
        attention_mma_pv2<BR / 16, NO, F::LDX, RING_MMA_TERMS>(adv, pt, dY, adk, dpt, Q);
    }
    for (int r = 0; r < 2; r++) {
        int key = key0 + 8 * r;
        if (key >= nk) continue;
        float* dkj = dk + (size_t)b * dkv_bs + (size_t)key * dkv_ts + ch;
        float* dvj = dv + (size_t)b * dkv_bs + (size_t)key * dkv_ts + ch;
        for (int d = 0; d < NO; d++)
            for (int e = 0; e < 2; e++) {
                int c = d * 8 + 2 * tq + e;
                if (c < hs) {
                    dkj[c] += adk[d][2 * r + e] * scale;
                    dvj[c] += adv[d][2 * r + e];
                }
            }
    }
}

// the backward's dq of one block pair. grid (ceil(nq / BR), B*H), F::WARPS warps, F::DQ bytes of dynamic shared memory.
// Query tile i = blockIdx.x over the key tiles [0, i] (causal) or all: P and dS recomputed, dQ += dS K; adds (+=)
// scale dQ into the tile's rows of dq.
template <int HD>
__global__ void __launch_bounds__(AttentionTile<HD>::WARPS * 32)
attention_pair_backward_dq_mma_kernel(float* dq, size_t dq_bs, size_t dq_ts, const floatX* dout, size_t o_bs, size_t o_ts,
                                      const float* lse, const float* D, size_t ls, const floatX* q, size_t q_bs, size_t q_ts,
                                      const floatX* k, const floatX* v, size_t kv_bs, size_t kv_ts,
                                      int H, int hs, int nq, int nk, int causal, float scale, int vec) {
    typedef AttentionTile<HD> F;
    constexpr int BR = F::BR, KT = HD / 16, NS = BR / 8, NO = HD / 8;
    EXTERN_SHARED(char, smem);
    char* p = smem + (-(uintptr_t)smem & 127);  // aligned up to 128 bytes, still a pointer into shared memory
    floatX* Q = attention_carve<floatX>(p, F::X);   // (BR, LDX)
    floatX* dY = attention_carve<floatX>(p, F::X);  // (BR, LDX)
    floatX* K = attention_carve<floatX>(p, F::X);   // (BR, LDX) the current key tile
    floatX* V = attention_carve<floatX>(p, F::X);   // (BR, LDX)
    int b = blockIdx.y / H, h = blockIdx.y % H, lane = threadIdx.x % 32, r0 = threadIdx.x / 32 * 16, tq = lane % 4;
    int i = (int)blockIdx.x, q0 = i * BR;
    int t0 = q0 + r0 + lane / 4;  // this lane's rows: t0 and t0 + 8
    size_t ch = (size_t)h * hs;
    const floatX* kb = k + (size_t)b * kv_bs + ch;
    const floatX* vb = v + (size_t)b * kv_bs + ch;
    attention_load_tile<HD>(Q, q + (size_t)b * q_bs + ch, q_ts, q0, nq, hs, vec);
    attention_load_tile<HD>(dY, dout + (size_t)b * o_bs + ch, o_ts, q0, nq, hs, vec);
    float Lr[2], Dr[2];  // lse and D of rows t0, t0 + 8 (lse -inf past nq: no gradient)
    for (int r = 0; r < 2; r++) {
        int t = t0 + 8 * r;
        Lr[r] = t < nq ? lse[(size_t)blockIdx.y * ls + t] : -INFINITY;
        Dr[r] = t < nq ? D[(size_t)blockIdx.y * ls + t] : 0.0f;
    }
    float adq[NO][4];  // (16, HD)
    attention_mma_zero<NO>(adq);
    int jend = causal ? i : (nk - 1) / BR;
    for (int j = 0; j <= jend; j++) {
        int k0 = j * BR;
        __syncthreads();  // every warp is done with the previous K, V (the first time: Q, dY loaded)
        attention_load_tile<HD>(K, kb, kv_ts, k0, nk, hs, vec);
        attention_load_tile<HD>(V, vb, kv_ts, k0, nk, hs, vec);
        __syncthreads();
        float s[NS][4], dp[NS][4];  // (16, BR): S, then dP and dS
        attention_mma_qkt2<KT, NS, F::LDX>(s, Q + r0 * F::LDX, K, dp, dY + r0 * F::LDX, V);  // S = Q K^T, dP = dY V^T
        for (int n = 0; n < NS; n++)
            for (int e = 0; e < 4; e++) {  // dS = P (dP - D), P = e^(scale S - lse) recomputed (0 where masked)
                int r = e >> 1, t = t0 + 8 * r, key = k0 + n * 8 + 2 * tq + (e & 1);
                float pv = (!causal || key <= t) && key < nk && Lr[r] != -INFINITY ? expf(s[n][e] * scale - Lr[r]) : 0.0f;
                dp[n][e] = pv * (dp[n][e] - Dr[r]);
            }
        attention_mma_pv<BR / 16, NO, F::LDX, RING_MMA_TERMS>(adq, dp, K);  // dQ += dS K, dS in three floatX terms
    }
    for (int r = 0; r < 2; r++) {
        int t = t0 + 8 * r;
        if (t >= nq) continue;
        float* dqi = dq + (size_t)b * dq_bs + (size_t)t * dq_ts + ch;
        for (int d = 0; d < NO; d++)
            for (int e = 0; e < 2; e++) {
                int c = d * 8 + 2 * tq + e;
                if (c < hs) dqi[c] += adq[d][2 * r + e] * scale;
            }
    }
}

#endif  // LLM_HAS_KERNELS && !ENABLE_FP32
