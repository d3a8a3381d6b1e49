// emu_fiber.h: user-space fibers, one per emulated CUDA thread. A fiber is a stack (mmap'd, with a
// PROT_NONE guard region below it) and a saved stack pointer; switching saves the callee-saved
// registers on the old stack and pops them from the new one (x86-64 assembly: 7-15 ns per switch
// with the bookkeeping around it). Other architectures fall back to ucontext, which makes a system
// call per switch (about 12x slower).
// Every switch tells AddressSanitizer (so it does not report the other stack's frames) and, in the
// TSan mode, ThreadSanitizer (each fiber is a TSan fiber, switched without synchronisation).
// Part of dev/emu/emu.h; not meant to be included on its own.
#pragma once

#include <sys/mman.h>
#if EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/asan_interface.h>
#endif
#if EMU_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#if defined(__x86_64__) && !defined(EMU_UCONTEXT)
#define EMU_FIBER_ASM 1
#else
#define EMU_FIBER_ASM 0
#include <ucontext.h>
#endif

// below each stack: PROT_NONE pages, 64 KiB, so that a frame with local arrays up to that size
// faults there instead of writing into the next fiber's stack
static const size_t EMU_GUARD_BYTES = 64 * 1024;

struct EmuCtx {
    void* sp;               // saved stack pointer while switched out (assembly switch)
    char* stack_lo;         // lowest usable byte of the stack; the guard region lies just below
    size_t stack_size;      // usable bytes
    void* tsan_fiber;       // TSan mode: this context's TSan fiber
    void* asan_fake_stack;  // ASan: the fake stack saved while switched out
#if !EMU_FIBER_ASM
    ucontext_t uc;
#endif
};

#if EMU_FIBER_ASM
// emu_ctx_swap(&from->sp, to->sp): push rbp rbx r12-r15, save rsp, load the other rsp, pop its
// registers and return into it. A new stack is prepared so that this `ret` enters the fiber's
// entry function (see emu_ctx_make). MXCSR and the x87 control word are not switched: no
// emulated thread changes them. It is file-scope assembly, so the compiler cannot see its body
// and must assume that a switch reads and writes all memory (threadIdx, barrier state); the
// COMDAT group lets any number of translation units include it.
extern "C" __attribute__((visibility("hidden"))) void emu_ctx_swap(void** save_sp, void* to_sp);
__asm__(
    ".pushsection .text.emu_ctx_swap,\"axG\",@progbits,emu_ctx_swap,comdat\n"
    ".globl emu_ctx_swap\n"
    ".hidden emu_ctx_swap\n"
    ".type emu_ctx_swap,@function\n"
    ".p2align 4\n"
    "emu_ctx_swap:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size emu_ctx_swap, .-emu_ctx_swap\n"
    ".popsection\n");
#endif

// the context of the calling OS thread itself (the scheduler runs on it)
EMU_NOTSAN static inline void emu_ctx_init_self(EmuCtx* c) {
    memset((void*)c, 0, sizeof(*c));
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        void* lo = NULL;
        size_t size = 0;
        pthread_attr_getstack(&attr, &lo, &size);
        c->stack_lo = (char*)lo;
        c->stack_size = size;
        pthread_attr_destroy(&attr);
    }
#if EMU_TSAN
    c->tsan_fiber = __tsan_get_current_fiber();
#endif
}

// a new fiber with a stack of at least stack_bytes that starts in entry() on its first switch-in;
// entry must never return. `color` (0..63) moves the top of the stack by color * 1 KiB + 64 bytes:
// stacks are allocated at a large power-of-two stride, so without it the hot top frames of all
// fibers fall into the same cache sets and evict each other (3x slower at 1024 threads).
// Returns false if the stack cannot be mapped.
EMU_NOTSAN static inline bool emu_ctx_make(EmuCtx* c, size_t stack_bytes, void (*entry)(void), int color) {
    memset((void*)c, 0, sizeof(*c));
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    stack_bytes = (stack_bytes + page - 1) / page * page;
    size_t guard = (EMU_GUARD_BYTES + page - 1) / page * page;
    size_t shift = (size_t)(color & 63) * (1024 + 64);
    size_t extra = (64 * (1024 + 64) + page - 1) / page * page;
    char* base = (char*)mmap(NULL, guard + stack_bytes + extra, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
    if (base == (char*)MAP_FAILED) return false;
    if (mprotect(base, guard, PROT_NONE) != 0) return false;  // guard pages: overflow faults
    c->stack_lo = base + guard;
    c->stack_size = (stack_bytes + shift) & ~(size_t)15;
#if EMU_FIBER_ASM
    uintptr_t top = (uintptr_t)(c->stack_lo + c->stack_size);
    void** sp = (void**)top;
    *--sp = NULL;             // entry's return address: never used (entry never returns)
    *--sp = (void*)entry;     // the first emu_ctx_swap into this fiber returns here, rsp % 16 == 8
    for (int i = 0; i < 6; i++) *--sp = NULL;  // rbp rbx r12 r13 r14 r15
    c->sp = (void*)sp;
#else
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = c->stack_lo;
    c->uc.uc_stack.ss_size = c->stack_size;
    c->uc.uc_link = NULL;
    makecontext(&c->uc, entry, 0);
#endif
#if EMU_TSAN
    c->tsan_fiber = __tsan_create_fiber(0);
#endif
    return true;
}

// switch from the running context `from` to `to`; returns when something switches back to `from`
EMU_NOTSAN static inline void emu_ctx_switch(EmuCtx* from, EmuCtx* to) {
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&from->asan_fake_stack, to->stack_lo, to->stack_size);
#endif
#if EMU_TSAN
    __tsan_switch_to_fiber(to->tsan_fiber, __tsan_switch_to_fiber_no_sync);
#endif
#if EMU_FIBER_ASM
    emu_ctx_swap(&from->sp, to->sp);
#else
    swapcontext(&from->uc, &to->uc);
#endif
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(from->asan_fake_stack, NULL, NULL);
#endif
}

// the first thing a new fiber's entry function does
EMU_NOTSAN static inline void emu_ctx_entered(void) {
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
}
