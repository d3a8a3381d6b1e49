// test_kernels.cu: every CUDA kernel against its CPU reference (the verification ladder's rung 2).
// Fresh random inputs each run (seed printed; pass a seed as argv[1] to repeat a run), outputs
// poisoned before each kernel, several shapes including sizes that are not multiples of the block
// size. Built by g++ in the emulated build (make test runs it in three thread orders and under
// ASan+UBSan) and by nvcc for a real GPU, from the same source. Each op family's checks live in
// test/kernels/<family>.h and state their tolerances there.
// Where a kernel and its reference share arithmetic (a helper, a constant), their agreement cannot show
// a wrong constant, so kernels and references are also compared with float64 evaluations written in
// the tests from the papers' formulas (GELU, LayerNorm with eps = 1e-5, attention, softmax and
// cross-entropy, AdamW, the embedding sums, the sum of squares), within a per-element bound on the
// error of one float evaluation (test/kernel_check.h, kc_check_bound).
#include "../llm/core/common.h"
#include "kernel_check.h"

#include "kernels/encoder.h"
#include "kernels/layernorm.h"
#include "kernels/gelu.h"
#include "kernels/attention.h"
#include "kernels/fused_classifier.h"
#include "kernels/adamw.h"
#include "kernels/global_norm.h"
#include "kernels/residual.h"
#include "kernels/vocab_parallel.h"
#include "../llm/core/usage.h"
// the matmul family (cuBLASLt wrapper, bias-gradient and GELU-epilogue kernels) has its own program,
// test/test_matmul.cu, run by make test in the same builds and thread orders

static const char* USAGE =
    "[SEED]\n"
    "Tests every CUDA kernel against its CPU reference and float64 evaluations of the papers' formulas, on\n"
    "several shapes, outputs poisoned before each kernel.\n"    "  SEED  the random inputs' seed, to repeat a run (default: from the clock; printed)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
    printf("test_kernels: seed %llu, %s\n", (unsigned long long)seed, PRECISION_MODE);
    rng_init(&g_rng, seed);
    context_init();
    test_encoder();
    test_layernorm();
    test_gelu();
    test_attention();
    test_attention_decode();
    test_fused_classifier();
    test_loss_accumulate();
    test_adamw();
    test_global_norm();
    test_residual();
    test_vocab_parallel();
    context_free();
    return test_summary("test_kernels");
}
