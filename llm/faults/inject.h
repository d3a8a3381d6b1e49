// inject.h: fault injection, so that every failure the trainer must survive can be caused on purpose
// by a flag (tests and demonstrations). Each fault is one spec; several are separated by ';':
//
//   --inject 'die@step=5,rank=1'             rank 1 exits (status 1, no clean-up) at the start of step 5
//   --inject 'hang@step=5,rank=1'            rank 1 stops making progress at step 5 (sleeps forever)
//   --inject 'hang@step=5,rank=1,at=reduce'  the same after its forward and backward, where its gradient
//                                            reductions are waited (the dp all-reduces in flight, then
//                                            the tied embedding's all-reduce of the first and last
//                                            pipeline stage): its peers wait in those (die takes at= too)
//   --inject 'nan@step=5,rank=1'             a NaN in rank 1's gradients at step 5 (after its backward)
//   --inject 'gradspike@step=5,rank=1,factor=16'
//                                            rank 1's gradients at step 5 multiplied by 16 before their
//                                            reduction (its loss as it was: a spike of the gradient norm
//                                            alone, for llm/faults/health.h's grad-norm rule; factor default 16)
//   --inject 'spike@step=5,rank=0'           rank 0's batch at step 5 is replaced by one that blows the
//                                            loss up (random targets: the loss jumps to ~ln V and more);
//                                            the batch of rank 0's dp slice: all its tp, cp and pp ranks
//   --inject 'slow@rank=2,ms=200'            rank 2 takes 200 ms longer per step from step 1 (a straggler);
//                                            with step=N it starts at step N
//   --inject 'bitflip@step=5,rank=1,index=123,bit=30'
//                                            bit 30 of element 123 of rank 1's parameters flipped after
//                                            step 5's update (silent data corruption)
//   --inject 'diskfail@step=4,rank=1,bytes=1000'
//                                            rank 1's checkpoint write of step 4 fails after 1000 bytes
//                                            (ENOSPC, as a full disk; llm/ckpt/ckpt_shard.h's writer; on
//                                            rank 0 the count goes on into the manifest)
//   --inject 'slowdisk@rank=0,ms=20'         rank 0's checkpoint writes sleep 20 ms per 4 KiB (a slow
//                                            disk: the kill -9 test lands in the middle of saves)
//
// Keys: step (the step it happens at; default 1), rank (world rank; default 0), count (nan, spike,
// gradspike: on this many consecutive steps; default 1), ms (slow, slowdisk), bytes (diskfail; default 0),
// index, bit (bitflip; defaults 0 and 30, the top exponent bit of an FP32 value), factor (gradspike: a
// number > 0; default 16, a power of two, so that the scaled gradients are exact), at (die, hang: start,
// the default, or reduce). A fault fires once per step it covers, on its rank only; the other ranks see
// what a real failure would show them. The trainer fires nan, spike, gradspike and bitflip only the first
// time it runs a step (a rollback, llm/faults/health.h, repeats step numbers: a transient fault does not come
// back). The parser checks everything before the run starts: a bad spec ends the program with one line
// naming it.
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../core/rand.h"
#include "../comm/comm.h"
#include "../parallel/dp.h"
#include "health.h"  // health_bitflip

typedef enum { INJECT_DIE, INJECT_HANG, INJECT_NAN, INJECT_SPIKE, INJECT_SLOW, INJECT_BITFLIP, INJECT_DISKFAIL, INJECT_SLOWDISK,
               INJECT_GRADSPIKE, INJECT_NUM_KINDS } InjectKind;
static const char* const INJECT_KIND_NAMES[INJECT_NUM_KINDS] = {"die", "hang", "nan", "spike", "slow", "bitflip", "diskfail", "slowdisk",
                                                                "gradspike"};

#define INJECT_AT_START 0   // die, hang: at the start of the step (inject_before_step)
#define INJECT_AT_REDUCE 1  // after the step's forward and backward, before its gradient reductions are waited

typedef struct {
    InjectKind kind;
    int step, rank, count, ms, bit;
    int at;      // die, hang: INJECT_AT_START or INJECT_AT_REDUCE
    long index;
    long bytes;  // diskfail: the write fails once the file has this many bytes
    float factor;  // gradspike: the gradients' multiplier
} InjectFault;

#define INJECT_MAX 16
typedef struct {
    InjectFault fault[INJECT_MAX];
    int n;
    int reached;  // the highest step begun (a step run again after a rollback is not fresh)
    int fresh;    // the step now running runs for the first time
    int nan_now;  // nan: 1 puts a NaN into the next unit gradient this rank finishes this step (then back to 0)
    float grad_factor_now;  // gradspike: != 0 multiplies every unit gradient this rank finishes this step by it
} InjectPlan;

// parse one "key=value" integer of spec; 0 on success, else writes why into err
static int inject_parse_long(const char* spec, const char* key, const char* v, size_t len, long lo, long hi, long* out,
                             char* err, size_t cap) {
    char buf[32];
    if (len == 0 || len >= sizeof(buf)) {
        snprintf(err, cap, "'%s': %s: expected an integer, found '%.*s'", spec, key, (int)len, v);
        return 1;
    }
    memcpy(buf, v, len);
    buf[len] = '\0';
    char* end = NULL;
    errno = 0;
    long x = strtol(buf, &end, 10);
    if (errno != 0 || *end != '\0' || x < lo || x > hi) {
        snprintf(err, cap, "'%s': %s: expected an integer in %ld..%ld, found '%s'", spec, key, lo, hi, buf);
        return 1;
    }
    *out = x;
    return 0;
}

// one spec "kind@key=value,..." of length len; 0 on success
static int inject_parse_one(InjectFault* f, const char* spec, size_t len, char* err, size_t cap) {
    char s[256];
    if (len >= sizeof(s)) { snprintf(err, cap, "a spec longer than %zu characters", sizeof(s) - 1); return 1; }
    memcpy(s, spec, len);
    s[len] = '\0';
    memset(f, 0, sizeof(*f));
    f->step = 1; f->rank = 0; f->count = 1; f->ms = 0; f->index = 0; f->bit = 30; f->factor = 16.0f;
    const char* at = strchr(s, '@');
    size_t klen = at ? (size_t)(at - s) : strlen(s);
    int kind = -1;
    for (int k = 0; k < INJECT_NUM_KINDS; k++) {
        if (strlen(INJECT_KIND_NAMES[k]) == klen && strncmp(s, INJECT_KIND_NAMES[k], klen) == 0) kind = k;
    }
    if (kind < 0) {
        snprintf(err, cap, "'%s': expected a fault die, hang, nan, spike, gradspike, slow, bitflip, diskfail or slowdisk before '@', found '%.*s'", s, (int)klen, s);
        return 1;
    }
    f->kind = (InjectKind)kind;
    int have_ms = 0;
    for (const char* p = at ? at + 1 : s + klen; *p != '\0';) {
        const char* comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        const char* eq = (const char*)memchr(p, '=', n);
        if (eq == NULL) { snprintf(err, cap, "'%s': expected key=value, found '%.*s'", s, (int)n, p); return 1; }
        size_t kl = (size_t)(eq - p), vl = n - kl - 1;
        long x = 0;
        if (kl == 4 && !strncmp(p, "step", 4)) {
            if (inject_parse_long(s, "step", eq + 1, vl, 1, INT_MAX, &x, err, cap)) return 1;
            f->step = (int)x;
        } else if (kl == 4 && !strncmp(p, "rank", 4)) {
            if (inject_parse_long(s, "rank", eq + 1, vl, 0, 1 << 20, &x, err, cap)) return 1;
            f->rank = (int)x;
        } else if (kl == 5 && !strncmp(p, "count", 5) && (kind == INJECT_NAN || kind == INJECT_SPIKE || kind == INJECT_GRADSPIKE)) {
            if (inject_parse_long(s, "count", eq + 1, vl, 1, INT_MAX, &x, err, cap)) return 1;
            f->count = (int)x;
        } else if (kl == 5 && !strncmp(p, "bytes", 5) && kind == INJECT_DISKFAIL) {
            if (inject_parse_long(s, "bytes", eq + 1, vl, 0, LONG_MAX, &x, err, cap)) return 1;
            f->bytes = x;
        } else if (kl == 2 && !strncmp(p, "ms", 2) && (kind == INJECT_SLOW || kind == INJECT_SLOWDISK)) {
            if (inject_parse_long(s, "ms", eq + 1, vl, 1, 3600000, &x, err, cap)) return 1;
            f->ms = (int)x;
            have_ms = 1;
        } else if (kl == 5 && !strncmp(p, "index", 5) && kind == INJECT_BITFLIP) {
            if (inject_parse_long(s, "index", eq + 1, vl, 0, LONG_MAX, &x, err, cap)) return 1;
            f->index = x;
        } else if (kl == 2 && !strncmp(p, "at", 2) && (kind == INJECT_DIE || kind == INJECT_HANG)) {
            if (vl == 5 && !strncmp(eq + 1, "start", 5)) f->at = INJECT_AT_START;
            else if (vl == 6 && !strncmp(eq + 1, "reduce", 6)) f->at = INJECT_AT_REDUCE;
            else { snprintf(err, cap, "'%s': at: expected start or reduce, found '%.*s'", s, (int)vl, eq + 1); return 1; }
        } else if (kl == 3 && !strncmp(p, "bit", 3) && kind == INJECT_BITFLIP) {
            if (inject_parse_long(s, "bit", eq + 1, vl, 0, 31, &x, err, cap)) return 1;
            f->bit = (int)x;
        } else if (kl == 6 && !strncmp(p, "factor", 6) && kind == INJECT_GRADSPIKE) {
            char buf[32], *end = NULL;
            if (vl == 0 || vl >= sizeof(buf)) { snprintf(err, cap, "'%s': factor: expected a number > 0, found '%.*s'", s, (int)vl, eq + 1); return 1; }
            memcpy(buf, eq + 1, vl);
            buf[vl] = '\0';
            errno = 0;
            f->factor = strtof(buf, &end);
            if (errno != 0 || *end != '\0' || !isfinite(f->factor) || f->factor <= 0.0f) {
                snprintf(err, cap, "'%s': factor: expected a number > 0, found '%s'", s, buf);
                return 1;
            }
        } else {
            snprintf(err, cap, "'%s': unknown key '%.*s' for %s (keys: step, rank%s)", s, (int)kl, p, INJECT_KIND_NAMES[kind],
                     kind == INJECT_NAN || kind == INJECT_SPIKE ? ", count" : kind == INJECT_GRADSPIKE ? ", count, factor" :
                     kind == INJECT_SLOW || kind == INJECT_SLOWDISK ? ", ms" : kind == INJECT_DISKFAIL ? ", bytes" :
                     kind == INJECT_BITFLIP ? ", index, bit" : kind == INJECT_DIE || kind == INJECT_HANG ? ", at" : "");
            return 1;
        }
        p += n + (comma ? 1 : 0);
    }
    if (kind == INJECT_SLOW && !have_ms) { snprintf(err, cap, "'%s': slow needs ms=<milliseconds per step>", s); return 1; }
    if (kind == INJECT_SLOWDISK && !have_ms) { snprintf(err, cap, "'%s': slowdisk needs ms=<milliseconds per 4 KiB written>", s); return 1; }
    return 0;
}

// the whole flag value, specs separated by ';'. Bad input: one line naming the flag and the spec, exit 1.
// world_size: the ranks that exist (a fault on a rank beyond them is refused).
static void inject_parse(InjectPlan* plan, const char* value, int world_size) {
    memset(plan, 0, sizeof(*plan));
    if (value == NULL || value[0] == '\0') return;
    char err[512];
    for (const char* p = value; *p != '\0';) {
        const char* semi = strchr(p, ';');
        size_t n = semi ? (size_t)(semi - p) : strlen(p);
        if (plan->n == INJECT_MAX) fatal("--inject: expected at most %d faults, found more in '%s'", INJECT_MAX, value);
        InjectFault* f = &plan->fault[plan->n];
        if (inject_parse_one(f, p, n, err, sizeof(err))) fatal("--inject: %s", err);
        if (f->rank >= world_size) {
            fatal("--inject: '%.*s': expected a rank below the world size %d, found rank=%d", (int)n, p, world_size, f->rank);
        }
        plan->n++;
        p += n + (semi ? 1 : 0);
    }
}

// the fault of this kind that covers (step, rank), or NULL. slow and slowdisk cover every step from their step on.
static const InjectFault* inject_find(const InjectPlan* plan, InjectKind kind, int step, int rank) {
    for (int i = 0; i < plan->n; i++) {
        const InjectFault* f = &plan->fault[i];
        if (f->kind != kind || f->rank != rank) continue;
        int last = kind == INJECT_SLOW || kind == INJECT_SLOWDISK ? INT_MAX
                 : f->step + (kind == INJECT_NAN || kind == INJECT_SPIKE || kind == INJECT_GRADSPIKE ? f->count - 1 : 0);
        if (step >= f->step && step <= last) return f;
    }
    return NULL;
}

// die and hang at point `at` of a step (INJECT_AT_*): die exits at once (as a crash: no MPI_Finalize,
// no flush of anything but this line), hang sleeps forever (the process is alive, its collectives
// never come: only a watchdog can see it)
static void inject_stop(const InjectPlan* plan, int step, int rank, int at) {
    for (int k = INJECT_DIE; k <= INJECT_HANG; k++) {
        const InjectFault* f = inject_find(plan, (InjectKind)k, step, rank);
        if (f == NULL || f->at != at) continue;
        fprintf(stderr, "inject: rank %d %s at step %d%s (--inject %s)\n", rank, k == INJECT_DIE ? "dies" : "hangs", step,
                at == INJECT_AT_REDUCE ? " before its gradient reductions" : "", INJECT_KIND_NAMES[k]);
        fflush(stderr);
        if (k == INJECT_DIE) _exit(EXIT_FAILURE);
        for (;;) sleep(3600);
    }
}

// ----------------------------------------------------------------------------
// the faults of a training step, behind the calls the loop makes (train_gpt.cu)

// Before step `step`: die, hang (those at its start) and slow on this rank; a spike on a rank of this
// rank's dp slice (every tp, cp and pp rank of the slice reads the bad batch: targets (n) become random
// tokens); which gradient faults inject_grad_hook puts in this step. The faults of the gradients, batch and
// parameters strike the first time a step runs only (a rollback repeats step numbers: a transient fault
// does not come back).
static void inject_before_step(InjectPlan* plan, const Comm* c, int step, int* targets, size_t n, int vocab) {
    plan->fresh = step > plan->reached;
    if (plan->fresh) plan->reached = step;
    int spike = 0;
    for (int w = 0; w < c->world_size && plan->fresh; w++) {  // the ranks of my dp coordinate read my batch
        if (mesh_coord(&c->mesh, w, AXIS_DP) == c->mesh.dp.rank) spike |= inject_find(plan, INJECT_SPIKE, step, w) != NULL;
    }
    if (spike) {
        Rng r;
        rng_init(&r, 0x5bd1e995u + (uint64_t)step);
        for (size_t i = 0; i < n; i++) targets[i] = (int)(rng_u64(&r) % (uint64_t)vocab);
    }
    plan->nan_now = plan->fresh && inject_find(plan, INJECT_NAN, step, c->world_rank) != NULL;
    const InjectFault* gs = plan->fresh ? inject_find(plan, INJECT_GRADSPIKE, step, c->world_rank) : NULL;
    plan->grad_factor_now = gs ? gs->factor : 0.0f;
    inject_stop(plan, step, c->world_rank, INJECT_AT_START);
    const InjectFault* slow = inject_find(plan, INJECT_SLOW, step, c->world_rank);
    if (slow) usleep((useconds_t)slow->ms * 1000);
}

// The gradient faults, on each unit gradient this rank finished, before its reduction: the data-parallel
// policy's GradHook (llm/parallel/dp.h; inject_grad_hook gives it at dp_init). nan: a NaN in the unit's first
// value (once per step); gradspike: the whole unit times the factor (through the host: a test's fault, not a
// hot path).
static void inject_before_reduce(void* ctx, floatX* grad, size_t n) {
    InjectPlan* plan = (InjectPlan*)ctx;
    if (plan->nan_now) {
        floatX nan_x = float_to_floatX(NAN);
        device_synchronize();
        copy_to_device(grad, &nan_x, sizeof(floatX));
        plan->nan_now = 0;
    }
    if (plan->grad_factor_now != 0.0f) {
        float* h = (float*)mallocCheck(n * sizeof(float));
        device_synchronize();
        copy_to_host_float(h, grad, n);
        for (size_t i = 0; i < n; i++) h[i] *= plan->grad_factor_now;
        copy_floats_to_device(grad, h, n);
        free(h);
    }
}
static GradHook inject_grad_hook(InjectPlan* plan) {
    GradHook h = {plan, inject_before_reduce};
    return h;
}

// inside the step, after this rank's forward and backward, before its gradient reductions are waited:
// die and hang with at=reduce
static void inject_before_reductions(const InjectPlan* plan, int step, int rank) { inject_stop(plan, step, rank, INJECT_AT_REDUCE); }

// after the step's update: a flipped bit in this rank's parameters (silent data corruption)
static void inject_after_update(const InjectPlan* plan, DataParallel* dp, int step) {
    const InjectFault* flip = plan->fresh ? inject_find(plan, INJECT_BITFLIP, step, dp->comm->world_rank) : NULL;
    if (flip == NULL) return;
    health_bitflip(dp, flip->index, flip->bit);
    fprintf(stderr, "inject: rank %d flips bit %d of parameter %ld after step %d (--inject bitflip)\n", dp->comm->world_rank, flip->bit,
            flip->index, step);
}
