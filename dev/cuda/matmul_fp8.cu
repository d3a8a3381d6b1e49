// dev/cuda/matmul_fp8.cu: the FP8 GEMM (llm/precision/matmul_fp8.cuh) against the BF16 GEMM (llm/ops/matmul.cuh) at
// GPT-2 124M's linear-layer shapes: each recipe's path on this GPU (cuBLASLt FP8 with its scale mode,
// or the fallback), its time and TFLOP/s, and the ratio to BF16's time. The operands are quantized
// before the timed call (the quantizers are timed on their own line, per operand pair).
//
// shapes (BT rows, BT = 8192 by default: B*T of a 8 x 1024 micro-batch):
//   qkv      forward  (BT, C) x (3C, C)^T     dgrad (BT, 3C) x (C, 3C)^T    wgrad (3C, BT) x (C, BT)^T
//   attproj  C -> C,  fc C -> 4C,  fcproj 4C -> C, the same three GEMMs each
// FLOPs 2 M N K per GEMM. Recipes: per-tensor (delayed/current), block (1x128 x 128x128, wgrad 1x128 x
// 1x128), mx (32-blocks, E8M0); dgrad and wgrad E5M2 x E4M3 (the hybrid format).
// A check first, at a small shape: each recipe's FP8 GEMM against the CPU reference of the same
// quantized operands (matmul_fp8_cpu), within 2 BF16 ulps plus the FP32 sum's slack.
//
// GPU:      make dev-cuda, then ./build/cuda/matmul_fp8 [BT [C]]   (default 8192 768)
// emulated: make dev-cuda-emu, then ./build/cuda_emu/matmul_fp8     (default 128 128; CPU times)
#include "common.h"
#include "../../llm/ops/matmul.cuh"
#include "../../llm/precision/matmul_fp8.cuh"

typedef struct { const char* name; Fp8Scaling act, w; } BenchRecipe;
static const BenchRecipe RECIPES[3] = {{"per-tensor", FP8_SCALE_TENSOR, FP8_SCALE_TENSOR},
                                       {"block", FP8_SCALE_1x128, FP8_SCALE_128x128},
                                       {"mx", FP8_SCALE_MX32, FP8_SCALE_MX32}};
static const char* PATHS[3] = {"CPU", "cuBLASLt", "fallback"};

// one GEMM: out (M,N) = A (M,K) B (N,K)^T; A, B given as floatX device matrices stored (M,K)/(N,K)
typedef struct { const char* name; int M, N, K; } Gemm;

// quantize both operands (a per-tensor scale from the host amax is not needed: scale 1 is fine for timing)
static void quantize_pair(Fp8Matrix* a, Fp8Matrix* b, const floatX* x, const floatX* w, const float* one, cudaStream_t s) {
    fp8_matrix_quantize(a, x, 0, one, s);
    fp8_matrix_quantize(b, w, 0, one, s);
}

static const char* USAGE =
    "[BT [C]]\n"
    "Checks each FP8 recipe's GEMM (llm/precision/matmul_fp8.cuh) against the CPU reference, then times it\n"
    "against the BF16 GEMM at GPT-2's linear-layer shapes.\n"
    "  BT  rows, a multiple of 128 (default 8192 on a GPU; 128 emulated)\n"
    "  C   channels, a multiple of 128 (default 768 on a GPU; 128 emulated)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    int BT = arg_int(argc, argv, 1, GPU_OR_EMU(8192, 128)), C = arg_int(argc, argv, 2, GPU_OR_EMU(768, 128));
    int reps = GPU_OR_EMU(20, 2);
    if (BT <= 0 || C <= 0 || C % 128 != 0 || BT % 128 != 0) {
        fprintf(stderr, "usage: %s [BT [C]]  (multiples of 128)\n", argv[0]);
        return 1;
    }
    printf("matmul_fp8: %s, %s output, BT=%d C=%d\n", device_name(), PRECISION_MODE, BT, C);
    context_init();
    Rng rng;
    rng_init(&rng, 42);
    cudaStream_t st = llm_ctx.stream;
    int all_ok = 1;
    float one = 1.0f;
    float* d_one = (float*)device_malloc(sizeof(float), MEM_WORKSPACE);
    copy_to_device(d_one, &one, sizeof(float));

    // ---- check at a small shape: the device path against the CPU reference of the same operands
    {
        int M = 128, N = 96, K = 256;
        std::vector<float> x = randn_floatX(&rng, (size_t)M * K, 0.0f, 1.0f), w = randn_floatX(&rng, (size_t)N * K, 0.0f, 0.05f);
        floatX* dx = upload(x);
        floatX* dw = upload(w);
        floatX* dout = alloc_poisoned((size_t)M * N);
        for (int r = 0; r < 3; r++) {
            Fp8Matrix a, b;
            fp8_matrix_alloc(&a, M, K, FP8_E4M3, RECIPES[r].act, MEM_WORKSPACE);
            fp8_matrix_alloc(&b, N, K, FP8_E4M3, RECIPES[r].w, MEM_WORKSPACE);
            quantize_pair(&a, &b, dx, dw, d_one, st);
            int path = matmul_fp8(dout, NULL, NULL, &a, &b, NULL, 0, st);
            std::vector<float> got = download(dout, (size_t)M * N);
            // the reference: the operands back on the host, matmul_fp8_cpu
            Fp8Matrix ha = a, hb = b;
            std::vector<uint8_t> abuf(a.cap), bbuf(b.cap);
            copy_to_host(abuf.data(), a.buf, a.cap);
            copy_to_host(bbuf.data(), b.buf, b.cap);
            ha.buf = abuf.data(); hb.buf = bbuf.data();
            ha.q = abuf.data() + (a.q - (uint8_t*)a.buf); ha.scale = (float*)(abuf.data() + ((char*)a.scale - (char*)a.buf));
            ha.e8m0 = abuf.data() + (a.e8m0 - (uint8_t*)a.buf);
            hb.q = bbuf.data() + (b.q - (uint8_t*)b.buf); hb.scale = (float*)(bbuf.data() + ((char*)b.scale - (char*)b.buf));
            hb.e8m0 = bbuf.data() + (b.e8m0 - (uint8_t*)b.buf);
            std::vector<floatX> want_x((size_t)M * N);
            matmul_fp8_cpu(want_x.data(), NULL, NULL, &ha, &hb, NULL, 0);
            std::vector<float> want(want_x.size());
            for (size_t i = 0; i < want.size(); i++) want[i] = (float)want_x[i];
            char what[128];
            snprintf(what, sizeof(what), "%s forward (%s) vs the CPU reference", RECIPES[r].name, PATHS[path]);
            all_ok &= close_enough(what, got, want, 1e-3f, 1.0f / 64);
            fp8_matrix_free(&a);
            fp8_matrix_free(&b);
        }
        device_free(dx); device_free(dw); device_free(dout);
    }

    // ---- benchmarks: each linear's three GEMMs
    const char* lname[4] = {"qkv", "attproj", "fc", "fcproj"};
    int lin[4] = {C, C, C, 4 * C}, lout[4] = {3 * C, C, 4 * C, C};
    size_t max_el = (size_t)BT * 4 * C;
    std::vector<float> h = randn_floatX(&rng, max_el, 0.0f, 1.0f);
    floatX* dA = upload(h);
    floatX* dB = upload(h);
    floatX* dout = alloc_poisoned(max_el > (size_t)16 * C * C ? max_el : (size_t)16 * C * C);
    Fp8Matrix a, b;
    fp8_matrix_alloc(&a, 128, 128, FP8_E4M3, FP8_SCALE_TENSOR, MEM_WORKSPACE);
    fp8_matrix_alloc(&b, 128, 128, FP8_E4M3, FP8_SCALE_TENSOR, MEM_WORKSPACE);
    printf("%-8s %-6s %-22s %-11s %-9s %9s %9s %8s %8s\n", "layer", "gemm", "M x N x K", "recipe", "path", "ms", "TFLOP/s",
           "x bf16", "quant ms");
    for (int l = 0; l < 4; l++) {
        Gemm gs[3] = {{"fwd", BT, lout[l], lin[l]}, {"dgrad", BT, lin[l], lout[l]}, {"wgrad", lout[l], lin[l], BT}};
        for (int g = 0; g < 3; g++) {
            int M = gs[g].M, N = gs[g].N, K = gs[g].K;
            double flops = 2.0 * M * N * K;
            // BF16 (or FP32) reference time: out (M,N) = A (M,K) B (N,K)^T
            float ms_bf = bench_ms(reps, [&] { matmul_forward(dout, NULL, dA, dB, NULL, M, K, N, st); });
            char shape[64];
            snprintf(shape, sizeof(shape), "%d x %d x %d", M, N, K);
            printf("%-8s %-6s %-22s %-11s %-9s %9.3f %9.1f %8s %8s\n", lname[l], gs[g].name, shape, PRECISION_MODE, "cuBLASLt",
                   ms_bf, tflops(flops, ms_bf), "1.00", "-");
            for (int r = 0; r < 3; r++) {
                Fp8Scaling sa = RECIPES[r].act, sb = g == 2 ? RECIPES[r].act : RECIPES[r].w;
                int fa = g == 0 ? FP8_E4M3 : FP8_E5M2;
                fp8_matrix_prepare(&a, M, K, fa, sa);
                fp8_matrix_prepare(&b, N, K, FP8_E4M3, sb);
                float ms_q = bench_ms(reps, [&] { quantize_pair(&a, &b, dA, dB, d_one, st); });
                int path = matmul_fp8(dout, NULL, NULL, &a, &b, NULL, 0, st);
                float ms = bench_ms(reps, [&] { matmul_fp8(dout, NULL, NULL, &a, &b, NULL, 0, st); });
                printf("%-8s %-6s %-22s %-11s %-9s %9.3f %9.1f %8.2f %8.3f\n", lname[l], gs[g].name, shape, RECIPES[r].name,
                       PATHS[path], ms, tflops(flops, ms), ms_bf / ms, ms_q);
            }
        }
    }
    fp8_matrix_free(&a);
    fp8_matrix_free(&b);
    device_free(dA); device_free(dB); device_free(dout); device_free(d_one);
    bench_free();
    context_free();
    printf("%s\n", all_ok ? "all checks passed" : "FAIL: some checks failed");
    return all_ok ? 0 : 1;
}
