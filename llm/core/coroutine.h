// coroutine.h: a function run on its own stack that can give the turn back to whoever resumed it and be resumed
// later where it stopped (a stackful coroutine, over POSIX ucontext: makecontext / swapcontext). One thread: the
// coroutine and its caller never run at the same time, so nothing they share needs a lock, and every MPI and CUDA
// call stays on the thread that initialised them.
//
// What uses it: DualPipeV's overlapped pairs (llm/parallel/pipeline_pair.h). A pair's forward and backward each run
// as a coroutine of the ordinary stage_forward / stage_backward code; at each moe all-to-all the running direction
// starts the exchange, yields, and waits for it only when it is resumed after the other direction's next piece. The
// alternative, a stage forward and backward rewritten as resumable state machines (a cursor of slot, layer and
// phase, and every local of stage.h, block.h and moe.h kept in structs between calls), would turn four files the
// reader follows beside the papers into dispatch tables; a coroutine keeps them as they read and marks only the
// points where a direction gives the turn away (llm/sharded/expert_parallel.h's ep_exchange_rows).
//
// The stack: CORO_STACK_BYTES of mmap'd memory (pages are touched only as the call chain grows: OpenBLAS's and
// OpenMP's frames, the emulated build's kernel launches, whose own fibers have their own stacks), a PROT_NONE
// guard page below it, so an overflow faults instead of writing over other memory. A stack is made once
// (coro_stack_alloc) and serves one coroutine after another: the pair runner keeps two for the whole run, not two
// maps and their page faults per pair.
#pragma once
#include "common.h"
#include <sys/mman.h>
#include <ucontext.h>

#define CORO_STACK_BYTES ((size_t)64 << 20)
#define CORO_GUARD_BYTES ((size_t)64 << 10)

typedef struct Coro {
    ucontext_t self;    // where the coroutine stopped (its own stack)
    ucontext_t caller;  // where coro_resume was called
    void (*fn)(void*);
    void* arg;
    int started, done;  // done: fn returned
} Coro;

static void coro_entry(unsigned lo, unsigned hi) {  // (makecontext passes ints: the pointer in two halves)
    Coro* co = (Coro*)(((uintptr_t)hi << 32) | (uintptr_t)lo);
    co->fn(co->arg);
    co->done = 1;
    if (swapcontext(&co->self, &co->caller) != 0) fatal("coroutine: swapcontext failed: %s", strerror(errno));
}

// a stack for coroutines, one at a time: the guard, then CORO_STACK_BYTES (mmap)
static char* coro_stack_alloc(void) {
    char* mem = (char*)mmap(NULL, CORO_GUARD_BYTES + CORO_STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == (char*)MAP_FAILED) fatal("coroutine: cannot map a %zu-byte stack: %s", CORO_STACK_BYTES, strerror(errno));
    if (mprotect(mem, CORO_GUARD_BYTES, PROT_NONE) != 0) fatal("coroutine: mprotect of the guard: %s", strerror(errno));
    return mem;
}

static void coro_stack_free(char* mem) {
    if (mem != NULL && munmap(mem, CORO_GUARD_BYTES + CORO_STACK_BYTES) != 0) fatal("coroutine: munmap: %s", strerror(errno));
}

// a coroutine on `stack` (coro_stack_alloc's; no other coroutine on it may be suspended) that will run fn(arg)
// when first resumed
static void coro_init(Coro* co, char* stack, void (*fn)(void*), void* arg) {
    memset(co, 0, sizeof(*co));
    co->fn = fn;
    co->arg = arg;
    if (getcontext(&co->self) != 0) fatal("coroutine: getcontext failed: %s", strerror(errno));
    co->self.uc_stack.ss_sp = stack + CORO_GUARD_BYTES;
    co->self.uc_stack.ss_size = CORO_STACK_BYTES;
    co->self.uc_link = NULL;
    uintptr_t p = (uintptr_t)co;
    makecontext(&co->self, (void (*)(void))coro_entry, 2, (unsigned)(p & 0xffffffffu), (unsigned)(p >> 32));
}

// runs the coroutine until it yields or returns; 1 if it has returned
static int coro_resume(Coro* co) {
    if (co->done) return 1;
    co->started = 1;
    if (swapcontext(&co->caller, &co->self) != 0) fatal("coroutine: swapcontext failed: %s", strerror(errno));
    return co->done;
}

// from inside the coroutine: back to the coro_resume that ran it
static void coro_yield(Coro* co) {
    if (swapcontext(&co->self, &co->caller) != 0) fatal("coroutine: swapcontext failed: %s", strerror(errno));
}

// the end of a coroutine (its stack free for the next)
static void coro_free(Coro* co) {
    if (co->started && !co->done) fatal("coroutine: freed while suspended");
    memset(co, 0, sizeof(*co));
}
