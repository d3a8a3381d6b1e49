// comm_mpi16.h: the CPU build's MPI path on host buffers: 16-bit (BF16, FP16) reductions as MPI user
// ops (each partial result rounded to the buffer's type, as NCCL reduces bf16 and fp16), the MPI type
// and count that carry a buffer, and the work MPI leaves to the host when a request completes
// (comm_finish_host: the average's 1/N, the in-place reduce_scatter's move). The CPU build's alone
// (MPI without NCCL): the engine's MPI transport (llm/comm/comm_engine_mpi.h) includes it there.
#pragma once

#include "comm_types.h"
#if !(COMM_MPI && !COMM_NCCL)
#error "llm/comm/comm_mpi16.h is the CPU build's MPI path: include it only in builds with MPI and without NCCL"
#endif

// 16-bit buffers over MPI (BF16, FP16): moved as MPI_UINT16_T, reduced by user ops that add (or take
// the max) in float and round each partial result to the buffer's type (to nearest even), as NCCL
// reduces bf16 and fp16. The average multiplies the sum by 1/N in float and rounds once more.
static inline float comm_h16_get(CommDtype dt, uint16_t b) { return dt == COMM_FP16 ? fp16_bits_to_float(b) : bf16_bits_to_float(b); }
static inline uint16_t comm_h16_put(CommDtype dt, float x) { return dt == COMM_FP16 ? fp16_bits_from_float(x) : bf16_bits_from_float(x); }
static inline void comm_h16_reduce(const void* in, void* inout, int n, CommDtype dt, int is_max) {
    const uint16_t* a = (const uint16_t*)in;
    uint16_t* b = (uint16_t*)inout;
    for (int i = 0; i < n; i++) {
        float x = comm_h16_get(dt, a[i]), y = comm_h16_get(dt, b[i]);
        b[i] = comm_h16_put(dt, is_max ? (x > y || x != x ? x : y) : x + y);  // (max keeps NaN, as MPI_MAX on floats may not)
    }
}
static void comm_mpi_sum_bf16(void* in, void* io, int* n, MPI_Datatype*) { comm_h16_reduce(in, io, *n, COMM_BF16, 0); }
static void comm_mpi_max_bf16(void* in, void* io, int* n, MPI_Datatype*) { comm_h16_reduce(in, io, *n, COMM_BF16, 1); }
static void comm_mpi_sum_fp16(void* in, void* io, int* n, MPI_Datatype*) { comm_h16_reduce(in, io, *n, COMM_FP16, 0); }
static void comm_mpi_max_fp16(void* in, void* io, int* n, MPI_Datatype*) { comm_h16_reduce(in, io, *n, COMM_FP16, 1); }
// the MPI op of a 16-bit reduction, created on first use (commutative: x + y = y + x in float)
static MPI_Op comm_mpi_op16(CommDtype dt, int is_max) {
    static MPI_Op ops[2][2];
    static int made[2][2];
    int d = dt == COMM_FP16;
    if (!made[d][is_max]) {
        MPI_User_function* fn = d ? (is_max ? comm_mpi_max_fp16 : comm_mpi_sum_fp16) : (is_max ? comm_mpi_max_bf16 : comm_mpi_sum_bf16);
        mpiCheck(MPI_Op_create(fn, 1, &ops[d][is_max]));
        made[d][is_max] = 1;
    }
    return ops[d][is_max];
}

// multiply n values by s in place (the MPI average); host memory in this build
static inline void comm_finish_host(CommHandle* h) {
    if (h->move_bytes > 0) memmove(h->move_dst, h->move_src, h->move_bytes);
    if (h->scale_dt == COMM_FLOAT) {
        for (size_t i = 0; i < h->scale_n; i++) ((float*)h->scale_buf)[i] *= h->scale;
    } else {
        uint16_t* b = (uint16_t*)h->scale_buf;
        for (size_t i = 0; i < h->scale_n; i++) b[i] = comm_h16_put(h->scale_dt, comm_h16_get(h->scale_dt, b[i]) * h->scale);
    }
    h->move_bytes = 0;
    h->scale_n = 0;
    free(h->counts);
    h->counts = NULL;
    h->pending = 0;
}
// the MPI type that carries a buffer of dt: 16-bit values travel as 16-bit words
static inline MPI_Datatype comm_mpi_type(CommDtype dt) { return dt == COMM_FLOAT ? MPI_FLOAT : MPI_UINT16_T; }
static inline int comm_mpi_count(size_t n, const char* op) {
    if (n > (size_t)INT_MAX) {
        fatal("%s: %zu elements exceed MPI's int count (%d); split the buffer into buckets", op, n, INT_MAX);
    }
    return (int)n;
}
