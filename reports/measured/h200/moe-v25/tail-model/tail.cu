// tail.cu: does the last, partly filled round of a persistent weight stream
// cost what the small-M tc GEMMs lose? The same cp.async ring as access.cu,
// one ring across a block's tiles (as tc ov=2), over the tile counts of the
// real cells, with tiles dealt round-robin (tc today) or each block given an
// equal share of the (tile, k-stage) iterations (stream-K; the partial tiles'
// fp32 partials are not modelled: 16x256 fp32 = 16 KB a split).
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

__device__ __forceinline__ void cp16(unsigned s, const void* g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(g));
}
template <int BN, int RB, int ST, int T>
__global__ void __launch_bounds__(T) flat(const char* __restrict__ W, int rowbytes, int tiles, int balanced, unsigned* sink) {
    extern __shared__ __align__(16) char sm[];
    constexpr int CPR = RB / 16, CH = BN * CPR, SB = BN * RB;
    const unsigned sb = (unsigned)__cvta_generic_to_shared(sm);
    const int KT = rowbytes / RB, G = gridDim.x, b = blockIdx.x;
    long lo = 0, n;
    if (balanced) {
        const long total = (long)tiles * KT;
        lo = (long)b * total / G;
        n = (long)(b + 1) * total / G - lo;
    } else {
        n = (long)(b < tiles ? (tiles - b + G - 1) / G : 0) * KT;
    }
    auto issue = [&](long j) {
        long t, kk;
        if (balanced) { t = (lo + j) / KT; kk = (lo + j) % KT; }
        else { t = b + (j / KT) * G; kk = j % KT; }
        const char* base = W + t * BN * (long)rowbytes + kk * RB;
        const unsigned s = sb + (j % ST) * SB;
        for (int i = threadIdx.x; i < CH; i += T) {
            const int r = i / CPR, c = i % CPR;
            cp16(s + i * 16, base + (long)r * rowbytes + c * 16);
        }
    };
    unsigned acc = 0;
    for (int j = 0; j < ST - 1; ++j) { if (j < n) issue(j); asm volatile("cp.async.commit_group;\n"); }
    for (long j = 0; j < n; ++j) {
        if (j + ST - 1 < n) issue(j + ST - 1);
        asm volatile("cp.async.commit_group;\n");
        asm volatile("cp.async.wait_group %0;\n" ::"n"(ST - 1));
        __syncthreads();
        acc += ((unsigned*)(sm + (j % ST) * SB))[threadIdx.x];
        __syncthreads();
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

template <int BN, int RB, int ST, int T>
void run(const char* name, char* W, int rowbytes, int tiles, unsigned* sink) {
    const int smem = ST * BN * RB;
    CK(cudaFuncSetAttribute(flat<BN, RB, ST, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int per = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, flat<BN, RB, ST, T>, T, smem));
    const int grid = 132 * per;
    const double used = (double)tiles * BN * rowbytes;
    cudaEvent_t a, b;
    cudaEventCreate(&a); cudaEventCreate(&b);
    printf("%-34s tiles %5d on %3d blocks (%.2f rounds), %6.1f MB:", name, tiles, grid, (double)tiles / grid, used / 1e6);
    for (int bal = 0; bal <= 1; ++bal) {
        for (int i = 0; i < 3; ++i) flat<BN, RB, ST, T><<<grid, T, smem>>>(W, rowbytes, tiles, bal, sink);
        float best = 1e9;
        for (int i = 0; i < 10; ++i) {
            cudaEventRecord(a);
            flat<BN, RB, ST, T><<<grid, T, smem>>>(W, rowbytes, tiles, bal, sink);
            cudaEventRecord(b);
            CK(cudaEventSynchronize(b));
            float ms; cudaEventElapsedTime(&ms, a, b);
            best = ms < best ? ms : best;
        }
        printf("  %s %6.1f us %5.0f GB/s", bal ? "balanced" : "round-robin", best * 1e3, used / best / 1e6);
    }
    printf("\n");
}

int main() {
    char* W; unsigned* sink;
    CK(cudaMalloc(&sink, 64));
    CK(cudaMalloc(&W, 2200L << 20)); CK(cudaMemset(W, 1, 2200L << 20));
    // qwen3-235b-a22b M=4 (27 experts): gemm1 W1 rows of 8 KB, 12 n-tiles of 256 rows an expert;
    // gemm2 W2 rows of 3 KB, 32 n-tiles of 128 rows.
    run<256, 256, 3, 256>("q235 M=4 gemm1 16x256x128 w8", W, 8192, 27 * 12, sink);
    run<128, 128, 4, 128>("q235 M=4 gemm1 16x128x64 w4", W, 8192, 27 * 24, sink);
    run<128, 128, 4, 128>("q235 M=4 gemm2 16x128x64 w4", W, 3072, 27 * 32, sink);
    // mixtral M=2 (3 experts): gemm1 rows of 8 KB, 112 n-tiles of 256; gemm2 W2 rows of 28 KB.
    run<256, 256, 3, 256>("mixtral M=2 gemm1 16x256x128 w8", W, 8192, 3 * 112, sink);
    run<128, 128, 4, 128>("mixtral M=2 gemm2 16x128x64 w4", W, 28672, 3 * 32, sink);
    // qwen3-235b M=8 (~52 experts), M=16 (~80), 512 tiles (access.cu's 1 GiB)
    run<256, 256, 3, 256>("q235 M=8 gemm1 16x256x128 w8", W, 8192, 52 * 12, sink);
    run<256, 256, 3, 256>("q235 M=16 gemm1 16x256x128 w8", W, 8192, 80 * 12, sink);
    run<256, 256, 3, 256>("512 tiles 16x256x128 w8", W, 8192, 512, sink);
    return 0;
}
