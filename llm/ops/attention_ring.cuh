// attention_ring.cuh: the block-pair attention ops of ring attention (Liu, Zaharia & Abbeel 2023, "Ring
// Attention with Blockwise Transformers for Near-Infinite Context"): a rank holds one block of queries; the
// blocks of keys/values come around the ring one at a time, and each one's attention is merged into running
// online-softmax accumulators (Milakov & Gimelshein 2018; Dao 2023, "FlashAttention-2", Algorithm 1), which
// are finalised once every block has passed; the backward takes each block pair's share of dq, dk, dv from
// the forward's row log-sum-exp and row dot D (FlashAttention-2, Algorithm 2). The ring's communication loop
// is llm/sharded/context_parallel.h; these are the ops it calls on each (query block, key block) pair:
//   attention_pair_init      the empty result: O = 0, l = 0, m = -inf
//   attention_pair_forward   merge into (O, m, l) the attention of nq queries against nk keys/values
//                            (causal = 1: the diagonal pair, query i sees keys j <= i; 0: all keys)
//   attention_pair_finalise  out = O / l (rounded to floatX once), lse = m + log l
//   attention_pair_dot       D = rowsum(dout * out), FlashAttention-2's row dot
//   attention_pair_backward  dq, dk, dv += one block pair's share (FP32 accumulators)
// (the ring moves rows between buffers with llm/ops/rows.cuh: packing K/V out of qkv, placing chunks, rounding
// the FP32 gradient accumulators into dqkv)
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
// its own rows of every output. The CUDA kernels: in the 16-bit builds the block pairs run on tensor cores, on the fused
// attention kernels' tile code (llm/ops/attention_ring_mma_kernels.cuh), in the FP32 build on CUDA cores, scalar
// (llm/ops/attention_ring_kernels.cuh, which also holds the init, finalise and row-dot kernels of every build); both are
// compared by test/test_attention_ring.cu,
// and the pairs' sum against the whole-sequence attention of llm/ops/attention.cuh.
#pragma once
#include <math.h>
#include "../core/common.h"
#include "attention_blocks.h"
#include "attention_ring_kernels.cuh"      // the CUDA kernels of these ops, in their own file (FP32: scalar)
#include "attention_ring_mma_kernels.cuh"  // the block-pair kernels of the 16-bit builds, on tensor cores
#if LLM_HAS_KERNELS
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


#if LLM_HAS_KERNELS && !defined(ENABLE_FP32)
// 128-bit tile loads of a rows buffer: every row of every (b, h) starts on 16 bytes and holds whole chunks
static int ring_vec(int hs, const floatX* base, size_t bs, size_t ts) {
    return hs % x128::size == 0 && bs % x128::size == 0 && ts % x128::size == 0 && is_aligned16(base);
}
// calls f(AttentionTile<HD>()) with HD the head size rounded up to 16, 32, 64 or 128 (the fused kernels' tiles)
template <class Fn>
static void ring_mma_for_head_size(const char* op, int hs, Fn f) {
    if (hs <= 16) f(AttentionTile<16>());
    else if (hs <= 32) f(AttentionTile<32>());
    else if (hs <= 64) f(AttentionTile<64>());
    else if (hs <= 128) f(AttentionTile<128>());
    else fatal("%s: the kernels take head sizes up to 128, found %d", op, hs);
}
// launch a block-pair kernel over (row tiles of n rows, B*H) with 4 warps and `smem` bytes of dynamic shared memory
// (over the 48 KiB default from HD 128 on: opted in)
template <class K, class... Args>
static void ring_mma_launch(K kernel, size_t smem, int n, int BH, cudaStream_t stream, Args... args) {
    typedef AttentionTile<16> F;  // BR and WARPS are the same for every HD
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    LAUNCH(kernel, dim3((unsigned)ceil_div(n, F::BR), (unsigned)BH), dim3(32 * F::WARPS), smem, stream, args...);
}
#endif

// ----------------------------------------------------------------------------
// launchers (signatures fixed by llm/sharded/context_parallel.h; see the top of the file for the layouts)

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
#if defined(ENABLE_FP32)
    ring_for_head_size("attention_pair_forward", hs, [&](auto hd) {
        LAUNCH(attention_pair_forward_kernel<decltype(hd)::value>, dim3((unsigned)ceil_div(nq, RING_ROWS), (unsigned)(B * H)),
               dim3(RING_ROWS * 32), 0, s, O, m, l, q, q_bs, q_ts, k, v, kv_bs, kv_ts, H, hs, nq, nk, causal, scale);
    });
#else  // tensor cores (attention_ring_mma_kernels.cuh)
    int vec = ring_vec(hs, q, q_bs, q_ts) && ring_vec(hs, k, kv_bs, kv_ts) && ring_vec(hs, v, kv_bs, kv_ts);
    ring_mma_for_head_size("attention_pair_forward", hs, [&](auto tile) {
        typedef decltype(tile) F;
        ring_mma_launch(attention_pair_forward_mma_kernel<F::HDIM>, F::FORWARD, nq, B * H, s, O, m, l, q, q_bs, q_ts, k, v,
                        kv_bs, kv_ts, H, hs, nq, nk, causal, scale, vec);
    });
#endif
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
#if !defined(ENABLE_FP32)  // tensor cores (attention_ring_mma_kernels.cuh)
    int vec = ring_vec(hs, q, q_bs, q_ts) && ring_vec(hs, k, kv_bs, kv_ts) && ring_vec(hs, v, kv_bs, kv_ts) &&
              ring_vec(hs, dout, o_bs, o_ts);
    ring_mma_for_head_size("attention_pair_backward", hs, [&](auto tile) {
        typedef decltype(tile) F;
        ring_mma_launch(attention_pair_backward_dkdv_mma_kernel<F::HDIM>, F::DKDV, nk, B * H, s, dk, dv, dkv_bs, dkv_ts, dout,
                        o_bs, o_ts, lse, D, ls, q, q_bs, q_ts, k, v, kv_bs, kv_ts, H, hs, nq, nk, causal, scale, vec);
        ring_mma_launch(attention_pair_backward_dq_mma_kernel<F::HDIM>, F::DQ, nq, B * H, s, dq, dq_bs, dq_ts, dout, o_bs, o_ts,
                        lse, D, ls, q, q_bs, q_ts, k, v, kv_bs, kv_ts, H, hs, nq, nk, causal, scale, vec);
    });
#else
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
#endif
}
