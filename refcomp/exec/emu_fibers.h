// emu_fibers.h: the emulator's fibers, included by emu_runtime.cpp (see emu_shim.h's header comment).
//
// A barrier kernel without RC_FOR_EACH_THREAD regions (hand-written CUDA) runs each thread of a
// block as a fiber with its own stack; __syncthreads() switches back to the scheduler
// (emu_run_block_fibers), which resumes every live fiber in turn, so the barrier is real. Each worker
// thread of the grid runner has its own fibers and scheduler context (thread_local `emu`).
#pragma once
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

// One per worker thread: the fibers of the block it runs and the scheduler's saved context.
struct EmuWorker {
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
    int mode;
};
static thread_local EmuWorker emu;

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
                char msg[400];
                snprintf(msg, sizeof msg,
                         "divergent __syncthreads(): in block (%u,%u,%u) thread (%u,%u,%u) waits at the "
                         "barrier on line %d while an earlier thread waits at line %d",
                         blockIdx.x, blockIdx.y, blockIdx.z, f->tid.x, f->tid.y, f->tid.z,
                         f->barrier_line, line);
                emu_set_error(msg);
                return 1;
            }
        }
    }
    return 0;
}

// Fiber stacks for one worker; they live for one launch only, so a process that loads many modules
// does not keep them.
static char* emu_alloc_fibers(dim3 block, size_t* region_size) {
    const unsigned bx = block.x, by = block.y;
    const int n = (int)(bx * by * block.z);
    *region_size = (EMU_STACK + EMU_GUARD) * (size_t)n;
    char* region = (char*)mmap(nullptr, *region_size, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    emu.fibers = (EmuFiber*)calloc((size_t)n, sizeof(EmuFiber));
    if (region == MAP_FAILED || !emu.fibers) {
        if (region != MAP_FAILED) munmap(region, *region_size);
        free(emu.fibers);
        emu.fibers = nullptr;
        return nullptr;
    }
    for (int i = 0; i < n; ++i) {
        char* base = region + (size_t)i * (EMU_STACK + EMU_GUARD);
        mprotect(base, EMU_GUARD, PROT_NONE);
        emu.fibers[i].stack = base + EMU_GUARD;
        emu.fibers[i].tid = {i % bx, (i / bx) % by, i / (bx * by)};
    }
    return region;
}
