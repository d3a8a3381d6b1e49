// hellaswag.h: HellaSwag (Zellers et al. 2019), the benchmark a GPT-2 reproduction is judged on, scored as llm.c
// scores it (its train_gpt2.cu -h 1): each example is a context and four completions; a completion's loss is the mean
// cross-entropy of its own tokens given the context and the completion's tokens before them (the context's tokens are
// not scored); the completion with the lowest mean loss is the model's answer, and acc_norm is the fraction of
// examples where that is the labelled one. (The mean, not the sum, is the "norm": a longer completion is not
// penalised for its length.) The file: llm.c's eval format (docs/formats.md, "HellaSwag"), written by
// dev/data/hellaswag.py.
//
//   hellaswag_load     reads and checks the whole file once, before training: magic, version, every example's
//                      delimiter, index, byte count, label, four completions, token ids below V, and each
//                      context + completion at most T tokens (llm.c stops on an example that does not fit; here it
//                      is refused at the start, with one line). Any fault: one line naming the file, exit 1.
//   hellaswag_eval     the score, in every layout: the rows (one per completion: context + completion, padded) go
//                      through the pipeline's validation forward (llm/parallel/pipeline.h) B rows at a time, with
//                      targets, so the last stage holds every token's loss. The examples are split over the dp ranks
//                      in contiguous blocks of ceil(N / dp) (llm.c's split), every dp rank running as many batches
//                      (ZeRO-3 gathers in every forward); tp and pp run the forward as the val loss does; with cp each
//                      rank holds some positions of each row. Each completion's loss sum over its tokens comes from the
//                      rank that holds them (the last stage, tp rank 0, its cp positions, its dp block), and one sum
//                      over the world gives every rank every completion's sum; the means, winners and the count
//                      follow on every rank alike.
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../comm/comm.h"
#include "../model/stage.h"
#include "../parallel/pipeline.h"
#include "progress.h"

#define HELLASWAG_MAGIC 20240522
#define HELLASWAG_VERSION 1
#define HELLASWAG_COMPLETIONS 4    // llm.c's ASSUMED_NUM_COMPLETIONS: HellaSwag's four endings
#define HELLASWAG_DELIMITER 65535  // <START_EXAMPLE>

typedef struct {
    char path[1024];
    int num_examples;
    int longest_bytes;   // header slot 3: the longest example's bytes
    uint16_t* words;     // (file words after the header) the examples as written
    int* label;          // (N) the index of the right completion
    int* ctx_off;        // (N) where each context's tokens start in words
    int* ctx_len;        // (N)
    int* comp_off;       // (N, 4) where each completion's tokens start in words
    int* comp_len;       // (N, 4)
} HellaSwag;

// The whole file into hs, checked against the model's vocabulary V and the sequence length T. flag: the flag
// that named it (for the error line).
static void hellaswag_load(HellaSwag* hs, const char* path, const char* flag, int V, int T) {
    memset(hs, 0, sizeof(*hs));
    snprintf(hs->path, sizeof(hs->path), "%s", path);
    FILE* f = fopen(path, "rb");
    if (f == NULL) fatal("%s: '%s': cannot open: %s (make it with python3 dev/data/hellaswag.py)", flag, path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) fatal("%s: '%s': cannot seek: %s", flag, path, strerror(errno));
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) fatal("%s: '%s': cannot seek: %s", flag, path, strerror(errno));
    if (size < 1024) fatal("%s: '%s': expected a 1024-byte header (llm.c's eval file), found a file of %ld bytes", flag, path, size);
    if ((size - 1024) % 2 != 0) fatal("%s: '%s': expected uint16 words after the header, found %ld bytes after it", flag, path, size - 1024);
    int32_t header[256];
    if (fread(header, sizeof(int32_t), 256, f) != 256) fatal("%s: '%s': read failed: %s", flag, path, strerror(errno));
    if (header[0] != HELLASWAG_MAGIC) {
        fatal("%s: '%s': expected magic %d (llm.c's eval file, dev/data/hellaswag.py), found %d%s", flag, path, HELLASWAG_MAGIC,
              header[0], header[0] == 20240520 ? " (a token shard)" : "");
    }
    if (header[1] != HELLASWAG_VERSION) fatal("%s: '%s': expected version %d, found %d", flag, path, HELLASWAG_VERSION, header[1]);
    int n = header[2];
    if (n < 1 || n > 65535) fatal("%s: '%s': expected 1 to 65535 examples in header slot 2, found %d", flag, path, n);
    size_t nw = (size_t)(size - 1024) / 2;
    hs->words = (uint16_t*)mallocCheck(nw > 0 ? nw * sizeof(uint16_t) : 1);
    if (fread(hs->words, sizeof(uint16_t), nw, f) != nw) fatal("%s: '%s': read failed: %s", flag, path, strerror(errno));
    fcloseCheck(f, path);
    hs->num_examples = n;
    hs->longest_bytes = header[3];
    hs->label = (int*)mallocCheck((size_t)n * sizeof(int));
    hs->ctx_off = (int*)mallocCheck((size_t)n * sizeof(int));
    hs->ctx_len = (int*)mallocCheck((size_t)n * sizeof(int));
    hs->comp_off = (int*)mallocCheck((size_t)n * HELLASWAG_COMPLETIONS * sizeof(int));
    hs->comp_len = (int*)mallocCheck((size_t)n * HELLASWAG_COMPLETIONS * sizeof(int));
    const uint16_t* w = hs->words;
    size_t at = 0;
    int longest = 0;
    for (int e = 0; e < n; e++) {
        // <START_EXAMPLE> <EXAMPLE_BYTES> <EXAMPLE_INDEX> <LABEL> <NUM_COMPLETIONS> <NUM> context, 4 x (<NUM> completion)
        if (at + 6 > nw) fatal("%s: '%s': expected %d examples, found the end of the file at example %d", flag, path, n, e);
        const uint16_t* x = w + at;
        if (x[0] != HELLASWAG_DELIMITER) fatal("%s: '%s': example %d: expected the delimiter %d, found %d", flag, path, e, HELLASWAG_DELIMITER, x[0]);
        int bytes = x[1];
        if (x[2] != e) fatal("%s: '%s': example %d: expected index %d, found %d", flag, path, e, e, x[2]);
        if (bytes % 2 != 0 || bytes < 12) fatal("%s: '%s': example %d: expected an even byte count of at least 12, found %d", flag, path, e, bytes);
        if (at + (size_t)bytes / 2 > nw) {
            fatal("%s: '%s': example %d: expected its %d bytes, found the end of the file after %zu", flag, path, e, bytes, (nw - at) * 2);
        }
        size_t end = at + (size_t)bytes / 2;
        if (x[4] != HELLASWAG_COMPLETIONS) fatal("%s: '%s': example %d: expected %d completions, found %d", flag, path, e, HELLASWAG_COMPLETIONS, x[4]);
        if (x[3] >= HELLASWAG_COMPLETIONS) fatal("%s: '%s': example %d: expected a label in [0, %d), found %d", flag, path, e, HELLASWAG_COMPLETIONS, x[3]);
        hs->label[e] = x[3];
        size_t p = at + 5;
        for (int k = -1; k < HELLASWAG_COMPLETIONS; k++) {  // k = -1: the context, then the completions
            if (p + 1 > end) fatal("%s: '%s': example %d: expected its %d bytes to hold a context and 4 completions, found them ending early", flag, path, e, bytes);
            int len = w[p];
            if (len < 1 || p + 1 + (size_t)len > end) {
                fatal("%s: '%s': example %d: expected the %s's length in [1, %zu] (within the example's %d bytes), found %d", flag, path, e,
                      k < 0 ? "context" : "completion", end - p - 1, bytes, len);
            }
            for (int i = 0; i < len; i++) {
                int t = w[p + 1 + i];
                if (t >= V) fatal("%s: '%s': example %d: expected token ids in [0, %d) (the model's vocabulary), found %d", flag, path, e, V, t);
            }
            if (k < 0) { hs->ctx_off[e] = (int)(p + 1); hs->ctx_len[e] = len; }
            else { hs->comp_off[e * HELLASWAG_COMPLETIONS + k] = (int)(p + 1); hs->comp_len[e * HELLASWAG_COMPLETIONS + k] = len; }
            p += 1 + (size_t)len;
        }
        if (p != end) fatal("%s: '%s': example %d: expected its %d bytes to end after the fourth completion, found %zu more", flag, path, e, bytes, (end - p) * 2);
        for (int k = 0; k < HELLASWAG_COMPLETIONS; k++) {
            int len = hs->ctx_len[e] + hs->comp_len[e * HELLASWAG_COMPLETIONS + k];
            if (len > T) {
                fatal("%s: '%s': example %d: context + completion %d is %d tokens, expected at most the sequence length T = %d "
                      "(llm.c stops at such an example too; raise -t or drop the example)", flag, path, e, k, len, T);
            }
        }
        if (bytes > longest) longest = bytes;
        at = end;
    }
    if (at != nw) fatal("%s: '%s': expected the file to end after example %d, found %zu more bytes", flag, path, n - 1, (nw - at) * 2);
    if (hs->longest_bytes != longest) {
        fatal("%s: '%s': expected header slot 3 to hold the longest example's bytes, %d, found %d", flag, path, longest, hs->longest_bytes);
    }
}

static void hellaswag_free(HellaSwag* hs) {
    free(hs->words); free(hs->label); free(hs->ctx_off); free(hs->ctx_len); free(hs->comp_off); free(hs->comp_len);
    memset(hs, 0, sizeof(*hs));
}

// one evaluation's result, the same on every rank
typedef struct {
    int correct, examples;  // acc_norm = correct / examples
    float* loss;            // (N, 4) each completion's mean loss over its tokens
    int* winner;            // (N) the completion of the lowest mean loss (the first, on a tie)
} HellaSwagScore;

// row r = (example r / 4, completion r % 4) as a sequence of T tokens: inputs = context, completion, then 0s; targets:
// position ctx - 1 + i holds completion token i (the token the position predicts), others 0 (not scored)
static void hellaswag_row(const HellaSwag* hs, int r, int T, int* inputs, int* targets) {
    int e = r / HELLASWAG_COMPLETIONS, k = r % HELLASWAG_COMPLETIONS;
    int nc = hs->ctx_len[e], nk = hs->comp_len[r];
    const uint16_t* ctx = hs->words + hs->ctx_off[e];
    const uint16_t* comp = hs->words + hs->comp_off[e * HELLASWAG_COMPLETIONS + k];
    for (int t = 0; t < T; t++) inputs[t] = targets[t] = 0;
    for (int t = 0; t < nc; t++) inputs[t] = ctx[t];
    for (int i = 0; i < nk; i++) {
        inputs[nc + i] = comp[i];
        targets[nc - 1 + i] = comp[i];
    }
}

// acc_norm of the model the pipeline holds, on every rank of the job (all of them call it: the forward's
// collectives). B, T: the pipeline's micro-batch. Returns the score (free with hellaswag_score_free).
static HellaSwagScore hellaswag_eval(Pipeline* pipe, const HellaSwag* hs) {
    const Mesh* mesh = &pipe->comm->mesh;
    int B = pipe->B, T = pipe->T, N = hs->num_examples, S = pipe->pp_size * pipe->vpp;
    int rows = N * HELLASWAG_COMPLETIONS;
    // this dp rank's examples [e0, e1): llm.c's contiguous blocks of ceil(N / dp); every rank runs `batches` batches
    int per = (N + mesh->dp.size - 1) / mesh->dp.size;
    int e0 = per * mesh->dp.rank, e1 = e0 + per;
    if (e0 > N) e0 = N;
    if (e1 > N) e1 = N;
    int batches = (per * HELLASWAG_COMPLETIONS + B - 1) / B;
    int* inputs = (int*)mallocCheck((size_t)B * T * sizeof(int));   // (B, T)
    int* targets = (int*)mallocCheck((size_t)B * T * sizeof(int));  // (B, T)
    double* acc = (double*)mallocCheck((size_t)rows * sizeof(double));  // (N, 4) each completion's loss sum, this rank's part
    for (int r = 0; r < rows; r++) acc[r] = 0.0;
    Stage* last = &pipe->chunks[pipe_chunk_of(pipe->vshape, pipe->pp_size, S - 1)];
    int holds = pipeline_is_last(pipe) && mesh->tp.rank == 0;  // this rank adds the losses it holds
    int Tl = last->T;                                            // the rank's positions of each row (cp: T / cp)
    int* where = (int*)mallocCheck((size_t)B * T * sizeof(int));  // (B, Tl) the flat (row, position) of each held loss
    for (int i = 0; i < B * T; i++) where[i] = i;
    if (holds) memcpy(where, cp_local_tokens(&last->cp, where, B), (size_t)B * Tl * sizeof(int));
    float* losses = (float*)mallocCheck((size_t)B * Tl * sizeof(float));  // (B, Tl)
    int r0 = e0 * HELLASWAG_COMPLETIONS, r1 = e1 * HELLASWAG_COMPLETIONS;
    for (int b = 0; b < batches; b++) {
        for (int i = 0; i < B; i++) {
            int r = r0 + b * B + i;
            if (r < r1) hellaswag_row(hs, r, T, inputs + (size_t)i * T, targets + (size_t)i * T);
            else for (int t = 0; t < T; t++) inputs[(size_t)i * T + t] = targets[(size_t)i * T + t] = 0;  // no example: not scored
        }
        pipeline_eval_forward(pipe, inputs, targets);
        if (!pipeline_is_last(pipe)) continue;
        MicroBatch* mb = &last->slots[0];
        device_memset_zero(last->loss_acc, sizeof(double), llm_ctx.stream);  // (the val loss's sum: not this)
        if (!holds) continue;
        copy_to_host(losses, mb->losses, (size_t)B * Tl * sizeof(float));
        for (int j = 0; j < B * Tl; j++) {
            int i = where[j] / T, t = where[j] % T, r = r0 + b * B + i;
            if (r >= r1) continue;
            int e = r / HELLASWAG_COMPLETIONS, nc = hs->ctx_len[e], nk = hs->comp_len[r];
            if (t >= nc - 1 && t < nc - 1 + nk) acc[r] += losses[j];  // the completion's tokens only
        }
    }
    // every completion's sum on every rank: each was added by the one rank holding its positions (with cp, by each
    // cp rank for its positions), zeros elsewhere
    float* sums = (float*)mallocCheck((size_t)rows * sizeof(float));  // (N, 4)
    for (int r = 0; r < rows; r++) sums[r] = (float)acc[r];
    float* dev = (float*)device_malloc((size_t)rows * sizeof(float), MEM_WORKSPACE);
    copy_to_device(dev, sums, (size_t)rows * sizeof(float));
    comm_all_reduce(pipe->comm, GROUP_WORLD, dev, dev, (size_t)rows, COMM_SUM, llm_ctx.stream);
    copy_to_host(sums, dev, (size_t)rows * sizeof(float));
    device_free(dev);
    HellaSwagScore sc;
    sc.examples = N;
    sc.correct = 0;
    sc.loss = (float*)mallocCheck((size_t)rows * sizeof(float));
    sc.winner = (int*)mallocCheck((size_t)N * sizeof(int));
    for (int e = 0; e < N; e++) {
        int best = 0;
        for (int k = 0; k < HELLASWAG_COMPLETIONS; k++) {
            int r = e * HELLASWAG_COMPLETIONS + k;
            sc.loss[r] = sums[r] / (float)hs->comp_len[r];
            if (sc.loss[r] < sc.loss[e * HELLASWAG_COMPLETIONS + best]) best = k;
        }
        sc.winner[e] = best;
        sc.correct += best == hs->label[e];
    }
    free(inputs); free(targets); free(acc); free(sums); free(where); free(losses);
    return sc;
}

static void hellaswag_score_free(HellaSwagScore* sc) {
    free(sc->loss);
    free(sc->winner);
    memset(sc, 0, sizeof(*sc));
}

// Each example's line into path (rank 0, after an evaluation; the file is rewritten each time):
// "index label winner loss0 loss1 loss2 loss3", the losses the completions' means (%.9g)
static void hellaswag_write_losses(const HellaSwag* hs, const HellaSwagScore* sc, const char* path, const char* flag) {
    FILE* f = fopen(path, "w");
    if (f == NULL) fatal("%s: '%s': cannot open for writing: %s", flag, path, strerror(errno));
    for (int e = 0; e < sc->examples; e++) {
        const float* l = sc->loss + (size_t)e * HELLASWAG_COMPLETIONS;
        if (fprintf(f, "%d %d %d %.9g %.9g %.9g %.9g\n", e, hs->label[e], sc->winner[e], l[0], l[1], l[2], l[3]) < 0) {
            fatal("%s: '%s': write failed: %s", flag, path, strerror(errno));
        }
    }
    fcloseCheck(f, path);
}

// 1 if a run evaluates HellaSwag after `step` (of `steps`): every `every` steps (0: --val-every's; that 0 too: none
// but the last) and at the last, as llm.c does (not before the first step)
static int hellaswag_due(int every, int val_every, int step, int steps) {
    int n = every > 0 ? every : val_every;
    return step == steps || (n > 0 && step % n == 0);
}

// hellaswag_eval, saying what it does while it does it (rank 0): "step 250: HellaSwag on 10042 examples: acc_norm
// 0.2955 (2967/10042) (12.3 s)"; with losses_path (rank 0) each example's losses written there. Returns the counts.
static EvalCounts hellaswag_said(Pipeline* pipe, const HellaSwag* hs, int step, int rank0, const char* losses_path) {
    if (rank0) { printf("step %d: HellaSwag on %d examples: ", step, hs->num_examples); fflush(stdout); }
    double t = wall_ms();
    HellaSwagScore sc = hellaswag_eval(pipe, hs);
    EvalCounts c = {sc.correct, sc.examples};
    if (rank0) {
        printf("acc_norm %.4f (%d/%d) (%.1f s)\n", (double)sc.correct / sc.examples, sc.correct, sc.examples, (wall_ms() - t) / 1e3);
        if (losses_path) hellaswag_write_losses(hs, &sc, losses_path, "--hellaswag-losses");
    }
    hellaswag_score_free(&sc);
    return c;
}
