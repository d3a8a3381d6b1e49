// moe_router.cuh: the router of a mixture-of-experts MLP and the layout of its tokens by expert (the
// permutation itself: llm/ops/moe_permute.cuh; llm/model/moe.h is the layer that uses both):
//
//   logits = x Wr^T                (N, E), FP32 accumulation and output whatever floatX is; no bias
//   probs  = softmax(logits)       over the E experts, FP32
//   top-k on probs + bias          bias: optional (E) FP32 (DeepSeek-V3's auxiliary-loss-free balancing,
//                                  Liu et al. 2024, sec. 2.1.2): it only chooses, never enters the gates
//   gates  = chosen probs          renormalised over the K chosen when K > 1 (Megatron-Core's choice);
//                                  K = 1: the prob itself (Switch Transformer, Fedus et al. 2021)
//   capacity                       each expert keeps at most cap = ceil(F K N / E) of its assignments,
//                                  those with the highest router prob (Megatron-Core's "probs" drop
//                                  policy), ties to the lower token index; F = 0: no drops
//   aux    = coef_aux E sum_i f_i P_i   Switch eq. 4 generalised to K: f_i = assignments chosen for
//                                  expert i (before drops) / (K N), constant; P_i = mean_n probs[n, i]
//   z      = coef_z mean_n logsumexp(logits_n)^2   router z-loss (Zoph et al. 2022, ST-MoE eq. 5)
//
// Where Megatron-Core differs or leaves a choice: a dropped assignment keeps its place in the
// renormalisation (the gates are computed over the K chosen before the capacity drops, and a dropped
// one contributes zero); the drop ranking is per expert over all its assignments of this call (no
// padding to the capacity: an expert's rows are exactly its kept assignments).
//
// The permuted layout (what expert parallelism's all-to-all will send): the kept assignments grouped
// by expert, expert-major, within an expert in token order. Assignment a = n K + k is token n's k-th
// choice. MoERouting holds the index maps both ways and the per-expert counts and offsets:
//   assign_row (N K)   a -> its row in the layout, -1 if dropped
//   row_assign (N K)   row -> a (rows [0, Np) valid, Np = offsets[E])
//   counts (3E + 1)    routed (E): assignments chosen per expert before drops; dropped (E); offsets
//                      (E + 1): expert e's rows are [offsets[e], offsets[e+1])
// The host needs the offsets to launch each expert's GEMMs: in the kernel builds that is one
// device-to-host copy of the 3E + 1 ints per layer and call (llm/model/moe.h), a synchronisation point.
//
// The ops, each with its CPU reference (the math; the CPU build's implementation), its CUDA kernel(s)
// and its launcher (same signature in every build):
//   moe_router_logits_forward / _backward   logits = x Wr^T; dx += dlogits Wr, dWr += dlogits^T x
//   moe_route_forward                       softmax, top-k, gates, capacity drops, layout, both losses
//   moe_route_backward                      dlogits from the gates' gradient and the two losses
// (MOE_BLOCK and moe_grid, the kernels' block size and grid, serve llm/ops/moe_permute.cuh too.)
#pragma once
#include "../core/common.h"
#include "../core/context.h"  // OP_PROFILE

// device pointers (host memory in the CPU build) of one MoE layer's routing of N tokens
typedef struct {
    float* probs;       // (N, E) softmax of the router logits
    float* lse;         // (N)    logsumexp of each token's logits (the z-loss's)
    int* expert;        // (N, K) the chosen experts, best first by probs + bias
    float* gates;       // (N, K) the chosen probs, renormalised over the K when K > 1
    int* assign_row;    // (N*K)  assignment a = n*K + k -> row in the expert-major layout, -1: dropped
    int* row_assign;    // (N*K)  row -> assignment, rows [0, offsets[E]) valid
    int* counts;        // (3E+1) routed (E), dropped (E), offsets (E+1)
    float* loss;        // (2)    aux (with coef_aux), z (with coef_z)
    int* cand;          // (N*K)  scratch: each expert's assignments, expert after expert, in token order
    int* cand_row;      // (N*K)  scratch: a candidate's row within its expert (-1: dropped)
    float* psum;        // (E)    scratch: sum over tokens of probs[:, e]
    int* routed_all;    // (E)    the routed counts of the whole micro-batch when its tokens are split over ranks
                        //        (llm/sharded/moe_sequence.h; the aux loss's f); unused otherwise
} MoERouting;

// the counts inside MoERouting.counts (host or device array of 3E + 1 ints)
LLM_HD static inline int* moe_routed(int* counts, int E) { (void)E; return counts; }
LLM_HD static inline int* moe_dropped(int* counts, int E) { return counts + E; }
LLM_HD static inline int* moe_offsets(int* counts, int E) { return counts + 2 * E; }

// the capacity of each expert: ceil(F K N / E) assignments; F = 0: no limit (N K)
static inline int moe_capacity(float capacity_factor, int N, int E, int K) {
    if (capacity_factor <= 0.0f) return N * K;
    double cap = ceil((double)capacity_factor * K * N / E);
    return cap > (double)N * K ? N * K : (int)cap;
}

// ----------------------------------------------------------------------------
// CPU reference (T: float, or the CPU build's 16-bit floatX; arithmetic in FP32, outputs rounded once)

template <class T>
static void moe_router_logits_forward_cpu(float* logits /*(N,E)*/, const T* x /*(N,C)*/, const T* wr /*(E,C)*/,
                                          int N, int C, int E) {
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        for (int e = 0; e < E; e++) {
            float s = 0.0f;
            for (int c = 0; c < C; c++) s += (float)x[(size_t)n * C + c] * (float)wr[(size_t)e * C + c];
            logits[(size_t)n * E + e] = s;
        }
    }
}

// dx += dlogits @ Wr (the router's share of the input gradient, added to what dx holds), dwr += dlogits^T @ x
template <class T>
static void moe_router_logits_backward_cpu(T* dx /*(N,C)*/, T* dwr /*(E,C)*/, const float* dlogits /*(N,E)*/,
                                           const T* x /*(N,C)*/, const T* wr /*(E,C)*/, int N, int C, int E) {
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) {
            float s = 0.0f;
            for (int e = 0; e < E; e++) s += dlogits[(size_t)n * E + e] * (float)wr[(size_t)e * C + c];
            dx[(size_t)n * C + c] = (float)dx[(size_t)n * C + c] + s;
        }
    }
    #pragma omp parallel for
    for (int e = 0; e < E; e++) {
        for (int c = 0; c < C; c++) {
            float s = 0.0f;
            for (int n = 0; n < N; n++) s += dlogits[(size_t)n * E + e] * (float)x[(size_t)n * C + c];
            dwr[(size_t)e * C + c] = (float)dwr[(size_t)e * C + c] + s;
        }
    }
}

// token n: softmax, logsumexp, top-k on probs + bias (ties to the lower expert), gates. Also the kernel's
// (one thread per token), so that both builds choose alike.
LLM_HD static inline void moe_route_token(float* probs /*(E)*/, float* lse, int* expert /*(K)*/, float* gates /*(K)*/,
                                          const float* logits /*(E)*/, const float* bias /*(E) or NULL*/, int E, int K) {
    float m = logits[0];
    for (int e = 1; e < E; e++) m = fmaxf(m, logits[e]);
    float sum = 0.0f;
    for (int e = 0; e < E; e++) { probs[e] = exp_fast(logits[e] - m); sum += probs[e]; }
    float inv = 1.0f / sum;
    for (int e = 0; e < E; e++) probs[e] *= inv;
    *lse = m + logf(sum);
    float S = 0.0f;
    for (int k = 0; k < K; k++) {
        int best = -1;
        float best_score = 0.0f;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= expert[j] == e;
            float score = probs[e] + (bias != NULL ? bias[e] : 0.0f);
            if (!taken && (best < 0 || score > best_score)) { best = e; best_score = score; }
        }
        expert[k] = best;
        S += probs[best];
    }
    for (int k = 0; k < K; k++) gates[k] = K > 1 ? probs[expert[k]] / S : probs[expert[k]];
}

// a candidate of expert e is kept when fewer than cap others of e rank above it: a higher prob, or the
// same prob and a lower token (every token chooses an expert at most once, so tokens are distinct)
LLM_HD static inline int moe_outranks(float pj, int nj, float pi, int ni) { return pj > pi || (pj == pi && nj < ni); }

// the whole routing of N tokens into r (host arrays); cap from moe_capacity
static void moe_route_forward_cpu(const MoERouting* r, const float* logits /*(N,E)*/, const float* bias /*(E) or NULL*/,
                                  int N, int E, int K, int cap, float aux_coef, float z_coef) {
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        moe_route_token(r->probs + (size_t)n * E, r->lse + n, r->expert + (size_t)n * K, r->gates + (size_t)n * K,
                        logits + (size_t)n * E, bias, E, K);
    }
    int NK = N * K;
    int *routed = moe_routed(r->counts, E), *dropped = moe_dropped(r->counts, E), *off = moe_offsets(r->counts, E);
    // each expert's candidates in token order, expert after expert
    int start = 0;
    for (int e = 0; e < E; e++) {
        int m = 0;
        for (int a = 0; a < NK; a++) if (r->expert[a] == e) r->cand[start + m++] = a;
        routed[e] = m;
        // keep the cap best by prob; rows within the expert in token order
        int kept = 0;
        for (int i = 0; i < m; i++) {
            int ai = r->cand[start + i], ni = ai / K;
            float pi = r->probs[(size_t)ni * E + e];
            int rank = 0;
            for (int j = 0; j < m; j++) {
                int nj = r->cand[start + j] / K;
                rank += moe_outranks(r->probs[(size_t)nj * E + e], nj, pi, ni);
            }
            r->cand_row[start + i] = rank < cap ? kept++ : -1;
        }
        dropped[e] = m - kept;
        start += m;
    }
    off[0] = 0;
    for (int e = 0; e < E; e++) off[e + 1] = off[e] + routed[e] - dropped[e];
    for (int i = 0; i < NK; i++) {
        int a = r->cand[i], e = r->expert[a];
        int row = r->cand_row[i] < 0 ? -1 : off[e] + r->cand_row[i];
        r->assign_row[a] = row;
        if (row >= 0) r->row_assign[row] = a;
    }
    // the losses (sums in FP32 in token order)
    float aux = 0.0f, zsum = 0.0f;
    for (int e = 0; e < E; e++) {
        float ps = 0.0f;
        for (int n = 0; n < N; n++) ps += r->probs[(size_t)n * E + e];
        r->psum[e] = ps;
        aux += ((float)routed[e] / (float)NK) * (ps / (float)N);
    }
    for (int n = 0; n < N; n++) zsum += r->lse[n] * r->lse[n];
    r->loss[0] = aux_coef * (float)E * aux;
    r->loss[1] = z_coef * zsum / (float)N;
}

// dlogits (N,E), overwritten: the gradient of dgates (N,K) (the gradient of the loss w.r.t. the gates:
// zero for a dropped assignment) through the renormalisation and the softmax, plus scale times the
// gradients of aux and z (top-k and drops are piecewise constant: no gradient). Per token, with
// c_e = scale coef_aux E f_e / N the aux loss's gradient w.r.t. probs[n, e]:
//   K = 1: dp[e_0] = dgate_0;  K > 1: S = sum_k p[e_k], dp[e_k] = (dgate_k - sum_j dgate_j gate_j) / S
//   dlogit_j = p_j (dp_j + c_j - sum_i p_i (dp_i + c_i)) + scale coef_z (2 / N) lse p_j
LLM_HD static inline void moe_route_backward_token(float* dlogits /*(E)*/, const float* probs /*(E)*/, float lse,
                                                   const int* expert /*(K)*/, const float* gates /*(K)*/,
                                                   const float* dgates /*(K)*/, const int* routed /*(E)*/, int N, int E,
                                                   int K, float aux_coef, float z_coef, float scale) {
    float S = 0.0f, gdot = 0.0f;
    for (int k = 0; k < K; k++) { S += probs[expert[k]]; gdot += dgates[k] * gates[k]; }
    float caux = scale * aux_coef * (float)E / ((float)N * (float)K * (float)N);  // times routed[e]: c_e
    float dot = 0.0f;
    for (int e = 0; e < E; e++) {
        float dp = caux * (float)routed[e];
        for (int k = 0; k < K; k++) if (expert[k] == e) dp += K > 1 ? (dgates[k] - gdot) / S : dgates[k];
        dlogits[e] = dp;
        dot += probs[e] * dp;
    }
    float zc = scale * z_coef * 2.0f / (float)N * lse;
    for (int e = 0; e < E; e++) dlogits[e] = probs[e] * (dlogits[e] - dot) + zc * probs[e];
}

// (routed, Nall: the counts and tokens the losses are over, moe_route_backward's)
static void moe_route_backward_cpu(float* dlogits /*(N,E)*/, const MoERouting* r, const float* dgates /*(N,K)*/, int N,
                                   int E, int K, float aux_coef, float z_coef, float scale, const int* routed = NULL,
                                   int Nall = 0) {
    if (routed == NULL) { routed = moe_routed(r->counts, E); Nall = N; }
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        moe_route_backward_token(dlogits + (size_t)n * E, r->probs + (size_t)n * E, r->lse[n], r->expert + (size_t)n * K,
                                 r->gates + (size_t)n * K, dgates + (size_t)n * K, routed, Nall, E, K, aux_coef, z_coef,
                                 scale);
    }
}

// ----------------------------------------------------------------------------
// CUDA kernels
#if LLM_HAS_KERNELS
#include "../core/cuda_utils.cuh"

#define MOE_BLOCK 256

// one warp per token: the E dot products over C, lanes over c, FP32
__global__ void moe_router_logits_kernel(float* logits,        // (N,E)
                                         const floatX* x,      // (N,C)
                                         const floatX* wr,     // (E,C)
                                         int N, int C, int E) {
    int n = (int)((blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (n >= N) return;  // whole warps leave together
    const floatX* xn = x + (size_t)n * C;
    for (int e = 0; e < E; e++) {
        const floatX* w = wr + (size_t)e * C;
        float s = 0.0f;
        for (int c = lane; c < C; c += 32) s += (float)xn[c] * (float)w[c];
        s = warp_reduce_sum(s);
        if (lane == 0) logits[(size_t)n * E + e] = s;
    }
}

// one thread per (n, c): dx[n, c] += sum_e dlogits[n, e] Wr[e, c]
__global__ void moe_router_dx_kernel(floatX* dx,              // (N,C)
                                     const float* dlogits,    // (N,E)
                                     const floatX* wr,        // (E,C)
                                     int N, int C, int E) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    int n = (int)(i / C), c = (int)(i % C);
    float s = 0.0f;
    for (int e = 0; e < E; e++) s += dlogits[(size_t)n * E + e] * (float)wr[(size_t)e * C + c];
    dx[i] = (floatX)((float)dx[i] + s);
}

// one thread per (e, c): dwr[e, c] += sum_n dlogits[n, e] x[n, c], over the tokens in order (deterministic;
// a reduction split over token blocks would be faster for large N)
__global__ void moe_router_dw_kernel(floatX* dwr,             // (E,C)
                                     const float* dlogits,    // (N,E)
                                     const floatX* x,         // (N,C)
                                     int N, int C, int E) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)E * C) return;
    int e = (int)(i / C), c = (int)(i % C);
    float s = 0.0f;
    for (int n = 0; n < N; n++) s += dlogits[(size_t)n * E + e] * (float)x[(size_t)n * C + c];
    dwr[i] = (floatX)((float)dwr[i] + s);
}

// one thread per token: softmax, lse, top-k, gates (moe_route_token)
__global__ void moe_route_topk_kernel(MoERouting r, const float* logits /*(N,E)*/, const float* bias /*(E) or NULL*/,
                                      int N, int E, int K) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    moe_route_token(r.probs + (size_t)n * E, r.lse + n, r.expert + (size_t)n * K, r.gates + (size_t)n * K,
                    logits + (size_t)n * E, bias, E, K);
}

// one block per expert: routed[e] = the assignments that chose it
__global__ void moe_route_count_kernel(MoERouting r, int NK, int E) {
    __shared__ int total;
    int e = blockIdx.x;
    if (threadIdx.x == 0) total = 0;
    __syncthreads();
    int mine = 0;
    for (int a = threadIdx.x; a < NK; a += blockDim.x) mine += r.expert[a] == e;
    atomicAdd(&total, mine);
    __syncthreads();
    if (threadIdx.x == 0) moe_routed(r.counts, E)[e] = total;
}

// the exclusive prefix sum of flag over the block (blockDim.x a multiple of 32, at most 1024), and the
// block's total in *total; uses warp ballots and 32 ints of shared memory
__device__ __forceinline__ int moe_block_exclusive_scan(int flag, int* total) {
    __shared__ int warp_sums[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    unsigned bits = __ballot_sync(0xffffffffu, flag != 0);
    int before = __popc(bits & ((1u << lane) - 1u));
    __syncthreads();  // the previous call's readers are done with warp_sums
    if (lane == 0) warp_sums[warp] = __popc(bits);
    __syncthreads();
    int offset = 0, sum = 0;
    for (int w = 0; w < nwarps; w++) {
        if (w < warp) offset += warp_sums[w];
        sum += warp_sums[w];
    }
    *total = sum;
    return offset + before;
}

// One block per expert e: its candidates (the assignments that chose e) in token order into
// cand[start_e ...) (start_e = the routed counts of the experts before e), then which of them the
// capacity keeps (rank by prob, moe_outranks) and each kept one's row within e (token order), in
// cand_row (-1: dropped); dropped[e]. O(m^2 / blockDim) comparisons for an expert of m candidates (a
// sort would scale better for large m).
__global__ void moe_route_capacity_kernel(MoERouting r, int NK, int E, int K, int cap) {
    __shared__ int base;
    int e = blockIdx.x;
    const int* routed = moe_routed(r.counts, E);
    int start = 0;
    for (int j = 0; j < e; j++) start += routed[j];
    int m = routed[e];
    if (threadIdx.x == 0) base = 0;
    // 1. compaction in assignment order (= token order: a token chooses e at most once)
    for (int a0 = 0; a0 < NK; a0 += blockDim.x) {
        int a = a0 + threadIdx.x, total;
        int flag = a < NK && r.expert[a] == e;
        int pos = moe_block_exclusive_scan(flag, &total);  // its barriers order base's reads after the write above
        if (flag) r.cand[start + base + pos] = a;
        __syncthreads();
        if (threadIdx.x == 0) base += total;
    }
    __syncthreads();
    // 2. the rank of each candidate among e's; kept flags into cand_row
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        int ni = r.cand[start + i] / K;
        float pi = r.probs[(size_t)ni * E + e];
        int rank = 0;
        for (int j = 0; j < m; j++) {
            int nj = r.cand[start + j] / K;
            rank += moe_outranks(r.probs[(size_t)nj * E + e], nj, pi, ni);
        }
        r.cand_row[start + i] = rank < cap;
    }
    __syncthreads();
    // 3. rows within e of the kept, in token order
    if (threadIdx.x == 0) base = 0;
    for (int i0 = 0; i0 < m; i0 += blockDim.x) {
        int i = i0 + threadIdx.x, total;
        int flag = i < m && r.cand_row[start + i];
        int pos = moe_block_exclusive_scan(flag, &total);
        if (i < m) r.cand_row[start + i] = flag ? base + pos : -1;
        __syncthreads();
        if (threadIdx.x == 0) base += total;
    }
    __syncthreads();
    if (threadIdx.x == 0) moe_dropped(r.counts, E)[e] = m - base;
}

// one thread per candidate slot: the offsets (thread 0 writes them) and both index maps
__global__ void moe_route_rows_kernel(MoERouting r, int NK, int E) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int *routed = moe_routed(r.counts, E), *dropped = moe_dropped(r.counts, E);
    if (i == 0) {
        int* off = moe_offsets(r.counts, E);
        off[0] = 0;
        for (int e = 0; e < E; e++) off[e + 1] = off[e] + routed[e] - dropped[e];
    }
    if (i >= NK) return;
    int a = r.cand[i], e = r.expert[a], off = 0;
    for (int j = 0; j < e; j++) off += routed[j] - dropped[j];
    int row = r.cand_row[i] < 0 ? -1 : off + r.cand_row[i];
    r.assign_row[a] = row;
    if (row >= 0) r.row_assign[row] = a;
}

// blocks 0..E-1: psum[e] = sum_n probs[n, e]; block E: loss[1] = z_coef mean_n lse_n^2
__global__ void moe_route_sums_kernel(MoERouting r, int N, int E, float z_coef) {
    int e = blockIdx.x;
    float s = 0.0f;
    for (int n = threadIdx.x; n < N; n += blockDim.x) s += e < E ? r.probs[(size_t)n * E + e] : r.lse[n] * r.lse[n];
    s = block_reduce_sum(s);
    if (threadIdx.x == 0) {
        if (e < E) r.psum[e] = s;
        else r.loss[1] = z_coef * s / (float)N;
    }
}

// one thread: loss[0] = aux_coef E sum_e (routed_e / (K N)) (psum_e / N)
__global__ void moe_route_aux_kernel(MoERouting r, int N, int E, int K, float aux_coef) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    float aux = 0.0f;
    for (int e = 0; e < E; e++) aux += ((float)moe_routed(r.counts, E)[e] / (float)(N * K)) * (r.psum[e] / (float)N);
    r.loss[0] = aux_coef * (float)E * aux;
}

// one thread per token: moe_route_backward_token
__global__ void moe_route_backward_kernel(float* dlogits /*(N,E)*/, MoERouting r, const float* dgates /*(N,K)*/, int N,
                                          int E, int K, float aux_coef, float z_coef, float scale, const int* routed,
                                          int Nall) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    moe_route_backward_token(dlogits + (size_t)n * E, r.probs + (size_t)n * E, r.lse[n], r.expert + (size_t)n * K,
                             r.gates + (size_t)n * K, dgates + (size_t)n * K, routed, Nall, E, K, aux_coef, z_coef, scale);
}

static inline unsigned moe_grid(size_t threads) { return (unsigned)ceil_div_sz(threads, MOE_BLOCK); }

// one thread per element of `threads` in blocks of MOE_BLOCK, none when there is no work: the launch of the moe kernels
// (this file's, llm/ops/moe_permute.cuh's, llm/sharded/moe_sequence.h's) that take one thread per element
template <typename... KArgs, typename... Args>
static void moe_launch(void (*kernel)(KArgs...), size_t threads, cudaStream_t stream, Args... args) {
    if (threads == 0) return;
    LAUNCH(kernel, dim3(moe_grid(threads)), dim3(MOE_BLOCK), 0, stream, args...);
}
#endif

// ----------------------------------------------------------------------------
// launchers

// logits (N,E) FP32 = x (N,C) @ wr^T, wr (E,C)
static void moe_router_logits_forward(float* logits, const floatX* x, const floatX* wr, int N, int C, int E,
                                      cudaStream_t stream) {
    OP_PROFILE(OP_MOE);
#if LLM_BUILD_CPU
    (void)stream;
    moe_router_logits_forward_cpu(logits, x, wr, N, C, E);
#else
    if (N == 0) return;
    moe_launch(moe_router_logits_kernel, (size_t)N * 32, stream, logits, x, wr, N, C, E);
#endif
}

// dx (N,C) += dlogits @ wr (dx holds the experts' share on entry); dwr (E,C) += dlogits^T @ x
static void moe_router_logits_backward(floatX* dx, floatX* dwr, const float* dlogits, const floatX* x, const floatX* wr,
                                       int N, int C, int E, cudaStream_t stream) {
    OP_PROFILE(OP_MOE);
#if LLM_BUILD_CPU
    (void)stream;
    moe_router_logits_backward_cpu(dx, dwr, dlogits, x, wr, N, C, E);
#else
    if (N == 0) return;
    moe_launch(moe_router_dx_kernel, (size_t)N * C, stream, dx, dlogits, wr, N, C, E);
    moe_launch(moe_router_dw_kernel, (size_t)E * C, stream, dwr, dlogits, x, N, C, E);
#endif
}

// the routing of N tokens (r: device arrays of the sizes MoERouting gives) from their logits (N,E):
// probs, lse, experts, gates, the capacity drops (cap: moe_capacity), the layout's index maps and
// counts, and the two losses (r->loss: aux with aux_coef, z with z_coef). Everything stays on the device.
static void moe_route_forward(const MoERouting* r, const float* logits, const float* bias, int N, int E, int K, int cap,
                              float aux_coef, float z_coef, cudaStream_t stream) {
    OP_PROFILE(OP_MOE);
    if (K < 1 || K > E) fatal("moe_route_forward: expected 1 <= K <= E, found K = %d, E = %d", K, E);
#if LLM_BUILD_CPU
    (void)stream;
    moe_route_forward_cpu(r, logits, bias, N, E, K, cap, aux_coef, z_coef);
#else
    int NK = N * K;
    moe_launch(moe_route_topk_kernel, (size_t)N, stream, *r, logits, bias, N, E, K);
    LAUNCH(moe_route_count_kernel, dim3(E), dim3(MOE_BLOCK), 0, stream, *r, NK, E);
    LAUNCH(moe_route_capacity_kernel, dim3(E), dim3(MOE_BLOCK), 0, stream, *r, NK, E, K, cap);
    LAUNCH(moe_route_rows_kernel, dim3(moe_grid(NK > 0 ? NK : 1)), dim3(MOE_BLOCK), 0, stream, *r, NK, E);
    LAUNCH(moe_route_sums_kernel, dim3(E + 1), dim3(MOE_BLOCK), 0, stream, *r, N, E, z_coef);
    LAUNCH(moe_route_aux_kernel, dim3(1), dim3(32), 0, stream, *r, N, E, K, aux_coef);
#endif
}

// dlogits (N,E), overwritten, from dgates (N,K) and scale x the two losses' gradients (moe_route_backward_token).
// The losses are over these N tokens and their routed counts (r->counts), or, when the N are a rank's part of a
// micro-batch of Nall tokens (llm/sharded/moe_sequence.h), over those: routed (E, device) the whole micro-batch's
// counts (NULL: r's own, Nall = N)
static void moe_route_backward(float* dlogits, const MoERouting* r, const float* dgates, int N, int E, int K,
                               float aux_coef, float z_coef, float scale, cudaStream_t stream, const int* routed = NULL,
                               int Nall = 0) {
    OP_PROFILE(OP_MOE);
    if (routed == NULL) { routed = moe_routed(r->counts, E); Nall = N; }
#if LLM_BUILD_CPU
    (void)stream;
    moe_route_backward_cpu(dlogits, r, dgates, N, E, K, aux_coef, z_coef, scale, routed, Nall);
#else
    moe_launch(moe_route_backward_kernel, (size_t)N, stream, dlogits, *r, dgates, N, E, K, aux_coef, z_coef, scale, routed,
               Nall);
#endif
}
