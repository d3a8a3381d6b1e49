// dev/bench_common.h: the setup the training-step benchmarks share (dev/bench_train.cu and
// dev/bench_fp8_cpu.cu): their first arguments (MODEL_DESCRIPTOR B T STEPS) and the comma-separated lists
// that follow, one rank's model as the trainer sets it up (the data-parallel policy with a fresh GPT-2
// init, the trainer's AdamW settings), random tokens, the median of the timed steps, and the end. What
// each one times and prints stays in its own file.
#pragma once
#include "../llm/core/common.h"
#include "../llm/core/context.h"
#include "../llm/core/rand.h"
#include "../llm/comm/comm.h"
#include "../llm/model/units.h"
#include "../llm/parallel/dp.h"
#include "../llm/parallel/dp_export.h"
#include "../llm/ops/optimizer.h"
#include <algorithm>
#include <vector>

static double bench_median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// MODEL_DESCRIPTOR B T STEPS from argv[1..4], checked; WHO names the benchmark in the error lines,
// EXAMPLE is a descriptor it takes
typedef struct {
    GPTConfig cfg;
    int B, T, steps;
} BenchShape;
static BenchShape bench_shape_args(char** argv, const char* who, const char* example) {
    BenchShape s;
    if (!gpt_config_from_descriptor(argv[1], &s.cfg)) fatal("%s: expected a descriptor like %s, found '%s'", who, example, argv[1]);
    s.B = atoi(argv[2]), s.T = atoi(argv[3]), s.steps = atoi(argv[4]);
    if (s.B <= 0 || s.T <= 0 || s.T > s.cfg.max_seq_len || s.steps <= 0) fatal("%s: bad B=%d T=%d steps=%d", who, s.B, s.T, s.steps);
    return s;
}

// calls f(word, len) for each word of the comma-separated LIST, in order
template <class F>
static void bench_for_each_word(const char* list, F f) {
    for (const char* p = list; *p;) {
        const char* e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        f(p, len);
        p += len + (e ? 1 : 0);
    }
}

// the model of one rank as the trainer sets it up: the data-parallel policy over COMM (initialized,
// with the context) and its parameters from a fresh GPT-2 init (seed 1337)
static void bench_model_init(DataParallel* dp, Comm* comm, GPTConfig cfg) {
    dp_init(dp, comm, cfg, NULL);
    float* p = (float*)mallocCheck(dp->lay.num_parameters * sizeof(float));
    init_parameters(cfg, 1337, p);
    dp_import_params(dp, p, 0);
    free(p);
}

// the trainer's AdamW settings (learning rate 3e-4, no warm-up, clipping at 1) over STEPS steps
static OptimConfig bench_optim_config(int steps) {
    OptimConfig oc = {3e-4f, 1.0f, 0, steps, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    return oc;
}

// the OpenMP threads a step runs on (1 without OpenMP)
static int bench_threads(void) {
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    return threads;
}

// fresh random inputs X and targets Y of a step, token by token (input, then target)
static void bench_random_tokens(Rng* rng, int vocab_size, std::vector<int>& x, std::vector<int>& y) {
    for (size_t i = 0; i < x.size(); i++) { x[i] = (int)(rng_u64(rng) % vocab_size); y[i] = (int)(rng_u64(rng) % vocab_size); }
}

// the end: the model, the context, then the communicator
static void bench_free(DataParallel* dp, Comm* comm) {
    dp_free(dp);
    context_free();
    comm_free(comm);
}
