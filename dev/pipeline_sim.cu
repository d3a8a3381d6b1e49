// pipeline_sim.cu: run a pipeline schedule of llm/parallel/schedule.h in the simulator, no model, and look at it.
//   build/pipeline_sim --schedule 1f1b --pp 4 -m 8 [--vpp V] [--f 1 --b 2 --w 0 --p2p 0] [--trace FILE] [--json 1]
// Prints each rank's ops, busy and idle time and peak of live micro-batches, the bubble fraction
// beside the formula of the schedule, and with --trace writes a Chrome/Perfetto trace
// (scripts/plot_trace.py draws it as a PNG). Costs: one chunk's F, B and W (with a schedule that does
// not split the backward, B is the whole backward and W is ignored).
// --json 1 prints one JSON object instead, what the planner (scripts/plan.py) takes from the simulator rather
// than from a second formula: the bubble and makespan, and per rank its virtual stages, the slots each chunk's
// list keeps alive (pipe_peak_slots: the executor's activation slots), the B outputs held before their sends
// (pipe_peak_sends: its gradient send buffers) and the messages of the communication plan it sends and
// receives (pipe_plan), by kind (F: activations, B: gradients).
#include "../llm/core/common.h"
#include "../llm/parallel/schedule.h"
#include "../llm/core/usage.h"

static const char* USAGE =
    "[--schedule NAME] [--pp P] [-m M] [--vpp V] [--f F --b B --w W --p2p X] [--trace FILE] [--json 1]\n"
    "Runs a pipeline schedule of llm/parallel/schedule.h in the simulator (no model): prints each rank's ops,\n"
    "busy and idle time and peak of live micro-batches, and the bubble fraction beside the schedule's formula.\n"
    "  --schedule NAME  gpipe, 1f1b, interleaved, zb-h1, zbv or dualpipev (default 1f1b)\n"
    "  --pp P           pipeline stages (default 4)\n"
    "  -m M             micro-batches (default 8)\n"
    "  --vpp V          chunks per stage, interleaved schedules (default 1; zbv and dualpipev: 2)\n"
    "  --f F, --b B     cost of one chunk's forward and backward (default 1 and 2; with a split backward\n"
    "  --w W            B and W default to 1 and 1; W is ignored by a schedule that does not split it)\n"
    "  --p2p X          cost of a send between stages (default 0)\n"
    "  --trace FILE     also write a Chrome/Perfetto trace (scripts/plot_trace.py draws it)\n"
    "  --json 1         print one JSON object (bubble, makespan; per rank: stages, slots per chunk, held sends,\n"
    "                   messages sent and received by kind) instead of the text (for scripts/plan.py)\n";

// the --json object (see the top of this file)
static void print_json(const Schedule* s, const PipeSim* sim) {
    PipePlan plan = pipe_plan(s);
    int* slots = (int*)mallocCheck((size_t)s->V * sizeof(int));
    printf("{\"schedule\":\"%s\",\"P\":%d,\"m\":%d,\"V\":%d,\"vshape\":%d,\"split_w\":%d,\"bubble\":%.17g,\"makespan\":%.17g,\"ranks\":[",
           s->name, s->P, s->m, s->V, s->vshape, s->split_w, sim->bubble, sim->makespan);
    for (int r = 0; r < s->P; r++) {
        pipe_peak_slots(s, r, slots);
        int cnt[2][2] = {{0, 0}, {0, 0}};  // [send][kind F=0, B=1]
        for (int k = 0; k < plan.n[r]; k++) cnt[plan.x[r][k].send][plan.x[r][k].kind == PIPE_B]++;
        printf("%s{\"rank\":%d,\"busy\":%.17g,\"peak_live\":%d,\"stages\":[", r ? "," : "", r, sim->busy[r], sim->peak_live[r]);
        for (int c = 0; c < s->V; c++) printf("%s%d", c ? "," : "", schedule_stage(s, r, c));
        printf("],\"slots\":[");
        for (int c = 0; c < s->V; c++) printf("%s%d", c ? "," : "", slots[c]);
        printf("],\"num_send\":%d,\"send_F\":%d,\"send_B\":%d,\"recv_F\":%d,\"recv_B\":%d}", pipe_peak_sends(s, &plan, r),
               cnt[1][0], cnt[1][1], cnt[0][0], cnt[0][1]);
    }
    printf("]}\n");
    free(slots);
    pipe_plan_free(&plan);
}

int main(int argc, char** argv) {
    const char* name = "1f1b";
    const char* trace = NULL;
    int P = 4, m = 8, V = 1, json = 0;
    PipeCosts c = {1.0, 2.0, 0.0, 0.0};
    int w_given = 0, b_given = 0;
    usage_if_help(argc, argv, USAGE);
    static const char* known[] = {"--schedule", "--pp", "-m", "--vpp", "--f", "--b", "--w", "--p2p", "--trace", "--json"};
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        int is_known = 0;  // an unknown flag is named as such, not as one that "needs a value"
        for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++) is_known |= !strcmp(a, known[k]);
        if (!is_known) usage_unknown_flag(argv, a);
        if (i + 1 >= argc) fatal("pipeline_sim: %s needs a value", a);
        const char* v = argv[++i];
        if (!strcmp(a, "--schedule")) name = v;
        else if (!strcmp(a, "--pp")) P = atoi(v);
        else if (!strcmp(a, "-m")) m = atoi(v);
        else if (!strcmp(a, "--vpp")) V = atoi(v);
        else if (!strcmp(a, "--f")) c.f = atof(v);
        else if (!strcmp(a, "--b")) { c.b = atof(v); b_given = 1; }
        else if (!strcmp(a, "--w")) { c.w = atof(v); w_given = 1; }
        else if (!strcmp(a, "--p2p")) c.p2p = atof(v);
        else if (!strcmp(a, "--trace")) trace = v;
        else if (!strcmp(a, "--json")) {
            if (strcmp(v, "0") && strcmp(v, "1")) fatal("pipeline_sim: --json: expected 0 or 1, found '%s'", v);
            json = atoi(v);
        }
        else fatal("pipeline_sim: unknown flag %s (expected --schedule --pp -m --vpp --f --b --w --p2p --trace --json)", a);
    }
    if (schedule_is_v(name) && V == 1) V = 2;  // the V: two chunks per rank
    Schedule s;
    schedule_make(&s, name, P, m, V);
    if (s.split_w && !b_given && !w_given) { c.b = 1.0; c.w = 1.0; }  // the same work as F = 1, B = 2
    PipeSim sim = pipe_simulate(&s, c);
    if (json) {
        if (sim.deadlock) fatal("pipeline_sim: the schedule deadlocks");
        print_json(&s, &sim);
        pipe_sim_free(&sim);
        schedule_free(&s);
        return 0;
    }
    printf("schedule %s, P = %d, m = %d, V = %d, costs F %.3g B %.3g W %.3g, P2P %.3g\n", s.name, P, m, V, c.f, c.b,
           s.split_w ? c.w : 0.0, c.p2p);
    if (sim.deadlock) fatal("pipeline_sim: the schedule deadlocks");
    for (int r = 0; r < P; r++) {
        printf("rank %d: busy %.3g, idle %.3g, peak live %d |", r, sim.busy[r], sim.makespan - sim.busy[r], sim.peak_live[r]);
        for (int i = 0; i < s.n[r]; i++) {
            PipeOp op = s.ops[r][i];
            if (V > 1) printf(" %s%c%d.%d", i > 0 && s.ops[r][i - 1].pair ? "&" : "", PIPE_OP_NAMES[op.kind], op.mb, op.chunk);
            else printf(" %c%d", PIPE_OP_NAMES[op.kind], op.mb);
        }
        printf("\n");
    }
    printf("makespan %.3g, bubble %.4f", sim.makespan, sim.bubble);
    if (!strcmp(name, "gpipe") || !strcmp(name, "1f1b")) printf(" (formula (P-1)/(m+P-1) = %.4f, zero latency)", (double)(P - 1) / (m + P - 1));
    if (!strcmp(name, "interleaved")) printf(" (formula (P-1)/(Vm+P-1) = %.4f with F, B of 1/V of a stage, zero latency)", (double)(P - 1) / (V * m + P - 1));
    if (schedule_is_v(name)) {  // per rank idle time against the papers (F, B: one chunk's; B + W: its whole backward)
        double idle = sim.makespan - sim.busy[0], full_b = c.b + c.w;
        printf("\nidle per rank %.4g, peak live %d chunk-micro-batches", idle, sim.peak_live[0]);
        if (!strcmp(name, "dualpipev"))
            printf(" (DualPipe README: bubble (PP/2-1)(F&B+B-3W) = %.4g with PP = 2P, F&B = F + B (run one after the other), "
                   "activations PP+1 = %d)", (P - 1) * (c.f + full_b + full_b - 3 * c.w), 2 * P + 1);
        else printf(" (ZB-V: the fill (P-1) F = %.4g with F = B = W; activations 2P = %d chunks = 1F1B's P stages)", (P - 1) * c.f, 2 * P);
    }
    printf("\n");
    if (trace) {
        if (!pipe_sim_trace(&s, &sim, c, trace)) fatal("--trace: cannot write '%s': %s", trace, strerror(errno));
        printf("trace: %s\n", trace);
    }
    pipe_sim_free(&sim);
    schedule_free(&s);
    return 0;
}
