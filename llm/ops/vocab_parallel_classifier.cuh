// vocab_parallel_classifier.cuh: the cross-entropy of logits split by vocabulary over the tp ranks
// (Megatron-LM, Shoeybi et al. 2019, sec. 3: the LM head's output is never gathered). Tp rank r holds
// the logits of columns [v0, v0 + Vl) (v0 = r Vl, Vl = Vp / tp_size) of every row; columns >= V are padding
// and count for nothing.
//   stats   per row, over this rank's valid columns: m_r = max x, s_r = sum exp(x - m_r) (the online-
//           softmax state, (-inf, 0) when the rank has no valid column), t_r = x[target] if the
//           target is in this rank's range, else 0
//   (the caller all-gathers the (m, s, t) triples of the tp_size ranks: 3 floats per row and rank)
//   finish  per row, the same on every rank: M = max_r m_r, S = sum_r s_r exp(m_r - M),
//           lse = M + log S, loss = lse - sum_r t_r (one term is the target logit, the others 0);
//           dlogits = dloss (exp(x - lse) - [column == target]) over this rank's valid columns,
//           0 over its padding
// loss and dlogits equal the one-rank classifier's (llm/ops/fused_classifier.cuh) up to the order of the
// sums: logsumexp over the whole row is the merge of the ranks' states (Milakov & Gimelshein 2018).
#pragma once
#include "../core/common.h"

// ----------------------------------------------------------------------------
// CPU reference

// the valid columns of a rank: [0, n) of its Vl
static inline int vp_valid_columns(int v0, int Vl, int V) {
    int n = V - v0;
    return n < 0 ? 0 : (n > Vl ? Vl : n);
}

static void vp_classifier_stats_cpu(float* stats,         // (BT, 3) out: m, s, t per row
                                    const float* logits,  // (BT, Vl)
                                    const int* targets,   // (BT)
                                    int v0, int Vl, int V, int BT) {
    int n = vp_valid_columns(v0, Vl, V);
    #pragma omp parallel for
    for (int i = 0; i < BT; i++) {
        const float* x = logits + (size_t)i * Vl;
        float m = -INFINITY;
        for (int j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
        double sum = 0.0;
        for (int j = 0; j < n; j++) sum += exp((double)x[j] - (double)m);
        int y = targets[i] - v0;
        stats[3 * i + 0] = m;
        stats[3 * i + 1] = (float)sum;
        stats[3 * i + 2] = (y >= 0 && y < n) ? x[y] : 0.0f;
    }
}

// the row's logsumexp and target logit from the tp_size ranks' states (all, (tp_size, BT, 3)), merged in rank order
LLM_HD static inline void vp_merge_row(const float* all, int tp_size, int BT, int i, float* lse, float* target) {
    float M = -INFINITY, t = 0.0f;
    for (int r = 0; r < tp_size; r++) {
        const float* st = all + ((size_t)r * BT + i) * 3;
        if (st[1] > 0.0f && st[0] > M) M = st[0];
        t += st[2];
    }
    float S = 0.0f;
    for (int r = 0; r < tp_size; r++) {
        const float* st = all + ((size_t)r * BT + i) * 3;
        if (st[1] > 0.0f) S += st[1] * expf(st[0] - M);
    }
    *lse = M + logf(S);
    *target = t;
}

static void vp_classifier_finish_cpu(float* logits,       // (BT, Vl) in: logits; out: dlogits if write_dlogits
                                     float* losses,       // (BT) out
                                     const float* all,    // (tp_size, BT, 3) every rank's stats
                                     int tp_size, float dloss, const int* targets, int v0, int Vl, int V, int BT,
                                     int write_dlogits) {
    int n = vp_valid_columns(v0, Vl, V);
    #pragma omp parallel for
    for (int i = 0; i < BT; i++) {
        float lse, xt;
        vp_merge_row(all, tp_size, BT, i, &lse, &xt);
        losses[i] = lse - xt;
        if (!write_dlogits) continue;
        float* x = logits + (size_t)i * Vl;
        for (int j = 0; j < Vl; j++) {
            x[j] = j < n ? dloss * (expf(x[j] - lse) - (v0 + j == targets[i] ? 1.0f : 0.0f)) : 0.0f;
        }
    }
}

// ----------------------------------------------------------------------------
// CUDA kernels
#if LLM_HAS_KERNELS
#include "../core/cuda_utils.cuh"
#include "fused_classifier.cuh"  // softmax_state_add_chunk, block_softmax_state_reduce

// One block per row; each thread walks the row's valid 16-byte chunks block-strided, keeps an online-
// softmax state, and the block merges them (block_softmax_state_reduce), as the one-rank classifier's
// pass 1. Reads sizeof(floatX) per logit; writes 3 floats per row.
__global__ void __launch_bounds__(1024)
vp_classifier_stats_kernel(float* stats,           // (BT, 3)
                           const floatX* logits,   // (BT, Vl)
                           const int* targets,     // (BT)
                           int v0, int Vl, int n) {  // n: valid columns
    const int S = x128::size;
    const floatX* x = logits + (size_t)blockIdx.x * Vl;
    float m = -INFINITY, s = 0.0f;
    for (int c = threadIdx.x; c * S < n; c += blockDim.x) softmax_state_add_chunk(m, s, load128(x + (size_t)c * S), c * S, n);
    block_softmax_state_reduce(m, s);
    if (threadIdx.x == 0) {
        int y = targets[blockIdx.x] - v0;
        float* st = stats + (size_t)blockIdx.x * 3;
        st[0] = m;
        st[1] = s;
        st[2] = (y >= 0 && y < n) ? (float)x[y] : 0.0f;
    }
}

// One block per row: every thread merges the tp_size ranks' states (the same order everywhere), thread 0
// writes the loss, then the block writes dlogits over the row in 16-byte chunks. Reads tp_size * 12 bytes
// per row and, with write_dlogits, reads and writes sizeof(floatX) per logit.
__global__ void __launch_bounds__(1024)
vp_classifier_finish_kernel(floatX* logits,        // (BT, Vl)
                            float* losses,         // (BT)
                            const float* all,      // (tp_size, BT, 3)
                            int tp_size, float dloss, const int* targets, int v0, int Vl, int n, int BT,
                            int write_dlogits) {
    const int S = x128::size;
    float lse, xt;
    vp_merge_row(all, tp_size, BT, blockIdx.x, &lse, &xt);
    if (threadIdx.x == 0) losses[blockIdx.x] = lse - xt;
    if (!write_dlogits) return;
    floatX* x = logits + (size_t)blockIdx.x * Vl;
    const int y = targets[blockIdx.x] - v0;
    for (int c = threadIdx.x; c < Vl / S; c += blockDim.x) {
        x128 packed = load128cs(x + (size_t)c * S);
        x128 out;
        #pragma unroll
        for (int k = 0; k < S; k++) {
            int col = c * S + k;
            float d = dloss * (expf((float)packed[k] - lse) - (col == y ? 1.0f : 0.0f));
            out[k] = (floatX)(col < n ? d : 0.0f);
        }
        store128(x + (size_t)c * S, out);
    }
}

static void vp_classifier_check(const char* who, int Vl, const void* logits) {
    if (Vl <= 0 || Vl % x128::size != 0 || ((uintptr_t)logits) % 16 != 0) {
        fatal("%s: expected the rank's vocabulary columns Vl a positive multiple of %d and 16-byte aligned "
              "logits (128-bit loads in %s), found Vl = %d, logits %p", who, x128::size, PRECISION_MODE, Vl, logits);
    }
}
#endif

// ----------------------------------------------------------------------------
// launchers

// stats (BT, 3) device: this rank's (m, s, t) per row of its logits (BT, Vl)
static void vp_classifier_stats(float* stats, const floatX* logits, const int* targets, int v0, int Vl, int V, int BT,
                                cudaStream_t stream) {
#if LLM_BUILD_CPU
    (void)stream;
    // 16-bit floatX: FP32 views in, each output rounded once (llm/core/half_cpu.h); FP32: the arrays themselves
    float* l = f32_in(logits, (size_t)BT * Vl);
    vp_classifier_stats_cpu(stats, l, targets, v0, Vl, V, BT);
    f32_free(logits, l);
#else
    if (BT <= 0) return;
    vp_classifier_check("vp_classifier_stats", Vl, logits);
    int chunks = Vl / x128::size;
    int block = chunks >= 1024 ? 1024 : ((chunks + 31) / 32) * 32;
    LAUNCH(vp_classifier_stats_kernel, dim3(BT), dim3(block), 0, stream, stats, logits, targets, v0, Vl,
           vp_valid_columns(v0, Vl, V));
#endif
}

// losses (BT) and, with write_dlogits, dlogits in place of logits (BT, Vl), from all (tp_size, BT, 3)
static void vp_classifier_finish(floatX* logits, float* losses, const float* all, int tp_size, float dloss, const int* targets,
                                 int v0, int Vl, int V, int BT, int write_dlogits, cudaStream_t stream) {
#if LLM_BUILD_CPU
    (void)stream;
    float* l = f32_in((const floatX*)logits, (size_t)BT * Vl);
    vp_classifier_finish_cpu(l, losses, all, tp_size, dloss, targets, v0, Vl, V, BT, write_dlogits);
    f32_store(logits, l, (size_t)BT * Vl);
#else
    if (BT <= 0) return;
    vp_classifier_check("vp_classifier_finish", Vl, logits);
    int chunks = Vl / x128::size;
    int block = chunks >= 1024 ? 1024 : ((chunks + 31) / 32) * 32;
    LAUNCH(vp_classifier_finish_kernel, dim3(BT), dim3(block), 0, stream, logits, losses, all, tp_size, dloss, targets, v0,
           Vl, vp_valid_columns(v0, Vl, V), BT, write_dlogits);
#endif
}
