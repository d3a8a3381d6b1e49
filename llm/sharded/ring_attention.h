// ring_attention.h: context parallelism's ring attention (--cp-impl ring, the default) over the cp group
// (llm/sharded/cp_group.h), forward and backward.
//
//   ring attention (--cp-impl ring; Liu et al. 2023, "Ring Attention with Blockwise Transformers for
//   Near-Infinite Context", sec. 3): the K/V block of each rank travels around the ring of N ranks; at
//   step s rank r holds the block of rank r - s, computes its queries against it while the next block is
//   already on its way, and merges the partial result with the online softmax (Milakov & Gimelshein 2018;
//   the block pieces of llm/ops/attention_ring.cuh, whose CPU reference is llm/ops/attention_blocks.h; rows
//   move between buffers with llm/ops/rows.cuh).
//   The backward sends the K/V blocks around again, and each block's dK/dV accumulator travels with it
//   back to its owner. Sent per rank, per layer and micro-batch, with S = B (T/N) 2 C bytes of K/V in
//   floatX (b bytes each) and 2 C (T/N) B 4 bytes of FP32 dK/dV:
//       forward   (N-1) K/V blocks                        (N-1) b B T/N 2C
//       backward  (N-1) K/V blocks + (N-1) dK/dV blocks   (N-1) (b + 4) B T/N 2C
//   (a block's dK/dV accumulator starts one rank on and reaches its owner after N-1 hops, where the owner adds
//   its own queries' part last).
//   Causal blocks: a pair (query chunk, key chunk) is skipped when every key is after every query,
//   masked on its diagonal, full below it.
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../comm/comm.h"
#include "../ops/attention_ring.cuh"
#include "../ops/rows.cuh"
#include "cp_group.h"

// one ring step's exchange, blocking: send `mine` to the next rank, receive the previous rank's into `next`
static void cp_ring_exchange(CPGroup* g, const void* mine, void* next, size_t n, CommDtype dt, cudaStream_t s) {
    int N = g->size, r = g->rank;
    CommExchange x = comm_exchange_start(g->comm, GROUP_CP, mine, next, n, (r + 1) % N, (r + N - 1) % N, dt, s);
    comm_exchange_wait(g->comm, &x);
}

// K and V of the rank's tokens out of qkv (B, Tl, 3Ca) into kv (B, Tl, 2Ca)
static void cp_pack_kv(const CPGroup* g, floatX* kv, const floatX* qkv, int B, int Tl, int Ca, cudaStream_t s) {
    (void)g;
    rows_copy(kv, (size_t)Tl * 2 * Ca, 2 * Ca, qkv + Ca, (size_t)Tl * 3 * Ca, 3 * Ca, B, Tl, 2 * Ca, s);
}

// calls f(qi, ki, causal) for the block pairs of the rank's query chunks against the key chunks of rank o
// that are not fully masked
template <class F>
static void cp_ring_pairs(const CPGroup* g, int o, F f) {
    int mine[2], theirs[2];
    cp_chunks(g, g->rank, mine);
    cp_chunks(g, o, theirs);
    for (int qi = 0; qi < 2; qi++)
        for (int ki = 0; ki < 2; ki++)
            if (theirs[ki] <= mine[qi]) f(qi, ki, theirs[ki] == mine[qi]);
}

static void cp_ring_forward(CPGroup* g, floatX* out /*(B,Tl,Ca)*/, float* lse /*(B,H,Tl)*/, const floatX* qkv /*(B,Tl,3Ca)*/,
                            int B, int Tl, int Ca, int H, cudaStream_t s) {
    int N = g->size, r = g->rank, c = g->c, hs = Ca / H;
    size_t o_elems = (size_t)B * H * c * hs, ml = (size_t)B * H * c;
    float* O[2] = {g->acc, g->acc + o_elems};
    float* m[2] = {g->acc + 2 * o_elems, g->acc + 2 * o_elems + ml};
    float* l[2] = {g->acc + 2 * o_elems + 2 * ml, g->acc + 2 * o_elems + 3 * ml};
    for (int k = 0; k < 2; k++) attention_pair_init(O[k], m[k], l[k], B, H, c, hs, s);
    cp_pack_kv(g, g->kv[0], qkv, B, Tl, Ca, s);
    size_t q_bs = (size_t)Tl * 3 * Ca, kv_bs = (size_t)Tl * 2 * Ca, n_kv = (size_t)B * Tl * 2 * Ca;
    for (int step = 0; step < N; step++) {
        int o = (r - step + N) % N, cur = step % 2;
        const floatX* kv = g->kv[cur];
        CommExchange ahead;  // the next block on its way (from rank r-1; this one to r+1) while this one is computed
        if (step < N - 1) ahead = comm_exchange_start(g->comm, GROUP_CP, kv, g->kv[1 - cur], n_kv, (r + 1) % N, (r + N - 1) % N, comm_dtype_of(kv), s);
        cp_time_begin(g, s);
        cp_ring_pairs(g, o, [&](int qi, int ki, int causal) {
            attention_pair_forward(O[qi], m[qi], l[qi], qkv + (size_t)qi * c * 3 * Ca, q_bs, 3 * Ca,
                                   kv + (size_t)ki * c * 2 * Ca, kv + (size_t)ki * c * 2 * Ca + Ca, kv_bs, 2 * Ca,
                                   B, H, hs, c, c, causal, s);
        });
        cp_time_end(g, s);
        if (step < N - 1) comm_exchange_wait(g->comm, &ahead);
    }
    cp_time_begin(g, s);
    for (int k = 0; k < 2; k++) {
        attention_pair_finalise(out + (size_t)k * c * Ca, (size_t)Tl * Ca, Ca, lse + (size_t)k * c, Tl, O[k], m[k], l[k], B,
                                H, hs, c, s);
    }
    cp_time_end(g, s);
}

static void cp_ring_backward(CPGroup* g, floatX* dqkv /*(B,Tl,3Ca)*/, const floatX* dout /*(B,Tl,Ca)*/,
                             const floatX* qkv /*(B,Tl,3Ca)*/, const floatX* out /*(B,Tl,Ca)*/, const float* lse /*(B,H,Tl)*/,
                             int B, int Tl, int Ca, int H, cudaStream_t s) {
    int N = g->size, r = g->rank, c = g->c, hs = Ca / H;
    size_t q_bs = (size_t)Tl * 3 * Ca, kv_bs = (size_t)Tl * 2 * Ca, n_kv = (size_t)B * Tl * 2 * Ca, o_bs = (size_t)Tl * Ca;
    float* dq = g->acc;                              // (B, Tl, Ca)
    float *travel = g->dkv[0], *next = g->dkv[1];    // (B, Tl, 2Ca) each: a block's dK/dV on its way home
    // the pairs of the rank's queries with the K/V block of rank o (k, v: its rows, strides kbs, kts), dK/dV into dkv
    auto pairs = [&](int o, const floatX* k, const floatX* v, size_t kbs, size_t kts, float* dkv) {
        cp_time_begin(g, s);
        cp_ring_pairs(g, o, [&](int qi, int ki, int causal) {
            size_t qo = (size_t)qi * c, ko = (size_t)ki * c;
            attention_pair_backward(dq + qo * Ca, o_bs, Ca, dkv + ko * 2 * Ca, dkv + ko * 2 * Ca + Ca, kv_bs, 2 * Ca,
                                    dout + qo * Ca, o_bs, Ca, lse + qo, g->D + qo, Tl, qkv + qo * 3 * Ca, q_bs, 3 * Ca,
                                    k + ko * kts, v + ko * kts, kbs, kts, B, H, hs, c, c, causal, s);
        });
        cp_time_end(g, s);
    };
    cp_time_begin(g, s);
    rows_zero_f32(dq, o_bs, Ca, B, Tl, Ca, s);
    attention_pair_dot(g->D, Tl, dout, out, o_bs, Ca, B, H, hs, Tl, s);
    cp_time_end(g, s);
    cp_pack_kv(g, g->kv[0], qkv, B, Tl, Ca, s);
    // steps 1 .. N-1: the other ranks' blocks; block o's dK/dV accumulator starts at rank o+1 (step 1) and
    // is handed on after each step, reaching o after N-1 hops. The rank's own block is computed last, into
    // the accumulator that came home (its K and V read in place from qkv).
    for (int step = 0; step < N; step++) {
        int o = (r - step + N) % N, cur = step % 2;
        const floatX* kv = g->kv[cur];
        CommExchange ahead;  // the next K/V block travels while this one is computed
        if (step < N - 1) ahead = comm_exchange_start(g->comm, GROUP_CP, kv, g->kv[1 - cur], n_kv, (r + 1) % N, (r + N - 1) % N, comm_dtype_of(kv), s);
        if (step >= 1) {
            if (step == 1) rows_zero_f32(travel, kv_bs, 2 * Ca, B, Tl, 2 * Ca, s);  // block r-1's accumulator starts here
            pairs(o, kv, kv + Ca, kv_bs, 2 * Ca, travel);
        }
        if (step < N - 1) comm_exchange_wait(g->comm, &ahead);
        if (step >= 1) {  // block o's accumulator on to the next rank (its owner after the last step)
            cp_ring_exchange(g, travel, next, n_kv, COMM_FLOAT, s);
            float* t = travel; travel = next; next = t;
        }
    }
    pairs(r, qkv + Ca, qkv + 2 * Ca, q_bs, 3 * Ca, travel);  // the own block, into what came home
    cp_time_begin(g, s);
    rows_store_f32(dqkv, q_bs, 3 * Ca, dq, o_bs, Ca, B, Tl, Ca, s);
    rows_store_f32(dqkv + Ca, q_bs, 3 * Ca, travel, kv_bs, 2 * Ca, B, Tl, 2 * Ca, s);
    cp_time_end(g, s);
}
