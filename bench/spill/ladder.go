package spill

import (
	"context"
	"fmt"
	"time"

	"github.com/mstar-dev/mstar/internal/spill/regulator"
	"github.com/mstar-dev/mstar/internal/spill/tier"
	"github.com/mstar-dev/mstar/reports/results"
	"github.com/mstar-dev/mstar/trace"
)

// Ladder geometry: the pool is 60% of the device budget, pinned memory
// holds 40% of the pool, and the cell's tier takes the rest. With the band
// [0.10, 0.20] the rungs switch at demands of about 0.30 (pinned), 0.54
// (deep) and 0.90 (refuse) of the budget.
const (
	ladderPoolShare   = 0.6
	ladderPinnedShare = 0.4
	// A tick may spend moveShare of its interval moving blocks, at the slower
	// tier's measured move rate: its cost stays inside the interval even
	// when other processes slow the copies several-fold.
	moveShare = 0.2
	// poolTicks is how many ticks moving the whole pool may take; the
	// interval is lengthened when the measured rate needs it.
	poolTicks = 12
)

// LadderCurves are the demand curves of the ladder cells.
func LadderCurves() []regulator.Curve {
	return []regulator.Curve{
		regulator.Ramp(0.05, 0.95, 24, 4, 12, 20),
		regulator.Spike(0.10, 0.85, 4, 4, 22),
		regulator.Oscillation(0.26, 0.10, 6, 6, 0.05, 18),
	}
}

// moveRate is the bytes per second of the slowest of a few single-block
// spills and restores through t, each with a fresh slot. It measures the
// tier without injected faults: they strike after the calibration, as a
// misbehaving tier would.
func moveRate(ctx context.Context, e *cellEnv, t tier.Tier, p *tier.Pool) (float64, error) {
	t = tier.Unwrap(t)
	b := p.Blocks()[0]
	var worst time.Duration
	for k := 0; k < 3; k++ {
		slot, err := t.Alloc(b.Len)
		if err != nil {
			return 0, err
		}
		start := time.Now()
		_, err = slot.Spill(ctx, e.s, p.Buffer(), b.Off)
		sp := time.Since(start)
		if err == nil {
			start = time.Now()
			_, err = slot.Restore(ctx, e.s, p.Buffer(), b.Off, slot.Filled())
			worst = max(worst, sp, time.Since(start))
		}
		if ferr := slot.Free(); err == nil {
			err = ferr
		}
		if err != nil {
			return 0, fmt.Errorf("calibrating moves through %s: %w", t.Kind(), err)
		}
	}
	return float64(b.Len) / worst.Seconds(), nil
}

func runLadder(ctx context.Context, e *cellEnv) error {
	lens := tier.EvenBlocks(e.cell.Size, e.cfg.Blocks)
	p, before, err := e.pool(lens, e.cfg.Seed)
	if err != nil {
		return err
	}
	nPinned := int(float64(len(lens)) * ladderPinnedShare)
	pinned, err := e.openTier(tier.Pinned, capFor(lens[:nPinned]), 0)
	if err != nil {
		return err
	}
	var deepCap int64
	if e.cell.Tier == tier.Peer {
		deepCap = capFor(lens)
	}
	deep, err := e.openTier(e.cell.Tier, deepCap, 0)
	if err != nil {
		return err
	}
	// The interval and the move cap come from the slower tier's measured
	// rate of moves as the regulator makes them (a fresh slot each time):
	// the whole pool must move within poolTicks ticks, each spending at most
	// moveShare of its interval moving.
	blockLen := lens[0]
	var slowest float64
	for _, t := range []tier.Tier{pinned, deep} {
		rate, err := moveRate(ctx, e, t, p)
		if err != nil {
			return err
		}
		if slowest == 0 || rate < slowest {
			slowest = rate
		}
	}
	if e.cfg.mut.slowCalibration {
		slowest = float64(p.Bytes()) / (poolTicks * moveShare * 0.03) // the interval stretches to 30 ms
	}
	interval := e.cfg.Interval
	if need := time.Duration(float64(p.Bytes()) / (poolTicks * moveShare * slowest) * float64(time.Second)); need > interval {
		interval = need.Round(time.Millisecond)
	}
	maxMove := max(blockLen, int64(moveShare*slowest*interval.Seconds())/blockLen*blockLen)
	// An injected stall stands for a tier that falls behind its regulator:
	// it outlasts the interval however far a slow calibration (a loaded
	// machine) lengthened it, or the tick-cost gate would not see it.
	if f := e.cfg.Faults; f.Stall > 0 && f.Stall < 2*interval {
		f.Stall = 2 * interval
		pinned, deep = tier.Inject(tier.Unwrap(pinned), f), tier.Inject(tier.Unwrap(deep), f)
	}
	cfg := regulator.Config{
		Budget:   int64(float64(p.Bytes()) / ladderPoolShare),
		Cooldown: e.cfg.Cooldown,
		Interval: interval,
		MaxMove:  maxMove,
		AfterTick: func(d regulator.Decision) error {
			return poisonBlocks(e.s, p, d.Spilled)
		},
	}
	for _, curve := range LadderCurves() {
		if e.cfg.mut.truncateCurves {
			curve.Ticks /= 2
		}
		rcfg := cfg
		if e.cfg.mut.noCooldown {
			rcfg.Cooldown = 1
		}
		reg, err := regulator.New(rcfg, p, e.s, pinned, deep)
		if err != nil {
			return err
		}
		session := e.cell.Name() + "/" + curve.Name
		ticks, runErr := reg.Run(ctx, curve, e.cfg.Trace, session)
		if runErr != nil {
			reg.Release()
			return fmt.Errorf("%s: %w", curve.Name, runErr)
		}
		// Gated against the configured cooldown and interval.
		gates, st := ladderGates(ticks, e.cfg.Cooldown, interval)
		if !reg.AllResident() || reg.Rung() != trace.RungResident {
			gates = append(gates, fail("settled", "after the demand fell, the regulator is on rung %d with blocks still spilled", reg.Rung()))
			if err := reg.Release(); err != nil {
				return err
			}
			// The blocks still out are lost to the device; put the content
			// back so the next curve starts whole.
			if err := p.FillAll(e.s, e.cfg.Seed); err != nil {
				return err
			}
		} else {
			gates = append(gates, pass("settled", "back on rung 0 with every block resident"))
		}
		after, reach, err := checkBlocks(e.s, p, all(len(lens)), make([]int64, len(lens)))
		if err != nil {
			return err
		}
		for i := range reach {
			reach[i].Reported = reach[i].Measured // the regulator's own counts are in bytes_moved
		}
		gates = append(gates, GateIdentical(before, after, nil), GateReached(reach), GateStranded([]tier.Tier{pinned, deep}, nil))
		r := results.Result{Name: string(e.cell.Scenario), Params: e.params("curve", curve.Name, "cooldown", fmt.Sprint(e.cfg.Cooldown)),
			Metrics: []results.Metric{
				metric("tick_cost", "us", results.LowerIsBetter, st.costs...),
				// Derived from the measured move rate, so results, not parameters.
				metric("interval", "ms", results.LowerIsBetter, float64(interval)/float64(time.Millisecond)),
				metric("max_move", "MiB", results.HigherIsBetter, float64(maxMove)/(1<<20)),
				metric("rung_changes", "changes", results.LowerIsBetter, float64(len(st.changes))),
				metric("changes_per_cooldown", "changes", results.LowerIsBetter, float64(st.perWindow)),
				metric("flaps", "flaps", results.LowerIsBetter, float64(st.flaps)),
				metric("overruns", "ticks", results.LowerIsBetter, float64(st.overruns)),
				metric("moved", "MiB", results.HigherIsBetter, float64(st.moved)/(1<<20)),
				metric("refused", "MiB", results.LowerIsBetter, float64(st.refused)/(1<<20)),
				metric("min_headroom", "ratio", results.HigherIsBetter, st.minHead),
			},
			Gates: gates}
		e.add(r)
	}
	return nil
}

type ladderStats struct {
	costs          []float64 // µs, every tick
	changes        []int     // ticks that changed rung
	rungs          []int     // the rungs visited, in order
	perWindow      int       // most changes inside one cooldown
	flaps          int       // changes that undo the one before
	overruns       int
	moved, refused int64
	minHead        float64
}

// ladderGates checks a run's ticks: at most one rung change inside any
// window of one cooldown, and ticks that keep within their interval.
func ladderGates(ticks []regulator.Tick, cooldown int, interval time.Duration) ([]results.Gate, ladderStats) {
	st := ladderStats{minHead: 1}
	var overruns []string
	backToBack := false
	for i, t := range ticks {
		st.costs = append(st.costs, trace.US(t.Cost))
		if i == 0 || t.Rung != ticks[i-1].Rung {
			st.rungs = append(st.rungs, t.Rung)
			if i > 0 {
				st.changes = append(st.changes, t.Tick)
			}
		}
		if t.Cost > interval {
			overruns = append(overruns, fmt.Sprintf("tick %d cost %s", t.Tick, t.Cost.Round(time.Microsecond)))
			backToBack = backToBack || (i > 0 && ticks[i-1].Cost > interval)
		}
		st.moved += t.Moved
		st.refused += t.Refused
		st.minHead = min(st.minHead, t.Headroom)
	}
	st.overruns = len(overruns)
	for i, j := 0, 0; i < len(st.changes); i++ {
		for st.changes[i]-st.changes[j] >= cooldown {
			j++
		}
		st.perWindow = max(st.perWindow, i-j+1)
	}
	for i := 2; i < len(st.rungs); i++ {
		if st.rungs[i] == st.rungs[i-2] {
			st.flaps++
		}
	}
	var gates []results.Gate
	if st.perWindow > 1 {
		gates = append(gates, fail("cooldown", "%d rung changes inside one cooldown of %d ticks (changes at ticks %v)", st.perWindow, cooldown, st.changes))
	} else {
		gates = append(gates, pass("cooldown", "at most %d rung change per cooldown of %d ticks (%d changes: rungs %v)", st.perWindow, cooldown, len(st.changes), st.rungs))
	}
	// A control loop may miss a deadline now and then (the OS preempted
	// it); it must not fall behind: two overruns in a row, or more than
	// one tick in 20, fail.
	switch {
	case len(overruns) > 0 && (backToBack || len(overruns) > len(ticks)/20):
		why := "more than 1 in 20"
		if backToBack {
			why = "back to back"
		}
		gates = append(gates, fail("tick-cost", "%d of %d ticks cost more than the %s interval (%s): %s", len(overruns), len(ticks), interval, why, listMore(overruns, 3)))
	case len(overruns) > 0:
		gates = append(gates, pass("tick-cost", "%d isolated of %d ticks cost more than the %s interval (at most 1 in 20, none back to back): %s", len(overruns), len(ticks), interval, listMore(overruns, 3)))
	default:
		gates = append(gates, pass("tick-cost", "every one of %d ticks cost less than the %s interval (max %s)", len(ticks), interval, time.Duration(best(st.costs)*1e3).Round(time.Microsecond)))
	}
	return gates, st
}
