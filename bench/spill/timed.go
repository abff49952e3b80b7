package spill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/spill/tier"
)

// lane is blocks of one pool moved on one stream: a cell's pool, one shard
// of the uneven cell, or a lane of a ceiling. Everything a move needs is
// made with it, so that a timed move allocates and prepares nothing.
type lane struct {
	s     gpu.Stream
	p     *tier.Pool
	slots []tier.Slot // by block
	idx   []int       // the blocks a move moves
	b     *tier.Batch
	moved []int64 // by block: what the last move delivered
}

func newLane(s gpu.Stream, p *tier.Pool, slots []tier.Slot, idx []int) *lane {
	return &lane{s: s, p: p, slots: slots, idx: idx, b: tier.NewBatch(s), moved: make([]int64, len(p.Blocks()))}
}

func (l *lane) bytes() int64 {
	var n int64
	for _, i := range l.idx {
		n += l.p.Blocks()[i].Len
	}
	return n
}

// queue adds the lane's moves to its batch; nothing waits.
func (l *lane) queue(ctx context.Context, spill bool) {
	for _, i := range l.idx {
		off := l.p.Blocks()[i].Off
		if spill {
			l.b.Spill(ctx, l.slots[i], l.p.Buffer(), off)
		} else {
			l.b.Restore(ctx, l.slots[i], l.p.Buffer(), off, l.slots[i].Filled())
		}
	}
}

// wait waits for the lane's batch and records what each block got.
func (l *lane) wait() (int64, error) {
	got, err := l.b.Wait()
	var n int64
	for k, i := range l.idx {
		l.moved[i] = got[k]
		n += got[k]
	}
	return n, err
}

// mover times moves of lanes at once. The cells with a bandwidth gate and
// their ceilings all move through it, so that a cell and its ceiling time
// the same thing the same way.
//
// Device-tier moves on CUDA are timed on the device: the eviction, a start
// event, every lane's copies and an end event per lane are queued from one
// goroutine, then each lane is waited for once. The copies are queued while
// the eviction runs, as a serving process queues a spill behind earlier
// work, so the interval holds the copies, not the launch, the wake-up from
// the wait or goroutine start-up: by estimate ~10 µs per move, a third of a
// 64 MiB move (~30 µs on an H200), and most of its noise. Where the device
// can (gpu.Gater) every lane's stream is first held behind a gate that
// opens once everything is queued, so a host made late by the work between
// moves (a cold thread after the cells' hashing) cannot leave the device
// idle between the start event and the copies inside the interval: the
// likely cause of 64 MiB partial moves reading 69–77% of their ceiling,
// single samples 4% (GOGC=off did not change it).
// A move whose slots wait or sleep on the host (faults injected) is not
// gated: its sync would wait for a gate that opens only after it.
//
// Elsewhere (other tiers; the CPU backend, whose streams copy inside the
// call) the host clock runs from after the eviction's wait to the last
// lane's wait, each lane on its own goroutine so that synchronous tiers
// (files, pageable memory) still move at once.
type mover struct {
	lanes  []*lane
	order  []int // lanes in the order they are queued: the largest first, as it finishes last
	events bool
	gate   gpu.Gate // device-timed moves are held behind it; nil: ungated
	timer  string   // how the moves are timed, for gate reasons; "" for the host clock
	now    func() time.Time
}

// eventTimed says whether moves to kind on dev are timed by device events.
func eventTimed(dev gpu.Device, kind tier.Kind) bool {
	return kind == tier.Device && dev.Info().Backend == gpu.CUDA
}

// eventTimer is the timer note of device-timed moves.
const eventTimer = "device time between CUDA events on the copies' streams, the copies queued behind the eviction"

// newMover makes a mover of lanes whose slots are in place; close releases
// its gate.
func newMover(cfg *Config, kind tier.Kind, lanes ...*lane) *mover {
	m := &mover{lanes: lanes, events: eventTimed(cfg.Dev, kind), now: cfg.now}
	if m.now == nil {
		m.now = time.Now
	}
	for k := range lanes {
		m.order = append(m.order, k)
	}
	slices.SortStableFunc(m.order, func(a, b int) int { return cmp.Compare(lanes[b].bytes(), lanes[a].bytes()) })
	if m.events {
		var why string
		if m.gate, why = newGate(cfg.Dev, lanes); m.gate != nil {
			m.timer = eventTimer + ", both held behind a gate opened after queueing"
		} else {
			m.timer = eventTimer + "; ungated: " + why
		}
	}
	return m
}

// newGate makes the gate of a mover's device-timed moves, or says why they
// run without one.
func newGate(dev gpu.Device, lanes []*lane) (gpu.Gate, string) {
	for _, l := range lanes {
		for _, i := range l.idx {
			if !tier.QueueOnly(l.slots[i]) {
				return nil, "a slot's move waits or sleeps on the host (a fault injected)"
			}
		}
	}
	gt, ok := dev.(gpu.Gater)
	if !ok {
		return nil, dev.Info().ID + " cannot hold streams"
	}
	g, err := gt.NewGate()
	if err != nil {
		return nil, err.Error()
	}
	return g, ""
}

// close releases the mover's gate.
func (m *mover) close() error {
	if m.gate == nil {
		return nil
	}
	err := m.gate.Close()
	m.gate = nil
	return err
}

// spill spills every lane's blocks from a cold cache and returns the bytes
// moved and the time.
func (m *mover) spill(ctx context.Context) (int64, time.Duration, error) {
	n, dt, err := m.move(ctx, true)
	if err != nil {
		return n, dt, fmt.Errorf("spilling: %w", err)
	}
	return n, dt, nil
}

// restore restores them; each lane's moved holds what every block got.
func (m *mover) restore(ctx context.Context) (int64, time.Duration, error) {
	n, dt, err := m.move(ctx, false)
	if err != nil {
		return n, dt, fmt.Errorf("restoring: %w", err)
	}
	return n, dt, nil
}

func (m *mover) move(ctx context.Context, spill bool) (int64, time.Duration, error) {
	for _, l := range m.lanes {
		clear(l.moved)
		l.b.Collect() // device copies: one batched launch per lane
	}
	if m.events {
		return m.timeEvents(ctx, spill)
	}
	return m.timeWall(ctx, spill)
}

func (m *mover) timeEvents(ctx context.Context, spill bool) (int64, time.Duration, error) {
	start, ends, errs := m.queueEvents(ctx, spill)
	if m.gate != nil {
		// Always, and before any wait: nothing held runs until it opens.
		if err := m.gate.Open(); err != nil {
			closeEvents(start, ends)
			return 0, 0, errors.Join(append(errs, fmt.Errorf("opening the gate (the lanes' streams stay held): %w", err))...)
		}
	}
	if start == nil {
		return 0, 0, errors.Join(errs...)
	}
	defer start.Close()
	var n int64
	for _, k := range m.order {
		got, err := m.lanes[k].wait()
		n += got
		errs = append(errs, laneErr(len(m.lanes), k, err))
	}
	var dt time.Duration
	for _, end := range ends {
		if end == nil {
			continue
		}
		if d, err := end.Since(start); err != nil {
			errs = append(errs, err)
		} else {
			dt = max(dt, d)
		}
		end.Close()
	}
	return n, dt, errors.Join(errs...)
}

// queueEvents queues a device-timed move: with a gate, a hold on every
// lane's stream, then the eviction, the start event, and every lane's
// copies and end event. start is nil when nothing was queued to time.
func (m *mover) queueEvents(ctx context.Context, spill bool) (start gpu.Event, ends []gpu.Event, errs []error) {
	first := m.lanes[m.order[0]].s
	if m.gate != nil {
		for _, k := range m.order {
			if err := m.gate.Hold(m.lanes[k].s); err != nil {
				return nil, nil, []error{fmt.Errorf("holding the streams of a timed move: %w", err)}
			}
		}
	}
	if ev, ok := first.(gpu.CacheEvicter); ok {
		// Not waited for: the copies are queued behind it while it runs.
		if err := ev.EvictCache(); err != nil {
			return nil, nil, []error{fmt.Errorf("evicting the cache before a timed move: %w", err)}
		}
	}
	start, err := first.Record()
	if err != nil {
		return nil, nil, []error{err}
	}
	ends = make([]gpu.Event, len(m.lanes))
	for _, k := range m.order {
		l := m.lanes[k]
		if l.s != first {
			// Cold for every lane: none starts before the eviction ends.
			if err := l.s.WaitEvent(start); err != nil {
				errs = append(errs, err)
			}
		}
		l.queue(ctx, spill)
		l.b.Flush()
		if ends[k], err = l.s.Record(); err != nil {
			errs = append(errs, err)
		}
	}
	return start, ends, errs
}

// closeEvents releases the events of a move that cannot be waited for.
func closeEvents(start gpu.Event, ends []gpu.Event) {
	for _, e := range append(ends, start) {
		if e != nil {
			e.Close()
		}
	}
}

func (m *mover) timeWall(ctx context.Context, spill bool) (int64, time.Duration, error) {
	if err := evictCache(m.lanes[m.order[0]].s); err != nil {
		return 0, 0, err
	}
	got := make([]int64, len(m.lanes))
	errs := make([]error, len(m.lanes))
	run := func(k int) {
		m.lanes[k].queue(ctx, spill)
		got[k], errs[k] = m.lanes[k].wait()
		errs[k] = laneErr(len(m.lanes), k, errs[k])
	}
	start := m.now()
	if len(m.lanes) == 1 {
		run(0)
	} else {
		var wg sync.WaitGroup
		for _, k := range m.order {
			wg.Go(func() { run(k) })
		}
		wg.Wait()
	}
	dt := m.now().Sub(start)
	var n int64
	for _, g := range got {
		n += g
	}
	return n, dt, errors.Join(errs...)
}

func laneErr(lanes, k int, err error) error {
	if err == nil || lanes == 1 {
		return err
	}
	return fmt.Errorf("lane %d: %w", k, err)
}
