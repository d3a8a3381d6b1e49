// dev/cuda/fused_classifier.cu: versions of the fused softmax + cross-entropy + dlogits kernel, side by
// side, each checked against the CPU reference and timed. The last version is the one the trainer
// uses (llm/fused_classifier.cuh).
//
//   nvcc -O3 --use_fast_math -std=c++17 -arch=sm_90 dev/cuda/fused_classifier.cu -o build/fused_classifier
//   ./build/fused_classifier [version 1..3, default all] [BT, default 8192]
//   (add -DENABLE_FP32 for FP32 logits)
//
// version 1: one thread per row, three scalar passes (max, sum, write): the loops of the reference
// version 2: one block per row, three passes with block reductions (max, then sum, then write), scalar
//            loads: three reads of every logit
// version 3: one block per row, online softmax (running max with rescaled sum) in one pass with
//            128-bit loads, then one pass that writes dlogits in place (llm/fused_classifier.cuh)
//
// Timing: median of the runs (cudaEvents around the kernel only), the logits restored and L2 flushed
// (128 MiB written) before every run. Bandwidth counts the minimum traffic: one read and one write
// of every logit (the second read of version 3 should come from L2), against the device's peak.
#include "../../llm/common.h"
#include "../../llm/cuda_utils.cuh"
#include "../../llm/fused_classifier.cuh"
#include "../../llm/rand.h"
#include <vector>
#include <algorithm>

// ----------------------------------------------------------------------------
// version 1: one thread per row. Bytes per logit: 3 reads + 1 write of sizeof(floatX), uncoalesced
// (neighbouring threads are Vp elements apart).

__global__ void fused_classifier_kernel1(floatX* logits, float* losses, float dloss, const int* targets,
                                         int BT, int V, int Vp, int write_dlogits) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= BT) return;
    floatX* x = logits + (size_t)i * Vp;
    float maxv = -INFINITY;
    for (int v = 0; v < V; v++) maxv = fmaxf(maxv, (float)x[v]);
    float sum = 0.0f;
    for (int v = 0; v < V; v++) sum += expf((float)x[v] - maxv);
    float lse = maxv + logf(sum);
    int y = targets[i];
    losses[i] = lse - (float)x[y];
    if (!write_dlogits) return;
    for (int v = 0; v < Vp; v++) {
        float d = v < V ? dloss * (expf((float)x[v] - lse) - (v == y ? 1.0f : 0.0f)) : 0.0f;
        x[v] = (floatX)d;
    }
}

// ----------------------------------------------------------------------------
// version 2: one block per row, a block-wide max, then a block-wide sum, then the write.
// Bytes per logit: 3 reads (2 of them likely L2 hits) + 1 write of sizeof(floatX), coalesced scalar.

__device__ float block_reduce_max_v2(float v) {
    __shared__ float partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_reduce_max(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < nwarps ? partial[lane] : -INFINITY;
    return warp_reduce_max(v);
}

__global__ void fused_classifier_kernel2(floatX* logits, float* losses, float dloss, const int* targets,
                                         int V, int Vp, int write_dlogits) {
    floatX* x = logits + (size_t)blockIdx.x * Vp;
    int y = targets[blockIdx.x];
    float x_target = (float)x[y];  // every thread reads it before the barriers below
    float maxv = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) maxv = fmaxf(maxv, (float)x[v]);
    maxv = block_reduce_max_v2(maxv);
    float sum = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf((float)x[v] - maxv);
    sum = block_reduce_sum(sum);
    float lse = maxv + logf(sum);
    if (threadIdx.x == 0) losses[blockIdx.x] = lse - x_target;
    if (!write_dlogits) return;
    for (int v = threadIdx.x; v < Vp; v += blockDim.x) {
        float d = v < V ? dloss * (expf((float)x[v] - lse) - (v == y ? 1.0f : 0.0f)) : 0.0f;
        x[v] = (floatX)d;
    }
}

// ----------------------------------------------------------------------------
// launch of each version

static void run_version(int version, floatX* logits, float* losses, float dloss, const int* targets,
                        int BT, int V, int Vp, int write_dlogits) {
    switch (version) {
        case 1:
            LAUNCH(fused_classifier_kernel1, dim3(ceil_div(BT, 128)), dim3(128), 0, (cudaStream_t)0, logits,
                   losses, dloss, targets, BT, V, Vp, write_dlogits);
            break;
        case 2:
            LAUNCH(fused_classifier_kernel2, dim3(BT), dim3(1024), 0, (cudaStream_t)0, logits, losses, dloss,
                   targets, V, Vp, write_dlogits);
            break;
        case 3:
            fused_classifier(logits, losses, dloss, targets, BT, V, Vp, write_dlogits, 0);
            break;
        default:
            fprintf(stderr, "error: no version %d (1..3)\n", version);
            exit(EXIT_FAILURE);
    }
}

// ----------------------------------------------------------------------------
// benchmark helpers

static double peak_gbps(void) {
    int dev = 0, clock_khz = 0, bus_bits = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, dev));
    cudaCheck(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev));
    return 2.0 * clock_khz * 1e3 * (bus_bits / 8) / 1e9;  // double data rate
}

// median kernel time in ms; setup() runs before each run (restore inputs), then L2 is flushed
template <class Setup, class Run>
static float median_ms(int reps, Setup setup, Run run) {
    const size_t flush_bytes = (size_t)128 << 20;
    void* flush = NULL;
    cudaCheck(cudaMalloc(&flush, flush_bytes));
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    std::vector<float> ms(reps);
    for (int r = 0; r < reps; r++) {
        setup();
        cudaCheck(cudaMemsetAsync(flush, r & 0xff, flush_bytes, 0));
        cudaCheck(cudaEventRecord(start, 0));
        run();
        cudaCheck(cudaEventRecord(stop, 0));
        cudaCheck(cudaEventSynchronize(stop));
        cudaCheck(cudaEventElapsedTime(&ms[r], start, stop));
    }
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    cudaCheck(cudaFree(flush));
    std::sort(ms.begin(), ms.end());
    return ms[reps / 2];
}

int main(int argc, char** argv) {
    int only = argc > 1 ? atoi(argv[1]) : 0;
    int BT = argc > 2 ? atoi(argv[2]) : 8192;
    const int V = 50257, Vp = 50304;  // GPT-2's vocabulary, padded to a multiple of 128
    const int check_rows = 64;        // rows checked against the CPU reference
    float dloss = 1.0f / BT;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("fused_classifier: %s, BT=%d V=%d Vp=%d, %s, peak %.0f GB/s\n", prop.name, BT, V, Vp, PRECISION_MODE,
           peak_gbps());

    Rng rng;
    rng_init(&rng, 1234);
    size_t n = (size_t)BT * Vp;
    std::vector<float> h_logits(n);
    rng_normal(&rng, h_logits.data(), n, 0.0f, 2.0f);
    std::vector<floatX> hx(n);
    for (size_t i = 0; i < n; i++) hx[i] = (floatX)h_logits[i];
    for (size_t i = 0; i < n; i++) h_logits[i] = (float)hx[i];
    std::vector<int> h_targets(BT);
    for (int i = 0; i < BT; i++) h_targets[i] = (int)(rng_u64(&rng) % V);

    // reference on the first rows
    std::vector<float> want_logits(h_logits.begin(), h_logits.begin() + (size_t)check_rows * Vp);
    std::vector<float> want_losses(check_rows);
    fused_classifier_cpu(want_logits.data(), want_losses.data(), dloss, h_targets.data(), check_rows, V, Vp, 1);

    floatX *d_pristine, *d_logits;
    float* d_losses;
    int* d_targets;
    cudaCheck(cudaMalloc((void**)&d_pristine, n * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&d_logits, n * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&d_losses, BT * sizeof(float)));
    cudaCheck(cudaMalloc((void**)&d_targets, BT * sizeof(int)));
    cudaCheck(cudaMemcpy(d_pristine, hx.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_targets, h_targets.data(), BT * sizeof(int), cudaMemcpyHostToDevice));

    std::vector<floatX> got((size_t)check_rows * Vp);
    std::vector<float> got_losses(check_rows);
    for (int version = 1; version <= 3; version++) {
        if (only && version != only) continue;
        // check
        cudaCheck(cudaMemcpy(d_logits, d_pristine, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemset(d_losses, 0xff, BT * sizeof(float)));
        run_version(version, d_logits, d_losses, dloss, d_targets, BT, V, Vp, 1);
        cudaCheck(cudaDeviceSynchronize());
        cudaCheck(cudaMemcpy(got.data(), d_logits, got.size() * sizeof(floatX), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(got_losses.data(), d_losses, check_rows * sizeof(float), cudaMemcpyDeviceToHost));
        double max_dl = 0.0, max_loss = 0.0;
        int bad = 0;
        for (size_t i = 0; i < got.size(); i++) {
            double err = fabs((double)(float)got[i] - want_logits[i]);
            max_dl = fmax(max_dl, err);
            if (!(err <= 1e-6 + 4e-3 * fabs(want_logits[i]))) bad++;
        }
        for (int i = 0; i < check_rows; i++) {
            double err = fabs((double)got_losses[i] - want_losses[i]);
            max_loss = fmax(max_loss, err);
            if (!(err <= 1e-5 + 1e-5 * fabs(want_losses[i]))) bad++;
        }
        // time: forward + backward (write_dlogits) and forward only
        auto restore = [&]() {
            cudaCheck(cudaMemcpyAsync(d_logits, d_pristine, n * sizeof(floatX), cudaMemcpyDeviceToDevice, 0));
        };
        int reps = version == 1 ? 3 : 20;
        float ms_bwd = median_ms(reps, restore, [&]() {
            run_version(version, d_logits, d_losses, dloss, d_targets, BT, V, Vp, 1);
        });
        float ms_fwd = median_ms(reps, restore, [&]() {
            run_version(version, d_logits, d_losses, dloss, d_targets, BT, V, Vp, 0);
        });
        double bytes_bwd = 2.0 * n * sizeof(floatX), bytes_fwd = 1.0 * n * sizeof(floatX);
        printf("version %d: %s (max|err| dlogits %.2g, loss %.2g)  fwd+bwd %.3f ms %.0f GB/s (%.0f%% of peak)  "
               "fwd only %.3f ms %.0f GB/s\n", version, bad ? "FAIL" : "ok", max_dl, max_loss, ms_bwd,
               bytes_bwd / ms_bwd / 1e6, 100.0 * bytes_bwd / ms_bwd / 1e6 / peak_gbps(), ms_fwd,
               bytes_fwd / ms_fwd / 1e6);
    }
    cudaCheck(cudaFree(d_pristine));
    cudaCheck(cudaFree(d_logits));
    cudaCheck(cudaFree(d_losses));
    cudaCheck(cudaFree(d_targets));
    return 0;
}
