// device.h: copies, fills and synchronisation of device memory with one interface for the three
// builds. In the CPU build "device" memory is host memory; in the CUDA and emulated builds it is
// cudaMalloc'd. Allocation is llm/core/context.h's tagged allocator (device_malloc(bytes, kind)).
#pragma once
#include "common.h"
#include "context.h"

static inline void device_memset_zero(void* p, size_t n, cudaStream_t stream) {
#if LLM_HAS_KERNELS
    cudaCheck(cudaMemsetAsync(p, 0, n, stream));
#else
    (void)stream;
    // large buffers (the gradients, each step) in one slice per OpenMP thread: one core's stores do not fill
    // the memory bandwidth (a 64 MB zeroing 5.6-7.7 ms on one core, 3.2-4.6 ms on two, this project's 2-core
    // Xeon, 2026-11-28)
    const size_t slice = (size_t)1 << 16;
    if (n < 4 * slice) { memset(p, 0, n); return; }
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)ceil_div_sz(n, slice); i++) {
        size_t at = (size_t)i * slice;
        memset((char*)p + at, 0, n - at < slice ? n - at : slice);
    }
#endif
}

static inline void copy_to_device(void* dst, const void* src, size_t n) {
#if LLM_HAS_KERNELS
    cudaCheck(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
#else
    memcpy(dst, src, n);
#endif
}

static inline void copy_to_host(void* dst, const void* src, size_t n) {
#if LLM_HAS_KERNELS
    cudaCheck(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
#else
    memcpy(dst, src, n);
#endif
}

static inline void copy_device_to_device(void* dst, const void* src, size_t n, cudaStream_t stream) {
#if LLM_HAS_KERNELS
    cudaCheck(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
#else
    (void)stream;
    memcpy(dst, src, n);
#endif
}

static inline void device_synchronize(void) {
#if LLM_HAS_KERNELS
    cudaCheck(cudaDeviceSynchronize());
#endif
}

// floatX <-> float conversions on the host, for checkpoints and tests
static inline float floatX_to_float(floatX x) { return (float)x; }
static inline floatX float_to_floatX(float x) { return (floatX)x; }

// n FP32 host values into floatX on the device (rounded to nearest when floatX is BF16 or FP16)
static inline void copy_floats_to_device(floatX* dst, const float* src, size_t n) {
#if defined(LLM_FLOATX_IS_FLOAT)
    copy_to_device(dst, src, n * sizeof(float));
#else
    floatX* tmp = (floatX*)mallocCheck(n * sizeof(floatX));
    for (size_t i = 0; i < n; i++) tmp[i] = (floatX)src[i];
    copy_to_device(dst, tmp, n * sizeof(floatX));
    free(tmp);
#endif
}

// n floatX values from the device into FP32 on the host
static inline void copy_to_host_float(float* dst, const floatX* src, size_t n) {
#if defined(LLM_FLOATX_IS_FLOAT)
    copy_to_host(dst, src, n * sizeof(float));
#else
    floatX* tmp = (floatX*)mallocCheck(n * sizeof(floatX));
    copy_to_host(tmp, src, n * sizeof(floatX));
    for (size_t i = 0; i < n; i++) dst[i] = (float)tmp[i];
    free(tmp);
#endif
}
