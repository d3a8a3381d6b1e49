// tensors.h: GPT-2's config and its parameter tensors as one table (Radford et al. 2019; the shapes
// and order of llm.c's checkpoints, docs/formats.md). Everything about the parameters is derived from the
// table TENSORS below: sizes, the initialisation, which tensors get weight decay, how tensor
// parallelism will split each one, the units that data parallelism and pipeline stages move as
// one, their packed layout in memory, and the mapping to and from the checkpoint order. No other
// file names a tensor by number; adding a tensor is one row.
//
// Units. The tensors fall into units: unit 0 "embed" (the tensors before the first per-layer one:
// wte, wpe), unit 1+l the per-layer tensors of layer l, and unit L+1 "final" (the tensors after the
// last per-layer one: lnfw, lnfb). In memory the parameters (and gradients, and optimizer state) are
// always in the packed layout: unit after unit, each unit's tensors back to back in table order,
// each unit padded with zeros to a multiple of `align` values (16-byte aligned starts for the
// 128-bit kernels, and equal blocks for ZeRO's dp ranks). The checkpoint order (each tensor whole,
// per-layer tensors as (L, ...) slabs) is only a file format: layout_to_packed / layout_to_checkpoint
// move between the two.
#pragma once
#include "../core/common.h"
#include "../core/rand.h"
#include "../sharded/tensor_parallel.h"  // tp_layout_error

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
// the table

typedef enum { DIM_1, DIM_C, DIM_3C, DIM_4C, DIM_VP, DIM_MAXT } Dim;

typedef enum {
    INIT_ONES,             // LayerNorm weights
    INIT_ZEROS,            // biases
    INIT_NORMAL,           // N(0, 0.02)
    INIT_NORMAL_RESIDUAL,  // N(0, 0.02 / sqrt(2L)): the projections into the residual stream (GPT-2 sec. 2.3)
} InitRule;

// how Megatron tensor parallelism splits a tensor over the tp ranks (Shoeybi et al. 2019, sec. 3)
typedef enum {
    TP_REPLICATED,  // every tp rank holds all of it (wpe, biases of row-parallel layers)
    TP_NORM,        // replicated too (the LayerNorms), but with sequence parallelism each tp rank normalises
                    // its own tokens, so its gradient is a partial sum, all-reduced over tp (llm/parallel/dp.h)
    TP_QKV_HEADS,   // output rows in head groups: rank r holds heads [r NH/tp, (r+1) NH/tp) of q, k and v
    TP_ROWS,        // output rows (column-parallel linear: fc)
    TP_COLS,        // input columns (row-parallel linear: attproj, fcproj)
    TP_VOCAB,       // vocabulary rows (the token embedding, tied to the LM head)
} TPSplit;

typedef struct {
    const char* name;
    int per_layer;     // 1: one (rows, cols) tensor per layer, (L, rows, cols) in checkpoint order
    Dim rows, cols;
    int decay;         // AdamW's weight decay applies (the 2-D tensors: embeddings and matmul weights)
    InitRule init;
    TPSplit tp;
} TensorInfo;

enum {
    T_WTE, T_WPE, T_LN1W, T_LN1B, T_QKVW, T_QKVB, T_ATTPROJW, T_ATTPROJB,
    T_LN2W, T_LN2B, T_FCW, T_FCB, T_FCPROJW, T_FCPROJB, T_LNFW, T_LNFB, NUM_TENSORS
};

// in llm.c's checkpoint order
static const TensorInfo TENSORS[NUM_TENSORS] = {
    //  name      per_layer rows     cols    decay init                  tp split
    {"wte",      0, DIM_VP,   DIM_C,  1, INIT_NORMAL,          TP_VOCAB},
    {"wpe",      0, DIM_MAXT, DIM_C,  1, INIT_NORMAL,          TP_REPLICATED},
    {"ln1w",     1, DIM_C,    DIM_1,  0, INIT_ONES,            TP_NORM},
    {"ln1b",     1, DIM_C,    DIM_1,  0, INIT_ZEROS,           TP_NORM},
    {"qkvw",     1, DIM_3C,   DIM_C,  1, INIT_NORMAL,          TP_QKV_HEADS},
    {"qkvb",     1, DIM_3C,   DIM_1,  0, INIT_ZEROS,           TP_QKV_HEADS},
    {"attprojw", 1, DIM_C,    DIM_C,  1, INIT_NORMAL_RESIDUAL, TP_COLS},
    {"attprojb", 1, DIM_C,    DIM_1,  0, INIT_ZEROS,           TP_REPLICATED},
    {"ln2w",     1, DIM_C,    DIM_1,  0, INIT_ONES,            TP_NORM},
    {"ln2b",     1, DIM_C,    DIM_1,  0, INIT_ZEROS,           TP_NORM},
    {"fcw",      1, DIM_4C,   DIM_C,  1, INIT_NORMAL,          TP_ROWS},
    {"fcb",      1, DIM_4C,   DIM_1,  0, INIT_ZEROS,           TP_ROWS},
    {"fcprojw",  1, DIM_C,    DIM_4C, 1, INIT_NORMAL_RESIDUAL, TP_COLS},
    {"fcprojb",  1, DIM_C,    DIM_1,  0, INIT_ZEROS,           TP_REPLICATED},
    {"lnfw",     0, DIM_C,    DIM_1,  0, INIT_ONES,            TP_NORM},
    {"lnfb",     0, DIM_C,    DIM_1,  0, INIT_ZEROS,           TP_NORM},
};

// every tp rank holds all of tensor t (the same values on every rank)
static inline int tp_replicated(int t) { return TENSORS[t].tp == TP_REPLICATED || TENSORS[t].tp == TP_NORM; }

static inline size_t dim_value(GPTConfig c, Dim d) {
    switch (d) {
        case DIM_1: return 1;
        case DIM_C: return (size_t)c.channels;
        case DIM_3C: return 3 * (size_t)c.channels;
        case DIM_4C: return 4 * (size_t)c.channels;
        case DIM_VP: return (size_t)c.padded_vocab_size;
        default: return (size_t)c.max_seq_len;  // DIM_MAXT
    }
}

// values of tensor t in one layer (or in all, for a tensor that is not per layer)
static inline size_t tensor_layer_size(GPTConfig c, int t) { return dim_value(c, TENSORS[t].rows) * dim_value(c, TENSORS[t].cols); }
// values of tensor t in the whole model
static inline size_t tensor_size(GPTConfig c, int t) {
    return tensor_layer_size(c, t) * (TENSORS[t].per_layer ? (size_t)c.num_layers : 1);
}

// Psi: the number of parameters
static size_t num_parameters(GPTConfig c) {
    size_t n = 0;
    for (int t = 0; t < NUM_TENSORS; t++) n += tensor_size(c, t);
    return n;
}

// ----------------------------------------------------------------------------
// units and the packed layout

#define UNIT_EMBED 0
static inline int unit_of_layer(int l) { return 1 + l; }
static inline int unit_final(GPTConfig c) { return c.num_layers + 1; }
static inline int num_units(GPTConfig c) { return c.num_layers + 2; }
// the unit kind a tensor belongs to: -1 embed (before the per-layer tensors), 0 layer, 1 final (after)
static inline int tensor_unit_kind(int t) {
    if (TENSORS[t].per_layer) return 0;
    for (int k = 0; k < t; k++) if (TENSORS[k].per_layer) return 1;
    return -1;
}

typedef struct {
    size_t n;        // values of the unit's tensors
    size_t padded;   // n rounded up to a multiple of the layout's align
    size_t start;    // first value of the unit in the packed layout
    int held;        // 1: this rank's pipeline stage holds the unit; 0: n = padded = 0, no values here
} UnitInfo;

// ----------------------------------------------------------------------------
// tensor-parallel shards: tp rank r of tp_size holds of each (layer's) tensor the part its TPSplit names.
// shard_rows/cols are the shape of that part; tp_shard_copy moves it between the whole (rows, cols)
// tensor and the shard (rows_s, cols_s), both row-major.
//   TP_QKV_HEADS  rows [r C/tp, (r+1) C/tp) of each of q, k, v (the three C-row thirds), stacked q, k, v:
//                 the shard is itself a fused (3 C/tp, cols) qkv of NH/tp heads
//   TP_ROWS, TP_VOCAB   rows [r rows/tp, (r+1) rows/tp)
//   TP_COLS       columns [r cols/tp, (r+1) cols/tp) of every row
//   TP_REPLICATED, TP_NORM  all of it

static inline size_t shard_rows(GPTConfig c, int t, int tp_size) {
    size_t rows = dim_value(c, TENSORS[t].rows);
    TPSplit sp = TENSORS[t].tp;
    return sp == TP_QKV_HEADS || sp == TP_ROWS || sp == TP_VOCAB ? rows / (size_t)tp_size : rows;
}
static inline size_t shard_cols(GPTConfig c, int t, int tp_size) {
    size_t cols = dim_value(c, TENSORS[t].cols);
    return TENSORS[t].tp == TP_COLS ? cols / (size_t)tp_size : cols;
}
static inline size_t tensor_shard_size(GPTConfig c, int t, int tp_size) { return shard_rows(c, t, tp_size) * shard_cols(c, t, tp_size); }

// to_shard 1: shard = rank's part of whole; 0: whole's part = shard (the rest of whole untouched)
static void tp_shard_copy(GPTConfig c, int t, int tp_size, int rank, float* whole /*(rows, cols)*/,
                          float* shard /*(rows_s, cols_s)*/, int to_shard) {
    size_t rows = dim_value(c, TENSORS[t].rows), cols = dim_value(c, TENSORS[t].cols);
    size_t rs = shard_rows(c, t, tp_size), cs = shard_cols(c, t, tp_size);
    for (size_t i = 0; i < rs; i++) {
        size_t wi = i, wj = 0;  // row and first column of shard row i in the whole tensor
        switch (TENSORS[t].tp) {
            case TP_QKV_HEADS: { size_t third = rows / 3, per = third / (size_t)tp_size;
                                 wi = (i / per) * third + (size_t)rank * per + i % per; break; }
            case TP_ROWS: case TP_VOCAB: wi = (size_t)rank * rs + i; break;
            case TP_COLS: wj = (size_t)rank * cs; break;
            default: break;
        }
        float* w = whole + wi * cols + wj;
        float* sh = shard + i * cs;
        if (to_shard) memcpy(sh, w, cs * sizeof(float));
        else memcpy(w, sh, cs * sizeof(float));
    }
}

typedef struct {
    GPTConfig cfg;
    int tp_size, tp_rank;              // the tensor-parallel split: this layout holds rank tp_rank's shards
    size_t align;                      // every unit is padded to a multiple of this many values
    size_t num_parameters;             // Psi (the whole model's)
    size_t shard_parameters;           // the values this rank holds: its tp shards of the units of its
                                       // pipeline stage (Psi when tp = pp = 1)
    size_t ckpt_offset[NUM_TENSORS];   // first value of each tensor in checkpoint order (whole tensors)
    size_t unit_offset[NUM_TENSORS];   // first value of each tensor's (layer) shard within its unit
    size_t layer_size[NUM_TENSORS];    // values of each tensor's (layer) shard
    int num_units;
    UnitInfo* units;                   // (num_units)
    size_t packed_size;                // sum of the padded units
} ParamLayout;

// the packed layout of tp rank tp_rank's shards (tp = 1: the whole model) of the units held[u] != 0
// (held NULL: every unit; pipeline parallelism gives each stage its own, llm/parallel/pipeline.h)
static void layout_init_pp(ParamLayout* lay, GPTConfig c, size_t align, int tp_size, int tp_rank, const int* held) {
    memset(lay, 0, sizeof(*lay));
    char err[256];
    if (tp_layout_error(c.num_heads, c.padded_vocab_size, c.channels, tp_size, err, sizeof(err))) fatal("%s", err);
    lay->cfg = c;
    lay->tp_size = tp_size;
    lay->tp_rank = tp_rank;
    lay->align = align;
    lay->num_units = num_units(c);
    lay->units = (UnitInfo*)mallocCheck((size_t)lay->num_units * sizeof(UnitInfo));
    memset(lay->units, 0, (size_t)lay->num_units * sizeof(UnitInfo));
    size_t in_embed = 0, in_layer = 0, in_final = 0, ckpt = 0;
    for (int t = 0; t < NUM_TENSORS; t++) {
        lay->ckpt_offset[t] = ckpt;
        ckpt += tensor_size(c, t);
        size_t n = tensor_shard_size(c, t, tp_size);
        lay->layer_size[t] = n;
        int kind = tensor_unit_kind(t);
        size_t* in_unit = kind < 0 ? &in_embed : (kind == 0 ? &in_layer : &in_final);
        lay->unit_offset[t] = *in_unit;
        *in_unit += n;
    }
    lay->num_parameters = ckpt;
    size_t start = 0;
    for (int u = 0; u < lay->num_units; u++) {
        UnitInfo* un = &lay->units[u];
        un->held = held == NULL || held[u];
        un->n = !un->held ? 0 : (u == UNIT_EMBED ? in_embed : (u == unit_final(c) ? in_final : in_layer));
        un->padded = ceil_div_sz(un->n, align) * align;
        lay->shard_parameters += un->n;
        un->start = start;
        start += un->padded;
    }
    lay->packed_size = start;
}

static void layout_init_tp(ParamLayout* lay, GPTConfig c, size_t align, int tp_size, int tp_rank) {
    layout_init_pp(lay, c, align, tp_size, tp_rank, NULL);
}
static void layout_init(ParamLayout* lay, GPTConfig c, size_t align) { layout_init_tp(lay, c, align, 1, 0); }

static void layout_free(ParamLayout* lay) {
    free(lay->units);
    lay->units = NULL;
}

// the tensors of unit u, in table order: their indices in *ts (room for NUM_TENSORS); returns how many
static int unit_tensors(const ParamLayout* lay, int u, int* ts) {
    int want = u == UNIT_EMBED ? -1 : (u == unit_final(lay->cfg) ? 1 : 0), k = 0;
    for (int t = 0; t < NUM_TENSORS; t++) if (tensor_unit_kind(t) == want) ts[k++] = t;
    return k;
}

// where unit u's slice of tensor t lies in checkpoint order
static inline size_t unit_tensor_ckpt_offset(const ParamLayout* lay, int u, int t) {
    size_t l = TENSORS[t].per_layer ? (size_t)(u - 1) : 0;
    return lay->ckpt_offset[t] + l * tensor_layer_size(lay->cfg, t);
}

// full (Psi values, checkpoint order) into packed (packed_size values: this tp rank's shards, pads
// zero); host FP32
static void layout_to_packed(const ParamLayout* lay, const float* ckpt, float* packed) {
    memset(packed, 0, lay->packed_size * sizeof(float));
    int ts[NUM_TENSORS];
    for (int u = 0; u < lay->num_units; u++) {
        if (!lay->units[u].held) continue;
        int k = unit_tensors(lay, u, ts);
        for (int i = 0; i < k; i++) {
            int t = ts[i];
            tp_shard_copy(lay->cfg, t, lay->tp_size, lay->tp_rank, (float*)ckpt + unit_tensor_ckpt_offset(lay, u, t),
                          packed + lay->units[u].start + lay->unit_offset[t], 1);
        }
    }
}

// packed (the shards of tp rank `rank` in a layout like lay) into their places in checkpoint order
// (the pads are dropped; with tp > 1 the other ranks' parts of ckpt, and the units this pipeline stage
// does not hold, are left as they are)
static void layout_to_checkpoint_rank(const ParamLayout* lay, int rank, const float* packed, float* ckpt) {
    int ts[NUM_TENSORS];
    for (int u = 0; u < lay->num_units; u++) {
        if (!lay->units[u].held) continue;
        int k = unit_tensors(lay, u, ts);
        for (int i = 0; i < k; i++) {
            int t = ts[i];
            tp_shard_copy(lay->cfg, t, lay->tp_size, rank, ckpt + unit_tensor_ckpt_offset(lay, u, t),
                          (float*)packed + lay->units[u].start + lay->unit_offset[t], 0);
        }
    }
}
static void layout_to_checkpoint(const ParamLayout* lay, const float* packed, float* ckpt) {
    layout_to_checkpoint_rank(lay, lay->tp_rank, packed, ckpt);
}

// ----------------------------------------------------------------------------
// the hooks through which the model gets each unit's parameters and hands back its gradients. The
// data-parallel policy (llm/parallel/dp.h) provides them; the model calls them around each unit's use, in
// every layout alike (a single process is DDP over one rank).
//   params       unit u's parameters in its packed layout, ready to read, for the forward (pass 0)
//                or the backward (pass 1); every call is matched by params_done when the pass is
//                done with them (ZeRO-3 gathers them just in time and drops them after)
//   grads        where the backward accumulates (+=) unit u's gradients, packed layout
//   grads_ready  unit u's gradients of this micro-batch are complete (its last write is enqueued)
//   agree_token  a sampled token, made the same on every rank of the group (ranks that gather
//                parameters together must run the same forwards)
typedef struct {
    void* ctx;
    floatX* (*params)(void* ctx, int unit, int pass);
    void (*params_done)(void* ctx, int unit, int pass);
    floatX* (*grads)(void* ctx, int unit);
    void (*grads_ready)(void* ctx, int unit);
    int (*agree_token)(void* ctx, int token);
} ParamHooks;

// ----------------------------------------------------------------------------
// views of a unit's packed vector: the pointers the model code reads

typedef struct {
    floatX* wte;  // (Vp, C)
    floatX* wpe;  // (maxT, C)
} EmbedTensors;

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
    floatX* lnfw;  // (C)
    floatX* lnfb;  // (C)
} FinalTensors;

static EmbedTensors embed_view(const ParamLayout* lay, floatX* unit) {
    EmbedTensors e = {unit + lay->unit_offset[T_WTE], unit + lay->unit_offset[T_WPE]};
    return e;
}
static LayerTensors layer_view(const ParamLayout* lay, floatX* unit) {
    const size_t* o = lay->unit_offset;
    LayerTensors w = {unit + o[T_LN1W], unit + o[T_LN1B], unit + o[T_QKVW], unit + o[T_QKVB],
                      unit + o[T_ATTPROJW], unit + o[T_ATTPROJB], unit + o[T_LN2W], unit + o[T_LN2B],
                      unit + o[T_FCW], unit + o[T_FCB], unit + o[T_FCPROJW], unit + o[T_FCPROJB]};
    return w;
}
static FinalTensors final_view(const ParamLayout* lay, floatX* unit) {
    FinalTensors f = {unit + lay->unit_offset[T_LNFW], unit + lay->unit_offset[T_LNFB]};
    return f;
}

// ----------------------------------------------------------------------------
// initialisation (GPT-2's, by each tensor's rule), in checkpoint order: one RNG stream over the
// tensors in table order; the padded vocabulary rows of wte stay zero

static void init_parameters(GPTConfig c, uint64_t seed, float* params /*(Psi) out, checkpoint order*/) {
    Rng rng;
    rng_init(&rng, seed);
    float residual_scale = 1.0f / sqrtf(2.0f * c.num_layers);
    float* p = params;
    for (int t = 0; t < NUM_TENSORS; t++) {
        size_t n = tensor_size(c, t);
        switch (TENSORS[t].init) {
            case INIT_ONES: for (size_t j = 0; j < n; j++) p[j] = 1.0f; break;
            case INIT_ZEROS: memset(p, 0, n * sizeof(float)); break;
            case INIT_NORMAL: rng_normal(&rng, p, n, 0.0f, 0.02f); break;
            case INIT_NORMAL_RESIDUAL: rng_normal(&rng, p, n, 0.0f, 0.02f * residual_scale); break;
        }
        if (TENSORS[t].rows == DIM_VP) {  // rows past the real vocabulary are never used: zero
            size_t first_pad = (size_t)c.vocab_size * dim_value(c, TENSORS[t].cols);
            memset(p + first_pad, 0, (n - first_pad) * sizeof(float));
        }
        p += n;
    }
}
