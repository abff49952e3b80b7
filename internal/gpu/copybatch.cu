// Many device-to-device copies in one launch: blockIdx.y picks the copy,
// the x blocks stride over it in 16-byte units, four loads in flight per
// thread; the bytes past the last whole unit are copied one by one. A batch
// of small copies then costs one launch, not one driver call each (on an
// H200 a 16 MiB copy takes ~8 µs, less than queueing a copy costs).

#define COPY_BATCH_MAX 64

struct CopyBatch {
    unsigned long long src[COPY_BATCH_MAX];
    unsigned long long dst[COPY_BATCH_MAX];
    unsigned long long n[COPY_BATCH_MAX];
};

extern "C" __global__ void __launch_bounds__(512)
copy_batch(const CopyBatch b) {
    const int c = blockIdx.y;
    const uint4* __restrict__ s = (const uint4*)b.src[c];
    uint4* __restrict__ d = (uint4*)b.dst[c];
    const unsigned long long n16 = b.n[c] >> 4;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 v0 = s[i], v1 = s[i + stride], v2 = s[i + 2 * stride], v3 = s[i + 3 * stride];
        d[i] = v0;
        d[i + stride] = v1;
        d[i + 2 * stride] = v2;
        d[i + 3 * stride] = v3;
    }
    for (; i < n16; i += stride) {
        d[i] = s[i];
    }
    const unsigned tail = (unsigned)(b.n[c] & 15);
    if (blockIdx.x == 0 && threadIdx.x < tail) {
        const unsigned long long o = (n16 << 4) + threadIdx.x;
        ((unsigned char*)b.dst[c])[o] = ((const unsigned char*)b.src[c])[o];
    }
}
