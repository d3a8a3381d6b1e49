// comm_transport.h: which transport carries this build's collectives, its headers, and the checks of
// its calls. The bottom of llm/comm/: every other comm header includes it through llm/comm/comm_types.h.
//
// Transports. One code path per kind of memory:
//     CUDA build      NCCL on a communication stream; MPI only starts the processes and carries
//                     each group's ncclUniqueId
//     emulated build  the same NCCL code, against nccl_emu.h (dev/emu/, reached through -Idev/emu):
//                     NCCL's API implemented over MPI on the CPU, with NCCL's semantics and argument
//                     checks, so CI runs the code every multi-GPU run takes
//     CPU build       MPI on host memory
//     without MPI     (-DLLM_NO_MPI: `make NO_MPI=1`, or the Makefile found no MPI; the CUDA build
//                     also when it found no NCCL) a one-process mesh: every group has one rank, the
//                     collectives are local copies, mpi.h is not needed. Asking for more than one
//                     process (a layout, or a launch by mpirun) is refused with one line.
// COMM_MPI and COMM_NCCL say which; the files of one transport (llm/comm/watchdog_mpi.h,
// llm/comm/watchdog_nccl.h, llm/comm/comm_mpi16.h, and the engine's llm/comm/comm_engine_nccl.h,
// comm_engine_mpi.h, comm_engine_none.h) are chosen by which one is included, and stop with an #error
// in a build without their transport.
//
// Errors. Every MPI call goes through mpiCheck and every NCCL call through ncclCheck; a failure
// prints one line naming the call's file:line and ends the whole job (comm_abort_all: MPI_Abort).
#pragma once

#include "../core/common.h"
#include <limits.h>

// which transport: MPI unless -DLLM_NO_MPI; NCCL over it in the builds with kernels
#ifdef LLM_NO_MPI
#define COMM_MPI 0
#else
#define COMM_MPI 1
#endif
#define COMM_NCCL (COMM_MPI && LLM_HAS_KERNELS)

#if COMM_MPI
// the C API only: Open MPI's deprecated C++ bindings would need -lmpi_cxx
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#endif
#if COMM_NCCL && LLM_BUILD_CUDA
#include <nccl.h>
#if NCCL_VERSION_CODE < 21000
#error "llm/comm/comm_transport.h needs NCCL >= 2.10 (ncclAvg)"
#endif
#elif COMM_NCCL
#include "nccl_emu.h"  // NCCL's API over MPI, run on the CPU
#endif

// ----------------------------------------------------------------------------
// checks, and ending the job

// ends every process of the job now, from any one rank (MPI_Abort); without MPI, this process
[[noreturn]] static inline void comm_abort_all(int status) {
    fflush(stdout);
    fflush(stderr);
#if COMM_MPI
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized) MPI_Abort(MPI_COMM_WORLD, status);
#endif
    exit(status);
}

#if COMM_MPI
static inline void mpi_check(int err, const char* call, const char* file, int line) {
    if (err == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len] = '\0';
    fprintf(stderr, "error: MPI: %s failed: %s (%s:%d)\n", call, len ? msg : "unknown error", file, line);
    comm_abort_all(EXIT_FAILURE);
}
#define mpiCheck(call) mpi_check((call), #call, __FILE__, __LINE__)
#endif

#if COMM_NCCL
static inline void nccl_check(ncclResult_t r, const char* file, int line) {
    if (r == ncclSuccess) return;
#if NCCL_VERSION_CODE >= 21300
    const char* last = ncclGetLastError(NULL);
#else
    const char* last = "";
#endif
    fprintf(stderr, "error: NCCL: %s%s%s (%s:%d)\n", ncclGetErrorString(r), (last && last[0]) ? ": " : "",
            last ? last : "", file, line);
    comm_abort_all(EXIT_FAILURE);
}
#define ncclCheck(r) nccl_check((r), __FILE__, __LINE__)

// The communicators are non-blocking (ncclConfig_t.blocking = 0: no NCCL call may block the host past
// the watchdog, llm/comm/watchdog_nccl.h). A call on one returns ncclInProgress while NCCL still works
// on it in the background; the communicator may be used again once ncclCommGetAsyncError no longer
// reports ncclInProgress. r: what the call returned. An error ends the job with the call's file:line.
// (A collective that never completes on the GPU is the watchdog thread's to see, not this loop's.)
static void nccl_settle(ncclComm_t comm, ncclResult_t r, const char* file, int line) {
    if (r != ncclInProgress) nccl_check(r, file, line);
    ncclResult_t state = r;
    for (long spins = 0; state == ncclInProgress; spins++) {
        nccl_check(ncclCommGetAsyncError(comm, &state), file, line);
        if (state == ncclInProgress && spins > 100) usleep(20);
    }
    nccl_check(state, file, line);
}
#endif
