// bench_checkpoint.cu: what checking a checkpoint costs (llm/ckpt/checkpoint.h, llm/core/atomic_file.h). The state of a
// model of the given size (default GPT-2 124M: d12) is saved the way the trainer saves a gathered checkpoint
// (llm.c's model file, then the resumable state: FP32 parameters, m, v; each through a temporary name,
// fsynced, renamed) and read back, with the checksums and without them:
//   save   with: every byte summed (by a second thread, beside the writes) and the sum sealed into the
//          header: what the trainer does; without: the same writes, nothing summed
//   load   with: state_read, every byte summed as it is read (a second thread following the reads) and
//          compared: what a resume does; without: the same freads of the same bytes, nothing summed
// and the checksum alone over the same bytes on one core (what it would cost done inline).
// Each is run --reps times, alternating, in one process on one core; the medians and their ratio are
// printed. The reads come from the page cache (the files were just written): a read from a cold disk is
// slower, and the checksum's share of it smaller.
//   make build/bench_checkpoint && ./build/bench_checkpoint [--model d12] [--dir /tmp] [--reps 3]
#include "../llm/core/common.h"
#include "../llm/model/units.h"
#include "../llm/ckpt/checkpoint.h"
#include "../llm/core/usage.h"

static const char* USAGE =
    "[--model DESCRIPTOR] [--dir DIR] [--reps N]\n"
    "Times a checkpoint's save and load with and without the checksums (and the checksum alone), one core.\n"
    "  --model DESCRIPTOR  the model whose state is saved, e.g. d12 or d2,C=32,NH=4,maxT=64,V=257 (default d12)\n"
    "  --dir DIR           where the checkpoint files are written, then removed (default /tmp)\n"
    "  --reps N            runs of each, alternating, 1 to 100; the medians are printed (default 3)\n";

static double median(double* x, int n) {
    for (int i = 1; i < n; i++) for (int j = i; j > 0 && x[j] < x[j - 1]; j--) { double t = x[j]; x[j] = x[j - 1]; x[j - 1] = t; }
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

// the gathered save: model file and state file; sum 0: the same bytes through the same writer, unsummed
static double save(const char* dir, GPTConfig cfg, const TrainState* ts, const float* p, const float* m, const float* v, int sum) {
    char mpath[1100], spath[1100];
    snprintf(mpath, sizeof(mpath), "%s/bench_model.bin", dir);
    snprintf(spath, sizeof(spath), "%s/bench_state.bin", dir);
    double t0 = wall_ms();
    AtomicFile af;
    if (sum) {
        if (!checkpoint_save(&af, mpath, cfg, p, 3, -1, 0) || !state_save(&af, spath, cfg, ts, p, m, v, NULL, -1, 0)) fatal("%s", af.why);
    } else {
        size_t n = num_parameters(cfg);
        int h[HEADER_INTS];
        state_header_fill(h, cfg, ts, STATE_MAGIC, STATE_VERSION, 0);
        af_open(&af, mpath, -1, 0);
        af.summing = 0;
        af_write(&af, h, sizeof(h));
        af_write(&af, p, n * sizeof(float));
        af_close_or_die(&af);
        af_open(&af, spath, -1, 0);
        af.summing = 0;
        af_write(&af, h, sizeof(h));
        af_write(&af, p, n * sizeof(float));
        af_write(&af, m, n * sizeof(float));
        af_write(&af, v, n * sizeof(float));
        af_close_or_die(&af);
    }
    return wall_ms() - t0;
}

static double load(const char* dir, GPTConfig cfg, int sum) {
    char spath[1100], why[600];
    snprintf(spath, sizeof(spath), "%s/bench_state.bin", dir);
    double t0 = wall_ms();
    if (sum) {
        LoadedState st;
        if (!state_read(spath, cfg, &st, why, sizeof(why))) fatal("%s: %s", spath, why);
        loaded_state_free(&st);
    } else {  // the same reads as state_read's (the header, then each array in chunks), nothing summed
        size_t n = num_parameters(cfg);
        FILE* f = fopenCheck(spath, "rb");
        int h[HEADER_INTS];
        freadCheck(h, sizeof(int), HEADER_INTS, f, spath);
        float* a[3];
        for (int k = 0; k < 3; k++) {
            a[k] = (float*)mallocCheck(n * sizeof(float));
            for (size_t off = 0; off < n * sizeof(float); off += SUM_JOB_CHUNK) {
                size_t len = n * sizeof(float) - off < SUM_JOB_CHUNK ? n * sizeof(float) - off : SUM_JOB_CHUNK;
                freadCheck((char*)a[k] + off, 1, len, f, spath);
            }
        }
        fcloseCheck(f, spath);
        for (int k = 0; k < 3; k++) free(a[k]);
    }
    return wall_ms() - t0;
}

int main(int argc, char** argv) {
    const char* model = "d12";
    const char* dir = "/tmp";
    int reps = 3;
    usage_if_help(argc, argv, USAGE);
    for (int i = 1; i < argc; i += 2) {  // every argument is a flag and its value (a lone last one too)
        const char* a = argv[i];
        if (strcmp(a, "--model") && strcmp(a, "--dir") && strcmp(a, "--reps")) usage_unknown_flag(argv, a);
        if (i + 1 >= argc) fatal("%s needs a value", a);
        if (!strcmp(a, "--model")) model = argv[i + 1];
        else if (!strcmp(a, "--dir")) dir = argv[i + 1];
        else reps = atoi(argv[i + 1]);
    }
    if (reps < 1 || reps > 100) fatal("--reps: expected 1 to 100, found %d", reps);
    GPTConfig cfg;
    if (!gpt_config_from_descriptor(model, &cfg)) fatal("--model: expected a descriptor like d12, found '%s'", model);
    size_t n = num_parameters(cfg);
    float* p = (float*)mallocCheck(n * sizeof(float));
    float* m = (float*)mallocCheck(n * sizeof(float));
    float* v = (float*)mallocCheck(n * sizeof(float));
    init_parameters(cfg, 1337, p);
    for (size_t i = 0; i < n; i++) { m[i] = 1e-3f * p[i]; v[i] = 1e-6f * p[i] * p[i]; }
    TrainState ts;
    memset(&ts, 0, sizeof(ts));
    ts.step = 1; ts.adam_t = 1;
    ts.beta1 = 0.9f; ts.beta2 = 0.95f; ts.eps = 1e-8f;
    double gb = (double)(HEADER_INTS * 4 * 2 + 4 * n * sizeof(float)) / 1e9;
    printf("checkpoint of %s: %.1fM parameters, %.2f GB per save (model + state files, FP32) in %s, %d repetitions\n", model,
           n / 1e6, gb, dir, reps);
    double* t[4];
    for (int k = 0; k < 4; k++) t[k] = (double*)mallocCheck((size_t)reps * sizeof(double));
    for (int r = 0; r < reps; r++) {  // alternating, so that a drift of the disk or the cache falls on both
        t[0][r] = save(dir, cfg, &ts, p, m, v, 0);
        t[2][r] = load(dir, cfg, 0);
        t[1][r] = save(dir, cfg, &ts, p, m, v, 1);
        t[3][r] = load(dir, cfg, 1);
        printf("  rep %d: save %.0f ms without checksum, %.0f ms with | load %.0f ms without, %.0f ms with\n", r + 1, t[0][r],
               t[1][r], t[2][r], t[3][r]);
    }
    // the checksum alone, on one core, over the bytes of one save (its cost if it were computed inline)
    double t0 = wall_ms();
    CkptSum cs;
    ckpt_sum_init(&cs);
    ckpt_sum_add(&cs, p, n * sizeof(float));
    ckpt_sum_add(&cs, p, n * sizeof(float));
    ckpt_sum_add(&cs, m, n * sizeof(float));
    ckpt_sum_add(&cs, v, n * sizeof(float));
    volatile uint64_t sink = ckpt_sum_final(&cs);
    (void)sink;
    double sum_ms = wall_ms() - t0;
    double s0 = median(t[0], reps), s1 = median(t[1], reps), l0 = median(t[2], reps), l1 = median(t[3], reps);
    printf("the checksum alone over one save's bytes, on one core: %.0f ms (%.1f GB/s), %.1f%% of the median save without it\n", sum_ms,
           gb / (sum_ms / 1e3), 100.0 * sum_ms / s0);
    printf("median save: %.0f ms without the checksum, %.0f ms with (%+.1f%%, %.2f GB/s)\n", s0, s1, 100.0 * (s1 / s0 - 1.0), gb / (s1 / 1e3));
    printf("median load: %.0f ms without the checksum, %.0f ms with (%+.1f%%; the checksum's time is %.1f%% of the save's)\n", l0, l1,
           100.0 * (l1 / l0 - 1.0), 100.0 * (l1 - l0) / s1);
    char path[1100];
    snprintf(path, sizeof(path), "%s/bench_model.bin", dir); remove(path);
    snprintf(path, sizeof(path), "%s/bench_state.bin", dir); remove(path);
    free(p); free(m); free(v);
    for (int k = 0; k < 4; k++) free(t[k]);
    return 0;
}
