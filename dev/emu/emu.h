// emu.h: the CUDA subset of this project, run on the CPU. Included by llm/core/common.h in the emulated
// build (g++ -DLLM_EMU, never __CUDACC__): the project's CUDA kernel source compiles unchanged with
// g++ and every emulated CUDA thread runs as a user-space fiber. Header-only: every function is
// static or inline and all global state is inline variables, so any number of translation units
// may include it.
//
// What is where:
//   emu.h          keywords (__global__, __shared__, ...), built-in indices, EXTERN_SHARED
//   emu_fiber.h    the fibers: stacks, the x86-64 context switch, sanitizer annotations
//   emu_sched.h    blocks of fibers: barriers, warp collectives, misuse reports, launch_kernel
//   emu_device.h   device-side math, bf16 helpers, atomics, cache-hinted loads and stores
//   emu_runtime.h  the CUDA runtime API (memory, copies, streams, events, device properties)
//   emu_symbol.h   a kernel's name from its address, for error messages
//   emu_racecheck.h  the shared-memory race detector (-DEMU_RACECHECK builds)
//   mma.h          the WMMA subset (nvcuda::wmma), included by kernels as <mma.h> (-Idev/emu)
// See README.md beside this file for the supported subset and the environment variables.
#pragma once

#if defined(__CUDACC__) || defined(__CUDA_ARCH__)
#error "dev/emu/emu.h is for the emulated build (g++ -DLLM_EMU); nvcc uses the real CUDA runtime"
#endif
#if !defined(__cplusplus) || __cplusplus < 201703L
#error "dev/emu/emu.h needs C++17 (g++ -std=c++17 -x c++)"
#endif

// Standard headers come first: some libstdc++ headers spell __attribute__((__noinline__)), which
// the CUDA keyword __noinline__ defined below would break if they were parsed after it.
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <stdarg.h>
#include <math.h>
#include <time.h>
#include <assert.h>
#include <unistd.h>
#include <pthread.h>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// The toolkit's own declarations: driver_types.h (cudaError_t, cudaDeviceProp, ...),
// vector_types.h (dim3, uint3, float4, ...), the runtime's extern "C" prototypes, and the
// host-side bf16/fp16/fp8 types. They compile without __CUDACC__; <cuda_runtime.h> does not.
#include <cuda_runtime_api.h>
#include <vector_functions.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

// ----------------------------------------------------------------------------
// which sanitizer is on

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifndef EMU_ASAN
#define EMU_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define EMU_TSAN_ON 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define EMU_TSAN_ON 1
#endif
#endif
#ifndef EMU_TSAN_ON
#define EMU_TSAN_ON 0
#endif
#if defined(EMU_TSAN) && !EMU_TSAN_ON
#error "EMU_TSAN needs a ThreadSanitizer build: add -fsanitize=thread"
#endif
// racecheck (emu_racecheck.h): -fsanitize=thread only for its instrumentation, whose calls
// (__tsan_read4, ...) the emulator defines itself; link without -fsanitize=thread (no libtsan)
#if defined(EMU_RACECHECK)
#if !EMU_TSAN_ON
#error "EMU_RACECHECK needs g++ -fsanitize=thread when compiling (and not when linking): see dev/emu/emu.mk"
#endif
#if defined(EMU_TSAN)
#error "EMU_RACECHECK and EMU_TSAN exclude each other"
#endif
#undef EMU_RACECHECK
#define EMU_RACECHECK 1
#else
#define EMU_RACECHECK 0
#endif
#if EMU_TSAN_ON && !defined(EMU_TSAN) && !EMU_RACECHECK
#define EMU_TSAN 1  // -fsanitize=thread alone also selects the TSan fiber mode
#endif
#ifdef EMU_TSAN
#undef EMU_TSAN
#define EMU_TSAN 1
#else
#define EMU_TSAN 0
#endif

// the emulator's own bookkeeping is shared by all fibers of a block without happens-before (that
// is the point of the TSan mode), so TSan must not instrument it; in racecheck, the emulator's own
// accesses are not the kernel's and must not be checked
#if EMU_TSAN || EMU_RACECHECK
#define EMU_NOTSAN __attribute__((no_sanitize_thread))
#else
#define EMU_NOTSAN
#endif

// ----------------------------------------------------------------------------
// CUDA keywords. The toolkit headers define some of them (to nothing, in host mode); redefine all.

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __managed__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#undef __align__
#undef __grid_constant__
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __grid_constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// __restrict__ is a g++ keyword already.

// Static shared memory: one instance per OS thread. The fibers of a block share their OS thread and
// blocks never interleave on one, so each block sees one instance, as on a GPU (but it keeps the
// previous block's contents, where a GPU's is undefined).
#define __shared__ static thread_local

// Dynamic shared memory (llm/core/common.h defines it as `extern __shared__` for nvcc): a pointer to the
// block's heap buffer of exactly the launch's byte count, filled with 0xFF. Use it inside kernels.
#define EXTERN_SHARED(type, name) type* const name = reinterpret_cast<type*>(emu_dynamic_smem())

// ----------------------------------------------------------------------------
// built-in indices. threadIdx is rewritten on every fiber switch; the others once per block.
// (They are variables, not macros, so a struct member such as cudaDeviceProp::warpSize still works.)

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
inline constexpr int warpSize = 32;

static inline void* emu_dynamic_smem(void);

#include "emu_fiber.h"
#include "emu_symbol.h"
#include "emu_runtime.h"
#include "emu_sched.h"
#include "emu_device.h"
