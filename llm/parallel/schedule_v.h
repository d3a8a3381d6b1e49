// schedule_v.h: the two V-shaped schedules, as lists (llm/parallel/schedule_list.h: rank r holds chunk 0 =
// virtual stage r and chunk 1 = virtual stage 2P - 1 - r; the first and the last stage both on rank 0).
// Both split the backward into B (input gradient) and W (weight gradient), and need m >= 2P.
//
//   zbv        Qi et al. 2024, "Zero Bubble Pipeline Parallelism" (ICLR; arXiv 2401.10241) sec. 6, ZB-V,
//              and Qi et al. 2024, "Pipeline Parallelism with Controllable Memory": the V placement, whose
//              two halves of one stage make the activation memory of 1F1B (rank 0 holds 2P half-stage
//              micro-batch chunks at most, P whole stages' worth: 1F1B's first rank), and W's that fill
//              what would be the bubble. Built as zb-h1 is (llm/parallel/schedule.h): played once with unit
//              costs F = B = W = 1, each rank whenever it is free runs a B whose gradient is here (chunk
//              0's first: the tail of the backward chain, which ends the step), else an F whose input is here while fewer than 2P
//              chunk-micro-batches are alive on the rank (chunk 1's first: it leads to the loss), else its
//              oldest pending W. The check (test/test_schedule.cu): with F = B = W every rank idles only
//              for the fill that no schedule avoids, the (P - 1) F's before the first micro-batch reaches
//              the last rank: bubble time per rank = (P - 1) F, none in the steady state, for m >= 2P and
//              P = 2, 3, 4, 8 (P = 5, 6, 7: up to 2 F more; the greedy order is not optimal there).
//   dualpipev  DeepSeek-AI 2025, DualPipe (github.com/deepseek-ai/DualPipe), its "cut-in-half" DualPipeV (Sea AI
//              Lab): rank r runs eight phases, with a = P - r - 1 and b = r + 1 (F0 / F1 / B0 / B1: the next
//              micro-batch's op on chunk 0 / 1; Bz: a B whose W is put off to a FIFO, W: its oldest; B
//              without z: the whole backward, B then W at once; F&B: a forward and a backward of the other
//              chunk overlapped, one pair):
//                1. 2a x F0            warm-up on chunk 0
//                2. b x (F0 F1)        chunk 0 and 1 interleaved
//                3. a x (B1z W F1)     zero-bubble backwards start
//                4. m - 2P + b x (F0&B1 F1&B0)   the steady state, two pairs (rank P - 1's first F0, B1
//                                      not overlapped: its B1 needs that F0's output through chunk 1)
//                5. a x (B1 F1&B0)
//                6. b x (B1 B0)        the second half of them (from the middle one, r odd: from B1,
//                                      r even: from B0) with W put off
//                7. a x (W B0z)
//                8. b x W              the W's left
//              DualPipe's README gives its bubble as (PP/2 - 1)(F&B + B - 3W) with PP = 2P stages, P ranks,
//              activations PP + 1 = 2P + 1 chunks at most, and parameters 2x (two chunks each rank):
//              test/test_schedule.cu checks the simulator's against it.
//   In the lists a B without its W deferred is a B directly followed by its W (the fused backward
//   split in two: the same arithmetic, llm/model/stage.h), and F&B is an F with pair = 1 before the B.
#pragma once
#include "../core/common.h"
#include "schedule_list.h"

// the lists' builder for one rank of DualPipeV: the next micro-batch of each chunk's F and B, the FIFO of
// the W's put off
typedef struct {
    Schedule* s;
    int r, f[2], b[2];
    int* wq;          // (2 m) pending W's: mb * 2 + chunk
    int wq_head, wq_tail;
} DpvRank;

static void dpv_f(DpvRank* d, int c, int pair) {
    schedule_push(d->s, d->r, PIPE_F, d->f[c]++, c);
    d->s->ops[d->r][d->s->n[d->r] - 1].pair = pair;
}
static void dpv_b(DpvRank* d, int c, int defer_w) {
    int mb = d->b[c]++;
    schedule_push(d->s, d->r, PIPE_B, mb, c);
    if (defer_w) d->wq[d->wq_tail++] = mb * 2 + c;
    else schedule_push(d->s, d->r, PIPE_W, mb, c);
}
static void dpv_w(DpvRank* d) {
    int k = d->wq[d->wq_head++];
    schedule_push(d->s, d->r, PIPE_W, k / 2, k % 2);
}

static void schedule_dualpipev(Schedule* s, int P, int m) {
    schedule_alloc(s, "dualpipev", P, m, 2, 1);
    int* wq = (int*)mallocCheck((size_t)2 * m * sizeof(int));
    for (int r = 0; r < P; r++) {
        DpvRank d = {s, r, {0, 0}, {0, 0}, wq, 0, 0};
        int a = P - r - 1, b = r + 1;
        for (int i = 0; i < 2 * a; i++) dpv_f(&d, 0, 0);                                   // 1
        for (int i = 0; i < b; i++) { dpv_f(&d, 0, 0); dpv_f(&d, 1, 0); }                  // 2
        for (int i = 0; i < a; i++) { dpv_b(&d, 1, 1); dpv_w(&d); dpv_f(&d, 1, 0); }       // 3
        for (int i = 0; i < m - 2 * P + b; i++) {                                          // 4
            dpv_f(&d, 0, !(i == 0 && r == P - 1)); dpv_b(&d, 1, 0);
            dpv_f(&d, 1, 1); dpv_b(&d, 0, 0);
        }
        for (int i = 0; i < a; i++) { dpv_b(&d, 1, 0); dpv_f(&d, 1, 1); dpv_b(&d, 0, 0); } // 5
        int zb = 0;
        for (int i = 0; i < b; i++) {                                                      // 6
            if (i == b / 2 && r % 2 == 1) zb = 1;
            dpv_b(&d, 1, zb);
            if (i == b / 2 && r % 2 == 0) zb = 1;
            dpv_b(&d, 0, zb);
        }
        for (int i = 0; i < a; i++) { dpv_w(&d); dpv_b(&d, 0, 1); }                        // 7
        for (int i = 0; i < b; i++) dpv_w(&d);                                             // 8
        if (d.wq_head != d.wq_tail) fatal("dualpipev: rank %d left %d W's", r, d.wq_tail - d.wq_head);
    }
    free(wq);
}

// ZB-V as a list: played once with unit costs (see the top of this file)
static void schedule_zbv(Schedule* s, int P, int m) {
    schedule_alloc(s, "zbv", P, m, 2, 1);
    int S = 2 * P;
    int* fdone = (int*)mallocCheck((size_t)S * m * sizeof(int));  // when F(mb, stage) ended; -1: not yet
    int* bdone = (int*)mallocCheck((size_t)S * m * sizeof(int));
    int* wq = (int*)mallocCheck((size_t)P * 2 * m * sizeof(int));  // each rank's pending W's: mb * 2 + chunk
    int* st = (int*)calloc((size_t)P * 7, sizeof(int));            // per rank: f0 f1 b0 b1 wq_head wq_tail live
    for (int i = 0; i < S * m; i++) fdone[i] = bdone[i] = -1;
    for (int t = 0, left = 6 * P * m; left > 0; t++) {
        if (t > 12 * P * m + 4 * P) fatal("zbv: the list does not finish (P=%d m=%d)", P, m);
        for (int r = 0; r < P; r++) {  // each rank picks what to run in [t, t + 1)
            int* f = st + r * 7; int* b = f + 2; int* q = f + 4; int* live = f + 6;
            int op = -1, c = 0;
            for (int k = 0; k < 2 && op < 0; k++) {  // a B whose gradient is here, chunk 0 first
                int v = pipe_stage_of(1, P, r, k), mb = b[k];
                if (mb < f[k] && fdone[v * m + mb] >= 0 && fdone[v * m + mb] <= t &&
                    (v == S - 1 || (bdone[(v + 1) * m + mb] >= 0 && bdone[(v + 1) * m + mb] <= t))) { op = PIPE_B; c = k; }
            }
            for (int k = 1; k >= 0 && op < 0 && *live < 2 * P; k--) {  // an F whose input is here, within the bound
                int v = pipe_stage_of(1, P, r, k), mb = f[k];
                if (mb < m && (v == 0 || (fdone[(v - 1) * m + mb] >= 0 && fdone[(v - 1) * m + mb] <= t))) { op = PIPE_F; c = k; }
            }
            if (op < 0 && q[0] < q[1]) op = PIPE_W;
            if (op < 0) continue;
            left--;
            if (op == PIPE_F) {
                fdone[pipe_stage_of(1, P, r, c) * m + f[c]] = t + 1;
                schedule_push(s, r, PIPE_F, f[c]++, c);
                (*live)++;
            } else if (op == PIPE_B) {
                bdone[pipe_stage_of(1, P, r, c) * m + b[c]] = t + 1;
                wq[r * 2 * m + q[1]++] = b[c] * 2 + c;
                schedule_push(s, r, PIPE_B, b[c]++, c);
            } else {
                int k = wq[r * 2 * m + q[0]++];
                schedule_push(s, r, PIPE_W, k / 2, k % 2);
                (*live)--;
            }
        }
    }
    free(fdone); free(bdone); free(wq); free(st);
}
