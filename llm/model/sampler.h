// sampler.h: text generation from the model, one token at a time, with a KV cache: each new position
// runs the blocks on that one position, reading the keys and values of the earlier positions from
// the cache instead of recomputing them, so generating n tokens after a prompt of p costs p + n - 1
// single-position forwards (not the (p + n)^2 / 2 positions of rerunning the model on the growing
// sequence). The sampler has its own buffers, so it never touches the training activations.
//
// The next token is a draw from softmax(logits) (sample_softmax, with a uniform coin from the run's
// RNG) or, greedy, the argmax. Under data parallelism every rank generates the same tokens: ranks
// that gather parameters together (ZeRO-3) must run the same forwards, so the sampled token is agreed
// through the hooks (ParamHooks.agree_token).
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../core/rand.h"
#include "tensors.h"
#include "linear.h"
#include "block.h"
#include "stage.h"  // StageRange: which stage holds which layers (the pipeline's decoding)
#include "../ops/encoder.cuh"
#include "../ops/layernorm.cuh"
#include "../ops/attention.cuh"
#include "../ops/residual.cuh"

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

typedef struct {
    GPTConfig cfg;
    const ParamLayout* lay;
    ParamHooks* hooks;
    TPGroup tp;          // the tensor-parallel group: each rank caches its NH/tp heads
    BlockLinears lin;
    LinearSpec lm_head;
    floatX* kcache;      // (L, maxT, C/tp) the keys of the positions run so far
    floatX* vcache;      // (L, maxT, C/tp) their values
    // one position's activations, reused by every layer
    floatX* x;           // (C) the residual stream
    floatX* ln;          // (C)
    float* mean;         // (1)
    float* rstd;         // (1)
    floatX* qkv;         // (3C/tp)
    floatX* atty;        // (C/tp)
    floatX* proj;        // (C)
    floatX* residual2;   // (C)
    floatX* fch;         // (4C/tp)
    floatX* fch_gelu;    // (4C/tp)
    floatX* logits;      // (Vp/tp) this tp rank's vocabulary range
    floatX* logits_all;  // (Vp) tp > 1: every rank's, gathered
    float* scores;       // (NH, maxT) attention probabilities
    int* token;          // (1) device
    float* logits_host;  // (Vp)
    void* mem;
    long long positions; // single-position forwards run so far (for the tests)
    // pipeline parallelism: the chunks of layers this rank runs (virtual stage c P + pp_rank for chunk c),
    // the one position's residual stream passed from stage to stage on the pp group
    Comm* comm;
    int P, pp_rank, V;
    StageRange* ranges;  // (V)
    int* cache_of;       // (L) where layer l's keys and values are in the caches; -1: not held here
    float* tokf;         // (1) device: the sampled token, sent from the last stage
} Sampler;

// comm: the mesh whose tp group splits the layers, as for the stage (NULL: one process); ranges (V):
// the chunks of layers this pipeline rank runs (llm/parallel/pipeline.h; NULL: the whole model, V = 1)
static void sampler_init_pp(Sampler* sp, const ParamLayout* lay, ParamHooks* hooks, Comm* comm, const StageRange* ranges, int V) {
    memset(sp, 0, sizeof(*sp));
    GPTConfig c = lay->cfg;
    sp->comm = comm;
    sp->P = comm ? comm_group_size(comm, GROUP_PP) : 1;
    sp->pp_rank = comm ? comm_group_rank(comm, GROUP_PP) : 0;
    sp->V = ranges ? V : 1;
    sp->ranges = (StageRange*)mallocCheck((size_t)sp->V * sizeof(StageRange));
    for (int k = 0; k < sp->V; k++) sp->ranges[k] = ranges ? ranges[k] : stage_range_all(c);
    sp->cache_of = (int*)mallocCheck((size_t)c.num_layers * sizeof(int));
    int held = 0;
    for (int l = 0; l < c.num_layers; l++) sp->cache_of[l] = -1;
    for (int k = 0; k < sp->V; k++) for (int l = sp->ranges[k].first_layer; l < sp->ranges[k].last_layer; l++) sp->cache_of[l] = held++;
    sp->cfg = c;
    sp->lay = lay;
    sp->hooks = hooks;
    sp->tp = tp_group(comm, 0);  // one token at a time: no sequence to split
    sp->lin = block_linears(c, sp->tp);
    sp->lm_head = linear_spec_tp("lm_head", c.channels, c.padded_vocab_size, 0, LINEAR_COLUMN_PARALLEL, sp->tp);
    size_t C = c.channels, Ca = (size_t)sp->lin.att_c, F = (size_t)sp->lin.fc.out_local;
    size_t cache = (size_t)held * c.max_seq_len * Ca, Vl = (size_t)sp->lm_head.out_local;
    ActField f[] = {
        {(void**)&sp->kcache, cache, 0, {1, 1, 1}},    {(void**)&sp->vcache, cache, 0, {1, 1, 1}},
        {(void**)&sp->x, C, 0, {1, 1, 1}},             {(void**)&sp->ln, C, 0, {1, 1, 1}},
        {(void**)&sp->mean, 1, 1, {1, 1, 1}},          {(void**)&sp->rstd, 1, 1, {1, 1, 1}},
        {(void**)&sp->qkv, 3 * Ca, 0, {1, 1, 1}},      {(void**)&sp->atty, Ca, 0, {1, 1, 1}},
        {(void**)&sp->proj, C, 0, {1, 1, 1}},          {(void**)&sp->residual2, C, 0, {1, 1, 1}},
        {(void**)&sp->fch, F, 0, {1, 1, 1}},           {(void**)&sp->fch_gelu, F, 0, {1, 1, 1}},
        {(void**)&sp->logits, Vl, 0, {1, 1, 1}},
        {(void**)&sp->logits_all, sp->tp.size > 1 ? (size_t)c.padded_vocab_size : 0, 0, {1, 1, 1}},
        {(void**)&sp->scores, (size_t)sp->lin.heads * c.max_seq_len, 1, {1, 1, 1}},
        {(void**)&sp->token, 1, 1, {1, 1, 1}},  // an int: 4 bytes, as a float
        {(void**)&sp->tokf, 1, 1, {1, 1, 1}},
    };
    sp->mem = carve_fields(f, (int)(sizeof(f) / sizeof(f[0])), RECOMPUTE_NONE, 1, MEM_WORKSPACE);
    sp->logits_host = (float*)mallocCheck((size_t)c.padded_vocab_size * sizeof(float));
}

static void sampler_init(Sampler* sp, const ParamLayout* lay, ParamHooks* hooks, Comm* comm) {
    sampler_init_pp(sp, lay, hooks, comm, NULL, 1);
}

static void sampler_free(Sampler* sp) {
    free(sp->ranges);
    free(sp->cache_of);
    device_free(sp->mem);
    free(sp->logits_host);
    memset(sp, 0, sizeof(*sp));
}

// Runs token at position pos (0-based; positions 0 .. pos-1 must be in the cache) through the model,
// adding its keys and values to the cache. want_logits: also the LM head, into sp->logits_host (Vp).
// With a pipeline every rank runs its chunks in virtual-stage order, receiving the position's
// residual stream (C) from the stage before and sending it to the next; the last stage has the logits.
static void sampler_forward(Sampler* sp, int token, int pos, int want_logits) {
    GPTConfig c = sp->cfg;
    int C = c.channels, Ca = sp->lin.att_c, maxT = c.max_seq_len, P = sp->P, S = P * sp->V;
    cudaStream_t s = llm_ctx.stream;
    ParamHooks* h = sp->hooks;
    for (int k = 0; k < sp->V; k++) {
        StageRange r = sp->ranges[k];
        int vs = k * P + sp->pp_rank;
        EmbedTensors emb = {NULL, NULL};
        if (r.has_embedding) {
            copy_to_device(sp->token, &token, sizeof(int));
            emb = embed_view(sp->lay, h->params(h->ctx, UNIT_EMBED, 0));  // held until the LM head
            vp_embedding_forward(&sp->tp, sp->x, sp->token, emb.wte, emb.wpe + (size_t)pos * C, c.padded_vocab_size, 1, 1, C, s);
            if (!r.has_head) h->params_done(h->ctx, UNIT_EMBED, 0);
        } else {
            comm_recv(sp->comm, GROUP_PP, sp->x, (size_t)C, (sp->pp_rank + P - 1) % P, s);
        }
        for (int l = r.first_layer; l < r.last_layer; l++) {
            LayerTensors w = layer_view(sp->lay, h->params(h->ctx, unit_of_layer(l), 0));
            floatX* kc = sp->kcache + (size_t)sp->cache_of[l] * maxT * Ca;
            floatX* vc = sp->vcache + (size_t)sp->cache_of[l] * maxT * Ca;
            layernorm_forward(sp->ln, sp->mean, sp->rstd, sp->x, w.ln1w, w.ln1b, 1, C, s);
            linear_forward(&sp->lin.qkv, sp->qkv, NULL, sp->ln, w.qkvw, w.qkvb, 1, s);
            copy_device_to_device(kc + (size_t)pos * Ca, sp->qkv + Ca, Ca * sizeof(floatX), s);
            copy_device_to_device(vc + (size_t)pos * Ca, sp->qkv + 2 * Ca, Ca * sizeof(floatX), s);
            attention_decode(sp->atty, sp->scores, sp->qkv, kc, vc, pos + 1, maxT, Ca, sp->lin.heads, s);
            linear_forward(&sp->lin.attproj, sp->proj, NULL, sp->atty, w.attprojw, w.attprojb, 1, s);
            fused_residual_layernorm_forward(sp->residual2, sp->ln, sp->mean, sp->rstd, sp->x, sp->proj, w.ln2w, w.ln2b, 1, C, s);
            linear_forward(&sp->lin.fc, sp->fch_gelu, sp->fch, sp->ln, w.fcw, w.fcb, 1, s);
            linear_forward(&sp->lin.fcproj, sp->proj, NULL, sp->fch_gelu, w.fcprojw, w.fcprojb, 1, s);
            residual_forward(sp->x, sp->residual2, sp->proj, C, s);
            h->params_done(h->ctx, unit_of_layer(l), 0);
        }
        if (vs < S - 1) {
            comm_send(sp->comm, GROUP_PP, sp->x, (size_t)C, (sp->pp_rank + 1) % P, s);
            continue;
        }
        FinalTensors fin = final_view(sp->lay, h->params(h->ctx, unit_final(c), 0));
        layernorm_forward(sp->ln, sp->mean, sp->rstd, sp->x, fin.lnfw, fin.lnfb, 1, C, s);
        h->params_done(h->ctx, unit_final(c), 0);
        if (!r.has_embedding) emb = embed_view(sp->lay, h->params(h->ctx, UNIT_EMBED, 0));
        if (want_logits) {
            linear_forward(&sp->lm_head, sp->logits, NULL, sp->ln, emb.wte, NULL, 1, s);
            const floatX* all = sp->logits;
            if (sp->tp.size > 1) {  // one position's logits: gathered (the training loss never gathers them)
                comm_all_gather(sp->tp.comm, GROUP_TP, sp->logits, sp->logits_all, (size_t)sp->lm_head.out_local, s);
                all = sp->logits_all;
            }
            copy_to_host_float(sp->logits_host, all, (size_t)c.padded_vocab_size);
        }
        h->params_done(h->ctx, UNIT_EMBED, 0);
    }
    sp->positions++;
}

// the token the last pipeline stage chose, on every stage (a broadcast on the pp group)
static int sampler_pp_token(Sampler* sp, int token) {
    if (sp->P == 1) return token;
    float f = (float)token;  // exact for token ids < 2^24
    copy_to_device(sp->tokf, &f, sizeof(float));
    comm_broadcast(sp->comm, GROUP_PP, sp->tokf, 1, sp->P - 1, llm_ctx.stream);
    copy_to_host(&f, sp->tokf, sizeof(float));
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
        int next = rng ? sample_softmax(sp->logits_host, c.vocab_size, rng_f32(rng)) : sample_argmax(sp->logits_host, c.vocab_size);
        next = sampler_pp_token(sp, next);
        next = sp->hooks->agree_token(sp->hooks->ctx, next);
        tokens[len++] = next;
        if (next == stop_token) break;
    }
    return len;
}
