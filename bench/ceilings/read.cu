// The streaming-read ceiling: every byte of a buffer read once, nothing
// written but one sum per block, so the bound is the memory's read rate
// (a copy's read+write rate is not an upper bound for weight streaming).

typedef unsigned long long u64;

extern "C" __global__ void __launch_bounds__(512)
read_stream(const uint4* __restrict__ p, u64 n16, u64* __restrict__ out) {
    u64 acc = 0;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    // Four independent 16-byte loads in flight per thread per iteration.
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 a = p[i];
        uint4 b = p[i + stride];
        uint4 c = p[i + 2 * stride];
        uint4 d = p[i + 3 * stride];
        acc += (u64)(a.x ^ a.y ^ a.z ^ a.w) + (u64)(b.x ^ b.y ^ b.z ^ b.w)
             + (u64)(c.x ^ c.y ^ c.z ^ c.w) + (u64)(d.x ^ d.y ^ d.z ^ d.w);
    }
    for (; i < n16; i += stride) {
        uint4 a = p[i];
        acc += (u64)(a.x ^ a.y ^ a.z ^ a.w);
    }
    // The sum depends on every load: reduce it and write it once per block.
    for (int o = 16; o > 0; o >>= 1) {
        acc += __shfl_xor_sync(0xffffffffu, acc, o);
    }
    __shared__ u64 warps[32];
    if ((threadIdx.x & 31) == 0) {
        warps[threadIdx.x >> 5] = acc;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 s = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
            s += warps[w];
        }
        atomicAdd(out, s);
    }
}
