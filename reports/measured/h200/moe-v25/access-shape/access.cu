// access.cu: DRAM read rate of a weight stream by the shape of each stage's
// reads (rows x bytes per row), through a cp.async ring like the tc GEMMs.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

__device__ __forceinline__ void cp16(unsigned s, const void* g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(g));
}
// BN rows per tile, RB bytes of each row per stage, ST stages, T threads.
template <int BN, int RB, int ST, int T>
__global__ void __launch_bounds__(T) stream(const char* __restrict__ W, long rows, int rowbytes, int tiles, int skew, unsigned* sink) {
    extern __shared__ __align__(16) char sm[];
    constexpr int CPR = RB / 16, CH = BN * CPR, SB = BN * RB;
    const unsigned sb = (unsigned)__cvta_generic_to_shared(sm);
    const int KT = rowbytes / RB;
    unsigned acc = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        const char* base = W + (long)t * BN * rowbytes;
        const int k0 = skew ? (t * skew) % KT : 0;  // skew: tiles start their k-loops at different stages
        auto issue = [&](int kt) {
            const unsigned s = sb + (kt % ST) * SB;
            const int kk = (kt + k0) % KT;
            for (int i = threadIdx.x; i < CH; i += T) {
                const int r = i / CPR, c = i % CPR;
                cp16(s + i * 16, base + (long)r * rowbytes + (long)kk * RB + c * 16);
            }
        };
        for (int kt = 0; kt < ST - 1; ++kt) { if (kt < KT) issue(kt); asm volatile("cp.async.commit_group;\n"); }
        for (int kt = 0; kt < KT; ++kt) {
            if (kt + ST - 1 < KT) issue(kt + ST - 1);
            asm volatile("cp.async.commit_group;\n");
            asm volatile("cp.async.wait_group %0;\n" ::"n"(ST - 1));
            __syncthreads();
            acc += ((unsigned*)(sm + (kt % ST) * SB))[threadIdx.x];
            __syncthreads();
        }
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

template <int BN, int RB, int ST, int T>
void run(const char* name, char** Ws, int nW, long bytes, int rowbytes, int persistent, int skew, unsigned* sink) {
    const long rows = bytes / rowbytes;
    const int tiles = rows / BN;
    const int smem = ST * BN * RB;
    CK(cudaFuncSetAttribute(stream<BN, RB, ST, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int per = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, stream<BN, RB, ST, T>, T, smem));
    const int grid = persistent ? 132 * per : tiles;
    cudaEvent_t a, b;
    cudaEventCreate(&a); cudaEventCreate(&b);
    const double used = (double)tiles * BN * rowbytes;
    printf("%-26s %3dx%5dB %3dKB st%d t%d %d/SM g%6d skew%2d GB/s:", name, BN, RB, BN * RB / 1024, ST, T, per, grid, skew);
    for (int w = 0; w < nW; ++w) {
        const char* W = Ws[w];
        for (int i = 0; i < 3; ++i) stream<BN, RB, ST, T><<<grid, T, smem>>>(W, rows, rowbytes, tiles, skew, sink);
        float best = 1e9;
        for (int i = 0; i < 8; ++i) {
            cudaEventRecord(a);
            stream<BN, RB, ST, T><<<grid, T, smem>>>(W, rows, rowbytes, tiles, skew, sink);
            cudaEventRecord(b);
            CK(cudaEventSynchronize(b));
            float ms; cudaEventElapsedTime(&ms, a, b);
            best = ms < best ? ms : best;
        }
        printf(" %5.0f", used / best / 1e6);
    }
    printf("\n");
}

int main() {
    const long bytes = 1L << 30;  // 1 GiB of "weights", rows of 8 KB (K = 4096 bf16)
    const int rowbytes = 8192;
    const int nW = 6;
    char* Ws[nW]; unsigned* sink;
    CK(cudaMalloc(&sink, 64));
    for (int w = 0; w < nW; ++w) {  // six buffers, odd-sized spacers between: six placements
        void* sp; CK(cudaMalloc(&sp, (long)(1 + (w * 5) % 7) << 20));
        CK(cudaMalloc(&Ws[w], bytes)); CK(cudaMemset(Ws[w], 1, bytes));
    }
    printf("GB/s over %d buffers of 1 GiB (each: best of 8 launches)\n", nW);
    for (int p = 1; p >= 0; --p) {
        printf("== %s\n", p ? "persistent (132 x blocks/SM, tile t to block t mod grid)" : "all tiles (hardware-scheduled grid)");
        for (int sk = 0; sk <= 1; ++sk) {
            const int skew = sk ? 1 : 0;
            run<256, 256, 3, 256>("tc 16x256x128 w8", Ws, nW, bytes, rowbytes, p, skew, sink);
            run<128, 128, 4, 128>("tc 16x128x64 w4", Ws, nW, bytes, rowbytes, p, skew, sink);
            run<64, 256, 3, 128>("triton 16x64x128 w4", Ws, nW, bytes, rowbytes, p, skew, sink);
            run<128, 512, 3, 256>("128 rows x 512 B", Ws, nW, bytes, rowbytes, p, skew, sink);
            run<64, 1024, 3, 256>("64 rows x 1 KB", Ws, nW, bytes, rowbytes, p, skew, sink);
            run<8, 8192, 3, 256>("8 rows x 8 KB (sequential)", Ws, nW, bytes, rowbytes, p, skew, sink);
            run<128, 256, 6, 256>("128 x 256 B, 6 st", Ws, nW, bytes, rowbytes, p, skew, sink);
        }
    }
    return 0;
}
