// test_kernels.cu: every CUDA kernel against its CPU reference (the verification ladder's rung 2).
// Fresh random inputs each run (seed printed; pass a seed as argv[1] to repeat a run), outputs
// poisoned before each kernel, several shapes including sizes that are not multiples of the block
// size. Built by g++ in the emulated build (make test runs it in three thread orders and under
// ASan+UBSan) and by nvcc for a real GPU, from the same source. Each op family's checks live in
// test/kernels/<family>.h and state their tolerances there.
#include "../llm/common.h"
#include "kernel_check.h"

#if __has_include("kernels/encoder.h")
#include "kernels/encoder.h"
#define HAVE_ENCODER 1
#endif
#if __has_include("kernels/layernorm.h")
#include "kernels/layernorm.h"
#define HAVE_LAYERNORM 1
#endif
#if __has_include("kernels/gelu.h")
#include "kernels/gelu.h"
#define HAVE_GELU 1
#endif
#if __has_include("kernels/matmul.h")
#include "kernels/matmul.h"
#define HAVE_MATMUL 1
#endif
#if __has_include("kernels/attention.h")
#include "kernels/attention.h"
#define HAVE_ATTENTION 1
#endif
#if __has_include("kernels/fused_classifier.h")
#include "kernels/fused_classifier.h"
#define HAVE_CLASSIFIER 1
#endif
#if __has_include("kernels/adamw.h")
#include "kernels/adamw.h"
#define HAVE_ADAMW 1
#endif
#if __has_include("kernels/global_norm.h")
#include "kernels/global_norm.h"
#define HAVE_GLOBAL_NORM 1
#endif

int main(int argc, char** argv) {
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
    printf("test_kernels: seed %llu, %s\n", (unsigned long long)seed, PRECISION_MODE);
    rng_init(&g_rng, seed);
#ifdef HAVE_ENCODER
    test_encoder();
#endif
#ifdef HAVE_LAYERNORM
    test_layernorm();
#endif
#ifdef HAVE_GELU
    test_gelu();
#endif
#ifdef HAVE_MATMUL
    test_matmul();
#endif
#ifdef HAVE_ATTENTION
    test_attention();
#endif
#ifdef HAVE_CLASSIFIER
    test_fused_classifier();
#endif
#ifdef HAVE_ADAMW
    test_adamw();
#endif
#ifdef HAVE_GLOBAL_NORM
    test_global_norm();
#endif
    return test_summary("test_kernels");
}
