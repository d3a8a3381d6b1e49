// fp8_linear.h: the FP8 linear layer: the scaling recipes' state and the three GEMMs of a linear layer
// with FP8 operands (Micikevicius et al. 2022, "FP8 Formats for Deep Learning", sec. 3-4).
//
// y = x W^T + b costs three GEMMs; in FP8 every operand is quantized first (Q), the products
// accumulate in FP32 and the result is rounded once to floatX (llm/precision/matmul_fp8.cuh):
//   forward  y   = Q(x) Q(W)^T        x (BT, in), W (out, in): E4M3
//   dgrad    dx  = Q(dy) Q(W^T)^T     dy (BT, out): E5M2 ("hybrid", the paper's choice: gradients
//                                     need range more than precision) or E4M3 (--fp8-format e4m3)
//   wgrad    dW += Q(dy^T) Q(x^T)^T   the inner dimension is now BT: dy and x quantized transposed
// Only the four linears of a block run in FP8 (QKV, attention projection, fc, fcproj), and in a moe layer
// (llm/model/moe.h) each expert's fc and fcproj, each expert its own linear with its own entries; the router
// (FP32 logits, as Megatron-Core and DeepSeek-V3 keep it), the bias and its gradient, the embeddings, the
// LM head, the LayerNorms and the softmax stay in floatX, as in DeepSeek-V3 (sec. 3.3) and Transformer Engine. The parameters, the activations the backward keeps and
// the gradients stay floatX too: an operand is quantized when a GEMM needs it.
//
// The recipes (how an operand gets its scale; q = encode(x * s), llm/precision/fp8.cuh):
//   delayed  per tensor, from the amaxes of the previous steps (Transformer Engine's DelayedScaling):
//            s = (fp8_max / reduce(history)) / 2^margin, reduce = max or most recent; a reduced amax of
//            0, inf or NaN keeps the previous scale. One amax per tensor per step (the max over the
//            step's micro-batches) enters a ring of --fp8-history entries at the end of the step.
//   current  per tensor, from this tensor's own amax, taken just before it is quantized.
//   block    DeepSeek-V3 sec. 3.3: 1x128 tiles of x and dy along the GEMM's inner dimension (so 128x1
//            tiles of the original for wgrad), 128x128 blocks of W; one FP32 scale per tile.
//   mx       OCP MX v1.0: 32-element blocks along the inner dimension with power-of-two E8M0 scales,
//            for every operand.
//
// Amax groups. A per-tensor scale must come from the whole tensor: Megatron-LM's FP8 divergence (PR
// #442) came from amaxes reduced over the wrong group. Under tensor parallelism W is split (by rows
// for column-parallel, by columns for row-parallel), and so are x of a row-parallel layer and dy of
// a column-parallel one. Current scaling all-reduces (max) every amax over the tp group before it
// makes the scale (for a tensor the group does not split the max changes nothing). Delayed scaling
// records the step's amaxes in one table, entry (layer, linear, tensor), and all-reduces (max) it
// once per step over every rank: the tp ranks hold the pieces of a tensor, the dp ranks ran the other
// micro-batches of the step (the max is what one process running all of them records), the pp ranks
// hold other layers (their entries are 0). So the state is the same on every rank and every layout
// quantizes as one process does; the table and the histories are the resumable state
// (fp8_state_export / fp8_state_import).
//
// Experts (a model with E experts per moe layer): after the L * 4 block slots, one slot per (layer, expert,
// linear): 4L + (l E + e) 2 + (0 fc, 1 fcproj), e the global expert index (under expert parallelism the rank
// holding local expert j of E/ep runs slot e = ep_rank E/ep + j, so every layout records an expert in the same
// entry and the world max of the table is what one process holding every expert records). An expert that
// received no row in a whole step (on every rank, in every micro-batch) has no amax: its entries' step amaxes
// stay at the "not seen" mark (-1; a seen tensor records >= 0, a zero tensor 0) through the world max, and
// fp8_step_end leaves their history as it was: the ring rotated with the shared position instead of written,
// so the same amaxes in the same order remain and the reduction (max, most recent) gives the same scale. (A 0
// written there would stand for a tensor of zeros, and H steps without rows would empty the history.) An entry
// whose history holds no amax yet (an expert first routed to after step 1) takes current scaling from its
// own amax, as every entry does in step 1 (fp8_entry_cold), not the initial scale 1 (gradients would underflow).
//
// Block and MX scales are per tile: every layout has the same tiles when a tp split falls on tile
// boundaries, which fp8_layout_error requires. (An expert's GEMM under expert parallelism holds the rows of
// every ep rank's micro-batch, so a per-tensor scale is their joint amax; its first step, or any step of
// current scaling, rounds those rows other than one process running the micro-batches one at a time.)
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../comm/comm.h"
#include "fp8.cuh"
#include "../ops/matmul.cuh"
#include "matmul_fp8.cuh"
#include "../sharded/tensor_parallel.h"

typedef enum { FP8_RECIPE_NONE = 0, FP8_RECIPE_DELAYED, FP8_RECIPE_CURRENT, FP8_RECIPE_BLOCK, FP8_RECIPE_MX } Fp8Recipe;
enum { FP8_X = 0, FP8_W = 1, FP8_DY = 2, FP8_TENSORS = 3 };  // the quantized tensors of a linear layer
#define FP8_BLOCK_LINEARS 4                                   // qkv, attproj, fc, fcproj
#define FP8_EXPERT_LINEARS 2                                  // an expert's fc, fcproj
#define FP8_UNSEEN (-1.0f)                                    // delayed: a step amax no tensor reached

static const char* fp8_recipe_name(Fp8Recipe r) {
    static const char* names[] = {"none", "delayed", "current", "block", "mx"};
    return names[r];
}

typedef struct {
    Fp8Recipe recipe;
    int e4m3_grads;   // 1: E4M3 for dy too (--fp8-format e4m3); 0: hybrid, dy in E5M2
    int history;      // delayed: the amax history's length
    int reduce;       // delayed: FP8_AMAX_REDUCE_MAX or FP8_AMAX_REDUCE_MOST_RECENT
    int margin;       // delayed: scale / 2^margin
} Fp8Config;

typedef struct {
    Fp8Config cfg;
    int n;              // entries: L layers * 4 linears * 3 tensors (entry = (l * 4 + linear) * 3 + tensor), then
                        // the experts': L * E * 2 linears * 3 tensors (slot 4L + (l E + e) 2 + linear)
    int L, E;           // the model's layers and experts per moe layer (0: a dense model)
    float* amax;        // (n) device: delayed: this step's amaxes so far (NaN as +inf; FP8_UNSEEN: no tensor yet)
    float* scale;       // (n) device: the scales in use (delayed: this step's; current: the last of each)
    float* amax_tmp;    // (2) device: one tensor's amax, raw and folded
    float* history;     // (n, H) host: delayed: the amax rings
    float* scale_host;  // (n) host: delayed: the scales, kept when an amax is 0, inf or NaN
    int pos;            // delayed: where the next amax goes in every ring
    int recorded;       // delayed: steps recorded in the histories (0: scales from each tensor's own amax)
    unsigned char* held; // (L) 1 for the layers this rank's stages hold
    unsigned char* held_expert; // (L E) 1 for the experts this rank runs in the layers it holds
    Comm* comm;
    Fp8Matrix a, b;     // the operands of the GEMM running now (workspace, grown to the largest shape used)
    size_t max_elems;
} Fp8State;

// --- the operands: format and scaling of each tensor under each recipe ---

static int fp8_tensor_format(const Fp8Config* c, int tensor) {
    return tensor == FP8_DY && !c->e4m3_grads ? FP8_E5M2 : FP8_E4M3;
}

static Fp8Scaling fp8_tensor_scaling(Fp8Recipe r, int tensor) {
    if (r == FP8_RECIPE_BLOCK) return tensor == FP8_W ? FP8_SCALE_128x128 : FP8_SCALE_1x128;
    if (r == FP8_RECIPE_MX) return FP8_SCALE_MX32;
    return FP8_SCALE_TENSOR;
}

// the slot of expert e's (global index) linear k (0 fc, 1 fcproj) in layer l
static inline int fp8_expert_slot(const Fp8State* st, int l, int e, int k) {
    return st->L * FP8_BLOCK_LINEARS + (l * st->E + e) * FP8_EXPERT_LINEARS + k;
}

// the layer of entry i and, for an expert's entry, the expert (else -1)
static inline int fp8_entry_layer(const Fp8State* st, int i, int* expert) {
    int dense = st->L * FP8_BLOCK_LINEARS * FP8_TENSORS;
    if (i < dense) { *expert = -1; return i / (FP8_BLOCK_LINEARS * FP8_TENSORS); }
    int j = (i - dense) / (FP8_EXPERT_LINEARS * FP8_TENSORS);
    *expert = j % st->E;
    return j / st->E;
}

// delayed: entry i has no amax in its history yet (none recorded, or only unseen steps): its scale comes from
// the tensor's own amax, as in step 1
static int fp8_entry_cold(const Fp8State* st, int i) {
    if (st->recorded == 0) return 1;
    const float* h = st->history + (size_t)i * st->cfg.history;
    for (int k = 0; k < st->cfg.history; k++) if (h[k] != 0.0f) return 0;
    return 1;
}

// delayed: every entry's step amax to FP8_UNSEEN (nothing recorded this step yet)
static void fp8_amax_reset(Fp8State* st) {
    float* m = (float*)mallocCheck((size_t)st->n * sizeof(float));
    for (int i = 0; i < st->n; i++) m[i] = FP8_UNSEEN;
    copy_to_device(st->amax, m, (size_t)st->n * sizeof(float));
    free(m);
}

// --- small device operations on the amax and scale tables (kernels, or plain code in the CPU build) ---

// acc = max(acc, amax), a NaN amax counted as +inf: MAX reductions need an order (MPI's MAX on NaN is
// undefined) and the recipes treat inf and NaN alike (the previous scale is kept)
LLM_HD static inline float fp8_fold(float acc, float amax) {
    float a = amax != amax ? INFINITY : amax;
    return a > acc ? a : acc;
}

#if LLM_HAS_KERNELS
__global__ void fp8_fold_kernel(float* acc /*(1)*/, const float* amax /*(1)*/) { *acc = fp8_fold(*acc, *amax); }
__global__ void fp8_current_kernel(float* scale /*(1)*/, const float* amax /*(1)*/, int fmt) {
    *scale = fp8_current_scale(*amax, *scale, fmt);
}
#endif

static void fp8_fold_amax(float* acc, const float* amax, cudaStream_t s) {
#if LLM_HAS_KERNELS
    LAUNCH(fp8_fold_kernel, dim3(1), dim3(1), 0, s, acc, amax);
#else
    (void)s;
    *acc = fp8_fold(*acc, *amax);
#endif
}

static void fp8_current_update(float* scale, const float* amax, int fmt, cudaStream_t s) {
#if LLM_HAS_KERNELS
    LAUNCH(fp8_current_kernel, dim3(1), dim3(1), 0, s, scale, amax, fmt);
#else
    (void)s;
    *scale = fp8_current_scale(*amax, *scale, fmt);
#endif
}

// --- set-up ---

// L: the model's layers (every rank keeps the table of all of them); max_elems: the largest operand
// of any GEMM of this rank's linears (see fp8_max_operand); E: the experts per moe layer (0: dense)
static void fp8_init(Fp8State* st, Fp8Config cfg, Comm* comm, int L, size_t max_elems, int E = 0) {
    memset(st, 0, sizeof(*st));
    st->cfg = cfg;
    st->comm = comm;
    st->L = L;
    st->E = E;
    st->n = L * FP8_BLOCK_LINEARS * FP8_TENSORS + L * E * FP8_EXPERT_LINEARS * FP8_TENSORS;
    st->held = (unsigned char*)mallocCheck(L);
    memset(st->held, 0, L);
    st->held_expert = (unsigned char*)mallocCheck((size_t)L * E + 1);
    memset(st->held_expert, 0, (size_t)L * E + 1);
    if (cfg.recipe == FP8_RECIPE_NONE) return;
    st->amax = (float*)device_malloc((st->n + 2) * sizeof(float), MEM_WORKSPACE);
    st->amax_tmp = st->amax + st->n;
    st->scale = (float*)device_malloc(st->n * sizeof(float), MEM_WORKSPACE);
    st->history = (float*)mallocCheck((size_t)st->n * (cfg.history > 0 ? cfg.history : 1) * sizeof(float));
    st->scale_host = (float*)mallocCheck(st->n * sizeof(float));
    memset(st->history, 0, (size_t)st->n * (cfg.history > 0 ? cfg.history : 1) * sizeof(float));
    for (int i = 0; i < st->n; i++) st->scale_host[i] = 1.0f;
    copy_to_device(st->scale, st->scale_host, st->n * sizeof(float));
    device_memset_zero(st->amax, (st->n + 2) * sizeof(float), llm_ctx.stream);
    fp8_amax_reset(st);
    st->max_elems = max_elems;
    fp8_matrix_alloc(&st->a, 0, 0, FP8_E4M3, FP8_SCALE_TENSOR, MEM_WORKSPACE);
    fp8_matrix_alloc(&st->b, 0, 0, FP8_E4M3, FP8_SCALE_TENSOR, MEM_WORKSPACE);
}

// the largest operand of the three GEMMs of a linear (in_local, out_local) on BT tokens
static size_t fp8_max_operand(int BT, int in, int out) {
    size_t a = (size_t)BT * (in > out ? in : out), w = (size_t)in * out;
    return a > w ? a : w;
}

// Block and MX scales are those of one process only if every tp split falls on tile boundaries: the
// split dimension of W is the inner dimension of x or dy, or cuts W's 128-row blocks. Column-parallel
// QKV holds C/tp rows of each of q, k and v (its heads), fc 4C/tp rows; row-parallel attproj C/tp
// columns, fcproj 4C/tp. Returns 1 and a message (for rank 0 to print before anything is allocated)
// if a piece is not a whole number of tiles.
static int fp8_layout_error(Fp8Recipe r, int C, int tp, char* err, size_t cap) {
    int tile = r == FP8_RECIPE_BLOCK ? FP8_BLOCK : (r == FP8_RECIPE_MX ? FP8_MX_BLOCK : 1);
    const char* names[FP8_BLOCK_LINEARS] = {"qkv", "attproj", "fc", "fcproj"};
    int split[FP8_BLOCK_LINEARS] = {C, C, 4 * C, 4 * C};  // the dimension tp splits (QKV: each of q, k, v)
    for (int k = 0; k < FP8_BLOCK_LINEARS && tp > 1; k++) {
        if (split[k] % tp == 0 && (split[k] / tp) % tile != 0) {
            snprintf(err, cap, "--fp8 %s with --tp %d: linear %s splits %d into %d per rank, expected a multiple of %d "
                     "(the recipe's tile) so that every layout quantizes the same tiles", fp8_recipe_name(r), tp, names[k],
                     split[k], split[k] / tp, tile);
            return 1;
        }
    }
    return 0;
}

// --- the recipes' per-tensor scales ---

// The device scale of per-tensor entry i (layer, linear, tensor) for x (n). Current scaling, and
// delayed scaling before its first step is recorded (an empty history: a cold start would quantize
// with scale 1, and gradients, ~1e-5, would underflow): from x's amax, all-reduced (max) over the tp
// group and the cp group (whose ranks hold parts of the same micro-batch: Transformer Engine's amax
// reduction group includes cp). Delayed scaling after that: the step's scale; x's amax joins the step's record either way.
static const float* fp8_tensor_scale(Fp8State* st, int i, const floatX* x, size_t n, int fmt, const TPGroup* tp,
                                     cudaStream_t s) {
    float* raw = st->amax_tmp;      // x's amax (NaN if x has one)
    float* amax = st->amax_tmp + 1; // the same, NaN as +inf, reduced over tp
    fp8_amax_floatx(raw, x, n, s);
    device_memset_zero(amax, sizeof(float), s);
    fp8_fold_amax(amax, raw, s);
    if (st->cfg.recipe == FP8_RECIPE_DELAYED) fp8_fold_amax(st->amax + i, amax, s);
    if (st->cfg.recipe == FP8_RECIPE_CURRENT || fp8_entry_cold(st, i)) {
        if (tp->size > 1) comm_all_reduce(tp->comm, GROUP_TP, amax, amax, 1, COMM_MAX, s);
        // context parallelism: x holds the rank's tokens of the micro-batch; the scale is the whole one's
        if (tp->comm != NULL && tp->comm->mesh.cp.size > 1) comm_all_reduce(tp->comm, GROUP_CP, amax, amax, 1, COMM_MAX, s);
        fp8_current_update(st->scale + i, amax, fmt, s);
    }
    return st->scale + i;
}

// quantizes tensor `tensor` of linear `slot` (l * 4 + linear) into m: x is (rows, K), or with
// transpose (K, rows) and m gets x^T
static void fp8_operand(Fp8State* st, Fp8Matrix* m, int slot, int tensor, const floatX* x, int rows, int K,
                        int transpose, const TPGroup* tp, cudaStream_t s) {
    if ((size_t)rows * K > st->max_elems) fatal("fp8: operand of %d x %d elements, expected at most %zu", rows, K, st->max_elems);
    fp8_matrix_prepare(m, rows, K, fp8_tensor_format(&st->cfg, tensor), fp8_tensor_scaling(st->cfg.recipe, tensor));
    const float* ts = NULL;
    if (m->scaling == FP8_SCALE_TENSOR) ts = fp8_tensor_scale(st, slot * FP8_TENSORS + tensor, x, (size_t)rows * K, m->fmt, tp, s);
    fp8_matrix_quantize(m, x, transpose, ts, s);
}

// --- the linear layer's GEMMs (llm/model/linear.h calls these in place of matmul_forward / matmul_backward) ---

// y (BT, out) = Q(x) (BT, in) Q(w)^T (out, in) + b; with pre_gelu: pre_gelu gets that, y its GELU
static void fp8_linear_forward(Fp8State* st, int slot, floatX* y, floatX* pre_gelu, const floatX* x, const floatX* w,
                               const floatX* b, int BT, int in, int out, const TPGroup* tp, cudaStream_t s) {
    fp8_operand(st, &st->a, slot, FP8_X, x, BT, in, 0, tp, s);
    fp8_operand(st, &st->b, slot, FP8_W, w, out, in, 0, tp, s);
    matmul_fp8(y, pre_gelu, NULL, &st->a, &st->b, b, 0, s);
}

// matmul_backward's contract with FP8 operands: dx = Q(dy) Q(w^T)^T [* gelu'(dgelu_pre)] (overwritten),
// dw += Q(dy^T) Q(x^T)^T, db += column sums of dy (in floatX, unquantized); each skipped when NULL
static void fp8_linear_backward(Fp8State* st, int slot, floatX* dx, floatX* dw, floatX* db, const floatX* dy,
                                const floatX* x, const floatX* w, float* scratch, const floatX* dgelu_pre, int BT,
                                int in, int out, const TPGroup* tp, cudaStream_t s) {
    if (db != NULL) matmul_backward(NULL, NULL, db, dy, NULL, NULL, scratch, NULL, BT, in, out, s);
    if (dx != NULL) {
        fp8_operand(st, &st->a, slot, FP8_DY, dy, BT, out, 0, tp, s);
        fp8_operand(st, &st->b, slot, FP8_W, w, in, out, 1, tp, s);  // w (out, in) -> w^T (in, out)
        matmul_fp8(dx, NULL, dgelu_pre, &st->a, &st->b, NULL, 0, s);
    }
    if (dw != NULL) {
        fp8_operand(st, &st->a, slot, FP8_DY, dy, out, BT, 1, tp, s);  // dy (BT, out) -> dy^T (out, BT)
        fp8_operand(st, &st->b, slot, FP8_X, x, in, BT, 1, tp, s);     // x (BT, in) -> x^T (in, BT)
        matmul_fp8(dw, NULL, NULL, &st->a, &st->b, NULL, 1, s);
    }
}

// --- delayed scaling's step: scales from the histories before it, the amaxes into them after ---

// the scale of every entry from its history (fp8.cuh's fp8_delayed_scale), to the device
static void fp8_step_begin(Fp8State* st) {
    if (st->cfg.recipe != FP8_RECIPE_DELAYED || st->recorded == 0) return;
    for (int i = 0; i < st->n; i++) {
        Fp8DelayedState d = {st->history + (size_t)i * st->cfg.history, st->cfg.history, st->pos, st->cfg.reduce,
                             st->cfg.margin, st->scale_host[i]};
        st->scale_host[i] = fp8_delayed_scale(&d, fp8_tensor_format(&st->cfg, i % FP8_TENSORS));
    }
    copy_to_device(st->scale, st->scale_host, st->n * sizeof(float));
    fp8_amax_reset(st);  // forwards since (validation) don't count
}

// the step's amaxes, max over every rank (see the top), pushed into the histories; an entry no rank reached
// this step (an expert without rows, an unused slot: FP8_UNSEEN) keeps its history, rotated with the
// position (see the top). skipped: the loss scaler skipped this step for an overflow
// (llm/precision/loss_scale.h, the same on every rank): its amaxes (inf among them) are not recorded.
static void fp8_step_end(Fp8State* st, int skipped = 0) {
    if (st->cfg.recipe != FP8_RECIPE_DELAYED || skipped) return;
    comm_all_reduce(st->comm, GROUP_WORLD, st->amax, st->amax, st->n, COMM_MAX, llm_ctx.stream);
    float* amax = (float*)mallocCheck(st->n * sizeof(float));
    copy_to_host(amax, st->amax, st->n * sizeof(float));
    int H = st->cfg.history;
    for (int i = 0; i < st->n; i++) {
        float* h = st->history + (size_t)i * H;
        if (amax[i] >= 0.0f) { h[st->pos] = amax[i]; continue; }  // (NaN was folded to +inf)
        float last = h[H - 1];  // unseen: the ring one slot on, so that pos + 1 finds the same oldest amax
        memmove(h + 1, h, (size_t)(H - 1) * sizeof(float));
        h[0] = last;
    }
    st->pos = (st->pos + 1) % st->cfg.history;
    st->recorded++;
    free(amax);
}

// --- the resumable state: [pos, recorded, then per entry: scale, history (H, delayed only)], as floats ---
// Delayed scaling's table is the same on every rank (reduced over the world every step). Current
// scaling's last scales (kept when an amax is inf or NaN) live on the ranks that hold the layer: the
// export takes each layer's from its pipeline stage (a max over the pp group of the held entries, the
// others exported as 0), from dp rank 0's view; an expert's from the rank of dp rank 0's ep group that
// runs it (the experts' entries max-reduced over GROUP_EP too, the experts not run exported as 0).

static size_t fp8_state_floats(const Fp8State* st) {
    return st->cfg.recipe == FP8_RECIPE_NONE ? 0 : 2 + (size_t)st->n * (1 + (st->cfg.recipe == FP8_RECIPE_DELAYED ? st->cfg.history : 0));
}

// every rank calls it (a pp collective); out (fp8_state_floats) host
static void fp8_state_export(const Fp8State* st, float* out) {
    if (st->cfg.recipe == FP8_RECIPE_NONE) return;
    int H = st->cfg.recipe == FP8_RECIPE_DELAYED ? st->cfg.history : 0;
    float* scale = (float*)mallocCheck(st->n * sizeof(float));
    copy_to_host(scale, st->scale, st->n * sizeof(float));
    out[0] = (float)st->pos;
    out[1] = (float)st->recorded;
    for (int i = 0; i < st->n; i++) {
        float* e = out + 2 + (size_t)i * (1 + H);
        int ex, l = fp8_entry_layer(st, i, &ex);
        int held = st->held[l] && (ex < 0 || st->held_expert[(size_t)l * st->E + ex]);
        e[0] = H ? st->scale_host[i] : (held ? scale[i] : 0.0f);
        if (H) memcpy(e + 1, st->history + (size_t)i * H, H * sizeof(float));
    }
    free(scale);
    if (H == 0) {  // current: each layer's scales from its stage
        size_t n = fp8_state_floats(st);
        float* d = (float*)device_malloc(n * sizeof(float), MEM_WORKSPACE);
        copy_to_device(d, out, n * sizeof(float));
        comm_all_reduce(st->comm, GROUP_PP, d, d, n, COMM_MAX, llm_ctx.stream);
        size_t dense = 2 + (size_t)st->L * FP8_BLOCK_LINEARS * FP8_TENSORS;  // (H = 0: one float per entry)
        if (st->E > 0 && st->comm != NULL && st->comm->mesh.ep.size > 1) {
            comm_all_reduce(st->comm, GROUP_EP, d + dense, d + dense, n - dense, COMM_MAX, llm_ctx.stream);
        }
        copy_to_host(out, d, n * sizeof(float));
        device_free(d);
    }
}

static void fp8_state_import(Fp8State* st, const float* in /*(fp8_state_floats)*/) {
    if (st->cfg.recipe == FP8_RECIPE_NONE) return;
    int H = st->cfg.recipe == FP8_RECIPE_DELAYED ? st->cfg.history : 0;
    st->pos = (int)in[0];
    st->recorded = (int)in[1];
    for (int i = 0; i < st->n; i++) {
        const float* e = in + 2 + (size_t)i * (1 + H);
        st->scale_host[i] = e[0];
        if (H) memcpy(st->history + (size_t)i * H, e + 1, H * sizeof(float));
    }
    copy_to_device(st->scale, st->scale_host, st->n * sizeof(float));
}

// a resumed run's FP8 state (state file `path`): the file's recipe must be this run's (its histories
// mean nothing to another recipe); a file without FP8 state starts this run's afresh
static void fp8_resume(Fp8State* st, int recipe, const float* state, size_t n, const char* path) {
    if (recipe == 0 && st->cfg.recipe == FP8_RECIPE_NONE) return;
    if (recipe == 0) {
        printf("fp8: %s has no FP8 state: the %s recipe starts afresh\n", path, fp8_recipe_name(st->cfg.recipe));
        return;
    }
    if (recipe != (int)st->cfg.recipe || n != fp8_state_floats(st)) {
        fatal("--resume: state file %s: expected FP8 state of --fp8 %s (%zu floats), found --fp8 %s (%zu floats)", path,
              fp8_recipe_name(st->cfg.recipe), fp8_state_floats(st), recipe >= 0 && recipe <= 4 ? fp8_recipe_name((Fp8Recipe)recipe) : "?", n);
    }
    fp8_state_import(st, state);
}

// the start-up lines: the recipe, the formats, and the path each of the three GEMMs takes in this build
static void fp8_print(const Fp8State* st) {
    const Fp8Config* c = &st->cfg;
    if (c->recipe == FP8_RECIPE_NONE) return;
    printf("fp8: %s scaling", fp8_recipe_name(c->recipe));
    if (c->recipe == FP8_RECIPE_DELAYED) {
        printf(" (amax history %d, %s, margin %d)", c->history, c->reduce == FP8_AMAX_REDUCE_MAX ? "max" : "most recent", c->margin);
    }
    printf(" | x, W: E4M3, dy: %s | QKV, attproj, fc, fcproj%s in FP8; embeddings, LM head, LayerNorms, softmax%s in %s\n",
           c->e4m3_grads ? "E4M3" : "E5M2", st->E > 0 ? ", each expert's fc, fcproj" : "", st->E > 0 ? ", routers" : "",
           PRECISION_MODE);
    // the path of each GEMM on this GPU, as cuBLASLt's heuristic answers for a 1024^3 product (a K that
    // is not a whole number of the recipe's blocks takes the fallback; see llm/precision/matmul_fp8.cuh)
    Fp8Recipe r = c->recipe;
    int e4 = FP8_E4M3, g = fp8_tensor_format(c, FP8_DY), n = 1024;
    char fwd[256], dgrad[256], wgrad[256];
    matmul_fp8_describe(fwd, sizeof(fwd), n, n, n, fp8_tensor_scaling(r, FP8_X), fp8_tensor_scaling(r, FP8_W), e4, e4);
    matmul_fp8_describe(dgrad, sizeof(dgrad), n, n, n, fp8_tensor_scaling(r, FP8_DY), fp8_tensor_scaling(r, FP8_W), g, e4);
    matmul_fp8_describe(wgrad, sizeof(wgrad), n, n, n, fp8_tensor_scaling(r, FP8_DY), fp8_tensor_scaling(r, FP8_X), g, e4);
    printf("fp8 GEMMs: forward %s | dgrad %s | wgrad %s\n", fwd, dgrad, wgrad);
}

static void fp8_free(Fp8State* st) {
    if (st->cfg.recipe != FP8_RECIPE_NONE) {
        device_free(st->amax); device_free(st->scale);
        fp8_matrix_free(&st->a); fp8_matrix_free(&st->b);
    }
    free(st->history); free(st->scale_host); free(st->held); free(st->held_expert);
    memset(st, 0, sizeof(*st));
}
