// test_formats.cu: round trips of the file formats, byte for byte: an llm.c FP32 checkpoint loaded
// and saved again is the same file but for the checksum in header slots 253..255 (which llm.c leaves 0
// and does not read); a BF16 (version 5) checkpoint written, read and written again is the same file and
// holds the FP32 values rounded to nearest-even bf16; the resumable state written, read and written
// again is the same file; a state file with one byte changed anywhere is refused by its checksum.
// Temporary files go to argv[1] (a scratch directory).
#include "../llm/core/common.h"
#include "../llm/ckpt/checkpoint.h"
#include "test_common.h"
#include "../llm/core/usage.h"

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

static const char* USAGE =
    "[DIR]   (run from the repository root: it reads test/fixtures/)\n"
    "Tests the file formats' round trips byte for byte (llm.c FP32 and BF16 checkpoints, the resumable\n"
    "state) and that a state file with a changed byte is refused by its checksum.\n"
    "  DIR  scratch directory for the files it writes (default /tmp)\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    const char* dir = argc > 1 ? argv[1] : "/tmp";
    char p1[512], p2[512], p3[512];
    GPTConfig cfg, cfg2;

    // FP32 llm.c checkpoint: load -> save -> identical bytes
    float* params = checkpoint_load(FIXTURES "/tiny_model.bin", &cfg);
    snprintf(p1, sizeof(p1), "%s/roundtrip_v3.bin", dir);
    AtomicFile af;
    check(checkpoint_save(&af, p1, cfg, params, 3, -1, 0), "llm.c v3 checkpoint saved");
    {  // the same bytes but header[253..255]: the fixture (written by llm.c) has none, the copy its checksum
        FILE* fa = fopenCheck(FIXTURES "/tiny_model.bin", "rb");
        FILE* fb = fopenCheck(p1, "rb");
        int differ = 0, ca, cb, sum_mark = 0;
        for (long i = 0;; i++) {
            ca = fgetc(fa); cb = fgetc(fb);
            if (i >= 4 * MODEL_SUM_SLOT && i < 4 * (MODEL_SUM_SLOT + 3)) { sum_mark |= cb != 0; continue; }
            if (ca != cb) { differ = 1; break; }
            if (ca == EOF) break;
        }
        fclose(fa); fclose(fb);
        check(!differ && sum_mark, "llm.c v3 checkpoint: load + save gives identical bytes but the checksum slots 253..255 (set)");
    }

    // BF16 (version 5): save -> load -> save gives identical bytes, values are the bf16 rounding
    snprintf(p2, sizeof(p2), "%s/roundtrip_v5a.bin", dir);
    snprintf(p3, sizeof(p3), "%s/roundtrip_v5b.bin", dir);
    checkpoint_save(&af, p2, cfg, params, 5, -1, 0);
    float* bf = checkpoint_load(p2, &cfg2);
    checkpoint_save(&af, p3, cfg2, bf, 5, -1, 0);
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
    TrainState ts, ts2;
    memset(&ts, 0, sizeof(ts));
    ts.step = 42; ts.adam_t = 40; ts.data.epoch = 3; ts.data.sample = 1234567; ts.rng = 0x0123456789abcdefull;
    ts.bad_skipped = 2; ts.verdict = CKPT_HEALTHY;
    ts.beta1 = 0.8f; ts.beta2 = 0.999f; ts.eps = 1e-6f;  // not the defaults, so a reader that forgets them shows it
    float* m = (float*)mallocCheck(n * sizeof(float));
    float* v = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { m[i] = params[i] * 0.5f; v[i] = params[i] * params[i]; }
    snprintf(p1, sizeof(p1), "%s/state_a.bin", dir);
    snprintf(p2, sizeof(p2), "%s/state_b.bin", dir);
    state_save(&af, p1, cfg, &ts, params, m, v, NULL, -1, 0);
    LoadedState st;
    char why[600];
    int ok = state_read(p1, cfg, &st, why, sizeof(why));
    check(ok && st.verified, "resumable state read back, its checksum verified%s%s", ok ? "" : ": ", ok ? "" : why);
    if (!ok) return test_summary("test_formats");
    ts2 = st.ts;
    state_save(&af, p2, cfg, &ts2, st.params, st.m, st.v, NULL, -1, 0);
    check(same_bytes(p1, p2) && st.params16 == NULL, "resumable state: save + load + save gives identical bytes");
    check(ts2.step == 42 && ts2.adam_t == 40 && ts2.bad_skipped == 2 && ts2.data.epoch == 3 && ts2.data.sample == 1234567 &&
          ts2.rng == 0x0123456789abcdefull && ts2.beta1 == 0.8f && ts2.beta2 == 0.999f && ts2.eps == 1e-6f && memcmp(st.params, params, n * 4) == 0 && memcmp(st.m, m, n * 4) == 0 &&
          memcmp(st.v, v, n * 4) == 0, "resumable state: every field read back");
    loaded_state_free(&st);
    {  // with the BF16 parameters of a BF16 build: saved and read back exactly
        float* p16 = (float*)mallocCheck(n * sizeof(float));
        for (size_t i = 0; i < n; i++) p16[i] = bf16_bits_to_float(bf16_bits_from_float(params[i] * 1.5f));
        snprintf(p2, sizeof(p2), "%s/state_c.bin", dir);
        ts.params16_kind = 1;
        state_save(&af, p2, cfg, &ts, params, m, v, p16, -1, 0);
        ok = state_read(p2, cfg, &st, why, sizeof(why));
        check(ok && st.params16 != NULL && memcmp(st.params16, p16, n * sizeof(float)) == 0 && memcmp(st.params, params, n * sizeof(float)) == 0,
              "resumable state with BF16 parameters: the FP32 master and the %zu BF16 values read back exactly", n);
        if (ok) loaded_state_free(&st);
        free(p16);
    }
    {  // one byte changed, at 20 places spread over the file (header, arrays, last byte): refused, by the checksum
        FILE* f = fopenCheck(p1, "rb");
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fclose(f);
        int refused = 0, tried = 0;
        for (int k = 0; k < 20; k++) {
            long at = k == 0 ? 4 * 40 : (k == 19 ? size - 1 : 1024 + (size - 1024) / 19 * k);  // (header[40]: a slot nobody reads)
            snprintf(p3, sizeof(p3), "%s/state_flip.bin", dir);
            FILE* in = fopenCheck(p1, "rb");
            FILE* out = fopenCheck(p3, "wb");
            for (long i = 0; i < size; i++) { int c = fgetc(in); fputc(i == at ? c ^ 0x10 : c, out); }
            fclose(in); fclose(out);
            tried++;
            if (state_read(p3, cfg, &st, why, sizeof(why))) loaded_state_free(&st);
            else if (strstr(why, "checksum") != NULL) refused++;
        }
        check(refused == tried, "a state file with one bit flipped: refused by its checksum at %d of %d places (%s)", refused, tried, why);
    }
    free(params); free(bf); free(m); free(v);
    return test_summary("test_formats");
}
