// fused_classifier.cuh: softmax + cross-entropy + its gradient in one pass over each row of logits.
//   loss[i] = logsumexp(logits[i, :V]) - logits[i, target[i]]
//   dlogits[i, v] = dloss * (softmax(logits[i, :V])[v] - [v == target[i]])   for v < V, 0 for padded v >= V
// The padded vocabulary columns V..Vp-1 are ignored by the loss. dlogits overwrites logits in place,
// so the (BT, Vp) buffer is touched once for the forward and once for the backward.
// Then the loss stays on the device: loss_accumulate adds the batch's mean token loss to a double
// accumulator, so that the trainer reads the loss back once per step, not once per micro-batch.
#pragma once
#include "../core/common.h"
#include "../core/context.h"  // OP_PROFILE

// ----------------------------------------------------------------------------
// CPU reference

static void fused_classifier_cpu(float* logits,       // (BT,Vp) in: logits; out: dlogits if write_dlogits
                                 float* losses,       // (BT) per-token loss, overwritten
                                 float dloss,         // d(mean loss)/d(token loss), 1/(B*T*grad_accum)
                                 const int* targets,  // (BT)
                                 int BT, int V, int Vp, int write_dlogits) {
    #pragma omp parallel for
    for (int i = 0; i < BT; i++) {
        float* x = logits + (size_t)i * Vp;
        float maxv = x[0];
        #pragma omp simd reduction(max:maxv)
        for (int v = 1; v < V; v++) maxv = x[v] > maxv ? x[v] : maxv;
        int y = targets[i];
        float xy = x[y];
        // sum of e^(x - max) in float lanes, combined in double (a 50k-term sum)
        double sum = 0.0;
        if (write_dlogits) {
            // keep e^(x - max) in place: the gradient below needs only a scale of it
            for (int v0 = 0; v0 < V; v0 += 1024) {
                int v1 = v0 + 1024 < V ? v0 + 1024 : V;
                float part = 0.0f;
                #pragma omp simd reduction(+:part)
                for (int v = v0; v < v1; v++) { x[v] = exp_fast(x[v] - maxv); part += x[v]; }
                sum += part;
            }
        } else {
            for (int v0 = 0; v0 < V; v0 += 1024) {
                int v1 = v0 + 1024 < V ? v0 + 1024 : V;
                float part = 0.0f;
                #pragma omp simd reduction(+:part)
                for (int v = v0; v < v1; v++) part += exp_fast(x[v] - maxv);
                sum += part;
            }
        }
        float lse = maxv + (float)log(sum);
        losses[i] = lse - xy;
        if (write_dlogits) {
            // dlogits = dloss * (softmax - onehot), softmax = e^(x - max) / sum
            float scale = dloss / (float)sum;
            #pragma omp simd
            for (int v = 0; v < V; v++) x[v] *= scale;
            x[y] -= dloss;
            for (int v = V; v < Vp; v++) x[v] = 0.0f;
        }
    }
}

// acc[0] += (float)(mean of losses[0..BT)), summed in double in index order
static void loss_accumulate_cpu(double* acc, const float* losses, int BT) {  // (1), (BT)
    double sum = 0.0;
    for (int i = 0; i < BT; i++) sum += losses[i];
    acc[0] += (double)(float)(sum / BT);
}

// ----------------------------------------------------------------------------
// CUDA kernels
#if LLM_HAS_KERNELS
#include "../core/cuda_utils.cuh"

// Online softmax (Milakov & Gimelshein 2018): the state of a partial row is (m, s) with m the running
// max and s = sum exp(x - m) over the columns seen so far. Two states merge by rescaling both sums to
// the larger max. An empty state is (-inf, 0); merging two empty states leaves it empty.
__device__ __forceinline__ void softmax_state_merge(float& m, float& s, float m2, float s2) {
    float mn = fmaxf(m, m2);
    if (mn == -INFINITY) return;  // both empty (avoids exp(-inf - -inf) = NaN)
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
}

// Adds a 16-byte chunk of a row, columns [col0, col0 + x128::size), to the state (m, s); columns >= n
// (the tail of the last chunk) count for nothing. The chunk must hold a valid column (col0 < n): then
// its max is finite, and the first rescale of an empty state is exp(-inf) = 0.
__device__ __forceinline__ void softmax_state_add_chunk(float& m, float& s, const x128& packed, int col0, int n) {
    const int S = x128::size;
    float vals[S];
    float cmax = -INFINITY;
    #pragma unroll
    for (int k = 0; k < S; k++) {
        vals[k] = col0 + k < n ? (float)packed[k] : -INFINITY;
        cmax = fmaxf(cmax, vals[k]);
    }
    float mn = fmaxf(m, cmax);
    float cs = 0.0f;
    #pragma unroll
    for (int k = 0; k < S; k++) cs += expf(vals[k] - mn);
    s = s * expf(m - mn) + cs;
    m = mn;
}

// The states of a block's threads merged (blockDim.x a multiple of 32, at most 1024): a butterfly in
// each warp, then every warp reduces the per-warp states, so every thread ends with the same (m, s)
// (the merge is commutative bit for bit). 64 floats of shared memory; safe to call repeatedly.
__device__ __forceinline__ void block_softmax_state_reduce(float& m, float& s) {
    __shared__ float warp_m[32], warp_s[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        softmax_state_merge(m, s, m2, s2);
    }
    __syncthreads();  // a previous call's readers are done with warp_m, warp_s
    if (lane == 0) { warp_m[warp] = m; warp_s[warp] = s; }
    __syncthreads();
    m = lane < nwarps ? warp_m[lane] : -INFINITY;
    s = lane < nwarps ? warp_s[lane] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        softmax_state_merge(m, s, m2, s2);
    }
}

// One block per row of the (BT, Vp) logits; blockDim.x a multiple of 32 (<= 1024). Each thread walks
// the row in 16-byte chunks (x128::size columns), block-strided so that a warp reads 512 contiguous
// bytes per step. Pass 1: the row's online-softmax state; pass 2: dlogits over the logits, in place.
// Bytes per logit: pass 1 reads sizeof(floatX) from DRAM; pass 2 (write_dlogits) reads it again,
// usually from L2 (one row is at most ~100 KB and only the rows of resident blocks are in flight),
// and writes sizeof(floatX). Per row: one int target read, one float loss written.
__global__ void __launch_bounds__(1024)
fused_classifier_kernel(floatX* logits,       // (BT,Vp) in: logits; out: dlogits if write_dlogits
                        float* losses,        // (BT) out: per-token loss
                        float dloss,
                        const int* targets,   // (BT)
                        int V, int Vp, int write_dlogits) {
    const int S = x128::size;
    floatX* x = logits + (size_t)blockIdx.x * Vp;  // this block's row
    const int y = targets[blockIdx.x];
    // the target's logit, read before the barrier below: after it, pass 2 may overwrite it
    const float x_target = threadIdx.x == 0 ? (float)x[y] : 0.0f;

    // pass 1: this thread's state over its chunks of the V valid columns
    float m = -INFINITY, s = 0.0f;
    const int valid_chunks = (V + S - 1) / S;  // chunks with at least one column < V
    for (int c = threadIdx.x; c < valid_chunks; c += blockDim.x) {
        softmax_state_add_chunk(m, s, load128(x + (size_t)c * S), c * S, V);  // cached: pass 2 reads it again
    }

    block_softmax_state_reduce(m, s);
    const float lse = m + logf(s);  // logsumexp of the row
    if (threadIdx.x == 0) losses[blockIdx.x] = lse - x_target;
    if (!write_dlogits) return;

    // pass 2: dlogits = dloss * (softmax - onehot(y)) over the valid columns, 0 over the padding
    const int all_chunks = Vp / S;
    for (int c = threadIdx.x; c < all_chunks; c += blockDim.x) {
        x128 out = x128::constant((floatX)0.0f);
        if (c < valid_chunks) {
            x128 packed = load128cs(x + (size_t)c * S);  // last read of the logits
            #pragma unroll
            for (int k = 0; k < S; k++) {
                int col = c * S + k;
                float p = expf((float)packed[k] - lse);
                float d = dloss * (p - (col == y ? 1.0f : 0.0f));
                out[k] = (floatX)(col < V ? d : 0.0f);
            }
        }
        store128(x + (size_t)c * S, out);
    }
}

// acc[0] += the mean of losses, one block: each thread sums a strided share in double, then a fixed
// shuffle tree and one warp's partials (deterministic). Reads 4 bytes per token.
__global__ void __launch_bounds__(1024) loss_accumulate_kernel(double* acc,           // (1)
                                                             const float* losses,   // (BT)
                                                             int BT) {
    __shared__ double partial[32];
    double v = 0.0;
    for (int i = threadIdx.x; i < BT; i += blockDim.x) v += (double)losses[i];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nwarps ? partial[lane] : 0.0;
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) acc[0] += (double)(float)(v / BT);
    }
}
#endif

// ----------------------------------------------------------------------------
// launcher

static void fused_classifier(floatX* logits, float* losses, float dloss, const int* targets,
                             int BT, int V, int Vp, int write_dlogits, cudaStream_t stream) {
    OP_PROFILE(OP_CLASSIFIER);
#if LLM_BUILD_CPU
    (void)stream;
    // 16-bit floatX: FP32 views in, each output rounded once (llm/core/half_cpu.h); FP32: the arrays themselves
    float* l = f32_in((const floatX*)logits, (size_t)BT * Vp);
    fused_classifier_cpu(l, losses, dloss, targets, BT, V, Vp, write_dlogits);
    f32_store(logits, l, (size_t)BT * Vp);
#else
    // Vp % x128::size == 0 keeps every row 16-byte aligned (the model pads V to a multiple of 128)
    if (BT <= 0) return;
    if (V < 1 || V > Vp || Vp % x128::size != 0 || ((uintptr_t)logits) % 16 != 0) {
        fprintf(stderr, "error: fused_classifier: need 1 <= V <= Vp, Vp a multiple of %d and 16-byte "
                "aligned logits; got V=%d Vp=%d (%s:%d)\n", x128::size, V, Vp, __FILE__, __LINE__);
        exit(EXIT_FAILURE);
    }
    // one thread per 16-byte chunk of the row, up to 1024 (then each thread takes several chunks)
    int chunks = Vp / x128::size;
    int block = chunks >= 1024 ? 1024 : ((chunks + 31) / 32) * 32;
    LAUNCH(fused_classifier_kernel, dim3(BT), dim3(block), 0, stream, logits, losses, dloss, targets,
           V, Vp, write_dlogits);
#endif
}

// acc (1 double, device) += the mean of losses (BT floats, device)
static void loss_accumulate(double* acc, const float* losses, int BT, cudaStream_t stream) {
#if LLM_BUILD_CPU
    (void)stream;
    loss_accumulate_cpu(acc, losses, BT);
#else
    if (BT <= 0) return;
    int block = BT >= 1024 ? 1024 : ((BT + 31) / 32) * 32;
    LAUNCH(loss_accumulate_kernel, dim3(1), dim3(block), 0, stream, acc, losses, BT);
#endif
}
