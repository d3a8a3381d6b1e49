// dev/cuda/fused_classifier.cu: versions of the fused softmax + cross-entropy + dlogits kernel, side by
// side, each checked against the CPU reference and timed. The last version is the one the trainer
// uses (llm/ops/fused_classifier.cuh).
//
// GPU:      make dev-cuda (dev/cuda/cuda.mk), then
//           ./build/cuda/fused_classifier [version 1..3, default all] [BT, default 8192]
//           (make dev-cuda PRECISION=FP32 for FP32 logits)
// emulated: make dev-cuda-emu, then ./build/cuda_emu/fused_classifier   (default BT = 4; CPU times)
//
// version 1: one thread per row, three scalar passes (max, sum, write): the loops of the reference
// version 2: one block per row, three passes with block reductions (max, then sum, then write), scalar
//            loads: three reads of every logit
// version 3: one block per row, online softmax (running max with rescaled sum) in one pass with
//            128-bit loads, then one pass that writes dlogits in place (llm/ops/fused_classifier.cuh)
//
// Timing: median of the runs (cudaEvents around the kernel only), the logits restored and L2 flushed
// (128 MiB written) before every run. Bandwidth counts the minimum traffic: one read and one write
// of every logit (the second read of version 3 should come from L2), against the device's peak.
#include "common.h"
#include "../../llm/core/cuda_utils.cuh"
#include "../../llm/ops/fused_classifier.cuh"

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
            die_at(__FILE__, __LINE__, "no such version");
    }
}

static const char* USAGE =
    "[VERSION [BT]]\n"
    "Runs the fused softmax + cross-entropy + dlogits kernel's versions, checks each against the CPU\n"
    "reference and times it.\n"
    "  VERSION  1, 2 or 3 (llm/ops/fused_classifier.cuh); 0 runs all (default 0)\n"
    "  BT       rows (default 8192 on a GPU; 4 emulated)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    int only = arg_version(argc, argv, 1, 3);
    int BT = arg_int(argc, argv, 2, GPU_OR_EMU(8192, 4));
    const int V = 50257, Vp = 50304;  // GPT-2's vocabulary, padded to a multiple of 128
    const int check_rows = std::min(BT, 64);  // rows checked against the CPU reference
    float dloss = 1.0f / BT;
    printf("fused_classifier: %s, BT=%d V=%d Vp=%d, %s, peak %.0f GB/s\n", device_name(), BT, V, Vp, PRECISION_MODE,
           peak_gbs());

    Rng rng;
    rng_init(&rng, 1234);
    size_t n = (size_t)BT * Vp;
    std::vector<float> h_logits = randn_floatX(&rng, n, 0.0f, 2.0f);
    std::vector<int> h_targets(BT);
    for (int i = 0; i < BT; i++) h_targets[i] = (int)(rng_u64(&rng) % V);

    // reference on the first rows
    std::vector<float> want_logits(h_logits.begin(), h_logits.begin() + (size_t)check_rows * Vp);
    std::vector<float> want_losses(check_rows);
    fused_classifier_cpu(want_logits.data(), want_losses.data(), dloss, h_targets.data(), check_rows, V, Vp, 1);

    floatX* d_pristine = upload(h_logits);
    floatX* d_logits = (floatX*)device_malloc(n * sizeof(floatX), MEM_WORKSPACE);
    float* d_losses = (float*)device_malloc(BT * sizeof(float), MEM_WORKSPACE);
    int* d_targets = upload_raw(h_targets);

    for (int version = 1; version <= 3; version++) {
        if (only && version != only) continue;
        // check
        cudaCheck(cudaMemcpy(d_logits, d_pristine, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemset(d_losses, 0xff, BT * sizeof(float)));
        run_version(version, d_logits, d_losses, dloss, d_targets, BT, V, Vp, 1);
        cudaCheck(cudaDeviceSynchronize());
        std::vector<float> got = download(d_logits, (size_t)check_rows * Vp);
        std::vector<float> got_losses = download_raw(d_losses, check_rows);
        Diff err_dl = compare(got.data(), want_logits.data(), got.size(), 1e-6f, 4e-3f);
        Diff err_loss = compare(got_losses.data(), want_losses.data(), check_rows, 1e-5f, 1e-5f);
        size_t bad = err_dl.bad + err_loss.bad;
        // time: forward + backward (write_dlogits) and forward only, the logits restored before each run
        auto restore = [&]() {
            cudaCheck(cudaMemcpyAsync(d_logits, d_pristine, n * sizeof(floatX), cudaMemcpyDeviceToDevice, 0));
        };
        int reps = version == 1 ? 3 : 20;
        float ms_bwd = bench_ms(reps, restore, [&]() {
            run_version(version, d_logits, d_losses, dloss, d_targets, BT, V, Vp, 1);
        });
        float ms_fwd = bench_ms(reps, restore, [&]() {
            run_version(version, d_logits, d_losses, dloss, d_targets, BT, V, Vp, 0);
        });
        double bytes_bwd = 2.0 * n * sizeof(floatX), bytes_fwd = 1.0 * n * sizeof(floatX);
        printf("version %d: %s (max|err| dlogits %.2g, loss %.2g)  fwd+bwd %.3f ms %.0f GB/s (%.0f%% of peak)  "
               "fwd only %.3f ms %.0f GB/s\n", version, bad ? "FAIL" : "ok", err_dl.max_err, err_loss.max_err, ms_bwd,
               gbs(bytes_bwd, ms_bwd), 100.0 * gbs(bytes_bwd, ms_bwd) / peak_gbs(), ms_fwd, gbs(bytes_fwd, ms_fwd));
    }
    cudaCheck(cudaFree(d_pristine));
    cudaCheck(cudaFree(d_logits));
    cudaCheck(cudaFree(d_losses));
    cudaCheck(cudaFree(d_targets));
    bench_free();
    return 0;
}
