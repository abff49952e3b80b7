package spill

import (
	"context"
	"fmt"
	"time"

	"github.com/mstar-dev/mstar/bench/spill/regulator"
	"github.com/mstar-dev/mstar/bench/spill/tier"
	"github.com/mstar-dev/mstar/reports"
	"github.com/mstar-dev/mstar/trace"
)

// Ladder geometry: the pool is 60% of the device budget, pinned memory
// holds 40% of the pool, and the cell's tier takes the rest. With the band
// [0.10, 0.20] the rungs switch at demands of about 0.30 (pinned), 0.54
// (deep) and 0.90 (refuse) of the budget.
const (
	ladderPoolShare   = 0.6
	ladderPinnedShare = 0.4
	// moveShare of an interval's worth of the slower tier's measured move
	// rate may be moved per tick: a tick's cost stays inside its interval
	// even when other processes slow the copies several-fold.
	moveShare = 0.10
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
// spills and restores through t, each with a fresh slot.
func moveRate(ctx context.Context, e *cellEnv, t tier.Tier, p *tier.Pool) (float64, error) {
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

// ceilOf measures (once per run) another tier's ceiling at the cell's size.
func (e *cellEnv) ceilOf(ctx context.Context, kind tier.Kind) *Ceiling {
	k := ceilKey{kind, e.cell.Size}
	if c, ok := e.r.ceilings[k]; ok {
		return c
	}
	c := measureCeiling(ctx, e.r.cfg, kind, e.cell.Size)
	e.r.ceilings[k] = &c
	e.r.order = append(e.r.order, k)
	return &c
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
	// The move cap comes from the slower tier's measured cost of a move as
	// the regulator makes it (a fresh slot each time), so that moving the
	// cap takes about moveShare of an interval.
	blockLen := lens[0]
	maxMove := blockLen
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
	maxMove = max(blockLen, int64(moveShare*slowest*e.cfg.Interval.Seconds())/blockLen*blockLen)
	cfg := regulator.Config{
		Budget:   int64(float64(p.Bytes()) / ladderPoolShare),
		Cooldown: e.cfg.Cooldown,
		Interval: e.cfg.Interval,
		MaxMove:  maxMove,
		AfterTick: func(d regulator.Decision) error {
			return poisonBlocks(e.s, p, d.Spilled)
		},
	}
	var figs []string
	worstChanges := 0
	for _, curve := range LadderCurves() {
		reg, err := regulator.New(cfg, p, e.s, pinned, deep)
		if err != nil {
			return err
		}
		session := e.cell.Name() + "/" + curve.Name
		ticks, runErr := reg.Run(ctx, curve, e.cfg.Trace, session)
		if runErr != nil {
			reg.Release()
			return fmt.Errorf("%s: %w", curve.Name, runErr)
		}
		rc := reg.Config()
		var costs []float64
		var changes []int
		var overruns []string
		var moved, refused int64
		minHead := 1.0
		for _, t := range ticks {
			costs = append(costs, trace.US(t.Cost))
			if t.Changed {
				changes = append(changes, t.Tick)
			}
			if t.Cost > rc.Interval {
				overruns = append(overruns, fmt.Sprintf("tick %d cost %s", t.Tick, t.Cost.Round(time.Microsecond)))
			}
			moved += t.Moved
			refused += t.Refused
			minHead = min(minHead, t.Headroom)
		}
		// Rung changes inside any window of one cooldown.
		perWindow := 0
		j := 0
		for i := range changes {
			for changes[i]-changes[j] >= rc.Cooldown {
				j++
			}
			perWindow = max(perWindow, i-j+1)
		}
		worstChanges = max(worstChanges, perWindow)
		flaps := 0 // a change that undoes the one before it
		var rungs []int
		for i, t := range ticks {
			if i == 0 || t.Rung != ticks[i-1].Rung {
				rungs = append(rungs, t.Rung)
			}
		}
		for i := 2; i < len(rungs); i++ {
			if rungs[i] == rungs[i-2] {
				flaps++
			}
		}
		var gates []reports.Gate
		if perWindow > 1 {
			gates = append(gates, fail("cooldown", "%d rung changes inside one cooldown of %d ticks (changes at ticks %v)", perWindow, rc.Cooldown, changes))
		} else {
			gates = append(gates, pass("cooldown", "at most %d rung change per cooldown of %d ticks (%d changes: rungs %v)", perWindow, rc.Cooldown, len(changes), rungs))
		}
		if len(overruns) > 0 {
			gates = append(gates, fail("tick-cost", "%d of %d ticks cost more than the %s interval: %s", len(overruns), len(ticks), rc.Interval, listMore(overruns, 3)))
		} else {
			gates = append(gates, pass("tick-cost", "every one of %d ticks cost less than the %s interval (max %s)", len(ticks), rc.Interval, time.Duration(best(costs)*1e3).Round(time.Microsecond)))
		}
		if !reg.AllResident() || reg.Rung() != trace.RungResident {
			gates = append(gates, fail("settled", "after the demand fell, the regulator is on rung %d with blocks still spilled", reg.Rung()))
			reg.Release()
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
		r := reports.Result{Name: string(e.cell.Scenario), Params: e.params("curve", curve.Name, "cooldown", fmt.Sprint(rc.Cooldown), "interval", rc.Interval.String()),
			Metrics: []reports.Metric{
				metric("tick_cost", "us", reports.LowerIsBetter, costs...),
				metric("rung_changes", "changes", reports.LowerIsBetter, float64(len(changes))),
				metric("changes_per_cooldown", "changes", reports.LowerIsBetter, float64(perWindow)),
				metric("flaps", "flaps", reports.LowerIsBetter, float64(flaps)),
				metric("overruns", "ticks", reports.LowerIsBetter, float64(len(overruns))),
				metric("moved", "MiB", reports.HigherIsBetter, float64(moved)/(1<<20)),
				metric("refused", "MiB", reports.LowerIsBetter, float64(refused)/(1<<20)),
				metric("min_headroom", "ratio", reports.HigherIsBetter, minHead),
			},
			Gates: gates}
		e.add(r)
		figs = append(figs, fmt.Sprint(len(changes)))
	}
	e.figure = fmt.Sprintf("changes %s/%s/%s, ≤%d per cooldown", figs[0], figs[1], figs[2], worstChanges)
	return nil
}
