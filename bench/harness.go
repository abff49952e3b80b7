// Package bench is the timing harness mstar's suites share: warm-up, a
// number of samples, each the mean of several calls, timed by device events
// (device time on CUDA, wall time on the CPU backend), optionally replayed
// from a CUDA graph, and rates from times.
//
// Each suite is a package below this one (ceilings, moe, ablate, sweep,
// stress, spill): options, a Run that returns results and warnings and hands
// each finished result to a results.Sink, and nothing that prints on its
// own. cmd/mstar runs every suite through one skeleton (measure.go).
package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/reports/results"
)

// Timing says how to time a piece of work.
type Timing struct {
	Warmup  int // untimed calls first (caches, clocks, lazy init)
	Samples int // timed samples returned
	Reps    int // calls per sample; a sample is their mean (0 = 1)
	// Settle, when set, continues the warm-up after Warmup calls until
	// the timing of a sample (Reps calls) stops improving (see Settle).
	Settle *Settle
	// Ctx, when set, ends the timing at its cancellation, between samples:
	// the samples taken come back with its error (an interrupt does not
	// wait for a million samples to finish).
	Ctx context.Context
}

// stopped is Ctx's error, nil without one.
func (t Timing) stopped() error {
	if t.Ctx == nil {
		return nil
	}
	return t.Ctx.Err()
}

func (t Timing) check() (Timing, error) {
	if t.Samples <= 0 {
		return t, fmt.Errorf("timing: %d samples; want at least 1", t.Samples)
	}
	if t.Warmup < 0 {
		return t, fmt.Errorf("timing: negative warm-up %d", t.Warmup)
	}
	if t.Reps <= 0 {
		t.Reps = 1
	}
	return t, nil
}

// Time times fn, which queues work on s: Warmup calls, then Samples
// samples of Reps calls each between two events recorded on s. It returns
// seconds per call for each sample. On CUDA this is device time: fn must
// queue its work on s (or on streams that s waits for). On the CPU backend
// stream operations complete before they return, so it is wall time.
func Time(s gpu.Stream, t Timing, fn func() error) ([]float64, error) {
	t, err := t.warmUp(fn)
	if err != nil {
		return nil, err
	}
	if err := s.Sync(); err != nil {
		return nil, err
	}
	if t.Settle != nil {
		if _, err := SettleCalls(*t.Settle, func() (float64, error) { return timeOnce(s, t.Reps, fn) }); err != nil {
			return nil, err
		}
	}
	out := make([]float64, 0, t.Samples)
	for i := 0; i < t.Samples; i++ {
		if err := t.stopped(); err != nil {
			return out, err
		}
		sec, err := timeOnce(s, t.Reps, fn)
		if err != nil {
			return out, fmt.Errorf("sample %d: %w", i, err)
		}
		out = append(out, sec)
	}
	return out, nil
}

// warmUp checks t and makes its warm-up calls of fn.
func (t Timing) warmUp(fn func() error) (Timing, error) {
	t, err := t.check()
	if err != nil {
		return t, err
	}
	for i := 0; i < t.Warmup; i++ {
		if err := t.stopped(); err != nil {
			return t, err
		}
		if err := fn(); err != nil {
			return t, fmt.Errorf("warm-up: %w", err)
		}
	}
	return t, nil
}

func timeOnce(s gpu.Stream, reps int, fn func() error) (float64, error) {
	start, err := s.Record()
	if err != nil {
		return 0, err
	}
	defer start.Close()
	for r := 0; r < reps; r++ {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	end, err := s.Record()
	if err != nil {
		return 0, err
	}
	defer end.Close()
	if err := end.Sync(); err != nil {
		return 0, err
	}
	d, err := end.Since(start)
	if err != nil {
		return 0, err
	}
	return d.Seconds() / float64(reps), nil
}

// TimeWall times host-side work by the wall clock, as Time does.
func TimeWall(t Timing, fn func() error) ([]float64, error) {
	t, err := t.warmUp(fn)
	if err != nil {
		return nil, err
	}
	sample := func() (float64, error) {
		start := time.Now()
		for r := 0; r < t.Reps; r++ {
			if err := fn(); err != nil {
				return 0, err
			}
		}
		return time.Since(start).Seconds() / float64(t.Reps), nil
	}
	if t.Settle != nil {
		if _, err := SettleCalls(*t.Settle, sample); err != nil {
			return nil, err
		}
	}
	out := make([]float64, 0, t.Samples)
	for i := 0; i < t.Samples; i++ {
		if err := t.stopped(); err != nil {
			return out, err
		}
		sec, err := sample()
		if err != nil {
			return out, fmt.Errorf("sample %d: %w", i, err)
		}
		out = append(out, sec)
	}
	return out, nil
}

// TimeGraph is Time with launch overhead taken out: on CUDA it captures
// Reps calls of fn on s into a graph once and times replays of it (each
// sample one replay, divided by Reps). fn must only queue work on s — no
// synchronisation, no allocation. On other backends it is Time.
func TimeGraph(s gpu.Stream, t Timing, fn func() error) ([]float64, error) {
	cs, ok := gpu.CUDAStreamOf(s)
	if !ok {
		return Time(s, t, fn)
	}
	t, err := t.check()
	if err != nil {
		return nil, err
	}
	exec, err := cs.Capture(func() error {
		for r := 0; r < t.Reps; r++ {
			if err := fn(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("graph capture: %w", err)
	}
	defer exec.Destroy()
	replay := func() error { return exec.Launch(cs) }
	samples, err := Time(s, Timing{Warmup: max(t.Warmup, 1), Samples: t.Samples, Reps: 1, Settle: t.Settle, Ctx: t.Ctx}, replay)
	for i := range samples {
		samples[i] /= float64(t.Reps)
	}
	return samples, err
}

// ErrNoSamples is returned by rate helpers given no time.
var ErrNoSamples = errors.New("no samples")

// Rates turns seconds per call into work per second in units of unit
// (e.g. bytes per call and 1e9 for GB/s).
func Rates(seconds []float64, work, unit float64) ([]float64, error) {
	if len(seconds) == 0 {
		return nil, ErrNoSamples
	}
	out := make([]float64, len(seconds))
	for i, s := range seconds {
		if s <= 0 {
			return nil, fmt.Errorf("sample %d took %g s: the timer cannot resolve this work; use more repetitions", i, s)
		}
		out[i] = work / s / unit
	}
	return out, nil
}

// Rounds runs a whole sweep n times in a row (rounds 0 to n-1), so that its
// document knows the spread between rounds — clocks, power state, other
// tenants — and not only the spread within one. Interleaving whole sweeps,
// rather than taking n times the samples per point, is what lets slow
// drift show as noise instead of as a difference between points. The
// results of all rounds are joined with results.JoinRounds; done counts
// the rounds that returned. At the first error it stops and returns what
// ran, the failing round's partial results included (an interrupted sweep
// returns the points it finished with its error).
func Rounds(n int, sweep func(round int) ([]results.Result, error)) (joined []results.Result, done int, err error) {
	var all [][]results.Result
	for round := 0; round < max(n, 1); round++ {
		rs, err := sweep(round)
		all = append(all, rs)
		if err != nil {
			return results.JoinRounds(all), round, err
		}
		done++
	}
	return results.JoinRounds(all), done, nil
}

// DefaultRounds is the measuring commands' default --rounds: three rounds
// give a spread between rounds that one outlying round cannot hide.
const DefaultRounds = 3
