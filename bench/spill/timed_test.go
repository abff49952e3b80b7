package spill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/gpu/gputest"
	"github.com/mstar-dev/mstar/internal/spill/tier"
)

// op is one call a traceDevice saw, in the order the host made them.
type op struct {
	name   string // "alloc", "stream", "close", "htod", "dtoh", "dtod", "batch", "memset", "evict", "record", "wait", "sync", "since", "clock", "gate", "hold", "open", "gate-close"
	stream int    // the stream's number; 0 for none
	ev     int    // record, wait: the event; since: the end event
	start  int    // since: the start event
	lens   []int64
}

// traceDevice is the CPU backend with asynchronous streams (LazyStream:
// work runs at Sync, events are reached in order) that can evict the cache
// and batch copies, as CUDA's can, recording every call in order. With cuda
// set it says it is a CUDA device, so device-tier moves are timed by its
// events, and it can make gates (gpu.Gater) unless noGate is set. A stream
// synced while held behind a gate fails the sync: on a GPU it never returns.
type traceDevice struct {
	gpu.Device
	cuda    bool
	noGate  bool   // NewGate fails as on a device without stream memory operations
	failOn  string // the name of an op that fails when called: "evict", "batch", "hold"
	mu      sync.Mutex
	ops     []op
	held    map[int]bool // streams held behind a gate not yet opened
	streams int
	events  int
}

var errInjected = errors.New("injected failure")

// fail is the error an op of that name returns.
func (d *traceDevice) fail(name string) error {
	if d.failOn == name {
		return fmt.Errorf("%s: %w", name, errInjected)
	}
	return nil
}

func (d *traceDevice) NewGate() (gpu.Gate, error) {
	if d.noGate {
		return nil, fmt.Errorf("%w: the trace device has no gate", gpu.ErrUnsupported)
	}
	d.log(op{name: "gate"})
	return &traceGate{d: d}, nil
}

// traceGate records holds and openings and tracks which streams are held.
type traceGate struct{ d *traceDevice }

func (g *traceGate) Hold(s gpu.Stream) error {
	n := s.(*traceStream).n
	g.d.log(op{name: "hold", stream: n})
	if err := g.d.fail("hold"); err != nil {
		return err
	}
	g.d.mu.Lock()
	g.d.held[n] = true
	g.d.mu.Unlock()
	return nil
}

func (g *traceGate) Open() error {
	g.d.log(op{name: "open"})
	g.d.mu.Lock()
	clear(g.d.held)
	g.d.mu.Unlock()
	return nil
}

func (g *traceGate) Close() error {
	g.d.log(op{name: "gate-close"})
	return g.Open()
}

func newTraceDevice(cuda bool) *traceDevice {
	return &traceDevice{Device: gputest.LazyDevice{Device: gpu.NewCPU()}, cuda: cuda, held: map[int]bool{}}
}

func (d *traceDevice) log(o op) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if o.name == "record" {
		d.events++
		o.ev = d.events
	}
	d.ops = append(d.ops, o)
	return o.ev
}

func (d *traceDevice) Info() gpu.Info {
	i := d.Device.Info()
	if d.cuda {
		i.Backend = gpu.CUDA
	}
	return i
}

func (d *traceDevice) Alloc(n int64) (gpu.Buffer, error) {
	d.log(op{name: "alloc", lens: []int64{n}})
	return d.Device.Alloc(n)
}

func (d *traceDevice) NewStream() (gpu.Stream, error) {
	s, err := d.Device.NewStream()
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.streams++
	n := d.streams
	d.mu.Unlock()
	d.log(op{name: "stream", stream: n})
	return &traceStream{LazyStream: s.(*gputest.LazyStream), d: d, n: n}, nil
}

type traceStream struct {
	*gputest.LazyStream
	d *traceDevice
	n int
}

type traceEvent struct {
	gpu.Event
	d  *traceDevice
	id int
}

func (s *traceStream) CopyHtoD(dst gpu.Buffer, off int64, src []byte) error {
	s.d.log(op{name: "htod", stream: s.n, lens: []int64{int64(len(src))}})
	return s.LazyStream.CopyHtoD(dst, off, src)
}

func (s *traceStream) CopyDtoH(dst []byte, src gpu.Buffer, off int64) error {
	s.d.log(op{name: "dtoh", stream: s.n, lens: []int64{int64(len(dst))}})
	return s.LazyStream.CopyDtoH(dst, src, off)
}

func (s *traceStream) CopyDtoD(dst gpu.Buffer, dstOff int64, src gpu.Buffer, srcOff, n int64) error {
	s.d.log(op{name: "dtod", stream: s.n, lens: []int64{n}})
	return s.LazyStream.CopyDtoD(dst, dstOff, src, srcOff, n)
}

func (s *traceStream) CopyDtoDBatch(copies []gpu.DtoDCopy) error {
	o := op{name: "batch", stream: s.n}
	for _, c := range copies {
		o.lens = append(o.lens, c.N)
	}
	s.d.log(o)
	if err := s.d.fail("batch"); err != nil {
		return err
	}
	return s.LazyStream.CopyDtoDBatch(copies)
}

func (s *traceStream) Memset(dst gpu.Buffer, off, n int64, v byte) error {
	s.d.log(op{name: "memset", stream: s.n})
	return s.LazyStream.Memset(dst, off, n, v)
}

func (s *traceStream) EvictCache() error {
	s.d.log(op{name: "evict", stream: s.n})
	return s.d.fail("evict")
}

func (s *traceStream) Record() (gpu.Event, error) {
	ev, err := s.LazyStream.Record()
	if err != nil {
		return nil, err
	}
	return &traceEvent{Event: ev, d: s.d, id: s.d.log(op{name: "record", stream: s.n})}, nil
}

func (s *traceStream) WaitEvent(ev gpu.Event) error {
	e := ev.(*traceEvent)
	s.d.log(op{name: "wait", stream: s.n, ev: e.id})
	return s.LazyStream.WaitEvent(e.Event)
}

func (s *traceStream) Sync() error {
	s.d.log(op{name: "sync", stream: s.n})
	s.d.mu.Lock()
	held := s.d.held[s.n]
	s.d.mu.Unlock()
	if held {
		return fmt.Errorf("stream %d synced while held behind a closed gate: on a GPU this never returns", s.n)
	}
	return s.LazyStream.Sync()
}

func (s *traceStream) Close() error {
	s.d.log(op{name: "close", stream: s.n})
	return s.LazyStream.Close()
}

func (e *traceEvent) Since(start gpu.Event) (time.Duration, error) {
	st := start.(*traceEvent)
	e.d.log(op{name: "since", ev: e.id, start: st.id})
	return e.Event.Since(st.Event)
}

// timedMove is one timed move found in a trace: the ops from its start
// (the start event's record, or the first clock read) to its end (the
// last end event's record, or the second clock read).
type timedMove struct {
	from, to  int   // indices in the trace, both included
	pre, post int   // the move with what surrounds its timed region: its holds and eviction, its gate's opening
	streams   []int // the lanes' streams, in the order their copies were queued
	anyOrder  bool  // lanes queued on goroutines of their own, in no set order
}

// copies is the move's signature: per lane, in queue order, its holds,
// eviction, events and copy calls (with their lengths), then whether a
// gate opened after it.
func (m timedMove) copies(ops []op) string {
	var lanes []string
	for _, s := range m.streams {
		var calls []string
		for _, o := range ops[m.pre : m.post+1] {
			switch o.name {
			case "dtod", "batch", "htod", "dtoh", "hold", "evict", "record", "wait":
				if o.stream == s {
					calls = append(calls, fmt.Sprint(o.name, o.lens))
				}
			}
		}
		lanes = append(lanes, strings.Join(calls, " "))
	}
	if m.anyOrder {
		slices.Sort(lanes)
	}
	sig := strings.Join(lanes, " | ")
	if ops[m.post].name == "open" {
		sig += " > open"
	}
	return sig
}

// eventMoves finds the moves timed by events: each start event and the end
// events timed against it.
func eventMoves(t *testing.T, ops []op) []timedMove {
	t.Helper()
	at := map[int]int{} // event -> index of its record
	for i, o := range ops {
		if o.name == "record" {
			at[o.ev] = i
		}
	}
	ends := map[int][]int{}
	var starts []int
	for _, o := range ops {
		if o.name == "since" {
			if _, ok := ends[o.start]; !ok {
				starts = append(starts, o.start)
			}
			ends[o.start] = append(ends[o.start], o.ev)
		}
	}
	var out []timedMove
	for _, s := range starts {
		m := timedMove{from: at[s]}
		for _, e := range ends[s] {
			m.to = max(m.to, at[e])
			m.streams = append(m.streams, ops[at[e]].stream)
		}
		m.pre, m.post = m.from, m.to
		if m.pre > 0 && ops[m.pre-1].name == "evict" {
			m.pre--
		}
		for m.pre > 0 && ops[m.pre-1].name == "hold" {
			m.pre--
		}
		if m.post+1 < len(ops) && ops[m.post+1].name == "open" {
			m.post++
		}
		out = append(out, m)
	}
	return out
}

// clockMoves finds the moves timed by the host clock: pairs of clock reads.
func clockMoves(t *testing.T, ops []op) []timedMove {
	t.Helper()
	var reads []int
	for i, o := range ops {
		if o.name == "clock" {
			reads = append(reads, i)
		}
	}
	if len(reads)%2 != 0 {
		t.Fatalf("%d clock reads: not start/stop pairs", len(reads))
	}
	var out []timedMove
	for k := 0; k < len(reads); k += 2 {
		m := timedMove{from: reads[k], to: reads[k+1], pre: reads[k], post: reads[k+1], anyOrder: true}
		for _, o := range ops[m.from:m.to] {
			if (o.name == "dtod" || o.name == "batch" || o.name == "htod" || o.name == "dtoh") && !slices.Contains(m.streams, o.stream) {
				m.streams = append(m.streams, o.stream)
			}
		}
		out = append(out, m)
	}
	return out
}

// ceilingMoves tells a ceiling's moves from the cell's: a move is the
// ceiling's when its streams were closed before the cell's last move (a
// ceiling's lanes are its own, closed when it is measured), the cell's
// when they are still open then.
func ceilingMoves(ops []op, moves []timedMove) func(timedMove) bool {
	last := moves[len(moves)-1].from
	closed := map[int]bool{}
	for _, o := range ops[:last] {
		if o.name == "close" {
			closed[o.stream] = true
		}
	}
	return func(m timedMove) bool { return closed[m.streams[0]] }
}

// sameCopies checks that the cell's timed moves and its ceilings' issue
// the same ops: holds, eviction, events, copies and the gate's opening.
func sameCopies(t *testing.T, name string, ops []op, moves []timedMove) {
	t.Helper()
	isCeiling := ceilingMoves(ops, moves)
	cell, ceil := map[string]int{}, map[string]int{}
	for _, m := range moves {
		if isCeiling(m) {
			ceil[m.copies(ops)]++
		} else {
			cell[m.copies(ops)]++
		}
	}
	if len(cell) == 0 || len(ceil) == 0 {
		t.Fatalf("%s: %d kinds of cell moves, %d of ceiling moves", name, len(cell), len(ceil))
	}
	for sig := range cell {
		if ceil[sig] == 0 {
			t.Errorf("%s: the cell moves %q; no ceiling move does", name, sig)
		}
	}
	for sig := range ceil {
		if cell[sig] == 0 {
			t.Errorf("%s: a ceiling moves %q; the cell never does", name, sig)
		}
	}
}

// traced runs cells on d, its host clock's reads in the trace too, and
// returns the matrix and the trace; a cell that fails to run fails the test.
func traced(t *testing.T, d *traceDevice, cfg Config, cells string, size int64) (*Matrix, []op) {
	t.Helper()
	cfg.Dev = d
	cfg.now = func() time.Time {
		d.log(op{name: "clock"})
		return time.Now()
	}
	m := run(t, cfg, cells, size)
	for _, o := range m.Outcomes {
		if o.Err != nil {
			t.Fatalf("%s: %v", o.Cell.Name(), o.Err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return m, slices.Clone(d.ops)
}

// runTraced is traced with the small config, every gate that times
// nothing required to pass.
func runTraced(t *testing.T, d *traceDevice, cell string, size int64) (*Matrix, []op) {
	t.Helper()
	m, ops := traced(t, d, small(t), cell, size)
	for _, o := range m.Outcomes {
		for _, r := range o.Results {
			for _, g := range r.Gates {
				if !g.Pass && !timingGate(g.Name) {
					t.Errorf("%s: %s: %s", o.Cell.Name(), g.Name, g.Reason)
				}
			}
		}
	}
	return m, ops
}

// bandwidthReasons are the reasons of m's bandwidth gates.
func bandwidthReasons(t *testing.T, m *Matrix) []string {
	t.Helper()
	var out []string
	for _, o := range m.Outcomes {
		for _, r := range o.Results {
			for _, g := range r.Gates {
				if strings.HasPrefix(g.Name, GBandwidth+".") {
					out = append(out, g.Reason)
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no bandwidth gates")
	}
	return out
}

var timedCells = []string{"hibernate/device", "partial/device", "restore-gate/device", "uneven/device"}

// cellLanes is how many lanes a cell moves at once: one per shard for
// uneven, else one.
func cellLanes(cell string) int {
	if strings.HasPrefix(cell, "uneven") {
		return len(shardShares)
	}
	return 1
}

// On CUDA a device-tier move is timed by events, and between its start
// event and its last end event the host only queues copies: the eviction
// comes before the start on the same stream, unwaited (the copies queue
// behind it), every other lane waits for the start, every lane's copies
// and end event are queued before any lane is waited for, and each lane
// is then waited for once. Before the eviction every lane's stream is
// held behind a gate, opened right after the last end event and before
// any wait, so a late host adds no idle time to the interval. A mover
// makes one gate and closes it. The ceilings issue the same ops.
func TestDeviceMovesTimeOnlyTheCopies(t *testing.T) {
	for _, cell := range timedCells {
		t.Run(strings.ReplaceAll(cell, "/", "_"), func(t *testing.T) {
			d := newTraceDevice(true)
			m, ops := runTraced(t, d, cell, 1<<20)
			if n := len(clockMoves(t, ops)); n != 0 {
				t.Fatalf("%d moves timed by the host clock; want none on CUDA's device tier", n)
			}
			moves := eventMoves(t, ops)
			if len(moves) < 4 {
				t.Fatalf("%d timed moves", len(moves))
			}
			lanes := cellLanes(cell)
			for _, m := range moves {
				checkEventMove(t, ops, m, lanes, true)
			}
			sameCopies(t, cell, ops, moves)
			var made, closed int
			for _, o := range ops {
				switch o.name {
				case "gate":
					made++
				case "gate-close":
					closed++
				}
			}
			if made == 0 || closed != made || 2*made > len(moves) {
				t.Errorf("%d gates made, %d closed, for %d moves: want one per mover, each closed", made, closed, len(moves))
			}
			for _, r := range bandwidthReasons(t, m) {
				if !strings.Contains(r, "the cell and its ceiling timed by") || !strings.Contains(r, "held behind a gate opened after queueing") {
					t.Errorf("bandwidth gate reason %q does not say the moves were gated", r)
				}
			}
		})
	}
}

// Without a gate (a device or driver lacking stream memory operations) the
// moves are timed as before, ungated, and the gate reasons say so and why.
func TestDeviceMovesUngatedWithoutAGate(t *testing.T) {
	d := newTraceDevice(true)
	d.noGate = true
	m, ops := runTraced(t, d, "partial/device", 1<<20)
	moves := eventMoves(t, ops)
	if len(moves) < 4 {
		t.Fatalf("%d timed moves", len(moves))
	}
	for _, mv := range moves {
		checkEventMove(t, ops, mv, 1, false)
	}
	sameCopies(t, "partial/device", ops, moves)
	for _, r := range bandwidthReasons(t, m) {
		if !strings.Contains(r, "the cell and its ceiling timed by") || !strings.Contains(r, "ungated: not supported by this backend") {
			t.Errorf("bandwidth gate reason %q does not say the moves ran ungated, and why", r)
		}
	}
}

// A slot that syncs inside its move (a corrupting fault reads the restored
// bytes back) or sleeps (a stall) moves ungated: behind a closed gate the
// sync would never return, and the stall would go untimed. The ceilings,
// without faults, stay gated; the gate reasons say how each was timed.
func TestSynchronousSlotsMoveUngated(t *testing.T) {
	for _, f := range []tier.Faults{{Corrupt: true}, {Stall: time.Millisecond}} {
		t.Run(fmt.Sprintf("%+v", f), func(t *testing.T) {
			d := newTraceDevice(true)
			cfg := small(t)
			cfg.Faults = f
			m, ops := traced(t, d, cfg, "hibernate/device", 1<<20)
			moves := eventMoves(t, ops)
			isCeiling := ceilingMoves(ops, moves)
			var cell int
			for _, mv := range moves {
				if isCeiling(mv) {
					checkEventMove(t, ops, mv, 1, true)
					continue
				}
				// The cell's restores sync inside: only the gate is checked.
				cell++
				if mv.pre != mv.from-1 || mv.post != mv.to {
					t.Errorf("cell move at op %d: held or opened: %v", mv.from, ops[mv.pre:mv.post+1])
				}
			}
			if cell == 0 {
				t.Fatal("no cell moves")
			}
			for _, r := range bandwidthReasons(t, m) {
				if !strings.Contains(r, "the cell timed by "+eventTimer+"; ungated: a slot's move waits or sleeps on the host") ||
					!strings.Contains(r, "its ceiling by "+eventTimer+", both held behind a gate") {
					t.Errorf("bandwidth gate reason %q does not say the cell ran ungated and its ceiling gated", r)
				}
			}
		})
	}
}

// A failure while a gated move is queued (holding a stream, the eviction,
// a batched copy) still opens the gate, before any lane is waited for.
func TestGateOpensWhenQueueingFails(t *testing.T) {
	for _, failOn := range []string{"hold", "evict", "batch"} {
		t.Run(failOn, func(t *testing.T) {
			d := newTraceDevice(true)
			cfg := Config{Dev: d}
			tr, err := tier.Open(tier.Device, tier.Options{Dev: d})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			var lanes []*lane
			for range 2 {
				s, err := d.NewStream()
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				p, err := tier.NewPool(d, tier.EvenBlocks(256<<10, 4))
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				slots, err := allocSlots(tr, p, all(4))
				if err != nil {
					t.Fatal(err)
				}
				defer freeSlots(slots)
				lanes = append(lanes, newLane(s, p, slots, all(4)))
			}
			mv := newMover(&cfg, tier.Device, lanes...)
			defer mv.close()
			if mv.gate == nil {
				t.Fatalf("the move is not gated: %s", mv.timer)
			}
			d.failOn = failOn
			_, _, err = mv.spill(context.Background())
			if !errors.Is(err, errInjected) {
				t.Fatalf("spill with %s failing: %v", failOn, err)
			}
			d.mu.Lock()
			ops := slices.Clone(d.ops)
			d.mu.Unlock()
			holds := slices.IndexFunc(ops, func(o op) bool { return o.name == "hold" })
			if holds < 0 {
				t.Fatal("no hold")
			}
			open := slices.IndexFunc(ops[holds:], func(o op) bool { return o.name == "open" })
			if open < 0 {
				t.Fatalf("the gate never opened after %s failed: %v", failOn, ops[holds:])
			}
			if i := slices.IndexFunc(ops[holds:], func(o op) bool { return o.name == "sync" }); i >= 0 && i < open {
				t.Errorf("a lane was waited for before the gate opened: %v", ops[holds:])
			}
		})
	}
}

func checkEventMove(t *testing.T, ops []op, m timedMove, lanes int, gated bool) {
	t.Helper()
	start := ops[m.from]
	first := start.stream
	if len(m.streams) != lanes {
		t.Fatalf("move at op %d: %d lanes, want %d", m.from, len(m.streams), lanes)
	}
	if m.from == 0 || ops[m.from-1].name != "evict" || ops[m.from-1].stream != first {
		t.Errorf("move at op %d: the op before its start event is %+v, not an eviction on its stream", m.from, ops[max(0, m.from-1)])
	}
	// Gated: every lane's stream held right before the eviction, the gate
	// opened right after the last end event.
	held := map[int]bool{}
	for _, o := range ops[m.pre:m.from] {
		if o.name == "hold" {
			held[o.stream] = true
		}
	}
	for _, s := range m.streams {
		if held[s] != gated {
			t.Errorf("move at op %d: stream %d held before the eviction: %v, want %v", m.from, s, held[s], gated)
		}
	}
	if opened := m.post == m.to+1; opened != gated {
		t.Errorf("move at op %d: the op after its last end event is %+v; want the gate's opening: %v", m.from, ops[min(m.to+1, len(ops)-1)], gated)
	}
	waited := map[int]bool{first: true}
	copied := map[int]bool{}
	for i, o := range ops[m.from+1 : m.to+1] {
		switch o.name {
		case "dtod", "batch":
			if !waited[o.stream] {
				t.Errorf("move at op %d: stream %d copies before it waits for the start event", m.from, o.stream)
			}
			copied[o.stream] = true
		case "wait":
			if o.ev != start.ev || o.stream == first {
				t.Errorf("move at op %d: %+v", m.from, o)
			}
			waited[o.stream] = true
		case "record":
			if !copied[o.stream] {
				t.Errorf("move at op %d: stream %d records its end before any copy", m.from, o.stream)
			}
		default:
			t.Errorf("move at op %d: op %d inside the timed region: %+v", m.from, m.from+1+i, o)
		}
	}
	// Then each lane is waited for once, before anything else runs on it.
	for _, s := range m.streams {
		for _, o := range ops[m.post+1:] {
			if o.stream == s {
				if o.name != "sync" {
					t.Errorf("move at op %d: stream %d's first op after the move is %q, not its wait", m.from, s, o.name)
				}
				break
			}
		}
	}
}

// Elsewhere (the CPU backend here) a move is timed by the host clock, from
// after the eviction has been waited for to the last lane's wait: between
// the two clock reads there are only the copies and one wait per lane,
// nothing allocated, poisoned or evicted. The ceilings queue the same copies.
func TestHostTimedMovesTimeOnlyTheCopies(t *testing.T) {
	for _, cell := range append(timedCells, "partial/pinned", "uneven/pinned") {
		t.Run(strings.ReplaceAll(cell, "/", "_"), func(t *testing.T) {
			d := newTraceDevice(false)
			_, ops := runTraced(t, d, cell, 1<<20)
			if n := len(eventMoves(t, ops)); n != 0 {
				t.Fatalf("%d moves timed by events on the CPU backend", n)
			}
			moves := clockMoves(t, ops)
			if len(moves) < 4 {
				t.Fatalf("%d timed moves", len(moves))
			}
			lanes := cellLanes(cell)
			for _, m := range moves {
				if len(m.streams) != lanes {
					t.Fatalf("move at op %d: %d lanes, want %d", m.from, len(m.streams), lanes)
				}
				// The eviction was waited for before the clock started.
				if m.from < 2 || ops[m.from-1].name != "sync" || ops[m.from-2].name != "evict" || ops[m.from-1].stream != ops[m.from-2].stream {
					t.Errorf("move at op %d: not started right after a waited-for eviction: %+v", m.from, ops[max(0, m.from-2):m.from])
				}
				syncs := map[int]int{}
				for i, o := range ops[m.from+1 : m.to] {
					switch o.name {
					case "dtod", "batch", "htod", "dtoh":
						if syncs[o.stream] > 0 {
							t.Errorf("move at op %d: stream %d copies after its wait", m.from, o.stream)
						}
					case "sync":
						syncs[o.stream]++
					default:
						t.Errorf("move at op %d: op %d inside the timed region: %+v", m.from, m.from+1+i, o)
					}
				}
				for _, s := range m.streams {
					if syncs[s] != 1 {
						t.Errorf("move at op %d: stream %d waited for %d times, want once", m.from, s, syncs[s])
					}
				}
			}
			sameCopies(t, cell, ops, moves)
		})
	}
}
