package ceilings

import (
	_ "embed"
	"fmt"

	"github.com/mstar-dev/mstar/bench"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/gpu/cuda"
	"github.com/mstar-dev/mstar/internal/units"
)

// readSource is the streaming-read kernel, compiled by NVRTC at first use.
//
//go:embed read.cu
var readSource string

// readThreads is read_stream's block size (its __launch_bounds__).
const readThreads = 512

// measureReadCUDA reads an n-byte device buffer with read_stream: 16-byte
// loads, four in flight per thread, a grid-stride loop over as many blocks
// as the device holds at once, one sum per block written.
func measureReadCUDA(dev gpu.Device, s gpu.Stream, n int64, t bench.Timing) Ceiling {
	c := Ceiling{Unit: UnitGBps, Size: units.Size(n, " "), Method: "read_stream kernel (NVRTC), 16-byte loads, read bytes"}
	ctx, _ := gpu.CUDAOf(dev)
	cs, _ := gpu.CUDAStreamOf(s)
	comp, err := ctx.Compiler()
	if err != nil {
		return unmeasured(c.Unit, c.Size, c.Method, "compiling read.cu: %v", err)
	}
	mod, _, err := ctx.CompileModule(comp, readSource, "read.cu", nil)
	if err != nil {
		return unmeasured(c.Unit, c.Size, c.Method, "compiling read.cu: %v", err)
	}
	defer mod.Unload()
	fn, err := mod.Function("read_stream")
	if err != nil {
		return unmeasured(c.Unit, c.Size, c.Method, "%v", err)
	}
	perSM, err := fn.MaxActiveBlocksPerSM(readThreads, 0)
	if err != nil || perSM < 1 {
		perSM = 1
	}
	blocks := perSM * max(dev.Info().SMs, 1)
	c.Method += fmt.Sprintf(", %d blocks of %d", blocks, readThreads)
	buf, err := dev.Alloc(n)
	if err != nil {
		return unmeasured(c.Unit, c.Size, c.Method, "allocating %s: %v", units.Size(n, " "), err)
	}
	defer buf.Free()
	sum, err := dev.Alloc(8)
	if err != nil {
		return unmeasured(c.Unit, c.Size, c.Method, "%v", err)
	}
	defer sum.Free()
	if err := s.Memset(buf, 0, n, 0x5a); err != nil {
		return unmeasured(c.Unit, c.Size, c.Method, "%v", err)
	}
	p, _ := gpu.CUDAPtrOf(buf)
	out, _ := gpu.CUDAPtrOf(sum)
	read := func() error {
		return fn.Launch(cs, cuda.Dim3{X: blocks}, cuda.Dim3{X: readThreads}, 0, p, uint64(n/16), out)
	}
	sec, err := bench.Time(s, t, read)
	if err == nil {
		sec, err = bench.Rates(sec, float64(n/16*16), 1e9)
	}
	return finish(c, sec, err)
}
