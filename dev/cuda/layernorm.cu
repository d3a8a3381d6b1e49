// dev/cuda/layernorm.cu: versions of the LayerNorm kernels side by side, each checked against the CPU
// reference (llm/ops/layernorm.cuh) and timed. The chosen versions are the ones in llm/ops/layernorm.cuh,
// without a version number.
//
//   forward        1: one thread per row, three loops over the row in global memory (uncoalesced)
//                  2: one warp per row, scalar coalesced loads, three passes over the row (mean,
//                     variance, output): DRAM once, then the L1/L2 cache
//                  3: one warp per row, the row in registers as x128 (llm/ops/layernorm.cuh)
//   fused residual 1: a residual-add kernel, then forward 3 (the residual goes to memory and back)
//                  2: one pass, the residual kept in registers (llm/ops/layernorm.cuh)
//   backward       1: one thread per row for dinp, then one thread per channel for dweight/dbias
//                     (reads dout and inp a second time; deterministic)
//                  2: a block per row, row reductions in the block, per-block partial sums of
//                     dweight/dbias in registers, then a reduction kernel (llm/ops/layernorm.cuh)
//
// GPU:      make dev-cuda (dev/cuda/cuda.mk), then
//           ./build/cuda/layernorm [N] [C]      (default N = 64*1024 rows, C = 768: GPT-2 124M, B=64, T=1024)
// emulated: make dev-cuda-emu, then
//           ./build/cuda_emu/layernorm           (default N = 37, C = 264; the times are CPU times)
//
// Timing: the median over REPS runs, each preceded by a write of a 128 MiB buffer (more than the L2),
// so that inputs come from DRAM. GB/s counts the bytes a kernel must move: forward 2 floatX per element
// (+ 8 bytes per row), fused 4 floatX, backward 4 floatX (dout, inp, dinp read; dinp written).
#include "common.h"
#include "../../llm/ops/layernorm.cuh"

// ----------------------------------------------------------------------------
// forward, version 1: one thread per row. Per element: reads 1 floatX three times (uncoalesced
// across the threads of a warp: rows are C apart), writes 1 floatX.
__global__ void layernorm_forward_kernel1(floatX* out, float* mean, float* rstd,      // (N,C), (N), (N)
                                          const floatX* inp, const floatX* weight,    // (N,C), (C)
                                          const floatX* bias, int N, int C) {         // (C)
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    float m = 0.0f;
    for (int c = 0; c < C; c++) m += (float)x[c];
    m /= C;
    float v = 0.0f;
    for (int c = 0; c < C; c++) {
        float d = (float)x[c] - m;
        v += d * d;
    }
    float s = 1.0f / sqrtf(v / C + LAYERNORM_EPS);
    for (int c = 0; c < C; c++) {
        out[(size_t)row * C + c] = (floatX)(((float)x[c] - m) * s * (float)weight[c] + (float)bias[c]);
    }
    mean[row] = m;
    rstd[row] = s;
}

// forward, version 2: one warp per row, lane l takes the elements l, l+32, ...: three passes over
// the row, each coalesced. Per element: reads 1 floatX from DRAM (twice more from cache), writes 1.
__global__ void layernorm_forward_kernel2(floatX* out, float* mean, float* rstd,      // (N,C), (N), (N)
                                          const floatX* inp, const floatX* weight,    // (N,C), (C)
                                          const floatX* bias, int N, int C) {         // (C)
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += (float)x[c];
    float m = warp_reduce_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = (float)x[c] - m;
        var += d * d;
    }
    float s = 1.0f / sqrtf(warp_reduce_sum(var) / C + LAYERNORM_EPS);
    for (int c = lane; c < C; c += 32) {
        out[(size_t)row * C + c] = (floatX)(((float)x[c] - m) * s * (float)weight[c] + (float)bias[c]);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// fused version 1's first kernel: residual = inp1 + inp2, x128. Per element: reads 2, writes 1 floatX.
__global__ void residual_add_kernel(floatX* out, const floatX* a, const floatX* b, size_t n) {  // (n) each
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= n) return;
    x128 va = load128cs(a + i), vb = load128cs(b + i), r;
    for (int k = 0; k < x128::size; k++) r[k] = (floatX)((float)va[k] + (float)vb[k]);
    store128(out + i, r);
}

// backward, version 1, kernel A: one thread per row, dinp += ... Per element: reads dout and inp
// twice, dinp once (uncoalesced), writes dinp.
__global__ void layernorm_backward_dinp_kernel1(floatX* dinp, const floatX* dout, const floatX* inp,  // (N,C) x3
                                                const floatX* weight, const float* mean,            // (C), (N)
                                                const float* rstd, int N, int C) {                  // (N)
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const floatX* d = dout + (size_t)row * C;
    const floatX* x = inp + (size_t)row * C;
    float m = mean[row], s = rstd[row];
    float a = 0.0f, b = 0.0f;
    for (int c = 0; c < C; c++) {
        float xhat = ((float)x[c] - m) * s, dnorm = (float)d[c] * (float)weight[c];
        a += dnorm;
        b += dnorm * xhat;
    }
    a /= C;
    b /= C;
    for (int c = 0; c < C; c++) {
        float xhat = ((float)x[c] - m) * s, dnorm = (float)d[c] * (float)weight[c];
        floatX* g = dinp + (size_t)row * C + c;
        *g = (floatX)((float)*g + (dnorm - a - xhat * b) * s);
    }
}

// backward, version 1, kernel B: one thread per channel walks the rows in order (deterministic,
// coalesced across the threads). Per element: reads dout and inp again.
__global__ void layernorm_backward_params_kernel1(floatX* dweight, floatX* dbias,           // (C), (C)
                                                  const floatX* dout, const floatX* inp,    // (N,C), (N,C)
                                                  const float* mean, const float* rstd,     // (N), (N)
                                                  int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float dw = 0.0f, db = 0.0f;
    for (int i = 0; i < N; i++) {
        float d = (float)dout[(size_t)i * C + c];
        dw += d * ((float)inp[(size_t)i * C + c] - mean[i]) * rstd[i];
        db += d;
    }
    dweight[c] = (floatX)((float)dweight[c] + dw);
    dbias[c] = (floatX)((float)dbias[c] + db);
}

// ----------------------------------------------------------------------------
// the versions behind one signature each

typedef struct {
    int N, C;
    floatX *inp, *inp2, *weight, *bias, *out, *residual, *dout, *dinp, *dweight, *dbias;
    float *mean, *rstd, *scratch;
} Bufs;

static void forward1(Bufs& b) {
    LAUNCH(layernorm_forward_kernel1, dim3(ceil_div(b.N, 128)), dim3(128), 0, (cudaStream_t)0, b.out, b.mean, b.rstd,
           b.inp, b.weight, b.bias, b.N, b.C);
}
static void forward2(Bufs& b) {
    LAUNCH(layernorm_forward_kernel2, dim3(ceil_div(b.N, 8)), dim3(256), 0, (cudaStream_t)0, b.out, b.mean, b.rstd,
           b.inp, b.weight, b.bias, b.N, b.C);
}
static void forward3(Bufs& b) { layernorm_forward(b.out, b.mean, b.rstd, b.inp, b.weight, b.bias, b.N, b.C, 0); }

static void fused1(Bufs& b) {
    size_t n = (size_t)b.N * b.C;
    LAUNCH(residual_add_kernel, dim3((unsigned)ceil_div_sz(n / x128::size, 256)), dim3(256), 0, (cudaStream_t)0,
           b.residual, b.inp, b.inp2, n);
    layernorm_forward(b.out, b.mean, b.rstd, b.residual, b.weight, b.bias, b.N, b.C, 0);
}
static void fused2(Bufs& b) {
    fused_residual_layernorm_forward(b.residual, b.out, b.mean, b.rstd, b.inp, b.inp2, b.weight, b.bias, b.N, b.C, 0);
}

static void backward1(Bufs& b) {
    LAUNCH(layernorm_backward_dinp_kernel1, dim3(ceil_div(b.N, 128)), dim3(128), 0, (cudaStream_t)0, b.dinp, b.dout,
           b.inp, b.weight, b.mean, b.rstd, b.N, b.C);
    LAUNCH(layernorm_backward_params_kernel1, dim3(ceil_div(b.C, 128)), dim3(128), 0, (cudaStream_t)0, b.dweight,
           b.dbias, b.dout, b.inp, b.mean, b.rstd, b.N, b.C);
}
static void backward2(Bufs& b) {
    layernorm_backward(b.dinp, b.dweight, b.dbias, b.scratch, b.dout, b.inp, b.weight, b.mean, b.rstd, b.N, b.C, 0);
}

static const char* USAGE =
    "[N [C]]\n"
    "Runs the LayerNorm forward, fused residual and backward versions, checks each against the CPU reference\n"
    "(llm/ops/layernorm.cuh) and times it.\n"
    "  N  rows (default 65536 on a GPU; 37 emulated)\n"
    "  C  channels (default 768 on a GPU; 264 emulated)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
#if LLM_BUILD_EMU
    int N = 37, C = 264, reps = 3;
#else
    int N = 64 * 1024, C = 768, reps = 25;
#endif
    N = arg_int(argc, argv, 1, N);
    C = arg_int(argc, argv, 2, C);
    printf("layernorm: N = %d, C = %d, %s\n", N, C, PRECISION_MODE);
    size_t NC = (size_t)N * C;
    Rng rng;
    rng_init(&rng, 1337);
    auto randn = [&](size_t n, float mean, float std) { return randn_floatX(&rng, n, mean, std); };
    std::vector<float> x = randn(NC, 0.5f, 1.0f), x2 = randn(NC, 0.0f, 1.0f), w = randn(C, 1.0f, 0.1f),
                       bias = randn(C, 0.0f, 0.1f), dout = randn(NC, 0.0f, 1.0f), dinp0 = randn(NC, 0.0f, 1.0f),
                       dw0 = randn(C, 0.0f, 1.0f), db0 = randn(C, 0.0f, 1.0f);
    Bufs b;
    b.N = N;
    b.C = C;
    b.inp = upload(x);
    b.inp2 = upload(x2);
    b.weight = upload(w);
    b.bias = upload(bias);
    b.dout = upload(dout);
    b.dinp = upload(dinp0);
    b.dweight = upload(dw0);
    b.dbias = upload(db0);
    b.out = (floatX*)device_malloc(NC * sizeof(floatX), MEM_WORKSPACE);
    b.residual = (floatX*)device_malloc(NC * sizeof(floatX), MEM_WORKSPACE);
    b.mean = (float*)device_malloc(N * sizeof(float), MEM_WORKSPACE);
    b.rstd = (float*)device_malloc(N * sizeof(float), MEM_WORKSPACE);
    b.scratch = (float*)device_malloc(std::max(NC, (size_t)4096 * C) * sizeof(float), MEM_WORKSPACE);

    // references
    std::vector<float> out(NC), mean(N), rstd(N), res(NC), res_r(NC), fout(NC), fmean(N), frstd(N);
    layernorm_forward_cpu(out.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), N, C);
    fused_residual_layernorm_forward_cpu(res.data(), fout.data(), fmean.data(), frstd.data(), x.data(), x2.data(),
                                         w.data(), bias.data(), N, C);
    for (size_t i = 0; i < NC; i++) res_r[i] = (float)(floatX)res[i];
    layernorm_forward_cpu(fout.data(), fmean.data(), frstd.data(), res_r.data(), w.data(), bias.data(), N, C);
    std::vector<float> dinp = dinp0, dw = dw0, db = db0;
    layernorm_backward_cpu(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                           rstd.data(), N, C);
    // loose tolerances (the tight ones are in test/kernels/layernorm.h): BF16 rounding plus slack
    float atol = 2e-2f, rtol = 1e-2f, atol_params = 1e-3f * sqrtf((float)N);
    char what[64];

    void (*fwd[])(Bufs&) = {forward1, forward2, forward3};
    for (int v = 0; v < 3; v++) {
        cudaCheck(cudaMemset(b.out, 0xFF, NC * sizeof(floatX)));
        cudaCheck(cudaMemset(b.mean, 0xFF, N * sizeof(float)));
        cudaCheck(cudaMemset(b.rstd, 0xFF, N * sizeof(float)));
        fwd[v](b);
        snprintf(what, sizeof(what), "forward %d", v + 1);
        close_enough(what, download(b.out, NC), out, atol, rtol);
        close_enough("     mean", download_raw(b.mean, N), mean, 1e-5f, 1e-5f);
        close_enough("     rstd", download_raw(b.rstd, N), rstd, 1e-5f, 1e-4f);
        report_gbs(what, bench_ms(reps, [&] { fwd[v](b); }), 2.0 * NC * sizeof(floatX) + 8.0 * N);
    }
    void (*fused[])(Bufs&) = {fused1, fused2};
    for (int v = 0; v < 2; v++) {
        cudaCheck(cudaMemset(b.out, 0xFF, NC * sizeof(floatX)));
        cudaCheck(cudaMemset(b.residual, 0xFF, NC * sizeof(floatX)));
        fused[v](b);
        snprintf(what, sizeof(what), "fused residual %d", v + 1);
        close_enough(what, download(b.out, NC), fout, atol, rtol);
        close_enough("     residual", download(b.residual, NC), res, 0.0f, 4e-3f);
        report_gbs(what, bench_ms(reps, [&] { fused[v](b); }), 4.0 * NC * sizeof(floatX) + 8.0 * N);
    }
    // the backward reads the reference statistics
    copy_to_device(b.mean, mean.data(), N * sizeof(float));
    copy_to_device(b.rstd, rstd.data(), N * sizeof(float));
    void (*bwd[])(Bufs&) = {backward1, backward2};
    for (int v = 0; v < 2; v++) {
        upload_to(b.dinp, dinp0);
        upload_to(b.dweight, dw0);
        upload_to(b.dbias, db0);
        bwd[v](b);
        snprintf(what, sizeof(what), "backward %d", v + 1);
        close_enough(what, download(b.dinp, NC), dinp, atol, rtol);
        close_enough("     dweight", download(b.dweight, C), dw, atol_params, rtol);
        close_enough("     dbias", download(b.dbias, C), db, atol_params, rtol);
        // the timed runs keep accumulating into the gradients (finite, and the work is the same)
        report_gbs(what, bench_ms(reps, [&] { bwd[v](b); }), 4.0 * NC * sizeof(floatX) + 8.0 * N);
    }
    floatX* bufs[] = {b.inp, b.inp2, b.weight, b.bias, b.dout, b.dinp, b.dweight, b.dbias, b.out, b.residual};
    for (floatX* p : bufs) device_free(p);
    device_free(b.mean);
    device_free(b.rstd);
    device_free(b.scratch);
    bench_free();
    return 0;
}
