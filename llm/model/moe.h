// moe.h: the mixture-of-experts MLP of one layer, every expert in this process: forward and backward
// by hand. It replaces the dense MLP of llm/model/block.h (fc -> GELU -> fcproj) by E experts of that
// shape and a router (Shazeer et al. 2017; Switch Transformer, Fedus et al. 2021; GShard, Lepikhin et
// al. 2020; Megatron-Core's MoE layer):
//
//   x (N, C) -> router: logits, probs, top-k, gates, capacity drops (llm/ops/moe_router.cuh)
//            -> permute (llm/ops/moe_permute.cuh): the kept assignments' rows of x, expert-major   xp (Np, C)
//            -> expert e on its rows [off[e], off[e+1]): fch = xp Wfc_e^T + b, fch_gelu = GELU(fch),
//               yp = fch_gelu Wproj_e^T + b                                    yp (Np, C)
//            -> unpermute: y[n] = sum over n's kept assignments of gate * yp[row]   y (N, C)
//   plus the auxiliary load-balancing loss and the router z-loss, returned as values; their gradients
//   flow into the router logits in the backward, scaled by the caller's loss_scale.
//
// x is the output of LN2 and y what the residual add takes: a dropped assignment contributes zero (the
// token rides the residual, outside this layer).
//
// Each expert's two linears run through llm/model/linear.h (a replicated LinearSpec: OpenBLAS in the
// CPU build, cuBLASLt otherwise; GELU fused into fc's epilogue and dGELU into fcproj's backward as in
// block.h), one call per expert with rows: an expert with no row is skipped. A grouped GEMM (one launch
// over all experts) would replace the loop later. The host needs each expert's row count to launch
// them: the forward copies the routing's counts to the host (a device-to-host copy of 3E + 1 ints,
// which waits for the router's kernels), and the backward reuses that copy.
//
// FP8 (MoESpec.fp8, set by llm/model/stage.h's stage_enable_fp8 under --fp8): each expert's fc and fcproj run
// as FP8 linears (llm/precision/fp8_linear.h), each expert with its own entries (its own scales and, under
// delayed scaling, amax histories: slot fp8_expert_slot(layer, global expert, linear)), exactly as the dense
// MLP's fc and fcproj do; an expert skipped for having no row records nothing (fp8_step_end keeps its history).
// The router's product stays in FP32 (llm/ops/moe_router.cuh), as Megatron-Core and DeepSeek-V3 keep it.
//
// Parameters (MoETensors, floatX, one contiguous block in this order; gradients the same layout):
//   router (E, C), fcw (E, 4C, C), fcb (E, 4C), fcprojw (E, C, 4C), fcprojb (E, C)
// Expert parallelism (MoESpec.ep, llm/sharded/expert_parallel.h): this rank holds E/ep of the experts (the
// parameters' experts units hold them: w.fcw.. are (E/ep, ...)); xp's expert-major rows go to their experts' ranks
// (dispatch), the local experts run on the rows they received (xl, yl: Rl rows), and the outputs come back into yp
// (combine); the backward sends dyp and dxl the same two ways. Without it xl and yl are xp and yp.
// A micro-batch's tokens split over ranks (MoESpec.seq: context or sequence parallelism, llm/sharded/moe_sequence.h):
// the N tokens of a call are the rank's part of the micro-batch's; their logits are all-gathered and the routing (the
// capacity, the drops, both losses) is the whole micro-batch's, of which the rank keeps its tokens' part.
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "linear.h"
#include "../ops/moe_router.cuh"
#include "../ops/moe_permute.cuh"
#include "../sharded/expert_parallel.h"
#include "../sharded/moe_sequence.h"

typedef struct {
    int num_experts;        // E
    int top_k;              // K: 1 (Switch), 2 (GShard), any K <= E
    float capacity_factor;  // F: each expert keeps at most ceil(F K N / E) assignments per call; 0: no drops
    float aux_coef;         // the load-balancing loss's coefficient (Switch: 1e-2)
    float z_coef;           // the router z-loss's coefficient (ST-MoE: 1e-3)
    EPGroup* ep;            // expert parallelism: the group the experts are split over (size 1 or NULL: every expert here)
    Fp8State* fp8;          // FP8 experts (llm/precision/fp8_linear.h): the recipes' state; NULL: floatX
    int fp8_layer;          // FP8: this layer's index in the state's expert slots
    MoESeqGroup* seq;       // the ranks a micro-batch's tokens are split over (cp, tp with sp, or both); NULL or size 1: none
} MoESpec;

// one layer's MoE parameters (or their gradients): pointers into one floatX block, in this order
typedef struct {
    floatX* router;   // (E, C)
    floatX* fcw;      // (E, 4C, C)
    floatX* fcb;      // (E, 4C)
    floatX* fcprojw;  // (E, C, 4C)
    floatX* fcprojb;  // (E, C)
} MoETensors;

// the number of floatX values of one layer's MoE parameters
static inline size_t moe_param_count(const MoESpec* s, int C) {
    size_t E = (size_t)s->num_experts, c = (size_t)C;
    return E * c + E * 4 * c * c + E * 4 * c + E * c * 4 * c + E * c;
}

// the tensors of a block of moe_param_count values at p
static MoETensors moe_tensors_at(floatX* p, const MoESpec* s, int C) {
    size_t E = (size_t)s->num_experts, c = (size_t)C;
    MoETensors t;
    t.router = p;
    t.fcw = t.router + E * c;
    t.fcb = t.fcw + E * 4 * c * c;
    t.fcprojw = t.fcb + E * 4 * c;
    t.fcprojb = t.fcprojw + E * c * 4 * c;
    return t;
}

// ends the program with one line if the spec cannot run
static void moe_check(const MoESpec* s) {
    if (s->num_experts < 1 || s->top_k < 1 || s->top_k > s->num_experts) {
        fatal("moe: expected 1 <= top_k <= num_experts, found top_k %d, num_experts %d", s->top_k, s->num_experts);
    }
    if (!(s->capacity_factor >= 0.0f) || !(s->aux_coef >= 0.0f) || !(s->z_coef >= 0.0f)) {
        fatal("moe: expected capacity factor and loss coefficients >= 0, found %g, %g, %g", s->capacity_factor,
              s->aux_coef, s->z_coef);
    }
}

// the capacity of each expert in a call on N tokens: over the whole micro-batch's (its tokens split over s->seq)
static inline int moe_call_capacity(const MoESpec* s, int N) {
    return moe_capacity(s->capacity_factor, moe_seq_all(s->seq, N), s->num_experts, s->top_k);
}

// the rows the permuted layout can need: N K, or fewer when the capacity bounds them (E cap)
static inline int moe_max_rows(const MoESpec* s, int N) {
    int NK = N * s->top_k, cap = moe_call_capacity(s, N);
    long ecap = (long)cap * s->num_experts;
    return ecap < NK ? (int)ecap : NK;
}

// the rows the local experts can receive: every row (no expert parallelism), or the ep group's bound
static inline int moe_max_local_rows(const MoESpec* s, int N) {
    return ep_local_rows(s->ep, N, s->top_k, moe_call_capacity(s, N), moe_max_rows(s, N));
}

// what the forward keeps for the backward, per (layer, micro-batch) of N tokens (MEM_ACTIVATIONS), and
// the host copy of the counts and losses
typedef struct {
    MoERouting route;   // probs (N,E), lse (N), expert (N,K), gates (N,K), assign_row (N K), row_assign (N K),
                        // counts (3E+1), loss (2), routed_all (E); its scratch fields point into MoEBuffers
    floatX* xp;         // (R, C)  the permuted input, R = moe_max_rows (rows [0, Np) used)
    floatX* fch;        // (Rl, 4C) the local experts' fc outputs before GELU (Rl = moe_max_local_rows)
    floatX* fch_gelu;   // (Rl, 4C)
    floatX* yp;         // (R, C)  the experts' outputs for this rank's rows (the gates' gradient needs them)
    floatX* xl;         // (Rl, C) the local experts' input rows, expert-major (expert parallelism; else xp)
    floatX* yl;         // (Rl, C) their outputs (expert parallelism; else yp)
    void* mem;          // the one allocation the fields above point into
    int* counts_host;   // (3E+1) host: routed (E), dropped (E), offsets (E+1) of the last forward
    int* ep_recv;       // expert parallelism (host): (ep, E/ep) the rows each rank sent to each local expert
    int* ep_loff;       // (E/ep + 1) host: where each local expert's rows start in xl
    float loss_host[2]; // host: aux (with its coefficient), z (with its coefficient) of the last forward
    int N;              // tokens
} MoEActs;

// what one call borrows; shared by every layer (MEM_WORKSPACE)
typedef struct {
    float* logits;      // (N, E) router logits
    float* dlogits;     // (N, E)
    float* dgates;      // (N, K)
    int* cand;          // (N K) routing scratch
    int* cand_row;      // (N K)
    float* psum;        // (E)
    floatX* dyp;        // (R, C)
    floatX* dfch;       // (Rl, 4C)
    floatX* dxp;        // (R, C)
    floatX* dyl;        // (Rl, C) expert parallelism: dyp's rows at the local experts (else dyp)
    floatX* dxl;        // (Rl, C) the local experts' input gradient (else dxp)
    floatX* rm;         // (Rl, C) expert parallelism: the all-to-alls' rank-major rows (else none)
    float* scratch;     // (MATMUL_DBIAS_MAX_SPLITS * 4C) FP32 scratch of the bias gradients
    float* gathered;    // (Nall, E) tokens split over s->seq: the all-gathered logits, rank-major (else none)
    float* glogits;     // (Nall, E) them in the micro-batch's token order (else none)
    MoERouting whole;   // the whole micro-batch's routing, Nall tokens (else its fields NULL)
    void* mem;
} MoEBuffers;

typedef struct {
    void** ptr;
    size_t bytes;
} MoEField;

// points the n fields into one new allocation of `kind` (each on a 64-byte boundary) and returns it
static void* moe_carve(MoEField* f, int n, MemKind kind) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += ceil_div_sz(f[i].bytes, 64) * 64;
    char* mem = (char*)device_malloc(total, kind);
    char* p = mem;
    for (int i = 0; i < n; i++) {
        *f[i].ptr = p;
        p += ceil_div_sz(f[i].bytes, 64) * 64;
    }
    return mem;
}

static void moe_acts_alloc(MoEActs* a, const MoESpec* s, int N, int C) {
    moe_check(s);
    memset(a, 0, sizeof(*a));
    size_t E = (size_t)s->num_experts, NK = (size_t)N * s->top_k, R = (size_t)moe_max_rows(s, N), c = (size_t)C;
    size_t Rl = (size_t)moe_max_local_rows(s, N), ep = ep_own_rows(s->ep, Rl);  // (expert parallelism: xl and yl of their own)
    MoERouting* r = &a->route;
    MoEField f[] = {
        {(void**)&r->probs, (size_t)N * E * sizeof(float)}, {(void**)&r->lse, (size_t)N * sizeof(float)},
        {(void**)&r->expert, NK * sizeof(int)},             {(void**)&r->gates, NK * sizeof(float)},
        {(void**)&r->assign_row, NK * sizeof(int)},         {(void**)&r->row_assign, NK * sizeof(int)},
        {(void**)&r->counts, (3 * E + 1) * sizeof(int)},    {(void**)&r->loss, 2 * sizeof(float)},
        {(void**)&r->routed_all, E * sizeof(int)},
        {(void**)&a->xp, R * c * sizeof(floatX)},           {(void**)&a->fch, Rl * 4 * c * sizeof(floatX)},
        {(void**)&a->fch_gelu, Rl * 4 * c * sizeof(floatX)}, {(void**)&a->yp, R * c * sizeof(floatX)},
        {(void**)&a->xl, ep * c * sizeof(floatX)},          {(void**)&a->yl, ep * c * sizeof(floatX)},
    };
    a->mem = moe_carve(f, (int)(sizeof(f) / sizeof(f[0])), MEM_ACTIVATIONS);
    ep_alias(s->ep, &a->xl, a->xp);
    ep_alias(s->ep, &a->yl, a->yp);
    a->counts_host = (int*)mallocCheck((3 * E + 1) * sizeof(int));
    ep_counts_alloc(s->ep, &a->ep_recv, &a->ep_loff);
    a->N = N;
}

static void moe_acts_free(MoEActs* a) {
    device_free(a->mem);
    free(a->counts_host);
    free(a->ep_recv);
    free(a->ep_loff);
    memset(a, 0, sizeof(*a));
}

static void moe_buffers_alloc(MoEBuffers* b, const MoESpec* s, int N, int C) {
    moe_check(s);
    memset(b, 0, sizeof(*b));
    size_t E = (size_t)s->num_experts, NK = (size_t)N * s->top_k, R = (size_t)moe_max_rows(s, N), c = (size_t)C;
    size_t Rl = (size_t)moe_max_local_rows(s, N), ep = ep_own_rows(s->ep, Rl);
    MoEField f[] = {
        {(void**)&b->logits, (size_t)N * E * sizeof(float)}, {(void**)&b->dlogits, (size_t)N * E * sizeof(float)},
        {(void**)&b->dgates, NK * sizeof(float)},            {(void**)&b->cand, NK * sizeof(int)},
        {(void**)&b->cand_row, NK * sizeof(int)},            {(void**)&b->psum, E * sizeof(float)},
        {(void**)&b->dyp, R * c * sizeof(floatX)},           {(void**)&b->dfch, Rl * 4 * c * sizeof(floatX)},
        {(void**)&b->dxp, R * c * sizeof(floatX)},
        {(void**)&b->scratch, (size_t)MATMUL_DBIAS_MAX_SPLITS * 4 * c * sizeof(float)},
        {(void**)&b->dyl, ep * c * sizeof(floatX)},          {(void**)&b->dxl, ep * c * sizeof(floatX)},
        {(void**)&b->rm, ep * c * sizeof(floatX)},
    };
    // the whole micro-batch's routing (tokens split over s->seq): its Nall tokens' arrays; else none (count 0)
    size_t A = moe_seq_split(s->seq) ? (size_t)moe_seq_all(s->seq, N) : 0, AK = A * s->top_k, Es = A ? E : 0;
    MoERouting* w = &b->whole;
    MoEField g[] = {
        {(void**)&b->gathered, A * E * sizeof(float)},      {(void**)&b->glogits, A * E * sizeof(float)},
        {(void**)&w->probs, A * E * sizeof(float)},         {(void**)&w->lse, A * sizeof(float)},
        {(void**)&w->expert, AK * sizeof(int)},             {(void**)&w->gates, AK * sizeof(float)},
        {(void**)&w->assign_row, AK * sizeof(int)},         {(void**)&w->row_assign, AK * sizeof(int)},
        {(void**)&w->counts, A ? (3 * E + 1) * sizeof(int) : 0}, {(void**)&w->loss, A ? 2 * sizeof(float) : 0},
        {(void**)&w->cand, AK * sizeof(int)},               {(void**)&w->cand_row, AK * sizeof(int)},
        {(void**)&w->psum, Es * sizeof(float)},
    };
    MoEField all[sizeof(f) / sizeof(f[0]) + sizeof(g) / sizeof(g[0])];
    memcpy(all, f, sizeof(f));
    memcpy(all + sizeof(f) / sizeof(f[0]), g, sizeof(g));
    b->mem = moe_carve(all, (int)(sizeof(all) / sizeof(all[0])), MEM_WORKSPACE);
    if (A == 0) { b->gathered = b->glogits = NULL; memset(w, 0, sizeof(*w)); }
    ep_alias(s->ep, &b->dyl, b->dyp);
    ep_alias(s->ep, &b->dxl, b->dxp);
}

static void moe_buffers_free(MoEBuffers* b) {
    device_free(b->mem);
    memset(b, 0, sizeof(*b));
}

// the counts of the last forward (host): routed and dropped assignments per expert, the row offsets (E+1)
static inline const int* moe_stats_routed(const MoEActs* a) { return a->counts_host; }
static inline const int* moe_stats_dropped(const MoEActs* a, const MoESpec* s) { return a->counts_host + s->num_experts; }
static inline const int* moe_stats_offsets(const MoEActs* a, const MoESpec* s) { return a->counts_host + 2 * s->num_experts; }

// n bytes from the device to the host, after the work queued on stream st (the kernel builds wait for it)
static void moe_copy_to_host(void* dst, const void* src, size_t n, cudaStream_t st) {
#if LLM_HAS_KERNELS
    cudaCheck(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, st));
    cudaCheck(cudaStreamSynchronize(st));
#else
    (void)st;
    memcpy(dst, src, n);
#endif
}

// the global index of local expert 0: every expert here, or this rank's first of E/ep
static inline int moe_first_expert(const MoESpec* s) { return ep_local(s->ep) ? 0 : s->ep->rank * s->ep->El; }

// local expert e's two linears: replicated, fc with GELU; FP8 ones with the expert's own entries under s->fp8
static void moe_expert_specs(const MoESpec* s, int e, int C, LinearSpec* fc, LinearSpec* fcproj) {
    TPGroup one = tp_group(NULL, 0);
    *fc = linear_spec_tp("moe_fc", C, 4 * C, 1, LINEAR_REPLICATED, one);
    *fcproj = linear_spec_tp("moe_fcproj", 4 * C, C, 0, LINEAR_REPLICATED, one);
    if (s->fp8 == NULL) return;
    int g = moe_first_expert(s) + e;
    linear_set_fp8(fc, s->fp8, fp8_expert_slot(s->fp8, s->fp8_layer, g, 0));
    linear_set_fp8(fcproj, s->fp8, fp8_expert_slot(s->fp8, s->fp8_layer, g, 1));
}

// ----------------------------------------------------------------------------
// forward and backward

// y (N,C) from x (N,C), both device arrays (x: LN2's output); bias: the selection bias (E) FP32 or NULL.
// Fills a (routing, the experts' activations) and its host counts and losses (a->loss_host: aux, z).
static void moe_forward(const MoESpec* s, MoETensors w, const float* bias /*(E) or NULL*/, MoEActs* a,
                        const MoEBuffers* buf, const floatX* x /*(N,C)*/, floatX* y /*(N,C)*/, int N, int C,
                        cudaStream_t st) {
    int E = s->num_experts, K = s->top_k, cap = moe_call_capacity(s, N);
    if (N != a->N) fatal("moe_forward: activations for %d tokens, called with %d", a->N, N);
    MoERouting r = a->route;
    r.cand = buf->cand;
    r.cand_row = buf->cand_row;
    r.psum = buf->psum;
    moe_router_logits_forward(buf->logits, x, w.router, N, C, E, st);
    if (moe_seq_split(s->seq)) {  // the whole micro-batch's routing, and this rank's part of it
        int Nall = moe_seq_all(s->seq, N);
        moe_seq_gather_logits(s->seq, buf->glogits, buf->gathered, buf->logits, N, E, st);
        moe_route_forward(&buf->whole, buf->glogits, bias, Nall, E, K, cap, s->aux_coef, s->z_coef, st);
        moe_seq_local_routing(s->seq, &r, &buf->whole, N, E, K, st);
    } else {
        moe_route_forward(&r, buf->logits, bias, N, E, K, cap, s->aux_coef, s->z_coef, st);
    }
    // the host launches each expert's GEMMs on its rows: the counts and offsets come back first
    moe_copy_to_host(a->counts_host, r.counts, (3 * (size_t)E + 1) * sizeof(int), st);
    moe_copy_to_host(a->loss_host, r.loss, 2 * sizeof(float), st);
    const int* off = a->counts_host + 2 * E;
    moe_permute_forward(a->xp, x, r.row_assign, off[E], K, C, st);
    // the rows of the experts this rank runs: every expert's (lo = off), or, with expert parallelism, those the
    // ep group sent to its E/ep experts (lo = ep_loff); without it the exchange and the dispatch are the identity
    ep_exchange_counts(s->ep, off, a->ep_recv, a->ep_loff, st);
    ep_dispatch(s->ep, a->xp, off, a->ep_recv, a->ep_loff, buf->rm, a->xl, C, st);
    const int* lo;
    int El = ep_local_experts(s->ep, E, off, a->ep_loff, &lo);
    LinearSpec fc, fcproj;
    size_t c = (size_t)C;
    for (int e = 0; e < El; e++) {
        int rows = lo[e + 1] - lo[e];
        if (rows == 0) continue;
        moe_expert_specs(s, e, C, &fc, &fcproj);
        size_t o = (size_t)lo[e];
        linear_forward(&fc, a->fch_gelu + o * 4 * c, a->fch + o * 4 * c, a->xl + o * c, w.fcw + (size_t)e * 4 * c * c,
                       w.fcb + (size_t)e * 4 * c, rows, st);
        linear_forward(&fcproj, a->yl + o * c, NULL, a->fch_gelu + o * 4 * c, w.fcprojw + (size_t)e * c * 4 * c,
                       w.fcprojb + (size_t)e * c, rows, st);
    }
    ep_combine(s->ep, a->yl, off, a->ep_recv, a->ep_loff, buf->rm, a->yp, C, st);
    moe_unpermute_forward(y, a->yp, r.assign_row, r.gates, N, K, C, st);
}

// dx (N,C), overwritten: the gradient of x through the experts and the router, given dy (N,C) and
// loss_scale, the gradient of the caller's total loss w.r.t. this layer's aux and z losses (e.g.
// 1/grad_accum_steps). gw: the parameters' gradients, accumulated (+=). a: the forward's activations
// (its host offsets included).
static void moe_backward(const MoESpec* s, MoETensors w, MoETensors gw, const MoEActs* a, const MoEBuffers* buf,
                         const floatX* x /*(N,C)*/, const floatX* dy /*(N,C)*/, floatX* dx /*(N,C)*/, float loss_scale,
                         int N, int C, cudaStream_t st) {
    int E = s->num_experts, K = s->top_k;
    const MoERouting* r = &a->route;
    const int* off = a->counts_host + 2 * E;
    size_t c = (size_t)C;
    moe_unpermute_backward(buf->dyp, buf->dgates, dy, a->yp, r->assign_row, r->gates, N, K, C, st);
    ep_dispatch(s->ep, buf->dyp, off, a->ep_recv, a->ep_loff, buf->rm, buf->dyl, C, st);  // the forward's counts
    const int* lo;  // the local experts' rows, as in the forward
    int El = ep_local_experts(s->ep, E, off, a->ep_loff, &lo);
    LinearSpec fc, fcproj;
    for (int e = 0; e < El; e++) {
        int rows = lo[e + 1] - lo[e];
        if (rows == 0) continue;
        moe_expert_specs(s, e, C, &fc, &fcproj);
        size_t o = (size_t)lo[e];
        // fcproj's backward fuses fc's dGELU: dfch = d fch
        linear_backward(&fcproj, buf->dfch + o * 4 * c, gw.fcprojw + (size_t)e * c * 4 * c, gw.fcprojb + (size_t)e * c,
                        buf->dyl + o * c, a->fch_gelu + o * 4 * c, w.fcprojw + (size_t)e * c * 4 * c, buf->scratch,
                        a->fch + o * 4 * c, rows, st);
        linear_backward(&fc, buf->dxl + o * c, gw.fcw + (size_t)e * 4 * c * c, gw.fcb + (size_t)e * 4 * c,
                        buf->dfch + o * 4 * c, a->xl + o * c, w.fcw + (size_t)e * 4 * c * c, buf->scratch, NULL, rows, st);
    }
    ep_combine(s->ep, buf->dxl, off, a->ep_recv, a->ep_loff, buf->rm, buf->dxp, C, st);
    moe_permute_backward(dx, buf->dxp, r->assign_row, N, K, C, st);
    if (moe_seq_split(s->seq)) {  // the losses are the whole micro-batch's (llm/sharded/moe_sequence.h)
        moe_route_backward(buf->dlogits, r, buf->dgates, N, E, K, s->aux_coef, s->z_coef, loss_scale * s->seq->grad_factor,
                           st, r->routed_all, moe_seq_all(s->seq, N));
    } else {
        moe_route_backward(buf->dlogits, r, buf->dgates, N, E, K, s->aux_coef, s->z_coef, loss_scale, st);
    }
    moe_router_logits_backward(dx, gw.router, buf->dlogits, x, w.router, N, C, E, st);
}
