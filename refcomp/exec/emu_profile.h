// emu_profile.h: the counters of refcomp's profile build (see refcomp/exec/profile.py).
//
// profile.py prepends this header to a *rewritten copy* of the generated source; the normal build
// never sees it. The rewrite (1) turns every `float` into `rcp_f32`, a float whose + - * / and math
// calls count flops; (2) turns every kernel buffer parameter `const float* __restrict__ in0` into
// `rcp_gptr<const float> in0` and every `__shared__ float a[N]` / `a[R][C]` into `rcp_smem<...>`; (3)
// numbers each indexing site of those in the kernel body: `in0[e]` becomes `in0(3)[e]`. Indexing
// returns a reference proxy whose read or write calls rcp_record(address, site, store, shared).
//
// Warp requests: the k-th execution of site s by each thread of a warp (32 consecutive linear
// thread indices) between the same two barriers is one warp-level request. That is how SIMT
// hardware issues structured code: a site inside `if (lane-dependent)` is one request of only the
// threads that took the branch, and loops of different trip counts line up iteration by iteration.
// A masked load `c ? in0(7)[i] : 0.0f` counts an execution for the threads whose c is false too
// (rcp_pred, below), so it stays one request per loop iteration; so does a site in an `if (c) {...}`
// block without loops (rcp_skip). A site in an `if` whose block holds a loop, or in an `else`, is
// grouped by each thread's k-th execution, which may mix iterations of an enclosing loop.
// Global: sectors = distinct 32-byte segments of the request's addresses. Shared: wavefronts = the
// largest number of distinct 4-byte words that fall in one of the 32 banks (a broadcast of one word
// is 1); bank conflicts = wavefronts - requests, as Nsight's l1tex__data_bank_conflicts_pipe_lsu_mem_shared.
// Requests are gathered per block (blocks run one after another) and reduced when the next block
// starts and when Python reads the counters.
// No C++ library headers and no #pragma once: profile.py pastes this text in front of every
// program's instrumented source, so it must stay cheap to parse.

#include <pthread.h>

// ---- counted floats --------------------------------------------------------------------------------
static long long rcp_flop_count, rcp_math_count;

struct rcp_f32 {
    float v;
    rcp_f32() = default;
    constexpr rcp_f32(float x) : v(x) {}
    constexpr rcp_f32(double x) : v((float)x) {}
    constexpr rcp_f32(int x) : v((float)x) {}
    constexpr rcp_f32(unsigned x) : v((float)x) {}
    constexpr rcp_f32(long x) : v((float)x) {}
    constexpr rcp_f32(unsigned long x) : v((float)x) {}
    constexpr rcp_f32(long long x) : v((float)x) {}
    constexpr rcp_f32(unsigned long long x) : v((float)x) {}
    explicit constexpr operator float() const { return v; }
    // (int)x and (long long)x, as a float's: an explicit conversion must name its type exactly
    explicit constexpr operator int() const { return (int)v; }
    explicit constexpr operator long long() const { return (long long)v; }
};
static_assert(sizeof(rcp_f32) == 4, "rcp_f32 must have float's layout");

#define RCP_ARITH(OP)                                                                               \
    static inline rcp_f32 operator OP(rcp_f32 a, rcp_f32 b) { ++rcp_flop_count; return a.v OP b.v; } \
    static inline rcp_f32& operator OP##=(rcp_f32& a, rcp_f32 b) { ++rcp_flop_count; a.v = a.v OP b.v; return a; }
RCP_ARITH(+) RCP_ARITH(-) RCP_ARITH(*) RCP_ARITH(/)
#undef RCP_ARITH
#define RCP_CMP(OP) static inline bool operator OP(rcp_f32 a, rcp_f32 b) { return a.v OP b.v; }
RCP_CMP(<) RCP_CMP(>) RCP_CMP(<=) RCP_CMP(>=) RCP_CMP(==) RCP_CMP(!=)
#undef RCP_CMP
static inline rcp_f32 operator-(rcp_f32 a) { return -a.v; }  // a sign flip, not a flop (as on a GPU)
static inline rcp_f32 operator+(rcp_f32 a) { return a; }
static inline bool operator!(rcp_f32 a) { return !a.v; }

#define RCP_MATH1(F) static inline rcp_f32 F(rcp_f32 a) { ++rcp_math_count; return ::F(a.v); }
#define RCP_MATH2(F) static inline rcp_f32 F(rcp_f32 a, rcp_f32 b) { ++rcp_math_count; return ::F(a.v, b.v); }
RCP_MATH1(expf) RCP_MATH1(exp2f) RCP_MATH1(logf) RCP_MATH1(log2f) RCP_MATH1(log10f) RCP_MATH1(sinf)
RCP_MATH1(cosf) RCP_MATH1(tanf) RCP_MATH1(tanhf) RCP_MATH1(sqrtf) RCP_MATH1(rsqrtf) RCP_MATH1(erff)
RCP_MATH1(erfcf) RCP_MATH1(fabsf) RCP_MATH1(floorf) RCP_MATH1(ceilf) RCP_MATH1(truncf) RCP_MATH1(roundf)
RCP_MATH1(expm1f) RCP_MATH1(log1pf)
RCP_MATH2(fmodf) RCP_MATH2(powf) RCP_MATH2(fminf) RCP_MATH2(fmaxf)
#undef RCP_MATH1
#undef RCP_MATH2
static inline rcp_f32 __fmul_rn(rcp_f32 a, rcp_f32 b) { ++rcp_flop_count; return a.v * b.v; }
static inline rcp_f32 fmaf(rcp_f32 a, rcp_f32 b, rcp_f32 c) { rcp_flop_count += 2; return ::fmaf(a.v, b.v, c.v); }
static inline rcp_f32 min(rcp_f32 a, rcp_f32 b) { return fminf(a.v, b.v); }
static inline rcp_f32 max(rcp_f32 a, rcp_f32 b) { return fmaxf(a.v, b.v); }

// ---- access recording ------------------------------------------------------------------------------
struct rcp_request {
    unsigned char shared, n;
    unsigned long long unit[32];  // distinct sectors (addr / 32) or words (addr / 4) of the active threads
};

struct rcp_counters {  // the order profile.py reads them in
    long long gld_req, gld_sect, gst_req, gst_sect, lds_req, lds_wave, sts_req, sts_wave;
    long long barriers, flops, math, accesses;
};

// Requests of the block being gathered, in an open-addressing table keyed by
// (warp, epoch, site * 2 + store, occurrence) + 1, 0 meaning empty.
static struct {
    int nsites, nthreads;
    long long block;               // linear index of the block being gathered, -1 before the first
    unsigned long long* keys;      // [capacity]
    int* slot;                     // [capacity] index into requests
    unsigned long long capacity;   // a power of 2
    rcp_request* requests;
    long long used, room;
    int* epoch;                    // [thread]: barriers passed in this block
    int* occurrence;               // [thread][site * 2 + store]: executions in this epoch
    rcp_counters c;
    pthread_t owner;               // the host thread that began the launch
    char error[256];
} rcp;

static void* rcp_grow(void* p, size_t bytes) {
    void* q = realloc(p, bytes ? bytes : 1);
    if (!q) { fprintf(stderr, "refcomp profiler: out of memory\n"); abort(); }
    return q;
}

static void rcp_fail(const char* what) {
    if (!rcp.error[0]) snprintf(rcp.error, sizeof rcp.error, "%s", what);
}

static void rcp_flush_block() {
    for (long long i = 0; i < rcp.used; ++i) {
        const rcp_request& r = rcp.requests[i];
        const bool store = r.shared & 2;
        if (!(r.shared & 1)) {
            (store ? rcp.c.gst_req : rcp.c.gld_req) += 1;
            (store ? rcp.c.gst_sect : rcp.c.gld_sect) += r.n;
            continue;
        }
        int per_bank[32] = {0}, waves = 0;
        for (int k = 0; k < r.n; ++k) {
            int b = (int)(r.unit[k] & 31);
            if (++per_bank[b] > waves) waves = per_bank[b];
        }
        (store ? rcp.c.sts_req : rcp.c.lds_req) += 1;
        (store ? rcp.c.sts_wave : rcp.c.lds_wave) += waves;
    }
    if (rcp.used) memset(rcp.keys, 0, rcp.capacity * sizeof *rcp.keys);
    rcp.used = 0;
    for (int w = 0; w * 32 < rcp.nthreads; ++w) {  // a warp executes each barrier its threads reach
        int most = 0;
        for (int t = w * 32; t < rcp.nthreads && t < w * 32 + 32; ++t) most = rcp.epoch[t] > most ? rcp.epoch[t] : most;
        rcp.c.barriers += most;
    }
    if (rcp.nthreads) {
        memset(rcp.epoch, 0, sizeof(int) * rcp.nthreads);
        memset(rcp.occurrence, 0, sizeof(int) * rcp.nthreads * rcp.nsites * 2);
    }
}

static inline int rcp_thread() {
    long long block = blockIdx.x + (long long)gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z);
    if (block != rcp.block) {
        // Blocks are gathered one at a time: a runner that spreads blocks over host threads would
        // interleave them, so the profile build refuses to count that.
        if (!pthread_equal(pthread_self(), rcp.owner)) rcp_fail("blocks ran on several host threads; the profile build needs them run one after another");
        rcp_flush_block();
        rcp.block = block;
        int n = (int)(blockDim.x * blockDim.y * blockDim.z);
        if (n != rcp.nthreads) {
            rcp.nthreads = n;
            rcp.epoch = (int*)rcp_grow(rcp.epoch, sizeof(int) * n);
            rcp.occurrence = (int*)rcp_grow(rcp.occurrence, sizeof(int) * n * rcp.nsites * 2);
            memset(rcp.epoch, 0, sizeof(int) * n);
            memset(rcp.occurrence, 0, sizeof(int) * n * rcp.nsites * 2);
        }
    }
    return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}

static void rcp_rehash() {
    unsigned long long old_capacity = rcp.capacity, *old_keys = rcp.keys;
    int* old_slot = rcp.slot;
    rcp.capacity = old_capacity ? old_capacity * 2 : 1 << 12;
    rcp.keys = (unsigned long long*)calloc(rcp.capacity, sizeof *rcp.keys);
    rcp.slot = (int*)rcp_grow(nullptr, rcp.capacity * sizeof *rcp.slot);
    if (!rcp.keys) { fprintf(stderr, "refcomp profiler: out of memory\n"); abort(); }
    for (unsigned long long i = 0; i < old_capacity; ++i) {
        if (!old_keys[i]) continue;
        unsigned long long h = (old_keys[i] * 0x9E3779B97F4A7C15ull) >> 20;
        while (rcp.keys[h & (rcp.capacity - 1)]) ++h;
        rcp.keys[h & (rcp.capacity - 1)] = old_keys[i];
        rcp.slot[h & (rcp.capacity - 1)] = old_slot[i];
    }
    free(old_keys);
    free(old_slot);
}

static void rcp_record(const void* address, int site, int store, int shared) {
    const int t = rcp_thread();
    if (site >= rcp.nsites) { rcp_fail("an access site number is out of range"); return; }
    ++rcp.c.accesses;
    const unsigned long long k = (unsigned long long)rcp.occurrence[(t * rcp.nsites + site) * 2 + store]++;
    const unsigned long long epoch = (unsigned long long)rcp.epoch[t];
    if (k >= (1ull << 28) || epoch >= (1ull << 20) || rcp.nsites > 1024) {
        rcp_fail("more than 2^28 executions of one access site, 2^20 barriers or 1024 sites in one block");
        return;
    }
    const unsigned long long key = (((unsigned long long)(t / 32) << 59) | (epoch << 39) |
                                    ((unsigned long long)(site * 2 + store) << 28) | k) + 1;
    if ((unsigned long long)(rcp.used + 1) * 2 > rcp.capacity) rcp_rehash();
    unsigned long long h = (key * 0x9E3779B97F4A7C15ull) >> 20;
    while (rcp.keys[h & (rcp.capacity - 1)] && rcp.keys[h & (rcp.capacity - 1)] != key) ++h;
    const unsigned long long at = h & (rcp.capacity - 1);
    if (!rcp.keys[at]) {
        if (rcp.used == rcp.room) {
            rcp.room = rcp.room ? rcp.room * 2 : 1024;
            rcp.requests = (rcp_request*)rcp_grow(rcp.requests, sizeof(rcp_request) * rcp.room);
        }
        rcp.keys[at] = key;
        rcp.slot[at] = (int)rcp.used;
        rcp.requests[rcp.used].shared = (unsigned char)((shared ? 1 : 0) | (store ? 2 : 0));
        rcp.requests[rcp.used].n = 0;
        ++rcp.used;
    }
    rcp_request& r = rcp.requests[rcp.slot[at]];
    const unsigned long long unit = (unsigned long long)(uintptr_t)address >> (shared ? 2 : 5);
    for (int i = r.n - 1; i >= 0; --i)
        if (r.unit[i] == unit) return;
    if (r.n < 32) r.unit[r.n++] = unit;
}

static void rcp_barrier() {
    const int t = rcp_thread();
    ++rcp.epoch[t];
    memset(rcp.occurrence + (size_t)t * rcp.nsites * 2, 0, sizeof(int) * rcp.nsites * 2);
}

// The condition of `c ? in0(7)[i] : 0.0f` (a masked load, a predicated load on a GPU): a thread whose
// condition is false still counts an execution of site 7, so the k-th executions of the threads of
// a warp stay the same loop iteration even where a mask switches threads on and off.
template <class C> static inline bool rcp_pred(const C& condition, int site) {
    const bool taken = (bool)condition;
    if (!taken) {
        const int t = rcp_thread();
        if (site < rcp.nsites) ++rcp.occurrence[(t * rcp.nsites + site) * 2];
    }
    return taken;
}

// The condition of `if (c) { ... in0(7)[i] ... out0(8)[i] ... }` (a block without loops): a thread
// that skips the block still counts one execution of each site in it, for the same reason.
template <class C, class... S> static inline bool rcp_skip(const C& condition, S... sites) {
    const bool taken = (bool)condition;
    if (!taken) {
        const int t = rcp_thread(), list[] = {sites...};
        for (int site : list)
            if (site < rcp.nsites) {
                ++rcp.occurrence[(t * rcp.nsites + site) * 2];
                ++rcp.occurrence[(t * rcp.nsites + site) * 2 + 1];
            }
    }
    return taken;
}

EMU_EXPORT void refcomp_profile_begin(int nsites) {
    if (rcp.used) memset(rcp.keys, 0, rcp.capacity * sizeof *rcp.keys);
    rcp.used = 0;
    rcp.nsites = nsites > 0 ? nsites : 1;
    rcp.nthreads = 0;
    rcp.block = -1;
    rcp.c = rcp_counters{};
    rcp.error[0] = 0;
    rcp_flop_count = rcp_math_count = 0;
    rcp.owner = pthread_self();
    if (!rcp.capacity) rcp_rehash();
}

// Fills out[0..11] in rcp_counters' order; returns the recording error, or "".
EMU_EXPORT const char* refcomp_profile_end(long long* out) {
    rcp_flush_block();
    rcp.block = -1;
    rcp.c.flops = rcp_flop_count;
    rcp.c.math = rcp_math_count;
    memcpy(out, &rcp.c, sizeof rcp.c);
    return rcp.error;
}

// ---- instrumented buffers --------------------------------------------------------------------------
template <class T> struct rcp_value { typedef T type; };
template <> struct rcp_value<float> { typedef rcp_f32 type; };
template <> struct rcp_value<const float> { typedef rcp_f32 type; };
template <> struct rcp_value<const int> { typedef int type; };
template <> struct rcp_value<const unsigned short> { typedef unsigned short type; };  // float16, bfloat16 bits

// A float widened to double (the prelude's rc_f64): the proxy converts to float only, implicitly.
static inline double rc_f64(rcp_f32 a) { return a.v; }

// The 16-bit conversions of the prelude take a float's bits: a reinterpretation, not a flop.
static inline unsigned __float_as_uint(rcp_f32 a) { return __float_as_uint(a.v); }

// A reference to one element: reading it records a load, assigning to it records a store.
template <class T, int SHARED> struct rcp_ref {
    typedef typename rcp_value<T>::type V;
    T* p;
    int site;
    operator V() const { rcp_record(p, site, 0, SHARED); return V(*p); }
    // (long long)in0[i]: a load, then the value's own conversion (a reference's two would be refused)
    template <class U> explicit operator U() const { return (U)(V)*this; }
    const rcp_ref& operator=(V v) const { rcp_record(p, site, 1, SHARED); *p = (T)(v); return *this; }
    const rcp_ref& operator=(const rcp_ref& o) const { return *this = (V)o; }
    const rcp_ref& operator+=(V v) const { return *this = (V)*this + v; }
    const rcp_ref& operator-=(V v) const { return *this = (V)*this - v; }
    const rcp_ref& operator*=(V v) const { return *this = (V)*this * v; }
};
static_assert(sizeof(float) == 4 && sizeof(int) == 4, "the profiler assumes 4-byte elements");

template <class T, int SHARED> struct rcp_site_ptr {
    T* p;
    int site;
    rcp_ref<T, SHARED> operator[](long long i) const { return {p + i, site}; }
};

// A kernel's buffer parameter: `in0(site)[i]`.
template <class T> struct rcp_gptr {
    T* p;
    rcp_gptr(T* q) : p(q) {}
    rcp_site_ptr<T, 0> operator()(int site) const { return {p, site}; }
};

// A __shared__ array of N floats, or of R rows of C: `a(site)[i]`, `a(site)[r][c]`.
template <class T, int N> struct rcp_smem {
    T d[N];
    rcp_site_ptr<T, 1> operator()(int site) { return {d, site}; }
};
template <class T, int C> struct rcp_smem_rows {
    T (*d)[C];
    int site;
    rcp_site_ptr<T, 1> operator[](long long r) const { return {d[r], site}; }
};
template <class T, int R, int C> struct rcp_smem2 {
    T d[R][C];
    rcp_smem_rows<T, C> operator()(int site) { return {d, site}; }
};

// Every thread runs as itself, as on a GPU (fibers at barriers): the region loops of the fast
// emulator are switched off (their GPU definitions), so each access is counted for the thread
// that makes it.
#undef RC_FOR_EACH_THREAD
#undef RC_THREAD_SLOTS
#undef RC_SLOT
#define RC_FOR_EACH_THREAD
#define RC_THREAD_SLOTS(n) 1
#define RC_SLOT 0

// __syncthreads(): count it for this thread, then the shim's barrier.
static inline void rcp_shim_syncthreads() { __syncthreads(); }
#undef __syncthreads
#define __syncthreads() (rcp_barrier(), rcp_shim_syncthreads())
