// context_parallel.h: context parallelism, the sequence of every micro-batch split over the cp ranks of
// the mesh (llm/comm/mesh.h: the cp axis, next to tp in the rank order) inside attention too.
// Sequence parallelism (Korthikanti et al. 2022) splits the tokens only between the linear layers; the
// attention core still sees the whole sequence on every rank. Here each rank keeps its own tokens from
// the embedding to the loss: the embedding looks up its tokens at their positions, LayerNorms, the MLP and
// the residual adds are per token, the loss is the mean over its targets (the ranks' means are averaged:
// equally many tokens each). Only attention, where a query needs every earlier key, talks:
//
//   ring attention (--cp-impl ring: llm/sharded/ring_attention.h; Liu et al. 2023): each rank's K/V block
//   travels around the ring of N ranks, merged into each rank's queries with the online softmax
//   Ulysses (--cp-impl ulysses: llm/sharded/ulysses_attention.h; Jacobs et al. 2023): two all-to-alls turn
//   the sequence split into a head split around the unchanged attention and back
//   which chunks of the sequence a rank holds (--cp-balance zigzag | contiguous): llm/sharded/cp_group.h
//
// What the model calls, each the identity without cp (size 1), as tensor parallelism's operators are
// (llm/sharded/tensor_parallel.h), so that the model never asks which layout it runs in:
//     cp_local_tokens   the rank's tokens of a micro-batch's whole sequences (inputs, targets)
//     cp_local_wpe      the position embedding's rows of the rank's positions, for the encoder
//     cp_local_dwpe     where the encoder's backward writes their gradient; cp_local_dwpe_add adds it back
//                       into those rows of wpe's gradient
//     cp_mean_loss      the loss over the whole sequences: the mean of the ranks' means (equally many tokens)
//     context_attention_forward / _backward   the attention core: plain, ring or Ulysses
// Checked: test/test_cp.sh (every layout against one process, the ledger against the counts of the two
// algorithms' files, the activation bytes per rank against 1/N, which chunks each rank holds) and
// test/test_attention_ring.cu (the block pieces).
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../comm/comm.h"
#include "../ops/attention.cuh"
#include "../ops/residual.cuh"
#include "cp_group.h"
#include "ring_attention.h"
#include "ulysses_attention.h"

// ----------------------------------------------------------------------------
// the data boundary

// The stage's check of its sequence length T against the group (one line and the end of the program if not:
// the group splits sequences of T tokens into 2 x size chunks)
static void cp_check_sequence(const CPGroup* g, int T) {
    if (g->T != T || (g->size > 1 && T % (2 * g->size) != 0)) {  // (an odd T without cp trains)
        fatal("stage: the cp group splits sequences of %d tokens into 2 x %d chunks, the stage's are %d", g->T, g->size, T);
    }
}

// The rank's tokens (B, Tl) of a micro-batch's whole sequences src (B, T) (host): src itself without cp,
// else the group's buffer (valid until the next call)
static const int* cp_local_tokens(CPGroup* g, const int* src, int B) {
    if (g->size == 1) return src;
    int Tl = cp_local_T(g), ids[2];
    cp_chunks(g, g->rank, ids);
    for (int b = 0; b < B; b++)
        for (int k = 0; k < 2; k++)
            memcpy(g->tokens + (size_t)b * Tl + k * g->c, src + (size_t)b * g->T + (size_t)ids[k] * g->c, (size_t)g->c * sizeof(int));
    return g->tokens;
}

// The rows of the position embedding wpe (maxT, C) for the rank's positions, (Tl, C), in the order of its
// tokens, so that the unchanged encoder reads them as positions 0 .. Tl-1: wpe itself without cp
static const floatX* cp_local_wpe(CPGroup* g, const floatX* wpe, cudaStream_t s) {
    if (g->size == 1) return wpe;
    int ids[2];
    cp_chunks(g, g->rank, ids);
    size_t chunk = (size_t)g->c * g->C;
    for (int k = 0; k < 2; k++) copy_device_to_device(g->wpe + k * chunk, wpe + ids[k] * chunk, chunk * sizeof(floatX), s);
    return g->wpe;
}

// Where the encoder's backward adds the gradient of the rows cp_local_wpe gave: dwpe (maxT, C) itself without
// cp, else the group's (Tl, C) buffer, zeroed, which cp_local_dwpe_add then adds into those rows of dwpe
static floatX* cp_local_dwpe(CPGroup* g, floatX* dwpe, cudaStream_t s) {
    if (g->size == 1) return dwpe;
    device_memset_zero(g->dwpe, (size_t)cp_local_T(g) * g->C * sizeof(floatX), s);
    return g->dwpe;
}
static void cp_local_dwpe_add(CPGroup* g, floatX* dwpe, cudaStream_t s) {
    if (g->size == 1) return;
    int ids[2];
    cp_chunks(g, g->rank, ids);
    size_t chunk = (size_t)g->c * g->C;
    for (int k = 0; k < 2; k++) {
        floatX* rows = dwpe + ids[k] * chunk;
        residual_forward(rows, rows, g->dwpe + k * chunk, chunk, s);
    }
}

// The mean loss over the whole sequences from this rank's mean over its tokens (itself without cp): the mean
// of the ranks' means, each over Tl tokens. (A sum of the micro-batches' means, the same on every rank of the
// group after it.)
static double cp_mean_loss(CPGroup* g, double local) {
    if (g->size == 1) return local;
    float two[2] = {(float)local, (float)(local - (double)(float)local)};  // the double as two floats
    copy_to_device(g->loss, two, sizeof(two));
    comm_all_reduce(g->comm, GROUP_CP, g->loss, g->loss, 2, COMM_SUM, llm_ctx.stream);
    copy_to_host(two, g->loss, sizeof(two));
    return ((double)two[0] + (double)two[1]) / g->size;
}

// ----------------------------------------------------------------------------
// the block's attention core: plain attention (no cp), ring or Ulysses. qkv, out: the rank's Tl tokens.
// lse: (B, H, Tl) elements (Ulysses: (B, H/N, T), the same count). heads: Ulysses' kept head split
// (cp_heads_elems), else unused.

static void context_attention_forward(CPGroup* g, floatX* out, float* lse, floatX* heads, const floatX* qkv, int B, int Tl,
                                      int Ca, int H, cudaStream_t s) {
    if (g == NULL || g->size <= 1) attention_forward(out, lse, qkv, B, Tl, Ca, H, s);
    else if (g->impl == CP_RING) cp_ring_forward(g, out, lse, qkv, B, Tl, Ca, H, s);
    else cp_ulysses_forward(g, out, lse, heads, qkv, B, Tl, Ca, H, s);
}

// dqkv overwritten; scratch: the plain attention's (B,H,Tl) floats
static void context_attention_backward(CPGroup* g, floatX* dqkv, float* scratch, const floatX* dout, const floatX* qkv,
                                       const floatX* out, const float* lse, const floatX* heads, int B, int Tl, int Ca, int H,
                                       cudaStream_t s) {
    if (g == NULL || g->size <= 1) attention_backward(dqkv, scratch, dout, qkv, out, lse, B, Tl, Ca, H, s);
    else if (g->impl == CP_RING) cp_ring_backward(g, dqkv, dout, qkv, out, lse, B, Tl, Ca, H, s);
    else cp_ulysses_backward(g, dqkv, dout, heads, lse, B, Tl, Ca, H, s);
}
