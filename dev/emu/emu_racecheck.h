// emu_racecheck.h: racecheck, a shared-memory race detector for emulated kernels (the idea of
// compute-sanitizer's racecheck). On in programs compiled with -DEMU_RACECHECK -fsanitize=thread and
// linked WITHOUT -fsanitize=thread (see emu.mk): g++ then turns every load and store into a call
// (__tsan_read4(addr), __tsan_write8(addr), __tsan_atomic32_fetch_add(addr, ...), ...), and this file
// defines those calls itself; ThreadSanitizer's runtime is not linked. The emulator's own functions
// are EMU_NOTSAN (not instrumented).
//
// An access is checked when an emulated thread makes it while a kernel runs and its address lies in
// the running block's shared memory: the OS thread's static thread-local block, restricted to the
// __shared__ variables (function-local thread-locals, named by the ELF .symtab), or the block's
// dynamic shared memory. Each byte of shared memory has a shadow cell recording, for the current
// barrier interval (between two __syncthreads of the block), the last plain write, the plain reads
// since it and the atomic updates since it, each with its thread, that thread's clock and the code
// address. Ordering inside an interval is a happens-before relation kept with a vector clock per
// thread over the lanes of its warp: a warp collective (__syncwarp, shuffles, votes, reductions)
// joins the clocks of the lanes of its mask. Two accesses to a byte by different threads conflict
// when at least one is a plain write, or one is atomic and the other plain, and neither happens
// before the other: threads of different warps are never ordered inside an interval; lanes of one
// warp are ordered only through a collective that both take part in. The first conflict is reported
// with emu_misuse (kernel, both threads, the shared variable and byte offset, the two kinds of access
// and their source lines from addr2line), and the program exits with status 1.
// Part of dev/emu/emu.h (included by emu_sched.h); not meant to be included on its own.
#pragma once

#if EMU_RACECHECK
#include <limits.h>
#include <link.h>

enum { EMU_RC_READ = 0, EMU_RC_WRITE = 1, EMU_RC_ATOMIC = 2 };

// a set of accesses to one byte (plain reads, or atomics) since its last plain write
struct EmuRcSet {
    uint16_t t1;     // thread (linear index + 1) of one access; 0: the set is empty
    uint16_t t2;     // thread + 1 of an access from another warp than t1's; 0: none
    uint32_t c1;     // t1's clock at that access
    uint32_t pc1, pc2;  // code addresses (see emu_rc_pc) of the accesses of t1 and t2
    uint32_t lanes;  // index + 1 in the interval's pool of per-lane clocks, when several lanes of
                     // t1's warp accessed the byte without ordering; 0: only t1's access counts
};
// the shadow of one byte of shared memory
struct EmuRcCell {
    uint32_t stamp;  // the barrier interval this record belongs to (older: empty)
    uint16_t wt;     // thread + 1 of the last plain write; 0: none in this interval
    uint16_t unused;
    uint32_t wc, wpc;  // its clock and code address
    EmuRcSet r, a;     // plain reads and atomics since that write
};
// per-lane clocks and code addresses of one warp's accesses to one byte
struct EmuRcLanes {
    uint32_t clk[32];
    uint32_t pc[32];
};

// one per OS thread that runs blocks (per EmuWorker)
struct EmuRc {
    int on;                  // an emulated thread of a block runs on this OS thread
    EmuWorker* w;
    uintptr_t tls_lo;        // this OS thread's static thread-local block (static __shared__)
    size_t tls_size;
    uintptr_t dyn_lo;        // the running block's dynamic shared memory
    size_t dyn_size;
    EmuRcCell* tls_cells;    // tls_size cells
    EmuRcCell* dyn_cells;    // dyn_cap cells
    size_t dyn_cap;
    uint32_t interval;       // the current barrier interval (stamps of live cells)
    uint32_t tick;           // the last clock value given out
    uint32_t* vc;            // EMU_MAX_THREADS x 32: thread i's clocks of the lanes of its warp
    EmuRcLanes* pool;        // per-lane records of this interval
    uint32_t pool_used, pool_cap;
    uint64_t accesses;       // shared-memory accesses checked in the running block
};
inline thread_local EmuRc* emu_rc = NULL;

// the program's static thread-local image and which of its bytes are __shared__ variables; the same
// for every OS thread
struct EmuRcSym {
    size_t off, size;
    char* name;  // mangled
};
struct EmuRcProgram {
    size_t tls_size;     // the PT_TLS memory size of the module that holds threadIdx
    uint8_t* is_shared;  // tls_size bytes: 1 where a __shared__ variable lies
    EmuRcSym* syms;      // the function-local thread-local symbols (the __shared__ variables)
    size_t nsyms;
    uintptr_t pc_base;   // subtracted from code addresses (the load base of a position-independent program)
    char path[4096];     // the module's file, for addr2line
};
inline EmuRcProgram emu_rc_prog;
inline pthread_once_t emu_rc_prog_once = PTHREAD_ONCE_INIT;
// totals over all OS threads, printed at exit: evidence that the checks ran
inline std::atomic<unsigned long long> emu_rc_total_accesses{0}, emu_rc_total_blocks{0};

[[noreturn]] __attribute__((cold, noinline)) EMU_NOTSAN static inline void emu_rc_fatal(const char* what, const char* file,
                                                                                       int line) {
    fprintf(stderr, "emu: error: racecheck: %s (%s:%d)\n", what, file, line);
    fflush(stderr);
    _exit(EXIT_FAILURE);
}

// the calling thread's instance of the thread-local block that holds threadIdx
struct EmuRcTlsQuery {
    uintptr_t target, lo;
    size_t size;
    char name[4096];
};
EMU_NOTSAN static inline int emu_rc_tls_module(struct dl_phdr_info* info, size_t size, void* ctx) {
    (void)size;
    EmuRcTlsQuery* q = (EmuRcTlsQuery*)ctx;
    if (info->dlpi_tls_data == NULL) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_TLS) continue;
        uintptr_t lo = (uintptr_t)info->dlpi_tls_data;
        if (q->target - lo < info->dlpi_phdr[i].p_memsz) {
            q->lo = lo;
            q->size = info->dlpi_phdr[i].p_memsz;
            snprintf(q->name, sizeof(q->name), "%s", info->dlpi_name != NULL ? info->dlpi_name : "");
            return 1;
        }
    }
    return 0;
}
EMU_NOTSAN static inline void emu_rc_find_tls(EmuRcTlsQuery* q) {
    memset((void*)q, 0, sizeof(*q));
    q->target = (uintptr_t)&threadIdx;
    if (dl_iterate_phdr(emu_rc_tls_module, q) == 0 || q->size == 0)
        emu_rc_fatal("cannot find the thread-local block that holds the static __shared__ variables", __FILE__, __LINE__);
}

// collects the function-local thread-local symbols: `__shared__ T x[N];` inside a kernel or device
// function is a function-local `static thread_local`, mangled _ZZ<function>E<name>
struct EmuRcSymScan {
    EmuRcSym* syms;
    size_t n, cap;
    uintptr_t threadidx_off;  // st_value of threadIdx (checks that st_value is the offset in the block)
    bool seen_threadidx;
};
EMU_NOTSAN static inline bool emu_rc_collect_sym(void* ctx, const Elf64_Sym* sym, const char* name) {
    EmuRcSymScan* s = (EmuRcSymScan*)ctx;
    if (ELF64_ST_TYPE(sym->st_info) != STT_TLS) return true;
    if (strcmp(name, "threadIdx") == 0) {
        s->threadidx_off = sym->st_value;
        s->seen_threadidx = true;
    }
    if (strncmp(name, "_ZZ", 3) != 0 || sym->st_size == 0) return true;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->syms = (EmuRcSym*)realloc(s->syms, s->cap * sizeof(EmuRcSym));
        if (s->syms == NULL) emu_rc_fatal("out of memory", __FILE__, __LINE__);
    }
    s->syms[s->n].off = sym->st_value;
    s->syms[s->n].size = sym->st_size;
    s->syms[s->n].name = strdup(name);
    if (s->syms[s->n].name == NULL) emu_rc_fatal("out of memory", __FILE__, __LINE__);
    s->n++;
    return true;
}

EMU_NOTSAN static inline void emu_rc_summary(void) {
    unsigned long long b = emu_rc_total_blocks.load(), a = emu_rc_total_accesses.load();
    fflush(stdout);
    if (b > 0) fprintf(stderr, "emu: racecheck: %llu shared-memory accesses in %llu blocks checked, no race found\n", a, b);
}

EMU_NOTSAN static inline void emu_rc_program_init(void) {
    EmuRcProgram* p = &emu_rc_prog;
    EmuRcTlsQuery q;
    emu_rc_find_tls(&q);
    p->tls_size = q.size;
    if (q.name[0] != '\0') {
        snprintf(p->path, sizeof(p->path), "%s", q.name);
    } else {  // the main program
        ssize_t k = readlink("/proc/self/exe", p->path, sizeof(p->path) - 1);
        p->path[k > 0 ? k : 0] = '\0';
    }
    p->is_shared = (uint8_t*)calloc(p->tls_size, 1);
    if (p->is_shared == NULL) emu_rc_fatal("out of memory", __FILE__, __LINE__);
    EmuRcSymScan s;
    memset((void*)&s, 0, sizeof(s));
    bool ok = emu_elf_symbols(p->path, emu_rc_collect_sym, &s);
    if (ok && s.seen_threadidx && s.threadidx_off == (uintptr_t)&threadIdx - q.lo) {
        for (size_t i = 0; i < s.n; i++)
            if (s.syms[i].off < p->tls_size) {
                size_t end = s.syms[i].off + s.syms[i].size;
                memset(p->is_shared + s.syms[i].off, 1, (end < p->tls_size ? end : p->tls_size) - s.syms[i].off);
            }
        p->syms = s.syms;
        p->nsyms = s.n;
    } else {
        // stripped, or symbol values that are not offsets in the block: every thread-local byte of
        // the module counts as shared memory (the emulator's own thread-locals are written only by
        // uninstrumented code, so they cannot conflict), and reports give offsets without names
        memset(p->is_shared, 1, p->tls_size);
        for (size_t i = 0; i < s.n; i++) free(s.syms[i].name);
        free(s.syms);
    }
    // code addresses are kept as 32-bit offsets from the module's load base (position-independent)
    Dl_info info;
    memset(&info, 0, sizeof(info));
    if (dladdr((const void*)&emu_rc_program_init, &info) != 0 && info.dli_fbase != NULL &&
        ((const Elf64_Ehdr*)info.dli_fbase)->e_type == ET_DYN)
        p->pc_base = (uintptr_t)info.dli_fbase;
    if (atexit(emu_rc_summary) != 0) emu_rc_fatal("atexit failed", __FILE__, __LINE__);
}

// a worker's state, created with the worker on its OS thread (the thread-local block is per thread)
EMU_NOTSAN static inline void emu_rc_worker_init(EmuWorker* w) {
    if (pthread_once(&emu_rc_prog_once, emu_rc_program_init) != 0) emu_rc_fatal("pthread_once failed", __FILE__, __LINE__);
    EmuRc* rc = (EmuRc*)calloc(1, sizeof(EmuRc));
    if (rc == NULL) emu_rc_fatal("out of memory", __FILE__, __LINE__);
    EmuRcTlsQuery q;
    emu_rc_find_tls(&q);
    if (q.size != emu_rc_prog.tls_size) emu_rc_fatal("thread-local blocks of different sizes", __FILE__, __LINE__);
    rc->w = w;
    rc->tls_lo = q.lo;
    rc->tls_size = q.size;
    rc->tls_cells = (EmuRcCell*)calloc(q.size, sizeof(EmuRcCell));
    rc->vc = (uint32_t*)calloc((size_t)EMU_MAX_THREADS * 32, sizeof(uint32_t));
    if (rc->tls_cells == NULL || rc->vc == NULL) emu_rc_fatal("out of memory", __FILE__, __LINE__);
    rc->interval = 1;
    emu_rc = rc;
}

// ----------------------------------------------------------------------------
// clocks and intervals

// a new barrier interval: every record so far is stale, and every thread gets a fresh clock, larger
// than anything any thread learned before, so no earlier join orders accesses of the new interval
EMU_NOTSAN static inline void emu_rc_new_interval(EmuRc* rc, int n) {
    rc->interval++;
    rc->pool_used = 0;
    uint32_t t = ++rc->tick;
    for (int i = 0; i < n; i++) rc->vc[(size_t)i * 32 + (i & 31)] = t;
}

EMU_NOTSAN static inline void emu_rc_block_begin(EmuWorker* w, const EmuLaunch* L) {
    EmuRc* rc = emu_rc;
    if (rc == NULL) return;
    if (rc->interval > 0xF0000000u || rc->tick > 0xF0000000u) {  // start the counters again
        memset((void*)rc->tls_cells, 0, rc->tls_size * sizeof(EmuRcCell));
        if (rc->dyn_cap > 0) memset((void*)rc->dyn_cells, 0, rc->dyn_cap * sizeof(EmuRcCell));
        memset(rc->vc, 0, (size_t)EMU_MAX_THREADS * 32 * sizeof(uint32_t));
        rc->interval = 1;
        rc->tick = 0;
    }
    if (L->smem > rc->dyn_cap) {
        free(rc->dyn_cells);
        rc->dyn_cells = (EmuRcCell*)calloc(L->smem, sizeof(EmuRcCell));
        if (rc->dyn_cells == NULL) emu_rc_fatal("out of memory", __FILE__, __LINE__);
        rc->dyn_cap = L->smem;
    }
    rc->dyn_lo = (uintptr_t)w->dyn_smem;
    rc->dyn_size = L->smem;
    emu_rc_new_interval(rc, w->n);
    rc->on = 1;
}
EMU_NOTSAN static inline void emu_rc_block_end(EmuWorker* w) {
    (void)w;
    EmuRc* rc = emu_rc;
    if (rc == NULL) return;
    rc->on = 0;
    emu_rc_total_accesses.fetch_add(rc->accesses, std::memory_order_relaxed);
    emu_rc_total_blocks.fetch_add(1, std::memory_order_relaxed);
    rc->accesses = 0;
}
// __syncthreads: the last thread arrived
EMU_NOTSAN static inline void emu_rc_barrier(EmuWorker* w) {
    if (emu_rc != NULL) emu_rc_new_interval(emu_rc, w->n);
}
// a warp collective completed among `lanes` of warp wi: each lane learns what every other lane of
// the mask knew (the elementwise maximum of their clocks), then all move to a fresh clock
EMU_NOTSAN static inline void emu_rc_warp_join(EmuWorker* w, int wi, uint32_t lanes) {
    (void)w;
    EmuRc* rc = emu_rc;
    if (rc == NULL) return;
    uint32_t* v = rc->vc + (size_t)wi * 32 * 32;
    uint32_t mx[32];
    memcpy(mx, v + (size_t)__builtin_ctz(lanes) * 32, sizeof(mx));
    for (uint32_t m = lanes & (lanes - 1); m; m &= m - 1) {
        const uint32_t* o = v + (size_t)__builtin_ctz(m) * 32;
        for (int j = 0; j < 32; j++) mx[j] = o[j] > mx[j] ? o[j] : mx[j];
    }
    uint32_t t = ++rc->tick;
    for (uint32_t m = lanes; m; m &= m - 1) {
        int l = __builtin_ctz(m);
        memcpy(v + (size_t)l * 32, mx, sizeof(mx));
        v[(size_t)l * 32 + l] = t;
    }
}

// did thread u's access at its clock cu happen before the current point of thread t?
EMU_NOTSAN static inline bool emu_rc_hb(const EmuRc* rc, int t, int u, uint32_t cu) {
    return u == t || ((u >> 5) == (t >> 5) && rc->vc[(size_t)t * 32 + (u & 31)] >= cu);
}

// does some access of the set conflict with (not happen before) thread t's current point? Sets *u
// and *upc to one such access.
EMU_NOTSAN static inline bool emu_rc_set_conflict(const EmuRc* rc, const EmuRcSet* s, int t, int* u, uint32_t* upc) {
    if (s->t1 == 0) return false;
    int u1 = s->t1 - 1;
    if (s->t2 != 0) {  // accesses from two warps: one of them is from another warp than t's
        bool first_other = (u1 >> 5) != (t >> 5);
        *u = first_other ? u1 : s->t2 - 1;
        *upc = first_other ? s->pc1 : s->pc2;
        return true;
    }
    if ((u1 >> 5) != (t >> 5)) {
        *u = u1;
        *upc = s->pc1;
        return true;
    }
    if (s->lanes == 0) {
        if (emu_rc_hb(rc, t, u1, s->c1)) return false;
        *u = u1;
        *upc = s->pc1;
        return true;
    }
    const EmuRcLanes* L = &rc->pool[s->lanes - 1];
    const uint32_t* vt = rc->vc + (size_t)t * 32;
    for (int l = 0; l < 32; l++) {
        if (L->clk[l] == 0 || l == (t & 31) || vt[l] >= L->clk[l]) continue;
        *u = (u1 & ~31) + l;
        *upc = L->pc[l];
        return true;
    }
    return false;
}

// adds thread t's access (clock ct, code address pc) to the set
EMU_NOTSAN static inline void emu_rc_set_add(EmuRc* rc, EmuRcSet* s, int t, uint32_t ct, uint32_t pc) {
    if (s->t1 == 0) {
        s->t1 = (uint16_t)(t + 1);
        s->c1 = ct;
        s->pc1 = pc;
        return;
    }
    if (s->t2 != 0) return;  // two warps: every later conflicting access is reported anyway
    int u1 = s->t1 - 1;
    if ((u1 >> 5) != (t >> 5)) {
        s->t2 = (uint16_t)(t + 1);
        s->pc2 = pc;
        return;
    }
    if (s->lanes != 0) {
        rc->pool[s->lanes - 1].clk[t & 31] = ct;
        rc->pool[s->lanes - 1].pc[t & 31] = pc;
        return;
    }
    if (emu_rc_hb(rc, t, u1, s->c1)) {  // the earlier access happens before this one: keep only this one
        s->t1 = (uint16_t)(t + 1);
        s->c1 = ct;
        s->pc1 = pc;
        return;
    }
    if (rc->pool_used == rc->pool_cap) {
        uint32_t cap = rc->pool_cap ? 2 * rc->pool_cap : 256;
        EmuRcLanes* p = (EmuRcLanes*)realloc(rc->pool, (size_t)cap * sizeof(EmuRcLanes));
        if (p == NULL) emu_rc_fatal("out of memory", __FILE__, __LINE__);
        rc->pool = p;
        rc->pool_cap = cap;
    }
    EmuRcLanes* L = &rc->pool[rc->pool_used++];
    memset((void*)L, 0, sizeof(*L));
    L->clk[u1 & 31] = s->c1;
    L->pc[u1 & 31] = s->pc1;
    L->clk[t & 31] = ct;
    L->pc[t & 31] = pc;
    s->lanes = rc->pool_used;
}

// ----------------------------------------------------------------------------
// the report

// is this source file one of the emulator's headers (dev/emu/emu*.h)?
EMU_NOTSAN static inline bool emu_rc_is_emulator_file(const char* path) {
    const char* b = strrchr(path, '/');
    b = b != NULL ? b + 1 : path;
    size_t n = strlen(b);
    return strncmp(b, "emu", 3) == 0 && n > 2 && strcmp(b + n - 2, ".h") == 0;
}

// "file:line (in function)" of a code address, from addr2line: the innermost inlined frame that is
// not the emulator's own (an atomicAdd's line is the kernel's call, not emu_device.h); or the bare
// address when addr2line is missing or the program has no line information
EMU_NOTSAN static inline void emu_rc_where(uint32_t pc, char* out, size_t n) {
    if (pc == 0) {
        snprintf(out, n, "(unknown code address)");
        return;
    }
    snprintf(out, n, "pc 0x%x in %.1024s (no line information)", pc - 1, emu_rc_prog.path);
    char cmd[4400];
    snprintf(cmd, sizeof(cmd), "addr2line -C -f -i -e '%s' 0x%x 2>/dev/null", emu_rc_prog.path, pc - 1);
    FILE* f = popen(cmd, "r");
    if (f == NULL) return;
    char func[2048], loc[2048];
    bool first = true;
    while (fgets(func, sizeof(func), f) != NULL && fgets(loc, sizeof(loc), f) != NULL) {
        func[strcspn(func, "\n")] = '\0';
        loc[strcspn(loc, "\n")] = '\0';
        char* disc = strstr(loc, " (discriminator");
        if (disc != NULL) *disc = '\0';
        if (strncmp(loc, "??", 2) == 0) break;
        char* colon = strrchr(loc, ':');
        char line[32] = "";
        if (colon != NULL) {
            snprintf(line, sizeof(line), "%s", colon);
            *colon = '\0';
        }
        char real[PATH_MAX];
        const char* file = realpath(loc, real) != NULL ? real : loc;
        if (first || !emu_rc_is_emulator_file(file)) snprintf(out, n, "%.1000s%s (in %.900s)", file, line, func);
        if (!emu_rc_is_emulator_file(file)) break;
        first = false;
    }
    pclose(f);
}

static const char* const emu_rc_now[3] = {"reads", "writes", "atomically updates"};
static const char* const emu_rc_then[3] = {"read", "wrote", "atomically updated"};
static const char* const emu_rc_noun[3] = {"read", "write", "atomic update"};

[[noreturn]] __attribute__((cold, noinline)) EMU_NOTSAN static inline void emu_rc_report(EmuRc* rc, int dynamic, size_t off,
                                                                                        size_t bytes, int kind, uint32_t pc,
                                                                                        int u, int ukind, uint32_t upc) {
    rc->on = 0;  // nothing below is the kernel's
    const EmuWorker* w = rc->w;
    const EmuThread* T = w->running;
    const EmuThread* U = &w->th[u];
    size_t bufn = 16384;
    char* buf = (char*)malloc(bufn);
    char* where = (char*)malloc(3 * 2048);
    if (buf == NULL || where == NULL) emu_rc_fatal("out of memory while reporting a race", __FILE__, __LINE__);
    char* kname = where + 2048;
    char* vname = where + 4096;
    const EmuLaunch* L = w->L;
    emu_kernel_name(L->kfn, kname, 2048);
    // the shared variable and the offset in it
    if (dynamic) {
        snprintf(vname, 2048, "dynamic shared memory (EXTERN_SHARED) + %zu (of %zu bytes)", off, rc->dyn_size);
    } else {
        const EmuRcSym* sym = NULL;
        for (size_t i = 0; i < emu_rc_prog.nsyms && sym == NULL; i++)
            if (off - emu_rc_prog.syms[i].off < emu_rc_prog.syms[i].size) sym = &emu_rc_prog.syms[i];
        if (sym != NULL) {
            char dem[1536];
            emu_demangle(sym->name, dem, sizeof(dem));
            snprintf(vname, 2048, "__shared__ %s + %zu (of %zu bytes)", dem, off - sym->off, sym->size);
        } else {
            snprintf(vname, 2048, "static __shared__ memory at offset %zu of the thread-local block (no symbol table)", off);
        }
    }
    static const char* const hazards[3][3] = {  // [earlier kind][this kind]
        {"read after read", "write after read", "atomic after read"},
        {"read after write", "write after write", "atomic after write"},
        {"read after atomic", "write after atomic", "atomic after atomic"}};
    const char* hazard = hazards[ukind][kind];
    bool same_warp = (u >> 5) == (T->lin >> 5);
    size_t k = 0;
    k += (size_t)snprintf(buf + k, bufn - k,
                          "racecheck: shared-memory race (%s) in kernel %s: thread (%u,%u,%u) (warp %d, lane %d) of block "
                          "(%u,%u,%u) %s %zu byte%s at %s, which thread (%u,%u,%u) (warp %d, lane %d) %s in the same "
                          "barrier interval, with no %s between the two",
                          hazard, kname, T->tid.x, T->tid.y, T->tid.z, T->lin / 32, T->lin % 32, blockIdx.x, blockIdx.y,
                          blockIdx.z, emu_rc_now[kind], bytes, bytes == 1 ? "" : "s", vname, U->tid.x, U->tid.y, U->tid.z,
                          u / 32, u % 32, emu_rc_then[ukind],
                          same_warp ? "__syncthreads and no __syncwarp or warp collective of both lanes" : "__syncthreads");
    emu_rc_where(pc, where, 2048);
    if (k < bufn) k += (size_t)snprintf(buf + k, bufn - k, "\nemu:   this %s: %s", emu_rc_noun[kind], where);
    emu_rc_where(upc, where, 2048);
    if (k < bufn) k += (size_t)snprintf(buf + k, bufn - k, "\nemu:   the earlier %s: %s", emu_rc_noun[ukind], where);
    emu_misuse("%s", buf);
}

// ----------------------------------------------------------------------------
// the check of one access

EMU_NOTSAN static inline uint32_t emu_rc_pc(const void* pc) {
    uintptr_t o = (uintptr_t)pc - emu_rc_prog.pc_base;
    return o < 0xFFFFFFFFu ? (uint32_t)o : 0;
}

__attribute__((noinline)) EMU_NOTSAN static inline void emu_rc_check(EmuRc* rc, EmuRcCell* cells, int dynamic, size_t off,
                                                                     size_t n, int kind, const void* pcaddr) {
    const EmuThread* T = rc->w->running;
    if (T == NULL) return;
    int t = T->lin;
    rc->accesses++;
    uint32_t ct = rc->vc[(size_t)t * 32 + (t & 31)];
    uint32_t pc = emu_rc_pc(pcaddr);
    for (size_t i = 0; i < n; i++) {
        EmuRcCell* c = &cells[i];
        if (c->stamp != rc->interval) {
            memset((void*)c, 0, sizeof(*c));
            c->stamp = rc->interval;
        }
        int u = 0;
        uint32_t upc = 0;
        if (c->wt != 0 && !emu_rc_hb(rc, t, c->wt - 1, c->wc))
            emu_rc_report(rc, dynamic, off + i, n, kind, pc, c->wt - 1, EMU_RC_WRITE, c->wpc);
        if (kind != EMU_RC_READ && emu_rc_set_conflict(rc, &c->r, t, &u, &upc))
            emu_rc_report(rc, dynamic, off + i, n, kind, pc, u, EMU_RC_READ, upc);
        if (kind != EMU_RC_ATOMIC && emu_rc_set_conflict(rc, &c->a, t, &u, &upc))
            emu_rc_report(rc, dynamic, off + i, n, kind, pc, u, EMU_RC_ATOMIC, upc);
        if (kind == EMU_RC_WRITE) {  // it happens after every access so far: it stands for them all
            c->wt = (uint16_t)(t + 1);
            c->wc = ct;
            c->wpc = pc;
            memset((void*)&c->r, 0, sizeof(c->r));
            memset((void*)&c->a, 0, sizeof(c->a));
        } else {
            emu_rc_set_add(rc, kind == EMU_RC_READ ? &c->r : &c->a, t, ct, pc);
        }
    }
}

// every instrumented access comes here: is it an emulated thread's access to shared memory?
EMU_NOTSAN static inline void emu_rc_access(const volatile void* addr, size_t n, int kind, const void* pc) {
    EmuRc* rc = emu_rc;
    if (__builtin_expect(rc == NULL || !rc->on, 1)) return;
    uintptr_t p = (uintptr_t)addr;
    if (p - rc->tls_lo < rc->tls_size) {
        size_t off = p - rc->tls_lo;
        if (!emu_rc_prog.is_shared[off]) return;  // the emulator's own thread-locals (threadIdx, ...)
        if (n > rc->tls_size - off) n = rc->tls_size - off;
        emu_rc_check(rc, rc->tls_cells + off, 0, off, n, kind, pc);
    } else if (p - rc->dyn_lo < rc->dyn_size) {
        size_t off = p - rc->dyn_lo;
        if (n > rc->dyn_size - off) n = rc->dyn_size - off;
        emu_rc_check(rc, rc->dyn_cells + off, 1, off, n, kind, pc);
    }
}

// ----------------------------------------------------------------------------
// the calls that g++ -fsanitize=thread inserts. Weak (inline, kept with `used`) so that every
// translation unit may define them; never instrumented themselves.

#define EMU_RC_HOOK extern "C" inline __attribute__((used, noinline, no_sanitize_thread))
#define EMU_RC_PC __builtin_return_address(0)

EMU_RC_HOOK void __tsan_init(void) {}
EMU_RC_HOOK void __tsan_func_entry(void* pc) { (void)pc; }
EMU_RC_HOOK void __tsan_func_exit(void) {}
EMU_RC_HOOK void __tsan_vptr_update(void** p, void* v) { (void)p; (void)v; }
EMU_RC_HOOK void __tsan_vptr_read(void** p) { (void)p; }
EMU_RC_HOOK void __tsan_read_range(void* a, unsigned long n) { emu_rc_access(a, n, EMU_RC_READ, EMU_RC_PC); }
EMU_RC_HOOK void __tsan_write_range(void* a, unsigned long n) { emu_rc_access(a, n, EMU_RC_WRITE, EMU_RC_PC); }

#define EMU_RC_PLAIN(N)                                                                                   \
    EMU_RC_HOOK void __tsan_read##N(void* a) { emu_rc_access(a, N, EMU_RC_READ, EMU_RC_PC); }             \
    EMU_RC_HOOK void __tsan_write##N(void* a) { emu_rc_access(a, N, EMU_RC_WRITE, EMU_RC_PC); }           \
    EMU_RC_HOOK void __tsan_unaligned_read##N(void* a) { emu_rc_access(a, N, EMU_RC_READ, EMU_RC_PC); }   \
    EMU_RC_HOOK void __tsan_unaligned_write##N(void* a) { emu_rc_access(a, N, EMU_RC_WRITE, EMU_RC_PC); } \
    EMU_RC_HOOK void __tsan_volatile_read##N(void* a) { emu_rc_access(a, N, EMU_RC_READ, EMU_RC_PC); }    \
    EMU_RC_HOOK void __tsan_volatile_write##N(void* a) { emu_rc_access(a, N, EMU_RC_WRITE, EMU_RC_PC); }
EMU_RC_PLAIN(1)
EMU_RC_PLAIN(2)
EMU_RC_PLAIN(4)
EMU_RC_PLAIN(8)
EMU_RC_PLAIN(16)
#undef EMU_RC_PLAIN

// atomics (the instrumented code's __atomic builtins): done here, sequentially consistent whatever
// order was asked (stronger is always correct), and recorded as atomic accesses
#define EMU_RC_A(N) emu_rc_access(a, N / 8, EMU_RC_ATOMIC, EMU_RC_PC)
#define EMU_RC_ATOMICS(N, T)                                                                                       \
    EMU_RC_HOOK T __tsan_atomic##N##_load(const volatile T* a, int mo) {                                            \
        (void)mo; EMU_RC_A(N); return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                        \
    }                                                                                                              \
    EMU_RC_HOOK void __tsan_atomic##N##_store(volatile T* a, T v, int mo) {                                         \
        (void)mo; EMU_RC_A(N); __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                            \
    }                                                                                                              \
    EMU_RC_HOOK T __tsan_atomic##N##_exchange(volatile T* a, T v, int mo) {                                         \
        (void)mo; EMU_RC_A(N); return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                  \
    }                                                                                                              \
    EMU_RC_HOOK T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int mo) {                                        \
        (void)mo; EMU_RC_A(N); return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                   \
    }                                                                                                              \
    EMU_RC_HOOK T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int mo) {                                        \
        (void)mo; EMU_RC_A(N); return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                   \
    }                                                                                                              \
    EMU_RC_HOOK T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int mo) {                                        \
        (void)mo; EMU_RC_A(N); return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                   \
    }                                                                                                              \
    EMU_RC_HOOK T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int mo) {                                         \
        (void)mo; EMU_RC_A(N); return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                    \
    }                                                                                                              \
    EMU_RC_HOOK T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int mo) {                                        \
        (void)mo; EMU_RC_A(N); return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                   \
    }                                                                                                              \
    EMU_RC_HOOK T __tsan_atomic##N##_fetch_nand(volatile T* a, T v, int mo) {                                       \
        (void)mo; EMU_RC_A(N); return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                  \
    }                                                                                                              \
    EMU_RC_HOOK bool __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int mo, int fmo) {        \
        (void)mo; (void)fmo; EMU_RC_A(N);                                                                          \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                    \
    }                                                                                                              \
    EMU_RC_HOOK bool __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int mo, int fmo) {          \
        (void)mo; (void)fmo; EMU_RC_A(N);                                                                          \
        return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                     \
    }                                                                                                              \
    EMU_RC_HOOK T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, int mo, int fmo) {               \
        (void)mo; (void)fmo; EMU_RC_A(N);                                                                          \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                          \
        return c;                                                                                                  \
    }
EMU_RC_ATOMICS(8, uint8_t)
EMU_RC_ATOMICS(16, uint16_t)
EMU_RC_ATOMICS(32, uint32_t)
EMU_RC_ATOMICS(64, uint64_t)
#undef EMU_RC_ATOMICS
#undef EMU_RC_A
EMU_RC_HOOK void __tsan_atomic_thread_fence(int mo) { (void)mo; __atomic_thread_fence(__ATOMIC_SEQ_CST); }
EMU_RC_HOOK void __tsan_atomic_signal_fence(int mo) { (void)mo; __atomic_signal_fence(__ATOMIC_SEQ_CST); }

#else  // !EMU_RACECHECK: the scheduler's hooks do nothing

EMU_NOTSAN static inline void emu_rc_worker_init(EmuWorker* w) { (void)w; }
EMU_NOTSAN static inline void emu_rc_block_begin(EmuWorker* w, const EmuLaunch* L) { (void)w; (void)L; }
EMU_NOTSAN static inline void emu_rc_block_end(EmuWorker* w) { (void)w; }
EMU_NOTSAN static inline void emu_rc_barrier(EmuWorker* w) { (void)w; }
EMU_NOTSAN static inline void emu_rc_warp_join(EmuWorker* w, int wi, uint32_t lanes) { (void)w; (void)wi; (void)lanes; }

#endif
