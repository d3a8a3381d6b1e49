// attention_ring_kernels.cuh: the CUDA kernels of llm/ops/attention_ring.cuh's block-pair ops (ring attention's
// forward merge into online-softmax accumulators, the finalisation, the row dot, the backward's dk/dv and dq),
// in their own file as llm/ops/attention_kernels.cuh is beside llm/ops/attention.cuh: the CPU reference, the
// layout of the rows buffers and the launchers stay in attention_ring.cuh. Built in the CUDA and emulated builds.
#pragma once
#include <type_traits>
#include "../core/common.h"
#if LLM_HAS_KERNELS
#include "../core/cuda_utils.cuh"
#endif

// ----------------------------------------------------------------------------
// CUDA kernels
//
// The block-pair kernels here (forward, dk/dv, dq) are the FP32 build's: scalar FP32 math on CUDA cores, not
// FlashAttention-grade (no tensor core takes FP32 operands; tiles of 32 rows). The 16-bit builds run the block pairs
// on tensor cores instead (attention_ring_mma_kernels.cuh); the init, finalise and row-dot kernels serve every build. Each block takes RING_ROWS rows
// (queries, or keys in the backward's dk/dv) of one (b, h), one warp per row; the other side's rows come
// through shared memory in tiles of 32 (FP32, zero past hs; the row stride HD+1 keeps lane j's reads of
// row j on bank (j + c) % 32). In a tile, lane j takes the tile's row j: its score, then the warp walks
// the tile's 32 rows with the value of each row's lane broadcast by a shuffle, each lane adding into its
// channels c = lane + 32 r (r < HD/32).
// Every sum runs in a fixed order and every output row has one writer: no atomics, the same bits every run.
// HD: hs rounded up to 32, 64 or 128.
#if LLM_HAS_KERNELS
#define RING_ROWS 8   // warps (rows) per block
#define RING_TILE 32  // rows of the other side per shared-memory tile (one per lane)

// (b, h)'s rows [r0, r0 + n) of a rows buffer into a (RING_TILE, HD+1) FP32 tile, zero past n and past hs;
// every thread of the block takes a share (consecutive threads, consecutive channels)
template <int HD>
__device__ void ring_tile_load(float (*tile)[HD + 1], const floatX* base, size_t ts, int r0, int n, int hs) {
    for (int x = threadIdx.x; x < RING_TILE * HD; x += blockDim.x) {
        int j = x / HD, c = x % HD;
        tile[j][c] = (r0 + j < n && c < hs) ? (float)base[(size_t)(r0 + j) * ts + c] : 0.0f;
    }
}

// the forward of one block pair, merged into (O, m, l). grid (ceil(nq / RING_ROWS), B*H), RING_ROWS warps.
// Reads the block's query rows of q and the (b, h) slice of k, v (the keys up to the block's last query
// when causal); reads and writes the block's rows of O, m, l. Warp w owns query i = blockIdx.x * RING_ROWS + w:
// over the key tiles, the online softmax of its scores (running max mb, sum lb, output acc rescaled by
// e^(mb_old - mb_new)) gives this pair's (O~, m, l) of the row, then merged into the accumulators with
// attention_merge_cpu's rules (an empty part gets the factor 0).
template <int HD>
__global__ void __launch_bounds__(RING_ROWS * 32)
attention_pair_forward_kernel(float* O, float* m, float* l, const floatX* q, size_t q_bs, size_t q_ts,
                              const floatX* k, const floatX* v, size_t kv_bs, size_t kv_ts,
                              int H, int hs, int nq, int nk, int causal, float scale) {
    constexpr int NR = HD / 32;  // channels per lane
    __shared__ float ks[RING_TILE][HD + 1], vs[RING_TILE][HD + 1], qs[RING_ROWS][HD];
    int b = blockIdx.y / H, h = blockIdx.y % H, lane = threadIdx.x % 32, w = threadIdx.x / 32;
    int i = blockIdx.x * RING_ROWS + w;  // this warp's query (i >= nq: loads and barriers only)
    size_t ch = (size_t)h * hs;
    const floatX* kb = k + (size_t)b * kv_bs + ch;
    const floatX* vb = v + (size_t)b * kv_bs + ch;
    for (int c = lane; c < HD; c += 32)
        qs[w][c] = (i < nq && c < hs) ? (float)q[(size_t)b * q_bs + (size_t)i * q_ts + ch + c] : 0.0f;
    int last = min(nq, (int)(blockIdx.x + 1) * RING_ROWS) - 1;   // the block's last query
    int kend = causal ? min(nk, last + 1) : nk;                  // keys the block needs: [0, kend)
    int jend = i < nq ? (causal ? min(nk, i + 1) : nk) : 0;      // keys this warp's query sees: [0, jend)
    float mb = -INFINITY, lb = 0.0f, acc[NR];
    for (int r = 0; r < NR; r++) acc[r] = 0.0f;
    for (int k0 = 0; k0 < kend; k0 += RING_TILE) {
        __syncthreads();  // the previous tile's readers are done (and qs is written, the first time)
        ring_tile_load<HD>(ks, kb, kv_ts, k0, nk, hs);
        ring_tile_load<HD>(vs, vb, kv_ts, k0, nk, hs);
        __syncthreads();
        if (k0 >= jend) continue;  // the whole tile masked for this query (warp-uniform)
        float sc = -INFINITY;       // lane j: the score of key k0 + j (-inf: masked)
        if (k0 + lane < jend) {
            float d = 0.0f;
            for (int c = 0; c < hs; c++) d += qs[w][c] * ks[lane][c];
            sc = d * scale;
        }
        float mnew = fmaxf(mb, warp_reduce_max(sc));  // finite: key k0 < jend is unmasked
        float corr = mb == -INFINITY ? 0.0f : expf(mb - mnew);
        float p = sc == -INFINITY ? 0.0f : expf(sc - mnew);
        lb = lb * corr + warp_reduce_sum(p);
        for (int r = 0; r < NR; r++) acc[r] *= corr;
        int nj = min(RING_TILE, jend - k0);
        for (int j = 0; j < nj; j++) {
            float pj = __shfl_sync(0xffffffffu, p, j);
            for (int r = 0; r < NR; r++) acc[r] += pj * vs[j][lane + 32 * r];
        }
        mb = mnew;
    }
    if (i >= nq) return;
    size_t row = ((size_t)blockIdx.y) * nq + i;  // (b, h, i) of the dense accumulators
    float mo = m[row], mi = fmaxf(mo, mb);
    float a1 = mo == -INFINITY ? 0.0f : expf(mo - mi);  // rescales the accumulated part to the common max
    float a2 = mb == -INFINITY ? 0.0f : expf(mb - mi);  // and this pair's part
    for (int r = 0; r < NR; r++) {
        int c = lane + 32 * r;
        if (c < hs) O[row * hs + c] = O[row * hs + c] * a1 + acc[r] * a2;
    }
    __syncwarp();  // every lane read m[row] before lane 0 writes it
    if (lane == 0) { m[row] = mi; l[row] = l[row] * a1 + lb * a2; }
}

// the backward's dk, dv of one block pair. grid (ceil(nk / RING_ROWS), B*H), RING_ROWS warps. Warp w owns
// key j = blockIdx.x * RING_ROWS + w; over the query tiles (from the block's first key on when causal), lane i
// recomputes P = exp(s - lse_i) (0 where masked or lse_i = -inf), dP = dO_i . v_j, dS = P (dP - D_i); the
// warp adds P dO_i into dv and dS q_i into dk. Reads q, dout, lse, D of the (b, h) and its block's k, v rows;
// adds (+=) into the block's rows of dk, dv (one warp per row: no other writer).
template <int HD>
__global__ void __launch_bounds__(RING_ROWS * 32)
attention_pair_backward_dkdv_kernel(float* dk, float* dv, size_t dkv_bs, size_t dkv_ts, const floatX* dout, size_t o_bs, size_t o_ts,
                                    const float* lse, const float* D, size_t ls, const floatX* q, size_t q_bs, size_t q_ts,
                                    const floatX* k, const floatX* v, size_t kv_bs, size_t kv_ts,
                                    int H, int hs, int nq, int nk, int causal, float scale) {
    constexpr int NR = HD / 32;
    __shared__ float qs[RING_TILE][HD + 1], dos[RING_TILE][HD + 1], kr[RING_ROWS][HD], vr[RING_ROWS][HD];
    __shared__ float lt[RING_TILE], dt[RING_TILE];  // the tile's lse and D
    int b = blockIdx.y / H, h = blockIdx.y % H, lane = threadIdx.x % 32, w = threadIdx.x / 32;
    int j = blockIdx.x * RING_ROWS + w;  // this warp's key
    size_t ch = (size_t)h * hs;
    const float* lb = lse + (size_t)blockIdx.y * ls;
    const float* Db = D + (size_t)blockIdx.y * ls;
    for (int c = lane; c < HD; c += 32) {
        size_t x = (size_t)b * kv_bs + (size_t)j * kv_ts + ch + c;
        kr[w][c] = (j < nk && c < hs) ? (float)k[x] : 0.0f;
        vr[w][c] = (j < nk && c < hs) ? (float)v[x] : 0.0f;
    }
    int first = (int)blockIdx.x * RING_ROWS;                   // the block's first key
    int i0 = causal ? first - first % RING_TILE : 0;           // queries before the block's first key see none of its keys
    int ibeg = j < nk ? (causal ? j : 0) : nq;                 // queries that see this warp's key: [ibeg, nq)
    float adk[NR], adv[NR];
    for (int r = 0; r < NR; r++) { adk[r] = 0.0f; adv[r] = 0.0f; }
    for (int t0 = i0; t0 < nq; t0 += RING_TILE) {
        __syncthreads();
        ring_tile_load<HD>(qs, q + (size_t)b * q_bs + ch, q_ts, t0, nq, hs);
        ring_tile_load<HD>(dos, dout + (size_t)b * o_bs + ch, o_ts, t0, nq, hs);
        if (threadIdx.x < RING_TILE) {
            int t = t0 + threadIdx.x;
            lt[threadIdx.x] = t < nq ? lb[t] : -INFINITY;
            dt[threadIdx.x] = t < nq ? Db[t] : 0.0f;
        }
        __syncthreads();
        if (t0 + RING_TILE <= ibeg) continue;  // no query of the tile sees this key (warp-uniform)
        int t = t0 + lane;
        float P = 0.0f, dS = 0.0f;
        if (t >= ibeg && t < nq && lt[lane] != -INFINITY) {
            float s = 0.0f, dP = 0.0f;
            for (int c = 0; c < hs; c++) { s += qs[lane][c] * kr[w][c]; dP += dos[lane][c] * vr[w][c]; }
            P = expf(s * scale - lt[lane]);
            dS = P * (dP - dt[lane]);
        }
        for (int ii = 0; ii < RING_TILE; ii++) {
            float Pi = __shfl_sync(0xffffffffu, P, ii), dSi = __shfl_sync(0xffffffffu, dS, ii);
            for (int r = 0; r < NR; r++) {
                adv[r] += Pi * dos[ii][lane + 32 * r];
                adk[r] += dSi * qs[ii][lane + 32 * r];
            }
        }
    }
    if (j >= nk) return;
    float* dkj = dk + (size_t)b * dkv_bs + (size_t)j * dkv_ts + ch;
    float* dvj = dv + (size_t)b * dkv_bs + (size_t)j * dkv_ts + ch;
    for (int r = 0; r < NR; r++) {
        int c = lane + 32 * r;
        if (c < hs) { dkj[c] += adk[r] * scale; dvj[c] += adv[r]; }
    }
}

// the backward's dq of one block pair. grid (ceil(nq / RING_ROWS), B*H), RING_ROWS warps. Warp w owns query
// i = blockIdx.x * RING_ROWS + w; over the key tiles (up to the block's last query when causal), lane j
// recomputes P, dP = dO_i . v_j and dS = P (dP - D_i); the warp adds dS k_j into dq. Reads the block's rows
// of q, dout, lse, D and the (b, h) slice of k, v; adds (+=) into the block's rows of dq.
template <int HD>
__global__ void __launch_bounds__(RING_ROWS * 32)
attention_pair_backward_dq_kernel(float* dq, size_t dq_bs, size_t dq_ts, const floatX* dout, size_t o_bs, size_t o_ts,
                                  const float* lse, const float* D, size_t ls, const floatX* q, size_t q_bs, size_t q_ts,
                                  const floatX* k, const floatX* v, size_t kv_bs, size_t kv_ts,
                                  int H, int hs, int nq, int nk, int causal, float scale) {
    constexpr int NR = HD / 32;
    __shared__ float ks[RING_TILE][HD + 1], vs[RING_TILE][HD + 1], qr[RING_ROWS][HD], dor[RING_ROWS][HD];
    int b = blockIdx.y / H, h = blockIdx.y % H, lane = threadIdx.x % 32, w = threadIdx.x / 32;
    int i = blockIdx.x * RING_ROWS + w;
    size_t ch = (size_t)h * hs;
    for (int c = lane; c < HD; c += 32) {
        int in = i < nq && c < hs;
        qr[w][c] = in ? (float)q[(size_t)b * q_bs + (size_t)i * q_ts + ch + c] : 0.0f;
        dor[w][c] = in ? (float)dout[(size_t)b * o_bs + (size_t)i * o_ts + ch + c] : 0.0f;
    }
    float Li = i < nq ? lse[(size_t)blockIdx.y * ls + i] : -INFINITY;
    float Di = i < nq ? D[(size_t)blockIdx.y * ls + i] : 0.0f;
    int last = min(nq, (int)(blockIdx.x + 1) * RING_ROWS) - 1;
    int kend = causal ? min(nk, last + 1) : nk;
    int jend = (i < nq && Li != -INFINITY) ? (causal ? min(nk, i + 1) : nk) : 0;
    float adq[NR];
    for (int r = 0; r < NR; r++) adq[r] = 0.0f;
    const floatX* kb = k + (size_t)b * kv_bs + ch;
    const floatX* vb = v + (size_t)b * kv_bs + ch;
    for (int k0 = 0; k0 < kend; k0 += RING_TILE) {
        __syncthreads();
        ring_tile_load<HD>(ks, kb, kv_ts, k0, nk, hs);
        ring_tile_load<HD>(vs, vb, kv_ts, k0, nk, hs);
        __syncthreads();
        if (k0 >= jend) continue;
        float dS = 0.0f;
        if (k0 + lane < jend) {
            float s = 0.0f, dP = 0.0f;
            for (int c = 0; c < hs; c++) { s += qr[w][c] * ks[lane][c]; dP += dor[w][c] * vs[lane][c]; }
            float P = expf(s * scale - Li);
            dS = P * (dP - Di);
        }
        int nj = min(RING_TILE, jend - k0);
        for (int jj = 0; jj < nj; jj++) {
            float dSj = __shfl_sync(0xffffffffu, dS, jj);
            for (int r = 0; r < NR; r++) adq[r] += dSj * ks[jj][lane + 32 * r];
        }
    }
    if (i >= nq) return;
    float* dqi = dq + (size_t)b * dq_bs + (size_t)i * dq_ts + ch;
    for (int r = 0; r < NR; r++) {
        int c = lane + 32 * r;
        if (c < hs) dqi[c] += adq[r] * scale;
    }
}

// the empty result: O = 0, m = -inf, l = 0. One thread per element of O (rows * hs), the first rows threads
// also write m and l.
__global__ void attention_pair_init_kernel(float* O, float* m, float* l, size_t rows, int hs) {
    size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (x < rows * hs) O[x] = 0.0f;
    if (x < rows) { m[x] = -INFINITY; l[x] = 0.0f; }
}

// out = O / l rounded to floatX once, lse = m + log l (l = 0: out = 0, lse = -inf). One warp per (b, h, i)
// row of the accumulators (rows ordered b, h, i; rows = B*H*nq): reads its row of O, m, l; writes its row of
// out and its lse.
__global__ void attention_pair_finalise_kernel(floatX* out, size_t o_bs, size_t o_ts, float* lse, size_t ls,
                                               const float* O, const float* m, const float* l, size_t rows, int H, int hs, int nq) {
    size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    size_t bh = row / nq;
    int i = (int)(row % nq), b = (int)(bh / H), h = (int)(bh % H);
    float li = l[row], inv = li > 0.0f ? 1.0f / li : 0.0f;
    floatX* o = out + (size_t)b * o_bs + (size_t)i * o_ts + (size_t)h * hs;
    for (int c = lane; c < hs; c += 32) o[c] = (floatX)(O[row * hs + c] * inv);
    if (lane == 0) lse[bh * ls + i] = li > 0.0f ? m[row] + logf(li) : -INFINITY;
}

// D[b,h,i] = sum_c dout[b,i,h,c] * out[b,i,h,c] (FlashAttention-2's row dot). One warp per (b, h, i) row
// (rows ordered b, h, i): reads its rows of dout and out, writes its D.
__global__ void attention_pair_dot_kernel(float* D, size_t ls, const floatX* dout, const floatX* out, size_t o_bs, size_t o_ts,
                                          size_t rows, int H, int hs, int nq) {
    size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;  // warp-uniform: the lanes of a warp share row
    size_t bh = row / nq;
    int i = (int)(row % nq), b = (int)(bh / H), h = (int)(bh % H);
    size_t x = (size_t)b * o_bs + (size_t)i * o_ts + (size_t)h * hs;
    float s = 0.0f;
    for (int c = lane; c < hs; c += 32) s += (float)dout[x + c] * (float)out[x + c];
    s = warp_reduce_sum(s);
    if (lane == 0) D[bh * ls + i] = s;
}

// calls f(std::integral_constant<int, HD>()) with HD = hs rounded up to 32, 64 or 128
template <class Fn>
static void ring_for_head_size(const char* op, int hs, Fn f) {
    if (hs <= 32) f(std::integral_constant<int, 32>());
    else if (hs <= 64) f(std::integral_constant<int, 64>());
    else if (hs <= 128) f(std::integral_constant<int, 128>());
    else fatal("%s: the kernels take head sizes up to 128, found %d", op, hs);
}

#endif  // LLM_HAS_KERNELS
