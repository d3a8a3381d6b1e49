// tensor_parallel.h: Megatron tensor parallelism (Shoeybi et al. 2019, "Megatron-LM: Training
// Multi-Billion Parameter Language Models Using Model Parallelism", sec. 3), the operators the linear
// layers and the stage call. The tp group (llm/comm.h: consecutive world ranks) splits every weight
// matrix; how each tensor is split is the TPSplit column of the tensor table (llm/tensors.h).
//
// The two conjugate operators of sec. 3 (fig. 3), on the activations X (B,T,C):
//     f   before a column-parallel linear: identity in the forward (every tp rank has all of X), an
//         all-reduce of the input's gradient in the backward (each rank's columns of W give a part
//         of dX = dY W)
//     g   after a row-parallel linear: an all-reduce in the forward (each rank's rows of W^T give a
//         partial sum of Y = X W^T), identity in the backward (dY is the same on every rank)
// The MLP is fc (column-parallel, GELU local to the rank's 4C/T columns) then fcproj (row-parallel):
// one f and one g. Attention is QKV (column-parallel by heads: NH/T heads' q, k and v per rank, so
// the attention core needs no communication) then attproj (row-parallel): one f and one g. The bias
// of a row-parallel linear is added once, after the partial sums (here: by tp rank 0 before the
// all-reduce, the same sum). So each block costs 2 all-reduces of (B,T,C) forward and 2 backward
// (sec. 3: "2 all-reduces in the forward path and 2 in the backward path").
//
// The vocabulary-parallel embedding and LM head (sec. 3, "we parallelize the input embedding weight
// matrix along the vocabulary dimension"; the output layer's cross-entropy fused with it so that the
// (B,T,V) logits are never gathered): tp rank r holds rows [r Vp/T, (r+1) Vp/T) of the tied wte.
//     embedding  each rank looks up the tokens in its range (the others contribute zero), rank 0 adds
//                wpe, and an all-reduce sums: every rank gets wte[token] + wpe exactly (the one
//                non-zero term plus wpe is a single rounding, as in one process)
//     LM head    column-parallel over the vocabulary: logits (B,T,Vp/T) local; the cross-entropy
//                (llm/vocab_parallel_classifier.cuh) exchanges per row only (max, sum of exponentials,
//                target logit), 3 floats per rank; dlogits stay local; the head's input gradient is
//                the f all-reduce
// LayerNorms, wpe and the row-parallel biases are replicated: their inputs and output gradients are
// the same on every tp rank, so their gradients are too and they stay identical without communication.
#pragma once
#include "common.h"
#include "device.h"
#include "comm.h"
#include "encoder.cuh"
#include "fused_classifier.cuh"
#include "vocab_parallel_classifier.cuh"

// this rank's place in the tp group (size 1, comm NULL: no tensor parallelism)
typedef struct {
    Comm* comm;
    int size, rank;
} TPGroup;

static TPGroup tp_group(Comm* comm) {
    TPGroup g = {comm, comm ? comm_group_size(comm, GROUP_TP) : 1, comm ? comm_group_rank(comm, GROUP_TP) : 0};
    return g;
}

// the sum over the tp group of buf (n floatX, device), in place: g's forward, f's backward
static void tp_all_reduce(const TPGroup* g, floatX* buf, size_t n, cudaStream_t s) {
    if (g->size > 1) comm_all_reduce(g->comm, GROUP_TP, buf, buf, n, COMM_SUM, s);
}

// ----------------------------------------------------------------------------
// the vocabulary-parallel embedding: out (B,T,C) = wte[inp] + wpe, wte split by vocabulary rows

static void vp_embedding_forward(const TPGroup* g, floatX* out /*(B,T,C)*/, const int* inp /*(B,T) device*/,
                                 const floatX* wte /*(Vp/T, C)*/, const floatX* wpe /*(maxT, C)*/, int Vp,
                                 int B, int T, int C, cudaStream_t s) {
    int Vl = Vp / g->size;
    encoder_forward_range(out, inp, wte, g->rank == 0 ? wpe : NULL, g->rank * Vl, Vl, B, T, C, s);
    tp_all_reduce(g, out, (size_t)B * T * C, s);
}

// dwte (Vp/T, C) += the rows of this rank's tokens; dwpe (maxT, C) += on every rank (dout is the same)
static void vp_embedding_backward(const TPGroup* g, floatX* dwte, floatX* dwpe, float* scratch, const floatX* dout,
                                  const int* inp, const int* inp_host, int Vp, int B, int T, int C, cudaStream_t s) {
    int Vl = Vp / g->size;
    encoder_backward_range(dwte, dwpe, scratch, dout, inp, inp_host, g->rank * Vl, Vl, B, T, C, s);
}

// ----------------------------------------------------------------------------
// the vocabulary-parallel cross-entropy of the LM head's local logits (BT, Vp/T): losses (BT) on every
// rank, dlogits in place of the logits when write_dlogits. stats: (T + 1) * 3 * BT floats of device
// memory (this rank's row states, then every rank's, gathered).
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
