// test_fp8_gemm.cu: llm/precision/matmul_fp8.cuh's FP8 GEMM of every recipe against an FP64 GEMM of the
// UNquantized inputs, with an error bound derived from the formats' rounding.
//
// Cases: the three GEMMs of an FP8 linear layer with each recipe's scalings and formats,
//   forward  out = Q(x) Q(w)^T + bias [GELU]     x (M,K), w (N,K): E4M3 x E4M3
//   dgrad    out = Q(dy) Q(w^T)^T [* gelu'(pre)]  dy (M,K) E5M2, w stored (K,N), quantized transposed: E4M3
//   wgrad    out += Q(dy^T) Q(x^T)^T              both stored (K,M) / (K,N), quantized transposed
// recipes: per tensor (current scaling's scale), block (1x128 tiles of x/dy, 128x128 of w), mx (32-blocks,
// E8M0), on random shapes (fresh each run; FP8_GEMM_SEED=<n> repeats one) that include K and M, N that
// are not multiples of 128.
//
// The bound, per output element (i, j), with a, b the floatX inputs and A, B their dequantized values:
//   |A_ik - a_ik| <= da_ik = u |a_ik| + h / s + sat,   u = 2^-4 (E4M3) or 2^-3 (E5M2): round to nearest
//       with 3 or 2 mantissa bits; h / s: half the smallest subnormal (2^-10 E4M3, 2^-17 E5M2) over the
//       tile's scale s, for elements in the subnormal range; sat = max(0, |a| s - fp8_max) / s: MX's
//       power-of-two scales let a block's largest elements saturate (up to 12.5%); plus 2^-22 |a| for the
//       FP32 product decode(q) * fl(1/s).
//   |err_ij| <= sum_k (da_ik |b_jk| + |a_ik| db_jk + da_ik db_jk)      (the quantization)
//             + (K + 2) 2^-24 sum_k |A_ik| |B_jk|                     (FP32 accumulation, any order;
//               on a GPU at least 2^-13 sum_k |A||B|: Hopper's FP8 tensor cores keep about 14 bits of
//               their partial sums before cuBLASLt promotes them to FP32, DeepSeek-V3 sec. 3.3.2)
//             + 2^-8 |D_ij| (BF16) or 2^-24 |D_ij| (FP32)             (the one rounding to floatX)
//             + 2^-23 (|bias_j| + |out_ij|) when added.
// Checks: max err/bound <= 1, and mean err >= 0.1 * mean of the statistical size of the quantization
// error, sqrt(sum_k (da |b|)^2 + (|a| db)^2) / sqrt(3) (the rounding errors are independent and roughly
// uniform): an implementation that skips the quantization (error = the output rounding alone, 2^-9|D|)
// fails that, as does one whose dequantization scales are wrong (it fails the bound).
// Kernel builds also check: the quantizer kernels (incl. the transposed ones) and the cuBLASLt scale
// layouts bit for bit against the CPU reference; the path each GEMM takes against the emulated GPU's
// architecture (CUBLASLT_EMU_ARCH 90: per-tensor and block via cuBLASLt when K % 128 == 0, mx by the
// fallback; 100: mx via cuBLASLt, block by the fallback; 80: everything by the fallback); the cuBLASLt
// path against the fallback within one floatX ulp; a zero tile and an all-zero operand; the start-up
// description of each recipe's path.
// Built as build/test_fp8_gemm_cpu, build/test_fp8_gemm_emu and build/test_fp8_gemm_gpu.
#include "../llm/core/common.h"
#include "../llm/core/context.h"
#include "../llm/core/device.h"
#include "../llm/precision/fp8_matrix.cuh"
#include "../llm/precision/matmul_fp8.cuh"
#include "test_common.h"
#include "../llm/core/usage.h"
#include <time.h>
#include <vector>
#include <string>

// splitmix64
static uint64_t g_rng = 1;
static uint64_t rng_u64(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float rng_unit(void) { return (float)((rng_u64() >> 40) * (1.0 / 16777216.0)); }
static float rng_normal(void) {
    float u1 = rng_unit() + 1e-7f, u2 = rng_unit();
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

#if LLM_HAS_KERNELS && !defined(ENABLE_FP32)
static const int OUT_BF16 = 1;
#else
static const int OUT_BF16 = 0;
#endif

// n floats rounded to floatX (the GEMM's actual inputs)
static std::vector<float> round_floatx(const std::vector<float>& v) {
    std::vector<float> r(v.size());
    for (size_t i = 0; i < v.size(); i++) r[i] = (float)(floatX)v[i];
    return r;
}
// the accumulation's relative error unit (see the top)
static double acc_unit(int K) {
    double u = (K + 2) * 0x1p-24;
#if LLM_BUILD_CUDA
    if (u < 0x1p-13) u = 0x1p-13;
#endif
    return u;
}

// a random (rows, cols) matrix, elements ~ N(0,1) * scale, with some rows scaled by 2^-12 (so the
// per-tensor recipes put elements in the subnormal range) and an optional zero 1x128 tile
static std::vector<float> rand_matrix(int rows, int cols, float scale) {
    std::vector<float> v((size_t)rows * cols);
    for (int r = 0; r < rows; r++) {
        float rs = (r % 7 == 3) ? scale / 4096.0f : scale;
        for (int c = 0; c < cols; c++) v[(size_t)r * cols + c] = rng_normal() * rs;
    }
    return round_floatx(v);
}

static floatX* to_device(const std::vector<float>& v) {
    floatX* d = (floatX*)device_malloc(v.size() * sizeof(floatX) + 16, MEM_ACTIVATIONS);
    copy_floats_to_device(d, v.data(), v.size());
    return d;
}
static std::vector<float> from_device(const floatX* d, size_t n) {
    std::vector<float> v(n);
    copy_to_host_float(v.data(), d, n);
    return v;
}

// one operand: its floatX values as the GEMM sees them (rows, K), and the Fp8Matrix quantized from them
typedef struct {
    std::vector<float> val;  // (rows, K) the unquantized operand
    Fp8Matrix m;             // device
    std::vector<uint8_t> q;  // host copies of m after quantization
    std::vector<float> scale;
    std::vector<uint8_t> e8m0;
} Operand;

static const char* FMT[2] = {"E4M3", "E5M2"};

// quantize `stored` ((rows,K), or (K,rows) with transpose) into op; per-tensor: current scaling's scale
static void make_operand(Operand* op, const std::vector<float>& stored, int rows, int K, int transpose, int fmt,
                         Fp8Scaling s) {
    op->val.assign((size_t)rows * K, 0.0f);
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < K; k++)
            op->val[(size_t)r * K + k] = transpose ? stored[(size_t)k * rows + r] : stored[(size_t)r * K + k];
    fp8_matrix_alloc(&op->m, rows, K, fmt, s, MEM_WORKSPACE);
    floatX* x = to_device(stored);
    float ts = fp8_current_scale(fp8_amax_cpu(op->val.data(), op->val.size()), 1.0f, fmt);
    float* ts_d = (float*)device_malloc(sizeof(float), MEM_WORKSPACE);
    copy_to_device(ts_d, &ts, sizeof(float));
    fp8_matrix_quantize(&op->m, x, transpose, ts_d, llm_ctx.stream);
    device_synchronize();
    op->q.resize((size_t)rows * K);
    copy_to_host(op->q.data(), op->m.q, op->q.size());
    size_t ns = s == FP8_SCALE_TENSOR ? 1 : s == FP8_SCALE_1x128 ? (size_t)rows * fp8_ceil_div(K, 128)
              : s == FP8_SCALE_128x128 ? (size_t)fp8_ceil_div(rows, 128) * fp8_ceil_div(K, 128) : 0;
    op->scale.resize(ns);
    if (ns) copy_to_host(op->scale.data(), op->m.scale, ns * sizeof(float));
    size_t ne = s == FP8_SCALE_MX32 ? (size_t)rows * fp8_ceil_div(K, 32) : 0;
    op->e8m0.resize(ne);
    if (ne) copy_to_host(op->e8m0.data(), op->m.e8m0, ne);
#if LLM_HAS_KERNELS
    {   // the kernels against the CPU reference, bit for bit: codes, scales, cuBLASLt's layout
        Fp8Matrix h;
        memset(&h, 0, sizeof(h));
        h.rows = rows; h.K = K; h.fmt = fmt; h.scaling = s;
        std::vector<uint8_t> q((size_t)rows * K + 1), e((size_t)rows * fp8_ceil_div(K, 32) + 1);
        std::vector<float> sc((size_t)rows * fp8_ceil_div(K, 128) + 1);
        h.q = q.data(); h.scale = sc.data(); h.e8m0 = e.data();
        fp8_matrix_quantize_cpu(&h, stored.data(), transpose, &ts);
        size_t nl = fp8_lt_scale_count(rows, K, s) * fp8_lt_scale_size(s);
        std::vector<uint8_t> lt_ref(nl), lt_dev(nl);
        fp8_lt_scale_cpu(lt_ref.data(), &h);
        copy_to_host(lt_dev.data(), op->m.lt_scale, nl);
        int same = memcmp(q.data(), op->q.data(), op->q.size()) == 0 && memcmp(lt_ref.data(), lt_dev.data(), nl) == 0 &&
                   (ns == 0 || memcmp(sc.data(), op->scale.data(), ns * 4) == 0) &&
                   (ne == 0 || memcmp(e.data(), op->e8m0.data(), ne) == 0);
        static int reported = 0;
        if (!same || reported < 8) {
            check(same, "quantize kernel%s %s %s (%d, %d): codes, scales and cuBLASLt layout == CPU reference",
                  transpose ? " (transposed)" : "", fp8_scaling_name(s), FMT[fmt], rows, K);
            reported++;
        }
    }
#endif
    device_free(x);
    device_free(ts_d);
}

// the per-element quantization bound da (see the top) of operand element (r, k)
static double quant_bound(const Operand* op, int r, int k) {
    const Fp8Matrix* m = &op->m;
    double a = fabs((double)op->val[(size_t)r * m->K + k]);
    double u = m->fmt == FP8_E4M3 ? 0x1p-4 : 0x1p-3, h = m->fmt == FP8_E4M3 ? 0x1p-10 : 0x1p-17;
    double s;  // the multiplier of the quantizer (q = encode(x s))
    int nt = fp8_ceil_div(m->K, 128);
    switch (m->scaling) {
        case FP8_SCALE_TENSOR: s = op->scale[0]; break;
        case FP8_SCALE_1x128: s = op->scale[(size_t)r * nt + k / 128]; break;
        case FP8_SCALE_128x128: s = op->scale[(size_t)(r / 128) * nt + k / 128]; break;
        default: s = ldexp(1.0, 127 - (int)op->e8m0[(size_t)r * fp8_ceil_div(m->K, 32) + k / 32]); break;
    }
    double sat = a * s > fp8_max(m->fmt) ? (a * s - fp8_max(m->fmt)) / s : 0.0;
    return u * a + h / s + sat + 0x1p-22 * a;
}

typedef struct { double max_ratio, mean_err, mean_typ, mean_bound; size_t worst; double worst_err, worst_bound; } Stats;

// out vs the FP64 reference of a b^T (+ bias + old), with the bound; epi: 0 plain, 1 GELU (checks
// pre_gelu and out), 2 dGELU (times gelu'(dpre))
static Stats check_gemm(const char* what, const Operand* A, const Operand* B, const std::vector<float>& out,
                        const std::vector<float>* pre_gelu, const std::vector<float>* bias, const std::vector<float>* old,
                        const std::vector<float>* dpre) {
    int M = A->m.rows, N = B->m.rows, K = A->m.K;
    std::vector<double> da((size_t)M * K), db((size_t)N * K);
    for (int i = 0; i < M; i++) for (int k = 0; k < K; k++) da[(size_t)i * K + k] = quant_bound(A, i, k);
    for (int j = 0; j < N; j++) for (int k = 0; k < K; k++) db[(size_t)j * K + k] = quant_bound(B, j, k);
    double out_u = OUT_BF16 ? 0x1p-8 : 0x1p-24;
    Stats st = {0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double ref = 0, qb = 0, abs_sum = 0, typ = 0;
            for (int k = 0; k < K; k++) {
                double a = A->val[(size_t)i * K + k], b = B->val[(size_t)j * K + k];
                double ea = da[(size_t)i * K + k], eb = db[(size_t)j * K + k];
                ref += a * b;
                qb += ea * fabs(b) + fabs(a) * eb + ea * eb;
                abs_sum += (fabs(a) + ea) * (fabs(b) + eb);
                typ += ea * ea * b * b + a * a * eb * eb;
            }
            size_t o = (size_t)i * N + j;
            double bound = qb + acc_unit(K) * abs_sum;
            if (bias) { ref += (*bias)[j]; bound += 0x1p-23 * fabs((*bias)[j]); }
            if (old) { ref += (*old)[o]; bound += 0x1p-23 * fabs((*old)[o]); }
            double got = out[o];
            if (pre_gelu) got = (*pre_gelu)[o];          // the pre-activation is the product (+ bias)
            if (dpre) {                                   // out = product * gelu'(pre): compare the product
                double g = gelu_grad_scalar((*dpre)[o]);
                ref *= g; bound *= fabs(g); typ *= g * g;
            }
            bound += out_u * (fabs(ref) + bound) + 1e-30;
            double err = fabs(got - ref);
            double ratio = err != err ? 1e30 : err / bound;
            if (ratio > st.max_ratio) { st.max_ratio = ratio; st.worst = o; st.worst_err = err; st.worst_bound = bound; }
            st.mean_err += err; st.mean_bound += bound; st.mean_typ += sqrt(typ / 3.0);
        }
    }
    size_t n = (size_t)M * N;
    st.mean_err /= n; st.mean_bound /= n; st.mean_typ /= n;
    check(st.max_ratio <= 1.0, "%s: max err/bound %.3f (worst [%zu] err %.3g bound %.3g), mean err %.3g bound %.3g",
          what, st.max_ratio, st.worst, st.worst_err, st.worst_bound, st.mean_err, st.mean_bound);
    check(st.mean_err >= 0.1 * st.mean_typ, "%s: mean err %.3g >= 0.1 x the quantization's statistical size %.3g "
          "(the inputs were quantized)", what, st.mean_err, st.mean_typ);
    if (pre_gelu) {  // out = gelu(pre_gelu): GELU's slope is below 1.13; two floatX roundings
        double worst = 0;
        for (size_t o = 0; o < n; o++) {
            double p = (*pre_gelu)[o], g = gelu_scalar((float)p);
            double lim = 2 * out_u * (fabs(g) + 1.13 * fabs(p)) + 1e-30;
            double r = fabs(out[o] - g) / lim;
            if (!(r <= worst)) worst = r != r ? 1e30 : r;
        }
        check(worst <= 1.0, "%s: out = gelu(pre_gelu): max err/bound %.3f", what, worst);
    }
    return st;
}

typedef struct { const char* name; Fp8Scaling sx, sw, sdy; } Recipe;
static const Recipe RECIPES[3] = {{"per-tensor", FP8_SCALE_TENSOR, FP8_SCALE_TENSOR, FP8_SCALE_TENSOR},
                                  {"block", FP8_SCALE_1x128, FP8_SCALE_128x128, FP8_SCALE_1x128},
                                  {"mx", FP8_SCALE_MX32, FP8_SCALE_MX32, FP8_SCALE_MX32}};

#if LLM_BUILD_EMU
static int emu_arch(void) {
    const char* v = getenv("CUBLASLT_EMU_ARCH");
    return v != NULL && v[0] ? atoi(v) : 90;
}
#endif
#if LLM_HAS_KERNELS
// the path the emulated GPU (or, on a real one, unknown: -1) should take
static int expected_path(Fp8Scaling sa, Fp8Scaling sb, int K) {
#if LLM_BUILD_EMU
    int arch = emu_arch();
    if (arch < 89) return FP8_GEMM_FALLBACK;
    if (sa == FP8_SCALE_TENSOR) return FP8_GEMM_CUBLASLT;
    if (sa == FP8_SCALE_MX32) return arch >= 100 && K % 32 == 0 ? FP8_GEMM_CUBLASLT : FP8_GEMM_FALLBACK;
    (void)sb;
    return arch == 90 && K % 128 == 0 ? FP8_GEMM_CUBLASLT : FP8_GEMM_FALLBACK;
#else
    (void)sa; (void)sb; (void)K;
    return -1;
#endif
}
static const char* PATH[3] = {"CPU", "cuBLASLt", "fallback"};
#endif

// one GEMM through matmul_fp8 (both paths in kernel builds); returns out on the host
static std::vector<float> run_gemm(const char* what, const Operand* A, const Operand* B, const std::vector<float>* bias,
                                   const std::vector<float>* old, std::vector<float>* pre_gelu, const std::vector<float>* dpre) {
    int M = A->m.rows, N = B->m.rows;
    size_t n = (size_t)M * N;
    std::vector<float> init = old ? *old : std::vector<float>(n, NAN);
    floatX* out = to_device(init);
    floatX* pre = pre_gelu ? to_device(std::vector<float>(n, NAN)) : NULL;
    floatX* bias_d = bias ? to_device(*bias) : NULL;
    floatX* dpre_d = dpre ? to_device(*dpre) : NULL;
    int path = matmul_fp8(out, pre, dpre_d, &A->m, &B->m, bias_d, old != NULL, llm_ctx.stream);
    device_synchronize();
    std::vector<float> res = from_device(out, n);
    if (pre_gelu) *pre_gelu = from_device(pre, n);
#if LLM_HAS_KERNELS
    int want = expected_path(A->m.scaling, B->m.scaling, A->m.K);
    if (want >= 0) check(path == want, "%s: path %s (expected %s)", what, PATH[path], PATH[want]);
    // the other path: the fallback when cuBLASLt ran (and cuBLASLt's when the fallback was forced, no)
    if (path == FP8_GEMM_CUBLASLT) {
        copy_floats_to_device(out, init.data(), n);
        llm_ctx.fp8_gemm_fallback = 1;
        int p2 = matmul_fp8(out, pre, dpre_d, &A->m, &B->m, bias_d, old != NULL, llm_ctx.stream);
        llm_ctx.fp8_gemm_fallback = 0;
        device_synchronize();
        std::vector<float> fb = from_device(out, n);
        // one floatX ulp of the larger, or (for results that cancel) the FP32 sums' own uncertainty
        double worst = 0; size_t wi = 0;
        int K = A->m.K;
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < N; j++) {
                size_t o = (size_t)i * N + j;
                double mag = fmax(fabs(res[o]), fabs(fb[o]));
                double ulp = mag > 0 ? ldexp(1.0, (int)floor(log2(mag)) - (OUT_BF16 ? 7 : 23)) : 0;
                double s = 0;
                for (int k = 0; k < K; k++) s += fabs(A->val[(size_t)i * K + k] * B->val[(size_t)j * K + k]);
                double lim = ulp + 2.6 * acc_unit(K) * s + 1e-30;  // both paths' sums may err, |A| <= 1.3 |a|
                double r = fabs(res[o] - fb[o]) / lim;
                if (!(r <= worst)) { worst = r != r ? 1e30 : r; wi = o; }
            }
        }
        check(p2 == FP8_GEMM_FALLBACK && worst <= 1.0, "%s: cuBLASLt vs fallback within one floatX ulp: max diff/ulp %.3f at [%zu]",
              what, worst, wi);
    }
#else
    (void)what; (void)path;
#endif
    device_free(out);
    if (pre) device_free(pre);
    if (bias_d) device_free(bias_d);
    if (dpre_d) device_free(dpre_d);
    return res;
}

static void free_operand(Operand* op) { fp8_matrix_free(&op->m); }

// every GEMM of one recipe at one shape
static void test_recipe(const Recipe* rc, int M, int N, int K, int e4m3_grads) {
    char what[160];
    int gf = e4m3_grads ? FP8_E4M3 : FP8_E5M2;
    std::vector<float> x = rand_matrix(M, K, 1.0f), w = rand_matrix(N, K, 0.05f), dy = rand_matrix(M, K, 1e-4f);
    std::vector<float> xt = rand_matrix(K, N, 1.0f);  // wgrad's x, stored (tokens K, features N)
    std::vector<float> bias = rand_matrix(1, N, 0.5f), old = rand_matrix(M, N, 1e-2f);
    std::vector<float> pre_gelu, dpre = rand_matrix(M, N, 1.0f);
    Operand A, B;
    // forward: x (M,K) x w (N,K), + bias; then with GELU
    make_operand(&A, x, M, K, 0, FP8_E4M3, rc->sx);
    make_operand(&B, w, N, K, 0, FP8_E4M3, rc->sw);
    snprintf(what, sizeof(what), "%s forward E4M3 x E4M3 M=%d N=%d K=%d + bias", rc->name, M, N, K);
    std::vector<float> out = run_gemm(what, &A, &B, &bias, NULL, NULL, NULL);
    check_gemm(what, &A, &B, out, NULL, &bias, NULL, NULL);
    snprintf(what, sizeof(what), "%s forward E4M3 x E4M3 M=%d N=%d K=%d + bias, GELU", rc->name, M, N, K);
    out = run_gemm(what, &A, &B, &bias, NULL, &pre_gelu, NULL);
    check_gemm(what, &A, &B, out, &pre_gelu, &bias, NULL, NULL);
    free_operand(&A); free_operand(&B);
    // dgrad: dy (M,K) x w^T, w stored (K,N) (the layer's (out, in) weight), quantized transposed; then dGELU
    make_operand(&A, dy, M, K, 0, gf, rc->sdy);
    make_operand(&B, w, N, K, 1, FP8_E4M3, rc->sw);  // w's (N*K) values read as (K, N)
    snprintf(what, sizeof(what), "%s dgrad %s x E4M3 (transposed w) M=%d N=%d K=%d", rc->name, FMT[gf], M, N, K);
    out = run_gemm(what, &A, &B, NULL, NULL, NULL, NULL);
    check_gemm(what, &A, &B, out, NULL, NULL, NULL, NULL);
    snprintf(what, sizeof(what), "%s dgrad %s x E4M3 M=%d N=%d K=%d, dGELU", rc->name, FMT[gf], M, N, K);
    out = run_gemm(what, &A, &B, NULL, NULL, NULL, &dpre);
    check_gemm(what, &A, &B, out, NULL, NULL, NULL, &dpre);
    free_operand(&A); free_operand(&B);
    // wgrad: dy^T x x^T, both stored (K, M) / (K, N) (K = the tokens), accumulated into out
    make_operand(&A, dy, M, K, 1, gf, rc->sdy);
    make_operand(&B, xt, N, K, 1, FP8_E4M3, rc->sx);
    snprintf(what, sizeof(what), "%s wgrad %s x E4M3 (both transposed) M=%d N=%d K=%d, accumulate", rc->name, FMT[gf], M, N, K);
    out = run_gemm(what, &A, &B, NULL, &old, NULL, NULL);
    check_gemm(what, &A, &B, out, NULL, NULL, &old, NULL);
    free_operand(&A); free_operand(&B);
}

// zeros: an all-zero operand (per-tensor scale 1) and a zero tile / block give exact zeros, no NaN
static void test_zeros(void) {
    int M = 64, N = 32, K = 256;
    for (int r = 0; r < 3; r++) {
        const Recipe* rc = &RECIPES[r];
        std::vector<float> x = rand_matrix(M, K, 1.0f), w((size_t)N * K, 0.0f);
        for (int i = 0; i < M; i++) for (int k = 128; k < 256; k++) x[(size_t)i * K + k] = 0.0f;  // the second K tile
        for (int j = 0; j < N; j++) for (int k = 0; k < 128; k++) w[(size_t)j * K + k] = 1.0f;   // w nonzero only there
        Operand A, B;
        make_operand(&A, x, M, K, 0, FP8_E4M3, rc->sx);
        make_operand(&B, w, N, K, 0, FP8_E4M3, rc->sw);
        std::vector<float> zero_w((size_t)N * K, 0.0f);
        Operand Z;
        make_operand(&Z, zero_w, N, K, 0, FP8_E4M3, rc->sw);
        char what[128];
        snprintf(what, sizeof(what), "%s zero tile of x", rc->name);
        std::vector<float> out = run_gemm(what, &A, &B, NULL, NULL, NULL, NULL);
        check_gemm(what, &A, &B, out, NULL, NULL, NULL, NULL);
        snprintf(what, sizeof(what), "%s all-zero w", rc->name);
        out = run_gemm(what, &A, &Z, NULL, NULL, NULL, NULL);
        int zeros = 1;
        for (float v : out) zeros &= v == 0.0f;
        float s0 = rc->sw == FP8_SCALE_MX32 ? 0.0f : Z.scale[0];
        check(zeros && (rc->sw == FP8_SCALE_MX32 ? Z.e8m0[0] == 0 : s0 == 1.0f),
              "%s: an all-zero operand gives exact zeros (scale %s)", what, rc->sw == FP8_SCALE_MX32 ? "E8M0 0" : "1");
        free_operand(&A); free_operand(&B); free_operand(&Z);
    }
}

static void test_describe(void) {
    char buf[256];
    for (int r = 0; r < 3; r++) {
        const Recipe* rc = &RECIPES[r];
        matmul_fp8_describe(buf, sizeof(buf), 1024, 1024, 1024, rc->sx, rc->sw, FP8_E4M3, FP8_E4M3);
        printf("     describe %s forward: %s\n", rc->name, buf);
#if LLM_BUILD_EMU
        int want = expected_path(rc->sx, rc->sw, 1024);
        check(strstr(buf, want == FP8_GEMM_CUBLASLT ? "cuBLASLt FP8" : "fallback") != NULL,
              "describe %s on emulated sm_%d: '%s' names the %s path", rc->name, emu_arch(), buf, PATH[want]);
#endif
    }
#if LLM_BUILD_EMU
    matmul_fp8_describe(buf, sizeof(buf), 1024, 1024, 1024, FP8_SCALE_TENSOR, FP8_SCALE_TENSOR, FP8_E5M2, FP8_E5M2);
    check(strstr(buf, "fallback") != NULL, "describe E5M2 x E5M2 (no such cuBLASLt kernel): '%s'", buf);
#endif
}

static const char* USAGE =
    "(no arguments)\n"
    "Tests the FP8 GEMM of every recipe (llm/precision/matmul_fp8.cuh) against an FP64 GEMM of the unquantized\n"
    "inputs, within a bound from the formats' rounding, on random shapes.\n"
    "  FP8_GEMM_SEED=N     (environment) repeats a run's shapes and inputs (default: from the clock; printed)\n"
    "  CUBLASLT_EMU_ARCH=  (environment, emulated build) the sm the emulated cuBLASLt acts as, e.g. 89 (default 90)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    (void)argc; (void)argv;
    const char* seed_env = getenv("FP8_GEMM_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 10) : (uint64_t)time(NULL);
    g_rng = seed;
    printf("test_fp8_gemm: seed %llu (FP8_GEMM_SEED=%llu repeats it), %s output%s\n", (unsigned long long)seed,
           (unsigned long long)seed, PRECISION_MODE,
#if LLM_BUILD_EMU
           getenv("CUBLASLT_EMU_ARCH") ? ", CUBLASLT_EMU_ARCH set" : ", emulated sm_90"
#else
           ""
#endif
    );
    context_init();
    test_describe();
    // shapes: K a multiple of 128 (block recipes' cuBLASLt path), K a multiple of 32 only, and M, N not
    // multiples of 128; random within those classes
    int shapes[3][3];
    int ms[4] = {64, 136, 200, 72}, ns[4] = {32, 48, 136, 96};
    shapes[0][0] = ms[rng_u64() % 4]; shapes[0][1] = ns[rng_u64() % 4]; shapes[0][2] = 128 * (2 + (int)(rng_u64() % 2));
    shapes[1][0] = ms[rng_u64() % 4]; shapes[1][1] = ns[rng_u64() % 4]; shapes[1][2] = 160 + 32 * (int)(rng_u64() % 2);
    shapes[2][0] = 136; shapes[2][1] = 200; shapes[2][2] = 256;  // two 128-blocks each way (block order matters)
    for (int s = 0; s < 3; s++)
        for (int r = 0; r < 3; r++) test_recipe(&RECIPES[r], shapes[s][0], shapes[s][1], shapes[s][2], 0);
    test_recipe(&RECIPES[0], 64, 48, 256, 1);  // --fp8-format e4m3: E4M3 gradients
    test_zeros();
    context_free();
    return test_summary("test_fp8_gemm");
}
