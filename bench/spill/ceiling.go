package spill

import (
	"context"
	"fmt"
	"time"

	"github.com/mstar-dev/mstar/bench/spill/tier"
	"github.com/mstar-dev/mstar/reports"
)

type ceilKey struct {
	Tier tier.Kind
	Size int64
}

// Ceiling is what a tier's path reaches at a size in this run: the pool
// spilled as one slot (one contiguous copy for the memory tiers, the tier's
// chunked path for the file tier) and restored, with no blocks, no
// concurrency, no faults. Samples are GB/s (1e9 bytes per second).
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
		start := time.Now()
		n, err := slot.Spill(ctx, s, p.Buffer(), 0)
		sp := time.Since(start)
		if err != nil || n != size {
			c.Unmeasured = fmt.Sprintf("spill moved %d of %d bytes: %v", n, size, err)
			c.Spill, c.Restore = nil, nil
			return c
		}
		start = time.Now()
		n, err = slot.Restore(ctx, s, p.Buffer(), 0, size)
		rs := time.Since(start)
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
func (c Ceiling) Result() reports.Result {
	r := reports.Result{Name: "spill-ceiling", Params: reports.Params{"tier": string(c.Tier), "size": FormatSize(c.Size)}}
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
