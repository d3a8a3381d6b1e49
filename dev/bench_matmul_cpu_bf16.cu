// bench_matmul_cpu_bf16.cu: what BF16 storage costs the CPU build's linear layers, and what a BF16 GEMM
// (BF16 operands, FP32 accumulation, AVX512_BF16 instructions: OpenBLAS's cblas_sbgemm, and this project's
// experiment dev/sbgemm_cpu.h) gains over converting to FP32 and calling sgemm. Built with the CPU build's
// BF16 flags (make build/bench_matmul_cpu_bf16; -DLLM_HAVE_SBGEMM when the Makefile found an sbgemm that
// links and a CPU with AVX512_BF16). OpenBLAS runs the kernels the trainer would (llm/ops/blas_cpu.h).
// For GPT-2 124M's four linear layers at BT tokens, the median of a few calls of:
//   fp32    cblas_sgemm on FP32 operands (the FP32 CPU build's product)
//   conv    matmul_forward of this build without sbgemm: the BF16 operands converted to FP32, sgemm,
//           the output rounded to BF16 (what the BF16 CPU build runs when sbgemm is missing)
//   sbgemm  cblas_sbgemm on the BF16 operands, FP32 output, then rounded to BF16 (only with LLM_HAVE_SBGEMM)
//   own     dev/sbgemm_cpu.h on the BF16 operands, FP32 output, then rounded to BF16 (its AVX512-BF16
//           kernel where the compiler targets it, else its portable one)
// and the ratios conv / fp32, conv / sbgemm, fp32 / own; first, the rate of dev/sbgemm_cpu.h's
// micro-kernel alone on one thread with its panels in L1 (its ceiling), and one core's peak FLOP rates of the two
// instructions themselves (vfmadd231ps and vdpbf16ps on 512-bit registers, 24 independent accumulators: no
// latency in the way), the ceiling of any BF16 GEMM on AVX512-BF16 against FP32's.
//   ./build/bench_matmul_cpu_bf16 [BT] [repeats]     (defaults 1024, 5)
#include "../llm/core/common.h"
#include "../llm/ops/matmul.cuh"
#include "../llm/core/usage.h"
#include "../llm/ops/blas_cpu.h"
#include "sbgemm_cpu.h"

static const char* USAGE =
    "[BT [REPEATS]]\n"
    "Times GPT-2 124M's four linear layers in BF16 storage (converted to FP32 for sgemm; cblas_sbgemm where\n"
    "this build has it) against FP32 sgemm, and prints the medians and their ratios.\n"
    "  BT       tokens (rows) of each product (default 1024)\n"
    "  REPEATS  calls of each, the median is printed (default 5)\n";
#include <algorithm>
#include <vector>

static double median_ms(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

#if SBGEMM_AVX512BF16
// One core's FLOP rate of vfmadd231ps (dp 0) or vdpbf16ps (dp 1) on 512-bit registers: 12 independent accumulators
// in registers (more than either instruction's latency times its issue rate), nothing else in the loop.
static double instruction_peak_gflops(int dp) {
    const long iters = 20000000;
    // different starting values: twelve chains the compiler cannot merge into one
    __m512 a0 = _mm512_set1_ps(0.0f), a1 = _mm512_set1_ps(1.0f), a2 = _mm512_set1_ps(2.0f), a3 = _mm512_set1_ps(3.0f),
           a4 = _mm512_set1_ps(4.0f), a5 = _mm512_set1_ps(5.0f), a6 = _mm512_set1_ps(6.0f), a7 = _mm512_set1_ps(7.0f),
           a8 = _mm512_set1_ps(8.0f), a9 = _mm512_set1_ps(9.0f), a10 = _mm512_set1_ps(10.0f), a11 = _mm512_set1_ps(11.0f);
    __m512 x = _mm512_set1_ps(1e-9f), y = _mm512_set1_ps(1.0f);
    __m512i ones = _mm512_set1_epi16(0x3f80);  // BF16 1.0 in every half
    __m512bh xb, yb;
    memcpy(&xb, &ones, sizeof(xb));
    memcpy(&yb, &ones, sizeof(yb));
    double t0 = wall_ms();
    if (dp) {
        for (long i = 0; i < iters; i++) {
#define DP(a) a = _mm512_dpbf16_ps(a, xb, yb);
            DP(a0) DP(a1) DP(a2) DP(a3) DP(a4) DP(a5) DP(a6) DP(a7) DP(a8) DP(a9) DP(a10) DP(a11)
#undef DP
            __asm__ volatile("" : "+v"(xb), "+v"(yb));  // the operands are not constants to the compiler
        }
    } else {
        for (long i = 0; i < iters; i++) {
#define FMA(a) a = _mm512_fmadd_ps(x, y, a);
            FMA(a0) FMA(a1) FMA(a2) FMA(a3) FMA(a4) FMA(a5) FMA(a6) FMA(a7) FMA(a8) FMA(a9) FMA(a10) FMA(a11)
#undef FMA
            __asm__ volatile("" : "+v"(x), "+v"(y));
        }
    }
    double ms = wall_ms() - t0;
    __m512 all = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                               _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)),
                                             _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11))));
    float lanes[16];
    _mm512_storeu_ps(lanes, all);
    volatile float keep = lanes[0];  // the sums are used
    (void)keep;
    return (dp ? 64.0 : 32.0) * 12.0 * iters / ms / 1e6;
}
#endif

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    blas_choose_kernels(argv);  // the CPU's best OpenBLAS kernels, as the trainer runs on
    int BT = argc > 1 ? atoi(argv[1]) : 1024, reps = argc > 2 ? atoi(argv[2]) : 5;
    const int shapes[4][3] = {{768, 2304, 0}, {768, 768, 0}, {768, 3072, 0}, {3072, 768, 0}};  // (C, OC): qkv, attproj, fc, fcproj
    const char* names[4] = {"qkv", "attproj", "fc", "fcproj"};
    printf("linear layers of GPT-2 124M, BT = %d, %s build, sbgemm %s, %d threads\n", BT, PRECISION_MODE,
#if MATMUL_SBGEMM
           "used (LLM_HAVE_SBGEMM)",
#else
           "not available (this OpenBLAS has no cblas_sbgemm, or the CPU no AVX512_BF16)",
#endif
#ifdef _OPENMP
           omp_get_max_threads()
#else
           1
#endif
    );
    {   // the micro-kernel's ceiling: a 12 x 32 tile over 192 k pairs, its panels in L1, one thread
        int kp = 192, iters = 20000;
        std::vector<uint16_t> ap(2 * SBGEMM_MR * kp, 0x3f80), bp(2 * SBGEMM_NR * kp, 0x3f80);
        std::vector<float> ct(SBGEMM_MR * SBGEMM_NR);
        double t0 = wall_ms();
        for (int it = 0; it < iters; it++) sbgemm_kernel(ct.data(), SBGEMM_NR, ap.data(), bp.data(), kp, SBGEMM_MR, SBGEMM_NR, 0);
        double ms = wall_ms() - t0;
        printf("dev/sbgemm_cpu.h micro-kernel (%s), one thread, in L1: %.1f GFLOP/s\n",
               SBGEMM_AVX512BF16 ? "AVX512-BF16" : "portable", 4.0 * SBGEMM_MR * SBGEMM_NR * kp * iters / ms / 1e6);
    }
#if SBGEMM_AVX512BF16
    {   // the instructions' own rates
        double fma = instruction_peak_gflops(0), dp = instruction_peak_gflops(1);
        printf("one core's instruction peaks: vfmadd231ps %.1f GFLOP/s (32 FLOP each), vdpbf16ps %.1f GFLOP/s (64 FLOP "
               "each): a BF16 GEMM on AVX512-BF16 can reach %.2fx FP32's peak here\n", fma, dp, dp / fma);
    }
#endif
    double tot32 = 0, totc = 0, totsb = 0, toto = 0;
    for (int s = 0; s < 4; s++) {
        int C = shapes[s][0], OC = shapes[s][1];
        std::vector<float> x((size_t)BT * C), w((size_t)OC * C), y((size_t)BT * OC);
        for (size_t i = 0; i < x.size(); i++) x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
        for (size_t i = 0; i < w.size(); i++) w[i] = (float)((i * 2246822519u) % 1000) / 1000.0f - 0.5f;
        std::vector<floatX> xh(x.begin(), x.end()), wh(w.begin(), w.end()), yh(y.size());
        std::vector<double> t32, tc, tsb, to;
        for (int r = 0; r < reps + 1; r++) {
            double t0 = wall_ms();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BT, OC, C, 1.0f, x.data(), C, w.data(), C, 0.0f, y.data(), OC);
            double t1 = wall_ms();
            // the conversion path: FP32 views, sgemm, one rounding (matmul_forward_cpu_x without sbgemm)
            float *fx = f32_in(xh.data(), xh.size()), *fw = f32_in(wh.data(), wh.size()), *fy = f32_out(yh.data(), yh.size());
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BT, OC, C, 1.0f, fx, C, fw, C, 0.0f, fy, OC);
            f32_store(yh.data(), fy, yh.size());
            f32_free(xh.data(), fx); f32_free(wh.data(), fw);
            double t2 = wall_ms();
#if MATMUL_SBGEMM
            float* sy = f32_out(yh.data(), yh.size());
            matmul_sbgemm(CblasNoTrans, CblasTrans, BT, OC, C, xh.data(), C, wh.data(), C, 0.0f, sy, OC);
            f32_store(yh.data(), sy, yh.size());
#endif
            double t3 = wall_ms();
            float* oy = f32_out(yh.data(), yh.size());
            sbgemm_cpu(0, 1, BT, OC, C, xh.data(), C, wh.data(), C, 0.0f, oy, OC);
            f32_store(yh.data(), oy, yh.size());
            double t4 = wall_ms();
            if (r == 0) continue;  // warm-up
            t32.push_back(t1 - t0); tc.push_back(t2 - t1); tsb.push_back(t3 - t2); to.push_back(t4 - t3);
        }
        double a = median_ms(t32), b = median_ms(tc), c = median_ms(tsb), d = median_ms(to);
        tot32 += a; totc += b; totsb += c; toto += d;
        printf("  %-8s (%d x %d) x (%d x %d)^T: fp32 %8.2f ms | conv %8.2f ms (%.2fx fp32)", names[s], BT, C, OC, C, a, b, b / a);
        if (MATMUL_SBGEMM) printf(" | sbgemm %8.2f ms (conv / sbgemm %.3f)", c, b / c);
        printf(" | own %8.2f ms (fp32 / own %.3f)\n", d, a / d);
    }
    printf("total: fp32 %.2f ms, conv %.2f ms (%.2fx fp32)", tot32, totc, totc / tot32);
    if (MATMUL_SBGEMM) printf(", sbgemm %.2f ms (conv / sbgemm %.3f)", totsb, totc / totsb);
    printf(", own %.2f ms (fp32 / own %.3f)\n", toto, tot32 / toto);
    return 0;
}
