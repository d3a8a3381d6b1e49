// emu_device.h: device-side functions that kernels call and the host lacks: fast-math intrinsics,
// rounding conversions, bit tricks, the bf16 functions cuda_bf16.h only declares for nvcc, integer
// max/min, cache-hinted loads and stores, fences, and atomics. Atomics are compare-and-swap loops on
// the raw bits (relaxed, like CUDA's), so they are real atomics across the OS threads that run
// blocks. Functions the toolkit's host headers might provide in another version are templates
// here, so a real (non-template) host definition wins overload resolution instead of clashing.
// Part of dev/emu/emu.h; not meant to be included on its own.
#pragma once

// glibc declares the internal names __expf, __logf, ... in <math.h> without exporting them; define
// them with the same (noexcept) declaration. Elsewhere they are simply new functions.
#if defined(__GLIBC__)
#define EMU_MATH_NOEXCEPT noexcept
#else
#define EMU_MATH_NOEXCEPT
#endif
inline float __expf(float x) EMU_MATH_NOEXCEPT { return expf(x); }
inline float __exp10f(float x) EMU_MATH_NOEXCEPT { return powf(10.0f, x); }
inline float __logf(float x) EMU_MATH_NOEXCEPT { return logf(x); }
inline float __log2f(float x) EMU_MATH_NOEXCEPT { return log2f(x); }
inline float __log10f(float x) EMU_MATH_NOEXCEPT { return log10f(x); }
inline float __sinf(float x) EMU_MATH_NOEXCEPT { return sinf(x); }
inline float __cosf(float x) EMU_MATH_NOEXCEPT { return cosf(x); }
inline float __tanf(float x) EMU_MATH_NOEXCEPT { return tanf(x); }
inline float __tanhf(float x) EMU_MATH_NOEXCEPT { return tanhf(x); }
inline float __powf(float x, float y) EMU_MATH_NOEXCEPT { return powf(x, y); }
inline void __sincosf(float x, float* s, float* c) EMU_MATH_NOEXCEPT { *s = sinf(x); *c = cosf(x); }

// ----------------------------------------------------------------------------
// float intrinsics (computed exactly rounded on the CPU; the GPU's fast versions differ in the
// last bits: compare with tolerances)

static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
static inline float __fadd_rn(float x, float y) { return x + y; }
static inline float __fsub_rn(float x, float y) { return x - y; }
static inline float __fmul_rn(float x, float y) { return x * y; }
static inline float __fdiv_rn(float x, float y) { return x / y; }
static inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
static inline float __saturatef(float x) { return x != x ? 0.0f : fminf(fmaxf(x, 0.0f), 1.0f); }

static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)truncf(x); }
static inline int __float2int_rd(float x) { return (int)floorf(x); }
static inline int __float2int_ru(float x) { return (int)ceilf(x); }
static inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
static inline long long __float2ll_rn(float x) { return (long long)nearbyintf(x); }
static inline float __int2float_rn(int x) { return (float)x; }
static inline float __uint2float_rn(unsigned x) { return (float)x; }
static inline float __ll2float_rn(long long x) { return (float)x; }
static inline float __double2float_rn(double x) { return (float)x; }

static inline int __float_as_int(float x) { int r; memcpy(&r, &x, 4); return r; }
static inline unsigned __float_as_uint(float x) { unsigned r; memcpy(&r, &x, 4); return r; }
static inline float __int_as_float(int x) { float r; memcpy(&r, &x, 4); return r; }
static inline float __uint_as_float(unsigned x) { float r; memcpy(&r, &x, 4); return r; }
static inline long long __double_as_longlong(double x) { long long r; memcpy(&r, &x, 8); return r; }
static inline double __longlong_as_double(long long x) { double r; memcpy(&r, &x, 8); return r; }

// ----------------------------------------------------------------------------
// integer intrinsics

static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    return __builtin_bswap32(x);
}
static inline int __mul24(int x, int y) {  // low 32 bits of the product of the sign-extended low 24 bits
    long long a = ((x & 0xFFFFFF) ^ 0x800000) - 0x800000, b = ((y & 0xFFFFFF) ^ 0x800000) - 0x800000;
    return (int)(unsigned)(a * b);
}
static inline unsigned __umul24(unsigned x, unsigned y) { return (x & 0xFFFFFFu) * (y & 0xFFFFFFu); }
static inline int __mulhi(int x, int y) { return (int)(((long long)x * y) >> 32); }
static inline unsigned __umulhi(unsigned x, unsigned y) { return (unsigned)(((unsigned long long)x * y) >> 32); }
__extension__ typedef __int128 emu_i128;
__extension__ typedef unsigned __int128 emu_u128;
static inline long long __mul64hi(long long x, long long y) { return (long long)(((emu_i128)x * y) >> 64); }
static inline unsigned long long __umul64hi(unsigned long long x, unsigned long long y) {
    return (unsigned long long)(((emu_u128)x * y) >> 64);
}
// byte s of the 8-byte value {y,x}, for each selector nibble of s
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
}

// max and min of mixed arithmetic types, as CUDA's overloads (the usual arithmetic conversions)
template <typename A, typename B,
          typename = typename std::enable_if<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>::type>
static inline typename std::common_type<A, B>::type max(A a, B b) {
    typedef typename std::common_type<A, B>::type T;
    if constexpr (std::is_floating_point<T>::value) return fmax((T)a, (T)b);
    else return (T)a > (T)b ? (T)a : (T)b;
}
template <typename A, typename B,
          typename = typename std::enable_if<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>::type>
static inline typename std::common_type<A, B>::type min(A a, B b) {
    typedef typename std::common_type<A, B>::type T;
    if constexpr (std::is_floating_point<T>::value) return fmin((T)a, (T)b);
    else return (T)a < (T)b ? (T)a : (T)b;
}

// ----------------------------------------------------------------------------
// bf16 functions that cuda_bf16.h declares only for nvcc (templates: see the top of this file)

#define EMU_IF_BF16(T) typename std::enable_if<std::is_same<T, __nv_bfloat16>::value, T>::type
#define EMU_IF_BF162(T) typename std::enable_if<std::is_same<T, __nv_bfloat162>::value, T>::type
template <typename T> static inline EMU_IF_BF16(T) __hfma(T a, T b, T c) {
    return __float2bfloat16(fmaf(__bfloat162float(a), __bfloat162float(b), __bfloat162float(c)));
}
template <typename T> static inline EMU_IF_BF162(T) __hfma2(T a, T b, T c) {
    return __halves2bfloat162(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y));
}
template <typename T> static inline EMU_IF_BF16(T) hexp(T a) { return __float2bfloat16(expf(__bfloat162float(a))); }
template <typename T> static inline EMU_IF_BF16(T) hlog(T a) { return __float2bfloat16(logf(__bfloat162float(a))); }
template <typename T> static inline EMU_IF_BF16(T) hsqrt(T a) { return __float2bfloat16(sqrtf(__bfloat162float(a))); }
template <typename T> static inline EMU_IF_BF16(T) hrsqrt(T a) { return __float2bfloat16(1.0f / sqrtf(__bfloat162float(a))); }
template <typename T> static inline EMU_IF_BF16(T) hrcp(T a) { return __float2bfloat16(1.0f / __bfloat162float(a)); }
template <typename T> static inline EMU_IF_BF16(T) htanh(T a) { return __float2bfloat16(tanhf(__bfloat162float(a))); }
template <typename T, typename = EMU_IF_BF16(T)> static inline int __bfloat162int_rn(T a) {
    return (int)nearbyintf(__bfloat162float(a));
}
template <typename T, typename = EMU_IF_BF16(T)> static inline unsigned __bfloat162uint_rn(T a) {
    return (unsigned)nearbyintf(__bfloat162float(a));
}
template <typename T, typename = EMU_IF_BF16(T)> static inline short __bfloat162short_rn(T a) {
    return (short)nearbyintf(__bfloat162float(a));
}

// ----------------------------------------------------------------------------
// loads and stores with cache hints: plain accesses on the CPU

template <typename T> static inline T __ldg(const T* p) { return *p; }
template <typename T> static inline T __ldcg(const T* p) { return *p; }
template <typename T> static inline T __ldca(const T* p) { return *p; }
template <typename T> static inline T __ldcs(const T* p) { return *p; }
template <typename T> static inline T __ldlu(const T* p) { return *p; }
template <typename T> static inline T __ldcv(const T* p) { return *p; }
template <typename T> static inline void __stcg(T* p, const typename std::common_type<T>::type& v) { *p = v; }
template <typename T> static inline void __stcs(T* p, const typename std::common_type<T>::type& v) { *p = v; }
template <typename T> static inline void __stwb(T* p, const typename std::common_type<T>::type& v) { *p = v; }
template <typename T> static inline void __stwt(T* p, const typename std::common_type<T>::type& v) { *p = v; }

// fences order nothing that the emulation could observe (blocks run sequentially per OS thread)
static inline void __threadfence(void) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block(void) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system(void) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
static inline void __nanosleep(unsigned ns) { (void)ns; }
static inline long long clock64(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
[[noreturn]] static inline void __trap(void) {
    fprintf(stderr, "emu: error: __trap() in a kernel\n");
    fflush(stderr);
    abort();
}

// ----------------------------------------------------------------------------
// atomics (relaxed): each returns the old value

// the CAS loop: new bits = op(old bits), on a W-byte word
template <typename W, typename F>
static inline W emu_atomic_update(W* p, F op) {
    W old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(p, &old, op(old), true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    return old;
}
template <typename T, typename W>
static inline T emu_bits_to(W w) { T t; memcpy((void*)&t, &w, sizeof(T)); return t; }
template <typename W, typename T>
static inline W emu_to_bits(T t) { W w; memcpy(&w, (const void*)&t, sizeof(W)); return w; }

static inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
static inline float atomicAdd(float* p, float v) {
    uint32_t old = emu_atomic_update((uint32_t*)p, [v](uint32_t o) { return emu_to_bits<uint32_t>(emu_bits_to<float>(o) + v); });
    return emu_bits_to<float>(old);
}
static inline double atomicAdd(double* p, double v) {
    uint64_t old = emu_atomic_update((uint64_t*)p, [v](uint64_t o) { return emu_to_bits<uint64_t>(emu_bits_to<double>(o) + v); });
    return emu_bits_to<double>(old);
}
// bf16: the sum is rounded to nearest even, as on the GPU
static inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
    float fv = __bfloat162float(v);
    uint16_t old = emu_atomic_update((uint16_t*)p, [fv](uint16_t o) {
        return emu_to_bits<uint16_t>(__float2bfloat16(__bfloat162float(emu_bits_to<__nv_bfloat16>(o)) + fv));
    });
    return emu_bits_to<__nv_bfloat16>(old);
}
static inline __nv_bfloat162 atomicAdd(__nv_bfloat162* p, __nv_bfloat162 v) {
    float vx = __bfloat162float(v.x), vy = __bfloat162float(v.y);
    uint32_t old = emu_atomic_update((uint32_t*)p, [vx, vy](uint32_t o) {
        __nv_bfloat162 a = emu_bits_to<__nv_bfloat162>(o);
        __nv_bfloat162 r = __halves2bfloat162(__float2bfloat16(__bfloat162float(a.x) + vx),
                                              __float2bfloat16(__bfloat162float(a.y) + vy));
        return emu_to_bits<uint32_t>(r);
    });
    return emu_bits_to<__nv_bfloat162>(old);
}
static inline __half atomicAdd(__half* p, __half v) {
    float fv = __half2float(v);
    uint16_t old = emu_atomic_update((uint16_t*)p, [fv](uint16_t o) {
        return emu_to_bits<uint16_t>(__float2half(__half2float(emu_bits_to<__half>(o)) + fv));
    });
    return emu_bits_to<__half>(old);
}
static inline int atomicSub(int* p, int v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
static inline unsigned atomicSub(unsigned* p, unsigned v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }

template <typename T>
static inline T emu_atomic_max(T* p, T v) { return emu_atomic_update(p, [v](T o) { return v > o ? v : o; }); }
template <typename T>
static inline T emu_atomic_min(T* p, T v) { return emu_atomic_update(p, [v](T o) { return v < o ? v : o; }); }
static inline int atomicMax(int* p, int v) { return emu_atomic_max(p, v); }
static inline unsigned atomicMax(unsigned* p, unsigned v) { return emu_atomic_max(p, v); }
static inline long long atomicMax(long long* p, long long v) { return emu_atomic_max(p, v); }
static inline unsigned long long atomicMax(unsigned long long* p, unsigned long long v) { return emu_atomic_max(p, v); }
static inline int atomicMin(int* p, int v) { return emu_atomic_min(p, v); }
static inline unsigned atomicMin(unsigned* p, unsigned v) { return emu_atomic_min(p, v); }
static inline long long atomicMin(long long* p, long long v) { return emu_atomic_min(p, v); }
static inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) { return emu_atomic_min(p, v); }

static inline int atomicAnd(int* p, int v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); }
static inline unsigned atomicAnd(unsigned* p, unsigned v) { return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); }
static inline int atomicOr(int* p, int v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }
static inline unsigned atomicOr(unsigned* p, unsigned v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }
static inline int atomicXor(int* p, int v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); }
static inline unsigned atomicXor(unsigned* p, unsigned v) { return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); }

template <typename T>
static inline T emu_atomic_cas(T* p, T compare, T val) {
    __atomic_compare_exchange_n(p, &compare, val, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return compare;  // the old value: equal to compare on success, the current value otherwise
}
static inline int atomicCAS(int* p, int c, int v) { return emu_atomic_cas(p, c, v); }
static inline unsigned atomicCAS(unsigned* p, unsigned c, unsigned v) { return emu_atomic_cas(p, c, v); }
static inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long c, unsigned long long v) {
    return emu_atomic_cas(p, c, v);
}
static inline unsigned short atomicCAS(unsigned short* p, unsigned short c, unsigned short v) { return emu_atomic_cas(p, c, v); }

static inline int atomicExch(int* p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
static inline unsigned atomicExch(unsigned* p, unsigned v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
static inline unsigned long long atomicExch(unsigned long long* p, unsigned long long v) {
    return __atomic_exchange_n(p, v, __ATOMIC_RELAXED);
}
static inline float atomicExch(float* p, float v) {
    return emu_bits_to<float>(__atomic_exchange_n((uint32_t*)p, emu_to_bits<uint32_t>(v), __ATOMIC_RELAXED));
}
