// test_schedule.cu: the pipeline schedules of llm/parallel/schedule.h and their simulator, no model.
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
//       at most 2P - 1 micro-batches between their F and W (llm/parallel/schedule.h says why), and with the
//       costs this project's CPU measures (F = 1, B = 1.1, W = 0.4) still less bubble time than 1F1B
//       for every P and m (a list that defers W's without a bound piles them up at the end and loses);
//     peak live micro-batches per rank: gpipe m, 1f1b min(P - r, m).
//  3. The communication plan (llm/parallel/schedule.h: pipe_plan) for every case of item 1 with P >= 2: every
//     message once as a send on its producer's rank and once as a receive on its consumer's, each
//     receive in the batch just before its consumer, each send after its producer; and, played with
//     rendezvous messages (a batch finishes only when every message of it meets its partner in the
//     peer's current batch: NCCL's and large MPI messages' behaviour), every rank gets through. The
//     naive order (each send alone right after its producer) played the same way deadlocks in some
//     cases (ZB-H1 at P = 2 among them): the player can see a deadlock.
//  4. The split of L layers over S virtual stages (llm/parallel/pipeline.h): contiguous, each layer once, sizes
//     differing by at most one, the last stage (with the head) never larger than another.
//  Prints the bubble table for P = 4, 8 and m = 4, 8, 16, 32 beside the formulas.
#include "../llm/core/common.h"
#include "../llm/parallel/schedule.h"
#include "../llm/parallel/pipeline.h"
#include "test_common.h"
#include "../llm/core/usage.h"
#include <vector>
#include <map>
#include <unistd.h>
#include <algorithm>

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

// the batch of rank r at its position: plan entries [k, e) due before op i (e == k: none)
static int batch_end(const PipePlan* p, int r, int k, int i) {
    int e = k;
    while (e < p->n[r] && p->x[r][e].before == i && p->x[r][e].t == p->x[r][k].t) e++;
    return e;
}

// Plays the plan with rendezvous messages: a rank computes until its next batch and posts it; a
// message is done when its partner is posted in the peer's current batch (both are then done); a batch
// ends when all its messages are done. 1 if every rank gets through its ops and messages.
static int play_rendezvous(const Schedule* s, const PipePlan* p) {
    int P = s->P;
    std::vector<int> op(P, 0), k(P, 0);
    std::vector<std::vector<char>> done(P);
    for (int r = 0; r < P; r++) done[r].assign((size_t)p->n[r], 0);
    for (;;) {
        int progress = 0, finished = 1;
        for (int r = 0; r < P; r++) {  // compute until the next batch
            while (op[r] < s->n[r] && batch_end(p, r, k[r], op[r]) == k[r]) { op[r]++; progress = 1; }
            if (op[r] < s->n[r] || k[r] < p->n[r]) finished = 0;
        }
        if (finished) return 1;
        for (int r = 0; r < P; r++) {  // match the posted messages
            int e = batch_end(p, r, k[r], op[r]);
            for (int a = k[r]; a < e; a++) {
                const PipeXfer* x = &p->x[r][a];
                int q = x->peer, eq = batch_end(p, q, k[q], op[q]);
                for (int b = k[q]; b < eq && !done[r][a]; b++) {
                    const PipeXfer* y = &p->x[q][b];
                    if (!done[q][b] && y->peer == r && y->send != x->send && y->kind == x->kind && y->mb == x->mb && y->stage == x->stage) {
                        done[r][a] = done[q][b] = 1;
                        progress = 1;
                    }
                }
            }
        }
        for (int r = 0; r < P; r++) {  // the batches whose messages are all done end
            int e = batch_end(p, r, k[r], op[r]), all = e > k[r];
            for (int a = k[r]; a < e; a++) all &= done[r][a];
            if (all) { k[r] = e; progress = 1; }
        }
        if (!progress) return 0;
    }
}

// the naive order: each send alone right after the op that produced it, each receive alone just
// before the op that needs it
static PipePlan naive_plan(const Schedule* s, const PipePlan* p) {
    PipePlan q;
    q.P = p->P;
    q.n = (int*)calloc((size_t)q.P, sizeof(int));
    q.x = (PipeXfer**)mallocCheck((size_t)q.P * sizeof(PipeXfer*));
    for (int r = 0; r < q.P; r++) {
        q.x[r] = (PipeXfer*)mallocCheck((size_t)(p->n[r] + 1) * sizeof(PipeXfer));
        std::vector<std::pair<double, PipeXfer>> v;
        for (int a = 0; a < p->n[r]; a++) {
            PipeXfer x = p->x[r][a];
            int at = -1;  // the op that produces (send) or consumes (receive) it on this rank
            for (int i = 0; i < s->n[r]; i++) {
                PipeOp o = s->ops[r][i];
                int st = o.chunk * s->P + r;
                if (x.send && o.kind == x.kind && o.mb == x.mb && st == x.stage) at = i;
                if (!x.send && o.kind == x.kind && o.mb == x.mb && st == x.stage + (x.kind == PIPE_F ? 1 : -1)) at = i;
            }
            x.before = x.send ? at + 1 : at;
            v.push_back({x.before * 2.0 + (x.send ? 0.0 : 1.0) + 1e-3 * a, x});  // sends first, then the receive
        }
        std::sort(v.begin(), v.end(), [](const std::pair<double, PipeXfer>& a, const std::pair<double, PipeXfer>& b) { return a.first < b.first; });
        for (size_t a = 0; a < v.size(); a++) { q.x[r][q.n[r]] = v[a].second; q.x[r][q.n[r]].t = (double)a; q.n[r]++; }
    }
    return q;
}

// item 3's bookkeeping checks of a plan; 1 if they hold
static int check_plan(const Schedule* s, const PipePlan* p) {
    int P = s->P, S = P * s->V, want = 0;
    for (int r = 0; r < P; r++)
        for (int i = 0; i < s->n[r]; i++) {
            PipeOp o = s->ops[r][i];
            int st = o.chunk * P + r;
            want += (o.kind == PIPE_F && st > 0) + (o.kind == PIPE_B && st < S - 1);
        }
    int sends = 0, recvs = 0;
    for (int r = 0; r < P; r++) {
        for (int a = 0; a < p->n[r]; a++) {
            const PipeXfer* x = &p->x[r][a];
            if (a > 0 && (p->x[r][a - 1].t > x->t || p->x[r][a - 1].before > x->before)) return 0;  // in time order
            int matched = 0;  // the partner, once, with the same time
            for (int b = 0; b < p->n[x->peer]; b++) {
                const PipeXfer* y = &p->x[x->peer][b];
                matched += y->peer == r && y->send != x->send && y->kind == x->kind && y->mb == x->mb && y->stage == x->stage && y->t == x->t;
            }
            if (matched != 1) return 0;
            for (int i = 0; i < s->n[r]; i++) {  // the producer before a send, the consumer right after a receive
                PipeOp o = s->ops[r][i];
                int st = o.chunk * P + r;
                if (x->send && o.kind == x->kind && o.mb == x->mb && st == x->stage && i >= x->before) return 0;
                if (!x->send && o.kind == x->kind && o.mb == x->mb && st == x->stage + (x->kind == PIPE_F ? 1 : -1) && i != x->before) return 0;
            }
            sends += x->send;
            recvs += !x->send;
        }
    }
    return sends == want && recvs == want;
}

static const char* USAGE =
    "(no arguments)\n"
    "Tests the pipeline schedules of llm/parallel/schedule.h and their simulator: structure and deadlock\n"
    "freedom, the bubble against the papers' formulas, the communication plan, the split of layers over\n"
    "stages; prints the bubble table for P = 4, 8 and m = 4 to 32.\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
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

    // 3. the communication plan
    for (int ni = 0; ni < 4; ni++) {
        int cases = 0, good = 0, naive_deadlocks = 0;
        for (int P : Ps)
            for (int m = 1; m <= 17; m++)
                for (int V = 1; V <= 3; V++) {
                    char err[256];
                    if (P < 2 || schedule_error(NAMES[ni], P, m, V, err, sizeof(err))) continue;
                    Schedule s;
                    schedule_make(&s, NAMES[ni], P, m, V);
                    PipePlan p = pipe_plan(&s);
                    PipePlan q = naive_plan(&s, &p);
                    int ok = check_plan(&s, &p) && play_rendezvous(&s, &p);
                    if (!ok) printf("  %s P=%d m=%d V=%d: the plan fails\n", NAMES[ni], P, m, V);
                    naive_deadlocks += !play_rendezvous(&s, &q);
                    cases++;
                    good += ok;
                    pipe_plan_free(&q);
                    pipe_plan_free(&p);
                    schedule_free(&s);
                }
        check(cases > 0 && good == cases && (ni != 3 || naive_deadlocks > 0),
              "%s: the communication plan of %d of %d (P >= 2, m, V) cases matches every message once, receives just before "
              "their op, sends after theirs, and gets through with rendezvous messages (the naive order deadlocks in %d)",
              NAMES[ni], good, cases, naive_deadlocks);
    }

    // 4. the split of the layers
    {
        int ok = 1, cases = 0;
        for (int L = 1; L <= 48; L++)
            for (int S = 1; S <= L; S++) {
                int next = 0, lo = L, hi = 0, last = 0;
                for (int v = 0; v < S; v++) {
                    int l0, l1;
                    pipe_stage_layers(L, S, v, &l0, &l1);
                    ok &= l0 == next && l1 > l0;
                    next = l1;
                    lo = std::min(lo, l1 - l0); hi = std::max(hi, l1 - l0);
                    if (v == S - 1) last = l1 - l0;
                }
                ok &= next == L && hi - lo <= 1 && last == lo;
                cases++;
            }
        check(ok, "the layer split of L = 1..48 over S = 1..L stages (%d cases): contiguous, each layer once, sizes within one, "
              "the last stage the smallest", cases);
    }

    // 2. the simulator against the formulas (no P2P latency)
    int formula_ok = 1, peak_ok = 1;
    double worst_zb = 0.0, best_zb = 1e9;
    int zb_peak = 0, zb_peak_ok = 1;  // micro-batches between F and W, at most 2P - 1 (llm/parallel/schedule.h)
    int zb_cpu_ok = 1, zb_cpu_cases = 0;  // with the CPU's costs, never more bubble time than 1F1B
    double zb_cpu_worst = 0.0;
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
                    if (sz.peak_live[r] > 2 * P - 1) zb_peak_ok = 0;
                }
                PipeSim ca = pipe_simulate(&a, PipeCosts{1.0, 1.5, 0.0, 0.0});
                PipeSim cz = pipe_simulate(&z, PipeCosts{1.0, 1.1, 0.4, 0.0});
                double qc = (cz.bubble * cz.makespan) / (ca.bubble * ca.makespan);
                if (qc > zb_cpu_worst) zb_cpu_worst = qc;
                zb_cpu_ok &= qc < 1.0;
                zb_cpu_cases++;
                pipe_sim_free(&ca); pipe_sim_free(&cz);
                pipe_sim_free(&sa); pipe_sim_free(&sz);
                schedule_free(&a); schedule_free(&z);
            }
        }
    check(formula_ok, "gpipe and 1f1b bubble = (P-1)/(m+P-1), interleaved = (P-1)/(Vm+P-1), for every P and m (zero latency)");
    check(peak_ok, "peak live micro-batches per rank: gpipe m, 1f1b min(P - r, m)");
    check(worst_zb <= 0.34 && best_zb >= 0.32,
          "zb-h1 bubble time / 1f1b's with F = B = W (m >= P): %.3f to %.3f, about a third (Qi et al. 2023)", best_zb, worst_zb);
    check(zb_peak_ok && zb_peak <= 15, "zb-h1 micro-batches between F and W at most 2P - 1 (largest seen %d, P <= 8)", zb_peak);
    check(zb_cpu_ok && zb_cpu_cases > 0, "zb-h1 with the CPU's costs (F 1, B 1.1, W 0.4) against 1f1b (F 1, B 1.5): less bubble time in all "
          "%d cases (at most %.3f of 1f1b's)", zb_cpu_cases, zb_cpu_worst);

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
