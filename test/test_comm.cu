// test_comm.cu: tests of llm/comm/comm.h, the process mesh, its collectives and the byte ledger.
// Run under mpirun with any world size and layout (test/test_comm.sh runs them all):
//
//   mpirun -np 4 build/test_comm_cpu --dp 2 --tp 2 --pp 1 [--seed S]
//
// Checked: the rank order (tp innermost, then pp, then dp) and the members of every group; every
// collective, blocking and non-blocking, in and out of place, sum and average, on block sizes 1, 3
// and 1000, in every group, against the sum / concatenation this rank computes from every member's
// data (each rank's data is regenerated here from its world rank and a seed that rank 0 picks and
// broadcasts); that all ranks of a group get bitwise identical all-reduce results; with two ranks,
// that the sum is exactly one rounding of a+b (bf16 rounds to nearest even); all_to_all (block j of
// rank r's send is rank j's block r, bit for bit, in a NaN-poisoned recv; its ledger row grows by
// N*block*elem payload and (N-1)*block*elem sent bytes; over the emulated NCCL N-1 sends and receives);
// send/recv, sendrecv, barrier; the ledger's calls and bytes against the ring formulas of the ZeRO paper (sec. 7), and
// DDP (2 Psi (N-1)/N) against ZeRO-3 (3 Psi (N-1)/N); the wait accounting (comm_take_wait_ms: a rank
// that joins late makes the others wait at least as long, blocking collectives count nothing, a
// handle waited after its completion event was reused is not timed). Compiled as the CPU build
// (floatX = float, MPI) and as the emulated CUDA build (floatX = bf16, both float and bf16 tested),
// which runs comm.h's NCCL code against dev/emu/nccl_emu.h: there every collective of a group of
// more than one rank must have run exactly one emulated NCCL operation of its kind (nccl_emu_calls),
// which proves the NCCL path was taken.
//
// Each check is evaluated on every rank; rank 0 prints one line per check (with the number of ranks
// that failed it) and the summary "test_comm: N passed, M failed". Exit status 1 on any failure.
//
// Other modes (used by test/test_comm.sh):
//   --die-rank R [--die-signal]   rank R leaves (exit(1), or SIGKILL) while the others wait in an
//                                 all-reduce; mpirun must end the job (non-zero) promptly
//   --bench                       all-reduce bandwidth of float buffers, 1 MB .. 64 MB
//   --host-ptr                    (emulated build) pass a host pointer to a collective: must fail
//   --a2a-overlap                 an all_to_all with recv == send (it has no in-place form): must fail
//   --a2a-hang                    --comm-timeout 2 s; the last rank hangs before an all_to_all of the world (the variable
//                                 one, comm_all_to_all_v): every other rank's watchdog must name it (test_comm.sh checks the lines)
#include "../llm/comm/comm.h"
#include "../llm/core/usage.h"
#include <stdarg.h>
#include <signal.h>
#include <unistd.h>
#include <dirent.h>
#include <errno.h>

static Comm C;
static int g_pass = 0, g_fail = 0;

// One check, evaluated on every rank (a collective over the world: every rank must call it in the
// same order). Rank 0 prints the line. A failing rank prints its own detail line first.
static int mcheck(int ok, const char* detail, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static int mcheck(int ok, const char* detail, const char* fmt, ...) {
    if (!ok && detail && detail[0]) {
        printf("  rank %d: %s\n", C.world_rank, detail);
        fflush(stdout);
    }
    int bad = ok ? 0 : 1, nbad = 0;
    mpiCheck(MPI_Allreduce(&bad, &nbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    if (nbad == 0) g_pass++; else g_fail++;
    if (C.world_rank == 0) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (nbad == 0) printf("ok   %s\n", msg);
        else printf("FAIL %s (%d of %d ranks failed)\n", msg, nbad, C.world_size);
        fflush(stdout);
    }
    return nbad == 0;
}

// ----------------------------------------------------------------------------
// data: a pure function of (seed, test id, world rank, index), so any rank can regenerate any
// other rank's input

static uint64_t g_seed = 0;

static inline uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
static inline float rand_val(uint64_t test, int world_rank, size_t i) {
    uint64_t h = mix64(mix64(mix64(g_seed ^ test) + (uint64_t)world_rank) + i);
    return (float)((double)(h >> 40) / (double)(1ull << 24) * 2.0 - 1.0);  // [-1, 1)
}

// the element types under test, with their unit roundoff
// world ranks of the members of my group g, in group-rank order (the formula; test_mesh checks the
// groups against the coordinates the ranks report)
static int g_ep = 1;  // --ep: the expert-parallel fold of dp
static void group_members(CommGroup g, int* members) {
    int dp = C.mesh.dp.size, tp = C.mesh.tp.size, pp = C.mesh.pp.size, cp = C.mesh.cp.size;
    // world rank = ((d * pp + p) * cp + q) * tp + t (llm/comm/comm_mesh.h), computed here on its own
    int t = C.world_rank % tp, q = (C.world_rank / tp) % cp, p = (C.world_rank / (tp * cp)) % pp, d = C.world_rank / (tp * cp * pp);
    auto rank = [&](int d_, int p_, int q_, int t_) { return ((d_ * pp + p_) * cp + q_) * tp + t_; };
    if (g == GROUP_EMBED) {  // the first and the last pp rank of my (dp, cp, tp); a middle pp rank alone
        members[0] = p == 0 || p == pp - 1 ? rank(d, 0, q, t) : C.world_rank;
        if (pp > 1 && (p == 0 || p == pp - 1)) members[1] = rank(d, pp - 1, q, t);
        return;
    }
    // expert parallelism, folded into dp: d = edp * ep + e; the ep group varies e, the experts' gradient group edp and cp
    int ep = g_ep, e = d % ep, edp = d / ep;
    int N = g == GROUP_WORLD ? C.world_size : g == GROUP_DP ? dp * cp : g == GROUP_TP ? tp : g == GROUP_CP ? cp
          : g == GROUP_EP ? ep : g == GROUP_EDP ? dp / ep * cp : pp;
    for (int j = 0; j < N; j++) {
        switch (g) {
            case GROUP_WORLD: members[j] = j; break;
            case GROUP_DP: members[j] = rank(j / cp, p, j % cp, t); break;  // the gradient group: dp x cp, cp inner
            case GROUP_EP: members[j] = rank(edp * ep + j, p, q, t); break;
            case GROUP_EDP: members[j] = rank((j / cp) * ep + e, p, j % cp, t); break;
            case GROUP_TP: members[j] = rank(d, p, q, j); break;
            case GROUP_CP: members[j] = rank(d, p, j, t); break;
            default: members[j] = rank(d, j, q, t); break;
        }
    }
}

template <typename T> struct TT;
template <> struct TT<float> {
    static float to(float x) { return x; }
    static float from(float x) { return x; }
    static const char* name() { return "float"; }
    static double eps() { return ldexp(1.0, -24); }
};
#if LLM_HAS_KERNELS && !defined(ENABLE_FP32)
template <> struct TT<__nv_bfloat16> {
    static __nv_bfloat16 to(float x) { return __float2bfloat16(x); }  // the toolkit's rounding, not comm.h's
    static float from(__nv_bfloat16 x) { return __bfloat162float(x); }
    static const char* name() { return "bf16"; }
    static double eps() { return ldexp(1.0, -8); }
};
#endif
#if LLM_HAS_KERNELS
template <> struct TT<__half> {  // FP16 (ncclFloat16), in every kernel build
    static __half to(float x) { return __float2half_rn(x); }
    static float from(__half x) { return __half2float(x); }
    static const char* name() { return "fp16"; }
    static double eps() { return ldexp(1.0, -11); }
};
#endif
#if COMM_MPI && !COMM_NCCL
// This program is built in FP32: these stand for 16-bit buffers, so that the MPI path's user ops
// (llm/comm/comm.h) are tested. comm_dtype_of is found for them by argument-dependent lookup. The
// conversions are llm/core/half_cpu.h's (checked against the toolkit's __half in test_gpt's FP16 build).
struct Bf16Bits { uint16_t b; };
struct Fp16Bits { uint16_t b; };
static inline CommDtype comm_dtype_of(const Bf16Bits*) { return COMM_BF16; }
static inline CommDtype comm_dtype_of(const Fp16Bits*) { return COMM_FP16; }
template <> struct TT<Bf16Bits> {
    static Bf16Bits to(float x) { return Bf16Bits{bf16_bits_from_float(x)}; }
    static float from(Bf16Bits x) { return bf16_bits_to_float(x.b); }
    static const char* name() { return "bf16"; }
    static double eps() { return ldexp(1.0, -8); }
};
template <> struct TT<Fp16Bits> {
    static Fp16Bits to(float x) { return Fp16Bits{fp16_bits_from_float(x)}; }
    static float from(Fp16Bits x) { return fp16_bits_to_float(x.b); }
    static const char* name() { return "fp16"; }
    static double eps() { return ldexp(1.0, -11); }
};
#endif

template <typename T>
static T* dev_upload(const T* host, size_t n) {
    T* d = (T*)device_malloc(n * sizeof(T), MEM_WORKSPACE);
    copy_to_device(d, host, n * sizeof(T));
    return d;
}
static void dev_poison(void* d, size_t bytes) {  // 0xFF bytes: NaN in float and bf16
    unsigned char* h = (unsigned char*)mallocCheck(bytes);
    memset(h, 0xFF, bytes);
    copy_to_device(d, h, bytes);
    free(h);
}
static uint64_t hash_bytes(const void* p, size_t n) {
    const unsigned char* b = (const unsigned char*)p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}
// 1 if every rank of group g holds the same 64-bit value
static int same_across_group(CommGroup g, uint64_t v) {
    if (C.mpi[g] == MPI_COMM_NULL) return 1;  // a middle pipeline stage's embed group: itself alone
    unsigned long long lo = 0, hi = 0, x = v;
    mpiCheck(MPI_Allreduce(&x, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, C.mpi[g]));
    mpiCheck(MPI_Allreduce(&x, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, C.mpi[g]));
    return lo == hi;
}

static uint64_t g_test_id = 0;  // every test case draws fresh data
static int g_group_calls = 0;    // groups tested so far (sets g_test_id alike on every rank)

// the emulated NCCL operations run so far of comm kind k (the emulated build; -1 elsewhere)
static long long nccl_ops(CommKind k) {
#if LLM_BUILD_EMU && COMM_NCCL
    // (all_to_all has no NCCL operation of its own: it runs as sends and receives, counted there)
    static const int map[COMM_NUM_KINDS] = {NCCL_EMU_ALL_REDUCE, NCCL_EMU_REDUCE_SCATTER, NCCL_EMU_ALL_GATHER,
                                            NCCL_EMU_BROADCAST, NCCL_EMU_SEND, NCCL_EMU_RECV, -1};
    return map[k] < 0 ? 0 : nccl_emu_calls(map[k]);
#else
    (void)k;
    return -1;
#endif
}
// over the emulated NCCL, a collective on a group of N ranks runs `want` NCCL operations if N > 1
// and none if N == 1 (a local copy); elsewhere nothing to check
static int nccl_ran(CommKind k, long long before, int N, long long want, char* detail, size_t cap) {
    if (before < 0) return 1;
    long long ran = nccl_ops(k) - before, expect = N > 1 ? want : 0;
    if (ran == expect) return 1;
    snprintf(detail, cap, "%lld emulated NCCL %s operations ran, expected %lld (group of %d)", ran, comm_kind_name(k), expect, N);
    return 0;
}

// ----------------------------------------------------------------------------
// one collective, one configuration

enum { MODE_BLOCKING = 0, MODE_START_WAIT = 1, MODE_START_TEST = 2 };
static const char* mode_name(int m) { return m == 0 ? "blocking" : m == 1 ? "start+wait" : "start+test"; }

template <typename T>
static void test_collective(CommKind kind, int mode, int in_place, CommGroup g, size_t block, CommReduce op) {
    const uint64_t tid = ++g_test_id;
    const int N = C.group_size[g], me = C.group_rank[g];
    int members[64];
    group_members(g, members);
    const size_t n_in = kind == COMM_REDUCE_SCATTER ? N * block : block;
    const size_t n_out = kind == COMM_ALL_GATHER ? N * block : block;

    // every member's input, rounded to T
    T* in = (T*)mallocCheck((size_t)N * n_in * sizeof(T));
    for (int j = 0; j < N; j++)
        for (size_t i = 0; i < n_in; i++) in[j * n_in + i] = TT<T>::to(rand_val(tid, members[j], i));
    const T* mine = in + me * n_in;

    // device buffers, following the in-place conventions of comm.h
    T* send = NULL;
    T* recv = NULL;
    T* alloc1 = NULL;
    T* alloc2 = NULL;
    if (kind == COMM_ALL_REDUCE) {
        alloc1 = dev_upload(mine, block);
        send = alloc1;
        if (in_place) recv = alloc1;
        else { alloc2 = (T*)device_malloc(block * sizeof(T), MEM_WORKSPACE); dev_poison(alloc2, block * sizeof(T)); recv = alloc2; }
    } else if (kind == COMM_REDUCE_SCATTER) {
        alloc1 = dev_upload(mine, N * block);
        send = alloc1;
        if (in_place) recv = alloc1 + me * block;
        else { alloc2 = (T*)device_malloc(block * sizeof(T), MEM_WORKSPACE); dev_poison(alloc2, block * sizeof(T)); recv = alloc2; }
    } else {  // all_gather
        alloc1 = (T*)device_malloc(N * block * sizeof(T), MEM_WORKSPACE);
        dev_poison(alloc1, N * block * sizeof(T));
        recv = alloc1;
        if (in_place) { send = alloc1 + me * block; copy_to_device(send, mine, block * sizeof(T)); }
        else { alloc2 = dev_upload(mine, block); send = alloc2; }
    }

    cudaStream_t stream = 0;
    const long long ops_before = nccl_ops(kind);
    if (mode == MODE_BLOCKING) {
        if (kind == COMM_ALL_REDUCE) comm_all_reduce(&C, g, send, recv, block, op, stream);
        else if (kind == COMM_REDUCE_SCATTER) comm_reduce_scatter(&C, g, send, recv, block, op, stream);
        else comm_all_gather(&C, g, send, recv, block, stream);
    } else {
        CommHandle h;
        if (kind == COMM_ALL_REDUCE) h = comm_all_reduce_start(&C, g, send, recv, block, op, stream);
        else if (kind == COMM_REDUCE_SCATTER) h = comm_reduce_scatter_start(&C, g, send, recv, block, op, stream);
        else h = comm_all_gather_start(&C, g, send, recv, block, stream);
        if (mode == MODE_START_TEST) {
            long spins = 0;
            while (!comm_test(&C, &h)) spins++;
        }
        comm_wait(&C, &h);
    }
    device_synchronize();
    T* got = (T*)mallocCheck(n_out * sizeof(T));
    copy_to_host(got, recv, n_out * sizeof(T));

    // expected values and the tolerance
    char detail[256] = "";
    int ok = 1;
    double max_err = 0.0;
    const char* how = "exact";
    if (kind == COMM_ALL_GATHER) {
        for (size_t i = 0; i < n_out && ok; i++) {
            float w = TT<T>::from(in[i]), o = TT<T>::from(got[i]);  // member j's block at j*block
            if (memcmp(&w, &o, sizeof(float)) != 0) {
                ok = 0;
                snprintf(detail, sizeof(detail), "[%zu] got %.9g, expected %.9g (member %zu)", i, o, w, i / block);
            }
        }
    } else {
        const size_t off = kind == COMM_REDUCE_SCATTER ? me * block : 0;
        // N <= 2: exactly one rounding of a+b (then of the average) is the only right answer
        const int exact = N <= 2;
        if (!exact) how = "tol (N+1) eps sum|x|";
        for (size_t i = 0; i < n_out; i++) {
            double want, tol = 0.0;
            if (exact) {
                float s = TT<T>::from(in[off + i]);
                if (N == 2) s = TT<T>::from(TT<T>::to(s + TT<T>::from(in[n_in + off + i])));
                if (op == COMM_AVG && N == 2) s = TT<T>::from(TT<T>::to(s * 0.5f));
                want = s;
            } else {
                double sum = 0.0, sabs = 0.0;
                for (int j = 0; j < N; j++) {
                    double x = TT<T>::from(in[j * n_in + off + i]);
                    sum += x;
                    sabs += fabs(x);
                }
                want = op == COMM_AVG ? sum / N : sum;
                tol = (N + 1) * TT<T>::eps() * sabs * (op == COMM_AVG ? 1.0 / N : 1.0);
            }
            double o = TT<T>::from(got[i]);
            double err = fabs(o - want);
            if (!(err <= tol)) {
                if (ok) snprintf(detail, sizeof(detail), "[%zu] got %.9g, expected %.9g (tol %.3g)", i, o, want, tol);
                ok = 0;
            }
            if (err > max_err || err != err) max_err = err;
        }
    }
    int same = 1;
    if (kind == COMM_ALL_REDUCE) same = same_across_group(g, hash_bytes(got, n_out * sizeof(T)));
    if (ok && same) ok = nccl_ran(kind, ops_before, N, 1, detail, sizeof(detail));

    mcheck(ok && same, ok ? "results differ between the ranks of the group" : detail,
           "%-14s %-5s %-5s N=%d block=%-4zu %s %-10s %s: max|err| %.3g (%s)%s", comm_kind_name(kind),
           TT<T>::name(), comm_group_name(g), N, block, kind == COMM_ALL_GATHER ? "   " : (op == COMM_AVG ? "avg" : "sum"),
           mode_name(mode), in_place ? "in-place" : "out-of-place", max_err, how,
           kind == COMM_ALL_REDUCE ? ", identical on all ranks" : "");
    free(in);
    free(got);
    device_free(alloc1);
    device_free(alloc2);
}

// several non-blocking collectives in flight at once, completed in reverse order
template <typename T>
static void test_overlapped(CommGroup g) {
    const uint64_t tid = ++g_test_id;
    const int N = C.group_size[g], me = C.group_rank[g];
    int members[64];
    group_members(g, members);
    const size_t b = 257;
    T* h_ar = (T*)mallocCheck(b * sizeof(T));
    T* h_rs = (T*)mallocCheck(N * b * sizeof(T));
    T* h_ag = (T*)mallocCheck(b * sizeof(T));
    for (size_t i = 0; i < b; i++) h_ar[i] = TT<T>::to((float)(C.world_rank + 1));  // small integers: exact sums
    for (size_t i = 0; i < N * b; i++) h_rs[i] = TT<T>::to((float)(i % 7));
    for (size_t i = 0; i < b; i++) h_ag[i] = TT<T>::to(rand_val(tid, C.world_rank, i));
    T* ar = dev_upload(h_ar, b);
    T* rs_in = dev_upload(h_rs, N * b);
    T* rs_out = (T*)device_malloc(b * sizeof(T), MEM_WORKSPACE);
    T* ag_in = dev_upload(h_ag, b);
    T* ag_out = (T*)device_malloc(N * b * sizeof(T), MEM_WORKSPACE);
    CommHandle h1 = comm_all_reduce_start(&C, g, ar, ar, b, COMM_SUM, (cudaStream_t)0);
    CommHandle h2 = comm_reduce_scatter_start(&C, g, rs_in, rs_out, b, COMM_SUM, (cudaStream_t)0);
    CommHandle h3 = comm_all_gather_start(&C, g, ag_in, ag_out, b, (cudaStream_t)0);
    comm_wait(&C, &h3);
    comm_wait(&C, &h2);
    comm_wait(&C, &h1);
    comm_wait(&C, &h1);  // a second wait is a no-op
    device_synchronize();
    T* got = (T*)mallocCheck(N * b * sizeof(T));
    char detail[200] = "";
    int ok = 1;
    double want_ar = 0.0;
    for (int j = 0; j < N; j++) want_ar += members[j] + 1;
    copy_to_host(got, ar, b * sizeof(T));
    for (size_t i = 0; i < b && ok; i++)
        if (TT<T>::from(got[i]) != (float)want_ar) { ok = 0; snprintf(detail, sizeof(detail), "all_reduce [%zu] %g != %g", i, TT<T>::from(got[i]), want_ar); }
    copy_to_host(got, rs_out, b * sizeof(T));
    for (size_t i = 0; i < b && ok; i++) {
        float w = (float)(N * ((me * b + i) % 7));
        if (TT<T>::from(got[i]) != w) { ok = 0; snprintf(detail, sizeof(detail), "reduce_scatter [%zu] %g != %g", i, TT<T>::from(got[i]), w); }
    }
    copy_to_host(got, ag_out, N * b * sizeof(T));
    for (size_t i = 0; i < N * b && ok; i++) {
        float w = TT<T>::from(TT<T>::to(rand_val(tid, members[i / b], i % b)));
        if (TT<T>::from(got[i]) != w) { ok = 0; snprintf(detail, sizeof(detail), "all_gather [%zu] %g != %g", i, TT<T>::from(got[i]), w); }
    }
    mcheck(ok, detail, "three non-blocking collectives in flight (%s, %s, N=%d), waited in reverse order", TT<T>::name(),
           comm_group_name(g), N);
    free(h_ar); free(h_rs); free(h_ag); free(got);
    device_free(ar); device_free(rs_in); device_free(rs_out); device_free(ag_in); device_free(ag_out);
}

template <typename T>
static void test_broadcast(CommGroup g, size_t n) {
    const int N = C.group_size[g];
    int members[64];
    group_members(g, members);
    for (int root = 0; root < N; root++) {
        const uint64_t tid = ++g_test_id;
        T* h = (T*)mallocCheck(n * sizeof(T));
        for (size_t i = 0; i < n; i++) h[i] = TT<T>::to(rand_val(tid, C.world_rank, i));
        T* d = dev_upload(h, n);
        const long long ops_before = nccl_ops(COMM_BROADCAST);
        comm_broadcast(&C, g, d, n, root, (cudaStream_t)0);
        device_synchronize();
        copy_to_host(h, d, n * sizeof(T));
        char detail[160] = "";
        int ok = nccl_ran(COMM_BROADCAST, ops_before, N, 1, detail, sizeof(detail));
        for (size_t i = 0; i < n && ok; i++) {
            float w = TT<T>::from(TT<T>::to(rand_val(tid, members[root], i)));
            if (TT<T>::from(h[i]) != w) { ok = 0; snprintf(detail, sizeof(detail), "[%zu] %g != %g", i, TT<T>::from(h[i]), w); }
        }
        mcheck(ok, detail, "broadcast      %-5s %-5s N=%d n=%zu root=%d: every rank holds the root's data", TT<T>::name(),
               comm_group_name(g), N, n, root);
        free(h);
        device_free(d);
    }
}

static int close_rel(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(1.0, fabs(b)); }

// all_to_all against its definition: rank r's send block j is rand_val(tid, r, j*block + i), so this
// rank knows what every member sent it; recv block i must be member i's block `me`, bit for bit (nothing
// is reduced), in a recv buffer poisoned with NaNs (an own block left uncopied shows). The ledger grows
// by one call of N*block*elem payload bytes and (N-1)*block*elem sent bytes (every block but the own
// one leaves the rank), written out from the definition. Over the emulated NCCL it ran as N-1 sends and
// N-1 receives (a group of one: none, a local copy).
template <typename T>
static void test_all_to_all(CommGroup g, size_t block) {
    const uint64_t tid = ++g_test_id;
    const int N = C.group_size[g], me = C.group_rank[g];
    int members[64];
    group_members(g, members);
    const size_t n = (size_t)N * block;
    if (n == 0) fatal("test_all_to_all: empty buffers (group of %d, block %zu)", N, block);
    T* h = (T*)mallocCheck(n * sizeof(T));
    for (size_t i = 0; i < n; i++) h[i] = TT<T>::to(rand_val(tid, C.world_rank, i));
    T* send = dev_upload(h, n);
    T* recv = (T*)device_malloc(n * sizeof(T), MEM_WORKSPACE);
    dev_poison(recv, n * sizeof(T));
    const long long sends_before = nccl_ops(COMM_SEND), recvs_before = nccl_ops(COMM_RECV);
    const long long calls_before = ledger_calls(&C, COMM_ALL_TO_ALL, g);
    const double payload_before = ledger_payload_bytes(&C, COMM_ALL_TO_ALL, g);
    const double sent_before = ledger_sent_bytes(&C, COMM_ALL_TO_ALL, g);
    comm_all_to_all(&C, g, send, recv, block, (cudaStream_t)0);
    device_synchronize();
    copy_to_host(h, recv, n * sizeof(T));
    char detail[200] = "";
    int ok = nccl_ran(COMM_SEND, sends_before, N, N - 1, detail, sizeof(detail)) &&
             nccl_ran(COMM_RECV, recvs_before, N, N - 1, detail, sizeof(detail));
    for (size_t i = 0; i < n && ok; i++) {
        size_t from = i / block, k = i % block;  // block `from` of recv: member `from`'s block `me`
        float w = TT<T>::from(TT<T>::to(rand_val(tid, members[from], (size_t)me * block + k))), o = TT<T>::from(h[i]);
        if (memcmp(&w, &o, sizeof(float)) != 0) {
            ok = 0;
            snprintf(detail, sizeof(detail), "[%zu] got %.9g, expected %.9g (element %zu of the block from member %zu)", i, o,
                     w, k, from);
        }
    }
    const double S = (double)N * block * sizeof(T), want_sent = (double)(N - 1) * block * sizeof(T);
    const long long dc = ledger_calls(&C, COMM_ALL_TO_ALL, g) - calls_before;
    const double dp = ledger_payload_bytes(&C, COMM_ALL_TO_ALL, g) - payload_before;
    const double ds = ledger_sent_bytes(&C, COMM_ALL_TO_ALL, g) - sent_before;
    if (ok && (dc != 1 || !close_rel(dp, S) || !close_rel(ds, want_sent))) {
        ok = 0;
        snprintf(detail, sizeof(detail), "ledger: +%lld calls, +%.0f payload, +%.1f sent bytes; expected +1, +%.0f, +%.1f",
                 dc, dp, ds, S, want_sent);
    }
    mcheck(ok, detail, "all_to_all     %-5s %-5s N=%d block=%-4zu: block i of recv = member i's block (my rank), exact; "
           "ledger +%.0f payload, +%.0f sent ((N-1)/N of it)", TT<T>::name(), comm_group_name(g), N, block, S, want_sent);
    free(h);
    device_free(send);
    device_free(recv);
}

// all_to_all_v against its definition: member j of the group sends member i a_count(tid, j, i) elements (0 to 3 times
// `unit`, zero for some pairs, the own block included), rand_val(tid, world rank of j, offset + k) where offset is
// the block's place in j's send buffer, so every rank knows what to expect from every member. The blocks lie in
// the send buffer in reverse member order and in the receive buffer in member order (offsets are the caller's).
// The ledger grows by one all_to_all call, the whole send buffer as payload, and sent = every block but the own.
// started 1: the non-blocking form (comm_all_to_all_v_start, then comm_wait: DualPipeV's overlapped pairs), with
// the receive buffer read only after the wait.
static size_t a2av_count(uint64_t tid, int from, int to, size_t unit) { return (size_t)((mix64(tid * 131 + from * 17 + to) >> 7) % 4) * unit; }
template <typename T>
static void test_all_to_all_v(CommGroup g, size_t unit, int started = 0) {
    const uint64_t tid = ++g_test_id;
    const int N = C.group_size[g], me = C.group_rank[g];
    int members[64];
    group_members(g, members);
    size_t scount[64], soff[64], rcount[64], roff[64], ns = 0, nr = 0, away = 0;
    for (int j = N - 1; j >= 0; j--) { scount[j] = a2av_count(tid, me, j, unit); soff[j] = ns; ns += scount[j]; if (j != me) away += scount[j]; }
    for (int i = 0; i < N; i++) { rcount[i] = a2av_count(tid, i, me, unit); roff[i] = nr; nr += rcount[i]; }
    T* h = (T*)mallocCheck((ns + nr + 1) * sizeof(T));
    for (size_t k = 0; k < ns; k++) h[k] = TT<T>::to(rand_val(tid, C.world_rank, k));
    T* send = dev_upload(h, ns + 1);
    T* recv = (T*)device_malloc((nr + 1) * sizeof(T), MEM_WORKSPACE);
    dev_poison(recv, (nr + 1) * sizeof(T));
    const long long calls_before = ledger_calls(&C, COMM_ALL_TO_ALL, g);
    const double payload_before = ledger_payload_bytes(&C, COMM_ALL_TO_ALL, g), sent_before = ledger_sent_bytes(&C, COMM_ALL_TO_ALL, g);
    if (started) {
        CommHandle hd = comm_all_to_all_v_start(&C, g, send, scount, soff, recv, rcount, roff, (cudaStream_t)0);
        comm_wait(&C, &hd);
    } else {
        comm_all_to_all_v(&C, g, send, scount, soff, recv, rcount, roff, (cudaStream_t)0);
    }
    device_synchronize();
    copy_to_host(h, recv, nr * sizeof(T));
    char detail[200] = "";
    int ok = 1;
    for (int i = 0; i < N && ok; i++) {
        // member i's send offset of its block for me: its blocks for members N-1 .. me+1 come first
        size_t at = 0;
        for (int j = N - 1; j > me; j--) at += a2av_count(tid, i, j, unit);
        for (size_t k = 0; k < rcount[i] && ok; k++) {
            float w = TT<T>::from(TT<T>::to(rand_val(tid, members[i], at + k))), o = TT<T>::from(h[roff[i] + k]);
            if (memcmp(&w, &o, sizeof(float)) != 0) {
                ok = 0;
                snprintf(detail, sizeof(detail), "element %zu from member %d: got %.9g, expected %.9g", k, i, o, w);
            }
        }
    }
    const long long dc = ledger_calls(&C, COMM_ALL_TO_ALL, g) - calls_before;
    const double dpay = ledger_payload_bytes(&C, COMM_ALL_TO_ALL, g) - payload_before, ds = ledger_sent_bytes(&C, COMM_ALL_TO_ALL, g) - sent_before;
    const double want_pay = (double)ns * sizeof(T), want_sent = (double)away * sizeof(T);
    if (ok && (dc != 1 || !close_rel(dpay, want_pay) || !close_rel(ds, want_sent))) {
        ok = 0;
        snprintf(detail, sizeof(detail), "ledger: +%lld calls, +%.0f payload, +%.1f sent bytes; expected +1, +%.0f, +%.0f", dc, dpay, ds,
                 want_pay, want_sent);
    }
    mcheck(ok, detail, "all_to_all_v%s %-5s %-5s N=%d unit=%-3zu: %zu elements out, %zu in (uneven, some blocks empty), exact; "
           "ledger +%.0f payload, +%.0f sent (the blocks that left)", started ? " (started, waited)" : "", TT<T>::name(),
           comm_group_name(g), N, unit, ns, nr, want_pay, want_sent);
    free(h);
    device_free(send);
    device_free(recv);
}

// send/recv between group ranks 0 and 1 (and back), and a sendrecv ring over the whole group
template <typename T>
static void test_p2p(CommGroup g, size_t n) {
    const int N = C.group_size[g], me = C.group_rank[g];
    int members[64];
    group_members(g, members);
    const uint64_t tid = ++g_test_id;
    T* h = (T*)mallocCheck(n * sizeof(T));
    for (size_t i = 0; i < n; i++) h[i] = TT<T>::to(rand_val(tid, C.world_rank, i));
    T* mine = dev_upload(h, n);
    T* got = (T*)device_malloc(n * sizeof(T), MEM_WORKSPACE);
    dev_poison(got, n * sizeof(T));
    int ok = 1;
    char detail[160] = "";
    if (N >= 2) {
        const long long sends_before = nccl_ops(COMM_SEND), recvs_before = nccl_ops(COMM_RECV);
        if (me == 0) { comm_send(&C, g, mine, n, 1, (cudaStream_t)0); comm_recv(&C, g, got, n, 1, (cudaStream_t)0); }
        if (me == 1) { comm_recv(&C, g, got, n, 0, (cudaStream_t)0); comm_send(&C, g, mine, n, 0, (cudaStream_t)0); }
        device_synchronize();
        if (me <= 1) {
            ok = nccl_ran(COMM_SEND, sends_before, N, 1, detail, sizeof(detail)) &&
                 nccl_ran(COMM_RECV, recvs_before, N, 1, detail, sizeof(detail));
            copy_to_host(h, got, n * sizeof(T));
            int peer = members[1 - me];
            for (size_t i = 0; i < n && ok; i++) {
                float w = TT<T>::from(TT<T>::to(rand_val(tid, peer, i)));
                if (TT<T>::from(h[i]) != w) { ok = 0; snprintf(detail, sizeof(detail), "send/recv [%zu] %g != %g", i, TT<T>::from(h[i]), w); }
            }
        }
        mcheck(ok, detail, "send/recv      %-5s %-5s N=%d n=%zu: group ranks 0 -> 1, then 1 -> 0", TT<T>::name(), comm_group_name(g), N, n);
    }
    // ring: send to the next rank, receive from the previous one (N = 1: to itself, a copy)
    dev_poison(got, n * sizeof(T));
    int next = (me + 1) % N, prev = (me + N - 1) % N;
    const long long sends_before = nccl_ops(COMM_SEND), recvs_before = nccl_ops(COMM_RECV);
    comm_sendrecv(&C, g, mine, n, next, got, n, prev, (cudaStream_t)0);
    device_synchronize();
    copy_to_host(h, got, n * sizeof(T));
    ok = nccl_ran(COMM_SEND, sends_before, N, 1, detail, sizeof(detail)) &&
         nccl_ran(COMM_RECV, recvs_before, N, 1, detail, sizeof(detail));
    for (size_t i = 0; i < n && ok; i++) {
        float w = TT<T>::from(TT<T>::to(rand_val(tid, members[prev], i)));
        if (TT<T>::from(h[i]) != w) { ok = 0; snprintf(detail, sizeof(detail), "sendrecv [%zu] %g != %g", i, TT<T>::from(h[i]), w); }
    }
    mcheck(ok, detail, "sendrecv ring  %-5s %-5s N=%d n=%zu: each rank gets its predecessor's data", TT<T>::name(), comm_group_name(g), N, n);
    free(h);
    device_free(mine);
    device_free(got);
}

// ----------------------------------------------------------------------------

// The mesh, from what the ranks report about themselves (gathered over the world), not from the
// formula comm_init uses: the layout is the one asked for, the coordinates cover the dp x pp x cp x tp grid
// once, tp is innermost (consecutive world ranks differ in tp first, then cp, pp), and each group is
// exactly the ranks that share the other coordinates, in the order of its own coordinates. Then the mesh's
// arithmetic about any rank (llm/comm/mesh.h: mesh_coord, mesh_group_members, which the straggler detector,
// the watchdog's lines and the trace's labels use for the other ranks) against what each rank reported.
static int g_want_dp, g_want_tp, g_want_pp, g_want_cp = 1, g_want_ep = 1;
static void test_mesh(void) {
    const int W = C.world_size;
    int want_dp = g_want_dp ? g_want_dp : W / (g_want_tp * g_want_pp * g_want_cp);
    mcheck(C.mesh.ep.size == g_want_ep && C.mesh.ep.rank == C.mesh.dp.rank % g_want_ep && C.mesh.egrad.size == want_dp * g_want_cp / g_want_ep,
           NULL, "mesh: expert parallelism ep %d folded into dp %d: ep rank = dp rank %% ep, the experts' gradient group dp x cp / ep = %d",
           g_want_ep, want_dp, want_dp * g_want_cp / g_want_ep);
    mcheck(C.mesh.dp.size == want_dp && C.mesh.tp.size == g_want_tp && C.mesh.pp.size == g_want_pp && C.mesh.cp.size == g_want_cp, NULL,
           "mesh: the layout asked for: dp %d (%s) tp %d pp %d cp %d", want_dp, g_want_dp ? "--dp" : "world / (tp*pp*cp)",
           g_want_tp, g_want_pp, g_want_cp);
    int r = C.world_rank;
    enum { D = 0, P = 1, Q = 2, T = 3 };  // the coordinates: dp, pp, cp, tp
    int coords[4] = {C.mesh.dp.rank, C.mesh.pp.rank, C.mesh.cp.rank, C.mesh.tp.rank}, size[4] = {C.mesh.dp.size, C.mesh.pp.size, C.mesh.cp.size, C.mesh.tp.size};
    int* all = (int*)mallocCheck(4 * W * sizeof(int));
    mpiCheck(MPI_Allgather(coords, 4, MPI_INT, all, 4, MPI_INT, MPI_COMM_WORLD));
    int ok = 1;
    char detail[320];
    for (int a = 0; a < W; a++) {  // a bijection onto the grid, counted with tp innermost, then cp, pp, dp
        int rest = a;
        for (int k = T; k >= D; k--) {
            if (all[4 * a + k] != rest % size[k]) ok = 0;
            rest /= size[k];
        }
        if (rest != 0) ok = 0;
    }
    snprintf(detail, sizeof(detail), "world %d -> dp %d pp %d cp %d tp %d", r, C.mesh.dp.rank, C.mesh.pp.rank, C.mesh.cp.rank, C.mesh.tp.rank);
    mcheck(ok, detail, "mesh: the ranks' coordinates cover the dp x pp x cp x tp grid once, tp innermost, then cp, pp, dp");
    // the members of group g that world rank me belongs to, from the gathered coordinates: the world ranks that
    // share its coordinates outside the group's own, ordered by the group's own (dp: the gradient group over
    // dp x cp, ordered dp-major; world: all, in world order; embed: the first and the last pp rank sharing its
    // other coordinates; a middle pp rank alone); returns how many, and me's rank among them in *me_rank
    // expert parallelism folds into dp (dp_rank = edp_rank * ep + ep_rank): ep varies the dp coordinate within its
    // block of ep consecutive ones, edp across the blocks at the same offset, and cp (the experts' gradient group)
    const int ep = g_want_ep;
    auto expected = [&](int g, int me, int* members, int* me_rank) {
        const int* mine = all + 4 * me;
        int vary[4] = {g == GROUP_DP || g == GROUP_EP || g == GROUP_EDP, g == GROUP_PP || g == GROUP_EMBED,
                       g == GROUP_DP || g == GROUP_CP || g == GROUP_EDP, g == GROUP_TP};
        auto key = [&](const int* x) {
            return g == GROUP_DP ? x[D] * size[Q] + x[Q] : g == GROUP_TP ? x[T] : g == GROUP_CP ? x[Q]
                 : g == GROUP_EP ? x[D] % ep : g == GROUP_EDP ? (x[D] / ep) * size[Q] + x[Q] : x[P];
        };
        int N = 0, end = mine[P] == 0 || mine[P] == size[P] - 1;
        *me_rank = g == GROUP_WORLD ? me : key(mine);
        for (int c = 0; g != GROUP_WORLD && c < W; c++) {
            for (int a = 0; a < W; a++) {
                int same = 1;
                for (int k = 0; k < 4; k++) if (!vary[k] && all[4 * a + k] != mine[k]) same = 0;
                if (g == GROUP_EMBED && !(end ? (c == 0 || c == size[P] - 1) : a == me)) same = 0;
                if (g == GROUP_EP && all[4 * a + D] / ep != mine[D] / ep) same = 0;
                if (g == GROUP_EDP && all[4 * a + D] % ep != mine[D] % ep) same = 0;
                if (same && key(all + 4 * a) == c) members[N++] = a;
            }
        }
        if (g == GROUP_WORLD) for (int a = 0; a < W; a++) members[N++] = a;
        if (g == GROUP_EMBED) for (int j = 0; j < N; j++) if (members[j] == me) *me_rank = j;
        return N;
    };
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        int members[64], got[64], want_rank = 0;
        int N = expected(g, r, members, &want_rank);
        if (C.mpi[g] != MPI_COMM_NULL) mpiCheck(MPI_Allgather(&r, 1, MPI_INT, got, 1, MPI_INT, C.mpi[g]));
        else got[0] = r;
        int okg = C.group_size[g] == N && comm_group_size(&C, (CommGroup)g) == N && C.group_rank[g] == want_rank &&
                  comm_group_rank(&C, (CommGroup)g) == want_rank;
        char list[200] = "";
        for (int j = 0; j < N; j++) {
            if (got[j] != members[j]) okg = 0;
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%d", j ? "," : "", got[j]);
        }
        snprintf(detail, sizeof(detail), "%s group members (world ranks) %s, my group rank %d", comm_group_name(g), list, C.group_rank[g]);
        mcheck(okg, detail, "mesh: %s group = the ranks sharing my other coordinates, in order (size %d)", comm_group_name(g), N);
        if (r == 0) {
            printf("     %s group of world rank 0: {%s}\n", comm_group_name(g), list);
            fflush(stdout);
        }
    }
    // the mesh's arithmetic about every rank, against what it reported: its coordinates, and the members of each of
    // its groups in order (rank 0's view of all of them: the watchdog and the straggler detector reason so)
    int okc = 1, okm = 1;
    char why[200] = "";
    for (int a = 0; a < W; a++) {
        for (int k = 0; k < 4; k++) {
            if (mesh_coord(&C.mesh, a, k) != all[4 * a + k]) {
                okc = 0;
                snprintf(why, sizeof(why), "mesh_coord(rank %d, %s) = %d, it reported %d", a, MESH_AXES[k].name, mesh_coord(&C.mesh, a, k), all[4 * a + k]);
            }
        }
        if (mesh_world_rank(&C.mesh, all + 4 * a) != a) okc = 0;
        for (int g = 0; g < COMM_NUM_GROUPS; g++) {
            int want[64], gotm[64], want_rank = 0;
            int n = expected(g, a, want, &want_rank), m = mesh_group_members(&C.mesh, g, a, gotm);
            int same = n == m;
            for (int j = 0; same && j < n; j++) same = want[j] == gotm[j];
            if (!same) { okm = 0; snprintf(why, sizeof(why), "mesh_group_members(%s, rank %d) differs (%d members, expected %d)", comm_group_name(g), a, m, n); }
        }
    }
    mcheck(okc, why, "mesh: mesh_coord and mesh_world_rank of every world rank = the coordinates it reported");
    mcheck(okm, why, "mesh: mesh_group_members of every group of every world rank = the ranks sharing its other coordinates, in order");
    // the whole mesh, for the reader: world rank -> (dp, pp, cp, tp)
    if (r == 0) {
        printf("     world rank -> (dp, pp, cp, tp):");
        for (int i = 0; i < W && i < 16; i++) printf(" %d:(%d,%d,%d,%d)", i, all[4 * i], all[4 * i + 1], all[4 * i + 2], all[4 * i + 3]);
        printf("%s\n", W > 16 ? " ..." : "");
        fflush(stdout);
    }
    free(all);
    ok = C.local_rank >= 0 && C.local_rank < C.local_size && C.local_size <= W && (C.local_size != W || C.local_rank == r);
    snprintf(detail, sizeof(detail), "local rank %d of %d", C.local_rank, C.local_size);
    mcheck(ok, detail, "mesh: node-local rank in range (one node: local rank = world rank)");
}

static void test_barrier(void) {
    if (C.world_size < 2) return;
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        if (C.group_size[g] < 2 || (g == GROUP_EMBED && C.mesh.pp.size > 2)) continue;
        // group rank 0 arrives 200 ms late; the others must wait for it
        mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
        double t0 = wall_ms();
        if (C.group_rank[g] == 0) usleep(200000);
        comm_barrier(&C, (CommGroup)g);
        double waited = wall_ms() - t0;
        char detail[100];
        snprintf(detail, sizeof(detail), "left the barrier after %.0f ms", waited);
        mcheck(waited >= 150.0, detail, "barrier %-5s: every rank waits for the late group rank 0 (>= 150 ms)", comm_group_name(g));
    }
}

// comm_take_wait_ms: the time the computation waited in comm_wait (see llm/comm/comm.h)
static void test_wait(void) {
    if (C.world_size < 2) return;
    const size_t n = 1024;
    const double late_ms = 200.0;
    float* buf = (float*)device_malloc(n * sizeof(float), MEM_WORKSPACE);
    device_memset_zero(buf, n * sizeof(float), 0);
    device_synchronize();
    comm_take_wait_ms(&C);  // drop what the tests before measured
    const int late = C.world_rank == C.world_size - 1;
    char detail[200];

    // non-blocking: the last rank joins late; every other rank waits for it
    mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
    if (late) usleep((useconds_t)(late_ms * 1000));
    CommHandle h = comm_all_reduce_start(&C, GROUP_WORLD, buf, buf, n, COMM_SUM, (cudaStream_t)0);
    comm_wait(&C, &h);
    device_synchronize();
    double w = comm_take_wait_ms(&C), again = comm_take_wait_ms(&C);
    snprintf(detail, sizeof(detail), "%s rank measured %.1f ms, then %.1f ms", late ? "the late" : "a waiting", w, again);
    mcheck(late ? (w < late_ms / 2) : (w >= 0.9 * late_ms), detail, "wait: world rank %d joins a non-blocking all-reduce "
           "%.0f ms late: the others measure >= %.0f ms, it < %.0f ms", C.world_size - 1, late_ms, 0.9 * late_ms, late_ms / 2);
    mcheck(again == 0.0, detail, "wait: comm_take_wait_ms starts again from 0 after it was read");

    // blocking: the same delay, but a blocking collective is not a wait
    mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
    if (late) usleep((useconds_t)(late_ms * 1000));
    comm_all_reduce(&C, GROUP_WORLD, buf, buf, n, COMM_SUM, (cudaStream_t)0);
    device_synchronize();
    w = comm_take_wait_ms(&C);
    snprintf(detail, sizeof(detail), "measured %.1f ms", w);
    mcheck(w == 0.0, detail, "wait: a blocking all-reduce joined %.0f ms late counts no wait", late_ms);

    // many waits (more than the COMM_NUM_EVENTS completion events), and a handle waited after its
    // completion event was re-recorded: over NCCL it is ordered but not timed
    long long untimed = C.waits_untimed;
    for (int i = 0; i < 3 * COMM_NUM_EVENTS; i++) {
        CommHandle hi = comm_all_reduce_start(&C, GROUP_WORLD, buf, buf, n, COMM_SUM, (cudaStream_t)0);
        comm_wait(&C, &hi);
    }
    CommHandle old = comm_all_reduce_start(&C, GROUP_WORLD, buf, buf, n, COMM_SUM, (cudaStream_t)0);
    for (int i = 0; i < COMM_NUM_EVENTS; i++) comm_all_reduce(&C, GROUP_WORLD, buf, buf, n, COMM_SUM, (cudaStream_t)0);
    comm_wait(&C, &old);
    device_synchronize();
    w = comm_take_wait_ms(&C);
    long long want_untimed = COMM_NCCL ? 1 : 0;
    snprintf(detail, sizeof(detail), "measured %.1f ms, %lld untimed waits (expected %lld)", w, C.waits_untimed - untimed, want_untimed);
    mcheck(w >= 0.0 && w < 1e5 && C.waits_untimed - untimed == want_untimed, detail, "wait: %d waits in a row, and one "
           "after %d later collectives (%s): %lld untimed", 3 * COMM_NUM_EVENTS, COMM_NUM_EVENTS,
           COMM_NCCL ? "its completion event reused" : "MPI: timed on the host", want_untimed);
    device_free(buf);
}

static void test_ledger(void) {
    // one of each kind on every group, on float buffers of known sizes
    ledger_reset(&C);
    mcheck(ledger_calls(&C, COMM_ALL_KINDS, GROUP_ALL) == 0 && ledger_sent_bytes(&C, COMM_ALL_KINDS, GROUP_ALL) == 0.0,
           NULL, "ledger: empty after ledger_reset");
    const size_t n = 1000, block = 3;
    float* a = (float*)device_malloc(4 * 64 * n * sizeof(float), MEM_WORKSPACE);
    float* b = (float*)device_malloc(4 * 64 * n * sizeof(float), MEM_WORKSPACE);
    device_memset_zero(a, 4 * 64 * n * sizeof(float), 0);
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        CommGroup gg = (CommGroup)g;
        int N = C.group_size[g];
        comm_all_reduce(&C, gg, a, b, n, COMM_SUM, (cudaStream_t)0);
        comm_all_reduce(&C, gg, a, a, n, COMM_AVG, (cudaStream_t)0);
        CommHandle h = comm_reduce_scatter_start(&C, gg, a, b, block, COMM_SUM, (cudaStream_t)0);
        comm_wait(&C, &h);
        comm_all_gather(&C, gg, a, b, block, (cudaStream_t)0);
        comm_broadcast(&C, gg, a, n, N - 1, (cudaStream_t)0);
        comm_all_to_all(&C, gg, a, b, block, (cudaStream_t)0);
        comm_sendrecv(&C, gg, a, n, (C.group_rank[g] + 1) % N, b, n, (C.group_rank[g] + N - 1) % N, (cudaStream_t)0);
    }
    int ok = 1;
    char detail[300] = "";
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        CommGroup gg = (CommGroup)g;
        double N = C.group_size[g], f = (N - 1) / N, S = n * 4.0, B = block * 4.0;
        int root = C.group_rank[g] == C.group_size[g] - 1;
        //                      kind              calls payload     sent (the formulas, written out)
        struct { CommKind k; long long calls; double payload, sent; } want[7] = {
            {COMM_ALL_REDUCE, 2, 2 * S, 2 * 2 * f * S},
            {COMM_REDUCE_SCATTER, 1, N * B, f * N * B},
            {COMM_ALL_GATHER, 1, N * B, f * N * B},
            {COMM_BROADCAST, 1, S, (root && N > 1) ? S : 0.0},
            {COMM_SEND, 1, S, N > 1 ? S : 0.0},
            {COMM_RECV, 1, S, 0.0},
            {COMM_ALL_TO_ALL, 1, N * B, f * N * B},
        };
        for (int k = 0; k < 7; k++) {
            long long c = ledger_calls(&C, want[k].k, gg);
            double p = ledger_payload_bytes(&C, want[k].k, gg), s = ledger_sent_bytes(&C, want[k].k, gg);
            if (c != want[k].calls || !close_rel(p, want[k].payload) || !close_rel(s, want[k].sent)) {
                if (ok) snprintf(detail, sizeof(detail), "%s %s: calls %lld payload %.0f sent %.1f, expected %lld %.0f %.1f",
                                 comm_kind_name(want[k].k), comm_group_name(g), c, p, s, want[k].calls, want[k].payload, want[k].sent);
                ok = 0;
            }
        }
    }
    mcheck(ok, detail, "ledger: calls, payload and ring bytes of every kind and group match the formulas");
    long long total_calls = ledger_calls(&C, COMM_ALL_KINDS, GROUP_ALL);
    mcheck(total_calls == COMM_NUM_GROUPS * 8, NULL, "ledger: %lld calls in all (%d groups x 8)", total_calls, COMM_NUM_GROUPS);

    // the JSON report holds the same numbers
    char js[8192];
    int len = ledger_json(&C, js, sizeof(js));
    char want_total[64];
    snprintf(want_total, sizeof(want_total), "\"total_calls\":%lld", total_calls);
    ok = len > 0 && len < (int)sizeof(js) && (int)strlen(js) == len && js[0] == '{' && js[len - 1] == '}' &&
         strstr(js, want_total) && strstr(js, "\"kind\":\"reduce_scatter\",\"group\":\"dp\"") &&
         strstr(js, "\"kind\":\"all_to_all\",\"group\":\"dp\"");
    mcheck(ok, js, "ledger: ledger_json is one complete object (%d chars) with every row and the totals", len);
    char small[16];
    int len2 = ledger_json(&C, small, sizeof(small));
    mcheck(len2 == len && strlen(small) == sizeof(small) - 1, NULL, "ledger: ledger_json into a short buffer truncates and returns the full length");

    // DDP vs ZeRO-3 on the DP group: Psi float gradients/parameters, N ranks
    const int N = C.group_size[GROUP_DP];
    const size_t psi = 64 * 1000 * (size_t)N;  // a multiple of N (ZeRO pads to this)
    float* full = (float*)device_malloc(psi * sizeof(float), MEM_WORKSPACE);
    float* shard = (float*)device_malloc(psi / N * sizeof(float), MEM_WORKSPACE);
    device_memset_zero(full, psi * sizeof(float), 0);
    device_memset_zero(shard, psi / N * sizeof(float), 0);
    ledger_reset(&C);
    comm_all_reduce(&C, GROUP_DP, full, full, psi, COMM_AVG, (cudaStream_t)0);  // DDP: the gradients
    double ddp = ledger_sent_bytes(&C, COMM_ALL_KINDS, GROUP_DP);
    ledger_reset(&C);
    comm_all_gather(&C, GROUP_DP, shard, full, psi / N, (cudaStream_t)0);  // ZeRO-3 forward: parameters
    comm_all_gather(&C, GROUP_DP, shard, full, psi / N, (cudaStream_t)0);  // backward: parameters again
    comm_reduce_scatter(&C, GROUP_DP, full, shard, psi / N, COMM_AVG, (cudaStream_t)0);  // gradients
    double z3 = ledger_sent_bytes(&C, COMM_ALL_KINDS, GROUP_DP);
    double P = psi * 4.0;
    snprintf(detail, sizeof(detail), "DDP %.0f, ZeRO-3 %.0f bytes", ddp, z3);
    mcheck(close_rel(ddp, 2.0 * P * (N - 1) / N) && close_rel(z3, 3.0 * P * (N - 1) / N), detail,
           "ledger: DDP sends 2 Psi (N-1)/N = %.0f bytes, ZeRO-3 3 Psi (N-1)/N = %.0f (Psi = %.0f bytes, N = %d)", ddp, z3, P, N);
    if (N > 1) mcheck(close_rel(z3 / ddp, 1.5), NULL, "ledger: ZeRO-3 / DDP = %.4f (ZeRO paper sec. 7.2: 1.5)", z3 / ddp);
    ledger_reset(&C);
    device_free(a); device_free(b); device_free(full); device_free(shard);
}

// the embed group when pp > 2: an all-reduce of (world rank + 1) over it sums its members' (the first and
// the last pp rank of my dp and tp coordinates; a middle pp rank alone keeps its own)
static void test_embed_group(void) {
    if (C.mesh.pp.size <= 2) return;  // covered by test_all_collectives
    int members[64], N = C.group_size[GROUP_EMBED];
    group_members(GROUP_EMBED, members);
    float* d = (float*)device_malloc(sizeof(float), MEM_WORKSPACE);
    float x = (float)(C.world_rank + 1), want = 0.0f;
    for (int j = 0; j < N; j++) want += (float)(members[j] + 1);
    copy_to_device(d, &x, sizeof(float));
    comm_all_reduce(&C, GROUP_EMBED, d, d, 1, COMM_SUM, (cudaStream_t)0);
    device_synchronize();
    copy_to_host(&x, d, sizeof(float));
    device_free(d);
    int end = C.mesh.pp.rank == 0 || C.mesh.pp.rank == C.mesh.pp.size - 1;
    char detail[120];
    snprintf(detail, sizeof(detail), "pp rank %d: group of %d, sum %g, expected %g", C.mesh.pp.rank, N, x, want);
    mcheck(x == want && N == (end ? 2 : 1), detail, "embed group (pp %d): the first and the last stage sum, a middle stage alone", C.mesh.pp.size);
}

template <typename T>
static void test_all_collectives(void) {
    const size_t blocks[3] = {1, 3, 1000};
    for (int g = 0; g < COMM_NUM_GROUPS; g++) {
        CommGroup gg = (CommGroup)g;
        // the cases below run per group rank and root, and every check is a world collective: a group whose
        // size differs between ranks (the embed group with pp > 2: two end stages, the middle ones alone)
        // gets its own check (test_embed_group) instead
        if (g == GROUP_EMBED && C.mesh.pp.size > 2) continue;
        // the same test ids on every rank of the group, whatever the other groups' sizes made them so far
        // (a middle pipeline stage's embed group is a group of one: it runs fewer cases)
        g_test_id = (uint64_t)(++g_group_calls) << 32;
        for (int bi = 0; bi < 3; bi++) {
            for (int op = 0; op < 2; op++) {
                for (int inp = 0; inp < 2; inp++) {
                    test_collective<T>(COMM_ALL_REDUCE, MODE_BLOCKING, inp, gg, blocks[bi], (CommReduce)op);
                    test_collective<T>(COMM_REDUCE_SCATTER, MODE_BLOCKING, inp, gg, blocks[bi], (CommReduce)op);
                }
                // non-blocking: out of place with comm_wait, in place with comm_test polling
                test_collective<T>(COMM_ALL_REDUCE, MODE_START_WAIT, 0, gg, blocks[bi], (CommReduce)op);
                test_collective<T>(COMM_REDUCE_SCATTER, MODE_START_TEST, 1, gg, blocks[bi], (CommReduce)op);
            }
            test_collective<T>(COMM_ALL_GATHER, MODE_BLOCKING, 0, gg, blocks[bi], COMM_SUM);
            test_collective<T>(COMM_ALL_GATHER, MODE_BLOCKING, 1, gg, blocks[bi], COMM_SUM);
            test_collective<T>(COMM_ALL_GATHER, MODE_START_WAIT, 1, gg, blocks[bi], COMM_SUM);
            test_collective<T>(COMM_ALL_REDUCE, MODE_START_TEST, 1, gg, blocks[bi], COMM_AVG);
            test_collective<T>(COMM_ALL_GATHER, MODE_START_TEST, 0, gg, blocks[bi], COMM_SUM);
            test_collective<T>(COMM_REDUCE_SCATTER, MODE_START_WAIT, 0, gg, blocks[bi], COMM_SUM);
        }
        test_overlapped<T>(gg);
        test_broadcast<T>(gg, 1000);
        for (int bi = 0; bi < 3; bi++) test_all_to_all<T>(gg, blocks[bi]);
        for (int bi = 0; bi < 3; bi++) test_all_to_all_v<T>(gg, blocks[bi]);
        test_all_to_all_v<T>(gg, blocks[2], 1);
        test_p2p<T>(gg, 1000);
    }
    g_test_id = (uint64_t)(++g_group_calls) << 32;
}

// ----------------------------------------------------------------------------
// the other modes

static void die_mode(int die_rank, int use_signal) {
    if (die_rank < 0 || die_rank >= C.world_size) fatal("--die-rank %d: expected a rank in [0, %d)", die_rank, C.world_size);
    const size_t n = 1 << 18;
    float* buf = (float*)device_malloc(n * sizeof(float), MEM_WORKSPACE);
    device_memset_zero(buf, n * sizeof(float), 0);
    comm_all_reduce(&C, GROUP_WORLD, buf, buf, n, COMM_SUM, (cudaStream_t)0);  // everyone is up
    if (C.world_rank == die_rank) {
        usleep(300000);  // the others are inside the next all-reduce by now
        fprintf(stderr, "rank %d: leaving without MPI_Finalize (%s)\n", die_rank, use_signal ? "SIGKILL" : "exit(1)");
        fflush(stderr);
        if (use_signal) raise(SIGKILL);
        exit(1);
    }
    for (;;) comm_all_reduce(&C, GROUP_WORLD, buf, buf, n, COMM_SUM, (cudaStream_t)0);
}

static void bench_mode(void) {
    const size_t max_bytes = (size_t)64 << 20;
    float* buf = (float*)device_malloc(max_bytes, MEM_WORKSPACE);
    device_memset_zero(buf, max_bytes, 0);
    const int N = C.world_size;
    if (C.world_rank == 0) {
        printf("all_reduce bandwidth, %d processes, float sum in place (%s build)\n", N, LLM_BUILD_CUDA ? "NCCL" : "MPI");
        printf("  %8s %6s %10s %12s %12s %10s\n", "MB", "iters", "ms/call", "algbw GB/s", "busbw GB/s", "worst ms");
    }
    for (size_t mb = 1; mb <= 64; mb *= 2) {
        size_t bytes = mb << 20, n = bytes / 4;
        int iters = (int)(256 / mb);
        if (iters < 5) iters = 5;
        if (iters > 20) iters = 20;
        comm_all_reduce(&C, GROUP_WORLD, buf, buf, n, COMM_SUM, (cudaStream_t)0);  // warm up
        device_synchronize();
        // three rounds; the best (the machine may be shared), the slowest rank of each round
        double best = 1e30, worst = 0.0;
        for (int round = 0; round < 3; round++) {
            mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
            double t0 = wall_ms();
            for (int i = 0; i < iters; i++) comm_all_reduce(&C, GROUP_WORLD, buf, buf, n, COMM_SUM, (cudaStream_t)0);
            device_synchronize();
            double ms = (wall_ms() - t0) / iters, ms_max = 0.0;
            mpiCheck(MPI_Allreduce(&ms, &ms_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
            best = fmin(best, ms_max);
            worst = fmax(worst, ms_max);
        }
        double algbw = bytes / (best * 1e-3) / 1e9;
        if (C.world_rank == 0) printf("  %8zu %6d %10.3f %12.2f %12.2f %10.3f\n", mb, iters, best, algbw, algbw * 2.0 * (N - 1) / N, worst);
        fflush(stdout);
    }
    device_free(buf);
}

static const char* USAGE =
    "[--dp D] [--tp T] [--pp P] [--cp Q] [--ep E] [--seed S] [--die-rank R [--die-signal]] [--bench] [--host-ptr] [--a2a-overlap] [--a2a-hang]\n"
    "Tests llm/comm/comm.h under mpirun (test/test_comm.sh runs every layout): the mesh's groups, every\n"
    "collective against values computed from every rank's data, the byte ledger, the wait accounting.\n"
    "  --dp D --tp T --pp P  the layout (default: dp from the world size, tp 1, pp 1)\n"
    "  --ep E                expert-parallel groups of E dp ranks (folded into dp: E divides dp; default 1)\n"
    "  --cp Q                context-parallel ranks (default 1): the mesh dp x pp x cp x tp\n"
    "  --seed S              the data's seed (default 0: rank 0 picks one from the clock)\n"
    "  --die-rank R          rank R leaves without MPI_Finalize (exit 1, or SIGKILL with --die-signal)\n"
    "  --bench               all-reduce bandwidth, 1 MB to 64 MB, instead of the tests\n"
    "  --host-ptr            pass a host pointer to a collective (the emulated build refuses it)\n"
    "  --a2a-overlap         an all_to_all with recv == send (refused: it has no in-place form)\n"
    "  --a2a-hang            the last rank hangs before an all_to_all (the variable one); the others' watchdog (2 s) ends the job\n";

#if COMM_MPI
// the processes whose parent is this one and whose name (/proc/PID/stat's second field) is `name`
static int child_processes_named(const char* name) {
    int n = 0;
    DIR* d = opendir("/proc");
    if (d == NULL) fatal("test_comm: cannot open /proc: %s", strerror(errno));
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char path[300], comm[64] = "";
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        FILE* f = fopen(path, "r");
        if (f == NULL) continue;  // (ended meanwhile)
        int pid = 0, ppid = 0;
        char state = 0;
        if (fscanf(f, "%d (%63[^)]) %c %d", &pid, comm, &state, &ppid) == 4 && ppid == (int)getpid() && !strcmp(comm, name)) n++;
        fclose(f);
    }
    closedir(d);
    return n;
}
#endif

int main(int argc, char** argv) {
    usage_if_help(argc, argv, USAGE);
    int dp = 0, tp = 1, pp = 1, cp = 1, ep = 1, die_rank = -1, die_signal = 0, bench = 0, host_ptr = 0, a2a_overlap = 0, a2a_hang = 0;
    unsigned long long seed = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "--dp") && i + 1 < argc) dp = atoi(argv[++i]);
        else if (!strcmp(a, "--tp") && i + 1 < argc) tp = atoi(argv[++i]);
        else if (!strcmp(a, "--pp") && i + 1 < argc) pp = atoi(argv[++i]);
        else if (!strcmp(a, "--cp") && i + 1 < argc) cp = atoi(argv[++i]);
        else if (!strcmp(a, "--ep") && i + 1 < argc) ep = atoi(argv[++i]);
        else if (!strcmp(a, "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--die-rank") && i + 1 < argc) die_rank = atoi(argv[++i]);
        else if (!strcmp(a, "--die-signal")) die_signal = 1;
        else if (!strcmp(a, "--bench")) bench = 1;
        else if (!strcmp(a, "--host-ptr")) host_ptr = 1;
        else if (!strcmp(a, "--a2a-overlap")) a2a_overlap = 1;
        else if (!strcmp(a, "--a2a-hang")) a2a_hang = 1;
        else fatal("test_comm: unknown argument %s (expected --dp --tp --pp --cp --ep --seed --die-rank --die-signal --bench --host-ptr "
                   "--a2a-overlap --a2a-hang)", a);
    }
#if COMM_MPI
    int lone = !comm_launched();  // (read before MPI_Init, which may set the launcher's variables itself)
#endif
    comm_init(&C, &argc, &argv, dp, tp, pp, cp, ep);
    g_want_dp = dp; g_want_tp = tp; g_want_pp = pp; g_want_cp = cp; g_want_ep = ep; g_ep = ep;
    if (C.world_size > 64) fatal("test_comm: at most 64 processes (found %d)", C.world_size);

    if (die_rank >= 0) die_mode(die_rank, die_signal);
    if (bench) { bench_mode(); comm_free(&C); return 0; }
    if (host_ptr) {
        float x[4] = {0, 0, 0, 0};
        comm_all_reduce(&C, GROUP_WORLD, x, x, 4, COMM_SUM, (cudaStream_t)0);  // the emulated build refuses
        if (C.world_rank == 0) printf("host pointer accepted (%s build)\n", LLM_BUILD_EMU ? "emulated" : "CPU");
        comm_free(&C);
        return 0;
    }

    if (a2a_overlap) {
        const size_t block = 4, n = (size_t)C.world_size * block;
        float* d = (float*)device_malloc(n * sizeof(float), MEM_WORKSPACE);
        device_memset_zero(d, n * sizeof(float), 0);
        comm_all_to_all(&C, GROUP_WORLD, d, d, block, (cudaStream_t)0);  // refused on every rank
        device_synchronize();
        if (C.world_rank == 0) printf("an all_to_all with recv == send was accepted\n");
        device_free(d);
        comm_free(&C);
        return 0;
    }

    if (a2a_hang) {  // one all_to_all that completes, then one the last rank never joins
        const size_t block = 4, n = (size_t)C.world_size * block;
        float* send = (float*)device_malloc(n * sizeof(float), MEM_WORKSPACE);
        float* recv = (float*)device_malloc(n * sizeof(float), MEM_WORKSPACE);
        device_memset_zero(send, n * sizeof(float), 0);
        wd_set_timeout(&C, 2.0);
        comm_all_to_all(&C, GROUP_WORLD, send, recv, block, (cudaStream_t)0);
        device_synchronize();
        if (C.world_rank == C.world_size - 1) {
            fprintf(stderr, "rank %d: hangs before its second all_to_all\n", C.world_rank);
            sleep(60);  // mpirun ends it once another rank's watchdog has ended that rank
        }
        // the second: the variable all_to_all of expert parallelism (llm/comm/comm_all_to_all_v.h), numbered and
        // watched as an all_to_all of its group like the first
        size_t cnt[64], off[64];
        for (int j = 0; j < C.world_size; j++) { cnt[j] = block; off[j] = (size_t)j * block; }
        comm_all_to_all_v(&C, GROUP_WORLD, send, cnt, off, recv, cnt, off, (cudaStream_t)0);
        device_synchronize();
        printf("rank %d: the all_to_all the last rank never joined returned\n", C.world_rank);
        comm_free(&C);
        return 0;
    }

    // the base seed: rank 0 picks it, every rank uses it
    if (C.world_rank == 0 && seed == 0) seed = ((unsigned long long)time(NULL) << 20) ^ (unsigned long long)getpid();
    mpiCheck(MPI_Bcast(&seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD));
    g_seed = seed;
    if (C.world_rank == 0) {
        printf("test_comm: world %d = dp %d x pp %d x tp %d, %s build, floatX %s, collectives over %s, seed %llu, "
               "MPI_Init %.0f ms%s\n", C.world_size, C.mesh.dp.size, C.mesh.pp.size, C.mesh.tp.size, LLM_BUILD_CUDA ? "CUDA" : LLM_BUILD_EMU ? "emulated" : "CPU",
               PRECISION_MODE, comm_transport_name(), seed, C.init_ms, C.owns_mpi ? "" : " (MPI was up already)");
        fflush(stdout);
    }

#if COMM_MPI
    // a process no launcher started is an MPI singleton, started without Open MPI's daemon (llm/comm/comm_mesh.h,
    // comm_lone_process_start): otherwise MPI_Init forks an orted, which lives as long as this process
    if (lone && C.owns_mpi) {
        int orted = child_processes_named("orted");
        char detail[80];
        snprintf(detail, sizeof(detail), "%d orted child process%s", orted, orted == 1 ? "" : "es");
        mcheck(orted == 0, detail, "a lone process starts MPI without a daemon (no orted child; MPI_Init %.0f ms)", C.init_ms);
    }
#endif
    test_mesh();
    test_all_collectives<float>();
#if LLM_HAS_KERNELS && !defined(ENABLE_FP32) && !defined(ENABLE_FP16)
    test_all_collectives<floatX>();  // bf16 over the (emulated) NCCL
#endif
#if LLM_HAS_KERNELS
    test_all_collectives<__half>();  // fp16 over the (emulated) NCCL
#endif
#if COMM_MPI && !COMM_NCCL
    test_all_collectives<Bf16Bits>();  // 16-bit buffers over MPI: the user ops of llm/comm/comm.h
    test_all_collectives<Fp16Bits>();
#endif
    test_embed_group();
    test_barrier();
    test_wait();
    test_ledger();

    {   // an example table: one DDP-like gradient average on the DP group
        float* g = (float*)device_malloc(4096 * sizeof(float), MEM_WORKSPACE);
        device_memset_zero(g, 4096 * sizeof(float), 0);
        comm_all_reduce(&C, GROUP_DP, g, g, 4096, COMM_AVG, (cudaStream_t)0);
        device_free(g);
    }
    if (C.world_rank == 0) ledger_print(&C, stdout);
#if LLM_BUILD_EMU && COMM_NCCL
    long long ops = 0;
    for (int k = 0; k < COMM_NUM_KINDS; k++) ops += nccl_ops((CommKind)k);
    mcheck(C.world_size == 1 ? ops == 0 : ops > 0, NULL, "NCCL path: %lld collectives ran as emulated NCCL operations "
           "(dev/emu/nccl_emu.h; each checked against its comm.h call above)", ops);
#endif

    int failed = g_fail;
    if (C.world_rank == 0) printf("test_comm: %d passed, %d failed\n", g_pass, g_fail);
    fflush(stdout);
    comm_free(&C);
    return failed ? 1 : 0;
}
