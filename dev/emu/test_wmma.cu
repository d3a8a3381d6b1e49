// test_wmma.cu: tests of the emulated WMMA subset (dev/emu/mma.h). One program, one case per word:
//   correct   a 16x16x16 tile product and a 64x48x80 tiled GEMM, bf16 and half, every row/col-major
//             combination of A, B, the loaded C and the stored D, fill + accumulate, element-wise
//             scaling and a function applied through x[i]; each checked against a double reference
//             on the CPU ("ok ..." / "FAIL ..." lines), then "results <hash>" (must not change with
//             EMU_ORDER); mma.h's bf16/half -> float conversion against the toolkit's for every bit
//             pattern; also a kernel that reads x[i] assuming NVIDIA's accumulator mapping, which
//             must get wrong results here (the point of the opaque mapping)
//   misaligned bad_ldm bad_ldm_float skip_mma lane_returns partial_warp nonuniform smem_nosync
//             planted bugs: each must exit non-zero with its "emu: error:" line (test_wmma.sh);
//             smem_nosync (a missing __syncwarp after store_matrix_sync) is reported by racecheck
//   smem_sync  smem_nosync's fix: right results, no racecheck report
// The same source compiles with nvcc (`make test-wmma-nvcc`), where the planted bugs are not detected
// and the NVIDIA-mapping kernel happens to be right.
#include "../../llm/core/common.h"
#include "../../llm/core/usage.h"
#include <mma.h>
#include <math.h>
#include <vector>
using namespace nvcuda;

// ----------------------------------------------------------------------------
// kernels

// one warp per 16x16 tile of D (M x N) = alpha * f(C + A B): A is M x K, B is K x N, each row- or
// column-major as LA/LB say; C (optional, else every element `fillv`) and D row- or column-major as
// c_col/d_col say. relu: apply max(0, .) to every x[i] (a mapping-agnostic element-wise function).
template <typename T, typename LA, typename LB>
__global__ void wmma_gemm_kernel(const T* A, const T* B, const float* C, float* D, int M, int N, int K, int c_col,
                                 int d_col, float fillv, float alpha, int relu) {
    const bool a_col = std::is_same<LA, wmma::col_major>::value, b_col = std::is_same<LB, wmma::col_major>::value;
    int warp = (int)((blockIdx.x * blockDim.x + threadIdx.x) / 32);
    int tiles_n = N / 16;
    if (warp >= (M / 16) * tiles_n) return;  // whole warps only
    int m0 = warp / tiles_n * 16, n0 = warp % tiles_n * 16;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    if (C != NULL)
        wmma::load_matrix_sync(acc, c_col ? C + (size_t)n0 * M + m0 : C + (size_t)m0 * N + n0, c_col ? M : N,
                               c_col ? wmma::mem_col_major : wmma::mem_row_major);
    else
        wmma::fill_fragment(acc, fillv);
    for (int k0 = 0; k0 < K; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> b;
        wmma::load_matrix_sync(a, a_col ? A + (size_t)k0 * M + m0 : A + (size_t)m0 * K + k0, a_col ? M : K);
        wmma::load_matrix_sync(b, b_col ? B + (size_t)n0 * K + k0 : B + (size_t)k0 * N + n0, b_col ? K : N);
        wmma::mma_sync(acc, a, b, acc);
    }
    for (int i = 0; i < acc.num_elements; i++) {
        float v = relu ? fmaxf(acc.x[i], 0.0f) : acc.x[i];
        acc.x[i] = alpha * v;
    }
    wmma::store_matrix_sync(d_col ? D + (size_t)n0 * M + m0 : D + (size_t)m0 * N + n0, acc, d_col ? M : N,
                            d_col ? wmma::mem_col_major : wmma::mem_row_major);
}

// a planted misuse: the 16x16x16 product (row-major A and B), then D written from x[i] at the row and
// column that NVIDIA's sm_80/sm_90 m16n16k16 float accumulator puts there (lane = 4 g + t: x[i] is
// row g + 8 ((i >> 1) & 1), column 2 t + (i & 1) + 8 (i >> 2)) instead of through store_matrix_sync
template <typename T>
__global__ void nvidia_mapping_kernel(const T* A, const T* B, float* D) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(a, A, 16);
    wmma::load_matrix_sync(b, B, 16);
    wmma::mma_sync(acc, a, b, acc);
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int i = 0; i < acc.num_elements; i++) {
        int r = g + 8 * ((i >> 1) & 1), c = 2 * t + (i & 1) + 8 * (i >> 2);
        D[r * 16 + c] = acc.x[i];
    }
}

// planted bugs, chosen by `bug`: 0 misaligned A, 1 ldm 20 for bf16, 2 ldm 18 for a float store,
// 3 lane 5 skips mma_sync, 4 lane 7 returns before mma_sync, 5 (launched with 16 threads) a partial
// warp, 6 lane 3 passes another pointer, 7 the tile stored to shared memory and read back by other
// lanes without a __syncwarp (a race racecheck reports), 8 the same with the __syncwarp (no race)
__global__ void wmma_bug_kernel(const __nv_bfloat16* A, const __nv_bfloat16* B, float* D, int bug) {
    __shared__ __align__(32) float s[256];
    int lane = threadIdx.x & 31;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    const __nv_bfloat16* pa = bug == 0 ? A + 8 : bug == 6 && lane == 3 ? A + 16 : A;
    wmma::load_matrix_sync(a, pa, bug == 1 ? 20 : 32);
    wmma::load_matrix_sync(b, B, 32);
    if (bug == 4 && lane == 7) return;
    if (!(bug == 3 && lane == 5)) wmma::mma_sync(acc, a, b, acc);
    if (bug == 7 || bug == 8) {
        wmma::store_matrix_sync(s, acc, 16, wmma::mem_row_major);
        if (bug == 8) __syncwarp();
        for (int i = 0; i < 8; i++) D[lane * 8 + i] = s[lane * 8 + i];  // row lane / 2: other lanes' elements
        return;
    }
    wmma::store_matrix_sync(D, acc, bug == 2 ? 18 : 16, wmma::mem_row_major);
}

// ----------------------------------------------------------------------------
// host side

static int n_pass = 0, n_fail = 0;
static void check(bool cond, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf(cond ? "ok   " : "FAIL ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (cond) n_pass++; else n_fail++;
}
static uint64_t hash_bytes(uint64_t h, const void* p, size_t n) {
    const unsigned char* b = (const unsigned char*)p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float urand(void) {  // uniform in [-1, 1)
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}
template <typename T>
static T* to_device(const std::vector<T>& h) {
    T* d = NULL;
    cudaCheck(cudaMalloc((void**)&d, h.size() * sizeof(T)));
    cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
static const char* tname(const __nv_bfloat16*) { return "bf16"; }
static const char* tname(const __half*) { return "half"; }

// one GEMM on the device against a double reference on the CPU. The bound: the products of two bf16
// (8-bit significands) or two half (11-bit) values are exact in float (at most 22 bits of 24), so
// the only rounding is that of the K additions (K / 16 chunks of 16 products, chained through the
// float accumulator, plus C): a sum of n terms in float errs by at most gamma_n * sum |term|,
// gamma_n = n u / (1 - n u), u = 2^-24; relu is exact and alpha = 0.5 scales exactly. A load in the
// wrong major order, an ignored C or a lost chunk moves results by O(1), far above this bound.
template <typename T, typename LA, typename LB>
static uint64_t gemm_case(int M, int N, int K, bool with_c, int c_col, int d_col, float fillv, float alpha, int relu,
                          uint64_t h) {
    const bool a_col = std::is_same<LA, wmma::col_major>::value, b_col = std::is_same<LB, wmma::col_major>::value;
    std::vector<T> A((size_t)M * K), B((size_t)K * N);
    std::vector<double> Ar((size_t)M * K), Br((size_t)K * N), Cr((size_t)M * N, fillv);  // logical, row-major
    std::vector<float> C((size_t)M * N), D((size_t)M * N);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {
            T v = (T)urand();
            Ar[(size_t)m * K + k] = (double)(float)v;
            A[a_col ? (size_t)k * M + m : (size_t)m * K + k] = v;
        }
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) {
            T v = (T)urand();
            Br[(size_t)k * N + n] = (double)(float)v;
            B[b_col ? (size_t)n * K + k : (size_t)k * N + n] = v;
        }
    if (with_c)
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                float v = urand();
                Cr[(size_t)m * N + n] = v;
                C[c_col ? (size_t)n * M + m : (size_t)m * N + n] = v;
            }
    T* dA = to_device(A);
    T* dB = to_device(B);
    float* dC = with_c ? to_device(C) : NULL;
    float* dD = NULL;
    cudaCheck(cudaMalloc((void**)&dD, D.size() * sizeof(float)));  // the emulator fills it with NaN
    int warps = (M / 16) * (N / 16);
    LAUNCH((wmma_gemm_kernel<T, LA, LB>), (warps + 1) / 2, 64, 0, 0, dA, dB, dC, dD, M, N, K, c_col, d_col, fillv,
           alpha, relu);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaMemcpy(D.data(), dD, D.size() * sizeof(float), cudaMemcpyDeviceToHost));
    double worst = 0.0;  // error / bound
    int bad_at = -1;
    const double u = ldexp(1.0, -24), nt = K + 1, gamma = nt * u / (1.0 - nt * u);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double ref = Cr[(size_t)m * N + n], mag = fabs(ref);
            for (int k = 0; k < K; k++) {
                double p = Ar[(size_t)m * K + k] * Br[(size_t)k * N + n];
                ref += p;
                mag += fabs(p);
            }
            if (relu) ref = ref > 0.0 ? ref : 0.0;
            ref *= alpha;
            double got = D[d_col ? (size_t)n * M + m : (size_t)m * N + n];
            double bound = alpha * gamma * mag + 1e-30;
            double r = isfinite(got) ? fabs(got - ref) / bound : INFINITY;
            if (!(r <= worst)) { worst = r; bad_at = m * N + n; }
        }
    check(worst <= 1.0, "%s M=%d N=%d K=%d A %s B %s C %s D %s%s alpha %g%s: max |D - ref| / bound = %.3g (at %d)",
          tname((T*)NULL), M, N, K, a_col ? "col" : "row", b_col ? "col" : "row",
          with_c ? (c_col ? "loaded col" : "loaded row") : "filled", d_col ? "col" : "row", relu ? " relu" : "",
          alpha, with_c ? "" : (fillv != 0.0f ? " (fill + accumulate)" : ""), worst, bad_at);
    cudaCheck(cudaFree(dA));
    cudaCheck(cudaFree(dB));
    if (dC != NULL) cudaCheck(cudaFree(dC));
    cudaCheck(cudaFree(dD));
    return hash_bytes(h, D.data(), D.size() * sizeof(float));
}

// the NVIDIA-mapping kernel: count the elements of D that differ from the product (bound as above)
template <typename T>
static void nvidia_mapping_case(void) {
    std::vector<T> A(256), B(256);
    for (auto& v : A) v = (T)urand();
    for (auto& v : B) v = (T)urand();
    T* dA = to_device(A);
    T* dB = to_device(B);
    float* dD = NULL;
    cudaCheck(cudaMalloc((void**)&dD, 256 * sizeof(float)));
    LAUNCH(nvidia_mapping_kernel<T>, 1, 32, 0, 0, dA, dB, dD);
    cudaCheck(cudaGetLastError());
    std::vector<float> D(256);
    cudaCheck(cudaMemcpy(D.data(), dD, 256 * sizeof(float), cudaMemcpyDeviceToHost));
    int wrong = 0;
    const double gamma = 17 * ldexp(1.0, -24) / (1 - 17 * ldexp(1.0, -24));
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < 16; k++) {
                double p = (double)(float)A[m * 16 + k] * (double)(float)B[k * 16 + n];
                ref += p;
                mag += fabs(p);
            }
            if (!(fabs(D[m * 16 + n] - ref) <= gamma * mag)) wrong++;
        }
#ifdef LLM_EMU
    // a random permutation would leave about one element in place: demand most of them wrong
    check(wrong > 128, "%s: x[i] read with NVIDIA's accumulator mapping gives wrong results in the emulator "
                       "(%d of 256 elements wrong)", tname((T*)NULL), wrong);
#else
    check(wrong == 0, "%s: x[i] read with NVIDIA's accumulator mapping is right on this GPU (%d of 256 wrong)",
          tname((T*)NULL), wrong);
#endif
    cudaCheck(cudaFree(dA));
    cudaCheck(cudaFree(dB));
    cudaCheck(cudaFree(dD));
}

template <typename T>
static uint64_t run_type(uint64_t h) {
    typedef wmma::row_major R;
    typedef wmma::col_major C;
    h = gemm_case<T, R, R>(16, 16, 16, false, 0, 0, 0.0f, 1.0f, 0, h);  // one tile
    h = gemm_case<T, R, R>(16, 16, 16, false, 0, 0, 0.75f, 1.0f, 0, h);  // fill + accumulate
    h = gemm_case<T, R, C>(16, 16, 16, true, 1, 1, 0.0f, 1.0f, 0, h);
    h = gemm_case<T, R, R>(64, 48, 80, true, 0, 0, 0.0f, 1.0f, 0, h);
    h = gemm_case<T, R, C>(64, 48, 80, true, 1, 0, 0.0f, 0.5f, 0, h);
    h = gemm_case<T, C, R>(64, 48, 80, true, 0, 1, 0.0f, 1.0f, 1, h);
    h = gemm_case<T, C, C>(64, 48, 80, false, 0, 1, 0.25f, 0.5f, 0, h);
    h = gemm_case<T, C, R>(64, 48, 80, false, 0, 0, 0.0f, 0.5f, 1, h);
    nvidia_mapping_case<T>();
    return h;
}

static int run_bug(const char* mode) {
    const char* names[] = {"misaligned", "bad_ldm", "bad_ldm_float", "skip_mma", "lane_returns", "partial_warp",
                           "nonuniform", "smem_nosync", "smem_sync"};
    int bug = -1;
    for (int i = 0; i < 9; i++)
        if (strcmp(mode, names[i]) == 0) bug = i;
    if (bug < 0) {
        fprintf(stderr, "test_wmma: unknown case '%s'\n", mode);
        return 2;
    }
    std::vector<__nv_bfloat16> A(32 * 32, (__nv_bfloat16)1.0f);
    __nv_bfloat16* dA = to_device(A);
    __nv_bfloat16* dB = to_device(A);
    float* dD = NULL;
    cudaCheck(cudaMalloc((void**)&dD, 16 * 32 * sizeof(float)));
    LAUNCH(wmma_bug_kernel, 1, bug == 5 ? 16 : 32, 0, 0, dA, dB, dD, bug);
    cudaCheck(cudaDeviceSynchronize());
    if (bug == 8) {  // the fixed twin: every element of D is 16 (a tile of ones times a tile of ones: K = 16)
        std::vector<float> D(256);
        cudaCheck(cudaMemcpy(D.data(), dD, 256 * sizeof(float), cudaMemcpyDeviceToHost));
        int wrong = 0;
        for (float v : D) wrong += v != 16.0f;
        printf("smem_sync: %d of 256 elements differ from 16\n", wrong);
        return wrong == 0 ? 0 : 1;
    }
    printf("planted bug '%s' ran to the end without a report\n", mode);
    return 0;
}

#ifdef LLM_EMU
// mma.h's own bf16/half -> float conversion (written by hand so that mma_sync's hook calls nothing
// instrumented) against the toolkit's, for every bit pattern
static void check_conversions(void) {
    int bad_b = 0, bad_h = 0;
    for (uint32_t u = 0; u < 65536; u++) {
        uint16_t bits = (uint16_t)u;
        __nv_bfloat16 b;
        __half h;
        memcpy((void*)&b, &bits, 2);
        memcpy((void*)&h, &bits, 2);
        float rb = __bfloat162float(b), eb = wmma::emu_wmma_to_float(b);
        float rh = __half2float(h), eh = wmma::emu_wmma_to_float(h);
        // equal values with equal signs (so -0 is -0); any NaN for a NaN (the toolkit's half conversion
        // drops a NaN's sign, mma.h keeps it: a NaN's sign means nothing to the arithmetic)
        if (isnan(rb) ? !isnan(eb) : (rb != eb || signbit(rb) != signbit(eb))) bad_b++;
        if (isnan(rh) ? !isnan(eh) : (rh != eh || signbit(rh) != signbit(eh))) bad_h++;
    }
    check(bad_b == 0 && bad_h == 0, "mma.h's bf16/half to float equal the toolkit's for all 65536 bit patterns "
                                    "(%d bf16, %d half differ)", bad_b, bad_h);
}
#else
static void check_conversions(void) {}
#endif

static const char* USAGE =
    "[CASE]\n"
    "Tests of the emulated WMMA subset (dev/emu/mma.h), one case per run (dev/emu/test_wmma.sh runs them all):\n"
    "  correct     tile products and a tiled GEMM in bf16 and half against a double reference, and the\n"
    "              conversions (the default)\n"
    "  misaligned bad_ldm bad_ldm_float skip_mma lane_returns partial_warp nonuniform smem_nosync\n"
    "              planted bugs: each exits non-zero with its \"emu: error:\" line\n"
    "  smem_sync   smem_nosync's fix: right results, no racecheck report\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    const char* mode = argc > 1 ? argv[1] : "correct";
    if (strcmp(mode, "correct") != 0) return run_bug(mode);
    check_conversions();
    uint64_t h = 1469598103934665603ull;
    h = run_type<__nv_bfloat16>(h);
    h = run_type<__half>(h);
    printf("results %016llx\n", (unsigned long long)h);
    printf("wmma: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail == 0 ? 0 : 1;
}
