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
// Blocks run one after another; static __shared__ arrays are plain statics.
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

enum State { Ready, WaitWarp, WaitBlock, Done };

struct Fiber {
    jmp_buf jb;
    bool started = false;
    Dim3 tid;
    int flat = 0, lane = 0, warp = 0;
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

inline Dim3 block_idx, grid_dim, block_dim;
inline std::vector<Fiber> fibers;
inline std::vector<Warp> warps;
inline std::vector<char*> stacks;
inline Fiber* cur = nullptr;
inline jmp_buf sched_jb;
inline ucontext_t sched_uc, start_uc;
inline Bits ready;
inline int alive = 0, block_arrived = 0;
inline char* dyn_smem = nullptr;
inline size_t dyn_bytes = 0;
inline std::vector<Buffer> buffers;
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

inline void release_block() {
    block_arrived = 0;
    for (Fiber& f : fibers)
        if (f.state == WaitBlock) {
            f.state = Ready;
            ready.set(f.flat);
        }
}

// run_block runs one block of n threads to completion.
inline void run_block(int n) {
    fibers.assign(n, Fiber{});
    warps.assign((n + 31) / 32, Warp{});
    while ((int)stacks.size() < n) stacks.push_back((char*)std::malloc(kStack));
    alive = n;
    block_arrived = 0;
    ready.reset(n);
    for (int i = 0; i < n; ++i) {
        Fiber& f = fibers[i];
        f.flat = i;
        f.tid.x = i % block_dim.x;
        f.tid.y = (i / block_dim.x) % block_dim.y;
        f.tid.z = i / (block_dim.x * block_dim.y);
        f.lane = i & 31;
        f.warp = i >> 5;
        ++warps[f.warp].alive;
        ready.set(i);
    }
    std::memset(dyn_smem, 0xff, dyn_bytes);
    while (alive > 0) {
        const int c = ready.count();
        if (c == 0) fail("deadlock: every live thread waits at a barrier that cannot release%s");
        const int pick = sched == 0 ? ready.first() : sched == 1 ? ready.last() : ready.nth((int)(rng() % (unsigned)c));
        cur = &fibers[pick];
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
        // A block barrier also releases when the threads that have not
        // exited are all there.
        if (block_arrived > 0 && block_arrived == alive) release_block();
    }
    for (Fiber& f : fibers) {
        // Copies never waited for land (as on the device); a kernel that
        // reads them without waiting is what the late mode catches.
        for (auto& g : f.groups) land(g);
        land(f.open);
    }
}

inline void syncthreads() {
    if (++block_arrived == alive) {
        release_block();
        return;
    }
    cur->state = WaitBlock;
    ready.clear(cur->flat);
    yield();
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

inline bool in_buffers(const void* p, size_t n) {
    const char* c = (const char*)p;
    for (const Buffer& b : buffers)
        if (c >= b.p && c + n <= b.p + b.n) return true;
    return false;
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
inline float __expf(float x) { return std::exp(x); }
inline float __fdividef(float x, float y) { return y > 8.5070592e37f ? 0.f * x : x / y; }  // 2^126: what the device returns

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
    if (bytes && (((uintptr_t)src & 15) != 0 || !emu::in_buffers(src, 16))) emu::fail("cp.async source outside every buffer or not 16-byte aligned%s");
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
