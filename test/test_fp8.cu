// test_fp8.cu: llm/precision/fp8.cuh's FP8 formats and quantizers, bit for bit against an independent
// reference: test/fp8_reference.py, which recomputes every case with numpy float32 and ml_dtypes'
// float8_e4m3fn / float8_e5m2 rounding. The test writes its cases to a scratch directory, runs the
// script once, and compares the CPU reference (both builds) and the CUDA kernels (emulated build, or a
// GPU) with what it wrote back: the decode of all 256 codes, encode edge cases (zeros, exact ties,
// subnormals, saturation at and beyond max, inf, NaN), and each recipe's scales and codes on random
// tensors of several magnitudes and on the edge cases (amax 0, inf, NaN, tiny amax).
// Built as build/test_fp8_cpu and build/test_fp8_emu; run from the repository root.
#include "../llm/core/common.h"
#include "../llm/precision/fp8.cuh"
#include "test_common.h"
#include "../llm/core/usage.h"
#include <vector>
#include <string>

enum { R_GIVEN = 0, R_CURRENT = 1, R_DELAYED = 2, R_1X128 = 3, R_128X128 = 4, R_MX = 5 };
static const char* FMT_NAME[2] = {"E4M3", "E5M2"};

typedef struct {
    char name[64];
    int recipe, fmt, rows, cols, nsteps, H, reduce, margin;
    float prev_scale;            // recipe 0: the given scale; current: the previous; delayed: unused (1)
    std::vector<float> x;        // (nsteps, rows, cols)
    // filled from ref.bin: per step, the reference scales (bits) and codes
    std::vector<std::vector<uint32_t>> ref_scales;
    std::vector<std::vector<uint8_t>> ref_codes;
} Case;

// ----------------------------------------------------------------------------
// deterministic random numbers (splitmix64)
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rng_u64(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float rng_unit(void) { return (float)((rng_u64() >> 40) * (1.0 / 16777216.0)); }  // [0, 1)
// sign * 2^(uniform in [lo, hi]) * (1 + 7 random mantissa-ish bits): a log-uniform spread
static float rng_logu(float lo, float hi) {
    float e = lo + (hi - lo) * rng_unit();
    float v = exp2f(e) * (1.0f + rng_unit());
    return (rng_u64() & 1) ? -v : v;
}

static Case make_case(const char* name, int recipe, int fmt, int rows, int cols, int nsteps = 1) {
    Case c;
    memset(c.name, 0, sizeof(c.name));
    snprintf(c.name, sizeof(c.name), "%.55s %s", name, FMT_NAME[fmt]);
    c.recipe = recipe; c.fmt = fmt; c.rows = rows; c.cols = cols; c.nsteps = nsteps;
    c.H = 1; c.reduce = 0; c.margin = 0; c.prev_scale = 1.0f;
    c.x.assign((size_t)nsteps * rows * cols, 0.0f);
    return c;
}

// the encode edge cases at scale 1: zeros, every code's value, every tie between neighbouring codes
// and the floats just either side of it, beyond max, inf, NaN, float subnormals
static std::vector<float> edge_values(int fmt) {
    std::vector<float> v = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX, 1e-45f, -1e-45f,
                            1e-40f, 1.17549435e-38f, 2 * fp8_max(fmt), -2 * fp8_max(fmt), 1e30f};
    for (int q = 0; q < 256; q++) v.push_back(fp8_decode((uint8_t)q, fmt));
    int maxcode = fmt == FP8_E4M3 ? 0x7E : 0x7B;
    for (int q = 0; q < maxcode; q++) {  // ties between codes q and q+1, and around them
        float a = fp8_decode((uint8_t)q, fmt), b = fp8_decode((uint8_t)(q + 1), fmt);
        float mid = 0.5f * (a + b);  // exact: neighbours differ in the last FP8 bit
        float pts[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (float p : pts) { v.push_back(p); v.push_back(-p); }
    }
    // at and beyond max: max, the tie with the next step (to even = max for E4M3 ... and for E5M2 the
    // tie rounds to the next binade: still saturated), a float beyond it
    float m = fp8_max(fmt), step = fmt == FP8_E4M3 ? 32.0f : 8192.0f;
    float pts[5] = {m, nextafterf(m, INFINITY), m + step / 2, nextafterf(m + step / 2, INFINITY), m + step};
    for (float p : pts) { v.push_back(p); v.push_back(-p); }
    return v;
}

static void build_cases(std::vector<Case>& cases) {
    for (int fmt = 0; fmt < 2; fmt++) {
        float m = fp8_max(fmt);
        {   // encode itself: scale 1
            std::vector<float> e = edge_values(fmt);
            Case c = make_case("encode edge cases, scale 1", R_GIVEN, fmt, 1, (int)e.size());
            c.x = e;
            cases.push_back(c);
        }
        {   // a given scale on random values across 2^-30 .. 2^20 (subnormals, saturation)
            Case c = make_case("given scale 3 random wide", R_GIVEN, fmt, 16, 200);
            for (auto& v : c.x) v = rng_logu(-30.0f, 20.0f);
            c.prev_scale = 3.0f;
            cases.push_back(c);
        }
        // current scaling
        float mags[4] = {-20.0f, -3.0f, 0.0f, 12.0f};
        for (float mag : mags) {
            char nm[64];
            snprintf(nm, sizeof(nm), "current random 2^%g", mag);
            Case c = make_case(nm, R_CURRENT, fmt, 24, 100);
            for (auto& v : c.x) v = rng_logu(mag - 16.0f, mag);  // the small ones land in subnormals
            c.prev_scale = 0.75f;
            cases.push_back(c);
        }
        {   Case c = make_case("current zeros (amax 0 -> 1)", R_CURRENT, fmt, 4, 64);
            c.x[3] = -0.0f;
            c.prev_scale = 0.5f;
            cases.push_back(c);
        }
        {   Case c = make_case("current with inf (keeps previous)", R_CURRENT, fmt, 4, 64);
            for (auto& v : c.x) v = rng_logu(-4.0f, 4.0f);
            c.x[17] = -INFINITY;
            c.prev_scale = 2.5f;
            cases.push_back(c);
        }
        {   Case c = make_case("current with NaN (keeps previous)", R_CURRENT, fmt, 4, 64);
            for (auto& v : c.x) v = rng_logu(-4.0f, 4.0f);
            c.x[40] = NAN;
            c.prev_scale = 2.5f;
            cases.push_back(c);
        }
        {   Case c = make_case("current tiny amax (scale FLT_MAX)", R_CURRENT, fmt, 2, 32);
            for (auto& v : c.x) v = rng_logu(-140.0f, -130.0f);
            cases.push_back(c);
        }
        {   // amax max/4: scale 4 exactly, so x * 4 hits every tie between codes
            std::vector<float> e = edge_values(fmt);
            std::vector<float> t;
            for (float v : e) if (isfinite(v) && fabsf(v) <= m) t.push_back(v / 4.0f);
            Case c = make_case("current ties at scale 4", R_CURRENT, fmt, 1, (int)t.size());
            c.x = t;
            cases.push_back(c);
        }
        // delayed scaling: 8 steps of changing magnitude with a zero, an inf and a NaN step
        for (int variant = 0; variant < 2; variant++) {
            Case c = make_case(variant == 0 ? "delayed H=4 max margin 0" : "delayed H=3 most-recent margin 1",
                               R_DELAYED, fmt, 8, 64, 8);
            c.H = variant == 0 ? 4 : 3; c.reduce = variant == 0 ? FP8_AMAX_REDUCE_MAX : FP8_AMAX_REDUCE_MOST_RECENT;
            c.margin = variant;
            float step_mag[8] = {0.0f, 3.0f, -2.0f, 0.0f, 8.0f, 0.0f, -6.0f, 1.0f};
            for (int s = 0; s < 8; s++) {
                float* xs = c.x.data() + (size_t)s * 8 * 64;
                if (s == 3) continue;  // all zeros: amax 0 enters the history
                for (int i = 0; i < 8 * 64; i++) xs[i] = rng_logu(step_mag[s] - 10.0f, step_mag[s]);
                if (s == 5) xs[100] = INFINITY;
                if (s == 6) xs[7] = NAN;
            }
            cases.push_back(c);
        }
        // block 1x128: a partial last tile (300 = 2 * 128 + 44); rows of different magnitude;
        // a zero tile, a tile with inf, a tile with NaN
        // (260 rows: the transpose below has two full 128-row tiles and a partial one)
        {   Case c = make_case("block 1x128 random", R_1X128, fmt, 260, 300);
            for (int r = 0; r < 260; r++)
                for (int k = 0; k < 300; k++) c.x[(size_t)r * 300 + k] = rng_logu(-3.0f * (r % 12) - 14.0f, 10.0f - 3.0f * (r % 12));
            for (int k = 0; k < 128; k++) c.x[(size_t)2 * 300 + 128 + k] = 0.0f;
            c.x[(size_t)5 * 300 + 3] = -INFINITY;
            c.x[(size_t)7 * 300 + 290] = NAN;
            cases.push_back(c);
        }
        // the same values transposed: the reference of the transposed 1x128 kernel
        {   Case src = cases.back();
            Case c = make_case("block 1x128 of x^T", R_1X128, fmt, 300, 260);
            for (int r = 0; r < 260; r++)
                for (int k = 0; k < 300; k++) c.x[(size_t)k * 260 + r] = src.x[(size_t)r * 300 + k];
            cases.push_back(c);
        }
        // block 128x128: partial blocks both ways (200 x 260); a zero block and a block with NaN
        {   Case c = make_case("block 128x128 random", R_128X128, fmt, 200, 260);
            for (int r = 0; r < 200; r++)
                for (int k = 0; k < 260; k++) c.x[(size_t)r * 260 + k] = rng_logu(r < 128 ? -18.0f : -2.0f, r < 128 ? 0.0f : 16.0f);
            for (int r = 128; r < 200; r++)
                for (int k = 0; k < 128; k++) c.x[(size_t)r * 260 + k] = 0.0f;
            c.x[(size_t)150 * 260 + 200] = NAN;
            cases.push_back(c);
        }
        // MX: a partial last block (200 = 6 * 32 + 8); blocks of very different magnitude, including
        // huge (1e38) and float-subnormal (clamped E8M0 exponent); a zero, an inf and a NaN block
        {   Case c = make_case("mx random", R_MX, fmt, 10, 200);
            for (int r = 0; r < 10; r++)
                for (int b = 0; b < 7; b++) {
                    float hi = (float)(-40 + 12 * r + 3 * b);
                    for (int k = b * 32; k < b * 32 + 32 && k < 200; k++) c.x[(size_t)r * 200 + k] = rng_logu(hi - 14.0f, hi);
                }
            for (int k = 0; k < 32; k++) c.x[(size_t)1 * 200 + k] = 0.0f;
            for (int k = 32; k < 64; k++) c.x[(size_t)2 * 200 + k] = rng_logu(120.0f, 126.0f);
            for (int k = 64; k < 96; k++) c.x[(size_t)3 * 200 + k] = rng_logu(-148.0f, -135.0f);
            c.x[(size_t)4 * 200 + 100] = INFINITY;
            c.x[(size_t)5 * 200 + 197] = NAN;
            c.x[(size_t)6 * 200 + 10] = 256.0f;  // amax an exact power of two
            for (int k = 0; k < 32; k++) c.x[(size_t)6 * 200 + k] = fminf(fabsf(c.x[(size_t)6 * 200 + k]), 255.0f);
            cases.push_back(c);
        }
        {   // MX at scale 2^0 for every tie: amax 2^emax puts X at 1 exactly
            std::vector<float> e = edge_values(fmt);
            std::vector<float> t;
            for (float v : e) if (isfinite(v) && fabsf(v) < m) t.push_back(v);
            while (t.size() % 32) t.push_back(0.0f);
            for (size_t i = 0; i < t.size(); i += 32) t[i] = (float)(1 << fp8_emax(fmt));  // each block's amax
            Case c = make_case("mx ties at X = 1", R_MX, fmt, 1, (int)t.size());
            c.x = t;
            cases.push_back(c);
        }
    }
}

// ----------------------------------------------------------------------------
// the reference round trip

static void write_cases(const char* path, const std::vector<Case>& cases) {
    FILE* f = fopenCheck(path, "wb");
    int n = (int)cases.size();
    fwriteCheck(&n, 4, 1, f, "cases");
    for (const Case& c : cases) {
        fwriteCheck(c.name, 1, 64, f, "cases");
        int hdr[8] = {c.recipe, c.fmt, c.rows, c.cols, c.nsteps, c.H, c.reduce, c.margin};
        fwriteCheck(hdr, 4, 8, f, "cases");
        fwriteCheck(&c.prev_scale, 4, 1, f, "cases");
        fwriteCheck(c.x.data(), 4, c.x.size(), f, "cases");
    }
    fcloseCheck(f, "cases");
}

static uint32_t g_decode_ref[2][256];
static uint8_t g_overflow_ref[2][4];

static int read_ref(const char* path, std::vector<Case>& cases) {
    FILE* f = fopen(path, "rb");
    if (!f) return 0;
    int ok = 1;
    for (int fmt = 0; fmt < 2; fmt++) {
        ok &= fread(g_decode_ref[fmt], 4, 256, f) == 256;
        ok &= fread(g_overflow_ref[fmt], 1, 4, f) == 4;
    }
    for (Case& c : cases) {
        for (int s = 0; s < c.nsteps && ok; s++) {
            int ns = 0;
            ok &= fread(&ns, 4, 1, f) == 1 && ns >= 0 && ns < (1 << 24);
            if (!ok) break;
            std::vector<uint32_t> sc(ns);
            std::vector<uint8_t> q((size_t)c.rows * c.cols);
            ok &= fread(sc.data(), 4, ns, f) == (size_t)ns;
            ok &= fread(q.data(), 1, q.size(), f) == q.size();
            c.ref_scales.push_back(sc);
            c.ref_codes.push_back(q);
        }
    }
    ok &= fgetc(f) == EOF;
    fclose(f);
    return ok;
}

// ----------------------------------------------------------------------------
// comparisons: one check line each, the first mismatch named

static uint32_t f2u(float x) { return fp8_f2u(x); }

static int check_codes(const char* what, const Case& c, int step, const uint8_t* q, const std::vector<uint8_t>& ref,
                       int rows, int cols) {  // q, ref (rows, cols)
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        if (q[i] != ref[i]) { if (!bad) first = i; bad++; }
    const float* x = c.x.data() + (size_t)step * c.rows * c.cols;
    if (bad && c.rows == rows)  // name the input of the first mismatch (not for transposes)
        return check(0, "%s codes: %s step %d: %zu of %zu differ, first [%zu] x=%.9g got 0x%02x want 0x%02x", what,
                     c.name, step, bad, (size_t)rows * cols, first, x[first], q[first], ref[first]);
    return check(bad == 0, "%s codes: %s step %d: %zu of %zu differ%s", what, c.name, step, bad, (size_t)rows * cols,
                 bad ? "" : " (bit-exact)");
}

static int check_scales_f(const char* what, const Case& c, int step, const float* s, size_t n) {
    const std::vector<uint32_t>& ref = c.ref_scales[step];
    size_t bad = ref.size() == n ? 0 : n + 1, first = 0;
    for (size_t i = 0; i < n && i < ref.size(); i++)
        if (f2u(s[i]) != ref[i]) { if (!bad) first = i; bad++; }
    if (bad)
        return check(0, "%s scales: %s step %d: %zu of %zu differ, first [%zu] got %.9g want %.9g", what, c.name, step,
                     bad, n, first, s[first], fp8_u2f(first < ref.size() ? ref[first] : 0));
    return check(1, "%s scales: %s step %d: %zu bit-exact (first %.9g)", what, c.name, step, n, n ? s[0] : 0.0f);
}

static int check_scales_e8m0(const char* what, const Case& c, const uint8_t* s, size_t n) {
    const std::vector<uint32_t>& ref = c.ref_scales[0];
    size_t bad = ref.size() == n ? 0 : n + 1, first = 0;
    for (size_t i = 0; i < n && i < ref.size(); i++)
        if (s[i] != ref[i]) { if (!bad) first = i; bad++; }
    return check(bad == 0, "%s E8M0 scales: %s: %zu of %zu differ (first [%zu] got %u want %u)", what, c.name, bad, n,
                 first, n ? s[first] : 0, first < ref.size() ? ref[first] : 0);
}

// ----------------------------------------------------------------------------
// the CPU reference of llm/precision/fp8.cuh against the Python reference

static void test_cpu(std::vector<Case>& cases) {
    for (int fmt = 0; fmt < 2; fmt++) {
        size_t bad = 0;
        int first = -1;
        for (int q = 0; q < 256; q++) {
            float d = fp8_decode((uint8_t)q, fmt);
            uint32_t r = g_decode_ref[fmt][q];
            int same = f2u(d) == r || (isnan(d) && isnan(fp8_u2f(r)) && (f2u(d) >> 31) == (r >> 31));
            if (!same) { bad++; if (first < 0) first = q; }
        }
        check(bad == 0, "decode %s: all 256 codes against ml_dtypes: %zu differ (NaN as NaN with its sign)%s",
              FMT_NAME[fmt], bad, first >= 0 ? " first differs" : "");
        // ml_dtypes' own overflow conventions, which ours deviates from for finite values only
        const uint8_t* o = g_overflow_ref[fmt];
        uint8_t want_of = fmt == FP8_E4M3 ? 0x7F : 0x7C;
        check(o[0] == want_of && o[1] == (want_of | 0x80),
              "ml_dtypes %s astype(+-2*max) = 0x%02x 0x%02x (non-saturating: %s); ours saturates to 0x%02x 0x%02x",
              FMT_NAME[fmt], o[0], o[1], fmt == FP8_E4M3 ? "NaN" : "inf", fp8_encode(2 * fp8_max(fmt), fmt),
              fp8_encode(-2 * fp8_max(fmt), fmt));
        check(o[2] == fp8_encode(INFINITY, fmt) && o[3] == fp8_encode(NAN, fmt),
              "%s inf -> 0x%02x, NaN -> 0x%02x: the same as ml_dtypes (0x%02x, 0x%02x)", FMT_NAME[fmt],
              fp8_encode(INFINITY, fmt), fp8_encode(NAN, fmt), o[2], o[3]);
    }
    for (Case& c : cases) {
        size_t n = (size_t)c.rows * c.cols;
        std::vector<uint8_t> q(n);
        if (c.recipe == R_GIVEN || c.recipe == R_CURRENT || c.recipe == R_DELAYED) {
            float prev = c.prev_scale;
            std::vector<float> hist(c.H);
            Fp8DelayedState st;
            fp8_delayed_init(&st, hist.data(), c.H, c.reduce, c.margin);
            for (int s = 0; s < c.nsteps; s++) {
                const float* x = c.x.data() + (size_t)s * n;
                float scale = prev;
                if (c.recipe == R_CURRENT) scale = fp8_current_scale(fp8_amax_cpu(x, n), prev, c.fmt);
                if (c.recipe == R_DELAYED) scale = fp8_delayed_scale(&st, c.fmt);
                fp8_quantize_cpu(q.data(), x, n, scale, c.fmt);
                if (c.recipe == R_DELAYED) fp8_delayed_push(&st, fp8_amax_cpu(x, n));
                check_scales_f("cpu", c, s, &scale, 1);
                check_codes("cpu", c, s, q.data(), c.ref_codes[s], c.rows, c.cols);
            }
            if (c.recipe == R_GIVEN && c.cols > 1000) {  // dequantize: decode / scale, for the encode edge cases
                std::vector<float> dq(n);
                fp8_dequantize_cpu(dq.data(), q.data(), n, c.prev_scale, c.fmt);
                size_t bad = 0;
                for (size_t i = 0; i < n; i++) {
                    float want = fp8_u2f(g_decode_ref[c.fmt][q[i]]) / c.prev_scale;
                    if (f2u(dq[i]) != f2u(want) && !(isnan(dq[i]) && isnan(want))) bad++;
                }
                check(bad == 0, "cpu dequantize: %s: %zu of %zu differ from ml_dtypes' decode / scale", c.name, bad, n);
            }
        } else if (c.recipe == R_1X128 || c.recipe == R_128X128) {
            size_t ns = c.recipe == R_1X128 ? (size_t)c.rows * ((c.cols + 127) / 128)
                                            : (size_t)((c.rows + 127) / 128) * ((c.cols + 127) / 128);
            std::vector<float> sc(ns);
            if (c.recipe == R_1X128) fp8_quantize_1x128_cpu(q.data(), sc.data(), c.x.data(), c.rows, c.cols, c.fmt);
            else fp8_quantize_128x128_cpu(q.data(), sc.data(), c.x.data(), c.rows, c.cols, c.fmt);
            check_scales_f("cpu", c, 0, sc.data(), ns);
            check_codes("cpu", c, 0, q.data(), c.ref_codes[0], c.rows, c.cols);
        } else if (c.recipe == R_MX) {
            size_t ns = (size_t)c.rows * ((c.cols + 31) / 32);
            std::vector<uint8_t> sc(ns);
            fp8_quantize_mx_cpu(q.data(), sc.data(), c.x.data(), c.rows, c.cols, c.fmt);
            check_scales_e8m0("cpu", c, sc.data(), ns);
            check_codes("cpu", c, 0, q.data(), c.ref_codes[0], c.rows, c.cols);
        }
        if (c.recipe == R_CURRENT && c.nsteps == 1 && strncmp(c.name, "current random 2^0", 18) == 0) {
            // the transposed quantize against transposing the reference
            std::vector<uint8_t> qt(n), reft(n);
            float scale = fp8_u2f(c.ref_scales[0][0]);
            fp8_quantize_transpose_cpu(qt.data(), c.x.data(), c.rows, c.cols, scale, c.fmt);
            for (int r = 0; r < c.rows; r++)
                for (int k = 0; k < c.cols; k++) reft[(size_t)k * c.rows + r] = c.ref_codes[0][(size_t)r * c.cols + k];
            check_codes("cpu transpose", c, 0, qt.data(), reft, c.cols, c.rows);
        }
    }
}

// ----------------------------------------------------------------------------
// the CUDA kernels (emulated build, or a GPU) against the same reference
#if LLM_HAS_KERNELS

template <class T>
static T* dev_alloc(size_t n) {  // n elements, filled with 0xFF bytes so that unwritten outputs show
    T* p = NULL;
    cudaCheck(cudaMalloc((void**)&p, n * sizeof(T) > 0 ? n * sizeof(T) : 1));
    cudaCheck(cudaMemset(p, 0xFF, n * sizeof(T)));
    return p;
}
template <class T>
static std::vector<T> to_host(const T* d, size_t n) {
    std::vector<T> h(n);
    cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

static void test_kernels(std::vector<Case>& cases) {
    const Case* transpose_1x128_ref[2] = {NULL, NULL};
    for (Case& c : cases)
        if (c.recipe == R_1X128 && strstr(c.name, "of x^T")) transpose_1x128_ref[c.fmt] = &c;
    for (Case& c : cases) {
        size_t n = (size_t)c.rows * c.cols;
        float* dx = dev_alloc<float>(n);
        uint8_t* dq = dev_alloc<uint8_t>(n);
        if (c.recipe == R_GIVEN || c.recipe == R_CURRENT || c.recipe == R_DELAYED) {
            float* dscale = dev_alloc<float>(1);
            float* damax = dev_alloc<float>(1);
            std::vector<float> hist(c.H);
            Fp8DelayedState st;
            fp8_delayed_init(&st, hist.data(), c.H, c.reduce, c.margin);
            cudaCheck(cudaMemcpy(dscale, &c.prev_scale, 4, cudaMemcpyHostToDevice));
            for (int s = 0; s < c.nsteps; s++) {
                const float* x = c.x.data() + (size_t)s * n;
                cudaCheck(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
                fp8_amax(damax, dx, n, 0);
                float amax = to_host(damax, 1)[0];
                float amax_cpu = fp8_amax_cpu(x, n);
                if (c.recipe != R_GIVEN)
                    check(f2u(amax) == f2u(amax_cpu) || (isnan(amax) && isnan(amax_cpu)),
                          "kernel amax: %s step %d: %.9g (cpu %.9g)", c.name, s, amax, amax_cpu);
                if (c.recipe == R_CURRENT) fp8_current_scale_update(dscale, damax, c.fmt, 0);
                if (c.recipe == R_DELAYED) {
                    float scale = fp8_delayed_scale(&st, c.fmt);  // the history lives on the host here
                    cudaCheck(cudaMemcpy(dscale, &scale, 4, cudaMemcpyHostToDevice));
                    fp8_delayed_push(&st, amax);
                }
                fp8_quantize(dq, dx, dscale, n, c.fmt, 0);
                cudaCheck(cudaDeviceSynchronize());
                float scale = to_host(dscale, 1)[0];
                check_scales_f("kernel", c, s, &scale, 1);
                check_codes("kernel", c, s, to_host(dq, n).data(), c.ref_codes[s], c.rows, c.cols);
            }
            if (c.recipe == R_CURRENT && strncmp(c.name, "current random 2^0", 18) == 0) {
                uint8_t* dqt = dev_alloc<uint8_t>(n);
                fp8_quantize_transpose(dqt, dx, dscale, c.rows, c.cols, c.fmt, 0);
                std::vector<uint8_t> reft(n);
                for (int r = 0; r < c.rows; r++)
                    for (int k = 0; k < c.cols; k++) reft[(size_t)k * c.rows + r] = c.ref_codes[0][(size_t)r * c.cols + k];
                check_codes("kernel transpose", c, 0, to_host(dqt, n).data(), reft, c.cols, c.rows);
                cudaCheck(cudaFree(dqt));
            }
            cudaCheck(cudaFree(dscale));
            cudaCheck(cudaFree(damax));
        } else if (c.recipe == R_1X128 || c.recipe == R_128X128) {
            cudaCheck(cudaMemcpy(dx, c.x.data(), n * 4, cudaMemcpyHostToDevice));
            size_t ns = c.recipe == R_1X128 ? (size_t)c.rows * ((c.cols + 127) / 128)
                                            : (size_t)((c.rows + 127) / 128) * ((c.cols + 127) / 128);
            float* dsc = dev_alloc<float>(ns);
            if (c.recipe == R_1X128) fp8_quantize_1x128(dq, dsc, dx, c.rows, c.cols, c.fmt, 0);
            else fp8_quantize_128x128(dq, dsc, dx, c.rows, c.cols, c.fmt, 0);
            cudaCheck(cudaDeviceSynchronize());
            check_scales_f("kernel", c, 0, to_host(dsc, ns).data(), ns);
            check_codes("kernel", c, 0, to_host(dq, n).data(), c.ref_codes[0], c.rows, c.cols);
            if (c.recipe == R_1X128 && !strstr(c.name, "of x^T") && transpose_1x128_ref[c.fmt]) {
                // the transposed 1x128 quantize of x = the reference's 1x128 quantize of x^T
                const Case& t = *transpose_1x128_ref[c.fmt];
                size_t nst = (size_t)c.cols * ((c.rows + 127) / 128);
                uint8_t* dqt = dev_alloc<uint8_t>(n);
                float* dsct = dev_alloc<float>(nst);
                fp8_quantize_transpose_1x128(dqt, dsct, dx, c.rows, c.cols, c.fmt, 0);
                cudaCheck(cudaDeviceSynchronize());
                check_scales_f("kernel transpose 1x128", t, 0, to_host(dsct, nst).data(), nst);
                check_codes("kernel transpose 1x128", t, 0, to_host(dqt, n).data(), t.ref_codes[0], t.rows, t.cols);
                cudaCheck(cudaFree(dqt));
                cudaCheck(cudaFree(dsct));
            }
            cudaCheck(cudaFree(dsc));
        } else if (c.recipe == R_MX) {
            cudaCheck(cudaMemcpy(dx, c.x.data(), n * 4, cudaMemcpyHostToDevice));
            size_t ns = (size_t)c.rows * ((c.cols + 31) / 32);
            uint8_t* dsc = dev_alloc<uint8_t>(ns);
            fp8_quantize_mx(dq, dsc, dx, c.rows, c.cols, c.fmt, 0);
            cudaCheck(cudaDeviceSynchronize());
            check_scales_e8m0("kernel", c, to_host(dsc, ns).data(), ns);
            check_codes("kernel", c, 0, to_host(dq, n).data(), c.ref_codes[0], c.rows, c.cols);
            cudaCheck(cudaFree(dsc));
        }
        cudaCheck(cudaFree(dx));
        cudaCheck(cudaFree(dq));
    }
}
#endif

static const char* USAGE =
    "(no arguments; run from the repository root)\n"
    "Tests the FP8 formats and quantizers (llm/precision/fp8.cuh) bit for bit against test/fp8_reference.py\n"
    "(numpy and ml_dtypes), which it runs once (FP8_REFERENCE=path overrides the script).\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    (void)argc; (void)argv;
    std::vector<Case> cases;
    build_cases(cases);
    char dir[] = "/tmp/test_fp8_XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    std::string cpath = std::string(dir) + "/cases.bin", rpath = std::string(dir) + "/ref.bin";
    write_cases(cpath.c_str(), cases);
    const char* script = getenv("FP8_REFERENCE") ? getenv("FP8_REFERENCE") : "test/fp8_reference.py";
    std::string cmd = std::string("python3 ") + script + " " + dir + " 2>&1";
    int rc = system(cmd.c_str());
    int have_ref = rc == 0 && read_ref(rpath.c_str(), cases);
    remove(cpath.c_str()); remove(rpath.c_str()); rmdir(dir);
    if (!check(have_ref, "the ml_dtypes reference (%s) ran and wrote every case (exit status %d)%s", script, rc,
               rc == 2 * 256 || rc == 2 ? ": numpy or ml_dtypes missing: run bash scripts/deps.sh test (or python3 -m pip install ml_dtypes)" : ""))
        return test_summary("fp8");
    printf("%zu cases (E4M3 and E5M2)\n", cases.size());
    test_cpu(cases);
#if LLM_HAS_KERNELS
    int ndev = 0;
#if LLM_BUILD_CUDA
    if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
#else
    ndev = 1;
#endif
    if (ndev > 0) test_kernels(cases);
    else skip("fp8 kernels: no GPU here");
#endif
    return test_summary("fp8");
}
