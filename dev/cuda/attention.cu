// dev/cuda/attention.cu: causal attention in versions side by side, each checked against the CPU
// reference and timed: the whole forward and backward, unfused (version 1, dev/cuda/attention_unfused.cuh)
// and fused (version 2, llm/ops/attention.cuh: what the model runs), then the pieces of the unfused path.
//
// GPU:      make dev-cuda (dev/cuda/cuda.mk), then
//           ./build/cuda/attention [B T C NH, default 8 1024 768 12 (GPT-2 124M, hs 64)] [check T, default 256]
//           (8 1024 1536 12 for hs 128; make dev-cuda PRECISION=FP32 for FP32 activations)
// emulated: make dev-cuda-emu, then ./build/cuda_emu/attention   (default 1 64 64 4, check T 32; CPU times)
//
// whole attention, forward + backward:
//   version 1: unfused: permute q, k, v to (B,NH,T,hs); the scores and probabilities as a (B,NH,T,T)
//              matrix in global memory (batched cuBLASLt products, cut along the diagonal in chunks of
//              rows; softmax kernels); the backward reads the kept probabilities
//   version 2: fused (FlashAttention-2's loop order): tiles in shared memory, mma.sync tile products with
//              the scores and accumulators in registers (llm/ops/attention_mma_kernels.cuh), one
//              FP32 log-sum-exp per row kept; the backward recomputes the probabilities
// Reported per version: time, TFLOP/s of the causal FLOPs (the products' 4 B NH T^2 hs of a full T x T,
// halved by the mask: 2 B NH T^2 hs forward; the backward's four products plus the fused version's
// recomputation of QK^T are counted as the usual 2.5x the forward, 5 B NH T^2 hs, for both versions, so
// the TFLOP/s compare times), and the global-memory bytes each version must move at least (below).
//
// The pieces of version 1:
// causal softmax forward (att (B,NH,T,T) in place, preatt -> probabilities, 0 above the diagonal):
//   version 1: one thread per row, three scalar passes (max, sum, write) like the reference loops:
//              neighbouring threads are T elements apart, so every access is its own transaction
//   version 2: one warp per row, one pass with an online max (each lane rescales its running sum
//              when its max grows, lanes merged with shuffles), then one pass that writes the
//              probabilities and the zeros; 128-bit accesses when T is a multiple of 8 (BF16) / 4;
//              the longest rows scheduled first (dev/cuda/attention_unfused.cuh)
// causal softmax backward (datt in place -> dpreatt):
//   version 1: one thread per row, two scalar passes
//   version 2: one warp per row, 128-bit accesses (dev/cuda/attention_unfused.cuh)
// permute (B,T,3C) -> 3 x (B,NH,T,hs):
//   version 1: one element per thread; version 2: 16 bytes per thread (dev/cuda/attention_unfused.cuh)
// batched products (cuBLASLt through matmul_batched): the full T x T products, and the causal cut
// into chunks of rows (chunk [r0,r1) only involves keys [0,r1)), as version 1 runs them.
//
// Timing: median over runs of cudaEvents around the timed call only; before every run the inputs are
// restored (for the in-place kernels) and L2 is flushed by writing 128 MiB. Bandwidth counts the
// minimum traffic (each element read once, written once; the softmax reads only the lower
// triangle and writes all of it), against the device's peak. Products: TFLOP/s of the FLOPs the
// call computes (2 M N K per product), and of the full T x T products' FLOPs for comparison.
#include "common.h"
#include "../../llm/core/cuda_utils.cuh"
#include "../../llm/ops/attention.cuh"
#include "attention_unfused.cuh"

// ----------------------------------------------------------------------------
// version 1 kernels: one thread per row

__global__ void softmax_forward_kernel1(floatX* att /*(B,NH,T,T)*/, int BNH, int T, float scale) {
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= (size_t)BNH * T) return;
    int t = (int)(r % T);
    floatX* row = att + r * T;
    float m = -FLT_MAX;
    for (int j = 0; j <= t; j++) m = fmaxf(m, (float)row[j] * scale);
    float s = 0.0f;
    for (int j = 0; j <= t; j++) s += expf((float)row[j] * scale - m);
    float inv = 1.0f / s;
    for (int j = 0; j < T; j++) row[j] = (floatX)(j <= t ? expf((float)row[j] * scale - m) * inv : 0.0f);
}

__global__ void softmax_backward_kernel1(floatX* datt /*(B,NH,T,T)*/, const floatX* att /*(B,NH,T,T)*/, int BNH,
                                         int T, float scale) {
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= (size_t)BNH * T) return;
    int t = (int)(r % T);
    floatX* d = datt + r * T;
    const floatX* a = att + r * T;
    float dot = 0.0f;
    for (int j = 0; j <= t; j++) dot += (float)a[j] * (float)d[j];
    for (int j = 0; j < T; j++) d[j] = (floatX)(j <= t ? (float)a[j] * ((float)d[j] - dot) * scale : 0.0f);
}

static void softmax_forward(int version, floatX* att, int BNH, int T, float scale) {
    if (version == 1) {
        LAUNCH(softmax_forward_kernel1, dim3((unsigned)ceil_div_sz((size_t)BNH * T, 256)), dim3(256), 0,
               (cudaStream_t)0, att, BNH, T, scale);
    } else {
        attention_softmax_forward(att, BNH, T, scale, 0);
    }
}

static void softmax_backward(int version, floatX* datt, const floatX* att, int BNH, int T, float scale) {
    if (version == 1) {
        LAUNCH(softmax_backward_kernel1, dim3((unsigned)ceil_div_sz((size_t)BNH * T, 256)), dim3(256), 0,
               (cudaStream_t)0, datt, att, BNH, T, scale);
    } else {
        attention_softmax_backward(datt, att, BNH, T, scale, 0);
    }
}

static void permute(int version, floatX* qkvr, const floatX* inp, int B, int T, int NH, int hs) {
    if (version == 1) {
        size_t n = (size_t)3 * B * NH * T * hs;
        LAUNCH(attention_permute_kernel<1>, dim3((unsigned)ceil_div_sz(n, 256)), dim3(256), 0, (cudaStream_t)0,
               qkvr, inp, B, T, NH, hs, 3);
    } else {
        attention_to_heads(qkvr, inp, B, T, NH, hs, 3, 0);
    }
}

// ----------------------------------------------------------------------------
// CPU references of the two softmax steps alone (the math of attention_forward_cpu / _backward_cpu)

static void softmax_forward_cpu(float* att /*(BNH,T,T)*/, const float* preatt /*(BNH,T,T)*/, int BNH, int T, float scale) {
    #pragma omp parallel for
    for (long r = 0; r < (long)BNH * T; r++) {
        int t = (int)(r % T);
        const float* p = preatt + r * T;
        float* a = att + r * T;
        float m = -INFINITY;
        for (int j = 0; j <= t; j++) m = fmaxf(m, p[j] * scale);
        float s = 0.0f;
        for (int j = 0; j <= t; j++) { a[j] = expf(p[j] * scale - m); s += a[j]; }
        for (int j = 0; j <= t; j++) a[j] /= s;
        for (int j = t + 1; j < T; j++) a[j] = 0.0f;
    }
}

static void softmax_backward_cpu(float* dpre /*(BNH,T,T)*/, const float* datt, const float* att, int BNH, int T,
                                 float scale) {
    #pragma omp parallel for
    for (long r = 0; r < (long)BNH * T; r++) {
        int t = (int)(r % T);
        const float* d = datt + r * T;
        const float* a = att + r * T;
        float dot = 0.0f;
        for (int j = 0; j <= t; j++) dot += a[j] * d[j];
        for (int j = 0; j < T; j++) dpre[r * T + j] = j <= t ? a[j] * (d[j] - dot) * scale : 0.0f;
    }
}

// ----------------------------------------------------------------------------
// checks

// |got - want| <= atol + rtol |want| everywhere (NaN fails); prints one line
static bool report(const char* what, const std::vector<float>& got, const std::vector<float>& want, float atol,
                   float rtol) {
    Diff d = compare(got.data(), want.data(), got.size(), atol, rtol);
    printf("  %-44s %s (%zu bad of %zu, max|err| %.3g; atol %.1g rtol %.1g)\n", what, d.bad ? "FAIL" : "ok", d.bad,
           got.size(), d.max_err, atol, rtol);
    return d.bad == 0;
}

// tolerances of the checks below: BF16 stores every intermediate with 8 significant bits (relative
// error 2^-8 = 3.9e-3 per rounding), a few roundings along each path; FP32 differs from the
// reference only in summation order and the fast exp (a few ulps times the sums' lengths)
static const float RTOL = sizeof(floatX) == 2 ? 2e-2f : 1e-4f;
static const float ATOL = sizeof(floatX) == 2 ? 2e-2f : 1e-5f;

// ----------------------------------------------------------------------------

static const char* USAGE =
    "[B T C NH [CHECK_T]]\n"
    "Runs causal attention's forward and backward, unfused and fused (llm/ops/attention.cuh), and the unfused\n"
    "pieces: each checked against the CPU reference (at CHECK_T) and timed.\n"
    "  B T C NH  batch, sequence length, channels, heads; given together, NH divides C\n"
    "            (default 8 1024 768 12, GPT-2 124M, on a GPU; 1 64 64 4 emulated)\n"
    "  CHECK_T   sequence length of the checks (default 256 on a GPU; 32 emulated)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
#if LLM_BUILD_EMU
    int B = 1, T = 64, C = 64, NH = 4, Tc = 32;  // a smoke run on the CPU
#else
    int B = 8, T = 1024, C = 768, NH = 12, Tc = 256;
#endif
    int nshape = argc > 4 ? argc : 1;  // B T C NH come together or not at all
    B = arg_int(nshape, argv, 1, B);
    T = arg_int(nshape, argv, 2, T);
    C = arg_int(nshape, argv, 3, C);
    NH = arg_int(nshape, argv, 4, NH);
    Tc = arg_int(argc, argv, 5, Tc);
    if (B <= 0 || T <= 0 || NH <= 0 || C % NH != 0 || Tc <= 0) {
        fprintf(stderr, "usage: %s [B T C NH [check_T]]  (NH divides C)\n", argv[0]);
        return 1;
    }
    int hs = C / NH, BNH = B * NH;
    float scale = 1.0f / sqrtf((float)hs);
    double peak = peak_gbs();
    printf("attention: %s, %s, B=%d T=%d C=%d NH=%d (hs %d), peak %.0f GB/s\n", device_name(), PRECISION_MODE, B, T,
           C, NH, hs, peak);
    context_init();
    Rng rng;
    rng_init(&rng, 1234);
    bool all_ok = true;

    // ---- correctness at a smaller T (the CPU reference is O(T^2)); B=2 heads as given
    {
        int Bc = 2;
        size_t n3 = (size_t)Bc * Tc * 3 * C, n1 = (size_t)Bc * Tc * C, natt = (size_t)Bc * NH * Tc * Tc;
        printf("check at B=%d T=%d:\n", Bc, Tc);
        std::vector<float> pre = randn_floatX(&rng, natt, 0.0f, 1.0f / scale), want(natt);  // logits ~ N(0,1)
        softmax_forward_cpu(want.data(), pre.data(), Bc * NH, Tc, scale);
        for (int v = 1; v <= 2; v++) {
            floatX* d = upload(pre);
            softmax_forward(v, d, Bc * NH, Tc, scale);
            char what[64];
            snprintf(what, sizeof(what), "softmax forward version %d", v);
            all_ok &= report(what, download(d, natt), want, ATOL * 0.1f, RTOL);
            cudaCheck(cudaFree(d));
        }
        std::vector<float> datt = randn_floatX(&rng, natt, 0.0f, 1.0f), a = want, dwant(natt);
        for (float& x : a) x = (float)(floatX)x;
        softmax_backward_cpu(dwant.data(), datt.data(), a.data(), Bc * NH, Tc, scale);
        floatX* d_a = upload(a);
        for (int v = 1; v <= 2; v++) {
            floatX* d = upload(datt);
            softmax_backward(v, d, d_a, Bc * NH, Tc, scale);
            char what[64];
            snprintf(what, sizeof(what), "softmax backward version %d", v);
            all_ok &= report(what, download(d, natt), dwant, ATOL * 0.1f, RTOL);
            cudaCheck(cudaFree(d));
        }
        // the whole attention, both versions, against the CPU reference
        std::vector<float> inp = randn_floatX(&rng, n3, 0.0f, 1.0f), dout = randn_floatX(&rng, n1, 0.0f, 1.0f);
        std::vector<float> out_ref(n1), lse_ref((size_t)Bc * NH * Tc), dinp_ref(n3);
        attention_forward_cpu(out_ref.data(), lse_ref.data(), inp.data(), Bc, Tc, C, NH);
        attention_backward_cpu(dinp_ref.data(), dout.data(), inp.data(), Bc, Tc, C, NH);
        floatX* d_inp = upload(inp);
        floatX* d_dout = upload(dout);
        floatX* d_out = alloc_poisoned(n1);
        floatX* d_qkvr = alloc_poisoned(n3);
        floatX* d_att2 = alloc_poisoned(natt);
        floatX* d_scr = alloc_poisoned(n1);
        floatX* d_dinp = alloc_poisoned(n3);
        floatX* d_dqkvr = alloc_poisoned(n3);
        floatX* d_datt = alloc_poisoned(natt);
        float* d_lse = (float*)device_malloc((size_t)Bc * NH * Tc * sizeof(float), MEM_WORKSPACE);
        float* d_D = (float*)device_malloc((size_t)Bc * NH * Tc * sizeof(float), MEM_WORKSPACE);
        attention_forward_unfused(d_out, d_qkvr, d_att2, d_scr, d_inp, Bc, Tc, C, NH, 0);
        all_ok &= report("version 1 (unfused) forward out", download(d_out, n1), out_ref, ATOL, RTOL);
        attention_backward_unfused(d_dinp, d_dqkvr, d_datt, d_scr, d_dout, d_inp, d_qkvr, d_att2, Bc, Tc, C, NH, 0);
        all_ok &= report("version 1 (unfused) backward dinp", download(d_dinp, n3), dinp_ref, ATOL, RTOL);
        for (floatX* p : {d_out, d_dinp}) cudaCheck(cudaMemset(p, 0xFF, (p == d_out ? n1 : n3) * sizeof(floatX)));
        attention_forward(d_out, d_lse, d_inp, Bc, Tc, C, NH, 0);
        all_ok &= report("version 2 (fused) forward out", download(d_out, n1), out_ref, ATOL, RTOL);
        std::vector<float> lse((size_t)Bc * NH * Tc);
        cudaCheck(cudaMemcpy(lse.data(), d_lse, lse.size() * sizeof(float), cudaMemcpyDeviceToHost));
        all_ok &= report("version 2 (fused) forward lse", lse, lse_ref, 1e-5f, 1e-5f);  // FP32 scores either way
        attention_backward(d_dinp, d_D, d_dout, d_inp, d_out, d_lse, Bc, Tc, C, NH, 0);
        all_ok &= report("version 2 (fused) backward dinp", download(d_dinp, n3), dinp_ref, ATOL, RTOL);
        floatX* bufs[] = {d_a, d_inp, d_dout, d_out, d_qkvr, d_att2, d_scr, d_dinp, d_dqkvr, d_datt};
        for (floatX* p : bufs) cudaCheck(cudaFree(p));
        device_free(d_lse);
        device_free(d_D);
    }

    // ---- benchmarks at the full shape
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C, natt = (size_t)BNH * T * T;
    printf("benchmark at B=%d T=%d C=%d NH=%d (att: %.1f MB):\n", B, T, C, NH, natt * sizeof(floatX) / 1e6);
    std::vector<float> inp = randn_floatX(&rng, n3, 0.0f, 1.0f), dout = randn_floatX(&rng, n1, 0.0f, 1.0f);
    floatX* d_inp = upload(inp);
    floatX* d_dout = upload(dout);
    floatX* d_out = alloc_poisoned(n1);
    floatX* d_qkvr = alloc_poisoned(n3);
    floatX* d_att = alloc_poisoned(natt);
    floatX* d_att0 = alloc_poisoned(natt);  // a copy of preatt (softmax input)
    floatX* d_scr = alloc_poisoned(n1);
    floatX* d_dinp = alloc_poisoned(n3);
    floatX* d_dqkvr = alloc_poisoned(n3);
    floatX* d_datt = alloc_poisoned(natt);
    floatX* d_datt0 = alloc_poisoned(natt);  // a copy of datt (softmax backward input)
    const int reps = 20;
    double E = (double)sizeof(floatX), tri = (double)BNH * T * (T + 1) / 2.0;

    // permutes
    for (int v = 1; v <= 2; v++) {
        float ms = bench_ms(reps, [&] { permute(v, d_qkvr, d_inp, B, T, NH, hs); });
        double bytes = 2.0 * n3 * E;
        printf("  permute version %d                 %8.3f ms  %6.0f GB/s (%.0f%% of peak)\n", v, ms,
               gbs(bytes, ms), 100.0 * gbs(bytes, ms) / peak);
    }
    permute(2, d_qkvr, d_inp, B, T, NH, hs);

    // the products, full and cut along the diagonal
    const floatX* q = d_qkvr;
    const floatX* k = d_qkvr + n1;
    const floatX* v = d_qkvr + 2 * n1;
    size_t sTh = (size_t)T * hs, sTT = (size_t)T * T;
    double full_flops = 2.0 * BNH * (double)T * T * hs;
    for (int cut = 0; cut <= 1; cut++) {
        llm_ctx.attention_chunk_rows = cut ? 0 : T;  // T rows per chunk: one full product
        double flops = 0.0;
        attention_for_chunks(T, [&](int r0, int r1) { flops += 2.0 * BNH * (double)(r1 - r0) * r1 * hs; });
        float ms = bench_ms(reps, [&] {
            attention_for_chunks(T, [&](int r0, int r1) {
                matmul_batched(d_att + (size_t)r0 * T, q + (size_t)r0 * hs, k, NULL, NULL, r1 - r0, r1, hs, false,
                               true, hs, hs, T, BNH, sTh, sTh, sTT, 1.0f, 0.0f, MATMUL_EPILOGUE_NONE, 0);
            });
        });
        printf("  QK^T %-10s (%d rows/chunk)    %8.3f ms  %6.1f TFLOP/s computed, %6.1f full-equivalent\n",
               cut ? "causal cut" : "full", attention_chunk_rows(T), ms, tflops(flops, ms), tflops(full_flops, ms));
        ms = bench_ms(reps, [&] {
            attention_for_chunks(T, [&](int r0, int r1) {
                matmul_batched(d_scr + (size_t)r0 * hs, d_att + (size_t)r0 * T, v, NULL, NULL, r1 - r0, hs, r1, false,
                               false, T, hs, hs, BNH, sTT, sTh, sTh, 1.0f, 0.0f, MATMUL_EPILOGUE_NONE, 0);
            });
        });
        printf("  AV   %-10s (%d rows/chunk)    %8.3f ms  %6.1f TFLOP/s computed, %6.1f full-equivalent\n",
               cut ? "causal cut" : "full", attention_chunk_rows(T), ms, tflops(flops, ms), tflops(full_flops, ms));
    }
    llm_ctx.attention_chunk_rows = 0;

    // softmax forward on the preatt the product wrote (restored before every run)
    cudaCheck(cudaMemcpy(d_att0, d_att, natt * sizeof(floatX), cudaMemcpyDeviceToDevice));
    for (int ver = 1; ver <= 2; ver++) {
        float ms = bench_ms(reps, [&] { cudaCheck(cudaMemcpy(d_att, d_att0, natt * E, cudaMemcpyDeviceToDevice)); },
                             [&] { softmax_forward(ver, d_att, BNH, T, scale); });
        double bytes = (tri + (double)natt) * E;  // read the lower triangle, write everything
        printf("  softmax forward version %d         %8.3f ms  %6.0f GB/s (%.0f%% of peak)\n", ver, ms,
               gbs(bytes, ms), 100.0 * gbs(bytes, ms) / peak);
    }
    // softmax backward: datt = dy v^T as the backward computes it, att the probabilities
    cudaCheck(cudaMemcpy(d_att, d_att0, natt * E, cudaMemcpyDeviceToDevice));
    softmax_forward(2, d_att, BNH, T, scale);
    attention_to_heads(d_scr, d_dout, B, T, NH, hs, 1, 0);
    matmul_batched(d_datt0, d_scr, v, NULL, NULL, T, T, hs, false, true, hs, hs, T, BNH, sTh, sTh, sTT, 1.0f, 0.0f,
                   MATMUL_EPILOGUE_NONE, 0);
    for (int ver = 1; ver <= 2; ver++) {
        float ms = bench_ms(reps, [&] { cudaCheck(cudaMemcpy(d_datt, d_datt0, natt * E, cudaMemcpyDeviceToDevice)); },
                             [&] { softmax_backward(ver, d_datt, d_att, BNH, T, scale); });
        double bytes = (2.0 * tri + (double)natt) * E;  // read att and datt's lower triangles, write everything
        printf("  softmax backward version %d        %8.3f ms  %6.0f GB/s (%.0f%% of peak)\n", ver, ms,
               gbs(bytes, ms), 100.0 * gbs(bytes, ms) / peak);
    }

    // the whole forward and backward: version 1 (unfused) without and with the causal cut, version 2 (fused)
    double fwd_flops = 2.0 * BNH * (double)T * T * hs, bwd_flops = 2.5 * fwd_flops;
    // the least each version moves through global memory: the fused one reads q, k, v (and in the backward
    // dy, out, lse) and writes out, lse, dinp, and the rows' D (FP32, written and read); the unfused one
    // also permutes q, k, v, y, dy, dq, dk, dv (a read and a write each) and moves the (B,NH,T,T) matrices
    // as dev/cuda/attention_unfused.cuh counts them (2.75 and 4.5 of one matrix with the causal cut)
    double rows4 = 4.0 * BNH * T;
    double fused_fwd_bytes = 4.0 * n1 * E + rows4, fused_bwd_bytes = 8.0 * n1 * E + 3 * rows4;
    double unf_fwd_bytes = 4.0 * n1 * E + 8.0 * n1 * E + 2.75 * natt * E, unf_bwd_bytes = 8.0 * n1 * E + 8.0 * n1 * E + 4.5 * natt * E;
    float t_unfused = 0.0f, t_fused = 0.0f;
    for (int cut = 0; cut <= 1; cut++) {
        llm_ctx.attention_chunk_rows = cut ? 0 : T;
        float fwd = bench_ms(reps, [&] { attention_forward_unfused(d_out, d_qkvr, d_att, d_scr, d_inp, B, T, C, NH, 0); });
        float bwd = bench_ms(reps, [&] {
            attention_backward_unfused(d_dinp, d_dqkvr, d_datt, d_scr, d_dout, d_inp, d_qkvr, d_att, B, T, C, NH, 0);
        });
        printf("  version 1 (unfused, %-10s) forward  %8.3f ms  %6.1f TFLOP/s\n", cut ? "causal cut" : "full", fwd,
               tflops(fwd_flops, fwd));
        printf("  version 1 (unfused, %-10s) backward %8.3f ms  %6.1f TFLOP/s\n", cut ? "causal cut" : "full", bwd,
               tflops(bwd_flops, bwd));
        if (cut) t_unfused = fwd + bwd;
    }
    llm_ctx.attention_chunk_rows = 0;
    {
        float* d_lse = (float*)device_malloc((size_t)BNH * T * sizeof(float), MEM_WORKSPACE);
        float* d_D = (float*)device_malloc((size_t)BNH * T * sizeof(float), MEM_WORKSPACE);
        float fwd = bench_ms(reps, [&] { attention_forward(d_out, d_lse, d_inp, B, T, C, NH, 0); });
        float bwd = bench_ms(reps, [&] { attention_backward(d_dinp, d_D, d_dout, d_inp, d_out, d_lse, B, T, C, NH, 0); });
        printf("  version 2 (fused)                forward  %8.3f ms  %6.1f TFLOP/s\n", fwd, tflops(fwd_flops, fwd));
        printf("  version 2 (fused)                backward %8.3f ms  %6.1f TFLOP/s\n", bwd, tflops(bwd_flops, bwd));
        t_fused = fwd + bwd;
        device_free(d_lse);
        device_free(d_D);
    }
    printf("  bytes moved at least, forward + backward: version 1 %.2f GB, version 2 %.2f GB\n",
           (unf_fwd_bytes + unf_bwd_bytes) / 1e9, (fused_fwd_bytes + fused_bwd_bytes) / 1e9);
    printf("fused vs unfused hs=%d T=%d: forward+backward %.3f ms vs %.3f ms: %.2fx faster | %.1f vs %.1f TFLOP/s\n", hs, T,
           t_fused, t_unfused, t_unfused / t_fused, tflops(fwd_flops + bwd_flops, t_fused), tflops(fwd_flops + bwd_flops, t_unfused));

    floatX* bufs[] = {d_inp, d_dout, d_out, d_qkvr, d_att, d_att0, d_scr, d_dinp, d_dqkvr, d_datt, d_datt0};
    for (floatX* p : bufs) cudaCheck(cudaFree(p));
    bench_free();
    // (the context is released with the process)
    printf("%s\n", all_ok ? "all checks ok" : "SOME CHECKS FAILED");
    return all_ok ? 0 : 1;
}
