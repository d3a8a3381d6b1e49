// test_nccl_emu.cu: tests of dev/emu/nccl_emu.h, the NCCL subset over MPI, called directly (not
// through llm/comm/comm.h). Run under mpirun with 2 or more processes, one emulated device each:
//
//   EMU_DEVICES=4 mpirun -np 3 build/emu/test_nccl_emu
//
// Checked: communicators from a unique id (blocking and non-blocking: ncclInProgress, the polling
// of ncclCommGetAsyncError, an operation refused before the poll), every operation in and out of
// place against values this rank computes from every rank's data, the arithmetic of bf16 sums (each
// partial rounded) and of ncclAvg (inputs pre-multiplied by 1/N rounded to the buffer's type),
// broadcast from every root, a send/recv ring inside a group (every rank sends first: the group
// must not deadlock), and the errors: invalid arguments (NULL or host or too-short buffers, a
// datatype, op, root or peer out of range, overlapping buffers, a bad config or rank), ranks that
// disagree on a count, a receive count that differs from the send, two ranks on one device, and the
// communicator's asynchronous error after a failed operation. Ends with "test_nccl_emu: N passed,
// M failed" (printed by rank 0); exit status 1 on any failure.
#include "../../llm/core/common.h"
#include "nccl_emu.h"
#include "../../llm/core/usage.h"
#include <stdarg.h>

static int g_rank = 0, g_size = 1, g_pass = 0, g_fail = 0;

// one check, evaluated on every rank (a collective over MPI_COMM_WORLD); rank 0 prints the line
__attribute__((format(printf, 2, 3)))
static void check(int ok, const char* fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (!ok) { printf("  rank %d failed: %s (last error: %s)\n", g_rank, msg, ncclGetLastError(NULL)); fflush(stdout); }
    int bad = !ok, nbad = 0;
    MPI_Allreduce(&bad, &nbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (nbad == 0) g_pass++; else g_fail++;
    if (g_rank == 0) { printf("%s %s\n", nbad == 0 ? "ok  " : "FAIL", msg); fflush(stdout); }
}

#define MUST(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { fprintf(stderr, "error: %s returned %s: %s (%s:%d)\n", \
                     #x, ncclGetErrorString(r_), ncclGetLastError(NULL), __FILE__, __LINE__); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

static ncclComm_t make_comm(int nonblocking, ncclResult_t* init_result) {
    ncclUniqueId id;
    if (g_rank == 0) MUST(ncclGetUniqueId(&id));
    MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t c = NULL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = nonblocking ? 0 : 1;
    *init_result = ncclCommInitRankConfig(&c, g_size, id, g_rank, &cfg);
    return c;
}

// device buffers of n elements from host values
template <typename T>
static T* upload(const std::vector<T>& h) {
    T* d = NULL;
    cudaCheck(cudaMalloc(&d, h.size() * sizeof(T)));
    cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T>
static std::vector<T> download(const T* d, size_t n) {
    std::vector<T> h(n);
    cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
static float val(int rank, size_t i) { return (float)((int)((i * 7 + rank * 13) % 31) - 15) * 0.25f; }  // exact in bf16

static void test_ops(ncclComm_t c) {
    const int N = g_size, me = g_rank;
    const size_t n = 37;
    cudaStream_t s = 0;
    // all-reduce sum, float, out of place and in place: small quarter-integers, exact sums
    {
        std::vector<float> h(n);
        for (size_t i = 0; i < n; i++) h[i] = val(me, i);
        float* a = upload(h);
        float* b = upload(std::vector<float>(n, -1.0f));
        long long before = nccl_emu_calls(NCCL_EMU_ALL_REDUCE);
        MUST(ncclAllReduce(a, b, n, ncclFloat32, ncclSum, c, s));
        MUST(ncclAllReduce(a, a, n, ncclFloat32, ncclSum, c, s));
        std::vector<float> gb = download(b, n), ga = download(a, n);
        int ok = nccl_emu_calls(NCCL_EMU_ALL_REDUCE) == before + 2;
        for (size_t i = 0; i < n; i++) {
            float w = 0.0f;
            for (int r = 0; r < N; r++) w += val(r, i);
            ok = ok && gb[i] == w && ga[i] == w;
        }
        check(ok, "ncclAllReduce float32 ncclSum, out of place and in place (counted twice)");
        cudaCheck(cudaFree(a)); cudaCheck(cudaFree(b));
    }
    // bf16 sum: each partial rounded to bf16. Rank 0 holds 1, the others 2^-8: 1 + 2^-8 is a tie
    // that rounds (to even) back to 1, so the in-order result is 1, where one rounding of the exact
    // sum 1 + (N-1) 2^-8 would be larger for N >= 3.
    {
        std::vector<__nv_bfloat16> h(n, __float2bfloat16(me == 0 ? 1.0f : 0.00390625f));
        __nv_bfloat16* a = upload(h);
        MUST(ncclAllReduce(a, a, n, ncclBfloat16, ncclSum, c, s));
        std::vector<__nv_bfloat16> g = download(a, n);
        int ok = 1;
        for (size_t i = 0; i < n; i++) ok = ok && __bfloat162float(g[i]) == 1.0f;
        check(ok, "ncclAllReduce bfloat16 ncclSum: 1 + %d x 2^-8 = 1 (every partial rounded to bf16; exact sum %.8g)", N - 1,
              1.0 + (N - 1) / 256.0);
        cudaCheck(cudaFree(a));
    }
    // ncclAvg on bf16: x * bf16(1/N), rounded, then the bf16 sum in rank order (computed here again)
    {
        std::vector<__nv_bfloat16> h(n);
        for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16(val(me, i) + 0.3f * (float)i);
        __nv_bfloat16* a = upload(h);
        __nv_bfloat16* b = upload(std::vector<__nv_bfloat16>(n, __float2bfloat16(-1.0f)));
        MUST(ncclAllReduce(a, b, n, ncclBfloat16, ncclAvg, c, s));
        std::vector<__nv_bfloat16> g = download(b, n);
        float scale = __bfloat162float(__float2bfloat16(1.0f / N));
        int ok = 1, differs = 0;
        for (size_t i = 0; i < n; i++) {
            float acc = 0.0f, exact = 0.0f;
            for (int r = 0; r < N; r++) {
                float x = __bfloat162float(__float2bfloat16(val(r, i) + 0.3f * (float)i));
                float p = __bfloat162float(__float2bfloat16(x * scale));
                acc = r == 0 ? p : __bfloat162float(__float2bfloat16(acc + p));
                exact += x;
            }
            ok = ok && __bfloat162float(g[i]) == acc;
            differs += __bfloat162float(g[i]) != __bfloat162float(__float2bfloat16(exact / N));
        }
        check(ok, "ncclAllReduce bfloat16 ncclAvg = sum of x * bf16(1/%d), rounded (%d of %zu differ from bf16(sum/N))", N,
              differs, n);
        cudaCheck(cudaFree(a)); cudaCheck(cudaFree(b));
    }
    // reduce-scatter, out of place and in place (recvbuff = sendbuff + rank * recvcount)
    for (int in_place = 0; in_place < 2; in_place++) {
        std::vector<float> h(N * n);
        for (size_t i = 0; i < N * n; i++) h[i] = val(me, i);
        float* a = upload(h);
        float* b = upload(std::vector<float>(n, -1.0f));
        float* recv = in_place ? a + me * n : b;
        MUST(ncclReduceScatter(a, recv, n, ncclFloat32, ncclAvg, c, s));
        std::vector<float> g = download(recv, n);
        int ok = 1;
        float scale = 1.0f / N;
        for (size_t i = 0; i < n; i++) {
            float w = 0.0f;
            for (int r = 0; r < N; r++) w = r == 0 ? val(r, me * n + i) * scale : w + val(r, me * n + i) * scale;
            ok = ok && g[i] == w;
        }
        check(ok, "ncclReduceScatter float32 ncclAvg %s: block %d of the average", in_place ? "in place" : "out of place", me);
        cudaCheck(cudaFree(a)); cudaCheck(cudaFree(b));
    }
    // all-gather, out of place and in place (sendbuff = recvbuff + rank * sendcount)
    for (int in_place = 0; in_place < 2; in_place++) {
        std::vector<float> mine(n), all(N * n, -1.0f);
        for (size_t i = 0; i < n; i++) mine[i] = val(me, i);
        if (in_place) for (size_t i = 0; i < n; i++) all[me * n + i] = mine[i];
        float* out = upload(all);
        float* in = in_place ? out + me * n : upload(mine);
        MUST(ncclAllGather(in, out, n, ncclFloat32, c, s));
        std::vector<float> g = download(out, N * n);
        int ok = 1;
        for (int r = 0; r < N; r++) for (size_t i = 0; i < n; i++) ok = ok && g[r * n + i] == val(r, i);
        check(ok, "ncclAllGather float32 %s: every rank's block in rank order", in_place ? "in place" : "out of place");
        cudaCheck(cudaFree(out));
        if (!in_place) cudaCheck(cudaFree(in));
    }
    // broadcast from every root, out of place then in place
    for (int root = 0; root < N; root++) {
        std::vector<float> h(n);
        for (size_t i = 0; i < n; i++) h[i] = val(me, i);
        float* a = upload(h);
        float* b = upload(std::vector<float>(n, -1.0f));
        MUST(ncclBroadcast(a, b, n, ncclFloat32, root, c, s));
        MUST(ncclBroadcast(a, a, n, ncclFloat32, root, c, s));
        std::vector<float> gb = download(b, n), ga = download(a, n);
        int ok = 1;
        for (size_t i = 0; i < n; i++) ok = ok && gb[i] == val(root, i) && ga[i] == val(root, i);
        check(ok, "ncclBroadcast from root %d, out of place and in place", root);
        cudaCheck(cudaFree(a)); cudaCheck(cudaFree(b));
    }
    // a ring in one group: every rank sends to the next before it receives from the previous one
    {
        std::vector<float> h(n);
        for (size_t i = 0; i < n; i++) h[i] = val(me, i);
        float* a = upload(h);
        float* b = upload(std::vector<float>(n, -1.0f));
        long long sends = nccl_emu_calls(NCCL_EMU_SEND), recvs = nccl_emu_calls(NCCL_EMU_RECV);
        MUST(ncclGroupStart());
        MUST(ncclSend(a, n, ncclFloat32, (me + 1) % N, c, s));
        MUST(ncclRecv(b, n, ncclFloat32, (me + N - 1) % N, c, s));
        MUST(ncclGroupEnd());
        std::vector<float> g = download(b, n);
        int ok = nccl_emu_calls(NCCL_EMU_SEND) == sends + 1 && nccl_emu_calls(NCCL_EMU_RECV) == recvs + 1;
        for (size_t i = 0; i < n; i++) ok = ok && g[i] == val((me + N - 1) % N, i);
        check(ok, "ncclSend then ncclRecv in one group: a ring with every rank sending first completes");
        cudaCheck(cudaFree(a)); cudaCheck(cudaFree(b));
    }
}

// invalid arguments: refused at the call, on this rank alone, and the communicator stays usable
static void test_invalid(ncclComm_t c) {
    const int N = g_size, me = g_rank;
    const size_t n = 16;
    cudaStream_t s = 0;
    float* a = upload(std::vector<float>(N * n, 1.0f));
    float* b = upload(std::vector<float>(N * n, 1.0f));
    float host[64];
    struct { const char* what; ncclResult_t got, want; } cases[] = {
        {"NULL comm", ncclAllReduce(a, b, n, ncclFloat32, ncclSum, NULL, s), ncclInvalidArgument},
        {"datatype 42", ncclAllReduce(a, b, n, (ncclDataType_t)42, ncclSum, c, s), ncclInvalidArgument},
        {"op 17", ncclAllReduce(a, b, n, ncclFloat32, (ncclRedOp_t)17, c, s), ncclInvalidArgument},
        {"a host pointer", ncclAllReduce(host, b, n, ncclFloat32, ncclSum, c, s), ncclInvalidArgument},
        {"a NULL recvbuff", ncclAllReduce(a, NULL, n, ncclFloat32, ncclSum, c, s), ncclInvalidArgument},
        {"all-reduce count past the buffer", ncclAllReduce(a, b, N * n + 1, ncclFloat32, ncclSum, c, s), ncclInvalidArgument},
        {"reduce-scatter with the total as recvcount", ncclReduceScatter(a, b, N * n, ncclFloat32, ncclSum, c, s), ncclInvalidArgument},
        {"all-gather with the total as sendcount", ncclAllGather(a, b, N * n, ncclFloat32, c, s), ncclInvalidArgument},
        {"reduce-scatter recvbuff inside sendbuff, not at rank*recvcount",
         ncclReduceScatter(a, a + ((me + 1) % N) * n, n, ncclFloat32, ncclSum, c, s), ncclInvalidArgument},
        {"all-gather sendbuff inside recvbuff, not at rank*sendcount",
         ncclAllGather(b + ((me + 1) % N) * n, b, n, ncclFloat32, c, s), ncclInvalidArgument},
        {"all-reduce on overlapping, different buffers", ncclAllReduce(a, a + 1, n, ncclFloat32, ncclSum, c, s), ncclInvalidArgument},
        {"broadcast root N", ncclBroadcast(a, a, n, ncclFloat32, N, c, s), ncclInvalidArgument},
        {"send to peer -1", ncclSend(a, n, ncclFloat32, -1, c, s), ncclInvalidArgument},
        {"recv from peer N", ncclRecv(a, n, ncclFloat32, N, c, s), ncclInvalidArgument},
        {"an int32 sum (not emulated)", ncclAllReduce(a, b, n, ncclInt32, ncclSum, c, s), ncclInvalidUsage},
        {"ncclGroupEnd without ncclGroupStart", ncclGroupEnd(), ncclInvalidUsage},
    };
    for (auto& k : cases) {
        check(k.got == k.want, "refused: %s -> %s (expected %s)", k.what, ncclGetErrorString(k.got), ncclGetErrorString(k.want));
    }
    // a group with a bad operation runs none of its operations
    long long before = nccl_emu_calls(NCCL_EMU_ALL_REDUCE);
    MUST(ncclGroupStart());
    ncclResult_t r1 = ncclAllReduce(a, b, n, ncclFloat32, ncclSum, c, s);
    ncclResult_t r2 = ncclAllReduce(a, b, n, ncclFloat32, (ncclRedOp_t)9, c, s);
    ncclResult_t r3 = ncclGroupEnd();
    check(r1 == ncclSuccess && r2 == ncclInvalidArgument && r3 == ncclInvalidArgument && nccl_emu_calls(NCCL_EMU_ALL_REDUCE) == before,
          "a group with an invalid op: the op and ncclGroupEnd return ncclInvalidArgument, nothing runs");
    // creation arguments
    ncclUniqueId id;
    MUST(ncclGetUniqueId(&id));
    ncclComm_t x = NULL;
    ncclConfig_t bad;
    memset(&bad, 0, sizeof(bad));
    check(ncclCommInitRank(&x, N, id, N) == ncclInvalidArgument && x == NULL, "refused: ncclCommInitRank with rank = nranks");
    check(ncclCommInitRankConfig(&x, N, id, 0, &bad) == ncclInvalidArgument, "refused: a config not from NCCL_CONFIG_INITIALIZER");
    ncclUniqueId junk;
    memset(&junk, 7, sizeof(junk));
    check(ncclCommInitRank(&x, N, junk, me) == ncclInvalidArgument, "refused: an id not made by ncclGetUniqueId");
    // the communicator still works
    MUST(ncclAllReduce(a, b, n, ncclFloat32, ncclSum, c, s));
    std::vector<float> g = download(b, n);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok = ok && g[i] == (float)N;
    check(ok, "after the refused calls the communicator still reduces correctly");
    int version = 0;
    check(ncclGetVersion(&version) == ncclSuccess && version == NCCL_VERSION_CODE && strlen(ncclGetErrorString(ncclInvalidUsage)) > 0,
          "ncclGetVersion = NCCL_VERSION_CODE %d, ncclGetErrorString names every code", NCCL_VERSION_CODE);
    cudaCheck(cudaFree(a)); cudaCheck(cudaFree(b));
}

// errors that need the other ranks: a count that differs between ranks, send/recv counts that differ
static void test_mismatch(void) {
    const int N = g_size, me = g_rank;
    cudaStream_t s = 0;
    float* a = upload(std::vector<float>(64, 1.0f));
    ncclResult_t ir;
    ncclComm_t c = make_comm(0, &ir);
    MUST(ir);
    ncclResult_t r = ncclAllReduce(a, a, me == N - 1 ? 11 : 10, ncclFloat32, ncclSum, c, s);
    int named = strstr(ncclGetLastError(NULL), "disagree") != NULL && strstr(ncclGetLastError(NULL), "count 11") != NULL;
    ncclResult_t async = ncclSuccess;
    MUST(ncclCommGetAsyncError(c, &async));
    ncclResult_t next = ncclAllReduce(a, a, 10, ncclFloat32, ncclSum, c, s);
    check(r == ncclInvalidUsage && named && async == ncclInvalidUsage &&
          next == ncclInvalidUsage, "rank %d calls all-reduce with count 11, the others 10: ncclInvalidUsage on every rank, "
          "then the communicator's asynchronous error", N - 1);
    MUST(ncclCommAbort(c));

    c = make_comm(0, &ir);
    MUST(ir);
    r = ncclSuccess;
    if (me == 0) r = ncclSend(a, 10, ncclFloat32, 1, c, s);
    if (me == 1) r = ncclRecv(a, 12, ncclFloat32, 0, c, s);
    check((me == 1) ? (r == ncclInvalidUsage && strstr(ncclGetLastError(NULL), "sent 10")) : r == ncclSuccess,
          "rank 0 sends 10 elements, rank 1 receives 12: ncclInvalidUsage on rank 1");
    MUST(ncclCommAbort(c));
    c = make_comm(0, &ir);
    MUST(ir);
    r = ncclSuccess;
    if (me == 0) r = ncclSend(a, 12, ncclFloat32, 1, c, s);
    if (me == 1) r = ncclRecv(a, 10, ncclFloat32, 0, c, s);
    check((me == 1) ? (r == ncclInvalidUsage && strstr(ncclGetLastError(NULL), "sent more")) : r == ncclSuccess,
          "rank 0 sends 12 elements, rank 1 receives 10: ncclInvalidUsage on rank 1");
    MUST(ncclCommAbort(c));
    cudaCheck(cudaFree(a));
}

static const char* USAGE =
    "(no arguments; run under mpirun with 2 or more processes, e.g. EMU_DEVICES=4 mpirun -np 3 ...)\n"
    "Tests of dev/emu/nccl_emu.h, the emulated NCCL over MPI: communicators, every operation in and out of\n"
    "place against values computed from every rank's data, and the errors NCCL returns.\n";

int main(int argc, char** argv) {
    usage_args(argc, argv, USAGE);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (g_size < 2) fatal("test_nccl_emu: run under mpirun with at least 2 processes (found %d)", g_size);
    int ndev = 0;
    cudaCheck(cudaGetDeviceCount(&ndev));
    if (ndev < g_size) fatal("test_nccl_emu: %d processes need EMU_DEVICES >= %d (found %d)", g_size, g_size, ndev);
    if (g_rank == 0) { printf("test_nccl_emu: %d processes, nccl.h %d\n", g_size, NCCL_VERSION_CODE); fflush(stdout); }

    // two ranks on one device are refused, as by NCCL
    cudaCheck(cudaSetDevice(0));
    ncclResult_t ir;
    ncclComm_t dup = make_comm(0, &ir);
    check(ir == ncclInvalidUsage && dup == NULL && strstr(ncclGetLastError(NULL), "same device"),
          "every rank on device 0: ncclCommInitRank returns ncclInvalidUsage (same device)");
    cudaCheck(cudaSetDevice(g_rank));

    ncclComm_t c = make_comm(0, &ir);
    int count = 0, rank = -1;
    MUST(ir);
    MUST(ncclCommCount(c, &count));
    MUST(ncclCommUserRank(c, &rank));
    check(count == g_size && rank == g_rank, "blocking communicator: %d ranks, user rank = world rank", count);
    test_ops(c);
    test_invalid(c);
    MUST(ncclCommDestroy(c));

    // a non-blocking communicator: every call that works returns ncclInProgress, then must be polled
    ncclComm_t nb = make_comm(1, &ir);
    float* a = upload(std::vector<float>(8, 1.0f));
    ncclResult_t early = ncclAllReduce(a, a, 8, ncclFloat32, ncclSum, nb, 0);
    ncclResult_t s1 = ncclSuccess, s2 = ncclSuccess, s3 = ncclSuccess;
    MUST(ncclCommGetAsyncError(nb, &s1));
    MUST(ncclCommGetAsyncError(nb, &s2));
    check(ir == ncclInProgress && early == ncclInvalidUsage && s1 == ncclInProgress && s2 == ncclSuccess,
          "non-blocking init returns ncclInProgress; an operation before the poll is refused; the poll reports "
          "ncclInProgress, then ncclSuccess");
    ncclResult_t op = ncclAllReduce(a, a, 8, ncclFloat32, ncclSum, nb, 0);
    int polls = 0;
    do { MUST(ncclCommGetAsyncError(nb, &s3)); polls++; } while (s3 == ncclInProgress && polls < 100);
    std::vector<float> g = download(a, 8);
    check(op == ncclInProgress && s3 == ncclSuccess && polls == 2 && g[0] == (float)g_size,
          "non-blocking all-reduce returns ncclInProgress, done after %d polls, sum %g", polls, g[0]);
    MUST(ncclGroupStart());
    MUST(ncclAllReduce(a, a, 8, ncclFloat32, ncclSum, nb, 0));
    ncclResult_t ge = ncclGroupEnd();
    do { MUST(ncclCommGetAsyncError(nb, &s3)); } while (s3 == ncclInProgress);
    MUST(ncclCommFinalize(nb) == ncclInProgress ? ncclSuccess : ncclInternalError);
    do { MUST(ncclCommGetAsyncError(nb, &s3)); } while (s3 == ncclInProgress);
    check(ge == ncclInProgress, "ncclGroupEnd of a group on a non-blocking communicator returns ncclInProgress; "
          "ncclCommFinalize too");
    MUST(ncclCommDestroy(nb));
    cudaCheck(cudaFree(a));

    test_mismatch();

    if (g_rank == 0) printf("test_nccl_emu: %d passed, %d failed\n", g_pass, g_fail);
    fflush(stdout);
    int failed = g_fail;
    MPI_Finalize();
    return failed ? 1 : 0;
}
