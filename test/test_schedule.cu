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
//     The V schedules (zbv, dualpipev: V = 2 only, m >= 2P) map stages through their placement; their sends are
//     matched one to one but not in list order (rank r sends chunk 0's activations and chunk 1's gradients to r + 1).
//  4. The split of L layers over S virtual stages (llm/parallel/pipeline.h): contiguous, each layer once, sizes
//     differing by at most one, the last stage (with the head) never larger than another.
//  5. The V schedules (llm/parallel/schedule_v.h): the placement (pipe_owner / pipe_stage_of inverse, a bijection, the V's
//     turn on rank P-1 and both ends on rank 0); for P = 2..8 and m = 2P, 2P+1, 3P, 4P: every (micro-batch, chunk) F, B
//     and W once per rank in order, no deadlock, the communication plan through rendezvous messages; every pair (F&B) an
//     F followed by a B of the other chunk; with F = B = W every rank idles exactly (P-1) F (dualpipev for every P, zbv
//     for P = 2, 3, 4, 8 and at most 2 F more for 5, 6, 7); peak live chunks per rank zbv 2P (1F1B's memory), dualpipev
//     2P + 1 (the DualPipe README's PP + 1); dualpipev's idle at most the README's (PP/2-1)(F&B+B-3W) under other costs;
//     dualpipev's lists of ranks 0 and 3 at P = 4, m = 10 op for op against the eight phases of DualPipe's dualpipev.py,
//     written out by hand. Prints the V table for P = 4, m = 8..10.
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
#include <string>

static const char* NAMES[6] = {"gpipe", "1f1b", "interleaved", "zb-h1", "zbv", "dualpipev"};
static const int NUM_NAMES = 6;

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
            int st = schedule_stage(s, r, op.chunk);
            if (op.kind == PIPE_W) continue;
            int fwd = op.kind == PIPE_F;
            int to = fwd ? st + 1 : st - 1, from = fwd ? st - 1 : st + 1;
            if (to >= 0 && to < S && schedule_rank(s, to) != r) sends[{r, schedule_rank(s, to)}].push_back(((long)op.mb * S + to) * 2 + fwd);
            if (from >= 0 && from < S && schedule_rank(s, from) != r) recvs[{schedule_rank(s, from), r}].push_back(((long)op.mb * S + st) * 2 + fwd);
        }
    // the V's lists are not in the same order on both sides (rank r sends chunk 0's activations and chunk 1's
    // gradients to rank r + 1, which takes them in another interleaving): there, each message once, in any order
    // (the communication plan orders them: item 3)
    if (s->vshape)
        for (auto* d : {&sends, &recvs})
            for (auto& kv : *d) std::sort(kv.second.begin(), kv.second.end());
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
                int st = schedule_stage(s, r, o.chunk);
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
            int st = schedule_stage(s, r, o.chunk);  // an input from a stage on another rank: one message
            want += (o.kind == PIPE_F && st > 0 && schedule_rank(s, st - 1) != r) + (o.kind == PIPE_B && st < S - 1 && schedule_rank(s, st + 1) != r);
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
                int st = schedule_stage(s, r, o.chunk);
                if (x->send && o.kind == x->kind && o.mb == x->mb && st == x->stage && i >= x->before) return 0;
                if (!x->send && o.kind == x->kind && o.mb == x->mb && st == x->stage + (x->kind == PIPE_F ? 1 : -1) && i != x->before) return 0;
            }
            sends += x->send;
            recvs += !x->send;
        }
    }
    return sends == want && recvs == want;
}

// ----------------------------------------------------------------------------
// 5. the V schedules (llm/parallel/schedule_v.h)

// the ops of one rank as text: "F3.1" (micro-batch 3, chunk 1), "F3.1&" for an F paired with the next B
static std::string rank_ops(const Schedule* s, int r) {
    std::string t;
    for (int i = 0; i < s->n[r]; i++) {
        PipeOp o = s->ops[r][i];
        char b[16];
        snprintf(b, sizeof(b), "%s%c%d.%d%s", i ? " " : "", PIPE_OP_NAMES[o.kind], o.mb, o.chunk, o.pair ? "&" : "");
        t += b;
    }
    return t;
}

// the per-rank idle time of the simulated run: the largest and the smallest over the ranks
static void sim_idle(const PipeSim* sim, int P, double* lo, double* hi) {
    *lo = 1e30; *hi = 0.0;
    for (int r = 0; r < P; r++) {
        double id = sim->makespan - sim->busy[r];
        *lo = std::min(*lo, id); *hi = std::max(*hi, id);
    }
}

static void check_v() {
    // the placement: pipe_owner and pipe_stage_of inverse to each other for every stage; the V's shape
    {
        int ok = 1, cases = 0;
        for (int vshape = 0; vshape < 2; vshape++)
            for (int P = 1; P <= 8; P++)
                for (int V = 1; V <= 3; V++) {
                    if (vshape && V != 2) continue;
                    int S = P * V;
                    std::vector<int> seen((size_t)S, 0);
                    for (int st = 0; st < S; st++) {
                        int r, c;
                        pipe_owner(vshape, P, st, &r, &c);
                        ok &= r >= 0 && r < P && c >= 0 && c < V && pipe_stage_of(vshape, P, r, c) == st;
                        ok &= pipe_rank_of(vshape, P, st) == r && pipe_chunk_of(vshape, P, st) == c;
                        if (st > 0 && vshape) ok &= abs(pipe_rank_of(1, P, st - 1) - r) <= 1;  // neighbours on the same or the next rank
                        cases++;
                    }
                    for (int r = 0; r < P; r++)
                        for (int c = 0; c < V; c++) seen[(size_t)pipe_stage_of(vshape, P, r, c)]++;
                    for (int st = 0; st < S; st++) ok &= seen[(size_t)st] == 1;  // a bijection
                    if (vshape) ok &= pipe_rank_of(1, P, 0) == 0 && pipe_rank_of(1, P, S - 1) == 0 && pipe_rank_of(1, P, P - 1) == P - 1 &&
                                      pipe_rank_of(1, P, P) == P - 1 && pipe_chunk_of(1, P, P - 1) == 0 && pipe_chunk_of(1, P, P) == 1;
                    else ok &= pipe_rank_of(0, P, S - 1) == P - 1;
                }
        check(ok, "placement: pipe_owner and pipe_stage_of inverse for every stage of P = 1..8 (loop V = 1..3, V-shape V = 2; %d "
              "stages), a bijection; the V: stages 0 and 2P-1 on rank 0, P-1 and P on rank P-1, neighbours at most a rank apart", cases);
    }
    // every (P, m): structure, pairs, no deadlock, the plan, the idle time and the peak
    const PipeCosts unit = {1.0, 1.0, 1.0, 0.0};
    const PipeCosts others[4] = {{1.0, 2.0, 1.0, 0.0}, {1.0, 1.1, 0.4, 0.0}, {2.0, 1.0, 1.0, 0.0}, {1.0, 2.0, 2.0, 0.0}};
    for (int ni = 4; ni < NUM_NAMES; ni++) {
        int dpv = ni == 5, cases = 0, structure = 0, pairs_ok = 1, plans = 0, floor_ok = 1, near_ok = 1, peak_ok = 1, readme_ok = 1, pairs = 0;
        int peak_max = 0, over_max = 0;
        for (int P = 2; P <= 8; P++)
            for (int m : {2 * P, 2 * P + 1, 3 * P, 4 * P}) {
                Schedule s;
                schedule_make(&s, NAMES[ni], P, m, 2);
                PipeSim sim = pipe_simulate(&s, unit);
                cases++;
                structure += check_structure(&s) && !sim.deadlock;
                if (sim.deadlock) printf("  %s P=%d m=%d: the simulator deadlocks\n", NAMES[ni], P, m);
                for (int r = 0; r < P; r++)  // a pair: an F, then a B of the other chunk
                    for (int i = 0; i < s.n[r]; i++) {
                        PipeOp o = s.ops[r][i];
                        if (!o.pair) continue;
                        pairs++;
                        int good = o.kind == PIPE_F && i + 1 < s.n[r] && s.ops[r][i + 1].kind == PIPE_B && s.ops[r][i + 1].chunk != o.chunk;
                        if (!good && pairs_ok) printf("  %s P=%d m=%d rank %d: op %d is a pair not followed by a B of the other chunk\n", NAMES[ni], P, m, r, i);
                        pairs_ok &= good;
                    }
                PipePlan p = pipe_plan(&s);
                int plan_ok = check_plan(&s, &p) && play_rendezvous(&s, &p);
                if (!plan_ok) printf("  %s P=%d m=%d: the plan fails\n", NAMES[ni], P, m);
                plans += plan_ok;
                pipe_plan_free(&p);
                // idle per rank with F = B = W: the fill of (P - 1) F's that no schedule avoids
                double lo, hi;
                sim_idle(&sim, P, &lo, &hi);
                int at_floor = fabs(lo - (P - 1)) < 1e-9 && fabs(hi - (P - 1)) < 1e-9;
                if (dpv || P <= 4 || P == 8) {
                    if (!at_floor) printf("  %s P=%d m=%d: idle per rank %g..%g, expected (P-1)F = %d\n", NAMES[ni], P, m, lo, hi, P - 1);
                    floor_ok &= at_floor;
                } else {
                    over_max = std::max(over_max, (int)lround(hi - (P - 1)));
                    near_ok &= lo >= P - 1 - 1e-9 && hi <= P - 1 + 2 + 1e-9;
                }
                // the peak of live chunk-micro-batches (after F, until W): zbv 2P (1F1B's P whole stages on its first
                // rank), dualpipev 2P + 1 (the DualPipe README's PP + 1, PP = 2P stages)
                int want = dpv ? 2 * P + 1 : 2 * P;
                for (int r = 0; r < P; r++) {
                    peak_max = std::max(peak_max, sim.peak_live[r]);
                    if (sim.peak_live[r] != want) { peak_ok = 0; printf("  %s P=%d m=%d rank %d: peak %d, expected %d\n", NAMES[ni], P, m, r, sim.peak_live[r], want); }
                }
                // the DualPipe README's bubble, (PP/2 - 1)(F&B + B - 3W) with B the whole backward and, in this
                // simulator, F&B = F + B (no overlap): the list's idle per rank never above it
                if (dpv)
                    for (const PipeCosts& c : others) {
                        PipeSim o = pipe_simulate(&s, c);
                        double bf = c.b + c.w, bound = (P - 1) * ((c.f + bf) + bf - 3 * c.w);
                        sim_idle(&o, P, &lo, &hi);
                        if (hi > bound + 1e-9) { readme_ok = 0; printf("  dualpipev P=%d m=%d F=%g B=%g W=%g: idle %g > README %g\n", P, m, c.f, c.b, c.w, hi, bound); }
                        pipe_sim_free(&o);
                    }
                pipe_sim_free(&sim);
                schedule_free(&s);
            }
        check(structure == cases && plans == cases,
              "%s, P = 2..8, m = 2P, 2P+1, 3P, 4P: %d of %d cases each (micro-batch, chunk) F, B and W once per rank, F < B < W, "
              "no deadlock; the communication plan of %d gets through with rendezvous messages", NAMES[ni], structure, cases, plans);
        if (dpv) check(pairs_ok && pairs > 0, "dualpipev: each of the %d F&B pairs is an F followed by a B of the other chunk", pairs);
        else check(pairs == 0, "zbv: no pairs");
        if (dpv) check(floor_ok, "dualpipev with F = B = W: every rank idle exactly (P-1) F, P = 2..8 (the fill no schedule avoids)");
        else check(floor_ok && near_ok, "zbv with F = B = W: every rank idle exactly (P-1) F for P = 2, 3, 4, 8; P = 5, 6, 7 at most 2 F "
                   "more (largest seen %d: the greedy order is not optimal there)", over_max);
        check(peak_ok, "%s: peak live chunk-micro-batches per rank = %s (largest %d, P <= 8)", NAMES[ni],
              dpv ? "2P + 1, the DualPipe README's PP + 1" : "2P, 1F1B's P whole stages", peak_max);
        if (dpv) check(readme_ok, "dualpipev: idle per rank at most the README's (PP/2-1)(F&B+B-3W) (F&B = F + B here) for F,B,W = "
                       "1,2,1  1,1.1,0.4  2,1,1  1,2,2");
    }
    // golden lists: dualpipev at P = 4, m = 10, written from DualPipe's dualpipev.py phases by hand (rank 0: a = 3,
    // b = 1; rank 3: a = 0, b = 4; "&": the F of an overlapped pair; a B directly followed by its W: a whole backward)
    {
        const char* want0 =
            "F0.0 F1.0 F2.0 F3.0 F4.0 F5.0 "                                             // 1. 2a F0
            "F6.0 F0.1 "                                                                 // 2. b (F0 F1)
            "B0.1 W0.1 F1.1 B1.1 W1.1 F2.1 B2.1 W2.1 F3.1 "                              // 3. a (B1z W F1)
            "F7.0& B3.1 W3.1 F4.1& B0.0 W0.0 F8.0& B4.1 W4.1 F5.1& B1.0 W1.0 "          // 4. m-2P+b (F0&B1 F1&B0)
            "F9.0& B5.1 W5.1 F6.1& B2.0 W2.0 "
            "B6.1 W6.1 F7.1& B3.0 W3.0 B7.1 W7.1 F8.1& B4.0 W4.0 B8.1 W8.1 F9.1& B5.0 W5.0 "  // 5. a (B1 F1&B0)
            "B9.1 W9.1 B6.0 "                                                            // 6. b (B1 B0), B0 from the middle: W put off
            "W6.0 B7.0 W7.0 B8.0 W8.0 B9.0 "                                             // 7. a (W B0z)
            "W9.0";                                                                      // 8. b W
        const char* want3 =
            "F0.0 F0.1 F1.0 F1.1 F2.0 F2.1 F3.0 F3.1 "                                   // 2. b (F0 F1)
            "F4.0 B0.1 W0.1 F4.1& B0.0 W0.0 "                                            // 4. the last rank's first F0, B1 not overlapped
            "F5.0& B1.1 W1.1 F5.1& B1.0 W1.0 F6.0& B2.1 W2.1 F6.1& B2.0 W2.0 "
            "F7.0& B3.1 W3.1 F7.1& B3.0 W3.0 F8.0& B4.1 W4.1 F8.1& B4.0 W4.0 F9.0& B5.1 W5.1 F9.1& B5.0 W5.0 "
            "B6.1 W6.1 B6.0 W6.0 B7.1 W7.1 B7.0 W7.0 B8.1 B8.0 B9.1 B9.0 "                // 6. b (B1 B0), from the middle one W put off
            "W8.1 W8.0 W9.1 W9.0";                                                       // 8. b W
        Schedule s;
        schedule_make(&s, "dualpipev", 4, 10, 2);
        std::string got0 = rank_ops(&s, 0), got3 = rank_ops(&s, 3);
        if (got0 != want0) printf("  rank 0: %s\n  expected %s\n", got0.c_str(), want0);
        if (got3 != want3) printf("  rank 3: %s\n  expected %s\n", got3.c_str(), want3);
        check(got0 == want0 && got3 == want3, "dualpipev P = 4, m = 10: ranks 0 and 3 run DualPipeV's eight phases op for op (%d and %d ops)",
              s.n[0], s.n[3]);
        schedule_free(&s);
    }
    // the table: P = 4, m = 8..10, F = B = W = 1 (a pair costs F + B), beside 1F1B's and ZB-H1's on the same work
    printf("V schedules at P = 4 (8 virtual stages), F = B = W = 1 per chunk, zero latency: idle per rank, peak live chunks:\n");
    printf("  m   zbv idle  peak   dualpipev idle  peak   (P-1)F  README (PP/2-1)(F&B+B-3W)  1f1b (P-1)(F+B) per rank\n");
    for (int m = 8; m <= 10; m++) {
        double idle[2], lo;
        int peak[2];
        for (int k = 0; k < 2; k++) {
            Schedule s;
            schedule_make(&s, NAMES[4 + k], 4, m, 2);
            PipeSim sim = pipe_simulate(&s, unit);
            sim_idle(&sim, 4, &lo, &idle[k]);
            peak[k] = 0;
            for (int r = 0; r < 4; r++) peak[k] = std::max(peak[k], sim.peak_live[r]);
            pipe_sim_free(&sim);
            schedule_free(&s);
        }
        printf("  %2d  %5.0f    %3d    %9.0f      %3d      %d       %d                          %d\n", m, idle[0], peak[0], idle[1], peak[1], 3,
               3 * (1 + 2 + 2 - 3), 3 * (2 + 4));
    }
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
    for (int ni = 0; ni < NUM_NAMES; ni++) {
        int cases = 0, good = 0, refused = 0, refused_ok = 0;
        for (int P : Ps)
            for (int m = 1; m <= 17; m++)
                for (int V = 1; V <= 3; V++) {
                    char err[256];
                    if (schedule_error(NAMES[ni], P, m, V, err, sizeof(err))) {
                        refused++;
                        // the refusals are exactly the stated rules
                        int want = ni >= 4 ? (V != 2 || m < 2 * P) : ((V > 1 && ni != 2) || (ni == 2 && m % P != 0));
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
              "%s: %d of %d (P, m, V) cases each op once, F < B < W per rank, sends matched %s, no deadlock; "
              "%d refused, all by the stated rule", NAMES[ni], good, cases, ni >= 4 ? "one to one (the plan orders them)" : "in order", refused);
    }

    // 3. the communication plan
    for (int ni = 0; ni < NUM_NAMES; ni++) {
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

    check_v();

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
