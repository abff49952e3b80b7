// Package p2p measures GPU-to-GPU copies on a host of several GPUs: for
// each ordered pair (src, dst), the bandwidth of one large copy and the
// latency of a small one, with peer access on (direct over NVLink or PCIe
// peer-to-peer, where the pair can) and off (the driver stages through
// host memory), as nvbandwidth's device_to_device tests do. It is the
// suite of `mstar bench p2p`.
package p2p

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/internal/gpu/cuda"
	"github.com/mstar-dev/mstar/reports/results"
)

// Options configure a run.
type Options struct {
	Devices []int // CUDA ordinals, two or more
	Size    int64 // bytes of the bandwidth copy; default 256 MiB
	Small   int64 // bytes of the latency copy; default 4 KiB
	Samples int   // per pair and mode; default 10
	Repeat  int   // latency copies per sample; default 100
	// Progress, when set, hears each pair.
	Progress func(step string)
	Sink     results.Sink
}

// Result name and metrics.
const (
	ResultName      = "p2p"
	MetricBandwidth = "bandwidth"
	MetricTime      = "time"
	MetricLatency   = "latency"
)

// Check validates opt and fills its defaults.
func (o *Options) Check() error {
	if len(o.Devices) < 2 {
		return badinput.Errorf("p2p needs two GPUs or more, got %d", len(o.Devices))
	}
	if o.Size == 0 {
		o.Size = 256 << 20
	}
	if o.Small == 0 {
		o.Small = 4 << 10
	}
	if o.Samples == 0 {
		o.Samples = 10
	}
	if o.Repeat == 0 {
		o.Repeat = 100
	}
	switch {
	case o.Size < 4 || o.Small < 4 || o.Small > o.Size:
		return badinput.Errorf("p2p: sizes %d and %d: want at least 4 bytes, the small one at most the large one", o.Size, o.Small)
	case o.Samples < 1 || o.Repeat < 1:
		return badinput.Errorf("p2p: %d samples of %d copies: want at least 1 of each", o.Samples, o.Repeat)
	}
	return nil
}

// Pairs lists the ordered pairs of opt's devices, in run order.
func (o *Options) Pairs() [][2]int {
	var out [][2]int
	for _, s := range o.Devices {
		for _, d := range o.Devices {
			if s != d {
				out = append(out, [2]int{s, d})
			}
		}
	}
	return out
}

// gpu is one device's context, stream and buffers.
type gpu struct {
	ctx      *cuda.Context
	stream   *cuda.Stream
	src, dst cuda.DevicePtr
}

// Run measures every ordered pair of opt.Devices, both modes. A canceled
// ctx stops it between samples: the pairs done are returned with ctx's
// error.
func Run(ctx context.Context, opt Options) ([]results.Result, error) {
	if err := opt.Check(); err != nil {
		return nil, err
	}
	gpus := map[int]*gpu{}
	defer func() {
		for _, g := range gpus {
			g.ctx.Free(g.src)
			g.ctx.Free(g.dst)
			g.stream.Destroy()
			g.ctx.Close()
		}
	}()
	pattern := make([]byte, opt.Size)
	for i := range pattern {
		pattern[i] = byte(i*131 + i>>9)
	}
	for _, k := range opt.Devices {
		c, err := cuda.Open(k)
		if err != nil {
			return nil, badinput.Errorf("p2p: GPU %d: %v", k, err)
		}
		g := &gpu{ctx: c}
		gpus[k] = g
		if g.stream, err = c.NewStream(); err != nil {
			return nil, err
		}
		if g.src, err = c.Alloc(opt.Size); err != nil {
			return nil, fmt.Errorf("p2p: GPU %d: %w", k, err)
		}
		if g.dst, err = c.Alloc(opt.Size); err != nil {
			return nil, fmt.Errorf("p2p: GPU %d: %w", k, err)
		}
		if err := c.MemcpyHtoD(g.src, pattern); err != nil {
			return nil, err
		}
	}
	var out []results.Result
	for _, p := range opt.Pairs() {
		s, d := gpus[p[0]], gpus[p[1]]
		can, err := s.ctx.CanAccessPeer(d.ctx)
		if err != nil {
			return out, err
		}
		for _, on := range []bool{true, false} {
			if err := ctx.Err(); err != nil {
				return out, err
			}
			if opt.Progress != nil {
				opt.Progress(fmt.Sprintf("cuda:%d -> cuda:%d peer %s", p[0], p[1], onOff(on)))
			}
			r := results.Result{Name: ResultName, Params: results.Params{"src": strconv.Itoa(p[0]), "dst": strconv.Itoa(p[1]),
				"peer": onOff(on), "size": strconv.FormatInt(opt.Size, 10)}}
			if on && !can {
				why := fmt.Sprintf("GPU %d cannot access GPU %d's memory directly (no NVLink or PCIe peer-to-peer path)", p[0], p[1])
				r.Metrics = unmeasured(why)
				out = append(out, r)
				opt.Sink.Send(r)
				continue
			}
			if can {
				if err := setPeer(s, d, on); err != nil {
					return out, err
				}
			}
			if err := measure(ctx, opt, s, d, pattern, &r); err != nil {
				if errors.Is(err, ctx.Err()) {
					return out, err
				}
				return out, fmt.Errorf("p2p cuda:%d -> cuda:%d peer %s: %w", p[0], p[1], onOff(on), err)
			}
			out = append(out, r)
			opt.Sink.Send(r)
		}
	}
	return out, nil
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

func unmeasured(why string) []results.Metric {
	return []results.Metric{
		{Name: MetricBandwidth, Unit: "GB/s", Better: results.HigherIsBetter, Unmeasured: why},
		{Name: MetricTime, Unit: "us", Better: results.LowerIsBetter, Unmeasured: why},
		{Name: MetricLatency, Unit: "us", Better: results.LowerIsBetter, Unmeasured: why},
	}
}

// setPeer turns access between s and d on or off, both ways, as a
// direct copy in either direction needs it.
func setPeer(s, d *gpu, on bool) error {
	if err := s.ctx.SetPeerAccess(d.ctx, on); err != nil {
		return err
	}
	return d.ctx.SetPeerAccess(s.ctx, on)
}

// measure times opt.Samples large copies and opt.Samples batches of small
// ones from s to d on s's stream, after a warm-up copy that is verified
// byte for byte on the host.
func measure(ctx context.Context, opt Options, s, d *gpu, pattern []byte, r *results.Result) error {
	if err := d.ctx.Memset(d.dst, 0xA5, opt.Size); err != nil {
		return err
	}
	if err := s.stream.CopyPeer(d.dst, d.ctx, s.src, s.ctx, opt.Size); err != nil {
		return err
	}
	if err := s.stream.Synchronize(); err != nil {
		return err
	}
	got := make([]byte, opt.Size)
	if err := d.ctx.MemcpyDtoH(got, d.dst); err != nil {
		return err
	}
	wrong := 0
	for i := range got {
		if got[i] != pattern[i] {
			wrong++
		}
	}
	gate := results.Gate{Name: "copy verified", Pass: wrong == 0}
	if wrong > 0 {
		gate.Reason = fmt.Sprintf("%d of %d bytes differ from the source", wrong, opt.Size)
	}
	r.Gates = []results.Gate{gate}

	start, err := s.ctx.NewEvent(true)
	if err != nil {
		return err
	}
	defer start.Destroy()
	end, err := s.ctx.NewEvent(true)
	if err != nil {
		return err
	}
	defer end.Destroy()
	timed := func(n int, bytes int64) (time.Duration, error) {
		if err := s.stream.Record(start); err != nil {
			return 0, err
		}
		for range n {
			if err := s.stream.CopyPeer(d.dst, d.ctx, s.src, s.ctx, bytes); err != nil {
				return 0, err
			}
		}
		if err := s.stream.Record(end); err != nil {
			return 0, err
		}
		if err := end.Synchronize(); err != nil {
			return 0, err
		}
		return end.Elapsed(start)
	}
	bw := results.Metric{Name: MetricBandwidth, Unit: "GB/s", Better: results.HigherIsBetter, DerivedFrom: MetricTime}
	us := results.Metric{Name: MetricTime, Unit: "us", Better: results.LowerIsBetter}
	lat := results.Metric{Name: MetricLatency, Unit: "us", Better: results.LowerIsBetter}
	for range opt.Samples {
		if err := ctx.Err(); err != nil {
			return err
		}
		t, err := timed(1, opt.Size)
		if err != nil {
			return err
		}
		us.Samples = append(us.Samples, t.Seconds()*1e6)
		bw.Samples = append(bw.Samples, float64(opt.Size)/t.Seconds()/1e9)
		if t, err = timed(opt.Repeat, opt.Small); err != nil {
			return err
		}
		lat.Samples = append(lat.Samples, t.Seconds()*1e6/float64(opt.Repeat))
	}
	r.Metrics = []results.Metric{bw, us, lat}
	return nil
}

// Matrix is the bandwidth medians of results by (src, dst) for one peer
// mode, NaN-free: a pair not measured is absent.
func Matrix(rs []results.Result, peer string) map[[2]int]float64 {
	out := map[[2]int]float64{}
	for i := range rs {
		r := &rs[i]
		if r.Name != ResultName || r.Params["peer"] != peer {
			continue
		}
		m := r.Metric(MetricBandwidth)
		s, err1 := strconv.Atoi(r.Params["src"])
		d, err2 := strconv.Atoi(r.Params["dst"])
		if m == nil || !m.Measured() || err1 != nil || err2 != nil {
			continue
		}
		out[[2]int{s, d}] = results.Median(m.Samples)
	}
	return out
}
