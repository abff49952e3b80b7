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
// work, so the interval holds the copies (and any idle time a slow host
// leaves), not the launch, the wake-up from the wait or goroutine start-up:
// by estimate ~10 µs per move, a third of a 64 MiB move (~30 µs on an H200),
// and most of its noise. Elsewhere (other tiers; the CPU backend, whose
// streams copy inside the call) the host clock runs from after the
// eviction's wait to the last lane's wait, each lane on its own goroutine
// so that synchronous tiers (files, pageable memory) still move at once.
type mover struct {
	lanes  []*lane
	order  []int // lanes in the order they are queued: the largest first, as it finishes last
	events bool
	now    func() time.Time
}

// eventTimed says whether moves to kind on dev are timed by device events.
func eventTimed(dev gpu.Device, kind tier.Kind) bool {
	return kind == tier.Device && dev.Info().Backend == gpu.CUDA
}

// timerNote says how moves to kind on dev are timed, for gate reasons;
// "" for the host clock.
func timerNote(dev gpu.Device, kind tier.Kind) string {
	if eventTimed(dev, kind) {
		return "device time between CUDA events on the copies' streams, the copies queued behind the eviction"
	}
	return ""
}

func newMover(cfg *Config, kind tier.Kind, lanes ...*lane) *mover {
	m := &mover{lanes: lanes, events: eventTimed(cfg.Dev, kind), now: cfg.now}
	if m.now == nil {
		m.now = time.Now
	}
	for k := range lanes {
		m.order = append(m.order, k)
	}
	slices.SortStableFunc(m.order, func(a, b int) int { return cmp.Compare(lanes[b].bytes(), lanes[a].bytes()) })
	return m
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
	first := m.lanes[m.order[0]].s
	var errs []error
	if ev, ok := first.(gpu.CacheEvicter); ok {
		// Not waited for: the copies are queued behind it while it runs.
		if err := ev.EvictCache(); err != nil {
			return 0, 0, fmt.Errorf("evicting the cache before a timed move: %w", err)
		}
	}
	start, err := first.Record()
	if err != nil {
		return 0, 0, err
	}
	defer start.Close()
	ends := make([]gpu.Event, len(m.lanes))
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
