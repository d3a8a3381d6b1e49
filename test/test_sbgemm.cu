// test_sbgemm.cu: dev/sbgemm_cpu.h, the BF16 GEMM experiment, against a float64 product of the same
// BF16 operands, for every transposition, beta 0 and 1, and shapes that leave partial tiles in M, N and
// K (odd K, K over one block of 384): the micro-kernel's edges, the packing's zero padding, the sum of K
// blocks. Fresh random inputs each run (seed printed; pass one as argv[1] to repeat).
// Bound per element: each k pair adds two exact products to the FP32 accumulator (vdpbf16ps, or the
// portable kernel's two adds), each add rounding by at most 2^-24 of a partial sum <= sum_k |a b|; one
// more add per K block and one for beta C: |err| <= (K + K/384 + 2) 2^-24 (sum_k |a_mk b_kn| + |beta C|).
// A check passes at max err/bound <= 1. A kernel that drops a pair, a tile or a K block fails by far
// (the products are ~1 in size, the bound ~K 6e-8).
// Built twice: build/test_sbgemm_cpu with the CPU's own instructions (the AVX512-BF16 kernel where the CPU
// has it, which the test then requires) and build/test_sbgemm_portable_cpu without AVX512-BF16 (the
// portable kernel, the same packing and blocking).
#include "../llm/core/common.h"
#include "../llm/core/rand.h"
#include "../llm/core/half_cpu.h"  // bf16_bits_from_float: the toolkit's rounding
#include "../dev/sbgemm_cpu.h"
#include "../llm/core/usage.h"
#include "../llm/ops/blas_cpu.h"  // cpu_features (checked against /proc/cpuinfo by test_blas_cpu)
#include "test_common.h"
#include <time.h>
#include <vector>

static const char* USAGE =
    "[SEED]\n"
    "Tests dev/sbgemm_cpu.h (the BF16 GEMM experiment) against a float64 product of the same BF16 operands.\n"
    "  SEED  the random inputs' seed, to repeat a run (default: from the clock; printed)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : (uint64_t)time(NULL);
    printf("test_sbgemm: seed %llu, %s kernel\n", (unsigned long long)seed,
           SBGEMM_AVX512BF16 ? "AVX512-BF16" : "portable");
#if !defined(SBGEMM_FORCE_PORTABLE)
    // the build with the CPU's own instructions must use vdpbf16ps where the CPU has it
    int has = cpu_features().avx512_bf16;
    check(SBGEMM_AVX512BF16 == has, "kernel: %s, and the CPU %s avx512_bf16 (cpuid, with the OS keeping zmm)",
          SBGEMM_AVX512BF16 ? "AVX512-BF16" : "portable", has ? "has" : "lacks");
#endif
    Rng rng;
    rng_init(&rng, seed);
    struct { int M, N, K; } shapes[] = {{1, 1, 1}, {13, 33, 3}, {12, 32, 384}, {25, 70, 385}, {50, 40, 801}, {256, 96, 256}};
    for (auto s : shapes)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int beta = 0; beta < 2; beta++) {
                    int M = s.M, N = s.N, K = s.K;
                    std::vector<uint16_t> a((size_t)M * K), b((size_t)K * N);
                    std::vector<float> af(a.size()), bf(b.size()), c((size_t)M * N), c0((size_t)M * N);
                    rng_normal(&rng, af.data(), af.size(), 0.0f, 1.0f);
                    rng_normal(&rng, bf.data(), bf.size(), 0.0f, 1.0f);
                    rng_normal(&rng, c0.data(), c0.size(), 0.0f, 1.0f);
                    for (size_t i = 0; i < a.size(); i++) { a[i] = bf16_bits_from_float(af[i]); af[i] = bf16_bits_to_float(a[i]); }
                    for (size_t i = 0; i < b.size(); i++) { b[i] = bf16_bits_from_float(bf[i]); bf[i] = bf16_bits_to_float(b[i]); }
                    for (size_t i = 0; i < c.size(); i++) c[i] = beta ? c0[i] : NAN;  // beta 0 must not read C
                    int lda = ta ? M : K, ldb = tb ? K : N;
                    sbgemm_cpu(ta, tb, M, N, K, a.data(), lda, b.data(), ldb, (float)beta, c.data(), N);
                    double worst = 0.0;
                    size_t wi = 0;
                    for (int m = 0; m < M; m++)
                        for (int n = 0; n < N; n++) {
                            double ref = beta ? c0[(size_t)m * N + n] : 0.0, abs_sum = beta ? fabs(ref) : 0.0;
                            for (int k = 0; k < K; k++) {
                                double x = ta ? af[(size_t)k * lda + m] : af[(size_t)m * lda + k];
                                double y = tb ? bf[(size_t)n * ldb + k] : bf[(size_t)k * ldb + n];
                                ref += x * y;
                                abs_sum += fabs(x * y);
                            }
                            double bound = (K + K / SBGEMM_KC + 2) * 0x1p-24 * abs_sum + 1e-30;
                            double r = fabs(c[(size_t)m * N + n] - ref) / bound;
                            if (!(r <= worst)) { worst = r != r ? INFINITY : r; wi = (size_t)m * N + n; }
                        }
                    check(worst <= 1.0, "sbgemm M=%d N=%d K=%d %s%s beta %d: max err/bound %.3g at [%zu]", M, N, K,
                          ta ? "A^T" : "A", tb ? " B^T" : " B", beta, worst, wi);
                }
    return test_summary("test_sbgemm");
}
