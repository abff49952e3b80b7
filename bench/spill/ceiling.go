package spill

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mstar-dev/mstar/bench"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/units"

	"github.com/mstar-dev/mstar/bench/spill/tier"
	"github.com/mstar-dev/mstar/reports"
)

type ceilKey struct {
	Tier   tier.Kind
	Size   int64
	Shards string // "" for one move; else the shard sizes, as the uneven cell moves them
}

// Ceiling is what a tier's path reaches at a size in this run: the pool
// spilled as one slot (one contiguous copy for the memory tiers, the tier's
// chunked path for the file tier) and restored, with no blocks, no faults.
// A cell that moves several shards at once on their own streams (uneven)
// is bounded by a ceiling of the same shards moved at once, one contiguous
// slot each: concurrency is part of the path. Samples are GB/s (1e9 bytes
// per second); the warm-up rounds run until their time settles
// (bench.Settle), as the cells' do.
//
// It goes through the same code as the cells (a tier.Batch: copies queued on
// one stream, one wait, timed on the host) and differs only in having one
// block per stream: it is the link's rate with no per-block cost at all,
// which is what the floor is a fraction of. A cell that queues its blocks
// back to back pays per block only the host's queueing, which overlaps the
// copies before it; a design that waited per block would pay a device
// round trip each (~10 µs, more than a 16 MiB copy in device memory) and
// fail the floor, as it should.
type Ceiling struct {
	Tier           tier.Kind
	Size           int64
	Shards         []int64 // sizes moved at once on their own streams; nil: one move of Size
	Spill, Restore []float64
	Unmeasured     string // why there are no samples
	Where          string // the tier's own description
	Warm           string // how the warm-up ended
}

// shape says how the ceiling moved its bytes.
func (c *Ceiling) shape() string {
	if len(c.Shards) > 1 {
		return fmt.Sprintf("%d slots at once on %d streams", len(c.Shards), len(c.Shards))
	}
	return "one slot"
}

func gbps(n int64, d time.Duration) float64 { return float64(n) / d.Seconds() / 1e9 }

// ceilingSettle is the warm-up of the ceilings and of the cells' rounds.
var ceilingSettle = bench.Settle{MaxTime: 3 * time.Second}

// warmRounds follows the warm-up rounds of a timed loop: a round counts as
// a sample once the warm-up has settled.
type warmRounds struct{ s *bench.Settler }

func newWarmRounds() *warmRounds { return &warmRounds{s: bench.NewSettler(ceilingSettle)} }

// sample reports whether a round that took d counts as a sample.
func (w *warmRounds) sample(d time.Duration) bool {
	if w.s == nil {
		return true
	}
	if w.s.Add(d.Seconds()) {
		w.s = nil // settled with this round; the next one is the first sample
	}
	return false
}

func measureCeiling(ctx context.Context, cfg Config, kind tier.Kind, size int64, shards []int64) (c Ceiling) {
	c = Ceiling{Tier: kind, Size: size, Shards: shards}
	sizes := shards
	if len(sizes) == 0 {
		sizes = []int64{size}
	}
	var total int64
	for _, n := range sizes {
		total += n
	}
	// Chunk 0: the tier's own largest copy (its staging chunk for files),
	// as the cells open their tiers.
	t, err := tier.Open(kind, tier.Options{Dev: cfg.Dev, Capacity: capFor(sizes), ShmDir: cfg.ShmDir, Holder: cfg.Holder})
	if err != nil {
		c.Unmeasured = err.Error()
		return c
	}
	defer t.Close()
	c.Where = t.Describe()
	type lane struct {
		s    gpu.Stream
		p    *tier.Pool
		slot tier.Slot
		want uint64
	}
	lanes := make([]*lane, len(sizes))
	defer func() {
		for _, l := range lanes {
			if l == nil {
				continue
			}
			if l.slot != nil {
				l.slot.Free()
			}
			if l.p != nil {
				l.p.Close()
			}
			if l.s != nil {
				l.s.Close()
			}
		}
	}()
	for i, n := range sizes {
		l := &lane{}
		lanes[i] = l
		if l.s, err = cfg.Dev.NewStream(); err != nil {
			c.Unmeasured = err.Error()
			return c
		}
		if l.p, err = tier.NewPool(cfg.Dev, []int64{n}); err != nil {
			c.Unmeasured = err.Error()
			return c
		}
		if err := l.p.FillAll(l.s, cfg.Seed+uint64(i)); err != nil {
			c.Unmeasured = err.Error()
			return c
		}
		want, _ := l.p.Hashes(l.s)
		l.want = want[0]
		if l.slot, err = t.Alloc(n); err != nil {
			c.Unmeasured = err.Error()
			return c
		}
	}
	// each runs move on every lane at once (on one goroutine per stream,
	// as the uneven cell does) and returns the wall time.
	each := func(move func(l *lane, b *tier.Batch) ([]int64, error)) (time.Duration, error) {
		errs := make([]error, len(lanes))
		var wg sync.WaitGroup
		start := time.Now()
		for i, l := range lanes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := move(l, tier.NewBatch(l.s))
				if err == nil && got[0] != l.p.Blocks()[0].Len {
					err = fmt.Errorf("moved %d of %d bytes", got[0], l.p.Blocks()[0].Len)
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		return time.Since(start), errors.Join(errs...)
	}
	warm := newWarmRounds()
	for len(c.Restore) < cfg.Samples {
		sp, err := each(func(l *lane, b *tier.Batch) ([]int64, error) {
			b.Spill(ctx, l.slot, l.p.Buffer(), 0)
			return b.Wait()
		})
		if err != nil {
			c.Unmeasured = fmt.Sprintf("spill: %v", err)
			c.Spill, c.Restore = nil, nil
			return c
		}
		rs, err := each(func(l *lane, b *tier.Batch) ([]int64, error) {
			b.Restore(ctx, l.slot, l.p.Buffer(), 0, l.p.Blocks()[0].Len)
			return b.Wait()
		})
		if err != nil {
			c.Unmeasured = fmt.Sprintf("restore: %v", err)
			c.Spill, c.Restore = nil, nil
			return c
		}
		if warm.sample(sp + rs) {
			c.Spill = append(c.Spill, gbps(total, sp))
			c.Restore = append(c.Restore, gbps(total, rs))
		}
	}
	for _, l := range lanes {
		if got, _ := l.p.Hashes(l.s); len(got) != 1 || got[0] != l.want {
			c.Unmeasured = "the ceiling's round trip did not come back byte-identical"
			c.Spill, c.Restore = nil, nil
		}
	}
	return c
}

// Result is the ceiling as a results row.
func (c Ceiling) Result() reports.Result {
	r := reports.Result{Name: "spill-ceiling", Params: reports.Params{"tier": string(c.Tier), "size": units.Size(c.Size, "")}}
	if len(c.Shards) > 1 {
		parts := make([]string, len(c.Shards))
		for i, n := range c.Shards {
			parts[i] = units.Size(n, "")
		}
		r.Params["shards"] = strings.Join(parts, "+")
	}
	if c.Unmeasured != "" {
		r.Metrics = []reports.Metric{
			unmeasured("spill", "GB/s", reports.HigherIsBetter, c.Unmeasured),
			unmeasured("restore", "GB/s", reports.HigherIsBetter, c.Unmeasured),
		}
	} else {
		r.Metrics = []reports.Metric{
			metric("spill", "GB/s", reports.HigherIsBetter, c.Spill...),
			metric("restore", "GB/s", reports.HigherIsBetter, c.Restore...),
		}
	}
	return r
}
