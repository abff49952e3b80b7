package spill

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/mstar-dev/mstar/bench/spill/tier"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/reports"
)

// Ping-pong: models A and B (a draft and a target) of L layers each take
// turns on a device budget of L+1 layer slots, which cannot hold both. While
// the resident model computes layer by layer, the transfer stream restores
// the other model's first layer into the spare slot, and then, as each
// computed layer is done, spills it home and restores the other model's next
// layer into its slot. Each model's transfer thus overlaps the other's
// compute, and a move is priced as
//
//	cost = max(0, transfer − overlapped compute)
//
// so a turn is predicted at compute + cost, with the transfer measured alone
// in the same run and the compute as it ran. Raw pricing (compute +
// transfer) is reported next to it for contrast.
//
// Compute is a stand-in of calibrated duration, ~60% of the transfer so the
// turn is transfer-bound and overlap matters: device memsets of a scratch
// buffer on CUDA (real device work beside the copies); on the CPU backend a
// timed wait, the host blocking as it would on a kernel — the CPU has no
// compute engine apart from the cores that do the copies, and a memset or a
// spin there would measure contention for them instead.
type pingPong struct {
	e       *cellEnv
	arena   *tier.Pool // L+1 layer slots of device memory
	layers  int
	homes   [2][]tier.Slot // each model's layers in the tier
	pos     [2][]int       // arena slot of each resident layer; -1 when home
	spare   int            // the free arena slot
	want    [2][]uint64    // each layer's hash
	xfer    gpu.Stream
	comp    gpu.Stream
	scratch gpu.Buffer
	reps    int           // memsets per layer (CUDA)
	wait    time.Duration // compute per layer (CPU)
	poison  bool          // poison each slot before restoring into it (verify turns)
	reach   []Reach
}

func (pp *pingPong) computeLayer() error {
	if pp.scratch != nil {
		for k := 0; k < pp.reps; k++ {
			if err := pp.comp.Memset(pp.scratch, 0, pp.scratch.Size(), byte(k)); err != nil {
				return err
			}
		}
		return pp.comp.Sync()
	}
	time.Sleep(pp.wait)
	return nil
}

// turn runs one turn: model x computes (if compute) while y comes in
// (if transfer). It returns how long the compute took.
func (pp *pingPong) turn(ctx context.Context, x int, compute, transfer bool) (time.Duration, error) {
	y := 1 - x
	L := pp.layers
	done := make([]chan struct{}, L)
	for i := range done {
		done[i] = make(chan struct{})
	}
	cerr := make(chan error, 1)
	var took time.Duration
	go func() {
		var err error
		start := time.Now()
		for i := 0; i < L; i++ {
			if compute && err == nil {
				err = pp.computeLayer()
			}
			close(done[i])
		}
		took = time.Since(start)
		cerr <- err
	}()
	if !transfer {
		err := <-cerr
		return took, err
	}
	blocks := pp.arena.Blocks()
	restore := func(layer, slot int) error {
		b := blocks[slot]
		if pp.poison {
			if err := pp.arena.Poison(pp.xfer, slot); err != nil {
				return err
			}
		}
		h := pp.homes[y][layer]
		n, err := h.Restore(ctx, pp.xfer, pp.arena.Buffer(), b.Off, h.Filled())
		if err != nil {
			return fmt.Errorf("restoring layer %d of model %d: %w", layer, y, err)
		}
		if pp.poison {
			c, err := pp.arena.Check(pp.xfer, slot)
			if err != nil {
				return err
			}
			pp.reach = append(pp.reach, Reach{Block: y*L + layer, Requested: b.Len, Reported: n, Measured: c.Reached})
		}
		pp.pos[y][layer] = slot
		return nil
	}
	if err := restore(0, pp.spare); err != nil {
		<-cerr
		return 0, err
	}
	for i := 0; i < L; i++ {
		<-done[i]
		slot := pp.pos[x][i]
		if n, err := pp.homes[x][i].Spill(ctx, pp.xfer, pp.arena.Buffer(), blocks[slot].Off); err != nil || n != blocks[slot].Len {
			<-cerr
			return 0, fmt.Errorf("spilling layer %d of model %d: %d of %d bytes: %v", i, x, n, blocks[slot].Len, err)
		}
		pp.pos[x][i] = -1
		if i+1 < L {
			if err := restore(i+1, slot); err != nil {
				<-cerr
				return 0, err
			}
		} else {
			pp.spare = slot
		}
	}
	err := <-cerr
	return took, err
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func runPingPong(ctx context.Context, e *cellEnv) error {
	L := max(2, e.cfg.Blocks/2)
	layer := e.cell.Size / 2 / int64(L) / 4096 * 4096
	arena, err := tier.NewPool(e.dev, tier.EvenBlocks(layer*int64(L+1), L+1))
	if err != nil {
		return err
	}
	e.closers = append(e.closers, arena.Close)
	lens := make([]int64, 2*L)
	for i := range lens {
		lens[i] = layer
	}
	t, err := e.openTier(e.cell.Tier, capFor(lens), 0)
	if err != nil {
		return err
	}
	pp := &pingPong{e: e, arena: arena, layers: L}
	for _, st := range []*gpu.Stream{&pp.xfer, &pp.comp} {
		if *st, err = e.dev.NewStream(); err != nil {
			return err
		}
		e.closers = append(e.closers, (*st).Close)
	}
	// Model A in slots 0..L-1, model B home in the tier; slot L spare.
	for m := 0; m < 2; m++ {
		pp.pos[m] = make([]int, L)
		pp.want[m] = make([]uint64, L)
		pp.homes[m] = make([]tier.Slot, L)
		for i := 0; i < L; i++ {
			slot := i
			if m == 1 {
				slot = L
			}
			if err := arena.Fill(e.s, slot, e.cfg.Seed+uint64(1000*m+i)); err != nil {
				return err
			}
			c, err := arena.Check(e.s, slot)
			if err != nil {
				return err
			}
			pp.want[m][i] = c.Hash
			if pp.homes[m][i], err = t.Alloc(layer); err != nil {
				return err
			}
			e.closers = append(e.closers, pp.homes[m][i].Free)
			if _, err := pp.homes[m][i].Spill(ctx, e.s, arena.Buffer(), arena.Blocks()[slot].Off); err != nil {
				return err
			}
			pp.pos[m][i] = slot
			if m == 1 {
				pp.pos[m][i] = -1
			}
		}
	}
	pp.spare = L
	x := 0 // the resident model
	swap := func(compute bool) (time.Duration, time.Duration, error) {
		start := time.Now()
		c, err := pp.turn(ctx, x, compute, true)
		x = 1 - x
		return time.Since(start), c, err
	}
	// Calibrate: transfer alone (one warm-up pair of turns, then samples).
	var tSamples []float64
	for k := 0; k < 2+2*max(2, e.cfg.Samples/2); k++ {
		d, _, err := swap(false)
		if err != nil {
			return err
		}
		if k >= 2 {
			tSamples = append(tSamples, d.Seconds())
		}
	}
	T := median(tSamples)
	// Size the compute stand-in at 60% of the transfer.
	perLayer := time.Duration(0.6 * T / float64(L) * float64(time.Second))
	computeKind := "wait"
	if e.dev.Info().Backend == gpu.CUDA {
		computeKind = "memset"
		if pp.scratch, err = e.dev.Alloc(64 << 20); err != nil {
			return err
		}
		e.closers = append(e.closers, pp.scratch.Free)
		pp.reps = 1
		start := time.Now()
		for k := 0; k < 8; k++ {
			pp.computeLayer()
		}
		one := time.Since(start) / 8
		pp.reps = max(1, int(perLayer/max(one, time.Nanosecond)))
	} else {
		pp.wait = perLayer
	}
	// Compute alone, for the record.
	var cAlone []float64
	for k := 0; k < 1+max(2, e.cfg.Samples/2); k++ {
		c, err := pp.turn(ctx, x, true, false)
		if err != nil {
			return err
		}
		if k > 0 {
			cAlone = append(cAlone, c.Seconds())
		}
	}
	// Measure: turns with both. Each turn is predicted from the transfer
	// alone and that turn's own compute time (compute never waits for the
	// transfer, so its time in the turn is its time alone; a timer-driven
	// compute stand-in is more precise when the process is busy).
	var turns, preds, cSamples, errPct, rawPct []float64
	for k := 0; k < 2*max(2, e.cfg.Samples); k++ {
		d, c, err := swap(true)
		if err != nil {
			return err
		}
		m, C := d.Seconds(), c.Seconds()
		pred := C + math.Max(0, T-C)
		turns = append(turns, m*1e3)
		preds = append(preds, pred*1e3)
		cSamples = append(cSamples, C*1e3)
		errPct = append(errPct, 100*math.Abs(pred-m)/m)
		rawPct = append(rawPct, 100*math.Abs(C+T-m)/m)
	}
	// Verify: two poisoned, untimed turns bring each model in once more.
	pp.poison = true
	var ident firstFail
	for k := 0; k < 2; k++ {
		if _, _, err := swap(false); err != nil {
			return err
		}
		after := make([]uint64, L)
		for i := 0; i < L; i++ {
			c, err := arena.Check(e.s, pp.pos[x][i])
			if err != nil {
				return err
			}
			after[i] = c.Hash
		}
		g := GateIdentical(pp.want[x], after, nil)
		if !g.Pass {
			g.Reason = fmt.Sprintf("model %d: %s", x, g.Reason)
		}
		ident.see(-1, g)
	}
	tol := e.cfg.PingPongTol
	medErr := median(errPct)
	what := fmt.Sprintf("predicted %.2f ms per turn (compute %.2f + max(0, transfer %.2f − compute), medians), measured %.2f ms; median error %.1f%%",
		median(preds), median(cSamples), T*1e3, median(turns), medErr)
	var model reports.Gate
	if medErr <= 100*tol {
		model = pass("cost-model", "%s ≤ %.0f%%; raw pricing (compute + transfer) would be off by %.0f%%", what, 100*tol, median(rawPct))
	} else {
		model = fail("cost-model", "%s > %.0f%%", what, 100*tol)
	}
	r := reports.Result{Name: string(e.cell.Scenario), Params: e.params("layers", fmt.Sprint(L), "compute", computeKind),
		Metrics: []reports.Metric{
			metric("turn", "ms", reports.LowerIsBetter, turns...),
			metric("predicted", "ms", reports.LowerIsBetter, preds...),
			metric("transfer", "ms", reports.LowerIsBetter, scale(tSamples, 1e3)...),
			metric("compute", "ms", reports.LowerIsBetter, cSamples...),
			metric("compute_alone", "ms", reports.LowerIsBetter, scale(cAlone, 1e3)...),
			metric("model_error", "%", reports.LowerIsBetter, errPct...),
			metric("raw_error", "%", reports.LowerIsBetter, rawPct...),
			metric("transfer_bw", "GB/s", reports.HigherIsBetter, float64(2*layer*int64(L))/T/1e9),
		}}
	r.Gates = append(r.Gates, model, ident.gate(GIdentical), GateReached(pp.reach))
	for m := range pp.homes {
		freeSlots(pp.homes[m])
	}
	r.Gates = append(r.Gates, GateStranded([]tier.Tier{t}, nil))
	e.add(r)
	e.figure = fmt.Sprintf("pred %.2f/meas %.2f ms (%.0f%%)", median(preds), median(turns), medErr)
	return nil
}

func minOf(v []float64) float64 {
	m := math.Inf(1)
	for _, x := range v {
		m = math.Min(m, x)
	}
	return m
}

func scale(v []float64, k float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x * k
	}
	return out
}
