// test_attention_ring.cu: ring attention's block-pair ops (llm/ops/attention_ring.cuh) against the plain
// whole-sequence attention (attention_forward_cpu / attention_backward_cpu of llm/ops/attention.cuh), with
// fresh random inputs each run (the seed is printed; pass one as argv[1] to repeat a run). Built for the CPU
// build (FP32, the launchers run the CPU reference) and the emulated CUDA build (FP32 floatX, the launchers
// run the kernels, emulated).
//
// For B = 2, H = 2, hs 16, 8, 32, N = 2 and 4 ranks, T = 2N c (c from 3..8, drawn): q, k, v in a (B,T,3C)
// qkv, T split into 2N chunks of c rows, two layouts of the ranks' rows:
//   zigzag:     rank r holds chunks r and 2N-1-r (two query pieces of c rows, two key pieces)
//   contiguous: rank r holds chunks 2r and 2r+1 as one piece of 2c rows
// Each rank copies its rows out of the global qkv (rows_copy), packs its K/V block (B,Tl,2C) out of them
// (rows_copy); each query piece starts from the empty result (attention_pair_init, its accumulators
// NaN-poisoned before) and merges (attention_pair_forward) the key pieces in the ring's order (its own rank's
// first, then rank r-1, r-2, ... wrapping), causal on the diagonal, full below, skipped above; then
// attention_pair_finalise into the rank's out and lse. out and lse, put back in place, must equal
// attention_forward_cpu's. The backward: rows_zero_f32 on NaN-poisoned FP32 accumulators, attention_pair_dot
// per query piece, attention_pair_backward over the same pairs (dq into the query rank's FP32 dq, dk and dv
// into the key rank's FP32 dkv), rows_store_f32 into the rank's dqkv, put back in place: attention_backward_cpu's
// dinp (dq, dk, dv checked separately). Both layouts (different pairs, different orders) must agree with the
// reference within the bound, so with each other.
// The emulated build also runs the same ring through the CPU reference functions of attention_ring.cuh
// (attention_pair_forward_cpu, ...) on the same inputs and checks the kernels' results against theirs, and
// runs the kernels twice: the results must be the same bits (no atomics, a fixed order of every sum). Then
// op by op (op_pair, op_rows, below): each kernel against the CPU reference function of the same op on the
// same inputs, with nq != nk, hs 16 to 128 (24: not a multiple of 32), the accumulators already holding an
// earlier block's merge (forward) or random values (backward: += is checked), and the rows kernels bit for
// bit with the gaps between rows untouched. The BF16 and FP16 emulated builds (test_attention_ring_emu_bf16,
// _fp16) run only these op-by-op checks (the whole-sequence reference takes FP32 inputs): there the block pairs
// run on tensor cores (llm/ops/attention_ring_mma_kernels.cuh, the fused kernels' tile code, 64-row tiles), against
// the same CPU reference within the same bounds: their products of FP32 values (P, dS) take them as three floatX
// terms whose sum is the FP32 value (exactly in BF16; in FP16 to 2^-47 absolute under 2^-14), each term's products
// exact in FP32 and summed in FP32 by the MMA (in k order in the emulator, dev/emu/mma.h), so the bounds below,
// derived for FP32 arithmetic on FP32 values, hold as they are, but for one FP32 add into the accumulator per 16
// keys (the split's partial sum), inside the bounds' constant terms for the nk <= 70 here.
//
// Bounds (u = 2^-24, FP32's unit roundoff; first order; test/test_attention_blocks.cu derives the
// reference's part in full). attention_forward_cpu's scores err by <= (hs+1) u smax (smax = the largest
// scale * sum_c |q_c k_c|), so each of its probabilities by eps_a = (2 (hs+1) smax + T + 5) u relative, and
// out (an FP32 sum of T products a v, sum a = 1) by (T + 1 + eps_a/u) u vmax. Ours, on the CPU: the block
// sums in double, each merge ~4u relative on l and O (8u on out), nb = the merges of a row (2N zigzag, N
// contiguous); in the kernels: FP32 scores (the same eps_a), and per key of the online softmax a rescale and
// an add on l and O (~3u relative each, <= T keys a row). Both ours within (3T + eps_a/u + 8 nb + 8) u vmax:
//   tol_out = (4T + 2 eps_a/u + 8 nb + 9) u vmax      (reference + ours)
// lse: the reference's (eps_a + 3 (|L| + log T + 1)) u; ours the same scores, the sum of l (3T u relative in
// the kernels, 4 nb u for the merges), log and the add:
//   tol_L = (2 eps_a/u + 3T + 4 nb + 8 + 6 (|L| + log T + 1)) u          per row
// The backward: attention_backward_cpu's FP32 sums (datt hs terms, dot T, dpre, dq/dk/dv T) err by at most
// their number of terms times u times the sum of their terms' magnitudes, computed per element here in double
// (test_attention_blocks.cu: E_tt2 = |dy_t|.|v_t2| + sum_t2' a_tt2' |dy_t|.|v_t2'|, Mdq[t] = scale sum_t2 a E |k_t2|,
// Mdk[t2] = scale sum_t a E |q_t|, Mdv[t2] = sum_t a |dy_t|), relative (3T + 2hs + 3 eps_a/u + 8) u for dq/dk,
// (T + eps_a/u + 3) u for dv. Ours recompute P = exp(s - L) from our score ((hs+1) u smax = eps_a/2) and our L
// (ours alone: tol_Lours = (eps_a/u + 3T + 4 nb + 8 + 3 (|L| + log T + 1)) u): rel_P = eps_a/2 + tol_Lours
// relative; dP sums hs products, dq/dk/dv <= T terms in FP32 in the kernels (in double on the CPU), and each
// pair's share is added into the FP32 accumulators (<= 2N adds): (T + hs + 2N + 4) u for dq/dk, (T + 2N + 1) u
// for dv. D comes from our out, which errs per element by at most (3T + eps_a/u + 8 nb + 8) u sum_t2 a_tt2 |v_t2,c|
// (ours alone, per element instead of with vmax), so D_t = dy_t . out_t by that times |dy_t| summed,
// (3T + eps_a/u + 8 nb + 8) u dotabs_t with dotabs_t = sum_t2 a_tt2 |dy_t|.|v_t2|, plus the kernels' FP32 sum of hs
// products, hs u dotabs_t: rel_D = (3T + eps_a/u + 8 nb + 8 + hs) u. It moves dS_tt2 by a_tt2 rel_D dotabs_t, so
// dq_t by MDq[t] = scale sum_t2 a dotabs_t |k_t2| times rel_D, dk_t2 by MDk[t2] = scale sum_t a dotabs_t |q_t| times it.
// So, reference + ours:
//   tol_dq = Mdq ((3T + 2hs + 3 eps_a/u + 8) u + rel_P + (T + hs + 2N + 4) u) + MDq rel_D
//   tol_dk = Mdk (same)                                                        + MDk rel_D
//   tol_dv = Mdv ((T + eps_a/u + 3) u + rel_P + (T + 2N + 1) u)
// Kernels against the CPU reference of this file: both
// within their own share of the bounds above of the exact result, so within the same tol of each other.
// Worst-case bounds: the measured errors (printed) are far smaller; each gradient check asserts the gradient
// is > 10x its largest tolerance, so an op that adds nothing (or overwrites instead of adding) fails.
#include "../llm/core/common.h"
#include "../llm/core/rand.h"
#include "../llm/ops/attention.cuh"
#include "../llm/ops/attention_ring.cuh"
#include "../llm/ops/rows.cuh"
#include "test_common.h"
#include "../llm/core/usage.h"
#include <time.h>
#include <algorithm>
#include <string>
#include <vector>

static Rng rng;
static const double U = 1.0 / 16777216.0;  // 2^-24

// ----------------------------------------------------------------------------
// memory of the path under test: the device (kernels) or the host (the CPU reference functions). In the
// CPU build both are the host and the launchers run the CPU reference.
struct Mem {
    int dev;  // 1: the launchers' memory (cudaMalloc where there are kernels)
    void* alloc(size_t bytes) {
        void* p = NULL;
#if LLM_HAS_KERNELS
        if (dev) { cudaCheck(cudaMalloc(&p, bytes > 0 ? bytes : 1)); return p; }
#endif
        p = mallocCheck(bytes);
        return p;
    }
    void release(void* p) {
#if LLM_HAS_KERNELS
        if (dev) { cudaCheck(cudaFree(p)); return; }
#endif
        free(p);
    }
    void put(void* dst, const void* src, size_t bytes) {  // host -> this memory
#if LLM_HAS_KERNELS
        if (dev) { cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice)); return; }
#endif
        memcpy(dst, src, bytes);
    }
    void get(void* dst, const void* src, size_t bytes) {  // this memory -> host
#if LLM_HAS_KERNELS
        if (dev) { cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost)); return; }
#endif
        memcpy(dst, src, bytes);
    }
    void poison(void* p, size_t nfloats) {  // NaN in FP32 buffers (and all-ones bytes in floatX ones)
        std::vector<float> x(nfloats, NAN);
        put(p, x.data(), nfloats * sizeof(float));
    }
};

// the ops of one path: the launchers (kernels in the emulated build) or the CPU reference functions
struct Ops {
    int ref;  // 1: call the *_cpu functions directly
    Mem mem;
    void init(float* O, float* m, float* l, int B, int H, int nq, int hs) {
        if (ref) attention_pair_init_cpu(O, m, l, B, H, nq, hs);
        else attention_pair_init(O, m, l, B, H, nq, hs, 0);
    }
    void forward(float* O, float* m, float* l, const floatX* q, size_t q_bs, size_t q_ts, const floatX* k, const floatX* v,
                 size_t kv_bs, size_t kv_ts, int B, int H, int hs, int nq, int nk, int causal) {
        if (ref) attention_pair_forward_cpu(O, m, l, q, q_bs, q_ts, k, v, kv_bs, kv_ts, B, H, hs, nq, nk, causal);
        else attention_pair_forward(O, m, l, q, q_bs, q_ts, k, v, kv_bs, kv_ts, B, H, hs, nq, nk, causal, 0);
    }
    void finalise(floatX* out, size_t o_bs, size_t o_ts, float* lse, size_t ls, const float* O, const float* m,
                  const float* l, int B, int H, int hs, int nq) {
        if (ref) attention_pair_finalise_cpu(out, o_bs, o_ts, lse, ls, O, m, l, B, H, hs, nq);
        else attention_pair_finalise(out, o_bs, o_ts, lse, ls, O, m, l, B, H, hs, nq, 0);
    }
    void dot(float* D, size_t ls, const floatX* dout, const floatX* out, size_t o_bs, size_t o_ts, int B, int H, int hs, int nq) {
        if (ref) attention_pair_dot_cpu(D, ls, dout, out, o_bs, o_ts, B, H, hs, nq);
        else attention_pair_dot(D, ls, dout, out, o_bs, o_ts, B, H, hs, nq, 0);
    }
    void backward(float* dq, size_t dq_bs, size_t dq_ts, float* dk, float* dv, size_t dkv_bs, size_t dkv_ts,
                  const floatX* dout, size_t o_bs, size_t o_ts, const float* lse, const float* D, size_t ls,
                  const floatX* q, size_t q_bs, size_t q_ts, const floatX* k, const floatX* v, size_t kv_bs, size_t kv_ts,
                  int B, int H, int hs, int nq, int nk, int causal) {
        if (ref) attention_pair_backward_cpu(dq, dq_bs, dq_ts, dk, dv, dkv_bs, dkv_ts, dout, o_bs, o_ts, lse, D, ls, q, q_bs,
                                             q_ts, k, v, kv_bs, kv_ts, B, H, hs, nq, nk, causal);
        else attention_pair_backward(dq, dq_bs, dq_ts, dk, dv, dkv_bs, dkv_ts, dout, o_bs, o_ts, lse, D, ls, q, q_bs, q_ts,
                                     k, v, kv_bs, kv_ts, B, H, hs, nq, nk, causal, 0);
    }
    void copy(floatX* dst, size_t d_bs, size_t d_ts, const floatX* src, size_t s_bs, size_t s_ts, int B, int n, int width) {
        if (ref) rows_copy_cpu(dst, d_bs, d_ts, src, s_bs, s_ts, B, n, width);
        else rows_copy(dst, d_bs, d_ts, src, s_bs, s_ts, B, n, width, 0);
    }
    void store(floatX* dst, size_t d_bs, size_t d_ts, const float* src, size_t s_bs, size_t s_ts, int B, int n, int width) {
        if (ref) rows_store_f32_cpu(dst, d_bs, d_ts, src, s_bs, s_ts, B, n, width);
        else rows_store_f32(dst, d_bs, d_ts, src, s_bs, s_ts, B, n, width, 0);
    }
    void zero(float* dst, size_t d_bs, size_t d_ts, int B, int n, int width) {
        if (ref) rows_zero_f32_cpu(dst, d_bs, d_ts, B, n, width);
        else rows_zero_f32(dst, d_bs, d_ts, B, n, width, 0);
    }
};

// ----------------------------------------------------------------------------
// the ring, simulated in one process

struct Piece { int g0, n, t0; };  // global rows [g0, g0+n) at the rank's local rows [t0, t0+n)

// the pieces of rank r: zigzag (chunks r and 2N-1-r of c rows) or contiguous (chunks 2r, 2r+1 as one piece)
static std::vector<Piece> rank_pieces(int r, int N, int c, int zigzag) {
    std::vector<Piece> p;
    if (zigzag) { p.push_back({r * c, c, 0}); p.push_back({(2 * N - 1 - r) * c, c, c}); }
    else p.push_back({2 * r * c, 2 * c, 0});
    return p;
}

// causal = 1 (the diagonal: same rows), 0 (every key before every query), -1 (every key after: skipped)
static int pair_kind(const Piece& qp, const Piece& kp) {
    if (kp.g0 == qp.g0) return 1;
    return kp.g0 + kp.n <= qp.g0 ? 0 : -1;
}

struct Result { std::vector<floatX> out, dinp; std::vector<float> lse; };

// The forward and backward of the whole sequence through the block-pair ops of `ops`, with the ranks' rows
// in the given layout. qkv (B,T,3C) and dout (B,T,C) on the host; the results come back to the host.
static Result ring_run(Ops& ops, const std::vector<floatX>& qkv, const std::vector<floatX>& dout, int B, int T, int H, int hs,
                       int N, int c, int zigzag) {
    int C = H * hs, Tl = 2 * c;  // every rank holds 2c rows
    Mem& M = ops.mem;
    size_t X = sizeof(floatX), F = sizeof(float);
    floatX* qkv_g = (floatX*)M.alloc(qkv.size() * X);
    floatX* dout_g = (floatX*)M.alloc(dout.size() * X);
    floatX* out_g = (floatX*)M.alloc((size_t)B * T * C * X);
    floatX* dinp_g = (floatX*)M.alloc((size_t)B * T * 3 * C * X);
    M.put(qkv_g, qkv.data(), qkv.size() * X);
    M.put(dout_g, dout.data(), dout.size() * X);
    std::vector<floatX*> qkv_r(N), kv_r(N), out_r(N), dout_r(N), dqkv_r(N);
    std::vector<float*> lse_r(N), D_r(N), dq_r(N), dkv_r(N);
    for (int r = 0; r < N; r++) {
        qkv_r[r] = (floatX*)M.alloc((size_t)B * Tl * 3 * C * X);
        kv_r[r] = (floatX*)M.alloc((size_t)B * Tl * 2 * C * X);
        out_r[r] = (floatX*)M.alloc((size_t)B * Tl * C * X);
        dout_r[r] = (floatX*)M.alloc((size_t)B * Tl * C * X);
        dqkv_r[r] = (floatX*)M.alloc((size_t)B * Tl * 3 * C * X);
        lse_r[r] = (float*)M.alloc((size_t)B * H * Tl * F);
        D_r[r] = (float*)M.alloc((size_t)B * H * Tl * F);
        dq_r[r] = (float*)M.alloc((size_t)B * Tl * C * F);
        dkv_r[r] = (float*)M.alloc((size_t)B * Tl * 2 * C * F);
        M.poison(lse_r[r], (size_t)B * H * Tl); M.poison(D_r[r], (size_t)B * H * Tl);
        M.poison(dq_r[r], (size_t)B * Tl * C); M.poison(dkv_r[r], (size_t)B * Tl * 2 * C);
        // the rank's rows out of the global qkv and dout (placing chunks), then its K/V block (packing)
        for (const Piece& p : rank_pieces(r, N, c, zigzag)) {
            ops.copy(qkv_r[r] + (size_t)p.t0 * 3 * C, (size_t)Tl * 3 * C, 3 * C, qkv_g + (size_t)p.g0 * 3 * C, (size_t)T * 3 * C,
                     3 * C, B, p.n, 3 * C);
            ops.copy(dout_r[r] + (size_t)p.t0 * C, (size_t)Tl * C, C, dout_g + (size_t)p.g0 * C, (size_t)T * C, C, B, p.n, C);
        }
        ops.copy(kv_r[r], (size_t)Tl * 2 * C, 2 * C, qkv_r[r] + C, (size_t)Tl * 3 * C, 3 * C, B, Tl, 2 * C);
    }
    float* O = (float*)M.alloc((size_t)B * H * Tl * hs * F);
    float* m = (float*)M.alloc((size_t)B * H * Tl * F);
    float* l = (float*)M.alloc((size_t)B * H * Tl * F);
    size_t q_bs = (size_t)Tl * 3 * C, q_ts = 3 * C, kv_bs = (size_t)Tl * 2 * C, kv_ts = 2 * C, o_bs = (size_t)Tl * C;
    // forward: each query piece against the key pieces in the ring's order (own rank first, then r-1, r-2, ...)
    for (int r = 0; r < N; r++)
        for (const Piece& qp : rank_pieces(r, N, c, zigzag)) {
            M.poison(O, (size_t)B * H * qp.n * hs); M.poison(m, (size_t)B * H * qp.n); M.poison(l, (size_t)B * H * qp.n);
            ops.init(O, m, l, B, H, qp.n, hs);
            for (int s = 0; s < N; s++) {
                int rk = (r - s + N) % N;
                for (const Piece& kp : rank_pieces(rk, N, c, zigzag)) {
                    int kind = pair_kind(qp, kp);
                    if (kind < 0) continue;
                    const floatX* k = kv_r[rk] + (size_t)kp.t0 * 2 * C;
                    ops.forward(O, m, l, qkv_r[r] + (size_t)qp.t0 * 3 * C, q_bs, q_ts, k, k + C, kv_bs, kv_ts, B, H, hs, qp.n,
                                kp.n, kind);
                }
            }
            ops.finalise(out_r[r] + (size_t)qp.t0 * C, o_bs, C, lse_r[r] + qp.t0, Tl, O, m, l, B, H, hs, qp.n);
        }
    // backward: zeroed FP32 accumulators, D per query piece, the same pairs
    for (int r = 0; r < N; r++) {
        ops.zero(dq_r[r], o_bs, C, B, Tl, C);
        ops.zero(dkv_r[r], kv_bs, kv_ts, B, Tl, 2 * C);
        for (const Piece& qp : rank_pieces(r, N, c, zigzag))
            ops.dot(D_r[r] + qp.t0, Tl, dout_r[r] + (size_t)qp.t0 * C, out_r[r] + (size_t)qp.t0 * C, o_bs, C, B, H, hs, qp.n);
    }
    for (int r = 0; r < N; r++)
        for (const Piece& qp : rank_pieces(r, N, c, zigzag))
            for (int s = 0; s < N; s++) {
                int rk = (r - s + N) % N;
                for (const Piece& kp : rank_pieces(rk, N, c, zigzag)) {
                    int kind = pair_kind(qp, kp);
                    if (kind < 0) continue;
                    const floatX* k = kv_r[rk] + (size_t)kp.t0 * 2 * C;
                    float* dk = dkv_r[rk] + (size_t)kp.t0 * 2 * C;
                    ops.backward(dq_r[r] + (size_t)qp.t0 * C, o_bs, C, dk, dk + C, kv_bs, kv_ts,
                                 dout_r[r] + (size_t)qp.t0 * C, o_bs, C, lse_r[r] + qp.t0, D_r[r] + qp.t0, Tl,
                                 qkv_r[r] + (size_t)qp.t0 * 3 * C, q_bs, q_ts, k, k + C, kv_bs, kv_ts, B, H, hs, qp.n, kp.n, kind);
                }
            }
    // the FP32 gradients into each rank's dqkv (rounded once), every result put back in place
    Result res;
    res.lse.assign((size_t)B * H * T, NAN);
    std::vector<float> lse_h((size_t)B * H * Tl);
    for (int r = 0; r < N; r++) {
        ops.store(dqkv_r[r], q_bs, q_ts, dq_r[r], o_bs, C, B, Tl, C);
        ops.store(dqkv_r[r] + C, q_bs, q_ts, dkv_r[r], kv_bs, kv_ts, B, Tl, 2 * C);
        M.get(lse_h.data(), lse_r[r], lse_h.size() * F);
        for (const Piece& p : rank_pieces(r, N, c, zigzag)) {
            ops.copy(out_g + (size_t)p.g0 * C, (size_t)T * C, C, out_r[r] + (size_t)p.t0 * C, o_bs, C, B, p.n, C);
            ops.copy(dinp_g + (size_t)p.g0 * 3 * C, (size_t)T * 3 * C, 3 * C, dqkv_r[r] + (size_t)p.t0 * 3 * C, q_bs, q_ts, B,
                     p.n, 3 * C);
            for (int bh = 0; bh < B * H; bh++)
                for (int i = 0; i < p.n; i++) res.lse[(size_t)bh * T + p.g0 + i] = lse_h[(size_t)bh * Tl + p.t0 + i];
        }
    }
    res.out.resize((size_t)B * T * C);
    res.dinp.resize((size_t)B * T * 3 * C);
    M.get(res.out.data(), out_g, res.out.size() * X);
    M.get(res.dinp.data(), dinp_g, res.dinp.size() * X);
    for (int r = 0; r < N; r++) {
        M.release(qkv_r[r]); M.release(kv_r[r]); M.release(out_r[r]); M.release(dout_r[r]); M.release(dqkv_r[r]);
        M.release(lse_r[r]); M.release(D_r[r]); M.release(dq_r[r]); M.release(dkv_r[r]);
    }
    M.release(O); M.release(m); M.release(l);
    M.release(qkv_g); M.release(dout_g); M.release(out_g); M.release(dinp_g);
    return res;
}

// ----------------------------------------------------------------------------
// the bounds (see the top of the file) and the checks

struct Bounds {
    double tol_out;
    std::vector<double> tol_L;    // (B,H,T)
    std::vector<double> tol_g;    // (B,T,3C): per element of dinp
    double tol_gmax[3];           // the largest of dq, dk, dv's
};

static Bounds make_bounds(const std::vector<float>& inp, const std::vector<float>& dout, const std::vector<float>& lse_ref,
                          int B, int T, int H, int hs, int N, int zigzag) {
    int C = H * hs;
    double scale = 1.0 / sqrt((double)hs);
    size_t nin = (size_t)B * T * 3 * C;
    // the probabilities in double, and the magnitudes
    std::vector<double> att((size_t)B * H * T * T, 0.0);
    double smax = 0.0, vmax = 0.0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                double* a = &att[(((size_t)b * H + h) * T + t) * T];
                const float* q = &inp[((size_t)b * T + t) * 3 * C + h * hs];
                double mx = -INFINITY, z = 0.0;
                for (int c = 0; c < hs; c++) vmax = fmax(vmax, fabs(q[2 * C + c]));
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = &inp[((size_t)b * T + t2) * 3 * C + C + h * hs];
                    double d = 0.0, da = 0.0;
                    for (int c = 0; c < hs; c++) { d += (double)q[c] * k[c]; da += fabs((double)q[c] * k[c]); }
                    a[t2] = d * scale;
                    smax = fmax(smax, da * scale);
                    mx = fmax(mx, a[t2]);
                }
                for (int t2 = 0; t2 <= t; t2++) { a[t2] = exp(a[t2] - mx); z += a[t2]; }
                for (int t2 = 0; t2 <= t; t2++) a[t2] /= z;
            }
    int nb = zigzag ? 2 * N : N;
    double eps_a = 2.0 * (hs + 1) * smax + T + 5;  // in units of u
    Bounds bd;
    bd.tol_out = (4.0 * T + 2 * eps_a + 8.0 * nb + 9) * U * vmax;
    bd.tol_L.resize((size_t)B * H * T);
    double tol_Lours = 0.0;  // the largest error of our lse alone (against the exact one)
    for (size_t x = 0; x < bd.tol_L.size(); x++) {
        double lg = fabs((double)lse_ref[x]) + log((double)T) + 1;
        bd.tol_L[x] = (2 * eps_a + 3.0 * T + 4.0 * nb + 8 + 6.0 * lg) * U;
        tol_Lours = fmax(tol_Lours, (eps_a + 3.0 * T + 4.0 * nb + 8 + 3.0 * lg) * U);
    }
    // the backward's per-element magnitudes
    std::vector<double> M(nin, 0.0), MD(nin, 0.0), Ad(T);  // MD: the D term's magnitudes (dq, dk)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const double* a = &att[(((size_t)b * H + h) * T + t) * T];
                const float* dy = &dout[((size_t)b * T + t) * C + h * hs];
                size_t qt = ((size_t)b * T + t) * 3 * C + h * hs;
                double dotabs = 0.0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = &inp[((size_t)b * T + t2) * 3 * C + 2 * C + h * hs];
                    Ad[t2] = 0.0;
                    for (int c = 0; c < hs; c++) Ad[t2] += fabs((double)dy[c] * v[c]);
                    dotabs += a[t2] * Ad[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    size_t kt = ((size_t)b * T + t2) * 3 * C + h * hs;
                    // D_t errs by <= rel_D dotabs (see the top of the file), which moves dS_tt2 by a_tt2 times it
                    double w = a[t2] * (Ad[t2] + dotabs) * scale, wd = a[t2] * dotabs * scale;
                    for (int c = 0; c < hs; c++) {
                        M[qt + c] += w * fabs(inp[kt + C + c]);
                        M[kt + C + c] += w * fabs(inp[qt + c]);
                        M[kt + 2 * C + c] += a[t2] * fabs(dy[c]);
                        MD[qt + c] += wd * fabs(inp[kt + C + c]);
                        MD[kt + C + c] += wd * fabs(inp[qt + c]);
                    }
                }
            }
    double rel_P = eps_a / 2 * U + tol_Lours;  // our P = exp(s - L): our score's error and our L's
    double rel[3] = {(3.0 * T + 2 * hs + 3 * eps_a + 8) * U + rel_P + (1.0 * T + hs + 2 * N + 4) * U,
                     (3.0 * T + 2 * hs + 3 * eps_a + 8) * U + rel_P + (1.0 * T + hs + 2 * N + 4) * U,
                     (1.0 * T + eps_a + 3) * U + rel_P + (1.0 * T + 2 * N + 1) * U};
    double rel_D = (3.0 * T + eps_a + 8.0 * nb + 8 + hs) * U;  // our D's error, relative to dotabs
    bd.tol_g.resize(nin);
    for (int j = 0; j < 3; j++) bd.tol_gmax[j] = 0.0;
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int j = 0; j < 3; j++)
            for (int c = 0; c < C; c++) {
                size_t x = r * 3 * C + j * C + c;
                bd.tol_g[x] = M[x] * rel[j] + MD[x] * rel_D;
                bd.tol_gmax[j] = fmax(bd.tol_gmax[j], bd.tol_g[x]);
            }
    return bd;
}

// a against b (the reference) within the bounds; `what` names the run
static void check_result(const char* what, const Result& a, const std::vector<float>& out_ref, const std::vector<float>& lse_ref,
                         const std::vector<float>& dinp_ref, const Bounds& bd, int B, int T, int H, int hs) {
    int C = H * hs;
    double e = 0.0, g = 0.0;
    for (size_t x = 0; x < out_ref.size(); x++) {
        double d = fabs((double)(float)a.out[x] - (double)out_ref[x]);
        if (!(d <= e)) e = isnan(d) ? INFINITY : d;
        g = fmax(g, fabs((double)out_ref[x]));
    }
    check(e <= bd.tol_out, "%s: out = attention_forward_cpu's: max|err| %.3g <= tol %.3g (max|out| %.3g)", what, e, bd.tol_out, g);
    double worst = -INFINITY, e_at = 0.0, t_at = 0.0;
    for (size_t x = 0; x < lse_ref.size(); x++) {
        double d = fabs((double)a.lse[x] - (double)lse_ref[x]);
        if (isnan(d)) d = INFINITY;
        if (!(d - bd.tol_L[x] <= worst)) { worst = d - bd.tol_L[x]; e_at = d; t_at = bd.tol_L[x]; }
    }
    check(worst <= 0.0, "%s: lse = attention_forward_cpu's: worst row |err| %.3g <= its tol %.3g", what, e_at, t_at);
    const char* names[3] = {"dq", "dk", "dv"};
    for (int j = 0; j < 3; j++) {
        double w = -INFINITY, ea = 0.0, ta = 0.0, em = 0.0, gm = 0.0;
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int c = 0; c < C; c++) {
                size_t x = r * 3 * C + j * C + c;
                double d = fabs((double)(float)a.dinp[x] - (double)dinp_ref[x]);
                if (isnan(d)) d = INFINITY;
                if (!(d - bd.tol_g[x] <= w)) { w = d - bd.tol_g[x]; ea = d; ta = bd.tol_g[x]; }
                em = fmax(em, d); gm = fmax(gm, fabs((double)dinp_ref[x]));
            }
        // the check means something only if the gradient dwarfs the tolerances: an op that adds nothing fails
        check(w <= 0.0 && gm > 10 * bd.tol_gmax[j], "%s: %s = attention_backward_cpu's: max|err| %.3g; worst element |err| %.3g "
              "<= its tol %.3g (largest tol %.3g, max|%s| %.3g > 10x it)", what, names[j], em, ea, ta, bd.tol_gmax[j], names[j], gm);
    }
}

#if LLM_HAS_KERNELS
// the kernels' results against the CPU reference functions' (both within the bounds' share of the exact result)
static void check_kernels_vs_ref(const char* what, const Result& k, const Result& r, const Bounds& bd) {
    double e = 0.0;
    for (size_t x = 0; x < r.out.size(); x++) {
        double d = fabs((double)(float)k.out[x] - (double)(float)r.out[x]);
        if (!(d <= e)) e = isnan(d) ? INFINITY : d;
    }
    check(e <= bd.tol_out, "%s: kernels' out = the CPU reference's (attention_ring.cuh): max|err| %.3g <= tol %.3g", what, e, bd.tol_out);
    double worst = -INFINITY, ea = 0.0, ta = 0.0;
    for (size_t x = 0; x < r.lse.size(); x++) {
        double d = fabs((double)k.lse[x] - (double)r.lse[x]);
        if (isnan(d)) d = INFINITY;
        if (!(d - bd.tol_L[x] <= worst)) { worst = d - bd.tol_L[x]; ea = d; ta = bd.tol_L[x]; }
    }
    check(worst <= 0.0, "%s: kernels' lse = the CPU reference's: worst row |err| %.3g <= its tol %.3g", what, ea, ta);
    worst = -INFINITY; ea = 0.0; ta = 0.0;
    double em = 0.0;
    for (size_t x = 0; x < r.dinp.size(); x++) {
        double d = fabs((double)(float)k.dinp[x] - (double)(float)r.dinp[x]);
        if (isnan(d)) d = INFINITY;
        if (!(d - bd.tol_g[x] <= worst)) { worst = d - bd.tol_g[x]; ea = d; ta = bd.tol_g[x]; }
        em = fmax(em, d);
    }
    check(worst <= 0.0, "%s: kernels' dq, dk, dv = the CPU reference's: max|err| %.3g; worst element |err| %.3g <= its tol %.3g",
          what, em, ea, ta);
}

static int same_bits(const Result& a, const Result& b) {
    return memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(floatX)) == 0 &&
           memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0 &&
           memcmp(a.dinp.data(), b.dinp.data(), a.dinp.size() * sizeof(floatX)) == 0;
}
#endif

#if LLM_HAS_KERNELS
// ----------------------------------------------------------------------------
// op by op: each kernel against the CPU reference function of the same op on the same inputs (in the
// build's floatX: FP32, or BF16 / FP16 in the 16-bit emulated builds), with nq != nk, non-zero accumulators and
// the model's strides; the pair kernels also run twice from the same state and must give the same bits. Bounds, u = 2^-24 (the kernels in FP32, the CPU reference in double, rounded once):
//   forward: m = the max of the scores, the kernels' scores err by (hs+1) u smax (smax: the largest
//     scale sum_c |q_c k_c| of the pair): tol_m = (hs+2) u smax; every term e^(s - m) of l and O then by
//     2 (hs+2) u smax + 4u relative and the FP32 sums of <= nk + 2 terms add (nk + 2) u of their
//     magnitudes, at most l vmax for O (vmax over the earlier block and this one):
//     tol_l = (2 (hs+2) smax + nk + 10) u l,  tol_O = the same factor times l vmax
//   finalise (both from the same O, m, l): out = O (1/l) in FP32 in both, rounded once to floatX: one
//     floatX rounding apart at most (eps_x |out|, eps_x = 2^-7 BF16, 2^-23 FP32) plus 4u |out|;
//     lse = m + log l: 4u (|lse| + 1)
//   dot: the kernels' FP32 sum of hs products: (hs + 1) u sum_c |dout_c out_c|
//   backward (both from the same lse and D, onto the same random accumulators): P = exp(s - lse) errs by
//     ((hs+1) smax + 4) u relative, dP by hs u |dO|.|v|, the FP32 sums of <= max(nq, nk) terms and the
//     CPU reference's rounding of its double sum by (max(nq, nk) + 3) u of their magnitudes, computed per
//     element here in double: Mdv[j,c] = sum_i P_ij |dO_ic|, Mdq[i,c] = scale sum_j P_ij (|dO_i|.|v_j| + |D_i|) |k_jc|,
//     Mdk[j,c] = scale sum_i P_ij (|dO_i|.|v_j| + |D_i|) |q_ic|; the add into the accumulator rounds once in
//     each path (u |acc| each):
//     tol = ((hs+1) smax + max(nq, nk) + hs + 8) u M + 2u |acc|
struct Buf {  // one buffer on the host and on the device
    std::vector<unsigned char> h;
    void* d = NULL;
    void init(size_t bytes) { h.assign(bytes, 0); cudaCheck(cudaMalloc(&d, bytes)); }
    void up() { cudaCheck(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice)); }
    void down(void* dst) { cudaCheck(cudaMemcpy(dst, d, h.size(), cudaMemcpyDeviceToHost)); }
    template <class T> T* hp() { return (T*)h.data(); }
    template <class T> T* dp() { return (T*)d; }
    ~Buf() { if (d) cudaCheck(cudaFree(d)); }
};

// the largest (|a - b| - tol) over n elements (NaN: +inf), with the |a - b| and tol there
struct Worst { double excess = -INFINITY, err = 0.0, tol = 0.0, maxerr = 0.0; };
static void worst_add(Worst& w, double a, double b, double tol) {
    double e = fabs(a - b);
    if (isnan(e)) e = INFINITY;
    if (!(e - tol <= w.excess)) { w.excess = e - tol; w.err = e; w.tol = tol; }
    w.maxerr = fmax(w.maxerr, e);
}

static void op_pair(int hs, int nq, int nk, int causal) {
    const int B = 2, H = 2, C = H * hs, n0 = 5;  // n0: the rows of an earlier key block already merged
    double scale = 1.0 / sqrt((double)hs);
    double eps_x = sizeof(floatX) == 4 ? 1.0 / 8388608.0 : 1.0 / 128.0;  // one floatX ulp, relative
    char what[120];
    snprintf(what, sizeof what, "op by op, hs=%d nq=%d nk=%d causal=%d (%s)", hs, nq, nk, causal, PRECISION_MODE);
    // q, dout, out in (B, nq, 3C) / (B, nq, C) rows; k, v packed (B, nk, 2C); the earlier block (B, n0, 2C)
    size_t q_bs = (size_t)nq * 3 * C, q_ts = 3 * C, kv_bs = (size_t)nk * 2 * C, kv_ts = 2 * C, o_bs = (size_t)nq * C;
    size_t nqkv = (size_t)B * nq * 3 * C, nkv = (size_t)B * nk * 2 * C, nkv0 = (size_t)B * n0 * 2 * C, no = (size_t)B * nq * C;
    size_t rows = (size_t)B * H * nq;
    std::vector<float> f(nqkv + nkv + nkv0 + no);
    rng_normal(&rng, f.data(), f.size(), 0.0f, 1.0f);
    for (size_t r = 0; r < (size_t)B * nq; r++)
        for (int c = 0; c < C; c++) f[r * 3 * C + c] *= 1.5f;
    Buf qkv, kv, kv0, dout, out, O, m, l, lse, D, dq, dkv;
    qkv.init(nqkv * sizeof(floatX)); kv.init(nkv * sizeof(floatX)); kv0.init(nkv0 * sizeof(floatX));
    dout.init(no * sizeof(floatX)); out.init(no * sizeof(floatX));
    O.init(rows * hs * 4); m.init(rows * 4); l.init(rows * 4); lse.init(rows * 4); D.init(rows * 4);
    dq.init(no * 4); dkv.init(nkv * 4);
    size_t at = 0;
    for (size_t x = 0; x < nqkv; x++) qkv.hp<floatX>()[x] = (floatX)f[at++];
    for (size_t x = 0; x < nkv; x++) kv.hp<floatX>()[x] = (floatX)f[at++];
    for (size_t x = 0; x < nkv0; x++) kv0.hp<floatX>()[x] = (floatX)f[at++];
    for (size_t x = 0; x < no; x++) dout.hp<floatX>()[x] = (floatX)f[at++];
    const floatX *qh = qkv.hp<floatX>(), *kh = kv.hp<floatX>(), *vh = kh + C;
    // the magnitudes: smax of the pair, vmax of both blocks
    double smax = 0.0, vmax = 0.0;
    for (size_t x = 0; x < nkv; x++) if (x % (2 * C) >= (size_t)C) vmax = fmax(vmax, fabs((float)kh[x]));
    for (size_t x = 0; x < nkv0; x++) if (x % (2 * C) >= (size_t)C) vmax = fmax(vmax, fabs((float)kv0.hp<floatX>()[x]));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < nq; i++)
                for (int j = 0; j < nk; j++) {
                    double a = 0.0;
                    for (int c = 0; c < hs; c++)
                        a += fabs((double)(float)qh[b * q_bs + i * q_ts + h * hs + c] * (float)kh[b * kv_bs + j * kv_ts + h * hs + c]);
                    smax = fmax(smax, a * scale);
                }
    // the state before: the CPU reference's merge of the earlier block (full) into the empty result
    attention_pair_init_cpu(O.hp<float>(), m.hp<float>(), l.hp<float>(), B, H, nq, hs);
    attention_pair_forward_cpu(O.hp<float>(), m.hp<float>(), l.hp<float>(), qh, q_bs, q_ts, kv0.hp<floatX>(), kv0.hp<floatX>() + C,
                               (size_t)n0 * 2 * C, 2 * C, B, H, hs, nq, n0, 0);
    O.up(); m.up(); l.up();
    qkv.up(); kv.up(); kv0.up(); dout.up();
    std::vector<unsigned char> O0 = O.h, m0 = m.h, l0 = l.h;  // the state before, for a second run of the kernel
    // forward
    attention_pair_forward_cpu(O.hp<float>(), m.hp<float>(), l.hp<float>(), qh, q_bs, q_ts, kh, vh, kv_bs, kv_ts, B, H, hs, nq, nk, causal);
    attention_pair_forward(O.dp<float>(), m.dp<float>(), l.dp<float>(), qkv.dp<floatX>(), q_bs, q_ts, kv.dp<floatX>(),
                           kv.dp<floatX>() + C, kv_bs, kv_ts, B, H, hs, nq, nk, causal, 0);
    std::vector<float> Ok(rows * hs), mk(rows), lk(rows);
    O.down(Ok.data()); m.down(mk.data()); l.down(lk.data());
    // again from the same state: the same bits (no atomics, a fixed order of every sum)
    cudaCheck(cudaMemcpy(O.d, O0.data(), O0.size(), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(m.d, m0.data(), m0.size(), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(l.d, l0.data(), l0.size(), cudaMemcpyHostToDevice));
    attention_pair_forward(O.dp<float>(), m.dp<float>(), l.dp<float>(), qkv.dp<floatX>(), q_bs, q_ts, kv.dp<floatX>(),
                           kv.dp<floatX>() + C, kv_bs, kv_ts, B, H, hs, nq, nk, causal, 0);
    std::vector<float> Ok2(rows * hs), mk2(rows), lk2(rows);
    O.down(Ok2.data()); m.down(mk2.data()); l.down(lk2.data());
    int same = memcmp(Ok.data(), Ok2.data(), Ok.size() * 4) == 0 && memcmp(mk.data(), mk2.data(), rows * 4) == 0 &&
               memcmp(lk.data(), lk2.data(), rows * 4) == 0;
    Worst wO, wm, wl;
    double fac = (2.0 * (hs + 2) * smax + nk + 10) * U;
    for (size_t r = 0; r < rows; r++) {
        double lr = l.hp<float>()[r];
        worst_add(wm, mk[r], m.hp<float>()[r], (hs + 2) * U * smax);
        worst_add(wl, lk[r], lr, fac * lr);
        for (int c = 0; c < hs; c++) worst_add(wO, Ok[r * hs + c], O.hp<float>()[r * hs + c], fac * lr * vmax);
    }
    check(wm.excess <= 0 && wl.excess <= 0 && wO.excess <= 0, "%s: attention_pair_forward kernel = CPU reference: max|err| m %.3g, "
          "l %.3g, O %.3g; worst |err| - tol: m %.3g <= %.3g, l %.3g <= %.3g, O %.3g <= %.3g", what, wm.maxerr, wl.maxerr, wO.maxerr,
          wm.err, wm.tol, wl.err, wl.tol, wO.err, wO.tol);
    // finalise, both from the CPU reference's O, m, l
    O.up(); m.up(); l.up();
    attention_pair_finalise_cpu(out.hp<floatX>(), o_bs, C, lse.hp<float>(), nq, O.hp<float>(), m.hp<float>(), l.hp<float>(), B, H, hs, nq);
    attention_pair_finalise(out.dp<floatX>(), o_bs, C, lse.dp<float>(), nq, O.dp<float>(), m.dp<float>(), l.dp<float>(), B, H, hs, nq, 0);
    std::vector<floatX> outk(no);
    std::vector<float> lsek(rows);
    out.down(outk.data()); lse.down(lsek.data());
    Worst wo, wL;
    for (size_t x = 0; x < no; x++) {
        double r = (float)out.hp<floatX>()[x];
        worst_add(wo, (float)outk[x], r, (eps_x + 4 * U) * fabs(r) + 1e-30);
    }
    for (size_t r = 0; r < rows; r++) worst_add(wL, lsek[r], lse.hp<float>()[r], 4 * U * (fabs(lse.hp<float>()[r]) + 1));
    check(wo.excess <= 0 && wL.excess <= 0, "%s: attention_pair_finalise kernel = CPU reference: max|err| out %.3g, lse %.3g; "
          "worst |err| - tol: out %.3g <= %.3g, lse %.3g <= %.3g", what, wo.maxerr, wL.maxerr, wo.err, wo.tol, wL.err, wL.tol);
    // dot, both from the CPU reference's out
    out.up();
    attention_pair_dot_cpu(D.hp<float>(), nq, dout.hp<floatX>(), out.hp<floatX>(), o_bs, C, B, H, hs, nq);
    attention_pair_dot(D.dp<float>(), nq, dout.dp<floatX>(), out.dp<floatX>(), o_bs, C, B, H, hs, nq, 0);
    std::vector<float> Dk(rows);
    D.down(Dk.data());
    Worst wD;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < nq; i++) {
                double a = 0.0;
                for (int c = 0; c < hs; c++) {
                    size_t x = b * o_bs + (size_t)i * C + h * hs + c;
                    a += fabs((double)(float)dout.hp<floatX>()[x] * (float)out.hp<floatX>()[x]);
                }
                size_t r = ((size_t)b * H + h) * nq + i;
                worst_add(wD, Dk[r], D.hp<float>()[r], (hs + 1) * U * a);
            }
    check(wD.excess <= 0, "%s: attention_pair_dot kernel = CPU reference: max|err| %.3g; worst |err| %.3g <= its tol %.3g", what,
          wD.maxerr, wD.err, wD.tol);
    // backward, both from the CPU reference's lse and D, onto the same random FP32 accumulators
    lse.up(); D.up();
    rng_normal(&rng, dq.hp<float>(), no, 0.0f, 1.0f);
    rng_normal(&rng, dkv.hp<float>(), nkv, 0.0f, 1.0f);
    dq.up(); dkv.up();
    std::vector<float> dq0(dq.hp<float>(), dq.hp<float>() + no), dkv0(dkv.hp<float>(), dkv.hp<float>() + nkv);
    attention_pair_backward_cpu(dq.hp<float>(), o_bs, C, dkv.hp<float>(), dkv.hp<float>() + C, kv_bs, kv_ts, dout.hp<floatX>(), o_bs, C,
                                lse.hp<float>(), D.hp<float>(), nq, qh, q_bs, q_ts, kh, vh, kv_bs, kv_ts, B, H, hs, nq, nk, causal);
    attention_pair_backward(dq.dp<float>(), o_bs, C, dkv.dp<float>(), dkv.dp<float>() + C, kv_bs, kv_ts, dout.dp<floatX>(), o_bs, C,
                            lse.dp<float>(), D.dp<float>(), nq, qkv.dp<floatX>(), q_bs, q_ts, kv.dp<floatX>(), kv.dp<floatX>() + C,
                            kv_bs, kv_ts, B, H, hs, nq, nk, causal, 0);
    std::vector<float> dqk(no), dkvk(nkv);
    dq.down(dqk.data()); dkv.down(dkvk.data());
    cudaCheck(cudaMemcpy(dq.d, dq0.data(), no * 4, cudaMemcpyHostToDevice));  // again from the same accumulators
    cudaCheck(cudaMemcpy(dkv.d, dkv0.data(), nkv * 4, cudaMemcpyHostToDevice));
    attention_pair_backward(dq.dp<float>(), o_bs, C, dkv.dp<float>(), dkv.dp<float>() + C, kv_bs, kv_ts, dout.dp<floatX>(), o_bs, C,
                            lse.dp<float>(), D.dp<float>(), nq, qkv.dp<floatX>(), q_bs, q_ts, kv.dp<floatX>(), kv.dp<floatX>() + C,
                            kv_bs, kv_ts, B, H, hs, nq, nk, causal, 0);
    std::vector<float> dqk2(no), dkvk2(nkv);
    dq.down(dqk2.data()); dkv.down(dkvk2.data());
    same = same && memcmp(dqk.data(), dqk2.data(), no * 4) == 0 && memcmp(dkvk.data(), dkvk2.data(), nkv * 4) == 0;
    check(same, "%s: attention_pair_forward and _backward kernels run twice from the same state: the same bits (O, m, l, dq, dk, dv)",
          what);
    // the magnitudes M (see above) and how far the pair moved the accumulators (the check must see that move)
    std::vector<double> Mq(no, 0.0), Mkv(nkv, 0.0);
    const floatX* dOh = dout.hp<floatX>();
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < nq; i++) {
                size_t r = ((size_t)b * H + h) * nq + i;
                double L = lse.hp<float>()[r], Dr = fabs(D.hp<float>()[r]);
                int jend = causal ? std::min(i + 1, nk) : nk;
                for (int j = 0; j < jend; j++) {
                    double s = 0.0, dv = 0.0;
                    for (int c = 0; c < hs; c++) {
                        s += (double)(float)qh[b * q_bs + i * q_ts + h * hs + c] * (float)kh[b * kv_bs + j * kv_ts + h * hs + c];
                        dv += fabs((double)(float)dOh[b * o_bs + (size_t)i * C + h * hs + c] * (float)vh[b * kv_bs + j * kv_ts + h * hs + c]);
                    }
                    double p = exp(s * scale - L), w = p * (dv + Dr) * scale;
                    for (int c = 0; c < hs; c++) {
                        Mq[b * o_bs + (size_t)i * C + h * hs + c] += w * fabs((float)kh[b * kv_bs + j * kv_ts + h * hs + c]);
                        Mkv[b * kv_bs + j * kv_ts + h * hs + c] += w * fabs((float)qh[b * q_bs + i * q_ts + h * hs + c]);
                        Mkv[b * kv_bs + j * kv_ts + C + h * hs + c] += p * fabs((float)dOh[b * o_bs + (size_t)i * C + h * hs + c]);
                    }
                }
            }
    double relb = ((hs + 1) * smax + std::max(nq, nk) + hs + 8) * U;
    Worst wg[3];
    double moved[3] = {0.0, 0.0, 0.0}, tolmax[3] = {0.0, 0.0, 0.0};
    for (size_t x = 0; x < no; x++) {
        double tol = relb * Mq[x] + 2 * U * fabs(dq.hp<float>()[x]);
        worst_add(wg[0], dqk[x], dq.hp<float>()[x], tol);
        moved[0] = fmax(moved[0], fabs((double)dq.hp<float>()[x] - dq0[x]));
        tolmax[0] = fmax(tolmax[0], tol);
    }
    for (size_t x = 0; x < nkv; x++) {
        int j = x % (2 * C) >= (size_t)C ? 2 : 1;
        double tol = relb * Mkv[x] + 2 * U * fabs(dkv.hp<float>()[x]);
        worst_add(wg[j], dkvk[x], dkv.hp<float>()[x], tol);
        moved[j] = fmax(moved[j], fabs((double)dkv.hp<float>()[x] - dkv0[x]));
        tolmax[j] = fmax(tolmax[j], tol);
    }
    const char* names[3] = {"dq", "dk", "dv"};
    for (int j = 0; j < 3; j++)
        check(wg[j].excess <= 0 && moved[j] > 10 * tolmax[j], "%s: attention_pair_backward kernel = CPU reference, %s += the pair's "
              "share: max|err| %.3g; worst |err| %.3g <= its tol %.3g (largest tol %.3g, the pair moved %s by up to %.3g > 10x it)",
              what, names[j], wg[j].maxerr, wg[j].err, wg[j].tol, tolmax[j], names[j], moved[j]);
}
#endif

#if LLM_HAS_KERNELS
// the rows kernels against their CPU reference: B = 2 sequences of n = 37 rows of width 50 elements, in buffers
// whose rows are longer (strides 64 and 80, a sequence stride of n rows plus 3): the whole destination
// buffers (the rows' gaps included, prefilled with random values) must be the same bits
static void op_rows(void) {
    const int B = 2, n = 37, width = 50;
    size_t d_ts = 64, s_ts = 80, d_bs = (n + 3) * d_ts, s_bs = (n + 3) * s_ts, nd = B * d_bs, ns = B * s_bs;
    std::vector<float> sf(ns), df(nd);
    rng_normal(&rng, sf.data(), ns, 0.0f, 1.0f);
    rng_normal(&rng, df.data(), nd, 0.0f, 1.0f);
    std::vector<floatX> sx(ns), dx(nd);
    for (size_t x = 0; x < ns; x++) sx[x] = (floatX)sf[x];
    for (size_t x = 0; x < nd; x++) dx[x] = (floatX)df[x];
    Buf S, SX, D, DX;
    S.init(ns * 4); SX.init(ns * sizeof(floatX)); D.init(nd * 4); DX.init(nd * sizeof(floatX));
    memcpy(S.h.data(), sf.data(), ns * 4); memcpy(SX.h.data(), sx.data(), ns * sizeof(floatX));
    S.up(); SX.up();
    std::vector<floatX> gotx(nd);
    std::vector<float> gotf(nd);
    // rows_copy
    memcpy(DX.h.data(), dx.data(), nd * sizeof(floatX)); DX.up();
    rows_copy_cpu(DX.hp<floatX>(), d_bs, d_ts, SX.hp<floatX>(), s_bs, s_ts, B, n, width);
    rows_copy(DX.dp<floatX>(), d_bs, d_ts, SX.dp<floatX>(), s_bs, s_ts, B, n, width, 0);
    DX.down(gotx.data());
    int changed = memcmp(DX.h.data(), dx.data(), nd * sizeof(floatX)) != 0;
    check(changed && memcmp(gotx.data(), DX.h.data(), nd * sizeof(floatX)) == 0,
          "rows_copy kernel = CPU reference, bit for bit (B=%d n=%d width=%d, strides %zu/%zu, gaps untouched) (%s)", B, n, width, d_ts,
          s_ts, PRECISION_MODE);
    // rows_store_f32: one rounding to floatX of the same FP32 value
    memcpy(DX.h.data(), dx.data(), nd * sizeof(floatX)); DX.up();
    rows_store_f32_cpu(DX.hp<floatX>(), d_bs, d_ts, S.hp<float>(), s_bs, s_ts, B, n, width);
    rows_store_f32(DX.dp<floatX>(), d_bs, d_ts, S.dp<float>(), s_bs, s_ts, B, n, width, 0);
    DX.down(gotx.data());
    changed = memcmp(DX.h.data(), dx.data(), nd * sizeof(floatX)) != 0;
    check(changed && memcmp(gotx.data(), DX.h.data(), nd * sizeof(floatX)) == 0,
          "rows_store_f32 kernel = CPU reference, bit for bit (rounded once to floatX; gaps untouched) (%s)", PRECISION_MODE);
    // rows_zero_f32
    memcpy(D.h.data(), df.data(), nd * 4); D.up();
    rows_zero_f32_cpu(D.hp<float>(), d_bs, d_ts, B, n, width);
    rows_zero_f32(D.dp<float>(), d_bs, d_ts, B, n, width, 0);
    D.down(gotf.data());
    changed = memcmp(D.h.data(), df.data(), nd * 4) != 0;
    check(changed && memcmp(gotf.data(), D.h.data(), nd * 4) == 0,
          "rows_zero_f32 kernel = CPU reference, bit for bit (gaps untouched) (%s)", PRECISION_MODE);
}
#endif

static void run_shape(int B, int H, int hs, int N, int c) {
    int C = H * hs, T = 2 * N * c;
    size_t nin = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    std::vector<float> inp(nin), dout(nout);
    rng_normal(&rng, inp.data(), nin, 0.0f, 1.0f);
    for (size_t r = 0; r < (size_t)B * T; r++)  // sharper softmaxes (scores of std ~1.5): the max moves between pieces
        for (int x = 0; x < C; x++) inp[r * 3 * C + x] *= 1.5f;
    rng_normal(&rng, dout.data(), nout, 0.0f, 1.0f);
    std::vector<float> out_ref(nout), lse_ref((size_t)B * H * T), dinp_ref(nin);
    attention_forward_cpu(out_ref.data(), lse_ref.data(), inp.data(), B, T, C, H);
    attention_backward_cpu(dinp_ref.data(), dout.data(), inp.data(), B, T, C, H);
    std::vector<floatX> qkv(nin), dy(nout);
    for (size_t x = 0; x < nin; x++) qkv[x] = (floatX)inp[x];
    for (size_t x = 0; x < nout; x++) dy[x] = (floatX)dout[x];
    for (int zigzag = 1; zigzag >= 0; zigzag--) {
        char what[160];
        snprintf(what, sizeof what, "B=%d H=%d hs=%d N=%d c=%d T=%d %s", B, H, hs, N, c, T, zigzag ? "zigzag" : "contiguous");
        Bounds bd = make_bounds(inp, dout, lse_ref, B, T, H, hs, N, zigzag);
        Ops ops = {0, {1}};
        Result res = ring_run(ops, qkv, dy, B, T, H, hs, N, c, zigzag);
        check_result(what, res, out_ref, lse_ref, dinp_ref, bd, B, T, H, hs);
#if LLM_HAS_KERNELS
        Ops refops = {1, {0}};
        Result ref = ring_run(refops, qkv, dy, B, T, H, hs, N, c, zigzag);
        check_result((std::string(what) + " (CPU reference functions)").c_str(), ref, out_ref, lse_ref, dinp_ref, bd, B, T, H, hs);
        check_kernels_vs_ref(what, res, ref, bd);
        Result again = ring_run(ops, qkv, dy, B, T, H, hs, N, c, zigzag);
        check(same_bits(res, again), "%s: the kernels run twice give the same bits (out, lse, dq, dk, dv)", what);
#endif
    }
}

static const char* USAGE =
    "[SEED]\n"
    "Tests ring attention's block-pair ops (llm/ops/attention_ring.cuh): the ring's pairs, zigzag and contiguous,\n"
    "against the whole-sequence attention reference, forward and backward.\n"
    "  SEED  the random inputs' seed, to repeat a run (default: from the clock; printed)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : (uint64_t)time(NULL);
    printf("seed %llu\n", (unsigned long long)seed);
    rng_init(&rng, seed);
    // (hs, N, cmin, cmax): hs 16 at N = 2 and 4, hs 8 and 32, c drawn from 3..8 per shape; then pieces longer
    // than the kernels' tiles (32 rows of the other side, 8 rows a block: several tiles, a last partial one, the
    // causal pair's tiles skipped above the diagonal) at hs 64 and 128 (2 and 4 channels a lane)
    const int shapes[][4] = {{16, 2, 3, 8}, {16, 4, 3, 8}, {8, 2, 3, 8}, {32, 4, 3, 8}, {64, 2, 33, 40}, {128, 2, 17, 24}};
#if defined(LLM_FLOATX_IS_FLOAT)
    for (const auto& s : shapes) {
        int c = s[2] + (int)(rng_u64(&rng) % (uint64_t)(s[3] - s[2] + 1));
        run_shape(2, 2, s[0], s[1], c);
    }
#else
    (void)shapes;  // the whole-sequence reference takes FP32: the 16-bit build checks the ops one by one (below)
#endif
#if LLM_HAS_KERNELS
    // op by op (hs, nq, nk, causal): nq != nk, hs not a multiple of 32, several tiles and blocks; {16, 70, 70, 1}: a
    // causal pair of two tiles of the 16-bit builds' tensor-core kernels (64 rows: the tile above the diagonal
    // skipped, the one below full, a partial last one)
    const int ops[][4] = {{16, 7, 7, 1}, {24, 33, 9, 0}, {64, 37, 45, 0}, {64, 41, 41, 1}, {128, 40, 40, 1}, {128, 9, 70, 0},
                          {16, 70, 70, 1}};
    for (const auto& o : ops) op_pair(o[0], o[1], o[2], o[3]);
    op_rows();
#endif
    return test_summary("attention_ring");
}
