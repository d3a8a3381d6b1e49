// eval.h: measuring the model without training it: the mean loss on validation batches (the
// pipeline's forward with targets and no gradient), and the greedy exact-match accuracy on held-out
// "prompt=answer" problems (the sampler, llm/model/sampler.h).
#pragma once
#include "../core/common.h"
#include "../model/stage.h"
#include "../parallel/pipeline.h"
#include "../model/sampler.h"
#include "dataloader.h"
#include "tokenizer.h"

// the mean loss over `steps` batches of the loader from its start (through the pipeline's stages, on
// every rank of the pp group; one rank: its one stage)
static float val_loss(Pipeline* pipe, DataLoader* val, int steps) {
    dataloader_reset(val);
    double sum = 0.0;
    for (int i = 0; i < steps; i++) {
        dataloader_next_batch(val);
        sum += pipeline_eval_loss(pipe, val->inputs, val->targets);
    }
    return (float)(sum / steps);
}

// val_loss, saying what it does while it does it (rank 0): "step 100: val loss on 5 batches of 32x56 tokens: 1.234567 (0.4 s)"
static float val_loss_said(Pipeline* pipe, DataLoader* val, int steps, int step, int rank0) {
    if (rank0) { printf("step %d: val loss on %d batches of %dx%d tokens: ", step, steps, val->B, val->T); fflush(stdout); }
    double t = wall_ms();
    float loss = val_loss(pipe, val, steps);
    if (rank0) printf("%.6f (%.1f s)\n", loss, (wall_ms() - t) / 1e3);
    return loss;
}

// One sample from the model: sample_len tokens after EOT, drawn with rng on every rank (the sampler's
// forward runs on all of them), printed by rank 0 as text (or token ids without a tokenizer), its line
// begun before the tokens are drawn: "sample (step 250, 56 tokens after <|endoftext|>): ..."
static void print_sample(Sampler* sp, int eot, int sample_len, Rng* rng, const Tokenizer* tok, int rank0, int step) {
    int* gen = (int*)mallocCheck((size_t)sp->cfg.max_seq_len * sizeof(int));  // (maxT)
    gen[0] = eot;
    if (rank0) { printf("sample (step %d, %d tokens after <|endoftext|>): ", step, sample_len); fflush(stdout); }
    int len = sampler_generate(sp, gen, 1, sample_len, -1, rng);
    if (rank0) {
        print_tokens(tok, gen + 1, len - 1);
        printf("\n");
    }
    free(gen);
}

// Greedy exact-match accuracy on held-out problems: each document (split at EOT) of the shard is a
// prompt through the first '=' and an answer up to '\n'; the model must produce the answer exactly.
// The first print_n problems are printed.
static float exact_match_eval(Sampler* sp, const char* path, int eot, const Tokenizer* tok, int print_n) {
    int64_t n_tokens;
    int32_t* raw = dataloader_read_shard(path, "--eval-file", sp->cfg.vocab_size, &n_tokens);  // (n_tokens)
    int maxT = sp->cfg.max_seq_len;
    int* seq = (int*)mallocCheck((size_t)maxT * sizeof(int));
    int total = 0, correct = 0;
    for (int64_t i = 0; i < n_tokens;) {
        // one document: [i, j)
        int64_t j = i + 1;
        while (j < n_tokens && raw[j] != eot) j++;
        int64_t eq = i;
        while (eq < j && raw[eq] != '=') eq++;
        int64_t nl = eq;
        while (nl < j && raw[nl] != '\n') nl++;
        int plen = (int)(eq - i + 1), alen = (int)(nl - eq - 1);
        if (eq < j && alen > 0 && plen + alen + 1 <= maxT) {
            for (int k = 0; k < plen; k++) seq[k] = raw[i + k];
            int len = sampler_generate(sp, seq, plen, alen + 1, '\n', NULL);
            int ok = len >= plen + alen;
            for (int k = 0; ok && k < alen; k++) ok = seq[plen + k] == raw[eq + 1 + k];
            if (ok && len > plen + alen) ok = seq[plen + alen] == '\n' || seq[plen + alen] == eot;
            correct += ok;
            total++;
            if (total <= print_n) {
                printf("  ");
                print_tokens(tok, seq + (seq[0] == eot), plen - (seq[0] == eot));
                printf(" -> ");
                int shown = len - plen;
                if (shown > 0 && seq[len - 1] == '\n') shown--;
                print_tokens(tok, seq + plen, shown);
                printf("   %s\n", ok ? "correct" : "WRONG");
            }
        }
        i = j;
    }
    free(raw);
    free(seq);
    if (total == 0) fatal("--eval-file: %s: expected documents of the form 'prompt=answer\\n', found none", path);
    return (float)correct / (float)total;
}
