package spill

import (
	"fmt"
	"math"
	"strings"

	"github.com/mstar-dev/mstar/bench"
	"github.com/mstar-dev/mstar/internal/spill/tier"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
)

// Gate names.
const (
	GIdentical  = "identical"  // every block's hash after == before
	GReached    = "reached"    // measured bytes restored == requested
	GStranded   = "stranded"   // no stranded bytes at the end
	GUnmeasured = "unmeasured" // no figure is zero-for-unknown
	GBandwidth  = "bandwidth"  // not below the floor × the tier's ceiling
)

func pass(name, what string, a ...any) results.Gate {
	return results.Gate{Name: name, Pass: true, Reason: fmt.Sprintf(what, a...)}
}

func fail(name, why string, a ...any) results.Gate {
	return results.Gate{Name: name, Pass: false, Reason: fmt.Sprintf(why, a...)}
}

// listMore prints at most a few items and how many more.
func listMore(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:n], "; ") + fmt.Sprintf("; and %d more", len(items)-n)
}

// GateIdentical compares block hashes after a restore with those before.
// Only the blocks in which are compared (nil: all).
func GateIdentical(before, after []uint64, which []int) results.Gate {
	if which == nil {
		which = make([]int, len(before))
		for i := range which {
			which[i] = i
		}
	}
	var bad []string
	for _, i := range which {
		if i >= len(after) {
			bad = append(bad, fmt.Sprintf("block %d not read back", i))
		} else if after[i] != before[i] {
			bad = append(bad, fmt.Sprintf("block %d hash %016x, was %016x", i, after[i], before[i]))
		}
	}
	if len(bad) > 0 {
		return fail(GIdentical, "%d of %d blocks differ after restore: %s", len(bad), len(which), listMore(bad, 3))
	}
	return pass(GIdentical, "%d blocks byte-identical (xxhash64 of every block before and after)", len(which))
}

// Reach is one restore: the bytes requested, the bytes the tier said it
// copied, and the bytes a read-back found on the device.
type Reach struct {
	Block              int
	Requested          int64
	Reported, Measured int64
}

// GateReached passes when every restore's measured reach equals its request.
// A failure quotes the measured figure (and the tier's claim when it differs).
func GateReached(rs []Reach) results.Gate {
	var bad []string
	var req, got int64
	for _, r := range rs {
		req += r.Requested
		got += r.Measured
		if r.Measured != r.Requested {
			s := fmt.Sprintf("block %d reached %d of %d bytes (measured by read-back)", r.Block, r.Measured, r.Requested)
			if r.Reported != r.Measured {
				s += fmt.Sprintf("; the tier reported %d", r.Reported)
			}
			bad = append(bad, s)
		}
	}
	if len(rs) == 0 {
		return fail(GReached, "no restore was measured")
	}
	if len(bad) > 0 {
		return fail(GReached, "%d of %d restores short, %d of %d bytes reached: %s", len(bad), len(rs), got, req, listMore(bad, 3))
	}
	return pass(GReached, "%d restores reached all %d requested bytes (measured by read-back)", len(rs), req)
}

// GateStranded passes when the tiers hold nothing and the ledger strands
// nothing at the end of a cell.
func GateStranded(tiers []tier.Tier, l *tier.Ledger) results.Gate {
	var bad []string
	for _, t := range tiers {
		if u := t.Used(); u != 0 {
			bad = append(bad, fmt.Sprintf("%s tier still holds %d bytes", t.Kind(), u))
		}
	}
	if l != nil {
		if s := l.Stranded(); s.Bytes != 0 {
			bad = append(bad, fmt.Sprintf("%d slots (%d bytes) stranded and not reclaimed", s.Slots, s.Bytes))
		}
	}
	if len(bad) > 0 {
		return fail(GStranded, "%s", strings.Join(bad, "; "))
	}
	return pass(GStranded, "every tier empty at the end")
}

// GateUnmeasured checks that every figure is either measured (samples, all
// finite) or says why it is not — never an empty metric that a reader would
// take for zero, and never samples next to an unmeasured reason.
func GateUnmeasured(ms []results.Metric) results.Gate {
	var bad []string
	for _, m := range ms {
		switch {
		case len(m.Samples) == 0 && m.Unmeasured == "":
			bad = append(bad, m.Name+" has no samples and no reason")
		case len(m.Samples) > 0 && m.Unmeasured != "":
			bad = append(bad, m.Name+" has samples and is marked unmeasured")
		default:
			for _, v := range m.Samples {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					bad = append(bad, fmt.Sprintf("%s has a sample %v", m.Name, v))
					break
				}
			}
		}
	}
	if len(bad) > 0 {
		return fail(GUnmeasured, "%s", strings.Join(bad, "; "))
	}
	return pass(GUnmeasured, "%d figures, each measured or marked unmeasured with a reason", len(ms))
}

// GateBandwidth decides on intervals, not on one figure, so that noise
// cannot flip it. The cell's bandwidth and the ceiling are each the 95%
// interval of their median (the range of the samples when there are too
// few for one), and the cell's fraction of the ceiling lies between
// cell.lo / ceiling.hi and cell.hi / ceiling.lo: the ceiling is measured
// at another moment than the cell, and a machine's load moves between
// them. The gate passes when that fraction's lower end reaches floor,
// fails when its upper end is below floor, and otherwise cannot tell
// (Undecided, with the numbers and a request for more samples). An
// unmeasured ceiling fails the gate: it cannot be checked, and that is
// not a pass.
func GateBandwidth(what string, samples []float64, ceiling []float64, ceilingWhy string, floor float64) results.Gate {
	name := GBandwidth + "." + what
	if len(samples) == 0 {
		return fail(name, "%s bandwidth unmeasured", what)
	}
	if len(ceiling) == 0 {
		return fail(name, "the tier's %s ceiling is unmeasured (%s), so the floor cannot be checked", what, ceilingWhy)
	}
	// A non-finite sample (a zero-length timing, NaN) or a ceiling of 0 is a
	// broken measurement: it must fail, not slip past the comparison.
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	for _, v := range samples {
		if !finite(v) {
			return fail(name, "%s bandwidth sample %v cannot be judged: a measurement is broken", what, v)
		}
	}
	for _, v := range ceiling {
		if !finite(v) || v <= 0 {
			return fail(name, "%s bandwidth against a ceiling sample of %v GB/s cannot be judged: a measurement is broken", what, v)
		}
	}
	cell, ceil := interval(samples), interval(ceiling)
	lo, hi := cell.lo/ceil.hi, cell.hi/ceil.lo
	figures := fmt.Sprintf("%s %.2f GB/s (%.2f–%.2f, n=%d) of the tier's ceiling %.2f GB/s (%.2f–%.2f, n=%d) is %.0f%% (%.0f–%.0f%%)",
		what, cell.mid, cell.lo, cell.hi, len(samples), ceil.mid, ceil.lo, ceil.hi, len(ceiling), 100*cell.mid/ceil.mid, 100*lo, 100*hi)
	switch {
	case lo >= floor:
		return pass(name, "%s (floor %.0f%%)", figures, 100*floor)
	case hi < floor:
		return fail(name, "%s, below the floor of %.0f%%", figures, 100*floor)
	}
	g := fail(name, "cannot tell: %s, and the floor of %.0f%% lies inside; run more --samples", figures, 100*floor)
	g.Undecided = true
	return g
}

// span is a median with its 95% interval.
type span struct{ mid, lo, hi float64 }

// interval is v's median and 95% interval; with too few samples for one,
// the range of the samples stands for it (only a range clear of a limit
// decides).
func interval(v []float64) span {
	s := results.Summarize(v)
	out := span{s.Median, s.Lo, s.Hi}
	if math.IsInf(out.lo, 0) || math.IsInf(out.hi, 0) || math.IsNaN(out.lo) || math.IsNaN(out.hi) {
		out.lo, out.hi = -best(negated(v)), best(v)
	}
	return out
}

func negated(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = -x
	}
	return out
}

// overCeiling is the warning for a figure whose median is above
// overCeilingPct of its ceiling, "" when it is not: a ceiling is meant to
// bound the move, and a move well past it says it did not.
func overCeiling(what string, samples []float64, c *Ceiling, ceiling []float64) string {
	if len(samples) == 0 || len(ceiling) == 0 {
		return ""
	}
	ceil := best(ceiling)
	pct := 100 * results.Summarize(samples).Median / ceil
	if !(pct > overCeilingPct) {
		return ""
	}
	return fmt.Sprintf("%s %.0f%% of the %s tier's ceiling (%.2f GB/s, best of %d, %s as %s, %s) is above %d%%: that ceiling is not an upper bound for this move",
		what, pct, c.Tier, ceil, len(ceiling), units.Size(c.Size, ""), c.shape(), c.Where, overCeilingPct)
}

// overCeilingPct is the percentage of a ceiling above which a figure warns,
// the same for every suite.
const overCeilingPct = bench.OverCeilingPct

func best(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

func metric(name, unit string, better results.Direction, samples ...float64) results.Metric {
	m := results.Metric{Name: name, Unit: unit, Better: better, Samples: append([]float64(nil), samples...)}
	if len(samples) == 0 {
		m.Unmeasured = "no sample was taken"
	}
	return m
}

func unmeasured(name, unit string, better results.Direction, why string) results.Metric {
	return results.Metric{Name: name, Unit: unit, Better: better, Unmeasured: why}
}

// ofCeiling turns bandwidth samples into percentages of the ceiling's best.
func ofCeiling(name string, samples, ceiling []float64, ceilingWhy string) results.Metric {
	if len(ceiling) == 0 {
		return unmeasured(name, "%", results.HigherIsBetter, "ceiling unmeasured: "+ceilingWhy)
	}
	c := best(ceiling)
	out := make([]float64, len(samples))
	for i, v := range samples {
		out[i] = 100 * v / c
	}
	return metric(name, "%", results.HigherIsBetter, out...)
}
