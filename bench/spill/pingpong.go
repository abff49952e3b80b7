package spill

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/spill/tier"
	"github.com/mstar-dev/mstar/reports/results"
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
// so a turn is predicted at overhead + compute + cost, with the transfer
// and the fixed per-turn overhead (starting the compute, handing layers
// over, the transfer's final wait) measured alone in the same run and the
// compute as it ran. Raw pricing (overhead + compute + transfer) is
// reported next to it for contrast.
//
// A turn's copies are queued on the transfer stream as the layers free up
// and waited for once, at the end of the turn (tier.Batch): the stream's
// order already puts each spill before the restore that reuses its slot.
//
// Turns are sized to last at least minTurn on every tier: when one pass of
// the layers moves faster than that (device memory moves 256 MiB in ~0.15
// ms), each layer's spill and restore are repeated passes times, so that
// fixed costs (a wait, a goroutine hand-off: tens of µs) stay a few percent
// of the turn instead of dominating it. Memory stays at the cell's size.
//
// Compute is a stand-in of calibrated duration, ~60% of the transfer so the
// turn is transfer-bound and overlap matters. On CUDA, for the tiers across
// the host link, it is device memsets of a scratch buffer (real device work
// beside the copies). On the device tier the transfer is itself a copy in
// device memory: memsets would compete with it for HBM bandwidth, which the
// model prices as independent engines and should not, so there (and on the
// CPU backend, which has no compute engine apart from the cores that do the
// copies) the stand-in is a timed wait, the host blocking as it would on a
// kernel.
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
	wait    time.Duration // compute per layer (wait)
	passes  int           // times each layer's spill and restore are repeated
	poison  bool          // poison each slot before restoring into it (verify turns)
	reach   []Reach
}

// minTurn is the least a turn's transfer should take.
const minTurn = 4 * time.Millisecond

// maxPasses bounds the repetition of a layer's moves.
const maxPasses = 64

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
	err := pp.transfer(ctx, x, y, done)
	if cerr := <-cerr; err == nil {
		err = cerr
	}
	return took, err
}

// transfer queues model x's spills and model y's restores as x's layers are
// done, and waits for them once.
func (pp *pingPong) transfer(ctx context.Context, x, y int, done []chan struct{}) error {
	L := pp.layers
	blocks := pp.arena.Blocks()
	b := tier.NewBatch(pp.xfer)
	var want []string // what each queued move is, to name a short one
	var wantLen []int64
	wait := func() ([]int64, error) {
		got, err := b.Wait()
		for k, n := range got {
			if err == nil && n != wantLen[k] {
				err = fmt.Errorf("%s moved %d of %d bytes", want[k], n, wantLen[k])
			}
		}
		want, wantLen = want[:0], wantLen[:0]
		return got, err
	}
	restore := func(layer, slot int) error {
		bl := blocks[slot]
		h := pp.homes[y][layer]
		if pp.poison {
			if err := pp.arena.Poison(pp.xfer, slot); err != nil {
				return err
			}
		}
		for k := 0; k < pp.passes; k++ {
			b.Restore(ctx, h, pp.arena.Buffer(), bl.Off, h.Filled())
			want, wantLen = append(want, fmt.Sprintf("restoring layer %d of model %d", layer, y)), append(wantLen, bl.Len)
		}
		if pp.poison {
			got, err := wait()
			if err != nil {
				return err
			}
			c, err := pp.arena.Check(pp.xfer, slot)
			if err != nil {
				return err
			}
			pp.reach = append(pp.reach, Reach{Block: y*L + layer, Requested: bl.Len, Reported: got[len(got)-1], Measured: c.Reached})
		}
		pp.pos[y][layer] = slot
		return nil
	}
	if err := restore(0, pp.spare); err != nil {
		wait()
		return err
	}
	for i := 0; i < L; i++ {
		<-done[i]
		slot := pp.pos[x][i]
		for k := 0; k < pp.passes; k++ {
			b.Spill(ctx, pp.homes[x][i], pp.arena.Buffer(), blocks[slot].Off)
			want, wantLen = append(want, fmt.Sprintf("spilling layer %d of model %d", i, x)), append(wantLen, blocks[slot].Len)
		}
		pp.pos[x][i] = -1
		if i+1 < L {
			// Queued behind the spill on the same stream: it cannot
			// overwrite the slot before the spill has read it.
			if err := restore(i+1, slot); err != nil {
				wait()
				return err
			}
		} else {
			pp.spare = slot
		}
	}
	_, err := wait()
	return err
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
	// Calibrate: transfer alone (one warm-up pair of turns, then samples),
	// first one pass to size the turns, then at the passes chosen.
	calibrate := func(n int) ([]float64, error) {
		var out []float64
		for k := 0; k < 2+n; k++ {
			d, _, err := swap(false)
			if err != nil {
				return nil, err
			}
			if k >= 2 {
				out = append(out, d.Seconds())
			}
		}
		return out, nil
	}
	pp.passes = 1
	onePass, err := calibrate(2)
	if err != nil {
		return err
	}
	pp.passes = min(maxPasses, max(1, int(math.Ceil(minTurn.Seconds()/results.Median(onePass)))))
	tSamples, err := calibrate(2 * max(2, e.cfg.Samples/2))
	if err != nil {
		return err
	}
	T := results.Median(tSamples)
	// The fixed cost of a turn with neither compute nor transfer.
	var oSamples []float64
	for k := 0; k < 1+2*max(2, e.cfg.Samples/2); k++ {
		start := time.Now()
		if _, err := pp.turn(ctx, x, false, false); err != nil {
			return err
		}
		if k > 0 {
			oSamples = append(oSamples, time.Since(start).Seconds())
		}
	}
	O := results.Median(oSamples)
	// Size the compute stand-in at 60% of the transfer.
	perLayer := time.Duration(0.6 * T / float64(L) * float64(time.Second))
	computeKind := "wait"
	if e.dev.Info().Backend == gpu.CUDA && e.cell.Tier != tier.Device {
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
	// and the overhead alone and that turn's own compute time (compute
	// never waits for the transfer, so its time in the turn is its time
	// alone; a timer-driven compute stand-in is more precise when the
	// process is busy).
	var turns, preds, cSamples, errPct, rawPct []float64
	for k := 0; k < 2*max(2, e.cfg.Samples); k++ {
		d, c, err := swap(true)
		if err != nil {
			return err
		}
		m, C := d.Seconds(), c.Seconds()
		pred := O + C + math.Max(0, T-O-C)
		turns = append(turns, m*1e3)
		preds = append(preds, pred*1e3)
		cSamples = append(cSamples, C*1e3)
		errPct = append(errPct, 100*math.Abs(pred-m)/m)
		rawPct = append(rawPct, 100*math.Abs(O+C+T-m)/m)
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
	medErr := results.Median(errPct)
	what := fmt.Sprintf("predicted %.2f ms per turn (overhead %.3f + compute %.2f + max(0, transfer %.2f − overhead − compute), medians; %s compute, %d pass(es) per layer), measured %.2f ms; median error %.1f%%",
		results.Median(preds), O*1e3, results.Median(cSamples), T*1e3, computeKind, pp.passes, results.Median(turns), medErr)
	// A median error over the tolerance fails only when the 95% interval
	// of that median is over it too; otherwise noise cannot be told from a
	// wrong model, and the gate says so rather than flip.
	errSpan := interval(errPct)
	var model results.Gate
	switch {
	case medErr <= 100*tol:
		model = pass("cost-model", "%s ≤ %.0f%%; raw pricing (overhead + compute + transfer) would be off by %.0f%%", what, 100*tol, results.Median(rawPct))
	case errSpan.lo > 100*tol:
		model = fail("cost-model", "%s > %.0f%% (95%% interval %.1f–%.1f%%)", what, 100*tol, errSpan.lo, errSpan.hi)
	default:
		model = fail("cost-model", "cannot tell: %s > %.0f%%, but its 95%% interval %.1f–%.1f%% reaches below; run more --samples", what, 100*tol, errSpan.lo, errSpan.hi)
		model.Undecided = true
	}
	r := results.Result{Name: string(e.cell.Scenario), Params: e.params("layers", fmt.Sprint(L), "compute", computeKind, "passes", fmt.Sprint(pp.passes)),
		Metrics: []results.Metric{
			metric("turn", "ms", results.LowerIsBetter, turns...),
			metric("predicted", "ms", results.LowerIsBetter, preds...),
			metric("transfer", "ms", results.LowerIsBetter, scale(tSamples, 1e3)...),
			metric("compute", "ms", results.LowerIsBetter, cSamples...),
			metric("compute_alone", "ms", results.LowerIsBetter, scale(cAlone, 1e3)...),
			metric("overhead", "ms", results.LowerIsBetter, scale(oSamples, 1e3)...),
			metric("model_error", "%", results.LowerIsBetter, errPct...),
			metric("raw_error", "%", results.LowerIsBetter, rawPct...),
			metric("transfer_bw", "GB/s", results.HigherIsBetter, float64(2*layer*int64(L)*int64(pp.passes))/T/1e9),
		}}
	r.Gates = append(r.Gates, model, ident.gate(GIdentical), GateReached(pp.reach))
	for m := range pp.homes {
		freeSlots(pp.homes[m])
	}
	r.Gates = append(r.Gates, GateStranded([]tier.Tier{t}, nil))
	e.add(r)
	return nil
}

func scale(v []float64, k float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x * k
	}
	return out
}
