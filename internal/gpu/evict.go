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

// evictState is one context's kernel and scratch buffer, made at first use
// and kept until the process ends (twice the L2: ~100 MB on an H200).
type evictState struct {
	once    sync.Once
	fn      *cuda.Function
	scratch cuda.DevicePtr
	n16     uint64
	sink    cuda.DevicePtr
	blocks  int
	err     error
}

var evictStates sync.Map // *cuda.Context -> *evictState

// evictBytes is the scratch size for an L2 of l2 bytes: twice it, and at
// least 16 MiB when the size is unknown.
func evictBytes(l2 int64) int64 {
	return max(2*l2, 16<<20) / 16 * 16
}

func evictFor(ctx *cuda.Context) (*evictState, error) {
	v, _ := evictStates.LoadOrStore(ctx, &evictState{})
	e := v.(*evictState)
	e.once.Do(func() {
		comp, err := ctx.Compiler()
		if err != nil {
			e.err = fmt.Errorf("compiling evict.cu: %w", err)
			return
		}
		mod, _, err := ctx.CompileModule(comp, evictSource, "evict.cu", nil)
		if err != nil {
			e.err = fmt.Errorf("compiling evict.cu: %w", err)
			return
		}
		if e.fn, e.err = mod.Function("evict_l2"); e.err != nil {
			return
		}
		n := evictBytes(ctx.Props().L2Bytes)
		if e.scratch, e.err = ctx.Alloc(n); e.err != nil {
			e.err = fmt.Errorf("cache eviction scratch of %d bytes: %w", n, e.err)
			return
		}
		if e.err = ctx.Memset(e.scratch, 0x5a, n); e.err != nil {
			return
		}
		if e.sink, e.err = ctx.Alloc(16); e.err != nil {
			return
		}
		e.n16 = uint64(n / 16)
		perSM, err := e.fn.MaxActiveBlocksPerSM(512, 0)
		if err != nil || perSM < 1 {
			perSM = 1
		}
		e.blocks = perSM * max(ctx.Props().SMs, 1)
	})
	return e, e.err
}

// EvictCache queues a read of the scratch buffer on s.
func (s *cudaStream) EvictCache() error {
	e, err := evictFor(s.s.Context())
	if err != nil {
		return err
	}
	return e.fn.Launch(s.s, cuda.Dim3{X: e.blocks}, cuda.Dim3{X: 512}, 0, e.scratch, e.n16, e.sink)
}
