// gpt.h: the GPT-2 model (Radford et al. 2019): its config, the 16 parameter tensors in one
// contiguous buffer in llm.c's checkpoint order, the activations, and the forward and backward
// passes written as calls to the op launchers (encoder, layernorm, matmul, attention, classifier).
//
//   x = wte[tokens] + wpe[positions]
//   for each layer:  x = x + attproj(attention(qkv(ln1(x))));  x = x + fcproj(gelu(fc(ln2(x))))
//   logits = ln_f(x) @ wte^T    (the LM head is tied to the token embedding)
//
// The residual adds are fused into the LayerNorm that follows them.
//
// Units. For data parallelism (llm/ddp.h, llm/zero.h) the 16 tensors are grouped in units that are
// communicated as one: unit 0 "embed" (wte, wpe), unit 1+l the 12 tensors of layer l, unit L+1
// "final" (lnfw, lnfb). The forward and backward passes get each unit's parameter and gradient
// pointers through small structs (EmbedTensors, LayerTensors, FinalTensors). Without hooks they are
// slices of the two full buffers (the single-process path); with hooks (GPTHooks, set by zero.h)
// they may be a unit working buffer in the unit's packed layout (its tensors back to back in
// checkpoint order), e.g. parameters all-gathered just in time (ZeRO-3), and the hooks learn when a
// unit's gradients are final, to start their reduction while the backward pass goes on.
#pragma once
#include "common.h"
#include "device.h"
#include "rand.h"
#include "encoder.cuh"
#include "layernorm.cuh"
#include "gelu.cuh"
#include "matmul.cuh"
#include "attention.cuh"
#include "fused_classifier.cuh"

// ----------------------------------------------------------------------------
// config

typedef struct {
    int max_seq_len;        // maxT, e.g. 1024
    int vocab_size;         // V, e.g. 50257
    int padded_vocab_size;  // Vp, V rounded up to a multiple of 128, e.g. 50304
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPTConfig;

static inline int pad_vocab(int V) { return ((V + 127) / 128) * 128; }

// A fresh model's config from a descriptor "dN[,C=..][,NH=..][,maxT=..][,V=..]" (N layers); returns 0
// if s is not a descriptor (then it is a checkpoint path). Errors in a descriptor end the program.
static int gpt_config_from_descriptor(const char* s, GPTConfig* cfg) {
    if (s[0] != 'd' || s[1] < '0' || s[1] > '9') return 0;
    char* end;
    long L = strtol(s + 1, &end, 10);
    if (L <= 0 || L > 1000 || (*end != '\0' && *end != ',')) return 0;
    cfg->num_layers = (int)L;
    // GPT-2's own sizes (124M, 350M, 774M, 1558M); otherwise 64 channels per layer, heads of 64
    if (L == 12) { cfg->channels = 768; cfg->num_heads = 12; }
    else if (L == 24) { cfg->channels = 1024; cfg->num_heads = 16; }
    else if (L == 36) { cfg->channels = 1280; cfg->num_heads = 20; }
    else if (L == 48) { cfg->channels = 1600; cfg->num_heads = 25; }
    else { cfg->channels = 64 * (int)L; cfg->num_heads = (int)L; }
    cfg->max_seq_len = 1024;
    cfg->vocab_size = 50257;
    while (*end == ',') {
        const char* key = end + 1;
        const char* eq = strchr(key, '=');
        if (eq == NULL) fatal("--model: in '%s' expected key=value after ',', found '%s'", s, key);
        long v = strtol(eq + 1, &end, 10);
        if (v <= 0 || (*end != '\0' && *end != ',')) fatal("--model: in '%s' expected a positive integer for '%.*s'", s, (int)(eq - key), key);
        size_t klen = (size_t)(eq - key);
        if (klen == 1 && !strncmp(key, "C", 1)) cfg->channels = (int)v;
        else if (klen == 2 && !strncmp(key, "NH", 2)) cfg->num_heads = (int)v;
        else if (klen == 4 && !strncmp(key, "maxT", 4)) cfg->max_seq_len = (int)v;
        else if (klen == 1 && !strncmp(key, "V", 1)) cfg->vocab_size = (int)v;
        else fatal("--model: in '%s' expected one of the keys C, NH, maxT, V, found '%.*s'", s, (int)klen, key);
    }
    if (cfg->channels % cfg->num_heads != 0) {
        fatal("--model: '%s': expected C divisible by NH, found C=%d NH=%d", s, cfg->channels, cfg->num_heads);
    }
    cfg->padded_vocab_size = pad_vocab(cfg->vocab_size);
    return 1;
}

// ----------------------------------------------------------------------------
// parameters: 16 tensors, back to back, in llm.c's checkpoint order

#define NUM_PARAMETER_TENSORS 16
typedef struct {
    floatX* wte;       // (Vp, C)
    floatX* wpe;       // (maxT, C)
    floatX* ln1w;      // (L, C)
    floatX* ln1b;      // (L, C)
    floatX* qkvw;      // (L, 3*C, C)
    floatX* qkvb;      // (L, 3*C)
    floatX* attprojw;  // (L, C, C)
    floatX* attprojb;  // (L, C)
    floatX* ln2w;      // (L, C)
    floatX* ln2b;      // (L, C)
    floatX* fcw;       // (L, 4*C, C)
    floatX* fcb;       // (L, 4*C)
    floatX* fcprojw;   // (L, C, 4*C)
    floatX* fcprojb;   // (L, C)
    floatX* lnfw;      // (C)
    floatX* lnfb;      // (C)
} ParameterTensors;

static const char* const PARAMETER_NAMES[NUM_PARAMETER_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

static void fill_in_parameter_sizes(size_t* sizes, GPTConfig cfg) {
    size_t Vp = cfg.padded_vocab_size, C = cfg.channels, maxT = cfg.max_seq_len, L = cfg.num_layers;
    sizes[0] = Vp * C;           // wte
    sizes[1] = maxT * C;         // wpe
    sizes[2] = L * C;            // ln1w
    sizes[3] = L * C;            // ln1b
    sizes[4] = L * (3 * C) * C;  // qkvw
    sizes[5] = L * (3 * C);      // qkvb
    sizes[6] = L * C * C;        // attprojw
    sizes[7] = L * C;            // attprojb
    sizes[8] = L * C;            // ln2w
    sizes[9] = L * C;            // ln2b
    sizes[10] = L * (4 * C) * C; // fcw
    sizes[11] = L * (4 * C);     // fcb
    sizes[12] = L * C * (4 * C); // fcprojw
    sizes[13] = L * C;           // fcprojb
    sizes[14] = C;               // lnfw
    sizes[15] = C;               // lnfb
}

// weight decay applies to the 2-D tensors (embeddings and matmul weights), not to biases and norms
static inline int parameter_is_decayed(int i) {
    return i == 0 || i == 1 || i == 4 || i == 6 || i == 10 || i == 12;
}

static void point_parameters(ParameterTensors* p, floatX* memory, const size_t* sizes) {
    floatX** ptrs[NUM_PARAMETER_TENSORS] = {
        &p->wte, &p->wpe, &p->ln1w, &p->ln1b, &p->qkvw, &p->qkvb, &p->attprojw, &p->attprojb,
        &p->ln2w, &p->ln2b, &p->fcw, &p->fcb, &p->fcprojw, &p->fcprojb, &p->lnfw, &p->lnfb};
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        *ptrs[i] = memory;
        memory += sizes[i];
    }
}

// ----------------------------------------------------------------------------
// units: the tensors of one layer, of the embedding, of the final LayerNorm

#define UNIT_EMBED 0                                             // wte, wpe
static inline int unit_of_layer(int l) { return 1 + l; }         // the 12 tensors of layer l
static inline int unit_final(GPTConfig c) { return c.num_layers + 1; }  // lnfw, lnfb
static inline int num_units(GPTConfig c) { return c.num_layers + 2; }

typedef struct {
    floatX* ln1w;      // (C)
    floatX* ln1b;      // (C)
    floatX* qkvw;      // (3*C, C)
    floatX* qkvb;      // (3*C)
    floatX* attprojw;  // (C, C)
    floatX* attprojb;  // (C)
    floatX* ln2w;      // (C)
    floatX* ln2b;      // (C)
    floatX* fcw;       // (4*C, C)
    floatX* fcb;       // (4*C)
    floatX* fcprojw;   // (C, 4*C)
    floatX* fcprojb;   // (C)
} LayerTensors;

typedef struct {
    floatX* wte;  // (Vp, C)
    floatX* wpe;  // (maxT, C)
} EmbedTensors;

typedef struct {
    floatX* lnfw;  // (C)
    floatX* lnfb;  // (C)
} FinalTensors;

// layer l's slices of a full (checkpoint-order) buffer's tensors
static LayerTensors layer_slices(const ParameterTensors* t, GPTConfig cfg, int l) {
    size_t C = cfg.channels;
    LayerTensors w;
    w.ln1w = t->ln1w + l * C;                 w.ln1b = t->ln1b + l * C;
    w.qkvw = t->qkvw + l * 3 * C * C;         w.qkvb = t->qkvb + l * 3 * C;
    w.attprojw = t->attprojw + l * C * C;     w.attprojb = t->attprojb + l * C;
    w.ln2w = t->ln2w + l * C;                 w.ln2b = t->ln2b + l * C;
    w.fcw = t->fcw + l * 4 * C * C;           w.fcb = t->fcb + l * 4 * C;
    w.fcprojw = t->fcprojw + l * 4 * C * C;   w.fcprojb = t->fcprojb + l * C;
    return w;
}

// a layer unit's packed layout: its 12 tensors back to back in checkpoint order (12 C^2 + 13 C values)
static LayerTensors layer_packed(floatX* base, GPTConfig cfg) {
    size_t C = cfg.channels;
    LayerTensors w;
    w.ln1w = base;                 w.ln1b = w.ln1w + C;
    w.qkvw = w.ln1b + C;           w.qkvb = w.qkvw + 3 * C * C;
    w.attprojw = w.qkvb + 3 * C;   w.attprojb = w.attprojw + C * C;
    w.ln2w = w.attprojb + C;       w.ln2b = w.ln2w + C;
    w.fcw = w.ln2b + C;            w.fcb = w.fcw + 4 * C * C;
    w.fcprojw = w.fcb + 4 * C;     w.fcprojb = w.fcprojw + 4 * C * C;
    return w;
}

// the embedding and final units: packed, their tensors are back to back in checkpoint order already
static EmbedTensors embed_packed(floatX* base, GPTConfig cfg) {
    EmbedTensors e = {base, base + (size_t)cfg.padded_vocab_size * cfg.channels};
    return e;
}
static FinalTensors final_packed(floatX* base, GPTConfig cfg) {
    FinalTensors f = {base, base + cfg.channels};
    return f;
}

// Hooks through which a data-parallel scheme (llm/zero.h) takes part in the forward and backward
// passes. Any callback may be NULL: then the unit's tensors are slices of the full buffers.
//   params_acquire  the unit's parameters in its packed layout, ready to read, for the forward
//                   (pass 0) or the backward (pass 1); params_release when the pass is done with them
//   grads_acquire   where the backward accumulates (+=) the unit's gradients, packed layout
//   grads_ready     the unit's gradients of this backward are complete (its last write was enqueued)
//   agree_token     the sampler's next token, made the same on every rank (ZeRO-3 ranks must run the
//                   same forwards)
typedef struct {
    void* ctx;
    floatX* (*params_acquire)(void* ctx, int unit, int pass);
    void (*params_release)(void* ctx, int unit, int pass);
    floatX* (*grads_acquire)(void* ctx, int unit);
    void (*grads_ready)(void* ctx, int unit);
    int (*agree_token)(void* ctx, int token);
} GPTHooks;

// ----------------------------------------------------------------------------
// activations of the forward pass, kept for the backward (sizes for a B x T batch)

typedef struct {
    floatX* encoded;    // (B, T, C)
    floatX* ln1;        // (L, B, T, C)
    float* ln1_mean;    // (L, B, T)
    float* ln1_rstd;    // (L, B, T)
    floatX* qkv;        // (L, B, T, 3*C)
    floatX* qkvr;       // (L, B, T, 3*C)  q, k, v permuted to (B, NH, T, hs) by the CUDA path
    floatX* att;        // (L, B, NH, T, T)
    floatX* atty;       // (L, B, T, C)
    floatX* attproj;    // (L, B, T, C)
    floatX* residual2;  // (L, B, T, C)
    floatX* ln2;        // (L, B, T, C)
    float* ln2_mean;    // (L, B, T)
    float* ln2_rstd;    // (L, B, T)
    floatX* fch;        // (L, B, T, 4*C)  before GELU
    floatX* fch_gelu;   // (L, B, T, 4*C)
    floatX* fcproj;     // (L, B, T, C)
    floatX* residual3;  // (L, B, T, C)
    floatX* lnf;        // (B, T, C)
    float* lnf_mean;    // (B, T)
    float* lnf_rstd;    // (B, T)
    float* losses;      // (B, T)
    floatX* output;     // (B, T, Vp)  logits, replaced by dlogits when training
} ActivationTensors;

// buffers of the backward pass, reused by every layer
typedef struct {
    floatX* dresidual;  // (B, T, C)  gradient of the residual stream
    floatX* dbuf_c;     // (B, T, C)
    floatX* dbuf_4c;    // (B, T, 4*C)
    floatX* dqkv;       // (B, T, 3*C)
    floatX* dqkvr;      // (B, T, 3*C)
    floatX* datt;       // (B, NH, T, T)
    floatX* dscratch;   // (B, T, C)  also the attention forward's scratch
    float* scratch;     // (max(B*T*C, 1024*4*C)) FP32 scratch of the reductions (one op at a time)
} BackwardBuffers;

typedef struct {
    GPTConfig config;
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    size_t num_parameters;
    ParameterTensors params;
    floatX* params_memory;  // (num_parameters), or NULL when the hooks supply every unit (ZeRO-3)
    ParameterTensors grads;
    floatX* grads_memory;   // (num_parameters), or NULL when the hooks supply every unit
    ActivationTensors acts;
    void* acts_memory;
    BackwardBuffers bufs;
    void* bufs_memory;
    size_t acts_bytes;       // bytes of acts_memory + bufs_memory + the token buffers
    GPTHooks* hooks;         // NULL: the single-process path (slices of the full buffers)
    int B, T;                // the largest batch the activations were allocated for
    int last_B, last_T;      // the batch of the last forward, which gpt_backward differentiates
    int* inputs;             // (B, T) device
    int* targets;            // (B, T) device
    int* inputs_host;        // (B, T)
    float* losses_host;      // (B, T)
    float mean_loss;         // of the last forward with targets, -1 if none
    cudaStream_t stream;
} GPT;

// ----------------------------------------------------------------------------
// construction

// The model for cfg. with_params / with_grads = 0 leaves that full buffer out (NULL): the hooks
// (llm/zero.h) then supply every unit's tensors. Contents are undefined until initialised or loaded.
static void gpt_allocate_ex(GPT* model, GPTConfig cfg, int with_params, int with_grads) {
    memset(model, 0, sizeof(*model));
    model->config = cfg;
    fill_in_parameter_sizes(model->param_sizes, cfg);
    model->num_parameters = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) model->num_parameters += model->param_sizes[i];
    if (with_params) {
        model->params_memory = (floatX*)device_malloc(model->num_parameters * sizeof(floatX));
        point_parameters(&model->params, model->params_memory, model->param_sizes);
    }
    if (with_grads) {
        model->grads_memory = (floatX*)device_malloc(model->num_parameters * sizeof(floatX));
        point_parameters(&model->grads, model->grads_memory, model->param_sizes);
    }
    model->mean_loss = -1.0f;
#if LLM_HAS_KERNELS
    cudaCheck(cudaStreamCreate(&model->stream));
#else
    model->stream = NULL;
#endif
    matmul_init(model->stream);
}

// allocate parameters and gradients for cfg (the single-process model)
static void gpt_allocate(GPT* model, GPTConfig cfg) { gpt_allocate_ex(model, cfg, 1, 1); }

// copy FP32 host parameters (num_parameters, checkpoint order) into the model
static void gpt_set_parameters(GPT* model, const float* params_host) {
    size_t n = model->num_parameters;
    if (model->params_memory == NULL) fatal("gpt_set_parameters: this model keeps no full parameter buffer (ZeRO-3)");
    copy_floats_to_device(model->params_memory, params_host, n);
}

// the model's parameters as FP32 on the host (num_parameters)
static void gpt_get_parameters(const GPT* model, float* params_host) {
    size_t n = model->num_parameters;
    if (model->params_memory == NULL) fatal("gpt_get_parameters: this model keeps no full parameter buffer (ZeRO-3)");
    copy_to_host_float(params_host, model->params_memory, n);
}

// GPT-2 initialisation: weights N(0, 0.02), the residual projections (attprojw, fcprojw) scaled by
// 1/sqrt(2L) (GPT-2 paper, section 2.3), biases 0, LayerNorm weights 1; padded wte rows 0.
// Written to params_host (num_parameters, checkpoint order) only.
static void gpt_random_parameters(GPTConfig c, uint64_t seed, float* params_host /*(num_parameters) out*/) {
    size_t sizes[NUM_PARAMETER_TENSORS];
    fill_in_parameter_sizes(sizes, c);
    Rng rng;
    rng_init(&rng, seed);
    float residual_scale = 1.0f / sqrtf(2.0f * c.num_layers);
    float* p = params_host;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t n = sizes[i];
        if (i == 2 || i == 8 || i == 14) {  // ln1w, ln2w, lnfw
            for (size_t j = 0; j < n; j++) p[j] = 1.0f;
        } else if (i == 0 || i == 1 || i == 4 || i == 10) {  // wte, wpe, qkvw, fcw
            rng_normal(&rng, p, n, 0.0f, 0.02f);
        } else if (i == 6 || i == 12) {  // attprojw, fcprojw
            rng_normal(&rng, p, n, 0.0f, 0.02f * residual_scale);
        } else {  // biases
            memset(p, 0, n * sizeof(float));
        }
        if (i == 0) {  // the padded vocabulary rows stay zero
            size_t first_pad = (size_t)c.vocab_size * c.channels;
            memset(p + first_pad, 0, (n - first_pad) * sizeof(float));
        }
        p += n;
    }
}

// the same initialisation, into the model's parameters too
static void gpt_init_random(GPT* model, uint64_t seed, float* params_host /*(num_parameters) out*/) {
    gpt_random_parameters(model->config, seed, params_host);
    gpt_set_parameters(model, params_host);
}

static void gpt_free_activations(GPT* model) {
    device_free(model->acts_memory);
    device_free(model->bufs_memory);
    device_free(model->inputs);
    device_free(model->targets);
    free(model->inputs_host);
    free(model->losses_host);
}

// one device block for a list of tensors, each starting on a 64-byte boundary (128-bit loads, cache
// lines); points every tensor into it and returns the block (its size in *bytes)
typedef struct { void** ptr; size_t n; int f32; } TensorSpec;
static void* carve_tensors(TensorSpec* specs, size_t count, size_t* bytes) {
    size_t total = 0;
    for (size_t i = 0; i < count; i++) total += ceil_div_sz(specs[i].n * (specs[i].f32 ? sizeof(float) : sizeof(floatX)), 64) * 64;
    char* mem = (char*)device_malloc(total);
    char* p = mem;
    for (size_t i = 0; i < count; i++) {
        *specs[i].ptr = p;
        p += ceil_div_sz(specs[i].n * (specs[i].f32 ? sizeof(float) : sizeof(floatX)), 64) * 64;
    }
    *bytes = total;
    return mem;
}

// activation and backward buffers for batches up to B x T (reallocated when a larger one comes)
static void gpt_allocate_activations(GPT* model, int B, int T) {
    if (model->acts_memory != NULL && B * T <= model->B * model->T && T <= model->T) return;
    gpt_free_activations(model);
    GPTConfig c = model->config;
    size_t L = c.num_layers, NH = c.num_heads, C = c.channels, Vp = c.padded_vocab_size;
    size_t BT = (size_t)B * T;
    // (pointer, count, is_float32) for every activation, allocated from one block
    ActivationTensors* a = &model->acts;
    TensorSpec acts[] = {
        {(void**)&a->encoded, BT * C, 0},        {(void**)&a->ln1, L * BT * C, 0},
        {(void**)&a->ln1_mean, L * BT, 1},       {(void**)&a->ln1_rstd, L * BT, 1},
        {(void**)&a->qkv, L * BT * 3 * C, 0},    {(void**)&a->qkvr, L * BT * 3 * C, 0},
        {(void**)&a->att, L * B * NH * T * T, 0}, {(void**)&a->atty, L * BT * C, 0},
        {(void**)&a->attproj, L * BT * C, 0},    {(void**)&a->residual2, L * BT * C, 0},
        {(void**)&a->ln2, L * BT * C, 0},        {(void**)&a->ln2_mean, L * BT, 1},
        {(void**)&a->ln2_rstd, L * BT, 1},       {(void**)&a->fch, L * BT * 4 * C, 0},
        {(void**)&a->fch_gelu, L * BT * 4 * C, 0}, {(void**)&a->fcproj, L * BT * C, 0},
        {(void**)&a->residual3, L * BT * C, 0},  {(void**)&a->lnf, BT * C, 0},
        {(void**)&a->lnf_mean, BT, 1},           {(void**)&a->lnf_rstd, BT, 1},
        {(void**)&a->losses, BT, 1},             {(void**)&a->output, BT * Vp, 0},
    };
    BackwardBuffers* g = &model->bufs;
    size_t scratch_n = BT * C > 1024 * 4 * C ? BT * C : 1024 * 4 * C;
    TensorSpec bufs[] = {
        {(void**)&g->dresidual, BT * C, 0}, {(void**)&g->dbuf_c, BT * C, 0},
        {(void**)&g->dbuf_4c, BT * 4 * C, 0}, {(void**)&g->dqkv, BT * 3 * C, 0},
        {(void**)&g->dqkvr, BT * 3 * C, 0}, {(void**)&g->datt, B * NH * T * T, 0},
        {(void**)&g->dscratch, BT * C, 0},  {(void**)&g->scratch, scratch_n, 1},
    };
    size_t acts_bytes, bufs_bytes;
    model->acts_memory = carve_tensors(acts, sizeof(acts) / sizeof(acts[0]), &acts_bytes);
    model->bufs_memory = carve_tensors(bufs, sizeof(bufs) / sizeof(bufs[0]), &bufs_bytes);
    model->acts_bytes = acts_bytes + bufs_bytes + 2 * BT * sizeof(int);  // + the token buffers
    model->inputs = (int*)device_malloc(BT * sizeof(int));
    model->targets = (int*)device_malloc(BT * sizeof(int));
    model->inputs_host = (int*)mallocCheck(BT * sizeof(int));
    model->losses_host = (float*)mallocCheck(BT * sizeof(float));
    model->B = B;
    model->T = T;
}

static void gpt_free(GPT* model) {
    matmul_free();
    device_free(model->params_memory);
    device_free(model->grads_memory);
    gpt_free_activations(model);
#if LLM_HAS_KERNELS
    cudaCheck(cudaStreamDestroy(model->stream));
#endif
}

// ----------------------------------------------------------------------------
// forward and backward

// The tensors of a unit, through the hooks when there are any (see GPTHooks). pass: 0 forward,
// 1 backward. Every acquire of parameters is matched by a release when the pass is done with them.
static LayerTensors gpt_layer_params(GPT* m, int l, int pass) {
    if (m->hooks && m->hooks->params_acquire) return layer_packed(m->hooks->params_acquire(m->hooks->ctx, unit_of_layer(l), pass), m->config);
    return layer_slices(&m->params, m->config, l);
}
static EmbedTensors gpt_embed_params(GPT* m, int pass) {
    if (m->hooks && m->hooks->params_acquire) return embed_packed(m->hooks->params_acquire(m->hooks->ctx, UNIT_EMBED, pass), m->config);
    EmbedTensors e = {m->params.wte, m->params.wpe};
    return e;
}
static FinalTensors gpt_final_params(GPT* m, int pass) {
    if (m->hooks && m->hooks->params_acquire) return final_packed(m->hooks->params_acquire(m->hooks->ctx, unit_final(m->config), pass), m->config);
    FinalTensors f = {m->params.lnfw, m->params.lnfb};
    return f;
}
static void gpt_params_release(GPT* m, int unit, int pass) {
    if (m->hooks && m->hooks->params_release) m->hooks->params_release(m->hooks->ctx, unit, pass);
}
static LayerTensors gpt_layer_grads(GPT* m, int l) {
    if (m->hooks && m->hooks->grads_acquire) return layer_packed(m->hooks->grads_acquire(m->hooks->ctx, unit_of_layer(l)), m->config);
    return layer_slices(&m->grads, m->config, l);
}
static EmbedTensors gpt_embed_grads(GPT* m) {
    if (m->hooks && m->hooks->grads_acquire) return embed_packed(m->hooks->grads_acquire(m->hooks->ctx, UNIT_EMBED), m->config);
    EmbedTensors e = {m->grads.wte, m->grads.wpe};
    return e;
}
static FinalTensors gpt_final_grads(GPT* m) {
    if (m->hooks && m->hooks->grads_acquire) return final_packed(m->hooks->grads_acquire(m->hooks->ctx, unit_final(m->config)), m->config);
    FinalTensors f = {m->grads.lnfw, m->grads.lnfb};
    return f;
}
static void gpt_grads_ready(GPT* m, int unit) {
    if (m->hooks && m->hooks->grads_ready) m->hooks->grads_ready(m->hooks->ctx, unit);
}

// Runs the model on inputs (B, T) (host token ids). With targets (B, T) (host) it also computes the
// per-token losses and model->mean_loss. dloss > 0 means training: the classifier then writes
// dlogits = dloss * d(loss_i)/d(logits) in place of the logits, ready for gpt_backward
// (dloss = 1 / (B * T * grad_accum_steps) for a mean over the whole optimizer step).
// With dloss == 0 the logits stay in acts.output (B, T, Vp).
// Units are used in the order embed, layer 0 .. L-1, final, embed again (the LM head).
static void gpt_forward(GPT* model, const int* inputs, const int* targets, int B, int T, float dloss) {
    GPTConfig c = model->config;
    int L = c.num_layers, NH = c.num_heads, C = c.channels, V = c.vocab_size, Vp = c.padded_vocab_size;
    if (T > c.max_seq_len) {
        fatal("--seq-len: T = %d is larger than the model's context length maxT = %d", T, c.max_seq_len);
    }
    for (int i = 0; i < B * T; i++) {
        if (inputs[i] < 0 || inputs[i] >= V) fatal("token id %d at position %d is outside the vocabulary [0, %d)", inputs[i], i, V);
    }
    gpt_allocate_activations(model, B, T);
    model->last_B = B;
    model->last_T = T;
    cudaStream_t s = model->stream;
    int BT = B * T;
    copy_to_device(model->inputs, inputs, BT * sizeof(int));
    memcpy(model->inputs_host, inputs, BT * sizeof(int));
    if (targets != NULL) copy_to_device(model->targets, targets, BT * sizeof(int));

    ActivationTensors a = model->acts;
    EmbedTensors emb = gpt_embed_params(model, 0);  // held until the LM head
    encoder_forward(a.encoded, model->inputs, emb.wte, emb.wpe, B, T, C, s);
    for (int l = 0; l < L; l++) {
        LayerTensors w = gpt_layer_params(model, l, 0);
        size_t lc = (size_t)l * BT * C;  // offset of layer l in an (L, B, T, C) activation
        floatX* ln1 = a.ln1 + lc;
        floatX* qkv = a.qkv + 3 * lc;
        floatX* qkvr = a.qkvr + 3 * lc;
        floatX* att = a.att + (size_t)l * B * NH * T * T;
        floatX* atty = a.atty + lc;
        floatX* attproj = a.attproj + lc;
        floatX* residual2 = a.residual2 + lc;
        floatX* ln2 = a.ln2 + lc;
        floatX* fch = a.fch + 4 * lc;
        floatX* fch_gelu = a.fch_gelu + 4 * lc;
        floatX* fcproj = a.fcproj + lc;
        // ln1 of this layer, with the residual add of the layer before fused in
        // (residual3 of layer l-1 = residual2 + fcproj of layer l-1)
        floatX* residual = l == 0 ? a.encoded : a.residual3 + lc - (size_t)BT * C;
        if (l == 0) {
            layernorm_forward(ln1, a.ln1_mean, a.ln1_rstd, a.encoded, w.ln1w, w.ln1b, BT, C, s);
        } else {
            fused_residual_layernorm_forward(residual, ln1, a.ln1_mean + (size_t)l * BT, a.ln1_rstd + (size_t)l * BT,
                                             a.residual2 + lc - (size_t)BT * C, a.fcproj + lc - (size_t)BT * C,
                                             w.ln1w, w.ln1b, BT, C, s);
        }
        matmul_forward(qkv, NULL, ln1, w.qkvw, w.qkvb, BT, C, 3 * C, s);
        attention_forward(atty, qkvr, att, model->bufs.dscratch, qkv, B, T, C, NH, s);
        matmul_forward(attproj, NULL, atty, w.attprojw, w.attprojb, BT, C, C, s);
        fused_residual_layernorm_forward(residual2, ln2, a.ln2_mean + (size_t)l * BT, a.ln2_rstd + (size_t)l * BT,
                                         residual, attproj, w.ln2w, w.ln2b, BT, C, s);
        matmul_forward(fch_gelu, fch, ln2, w.fcw, w.fcb, BT, C, 4 * C, s);
        matmul_forward(fcproj, NULL, fch_gelu, w.fcprojw, w.fcprojb, BT, 4 * C, C, s);
        gpt_params_release(model, unit_of_layer(l), 0);
    }
    // the final LayerNorm, with the last residual add fused in
    FinalTensors fin = gpt_final_params(model, 0);
    size_t last = (size_t)(L - 1) * BT * C;
    fused_residual_layernorm_forward(a.residual3 + last, a.lnf, a.lnf_mean, a.lnf_rstd, a.residual2 + last,
                                     a.fcproj + last, fin.lnfw, fin.lnfb, BT, C, s);
    gpt_params_release(model, unit_final(c), 0);
    matmul_forward(a.output, NULL, a.lnf, emb.wte, NULL, BT, C, Vp, s);
    gpt_params_release(model, UNIT_EMBED, 0);

    model->mean_loss = -1.0f;
    if (targets != NULL) {
        fused_classifier(a.output, a.losses, dloss, model->targets, BT, V, Vp, dloss > 0.0f, s);
        copy_to_host(model->losses_host, a.losses, BT * sizeof(float));
        double sum = 0.0;
        for (int i = 0; i < BT; i++) sum += model->losses_host[i];
        model->mean_loss = (float)(sum / BT);
    }
}

static void gpt_zero_grad(GPT* model) {
    if (model->grads_memory == NULL) return;  // the hooks own the gradients (llm/zero.h)
    device_memset_zero(model->grads_memory, model->num_parameters * sizeof(floatX), model->stream);
}

// Accumulates (+=) the gradients of the last training forward (dloss > 0) into model->grads (or the
// buffers the hooks give). Units in the order: embed (LM head), final, layer L-1 .. 0, embed
// (encoder); each unit's gradients are final after its own part, except the embedding's, which are
// final only at the very end (wte gets the LM head's gradient first and the encoder's last).
static void gpt_backward(GPT* model) {
    GPTConfig c = model->config;
    int L = c.num_layers, NH = c.num_heads, C = c.channels, Vp = c.padded_vocab_size;
    int B = model->last_B, T = model->last_T;  // the last forward's batch
    cudaStream_t s = model->stream;
    ActivationTensors a = model->acts;
    BackwardBuffers bb = model->bufs;
    int BT = B * T;

    // LM head (tied to wte), then the final LayerNorm; dresidual starts from zero
    EmbedTensors emb = gpt_embed_params(model, 1), gemb = gpt_embed_grads(model);  // held to the end
    matmul_backward(bb.dbuf_c, gemb.wte, NULL, a.output, a.lnf, emb.wte, bb.scratch, NULL, BT, C, Vp, s);
    device_memset_zero(bb.dresidual, (size_t)BT * C * sizeof(floatX), s);
    FinalTensors fin = gpt_final_params(model, 1), gfin = gpt_final_grads(model);
    floatX* last_residual = a.residual3 + (size_t)(L - 1) * BT * C;
    layernorm_backward(bb.dresidual, gfin.lnfw, gfin.lnfb, bb.scratch, bb.dbuf_c, last_residual, fin.lnfw,
                       a.lnf_mean, a.lnf_rstd, BT, C, s);
    gpt_params_release(model, unit_final(c), 1);
    gpt_grads_ready(model, unit_final(c));
    for (int l = L - 1; l >= 0; l--) {
        LayerTensors w = gpt_layer_params(model, l, 1), gw = gpt_layer_grads(model, l);
        size_t lc = (size_t)l * BT * C;
        floatX* residual = l == 0 ? a.encoded : a.residual3 + lc - (size_t)BT * C;
        // dresidual is the gradient of residual3 = residual2 + fcproj: it flows to both unchanged
        matmul_backward(bb.dbuf_4c, gw.fcprojw, gw.fcprojb, bb.dresidual, a.fch_gelu + 4 * lc, w.fcprojw,
                        bb.scratch, a.fch + 4 * lc, BT, 4 * C, C, s);  // dbuf_4c = d fch (GELU's backward fused)
        matmul_backward(bb.dbuf_c, gw.fcw, gw.fcb, bb.dbuf_4c, a.ln2 + lc, w.fcw, bb.scratch, NULL, BT, C, 4 * C, s);
        layernorm_backward(bb.dresidual, gw.ln2w, gw.ln2b, bb.scratch, bb.dbuf_c, a.residual2 + lc, w.ln2w,
                           a.ln2_mean + (size_t)l * BT, a.ln2_rstd + (size_t)l * BT, BT, C, s);
        // dresidual is now the gradient of residual2 = residual + attproj
        matmul_backward(bb.dbuf_c, gw.attprojw, gw.attprojb, bb.dresidual, a.atty + lc, w.attprojw, bb.scratch,
                        NULL, BT, C, C, s);
        attention_backward(bb.dqkv, bb.dqkvr, bb.datt, bb.dscratch, bb.dbuf_c, a.qkv + 3 * lc, a.qkvr + 3 * lc,
                           a.att + (size_t)l * B * NH * T * T, B, T, C, NH, s);
        matmul_backward(bb.dbuf_c, gw.qkvw, gw.qkvb, bb.dqkv, a.ln1 + lc, w.qkvw, bb.scratch, NULL, BT, C, 3 * C, s);
        layernorm_backward(bb.dresidual, gw.ln1w, gw.ln1b, bb.scratch, bb.dbuf_c, residual, w.ln1w,
                           a.ln1_mean + (size_t)l * BT, a.ln1_rstd + (size_t)l * BT, BT, C, s);
        gpt_params_release(model, unit_of_layer(l), 1);
        gpt_grads_ready(model, unit_of_layer(l));
    }
    encoder_backward(gemb.wte, gemb.wpe, bb.scratch, bb.dresidual, model->inputs, model->inputs_host, B, T, C, s);
    gpt_params_release(model, UNIT_EMBED, 1);
    gpt_grads_ready(model, UNIT_EMBED);
}
