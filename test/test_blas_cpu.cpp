// test_blas_cpu.cpp: the BLAS kernels the CPU build runs on (llm/ops/blas_cpu.h).
//   1. The choice, with the CPU's features and the library's core names as inputs: CPUs of the kinds this
//      project's machines have been (Intel Sapphire Rapids and Skylake-SP Xeons, AMD EPYC Zen 2/3 and Zen 4),
//      older ones, an OS that keeps the AVX-512 registers off, and names the table does not know. Each expected
//      answer is written here from what the kernels need (Cooperlake: AVX-512 F/DQ/CD/BW/VL + BF16; SkylakeX:
//      the five; Haswell/Zen: AVX2 + FMA; Sandybridge: AVX), not computed by the code under test. The rules: a
//      weaker library choice is raised to the CPU's best; an equal or stronger one (a user's) stands; a core the
//      CPU cannot run is never chosen; an unknown name is left alone.
//   2. This machine: cpu_features against /proc/cpuinfo's flags (an independent reading: the kernel's), and
//      after blas_choose_kernels (which re-executes this program once where the library chose weaker kernels)
//      the kernels in use are the best for this CPU, unless the user set OPENBLAS_CORETYPE.
//   3. The peak the MFU divides by (llm/train/mfu.h's mfu_of_step), measured on those kernels (the best run after
//      a first, warm-up, one that never counts: peak_best_ms): a step that beats
//      a peak measured low (here 1 MFLOP/s, as a start-up on busy cores can measure) gets the peak measured again
//      (or its own rate, a lower bound), an MFU of at most 1, one line and one log record; a peak the user gave
//      (--peak-tflops) is kept, however wrong; no peak (the emulated build), no MFU.
//   build/test_blas_cpu [--library-choice | --best-core]   (print the library's own choice, or this CPU's best core,
//                                                          and exit: test/run_tests.sh and test/test_mfu.sh use them)
#include "../llm/core/common.h"
#include "../llm/ops/blas_cpu.h"
#include "../llm/train/mfu.h"
#include "test_common.h"
#include "../llm/core/usage.h"
#include <string>

static const char* USAGE =
    "[--library-choice | --best-core]\n"
    "Tests the choice of OpenBLAS's kernels (llm/ops/blas_cpu.h) and the MFU's peak (llm/train/mfu.h).\n"
    "  --library-choice  print the kernels OpenBLAS chose by itself (no choice made here) and exit\n"
    "  --best-core       print this CPU's best kernels for the library and exit\n";

static CpuFeatures cpu(int avx, int avx2fma, int avx512, int bf16, int amd) {
    CpuFeatures f;
    memset(&f, 0, sizeof(f));
    f.avx = avx;
    f.avx2 = f.fma = avx2fma;
    f.avx512f = f.avx512dq = f.avx512cd = f.avx512bw = f.avx512vl = avx512;
    f.avx512_bf16 = bf16;
    f.amd = amd;
    return f;
}

static void choice(const char* what, const CpuFeatures& f, const char* library, const char* want) {
    const char* got = blas_core_to_force(library, &f);
    int ok = (got == NULL && want == NULL) || (got != NULL && want != NULL && strcmp(got, want) == 0);
    check(ok, "%s, the library chose %s: %s%s (got %s)", what, library, want ? "force " : "leave it", want ? want : "",
          got ? got : "none");
}

int main(int argc, char** argv) {
    usage_if_help(argc, argv, USAGE);
    if (argc > 2 || (argc == 2 && strcmp(argv[1], "--library-choice") != 0 && strcmp(argv[1], "--best-core") != 0)) {
        usage_unknown_flag(argv, argv[argc - 1]);
    }
    if (argc > 1 && strcmp(argv[1], "--library-choice") == 0) {
        printf("%s\n", openblas_get_corename());
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--best-core") == 0) {
        CpuFeatures f = cpu_features();
        printf("%s\n", blas_best_core(&f));
        return 0;
    }
    blas_choose_kernels(argv);  // (may re-execute this program once)

    // 1. the choice
    CpuFeatures spr = cpu(1, 1, 1, 1, 0), skx = cpu(1, 1, 1, 0, 0), hsw = cpu(1, 1, 0, 0, 0), snb = cpu(1, 0, 0, 0, 0);
    CpuFeatures old = cpu(0, 0, 0, 0, 0), zen3 = cpu(1, 1, 0, 0, 1), zen4 = cpu(1, 1, 1, 1, 1);
    CpuFeatures no_zmm = cpu(1, 1, 0, 0, 0);  // AVX-512 in cpuid, the OS keeping ZMM off: cpu_features reports none
    CpuFeatures partial = spr;
    partial.avx512vl = 0;  // AVX-512F without VL (Knights Landing's kind): not SkylakeX's kernels
    choice("Sapphire Rapids (AVX-512 + BF16)", spr, "Prescott", "Cooperlake");
    choice("Sapphire Rapids", spr, "Haswell", "Cooperlake");
    choice("Sapphire Rapids", spr, "SkylakeX", "Cooperlake");
    choice("Sapphire Rapids", spr, "Cooperlake", NULL);
    choice("Sapphire Rapids", spr, "SapphireRapids", NULL);
    choice("Skylake-SP (AVX-512, no BF16)", skx, "Prescott", "SkylakeX");
    choice("Skylake-SP", skx, "Haswell", "SkylakeX");
    choice("Skylake-SP", skx, "SkylakeX", NULL);
    choice("Skylake-SP, a user's Cooperlake", skx, "Cooperlake", NULL);
    choice("Haswell (AVX2 + FMA)", hsw, "Prescott", "Haswell");
    choice("Haswell", hsw, "Haswell", NULL);
    choice("Haswell", hsw, "Zen", NULL);
    choice("AMD EPYC Zen 3 (AVX2 + FMA)", zen3, "Zen", NULL);
    choice("AMD EPYC Zen 3", zen3, "Prescott", "Zen");
    choice("AMD EPYC Zen 3", zen3, "Barcelona", "Zen");
    choice("AMD EPYC Zen 4 (AVX-512 + BF16)", zen4, "Zen", "Cooperlake");
    choice("Sandy Bridge (AVX)", snb, "Prescott", "Sandybridge");
    choice("Sandy Bridge", snb, "Sandybridge", NULL);
    choice("a CPU without AVX", old, "Prescott", NULL);
    choice("a CPU without AVX", old, "Core2", NULL);
    choice("AVX-512 with the OS keeping its registers off", no_zmm, "Haswell", NULL);
    choice("AVX-512F without VL", partial, "Haswell", NULL);
    choice("Sapphire Rapids, a name the table does not know", spr, "EmeraldRapids", NULL);
    choice("Sapphire Rapids, an ARM library's name", spr, "NEOVERSEN1", NULL);
    check(blas_core_level("prescott") == 0 && blas_core_level("COOPERLAKE") == 4, "core names are matched without case");

    // 2. this machine
    FILE* fp = fopen("/proc/cpuinfo", "r");
    if (fp == NULL) {
        printf("skip /proc/cpuinfo: not readable here\n");
    } else {
        std::string flags, vendor;
        char line[8192];
        while (fgets(line, sizeof(line), fp) != NULL && (flags.empty() || vendor.empty())) {
            if (strncmp(line, "flags", 5) == 0 && flags.empty()) flags = std::string(" ") + (strchr(line, ':') + 1);
            if (strncmp(line, "vendor_id", 9) == 0 && vendor.empty()) vendor = strchr(line, ':') + 1;
        }
        fclose(fp);
        for (char& ch : flags) if (ch == '\n') ch = ' ';
        auto has = [&](const char* f) { return flags.find(std::string(" ") + f + " ") != std::string::npos; };
        CpuFeatures f = cpu_features();
        struct { const char* flag; int got; } pairs[] = {{"avx", f.avx}, {"avx2", f.avx2}, {"fma", f.fma}, {"avx512f", f.avx512f},
                                                      {"avx512dq", f.avx512dq}, {"avx512cd", f.avx512cd}, {"avx512bw", f.avx512bw},
                                                      {"avx512vl", f.avx512vl}, {"avx512_bf16", f.avx512_bf16}};
        int same = 1;
        char seen[512] = "";
        for (auto& p : pairs) {
            if (has(p.flag) != (p.got != 0)) same = 0;
            if (p.got) snprintf(seen + strlen(seen), sizeof(seen) - strlen(seen), " %s", p.flag);
        }
        same = same && (f.amd != 0) == (vendor.find("AuthenticAMD") != std::string::npos);
        check(same, "cpu_features = /proc/cpuinfo's flags and vendor:%s%s", seen, f.amd ? " (AMD)" : "");
        const char* best = blas_best_core(&f);
        const char* now = openblas_get_corename();
        const char* user = getenv("OPENBLAS_CORETYPE");
        if (user != NULL && getenv("LLM_BLAS_FORCED") == NULL) {
            check(strcasecmp(now, user) == 0, "the user's OPENBLAS_CORETYPE=%s is what runs: %s", user, now);
        } else {
            check(strcasecmp(now, best) == 0, "the kernels in use are this CPU's best: %s (%s)%s", now, best,
                  getenv("LLM_BLAS_FORCED") ? ", forced by blas_choose_kernels" : ", the library's own choice");
        }
    }
    // 3. the peak the MFU divides by
    {   // the runs it is measured from: the first (the library's setup) never counts, the best of the others does
        double slow_first[6] = {40.0, 2.0, 1.5, 1.7, 1.6, 1.9}, fast_first[6] = {0.5, 2.0, 1.5, 1.7, 1.6, 1.9};
        double a = peak_best_ms(slow_first, 6), b = peak_best_ms(fast_first, 6);
        check(a == 1.5 && b == 1.5, "the peak's time: the best of the runs after the first, whatever the first "
              "took (a cold first run of 40 ms: %g ms; a first run that timed faster, 0.5 ms: %g ms; want 1.5)", a, b);
    }
    {
        char path[] = "/tmp/test_blas_cpu_logXXXXXX";
        int fd = mkstemp(path);
        if (fd < 0) fatal("mkstemp failed: %s", strerror(errno));
        close(fd);
        Logger lg;
        logger_init(&lg, path, 0);
        double fpt = 1e6, tok_s = 1e3;            // a step of 1 GFLOP/s: 1000 x the low peak
        MfuPeak low = {1e-6, 512};                // 1 MFLOP/s, "measured" at start-up
        double mfu = mfu_of_step(&low, fpt, tok_s, 1, &lg, 0, 7);
        MfuPeak fast = {1e-6, 512};               // a step of 1000 TFLOP/s, past any peak this CPU measures
        double mfu_fast = mfu_of_step(&fast, fpt, 1e9, 1, NULL, 0, 6);
        MfuPeak given = {1e-6, 0};                // --peak-tflops 0.000001
        double mfu_given = mfu_of_step(&given, fpt, tok_s, 1, &lg, 0, 8);
        MfuPeak none = {0.0, 0};
        double mfu_none = mfu_of_step(&none, fpt, tok_s, 1, &lg, 0, 9);
        logger_free(&lg);
        FILE* lf = fopen(path, "r");
        char rec[512] = "";
        int records = 0;
        while (lf != NULL && fgets(rec + (records ? strlen(rec) : 0), (int)(sizeof(rec) - strlen(rec)), lf) != NULL) records++;
        if (lf != NULL) fclose(lf);
        remove(path);
        check(mfu > 0.0 && mfu <= 1.0 && low.tflops >= 1e-3 && records == 1 && strstr(rec, "\"step\": 7, \"peak_tflops\"") != NULL,
              "a step 1000 x faster than a peak measured low: MFU %.3f (<= 1), the peak now %.3g TFLOP/s, %d log record: %.100s", mfu,
              low.tflops, records, rec);
        check(fabs(mfu_fast - 1.0) < 1e-9 && fabs(fast.tflops - 1000.0) < 1e-6, "a step faster than the peak measured again: "
              "its own rate is the peak (a lower bound), %.4g TFLOP/s, MFU %.3f", fast.tflops, mfu_fast);
        check(fabs(mfu_given - 1000.0) < 1e-6 && given.tflops == 1e-6, "a peak the user gave is kept: MFU %.0f", mfu_given);
        check(isnan(mfu_none), "no peak (the emulated build): no MFU");
    }
    return test_summary("test_blas_cpu");
}
