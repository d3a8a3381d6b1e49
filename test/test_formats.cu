// test_formats.cu: round trips of the file formats, byte for byte: an llm.c FP32 checkpoint loaded
// and saved again is the same file; a BF16 (version 5) checkpoint written, read and written again is
// the same file and holds the FP32 values rounded to nearest-even bf16; the resumable state written,
// read and written again is the same file. Temporary files go to argv[1] (a scratch directory).
#include "../llm/common.h"
#include "../llm/checkpoint.h"
#include "test_common.h"

#ifndef FIXTURES
#define FIXTURES "test/fixtures"
#endif

static int same_bytes(const char* a, const char* b) {
    FILE* fa = fopenCheck(a, "rb");
    FILE* fb = fopenCheck(b, "rb");
    int same = 1, ca, cb;
    do {
        ca = fgetc(fa);
        cb = fgetc(fb);
        if (ca != cb) { same = 0; break; }
    } while (ca != EOF);
    fclose(fa);
    fclose(fb);
    return same;
}

int main(int argc, char** argv) {
    const char* dir = argc > 1 ? argv[1] : "/tmp";
    char p1[512], p2[512], p3[512];
    GPTConfig cfg, cfg2;

    // FP32 llm.c checkpoint: load -> save -> identical bytes
    float* params = checkpoint_load(FIXTURES "/tiny_model.bin", &cfg);
    snprintf(p1, sizeof(p1), "%s/roundtrip_v3.bin", dir);
    checkpoint_save(p1, cfg, params, 3);
    check(same_bytes(FIXTURES "/tiny_model.bin", p1), "llm.c v3 checkpoint: load + save gives identical bytes");

    // BF16 (version 5): save -> load -> save gives identical bytes, values are the bf16 rounding
    snprintf(p2, sizeof(p2), "%s/roundtrip_v5a.bin", dir);
    snprintf(p3, sizeof(p3), "%s/roundtrip_v5b.bin", dir);
    checkpoint_save(p2, cfg, params, 5);
    float* bf = checkpoint_load(p2, &cfg2);
    checkpoint_save(p3, cfg2, bf, 5);
    check(same_bytes(p2, p3), "llm.c v5 (bf16) checkpoint: save + load + save gives identical bytes");
    size_t n = num_parameters(cfg);
    int rounding_ok = 1;
    for (size_t i = 0; i < n; i++) {
        // nearest-even bf16 (8 significant bits) is within half a unit in the last place: |x - bf| <= 2^-8 |x|
        if (fabsf(bf[i] - params[i]) > ldexpf(fabsf(params[i]), -8)) rounding_ok = 0;
    }
    check(rounding_ok && memcmp(&cfg, &cfg2, sizeof(cfg)) == 0, "llm.c v5: config kept, values within bf16 rounding");
    // the bf16 rounding is round-to-nearest-even on hand-picked values
    check(bf16_bits_from_float(1.0f) == 0x3f80 && bf16_bits_from_float(1.00390625f) == 0x3f80 &&
          bf16_bits_from_float(1.01171875f) == 0x3f82 && bf16_bits_from_float(-2.0f) == 0xc000,
          "bf16 rounding: ties go to even");

    // resumable state: save -> load -> save gives identical bytes and the same fields
    TrainState ts = {42, 41, {3, 1234567}, 0x0123456789abcdefull}, ts2;
    float* m = (float*)mallocCheck(n * sizeof(float));
    float* v = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { m[i] = params[i] * 0.5f; v[i] = params[i] * params[i]; }
    snprintf(p1, sizeof(p1), "%s/state_a.bin", dir);
    snprintf(p2, sizeof(p2), "%s/state_b.bin", dir);
    state_save(p1, cfg, &ts, params, m, v, NULL);
    float *p_, *m_, *v_, *p16_;
    state_load(p1, cfg, &ts2, &p_, &m_, &v_, &p16_);
    state_save(p2, cfg, &ts2, p_, m_, v_, NULL);
    check(same_bytes(p1, p2) && p16_ == NULL, "resumable state: save + load + save gives identical bytes");
    {  // with the BF16 parameters of a BF16 build: saved and read back exactly
        float* p16 = (float*)mallocCheck(n * sizeof(float));
        for (size_t i = 0; i < n; i++) p16[i] = bf16_bits_to_float(bf16_bits_from_float(params[i] * 1.5f));
        snprintf(p2, sizeof(p2), "%s/state_c.bin", dir);
        state_save(p2, cfg, &ts, params, m, v, p16);
        float *a, *b, *c, *d;
        state_load(p2, cfg, &ts2, &a, &b, &c, &d);
        check(d != NULL && memcmp(d, p16, n * sizeof(float)) == 0 && memcmp(a, params, n * sizeof(float)) == 0,
              "resumable state with BF16 parameters: the FP32 master and the %zu BF16 values read back exactly", n);
        free(p16); free(a); free(b); free(c); free(d);
    }
    check(ts2.step == 42 && ts2.adam_t == 41 && ts2.data.epoch == 3 && ts2.data.sample == 1234567 &&
          ts2.rng == 0x0123456789abcdefull && memcmp(p_, params, n * 4) == 0 && memcmp(m_, m, n * 4) == 0 &&
          memcmp(v_, v, n * 4) == 0, "resumable state: every field read back");
    free(params); free(bf); free(m); free(v); free(p_); free(m_); free(v_);
    return test_summary("test_formats");
}
