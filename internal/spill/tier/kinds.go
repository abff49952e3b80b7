package tier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/mstar-dev/mstar/internal/gpu"
	"golang.org/x/sys/unix"
)

// ---- device ----

type deviceTier struct {
	opt Options
	b   budget
}

func newDeviceTier(opt Options) *deviceTier {
	return &deviceTier{opt: opt, b: budget{capacity: opt.Capacity}}
}

func (t *deviceTier) Kind() Kind       { return Device }
func (t *deviceTier) Used() int64      { return t.b.inUse() }
func (t *deviceTier) Capacity() int64  { return t.b.limit() }
func (t *deviceTier) Describe() string { return "device memory on " + t.opt.Dev.Info().ID }
func (t *deviceTier) Close() error     { return nil }

func (t *deviceTier) Alloc(n int64) (Slot, error) {
	if err := t.b.take(n); err != nil {
		return nil, err
	}
	buf, err := t.opt.Dev.Alloc(n)
	if err != nil {
		t.b.give(n)
		return nil, fmt.Errorf("device tier: %w", err)
	}
	return &deviceSlot{buf: buf, chunk: t.opt.Chunk, t: t}, nil
}

type deviceSlot struct {
	buf    gpu.Buffer
	chunk  int64
	filled int64
	t      *deviceTier
}

func (d *deviceSlot) Size() int64   { return d.buf.Size() }
func (d *deviceSlot) Filled() int64 { return d.filled }

func (d *deviceSlot) Spill(ctx context.Context, s gpu.Stream, src gpu.Buffer, off int64) (int64, error) {
	return spillNow(ctx, d, s, src, off)
}

func (d *deviceSlot) Restore(ctx context.Context, s gpu.Stream, dst gpu.Buffer, off, n int64) (int64, error) {
	return restoreNow(ctx, d, s, dst, off, n)
}

func (d *deviceSlot) queueSpill(ctx context.Context, s gpu.Stream, src gpu.Buffer, off int64) (int64, error) {
	d.filled = 0
	return chunks(ctx, d.buf.Size(), d.chunk, func(o, c int64) (int64, error) {
		return queued(c, s.CopyDtoD(d.buf, o, src, off+o, c))
	})
}

func (d *deviceSlot) queueRestore(ctx context.Context, s gpu.Stream, dst gpu.Buffer, off, n int64) (int64, error) {
	if n > d.filled {
		return 0, fmt.Errorf("restore of %d bytes from a slot holding %d", n, d.filled)
	}
	return chunks(ctx, n, d.chunk, func(o, c int64) (int64, error) {
		return queued(c, s.CopyDtoD(dst, off+o, d.buf, o, c))
	})
}

func (d *deviceSlot) settleSpill(n int64) { d.filled = n }

func (d *deviceSlot) Free() error {
	if d.buf == nil {
		return nil
	}
	n := d.buf.Size()
	err := d.buf.Free()
	d.t.b.give(n)
	d.buf = nil
	return err
}

// ---- pinned: a registered /dev/shm segment ----

type segTier struct {
	kind       Kind
	opt        Options
	seg        *segment
	r          *ranges
	unregister func() error
	peer       *holderProc // peer tier only
	closeOnce  sync.Once
	closeErr   error
}

func newPinnedTier(opt Options) (*segTier, error) {
	if opt.Capacity <= 0 {
		return nil, errors.New("pinned tier: a capacity is required (the segment is made at that size)")
	}
	size := roundUp(opt.Capacity, page)
	seg, err := createSegment(opt.ShmDir, "pinned", size)
	if err != nil {
		return nil, fmt.Errorf("pinned tier: %w", err)
	}
	t := &segTier{kind: Pinned, opt: opt, seg: seg, r: newRanges(size)}
	if err := t.register(); err != nil {
		seg.close()
		return nil, err
	}
	return t, nil
}

func (t *segTier) register() error {
	// Touch every page first: registering untouched tmpfs pages costs far
	// more (DESIGN.md: ~300 ms per GiB against ~36 ms).
	for i := 0; i < len(t.seg.mem); i += page {
		t.seg.mem[i] = 0
	}
	un, err := t.opt.Dev.Register(t.seg.mem)
	if err != nil {
		return fmt.Errorf("%s tier: registering %s (%d bytes): %w", t.kind, t.seg.path, len(t.seg.mem), err)
	}
	t.unregister = un
	return nil
}

func (t *segTier) Kind() Kind      { return t.kind }
func (t *segTier) Used() int64     { return t.r.inUse() }
func (t *segTier) Capacity() int64 { return t.r.size }
func (t *segTier) Describe() string {
	if t.peer != nil {
		return fmt.Sprintf("%s, held by pid %d, registered", t.seg.path, t.peer.cmd.Process.Pid)
	}
	return t.seg.path + ", registered"
}

func (t *segTier) Alloc(n int64) (Slot, error) {
	off, err := t.r.alloc(n)
	if err != nil {
		return nil, fmt.Errorf("%s tier: %w", t.kind, err)
	}
	return &hostSlot{mem: t.seg.mem[off : off+n : off+n], segOff: off, chunk: t.opt.Chunk, release: func() { t.r.release(off, n) }}, nil
}

func (t *segTier) Close() error {
	t.closeOnce.Do(func() {
		var errs []error
		if t.unregister != nil {
			errs = append(errs, t.unregister())
		}
		errs = append(errs, t.seg.close())
		if t.peer != nil {
			errs = append(errs, t.peer.stop())
		}
		t.closeErr = errors.Join(errs...)
	})
	return t.closeErr
}

// segmentOffset returns where a slot's memory starts in the segment.
func (t *segTier) segmentOffset(s Slot) (int64, bool) {
	h, ok := s.(*hostSlot)
	if !ok || h.segOff < 0 {
		return 0, false
	}
	return h.segOff, true
}

// ---- pageable ----

type pageableTier struct {
	opt Options
	b   budget
}

func newPageableTier(opt Options) *pageableTier {
	return &pageableTier{opt: opt, b: budget{capacity: opt.Capacity}}
}

func (t *pageableTier) Kind() Kind       { return Pageable }
func (t *pageableTier) Used() int64      { return t.b.inUse() }
func (t *pageableTier) Capacity() int64  { return t.b.limit() }
func (t *pageableTier) Describe() string { return "anonymous mmap (pageable)" }
func (t *pageableTier) Close() error     { return nil }

// Alloc maps fresh anonymous memory rather than taking it from the Go heap:
// every slot then starts untouched, as a new pageable buffer does, so its
// first-touch cost is the same every time instead of depending on what the
// heap happened to have freed; and Free gives it back at once.
func (t *pageableTier) Alloc(n int64) (Slot, error) {
	if err := t.b.take(n); err != nil {
		return nil, fmt.Errorf("pageable tier: %w", err)
	}
	mem, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.b.give(n)
		return nil, fmt.Errorf("pageable tier: mapping %d bytes: %w", n, err)
	}
	return &hostSlot{mem: mem, segOff: -1, chunk: t.opt.Chunk, release: func() {
		unix.Munmap(mem)
		t.b.give(n)
	}}, nil
}

// ---- file ----

type fileTier struct {
	opt     Options
	dir     string
	ownDir  bool
	b       budget
	seq     atomic.Int64
	staging chan []byte // pinned staging buffers, made on demand
	mu      sync.Mutex
	frees   []func() error
}

// stagingMax bounds the staging buffers (one per concurrent slot copy).
const stagingMax = 16

func newFileTier(opt Options) (*fileTier, error) {
	t := &fileTier{opt: opt, b: budget{capacity: opt.Capacity}, staging: make(chan []byte, stagingMax)}
	if opt.Dir == "" {
		d, err := os.MkdirTemp("", "mstar-spill-file-*")
		if err != nil {
			return nil, fmt.Errorf("file tier: %w", err)
		}
		t.dir, t.ownDir = d, true
	} else {
		if err := os.MkdirAll(opt.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("file tier: %w", err)
		}
		t.dir = opt.Dir
	}
	return t, nil
}

func (t *fileTier) Kind() Kind       { return File }
func (t *fileTier) Used() int64      { return t.b.inUse() }
func (t *fileTier) Capacity() int64  { return t.b.limit() }
func (t *fileTier) Describe() string { return "files in " + t.dir }

func (t *fileTier) Alloc(n int64) (Slot, error) {
	if err := t.b.take(n); err != nil {
		return nil, fmt.Errorf("file tier: %w", err)
	}
	path := filepath.Join(t.dir, fmt.Sprintf("slot-%06d.bin", t.seq.Add(1)))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.b.give(n)
		return nil, fmt.Errorf("file tier: %w", err)
	}
	return &fileSlot{t: t, f: f, path: path, size: n}, nil
}

// stage borrows a pinned staging buffer of the tier's chunk size.
func (t *fileTier) stage() ([]byte, error) {
	select {
	case b := <-t.staging:
		return b, nil
	default:
	}
	b, free, err := t.opt.Dev.AllocPinned(t.opt.Chunk)
	if err != nil {
		return nil, fmt.Errorf("file tier staging: %w", err)
	}
	t.mu.Lock()
	t.frees = append(t.frees, free)
	t.mu.Unlock()
	return b, nil
}

func (t *fileTier) unstage(b []byte) {
	select {
	case t.staging <- b:
	default:
	}
}

func (t *fileTier) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for _, f := range t.frees {
		errs = append(errs, f())
	}
	t.frees = nil
	if t.ownDir {
		errs = append(errs, os.RemoveAll(t.dir))
	}
	return errors.Join(errs...)
}

type fileSlot struct {
	t      *fileTier
	f      *os.File
	path   string
	size   int64
	filled int64
}

func (s *fileSlot) Size() int64   { return s.size }
func (s *fileSlot) Filled() int64 { return s.filled }

func (s *fileSlot) Spill(ctx context.Context, st gpu.Stream, src gpu.Buffer, off int64) (int64, error) {
	s.filled = 0
	buf, err := s.t.stage()
	if err != nil {
		return 0, err
	}
	defer s.t.unstage(buf)
	n, err := chunks(ctx, s.size, s.t.opt.Chunk, func(o, c int64) (int64, error) {
		if err := st.CopyDtoH(buf[:c], src, off+o); err != nil {
			return 0, err
		}
		if err := st.Sync(); err != nil {
			return 0, err
		}
		w, err := s.f.WriteAt(buf[:c], o)
		return int64(w), err
	})
	s.filled = n
	if err != nil {
		return n, fmt.Errorf("spill to %s: %w", s.path, err)
	}
	return n, nil
}

func (s *fileSlot) Restore(ctx context.Context, st gpu.Stream, dst gpu.Buffer, off, n int64) (int64, error) {
	if n > s.filled {
		return 0, fmt.Errorf("restore of %d bytes from a slot holding %d", n, s.filled)
	}
	buf, err := s.t.stage()
	if err != nil {
		return 0, err
	}
	defer s.t.unstage(buf)
	got, err := chunks(ctx, n, s.t.opt.Chunk, func(o, c int64) (int64, error) {
		r, err := s.f.ReadAt(buf[:c], o)
		if err == io.EOF && int64(r) < c {
			err = fmt.Errorf("file ends %d bytes into a %d-byte chunk", r, c)
		}
		if r > 0 {
			if cerr := st.CopyHtoD(dst, off+o, buf[:r]); cerr != nil {
				return 0, cerr
			}
			if serr := st.Sync(); serr != nil {
				return 0, serr
			}
		}
		return int64(r), err
	})
	if err != nil {
		return got, fmt.Errorf("restore from %s: %w", s.path, err)
	}
	return got, nil
}

func (s *fileSlot) Free() error {
	if s.f == nil {
		return nil
	}
	err := errors.Join(s.f.Close(), os.Remove(s.path))
	s.f = nil
	s.t.b.give(s.size)
	return err
}
