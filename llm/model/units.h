// units.h: the parameters as units in memory: the packed layout of the units of llm/model/tensors.h's
// table (what data parallelism and pipeline stages move as one), the mapping to and from the checkpoint
// order, the hooks through which the model gets a unit's parameters, the views of a unit (the pointers
// the model code reads), and the initialisation.
//
// In memory the parameters (and gradients, and optimizer state) are always in the packed layout: unit
// after unit, each unit's tensors back to back in table order, each unit padded with zeros to a
// multiple of `align` values (16-byte aligned starts for the 128-bit kernels, and equal blocks for
// ZeRO's dp ranks). A tensor lies at the same offset in every unit that holds it (the dense and the moe
// layer units share their first ten tensors; the dense MLP and the router, which no unit holds
// together, start at the same place). The checkpoint order (tensors.h) is only a file format:
// layout_to_packed / layout_to_checkpoint move between the two.
#pragma once
#include "../core/common.h"
#include "../core/rand.h"
#include "tensors.h"
#include "../sharded/expert_parallel.h"  // ep_layout_error

typedef struct {
    size_t n;        // values of the unit's tensors
    size_t padded;   // n rounded up to a multiple of the layout's align
    size_t start;    // first value of the unit in the packed layout
    int held;        // 1: this rank's pipeline stage holds the unit; 0: n = padded = 0, no values here
} UnitInfo;


typedef struct {
    GPTConfig cfg;
    int tp_size, tp_rank;              // the tensor-parallel split: this layout holds rank tp_rank's shards
    int ep_size, ep_rank;              // expert parallelism: an experts unit holds the E/ep_size experts
                                       // [ep_rank E/ep_size, (ep_rank+1) E/ep_size) (llm/sharded/expert_parallel.h)
    size_t align;                      // every unit is padded to a multiple of this many values
    size_t num_parameters;             // Psi (the whole model's)
    size_t shard_parameters;           // the values this rank holds: its tp shards of the units of its
                                       // pipeline stage (Psi when tp = pp = 1)
    size_t ckpt_offset[NUM_TENSORS];   // first value of each tensor in checkpoint order (whole tensors)
    size_t unit_offset[NUM_TENSORS];   // first value of each tensor's shard within a unit that holds it
    size_t layer_size[NUM_TENSORS];    // values of each tensor's shard in a unit (E/ep experts' for an experts tensor)
    int num_units;
    UnitInfo* units;                   // (num_units)
    size_t packed_size;                // sum of the padded units
} ParamLayout;

// the packed layout of tp rank tp_rank's shards (tp = 1: the whole model) of the units held[u] != 0
// (held NULL: every unit; pipeline parallelism gives each stage its own, llm/parallel/pipeline.h), the
// experts units holding ep rank ep_rank's experts
static void layout_init_pp(ParamLayout* lay, GPTConfig c, size_t align, int tp_size, int tp_rank, const int* held,
                           int ep_size = 1, int ep_rank = 0) {
    memset(lay, 0, sizeof(*lay));
    char err[256];
    if (tp_layout_error(c.num_heads, c.padded_vocab_size, c.channels, tp_size, err, sizeof(err))) fatal("%s", err);
    if (ep_layout_error(c.num_experts, ep_size, err, sizeof(err))) fatal("layout: %s", err);
    lay->cfg = c;
    lay->tp_size = tp_size;
    lay->tp_rank = tp_rank;
    lay->ep_size = ep_size;
    lay->ep_rank = ep_rank;
    lay->align = align;
    lay->num_units = num_units(c);
    lay->units = (UnitInfo*)mallocCheck((size_t)lay->num_units * sizeof(UnitInfo));
    memset(lay->units, 0, (size_t)lay->num_units * sizeof(UnitInfo));
    size_t in_kind[UNIT_KIND_FINAL + 1] = {0}, ckpt = 0;
    for (int t = 0; t < NUM_TENSORS; t++) {
        lay->ckpt_offset[t] = ckpt;
        ckpt += tensor_size(c, t);
        size_t n = tensor_shard_size(c, t, tp_size) * (TENSORS[t].experts ? (size_t)(c.num_experts / ep_size) : 1);
        lay->layer_size[t] = n;
        int placed = 0;
        for (int k = 0; k <= UNIT_KIND_FINAL; k++) {
            if (!kind_holds((UnitKind)k, t)) continue;
            if (placed && lay->unit_offset[t] != in_kind[k]) fatal("layout: tensor %s at two offsets", TENSORS[t].name);
            lay->unit_offset[t] = in_kind[k];
            in_kind[k] += n;
            placed = 1;
        }
    }
    lay->num_parameters = ckpt;
    size_t start = 0;
    for (int u = 0; u < lay->num_units; u++) {
        UnitInfo* un = &lay->units[u];
        un->held = held == NULL || held[u];
        un->n = !un->held ? 0 : in_kind[unit_kind(c, u)];
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
    UnitKind want = unit_kind(lay->cfg, u);
    int k = 0;
    for (int t = 0; t < NUM_TENSORS; t++) if (kind_holds(want, t)) ts[k++] = t;
    return k;
}

// where unit u's slice of tensor t lies in checkpoint order: after the copies of the units before u
static inline size_t unit_tensor_ckpt_offset(const ParamLayout* lay, int u, int t) {
    size_t before = 0;
    for (int v = 0; v < u; v++) before += kind_holds(unit_kind(lay->cfg, v), t);
    return lay->ckpt_offset[t] + before * tensor_layer_size(lay->cfg, t);
}

// tp_shard_copy of unit u's copy of tensor t: an experts tensor expert by expert (each (rows, cols)), ep rank
// ep_rank's E/ep of them
static void unit_tensor_copy(const ParamLayout* lay, int t, int rank, int ep_rank, float* whole, float* shard, int to_shard) {
    GPTConfig c = lay->cfg;
    int copies = TENSORS[t].experts ? c.num_experts / lay->ep_size : 1, first = TENSORS[t].experts ? ep_rank * copies : 0;
    size_t w = dim_value(c, TENSORS[t].rows) * dim_value(c, TENSORS[t].cols), s = tensor_shard_size(c, t, lay->tp_size);
    for (int e = 0; e < copies; e++) {
        tp_shard_copy(c, t, lay->tp_size, rank, whole + (size_t)(first + e) * w, shard + (size_t)e * s, to_shard);
    }
}

// every held unit's tensors between checkpoint order and the packed layout, tp rank `rank`'s shards of ep rank
// ep_rank's experts: to_packed 1: packed's places = ckpt's values; 0: ckpt's places = packed's (the pads dropped;
// with tp > 1 or ep > 1 the other ranks' parts of ckpt, and the units this pipeline stage does not hold, left as
// they are)
static void layout_move(const ParamLayout* lay, int rank, int ep_rank, float* ckpt, float* packed, int to_packed) {
    int ts[NUM_TENSORS];
    for (int u = 0; u < lay->num_units; u++) {
        if (!lay->units[u].held) continue;
        int k = unit_tensors(lay, u, ts);
        for (int i = 0; i < k; i++) {
            int t = ts[i];
            unit_tensor_copy(lay, t, rank, ep_rank, ckpt + unit_tensor_ckpt_offset(lay, u, t),
                             packed + lay->units[u].start + lay->unit_offset[t], to_packed);
        }
    }
}

// full (Psi values, checkpoint order) into packed (packed_size values: this tp rank's shards, pads
// zero); host FP32
static void layout_to_packed(const ParamLayout* lay, const float* ckpt, float* packed) {
    memset(packed, 0, lay->packed_size * sizeof(float));
    layout_move(lay, lay->tp_rank, lay->ep_rank, (float*)ckpt, packed, 1);
}

// packed (the shards of tp rank `rank` and the experts of ep rank ep_rank in a layout like lay) into their
// places in checkpoint order
static void layout_to_checkpoint_rank(const ParamLayout* lay, int rank, int ep_rank, const float* packed, float* ckpt) {
    layout_move(lay, rank, ep_rank, ckpt, (float*)packed, 0);
}

static void layout_to_checkpoint(const ParamLayout* lay, const float* packed, float* ckpt) {
    layout_to_checkpoint_rank(lay, lay->tp_rank, lay->ep_rank, packed, ckpt);
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
    // a moe layer (the fc fields above NULL): its router from the layer unit, its experts from the
    // experts unit (layer_attach_experts)
    floatX* router;    // (E, C)
    floatX* efcw;      // (E, 4*C, C)
    floatX* efcb;      // (E, 4*C)
    floatX* efcprojw;  // (E, C, 4*C)
    floatX* efcprojb;  // (E, C)
} LayerTensors;

typedef struct {
    floatX* lnfw;  // (C)
    floatX* lnfb;  // (C)
} FinalTensors;

static EmbedTensors embed_view(const ParamLayout* lay, floatX* unit) {
    EmbedTensors e = {unit + lay->unit_offset[T_WTE], unit + lay->unit_offset[T_WPE]};
    return e;
}
// the layer unit of layer l (unit: its packed vector); a moe layer's experts come with layer_attach_experts
static LayerTensors layer_view(const ParamLayout* lay, int l, floatX* unit) {
    const size_t* o = lay->unit_offset;
    LayerTensors w;
    memset(&w, 0, sizeof(w));
    w.ln1w = unit + o[T_LN1W]; w.ln1b = unit + o[T_LN1B]; w.qkvw = unit + o[T_QKVW]; w.qkvb = unit + o[T_QKVB];
    w.attprojw = unit + o[T_ATTPROJW]; w.attprojb = unit + o[T_ATTPROJB]; w.ln2w = unit + o[T_LN2W]; w.ln2b = unit + o[T_LN2B];
    if (layer_is_moe(lay->cfg, l)) {
        w.router = unit + o[T_ROUTER];
    } else {
        w.fcw = unit + o[T_FCW]; w.fcb = unit + o[T_FCB]; w.fcprojw = unit + o[T_FCPROJW]; w.fcprojb = unit + o[T_FCPROJB];
    }
    return w;
}
// the experts unit's packed vector `unit` into w (a moe layer's view)
static void layer_attach_experts(const ParamLayout* lay, LayerTensors* w, floatX* unit) {
    const size_t* o = lay->unit_offset;
    w->efcw = unit + o[T_EFCW]; w->efcb = unit + o[T_EFCB]; w->efcprojw = unit + o[T_EFCPROJW]; w->efcprojb = unit + o[T_EFCPROJB];
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
