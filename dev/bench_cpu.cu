// bench_cpu.cu: times training steps of the CPU build on a stated config and prints the median step
// time broken down by phase (forward, backward, optimizer). Random tokens, a fresh GPT-2 init.
//   build/bench_cpu "d4,C=256,NH=4,maxT=256,V=50257" B T steps
// The config of llm.c's CPU trainer comparison (see README): B=4, T=64, with
// L=4 NH=4 C=256 maxT=256 V=50257, and GPT-2 124M (d12).
#include "../llm/common.h"
#include "../llm/gpt.h"
#include "../llm/optimizer.h"
#include <algorithm>
#include <vector>

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char** argv) {
    if (argc != 5) { fprintf(stderr, "usage: %s MODEL_DESCRIPTOR B T STEPS\n", argv[0]); return 1; }
    GPTConfig cfg;
    if (!gpt_config_from_descriptor(argv[1], &cfg)) fatal("bench: expected a descriptor like d4,C=256,NH=4,maxT=256,V=50257, found '%s'", argv[1]);
    int B = atoi(argv[2]), T = atoi(argv[3]), steps = atoi(argv[4]);
    if (B <= 0 || T <= 0 || T > cfg.max_seq_len || steps <= 0) fatal("bench: bad B=%d T=%d steps=%d", B, T, steps);
    GPT model;
    gpt_allocate(&model, cfg);
    float* p = (float*)mallocCheck(model.num_parameters * sizeof(float));
    gpt_init_random(&model, 1337, p);
    free(p);
    OptimConfig oc = {3e-4f, 1.0f, 0, steps, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    AdamWState opt;
    adamw_state_init(&opt, &model);
    Rng rng;
    rng_init(&rng, 42);
    std::vector<int> x(B * T), y(B * T);
    std::vector<double> tf, tb, to, tt;
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("bench: L=%d NH=%d C=%d maxT=%d V=%d (Vp %d), %.1fM parameters, B=%d T=%d, %d OpenMP threads, %d steps (+1 warm-up)\n",
           cfg.num_layers, cfg.num_heads, cfg.channels, cfg.max_seq_len, cfg.vocab_size, cfg.padded_vocab_size,
           model.num_parameters / 1e6, B, T, threads, steps);
    for (int s = 0; s <= steps; s++) {
        for (int i = 0; i < B * T; i++) { x[i] = (int)(rng_u64(&rng) % cfg.vocab_size); y[i] = (int)(rng_u64(&rng) % cfg.vocab_size); }
        double t0 = wall_ms();
        gpt_zero_grad(&model);
        gpt_forward(&model, x.data(), y.data(), B, T, 1.0f / (B * T));
        device_synchronize();
        double t1 = wall_ms();
        gpt_backward(&model);
        device_synchronize();
        double t2 = wall_ms();
        float norm = gpt_grad_norm(&model, &opt);
        gpt_update(&model, &opt, &oc, 3e-4f, norm, (unsigned)s);
        device_synchronize();
        double t3 = wall_ms();
        if (s == 0) continue;  // warm-up
        tf.push_back(t1 - t0); tb.push_back(t2 - t1); to.push_back(t3 - t2); tt.push_back(t3 - t0);
        printf("  step %d: %.1f ms (loss %.4f)\n", s, t3 - t0, model.mean_loss);
    }
    printf("median step %.1f ms | forward %.1f ms | backward %.1f ms | optimizer %.1f ms | %.0f tok/s\n",
           median(tt), median(tf), median(tb), median(to), B * T / (median(tt) / 1e3));
    adamw_state_free(&opt);
    gpt_free(&model);
    return 0;
}
