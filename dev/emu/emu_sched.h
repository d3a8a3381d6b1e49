// emu_sched.h: runs a kernel launch on the CPU. Each block runs on one OS thread; each of its CUDA
// threads is a pooled fiber (emu_fiber.h). A fiber runs until it blocks in a barrier (__syncthreads,
// a warp collective) or returns, then switches directly to the next ready fiber. Which fiber runs
// next follows EMU_ORDER (forward, reverse, random), so a kernel whose result depends on the order
// between barriers (a missing __syncthreads) gives different results in different orders.
// Warp collectives (__shfl_*_sync, __ballot_sync, __syncwarp, ...) are barriers among the lanes of
// their mask, so they also work in divergent code such as `if (warp == 0)`.
// Misuse stops the program with "emu: error: ..." naming the kernel, the launch's file:line and the
// barrier's file:line: a __syncthreads that part of the block never reaches, a lane that returns
// while lanes of its mask wait for it, a mask without the calling lane, a deadlock, bad launch
// configurations, and pointer arguments outside device memory.
// Blocks spread over EMU_THREADS OS threads (default 1). In racecheck builds (-DEMU_RACECHECK), block
// starts, barriers and completed collectives also tell the race detector (emu_racecheck.h).
// Part of dev/emu/emu.h; not meant to be included on its own.
#pragma once

#include <signal.h>
#include <typeinfo>

// ----------------------------------------------------------------------------
// configuration from the environment (read once, at the first launch)

enum { EMU_ORDER_FORWARD = 0, EMU_ORDER_REVERSE = 1, EMU_ORDER_RANDOM = 2 };
static const char* const emu_order_names[3] = {"forward", "reverse", "random"};

struct EmuConfig {
    int order;               // EMU_ORDER
    unsigned long long seed;  // EMU_SEED (random order)
    int threads;             // EMU_THREADS: OS threads that run blocks
    size_t stack_bytes;      // EMU_STACK_KB: stack of each emulated thread
};
inline EmuConfig emu_cfg;
inline std::once_flag emu_cfg_once;
inline std::atomic<unsigned long long> emu_launch_counter{0};

static inline void emu_config_init(void) {
    EmuConfig c;
    c.order = EMU_ORDER_FORWARD;
    const char* s = getenv("EMU_ORDER");
    if (s != NULL && s[0] != '\0') {
        if (strcmp(s, "forward") == 0) c.order = EMU_ORDER_FORWARD;
        else if (strcmp(s, "reverse") == 0) c.order = EMU_ORDER_REVERSE;
        else if (strcmp(s, "random") == 0) c.order = EMU_ORDER_RANDOM;
        else {
            fprintf(stderr, "emu: error: EMU_ORDER=%s: expected forward, reverse or random (%s:%d)\n", s, __FILE__, __LINE__);
            exit(EXIT_FAILURE);
        }
    }
    s = getenv("EMU_SEED");
    if (s != NULL && s[0] != '\0') {
        char* end = NULL;
        c.seed = strtoull(s, &end, 10);
        if (end == s || *end != '\0') {
            fprintf(stderr, "emu: error: EMU_SEED=%s: expected a non-negative integer (%s:%d)\n", s, __FILE__, __LINE__);
            exit(EXIT_FAILURE);
        }
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        c.seed = ((unsigned long long)ts.tv_nsec ^ ((unsigned long long)ts.tv_sec << 20) ^ (unsigned long long)getpid()) % 1000000007ull;
    }
    c.threads = 1;
    s = getenv("EMU_THREADS");
    if (s != NULL && s[0] != '\0') {
        c.threads = atoi(s);
        if (c.threads < 1 || c.threads > 256) {
            fprintf(stderr, "emu: error: EMU_THREADS=%s: expected 1..256 (%s:%d)\n", s, __FILE__, __LINE__);
            exit(EXIT_FAILURE);
        }
    }
    int kb = (EMU_ASAN || EMU_TSAN || EMU_RACECHECK) ? 256 : 64;  // sanitizers make frames larger
    s = getenv("EMU_STACK_KB");
    if (s != NULL && s[0] != '\0') {
        kb = atoi(s);
        if (kb < 16 || kb > 65536) {
            fprintf(stderr, "emu: error: EMU_STACK_KB=%s: expected 16..65536 (%s:%d)\n", s, __FILE__, __LINE__);
            exit(EXIT_FAILURE);
        }
    }
    c.stack_bytes = (size_t)kb * 1024;
    emu_cfg = c;
}
static inline const EmuConfig& emu_config(void) {
    std::call_once(emu_cfg_once, emu_config_init);
    return emu_cfg;
}

// ----------------------------------------------------------------------------
// one launch, one emulated thread, one warp, one OS worker

struct EmuLaunch {
    const char* file;  // where LAUNCH was written
    int line;
    const void* kfn;   // the kernel
    void (*thunk)(const EmuLaunch*);  // calls the kernel with a copy of the arguments
    const void* args;  // std::tuple of the converted arguments
    dim3 grid, block;
    size_t smem;
    int nthreads;                       // per block
    unsigned long long nblocks;
    unsigned long long id;              // launch number (seeds the random order)
    unsigned long long order_stride, order_offset;  // block order
    std::atomic<unsigned long long> next;           // next block to take (EMU_THREADS > 1)
};

// what a thread is doing
enum : uint8_t { EMU_T_RUN = 0, EMU_T_SYNC = 1, EMU_T_WARP = 2, EMU_T_DONE = 3 };
// warp collectives; the class says which may meet in one barrier
enum : uint8_t {
    EMU_C_SYNCWARP, EMU_C_SHFL_IDX, EMU_C_SHFL_UP, EMU_C_SHFL_DOWN, EMU_C_SHFL_XOR,
    EMU_C_BALLOT, EMU_C_ANY, EMU_C_ALL,
    EMU_C_RED_ADD, EMU_C_RED_MIN_S, EMU_C_RED_MAX_S, EMU_C_RED_MIN_U, EMU_C_RED_MAX_U,
    EMU_C_RED_AND, EMU_C_RED_OR, EMU_C_RED_XOR,
    EMU_C_WMMA_FILL, EMU_C_WMMA_LOAD, EMU_C_WMMA_STORE, EMU_C_WMMA_MMA, EMU_C_MMA_SYNC, EMU_C_N
};
static const char* const emu_coll_names[EMU_C_N] = {
    "__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
    "__ballot_sync", "__any_sync", "__all_sync",
    "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync", "__reduce_min_sync", "__reduce_max_sync",
    "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync",
    "wmma::fill_fragment", "wmma::load_matrix_sync", "wmma::store_matrix_sync", "wmma::mma_sync",
    "mma.sync.m16n8k16"};
// the WMMA operations and PTX's mma.sync (mma.h) are classes of their own: a lane in mma_sync while another is in
// store_matrix_sync is a misuse, reported like a shuffle meeting a __syncwarp
static const uint8_t emu_coll_class[EMU_C_N] = {0, 1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 4, 5, 6, 7, 8};
// a collective whose result needs every lane's data at once (wmma::mma_sync): each lane brings a
// pointer to one of these as its value; when the last lane arrives, the first lane's run() gets all
// 32 (the emulated WMMA needs a full warp) and computes every lane's result before any lane resumes
struct EmuWarpHook {
    void (*run)(EmuWarpHook* const* lanes, const char* file, int line);
};

struct EmuThread {
    EmuCtx ctx;
    uint3 tid;
    int lin;             // linear index in the block
    uint8_t state;       // EMU_T_*
    uint8_t coll;        // EMU_C_* while in a warp collective
    int arg, width;      // shuffle lane/delta/xor mask and width
    uint32_t mask;
    uint64_t val, res;   // value brought to the collective, and its result
    const char* file;    // where it waits
    int line;
};

struct EmuGroup {       // lanes of one warp waiting in collectives with one mask
    uint32_t mask, arrived;
};
struct EmuWarp {
    uint32_t present;   // lanes that exist (a last, partial warp has fewer)
    uint32_t exited;
    int ngroups;
    EmuGroup groups[32];
#if EMU_TSAN
    uint8_t parity[32];
    char tsan_sync[32][2];
#endif
};

static const int EMU_MAX_THREADS = 1024;
struct EmuWorker {
    EmuCtx sched;               // the OS thread's own context: runs blocks, gets control back
    EmuThread* th;              // EMU_MAX_THREADS records; the first nfib have fibers
    int nfib;
    EmuThread* running;         // NULL on the scheduler
    const EmuLaunch* L;
    int n;                      // threads in the current block
    uint16_t rq[EMU_MAX_THREADS];  // ready queue (ring)
    int rq_head, rq_count;
    int order;
    uint64_t rng;
    int sync_waiting, exited, finished, sync_count, sync_result;
    const char* sync_file;
    int sync_line;
    void* dyn_smem;
    EmuWarp warps[EMU_MAX_THREADS / 32];
    void* altstack;
#if EMU_TSAN
    char tsan_block_start, tsan_block_end;
    char tsan_sync[2];
    int sync_parity;
#endif
};
inline thread_local EmuWorker* emu_w = NULL;

EMU_NOTSAN static inline void* emu_dynamic_smem(void) { return emu_w != NULL ? emu_w->dyn_smem : NULL; }

// ----------------------------------------------------------------------------
// errors

static inline const char* emu_kernel_name(const void* kfn, char* buf, size_t n) {
    if (!emu_symbol_name(kfn, buf, n)) snprintf(buf, n, "at %p (no symbol table)", kfn);
    return buf;
}

// prints "emu: error: <msg>" and where: kernel, launch file:line, block, thread, order; exits 1.
// Used inside fibers and helper threads, hence _exit after flushing.
[[noreturn]] __attribute__((cold, noinline)) EMU_NOTSAN static inline void emu_misuse(const char* fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "emu: error: %s\n", msg);
    EmuWorker* w = emu_w;
    if (w != NULL && w->L != NULL) {
        const EmuLaunch* L = w->L;
        char name[1024];
        fprintf(stderr, "emu:   in kernel %s\n", emu_kernel_name(L->kfn, name, sizeof(name)));
        fprintf(stderr, "emu:   launched at %s:%d with grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of dynamic shared memory\n",
                L->file, L->line, L->grid.x, L->grid.y, L->grid.z, L->block.x, L->block.y, L->block.z, L->smem);
        if (w->running != NULL)
            fprintf(stderr, "emu:   in block (%u,%u,%u), thread (%u,%u,%u) (warp %d, lane %d)\n", blockIdx.x, blockIdx.y,
                    blockIdx.z, w->running->tid.x, w->running->tid.y, w->running->tid.z, w->running->lin / 32,
                    w->running->lin % 32);
        else
            fprintf(stderr, "emu:   in block (%u,%u,%u)\n", blockIdx.x, blockIdx.y, blockIdx.z);
        if (emu_cfg.order == EMU_ORDER_RANDOM)
            fprintf(stderr, "emu:   thread order: EMU_ORDER=random EMU_SEED=%llu (set both to reproduce)\n", emu_cfg.seed);
        else
            fprintf(stderr, "emu:   thread order: EMU_ORDER=%s\n", emu_order_names[emu_cfg.order]);
    }
    fflush(stdout);
    fflush(stderr);
    _exit(EXIT_FAILURE);
}

// a bad launch, found on the host before any block runs
[[noreturn]] __attribute__((cold, noinline)) static inline void emu_launch_error(const EmuLaunch* L, const char* fmt, ...) {
    char msg[2048], name[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "emu: error: launch of kernel %s at %s:%d: %s\n", emu_kernel_name(L->kfn, name, sizeof(name)),
            L->file, L->line, msg);
    fflush(stdout);
    fflush(stderr);
    exit(EXIT_FAILURE);
}

// a device intrinsic called from host code
[[noreturn]] __attribute__((cold, noinline)) EMU_NOTSAN static inline void emu_not_in_kernel(const char* what, const char* file, int line) {
    fprintf(stderr, "emu: error: %s called outside a kernel (%s:%d)\n", what, file, line);
    fflush(stderr);
    exit(EXIT_FAILURE);
}

// "lanes 0-3,7" into buf
EMU_NOTSAN static inline const char* emu_lanes_str(uint32_t m, char* buf, size_t n) {
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < 32 && k + 12 < n;) {
        if (!(m >> i & 1)) { i++; continue; }
        int j = i;
        while (j + 1 < 32 && (m >> (j + 1) & 1)) j++;
        k += (size_t)snprintf(buf + k, n - k, k ? ",%d" : "%d", i);
        if (j > i) k += (size_t)snprintf(buf + k, n - k, "-%d", j);
        i = j + 1;
    }
    return buf;
}

// the shared-memory race detector's hooks (empty unless EMU_RACECHECK)
#include "emu_racecheck.h"

// ----------------------------------------------------------------------------
// the ready queue and switching

EMU_NOTSAN static inline uint64_t emu_rand(uint64_t* s) {  // splitmix64
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

EMU_NOTSAN static inline void emu_rq_push(EmuWorker* w, int i) {
    w->rq[(w->rq_head + w->rq_count) & (EMU_MAX_THREADS - 1)] = (uint16_t)i;
    w->rq_count++;
}

EMU_NOTSAN static inline EmuThread* emu_rq_pop(EmuWorker* w) {
    if (w->rq_count == 0) return NULL;
    if (w->order == EMU_ORDER_RANDOM && w->rq_count > 1) {
        int r = (int)(emu_rand(&w->rng) % (uint64_t)w->rq_count);
        int a = w->rq_head, b = (w->rq_head + r) & (EMU_MAX_THREADS - 1);
        uint16_t tmp = w->rq[a];
        w->rq[a] = w->rq[b];
        w->rq[b] = tmp;
    }
    int i = w->rq[w->rq_head];
    w->rq_head = (w->rq_head + 1) & (EMU_MAX_THREADS - 1);
    w->rq_count--;
    return &w->th[i];
}

// the lanes of warp wi in `lanes`, queued in the configured order
EMU_NOTSAN static inline void emu_rq_push_lanes(EmuWorker* w, int wi, uint32_t lanes) {
    if (w->order == EMU_ORDER_REVERSE) {
        while (lanes) {
            int l = 31 - __builtin_clz(lanes);
            lanes &= ~(1u << l);
            emu_rq_push(w, wi * 32 + l);
        }
    } else {
        while (lanes) {
            int l = __builtin_ctz(lanes);
            lanes &= lanes - 1;
            emu_rq_push(w, wi * 32 + l);
        }
    }
}

EMU_NOTSAN static inline void emu_rq_push_all(EmuWorker* w) {
    if (w->order == EMU_ORDER_REVERSE)
        for (int i = w->n - 1; i >= 0; i--) emu_rq_push(w, i);
    else
        for (int i = 0; i < w->n; i++) emu_rq_push(w, i);
}

// self has blocked or finished: run the next ready thread, or go back to the scheduler when none
// is ready (the block is done, or deadlocked). Returns when self is resumed.
EMU_NOTSAN static inline void emu_yield(EmuWorker* w, EmuThread* self) {
    EmuThread* next = emu_rq_pop(w);
    if (next == self) return;
    w->running = next;
    if (next != NULL) {
        threadIdx = next->tid;
        emu_ctx_switch(&self->ctx, &next->ctx);
    } else {
        emu_ctx_switch(&self->ctx, &w->sched);
    }
}

// ----------------------------------------------------------------------------
// __syncthreads

EMU_NOTSAN static inline int emu_syncthreads_op(const char* file, int line, int pred) {
    EmuWorker* w = emu_w;
    EmuThread* t = w != NULL ? w->running : NULL;
    if (t == NULL) emu_not_in_kernel("__syncthreads()", file, line);
    if (w->exited > 0) {
        const EmuThread* gone = NULL;
        for (int i = 0; i < w->n && gone == NULL; i++)
            if (w->th[i].state == EMU_T_DONE) gone = &w->th[i];
        emu_misuse("__syncthreads() at %s:%d is reached by only part of the block: thread (%u,%u,%u) and %d other(s) "
                   "of the block's %d threads have already returned",
                   file, line, gone->tid.x, gone->tid.y, gone->tid.z, w->exited - 1, w->n);
    }
    if (w->sync_waiting == 0) {
        w->sync_file = file;
        w->sync_line = line;
        w->sync_count = 0;
    }
    w->sync_count += pred != 0;
    t->state = EMU_T_SYNC;
    t->file = file;
    t->line = line;
    w->sync_waiting++;
#if EMU_TSAN
    int parity = w->sync_parity;
    __tsan_release(&w->tsan_sync[parity]);
#endif
    if (w->sync_waiting == w->n) {  // the last one: release everyone
        w->sync_waiting = 0;
        w->sync_result = w->sync_count;
        emu_rc_barrier(w);
#if EMU_TSAN
        w->sync_parity ^= 1;
#endif
        emu_rq_push_all(w);
    }
    emu_yield(w, t);
#if EMU_TSAN
    __tsan_acquire(&w->tsan_sync[parity]);
#endif
    t->state = EMU_T_RUN;
    return w->sync_result;
}

// ----------------------------------------------------------------------------
// warp collectives: a barrier among the lanes of the mask; the last lane to arrive computes
// every lane's result

EMU_NOTSAN static inline void emu_warp_release(EmuWorker* w, int wi, int gi) {
    EmuWarp* wp = &w->warps[wi];
    EmuThread* base = &w->th[wi * 32];
    uint32_t lanes = wp->groups[gi].arrived;
    int first = __builtin_ctz(lanes);
    // all lanes must be in the same kind of collective
    for (uint32_t m = lanes; m; m &= m - 1) {
        int l = __builtin_ctz(m);
        if (emu_coll_class[base[l].coll] != emu_coll_class[base[first].coll])
            emu_misuse("lanes of warp %d meet with mask 0x%08x in different warp collectives: lane %d in %s at %s:%d, "
                       "lane %d in %s at %s:%d",
                       wi, wp->groups[gi].mask, first, emu_coll_names[base[first].coll], base[first].file,
                       base[first].line, l, emu_coll_names[base[l].coll], base[l].file, base[l].line);
    }
    int cls = emu_coll_class[base[first].coll];
    emu_rc_warp_join(w, wi, lanes);
    if (cls == 1) {  // shuffles: each lane reads its source lane's value
        for (uint32_t m = lanes; m; m &= m - 1) {
            int l = __builtin_ctz(m);
            EmuThread* t = &base[l];
            int wd = t->width, seg = l & ~(wd - 1), src = l;
            switch (t->coll) {
                case EMU_C_SHFL_IDX: src = seg + (t->arg & (wd - 1)); break;
                case EMU_C_SHFL_UP: src = ((unsigned)t->arg <= (unsigned)(l - seg)) ? l - t->arg : l; break;
                case EMU_C_SHFL_DOWN: src = ((unsigned)(l - seg) + (unsigned)t->arg < (unsigned)wd) ? l + t->arg : l; break;
                case EMU_C_SHFL_XOR: {
                    int s = l ^ t->arg;
                    src = (s >= 0 && s < 32 && (s & ~(wd - 1)) <= seg) ? s : l;
                    break;
                }
            }
            // a source lane outside the mask gives an undefined value on a GPU: here the lane's own
            t->res = (lanes >> src & 1) ? base[src].val : t->val;
        }
    } else if (cls == 2) {  // votes
        uint32_t ballot = 0;
        for (uint32_t m = lanes; m; m &= m - 1) {
            int l = __builtin_ctz(m);
            if (base[l].val != 0) ballot |= 1u << l;
        }
        for (uint32_t m = lanes; m; m &= m - 1) {
            EmuThread* t = &base[__builtin_ctz(m)];
            t->res = t->coll == EMU_C_BALLOT ? ballot : t->coll == EMU_C_ANY ? (ballot != 0) : (ballot == lanes);
        }
    } else if (cls == 3) {  // integer reductions
        for (uint32_t m = lanes; m; m &= m - 1) {
            EmuThread* t = &base[__builtin_ctz(m)];
            uint32_t acc = (uint32_t)base[first].val;
            for (uint32_t k = lanes & (lanes - 1); k; k &= k - 1) {
                uint32_t v = (uint32_t)base[__builtin_ctz(k)].val;
                switch (t->coll) {
                    case EMU_C_RED_ADD: acc += v; break;
                    case EMU_C_RED_MIN_S: acc = (int32_t)v < (int32_t)acc ? v : acc; break;
                    case EMU_C_RED_MAX_S: acc = (int32_t)v > (int32_t)acc ? v : acc; break;
                    case EMU_C_RED_MIN_U: acc = v < acc ? v : acc; break;
                    case EMU_C_RED_MAX_U: acc = v > acc ? v : acc; break;
                    case EMU_C_RED_AND: acc &= v; break;
                    case EMU_C_RED_OR: acc |= v; break;
                    case EMU_C_RED_XOR: acc ^= v; break;
                }
            }
            t->res = acc;
        }
    } else if (cls >= 4) {  // WMMA (mma.h): a hook sees every lane's arguments
        EmuWarpHook* hooks[32] = {};
        for (uint32_t m = lanes; m; m &= m - 1) {
            int l = __builtin_ctz(m);
            hooks[l] = (EmuWarpHook*)(uintptr_t)base[l].val;
        }
        if (hooks[first] != NULL && hooks[first]->run != NULL) hooks[first]->run(hooks, base[first].file, base[first].line);
    }
#if EMU_TSAN
    wp->parity[first] ^= 1;
#endif
    wp->groups[gi] = wp->groups[--wp->ngroups];
    emu_rq_push_lanes(w, wi, lanes);
}

EMU_NOTSAN static inline uint64_t emu_warp_op(const char* file, int line, int coll, uint32_t mask, uint64_t val, int arg, int width) {
    EmuWorker* w = emu_w;
    EmuThread* t = w != NULL ? w->running : NULL;
    if (t == NULL) emu_not_in_kernel(emu_coll_names[coll], file, line);
    int lane = t->lin & 31, wi = t->lin >> 5;
    EmuWarp* wp = &w->warps[wi];
    uint32_t bit = 1u << lane;
    if (!(mask & bit))
        emu_misuse("%s at %s:%d: the mask 0x%08x does not include the calling lane %d", emu_coll_names[coll], file, line,
                   mask, lane);
    if (width < 1 || width > 32 || (width & (width - 1)) != 0)
        emu_misuse("%s at %s:%d: width %d is not a power of 2 in 1..32", emu_coll_names[coll], file, line, width);
    uint32_t eff = mask & wp->present;  // lanes beyond the block's last thread do not exist
    if (wp->exited & eff) {
        int gone = __builtin_ctz(wp->exited & eff);
        emu_misuse("%s at %s:%d with mask 0x%08x waits for lane %d, which has already returned", emu_coll_names[coll],
                   file, line, mask, gone);
    }
    t->coll = (uint8_t)coll;
    t->mask = mask;
    t->val = val;
    t->arg = arg;
    t->width = width;
    t->file = file;
    t->line = line;
    t->state = EMU_T_WARP;
    int gi = 0;
    while (gi < wp->ngroups && wp->groups[gi].mask != mask) gi++;
    if (gi == wp->ngroups) {
        wp->groups[gi].mask = mask;
        wp->groups[gi].arrived = 0;
        wp->ngroups++;
    }
    wp->groups[gi].arrived |= bit;
#if EMU_TSAN
    int leader = __builtin_ctz(eff), parity = wp->parity[leader];
    __tsan_release(&wp->tsan_sync[leader][parity]);
#endif
    if (wp->groups[gi].arrived == eff) emu_warp_release(w, wi, gi);
    emu_yield(w, t);
#if EMU_TSAN
    __tsan_acquire(&wp->tsan_sync[leader][parity]);
#endif
    t->state = EMU_T_RUN;
    return t->res;
}

EMU_NOTSAN static inline unsigned emu_activemask(void) {
    EmuWorker* w = emu_w;
    if (w == NULL || w->running == NULL) emu_not_in_kernel("__activemask()", __FILE__, __LINE__);
    const EmuWarp* wp = &w->warps[w->running->lin >> 5];
    return wp->present & ~wp->exited;
}

// ----------------------------------------------------------------------------
// a thread returns

EMU_NOTSAN static inline void emu_thread_exit(EmuWorker* w, EmuThread* t) {
    t->state = EMU_T_DONE;
    w->exited++;
    w->finished++;
    int lane = t->lin & 31, wi = t->lin >> 5;
    EmuWarp* wp = &w->warps[wi];
    wp->exited |= 1u << lane;
    if (w->sync_waiting > 0)
        emu_misuse("__syncthreads() at %s:%d is reached by only part of the block: %d thread(s) wait there, and thread "
                   "(%u,%u,%u) returned without reaching it",
                   w->sync_file, w->sync_line, w->sync_waiting, t->tid.x, t->tid.y, t->tid.z);
    for (int g = 0; g < wp->ngroups; g++) {
        if (!(wp->groups[g].mask & (1u << lane))) continue;
        const EmuThread* waiter = &w->th[wi * 32 + __builtin_ctz(wp->groups[g].arrived)];
        char lanes[160];
        emu_misuse("lane %d of warp %d returned while lanes %s of its warp wait for it in %s at %s:%d (mask 0x%08x)", lane,
                   wi, emu_lanes_str(wp->groups[g].arrived, lanes, sizeof(lanes)), emu_coll_names[waiter->coll],
                   waiter->file, waiter->line, wp->groups[g].mask);
    }
}

// nothing can run but the block is not finished
[[noreturn]] __attribute__((cold, noinline)) EMU_NOTSAN static inline void emu_report_deadlock(EmuWorker* w) {
    char buf[3072], lanes[160];
    size_t k = 0;
    k += (size_t)snprintf(buf + k, sizeof(buf) - k, "deadlock: no thread of the block can continue (%d of %d returned)",
                          w->finished, w->n);
    if (w->sync_waiting > 0 && k < sizeof(buf))
        k += (size_t)snprintf(buf + k, sizeof(buf) - k, "\nemu:   %d thread(s) wait in __syncthreads() at %s:%d",
                              w->sync_waiting, w->sync_file, w->sync_line);
    int nw = (w->n + 31) / 32;
    for (int wi = 0; wi < nw; wi++) {
        const EmuWarp* wp = &w->warps[wi];
        for (int g = 0; g < wp->ngroups && k < sizeof(buf); g++) {
            const EmuThread* a = &w->th[wi * 32 + __builtin_ctz(wp->groups[g].arrived)];
            k += (size_t)snprintf(buf + k, sizeof(buf) - k, "\nemu:   warp %d: lanes %s wait in %s at %s:%d with mask 0x%08x",
                                  wi, emu_lanes_str(wp->groups[g].arrived, lanes, sizeof(lanes)),
                                  emu_coll_names[a->coll], a->file, a->line, wp->groups[g].mask);
            // what the lanes it waits for are doing, lanes doing the same thing together
            uint32_t missing = wp->groups[g].mask & wp->present & ~wp->groups[g].arrived;
            while (missing && k < sizeof(buf)) {
                const EmuThread* o = &w->th[wi * 32 + __builtin_ctz(missing)];
                uint32_t same = 0;
                for (uint32_t m = missing; m; m &= m - 1) {
                    const EmuThread* q = &w->th[wi * 32 + __builtin_ctz(m)];
                    if (q->state == o->state && q->file == o->file && q->line == o->line &&
                        (o->state != EMU_T_WARP || (q->coll == o->coll && q->mask == o->mask)))
                        same |= m & -m;
                }
                missing &= ~same;
                emu_lanes_str(same, lanes, sizeof(lanes));
                if (o->state == EMU_T_SYNC)
                    k += (size_t)snprintf(buf + k, sizeof(buf) - k, "; lanes %s wait in __syncthreads() at %s:%d", lanes,
                                          o->file, o->line);
                else if (o->state == EMU_T_WARP)
                    k += (size_t)snprintf(buf + k, sizeof(buf) - k, "; lanes %s wait in %s at %s:%d with mask 0x%08x",
                                          lanes, emu_coll_names[o->coll], o->file, o->line, o->mask);
                else
                    k += (size_t)snprintf(buf + k, sizeof(buf) - k, "; lanes %s are running", lanes);
            }
        }
    }
    emu_misuse("%s", buf);
}

// ----------------------------------------------------------------------------
// fibers and blocks

static inline void emu_fiber_main(void);

#if !EMU_ASAN && !EMU_TSAN
// stack overflow of an emulated thread hits the guard region: say so instead of a bare SIGSEGV
inline struct sigaction emu_old_segv;
static inline void emu_segv_handler(int sig, siginfo_t* si, void* uc) {
    EmuWorker* w = emu_w;
    if (w != NULL && w->running != NULL && w->L != NULL) {
        uintptr_t a = (uintptr_t)si->si_addr;
        for (int i = 0; i < w->nfib; i++) {
            uintptr_t lo = (uintptr_t)w->th[i].ctx.stack_lo;
            if (a + EMU_GUARD_BYTES >= lo && a < lo) {
                char msg[512];
                int n = snprintf(msg, sizeof(msg),
                                 "emu: error: stack overflow of an emulated CUDA thread (%zu KiB stack; set EMU_STACK_KB, "
                                 "or make local arrays smaller)\nemu:   in the kernel launched at %s:%d, block (%u,%u,%u), "
                                 "thread (%u,%u,%u)\n",
                                 emu_cfg.stack_bytes / 1024, w->L->file, w->L->line, blockIdx.x, blockIdx.y, blockIdx.z,
                                 w->running->tid.x, w->running->tid.y, w->running->tid.z);
                if (n > 0 && write(2, msg, (size_t)n) < 0) _exit(EXIT_FAILURE);
                _exit(EXIT_FAILURE);
            }
        }
    }
    // not ours: put the previous handler back and let the fault happen again
    sigaction(SIGSEGV, &emu_old_segv, NULL);
    (void)sig;
    (void)uc;
}
#endif

#if EMU_ASAN
// after an AddressSanitizer report: which emulated thread it was
static inline void emu_asan_report(const char* report) {
    (void)report;
    EmuWorker* w = emu_w;
    if (w == NULL || w->L == NULL || w->running == NULL) return;
    fprintf(stderr, "emu: the report above is from CUDA thread (%u,%u,%u) of block (%u,%u,%u) of the kernel launched at %s:%d\n",
            w->running->tid.x, w->running->tid.y, w->running->tid.z, blockIdx.x, blockIdx.y, blockIdx.z, w->L->file,
            w->L->line);
}
#endif

EMU_NOTSAN static inline EmuWorker* emu_worker_get(void) {
    if (emu_w != NULL) return emu_w;
    EmuWorker* w = new EmuWorker();
    memset((void*)w, 0, sizeof(*w));
    w->th = new EmuThread[EMU_MAX_THREADS]();
    emu_ctx_init_self(&w->sched);
    emu_rc_worker_init(w);
#if EMU_ASAN
    __asan_set_error_report_callback(emu_asan_report);
#endif
#if !EMU_ASAN && !EMU_TSAN
    // an alternate signal stack, so the guard-page fault can be reported
    size_t alt = 64 * 1024;
    w->altstack = malloc(alt);
    stack_t ss;
    memset(&ss, 0, sizeof(ss));
    ss.ss_sp = w->altstack;
    ss.ss_size = alt;
    sigaltstack(&ss, NULL);
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = emu_segv_handler;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &emu_old_segv);
    });
#endif
    emu_w = w;
    return w;
}

EMU_NOTSAN static inline void emu_worker_reserve(EmuWorker* w, int n) {
    while (w->nfib < n) {
        if (!emu_ctx_make(&w->th[w->nfib].ctx, emu_cfg.stack_bytes, emu_fiber_main, (w->nfib * 37) & 63)) {
            fprintf(stderr, "emu: error: cannot map a %zu KiB stack for emulated thread %d: %s (%s:%d)\n",
                    emu_cfg.stack_bytes / 1024, w->nfib, strerror(errno), __FILE__, __LINE__);
            fflush(stderr);
            _exit(EXIT_FAILURE);
        }
#if EMU_TSAN
        char name[64];
        snprintf(name, sizeof(name), "emulated CUDA thread %d of a block", w->nfib);
        __tsan_set_fiber_name(w->th[w->nfib].ctx.tsan_fiber, name);
#endif
        w->nfib++;
    }
}

// every fiber runs this forever: one CUDA thread per turn
EMU_NOTSAN static inline void emu_fiber_main(void) {
    emu_ctx_entered();
    EmuWorker* w = emu_w;
    for (;;) {
        EmuThread* t = w->running;
#if EMU_TSAN
        __tsan_acquire(&w->tsan_block_start);
#endif
        w->L->thunk(w->L);
#if EMU_TSAN
        __tsan_release(&w->tsan_block_end);
#endif
        emu_thread_exit(w, t);
        emu_yield(w, t);  // resumes with the next block's thread
    }
}

EMU_NOTSAN static inline void emu_run_block(EmuWorker* w, const EmuLaunch* L, unsigned long long b) {
    unsigned gx = L->grid.x, gy = L->grid.y;
    blockIdx.x = (unsigned)(b % gx);
    blockIdx.y = (unsigned)((b / gx) % gy);
    blockIdx.z = (unsigned)(b / ((unsigned long long)gx * gy));
    blockDim = L->block;
    gridDim = L->grid;
    int n = L->nthreads;
    w->n = n;
    emu_worker_reserve(w, n);
    unsigned bx = L->block.x, bxy = L->block.x * L->block.y;
    for (int i = 0; i < n; i++) {
        EmuThread* t = &w->th[i];
        t->tid.x = (unsigned)i % bx;
        t->tid.y = ((unsigned)i % bxy) / bx;
        t->tid.z = (unsigned)i / bxy;
        t->lin = i;
        t->state = EMU_T_RUN;
    }
    int nw = (n + 31) / 32;
    for (int wi = 0; wi < nw; wi++) {
        EmuWarp* wp = &w->warps[wi];
        int lanes = n - wi * 32 < 32 ? n - wi * 32 : 32;
        wp->present = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
        wp->exited = 0;
        wp->ngroups = 0;
    }
    w->sync_waiting = w->exited = w->finished = w->sync_count = w->sync_result = 0;
    w->order = emu_cfg.order;
    w->rng = emu_cfg.seed ^ (L->id * 0x9E3779B97F4A7C15ull) ^ (b * 0xD1B54A32D192ED03ull);
    emu_rand(&w->rng);
    // dynamic shared memory: this block's own buffer of exactly the requested size, all 0xFF
    w->dyn_smem = malloc(L->smem);
    if (L->smem > 0) memset(w->dyn_smem, 0xFF, L->smem);
    w->rq_head = w->rq_count = 0;
    emu_rq_push_all(w);
#if EMU_TSAN
    __tsan_release(&w->tsan_block_start);
#endif
    EmuThread* first = emu_rq_pop(w);
    w->running = first;
    threadIdx = first->tid;
    emu_rc_block_begin(w, L);
    emu_ctx_switch(&w->sched, &first->ctx);  // back here when nothing is ready
    emu_rc_block_end(w);
    w->running = NULL;
    if (w->finished != n) emu_report_deadlock(w);
#if EMU_TSAN
    __tsan_acquire(&w->tsan_block_end);
#endif
    free(w->dyn_smem);
    w->dyn_smem = NULL;
}

// the k-th block to run, in EMU_ORDER
static inline unsigned long long emu_block_at(const EmuLaunch* L, unsigned long long k) {
    if (emu_cfg.order == EMU_ORDER_FORWARD) return k;
    if (emu_cfg.order == EMU_ORDER_REVERSE) return L->nblocks - 1 - k;
    __extension__ typedef unsigned __int128 u128;
    return (unsigned long long)(((u128)k * L->order_stride + L->order_offset) % L->nblocks);
}

EMU_NOTSAN static inline void emu_run_blocks(EmuWorker* w, const EmuLaunch* L, std::atomic<unsigned long long>* next) {
    w->L = L;
    for (;;) {
        unsigned long long k = next->fetch_add(1, std::memory_order_relaxed);
        if (k >= L->nblocks) break;
        emu_run_block(w, L, emu_block_at(L, k));
    }
    w->L = NULL;
}

// helper OS threads for EMU_THREADS > 1: they wait for a launch, take blocks, and report done
struct EmuPool {
    std::mutex m;
    std::condition_variable cv_start, cv_done;
    int nhelpers;
    unsigned long long gen;
    EmuLaunch* L;
    int busy;
};
inline EmuPool* emu_pool = NULL;  // never destroyed; its threads live until exit
inline std::mutex emu_launch_mutex;

static inline void emu_pool_helper(EmuPool* p) {
    unsigned long long seen = 0;
    for (;;) {
        EmuLaunch* L;
        {
            std::unique_lock<std::mutex> lock(p->m);
            p->cv_start.wait(lock, [&] { return p->gen != seen; });
            seen = p->gen;
            L = p->L;
        }
        emu_run_blocks(emu_worker_get(), L, &L->next);
        std::lock_guard<std::mutex> lock(p->m);
        if (--p->busy == 0) p->cv_done.notify_all();
    }
}

EMU_NOTSAN static inline void emu_run_launch(EmuLaunch* L) {
    const EmuConfig& c = emu_config();
    L->nblocks = (unsigned long long)L->grid.x * L->grid.y * L->grid.z;
    L->id = emu_launch_counter.fetch_add(1);
    L->next.store(0);
    L->order_stride = 1;
    L->order_offset = 0;
    if (c.order == EMU_ORDER_RANDOM && L->nblocks > 1) {  // a random stride coprime with nblocks
        uint64_t s = c.seed ^ (L->id * 0x2545F4914F6CDD1Dull);
        L->order_offset = emu_rand(&s) % L->nblocks;
        unsigned long long st = emu_rand(&s) % L->nblocks;
        for (;; st = (st + 1) % L->nblocks) {
            unsigned long long a = st, b = L->nblocks;
            while (b) { unsigned long long r = a % b; a = b; b = r; }
            if (a == 1) break;
        }
        L->order_stride = st;
    }
    EmuWorker* w = emu_worker_get();
    if (w->running != NULL || w->L != NULL)
        emu_launch_error(L, "a kernel launch from inside a kernel (dynamic parallelism) is not emulated");
    if (c.threads <= 1 || L->nblocks == 1) {
        emu_run_blocks(w, L, &L->next);
        return;
    }
    std::lock_guard<std::mutex> launch_lock(emu_launch_mutex);
    if (emu_pool == NULL) {
        emu_pool = new EmuPool();
        emu_pool->nhelpers = c.threads - 1;
        emu_pool->gen = 0;
        for (int i = 0; i < emu_pool->nhelpers; i++) std::thread(emu_pool_helper, emu_pool).detach();
    }
    EmuPool* p = emu_pool;
    {
        std::lock_guard<std::mutex> lock(p->m);
        p->L = L;
        p->busy = p->nhelpers;
        p->gen++;
    }
    p->cv_start.notify_all();
    emu_run_blocks(w, L, &L->next);
    std::unique_lock<std::mutex> lock(p->m);
    p->cv_done.wait(lock, [&] { return p->busy == 0; });
}

// ----------------------------------------------------------------------------
// launch_kernel: what LAUNCH(kernel, grid, block, smem, stream, args...) calls (llm/core/common.h)

template <typename... KArgs, size_t... I>
static inline void emu_call(void (*fn)(KArgs...), const std::tuple<KArgs...>& args, std::index_sequence<I...>) {
    fn(std::get<I>(args)...);  // copies: each emulated thread gets its own by-value parameters
    (void)args;
}
template <typename... KArgs>
static inline void emu_thunk(const EmuLaunch* L) {
    void (*fn)(KArgs...) = reinterpret_cast<void (*)(KArgs...)>(reinterpret_cast<uintptr_t>(L->kfn));
    emu_call(fn, *static_cast<const std::tuple<KArgs...>*>(L->args), std::index_sequence_for<KArgs...>{});
}

template <typename T>
static inline void emu_check_arg(const EmuLaunch* L, int index, int count, const T& v) {
    if constexpr (std::is_pointer<T>::value && !std::is_function<typename std::remove_pointer<T>::type>::value) {
        const void* p = (const void*)v;
        if (p != NULL && !emu_is_device_ptr(p)) {
            int status = 0;
            char* tn = abi::__cxa_demangle(typeid(T).name(), NULL, NULL, &status);
            char type[256];
            snprintf(type, sizeof(type), "%s", status == 0 && tn ? tn : typeid(T).name());
            free(tn);
            emu_launch_error(L, "pointer argument %d (counting from 0, of %d; type %s) = %p is %s", index, count, type, p,
                             emu_ptr_kind(p));
        }
    } else {
        (void)L; (void)index; (void)count; (void)v;
    }
}
template <typename Tuple, size_t... I>
static inline void emu_check_args(const EmuLaunch* L, const Tuple& t, std::index_sequence<I...>) {
    (emu_check_arg(L, (int)I, (int)sizeof...(I), std::get<I>(t)), ...);
    (void)L; (void)t;
}

static inline void emu_check_config(const EmuLaunch* L, cudaStream_t stream) {
    dim3 g = L->grid, b = L->block;
    if (g.x == 0 || g.y == 0 || g.z == 0) emu_launch_error(L, "grid (%u,%u,%u) has a zero dimension", g.x, g.y, g.z);
    if (b.x == 0 || b.y == 0 || b.z == 0) emu_launch_error(L, "block (%u,%u,%u) has a zero dimension", b.x, b.y, b.z);
    unsigned long long nt = (unsigned long long)b.x * b.y * b.z;
    if (nt > 1024) emu_launch_error(L, "block (%u,%u,%u) has %llu threads; a block has at most 1024", b.x, b.y, b.z, nt);
    if (b.x > 1024 || b.y > 1024 || b.z > 64)
        emu_launch_error(L, "block (%u,%u,%u) exceeds the per-dimension limits (1024,1024,64)", b.x, b.y, b.z);
    if (g.x > 2147483647u || g.y > 65535 || g.z > 65535)
        emu_launch_error(L, "grid (%u,%u,%u) exceeds the limits (2147483647,65535,65535)", g.x, g.y, g.z);
    if (L->smem > EMU_SMEM_OPTIN)
        emu_launch_error(L, "%zu bytes of dynamic shared memory requested; a block can have at most %zu (227 KiB)",
                         L->smem, EMU_SMEM_OPTIN);
    if (L->smem > EMU_SMEM_DEFAULT) {
        size_t optin = emu_func_smem_optin(L->kfn);
        if (optin < L->smem)
            emu_launch_error(L, "%zu bytes of dynamic shared memory requested, more than the default %zu, but the kernel's "
                             "cudaFuncAttributeMaxDynamicSharedMemorySize is %zu: call cudaFuncSetAttribute(kernel, "
                             "cudaFuncAttributeMaxDynamicSharedMemorySize, %zu) first",
                             L->smem, EMU_SMEM_DEFAULT, optin, L->smem);
    }
    if (!emu_stream_ok(stream)) emu_launch_error(L, "invalid or destroyed stream %p", (void*)stream);
}

template <typename... KArgs, typename... Args>
static inline void launch_kernel(const char* file, int line, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                 cudaStream_t stream, Args... args) {
    static_assert(sizeof...(KArgs) == sizeof...(Args), "LAUNCH: the number of arguments differs from the kernel's parameters");
    std::tuple<KArgs...> targs{static_cast<KArgs>(args)...};
    EmuLaunch L;
    L.file = file;
    L.line = line;
    L.kfn = reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(kernel));
    L.thunk = &emu_thunk<KArgs...>;
    L.args = &targs;
    L.grid = grid;
    L.block = block;
    L.smem = smem;
    L.nthreads = (int)((unsigned long long)block.x * block.y * block.z);
    emu_check_config(&L, stream);
    emu_check_args(&L, targs, std::index_sequence_for<KArgs...>{});
    emu_run_launch(&L);
}

// ----------------------------------------------------------------------------
// the device-side spellings

#define __syncthreads() emu_syncthreads_op(__FILE__, __LINE__, 0)
#define __syncthreads_count(pred) emu_syncthreads_op(__FILE__, __LINE__, (pred))
#define __syncthreads_and(pred) (emu_syncthreads_op(__FILE__, __LINE__, (pred)) == (int)(blockDim.x * blockDim.y * blockDim.z))
#define __syncthreads_or(pred) (emu_syncthreads_op(__FILE__, __LINE__, (pred)) > 0)

// __syncwarp() and __syncwarp(mask): an object, so that both spellings keep the caller's file:line
struct EmuSyncwarpAt {
    const char* file;
    int line;
    void operator()(unsigned mask = 0xffffffffu) const { emu_warp_op(file, line, EMU_C_SYNCWARP, mask, 0, 0, 32); }
};
#define __syncwarp EmuSyncwarpAt{__FILE__, __LINE__}

template <typename T>
static inline T emu_shfl(const char* file, int line, int coll, unsigned mask, T var, int arg, int width = 32) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "warp shuffles move values of at most 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &var, sizeof(T));
    uint64_t r = emu_warp_op(file, line, coll, mask, bits, arg, width);
    T out;
    memcpy((void*)&out, &r, sizeof(T));
    return out;
}
#define __shfl_sync(...) emu_shfl(__FILE__, __LINE__, EMU_C_SHFL_IDX, __VA_ARGS__)
#define __shfl_up_sync(...) emu_shfl(__FILE__, __LINE__, EMU_C_SHFL_UP, __VA_ARGS__)
#define __shfl_down_sync(...) emu_shfl(__FILE__, __LINE__, EMU_C_SHFL_DOWN, __VA_ARGS__)
#define __shfl_xor_sync(...) emu_shfl(__FILE__, __LINE__, EMU_C_SHFL_XOR, __VA_ARGS__)

#define __ballot_sync(mask, pred) ((unsigned)emu_warp_op(__FILE__, __LINE__, EMU_C_BALLOT, (mask), (pred) ? 1 : 0, 0, 32))
#define __any_sync(mask, pred) ((int)emu_warp_op(__FILE__, __LINE__, EMU_C_ANY, (mask), (pred) ? 1 : 0, 0, 32))
#define __all_sync(mask, pred) ((int)emu_warp_op(__FILE__, __LINE__, EMU_C_ALL, (mask), (pred) ? 1 : 0, 0, 32))
#define __activemask() emu_activemask()

template <typename T>
static inline T emu_reduce(const char* file, int line, int op, unsigned mask, T v) {
    static_assert(std::is_integral<T>::value && sizeof(T) == 4, "__reduce_*_sync takes int or unsigned");
    int coll = op;
    if (!std::is_signed<T>::value && op == EMU_C_RED_MIN_S) coll = EMU_C_RED_MIN_U;
    if (!std::is_signed<T>::value && op == EMU_C_RED_MAX_S) coll = EMU_C_RED_MAX_U;
    return (T)(uint32_t)emu_warp_op(file, line, coll, mask, (uint32_t)v, 0, 32);
}
#define __reduce_add_sync(mask, v) emu_reduce(__FILE__, __LINE__, EMU_C_RED_ADD, (mask), (v))
#define __reduce_min_sync(mask, v) emu_reduce(__FILE__, __LINE__, EMU_C_RED_MIN_S, (mask), (v))
#define __reduce_max_sync(mask, v) emu_reduce(__FILE__, __LINE__, EMU_C_RED_MAX_S, (mask), (v))
#define __reduce_and_sync(mask, v) emu_reduce(__FILE__, __LINE__, EMU_C_RED_AND, (mask), (unsigned)(v))
#define __reduce_or_sync(mask, v) emu_reduce(__FILE__, __LINE__, EMU_C_RED_OR, (mask), (unsigned)(v))
#define __reduce_xor_sync(mask, v) emu_reduce(__FILE__, __LINE__, EMU_C_RED_XOR, (mask), (unsigned)(v))
