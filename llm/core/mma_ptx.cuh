// mma_ptx.cuh: one warp's tensor-core product of 16-bit tiles, PTX's mma.sync.m16n8k16 with FP32
// accumulation (sm_80 and later), and the fragment loads the fused attention kernels build on
// (llm/ops/attention_mma_kernels.cuh). Unlike WMMA's, these fragment layouts are public (PTX ISA,
// "Matrix Fragments for mma.m16n8k16"), so a kernel may keep its accumulators in registers and work
// on them row by row (the online softmax does). Lane L, g = L / 4, t = L % 4; each 32-bit register
// holds two 16-bit elements, the lower column (A) or row (B) in its low half:
//   A (16 x 16, row-major):   a[0] = A[g][2t, 2t+1]     a[1] = A[g+8][2t, 2t+1]
//                             a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]
//   B (16 x 8):               b[0] = B[2t, 2t+1][g]     b[1] = B[2t+8, 2t+9][g]
//   C, D (16 x 8, float):     d[0], d[1] = D[g][2t, 2t+1]   d[2], d[3] = D[g+8][2t, 2t+1]
// So two accumulators side by side (16 x 16 of D) hold exactly the A fragment of the next product,
// once rounded to 16 bits: mma_pack_a. The emulated build runs the same layouts (dev/emu/mma.h).
// 16-bit floatX only (BF16 or FP16); kernel builds only.
#pragma once
#include <stdint.h>
#include <string.h>
#include <type_traits>
#include "common.h"

#if LLM_HAS_KERNELS && !defined(ENABLE_FP32)
#if LLM_BUILD_EMU
#include <mma.h>  // dev/emu/mma.h: emu_mma_sync_m16n8k16
#endif

// d (this lane's 4 floats of a 16 x 8 FP32 tile) += A (16 x 16) B (16 x 8), both 16-bit floatX
__device__ __forceinline__ void mma_16816(float* d, const uint32_t* a, const uint32_t* b) {
#if LLM_BUILD_EMU
    emu_mma_sync_m16n8k16(__FILE__, __LINE__, d, a, b, std::is_same<floatX, __nv_bfloat16>::value);
#elif defined(ENABLE_FP16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// two floatX in one register, lo in the low half
__device__ __forceinline__ uint32_t mma_pack(floatX lo, floatX hi) {
    uint16_t l, h;
    memcpy(&l, &lo, 2);
    memcpy(&h, &hi, 2);
    return (uint32_t)l | ((uint32_t)h << 16);
}
// the 32 bits at p (two adjacent floatX; p 4-byte aligned)
__device__ __forceinline__ uint32_t mma_ld32(const floatX* p) { return *(const uint32_t*)p; }

// the A fragment of rows [0, 16), columns [0, 16) of a row-major floatX tile (row stride ld elements, even)
__device__ __forceinline__ void mma_load_a(uint32_t* a, const floatX* tile, int ld) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    a[0] = mma_ld32(tile + g * ld + 2 * t);
    a[1] = mma_ld32(tile + (g + 8) * ld + 2 * t);
    a[2] = mma_ld32(tile + g * ld + 2 * t + 8);
    a[3] = mma_ld32(tile + (g + 8) * ld + 2 * t + 8);
}
// the B fragment of B = X^T for a row-major floatX tile X (8 rows n, 16 columns k): B[k][n] = X[n][k]
// (the keys of S = Q K^T: X = K)
__device__ __forceinline__ void mma_load_bt(uint32_t* b, const floatX* tile, int ld) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    b[0] = mma_ld32(tile + g * ld + 2 * t);
    b[1] = mma_ld32(tile + g * ld + 2 * t + 8);
}
// the B fragment of a row-major floatX tile X (16 rows k, 8 columns n): B[k][n] = X[k][n] (the values
// of O += P V: X = V)
__device__ __forceinline__ void mma_load_b(uint32_t* b, const floatX* tile, int ld) {
    int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    b[0] = mma_pack(tile[(2 * t) * ld + g], tile[(2 * t + 1) * ld + g]);
    b[1] = mma_pack(tile[(2 * t + 8) * ld + g], tile[(2 * t + 9) * ld + g]);
}
// the A fragment (16 x 16) of two accumulators side by side, c0 = columns [0, 8), c1 = [8, 16), each
// element rounded once to floatX
__device__ __forceinline__ void mma_pack_a(uint32_t* a, const float* c0, const float* c1) {
    a[0] = mma_pack((floatX)c0[0], (floatX)c0[1]);
    a[1] = mma_pack((floatX)c0[2], (floatX)c0[3]);
    a[2] = mma_pack((floatX)c1[0], (floatX)c1[1]);
    a[3] = mma_pack((floatX)c1[2], (floatX)c1[3]);
}
#endif
