// emu_runtime.cpp: the host emulator's grid runner, linked into every library the emulator builds.
//
// emu_shim.h declares what generated kernels call (__syncthreads) and this file defines it, with the
// worker threads that run a launch's blocks, the fibers of barrier kernels, the error state and the
// library's launch entry. emu_build.runtime_object compiles it once per set of flags into the cache;
// each library links its own copy (so each keeps its own state), without g++ compiling it again.
#include "emu_shim.h"

static char emu_error_msg[512];
static int emu_failed;  // set once by the first error; workers stop taking blocks
static pthread_mutex_t emu_error_lock = PTHREAD_MUTEX_INITIALIZER;
static void emu_set_error(const char* msg) {
    pthread_mutex_lock(&emu_error_lock);
    if (!emu_error_msg[0]) snprintf(emu_error_msg, sizeof emu_error_msg, "%s", msg);
    __atomic_store_n(&emu_failed, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&emu_error_lock);
}
EMU_EXPORT const char* refcomp_emu_error(void) { return emu_error_msg; }

#include "emu_fibers.h"  // fibers for barrier kernels without regions, and the per-worker state

__attribute__((noinline)) void emu_syncthreads(int line, bool in_region) {
    char msg[200];
    if (in_region) {
        snprintf(msg, sizeof msg, "__syncthreads() on line %d inside a RC_FOR_EACH_THREAD region (a barrier "
                 "in divergent control flow)", line);
        emu_set_error(msg);
        return;
    }
    if (emu.mode == EMU_REGIONS) return;
    if (emu.mode == EMU_THREADS) {
        emu_set_error("__syncthreads() reached in a kernel launched with uses_barrier=False");
        return;
    }
    EmuFiber* f = &emu.fibers[emu.cur];
    f->barrier_line = line;
    emu_to_scheduler(f, false);
}

// One launch, shared by its workers. Blocks are taken in index order from `next`; the launching
// thread waits until `finished` reaches `blocks`, never for a worker thread itself, so a worker the
// OS starts late (a busy machine) finds nothing left and only drops its reference.
struct EmuGrid {
    dim3 grid, block;
    long long blocks;    // gx * gy * gz
    long long next;      // next block to take (atomic)
    long long finished;  // blocks run, or skipped after an error (under `lock`)
    int refs;            // the launching thread and each started worker (atomic); the last frees
    int mode;
    void (*body)(void*);
    void* ctx;
    pthread_mutex_t lock;
    pthread_cond_t all_done;
};

static void emu_grid_release(EmuGrid* g) {
    if (__atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        pthread_mutex_destroy(&g->lock);
        pthread_cond_destroy(&g->all_done);
        free(g);
    }
}

static void emu_block_finished(EmuGrid* g) {
    pthread_mutex_lock(&g->lock);
    if (++g->finished == g->blocks) pthread_cond_broadcast(&g->all_done);
    pthread_mutex_unlock(&g->lock);
}

// A worker: takes blocks until none is left; after an error it skips (but counts) the rest.
static void* emu_worker(void* arg) {
    EmuGrid* g = (EmuGrid*)arg;
    gridDim = g->grid;
    blockDim = g->block;
    emu.body = g->body;
    emu.ctx = g->ctx;
    emu.mode = g->mode;
    emu.cur = -1;
    const unsigned bx = g->block.x, by = g->block.y, bz = g->block.z;
    char* region = nullptr;
    size_t region_size = 0;
    long long b;
    while ((b = __atomic_fetch_add(&g->next, 1, __ATOMIC_RELAXED)) < g->blocks) {
        if (g->mode == EMU_FIBERS && !region && !__atomic_load_n(&emu_failed, __ATOMIC_RELAXED)) {
            region = emu_alloc_fibers(g->block, &region_size);
            if (!region) emu_set_error("could not allocate fiber stacks");
        }
        if (!__atomic_load_n(&emu_failed, __ATOMIC_RELAXED)) {
            blockIdx = {(unsigned)(b % g->grid.x), (unsigned)(b / g->grid.x % g->grid.y),
                        (unsigned)(b / ((long long)g->grid.x * g->grid.y))};
            if (g->mode == EMU_FIBERS) {
                emu_run_block_fibers((int)(bx * by * bz));
            } else if (g->mode == EMU_REGIONS) {
                threadIdx = {0, 0, 0};
                g->body(g->ctx);
            } else {
                for (unsigned tz = 0; tz < bz; ++tz)
                    for (unsigned ty = 0; ty < by; ++ty)
                        for (unsigned tx = 0; tx < bx; ++tx) {
                            threadIdx = {tx, ty, tz};
                            g->body(g->ctx);
                        }
            }
        }
        emu_block_finished(g);
    }
    if (region) {
#ifdef EMU_ASAN
        __asan_unpoison_memory_region(region, region_size);  // fiber frames abandoned after an error
#endif
        munmap(region, region_size);
        free(emu.fibers);
        emu.fibers = nullptr;
    }
    emu_grid_release(g);
    return nullptr;
}

// Worker threads for a launch: REFCOMP_EMU_THREADS, else the cores this process may use; one when
// the grid is too small to repay starting a thread (tens of microseconds).
static int emu_worker_count(long long blocks, long long threads_per_block) {
    const char* env = getenv("REFCOMP_EMU_THREADS");
    long long want = env && *env ? atoll(env) : 0;
    if (want <= 0) {
        cpu_set_t set;
        want = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
    }
    if (blocks * threads_per_block < 4096) want = 1;
    if (want > blocks) want = blocks;
    if (want > 256) want = 256;
    return want < 1 ? 1 : (int)want;
}

// Runs `body(ctx)` over the grid in `mode`. Returns 0, or 1 with refcomp_emu_error() set.
static int emu_run_grid(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        int mode, void (*body)(void*), void* ctx) {
    emu_error_msg[0] = 0;
    emu_failed = 0;
    EmuGrid* g = (EmuGrid*)calloc(1, sizeof(EmuGrid));
    if (!g) {
        emu_set_error("out of memory");
        return 1;
    }
    *g = {dim3(gx, gy, gz), dim3(bx, by, bz), (long long)gx * gy * gz, 0, 0, 1, mode, body, ctx,
          PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};
    const int workers = emu_worker_count(g->blocks, (long long)bx * by * bz);
    for (int w = 1; w < workers; ++w) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 8u << 20);  // region kernels keep RC_THREAD_SLOTS on the stack
        pthread_t thread;
        __atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
        if (pthread_create(&thread, &attr, emu_worker, g) != 0) __atomic_sub_fetch(&g->refs, 1, __ATOMIC_RELAXED);
        pthread_attr_destroy(&attr);
    }
    __atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);  // kept until the wait below is over
    emu_worker(g);  // the launching thread works too
    pthread_mutex_lock(&g->lock);
    while (g->finished < g->blocks) pthread_cond_wait(&g->all_done, &g->lock);
    pthread_mutex_unlock(&g->lock);
    emu_grid_release(g);
    return emu_failed ? 1 : 0;
}

// The library's one launch entry: runs `call` (a kernel's refcomp_call_<name>, which unpacks `args`
// and calls the kernel) over the grid in `mode`. One shared entry rather than a launcher per kernel:
// each generated function costs g++ time, and a per-kernel launcher with its lambda was three.
EMU_EXPORT int refcomp_emu_launch(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                  unsigned bz, int mode, void (*call)(void*), void** args) {
    return emu_run_grid(gx, gy, gz, bx, by, bz, mode, call, args);
}
