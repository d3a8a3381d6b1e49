// device.h: device memory, copies and streams with one interface for the three builds.
// In the CPU build "device" memory is host memory; in the CUDA and emulated builds it is cudaMalloc'd.
#pragma once
#include "common.h"

// allocate n bytes of device memory (contents undefined)
static inline void* device_malloc_at(size_t n, const char* file, int line) {
#if LLM_HAS_KERNELS
    void* p = NULL;
    cuda_check(cudaMalloc(&p, n > 0 ? n : 1), file, line);
    return p;
#else
    // 64-byte aligned so that the OpenMP/BLAS loops get aligned rows
    void* p = NULL;
    if (posix_memalign(&p, 64, n > 0 ? ((n + 63) / 64) * 64 : 64) != 0) {
        fprintf(stderr, "error: out of host memory allocating %zu bytes (%s:%d)\n", n, file, line);
        exit(EXIT_FAILURE);
    }
    return p;
#endif
}
#define device_malloc(n) device_malloc_at((n), __FILE__, __LINE__)

static inline void device_free(void* p) {
    if (p == NULL) return;
#if LLM_HAS_KERNELS
    cudaCheck(cudaFree(p));
#else
    free(p);
#endif
}

static inline void device_memset_zero(void* p, size_t n, cudaStream_t stream) {
#if LLM_HAS_KERNELS
    cudaCheck(cudaMemsetAsync(p, 0, n, stream));
#else
    (void)stream;
    memset(p, 0, n);
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

// n FP32 host values into floatX on the device (rounded to nearest when floatX is BF16)
static inline void copy_floats_to_device(floatX* dst, const float* src, size_t n) {
#if LLM_BUILD_CPU || defined(ENABLE_FP32)
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
#if LLM_BUILD_CPU || defined(ENABLE_FP32)
    copy_to_host(dst, src, n * sizeof(float));
#else
    floatX* tmp = (floatX*)mallocCheck(n * sizeof(floatX));
    copy_to_host(tmp, src, n * sizeof(floatX));
    for (size_t i = 0; i < n; i++) dst[i] = (float)tmp[i];
    free(tmp);
#endif
}
