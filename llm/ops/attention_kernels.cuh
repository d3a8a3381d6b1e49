// attention_kernels.cuh: the fused causal attention kernels of the FP32 CUDA build (tile products on
// CUDA cores: no tensor core takes FP32 operands), the tiles and helpers they share with the 16-bit
// builds' tensor-core kernels (attention_mma_kernels.cuh), and the backward's row dot products D of
// both. The CPU reference, the decode kernel and the launchers are in llm/ops/attention.cuh. In their own
// file because the kernels and their shared-memory tiling are one concern a reader takes in at once,
// beside the paper.
//
// CUDA kernels: fused causal attention (Dao 2023, "FlashAttention-2", Algorithm 1 for the forward,
// Algorithm 2 for the backward, with its work split: section 3.2)
//
// Every kernel works on tiles of BR positions of one head (b, h): BR = 64 for 16-bit floatX (the mma
// kernels keep scores and accumulators in registers, so their shared memory is the floatX tiles alone:
// 4 x 64 x (HD + 8) x 2 bytes, 70 KiB at HD 128), 32 in FP32, where these kernels keep S, P and the
// accumulators in shared memory (the backward's dk/dv needs 76 KiB at HD 64), 16 rows per warp,
// BR/16 warps. A tile's q, k, v (and dy) rows are
// copied from the model's token layout (B,T,3C) into shared memory (no permute), zero-padded past T
// and past hs to HD, the head size rounded up to 16 (16, 32, 64 or 128). Tile products here run
// through attention_warp_mma: plain FP32 loops. Each warp owns 16 rows of every tile it
// computes, so within a tile the warps only meet at the __syncthreads around the tile loads.
//
//   forward  (grid: query tiles x B*NH): for query tile i, for key tiles j = 0..i (the tiles above the
//            diagonal skipped): S = Q K_j^T; per row the online softmax (running max m, sum l, the
//            output rescaled by e^(m_old - m_new)); O += P V_j with P rounded to floatX. Then
//            out = O / l and lse = m + log l. Neither S nor P leaves shared memory.
//   backward, FlashAttention-2's split without atomics, so the gradients are the same bits on every
//            run: D = rowsum(dy * out) first (one warp per row), then
//     dk, dv (grid: key tiles x B*NH): for key tile j, for query tiles i = j..last: P^T = e^(S^T - lse)
//            recomputed, dV += P^T dY; dP^T = V dY^T; dS^T = P^T (dP^T - D); dK += dS^T Q
//     dq     (grid: query tiles x B*NH): for query tile i, for key tiles j = 0..i: P and dS again,
//            dQ += dS K. FlashAttention-2 adds dQ from the dk/dv kernel with atomics instead, saving
//            the second recomputation (2 of the backward's 5 tile products) at the price of
//            run-to-run differences in the last bits; resume, recompute and layout tests compare bits.
// Blocks start from the longest rows (the last query tiles, the first key tiles).
//
// Traffic, GPT-2 124M at B = 64, T = 1024, BF16, per layer: the forward reads q, k, v (k and v once
// per query tile that needs them: 8.5 times on average at T/BR = 16 tiles, mostly from L2) and writes
// out and lse; no (B,NH,T,T) tensor (1.61 GB each, 11.7 GB per layer moved by the unfused path,
// dev/cuda/attention_unfused.cuh).
//
// What neither these nor the mma kernels do that FlashAttention-3 (Shah et al. 2024) does on Hopper:
// warp specialisation (producer warps loading tiles with TMA while consumer warps compute,
// asynchronously), wgmma (warpgroup products straight from shared memory), FP8 tiles, and overlapping
// the softmax of one tile with the products of the next (ping-pong scheduling). The paper reports
// 1.5-2x over FlashAttention-2 on H100 in BF16 from these.
#pragma once
#include <type_traits>
#include "../core/common.h"
#if LLM_HAS_KERNELS
#include "../core/cuda_utils.cuh"


// the tile shape for a head size rounded up to HD
template <int HD>
struct AttentionTile {
    static constexpr int HDIM = HD;
    static constexpr int BR = sizeof(floatX) == 2 ? 64 : 32;  // positions per tile (above)
    static constexpr int WARPS = BR / 16;
    // row strides in elements, padded by 16 bytes (32 for FP32 S) against shared memory bank conflicts;
    // they keep every 16-row, 16-column fragment 32-byte aligned, as WMMA wants
    static constexpr int LDX = HD + 8;  // floatX (BR, HD) tiles: q, k, v, dy
    static constexpr int LDS = BR + 8;  // float (BR, BR) scores, dP
    static constexpr int LDP = BR + 8;  // floatX (BR, BR) probabilities, dS
    static constexpr int LDO = HD + 8;  // float (BR, HD) accumulators: O, dQ, dK, dV
    static constexpr size_t X = (size_t)BR * LDX * sizeof(floatX), S = (size_t)BR * LDS * sizeof(float),
                            P = (size_t)BR * LDP * sizeof(floatX), O = (size_t)BR * LDO * sizeof(float),
                            R = (size_t)BR * sizeof(float);
    // dynamic shared memory of each kernel (+128: the base is aligned up to 128 bytes)
#if defined(ENABLE_FP32)
    static constexpr size_t FORWARD = 3 * X + S + P + O + 2 * R + 128;       // q, k, v, S, P, O, m, l
    static constexpr size_t DKDV = 4 * X + 2 * S + 2 * P + 2 * O + 2 * R + 128;  // k, v, q, dy, S, dP, P, dS, dK, dV, lse, D
    static constexpr size_t DQ = 4 * X + 2 * S + P + O + 2 * R + 128;        // q, dy, k, v, S, dP, dS, dQ, lse, D
#else  // the mma kernels: the rest lives in registers
    static constexpr size_t FORWARD = 3 * X + 128;         // q, k, v
    static constexpr size_t DKDV = 4 * X + 2 * R + 128;    // k, v, q, dy, lse, D
    static constexpr size_t DQ = 4 * X + 128;              // q, dy, k, v
#endif
};

// the next buffer of `bytes` from the shared memory cursor p (every buffer starts 128-byte aligned)
template <class T>
__device__ __forceinline__ T* attention_carve(char*& p, size_t bytes) {
    T* r = (T*)p;
    p += (bytes + 127) / 128 * 128;
    return r;
}

// rows [r0, r0 + BR) of one head's q, k, v or dy (position t at src + t * stride, hs elements) into a
// (BR, LDX) tile, zeros past T and past hs. The whole block calls it. vec: 128-bit copies (hs a
// multiple of x128::size and src 16-byte aligned, checked by the launcher).
template <int HD>
__device__ __forceinline__ void attention_load_tile(floatX* dst, const floatX* src, size_t stride, int r0, int T,
                                                    int hs, int vec) {
    typedef AttentionTile<HD> F;
    if (vec) {
        const int V = x128::size, CH = HD / V;  // chunks per row
        for (int e = threadIdx.x; e < F::BR * CH; e += blockDim.x) {
            int r = e / CH, c = (e % CH) * V, t = r0 + r;
            x128 x = x128::constant((floatX)0.0f);
            if (t < T && c < hs) x = load128(src + (size_t)t * stride + c);
            store128(dst + r * F::LDX + c, x);
        }
    } else {
        for (int e = threadIdx.x; e < F::BR * HD; e += blockDim.x) {
            int r = e / HD, c = e % HD, t = r0 + r;
            dst[r * F::LDX + c] = (t < T && c < hs) ? src[(size_t)t * stride + c] : (floatX)0.0f;
        }
    }
}

// the backward's query tile from q0: q and dy into (BR, LDX) tiles, the rows' lse and D (0 past T). The
// whole block calls it.
template <int HD>
__device__ __forceinline__ void attention_load_query_tile(floatX* Q, floatX* dY, float* L, float* Dq, const floatX* qkv,
                                                          const floatX* dy, const float* lse, const float* D, int bh, int q0,
                                                          int T, int C, int hs, int vec) {
    attention_load_tile<HD>(Q, qkv, 3 * (size_t)C, q0, T, hs, vec);
    attention_load_tile<HD>(dY, dy, (size_t)C, q0, T, hs, vec);
    for (int r = threadIdx.x; r < AttentionTile<HD>::BR; r += blockDim.x) {
        L[r] = q0 + r < T ? lse[(size_t)bh * T + q0 + r] : 0.0f;
        Dq[r] = q0 + r < T ? D[(size_t)bh * T + q0 + r] : 0.0f;
    }
}

// One warp: D (16, N) = (acc ? D : 0) + A B, D float row-major (row stride ldd), A (16, K) floatX row-major
// (lda), B (K, N) floatX: B[k][n] = b[k * ldb + n] (BT false) or b[n * ldb + k] (BT true: the transpose
// of a row-major (N, K) tile, e.g. K^T from the k tile). Ends with __syncwarp, so every lane then sees
// all of D. Plain FP32 loops (the FP32 build).
template <int N, int K, bool BT>
__device__ __forceinline__ void attention_warp_mma(float* d, int ldd, const floatX* a, int lda, const floatX* b, int ldb,
                                                   bool acc) {
    for (int e = threadIdx.x % 32; e < 16 * N; e += 32) {
        int r = e / N, n = e % N;
        float s = acc ? d[r * ldd + n] : 0.0f;
        for (int k = 0; k < K; k++) s += (float)a[r * lda + k] * (float)(BT ? b[n * ldb + k] : b[k * ldb + n]);
        d[r * ldd + n] = s;
    }
    __syncwarp();
}

// the (b, h) of this block and its head's pointers
struct AttentionHead {
    int b, h, bh;
    size_t tok;  // offset of (b, t = 0) in the token layout, in rows
};

__device__ __forceinline__ AttentionHead attention_head(int NH, int T) {
    AttentionHead r;
    r.bh = blockIdx.x;
    r.b = r.bh / NH;
    r.h = r.bh % NH;
    r.tok = (size_t)r.b * T;
    return r;
}

template <int HD>
__global__ void __launch_bounds__(AttentionTile<HD>::WARPS * 32)
attention_forward_kernel(floatX* out,        // (B,T,C)
                         float* lse,         // (B,NH,T)
                         const floatX* inp,  // (B,T,3C)
                         int T, int C, int NH, float scale, int vec) {
    typedef AttentionTile<HD> F;
    const int BR = F::BR;
    EXTERN_SHARED(char, smem);
    char* p = smem + (-(uintptr_t)smem & 127);  // aligned up to 128 bytes, still a pointer into shared memory
    floatX* Q = attention_carve<floatX>(p, F::X);  // (BR, LDX)
    floatX* K = attention_carve<floatX>(p, F::X);  // (BR, LDX)
    floatX* V = attention_carve<floatX>(p, F::X);  // (BR, LDX)
    float* S = attention_carve<float>(p, F::S);    // (BR, LDS) scores of the current key tile
    floatX* P = attention_carve<floatX>(p, F::P);  // (BR, LDP) their probabilities, rounded
    float* O = attention_carve<float>(p, F::O);    // (BR, LDO) unnormalised output
    float* m = attention_carve<float>(p, F::R);    // (BR) running max of the scaled scores
    float* l = attention_carve<float>(p, F::R);    // (BR) running sum of e^(score - m)
    AttentionHead hd = attention_head(NH, T);
    int hs = C / NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;
    int i = (int)(gridDim.y - 1 - blockIdx.y), q0 = i * BR;  // the longest rows first
    const floatX* qkv = inp + hd.tok * 3 * C + hd.h * hs;
    attention_load_tile<HD>(Q, qkv, 3 * (size_t)C, q0, T, hs, vec);
    for (int e = threadIdx.x; e < BR * HD; e += blockDim.x) O[(e / HD) * F::LDO + e % HD] = 0.0f;
    for (int r = threadIdx.x; r < BR; r += blockDim.x) { m[r] = -INFINITY; l[r] = 0.0f; }
    for (int j = 0; j <= i; j++) {
        __syncthreads();  // every warp is done with the previous K, V
        attention_load_tile<HD>(K, qkv + C, 3 * (size_t)C, j * BR, T, hs, vec);
        attention_load_tile<HD>(V, qkv + 2 * C, 3 * (size_t)C, j * BR, T, hs, vec);
        __syncthreads();
        attention_warp_mma<BR, HD, true>(S + r0 * F::LDS, F::LDS, Q + r0 * F::LDX, F::LDX, K, F::LDX, false);  // S = Q K^T
        // the online softmax of the warp's 16 rows. Row t always has key j*BR <= t unmasked (j <= i),
        // so the new max is finite and the rescale factor e^(m_old - m_new) is 0 on the first tile.
        for (int r = r0; r < r0 + 16; r++) {
            int t = q0 + r;
            float x[BR / 32], mx = -INFINITY;
            for (int c = 0; c < BR / 32; c++) {
                int key = j * BR + lane + 32 * c;
                x[c] = key <= t && key < T ? S[r * F::LDS + lane + 32 * c] * scale : -INFINITY;
                mx = fmaxf(mx, x[c]);
            }
            float m_old = m[r], m_new = fmaxf(m_old, warp_reduce_max(mx)), sum = 0.0f;
            for (int c = 0; c < BR / 32; c++) {
                float e = expf(x[c] - m_new);
                sum += e;
                P[r * F::LDP + lane + 32 * c] = (floatX)e;
            }
            float alpha = expf(m_old - m_new);
            sum = warp_reduce_sum(sum);  // every lane has read m[r] and l[r] before lane 0 writes them
            if (lane == 0) { m[r] = m_new; l[r] = l[r] * alpha + sum; }
            for (int c = lane; c < HD; c += 32) O[r * F::LDO + c] *= alpha;
        }
        __syncwarp();
        attention_warp_mma<HD, BR, false>(O + r0 * F::LDO, F::LDO, P + r0 * F::LDP, F::LDP, V, F::LDX, true);  // O += P V
    }
    for (int r = r0; r < r0 + 16; r++) {
        int t = q0 + r;
        if (t >= T) break;
        float inv = 1.0f / l[r];
        floatX* o = out + (hd.tok + t) * C + hd.h * hs;
        for (int c = lane; c < hs; c += 32) o[c] = (floatX)(O[r * F::LDO + c] * inv);
        if (lane == 0) lse[(size_t)hd.bh * T + t] = m[r] + logf(l[r]);
    }
}

// D[b,h,t] = sum_c dy[b,t,h,c] out[b,t,h,c] (= sum_t2 p dp, the softmax backward's row dot product):
// one warp per (b, h, t)
__global__ void attention_backward_dot_kernel(float* D,             // (B,NH,T)
                                              const floatX* dout,   // (B,T,C)
                                              const floatX* out,    // (B,T,C)
                                              int B, int T, int C, int NH) {
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // (b*NH + h)*T + t
    if (row >= (size_t)B * NH * T) return;
    int lane = threadIdx.x % 32, hs = C / NH, t = (int)(row % T), bh = (int)(row / T);
    size_t o = ((size_t)(bh / NH) * T + t) * C + (size_t)(bh % NH) * hs;
    float s = 0.0f;
    for (int c = lane; c < hs; c += 32) s += (float)dout[o + c] * (float)out[o + c];
    s = warp_reduce_sum(s);
    if (lane == 0) D[row] = s;
}

// dk and dv of key tile j = blockIdx.y, over the query tiles i >= j
template <int HD>
__global__ void __launch_bounds__(AttentionTile<HD>::WARPS * 32)
attention_backward_dkdv_kernel(floatX* dinp,        // (B,T,3C): its k and v parts written
                               const floatX* dout,  // (B,T,C)
                               const floatX* inp,   // (B,T,3C)
                               const float* lse,    // (B,NH,T)
                               const float* D,      // (B,NH,T)
                               int T, int C, int NH, float scale, int vec) {
    typedef AttentionTile<HD> F;
    const int BR = F::BR;
    EXTERN_SHARED(char, smem);
    char* p = smem + (-(uintptr_t)smem & 127);  // aligned up to 128 bytes, still a pointer into shared memory
    floatX* K = attention_carve<floatX>(p, F::X);    // (BR, LDX) this block's keys
    floatX* V = attention_carve<floatX>(p, F::X);    // (BR, LDX)
    floatX* Q = attention_carve<floatX>(p, F::X);    // (BR, LDX) the current query tile
    floatX* dY = attention_carve<floatX>(p, F::X);   // (BR, LDX)
    float* Pt = attention_carve<float>(p, F::S);     // (BR, LDS) P^T (keys x queries)
    float* dPt = attention_carve<float>(p, F::S);    // (BR, LDS) dP^T
    floatX* Ptx = attention_carve<floatX>(p, F::P);  // (BR, LDP) P^T rounded
    floatX* dSt = attention_carve<floatX>(p, F::P);  // (BR, LDP) dS^T rounded
    float* dK = attention_carve<float>(p, F::O);     // (BR, LDO)
    float* dV = attention_carve<float>(p, F::O);     // (BR, LDO)
    float* L = attention_carve<float>(p, F::R);      // (BR) lse of the query tile
    float* Dq = attention_carve<float>(p, F::R);     // (BR) D of the query tile
    AttentionHead hd = attention_head(NH, T);
    int hs = C / NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;
    int j = blockIdx.y, k0 = j * BR, ntiles = (int)gridDim.y;  // key tile j has ntiles - j query tiles: first blocks longest
    const floatX* qkv = inp + hd.tok * 3 * C + hd.h * hs;
    const floatX* dy = dout + hd.tok * C + hd.h * hs;
    attention_load_tile<HD>(K, qkv + C, 3 * (size_t)C, k0, T, hs, vec);
    attention_load_tile<HD>(V, qkv + 2 * C, 3 * (size_t)C, k0, T, hs, vec);
    for (int e = threadIdx.x; e < BR * HD; e += blockDim.x) dK[(e / HD) * F::LDO + e % HD] = dV[(e / HD) * F::LDO + e % HD] = 0.0f;
    for (int i = j; i < ntiles; i++) {
        int q0 = i * BR;
        __syncthreads();  // every warp is done with the previous Q, dY, L, D
        attention_load_query_tile<HD>(Q, dY, L, Dq, qkv, dy, lse, D, hd.bh, q0, T, C, hs, vec);
        __syncthreads();
        attention_warp_mma<BR, HD, true>(Pt + r0 * F::LDS, F::LDS, K + r0 * F::LDX, F::LDX, Q, F::LDX, false);  // S^T = K Q^T
        for (int e = lane; e < 16 * BR; e += 32) {  // P^T = e^(scale S^T - lse), 0 where the query is before the key or past T
            int r = r0 + e / BR, c = e % BR, key = k0 + r, t = q0 + c;
            float pv = t >= key && t < T && key < T ? expf(Pt[r * F::LDS + c] * scale - L[c]) : 0.0f;
            Pt[r * F::LDS + c] = pv;
            Ptx[r * F::LDP + c] = (floatX)pv;
        }
        __syncwarp();
        attention_warp_mma<HD, BR, false>(dV + r0 * F::LDO, F::LDO, Ptx + r0 * F::LDP, F::LDP, dY, F::LDX, true);  // dV += P^T dY
        attention_warp_mma<BR, HD, true>(dPt + r0 * F::LDS, F::LDS, V + r0 * F::LDX, F::LDX, dY, F::LDX, false);  // dP^T = V dY^T
        for (int e = lane; e < 16 * BR; e += 32) {  // dS^T = P^T (dP^T - D)
            int r = r0 + e / BR, c = e % BR;
            dSt[r * F::LDP + c] = (floatX)(Pt[r * F::LDS + c] * (dPt[r * F::LDS + c] - Dq[c]));
        }
        __syncwarp();
        attention_warp_mma<HD, BR, false>(dK + r0 * F::LDO, F::LDO, dSt + r0 * F::LDP, F::LDP, Q, F::LDX, true);  // dK += dS^T Q
    }
    for (int r = r0; r < r0 + 16; r++) {
        int key = k0 + r;
        if (key >= T) break;
        floatX* d = dinp + (hd.tok + key) * 3 * C + hd.h * hs;
        for (int c = lane; c < hs; c += 32) {
            d[C + c] = (floatX)(dK[r * F::LDO + c] * scale);
            d[2 * C + c] = (floatX)dV[r * F::LDO + c];
        }
    }
}

// dq of query tile i, over the key tiles j <= i
template <int HD>
__global__ void __launch_bounds__(AttentionTile<HD>::WARPS * 32)
attention_backward_dq_kernel(floatX* dinp,        // (B,T,3C): its q part written
                             const floatX* dout,  // (B,T,C)
                             const floatX* inp,   // (B,T,3C)
                             const float* lse,    // (B,NH,T)
                             const float* D,      // (B,NH,T)
                             int T, int C, int NH, float scale, int vec) {
    typedef AttentionTile<HD> F;
    const int BR = F::BR;
    EXTERN_SHARED(char, smem);
    char* p = smem + (-(uintptr_t)smem & 127);  // aligned up to 128 bytes, still a pointer into shared memory
    floatX* Q = attention_carve<floatX>(p, F::X);   // (BR, LDX)
    floatX* dY = attention_carve<floatX>(p, F::X);  // (BR, LDX)
    floatX* K = attention_carve<floatX>(p, F::X);   // (BR, LDX) the current key tile
    floatX* V = attention_carve<floatX>(p, F::X);   // (BR, LDX)
    float* S = attention_carve<float>(p, F::S);     // (BR, LDS)
    float* dP = attention_carve<float>(p, F::S);    // (BR, LDS)
    floatX* dS = attention_carve<floatX>(p, F::P);  // (BR, LDP) rounded
    float* dQ = attention_carve<float>(p, F::O);    // (BR, LDO)
    float* L = attention_carve<float>(p, F::R);     // (BR)
    float* Dq = attention_carve<float>(p, F::R);    // (BR)
    AttentionHead hd = attention_head(NH, T);
    int hs = C / NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * 16;
    int i = (int)(gridDim.y - 1 - blockIdx.y), q0 = i * BR;
    const floatX* qkv = inp + hd.tok * 3 * C + hd.h * hs;
    attention_load_query_tile<HD>(Q, dY, L, Dq, qkv, dout + hd.tok * C + hd.h * hs, lse, D, hd.bh, q0, T, C, hs, vec);
    for (int e = threadIdx.x; e < BR * HD; e += blockDim.x) dQ[(e / HD) * F::LDO + e % HD] = 0.0f;
    for (int j = 0; j <= i; j++) {
        int k0 = j * BR;
        __syncthreads();  // every warp is done with the previous K, V (the first time: Q, dY, L, D loaded)
        attention_load_tile<HD>(K, qkv + C, 3 * (size_t)C, k0, T, hs, vec);
        attention_load_tile<HD>(V, qkv + 2 * C, 3 * (size_t)C, k0, T, hs, vec);
        __syncthreads();
        attention_warp_mma<BR, HD, true>(S + r0 * F::LDS, F::LDS, Q + r0 * F::LDX, F::LDX, K, F::LDX, false);    // S = Q K^T
        attention_warp_mma<BR, HD, true>(dP + r0 * F::LDS, F::LDS, dY + r0 * F::LDX, F::LDX, V, F::LDX, false);  // dP = dY V^T
        for (int e = lane; e < 16 * BR; e += 32) {  // dS = P (dP - D), P = e^(scale S - lse) recomputed
            int r = r0 + e / BR, c = e % BR, t = q0 + r, key = k0 + c;
            float pv = key <= t && key < T && t < T ? expf(S[r * F::LDS + c] * scale - L[r]) : 0.0f;
            dS[r * F::LDP + c] = (floatX)(pv * (dP[r * F::LDS + c] - Dq[r]));
        }
        __syncwarp();
        attention_warp_mma<HD, BR, false>(dQ + r0 * F::LDO, F::LDO, dS + r0 * F::LDP, F::LDP, K, F::LDX, true);  // dQ += dS K
    }
    for (int r = r0; r < r0 + 16; r++) {
        int t = q0 + r;
        if (t >= T) break;
        floatX* d = dinp + (hd.tok + t) * 3 * C + hd.h * hs;
        for (int c = lane; c < hs; c += 32) d[c] = (floatX)(dQ[r * F::LDO + c] * scale);
    }
}

#endif  // LLM_HAS_KERNELS
