// dev/cuda/gelu.cu: versions of the GELU kernels side by side, each checked against the CPU reference
// (gelu_forward_cpu / gelu_backward_cpu of llm/ops/gelu.cuh) and timed. The chosen version is the one in
// llm/ops/gelu.cuh, without a version number.
//
//   forward  1: one thread per element, scalar loads and stores, tanhf
//            2: one thread per 16 bytes (x128 loads and stores), tanh through expf   (llm/ops/gelu.cuh)
//   backward 1: one thread per element, scalar, in place
//            2: one thread per 16 bytes, in place                                      (llm/ops/gelu.cuh)
//
// GPU:      make dev-cuda (dev/cuda/cuda.mk), then
//           ./build/cuda/gelu [N]          (default N = 64*1024*3072: the fch of GPT-2 124M at B=64, T=1024)
// emulated: make dev-cuda-emu, then
//           ./build/cuda_emu/gelu          (default N = 4103; the times are CPU times)
//
// Timing: the median over REPS runs, each preceded by a write of a 128 MiB buffer (more than the L2),
// so that inputs come from DRAM; GB/s counts the bytes each kernel must move (bytes per element:
// forward 2 sizeof(floatX), backward 3 sizeof(floatX)) against the device's peak.
#include "common.h"
#include "../../llm/ops/gelu.cuh"

// ----------------------------------------------------------------------------
// version 1: one thread per element. Per element: reads 1 floatX, writes 1 floatX (forward);
// reads 2 floatX, writes 1 floatX (backward). tanhf becomes tanh.approx.f32 under --use_fast_math.

__global__ void gelu_forward_kernel1(floatX* out, const floatX* inp, size_t N) {  // (N), (N)
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float x = (float)inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = (floatX)(0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + cube))));
    }
}

__global__ void gelu_backward_inplace_kernel1(floatX* d_in_out, const floatX* inp, size_t N) {  // (N), (N)
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float x = (float)inp[i];
        float cube = 0.044715f * x * x * x;
        float th = tanhf(GELU_SCALING_FACTOR * (x + cube));
        float sech2 = 1.0f - th * th;
        float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
        d_in_out[i] = (floatX)(g * (float)d_in_out[i]);
    }
}

static void gelu_forward1(floatX* out, const floatX* inp, size_t N) {
    LAUNCH(gelu_forward_kernel1, dim3((unsigned)ceil_div_sz(N, 256)), dim3(256), 0, (cudaStream_t)0, out, inp, N);
}
static void gelu_backward1(floatX* d, const floatX* inp, size_t N) {
    LAUNCH(gelu_backward_inplace_kernel1, dim3((unsigned)ceil_div_sz(N, 256)), dim3(256), 0, (cudaStream_t)0, d, inp, N);
}
// version 2: the launchers of llm/ops/gelu.cuh
static void gelu_forward2(floatX* out, const floatX* inp, size_t N) { gelu_forward(out, inp, N, 0); }
static void gelu_backward2(floatX* d, const floatX* inp, size_t N) { gelu_backward_inplace(d, inp, N, 0); }

static const char* USAGE =
    "[N]\n"
    "Runs the GELU forward and backward versions, checks each against the CPU reference (llm/ops/gelu.cuh)\n"
    "and times it.\n"
    "  N  elements (default 201326592 = 64*1024*3072 on a GPU; 4103 emulated)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
#if LLM_BUILD_EMU
    size_t N = 4103;
    int reps = 3;
#else
    size_t N = (size_t)64 * 1024 * 3072;
    int reps = 25;
#endif
    N = arg_size(argc, argv, 1, N);
    printf("gelu: N = %zu, %s\n", N, PRECISION_MODE);
    Rng rng;
    rng_init(&rng, 1337);
    std::vector<float> x = randn_floatX(&rng, N, 0.0f, 1.5f), d = randn_floatX(&rng, N, 0.0f, 1.0f);
    std::vector<float> want_fwd(N), want_bwd(N);
    gelu_forward_cpu(want_fwd.data(), x.data(), N);
    gelu_backward_cpu(want_bwd.data(), x.data(), d.data(), N);
    floatX* d_x = upload(x);
    floatX* d_d = upload(d);
    floatX* d_out = (floatX*)device_malloc(N * sizeof(floatX), MEM_WORKSPACE);
    // tolerances: BF16, one rounding of the result (2^-8 relative); FP32, tanh.approx of version 1
    // under --use_fast_math is good to 2^-11 relative, so both get a BF16-sized tolerance here (the
    // tight FP32 bounds of version 2 are tested in test/kernels/gelu.h)
    float atol = 1e-3f, rtol = 8e-3f;
    double fwd_bytes = 2.0 * N * sizeof(floatX), bwd_bytes = 3.0 * N * sizeof(floatX);

    void (*fwd[])(floatX*, const floatX*, size_t) = {gelu_forward1, gelu_forward2};
    void (*bwd[])(floatX*, const floatX*, size_t) = {gelu_backward1, gelu_backward2};
    for (int v = 0; v < 2; v++) {
        char what[64];
        cudaCheck(cudaMemset(d_out, 0xFF, N * sizeof(floatX)));
        fwd[v](d_out, d_x, N);
        snprintf(what, sizeof(what), "forward %d", v + 1);
        close_enough(what, download(d_out, N), want_fwd, atol, rtol);
        report_gbs(what, bench_ms(reps, [&] { fwd[v](d_out, d_x, N); }), fwd_bytes);
    }
    for (int v = 0; v < 2; v++) {
        char what[64];
        copy_device_to_device(d_out, d_d, N * sizeof(floatX), 0);
        bwd[v](d_out, d_x, N);
        snprintf(what, sizeof(what), "backward %d", v + 1);
        close_enough(what, download(d_out, N), want_bwd, atol, rtol);
        // in place: each timed run starts from the previous run's output (values stay finite)
        report_gbs(what, bench_ms(reps, [&] { bwd[v](d_out, d_x, N); }), bwd_bytes);
    }
    device_free(d_x);
    device_free(d_d);
    device_free(d_out);
    bench_free();
    return 0;
}
