// mma.h: the emulated build's WMMA subset (nvcuda::wmma), what a fused attention kernel uses. Under
// nvcc, `#include <mma.h>` finds the toolkit's header; in the emulated build (-Idev/emu before the
// toolkit's include directory) it finds this one, so a kernel written with the real API compiles
// unchanged in both. See README.md beside this file ("WMMA") for the subset and what it does not do.
//
// - Fragments: m16n16k16 only; matrix_a / matrix_b of __nv_bfloat16 or __half, row_major or
//   col_major; accumulator of float. Every fragment holds num_elements = 8 elements a lane.
// - The lane mapping (which element of the 16x16 tile lane L's x[i] is) is OPAQUE on purpose: a fixed
//   scrambled permutation per fragment kind (emu_wmma_elem below), different from NVIDIA's private
//   one. Element-wise code that does the same to every x[i] works; code that assumes NVIDIA's layout
//   (reading row/column from lane and i) gets wrong results here instead of only on other GPUs.
// - Every operation is warp-collective: a barrier of all 32 lanes (the warp collectives of
//   emu_sched.h), so a lane that skips one, returns, or meets its warp in a different collective is
//   reported; a warp of fewer than 32 threads is refused.
// - Checks, each an `emu: error:` line naming the call and its file:line: pointers 256-bit (32-byte)
//   aligned, ldm a multiple of 8 elements for 16-bit types and of 4 for float, every lane passing the
//   same pointer, ldm and layout.
// - mma_sync: D = A*B + C with FP32 accumulation: each D[m][n] is C[m][n] plus the 16 products
//   A[m][k]*B[k][n] (exact in float: 8x8 or 11x11 significand bits) added in float in the order
//   k = 0, 1, ..., 15, each sum rounded to nearest. Real tensor cores fix neither the order nor the
//   rounding of the internal sum; compare against a reference with a bound, never bit for bit.
#pragma once

#include "emu.h"
#include <cuda_fp16.h>
#include <type_traits>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulated WMMA subset (dev/emu/mma.h) has m16n16k16 only");
    static_assert(!std::is_same<Use, accumulator>::value || (std::is_same<T, float>::value && std::is_void<Layout>::value),
                  "the emulated WMMA subset has float accumulators without a layout only");
    static_assert(std::is_same<Use, accumulator>::value ||
                      ((std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value) &&
                       (std::is_same<Layout, row_major>::value || std::is_same<Layout, col_major>::value)),
                  "the emulated WMMA subset has matrix_a/matrix_b of __nv_bfloat16 or __half, row_major or col_major");

  public:
    typedef T element_type;
    typedef T storage_element_type;
    static constexpr int num_elements = 8;  // 256 elements of the tile over 32 lanes
    T x[num_elements];
};

// the opaque lane mapping: element i of lane L is tile element e = (j * mul + add) mod 256 with
// j = 8 L + i (a bijection: mul is odd), row e / 16, column e % 16 of the tile (A: m x k, B: k x n,
// accumulator: m x n). A different permutation for each kind, none of them NVIDIA's.
template <typename Use>
static inline int emu_wmma_elem(int lane, int i) {
    int j = lane * 8 + i;
    if (std::is_same<Use, matrix_a>::value) return (j * 77 + 13) & 255;
    if (std::is_same<Use, matrix_b>::value) return (j * 45 + 200) & 255;
    return (j * 173 + 91) & 255;
}
// where tile element (r, c) lies in memory
static inline size_t emu_wmma_off(int r, int c, unsigned ldm, bool col) {
    return col ? (size_t)c * ldm + r : (size_t)r * ldm + c;
}

// what a lane brings to a WMMA collective (EmuWarpHook: the last lane to arrive runs `run`)
struct EmuWmmaCall {
    EmuWarpHook hook;
    const char* what;
    const void* p;
    unsigned ldm;
    int col;
    const void *a, *b, *c;
    void* d;
};

// every lane must pass the same pointer, ldm and layout (the GPU's behaviour is undefined otherwise)
EMU_NOTSAN static inline void emu_wmma_uniform(EmuWarpHook* const* lanes, const char* file, int line) {
    const EmuWmmaCall* c0 = (const EmuWmmaCall*)lanes[0];
    for (int l = 1; l < 32; l++) {
        const EmuWmmaCall* c = (const EmuWmmaCall*)lanes[l];
        if (c->p != c0->p || c->ldm != c0->ldm || c->col != c0->col)
            emu_misuse("%s at %s:%d: lanes of one warp pass different arguments: lane 0 pointer %p ldm %u %s, lane %d "
                       "pointer %p ldm %u %s",
                       c0->what, file, line, c0->p, c0->ldm, c0->col ? "col-major" : "row-major", l, c->p, c->ldm,
                       c->col ? "col-major" : "row-major");
    }
}

// a tensor-core collective (`what`, of the `kind` WMMA or mma.sync) is called from a kernel by a full warp
static inline void emu_mma_in_full_warp(const char* what, const char* kind, const char* file, int line) {
    EmuWorker* w = emu_w;
    if (w == NULL || w->running == NULL) emu_not_in_kernel(what, file, line);
    if (w->warps[w->running->lin >> 5].present != 0xffffffffu)
        emu_misuse("%s at %s:%d: %s needs a full warp of 32 threads (the block has %d threads)", what, file, line, kind, w->n);
}

// one lane's checks before it joins the collective, and the collective itself
template <typename T>
static inline void emu_wmma_join(EmuWmmaCall* call, int coll, const char* file, int line) {
    emu_mma_in_full_warp(call->what, "WMMA", file, line);
    if (coll == EMU_C_WMMA_LOAD || coll == EMU_C_WMMA_STORE) {
        if ((uintptr_t)call->p % 32 != 0)
            emu_misuse("%s at %s:%d: pointer %p is not 256-bit (32-byte) aligned", call->what, file, line, call->p);
        unsigned mult = sizeof(T) == 2 ? 8 : 4;
        if (call->ldm % mult != 0)
            emu_misuse("%s at %s:%d: ldm %u is not a multiple of %u elements (%s)", call->what, file, line, call->ldm,
                       mult, sizeof(T) == 2 ? "16-bit types: 16 bytes" : "float: 16 bytes");
    }
    emu_warp_op(file, line, coll, 0xffffffffu, (uint64_t)(uintptr_t)call, 0, 32);
}

template <typename Use, typename T, typename L>
static inline void fill_fragment_emu(const char* file, int line, fragment<Use, 16, 16, 16, T, L>& a,
                                     const typename std::common_type<T>::type& v) {
    EmuWmmaCall call = {{NULL}, "wmma::fill_fragment", NULL, 0, 0, NULL, NULL, NULL, NULL};
    emu_wmma_join<T>(&call, EMU_C_WMMA_FILL, file, line);
    for (int i = 0; i < a.num_elements; i++) a.x[i] = v;
}

// loads and stores: the warp meets first, then each lane moves its own elements (so a kernel that
// reads what other lanes stored without a __syncwarp is as wrong here as on a GPU)
template <typename Use, typename T, typename L>
static inline void emu_wmma_load(const char* file, int line, fragment<Use, 16, 16, 16, T, L>& a, const T* p,
                                 unsigned ldm, bool col) {
    EmuWmmaCall call = {{emu_wmma_uniform}, "wmma::load_matrix_sync", p, ldm, col, NULL, NULL, NULL, NULL};
    emu_wmma_join<T>(&call, EMU_C_WMMA_LOAD, file, line);
    int lane = emu_w->running->lin & 31;
    for (int i = 0; i < a.num_elements; i++) {
        int e = emu_wmma_elem<Use>(lane, i);
        a.x[i] = p[emu_wmma_off(e >> 4, e & 15, ldm, col)];
    }
}
template <typename Use, typename T, typename L>
static inline void load_matrix_sync_emu(const char* file, int line, fragment<Use, 16, 16, 16, T, L>& a,
                                        const typename std::common_type<T>::type* p, unsigned ldm) {
    static_assert(!std::is_same<Use, accumulator>::value, "an accumulator's load_matrix_sync takes a layout_t");
    emu_wmma_load(file, line, a, p, ldm, std::is_same<L, col_major>::value);
}
static inline void load_matrix_sync_emu(const char* file, int line, fragment<accumulator, 16, 16, 16, float>& a,
                                        const float* p, unsigned ldm, layout_t layout) {
    emu_wmma_load(file, line, a, p, ldm, layout == mem_col_major);
}
static inline void store_matrix_sync_emu(const char* file, int line, float* p,
                                         const fragment<accumulator, 16, 16, 16, float>& a, unsigned ldm,
                                         layout_t layout) {
    EmuWmmaCall call = {{emu_wmma_uniform}, "wmma::store_matrix_sync", p, ldm, layout == mem_col_major,
                        NULL, NULL, NULL, NULL};
    emu_wmma_join<float>(&call, EMU_C_WMMA_STORE, file, line);
    int lane = emu_w->running->lin & 31;
    for (int i = 0; i < a.num_elements; i++) {
        int e = emu_wmma_elem<accumulator>(lane, i);
        p[emu_wmma_off(e >> 4, e & 15, ldm, layout == mem_col_major)] = a.x[i];
    }
}

// bf16 / half bits to float, by hand: the hook below must not call the toolkit's (instrumented)
// conversions, see there
EMU_NOTSAN static inline float emu_bf16_bits_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;  // the top half of a float
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}
EMU_NOTSAN static inline float emu_wmma_to_float(const __nv_bfloat16& v) {
    uint16_t h;
    __builtin_memcpy(&h, &v, 2);
    return emu_bf16_bits_to_float(h);
}
EMU_NOTSAN static inline float emu_half_bits_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu, u;
    if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float
        float f = (float)m * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    u = e == 31 ? sign | 0x7f800000u | (m << 13) : sign | ((e + 112u) << 23) | (m << 13);
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}
EMU_NOTSAN static inline float emu_wmma_to_float(const __half& v) {
    uint16_t h;
    __builtin_memcpy(&h, &v, 2);
    return emu_half_bits_to_float(h);
}

// the last lane to arrive: gather the three tiles from all lanes, compute, scatter D. It runs on that
// lane's fiber and touches the other lanes' fragments (on their stacks) before they resume: in the
// TSan mode that looks unordered, so nothing here is instrumented (EMU_NOTSAN, no calls into
// instrumented code); the lanes' own accesses to their fragments stay checked.
template <typename T, typename LA, typename LB>
EMU_NOTSAN static inline void emu_wmma_mma_run(EmuWarpHook* const* lanes, const char*, int) {
    typedef fragment<matrix_a, 16, 16, 16, T, LA> FA;
    typedef fragment<matrix_b, 16, 16, 16, T, LB> FB;
    typedef fragment<accumulator, 16, 16, 16, float> FC;
    float A[256], B[256], C[256], D[256];
    for (int l = 0; l < 32; l++) {
        const EmuWmmaCall* c = (const EmuWmmaCall*)lanes[l];
        for (int i = 0; i < 8; i++) {
            A[emu_wmma_elem<matrix_a>(l, i)] = emu_wmma_to_float(((const FA*)c->a)->x[i]);
            B[emu_wmma_elem<matrix_b>(l, i)] = emu_wmma_to_float(((const FB*)c->b)->x[i]);
            C[emu_wmma_elem<accumulator>(l, i)] = ((const FC*)c->c)->x[i];
        }
    }
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            float acc = C[m * 16 + n];
            for (int k = 0; k < 16; k++) acc += A[m * 16 + k] * B[k * 16 + n];  // exact product, float sum
            D[m * 16 + n] = acc;
        }
    for (int l = 0; l < 32; l++) {
        const EmuWmmaCall* c = (const EmuWmmaCall*)lanes[l];
        for (int i = 0; i < 8; i++) ((FC*)c->d)->x[i] = D[emu_wmma_elem<accumulator>(l, i)];
    }
}
template <typename T, typename LA, typename LB>
static inline void mma_sync_emu(const char* file, int line, fragment<accumulator, 16, 16, 16, float>& d,
                                const fragment<matrix_a, 16, 16, 16, T, LA>& a,
                                const fragment<matrix_b, 16, 16, 16, T, LB>& b,
                                const fragment<accumulator, 16, 16, 16, float>& c) {
    EmuWmmaCall call = {{emu_wmma_mma_run<T, LA, LB>}, "wmma::mma_sync", NULL, 0, 0, &a, &b, &c, &d};
    emu_wmma_join<T>(&call, EMU_C_WMMA_MMA, file, line);
}

}  // namespace wmma
}  // namespace nvcuda

// PTX's mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 (llm/core/mma_ptx.cuh calls it),
// with the fragment layouts the PTX ISA documents (unlike WMMA's, they are public: code may and does
// rely on them). Lane L, g = L / 4, t = L % 4; each 32-bit register holds two 16-bit elements, the lower
// column (A) or row (B) in its low half:
//   A (16 x 16, row-major):   a[0] = A[g][2t, 2t+1]     a[1] = A[g+8][2t, 2t+1]
//                             a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]
//   B (16 x 8, "col"):        b[0] = B[2t, 2t+1][g]     b[1] = B[2t+8, 2t+9][g]
//   C, D (16 x 8, float):     d[0], d[1] = D[g][2t, 2t+1]   d[2], d[3] = D[g+8][2t, 2t+1]
// D = A B + C in the same arithmetic as wmma::mma_sync above (exact products, float sums in k order).
// A full warp must call it (warp-collective, like WMMA).
struct EmuMmaCall {
    EmuWarpHook hook;
    const uint32_t *a, *b;
    float* d;
    int bf16;
};
EMU_NOTSAN static inline float emu_mma_half_to_float(uint32_t r, int hi, int bf16) {
    uint16_t h = (uint16_t)(hi ? r >> 16 : r & 0xffffu);
    return bf16 ? nvcuda::wmma::emu_bf16_bits_to_float(h) : nvcuda::wmma::emu_half_bits_to_float(h);
}
EMU_NOTSAN static inline void emu_mma_sync_run(EmuWarpHook* const* lanes, const char*, int) {
    float A[16][16], B[16][8], D[16][8];
    int bf16 = ((const EmuMmaCall*)lanes[0])->bf16;
    for (int l = 0; l < 32; l++) {
        const EmuMmaCall* c = (const EmuMmaCall*)lanes[l];
        int g = l / 4, t = l % 4;
        for (int h = 0; h < 2; h++) {
            A[g][2 * t + h] = emu_mma_half_to_float(c->a[0], h, bf16);
            A[g + 8][2 * t + h] = emu_mma_half_to_float(c->a[1], h, bf16);
            A[g][2 * t + 8 + h] = emu_mma_half_to_float(c->a[2], h, bf16);
            A[g + 8][2 * t + 8 + h] = emu_mma_half_to_float(c->a[3], h, bf16);
            B[2 * t + h][g] = emu_mma_half_to_float(c->b[0], h, bf16);
            B[2 * t + 8 + h][g] = emu_mma_half_to_float(c->b[1], h, bf16);
            D[g][2 * t + h] = c->d[h];
            D[g + 8][2 * t + h] = c->d[2 + h];
        }
    }
    float R[16][8];
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            float acc = D[m][n];
            for (int k = 0; k < 16; k++) acc += A[m][k] * B[k][n];
            R[m][n] = acc;
        }
    for (int l = 0; l < 32; l++) {
        const EmuMmaCall* c = (const EmuMmaCall*)lanes[l];
        int g = l / 4, t = l % 4;
        for (int h = 0; h < 2; h++) { c->d[h] = R[g][2 * t + h]; c->d[2 + h] = R[g + 8][2 * t + h]; }
    }
}
// d (4 floats) += A B, a (4 registers), b (2 registers) of this lane; bf16: the 16-bit type
static inline void emu_mma_sync_m16n8k16(const char* file, int line, float* d, const uint32_t* a, const uint32_t* b,
                                         int bf16) {
    EmuMmaCall call = {{emu_mma_sync_run}, a, b, d, bf16};
    nvcuda::wmma::emu_mma_in_full_warp("mma.sync.m16n8k16", "mma.sync", file, line);
    emu_warp_op(file, line, EMU_C_MMA_SYNC, 0xffffffffu, (uint64_t)(uintptr_t)&call, 0, 32);
}

// the calls keep the caller's file:line (for the error lines): `wmma::mma_sync(...)` becomes
// `wmma::mma_sync_emu(__FILE__, __LINE__, ...)`, whatever namespace qualification it is written with
#define fill_fragment(...) fill_fragment_emu(__FILE__, __LINE__, __VA_ARGS__)
#define load_matrix_sync(...) load_matrix_sync_emu(__FILE__, __LINE__, __VA_ARGS__)
#define store_matrix_sync(...) store_matrix_sync_emu(__FILE__, __LINE__, __VA_ARGS__)
#define mma_sync(...) mma_sync_emu(__FILE__, __LINE__, __VA_ARGS__)
