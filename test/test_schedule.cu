// test_schedule.cu: the pipeline schedules of llm/schedule.h and their simulator, no model.
//  1. Every schedule for P in {1, 2, 3, 4, 8}, m in 1..17, V in {1, 2, 3} where it is defined: every op
//     exactly once per rank; on each rank a micro-batch chunk's F before its B, and B before W; the
//     sends between every ordered pair of ranks matched one to one, in the same order, by the
//     receives on the other side (activations forward, gradients backward: what a blocking in-order
//     executor needs); and the blocking simulator finishes (no deadlock). The undefined cases are
//     refused with one line (interleaved with m not a multiple of P, V > 1 without interleaved).
//  2. The simulator against the formulas, zero P2P latency:
//     gpipe and 1f1b: bubble = (P-1)/(m+P-1) (F = 1, B = 2), exactly;
//     interleaved: chunks of 1/V of a stage (F = 1/V, B = 2/V): bubble = (P-1)/(V m + P - 1), i.e. the
//       bubble time over the ideal time is (1/V)(P-1)/m, Narayanan et al. 2021 sec. 2.2.2;
//     zb-h1 with F = B = W = 1 against 1f1b with F = 1, B = 2 (the same work): for m >= P the bubble
//       time is about a third of 1f1b's (Qi et al. 2023: (P-1)(F+B-W) against (P-1)(F+B+W)), with
//       at most 2P micro-batches between their F and W (llm/schedule.h says why);
//     peak live micro-batches per rank: gpipe m, 1f1b min(P - r, m).
//  Prints the bubble table for P = 4, 8 and m = 4, 8, 16, 32 beside the formulas.
#include "../llm/common.h"
#include "../llm/schedule.h"
#include "test_common.h"
#include <vector>
#include <map>
#include <unistd.h>

static const char* NAMES[4] = {"gpipe", "1f1b", "interleaved", "zb-h1"};

// the structural checks of item 1; returns 1 if all hold (prints the first violation)
static int check_structure(const Schedule* s) {
    int P = s->P, m = s->m, V = s->V, S = P * V;
    for (int r = 0; r < P; r++) {
        std::vector<int> pos(3 * m * V, -1);  // position of (kind, mb, chunk) in the list
        for (int i = 0; i < s->n[r]; i++) {
            PipeOp op = s->ops[r][i];
            if (op.mb < 0 || op.mb >= m || op.chunk < 0 || op.chunk >= V || (op.kind == PIPE_W && !s->split_w)) {
                printf("  %s P=%d m=%d V=%d rank %d: op %d out of range\n", s->name, P, m, V, r, i);
                return 0;
            }
            int k = (op.kind * V + op.chunk) * m + op.mb;
            if (pos[k] >= 0) { printf("  %s P=%d m=%d V=%d rank %d: %c%d chunk %d twice\n", s->name, P, m, V, r, PIPE_OP_NAMES[op.kind], op.mb, op.chunk); return 0; }
            pos[k] = i;
        }
        for (int c = 0; c < V; c++)
            for (int mb = 0; mb < m; mb++) {
                int pf = pos[(PIPE_F * V + c) * m + mb], pb = pos[(PIPE_B * V + c) * m + mb], pw = pos[(PIPE_W * V + c) * m + mb];
                if (pf < 0 || pb < 0 || (s->split_w && pw < 0)) {
                    printf("  %s P=%d m=%d V=%d rank %d: micro-batch %d chunk %d misses an op\n", s->name, P, m, V, r, mb, c);
                    return 0;
                }
                if (!(pf < pb) || (s->split_w && !(pb < pw))) {
                    printf("  %s P=%d m=%d V=%d rank %d: micro-batch %d chunk %d out of order (F %d B %d W %d)\n", s->name, P, m, V, r, mb, c, pf, pb, pw);
                    return 0;
                }
            }
        if (s->n[r] != (s->split_w ? 3 : 2) * m * V) { printf("  %s: rank %d has %d ops\n", s->name, r, s->n[r]); return 0; }
    }
    // sends and receives between each ordered pair of ranks, in list order: F of stage st sends to
    // stage st + 1, B of stage st sends to stage st - 1; a send (mb, st) matches the receive (mb, st +- 1)
    std::map<std::pair<int, int>, std::vector<long>> sends, recvs;
    for (int r = 0; r < P; r++)
        for (int i = 0; i < s->n[r]; i++) {
            PipeOp op = s->ops[r][i];
            int st = op.chunk * P + r;
            if (op.kind == PIPE_W) continue;
            int fwd = op.kind == PIPE_F;
            int to = fwd ? st + 1 : st - 1, from = fwd ? st - 1 : st + 1;
            if (to >= 0 && to < S && to % P != r) sends[{r, to % P}].push_back(((long)op.mb * S + to) * 2 + fwd);
            if (from >= 0 && from < S && from % P != r) recvs[{from % P, r}].push_back(((long)op.mb * S + st) * 2 + fwd);
        }
    for (auto& kv : sends) {
        if (recvs[kv.first] != kv.second) {
            printf("  %s P=%d m=%d V=%d: the sends of rank %d to rank %d do not match its receives in order\n", s->name, P, m,
                   V, kv.first.first, kv.first.second);
            return 0;
        }
    }
    for (auto& kv : recvs) if (sends[kv.first].size() != kv.second.size()) { printf("  %s: unmatched receives\n", s->name); return 0; }
    return 1;
}

int main(void) {
    // 1. structure and deadlock freedom
    const int Ps[5] = {1, 2, 3, 4, 8};
    for (int ni = 0; ni < 4; ni++) {
        int cases = 0, good = 0, refused = 0, refused_ok = 0;
        for (int P : Ps)
            for (int m = 1; m <= 17; m++)
                for (int V = 1; V <= 3; V++) {
                    char err[256];
                    if (schedule_error(NAMES[ni], P, m, V, err, sizeof(err))) {
                        refused++;
                        // the refusals are exactly the stated rules
                        int want = (V > 1 && ni != 2) || (ni == 2 && m % P != 0);
                        refused_ok += want;
                        continue;
                    }
                    Schedule s;
                    schedule_make(&s, NAMES[ni], P, m, V);
                    PipeCosts c = {1.0, 2.0, 1.0, 0.25};
                    PipeSim sim = pipe_simulate(&s, c);
                    int ok = check_structure(&s) && !sim.deadlock;
                    if (sim.deadlock) printf("  %s P=%d m=%d V=%d: the simulator deadlocks\n", NAMES[ni], P, m, V);
                    cases++;
                    good += ok;
                    pipe_sim_free(&sim);
                    schedule_free(&s);
                }
        check(cases > 0 && good == cases && refused == refused_ok,
              "%s: %d of %d (P, m, V) cases each op once, F < B < W per rank, sends matched in order, no deadlock; "
              "%d refused, all by the stated rule", NAMES[ni], good, cases, refused);
    }

    // 2. the simulator against the formulas (no P2P latency)
    int formula_ok = 1, peak_ok = 1;
    double worst_zb = 0.0, best_zb = 1e9;
    int zb_peak = 0, zb_peak_ok = 1;  // micro-batches between F and W, at most 2P (llm/schedule.h)
    for (int P : Ps)
        for (int m = 1; m <= 17; m++) {
            for (int ni = 0; ni < 2; ni++) {
                Schedule s;
                schedule_make(&s, NAMES[ni], P, m, 1);
                PipeSim sim = pipe_simulate(&s, PipeCosts{1.0, 2.0, 0.0, 0.0});
                double want = (double)(P - 1) / (m + P - 1);
                if (fabs(sim.bubble - want) > 1e-12) {
                    formula_ok = 0;
                    printf("  %s P=%d m=%d: bubble %.6f, formula %.6f\n", NAMES[ni], P, m, sim.bubble, want);
                }
                for (int r = 0; r < P; r++) {
                    int want_live = ni == 0 ? m : (P - r < m ? P - r : m);
                    if (sim.peak_live[r] != want_live) {
                        peak_ok = 0;
                        printf("  %s P=%d m=%d rank %d: peak live %d, expected %d\n", NAMES[ni], P, m, r, sim.peak_live[r], want_live);
                    }
                }
                pipe_sim_free(&sim);
                schedule_free(&s);
            }
            for (int V = 2; V <= 3; V++) {
                if (m % P != 0) continue;
                Schedule s;
                schedule_make(&s, "interleaved", P, m, V);
                PipeSim sim = pipe_simulate(&s, PipeCosts{1.0 / V, 2.0 / V, 0.0, 0.0});
                double want = (double)(P - 1) / (V * m + P - 1);
                if (fabs(sim.bubble - want) > 1e-9) {
                    formula_ok = 0;
                    printf("  interleaved P=%d m=%d V=%d: bubble %.6f, formula (P-1)/(Vm+P-1) = %.6f\n", P, m, V, sim.bubble, want);
                }
                pipe_sim_free(&sim);
                schedule_free(&s);
            }
            if (P > 1 && m >= P) {  // zb-h1 against 1f1b, the same work
                Schedule a, z;
                schedule_make(&a, "1f1b", P, m, 1);
                schedule_make(&z, "zb-h1", P, m, 1);
                PipeSim sa = pipe_simulate(&a, PipeCosts{1.0, 2.0, 0.0, 0.0});
                PipeSim sz = pipe_simulate(&z, PipeCosts{1.0, 1.0, 1.0, 0.0});
                double q = (sz.bubble * sz.makespan) / (sa.bubble * sa.makespan);  // bubble time ratio
                if (q > worst_zb) worst_zb = q;
                if (q < best_zb) best_zb = q;
                for (int r = 0; r < P; r++) {
                    if (sz.peak_live[r] > zb_peak) zb_peak = sz.peak_live[r];
                    if (sz.peak_live[r] > 2 * P) zb_peak_ok = 0;
                }
                pipe_sim_free(&sa); pipe_sim_free(&sz);
                schedule_free(&a); schedule_free(&z);
            }
        }
    check(formula_ok, "gpipe and 1f1b bubble = (P-1)/(m+P-1), interleaved = (P-1)/(Vm+P-1), for every P and m (zero latency)");
    check(peak_ok, "peak live micro-batches per rank: gpipe m, 1f1b min(P - r, m)");
    check(worst_zb <= 0.34 && best_zb >= 0.32,
          "zb-h1 bubble time / 1f1b's with F = B = W (m >= P): %.3f to %.3f, about a third (Qi et al. 2023)", best_zb, worst_zb);
    check(zb_peak_ok && zb_peak <= 32, "zb-h1 micro-batches between F and W at most 2P (largest seen %d, P <= 8)", zb_peak);

    // the table
    printf("bubble fraction, zero latency (1f1b/gpipe: F=1 B=2; interleaved: F=1/V B=2/V; zb-h1: F=B=W=1):\n");
    printf("  P   m   gpipe   1f1b    (P-1)/(m+P-1)  interleaved V=2  (P-1)/(2m+P-1)  zb-h1\n");
    for (int P : {4, 8})
        for (int m : {4, 8, 16, 32}) {
            double b[4];
            for (int ni = 0; ni < 4; ni++) {
                Schedule s;
                int V = ni == 2 ? 2 : 1;
                char err[256];
                if (schedule_error(NAMES[ni], P, m, V, err, sizeof(err))) { b[ni] = NAN; continue; }
                schedule_make(&s, NAMES[ni], P, m, V);
                PipeCosts c = ni == 2 ? PipeCosts{0.5, 1.0, 0.0, 0.0} : (ni == 3 ? PipeCosts{1.0, 1.0, 1.0, 0.0} : PipeCosts{1.0, 2.0, 0.0, 0.0});
                PipeSim sim = pipe_simulate(&s, c);
                b[ni] = sim.bubble;
                pipe_sim_free(&sim);
                schedule_free(&s);
            }
            char inter[16];
            if (b[2] == b[2]) snprintf(inter, sizeof(inter), "%.4f", b[2]);
            else snprintf(inter, sizeof(inter), "  -   ");  // m not a multiple of P
            printf("  %d %3d  %.4f  %.4f  %.4f         %s           %.4f          %.4f\n", P, m, b[0], b[1],
                   (double)(P - 1) / (m + P - 1), inter, (double)(P - 1) / (2 * m + P - 1), b[3]);
        }
    // the trace of a simulated run: one complete event ("ph":"X") per op, one row name per rank
    {
        Schedule s;
        schedule_make(&s, "interleaved", 4, 8, 2);
        PipeCosts c = {0.5, 1.0, 0.0, 0.1};
        PipeSim sim = pipe_simulate(&s, c);
        char path[256];
        snprintf(path, sizeof(path), "%s/test_schedule_%d.json", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
        int wrote = pipe_sim_trace(&s, &sim, c, path);
        int events = 0, rows = 0;
        FILE* f = fopen(path, "r");
        if (f) {
            std::vector<char> text(1 << 20);
            size_t n = fread(text.data(), 1, text.size() - 1, f);
            text[n] = 0;
            fclose(f);
            for (const char* p = text.data(); (p = strstr(p, "\"ph\":\"X\"")) != NULL; p++) events++;
            for (const char* p = text.data(); (p = strstr(p, "\"thread_name\"")) != NULL; p++) rows++;
        }
        remove(path);
        int total = 0;
        for (int r = 0; r < s.P; r++) total += s.n[r];
        check(wrote && events == total && rows == s.P, "trace of interleaved P=4 m=8 V=2: %d op events (of %d ops), %d rank rows", events, total, rows);
        pipe_sim_free(&sim);
        schedule_free(&s);
    }
    return test_summary("test_schedule");
}
