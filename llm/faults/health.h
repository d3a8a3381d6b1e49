// health.h: the training run's health checks, before every update and every few steps: loss spikes
// and NaN/inf (llm.c's outlier detector: a z-score of the loss and of the gradient norm over a window
// of recent steps; Megatron's rerun state machine: "more than K times the recent max"), the skip of a
// bad step, the rollback to the last-known-good checkpoint after a streak of bad steps (Llama 3 report,
// sec. 3.3.4: restart from the last healthy state), and silent data corruption (SDC): a hash of the
// parameters that must be identical over the dp replicas, compared across the dp group.
//
// One step, in the trainer (train_gpt.cu):
//   the forward/backward; the loss averaged over the dp group and the gradient norm reduced over every
//   rank (llm/parallel/dp.h): the same two numbers on every rank, so every rank takes the same decision;
//   health_verdict: NULL (healthy) or why not: "loss nan", "grad norm inf", "overflow" (a non-finite
//   norm under a loss scaler, llm/precision/loss_scale.h: the scaler then halves its scale), "loss z-score 9.1 >
//   4", "loss 31 > 3 x recent max 7.2", the same for "grad norm". NaN/inf are always bad (an overflow
//   under a dynamic loss scaler is skipped but does not count in the streak below); the two
//   spike rules only once the window is full (--spike-window W healthy steps), each off at 0. Only the
//   healthy steps enter the windows.
//   a bad step is skipped: no update (parameters, moments and AdamW's step count stay), the data go on
//   (its batches are consumed), the log line says "skipped": reason.
//   after --max-bad-steps K bad steps in a row (health_needs_rollback), or an SDC mismatch: the
//   rollback, which the checkpoints' side of the loop does (run_rollback, llm/ckpt/ckpt_run.h: these
//   checks decide it and keep its state, the streak and the last step rolled back to). The model, the
//   optimizer, the loss scaler, the FP8 state, the sampler's RNG, the spike windows and the step
//   counter come back from the newest last-known-good checkpoint (step s0), and the run goes on from step s0 + 1. The data do
//   NOT rewind: the next step reads the batch after the last one read (the bad batches and those
//   between s0 and them are not seen again; what is lost is those steps' updates, not data order).
//   Without a good checkpoint, or when the newest one is the one the previous rollback went to (the
//   run made no healthy progress since), every rank stops with one line and exit code 3
//   (HEALTH_EXIT_CODE).
//
// Last-known-good: llm/ckpt/ckpt_dir.h's one answer to "which checkpoints are good", which --resume latest
// shares: every checkpoint carries the verdict of the step it follows (healthy; saved inside a streak of
// bad steps; rejected by the SDC check, which runs before every checkpoint), only a healthy one is
// listed in <output-dir>/good_checkpoints.txt, and the rollback takes the newest listed one at or before
// its step that reads back whole (its checksums), skipping each other with one line. A rollback first
// waits for an asynchronous save in flight. A fresh run starts the list empty; a run resumed from step
// s0, or rolled back to it, drops the entries after s0.
// SDC (--sdc-check-every N, and at every checkpoint): per parameter unit (the embedding, each layer,
// the final LayerNorm: llm/model/tensors.h), a 64-bit FNV-1a hash of the bytes of the parameters this rank
// computes with, all-gathered over the dp group (with the rank's world rank) and compared:
//   DDP, ZeRO-1, ZeRO-2: every dp rank holds the whole of its units (ZeRO-1/2 after the all-gather of
//     the updated parameters): all of them are compared.
//   ZeRO-3: each rank's shard is unique, there is no replica in the dp group to compare with: nothing
//     is compared (the run says so once at the start).
//   TP, PP: the dp group of a rank is the ranks with its tp and pp positions, which hold the same shards
//     of the same units: each (tp, pp) position compares its own.
// A unit whose hashes differ names the ranks: with 3 or more replicas the ones that differ from the
// majority, with 2 both. Then the rollback (same rule and exit code as above). What is hashed is the
// copy the model computes with: in builds with an FP32 master (BF16) the master is sharded under ZeRO
// and not hashed, and the next update rewrites the 16-bit copy from it, so a flip there is seen only by
// a check at its step. The spike windows and the streak are saved with every checkpoint (llm/ckpt/checkpoint.h,
// header[31..33]) and come back with it, on a resume and on a rollback alike: a resumed run takes the
// same decisions as one that never stopped, and a run after a rollback is the run resumed from that
// checkpoint (but for the data position).
#pragma once
#include "../core/common.h"
#include "../core/device.h"
#include "../comm/comm.h"
#include "../parallel/dp.h"

#define HEALTH_EXIT_CODE 3  // a rollback was needed and no checkpoint could serve

typedef struct {
    float zscore;        // --spike-zscore: bad when (x - mean) / std of the window > Z; 0 = off
    int window;          // --spike-window: the healthy steps the rules look back over
    float factor;        // --spike-factor: bad when x > K * the window's max; 0 = off
    int max_bad_steps;   // --max-bad-steps: bad steps in a row before the rollback; 0 = never roll back
    int sdc_every;       // --sdc-check-every: SDC check every N steps and at every checkpoint; 0 = never
} HealthConfig;

typedef struct {
    float* v;            // (window) the last healthy values, a ring
    int n, next;
} HealthWindow;

typedef struct {
    HealthConfig cfg;
    int have_scaler;     // a loss scaler is on: a non-finite norm is its "overflow"
    int dynamic_scaler;  // and it is dynamic: an overflow leaves the bad streak as it is (the scaler's answer
                         // is to halve its scale; overflows in a row are normal while it comes down)
    HealthWindow loss, norm;
    int bad_streak;      // bad steps in a row, up to the last one
    int skipped;         // bad steps over this process's run
    int last_rollback;   // the step of the checkpoint the last rollback went to, -1: none
    char reason[160];    // why the last step was bad
} Health;

static void health_init(Health* h, HealthConfig cfg, int have_scaler, int dynamic_scaler) {
    memset(h, 0, sizeof(*h));
    h->cfg = cfg;
    h->have_scaler = have_scaler;
    h->dynamic_scaler = dynamic_scaler;
    h->loss.v = (float*)mallocCheck((size_t)cfg.window * sizeof(float));
    h->norm.v = (float*)mallocCheck((size_t)cfg.window * sizeof(float));
    h->last_rollback = -1;
}

static void health_free(Health* h) { free(h->loss.v); free(h->norm.v); }

static void health_window_push(HealthWindow* w, int cap, float x) {
    w->v[w->next] = x;
    w->next = (w->next + 1) % cap;
    if (w->n < cap) w->n++;
}

// the windows and the streak into a checkpoint: out (2, window) gets the losses then the norms,
// oldest first; returns how many of each
static int health_export(const Health* h, float* out) {
    int W = h->cfg.window, n = h->loss.n;
    for (int i = 0; i < n; i++) {
        int k = (h->loss.next - n + i + W) % W;  // (norm.next == loss.next: both are pushed together)
        out[i] = h->loss.v[k];
        out[n + i] = h->norm.v[k];
    }
    return n;
}

// and back, on resuming: the newest min(n, window) values of each (vals: (2, n) as health_export wrote)
static void health_import(Health* h, const float* vals, int n, int bad_streak, int skipped) {
    h->loss.n = h->loss.next = h->norm.n = h->norm.next = 0;
    int W = h->cfg.window;
    for (int i = n > W ? n - W : 0; i < n; i++) {
        health_window_push(&h->loss, W, vals[i]);
        health_window_push(&h->norm, W, vals[n + i]);
    }
    h->bad_streak = bad_streak;
    h->skipped = skipped;
}

// the two spike rules for one value against its window; writes the reason and returns 1 when bad
static int health_spike(const Health* h, const HealthWindow* w, const char* what, float x, char* why, size_t cap) {
    int W = h->cfg.window;
    if (w->n < W) return 0;  // the window fills first: no rule on the first W healthy steps
    double mean = 0.0, var = 0.0, mx = -INFINITY;
    for (int i = 0; i < W; i++) { mean += w->v[i]; mx = fmax(mx, (double)w->v[i]); }
    mean /= W;
    for (int i = 0; i < W; i++) var += ((double)w->v[i] - mean) * ((double)w->v[i] - mean);
    double sd = sqrt(var / W);
    if (h->cfg.zscore > 0.0f && sd > 0.0) {
        double z = ((double)x - mean) / sd;  // one-sided: a drop is no spike
        if (z > h->cfg.zscore) { snprintf(why, cap, "%s z-score %.1f > %g", what, z, h->cfg.zscore); return 1; }
    }
    if (h->cfg.factor > 0.0f && (double)x > h->cfg.factor * mx) {
        snprintf(why, cap, "%s %.4g > %g x recent max %.4g", what, x, h->cfg.factor, mx);
        return 1;
    }
    return 0;
}

// The decision for the step with this (dp-averaged) loss and (fully reduced) gradient norm: NULL when
// healthy (its values enter the windows, the streak ends), else the reason (the streak grows). The same
// on every rank: the inputs are.
static const char* health_verdict(Health* h, float loss, float norm) {
    char* why = h->reason;
    size_t cap = sizeof(h->reason);
    int bad = 1, overflow = 0;
    if (!isfinite(loss)) snprintf(why, cap, "loss %s", isnan(loss) ? "nan" : "inf");
    else if (!isfinite(norm)) snprintf(why, cap, "%s", (overflow = h->have_scaler) ? "overflow" : (isnan(norm) ? "grad norm nan" : "grad norm inf"));
    else bad = health_spike(h, &h->loss, "loss", loss, why, cap) || health_spike(h, &h->norm, "grad norm", norm, why, cap);
    if (!bad) {
        health_window_push(&h->loss, h->cfg.window, loss);
        health_window_push(&h->norm, h->cfg.window, norm);
        h->bad_streak = 0;
        return NULL;
    }
    if (!(overflow && h->dynamic_scaler)) h->bad_streak++;
    h->skipped++;
    return why;
}

// 1 when the streak of bad steps calls for the rollback (run_rollback, llm/ckpt/ckpt_run.h)
static int health_needs_rollback(const Health* h) { return h->cfg.max_bad_steps > 0 && h->bad_streak >= h->cfg.max_bad_steps; }

// ----------------------------------------------------------------------------
// silent data corruption

static void health_unit_name(const ParamLayout* lay, int u, char* out, size_t cap) {
    if (u == UNIT_EMBED) snprintf(out, cap, "embedding (wte, wpe)");
    else if (u == unit_final(lay->cfg)) snprintf(out, cap, "final layernorm");
    else if (unit_kind(lay->cfg, u) == UNIT_KIND_EXPERTS) snprintf(out, cap, "layer %d's experts", unit_layer(lay->cfg, u));
    else snprintf(out, cap, "layer %d", unit_layer(lay->cfg, u));
}

// Compares each dp group's hashes of every unit; every rank calls it (ZeRO-3, or one dp rank: nothing
// to compare, returns 0). Each dp group compares its own, then the verdict goes to every rank (a MAX
// over the world: every rank rolls back together) and the groups' first messages to world rank 0.
// Returns 1 when some group found a mismatch, 0 if none; msg (cap >= 1): on rank 0 the first mismatch
// ("sdc: parameters differ: <unit>: ranks <world ranks whose copies differ> ..."), elsewhere this rank's
// group's, or "sdc: parameters differ in another dp group" when only another group found one.
#define SDC_MSG_BYTES 256
static int sdc_check(DataParallel* dp, char* msg, size_t cap) {
    msg[0] = '\0';
    if (dp->zero.shard_params || dp->size == 1) return 0;
    const ParamLayout* lay = &dp->lay;
    int U = lay->num_units, block = 4 * U + 1, N = dp->size;  // per rank: 4 16-bit pieces per unit, its world rank
    float* mine = (float*)mallocCheck((size_t)block * sizeof(float));
    float* all = (float*)mallocCheck((size_t)block * N * sizeof(float));
    device_synchronize();  // (the parameters' last update)
    for (int u = 0; u < U; u++) {
        uint64_t hsh = 0;
        if (lay->units[u].held) {
            size_t bytes = lay->units[u].n * sizeof(floatX);
            void* host = mallocCheck(bytes);
            copy_to_host(host, dp->params + lay->units[u].start, bytes);
            hsh = fnv1a(FNV_START, host, bytes);
            free(host);
        }
        for (int k = 0; k < 4; k++) mine[4 * u + k] = (float)((hsh >> (16 * k)) & 0xffff);  // exact in FP32
    }
    mine[4 * U] = (float)dp->comm->world_rank;
    float* d = (float*)device_malloc((size_t)block * (N + 1) * sizeof(float), MEM_COMM);
    copy_to_device(d, mine, (size_t)block * sizeof(float));
    comm_all_gather(dp->comm, GROUP_DP, d, d + block, (size_t)block, llm_ctx.stream);
    device_synchronize();
    copy_to_host(all, d + block, (size_t)block * N * sizeof(float));
    device_free(d);
    int bad_units = 0;
    // the replicas of a unit: every rank of the group, or, for an experts unit split by expert parallelism, the
    // ranks of the same ep coordinate (group rank r = dp_rank * cp + cp_rank, ep_rank = dp_rank % ep), which hold the
    // same experts; each class of replicas votes alone
    int cp = dp->comm->mesh.cp.size, ep = lay->ep_size;
    for (int u = 0; u < U; u++) {
        int classes = dp_unit_expert(dp, u) ? ep : 1;
        for (int k = 0; k < classes; k++) {
#define SDC_IN(r) (classes == 1 || ((r) / cp) % ep == k)
            // each rank's hash as 4 floats; the majority value (a rank whose hash most ranks share)
            int best = -1, best_votes = 0, n_k = 0;
            for (int r = 0; r < N; r++) {
                if (!SDC_IN(r)) continue;
                n_k++;
                int votes = 0;
                for (int q = 0; q < N; q++) votes += SDC_IN(q) && !memcmp(all + r * block + 4 * u, all + q * block + 4 * u, 4 * sizeof(float));
                if (votes > best_votes) { best = r; best_votes = votes; }
            }
            if (best_votes == n_k) continue;
            if (bad_units++ > 0) continue;
            char name[64], ranks[256] = "";
            health_unit_name(lay, u, name, sizeof(name));
            int named = 0;
            for (int r = 0; r < N; r++) {
                if (!SDC_IN(r)) continue;
                int differs = memcmp(all + r * block + 4 * u, all + best * block + 4 * u, 4 * sizeof(float)) != 0;
                if (differs || 2 * best_votes <= n_k) {  // no strict majority: every rank is named
                    size_t l = strlen(ranks);
                    snprintf(ranks + l, sizeof(ranks) - l, "%s%d", named++ ? ", " : "", (int)all[r * block + 4 * U]);
                }
            }
#undef SDC_IN
            snprintf(msg, cap, "sdc: parameters differ: %s: rank%s %s %s", name, named > 1 ? "s" : "", ranks,
                     2 * best_votes <= n_k ? "disagree (no majority among the replicas)" : "differ from the other replicas");
        }
    }
    free(mine);
    free(all);
    // every group's verdict to every rank, the messages to rank 0
    Comm* c = dp->comm;
    float flag = bad_units > 0 ? 1.0f : 0.0f;
    float* df = (float*)device_malloc(sizeof(float), MEM_COMM);
    copy_to_device(df, &flag, sizeof(float));
    comm_all_reduce(c, GROUP_WORLD, df, df, 1, COMM_MAX, llm_ctx.stream);
    device_synchronize();
    copy_to_host(&flag, df, sizeof(float));
    device_free(df);
    char mine_msg[SDC_MSG_BYTES];
    memset(mine_msg, 0, sizeof(mine_msg));
    snprintf(mine_msg, sizeof(mine_msg), "%s", msg);
    char* msgs = c->world_rank == 0 ? (char*)mallocCheck((size_t)c->world_size * SDC_MSG_BYTES) : NULL;
    comm_gather_bytes(c, mine_msg, SDC_MSG_BYTES, msgs);
    if (msgs != NULL) {
        for (int r = c->world_size - 1; r >= 0; r--) if (msgs[(size_t)r * SDC_MSG_BYTES] != '\0') snprintf(msg, cap, "%s", msgs + (size_t)r * SDC_MSG_BYTES);
        free(msgs);
    }
    if (flag > 0.0f && msg[0] == '\0') snprintf(msg, cap, "sdc: parameters differ in another dp group");
    return flag > 0.0f;
}

// --inject bitflip: flips bit `bit` of element `index` of this rank's parameters (the packed buffer,
// or the ZeRO-3 shard), the copy the model computes with. For a 16-bit floatX, bit b >= 16 is bit b - 16
// (bit 30, the top exponent bit of an FP32, is BF16's bit 14).
static void health_bitflip(DataParallel* dp, long index, int bit) {
    floatX* base = dp->zero.shard_params ? dp->params_shard : dp->params;
    size_t n = dp->zero.shard_params ? dp->z.shard_size : dp->lay.packed_size;
    if (index < 0 || (size_t)index >= n) fatal("--inject bitflip: index %ld beyond this rank's %zu parameters", index, n);
    int nbits = (int)(8 * sizeof(floatX));
    if (bit >= nbits) bit -= 16;
    unsigned char bytes[sizeof(floatX)];
    device_synchronize();  // (the update that wrote it)
    copy_to_host(bytes, base + index, sizeof(floatX));
    bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));  // little-endian
    copy_to_device(base + index, bytes, sizeof(floatX));
}
