// moe.cu — mstar's fused-MoE kernels, compiled at run time by NVRTC for the
// device's own architecture. The source includes no header: bf16 values are
// carried as their 16 bits (unsigned short) and converted with PTX, so the
// compile does not depend on where the toolkit keeps cuda_bf16.h.
//
// One forward pass is four launches on one stream:
//   moe_align      count slots per expert, pad each group to BM rows, scatter
//                  (moe_align_count/_scan/_scatter: the same over many blocks)
//                  slot indices (one block; integer atomics only)
//   gemm1          act[slot, I] = silu(x·W1_gate[e]ᵀ) ⊙ (x·W1_up[e]ᵀ)   (bf16 out)
//   gemm2          y[slot, H]   = w[slot] · act[slot]·W2[e]ᵀ              (bf16 out)
//   moe_combine    out[m, H]    = Σ_j y[m·K+j]   (fixed j order: deterministic)
//
// gemm1/gemm2 come in three families, all on bf16 tensor cores
// (mma.sync.m16n8k16, fp32 accumulation):
//   skinny (decode, few tokens per expert): A and B swapped so 16 weight
//     rows fill the MMA's M side and up to 8·NT tokens its N side; weights go
//     straight from global memory into registers with 16-byte loads (a k
//     permutation shared by both operands makes the fragment layout match
//     contiguous memory), so every weight byte is read once per token group;
//     the warps of a block split K and reduce through shared memory.
//   tiled (v1–v3): BM tokens × BN features × BK, cp.async multi-stage
//     pipeline into padded shared memory, ldmatrix, a WM×WN grid of warps.
//   tc (prefill, v4): the tiled GEMM rebuilt for throughput — swizzled
//     shared memory, addresses set up once per tile, register double
//     buffering, shared-memory epilogue, persistent grouped tile schedule.
//
// Tile parameters are template arguments; skinny and tiled instantiations
// below are named by their configuration, -D overrides (TL_*) shape the
// "custom" tiled instance, and tc instances come from -DMOE_TC_LIST (one
// small module per configuration, compiled when a plan first needs it).

typedef unsigned short bf16_t;
typedef unsigned int u32;

#ifndef TL_BM
#define TL_BM 64
#endif
#ifndef TL_BN
#define TL_BN 128
#endif
#ifndef TL_BK
#define TL_BK 32
#endif
#ifndef TL_WM
#define TL_WM 2
#endif
#ifndef TL_WN
#define TL_WN 2
#endif
#ifndef TL_STAGES
#define TL_STAGES 4
#endif
#ifndef SK_UNROLL
#define SK_UNROLL 4
#endif

// ---------------------------------------------------------------- helpers

// MOE_EMU builds this file as C++ for the CPU emulator (kernels/moe/emu):
// the PTX helpers below come from emu.h there, everything else is shared.
#ifndef MOE_EMU
#define MOE_DYNAMIC_SMEM(T, name) extern __shared__ T name[]
#define MOE_EMU_GEMM(NAME)
#define MOE_EMU_GEMM_FC(NAME)
#define MOE_EMU_GEMM_SA(NAME)
#define MOE_EMU_GEMM_TMA(NAME)
#endif

__device__ __forceinline__ float bf2f(u32 bits16) { return __uint_as_float(bits16 << 16); }

#ifndef MOE_EMU
__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
    u32 r;
    // cvt.rn.bf16x2.f32 d, a, b puts a in the upper half and b in the lower.
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
#endif

__device__ __forceinline__ bf16_t f2bf(float v) {
    return (bf16_t)(pack_bf16x2(v, 0.0f) & 0xffffu);
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + __expf(-g)); }
// silu_fast divides with the hardware reciprocal (MUFU.RCP, ~1 ulp) instead
// of IEEE division and its slow-path call: 64 of them per thread per tile in
// the tc epilogue. For g → -∞ the denominator overflows to +inf and the
// result is -0, as silu's limit.
__device__ __forceinline__ float silu_fast(float g) { return __fdividef(g, 1.0f + __expf(-g)); }

#ifndef MOE_EMU
__device__ __forceinline__ void mma_bf16(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

__device__ __forceinline__ void ldsm_x4(u32& r0, u32& r1, u32& r2, u32& r3, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(smem_addr(p)));
}

// cp_async16 copies 16 bytes global→shared, or writes 16 zero bytes when
// pred is false (src-size 0: nothing is read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool pred) {
    int n = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Shared-memory addresses as 32-bit offsets (saddr_t): the tc kernels keep
// them in registers and add compile-time offsets, with no generic→shared
// conversion per access.
typedef u32 saddr_t;
__device__ __forceinline__ saddr_t to_saddr(const void* p) { return smem_addr(p); }
__device__ __forceinline__ void ldsm_x4_s(u32& r0, u32& r1, u32& r2, u32& r3, saddr_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(a));
}
// cp_async16_s copies `bytes` (16, or 0: zero-fill) from global to shared.
__device__ __forceinline__ void cp_async16_s(saddr_t dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

// Weights are streamed once: keep them out of L1 (and let L2 evict them first).
__device__ __forceinline__ uint4 ld_stream(const bf16_t* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
// Activations are re-read by every block of a token group: normal caching.
__device__ __forceinline__ uint4 ld_act(const bf16_t* p) {
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// grid_dep_sync: under programmatic dependent launch (sm_90, the host's
// LaunchProgrammatic) the next kernel of the pass is launched as this one's
// blocks exit, and its blocks may start before this kernel's writes are
// visible; so each kernel waits here, before it touches global memory, for
// the previous one to finish and flush. No kernel triggers its dependents
// early (griddepcontrol.launch_dependents): measured on the H200
// (2026-12-03, NOTES v18), blocks scheduled beside a running GEMM cost up to
// 22% (qwen3-235b M=4), at the start or at a block's last tile alike, while
// the launch at block exit keeps the small-M gain. Launched plainly, a no-op.
__device__ __forceinline__ void grid_dep_sync() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
#endif  // !MOE_EMU

// ---------------------------------------------------------------- alignment

// align_scan: an exclusive scan of v over the 1024 threads of a block
// (every thread calls it); *total gets the sum. warp_sum: 32 ints of
// shared memory.
__device__ __forceinline__ int align_scan(int v, int* warp_sum, int* total) {
    const int t = threadIdx.x, lane = t & 31, w = t >> 5;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) warp_sum[w] = x;
    __syncthreads();
    if (w == 0) {
        int s = warp_sum[lane];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int y = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += y;
        }
        warp_sum[lane] = s;  // inclusive
    }
    __syncthreads();
    *total = warp_sum[31];
    return x + (w > 0 ? warp_sum[w - 1] : 0) - v;
}

// align_tile_experts: block_expert[b] = the expert whose group holds tile
// b (offs: the E+1 group offsets in shared memory), -1 past the end.
__device__ __forceinline__ void align_tile_experts(const int* offs, int E, int total, int block, int max_rows,
                                                   int* __restrict__ block_expert) {
    const int nblocks = total / block, maxblocks = max_rows / block;
    for (int b = threadIdx.x; b < maxblocks; b += 1024) {
        int ex = -1;
        if (b < nblocks) {
            int row = b * block, lo = 0, hi = E;  // find last e with offs[e] <= row
            while (hi - lo > 1) {
                int mid = (lo + hi) >> 1;
                if (offs[mid] <= row) lo = mid; else hi = mid;
            }
            ex = lo;
        }
        block_expert[b] = ex;
    }
}

// moe_align groups `slots` routing slots (ids[s] = expert, or -1 for a slot
// dropped under expert parallelism) by expert, each group padded to a
// multiple of `block` rows. Outputs: sorted[row] = slot index or `slots`
// (padding), block_expert[b] = expert of tile b (-1 past the end, up to
// max_rows/block), *total = padded row count. One block of 1024 threads;
// requires E <= 1024.
extern "C" __global__ void __launch_bounds__(1024)
moe_align(const int* __restrict__ ids, int slots, int E, int block, int* __restrict__ sorted,
          int* __restrict__ block_expert, int* __restrict__ total_out, int max_rows) {
    __shared__ int cnt[1024];
    __shared__ int offs[1025];
    __shared__ int cursor[1024];
    __shared__ int warp_sum[32];
    grid_dep_sync();
    const int t = threadIdx.x;
    if (t < E) cnt[t] = 0;
    __syncthreads();
    for (int s = t; s < slots; s += 1024) {
        int id = ids[s];
        if (id >= 0) atomicAdd(&cnt[id], 1);
    }
    __syncthreads();
    const int v = t < E ? (cnt[t] + block - 1) / block * block : 0;
    int total;
    const int first = align_scan(v, warp_sum, &total);
    if (t < E) {
        offs[t] = first;
        cursor[t] = first;
    }
    if (t == 0) {
        offs[E] = total;
        *total_out = total;
    }
    __syncthreads();
    align_tile_experts(offs, E, total, block, max_rows, block_expert);
    for (int i = t; i < total; i += 1024) sorted[i] = slots;
    __syncthreads();
    for (int s = t; s < slots; s += 1024) {
        int id = ids[s];
        if (id >= 0) sorted[atomicAdd(&cursor[id], 1)] = s;
    }
}

// Many slots: one block's shared-memory atomics and scattered stores made
// alignment a serial step (41 µs for 32768 slots on the H200). The same
// work in three kernels: per-block counts, one block's scan, per-block
// scatter. Each block takes ALIGN_CHUNK consecutive slots.
#define ALIGN_CHUNK 2048

// moe_align_count: counts[b·E + e] = slots of block b routed to expert e.
extern "C" __global__ void __launch_bounds__(1024)
moe_align_count(const int* __restrict__ ids, int slots, int E, int* __restrict__ counts) {
    __shared__ int cnt[1024];
    grid_dep_sync();
    const int t = threadIdx.x;
    for (int e = t; e < E; e += 1024) cnt[e] = 0;
    __syncthreads();
    const int s0 = blockIdx.x * ALIGN_CHUNK, s1 = min(s0 + ALIGN_CHUNK, slots);
    for (int s = s0 + t; s < s1; s += 1024) {
        const int id = ids[s];
        if (id >= 0) atomicAdd(&cnt[id], 1);
    }
    __syncthreads();
    for (int e = t; e < E; e += 1024) counts[blockIdx.x * E + e] = cnt[e];
}

// moe_align_scan: from the G blocks' counts, each expert's padded group
// offset; counts[b·E + e] becomes block b's first row for expert e; the
// padding rows of each group get `slots`; block_expert and *total as
// moe_align. One block of 1024 threads, E <= 1024.
extern "C" __global__ void __launch_bounds__(1024)
moe_align_scan(int G, int slots, int E, int block, int* __restrict__ counts, int* __restrict__ sorted,
               int* __restrict__ block_expert, int* __restrict__ total_out, int max_rows) {
    __shared__ int offs[1025];
    __shared__ int cnt[1024];
    __shared__ int warp_sum[32];
    grid_dep_sync();
    const int t = threadIdx.x, lane = t & 31, w = t >> 5;
    int c = 0;
    if (t < E)
        for (int b = 0; b < G; ++b) c += counts[b * E + t];
    const int v = t < E ? (c + block - 1) / block * block : 0;
    int total;
    const int first = align_scan(v, warp_sum, &total);
    if (t < E) {
        offs[t] = first;
        cnt[t] = c;
        int row = first;
        for (int b = 0; b < G; ++b) {
            const int n = counts[b * E + t];
            counts[b * E + t] = row;
            row += n;
        }
    }
    if (t == 0) {
        offs[E] = total;
        *total_out = total;
    }
    __syncthreads();
    // Each group's padding rows get `slots`: one warp per expert at a time,
    // its lanes on consecutive rows (a thread per expert looping over up to
    // block-1 rows was the scan's slowest part).
    for (int e = w; e < E; e += 32)
        for (int r = offs[e] + cnt[e] + lane; r < offs[e + 1]; r += 32) sorted[r] = slots;
    align_tile_experts(offs, E, total, block, max_rows, block_expert);
}

// moe_align_scatter: each block writes its slots from its first rows.
extern "C" __global__ void __launch_bounds__(1024)
moe_align_scatter(const int* __restrict__ ids, int slots, int E, const int* __restrict__ counts,
                  int* __restrict__ sorted) {
    __shared__ int cursor[1024];
    grid_dep_sync();
    const int t = threadIdx.x;
    for (int e = t; e < E; e += 1024) cursor[e] = counts[blockIdx.x * E + e];
    __syncthreads();
    const int s0 = blockIdx.x * ALIGN_CHUNK, s1 = min(s0 + ALIGN_CHUNK, slots);
    for (int s = s0 + t; s < s1; s += 1024) {
        const int id = ids[s];
        if (id >= 0) sorted[atomicAdd(&cursor[id], 1)] = s;
    }
}

// ---------------------------------------------------------------- skinny GEMMs

// skinny_self_align is moe_align for at most 64 slots inside a gemm1
// block, one thread a slot: a slot's row is the padded rows of the experts
// below its own plus its rank among its expert's slots (slot order). It
// leaves the block's BM rows in rows (pad where none) and its expert in *e,
// and returns the padded total. Block (0, 0) also writes sorted,
// block_expert (-1 past the end) and *total for gemm2, as moe_align does;
// no other block reads them, so none waits for it.
template <int BM>
__device__ __forceinline__ int skinny_self_align(const int* __restrict__ ids, int slots, int blk, int* rows, int* e,
                                                 int* sorted, int* block_expert, int* total_out) {
    __shared__ int s_ids[64], s_padded[64], s_total, s_e;
    const int t = threadIdx.x;
    if (t < slots) s_ids[t] = ids[t];
    if (t < BM) rows[t] = slots;
    if (t == 0) s_e = -1;
    __syncthreads();
    int id = -1, rank = 0;
    if (t < slots && (id = s_ids[t]) >= 0) {
        int count = 0;
        bool first = true;
        for (int u = 0; u < slots; ++u) {
            if (s_ids[u] != id) continue;
            ++count;
            if (u < t) {
                ++rank;
                first = false;
            }
        }
        s_padded[t] = first ? (count + BM - 1) / BM * BM : 0;  // the expert's rows, counted at its first slot
    } else if (t < slots) {
        s_padded[t] = 0;  // dropped
    }
    __syncthreads();
    int start = 0, total = 0;
    for (int u = 0; u < slots; ++u) {
        total += s_padded[u];
        if (s_ids[u] >= 0 && s_ids[u] < id) start += s_padded[u];
    }
    const int row = start + rank;
    if (id >= 0 && row >= blk * BM && row < blk * BM + BM) {
        rows[row - blk * BM] = t;
        s_e = id;
    }
    if (t == 0) s_total = total;
    if (blockIdx.x == 0 && blk == 0) {
        const int tiles = gridDim.y;  // max_rows / BM
        for (int i = t; i < total; i += blockDim.x) sorted[i] = slots;
        for (int b = total / BM + t; b < tiles; b += blockDim.x) block_expert[b] = -1;
        __syncthreads();
        if (id >= 0) {
            sorted[row] = t;
            if (rank % BM == 0) block_expert[row / BM] = id;
        }
        if (t == 0) *total_out = total;
    }
    __syncthreads();
    *e = s_e;
    return s_total;
}

// MODE 1: out = act[slot, N=I] from W = W1[E][2I][K=H] (gate rows, then up
// rows) and src = x[M][H], the token row being slot / topk.
// MODE 2: out = y[slot, N=H] = wts[slot] · (W2[E][H][K=I] · act[slot]).
// Block: WARPS warps, each covering every WARPS-th 32-wide chunk of K for
// the block's 16 weight rows (×2 for gate and up) and its 8·NT tokens. More
// warps (split-K) keep more loads in flight when the grid is small (few
// touched experts × few 16-row tiles, e.g. deepseek-v3 --tp 8 at M=1).
// FC (MODE 2 only) fuses the combine: after writing its y rows each block
// counts itself done for its 16 output columns (cnt[blockIdx.x]); the last
// of them sums each token's top-k rows in slot order, as moe_combine does,
// writes out[M][N] for those columns and resets the count for the next pass.
// SA (MODE 1 only, at most 64 slots, the host checks) fuses the alignment:
// every block sorts the slots itself (skinny_self_align) and block (0, 0)
// also writes the alignment gemm2 reads; ids is then the routing.
template <int MODE, int NT, int WARPS, int FC = 0, int SA = 0>
__device__ __forceinline__ void skinny(const bf16_t* __restrict__ W, const bf16_t* __restrict__ src,
                                       bf16_t* __restrict__ dst, const float* __restrict__ wts,
                                       const int* __restrict__ sorted, const int* __restrict__ block_expert,
                                       const int* __restrict__ total_ptr, int N, int K, int topk, int pad,
                                       const int* __restrict__ ids = nullptr, bf16_t* __restrict__ out = nullptr,
                                       int* cnt = nullptr, int M = 0) {
    static_assert(FC == 0 || MODE == 2, "the combine fuses into gemm2 only");
    static_assert(SA == 0 || (MODE == 1 && WARPS * 32 >= 64), "the alignment fuses into gemm1, one thread a slot");
    constexpr int BM = 8 * NT;
    constexpr int NACC = (MODE == 1 ? 2 : 1) * NT * 4;
    __shared__ float red[WARPS][NACC][33];
    __shared__ int s_rows[SA ? BM : 1];
    const int blk = blockIdx.y;
    int e;
    if (SA) {
        const int total = skinny_self_align<BM>(ids, pad, blk, s_rows, &e, const_cast<int*>(sorted),
                                                const_cast<int*>(block_expert), const_cast<int*>(total_ptr));
        if (blk * BM >= total) return;
    } else {
        if (blk * BM >= *total_ptr) return;
        e = block_expert[blk];
    }
    // The block's slots: its rows of the alignment.
    auto row_slot = [&](int i) { return SA ? s_rows[i] : sorted[blk * BM + i]; };
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, q = lane & 3;
    const int n0 = blockIdx.x * 16;

    const size_t rowsPerExpert = (MODE == 1 ? 2 : 1) * (size_t)N;
    const bf16_t* We = W + (size_t)e * rowsPerExpert * K;
    const int r0 = n0 + g, r1 = n0 + g + 8;
    const bool v0 = r0 < N, v1 = r1 < N;
    const bf16_t* ag0 = We + (size_t)(v0 ? r0 : 0) * K;
    const bf16_t* ag1 = We + (size_t)(v1 ? r1 : 0) * K;
    const bf16_t* au0 = We + (size_t)(N + (v0 ? r0 : 0)) * K;  // MODE 1 only
    const bf16_t* au1 = We + (size_t)(N + (v1 ? r1 : 0)) * K;

    const bf16_t* brow[NT];
    bool bok[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        int slot = row_slot(t * 8 + g);
        bok[t] = slot != pad;
        int srow = bok[t] ? (MODE == 1 ? slot / topk : slot) : 0;
        brow[t] = src + (size_t)srow * K;
    }

    float accg[NT][4], accu[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) accg[t][i] = accu[t][i] = 0.f;

    const uint4 zero = make_uint4(0, 0, 0, 0);
    const int nchunks = (K + 31) / 32;
    for (int c0 = warp; c0 < nchunks; c0 += WARPS * SK_UNROLL) {
        uint4 wg0[SK_UNROLL], wg1[SK_UNROLL], wu0[SK_UNROLL], wu1[SK_UNROLL], bx[SK_UNROLL][NT];
        // All loads of SK_UNROLL chunks first: many 16-byte reads in flight.
#pragma unroll
        for (int u = 0; u < SK_UNROLL; ++u) {
            const int c = c0 + u * WARPS;
            const int k = c * 32 + 8 * q;
            const bool kin = c < nchunks && k < K;
            wg0[u] = kin && v0 ? ld_stream(ag0 + k) : zero;
            wg1[u] = kin && v1 ? ld_stream(ag1 + k) : zero;
            if (MODE == 1) {
                wu0[u] = kin && v0 ? ld_stream(au0 + k) : zero;
                wu1[u] = kin && v1 ? ld_stream(au1 + k) : zero;
            }
#pragma unroll
            for (int t = 0; t < NT; ++t) bx[u][t] = kin && bok[t] ? ld_act(brow[t] + k) : zero;
        }
#pragma unroll
        for (int u = 0; u < SK_UNROLL; ++u) {
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                // Logical k 0..15 of the chunk are physical pairs .x/.y of each
                // thread's 8 contiguous elements, logical 16..31 are .z/.w; A
                // and B use the same map, so the dot products are unchanged.
                mma_bf16(accg[t], wg0[u].x, wg1[u].x, wg0[u].y, wg1[u].y, bx[u][t].x, bx[u][t].y);
                mma_bf16(accg[t], wg0[u].z, wg1[u].z, wg0[u].w, wg1[u].w, bx[u][t].z, bx[u][t].w);
                if (MODE == 1) {
                    mma_bf16(accu[t], wu0[u].x, wu1[u].x, wu0[u].y, wu1[u].y, bx[u][t].x, bx[u][t].y);
                    mma_bf16(accu[t], wu0[u].z, wu1[u].z, wu0[u].w, wu1[u].w, bx[u][t].z, bx[u][t].w);
                }
            }
        }
    }

    // Split-K reduction across the block's warps.
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            red[warp][t * 4 + i][lane] = accg[t][i];
            if (MODE == 1) red[warp][NT * 4 + t * 4 + i][lane] = accu[t][i];
        }
    __syncthreads();
    if (!FC && warp != 0) return;
    if (warp == 0) {
#pragma unroll
        for (int t = 0; t < NT; ++t) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                float sg = 0.f, su = 0.f;
#pragma unroll
                for (int w = 0; w < WARPS; ++w) {
                    sg += red[w][t * 4 + i][lane];
                    if (MODE == 1) su += red[w][NT * 4 + t * 4 + i][lane];
                }
                // C fragment: row (weight row) g or g+8, column (token) 2q or 2q+1.
                const int row = n0 + g + (i >= 2 ? 8 : 0);
                const int col = t * 8 + 2 * q + (i & 1);
                const int slot = row_slot(col);
                if (slot == pad || row >= N) continue;
                float v = MODE == 1 ? silu(sg) * su : sg * wts[slot];
                dst[(size_t)slot * N + row] = f2bf(v);
            }
        }
    }
    if (FC) {
        __shared__ int s_last;
        __threadfence();  // this block's y rows are visible before it counts itself
        __syncthreads();
        if (threadIdx.x == 0) s_last = atomicAdd(&cnt[blockIdx.x], 1) == *total_ptr / BM - 1;
        __syncthreads();
        if (!s_last) return;
        __threadfence();  // and the last block sees every other block's
        for (int i = threadIdx.x; i < M * 16; i += WARPS * 32) {
            const int m = i / 16, col = n0 + i % 16;
            if (col >= N) continue;
            float acc = 0.f;
            for (int j = 0; j < topk; ++j) {
                const int slot = m * topk + j;
                if (ids[slot] < 0) continue;
                // volatile: from L2, where the other blocks' rows are.
                acc += bf2f(*(const volatile bf16_t*)(dst + (size_t)slot * N + col));
            }
            out[(size_t)m * N + col] = f2bf(acc);
        }
        if (threadIdx.x == 0) cnt[blockIdx.x] = 0;  // for the next pass
    }
}

#define SKINNY_KERNEL(NAME, MODE, NT, WARPS)                                                            \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                             \
    NAME(const bf16_t* __restrict__ W, const bf16_t* __restrict__ src, bf16_t* __restrict__ dst,          \
         const float* __restrict__ wts, const int* __restrict__ sorted, const int* __restrict__ bexp,     \
         const int* __restrict__ total, int N, int K, int topk, int pad) {                                \
        grid_dep_sync();                                                                                  \
        skinny<MODE, NT, WARPS>(W, src, dst, wts, sorted, bexp, total, N, K, topk, pad);                  \
    }                                                                                                    \
    MOE_EMU_GEMM(NAME)

// The fused-combine gemm2 (FC): four more arguments.
#define SKINNY_FC_KERNEL(NAME, NT, WARPS)                                                                \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                             \
    NAME(const bf16_t* __restrict__ W, const bf16_t* __restrict__ src, bf16_t* __restrict__ dst,          \
         const float* __restrict__ wts, const int* __restrict__ sorted, const int* __restrict__ bexp,     \
         const int* __restrict__ total, int N, int K, int topk, int pad, const int* __restrict__ ids,      \
         bf16_t* __restrict__ out, int* cnt, int M) {                                                     \
        grid_dep_sync();                                                                                  \
        skinny<2, NT, WARPS, 1>(W, src, dst, wts, sorted, bexp, total, N, K, topk, pad, ids, out, cnt, M);  \
    }                                                                                                    \
    MOE_EMU_GEMM_FC(NAME)

// The self-aligning gemm1 (SA): the routing as one more argument.
#define SKINNY_SA_KERNEL(NAME, NT, WARPS)                                                                \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                             \
    NAME(const bf16_t* __restrict__ W, const bf16_t* __restrict__ src, bf16_t* __restrict__ dst,          \
         const float* __restrict__ wts, int* sorted, int* bexp, int* total, int N, int K, int topk,      \
         int pad, const int* __restrict__ ids) {                                                          \
        grid_dep_sync();                                                                                  \
        skinny<1, NT, WARPS, 0, 1>(W, src, dst, wts, sorted, bexp, total, N, K, topk, pad, ids);          \
    }                                                                                                    \
    MOE_EMU_GEMM_SA(NAME)

// MOE_TC_ONLY leaves out the built-in instances (a module for one tc configuration).
#ifndef MOE_TC_ONLY
SKINNY_SA_KERNEL(moe_gemm1_skinny_nt1_w4_sa, 1, 4)
SKINNY_SA_KERNEL(moe_gemm1_skinny_nt1_w16_sa, 1, 16)
SKINNY_SA_KERNEL(moe_gemm1_skinny_nt2_w4_sa, 2, 4)
SKINNY_SA_KERNEL(moe_gemm1_skinny_nt4_w4_sa, 4, 4)
SKINNY_FC_KERNEL(moe_gemm2_skinny_nt1_w4_fc, 1, 4)
SKINNY_FC_KERNEL(moe_gemm2_skinny_nt1_w16_fc, 1, 16)
SKINNY_FC_KERNEL(moe_gemm2_skinny_nt2_w4_fc, 2, 4)
SKINNY_FC_KERNEL(moe_gemm2_skinny_nt4_w4_fc, 4, 4)
SKINNY_KERNEL(moe_gemm1_skinny_nt1_w4, 1, 1, 4)
SKINNY_KERNEL(moe_gemm1_skinny_nt1_w16, 1, 1, 16)
SKINNY_KERNEL(moe_gemm1_skinny_nt2_w4, 1, 2, 4)
SKINNY_KERNEL(moe_gemm1_skinny_nt4_w4, 1, 4, 4)
SKINNY_KERNEL(moe_gemm2_skinny_nt1_w4, 2, 1, 4)
SKINNY_KERNEL(moe_gemm2_skinny_nt1_w16, 2, 1, 16)
SKINNY_KERNEL(moe_gemm2_skinny_nt2_w4, 2, 2, 4)
SKINNY_KERNEL(moe_gemm2_skinny_nt4_w4, 2, 4, 4)
#endif
// MOE_GV section: begin
// ---------------------------------------------------------------- gv: decode GEMMs as dot products
//
// skinny's gv=1 twins (nt=1's alignment: groups of 8 rows, the expert's
// slots first): a warp reads one weight row at a time whole, each lane 16
// contiguous bytes a load, so one load instruction takes 512 contiguous
// bytes of a row (skinny's MMA fragments take 64 bytes of each of 8 rows),
// several loads in flight a lane; fp32 FMAs over the group's real tokens
// only, the loop instantiated for 1, 2, 4 or 8 of them, so a lone token
// pays no FMAs for the 7 padding columns an MMA would compute. On an H100
// this pattern read deepseek-v3 tp8 M=1's gemm1 weights in 22.1 µs where
// skinny's take 26.4 and the same bytes in address order 21.1
// (next/probe/decode_stream.cu).
// MODE 1 (gemm1): GV_WARPS warps, GV_WARPS/2 features: warp w reads the
//   gate row (w even) or the up row (w odd) of feature n0 + w/2, and
//   shared memory pairs them for silu(g)·u.
// MODE 2 (gemm2): rows of K = I are short, so a warp reads GV_R2 rows at
//   once: GV_WARPS·GV_R2 features a block.
// FC and SA as skinny's: the same alignment and the same combine, over the
// block's GV_COLS2 output columns.
// This section is hashed apart from the rest of moe.cu (tuned.go): tuned
// batches that never had a gv candidate stay valid when it changes.

#define GV_WARPS 8
#define GV_R2 4
#define GV_COLS1 (GV_WARPS / 2)
#define GV_COLS2 (GV_WARPS * GV_R2)

// gv_fma8 adds the dot product of 8 bf16 weights with 8 fp32 values.
__device__ __forceinline__ float gv_fma8(float acc, uint4 w, const float* x) {
    acc += __uint_as_float(w.x << 16) * x[0];
    acc += __uint_as_float(w.x & 0xffff0000u) * x[1];
    acc += __uint_as_float(w.y << 16) * x[2];
    acc += __uint_as_float(w.y & 0xffff0000u) * x[3];
    acc += __uint_as_float(w.z << 16) * x[4];
    acc += __uint_as_float(w.z & 0xffff0000u) * x[5];
    acc += __uint_as_float(w.w << 16) * x[6];
    acc += __uint_as_float(w.w & 0xffff0000u) * x[7];
    return acc;
}

// gv_dots adds to acc[r][t] the dot products over K of the R weight rows w[r]
// with the TT token rows x[t]: lane l takes elements 8l..8l+7 of every 256,
// U such steps in flight (weights and token values loaded before any FMA).
template <int R, int TT, int U>
__device__ __forceinline__ void gv_dots(const bf16_t* const* w, const bf16_t* const* x, int K, int lane,
                                        float (*acc)[8]) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int k0 = lane * 8; k0 < K; k0 += 256 * U) {
        uint4 wv[R][U], xv[TT][U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int k = k0 + u * 256;
#pragma unroll
            for (int r = 0; r < R; ++r) wv[r][u] = k < K ? ld_stream(w[r] + k) : zero;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int k = k0 + u * 256;
#pragma unroll
            for (int t = 0; t < TT; ++t) xv[t][u] = k < K ? ld_act(x[t] + k) : zero;
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int t = 0; t < TT; ++t) {
                const uint4 v = xv[t][u];
                const float xf[8] = {__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u),
                                     __uint_as_float(v.y << 16), __uint_as_float(v.y & 0xffff0000u),
                                     __uint_as_float(v.z << 16), __uint_as_float(v.z & 0xffff0000u),
                                     __uint_as_float(v.w << 16), __uint_as_float(v.w & 0xffff0000u)};
#pragma unroll
                for (int r = 0; r < R; ++r) acc[r][t] = gv_fma8(acc[r][t], wv[r][u], xf);
            }
    }
}

// gv_warp_sum leaves the sum of v over the warp in every lane.
__device__ __forceinline__ float gv_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __uint_as_float(__shfl_xor_sync(0xffffffffu, __float_as_uint(v), o));
    return v;
}

// gv_dots_for runs gv_dots for the fewest of 1, 2, 4 or 8 token columns that
// hold nv real tokens (the loads in flight shrink as columns grow, so the
// registers stay about the same).
template <int R, int U1>
__device__ __forceinline__ void gv_dots_for(int nv, const bf16_t* const* w, const bf16_t* const* x, int K, int lane,
                                            float (*acc)[8]) {
#ifdef EMU_BUG_GV_ONE_TOKEN
    nv = 1;  // the emulator's test: the first token's columns only
#endif
    if (nv <= 1)
        gv_dots<R, 1, U1>(w, x, K, lane, acc);
    else if (nv <= 2)
        gv_dots<R, 2, (U1 / 2 > 0 ? U1 / 2 : 1)>(w, x, K, lane, acc);
    else if (nv <= 4)
        gv_dots<R, 4, (U1 / 4 > 0 ? U1 / 4 : 1)>(w, x, K, lane, acc);
    else
        gv_dots<R, 8, (U1 / 8 > 0 ? U1 / 8 : 1)>(w, x, K, lane, acc);
}

// MODE, FC and SA as skinny's; the arguments too.
template <int MODE, int FC = 0, int SA = 0>
__device__ __forceinline__ void gv(const bf16_t* __restrict__ W, const bf16_t* __restrict__ src,
                                   bf16_t* __restrict__ dst, const float* __restrict__ wts,
                                   const int* __restrict__ sorted, const int* __restrict__ block_expert,
                                   const int* __restrict__ total_ptr, int N, int K, int topk, int pad,
                                   const int* __restrict__ ids = nullptr, bf16_t* __restrict__ out = nullptr,
                                   int* cnt = nullptr, int M = 0) {
    static_assert(FC == 0 || MODE == 2, "the combine fuses into gemm2 only");
    static_assert(SA == 0 || MODE == 1, "the alignment fuses into gemm1 only");
    constexpr int BM = 8;
    __shared__ int s_rows[SA ? BM : 1];
    __shared__ int s_tok[BM], s_nv;
    __shared__ float s_part[MODE == 1 ? GV_WARPS : 1][BM];
    const int blk = blockIdx.y;
    int e;
    if (SA) {
        const int total = skinny_self_align<BM>(ids, pad, blk, s_rows, &e, const_cast<int*>(sorted),
                                                const_cast<int*>(block_expert), const_cast<int*>(total_ptr));
        if (blk * BM >= total) return;
    } else {
        if (blk * BM >= *total_ptr) return;
        e = block_expert[blk];
    }
    // The group's real slots, in row order.
    if (threadIdx.x == 0) {
        int n = 0;
        for (int i = 0; i < BM; ++i) {
            const int s = SA ? s_rows[i] : sorted[blk * BM + i];
            if (s != pad) s_tok[n++] = s;
        }
        s_nv = n;
    }
    __syncthreads();
    const int nv = s_nv;  // ≥ 1: no group is all padding (an expert pads to less than a group)
    if (nv == 0 && !FC) return;  // whole block, so no barrier waits; an FC block still counts itself below
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const bf16_t* x[8];
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        const int s = s_tok[t < nv ? t : 0];
        x[t] = src + (size_t)(MODE == 1 ? s / topk : s) * K;
    }
    float acc[MODE == 1 ? 1 : GV_R2][8];
#pragma unroll
    for (int r = 0; r < (MODE == 1 ? 1 : GV_R2); ++r)
#pragma unroll
        for (int t = 0; t < 8; ++t) acc[r][t] = 0.f;

    if (MODE == 1) {
        const int n = blockIdx.x * GV_COLS1 + warp / 2;
        const size_t row = (size_t)(warp & 1) * N + (n < N ? n : 0);  // gate rows, then up rows
        const bf16_t* w[1] = {W + ((size_t)e * 2 * N + row) * K};
        gv_dots_for<1, 8>(nv, w, x, K, lane, acc);
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            if (t >= nv) break;  // the real tokens' sums only: 5 shuffles each
            const float v = gv_warp_sum(acc[0][t]);
            if (lane == t) s_part[warp][t] = v;
        }
        __syncthreads();
        // Thread i: feature i / 8, token i % 8.
        const int f = threadIdx.x / BM, t = threadIdx.x % BM;
        const int nf = blockIdx.x * GV_COLS1 + f;
        if (f < GV_COLS1 && t < nv && nf < N)
            dst[(size_t)s_tok[t] * N + nf] = f2bf(silu(s_part[2 * f][t]) * s_part[2 * f + 1][t]);
        return;
    } else if (nv > 0) {
        const int n0 = blockIdx.x * GV_COLS2 + warp * GV_R2;
        const bf16_t* w[GV_R2];
#pragma unroll
        for (int r = 0; r < GV_R2; ++r) w[r] = W + ((size_t)e * N + (n0 + r < N ? n0 + r : 0)) * K;
        gv_dots_for<GV_R2, 2>(nv, w, x, K, lane, acc);
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            if (t >= nv) break;  // the real tokens' sums only (short rows: the sums cost as much as the loads)
#pragma unroll
            for (int r = 0; r < GV_R2; ++r) {
                const float v = gv_warp_sum(acc[r][t]);
                if (lane == r && n0 + r < N) dst[(size_t)s_tok[t] * N + n0 + r] = f2bf(v * wts[s_tok[t]]);
            }
        }
    }
    if (FC) {
        // As skinny's fused combine: the last block of this column tile sums
        // each token's top-k rows in slot order.
        __shared__ int s_last;
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) s_last = atomicAdd(&cnt[blockIdx.x], 1) == *total_ptr / BM - 1;
        __syncthreads();
        if (!s_last) return;
        __threadfence();
        const int c0 = blockIdx.x * GV_COLS2;
        for (int i = threadIdx.x; i < M * GV_COLS2; i += GV_WARPS * 32) {
            const int m = i / GV_COLS2, col = c0 + i % GV_COLS2;
            if (col >= N) continue;
            float sum = 0.f;
            for (int j = 0; j < topk; ++j) {
                const int slot = m * topk + j;
                if (ids[slot] < 0) continue;
                sum += bf2f(*(const volatile bf16_t*)(dst + (size_t)slot * N + col));
            }
            out[(size_t)m * N + col] = f2bf(sum);
        }
        if (threadIdx.x == 0) cnt[blockIdx.x] = 0;
    }
}

// The entry points, with skinny's arguments (SKINNY_*_KERNEL above).
#define GV_KERNEL(NAME, MODE)                                                                           \
    extern "C" __global__ void __launch_bounds__(GV_WARPS * 32)                                          \
    NAME(const bf16_t* __restrict__ W, const bf16_t* __restrict__ src, bf16_t* __restrict__ dst,          \
         const float* __restrict__ wts, const int* __restrict__ sorted, const int* __restrict__ bexp,     \
         const int* __restrict__ total, int N, int K, int topk, int pad) {                                \
        grid_dep_sync();                                                                                  \
        gv<MODE>(W, src, dst, wts, sorted, bexp, total, N, K, topk, pad);                                 \
    }                                                                                                    \
    MOE_EMU_GEMM(NAME)
#define GV_FC_KERNEL(NAME)                                                                              \
    extern "C" __global__ void __launch_bounds__(GV_WARPS * 32)                                          \
    NAME(const bf16_t* __restrict__ W, const bf16_t* __restrict__ src, bf16_t* __restrict__ dst,          \
         const float* __restrict__ wts, const int* __restrict__ sorted, const int* __restrict__ bexp,     \
         const int* __restrict__ total, int N, int K, int topk, int pad, const int* __restrict__ ids,      \
         bf16_t* __restrict__ out, int* cnt, int M) {                                                     \
        grid_dep_sync();                                                                                  \
        gv<2, 1>(W, src, dst, wts, sorted, bexp, total, N, K, topk, pad, ids, out, cnt, M);               \
    }                                                                                                    \
    MOE_EMU_GEMM_FC(NAME)
#define GV_SA_KERNEL(NAME)                                                                              \
    extern "C" __global__ void __launch_bounds__(GV_WARPS * 32)                                          \
    NAME(const bf16_t* __restrict__ W, const bf16_t* __restrict__ src, bf16_t* __restrict__ dst,          \
         const float* __restrict__ wts, int* sorted, int* bexp, int* total, int N, int K, int topk,      \
         int pad, const int* __restrict__ ids) {                                                          \
        grid_dep_sync();                                                                                  \
        gv<1, 0, 1>(W, src, dst, wts, sorted, bexp, total, N, K, topk, pad, ids);                         \
    }                                                                                                    \
    MOE_EMU_GEMM_SA(NAME)

#ifndef MOE_TC_ONLY
GV_KERNEL(moe_gemm1_skinny_nt1_gv, 1)
GV_KERNEL(moe_gemm2_skinny_nt1_gv, 2)
GV_SA_KERNEL(moe_gemm1_skinny_nt1_gv_sa)
GV_FC_KERNEL(moe_gemm2_skinny_nt1_gv_fc)
#endif
// MOE_GV section: end

// ---------------------------------------------------------------- tiled GEMMs

// tiled_load_stage queues one BK-wide stage of the A (tokens) and B
// (weights) tiles with cp.async; rows or k beyond the problem are zero-filled.
template <int MODE, int BM, int BN, int BK, int THREADS>
__device__ __forceinline__ void tiled_load_stage(bf16_t* a, bf16_t* b, const bf16_t* __restrict__ src,
                                                 const bf16_t* __restrict__ We, const int* s_row, int tid,
                                                 int k0, int c0, int N, int K) {
    constexpr int LDS = BK + 8;
    constexpr int CPR = BK / 8;  // 16-byte chunks per row
#pragma unroll
    for (int it = 0; it < (BM * CPR + THREADS - 1) / THREADS; ++it) {
        const int c = tid + it * THREADS;
        if (BM * CPR % THREADS != 0 && c >= BM * CPR) break;
        const int r = c / CPR, kc = (c % CPR) * 8;
        const int sr = s_row[r];
        const bool ok = sr >= 0 && k0 + kc < K;
        cp_async16(a + r * LDS + kc, src + (size_t)(ok ? sr : 0) * K + (ok ? k0 + kc : 0), ok);
    }
#pragma unroll
    for (int it = 0; it < (BN * CPR + THREADS - 1) / THREADS; ++it) {
        const int c = tid + it * THREADS;
        if (BN * CPR % THREADS != 0 && c >= BN * CPR) break;
        const int r = c / CPR, kc = (c % CPR) * 8;
        int col, wrow;
        if (MODE == 1) {
            col = c0 + (r < BN / 2 ? r : r - BN / 2);
            wrow = (r < BN / 2 ? 0 : N) + col;
        } else {
            col = c0 + r;
            wrow = col;
        }
        const bool ok = col < N && k0 + kc < K;
        cp_async16(b + r * LDS + kc, We + (size_t)(ok ? wrow : 0) * K + (ok ? k0 + kc : 0), ok);
    }
}

// tiled_brow is the shared-memory row of the warp's n-tile j.
template <int MODE, int BN, int WTN>
__device__ __forceinline__ int tiled_brow(int wn, int j) {
    constexpr int NTL = WTN / 8;
    if (MODE == 1) return (j < NTL / 2 ? 0 : BN / 2) + wn * (WTN / 2) + (j % (NTL / 2)) * 8;
    return wn * WTN + j * 8;
}

// Same MODEs as skinny. A = BM token rows (gathered through `sorted`), B =
// BN weight rows; in MODE 1 the block's BN rows are BN/2 gate rows and the
// BN/2 up rows of the same intermediate columns, and each warp's n-tiles are
// half gate, half up, so the SiLU·mul pairs sit in the same thread.
// Dynamic shared memory: STAGES·(BM+BN)·(BK+8)·2 bytes (rows padded by 16
// bytes: ldmatrix reads are then free of bank conflicts).
template <int MODE, int BM, int BN, int BK, int WM, int WN, int STAGES>
__device__ __forceinline__ void tiled(const bf16_t* __restrict__ W, const bf16_t* __restrict__ src,
                                      bf16_t* __restrict__ dst, const float* __restrict__ wts,
                                      const int* __restrict__ sorted, const int* __restrict__ block_expert,
                                      const int* __restrict__ total_ptr, int N, int K, int topk, int pad) {
    constexpr int THREADS = 32 * WM * WN;
    constexpr int LDS = BK + 8;
    constexpr int WTM = BM / WM, WTN = BN / WN;  // warp tile
    constexpr int MT = WTM / 16, NTL = WTN / 8;
    static_assert(WTM % 16 == 0, "warp tile rows must be a multiple of 16");
    static_assert(MODE == 1 ? WTN % 32 == 0 : WTN % 16 == 0, "warp tile columns");
    static_assert(BK % 16 == 0, "BK must be a multiple of 16");
    MOE_DYNAMIC_SMEM(uint4, smem_u4);
    bf16_t* sA = (bf16_t*)smem_u4;
    bf16_t* sB = sA + STAGES * BM * LDS;
    __shared__ int s_row[BM];
    __shared__ int s_slot[BM];

    const int blk = blockIdx.y;
    if (blk * BM >= *total_ptr) return;
    const int e = block_expert[blk];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WN, wn = warp % WN;
    const int g = lane >> 2, q = lane & 3;

    for (int r = tid; r < BM; r += THREADS) {
        int slot = sorted[blk * BM + r];
        s_slot[r] = slot;
        s_row[r] = slot == pad ? -1 : (MODE == 1 ? slot / topk : slot);
    }
    // Output columns of this block: MODE 1 covers intermediate columns
    // [c0, c0+BN/2), MODE 2 output columns [c0, c0+BN).
    const int c0 = blockIdx.x * (MODE == 1 ? BN / 2 : BN);
    const size_t rowsPerExpert = (MODE == 1 ? 2 : 1) * (size_t)N;
    const bf16_t* We = W + (size_t)e * rowsPerExpert * K;
    __syncthreads();

    float acc[MT][NTL][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NTL; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.f;

    const int KT = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT)
            tiled_load_stage<MODE, BM, BN, BK, THREADS>(sA + s * BM * LDS, sB + s * BN * LDS, src, We, s_row, tid, s * BK, c0, N, K);
        cp_async_commit();
    }
    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int next = kt + STAGES - 1;
        if (next < KT)
            tiled_load_stage<MODE, BM, BN, BK, THREADS>(sA + (next % STAGES) * BM * LDS, sB + (next % STAGES) * BN * LDS,
                                                        src, We, s_row, tid, next * BK, c0, N, K);
        cp_async_commit();
        const bf16_t* a = sA + (kt % STAGES) * BM * LDS;
        const bf16_t* b = sB + (kt % STAGES) * BN * LDS;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            u32 af[MT][4], bfr[NTL][2];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const bf16_t* p = a + (wm * WTM + i * 16 + (lane & 15)) * LDS + kk + (lane >> 4) * 8;
                ldsm_x4(af[i][0], af[i][1], af[i][2], af[i][3], p);
            }
#pragma unroll
            for (int j = 0; j < NTL; j += 2) {
                const bf16_t* p = b + (tiled_brow<MODE, BN, WTN>(wn, j) + (lane >> 4) * 8 + (lane & 7)) * LDS + kk + ((lane >> 3) & 1) * 8;
                ldsm_x4(bfr[j][0], bfr[j][1], bfr[j + 1][0], bfr[j + 1][1], p);
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NTL; ++j)
                    mma_bf16(acc[i][j], af[i][0], af[i][1], af[i][2], af[i][3], bfr[j][0], bfr[j][1]);
        }
    }
    cp_async_wait<0>();

    // Epilogue: C fragment rows g / g+8, columns 2q, 2q+1 of each tile.
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = wm * WTM + i * 16 + g + h * 8;
            const int slot = s_slot[r];
            if (slot == pad) continue;
            if (MODE == 1) {
#pragma unroll
                for (int j = 0; j < NTL / 2; ++j) {
                    const int col = c0 + wn * (WTN / 2) + j * 8 + 2 * q;
                    if (col >= N) continue;
                    const float* gt = acc[i][j];
                    const float* up = acc[i][j + NTL / 2];
                    u32 v = pack_bf16x2(silu(gt[2 * h]) * up[2 * h], silu(gt[2 * h + 1]) * up[2 * h + 1]);
                    *(u32*)(dst + (size_t)slot * N + col) = v;
                }
            } else {
                const float w = wts[slot];
#pragma unroll
                for (int j = 0; j < NTL; ++j) {
                    const int col = c0 + wn * WTN + j * 8 + 2 * q;
                    if (col >= N) continue;
                    u32 v = pack_bf16x2(acc[i][j][2 * h] * w, acc[i][j][2 * h + 1] * w);
                    *(u32*)(dst + (size_t)slot * N + col) = v;
                }
            }
        }
    }
}

#define TILED_KERNEL(NAME, MODE, BM, BN, BK, WM, WN, ST)                                                 \
    extern "C" __global__ void __launch_bounds__(32 * WM * WN)                                           \
    NAME(const bf16_t* __restrict__ W, const bf16_t* __restrict__ src, bf16_t* __restrict__ dst,          \
         const float* __restrict__ wts, const int* __restrict__ sorted, const int* __restrict__ bexp,     \
         const int* __restrict__ total, int N, int K, int topk, int pad) {                                \
        grid_dep_sync();                                                                                  \
        tiled<MODE, BM, BN, BK, WM, WN, ST>(W, src, dst, wts, sorted, bexp, total, N, K, topk, pad);      \
    }                                                                                                    \
    MOE_EMU_GEMM(NAME)

// Built-in configurations: name = tokens per tile (BM).
#ifndef MOE_TC_ONLY
TILED_KERNEL(moe_gemm1_tiled_m16, 1, 16, 128, 64, 1, 4, 4)
TILED_KERNEL(moe_gemm2_tiled_m16, 2, 16, 128, 64, 1, 4, 4)
TILED_KERNEL(moe_gemm1_tiled_m32, 1, 32, 128, 64, 1, 4, 4)
TILED_KERNEL(moe_gemm2_tiled_m32, 2, 32, 128, 64, 1, 4, 4)
TILED_KERNEL(moe_gemm1_tiled_m64, 1, 64, 128, 32, 2, 2, 4)
TILED_KERNEL(moe_gemm2_tiled_m64, 2, 64, 128, 32, 2, 2, 4)
TILED_KERNEL(moe_gemm1_tiled_m128, 1, 128, 128, 32, 2, 4, 4)
TILED_KERNEL(moe_gemm2_tiled_m128, 2, 128, 128, 32, 2, 4, 4)
// 64×64 warp tiles (more MMAs per ldmatrix), for prefill.
TILED_KERNEL(moe_gemm1_tiled_w128x128, 1, 128, 128, 32, 2, 2, 4)
TILED_KERNEL(moe_gemm2_tiled_w128x128, 2, 128, 128, 32, 2, 2, 4)
TILED_KERNEL(moe_gemm1_tiled_w128x256, 1, 128, 256, 32, 2, 4, 3)
TILED_KERNEL(moe_gemm2_tiled_w128x256, 2, 128, 256, 32, 2, 4, 3)
TILED_KERNEL(moe_gemm1_tiled_w64x256, 1, 64, 256, 32, 1, 4, 4)
TILED_KERNEL(moe_gemm2_tiled_w64x256, 2, 64, 256, 32, 1, 4, 4)
// Tuning instance, shaped by -DTL_BM=… -DTL_BN=… -DTL_BK=… -DTL_WM=… -DTL_WN=… -DTL_STAGES=….
TILED_KERNEL(moe_gemm1_tiled_custom, 1, TL_BM, TL_BN, TL_BK, TL_WM, TL_WN, TL_STAGES)
TILED_KERNEL(moe_gemm2_tiled_custom, 2, TL_BM, TL_BN, TL_BK, TL_WM, TL_WN, TL_STAGES)
#endif

// ---------------------------------------------------------------- tc GEMMs (prefill, v4)

// The "tc" family is the prefill grouped GEMM rewritten after the v3 SASS
// audit (NOTES.md): same MODEs and outputs as `tiled`, but
//  - shared memory rows of BK bf16 (64 or 128 bytes) swizzled by XOR of the
//    16-byte chunk with the 128-byte line (no padding: ldmatrix and cp.async
//    are free of bank conflicts, and smem goes to tiles and stages);
//  - every per-element address is set up once per tile: gathered token rows
//    and weight rows as 32-bit offsets in registers, ldmatrix addresses as
//    one register per k-slice plus compile-time offsets;
//  - rows past an expert's tokens or past N are not predicated: they read a
//    valid row and their results are never stored; only the K tail is
//    zero-filled (one src-size per thread and stage);
//  - fragments double-buffered in registers across k-slices, one
//    __syncthreads per BK stage;
//  - the epilogue goes through shared memory: 16-byte coalesced stores; or,
//    with OV, the next tile's first stages are loaded first and the
//    epilogue stores from registers while they land (prologue overlap);
//  - a persistent grid (resident blocks only) walks the real tiles (the
//    device's padded total, not the worst case), GM m-tiles at a time per
//    n-tile so that the weight tile a group shares is read from L2.

// swz is the byte offset of 16-byte chunk c of row r in a tile whose rows
// are ROWB bytes: the chunk's slot within its 128-byte line is XORed with
// the line index (mod 8). A shift of r by a multiple of 16 rows (8 for rows
// of 128 bytes or more) moves the offset by exactly that many rows' bytes
// (the XOR pattern repeats), which the kernel relies on to add
// compile-time offsets to a per-lane base.
template <int ROWB>
__device__ __forceinline__ int swz(int r, int c) {
    static_assert(ROWB == 32 || ROWB == 64 || ROWB % 128 == 0, "rows of 32, 64 or a multiple of 128 bytes");
    if (ROWB >= 128) return r * ROWB + ((c ^ (r & 7)) << 4);
    constexpr int RPL = ROWB >= 128 ? 1 : 128 / ROWB;  // rows per 128-byte line
    const int line = r / RPL;
    const int slot = (r % RPL) * (ROWB / 16) + c;
    return line * 128 + ((slot ^ (line & 7)) << 4);
}

// tc_brow is the tile row of the warp's n-tile j (as tiled_brow): in MODE 1
// the first NTL/2 n-tiles are gate rows, the rest the matching up rows.
template <int MODE, int BN, int WTN>
__device__ __forceinline__ constexpr int tc_brow_off(int j) {
    return MODE == 1 ? (j < WTN / 16 ? 0 : BN / 2) + (j % (WTN / 16)) * 8 : j * 8;
}

// The epilogue's bf16 pairs from a C fragment's half h (columns 2q, 2q+1):
// MODE 1 silu(gate)·up, MODE 2 the routing weight times the sum.
__device__ __forceinline__ u32 act_pair(const float* gt, const float* up, int h) {
    return pack_bf16x2(silu_fast(gt[2 * h]) * up[2 * h], silu_fast(gt[2 * h + 1]) * up[2 * h + 1]);
}
__device__ __forceinline__ u32 scaled_pair(const float* acc, float w, int h) {
    return pack_bf16x2(acc[2 * h] * w, acc[2 * h + 1] * w);
}

// tc_self_align is moe_align for at most 64 slots inside every block of a
// tc gemm1 (SA): the whole alignment into shared memory, since a block's
// tiles may be any of them; one thread a slot, an expert's slots in slot
// order as moe_align leaves them, padding rows given the slot count (as
// every GEMM's pad). Block 0 also writes it for gemm2 (sorted
// and block_expert below the total, which is all any GEMM reads of them,
// and *total_out); no other block reads those, so none waits for it.
// Returns the padded total.
template <int BM, int THREADS>
__device__ __forceinline__ int tc_self_align(const int* __restrict__ ids, int slots, int* s_sorted, int* s_bexp,
                                             int* sorted, int* block_expert, int* total_out) {
    static_assert(THREADS >= 64, "one thread a slot: at most 64 slots");
    __shared__ int s_ids[64], s_padded[64];
    const int t = threadIdx.x;
    if (t < slots) s_ids[t] = ids[t];
    __syncthreads();
    int id = -1, rank = 0;
    if (t < slots) {
        id = s_ids[t];
        int count = 0;
        bool first = true;
        if (id >= 0) {
            for (int u = 0; u < slots; ++u) {
                if (s_ids[u] != id) continue;
                ++count;
                if (u < t) {
                    ++rank;
                    first = false;
                }
            }
        }
        s_padded[t] = id >= 0 && first ? (count + BM - 1) / BM * BM : 0;  // the expert's rows, at its first slot
    }
    __syncthreads();
    int start = 0, total = 0;
    for (int u = 0; u < slots; ++u) {
        total += s_padded[u];
        if (s_ids[u] >= 0 && s_ids[u] < id) start += s_padded[u];
    }
#ifndef EMU_BUG_TC_SA_NO_PAD
    for (int r = t; r < total; r += THREADS) s_sorted[r] = slots;
#endif
    __syncthreads();
    if (id >= 0) {
        const int row = start + rank;
        s_sorted[row] = t;
        if (rank % BM == 0) s_bexp[row / BM] = id;
    }
    __syncthreads();
#ifndef EMU_BUG_TC_SA_NO_HANDOFF
    if (blockIdx.x == 0) {
#else
    if (false) {  // the emulator test's bug: gemm2 gets no alignment
#endif
        for (int r = t; r < total; r += THREADS) sorted[r] = s_sorted[r];
        for (int b = t; b < total / BM; b += THREADS) block_expert[b] = s_bexp[b];
        if (t == 0) *total_out = total;
    }
    return total;
}

// SA (MODE 1, at most 64 slots, the host checks) fuses the alignment:
// every block sorts the slots itself (tc_self_align) and walks its tiles from
// shared memory; ids is then the routing (pad is the slot count).
template <int MODE, int BM, int BN, int BK, int WM, int WN, int ST, int GM, int OV, int SA = 0>
__device__ __forceinline__ void tc(const bf16_t* __restrict__ W, const bf16_t* __restrict__ src,
                                   bf16_t* __restrict__ dst, const float* __restrict__ wts,
                                   const int* __restrict__ sorted_in, const int* __restrict__ bexp_in,
                                   const int* __restrict__ total_ptr, int N, int K, int topk, int pad,
                                   const int* __restrict__ ids = nullptr) {
    constexpr int THREADS = 32 * WM * WN;
    constexpr int ROWB = BK * 2;         // bytes per smem row
    constexpr int CPR = BK / 8;          // 16-byte chunks per row
    constexpr int WTM = BM / WM, WTN = BN / WN;
    constexpr int MT = WTM / 16, NTL = WTN / 8;
    constexpr int KS = BK / 16;          // k16 slices per stage
    constexpr int A_BYTES = BM * ROWB, STAGE = (BM + BN) * ROWB;
    constexpr int RSTEP = THREADS / CPR; // rows one pass of the block's loads covers
    constexpr int ITA = BM / RSTEP, ITB = BN / RSTEP;
    constexpr int OUTN = MODE == 1 ? BN / 2 : BN;  // output columns per tile
    constexpr int OUTC = OUTN / 8;                 // 16-byte output chunks per row
    constexpr int ROWC = OUTN * 2;                 // bytes per C-tile row
    static_assert(BK == 32 || BK == 64 || BK == 128, "BK must be 32, 64 or 128");
    static_assert(WTM % 16 == 0 && MT >= 1, "warp tile rows: a multiple of 16");
    static_assert(MODE == 1 ? WTN == 16 || WTN % 32 == 0 : WTN % 16 == 0,
                  "warp tile columns (MODE 1: gate and up halves of 16, or one n-tile each)");
    static_assert(THREADS % CPR == 0 && BM % RSTEP == 0 && BN % RSTEP == 0, "tile rows must split evenly over the loads");
    static_assert(MODE != 1 || (BN / 2) % RSTEP == 0, "MODE 1: gate and up halves must split evenly over the loads");
    static_assert(RSTEP % (ROWB >= 128 ? 8 : 16) == 0, "load passes must keep the swizzle phase");
    static_assert(ROWC == 64 || ROWC % 128 == 0, "output tile rows of 64 or a multiple of 128 bytes");
    static_assert(ST >= 2 && KS >= 2, "at least 2 stages and 2 k-slices per stage");

    MOE_DYNAMIC_SMEM(uint4, smem_u4);
    char* smem = (char*)smem_u4;
    const saddr_t sbase = to_saddr(smem);
    // Slot sets (s_slot, s_w): OV 1, two, the next tile's written while this
    // tile's epilogue reads; OV 2, ST + 1, since the loads (and so the
    // setups) run up to ST stages ahead of the MMAs, which is several tiles
    // when a tile has fewer k-stages than that.
#ifndef EMU_BUG_OV2_TWO_SETS
    constexpr int NSB = OV == 2 ? ST + 1 : OV ? 2 : 1;
#else
    constexpr int NSB = OV ? 2 : 1;  // the emulator test's bug: too few slot sets for OV 2
#endif
    __shared__ int s_slot[NSB * BM];
    __shared__ float s_w[MODE == 2 ? NSB * BM : 1];  // MODE 2: the rows' routing weights

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WN, wn = warp % WN;
    const int g = lane >> 2, q = lane & 3;

    static_assert(SA == 0 || (MODE == 1 && THREADS >= 64), "the alignment fuses into gemm1, one thread a slot");
    __shared__ int s_sorted[SA ? 64 * BM : 1], s_bexp[SA ? 64 : 1];
    int total;
    if constexpr (SA) {
        total = tc_self_align<BM, THREADS>(ids, pad, s_sorted, s_bexp, const_cast<int*>(sorted_in),
                                           const_cast<int*>(bexp_in), const_cast<int*>(total_ptr));
    } else {
        total = *total_ptr;
    }
    const int* __restrict__ sorted = SA ? s_sorted : sorted_in;
    const int* __restrict__ block_expert = SA ? s_bexp : bexp_in;
    const int mtiles = total / BM;
    const int ntiles = (N + OUTN - 1) / OUTN;
    const int tiles = mtiles * ntiles;
    const int KT = (K + BK - 1) / BK;

    // Loads: this thread copies chunk lc of rows lr + it·RSTEP.
    const int lc = tid % CPR, lr = tid / CPR;
    const int a_st = swz<ROWB>(lr, lc), b_st = A_BYTES + swz<ROWB>(lr, lc);
    // ldmatrix: per k-slice, this lane's address in a stage (A: row
    // wm·WTM + (lane & 15), chunk 2ks + lane/16; B: n-tile pairs, rows
    // (lane/16)·8 + (lane & 7), chunk 2ks + (lane/8 & 1)).
    int a_ld[KS], b_ld[KS];
    {
        const int ar = wm * WTM + (lane & 15);
        // MODE 1 with one gate and one up n-tile a warp (WTN 16): the
        // ldmatrix pair is the gate rows and their up rows BN/2 further.
#ifndef EMU_BUG_TC_GATE_PAIR
        const int pair = MODE == 1 && WTN == 16 ? BN / 2 : 8;
#else
        const int pair = 8;  // the emulator test's bug: the next gate rows taken for the up rows
#endif
        const int br = (MODE == 1 ? wn * (WTN / 2) : wn * WTN) + (lane >> 4) * pair + (lane & 7);
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            a_ld[ks] = swz<ROWB>(ar, 2 * ks + (lane >> 4));
            b_ld[ks] = A_BYTES + swz<ROWB>(br, 2 * ks + ((lane >> 3) & 1));
        }
    }

    // Gathered token rows and weight rows of the current tile, as element
    // offsets. Padding rows (bit clear in a_live) are zero-filled, not read:
    // every tile's padding fetching token row 0 piled onto the same few
    // lines (a 16-row tile at 1–2 slots an expert is nearly all padding).
    // Weight rows past N read row N-1. Their results are never stored.
    u32 a_off[ITA], b_off[ITB], a_live = 0;
    static_assert(ITA <= 32, "a_live holds one bit per gathered row pass");
    const bf16_t* We = W;
    // place gives tile t's m-tile and n-tile: GM m-tiles per group, the
    // n-tiles of a group in turn, so the blocks that run at once share
    // weight tiles (and token tiles) through L2.
    auto place = [&](int t, int& mt, int& nt) {
        const int per_group = GM * ntiles;
        const int grp = t / per_group, first_m = grp * GM;
        const int gsz = min(mtiles - first_m, GM);
        const int in = t - grp * per_group;
        mt = first_m + in % gsz;
        nt = in / gsz;
    };
    // fetch loads what tile t's setup reads from global memory (its
    // expert and slots) into registers; setup then makes tile t current for
    // the loads from those registers, fills slot set sb (s_slot, s_w) and
    // returns the tile's first output column. OV 2 fetches the next tile a
    // whole tile ahead: its loader used to wait on these loads at every tile
    // switch, and every warp with it (ncu, qwen3-235b M=4: ~2 µs a switch).
    static_assert(OV != 2 || BM <= THREADS, "OV 2: one thread per slot of the s_slot fill");
    int pf_e = 0, pf_slot = 0, pf_a[ITA];
    float pf_w = 0.f;
    auto fetch = [&](int t) {
        int mt, nt;
        place(t, mt, nt);
        const int row0 = mt * BM;
        pf_e = block_expert[mt];
        if (tid < BM) pf_slot = sorted[row0 + tid];
#pragma unroll
        for (int it = 0; it < ITA; ++it) pf_a[it] = sorted[row0 + lr + it * RSTEP];
    };
    // MODE 2's routing weight hangs off the slot: loaded one step after
    // fetch (fetch_w), so neither waits on the other.
    auto fetch_w = [&]() {
        if (MODE == 2 && tid < BM) pf_w = pf_slot == pad ? 0.f : wts[pf_slot];
    };
    auto apply = [&](int t, int sb) {
        int mt, nt;
        place(t, mt, nt);
        const int e = pf_e;
        const int c0 = nt * OUTN;  // first output column
        if (OV == 2) {
            if (tid < BM) {
                s_slot[sb * BM + tid] = pf_slot;
                if (MODE == 2) s_w[sb * BM + tid] = pf_w;
            }
        } else {
            const int row0 = mt * BM;
            for (int r = tid; r < BM; r += THREADS) {
                const int slot = sorted[row0 + r];
                s_slot[sb * BM + r] = slot;
                if (MODE == 2) s_w[sb * BM + r] = slot == pad ? 0.f : wts[slot];
            }
        }
        a_live = 0;
#pragma unroll
        for (int it = 0; it < ITA; ++it) {
            const int slot = pf_a[it];
            const int srow = slot == pad ? 0 : (MODE == 1 ? slot / topk : slot);
            a_off[it] = (u32)srow * (u32)K;
            a_live |= (u32)(slot != pad) << it;
        }
        We = W + (size_t)e * (size_t)(MODE == 1 ? 2 * N : N) * K;
#pragma unroll
        for (int it = 0; it < ITB; ++it) {
            const int r = lr + it * RSTEP;
            int col, base;
            if (MODE == 1) {
                const bool up = it * RSTEP >= BN / 2;  // compile-time per it
                col = c0 + r - (up ? BN / 2 : 0);
                base = up ? N : 0;
            } else {
                col = c0 + r;
                base = 0;
            }
            b_off[it] = (u32)(base + min(col, N - 1)) * (u32)K;
        }
        return c0;
    };
    auto setup = [&](int t, int sb) {
        fetch(t);
        if (OV == 2) fetch_w();
        return apply(t, sb);
    };

    auto load_stage = [&](int soff, int k0) {
        const int k = k0 + lc * 8;
        const int bytes = k < K ? 16 : 0;
        const int kc = k < K ? k : 0;
#pragma unroll
        for (int it = 0; it < ITA; ++it)
            cp_async16_s(sbase + soff + a_st + it * RSTEP * ROWB, src + a_off[it] + kc, (a_live >> it) & 1 ? bytes : 0);
#pragma unroll
        for (int it = 0; it < ITB; ++it)
            cp_async16_s(sbase + soff + b_st + it * RSTEP * ROWB, We + b_off[it] + kc, bytes);
    };

    auto prologue = [&]() {
#pragma unroll
        for (int s = 0; s < ST - 1; ++s) {
            if (s < KT) load_stage(s * STAGE, s * BK);
            cp_async_commit();
        }
    };

    int t = blockIdx.x;
    if (t >= tiles) return;
    int sb = 0;
    int c0 = setup(t, 0);
    // OV 2: one ring of stages across the block's tiles. The loads run ST-1
    // stages ahead of the MMAs straight across tile boundaries (the next
    // tile's first stages go out during this tile's last ones), so the
    // loads in flight never drain at a tile's end; with a short K (gemm2 of
    // deepseek-v3 tp8: 2 stages a tile) that drain was most of the time.
    // The loader is at tile lt's k-stage lk, slot set lsb, ring offset lwr.
    int lt = t, lk = 0, lsb = 0, lwr = 0;
    bool pf_w_due = false;  // fetch_w of the fetched tile is still to come
    auto fetch_next = [&]() {
        if (lt + (int)gridDim.x < tiles) {
            fetch(lt + gridDim.x);
            pf_w_due = true;
        }
    };
    if constexpr (OV == 2) fetch_next();
    auto issue = [&]() {
        if (lt < tiles) {
            if (pf_w_due) {
                fetch_w();
                pf_w_due = false;
            }
            load_stage(lwr, lk * BK);
            if (++lk == KT) {
                lk = 0;
                lt += gridDim.x;
                lsb = lsb + 1 == NSB ? 0 : lsb + 1;
                if (lt < tiles) {
                    apply(lt, lsb);
                    fetch_next();
                }
            }
        }
        cp_async_commit();
        lwr = lwr + STAGE == ST * STAGE ? 0 : lwr + STAGE;
    };
    if constexpr (OV == 2) {
#pragma unroll
        for (int s = 0; s < ST - 1; ++s) issue();
    } else {
        prologue();
    }
    int rd = 0;  // OV 2: the ring offset of the stage the MMAs read next
    for (;;) {
        float acc[MT][NTL][4];
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NTL; ++j)
#pragma unroll
                for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.f;

        // OV 2: this barrier also orders the last tile's epilogue (its slot
        // set) before the setups the loads below make.
        cp_async_wait<ST - 2>();
        __syncthreads();

        u32 af[2][MT][4], bfr[2][NTL][2];
        auto load_frags = [&](int buf, int soff, int ks) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
                ldsm_x4_s(af[buf][i][0], af[buf][i][1], af[buf][i][2], af[buf][i][3], sbase + soff + a_ld[ks] + i * 16 * ROWB);
#pragma unroll
            for (int j = 0; j < NTL; j += 2)
                ldsm_x4_s(bfr[buf][j][0], bfr[buf][j][1], bfr[buf][j + 1][0], bfr[buf][j + 1][1],
                          sbase + soff + b_ld[ks] + tc_brow_off<MODE, BN, WTN>(j) * ROWB);
        };
        if constexpr (OV != 2) rd = 0;
        int wr = (ST - 1) * STAGE;  // byte offsets of the stages read and written next (OV 2: lwr)
        (void)wr;
        load_frags(0, rd, 0);
        for (int kt = 0; kt < KT; ++kt) {
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                if (ks == KS - 1) {
                    // Stage kt+1 has landed for every thread, and every warp
                    // is done reading stage kt-1 (overwritten below at ks 0).
                    cp_async_wait<ST - 2>();
                    __syncthreads();
                    rd = rd + STAGE == ST * STAGE ? 0 : rd + STAGE;
                }
                load_frags((ks + 1) & 1, rd, (ks + 1) % KS);
                if (ks == 0) {
                    if constexpr (OV == 2) {
                        issue();
                    } else {
                        if (kt + ST - 1 < KT) load_stage(wr, (kt + ST - 1) * BK);
                        cp_async_commit();
                        wr = wr + STAGE == ST * STAGE ? 0 : wr + STAGE;
                    }
                }
#pragma unroll
                for (int i = 0; i < MT; ++i)
#pragma unroll
                    for (int j = 0; j < NTL; ++j)
                        mma_bf16(acc[i][j], af[ks & 1][i][0], af[ks & 1][i][1], af[ks & 1][i][2], af[ks & 1][i][3],
                                 bfr[ks & 1][j][0], bfr[ks & 1][j][1]);
            }
        }
        if constexpr (OV != 2) {
            cp_async_wait<0>();
            __syncthreads();  // every warp is past its last ldmatrix: the stages are free
        }

        const int tn = t + gridDim.x;
        if constexpr (OV == 2) {
            int mt, nt;
            place(t, mt, nt);
            c0 = nt * OUTN;
        }
        const int c0_cur = c0;
        if constexpr (OV != 0) {
            const int sb_cur = sb;
            if constexpr (OV == 2) {
                sb = sb + 1 == NSB ? 0 : sb + 1;  // the loads are already in the next tile
            } else if (tn < tiles) {
                // The next tile's loads go out before this tile's epilogue, so
                // their latency hides behind its stores (the epilogue then
                // stores from registers: the stages are taken).
                sb ^= 1;
                c0 = setup(tn, sb);
                prologue();
            }
            // C fragment: rows g, g+8; columns 2q, 2q+1.
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = wm * WTM + i * 16 + g + 8 * h;
                    const int slot = s_slot[sb_cur * BM + r];
                    if (slot == pad) continue;
                    bf16_t* row = dst + (size_t)slot * N + c0_cur;
                    if (MODE == 1) {
#pragma unroll
                        for (int j = 0; j < NTL / 2; ++j) {
                            const float* gt = acc[i][j];
                            const float* up = acc[i][j + NTL / 2];
                            const int col = wn * (WTN / 2) + j * 8 + 2 * q;
                            if (c0_cur + col < N) *(u32*)(row + col) = act_pair(gt, up, h);
                        }
                    } else {
                        const float w = s_w[sb_cur * BM + r];
#pragma unroll
                        for (int j = 0; j < NTL; ++j) {
                            const int col = wn * WTN + j * 8 + 2 * q;
                            if (c0_cur + col < N) *(u32*)(row + col) = scaled_pair(acc[i][j], w, h);
                        }
                    }
                }
            if (tn >= tiles) break;
            t = tn;
        } else {
            // Epilogue 1: fragments → bf16 C tile in shared memory (swizzled
            // rows of OUTN columns). C fragment: rows g, g+8; columns 2q, 2q+1.
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = wm * WTM + i * 16 + g + 8 * h;
                    if (MODE == 1) {
#pragma unroll
                        for (int j = 0; j < NTL / 2; ++j) {
                            const float* gt = acc[i][j];
                            const float* up = acc[i][j + NTL / 2];
                            const int col = wn * (WTN / 2) + j * 8 + 2 * q;
                            *(u32*)(smem + swz<ROWC>(r, col >> 3) + (col & 7) * 2) = act_pair(gt, up, h);
                        }
                    } else {
                        const float w = s_w[r];
#pragma unroll
                        for (int j = 0; j < NTL; ++j) {
                            const int col = wn * WTN + j * 8 + 2 * q;
                            *(u32*)(smem + swz<ROWC>(r, col >> 3) + (col & 7) * 2) = scaled_pair(acc[i][j], w, h);
                        }
                    }
                }
            __syncthreads();
            // Epilogue 2: 16-byte rows pieces to the slots' rows in global memory.
#pragma unroll
            for (int it = 0; it < (BM * OUTC + THREADS - 1) / THREADS; ++it) {
                const int idx = tid + it * THREADS;
                if ((BM * OUTC) % THREADS != 0 && idx >= BM * OUTC) break;
                const int r = idx / OUTC, c = idx % OUTC;
                const int slot = s_slot[r], col = c0_cur + c * 8;
                if (slot != pad && col < N) *(uint4*)(dst + (size_t)slot * N + col) = *(const uint4*)(smem + swz<ROWC>(r, c));
            }
            __syncthreads();  // the C tile, s_slot and s_w are free for the next tile
            if (tn >= tiles) break;
            t = tn;
            c0 = setup(t, 0);
            prologue();
        }
    }
}

#define TC_KERNEL(NAME, MODE, BM, BN, BK, WM, WN, ST, GM, MINB, OV)                                       \
    extern "C" __global__ void __launch_bounds__(32 * WM * WN, MINB)                                     \
    NAME(const bf16_t* __restrict__ W, const bf16_t* __restrict__ src, bf16_t* __restrict__ dst,          \
         const float* __restrict__ wts, const int* __restrict__ sorted, const int* __restrict__ bexp,     \
         const int* __restrict__ total, int N, int K, int topk, int pad) {                                \
        grid_dep_sync();                                                                                  \
        tc<MODE, BM, BN, BK, WM, WN, ST, GM, OV>(W, src, dst, wts, sorted, bexp, total, N, K, topk, pad); \
    }                                                                                                    \
    MOE_EMU_GEMM(NAME)

// The self-aligning tc gemm1 (SA): the routing as one more argument, the
// alignment's outputs written (by block 0).
#define TC_SA_KERNEL(NAME, BM, BN, BK, WM, WN, ST, GM, MINB, OV)                                          \
    extern "C" __global__ void __launch_bounds__(32 * WM * WN, MINB)                                     \
    NAME(const bf16_t* __restrict__ W, const bf16_t* __restrict__ src, bf16_t* __restrict__ dst,          \
         const float* __restrict__ wts, int* sorted, int* bexp, int* total, int N, int K, int topk,      \
         int pad, const int* __restrict__ ids) {                                                          \
        grid_dep_sync();                                                                                  \
        tc<1, BM, BN, BK, WM, WN, ST, GM, OV, 1>(W, src, dst, wts, sorted, bexp, total, N, K, topk, pad,  \
                                                 ids);                                                    \
    }                                                                                                    \
    MOE_EMU_GEMM_SA(NAME)

// tc configurations come from the host as -DMOE_TC_LIST="TC(name,bm,bn,bk,wm,wn,st,gm,minb,ov) ...":
// kernels moe_gemm1_tc_<name> and moe_gemm2_tc_<name>. ov=1: the next tile's
// loads are issued before this tile's epilogue, which stores from registers;
// ov=2: one ring of stages across tiles, the loads never drain at a tile's end.
#define TC(name, BM, BN, BK, WM, WN, ST, GM, MINB, OV)                                 \
    TC_KERNEL(moe_gemm1_tc_##name, 1, BM, BN, BK, WM, WN, ST, GM, MINB, OV)            \
    TC_KERNEL(moe_gemm2_tc_##name, 2, BM, BN, BK, WM, WN, ST, GM, MINB, OV)
// TCSA(...): the same with the self-aligning gemm1 (sa=1).
#define TCSA(name, BM, BN, BK, WM, WN, ST, GM, MINB, OV)                               \
    TC_SA_KERNEL(moe_gemm1_tc_##name, BM, BN, BK, WM, WN, ST, GM, MINB, OV)            \
    TC_KERNEL(moe_gemm2_tc_##name, 2, BM, BN, BK, WM, WN, ST, GM, MINB, OV)
#ifdef MOE_TC_LIST
MOE_TC_LIST
#endif

// ---------------------------------------------------------------- wg GEMMs (Hopper, sm_90a)

// The "wg" family is the prefill grouped GEMM for Hopper: warpgroup MMAs
// (wgmma, operands read by the tensor cores straight from shared memory)
// fed by a producer warpgroup, so loads, MMAs and the epilogue of different
// tiles overlap instead of taking turns.
//  - block: warpgroup 0 loads, warpgroups 1..NC compute 64 token rows each
//    (BM = 64·NC) × BN weight rows; BK = 64 (one 128-byte swizzled row);
//  - the producer copies gathered token rows and weight rows with cp.async
//    into ST stages laid out as wgmma's 128-byte-swizzled K-major tiles
//    (chunk c of row r at r·128 + ((c ^ r%8)·16), 1024-byte aligned); it
//    keeps LAG = ST-2 stages in flight, then waits for the oldest, fences it
//    into the async proxy and arrives on that stage's "full" mbarrier;
//  - consumers wait on "full", issue 4 wgmma k16 steps, keep one stage of
//    MMAs in flight (wait_group 1) and arrive on "empty" of the stage
//    before, which the producer waits on before overwriting it;
//  - the epilogue stores bf16 pairs from the accumulators (SiLU·mul of the
//    gate and up halves in MODE 1, the routing weight in MODE 2) while the
//    producer already loads the next tile: a persistent grid walks the
//    tiles in tc's grouped order.
// Only compiled into wg modules (-DMOE_WG_LIST), for sm_90a.
#ifdef MOE_WG_LIST
typedef unsigned long long u64;

#ifndef MOE_EMU
// wg_desc: the shared-memory matrix descriptor of a K-major tile with
// 128-byte swizzle: start address >> 4, leading offset 16 bytes (unused
// for this layout), 8-row groups 1024 bytes apart, swizzle mode 1 (128 B).
__device__ __forceinline__ u64 wg_desc(saddr_t a) {
    return (u64)((a & 0x3FFFFu) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
__device__ __forceinline__ saddr_t align1024(saddr_t a) { return (a + 1023u) & ~1023u; }
__device__ __forceinline__ void mbar_init(saddr_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_arrive(saddr_t bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(saddr_t bar, int parity) {
    u32 done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// TmaDesc is a CUtensorMap (cuTensorMapEncodeTiled on the host), passed by
// value as a __grid_constant__ parameter so its address may be given to
// the tensor memory accelerator.
struct __align__(64) TmaDesc {
    unsigned long long v[16];
};
// mbar_expect_tx: the barrier's current phase also waits for bytes more
// bytes of asynchronous copies (complete_tx) before it completes.
__device__ __forceinline__ void mbar_expect_tx(saddr_t bar, u32 bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// tma_load_2d copies the box at element (x, y) of d's matrix into shared
// memory at dst (1024-byte aligned for the 128-byte swizzle), counting its
// bytes against bar's transaction count as they land.
__device__ __forceinline__ void tma_load_2d(saddr_t dst, const TmaDesc* d, int x, int y, saddr_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
        "l"((unsigned long long)d), "r"(x), "r"(y), "r"(bar)
        : "memory");
}
// Clusters (mc=1): the block's rank, the cluster-wide barrier, an arrival
// on the barrier at the same offset in block rank's shared memory, and a
// tensor-map copy multicast to the blocks of mask (landing at dst's offset
// in each, its bytes counted on the barrier at bar's offset in each).
__device__ __forceinline__ int cluster_rank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return (int)r;
}
__device__ __forceinline__ void cluster_sync_all() {
    asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
}
// mapa is the shared::cluster address of a's counterpart in block rank.
__device__ __forceinline__ saddr_t mapa(saddr_t a, int rank) {
    saddr_t r;
    asm("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
    return r;
}
__device__ __forceinline__ void mbar_arrive_cta(saddr_t bar, int rank) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(mapa(bar, rank)) : "memory");
}
__device__ __forceinline__ void tma_load_2d_mc(saddr_t dst, const TmaDesc* d, int x, int y, saddr_t bar, unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
        "l"((unsigned long long)d), "r"(x), "r"(y), "r"(bar), "h"(mask)
        : "memory");
}
// bulk_s2s copies bytes of this block's shared memory at src to a peer's
// at dst, counting them on the peer's barrier bar (both dst and bar from
// mapa).
__device__ __forceinline__ void bulk_s2s(saddr_t dst, saddr_t src, u32 bytes, saddr_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst), "r"(src),
                 "r"(bytes), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void wg_arrive() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// wg_hold keeps the compiler from moving accumulator reads or writes
// across the asynchronous MMAs (it cannot see that they use them).
template <int R>
__device__ __forceinline__ void wg_hold(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}

// wgmma_nN: D[64×N] (+)= A[64×16] · B[N×16]ᵀ, bf16 in, f32 accumulate, A
// and B K-major in shared memory; scale_d = 0 overwrites D. Generated (one
// asm operand per accumulator register) by kernels/moe/wgmma_gen.py.
__device__ __forceinline__ void wgmma_n64(float (&d)[32], u64 da, u64 db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_n128(float (&d)[64], u64 da, u64 db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_n256(float (&d)[128], u64 da, u64 db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(scale_d));
}
#endif  // !MOE_EMU

template <int BN>
__device__ __forceinline__ void wgmma_bn(float (&d)[BN / 2], u64 da, u64 db, int scale_d) {
    if constexpr (BN == 64) wgmma_n64(d, da, db, scale_d);
    if constexpr (BN == 128) wgmma_n128(d, da, db, scale_d);
    if constexpr (BN == 256) wgmma_n256(d, da, db, scale_d);
}

// quad_transpose: lane q of each quad holds x[b] = M[q][b]; after it, x[b] =
// M[b][q] (two butterfly stages: pairs of lanes, then pairs of pairs). The
// register indices are fixed in each select, so x stays in registers.
__device__ __forceinline__ void quad_transpose(u32 (&x)[4], int q) {
    const bool odd = q & 1, hi = q & 2;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const u32 r = __shfl_xor_sync(0xffffffffu, odd ? x[2 * k] : x[2 * k + 1], 1);
        if (odd) x[2 * k] = r;
        else x[2 * k + 1] = r;
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
#ifdef EMU_BUG_QUAD_ONE_STAGE
        break;
#endif
        const u32 r = __shfl_xor_sync(0xffffffffu, hi ? x[k] : x[k + 2], 2);
        if (hi) x[k] = r;
        else x[k + 2] = r;
    }
}

// TMA: the weight tile of each stage comes from the tensor map tmw (rows
// of W, gemm1's gate and up halves as two boxes), issued by producer
// thread 0, which adds its bytes to the stage's "full" barrier.
// MC (with TMA, cooperative): clusters of two blocks walk units of two
// m-tiles of one n-tile, block r taking m-tile 2u+r. Where both m-tiles
// are the same expert's, block r loads half r of the weight tile (gemm1:
// the gate or the up half) and multicasts it into both blocks; otherwise
// each loads its own. A stage is handed back to both blocks' producers (one
// arrival per consumer warp on each), since either may write into it.
template <int MODE, int NC, int BN, int ST, int GM, int PP, int TMA, int MC>
__device__ __forceinline__ void wg(const bf16_t* __restrict__ W, const bf16_t* __restrict__ src,
                                   bf16_t* __restrict__ dst, const float* __restrict__ wts,
                                   const int* __restrict__ sorted, const int* __restrict__ block_expert,
                                   const int* __restrict__ total_ptr, int N, int K, int topk, int pad,
                                   const TmaDesc* tmw) {
    // PP (ping-pong): each consumer warpgroup takes whole 64-row tiles in
    // turn, so one's epilogue runs while the other's MMAs do; otherwise
    // (cooperative) they split each 64·NC-row tile.
    constexpr int BM = PP ? 64 : 64 * NC, BK = 64, ROWB = 128;
    constexpr int CONSUMERS_PER_STAGE = PP ? 1 : NC;
    constexpr int A_BYTES = BM * ROWB, STAGE = (BM + BN) * ROWB;
    constexpr int OUTN = MODE == 1 ? BN / 2 : BN;  // output columns per tile
    constexpr int LAG = ST - 2;                    // stages in flight before one is reported full
    constexpr int ACC = BN / 2;                    // accumulator registers per thread
    static_assert(NC == 1 || NC == 2, "one or two consumer warpgroups");
    static_assert(BN == 64 || BN == 128 || BN == 256, "wgmma N of 64, 128 or 256");
    static_assert(ST >= 3, "at least 3 stages (the producer keeps ST-2 in flight)");
    static_assert(MODE != 1 || (BN / 2) % 16 == 0, "MODE 1: gate and up halves of whole 16-row load passes");
    static_assert(!MC || (TMA && !PP), "mc=1 and mc=2 need tma=1 and cooperative consumers");
    // mc=2 (MN): clusters of two take the two n-tiles of one m-tile; each
    // block gathers half of the token rows (HALF load passes from pass i0)
    // and copies its half into the peer's stage (a shared-to-cluster bulk
    // copy, counted on the peer's "full" barrier), so each token row leaves
    // L2 once for both n-tiles.
    constexpr bool MN = MC == 2;
    constexpr int HALF = MN ? BM / 32 : BM / 16;
    // "empty" arrivals a stage waits for: every consumer thread of the
    // stage, or (mc=1) lane 0 of every consumer warp of both blocks.
    constexpr int EMPTY_ARRIVALS = MC ? 2 * 4 * CONSUMERS_PER_STAGE : 128 * CONSUMERS_PER_STAGE;

    MOE_DYNAMIC_SMEM(uint4, smem_u4);
    const saddr_t base = align1024(to_saddr(smem_u4));
    // full[ST], empty[ST], go[NC] (PP), then (mc=2) gathered[ST]: 8 bytes each.
    const saddr_t bars = base + ST * STAGE;
    const saddr_t gathered = bars + 8 * (2 * ST + NC);
    const int tid = threadIdx.x, wgi = tid >> 7;
    if (tid == 0) {
        for (int s = 0; s < ST; ++s) {
            mbar_init(bars + 8 * s, 128);              // full: every producer thread
            mbar_init(bars + 8 * (ST + s), EMPTY_ARRIVALS);
        }
        for (int k = 0; k < NC; ++k) mbar_init(bars + 8 * (2 * ST + k), 128);
        if constexpr (MN)
            for (int s = 0; s < ST; ++s) mbar_init(gathered + 8 * s, 128);  // every producer thread's copies landed
        mbar_init_fence();
    }
    __syncthreads();
    // mc=1: the peer's barriers are initialized before any arrival on them.
    if constexpr (MC) cluster_sync_all();

    const int total = *total_ptr;
    const int mtiles = total / BM;
    const int ntiles = (N + OUTN - 1) / OUTN;
    const int KT = (K + BK - 1) / BK;
    // Work units: a tile, or for the cluster (mc=1) a pair of m-tiles of
    // one n-tile, (mc=2) a pair of n-tiles of one m-tile.
    const int rank = MC ? cluster_rank() : 0;
    const int munits = MC == 1 ? (mtiles + 1) / 2 : mtiles;
    const int nunits = MN ? (ntiles + 1) / 2 : ntiles;
    const int units = munits * nunits;
    const int ustart = MC ? blockIdx.x / 2 : blockIdx.x, ustep = MC ? gridDim.x / 2 : gridDim.x;
    constexpr int UGM = MC == 1 ? (GM + 1) / 2 : GM;
    // tc's order: UGM m-units per group, the group's n-units in turn; then
    // this block's m-tile and n-tile of the unit.
    auto unit_of = [&](int u, int& mt, int& nt) {
        const int per_group = UGM * nunits;
        const int grp = u / per_group, first_m = grp * UGM;
        const int gsz = min(munits - first_m, UGM);
        const int in = u - grp * per_group;
        const int mu = first_m + in % gsz, nu = in / gsz;
        mt = MC == 1 ? 2 * mu + rank : mu;
        nt = MN ? 2 * nu + rank : nu;
    };

    if (wgi == 0) {
        // ---- producer: 128 threads, thread p copies chunk p%8 of rows p/8 + 16i.
        if constexpr (NC == 2) setmaxnreg_dec<40>();
        const int lc = tid & 7, lr = tid >> 3;
        const int sw = lr * ROWB + ((lc ^ (lr & 7)) << 4);
        // A unit's expert, pairing (mc=1) and slots come from global memory.
        // fetch loads them for the block's next unit a whole unit ahead, into
        // registers: the first loads of every unit used to wait on them (a
        // global round trip at each unit switch, the weight stream idle).
        // Not in the 128-row producer without TMA: its own weight loads'
        // addresses leave no room under setmaxnreg 40 (ptxas spilled 40
        // bytes there on sm_90a), so it fetches each unit as it starts.
        constexpr bool AHEAD = TMA || BM <= 64;
        int pf_e = 0, pf_slot[BM / 16];
        bool pf_shared = false;
        // mc=2: this block's half of the token rows starts at load pass i0.
        const int i0 = MN ? rank * HALF : 0;
        auto fetch = [&](int u) {
            int mt, nt;
            unit_of(u, mt, nt);
            const int mu = mt >> 1;
            // mc=1: a block past the last m-tile loads like its peer and
            // stores nothing (mc=2: past the last n-tile, the same).
            const bool valid = mt < mtiles;
            pf_e = block_expert[valid ? mt : mt - 1];
            if constexpr (MC == 1) {
#ifdef EMU_BUG_MC_SHARE_ALWAYS
                pf_shared = 2 * mu + 1 < mtiles;
#else
                pf_shared = 2 * mu + 1 < mtiles && block_expert[2 * mu] == block_expert[2 * mu + 1];
#endif
            }
#pragma unroll
            for (int i = 0; i < HALF; ++i) pf_slot[i] = valid ? sorted[mt * BM + lr + 16 * (i0 + i)] : pad;
        };
        // mc=2: forward(d) sends stage d's half to the peer once every
        // producer thread's copies of it have landed (thread 0 waits for them).
        auto forward = [&](int d) {
            const int s = d % ST;
            mbar_arrive(gathered + 8 * s);
            if (tid == 0) {
#ifndef EMU_BUG_MN_NO_GATHER_WAIT
                mbar_wait(gathered + 8 * s, (d / ST) & 1);
#endif
                const saddr_t half = base + s * STAGE + i0 * 16 * ROWB;
#ifndef EMU_BUG_MN_NO_FORWARD
                bulk_s2s(mapa(half, rank ^ 1), half, A_BYTES / 2, mapa(bars + 8 * s, rank ^ 1));
#endif
            }
        };
        int it = 0;
        if (AHEAD && ustart < units) fetch(ustart);
        for (int u = ustart; u < units; u += ustep) {
            if (!AHEAD) fetch(u);
            int mt, nt;
            unit_of(u, mt, nt);
            (void)mt;
            const int e = pf_e, c0 = nt * OUTN;
            const bool shared = pf_shared;
            (void)shared;
            // Padding rows are zero-filled, not read (a 128-row tile over
            // 64 slots would otherwise fetch token row 0 64 times a k-step),
            // and weight rows past N read row N-1: their results are never
            // stored.
            u32 a_off[BM / 16], live = 0;
#pragma unroll
            for (int i = 0; i < HALF; ++i) {
                const int slot = pf_slot[i];
                const int srow = slot == pad ? 0 : (MODE == 1 ? slot / topk : slot);
                a_off[i] = (u32)srow * (u32)K;
                live |= (u32)(slot != pad) << i;
            }
#ifdef EMU_BUG_WG_FETCH_SAME
            if (AHEAD && u + ustep < units) fetch(u);
#else
            if (AHEAD && u + ustep < units) fetch(u + ustep);
#endif
            const bf16_t* We = W + (size_t)e * (size_t)(MODE == 1 ? 2 * N : N) * K;
            for (int kt = 0; kt < KT; ++kt, ++it) {
                const int s = it % ST;
                mbar_wait(bars + 8 * (ST + s), ((it / ST) & 1) ^ 1);
                const saddr_t sa = base + s * STAGE;
                const int k = kt * BK + lc * 8;
                const int bytes = k < K ? 16 : 0, kc = k < K ? k : 0;
#pragma unroll
                for (int i = 0; i < HALF; ++i) {
                    const saddr_t d = sa + sw + (i0 + i) * 16 * ROWB;
                    const int b = (live >> i) & 1 ? bytes : 0;
                    cp_async16_s(d, src + a_off[i] + kc, b);
                }
                if constexpr (TMA) {
                    // Rows past N (and past the last expert: zeros) land
                    // like the clamped ones: their results are never stored.
                    if (tid == 0) {
                        const saddr_t full = bars + 8 * s;
#ifndef EMU_BUG_MN_NO_EXPECT
                        mbar_expect_tx(full, BN * ROWB + (MN ? A_BYTES / 2 : 0));  // mc=2: the peer's half too
#else
                        mbar_expect_tx(full, BN * ROWB);
#endif
                        // Halves: gemm1's gate and up rows; gemm2's (mc=1) two BN/2-row boxes.
                        const int y0 = MODE == 1 ? e * 2 * N + c0 : e * N + c0;
#ifdef EMU_BUG_TMA_UP_AT_GATE
                        const int y1 = MODE == 1 ? y0 : e * N + c0 + BN / 2;
#else
                        const int y1 = MODE == 1 ? e * 2 * N + N + c0 : e * N + c0 + BN / 2;
#endif
                        if (MC == 1 && shared) {
#ifdef EMU_BUG_MC_OWN_ONLY
                            const unsigned short mask = (unsigned short)(1u << rank);
#else
                            const unsigned short mask = 3;
#endif
                            tma_load_2d_mc(sa + A_BYTES + rank * (BN / 2) * ROWB, tmw, kt * BK, rank ? y1 : y0, full, mask);
                        } else if (MC || MODE == 1) {
                            tma_load_2d(sa + A_BYTES, tmw, kt * BK, y0, full);
                            tma_load_2d(sa + A_BYTES + (BN / 2) * ROWB, tmw, kt * BK, y1, full);
                        } else {
                            tma_load_2d(sa + A_BYTES, tmw, kt * BK, y0, full);
                        }
                    }
                } else {
#pragma unroll
                    for (int j = 0; j < BN / 16; ++j) {
                        int row;
                        if (MODE == 1) {
                            const bool up = j * 16 >= BN / 2;  // compile-time per j
                            row = (up ? N : 0) + min(c0 + lr + 16 * j - (up ? BN / 2 : 0), N - 1);
                        } else {
                            row = min(c0 + lr + 16 * j, N - 1);
                        }
                        cp_async16_s(sa + A_BYTES + sw + j * 16 * ROWB, We + (u32)row * (u32)K + kc, bytes);
                    }
                }
                cp_async_commit();
                if (it >= LAG) {
                    cp_async_wait<LAG>();
                    fence_proxy_async();
                    if constexpr (MN) forward(it - LAG);
                    mbar_arrive(bars + 8 * ((it - LAG) % ST));
                }
            }
        }
        cp_async_wait<0>();
        fence_proxy_async();
        for (int d = max(0, it - LAG); d < it; ++d) {
            if constexpr (MN) forward(d);
            mbar_arrive(bars + 8 * (d % ST));
        }
        // mc=1: no block leaves while its peer may still arrive on its
        // barriers or multicast into it.
        if constexpr (MC) cluster_sync_all();
        return;
    }

    // ---- consumers: warpgroup c computes rows 64c..64c+63 of each tile
    // (cooperative), or every NC-th of the block's tiles from the c-th (PP).
    if constexpr (NC == 2) setmaxnreg_inc<232>();
    const int c = wgi - 1, tw = tid & 127;
    const int w = tw >> 5, lane = tw & 31, g = lane >> 2, q = lane & 3;
    const int first = PP ? c : 0, step = PP ? NC : 1;
    // release hands stage st back: to this block's producer, or (mc=1) to
    // both blocks' producers, one arrival per consumer warp on each.
    auto release = [&](int st) {
        const saddr_t empty = bars + 8 * (ST + st);
        if constexpr (MC) {
            if (lane == 0) {
                mbar_arrive_cta(empty, 0);
#ifndef EMU_BUG_MC_NO_PEER_RELEASE
                mbar_arrive_cta(empty, 1);
#endif
            }
        } else {
            mbar_arrive(empty);
        }
    };
    for (int j = first, u = ustart + first * ustep; u < units; j += step, u += step * ustep) {
        int it = j * KT;  // the block's stage counter at this tile's first stage
        // PP: a tile's MMAs start once the other consumer has issued all of
        // the previous tile's. Besides taking turns on the tensor cores, this
        // keeps every wait on a "full" barrier at most one phase ahead of it
        // (a parity wait cannot tell its phase from the one two later).
        if (PP && j > 0) mbar_wait(bars + 8 * (2 * ST + c), ((j / NC) - (c == 0 ? 1 : 0)) & 1);
        int mt, nt;
        unit_of(u, mt, nt);
        const bool valid = mt < mtiles && nt < ntiles;
        const int row0 = mt * BM + (PP ? 0 : 64 * c), c0 = nt * OUTN;
        // The epilogue's slots, and gemm2's routing weights one stage later,
        // are loaded while the tile's MMAs run: the epilogue used to start
        // with these two dependent global loads, the tensor cores idle.
        int ep_slot[2] = {pad, pad};
        float ep_w[2] = {0.f, 0.f};
#ifndef EMU_BUG_WG_EPILOGUE_STALE
        if (valid) {
#pragma unroll
            for (int h = 0; h < 2; ++h) ep_slot[h] = sorted[row0 + 16 * w + g + 8 * h];
        }
#endif
        const int kw = KT > 1 ? 1 : 0;  // the k-step that loads the weights
        float acc[ACC];
        for (int kt = 0; kt < KT; ++kt, ++it) {
            const int s = it % ST;
            mbar_wait(bars + 8 * s, (it / ST) & 1);
            const saddr_t sa = base + s * STAGE;
            const u64 da = wg_desc(sa + (PP ? 0 : 64 * c * ROWB)), db = wg_desc(sa + A_BYTES);
            wg_hold(acc);
            wg_arrive();
#pragma unroll
            for (int k16 = 0; k16 < BK / 16; ++k16) wgmma_bn<BN>(acc, da + 2 * k16, db + 2 * k16, (kt | k16) != 0);
            wg_commit();
            wg_hold(acc);
            if (kt > 0) {
                wg_wait<1>();
                release((it - 1) % ST);
            }
            if (MODE == 2 && kt == kw) {
#pragma unroll
                for (int h = 0; h < 2; ++h) ep_w[h] = ep_slot[h] == pad ? 0.f : wts[ep_slot[h]];
            }
        }
        if (PP) mbar_arrive(bars + 8 * (2 * ST + (c + 1) % NC));
        wg_wait<0>();
        wg_hold(acc);
        if (KT > 0) release((it - 1) % ST);
        if (!valid) continue;

        // Accumulator layout: register 4j + 2h + v holds row 16w + g + 8h,
        // column 8j + 2q + v. So a quad (the 4 lanes of one g) holds a row's
        // bf16 pairs in 4-byte pieces; a 4×4 transpose across the quad per
        // four j gives lane q the 8 columns 8(4a + q)..+7, one 16-byte store:
        // a quarter of the store instructions, whole 32-byte sectors (the
        // 4-byte stores' queue stalled the epilogue, ncu v21: gemm2's
        // epilogue held a third of its consumers' stall samples). The CUDA
        // shapes have N % 8 == 0 (CheckCUDAShape), so the 8 columns are all
        // in or all out.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int slot = ep_slot[h];  // one slot per quad: every lane shuffles
            // A warp whose 8 rows of this h are all padding (most of a
            // 128-row tile at 16–32 slots an expert) skips the activation and
            // the shuffles, as the 4-byte stores skipped each padding row.
            if (__all_sync(0xffffffffu, slot == pad)) continue;
            bf16_t* row = dst + (size_t)(slot == pad ? 0 : slot) * N + c0;
            const float wt = ep_w[h];
#pragma unroll
            for (int a = 0; a < (MODE == 1 ? BN / 64 : BN / 32); ++a) {
                u32 x[4];
#pragma unroll
                for (int b = 0; b < 4; ++b) {
                    const int j = 4 * a + b;
                    x[b] = MODE == 1 ? act_pair(&acc[4 * j], &acc[4 * (j + BN / 16)], h) : scaled_pair(&acc[4 * j], wt, h);
                }
                quad_transpose(x, q);
                const int col = 8 * (4 * a + q);
                if (slot != pad && c0 + col < N) *(uint4*)(row + col) = make_uint4(x[0], x[1], x[2], x[3]);
            }
        }
    }
    if constexpr (MC) cluster_sync_all();
}

#define WG_KERNEL_0(NAME, MODE, NC, BN, ST, GM, PP, MC)                                                   \
    extern "C" __global__ void __launch_bounds__(128 * (NC + 1), 1)                                     \
    NAME(const bf16_t* __restrict__ W, const bf16_t* __restrict__ src, bf16_t* __restrict__ dst,          \
         const float* __restrict__ wts, const int* __restrict__ sorted, const int* __restrict__ bexp,     \
         const int* __restrict__ total, int N, int K, int topk, int pad) {                                \
        grid_dep_sync();                                                                                  \
        wg<MODE, NC, BN, ST, GM, PP, 0, 0>(W, src, dst, wts, sorted, bexp, total, N, K, topk, pad, nullptr); \
    }                                                                                                    \
    MOE_EMU_GEMM(NAME)
// tma=1: the weights' tensor map as a last, by-value parameter; mc=1
// declares its clusters of two (a plain launch then makes them).
#define WG_CLUSTER_0
#define WG_CLUSTER_1 __cluster_dims__(2, 1, 1)
#define WG_CLUSTER_2 __cluster_dims__(2, 1, 1)
#define WG_KERNEL_1(NAME, MODE, NC, BN, ST, GM, PP, MC)                                                   \
    extern "C" __global__ void __launch_bounds__(128 * (NC + 1), 1) WG_CLUSTER_##MC                     \
    NAME(const bf16_t* __restrict__ W, const bf16_t* __restrict__ src, bf16_t* __restrict__ dst,          \
         const float* __restrict__ wts, const int* __restrict__ sorted, const int* __restrict__ bexp,     \
         const int* __restrict__ total, int N, int K, int topk, int pad, const __grid_constant__ TmaDesc tmw) { \
        grid_dep_sync();                                                                                  \
        wg<MODE, NC, BN, ST, GM, PP, 1, MC>(W, src, dst, wts, sorted, bexp, total, N, K, topk, pad, &tmw); \
    }                                                                                                    \
    MOE_EMU_GEMM_TMA(NAME)
#define WG_KERNEL_SEL(tma) WG_KERNEL_##tma

// wg configurations come from the host as -DMOE_WG_LIST="WG(name,nc,bn,st,gm,pp,tma,mc) ...":
// kernels moe_gemm1_wg_<name> and moe_gemm2_wg_<name>.
#define WG(name, NC, BN, ST, GM, PP, TMA, MC)                                  \
    WG_KERNEL_SEL(TMA)(moe_gemm1_wg_##name, 1, NC, BN, ST, GM, PP, MC)         \
    WG_KERNEL_SEL(TMA)(moe_gemm2_wg_##name, 2, NC, BN, ST, GM, PP, MC)
MOE_WG_LIST
#endif  // MOE_WG_LIST

// ---------------------------------------------------------------- combine

// out[m, h] = Σ_j y[m·K+j, h] over the slots computed here, in j order.
// One thread per 8 outputs (H % 8 == 0).
extern "C" __global__ void moe_combine(const bf16_t* __restrict__ y, const int* __restrict__ ids,
                                       bf16_t* __restrict__ out, int M, int H, int topk) {
    grid_dep_sync();
    const int per_row = H / 8;
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= M * per_row) return;
    const int m = idx / per_row, h = (idx % per_row) * 8;
    float acc[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = 0.f;
    for (int j = 0; j < topk; ++j) {
        if (ids[m * topk + j] < 0) continue;
        uint4 v = ld_act(y + (size_t)(m * topk + j) * H + h);
        u32 p[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            acc[2 * i] += bf2f(p[i] & 0xffffu);
            acc[2 * i + 1] += bf2f(p[i] >> 16);
        }
    }
    uint4 o;
    o.x = pack_bf16x2(acc[0], acc[1]);
    o.y = pack_bf16x2(acc[2], acc[3]);
    o.z = pack_bf16x2(acc[4], acc[5]);
    o.w = pack_bf16x2(acc[6], acc[7]);
    *(uint4*)(out + (size_t)m * H + h) = o;
}
