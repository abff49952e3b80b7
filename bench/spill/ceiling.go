package spill

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mstar-dev/mstar/bench"
	"github.com/mstar-dev/mstar/internal/units"

	"github.com/mstar-dev/mstar/internal/spill/tier"
	"github.com/mstar-dev/mstar/reports/results"
)

type ceilKey struct {
	Tier   tier.Kind
	Size   int64
	Shards string // "" for one move; else the shard sizes, as the uneven cell moves them
}

// Ceiling is what a tier's path reaches for a cell's moves in this run:
// the same blocks (each its own slot), moved and timed by the same code
// (mover: a tier.Batch per stream, copies queued back to back, device
// copies in one batched launch, one wait), on as many streams at once as
// the cell uses (uneven: one per shard), with nothing around them — no
// poisoning, no hashing, no other tenant, no faults. Samples are GB/s (1e9
// bytes per second); the warm-up rounds run until their time settles
// (bench.Settle), as the cells' do.
//
// A ceiling of one contiguous slot was not an upper bound: on a CPU a
// block that stays in a cache moves faster than one large copy, and the
// file and peer tiers read 117–275% of it. A design that waited per block
// still fails the floor against this ceiling, which waits once.
type Ceiling struct {
	Tier           tier.Kind
	Size           int64
	Shards         []int64 // sizes moved at once on their own streams; nil: one lane
	Blocks         int     // blocks moved in all, each its own slot
	Spill, Restore []float64
	Unmeasured     string // why there are no samples
	Where          string // the tier's own description
	Warm           string // how the warm-up ended
	Timer          string // how its moves were timed, when not by the host clock
}

// shape says how the ceiling moved its bytes.
func (c *Ceiling) shape() string {
	if len(c.Shards) > 1 {
		return fmt.Sprintf("%d blocks in %d shards at once on %d streams", c.Blocks, len(c.Shards), len(c.Shards))
	}
	if c.Blocks <= 1 {
		return "one slot"
	}
	return fmt.Sprintf("%d blocks in one batch", c.Blocks)
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

// measureCeiling moves lanes of blocks (each lane on its own stream, all
// at once; each block its own slot, a lane's blocks in one batch) and
// times the spills and the restores.
func measureCeiling(ctx context.Context, cfg Config, kind tier.Kind, size int64, layout [][]int64) (c Ceiling) {
	c = Ceiling{Tier: kind, Size: size}
	var total int64
	var every []int64
	for _, lens := range layout {
		var n int64
		for _, l := range lens {
			n += l
		}
		total += n
		every = append(every, lens...)
		c.Shards = append(c.Shards, n)
	}
	c.Blocks = len(every)
	if len(layout) == 1 {
		c.Shards = nil
	}
	// Chunk 0: the tier's own largest copy (its staging chunk for files),
	// as the cells open their tiers.
	t, err := tier.Open(kind, tier.Options{Dev: cfg.Dev, Capacity: capFor(every), ShmDir: cfg.ShmDir, Holder: cfg.Holder})
	if err != nil {
		c.Unmeasured = err.Error()
		return c
	}
	defer t.Close()
	c.Where = t.Describe()
	lanes := make([]*lane, len(layout))
	wants := make([][]uint64, len(layout))
	defer func() {
		for _, l := range lanes {
			if l == nil {
				continue
			}
			freeSlots(l.slots)
			l.p.Close()
			l.s.Close()
		}
	}()
	for i, lens := range layout {
		s, err := cfg.Dev.NewStream()
		if err != nil {
			c.Unmeasured = err.Error()
			return c
		}
		p, err := tier.NewPool(cfg.Dev, lens)
		if err != nil {
			s.Close()
			c.Unmeasured = err.Error()
			return c
		}
		lanes[i] = newLane(s, p, nil, all(len(lens)))
		if err := p.FillAll(s, cfg.Seed+uint64(i)); err != nil {
			c.Unmeasured = err.Error()
			return c
		}
		wants[i], _ = p.Hashes(s)
		if lanes[i].slots, err = allocSlots(t, p, all(len(lens))); err != nil {
			c.Unmeasured = err.Error()
			return c
		}
	}
	// The cells' own mover: the same queueing, eviction, timer and waits.
	mv := newMover(&cfg, kind, lanes...)
	defer mv.close()
	c.Timer = mv.timer
	warm := newWarmRounds()
	for len(c.Restore) < cfg.Samples {
		n, sp, err := mv.spill(ctx)
		if err == nil && n != total {
			err = fmt.Errorf("spilled %d of %d bytes", n, total)
		}
		if err != nil {
			c.Unmeasured = err.Error()
			c.Spill, c.Restore = nil, nil
			return c
		}
		n, rs, err := mv.restore(ctx)
		if err == nil && n != total {
			err = fmt.Errorf("restored %d of %d bytes", n, total)
		}
		if err != nil {
			c.Unmeasured = err.Error()
			c.Spill, c.Restore = nil, nil
			return c
		}
		if warm.sample(sp + rs) {
			c.Spill = append(c.Spill, gbps(total, sp))
			c.Restore = append(c.Restore, gbps(total, rs))
		}
	}
	for i, l := range lanes {
		if got, _ := l.p.Hashes(l.s); !slices.Equal(got, wants[i]) {
			c.Unmeasured = "the ceiling's round trip did not come back byte-identical"
			c.Spill, c.Restore = nil, nil
		}
	}
	return c
}

// Result is the ceiling as a results row.
func (c Ceiling) Result() results.Result {
	// The tier's ceiling bounds the cells; it is context, not the code under test.
	r := results.Result{Name: "spill-ceiling", Role: results.RoleContext, Params: results.Params{"tier": string(c.Tier), "size": units.Size(c.Size, ""), "blocks": fmt.Sprint(c.Blocks)}}
	if len(c.Shards) > 1 {
		parts := make([]string, len(c.Shards))
		for i, n := range c.Shards {
			parts[i] = units.Size(n, "")
		}
		r.Params["shards"] = strings.Join(parts, "+")
	}
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
