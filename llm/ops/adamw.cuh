// adamw.cuh: the AdamW update (Loshchilov & Hutter 2019, Algorithm 2) for one tensor:
//   g = grad * grad_scale                     (grad_scale folds in gradient clipping)
//   m = beta1 m + (1 - beta1) g ;  v = beta2 v + (1 - beta2) g^2
//   p -= lr * ( (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay * p )
// Weight decay is decoupled from the gradient. When the parameters are BF16 or FP16, an FP32 master
// copy is updated and rounded (stochastically, from seed) into the 16-bit parameters. With clear_grads
// each gradient value is set to 0 once read: the next step's accumulation then needs no zeroing pass of
// its own (llm/parallel/dp.h, update_clears_grads).
#pragma once
#include "../core/common.h"
#include "../core/context.h"  // OP_PROFILE

// ----------------------------------------------------------------------------
// Random bits for stochastic rounding, counter-based: a pure function of (seed, element index), so
// there is no generator state, every element gets its own draw, and the result does not depend on
// the launch configuration. adamw_mix32 is an xorshift-multiply integer finalizer (the constants of
// C. Wellons' "lowbias32", a bijection of 32-bit words with good avalanche). The seed and the high
// word of the index are mixed into a key first; the low word is xor-ed in and mixed again, so for a
// fixed key the map from low word to bits is itself a bijection (no two elements of a 2^32-element
// range share a draw).
LLM_HD static inline unsigned int adamw_mix32(unsigned int x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}
LLM_HD static inline unsigned int adamw_random_bits(unsigned int seed, size_t i) {
    unsigned int key = adamw_mix32(seed + 0x9e3779b9u * ((unsigned int)(i >> 32) + 1u));
    return adamw_mix32(key ^ (unsigned int)i);
}

// ----------------------------------------------------------------------------
// CPU reference

static void adamw_update_cpu(float* params, float* grads, float* m, float* v, size_t n,  // all (n)
                             float lr, float beta1, float beta2, int t, float eps,
                             float weight_decay, float grad_scale, int clear_grads = 0) {
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    #pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        if (clear_grads) grads[i] = 0.0f;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        params[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * params[i]);
    }
}

// The CPU build with 16-bit parameters (PRECISION=BF16 / FP16): the same update on the FP32 master
// weights, in the expression order of the kernel's adamw_step, then each master rounded stochastically
// into the parameters with the kernel's random bits of (seed, index0 + i) (llm/core/half_cpu.h's
// round_stochastic: bit for bit the kernels' adamw_round).
template <class T>
static void adamw_update_master_cpu(T* params, float* master, T* grads, float* m, float* v, size_t n,  // all (n)
                                    float lr, float beta1, float beta2, int t, float eps, float weight_decay,
                                    float grad_scale, unsigned int seed, size_t index0, int clear_grads) {
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float g = (float)grads[i] * grad_scale;
        if (clear_grads) grads[i] = (T)0.0f;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1;
        float vhat = vi / bc2;
        float p = master[i];
        p = p - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);
        master[i] = p;
        params[i] = round_stochastic<T>(p, adamw_random_bits(seed, index0 + i));
    }
}

// ----------------------------------------------------------------------------
// CUDA kernels
#if LLM_HAS_KERNELS
#include "../core/cuda_utils.cuh"

// FP32 -> floatX. For bf16 (the top 16 bits of an FP32 word) stochastic rounding adds 16 random bits
// to the 16 bits that are dropped, then truncates: it rounds away from zero (in magnitude) with
// probability (dropped bits) / 2^16, exactly the distance to the lower neighbour over the spacing,
// so E[round(x)] = x for either sign. Inf and NaN are converted plainly (an add could carry out of
// their exponent). The largest finite values may round up to inf, as the next "neighbour".
template <class T> __device__ __forceinline__ T adamw_round(float x, unsigned int bits);
template <> __device__ __forceinline__ float adamw_round<float>(float x, unsigned int bits) {
    (void)bits;
    return x;
}
template <> __device__ __forceinline__ __nv_bfloat16 adamw_round<__nv_bfloat16>(float x, unsigned int bits) {
    unsigned int u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return __float2bfloat16_rn(x);
    u += bits & 0xffffu;
    return __ushort_as_bfloat16((unsigned short)(u >> 16));
}
// FP16 has no such bit trick (its exponent is not FP32's), so the same rule is written out: t = x
// rounded toward zero, a = the next FP16 away from zero (the magnitude bits + 1: FP16 is sign and
// magnitude, and t's successor in magnitude is the next value, subnormals and the step to inf
// included), ulp = |a - t|. Round to a with probability (|x| - |t|) / ulp: u is a uniform draw from
// 24 of the random bits, u = k 2^-24 for k in [0, 2^24), and a is taken when |x| - |t| > u ulp, so
// P(a) = (|x| - |t|) / ulp to within 2^-24 and E[round(x)] = x. Inf, NaN and |x| above the largest
// finite FP16 (65504) are converted plainly (round to nearest: 65504, or inf from 65520 on). The CPU
// build's FP16 rounding is the same rule, so both give the same bits for the same (x, bits).
template <> __device__ __forceinline__ __half adamw_round<__half>(float x, unsigned int bits) {
    if (!(fabsf(x) <= 65504.0f)) return __float2half_rn(x);  // inf, NaN, beyond the largest finite
    __half t = __float2half_rz(x);
    __half a = __ushort_as_half((unsigned short)(__half_as_ushort(t) + 1u));
    float ulp = fabsf(__half2float(a) - __half2float(t));
    float u = (float)(bits >> 8) * 0x1p-24f;
    return (fabsf(x) - fabsf(__half2float(t)) > u * ulp) ? a : t;
}

// the update of one element, the expression order of adamw_update_cpu (bc1, bc2 = 1 - beta^t)
__device__ __forceinline__ float adamw_step(float p, float g, float* m, float* v, float lr, float beta1,
                                            float beta2, float bc1, float bc2, float eps,
                                            float weight_decay, float grad_scale) {
    g = g * grad_scale;
    float mi = beta1 * *m + (1.0f - beta1) * g;
    float vi = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mi;
    *v = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    return p - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);
}

// One thread per x128::size consecutive elements (8 in BF16, 4 in FP32). vec != 0 (every pointer
// 16-byte aligned) takes 128-bit loads and stores; the last partial chunk, and every chunk when
// vec == 0, goes element by element. The source of the parameter is master when it is given
// (params are then only written), else params itself.
// Bytes per element: BF16 with master: read 2 (grad) + 12 (m, v, master), write 12 + 2 (params).
// FP32 without master: read 4 (param) + 4 (grad) + 8 (m, v), write 4 + 8. clear: 2 or 4 more written (the
// zeroed gradient; the separate cudaMemset it replaces writes as much).
__global__ void adamw_kernel(floatX* params,         // (n) out (in too when master == NULL)
                             float* master,          // (n) FP32 master weights, in/out, or NULL
                             floatX* grads,          // (n) in; zeroed when clear
                             float* m, float* v,     // (n) moments, in/out
                             size_t n, float lr, float beta1, float beta2, float bc1, float bc2,
                             float eps, float weight_decay, float grad_scale, unsigned int seed, size_t index0,
                             int vec, int clear) {
    const int S = x128::size;
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * S;
    if (i0 >= n) return;
    if (vec && i0 + S <= n) {
        x128 g = load128cs(grads + i0);
        if (clear) store128(grads + i0, x128::constant((floatX)0.0f));
        float mm[S], vv[S], pp[S];
        #pragma unroll
        for (int j = 0; j < S; j += f128::size) {
            f128 m4 = load128cs(m + i0 + j), v4 = load128cs(v + i0 + j);
            #pragma unroll
            for (int k = 0; k < f128::size; k++) { mm[j + k] = m4[k]; vv[j + k] = v4[k]; }
        }
        if (master != NULL) {
            #pragma unroll
            for (int j = 0; j < S; j += f128::size) {
                f128 p4 = load128cs(master + i0 + j);
                #pragma unroll
                for (int k = 0; k < f128::size; k++) pp[j + k] = p4[k];
            }
        } else {
            x128 p = load128cs(params + i0);
            #pragma unroll
            for (int k = 0; k < S; k++) pp[k] = (float)p[k];
        }
        x128 pout;
        #pragma unroll
        for (int k = 0; k < S; k++) {
            pp[k] = adamw_step(pp[k], (float)g[k], &mm[k], &vv[k], lr, beta1, beta2, bc1, bc2, eps,
                               weight_decay, grad_scale);
            pout[k] = adamw_round<floatX>(pp[k], adamw_random_bits(seed, index0 + i0 + k));
        }
        #pragma unroll
        for (int j = 0; j < S; j += f128::size) {
            f128 m4, v4, p4;
            #pragma unroll
            for (int k = 0; k < f128::size; k++) { m4[k] = mm[j + k]; v4[k] = vv[j + k]; p4[k] = pp[j + k]; }
            store128(m + i0 + j, m4);
            store128(v + i0 + j, v4);
            if (master != NULL) store128(master + i0 + j, p4);
        }
        store128(params + i0, pout);
    } else {
        size_t end = i0 + S < n ? i0 + S : n;
        for (size_t i = i0; i < end; i++) {
            float p = master != NULL ? master[i] : (float)params[i];
            float mi = m[i], vi = v[i];
            p = adamw_step(p, (float)grads[i], &mi, &vi, lr, beta1, beta2, bc1, bc2, eps, weight_decay,
                           grad_scale);
            if (clear) grads[i] = (floatX)0.0f;
            m[i] = mi;
            v[i] = vi;
            if (master != NULL) master[i] = p;
            params[i] = adamw_round<floatX>(p, adamw_random_bits(seed, index0 + i));
        }
    }
}
#endif

// ----------------------------------------------------------------------------
// launcher
// master: FP32 master weights (n), or NULL when floatX is float. seed and index0 drive stochastic
// rounding: element i gets the random bits of (seed, index0 + i), so a tensor updated in pieces (a
// rank's block of it under ZeRO) rounds exactly as when it is updated whole, if each piece passes its
// offset in the tensor as index0.

static void adamw_update(floatX* params, float* master, floatX* grads, float* m, float* v, size_t n,
                         float lr, float beta1, float beta2, int t, float eps, float weight_decay,
                         float grad_scale, unsigned int seed, cudaStream_t stream, size_t index0 = 0,
                         int clear_grads = 0) {
    OP_PROFILE(OP_ADAMW);
#if LLM_BUILD_CPU && defined(LLM_FLOATX_IS_FLOAT)
    (void)master; (void)seed; (void)stream; (void)index0;
    adamw_update_cpu(params, grads, m, v, n, lr, beta1, beta2, t, eps, weight_decay, grad_scale, clear_grads);
#elif LLM_BUILD_CPU
    (void)stream;
    adamw_update_master_cpu(params, master, grads, m, v, n, lr, beta1, beta2, t, eps, weight_decay, grad_scale,
                            seed, index0, clear_grads);
#else
    if (n == 0) return;
    // bias corrections once, on the host, exactly as the CPU reference computes them
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    int vec = is_aligned16(params) && is_aligned16(grads) && is_aligned16(m) && is_aligned16(v) &&
              is_aligned16(master);  // (NULL is aligned)
    const int block = 512;
    size_t chunks = ceil_div_sz(n, (size_t)x128::size);
    LAUNCH(adamw_kernel, dim3((unsigned int)ceil_div_sz(chunks, block)), dim3(block), 0, stream, params,
           master, grads, m, v, n, lr, beta1, beta2, bc1, bc2, eps, weight_decay, grad_scale, seed, index0, vec, clear_grads);
#endif
}
