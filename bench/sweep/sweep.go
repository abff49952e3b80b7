// Package sweep measures host<->device copy bandwidth and latency over
// tensor sizes for the kinds of host memory an arena can stage through, and
// the arena's transport against the per-tensor-file transport it replaces.
// It is the suite of `mstar arena sweep`.
//
// Copy mode (a device): for each size, D2H, H2D and both at once (two
// streams), from and to pageable Go memory, a pageable /dev/shm mapping, a
// registered arena segment and cuMemHostAlloc pinned memory, timed with
// device events; plus the cost of registering a fresh segment per size.
// Rates are reported as a fraction of pinned memory at the same size, of
// the best pinned rate of the run (the ceiling), and of the PCIe link's
// theoretical rate when it is known.
//
// Transport mode (any machine): for each size, a producer and a consumer
// goroutine move tensors through an arena (memcpy into a slot, descriptor
// over a Unix socket, memcpy out, ACK) and through per-tensor files, next
// to a single-thread memcpy of the same bytes.
//
// Every timed copy is verified: destinations are poisoned before each sample and
// compared with the source after it; #wrong counts the copies that differ.
package sweep

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/mstar-dev/mstar/arena"
	"github.com/mstar-dev/mstar/bench"
	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/internal/envinfo"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/gpu/nvmlinfo"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
)

// Mode selects what a sweep measures.
type Mode string

const (
	ModeCopy      Mode = "copy"      // host<->device copies per memory kind
	ModeTransport Mode = "transport" // arena vs per-tensor files vs memcpy
	ModeAll       Mode = "all"
)

// Options configures a sweep.
type Options struct {
	Device  gpu.Device // copies run on it; nil: the CPU backend
	Mode    Mode       // default: all on CUDA, transport on the CPU
	MinSize int64      // default 4 KiB
	MaxSize int64      // default 1 GiB
	Factor  int64      // size step, default 4 (4 KiB, 16 KiB, ... 1 GiB)
	Samples int        // per point, default 10
	Warmup  int        // untimed samples first, default 1
	Dir     string     // for segments and files, default /dev/shm
	// SampleBytes is how many bytes a sample moves at small sizes (a sample
	// of small copies repeats them); default 64 MiB.
	SampleBytes int64
	// Tensors is how many tensors a transport sample moves; 0 picks by size
	// (transportCount).
	Tensors int
	// window (tests): tensors in flight; 0 is about 32 MiB's worth.
	window int
	// putHook (tests), when set, hears each tensor a transport sample puts.
	putHook func(tr arena.Transport, i int)
	// PCIeGBps is the link's theoretical one-direction rate, 0 if unknown;
	// PCIeNote says where it came from or why it is unknown.
	PCIeGBps float64
	PCIeNote string
	// Progress, if set, is told what is being measured.
	Progress func(step string)
	// Sink gets each result once it is finished.
	Sink results.Sink
	// Only, when not nil, is the part of Cells to run (a --shard's).
	Only []Cell
}

// Parts of a sweep, each a cell per size.
const (
	PartCopy      = "copy"      // every memory kind and direction at one size
	PartRegister  = "register"  // page-locking a fresh segment of one size
	PartTransport = "transport" // every transport at one size
)

// Cell is one point of a sweep that runs alone: one part at one size. A
// cell keeps what its percentages are of (pinned memory, memcpy at the
// same size) inside it; the copy mode's %ceil is of the best pinned rate
// among the cells that ran.
type Cell struct {
	Part string
	Size int64
}

// Name is "part/size=N".
func (c Cell) Name() string { return c.Part + "/size=" + sizeParam(c.Size) }

// Cells lists the sweep's cells in the order it runs them.
func (o Options) Cells() ([]Cell, error) {
	if err := o.defaults(); err != nil {
		return nil, badinput.Wrap(err)
	}
	var parts []string
	if o.Mode == ModeCopy || o.Mode == ModeAll {
		parts = append(parts, PartCopy, PartRegister)
	}
	if o.Mode == ModeTransport || o.Mode == ModeAll {
		parts = append(parts, PartTransport)
	}
	var out []Cell
	for _, p := range parts {
		for _, s := range o.Sizes() {
			out = append(out, Cell{p, s})
		}
	}
	return out, nil
}

// runs reports whether the cell of part at size runs: every cell, or
// those of Only.
func (o Options) runs(part string, size int64) bool {
	return o.Only == nil || slices.Contains(o.Only, Cell{part, size})
}

// sizesOf is the sizes of part that run.
func (o Options) sizesOf(part string) []int64 {
	var out []int64
	for _, s := range o.Sizes() {
		if o.runs(part, s) {
			out = append(out, s)
		}
	}
	return out
}

// Outcome is a sweep's results and run-level warnings.
type Outcome struct {
	Results  []results.Result
	Warnings []string
}

// Metric names.
const (
	MetricTime        = "time"
	MetricBandwidth   = "bandwidth"
	MetricPctPinned   = "pct_pinned"
	MetricPctCeiling  = "pct_ceiling"
	MetricPctPCIe     = "pct_pcie"
	MetricWrong       = "wrong"
	MetricTensorsPerS = "tensors_per_s"
	MetricPctMemcpy   = "pct_memcpy"
	MetricVsFile      = "vs_file"
	MetricSpills      = "spills"
	MetricRegister    = "register"
	MetricUnregister  = "unregister"
	MetricRegPerGiB   = "register_per_gib"
	MetricCount       = "count" // copies or tensors per sample: fixed by the size, kept out of the parameters so results of one kind pair across sizes
)

// Memory kinds of the copy mode.
const (
	MemPageable = "pageable" // Go heap
	MemShm      = "shm"      // a /dev/shm mapping, not registered
	MemArena    = "arena"    // a slot of a registered arena segment
	MemPinned   = "pinned"   // cuMemHostAlloc
)

// Memory lists the memory kinds in table order.
var Memory = []string{MemPageable, MemShm, MemArena, MemPinned}

// Directions of the copy mode.
const (
	DirD2H  = "d2h"
	DirH2D  = "h2d"
	DirBoth = "both"
)

// Directions lists them in table order.
var Directions = []string{DirD2H, DirH2D, DirBoth}

func (o *Options) defaults() error {
	if o.Device == nil {
		o.Device = gpu.NewCPU()
	}
	if o.Mode == "" {
		o.Mode = ModeTransport
		if o.Device.Info().Backend == gpu.CUDA {
			o.Mode = ModeAll
		}
	}
	switch o.Mode {
	case ModeCopy, ModeTransport, ModeAll:
	default:
		return fmt.Errorf("sweep: mode %q: want copy, transport or all", o.Mode)
	}
	if o.MinSize == 0 {
		o.MinSize = 4 << 10
	}
	if o.MaxSize == 0 {
		o.MaxSize = 1 << 30
	}
	if o.Factor == 0 {
		o.Factor = 4
	}
	if o.Samples == 0 {
		o.Samples = 10
	}
	if o.Warmup == 0 {
		o.Warmup = 1
	}
	if o.Warmup < 0 {
		o.Warmup = 0
	}
	if o.Dir == "" {
		o.Dir = arena.DefaultDir
	}
	if o.SampleBytes == 0 {
		o.SampleBytes = 64 << 20
	}
	switch {
	case o.MinSize < 16:
		return fmt.Errorf("sweep: min size %d: want at least 16 bytes", o.MinSize)
	case o.MaxSize < o.MinSize:
		return fmt.Errorf("sweep: max size %d is below min size %d", o.MaxSize, o.MinSize)
	case o.Factor < 2:
		return fmt.Errorf("sweep: size factor %d: want at least 2", o.Factor)
	case o.Samples < 1:
		return fmt.Errorf("sweep: %d samples: want at least 1", o.Samples)
	case o.Tensors < 0:
		return fmt.Errorf("sweep: %d tensors per sample: want at least 1 (or 0 for the default)", o.Tensors)
	case o.Tensors > 0 && int64(o.Tensors) > (4<<30)/o.MaxSize:
		return fmt.Errorf("sweep: %d tensors per sample of up to %d bytes need more than 4 GiB of destinations: lower --tensors or --max-size", o.Tensors, o.MaxSize)
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	return nil
}

// checkFits refuses, before anything is measured, sizes whose buffers do
// not fit in free memory (gpu.CheckFits): host memory for the copy mode's
// pattern, check and host buffers (and the device buffers on the CPU
// backend), and for the transport's sources, destinations and arena
// segments; device memory for the copy mode's device buffers. The modes run
// one after the other, so the larger counts.
func (o *Options) checkFits() error {
	cpu := o.Device.Info().Backend != gpu.CUDA
	var host, dev, largest int64
	for _, size := range o.Sizes() {
		copies, moves := o.Mode != ModeTransport && o.runs(PartCopy, size), o.Mode != ModeCopy && o.runs(PartTransport, size)
		if copies || moves {
			largest = size
		}
		if copies {
			region := int64(repeats(size, o.SampleBytes)) * size
			if cpu { // device memory is host memory
				host = max(host, 6*region)
			} else {
				host, dev = max(host, 4*region), max(dev, 2*region)
			}
		}
		if moves {
			// As measurePipe sizes its arena; the files of the file
			// transport take no more.
			count := int64(transportCount(size, *o))
			window := min(count, max(2, (32<<20)/size))
			seg := max(int64(256<<20), roundUp(size, 4096))
			segs := (window*roundUp(size, arena.Align)+seg-1)/seg + 1
			host = max(host, (count+2)*size+segs*seg)
		}
	}
	fits := func(d gpu.Device, need int64) error {
		return gpu.CheckFits(d, "a sweep up to "+units.Size(largest, ""), need, "try a smaller --max-size")
	}
	if err := fits(gpu.NewCPU(), host); err != nil {
		return err
	}
	if dev > 0 {
		return fits(o.Device, dev)
	}
	return nil
}

// Sizes lists the sweep's sizes: MinSize, MinSize*Factor, ... up to MaxSize.
func (o Options) Sizes() []int64 {
	var out []int64
	for s := o.MinSize; s <= o.MaxSize; s *= o.Factor {
		out = append(out, s)
		if s > math.MaxInt64/o.Factor {
			break
		}
	}
	return out
}

// Run runs the sweep. A canceled ctx stops it between samples: the point in
// flight is dropped and its segments and files removed, and Run returns the
// points done so far with ctx's error.
func Run(ctx context.Context, opt Options) (*Outcome, error) {
	if err := opt.defaults(); err != nil {
		return nil, badinput.Wrap(err)
	}
	if err := opt.checkFits(); err != nil {
		return nil, badinput.Wrap(err)
	}
	out := &Outcome{}
	if opt.Mode == ModeCopy || opt.Mode == ModeAll {
		if err := runCopy(ctx, opt, out); err != nil {
			return out, err
		}
		if err := runRegister(ctx, opt, out); err != nil {
			return out, err
		}
	}
	if opt.Mode == ModeTransport || opt.Mode == ModeAll {
		if err := runTransport(ctx, opt, out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// repeats is how many copies of size bytes one sample makes.
func repeats(size, sampleBytes int64) int {
	return int(min(max(sampleBytes/size, 1), 256))
}

// ratio returns 100*x/ref per sample, or an unmeasured metric.
func ratio(name, unit string, xs []float64, ref float64, scale float64, why string) results.Metric {
	m := results.Metric{Name: name, Unit: unit, Better: results.HigherIsBetter}
	if ref <= 0 || math.IsNaN(ref) || math.IsInf(ref, 0) {
		m.Unmeasured = why
		return m
	}
	for _, x := range xs {
		m.Samples = append(m.Samples, scale*x/ref)
	}
	return m
}

// derivedFromTime marks rates and ratios computed from a result's time:
// one measured quantity, which alone decides a diff.
func derivedFromTime(ms []results.Metric) {
	for i := range ms {
		ms[i].DerivedFrom = MetricTime
	}
}

// warnOver adds a warning to r when the median of its percentage metric
// name is above bench.OverCeilingPct of its reference: what names that
// reference and ref is its value in GB/s. A reference the work beats is
// no upper bound for it, and the percentage must not pass for one. A
// reference row above another (memcpy-2t beats one thread's memcpy by
// design) claims nothing of the code under test: no warning.
func warnOver(r *results.Result, name, what string, ref float64) {
	if r.Role == results.RoleContext {
		return
	}
	m := r.Metric(name)
	if m == nil || !m.Measured() {
		return
	}
	pct := results.Median(m.Samples)
	if !(pct > bench.OverCeilingPct) {
		return
	}
	r.Warnings = append(r.Warnings, fmt.Sprintf("%s: %s %.0f%% of %s (%.2f GB/s) is above %d%%: that reference is not an upper bound for this work",
		r.Key(), name, pct, what, ref, bench.OverCeilingPct))
}

// overWarnings are the results' warnings of percentages above their reference.
func overWarnings(rs []results.Result) []string {
	var out []string
	for _, r := range rs {
		for _, w := range r.Warnings {
			if strings.Contains(w, "is not an upper bound") {
				out = append(out, w)
			}
		}
	}
	return out
}

func sizeParam(n int64) string { return strconv.FormatInt(n, 10) }

func countMetric(unit string, n int) results.Metric {
	return results.Metric{Name: MetricCount, Unit: unit, Better: results.HigherIsBetter, Samples: []float64{float64(n)}}
}

// pattern fills b with pseudo-random bytes from seed (xorshift64*).
func pattern(b []byte, seed uint64) {
	x := seed*0x9E3779B97F4A7C15 | 1
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		v := x * 0x2545F4914F6CDD1D
		b[i], b[i+1], b[i+2], b[i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		b[i+4], b[i+5], b[i+6], b[i+7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
	}
	for ; i < len(b); i++ {
		b[i] = byte(x >> (8 * (i & 7)))
	}
}

// PCIeCeiling is the theoretical rate per direction of a GPU's PCIe link,
// for the sweep's %PCIe, with a note saying where it came from: the
// maximum generation and width, since an idle link trains down.
func PCIeCeiling(link envinfo.PCIe, known bool) (gbps float64, note string) {
	if !known {
		return 0, "PCIe link unknown (NVML did not report it); pass --pcie-gbps"
	}
	g, w := link.Gen, link.Width
	if link.MaxGen > 0 && link.MaxWidth > 0 {
		g, w = link.MaxGen, link.MaxWidth
	}
	if r := nvmlinfo.PCIeGBps(g, w); r > 0 {
		return r, fmt.Sprintf("PCIe gen%d x%d theoretical %.1f GB/s per direction (NVML: %s)", g, w, r, link)
	}
	return 0, fmt.Sprintf("PCIe generation %d unknown; pass --pcie-gbps", g)
}
