// emu_runtime.h: the CUDA runtime API of the emulated build, defined with the toolkit's own extern "C"
// prototypes (from cuda_runtime_api.h), plus the C++ template overloads that <cuda_runtime.h> adds
// (cudaMalloc(&float_ptr, n), cudaFuncSetAttribute(kernel, ...)). "Device" memory is host memory
// from posix_memalign of exactly the requested size (so AddressSanitizer sees overflows), filled
// with 0xFF bytes (NaN in fp32 and bf16) and recorded in a table, so launches and copies can check
// that a pointer lies inside a cudaMalloc allocation. Streams and events are synchronous. The
// emulated device is an H100 SXM (132 SMs, 80 GB, compute capability 9.0).
// A call that fails prints one line "emu: <call>: <why>" to stderr and returns the error code, as
// the real runtime would; the project's cudaCheck then names the calling file:line.
// Part of dev/emu/emu.h; not meant to be included on its own.
#pragma once

// ----------------------------------------------------------------------------
// allocation table

enum { EMU_MEM_DEVICE = 1, EMU_MEM_MANAGED = 2, EMU_MEM_HOST = 3, EMU_MEM_HOST_REGISTERED = 4 };
struct EmuAlloc {
    size_t size;
    int kind;
};
inline std::mutex emu_mem_mutex;
inline std::map<uintptr_t, EmuAlloc>* emu_mem_table = NULL;  // never destroyed (used until exit)
inline size_t emu_mem_device_bytes = 0;
inline thread_local cudaError_t emu_last_error = cudaSuccess;

static const size_t EMU_DEVICE_MEMORY = (size_t)80 << 30;       // 80 GiB
static const size_t EMU_SMEM_DEFAULT = 48 * 1024;                // per block without opt-in
static const size_t EMU_SMEM_OPTIN = 227 * 1024;                 // per block with opt-in
static const size_t EMU_SMEM_PER_SM = 228 * 1024;
static const int EMU_NUM_SMS = 132;

static inline std::map<uintptr_t, EmuAlloc>& emu_mem(void) {
    if (emu_mem_table == NULL) emu_mem_table = new std::map<uintptr_t, EmuAlloc>();
    return *emu_mem_table;
}

// the allocation containing p (one past its end counts), or NULL. Caller holds emu_mem_mutex.
static inline const std::pair<const uintptr_t, EmuAlloc>* emu_mem_find_locked(const void* p) {
    std::map<uintptr_t, EmuAlloc>& t = emu_mem();
    uintptr_t a = (uintptr_t)p;
    auto it = t.upper_bound(a);
    if (it == t.begin()) return NULL;
    --it;
    if (a <= it->first + it->second.size) return &*it;
    return NULL;
}

// true if [p, p+bytes) lies inside one cudaMalloc/cudaMallocManaged allocation
static inline bool emu_is_device_range(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(emu_mem_mutex);
    const std::pair<const uintptr_t, EmuAlloc>* a = emu_mem_find_locked(p);
    if (a == NULL) return false;
    if (a->second.kind != EMU_MEM_DEVICE && a->second.kind != EMU_MEM_MANAGED) return false;
    return (uintptr_t)p + bytes <= a->first + a->second.size;
}
static inline bool emu_is_device_ptr(const void* p) { return emu_is_device_range(p, 0); }

// what p is, in words, for messages
static inline const char* emu_ptr_kind(const void* p) {
    std::lock_guard<std::mutex> lock(emu_mem_mutex);
    const std::pair<const uintptr_t, EmuAlloc>* a = emu_mem_find_locked(p);
    if (a == NULL) return "not inside any live cudaMalloc allocation (a host pointer? freed memory?)";
    switch (a->second.kind) {
        case EMU_MEM_DEVICE: return "device memory";
        case EMU_MEM_MANAGED: return "managed memory";
        case EMU_MEM_HOST: return "pinned host memory from cudaMallocHost (not device memory)";
        default: return "registered host memory (not device memory)";
    }
}

static inline cudaError_t emu_api_error(cudaError_t err, const char* call, const char* fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "emu: %s: %s\n", call, msg);
    fflush(stderr);
    emu_last_error = err;
    return err;
}

static inline cudaError_t emu_alloc(void** ptr, size_t size, int kind, const char* call) {
    if (ptr == NULL) return emu_api_error(cudaErrorInvalidValue, call, "NULL result pointer");
    *ptr = NULL;
    if (size == 0) return cudaSuccess;
    bool device = kind == EMU_MEM_DEVICE || kind == EMU_MEM_MANAGED;
    if (device) {
        std::lock_guard<std::mutex> lock(emu_mem_mutex);
        if (size > EMU_DEVICE_MEMORY - emu_mem_device_bytes)
            return emu_api_error(cudaErrorMemoryAllocation, call,
                                 "out of device memory: %zu bytes requested, %zu of %zu in use",
                                 size, emu_mem_device_bytes, EMU_DEVICE_MEMORY);
    }
    void* p = NULL;
    if (posix_memalign(&p, 256, size) != 0 || p == NULL)  // cudaMalloc returns 256-byte aligned memory
        return emu_api_error(cudaErrorMemoryAllocation, call, "out of host memory for %zu bytes", size);
    if (device) memset(p, 0xFF, size);  // NaN everywhere: unwritten outputs show
    std::lock_guard<std::mutex> lock(emu_mem_mutex);
    emu_mem()[(uintptr_t)p] = EmuAlloc{size, kind};
    if (device) emu_mem_device_bytes += size;
    *ptr = p;
    return cudaSuccess;
}

static inline cudaError_t emu_free(void* p, bool host, const char* call) {
    if (p == NULL) return cudaSuccess;
    std::lock_guard<std::mutex> lock(emu_mem_mutex);
    std::map<uintptr_t, EmuAlloc>& t = emu_mem();
    auto it = t.find((uintptr_t)p);
    bool is_host = it != t.end() && it->second.kind == EMU_MEM_HOST;
    if (it == t.end() || it->second.kind == EMU_MEM_HOST_REGISTERED || is_host != host) {
        emu_last_error = cudaErrorInvalidValue;
        fprintf(stderr, "emu: %s(%p): not a pointer returned by %s (freed twice? an interior or host pointer?)\n",
                call, p, host ? "cudaMallocHost" : "cudaMalloc");
        fflush(stderr);
        return cudaErrorInvalidValue;
    }
    if (!is_host) emu_mem_device_bytes -= it->second.size;
    t.erase(it);
    free(p);
    return cudaSuccess;
}

// checks one side of a copy: device sides must lie inside a device allocation
static inline cudaError_t emu_check_side(const void* p, size_t n, bool device, const char* call, const char* side) {
    if (n == 0) return cudaSuccess;
    if (p == NULL) return emu_api_error(cudaErrorInvalidValue, call, "%s is NULL", side);
    if (device && !emu_is_device_range(p, n)) {
        if (emu_is_device_ptr(p))
            return emu_api_error(cudaErrorInvalidValue, call, "%s [%p, +%zu bytes) runs past the end of its device allocation",
                                 side, p, n);
        return emu_api_error(cudaErrorInvalidValue, call, "%s %p is %s", side, p, emu_ptr_kind(p));
    }
    return cudaSuccess;
}

static inline cudaError_t emu_memcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, const char* call) {
    bool dst_dev = false, src_dev = false;
    switch (kind) {
        case cudaMemcpyHostToHost: break;
        case cudaMemcpyHostToDevice: dst_dev = true; break;
        case cudaMemcpyDeviceToHost: src_dev = true; break;
        case cudaMemcpyDeviceToDevice: dst_dev = src_dev = true; break;
        case cudaMemcpyDefault: break;
        default: return emu_api_error(cudaErrorInvalidMemcpyDirection, call, "unknown cudaMemcpyKind %d", (int)kind);
    }
    cudaError_t e = emu_check_side(dst, n, dst_dev, call, "dst");
    if (e != cudaSuccess) return e;
    e = emu_check_side(src, n, src_dev, call, "src");
    if (e != cudaSuccess) return e;
    if (n > 0) memmove(dst, src, n);
    return cudaSuccess;
}

// ----------------------------------------------------------------------------
// streams and events: synchronous; kept as small objects so use after destroy is caught

static const unsigned EMU_STREAM_MAGIC = 0x5743u, EMU_EVENT_MAGIC = 0x4576u;
struct CUstream_st {
    unsigned magic;
    unsigned flags;
};
struct CUevent_st {
    unsigned magic;
    unsigned flags;
    int recorded;
    double ms;  // wall clock when recorded
};

static inline bool emu_stream_ok(cudaStream_t s) { return s == NULL || s->magic == EMU_STREAM_MAGIC; }
static inline bool emu_event_ok(cudaEvent_t e) { return e != NULL && e->magic == EMU_EVENT_MAGIC; }
static inline double emu_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
#define EMU_CHECK_STREAM(s, call) \
    if (!emu_stream_ok(s)) return emu_api_error(cudaErrorInvalidResourceHandle, call, "invalid or destroyed stream %p", (void*)(s))
#define EMU_CHECK_EVENT(e, call) \
    if (!emu_event_ok(e)) return emu_api_error(cudaErrorInvalidResourceHandle, call, "invalid or destroyed event %p", (void*)(e))

// ----------------------------------------------------------------------------
// per-kernel attributes (cudaFuncSetAttribute)

struct EmuFuncAttr {
    int max_dynamic_smem;  // opt-in, bytes
};
inline std::mutex emu_func_mutex;
inline std::map<const void*, EmuFuncAttr>* emu_func_table = NULL;

static inline size_t emu_func_smem_optin(const void* func) {
    std::lock_guard<std::mutex> lock(emu_func_mutex);
    if (emu_func_table == NULL) return 0;
    auto it = emu_func_table->find(func);
    return it == emu_func_table->end() ? 0 : (size_t)it->second.max_dynamic_smem;
}

// ----------------------------------------------------------------------------
// the emulated device

inline int emu_device_current = 0;

static inline int emu_device_count(void) {
    static int n = -1;  // EMU_DEVICES=n pretends n devices (for MPI runs that pick one per rank)
    if (n < 0) {
        const char* s = getenv("EMU_DEVICES");
        n = (s != NULL && atoi(s) > 0) ? atoi(s) : 1;
    }
    return n;
}

static inline void emu_fill_props(cudaDeviceProp* p) {
    memset((void*)p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "NVIDIA H100 80GB HBM3 (emulated on the CPU by dev/emu)");
    p->totalGlobalMem = EMU_DEVICE_MEMORY;
    p->sharedMemPerBlock = EMU_SMEM_DEFAULT;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->memPitch = 2147483647;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
    p->totalConstMem = 65536;
    {   // sm_90 unless CUBLASLT_EMU_ARCH names another (the emulated cuBLASLt's FP8 modes follow it too)
        const char* arch = getenv("CUBLASLT_EMU_ARCH");
        int a = arch != NULL && arch[0] != '\0' ? atoi(arch) : 90;
        p->major = a / 10;
        p->minor = a % 10;
    }
    p->textureAlignment = 512;
    p->texturePitchAlignment = 32;
    p->multiProcessorCount = EMU_NUM_SMS;
    p->canMapHostMemory = 1;
    p->concurrentKernels = 1;
    p->ECCEnabled = 1;
    p->asyncEngineCount = 2;
    p->unifiedAddressing = 1;
    p->memoryBusWidth = 5120;
    p->l2CacheSize = 50 * 1024 * 1024;
    p->persistingL2CacheMaxSize = 30 * 1024 * 1024;
    p->maxThreadsPerMultiProcessor = 2048;
    p->streamPrioritiesSupported = 1;
    p->globalL1CacheSupported = 1;
    p->localL1CacheSupported = 1;
    p->sharedMemPerMultiprocessor = EMU_SMEM_PER_SM;
    p->regsPerMultiprocessor = 65536;
    p->managedMemory = 1;
    p->computePreemptionSupported = 1;
    p->cooperativeLaunch = 1;
    p->sharedMemPerBlockOptin = EMU_SMEM_OPTIN;
    p->maxBlocksPerMultiProcessor = 32;
    p->accessPolicyMaxWindowSize = 134213632;
    p->reservedSharedMemPerBlock = 1024;
    p->memoryPoolsSupported = 1;
    p->clusterLaunch = 1;
}

// ----------------------------------------------------------------------------
// the runtime API (extern "C", the toolkit's prototypes)

extern "C" {

inline cudaError_t cudaMalloc(void** devPtr, size_t size) { return emu_alloc(devPtr, size, EMU_MEM_DEVICE, "cudaMalloc"); }
inline cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
    (void)flags;
    return emu_alloc(devPtr, size, EMU_MEM_MANAGED, "cudaMallocManaged");
}
inline cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream) {
    EMU_CHECK_STREAM(stream, "cudaMallocAsync");
    return emu_alloc(devPtr, size, EMU_MEM_DEVICE, "cudaMallocAsync");
}
inline cudaError_t cudaFree(void* devPtr) { return emu_free(devPtr, false, "cudaFree"); }
inline cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream) {
    EMU_CHECK_STREAM(stream, "cudaFreeAsync");
    return emu_free(devPtr, false, "cudaFreeAsync");
}
// pinned host memory is host memory: passing it to a kernel is reported (no mapped memory here)
inline cudaError_t cudaMallocHost(void** ptr, size_t size) { return emu_alloc(ptr, size, EMU_MEM_HOST, "cudaMallocHost"); }
inline cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
    (void)flags;
    return emu_alloc(pHost, size, EMU_MEM_HOST, "cudaHostAlloc");
}
inline cudaError_t cudaFreeHost(void* ptr) { return emu_free(ptr, true, "cudaFreeHost"); }
inline cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
    (void)ptr; (void)size; (void)flags;
    return cudaSuccess;
}
inline cudaError_t cudaHostUnregister(void* ptr) {
    (void)ptr;
    return cudaSuccess;
}

inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
    return emu_memcpy(dst, src, count, kind, "cudaMemcpy");
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) {
    EMU_CHECK_STREAM(stream, "cudaMemcpyAsync");
    return emu_memcpy(dst, src, count, kind, "cudaMemcpyAsync");
}
inline cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                                enum cudaMemcpyKind kind) {
    if (width > dpitch || width > spitch)
        return emu_api_error(cudaErrorInvalidPitchValue, "cudaMemcpy2D", "width %zu exceeds a pitch (%zu, %zu)", width, dpitch, spitch);
    for (size_t r = 0; r < height; r++) {
        cudaError_t e = emu_memcpy((char*)dst + r * dpitch, (const char*)src + r * spitch, width, kind, "cudaMemcpy2D");
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
inline cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
    cudaError_t e = emu_check_side(devPtr, count, true, "cudaMemset", "devPtr");
    if (e != cudaSuccess) return e;
    if (count > 0) memset(devPtr, value, count);
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
    EMU_CHECK_STREAM(stream, "cudaMemsetAsync");
    cudaError_t e = emu_check_side(devPtr, count, true, "cudaMemsetAsync", "devPtr");
    if (e != cudaSuccess) return e;
    if (count > 0) memset(devPtr, value, count);
    return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
    std::lock_guard<std::mutex> lock(emu_mem_mutex);
    if (free_bytes) *free_bytes = EMU_DEVICE_MEMORY - emu_mem_device_bytes;
    if (total) *total = EMU_DEVICE_MEMORY;
    return cudaSuccess;
}
inline cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attributes, const void* ptr) {
    if (attributes == NULL) return emu_api_error(cudaErrorInvalidValue, "cudaPointerGetAttributes", "NULL attributes");
    memset((void*)attributes, 0, sizeof(*attributes));
    std::lock_guard<std::mutex> lock(emu_mem_mutex);
    const std::pair<const uintptr_t, EmuAlloc>* a = emu_mem_find_locked(ptr);
    int kind = a ? a->second.kind : 0;
    attributes->type = kind == EMU_MEM_DEVICE ? cudaMemoryTypeDevice
                     : kind == EMU_MEM_MANAGED ? cudaMemoryTypeManaged
                     : kind == EMU_MEM_HOST ? cudaMemoryTypeHost : cudaMemoryTypeUnregistered;
    attributes->device = emu_device_current;
    attributes->devicePointer = (kind == EMU_MEM_DEVICE || kind == EMU_MEM_MANAGED) ? (void*)ptr : NULL;
    attributes->hostPointer = (kind == EMU_MEM_HOST || kind == EMU_MEM_MANAGED) ? (void*)ptr : NULL;
    return cudaSuccess;
}

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
    if (pStream == NULL) return emu_api_error(cudaErrorInvalidValue, "cudaStreamCreate", "NULL result pointer");
    cudaStream_t s = (cudaStream_t)malloc(sizeof(CUstream_st));
    s->magic = EMU_STREAM_MAGIC;
    s->flags = flags;
    *pStream = s;
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* pStream) { return cudaStreamCreateWithFlags(pStream, 0); }
inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
    (void)priority;
    return cudaStreamCreateWithFlags(pStream, flags);
}
inline cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (stream == NULL || !emu_stream_ok(stream))
        return emu_api_error(cudaErrorInvalidResourceHandle, "cudaStreamDestroy", "invalid or destroyed stream %p", (void*)stream);
    stream->magic = 0;
    free(stream);
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    EMU_CHECK_STREAM(stream, "cudaStreamSynchronize");
    return cudaSuccess;
}
inline cudaError_t cudaStreamQuery(cudaStream_t stream) {
    EMU_CHECK_STREAM(stream, "cudaStreamQuery");
    return cudaSuccess;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
    (void)flags;
    EMU_CHECK_STREAM(stream, "cudaStreamWaitEvent");
    EMU_CHECK_EVENT(event, "cudaStreamWaitEvent");
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
    if (leastPriority) *leastPriority = 0;
    if (greatestPriority) *greatestPriority = -5;
    return cudaSuccess;
}
inline cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
    EMU_CHECK_STREAM(stream, "cudaLaunchHostFunc");
    fn(userData);
    return cudaSuccess;
}

inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
    if (event == NULL) return emu_api_error(cudaErrorInvalidValue, "cudaEventCreate", "NULL result pointer");
    cudaEvent_t e = (cudaEvent_t)malloc(sizeof(CUevent_st));
    e->magic = EMU_EVENT_MAGIC;
    e->flags = flags;
    e->recorded = 0;
    e->ms = 0;
    *event = e;
    return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }
inline cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    EMU_CHECK_EVENT(event, "cudaEventRecord");
    EMU_CHECK_STREAM(stream, "cudaEventRecord");
    event->recorded = 1;
    event->ms = emu_now_ms();
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    EMU_CHECK_EVENT(event, "cudaEventSynchronize");
    return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t event) {
    EMU_CHECK_EVENT(event, "cudaEventQuery");
    return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    EMU_CHECK_EVENT(start, "cudaEventElapsedTime");
    EMU_CHECK_EVENT(end, "cudaEventElapsedTime");
    if (ms == NULL) return emu_api_error(cudaErrorInvalidValue, "cudaEventElapsedTime", "NULL result pointer");
    if ((start->flags | end->flags) & cudaEventDisableTiming)
        return emu_api_error(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime", "an event was created with cudaEventDisableTiming");
    if (!start->recorded || !end->recorded)
        return emu_api_error(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime", "an event was never recorded");
    *ms = (float)(end->ms - start->ms);
    return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t event) {
    EMU_CHECK_EVENT(event, "cudaEventDestroy");
    event->magic = 0;
    free(event);
    return cudaSuccess;
}

inline cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
inline cudaError_t cudaDeviceReset(void) { return cudaSuccess; }
inline cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value) {
    (void)limit; (void)value;
    return cudaSuccess;
}
inline cudaError_t cudaGetLastError(void) {
    cudaError_t e = emu_last_error;
    emu_last_error = cudaSuccess;
    return e;
}
inline cudaError_t cudaPeekAtLastError(void) { return emu_last_error; }

inline const char* cudaGetErrorName(cudaError_t error) {
    switch (error) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidPitchValue: return "cudaErrorInvalidPitchValue";
        case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
        case cudaErrorNotReady: return "cudaErrorNotReady";
        case cudaErrorNotSupported: return "cudaErrorNotSupported";
        default: return "cudaErrorUnknown";
    }
}
inline const char* cudaGetErrorString(cudaError_t error) {
    switch (error) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidPitchValue: return "invalid pitch argument";
        case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorInvalidDeviceFunction: return "invalid device function";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorNotSupported: return "operation not supported";
        default: return "unrecognized error code (emulated runtime)";
    }
}

inline cudaError_t cudaGetDeviceCount(int* count) {
    if (count == NULL) return emu_api_error(cudaErrorInvalidValue, "cudaGetDeviceCount", "NULL result pointer");
    *count = emu_device_count();
    return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* device) {
    if (device == NULL) return emu_api_error(cudaErrorInvalidValue, "cudaGetDevice", "NULL result pointer");
    *device = emu_device_current;
    return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= emu_device_count())
        return emu_api_error(cudaErrorInvalidDevice, "cudaSetDevice",
                             "device %d does not exist (%d emulated; set EMU_DEVICES for more)", device, emu_device_count());
    emu_device_current = device;
    return cudaSuccess;
}
inline cudaError_t cudaSetDeviceFlags(unsigned int flags) {
    (void)flags;
    return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
    if (prop == NULL) return emu_api_error(cudaErrorInvalidValue, "cudaGetDeviceProperties", "NULL result pointer");
    if (device < 0 || device >= emu_device_count())
        return emu_api_error(cudaErrorInvalidDevice, "cudaGetDeviceProperties", "device %d does not exist", device);
    emu_fill_props(prop);
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
    if (value == NULL) return emu_api_error(cudaErrorInvalidValue, "cudaDeviceGetAttribute", "NULL result pointer");
    if (device < 0 || device >= emu_device_count())
        return emu_api_error(cudaErrorInvalidDevice, "cudaDeviceGetAttribute", "device %d does not exist", device);
    cudaDeviceProp p;
    emu_fill_props(&p);
    int v;
    switch (attr) {
        case cudaDevAttrMaxThreadsPerBlock: v = p.maxThreadsPerBlock; break;
        case cudaDevAttrMaxBlockDimX: v = p.maxThreadsDim[0]; break;
        case cudaDevAttrMaxBlockDimY: v = p.maxThreadsDim[1]; break;
        case cudaDevAttrMaxBlockDimZ: v = p.maxThreadsDim[2]; break;
        case cudaDevAttrMaxGridDimX: v = p.maxGridSize[0]; break;
        case cudaDevAttrMaxGridDimY: v = p.maxGridSize[1]; break;
        case cudaDevAttrMaxGridDimZ: v = p.maxGridSize[2]; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: v = (int)p.sharedMemPerBlock; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: v = (int)p.sharedMemPerBlockOptin; break;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor: v = (int)p.sharedMemPerMultiprocessor; break;
        case cudaDevAttrReservedSharedMemoryPerBlock: v = (int)p.reservedSharedMemPerBlock; break;
        case cudaDevAttrTotalConstantMemory: v = (int)p.totalConstMem; break;
        case cudaDevAttrWarpSize: v = p.warpSize; break;
        case cudaDevAttrMaxRegistersPerBlock: v = p.regsPerBlock; break;
        case cudaDevAttrMaxRegistersPerMultiprocessor: v = p.regsPerMultiprocessor; break;
        case cudaDevAttrMultiProcessorCount: v = p.multiProcessorCount; break;
        case cudaDevAttrMaxThreadsPerMultiProcessor: v = p.maxThreadsPerMultiProcessor; break;
        case cudaDevAttrMaxBlocksPerMultiprocessor: v = p.maxBlocksPerMultiProcessor; break;
        case cudaDevAttrComputeCapabilityMajor: v = p.major; break;
        case cudaDevAttrComputeCapabilityMinor: v = p.minor; break;
        case cudaDevAttrL2CacheSize: v = p.l2CacheSize; break;
        case cudaDevAttrMaxPersistingL2CacheSize: v = p.persistingL2CacheMaxSize; break;
        case cudaDevAttrGlobalMemoryBusWidth: v = p.memoryBusWidth; break;
        case cudaDevAttrConcurrentKernels: v = 1; break;
        case cudaDevAttrUnifiedAddressing: v = 1; break;
        case cudaDevAttrManagedMemory: v = 1; break;
        case cudaDevAttrCooperativeLaunch: v = 1; break;
        case cudaDevAttrEccEnabled: v = 1; break;
        case cudaDevAttrAsyncEngineCount: v = p.asyncEngineCount; break;
        case cudaDevAttrIntegrated: v = 0; break;
        case cudaDevAttrCanMapHostMemory: v = 1; break;
        case cudaDevAttrStreamPrioritiesSupported: v = 1; break;
        case cudaDevAttrGlobalL1CacheSupported: v = 1; break;
        case cudaDevAttrMemoryPoolsSupported: v = 1; break;
        case cudaDevAttrPciBusId: v = 0; break;
        case cudaDevAttrPciDeviceId: v = device; break;
        case cudaDevAttrPciDomainId: v = 0; break;
        default:
            return emu_api_error(cudaErrorInvalidValue, "cudaDeviceGetAttribute",
                                 "attribute %d is not emulated (add it to dev/emu/emu_runtime.h)", (int)attr);
    }
    *value = v;
    return cudaSuccess;
}
inline cudaError_t cudaDriverGetVersion(int* driverVersion) {
    if (driverVersion) *driverVersion = CUDART_VERSION;
    return cudaSuccess;
}
inline cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
    if (runtimeVersion) *runtimeVersion = CUDART_VERSION;
    return cudaSuccess;
}

inline cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value) {
    if (func == NULL) return emu_api_error(cudaErrorInvalidDeviceFunction, "cudaFuncSetAttribute", "NULL function");
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > EMU_SMEM_OPTIN)
            return emu_api_error(cudaErrorInvalidValue, "cudaFuncSetAttribute",
                                 "MaxDynamicSharedMemorySize %d exceeds the device's %zu bytes", value, EMU_SMEM_OPTIN);
        std::lock_guard<std::mutex> lock(emu_func_mutex);
        if (emu_func_table == NULL) emu_func_table = new std::map<const void*, EmuFuncAttr>();
        (*emu_func_table)[func].max_dynamic_smem = value;
        return cudaSuccess;
    }
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
    return emu_api_error(cudaErrorInvalidValue, "cudaFuncSetAttribute", "attribute %d is not emulated", (int)attr);
}
inline cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) {
    if (attr == NULL || func == NULL) return emu_api_error(cudaErrorInvalidValue, "cudaFuncGetAttributes", "NULL argument");
    memset((void*)attr, 0, sizeof(*attr));
    attr->maxThreadsPerBlock = 1024;
    attr->numRegs = 32;  // unknown on the CPU: a typical value
    attr->ptxVersion = 90;
    attr->binaryVersion = 90;
    attr->maxDynamicSharedSizeBytes = (int)std::max(EMU_SMEM_DEFAULT, emu_func_smem_optin(func));
    return cudaSuccess;
}
// an estimate: limits from threads, blocks and shared memory per SM, assuming 32 registers a thread
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, const void* func, int blockSize,
                                                                  size_t dynamicSMemSize) {
    (void)func;
    if (numBlocks == NULL || blockSize <= 0 || blockSize > 1024)
        return emu_api_error(cudaErrorInvalidValue, "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "blockSize %d", blockSize);
    int warps = (blockSize + 31) / 32;
    int by_threads = 64 / warps;                             // 2048 threads = 64 warps per SM
    int by_regs = 65536 / (warps * 32 * 32);
    int by_smem = (int)(EMU_SMEM_PER_SM / (dynamicSMemSize + 1024));
    *numBlocks = std::max(0, std::min(std::min(32, by_threads), std::min(by_regs, by_smem)));
    return cudaSuccess;
}

}  // extern "C"

// ----------------------------------------------------------------------------
// the C++ overloads that <cuda_runtime.h> adds

template <class T>
static inline cudaError_t cudaMalloc(T** devPtr, size_t size) { return cudaMalloc((void**)devPtr, size); }
template <class T>
static inline cudaError_t cudaMallocManaged(T** devPtr, size_t size, unsigned int flags = cudaMemAttachGlobal) {
    return cudaMallocManaged((void**)devPtr, size, flags);
}
template <class T>
static inline cudaError_t cudaMallocAsync(T** devPtr, size_t size, cudaStream_t stream) {
    return cudaMallocAsync((void**)devPtr, size, stream);
}
static inline cudaError_t cudaMallocHost(void** ptr, size_t size, unsigned int flags) { return cudaHostAlloc(ptr, size, flags); }
template <class T>
static inline cudaError_t cudaMallocHost(T** ptr, size_t size, unsigned int flags = 0) { return cudaHostAlloc((void**)ptr, size, flags); }
template <class T>
static inline cudaError_t cudaHostAlloc(T** ptr, size_t size, unsigned int flags) { return cudaHostAlloc((void**)ptr, size, flags); }
static inline cudaError_t cudaEventCreate(cudaEvent_t* event, unsigned int flags) { return cudaEventCreateWithFlags(event, flags); }
template <class T>
static inline cudaError_t cudaFuncSetAttribute(T* entry, enum cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void*)entry, attr, value);
}
template <class T>
static inline cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, T* entry) {
    return cudaFuncGetAttributes(attr, (const void*)entry);
}
template <class T>
static inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, T func, int blockSize, size_t dynamicSMemSize) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(numBlocks, (const void*)func, blockSize, dynamicSMemSize);
}
// __constant__ / __device__ variables are ordinary globals here
template <class T>
static inline cudaError_t cudaMemcpyToSymbol(const T& symbol, const void* src, size_t count, size_t offset = 0,
                                             enum cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
    (void)kind;
    if (offset + count > sizeof(T))
        return emu_api_error(cudaErrorInvalidValue, "cudaMemcpyToSymbol", "%zu bytes at offset %zu exceed the symbol's %zu bytes",
                             count, offset, sizeof(T));
    memcpy((char*)&symbol + offset, src, count);
    return cudaSuccess;
}
template <class T>
static inline cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, size_t count, size_t offset = 0,
                                               enum cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
    (void)kind;
    if (offset + count > sizeof(T))
        return emu_api_error(cudaErrorInvalidValue, "cudaMemcpyFromSymbol", "%zu bytes at offset %zu exceed the symbol's %zu bytes",
                             count, offset, sizeof(T));
    memcpy(dst, (const char*)&symbol + offset, count);
    return cudaSuccess;
}
