package gpu

import (
	_ "embed"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/mstar-dev/mstar/internal/gpu/cuda"
)

// DtoDCopy is one device-to-device copy of a batch.
type DtoDCopy struct {
	Dst    Buffer
	DstOff int64
	Src    Buffer
	SrcOff int64
	N      int64
}

// BatchCopier is a Stream that queues many device-to-device copies as one
// operation: on CUDA one kernel launch per CopyBatchMax copies instead of a
// driver call each. The copies must not overlap one another.
type BatchCopier interface {
	CopyDtoDBatch(copies []DtoDCopy) error
}

// CopyBatchMax is how many copies one launch of copy_batch takes (its
// by-value parameter holds their pointers and lengths).
const CopyBatchMax = 64

// copyBatchSource is the kernel, compiled by NVRTC at first use.
//
//go:embed copybatch.cu
var copyBatchSource string

// copyBatchFns are the compiled kernels, one per context.
var copyBatchFns sync.Map // *cuda.Context -> *kernelFn

// kernelFn is one context's compiled kernel of 512-thread blocks, made at
// first use, and how many of its blocks fill the device.
type kernelFn struct {
	once   sync.Once
	fn     *cuda.Function
	blocks int
	err    error
}

// kernelFor compiles function name of src (file names it in errors) once
// per context, keeping it in cache.
func kernelFor(cache *sync.Map, ctx *cuda.Context, src, file, name string) (*kernelFn, error) {
	v, _ := cache.LoadOrStore(ctx, &kernelFn{})
	f := v.(*kernelFn)
	f.once.Do(func() {
		comp, err := ctx.Compiler()
		if err != nil {
			f.err = fmt.Errorf("compiling %s: %w", file, err)
			return
		}
		mod, _, err := ctx.CompileModule(comp, src, file, nil)
		if err != nil {
			f.err = fmt.Errorf("compiling %s: %w", file, err)
			return
		}
		if f.fn, f.err = mod.Function(name); f.err != nil {
			return
		}
		perSM, err := f.fn.MaxActiveBlocksPerSM(512, 0)
		if err != nil || perSM < 1 {
			perSM = 1
		}
		f.blocks = perSM * max(ctx.Props().SMs, 1)
	})
	return f, f.err
}

// copyBatchParams lays out the kernel's CopyBatch parameter: src, dst and
// n arrays of CopyBatchMax uint64 each.
func copyBatchParams(ptrs [][3]uint64) []byte {
	b := make([]byte, 3*8*CopyBatchMax)
	for i, p := range ptrs {
		binary.LittleEndian.PutUint64(b[8*i:], p[0])
		binary.LittleEndian.PutUint64(b[8*(CopyBatchMax+i):], p[1])
		binary.LittleEndian.PutUint64(b[8*(2*CopyBatchMax+i):], p[2])
	}
	return b
}

// CopyDtoDBatch queues the copies on s as launches of copy_batch; a copy
// whose addresses are not 16-byte aligned goes through cuMemcpyDtoDAsync.
func (s *cudaStream) CopyDtoDBatch(copies []DtoDCopy) error {
	var ptrs [][3]uint64 // src, dst, n
	for _, c := range copies {
		d, err := cudaBuf(c.Dst)
		if err != nil {
			return err
		}
		b, err := cudaBuf(c.Src)
		if err != nil {
			return err
		}
		if err := span("copy DtoD dst", c.DstOff, c.N, d.size); err != nil {
			return err
		}
		if err := span("copy DtoD src", c.SrcOff, c.N, b.size); err != nil {
			return err
		}
		dp, sp := uint64(d.ptr)+uint64(c.DstOff), uint64(b.ptr)+uint64(c.SrcOff)
		if c.N == 0 {
			continue
		}
		if (dp|sp)%16 != 0 {
			if err := s.s.CopyDtoD(cuda.DevicePtr(dp), cuda.DevicePtr(sp), c.N); err != nil {
				return err
			}
			continue
		}
		ptrs = append(ptrs, [3]uint64{sp, dp, uint64(c.N)})
	}
	if len(ptrs) == 0 {
		return nil
	}
	f, err := kernelFor(&copyBatchFns, s.s.Context(), copyBatchSource, "copybatch.cu", "copy_batch")
	if err != nil {
		return err
	}
	for len(ptrs) > 0 {
		n := min(len(ptrs), CopyBatchMax)
		x := max(1, (f.blocks+n-1)/n)
		if err := f.fn.Launch(s.s, cuda.Dim3{X: x, Y: n}, cuda.Dim3{X: 512}, 0, copyBatchParams(ptrs[:n])); err != nil {
			return err
		}
		ptrs = ptrs[n:]
	}
	return nil
}

// CopyDtoDBatch on the CPU backend copies one after another.
func (s cpuStream) CopyDtoDBatch(copies []DtoDCopy) error {
	for _, c := range copies {
		if err := s.CopyDtoD(c.Dst, c.DstOff, c.Src, c.SrcOff, c.N); err != nil {
			return err
		}
	}
	return nil
}
