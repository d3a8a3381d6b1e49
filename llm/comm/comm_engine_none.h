// comm_engine_none.h: the engine's transport in a build without MPI (-DLLM_NO_MPI,
// llm/comm/comm_transport.h): one process, so every group has one rank and llm/comm/comm_engine.h
// finishes every call itself (a local copy). comm_run_none is there for the engine's dispatch only: a
// group of more ranks cannot exist here, and reaching it ends the program with one line.
#pragma once

#include "comm_types.h"
#if COMM_MPI
#error "llm/comm/comm_engine_none.h is the engine without MPI: include it only in builds without MPI (LLM_NO_MPI)"
#endif

static void comm_run_none(Comm* c, const CommCall* call, CommHandle* h) {
    (void)h;
    const char* name = comm_kind_name(call->kind);
    const int N = c->group_size[call->g];
    fatal("%s: a group of %d ranks in a build without MPI", name, N);  // unreachable: every group has one rank
}
