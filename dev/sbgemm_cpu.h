// sbgemm_cpu.h: an experiment, measured and not used by the trainer: a BF16 GEMM, C (M,N) FP32 =
// op(A) op(B) + beta C with A and B in BF16, products and sums in FP32, on AVX512-BF16's dot-product
// instruction (vdpbf16ps: each of 16 lanes adds a[2i] b[2i] + a[2i+1] b[2i+1] to an FP32 accumulator)
// where the compiler targets a CPU that has it, a portable micro-kernel with the same arithmetic
// otherwise. Debian's OpenBLAS (0.3.21) has no sbgemm, so the CPU BF16 build converts its operands to
// FP32 for sgemm; this was to replace that. It does not pay on the CPU it was written on (an Intel Xeon,
// family 6 model 207, 2 cores, 2026-11-28): the micro-kernel's inner loop is what it should be (2 loads,
// 12 broadcasts, 24 vdpbf16ps per k pair) yet peaks at 80-86 GFLOP/s on one core with its data in L1, where
// OpenBLAS's FP32 sgemm reaches ~105 a core on the linear layers. That is the instruction's own ceiling: one vdpbf16ps
// every 2 cycles against two vfmadd231ps a cycle, so its twice the FLOPs per instruction leave it at half FP32's
// peak (85 against 175 GFLOP/s on one core, 2026-11-29), and the whole GEMM ran at 0.6x sgemm on GPT-2's linear
// layers (dev/bench_matmul_cpu_bf16.cu prints the instructions' peaks, the micro-kernel's and both GEMMs). A CPU whose BF16 unit is faster than its FP32 FMA (AMX
// tiles) is where a BF16 GEMM wins; this one exposes none.
//
// The blocking of Goto & van de Geijn 2008 ("Anatomy of high-performance matrix multiplication"), with
// the packing the instruction wants: K in blocks of KC; per block, op(A) packed in panels of MR = 12 rows
// whose two consecutive k's sit side by side (one 32-bit broadcast feeds a row's pair), op(B) in panels
// of NR = 32 columns, each k pair interleaved per column (one 512-bit load is 16 columns x 2 k's). The
// micro-kernel holds a 12 x 32 tile of C in 24 registers. Threads split the N panels; each packs its own
// B panel (KC x 32, 24 KiB at KC 384: L1) and streams the shared packed A (M x KC, in L2) past it.
// Edges are zero-padded in the packs (an odd K gets a zero pair member) and masked on the stores.
#pragma once
#include "../llm/core/common.h"
#include "../llm/core/half_cpu.h"  // bf16_bits_to_float
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#define SBGEMM_AVX512BF16 1
#else
#define SBGEMM_AVX512BF16 0
#endif

#define SBGEMM_MR 12
#define SBGEMM_NR 32
#define SBGEMM_KC 384  // a multiple of 2

// the raw 16 bits of a BF16 operand element (floatX is bf16_cpu in the CPU BF16 build: 2 bytes)
static inline uint16_t sbgemm_bits(const void* p, size_t i) {
    uint16_t v;
    memcpy(&v, (const char*)p + 2 * i, 2);
    return v;
}
// One panel of an operand seen as rows by k (op(A): its M rows; op(B): its N columns): rows [i0, i0 + ir)
// by k's [k0, k0 + kc), zero-padded to R rows and to an even kc; pair p of row i at dst[(p * R + i) * 2 + {0, 1}].
// Element (row, k) is src[k * ld + row] when kmajor (A transposed, B not), else src[row * ld + k].
static void sbgemm_pack(uint16_t* dst, int R, const void* src, int ld, int kmajor, int i0, int ir, int k0, int kc) {
    int kp = (kc + 1) / 2;
    for (int p = 0; p < kp; p++)
        for (int i = 0; i < R; i++)
            for (int h = 0; h < 2; h++) {
                int k = k0 + 2 * p + h, row = i0 + i;
                uint16_t v = 0;
                if (i < ir && 2 * p + h < kc)
                    v = kmajor ? sbgemm_bits(src, (size_t)k * ld + row) : sbgemm_bits(src, (size_t)row * ld + k);
                dst[((size_t)p * R + i) * 2 + h] = v;
            }
}

// C[0..mr) x [0..nr) (row stride ldc) = (add ? C : 0) + the packed panels' product over kp pairs
static void sbgemm_kernel(float* c, int ldc, const uint16_t* ap, const uint16_t* bp, int kp, int mr, int nr, int add) {
#if SBGEMM_AVX512BF16
    __m512 acc[SBGEMM_MR][2];
    for (int m = 0; m < SBGEMM_MR; m++) acc[m][0] = acc[m][1] = _mm512_setzero_ps();
    for (int p = 0; p < kp; p++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + (size_t)p * 2 * SBGEMM_NR);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + (size_t)p * 2 * SBGEMM_NR + 32);
        const uint16_t* a = ap + (size_t)p * 2 * SBGEMM_MR;
        for (int m = 0; m < SBGEMM_MR; m++) {
            int32_t pair;
            memcpy(&pair, a + 2 * m, 4);
            __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
            acc[m][0] = _mm512_dpbf16_ps(acc[m][0], av, b0);
            acc[m][1] = _mm512_dpbf16_ps(acc[m][1], av, b1);
        }
    }
    __mmask16 k0 = nr >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1);
    __mmask16 k1 = nr >= 32 ? (__mmask16)0xffff : nr <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nr - 16)) - 1);
    for (int m = 0; m < mr; m++) {
        float* row = c + (size_t)m * ldc;
        __m512 v0 = acc[m][0], v1 = acc[m][1];
        if (add) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(k0, row));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(k1, row + 16));
        }
        _mm512_mask_storeu_ps(row, k0, v0);
        _mm512_mask_storeu_ps(row + 16, k1, v1);
    }
#else
    // the same arithmetic, lane by lane: each pair's two products (exact in FP32) added, then accumulated
    float acc[SBGEMM_MR][SBGEMM_NR];
    memset(acc, 0, sizeof(acc));
    for (int p = 0; p < kp; p++) {
        const uint16_t* a = ap + (size_t)p * 2 * SBGEMM_MR;
        const uint16_t* b = bp + (size_t)p * 2 * SBGEMM_NR;
        for (int m = 0; m < SBGEMM_MR; m++) {
            float a0 = bf16_bits_to_float(a[2 * m]), a1 = bf16_bits_to_float(a[2 * m + 1]);
            for (int n = 0; n < SBGEMM_NR; n++)
                acc[m][n] += a0 * bf16_bits_to_float(b[2 * n]) + a1 * bf16_bits_to_float(b[2 * n + 1]);
        }
    }
    for (int m = 0; m < mr; m++)
        for (int n = 0; n < nr; n++) c[(size_t)m * ldc + n] = (add ? c[(size_t)m * ldc + n] : 0.0f) + acc[m][n];
#endif
}

// C (M,N) FP32 row-major = op(A) op(B) + beta C; A (M,K) or, with ta, (K,M) BF16 row-major (lda); B (K,N)
// or, with tb, (N,K) (ldb); beta 0 or 1. The 16-bit arrays are passed as bytes (bf16_cpu or uint16_t).
static void sbgemm_cpu(int ta, int tb, int M, int N, int K, const void* a, int lda, const void* b, int ldb, float beta,
                       float* c, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (beta != 0.0f && beta != 1.0f) fatal("sbgemm_cpu: beta must be 0 or 1, found %g", beta);
    if (K <= 0) {
        if (beta == 0.0f)
            for (int m = 0; m < M; m++) memset(c + (size_t)m * ldc, 0, (size_t)N * sizeof(float));
        return;
    }
    int mpanels = (M + SBGEMM_MR - 1) / SBGEMM_MR, npanels = (N + SBGEMM_NR - 1) / SBGEMM_NR;
    size_t apanel = (size_t)SBGEMM_KC * SBGEMM_MR, bpanel = (size_t)SBGEMM_KC * SBGEMM_NR;  // uint16_t each
    uint16_t* apack = (uint16_t*)malloc((size_t)mpanels * apanel * sizeof(uint16_t));
    if (apack == NULL) fatal("sbgemm_cpu: out of memory for the packed A (%d x %d)", M, SBGEMM_KC);
    for (int k0 = 0; k0 < K; k0 += SBGEMM_KC) {
        int kc = K - k0 < SBGEMM_KC ? K - k0 : SBGEMM_KC, kp = (kc + 1) / 2;
        int add = k0 > 0 || beta != 0.0f;
        #pragma omp parallel
        {
            #pragma omp for schedule(static)
            for (int i = 0; i < mpanels; i++) {
                int m0 = i * SBGEMM_MR, mr = M - m0 < SBGEMM_MR ? M - m0 : SBGEMM_MR;
                sbgemm_pack(apack + (size_t)i * apanel, SBGEMM_MR, a, lda, ta, m0, mr, k0, kc);
            }
            uint16_t* bpack = (uint16_t*)aligned_alloc(64, bpanel * sizeof(uint16_t));
            if (bpack == NULL) fatal("sbgemm_cpu: out of memory for a packed B panel");
            #pragma omp for schedule(static)
            for (int j = 0; j < npanels; j++) {
                int n0 = j * SBGEMM_NR, nr = N - n0 < SBGEMM_NR ? N - n0 : SBGEMM_NR;
                sbgemm_pack(bpack, SBGEMM_NR, b, ldb, !tb, n0, nr, k0, kc);
                for (int i = 0; i < mpanels; i++) {
                    int m0 = i * SBGEMM_MR, mr = M - m0 < SBGEMM_MR ? M - m0 : SBGEMM_MR;
                    sbgemm_kernel(c + (size_t)m0 * ldc + n0, ldc, apack + (size_t)i * apanel, bpack, kp, mr, nr, add);
                }
            }
            free(bpack);
        }
    }
    free(apack);
}
