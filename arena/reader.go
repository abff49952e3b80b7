package arena

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
)

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	Dir string // where producers' segments live; default /dev/shm
	// UID is the only owner whose files are read (default: ours). A
	// descriptor naming another user's file is refused before it is mapped.
	UID *int
	// Transport is this consumer's setting; a segment descriptor reaching a
	// file-transport consumer is refused, naming the setting.
	Transport Transport
	// Device, when set, page-locks each mapped peer segment once, within
	// PinBudget bytes (default 4 GiB), for copies to the device.
	Device    gpu.Device
	PinBudget int64
	// EvictEvery bounds how often reads look for mappings to drop (default
	// 100ms), keeping the stat calls off the hot path.
	EvictEvery time.Duration
	// CopyThreads is how many threads copy one large tensor out (or read
	// its file); default half the cores, at most 8.
	CopyThreads int
	// LockTimeout bounds the wait for a segment's shared lock when it is
	// first mapped (default DefaultLockTimeout); the read then fails with
	// ErrLockTimeout. The wait never holds up reads of other segments.
	LockTimeout time.Duration
}

// Reader is the consumer side: it maps each producer segment once, caches
// the mapping, and drops it when the producer is gone and no copy out of it
// is in flight. It is safe for concurrent use.
type Reader struct {
	cfg       ReaderConfig
	uid       int
	mu        sync.Mutex
	maps      map[string]*peerSeg
	pinned    int64
	lastEvict time.Time
	gone      map[owner]bool
	live      map[owner]bool // producers with a Receiver open on this Reader
	evicted   uint64
	closed    bool
}

type owner struct {
	entity string
	pid    int
}

type peerSeg struct {
	f        *shmFile
	owner    owner
	inflight int
	unpin    func() error
	dead     bool
}

// NewReader returns a Reader.
func NewReader(cfg ReaderConfig) *Reader {
	if cfg.Dir == "" {
		cfg.Dir = DefaultDir
	}
	if cfg.Transport == "" {
		cfg.Transport = TransportArena
	}
	if cfg.PinBudget == 0 {
		cfg.PinBudget = DefaultPinBudget
	}
	if cfg.EvictEvery == 0 {
		cfg.EvictEvery = 100 * time.Millisecond
	}
	if cfg.LockTimeout <= 0 {
		cfg.LockTimeout = DefaultLockTimeout
	}
	cfg.CopyThreads = resolveThreads(cfg.CopyThreads)
	uid := os.Getuid()
	if cfg.UID != nil {
		uid = *cfg.UID
	}
	return &Reader{cfg: cfg, uid: uid, maps: make(map[string]*peerSeg), gone: make(map[owner]bool), live: make(map[owner]bool), lastEvict: time.Now()}
}

// check validates a descriptor against this consumer before anything is
// opened: its static form, and the transport setting.
func (r *Reader) check(d *Descriptor) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.checkLocked(d)
}

func (r *Reader) checkLocked(d *Descriptor) error {
	cached := false
	if d.Loc == InSegment {
		// A name already mapped was validated when it was.
		_, cached = r.maps[d.File]
	}
	if !cached {
		if err := d.validateName(); err != nil {
			return err
		}
	}
	if err := d.validateLayout(); err != nil {
		return err
	}
	if d.Loc == InSegment && r.cfg.Transport == TransportFile {
		return fmt.Errorf("transport mismatch: tensor %d is in arena segment %s but this consumer uses the file transport; the transport setting (--transport / Config.Transport) must be the same for producers and consumers", d.ID, d.File)
	}
	return nil
}

// View returns the tensor's bytes inside the producer's segment, with no
// copy. release must be called once the caller is done reading them —
// after the copy out has completed — and before the tensor is ACKed.
func (r *Reader) View(d Descriptor) (mem []byte, release func(), err error) {
	if err := r.check(&d); err != nil {
		return nil, nil, err
	}
	return r.view(&d)
}

// view is View for a checked descriptor.
func (r *Reader) view(d *Descriptor) (mem []byte, release func(), err error) {
	if d.Loc != InSegment {
		return nil, nil, fmt.Errorf("tensor %d is in file %s, not in a segment: read it with ReadInto", d.ID, d.File)
	}
	r.maybeEvict()
	r.mu.Lock()
	defer r.mu.Unlock()
	ps, err := r.mapLocked(d.File)
	if err != nil {
		return nil, nil, fmt.Errorf("tensor %d: %w", d.ID, err)
	}
	if end := d.Offset + d.Size; end > int64(len(ps.f.mem)) {
		return nil, nil, fmt.Errorf("descriptor for tensor %d refused: [%d, %d) is past the end of segment %s (%d bytes)", d.ID, d.Offset, end, d.File, len(ps.f.mem))
	}
	ps.inflight++
	var once sync.Once
	release = func() {
		once.Do(func() {
			r.mu.Lock()
			ps.inflight--
			r.mu.Unlock()
		})
	}
	return ps.f.mem[d.Offset : d.Offset+d.Size : d.Offset+d.Size], release, nil
}

// mapLocked returns the mapping of segment name, mapping it the first time.
// It is called with r.mu held and returns with it held, but releases it
// while it opens the file and waits for its lock: one segment whose lock
// another process holds must not stall reads of unrelated segments.
func (r *Reader) mapLocked(name string) (*peerSeg, error) {
	if ps, ok := r.maps[name]; ok {
		return ps, nil
	}
	n, _ := ParseName(name) // validated by check
	o := owner{n.Entity, n.PID}
	gone := func() error { return fmt.Errorf("segment %s belongs to a producer that is gone", name) }
	if r.gone[o] {
		return nil, gone()
	}
	r.mu.Unlock()
	f, err := openFile(r.cfg.Dir, name, r.uid, true, r.cfg.LockTimeout)
	r.mu.Lock()
	if err != nil {
		return nil, err
	}
	// While r.mu was released, another read may have mapped it, the
	// producer may have gone, or the Reader may have closed.
	if ps, ok := r.maps[name]; ok {
		_ = f.close()
		return ps, nil
	}
	if r.gone[o] || r.closed {
		_ = f.close()
		if r.closed {
			return nil, errors.New("reader is closed")
		}
		return nil, gone()
	}
	ps := &peerSeg{f: f, owner: o}
	if r.cfg.Device != nil && r.pinned+f.size <= r.cfg.PinBudget {
		if unpin, err := r.cfg.Device.Register(f.mem); err == nil {
			ps.unpin = unpin
			r.pinned += f.size
		}
	}
	r.maps[name] = ps
	return ps, nil
}

// ReadInto copies the tensor into dst (len(dst) >= d.Size), from a segment
// or a file alike: one batch may mix in-arena and spilled tensors.
func (r *Reader) ReadInto(d Descriptor, dst []byte) error {
	if int64(len(dst)) < d.Size {
		return fmt.Errorf("tensor %d: destination of %d bytes is smaller than its %d", d.ID, len(dst), d.Size)
	}
	if err := r.check(&d); err != nil {
		return err
	}
	if d.Loc == InFile {
		return r.readFile(d, dst[:d.Size])
	}
	mem, release, err := r.view(&d)
	if err != nil {
		return err
	}
	pcopy(dst, mem, r.cfg.CopyThreads)
	release()
	return nil
}

// ReadBatchInto is ReadInto for a batch, with the cache looked up and the
// in-flight counts taken and dropped once for the whole batch rather than
// per tensor. errs[i] is tensor i's outcome.
func (r *Reader) ReadBatchInto(ds []Descriptor, dst [][]byte, errs []error) {
	r.maybeEvict()
	segs := make([]*peerSeg, len(ds))
	r.mu.Lock()
	for i := range ds {
		d := &ds[i]
		errs[i] = nil
		if int64(len(dst[i])) < d.Size {
			errs[i] = fmt.Errorf("tensor %d: destination of %d bytes is smaller than its %d", d.ID, len(dst[i]), d.Size)
			continue
		}
		if errs[i] = r.checkLocked(d); errs[i] != nil || d.Loc != InSegment {
			continue
		}
		ps, err := r.mapLocked(d.File)
		if err != nil {
			errs[i] = fmt.Errorf("tensor %d: %w", d.ID, err)
			continue
		}
		if end := d.Offset + d.Size; end > int64(len(ps.f.mem)) {
			errs[i] = fmt.Errorf("descriptor for tensor %d refused: [%d, %d) is past the end of segment %s (%d bytes)", d.ID, d.Offset, end, d.File, len(ps.f.mem))
			continue
		}
		ps.inflight++
		segs[i] = ps
	}
	r.mu.Unlock()
	for i := range ds {
		d := &ds[i]
		switch {
		case errs[i] != nil:
		case segs[i] != nil:
			pcopy(dst[i], segs[i].f.mem[d.Offset:d.Offset+d.Size], r.cfg.CopyThreads)
		default:
			errs[i] = r.readFile(*d, dst[i][:d.Size])
		}
	}
	r.mu.Lock()
	for _, ps := range segs {
		if ps != nil {
			ps.inflight--
		}
	}
	r.mu.Unlock()
}

// openSpill opens a per-tensor file and checks the descriptor's size
// against the real file, before the caller allocates anything for it.
func (r *Reader) openSpill(d *Descriptor) (*shmFile, error) {
	f, err := openFile(r.cfg.Dir, d.File, r.uid, false, r.cfg.LockTimeout)
	if err != nil {
		return nil, fmt.Errorf("tensor %d: %w", d.ID, err)
	}
	if f.size < d.Size {
		_ = f.close()
		return nil, fmt.Errorf("descriptor for tensor %d refused: %d bytes, but file %s has %d", d.ID, d.Size, d.File, f.size)
	}
	return f, nil
}

func (r *Reader) readFile(d Descriptor, dst []byte) error {
	f, err := r.openSpill(&d)
	if err != nil {
		return err
	}
	defer f.close()
	return r.readSpill(f, &d, dst)
}

func (r *Reader) readSpill(f *shmFile, d *Descriptor, dst []byte) error {
	short, err := ppread(f.fd, dst, r.cfg.CopyThreads)
	if err != nil {
		return fmt.Errorf("tensor %d: reading %s: %w", d.ID, f.path, err)
	}
	if short {
		return fmt.Errorf("tensor %d: reading %s: file shrank below %d bytes", d.ID, f.path, len(dst))
	}
	return nil
}

// CopyToDevice queues the copy of a tensor into device memory on stream
// and returns release, to be called once an event recorded after the copy
// has completed (then the tensor may be ACKed). A spilled tensor is read
// into a host staging buffer that release lets go.
func (r *Reader) CopyToDevice(s gpu.Stream, dst gpu.Buffer, off int64, d Descriptor) (release func(), err error) {
	if err := r.check(&d); err != nil {
		return nil, err
	}
	if d.Loc == InFile {
		// The size is checked against the real file before the staging
		// buffer is allocated: a hostile descriptor cannot make us allocate.
		f, err := r.openSpill(&d)
		if err != nil {
			return nil, err
		}
		stage := make([]byte, d.Size)
		err = r.readSpill(f, &d, stage)
		_ = f.close()
		if err != nil {
			return nil, err
		}
		if err := s.CopyHtoD(dst, off, stage); err != nil {
			return nil, fmt.Errorf("tensor %d: copy to device: %w", d.ID, err)
		}
		return func() { stage = nil }, nil
	}
	mem, release, err := r.view(&d)
	if err != nil {
		return nil, err
	}
	if err := s.CopyHtoD(dst, off, mem); err != nil {
		release()
		return nil, fmt.Errorf("tensor %d: copy to device: %w", d.ID, err)
	}
	return release, nil
}

// CheckSize validates d and checks its range against the real segment or
// file, mapping the segment as a read would: a caller that allocates a
// destination of d.Size bytes calls it first, so a descriptor claiming more
// bytes than exist is refused before anything is allocated.
func (r *Reader) CheckSize(d Descriptor) error {
	if err := r.check(&d); err != nil {
		return err
	}
	if d.Loc == InFile {
		f, err := r.openSpill(&d)
		if err != nil {
			return err
		}
		return f.close()
	}
	_, release, err := r.view(&d)
	if err != nil {
		return err
	}
	release()
	return nil
}

// claim records a Receiver for the producer (entity, pid); false when one
// is open already: a second link claiming a live producer's identity is
// refused, so closing it cannot make the Reader forget the real producer.
func (r *Reader) claim(entity string, pid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := owner{entity, pid}
	if r.live[o] {
		return false
	}
	r.live[o] = true
	delete(r.gone, o) // a new producer may reuse a dead one's pid
	return true
}

// unclaim ends a claim and forgets the producer's segments.
func (r *Reader) unclaim(entity string, pid int) {
	r.mu.Lock()
	delete(r.live, owner{entity, pid})
	r.mu.Unlock()
	r.ForgetOwner(entity, pid)
}

// ForgetOwner marks every segment of the producer (entity, pid) as gone —
// its connection closed — and drops those mappings once no copy out of them
// is in flight, so a dead producer's segments do not stay mapped (and
// locked, which would keep the sweep from reclaiming them).
func (r *Reader) ForgetOwner(entity string, pid int) {
	r.mu.Lock()
	o := owner{entity, pid}
	r.gone[o] = true
	for _, ps := range r.maps {
		if ps.owner == o {
			ps.dead = true
		}
	}
	r.mu.Unlock()
	r.Evict()
}

func (r *Reader) maybeEvict() {
	r.mu.Lock()
	due := time.Since(r.lastEvict) >= r.cfg.EvictEvery
	if due {
		r.lastEvict = time.Now()
	}
	r.mu.Unlock()
	if due {
		r.Evict()
	}
}

// Evict drops cached mappings whose backing file is gone (or whose producer
// is) and out of which no copy is in flight. It returns how many it dropped.
func (r *Reader) Evict() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for name, ps := range r.maps {
		if ps.inflight > 0 {
			continue
		}
		if !ps.dead && ps.f.linked() {
			continue
		}
		if err := r.dropLocked(ps); err != nil {
			continue // keep it, and its accounting, if it cannot be unregistered
		}
		delete(r.maps, name)
		n++
	}
	r.evicted += uint64(n)
	return n
}

func (r *Reader) dropLocked(ps *peerSeg) error {
	if ps.unpin != nil {
		// Unregister before unmapping: the registration refers to the mapping.
		if err := ps.unpin(); err != nil {
			return err
		}
		ps.unpin = nil
		r.pinned -= ps.f.size
	}
	return ps.f.close()
}

// ReaderStats is a snapshot of a Reader's cache.
type ReaderStats struct {
	Mapped      int   // peer segments mapped now
	MappedBytes int64 //
	Pinned      int64 // bytes of them registered with the device
	InFlight    int   // views not yet released
	Evicted     uint64
}

// Stats returns the Reader's cache occupancy.
func (r *Reader) Stats() ReaderStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := ReaderStats{Mapped: len(r.maps), Pinned: r.pinned, Evicted: r.evicted}
	for _, ps := range r.maps {
		s.MappedBytes += ps.f.size
		s.InFlight += ps.inflight
	}
	return s
}

// Close drops every mapping. Views still in flight make it fail.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	var errs []error
	for name, ps := range r.maps {
		if ps.inflight > 0 {
			errs = append(errs, fmt.Errorf("closing reader: %d copies still in flight from %s", ps.inflight, name))
			continue
		}
		errs = append(errs, r.dropLocked(ps))
		delete(r.maps, name)
	}
	return errors.Join(errs...)
}
