// blas_cpu.h: the BLAS kernels the CPU build's products run on (llm/ops/matmul_cpu.h: OpenBLAS's sgemm and
// sbgemm), the best this CPU has, without the user doing anything.
//
// OpenBLAS built with DYNAMIC_ARCH (Debian's is) picks one kernel set ("core") when it loads, from the CPU's
// model numbers. A CPU newer than the library (Debian 12's 0.3.21 and this project's Xeons of the Sapphire and
// Emerald Rapids kind: family 6 model 207 on 2026-11-28) is not recognised, and the library falls back to its generic x86-64 kernels,
// "Prescott" (SSE3): sgemm measured 37-48 GFLOP/s at 2 threads there, against 269-299 with the Cooperlake
// kernels (AVX-512 and AVX512-BF16) the same library has. The library reads OPENBLAS_CORETYPE when it loads,
// before main, so the choice is made by re-executing once:
//
//   1. the CPU's features (cpuid, with the OS's consent to the AVX and AVX-512 registers: xgetbv) give the
//      best core this library has for them (blas_best_core: Cooperlake > SkylakeX > Haswell/Zen > Sandybridge
//      > Prescott, each needing the instructions of its kernels);
//   2. if the library's own choice (openblas_get_corename) is weaker (blas_core_level) and the user set no
//      OPENBLAS_CORETYPE, the process re-executes itself (/proc/self/exe, the same arguments, before MPI or
//      anything else starts: under mpirun each rank does, its pid and environment kept) with
//      OPENBLAS_CORETYPE set, and says so in one line (rank 0);
//   3. a core the CPU lacks the instructions for is never chosen (a weaker library choice is only raised to
//      what the features allow), nor is a user's OPENBLAS_CORETYPE overridden.
// The run's header names the library, its kernels and whether they were forced (blas_describe), beside the
// peak measured on them (llm/train/mfu.h). Checked: test/test_blas_cpu.cpp (the choice for CPUs of many kinds
// and the library's core names as inputs), test/test_mfu.sh (the header's kernels on this machine = the best
// for its /proc/cpuinfo flags, computed by the test itself).
#pragma once
#include "../core/common.h"
#include <errno.h>
#include <strings.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

// the instruction sets the kernels need, as this CPU and OS allow them
typedef struct {
    int avx, avx2, fma;                                  // AVX with the OS saving the YMM registers
    int avx512f, avx512dq, avx512cd, avx512bw, avx512vl;  // and the ZMM registers (SkylakeX's kernels: all five)
    int avx512_bf16;                                     // Cooperlake's kernels (its sbgemm)
    int amd;                                             // an AMD CPU (OpenBLAS names its AVX2 kernels Zen)
} CpuFeatures;

static CpuFeatures cpu_features(void) {
    CpuFeatures f;
    memset(&f, 0, sizeof(f));
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
    unsigned max_leaf = a;
    f.amd = b == 0x68747541u;  // "Auth"(enticAMD)
    __get_cpuid(1, &a, &b, &c, &d);
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1;
    unsigned long long xcr0 = 0;
    if (osxsave) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = ((unsigned long long)hi << 32) | lo;
    }
    int ymm = (xcr0 & 0x6) == 0x6, zmm = ymm && (xcr0 & 0xe0) == 0xe0;  // SSE+AVX state; opmask and ZMM state
    f.avx = avx && ymm;
    f.fma = fma && f.avx;
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        f.avx2 = ((b >> 5) & 1) && f.avx;
        f.avx512f = ((b >> 16) & 1) && zmm;
        f.avx512dq = ((b >> 17) & 1) && zmm;
        f.avx512cd = ((b >> 28) & 1) && zmm;
        f.avx512bw = ((b >> 30) & 1) && zmm;
        f.avx512vl = ((b >> 31) & 1) && zmm;
        __cpuid_count(7, 1, a, b, c, d);
        f.avx512_bf16 = ((a >> 5) & 1) && f.avx512f;
    }
#endif
    return f;
}

// What an OpenBLAS x86-64 core's kernels need, as a level: 0 SSE (Prescott, Core2, Nehalem, Atom, Opteron...),
// 1 AVX (Sandybridge, Bulldozer, Piledriver, Steamroller), 2 AVX2 + FMA (Haswell, Zen, Excavator), 3 AVX-512
// (SkylakeX), 4 AVX-512 + BF16 (Cooperlake, SapphireRapids); -1 a name this table does not know (not x86-64,
// or a newer library: left alone).
static int blas_core_level(const char* core) {
    static const struct { const char* name; int level; } CORES[] = {
        {"Katmai", 0}, {"Coppermine", 0}, {"Northwood", 0}, {"Prescott", 0}, {"Banias", 0}, {"Atom", 0},
        {"Core2", 0}, {"Penryn", 0}, {"Dunnington", 0}, {"Nehalem", 0}, {"Athlon", 0}, {"Opteron", 0},
        {"Opteron_SSE3", 0}, {"Barcelona", 0}, {"Bobcat", 0},
        {"Sandybridge", 1}, {"Bulldozer", 1}, {"Piledriver", 1}, {"Steamroller", 1},
        {"Haswell", 2}, {"Zen", 2}, {"Excavator", 2},
        {"SkylakeX", 3},
        {"Cooperlake", 4}, {"SapphireRapids", 4},
    };
    if (core == NULL) return -1;
    for (size_t i = 0; i < sizeof(CORES) / sizeof(CORES[0]); i++) {
        if (strcasecmp(core, CORES[i].name) == 0) return CORES[i].level;
    }
    return -1;
}

// the best core of Debian 12's OpenBLAS (0.3.21: Cooperlake is its newest) whose kernels f can run
static const char* blas_best_core(const CpuFeatures* f) {
    int skx = f->avx512f && f->avx512dq && f->avx512cd && f->avx512bw && f->avx512vl && f->avx2 && f->fma;
    if (skx && f->avx512_bf16) return "Cooperlake";
    if (skx) return "SkylakeX";
    if (f->avx2 && f->fma) return f->amd ? "Zen" : "Haswell";
    if (f->avx) return f->amd ? "Bulldozer" : "Sandybridge";
    return "Prescott";
}

// The core to force on a library that chose `chosen` (its corename) for a CPU with features f, or NULL: the
// library's choice stands when it is as good as the CPU allows, or when the table does not know it
static const char* blas_core_to_force(const char* chosen, const CpuFeatures* f) {
    const char* best = blas_best_core(f);
    int have = blas_core_level(chosen), want = blas_core_level(best);
    if (have < 0 || want <= have) return NULL;
    return best;
}

// Before anything else in main: re-executes the program once with OPENBLAS_CORETYPE when the library chose
// kernels weaker than the CPU's (above); after that re-execution, says so (rank 0 of a launcher, or the only
// process). A library without DYNAMIC_ARCH ignores the variable: the marker stops a second try.
#if LLM_BUILD_CPU || LLM_BUILD_EMU
#include <cblas.h>
static void blas_choose_kernels(char** argv) {
    const char* rank = getenv("OMPI_COMM_WORLD_RANK");
    if (rank == NULL) rank = getenv("PMI_RANK");
    int rank0 = rank == NULL || atoi(rank) == 0;
    const char* forced = getenv("LLM_BLAS_FORCED");  // "<the library's choice> <the CPU's best>"
    if (forced != NULL) {
        const char* best = strchr(forced, ' ');
        if (rank0 && best != NULL) {
            printf("blas: OpenBLAS chose its %.*s kernels for this CPU, which runs %s's: restarted with "
                   "OPENBLAS_CORETYPE=%s (set it yourself to choose otherwise)\n", (int)(best - forced), forced, best + 1, best + 1);
            fflush(stdout);
        }
        return;
    }
    if (getenv("OPENBLAS_CORETYPE") != NULL) return;  // the user's choice
    CpuFeatures f = cpu_features();
    const char* chosen = openblas_get_corename();
    const char* best = blas_core_to_force(chosen, &f);
    if (best == NULL || strstr(openblas_get_config(), "DYNAMIC_ARCH") == NULL) return;
    char marker[64];
    snprintf(marker, sizeof(marker), "%s %s", chosen, best);
    if (setenv("OPENBLAS_CORETYPE", best, 1) != 0 || setenv("LLM_BLAS_FORCED", marker, 1) != 0) return;
    fflush(stdout);
    fflush(stderr);
    execv("/proc/self/exe", argv);
    // (only if the exec failed: go on with the library's kernels, and say why)
    fprintf(stderr, "blas: could not restart with OPENBLAS_CORETYPE=%s (%s): running OpenBLAS's %s kernels\n", best,
            strerror(errno), chosen);
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("LLM_BLAS_FORCED");
}

// "OpenBLAS 0.3.21 Cooperlake kernels" (", forced over its Prescott" when blas_choose_kernels chose them) into buf
static void blas_describe(char* buf, size_t cap) {
    const char* config = openblas_get_config();  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."
    int known = strncmp(config, "OpenBLAS ", 9) == 0;
    int vlen = known ? (int)strcspn(config + 9, " ") : 0;
    const char* forced = getenv("LLM_BLAS_FORCED");
    int was = forced != NULL ? (int)strcspn(forced, " ") : 0;
    snprintf(buf, cap, "OpenBLAS %.*s %s kernels%s%.*s", vlen, known ? config + 9 : "", openblas_get_corename(),
             forced ? ", forced over its " : "", was, forced ? forced : "");
}
#else
static void blas_choose_kernels(char** argv) { (void)argv; }  // (the CUDA build multiplies with cuBLASLt)
#endif
