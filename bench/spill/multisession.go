package spill

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/mstar-dev/mstar/internal/spill/tier"
	"github.com/mstar-dev/mstar/reports/results"
)

// Multi-session: several sessions, each with its own pool and stream, spill
// and restore random subsets of their blocks through one shared tier, with
// random pauses, so their operations interleave differently on every run;
// each session's choices come from its own seeded generator.
func runMultiSession(ctx context.Context, e *cellEnv) error {
	S := e.cfg.Sessions
	per := e.cell.Size / int64(S) / 4096 * 4096
	nb := max(2, e.cfg.Blocks/S)
	type session struct {
		p      *tier.Pool
		before []uint64
		reach  []Reach
		ops    int
		moved  int64
		err    error
	}
	ss := make([]*session, S)
	var allLens []int64
	for k := range ss {
		lens := tier.EvenBlocks(per, nb)
		allLens = append(allLens, lens...)
		p, before, err := e.pool(lens, e.cfg.Seed+uint64(k)*7919)
		if err != nil {
			return err
		}
		ss[k] = &session{p: p, before: before}
	}
	t, err := e.openTier(e.cell.Tier, capFor(allLens), 0)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var order []int // the global order of operations, by session
	note := func(k int) {
		mu.Lock()
		order = append(order, k)
		mu.Unlock()
	}
	const opsPer = 12
	start := time.Now()
	var wg sync.WaitGroup
	for k, se := range ss {
		if e.cfg.mut.serialSessions {
			wg.Wait()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := e.dev.NewStream()
			if err != nil {
				se.err = err
				return
			}
			defer s.Close()
			rng := rand.New(rand.NewPCG(e.cfg.Seed, uint64(k)))
			n := len(se.p.Blocks())
			slots := make([]tier.Slot, n)
			defer freeSlots(slots)
			pick := func(spilled bool) []int {
				var c []int
				for i := 0; i < n; i++ {
					if (slots[i] != nil) == spilled && rng.IntN(2) == 0 {
						c = append(c, i)
					}
				}
				return c
			}
			restore := func(idx []int) error {
				if err := poisonBlocks(s, se.p, idx); err != nil {
					return err
				}
				rep, m, _, err := restoreBlocks(ctx, s, se.p, idx, slots)
				se.moved += m
				if err != nil {
					return err
				}
				for _, i := range idx {
					c, err := se.p.Check(s, i)
					if err != nil {
						return err
					}
					se.reach = append(se.reach, Reach{Block: k*n + i, Requested: se.p.Blocks()[i].Len, Reported: rep[i], Measured: c.Reached})
					if err := slots[i].Free(); err != nil {
						return err
					}
					slots[i] = nil
				}
				return nil
			}
			for op := 0; op < opsPer; op++ {
				// A random pause: nothing, a yield, or up to 200 µs.
				switch rng.IntN(3) {
				case 1:
					runtime.Gosched()
				case 2:
					time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
				}
				if rng.IntN(2) == 0 {
					idx := pick(false)
					got, m, _, err := spillBlocks(ctx, s, t, se.p, idx)
					for _, i := range idx {
						if got[i] != nil {
							slots[i] = got[i]
						}
					}
					se.moved += m
					if err != nil {
						se.err = err
						return
					}
				} else if err := restore(pick(true)); err != nil {
					se.err = err
					return
				}
				se.ops++
				note(k)
			}
			var rest []int
			for i := range slots {
				if slots[i] != nil {
					rest = append(rest, i)
				}
			}
			se.err = restore(rest)
		}()
	}
	wg.Wait()
	took := time.Since(start)
	var errs []error
	var reaches []Reach
	var ident firstFail
	var ops int
	var moved int64
	for k, se := range ss {
		if se.err != nil {
			errs = append(errs, fmt.Errorf("session %d: %w", k, se.err))
			continue
		}
		after, err := se.p.Hashes(e.s)
		if err != nil {
			return err
		}
		g := GateIdentical(se.before, after, nil)
		if !g.Pass {
			g.Reason = fmt.Sprintf("session %d: %s", k, g.Reason)
		}
		ident.see(-1, g)
		reaches = append(reaches, se.reach...)
		ops += se.ops
		moved += se.moved
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	switches := 0
	for i := 1; i < len(order); i++ {
		if order[i] != order[i-1] {
			switches++
		}
	}
	// Sessions run one after another switch S−1 times; more means their
	// operations interleaved.
	inter := pass("interleaved", "%d switches between sessions in %d operations", switches, len(order))
	if switches <= S-1 {
		inter = fail("interleaved", "%d switches among %d sessions: they ran one after another, nothing was tested concurrently", switches, S)
	}
	r := results.Result{Name: string(e.cell.Scenario), Params: e.params("sessions", fmt.Sprint(S)),
		Metrics: []results.Metric{
			metric("operations", "ops", results.HigherIsBetter, float64(ops)),
			metric("switches", "switches", results.HigherIsBetter, float64(switches)),
			metric("moved", "GB/s", results.HigherIsBetter, gbps(moved, took)),
		}}
	r.Gates = append(r.Gates, ident.gate(GIdentical), GateReached(reaches), inter, GateStranded([]tier.Tier{t}, nil))
	e.add(r)
	return nil
}
