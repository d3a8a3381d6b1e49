// layernorm.cuh: LayerNorm over the channel dimension (Ba, Kiros, Hinton 2016), eps = 1e-5 as in GPT-2,
//   y = (x - mean) * rstd * w + b,   rstd = 1 / sqrt(var + eps)   (biased variance),
// the same with the residual add fused in front (residual = inp1 + inp2, then LayerNorm of it),
// and the backward, which accumulates into dinp (the residual stream's gradient).
#pragma once
#include "../core/common.h"
#include "../core/context.h"  // OP_PROFILE

#define LAYERNORM_EPS 1e-5f

// ----------------------------------------------------------------------------
// CPU reference

static void layernorm_forward_cpu(float* out,          // (N,C)
                                  float* mean,         // (N)
                                  float* rstd,         // (N)
                                  const float* inp,    // (N,C)
                                  const float* weight, // (C)
                                  const float* bias,   // (C)
                                  int N, int C) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float* x = inp + (size_t)i * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) { float d = x[c] - m; v += d * d; }
        v /= C;
        float s = 1.0f / sqrtf(v + LAYERNORM_EPS);
        float* o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[i] = m;
        rstd[i] = s;
    }
}

static void fused_residual_layernorm_forward_cpu(float* residual,     // (N,C) = inp1 + inp2
                                                 float* out,          // (N,C)
                                                 float* mean,         // (N)
                                                 float* rstd,         // (N)
                                                 const float* inp1,   // (N,C)
                                                 const float* inp2,   // (N,C)
                                                 const float* weight, // (C)
                                                 const float* bias,   // (C)
                                                 int N, int C) {
    #pragma omp parallel for
    for (size_t i = 0; i < (size_t)N * C; i++) residual[i] = inp1[i] + inp2[i];
    layernorm_forward_cpu(out, mean, rstd, residual, weight, bias, N, C);
}

// dinp += dL/dx; dweight += sum_i dout * xhat; dbias += sum_i dout
static void layernorm_backward_cpu(float* dinp,          // (N,C) accumulates
                                   float* dweight,       // (C) accumulates
                                   float* dbias,         // (C) accumulates
                                   const float* dout,    // (N,C)
                                   const float* inp,     // (N,C)
                                   const float* weight,  // (C)
                                   const float* mean,    // (N)
                                   const float* rstd,    // (N)
                                   int N, int C) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float* d = dout + (size_t)i * C;
        const float* x = inp + (size_t)i * C;
        float m = mean[i], s = rstd[i];
        // two reductions: mean(dnorm) and mean(dnorm * xhat), with dnorm = dout * w
        float dnorm_mean = 0.0f, dnorm_xhat_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float dnorm = d[c] * weight[c];
            dnorm_mean += dnorm;
            dnorm_xhat_mean += dnorm * xhat;
        }
        dnorm_mean /= C;
        dnorm_xhat_mean /= C;
        float* di = dinp + (size_t)i * C;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float dnorm = d[c] * weight[c];
            di[c] += (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * s;
        }
    }
    // parameter gradients: each thread owns a channel range and walks all rows in order (deterministic)
    #pragma omp parallel
    {
        int c0, c1;
        omp_thread_share(C, &c0, &c1);
        for (int i = 0; i < N; i++) {
            const float* d = dout + (size_t)i * C;
            const float* x = inp + (size_t)i * C;
            float m = mean[i], s = rstd[i];
            for (int c = c0; c < c1; c++) {
                dweight[c] += d[c] * (x[c] - m) * s;
                dbias[c] += d[c];
            }
        }
    }
}

// ----------------------------------------------------------------------------
// CUDA kernels
#if LLM_HAS_KERNELS
#include "../core/cuda_utils.cuh"

// Rows are C floatX long and are accessed 16 bytes (x128) at a time: C must be a multiple of
// x128::size (8 in BF16, 4 in FP32; GPT-2's 768, 1024, 1280, 1600 all are) and the tensors 16-byte
// aligned. The launchers check both. Statistics and reductions are FP32 whatever floatX is.

// The second half of both forward kernels below: one warp holds its row in registers (xv: K chunks
// per lane, sum: the lane's partial sum of the row); it finishes the mean, the variance (a second
// pass over the registers), writes out_row = (x - mean) * rstd * w + b and the row's statistics.
template <int K>
__device__ __forceinline__ void layernorm_row_from_registers(floatX* out_row,      // (C)
                                                             float* mean,          // (N)
                                                             float* rstd,          // (N)
                                                             int row, const x128 (&xv)[K], float sum,
                                                             const floatX* weight, // (C)
                                                             const floatX* bias,   // (C)
                                                             int lane, int nchunks, int C) {
    float m = warp_reduce_sum(sum) / C;
    float var = 0.0f;
    #pragma unroll
    for (int k = 0; k < K; k++) {
        if (lane + 32 * k < nchunks) {
            #pragma unroll
            for (int j = 0; j < x128::size; j++) {
                float d = (float)xv[k][j] - m;
                var += d * d;
            }
        }
    }
    float s = 1.0f / sqrtf(warp_reduce_sum(var) / C + LAYERNORM_EPS);
    #pragma unroll
    for (int k = 0; k < K; k++) {
        int i = lane + 32 * k;
        if (i < nchunks) {
            x128 w = load128(weight + i * x128::size);
            x128 b = load128(bias + i * x128::size);
            x128 r;
            #pragma unroll
            for (int j = 0; j < x128::size; j++) {
                r[j] = (floatX)(((float)xv[k][j] - m) * s * (float)w[j] + (float)b[j]);
            }
            store128(out_row + i * x128::size, r);  // read next by a matmul: keep it cacheable
        }
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// ---- forward: one warp per row ----
// Lane l holds the row's 16-byte chunks l, l+32, l+64, ... (at most K of them) in registers, so the
// row is read from memory once; the mean is one warp reduction, the variance a second pass over the
// registers (two-pass: no cancellation when |mean| >> std), then the output. K, the chunks per lane,
// is a template parameter so that the row cache is a register array (the launcher picks the smallest
// K that covers C).
// Per element: reads 1 floatX (inp), writes 1 floatX (out); weight and bias (C each) are read by every
// row and stay in L1/L2; mean and rstd add 8 bytes per row.
template <int K>
__global__ void __launch_bounds__(256)
layernorm_forward_kernel(floatX* out,           // (N,C)
                         float* mean,           // (N)
                         float* rstd,           // (N)
                         const floatX* inp,     // (N,C)
                         const floatX* weight,  // (C)
                         const floatX* bias,    // (C)
                         int N, int C) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together: its shuffles stay complete
    int nchunks = C / x128::size;
    const floatX* x = inp + (size_t)row * C;
    x128 xv[K];
    float sum = 0.0f;
    #pragma unroll
    for (int k = 0; k < K; k++) {
        int i = lane + 32 * k;
        if (i < nchunks) {
            xv[k] = load128cs(x + i * x128::size);  // read once: streaming
            #pragma unroll
            for (int j = 0; j < x128::size; j++) sum += (float)xv[k][j];
        }
    }
    layernorm_row_from_registers<K>(out + (size_t)row * C, mean, rstd, row, xv, sum, weight, bias, lane, nchunks, C);
}

// residual = inp1 + inp2 (rounded to floatX and written), then the same LayerNorm as above of the
// rounded residual, i.e. of exactly the tensor the backward will see. One pass over the inputs.
// Per element: reads 2 floatX (inp1, inp2), writes 2 floatX (residual, out); weight, bias and the
// row statistics as in layernorm_forward_kernel.
template <int K>
__global__ void __launch_bounds__(256)
fused_residual_layernorm_forward_kernel(floatX* residual,      // (N,C)
                                        floatX* out,           // (N,C)
                                        float* mean,           // (N)
                                        float* rstd,           // (N)
                                        const floatX* inp1,    // (N,C)
                                        const floatX* inp2,    // (N,C)
                                        const floatX* weight,  // (C)
                                        const floatX* bias,    // (C)
                                        int N, int C) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    int nchunks = C / x128::size;
    size_t row_off = (size_t)row * C;
    x128 xv[K];
    float sum = 0.0f;
    #pragma unroll
    for (int k = 0; k < K; k++) {
        int i = lane + 32 * k;
        if (i < nchunks) {
            x128 a = load128cs(inp1 + row_off + i * x128::size);
            x128 b = load128cs(inp2 + row_off + i * x128::size);
            #pragma unroll
            for (int j = 0; j < x128::size; j++) {
                xv[k][j] = (floatX)((float)a[j] + (float)b[j]);
                sum += (float)xv[k][j];
            }
            store128(residual + row_off + i * x128::size, xv[k]);
        }
    }
    layernorm_row_from_registers<K>(out + row_off, mean, rstd, row, xv, sum, weight, bias, lane, nchunks, C);
}

// ---- backward ----
// The math, per row i with xhat = (x - mean_i) * rstd_i and dnorm = dout * weight:
//   dinp[i,c]  += (dnorm[c] - mean_c(dnorm) - xhat[c] * mean_c(dnorm * xhat)) * rstd_i
//   dweight[c] += sum_i dout[i,c] * xhat[i,c]       dbias[c] += sum_i dout[i,c]
// The first needs two reductions along the row (over c), the others a reduction down the columns
// (over i). Kernel 1 gives each block whole rows, one at a time, and each thread the same 16 bytes of
// channels c in every row: the row reductions are block reductions, and each thread accumulates its
// channels' dweight/dbias terms over the block's rows in registers, then writes them as the block's
// partial sums (FP32, to scratch). Kernel 2 adds the blocks' partial sums in block order into dweight
// and dbias. Every sum has a fixed order and the grid depends only on N: the result is bitwise
// deterministic, with no atomics.

// the sums of a and of b over the block (blockDim.x a multiple of 32); every thread gets both. Like
// block_reduce_sum in cuda_utils.cuh, for two values at the cost of one.
__device__ __forceinline__ void block_reduce_sum2(float& a, float& b) {
    __shared__ float partial_a[32], partial_b[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    a = warp_reduce_sum(a);
    b = warp_reduce_sum(b);
    __syncthreads();  // the previous call's readers are done with the partials
    if (lane == 0) {
        partial_a[warp] = a;
        partial_b[warp] = b;
    }
    __syncthreads();
    a = warp_reduce_sum(lane < nwarps ? partial_a[lane] : 0.0f);
    b = warp_reduce_sum(lane < nwarps ? partial_b[lane] : 0.0f);
}

// Kernel 1: rows blockIdx.x, blockIdx.x + gridDim.x, ...; thread t owns the 16-byte chunk t of every
// row (a block has ceil(C / x128::size / 32) warps, so C <= 1024 x128::size). The thread keeps its
// chunk of weight and its channels' dweight/dbias sums in registers; at the end,
// partial[blockIdx.x] = (the block's dweight terms (C), its dbias terms (C)).
// Per element: reads 3 floatX (dout, inp, dinp), writes 1 floatX (dinp); weight once per block;
// mean and rstd 8 bytes per row; partial sums 2 floats per channel per block (~2 rows' worth of bytes).
__global__ void __launch_bounds__(1024)
layernorm_backward_kernel(floatX* dinp,          // (N,C) accumulates
                          float* partial,        // (gridDim.x, 2, C)
                          const floatX* dout,    // (N,C)
                          const floatX* inp,     // (N,C)
                          const floatX* weight,  // (C)
                          const float* mean,     // (N)
                          const float* rstd,     // (N)
                          int N, int C) {
    int c = threadIdx.x * x128::size;  // this thread's first channel
    bool active = c < C;               // the last warp may be partly beyond the row
    x128 w;
    if (active) w = load128(weight + c);
    float dw[x128::size], db[x128::size];
    #pragma unroll
    for (int j = 0; j < x128::size; j++) dw[j] = db[j] = 0.0f;
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        size_t off = (size_t)row * C + c;
        float m = mean[row], s = rstd[row];
        x128 d, x, g;
        float sum_dnorm = 0.0f, sum_dnorm_xhat = 0.0f;
        if (active) {
            d = load128cs(dout + off);  // last use of dout
            x = load128cs(inp + off);   // last use of the saved input
            g = load128(dinp + off);    // issued early, used after the reduction
            #pragma unroll
            for (int j = 0; j < x128::size; j++) {
                float xhat = ((float)x[j] - m) * s;
                float dnorm = (float)d[j] * (float)w[j];
                sum_dnorm += dnorm;
                sum_dnorm_xhat += dnorm * xhat;
                dw[j] += (float)d[j] * xhat;
                db[j] += (float)d[j];
            }
        }
        block_reduce_sum2(sum_dnorm, sum_dnorm_xhat);  // the two row reductions (every thread takes part)
        float dnorm_mean = sum_dnorm / C, dnorm_xhat_mean = sum_dnorm_xhat / C;
        if (active) {
            #pragma unroll
            for (int j = 0; j < x128::size; j++) {
                float xhat = ((float)x[j] - m) * s;
                float dnorm = (float)d[j] * (float)w[j];
                g[j] = (floatX)((float)g[j] + (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * s);
            }
            store128(dinp + off, g);
        }
    }
    // this block's column partial sums (the threads own distinct channels: no races)
    if (active) {
        float* pw = partial + (size_t)blockIdx.x * 2 * C + c;
        float* pb = pw + C;
        #pragma unroll
        for (int j = 0; j < x128::size; j += f128::size) {
            f128 vw, vb;
            #pragma unroll
            for (int q = 0; q < f128::size; q++) {
                vw[q] = dw[j + q];
                vb[q] = db[j + q];
            }
            store128(pw + j, vw);
            store128(pb + j, vb);
        }
    }
}

// Kernel 2: column c of the (nblocks, 2C) partial sums (c < C: dweight, else dbias) is summed over the
// blocks in order: thread (y, lane) of a 32-column tile adds the rows y, y+32, ... of column
// 32*blockIdx.x + lane, then the 32 sums of a column are added in order of y.
// Per column: reads nblocks floats (coalesced across the lanes), reads and writes 1 floatX.
__global__ void __launch_bounds__(1024)
layernorm_backward_reduce_kernel(floatX* dweight,        // (C) accumulates
                                 floatX* dbias,          // (C) accumulates
                                 const float* partial,   // (nblocks, 2, C)
                                 int nblocks, int C) {
    __shared__ float sums[32][32];  // (y, lane)
    int lane = threadIdx.x % 32, y = threadIdx.x / 32;
    int col = blockIdx.x * 32 + lane;
    float acc = 0.0f;
    if (col < 2 * C) {
        for (int b = y; b < nblocks; b += 32) acc += partial[(size_t)b * 2 * C + col];
    }
    sums[y][lane] = acc;
    __syncthreads();
    if (y == 0 && col < 2 * C) {
        float total = 0.0f;
        for (int r = 0; r < 32; r++) total += sums[r][lane];
        floatX* g = col < C ? dweight + col : dbias + (col - C);
        *g = (floatX)((float)*g + total);
    }
}

#define LAYERNORM_FWD_BLOCK 256
// Kernel 1's grid: at least LAYERNORM_BWD_MIN_ROWS rows per block (the partial sums cost each block
// about two rows' worth of memory traffic), at most LAYERNORM_BWD_MAX_BLOCKS blocks: the partial sums,
// 2*C floats per block, then fit the scratch buffer of gpt.h (at least 1024*4*C floats).
#define LAYERNORM_BWD_MIN_ROWS 16
#define LAYERNORM_BWD_MAX_BLOCKS 2048

static void layernorm_check_shapes(const char* who, int C, const void* a, const void* b, const void* c,
                                   const void* d, const void* e) {
    if (C <= 0 || C % x128::size != 0) {
        fatal("%s: expected the channel count C to be a positive multiple of %d (16-byte rows for "
              "128-bit loads in %s), found C = %d", who, x128::size, PRECISION_MODE, C);
    }
    if ((((uintptr_t)a) | ((uintptr_t)b) | ((uintptr_t)c) | ((uintptr_t)d) | ((uintptr_t)e)) % 16 != 0) {
        fatal("%s: expected 16-byte aligned tensors (128-bit loads), found %p %p %p %p %p", who, a, b, c, d, e);
    }
}

// the forward kernels' K: chunks of 16 bytes per lane, the smallest listed value covering a row
static int layernorm_forward_chunks_per_lane(const char* who, int C) {
    static const int ks[] = {1, 2, 3, 4, 6, 8, 12, 16, 32};
    int need = ceil_div(C / x128::size, 32);
    for (int k : ks) if (k >= need) return k;
    fatal("%s: C = %d is larger than the kernel's row cache (at most %d channels in %s)", who, C,
          32 * 32 * x128::size, PRECISION_MODE);
}

// Local memory (scripts/kernel_report.py lists it per target, docs/kernels.md): K = 32 holds 32 x 16 bytes of a
// row per lane and spills past 255 registers: a stack frame of 80 to 96 bytes per thread (none for the plain
// kernel on sm_80), written and read once for the thread's one row, from L1, under a tenth of the 16 KiB or more
// the row moves through memory; K = 32 serves rows wider than 16 chunks per lane only (C > 4096 in BF16, > 2048
// in FP32: past GPT-2's 1600). On sm_80 ptxas also keeps one 4-byte value of the fused kernel's K = 3 (BF16
// C 520..768, GPT-2 124M) in the stack: one STL and one LDL per thread per row, 256 bytes of L1 traffic per row
// against 6 KiB of global reads and writes.
#define LAYERNORM_FORWARD_CASES(X) X(1) X(2) X(3) X(4) X(6) X(8) X(12) X(16) X(32)
#endif

// ----------------------------------------------------------------------------
// launchers

static void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp,
                              const floatX* weight, const floatX* bias, int N, int C, cudaStream_t stream) {
    OP_PROFILE(OP_LAYERNORM);
#if LLM_BUILD_CPU
    (void)stream;
    // 16-bit floatX: FP32 views in, the output rounded once (llm/core/half_cpu.h); FP32: the arrays themselves
    size_t NC = (size_t)N * C;
    float *o = f32_out(out, NC), *x = f32_in(inp, NC), *w = f32_in(weight, C), *b = f32_in(bias, C);
    layernorm_forward_cpu(o, mean, rstd, x, w, b, N, C);
    f32_store(out, o, NC);
    f32_free(inp, x); f32_free(weight, w); f32_free(bias, b);
#else
    layernorm_check_shapes("layernorm_forward", C, out, inp, weight, bias, NULL);
    if (N == 0) return;
    int K = layernorm_forward_chunks_per_lane("layernorm_forward", C);
    dim3 grid(ceil_div(N, LAYERNORM_FWD_BLOCK / 32)), block(LAYERNORM_FWD_BLOCK);
    switch (K) {
#define LN_FWD_CASE(k) case k: LAUNCH(layernorm_forward_kernel<k>, grid, block, 0, stream, out, mean, rstd, inp, \
                                      weight, bias, N, C); break;
        LAYERNORM_FORWARD_CASES(LN_FWD_CASE)
#undef LN_FWD_CASE
    }
#endif
}

static void fused_residual_layernorm_forward(floatX* residual, floatX* out, float* mean, float* rstd,
                                             const floatX* inp1, const floatX* inp2,
                                             const floatX* weight, const floatX* bias,
                                             int N, int C, cudaStream_t stream) {
    OP_PROFILE(OP_LAYERNORM);
#if LLM_BUILD_CPU
    (void)stream;
    // as the kernel: the residual rounded to floatX first, then the LayerNorm of the rounded residual
    size_t NC = (size_t)N * C;
    float *a = f32_in(inp1, NC), *b2 = f32_in(inp2, NC), *r = f32_out(residual, NC);
    #pragma omp parallel for simd
    for (size_t i = 0; i < NC; i++) r[i] = a[i] + b2[i];
    f32_store(residual, r, NC);
    f32_free(inp1, a); f32_free(inp2, b2);
    float *o = f32_out(out, NC), *x = f32_in((const floatX*)residual, NC), *w = f32_in(weight, C), *b = f32_in(bias, C);
    layernorm_forward_cpu(o, mean, rstd, x, w, b, N, C);
    f32_store(out, o, NC);
    f32_free((const floatX*)residual, x); f32_free(weight, w); f32_free(bias, b);
#else
    layernorm_check_shapes("fused_residual_layernorm_forward", C, residual, out, inp1, inp2, weight);
    layernorm_check_shapes("fused_residual_layernorm_forward", C, bias, NULL, NULL, NULL, NULL);
    if (N == 0) return;
    int K = layernorm_forward_chunks_per_lane("fused_residual_layernorm_forward", C);
    dim3 grid(ceil_div(N, LAYERNORM_FWD_BLOCK / 32)), block(LAYERNORM_FWD_BLOCK);
    switch (K) {
#define LN_FUSED_CASE(k) case k: LAUNCH(fused_residual_layernorm_forward_kernel<k>, grid, block, 0, stream, residual, \
                                        out, mean, rstd, inp1, inp2, weight, bias, N, C); break;
        LAYERNORM_FORWARD_CASES(LN_FUSED_CASE)
#undef LN_FUSED_CASE
    }
#endif
}

// scratch: device memory the kernels may use for the parameter-gradient reduction (see kernel): FP32
// partial sums, 2*C floats for each of min(ceil(N / 16), 2048) blocks, within gpt.h's max(B*T*C, 4096*C)
static void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* scratch,
                               const floatX* dout, const floatX* inp, const floatX* weight,
                               const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
    OP_PROFILE(OP_LAYERNORM);
#if LLM_BUILD_CPU
    (void)scratch; (void)stream;
    // the accumulated gradients in FP32, each rounded once when stored back
    size_t NC = (size_t)N * C;
    float *di = f32_in(dinp, NC), *dw = f32_in(dweight, C), *db = f32_in(dbias, C);
    float *d = f32_in(dout, NC), *x = f32_in(inp, NC), *w = f32_in(weight, C);
    layernorm_backward_cpu(di, dw, db, d, x, w, mean, rstd, N, C);
    f32_store(dinp, di, NC); f32_store(dweight, dw, C); f32_store(dbias, db, C);
    f32_free(dout, d); f32_free(inp, x); f32_free(weight, w);
#else
    layernorm_check_shapes("layernorm_backward", C, dinp, dout, inp, weight, scratch);
    if (N == 0) return;
    // one 16-byte chunk per thread, a block covers a row
    int nchunks = C / x128::size;
    if (nchunks > 1024) {
        fatal("layernorm_backward: C = %d is larger than the kernel handles (at most %d channels in %s)", C,
              1024 * x128::size, PRECISION_MODE);
    }
    int threads = ceil_div(nchunks, 32) * 32;
    int nblocks = ceil_div(N, LAYERNORM_BWD_MIN_ROWS);
    if (nblocks > LAYERNORM_BWD_MAX_BLOCKS) nblocks = LAYERNORM_BWD_MAX_BLOCKS;
    LAUNCH(layernorm_backward_kernel, dim3(nblocks), dim3(threads), 0, stream, dinp, scratch, dout, inp, weight, mean,
           rstd, N, C);
    LAUNCH(layernorm_backward_reduce_kernel, dim3(ceil_div(2 * C, 32)), dim3(1024), 0, stream, dweight, dbias,
           scratch, nblocks, C);
#endif
}
