// cuda_utils.cuh: device helpers shared by the kernels of every op file: 128-bit packed loads and
// stores of floatX (x128), and warp / block reductions with shuffles. Kernel builds only.
#pragma once
#include "common.h"

#if LLM_HAS_KERNELS

// 16 bytes of elements, loaded and stored with one 128-bit instruction (the pointer must be
// 16-byte aligned: a misaligned vector load is fatal on a GPU, so the emulated build checks it)
template <class T>
struct alignas(16) Packed128 {
    static constexpr int size = (int)(16 / sizeof(T));
    T payload[size];
    __device__ __host__ Packed128() {}
    __device__ static Packed128 constant(T v) {
        Packed128 r;
        for (int k = 0; k < size; k++) r.payload[k] = v;
        return r;
    }
    __device__ __host__ T& operator[](int i) { return payload[i]; }
    __device__ __host__ const T& operator[](int i) const { return payload[i]; }
};
typedef Packed128<floatX> x128;  // 8 bf16 or 4 float
typedef Packed128<float> f128;   // 4 float

#if LLM_BUILD_EMU
#define KC_ASSERT_ALIGNED16(p)                                                                        \
    do {                                                                                              \
        if (((uintptr_t)(p)) % 16 != 0) {                                                             \
            fprintf(stderr, "error: misaligned 128-bit access at %p (%s:%d)\n", (const void*)(p), __FILE__, __LINE__); \
            abort();                                                                                  \
        }                                                                                             \
    } while (0)
#else
#define KC_ASSERT_ALIGNED16(p) do {} while (0)
#endif

// host-side check before choosing the 128-bit path of a kernel (NULL counts as aligned)
static inline bool is_aligned16(const void* p) { return ((uintptr_t)p % 16) == 0; }

template <class T>
__device__ __forceinline__ Packed128<T> load128(const T* p) {
    KC_ASSERT_ALIGNED16(p);
    return *reinterpret_cast<const Packed128<T>*>(p);
}
// load that bypasses the caches' "keep" policy: for data read exactly once (streaming)
template <class T>
__device__ __forceinline__ Packed128<T> load128cs(const T* p) {
    KC_ASSERT_ALIGNED16(p);
    int4 bits = __ldcs(reinterpret_cast<const int4*>(p));
    Packed128<T> r;
    memcpy(&r, &bits, sizeof(bits));
    return r;
}
template <class T>
__device__ __forceinline__ void store128(T* p, Packed128<T> v) {
    KC_ASSERT_ALIGNED16(p);
    *reinterpret_cast<Packed128<T>*>(p) = v;
}

// Reductions over the 32 lanes of a warp and over a block, for an associative op given as a functor
// (float op(float, float)); every lane / thread gets the result. Sum and max here; fp8.cuh adds a max
// that keeps NaN.
struct ReduceSum { __device__ __forceinline__ float operator()(float a, float b) const { return a + b; } };
struct ReduceMax { __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); } };

template <typename Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
    for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}
__device__ __forceinline__ float warp_reduce_sum(float v) { return warp_reduce(v, ReduceSum()); }
__device__ __forceinline__ float warp_reduce_max(float v) { return warp_reduce(v, ReduceMax()); }

// over a block of up to 1024 threads (blockDim.x a multiple of 32). The lanes past the block's warps
// bring 0 to the last step, so op(x, 0) must be x for the values reduced (a sum; a max of values >= 0).
// Uses 32 floats of shared memory; safe to call repeatedly (a barrier guards the reuse).
template <typename Op>
__device__ __forceinline__ float block_reduce(float v, Op op) {
    __shared__ float partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_reduce(v, op);
    __syncthreads();  // the previous call's readers are done with `partial`
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < nwarps ? partial[lane] : 0.0f;
    return warp_reduce(v, op);
}
__device__ __forceinline__ float block_reduce_sum(float v) { return block_reduce(v, ReduceSum()); }

#endif  // LLM_HAS_KERNELS
