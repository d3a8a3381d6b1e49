// test_emu.cu: tests of the CUDA emulator (dev/emu). One program, one case per command-line word:
//   correct       correct kernels (block reduction in shared memory, warp shuffles and votes, atomics
//                 across blocks, dynamic shared memory, a 3D grid) checked exactly against the CPU;
//                 prints "results <hash>", which must be the same in every EMU_ORDER and EMU_THREADS
//   small         the same at tiny shapes (for the sanitizer builds)
//   missing_sync  a reduction without __syncthreads: prints its result, which depends on the order
//   oob_global oob_smem race partial_sync lane_exit mask_self deadlock host_ptr too_many_threads
//   smem_optin smem_max stack_overflow
//                 planted bugs: each must end with a non-zero exit and its report (see test_emu.sh)
//   rc_tiled rc_reduce_twice rc_halves rc_raw rc_atomic, and each with _ok appended
//                 shared-memory races that no thread order shows, and their fixes: all give the
//                 right results (checked, "results <hash>"); racecheck reports the racy ones
//   bench         timings of the emulator: switch cost per thread per barrier, per shuffle, per launch
// Compiles with g++ in the emulated build and with nvcc (where the planted bugs are not detected).
#include "../../llm/core/common.h"
#include "../../llm/core/usage.h"

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "test_emu: FAILED at %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
            exit(EXIT_FAILURE);                                            \
        }                                                                  \
    } while (0)

// FNV-1a over bytes: one number that must not change with the thread order
static uint64_t hash_bytes(uint64_t h, const void* p, size_t n) {
    const unsigned char* b = (const unsigned char*)p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

template <typename T>
static T* device_copy(const T* host, size_t n) {
    T* d = NULL;
    cudaCheck(cudaMalloc((void**)&d, n * sizeof(T)));
    if (host != NULL) cudaCheck(cudaMemcpy(d, host, n * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T>
static void host_copy(T* host, const T* dev, size_t n) {
    cudaCheck(cudaMemcpy(host, dev, n * sizeof(T), cudaMemcpyDeviceToHost));
}

// ----------------------------------------------------------------------------
// correct kernels

// grid-stride sum, then a tree reduction in shared memory
__global__ void block_sum_kernel(const float* in, float* out, int n) {
    __shared__ float s[256];
    int tid = threadIdx.x;
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += gridDim.x * blockDim.x) acc += in[i];
    s[tid] = acc;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) s[tid] += s[tid + stride];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}

// the same with the barriers forgotten: the result depends on the order of the threads
__global__ void block_sum_nosync_kernel(const float* in, float* out, int n) {
    __shared__ float s[256];
    int tid = threadIdx.x;
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += gridDim.x * blockDim.x) acc += in[i];
    s[tid] = acc;
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) s[tid] += s[tid + stride];
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// warp shuffles and votes: full warps, a divergent `if (warp == 0)`, half-warp masks, widths, bf16
__global__ void warp_kernel(const float* in, float* out, unsigned* votes, float* shuf, __nv_bfloat16* bout,
                            int* counts, int n) {
    __shared__ float partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? in[i] : 0.0f;
    float ws = warp_sum(v);
    if (lane == 0) partial[warp] = ws;
    unsigned ballot = __ballot_sync(0xffffffffu, v > 0.0f);
    int any = __any_sync(0xffffffffu, v > 2.5f);
    int all = __all_sync(0xffffffffu, v > -10.0f);
    unsigned radd = __reduce_add_sync(0xffffffffu, (unsigned)(i % 5));
    int rmax = __reduce_max_sync(0xffffffffu, (int)(i % 11) - 5);
    int count = __syncthreads_count(v > 0.0f);
    if (warp == 0) {  // only warp 0 combines the partials
        float p = lane < nwarps ? partial[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) p += __shfl_down_sync(0xffffffffu, p, o);
        if (lane == 0) out[blockIdx.x] = p;
        __syncwarp();
    }
    float h;  // each half warp with its own mask
    if (lane < 16) h = __shfl_sync(0x0000ffffu, v, 15);
    else h = __shfl_sync(0xffff0000u, v, 16);
    float g8 = __shfl_sync(0xffffffffu, v, 0, 8);     // lane 0 of each group of 8
    float up = __shfl_up_sync(0xffffffffu, v, 1);     // lane 0 keeps its own
    __nv_bfloat16 bx = __shfl_xor_sync(0xffffffffu, __float2bfloat16(v), 1);
    if (i < n) {
        votes[i] = ballot ^ ((unsigned)any << 1) ^ ((unsigned)all << 2) ^ (radd << 8);
        shuf[i] = h + 10.0f * g8 + 100.0f * up;
        bout[i] = bx;
        counts[i] = count * 100 + rmax;
    }
}

// atomics from every thread of every block (with EMU_THREADS=2 the blocks run on two OS threads)
__global__ void atomics_kernel(float* fsum, int* isum, unsigned long long* usum, double* dsum, __nv_bfloat16* bsum,
                               __nv_bfloat162* b2sum, int* imax, int* imin, unsigned* cas_count) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(fsum, 1.0f);
    atomicAdd(isum, i);
    atomicAdd(usum, (unsigned long long)i);
    atomicAdd(dsum, 0.5);
    if (i < 200) atomicAdd(bsum, __float2bfloat16(1.0f));
    atomicAdd(b2sum, __floats2bfloat162_rn(1.0f, 2.0f));
    atomicMax(imax, i);
    atomicMin(imin, -i);
    unsigned old = atomicAdd(cas_count, 0u), assumed;
    do {
        assumed = old;
        old = atomicCAS(cas_count, assumed, assumed + 1);
    } while (old != assumed);
}

// dynamic shared memory: reverse each block's slice through the shared buffer
__global__ void dynsmem_kernel(const float* in, float* out, int per_thread) {
    EXTERN_SHARED(float, buf);
    int n = blockDim.x * per_thread;
    const float* src = in + (size_t)blockIdx.x * n;
    for (int k = threadIdx.x; k < n; k += blockDim.x) buf[k] = src[k];
    __syncthreads();
    for (int k = threadIdx.x; k < n; k += blockDim.x) out[(size_t)blockIdx.x * n + k] = buf[n - 1 - k];
}

// a 3D grid of 3D blocks with partial blocks at the edges
__global__ void grid3d_kernel(int* out, int W, int H, int D) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x >= W || y >= H || z >= D) return;
    out[((size_t)z * H + y) * W + x] = x + 1000 * y + 1000000 * z + (int)(gridDim.x * blockDim.y) * 0;
}

struct Shapes {
    int sum_n, sum_blocks;       // block_sum
    int warp_blocks, warp_threads;
    int atom_blocks, atom_threads;
    int dyn_blocks, dyn_threads, dyn_per_thread;
};

static uint64_t run_correct(const Shapes& S) {
    uint64_t h = 1469598103934665603ull;
    // block sum
    {
        int n = S.sum_n, nb = S.sum_blocks;
        float* in = (float*)mallocCheck(n * sizeof(float));
        for (int i = 0; i < n; i++) in[i] = (float)(i % 7 - 3);
        float* d_in = device_copy(in, n);
        float* d_out = device_copy<float>(NULL, nb);
        LAUNCH(block_sum_kernel, nb, 256, 0, 0, d_in, d_out, n);
        float* out = (float*)mallocCheck(nb * sizeof(float));
        host_copy(out, d_out, nb);
        for (int b = 0; b < nb; b++) {
            float ref = 0.0f;
            for (int i = b * 256; i < n; i += nb * 256)
                for (int t = 0; t < 256 && i + t < n; t++) ref += in[i + t];
            CHECK(out[b] == ref, "block_sum block %d: %f, expected %f", b, out[b], ref);
        }
        h = hash_bytes(h, out, nb * sizeof(float));
        cudaCheck(cudaFree(d_in));
        cudaCheck(cudaFree(d_out));
        free(in);
        free(out);
    }
    // warp collectives
    {
        int nb = S.warp_blocks, nt = S.warp_threads, n = nb * nt - 5;  // the last warp is partly idle
        float* in = (float*)mallocCheck(n * sizeof(float));
        for (int i = 0; i < n; i++) in[i] = (float)((i * 37) % 9 - 4);
        float* d_in = device_copy(in, n);
        float* d_out = device_copy<float>(NULL, nb);
        unsigned* d_votes = device_copy<unsigned>(NULL, n);
        float* d_shuf = device_copy<float>(NULL, n);
        __nv_bfloat16* d_b = device_copy<__nv_bfloat16>(NULL, n);
        int* d_counts = device_copy<int>(NULL, n);
        LAUNCH(warp_kernel, nb, nt, 0, 0, d_in, d_out, d_votes, d_shuf, d_b, d_counts, n);
        float* out = (float*)mallocCheck(nb * sizeof(float));
        unsigned* votes = (unsigned*)mallocCheck(n * sizeof(unsigned));
        float* shuf = (float*)mallocCheck(n * sizeof(float));
        __nv_bfloat16* bo = (__nv_bfloat16*)mallocCheck(n * sizeof(__nv_bfloat16));
        int* counts = (int*)mallocCheck(n * sizeof(int));
        host_copy(out, d_out, nb);
        host_copy(votes, d_votes, n);
        host_copy(shuf, d_shuf, n);
        host_copy(bo, d_b, n);
        host_copy(counts, d_counts, n);
        auto val = [&](int i) { return i < n ? in[i] : 0.0f; };
        for (int b = 0; b < nb; b++) {
            float ref = 0.0f;
            int cnt = 0;
            for (int t = 0; t < nt; t++) { ref += val(b * nt + t); cnt += val(b * nt + t) > 0.0f; }
            CHECK(out[b] == ref, "warp_kernel sum of block %d: %f, expected %f", b, out[b], ref);
            for (int t = 0; t < nt && b * nt + t < n; t++) {
                int i = b * nt + t, lane = t % 32, w0 = i - lane;
                unsigned ballot = 0, radd = 0;
                int any = 0, all = 1, rmax = -1000;
                for (int l = 0; l < 32; l++) {
                    float x = val(w0 + l);
                    ballot |= (x > 0.0f ? 1u : 0u) << l;
                    any |= x > 2.5f;
                    all &= x > -10.0f;
                    radd += (unsigned)((w0 + l) % 5);
                    rmax = std::max(rmax, (w0 + l) % 11 - 5);
                }
                unsigned vref = ballot ^ ((unsigned)any << 1) ^ ((unsigned)all << 2) ^ (radd << 8);
                CHECK(votes[i] == vref, "warp_kernel votes at %d: 0x%x, expected 0x%x", i, votes[i], vref);
                float hh = lane < 16 ? val(w0 + 15) : val(w0 + 16);
                float g8 = val(w0 + (lane & ~7));
                float up = lane == 0 ? val(i) : val(i - 1);
                float sref = hh + 10.0f * g8 + 100.0f * up;
                CHECK(shuf[i] == sref, "warp_kernel shuffles at %d: %f, expected %f", i, shuf[i], sref);
                float bx = __bfloat162float(bo[i]), bref = val(w0 + (lane ^ 1));
                CHECK(bx == bref, "warp_kernel bf16 xor shuffle at %d: %f, expected %f", i, bx, bref);
                CHECK(counts[i] == cnt * 100 + rmax, "warp_kernel __syncthreads_count/__reduce_max_sync at %d: %d, expected %d",
                      i, counts[i], cnt * 100 + rmax);
            }
        }
        h = hash_bytes(h, out, nb * sizeof(float));
        h = hash_bytes(h, votes, n * sizeof(unsigned));
        h = hash_bytes(h, shuf, n * sizeof(float));
        h = hash_bytes(h, bo, n * sizeof(__nv_bfloat16));
        h = hash_bytes(h, counts, n * sizeof(int));
        cudaCheck(cudaFree(d_in)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_votes));
        cudaCheck(cudaFree(d_shuf)); cudaCheck(cudaFree(d_b)); cudaCheck(cudaFree(d_counts));
        free(in); free(out); free(votes); free(shuf); free(bo); free(counts);
    }
    // atomics
    {
        int nb = S.atom_blocks, nt = S.atom_threads, n = nb * nt;  // n <= 256 keeps the bf16 sums exact
        float* fsum = device_copy<float>(NULL, 1);
        int* isum = device_copy<int>(NULL, 1);
        unsigned long long* usum = device_copy<unsigned long long>(NULL, 1);
        double* dsum = device_copy<double>(NULL, 1);
        __nv_bfloat16* bsum = device_copy<__nv_bfloat16>(NULL, 1);
        __nv_bfloat162* b2sum = device_copy<__nv_bfloat162>(NULL, 1);
        int* imax = device_copy<int>(NULL, 1);
        int* imin = device_copy<int>(NULL, 1);
        unsigned* cas = device_copy<unsigned>(NULL, 1);
        cudaCheck(cudaMemset(fsum, 0, sizeof(float)));
        cudaCheck(cudaMemset(isum, 0, sizeof(int)));
        cudaCheck(cudaMemset(usum, 0, sizeof(unsigned long long)));
        cudaCheck(cudaMemset(dsum, 0, sizeof(double)));
        cudaCheck(cudaMemset(bsum, 0, sizeof(__nv_bfloat16)));
        cudaCheck(cudaMemset(b2sum, 0, sizeof(__nv_bfloat162)));
        cudaCheck(cudaMemset(imax, 0x80, sizeof(int)));  // very negative
        cudaCheck(cudaMemset(imin, 0x7f, sizeof(int)));  // very positive
        cudaCheck(cudaMemset(cas, 0, sizeof(unsigned)));
        LAUNCH(atomics_kernel, nb, nt, 0, 0, fsum, isum, usum, dsum, bsum, b2sum, imax, imin, cas);
        float f; int is, mx, mn; unsigned long long us; double ds; __nv_bfloat16 bs; __nv_bfloat162 b2; unsigned c;
        host_copy(&f, fsum, 1); host_copy(&is, isum, 1); host_copy(&us, usum, 1); host_copy(&ds, dsum, 1);
        host_copy(&bs, bsum, 1); host_copy(&b2, b2sum, 1); host_copy(&mx, imax, 1); host_copy(&mn, imin, 1);
        host_copy(&c, cas, 1);
        CHECK(f == (float)n, "atomicAdd float: %f, expected %d", f, n);
        CHECK(is == n * (n - 1) / 2, "atomicAdd int: %d", is);
        CHECK(us == (unsigned long long)n * (n - 1) / 2, "atomicAdd u64: %llu", us);
        CHECK(ds == 0.5 * n, "atomicAdd double: %f", ds);
        CHECK(__bfloat162float(bs) == (float)std::min(n, 200), "atomicAdd bf16: %f", __bfloat162float(bs));
        CHECK(__bfloat162float(b2.x) == (float)n && __bfloat162float(b2.y) == 2.0f * n, "atomicAdd bf16x2: %f %f",
              __bfloat162float(b2.x), __bfloat162float(b2.y));
        CHECK(mx == n - 1 && mn == -(n - 1), "atomicMax/atomicMin: %d %d", mx, mn);
        CHECK(c == (unsigned)n, "atomicCAS loop: %u, expected %d", c, n);
        h = hash_bytes(h, &f, sizeof(f));
        h = hash_bytes(h, &us, sizeof(us));
        cudaCheck(cudaFree(fsum)); cudaCheck(cudaFree(isum)); cudaCheck(cudaFree(usum)); cudaCheck(cudaFree(dsum));
        cudaCheck(cudaFree(bsum)); cudaCheck(cudaFree(b2sum)); cudaCheck(cudaFree(imax)); cudaCheck(cudaFree(imin));
        cudaCheck(cudaFree(cas));
    }
    // dynamic shared memory, above the 48 KiB default with the opt-in
    {
        int nb = S.dyn_blocks, nt = S.dyn_threads, per = S.dyn_per_thread, n = nb * nt * per;
        size_t smem = (size_t)nt * per * sizeof(float);
        if (smem > 48 * 1024)
            cudaCheck(cudaFuncSetAttribute(dynsmem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        float* in = (float*)mallocCheck(n * sizeof(float));
        for (int i = 0; i < n; i++) in[i] = (float)i;
        float* d_in = device_copy(in, n);
        float* d_out = device_copy<float>(NULL, n);
        LAUNCH(dynsmem_kernel, nb, nt, smem, 0, d_in, d_out, per);
        float* out = (float*)mallocCheck(n * sizeof(float));
        host_copy(out, d_out, n);
        int m = nt * per;
        for (int i = 0; i < n; i++) {
            int b = i / m, k = i % m;
            CHECK(out[i] == in[b * m + m - 1 - k], "dynsmem_kernel at %d: %f", i, out[i]);
        }
        h = hash_bytes(h, out, n * sizeof(float));
        cudaCheck(cudaFree(d_in)); cudaCheck(cudaFree(d_out));
        free(in); free(out);
    }
    // 3D grid
    {
        int W = 40, H = 37, D = 3;
        int* d_out = device_copy<int>(NULL, (size_t)W * H * D);
        dim3 block(16, 8, 2), grid(ceil_div(W, 16), ceil_div(H, 8), ceil_div(D, 2));
        LAUNCH(grid3d_kernel, grid, block, 0, 0, d_out, W, H, D);
        int* out = (int*)mallocCheck((size_t)W * H * D * sizeof(int));
        host_copy(out, d_out, (size_t)W * H * D);
        for (int z = 0; z < D; z++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++) {
                    int got = out[((size_t)z * H + y) * W + x];
                    CHECK(got == x + 1000 * y + 1000000 * z, "grid3d_kernel at (%d,%d,%d): %d", x, y, z, got);
                }
        h = hash_bytes(h, out, (size_t)W * H * D * sizeof(int));
        cudaCheck(cudaFree(d_out));
        free(out);
    }
    return h;
}

// the runtime API answers as an H100 would, and refuses misuse with an error code
static void check_runtime_api(void) {
    cudaDeviceProp p;
    cudaCheck(cudaGetDeviceProperties(&p, 0));
    CHECK(p.major == 9 && p.multiProcessorCount == 132 && p.maxThreadsPerBlock == 1024 && p.warpSize == 32,
          "device properties");
    int v = 0;
    cudaCheck(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    CHECK(v == 227 * 1024, "cudaDevAttrMaxSharedMemoryPerBlockOptin = %d", v);
    cudaStream_t s;
    cudaEvent_t e0, e1;
    cudaCheck(cudaStreamCreate(&s));
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    cudaCheck(cudaEventRecord(e0, s));
    cudaCheck(cudaEventRecord(e1, s));
    cudaCheck(cudaEventSynchronize(e1));
    float ms = -1.0f;
    cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
    CHECK(ms >= 0.0f, "cudaEventElapsedTime %f", ms);
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
    cudaCheck(cudaStreamDestroy(s));
#if LLM_BUILD_EMU
    // the emulated runtime also checks pointers: these print one "emu: ..." line each
    float* d = NULL;
    float host[4] = {0, 0, 0, 0};
    cudaCheck(cudaMalloc(&d, 4 * sizeof(float)));
    unsigned bits = 0;
    cudaCheck(cudaMemcpy(&bits, d, sizeof(unsigned), cudaMemcpyDeviceToHost));
    CHECK(bits == 0xFFFFFFFFu, "cudaMalloc memory is filled with 0xFF bytes");
    fprintf(stderr, "test_emu: three deliberate runtime errors follow:\n");
    CHECK(cudaMemcpy(host, host, sizeof(host), cudaMemcpyHostToDevice) == cudaErrorInvalidValue, "H2D to a host pointer");
    CHECK(cudaMemcpy(d, host, 5 * sizeof(float), cudaMemcpyHostToDevice) == cudaErrorInvalidValue, "copy past the end");
    CHECK(cudaGetLastError() == cudaErrorInvalidValue && cudaGetLastError() == cudaSuccess, "cudaGetLastError");
    cudaCheck(cudaFree(d));
    CHECK(cudaFree(d) == cudaErrorInvalidValue, "double cudaFree");
    (void)cudaGetLastError();
#endif
}

// ----------------------------------------------------------------------------
// planted bugs

__global__ void oob_global_kernel(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 1.0f;  // off by one: writes out[n]
}
__global__ void oob_smem_kernel(float* out) {
    EXTERN_SHARED(float, buf);
    buf[threadIdx.x + 1] = (float)threadIdx.x;  // the last thread writes one past the buffer
    __syncthreads();
    out[threadIdx.x] = buf[threadIdx.x];
}
__global__ void race_kernel(const float* in, float* out) {
    __shared__ float s;
    if (threadIdx.x == 0) s = 0.0f;
    __syncthreads();
    s += in[threadIdx.x];  // read-modify-write by every thread, unprotected
    __syncthreads();
    if (threadIdx.x == 0) out[0] = s;
}
__global__ void partial_sync_kernel(float* out) {
    if (threadIdx.x >= 16) return;
    __syncthreads();  // threads 16.. never get here
    out[threadIdx.x] = 1.0f;
}
__global__ void lane_exit_kernel(float* out) {
    int lane = threadIdx.x % 32;
    if (lane >= 16) return;
    float v = __shfl_down_sync(0xffffffffu, (float)lane, 1);  // the mask names lanes that have left
    out[threadIdx.x] = v;
}
__global__ void mask_self_kernel(float* out) {
    float v = __shfl_sync(0x1u, 1.0f, 0);  // lanes 1..31 call it with a mask that excludes them
    out[threadIdx.x] = v;
}
__global__ void deadlock_kernel(float* out) {
    int lane = threadIdx.x % 32;
    if (lane < 16) __syncwarp();   // waits for lanes 16..31
    else __syncthreads();          // waits for lanes 0..15
    out[threadIdx.x] = 1.0f;
}
__device__ __noinline__ float deep(int depth) {
    volatile float frame[512];  // 2 KiB a level
    frame[depth % 512] = (float)depth;
    return depth == 0 ? frame[0] : deep(depth - 1) + frame[depth % 512];
}
__global__ void stack_kernel(float* out, int depth) { out[threadIdx.x] = deep(depth); }

// ----------------------------------------------------------------------------
// racecheck: shared-memory races that no thread order shows in the values. Each kernel comes in a
// buggy (BUG = true) and a correct version with the same results. In the buggy one, the two racing
// accesses of a pair of threads are separated by warp collectives of only one of the threads, so
// when the emulator runs every thread up to its next barrier or collective, in any order, the first
// access of every pair still comes first (in the random order, a warp would have to get several
// collectives ahead of another thread that has not yet run once). Only the racecheck build
// (-DEMU_RACECHECK, see emu_racecheck.h) reports them.

// (1) a tiled loop through dynamic shared memory without the trailing __syncthreads: the next
// tile's loads overwrite elements that another warp may still be about to read (write after read)
template <bool BUG>
__global__ void rc_tiled_kernel(const float* in, float* out, int ntiles) {
    EXTERN_SHARED(float, tile);
    int tid = threadIdx.x, n = blockDim.x;
    const float* src = in + (size_t)blockIdx.x * ntiles * n;
    float acc = 0.0f;
    for (int t = 0; t < ntiles; t++) {
        tile[tid] = src[t * n + tid];
        __syncthreads();
        float v = tile[n - 1 - tid] * (float)(t + 1);  // an element another warp loaded
        acc += warp_sum(v);
        if (!BUG) __syncthreads();  // every thread has read `tile` before the next tile overwrites it
    }
    out[blockIdx.x * n + tid] = acc;
}

// (2) two block reductions in a row through one shared buffer, without the barrier between them:
// the second reduction's per-warp partials overwrite the first one's before every warp has read
// them (write after read)
template <bool BUG>
__device__ float rc_block_sum(float v) {
    __shared__ float partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_sum(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = warp_sum(lane < nwarps ? partial[lane] : 0.0f);
    if (!BUG) __syncthreads();  // every warp has read `partial` before the next call writes it
    return v;
}
template <bool BUG>
__global__ void rc_reduce_twice_kernel(const float* in, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float x = in[i];
    float s1 = rc_block_sum<BUG>(x);
    float s2 = rc_block_sum<BUG>(x * x);
    out[2 * i] = s1;
    out[2 * i + 1] = s2;
}

// (3) a warp-synchronous reduction missing a __syncwarp: each half warp sums a row of 16 values with
// shuffles over its own half (mask 0x0000ffff or 0xffff0000), the two half sums meet in shared
// memory, row pair after row pair. Without the trailing __syncwarp, lane 0 writes its half's next
// sum while lanes 16-31 may not have read the previous one: the half-warp shuffles in between
// order nothing across the halves (write after read within one warp). Each lane also reads its
// neighbour's value in its own half through shared memory after the half's __syncwarp(mask): that
// one is ordered, and must not be reported.
template <bool BUG>
__global__ void rc_halves_kernel(const float* in, float* out, int rows) {
    __shared__ float half_sum[32][2];  // (warp, half)
    __shared__ float mine[32][32];     // (warp, lane)
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, h = lane / 16, l = lane % 16;
    int gw = blockIdx.x * (blockDim.x / 32) + warp;  // this warp's rows: gw * rows + [0, rows)
    unsigned half = h ? 0xffff0000u : 0x0000ffffu;
    float acc = 0.0f;
    for (int r = 0; r < rows; r += 2) {
        float v = in[((size_t)gw * rows + r + h) * 16 + l];
        mine[warp][lane] = v;
        __syncwarp(half);                                      // this half's values are written
        float next = mine[warp][h * 16 + (l + 1) % 16];        // the neighbour's, in the same half
        for (int off = 8; off > 0; off >>= 1) v += __shfl_xor_sync(half, v, off);
        if (l == 0) half_sum[warp][h] = v;
        __syncwarp();                        // both half sums are written
        acc += v * half_sum[warp][1 - h] + next;  // the other half's sum
        if (!BUG) __syncwarp();              // both halves have read before the next pair is written
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

// (4) a plain read after write without a barrier: every thread stores its value, the warps compute
// their means with shuffles, and each thread reads the next warp's value (read after write)
template <bool BUG>
__global__ void rc_raw_kernel(const float* in, float* out) {
    __shared__ float vals[256];
    int tid = threadIdx.x, n = blockDim.x;
    float x = in[blockIdx.x * n + tid];
    vals[tid] = x;
    float mean = warp_sum(x) / 32.0f;
    if (!BUG) __syncthreads();  // every thread's value is in `vals`
    out[blockIdx.x * n + tid] = vals[(tid + 32) % n] - mean;
}

// (5) atomics on shared memory do not race with each other, but a plain read of the counter they
// update does, without a barrier (read after atomic)
template <bool BUG>
__global__ void rc_atomic_kernel(const float* in, float* out) {
    __shared__ int count;
    int tid = threadIdx.x;
    if (tid == 0) count = 0;
    __syncthreads();
    float x = in[blockIdx.x * blockDim.x + tid];
    if (x > 0.0f) atomicAdd(&count, 1);
    float s = warp_sum(x);
    if (!BUG) __syncthreads();  // every atomicAdd is done
    out[blockIdx.x * blockDim.x + tid] = s + 1000.0f * (float)count;
}

// the input of the racecheck kernels: small integers, so that every sum is exact in any order
static float* rc_input(size_t n) {
    float* x = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)((int)((i * 7 + i / 13) % 11) - 5);
    return x;
}

// runs racecheck case `name` (rc_tiled, rc_tiled_ok, rc_reduce_twice, ...), checks its results
// against the CPU and prints them; returns -1 if name is not such a case
template <bool BUG>
static int run_rc_case(const char* base) {
    const int nb = 3;
    float* out = NULL;
    size_t nout = 0;
    if (strcmp(base, "rc_tiled") == 0) {
        const int nt = 64, ntiles = 4;
        size_t n = (size_t)nb * ntiles * nt;
        float* in = rc_input(n);
        float* d_in = device_copy(in, n);
        float* d_out = device_copy<float>(NULL, (size_t)nb * nt);
        LAUNCH(rc_tiled_kernel<BUG>, nb, nt, nt * sizeof(float), 0, d_in, d_out, ntiles);
        nout = (size_t)nb * nt;
        out = (float*)mallocCheck(nout * sizeof(float));
        host_copy(out, d_out, nout);
        for (int b = 0; b < nb; b++)
            for (int tid = 0; tid < nt; tid++) {
                float ref = 0.0f;
                for (int t = 0; t < ntiles; t++)
                    for (int l = 0; l < 32; l++) {  // the warp's sum of the elements it reads (mirrored)
                        size_t k = ((size_t)b * ntiles + t) * nt + nt - 1 - (tid / 32 * 32 + l);
                        ref += in[k] * (t + 1);
                    }
                CHECK(out[b * nt + tid] == ref, "rc_tiled block %d thread %d: %f, expected %f", b, tid, out[b * nt + tid],
                      ref);
            }
        free(in);
        cudaCheck(cudaFree(d_in));
        cudaCheck(cudaFree(d_out));
    } else if (strcmp(base, "rc_reduce_twice") == 0) {
        const int nt = 128;
        size_t n = (size_t)nb * nt;
        float* in = rc_input(n);
        float* d_in = device_copy(in, n);
        float* d_out = device_copy<float>(NULL, 2 * n);
        LAUNCH(rc_reduce_twice_kernel<BUG>, nb, nt, 0, 0, d_in, d_out);
        nout = 2 * n;
        out = (float*)mallocCheck(nout * sizeof(float));
        host_copy(out, d_out, nout);
        for (int b = 0; b < nb; b++) {
            float s1 = 0.0f, s2 = 0.0f;
            for (int t = 0; t < nt; t++) {
                s1 += in[b * nt + t];
                s2 += in[b * nt + t] * in[b * nt + t];
            }
            for (int t = 0; t < nt; t++)
                CHECK(out[2 * (b * nt + t)] == s1 && out[2 * (b * nt + t) + 1] == s2,
                      "rc_reduce_twice block %d thread %d: %f %f, expected %f %f", b, t, out[2 * (b * nt + t)],
                      out[2 * (b * nt + t) + 1], s1, s2);
        }
        free(in);
        cudaCheck(cudaFree(d_in));
        cudaCheck(cudaFree(d_out));
    } else if (strcmp(base, "rc_halves") == 0) {
        const int nt = 64, rows = 6, nwarps = nb * nt / 32;
        size_t n = (size_t)nwarps * rows * 16;
        float* in = rc_input(n);
        float* d_in = device_copy(in, n);
        float* d_out = device_copy<float>(NULL, (size_t)nb * nt);
        LAUNCH(rc_halves_kernel<BUG>, nb, nt, 0, 0, d_in, d_out, rows);
        nout = (size_t)nb * nt;
        out = (float*)mallocCheck(nout * sizeof(float));
        host_copy(out, d_out, nout);
        for (int gw = 0; gw < nwarps; gw++)
            for (int lane = 0; lane < 32; lane++) {
                float ref = 0.0f;
                for (int r = 0; r < rows; r += 2) {
                    float a = 0.0f, c = 0.0f;
                    for (int l = 0; l < 16; l++) {
                        a += in[((size_t)gw * rows + r) * 16 + l];
                        c += in[((size_t)gw * rows + r + 1) * 16 + l];
                    }
                    ref += a * c + in[((size_t)gw * rows + r + lane / 16) * 16 + (lane % 16 + 1) % 16];
                }
                CHECK(out[gw * 32 + lane] == ref, "rc_halves warp %d lane %d: %f, expected %f", gw, lane,
                      out[gw * 32 + lane], ref);
            }
        free(in);
        cudaCheck(cudaFree(d_in));
        cudaCheck(cudaFree(d_out));
    } else if (strcmp(base, "rc_raw") == 0 || strcmp(base, "rc_atomic") == 0) {
        const int nt = 128;
        bool raw = strcmp(base, "rc_raw") == 0;
        size_t n = (size_t)nb * nt;
        float* in = rc_input(n);
        float* d_in = device_copy(in, n);
        float* d_out = device_copy<float>(NULL, n);
        if (raw) LAUNCH(rc_raw_kernel<BUG>, nb, nt, 0, 0, d_in, d_out);
        else LAUNCH(rc_atomic_kernel<BUG>, nb, nt, 0, 0, d_in, d_out);
        nout = n;
        out = (float*)mallocCheck(nout * sizeof(float));
        host_copy(out, d_out, nout);
        for (int b = 0; b < nb; b++) {
            int count = 0;
            for (int t = 0; t < nt; t++) count += in[b * nt + t] > 0.0f;
            for (int t = 0; t < nt; t++) {
                float ws = 0.0f;
                for (int l = 0; l < 32; l++) ws += in[b * nt + t / 32 * 32 + l];
                float ref = raw ? in[b * nt + (t + 32) % nt] - ws / 32.0f : ws + 1000.0f * (float)count;
                CHECK(out[b * nt + t] == ref, "%s block %d thread %d: %f, expected %f", base, b, t, out[b * nt + t], ref);
            }
        }
        free(in);
        cudaCheck(cudaFree(d_in));
        cudaCheck(cudaFree(d_out));
    } else {
        return -1;
    }
    printf("results %016llx\n", (unsigned long long)hash_bytes(1469598103934665603ull, out, nout * sizeof(float)));
    printf("%s%s: the results are right\n", base, BUG ? "" : "_ok");
    free(out);
    return 0;
}
static int run_rc(const char* name) {
    size_t len = strlen(name);
    if (len > 3 && strcmp(name + len - 3, "_ok") == 0) {
        char base[64];
        snprintf(base, sizeof(base), "%.*s", (int)(len - 3), name);
        return run_rc_case<false>(base);
    }
    return run_rc_case<true>(name);
}

static int run_bug(const char* name) {
    if (strncmp(name, "rc_", 3) == 0) {
        int r = run_rc(name);
        if (r >= 0) return r;
    }
    float* d_out = NULL;
    cudaCheck(cudaMalloc(&d_out, 64 * sizeof(float)));
    if (strcmp(name, "missing_sync") == 0) {
        int n = 512;
        float* in = (float*)mallocCheck(n * sizeof(float));
        for (int i = 0; i < n; i++) in[i] = (float)(i % 7 - 3);
        float* d_in = device_copy(in, n);
        LAUNCH(block_sum_nosync_kernel, 2, 256, 0, 0, d_in, d_out, n);
        float out[2];
        host_copy(out, d_out, 2);
        printf("missing_sync result %g %g\n", out[0], out[1]);
        return 0;
    } else if (strcmp(name, "oob_global") == 0) {
        LAUNCH(oob_global_kernel, 1, 128, 0, 0, d_out, 64);
    } else if (strcmp(name, "oob_smem") == 0) {
        LAUNCH(oob_smem_kernel, 1, 32, 32 * sizeof(float), 0, d_out);
    } else if (strcmp(name, "race") == 0) {
        float* d_in = NULL;
        cudaCheck(cudaMalloc(&d_in, 32 * sizeof(float)));
        cudaCheck(cudaMemset(d_in, 0, 32 * sizeof(float)));
        LAUNCH(race_kernel, 1, 32, 0, 0, d_in, d_out);
    } else if (strcmp(name, "partial_sync") == 0) {
        LAUNCH(partial_sync_kernel, 1, 32, 0, 0, d_out);
    } else if (strcmp(name, "lane_exit") == 0) {
        LAUNCH(lane_exit_kernel, 1, 32, 0, 0, d_out);
    } else if (strcmp(name, "mask_self") == 0) {
        LAUNCH(mask_self_kernel, 1, 32, 0, 0, d_out);
    } else if (strcmp(name, "deadlock") == 0) {
        LAUNCH(deadlock_kernel, 1, 32, 0, 0, d_out);
    } else if (strcmp(name, "host_ptr") == 0) {
        float* host = (float*)mallocCheck(64 * sizeof(float));
        LAUNCH(oob_global_kernel, 1, 32, 0, 0, host, 32);
        free(host);
    } else if (strcmp(name, "too_many_threads") == 0) {
        LAUNCH(oob_global_kernel, 1, 2048, 0, 0, d_out, 32);
    } else if (strcmp(name, "smem_optin") == 0) {
        LAUNCH(dynsmem_kernel, 1, 256, 64 * 1024, 0, d_out, d_out, 64);  // no cudaFuncSetAttribute
    } else if (strcmp(name, "smem_max") == 0) {
        cudaCheck(cudaFuncSetAttribute(dynsmem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
        LAUNCH(dynsmem_kernel, 1, 256, 240 * 1024, 0, d_out, d_out, 240);
    } else if (strcmp(name, "stack_overflow") == 0) {
        LAUNCH(stack_kernel, 1, 32, 0, 0, d_out, 1000);  // about 2 MB of frames
    } else {
        fprintf(stderr, "test_emu: unknown case '%s' (%s:%d)\n", name, __FILE__, __LINE__);
        return 2;
    }
    cudaCheck(cudaDeviceSynchronize());
    printf("%s: the kernel ran to the end\n", name);
    return 0;
}

// ----------------------------------------------------------------------------
// timings

__global__ void barrier_bench_kernel(float* out, int iters) {
    // two buffers, so that one barrier per iteration suffices: iteration it+1 writes the buffer that
    // iteration it-1 read, and iteration it's barrier lies between them (racecheck found the
    // single-buffer version's write-after-read race)
    __shared__ float s[2][1024];
    float acc = 0.0f;
    for (int it = 0; it < iters; it++) {
        s[it & 1][threadIdx.x] = acc + it;
        __syncthreads();
        acc += s[it & 1][(threadIdx.x + 1) % blockDim.x];
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
__global__ void shuffle_bench_kernel(float* out, int iters) {
    float v = (float)threadIdx.x;
    for (int it = 0; it < iters; it++) v += __shfl_xor_sync(0xffffffffu, v, it & 31) * 1e-3f;
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}
__global__ void empty_kernel(float* out) {
    if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = 1.0f;
}
// one warp per row, as a layernorm's statistics
__global__ void row_stats_kernel(const float* in, float* mean, float* rstd, int N, int C) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (warp >= N) return;
    const float* x = in + (size_t)warp * C;
    float s = 0.0f, ss = 0.0f;
    for (int i = lane; i < C; i += 32) { s += x[i]; ss += x[i] * x[i]; }
    s = warp_sum(s);
    ss = warp_sum(ss);
    if (lane == 0) {
        float m = s / C;
        mean[warp] = m;
        rstd[warp] = rsqrtf(ss / C - m * m + 1e-5f);
    }
}

// CPU time of this process: the machines that run the tests are shared, wall time is noisy
static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void run_bench(void) {
    float* d_out = NULL;
    cudaCheck(cudaMalloc(&d_out, 132 * 1024 * sizeof(float)));
    int iters = 200;
    LAUNCH(barrier_bench_kernel, 1, 1024, 0, 0, d_out, 1);  // warm up: create the 1024 fibers
    double t0 = cpu_ms();
    LAUNCH(barrier_bench_kernel, 8, 1024, 0, 0, d_out, iters);
    double t1 = cpu_ms();
    printf("bench: __syncthreads: %.1f ns per thread per barrier (8 blocks x 1024 threads x %d)\n",
           (t1 - t0) * 1e6 / (8.0 * 1024 * iters), iters);
    t0 = cpu_ms();
    LAUNCH(shuffle_bench_kernel, 8, 1024, 0, 0, d_out, iters);
    t1 = cpu_ms();
    printf("bench: __shfl_xor_sync: %.1f ns per lane per shuffle (8 blocks x 1024 threads x %d)\n",
           (t1 - t0) * 1e6 / (8.0 * 1024 * iters), iters);
    int launches = 100;
    t0 = cpu_ms();
    for (int i = 0; i < launches; i++) LAUNCH(empty_kernel, 132, 256, 0, 0, d_out);
    t1 = cpu_ms();
    printf("bench: empty kernel, 132 blocks x 256 threads: %.3f ms per launch, %.1f ns per thread\n",
           (t1 - t0) / launches, (t1 - t0) * 1e6 / (launches * 132.0 * 256));
    int N = 4096, C = 768;
    float* in = (float*)mallocCheck((size_t)N * C * sizeof(float));
    for (size_t i = 0; i < (size_t)N * C; i++) in[i] = (float)(i % 13) * 0.1f;
    float* d_in = device_copy(in, (size_t)N * C);
    float *d_mean = device_copy<float>(NULL, N), *d_rstd = device_copy<float>(NULL, N);
    t0 = cpu_ms();
    LAUNCH(row_stats_kernel, N * 32 / 256, 256, 0, 0, d_in, d_mean, d_rstd, N, C);
    t1 = cpu_ms();
    printf("bench: one warp per row statistics of %dx%d: %.1f ms (CPU time)\n", N, C, t1 - t0);
    free(in);
    cudaCheck(cudaFree(d_in)); cudaCheck(cudaFree(d_mean)); cudaCheck(cudaFree(d_rstd)); cudaCheck(cudaFree(d_out));
}

static const char* USAGE =
    "[CASE]\n"
    "Tests of the CUDA emulator (dev/emu), one case per run (dev/emu/test_emu.sh runs them all):\n"
    "  correct       correct kernels checked exactly against the CPU; prints \"results <hash>\" (the default)\n"
    "  small         the same at tiny shapes (for the sanitizer builds)\n"
    "  missing_sync  a reduction without __syncthreads: prints its order-dependent result\n"
    "  oob_global oob_smem race partial_sync lane_exit mask_self deadlock host_ptr too_many_threads\n"
    "  smem_optin smem_max stack_overflow\n"
    "                planted bugs: each ends with its report and a non-zero exit\n"
    "  rc_tiled rc_reduce_twice rc_halves rc_raw rc_atomic (and each with _ok appended)\n"
    "                shared-memory races and their fixes, for racecheck\n"
    "  bench         timings of the emulator (switch cost per barrier, shuffle, launch)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    const char* mode = argc > 1 ? argv[1] : "correct";
    if (strcmp(mode, "correct") == 0 || strcmp(mode, "small") == 0) {
        Shapes big = {20000, 6, 5, 256, 8, 32, 2, 256, 64};   // dynsmem: 64 KiB per block
        Shapes small = {700, 2, 2, 64, 4, 32, 2, 64, 4};
        double t0 = wall_ms();
        uint64_t h = run_correct(strcmp(mode, "correct") == 0 ? big : small);
        check_runtime_api();
        printf("results %016llx\n", (unsigned long long)h);
        printf("time %.0f ms\n", wall_ms() - t0);
        return 0;
    }
    if (strcmp(mode, "bench") == 0) {
        run_bench();
        return 0;
    }
    return run_bug(mode);
}
