// dev/cuda/common.h: the benchmark plumbing that every dev/cuda/*.cu shares, so that each of those
// files holds only its kernel versions, its checks and its numbers:
//   arguments      arg_int / arg_size / arg_version: a positional number or its default; a malformed
//                  or out-of-range one is fatal
//   inputs         randn_floatX: normal draws rounded to floatX (the CPU reference reads what the
//                  kernel reads); upload / download between host floats and device floatX
//   checks         compare: |got - want| <= atol + rtol |want| element by element (NaN fails);
//                  close_enough prints the one-line verdict "ok   what: max|err| e" or "FAIL ..."
//   timing         bench_ms: the median over reps runs, cudaEvents around the timed call only; before
//                  each run (untimed) an optional prep (restore inputs), then a write of a 128 MiB
//                  buffer (more than the L2 of an A100 or H100: 40 / 50 MiB), so inputs come from DRAM
//   throughput     peak_gbs: the device's DRAM bandwidth from its memory clock and bus width;
//                  gbs / tflops: achieved rates; report_gbs prints the usual time + GB/s line
//
// Both builds: nvcc (a GPU) and g++ -DLLM_EMU (dev/emu runs the kernels on the CPU: the checks are
// real, the times are CPU times and no peak bandwidth is known). Every CUDA call is checked
// (file:line); the header is included once per program, so it keeps its state in static variables.
#pragma once
#include "../../llm/core/common.h"
#include "../../llm/core/device.h"
#include "../../llm/core/rand.h"
#include "../../llm/core/usage.h"
#include <vector>
#include <algorithm>
#include <limits.h>

// ----------------------------------------------------------------------------
// command-line arguments

// a default size that depends on the build: the full size on a GPU, a small one for a smoke run in
// the emulated build
#define GPU_OR_EMU(gpu, emu) (LLM_BUILD_EMU ? (emu) : (gpu))

// argv[i] as a non-negative integer no larger than max, def when there is no argv[i]
static unsigned long long arg_number(int argc, char** argv, int i, unsigned long long def, unsigned long long max) {
    if (i >= argc) return def;
    const char* s = argv[i];
    char* end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (s[0] == '-' || end == s || *end != '\0' || errno != 0 || v > max) {
        fatal("%s: argument %d: expected an integer in [0, %llu], found '%s'", argv[0], i, max, s);
    }
    return v;
}
static int arg_int(int argc, char** argv, int i, int def) {
    return (int)arg_number(argc, argv, i, (unsigned long long)def, INT_MAX);
}
static size_t arg_size(int argc, char** argv, int i, size_t def) {
    return (size_t)arg_number(argc, argv, i, (unsigned long long)def, SIZE_MAX);
}
// argv[i] as the one kernel version to run, 1..count; 0 (also when there is no argv[i]): all of them
static int arg_version(int argc, char** argv, int i, int count) {
    return (int)arg_number(argc, argv, i, 0, (unsigned long long)count);
}

// ----------------------------------------------------------------------------
// inputs and device buffers

// n draws of N(mean, std^2), each rounded to floatX
static std::vector<float> randn_floatX(Rng* rng, size_t n, float mean, float std) {
    std::vector<float> v(n);
    rng_normal(rng, v.data(), n, mean, std);
    for (size_t i = 0; i < n; i++) v[i] = (float)(floatX)v[i];
    return v;
}

// host floats -> device floatX: into an existing buffer, or a new one
static void upload_to(floatX* d, const std::vector<float>& h) { copy_floats_to_device(d, h.data(), h.size()); }
static floatX* upload(const std::vector<float>& h) {
    floatX* d = (floatX*)device_malloc(h.size() * sizeof(floatX), MEM_WORKSPACE);
    upload_to(d, h);
    return d;
}
// host values -> a new device buffer of the same type, copied as they are
template <class T>
static T* upload_raw(const std::vector<T>& h) {
    T* d = (T*)device_malloc(h.size() * sizeof(T), MEM_WORKSPACE);
    copy_to_device(d, h.data(), h.size() * sizeof(T));
    return d;
}

// device floatX -> host floats; device values -> host values of the same type
static std::vector<float> download(const floatX* d, size_t n) {
    std::vector<float> h(n);
    copy_to_host_float(h.data(), d, n);
    return h;
}
template <class T>
static std::vector<T> download_raw(const T* d, size_t n) {
    std::vector<T> h(n);
    copy_to_host(h.data(), d, n * sizeof(T));
    return h;
}

// n floatX of device memory filled with 0xFF bytes (NaN in FP32 and BF16): unwritten outputs show
static floatX* alloc_poisoned(size_t n) {
    floatX* d = (floatX*)device_malloc(n * sizeof(floatX), MEM_WORKSPACE);
    cudaCheck(cudaMemset(d, 0xFF, n * sizeof(floatX)));
    return d;
}

// ----------------------------------------------------------------------------
// checks

typedef struct {
    size_t bad;      // elements with |got - want| > atol + rtol |want|, NaN included
    double max_err;  // the largest |got - want| (NaN when any is NaN)
} Diff;

static Diff compare(const float* got, const float* want, size_t n, float atol, float rtol) {
    Diff d = {0, 0.0};
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]);
        if (!(err <= atol + rtol * fabs((double)want[i]))) d.bad++;
        if (!(err <= d.max_err)) d.max_err = err;
    }
    return d;
}

// one line, "ok   what: max|err| e" or "FAIL what: ..."; 1 when every element is close
static int close_enough(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                        float atol, float rtol) {
    Diff d = compare(got.data(), want.data(), std::min(got.size(), want.size()), atol, rtol);
    int ok = d.bad == 0 && got.size() == want.size();
    printf("%s %s: max|err| %.3g\n", ok ? "ok  " : "FAIL", what, d.max_err);
    return ok;
}

// ----------------------------------------------------------------------------
// timing

static void* bench_flush = NULL;  // written before every timed run, allocated on first use
static const size_t BENCH_FLUSH_BYTES = (size_t)128 << 20;

// median milliseconds of reps runs of run(); before each: prep() (untimed), then the L2 flush
template <class Prep, class Run>
static float bench_ms(int reps, Prep prep, Run run) {
    if (reps < 1) reps = 1;
    if (bench_flush == NULL) bench_flush = device_malloc(BENCH_FLUSH_BYTES, MEM_WORKSPACE);
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    std::vector<float> ms(reps);
    for (int r = 0; r < reps; r++) {
        prep();
        cudaCheck(cudaMemsetAsync(bench_flush, r & 0xFF, BENCH_FLUSH_BYTES, 0));
        cudaCheck(cudaEventRecord(start, 0));
        run();
        cudaCheck(cudaEventRecord(stop, 0));
        cudaCheck(cudaEventSynchronize(stop));
        cudaCheck(cudaEventElapsedTime(&ms[r], start, stop));
    }
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    std::sort(ms.begin(), ms.end());
    return ms[reps / 2];
}
template <class Run>
static float bench_ms(int reps, Run run) {
    return bench_ms(reps, [] {}, run);
}

// the flush buffer back, at the end of main
static void bench_free(void) {
    device_free(bench_flush);
    bench_flush = NULL;
}

// ----------------------------------------------------------------------------
// the device and throughput

// the name of device 0
static const char* device_name(void) {
    static char name[256] = "";
    if (name[0] == '\0') {
        cudaDeviceProp prop;
        cudaCheck(cudaGetDeviceProperties(&prop, 0));
        snprintf(name, sizeof(name), "%s", prop.name);
    }
    return name;
}

// the current device's peak DRAM bandwidth in GB/s: 2 transfers per memory clock (double data rate)
// times the bus width; 0 when unknown (the emulated build, or a driver that does not say)
static double peak_gbs(void) {
#if LLM_BUILD_CUDA
    static double peak = -1.0;
    if (peak < 0.0) {
        int dev = 0, clock_khz = 0, bus_bits = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaError_t e1 = cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, dev);
        cudaError_t e2 = cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev);
        if (e1 != cudaSuccess || e2 != cudaSuccess) {
            fprintf(stderr, "warning: no peak bandwidth: %s (%s:%d)\n",
                    cudaGetErrorString(e1 != cudaSuccess ? e1 : e2), __FILE__, __LINE__);
            (void)cudaGetLastError();
            peak = 0.0;
        } else {
            peak = 2.0 * clock_khz * 1e3 * (bus_bits / 8) / 1e9;
        }
    }
    return peak;
#else
    return 0.0;
#endif
}

// achieved rates: bytes or FLOPs in ms milliseconds, as GB/s or TFLOP/s
static double gbs(double bytes, float ms) { return bytes / ms / 1e6; }
static double tflops(double flops, float ms) { return flops / ms / 1e9; }

// "     what: 0.1234 ms, 2900 GB/s (87% of 3352 GB/s)", or "(no peak known)"
static void report_gbs(const char* what, float ms, double bytes) {
    double rate = gbs(bytes, ms), peak = peak_gbs();
    if (peak > 0) printf("     %s: %.4f ms, %.0f GB/s (%.0f%% of %.0f GB/s)\n", what, ms, rate, 100.0 * rate / peak, peak);
    else printf("     %s: %.4f ms, %.3g GB/s (no peak known)\n", what, ms, rate);
}
