// kernel_check.h: helpers of the kernel-vs-reference harness (test/test_kernels.cu): fresh random
// inputs (the seed is printed), device buffers poisoned with NaN bytes before each kernel runs so
// unwritten outputs show, floatX uploads/downloads, and comparison with a tolerance set by precision.
//
// In BF16 builds the CPU reference runs on the same bf16-rounded inputs as the kernel (round_floatX),
// so the comparison measures only the kernel's own rounding, not the rounding of its inputs.
//
// Where a kernel and its CPU reference compute the same arithmetic (the same helper, the same constant),
// their agreement says nothing about the constant. Those families also compare the kernel and the
// reference with a float64 evaluation written in the test from the paper's formula, against a
// per-element bound on the error of one float computation (kc_check_bound). The bounds use:
// - u = 2^-24, the unit roundoff of FP32 arithmetic (KC_U32), and 2^-8 for a value stored in bf16
//   (8 significant bits, round to nearest: relative error <= 2^-8; KC_UX is the build's floatX: 2^-11
//   in FP16, plus KC_AX = 2^-25 absolute for its subnormals);
// - kc_sum_err(n, a): the error of a float sum of n terms with sum |term| = a, in any order: (n-1) u a,
//   the first-order worst case (Higham, Accuracy and Stability of Numerical Algorithms, 2002, sec. 4.2),
//   and for n > 64 the probabilistic bound of Higham & Mary (A new approach to probabilistic rounding
//   error analysis, SIAM J. Sci. Comput. 41(5), 2019, sec. 3): lambda sqrt(n) u a with lambda = 8, which holds with probability >= 1 - 2n exp(-32)
//   (> 1 - 1e-9 for n <= 10^4) when rounding errors are independent and of mean zero, as they are on
//   random data (not on adversarial data, which these tests do not use).
#pragma once
#include "../llm/core/common.h"
#include "../llm/core/device.h"
#include "../llm/core/rand.h"
#include "test_common.h"
#include <vector>

static Rng g_rng;

// KC_BF16: floatX is a 16-bit type (BF16, or FP16 with KC_FP16 = 1 too): the tolerances of a value
// stored in 16 bits apply (KC_UX, KC_AX below)
#if LLM_HAS_KERNELS && !defined(ENABLE_FP32)
static const int KC_BF16 = 1;
#else
static const int KC_BF16 = 0;
#endif
#if LLM_HAS_KERNELS && defined(ENABLE_FP16)
static const int KC_FP16 = 1;
#else
static const int KC_FP16 = 0;
#endif

// n draws of N(0, std^2), rounded to what floatX can hold
static std::vector<float> kc_randn(size_t n, float std) {
    std::vector<float> v(n);
    rng_normal(&g_rng, v.data(), n, 0.0f, std);
    for (size_t i = 0; i < n; i++) v[i] = (float)(floatX)v[i];
    return v;
}

static std::vector<int> kc_randint(size_t n, int hi) {
    std::vector<int> v(n);
    for (size_t i = 0; i < n; i++) v[i] = (int)(rng_u64(&g_rng) % (uint64_t)hi);
    return v;
}

// device memory filled with 0xFF bytes (NaN in float and bf16)
template <typename T>
static T* kc_alloc_poisoned(size_t n) {
    T* d = (T*)device_malloc(n * sizeof(T), MEM_WORKSPACE);
    cudaCheck(cudaMemset(d, 0xFF, n * sizeof(T)));
    return d;
}

static void kc_poison(void* d, size_t bytes) { cudaCheck(cudaMemset(d, 0xFF, bytes)); }

// host floats -> a new device floatX buffer
static floatX* kc_upload(const std::vector<float>& h) {
    floatX* d = (floatX*)device_malloc(h.size() * sizeof(floatX), MEM_WORKSPACE);
    copy_floats_to_device(d, h.data(), h.size());
    return d;
}

template <typename T>
static T* kc_upload_raw(const std::vector<T>& h) {
    T* d = (T*)device_malloc(h.size() * sizeof(T), MEM_WORKSPACE);
    copy_to_device(d, h.data(), h.size() * sizeof(T));
    return d;
}

// a device floatX buffer -> host floats
static std::vector<float> kc_download(const floatX* d, size_t n) {
    std::vector<float> h(n);
    copy_to_host_float(h.data(), d, n);
    return h;
}

// a device buffer copied as it is (bits unchanged: for FP32 state and for determinism checks)
template <typename T>
static std::vector<T> kc_download_raw(const T* d, size_t n) {
    std::vector<T> h(n);
    copy_to_host(h.data(), d, n * sizeof(T));
    return h;
}
static std::vector<float> kc_download_f32(const float* d, size_t n) { return kc_download_raw(d, n); }

// the largest |x| of v (the scale that tolerances are stated against)
static float kc_max_abs(const std::vector<float>& v) {
    float m = 0.0f;
    for (float x : v) m = fmaxf(m, fabsf(x));
    return m;
}

// compare with |got - want| <= atol + rtol |want|, the pair chosen by the build's precision
static int kc_compare(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                      float atol32, float rtol32, float atol16, float rtol16) {
    if (got.size() != want.size()) return check(0, "%s: size %zu vs %zu", what, got.size(), want.size());
    return KC_BF16 ? check_close(what, got.data(), want.data(), got.size(), atol16, rtol16)
                   : check_close(what, got.data(), want.data(), got.size(), atol32, rtol32);
}

// ----------------------------------------------------------------------------
// float64 references and per-element error bounds (see the top of this file)

static const double KC_U32 = 1.0 / 16777216.0;                      // 2^-24
// a stored floatX: relative 2^-8 (BF16: 8 significant bits), 2^-11 (FP16: 11) or 2^-24 (FP32); and,
// FP16 only, an absolute 2^-25: below 2^-14 FP16 is subnormal, spaced 2^-24 apart, so round to nearest
// is off by up to half that whatever the value (BF16's subnormals start at 2^-126: nothing here is there)
static const double KC_UX = KC_FP16 ? 1.0 / 2048.0 : (KC_BF16 ? 1.0 / 256.0 : 1.0 / 16777216.0);
static const double KC_AX = KC_FP16 ? 1.0 / 33554432.0 : 0.0;

static double kc_sum_err(double n, double abs_sum) {
    double k = n <= 1.0 ? 0.0 : fmin(n - 1.0, 8.0 * sqrt(n));
    return k * KC_U32 * abs_sum;
}

// a float result rounded once more to floatX: its bound grows by one rounding of the (inexact) value
static double kc_round_x(double bound32, double value) {
    return KC_BF16 ? bound32 + KC_UX * (fabs(value) + bound32) + KC_AX : bound32;
}

// |got - want| <= bound elementwise (NaN fails). want: a float64 evaluation (or a float reference, with
// bound covering both sides). Prints the largest ratio |got - want| / bound and where it is.
template <class W>
static int kc_check_bound(const char* what, const std::vector<float>& got, const std::vector<W>& want,
                          const std::vector<double>& bound) {
    if (got.size() != want.size() || got.size() != bound.size())
        return check(0, "%s: sizes %zu, %zu, %zu", what, got.size(), want.size(), bound.size());
    double worst = 0.0;
    size_t wi = 0;
    int bad = 0;
    for (size_t i = 0; i < got.size(); i++) {
        double err = fabs((double)got[i] - (double)want[i]);
        if (!(err <= bound[i])) bad = 1;
        double ratio = isnan(err) ? INFINITY : (err == 0.0 ? 0.0 : err / bound[i]);
        if (ratio > worst) { worst = ratio; wi = i; }
    }
    size_t n = got.size();
    return check(!bad, "%s: n=%zu max |err|/bound = %.3g at [%zu] %.9g vs %.12g (bound %.3g)", what, n, worst, wi,
                 n ? got[wi] : 0.0f, n ? (double)want[wi] : 0.0, n ? bound[wi] : 0.0);
}
