// emu.h — runs moe.cu's kernels on the CPU, one CUDA thread per fiber, so
// that their indexing, fragment layouts, pipelines and barriers can be
// checked on a machine without a GPU (kernels/moe/emu_test.go).
//
// What it models:
//   - a block's threads as cooperative fibers (ucontext); __syncthreads and
//     warp collectives (mma.sync, ldmatrix, shfl) are barriers between them;
//     a warp collective with a lane missing, or a barrier nobody can reach,
//     aborts with "deadlock";
//   - mma.sync.m16n8k16 (bf16 in, f32 accumulate) and ldmatrix.x4 with the
//     register fragment layouts of the PTX ISA;
//   - cp.async: copies queued per thread and committed in groups, landing
//     either at issue (EMU_CP=early: catches a stage overwritten while
//     another warp still reads it) or only at cp.async.wait_group
//     (EMU_CP=late: catches a stage read before its wait);
//   - scheduling order (EMU_SCHED=lowest|highest|random:SEED): which
//     runnable fiber goes next, so warps drift apart between barriers;
//   - shared memory: the dynamic buffer is poisoned with 0xff (bf16 NaN)
//     before each block, every ldmatrix and cp.async address is checked
//     against it, and every cp.async source against the launch's buffers.
//   - clusters (the wg kernels' mc=1): a cluster's blocks run together,
//     each with its own shared memory; mapa, remote mbarrier arrivals,
//     multicast tensor-map copies and the cluster barrier between them.
// Clusters (or blocks) run one after another; static __shared__ arrays are
// plain statics.
#pragma once

#include <setjmp.h>
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#define MOE_EMU 1

typedef unsigned short bf16_t;
typedef unsigned int u32;

struct uint4 {
    unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define MOE_DYNAMIC_SMEM(T, name) T* name = (T*)emu::dyn_smem
using std::max;
using std::min;

namespace emu {

[[noreturn]] inline void fail(const char* fmt, const char* detail = "") {
    std::fprintf(stderr, "emu: ");
    std::fprintf(stderr, fmt, detail);
    std::fprintf(stderr, "\n");
    std::exit(3);
}

struct Dim3 {
    unsigned x = 1, y = 1, z = 1;
};

struct Copy {
    void* dst;
    const void* src;
    int bytes;
};

enum State { Ready, WaitWarp, WaitBlock, WaitGroup, WaitMbar, WaitCluster, Done };

struct Fiber {
    jmp_buf jb;
    bool started = false;
    Dim3 tid;
    int flat = 0, lane = 0, warp = 0, cta = 0;  // cta: the block's rank in its cluster
    State state = Ready;
    std::vector<Copy> open;                 // issued, not yet committed
    std::vector<std::vector<Copy>> groups;  // committed, not yet landed
};

// A warp's mailbox is double-buffered by barrier generation: a lane can be
// at most one collective ahead of the slowest, so one barrier per
// collective is enough.
struct Warp {
    int alive = 0, arrived = 0;
    unsigned gen = 0;
    u32 in[2][32][8];
    const void* ptr[2][32];
};

struct Buffer {
    char* p;
    size_t n;
};

// Ready set: one bit per fiber.
struct Bits {
    std::vector<uint64_t> w;
    void reset(int n) { w.assign((n + 63) / 64, 0); }
    void set(int i) { w[i >> 6] |= 1ull << (i & 63); }
    void clear(int i) { w[i >> 6] &= ~(1ull << (i & 63)); }
    int count() const {
        int c = 0;
        for (uint64_t v : w) c += __builtin_popcountll(v);
        return c;
    }
    int first() const {
        for (size_t i = 0; i < w.size(); ++i)
            if (w[i]) return (int)(i * 64 + __builtin_ctzll(w[i]));
        return -1;
    }
    int last() const {
        for (size_t i = w.size(); i-- > 0;)
            if (w[i]) return (int)(i * 64 + 63 - __builtin_clzll(w[i]));
        return -1;
    }
    int nth(int k) const {
        for (size_t i = 0; i < w.size(); ++i) {
            int c = __builtin_popcountll(w[i]);
            if (k < c) {
                uint64_t v = w[i];
                while (k--) v &= v - 1;
                return (int)(i * 64 + __builtin_ctzll(v));
            }
            k -= c;
        }
        return -1;
    }
};

// Cta: one block of the running cluster (a lone block is a cluster of one).
struct Cta {
    char* smem = nullptr;
    Dim3 idx;
    int alive = 0, arrived = 0;  // live threads; threads at __syncthreads
};
inline std::vector<Cta> ctas;
inline int cluster_arrived = 0;
inline Dim3 block_idx, grid_dim, block_dim;
inline std::vector<Fiber> fibers;
inline std::vector<Warp> warps;
inline std::vector<char*> stacks;
inline Fiber* cur = nullptr;
inline jmp_buf sched_jb;
inline ucontext_t sched_uc, start_uc;
inline Bits ready;
inline int alive = 0;
inline char* dyn_smem = nullptr;
inline size_t dyn_bytes = 0;
inline std::vector<Buffer> buffers;
// cp_read[i]: bytes cp.async copies read from buffers[i] (the launch
// script's "stats" command reports them: what a kernel fetches, not only
// what it computes).
inline std::vector<unsigned long long> cp_read;
inline bool cp_late = false;
inline int sched = 0;  // 0 lowest, 1 highest, 2 random
inline std::mt19937 rng(1);
inline std::function<void()> body;
constexpr size_t kStack = 256 << 10;

// Switching: a fiber's first run enters through makecontext/swapcontext;
// every later switch is _setjmp/_longjmp (no signal-mask system call).
inline void yield() {
    if (!_setjmp(cur->jb)) _longjmp(sched_jb, 1);
}

inline void trampoline() {
    body();
    cur->state = Done;
    --alive;
    --ctas[cur->cta].alive;
    --warps[cur->warp].alive;
    ready.clear(cur->flat);
    _longjmp(sched_jb, 1);
}

inline void land(std::vector<Copy>& g) {
    for (const Copy& c : g) {
        if (c.bytes == 16)
            std::memcpy(c.dst, c.src, 16);
        else
            std::memset(c.dst, 0, 16);
    }
    g.clear();
}

inline void release_block(int cta) {
    ctas[cta].arrived = 0;
    for (Fiber& f : fibers)
        if (f.state == WaitBlock && f.cta == cta) {
            f.state = Ready;
            ready.set(f.flat);
        }
}

inline void release_cluster() {
    cluster_arrived = 0;
    for (Fiber& f : fibers)
        if (f.state == WaitCluster) {
            f.state = Ready;
            ready.set(f.flat);
        }
}

inline void reset_wg_state(int n);
inline void check_wg_state();

// run_cluster runs the blocks idx[0..] (a cluster; one block alone is a
// cluster of one) of n threads each together to completion, block r in
// shared memory smem[r] (dyn_bytes each). Threads are numbered across the
// cluster (block r's from r·n), so warps and warpgroups never straddle two
// blocks when n is a multiple of 128, or of 32 for a lone block.
inline void run_cluster(int n, const std::vector<Dim3>& idx, const std::vector<char*>& smem) {
    const int nc = (int)idx.size(), total = n * nc;
    if (nc > 1 && n % 128 != 0) fail("cluster blocks of %s threads: want a multiple of 128", std::to_string(n).c_str());
    ctas.assign(nc, Cta{});
    for (int r = 0; r < nc; ++r) {
        ctas[r].smem = smem[r];
        ctas[r].idx = idx[r];
        ctas[r].alive = n;
        std::memset(smem[r], 0xff, dyn_bytes);
    }
    cluster_arrived = 0;
    fibers.assign(total, Fiber{});
    warps.assign((total + 31) / 32, Warp{});
    while ((int)stacks.size() < total) stacks.push_back((char*)std::malloc(kStack));
    alive = total;
    ready.reset(total);
    for (int i = 0; i < total; ++i) {
        Fiber& f = fibers[i];
        const int t = i % n;
        f.flat = i;
        f.cta = i / n;
        f.tid.x = t % block_dim.x;
        f.tid.y = (t / block_dim.x) % block_dim.y;
        f.tid.z = t / (block_dim.x * block_dim.y);
        f.lane = i & 31;
        f.warp = i >> 5;
        ++warps[f.warp].alive;
        ready.set(i);
    }
    reset_wg_state(total);
    while (alive > 0) {
        const int c = ready.count();
        if (c == 0) fail("deadlock: every live thread waits at a barrier that cannot release%s");
        const int pick = sched == 0 ? ready.first() : sched == 1 ? ready.last() : ready.nth((int)(rng() % (unsigned)c));
        cur = &fibers[pick];
        // The running thread's block: its shared memory and blockIdx.
        dyn_smem = ctas[cur->cta].smem;
        block_idx = ctas[cur->cta].idx;
        if (!_setjmp(sched_jb)) {
            if (!cur->started) {
                cur->started = true;
                getcontext(&start_uc);
                start_uc.uc_stack.ss_sp = stacks[pick];
                start_uc.uc_stack.ss_size = kStack;
                start_uc.uc_link = nullptr;
                makecontext(&start_uc, trampoline, 0);
                swapcontext(&sched_uc, &start_uc);
            } else {
                _longjmp(cur->jb, 1);
            }
        }
        // A block (cluster) barrier also releases when the threads that
        // have not exited are all there.
        for (int r = 0; r < nc; ++r)
            if (ctas[r].arrived > 0 && ctas[r].arrived == ctas[r].alive) release_block(r);
        if (cluster_arrived > 0 && cluster_arrived == alive) release_cluster();
    }
    check_wg_state();
    for (Fiber& f : fibers) {
        // Copies never waited for land (as on the device); a kernel that
        // reads them without waiting is what the late mode catches.
        for (auto& g : f.groups) land(g);
        land(f.open);
    }
}

inline void syncthreads() {
    Cta& c = ctas[cur->cta];
    if (++c.arrived == c.alive) {
        release_block(cur->cta);
        return;
    }
    cur->state = WaitBlock;
    ready.clear(cur->flat);
    yield();
}

// cluster_sync: barrier.cluster.arrive + wait, every thread of the cluster.
inline void cluster_sync() {
    if (++cluster_arrived == alive) {
        release_cluster();
        return;
    }
    cur->state = WaitCluster;
    ready.clear(cur->flat);
    yield();
}

// owner is the rank of the block whose shared memory holds [p, p+n), or -1.
inline int owner(const void* p, size_t n) {
    const char* c = (const char*)p;
    for (size_t r = 0; r < ctas.size(); ++r)
        if (c >= ctas[r].smem && c + n <= ctas[r].smem + dyn_bytes) return (int)r;
    return -1;
}

// warp_sync waits for the warp's 32 lanes; it returns the mailbox parity
// the lanes wrote before it.
inline int warp_sync() {
    Warp& w = warps[cur->warp];
    if (w.alive != 32) fail("warp collective with %s lanes missing (exited)", "some");
    const int parity = w.gen & 1;
    if (++w.arrived == 32) {
        w.arrived = 0;
        ++w.gen;
        for (int l = 0; l < 32; ++l) {
            Fiber& f = fibers[cur->warp * 32 + l];
            if (f.state == WaitWarp) {
                f.state = Ready;
                ready.set(f.flat);
            }
        }
        return parity;
    }
    cur->state = WaitWarp;
    ready.clear(cur->flat);
    yield();
    return parity;
}

inline int parity() { return warps[cur->warp].gen & 1; }

inline bool in_smem(const void* p, size_t n) {
    const char* c = (const char*)p;
    return c >= dyn_smem && c + n <= dyn_smem + dyn_bytes;
}

// buffer_of is the index of the buffer holding [p, p+n), or -1.
inline int buffer_of(const void* p, size_t n) {
    const char* c = (const char*)p;
    for (size_t i = 0; i < buffers.size(); ++i)
        if (c >= buffers[i].p && c + n <= buffers[i].p + buffers[i].n) return (int)i;
    return -1;
}

inline float bf(u32 h) {
    u32 b = (h & 0xffffu) << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

}  // namespace emu

#define threadIdx (emu::cur->tid)
#define blockIdx (emu::block_idx)
#define gridDim (emu::grid_dim)
#define blockDim (emu::block_dim)

// EMU_BUG_NO_SYNC and EMU_BUG_WAIT_ONE_LESS build an emulator whose
// barriers do nothing, or whose cp.async waits wait for one group too few:
// the test that the emulator catches a kernel with such a bug (emu_test.go)
// runs the tc kernels on it and expects failure.
#ifdef EMU_BUG_NO_SYNC
inline void __syncthreads() {}
#else
inline void __syncthreads() { emu::syncthreads(); }
#endif

inline float __uint_as_float(u32 u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline u32 __float_as_uint(float f) {
    u32 u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float __expf(float x) { return std::exp(x); }
inline float __fdividef(float x, float y) { return y > 8.5070592e37f ? 0.f * x : x / y; }  // 2^126: what the device returns

// Blocks run one after another here: a fence orders nothing more.
inline void __threadfence() {}

inline int atomicAdd(int* p, int v) {
    int old = *p;
    *p = old + v;
    return old;
}

inline int __shfl_up_sync(unsigned, int v, int delta) {
    emu::Warp& w = emu::warps[emu::cur->warp];
    const int lane = emu::cur->lane, p = emu::parity();
    w.in[p][lane][0] = (u32)v;
    emu::warp_sync();
    return lane >= delta ? (int)w.in[p][lane - delta][0] : v;
}

inline int __all_sync(unsigned, int pred) {
    emu::Warp& w = emu::warps[emu::cur->warp];
    const int lane = emu::cur->lane, p = emu::parity();
    w.in[p][lane][0] = pred != 0;
    emu::warp_sync();
    for (int l = 0; l < 32; ++l)
        if (!w.in[p][l][0]) return 0;
    return 1;
}

inline u32 __shfl_xor_sync(unsigned, u32 v, int mask) {
    emu::Warp& w = emu::warps[emu::cur->warp];
    const int lane = emu::cur->lane, p = emu::parity();
    w.in[p][lane][0] = v;
    emu::warp_sync();
    return w.in[p][lane ^ mask][0];
}

// Round to nearest even, NaN kept quiet: what cvt.rn.bf16x2.f32 does.
inline u32 emu_f2bf(float v) {
    u32 b;
    std::memcpy(&b, &v, 4);
    if ((b & 0x7fffffffu) > 0x7f800000u) return ((b >> 16) | 0x40u) & 0xffffu;
    return (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
}
inline u32 pack_bf16x2(float lo, float hi) { return emu_f2bf(lo) | (emu_f2bf(hi) << 16); }

// mma.sync.m16n8k16.row.col: A 16×16 (lane l holds rows l/4 and l/4+8, k
// pairs 2(l%4) and 2(l%4)+8), B 16×8 (column l/4, the same k pairs), C/D
// 16×8 (rows l/4 and l/4+8, columns 2(l%4) and 2(l%4)+1).
inline void mma_bf16(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    emu::Warp& w = emu::warps[emu::cur->warp];
    const int lane = emu::cur->lane, p = emu::parity();
    u32* in = w.in[p][lane];
    in[0] = a0, in[1] = a1, in[2] = a2, in[3] = a3, in[4] = b0, in[5] = b1;
    emu::warp_sync();
    auto A = [&](int r, int k) {
        const u32* src = w.in[p][(r % 8) * 4 + (k % 8) / 2];
        u32 reg = src[(r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)];
        return emu::bf(k % 2 ? reg >> 16 : reg);
    };
    auto B = [&](int k, int n) {
        const u32* src = w.in[p][n * 4 + (k % 8) / 2];
        u32 reg = src[4 + (k >= 8 ? 1 : 0)];
        return emu::bf(k % 2 ? reg >> 16 : reg);
    };
    const int g = lane >> 2, q = lane & 3;
    for (int i = 0; i < 4; ++i) {
        const int r = g + (i >= 2 ? 8 : 0), n = 2 * q + (i & 1);
        float s = 0.f;
        for (int k = 0; k < 16; ++k) s += A(r, k) * B(k, n);
        c[i] += s;
    }
}

typedef char* saddr_t;
inline saddr_t to_saddr(const void* p) { return (saddr_t)p; }

// ldmatrix.x4: lanes 8j..8j+7 give the rows of matrix j; lane l receives
// 32 bits of row l/4 of each matrix, elements 2(l%4) and 2(l%4)+1.
inline void ldsm_x4_s(u32& r0, u32& r1, u32& r2, u32& r3, saddr_t a) {
    emu::Warp& w = emu::warps[emu::cur->warp];
    const int lane = emu::cur->lane, p = emu::parity();
    if (((uintptr_t)a & 15) != 0 || !emu::in_smem(a, 16)) emu::fail("ldmatrix row address outside shared memory or not 16-byte aligned%s");
    w.ptr[p][lane] = a;
    emu::warp_sync();
    u32 r[4];
    for (int j = 0; j < 4; ++j) std::memcpy(&r[j], (const char*)w.ptr[p][8 * j + lane / 4] + 4 * (lane % 4), 4);
    r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
inline void ldsm_x4(u32& r0, u32& r1, u32& r2, u32& r3, const void* p) { ldsm_x4_s(r0, r1, r2, r3, (saddr_t)p); }

inline void cp_async16_s(saddr_t dst, const void* src, int bytes) {
    if (((uintptr_t)dst & 15) != 0 || !emu::in_smem(dst, 16)) emu::fail("cp.async destination outside shared memory or not 16-byte aligned%s");
    if (bytes != 0 && bytes != 16) emu::fail("cp.async src-size must be 0 or 16 here%s");
    if (bytes) {
        const int b = emu::buffer_of(src, 16);
        if (((uintptr_t)src & 15) != 0 || b < 0) emu::fail("cp.async source outside every buffer or not 16-byte aligned%s");
        emu::cp_read[b] += bytes;
    }
    emu::Copy c{dst, src, bytes};
    if (!emu::cp_late) {
        std::vector<emu::Copy> one{c};
        emu::land(one);
        return;
    }
    emu::cur->open.push_back(c);
}
inline void cp_async16(void* dst, const void* src, bool pred) { cp_async16_s((saddr_t)dst, src, pred ? 16 : 0); }
inline void cp_async_commit() {
    emu::cur->groups.push_back(std::move(emu::cur->open));
    emu::cur->open.clear();
}
template <int N>
inline void cp_async_wait() {
#ifdef EMU_BUG_WAIT_ONE_LESS
    constexpr int pending = N + 1;  // waits for one group too few
#else
    constexpr int pending = N;
#endif
    auto& gs = emu::cur->groups;
    while ((int)gs.size() > pending) {
        emu::land(gs.front());
        gs.erase(gs.begin());
    }
}

inline uint4 ld_stream(const bf16_t* p) {
    uint4 v;
    std::memcpy(&v, p, 16);
    return v;
}
inline uint4 ld_act(const bf16_t* p) { return ld_stream(p); }
// Blocks run one launch after another: there is nothing to wait for.
inline void grid_dep_sync() {}

// Kernel registry: moe.cu's GEMM macros register each instance by name.
namespace emu {
using Invoker = std::function<void(void** args)>;
inline std::map<std::string, Invoker>& registry() {
    static std::map<std::string, Invoker> r;
    return r;
}
struct Reg {
    Reg(const char* name, Invoker f) { registry()[name] = std::move(f); }
};
}  // namespace emu

#define MOE_EMU_GEMM(NAME)                                                                                      \
    static emu::Reg emu_reg_##NAME(#NAME, [](void** a) {                                                         \
        NAME(*(const bf16_t**)a[0], *(const bf16_t**)a[1], *(bf16_t**)a[2], *(const float**)a[3],                \
             *(const int**)a[4], *(const int**)a[5], *(const int**)a[6], *(int*)a[7], *(int*)a[8], *(int*)a[9],    \
             *(int*)a[10]);                                                                                     \
    });

// The fused-combine gemm2: the GEMM arguments, then ids, out, cnt and M.
#define MOE_EMU_GEMM_FC(NAME)                                                                                   \
    static emu::Reg emu_reg_##NAME(#NAME, [](void** a) {                                                         \
        NAME(*(const bf16_t**)a[0], *(const bf16_t**)a[1], *(bf16_t**)a[2], *(const float**)a[3],                \
             *(const int**)a[4], *(const int**)a[5], *(const int**)a[6], *(int*)a[7], *(int*)a[8], *(int*)a[9],    \
             *(int*)a[10], *(const int**)a[11], *(bf16_t**)a[12], *(int**)a[13], *(int*)a[14]);                  \
    });

// The tma=1 wg GEMMs: the GEMM arguments, then the weights' tensor map.
#define MOE_EMU_GEMM_TMA(NAME)                                                                                  \
    static emu::Reg emu_reg_##NAME(#NAME, [](void** a) {                                                         \
        NAME(*(const bf16_t**)a[0], *(const bf16_t**)a[1], *(bf16_t**)a[2], *(const float**)a[3],                \
             *(const int**)a[4], *(const int**)a[5], *(const int**)a[6], *(int*)a[7], *(int*)a[8], *(int*)a[9],    \
             *(int*)a[10], *(const TmaDesc*)a[11]);                                                             \
    });

// The self-aligning gemm1 (skinny or tc): the GEMM arguments, then ids.
#define MOE_EMU_GEMM_SA(NAME)                                                                                   \
    static emu::Reg emu_reg_##NAME(#NAME, [](void** a) {                                                         \
        NAME(*(const bf16_t**)a[0], *(const bf16_t**)a[1], *(bf16_t**)a[2], *(const float**)a[3],                \
             *(int**)a[4], *(int**)a[5], *(int**)a[6], *(int*)a[7], *(int*)a[8], *(int*)a[9],                      \
             *(int*)a[10], *(const int**)a[11]);                                                                \
    });

// ---------------------------------------------------------------- Hopper: mbarriers and wgmma
//
// mbarriers live in shared memory on the device; here each 8-byte slot maps
// to a counter (arrivals still expected) and the number of completed
// phases. A fiber that waits on an incomplete phase sleeps until an arrival
// completes it. wgmma is a warpgroup collective: the 128 threads meet, and
// the last one queues the MMA on the warpgroup; EMU_WG=early runs it there
// (reading shared memory at issue: catches a stage read before it landed),
// EMU_WG=late only at the wgmma.wait_group that retires it (catches a stage
// overwritten while its MMAs are still in flight).
typedef unsigned long long u64;

namespace emu {
struct TmaCopy;
// A shared-to-cluster bulk copy (mc=2), landing like a tensor copy.
struct BulkCopy {
    char* dst;
    const char* src;
    int bytes;
};
struct Mbar {
    int expected = 0, pending = 0;
    unsigned phase = 0;  // completed phases
    long long tx = 0;    // transaction bytes expected and not yet landed
    std::vector<TmaCopy> inflight;  // EMU_TMA=late: copies that land when the arrivals are in
    std::vector<BulkCopy> bulk;     // the same for bulk copies (read from the source as they land)
};
struct WGOp {
    u64 da, db;
    int n, scale;
    float* acc[128];
};
struct WGroup {
    int arrived = 0;
    unsigned gen = 0;
    float* acc[2][128];
    u64 da[2][128], db[2][128];
    int scale[2][128];
    std::vector<WGOp> open;
    std::vector<std::vector<WGOp>> groups;
};
inline std::map<char*, Mbar> mbars;
inline std::vector<WGroup> wgroups;
inline bool wg_late = false;

inline void reset_wg_state_impl(int n) {
    mbars.clear();
    wgroups.assign((n + 127) / 128, WGroup{});
}
inline void check_wg_state_impl() {
    for (const WGroup& g : wgroups)
        if (!g.open.empty() || !g.groups.empty()) fail("block ended with wgmma operations not waited for%s");
}

// mbar_at: the barrier at a, in any block of the cluster (remote arrivals
// and multicast copies reach the others').
inline Mbar& mbar_at(char* a) {
    const int r = owner(a, 8);
    if (r < 0 || ((uintptr_t)(a - ctas[r].smem) & 7) != 0) fail("mbarrier outside shared memory or not 8-byte aligned%s");
    auto it = mbars.find(a);
    if (it == mbars.end()) fail("mbarrier used before mbarrier.init%s");
    return it->second;
}

// wg_sync waits for the 128 threads of the caller's warpgroup; the last one
// to arrive runs `last` before any of them goes on.
inline int wg_sync(const std::function<void(int parity)>& last) {
    const int gi = cur->warp / 4;
    WGroup& g = wgroups[gi];
    for (int w = gi * 4; w < gi * 4 + 4; ++w)
        if (w >= (int)warps.size() || warps[w].alive != 32) fail("warpgroup collective with %s threads missing (exited)", "some");
    const int parity = g.gen & 1;
    if (++g.arrived == 128) {
        g.arrived = 0;
        ++g.gen;
        last(parity);
        for (int t = gi * 128; t < gi * 128 + 128; ++t) {
            Fiber& f = fibers[t];
            if (f.state == WaitGroup) {
                f.state = Ready;
                ready.set(f.flat);
            }
        }
        return parity;
    }
    cur->state = WaitGroup;
    ready.clear(cur->flat);
    yield();
    return parity;
}

// smem_elem is the bf16 at row r, element k (< 16) of a K-major
// 128-byte-swizzled tile described by desc: rows 128 bytes apart within an
// 8-row group, groups SBO apart, the 16-byte chunk XORed with the row's
// line index (address bits 7–9 into bits 4–6), as the hardware does.
inline float smem_elem(u64 desc, int r, int k) {
    if ((desc >> 62) != 1) fail("wgmma descriptor: only the 128-byte swizzle is modelled%s");
    if (((desc >> 49) & 7) != 0) fail("wgmma descriptor: base offset must be 0 (1024-byte aligned tiles)%s");
    const size_t start = (size_t)(desc & 0x3FFF) << 4;
    const size_t sbo = (size_t)((desc >> 32) & 0x3FFF) << 4;
    size_t off = start + (size_t)(r / 8) * sbo + (size_t)(r % 8) * 128 + (size_t)k * 2;
    off ^= ((off >> 7) & 7) << 4;
    if (off + 2 > dyn_bytes) fail("wgmma operand outside shared memory%s");
    unsigned short h;
    std::memcpy(&h, dyn_smem + off, 2);
    return bf(h);
}

inline void run_wgmma(const WGOp& op) {
    // D[64×n] (+)= A[64×16]·B[n×16]ᵀ; thread t: rows 16(t/32) + (t%32)/4 + 8h,
    // columns 8j + 2(t%4) + v in register 4j + 2h + v.
    std::vector<float> A(64 * 16), B((size_t)op.n * 16);
    for (int r = 0; r < 64; ++r)
        for (int k = 0; k < 16; ++k) A[r * 16 + k] = smem_elem(op.da, r, k);
    for (int c = 0; c < op.n; ++c)
        for (int k = 0; k < 16; ++k) B[c * 16 + k] = smem_elem(op.db, c, k);
    for (int t = 0; t < 128; ++t) {
        const int l = t % 32, w = t / 32;
        for (int j = 0; j < op.n / 8; ++j)
            for (int h = 0; h < 2; ++h)
                for (int v = 0; v < 2; ++v) {
                    const int r = 16 * w + l / 4 + 8 * h, c = 8 * j + 2 * (l % 4) + v;
                    float s = 0.f;
                    for (int k = 0; k < 16; ++k) s += A[r * 16 + k] * B[c * 16 + k];
                    float& d = op.acc[t][4 * j + 2 * h + v];
                    d = op.scale ? d + s : s;
                }
    }
}
}  // namespace emu


inline void emu::reset_wg_state(int n) { reset_wg_state_impl(n); }
inline void emu::check_wg_state() { check_wg_state_impl(); }


inline u64 wg_desc(saddr_t a) {
    const size_t off = (size_t)(a - emu::dyn_smem);
    if ((off & 1023) != 0) emu::fail("wgmma tile not 1024-byte aligned%s");
    return (u64)((off & 0x3FFFFu) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
inline saddr_t align1024(saddr_t a) { return emu::dyn_smem + (((size_t)(a - emu::dyn_smem) + 1023) & ~(size_t)1023); }
// Tensor maps and the tensor memory accelerator (the wg kernels' tma=1). On
// the device TmaDesc is the driver's opaque CUtensorMap; here it says what
// the map describes: a row-major bf16 matrix and the box it is read in.
// EMU_TMA=early lands a copy at issue; late only when the barrier's
// arrivals are all in, the last moment the phase can wait for it (catches
// a stage read before its "full" wait, and a missing expect_tx: the phase
// then completes first and the bytes land on a later one).
struct TmaDesc {
    char* base;
    long long inner, rows;
    int box_inner, box_rows;
};
#define __grid_constant__
namespace emu {
struct TmaCopy {
    char* dst;
    TmaDesc d;
    int x, y;
};
inline bool tma_late = false;
inline void tma_land(const TmaCopy& c) {
    const TmaDesc& d = c.d;
    char* const base = ctas[owner(c.dst, 1)].smem;  // the destination block's (a multicast lands in several)
    const size_t off0 = (size_t)(c.dst - base);
    for (int r = 0; r < d.box_rows; ++r)
        for (int k = 0; k < d.box_inner; ++k) {
            const long long gy = (long long)c.y + r, gx = (long long)c.x + k;
            unsigned short v = 0;  // outside the matrix: zeros
            if (gy >= 0 && gy < d.rows && gx >= 0 && gx < d.inner) std::memcpy(&v, d.base + 2 * (gy * d.inner + gx), 2);
            size_t off = off0 + (size_t)r * 128 + (size_t)k * 2;
            off ^= ((off >> 7) & 7) << 4;  // the 128-byte swizzle, from the address as the hardware does
            std::memcpy(base + off, &v, 2);
        }
}
// mbar_complete ends the phase once every arrival is in and every expected
// byte has landed.
inline void mbar_complete(Mbar& m) {
    if (m.pending != 0) return;
    if (tma_late) {
        for (const TmaCopy& c : m.inflight) {
            tma_land(c);
            m.tx -= 2LL * c.d.box_inner * c.d.box_rows;
        }
        m.inflight.clear();
        for (const BulkCopy& c : m.bulk) {
            std::memcpy(c.dst, c.src, c.bytes);
            m.tx -= c.bytes;
        }
        m.bulk.clear();
    }
    if (m.tx < 0) fail("mbarrier: more bytes landed than expect_tx announced%s");
    if (m.tx != 0) return;  // announced bytes never issued: the waiters deadlock
    m.pending = m.expected;
    ++m.phase;
    for (Fiber& f : fibers)
        if (f.state == WaitMbar) {
            f.state = Ready;
            ready.set(f.flat);
        }
}
}  // namespace emu
// EMU_BUG_TMA_NO_EXPECT: expect_tx does nothing (for the test that the
// emulator catches a stage reported full before its tile lands).
inline void mbar_expect_tx(saddr_t bar, u32 bytes) {
#ifndef EMU_BUG_TMA_NO_EXPECT
    emu::mbar_at(bar).tx += bytes;
#else
    (void)emu::mbar_at(bar), (void)bytes;
#endif
}
inline void tma_load_2d(saddr_t dst, const TmaDesc* d, int x, int y, saddr_t bar) {
    emu::Mbar& m = emu::mbar_at(bar);
    const int r = emu::owner(dst, (size_t)d->box_rows * 128);
    if (r < 0) emu::fail("TMA destination box outside shared memory%s");
    if (((size_t)(dst - emu::ctas[r].smem) & 1023) != 0) emu::fail("TMA destination not 1024-byte aligned (128-byte swizzle)%s");
    if (d->box_inner * 2 != 128) emu::fail("TMA box: only rows of 128 bytes (the 128-byte swizzle's span) are modelled%s");
    if (d->box_rows < 1 || d->box_rows > 256) emu::fail("TMA box rows out of 1..256%s");
    if ((x % 8) != 0) emu::fail("TMA x not 16-byte aligned%s");
    emu::TmaCopy c{dst, *d, x, y};
    if (emu::tma_late) {
        m.inflight.push_back(c);
        emu::mbar_complete(m);
        return;
    }
    emu::tma_land(c);
    m.tx -= 2LL * d->box_inner * d->box_rows;
    emu::mbar_complete(m);
}
// Clusters. A block's shared::cluster address of a peer's variable is the
// same offset in the peer's shared memory (mapa).
inline int cluster_rank() { return emu::cur->cta; }
inline int cluster_size() { return (int)emu::ctas.size(); }
inline saddr_t mapa(saddr_t a, int rank) {
    if (!emu::in_smem(a, 1)) emu::fail("mapa of an address outside this block's shared memory%s");
    if (rank < 0 || rank >= (int)emu::ctas.size()) emu::fail("mapa: no such block in the cluster%s");
    return emu::ctas[rank].smem + (a - emu::dyn_smem);
}
inline void mbar_arrive(saddr_t bar);
// mbar_arrive_cta arrives on the barrier at bar's offset in block rank.
inline void mbar_arrive_cta(saddr_t bar, int rank) { mbar_arrive(mapa(bar, rank)); }
// tma_load_2d_mc: the box lands at dst's offset in every block of mask,
// its bytes counted on the barrier at bar's offset in each.
inline void tma_load_2d_mc(saddr_t dst, const TmaDesc* d, int x, int y, saddr_t bar, unsigned short mask) {
    if (mask == 0 || (mask >> emu::ctas.size()) != 0) emu::fail("multicast mask names no block or one outside the cluster%s");
    for (int r = 0; r < (int)emu::ctas.size(); ++r)
        if (mask & (1u << r)) tma_load_2d(mapa(dst, r), d, x, y, mapa(bar, r));
}
inline void cluster_sync_all() { emu::cluster_sync(); }
// bulk_s2s: bytes of this block's shared memory at src to a peer's at dst,
// counted on the peer's barrier bar (EMU_TMA=late: when its arrivals are in).
inline void bulk_s2s(saddr_t dst, saddr_t src, u32 bytes, saddr_t bar) {
    if (!emu::in_smem(src, bytes)) emu::fail("bulk copy source outside this block's shared memory%s");
    const int r = emu::owner(dst, bytes);
    if (r < 0 || r == emu::cur->cta) emu::fail("bulk copy destination not in a peer block's shared memory%s");
    if (bytes % 16 != 0 || ((uintptr_t)(src - emu::dyn_smem) & 15) != 0 || ((size_t)(dst - emu::ctas[r].smem) & 15) != 0)
        emu::fail("bulk copy not in 16-byte units%s");
    emu::Mbar& m = emu::mbar_at(bar);
    if (emu::owner(bar, 8) != r) emu::fail("bulk copy counted on a barrier of another block than its destination's%s");
    if (emu::tma_late) {
        m.bulk.push_back(emu::BulkCopy{dst, src, (int)bytes});
        emu::mbar_complete(m);
        return;
    }
    std::memcpy(dst, src, bytes);
    m.tx -= bytes;
    emu::mbar_complete(m);
}
#define __cluster_dims__(...)
inline void mbar_init(saddr_t bar, int count) {
    if (((uintptr_t)(bar - emu::dyn_smem) & 7) != 0 || !emu::in_smem(bar, 8)) emu::fail("mbarrier.init outside shared memory%s");
    emu::Mbar m;
    m.expected = m.pending = count;
    emu::mbars[bar] = m;
}
inline void mbar_init_fence() {}
inline void mbar_arrive(saddr_t bar) {
    emu::Mbar& m = emu::mbar_at(bar);
    if (m.pending == 0) emu::fail("mbarrier: an arrival beyond the expected count%s");
    --m.pending;
    emu::mbar_complete(m);
}
// try_wait.parity P succeeds once the phase of parity P has completed: the
// current (incomplete) phase's parity differs from P.
inline void mbar_wait(saddr_t bar, int parity) {
    for (;;) {
        emu::Mbar& m = emu::mbar_at(bar);
        if ((int)(m.phase & 1) != (parity & 1)) return;
        emu::cur->state = emu::WaitMbar;
        emu::ready.clear(emu::cur->flat);
        emu::yield();
    }
}
inline void fence_proxy_async() {}
template <int R>
inline void setmaxnreg_inc() {}
template <int R>
inline void setmaxnreg_dec() {}
inline void wg_arrive() {}
template <int R>
inline void wg_hold(float (&)[R]) {}

inline void wgmma_any(float* d, int n, u64 da, u64 db, int scale_d) {
    emu::WGroup& g = emu::wgroups[emu::cur->warp / 4];
    const int t = emu::cur->flat % 128, p = g.gen & 1;
    g.acc[p][t] = d, g.da[p][t] = da, g.db[p][t] = db, g.scale[p][t] = scale_d;
    emu::wg_sync([&](int par) {
        emu::WGOp op{g.da[par][0], g.db[par][0], n, g.scale[par][0] != 0, {}};
        for (int i = 0; i < 128; ++i) {
            if (g.da[par][i] != op.da || g.db[par][i] != op.db || (g.scale[par][i] != 0) != (op.scale != 0))
                emu::fail("wgmma operands differ between the threads of a warpgroup%s");
            op.acc[i] = g.acc[par][i];
        }
        if (emu::wg_late)
            g.open.push_back(op);
        else
            emu::run_wgmma(op);
    });
}
inline void wgmma_n64(float (&d)[32], u64 da, u64 db, int s) { wgmma_any(d, 64, da, db, s); }
inline void wgmma_n128(float (&d)[64], u64 da, u64 db, int s) { wgmma_any(d, 128, da, db, s); }
inline void wgmma_n256(float (&d)[128], u64 da, u64 db, int s) { wgmma_any(d, 256, da, db, s); }
inline void wg_commit() {
    emu::WGroup& g = emu::wgroups[emu::cur->warp / 4];
    emu::wg_sync([&](int) {
        g.groups.push_back(std::move(g.open));
        g.open.clear();
    });
}
// EMU_BUG_WG_WAIT_ONE_LESS: wgmma.wait_group retires one group too few
// (a stage handed back while its MMAs still read it), for the test that
// the late mode catches it.
template <int N>
inline void wg_wait() {
#ifdef EMU_BUG_WG_WAIT_ONE_LESS
    constexpr int pending = N + 1;
#else
    constexpr int pending = N;
#endif
    emu::WGroup& g = emu::wgroups[emu::cur->warp / 4];
    emu::wg_sync([&](int) {
        while ((int)g.groups.size() > pending) {
            for (const emu::WGOp& op : g.groups.front()) emu::run_wgmma(op);
            g.groups.erase(g.groups.begin());
        }
    });
}
