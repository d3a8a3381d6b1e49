// attention_sass.cu: the fused attention kernels and ring attention's block-pair kernels (both on tensor cores in the
// 16-bit builds) alone, for scripts/kernel_report.py to read their SASS in a precision the default build does not
// compile (make build/attention_fp16.fatbin: FP16, sm_80 and sm_90).
// Not a program: compiled to device code only (nvcc -fatbin); taking the launchers' addresses instantiates the
// kernels of every head size, as train_gpt.cu's calls do.
#include "../llm/core/common.h"
#include "../llm/ops/attention.cuh"
#include "../llm/ops/attention_ring.cuh"

void* attention_sass_keep[] = {(void*)attention_forward, (void*)attention_backward, (void*)attention_pair_forward,
                               (void*)attention_pair_backward};
