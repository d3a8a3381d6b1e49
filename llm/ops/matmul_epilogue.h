// matmul_epilogue.h: what llm/ops/matmul.cuh's three forms (matmul_cpu.h, matmul_kernels.cuh,
// matmul_cublaslt.cuh) and its launchers share: the epilogue that follows a generic product, and the
// size of the bias gradient's scratch.
#pragma once

// the bias gradient of the CUDA builds sums dout in at most this many row splits, so matmul_backward's
// dbias_scratch needs MATMUL_DBIAS_MAX_SPLITS * OC floats (defined in every build, for the model's sizes)
#define MATMUL_DBIAS_MAX_SPLITS 32

// what follows a generic product (matmul_batched)
typedef enum {
    MATMUL_EPILOGUE_NONE = 0,  // C = alpha op(A) op(B) + beta C [+ bias]
    MATMUL_EPILOGUE_GELU = 1,  // aux = alpha op(A) op(B) + beta C [+ bias] (if aux != NULL), C = gelu(that)
    MATMUL_EPILOGUE_DGELU = 2, // C = (alpha op(A) op(B) + beta C) * gelu'(aux)  (aux read; no bias)
} MatmulEpilogue;
