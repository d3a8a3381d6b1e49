// mfu.h: model FLOPs utilisation (MFU, the PaLM paper's appendix B): the FLOPs the model needs per
// token times the tokens trained per second, over the peak FLOP/s of the devices the run uses. The one
// definition of the FLOPs per token (train_gpt.cu's step line and log.jsonl, dev/bench_train.cu, and
// dev/bench_pytorch.py's copy, which test/test_bench_pytorch.sh compares with the paper's formula), and
// the measured peak the trainer divides by when --peak-tflops is not given.
//
// FLOPs per token of a training step (forward + backward = 3 x the forward's, 2 FLOPs per multiply-add):
//   6 N            N = the parameters the matmuls multiply by: the blocks' L (12 C^2 + 13 C) (PaLM counts
//                  every non-embedding parameter, biases and LayerNorms included) plus the LM head's
//                  Vp C (wte, tied, is the head's weight; the padded vocabulary is what the head computes).
//                  The lookups of wte and wpe and the final LayerNorm are not counted.
//   + 6 L T C      attention's two products per layer, QK^T and AV: each 2 T C FLOPs per token over all
//                  T keys, forward 4 T C, with backward 12 T C: PaLM's 12 L T C (its 12 L H Q T). The
//                  causal mask makes half of those products unneeded, and this project counts only the
//                  half a causal model must compute: 6 L T C (as llm.c and dev/bench_train.cu always
//                  did). With the full 12 L T C, GPT-2 124M at T = 1024 would count ~6% more FLOPs.
// Recomputed FLOPs (--recompute) are not model FLOPs: recompute lowers the MFU by its cost.
//
// The peak (TFLOP/s of one process's device), measured once at start-up in a few tens of milliseconds:
//   CPU build:      OpenBLAS sgemm of 512^3 (the size where this project's 2-core VM reaches its sgemm peak),
//                   the best of 5, on the OpenMP threads the run uses (what the CPU build's matmuls run on),
//                   on the kernels llm/ops/blas_cpu.h chose (named on the header line);
//   CUDA build:     a dense floatX GEMM of 4096^3 through cuBLASLt (llm/ops/matmul_cublaslt.cuh, as
//                   dev/cuda/matmul.cu measures the peak scripts/gpu_check.sh uses), the best of 5 runs
//                   of 4 back to back;
//   emulated build: nothing is measured and the MFU is not shown (the step line has no "MFU", the log no
//                   "mfu") unless --peak-tflops gives a peak: a GEMM on the emulator is no device's rate, and
//                   the emulated cuBLASLt's call left the emulated steps of this 2-core VM 10-25x slower.
// Every rank measures at the same moment, so ranks sharing cores see their share. A run over P processes
// has P devices: MFU = flops_per_token * tokens_per_s / (P * peak).
// An MFU above 100% is impossible, so a step that shows one proves the peak was measured low (another program
// had the cores then, or a cold start): mfu_of_step measures it again, and if the step still beats it, takes
// the step's own rate as the peak, a lower bound; either way the run says so on the console and in log.jsonl
// ({"step": 12, "peak_tflops": 0.2688, "peak_source": "measured again"}), and no step line ever shows more
// than 100%. A peak given by --peak-tflops is the user's and is kept (its MFU may exceed 100%: the flag is wrong).
#pragma once
#include "../core/common.h"
#include "../core/context.h"
#include "../core/device.h"
#include "../model/tensors.h"  // GPTConfig
#include "../ops/matmul.cuh"   // cblas_sgemm (CPU), matmul_cublaslt_call (CUDA and emulated)
#include "../ops/blas_cpu.h"   // which OpenBLAS kernels the sgemm ran on
#include "logger.h"

// the model FLOPs of one trained token at sequence length T (the convention above)
static double model_flops_per_token(const GPTConfig* c, int T) {
    double L = c->num_layers, C = c->channels;
    double n_blocks = L * (12.0 * C * C + 13.0 * C);                // the blocks' parameters
    double n_matmul = n_blocks + (double)c->padded_vocab_size * C;  // + the LM head (wte doubles as it)
    return 6.0 * n_matmul + 6.0 * L * (double)T * C;
}

// the fraction (not percent) of `devices` x peak_tflops that flops_per_token at tokens_per_s is
static double mfu_fraction(double flops_per_token, double tokens_per_s, double peak_tflops, int devices) {
    return flops_per_token * tokens_per_s / (peak_tflops * 1e12 * devices);
}

// the time a peak is measured from: the best (lowest) of the timed runs ms[1..n-1]. ms[0], the first call,
// pays for the library's setup (its threads, its workspace, the first touch of the operands' pages): it is
// run and never counted, whether it came out slower or (a timer's accident) faster
static double peak_best_ms(const double* ms /*(n)*/, int n) {
    double best = 1e30;
    for (int r = 1; r < n; r++) if (ms[r] < best) best = ms[r];
    return best;
}

// the dense GEMM peak of this process's device in TFLOP/s (see the top), and the GEMM's size in *n;
// 0 in the emulated build (nothing measured)
static double measure_peak_tflops(int* n) {
    const int REPS = 5;
    double ms_run[REPS + 1];  // run 0: the warm-up (peak_best_ms)
    *n = 0;
#if LLM_BUILD_EMU
    (void)ms_run;
    return 0.0;
#elif LLM_HAS_KERNELS
    const int N = 4096, ITERS = 4;  // back to back, so the host's work per call overlaps the GPU's
    size_t bytes = (size_t)N * N * sizeof(floatX);
    void *a, *b, *d;  // (outside the tagged allocator: not the run's memory; contents do not matter for speed)
    cudaCheck(cudaMalloc(&a, bytes));
    cudaCheck(cudaMalloc(&b, bytes));
    cudaCheck(cudaMalloc(&d, bytes));
    cudaCheck(cudaMemset(a, 0, bytes));
    cudaCheck(cudaMemset(b, 0, bytes));
    MatmulLtArgs g;
    memset(&g, 0, sizeof(g));
    g.m = g.n = g.k = N;
    g.batch = 1;
    g.a = a; g.a_type = MATMUL_CUDA_FLOATX; g.trans_a = true; g.lda = N;  // (the layout of the forward's x W^T)
    g.b = b; g.b_type = MATMUL_CUDA_FLOATX; g.ldb = N;
    g.c = d; g.c_type = MATMUL_CUDA_FLOATX; g.ldc = N;
    g.d = d; g.d_type = MATMUL_CUDA_FLOATX; g.ldd = N;
    g.alpha = 1.0f;
    for (int r = 0; r <= REPS; r++) {  // r = 0 pays for the library's setup
        device_synchronize();
        double t0 = wall_ms();
        for (int i = 0; i < ITERS; i++) {
            if (matmul_cublaslt_call(&g, llm_ctx.stream) != CUBLAS_STATUS_SUCCESS) {
                fatal("peak measurement: cuBLASLt has no algorithm for a %d^3 %s GEMM (give --peak-tflops)", N, PRECISION_MODE);
            }
        }
        device_synchronize();
        ms_run[r] = (wall_ms() - t0) / ITERS;
    }
    cudaCheck(cudaFree(a));
    cudaCheck(cudaFree(b));
    cudaCheck(cudaFree(d));
#else
    const int N = 512;
    size_t count = (size_t)N * N;
    float* a = (float*)mallocCheck(3 * count * sizeof(float));
    for (size_t i = 0; i < 3 * count; i++) a[i] = 0.5f;  // (finite values: no denormal or NaN slow paths)
    for (int r = 0; r <= REPS; r++) {
        double t0 = wall_ms();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, N, 1.0f, a, N, a + count, N, 0.0f, a + 2 * count, N);
        ms_run[r] = wall_ms() - t0;
    }
    free(a);
#endif
#if !LLM_BUILD_EMU
    *n = N;
    return 2.0 * N * (double)N * N / (peak_best_ms(ms_run, REPS + 1) * 1e-3) / 1e12;
#endif
}

// the run's header line: the FLOPs per token and the peak, with where it came from (peak_n: the measured
// GEMM's size, 0 for --peak-tflops)
static void mfu_print(const GPTConfig* cfg, int T, double peak_tflops, int peak_n, int processes) {
    printf("mfu: %.4g MFLOP per token (6 N + 6 L T C) | ", model_flops_per_token(cfg, T) / 1e6);
    if (peak_tflops <= 0.0) {
        printf("peak n/a (emulated CUDA measures no device; give --peak-tflops)\n");
        return;
    }
    printf("peak %.4g TFLOP/s per process (", peak_tflops);
    if (peak_n == 0) printf("--peak-tflops)");
#if LLM_BUILD_CPU
    else {
        char blas[128];
        blas_describe(blas, sizeof(blas));
        printf("measured: sgemm %d^3 FP32, %s)", peak_n, blas);
    }
#else
    else printf("measured: cuBLASLt %d^3 %s)", peak_n, PRECISION_MODE);
#endif
    printf(" x %d process%s\n", processes, processes > 1 ? "es" : "");
}

// the peak the MFU divides by: given (--peak-tflops: n 0) or measured (n: the GEMM's size), 0: none
typedef struct {
    double tflops;
    int n;
} MfuPeak;

// The step's MFU (a fraction; NaN without a peak) at tok_s tokens per second over `devices` processes, never
// above 1 with a measured peak (see the top): the peak measured again, or raised to the step's own rate, and one
// line (rank0) and one log.jsonl record at that step saying so
static double mfu_of_step(MfuPeak* p, double flops_per_token, double tok_s, int devices, Logger* lg, int rank0, int step) {
    if (p->tflops <= 0.0) return NAN;
    double mfu = mfu_fraction(flops_per_token, tok_s, p->tflops, devices);
    if (mfu <= 1.0 || p->n == 0) return mfu;
    double before = p->tflops, again = measure_peak_tflops(&p->n);
    const char* source = "measured again";
    p->tflops = again > before ? again : before;
    if (mfu_fraction(flops_per_token, tok_s, p->tflops, devices) > 1.0) {  // the step itself: a lower bound
        p->tflops = flops_per_token * tok_s / (devices * 1e12);
        source = "this step's rate (a lower bound)";
    }
    if (rank0) {
        printf("mfu: step %d ran at %.1f%% of the peak measured at start-up (%.4g TFLOP/s: measured low, the cores busy or "
               "cold); the peak is now %.4g TFLOP/s, %s\n", step, 100.0 * mfu, before, p->tflops, source);
    }
    if (lg != NULL && lg->f != NULL) {
        char line[200];
        snprintf(line, sizeof(line), "{\"step\": %d", step);
        logger_append_float(line, sizeof(line), "peak_tflops", (float)p->tflops);
        size_t used = strlen(line);
        snprintf(line + used, sizeof(line) - used, ", \"peak_source\": \"%s\"}", source);
        logger_write_line(lg, line);
    }
    return mfu_fraction(flops_per_token, tok_s, p->tflops, devices);
}
