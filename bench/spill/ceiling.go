package spill

import (
	"context"
	"fmt"
	"time"

	"github.com/mstar-dev/mstar/internal/units"

	"github.com/mstar-dev/mstar/internal/spill/tier"
	"github.com/mstar-dev/mstar/reports/results"
)

type ceilKey struct {
	Tier tier.Kind
	Size int64
}

// Ceiling is what a tier's path reaches at a size in this run: the pool
// spilled as one slot (one contiguous copy for the memory tiers, the tier's
// chunked path for the file tier) and restored, with no blocks, no
// concurrency, no faults. Samples are GB/s (1e9 bytes per second).
//
// It goes through the same code as the cells (a tier.Batch: copies queued on
// one stream, one wait, timed on the host) and differs only in having one
// block: it is the link's rate with no per-block cost at all, which is what
// the floor is a fraction of. A cell that queues its blocks back to back
// pays per block only the host's queueing, which overlaps the copies before
// it; a design that waited per block would pay a device round trip each
// (~10 µs, more than a 16 MiB copy in device memory) and fail the floor, as
// it should.
type Ceiling struct {
	Tier           tier.Kind
	Size           int64
	Spill, Restore []float64
	Unmeasured     string // why there are no samples
	Where          string // the tier's own description
}

func gbps(n int64, d time.Duration) float64 { return float64(n) / d.Seconds() / 1e9 }

func measureCeiling(ctx context.Context, cfg Config, kind tier.Kind, size int64) (c Ceiling) {
	c = Ceiling{Tier: kind, Size: size}
	chunk := size
	if kind == tier.File {
		chunk = 0 // the tier's own staging chunk
	}
	t, err := tier.Open(kind, tier.Options{Dev: cfg.Dev, Capacity: size, Chunk: chunk, ShmDir: cfg.ShmDir, Holder: cfg.Holder})
	if err != nil {
		c.Unmeasured = err.Error()
		return c
	}
	defer t.Close()
	c.Where = t.Describe()
	s, err := cfg.Dev.NewStream()
	if err != nil {
		c.Unmeasured = err.Error()
		return c
	}
	defer s.Close()
	p, err := tier.NewPool(cfg.Dev, []int64{size})
	if err != nil {
		c.Unmeasured = err.Error()
		return c
	}
	defer p.Close()
	if err := p.FillAll(s, cfg.Seed); err != nil {
		c.Unmeasured = err.Error()
		return c
	}
	want, _ := p.Hashes(s)
	slot, err := t.Alloc(size)
	if err != nil {
		c.Unmeasured = err.Error()
		return c
	}
	defer slot.Free()
	// Round 0 warms up (first touch of fresh pages), untimed.
	for round := 0; round <= cfg.Samples; round++ {
		b := tier.NewBatch(s)
		start := time.Now()
		b.Spill(ctx, slot, p.Buffer(), 0)
		got, err := b.Wait()
		sp := time.Since(start)
		n := got[0]
		if err != nil || n != size {
			c.Unmeasured = fmt.Sprintf("spill moved %d of %d bytes: %v", n, size, err)
			c.Spill, c.Restore = nil, nil
			return c
		}
		start = time.Now()
		b.Restore(ctx, slot, p.Buffer(), 0, size)
		got, err = b.Wait()
		rs := time.Since(start)
		n = got[0]
		if err != nil || n != size {
			c.Unmeasured = fmt.Sprintf("restore moved %d of %d bytes: %v", n, size, err)
			c.Spill, c.Restore = nil, nil
			return c
		}
		if round > 0 {
			c.Spill = append(c.Spill, gbps(size, sp))
			c.Restore = append(c.Restore, gbps(size, rs))
		}
	}
	if got, _ := p.Hashes(s); len(got) != 1 || got[0] != want[0] {
		c.Unmeasured = "the ceiling's round trip did not come back byte-identical"
		c.Spill, c.Restore = nil, nil
	}
	return c
}

// Result is the ceiling as a results row.
func (c Ceiling) Result() results.Result {
	// The tier's ceiling bounds the cells; it is context, not the code under test.
	r := results.Result{Name: "spill-ceiling", Role: results.RoleContext, Params: results.Params{"tier": string(c.Tier), "size": units.Size(c.Size, "")}}
	if c.Unmeasured != "" {
		r.Metrics = []results.Metric{
			unmeasured("spill", "GB/s", results.HigherIsBetter, c.Unmeasured),
			unmeasured("restore", "GB/s", results.HigherIsBetter, c.Unmeasured),
		}
	} else {
		r.Metrics = []results.Metric{
			metric("spill", "GB/s", results.HigherIsBetter, c.Spill...),
			metric("restore", "GB/s", results.HigherIsBetter, c.Restore...),
		}
	}
	return r
}
