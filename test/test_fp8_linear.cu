// test_fp8_linear.cu: llm/precision/fp8_linear.h's FP8 linear layer through the library, against an independent
// reference of the recipes' operand assignment: which format (E4M3 / E5M2), which scale and which amax
// entry each operand of each of the three GEMMs takes, and the scale/amax state after each step.
//
// The trainer's FP8 tests (test/test_fp8_train.sh) compare FP8 runs with FP8 runs (tp 2, pp 2 against one
// process), so a wrong assignment (x's scale used for dy in the weight gradient, E4M3 for dy under
// --fp8-format hybrid, an operand's amax recorded in another's entry) is the same in both runs and passes
// there. Here two linears of a 2-layer state (slots 6 = layer 1 fc and 1 = layer 0 attproj, so a wrong
// entry stride shows) run a few training steps on fresh random inputs whose magnitudes change from step to
// step (so delayed scaling's history-based scales differ from each tensor's own): fp8_step_begin, both
// forwards, both backwards (dgrad and wgrad, dW accumulating), fp8_step_end. The reference, written from
// the recipes' definitions (llm/precision/fp8_linear.h's top comment; it uses only fp8_encode / fp8_decode of
// llm/precision/fp8.cuh, which test/test_fp8.cu checks bit for bit against ml_dtypes):
//   formats   x, W: E4M3; dy: E5M2 under hybrid, E4M3 under e4m3 -- in the forward (x, W), the dgrad
//             (dy, W^T) and the wgrad (dy^T, x^T)
//   current   s = fp8_max / amax(the operand), per tensor
//   delayed   s = (fp8_max / reduce(history of this entry)) / 2^margin, from step 2 (step 1: current);
//             one ring of H amaxes per (layer, linear, tensor), the step's amax pushed at its end
//   block     1x128 tiles of x and dy along the GEMM's inner dimension (of dy^T and x^T in the wgrad),
//             128x128 blocks of W (and of W^T); s = fp8_max / tile amax
//   mx        32-element blocks along the inner dimension, E8M0 scale 2^(floor(log2 amax) - emax_elem)
// It quantizes each operand itself (codes = fp8_encode(v * s), values decode / s), multiplies in FP64, and
// replays the delayed-scaling state (rings, position, scales).
//
// Checks, per case (recipe x format x reduce/margin): for each GEMM kind (forward, dgrad, wgrad) over all
// steps and both linears, max |out - ref| / bound <= 1, where ref uses the SAME quantized values the
// recipe prescribes, so the bound holds only the arithmetic after quantization:
//   bound = (acc(K) + 3 * 2^-23) sum_k |A_ik| |B_jk| + 2^-23 (|bias_j| + |old_ij|), then + u (|ref| + that)
//   acc(K) = (K + 2) 2^-24 (FP32 sums in any order; on a GPU at least 2^-13: Hopper's FP8 tensor cores,
//   as test_fp8_gemm.cu); 3 * 2^-23: the library's element value decode(q) * fl(1/s) is an FP32 product
//   of a rounded reciprocal (2 roundings of 2^-24 each, against decode(q) / s exactly), on both operands;
//   u: the one rounding of the output to floatX (FP32 2^-24, BF16 2^-8, FP16 2^-11).
// A wrong format or scale changes the operand values by a quantization step (2^-4 .. 2^-3 relative,
// randomly signed), i.e. each output by ~2^-4 / sqrt(K) of sum |A||B|: far above this bound (FP32:
// ~K 2^-24; BF16: 2^-8 |ref|). Each line says so for these very inputs: the same check against the output
// of the unquantized inputs, and (GEMMs with dy) against dy quantized in the other format, must exceed the
// bound ("alt").
// Per-tensor recipes, after every step: the device scale of all 24 entries (layers x linears x tensors;
// the unused ones must stay 1) bit for bit; delayed: every entry's amax ring, the ring position and the
// count of recorded steps bit for bit (the amaxes are exact maxima of the floatX inputs).
// Block and mx leave the per-tensor tables alone (checked: scales 1, no amax recorded).
// Built as build/test_fp8_linear_cpu (FP32), build/test_fp8_linear_emu (BF16: the kernels and the
// emulated cuBLASLt of sm_90: per-tensor via cuBLASLt, block where K is a multiple of 128, mx by the
// fallback) and build/test_fp8_linear_gpu (scripts/gpu_check.sh). About 1 s (CPU) and 2-4 s (emulated).
#include "../llm/core/common.h"
#include "../llm/core/context.h"
#include "../llm/core/device.h"
#include "../llm/comm/comm.h"
#include "../llm/precision/fp8_linear.h"
#include "test_common.h"
#include "../llm/core/usage.h"
#include <vector>

// splitmix64, a fixed seed: the inputs are fresh random numbers, the same each run
static uint64_t g_rng = 0x2545f4914f6cdd1dull;
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
// (n) N(0, 1) * scale, rounded to floatX (the layer's actual inputs)
static std::vector<float> rand_floatx(size_t n, float scale) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = (float)(floatX)(rng_normal() * scale);
    return v;
}

#if LLM_HAS_KERNELS && !defined(ENABLE_FP32)
#ifdef ENABLE_FP16
static const double OUT_U = 0x1p-11;
#else
static const double OUT_U = 0x1p-8;
#endif
#else
static const double OUT_U = 0x1p-24;
#endif
static double acc_unit(int K) {
    double u = (K + 2) * 0x1p-24;
#if LLM_BUILD_CUDA
    if (u < 0x1p-13) u = 0x1p-13;
#endif
    return u;
}

// ----------------------------------------------------------------------------
// the reference: the recipes from their definitions

enum { T_X = 0, T_W = 1, T_DY = 2 };  // the tensors of a linear, as the entry numbering (layer*4+linear)*3+tensor
static const int ENTRIES = 2 * 4 * 3;  // 2 layers x 4 linears x 3 tensors
static const char* TNAME[3] = {"x", "W", "dy"};

typedef struct {
    const char* name;
    Fp8Recipe recipe;
    int e4m3;          // --fp8-format e4m3
    int H, reduce, margin;
    int steps;
} Case;

static int ref_format(const Case* c, int tensor) { return tensor == T_DY && !c->e4m3 ? FP8_E5M2 : FP8_E4M3; }
static float ref_max(int fmt) { return fmt == FP8_E4M3 ? 448.0f : 57344.0f; }
static float ref_amax(const float* v, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fabsf(v[i]) > m ? fabsf(v[i]) : m;
    return m;
}
// fp8_max / amax, correctly rounded to FP32 (the double quotient rounded once: exact for float operands)
static float ref_scale_of(float amax, int fmt) {
    if (amax == 0.0f) return 1.0f;
    double s = (double)ref_max(fmt) / (double)amax;
    return s > FLT_MAX ? FLT_MAX : (float)s;
}
static double ref_q(float v, float s, int fmt) {  // the value of v quantized with multiplier s
    return (double)fp8_decode(fp8_encode(v * s, fmt), fmt) / (double)s;
}

// the (rows, K) operand m (already in the GEMM's orientation) quantized as the recipe prescribes for
// tensor `tensor` (per-tensor: multiplier ts), in format fmt; values in FP64
static std::vector<double> ref_quantize(const Case* c, int tensor, int fmt, const std::vector<float>& m, int rows, int K,
                                        float ts) {
    std::vector<double> out((size_t)rows * K);
    if (c->recipe == FP8_RECIPE_CURRENT || c->recipe == FP8_RECIPE_DELAYED) {
        for (size_t i = 0; i < out.size(); i++) out[i] = ref_q(m[i], ts, fmt);
    } else if (c->recipe == FP8_RECIPE_BLOCK) {
        int br = tensor == T_W ? 128 : 1, bc = 128;  // W: 128x128 blocks; x, dy: 1x128 tiles along K
        for (int r0 = 0; r0 < rows; r0 += br) {
            for (int c0 = 0; c0 < K; c0 += bc) {
                int r1 = r0 + br < rows ? r0 + br : rows, c1 = c0 + bc < K ? c0 + bc : K;
                float a = 0.0f;
                for (int r = r0; r < r1; r++) for (int k = c0; k < c1; k++) a = fmaxf(a, fabsf(m[(size_t)r * K + k]));
                float s = ref_scale_of(a, fmt);
                for (int r = r0; r < r1; r++) for (int k = c0; k < c1; k++) out[(size_t)r * K + k] = ref_q(m[(size_t)r * K + k], s, fmt);
            }
        }
    } else {  // mx: 32 along K, X = 2^(floor(log2 amax) - emax_elem), elements encode(v / X)
        int emax = fmt == FP8_E4M3 ? 8 : 15;
        for (int r = 0; r < rows; r++) {
            for (int c0 = 0; c0 < K; c0 += 32) {
                int c1 = c0 + 32 < K ? c0 + 32 : K;
                float a = 0.0f;
                for (int k = c0; k < c1; k++) a = fmaxf(a, fabsf(m[(size_t)r * K + k]));
                int e = -127;
                if (a > 0.0f) { int ex; frexp(a, &ex); e = ex - 1 - emax; }  // a = f 2^ex, f in [0.5, 1)
                if (e < -127) e = -127;
                double X = ldexp(1.0, e);
                for (int k = c0; k < c1; k++) {
                    float v = m[(size_t)r * K + k];
                    out[(size_t)r * K + k] = (double)fp8_decode(fp8_encode((float)(v / X), fmt), fmt) * X;
                }
            }
        }
    }
    return out;
}

static std::vector<float> transpose(const std::vector<float>& m, int rows, int cols) {  // (rows, cols) -> (cols, rows)
    std::vector<float> t(m.size());
    for (int r = 0; r < rows; r++) for (int c = 0; c < cols; c++) t[(size_t)c * rows + r] = m[(size_t)r * cols + c];
    return t;
}

// the per-tensor state the reference keeps, as the recipe prescribes it
typedef struct {
    std::vector<float> scale;  // (ENTRIES) the scale in use (the device table)
    std::vector<float> hist;   // (ENTRIES, H) delayed: the rings
    std::vector<float> step_amax;
    int pos, recorded;
} RefState;

// the multiplier of a per-tensor operand: current scaling (and delayed before any recorded step) from its
// own amax; delayed after that, the step's scale. The amax joins the step's record (delayed).
static float ref_tensor_scale(const Case* c, RefState* rs, int entry, int fmt, float amax) {
    if (c->recipe == FP8_RECIPE_DELAYED) rs->step_amax[entry] = fmaxf(rs->step_amax[entry], amax);
    if (c->recipe == FP8_RECIPE_CURRENT || rs->recorded == 0) rs->scale[entry] = ref_scale_of(amax, fmt);
    return rs->scale[entry];
}

static void ref_step_begin(const Case* c, RefState* rs) {
    std::fill(rs->step_amax.begin(), rs->step_amax.end(), 0.0f);
    if (c->recipe != FP8_RECIPE_DELAYED || rs->recorded == 0) return;
    for (int i = 0; i < ENTRIES; i++) {
        const float* h = &rs->hist[(size_t)i * c->H];
        float a = 0.0f;
        if (c->reduce == FP8_AMAX_REDUCE_MAX) for (int k = 0; k < c->H; k++) a = fmaxf(a, h[k]);
        else a = h[(rs->pos + c->H - 1) % c->H];
        if (a != 0.0f) rs->scale[i] = ref_scale_of(a, ref_format(c, i % 3)) / (float)ldexp(1.0, c->margin);
    }
}
static void ref_step_end(const Case* c, RefState* rs) {
    if (c->recipe != FP8_RECIPE_DELAYED) return;
    for (int i = 0; i < ENTRIES; i++) rs->hist[(size_t)i * c->H + rs->pos] = rs->step_amax[i];
    rs->pos = (rs->pos + 1) % c->H;
    rs->recorded++;
}

// ----------------------------------------------------------------------------
// one GEMM's comparison: out (M, N) against the FP64 product of the reference operands A (M, K), B (N, K)

typedef struct { double worst; char where[160]; double alt_min; char alt_what[64]; int n; } GemmStats;

// max err/bound of `got` against ref = A B^T + add (add: bias (N) if bias, else old (M, N) or none)
static double gemm_ratio(const std::vector<float>& got, const std::vector<double>& A, const std::vector<double>& B,
                         int M, int N, int K, const std::vector<float>* bias, const std::vector<float>* old, size_t* worst_at) {
    double worst = 0.0;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double ref = 0.0, abs_sum = 0.0;
            const double* a = &A[(size_t)i * K];
            const double* b = &B[(size_t)j * K];
            for (int k = 0; k < K; k++) { ref += a[k] * b[k]; abs_sum += fabs(a[k] * b[k]); }
            size_t o = (size_t)i * N + j;
            double bound = (acc_unit(K) + 3 * 0x1p-23) * abs_sum;
            if (bias) { ref += (*bias)[j]; bound += 0x1p-23 * fabs((*bias)[j]); }
            if (old) { ref += (*old)[o]; bound += 0x1p-23 * fabs((*old)[o]); }
            bound += OUT_U * (fabs(ref) + bound) + 1e-30;
            double r = fabs((double)got[o] - ref) / bound;
            if (r != r) r = 1e30;
            if (r > worst) { worst = r; if (worst_at) *worst_at = o; }
        }
    }
    return worst;
}

// the library's output against the reference, and the two alternatives against the same bound (their
// "outputs": the FP64 product of the unquantized inputs, rounded to floatX, and that of dy quantized in
// the other format), which must exceed it
static void gemm_compare(GemmStats* st, const char* what, const std::vector<float>& got, const std::vector<double>& A,
                         const std::vector<double>& B, const std::vector<double>* A_alt_fmt, const std::vector<double>& A_raw,
                         const std::vector<double>& B_raw, int M, int N, int K, const std::vector<float>* bias,
                         const std::vector<float>* old) {
    size_t at = 0;
    double r = gemm_ratio(got, A, B, M, N, K, bias, old, &at);
    if (r > st->worst || st->n == 0) {
        st->worst = r;
        snprintf(st->where, sizeof(st->where), "%s [%zu,%zu] got %.7g", what, at / N, at % N, got[at]);
    }
    st->n++;
    // the alternatives' outputs as the library would round them (to floatX)
    std::vector<float> alt((size_t)M * N);
    const std::vector<double>* alts[2] = {A_alt_fmt, &A_raw};
    const char* names[2] = {"dy in the other format", "unquantized"};
    for (int a = 0; a < 2; a++) {
        if (alts[a] == NULL) continue;
        const std::vector<double>& AA = *alts[a];
        const std::vector<double>& BB = a == 1 ? B_raw : B;
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < N; j++) {
                double s = 0.0;
                for (int k = 0; k < K; k++) s += AA[(size_t)i * K + k] * BB[(size_t)j * K + k];
                size_t o = (size_t)i * N + j;
                if (bias) s += (*bias)[j];
                if (old) s += (*old)[o];
                alt[o] = (float)(floatX)(float)s;
            }
        }
        double ra = gemm_ratio(alt, A, B, M, N, K, bias, old, NULL);
        if (st->alt_what[0] == '\0' || ra < st->alt_min) { st->alt_min = ra; snprintf(st->alt_what, sizeof(st->alt_what), "%s", names[a]); }
    }
}

// ----------------------------------------------------------------------------
// the library

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

typedef struct { int slot, in, out; } Lin;
static const int BT = 160;  // tokens: not a multiple of 128 (the wgrad's partial 1x128 tiles along BT)
// layer 1 fc, layer 0 attproj; attproj's forward has K = 128 (the block recipe's cuBLASLt path in the
// emulated build), the other GEMMs' K (64, 96, 160) are not multiples of 128 (its fallback)
static const Lin LINS[2] = {{1 * 4 + 2, 64, 96}, {0 * 4 + 1, 128, 64}};

static void run_case(Comm* comm, const Case* c) {
    TPGroup tp = tp_group(comm, 0);
    Fp8Config cfg = {c->recipe, c->e4m3, c->H, c->reduce, c->margin};
    Fp8State st;
    size_t max_elems = 0;
    for (int l = 0; l < 2; l++) {
        size_t e = fp8_max_operand(BT, LINS[l].in, LINS[l].out);
        max_elems = e > max_elems ? e : max_elems;
    }
    fp8_init(&st, cfg, comm, 2, max_elems);
    st.held[0] = st.held[1] = 1;
    int pertensor = c->recipe == FP8_RECIPE_CURRENT || c->recipe == FP8_RECIPE_DELAYED;
    RefState rs;
    rs.scale.assign(ENTRIES, 1.0f);
    rs.hist.assign((size_t)ENTRIES * (c->H > 0 ? c->H : 1), 0.0f);
    rs.step_amax.assign(ENTRIES, 0.0f);
    rs.pos = 0; rs.recorded = 0;
    GemmStats gs[3];
    memset(gs, 0, sizeof(gs));
    const char* GEMM[3] = {"forward", "dgrad", "wgrad"};
    int state_bad = 0;
    char state_msg[256] = "";
    // per step, the magnitudes of x, W, dy: changing, so that a history's scale differs from the tensor's own
    const float mx_[4] = {1.0f, 4.0f, 0.5f, 2.0f}, mw[4] = {0.05f, 0.04f, 0.08f, 0.05f}, mdy[4] = {1e-4f, 2e-5f, 8e-4f, 1e-4f};
    std::vector<float> old[2];  // dW before each step (the accumulated gradient: random, as after other micro-batches)
    for (int step = 0; step < c->steps; step++) {
        std::vector<float> x[2], w[2], b[2], dy[2];
        floatX *xd[2], *wd[2], *bd[2], *yd[2], *dyd[2], *dxd[2], *dwd[2];
        for (int l = 0; l < 2; l++) {
            const Lin& L = LINS[l];
            x[l] = rand_floatx((size_t)BT * L.in, mx_[step % 4] * (l + 1));
            w[l] = rand_floatx((size_t)L.out * L.in, mw[step % 4]);
            b[l] = rand_floatx(L.out, 0.1f);
            dy[l] = rand_floatx((size_t)BT * L.out, mdy[step % 4] / (l + 1));
            old[l] = rand_floatx((size_t)L.out * L.in, 1e-3f);
            xd[l] = to_device(x[l]); wd[l] = to_device(w[l]); bd[l] = to_device(b[l]); dyd[l] = to_device(dy[l]);
            dwd[l] = to_device(old[l]);
            yd[l] = to_device(std::vector<float>((size_t)BT * L.out, NAN));
            dxd[l] = to_device(std::vector<float>((size_t)BT * L.in, NAN));
        }
        // the library: a training step of the two linears
        fp8_step_begin(&st);
        for (int l = 0; l < 2; l++)
            fp8_linear_forward(&st, LINS[l].slot, yd[l], NULL, xd[l], wd[l], bd[l], BT, LINS[l].in, LINS[l].out, &tp, llm_ctx.stream);
        for (int l = 1; l >= 0; l--)
            fp8_linear_backward(&st, LINS[l].slot, dxd[l], dwd[l], NULL, dyd[l], xd[l], wd[l], NULL, NULL, BT, LINS[l].in,
                                LINS[l].out, &tp, llm_ctx.stream);
        fp8_step_end(&st, 0);
        device_synchronize();
        // the reference, the same order
        ref_step_begin(c, &rs);
        std::vector<double> qx[2], qw[2], qwt[2], qdy[2], qdyt[2], qxt[2];
        for (int l = 0; l < 2; l++) {  // forward: x (BT, in), W (out, in)
            const Lin& L = LINS[l];
            int e = L.slot * 3;
            float sx = pertensor ? ref_tensor_scale(c, &rs, e + T_X, FP8_E4M3, ref_amax(x[l].data(), x[l].size())) : 0.0f;
            float sw = pertensor ? ref_tensor_scale(c, &rs, e + T_W, FP8_E4M3, ref_amax(w[l].data(), w[l].size())) : 0.0f;
            qx[l] = ref_quantize(c, T_X, FP8_E4M3, x[l], BT, L.in, sx);
            qw[l] = ref_quantize(c, T_W, FP8_E4M3, w[l], L.out, L.in, sw);
        }
        float sdy_used[2] = {0, 0};
        for (int l = 1; l >= 0; l--) {  // dgrad: dy (BT, out), W^T (in, out); wgrad: dy^T (out, BT), x^T (in, BT)
            const Lin& L = LINS[l];
            int e = L.slot * 3, gf = ref_format(c, T_DY);
            float a_dy = ref_amax(dy[l].data(), dy[l].size());
            float sdy = pertensor ? ref_tensor_scale(c, &rs, e + T_DY, gf, a_dy) : 0.0f;
            float sw = pertensor ? ref_tensor_scale(c, &rs, e + T_W, FP8_E4M3, ref_amax(w[l].data(), w[l].size())) : 0.0f;
            qdy[l] = ref_quantize(c, T_DY, gf, dy[l], BT, L.out, sdy);
            qwt[l] = ref_quantize(c, T_W, FP8_E4M3, transpose(w[l], L.out, L.in), L.in, L.out, sw);
            float sdy2 = pertensor ? ref_tensor_scale(c, &rs, e + T_DY, gf, a_dy) : 0.0f;
            float sx = pertensor ? ref_tensor_scale(c, &rs, e + T_X, FP8_E4M3, ref_amax(x[l].data(), x[l].size())) : 0.0f;
            qdyt[l] = ref_quantize(c, T_DY, gf, transpose(dy[l], BT, L.out), L.out, BT, sdy2);
            qxt[l] = ref_quantize(c, T_X, FP8_E4M3, transpose(x[l], BT, L.in), L.in, BT, sx);
            sdy_used[l] = sdy;
        }
        ref_step_end(c, &rs);
        // compare the outputs
        for (int l = 0; l < 2; l++) {
            const Lin& L = LINS[l];
            int alt_fmt = ref_format(c, T_DY) == FP8_E4M3 ? FP8_E5M2 : FP8_E4M3;
            // the alternative dy: the other format, with the scale that format's recipe would give it
            float alt_s = pertensor ? (c->recipe == FP8_RECIPE_CURRENT || step == 0
                                       ? ref_scale_of(ref_amax(dy[l].data(), dy[l].size()), alt_fmt)
                                       : sdy_used[l] * ref_max(alt_fmt) / ref_max(ref_format(c, T_DY))) : 0.0f;
            std::vector<float> dyt = transpose(dy[l], BT, L.out), xt = transpose(x[l], BT, L.in), wt = transpose(w[l], L.out, L.in);
            std::vector<double> dy_alt = ref_quantize(c, T_DY, alt_fmt, dy[l], BT, L.out, alt_s);
            std::vector<double> dyt_alt = ref_quantize(c, T_DY, alt_fmt, dyt, L.out, BT, alt_s);
            std::vector<double> rx(x[l].begin(), x[l].end()), rw(w[l].begin(), w[l].end()), rdy(dy[l].begin(), dy[l].end());
            std::vector<double> rwt(wt.begin(), wt.end()), rdyt(dyt.begin(), dyt.end()), rxt(xt.begin(), xt.end());
            char what[96];
            snprintf(what, sizeof(what), "step %d slot %d", step + 1, L.slot);
            gemm_compare(&gs[0], what, from_device(yd[l], (size_t)BT * L.out), qx[l], qw[l], NULL, rx, rw, BT, L.out, L.in,
                         &b[l], NULL);
            gemm_compare(&gs[1], what, from_device(dxd[l], (size_t)BT * L.in), qdy[l], qwt[l], &dy_alt, rdy, rwt, BT, L.in,
                         L.out, NULL, NULL);
            gemm_compare(&gs[2], what, from_device(dwd[l], (size_t)L.out * L.in), qdyt[l], qxt[l], &dyt_alt, rdyt, rxt, L.out,
                         L.in, BT, NULL, &old[l]);
            device_free(xd[l]); device_free(wd[l]); device_free(bd[l]); device_free(dyd[l]); device_free(dwd[l]);
            device_free(yd[l]); device_free(dxd[l]);
        }
        // the state after the step
        std::vector<float> scale(ENTRIES);
        copy_to_host(scale.data(), st.scale, ENTRIES * sizeof(float));
        if (st.n != ENTRIES) { state_bad = 1; snprintf(state_msg, sizeof(state_msg), "%d entries, expected %d", st.n, ENTRIES); }
        for (int i = 0; i < ENTRIES && !state_bad; i++) {
            if (memcmp(&scale[i], &rs.scale[i], 4) != 0) {
                state_bad = 1;
                snprintf(state_msg, sizeof(state_msg), "step %d: scale of entry %d (layer %d linear %d %s) %.9g, expected %.9g",
                         step + 1, i, i / 12, i / 3 % 4, TNAME[i % 3], scale[i], rs.scale[i]);
            }
            for (int k = 0; c->recipe == FP8_RECIPE_DELAYED && k < c->H && !state_bad; k++) {
                float got = st.history[(size_t)i * c->H + k], want = rs.hist[(size_t)i * c->H + k];
                if (memcmp(&got, &want, 4) != 0) {
                    state_bad = 1;
                    snprintf(state_msg, sizeof(state_msg), "step %d: amax ring of entry %d (layer %d linear %d %s) [%d] %.9g, "
                             "expected %.9g", step + 1, i, i / 12, i / 3 % 4, TNAME[i % 3], k, got, want);
                }
            }
        }
        if (!state_bad && c->recipe == FP8_RECIPE_DELAYED && (st.pos != rs.pos || st.recorded != rs.recorded)) {
            state_bad = 1;
            snprintf(state_msg, sizeof(state_msg), "step %d: ring position %d, recorded %d; expected %d, %d", step + 1, st.pos,
                     st.recorded, rs.pos, rs.recorded);
        }
    }
    for (int g = 0; g < 3; g++) {
        check(gs[g].worst <= 1.0 && gs[g].alt_min > 1.0,
              "%s %s: %d GEMMs (2 linears x %d steps): max err/bound %.3g (worst %s); alt: %s gives %.3g (must be > 1)",
              c->name, GEMM[g], gs[g].n, c->steps, gs[g].worst, gs[g].where, gs[g].alt_what, gs[g].alt_min);
    }
    if (pertensor) {
        check(!state_bad, "%s: after each of %d steps, the scale of all %d entries%s == the reference, bit for bit%s%s", c->name,
              c->steps, ENTRIES, c->recipe == FP8_RECIPE_DELAYED ? ", their amax rings, ring position and recorded steps" : "",
              state_bad ? ": " : "", state_msg);
    } else {
        check(!state_bad, "%s: the per-tensor scale table untouched (all 1)%s%s", c->name, state_bad ? ": " : "", state_msg);
    }
    fp8_free(&st);
}

// Experts (llm/model/moe.h's FP8 experts): a state of 1 layer with 2 experts, delayed scaling (H = 3, max), each
// expert's fc (slot fp8_expert_slot(0, e, 0)) run forward in the steps where it has rows: expert 0 in every
// step, expert 1 in steps 2 and 4 only (no rows in steps 1 and 3). Against the definition (fp8_linear.h's
// top): an expert without rows in a step leaves its amax history as it was (the ring rotated with the shared
// position: the same amaxes in the same order from pos on), where writing the step's "amax" would put a 0
// into it; an expert first routed to after step 1 (empty history) quantizes with its own amax's scale (current
// scaling), not the initial scale 1; one that has a history, with the history's. Bit for bit (the amaxes are
// exact maxima, the scales one FP32 division).
static void run_experts_case(Comm* comm) {
    TPGroup tp = tp_group(comm, 0);
    const int H = 3, R = 40, IN = 64, OUT = 96;
    Fp8Config cfg = {FP8_RECIPE_DELAYED, 0, H, FP8_AMAX_REDUCE_MAX, 0};
    Fp8State st;
    fp8_init(&st, cfg, comm, 1, fp8_max_operand(R, IN, OUT), 2);
    st.held[0] = 1;
    int bad = 0;
    char msg[256] = "";
    int slot[2] = {fp8_expert_slot(&st, 0, 0, 0), fp8_expert_slot(&st, 0, 1, 0)};
    if (st.n != 24 || slot[0] != 4 || slot[1] != 6) {
        bad = 1;
        snprintf(msg, sizeof(msg), "%d entries, slots %d %d; expected 24 (12 block + 2 experts x 2 linears x 3), 4, 6", st.n, slot[0], slot[1]);
    }
    float ring_before[H], x_amax1[5] = {0, 0, 0, 0, 0};
    for (int step = 1; step <= 4 && !bad; step++) {
        int runs1 = step % 2 == 0;
        float* h1 = st.history + (size_t)(slot[1] * 3 + T_X) * H;
        memcpy(ring_before, h1, sizeof(ring_before));
        int pos_before = st.pos;
        fp8_step_begin(&st);
        for (int e = 0; e < 2; e++) {
            if (e == 1 && !runs1) continue;  // no rows: the layer skips the expert
            std::vector<float> x = rand_floatx((size_t)R * IN, (float)(step + 3 * e)), w = rand_floatx((size_t)OUT * IN, 0.05f);
            floatX *xd = to_device(x), *wd = to_device(w), *yd = to_device(std::vector<float>((size_t)R * OUT, NAN));
            fp8_linear_forward(&st, slot[e], yd, NULL, xd, wd, NULL, R, IN, OUT, &tp, llm_ctx.stream);
            device_synchronize();
            if (e == 1) {  // the scale x was quantized with: its own (empty history) or the history's
                float used;
                copy_to_host(&used, st.scale + slot[1] * 3 + T_X, sizeof(float));
                float hmax = 0.0f;
                for (int k = 0; k < H; k++) hmax = ring_before[k] > hmax ? ring_before[k] : hmax;
                float want = ref_scale_of(hmax > 0.0f ? hmax : ref_amax(x.data(), x.size()), FP8_E4M3);
                if (memcmp(&used, &want, 4) != 0) {
                    bad = 1;
                    snprintf(msg, sizeof(msg), "step %d: expert 1's x scale %.9g, expected %.9g (%s)", step, used, want,
                             hmax > 0.0f ? "from its history" : "its own amax: no history yet");
                }
                x_amax1[step] = ref_amax(x.data(), x.size());
            }
            device_free(xd); device_free(wd); device_free(yd);
        }
        fp8_step_end(&st, 0);
        for (int k = 0; k < H && !bad; k++) {
            float want = runs1 ? (k == pos_before ? x_amax1[step] : ring_before[k]) : ring_before[(k + H - 1) % H];
            if (memcmp(&h1[k], &want, 4) != 0) {
                bad = 1;
                snprintf(msg, sizeof(msg), "step %d (expert 1 %s): its x amax ring [%d] %.9g, expected %.9g", step,
                         runs1 ? "ran" : "had no rows", k, h1[k], want);
            }
        }
    }
    check(!bad, "experts (1 layer x 2, delayed H=%d max): expert 1 without rows in steps 1 and 3 keeps its amax ring (rotated "
          "with the position), quantizes with its own amax's scale in step 2 (no history yet) and its history's in step 4%s%s",
          H, bad ? ": " : "", msg);
    fp8_free(&st);
}

static const char* USAGE =
    "(no arguments)\n"
    "Tests the FP8 linear layer (llm/precision/fp8_linear.h) against a reference of each recipe's operand\n"
    "formats, scales and amax entries over a few training steps.\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    Comm comm;
    comm_init(&comm, &argc, &argv, 0, 1, 1);
    context_init();
    printf("test_fp8_linear: %s, BT %d, linears (slot, in, out) (%d, %d, %d) and (%d, %d, %d)\n", PRECISION_MODE, BT,
           LINS[0].slot, LINS[0].in, LINS[0].out, LINS[1].slot, LINS[1].in, LINS[1].out);
    const Case cases[] = {
        {"current hybrid", FP8_RECIPE_CURRENT, 0, 1, 0, 0, 2},
        {"current e4m3", FP8_RECIPE_CURRENT, 1, 1, 0, 0, 2},
        {"delayed hybrid H=2 max", FP8_RECIPE_DELAYED, 0, 2, FP8_AMAX_REDUCE_MAX, 0, 4},
        {"delayed e4m3 H=3 most_recent margin 1", FP8_RECIPE_DELAYED, 1, 3, FP8_AMAX_REDUCE_MOST_RECENT, 1, 4},
        {"block hybrid", FP8_RECIPE_BLOCK, 0, 1, 0, 0, 1},
        {"mx hybrid", FP8_RECIPE_MX, 0, 1, 0, 0, 1},
    };
    for (const Case& c : cases) run_case(&comm, &c);
    run_experts_case(&comm);
    context_free();
    comm_free(&comm);
    return test_summary("test_fp8_linear");
}
