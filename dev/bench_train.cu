// bench_train.cu: times training steps on a stated config and prints the median step time broken
// down by phase (forward, backward, optimizer), tokens/s and, given the hardware's peak FLOP/s, the
// model FLOPs utilisation (MFU). Random tokens, a fresh GPT-2 init. Builds as the CPU build
// (build/bench_cpu, `make bench-cpu`) and the CUDA build (build/bench_gpu, scripts/gpu_check.sh).
//   bench MODEL_DESCRIPTOR B T STEPS [PEAK_TFLOPS]
// MFU counts the model FLOPs of a training step as in the PaLM paper (appendix B):
//   6 N per token for the matmuls with N the non-embedding parameters plus the LM head (Vp*C),
//   plus 6 L T C per token for attention's QK^T and AV (forward 2 L T C, backward twice that),
// against PEAK_TFLOPS (e.g. the measured dense bf16 matmul peak of the GPU).
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
    if (argc != 5 && argc != 6) { fprintf(stderr, "usage: %s MODEL_DESCRIPTOR B T STEPS [PEAK_TFLOPS]\n", argv[0]); return 1; }
    double peak_tflops = argc == 6 ? atof(argv[5]) : 0.0;
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
    double tok_s = B * T / (median(tt) / 1e3);
    size_t L = cfg.num_layers, C = cfg.channels;
    double n_matmul = (double)(model.num_parameters - model.param_sizes[1]);  // wte doubles as the LM head
    double flops_per_token = 6.0 * n_matmul + 6.0 * L * T * C;
    printf("median step %.1f ms | forward %.1f ms | backward %.1f ms | optimizer %.1f ms | %.0f tok/s | %.2f TFLOP/s",
           median(tt), median(tf), median(tb), median(to), tok_s, tok_s * flops_per_token / 1e12);
    if (peak_tflops > 0) printf(" | MFU %.1f%% of %.0f TFLOP/s", 100.0 * tok_s * flops_per_token / 1e12 / peak_tflops, peak_tflops);
    printf("\n");
    adamw_state_free(&opt);
    gpt_free(&model);
    return 0;
}
