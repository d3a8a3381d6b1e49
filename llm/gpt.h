// gpt.h: GPT-2 (Radford et al. 2019) as a stage: the part of the model one pipeline rank runs, on one
// micro-batch at a time, forward and backward, with explicit inputs and outputs.
//
//   x[0] = wte[tokens] + wpe[positions]                                (the embedding; first stage)
//   x[l+1] = block_l(x[l])  for the stage's layers [l0, l1)            (llm/block.h)
//   logits = LN_f(x[L]) @ wte^T;  loss = cross-entropy(logits, targets) (the head; last stage; the LM
//                                                                        head is tied to wte)
// A single process (and every data-parallel rank) is one stage holding all of it: the embedding,
// every block and the head. The parameters and gradients of each unit come from the data-parallel
// policy through ParamHooks (llm/tensors.h), so this file does not know how they are laid out over
// ranks.
//
// Micro-batches. A stage holds `num_slots` micro-batch slots: everything one micro-batch keeps from
// its forward to its backward (its tokens, its residual stream x[0..L], its blocks' activations, the
// head's LayerNorm and logits). stage_forward(slot) fills a slot, stage_backward(slot) consumes it,
// so a pipeline schedule can keep several micro-batches in flight. Buffers used only inside one call
// (activation gradients, the recompute buffer) are shared by all slots.
//
// The loss stays on the device: each forward with targets adds its micro-batch's mean loss to a
// device accumulator, read back once by stage_take_loss (once per optimizer step, not per micro-batch).
#pragma once
#include "common.h"
#include "device.h"
#include "tensors.h"
#include "linear.h"
#include "block.h"
#include "encoder.cuh"
#include "layernorm.cuh"
#include "fused_classifier.cuh"

typedef struct {
    int* inputs;        // (B,T) device
    int* targets;       // (B,T) device
    int* inputs_host;   // (B,T) the encoder's backward reads the token ids on the host too
    floatX** x;         // (L+1) the residual stream: x[0] the embedding's output, x[l+1] block l's, (B,T,C) each
    BlockActs* blocks;  // (L)
    floatX* lnf;        // (B,T,C)
    float* lnf_mean;    // (B,T)
    float* lnf_rstd;    // (B,T)
    floatX* logits;     // (B,T,Vp) the logits; a training forward replaces them by dlogits
    float* losses;      // (B,T)
    int trained;        // 1 after a training forward (dlogits written), until its backward
    void** mem;         // (L + 2) the slot's allocations
} MicroBatch;

typedef struct {
    GPTConfig cfg;
    const ParamLayout* lay;
    ParamHooks* hooks;      // the parameters and gradients of each unit (the data-parallel policy)
    Recompute recompute;
    BlockLinears lin;
    LinearSpec lm_head;
    int B, T;               // the micro-batch shape
    int num_slots;
    MicroBatch* slots;      // (num_slots)
    BlockActs shared;       // the recompute buffer: one layer's fields the policy does not keep
    void* shared_mem;
    BlockBuffers bufs;
    void* bufs_mem;
    floatX* dx;             // (B,T,C) the residual stream's gradient
    double* loss_acc;       // (1) device: the sum of the mean losses of the forwards since stage_take_loss
    size_t layer_act_bytes; // measured: the bytes one layer keeps per micro-batch (x_in and its kept fields)
} Stage;

// ----------------------------------------------------------------------------
// construction

static void stage_init(Stage* st, const ParamLayout* lay, ParamHooks* hooks, int B, int T, Recompute recompute,
                       int num_slots) {
    memset(st, 0, sizeof(*st));
    GPTConfig c = lay->cfg;
    st->cfg = c;
    st->lay = lay;
    st->hooks = hooks;
    st->recompute = recompute;
    st->lin = block_linears(c);
    st->lm_head = linear_spec("lm_head", c.channels, c.padded_vocab_size, 0);
    const LinearSpec* specs[5] = {&st->lin.qkv, &st->lin.attproj, &st->lin.fc, &st->lin.fcproj, &st->lm_head};
    for (int i = 0; i < 5; i++) linear_check(specs[i]);
    st->B = B;
    st->T = T;
    st->num_slots = num_slots;
    int L = c.num_layers;
    size_t BT = (size_t)B * T, C = c.channels, NH = c.num_heads, Vp = c.padded_vocab_size;
    st->slots = (MicroBatch*)mallocCheck((size_t)num_slots * sizeof(MicroBatch));
    for (int s = 0; s < num_slots; s++) {
        MicroBatch* mb = &st->slots[s];
        memset(mb, 0, sizeof(*mb));
        mb->x = (floatX**)mallocCheck((size_t)(L + 1) * sizeof(floatX*));
        mb->blocks = (BlockActs*)mallocCheck((size_t)L * sizeof(BlockActs));
        memset(mb->blocks, 0, (size_t)L * sizeof(BlockActs));
        mb->mem = (void**)mallocCheck((size_t)(L + 2) * sizeof(void*));
        for (int l = 0; l < L; l++) {  // block l's input x[l] and what the policy keeps of its activations
            size_t before = mem_live(MEM_ACTIVATIONS);
            ActField f[BLOCK_ACT_FIELDS + 1];
            block_act_fields(&mb->blocks[l], c, B, T, f);
            f[BLOCK_ACT_FIELDS] = (ActField){(void**)&mb->x[l], BT * C, 0, {1, 1, 1}};
            mb->mem[l] = carve_fields(f, BLOCK_ACT_FIELDS + 1, recompute, 1, MEM_ACTIVATIONS);
            if (s == 0 && l == 0) st->layer_act_bytes = mem_live(MEM_ACTIVATIONS) - before;
        }
        ActField head[] = {
            {(void**)&mb->x[L], BT * C, 0, {1, 1, 1}},  {(void**)&mb->lnf, BT * C, 0, {1, 1, 1}},
            {(void**)&mb->lnf_mean, BT, 1, {1, 1, 1}},  {(void**)&mb->lnf_rstd, BT, 1, {1, 1, 1}},
            {(void**)&mb->logits, BT * Vp, 0, {1, 1, 1}}, {(void**)&mb->losses, BT, 1, {1, 1, 1}},
            {(void**)&mb->inputs, BT, 1, {1, 1, 1}},    {(void**)&mb->targets, BT, 1, {1, 1, 1}},
        };
        mb->mem[L] = carve_fields(head, (int)(sizeof(head) / sizeof(head[0])), recompute, 1, MEM_ACTIVATIONS);
        mb->mem[L + 1] = NULL;
        mb->inputs_host = (int*)mallocCheck(BT * sizeof(int));
    }
    // the recompute buffer (the fields the policy does not keep), shared by every layer and slot
    st->shared_mem = block_acts_carve(&st->shared, c, B, T, recompute, 0, MEM_WORKSPACE);
    for (int s = 0; s < num_slots; s++) {
        for (int l = 0; l < L; l++) block_acts_share(&st->slots[s].blocks[l], &st->shared, c, B, T, recompute);
    }
    size_t scratch_n = BT * C > 1024 * 4 * C ? BT * C : 1024 * 4 * C;
    BlockBuffers* b = &st->bufs;
    ActField bufs[] = {
        {(void**)&b->proj, BT * C, 0, {1, 1, 1}},        {(void**)&b->x_scratch, recompute == RECOMPUTE_FULL ? BT * C : 0, 0, {1, 1, 1}},
        {(void**)&b->dbuf_c, BT * C, 0, {1, 1, 1}},      {(void**)&b->dbuf_4c, 4 * BT * C, 0, {1, 1, 1}},
        {(void**)&b->dqkv, 3 * BT * C, 0, {1, 1, 1}},    {(void**)&b->dqkvr, LLM_HAS_KERNELS ? 3 * BT * C : 0, 0, {1, 1, 1}},
        {(void**)&b->datt, B * NH * T * T, 0, {1, 1, 1}}, {(void**)&b->dscratch, BT * C, 0, {1, 1, 1}},
        {(void**)&b->scratch, scratch_n, 1, {1, 1, 1}},  {(void**)&st->dx, BT * C, 0, {1, 1, 1}},
        {(void**)&st->loss_acc, 2 * sizeof(double) / sizeof(float), 1, {1, 1, 1}},
    };
    st->bufs_mem = carve_fields(bufs, (int)(sizeof(bufs) / sizeof(bufs[0])), recompute, 1, MEM_WORKSPACE);
    device_memset_zero(st->loss_acc, sizeof(double), llm_ctx.stream);
}

static void stage_free(Stage* st) {
    for (int s = 0; s < st->num_slots; s++) {
        MicroBatch* mb = &st->slots[s];
        for (int i = 0; i < st->cfg.num_layers + 2; i++) device_free(mb->mem[i]);
        free(mb->mem); free(mb->x); free(mb->blocks); free(mb->inputs_host);
    }
    free(st->slots);
    device_free(st->shared_mem);
    device_free(st->bufs_mem);
    memset(st, 0, sizeof(*st));
}

// ----------------------------------------------------------------------------
// one micro-batch

// The forward of slot `slot` on inputs (B,T) (host token ids). With targets (B,T) (host) it also
// computes the per-token losses and adds their mean to the loss accumulator; dloss > 0 means
// training: the classifier then writes dlogits = dloss * d(loss_i)/d(logits) in place of the logits,
// ready for stage_backward (dloss = 1 / (B * T * micro-batches per step) for the step's mean loss).
// With dloss == 0 the logits stay in the slot's logits (B,T,Vp).
// Units are used in the order embed, layer 0 .. L-1, final, embed again (the LM head).
static void stage_forward(Stage* st, int slot, const int* inputs, const int* targets, float dloss) {
    GPTConfig c = st->cfg;
    int L = c.num_layers, C = c.channels, V = c.vocab_size, B = st->B, T = st->T, BT = B * T;
    MicroBatch* mb = &st->slots[slot];
    cudaStream_t s = llm_ctx.stream;
    for (int i = 0; i < BT; i++) {
        if (inputs[i] < 0 || inputs[i] >= V) fatal("token id %d at position %d is outside the vocabulary [0, %d)", inputs[i], i, V);
    }
    copy_to_device(mb->inputs, inputs, BT * sizeof(int));
    memcpy(mb->inputs_host, inputs, BT * sizeof(int));
    ParamHooks* h = st->hooks;
    EmbedTensors emb = embed_view(st->lay, h->params(h->ctx, UNIT_EMBED, 0));  // held until the LM head
    encoder_forward(mb->x[0], mb->inputs, emb.wte, emb.wpe, B, T, C, s);
    for (int l = 0; l < L; l++) {
        LayerTensors w = layer_view(st->lay, h->params(h->ctx, unit_of_layer(l), 0));
        block_forward(&st->lin, c, w, &mb->blocks[l], &st->bufs, mb->x[l], mb->x[l + 1], B, T, s);
        h->params_done(h->ctx, unit_of_layer(l), 0);
    }
    FinalTensors fin = final_view(st->lay, h->params(h->ctx, unit_final(c), 0));
    layernorm_forward(mb->lnf, mb->lnf_mean, mb->lnf_rstd, mb->x[L], fin.lnfw, fin.lnfb, BT, C, s);
    h->params_done(h->ctx, unit_final(c), 0);
    linear_forward(&st->lm_head, mb->logits, NULL, mb->lnf, emb.wte, NULL, BT, s);
    h->params_done(h->ctx, UNIT_EMBED, 0);
    mb->trained = 0;
    if (targets != NULL) {
        copy_to_device(mb->targets, targets, BT * sizeof(int));
        fused_classifier(mb->logits, mb->losses, dloss, mb->targets, BT, V, c.padded_vocab_size, dloss > 0.0f, s);
        loss_accumulate(st->loss_acc, mb->losses, BT, s);
        mb->trained = dloss > 0.0f;
    }
}

// Accumulates (+=) the gradients of slot's training forward into the buffers the hooks give. Units
// in the order: embed (LM head), final, layer L-1 .. 0, embed (encoder); each unit's gradients are
// final after its own part (grads_ready), the embedding's only at the very end (wte gets the LM
// head's gradient first and the encoder's last).
static void stage_backward(Stage* st, int slot) {
    GPTConfig c = st->cfg;
    int L = c.num_layers, C = c.channels, B = st->B, T = st->T, BT = B * T;
    MicroBatch* mb = &st->slots[slot];
    if (!mb->trained) fatal("stage_backward: slot %d holds no training forward (dloss > 0) to differentiate", slot);
    cudaStream_t s = llm_ctx.stream;
    ParamHooks* h = st->hooks;
    BlockBuffers* b = &st->bufs;
    // the LM head (tied to wte), then the final LayerNorm; the stream's gradient starts there
    EmbedTensors emb = embed_view(st->lay, h->params(h->ctx, UNIT_EMBED, 1));  // held to the end
    EmbedTensors gemb = embed_view(st->lay, h->grads(h->ctx, UNIT_EMBED));
    linear_backward(&st->lm_head, b->dbuf_c, gemb.wte, NULL, mb->logits, mb->lnf, emb.wte, b->scratch, NULL, BT, s);
    device_memset_zero(st->dx, (size_t)BT * C * sizeof(floatX), s);
    FinalTensors fin = final_view(st->lay, h->params(h->ctx, unit_final(c), 1));
    FinalTensors gfin = final_view(st->lay, h->grads(h->ctx, unit_final(c)));
    layernorm_backward(st->dx, gfin.lnfw, gfin.lnfb, b->scratch, b->dbuf_c, mb->x[L], fin.lnfw, mb->lnf_mean, mb->lnf_rstd,
                       BT, C, s);
    h->params_done(h->ctx, unit_final(c), 1);
    h->grads_ready(h->ctx, unit_final(c));
    for (int l = L - 1; l >= 0; l--) {
        int u = unit_of_layer(l);
        LayerTensors w = layer_view(st->lay, h->params(h->ctx, u, 1));
        LayerTensors gw = layer_view(st->lay, h->grads(h->ctx, u));
        block_recompute(st->recompute, &st->lin, c, w, &mb->blocks[l], b, mb->x[l], B, T, s);
        block_backward(&st->lin, c, w, gw, &mb->blocks[l], b, mb->x[l], st->dx, B, T, s);
        h->params_done(h->ctx, u, 1);
        h->grads_ready(h->ctx, u);
    }
    encoder_backward(gemb.wte, gemb.wpe, b->scratch, st->dx, mb->inputs, mb->inputs_host, B, T, C, s);
    h->params_done(h->ctx, UNIT_EMBED, 1);
    h->grads_ready(h->ctx, UNIT_EMBED);
    mb->trained = 0;
}

// the sum of the mean losses of the forwards with targets since the last call (one read-back), and
// the accumulator back to zero
static double stage_take_loss(Stage* st) {
    double sum = 0.0;
    copy_to_host(&sum, st->loss_acc, sizeof(double));
    device_memset_zero(st->loss_acc, sizeof(double), llm_ctx.stream);
    return sum;
}
