// encoder.cuh: the GPT-2 input embedding, out[b,t,:] = wte[inp[b,t],:] + wpe[t,:], and its backward.
// The backward is deterministic: every gradient element is summed in a fixed order.
// The _range forms serve the vocabulary-parallel embedding (llm/sharded/tensor_parallel.h): wte holds only the
// rows of tokens [v0, v0 + Vl); a token outside contributes zero (and gets no gradient here), and
// wpe may be NULL (added by one tp rank only).
#pragma once
#include "../core/common.h"
#include "../core/context.h"  // OP_PROFILE

// ----------------------------------------------------------------------------
// CPU reference

static void encoder_forward_cpu(float* out,        // (B,T,C)
                                const int* inp,    // (B,T) token ids
                                const float* wte,  // (Vl,C) the rows of tokens [v0, v0 + Vl)
                                const float* wpe,  // (maxT,C) or NULL
                                int v0, int Vl, int B, int T, int C) {
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float* o = out + ((size_t)b * T + t) * C;
            int tok = inp[b * T + t] - v0;
            const float* we = tok >= 0 && tok < Vl ? wte + (size_t)tok * C : NULL;
            const float* pe = wpe ? wpe + (size_t)t * C : NULL;
            for (int c = 0; c < C; c++) o[c] = (we ? we[c] : 0.0f) + (pe ? pe[c] : 0.0f);
        }
    }
}

// dwte[inp[b,t] - v0,:] += dout[b,t,:] for the tokens in [v0, v0 + Vl); dwpe[t,:] += dout[b,t,:]
// (both accumulate)
static void encoder_backward_cpu(float* dwte,        // (Vl,C)
                                 float* dwpe,        // (maxT,C)
                                 const float* dout,  // (B,T,C)
                                 const int* inp,     // (B,T)
                                 int v0, int Vl, int B, int T, int C) {
    // threads own disjoint channel ranges and walk (b,t) in order: race-free and deterministic
    #pragma omp parallel
    {
        int c0, c1;
        omp_thread_share(C, &c0, &c1);
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                const float* d = dout + ((size_t)b * T + t) * C;
                int tok = inp[b * T + t] - v0;
                float* dpe = dwpe + (size_t)t * C;
                if (tok >= 0 && tok < Vl) {
                    float* dwe = dwte + (size_t)tok * C;
                    for (int c = c0; c < c1; c++) { dwe[c] += d[c]; dpe[c] += d[c]; }
                } else {
                    for (int c = c0; c < c1; c++) dpe[c] += d[c];
                }
            }
        }
    }
}

// ----------------------------------------------------------------------------
// CUDA kernels
#if LLM_HAS_KERNELS
#include "../core/cuda_utils.cuh"
#include <algorithm>
#include <vector>

// Rows of every tensor here are C floatX long and are accessed 16 bytes (x128) at a time, so C must
// be a multiple of x128::size (8 in BF16, 4 in FP32; GPT-2's C = 768, 1024, 1280, 1600 all are) and
// the base pointers 16-byte aligned. The launchers check both.

// out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]; one thread per 16 bytes of out.
// Per element: reads 1 floatX of wte and 1 of wpe (a row of wpe is shared by the B sequences and a row
// of wte by the repeats of its token, so part of these reads hit L2), writes 1 floatX; plus one int
// token id per 16 bytes of out (shared by the row's threads, cached).
__global__ void encoder_forward_kernel(floatX* out,        // (B,T,C)
                                       const int* inp,     // (B,T)
                                       const floatX* wte,  // (Vl,C) the rows of tokens [v0, v0 + Vl)
                                       const floatX* wpe,  // (maxT,C) or NULL
                                       int v0, int Vl, int B, int T, int C) {
    int chunks_per_row = C / x128::size;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * chunks_per_row) return;
    size_t bt = idx / chunks_per_row;
    int c = (int)(idx % chunks_per_row) * x128::size;
    int t = (int)(bt % T);
    int tok = inp[bt] - v0;
    x128 we = tok >= 0 && tok < Vl ? load128(wte + (size_t)tok * C + c) : x128::constant((floatX)0.0f);
    x128 pe = wpe ? load128(wpe + (size_t)t * C + c) : x128::constant((floatX)0.0f);
    x128 o;
    #pragma unroll
    for (int k = 0; k < x128::size; k++) o[k] = (floatX)((float)we[k] + (float)pe[k]);
    store128(out + bt * C + c, o);  // read next by the first LayerNorm: keep it cacheable
}

// dwpe[t,:] += sum over b of dout[b,t,:], b ascending: deterministic. One thread per (t, 16 bytes of
// channels); the B loads of a thread are independent, so they overlap.
// Per element of dout: reads 1 floatX; per element of dwpe (T rows): reads and writes 1 floatX.
__global__ void encoder_backward_wpe_kernel(floatX* dwpe,        // (maxT,C) accumulates, rows < T
                                            const floatX* dout,  // (B,T,C)
                                            int B, int T, int C) {
    int chunks_per_row = C / x128::size;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * chunks_per_row) return;
    int t = idx / chunks_per_row;
    int c = (idx % chunks_per_row) * x128::size;
    float acc[x128::size];
    #pragma unroll
    for (int k = 0; k < x128::size; k++) acc[k] = 0.0f;
    #pragma unroll 4
    for (int b = 0; b < B; b++) {
        x128 d = load128(dout + ((size_t)b * T + t) * C + c);  // not cs: the wte kernel reads dout next
        #pragma unroll
        for (int k = 0; k < x128::size; k++) acc[k] += (float)d[k];
    }
    floatX* g = dwpe + (size_t)t * C + c;
    x128 gv = load128(g);
    #pragma unroll
    for (int k = 0; k < x128::size; k++) gv[k] = (floatX)((float)gv[k] + acc[k]);
    store128(g, gv);
}

// dwte[token,:] += sum of dout[b,t,:] over the positions (b,t) holding the token, deterministic.
// The host groups the positions by token into buckets (encoder_backward below). One block per
// (bucket, chunk of 32 * x128::size channels); lane l of every warp owns the channels
// chunk*32*x128::size + l*x128::size + [0, x128::size). Warp w sums the bucket's positions w, w+WARPS,
// w+2*WARPS, ... in that order, then warp 0 adds the WARPS sums in warp order: a fixed order for every
// element, whatever the scheduling. WARPS is a template parameter so that long buckets (frequent
// tokens) get more warps than the many buckets of one or two positions.
// Per element of dout: reads 1 floatX once; per touched element of dwte: reads and writes 1 floatX.
template <int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
encoder_backward_wte_kernel(floatX* dwte,              // (Vp,C) accumulates
                            const floatX* dout,        // (B,T,C)
                            const int* positions,      // (B*T) b*T+t, by bucket, ascending within one
                            const int* bucket_start,   // (nbuckets+1) bucket k: positions[start[k], start[k+1])
                            const int* bucket_token,   // (nbuckets) the token of bucket k
                            int first_bucket, int C) {
    __shared__ float sums[WARPS][x128::size][32];  // (warp, element of x128, lane): conflict-free
    int chunks = (C + 32 * x128::size - 1) / (32 * x128::size);
    int bucket = first_bucket + blockIdx.x / chunks;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int c = ((blockIdx.x % chunks) * 32 + lane) * x128::size;  // this lane's first channel
    float acc[x128::size];
    #pragma unroll
    for (int k = 0; k < x128::size; k++) acc[k] = 0.0f;
    if (c < C) {
        int end = bucket_start[bucket + 1];
        #pragma unroll 4
        for (int p = bucket_start[bucket] + warp; p < end; p += WARPS) {
            x128 d = load128cs(dout + (size_t)positions[p] * C + c);  // the last read of dout
            #pragma unroll
            for (int k = 0; k < x128::size; k++) acc[k] += (float)d[k];
        }
    }
    #pragma unroll
    for (int k = 0; k < x128::size; k++) sums[warp][k][lane] = acc[k];
    __syncthreads();
    if (warp == 0 && c < C) {
        floatX* g = dwte + (size_t)bucket_token[bucket] * C + c;
        x128 gv = load128(g);
        #pragma unroll
        for (int k = 0; k < x128::size; k++) {
            float s = 0.0f;
            for (int w = 0; w < WARPS; w++) s += sums[w][k][lane];
            gv[k] = (floatX)((float)gv[k] + s);
        }
        store128(g, gv);
    }
}

#define ENCODER_BLOCK_SIZE 256
#define ENCODER_WTE_WARPS_LONG 32    // warps per block for buckets of >= ENCODER_WTE_LONG positions
#define ENCODER_WTE_WARPS_SHORT 4    // warps per block for the others
#define ENCODER_WTE_LONG 256

static void encoder_check_shapes(const char* who, int C, const void* a, const void* b, const void* c,
                                 const void* d) {
    if (C <= 0 || C % x128::size != 0) {
        fatal("%s: expected the channel count C to be a positive multiple of %d (16-byte rows for "
              "128-bit loads in %s), found C = %d", who, x128::size, PRECISION_MODE, C);
    }
    if ((((uintptr_t)a) | ((uintptr_t)b) | ((uintptr_t)c) | ((uintptr_t)d)) % 16 != 0) {
        fatal("%s: expected 16-byte aligned tensors (128-bit loads), found %p %p %p %p", who, a, b, c, d);
    }
}
#endif

// ----------------------------------------------------------------------------
// launchers

static void encoder_forward_range(floatX* out,        // (B,T,C)
                                  const int* inp,     // (B,T) on the device
                                  const floatX* wte,  // (Vl,C) the rows of tokens [v0, v0 + Vl)
                                  const floatX* wpe,  // (maxT,C) or NULL
                                  int v0, int Vl, int B, int T, int C, cudaStream_t stream) {
    OP_PROFILE(OP_ENCODER);
#if LLM_BUILD_CPU
    (void)stream;
    // 16-bit floatX: FP32 views in, the output rounded once (llm/core/half_cpu.h); FP32: the arrays themselves
    size_t BTC = (size_t)B * T * C;
    int Vr = Vl;  // rows of wte: Vl, or up to the largest token when the range is open (INT_MAX)
    if (Vr == INT_MAX) { Vr = 0; for (int i = 0; i < B * T; i++) if (inp[i] + 1 > Vr) Vr = inp[i] + 1; }
    float* o = f32_out(out, BTC);
    float* we = f32_in(wte, (size_t)Vr * C);
    float* pe = f32_in(wpe, (size_t)T * C);
    encoder_forward_cpu(o, inp, we, pe, v0, Vl, B, T, C);
    f32_store(out, o, BTC);
    f32_free(wte, we);
    f32_free(wpe, pe);
#else
    encoder_check_shapes("encoder_forward", C, out, wte, wpe, NULL);
    size_t threads = (size_t)B * T * (C / x128::size);
    if (threads == 0) return;
    LAUNCH(encoder_forward_kernel, dim3((unsigned)ceil_div_sz(threads, ENCODER_BLOCK_SIZE)), dim3(ENCODER_BLOCK_SIZE),
           0, stream, out, inp, wte, wpe, v0, Vl, B, T, C);
#endif
}

static void encoder_forward(floatX* out,        // (B,T,C)
                            const int* inp,     // (B,T) on the device
                            const floatX* wte,  // (Vp,C)
                            const floatX* wpe,  // (maxT,C)
                            int B, int T, int C, cudaStream_t stream) {
    encoder_forward_range(out, inp, wte, wpe, 0, INT_MAX, B, T, C, stream);
}

// scratch: B*T*C floats of device memory the kernels may use; inp_host: the same tokens on the host
static void encoder_backward_range(floatX* dwte,        // (Vl,C) accumulates, the rows of tokens [v0, v0 + Vl)
                                   floatX* dwpe,        // (maxT,C) accumulates
                                   float* scratch,      // (B*T*C)
                                   const floatX* dout,  // (B,T,C)
                                   const int* inp,      // (B,T) on the device
                                   const int* inp_host, // (B,T) on the host
                                   int v0, int Vl, int B, int T, int C, cudaStream_t stream) {
    OP_PROFILE(OP_ENCODER);
#if LLM_BUILD_CPU
    (void)scratch; (void)inp_host; (void)stream;
    size_t BTC = (size_t)B * T * C;
    int Vr = Vl;
    if (Vr == INT_MAX) { Vr = 0; for (int i = 0; i < B * T; i++) if (inp[i] + 1 > Vr) Vr = inp[i] + 1; }
    // the accumulated gradients in FP32 (each element rounded once when stored back)
    float* dwe = f32_in(dwte, (size_t)Vr * C);
    float* dpe = f32_in(dwpe, (size_t)T * C);
    float* d = f32_in(dout, BTC);
    encoder_backward_cpu(dwe, dpe, d, inp, v0, Vl, B, T, C);
    f32_store(dwte, dwe, (size_t)Vr * C);
    f32_store(dwpe, dpe, (size_t)T * C);
    f32_free(dout, d);
#else
    encoder_check_shapes("encoder_backward", C, dwte, dwpe, dout, scratch);
    int BT = B * T;
    if (BT == 0) return;
    (void)inp;  // the kernels read the buckets built from inp_host instead

    // dwpe: B terms per element, summed in b order
    int wpe_threads = T * (C / x128::size);
    LAUNCH(encoder_backward_wpe_kernel, dim3(ceil_div(wpe_threads, ENCODER_BLOCK_SIZE)), dim3(ENCODER_BLOCK_SIZE), 0,
           stream, dwpe, dout, B, T, C);

    // dwte: bucket the positions by token on the host. A counting sort keeps the positions of one token
    // ascending; the buckets are then ordered longest first (ties by token), so that the longest run
    // of work starts first and the order is a pure function of the tokens.
    int max_token = 0;
    for (int i = 0; i < BT; i++) {
        if (inp_host[i] < 0) fatal("encoder_backward: token id %d at position %d is negative", inp_host[i], i);
        if (inp_host[i] > max_token) max_token = inp_host[i];
    }
    std::vector<int> token_start(max_token + 2, 0);  // counting sort: first slot of each token
    for (int i = 0; i < BT; i++) token_start[inp_host[i] + 1]++;
    for (int v = 0; v <= max_token; v++) token_start[v + 1] += token_start[v];
    std::vector<int> by_token(BT), fill(token_start.begin(), token_start.end() - 1);
    for (int i = 0; i < BT; i++) by_token[fill[inp_host[i]]++] = i;
    std::vector<int> tokens;  // the distinct tokens of [v0, v0 + Vl), then sorted into bucket order
    for (int v = 0; v <= max_token; v++) {
        if (token_start[v + 1] > token_start[v] && v >= v0 && v - v0 < Vl) tokens.push_back(v);
    }
    std::sort(tokens.begin(), tokens.end(), [&](int a, int b) {
        int na = token_start[a + 1] - token_start[a], nb = token_start[b + 1] - token_start[b];
        return na != nb ? na > nb : a < b;
    });
    // the three arrays the kernel reads, back to back: bucket_start (U+1), bucket_token (U), positions (BT)
    int U = (int)tokens.size();
    std::vector<int> info((size_t)2 * U + 1 + BT);
    int* h_start = info.data();
    int* h_token = h_start + U + 1;
    int* h_pos = h_token + U;
    int n = 0, n_long = 0;  // buckets [0, n_long) have >= ENCODER_WTE_LONG positions
    for (int k = 0; k < U; k++) {
        int v = tokens[k];
        h_start[k] = n;
        h_token[k] = v - v0;
        for (int j = token_start[v]; j < token_start[v + 1]; j++) h_pos[n++] = by_token[j];
        if (token_start[v + 1] - token_start[v] >= ENCODER_WTE_LONG) n_long = k + 1;
    }
    h_start[U] = n;
    // to the device, into scratch (2U+1+BT <= 3*B*T+1 ints fit its B*T*C floats since C >= 4). The
    // source is pageable host memory: cudaMemcpyAsync copies it to a staging buffer before it returns,
    // so `info` may be freed right after, while the GPU may still run earlier work.
    int* d_info = (int*)scratch;
    cudaCheck(cudaMemcpyAsync(d_info, info.data(), info.size() * sizeof(int), cudaMemcpyHostToDevice, stream));
    const int* d_start = d_info;
    const int* d_token = d_start + U + 1;
    const int* d_pos = d_token + U;
    int chunks = ceil_div(C, 32 * x128::size);
    if (n_long > 0) {
        LAUNCH(encoder_backward_wte_kernel<ENCODER_WTE_WARPS_LONG>, dim3(n_long * chunks),
               dim3(ENCODER_WTE_WARPS_LONG * 32), 0, stream, dwte, dout, d_pos, d_start, d_token, 0, C);
    }
    if (U > n_long) {
        LAUNCH(encoder_backward_wte_kernel<ENCODER_WTE_WARPS_SHORT>, dim3((U - n_long) * chunks),
               dim3(ENCODER_WTE_WARPS_SHORT * 32), 0, stream, dwte, dout, d_pos, d_start, d_token, n_long, C);
    }
#endif
}

static void encoder_backward(floatX* dwte,        // (Vp,C) accumulates
                             floatX* dwpe,        // (maxT,C) accumulates
                             float* scratch,      // (B*T*C)
                             const floatX* dout,  // (B,T,C)
                             const int* inp,      // (B,T) on the device
                             const int* inp_host, // (B,T) on the host
                             int B, int T, int C, cudaStream_t stream) {
    encoder_backward_range(dwte, dwpe, scratch, dout, inp, inp_host, 0, INT_MAX, B, T, C, stream);
}
