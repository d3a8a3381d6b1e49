// cuda_pipeline.h: the emulated build's asynchronous copies from global to shared memory (the
// toolkit's pipeline primitives, PTX cp.async on sm_80 and later): `#include <cuda_pipeline.h>` finds
// this file through -Idev/emu, nvcc finds the toolkit's, so a kernel compiles unchanged in both.
//
// - __pipeline_memcpy_async(dst_shared, src_global, size, zfill = 0): size 4, 8 or 16 bytes, both
//   pointers aligned to it (checked: an `emu: error:` line naming the caller's file:line); the last
//   zfill bytes of dst are zeroed instead of copied.
// - __pipeline_commit(), __pipeline_wait_prior(n): no-ops.
// The copy happens when it is issued, by the issuing thread (its racecheck sees a plain write then),
// so the emulator cannot see a wait that is missing or too weak: on a GPU the bytes may land later,
// up to the wait. A missing __syncthreads between one thread's copy and another thread's read is
// still reported, as for any write.
#pragma once
#include "emu.h"

static inline void emu_pipeline_memcpy_async(const char* file, int line, void* dst, const void* src, size_t size,
                                             size_t zfill = 0) {
    if (size != 4 && size != 8 && size != 16)
        emu_misuse("__pipeline_memcpy_async at %s:%d: size %zu is not 4, 8 or 16 bytes", file, line, size);
    if (zfill > size) emu_misuse("__pipeline_memcpy_async at %s:%d: zfill %zu is over the size %zu", file, line, zfill, size);
    if ((uintptr_t)dst % size != 0 || (uintptr_t)src % size != 0)
        emu_misuse("__pipeline_memcpy_async at %s:%d: shared %p and global %p must be aligned to the size, %zu bytes",
                   file, line, dst, src, size);
    memcpy(dst, src, size - zfill);
    if (zfill) memset((char*)dst + size - zfill, 0, zfill);
}
#define __pipeline_memcpy_async(...) emu_pipeline_memcpy_async(__FILE__, __LINE__, __VA_ARGS__)
static inline void __pipeline_commit(void) {}
static inline void __pipeline_wait_prior(size_t) {}
