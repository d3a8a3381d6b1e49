// stage.h: GPT-2 (Radford et al. 2019) as a stage: the part of the model one pipeline rank runs, on one
// micro-batch at a time, forward and backward, with explicit inputs and outputs.
//
//   x[0] = wte[tokens] + wpe[positions]                                (the embedding; first stage)
//   x[l+1] = block_l(x[l])  for the stage's layers [l0, l1)            (llm/model/block.h)
//   logits = LN_f(x[L]) @ wte^T;  loss = cross-entropy(logits, targets) (the head; last stage; the LM
//                                                                        head is tied to wte)
// What a stage holds is its StageRange: the embedding or not, the blocks [l0, l1), the head or not.
// Its input is the token ids (with the embedding) or an activation x[l0] (B,T,C) received from the
// stage before; its output the loss (with the head) or x[l1] for the stage after. In the backward the
// last stage starts from the loss, the others from the gradient of their output, and every stage but
// the first leaves the gradient of its input for the stage before. A single process (and every
// data-parallel rank) is one stage holding all of it. The parameters and gradients of each unit come
// from the data-parallel policy through ParamHooks (llm/model/tensors.h), so this file does not know how
// they are laid out over ranks.
//
// Micro-batches. A stage holds `num_slots` micro-batch slots: everything one micro-batch keeps from
// its forward to its backward (its tokens, its residual stream x[0..L], its blocks' activations, the
// head's LayerNorm and logits). stage_forward(slot) fills a slot, stage_backward(slot) consumes it,
// so a pipeline schedule can keep several micro-batches in flight. Buffers used only inside one call
// (activation gradients, the recompute buffer) are shared by all slots.
//
// The loss stays on the device: each forward with targets adds its micro-batch's mean loss to a
// device accumulator, read back once by stage_take_loss (once per optimizer step, not per micro-batch).
//
// The split backward, for zero-bubble pipeline schedules (Qi et al. 2023, "Zero Bubble Pipeline
// Parallelism", ZB-H1: a stage's backward in two ops, B and W, so that W fills the bubbles). After
// stage_enable_split_backward, stage_backward(slot) may be replaced by
//   stage_backward_input(slot, dx_out)   B: everything stage_backward does (the same dx left in st->dx
//                                        for the previous stage; the LM head's, the final LayerNorm's,
//                                        the embedding's and every block's LayerNorm gradients) except
//                                        the weight and bias gradients of the blocks' four linear layers
//   stage_backward_weight(slot)          W: those, layers l1-1 .. l0, += into the hooks' gradients
// in that order per slot, with any number of other slots' ops in between. B stores per (slot, layer)
// what W needs that would otherwise be gone (llm/model/block.h: the linears' output gradients and the
// inputs the recompute policy does not keep); the slot takes a new forward only after its W. W reads
// no parameter (dW = dout^T inp), so it calls neither params nor params_done: under ZeRO-3 it gathers
// nothing. Hooks: B calls grads_ready for the final unit and the embedding unit as stage_backward does,
// W for each block unit (after that unit's last write; a policy that communicates only in the step's
// last micro-batch, llm/parallel/dp.h's dp_micro_begin, must be told the micro-batch of each B and W it runs,
// and under ZeRO-2/3 a block unit's gradient working buffer lives until its last W). With tensor
// parallelism every rank of the tp group runs the same B and W ops (W's all-gathers of the sequence-
// parallel inputs are tp collectives; B + W move what stage_backward moves). B then W gives
// stage_backward's gradients and dx bit for bit (same kernels, same values; each tensor's accumulation
// over micro-batches in the same order), whatever the recompute policy.
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "units.h"
#include "linear.h"
#include "block.h"
#include "../ops/encoder.cuh"
#include "../ops/layernorm.cuh"
#include "../ops/fused_classifier.cuh"
#include "../sharded/tensor_parallel.h"
#include "../sharded/context_parallel.h"

// what a stage runs: the embedding (first stage), the blocks [first_layer, last_layer), the head (last)
typedef struct {
    int first_layer, last_layer;
    int has_embedding, has_head;
    int embed_later;   // 1: a head without the embedding whose rank runs the embedding too, in another stage (the V
                       // placement, llm/parallel/schedule_list.h): that stage's backward, later, reports the tied
                       // embedding's gradient ready, this one's does not (the unit's gradient is ready once)
} StageRange;

static StageRange stage_range_all(GPTConfig c) {
    StageRange r = {0, c.num_layers, 1, 1};
    return r;
}

typedef struct {
    int* inputs;        // (B,T) device
    int* targets;       // (B,T) device
    int* inputs_host;   // (B,T) the encoder's backward reads the token ids on the host too
    floatX** x;         // (L+1) the residual stream, x[l0..l1] of it held: x[l0] the stage's input (the
                        // embedding's output on the first stage), x[l+1] block l's output, (B,T,C) each
                        // (with sequence parallelism: this tp rank's (B*T/tp, C) block of the tokens)
    BlockActs* blocks;  // (L) blocks [l0, l1) held
    floatX* lnf;        // (B,T,C) (sequence parallelism: (B*T/tp, C))
    float* lnf_mean;    // (B,T)
    float* lnf_rstd;    // (B,T)
    floatX* logits;     // (B,T,Vp/tp) the logits (this tp rank's vocabulary range); a training forward
                        // replaces them by dlogits
    float* losses;      // (B,T)
    int trained;        // 1 after a training forward (dlogits written), until its backward
    void** mem;         // (L + 2) the slot's allocations
    BlockDeferred* deferred;  // (L) split backward: what B keeps for W, blocks [l0, l1) (llm/model/block.h)
    void** deferred_mem;      // (L) their allocations
    int w_pending;      // 1 after stage_backward_input, until stage_backward_weight
    MoEActs* moe;       // (L) the moe layers among [l0, l1): their routing and experts' activations (kept in every
                        // recompute policy, llm/model/block.h); NULL in a dense model
} MicroBatch;

typedef struct {
    GPTConfig cfg;
    const ParamLayout* lay;
    ParamHooks* hooks;      // the parameters and gradients of each unit (the data-parallel policy)
    TPGroup tp;             // the tensor-parallel group the stage's linear layers are split over
    StageRange range;
    Recompute recompute;
    BlockLinears lin;
    BlockLinears* layer_lin; // (L) after stage_enable_fp8: lin per layer, in FP8 with the layer's entries; else NULL
    LinearSpec lm_head;
    int B, T;               // the micro-batch shape (T: the rank's tokens of each sequence, cp_local_T)
    EPGroup ep;             // expert parallelism (llm/sharded/expert_parallel.h; a group of one without it): a moe
                            // model's MoESpec points to it
    MoESeqGroup moe_seq;    // a moe model's tokens split over cp, sp or cp x sp ranks (llm/sharded/moe_sequence.h; 1: none):
                            // its MoESpec points to it
    CPGroup cp;             // context parallelism (llm/sharded/context_parallel.h): the sequence split, the attention's
                            // workspaces; size 1: none
    int num_slots;
    MicroBatch* slots;      // (num_slots)
    BlockActs shared;       // the recompute buffer: one layer's fields the policy does not keep
    void* shared_mem;
    BlockBuffers bufs;
    void* bufs_mem;
    floatX* dx;             // (B,T,C) the residual stream's gradient (sequence parallelism: (B*T/tp, C)); after
                            // stage_backward, that of the input
    float* vp_stats;        // ((tp+1) * 3 * B*T) the vocabulary-parallel cross-entropy's row states (tp > 1)
    void* sp_mem;           // sequence parallelism: the tp group's two (B*T, C) workspace buffers
    double* loss_acc;       // (1) device: the sum of the mean losses of the forwards since stage_take_loss
    size_t layer_act_bytes; // measured: the bytes one layer keeps per micro-batch (x_in and its kept fields)
    MoEBuffers moe_buf;     // a moe model: what its moe layers borrow during one call (workspace)
    double moe_loss[2];     // the aux and z losses (with their coefficients) of the moe layers' training forwards since
                            // stage_take_moe, summed over layers and micro-batches
    long long* moe_counts;  // (L, 2, E) routed and dropped assignments per moe layer and expert, likewise; NULL: dense
    int split_w;            // 1 after stage_enable_split_backward: stage_backward_input / _weight usable
    size_t split_w_bytes;   // measured: the bytes B keeps for W per layer and slot (MEM_ACTIVATIONS), with
                            // b = sizeof(floatX), BT tokens, R = BT/tp with sequence parallelism (else BT):
                            //   b BT (3C/tp + C + 4C/tp + C)      the four output gradients (always)
                            // + b (R C + BT C/tp + R C)           ln1, atty, ln2 (selective, full)
                            // + b BT 4C/tp                        fch_gelu (full)
                            // each field rounded up to 64 bytes (llm/model/block.h's table)
} Stage;

// ----------------------------------------------------------------------------
// construction

// tp: the tensor-parallel group that splits the linear layers (tp_group(NULL, 0): one process), with
// or without sequence parallelism; lay must be the layout of this tp rank's shards. cp: the context-parallel
// group (cp_group; cp_none(T): none) that splits each sequence of T tokens; the stage then holds cp_local_T.
static void stage_init_cp(Stage* st, const ParamLayout* lay, ParamHooks* hooks, TPGroup tp, CPGroup cp, StageRange range,
                          int B, int T, Recompute recompute, int num_slots) {
    memset(st, 0, sizeof(*st));
    GPTConfig c = lay->cfg;
    st->tp = tp;
    st->cp = cp;
    cp_check_sequence(&cp, T);
    T = cp_local_T(&cp);  // from here on the rank's tokens
    tp_check_sequence(&tp, T);
    if (tp.sequence_parallel) {  // the workspace of the all-gathers and reduce-scatters (llm/sharded/tensor_parallel.h)
        size_t n = (size_t)B * T * c.channels;
        st->sp_mem = device_malloc(2 * n * sizeof(floatX), MEM_WORKSPACE);
        st->tp.gathered = (floatX*)st->sp_mem;
        st->tp.full = st->tp.gathered + n;
    }
    tp_check_shards(&st->tp, lay->tp_size, lay->tp_rank);
    if (range.first_layer < 0 || range.last_layer > c.num_layers || range.first_layer > range.last_layer) {
        fatal("stage: layers [%d, %d) are not within the model's %d layers", range.first_layer, range.last_layer, c.num_layers);
    }
    st->range = range;
    st->cfg = c;
    st->lay = lay;
    st->hooks = hooks;
    st->recompute = recompute;
    st->lin = block_linears(c, st->tp);
    st->lin.cp = &st->cp;  // (the stage stays where it was made: pipeline.h's chunks, a caller's variable)
    if (c.num_experts > 0) {  // the experts units hold E/ep experts: the moe layers send tokens to the others' (with ep)
        ep_init(&st->ep, tp.comm, c.num_experts, lay->ep_size);
        st->lin.moe.ep = &st->ep;
        // a micro-batch's tokens split over cp, (sequence parallelism) tp, or both: its routing is the whole micro-batch's
        moe_seq_init(&st->moe_seq, &st->cp, tp.comm, tp.size, tp.rank, tp.sequence_parallel, B);
        st->lin.moe.seq = &st->moe_seq;
    }
    cp_alloc(&st->cp, B, c.channels, st->lin.att_c, st->lin.heads);
    st->lm_head = linear_spec_of("lm_head", c, T_WTE, -1, 0, st->tp);  // tied to wte: split as the table splits wte
    const LinearSpec* specs[5] = {&st->lin.qkv, &st->lin.attproj, &st->lin.fc, &st->lin.fcproj, &st->lm_head};
    for (int i = 0; i < 5; i++) linear_check(specs[i]);
    st->B = B;
    st->T = T;
    st->num_slots = num_slots;
    int L = c.num_layers, l0 = range.first_layer, l1 = range.last_layer;
    size_t BT = (size_t)B * T, C = c.channels, Vl = (size_t)st->lm_head.out_local;
    size_t Ca = (size_t)st->lin.att_c, F = (size_t)st->lin.fc.out_local;
    size_t R = (size_t)tp_rows(&st->tp, (int)BT);  // the tokens of the residual stream on this rank
    unsigned char head = (unsigned char)range.has_head, emb = (unsigned char)range.has_embedding;
    st->slots = (MicroBatch*)mallocCheck((size_t)num_slots * sizeof(MicroBatch));
    for (int s = 0; s < num_slots; s++) {
        MicroBatch* mb = &st->slots[s];
        memset(mb, 0, sizeof(*mb));
        mb->x = (floatX**)mallocCheck((size_t)(L + 1) * sizeof(floatX*));
        memset(mb->x, 0, (size_t)(L + 1) * sizeof(floatX*));
        mb->blocks = (BlockActs*)mallocCheck((size_t)L * sizeof(BlockActs));
        memset(mb->blocks, 0, (size_t)L * sizeof(BlockActs));
        mb->mem = (void**)mallocCheck((size_t)(L + 1) * sizeof(void*));
        memset(mb->mem, 0, (size_t)(L + 1) * sizeof(void*));
        if (c.num_experts > 0) {  // a moe layer's MoEActs (allocated below): marks it before its fields are carved
            mb->moe = (MoEActs*)mallocCheck((size_t)L * sizeof(MoEActs));
            memset(mb->moe, 0, (size_t)L * sizeof(MoEActs));
            for (int l = l0; l < l1; l++) if (layer_is_moe(c, l)) mb->blocks[l].moe = &mb->moe[l];
        }
        for (int l = l0; l < l1; l++) {  // block l's input x[l] and what the policy keeps of its activations
            size_t before = mem_live(MEM_ACTIVATIONS);
            ActField f[BLOCK_ACT_FIELDS + 1];
            block_act_fields(&mb->blocks[l], &st->lin, B, T, f);
            f[BLOCK_ACT_FIELDS] = (ActField){(void**)&mb->x[l], R * C, 0, {1, 1, 1}};
            mb->mem[l] = carve_fields(f, BLOCK_ACT_FIELDS + 1, recompute, 1, MEM_ACTIVATIONS);
            if (s == 0 && l == l0) st->layer_act_bytes = mem_live(MEM_ACTIVATIONS) - before;
        }
        // the stage's output x[l1] (the head's input on the last stage), the head's activations, the
        // tokens (ints: 4 bytes, as floats); a field of count 0 is not allocated
        ActField rest[] = {
            {(void**)&mb->x[l1], R * C, 0, {1, 1, 1}},            {(void**)&mb->lnf, head * R * C, 0, {1, 1, 1}},
            {(void**)&mb->lnf_mean, head * R, 1, {1, 1, 1}},      {(void**)&mb->lnf_rstd, head * R, 1, {1, 1, 1}},
            {(void**)&mb->logits, head * BT * Vl, 0, {1, 1, 1}},  {(void**)&mb->losses, head * BT, 1, {1, 1, 1}},
            {(void**)&mb->inputs, emb * BT, 1, {1, 1, 1}},        {(void**)&mb->targets, head * BT, 1, {1, 1, 1}},
        };
        mb->mem[L] = carve_fields(rest, (int)(sizeof(rest) / sizeof(rest[0])), recompute, 1, MEM_ACTIVATIONS);
        mb->inputs_host = (int*)mallocCheck(BT * sizeof(int));
    }
    // the recompute buffer (the fields the policy does not keep), shared by every layer and slot
    st->shared_mem = block_acts_carve(&st->shared, &st->lin, B, T, recompute, 0, MEM_WORKSPACE);
    for (int s = 0; s < num_slots; s++) {
        for (int l = l0; l < l1; l++) block_acts_share(&st->slots[s].blocks[l], &st->shared, &st->lin, B, T, recompute);
    }
    if (c.num_experts > 0) {  // the moe layers' counts (their activations and workspace: stage_set_moe, which knows the capacity)
        size_t E = (size_t)c.num_experts;
        st->moe_counts = (long long*)mallocCheck((size_t)L * 2 * E * sizeof(long long));
        memset(st->moe_counts, 0, (size_t)L * 2 * E * sizeof(long long));
    }
    size_t scratch_n = BT * C > 1024 * 4 * C ? BT * C : 1024 * 4 * C;
    BlockBuffers* b = &st->bufs;  // (b->moe: set above)
    ActField bufs[] = {
        {(void**)&b->proj, BT * C, 0, {1, 1, 1}},        {(void**)&b->x_scratch, recompute == RECOMPUTE_FULL ? R * C : 0, 0, {1, 1, 1}},
        {(void**)&b->dbuf_c, BT * C, 0, {1, 1, 1}},      {(void**)&b->dbuf_4c, BT * F, 0, {1, 1, 1}},
        {(void**)&b->dqkv, 3 * BT * Ca, 0, {1, 1, 1}},
        {(void**)&st->vp_stats, head * vp_stats_elems(&st->tp, (int)BT), 1, {1, 1, 1}},
        {(void**)&b->scratch, scratch_n, 1, {1, 1, 1}},  {(void**)&st->dx, R * C, 0, {1, 1, 1}},
        {(void**)&st->loss_acc, 2 * sizeof(double) / sizeof(float), 1, {1, 1, 1}},
    };
    st->bufs_mem = carve_fields(bufs, (int)(sizeof(bufs) / sizeof(bufs[0])), recompute, 1, MEM_WORKSPACE);
    device_memset_zero(st->loss_acc, sizeof(double), llm_ctx.stream);
}

// stage_init_cp without context parallelism
static void stage_init(Stage* st, const ParamLayout* lay, ParamHooks* hooks, TPGroup tp, StageRange range, int B, int T,
                       Recompute recompute, int num_slots) {
    stage_init_cp(st, lay, hooks, tp, cp_none(T), range, B, T, recompute, num_slots);
}

// A moe model's layers' activations (every slot) and workspace, sized for the rows the capacity lets through
// (moe_max_rows, moe_max_local_rows: with expert parallelism and a capacity factor F the local experts receive at
// most E x ceil(F K N / E) rows, about F K N, where without one the bound is ep N min(K, E/ep): ep times more).
// Once: by stage_set_moe, or by the first forward with the default flags (no drops).
static void stage_moe_alloc(Stage* st) {
    if (st->cfg.num_experts == 0 || st->moe_buf.mem != NULL) return;
    moe_check(&st->lin.moe);
    int R = tp_rows(&st->tp, st->B * st->T), C = st->cfg.channels;  // the rank's tokens: B T, but with sp
    moe_buffers_alloc(&st->moe_buf, &st->lin.moe, R, C);
    st->bufs.moe = &st->moe_buf;
    for (int s = 0; s < st->num_slots; s++) {
        for (int l = st->range.first_layer; l < st->range.last_layer; l++) {
            if (layer_is_moe(st->cfg, l)) moe_acts_alloc(&st->slots[s].moe[l], &st->lin.moe, R, C);
        }
    }
}

// The moe layers' training flags (--capacity-factor, --aux-loss-coef, --z-loss-coef), before the first forward
// (whose buffers the capacity sizes: stage_moe_alloc)
static void stage_set_moe(Stage* st, float capacity_factor, float aux_coef, float z_coef) {
    if (st->moe_buf.mem != NULL && capacity_factor != st->lin.moe.capacity_factor) {
        fatal("stage_set_moe: the moe buffers were sized for capacity factor %g, found %g", st->lin.moe.capacity_factor,
              capacity_factor);
    }
    st->lin.moe.capacity_factor = capacity_factor;
    st->lin.moe.aux_coef = aux_coef;
    st->lin.moe.z_coef = z_coef;
    stage_moe_alloc(st);
}

// the selection bias (E) FP32 of moe layer l (the aux-loss-free balancing; NULL: none), for every slot
static void stage_set_moe_bias(Stage* st, int l, const float* bias) {
    for (int s = 0; s < st->num_slots; s++) st->slots[s].blocks[l].moe_bias = bias;
}

// the moe layers' aux and z losses (loss[2]) and routed / dropped counts ((L, 2, E), added into counts if not
// NULL) of the training forwards since the last call; then zero
static void stage_take_moe(Stage* st, double loss[2], long long* counts) {
    loss[0] = st->moe_loss[0];
    loss[1] = st->moe_loss[1];
    st->moe_loss[0] = st->moe_loss[1] = 0.0;
    if (st->moe_counts == NULL) return;
    size_t n = (size_t)st->cfg.num_layers * 2 * st->cfg.num_experts;
    if (counts != NULL) for (size_t i = 0; i < n; i++) counts[i] += st->moe_counts[i];
    memset(st->moe_counts, 0, n * sizeof(long long));
}

// The split backward (top of this file): allocates, per slot and block, what stage_backward_input
// keeps for stage_backward_weight (activations: they live from a slot's B to its W), and measures
// split_w_bytes. Once, after stage_init.
static void stage_enable_split_backward(Stage* st) {
    if (st->split_w) fatal("stage_enable_split_backward: called twice on the same stage");
    int L = st->cfg.num_layers, l0 = st->range.first_layer, l1 = st->range.last_layer;
    for (int s = 0; s < st->num_slots; s++) {
        MicroBatch* mb = &st->slots[s];
        mb->deferred = (BlockDeferred*)mallocCheck((size_t)L * sizeof(BlockDeferred));
        memset(mb->deferred, 0, (size_t)L * sizeof(BlockDeferred));
        mb->deferred_mem = (void**)mallocCheck((size_t)L * sizeof(void*));
        memset(mb->deferred_mem, 0, (size_t)L * sizeof(void*));
        for (int l = l0; l < l1; l++) {
            size_t before = mem_live(MEM_ACTIVATIONS);
            mb->deferred_mem[l] = block_deferred_carve(&mb->deferred[l], &mb->blocks[l], &st->lin, st->B, st->T,
                                                       st->recompute, MEM_ACTIVATIONS);
            if (s == 0 && l == l0) st->split_w_bytes = mem_live(MEM_ACTIVATIONS) - before;
        }
    }
    st->split_w = 1;
}

// FP8 linear layers (llm/precision/fp8_linear.h): the four linears of each of this stage's blocks in fp8's
// recipe, each with its layer's entries in fp8's tables. Once, after stage_init.
static void stage_enable_fp8(Stage* st, Fp8State* fp8) {
    if (fp8->cfg.recipe == FP8_RECIPE_NONE) return;
    int L = st->cfg.num_layers;
    if (fp8->L != L || fp8->E != st->cfg.num_experts) {
        fatal("stage_enable_fp8: an FP8 state of %d layers x %d experts for a model of %d x %d", fp8->L, fp8->E, L, st->cfg.num_experts);
    }
    st->layer_lin = (BlockLinears*)mallocCheck((size_t)L * sizeof(BlockLinears));
    for (int l = 0; l < L; l++) {
        BlockLinears* b = &st->layer_lin[l];
        *b = st->lin;
        if (l < st->range.first_layer || l >= st->range.last_layer) continue;
        LinearSpec* specs[FP8_BLOCK_LINEARS] = {&b->qkv, &b->attproj, &b->fc, &b->fcproj};
        for (int k = 0; k < FP8_BLOCK_LINEARS; k++) linear_set_fp8(specs[k], fp8, l * FP8_BLOCK_LINEARS + k);
        fp8->held[l] = 1;
        if (!layer_is_moe(st->cfg, l)) continue;
        b->moe.fp8 = fp8;  // the experts' fc and fcproj: each expert's own entries (llm/model/moe.h)
        b->moe.fp8_layer = l;
        int e0 = moe_first_expert(&b->moe), El = ep_local(b->moe.ep) ? fp8->E : b->moe.ep->El;
        for (int e = 0; e < El; e++) fp8->held_expert[(size_t)l * fp8->E + e0 + e] = 1;
    }
}

// the largest operand an FP8 GEMM of this stage's linears quantizes (fp8_init's workspace)
static size_t stage_fp8_max_operand(const Stage* st) {
    const LinearSpec* specs[4] = {&st->lin.qkv, &st->lin.attproj, &st->lin.fc, &st->lin.fcproj};
    size_t m = 0;
    for (int k = 0; k < 4; k++) {
        size_t e = fp8_max_operand(st->B * st->T, specs[k]->in_local, specs[k]->out_local);
        if (e > m) m = e;
    }
    if (st->cfg.num_experts > 0) {  // an expert's fc and fcproj on at most all the local experts' rows (the capacity's bound)
        size_t e = fp8_max_operand(moe_max_local_rows(&st->lin.moe, st->B * st->T), st->cfg.channels, 4 * st->cfg.channels);
        if (e > m) m = e;
    }
    return m;
}

// the linears of layer l (FP8 ones after stage_enable_fp8)
static const BlockLinears* stage_linears(const Stage* st, int l) {
    return st->layer_lin != NULL ? &st->layer_lin[l] : &st->lin;
}

static void stage_free(Stage* st) {
    for (int s = 0; s < st->num_slots; s++) {
        MicroBatch* mb = &st->slots[s];
        for (int i = 0; i <= st->cfg.num_layers; i++) device_free(mb->mem[i]);
        if (mb->deferred_mem != NULL) {
            for (int i = 0; i < st->cfg.num_layers; i++) device_free(mb->deferred_mem[i]);
        }
        if (mb->moe != NULL) {
            for (int l = 0; l < st->cfg.num_layers; l++) if (mb->moe[l].mem != NULL) moe_acts_free(&mb->moe[l]);
        }
        free(mb->mem); free(mb->x); free(mb->blocks); free(mb->inputs_host); free(mb->deferred); free(mb->deferred_mem);
        free(mb->moe);
    }
    if (st->moe_buf.mem != NULL) moe_buffers_free(&st->moe_buf);
    ep_free(&st->ep);
    moe_seq_free(&st->moe_seq);
    free(st->moe_counts);
    free(st->slots);
    device_free(st->shared_mem);
    device_free(st->bufs_mem);
    device_free(st->sp_mem);
    cp_free(&st->cp);
    free(st->layer_lin);
    memset(st, 0, sizeof(*st));
}

// ----------------------------------------------------------------------------
// one micro-batch

// (stage_forward's) a training forward's moe layer l: its losses and counts into the stage's sums
static void stage_count_moe(Stage* st, int l, const MoEActs* a) {
    int E = st->cfg.num_experts;
    st->moe_loss[0] += a->loss_host[0];
    st->moe_loss[1] += a->loss_host[1];
    long long* cnt = st->moe_counts + (size_t)l * 2 * E;
    for (int e = 0; e < E; e++) {
        cnt[e] += moe_stats_routed(a)[e];
        cnt[E + e] += moe_stats_dropped(a, &st->lin.moe)[e];
    }
}

// The forward of slot `slot`. Its input: the token ids inputs (B,T) (host) on the first stage, else
// x_in (B,T,C) (device), the previous stage's output. On the last stage, with targets (B,T) (host), it
// also computes the per-token losses and adds their mean to the loss accumulator; dloss > 0 means
// training: the classifier then writes dlogits = dloss * d(loss_i)/d(logits) in place of the logits,
// ready for stage_backward (dloss: each token's loss gradient, llm/parallel/pipeline.h's pipeline_dloss).
// With dloss == 0 the logits stay in the slot's logits (B,T,Vp/tp). Other stages leave their output in
// stage_output(). Units are used in the order embed, layer l0 .. l1-1, final, embed again (the LM head).
static void stage_forward(Stage* st, int slot, const int* inputs, const floatX* x_in, const int* targets, float dloss) {
    GPTConfig c = st->cfg;
    StageRange r = st->range;
    int L = c.num_layers, C = c.channels, V = c.vocab_size, B = st->B, T = st->T, BT = B * T, R = tp_rows(&st->tp, BT);
    stage_moe_alloc(st);  // (a moe model's buffers, once: stage_set_moe's flags or the defaults)
    MicroBatch* mb = &st->slots[slot];
    cudaStream_t s = llm_ctx.stream;
    ParamHooks* h = st->hooks;
    if ((inputs != NULL) != (r.has_embedding != 0) || (x_in != NULL) == (r.has_embedding != 0)) {
        fatal("stage_forward: a stage %s the embedding takes %s", r.has_embedding ? "with" : "without",
              r.has_embedding ? "token ids, not an activation" : "an activation, not token ids");
    }
    if (targets != NULL && !r.has_head) fatal("stage_forward: targets given to a stage without the head");
    if (mb->w_pending) fatal("stage_forward: slot %d still holds the split backward's pending W (stage_backward_weight)", slot);
    EmbedTensors emb = {NULL, NULL};  // with the head too: held from the encoder to the LM head
    if (r.has_embedding) {
        inputs = cp_local_tokens(&st->cp, inputs, B);  // (inputs: whole sequences; the rank's tokens of them)
        for (int i = 0; i < BT; i++) {
            if (inputs[i] < 0 || inputs[i] >= V) fatal("token id %d at position %d is outside the vocabulary [0, %d)", inputs[i], i, V);
        }
        copy_to_device(mb->inputs, inputs, BT * sizeof(int));
        memcpy(mb->inputs_host, inputs, BT * sizeof(int));
        emb = embed_view(st->lay, h->params(h->ctx, UNIT_EMBED, 0));
        const floatX* wpe = cp_local_wpe(&st->cp, emb.wpe, s);  // row t: the position of the rank's token t
        vp_embedding_forward(&st->tp, mb->x[r.first_layer], mb->inputs, emb.wte, wpe, c.padded_vocab_size, B, T, C, s);
        if (!r.has_head) h->params_done(h->ctx, UNIT_EMBED, 0);
    } else if (x_in != NULL) {  // (checked above: a stage without the embedding has one)
        copy_device_to_device(mb->x[r.first_layer], x_in, (size_t)R * C * sizeof(floatX), s);
    }
    for (int l = r.first_layer; l < r.last_layer; l++) {  // a moe layer: its layer unit, then its experts unit
        int u = unit_of_layer(c, l), ue = unit_experts_of_layer(c, l);
        LayerTensors w = layer_view(st->lay, l, h->params(h->ctx, u, 0));
        if (ue >= 0) layer_attach_experts(st->lay, &w, h->params(h->ctx, ue, 0));
        BlockActs* a = &mb->blocks[l];
        a->moe_scale = dloss * (float)BT;  // d(step loss)/d(this micro-batch's mean): the aux and z losses' gradient
        block_forward(stage_linears(st, l), c, w, a, &st->bufs, mb->x[l], mb->x[l + 1], B, T, s);
        if (ue >= 0) {
            h->params_done(h->ctx, ue, 0);
            if (dloss > 0.0f) stage_count_moe(st, l, a->moe);
        }
        h->params_done(h->ctx, u, 0);
    }
    mb->trained = 0;
    if (!r.has_head) return;
    FinalTensors fin = final_view(st->lay, h->params(h->ctx, unit_final(c), 0));
    layernorm_forward(mb->lnf, mb->lnf_mean, mb->lnf_rstd, mb->x[L], fin.lnfw, fin.lnfb, R, C, s);
    h->params_done(h->ctx, unit_final(c), 0);
    if (!r.has_embedding) emb = embed_view(st->lay, h->params(h->ctx, UNIT_EMBED, 0));
    linear_forward(&st->lm_head, mb->logits, NULL, mb->lnf, emb.wte, NULL, BT, s);
    h->params_done(h->ctx, UNIT_EMBED, 0);
    if (targets != NULL) {
        targets = cp_local_tokens(&st->cp, targets, B);
        copy_to_device(mb->targets, targets, BT * sizeof(int));
        vp_cross_entropy(&st->tp, mb->logits, mb->losses, dloss, mb->targets, st->vp_stats, BT, V, c.padded_vocab_size,
                         dloss > 0.0f, s);
        loss_accumulate(st->loss_acc, mb->losses, BT, s);
        mb->trained = dloss > 0.0f;
    }
}

// the output of a stage without the head: x[l1] (B,T,C), for the next stage
static const floatX* stage_output(const Stage* st, int slot) { return st->slots[slot].x[st->range.last_layer]; }

// stage_backward (split = 0), or B of the split backward (split = 1: stage_backward_input below)
static void stage_backward_impl(Stage* st, int slot, const floatX* dx_out, int split) {
    GPTConfig c = st->cfg;
    StageRange r = st->range;
    int L = c.num_layers, C = c.channels, B = st->B, T = st->T, BT = B * T, R = tp_rows(&st->tp, BT);
    MicroBatch* mb = &st->slots[slot];
    const char* who = split ? "stage_backward_input" : "stage_backward";
    if ((dx_out != NULL) == (r.has_head != 0)) {
        fatal("%s: a stage %s the head takes %s", who, r.has_head ? "with" : "without",
              r.has_head ? "no output gradient (it starts from its loss)" : "the gradient of its output");
    }
    if (r.has_head && !mb->trained) fatal("%s: slot %d holds no training forward (dloss > 0) to differentiate", who, slot);
    if (split && !st->split_w) fatal("stage_backward_input: the stage has no split backward (stage_enable_split_backward)");
    if (mb->w_pending) fatal("%s: slot %d's previous backward still waits for its W (stage_backward_weight)", who, slot);
    cudaStream_t s = llm_ctx.stream;
    ParamHooks* h = st->hooks;
    BlockBuffers* b = &st->bufs;
    EmbedTensors emb = {NULL, NULL}, gemb = {NULL, NULL};
    if (r.has_head) {
        // the LM head (tied to wte), then the final LayerNorm; the stream's gradient starts there
        emb = embed_view(st->lay, h->params(h->ctx, UNIT_EMBED, 1));  // held to the encoder, if any
        gemb = embed_view(st->lay, h->grads(h->ctx, UNIT_EMBED));
        linear_backward(&st->lm_head, b->dbuf_c, gemb.wte, NULL, mb->logits, mb->lnf, emb.wte, b->scratch, NULL, BT, s);
        device_memset_zero(st->dx, (size_t)R * C * sizeof(floatX), s);
        FinalTensors fin = final_view(st->lay, h->params(h->ctx, unit_final(c), 1));
        FinalTensors gfin = final_view(st->lay, h->grads(h->ctx, unit_final(c)));
        layernorm_backward(st->dx, gfin.lnfw, gfin.lnfb, b->scratch, b->dbuf_c, mb->x[L], fin.lnfw, mb->lnf_mean,
                           mb->lnf_rstd, R, C, s);
        h->params_done(h->ctx, unit_final(c), 1);
        h->grads_ready(h->ctx, unit_final(c));
        if (!r.has_embedding) {
            h->params_done(h->ctx, UNIT_EMBED, 1);
            if (!r.embed_later) h->grads_ready(h->ctx, UNIT_EMBED);
        }
    } else if (dx_out != NULL) {  // (checked above: a stage without the head has one)
        copy_device_to_device(st->dx, dx_out, (size_t)R * C * sizeof(floatX), s);
    }
    for (int l = r.last_layer - 1; l >= r.first_layer; l--) {  // a moe layer: its layer unit, then its experts unit
        int u = unit_of_layer(c, l), ue = unit_experts_of_layer(c, l);
        LayerTensors w = layer_view(st->lay, l, h->params(h->ctx, u, 1));
        if (ue >= 0) layer_attach_experts(st->lay, &w, h->params(h->ctx, ue, 1));
        LayerTensors gw = layer_view(st->lay, l, h->grads(h->ctx, u));
        if (ue >= 0) layer_attach_experts(st->lay, &gw, h->grads(h->ctx, ue));
        block_recompute(st->recompute, stage_linears(st, l), c, w, &mb->blocks[l], b, mb->x[l], B, T, s);
        if (split) {
            block_backward_input(stage_linears(st, l), c, w, gw, &mb->blocks[l], b, mb->x[l], st->dx, &mb->deferred[l], B, T, s);
        } else {
            block_backward(stage_linears(st, l), c, w, gw, &mb->blocks[l], b, mb->x[l], st->dx, B, T, s);
        }
        if (ue >= 0) h->params_done(h->ctx, ue, 1);
        h->params_done(h->ctx, u, 1);
        if (!split) {  // split: the unit's linears are still to come (W), which reports both units
            h->grads_ready(h->ctx, u);
            if (ue >= 0) h->grads_ready(h->ctx, ue);
        }
    }
    if (r.has_embedding) {
        if (!r.has_head) {
            emb = embed_view(st->lay, h->params(h->ctx, UNIT_EMBED, 1));
            gemb = embed_view(st->lay, h->grads(h->ctx, UNIT_EMBED));
        }
        floatX* dwpe = cp_local_dwpe(&st->cp, gemb.wpe, s);  // (rows as cp_local_wpe gave them)
        vp_embedding_backward(&st->tp, gemb.wte, dwpe, b->scratch, st->dx, mb->inputs, mb->inputs_host,
                              c.padded_vocab_size, B, T, C, s);
        cp_local_dwpe_add(&st->cp, gemb.wpe, s);
        h->params_done(h->ctx, UNIT_EMBED, 1);
        h->grads_ready(h->ctx, UNIT_EMBED);
    }
    mb->trained = 0;
    mb->w_pending = split;
}

// Accumulates (+=) the gradients of slot's training forward into the buffers the hooks give. The last
// stage starts from its loss (dx_out NULL), the others from dx_out (B,T,C) (device), the gradient of
// their output. On a stage without the embedding the gradient of its input is left in st->dx (B,T,C)
// for the previous stage. Units in the order: embed (LM head), final, layer l1-1 .. l0, embed
// (encoder); each unit's gradients are final after its own part (grads_ready), the embedding's only
// at the very end of the stage that holds both its uses (wte gets the LM head's gradient first and
// the encoder's last).
static void stage_backward(Stage* st, int slot, const floatX* dx_out) { stage_backward_impl(st, slot, dx_out, 0); }

// B of the split backward (top of this file): stage_backward's arguments and results, but the weight
// and bias gradients of the blocks' linear layers are left to stage_backward_weight, and so is the
// blocks' grads_ready; the embedding's and the final unit's are complete, as after stage_backward.
static void stage_backward_input(Stage* st, int slot, const floatX* dx_out) { stage_backward_impl(st, slot, dx_out, 1); }

// W of the split backward: the weight and bias gradients of slot's blocks' linear layers, layers l1-1
// down to l0, accumulated (+=) into the hooks' gradients, grads_ready after each unit. Reads no
// parameter. After it the slot takes a new forward.
static void stage_backward_weight(Stage* st, int slot) {
    StageRange r = st->range;
    MicroBatch* mb = &st->slots[slot];
    if (!mb->w_pending) fatal("stage_backward_weight: slot %d has no stage_backward_input waiting for its W", slot);
    ParamHooks* h = st->hooks;
    for (int l = r.last_layer - 1; l >= r.first_layer; l--) {
        int u = unit_of_layer(st->cfg, l), ue = unit_experts_of_layer(st->cfg, l);
        LayerTensors gw = layer_view(st->lay, l, h->grads(h->ctx, u));
        block_backward_weight(stage_linears(st, l), gw, &mb->deferred[l], &st->bufs, st->B, st->T, llm_ctx.stream);
        h->grads_ready(h->ctx, u);
        if (ue >= 0) h->grads_ready(h->ctx, ue);  // (its gradients were all written by B: a moe layer's are)
    }
    mb->w_pending = 0;
}

// the sum of the mean losses of the forwards with targets since the last call (one read-back), and
// the accumulator back to zero
static double stage_take_loss(Stage* st) {
    double sum = 0.0;
    copy_to_host(&sum, st->loss_acc, sizeof(double));
    device_memset_zero(st->loss_acc, sizeof(double), llm_ctx.stream);
    return cp_mean_loss(&st->cp, sum);  // (each cp rank's mean is over its tokens: the sequences' is their mean)
}
