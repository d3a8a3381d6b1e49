// op_profile.h: where a CPU step's time goes, op by op, measured by the ops themselves.
//
// Each op launcher opens one scope (OP_PROFILE(kind), context.h) and the CPU build's sgemm calls open a
// GEMM scope inside theirs (llm/ops/matmul_cpu.h). A scope's time goes to its kind less the time of the
// scopes nested in it, so matmul_forward's product counts as GEMM and its bias + GELU pass as "bias and
// GELU", and the kinds add up to the time spent inside ops; the step's time less that sum is what ran
// outside every op (zeroing the gradients, copies, the loop itself). Every GEMM's shape is kept, with its
// calls and time, so that a benchmark can run the same shapes bare and say how far the step's products
// are from the library's peak on them (dev/bench_train.cu's breakdown).
//
// Off unless a program turns it on (llm_ctx.prof.on = 1, the benchmark only): an off scope costs one
// branch. Wall-clock scopes measure an op only where it finishes before its launcher returns, which is the
// CPU build; in the kernel builds OP_PROFILE compiles to nothing.
#pragma once
#include "common.h"

typedef enum {
    OP_GEMM = 0,      // the products (sgemm), every shape
    OP_BIAS_GELU,     // the linear layers' bias, GELU and dGELU passes and the bias gradient (matmul's epilogues)
    OP_GELU,          // GELU on its own (where it is not fused into the product's epilogue)
    OP_ATTENTION,     // attention's forward and backward (scores, softmax, the weighted sum)
    OP_LAYERNORM,     // LayerNorm forward (with the fused residual add) and backward
    OP_RESIDUAL,      // the residual adds
    OP_ENCODER,       // token and position embeddings, forward and backward
    OP_CLASSIFIER,    // softmax + cross-entropy + its gradient over the vocabulary (the GEMMs excluded)
    OP_GRAD_NORM,     // the gradients' global norm
    OP_ADAMW,         // the optimizer's update
    OP_MOE,           // mixture of experts: the router, its losses, the permutation of tokens (the experts' GEMMs excluded)
    OP_NUM_KINDS
} OpKind;

static inline const char* op_kind_name(int k) {
    static const char* names[OP_NUM_KINDS] = {"GEMMs", "bias and GELU", "GELU", "attention", "LayerNorm", "residual",
                                              "embeddings", "classifier", "grad norm", "AdamW", "MoE routing"};
    return (k >= 0 && k < OP_NUM_KINDS) ? names[k] : "?";
}

#define OP_PROFILE_MAX_SHAPES 64
#define OP_PROFILE_MAX_DEPTH 8

// one GEMM shape: C (M,N) = op(A) (M,K) @ op(B) (K,N) + beta C, `batch` of them per call (row-major),
// A and B in FP32 (sgemm) or BF16 (sbgemm), C in FP32
typedef struct {
    int transA, transB, M, N, K, batch;
    float beta;
    int bf16;
    long calls;
    double ms;
} GemmShape;

typedef struct {
    int on;                                  // 1: scopes measure (off: one branch each)
    double ms[OP_NUM_KINDS];                 // exclusive time per kind since the last reset
    long calls[OP_NUM_KINDS];
    GemmShape shapes[OP_PROFILE_MAX_SHAPES]; // (n_shapes) every GEMM shape seen, in first-seen order
    int n_shapes;
    double child_ms[OP_PROFILE_MAX_DEPTH];   // per open scope: the time of the scopes nested in it
    int depth;                               // scopes open now
} OpProfile;

static inline void op_profile_reset(OpProfile* p) {
    int on = p->on;
    memset(p, 0, sizeof(*p));
    p->on = on;
}

static inline double op_profile_total_ms(const OpProfile* p) {
    double s = 0.0;
    for (int k = 0; k < OP_NUM_KINDS; k++) s += p->ms[k];
    return s;
}

// the same product (its calls and time aside)
static inline int gemm_shape_same(const GemmShape* a, const GemmShape* b) {
    return a->transA == b->transA && a->transB == b->transB && a->M == b->M && a->N == b->N && a->K == b->K &&
           a->batch == b->batch && a->beta == b->beta && a->bf16 == b->bf16;
}

// a GEMM call of SHAPE took MS: its row (added on first sight; past OP_PROFILE_MAX_SHAPES shapes the time
// still counts in ms[OP_GEMM], and the last row takes the calls)
static inline void op_profile_gemm(OpProfile* p, GemmShape shape, double ms) {
    int i = 0;
    while (i < p->n_shapes && !gemm_shape_same(&p->shapes[i], &shape)) i++;
    if (i == p->n_shapes) {
        if (p->n_shapes == OP_PROFILE_MAX_SHAPES) i = OP_PROFILE_MAX_SHAPES - 1;
        else { p->shapes[i] = shape; p->shapes[i].calls = 0; p->shapes[i].ms = 0.0; p->n_shapes++; }
    }
    p->shapes[i].calls++;
    p->shapes[i].ms += ms;
}

// One op's scope: from construction to destruction, its time less its nested scopes' goes to KIND.
// A NULL profile (profiling off) does nothing.
struct OpScope {
    OpProfile* p;
    OpKind kind;
    double t0;
    OpScope(OpProfile* prof, OpKind k) : p(prof != NULL && prof->on && prof->depth < OP_PROFILE_MAX_DEPTH ? prof : NULL),
                                         kind(k), t0(0.0) {
        if (p == NULL) return;
        p->child_ms[p->depth++] = 0.0;
        t0 = wall_ms();
    }
    // a GEMM scope, once its product is done: SHAPE's row takes the call and the time so far (nothing when off)
    void gemm(GemmShape shape) const {
        if (p != NULL) op_profile_gemm(p, shape, wall_ms() - t0);
    }
    ~OpScope() {
        if (p == NULL) return;
        double ms = wall_ms() - t0;
        p->depth--;
        p->ms[kind] += ms - p->child_ms[p->depth];
        p->calls[kind]++;
        if (p->depth > 0) p->child_ms[p->depth - 1] += ms;
    }
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;
};
