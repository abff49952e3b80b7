// Package arena is a shared-memory tensor arena: a producer process stages
// tensors in segments it maps once (files in /dev/shm), consumer processes
// map the same segments and copy straight out of them, and a small
// descriptor over a Unix socket is all that travels per tensor.
//
// The lessons it encodes come from running such an arena in a serving
// system: segment names are instance-unique (a fixed name let a second
// server truncate the first's live segments); every process that maps a
// segment holds a shared flock on it, so a startup sweep can tell orphans
// of killed processes from live segments even when pids are reused; tmpfs
// space is committed with fallocate at creation, so a full /dev/shm fails
// there instead of as SIGBUS on a later write; a consumer acknowledges a
// slot only once its copy out of it has completed, because the producer
// reuses the slot on the ACK; at the segment cap a send back-pressures for a
// grace period and then spills that tensor to a per-tensor file rather than
// failing; and segments are registered with the device layer once, within
// a pinned-bytes budget, so device copies run at DMA speed.
//
// The pieces: Arena (producer side: segments, allocator, reference counts,
// spill, TTL), Reader (consumer side: validated, cached peer mappings),
// Link/Sender/Receiver (the control channel), CleanOrphans (cleanup) and
// CheckLimits. The allocator is TLSF by default; NewAllocator also offers
// the sorted first-fit design it was benchmarked against.
package arena

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/units"
)

// Config configures an Arena. The zero value of every field is a sensible
// default except Entity, which is required.
type Config struct {
	Dir         string        // where segments live; default /dev/shm
	Entity      string        // the owning process's role, [a-z0-9-]{1,32}
	SegmentSize int64         // bytes per segment; default 256 MiB
	MaxSegments int           // the cap: at most MaxSegments*SegmentSize bytes of segments; default 8
	Allocator   AllocatorKind // default TLSF
	Transport   Transport     // TransportArena (default) or TransportFile: every tensor in its own file

	// At the cap a reservation waits up to SpillAfter (default 0) for a slot
	// to free, then spills the tensor to a per-tensor file. Waiting only
	// helps when another goroutine processes the ACKs that free slots.
	SpillAfter time.Duration
	// Strict never spills: at the cap a reservation waits up to FullTimeout
	// (default 30s) and then fails.
	Strict      bool
	FullTimeout time.Duration

	// SlotTTL, when positive, force-frees slots published longer ago than
	// this whose consumers never all acknowledged (their request died), with
	// a loud warning. Set it well above the request timeout: a slot younger
	// than that may still have a legitimate reader.
	SlotTTL time.Duration

	// Device, when set, page-locks each segment once (Register) so device
	// copies into and out of it run at DMA speed, up to PinBudget bytes in
	// all (default 4 GiB); segments past the budget stay pageable.
	Device    gpu.Device
	PinBudget int64

	// CopyThreads is how many threads copy one large tensor into its slot
	// (or write its file); default half the cores, at most 8. Tensors below
	// 1 MiB are always copied by one.
	CopyThreads int

	// NoStartupSweep skips removing orphaned segments in Dir at New.
	NoStartupSweep bool
	// NoSignalHandler leaves SIGINT/SIGTERM alone; the program must then
	// call CleanupAll from its own handler.
	NoSignalHandler bool

	// Warn receives non-fatal problems (fragmentation, TTL reclaims, pinning
	// and space warnings). Default: kept, and returned by Warnings.
	Warn func(msg string)
}

const (
	DefaultSegmentSize = 256 << 20
	DefaultMaxSegments = 8
	DefaultPinBudget   = 4 << 30
	pageSize           = 4096
)

// Arena is the producer side. It is safe for concurrent use.
type Arena struct {
	cfg          Config
	startupClean CleanReport

	mu       sync.Mutex
	segs     []*segment
	retired  []*segment // closed, unlinked, still mapped: slots in them are being filled
	slots    map[uint64]*Slot
	nextID   uint64
	notify   chan struct{} // closed and replaced whenever space frees or a segment appears
	waiters  int           // reservers waiting on notify: no waiter, no channel to replace
	growing  bool
	pinned   int64
	closed   bool
	maxSize  int64 // the largest tensor that could ever be staged
	counters counters
	warnings []string
	lastFrag time.Time
	pinWarn  bool
	growFail time.Time // last failed growth: no retry for a second
	stopTTL  chan struct{}
	ttlDone  chan struct{}
}

type counters struct {
	spills, spillFiles, ttlReclaimed, fragWarnings, abandoned, acked uint64
	peakFrag                                                         float64
}

type segment struct {
	file      *shmFile
	alloc     Allocator
	dedicated bool
	unpin     func() error
	filling   int // slots reserved here whose payload is still being written
}

// Slot is one reserved tensor: a region of a segment or, spilled, a
// per-tensor file. Fill Bytes, then Publish.
type Slot struct {
	id        uint64
	size      int64
	seg       *segment
	blk       Block
	buf       []byte   // Bytes: the segment region, or a staging buffer
	spill     *shmFile // once published, for a spilled slot
	spilled   bool
	refs      int
	published time.Time
	done      bool
	filling   bool // reserved in a segment, not yet published or released
}

// ID is the tensor's key: descriptors carry it and ACKs name it.
func (s *Slot) ID() uint64 { return s.id }

// Bytes is where the tensor's payload goes: the segment region itself (a
// device copy lands there directly), or for a spilled tensor a staging
// buffer written to its file at Publish.
func (s *Slot) Bytes() []byte { return s.buf }

// Spilled reports whether the tensor goes through a per-tensor file.
func (s *Slot) Spilled() bool { return s.spilled }

// Meta is what a descriptor says about a tensor beyond where it is.
type Meta struct {
	DType       string  // default "uint8"
	Shape       []int64 // optional
	Checksum    uint32
	HasChecksum bool
}

// New creates an arena: checks the limits against the directory's file
// system, sweeps orphaned segments (unless told not to), and creates the
// first segment so a full /dev/shm fails now.
func New(cfg Config) (*Arena, error) {
	if cfg.Dir == "" {
		cfg.Dir = DefaultDir
	}
	if err := ValidEntity(cfg.Entity); err != nil {
		return nil, fmt.Errorf("arena: %w", err)
	}
	if cfg.SegmentSize == 0 {
		cfg.SegmentSize = DefaultSegmentSize
	}
	if cfg.SegmentSize < pageSize {
		return nil, fmt.Errorf("arena: segment size %d is below one page (%d bytes)", cfg.SegmentSize, pageSize)
	}
	cfg.SegmentSize = roundUp(cfg.SegmentSize, pageSize)
	if cfg.MaxSegments == 0 {
		cfg.MaxSegments = DefaultMaxSegments
	}
	if cfg.MaxSegments < 0 {
		return nil, fmt.Errorf("arena: max segments %d is negative", cfg.MaxSegments)
	}
	if cfg.Transport == "" {
		cfg.Transport = TransportArena
	}
	if _, err := ParseTransport(string(cfg.Transport)); err != nil {
		return nil, fmt.Errorf("arena: %w", err)
	}
	if _, err := NewAllocator(cfg.Allocator, Align); err != nil {
		return nil, fmt.Errorf("arena: %w", err)
	}
	if cfg.FullTimeout == 0 {
		cfg.FullTimeout = 30 * time.Second
	}
	if cfg.PinBudget == 0 {
		cfg.PinBudget = DefaultPinBudget
	}
	cfg.CopyThreads = resolveThreads(cfg.CopyThreads)
	a := &Arena{cfg: cfg, slots: make(map[uint64]*Slot), notify: make(chan struct{}), nextID: 1}
	fs, err := StatFS(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("arena: %w", err)
	}
	// A tensor larger than the file system fits neither a segment nor a
	// spill file there; the page of headroom keeps size arithmetic exact.
	a.maxSize = math.MaxInt64 - pageSize
	if fs.Total > 0 {
		a.maxSize = min(a.maxSize, fs.Total)
	}
	warns, err := CheckLimits(cfg, fs, hostMemTotal())
	if err != nil {
		return nil, fmt.Errorf("arena: %w", err)
	}
	for _, w := range warns {
		a.warn(w)
	}
	if !cfg.NoSignalHandler {
		installSignalCleanup()
	}
	if !cfg.NoStartupSweep {
		rep, err := CleanOrphans(cfg.Dir, CleanOptions{})
		if err != nil {
			return nil, fmt.Errorf("arena: startup %w", err)
		}
		a.startupClean = rep
		for _, l := range rep.Left {
			if l.Reason != "younger than the grace period and its pid is alive" {
				a.warn(fmt.Sprintf("startup sweep left %s alone: %s", l.Name, l.Reason))
			}
		}
	}
	if cfg.Transport == TransportArena && cfg.MaxSegments > 0 {
		seg, err := a.newSegment(cfg.SegmentSize, false)
		if err != nil {
			return nil, fmt.Errorf("arena: %w", err)
		}
		a.segs = append(a.segs, seg)
	}
	if cfg.SlotTTL > 0 {
		a.stopTTL, a.ttlDone = make(chan struct{}), make(chan struct{})
		go a.ttlLoop(max(cfg.SlotTTL/4, 10*time.Millisecond))
	}
	return a, nil
}

// StartupClean is what New's sweep of orphaned segments did.
func (a *Arena) StartupClean() CleanReport { return a.startupClean }

// Config returns the arena's configuration with defaults filled in.
func (a *Arena) Config() Config { return a.cfg }

func (a *Arena) warn(msg string) {
	if a.cfg.Warn != nil {
		a.cfg.Warn(msg)
		return
	}
	if len(a.warnings) < 1000 {
		a.warnings = append(a.warnings, msg)
	}
}

// Warnings returns the warnings kept so far (when Config.Warn is not set).
func (a *Arena) Warnings() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.warnings...)
}

// newSegment creates and, within the budget, pins a segment. Called
// without a.mu held: fallocate of a large segment takes a while.
func (a *Arena) newSegment(size int64, dedicated bool) (*segment, error) {
	name := NewName(KindSegment, a.cfg.Entity).String()
	f, err := createSegmentFile(a.cfg.Dir, name, size, true)
	if err != nil {
		return nil, err
	}
	alloc, _ := NewAllocator(a.cfg.Allocator, size)
	seg := &segment{file: f, alloc: alloc, dedicated: dedicated}
	if a.cfg.Device != nil {
		a.mu.Lock()
		fits := a.pinned+size <= a.cfg.PinBudget
		if fits {
			a.pinned += size // reserve the budget before the slow call
		} else if !a.pinWarn {
			a.pinWarn = true
			a.warn(fmt.Sprintf("pinned-bytes budget reached (%s pinned + %s segment > %s budget): %s stays pageable, so copies through it run at pageable speed", units.Bytes(a.pinned), units.Bytes(size), units.Bytes(a.cfg.PinBudget), name))
		}
		a.mu.Unlock()
		if fits {
			unpin, err := a.cfg.Device.Register(f.mem)
			if err != nil {
				a.mu.Lock()
				a.pinned -= size
				a.warn(fmt.Sprintf("registering %s (%s) with the device failed, it stays pageable: %v", name, units.Bytes(size), err))
				a.mu.Unlock()
			} else {
				seg.unpin = unpin
			}
		}
	}
	return seg, nil
}

func (a *Arena) dropSegment(seg *segment) error {
	var errs []error
	if seg.unpin != nil {
		if err := seg.unpin(); err != nil {
			errs = append(errs, fmt.Errorf("unregistering %s: %w", seg.file.name, err))
		}
		a.pinned -= seg.file.size
		seg.unpin = nil
	}
	errs = append(errs, seg.file.unlink(), seg.file.close())
	return errors.Join(errs...)
}

// wake tells waiting reservers that space freed or a segment appeared.
// Without a waiter it costs nothing: a free on the hot path (one per ACK)
// would otherwise allocate a channel.
func (a *Arena) wake() {
	if a.waiters == 0 {
		return
	}
	close(a.notify)
	a.notify = make(chan struct{})
}

// createSegmentFile is createFile; tests replace it to make growth fail.
var createSegmentFile = createFile

// ErrFull is returned by a strict arena that stayed full for FullTimeout.
var ErrFull = errors.New("arena full")

// Reserve reserves n bytes for one tensor. It grows the arena a segment at
// a time up to the cap (a tensor larger than a segment gets a dedicated
// segment); at the cap it back-pressures and then spills, or, strict, fails.
func (a *Arena) Reserve(ctx context.Context, n int64) (*Slot, error) {
	return a.reserve(ctx, n, true)
}

func (a *Arena) reserve(ctx context.Context, n int64, stage bool) (*Slot, error) {
	if n < 0 {
		return nil, fmt.Errorf("reserve: negative size %d", n)
	}
	if n > a.maxSize {
		return nil, fmt.Errorf("reserve %d bytes: too large: more than the %s file system of %s can hold", n, units.Bytes(a.maxSize), a.cfg.Dir)
	}
	if capBytes := int64(a.cfg.MaxSegments) * a.cfg.SegmentSize; a.cfg.Strict && a.cfg.Transport != TransportFile && n > capBytes {
		return nil, fmt.Errorf("reserve %d bytes: too large: more than the arena's cap of %d x %s segments, and strict mode never spills", n, a.cfg.MaxSegments, units.Bytes(a.cfg.SegmentSize))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var spillAt, failAt time.Time
	for {
		if a.closed {
			return nil, errors.New("reserve: arena is closed")
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reserve %d bytes: %w", n, err)
		}
		if a.cfg.Transport == TransportFile {
			return a.spillSlot(n, stage, false), nil
		}
		if s := a.tryReserve(n); s != nil {
			return s, nil
		}
		if !a.growing && time.Since(a.growFail) > time.Second {
			size, ok := a.growthFor(n)
			if ok {
				a.growing = true
				a.mu.Unlock()
				seg, err := a.newSegment(size, size > a.cfg.SegmentSize)
				a.mu.Lock()
				a.growing = false
				a.wake()
				if err != nil {
					// A full file system fails here, at creation: carry on
					// as at the cap (back-pressure, then spill or fail).
					a.growFail = time.Now()
					a.warn(fmt.Sprintf("growing the arena by %s failed, treating it as full: %v", units.Bytes(size), err))
				} else if a.closed {
					// Closed while we grew: the segment is nobody's.
					if err := a.dropSegment(seg); err != nil {
						a.warn(err.Error())
					}
					continue
				} else {
					a.segs = append(a.segs, seg)
					continue
				}
			}
			if !ok && a.dropIdle() {
				continue
			}
		}
		// At the cap.
		if a.cfg.SlotTTL > 0 && a.reclaimExpiredLocked() > 0 {
			continue
		}
		a.noteFragmentation(n)
		now := time.Now()
		var deadline time.Time
		if a.cfg.Strict {
			if failAt.IsZero() {
				failAt = now.Add(a.cfg.FullTimeout)
			}
			if !now.Before(failAt) {
				return nil, fmt.Errorf("reserve %d bytes: %w: %s for %s (strict mode never spills)", n, ErrFull, a.statsLocked().Summary(), a.cfg.FullTimeout)
			}
			deadline = failAt
		} else {
			if spillAt.IsZero() {
				spillAt = now.Add(a.cfg.SpillAfter)
			}
			if !now.Before(spillAt) && !a.growing {
				return a.spillSlot(n, stage, true), nil
			}
			deadline = spillAt
			if a.growing && !deadline.After(now) {
				deadline = now.Add(time.Hour) // wait for the growth under way
			}
		}
		ch := a.notify
		a.waiters++
		a.mu.Unlock()
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		a.mu.Lock()
		a.waiters--
	}
}

// tryReserve places n bytes in an existing segment. Regular segments first;
// dedicated ones only take tensors larger than a regular segment.
func (a *Arena) tryReserve(n int64) *Slot {
	for _, seg := range a.segs {
		if seg.dedicated && n <= a.cfg.SegmentSize {
			continue
		}
		if blk, ok := seg.alloc.Reserve(n); ok {
			s := &Slot{id: a.nextID, size: n, seg: seg, blk: blk, buf: seg.file.mem[blk.Off : blk.Off+n : blk.Off+n], filling: true}
			seg.filling++
			a.nextID++
			a.slots[s.id] = s
			return s
		}
	}
	return nil
}

// growthFor says whether a new segment fits under the cap, and its size.
func (a *Arena) growthFor(n int64) (int64, bool) {
	capBytes := int64(a.cfg.MaxSegments) * a.cfg.SegmentSize
	size := a.cfg.SegmentSize
	if n > size {
		size = roundUp(n, pageSize)
	}
	return size, size <= capBytes-a.segmentBytes()
}

func (a *Arena) segmentBytes() int64 {
	var t int64
	for _, s := range a.segs {
		t += s.file.size
	}
	return t
}

// dropIdle gives back the cap held by an empty segment — a dedicated one
// first — so that a segment of another size can be made. Only at the cap:
// segments are otherwise kept, their mappings and registrations reused.
func (a *Arena) dropIdle() bool {
	for _, dedicated := range []bool{true, false} {
		for i, seg := range a.segs {
			if seg.dedicated == dedicated && seg.alloc.Stats().Live == 0 && seg.filling == 0 {
				a.segs = append(a.segs[:i], a.segs[i+1:]...)
				if err := a.dropSegment(seg); err != nil {
					a.warn(err.Error())
				}
				return true
			}
		}
	}
	return false
}

// noteFragmentation warns, with the numbers, when a reservation fails
// although the free space in all segments would cover it.
func (a *Arena) noteFragmentation(n int64) {
	st := a.statsLocked()
	if st.Free < n || len(a.segs) == 0 {
		return
	}
	a.counters.fragWarnings++
	if time.Since(a.lastFrag) < time.Second {
		return
	}
	a.lastFrag = time.Now()
	a.warn(fmt.Sprintf("fragmentation: reserving %s failed although %s of %s is free; the largest free block is %s (%d such failures so far)",
		units.Bytes(n), units.Bytes(st.Free), units.Bytes(st.Total), units.Bytes(st.Largest), a.counters.fragWarnings))
}

func (a *Arena) spillSlot(n int64, stage, atCap bool) *Slot {
	s := &Slot{id: a.nextID, size: n, spilled: true}
	if stage {
		s.buf = make([]byte, n)
	}
	a.nextID++
	a.slots[s.id] = s
	if atCap {
		a.counters.spills++
	}
	return s
}

// Publish makes a filled slot visible to fanout consumers and returns its
// descriptor. The slot is freed when all of them have acknowledged it.
func (a *Arena) Publish(s *Slot, m Meta, fanout int) (Descriptor, error) {
	return a.publish(s, s.buf, m, fanout)
}

// Put stages data as one tensor for fanout consumers: one copy into a slot,
// or for a spilled tensor (and on the file transport) one write into its file.
func (a *Arena) Put(ctx context.Context, data []byte, m Meta, fanout int) (Descriptor, error) {
	s, err := a.reserve(ctx, int64(len(data)), false)
	if err != nil {
		return Descriptor{}, err
	}
	if !s.spilled {
		pcopy(s.buf, data, a.cfg.CopyThreads)
	}
	return a.publish(s, data, m, fanout)
}

func (a *Arena) publish(s *Slot, data []byte, m Meta, fanout int) (Descriptor, error) {
	if fanout < 1 {
		a.Release(s)
		return Descriptor{}, fmt.Errorf("publish tensor %d: fan-out %d (want at least one consumer)", s.id, fanout)
	}
	if m.DType == "" {
		m.DType = "uint8"
	}
	d := Descriptor{ID: s.id, Size: s.size, DType: m.DType, Shape: m.Shape, Checksum: m.Checksum, HasChecksum: m.HasChecksum}
	var spillName string
	if s.spilled {
		spillName = NewName(KindSpill, a.cfg.Entity).String()
		d.Loc, d.File = InFile, spillName
	} else {
		d.Loc, d.File, d.Offset = InSegment, s.seg.file.name, s.blk.Off
	}
	// The name is ours; the caller's dtype and shape must fit the size.
	if err := d.validateLayout(); err != nil {
		a.Release(s)
		return Descriptor{}, fmt.Errorf("publish: %w", err)
	}
	var spill *shmFile
	if s.spilled {
		f, err := writeSpill(a.cfg.Dir, spillName, data, a.cfg.CopyThreads)
		if err != nil {
			a.Release(s)
			return Descriptor{}, fmt.Errorf("publish tensor %d: spilling: %w", s.id, err)
		}
		spill = f
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.endFillLocked(s)
	if s.done {
		// Released or closed meanwhile: nobody will free the new file.
		if spill != nil {
			if err := errors.Join(spill.unlink(), spill.close()); err != nil {
				a.warn(err.Error())
			}
		}
		return Descriptor{}, fmt.Errorf("publish tensor %d: slot was already released", s.id)
	}
	if spill != nil {
		s.spill, s.buf = spill, nil
		a.counters.spillFiles++
	}
	s.refs, s.published = fanout, time.Now()
	return d, nil
}

func writeSpill(dir, name string, data []byte, threads int) (*shmFile, error) {
	f, err := createFile(dir, name, int64(len(data)), false)
	if err != nil {
		return nil, err
	}
	if err := ppwrite(f.fd, data, threads); err != nil {
		_ = f.unlink()
		_ = f.close()
		return nil, fmt.Errorf("writing %s: %w", f.path, err)
	}
	return f, nil
}

// Ack records that one consumer has finished copying tensor id out; the
// last ACK frees the slot. An ACK for a tensor that is not live (doubled,
// or already reclaimed) is an error: counting it would free a slot another
// consumer may still be reading.
func (a *Arena) Ack(id uint64) error { return a.unref(id, false) }

// AckBatch is Ack for several tensors under one lock (one ACK frame's
// worth). ok[i] says whether ids[i] was live and counted; err is the first
// refusal.
func (a *Arena) AckBatch(ids []uint64, ok []bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var first error
	for i, id := range ids {
		err := a.unrefLocked(id, false)
		if ok != nil {
			ok[i] = err == nil
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Abandon drops one consumer's reference without a delivery: the consumer
// is gone (its connection closed), so it will never ACK.
func (a *Arena) Abandon(id uint64) error { return a.unref(id, true) }

func (a *Arena) unref(id uint64, abandoned bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.unrefLocked(id, abandoned)
}

func (a *Arena) unrefLocked(id uint64, abandoned bool) error {
	s, ok := a.slots[id]
	if !ok || s.refs == 0 {
		return fmt.Errorf("ack for tensor %d, which is not live (acknowledged twice, never published, or reclaimed)", id)
	}
	if abandoned {
		a.counters.abandoned++
	} else {
		a.counters.acked++
	}
	s.refs--
	if s.refs == 0 {
		a.freeLocked(s)
	}
	return nil
}

// Release frees a slot now, whatever its references: for a slot that will
// never be published, or whose request was abandoned.
func (a *Arena) Release(s *Slot) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !s.done {
		a.freeLocked(s)
	}
	a.endFillLocked(s)
}

// endFillLocked notes that nothing writes into s's region any more; the
// last such slot of a segment retired by Close unmaps it.
func (a *Arena) endFillLocked(s *Slot) {
	if !s.filling {
		return
	}
	s.filling = false
	seg := s.seg
	seg.filling--
	if seg.filling > 0 {
		return
	}
	for i, r := range a.retired {
		if r == seg {
			a.retired = append(a.retired[:i], a.retired[i+1:]...)
			if err := a.dropSegment(seg); err != nil {
				a.warn(err.Error())
			}
			return
		}
	}
}

func (a *Arena) freeLocked(s *Slot) {
	a.endFillLocked(s)
	s.done = true
	delete(a.slots, s.id)
	if s.seg != nil {
		if err := s.seg.alloc.Free(s.blk); err != nil {
			a.warn(fmt.Sprintf("freeing tensor %d: %v", s.id, err))
		}
	}
	if s.spill != nil {
		if err := errors.Join(s.spill.unlink(), s.spill.close()); err != nil {
			a.warn(err.Error())
		}
		s.spill = nil
		a.counters.spillFiles--
	}
	s.buf = nil
	a.wake()
}

// ReclaimExpired force-frees published slots older than Config.SlotTTL and
// returns how many. It runs by itself when a TTL is set; calling it is for
// tests and for programs that prefer their own schedule.
func (a *Arena) ReclaimExpired() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reclaimExpiredLocked()
}

func (a *Arena) reclaimExpiredLocked() int {
	if a.cfg.SlotTTL <= 0 {
		return 0
	}
	now := time.Now()
	n := 0
	for _, s := range a.slots {
		if s.refs > 0 && now.Sub(s.published) > a.cfg.SlotTTL {
			refs := s.refs
			a.freeLocked(s)
			a.counters.ttlReclaimed++
			n++
			a.warn(fmt.Sprintf("TTL backstop: reclaimed tensor %d (%s) published %s ago with %d consumer(s) never acknowledging; %d reclaimed by TTL so far — a request died without releasing its tensors",
				s.id, units.Bytes(s.size), now.Sub(s.published).Round(time.Millisecond), refs, a.counters.ttlReclaimed))
		}
	}
	return n
}

func (a *Arena) ttlLoop(every time.Duration) {
	defer close(a.ttlDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-a.stopTTL:
			return
		case <-t.C:
			a.ReclaimExpired()
		}
	}
}

// Stats is a snapshot of an arena's occupancy.
type Stats struct {
	Segments    int     // segments mapped, dedicated ones included
	Dedicated   int     // segments made for one oversized tensor
	Total       int64   // bytes in all segments
	Free        int64   // bytes not reserved
	Largest     int64   // largest free block in any segment
	Pinned      int64   // bytes registered with the device
	LiveSlots   int     // tensors reserved or published and not yet freed
	SpillFiles  int     // per-tensor files alive now
	Spills      uint64  // tensors spilled at the cap so far
	TTLReclaims uint64  // slots freed by the TTL backstop so far
	FragFails   uint64  // reservations that failed although free space covered them
	Acks        uint64  // consumer ACKs so far
	Abandoned   uint64  // references dropped because a consumer went away
	Frag        float64 // 1 - (sum of each segment's largest free block)/Free now
	PeakFrag    float64 // the highest Frag seen at a Stats call
}

// Summary is the one-line form used in warnings and errors.
func (s Stats) Summary() string {
	return fmt.Sprintf("%d segments, %s total, %s free, largest free block %s, %s pinned, %d live slots, %d spill files",
		s.Segments, units.Bytes(s.Total), units.Bytes(s.Free), units.Bytes(s.Largest), units.Bytes(s.Pinned), s.LiveSlots, s.SpillFiles)
}

// Stats returns the arena's occupancy and counters.
func (a *Arena) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.statsLocked()
}

func (a *Arena) statsLocked() Stats {
	s := Stats{Segments: len(a.segs), Pinned: a.pinned, LiveSlots: len(a.slots), SpillFiles: int(a.counters.spillFiles),
		Spills: a.counters.spills, TTLReclaims: a.counters.ttlReclaimed, FragFails: a.counters.fragWarnings,
		Acks: a.counters.acked, Abandoned: a.counters.abandoned}
	var sumLargest int64
	for _, seg := range a.segs {
		st := seg.alloc.Stats()
		s.Total += st.Total
		s.Free += st.Free
		s.Largest = max(s.Largest, st.Largest)
		sumLargest += st.Largest
		if seg.dedicated {
			s.Dedicated++
		}
	}
	// Free space split across segments is not fragmentation (no tensor
	// spans segments anyway); free space split inside one is.
	if s.Free > 0 {
		s.Frag = 1 - float64(sumLargest)/float64(s.Free)
	}
	a.counters.peakFrag = max(a.counters.peakFrag, s.Frag)
	s.PeakFrag = a.counters.peakFrag
	return s
}

// SegmentNames lists the arena's segment file names.
func (a *Arena) SegmentNames() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, s := range a.segs {
		out = append(out, s.file.name)
	}
	return out
}

// Close unregisters, unmaps and unlinks every segment and spill file. Slots
// still live are gone with them. A segment holding a reserved slot whose
// payload is still being written (a Put in progress, or Bytes handed out
// and not yet published or released) is unlinked now and unmapped once
// the last such slot is published (which then fails) or released, so the
// writer never faults.
func (a *Arena) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	var errs []error
	for _, s := range a.slots {
		if s.spill != nil {
			errs = append(errs, s.spill.unlink(), s.spill.close())
			s.spill = nil
		}
		s.done = true
	}
	for _, seg := range a.segs {
		if seg.filling > 0 {
			errs = append(errs, seg.file.unlink())
			a.retired = append(a.retired, seg)
			continue
		}
		errs = append(errs, a.dropSegment(seg))
	}
	a.segs = nil
	a.wake()
	stop := a.stopTTL
	a.mu.Unlock()
	if stop != nil {
		close(stop)
		<-a.ttlDone
	}
	return errors.Join(errs...)
}

func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }
