// linear.h: one linear layer, y = x W^T + b, described by a LinearSpec, forward and backward.
//
// The spec carries everything that will change how a linear layer runs, so that the model code calls
// linear_forward / linear_backward the same way whatever the layout:
//   parallel            replicated (every rank holds W), or Megatron's column-parallel (W split by
//                       output rows; f = identity forward / all-reduce backward before it) and
//                       row-parallel (W split by input columns; g = all-reduce forward / identity
//                       backward after it) (Shoeybi et al. 2019, "Megatron-LM", sec. 3, eq. 3 and fig. 3)
//   sequence_parallel   with column/row-parallel: the all-gather of the sequence-split input before
//                       the product and the reduce-scatter after it instead of f and g (Korthikanti et
//                       al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
//                       sec. 4.2.2)
//   precision           the floatX of the build, or FP8 with a scaling recipe (Micikevicius et al.
//                       2022, "FP8 Formats for Deep Learning")
// Only the replicated layer in the build's precision is implemented so far; the other fields exist
// and linear_check refuses them with one clear line until their stages land. The matmul itself is
// llm/matmul.cuh (OpenBLAS in the CPU build, cuBLASLt otherwise).
#pragma once
#include "common.h"
#include "matmul.cuh"

typedef enum { LINEAR_REPLICATED = 0, LINEAR_COLUMN_PARALLEL, LINEAR_ROW_PARALLEL } LinearParallel;
typedef enum { LINEAR_PRECISION_FLOATX = 0, LINEAR_PRECISION_FP8 } LinearPrecision;

typedef struct {
    const char* name;           // "qkv", "attproj", "fc", "fcproj", "lm_head": for messages
    int in, out;                // input and output features of the whole (unsplit) layer
    int gelu;                   // 1: GELU after the product (the forward writes the pre-activation too)
    LinearParallel parallel;
    int sequence_parallel;
    LinearPrecision precision;
} LinearSpec;

static LinearSpec linear_spec(const char* name, int in, int out, int gelu) {
    LinearSpec s = {name, in, out, gelu, LINEAR_REPLICATED, 0, LINEAR_PRECISION_FLOATX};
    return s;
}

// ends the program with one line if the spec asks for something not implemented yet
static void linear_check(const LinearSpec* s) {
    if (s->parallel != LINEAR_REPLICATED) {
        fatal("linear %s: %s linear layers (tensor parallelism, --tp > 1) are not implemented yet; expected a replicated layer",
              s->name, s->parallel == LINEAR_COLUMN_PARALLEL ? "column-parallel" : "row-parallel");
    }
    if (s->sequence_parallel) fatal("linear %s: sequence parallelism is not implemented yet", s->name);
    if (s->precision != LINEAR_PRECISION_FLOATX) fatal("linear %s: FP8 linear layers are not implemented yet; expected %s", s->name, PRECISION_MODE);
}

// out (BT, out) = inp (BT, in) @ w^T + b; with spec->gelu, pre_gelu (BT, out) gets the product and out
// its GELU. b may be NULL (the tied LM head has no bias).
static void linear_forward(const LinearSpec* s, floatX* out, floatX* pre_gelu, const floatX* inp,
                           const floatX* w /*(out, in)*/, const floatX* b /*(out) or NULL*/, int BT, cudaStream_t stream) {
    matmul_forward(out, s->gelu ? pre_gelu : NULL, inp, w, b, BT, s->in, s->out, stream);
}

// dinp (BT, in) = dout @ w (overwritten), dw += dout^T @ inp, db += column sums of dout (if db != NULL).
// inp_pre_gelu: when inp is the GELU of a previous layer's output, that pre-activation (BT, in): then
// dinp also gets the GELU's derivative (the MLP's fcproj fuses fc's dGELU). scratch: FP32, see matmul.
static void linear_backward(const LinearSpec* s, floatX* dinp, floatX* dw, floatX* db, const floatX* dout,
                            const floatX* inp, const floatX* w, float* scratch, const floatX* inp_pre_gelu,
                            int BT, cudaStream_t stream) {
    matmul_backward(dinp, dw, db, dout, inp, w, scratch, inp_pre_gelu, BT, s->in, s->out, stream);
}
