// Reads a scratch buffer larger than the L2 once, so the cache holds only
// clean scratch lines afterwards: the copy timed next reads and writes
// device memory, as a spill of data written long ago does. The xor of
// everything read is stored only if it matches a value it cannot be
// expected to, which keeps the loads from being optimized away.
extern "C" __global__ void __launch_bounds__(512)
evict_l2(const uint4* __restrict__ p, unsigned long long n16, unsigned int* sink) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned int acc = 0;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride) {
        uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) {
        *sink = acc;
    }
}
