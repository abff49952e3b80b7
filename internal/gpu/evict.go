package gpu

import (
	_ "embed"
	"fmt"
	"sync"

	"github.com/mstar-dev/mstar/internal/gpu/cuda"
)

// CacheEvicter is a Stream that can fill the device's cache with other
// data, so that the copy timed after it starts from device memory. A
// measurement that moves what the last round left in a 50 MB L2 runs
// faster than any real spill of that data (the spill matrix's device tier
// read 53–112% of a ceiling measured warm).
type CacheEvicter interface {
	EvictCache() error
}

//go:embed evict.cu
var evictSource string

// evictScratch is one context's scratch buffer, made at first use and kept
// until the process ends (twice the L2: ~100 MB on an H200).
type evictScratch struct {
	once sync.Once
	buf  cuda.DevicePtr
	n16  uint64
	sink cuda.DevicePtr
	err  error
}

var (
	evictFns       sync.Map // *cuda.Context -> *kernelFn
	evictScratches sync.Map // *cuda.Context -> *evictScratch
)

// evictBytes is the scratch size for an L2 of l2 bytes: twice it, and at
// least 16 MiB when the size is unknown.
func evictBytes(l2 int64) int64 {
	return max(2*l2, 16<<20) / 16 * 16
}

func scratchFor(ctx *cuda.Context) (*evictScratch, error) {
	v, _ := evictScratches.LoadOrStore(ctx, &evictScratch{})
	e := v.(*evictScratch)
	e.once.Do(func() {
		n := evictBytes(ctx.Props().L2Bytes)
		if e.buf, e.err = ctx.Alloc(n); e.err != nil {
			e.err = fmt.Errorf("cache eviction scratch of %d bytes: %w", n, e.err)
			return
		}
		if e.err = ctx.Memset(e.buf, 0x5a, n); e.err != nil {
			return
		}
		e.sink, e.err = ctx.Alloc(16)
		e.n16 = uint64(n / 16)
	})
	return e, e.err
}

// EvictCache queues a read of the scratch buffer on s.
func (s *cudaStream) EvictCache() error {
	ctx := s.s.Context()
	f, err := kernelFor(&evictFns, ctx, evictSource, "evict.cu", "evict_l2")
	if err != nil {
		return err
	}
	e, err := scratchFor(ctx)
	if err != nil {
		return err
	}
	return f.fn.Launch(s.s, cuda.Dim3{X: f.blocks}, cuda.Dim3{X: 512}, 0, e.buf, e.n16, e.sink)
}
