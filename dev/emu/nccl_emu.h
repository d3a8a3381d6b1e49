// nccl_emu.h: the subset of NCCL that llm/comm/comm.h calls, run over MPI, for the emulated build. With it
// the emulated build (g++ -DLLM_EMU) runs comm.h's NCCL code path, the one every multi-GPU run takes,
// so that a wrong reduction op, count, root, datatype or in-place layout there fails a CI test
// instead of only compiling.
//
// The functions are defined with the prototypes of NCCL's own <nccl.h> (included below, so a
// signature that differs is a compile error) and follow NCCL's documented semantics:
//
//   communicators  ncclGetUniqueId, ncclCommInitRank, ncclCommInitRankConfig (config.blocking = 0
//                  makes a non-blocking communicator), ncclCommFinalize, ncclCommDestroy,
//                  ncclCommAbort, ncclCommGetAsyncError, ncclCommCount, ncclCommUserRank
//   operations     ncclAllReduce, ncclReduceScatter, ncclAllGather, ncclBroadcast, ncclSend,
//                  ncclRecv, ncclGroupStart, ncclGroupEnd
//   errors         ncclGetErrorString, ncclGetLastError, ncclGetVersion
//
// Counts are in elements. In place: all-reduce and broadcast with sendbuff == recvbuff;
// reduce-scatter with recvbuff == sendbuff + rank * recvcount; all-gather with sendbuff == recvbuff +
// rank * sendcount. Reductions ncclSum, ncclProd, ncclMax, ncclMin and ncclAvg on float32, float64,
// float16 and bfloat16, computed in the buffer's type: every partial result is rounded to it (a
// bf16 sum over N ranks is rounded N-1 times, as NCCL's kernels do; the float intermediate is wide
// enough that each rounding is the correctly rounded one). Ranks are combined in rank order 0, 1,
// ..., N-1, the same on every rank, so an all-reduce leaves identical results everywhere. ncclAvg is
// NCCL's definition for floating types, a pre-multiplied sum: the scalar 1/N is rounded to the
// buffer's type, every rank's input is multiplied by it (rounded), then the products are summed.
//
// Execution. Emulated streams are synchronous (emu_runtime.h), so an operation runs when it is
// called: the call returns when every rank has called it and the result is in recvbuff. Between
// ncclGroupStart and the outermost ncclGroupEnd, operations are checked when called and run together
// at ncclGroupEnd: first every receive and send of the group is posted, then the collectives run in
// call order, then the sends and receives are completed, so paired send/recv cannot deadlock. A
// ncclSend outside a group completes only when its peer receives (MPI_Ssend), as on a GPU: two ranks
// that both send before they receive hang, just as NCCL would.
//
// Communicator creation. ncclGetUniqueId writes the calling process's MPI_COMM_WORLD rank, a tag and
// a random nonce into the id; the caller hands the id to the other ranks (comm.h: MPI_Bcast). In
// ncclCommInitRank the ranks meet at the id's creator, which must be one of them (NCCL needs no such
// rule: there a bootstrap thread serves the id): each rank sends it (nonce, nranks, rank, world
// rank), the creator checks that nranks agree and every rank appears once, and answers with the
// list of world ranks in NCCL rank order; then the ranks build their MPI communicator
// (MPI_Comm_create_group over that list, so MPI rank = NCCL rank). Creation blocks until every rank
// has joined, for non-blocking communicators too (MPI has no non-blocking way to create a
// communicator), so ranks must create communicators in the same order. Like NCCL, a communicator
// refuses two ranks on one device: the ranks compare (host name, cudaGetDevice); with several
// processes per host set EMU_DEVICES and cudaSetDevice one device per rank, as comm.h does.
//
// Non-blocking communicators (config.blocking = 0). Every call that does work on one (its creation,
// an operation outside a group, a ncclGroupEnd that ran operations on it, ncclCommFinalize) does it
// and then returns ncclInProgress; ncclCommGetAsyncError reports ncclInProgress once more, then
// ncclSuccess. Until the state has been polled back to ncclSuccess, a new operation on the
// communicator is refused (ncclInvalidUsage): NCCL requires the caller to poll first, and this makes
// a caller that forgets fail in CI. ncclCommAbort frees the communicator at once, without its peers
// (its MPI communicator is left allocated: freeing one is a collective call).
//
// Errors, as NCCL returns them, with the detail in ncclGetLastError (printed too when NCCL_DEBUG is
// WARN or INFO; NCCL_DEBUG=INFO also prints one line per operation run):
//   ncclInvalidArgument  a NULL, destroyed or aborted communicator; a datatype or op that is not
//                        built in; root or peer outside [0, nranks); nranks < 1 or rank outside
//                        [0, nranks) at creation; an id not made by ncclGetUniqueId; a config not
//                        initialized with NCCL_CONFIG_INITIALIZER; an invalid stream; a buffer that
//                        is NULL or whose [buf, buf + count * size) is not inside one cudaMalloc
//                        allocation (a host pointer, freed memory, or a count too large for it);
//                        send and receive buffers that overlap other than in the in-place layout
//   ncclInvalidUsage     ranks that call different operations, counts, datatypes, ops or roots
//                        (each collective first compares its signature across its ranks); a receive
//                        whose count differs from its peer's send; nranks or ranks that disagree at
//                        creation; two ranks on one device; an operation on a non-blocking
//                        communicator not yet polled back to ncclSuccess; ncclGroupEnd without
//                        ncclGroupStart; a reduction on a type not emulated (integers, fp8)
//   ncclSystemError      an MPI call failed (MPI not initialized, ...)
// A failed operation also becomes the communicator's asynchronous error (ncclCommGetAsyncError), so
// later operations on it fail too, until it is destroyed or aborted.
//
// For tests: nccl_emu_calls(kind) counts the operations run per kind (NCCL_EMU_ALL_REDUCE, ...),
// so a test can tell that the NCCL code path was taken. Limits: at most INT_MAX bytes per rank per
// operation (MPI counts are ints); custom reduction ops (ncclRedOpCreatePreMulSum) and the rest of
// NCCL's API are not emulated (declared by <nccl.h>, left undefined: a call fails to link).
//
// Header-only, like the rest of dev/emu: llm/comm/comm.h includes it in the emulated build, after
// llm/core/common.h has included dev/emu/emu.h. Needs MPI (mpi.h) and NCCL's header (nccl.h, from
// NCCL's package or the toolkit's include directory); not the NCCL library.
#pragma once

#ifndef EMU_CHECK_STREAM
#error "dev/emu/nccl_emu.h is part of the emulated build: include llm/core/common.h (with -DLLM_EMU) first"
#endif

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <limits.h>
#include <stddef.h>
#include <strings.h>

// <nccl.h> includes <cuda_runtime.h>, which the emulated build must not parse (emu.h has declared
// the runtime API from cuda_runtime_api.h already): its include guard is set around the include.
#if !__has_include(<nccl.h>)
#error "dev/emu/nccl_emu.h needs NCCL's header nccl.h (libnccl-dev, or the CUDA toolkit's include directory)"
#endif
#ifndef __CUDA_RUNTIME_H__
#define __CUDA_RUNTIME_H__
#define NCCL_EMU_UNDEF_RUNTIME_GUARD
#endif
#include <nccl.h>
#ifdef NCCL_EMU_UNDEF_RUNTIME_GUARD
#undef __CUDA_RUNTIME_H__
#undef NCCL_EMU_UNDEF_RUNTIME_GUARD
#endif
#if NCCL_VERSION_CODE < 21400
#error "dev/emu/nccl_emu.h needs nccl.h of NCCL >= 2.14 (ncclConfig_t, non-blocking communicators)"
#endif

// ----------------------------------------------------------------------------
// state

enum { NCCL_EMU_ALL_REDUCE = 0, NCCL_EMU_REDUCE_SCATTER, NCCL_EMU_ALL_GATHER, NCCL_EMU_BROADCAST,
       NCCL_EMU_SEND, NCCL_EMU_RECV, NCCL_EMU_NUM_KINDS };
static const char* const nccl_emu_kind_names[NCCL_EMU_NUM_KINDS] = {
    "ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast", "ncclSend", "ncclRecv"};

static const uint32_t NCCL_EMU_COMM_MAGIC = 0x4e43434du;  // "NCCM"
static const uint32_t NCCL_EMU_ID_MAGIC = 0x4e434944u;    // "NCID"
static const int NCCL_EMU_TAG_BASE = 20000, NCCL_EMU_TAG_RANGE = 8000;  // MPI_TAG_UB >= 32767
static const int NCCL_EMU_P2P_TAG = 1;

struct ncclComm {
    uint32_t magic;
    MPI_Comm mpi;          // the communicator's ranks, MPI rank = NCCL rank
    int rank, nranks;
    int device;            // cudaGetDevice at creation
    int nonblocking;       // config.blocking == 0
    ncclResult_t state;    // ncclSuccess, ncclInProgress (until polled), or an asynchronous error
    int polls_in_progress; // how many more ncclCommGetAsyncError calls report ncclInProgress
};

// what ncclGetUniqueId writes into the 128 opaque bytes
typedef struct {
    uint32_t magic;
    int32_t creator;   // MPI_COMM_WORLD rank of the process that made the id
    int32_t tag;       // MPI tag of the meeting at the creator and of MPI_Comm_create_group
    uint64_t nonce;    // tells this id's messages from any other's
} NcclEmuId;
static_assert(sizeof(NcclEmuId) <= sizeof(ncclUniqueId), "NcclEmuId must fit in ncclUniqueId");

// one operation, as checked at its call and run now or at ncclGroupEnd
typedef struct {
    int kind;
    const void* send;
    void* recv;
    size_t count;          // elements: all-reduce/broadcast/send/recv count; the per-rank block otherwise
    ncclDataType_t type;
    ncclRedOp_t op;
    int peer;              // broadcast root, send destination, recv source
    ncclComm_t comm;
    const char* call;
} NcclEmuOp;

inline char nccl_emu_last_error[1024] = "";
inline long long nccl_emu_counts[NCCL_EMU_NUM_KINDS] = {0, 0, 0, 0, 0, 0};
inline int nccl_emu_group_depth = 0;
inline ncclResult_t nccl_emu_group_error = ncclSuccess;
inline std::vector<NcclEmuOp> nccl_emu_group_ops;
inline uint64_t nccl_emu_ids_made = 0;

// operations run per kind since the start of the process (for tests)
static inline long long nccl_emu_calls(int kind) {
    return (kind >= 0 && kind < NCCL_EMU_NUM_KINDS) ? nccl_emu_counts[kind] : -1;
}

// NCCL_DEBUG: 0 unset, 1 WARN, 2 INFO (or TRACE)
static inline int nccl_emu_debug_level(void) {
    static int level = -1;
    if (level < 0) {
        const char* s = getenv("NCCL_DEBUG");
        level = 0;
        if (s != NULL && (!strcasecmp(s, "INFO") || !strcasecmp(s, "TRACE"))) level = 2;
        else if (s != NULL && !strcasecmp(s, "WARN")) level = 1;
    }
    return level;
}

static inline int nccl_emu_world_rank(void) {
    int inited = 0, r = -1;
    if (MPI_Initialized(&inited) == MPI_SUCCESS && inited) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

// records the error text (ncclGetLastError) and returns r
__attribute__((format(printf, 3, 4)))
static inline ncclResult_t nccl_emu_fail(ncclResult_t r, const char* call, const char* fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(nccl_emu_last_error, sizeof(nccl_emu_last_error), "%s: %s", call, msg);
    if (nccl_emu_debug_level() >= 1) {
        fprintf(stderr, "NCCL WARN (emulated, world rank %d) %s\n", nccl_emu_world_rank(), nccl_emu_last_error);
        fflush(stderr);
    }
    return r;
}

// an MPI call inside the emulator: a failure becomes ncclSystemError with MPI's text
static inline ncclResult_t nccl_emu_mpi(int err, const char* what, const char* call) {
    if (err == MPI_SUCCESS) return ncclSuccess;
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len] = '\0';
    return nccl_emu_fail(ncclSystemError, call, "%s failed: %s", what, len ? msg : "unknown MPI error");
}
#define NCCL_EMU_MPI(x, call) do { ncclResult_t r_ = nccl_emu_mpi((x), #x, (call)); if (r_ != ncclSuccess) return r_; } while (0)
#define NCCL_EMU_TRY(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) return r_; } while (0)

static inline bool nccl_emu_comm_ok(ncclComm_t c) { return c != NULL && c->magic == NCCL_EMU_COMM_MAGIC; }

// ----------------------------------------------------------------------------
// datatypes and reductions

// bytes of one element, 0 for a value that is not a built-in ncclDataType_t
static inline size_t nccl_emu_type_size(ncclDataType_t t) {
    switch (t) {
        case ncclInt8: case ncclUint8: return 1;
        case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
        case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
        case ncclFloat16: case ncclBfloat16: return 2;
        default: return ((int)t > (int)ncclBfloat16 && (int)t < (int)ncclNumTypes) ? 1 : 0;  // fp8 types
    }
}
static inline const char* nccl_emu_type_name(ncclDataType_t t) {
    static const char* const names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16",
                                        "float32", "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
    int i = (int)t;
    return (i >= 0 && i < (int)ncclNumTypes && i < (int)(sizeof(names) / sizeof(names[0]))) ? names[i] : "invalid";
}
static inline const char* nccl_emu_op_name(int op) {
    static const char* const names[] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};
    return (op >= 0 && op < (int)ncclNumOps) ? names[op] : (op == -1 ? "-" : "invalid");
}
static inline bool nccl_emu_reduces(ncclDataType_t t) {
    return t == ncclFloat32 || t == ncclFloat64 || t == ncclFloat16 || t == ncclBfloat16;
}

// the type in which a reduction is computed, and the one rounding back to the buffer's type
template <typename T> struct NcclEmuArith;
template <> struct NcclEmuArith<float> {
    typedef float A;
    static A load(float x) { return x; }
    static float store(A a) { return a; }
};
template <> struct NcclEmuArith<double> {
    typedef double A;
    static A load(double x) { return x; }
    static double store(A a) { return a; }
};
template <> struct NcclEmuArith<__nv_bfloat16> {
    typedef float A;
    static A load(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __nv_bfloat16 store(A a) { return __float2bfloat16(a); }  // round to nearest even
};
template <> struct NcclEmuArith<__half> {
    typedef float A;
    static A load(__half x) { return __half2float(x); }
    static __half store(A a) { return __float2half(a); }
};

// out[i] = in[0*n + i] op in[1*n + i] op ... op in[(N-1)*n + i], in that order, each partial rounded
// to T; ncclAvg first multiplies every input by the scalar 1/N rounded to T (rounding the product)
template <typename T>
static void nccl_emu_reduce_t(void* out_, const void* in_, size_t n, int N, ncclRedOp_t op) {
    typedef NcclEmuArith<T> R;
    typedef typename R::A A;
    T* out = (T*)out_;
    const T* in = (const T*)in_;
    const A scale = R::load(R::store((A)(1.0 / N)));
    for (size_t i = 0; i < n; i++) {
        A acc = R::load(in[i]);
        if (op == ncclAvg) acc = R::load(R::store(acc * scale));
        for (int r = 1; r < N; r++) {
            A x = R::load(in[(size_t)r * n + i]);
            switch (op) {
                case ncclSum: acc = R::load(R::store(acc + x)); break;
                case ncclAvg: acc = R::load(R::store(acc + R::load(R::store(x * scale)))); break;
                case ncclProd: acc = R::load(R::store(acc * x)); break;
                case ncclMax: acc = x > acc ? x : acc; break;
                default: acc = x < acc ? x : acc; break;  // ncclMin
            }
        }
        out[i] = R::store(acc);
    }
}
static inline void nccl_emu_reduce(void* out, const void* in, size_t n, int N, ncclDataType_t t, ncclRedOp_t op) {
    switch (t) {
        case ncclFloat32: nccl_emu_reduce_t<float>(out, in, n, N, op); break;
        case ncclFloat64: nccl_emu_reduce_t<double>(out, in, n, N, op); break;
        case ncclBfloat16: nccl_emu_reduce_t<__nv_bfloat16>(out, in, n, N, op); break;
        default: nccl_emu_reduce_t<__half>(out, in, n, N, op); break;  // ncclFloat16 (checked before)
    }
}

// ----------------------------------------------------------------------------
// checks made when an operation is called

static inline ncclResult_t nccl_emu_check_buffer(const void* p, size_t bytes, const char* name, const char* call) {
    if (bytes == 0) return ncclSuccess;
    if (p == NULL) return nccl_emu_fail(ncclInvalidArgument, call, "%s is NULL (%zu bytes expected)", name, bytes);
    if (!emu_is_device_range(p, bytes)) {
        if (emu_is_device_ptr(p)) {
            return nccl_emu_fail(ncclInvalidArgument, call, "%s [%p, +%zu bytes) runs past the end of its cudaMalloc "
                                 "allocation (a count too large for the buffer?)", name, p, bytes);
        }
        return nccl_emu_fail(ncclInvalidArgument, call, "%s %p is %s", name, p, emu_ptr_kind(p));
    }
    return ncclSuccess;
}
static inline bool nccl_emu_overlap(const void* a, size_t na, const void* b, size_t nb) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return na > 0 && nb > 0 && x < y + nb && y < x + na;
}

// the communicator can take an operation now
static inline ncclResult_t nccl_emu_check_comm(ncclComm_t comm, const char* call) {
    if (!nccl_emu_comm_ok(comm))
        return nccl_emu_fail(ncclInvalidArgument, call, "comm %p is NULL or not a live communicator (destroyed? aborted?)", (void*)comm);
    if (comm->state == ncclInProgress)
        return nccl_emu_fail(ncclInvalidUsage, call, "the communicator's last call returned ncclInProgress: poll "
                             "ncclCommGetAsyncError until it reports ncclSuccess before the next operation");
    if (comm->state != ncclSuccess)
        return nccl_emu_fail(comm->state, call, "the communicator has an asynchronous error (%d) from an earlier "
                             "operation: abort or destroy it", (int)comm->state);
    return ncclSuccess;
}

// every argument of op, as NCCL checks them and stricter on buffers (their whole extent)
static inline ncclResult_t nccl_emu_check_op(const NcclEmuOp* o, cudaStream_t stream) {
    const char* call = o->call;
    NCCL_EMU_TRY(nccl_emu_check_comm(o->comm, call));
    const int N = o->comm->nranks, me = o->comm->rank;
    const size_t esz = nccl_emu_type_size(o->type);
    if (esz == 0) return nccl_emu_fail(ncclInvalidArgument, call, "datatype %d is not a built-in ncclDataType_t", (int)o->type);
    const bool reduces = o->kind == NCCL_EMU_ALL_REDUCE || o->kind == NCCL_EMU_REDUCE_SCATTER;
    if (reduces) {
        if ((int)o->op < 0 || (int)o->op >= (int)ncclNumOps)
            return nccl_emu_fail(ncclInvalidArgument, call, "op %d is not a built-in ncclRedOp_t (custom ops are not emulated)", (int)o->op);
        if (!nccl_emu_reduces(o->type))
            return nccl_emu_fail(ncclInvalidUsage, call, "%s on %s is not emulated (float32, float64, float16, bfloat16 only)",
                                 nccl_emu_op_name(o->op), nccl_emu_type_name(o->type));
    }
    if (o->kind == NCCL_EMU_BROADCAST || o->kind == NCCL_EMU_SEND || o->kind == NCCL_EMU_RECV) {
        const char* what = o->kind == NCCL_EMU_BROADCAST ? "root" : "peer";
        if (o->peer < 0 || o->peer >= N)
            return nccl_emu_fail(ncclInvalidArgument, call, "%s %d is not a rank of this communicator of %d ranks", what, o->peer, N);
    }
    if (!emu_stream_ok(stream)) return nccl_emu_fail(ncclInvalidArgument, call, "invalid or destroyed stream %p", (void*)stream);
    if (o->count > (size_t)INT_MAX / esz)
        return nccl_emu_fail(ncclInvalidUsage, call, "count %zu: the emulator moves at most INT_MAX bytes per rank per call", o->count);
    // the extent of each buffer the operation reads or writes, and the in-place layouts
    const size_t b = o->count * esz;
    size_t sb = 0, rb = 0;
    bool in_place = false;
    switch (o->kind) {
        case NCCL_EMU_ALL_REDUCE: sb = b; rb = b; in_place = o->send == o->recv; break;
        case NCCL_EMU_REDUCE_SCATTER: sb = N * b; rb = b; in_place = (const char*)o->recv == (const char*)o->send + me * b; break;
        case NCCL_EMU_ALL_GATHER: sb = b; rb = N * b; in_place = (const char*)o->send == (const char*)o->recv + me * b; break;
        case NCCL_EMU_BROADCAST: sb = me == o->peer ? b : 0; rb = b; in_place = o->send == o->recv; break;
        case NCCL_EMU_SEND: sb = b; break;
        default: rb = b; break;  // NCCL_EMU_RECV
    }
    NCCL_EMU_TRY(nccl_emu_check_buffer(o->send, sb, "sendbuff", call));
    NCCL_EMU_TRY(nccl_emu_check_buffer(o->recv, rb, "recvbuff", call));
    if (!in_place && nccl_emu_overlap(o->send, sb, o->recv, rb)) {
        return nccl_emu_fail(ncclInvalidArgument, call, "sendbuff [%p, +%zu) and recvbuff [%p, +%zu) overlap but are not "
                             "NCCL's in-place layout", o->send, sb, (void*)o->recv, rb);
    }
    return ncclSuccess;
}

// ----------------------------------------------------------------------------
// running operations

// every rank of a collective must call the same one: compare (kind, count, type, op, root)
static inline ncclResult_t nccl_emu_check_signature(const NcclEmuOp* o) {
    ncclComm_t c = o->comm;
    const bool reduces = o->kind == NCCL_EMU_ALL_REDUCE || o->kind == NCCL_EMU_REDUCE_SCATTER;
    int64_t mine[5] = {o->kind, (int64_t)o->count, (int64_t)o->type, reduces ? (int64_t)o->op : -1,
                       o->kind == NCCL_EMU_BROADCAST ? (int64_t)o->peer : -1};
    std::vector<int64_t> all((size_t)c->nranks * 5);
    NCCL_EMU_MPI(MPI_Allgather(mine, 5, MPI_INT64_T, all.data(), 5, MPI_INT64_T, c->mpi), o->call);
    for (int r = 1; r < c->nranks; r++) {
        const int64_t* a = &all[0];
        const int64_t* x = &all[(size_t)r * 5];
        if (memcmp(a, x, 5 * sizeof(int64_t)) == 0) continue;
        return nccl_emu_fail(ncclInvalidUsage, o->call, "the ranks disagree: rank 0 called %s(count %lld, %s, %s, root %lld), "
                             "rank %d called %s(count %lld, %s, %s, root %lld)",
                             nccl_emu_kind_names[a[0]], (long long)a[1], nccl_emu_type_name((ncclDataType_t)a[2]), nccl_emu_op_name((int)a[3]),
                             (long long)a[4], r, (x[0] >= 0 && x[0] < NCCL_EMU_NUM_KINDS) ? nccl_emu_kind_names[x[0]] : "?",
                             (long long)x[1], nccl_emu_type_name((ncclDataType_t)x[2]), nccl_emu_op_name((int)x[3]), (long long)x[4]);
    }
    return ncclSuccess;
}

static inline void nccl_emu_log_op(const NcclEmuOp* o) {
    nccl_emu_counts[o->kind]++;
    if (nccl_emu_debug_level() < 2) return;
    const bool reduces = o->kind == NCCL_EMU_ALL_REDUCE || o->kind == NCCL_EMU_REDUCE_SCATTER;
    fprintf(stderr, "NCCL INFO (emulated) %s rank %d/%d count %zu %s%s%s peer/root %d send %p recv %p\n", o->call,
            o->comm->rank, o->comm->nranks, o->count, nccl_emu_type_name(o->type), reduces ? " " : "",
            reduces ? nccl_emu_op_name(o->op) : "", o->peer, o->send, o->recv);
    fflush(stderr);
}

// a collective, blocking until every rank has run it
static inline ncclResult_t nccl_emu_run_collective(const NcclEmuOp* o) {
    ncclComm_t c = o->comm;
    const int N = c->nranks, me = c->rank;
    const size_t b = o->count * nccl_emu_type_size(o->type);
    const int ib = (int)b;  // <= INT_MAX: checked at the call
    NCCL_EMU_TRY(nccl_emu_check_signature(o));
    nccl_emu_log_op(o);
    switch (o->kind) {
        case NCCL_EMU_ALL_REDUCE: {
            // every rank's input, then the same reduction in rank order on every rank
            std::vector<char> all((size_t)N * b + 1);
            NCCL_EMU_MPI(MPI_Allgather(o->send, ib, MPI_BYTE, all.data(), ib, MPI_BYTE, c->mpi), o->call);
            nccl_emu_reduce(o->recv, all.data(), o->count, N, o->type, o->op);
            break;
        }
        case NCCL_EMU_REDUCE_SCATTER: {
            // block `me` of every rank's input (read before recvbuff, which may lie inside sendbuff, is written)
            std::vector<char> blocks((size_t)N * b + 1);
            NCCL_EMU_MPI(MPI_Alltoall(o->send, ib, MPI_BYTE, blocks.data(), ib, MPI_BYTE, c->mpi), o->call);
            nccl_emu_reduce(o->recv, blocks.data(), o->count, N, o->type, o->op);
            break;
        }
        case NCCL_EMU_ALL_GATHER: {
            const bool in_place = (const char*)o->send == (const char*)o->recv + me * b;
            NCCL_EMU_MPI(MPI_Allgather(in_place ? MPI_IN_PLACE : o->send, ib, MPI_BYTE, o->recv, ib, MPI_BYTE, c->mpi), o->call);
            break;
        }
        default: {  // NCCL_EMU_BROADCAST
            if (me == o->peer && o->send != o->recv && b > 0) memmove(o->recv, o->send, b);
            NCCL_EMU_MPI(MPI_Bcast(o->recv, ib, MPI_BYTE, o->peer, c->mpi), o->call);
            break;
        }
    }
    return ncclSuccess;
}

// the count a receive got against the one it expected
static inline ncclResult_t nccl_emu_check_received(const NcclEmuOp* o, MPI_Status* st, int err) {
    size_t esz = nccl_emu_type_size(o->type);
    if (err == MPI_ERR_IN_STATUS) err = st->MPI_ERROR;
    int cls = MPI_SUCCESS;
    if (err != MPI_SUCCESS && MPI_Error_class(err, &cls) != MPI_SUCCESS) cls = err;
    if (cls == MPI_ERR_TRUNCATE) {
        return nccl_emu_fail(ncclInvalidUsage, o->call, "rank %d expected %zu %s elements from rank %d, which sent more "
                             "(the counts of ncclSend and ncclRecv must match)", o->comm->rank, o->count, nccl_emu_type_name(o->type), o->peer);
    }
    NCCL_EMU_TRY(nccl_emu_mpi(err, "MPI receive", o->call));
    int got = 0;
    NCCL_EMU_MPI(MPI_Get_count(st, MPI_BYTE, &got), o->call);
    if ((size_t)got != o->count * esz) {
        return nccl_emu_fail(ncclInvalidUsage, o->call, "rank %d expected %zu %s elements from rank %d, which sent %zu "
                             "(the counts of ncclSend and ncclRecv must match)", o->comm->rank, o->count,
                             nccl_emu_type_name(o->type), o->peer, (size_t)got / esz);
    }
    return ncclSuccess;
}

// one operation outside a group
static inline ncclResult_t nccl_emu_run_one(const NcclEmuOp* o) {
    const int ib = (int)(o->count * nccl_emu_type_size(o->type));
    if (o->kind == NCCL_EMU_SEND) {
        nccl_emu_log_op(o);
        // completes when the peer has received, as a GPU send without a group
        NCCL_EMU_MPI(MPI_Ssend(o->send, ib, MPI_BYTE, o->peer, NCCL_EMU_P2P_TAG, o->comm->mpi), o->call);
        return ncclSuccess;
    }
    if (o->kind == NCCL_EMU_RECV) {
        nccl_emu_log_op(o);
        MPI_Status st;
        int err = MPI_Recv(o->recv, ib, MPI_BYTE, o->peer, NCCL_EMU_P2P_TAG, o->comm->mpi, &st);
        return nccl_emu_check_received(o, &st, err);
    }
    return nccl_emu_run_collective(o);
}

// the operations of a group: every receive and send posted, the collectives in call order, then the
// sends and receives completed
static inline ncclResult_t nccl_emu_run_group(const std::vector<NcclEmuOp>& ops) {
    std::vector<MPI_Request> reqs;
    std::vector<const NcclEmuOp*> p2p;
    for (int pass = 0; pass < 2; pass++) {  // receives first, then sends
        for (const NcclEmuOp& o : ops) {
            if (o.kind != (pass == 0 ? NCCL_EMU_RECV : NCCL_EMU_SEND)) continue;
            const int ib = (int)(o.count * nccl_emu_type_size(o.type));
            MPI_Request r;
            nccl_emu_log_op(&o);
            if (o.kind == NCCL_EMU_RECV) NCCL_EMU_MPI(MPI_Irecv(o.recv, ib, MPI_BYTE, o.peer, NCCL_EMU_P2P_TAG, o.comm->mpi, &r), o.call);
            else NCCL_EMU_MPI(MPI_Isend(o.send, ib, MPI_BYTE, o.peer, NCCL_EMU_P2P_TAG, o.comm->mpi, &r), o.call);
            reqs.push_back(r);
            p2p.push_back(&o);
        }
    }
    for (const NcclEmuOp& o : ops) {
        if (o.kind == NCCL_EMU_SEND || o.kind == NCCL_EMU_RECV) continue;
        ncclResult_t r = nccl_emu_run_collective(&o);
        if (r != ncclSuccess) {
            o.comm->state = r;
            return r;
        }
    }
    if (reqs.empty()) return ncclSuccess;
    std::vector<MPI_Status> st(reqs.size());
    int err = MPI_Waitall((int)reqs.size(), reqs.data(), st.data());
    for (size_t i = 0; i < reqs.size(); i++) {
        const NcclEmuOp* o = p2p[i];
        ncclResult_t r = ncclSuccess;
        if (o->kind == NCCL_EMU_RECV) r = nccl_emu_check_received(o, &st[i], err == MPI_SUCCESS ? MPI_SUCCESS : MPI_ERR_IN_STATUS);
        else if (err != MPI_SUCCESS) r = nccl_emu_mpi(st[i].MPI_ERROR, "MPI_Isend", o->call);
        if (r != ncclSuccess) {
            o->comm->state = r;
            return r;
        }
    }
    return ncclSuccess;
}

// a non-blocking communicator reports ncclInProgress after work, then needs one more poll
static inline ncclResult_t nccl_emu_after_work(ncclComm_t c) {
    if (!c->nonblocking) return ncclSuccess;
    c->state = ncclInProgress;
    c->polls_in_progress = 1;
    return ncclInProgress;
}

// checks the operation, then runs it (outside a group) or keeps it for ncclGroupEnd
static inline ncclResult_t nccl_emu_enqueue(const NcclEmuOp& o, cudaStream_t stream) {
    ncclResult_t r = nccl_emu_check_op(&o, stream);
    if (r != ncclSuccess) {
        if (nccl_emu_group_depth > 0) nccl_emu_group_error = r;
        return r;
    }
    if (nccl_emu_group_depth > 0) {
        nccl_emu_group_ops.push_back(o);
        return ncclSuccess;
    }
    r = nccl_emu_run_one(&o);
    if (r != ncclSuccess) {
        o.comm->state = r;
        return r;
    }
    return nccl_emu_after_work(o.comm);
}

// ----------------------------------------------------------------------------
// creating a communicator

typedef struct {
    char host[64];
    int device;
} NcclEmuPlace;  // where a rank runs

// nranks, rank: as given; id: from ncclGetUniqueId; *out: the new communicator
static inline ncclResult_t nccl_emu_create(ncclComm_t* out, int nranks, const ncclUniqueId* uid, int rank, int nonblocking,
                                           const char* call) {
    int inited = 0;
    NCCL_EMU_MPI(MPI_Initialized(&inited), call);
    if (!inited) return nccl_emu_fail(ncclSystemError, call, "MPI is not initialized: the emulated NCCL runs over MPI (call MPI_Init first)");
    NcclEmuId id;
    memcpy(&id, uid, sizeof(id));
    if (id.magic != NCCL_EMU_ID_MAGIC) return nccl_emu_fail(ncclInvalidArgument, call, "the ncclUniqueId was not made by ncclGetUniqueId");
    int world = 0, world_size = 0;
    NCCL_EMU_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &world), call);
    NCCL_EMU_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world_size), call);
    if (id.creator < 0 || id.creator >= world_size) return nccl_emu_fail(ncclInvalidArgument, call, "the ncclUniqueId names world rank %d of %d", id.creator, world_size);

    // meet at the creator: (nonce, nranks, rank, world rank) in, the world ranks in NCCL rank order out
    std::vector<int> members(nranks, -1), joiners;
    char err[600] = "";
    if (world == id.creator) {
        members[rank] = world;
        for (int i = 1; i < nranks; i++) {
            int64_t join[4];
            MPI_Status st;
            NCCL_EMU_MPI(MPI_Recv(join, 4, MPI_INT64_T, MPI_ANY_SOURCE, id.tag, MPI_COMM_WORLD, &st), call);
            joiners.push_back(st.MPI_SOURCE);
            if (err[0]) continue;
            if ((uint64_t)join[0] != id.nonce) {
                snprintf(err, sizeof(err), "world rank %lld joined with another ncclUniqueId", (long long)join[3]);
            } else if (join[1] != nranks) {
                snprintf(err, sizeof(err), "the ranks disagree on nranks: %d at world rank %d, %lld at world rank %lld", nranks,
                         world, (long long)join[1], (long long)join[3]);
            } else if (join[2] < 0 || join[2] >= nranks || members[join[2]] >= 0) {
                snprintf(err, sizeof(err), "rank %lld is claimed twice (world ranks %d and %lld)", (long long)join[2],
                         join[2] >= 0 && join[2] < nranks ? members[join[2]] : -1, (long long)join[3]);
            } else {
                members[join[2]] = (int)join[3];
            }
        }
        std::vector<int> reply(nranks + 1 + sizeof(err) / sizeof(int), 0);
        reply[0] = err[0] ? 1 : 0;
        memcpy(&reply[1], members.data(), nranks * sizeof(int));
        memcpy(&reply[1 + nranks], err, sizeof(err));
        for (int w : joiners) {  // every rank that joined hears the outcome, an error too
            NCCL_EMU_MPI(MPI_Send(reply.data(), (int)reply.size(), MPI_INT, w, id.tag, MPI_COMM_WORLD), call);
        }
        if (err[0]) return nccl_emu_fail(ncclInvalidUsage, call, "%s", err);
    } else {
        int64_t join[4] = {(int64_t)id.nonce, nranks, rank, world};
        NCCL_EMU_MPI(MPI_Send(join, 4, MPI_INT64_T, id.creator, id.tag, MPI_COMM_WORLD), call);
        std::vector<int> reply(nranks + 1 + sizeof(err) / sizeof(int), 0);
        NCCL_EMU_MPI(MPI_Recv(reply.data(), (int)reply.size(), MPI_INT, id.creator, id.tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), call);
        if (reply[0]) {
            memcpy(err, &reply[1 + nranks], sizeof(err));
            err[sizeof(err) - 1] = '\0';
            return nccl_emu_fail(ncclInvalidUsage, call, "%s", err);
        }
        memcpy(members.data(), &reply[1], nranks * sizeof(int));
    }

    // the MPI communicator of exactly these ranks, in NCCL rank order
    MPI_Group world_group, group;
    MPI_Comm mpi;
    NCCL_EMU_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world_group), call);
    NCCL_EMU_MPI(MPI_Group_incl(world_group, nranks, members.data(), &group), call);
    NCCL_EMU_MPI(MPI_Comm_create_group(MPI_COMM_WORLD, group, id.tag, &mpi), call);
    NCCL_EMU_MPI(MPI_Group_free(&group), call);
    NCCL_EMU_MPI(MPI_Group_free(&world_group), call);
    NCCL_EMU_MPI(MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN), call);

    // one device per rank, as NCCL requires: compare (host, device) across the ranks
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return nccl_emu_fail(ncclUnhandledCudaError, call, "cudaGetDevice failed");
    char host[64];
    memset(host, 0, sizeof(host));
    if (gethostname(host, sizeof(host) - 1) != 0) snprintf(host, sizeof(host), "unknown");
    NcclEmuPlace mine, *all = (NcclEmuPlace*)calloc(nranks, sizeof(NcclEmuPlace));
    if (all == NULL) return nccl_emu_fail(ncclSystemError, call, "out of host memory");
    memcpy(mine.host, host, sizeof(host));
    mine.device = device;
    int rc = MPI_Allgather(&mine, (int)sizeof(mine), MPI_BYTE, all, (int)sizeof(mine), MPI_BYTE, mpi);
    ncclResult_t r = nccl_emu_mpi(rc, "MPI_Allgather", call);
    for (int i = 0; i < nranks && r == ncclSuccess; i++) {
        for (int j = i + 1; j < nranks && r == ncclSuccess; j++) {
            if (all[i].device == all[j].device && !strcmp(all[i].host, all[j].host)) {
                r = nccl_emu_fail(ncclInvalidUsage, call, "ranks %d and %d use the same device %d on host %s (one device per "
                                  "rank: cudaSetDevice before creating the communicator; EMU_DEVICES sets how many exist)",
                                  i, j, all[i].device, all[i].host);
            }
        }
    }
    free(all);
    if (r != ncclSuccess) return r;

    ncclComm_t c = (ncclComm_t)calloc(1, sizeof(struct ncclComm));
    if (c == NULL) return nccl_emu_fail(ncclSystemError, call, "out of host memory");
    c->magic = NCCL_EMU_COMM_MAGIC;
    c->mpi = mpi;
    c->rank = rank;
    c->nranks = nranks;
    c->device = device;
    c->nonblocking = nonblocking;
    c->state = ncclSuccess;
    *out = c;
    if (nccl_emu_debug_level() >= 2) {
        fprintf(stderr, "NCCL INFO (emulated) %s: rank %d of %d (world rank %d, device %d)%s\n", call, rank, nranks, world,
                device, nonblocking ? ", non-blocking" : "");
        fflush(stderr);
    }
    return nccl_emu_after_work(c);
}

// frees a communicator, and drops its operations from an open group
static inline void nccl_emu_forget(ncclComm_t comm) {
    std::vector<NcclEmuOp> keep;
    for (const NcclEmuOp& o : nccl_emu_group_ops) if (o.comm != comm) keep.push_back(o);
    nccl_emu_group_ops.swap(keep);
    comm->magic = 0;
    free(comm);
}

// ----------------------------------------------------------------------------
// the API (NCCL's prototypes, from <nccl.h>)

extern "C" {

inline const char* ncclGetErrorString(ncclResult_t result) {
    switch (result) {
        case ncclSuccess: return "success";
        case ncclUnhandledCudaError: return "a CUDA call failed";
        case ncclSystemError: return "a system or MPI call failed";
        case ncclInternalError: return "internal error (emulated NCCL)";
        case ncclInvalidArgument: return "invalid argument";
        case ncclInvalidUsage: return "invalid usage";
        case ncclRemoteError: return "a remote rank failed";
        case ncclInProgress: return "operation in progress";
        default: return "unknown ncclResult_t";
    }
}

inline const char* ncclGetLastError(ncclComm_t comm) {
    (void)comm;
    return nccl_emu_last_error;
}

inline ncclResult_t ncclGetVersion(int* version) {
    if (version == NULL) return nccl_emu_fail(ncclInvalidArgument, "ncclGetVersion", "version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

inline ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
    const char* call = "ncclGetUniqueId";
    if (uniqueId == NULL) return nccl_emu_fail(ncclInvalidArgument, call, "uniqueId is NULL");
    int inited = 0;
    NCCL_EMU_MPI(MPI_Initialized(&inited), call);
    if (!inited) return nccl_emu_fail(ncclSystemError, call, "MPI is not initialized: the emulated NCCL runs over MPI (call MPI_Init first)");
    NcclEmuId id;
    NCCL_EMU_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &id.creator), call);
    id.magic = NCCL_EMU_ID_MAGIC;
    id.tag = NCCL_EMU_TAG_BASE + (int)(nccl_emu_ids_made % NCCL_EMU_TAG_RANGE);
    nccl_emu_ids_made++;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = ((uint64_t)getpid() << 32) ^ ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
                 (nccl_emu_ids_made * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)id.creator << 48);
    x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ull;
    id.nonce = x ^ (x >> 29);
    memset(uniqueId, 0, sizeof(*uniqueId));
    memcpy(uniqueId, &id, sizeof(id));
    return ncclSuccess;
}

inline ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
    const char* call = config ? "ncclCommInitRankConfig" : "ncclCommInitRank";
    if (comm == NULL) return nccl_emu_fail(ncclInvalidArgument, call, "comm is NULL");
    *comm = NULL;
    if (nranks < 1) return nccl_emu_fail(ncclInvalidArgument, call, "nranks %d: expected >= 1", nranks);
    if (rank < 0 || rank >= nranks) return nccl_emu_fail(ncclInvalidArgument, call, "rank %d is not in [0, %d)", rank, nranks);
    int nonblocking = 0;
    if (config != NULL) {
        if (config->magic != 0xcafebeef || config->size < offsetof(ncclConfig_t, blocking) + sizeof(int))
            return nccl_emu_fail(ncclInvalidArgument, call, "config was not initialized with NCCL_CONFIG_INITIALIZER");
        if (config->blocking != NCCL_CONFIG_UNDEF_INT && config->blocking != 0 && config->blocking != 1)
            return nccl_emu_fail(ncclInvalidArgument, call, "config->blocking %d: expected 0 or 1", config->blocking);
        nonblocking = config->blocking == 0;
    }
    return nccl_emu_create(comm, nranks, &commId, rank, nonblocking, call);
}

inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
    return ncclCommInitRankConfig(comm, nranks, commId, rank, NULL);
}

inline ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
    if (!nccl_emu_comm_ok(comm)) return nccl_emu_fail(ncclInvalidArgument, "ncclCommGetAsyncError", "comm %p is NULL or not a live communicator", (void*)comm);
    if (asyncError == NULL) return nccl_emu_fail(ncclInvalidArgument, "ncclCommGetAsyncError", "asyncError is NULL");
    if (comm->state == ncclInProgress) {
        if (comm->polls_in_progress > 0) comm->polls_in_progress--;
        else comm->state = ncclSuccess;
    }
    *asyncError = comm->state;
    return ncclSuccess;
}

inline ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
    if (!nccl_emu_comm_ok(comm) || count == NULL) return nccl_emu_fail(ncclInvalidArgument, "ncclCommCount", "invalid comm or NULL count");
    *count = comm->nranks;
    return ncclSuccess;
}
inline ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
    if (!nccl_emu_comm_ok(comm) || rank == NULL) return nccl_emu_fail(ncclInvalidArgument, "ncclCommUserRank", "invalid comm or NULL rank");
    *rank = comm->rank;
    return ncclSuccess;
}

// nothing is ever left in flight (operations finish inside their call): only the state changes
inline ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    NCCL_EMU_TRY(nccl_emu_check_comm(comm, "ncclCommFinalize"));
    return nccl_emu_after_work(comm);
}

inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (comm == NULL) return ncclSuccess;
    if (!nccl_emu_comm_ok(comm)) return nccl_emu_fail(ncclInvalidArgument, "ncclCommDestroy", "comm %p is not a live communicator (destroyed twice?)", (void*)comm);
    NCCL_EMU_MPI(MPI_Comm_free(&comm->mpi), "ncclCommDestroy");
    nccl_emu_forget(comm);
    return ncclSuccess;
}

inline ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (comm == NULL) return ncclSuccess;
    if (!nccl_emu_comm_ok(comm)) return nccl_emu_fail(ncclInvalidArgument, "ncclCommAbort", "comm %p is not a live communicator (destroyed twice?)", (void*)comm);
    nccl_emu_forget(comm);  // its MPI communicator stays allocated: freeing it would need the peers
    return ncclSuccess;
}

inline ncclResult_t ncclGroupStart() {
    if (nccl_emu_group_depth == 0) {
        nccl_emu_group_ops.clear();
        nccl_emu_group_error = ncclSuccess;
    }
    nccl_emu_group_depth++;
    return ncclSuccess;
}

inline ncclResult_t ncclGroupEnd() {
    if (nccl_emu_group_depth == 0) return nccl_emu_fail(ncclInvalidUsage, "ncclGroupEnd", "ncclGroupEnd without ncclGroupStart");
    if (--nccl_emu_group_depth > 0) return ncclSuccess;
    std::vector<NcclEmuOp> ops;
    ops.swap(nccl_emu_group_ops);
    if (nccl_emu_group_error != ncclSuccess) {
        ncclResult_t e = nccl_emu_group_error;
        nccl_emu_group_error = ncclSuccess;
        return nccl_emu_fail(e, "ncclGroupEnd", "an operation of the group failed its checks; none was run");
    }
    ncclResult_t r = nccl_emu_run_group(ops);
    if (r != ncclSuccess) return r;
    ncclResult_t result = ncclSuccess;
    for (const NcclEmuOp& o : ops) {
        if (nccl_emu_after_work(o.comm) == ncclInProgress) result = ncclInProgress;
    }
    return result;
}

inline ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                                  ncclComm_t comm, cudaStream_t stream) {
    NcclEmuOp o = {NCCL_EMU_ALL_REDUCE, sendbuff, recvbuff, count, datatype, op, -1, comm, "ncclAllReduce"};
    return nccl_emu_enqueue(o, stream);
}

inline ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                      ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    NcclEmuOp o = {NCCL_EMU_REDUCE_SCATTER, sendbuff, recvbuff, recvcount, datatype, op, -1, comm, "ncclReduceScatter"};
    return nccl_emu_enqueue(o, stream);
}

inline ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                  ncclComm_t comm, cudaStream_t stream) {
    NcclEmuOp o = {NCCL_EMU_ALL_GATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, -1, comm, "ncclAllGather"};
    return nccl_emu_enqueue(o, stream);
}

inline ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                                  ncclComm_t comm, cudaStream_t stream) {
    NcclEmuOp o = {NCCL_EMU_BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, "ncclBroadcast"};
    return nccl_emu_enqueue(o, stream);
}

inline ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                             cudaStream_t stream) {
    NcclEmuOp o = {NCCL_EMU_SEND, sendbuff, NULL, count, datatype, ncclSum, peer, comm, "ncclSend"};
    return nccl_emu_enqueue(o, stream);
}

inline ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                             cudaStream_t stream) {
    NcclEmuOp o = {NCCL_EMU_RECV, NULL, recvbuff, count, datatype, ncclSum, peer, comm, "ncclRecv"};
    return nccl_emu_enqueue(o, stream);
}

}  // extern "C"
