// dev/cuda/global_norm.cu: versions of the squared-global-norm reduction (out += sum of squares)
// side by side, each checked against the CPU reference and timed. The last version is the one the
// trainer uses (llm/ops/global_norm.cuh).
//
// GPU:      make dev-cuda (dev/cuda/cuda.mk), then
//           ./build/cuda/global_norm [version 1..3, default all] [n, default 124475904 (GPT-2 124M)]
//           (make dev-cuda PRECISION=FP32 for FP32 values)
// emulated: make dev-cuda-emu, then ./build/cuda_emu/global_norm   (default n = 100003; CPU times)
//
// version 1: one element per thread, block sum, one float atomicAdd per block into out (one pass;
//            the order of the atomics varies, so the result is not bitwise reproducible)
// version 2: a capped grid (one wave of the device), grid-stride over 128-bit chunks, block sum,
//            atomicAdd per block: far fewer atomics, still not reproducible
// version 3: as version 2, but each block writes its partial to a scratch buffer and a second
//            one-block kernel adds them in a fixed order: reproducible bit for bit (llm/ops/global_norm.cuh)
//
// Timing: median over runs (cudaEvents around the launches only), L2 flushed (128 MiB written)
// before each run. Bytes per element: sizeof(floatX) read.
#include "common.h"
#include "../../llm/core/cuda_utils.cuh"
#include "../../llm/ops/global_norm.cuh"

// ----------------------------------------------------------------------------
// version 1: one element per thread. Bytes per element: sizeof(floatX) read (scalar loads).

__global__ void global_norm_kernel1(float* out, const floatX* values, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    float x = i < n ? (float)values[i] : 0.0f;
    float sum = block_reduce_sum(x * x);
    if (threadIdx.x == 0) atomicAdd(out, sum);
}

// ----------------------------------------------------------------------------
// version 2: grid-stride over 16-byte chunks (values 16-byte aligned here), scalar tail.
// Bytes per element: sizeof(floatX) read (128-bit loads).

__global__ void global_norm_kernel2(float* out, const floatX* values, size_t n) {
    const int S = x128::size;
    size_t nvec = n / S;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (size_t c = tid; c < nvec; c += stride) {
        x128 packed = load128cs(values + c * S);
        for (int k = 0; k < S; k++) {
            float x = (float)packed[k];
            acc += x * x;
        }
    }
    if (tid < n - nvec * S) {
        float x = (float)values[nvec * S + tid];
        acc += x * x;
    }
    float sum = block_reduce_sum(acc);
    if (threadIdx.x == 0) atomicAdd(out, sum);
}

// runs one version; returns how many FP32 partial sums it adds up in one chain (its blocks' atomics or
// partials: its grid)
static size_t run_version(int version, float* out, const floatX* values, size_t n) {
    if (version == 1) {
        size_t grid = ceil_div_sz(n, 512);
        LAUNCH(global_norm_kernel1, dim3((unsigned int)grid), dim3(512), 0, (cudaStream_t)0, out, values, n);
        return grid;
    } else if (version == 2) {
        int dev = 0, sms = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        size_t want = ceil_div_sz(ceil_div_sz(n, x128::size), 512);
        int grid = want < (size_t)(4 * sms) ? (int)want : 4 * sms;
        LAUNCH(global_norm_kernel2, dim3(grid), dim3(512), 0, (cudaStream_t)0, out, values, n);
        return (size_t)grid;
    } else if (version == 3) {
        global_norm_squared(out, values, n, 0);
        return (size_t)global_norm_grid(n);
    }
    die_at(__FILE__, __LINE__, "no such version");
}

static const char* USAGE =
    "[VERSION [N]]\n"
    "Runs the squared global norm reduction's versions, checks each against the CPU reference and times it.\n"
    "  VERSION  1, 2 or 3 (llm/ops/global_norm.cuh); 0 runs all (default 0)\n"
    "  N        elements (default 124475904, GPT-2 124M, on a GPU; 100003 emulated)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    int only = arg_version(argc, argv, 1, 3);
    size_t n = arg_size(argc, argv, 2, GPU_OR_EMU(124475904, 100003));
    printf("global_norm: %s, n=%zu, %s, peak %.0f GB/s\n", device_name(), n, PRECISION_MODE, peak_gbs());

    Rng rng;
    rng_init(&rng, 1234);
    std::vector<float> h = randn_floatX(&rng, n, 0.0f, 1e-3f);  // gradient-sized values
    float want = global_norm_squared_cpu(h.data(), n);

    floatX* d_values = upload(h);
    float* d_out = (float*)device_malloc(sizeof(float), MEM_WORKSPACE);
    context_init();
    for (int version = 1; version <= 3; version++) {
        if (only && version != only) continue;
        // check, five times from zero: the error, and whether the bits repeat
        float got[5];
        size_t m = 0;  // the chain's length (below)
        for (int r = 0; r < 5; r++) {
            cudaCheck(cudaMemset(d_out, 0, sizeof(float)));
            m = run_version(version, d_out, d_values, n);
            cudaCheck(cudaMemcpy(&got[r], d_out, sizeof(float), cudaMemcpyDeviceToHost));
        }
        int same = 1;
        for (int r = 1; r < 5; r++) same &= memcmp(&got[0], &got[r], sizeof(float)) == 0;
        // the tolerance: the chain of m FP32 additions of positive partial sums (each rounded by up to
        // 2^-24 of a partial that grows to the total) errs by about 2^-24 sqrt(m) / 3 of the total, one
        // standard deviation of independent roundings; allowed: 6 of them, plus 1e-6 for the
        // reference's own FP32 chunk sums. Version 1 at GPT-2 124M's n: m = 243117 atomics, 5.9e-5 (a
        // lost block, 4e-6, hides in that chain's noise); versions 2 and 3: m <= a wave's blocks, ~4e-6
        // (a lost block is 2e-3)
        double rel = fabs((double)got[0] - want) / want, tol = 0x1p-23 * sqrt((double)m) + 1e-6;
        float ms = bench_ms(50, [&]() {
            cudaCheck(cudaMemsetAsync(d_out, 0, sizeof(float), 0));
            run_version(version, d_out, d_values, n);
        });
        double bytes = (double)n * sizeof(floatX);
        printf("version %d: %s (rel err %.2g, tolerance %.2g for a chain of %zu sums, %s over 5 runs)  %.3f ms  %.0f GB/s (%.0f%% of peak)\n",
               version, rel <= tol ? "ok" : "FAIL", rel, tol, m, same ? "same bits" : "bits differ", ms, gbs(bytes, ms),
               100.0 * gbs(bytes, ms) / peak_gbs());
    }
    // (the context is released with the process)
    cudaCheck(cudaFree(d_values));
    cudaCheck(cudaFree(d_out));
    bench_free();
    return 0;
}
