// emu_shim.h: lets g++ compile refcomp's generated CUDA source for the host.
//
// The emulator passes this header with `-include`, so the generated translation unit is compiled
// unchanged. CUDA keywords become plain C++; `__shared__` arrays become function-level `static`
// (blocks run one after another, so one copy per kernel is exactly one copy per running block);
// threadIdx/blockIdx/blockDim/gridDim are file-level globals that the grid runner below sets before
// it runs each thread. Kernels whose signature says uses_barrier=true run each thread of a block as a
// fiber with its own stack: __syncthreads() switches back to the scheduler, which resumes every live
// thread in turn, so the barrier is real. Kernels that said uses_barrier=false run each thread to
// completion with a plain call (fast path); if such a kernel reaches __syncthreads() the launch fails
// with an error that the Python side turns into a RefcompError.
#pragma once
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
#define __shared__ static
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
uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
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
// Blocks run one at a time and threads never overlap, so atomics are plain read-modify-writes.
template <class T> static inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <class T> static inline T atomicSub(T* p, T v) { T old = *p; *p = old - v; return old; }
template <class T> static inline T atomicMax(T* p, T v) { T old = *p; *p = old > v ? old : v; return old; }
template <class T> static inline T atomicMin(T* p, T v) { T old = *p; *p = old < v ? old : v; return old; }
template <class T> static inline T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <class T> static inline T atomicCAS(T* p, T cmp, T v) { T old = *p; if (old == cmp) *p = v; return old; }
static inline void __threadfence() {}
static inline void __threadfence_block() {}

// ---- grid runner ---------------------------------------------------------------------------------
static char emu_error_msg[512];
static void emu_set_error(const char* msg) {
    if (!emu_error_msg[0]) snprintf(emu_error_msg, sizeof emu_error_msg, "%s", msg);
}
EMU_EXPORT const char* refcomp_emu_error(void) { return emu_error_msg; }

#ifdef EMU_ASAN
static const size_t EMU_STACK = 512 * 1024;  // ASan's redzones make frames larger
#else
static const size_t EMU_STACK = 64 * 1024;
#endif
static const size_t EMU_GUARD = 4096;  // PROT_NONE page below each stack: overflow faults, not corrupts

struct EmuFiber {
    void* sp;            // saved stack pointer (asm switch) ...
#ifdef EMU_USE_UCONTEXT
    ucontext_t uc;       // ... or saved context (ucontext fallback)
#endif
    char* stack;         // lowest usable byte
    uint3 tid;
    int done;
    int barrier_line;    // source line of the __syncthreads() it waits at
    void* fake_stack;    // ASan bookkeeping
};

static struct {
    EmuFiber* fibers;
    int cur;             // fiber now running, or -1 on the scheduler
    void* sched_sp;
#ifdef EMU_USE_UCONTEXT
    ucontext_t sched_uc;
#endif
    const void* sched_stack_bottom;  // ASan: the scheduler's stack, learnt at the first switch
    size_t sched_stack_size;
    void (*body)(void*);
    void* ctx;
    int uses_barrier;
} emu;

#ifndef EMU_USE_UCONTEXT
// Save callee-saved registers on the current stack, store its pointer in *from, load `to`, restore.
// No signal mask is touched, so a switch is a few nanoseconds instead of swapcontext's syscall.
extern "C" void refcomp_emu_switch(void** from, void* to);
__asm__(
    ".text\n.p2align 4\n.globl refcomp_emu_switch\n.hidden refcomp_emu_switch\n"
    ".type refcomp_emu_switch,@function\nrefcomp_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n"
    ".size refcomp_emu_switch,.-refcomp_emu_switch\n");
#endif

static void emu_to_scheduler(EmuFiber* f, bool dying) {
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(dying ? nullptr : &f->fake_stack, emu.sched_stack_bottom,
                                   emu.sched_stack_size);
#endif
    (void)dying;
#ifdef EMU_USE_UCONTEXT
    swapcontext(&f->uc, &emu.sched_uc);
#else
    refcomp_emu_switch(&f->sp, emu.sched_sp);
#endif
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(f->fake_stack, nullptr, nullptr);
#endif
}

static void emu_fiber_main() {
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &emu.sched_stack_bottom, &emu.sched_stack_size);
#endif
    EmuFiber* f = &emu.fibers[emu.cur];
    emu.body(emu.ctx);
    f->done = 1;
    emu_to_scheduler(f, true);  // never resumed
    abort();
}

// __syncthreads(): a fiber yields to the scheduler; a fast-path thread records the misuse.
static __attribute__((noinline)) void emu_syncthreads(int line) {
    if (!emu.uses_barrier) {
        emu_set_error("__syncthreads() reached in a kernel launched with uses_barrier=False");
        return;
    }
    EmuFiber* f = &emu.fibers[emu.cur];
    f->barrier_line = line;
    emu_to_scheduler(f, false);
}
#define __syncthreads() emu_syncthreads(__LINE__)

static void emu_resume(EmuFiber* f) {
#ifdef EMU_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f->stack, EMU_STACK);
#endif
#ifdef EMU_USE_UCONTEXT
    swapcontext(&emu.sched_uc, &f->uc);
#else
    refcomp_emu_switch(&emu.sched_sp, f->sp);
#endif
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

static void emu_start_fiber(EmuFiber* f) {
    f->done = 0;
    f->barrier_line = 0;
    f->fake_stack = nullptr;
#ifdef EMU_USE_UCONTEXT
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack;
    f->uc.uc_stack.ss_size = EMU_STACK;
    f->uc.uc_link = nullptr;
    makecontext(&f->uc, (void (*)())emu_fiber_main, 0);
#else
    // Initial frame as refcomp_emu_switch leaves it: six zeroed registers, then the return address
    // emu_fiber_main, then a dummy return address so emu_fiber_main starts with rsp % 16 == 8.
    uintptr_t top = ((uintptr_t)(f->stack + EMU_STACK)) & ~(uintptr_t)15;
    void** sp = (void**)top;
    *--sp = nullptr;
    *--sp = (void*)&emu_fiber_main;
    for (int r = 0; r < 6; ++r) *--sp = nullptr;
    f->sp = sp;
#endif
}

// Runs one block with barriers: every round resumes each live fiber until its next __syncthreads()
// or its exit. After a round, all live fibers must wait at the same __syncthreads() (CUDA forbids
// divergent barriers); threads that already exited no longer take part, as on sm_70+.
static int emu_run_block_fibers(int n) {
    for (int i = 0; i < n; ++i) emu_start_fiber(&emu.fibers[i]);
    int alive = n;
    while (alive > 0) {
        int line = -1;
        for (int i = 0; i < n; ++i) {
            EmuFiber* f = &emu.fibers[i];
            if (f->done) continue;
            threadIdx = f->tid;
            emu.cur = i;
            emu_resume(f);
            emu.cur = -1;
            if (f->done) { --alive; continue; }
            if (line < 0) line = f->barrier_line;
            else if (f->barrier_line != line) {
                snprintf(emu_error_msg, sizeof emu_error_msg,
                         "divergent __syncthreads(): in block (%u,%u,%u) thread (%u,%u,%u) waits at the "
                         "barrier on line %d while an earlier thread waits at line %d",
                         blockIdx.x, blockIdx.y, blockIdx.z, f->tid.x, f->tid.y, f->tid.z,
                         f->barrier_line, line);
                return 1;
            }
        }
    }
    return 0;
}

// Runs `body(ctx)` once per thread of the grid. Returns 0, or 1 with refcomp_emu_error() set.
static int emu_run_grid(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        int uses_barrier, void (*body)(void*), void* ctx) {
    emu_error_msg[0] = 0;
    gridDim = dim3(gx, gy, gz);
    blockDim = dim3(bx, by, bz);
    emu.body = body;
    emu.ctx = ctx;
    emu.uses_barrier = uses_barrier;
    emu.cur = -1;
    const int n = (int)(bx * by * bz);
    char* region = nullptr;
    size_t region_size = (EMU_STACK + EMU_GUARD) * (size_t)n;
    if (uses_barrier) {
        // Stacks live for one launch only, so a process that loads many modules does not keep them.
        region = (char*)mmap(nullptr, region_size, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        emu.fibers = (EmuFiber*)calloc((size_t)n, sizeof(EmuFiber));
        if (region == MAP_FAILED || !emu.fibers) {
            emu_set_error("could not allocate fiber stacks");
            if (region != MAP_FAILED) munmap(region, region_size);
            free(emu.fibers);
            return 1;
        }
        for (int i = 0; i < n; ++i) {
            char* base = region + (size_t)i * (EMU_STACK + EMU_GUARD);
            mprotect(base, EMU_GUARD, PROT_NONE);
            emu.fibers[i].stack = base + EMU_GUARD;
            emu.fibers[i].tid = {i % bx, (i / bx) % by, i / (bx * by)};
        }
    }
    int rc = 0;
    for (unsigned z = 0; z < gz && !rc; ++z)
        for (unsigned y = 0; y < gy && !rc; ++y)
            for (unsigned x = 0; x < gx && !rc; ++x) {
                blockIdx = {x, y, z};
                if (uses_barrier) {
                    rc = emu_run_block_fibers(n);
                    continue;
                }
                for (unsigned tz = 0; tz < bz; ++tz)
                    for (unsigned ty = 0; ty < by; ++ty)
                        for (unsigned tx = 0; tx < bx; ++tx) {
                            threadIdx = {tx, ty, tz};
                            body(ctx);
                        }
                if (emu_error_msg[0]) rc = 1;
            }
    if (uses_barrier) {
#ifdef EMU_ASAN
        if (rc) __asan_unpoison_memory_region(region, region_size);  // abandoned fiber frames
#endif
        munmap(region, region_size);
        free(emu.fibers);
        emu.fibers = nullptr;
    }
    return rc;
}
