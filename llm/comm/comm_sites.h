// comm_sites.h: the call-site macros of llm/comm/comm.h's API: each call of comm_all_reduce, comm_wait,
// comm_send, ... first records its file:line for the watchdog's line (llm/comm/watchdog.h). Part of
// llm/comm/comm.h, which includes it last: included earlier, the macros would rename the functions'
// definitions.
#pragma once

// The call sites: each API call records its file:line for the watchdog's line (llm/comm/watchdog.h)
// before the function of the same name runs (a function-like macro does not expand inside itself).
static inline void comm_site(Comm* c, const char* file, int line) {
    c->wd.site_file = file;
    c->wd.site_line = line;
}
#define COMM_AT(c) comm_site((c), __FILE__, __LINE__)
#define comm_all_reduce(c, ...) (COMM_AT(c), comm_all_reduce((c), __VA_ARGS__))
#define comm_reduce_scatter(c, ...) (COMM_AT(c), comm_reduce_scatter((c), __VA_ARGS__))
#define comm_all_gather(c, ...) (COMM_AT(c), comm_all_gather((c), __VA_ARGS__))
#define comm_broadcast(c, ...) (COMM_AT(c), comm_broadcast((c), __VA_ARGS__))
#define comm_barrier(c, ...) (COMM_AT(c), comm_barrier((c), __VA_ARGS__))
#define comm_all_reduce_start(c, ...) (COMM_AT(c), comm_all_reduce_start((c), __VA_ARGS__))
#define comm_reduce_scatter_start(c, ...) (COMM_AT(c), comm_reduce_scatter_start((c), __VA_ARGS__))
#define comm_all_gather_start(c, ...) (COMM_AT(c), comm_all_gather_start((c), __VA_ARGS__))
#define comm_wait(c, ...) (COMM_AT(c), comm_wait((c), __VA_ARGS__))
#define comm_send(c, ...) (COMM_AT(c), comm_send((c), __VA_ARGS__))
#define comm_recv(c, ...) (COMM_AT(c), comm_recv((c), __VA_ARGS__))
#define comm_sendrecv(c, ...) (COMM_AT(c), comm_sendrecv((c), __VA_ARGS__))
#define comm_p2p_batch(c, ...) (COMM_AT(c), comm_p2p_batch((c), __VA_ARGS__))
#define comm_gather_bytes(c, ...) (COMM_AT(c), comm_gather_bytes((c), __VA_ARGS__))
#define comm_all_gather_host(c, ...) (COMM_AT(c), comm_all_gather_host((c), __VA_ARGS__))
#define comm_host_min(c, ...) (COMM_AT(c), comm_host_min((c), __VA_ARGS__))
