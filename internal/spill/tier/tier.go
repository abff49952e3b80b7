// Package tier holds the places a spilled block can live — device memory, a
// pinned (registered) shared-memory segment, pageable host memory, a file on
// disk, and a segment owned by another process — behind one interface, plus
// the device-memory pool whose blocks move between them and the checks that
// prove a block came back whole.
//
// Every move says how many bytes it actually delivered: a slot's Filled is
// what its spill really wrote, and Restore returns what it really copied.
// The pool measures the rest by reading device memory back: the hash of each
// block, and how far a restore reached (Pool.Check), so that a short restore
// is reported with the bytes that arrived, never with the bytes requested.
package tier

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/mstar-dev/mstar/internal/gpu"
)

// Kind names a tier.
type Kind string

const (
	Device   Kind = "device"   // another buffer in device memory (host memory on the CPU backend)
	Pinned   Kind = "pinned"   // a /dev/shm segment registered with the device
	Pageable Kind = "pageable" // ordinary Go heap memory
	File     Kind = "file"     // a file per slot in a temporary folder
	Peer     Kind = "peer"     // a /dev/shm segment created and held by another process
)

// Kinds lists every tier, in matrix column order.
var Kinds = []Kind{Device, Pinned, Pageable, File, Peer}

// ParseKinds parses a comma-separated list of tier names.
func ParseKinds(s string) ([]Kind, error) {
	var out []Kind
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		ok := false
		for _, k := range Kinds {
			if string(k) == f {
				out, ok = append(out, k), true
			}
		}
		if !ok {
			return nil, fmt.Errorf("unknown tier %q (tiers: device, pinned, pageable, file, peer)", f)
		}
	}
	if len(out) == 0 {
		// An empty list would run nothing and pass.
		return nil, fmt.Errorf("no tier in %q (tiers: device, pinned, pageable, file, peer)", s)
	}
	return out, nil
}

// ErrFull is returned when a tier has no room.
var ErrFull = errors.New("tier full")

// Tier is a place blocks can be spilled to. Safe for concurrent use.
type Tier interface {
	Kind() Kind
	// Alloc reserves a slot of n bytes.
	Alloc(n int64) (Slot, error)
	// Used is the bytes reserved by live slots (page-rounded in segments).
	Used() int64
	// Capacity is the most it can hold; -1 when bounded only by the machine.
	Capacity() int64
	// Describe says where the bytes go, for results ("/dev/shm/mstar_spill_…").
	Describe() string
	// Close releases everything; live slots become invalid.
	Close() error
}

// Slot is room for one block in a tier. A slot is used by one goroutine at
// a time; different slots may be used concurrently.
type Slot interface {
	Size() int64
	// Filled is the bytes the last Spill actually delivered into the slot.
	Filled() int64
	// Spill copies Size() bytes from src[off:] into the slot on stream s and
	// waits for them. It returns the bytes that arrived; on cancellation
	// (ctx) it stops between chunks and returns what arrived so far.
	Spill(ctx context.Context, s gpu.Stream, src gpu.Buffer, off int64) (int64, error)
	// Restore copies the slot's first n bytes (n ≤ Filled) to dst[off:] and
	// waits for them. It returns the bytes that arrived.
	Restore(ctx context.Context, s gpu.Stream, dst gpu.Buffer, off, n int64) (int64, error)
	Free() error
}

// DefaultChunk is the largest single copy a slot issues: large enough that
// per-call cost is lost in the transfer, small enough that a cancelled spill
// stops promptly.
const DefaultChunk = 64 << 20

// Options configure Open.
type Options struct {
	Dev gpu.Device
	// Capacity bounds the tier in bytes; it is required for the segment
	// tiers (pinned, peer), whose segment is made at this size, and
	// optional (0: unbounded) for the others.
	Capacity int64
	Chunk    int64  // largest single copy; 0 means DefaultChunk
	ShmDir   string // folder for segments; "" means DefaultShmDir()
	Dir      string // folder for the file tier; "" means a new temporary folder
	Holder   Holder // how to start the holder process of the peer tier
}

// Open makes a tier of the given kind.
func Open(kind Kind, opt Options) (Tier, error) {
	if opt.Dev == nil {
		return nil, errors.New("tier: no device")
	}
	if opt.Chunk <= 0 {
		opt.Chunk = DefaultChunk
	}
	if opt.ShmDir == "" {
		opt.ShmDir = DefaultShmDir()
	}
	switch kind {
	case Device:
		return newDeviceTier(opt), nil
	case Pinned:
		return newPinnedTier(opt)
	case Pageable:
		return newPageableTier(opt), nil
	case File:
		return newFileTier(opt)
	case Peer:
		return newPeerTier(opt)
	}
	return nil, fmt.Errorf("unknown tier %q", kind)
}

// budget enforces an optional capacity for the unbounded tiers.
type budget struct {
	mu       sync.Mutex
	capacity int64 // 0: none
	used     int64
}

func (b *budget) take(n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.capacity > 0 && b.used+n > b.capacity {
		return fmt.Errorf("%w: %d bytes wanted, %d of %d free", ErrFull, n, b.capacity-b.used, b.capacity)
	}
	b.used += n
	return nil
}

func (b *budget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

func (b *budget) limit() int64 {
	if b.capacity > 0 {
		return b.capacity
	}
	return -1
}

// chunks calls f for each [o, o+c) of n bytes in chunks of at most chunk,
// checking ctx before each; it returns the bytes f completed.
func chunks(ctx context.Context, n, chunk int64, f func(o, c int64) (int64, error)) (int64, error) {
	var done int64
	for done < n {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		c := min(chunk, n-done)
		got, err := f(done, c)
		done += got
		if err != nil {
			return done, err
		}
		if got < c {
			return done, fmt.Errorf("short copy: %d of %d bytes at offset %d", got, c, done-got)
		}
	}
	return done, nil
}

// hostSlot is a slot in host memory the device copies to directly: a range
// of a segment (pinned, peer) or a heap slice (pageable).
type hostSlot struct {
	mem     []byte
	segOff  int64 // offset in its segment; -1 for heap memory
	chunk   int64
	filled  int64
	release func()
}

func (h *hostSlot) Size() int64   { return int64(len(h.mem)) }
func (h *hostSlot) Filled() int64 { return h.filled }

func (h *hostSlot) Spill(ctx context.Context, s gpu.Stream, src gpu.Buffer, off int64) (int64, error) {
	return spillNow(ctx, h, s, src, off)
}

func (h *hostSlot) Restore(ctx context.Context, s gpu.Stream, dst gpu.Buffer, off, n int64) (int64, error) {
	return restoreNow(ctx, h, s, dst, off, n)
}

func (h *hostSlot) queueSpill(ctx context.Context, s gpu.Stream, src gpu.Buffer, off int64) (int64, error) {
	h.filled = 0
	return chunks(ctx, int64(len(h.mem)), h.chunk, func(o, c int64) (int64, error) {
		return queued(c, s.CopyDtoH(h.mem[o:o+c], src, off+o))
	})
}

func (h *hostSlot) queueRestore(ctx context.Context, s gpu.Stream, dst gpu.Buffer, off, n int64) (int64, error) {
	if n > h.filled {
		return 0, fmt.Errorf("restore of %d bytes from a slot holding %d", n, h.filled)
	}
	return chunks(ctx, n, h.chunk, func(o, c int64) (int64, error) {
		return queued(c, s.CopyHtoD(dst, off+o, h.mem[o:o+c]))
	})
}

func (h *hostSlot) settleSpill(n int64) { h.filled = n }

// spillNow is a queued spill waited for at once: the bytes queued before a
// cancellation or a failed copy count once the stream has delivered them.
func spillNow(ctx context.Context, q queuer, s gpu.Stream, src gpu.Buffer, off int64) (int64, error) {
	n, err := q.queueSpill(ctx, s, src, off)
	if serr := s.Sync(); serr != nil {
		q.settleSpill(0)
		return 0, errors.Join(err, serr)
	}
	q.settleSpill(n)
	return n, err
}

func restoreNow(ctx context.Context, q queuer, s gpu.Stream, dst gpu.Buffer, off, n int64) (int64, error) {
	got, err := q.queueRestore(ctx, s, dst, off, n)
	if serr := s.Sync(); serr != nil {
		return 0, errors.Join(err, serr)
	}
	return got, err
}

func (h *hostSlot) Free() error {
	if h.release != nil {
		h.release()
		h.release = nil
	}
	h.mem = nil
	return nil
}
