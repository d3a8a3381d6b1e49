// dev/cuda/matmul.cu: the linear layers of GPT-2 (llm/ops/matmul.cuh) on the GPU: the versions of the
// bias-gradient reduction side by side, the cuBLASLt launchers the model calls (matmul_forward,
// matmul_backward) checked against the CPU reference (matmul_forward_naive_cpu /
// matmul_backward_naive_cpu) and timed at GPT-2 124M's shapes in TFLOP/s, and the device's dense BF16
// GEMM peak, which scripts/gpu_check.sh takes as the denominator of the model's MFU.
//
// bias gradient (dbias (OC) += the column sums of dout (BT,OC)):
//   version 1: one thread per column walks all BT rows: coalesced across a warp, but only OC threads
//              (OC = 768: 3 blocks, most SMs idle), each a long serial chain of loads
//   version 2: two stages (llm/ops/matmul.cuh): blocks of 8 warps own 4 x 16 bytes of columns and a
//              split of the rows, FP32 partial sums to scratch; then one thread per column adds the
//              splits in order. The split depends only on the shape: deterministic
// products (cuBLASLt), the model's layers with the model's epilogues (B*T = BT rows):
//   qkv      C -> 3C   + bias
//   attproj  C -> C    + bias
//   fc       C -> 4C   + bias, GELU (the pre-activation kept for the backward)
//   fcproj   4C -> C   + bias; its backward multiplies dinp by gelu'(fc's pre-activation)
//   lm_head  C -> Vp   no bias
//   FLOPs: forward 2 BT C OC; backward 4 BT C OC (dinp and dweight; dbias and GELU not counted)
// peak: an N^3 BF16 GEMM (N = 8192, FP32 accumulation) by cuBLASLt, the best of the four transpose
//   combinations, printed as "peak <X> TFLOP/s (dense bf16 GEMM 8192^3)"
//
// GPU:      make dev-cuda (dev/cuda/cuda.mk), then
//           ./build/cuda/matmul [BT C Vp [N]]   (default 65536 768 50304 8192: GPT-2 124M at B=64, T=1024)
//           (make dev-cuda PRECISION=FP32 for FP32 activations; the peak GEMM is BF16 either way)
// emulated: make dev-cuda-emu, then ./build/cuda_emu/matmul   (default 64 64 256 128; CPU times)
//
// The checks run at BT = min(BT, 256) rows and Vp = min(Vp, 1024) (the CPU reference is plain loops),
// on inputs scaled so that every output is O(1) (or O(sqrt(BT)) for the sums over rows), with loose
// tolerances (BF16: one rounding of the output and slack; the tight bounds are in
// test/test_matmul.cu). The benchmarks fill their inputs on the device (dout of lm_head alone is
// 3.3e9 elements). Timing: the median over runs, cudaEvents around the timed call only, L2 flushed
// by writing 128 MiB before each run.
#include "common.h"
#include "../../llm/ops/matmul.cuh"

// ----------------------------------------------------------------------------
// bias gradient, version 1: one thread per column. Per element: reads 1 floatX.

__global__ void matmul_dbias_kernel1(floatX* dbias /*(OC)*/, const floatX* dout /*(BT,OC)*/, int BT, int OC) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= OC) return;
    float s = 0.0f;
    for (int row = 0; row < BT; row++) s += (float)dout[(size_t)row * OC + col];
    dbias[col] = (floatX)((float)dbias[col] + s);
}

// dbias += column sums of dout; scratch: MATMUL_DBIAS_MAX_SPLITS * OC floats (version 2)
static void dbias_version(int version, floatX* dbias, float* scratch, const floatX* dout, int BT, int OC) {
    if (version == 1) {
        LAUNCH(matmul_dbias_kernel1, dim3(ceil_div(OC, 256)), dim3(256), 0, (cudaStream_t)0, dbias, dout, BT, OC);
    } else {
        matmul_dbias(dbias, scratch, dout, BT, OC, 0);
    }
}

// ----------------------------------------------------------------------------
// inputs made on the device: x[i] uniform in [-scale, scale), a splitmix64 hash of (seed, i)

template <class T>
__global__ void fill_uniform_kernel(T* x, size_t n, unsigned long long seed, float scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned long long z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    x[i] = (T)(scale * ((float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f));
}

template <class T>
static T* alloc_uniform(size_t n, unsigned long long seed, float scale) {
    T* d = (T*)device_malloc(n * sizeof(T), MEM_WORKSPACE);
    LAUNCH(fill_uniform_kernel<T>, dim3((unsigned)ceil_div_sz(n, 256)), dim3(256), 0, (cudaStream_t)0, d, n, seed,
           scale);
    return d;
}

// ----------------------------------------------------------------------------
// the layers of GPT-2

typedef struct {
    const char* name;
    int Cin, OC;
    int bias;   // with a bias (forward) and a bias gradient (backward)
    int gelu;   // forward: out = gelu(inp @ w^T + b), the pre-activation kept (fc)
    int dgelu;  // backward: inp was gelu(pre), so dinp is multiplied by gelu'(pre) (fcproj)
} Layer;

#define NUM_LAYERS 5
static void model_layers(Layer* layers, int C, int Vp) {
    const Layer l[NUM_LAYERS] = {
        {"qkv", C, 3 * C, 1, 0, 0},
        {"attproj", C, C, 1, 0, 0},
        {"fc", C, 4 * C, 1, 1, 0},
        {"fcproj", 4 * C, C, 1, 0, 1},
        {"lm_head", C, Vp, 0, 0, 0},
    };
    for (int i = 0; i < NUM_LAYERS; i++) layers[i] = l[i];
}

// loose tolerances: |got - want| <= tol (scale + |want|), scale the typical size of the values.
// BF16: one rounding of the output (2^-9 relative) and, on the GELU paths, of the pre-activation.
// FP32: the summation order; on the GELU paths (gelu: 1) also the GPU's approximations of tanh
// (tanh.approx under --use_fast_math, about 2^-11) and cuBLASLt's own GELU / dGELU epilogues
static int check_close(const char* what, const std::vector<float>& got, const std::vector<float>& want, float scale,
                       int gelu) {
    float tol = sizeof(floatX) == 2 ? 2e-2f : (gelu ? 5e-3f : 1e-3f);
    return close_enough(what, got, want, tol * scale, tol);
}

// matmul_forward, matmul_backward and the dbias versions of one layer at BT rows against the reference
static int check_layer(Rng* rng, const Layer& L, int BT, float* d_scratch) {
    int Cin = L.Cin, OC = L.OC, ok = 1;
    size_t nin = (size_t)BT * Cin, nw = (size_t)OC * Cin, nout = (size_t)BT * OC;
    char what[96];
    // forward: inp ~ N(0,1) (or gelu of that), w ~ N(0, 1/Cin): outputs ~ N(0,1)
    std::vector<float> pre_in, inp;
    if (L.dgelu) {
        pre_in = randn_floatX(rng, nin, 0.0f, 1.0f);
        inp.resize(nin);
        for (size_t i = 0; i < nin; i++) inp[i] = (float)(floatX)gelu_scalar(pre_in[i]);
    } else {
        inp = randn_floatX(rng, nin, 0.0f, 1.0f);
    }
    std::vector<float> w = randn_floatX(rng, nw, 0.0f, 1.0f / sqrtf((float)Cin));
    std::vector<float> bias = L.bias ? randn_floatX(rng, OC, 0.0f, 0.1f) : std::vector<float>();
    std::vector<float> out(nout), pre(L.gelu ? nout : 0);
    matmul_forward_naive_cpu(out.data(), L.gelu ? pre.data() : NULL, inp.data(), w.data(),
                             L.bias ? bias.data() : NULL, BT, Cin, OC);
    floatX* d_inp = upload(inp);
    floatX* d_w = upload(w);
    floatX* d_b = L.bias ? upload(bias) : NULL;
    floatX* d_out = alloc_poisoned(nout);
    floatX* d_pre = L.gelu ? alloc_poisoned(nout) : NULL;
    matmul_forward(d_out, d_pre, d_inp, d_w, d_b, BT, Cin, OC, 0);
    snprintf(what, sizeof(what), "%s forward", L.name);
    ok &= check_close(what, download(d_out, nout), out, 1.0f, L.gelu);
    if (L.gelu) ok &= check_close("     pre_gelu", download(d_pre, nout), pre, 1.0f, 0);

    // backward: dout ~ N(0,1); dweight and dbias start from N(0,1) and gain sums of BT terms
    std::vector<float> dout = randn_floatX(rng, nout, 0.0f, 1.0f), dw0 = randn_floatX(rng, nw, 0.0f, 1.0f);
    std::vector<float> db0 = L.bias ? randn_floatX(rng, OC, 0.0f, 1.0f) : std::vector<float>();
    std::vector<float> dinp(nin), dw = dw0, db = db0;
    matmul_backward_naive_cpu(dinp.data(), dw.data(), L.bias ? db.data() : NULL, dout.data(), inp.data(), w.data(),
                              L.dgelu ? pre_in.data() : NULL, BT, Cin, OC);
    floatX* d_dout = upload(dout);
    floatX* d_dinp = alloc_poisoned(nin);
    floatX* d_dw = upload(dw0);
    floatX* d_db = L.bias ? upload(db0) : NULL;
    floatX* d_pre_in = L.dgelu ? upload(pre_in) : NULL;
    matmul_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_scratch, d_pre_in, BT, Cin, OC, 0);
    float rows = sqrtf((float)BT);
    snprintf(what, sizeof(what), "%s backward dinp", L.name);
    ok &= check_close(what, download(d_dinp, nin), dinp, sqrtf((float)OC / Cin), L.dgelu);
    ok &= check_close("     dweight", download(d_dw, nw), dw, rows, 0);
    if (L.bias) ok &= check_close("     dbias", download(d_db, OC), db, rows, 0);

    // the bias-gradient versions alone, on the same dout
    for (int v = 1; L.bias && v <= 2; v++) {
        upload_to(d_db, db0);
        dbias_version(v, d_db, d_scratch, d_dout, BT, OC);
        snprintf(what, sizeof(what), "%s dbias version %d", L.name, v);
        ok &= check_close(what, download(d_db, OC), db, rows, 0);
    }
    floatX* bufs[] = {d_inp, d_w, d_b, d_out, d_pre, d_dout, d_dinp, d_dw, d_db, d_pre_in};
    for (floatX* p : bufs) device_free(p);
    return ok;
}

// ----------------------------------------------------------------------------
// the peak: TFLOP/s of an N^3 BF16 GEMM, the best of the four transpose combinations. A timed run is
// ITERS products back to back, so that the host's work per call (descriptors, the heuristic query)
// overlaps the GPU's.

static double gemm_peak_tflops(int N, int reps) {
    const int ITERS = 5;
    size_t nn = (size_t)N * N;
    __nv_bfloat16* a = alloc_uniform<__nv_bfloat16>(nn, 11, 1.0f);
    __nv_bfloat16* b = alloc_uniform<__nv_bfloat16>(nn, 12, 1.0f);
    __nv_bfloat16* c = alloc_uniform<__nv_bfloat16>(nn, 13, 1.0f);
    const char* names[4] = {"N,N", "T,N", "N,T", "T,T"};
    double best = 0.0;
    for (int t = 0; t < 4; t++) {
        MatmulLtArgs g;
        memset(&g, 0, sizeof(g));
        g.m = g.n = g.k = N;
        g.batch = 1;
        g.a = a; g.a_type = CUDA_R_16BF; g.trans_a = (t & 1) != 0; g.lda = N;
        g.b = b; g.b_type = CUDA_R_16BF; g.trans_b = (t & 2) != 0; g.ldb = N;
        g.c = c; g.c_type = CUDA_R_16BF; g.ldc = N;
        g.d = c; g.d_type = CUDA_R_16BF; g.ldd = N;
        g.alpha = 1.0f;
        g.beta = 0.0f;
        auto gemm = [&] {
            if (matmul_cublaslt_call(&g, 0) != CUBLAS_STATUS_SUCCESS) {
                die_at(__FILE__, __LINE__, "cuBLASLt has no algorithm for the BF16 peak GEMM");
            }
        };
        gemm();  // the first call pays for the library's setup
        float ms = bench_ms(reps, [&] { for (int i = 0; i < ITERS; i++) gemm(); }) / ITERS;
        double rate = tflops(2.0 * N * (double)N * N, ms);
        printf("  gemm %d^3 bf16 (column-major op(A),op(B) = %s): %.3f ms  %.1f TFLOP/s\n", N, names[t], ms, rate);
        if (rate > best) best = rate;
    }
    device_free(a);
    device_free(b);
    device_free(c);
    return best;
}

// ----------------------------------------------------------------------------

static const char* USAGE =
    "[BT C Vp [N]]\n"
    "Runs the bias-gradient versions and the model's cuBLASLt linear layers at GPT-2's shapes, each checked\n"
    "against the CPU reference and timed (TFLOP/s), and the device's dense BF16 GEMM peak (N^3).\n"
    "  BT C Vp  rows, channels, padded vocabulary; given together, C and Vp multiples of 8\n"
    "           (default 65536 768 50304 on a GPU; 64 64 256 emulated)\n"
    "  N        size of the peak GEMM, a multiple of 8 (default 8192 on a GPU; 128 emulated)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
#if LLM_BUILD_EMU
    int BT = 64, C = 64, Vp = 256, N = 128, reps = 2;  // a smoke run on the CPU
#else
    int BT = 64 * 1024, C = 768, Vp = 50304, N = 8192, reps = 20;
#endif
    int nshape = argc > 3 ? argc : 1;  // BT C Vp come together or not at all
    BT = arg_int(nshape, argv, 1, BT);
    C = arg_int(nshape, argv, 2, C);
    Vp = arg_int(nshape, argv, 3, Vp);
    N = arg_int(argc, argv, 4, N);
    if (BT <= 0 || C <= 0 || C % 8 != 0 || Vp <= 0 || Vp % 8 != 0 || N <= 0 || N % 8 != 0) {
        fprintf(stderr, "usage: %s [BT C Vp [N]]  (C, Vp and N multiples of 8)\n", argv[0]);
        return 1;
    }
    printf("matmul: %s, %s, BT=%d C=%d Vp=%d, peak %.0f GB/s\n", device_name(), PRECISION_MODE, BT, C, Vp, peak_gbs());
    context_init();
    Rng rng;
    rng_init(&rng, 1234);
    int all_ok = 1;
    Layer layers[NUM_LAYERS];
    size_t max_oc = std::max((size_t)Vp, (size_t)4 * C);
    float* d_scratch = (float*)device_malloc(MATMUL_DBIAS_MAX_SPLITS * max_oc * sizeof(float), MEM_WORKSPACE);

    // ---- checks at a small shape
    {
        int BTc = std::min(BT, 256), Vpc = std::min(Vp, 1024);
        printf("check at BT=%d C=%d Vp=%d:\n", BTc, C, Vpc);
        model_layers(layers, C, Vpc);
        for (int l = 0; l < NUM_LAYERS; l++) all_ok &= check_layer(&rng, layers[l], BTc, d_scratch);
    }

    // ---- the peak
    double peak = gemm_peak_tflops(N, reps);
    printf("peak %.1f TFLOP/s (dense bf16 GEMM %d^3)\n", peak, N);

    // ---- benchmarks at the full shape, inputs made on the device
    model_layers(layers, C, Vp);
    size_t max_in = (size_t)BT * 4 * C, max_out = (size_t)BT * max_oc, max_w = max_oc * C;
    floatX* d_inp = alloc_uniform<floatX>(max_in, 1, 1.0f);
    floatX* d_pre = alloc_uniform<floatX>(max_in, 2, 2.0f);  // the fc pre-activation, for fcproj's dGELU
    floatX* d_w = alloc_uniform<floatX>(max_w, 3, 0.03f);
    floatX* d_b = alloc_uniform<floatX>(max_oc, 4, 0.1f);
    floatX* d_dout = alloc_uniform<floatX>(max_out, 5, 1e-2f);
    floatX* d_out = alloc_poisoned(max_out);
    floatX* d_dinp = alloc_poisoned(max_in);
    floatX* d_dw = alloc_uniform<floatX>(max_w, 6, 1e-2f);
    floatX* d_db = alloc_uniform<floatX>(max_oc, 7, 1e-2f);

    // bias gradient versions at the distinct widths of the biased layers
    const int dbias_oc[3] = {C, 3 * C, 4 * C};
    for (int v = 1; v <= 2; v++) {
        for (int i = 0; i < 3; i++) {
            int OC = dbias_oc[i];
            float ms = bench_ms(reps, [&] { dbias_version(v, d_db, d_scratch, d_dout, BT, OC); });
            double bytes = (double)BT * OC * sizeof(floatX), rate = gbs(bytes, ms);
            printf("version %d dbias BT=%d OC=%-5d %9.3f ms  %6.0f GB/s (%.0f%% of peak)\n", v, BT, OC, ms, rate,
                   100.0 * rate / peak_gbs());
        }
    }
    // the layers' products: the model's calls
    for (int l = 0; l < NUM_LAYERS; l++) {
        const Layer& L = layers[l];
        floatX* bias = L.bias ? d_b : NULL;
        float fwd = bench_ms(reps, [&] {
            matmul_forward(d_out, L.gelu ? d_pre : NULL, d_inp, d_w, bias, BT, L.Cin, L.OC, 0);
        });
        float bwd = bench_ms(reps, [&] {
            matmul_backward(d_dinp, d_dw, L.bias ? d_db : NULL, d_dout, d_inp, d_w, d_scratch, L.dgelu ? d_pre : NULL, BT,
                            L.Cin, L.OC, 0);
        });
        double flops = 2.0 * BT * (double)L.Cin * L.OC;
        printf("kernel %-8s %4d -> %-5d forward %8.3f ms %6.1f TFLOP/s (%2.0f%% of peak), backward %8.3f ms "
               "%6.1f TFLOP/s (%2.0f%%)\n", L.name, L.Cin, L.OC, fwd, tflops(flops, fwd),
               100.0 * tflops(flops, fwd) / peak, bwd, tflops(2.0 * flops, bwd), 100.0 * tflops(2.0 * flops, bwd) / peak);
    }

    floatX* bufs[] = {d_inp, d_pre, d_w, d_b, d_dout, d_out, d_dinp, d_dw, d_db};
    for (floatX* p : bufs) device_free(p);
    device_free(d_scratch);
    // (the context is released with the process)
    bench_free();
    printf("%s\n", all_ok ? "all checks ok" : "SOME CHECKS FAILED");
    return all_ok ? 0 : 1;
}
