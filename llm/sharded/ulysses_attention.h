// ulysses_attention.h: context parallelism's DeepSpeed-Ulysses attention (--cp-impl ulysses) over the cp
// group (llm/sharded/cp_group.h), forward and backward.
//
//   Ulysses (--cp-impl ulysses; Jacobs et al. 2023, "DeepSpeed Ulysses", sec. 3.1): an all-to-all over cp
//   turns the sequence split of q, k, v into a head split (rank j gets every token of heads
//   [j H/N, (j+1) H/N)), the unchanged attention runs on the whole sequence for H/N heads, and an
//   all-to-all turns its output back. Sent per rank: (N-1)/N of each all-to-all's buffer: forward q,k,v
//   (3 slices of B T/N C b bytes) and out (1 slice); backward dout (1) and dq,dk,dv (3). The heads must
//   split: H divisible by tp x cp.
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../comm/comm.h"
#include "../ops/attention.cuh"
#include "../ops/rows.cuh"
#include "cp_group.h"

// send blocks j of `width` channels [j w, (j+1) w) of each of `parts` parts (part p at src + p*Ca) of the
// rank's tokens: send (N, B, Tl, parts * w)
static void cp_ulysses_pack(const CPGroup* g, floatX* send, const floatX* src, size_t src_ts, int parts, int B, int Tl,
                            int Ca, cudaStream_t s) {
    int N = g->size, w = Ca / N;
    size_t blk = (size_t)B * Tl * parts * w;
    for (int j = 0; j < N; j++)
        for (int p = 0; p < parts; p++)
            rows_copy(send + j * blk + (size_t)p * w, (size_t)Tl * parts * w, (size_t)parts * w, src + (size_t)p * Ca + (size_t)j * w,
                      (size_t)Tl * src_ts, src_ts, B, Tl, w, s);
}

// Between the all-to-all's blocks and the sequence order: blocks (N, B, Tl, rowlen), block i holding rank i's
// tokens (its chunks, cp_chunks), and seq (B, T, rowlen) in position order. to_seq = 1: seq = blocks reordered
// (after an all-to-all); 0: blocks = seq's rows by rank (before one).
static void cp_ulysses_reorder(const CPGroup* g, floatX* blocks, floatX* seq, int rowlen, int B, int to_seq, cudaStream_t s) {
    int N = g->size, Tl = cp_local_T(g), c = g->c;
    size_t blk = (size_t)B * Tl * rowlen, bbs = (size_t)Tl * rowlen, sbs = (size_t)g->T * rowlen;
    for (int i = 0; i < N; i++) {
        int ids[2];
        cp_chunks(g, i, ids);
        for (int k = 0; k < 2; k++) {
            floatX* b = blocks + i * blk + (size_t)k * c * rowlen;  // rank i's chunk k
            floatX* q = seq + (size_t)ids[k] * c * rowlen;          // its positions
            if (to_seq) rows_copy(q, sbs, rowlen, b, bbs, rowlen, B, c, rowlen, s);
            else rows_copy(b, bbs, rowlen, q, sbs, rowlen, B, c, rowlen, s);
        }
    }
}

// recv (N, B, Tl, parts * w): block j holds heads j's channels of every part; to dst (B, Tl, dst_ts), part p at p*Ca
static void cp_ulysses_unpack(const CPGroup* g, floatX* dst, size_t dst_ts, const floatX* recv, int parts, int B, int Tl,
                              int Ca, cudaStream_t s) {
    int N = g->size, w = Ca / N;
    size_t blk = (size_t)B * Tl * parts * w;
    for (int j = 0; j < N; j++)
        for (int p = 0; p < parts; p++)
            rows_copy(dst + (size_t)p * Ca + (size_t)j * w, (size_t)Tl * dst_ts, dst_ts, recv + j * blk + (size_t)p * w,
                      (size_t)Tl * parts * w, (size_t)parts * w, B, Tl, w, s);
}

// heads (B, T, 4 Ca/N): [q k v | out] of the rank's heads over the whole sequence, kept for the backward
static void cp_ulysses_forward(CPGroup* g, floatX* out /*(B,Tl,Ca)*/, float* lse /*(B,H/N,T)*/, floatX* heads,
                               const floatX* qkv /*(B,Tl,3Ca)*/, int B, int Tl, int Ca, int H, cudaStream_t s) {
    int N = g->size, w = Ca / N, T = g->T;
    size_t n3 = (size_t)B * Tl * 3 * w, n1 = (size_t)B * Tl * w;
    floatX* qkv_h = heads;                        // (B, T, 3w)
    floatX* out_h = heads + (size_t)B * T * 3 * w;  // (B, T, w)
    cp_ulysses_pack(g, g->send, qkv, 3 * Ca, 3, B, Tl, Ca, s);
    comm_all_to_all(g->comm, GROUP_CP, g->send, g->recv, n3, s);
    cp_ulysses_reorder(g, g->recv, qkv_h, 3 * w, B, 1, s);
    cp_time_begin(g, s);
    attention_forward(out_h, lse, qkv_h, B, T, w, H / N, s);
    cp_time_end(g, s);
    cp_ulysses_reorder(g, g->send, out_h, w, B, 0, s);
    comm_all_to_all(g->comm, GROUP_CP, g->send, g->recv, n1, s);
    cp_ulysses_unpack(g, out, Ca, g->recv, 1, B, Tl, Ca, s);
}

static void cp_ulysses_backward(CPGroup* g, floatX* dqkv /*(B,Tl,3Ca)*/, const floatX* dout /*(B,Tl,Ca)*/,
                                const floatX* heads /*(B,T,4Ca/N)*/, const float* lse, int B, int Tl, int Ca, int H,
                                cudaStream_t s) {
    int N = g->size, w = Ca / N, T = g->T;
    size_t n3 = (size_t)B * Tl * 3 * w, n1 = (size_t)B * Tl * w;
    const floatX* qkv_h = heads;
    const floatX* out_h = heads + (size_t)B * T * 3 * w;
    floatX* dout_h = g->dh;                         // (B, T, w)
    floatX* dqkv_h = g->dh + (size_t)B * T * w;     // (B, T, 3w)
    cp_ulysses_pack(g, g->send, dout, Ca, 1, B, Tl, Ca, s);
    comm_all_to_all(g->comm, GROUP_CP, g->send, g->recv, n1, s);
    cp_ulysses_reorder(g, g->recv, dout_h, w, B, 1, s);
    cp_time_begin(g, s);
    attention_backward(dqkv_h, g->scratch, dout_h, qkv_h, out_h, lse, B, T, w, H / N, s);
    cp_time_end(g, s);
    cp_ulysses_reorder(g, g->send, dqkv_h, 3 * w, B, 0, s);
    comm_all_to_all(g->comm, GROUP_CP, g->send, g->recv, n3, s);
    cp_ulysses_unpack(g, dqkv, 3 * Ca, g->recv, 3, B, Tl, Ca, s);
}
