// combine_red.cu — on the GPU machine (nvcc): can gemm2's epilogue add its
// rows into the output itself (reduction stores into L2) faster than it
// writes y[M·topk][H] and moe_combine reads y back to sum each token's rows?
//
// At M ≥ 1024 the combine is 5–10% of a pass on the H200 (deepseek-v3 tp8
// M=1024: 34.6 µs of 747, and gemm2 also writes y's 117 MB), and it is at
// the bandwidth of its bytes already; only not writing y removes it. This
// probe times the output side of gemm2 alone, over the layer's real sizes
// and a random routing, the rows visited in expert order (as the GEMM's
// tiles write them), each warp writing 512 contiguous bytes of one row:
//   store   16-byte stores of y in slot order, then moe_combine's sum
//           (today: deterministic, fixed top-k order)
//   red16   cudaMemsetAsync(out) then red.global.add.noftz.v4.bf16x2
//           (8 bf16 a lane) straight into out: no y, no combine
//   red32   the same into an fp32 out (red.global.add.v4.f32, two a lane),
//           then a pass converting it to bf16
// Each variant's output is checked against a CPU sum (rel L2; the values
// are exact in bf16, so this checks the indexing, not the rounding).
//
// Measured on an H100 (twenty-third session, reports/measured/h100/
// moe-combine-red/): red16 takes 20–42% less than store+combine alone
// (deepseek-v3 tp8 M=1024 54.4 against 93.2 µs). v23 (NOTES) put 4-byte
// reductions into the wg gemm2 and lost 4–14% in the pass (the adds
// contend with the weight stream in L2) and its passes were not
// bit-reproducible; so the 16-byte version was not built into moe.cu: the
// order-free sum still breaks the repeatable output the combine guarantees.
//
//   nvcc -O3 -arch=sm_90 -o /tmp/cr combine_red.cu && /tmp/cr
//   /tmp/cr M topk H E     (one shape; default: the four below)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "probe.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

typedef unsigned int u32;

__device__ __forceinline__ float val(int slot, int h) {  // the row's value: cheap and exact in bf16
    return (float)(((slot * 7 + h * 3) % 17) - 8) * 0.125f;
}
__device__ __forceinline__ u32 pack2(float a, float b) {
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *(u32*)&v;
}

// order[i] is the i-th slot in expert order; a warp per (row, 512-byte chunk).
__global__ void k_store(const int* __restrict__ order, __nv_bfloat16* __restrict__ y, int S, int H) {
    const int chunks = H / 256;  // 256 bf16 = 512 B a warp
    const int lane = threadIdx.x & 31;
    for (long w = (blockIdx.x * (long)blockDim.x + threadIdx.x) / 32; w < (long)S * chunks;
         w += (long)gridDim.x * blockDim.x / 32) {
        const int slot = order[w / chunks];
        const int h = (int)(w % chunks) * 256 + lane * 8;
        uint4 v;
        v.x = pack2(val(slot, h), val(slot, h + 1));
        v.y = pack2(val(slot, h + 2), val(slot, h + 3));
        v.z = pack2(val(slot, h + 4), val(slot, h + 5));
        v.w = pack2(val(slot, h + 6), val(slot, h + 7));
        *(uint4*)(y + (size_t)slot * H + h) = v;
    }
}

__global__ void k_combine(const __nv_bfloat16* __restrict__ y, __nv_bfloat16* __restrict__ out, int M, int H,
                          int topk) {
    const int per_row = H / 8;
    const long idx = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (idx >= (long)M * per_row) return;
    const int m = idx / per_row, h = (idx % per_row) * 8;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < topk; ++j) {
        uint4 v = __ldg((const uint4*)(y + (size_t)(m * topk + j) * H + h));
        const __nv_bfloat162* p = (const __nv_bfloat162*)&v;
        for (int i = 0; i < 4; ++i) {
            float2 f = __bfloat1622float2(p[i]);
            acc[2 * i] += f.x;
            acc[2 * i + 1] += f.y;
        }
    }
    uint4 o;
    o.x = pack2(acc[0], acc[1]);
    o.y = pack2(acc[2], acc[3]);
    o.z = pack2(acc[4], acc[5]);
    o.w = pack2(acc[6], acc[7]);
    *(uint4*)(out + (size_t)m * H + h) = o;
}

__global__ void k_red16(const int* __restrict__ order, __nv_bfloat16* __restrict__ out, int S, int H, int topk) {
    const int chunks = H / 256;
    const int lane = threadIdx.x & 31;
    for (long w = (blockIdx.x * (long)blockDim.x + threadIdx.x) / 32; w < (long)S * chunks;
         w += (long)gridDim.x * blockDim.x / 32) {
        const int slot = order[w / chunks];
        const int h = (int)(w % chunks) * 256 + lane * 8;
        u32 a = pack2(val(slot, h), val(slot, h + 1)), b = pack2(val(slot, h + 2), val(slot, h + 3));
        u32 c = pack2(val(slot, h + 4), val(slot, h + 5)), d = pack2(val(slot, h + 6), val(slot, h + 7));
        __nv_bfloat16* p = out + (size_t)(slot / topk) * H + h;
        asm volatile("red.global.add.noftz.v4.bf16x2 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(a), "r"(b), "r"(c),
                     "r"(d)
                     : "memory");
    }
}

__global__ void k_red32(const int* __restrict__ order, float* __restrict__ out, int S, int H, int topk) {
    const int chunks = H / 256;
    const int lane = threadIdx.x & 31;
    for (long w = (blockIdx.x * (long)blockDim.x + threadIdx.x) / 32; w < (long)S * chunks;
         w += (long)gridDim.x * blockDim.x / 32) {
        const int slot = order[w / chunks];
        const int h = (int)(w % chunks) * 256 + lane * 8;
        float* p = out + (size_t)(slot / topk) * H + h;
        // bf16-rounded values, as the GEMM's epilogue would hold them before the add.
        float v[8];
        for (int i = 0; i < 8; ++i) v[i] = __bfloat162float(__float2bfloat16(val(slot, h + i)));
        asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v[0]), "f"(v[1]), "f"(v[2]),
                     "f"(v[3])
                     : "memory");
        asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p + 4), "f"(v[4]), "f"(v[5]),
                     "f"(v[6]), "f"(v[7])
                     : "memory");
    }
}

__global__ void k_convert(const float* __restrict__ in, __nv_bfloat16* __restrict__ out, long n) {
    const long i = (blockIdx.x * (long)blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    float4 a = *(const float4*)(in + i), b = *(const float4*)(in + i + 4);
    uint4 o;
    o.x = pack2(a.x, a.y);
    o.y = pack2(a.z, a.w);
    o.z = pack2(b.x, b.y);
    o.w = pack2(b.z, b.w);
    *(uint4*)(out + i) = o;
}

static float host_val(int slot, int h) { return (float)(((slot * 7 + h * 3) % 17) - 8) * 0.125f; }

struct Shape {
    const char* name;
    int M, topk, H, E;
};

static void run(const Shape& s, int sms) {
    const int S = s.M * s.topk;
    // Random routing: each token's top-k distinct experts; slots visited in expert order.
    std::mt19937 rng(1);
    std::vector<int> expert(S);
    for (int t = 0; t < s.M; ++t) {
        std::vector<int> e(s.E);
        std::iota(e.begin(), e.end(), 0);
        for (int j = 0; j < s.topk; ++j) {
            std::swap(e[j], e[j + rng() % (s.E - j)]);
            expert[t * s.topk + j] = e[j];
        }
    }
    std::vector<int> order(S);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return expert[a] < expert[b]; });

    int* d_order;
    __nv_bfloat16 *d_y, *d_out;
    float* d_out32;
    CK(cudaMalloc(&d_order, S * sizeof(int)));
    CK(cudaMalloc(&d_y, (size_t)S * s.H * 2));
    CK(cudaMalloc(&d_out, (size_t)s.M * s.H * 2));
    CK(cudaMalloc(&d_out32, (size_t)s.M * s.H * 4));
    CK(cudaMemcpy(d_order, order.data(), S * sizeof(int), cudaMemcpyHostToDevice));
    // A buffer to flush L2 between launches (the GEMM's weights would).
    size_t flushN = 256 << 20;
    char* d_flush;
    CK(cudaMalloc(&d_flush, flushN));

    std::vector<float> ref((size_t)s.M * s.H, 0.f);
    for (int slot = 0; slot < S; ++slot)
        for (int h = 0; h < s.H; ++h) ref[(size_t)(slot / s.topk) * s.H + h] += host_val(slot, h);

    const int threads = 256, grid = sms * 8;
    const long cgrid = ((long)s.M * s.H / 8 + threads - 1) / threads;
    cudaEvent_t a, b, c;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventCreate(&c));
    const double ybytes = (double)S * s.H * 2, obytes = (double)s.M * s.H * 2;
    printf("%s: M=%d topk=%d H=%d E=%d (y %.1f MB, out %.1f MB)\n", s.name, s.M, s.topk, s.H, s.E, ybytes / 1e6,
           obytes / 1e6);
    for (int variant = 0; variant < 3; ++variant) {
        const char* names[] = {"store+combine", "red16", "red32+convert"};
        std::vector<float> t1, t2;
        for (int rep = 0; rep < 12; ++rep) {
            CK(cudaMemsetAsync(d_flush, rep & 0xff, flushN));
            CK(cudaEventRecord(a));
            if (variant == 0) {
                k_store<<<grid, threads>>>(d_order, d_y, S, s.H);
                CK(cudaEventRecord(b));
                k_combine<<<cgrid, threads>>>(d_y, d_out, s.M, s.H, s.topk);
            } else if (variant == 1) {
                CK(cudaMemsetAsync(d_out, 0, (size_t)s.M * s.H * 2));
                k_red16<<<grid, threads>>>(d_order, d_out, S, s.H, s.topk);
                CK(cudaEventRecord(b));
            } else {
                CK(cudaMemsetAsync(d_out32, 0, (size_t)s.M * s.H * 4));
                k_red32<<<grid, threads>>>(d_order, d_out32, S, s.H, s.topk);
                CK(cudaEventRecord(b));
                k_convert<<<cgrid, threads>>>(d_out32, d_out, (long)s.M * s.H);
            }
            CK(cudaEventRecord(c));
            CK(cudaEventSynchronize(c));
            float x, y;
            CK(cudaEventElapsedTime(&x, a, b));
            CK(cudaEventElapsedTime(&y, a, c));
            if (rep >= 2) t1.push_back(x * 1e3f), t2.push_back(y * 1e3f);
        }
        std::vector<uint16_t> got((size_t)s.M * s.H);
        CK(cudaMemcpy(got.data(), d_out, got.size() * 2, cudaMemcpyDeviceToHost));
        double num = 0, den = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            u32 bits = (u32)got[i] << 16;
            float g;
            memcpy(&g, &bits, 4);
            num += (g - ref[i]) * (double)(g - ref[i]);
            den += ref[i] * (double)ref[i];
        }
        std::sort(t1.begin(), t1.end());
        std::sort(t2.begin(), t2.end());
        printf("  %-14s first kernel %8.1f µs, all %8.1f µs (median of %zu; memset included), rel L2 %.1e\n",
               names[variant], t1[t1.size() / 2], t2[t2.size() / 2], t2.size(), sqrt(num / den));
    }
    CK(cudaFree(d_order));
    CK(cudaFree(d_y));
    CK(cudaFree(d_out));
    CK(cudaFree(d_out32));
    CK(cudaFree(d_flush));
}

int main(int argc, char** argv) {
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    printf("%s, %d SMs\n", p.name, p.multiProcessorCount);
    if (argc == 5) {
        run({"custom", atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4])}, p.multiProcessorCount);
        return 0;
    }
    const Shape shapes[] = {
        {"deepseek-v3 tp8 M=1024", 1024, 8, 7168, 256}, {"deepseek-v3 tp8 M=4096", 4096, 8, 7168, 256},
        {"qwen3-30b-a3b M=2048", 2048, 8, 2048, 128},   {"qwen3-235b-a22b M=2048", 2048, 8, 4096, 128},
        {"mixtral-8x7b M=2048", 2048, 2, 4096, 8},
    };
    for (const Shape& s : shapes) run(s, p.multiProcessorCount);
    return 0;
}
