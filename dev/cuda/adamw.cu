// dev/cuda/adamw.cu: versions of the AdamW update kernel side by side, each checked against the CPU
// reference and timed. The last version is the one the trainer uses (llm/ops/adamw.cuh).
//
// GPU:      make dev-cuda (dev/cuda/cuda.mk), then
//           ./build/cuda/adamw [version 1..2, default all] [n, default 124475904 (GPT-2 124M)]
//           (make dev-cuda PRECISION=FP32 for FP32 parameters without master weights)
// emulated: make dev-cuda-emu, then ./build/cuda_emu/adamw   (default n = 5003; the times are CPU times)
//
// version 1: one thread per element, scalar loads and stores (BF16: 2-byte parameter and gradient
//            accesses, half-used 32-byte sectors per warp instruction)
// version 2: one thread per 16 bytes of parameters (8 bf16 / 4 float) with 128-bit loads and stores
//            of every array (llm/ops/adamw.cuh); the stochastic-rounding bits are the same function of
//            (seed, index), so versions 1 and 2 produce the same bits
//
// Timing: median over runs (cudaEvents around the kernel only), L2 flushed (128 MiB written) before
// each run. Bytes per element: BF16 with master: read 2 (grad) + 12 (m, v, master), write 12 + 2
// (m, v, master, params) = 28; FP32: read 16 (param, grad, m, v), write 12 = 28.
#include "common.h"
#include "../../llm/core/cuda_utils.cuh"
#include "../../llm/ops/adamw.cuh"

// ----------------------------------------------------------------------------
// version 1: one element per thread, scalar. Bytes per element as version 2 (28), in 2- and 4-byte
// accesses.

__global__ void adamw_kernel1(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n,
                              float lr, float beta1, float beta2, float bc1, float bc2, float eps,
                              float weight_decay, float grad_scale, unsigned int seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float p = master != NULL ? master[i] : (float)params[i];
    float mi = m[i], vi = v[i];
    p = adamw_step(p, (float)grads[i], &mi, &vi, lr, beta1, beta2, bc1, bc2, eps, weight_decay, grad_scale);
    m[i] = mi;
    v[i] = vi;
    if (master != NULL) master[i] = p;
    params[i] = adamw_round<floatX>(p, adamw_random_bits(seed, i));
}

static void run_version(int version, floatX* params, float* master, floatX* grads, float* m, float* v,
                        size_t n, float lr, float beta1, float beta2, int t, float eps, float wd, float gs,
                        unsigned int seed) {
    if (version == 1) {
        float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
        LAUNCH(adamw_kernel1, dim3((unsigned int)ceil_div_sz(n, 512)), dim3(512), 0, (cudaStream_t)0, params,
               master, grads, m, v, n, lr, beta1, beta2, bc1, bc2, eps, wd, gs, seed);
    } else if (version == 2) {
        adamw_update(params, master, grads, m, v, n, lr, beta1, beta2, t, eps, wd, gs, seed, 0);
    } else {
        die_at(__FILE__, __LINE__, "no such version");
    }
}

static const char* USAGE =
    "[VERSION [N]]\n"
    "Runs the AdamW update kernel's versions on N parameters, checks each against the CPU reference and times it.\n"
    "  VERSION  1 (scalar) or 2 (128-bit, llm/ops/adamw.cuh); 0 runs all (default 0)\n"
    "  N        parameters (default 124475904, GPT-2 124M, on a GPU; 5003 emulated)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    int only = arg_version(argc, argv, 1, 2);
    size_t n = arg_size(argc, argv, 2, GPU_OR_EMU(124475904, 5003));
    const float lr = 6e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.8f;
    const int t = 5;
    const unsigned int seed = 42;
    const int use_master = sizeof(floatX) == 2;
    printf("adamw: %s, n=%zu, %s%s, peak %.0f GB/s\n", device_name(), n, PRECISION_MODE,
           use_master ? " with FP32 master" : "", peak_gbs());

    // inputs in the optimizer's regime: |m| / sqrt(v) <= 1
    Rng rng;
    rng_init(&rng, 1234);
    std::vector<float> master(n), grads(n), m(n), v(n);
    rng_normal(&rng, master.data(), n, 0.0f, 0.02f);
    rng_normal(&rng, grads.data(), n, 0.0f, 1.0f);
    rng_normal(&rng, m.data(), n, 0.0f, 0.1f);
    rng_normal(&rng, v.data(), n, 0.0f, 0.05f);
    std::vector<floatX> hp(n), hg(n);
    for (size_t i = 0; i < n; i++) {
        v[i] = m[i] * m[i] + v[i] * v[i];
        hp[i] = (floatX)master[i];
        hg[i] = (floatX)grads[i];
        grads[i] = (float)hg[i];
        if (!use_master) master[i] = (float)hp[i];
    }
    // the reference
    std::vector<float> p_ref = master, m_ref = m, v_ref = v;
    adamw_update_cpu(p_ref.data(), grads.data(), m_ref.data(), v_ref.data(), n, lr, beta1, beta2, t, eps, wd, gs);

    floatX* d_params = upload_raw(hp);
    floatX* d_grads = upload_raw(hg);
    float* d_m = upload_raw(m);
    float* d_v = upload_raw(v);
    float* d_master = use_master ? upload_raw(master) : NULL;
    for (int version = 1; version <= 2; version++) {
        if (only && version != only) continue;
        // check one update from the initial state
        cudaCheck(cudaMemcpy(d_params, hp.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_m, m.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_v, v.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        if (use_master) cudaCheck(cudaMemcpy(d_master, master.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        run_version(version, d_params, d_master, d_grads, d_m, d_v, n, lr, beta1, beta2, t, eps, wd, gs, seed);
        cudaCheck(cudaDeviceSynchronize());
        std::vector<float> gm = download_raw(d_m, n), gv = download_raw(d_v, n);
        std::vector<float> gp = use_master ? download_raw(d_master, n) : std::vector<float>();
        std::vector<floatX> gparams = download_raw(d_params, n);
        size_t bad = 0;
        double max_err = 0.0;
        for (size_t i = 0; i < n; i++) {
            float p = use_master ? gp[i] : (float)gparams[i];
            double e1 = fabs((double)gm[i] - m_ref[i]), e2 = fabs((double)gv[i] - v_ref[i]);
            double e3 = fabs((double)p - p_ref[i]);
            max_err = fmax(max_err, e3);
            if (!(e1 <= 3e-7 + 1e-6 * fabs(m_ref[i])) || !(e2 <= 3e-7 + 1e-6 * fabs(v_ref[i])) ||
                !(e3 <= 1e-7 + 1e-6 * fabs(p_ref[i])))
                bad++;
            // params: the lower or upper bf16 / fp16 neighbour of the master (equal to it in FP32)
            float q = (float)gparams[i];
#if defined(ENABLE_FP16)
            __half t = __float2half_rz(p);  // toward zero, and the next fp16 away from zero
            float lo = __half2float(t), hi = __half2float(__ushort_as_half((unsigned short)(__half_as_ushort(t) + 1u)));
            if (use_master && !(q == lo || (lo != p && q == hi))) bad++;
#else
            uint32_t u, w;
            memcpy(&u, &p, 4);
            memcpy(&w, &q, 4);
            if (use_master && !(w == (u & 0xffff0000u) || ((u & 0xffffu) && w == (u & 0xffff0000u) + 0x10000u))) bad++;
#endif
        }
        float ms = bench_ms(20, [&]() {
            run_version(version, d_params, d_master, d_grads, d_m, d_v, n, lr, beta1, beta2, t, eps, wd, gs, seed);
        });
        double bytes = 28.0 * n;
        printf("version %d: %s (%zu bad, max|err| params %.2g)  %.3f ms  %.0f GB/s (%.0f%% of peak)\n", version,
               bad ? "FAIL" : "ok", bad, max_err, ms, gbs(bytes, ms), 100.0 * gbs(bytes, ms) / peak_gbs());
    }
    cudaCheck(cudaFree(d_params));
    cudaCheck(cudaFree(d_grads));
    cudaCheck(cudaFree(d_m));
    cudaCheck(cudaFree(d_v));
    if (d_master) cudaCheck(cudaFree(d_master));
    bench_free();
    return 0;
}
