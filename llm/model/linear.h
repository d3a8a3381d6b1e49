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
//                       2022, "FP8 Formats for Deep Learning"): the spec then points at the FP8 state
//                       and names its entry (one spec per layer: llm/model/stage.h's stage_linears)
// The tensor-parallel operators are llm/sharded/tensor_parallel.h; the matmul itself is llm/ops/matmul.cuh (OpenBLAS
// in the CPU build, cuBLASLt otherwise), or in FP8 llm/precision/fp8_linear.h (which quantizes the operands and
// keeps the recipes' scales) over llm/matmul_fp8.cuh. Only the product changes with the precision:
// the collectives around it are the same.
//
// The backward in two halves (zero-bubble pipeline schedules, Qi et al. 2023, "Zero Bubble Pipeline
// Parallelism", sec. 2: B computes the input gradient, which the previous stage waits for, W the
// weight gradient, which nothing waits for until the optimizer step): linear_backward with dw == db
// == NULL is B, linear_backward_weight is W. Together they run the same kernels on the same values as
// one linear_backward, so the gradients are bit-identical. W reads the layer's input and its output
// gradient, which the caller keeps from B (llm/model/block.h); with sequence parallelism the collectives
// move with the half that needs them: a column-parallel layer's input is all-gathered only for dW (in
// W, not in B), a row-parallel layer's output gradient is all-gathered in B (dinp needs it) and W
// takes that gathered one (linear_dout_for_weight), so B + W communicate what one backward does.
#pragma once
#include "../core/common.h"
#include "tensors.h"
#include "../ops/matmul.cuh"
#include "../sharded/tensor_parallel.h"
#include "../precision/fp8_linear.h"

typedef enum { LINEAR_REPLICATED = 0, LINEAR_COLUMN_PARALLEL, LINEAR_ROW_PARALLEL } LinearParallel;
typedef enum { LINEAR_PRECISION_FLOATX = 0, LINEAR_PRECISION_FP8 } LinearPrecision;

typedef struct {
    const char* name;           // "qkv", "attproj", "fc", "fcproj", "lm_head": for messages
    int in, out;                // input and output features of the whole (unsplit) layer
    int in_local, out_local;    // this rank's: in / tp for row-parallel, out / tp for column-parallel
    int gelu;                   // 1: GELU after the product (the forward writes the pre-activation too)
    LinearParallel parallel;
    TPGroup tp;                 // the tensor-parallel group (size 1: replicated)
    int sequence_parallel;
    LinearPrecision precision;
    Fp8State* fp8;              // FP8: the recipes' state (NULL in floatX)
    int fp8_slot;               // FP8: this linear's entry, layer * 4 + (qkv, attproj, fc, fcproj)
} LinearSpec;

// a layer split `parallel` over the tp group g (over a group of one rank each split is the whole layer, and
// the tp operators around it are the identity: llm/sharded/tensor_parallel.h)
static LinearSpec linear_spec_tp(const char* name, int in, int out, int gelu, LinearParallel parallel, TPGroup g) {
    LinearSpec s = {name, in, out, in, out, gelu, parallel, g, g.sequence_parallel, LINEAR_PRECISION_FLOATX, NULL, 0};
    if (parallel == LINEAR_COLUMN_PARALLEL) s.out_local = out / g.size;
    if (parallel == LINEAR_ROW_PARALLEL) s.in_local = in / g.size;
    return s;
}

// The spec of the layer whose weight is tensor `weight` of the tensor table (llm/model/tensors.h) and whose
// bias is tensor `bias` (-1: none): its sizes are the weight's (out, in) = (rows, cols), its split the
// weight's tp column. A weight split by output rows (TP_QKV_HEADS, TP_ROWS, TP_VOCAB) makes the layer
// column-parallel, one split by input columns (TP_COLS) row-parallel. The bias must follow: split with
// a column-parallel layer's rows, whole beside a row-parallel layer (added once, after the partial
// sums); a table that says otherwise ends the program at start-up.
static LinearSpec linear_spec_of(const char* name, GPTConfig c, int weight, int bias, int gelu, TPGroup g) {
    TPSplit ws = TENSORS[weight].tp;
    LinearParallel p = ws == TP_COLS ? LINEAR_ROW_PARALLEL
                       : (ws == TP_QKV_HEADS || ws == TP_ROWS || ws == TP_VOCAB) ? LINEAR_COLUMN_PARALLEL : LINEAR_REPLICATED;
    if (bias >= 0) {
        TPSplit bs = TENSORS[bias].tp;
        int ok = p == LINEAR_COLUMN_PARALLEL ? bs == ws : (p == LINEAR_ROW_PARALLEL ? bs == TP_REPLICATED : tp_replicated(bias));
        if (!ok) fatal("linear %s: the tensor table splits weight %s and bias %s differently for tensor parallelism", name,
                       TENSORS[weight].name, TENSORS[bias].name);
    }
    return linear_spec_tp(name, (int)dim_value(c, TENSORS[weight].cols), (int)dim_value(c, TENSORS[weight].rows), gelu, p, g);
}

// The spec s for one token at a time (decoding with a KV cache, llm/model/block.h's block_decode): the
// same split and precision (FP8 specs stay FP8), without sequence parallelism, as one token cannot be
// split over the tp ranks (and the stage's gather buffers are sized for its micro-batch).
static LinearSpec linear_spec_decode(LinearSpec s) {
    s.sequence_parallel = 0;
    s.tp.sequence_parallel = 0;
    s.tp.gathered = s.tp.full = NULL;
    return s;
}

// ends the program with one line if the spec asks for something not implemented yet
static void linear_check(const LinearSpec* s) {
    if (s->parallel == LINEAR_ROW_PARALLEL && s->gelu) {
        fatal("linear %s: a row-parallel layer's output is a partial sum until the all-reduce; expected no GELU after it", s->name);
    }
    if (s->parallel != LINEAR_REPLICATED && (s->in_local * (s->parallel == LINEAR_ROW_PARALLEL ? s->tp.size : 1) != s->in ||
                                             s->out_local * (s->parallel == LINEAR_COLUMN_PARALLEL ? s->tp.size : 1) != s->out)) {
        fatal("linear %s: expected %d x %d to split evenly over %d tensor-parallel ranks", s->name, s->out, s->in, s->tp.size);
    }
    if (s->sequence_parallel && (s->parallel == LINEAR_REPLICATED || s->tp.gathered == NULL || s->tp.full == NULL)) {
        fatal("linear %s: sequence parallelism needs a column- or row-parallel layer and the stage's workspace", s->name);
    }
    if (s->precision == LINEAR_PRECISION_FP8 && s->fp8 == NULL) fatal("linear %s: FP8 precision without an FP8 state", s->name);
}

// spec s in FP8 with state st, entry slot (layer * 4 + linear) (the tp split checked before: fp8_layout_error)
static void linear_set_fp8(LinearSpec* s, Fp8State* st, int slot) {
    s->precision = LINEAR_PRECISION_FP8;
    s->fp8 = st;
    s->fp8_slot = slot;
}

// the product of the layer, in its precision: matmul_forward's and matmul_backward's contracts
static void linear_matmul_forward(const LinearSpec* s, floatX* out, floatX* pre_gelu, const floatX* inp, const floatX* w,
                                  const floatX* b, int BT, cudaStream_t stream) {
    if (s->precision == LINEAR_PRECISION_FP8) {
        fp8_linear_forward(s->fp8, s->fp8_slot, out, pre_gelu, inp, w, b, BT, s->in_local, s->out_local, &s->tp, stream);
    } else {
        matmul_forward(out, pre_gelu, inp, w, b, BT, s->in_local, s->out_local, stream);
    }
}
static void linear_matmul_backward(const LinearSpec* s, floatX* dinp, floatX* dw, floatX* db, const floatX* dout,
                                   const floatX* inp, const floatX* w, float* scratch, const floatX* inp_pre_gelu, int BT,
                                   cudaStream_t stream) {
    if (s->precision == LINEAR_PRECISION_FP8) {
        fp8_linear_backward(s->fp8, s->fp8_slot, dinp, dw, db, dout, inp, w, scratch, inp_pre_gelu, BT, s->in_local,
                            s->out_local, &s->tp, stream);
    } else {
        matmul_backward(dinp, dw, db, dout, inp, w, scratch, inp_pre_gelu, BT, s->in_local, s->out_local, stream);
    }
}

// out (BT, out) = inp (BT, in) @ w^T + b; with spec->gelu, pre_gelu (BT, out) gets the product and out
// its GELU. b may be NULL (the tied LM head has no bias). BT: the micro-batch's tokens.
//   column-parallel: inp (BT, in) whole (f: identity), w (out/tp, in), b (out/tp), out (BT, out/tp) local;
//                    sequence-parallel: inp is this rank's (BT/tp, in) block, all-gathered first
//   row-parallel:    inp (BT, in/tp) local, w (out, in/tp); the partial products are summed over the tp
//                    group (g: all-reduce), the bias (out) added once, by tp rank 0; sequence-parallel:
//                    reduce-scattered instead, out is this rank's (BT/tp, out) block
static void linear_forward(const LinearSpec* s, floatX* out, floatX* pre_gelu, const floatX* inp,
                           const floatX* w /*(out_local, in_local)*/, const floatX* b /*(out_local) or NULL*/, int BT,
                           cudaStream_t stream) {
    int row = s->parallel == LINEAR_ROW_PARALLEL, tp_size = s->tp.size;
    if (s->sequence_parallel && !row) {
        comm_all_gather(s->tp.comm, GROUP_TP, inp, s->tp.gathered, (size_t)BT / tp_size * s->in, stream);
        inp = s->tp.gathered;
    }
    floatX* y = s->sequence_parallel && row ? s->tp.full : out;
    linear_matmul_forward(s, y, s->gelu ? pre_gelu : NULL, inp, w, row && s->tp.rank != 0 ? NULL : b, BT, stream);
    if (row && s->sequence_parallel) comm_reduce_scatter(s->tp.comm, GROUP_TP, y, out, (size_t)BT / tp_size * s->out, COMM_SUM, stream);
    else if (row) tp_all_reduce(&s->tp, out, (size_t)BT * s->out, stream);
}

// dinp (BT, in_local) = dout @ w (overwritten), dw += dout^T @ inp, db += column sums of dout (if db !=
// NULL). inp_pre_gelu: when inp is the GELU of a previous layer's output, that pre-activation (BT,
// in_local): then dinp also gets the GELU's derivative (the MLP's fcproj fuses fc's dGELU). scratch:
// FP32, see matmul.
//   column-parallel: dinp is this rank's part of the input's gradient: summed over the tp group
//                    (f's backward: all-reduce); dout (BT, out/tp) local. Sequence-parallel: inp (this
//                    rank's block) is all-gathered again for dw, and dinp reduce-scattered to the
//                    rank's (BT/tp, in) block
//   row-parallel:    dout (BT, out) the same on every rank (g's backward: identity); dinp (BT, in/tp)
//                    local; db the same on every rank, so the replicated bias stays replicated.
//                    Sequence-parallel: dout is this rank's (BT/tp, out) block, all-gathered first
// dw == db == NULL: only dinp (the B half of the split backward; inp unused, may be NULL, and a
// sequence-parallel column-parallel layer gathers nothing: linear_backward_weight gathers inp for dw).
static void linear_backward(const LinearSpec* s, floatX* dinp, floatX* dw, floatX* db, const floatX* dout,
                            const floatX* inp, const floatX* w, float* scratch, const floatX* inp_pre_gelu,
                            int BT, cudaStream_t stream) {
    int column = s->parallel == LINEAR_COLUMN_PARALLEL, tp_size = s->tp.size;
    if (column && inp_pre_gelu) {
        fatal("linear %s: the GELU derivative applies after the input gradient's all-reduce; a column-parallel layer takes no inp_pre_gelu", s->name);
    }
    floatX* dx = dinp;
    if (s->sequence_parallel && column) {
        if (dw != NULL) {
            comm_all_gather(s->tp.comm, GROUP_TP, inp, s->tp.gathered, (size_t)BT / tp_size * s->in, stream);
            inp = s->tp.gathered;
        }
        dx = s->tp.full;
    } else if (s->sequence_parallel) {
        comm_all_gather(s->tp.comm, GROUP_TP, dout, s->tp.full, (size_t)BT / tp_size * s->out, stream);
        dout = s->tp.full;
    }
    linear_matmul_backward(s, dx, dw, db, dout, inp, w, scratch, inp_pre_gelu, BT, stream);
    if (s->sequence_parallel && column) comm_reduce_scatter(s->tp.comm, GROUP_TP, dx, dinp, (size_t)BT / tp_size * s->in, COMM_SUM, stream);
    else if (column) tp_all_reduce(&s->tp, dinp, (size_t)BT * s->in, stream);
}

// The output gradient linear_backward_weight takes, (BT, out_local), given the dout linear_backward
// took: that one, or for a sequence-parallel row-parallel layer the all-gathered copy linear_backward
// left in the tp group's workspace (s->tp.full: valid until the next collective that uses it, so the
// caller copies it right after linear_backward).
static const floatX* linear_dout_for_weight(const LinearSpec* s, const floatX* dout) {
    return s->sequence_parallel && s->parallel == LINEAR_ROW_PARALLEL ? s->tp.full : dout;
}

// The W half of the split backward: dw += dout^T @ inp, db += column sums of dout (if db != NULL), the
// kernels and the order of linear_backward's weight part, so B then W equals one linear_backward bit for
// bit. dout (BT, out_local): the whole output gradient (a sequence-parallel row-parallel layer's: the
// all-gathered one, linear_dout_for_weight); inp as linear_backward takes it: a sequence-parallel
// column-parallel layer's is this rank's (BT/tp, in) block, all-gathered here (a tp collective: every
// rank of the group runs its W). Needs no parameter (no w): under ZeRO-3 W gathers nothing.
static void linear_backward_weight(const LinearSpec* s, floatX* dw /*(out_local, in_local)*/,
                                   floatX* db /*(out_local) or NULL*/, const floatX* dout, const floatX* inp,
                                   float* scratch, int BT, cudaStream_t stream) {
    if (s->sequence_parallel && s->parallel == LINEAR_COLUMN_PARALLEL) {
        comm_all_gather(s->tp.comm, GROUP_TP, inp, s->tp.gathered, (size_t)BT / s->tp.size * s->in, stream);
        inp = s->tp.gathered;
    }
    linear_matmul_backward(s, NULL, dw, db, dout, inp, NULL, scratch, NULL, BT, stream);
}
