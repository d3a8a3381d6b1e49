// tensors.h: GPT-2's config and its parameter tensors as one table (Radford et al. 2019; the shapes
// and order of llm.c's checkpoints, docs/formats.md). Everything about the parameters is derived from the
// table TENSORS below: sizes, the initialisation, which tensors get weight decay, how tensor
// parallelism will split each one, the units that data parallelism and pipeline stages move as
// one, their packed layout in memory, and the mapping to and from the checkpoint order. No other
// file names a tensor by number; adding a tensor is one row.
//
// Units (the data-parallel and pipeline policies move a unit as one). Each unit has a kind, and a kind
// holds a fixed list of tensors (the table's `hold` column): unit 0 "embed" (wte, wpe); for each layer l
// its layer unit, of kind "dense" (the 12 tensors of a GPT-2 block) or, in a mixture-of-experts model
// (GPTConfig.num_experts E > 0) where l % moe_every == 0, of kind "moe" (ln1w .. attprojb, ln2w, ln2b and
// the router (E, C): no dense MLP), followed at once by that layer's unit of kind "experts" (the E
// experts' fcw (E, 4C, C), fcb (E, 4C), fcprojw (E, C, 4C), fcprojb (E, C), each contiguous over the
// experts: the unit expert parallelism will later shard by expert); last the unit "final" (lnfw, lnfb).
// A dense model's units are exactly L + 2: embed, layer 0 .. L-1, final, as llm.c's tensors fall.
// The packed layout and the views of a unit are in llm/model/units.h.
//
// Checkpoint order: for each tensor in table order, for each unit that holds it in unit order, that
// unit's copy (the experts' copy: E blocks back to back). For a dense model this is llm.c's order, each
// per-layer tensor an (L, ...) slab (docs/formats.md); the expert tensors are rows of their own (after
// llm.c's), so a dense model's file has none of them.
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
    int num_experts;        // E: 0 = a dense model (llm.c's GPT-2); > 0 = mixture-of-experts MLPs (llm/model/moe.h)
    int top_k;              // K: the experts each token goes to (E > 0)
    int moe_every;          // M: layer l has experts when E > 0 and l % M == 0 (Megatron's moe_layer_freq)
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
    cfg->num_experts = cfg->top_k = cfg->moe_every = 0;  // dense, as a dense checkpoint reads (the trainer's --experts sets them)
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

typedef enum { DIM_1, DIM_C, DIM_3C, DIM_4C, DIM_VP, DIM_MAXT, DIM_E } Dim;

typedef enum {
    INIT_ONES,             // LayerNorm weights
    INIT_ZEROS,            // biases
    INIT_NORMAL,           // N(0, 0.02)
    INIT_NORMAL_RESIDUAL,  // N(0, 0.02 / sqrt(2L)): the projections into the residual stream (GPT-2 sec. 2.3)
} InitRule;

// how Megatron tensor parallelism splits a tensor over the tp ranks (Shoeybi et al. 2019, sec. 3)
typedef enum {
    TP_REPLICATED,  // every tp rank holds all of it (wpe, biases of row-parallel layers)
    TP_NORM,        // replicated too (the LayerNorms; the router and experts), but with sequence parallelism each
                    // tp rank runs its own tokens, so its gradient is a partial sum, all-reduced over tp (llm/parallel/dp.h)
    TP_QKV_HEADS,   // output rows in head groups: rank r holds heads [r NH/tp, (r+1) NH/tp) of q, k and v
    TP_ROWS,        // output rows (column-parallel linear: fc)
    TP_COLS,        // input columns (row-parallel linear: attproj, fcproj)
    TP_VOCAB,       // vocabulary rows (the token embedding, tied to the LM head)
} TPSplit;

// which units hold a tensor (each unit kind's list is the rows that name it, in table order)
typedef enum {
    HOLD_EMBED,    // the embedding unit
    HOLD_LAYER,    // every layer unit, dense or moe (the attention half and ln2)
    HOLD_DENSE,    // dense layer units only (the dense MLP)
    HOLD_MOE,      // moe layer units only (the router)
    HOLD_EXPERTS,  // the experts unit of a moe layer: E copies, expert-major
    HOLD_FINAL,    // the final unit
} Hold;

typedef struct {
    const char* name;
    int per_layer;     // 1: one per layer (per moe layer for the moe and experts rows), stacked in checkpoint order
    Dim rows, cols;
    int decay;         // AdamW's weight decay applies (the 2-D tensors: embeddings and matmul weights)
    InitRule init;
    TPSplit tp;
    Hold hold;
    int experts;       // 1: E copies (rows, cols) in a unit, expert-major
} TensorInfo;

enum {
    T_WTE, T_WPE, T_LN1W, T_LN1B, T_QKVW, T_QKVB, T_ATTPROJW, T_ATTPROJB,
    T_LN2W, T_LN2B, T_FCW, T_FCB, T_FCPROJW, T_FCPROJB, T_ROUTER, T_EFCW, T_EFCB, T_EFCPROJW, T_EFCPROJB,
    T_LNFW, T_LNFB, NUM_TENSORS
};

// in checkpoint order (llm.c's for the rows of a dense model). The router and the experts are replicated over
// tp (TP_NORM): without sequence parallelism every tp rank runs the whole MoE layer on the same tokens (redundant
// work, correct; expert parallelism splits them instead); with it each tp rank runs its own tokens, so their
// gradients are partial sums, all-reduced over tp as the LayerNorms' are (llm/sharded/moe_sequence.h).
static const TensorInfo TENSORS[NUM_TENSORS] = {
    //  name      per_layer rows     cols    decay init                  tp split       hold         experts
    {"wte",      0, DIM_VP,   DIM_C,  1, INIT_NORMAL,          TP_VOCAB,      HOLD_EMBED,   0},
    {"wpe",      0, DIM_MAXT, DIM_C,  1, INIT_NORMAL,          TP_REPLICATED, HOLD_EMBED,   0},
    {"ln1w",     1, DIM_C,    DIM_1,  0, INIT_ONES,            TP_NORM,       HOLD_LAYER,   0},
    {"ln1b",     1, DIM_C,    DIM_1,  0, INIT_ZEROS,           TP_NORM,       HOLD_LAYER,   0},
    {"qkvw",     1, DIM_3C,   DIM_C,  1, INIT_NORMAL,          TP_QKV_HEADS,  HOLD_LAYER,   0},
    {"qkvb",     1, DIM_3C,   DIM_1,  0, INIT_ZEROS,           TP_QKV_HEADS,  HOLD_LAYER,   0},
    {"attprojw", 1, DIM_C,    DIM_C,  1, INIT_NORMAL_RESIDUAL, TP_COLS,       HOLD_LAYER,   0},
    {"attprojb", 1, DIM_C,    DIM_1,  0, INIT_ZEROS,           TP_REPLICATED, HOLD_LAYER,   0},
    {"ln2w",     1, DIM_C,    DIM_1,  0, INIT_ONES,            TP_NORM,       HOLD_LAYER,   0},
    {"ln2b",     1, DIM_C,    DIM_1,  0, INIT_ZEROS,           TP_NORM,       HOLD_LAYER,   0},
    {"fcw",      1, DIM_4C,   DIM_C,  1, INIT_NORMAL,          TP_ROWS,       HOLD_DENSE,   0},
    {"fcb",      1, DIM_4C,   DIM_1,  0, INIT_ZEROS,           TP_ROWS,       HOLD_DENSE,   0},
    {"fcprojw",  1, DIM_C,    DIM_4C, 1, INIT_NORMAL_RESIDUAL, TP_COLS,       HOLD_DENSE,   0},
    {"fcprojb",  1, DIM_C,    DIM_1,  0, INIT_ZEROS,           TP_REPLICATED, HOLD_DENSE,   0},
    {"router",   1, DIM_E,    DIM_C,  1, INIT_NORMAL,          TP_NORM,       HOLD_MOE,     0},
    {"efcw",     1, DIM_4C,   DIM_C,  1, INIT_NORMAL,          TP_NORM,       HOLD_EXPERTS, 1},
    {"efcb",     1, DIM_4C,   DIM_1,  0, INIT_ZEROS,           TP_NORM,       HOLD_EXPERTS, 1},
    {"efcprojw", 1, DIM_C,    DIM_4C, 1, INIT_NORMAL_RESIDUAL, TP_NORM,       HOLD_EXPERTS, 1},
    {"efcprojb", 1, DIM_C,    DIM_1,  0, INIT_ZEROS,           TP_NORM,       HOLD_EXPERTS, 1},
    {"lnfw",     0, DIM_C,    DIM_1,  0, INIT_ONES,            TP_NORM,       HOLD_FINAL,   0},
    {"lnfb",     0, DIM_C,    DIM_1,  0, INIT_ZEROS,           TP_NORM,       HOLD_FINAL,   0},
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
        case DIM_E: return (size_t)c.num_experts;
        default: return (size_t)c.max_seq_len;  // DIM_MAXT
    }
}

// ----------------------------------------------------------------------------
// unit kinds: functions of the config (the architecture), the same on every rank

typedef enum { UNIT_KIND_EMBED, UNIT_KIND_DENSE, UNIT_KIND_MOE, UNIT_KIND_EXPERTS, UNIT_KIND_FINAL } UnitKind;

#define UNIT_EMBED 0
// layer l has experts (a moe layer unit and an experts unit)
static inline int layer_is_moe(GPTConfig c, int l) { return c.num_experts > 0 && c.moe_every > 0 && l % c.moe_every == 0; }
// the moe layers among layers [0, l)
static inline int moe_layers_before(GPTConfig c, int l) {
    return c.num_experts > 0 && c.moe_every > 0 ? (l + c.moe_every - 1) / c.moe_every : 0;
}
static inline int unit_of_layer(GPTConfig c, int l) { return 1 + l + moe_layers_before(c, l); }
// the experts unit of moe layer l (right after its layer unit); -1 for a dense layer
static inline int unit_experts_of_layer(GPTConfig c, int l) { return layer_is_moe(c, l) ? unit_of_layer(c, l) + 1 : -1; }
static inline int num_units(GPTConfig c) { return c.num_layers + 2 + moe_layers_before(c, c.num_layers); }
static inline int unit_final(GPTConfig c) { return num_units(c) - 1; }
// the layer a layer or experts unit belongs to (-1: embed, final)
static int unit_layer(GPTConfig c, int u) {
    for (int l = 0; l < c.num_layers; l++) if (u == unit_of_layer(c, l) || u == unit_experts_of_layer(c, l)) return l;
    return -1;
}
static UnitKind unit_kind(GPTConfig c, int u) {
    if (u == UNIT_EMBED) return UNIT_KIND_EMBED;
    if (u == unit_final(c)) return UNIT_KIND_FINAL;
    int l = unit_layer(c, u);
    if (u == unit_experts_of_layer(c, l)) return UNIT_KIND_EXPERTS;
    return layer_is_moe(c, l) ? UNIT_KIND_MOE : UNIT_KIND_DENSE;
}
// a unit of kind k holds tensor t
static inline int kind_holds(UnitKind k, int t) {
    switch (TENSORS[t].hold) {
        case HOLD_EMBED: return k == UNIT_KIND_EMBED;
        case HOLD_LAYER: return k == UNIT_KIND_DENSE || k == UNIT_KIND_MOE;
        case HOLD_DENSE: return k == UNIT_KIND_DENSE;
        case HOLD_MOE: return k == UNIT_KIND_MOE;
        case HOLD_EXPERTS: return k == UNIT_KIND_EXPERTS;
        default: return k == UNIT_KIND_FINAL;  // HOLD_FINAL
    }
}
// the units that hold tensor t
static int tensor_units(GPTConfig c, int t) {
    int n = 0, moe = moe_layers_before(c, c.num_layers);
    switch (TENSORS[t].hold) {
        case HOLD_LAYER: n = c.num_layers; break;
        case HOLD_DENSE: n = c.num_layers - moe; break;
        case HOLD_MOE: case HOLD_EXPERTS: n = moe; break;
        default: n = 1; break;
    }
    return n;
}

// values of tensor t in one unit that holds it (E experts' worth for an experts tensor)
static inline size_t tensor_layer_size(GPTConfig c, int t) {
    size_t n = dim_value(c, TENSORS[t].rows) * dim_value(c, TENSORS[t].cols);
    return TENSORS[t].experts ? n * (size_t)c.num_experts : n;
}
// values of tensor t in the whole model
static inline size_t tensor_size(GPTConfig c, int t) { return tensor_layer_size(c, t) * (size_t)tensor_units(c, t); }

// Psi: the number of parameters
static size_t num_parameters(GPTConfig c) {
    size_t n = 0;
    for (int t = 0; t < NUM_TENSORS; t++) n += tensor_size(c, t);
    return n;
}

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

