// sampler.h: text generation from the model, one token at a time, with a KV cache: each new position
// runs the blocks on that one position, reading the keys and values of the earlier positions from
// the cache instead of recomputing them, so generating n tokens after a prompt of p costs p + n - 1
// single-position forwards (not the (p + n)^2 / 2 positions of rerunning the model on the growing
// sequence). The sampler has its own buffers, so it never touches the training activations.
//
// It decodes the model the stages train: each block through llm/model/block.h's block_decode with the
// linear specs of the stage that runs it (so an --fp8 run samples through its FP8 linears), the
// embedding and the head as llm/model/stage.h runs them. Under pipeline parallelism every rank runs
// its chunks in virtual-stage order and the position's residual stream moves between the stages by
// the pipeline's own messages (a SamplerLink: llm/parallel/pipeline.h's pipeline_sampler_link), as
// the parameters come from the data-parallel policy through ParamHooks: this file knows neither.
//
// The next token is a draw from softmax(logits) (sample_softmax, with a uniform coin from the run's
// RNG; sample_next: at a temperature, among the top k logits) or, greedy, the argmax. Under data
// parallelism every rank generates the same tokens: ranks that gather parameters together (ZeRO-3)
// must run the same forwards, so the sampled token is agreed through the hooks (ParamHooks.agree_token).
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../core/rand.h"
#include "units.h"
#include "linear.h"
#include "block.h"
#include "stage.h"
#include "../ops/layernorm.cuh"
#include "../sharded/tensor_parallel.h"

// index of the largest of the first n logits (the first one on ties)
static int sample_argmax(const float* logits, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (logits[i] > logits[best]) best = i;
    return best;
}

// a draw from softmax(logits[0..n)), coin uniform in [0, 1): the first i with coin < cdf(i)
static int sample_softmax(const float* logits, int n, float coin) {
    float maxv = logits[0];
    for (int i = 1; i < n; i++) maxv = fmaxf(maxv, logits[i]);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += expf(logits[i] - maxv);
    double cdf = 0.0, target = coin * sum;
    for (int i = 0; i < n; i++) {
        cdf += expf(logits[i] - maxv);
        if (target < cdf) return i;
    }
    return n - 1;
}

// The next token from logits[0..n) at a temperature (0: greedy, the argmax) among the top_k largest logits (0:
// all of them): a draw from softmax(logits / temperature) over those k (ties at the k-th value taken in id order,
// so exactly k), the coin uniform in [0, 1). Temperature 1 over every token is sample_softmax itself, the same
// draws as the training's samples. scratch: 2n floats.
static int sample_cmp_desc(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return (x < y) - (x > y);
}
static int sample_next(const float* logits, int n, float temperature, int top_k, float coin, float* scratch) {
    if (temperature <= 0.0f) return sample_argmax(logits, n);
    int all = top_k <= 0 || top_k >= n;
    if (temperature == 1.0f && all) return sample_softmax(logits, n, coin);
    float *kept = scratch, *sorted = scratch + n, thr = -INFINITY;
    int ties = n;  // how many logits equal to the threshold are kept
    if (!all) {
        memcpy(sorted, logits, (size_t)n * sizeof(float));
        qsort(sorted, (size_t)n, sizeof(float), sample_cmp_desc);
        thr = sorted[top_k - 1];  // the k-th largest
        int above = 0;
        for (int i = 0; i < n; i++) above += logits[i] > thr;
        ties = top_k - above;
    }
    for (int i = 0; i < n; i++) {
        int keep = logits[i] > thr || (logits[i] == thr && ties-- > 0);
        kept[i] = keep ? logits[i] / temperature : -INFINITY;
    }
    return sample_softmax(kept, n, coin);
}

// How one position's residual stream passes between pipeline stages: the pipeline's messages on its
// pp group (llm/parallel/pipeline.h: pipeline_sampler_link). ctx == NULL: one stage runs every layer.
typedef struct {
    void* ctx;
    void (*recv_prev)(void* ctx, int chunk, floatX* x, size_t n);        // x from the virtual stage before chunk's
    void (*send_next)(void* ctx, int chunk, const floatX* x, size_t n);  // x to the one after (on this rank: x stays)
    void (*from_last)(void* ctx, float* v, int n);            // v (host) of the last stage, on every stage
} SamplerLink;

typedef struct {
    GPTConfig cfg;
    const ParamLayout* lay;
    ParamHooks* hooks;
    TPGroup tp;          // the tensor-parallel group: each rank caches its NH/tp heads
    int num_chunks;      // the chunks of layers this rank runs, in the order of their virtual stages
    StageRange* ranges;  // (num_chunks)
    BlockLinears* lin;   // (L) layer l's linears as its stage runs them, for one token (held layers only)
    LinearSpec lm_head;
    int* cache_of;       // (L) where layer l's keys and values are in the caches; -1: not held here
    SamplerLink link;
    floatX* kcache;      // (held layers, maxT, C/tp) the keys of the positions run so far
    floatX* vcache;      // (held layers, maxT, C/tp) their values
    BlockDecode blk;     // one position's activations in a block, reused by every layer and the head
    MoEActs moe;         // a moe model: blk's one token through a moe layer
    MoEBuffers moe_buf;
    const float* moe_bias; // (L, E) the moe layers' selection biases (the trainer's), or NULL
    floatX* x;           // (C) the residual stream
    floatX* logits;      // (Vp/tp) this tp rank's vocabulary range
    floatX* logits_all;  // (Vp) tp > 1: every rank's, gathered
    int* token;          // (1) device
    float* logits_host;  // (Vp)
    float temperature;   // the draws' (sample_next): 1 unless set; 0 greedy even with an rng
    int top_k;           // the draws among the top_k largest logits; 0 (unless set): all
    float* scratch;      // (2 Vp) sample_next's
    void* mem;
    long long positions; // single-position forwards run so far (for the tests)
} Sampler;

// Decodes what the num_chunks stages `chunks` train (this rank's chunks of the pipeline, in chunk order; one
// stage holding the whole model without a pipeline): their ranges, parameters (their hooks), tp group
// and linear specs, FP8 ones included (so after stage_enable_fp8). Nothing of the stages is kept but
// the hooks, the layout and the FP8 state the specs point at.
static void sampler_init(Sampler* sp, const Stage* chunks, int num_chunks) {
    memset(sp, 0, sizeof(*sp));
    GPTConfig c = chunks[0].cfg;
    sp->cfg = c;
    sp->lay = chunks[0].lay;
    sp->hooks = chunks[0].hooks;
    sp->tp = chunks[0].tp;  // one token at a time: no sequence to split
    sp->tp.sequence_parallel = 0;
    sp->tp.gathered = sp->tp.full = NULL;
    sp->num_chunks = num_chunks;
    sp->ranges = (StageRange*)mallocCheck((size_t)num_chunks * sizeof(StageRange));
    sp->lin = (BlockLinears*)mallocCheck((size_t)c.num_layers * sizeof(BlockLinears));
    sp->cache_of = (int*)mallocCheck((size_t)c.num_layers * sizeof(int));
    BlockLinears one = block_linears_decode(&chunks[0].lin);  // sizes: every layer's are the same
    int held = 0;
    for (int l = 0; l < c.num_layers; l++) { sp->cache_of[l] = -1; sp->lin[l] = one; }
    for (int k = 0; k < num_chunks; k++) {
        sp->ranges[k] = chunks[k].range;
        for (int l = sp->ranges[k].first_layer; l < sp->ranges[k].last_layer; l++) {
            sp->cache_of[l] = held++;
            sp->lin[l] = block_linears_decode(stage_linears(&chunks[k], l));
        }
    }
    sp->lm_head = linear_spec_decode(chunks[0].lm_head);
    size_t C = c.channels, Ca = (size_t)one.att_c;
    size_t cache = (size_t)held * c.max_seq_len * Ca, Vl = (size_t)sp->lm_head.out_local;
    ActField f[BLOCK_DECODE_FIELDS + 6] = {
        {(void**)&sp->kcache, cache, 0, {1, 1, 1}},    {(void**)&sp->vcache, cache, 0, {1, 1, 1}},
        {(void**)&sp->x, C, 0, {1, 1, 1}},             {(void**)&sp->logits, Vl, 0, {1, 1, 1}},
        {(void**)&sp->logits_all, vp_gather_elems(&sp->tp, c.padded_vocab_size), 0, {1, 1, 1}},
        {(void**)&sp->token, 1, 1, {1, 1, 1}},  // an int: 4 bytes, as a float
    };
    block_decode_fields(&sp->blk, &one, c.max_seq_len, f + 6);
    if (c.num_experts > 0) {
        moe_acts_alloc(&sp->moe, &one.moe, 1, c.channels);
        moe_buffers_alloc(&sp->moe_buf, &one.moe, 1, c.channels);
        sp->blk.moe = &sp->moe;
        sp->blk.moe_buf = &sp->moe_buf;
    }
    sp->mem = carve_fields(f, 6 + BLOCK_DECODE_FIELDS, RECOMPUTE_NONE, 1, MEM_WORKSPACE);
    sp->logits_host = (float*)mallocCheck((size_t)c.padded_vocab_size * sizeof(float));
    sp->scratch = (float*)mallocCheck(2 * (size_t)c.padded_vocab_size * sizeof(float));
    sp->temperature = 1.0f;
    sp->top_k = 0;
}

static void sampler_free(Sampler* sp) {
    free(sp->ranges);
    free(sp->lin);
    free(sp->cache_of);
    device_free(sp->mem);
    if (sp->moe.mem != NULL) { moe_acts_free(&sp->moe); moe_buffers_free(&sp->moe_buf); }
    free(sp->logits_host);
    free(sp->scratch);
    memset(sp, 0, sizeof(*sp));
}

// Runs token at position pos (0-based; positions 0 .. pos-1 must be in the cache) through the model,
// adding its keys and values to the cache. want_logits: also the LM head, into sp->logits_host (Vp).
// With a pipeline every rank runs its chunks in virtual-stage order, receiving the position's
// residual stream (C) from the stage before and sending it to the next; the last stage has the logits.
// The units are used as stage_forward uses them.
static void sampler_forward(Sampler* sp, int token, int pos, int want_logits) {
    GPTConfig c = sp->cfg;
    int C = c.channels, maxT = c.max_seq_len;
    size_t Ca = (size_t)sp->lin[0].att_c;
    cudaStream_t s = llm_ctx.stream;
    ParamHooks* h = sp->hooks;
    if (sp->link.ctx == NULL && (!sp->ranges[0].has_embedding || !sp->ranges[sp->num_chunks - 1].has_head)) {
        fatal("sampler: this rank runs a pipeline stage, but the sampler has no link to the others (pipeline_sampler_link)");
    }
    for (int k = 0; k < sp->num_chunks; k++) {
        StageRange r = sp->ranges[k];
        EmbedTensors emb = {NULL, NULL};
        if (r.has_embedding) {
            copy_to_device(sp->token, &token, sizeof(int));
            emb = embed_view(sp->lay, h->params(h->ctx, UNIT_EMBED, 0));  // held until the LM head
            vp_embedding_forward(&sp->tp, sp->x, sp->token, emb.wte, emb.wpe + (size_t)pos * C, c.padded_vocab_size, 1, 1, C, s);
            if (!r.has_head) h->params_done(h->ctx, UNIT_EMBED, 0);
        } else {
            sp->link.recv_prev(sp->link.ctx, k, sp->x, (size_t)C);
        }
        for (int l = r.first_layer; l < r.last_layer; l++) {
            int u = unit_of_layer(c, l), ue = unit_experts_of_layer(c, l);
            LayerTensors w = layer_view(sp->lay, l, h->params(h->ctx, u, 0));
            if (ue >= 0) layer_attach_experts(sp->lay, &w, h->params(h->ctx, ue, 0));
            size_t at = (size_t)sp->cache_of[l] * maxT * Ca;
            const float* bias = sp->moe_bias != NULL && ue >= 0 ? sp->moe_bias + (size_t)l * c.num_experts : NULL;
            block_decode(&sp->lin[l], c, w, &sp->blk, sp->kcache + at, sp->vcache + at, sp->x, pos, bias, s);
            if (ue >= 0) h->params_done(h->ctx, ue, 0);
            h->params_done(h->ctx, u, 0);
        }
        if (!r.has_head) {
            sp->link.send_next(sp->link.ctx, k, sp->x, (size_t)C);
            continue;
        }
        FinalTensors fin = final_view(sp->lay, h->params(h->ctx, unit_final(c), 0));
        layernorm_forward(sp->blk.ln, sp->blk.mean, sp->blk.rstd, sp->x, fin.lnfw, fin.lnfb, 1, C, s);
        h->params_done(h->ctx, unit_final(c), 0);
        if (!r.has_embedding) emb = embed_view(sp->lay, h->params(h->ctx, UNIT_EMBED, 0));
        if (want_logits) {
            linear_forward(&sp->lm_head, sp->logits, NULL, sp->blk.ln, emb.wte, NULL, 1, s);
            const floatX* all = vp_gather_logits(&sp->tp, sp->logits, sp->logits_all, c.padded_vocab_size, s);
            copy_to_host_float(sp->logits_host, all, (size_t)c.padded_vocab_size);
        }
        h->params_done(h->ctx, UNIT_EMBED, 0);
    }
    sp->positions++;
}

// the token the last pipeline stage chose, on every stage
static int sampler_pp_token(Sampler* sp, int token) {
    if (sp->link.ctx == NULL) return token;
    float f = (float)token;  // exact for token ids < 2^24
    sp->link.from_last(sp->link.ctx, &f, 1);
    return (int)f;
}
// Extends tokens[0..len) by up to max_new tokens (tokens must have room for len + max_new), stopping
// after a token equal to stop_token (-1: never) or at the model's context length. rng == NULL means
// greedy. Returns the new length.
static int sampler_generate(Sampler* sp, int* tokens, int len, int max_new, int stop_token, Rng* rng) {
    GPTConfig c = sp->cfg;
    if (len < 1 || len > c.max_seq_len) fatal("sampler: expected a prompt of 1 to %d tokens, found %d", c.max_seq_len, len);
    for (int i = 0; i < len; i++) {
        if (tokens[i] < 0 || tokens[i] >= c.vocab_size) fatal("sampler: token id %d is outside the vocabulary [0, %d)", tokens[i], c.vocab_size);
    }
    for (int i = 0; i < len - 1; i++) sampler_forward(sp, tokens[i], i, 0);  // the prompt fills the cache
    for (int i = 0; i < max_new && len < c.max_seq_len; i++) {
        sampler_forward(sp, tokens[len - 1], len - 1, 1);
        // (every stage draws the coin, so the generator's state is the same on all of them)
        int next = rng ? sample_next(sp->logits_host, c.vocab_size, sp->temperature, sp->top_k, rng_f32(rng), sp->scratch)
                       : sample_argmax(sp->logits_host, c.vocab_size);
        next = sampler_pp_token(sp, next);
        next = sp->hooks->agree_token(sp->hooks->ctx, next);
        tokens[len++] = next;
        if (next == stop_token) break;
    }
    return len;
}
