package spill

import (
	"fmt"
	"math"
	"strings"

	"github.com/mstar-dev/mstar/internal/spill/tier"
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

// GateBandwidth passes when the best sample reaches floor × the best ceiling
// sample. Best against best: other processes only ever slow a sample down,
// so the best is the estimate of what the path can do, on both sides. An
// unmeasured ceiling fails the gate: it cannot be checked, and that is not
// a pass.
func GateBandwidth(what string, samples []float64, ceiling []float64, ceilingWhy string, floor float64) results.Gate {
	name := GBandwidth + "." + what
	if len(samples) == 0 {
		return fail(name, "%s bandwidth unmeasured", what)
	}
	if len(ceiling) == 0 {
		return fail(name, "the tier's %s ceiling is unmeasured (%s), so the floor cannot be checked", what, ceilingWhy)
	}
	got, ceil := best(samples), best(ceiling)
	// A non-finite sample (a zero-length timing, NaN) or a ceiling of 0 is a
	// broken measurement: it must fail, not slip past the comparison.
	if finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }; !finite(got) || !finite(ceil) || ceil <= 0 {
		return fail(name, "%s bandwidth %v against a ceiling of %v GB/s cannot be judged: a measurement is broken", what, got, ceil)
	}
	if got < floor*ceil {
		return fail(name, "%s %.2f GB/s is %.0f%% of the tier's ceiling %.2f GB/s, below the floor of %.0f%%", what, got, 100*got/ceil, ceil, 100*floor)
	}
	return pass(name, "%s %.2f GB/s is %.0f%% of the tier's ceiling %.2f GB/s (floor %.0f%%)", what, got, 100*got/ceil, ceil, 100*floor)
}

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
