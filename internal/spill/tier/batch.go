package tier

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
)

// queuer is a slot whose copies can be queued on a stream without waiting
// for them: device memory, and host memory the device copies to directly.
// Nothing a queue call issues counts as delivered until the stream is
// synced; settle then records what arrived.
type queuer interface {
	// queueSpill queues the copies of a spill from src[off:] and returns
	// the bytes queued; Filled is zero until settle.
	queueSpill(ctx context.Context, s gpu.Stream, src gpu.Buffer, off int64) (int64, error)
	// queueRestore queues the copies of the slot's first n bytes to dst[off:].
	queueRestore(ctx context.Context, s gpu.Stream, dst gpu.Buffer, off, n int64) (int64, error)
	// settleSpill records the bytes a synced spill delivered.
	settleSpill(n int64)
}

// asQueuer returns the queue path of a slot, if it has one. A fault-injected
// slot queues with its faults, except a corrupting one, which must see the
// restored bytes before it can flip one and so takes the synchronous path.
func asQueuer(s Slot) (queuer, bool) {
	switch v := s.(type) {
	case *faultSlot:
		if v.f.Corrupt {
			return nil, false
		}
		q, ok := asQueuer(v.Slot)
		if !ok {
			return nil, false
		}
		return faultQueuer{q: q, f: v.f}, true
	case queuer:
		return v, true
	}
	return nil, false
}

// QueueOnly reports whether a move of s only queues work on its stream:
// the slot has a queue path and the host neither syncs in the move (a
// corrupting fault reads the restored bytes back) nor sleeps (a stall
// fault). Only such moves can be queued behind a gpu.Gate: a sync there
// never returns, and a stall, the slowness the bandwidth gates must see,
// would be hidden.
func QueueOnly(s Slot) bool {
	if fs, ok := s.(*faultSlot); ok && fs.f.Stall > 0 {
		return false
	}
	_, ok := asQueuer(s)
	return ok
}

type faultQueuer struct {
	q queuer
	f Faults
}

func (f faultQueuer) queueSpill(ctx context.Context, s gpu.Stream, src gpu.Buffer, off int64) (int64, error) {
	time.Sleep(f.f.Stall)
	return f.q.queueSpill(ctx, s, src, off)
}

func (f faultQueuer) queueRestore(ctx context.Context, s gpu.Stream, dst gpu.Buffer, off, n int64) (int64, error) {
	time.Sleep(f.f.Stall)
	return f.q.queueRestore(ctx, s, dst, off, max(0, n-f.f.ShortRestore))
}

func (f faultQueuer) settleSpill(n int64) { f.q.settleSpill(n) }

// Batch moves many slots on one stream the way a real spill of many blocks
// does: every copy is queued back to back and the stream is synced once, in
// Wait. A wait per block would cost a round trip to the device each, which
// on device memory (a 16 MiB copy takes ~8 µs at 2 TB/s) costs more than
// the copy. Slots without a queue path (files: the bytes must be on the
// host before they are written) move synchronously when added, in order.
//
// A Batch is used by one goroutine at a time; after Wait it is empty and can
// be used again.
//
// Device-to-device copies go further: between Collect and Flush (or Wait),
// on a stream that can batch them (gpu.BatchCopier: CUDA launches one kernel
// for up to 64 copies), they are collected and issued together, so a move of
// many blocks costs one launch, not one driver call per block. Collected
// copies are issued after anything else queued on the stream meanwhile, so
// a caller collects only moves that nothing else on the stream depends on
// (a group of spills, or of restores, queued back to back).
type Batch struct {
	s       gpu.Stream
	items   []batchItem
	err     error
	dtod    *deferDtoD // nil: the stream cannot batch copies
	collect bool
}

// Collect starts collecting device-to-device copies until Flush or Wait.
func (b *Batch) Collect() { b.collect = b.dtod != nil }

// Flush issues the collected copies and stops collecting; an error is
// returned by Wait.
func (b *Batch) Flush() {
	if b.dtod != nil {
		if err := b.dtod.flush(); err != nil && b.err == nil {
			b.err = fmt.Errorf("batched device copies: %w", err)
		}
	}
	b.collect = false
}

// deferDtoD is the batch's stream as its slots see it: device-to-device
// copies are collected, everything else goes to the stream at once.
type deferDtoD struct {
	gpu.Stream
	bc      gpu.BatchCopier
	pending []gpu.DtoDCopy
}

func (d *deferDtoD) CopyDtoD(dst gpu.Buffer, dstOff int64, src gpu.Buffer, srcOff, n int64) error {
	d.pending = append(d.pending, gpu.DtoDCopy{Dst: dst, DstOff: dstOff, Src: src, SrcOff: srcOff, N: n})
	return nil
}

// flush issues the collected copies: one batch of many, or the one copy as
// it is.
func (d *deferDtoD) flush() error {
	p := d.pending
	d.pending = d.pending[:0]
	switch len(p) {
	case 0:
		return nil
	case 1:
		return d.Stream.CopyDtoD(p[0].Dst, p[0].DstOff, p[0].Src, p[0].SrcOff, p[0].N)
	}
	return d.bc.CopyDtoDBatch(p)
}

// stream is what the batch's slots queue on.
func (b *Batch) stream() gpu.Stream {
	if b.collect {
		return b.dtod
	}
	return b.s
}

type batchItem struct {
	q      queuer // nil: moved synchronously, got is final
	spill  bool
	queued int64
	got    int64
}

// NewBatch returns an empty batch on stream s.
func NewBatch(s gpu.Stream) *Batch {
	b := &Batch{s: s}
	if bc, ok := s.(gpu.BatchCopier); ok {
		b.dtod = &deferDtoD{Stream: s, bc: bc}
	}
	return b
}

// Spill adds the spill of slot from src[off:]. After the first error the
// batch queues nothing more; Wait returns the error.
func (b *Batch) Spill(ctx context.Context, slot Slot, src gpu.Buffer, off int64) {
	it := batchItem{spill: true}
	if b.err == nil {
		if q, ok := asQueuer(slot); ok {
			it.q = q
			it.queued, b.err = q.queueSpill(ctx, b.stream(), src, off)
		} else {
			it.got, b.err = slot.Spill(ctx, b.s, src, off)
		}
		if b.err != nil {
			b.err = fmt.Errorf("spill %d of the batch: %w", len(b.items), b.err)
		}
	}
	b.items = append(b.items, it)
}

// Restore adds the restore of slot's first n bytes to dst[off:].
func (b *Batch) Restore(ctx context.Context, slot Slot, dst gpu.Buffer, off, n int64) {
	var it batchItem
	if b.err == nil {
		if q, ok := asQueuer(slot); ok {
			it.q = q
			it.queued, b.err = q.queueRestore(ctx, b.stream(), dst, off, n)
		} else {
			it.got, b.err = slot.Restore(ctx, b.s, dst, off, n)
		}
		if b.err != nil {
			b.err = fmt.Errorf("restore %d of the batch: %w", len(b.items), b.err)
		}
	}
	b.items = append(b.items, it)
}

// Wait syncs the stream once and returns the bytes each move delivered, in
// the order they were added. If the sync fails, no queued byte counts as
// delivered. The batch is then empty.
func (b *Batch) Wait() ([]int64, error) {
	b.Flush()
	serr := b.s.Sync()
	got := make([]int64, len(b.items))
	for i, it := range b.items {
		if it.q == nil {
			got[i] = it.got
			continue
		}
		if serr == nil {
			got[i] = it.queued
		}
		if it.spill {
			it.q.settleSpill(got[i])
		}
	}
	err := errors.Join(b.err, serr)
	b.items, b.err = b.items[:0], nil
	return got, err
}

// Len is the number of moves added since the last Wait.
func (b *Batch) Len() int { return len(b.items) }

// queued is what a copy call queued: all of c, or nothing when it failed.
func queued(c int64, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return c, nil
}
