// tensor_parallel.h: Megatron tensor parallelism (Shoeybi et al. 2019, "Megatron-LM: Training
// Multi-Billion Parameter Language Models Using Model Parallelism", sec. 3), the operators the linear
// layers and the stage call. The tp group (llm/comm/comm.h: consecutive world ranks) splits every weight
// matrix; how each tensor is split is the TPSplit column of the tensor table (llm/model/tensors.h), and
// each linear layer's style (column- or row-parallel) follows from its weight's (llm/model/linear.h:
// linear_spec_of).
//
// The two conjugate operators of sec. 3 (fig. 3), on the activations X (B,T,C):
//     f   before a column-parallel linear: identity in the forward (every tp rank has all of X), an
//         all-reduce of the input's gradient in the backward (each rank's columns of W give a part
//         of dX = dY W)
//     g   after a row-parallel linear: an all-reduce in the forward (each rank's rows of W^T give a
//         partial sum of Y = X W^T), identity in the backward (dY is the same on every rank)
// The MLP is fc (column-parallel, GELU local to the rank's 4C/tp columns) then fcproj (row-parallel):
// one f and one g. Attention is QKV (column-parallel by heads: NH/tp heads' q, k and v per rank, so
// the attention core needs no communication) then attproj (row-parallel): one f and one g. The bias
// of a row-parallel linear is added once, after the partial sums (here: by tp rank 0 before the
// all-reduce, the same sum). So each block costs 2 all-reduces of (B,T,C) forward and 2 backward,
// the count of sec. 3.
//
// The vocabulary-parallel embedding and LM head (sec. 3: the embedding matrix split along the
// vocabulary, and the cross-entropy fused with the output layer so that the (B,T,V) logits are never
// gathered): tp rank r holds rows [r Vp/tp, (r+1) Vp/tp) of the tied wte.
//     embedding  each rank looks up the tokens in its range (the others contribute zero), rank 0 adds
//                wpe, and an all-reduce sums: every rank gets wte[token] + wpe exactly (the one
//                non-zero term plus wpe is a single rounding, as in one process)
//     LM head    column-parallel over the vocabulary: logits (B,T,Vp/tp) local; the cross-entropy
//                (llm/ops/vocab_parallel_classifier.cuh) exchanges per row only (max, sum of exponentials,
//                target logit), 3 floats per rank; dlogits stay local; the head's input gradient is
//                the f all-reduce
// LayerNorms, wpe and the row-parallel biases are replicated: their inputs and output gradients are
// the same on every tp rank, so their gradients are too and they stay identical without communication.
// Checked: test/test_tp_ops.cu (f and g, forward and backward, exactly, on integer-valued inputs),
// test/kernels/vocab_parallel.h (the split embedding and cross-entropy against the unsplit ones) and
// test/test_tp.sh (every layout against one process; the ledger against the counts above).
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../comm/comm.h"
#include "../ops/encoder.cuh"
#include "../ops/fused_classifier.cuh"
#include "../ops/vocab_parallel_classifier.cuh"

// The models tensor parallelism can split over tp_size ranks, or one line saying why not (NULL: fine). Every split
// dimension must divide evenly: the heads, C (row-parallel columns), 4C, and the padded vocabulary.
static const char* tp_layout_error(int num_heads, int padded_vocab, int channels, int tp_size, char* buf, size_t n) {
    if (tp_size < 1) { snprintf(buf, n, "--tp %d: expected a positive number of tensor-parallel ranks", tp_size); return buf; }
    if (num_heads % tp_size != 0 || padded_vocab % tp_size != 0) {
        snprintf(buf, n, "--tp %d: expected the heads (NH = %d) and the padded vocabulary (Vp = %d) to divide evenly "
                 "over the tensor-parallel ranks", tp_size, num_heads, padded_vocab);
        return buf;
    }
#if LLM_HAS_KERNELS
    // the kernels read rows of the split tensors 16 bytes at a time
    if ((channels / tp_size) % 8 != 0) {
        snprintf(buf, n, "--tp %d: expected C / tp = %d / %d to be a multiple of 8 (16-byte rows of the split tensors "
                 "for the kernels' 128-bit loads)", tp_size, channels, tp_size);
        return buf;
    }
#endif
    return NULL;
}

// this rank's place in the tp group (size 1, comm NULL: no tensor parallelism), and whether the
// regions between the linear layers are sequence-parallel (with their two workspace buffers, set by
// the stage that owns them)
typedef struct {
    Comm* comm;
    int size, rank;
    int sequence_parallel;  // 1: LayerNorms, residual adds and the embedding's output hold 1/size of the tokens
    floatX* gathered;       // (B*T, C) a column-parallel layer's all-gathered input
    floatX* full;           // (B*T, C) a row-parallel layer's output before the reduce-scatter, a column-
                            // parallel layer's input gradient before it, a gathered output gradient
} TPGroup;

// sequence_parallel only takes effect with more than one tp rank
static TPGroup tp_group(Comm* comm, int sequence_parallel) {
    TPGroup g = {comm, comm ? comm_group_size(comm, GROUP_TP) : 1, comm ? comm_group_rank(comm, GROUP_TP) : 0, 0, NULL, NULL};
    g.sequence_parallel = sequence_parallel && g.size > 1;
    return g;
}

// the tokens of a micro-batch of BT that this rank holds in a sequence-parallel region
static inline int tp_rows(const TPGroup* g, int BT) { return g->sequence_parallel ? BT / g->size : BT; }

// the checks of a stage's shapes against the group (each ends the program with one line): sequence
// parallelism splits the T tokens of each sequence evenly; the parameters are this tp rank's shards
static void tp_check_sequence(const TPGroup* g, int T) {
    if (g->sequence_parallel && T % g->size != 0) {
        fatal("--sequence-parallel: expected the sequence length T = %d to divide evenly over --tp %d", T, g->size);
    }
}
static void tp_check_shards(const TPGroup* g, int shards_tp_size, int shards_tp_rank) {
    if (g->size != shards_tp_size || g->rank != shards_tp_rank) {
        fatal("stage: the parameter layout holds tp rank %d of %d, the process is tp rank %d of %d", shards_tp_rank,
              shards_tp_size, g->rank, g->size);
    }
}

// the sum over the tp group of buf (n floatX, device), in place: g's forward, f's backward
static void tp_all_reduce(const TPGroup* g, floatX* buf, size_t n, cudaStream_t s) {
    if (g->size > 1) comm_all_reduce(g->comm, GROUP_TP, buf, buf, n, COMM_SUM, s);
}

// Sequence parallelism (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models", sec. 4.2.2): the LayerNorms, the residual adds and the embedding's output, which
// tensor parallelism leaves replicated, work on 1/tp of the tokens (the B*T tokens of a micro-batch in
// tp contiguous blocks: with B = 1 the sequence split of the paper, in general a split of the tokens,
// which is the same to these per-token ops). f becomes an all-gather of the tokens before each
// column-parallel linear (its backward a reduce-scatter of the input gradient), g a reduce-scatter
// after each row-parallel linear (its backward an all-gather of the output gradient): an all-reduce
// is a reduce-scatter plus an all-gather, so the bytes are those of the all-reduces they replace. The
// gathered input of a column-parallel linear is not kept for its weight gradient: the backward
// gathers it again, as Megatron does (2 more all-gathers per layer, the memory of 2 full (B,T,C)
// inputs per layer saved). The LayerNorms' parameter gradients are then partial sums over each rank's
// tokens: llm/parallel/dp.h all-reduces them over tp once per step (the TP_NORM tensors of llm/model/tensors.h).

// ----------------------------------------------------------------------------
// the vocabulary-parallel embedding: out = wte[inp] + wpe, wte split by vocabulary rows; out is
// (B,T,C), or with sequence parallelism this rank's (B*T/tp, C) block of it (a reduce-scatter
// instead of the all-reduce)

static void vp_embedding_forward(const TPGroup* g, floatX* out, const int* inp /*(B,T) device*/,
                                 const floatX* wte /*(Vp/tp, C)*/, const floatX* wpe /*(maxT, C)*/, int Vp,
                                 int B, int T, int C, cudaStream_t s) {
    int Vl = Vp / g->size;
    size_t BTC = (size_t)B * T * C;
    floatX* whole = g->sequence_parallel ? g->full : out;  // (B,T,C): this rank's vocabulary's part
    encoder_forward_range(whole, inp, wte, g->rank == 0 ? wpe : NULL, g->rank * Vl, Vl, B, T, C, s);
    if (g->sequence_parallel) comm_reduce_scatter(g->comm, GROUP_TP, whole, out, BTC / g->size, COMM_SUM, s);
    else tp_all_reduce(g, out, BTC, s);
}

// dwte (Vp/tp, C) += the rows of this rank's tokens; dwpe (maxT, C) += on every rank (the output's
// gradient is the same on every rank: with sequence parallelism it is all-gathered first)
static void vp_embedding_backward(const TPGroup* g, floatX* dwte, floatX* dwpe, float* scratch, const floatX* dout,
                                  const int* inp, const int* inp_host, int Vp, int B, int T, int C, cudaStream_t s) {
    int Vl = Vp / g->size;
    if (g->sequence_parallel) {
        comm_all_gather(g->comm, GROUP_TP, dout, g->full, (size_t)B * T * C / g->size, s);
        dout = g->full;
    }
    encoder_backward_range(dwte, dwpe, scratch, dout, inp, inp_host, g->rank * Vl, Vl, B, T, C, s);
}

// ----------------------------------------------------------------------------
// the vocabulary-parallel cross-entropy of the LM head's local logits (BT, Vp/tp): losses (BT) on every
// rank, dlogits in place of the logits when write_dlogits. stats: vp_stats_elems floats of device memory
// (this rank's row states, then every rank's, gathered).
static inline size_t vp_stats_elems(const TPGroup* g, int BT) { return g->size > 1 ? (size_t)(g->size + 1) * 3 * BT : 0; }

static void vp_cross_entropy(const TPGroup* g, floatX* logits, float* losses, float dloss, const int* targets, float* stats,
                             int BT, int V, int Vp, int write_dlogits, cudaStream_t s) {
    if (g->size == 1) {  // one rank: the fused one-pass classifier
        fused_classifier(logits, losses, dloss, targets, BT, V, Vp, write_dlogits, s);
        return;
    }
    int Vl = Vp / g->size;
    float* mine = stats + (size_t)g->size * 3 * BT;
    vp_classifier_stats(mine, logits, targets, g->rank * Vl, Vl, V, BT, s);
    comm_all_gather(g->comm, GROUP_TP, mine, stats, (size_t)3 * BT, s);
    vp_classifier_finish(logits, losses, stats, g->size, dloss, targets, g->rank * Vl, Vl, V, BT, write_dlogits, s);
}

// The whole vocabulary's logits of one position (decoding: the sampler), from this rank's Vp/tp: gathered into
// all (vp_gather_elems: Vp elements with more than one tp rank, none without, where they are the local ones).
// Returns where they are. The training loss never gathers them (vp_cross_entropy).
static inline size_t vp_gather_elems(const TPGroup* g, int Vp) { return g->size > 1 ? (size_t)Vp : 0; }
static const floatX* vp_gather_logits(const TPGroup* g, const floatX* logits /*(Vp/tp)*/, floatX* all /*(Vp)*/, int Vp,
                                      cudaStream_t s) {
    if (g->size == 1) return logits;
    comm_all_gather(g->comm, GROUP_TP, logits, all, (size_t)(Vp / g->size), s);
    return all;
}
