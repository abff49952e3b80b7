package spill

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/spill/tier"
	"github.com/mstar-dev/mstar/reports/results"
)

// capFor is the segment room blocks need (each slot starts on a page).
func capFor(lens []int64) int64 {
	var n int64
	for _, l := range lens {
		n += (l + 4095) / 4096 * 4096
	}
	return n
}

func all(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// allocSlots reserves a slot for each block in idx. The cells that repeat a
// round reuse their slots, as the ceiling reuses its one: a round then
// measures copies into warm memory, not first-touch page faults.
func allocSlots(t tier.Tier, p *tier.Pool, idx []int) ([]tier.Slot, error) {
	slots := make([]tier.Slot, len(p.Blocks()))
	for _, i := range idx {
		sl, err := t.Alloc(p.Blocks()[i].Len)
		if err != nil {
			freeSlots(slots)
			return nil, fmt.Errorf("block %d: %w", i, err)
		}
		slots[i] = sl
	}
	return slots, nil
}

// evictCache fills the device's cache with other data before a timed move
// and waits for it, on devices that can (gpu.CacheEvicter): the move then
// reads and writes device memory, as a spill of data written long ago does,
// and a cell and its ceiling start from the same state. Without it a 64 MiB
// device move read what the last one left in a 50 MB L2.
func evictCache(s gpu.Stream) error {
	ev, ok := s.(gpu.CacheEvicter)
	if !ok {
		return nil
	}
	if err := ev.EvictCache(); err != nil {
		return fmt.Errorf("evicting the cache before a timed move: %w", err)
	}
	return s.Sync()
}

// spillBlocks reserves fresh slots and spills the blocks idx of p to t. On
// error the slots made so far are returned with it, for the caller to free
// or strand.
func spillBlocks(ctx context.Context, s gpu.Stream, t tier.Tier, p *tier.Pool, idx []int) ([]tier.Slot, int64, time.Duration, error) {
	slots := make([]tier.Slot, len(p.Blocks()))
	var moved int64
	start := time.Now()
	for _, i := range idx {
		b := p.Blocks()[i]
		sl, err := t.Alloc(b.Len)
		if err != nil {
			return slots, moved, time.Since(start), fmt.Errorf("block %d: %w", i, err)
		}
		slots[i] = sl
		n, err := sl.Spill(ctx, s, p.Buffer(), b.Off)
		moved += n
		if err != nil {
			return slots, moved, time.Since(start), fmt.Errorf("spilling block %d: %w", i, err)
		}
	}
	return slots, moved, time.Since(start), nil
}

// restoreBlocks restores blocks idx from their slots as one batch (every
// copy queued, one wait), outside the timed cells (mover times those);
// reported[i] is what the tier said it copied.
func restoreBlocks(ctx context.Context, s gpu.Stream, p *tier.Pool, idx []int, slots []tier.Slot) ([]int64, int64, time.Duration, error) {
	reported := make([]int64, len(p.Blocks()))
	b := tier.NewBatch(s)
	start := time.Now()
	b.Collect()
	for _, i := range idx {
		b.Restore(ctx, slots[i], p.Buffer(), p.Blocks()[i].Off, slots[i].Filled())
	}
	got, err := b.Wait()
	dt := time.Since(start)
	var moved int64
	for k, i := range idx {
		reported[i] = got[k]
		moved += got[k]
	}
	if err != nil {
		return reported, moved, dt, fmt.Errorf("restoring blocks %v: %w", idx, err)
	}
	return reported, moved, dt, nil
}

// checkBlocks reads the blocks back: hashes of all of them, and the reach of
// those in restored.
func checkBlocks(s gpu.Stream, p *tier.Pool, restored []int, reported []int64) ([]uint64, []Reach, error) {
	hashes := make([]uint64, len(p.Blocks()))
	isRestored := map[int]bool{}
	for _, i := range restored {
		isRestored[i] = true
	}
	var reach []Reach
	for i, b := range p.Blocks() {
		c, err := p.Check(s, i)
		if err != nil {
			return nil, nil, err
		}
		hashes[i] = c.Hash
		if isRestored[i] {
			reach = append(reach, Reach{Block: i, Requested: b.Len, Reported: reported[i], Measured: c.Reached})
		}
	}
	return hashes, reach, nil
}

func freeSlots(slots []tier.Slot) error {
	var errs []error
	for i, s := range slots {
		if s != nil {
			errs = append(errs, s.Free())
			slots[i] = nil
		}
	}
	return errors.Join(errs...)
}

// evenSlots sets up a move of the whole pool: the cell's size cut into even
// blocks, the cell's tier with room for all of them, a pool filled with them
// (before holds their hashes), and a slot for each. The caller frees the
// slots.
func (e *cellEnv) evenSlots() (lens []int64, t tier.Tier, p *tier.Pool, before []uint64, slots []tier.Slot, err error) {
	lens = tier.EvenBlocks(e.cell.Size, e.cfg.Blocks)
	if t, err = e.openTier(e.cell.Tier, capFor(lens), 0); err != nil {
		return nil, nil, nil, nil, nil, err
	}
	if p, before, err = e.pool(lens, e.cfg.Seed); err != nil {
		return nil, nil, nil, nil, nil, err
	}
	if slots, err = allocSlots(t, p, all(len(lens))); err != nil {
		return nil, nil, nil, nil, nil, err
	}
	return lens, t, p, before, slots, nil
}

func poisonBlocks(s gpu.Stream, p *tier.Pool, idx []int) error {
	for _, i := range idx {
		if err := p.Poison(s, i); err != nil {
			return err
		}
	}
	return nil
}

// firstFail keeps the first failing gate of several rounds, else the last.
type firstFail struct{ g *results.Gate }

func (f *firstFail) see(round int, g results.Gate) {
	if f.g != nil && !f.g.Pass {
		return
	}
	if !g.Pass && round >= 0 {
		g.Reason = fmt.Sprintf("round %d: %s", round, g.Reason)
	}
	f.g = &g
}

func (f *firstFail) gate(name string) results.Gate {
	if f.g == nil {
		return fail(name, "never checked")
	}
	return *f.g
}

// bandwidthMetrics are the four figures of a spill+restore cell.
func bandwidthMetrics(c *Ceiling, spill, restore []float64) []results.Metric {
	ms := []results.Metric{
		metric("spill", "GB/s", results.HigherIsBetter, spill...),
		metric("restore", "GB/s", results.HigherIsBetter, restore...),
		ofCeiling("spill_of_ceiling", spill, c.Spill, c.Unmeasured),
		ofCeiling("restore_of_ceiling", restore, c.Restore, c.Unmeasured),
	}
	// A percentage of the ceiling is the bandwidth again: it does not decide.
	ms[2].DerivedFrom, ms[3].DerivedFrom = "spill", "restore"
	return ms
}

// ceilingWarnings are the warnings of figures above their ceiling.
func ceilingWarnings(c *Ceiling, spill, restore []float64) []string {
	var out []string
	for _, w := range []string{overCeiling("spill", spill, c, c.Spill), overCeiling("restore", restore, c, c.Restore)} {
		if w != "" {
			out = append(out, w)
		}
	}
	return out
}

// bandwidthGates gate a cell's figures against its ceiling's; timer says
// how the cell's moves were timed (mover.timer), quoted when either was
// not timed by the host clock.
func bandwidthGates(c *Ceiling, timer string, spill, restore []float64, floor float64) []results.Gate {
	gs := []results.Gate{
		GateBandwidth("spill", spill, c.Spill, c.Unmeasured, floor),
		GateBandwidth("restore", restore, c.Restore, c.Unmeasured, floor),
	}
	how := ""
	switch {
	case timer == c.Timer && timer != "":
		how = "; the cell and its ceiling timed by " + timer
	case timer != c.Timer:
		how = fmt.Sprintf("; the cell timed by %s, its ceiling by %s", orHostClock(timer), orHostClock(c.Timer))
	}
	for i := range gs {
		gs[i].Reason += how
	}
	return gs
}

func orHostClock(timer string) string {
	if timer == "" {
		return "the host clock"
	}
	return timer
}

func pctFigure(c *Ceiling, spill, restore []float64) string {
	f := fmt.Sprintf("%.1f/%.1f GB/s", best(spill), best(restore))
	if len(c.Spill) > 0 && len(c.Restore) > 0 {
		f += fmt.Sprintf(" %.0f%%", 100*min(best(spill)/best(c.Spill), best(restore)/best(c.Restore)))
	}
	return f
}

// ---- hibernate ----

func runHibernate(ctx context.Context, e *cellEnv) error {
	c := e.ceil(ctx)
	lens, t, p, before, slots, err := e.evenSlots()
	if err != nil {
		return err
	}
	defer freeSlots(slots)
	l := newLane(e.s, p, slots, all(len(lens)))
	mv := newMover(e.cfg, e.cell.Tier, l)
	defer mv.close()
	var spillS, restoreS []float64
	var reaches []Reach
	var ident firstFail
	warm := newWarmRounds()
	for round := 0; len(spillS) < e.cfg.Samples; round++ {
		n, dt, err := mv.spill(ctx)
		if err != nil {
			return err
		}
		if e.cell.Tier == tier.Peer {
			// The holder process must see the bytes in its own mapping.
			for i, sl := range slots {
				h, err := tier.PeerHash(t, sl)
				if err != nil {
					return err
				}
				if h != before[i] {
					ident.see(round, fail(GIdentical, "the holder's copy of block %d hashes %016x, spilled %016x", i, h, before[i]))
				}
			}
		}
		// Hibernated: the device memory is gone; a fresh allocation is
		// poisoned so the read-back measures what the restore delivers.
		if err := p.Release(); err != nil {
			return err
		}
		if err := p.Reacquire(); err != nil {
			return err
		}
		if err := poisonBlocks(e.s, p, all(len(lens))); err != nil {
			return err
		}
		m, dt2, err := mv.restore(ctx)
		if err != nil {
			return err
		}
		after, reach, err := checkBlocks(e.s, p, all(len(lens)), l.moved)
		if err != nil {
			return err
		}
		ident.see(round, GateIdentical(before, after, nil))
		reaches = append(reaches, reach...)
		if warm.sample(dt + dt2) { // the first rounds warm up until they settle
			spillS = append(spillS, gbps(n, dt))
			restoreS = append(restoreS, gbps(m, dt2))
		}
	}
	if err := freeSlots(slots); err != nil {
		return err
	}
	r := results.Result{Name: string(e.cell.Scenario), Params: e.params("blocks", fmt.Sprint(len(lens))),
		Metrics: bandwidthMetrics(c, spillS, restoreS), Warnings: ceilingWarnings(c, spillS, restoreS)}
	r.Gates = append(r.Gates, ident.gate(GIdentical), GateReached(reaches), GateStranded([]tier.Tier{t}, nil))
	floor := e.cfg.Floor
	if e.cell.Tier == tier.Pinned {
		floor = e.cfg.HibernatePinnedFloor
	}
	r.Gates = append(r.Gates, bandwidthGates(c, mv.timer, spillS, restoreS, floor)...)
	e.add(r)
	return nil
}

// ---- partial ----

func runPartial(ctx context.Context, e *cellEnv) error {
	lens, t, p, before, slots, err := e.evenSlots()
	if err != nil {
		return err
	}
	defer freeSlots(slots)
	rng := rand.New(rand.NewPCG(e.cfg.Seed, 1))
	for _, pct := range []int{25, 50, 75} {
		k := max(1, len(lens)*pct/100)
		idx := rng.Perm(len(lens))[:k]
		sort.Ints(idx)
		var moved int64
		var movedLens []int64
		for _, i := range idx {
			moved += lens[i]
			movedLens = append(movedLens, lens[i])
		}
		c := e.ceilFor(ctx, moved, [][]int64{movedLens})
		l := newLane(e.s, p, slots, idx)
		mv := newMover(e.cfg, e.cell.Tier, l)
		defer mv.close()
		var spillS, restoreS []float64
		var reaches []Reach
		var ident, over firstFail
		warm := newWarmRounds()
		for round := 0; len(spillS) < e.cfg.Samples; round++ {
			n, dt, err := mv.spill(ctx)
			if err != nil {
				return err
			}
			// Another tenant takes the freed blocks and writes its own data.
			for _, i := range idx {
				if e.cfg.mut.tenantNoWrite {
					break
				}
				if err := p.Fill(e.s, i, e.cfg.Seed^0x7e4a47); err != nil {
					return err
				}
			}
			tenant, _, err := checkBlocks(e.s, p, nil, nil)
			if err != nil {
				return err
			}
			var same []string
			for _, i := range idx {
				if tenant[i] == before[i] {
					same = append(same, fmt.Sprint(i))
				}
			}
			if len(same) > 0 {
				over.see(round, fail("overwritten", "the other tenant's writes left blocks %v unchanged, so the restore proves nothing", same))
			} else {
				over.see(round, pass("overwritten", "the other tenant overwrote all %d freed blocks before the restore", len(idx)))
			}
			if err := poisonBlocks(e.s, p, idx); err != nil {
				return err
			}
			m, dt2, err := mv.restore(ctx)
			if err != nil {
				return err
			}
			after, reach, err := checkBlocks(e.s, p, idx, l.moved)
			if err != nil {
				return err
			}
			// Every block, the resident ones too, must be as it was.
			ident.see(round, GateIdentical(before, after, nil))
			reaches = append(reaches, reach...)
			if warm.sample(dt + dt2) {
				spillS = append(spillS, gbps(n, dt))
				restoreS = append(restoreS, gbps(m, dt2))
			}
		}
		r := results.Result{Name: string(e.cell.Scenario), Params: e.params("fraction", fmt.Sprint(pct), "blocks", fmt.Sprint(len(lens))),
			Metrics: bandwidthMetrics(c, spillS, restoreS), Warnings: ceilingWarnings(c, spillS, restoreS)}
		r.Gates = append(r.Gates, ident.gate(GIdentical), GateReached(reaches), over.gate("overwritten"))
		r.Gates = append(r.Gates, bandwidthGates(c, mv.timer, spillS, restoreS, e.cfg.Floor)...)
		e.add(r)
	}
	if err := freeSlots(slots); err != nil {
		return err
	}
	e.results[len(e.results)-1].Gates = append(e.results[len(e.results)-1].Gates, GateStranded([]tier.Tier{t}, nil))
	return nil
}

// ---- restore gate ----

// restoreGate lets compute start only after a restore is verified.
type restoreGate struct {
	verified bool
	computed int
	refusal  string
	reaches  []Reach
	mut      mutations
}

// verify reads back every restored block: it passes only when each reached
// its full length and hashes as before. A refusal quotes measured bytes.
func (g *restoreGate) verify(s gpu.Stream, p *tier.Pool, idx []int, before []uint64, reported []int64) error {
	g.verified = false
	after, reach, err := checkBlocks(s, p, idx, reported)
	if err != nil {
		return err
	}
	if g.mut.quoteRequested {
		for i := range reach {
			reach[i].Measured = reach[i].Requested
		}
	}
	g.reaches = reach
	for _, r := range reach {
		if r.Measured != r.Requested {
			g.refusal = fmt.Sprintf("block %d reached %d of %d bytes (measured)", r.Block, r.Measured, r.Requested)
			return nil
		}
		if after[r.Block] != before[r.Block] {
			g.refusal = fmt.Sprintf("block %d hashes %016x, was %016x", r.Block, after[r.Block], before[r.Block])
			return nil
		}
	}
	g.verified, g.refusal = true, ""
	return nil
}

// compute is the work that must not run on unverified bytes.
func (g *restoreGate) compute() error {
	if !g.verified && !g.mut.computeUnverified {
		return errors.New("compute refused: restore not verified: " + g.refusal)
	}
	g.computed++
	return nil
}

func runRestoreGate(ctx context.Context, e *cellEnv) error {
	c := e.ceil(ctx)
	lens, t, p, before, slots, err := e.evenSlots()
	if err != nil {
		return err
	}
	defer freeSlots(slots)
	idx := all(len(lens))
	l := newLane(e.s, p, slots, idx)
	mv := newMover(e.cfg, e.cell.Tier, l)
	defer mv.close()
	var spillS, restoreS, verifyMS []float64
	var reaches []Reach
	var ident, gated firstFail
	warm := newWarmRounds()
	for round := 0; len(spillS) < e.cfg.Samples; round++ {
		n, dt, err := mv.spill(ctx)
		if err != nil {
			return err
		}
		if err := poisonBlocks(e.s, p, idx); err != nil {
			return err
		}
		m, dt2, err := mv.restore(ctx)
		if err != nil {
			return err
		}
		g := restoreGate{mut: e.cfg.mut}
		vs := time.Now()
		if err := g.verify(e.s, p, idx, before, l.moved); err != nil {
			return err
		}
		vt := time.Since(vs)
		cerr := g.compute()
		switch {
		case g.verified && (cerr != nil || g.computed != 1):
			gated.see(round, fail("compute-gated", "verified restore, yet compute did not run: %v", cerr))
		case !g.verified && g.computed != 0:
			gated.see(round, fail("compute-gated", "compute ran on an unverified restore (%s)", g.refusal))
		case g.verified:
			gated.see(round, pass("compute-gated", "compute started only after the restore was verified"))
		default:
			gated.see(round, pass("compute-gated", "compute held back: %s", g.refusal))
		}
		after, _, _ := checkBlocks(e.s, p, nil, nil)
		ident.see(round, GateIdentical(before, after, nil))
		reaches = append(reaches, g.reaches...)
		if warm.sample(dt + dt2) {
			spillS = append(spillS, gbps(n, dt))
			restoreS = append(restoreS, gbps(m, dt2))
			verifyMS = append(verifyMS, float64(vt)/float64(time.Millisecond))
		}
	}

	// A deliberately short restore: the last block loses its tail. The gate
	// must refuse, hold compute back, and quote the measured reach.
	short := int64(4096 + 13)
	j := len(lens) - 1
	var caught results.Gate
	var missing []float64
	if _, _, err := mv.spill(ctx); err != nil {
		return err
	}
	if err := poisonBlocks(e.s, p, idx); err != nil {
		return err
	}
	rep, _, _, err := restoreBlocks(ctx, e.s, p, idx[:j], slots)
	if err != nil {
		return err
	}
	b := p.Blocks()[j]
	want := slots[j].Filled() - short
	if rep[j], err = slots[j].Restore(ctx, e.s, p.Buffer(), b.Off, want); err != nil {
		return err
	}
	g := restoreGate{mut: e.cfg.mut}
	if err := g.verify(e.s, p, idx, before, rep); err != nil {
		return err
	}
	computeErr := g.compute()
	second, _ := p.Check(e.s, j) // an independent read-back
	var quoted int64 = -1
	for _, r := range g.reaches {
		if r.Block == j {
			quoted = r.Measured
		}
	}
	switch {
	case g.verified:
		caught = fail("short-caught", "a restore of block %d missing %d bytes passed verification", j, b.Len-rep[j])
	case computeErr == nil || g.computed != 0:
		caught = fail("short-caught", "compute started on a short restore")
	case quoted != second.Reached:
		caught = fail("short-caught", "the gate quoted %d bytes for block %d; a read-back measures %d", quoted, j, second.Reached)
	case quoted >= b.Len:
		caught = fail("short-caught", "the gate quoted the requested %d bytes for block %d, not the measured reach", quoted, j)
	default:
		caught = pass("short-caught", "short restore refused before compute: %s", g.refusal)
		missing = append(missing, float64(b.Len-quoted))
	}
	if err := freeSlots(slots); err != nil {
		return err
	}

	ms := bandwidthMetrics(c, spillS, restoreS)
	ms = append(ms, metric("verify", "ms", results.LowerIsBetter, verifyMS...))
	if len(missing) > 0 {
		ms = append(ms, metric("short_missing", "B", results.LowerIsBetter, missing...))
	} else {
		ms = append(ms, unmeasured("short_missing", "B", results.LowerIsBetter, "the short restore was not caught"))
	}
	r := results.Result{Name: string(e.cell.Scenario), Params: e.params("blocks", fmt.Sprint(len(lens))), Metrics: ms,
		Warnings: ceilingWarnings(c, spillS, restoreS)}
	r.Gates = append(r.Gates, ident.gate(GIdentical), GateReached(reaches), gated.gate("compute-gated"), caught, GateStranded([]tier.Tier{t}, nil))
	r.Gates = append(r.Gates, bandwidthGates(c, mv.timer, spillS, restoreS, e.cfg.Floor)...)
	e.add(r)
	return nil
}

func negate(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = -x
	}
	return out
}

// ---- uneven shards ----

// shardShares are the relative shard sizes: unequal on purpose.
var shardShares = []int64{1, 2, 3, 5, 8}

func runUneven(ctx context.Context, e *cellEnv) error {
	var total int64
	for _, s := range shardShares {
		total += s
	}
	blockLen := max(64<<10, e.cell.Size/int64(e.cfg.Blocks))
	type shard struct {
		p      *tier.Pool
		before []uint64
		s      gpu.Stream
		slots  []tier.Slot
	}
	var shards []*shard
	var allLens []int64
	for k, share := range shardShares {
		size := e.cell.Size * share / total / 4096 * 4096
		n := int(max(1, size/blockLen))
		lens := tier.EvenBlocks(size, n)
		allLens = append(allLens, lens...)
		p, before, err := e.pool(lens, e.cfg.Seed+uint64(k))
		if err != nil {
			return err
		}
		s, err := e.dev.NewStream()
		if err != nil {
			return err
		}
		e.closers = append(e.closers, s.Close)
		shards = append(shards, &shard{p: p, before: before, s: s})
	}
	// Held to the same shards' blocks moved at once, one stream each.
	var layout [][]int64
	for _, sh := range shards {
		var lens []int64
		for _, b := range sh.p.Blocks() {
			lens = append(lens, b.Len)
		}
		layout = append(layout, lens)
	}
	c := e.ceilFor(ctx, e.cell.Size, layout)
	t, err := e.openTier(e.cell.Tier, capFor(allLens), 0)
	if err != nil {
		return err
	}
	// One lane per shard, all moved at once: queued, then waited for.
	var lanes []*lane
	for _, sh := range shards {
		if sh.slots, err = allocSlots(t, sh.p, all(len(sh.p.Blocks()))); err != nil {
			return err
		}
		defer freeSlots(sh.slots)
		lanes = append(lanes, newLane(sh.s, sh.p, sh.slots, all(len(sh.p.Blocks()))))
	}
	mv := newMover(e.cfg, e.cell.Tier, lanes...)
	defer mv.close()
	var spillS, restoreS []float64
	var reaches []Reach
	var ident firstFail
	warm := newWarmRounds()
	for round := 0; len(spillS) < e.cfg.Samples; round++ {
		n, dt, err := mv.spill(ctx)
		if err != nil {
			return err
		}
		for _, sh := range shards {
			if err := poisonBlocks(sh.s, sh.p, all(len(sh.p.Blocks()))); err != nil {
				return err
			}
		}
		m, dt2, err := mv.restore(ctx)
		if err != nil {
			return err
		}
		for i, sh := range shards {
			after, reach, err := checkBlocks(sh.s, sh.p, all(len(sh.p.Blocks())), lanes[i].moved)
			if err != nil {
				return err
			}
			g := GateIdentical(sh.before, after, nil)
			if !g.Pass {
				g.Reason = fmt.Sprintf("shard %d: %s", i, g.Reason)
			}
			ident.see(round, g)
			reaches = append(reaches, reach...)
		}
		if warm.sample(dt + dt2) {
			spillS = append(spillS, gbps(n, dt))
			restoreS = append(restoreS, gbps(m, dt2))
		}
	}
	for _, sh := range shards {
		if err := freeSlots(sh.slots); err != nil {
			return err
		}
	}
	r := results.Result{Name: string(e.cell.Scenario), Params: e.params("shares", "1:2:3:5:8"), Metrics: bandwidthMetrics(c, spillS, restoreS),
		Warnings: ceilingWarnings(c, spillS, restoreS)}
	r.Gates = append(r.Gates, ident.gate(GIdentical), GateReached(reaches), GateStranded([]tier.Tier{t}, nil))
	r.Gates = append(r.Gates, bandwidthGates(c, mv.timer, spillS, restoreS, e.cfg.Floor)...)
	e.add(r)
	return nil
}
