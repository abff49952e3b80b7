// Package regulator is a memory-pressure control loop over a pool of device
// blocks. Each tick it admits (or refuses) demand, measures headroom — the
// free fraction of the device budget after the pool and the demand — picks a
// rung of a ladder, and moves blocks through the tiers that rung allows:
//
//	0 resident       every block on the device
//	1 spill-pinned   cold blocks spilled to pinned host memory
//	2 spill-deep     pinned is not enough: further blocks to pageable, file or peer
//	3 refuse         everything spillable is out; new admissions are refused
//
// Hysteresis: a rung is climbed when the current one cannot hold headroom at
// Low even fully used, and descended only when the lower rung would settle at
// or above High; within a rung blocks are spilled when headroom falls below
// Low (until it reaches the middle of the band) and restored when it rises
// above High. Cooldown: after a rung change no other change for Cooldown
// ticks. Moves per tick are capped so that a tick's cost stays inside its
// interval.
//
// Decisions depend only on the demand and the pool's state, never on time
// or on tracing: the same demand gives the same decisions with a trace
// writer or without one (tracing is pure logging).
package regulator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/spill/tier"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/trace"
)

// Config tunes a regulator.
type Config struct {
	Budget    int64         // device bytes shared by the pool and the demand
	Low, High float64       // headroom band; 0 means 0.10 and 0.20
	Cooldown  int           // ticks after a rung change; 0 means 8
	Interval  time.Duration // tick interval for Run; 0 means 20 ms
	MaxMove   int64         // bytes moved per tick at most (at least one block); 0: no cap
	// AfterTick, when set, runs after each tick of Run, outside its cost:
	// what the rest of the process does with the memory between ticks (a
	// harness overwrites the blocks a tick spilled, as the demand would).
	AfterTick func(Decision) error
}

func (c *Config) defaults() {
	if c.Low == 0 {
		c.Low = 0.10
	}
	if c.High == 0 {
		c.High = 0.20
	}
	if c.Cooldown == 0 {
		c.Cooldown = 8
	}
	if c.Interval == 0 {
		c.Interval = 20 * time.Millisecond
	}
}

// Where a block is.
const (
	onDevice = iota
	inPinned
	inDeep
)

// Regulator drives one pool. Not safe for concurrent use.
type Regulator struct {
	cfg          Config
	pool         *tier.Pool
	s            gpu.Stream
	pinned, deep tier.Tier
	loc          []int
	slots        []tier.Slot
	order        []int // spilled blocks, in spill order (restored last-in first-out)
	rung         int
	lastChange   int
	demand       int64
	tick         int
}

// New returns a regulator over pool, spilling to pinned and then to deep.
// The pool's blocks are all on the device.
func New(cfg Config, pool *tier.Pool, s gpu.Stream, pinned, deep tier.Tier) (*Regulator, error) {
	if cfg.Cooldown < 0 || cfg.Interval < 0 {
		return nil, fmt.Errorf("regulator: cooldown %d ticks, interval %v: neither may be negative (0: the default)", cfg.Cooldown, cfg.Interval)
	}
	cfg.defaults()
	if cfg.Budget < pool.Bytes() {
		return nil, fmt.Errorf("regulator: budget %d bytes cannot hold the pool's %d", cfg.Budget, pool.Bytes())
	}
	if !(0 < cfg.Low && cfg.Low < cfg.High && cfg.High < 1) {
		return nil, fmt.Errorf("regulator: headroom band [%v, %v] must satisfy 0 < low < high < 1", cfg.Low, cfg.High)
	}
	n := len(pool.Blocks())
	return &Regulator{cfg: cfg, pool: pool, s: s, pinned: pinned, deep: deep,
		loc: make([]int, n), slots: make([]tier.Slot, n), lastChange: math.MinInt / 2}, nil
}

// Config returns the regulator's configuration with defaults filled in.
func (r *Regulator) Config() Config { return r.cfg }

// Decision is what one tick decided and did. It holds nothing that depends
// on time, so decisions compare equal across runs.
type Decision struct {
	Tick      int
	Requested int64 // demand asked for
	Demand    int64 // demand admitted
	Refused   int64
	Rung      int
	Changed   bool // the rung changed this tick
	Action    string
	Moved     int64
	Resident  int64 // pool bytes on the device after the tick
	HostTail  int64 // pool bytes beyond pinned memory (in the deep tier)
	Pinned    int64
	Headroom  float64 // after the tick
	Binding   string
	Spilled   []int // blocks spilled this tick, whose device memory is now free
}

// Tick is a decision with its timing.
type Tick struct {
	Decision
	Start    time.Time
	Interval time.Duration // since the previous tick began; 0 on the first
	Cost     time.Duration // the tick's own work
}

func (r *Regulator) bytesAt(where int) int64 {
	var n int64
	for i, b := range r.pool.Blocks() {
		if r.loc[i] == where {
			n += b.Len
		}
	}
	return n
}

func (r *Regulator) headroom(resident int64) float64 {
	return float64(r.cfg.Budget-resident-r.demand) / float64(r.cfg.Budget)
}

// spillable is how many pool bytes rung may keep off the device.
func (r *Regulator) spillable(rung int) int64 {
	total := r.pool.Bytes()
	room := func(t tier.Tier, held int64) int64 {
		if c := t.Capacity(); c >= 0 {
			return c - t.Used() + held
		}
		return total
	}
	switch rung {
	case 0:
		return 0
	case 1:
		return min(total, room(r.pinned, r.bytesAt(inPinned)))
	default:
		return min(total, room(r.pinned, r.bytesAt(inPinned))+room(r.deep, r.bytesAt(inDeep)))
	}
}

// settled is the headroom rung would reach with everything it may spill out.
func (r *Regulator) settled(rung int) float64 {
	return r.headroom(r.pool.Bytes() - r.spillable(rung))
}

// desired picks the rung from the settled headrooms, with hysteresis.
func (r *Regulator) desired() int {
	need := trace.RungRefuse
	for k := trace.RungResident; k <= trace.RungDeep; k++ {
		if r.settled(k) >= r.cfg.Low {
			need = k
			break
		}
	}
	if need >= r.rung {
		return need
	}
	// Descend only as far as a rung that settles at or above High.
	for k := need; k < r.rung; k++ {
		if r.settled(k) >= r.cfg.High {
			return k
		}
	}
	return r.rung
}

// Step runs one tick: admission, measurement, rung, moves.
func (r *Regulator) Step(ctx context.Context, requested int64) (Decision, error) {
	d := Decision{Tick: r.tick, Requested: requested}
	r.tick++
	if r.rung == trace.RungRefuse && requested > r.demand {
		d.Refused = requested - r.demand
	} else {
		r.demand = requested
	}
	var bind []string
	if want := r.desired(); want != r.rung {
		if d.Tick-r.lastChange >= r.cfg.Cooldown {
			r.rung, r.lastChange, d.Changed = want, d.Tick, true
		} else {
			bind = append(bind, "cooldown")
		}
	}
	moved, spilled, acts, mb, err := r.move(ctx)
	d.Moved, d.Spilled = moved, spilled
	bind = append(bind, mb...)
	if d.Refused > 0 {
		bind = append(bind, "admission")
		acts = append(acts, "refuse "+units.Bytes(d.Refused))
	}
	d.Rung = r.rung
	d.Resident = r.bytesAt(onDevice)
	d.Pinned = r.bytesAt(inPinned)
	d.HostTail = r.bytesAt(inDeep)
	d.Headroom = r.headroom(d.Resident)
	d.Demand = r.demand
	d.Action = join(acts, "none")
	d.Binding = join(bind, "none")
	return d, err
}

func join(s []string, empty string) string {
	if len(s) == 0 {
		return empty
	}
	out := s[0]
	for _, x := range s[1:] {
		out += "; " + x
	}
	return out
}

// move brings the pool toward the middle of the band within the rung's tiers.
func (r *Regulator) move(ctx context.Context) (moved int64, spilled []int, acts, bind []string, err error) {
	blocks := r.pool.Blocks()
	target := (r.cfg.Low + r.cfg.High) / 2
	capped := func() bool { return r.cfg.MaxMove > 0 && moved >= r.cfg.MaxMove }
	var nSpillP, nSpillD, nRestore int
	defer func() {
		if nSpillP > 0 {
			acts = append(acts, fmt.Sprintf("spill %d → pinned", nSpillP))
		}
		if nSpillD > 0 {
			acts = append(acts, fmt.Sprintf("spill %d → deep", nSpillD))
		}
		if nRestore > 0 {
			acts = append(acts, fmt.Sprintf("restore %d", nRestore))
		}
	}()
	restore := func(i int) error {
		b := blocks[i]
		got, err := r.slots[i].Restore(ctx, r.s, r.pool.Buffer(), b.Off, r.slots[i].Filled())
		moved += got
		if err != nil {
			return fmt.Errorf("restoring block %d: %w", i, err)
		}
		if err := r.slots[i].Free(); err != nil {
			return err
		}
		r.slots[i], r.loc[i] = nil, onDevice
		for k, j := range r.order {
			if j == i {
				r.order = append(r.order[:k], r.order[k+1:]...)
				break
			}
		}
		nRestore++
		return nil
	}
	// Blocks in tiers the rung no longer allows come home first (LIFO).
	for k := len(r.order) - 1; k >= 0 && !capped(); k-- {
		i := r.order[k]
		if (r.loc[i] == inDeep && r.rung < trace.RungDeep) || (r.loc[i] == inPinned && r.rung < trace.RungPinned) {
			if err := restore(i); err != nil {
				return moved, spilled, acts, bind, err
			}
		}
	}
	resident := r.bytesAt(onDevice)
	h := r.headroom(resident)
	switch {
	case r.rung > trace.RungResident && h < r.cfg.Low:
		bind = append(bind, "headroom")
		// Spill the coldest resident blocks (highest index first).
		for i := len(blocks) - 1; i >= 0 && r.headroom(resident) < target; i-- {
			if r.loc[i] != onDevice {
				continue
			}
			if capped() {
				bind = append(bind, "move-cap")
				break
			}
			dst, where := r.pinned, inPinned
			if r.pinned.Capacity() >= 0 && r.pinned.Capacity()-r.pinned.Used() < blocks[i].Len {
				if r.rung < trace.RungDeep {
					bind = append(bind, "pinned-capacity")
					break
				}
				dst, where = r.deep, inDeep
			}
			slot, err := dst.Alloc(blocks[i].Len)
			if errors.Is(err, tier.ErrFull) {
				bind = append(bind, string(dst.Kind())+"-capacity")
				break
			}
			if err != nil {
				return moved, spilled, acts, bind, err
			}
			got, err := slot.Spill(ctx, r.s, r.pool.Buffer(), blocks[i].Off)
			moved += got
			if err != nil || got != blocks[i].Len {
				slot.Free()
				return moved, spilled, acts, bind, fmt.Errorf("spilling block %d: %d of %d bytes: %v", i, got, blocks[i].Len, err)
			}
			r.slots[i], r.loc[i] = slot, where
			spilled = append(spilled, i)
			r.order = append(r.order, i)
			resident -= blocks[i].Len
			if where == inPinned {
				nSpillP++
			} else {
				nSpillD++
			}
		}
	case h > r.cfg.High:
		// Bring blocks back while headroom stays at the middle of the band.
		for k := len(r.order) - 1; k >= 0 && !capped(); k-- {
			i := r.order[k]
			if r.headroom(resident+blocks[i].Len) < target && r.rung > trace.RungResident {
				break
			}
			if err := restore(i); err != nil {
				return moved, spilled, acts, bind, err
			}
			resident += blocks[i].Len
		}
		if capped() && len(r.order) > 0 {
			bind = append(bind, "move-cap")
		}
	}
	return moved, spilled, acts, bind, nil
}

// Rung is the current rung.
func (r *Regulator) Rung() int { return r.rung }

// AllResident reports whether every block is on the device.
func (r *Regulator) AllResident() bool { return len(r.order) == 0 }

// Release frees every slot still held (restoring nothing); for cleanup after
// a failure.
func (r *Regulator) Release() error {
	var errs []error
	for i, s := range r.slots {
		if s != nil {
			errs = append(errs, s.Free())
			r.slots[i] = nil
		}
	}
	r.order = nil
	return errors.Join(errs...)
}

// Curve is a demand curve: the demand at each tick as a fraction of the
// budget.
type Curve struct {
	Name   string
	Ticks  int
	Demand func(tick int) float64
}

// Tracer receives a record per tick; a *trace.Writer is one.
type Tracer interface {
	Write(trace.Record) (bool, error)
}

// Run ticks through a curve at the configured interval, tracing each tick to
// tr (nil: no tracing) as session. The first trace write error is returned
// after the run; it never changes a decision.
func (r *Regulator) Run(ctx context.Context, c Curve, tr Tracer, session string) ([]Tick, error) {
	var out []Tick
	var traceErr error
	next := time.Now()
	var prev time.Time
	for k := 0; k < c.Ticks; k++ {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		if wait := time.Until(next); wait > 0 {
			time.Sleep(wait)
		}
		start := time.Now()
		d, err := r.Step(ctx, int64(c.Demand(k)*float64(r.cfg.Budget)))
		t := Tick{Decision: d, Start: start, Cost: time.Since(start)}
		if !prev.IsZero() {
			t.Interval = start.Sub(prev)
		}
		prev = start
		out = append(out, t)
		if tr != nil && traceErr == nil {
			_, traceErr = tr.Write(r.Record(t, session))
		}
		if err != nil {
			return out, err
		}
		if r.cfg.AfterTick != nil {
			if err := r.cfg.AfterTick(d); err != nil {
				return out, err
			}
		}
		next = start.Add(r.cfg.Interval)
		if now := time.Now(); next.Before(now) {
			next = now // an overrun does not make the next ticks catch up
		}
	}
	return out, traceErr
}

// Record turns a tick into a trace record.
func (r *Regulator) Record(t Tick, session string) trace.Record {
	rec := trace.Record{
		Session: session, Tick: int64(t.Tick), Time: t.Start,
		TargetUS: trace.US(r.cfg.Interval), CostUS: trace.US(t.Cost),
		Headroom: t.Headroom, Binding: t.Binding, HostTail: t.HostTail,
		Rung: t.Rung, RungName: trace.RungName(t.Rung), Action: t.Action, Moved: t.Moved,
		Demand: t.Demand, Resident: t.Resident, Budget: r.cfg.Budget, Refused: t.Refused,
		CooldownUS: trace.US(time.Duration(r.cfg.Cooldown) * r.cfg.Interval),
	}
	if t.Interval > 0 {
		rec.IntervalUS = trace.Ptr(trace.US(t.Interval))
	}
	return rec
}
