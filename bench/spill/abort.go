package spill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/spill/tier"
	"github.com/mstar-dev/mstar/reports/results"
)

// cancelAfter is a stream that cancels a context once it has issued n
// copies: a deterministic "mid-flight".
type cancelAfter struct {
	gpu.Stream
	n      int
	cancel func()
}

func (c *cancelAfter) tick() {
	if c.n--; c.n == 0 {
		c.cancel()
	}
}

func (c *cancelAfter) CopyDtoH(dst []byte, src gpu.Buffer, off int64) error {
	c.tick()
	return c.Stream.CopyDtoH(dst, src, off)
}

func (c *cancelAfter) CopyDtoD(dst gpu.Buffer, dstOff int64, src gpu.Buffer, srcOff, n int64) error {
	c.tick()
	return c.Stream.CopyDtoD(dst, dstOff, src, srcOff, n)
}

// Abort: a spill of the whole pool is cancelled in the middle of a block.
// The operation failed as a whole, so every slot it reserved — the blocks it
// finished and the one it was writing — belongs to nobody: the ledger holds
// them as stranded bytes, measured, until the TTL passes and they are
// reclaimed. The device copy stays authoritative throughout.
func runAbort(ctx context.Context, e *cellEnv) error {
	lens := tier.EvenBlocks(e.cell.Size, e.cfg.Blocks)
	// Chunks of a quarter block, so that the cancel lands inside a block.
	chunk := max(4096, lens[0]/4/4096*4096)
	// Room for the stranded slots and a clean retry beside them.
	t, err := e.openTier(e.cell.Tier, 2*capFor(lens), chunk)
	if err != nil {
		return err
	}
	p, before, err := e.pool(lens, e.cfg.Seed)
	if err != nil {
		return err
	}
	ledger := tier.NewLedger(e.cfg.TTL)
	var gates []results.Gate

	// Cancel during the third chunk of the middle block.
	mid := len(lens) / 2
	copies := 0
	for _, l := range lens[:mid] {
		copies += int((l + chunk - 1) / chunk)
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs := &cancelAfter{Stream: e.s, n: copies + 3, cancel: cancel}
	slots, _, _, err := spillBlocks(actx, cs, t, p, all(len(lens)))
	if !errors.Is(err, context.Canceled) {
		freeSlots(slots)
		return fmt.Errorf("the spill was to be cancelled mid-flight, it ended with %v", err)
	}
	strandedAt := time.Now()
	for _, s := range slots {
		if s != nil && !e.cfg.mut.strandNothing {
			ledger.Strand(s, "spill cancelled", strandedAt)
		}
	}
	st := ledger.Stranded()
	used := t.Used()
	// The tier's own count is the measurement; the ledger must agree with it
	// (segment tiers round each slot up to a page).
	switch {
	case st.Bytes == 0:
		gates = append(gates, fail("abort-stranded", "a cancelled spill left %d bytes in the tier, reported as 0 stranded", used))
	case used < st.Bytes || used-st.Bytes >= int64(st.Slots)*4096:
		gates = append(gates, fail("abort-stranded", "ledger reports %d stranded bytes, the tier holds %d", st.Bytes, used))
	case st.Written <= 0 || st.Written >= st.Bytes:
		gates = append(gates, fail("abort-stranded", "the cancel did not land mid-flight: %d of %d stranded bytes written", st.Written, st.Bytes))
	default:
		gates = append(gates, pass("abort-stranded", "cancelled mid-block: %d slots, %d bytes stranded (%d written), matching the tier's %d", st.Slots, st.Bytes, st.Written, used))
	}
	// The device pool is untouched by an aborted spill.
	mid1, err := p.Hashes(e.s)
	if err != nil {
		return err
	}
	g := GateIdentical(before, mid1, nil)
	g.Name = "device-intact"
	gates = append(gates, g)

	// Before the TTL nothing is reclaimed; after it, everything.
	earlyAt := strandedAt.Add(e.cfg.TTL / 2)
	if e.cfg.mut.reclaimEarly {
		earlyAt = strandedAt.Add(e.cfg.TTL)
	}
	early, err := ledger.Reclaim(earlyAt)
	if err != nil {
		return err
	}
	time.Sleep(time.Until(strandedAt.Add(e.cfg.TTL)))
	freed, err := ledger.Reclaim(time.Now())
	if err != nil {
		return err
	}
	reclaimAfter := time.Since(strandedAt)
	switch {
	case early.Bytes != 0:
		gates = append(gates, fail("ttl", "%d bytes reclaimed before the %s TTL", early.Bytes, e.cfg.TTL))
	case freed.Bytes != st.Bytes || t.Used() != 0 || freed.Bytes == 0:
		gates = append(gates, fail("ttl", "after the TTL %d of %d stranded bytes reclaimed; the tier still holds %d", freed.Bytes, st.Bytes, t.Used()))
	default:
		gates = append(gates, pass("ttl", "held for the %s TTL, then all %d bytes reclaimed", e.cfg.TTL, freed.Bytes))
	}

	// The tier works after the abort: a clean round trip.
	slots, n, dt, err := spillBlocks(ctx, e.s, t, p, all(len(lens)))
	if err != nil {
		freeSlots(slots)
		return err
	}
	poisonBlocks(e.s, p, all(len(lens)))
	rep, m, dt2, err := restoreBlocks(ctx, e.s, p, all(len(lens)), slots)
	if err != nil {
		freeSlots(slots)
		return err
	}
	after, reach, err := checkBlocks(e.s, p, all(len(lens)), rep)
	if err != nil {
		return err
	}
	freeSlots(slots)
	gates = append(gates, GateIdentical(before, after, nil), GateReached(reach), GateStranded([]tier.Tier{t}, ledger))
	r := results.Result{Name: string(e.cell.Scenario), Params: e.params("ttl", e.cfg.TTL.String()),
		Metrics: []results.Metric{
			metric("stranded", "MiB", results.LowerIsBetter, float64(st.Bytes)/(1<<20)),
			metric("stranded_written", "MiB", results.LowerIsBetter, float64(st.Written)/(1<<20)),
			metric("reclaimed", "MiB", results.HigherIsBetter, float64(freed.Bytes)/(1<<20)),
			metric("reclaim_after", "ms", results.LowerIsBetter, float64(reclaimAfter)/float64(time.Millisecond)),
			metric("retry_spill", "GB/s", results.HigherIsBetter, gbps(n, dt)),
			metric("retry_restore", "GB/s", results.HigherIsBetter, gbps(m, dt2)),
		},
		Gates: gates}
	e.add(r)
	return nil
}
