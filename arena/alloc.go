package arena

import (
	"errors"
	"fmt"
)

// Align is the granule of every reservation: offsets and sizes handed out by
// an Allocator are multiples of it. 64 bytes keeps small tensors dense and
// every slot cache-line aligned.
const Align = 64

// Block is one reservation inside a region. It is a value: Free takes it
// back, and a stale or doubled Block is refused rather than corrupting the
// free lists.
type Block struct {
	Off  int64 // byte offset in the region, a multiple of Align
	Size int64 // bytes reserved (the request rounded up to Align)
	id   int32 // allocator-private handle
	gen  uint32
}

// AllocStats is an allocator's accounting.
type AllocStats struct {
	Total   int64 // bytes managed
	Free    int64 // bytes not reserved
	Largest int64 // largest free block: the biggest reservation that can succeed
	Live    int   // blocks reserved and not yet freed
}

// Fragmentation is 1 - largest/free: 0 when the free space is one block, near
// 1 when it is shattered into pieces too small to use.
func (s AllocStats) Fragmentation() float64 {
	if s.Free == 0 {
		return 0
	}
	return 1 - float64(s.Largest)/float64(s.Free)
}

// Allocator hands out non-overlapping blocks of one region. Implementations
// are not safe for concurrent use: the Arena serialises them.
type Allocator interface {
	// Reserve returns a block of at least n bytes, or false when no free
	// block is large enough.
	Reserve(n int64) (Block, bool)
	// Free returns a block. A block that is not live (doubled, stale, from
	// another allocator) is refused with an error.
	Free(b Block) error
	Stats() AllocStats
}

// AllocatorKind names an allocator design.
type AllocatorKind string

const (
	// TLSF is the O(1) two-level segregated-fit allocator: the default, it is
	// the faster of the two by more than an order of magnitude with 10 000
	// live blocks (see BenchmarkAllocator).
	TLSF AllocatorKind = "tlsf"
	// FirstFit is a sorted, coalescing first-fit free list: simple, and the
	// design the arena started from; reservations cost O(free blocks).
	FirstFit AllocatorKind = "firstfit"
)

// NewAllocator returns an allocator of the given kind over size bytes
// (rounded down to Align).
func NewAllocator(kind AllocatorKind, size int64) (Allocator, error) {
	if size < Align {
		return nil, fmt.Errorf("allocator: region of %d bytes is smaller than one %d-byte granule", size, Align)
	}
	switch kind {
	case TLSF, "":
		return newTLSF(size), nil
	case FirstFit:
		return newFirstFit(size), nil
	}
	return nil, fmt.Errorf("allocator: unknown kind %q (want %q or %q)", kind, TLSF, FirstFit)
}

var errNotLive = errors.New("block is not live in this allocator (double free or stale block)")

// granules rounds n bytes up to whole granules (at least one).
func granules(n int64) int64 {
	if n <= 0 {
		return 1
	}
	return (n + Align - 1) / Align
}
