package sweep

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mstar-dev/mstar/internal/units"

	"github.com/mstar-dev/mstar/arena"
	"github.com/mstar-dev/mstar/bench"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/reports/results"
)

// hostPair is two host regions of one memory kind: a D2H destination and
// an H2D source, so both directions can run at once.
type hostPair struct {
	a, b    []byte
	release func() error
	note    string // a warning about this memory (e.g. it could not be pinned)
}

func allocHost(opt Options, kind string, region int64) (*hostPair, error) {
	dev := opt.Device
	switch kind {
	case MemPageable:
		return &hostPair{a: make([]byte, region), b: make([]byte, region), release: func() error { return nil }}, nil
	case MemShm:
		mem, remove, err := arena.MapScratch(opt.Dir, "sweep", 2*region)
		if err != nil {
			return nil, err
		}
		return &hostPair{a: mem[:region:region], b: mem[region:], release: remove}, nil
	case MemArena:
		seg := roundUp(2*region+2*arena.Align, 4096)
		var warns []string
		a, err := arena.New(arena.Config{
			Dir: opt.Dir, Entity: "sweep", SegmentSize: seg, MaxSegments: 1, PinBudget: seg,
			Device: dev, NoStartupSweep: true, NoSignalHandler: true, Strict: true, FullTimeout: time.Millisecond,
			Warn: func(m string) { warns = append(warns, m) },
		})
		if err != nil {
			return nil, err
		}
		sa, err1 := a.Reserve(context.Background(), region)
		sb, err2 := a.Reserve(context.Background(), region)
		if err := errors.Join(err1, err2); err != nil {
			a.Close()
			return nil, err
		}
		hp := &hostPair{a: sa.Bytes(), b: sb.Bytes(), release: a.Close}
		if dev.Info().Backend == gpu.CUDA && a.Stats().Pinned < seg {
			hp.note = fmt.Sprintf("arena segment of %d bytes is not registered (%v): its rates are pageable rates", seg, warns)
		}
		return hp, nil
	case MemPinned:
		a, freeA, err := dev.AllocPinned(region)
		if err != nil {
			return nil, err
		}
		b, freeB, err := dev.AllocPinned(region)
		if err != nil {
			freeA()
			return nil, err
		}
		return &hostPair{a: a, b: b, release: func() error { return errors.Join(freeA(), freeB()) }}, nil
	}
	return nil, fmt.Errorf("unknown memory kind %q", kind)
}

func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }

// copyPoint is one (memory, direction, size) measurement.
type copyPoint struct {
	memory, dir string
	size        int64
	reps        int
	secs        []float64 // per copy
	gbps        []float64
	wrong       []float64
	state       bench.MachineState // the GPU's and the host's while it ran
}

func runCopy(ctx context.Context, opt Options, out *Outcome) error {
	dev := opt.Device
	s1, err := dev.NewStream()
	if err != nil {
		return fmt.Errorf("copy sweep: %w", err)
	}
	defer s1.Close()
	s2, err := dev.NewStream()
	if err != nil {
		return fmt.Errorf("copy sweep: %w", err)
	}
	defer s2.Close()

	sizes := opt.sizesOf(PartCopy)
	maxRegion := int64(0)
	for _, sz := range sizes {
		maxRegion = max(maxRegion, int64(repeats(sz, opt.SampleBytes))*sz)
	}
	pat := make([]byte, maxRegion)
	pattern(pat, 1)
	check := make([]byte, maxRegion)

	var points []*copyPoint
	// Interrupted, the points done so far are still results. They are
	// finished when the sweep is (their percentages are of its best pinned
	// rate), and only then handed to the sink.
	defer func() {
		rs := copyResults(opt, points)
		out.Results = append(out.Results, rs...)
		out.Warnings = append(out.Warnings, overWarnings(rs)...)
		if note := results.BusyHostNote(rs); note != "" {
			out.Warnings = append(out.Warnings, "copy: "+note)
		}
		opt.Sink.Send(rs...)
	}()
	sampler, _ := bench.NewStateSampler(dev)
	defer sampler.Close()
	for _, size := range sizes {
		reps := repeats(size, opt.SampleBytes)
		region := int64(reps) * size
		dA, err := dev.Alloc(region)
		if err != nil {
			return fmt.Errorf("copy sweep at %d bytes: device buffer: %w", size, err)
		}
		dB, err := dev.Alloc(region)
		if err != nil {
			dA.Free()
			return fmt.Errorf("copy sweep at %d bytes: device buffer: %w", size, err)
		}
		// The D2H source holds the pattern for the whole size.
		err = s1.CopyHtoD(dA, 0, pat[:region])
		if err == nil {
			err = s1.Sync()
		}
		for _, mem := range Memory {
			if err != nil {
				break
			}
			opt.Progress(fmt.Sprintf("copy %s %s", mem, units.Size(size, "")))
			var hp *hostPair
			hp, err = allocHost(opt, mem, region)
			if err != nil {
				err = fmt.Errorf("copy sweep at %d bytes: %s memory: %w", size, mem, err)
				break
			}
			if hp.note != "" {
				out.Warnings = append(out.Warnings, hp.note)
			}
			copy(hp.b, pat[:region]) // the H2D source
			for _, dir := range Directions {
				p := &copyPoint{memory: mem, dir: dir, size: size, reps: reps}
				sampler.Start()
				err = measureCopy(ctx, opt, s1, s2, hp, dA, dB, pat[:region], check[:region], p)
				p.state = sampler.Stop()
				if err != nil {
					if errors.Is(err, ctx.Err()) {
						break // interrupted; a real error is reported as one
					}
					err = fmt.Errorf("copy sweep: %s %s at %d bytes: %w", mem, dir, size, err)
					break
				}
				points = append(points, p)
			}
			if e := hp.release(); e != nil && err == nil {
				err = e
			}
		}
		dA.Free()
		dB.Free()
		if err != nil {
			return err
		}
	}
	return nil
}

// measureCopy takes opt.Samples samples of p.reps copies each, every copy
// to its own place, and verifies every copy after each sample.
func measureCopy(ctx context.Context, opt Options, s1, s2 gpu.Stream, hp *hostPair, dA, dB gpu.Buffer, pat, check []byte, p *copyPoint) error {
	size, reps := p.size, p.reps
	d2h := p.dir == DirD2H || p.dir == DirBoth
	h2d := p.dir == DirH2D || p.dir == DirBoth
	bytesPerRep := size
	if p.dir == DirBoth {
		bytesPerRep = 2 * size
	}
	// At least Warmup untimed samples, then more until their time settles
	// (the first copies of a size ran several times slower than the rest).
	var warm *bench.Settler
	if opt.Warmup > 0 {
		warm = bench.NewSettler(bench.Settle{MinCalls: opt.Warmup, Window: 2, MaxTime: time.Second})
	}
	for len(p.secs) < opt.Samples {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Poison the destinations, so that a copy that did not happen shows.
		if d2h {
			clearAll(hp.a)
		}
		if h2d {
			if err := s1.Memset(dB, 0, int64(len(pat)), 0); err != nil {
				return err
			}
		}
		start, err := s1.Record()
		if err != nil {
			return err
		}
		if h2d && p.dir == DirBoth {
			if err := s2.WaitEvent(start); err != nil {
				return err
			}
		}
		h2dStream := s1
		if p.dir == DirBoth {
			h2dStream = s2
		}
		for r := 0; r < reps; r++ {
			off := int64(r) * size
			if d2h {
				if err := s1.CopyDtoH(hp.a[off:off+size], dA, off); err != nil {
					return err
				}
			}
			if h2d {
				if err := h2dStream.CopyHtoD(dB, off, hp.b[off:off+size]); err != nil {
					return err
				}
			}
		}
		var e2 gpu.Event
		if p.dir == DirBoth {
			if e2, err = s2.Record(); err != nil {
				return err
			}
			if err := s1.WaitEvent(e2); err != nil {
				return err
			}
		}
		end, err := s1.Record()
		if err != nil {
			return err
		}
		if err := end.Sync(); err != nil {
			return err
		}
		d, err := end.Since(start)
		start.Close()
		end.Close()
		if e2 != nil {
			e2.Close()
		}
		if err != nil {
			return err
		}
		secs := d.Seconds() / float64(reps)
		if secs <= 0 {
			secs = 1e-9 // below the clock's resolution
		}
		if warm != nil {
			if warm.Add(secs) {
				warm = nil
			}
			continue
		}
		// Verify every timed copy.
		wrong := 0
		if d2h {
			wrong += countWrong(hp.a[:len(pat)], pat, size)
		}
		if h2d {
			if err := s1.CopyDtoH(check, dB, 0); err != nil {
				return err
			}
			if err := s1.Sync(); err != nil {
				return err
			}
			wrong += countWrong(check[:len(pat)], pat, size)
		}
		p.secs = append(p.secs, secs)
		p.gbps = append(p.gbps, float64(bytesPerRep)/secs/1e9)
		p.wrong = append(p.wrong, float64(wrong))
	}
	return nil
}

func copyResults(opt Options, points []*copyPoint) []results.Result {
	// Pinned memory at the same size and direction is the reference; the
	// best pinned median of the run, per direction, is the ceiling.
	type key struct {
		dir  string
		size int64
	}
	pinned := map[key]float64{}
	ceiling := map[string]float64{}
	for _, p := range points {
		if p.memory == MemPinned {
			m := results.Median(p.gbps)
			pinned[key{p.dir, p.size}] = m
			ceiling[p.dir] = max(ceiling[p.dir], m)
		}
	}
	var rs []results.Result
	for _, p := range points {
		r := results.Result{
			Name:   "copy",
			Params: results.Params{"memory": p.memory, "dir": p.dir, "size": sizeParam(p.size)},
		}
		p.state.Set(&r)
		us := make([]float64, len(p.secs))
		for i, s := range p.secs {
			us[i] = s * 1e6
		}
		pcie := opt.PCIeGBps
		pcieWhy := "PCIe link rate unknown"
		if opt.PCIeNote != "" {
			pcieWhy = opt.PCIeNote
		}
		if p.dir == DirBoth {
			pcie *= 2 // both directions of a full-duplex link
		}
		if opt.Device.Info().Backend != gpu.CUDA {
			pcie = 0
			pcieWhy = "no PCIe transfer on the CPU backend"
		}
		r.Metrics = []results.Metric{
			{Name: MetricTime, Unit: "us", Better: results.LowerIsBetter, Samples: us},
			{Name: MetricBandwidth, Unit: "GB/s", Better: results.HigherIsBetter, Samples: p.gbps},
			ratio(MetricPctPinned, "%", p.gbps, pinned[key{p.dir, p.size}], 100, "no pinned measurement at this size"),
			ratio(MetricPctCeiling, "%", p.gbps, ceiling[p.dir], 100, "no pinned ceiling measured"),
			ratio(MetricPctPCIe, "%", p.gbps, pcie, 100, pcieWhy),
			{Name: MetricWrong, Unit: "copies", Better: results.LowerIsBetter, Samples: p.wrong},
			countMetric("copies/sample", p.reps),
		}
		derivedFromTime(r.Metrics[1:5])
		r.Gates = []results.Gate{verifiedGate(p.wrong, p.reps, "copies")}
		warnOver(&r, MetricPctPinned, "pinned memory at this size and direction", pinned[key{p.dir, p.size}])
		warnOver(&r, MetricPctCeiling, "the run's best pinned median in this direction (the ceiling)", ceiling[p.dir])
		warnOver(&r, MetricPctPCIe, "the PCIe link's theoretical rate", pcie)
		rs = append(rs, r)
	}
	return rs
}

// verifiedGate passes when no copy in any sample differed from its source;
// wrong holds each sample's count of differing copies (of perSample, each a
// unit named noun).
func verifiedGate(wrong []float64, perSample int, noun string) results.Gate {
	total := 0.0
	for _, w := range wrong {
		total += w
	}
	g := results.Gate{Name: "every copy verified", Pass: total == 0}
	if total > 0 {
		g.Reason = fmt.Sprintf("%.0f of %d %s differ from their source", total, len(wrong)*perSample, noun)
	}
	return g
}

// runRegister times registering (page-locking) a fresh, committed but
// untouched /dev/shm mapping of each size, and unregistering it: what an
// arena pays once per segment.
func runRegister(ctx context.Context, opt Options, out *Outcome) error {
	cuda := opt.Device.Info().Backend == gpu.CUDA
	for _, size := range opt.sizesOf(PartRegister) {
		r := results.Result{Name: "register", Params: results.Params{"size": sizeParam(size)}}
		reg := results.Metric{Name: MetricRegister, Unit: "ms", Better: results.LowerIsBetter}
		unreg := results.Metric{Name: MetricUnregister, Unit: "ms", Better: results.LowerIsBetter}
		per := results.Metric{Name: MetricRegPerGiB, Unit: "ms/GiB", Better: results.LowerIsBetter, DerivedFrom: MetricRegister}
		if !cuda {
			why := "the CPU backend does not page-lock memory (Register is a no-op)"
			reg.Unmeasured, unreg.Unmeasured, per.Unmeasured = why, why, why
		} else {
			opt.Progress("register " + units.Size(size, ""))
			for range opt.Samples {
				if err := ctx.Err(); err != nil {
					return err
				}
				mem, remove, err := arena.MapScratch(opt.Dir, "sweep", size)
				if err != nil {
					return fmt.Errorf("registration sweep at %d bytes: %w", size, err)
				}
				t0 := time.Now()
				unpin, err := opt.Device.Register(mem)
				t1 := time.Now()
				if err != nil {
					remove()
					return fmt.Errorf("registration sweep at %d bytes: %w", size, err)
				}
				err = unpin()
				t2 := time.Now()
				if e := remove(); err == nil {
					err = e
				}
				if err != nil {
					return fmt.Errorf("registration sweep at %d bytes: %w", size, err)
				}
				ms := t1.Sub(t0).Seconds() * 1e3
				reg.Samples = append(reg.Samples, ms)
				unreg.Samples = append(unreg.Samples, t2.Sub(t1).Seconds()*1e3)
				per.Samples = append(per.Samples, ms*float64(1<<30)/float64(size))
			}
		}
		r.Metrics = []results.Metric{reg, unreg, per}
		out.Results = append(out.Results, r)
		opt.Sink.Send(r)
	}
	return nil
}
