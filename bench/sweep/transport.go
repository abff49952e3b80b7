package sweep

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mstar-dev/mstar/bench"

	"github.com/mstar-dev/mstar/internal/units"

	"github.com/mstar-dev/mstar/arena"
	"github.com/mstar-dev/mstar/reports/results"
)

// Transports of the transport mode, in table order.
const (
	TrMemcpy = "memcpy" // single-thread copy of the same bytes: the reference
	// TrMemcpy2 is two threads copying at once (aggregate rate): the memory
	// system's limit for a pipeline of two copies, the arena's data path.
	TrMemcpy2 = "memcpy-2t"
	TrArena   = "arena"
	TrFile    = "file"
)

// transportPoint is one (transport, size) measurement.
type transportPoint struct {
	transport string
	size      int64
	count     int
	secs      []float64 // per sample, for count tensors
	wrong     []float64
	spills    []float64
	state     bench.MachineState // how busy the host was while it ran
}

func runTransport(ctx context.Context, opt Options, out *Outcome) error {
	// A size's results go to the sink when its four transports are done
	// (their ratios are to that size's memcpy and file rates), so a killed
	// sweep keeps every finished size in FILE.partial.ndjson; interrupted,
	// the points of the size in flight are results too.
	var all []results.Result
	var points []*transportPoint // the size in flight's
	finish := func() {
		rs := transportResults(points)
		all = append(all, rs...)
		opt.Sink.Send(rs...)
		points = nil
	}
	defer func() {
		finish()
		out.Results = append(out.Results, all...)
		out.Warnings = append(out.Warnings, overWarnings(all)...)
		if note := results.BusyHostNote(all); note != "" {
			out.Warnings = append(out.Warnings, "transport: "+note)
		}
	}()
	sampler, _ := bench.NewStateSampler(nil) // host memory only: the host's state
	defer sampler.Close()
	for _, size := range opt.sizesOf(PartTransport) {
		count := transportCount(size, opt)
		src := make([]byte, size)
		pattern(src, uint64(size))
		dst := make([][]byte, count)
		for i := range dst {
			dst[i] = make([]byte, size)
		}
		for _, tr := range []string{TrMemcpy, TrMemcpy2, TrArena, TrFile} {
			opt.Progress(fmt.Sprintf("transport %s %s", tr, units.Size(size, "")))
			p := &transportPoint{transport: tr, size: size, count: count}
			var err error
			// Labelled, so a --cpuprofile can be split by transport and size
			// (the goroutines a measurement starts inherit the labels).
			labels := pprof.Labels("transport", tr, "size", units.Size(size, ""))
			sampler.Start()
			pprof.Do(ctx, labels, func(ctx context.Context) {
				switch tr {
				case TrMemcpy:
					err = measureMemcpy(ctx, opt, src, dst, p, 1)
				case TrMemcpy2:
					err = measureMemcpy(ctx, opt, src, dst, p, 2)
				default:
					err = measurePipe(ctx, opt, arena.Transport(tr), src, dst, p)
				}
			})
			p.state = sampler.Stop()
			if err != nil && !errors.Is(err, ctx.Err()) {
				return fmt.Errorf("transport sweep: %s at %d bytes: %w", tr, size, err)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			points = append(points, p)
		}
		finish()
	}
	return nil
}

// transportCount is how many tensors one transport sample moves: the
// caller's Tensors, or enough that pipeline fill and drain do not dominate.
// A sample of 256 small tensors is a handful of descriptor batches, so on a
// many-core host it timed mostly wake-up latency; up to 4096 tensors (or
// SampleBytes of them) it times the stream. At least 16 tensors, within
// 4 GiB of destinations.
func transportCount(size int64, opt Options) int {
	if opt.Tensors > 0 {
		return opt.Tensors
	}
	return max(int(min(max(opt.SampleBytes/size, 1), 4096)), int(min(max((4<<30)/size, 4), 16)))
}

// stamp writes the sample and tensor index into a payload's first 16
// bytes, so a stale destination (a copy that never happened) shows.
func stamp(b []byte, sample, i int) {
	binary.LittleEndian.PutUint64(b[0:], uint64(sample))
	binary.LittleEndian.PutUint64(b[8:], uint64(i))
}

func verify(dst [][]byte, src []byte, sample int) int {
	wrong := 0
	var want [16]byte
	for i, d := range dst {
		stamp(want[:], sample, i)
		if !bytes.Equal(d[:16], want[:]) || !bytes.Equal(d[16:], src[16:]) {
			wrong++
		}
	}
	return wrong
}

func poison(dst [][]byte) {
	for _, d := range dst {
		clear(d)
	}
}

// measureMemcpy copies the source into every destination, on one thread or
// split over two (each with its own source, as two processes would have).
func measureMemcpy(ctx context.Context, opt Options, src []byte, dst [][]byte, p *transportPoint, threads int) error {
	srcs := [][]byte{src}
	for len(srcs) < threads {
		srcs = append(srcs, append([]byte(nil), src...))
	}
	for s := -opt.Warmup; s < opt.Samples; s++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		poison(dst)
		sample := s + opt.Warmup
		var wg sync.WaitGroup
		t0 := time.Now()
		for t := range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := t; i < len(dst); i += threads {
					stamp(srcs[t], sample, i)
					copy(dst[i], srcs[t])
				}
			}()
		}
		wg.Wait()
		d := time.Since(t0)
		if wrong := verify(dst, src, sample); s >= 0 {
			p.secs = append(p.secs, d.Seconds())
			p.wrong = append(p.wrong, float64(wrong))
			p.spills = append(p.spills, 0)
		}
	}
	return nil
}

// sendBatchBytes bounds a descriptor batch by the bytes it describes:
// small tensors share a frame (and the consumer's ACK frame), a tensor of
// this size or more goes out alone at once.
const sendBatchBytes = 256 << 10

// measurePipe moves count tensors per sample from a producer goroutine to a
// consumer goroutine through the transport, as two processes would: Put
// (one copy in, or one file write), descriptor over a Unix socket, one copy
// out (or a file read), ACK back, slot freed. A sample ends when the
// producer has the last ACK.
func measurePipe(ctx context.Context, opt Options, tr arena.Transport, src []byte, dst [][]byte, p *transportPoint) error {
	size, count := p.size, len(dst)
	// In flight at most ~32 MiB (at least two tensors): enough to keep both
	// ends busy, little enough that a slot is read back soon after it was
	// written. The file transport gets the same window.
	window := min(count, int(max(2, (32<<20)/size)))
	if opt.window > 0 {
		window = min(count, opt.window)
	}
	segSize := max(int64(256<<20), roundUp(size, 4096))
	maxSegs := int((int64(window)*roundUp(size, arena.Align)+segSize-1)/segSize) + 1
	a, err := arena.New(arena.Config{
		Dir: opt.Dir, Entity: "sweep", Transport: tr, SegmentSize: segSize, MaxSegments: maxSegs,
		SpillAfter: time.Minute, NoStartupSweep: true, NoSignalHandler: true,
	})
	if err != nil {
		return err
	}
	defer a.Close()
	pl, cl, err := arena.LinkPair(
		arena.Hello{Role: arena.Producer, Transport: tr, Entity: "sweep"},
		arena.Hello{Role: arena.Consumer, Transport: tr, Entity: "sweep"})
	if err != nil {
		return err
	}
	// Flow control costs the harness as little as it can: the ACK side
	// bumps a counter, and signals only when the producer sleeps on a full
	// window (a channel op per tensor on both ends bounced a lock between
	// cores, time charged to the transport).
	var acked atomic.Int64
	var producerWaits atomic.Bool
	wake := make(chan struct{}, 1)
	allAcked := make(chan struct{}, 1)
	snd := arena.NewSender(pl, a, func(id uint64, abandoned bool) {
		n := acked.Add(1)
		if producerWaits.Load() && producerWaits.CompareAndSwap(true, false) {
			wake <- struct{}{}
		}
		if n == int64(count) {
			allAcked <- struct{}{}
		}
	})
	defer snd.Close()
	rd := arena.NewReader(arena.ReaderConfig{Dir: opt.Dir, Transport: tr})
	rcv := arena.NewReceiver(cl, rd)
	defer func() { rcv.Close(); rd.Close() }()

	// A canceled ctx ends the sample in flight as a failing consumer does;
	// the deferred closes then remove every segment and file.
	var batch []arena.Descriptor
	for s := -opt.Warmup; s < opt.Samples; s++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		poison(dst)
		sample := s + opt.Warmup
		acked.Store(0)
		spills0 := a.Stats().Spills
		consumerErr := make(chan error, 1)
		// A consumer that fails cancels the sample, so a producer waiting
		// for a slot or an ACK stops waiting.
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			got := 0
			for got < count {
				ds, err := rcv.Next(ctx)
				if err == nil {
					err = rcv.ReadBatch(ds, dst[got:got+len(ds)])
				}
				if err != nil {
					consumerErr <- err
					cancel()
					return
				}
				got += len(ds)
			}
			consumerErr <- nil
		}()
		failed := func() error { return fmt.Errorf("consumer: %w", <-consumerErr) }
		t0 := time.Now()
		// Descriptors go out in batches, as a server sends them: a batch
		// leaves when it holds sendBatchBytes, or when the producer would
		// otherwise wait for a free slot (so the consumer never waits on a
		// batch the producer is sitting on).
		batch = batch[:0]
		var batchBytes int64
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			err := snd.Send(batch...)
			batch, batchBytes = batch[:0], 0
			return err
		}
		for i := 0; i < count; i++ {
			if int64(i)-acked.Load() >= int64(window) {
				if err := flush(); err != nil {
					return err
				}
				for int64(i)-acked.Load() >= int64(window) {
					producerWaits.Store(true)
					if int64(i)-acked.Load() < int64(window) { // an ACK landed before the flag was seen
						if producerWaits.CompareAndSwap(true, false) {
							break
						}
					}
					select {
					case <-wake:
					case <-sctx.Done():
						return failed()
					}
				}
			}
			stamp(src, sample, i)
			d, err := a.Put(sctx, src, arena.Meta{}, 1)
			if err != nil {
				if sctx.Err() != nil {
					return failed()
				}
				return err
			}
			if opt.putHook != nil {
				opt.putHook(tr, i)
			}
			batch = append(batch, d)
			if batchBytes += size; batchBytes >= sendBatchBytes {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := flush(); err != nil {
			return err
		}
		// The sample ends with the last ACK at the producer; the consumer
		// finishing first (its ACKs in flight) is the normal case.
		var cerr error
		consumerDone := false
	wait:
		for {
			select {
			case <-allAcked:
				break wait
			case cerr = <-consumerErr:
				consumerDone = true
				if cerr != nil {
					return fmt.Errorf("consumer: %w", cerr)
				}
			}
		}
		d := time.Since(t0)
		cancel()
		if !consumerDone {
			if cerr = <-consumerErr; cerr != nil {
				return fmt.Errorf("consumer: %w", cerr)
			}
		}
		if s >= 0 {
			p.secs = append(p.secs, d.Seconds())
			p.wrong = append(p.wrong, float64(verify(dst, src, sample)))
			p.spills = append(p.spills, float64(a.Stats().Spills-spills0))
		}
	}
	if st := a.Stats(); st.LiveSlots != 0 {
		return fmt.Errorf("%d slots still live after every ACK", st.LiveSlots)
	}
	return nil
}

func transportResults(points []*transportPoint) []results.Result {
	memcpyBW := map[int64]float64{}
	fileRate := map[int64]float64{}
	for _, p := range points {
		bw := make([]float64, len(p.secs))
		for i, s := range p.secs {
			bw[i] = float64(p.size) * float64(p.count) / s / 1e9
		}
		switch p.transport {
		case TrMemcpy:
			memcpyBW[p.size] = results.Median(bw)
		case TrFile:
			rates := make([]float64, len(p.secs))
			for i, s := range p.secs {
				rates[i] = float64(p.count) / s
			}
			fileRate[p.size] = results.Median(rates)
		}
	}
	var rs []results.Result
	for _, p := range points {
		us := make([]float64, len(p.secs))
		bw := make([]float64, len(p.secs))
		rate := make([]float64, len(p.secs))
		for i, s := range p.secs {
			us[i] = s / float64(p.count) * 1e6
			bw[i] = float64(p.size) * float64(p.count) / s / 1e9
			rate[i] = float64(p.count) / s
		}
		r := results.Result{
			Name:   "transport",
			Params: results.Params{"transport": p.transport, "size": sizeParam(p.size)},
			Metrics: []results.Metric{
				{Name: MetricTime, Unit: "us", Better: results.LowerIsBetter, Samples: us},
				{Name: MetricBandwidth, Unit: "GB/s", Better: results.HigherIsBetter, Samples: bw},
				{Name: MetricTensorsPerS, Unit: "tensors/s", Better: results.HigherIsBetter, Samples: rate},
				ratio(MetricPctMemcpy, "%", bw, memcpyBW[p.size], 100, "no memcpy measurement at this size"),
			},
		}
		p.state.Set(&r)
		derivedFromTime(r.Metrics[1:])
		if p.transport == TrArena || p.transport == TrFile {
			why := "no file-transport measurement at this size"
			m := ratio(MetricVsFile, "x", rate, fileRate[p.size], 1, why)
			m.DerivedFrom = MetricTime
			r.Metrics = append(r.Metrics, m)
			r.Metrics = append(r.Metrics, results.Metric{Name: MetricSpills, Unit: "tensors", Better: results.LowerIsBetter, Samples: p.spills})
		}
		if p.transport == TrMemcpy || p.transport == TrMemcpy2 {
			r.Role = results.RoleContext // the reference the transports are held against
		}
		r.Metrics = append(r.Metrics, results.Metric{Name: MetricWrong, Unit: "copies", Better: results.LowerIsBetter, Samples: p.wrong}, countMetric("tensors/sample", p.count))
		r.Gates = []results.Gate{verifiedGate(p.wrong, p.count, "tensors")}
		warnOver(&r, MetricPctMemcpy, "a one-thread memcpy of the same bytes", memcpyBW[p.size])
		rs = append(rs, r)
	}
	return rs
}
