// block.h: one transformer block of GPT-2 on one micro-batch, forward and backward, and what its
// forward keeps for its backward: the activation recompute policy of Korthikanti et al. 2022,
// "Reducing Activation Recomputation in Large Transformer Models" (sec. 4.1 counts the bytes,
// sec. 5 chooses what to recompute). And the block on one new position of a sequence whose earlier
// keys and values are cached (block_decode: generation, llm/model/sampler.h), with the same linear specs.
//
//   x_in -> ln1 = LN1(x_in) -> qkv = ln1 Wqkv^T + b -> atty = attention(qkv) -> attproj = atty Wo^T + b
//        -> residual2 = x_in + attproj -> ln2 = LN2(residual2) -> fch = ln2 Wfc^T + b -> fch_gelu = GELU(fch)
//        -> fcproj = fch_gelu Wproj^T + b -> x_out = residual2 + fcproj
//
// The residual streams are explicit: block_forward reads x_in and writes x_out; block_backward takes
// dx, the gradient of x_out, and leaves in it the gradient of x_in (the stream's gradient flows
// through both residual adds unchanged, and each LayerNorm's backward adds its part to it).
//
// Activation recompute (--recompute): which fields of BlockActs a block keeps from its forward to its
// backward. Kept fields are allocated per (layer, micro-batch); the others point into one shared
// recompute buffer, which the forward overwrites layer after layer and block_recompute refills for
// the layer whose backward is next. Every recomputation runs the same kernels on the same inputs as
// the forward, so gradients are bit-identical whatever the policy.
//
//   field       elements        none  selective  full   recomputed from
//   ln1         BTC             kept  -          -      x_in (LayerNorm, with its mean and rstd)
//   ln1 stats   2 BT (FP32)     kept  -          -
//   qkv         3 BTC           kept  kept       -      (full: the whole forward from x_in)
//   lse         B NH T (FP32)   kept  -          -      qkv (the attention core, rerun)
//   atty        BTC             kept  -          -      qkv
//   residual2   BTC             kept  kept       -
//   ln2         BTC             kept  -          -      residual2 (LayerNorm)
//   ln2 stats   2 BT (FP32)     kept  -          -
//   fch         4 BTC           kept  kept       -
//   fch_gelu    4 BTC           kept  kept       -
//   heads       4 BTC (Ulysses) kept  -          -      qkv (the all-to-all and the attention core, rerun)
//   moe         MoEActs         kept  kept       kept   (a moe layer: never rerun, see below)
// plus x_in itself (BTC), which the stage keeps in every policy (the stream, llm/model/stage.h). With context
// parallelism T is the rank's share of the sequence; heads exists with Ulysses only (its head split of q, k, v
// and the attention's output, llm/sharded/context_parallel.h).
//
// selective = the paper's choice (sec. 5: recompute the attention core, QK^T, softmax and the
// product with V, whose (B, NH, T, T) matrix was the largest activation, 2 NH T / C times the size of
// x_in, while its products cost 4 B T^2 C FLOPs, half of them masked, beside the layer's 24 B T C^2
// of matmuls: ~9% of a GPT-2 124M layer's forward at T = 1024) plus the two LayerNorm outputs (llm.c's -r 2: a LayerNorm
// is one read and one write of (B,T,C), nothing next to a matmul). With the fused attention kernels
// that matrix is never stored (llm/ops/attention.cuh keeps lse, NH/C of x_in's size), so the paper's
// 5 a s / h term is gone from every policy; selective still saves atty, ln1 and ln2 (3 BTC, plus lse
// and the LayerNorm statistics) for one attention forward and two LayerNorms per layer. GELU's output stays: the forward
// gets it from the fc matmul's epilogue (cuBLASLt fuses GELU into the product), and recomputing it
// with the separate GELU kernel would not round the same way, so the bit-identity would be lost;
// recomputing the matmul instead would cost a third of the layer's matmul FLOPs.
// A moe layer (llm/model/moe.h in place of fc -> GELU -> fcproj) keeps its MoEActs (the routing, the
// permuted input, the experts' activations) in every policy and is never rerun: the routing is
// deterministic, so a rerun would give the same, but it would also count the layer's losses and routed
// tokens twice; full recompute reruns the attention half and LN2 only (what the MoE backward reads).
// Its fch and fch_gelu fields are not allocated (a->moe set before the fields are carved: llm/model/stage.h).
// full = keep only x_in; the backward reruns the whole block forward first (about one more forward:
// ~4/3 of the step's FLOPs).
//
// The backward in two halves, for zero-bubble pipeline schedules (Qi et al. 2023, "Zero Bubble
// Pipeline Parallelism": B, the input gradient, which the previous stage waits for; W, the weight
// gradients, which only the optimizer step waits for). block_backward_input is block_backward without
// the weight and bias gradients of the four linear layers (the LayerNorms' gradients are computed, they
// come with the input gradient); block_backward_weight computes those later, from a BlockDeferred that
// B filled: the four linears' output gradients (held in buffers shared by all layers during the
// backward) and those of their inputs the recompute policy does not keep (a recomputed field lives in
// the shared recompute buffer, refilled for the next layer):
//
//   field      elements              stored by B              input kept in the slot by
//   dqkv       3 BT C/tp             always                   -
//   dattproj   BT C                  always (SP: gathered)    -
//   dfch       4 BT C/tp             always                   -
//   dfcproj    BT C                  always (SP: gathered)    -
//   ln1        R C (R = BT/tp w. SP) selective, full          none
//   atty       BT C/tp               selective, full          none
//   ln2        R C                   selective, full          none
//   fch_gelu   4 BT C/tp             full                     none, selective
//
// (a row-parallel layer's output gradient is all-gathered by B under sequence parallelism, and W
// takes the gathered one; a column-parallel layer's input is kept as the rank's R tokens and W
// all-gathers it, as the unsplit backward does for dW). B writes dqkv and dfch straight into the
// BlockDeferred (no copy); the two output gradients that are the residual stream's (modified in place
// by the LayerNorm backwards that follow) and the recomputed inputs are copied. Same kernels, same
// values: B then W gives block_backward's gradients bit for bit.
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "units.h"
#include "linear.h"
#include "../ops/layernorm.cuh"
#include "../ops/attention.cuh"
#include "../ops/residual.cuh"
#include "../sharded/context_parallel.h"
#include "moe.h"

typedef enum { RECOMPUTE_NONE = 0, RECOMPUTE_SELECTIVE = 1, RECOMPUTE_FULL = 2 } Recompute;

static const char* recompute_name(Recompute r) {
    return r == RECOMPUTE_NONE ? "none" : (r == RECOMPUTE_SELECTIVE ? "selective" : "full");
}

// one block's activations for one micro-batch (all pointers valid; those the policy does not keep point
// into the stage's shared recompute buffer)
typedef struct {
    floatX* ln1;        // (B,T,C)  LN1's output, the input of the QKV linear
    float* ln1_mean;    // (B,T)
    float* ln1_rstd;    // (B,T)
    floatX* qkv;        // (B,T,3C) q, k, v per position
    float* lse;         // (B,NH,T) attention's row log-sum-exp: the backward recomputes the probabilities
    floatX* atty;       // (B,T,C)  attention's output, the input of the attention projection
    floatX* residual2;  // (B,T,C)  x_in + attproj
    floatX* ln2;        // (B,T,C)
    float* ln2_mean;    // (B,T)
    float* ln2_rstd;    // (B,T)
    floatX* fch;        // (B,T,4C) fc's output before GELU
    floatX* fch_gelu;   // (B,T,4C)
    floatX* heads;      // context parallelism, Ulysses: (B, cp T, 4C/cp) q, k, v and the output of the rank's heads over
                        // the whole sequence (llm/sharded/context_parallel.h), for the backward; else none
    MoEActs* moe;       // a moe layer: its routing and experts' activations (the stage's, kept); dense: NULL
    const float* moe_bias; // a moe layer: the selection bias (E) FP32 (the aux-loss-free balancing) or NULL
    float moe_scale;    // a moe layer: the gradient of the step's loss w.r.t. this micro-batch's aux and z losses
} BlockActs;

// the linear layers of a block, and the part of the attention a rank runs: with tensor parallelism
// (llm/sharded/tensor_parallel.h) each linear is split as the tensor table's tp column splits its weight
// (llm/model/tensors.h, linear_spec_of: QKV and fc column-parallel, attproj and fcproj row-parallel), and
// the attention core runs on the rank's NH/tp heads (heads) of hs channels, heads * hs = att_c channels.
// With context parallelism (cp, the stage's) the block's T is the rank's share of the sequence and the
// attention core is ring attention or Ulysses over the cp group (llm/sharded/context_parallel.h).
typedef struct {
    LinearSpec qkv, attproj, fc, fcproj;
    MoESpec moe;  // the moe layers' experts (E = cfg.num_experts; unused in a dense model)
    int heads, att_c;
    CPGroup* cp;  // NULL: the whole sequence here
} BlockLinears;

static BlockLinears block_linears(GPTConfig c, TPGroup g) {
    MoESpec moe = {c.num_experts, c.top_k, 0.0f, 0.01f, 0.001f};  // the training flags' defaults (stage_set_moe)
    BlockLinears l = {linear_spec_of("qkv", c, T_QKVW, T_QKVB, 0, g), linear_spec_of("attproj", c, T_ATTPROJW, T_ATTPROJB, 0, g),
                      linear_spec_of("fc", c, T_FCW, T_FCB, 1, g), linear_spec_of("fcproj", c, T_FCPROJW, T_FCPROJB, 0, g),
                      moe, c.num_heads / g.size, c.channels / g.size, NULL};
    return l;
}

// lin for one token at a time (block_decode): the same splits and precision, no sequence parallelism
static BlockLinears block_linears_decode(const BlockLinears* lin) {
    BlockLinears l = *lin;
    l.qkv = linear_spec_decode(lin->qkv);
    l.attproj = linear_spec_decode(lin->attproj);
    l.fc = linear_spec_decode(lin->fc);
    l.fcproj = linear_spec_decode(lin->fcproj);
    l.moe.seq = NULL;  // one token: its routing is its own
    return l;
}

// the fields of BlockActs with their sizes and the policies that keep them (the table above; with
// tensor parallelism the attention fields and fc's outputs are the rank's part)
typedef struct {
    void** ptr;
    size_t count;
    int fp32;             // 1: float, 0: floatX
    unsigned char kept[3];  // by Recompute: none, selective, full
} ActField;

#define BLOCK_ACT_FIELDS 13
static void block_act_fields(BlockActs* a, const BlockLinears* lin, int B, int T, ActField* f /*(BLOCK_ACT_FIELDS)*/) {
    size_t BT = (size_t)B * T, C = (size_t)lin->qkv.in, Ca = (size_t)lin->att_c, NH = (size_t)lin->heads;
    size_t R = (size_t)tp_rows(&lin->qkv.tp, (int)BT);  // the tokens of the sequence-parallel regions
    size_t F = (size_t)lin->fc.out_local;  // 4C / T
    size_t Fd = a->moe != NULL ? 0 : F;     // a moe layer has no dense MLP: its fc fields are not allocated (NULL)
    ActField fields[BLOCK_ACT_FIELDS] = {
        {(void**)&a->ln1, R * C, 0, {1, 0, 0}},          {(void**)&a->ln1_mean, R, 1, {1, 0, 0}},
        {(void**)&a->ln1_rstd, R, 1, {1, 0, 0}},         {(void**)&a->qkv, 3 * BT * Ca, 0, {1, 1, 0}},
        {(void**)&a->lse, (size_t)B * NH * T, 1, {1, 0, 0}}, {(void**)&a->atty, BT * Ca, 0, {1, 0, 0}},
        {(void**)&a->residual2, R * C, 0, {1, 1, 0}},    {(void**)&a->ln2, R * C, 0, {1, 0, 0}},
        {(void**)&a->ln2_mean, R, 1, {1, 0, 0}},         {(void**)&a->ln2_rstd, R, 1, {1, 0, 0}},
        {(void**)&a->fch, BT * Fd, 0, {1, 1, 0}},        {(void**)&a->fch_gelu, BT * Fd, 0, {1, 1, 0}},
        {(void**)&a->heads, cp_heads_elems(lin->cp, B, T, (int)Ca), 0, {1, 0, 0}},
    };
    memcpy(f, fields, sizeof(fields));
}

// bytes of one field in a carved block: each starts on a 64-byte boundary (128-bit loads, cache lines)
static inline size_t act_field_bytes(const ActField* f) {
    return ceil_div_sz(f->count * (f->fp32 ? sizeof(float) : sizeof(floatX)), 64) * 64;
}

// Points the fields of f[0..n) that policy r keeps (keep = 1) or does not keep (keep = 0) into one
// new allocation of `kind`, and returns it (NULL if it would be empty). Fields of count 0 get NULL.
static void* carve_fields(ActField* f, int n, Recompute r, int keep, MemKind kind) {
    size_t total = 0;
    for (int i = 0; i < n; i++) if (f[i].kept[r] == keep) total += act_field_bytes(&f[i]);
    if (total == 0) return NULL;
    char* mem = (char*)device_malloc(total, kind);
    char* p = mem;
    for (int i = 0; i < n; i++) {
        if (f[i].kept[r] != keep) continue;
        *f[i].ptr = f[i].count ? p : NULL;
        p += act_field_bytes(&f[i]);
    }
    return mem;
}

// the fields of a block's activations that r keeps (keep = 1) or not (keep = 0), in one allocation
static void* block_acts_carve(BlockActs* a, const BlockLinears* lin, int B, int T, Recompute r, int keep, MemKind kind) {
    ActField f[BLOCK_ACT_FIELDS];
    block_act_fields(a, lin, B, T, f);
    return carve_fields(f, BLOCK_ACT_FIELDS, r, keep, kind);
}

// the fields `r` does not keep, pointed at the shared recompute buffer `shared` (carved the same way)
static void block_acts_share(BlockActs* a, const BlockActs* shared, const BlockLinears* lin, int B, int T, Recompute r) {
    ActField f[BLOCK_ACT_FIELDS], g[BLOCK_ACT_FIELDS];
    BlockActs s = *shared;
    block_act_fields(a, lin, B, T, f);
    block_act_fields(&s, lin, B, T, g);
    for (int i = 0; i < BLOCK_ACT_FIELDS; i++) if (!f[i].kept[r]) *f[i].ptr = *g[i].ptr;
}

// what a block borrows during one call; shared by every block of a stage (workspace)
typedef struct {
    floatX* proj;      // (B,T,C)  forward: the attention and MLP projections' outputs
    floatX* x_scratch; // (B,T,C)  full recompute: the recomputed x_out, not needed again
    floatX* dbuf_c;    // (B,T,C)
    floatX* dbuf_4c;   // (B,T,4C)
    floatX* dqkv;      // (B,T,3C)
    float* scratch;    // FP32 scratch of the parameter-gradient reductions and attention's backward (one op at a time)
    MoEBuffers* moe;   // a moe model: what a moe layer borrows (shared by its layers); else NULL
} BlockBuffers;

// a moe layer's parameters (or gradients) as llm/model/moe.h takes them
static inline MoETensors block_moe_tensors(LayerTensors w) {
    MoETensors m = {w.router, w.efcw, w.efcb, w.efcprojw, w.efcprojb};
    return m;
}

// ----------------------------------------------------------------------------
// forward and backward

// the attention half, to LN2's output (mlp 0), or the whole block (mlp 1). A moe layer (w.router set)
// runs llm/model/moe.h on LN2's output in place of fc -> GELU -> fcproj; its output goes to the residual add.
static void block_forward_part(const BlockLinears* lin, GPTConfig c, LayerTensors w, BlockActs* a, const BlockBuffers* buf,
                               const floatX* x_in /*(R,C)*/, floatX* x_out /*(R,C)*/, int B, int T, int mlp, cudaStream_t s) {
    int C = c.channels, BT = B * T, R = tp_rows(&lin->qkv.tp, BT);
    layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x_in, w.ln1w, w.ln1b, R, C, s);
    linear_forward(&lin->qkv, a->qkv, NULL, a->ln1, w.qkvw, w.qkvb, BT, s);
    context_attention_forward(lin->cp, a->atty, a->lse, a->heads, a->qkv, B, T, lin->att_c, lin->heads, s);
    linear_forward(&lin->attproj, buf->proj, NULL, a->atty, w.attprojw, w.attprojb, BT, s);
    fused_residual_layernorm_forward(a->residual2, a->ln2, a->ln2_mean, a->ln2_rstd, x_in, buf->proj, w.ln2w, w.ln2b,
                                     R, C, s);
    if (!mlp) return;
    if (w.router != NULL) {  // on the rank's R tokens (sequence parallelism: its part; the routing the whole's)
        moe_forward(&lin->moe, block_moe_tensors(w), a->moe_bias, a->moe, buf->moe, a->ln2, buf->proj, R, C, s);
    } else {
        linear_forward(&lin->fc, a->fch_gelu, a->fch, a->ln2, w.fcw, w.fcb, BT, s);
        linear_forward(&lin->fcproj, buf->proj, NULL, a->fch_gelu, w.fcprojw, w.fcprojb, BT, s);
    }
    residual_forward(x_out, a->residual2, buf->proj, (size_t)R * C, s);
}

static void block_forward(const BlockLinears* lin, GPTConfig c, LayerTensors w, BlockActs* a, const BlockBuffers* buf,
                          const floatX* x_in /*(R,C)*/, floatX* x_out /*(R,C)*/, int B, int T, cudaStream_t s) {
    block_forward_part(lin, c, w, a, buf, x_in, x_out, B, T, 1, s);
}

// Decoding with a KV cache: block_forward for one new position pos of a sequence whose earlier
// positions' keys and values are in the layer's caches (one row of att_c per position), which this
// adds its own to. The same ops in the same order on one row (the attention core reads the cache:
// llm/ops/attention.cuh's attention_decode), with the same linear specs (block_linears_decode of the
// stage's, so FP8 layers decode in FP8). x (C): x_in on entry, x_out on return. Nothing is kept for a
// backward: d holds one position's activations, reused by every layer.
typedef struct {
    floatX* ln;         // (C)
    float* mean;        // (1)
    float* rstd;        // (1)
    floatX* qkv;        // (3C/tp)
    floatX* atty;       // (C/tp)
    floatX* proj;       // (C)
    floatX* residual2;  // (C)
    floatX* fch;        // (4C/tp)
    floatX* fch_gelu;   // (4C/tp)
    float* scores;      // (NH/tp, maxT) attention probabilities
    MoEActs* moe;       // a moe model: one token's routing and experts' activations (N = 1); else NULL
    MoEBuffers* moe_buf;
} BlockDecode;

#define BLOCK_DECODE_FIELDS 10
static void block_decode_fields(BlockDecode* d, const BlockLinears* lin, int maxT, ActField* f /*(BLOCK_DECODE_FIELDS)*/) {
    size_t C = (size_t)lin->qkv.in, Ca = (size_t)lin->att_c, F = (size_t)lin->fc.out_local;
    ActField fields[BLOCK_DECODE_FIELDS] = {
        {(void**)&d->ln, C, 0, {1, 1, 1}},           {(void**)&d->mean, 1, 1, {1, 1, 1}},
        {(void**)&d->rstd, 1, 1, {1, 1, 1}},         {(void**)&d->qkv, 3 * Ca, 0, {1, 1, 1}},
        {(void**)&d->atty, Ca, 0, {1, 1, 1}},        {(void**)&d->proj, C, 0, {1, 1, 1}},
        {(void**)&d->residual2, C, 0, {1, 1, 1}},    {(void**)&d->fch, F, 0, {1, 1, 1}},
        {(void**)&d->fch_gelu, F, 0, {1, 1, 1}},     {(void**)&d->scores, (size_t)lin->heads * maxT, 1, {1, 1, 1}},
    };
    memcpy(f, fields, sizeof(fields));
}

static void block_decode(const BlockLinears* lin, GPTConfig c, LayerTensors w, const BlockDecode* d,
                         floatX* kcache /*(maxT, att_c)*/, floatX* vcache /*(maxT, att_c)*/, floatX* x /*(C)*/, int pos,
                         const float* bias /*(E) a moe layer's selection bias, or NULL*/, cudaStream_t s) {
    int C = c.channels, Ca = lin->att_c;
    layernorm_forward(d->ln, d->mean, d->rstd, x, w.ln1w, w.ln1b, 1, C, s);
    linear_forward(&lin->qkv, d->qkv, NULL, d->ln, w.qkvw, w.qkvb, 1, s);
    copy_device_to_device(kcache + (size_t)pos * Ca, d->qkv + Ca, Ca * sizeof(floatX), s);
    copy_device_to_device(vcache + (size_t)pos * Ca, d->qkv + 2 * Ca, Ca * sizeof(floatX), s);
    attention_decode(d->atty, d->scores, d->qkv, kcache, vcache, pos + 1, c.max_seq_len, Ca, lin->heads, s);
    linear_forward(&lin->attproj, d->proj, NULL, d->atty, w.attprojw, w.attprojb, 1, s);
    fused_residual_layernorm_forward(d->residual2, d->ln, d->mean, d->rstd, x, d->proj, w.ln2w, w.ln2b, 1, C, s);
    if (w.router != NULL) {  // decoding: one token, no capacity drops (a capacity of one token would drop by chance)
        MoESpec one = lin->moe;
        one.capacity_factor = 0.0f;
        moe_forward(&one, block_moe_tensors(w), bias, d->moe, d->moe_buf, d->ln, d->proj, 1, C, s);
    } else {
        linear_forward(&lin->fc, d->fch_gelu, d->fch, d->ln, w.fcw, w.fcb, 1, s);
        linear_forward(&lin->fcproj, d->proj, NULL, d->fch_gelu, w.fcprojw, w.fcprojb, 1, s);
    }
    residual_forward(x, d->residual2, d->proj, C, s);
}

// refills the fields policy r did not keep, for the backward of this block (same kernels, same inputs)
static void block_recompute(Recompute r, const BlockLinears* lin, GPTConfig c, LayerTensors w, BlockActs* a,
                            const BlockBuffers* buf, const floatX* x_in, int B, int T, cudaStream_t s) {
    int C = c.channels, R = tp_rows(&lin->qkv.tp, B * T);
    if (r == RECOMPUTE_FULL) {  // a moe layer: the attention half only (its MoEActs are kept)
        block_forward_part(lin, c, w, a, buf, x_in, buf->x_scratch, B, T, w.router == NULL, s);
    } else if (r == RECOMPUTE_SELECTIVE) {
        layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x_in, w.ln1w, w.ln1b, R, C, s);
        context_attention_forward(lin->cp, a->atty, a->lse, a->heads, a->qkv, B, T, lin->att_c, lin->heads, s);
        // the forward's fused kernel normalised the rounded residual2: the plain LayerNorm of it is the same
        layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->residual2, w.ln2w, w.ln2b, R, C, s);
    }
}

// ----------------------------------------------------------------------------
// the backward's two halves: what B keeps for W (the table at the top)

typedef struct {
    floatX* dqkv;      // (B,T,3C/tp) the QKV linear's output gradient (attention's input gradient)
    floatX* dattproj;  // (B,T,C) attproj's output gradient (the stream's after LN2's backward); SP: all-gathered
    floatX* dfch;      // (B,T,4C/tp) fc's output gradient (before its GELU)
    floatX* dfcproj;   // (B,T,C) fcproj's output gradient (the block's x_out's); SP: all-gathered
    floatX* ln1;       // (R,C) QKV's input: the slot's own field when the policy keeps it, else B's copy
    floatX* atty;      // (B,T,C/tp) attproj's input: likewise
    floatX* ln2;       // (R,C) fc's input: likewise
    floatX* fch_gelu;  // (B,T,4C/tp) fcproj's input: likewise
} BlockDeferred;

// Allocates (one allocation of `kind`, returned; NULL if empty) what B stores for W of one (layer,
// micro-batch) whose activations are `a` under policy r: the four output gradients, and each input
// whose BlockActs field r does not keep (their sizes and the policy's choice from block_act_fields);
// the inputs r keeps point at a's fields, which stay in the slot until W.
static void* block_deferred_carve(BlockDeferred* d, BlockActs* a, const BlockLinears* lin, int B, int T, Recompute r,
                                  MemKind kind) {
    size_t BT = (size_t)B * T, C = (size_t)lin->qkv.in, Ca = (size_t)lin->att_c, F = (size_t)lin->fc.out_local;
    size_t Fd = a->moe != NULL ? 0 : F, Cd = a->moe != NULL ? 0 : C;  // a moe layer: no fc or fcproj gradient for W
    ActField af[BLOCK_ACT_FIELDS];
    block_act_fields(a, lin, B, T, af);
    floatX** act[4] = {&a->ln1, &a->atty, &a->ln2, &a->fch_gelu};
    floatX** mine[4] = {&d->ln1, &d->atty, &d->ln2, &d->fch_gelu};
    ActField f[8] = {
        {(void**)&d->dqkv, 3 * BT * Ca, 0, {1, 1, 1}}, {(void**)&d->dattproj, BT * C, 0, {1, 1, 1}},
        {(void**)&d->dfch, BT * Fd, 0, {1, 1, 1}},     {(void**)&d->dfcproj, BT * Cd, 0, {1, 1, 1}},
    };
    for (int k = 0; k < 4; k++) {  // an input: stored here exactly when the slot does not keep it
        int i = 0;
        while (i < BLOCK_ACT_FIELDS && af[i].ptr != (void**)act[k]) i++;
        if (i == BLOCK_ACT_FIELDS) fatal("block_deferred_carve: input %d is not a field of BlockActs", k);
        f[4 + k] = af[i];
        f[4 + k].ptr = (void**)mine[k];
        for (int p = 0; p < 3; p++) f[4 + k].kept[p] = !af[i].kept[p];
        if (a->moe != NULL && k >= 2) f[4 + k].count = 0;  // a moe layer: ln2 and fch_gelu are no W input (fc, fcproj)
        if (af[i].kept[r]) *mine[k] = *act[k];
    }
    return carve_fields(f, 8, r, 1, kind);
}

// the unsplit backward (d == NULL), or its B half (d != NULL: the four linears' weight and bias
// gradients left out, what W needs stored in d)
static void block_backward_impl(const BlockLinears* lin, GPTConfig c, LayerTensors w, LayerTensors gw, const BlockActs* a,
                                const BlockBuffers* buf, const floatX* x_in, floatX* dx /*(R,C)*/, BlockDeferred* d,
                                int B, int T, cudaStream_t s) {
    int C = c.channels, BT = B * T, R = tp_rows(&lin->qkv.tp, BT);
    size_t x = sizeof(floatX);
    LayerTensors gl = gw;  // the linears' gradients: none in B
    if (d != NULL) gl.qkvw = gl.qkvb = gl.attprojw = gl.attprojb = gl.fcw = gl.fcb = gl.fcprojw = gl.fcprojb = NULL;
    floatX* dfch = d != NULL ? d->dfch : buf->dbuf_4c;  // (B,T,4C/tp)
    floatX* dqkv = d != NULL ? d->dqkv : buf->dqkv;     // (B,T,3C/tp)
    int moe = w.router != NULL;
    if (moe) {
        // a moe layer: the experts' and the router's gradients all here, in B too (W has nothing of them)
        moe_backward(&lin->moe, block_moe_tensors(w), block_moe_tensors(gw), a->moe, buf->moe, a->ln2, dx, buf->dbuf_c,
                     a->moe_scale, R, C, s);
    } else {
        // x_out = residual2 + fcproj: dx flows to both. fcproj's backward fuses fc's dGELU: dfch = d fch
        linear_backward(&lin->fcproj, dfch, gl.fcprojw, gl.fcprojb, dx, a->fch_gelu, w.fcprojw, buf->scratch, a->fch, BT, s);
        if (d != NULL) copy_device_to_device(d->dfcproj, linear_dout_for_weight(&lin->fcproj, dx), (size_t)BT * C * x, s);
        linear_backward(&lin->fc, buf->dbuf_c, gl.fcw, gl.fcb, dfch, a->ln2, w.fcw, buf->scratch, NULL, BT, s);
    }
    layernorm_backward(dx, gw.ln2w, gw.ln2b, buf->scratch, buf->dbuf_c, a->residual2, w.ln2w, a->ln2_mean, a->ln2_rstd,
                       R, C, s);
    // dx is now the gradient of residual2 = x_in + attproj
    linear_backward(&lin->attproj, buf->dbuf_c, gl.attprojw, gl.attprojb, dx, a->atty, w.attprojw, buf->scratch, NULL, BT, s);
    if (d != NULL) copy_device_to_device(d->dattproj, linear_dout_for_weight(&lin->attproj, dx), (size_t)BT * C * x, s);
    context_attention_backward(lin->cp, dqkv, buf->scratch, buf->dbuf_c, a->qkv, a->atty, a->lse, a->heads, B, T, lin->att_c,
                               lin->heads, s);
    linear_backward(&lin->qkv, buf->dbuf_c, gl.qkvw, gl.qkvb, dqkv, a->ln1, w.qkvw, buf->scratch, NULL, BT, s);
    layernorm_backward(dx, gw.ln1w, gw.ln1b, buf->scratch, buf->dbuf_c, x_in, w.ln1w, a->ln1_mean, a->ln1_rstd, R, C, s);
    if (d == NULL) return;
    // the inputs the policy recomputed into the shared buffer: copied before the next layer refills it
    size_t Ca = (size_t)lin->att_c, F = (size_t)lin->fc.out_local;
    if (d->ln1 != a->ln1) copy_device_to_device(d->ln1, a->ln1, (size_t)R * C * x, s);
    if (d->atty != a->atty) copy_device_to_device(d->atty, a->atty, (size_t)BT * Ca * x, s);
    if (moe) return;  // (fc's and fcproj's inputs: a dense layer's only)
    if (d->ln2 != a->ln2) copy_device_to_device(d->ln2, a->ln2, (size_t)R * C * x, s);
    if (d->fch_gelu != a->fch_gelu) copy_device_to_device(d->fch_gelu, a->fch_gelu, (size_t)BT * F * x, s);
}

// dx: on entry the gradient of x_out, on return the gradient of x_in. gw: where the parameter
// gradients accumulate (+=). The activations must be complete (block_recompute first).
static void block_backward(const BlockLinears* lin, GPTConfig c, LayerTensors w, LayerTensors gw, const BlockActs* a,
                           const BlockBuffers* buf, const floatX* x_in, floatX* dx /*(R,C)*/, int B, int T,
                           cudaStream_t s) {
    block_backward_impl(lin, c, w, gw, a, buf, x_in, dx, NULL, B, T, s);
}

// B: block_backward without the four linears' weight and bias gradients (gw: only its LayerNorm
// gradients are written); what block_backward_weight needs goes into d (block_deferred_carve's)
static void block_backward_input(const BlockLinears* lin, GPTConfig c, LayerTensors w, LayerTensors gw, const BlockActs* a,
                                 const BlockBuffers* buf, const floatX* x_in, floatX* dx /*(R,C)*/, BlockDeferred* d,
                                 int B, int T, cudaStream_t s) {
    block_backward_impl(lin, c, w, gw, a, buf, x_in, dx, d, B, T, s);
}

// W: the four linears' weight and bias gradients (+= into gw), from what B stored in d, in the unsplit
// backward's order; no parameter read. With sequence parallelism QKV's and fc's inputs are all-gathered
// (tp collectives: every rank of the tp group runs the same W).
static void block_backward_weight(const BlockLinears* lin, LayerTensors gw, const BlockDeferred* d, const BlockBuffers* buf,
                                  int B, int T, cudaStream_t s) {
    int BT = B * T;
    if (gw.fcw != NULL) {  // a moe layer's MLP gradients were all computed in B
        linear_backward_weight(&lin->fcproj, gw.fcprojw, gw.fcprojb, d->dfcproj, d->fch_gelu, buf->scratch, BT, s);
        linear_backward_weight(&lin->fc, gw.fcw, gw.fcb, d->dfch, d->ln2, buf->scratch, BT, s);
    }
    linear_backward_weight(&lin->attproj, gw.attprojw, gw.attprojb, d->dattproj, d->atty, buf->scratch, BT, s);
    linear_backward_weight(&lin->qkv, gw.qkvw, gw.qkvb, d->dqkv, d->ln1, buf->scratch, BT, s);
}
