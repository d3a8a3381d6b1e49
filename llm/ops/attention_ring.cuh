// attention_ring.cuh: the block-pair attention ops of ring attention (Liu, Zaharia & Abbeel 2023, "Ring
// Attention with Blockwise Transformers for Near-Infinite Context"): a rank holds one block of queries; the
// blocks of keys/values come around the ring one at a time, and each one's attention is merged into running
// online-softmax accumulators (Milakov & Gimelshein 2018; Dao 2023, "FlashAttention-2", Algorithm 1), which
// are finalised once every block has passed; the backward takes each block pair's share of dq, dk, dv from
// the forward's row log-sum-exp and row dot D (FlashAttention-2, Algorithm 2). The ring's communication loop
// is llm/parallel/context_parallel.h; these are the ops it calls on each (query block, key block) pair:
//   attention_pair_init      the empty result: O = 0, l = 0, m = -inf
//   attention_pair_forward   merge into (O, m, l) the attention of nq queries against nk keys/values
//                            (causal = 1: the diagonal pair, query i sees keys j <= i; 0: all keys)
//   attention_pair_finalise  out = O / l (rounded to floatX once), lse = m + log l
//   attention_pair_dot       D = rowsum(dout * out), FlashAttention-2's row dot
//   attention_pair_backward  dq, dk, dv += one block pair's share (FP32 accumulators)
//   rows_copy, rows_store_f32, rows_zero_f32: moving (B, n, width) rows between buffers (packing K/V out of
//                            qkv, placing chunks, rounding the FP32 gradient accumulators into dqkv)
//
// Layout. A "rows" buffer holds element (b, t, h, c) (batch b < B, row t < n, head h < H, channel c < hs)
// at base + b*bs + t*ts + h*hs + c (bs, ts in elements): e.g. q of the model's qkv (B,Tl,3Ca) at base
// qkv + t0*3Ca with ts = 3Ca, bs = Tl*3Ca, k at +Ca, v at +2Ca; a packed K/V block (B,Tl,2Ca) at kv and
// kv+Ca with ts = 2Ca. The forward's FP32 accumulators are dense: O (B,H,nq,hs), m and l (B,H,nq). lse and
// D hold (b,h,i) at base + (b*H + h)*ls + i (ls: the caller's row length; it offsets base by its t0).
//
// The CPU reference is llm/ops/attention_blocks.h's math (attention_block_cpu, attention_merge_cpu,
// attention_finalise_cpu, and attention_block_score in the backward) looped over (b, h), after copying the
// (b, h) slice of each floatX input into dense FP32 rows (exact), with OpenMP over (b, h): each (b, h) owns
// its own rows of every output. The CUDA kernels follow; both are compared by test/test_attention_ring.cu,
// and the pairs' sum against the whole-sequence attention of llm/ops/attention.cuh.
#pragma once
#include <math.h>
#include "../core/common.h"
#include "attention_blocks.h"
#if LLM_HAS_KERNELS
#include <type_traits>
#include "../core/cuda_utils.cuh"
#endif

// ----------------------------------------------------------------------------
// CPU reference

// dst (n, hs) dense FP32 = the (b, h) slice of a rows buffer (exact for every floatX)
static void ring_rows_to_f32(float* dst, const floatX* src, size_t bs, size_t ts, int b, int h, int n, int hs) {
    const floatX* x = src + (size_t)b * bs + (size_t)h * hs;
    for (int t = 0; t < n; t++)
        for (int c = 0; c < hs; c++) dst[(size_t)t * hs + c] = (float)x[(size_t)t * ts + c];
}

static void attention_pair_init_cpu(float* O, float* m, float* l, int B, int H, int nq, int hs) {
    size_t rows = (size_t)B * H * nq;
    for (size_t r = 0; r < rows; r++) { m[r] = -INFINITY; l[r] = 0.0f; }
    for (size_t x = 0; x < rows * hs; x++) O[x] = 0.0f;
}

// For each (b, h): attention_block_cpu of the nq queries against the nk keys/values, merged into the (b, h)
// slice of (O, m, l) by attention_merge_cpu. attention_block_cpu masks key position k0+j > query position
// q0+i; the queries go to positions [q0, q0+nq) of an FP32 copy, the keys to [0, nk): q0 = 0 is the
// diagonal pair (causal), q0 = nk puts every key before every query (no mask).
static void attention_pair_forward_cpu(float* O, float* m, float* l, const floatX* q, size_t q_bs, size_t q_ts,
                                       const floatX* k, const floatX* v, size_t kv_bs, size_t kv_ts,
                                       int B, int H, int hs, int nq, int nk, int causal) {
    if (causal && nq != nk) fatal("attention_pair_forward: a causal (diagonal) pair needs nq == nk, found %d and %d", nq, nk);
    int q0 = causal ? 0 : nk;
    #pragma omp parallel
    {
        size_t nqr = (size_t)(q0 + nq), nkr = (size_t)(nk > 0 ? nk : 1);
        float* qf = (float*)mallocCheck(nqr * hs * sizeof(float));         // (q0+nq, hs): rows [q0, q0+nq) used
        float* kf = (float*)mallocCheck(nkr * hs * sizeof(float));         // (nk, hs)
        float* vf = (float*)mallocCheck(nkr * hs * sizeof(float));         // (nk, hs)
        float* Ob = (float*)mallocCheck(((size_t)nq * hs + 1) * sizeof(float));  // (nq, hs) this block's O~
        float* mb = (float*)mallocCheck(((size_t)nq + 1) * sizeof(float));       // (nq)
        float* lb = (float*)mallocCheck(((size_t)nq + 1) * sizeof(float));       // (nq)
        #pragma omp for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < H; h++) {
                ring_rows_to_f32(qf + (size_t)q0 * hs, q, q_bs, q_ts, b, h, nq, hs);
                ring_rows_to_f32(kf, k, kv_bs, kv_ts, b, h, nk, hs);
                ring_rows_to_f32(vf, v, kv_bs, kv_ts, b, h, nk, hs);
                attention_block_cpu(Ob, mb, lb, qf, kf, vf, hs, hs, q0, nq, 0, nk);
                size_t r0 = ((size_t)b * H + h) * nq;  // this (b, h)'s first row of the accumulators
                attention_merge_cpu(m + r0, l + r0, O + r0 * hs, m + r0, l + r0, O + r0 * hs, mb, lb, Ob, nq, hs);
            }
        }
        free(qf); free(kf); free(vf); free(Ob); free(mb); free(lb);
    }
}

// out = O / l rounded to floatX once, lse = m + log l (attention_finalise_cpu: a row with l = 0 gets out = 0
// and lse = -inf)
static void attention_pair_finalise_cpu(floatX* out, size_t o_bs, size_t o_ts, float* lse, size_t ls,
                                        const float* O, const float* m, const float* l, int B, int H, int hs, int nq) {
    #pragma omp parallel
    {
        float* of = (float*)mallocCheck(((size_t)nq * hs + 1) * sizeof(float));  // (nq, hs) the FP32 output
        #pragma omp for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < H; h++) {
                size_t r0 = ((size_t)b * H + h) * nq;
                attention_finalise_cpu(of, lse + ((size_t)b * H + h) * ls, O + r0 * hs, m + r0, l + r0, hs, nq, hs);
                floatX* o = out + (size_t)b * o_bs + (size_t)h * hs;
                for (int i = 0; i < nq; i++)
                    for (int c = 0; c < hs; c++) o[(size_t)i * o_ts + c] = (floatX)of[(size_t)i * hs + c];
            }
        }
        free(of);
    }
}

// D[b,h,i] = sum_c dout[b,i,h,c] * out[b,i,h,c], in double (exact products), rounded once
static void attention_pair_dot_cpu(float* D, size_t ls, const floatX* dout, const floatX* out, size_t o_bs, size_t o_ts,
                                   int B, int H, int hs, int nq) {
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < nq; i++) {
                size_t x = (size_t)b * o_bs + (size_t)i * o_ts + (size_t)h * hs;
                double s = 0.0;
                for (int c = 0; c < hs; c++) s += (double)(float)dout[x + c] * (double)(float)out[x + c];
                D[((size_t)b * H + h) * ls + i] = (float)s;
            }
}

// One (b, h) of the block-pair backward on dense FP32 rows, from the given row dots D (the local variant of
// attention_block_backward_cpu, which computes D itself from dO and the forward's out: the ring computes D
// once per query block, before the key blocks come around, and never has out beside it here). The math is
// the same (FlashAttention-2, Algorithm 2), each block pair's gradients summed in double and added (+=)
// into the FP32 accumulators once:
//   P_ij = exp(s_ij - L_i) (0 where masked),  dV_j += sum_i P_ij dO_i,  dP_ij = dO_i . v_j,
//   dS_ij = P_ij (dP_ij - D_i),  dQ_i += sum_j dS_ij k_j / sqrt(hs),  dK_j += sum_i dS_ij q_i / sqrt(hs)
// A row with L = -inf (no key at all in the forward: out = 0) has no gradient and is skipped.
static void attention_pair_block_backward_cpu(float* dq, size_t dq_ts,            // (nq) rows, accumulated
                                              float* dk, float* dv, size_t dkv_ts, // (nk) rows each, accumulated
                                              const float* dO, const float* L, const float* D,  // (nq, hs), (nq), (nq)
                                              const float* q, const float* k, const float* v,   // (nq, hs), (nk, hs) x2
                                              int hs, int nq, int nk, int causal,
                                              double* dqa, double* dka, double* dva) {  // scratch (hs), (nk, hs) x2
    double scale = 1.0 / sqrt((double)hs);
    for (size_t x = 0; x < (size_t)nk * hs; x++) { dka[x] = 0.0; dva[x] = 0.0; }
    for (int i = 0; i < nq; i++) {
        int jend = causal ? (i + 1 < nk ? i + 1 : nk) : nk;  // keys j < jend are seen by query i
        if (jend <= 0 || L[i] == -INFINITY) continue;
        const float* qi = q + (size_t)i * hs;
        const float* dOi = dO + (size_t)i * hs;
        for (int c = 0; c < hs; c++) dqa[c] = 0.0;
        for (int j = 0; j < jend; j++) {
            const float* kj = k + (size_t)j * hs;
            const float* vj = v + (size_t)j * hs;
            double P = exp(attention_block_score(qi, kj, hs, scale) - (double)L[i]);
            double dP = 0.0;
            for (int c = 0; c < hs; c++) {
                dP += (double)dOi[c] * (double)vj[c];
                dva[(size_t)j * hs + c] += P * (double)dOi[c];
            }
            double dS = P * (dP - (double)D[i]);
            for (int c = 0; c < hs; c++) {
                dqa[c] += dS * (double)kj[c] * scale;
                dka[(size_t)j * hs + c] += dS * (double)qi[c] * scale;
            }
        }
        float* dqi = dq + (size_t)i * dq_ts;
        for (int c = 0; c < hs; c++) dqi[c] += (float)dqa[c];
    }
    for (int j = 0; j < nk; j++) {
        float* dkj = dk + (size_t)j * dkv_ts;
        float* dvj = dv + (size_t)j * dkv_ts;
        for (int c = 0; c < hs; c++) { dkj[c] += (float)dka[(size_t)j * hs + c]; dvj[c] += (float)dva[(size_t)j * hs + c]; }
    }
}

static void attention_pair_backward_cpu(float* dq, size_t dq_bs, size_t dq_ts, float* dk, float* dv, size_t dkv_bs, size_t dkv_ts,
                                        const floatX* dout, size_t o_bs, size_t o_ts, const float* lse, const float* D, size_t ls,
                                        const floatX* q, size_t q_bs, size_t q_ts, const floatX* k, const floatX* v,
                                        size_t kv_bs, size_t kv_ts, int B, int H, int hs, int nq, int nk, int causal) {
    if (causal && nq != nk) fatal("attention_pair_backward: a causal (diagonal) pair needs nq == nk, found %d and %d", nq, nk);
    #pragma omp parallel
    {
        size_t nqh = (size_t)nq * hs + 1, nkh = (size_t)nk * hs + 1;
        float* qf = (float*)mallocCheck(nqh * sizeof(float));    // (nq, hs)
        float* dOf = (float*)mallocCheck(nqh * sizeof(float));   // (nq, hs)
        float* kf = (float*)mallocCheck(nkh * sizeof(float));    // (nk, hs)
        float* vf = (float*)mallocCheck(nkh * sizeof(float));    // (nk, hs)
        double* dqa = (double*)mallocCheck(((size_t)hs + 1) * sizeof(double));
        double* dka = (double*)mallocCheck(nkh * sizeof(double));
        double* dva = (double*)mallocCheck(nkh * sizeof(double));
        #pragma omp for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < H; h++) {
                ring_rows_to_f32(qf, q, q_bs, q_ts, b, h, nq, hs);
                ring_rows_to_f32(dOf, dout, o_bs, o_ts, b, h, nq, hs);
                ring_rows_to_f32(kf, k, kv_bs, kv_ts, b, h, nk, hs);
                ring_rows_to_f32(vf, v, kv_bs, kv_ts, b, h, nk, hs);
                size_t lo = ((size_t)b * H + h) * ls;
                size_t ch = (size_t)h * hs;
                attention_pair_block_backward_cpu(dq + (size_t)b * dq_bs + ch, dq_ts, dk + (size_t)b * dkv_bs + ch,
                                                  dv + (size_t)b * dkv_bs + ch, dkv_ts, dOf, lse + lo, D + lo, qf, kf, vf,
                                                  hs, nq, nk, causal, dqa, dka, dva);
            }
        }
        free(qf); free(dOf); free(kf); free(vf); free(dqa); free(dka); free(dva);
    }
}

static void rows_copy_cpu(floatX* dst, size_t d_bs, size_t d_ts, const floatX* src, size_t s_bs, size_t s_ts,
                          int B, int n, int width) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < n; t++)
            memcpy(dst + (size_t)b * d_bs + (size_t)t * d_ts, src + (size_t)b * s_bs + (size_t)t * s_ts, (size_t)width * sizeof(floatX));
}

static void rows_store_f32_cpu(floatX* dst, size_t d_bs, size_t d_ts, const float* src, size_t s_bs, size_t s_ts,
                               int B, int n, int width) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < n; t++) {
            floatX* d = dst + (size_t)b * d_bs + (size_t)t * d_ts;
            const float* s = src + (size_t)b * s_bs + (size_t)t * s_ts;
            for (int c = 0; c < width; c++) d[c] = (floatX)s[c];
        }
}

static void rows_zero_f32_cpu(float* dst, size_t d_bs, size_t d_ts, int B, int n, int width) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < n; t++) memset(dst + (size_t)b * d_bs + (size_t)t * d_ts, 0, (size_t)width * sizeof(float));
}

// ----------------------------------------------------------------------------
// CUDA kernels
//
// Correctness first: scalar FP32 math on CUDA cores, not FlashAttention-grade (no tensor cores, tiles of
// 32 rows; attention_kernels.cuh's WMMA tiles are the way to make them fast). Each block takes RING_ROWS rows
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

// The rows kernels: one thread per element (b, t, c) of B*n rows of width elements (c fastest, so
// consecutive threads touch consecutive elements). Each reads its element of src and writes its element of dst.
__global__ void rows_copy_kernel(floatX* dst, size_t d_bs, size_t d_ts, const floatX* src, size_t s_bs, size_t s_ts,
                                 int n, int width, size_t total) {
    size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= total) return;
    size_t bt = x / width;
    int c = (int)(x % width), t = (int)(bt % n), b = (int)(bt / n);
    dst[(size_t)b * d_bs + (size_t)t * d_ts + c] = src[(size_t)b * s_bs + (size_t)t * s_ts + c];
}
__global__ void rows_store_f32_kernel(floatX* dst, size_t d_bs, size_t d_ts, const float* src, size_t s_bs, size_t s_ts,
                                      int n, int width, size_t total) {
    size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= total) return;
    size_t bt = x / width;
    int c = (int)(x % width), t = (int)(bt % n), b = (int)(bt / n);
    dst[(size_t)b * d_bs + (size_t)t * d_ts + c] = (floatX)src[(size_t)b * s_bs + (size_t)t * s_ts + c];
}
__global__ void rows_zero_f32_kernel(float* dst, size_t d_bs, size_t d_ts, int n, int width, size_t total) {
    size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= total) return;
    size_t bt = x / width;
    int c = (int)(x % width), t = (int)(bt % n), b = (int)(bt / n);
    dst[(size_t)b * d_bs + (size_t)t * d_ts + c] = 0.0f;
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

// ----------------------------------------------------------------------------
// launchers (signatures fixed by llm/parallel/context_parallel.h; see the top of the file for the layouts)

// the empty result: O = 0, l = 0, m = -inf
static void attention_pair_init(float* O, float* m, float* l, int B, int H, int nq, int hs, cudaStream_t s) {
#if LLM_BUILD_CPU
    (void)s;
    attention_pair_init_cpu(O, m, l, B, H, nq, hs);
#else
    size_t rows = (size_t)B * H * nq, n = rows * hs > rows ? rows * hs : rows;
    if (n == 0) return;
    LAUNCH(attention_pair_init_kernel, dim3((unsigned)ceil_div_sz(n, 256)), dim3(256), 0, s, O, m, l, rows, hs);
#endif
}

// merges into (O, m, l) the attention of the nq queries against the nk keys/values (scale 1/sqrt(hs));
// causal = 1: the diagonal pair (nq == nk, the same positions), query i sees keys j <= i; 0: all keys
static void attention_pair_forward(float* O, float* m, float* l, const floatX* q, size_t q_bs, size_t q_ts,
                                   const floatX* k, const floatX* v, size_t kv_bs, size_t kv_ts,
                                   int B, int H, int hs, int nq, int nk, int causal, cudaStream_t s) {
#if LLM_BUILD_CPU
    (void)s;
    attention_pair_forward_cpu(O, m, l, q, q_bs, q_ts, k, v, kv_bs, kv_ts, B, H, hs, nq, nk, causal);
#else
    if (causal && nq != nk) fatal("attention_pair_forward: a causal (diagonal) pair needs nq == nk, found %d and %d", nq, nk);
    if (B == 0 || H == 0 || nq == 0 || nk == 0) return;
    float scale = 1.0f / sqrtf((float)hs);
    ring_for_head_size("attention_pair_forward", hs, [&](auto hd) {
        LAUNCH(attention_pair_forward_kernel<decltype(hd)::value>, dim3((unsigned)ceil_div(nq, RING_ROWS), (unsigned)(B * H)),
               dim3(RING_ROWS * 32), 0, s, O, m, l, q, q_bs, q_ts, k, v, kv_bs, kv_ts, H, hs, nq, nk, causal, scale);
    });
#endif
}

// out = O/l (rounded to floatX once), lse = m + log l (l = 0: out = 0, lse = -inf)
static void attention_pair_finalise(floatX* out, size_t o_bs, size_t o_ts, float* lse, size_t ls,
                                    const float* O, const float* m, const float* l, int B, int H, int hs, int nq, cudaStream_t s) {
#if LLM_BUILD_CPU
    (void)s;
    attention_pair_finalise_cpu(out, o_bs, o_ts, lse, ls, O, m, l, B, H, hs, nq);
#else
    size_t rows = (size_t)B * H * nq;
    if (rows == 0) return;
    LAUNCH(attention_pair_finalise_kernel, dim3((unsigned)ceil_div_sz(rows, 8)), dim3(256), 0, s, out, o_bs, o_ts, lse, ls, O, m,
           l, rows, H, hs, nq);
#endif
}

// D[b,h,i] = sum_c dout[b,i,h,c] * out[b,i,h,c] (dout and out share strides)
static void attention_pair_dot(float* D, size_t ls, const floatX* dout, const floatX* out, size_t o_bs, size_t o_ts,
                               int B, int H, int hs, int nq, cudaStream_t s) {
#if LLM_BUILD_CPU
    (void)s;
    attention_pair_dot_cpu(D, ls, dout, out, o_bs, o_ts, B, H, hs, nq);
#else
    size_t rows = (size_t)B * H * nq;
    if (rows == 0) return;
    LAUNCH(attention_pair_dot_kernel, dim3((unsigned)ceil_div_sz(rows, 8)), dim3(256), 0, s, D, ls, dout, out, o_bs, o_ts, rows,
           H, hs, nq);
#endif
}

// accumulates (+=) into the FP32 dq (rows of the queries) and dk, dv (rows of the keys) this block pair's share
// of the gradients, from the forward's lse and the row dots D
static void attention_pair_backward(float* dq, size_t dq_bs, size_t dq_ts, float* dk, float* dv, size_t dkv_bs, size_t dkv_ts,
                                    const floatX* dout, size_t o_bs, size_t o_ts, const float* lse, const float* D, size_t ls,
                                    const floatX* q, size_t q_bs, size_t q_ts, const floatX* k, const floatX* v,
                                    size_t kv_bs, size_t kv_ts, int B, int H, int hs, int nq, int nk, int causal, cudaStream_t s) {
#if LLM_BUILD_CPU
    (void)s;
    attention_pair_backward_cpu(dq, dq_bs, dq_ts, dk, dv, dkv_bs, dkv_ts, dout, o_bs, o_ts, lse, D, ls, q, q_bs, q_ts, k, v,
                                kv_bs, kv_ts, B, H, hs, nq, nk, causal);
#else
    if (causal && nq != nk) fatal("attention_pair_backward: a causal (diagonal) pair needs nq == nk, found %d and %d", nq, nk);
    if (B == 0 || H == 0 || nq == 0 || nk == 0) return;
    float scale = 1.0f / sqrtf((float)hs);
    ring_for_head_size("attention_pair_backward", hs, [&](auto hd) {
        constexpr int HD = decltype(hd)::value;
        LAUNCH(attention_pair_backward_dkdv_kernel<HD>, dim3((unsigned)ceil_div(nk, RING_ROWS), (unsigned)(B * H)),
               dim3(RING_ROWS * 32), 0, s, dk, dv, dkv_bs, dkv_ts, dout, o_bs, o_ts, lse, D, ls, q, q_bs, q_ts, k, v, kv_bs, kv_ts,
               H, hs, nq, nk, causal, scale);
        LAUNCH(attention_pair_backward_dq_kernel<HD>, dim3((unsigned)ceil_div(nq, RING_ROWS), (unsigned)(B * H)),
               dim3(RING_ROWS * 32), 0, s, dq, dq_bs, dq_ts, dout, o_bs, o_ts, lse, D, ls, q, q_bs, q_ts, k, v, kv_bs, kv_ts,
               H, hs, nq, nk, causal, scale);
    });
#endif
}

// dst row (b,t)[0..width) = src row (b,t)[0..width)
static void rows_copy(floatX* dst, size_t d_bs, size_t d_ts, const floatX* src, size_t s_bs, size_t s_ts,
                      int B, int n, int width, cudaStream_t s) {
#if LLM_BUILD_CPU
    (void)s;
    rows_copy_cpu(dst, d_bs, d_ts, src, s_bs, s_ts, B, n, width);
#else
    size_t total = (size_t)B * n * width;
    if (total == 0) return;
    LAUNCH(rows_copy_kernel, dim3((unsigned)ceil_div_sz(total, 256)), dim3(256), 0, s, dst, d_bs, d_ts, src, s_bs, s_ts, n, width,
           total);
#endif
}

// the same from an FP32 source, rounded to floatX once
static void rows_store_f32(floatX* dst, size_t d_bs, size_t d_ts, const float* src, size_t s_bs, size_t s_ts,
                           int B, int n, int width, cudaStream_t s) {
#if LLM_BUILD_CPU
    (void)s;
    rows_store_f32_cpu(dst, d_bs, d_ts, src, s_bs, s_ts, B, n, width);
#else
    size_t total = (size_t)B * n * width;
    if (total == 0) return;
    LAUNCH(rows_store_f32_kernel, dim3((unsigned)ceil_div_sz(total, 256)), dim3(256), 0, s, dst, d_bs, d_ts, src, s_bs, s_ts, n,
           width, total);
#endif
}

// dst row (b,t)[0..width) = 0
static void rows_zero_f32(float* dst, size_t d_bs, size_t d_ts, int B, int n, int width, cudaStream_t s) {
#if LLM_BUILD_CPU
    (void)s;
    rows_zero_f32_cpu(dst, d_bs, d_ts, B, n, width);
#else
    size_t total = (size_t)B * n * width;
    if (total == 0) return;
    LAUNCH(rows_zero_f32_kernel, dim3((unsigned)ceil_div_sz(total, 256)), dim3(256), 0, s, dst, d_bs, d_ts, n, width, total);
#endif
}
