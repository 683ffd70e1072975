// emu_shim.h: lets g++ compile refcomp's generated CUDA source for the host.
//
// The emulator passes this header with `-include`, so the generated translation unit is compiled
// unchanged. CUDA keywords become plain C++; threadIdx/blockIdx/blockDim/gridDim and `__shared__`
// arrays are `thread_local`, so each worker thread of the grid runner (emu_runtime.cpp) has its own
// block state.
// A launch runs its kernel in one of three modes, chosen per kernel by emulator.py (emu_regions.py):
//   threads  (no barrier): a plain call per thread of each block.
//   regions  (the kernel marks its barrier-free regions with RC_FOR_EACH_THREAD): one call per
//            block; each region is a loop over the block's threads, so __syncthreads() between two
//            regions is simply the end of one loop and the start of the next (MCUDA / POCL work-item
//            loops). Values living across a barrier are block-uniform or kept in RC_THREAD_SLOTS.
//   fibers   (barriers, no markers: hand-written kernels): every thread is a fiber with its own
//            stack; __syncthreads() switches back to the scheduler, which resumes every live thread.
// Independent blocks run in parallel on REFCOMP_EMU_THREADS workers (default: the usable cores);
// blocks only share memory through the kernel's buffers, so the result does not depend on the order.
// A kernel in threads mode that reaches __syncthreads() fails with an error that the Python side
// turns into a RefcompError, as does a barrier inside a region (divergent control flow).
#pragma once
#include <float.h>
#include <limits.h>
// C's math.h, not libstdc++'s wrapper around <cmath>: generated code calls the C names (expf, sqrt),
// and the wrapper's overload templates were half of every library's fixed g++ time and of the
// precompiled header's 17.6 MB. The machine code of the 234 libraries compared with both headers
// (docs/ARCHITECTURE.md, "host emulator") is the same.
#define _GLIBCXX_INCLUDE_NEXT_C_HEADERS
#include <math.h>
#undef _GLIBCXX_INCLUDE_NEXT_C_HEADERS
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#if !defined(__x86_64__) || defined(REFCOMP_EMU_UCONTEXT)
#define EMU_USE_UCONTEXT 1
#include <ucontext.h>
#endif
#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// ---- CUDA keywords -------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __noinline__ __attribute__((noinline))
#define __forceinline__ inline __attribute__((always_inline))
#define __shared__ static thread_local
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define EMU_EXPORT extern "C" __attribute__((visibility("default")))

struct uint3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct __align__(8) float2 { float x, y; };
struct __align__(16) float4 { float x, y, z, w; };
struct __align__(8) int2 { int x, y; };
struct __align__(16) int4 { int x, y, z, w; };
static inline float2 make_float2(float x, float y) { return {x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// External linkage (hidden by -fvisibility=hidden): the compiler must assume the opaque fiber switch
// inside __syncthreads() may change them, so it never caches threadIdx across a barrier.
// `inline`: one definition shared by the library's two parts (the kernels and emu_runtime.cpp).
inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;
static const int warpSize = 32;

// ---- math and intrinsics (glibc's math.h declares __expf etc. itself, hence macros) -----------------
#define __expf expf
#define __logf logf
#define __log2f log2f
#define __log10f log10f
#define __exp10f exp10f
#define __sinf sinf
#define __cosf cosf
#define __tanf tanf
#define __powf powf
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float fdividef(float a, float b) { return a / b; }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }

// CUDA's integer/float min and max overloads (mixed-type calls are ambiguous there too).
#define EMU_MINMAX(T) \
    static inline T min(T a, T b) { return a < b ? a : b; } \
    static inline T max(T a, T b) { return a > b ? a : b; }
EMU_MINMAX(int) EMU_MINMAX(unsigned int) EMU_MINMAX(long long) EMU_MINMAX(unsigned long long)
EMU_MINMAX(long) EMU_MINMAX(unsigned long)
#undef EMU_MINMAX
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }

template <class T> static inline T __ldg(const T* p) { return *p; }
// Threads of a block never overlap, so atomics within a block are plain read-modify-writes; across
// blocks (which run in parallel) they are real atomics. refcomp's templates use none: a float
// atomicAdd across blocks would make the sum's order, and so its rounding, depend on the schedule.
#define EMU_ATOMIC_RMW(name, expr) \
    template <class T> static inline T name(T* p, T v) { \
        T old, next; __atomic_load(p, &old, __ATOMIC_RELAXED); \
        do { next = (expr); } while (!__atomic_compare_exchange(p, &old, &next, false, __ATOMIC_SEQ_CST, \
                                                                __ATOMIC_RELAXED)); \
        return old; }
EMU_ATOMIC_RMW(atomicAdd, old + v)
EMU_ATOMIC_RMW(atomicSub, old - v)
EMU_ATOMIC_RMW(atomicMax, old > v ? old : v)
EMU_ATOMIC_RMW(atomicMin, old < v ? old : v)
#undef EMU_ATOMIC_RMW
template <class T> static inline T atomicExch(T* p, T v) { T old; __atomic_exchange(p, &v, &old, __ATOMIC_SEQ_CST); return old; }
template <class T> static inline T atomicCAS(T* p, T cmp, T v) {
    __atomic_compare_exchange(p, &cmp, &v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return cmp; }
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() {}

// ---- regions (see the header comment; the prelude of generated code defines the GPU versions) -----
// RC_FOR_EACH_THREAD runs the statement after it once per thread of the block, with a local
// `threadIdx` shadowing the global one; RC_SLOT is the thread's index in the block, for arrays of
// RC_THREAD_SLOTS(n) values that live across a barrier (on a GPU: one value, RC_SLOT 0).
static constexpr bool emu_in_region = false;
// The innermost loop, over threadIdx.x, is `omp simd` (the build passes -fopenmp-simd, which needs no
// OpenMP runtime): between two barriers the threads of a CUDA block are unordered and race-free, so
// the compiler may run neighbouring threads in the lanes of one vector instruction. Each lane still
// performs its own thread's operations in program order, so every float result is bit for bit what
// the one-thread-after-another loop computes (only -ffast-math could change that, and it is never
// used). Without vector lanes a thread's sum is a chain of dependent additions, each waiting for the
// last. The counters are 64-bit so the compiler can see the slot index never wraps. A build without
// -fopenmp-simd (the sanitizer's) ignores the pragma and runs the threads one after another.
#define EMU_SIMD _Pragma("omp simd")
#define RC_FOR_EACH_THREAD                                                                              \
    for (unsigned long emu_z = 0, emu_row = 0, emu_bx = blockDim.x, emu_by = blockDim.y,                \
                       emu_bz = blockDim.z; emu_z < emu_bz; ++emu_z)                                    \
        for (unsigned long emu_y = 0; emu_y < emu_by; ++emu_y, emu_row += emu_bx)                       \
            EMU_SIMD for (unsigned long emu_x = 0; emu_x < emu_bx; ++emu_x)                             \
                if (const uint3 threadIdx = {(unsigned)emu_x, (unsigned)emu_y, (unsigned)emu_z};        \
                    ((void)threadIdx, true))                                                            \
                    if (constexpr bool emu_in_region = true; emu_in_region)
#define RC_THREAD_SLOTS(n) (n)
#define RC_SLOT (emu_row + emu_x)

// ---- the grid runner ------------------------------------------------------------------------------
// emu_runtime.cpp: the worker threads, fibers, launch entry and error state. It is compiled once per
// set of flags (emu_build.runtime_object) and linked into every library, which therefore still has
// its own copy and its own state, but g++ no longer generates that code again for each library.
enum { EMU_THREADS = 0, EMU_REGIONS = 1, EMU_FIBERS = 2 };
// __syncthreads(): a fiber yields to the scheduler; between two regions it is the loop boundary
// itself (nothing to do); inside a region, or in a kernel run as plain threads, it is an error.
void emu_syncthreads(int line, bool in_region);  // hidden (-fvisibility=hidden): within the library
#define __syncthreads() emu_syncthreads(__LINE__, emu_in_region)
