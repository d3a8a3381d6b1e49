// dev/cuda/encoder.cu: versions of the encoder (token + position embedding) kernels side by side,
// each checked against the CPU reference (llm/ops/encoder.cuh) and timed. The chosen versions are the
// ones in llm/ops/encoder.cuh, without a version number.
//
//   forward  1: one thread per element, scalar loads and stores
//            2: one thread per 16 bytes (x128)                                         (llm/ops/encoder.cuh)
//   backward 1: one thread per 16 bytes of dout, atomicAdd into dwte and dwpe: fast to write, but
//               the order of the additions changes from run to run (not deterministic), and in BF16
//               every addition rounds the gradient to bf16
//            2: dwpe by one thread per (t, 16 bytes) summing over b; dwte by buckets of positions per
//               token built on the host, a block per (bucket, channel chunk), sums in a fixed order:
//               deterministic                                                           (llm/ops/encoder.cuh)
//
// GPU:      make dev-cuda (dev/cuda/cuda.mk), then
//           ./build/cuda/encoder [B] [T] [C] [V]   (default 64 1024 768 50257: GPT-2 124M)
// emulated: make dev-cuda-emu, then
//           ./build/cuda_emu/encoder               (default 2 33 264 50; the times are CPU times)
//
// Tokens are drawn from a Zipf-like law (p(rank k) ~ 1/(k+10)), so that, as in text, a few tokens
// fill long buckets. Timing: the median over REPS runs, each preceded by a write of a 128 MiB buffer
// (more than the L2). GB/s counts the bytes a kernel must move: forward reads a row of wte and of wpe
// and writes a row of out per position (3 floatX per element); backward reads dout (1 floatX per
// element) and updates the touched rows of dwte and the T rows of dwpe (read + write); version 2 reads
// dout twice (once per kernel), which the count does not include.
#include "common.h"
#include "../../llm/ops/encoder.cuh"

// ----------------------------------------------------------------------------
// forward, version 1: one thread per element. Per element: reads 1 floatX of wte and of wpe, writes 1.
__global__ void encoder_forward_kernel1(floatX* out, const int* inp,             // (B,T,C), (B,T)
                                        const floatX* wte, const floatX* wpe,    // (Vp,C), (maxT,C)
                                        int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    size_t bt = idx / C;
    int c = (int)(idx % C), t = (int)(bt % T);
    out[idx] = (floatX)((float)wte[(size_t)inp[bt] * C + c] + (float)wpe[(size_t)t * C + c]);
}

// one line, "ok   what: max err/bound r" or "FAIL ...": every |got - want| within its element's bound
static int rounded_sums_close(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                              const std::vector<float>& bound) {
    double worst = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < want.size(); i++) {
        double r = fabs((double)got[i] - want[i]) / bound[i];
        if (!(r <= worst)) { worst = r != r ? INFINITY : r; wi = i; }
    }
    int ok = worst <= 1.0 && got.size() == want.size();
    printf("%s %s: max err/bound %.3g (at [%zu]: %.6g vs %.6g)\n", ok ? "ok  " : "FAIL", what, worst, wi,
           wi < got.size() ? got[wi] : NAN, want[wi]);
    return ok;
}

// backward, version 1: one thread per 16 bytes of dout, atomic adds (not deterministic).
// Per element: reads 1 floatX of dout, 2 atomic read-modify-writes.
__global__ void encoder_backward_kernel1(floatX* dwte, floatX* dwpe,             // (Vp,C), (maxT,C)
                                         const floatX* dout, const int* inp,     // (B,T,C), (B,T)
                                         int B, int T, int C) {
    int chunks = C / x128::size;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * chunks) return;
    size_t bt = idx / chunks;
    int c = (int)(idx % chunks) * x128::size, t = (int)(bt % T);
    x128 d = load128cs(dout + bt * C + c);
    floatX* we = dwte + (size_t)inp[bt] * C + c;
    floatX* pe = dwpe + (size_t)t * C + c;
    for (int k = 0; k < x128::size; k++) {
        atomicAdd(we + k, d[k]);
        atomicAdd(pe + k, d[k]);
    }
}

typedef struct {
    int B, T, C, Vp;
    int *inp, *inp_host;
    floatX *wte, *wpe, *out, *dout, *dwte, *dwpe;
    float* scratch;
} Bufs;

static void forward1(Bufs& b) {
    size_t n = (size_t)b.B * b.T * b.C;
    LAUNCH(encoder_forward_kernel1, dim3((unsigned)ceil_div_sz(n, 256)), dim3(256), 0, (cudaStream_t)0, b.out, b.inp,
           b.wte, b.wpe, b.B, b.T, b.C);
}
static void forward2(Bufs& b) { encoder_forward(b.out, b.inp, b.wte, b.wpe, b.B, b.T, b.C, 0); }
static void backward1(Bufs& b) {
    size_t n = (size_t)b.B * b.T * (b.C / x128::size);
    LAUNCH(encoder_backward_kernel1, dim3((unsigned)ceil_div_sz(n, 256)), dim3(256), 0, (cudaStream_t)0, b.dwte,
           b.dwpe, b.dout, b.inp, b.B, b.T, b.C);
}
static void backward2(Bufs& b) {
    encoder_backward(b.dwte, b.dwpe, b.scratch, b.dout, b.inp, b.inp_host, b.B, b.T, b.C, 0);
}

static const char* USAGE =
    "[B [T [C [V]]]]\n"
    "Runs the encoder's (token + position embedding) forward and backward versions, checks each against the\n"
    "CPU reference (llm/ops/encoder.cuh) and times it.\n"
    "  B T C V  batch, sequence length, channels, vocabulary\n"
    "           (default 64 1024 768 50257, GPT-2 124M, on a GPU; 2 33 264 50 emulated)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
#if LLM_BUILD_EMU
    int B = 2, T = 33, C = 264, V = 50, reps = 3;
#else
    int B = 64, T = 1024, C = 768, V = 50257, reps = 25;
#endif
    B = arg_int(argc, argv, 1, B);
    T = arg_int(argc, argv, 2, T);
    C = arg_int(argc, argv, 3, C);
    V = arg_int(argc, argv, 4, V);
    int Vp = ((V + 127) / 128) * 128;  // padded vocabulary, as in gpt.h
    printf("encoder: B = %d, T = %d, C = %d, V = %d, %s\n", B, T, C, V, PRECISION_MODE);
    size_t BT = (size_t)B * T, BTC = BT * C;
    Rng rng;
    rng_init(&rng, 1337);
    auto randn = [&](size_t n, float std) { return randn_floatX(&rng, n, 0.0f, std); };
    // Zipf-like tokens: inverse CDF of p(k) ~ 1/(k+10) over k < V, then a fixed shuffle of the ranks
    std::vector<double> cdf(V);
    double z = 0.0;
    for (int k = 0; k < V; k++) cdf[k] = (z += 1.0 / (k + 10));
    std::vector<int> perm(V);
    for (int k = 0; k < V; k++) perm[k] = k;
    for (int k = V - 1; k > 0; k--) std::swap(perm[k], perm[rng_u64(&rng) % (k + 1)]);
    std::vector<int> inp(BT);
    for (size_t i = 0; i < BT; i++) {
        int k = (int)(std::lower_bound(cdf.begin(), cdf.end(), rng_f64(&rng) * z) - cdf.begin());
        inp[i] = perm[std::min(k, V - 1)];
    }
    std::vector<float> wte = randn((size_t)Vp * C, 0.02f), wpe = randn((size_t)T * C, 0.02f), dout = randn(BTC, 1.0f),
                       dwte0 = randn((size_t)Vp * C, 0.1f), dwpe0 = randn((size_t)T * C, 0.1f);
    Bufs b;
    b.B = B;
    b.T = T;
    b.C = C;
    b.Vp = Vp;
    b.inp = (int*)device_malloc(BT * sizeof(int), MEM_WORKSPACE);
    copy_to_device(b.inp, inp.data(), BT * sizeof(int));
    b.inp_host = inp.data();
    b.wte = upload(wte);
    b.wpe = upload(wpe);
    b.dout = upload(dout);
    b.dwte = upload(dwte0);
    b.dwpe = upload(dwpe0);
    b.out = (floatX*)device_malloc(BTC * sizeof(floatX), MEM_WORKSPACE);
    b.scratch = (float*)device_malloc(BTC * sizeof(float), MEM_WORKSPACE);

    std::vector<float> out(BTC), dwte = dwte0, dwpe = dwpe0;
    encoder_forward_cpu(out.data(), inp.data(), wte.data(), wpe.data(), 0, INT_MAX, B, T, C);
    encoder_backward_cpu(dwte.data(), dwpe.data(), dout.data(), inp.data(), 0, INT_MAX, B, T, C);
    // touched rows of dwte: what the backward must read and write
    std::vector<char> seen(Vp, 0);
    size_t touched = 0;
    for (size_t i = 0; i < BT; i++) if (!seen[inp[i]]) { seen[inp[i]] = 1; touched++; }
    char what[64];

    void (*fwd[])(Bufs&) = {forward1, forward2};
    for (int v = 0; v < 2; v++) {
        cudaCheck(cudaMemset(b.out, 0xFF, BTC * sizeof(floatX)));
        fwd[v](b);
        snprintf(what, sizeof(what), "forward %d", v + 1);
        close_enough(what, download(b.out, BTC), out, 0.0f, 4e-3f);
        report_gbs(what, bench_ms(reps, [&] { fwd[v](b); }), 3.0 * BTC * sizeof(floatX));
    }
    // version 1's bound in 16 bits: an element that receives n atomic additions is rounded n times to
    // floatX, each time by at most u |partial sum| <= u (|initial| + sum |dout|), u = 2^-8 BF16, 2^-11
    // FP16 (the unit roundoff); allowed: twice that, for the FP32 reference's own sums and the second
    // order; 1e-7 absolute for FP16's subnormals. The error grows with n: the most frequent token's row takes
    // hundreds of roundings, so no one tolerance fits every element.
    std::vector<float> bound_te(dwte0.size()), bound_pe(dwpe0.size()), absd(BTC);
    for (size_t i = 0; i < BTC; i++) absd[i] = fabsf(dout[i]);
    for (size_t i = 0; i < bound_te.size(); i++) bound_te[i] = fabsf(dwte0[i]);
    for (size_t i = 0; i < bound_pe.size(); i++) bound_pe[i] = fabsf(dwpe0[i]);
    encoder_backward_cpu(bound_te.data(), bound_pe.data(), absd.data(), inp.data(), 0, INT_MAX, B, T, C);
    {
        std::vector<int> count(Vp, 0);
        for (size_t i = 0; i < BT; i++) count[inp[i]]++;
        double u = 2 * (std::is_same<floatX, __half>::value ? 0x1p-11 : 0x1p-8);
        for (int r = 0; r < Vp; r++)
            for (int c = 0; c < C; c++) bound_te[(size_t)r * C + c] = (float)(count[r] * u * bound_te[(size_t)r * C + c] + 1e-7);
        for (size_t i = 0; i < bound_pe.size(); i++) bound_pe[i] = (float)(B * u * bound_pe[i] + 1e-7);
    }
    void (*bwd[])(Bufs&) = {backward1, backward2};
    for (int v = 0; v < 2; v++) {
        upload_to(b.dwte, dwte0);
        upload_to(b.dwpe, dwpe0);
        bwd[v](b);
        snprintf(what, sizeof(what), "backward %d", v + 1);
        if (v == 0 && sizeof(floatX) == 2) {
            // version 1 in 16 bits rounds the gradient at every atomic addition: checked against that
            // rounding's bound, per element
            rounded_sums_close(what, download(b.dwte, (size_t)Vp * C), dwte, bound_te);
            rounded_sums_close("     dwpe", download(b.dwpe, (size_t)T * C), dwpe, bound_pe);
        } else {
            float atol = 1e-3f * sqrtf((float)BT), rtol = 1e-2f;
            close_enough(what, download(b.dwte, (size_t)Vp * C), dwte, atol, rtol);
            close_enough("     dwpe", download(b.dwpe, (size_t)T * C), dwpe, atol, rtol);
        }
        report_gbs(what, bench_ms(reps, [&] { bwd[v](b); }), (BTC + 2.0 * (touched + T) * C) * sizeof(floatX));
    }
    floatX* bufs[] = {b.wte, b.wpe, b.dout, b.dwte, b.dwpe, b.out};
    for (floatX* p : bufs) device_free(p);
    device_free(b.inp);
    device_free(b.scratch);
    bench_free();
    return 0;
}
