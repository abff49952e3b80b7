// Package ceilings is the bench ceilings suite: the device's copy, host
// transfer and bf16 GEMM rates (on the CPU: memcpy and the bf16
// multiply-add peak) that other suites report percentages of.
package ceilings

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/mstar-dev/mstar/bench"
	"github.com/mstar-dev/mstar/internal/cpupeak"
	"github.com/mstar-dev/mstar/internal/units"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/gpu/cuda"
	"github.com/mstar-dev/mstar/reports/results"
)

// Units of the ceilings. Every ceiling of a kind has the same unit on every
// backend (the CPU's GEMM rate is a small number of TFLOP/s), so a suite
// divides its own rate by Value without asking which backend measured it.
const (
	UnitGBps   = "GB/s"
	UnitTFLOPs = "TFLOP/s"
)

// Ceiling is one measured hardware limit. Value is the median of Samples.
// A ceiling that could not be measured has Unmeasured set to the reason and
// no samples; its Value is 0 and must not be used: unmeasured is not zero.
type Ceiling struct {
	Value      float64
	Unit       string
	Samples    []float64
	Unmeasured string
	Size       string // what was moved or multiplied: "1 GiB", "8192"
	Method     string // how, in a few words
	// State is the machine's while the samples ran: the GPU's (nil on the
	// CPU) and how busy the host was.
	State bench.MachineState
}

// Measured reports whether the ceiling has a value.
func (c Ceiling) Measured() bool { return c.Unmeasured == "" && len(c.Samples) > 0 && c.Value > 0 }

// Fraction returns v / Value (v in the ceiling's unit); ok is false when the
// ceiling is unmeasured.
func (c Ceiling) Fraction(v float64) (f float64, ok bool) {
	if !c.Measured() {
		return 0, false
	}
	return v / c.Value, true
}

// Ceilings are a device's measured limits.
type Ceilings struct {
	Device  string      // "cuda:0", "cpu"
	Backend gpu.Backend //
	Name    string      // the device's name ("NVIDIA H200", the CPU model); "" when unknown
	D2D     Ceiling     // device memory copy, GB/s counting bytes read + written
	Read    Ceiling     // streaming read of device memory, GB/s of bytes read: what bounds weight streaming
	H2D     Ceiling     // page-locked host to device, GB/s
	D2H     Ceiling     // device to page-locked host, GB/s
	GEMM    Ceiling     // dense matrix multiply, TFLOP/s (bf16 cuBLAS; the float32 FMA peak on the CPU)
	// StateNote says why the GPU's state was not sampled ("" when it was,
	// or on the CPU).
	StateNote string
}

// CeilingOptions say how long to measure. Zero sizes pick defaults for the
// backend (see MeasureCeilings).
type CeilingOptions struct {
	Quick   bool // smaller buffers and fewer samples, for suites that report % of ceiling
	Samples int  // samples per ceiling; 0: 20 (CUDA) or 10 (CPU), 6 when Quick (the fewest with a 95% CI)

	CopyBytes int64 // D2D buffer size
	ReadBytes int64 // read buffer size (0: at least 4× the L2 or last-level cache)
	HostBytes int64 // H2D and D2H transfer size
	GEMMSize  int   // square GEMM dimension

	// Progress, when set, is told which ceiling is being measured.
	Progress func(what string)
	// Sink gets each ceiling's result as soon as it is measured.
	Sink results.Sink
}

// sizesFor is the default buffer and GEMM sizes. Quick on CUDA shrinks
// the host copies only: a device pass over 256 MiB is short enough (~60 µs
// on an H200) that each launch's start and drain show, and the quick read
// ceiling came out 7–8% under the full one on the same H200 (4230–4257
// against 4498–4595 GB/s, 2026-12-03), so % of floor read up to 102%. The
// device passes cost milliseconds at 1 GiB either way.
func sizesFor(onGPU, quick bool, l2 int64) CeilingOptions {
	switch {
	case onGPU && quick:
		return CeilingOptions{CopyBytes: 1 << 30, ReadBytes: max(1<<30, 4*l2), HostBytes: 64 << 20, GEMMSize: 8192}
	case onGPU:
		return CeilingOptions{CopyBytes: 1 << 30, ReadBytes: max(1<<30, 4*l2), HostBytes: 256 << 20, GEMMSize: 8192}
	case quick:
		return CeilingOptions{CopyBytes: 32 << 20, ReadBytes: max(256<<20, 4*l2), HostBytes: 32 << 20, GEMMSize: 256}
	}
	return CeilingOptions{CopyBytes: 256 << 20, ReadBytes: max(256<<20, 4*l2), HostBytes: 256 << 20, GEMMSize: 512}
}

// MeasureCeilings measures dev's copy bandwidths and GEMM rate.
//
// Read is a read-only pass over a buffer of at least 4× the device's L2
// (the CPU's last-level cache), 1 GiB at least on CUDA (Quick too: see
// sizesFor) and 256 MiB on the CPU: on CUDA a grid-stride kernel of 16-byte
// loads (read.cu), on the CPU a vector load loop on every core. It bounds
// work that streams memory in (MoE weights); a copy, which also writes,
// does not: on an H200 weight streaming beats the copy ceiling by 7%.
//
// On CUDA: D2D is cuMemcpyDtoDAsync of a 1 GiB buffer (Quick too),
// counted as bytes read plus written; H2D and D2H copy 256 MiB (64 MiB) to
// and from cuMemHostAlloc'd memory; GEMM is cuBLAS bf16 × bf16 → bf16 with
// fp32 accumulation at 8192³ on random data (zeros run faster and would
// overstate the ceiling). All are timed with CUDA events.
//
// On the CPU backend: D2D copies a 256 MiB buffer (32 MiB) on every core,
// read plus written; H2D and D2H are one stream's copy (memcpy), as the
// transport sees it; GEMM is the float32 FMA peak on every core (AVX2), or
// gonum's float64 Dgemm at 512³ (256³) on CPUs without a peak kernel.
//
// A ceiling that fails (no cuBLAS, too little memory) is Unmeasured with
// the reason; only a device that cannot run anything returns an error. A
// canceled ctx stops it between ceilings: it returns the ceilings measured
// so far, the others Unmeasured, and ctx's error.
func MeasureCeilings(ctx context.Context, dev gpu.Device, opt CeilingOptions) (*Ceilings, error) {
	info := dev.Info()
	onGPU := info.Backend == gpu.CUDA
	if opt.Samples < 0 {
		return nil, fmt.Errorf("ceilings: %d samples", opt.Samples)
	}
	if opt.Samples == 0 {
		switch {
		case opt.Quick:
			opt.Samples = 6
		case onGPU:
			opt.Samples = 20
		default:
			opt.Samples = 10
		}
	}
	l2 := info.L2Bytes
	if !onGPU {
		l2 = gpu.HostLastLevelCache()
	}
	def := sizesFor(onGPU, opt.Quick, l2)
	opt.CopyBytes = cmp.Or(opt.CopyBytes, def.CopyBytes)
	opt.ReadBytes = cmp.Or(opt.ReadBytes, def.ReadBytes)
	opt.HostBytes = cmp.Or(opt.HostBytes, def.HostBytes)
	opt.GEMMSize = cmp.Or(opt.GEMMSize, def.GEMMSize)
	progress := func(s string) {
		if opt.Progress != nil {
			opt.Progress(s)
		}
	}

	s, err := dev.NewStream()
	if err != nil {
		return nil, fmt.Errorf("ceilings on %s: %w", info.ID, err)
	}
	defer s.Close()
	c := &Ceilings{Device: info.ID, Backend: info.Backend}
	// Enough repetitions per sample that each sample runs for about a
	// millisecond or more on the device.
	copyReps, hostReps := 5, 2
	if !onGPU {
		copyReps, hostReps = 1, 1
	}
	settle := &quickSettle
	if onGPU {
		settle = &gpuSettle
	}
	sampler, stateNote := bench.NewStateSampler(dev)
	defer sampler.Close()
	c.StateNote = stateNote
	// sampled runs one ceiling's measurement while sampling the GPU.
	sampled := func(measure func() Ceiling) Ceiling {
		sampler.Start()
		ce := measure()
		ce.State = sampler.Stop()
		return ce
	}
	const notYet = "interrupted before it was measured"
	c.D2D = unmeasured(UnitGBps, "", "", notYet)
	c.H2D, c.D2H, c.Read = c.D2D, c.D2D, c.D2D
	c.GEMM = unmeasured(UnitTFLOPs, "", "", notYet)
	if err := ctx.Err(); err != nil {
		return c, err
	}
	progress("d2d")
	c.D2D = sampled(func() Ceiling {
		return measureD2D(dev, s, opt.CopyBytes, bench.Timing{Warmup: 2, Samples: opt.Samples, Reps: copyReps, Settle: settle, Ctx: ctx})
	})
	opt.Sink.Send(c.Result("d2d"))
	if err := ctx.Err(); err != nil {
		return c, err
	}
	progress("read")
	if onGPU {
		c.Read = sampled(func() Ceiling {
			return measureReadCUDA(dev, s, opt.ReadBytes, bench.Timing{Warmup: 2, Samples: opt.Samples, Reps: 10, Settle: settle, Ctx: ctx})
		})
	} else {
		c.Read = sampled(func() Ceiling {
			return measureReadCPU(opt.ReadBytes, bench.Timing{Warmup: 1, Samples: opt.Samples, Reps: 1, Settle: settle, Ctx: ctx})
		})
	}
	opt.Sink.Send(c.Result("read"))
	if err := ctx.Err(); err != nil {
		return c, err
	}
	progress("h2d")
	sampler.Start()
	c.H2D, c.D2H = measureHost(dev, s, opt.HostBytes, bench.Timing{Warmup: 2, Samples: opt.Samples, Reps: hostReps, Settle: settle}, progress)
	c.H2D.State = sampler.Stop()
	c.D2H.State = c.H2D.State
	opt.Sink.Send(c.Result("h2d"), c.Result("d2h"))
	if err := ctx.Err(); err != nil {
		return c, err
	}
	progress("gemm")
	if onGPU {
		c.GEMM = sampled(func() Ceiling {
			return measureGEMMCUDA(dev, s, opt.GEMMSize, bench.Timing{Warmup: 30, Samples: opt.Samples, Reps: 5, Settle: settle, Ctx: ctx})
		})
	} else {
		c.GEMM = sampled(func() Ceiling {
			return measureGEMMCPU(opt.GEMMSize, bench.Timing{Warmup: 1, Samples: opt.Samples, Reps: 1, Ctx: ctx})
		})
	}
	opt.Sink.Send(c.Result("gemm"))
	return c, ctx.Err()
}

// The ceilings' warm-ups: the quick ones ran 1.3 → 7.7 GB/s (H2D, CPU)
// over their first samples with a fixed warm-up of two calls.
var (
	quickSettle = bench.Settle{MinTime: 100 * time.Millisecond, MaxTime: 3 * time.Second}
	gpuSettle   = bench.Settle{MinTime: 100 * time.Millisecond, MaxTime: 5 * time.Second}
)

// measureReadCPU reads an n-byte buffer on every core at once
// (cpupeak.MeasureRead), each core its own contiguous share.
func measureReadCPU(n int64, t bench.Timing) Ceiling {
	threads := runtime.GOMAXPROCS(0)
	c := Ceiling{Unit: UnitGBps, Size: units.Size(n, " "), Method: fmt.Sprintf("read loop (%s) on %d threads, read bytes", cpupeak.ReadMethod(), threads)}
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = byte(i) | 1 // every page touched, no zero page shared
	}
	var keep uint64
	sec, err := bench.TimeWall(t, func() error {
		_, sum := cpupeak.MeasureRead(buf, threads)
		keep += sum
		return nil
	})
	if err == nil {
		sec, err = bench.Rates(sec, float64(n), 1e9)
	}
	c = finish(c, sec, err)
	if keep == 0 && err == nil {
		c = unmeasured(c.Unit, c.Size, c.Method, "the read loop summed to zero over non-zero bytes: it did not read them")
	}
	return c
}

// Stream is the ceiling that bounds streaming memory in: the read ceiling
// where it was measured, else the copy ceiling, with a note saying that
// the copy is not an upper bound for reads ("" when Read is used).
func (c *Ceilings) Stream() (ce Ceiling, name, note string) {
	if c == nil {
		return Ceiling{Unmeasured: "no ceilings"}, "read", ""
	}
	if c.Read.Measured() {
		return c.Read, "read", ""
	}
	why := c.Read.Unmeasured
	if why == "" {
		why = "no samples"
	}
	return c.D2D, "d2d", "read ceiling unmeasured (" + why + "): bandwidth percentages use the d2d copy ceiling, which reads can beat"
}

func unmeasured(unit, size, method, format string, a ...any) Ceiling {
	return Ceiling{Unit: unit, Size: size, Method: method, Unmeasured: fmt.Sprintf(format, a...)}
}

func finish(c Ceiling, samples []float64, err error) Ceiling {
	if errors.Is(err, context.Canceled) {
		c.Unmeasured = "interrupted while it was measured"
		return c
	}
	if err != nil {
		c.Unmeasured = err.Error()
		return c
	}
	c.Samples = samples
	c.Value = results.Median(samples)
	return c
}

func measureD2D(dev gpu.Device, s gpu.Stream, n int64, t bench.Timing) Ceiling {
	onGPU := dev.Info().Backend == gpu.CUDA
	method := "cuMemcpyDtoDAsync, read+write bytes"
	workers := 1
	if !onGPU {
		workers = runtime.GOMAXPROCS(0)
		method = fmt.Sprintf("copy on %d threads, read+write bytes", workers)
	}
	c := Ceiling{Unit: UnitGBps, Size: units.Size(n, " "), Method: method}
	src, err := dev.Alloc(n)
	if err != nil {
		return unmeasured(c.Unit, c.Size, c.Method, "allocating the source: %v", err)
	}
	defer src.Free()
	dst, err := dev.Alloc(n)
	if err != nil {
		return unmeasured(c.Unit, c.Size, c.Method, "allocating the destination: %v", err)
	}
	defer dst.Free()
	if err := s.Memset(src, 0, n, 0x5a); err != nil {
		return unmeasured(c.Unit, c.Size, c.Method, "%v", err)
	}
	copyAll := func() error { return s.CopyDtoD(dst, 0, src, 0, n) }
	if workers > 1 {
		// The CPU backend copies synchronously: split the buffer so every
		// core moves its share, as a memory-bound kernel on the CPU would.
		copyAll = func() error {
			var wg sync.WaitGroup
			errs := make([]error, workers)
			chunk := (n + int64(workers) - 1) / int64(workers)
			for w := 0; w < workers; w++ {
				off := int64(w) * chunk
				m := min(chunk, n-off)
				if m <= 0 {
					break
				}
				wg.Add(1)
				go func(w int, off, m int64) {
					defer wg.Done()
					errs[w] = s.CopyDtoD(dst, off, src, off, m)
				}(w, off, m)
			}
			wg.Wait()
			return errors.Join(errs...)
		}
	}
	sec, err := bench.Time(s, t, copyAll)
	if err == nil {
		sec, err = bench.Rates(sec, float64(2*n), 1e9)
	}
	return finish(c, sec, err)
}

func measureHost(dev gpu.Device, s gpu.Stream, n int64, t bench.Timing, progress func(string)) (h2d, d2h Ceiling) {
	method := "cuMemHostAlloc'd memory, cuMemcpy*Async"
	if dev.Info().Backend != gpu.CUDA {
		method = "one stream's copy (memcpy)"
	}
	h2d = Ceiling{Unit: UnitGBps, Size: units.Size(n, " "), Method: method}
	d2h = h2d
	fail := func(format string, a ...any) (Ceiling, Ceiling) {
		why := fmt.Sprintf(format, a...)
		h2d.Unmeasured, d2h.Unmeasured = why, why
		return h2d, d2h
	}
	host, free, err := dev.AllocPinned(n)
	if err != nil {
		return fail("allocating %s of pinned host memory: %v", units.Size(n, " "), err)
	}
	defer free()
	for i := 0; i < len(host); i += 4096 {
		host[i] = byte(i >> 12) // touch every page before timing
	}
	buf, err := dev.Alloc(n)
	if err != nil {
		return fail("allocating the device buffer: %v", err)
	}
	defer buf.Free()
	sec, err := bench.Time(s, t, func() error { return s.CopyHtoD(buf, 0, host) })
	if err == nil {
		sec, err = bench.Rates(sec, float64(n), 1e9)
	}
	h2d = finish(h2d, sec, err)
	progress("d2h")
	sec, err = bench.Time(s, t, func() error { return s.CopyDtoH(host, buf, 0) })
	if err == nil {
		sec, err = bench.Rates(sec, float64(n), 1e9)
	}
	d2h = finish(d2h, sec, err)
	return h2d, d2h
}

// normalBF16 fills b with bf16 bit patterns of standard normal values.
func normalBF16(b []uint16, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = uint16(math.Float32bits(float32(r.NormFloat64())) >> 16)
	}
}

// randomBF16 fills b with bf16 bit patterns of uniform values in [-1, 1).
func randomBF16(b []uint16, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		f := float32(r.Float64()*2 - 1)
		b[i] = uint16(math.Float32bits(f) >> 16)
	}
}

// gemmVariant is how the GEMM ceiling is run; the default is what
// MeasureCeilings uses, the others exist for the GPU test that compares them.
type gemmVariant struct {
	outType   int    // cuda.DataBF16 or cuda.DataF32
	workspace int64  // bytes of cuBLAS workspace to set; 0: cuBLAS's own
	fill      string // "uniform", "normal" or "zero"
}

var defaultGEMM = gemmVariant{outType: cuda.DataBF16, fill: "uniform"}

func measureGEMMCUDA(dev gpu.Device, s gpu.Stream, n int, t bench.Timing) Ceiling {
	return measureGEMMCUDAWith(dev, s, n, t, defaultGEMM)
}

func measureGEMMCUDAWith(dev gpu.Device, s gpu.Stream, n int, t bench.Timing, v gemmVariant) Ceiling {
	size := strconv.Itoa(n)
	method := "cublasGemmEx bf16 in/out, fp32 compute, random data"
	ctx, _ := gpu.CUDAOf(dev)
	cs, _ := gpu.CUDAStreamOf(s)
	blasH, err := ctx.NewBLAS()
	if err != nil {
		return unmeasured(UnitTFLOPs, size, method, "cuBLAS unavailable: %v", err)
	}
	defer blasH.Destroy()
	if err := blasH.SetStream(cs); err != nil {
		return unmeasured(UnitTFLOPs, size, method, "%v", err)
	}
	if v.workspace > 0 {
		ws, err := dev.Alloc(v.workspace)
		if err != nil {
			return unmeasured(UnitTFLOPs, size, method, "allocating the cuBLAS workspace: %v", err)
		}
		defer ws.Free()
		p, _ := gpu.CUDAPtrOf(ws)
		if err := blasH.SetWorkspace(p, v.workspace); err != nil {
			return unmeasured(UnitTFLOPs, size, method, "%v", err)
		}
	}
	elems := int64(n) * int64(n)
	outBytes := elems * 2
	if v.outType == cuda.DataF32 {
		outBytes = elems * 4
	}
	var bufs [3]gpu.Buffer
	for i, nb := range []int64{elems * 2, elems * 2, outBytes} {
		b, err := dev.Alloc(nb)
		if err != nil {
			return unmeasured(UnitTFLOPs, size, method, "allocating %s for a %d³ GEMM: %v", units.Bytes(4*elems+outBytes), n, err)
		}
		defer b.Free()
		bufs[i] = b
	}
	// Random operands: an 8 MiB random tile per matrix, copied over it.
	// Zeros would run faster than real data and overstate the ceiling.
	bytes := elems * 2
	tile := make([]uint16, min(int64(4<<20), elems))
	tileBytes := unsafe.Slice((*byte)(unsafe.Pointer(&tile[0])), 2*len(tile))
	for m := 0; m < 2; m++ {
		switch v.fill {
		case "zero":
			clear(tile)
		case "normal":
			normalBF16(tile, uint64(m+1))
		default:
			randomBF16(tile, uint64(m+1))
		}
		if err := s.CopyHtoD(bufs[m], 0, tileBytes); err != nil {
			return unmeasured(UnitTFLOPs, size, method, "%v", err)
		}
		for off := int64(len(tileBytes)); off < bytes; off += int64(len(tileBytes)) {
			if err := s.CopyDtoD(bufs[m], off, bufs[m], 0, min(int64(len(tileBytes)), bytes-off)); err != nil {
				return unmeasured(UnitTFLOPs, size, method, "%v", err)
			}
		}
		if err := s.Sync(); err != nil { // tile is reused: the copy must be done
			return unmeasured(UnitTFLOPs, size, method, "%v", err)
		}
	}
	pa, _ := gpu.CUDAPtrOf(bufs[0])
	pb, _ := gpu.CUDAPtrOf(bufs[1])
	pc, _ := gpu.CUDAPtrOf(bufs[2])
	gemm := func() error {
		return blasH.GemmEx(cuda.OpN, cuda.OpN, n, n, n, 1, pa, cuda.DataBF16, n, pb, cuda.DataBF16, n, 0, pc, v.outType, n)
	}
	sec, err := bench.Time(s, t, gemm)
	if err == nil {
		sec, err = bench.Rates(sec, 2*math.Pow(float64(n), 3), 1e12)
	}
	return finish(Ceiling{Unit: UnitTFLOPs, Size: size, Method: method}, sec, err)
}

// cpuPeak reports whether the CPU has a peak kernel (a variable: tests take
// the fallback too).
var cpuPeak = cpupeak.Available

// measureGEMMCPU is the CPU's compute ceiling: its float32 FMA peak where
// the CPU has a peak kernel (cpupeak), else gonum's float64 Dgemm at n³.
// The CPU path's own AVX2 kernels outrun gonum, so gonum is only the
// fallback: a ceiling the layer beats says nothing.
func measureGEMMCPU(n int, t bench.Timing) Ceiling {
	if cpuPeak() {
		threads := runtime.GOMAXPROCS(0)
		c := Ceiling{Unit: UnitTFLOPs, Size: "registers", Method: fmt.Sprintf("%s, %d threads", cpupeak.Method(), threads)}
		var rate []float64
		for s := -max(t.Warmup, 0); s < t.Samples; s++ {
			flops, d := cpupeak.Measure(threads, 10_000_000)
			if s >= 0 {
				rate = append(rate, flops/d.Seconds()/1e12)
			}
		}
		return finish(c, rate, nil)
	}
	c := Ceiling{Unit: UnitTFLOPs, Size: strconv.Itoa(n), Method: fmt.Sprintf("gonum Dgemm float64, %d threads", runtime.GOMAXPROCS(0))}
	mk := func(seed uint64) blas64.General {
		r := rand.New(rand.NewPCG(seed, 7))
		m := blas64.General{Rows: n, Cols: n, Stride: n, Data: make([]float64, n*n)}
		for i := range m.Data {
			m.Data[i] = r.Float64()*2 - 1
		}
		return m
	}
	a, b, out := mk(1), mk(2), mk(3)
	sec, err := bench.TimeWall(t, func() error {
		blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, a, b, 0, out)
		return nil
	})
	if err == nil {
		sec, err = bench.Rates(sec, 2*math.Pow(float64(n), 3), 1e12)
	}
	return finish(c, sec, err)
}

// ceilingKinds are the result "what" parameters, in order.
var ceilingKinds = []string{"d2d", "read", "h2d", "d2h", "gemm"}

func (c *Ceilings) byKind(kind string) *Ceiling {
	switch kind {
	case "d2d":
		return &c.D2D
	case "read":
		return &c.Read
	case "h2d":
		return &c.H2D
	case "d2h":
		return &c.D2H
	case "gemm":
		return &c.GEMM
	}
	return nil
}

// CeilingResult is the result name of every ceiling in a results document.
const CeilingResult = "ceiling"

// Results turns the ceilings into result rows: name "ceiling", parameters
// what (d2d, read, h2d, d2h, gemm), size and method, and one metric with every
// sample ("bandwidth" in GB/s or "throughput" in TFLOP/s), or the reason it
// is unmeasured.
func (c *Ceilings) Results() []results.Result {
	var out []results.Result
	for _, k := range ceilingKinds {
		out = append(out, c.Result(k))
	}
	return out
}

// Result is one kind's ceiling ("d2d", "h2d", "d2h", "gemm") as a result.
func (c *Ceilings) Result(kind string) results.Result {
	ce := c.byKind(kind)
	name := "bandwidth"
	if ce.Unit == UnitTFLOPs {
		name = "throughput"
	}
	m := results.Metric{Name: name, Unit: ce.Unit, Better: results.HigherIsBetter, Samples: append([]float64(nil), ce.Samples...)}
	if !ce.Measured() {
		m.Samples = nil
		m.Unmeasured = ce.Unmeasured
		if m.Unmeasured == "" {
			m.Unmeasured = "no samples"
		}
	}
	// A ceiling bounds the code under test; it is not the code under test.
	return results.Result{
		Name:      CeilingResult,
		Role:      results.RoleContext,
		Params:    results.Params{"what": kind, "size": ce.Size, "method": ce.Method},
		Metrics:   []results.Metric{m},
		GPUState:  ce.State.GPU,
		HostState: ce.State.Host,
	}
}

// Document is c as the results document CeilingsFrom reads back (what
// `mstar bench ceilings --out` writes, less the host's environment): for a
// child process given --ceilings FILE.
func (c *Ceilings) Document() *results.Document {
	env := results.Env{"device": c.Device, "backend": string(c.Backend)}
	if c.Backend == gpu.CPU {
		env["cpu"] = c.Name
	} else {
		env["gpu"] = c.Name
	}
	return &results.Document{Format: results.Format, Schema: results.SchemaVersion, Suite: "bench ceilings", Env: env, Results: c.Results()}
}

// CeilingsFrom reads ceilings back from a results document's "ceiling"
// rows (as `mstar bench ceilings --out` writes them), for suites given
// --ceilings FILE. Kinds the document lacks are Unmeasured, saying so.
func CeilingsFrom(d *results.Document) (*Ceilings, error) {
	c := &Ceilings{Device: d.Env["device"], Backend: gpu.Backend(d.Env["backend"]), Name: d.Env["gpu"]}
	if c.Backend == gpu.CPU {
		c.Name = d.Env["cpu"]
	}
	found := 0
	seen := map[string]bool{}
	for _, k := range ceilingKinds {
		ce := c.byKind(k)
		ce.Unmeasured = fmt.Sprintf("no %s ceiling in the document", k)
	}
	for _, r := range d.Results {
		if r.Name != CeilingResult {
			continue
		}
		ce := c.byKind(r.Params["what"])
		if ce == nil || len(r.Metrics) != 1 {
			return nil, fmt.Errorf("ceiling result %q: want what=d2d|read|h2d|d2h|gemm and one metric", r.Key())
		}
		if seen[r.Params["what"]] {
			// A merged document: which machine's ceiling would be meant?
			return nil, fmt.Errorf("two %s ceilings in one document: give the ceilings of one device", r.Params["what"])
		}
		seen[r.Params["what"]] = true
		m := r.Metrics[0]
		*ce = Ceiling{Unit: m.Unit, Size: r.Params["size"], Method: r.Params["method"], Unmeasured: m.Unmeasured, State: bench.MachineState{GPU: r.GPUState, Host: r.HostState}}
		want := UnitGBps
		if r.Params["what"] == "gemm" {
			want = UnitTFLOPs
		}
		if m.Unit != want {
			return nil, fmt.Errorf("ceiling result %q: unit %q, want %q", r.Key(), m.Unit, want)
		}
		if m.Measured() {
			ce.Samples = append([]float64(nil), m.Samples...)
			ce.Value = results.Median(ce.Samples)
		} else if ce.Unmeasured == "" {
			ce.Unmeasured = "no samples"
		}
		found++
	}
	if found == 0 {
		return nil, errors.New("no ceiling results in the document (write one with 'mstar bench ceilings --out FILE')")
	}
	return c, nil
}

// Matches says whether ceilings measured on one device may stand for
// another: the same backend and, where both are named, the same device name.
// Percentages against another machine's ceilings would mislead.
func (c *Ceilings) Matches(info gpu.Info) error {
	if c.Backend != "" && c.Backend != info.Backend {
		return fmt.Errorf("ceilings of a %s device (%s), but this run is on %s (%s)", c.Backend, c.Name, info.Backend, info.Name)
	}
	if c.Name != "" && info.Name != "" && c.Name != info.Name {
		return fmt.Errorf("ceilings of %q, but this run is on %q", c.Name, info.Name)
	}
	return nil
}

// ReadCeilings reads ceilings from a results document file.
func ReadCeilings(path string) (*Ceilings, error) {
	d, err := results.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := CeilingsFrom(d)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// OverCeilingPct is the harness's bench.OverCeilingPct.
const OverCeilingPct = bench.OverCeilingPct

// OverCeilingMark is in every OverCeiling warning and in no other, for
// suites that pick them out (a percentage "of the" something is not enough:
// the busy-host note has one).
const OverCeilingMark = "that ceiling is not an upper bound for this work"

// OverCeiling returns the warning for a percentage pct (of ceiling ce,
// named what) above OverCeilingPct, or "" when there is none.
func OverCeiling(figure string, pct float64, what string, ce Ceiling) string {
	if math.IsNaN(pct) || pct <= OverCeilingPct {
		return ""
	}
	w := fmt.Sprintf("%s %.1f%% of the %s ceiling (%s %s, %s, %s) is above %d%%: that ceiling is not an upper bound for this work",
		figure, pct, what, results.FormatValue(ce.Value), ce.Unit, ce.Size, ce.Method, OverCeilingPct)
	if h := ce.State.Host; h != nil && h.Busy {
		// The likely reason: the host took the ceiling's CPU time.
		w += fmt.Sprintf(" (it was measured on a busy host: %.0f%% steal, %.0f%% other processes)", h.StealPct, h.OtherPct)
	}
	return w
}
