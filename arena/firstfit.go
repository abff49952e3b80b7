package arena

import (
	"fmt"
	"sort"
)

// firstFit is a sorted, coalescing first-fit free list: free extents in
// address order; Reserve takes the front of the first extent that fits and
// Free merges with both neighbours. Reserve is O(free extents).
type firstFit struct {
	total int64
	free  []extent        // sorted by off, never adjacent (always coalesced)
	live  map[int64]int64 // reserved blocks, off -> size: refuses partial and stale frees
	used  int64
}

type extent struct{ off, size int64 }

func newFirstFit(size int64) *firstFit {
	size = size / Align * Align
	return &firstFit{total: size, free: []extent{{0, size}}, live: make(map[int64]int64)}
}

func (f *firstFit) Reserve(n int64) (Block, bool) {
	if n > f.total {
		return Block{}, false // and granules(n) could overflow
	}
	need := granules(n) * Align
	for i := range f.free {
		e := &f.free[i]
		if e.size < need {
			continue
		}
		b := Block{Off: e.off, Size: need}
		if e.size == need {
			f.free = append(f.free[:i], f.free[i+1:]...)
		} else {
			e.off += need
			e.size -= need
		}
		f.live[b.Off] = need
		f.used += need
		return b, true
	}
	return Block{}, false
}

func (f *firstFit) Free(b Block) error {
	if sz, ok := f.live[b.Off]; !ok || sz != b.Size {
		return fmt.Errorf("free [%d, +%d): %w", b.Off, b.Size, errNotLive)
	}
	// i is the first free extent after the block.
	i := sort.Search(len(f.free), func(i int) bool { return f.free[i].off >= b.Off })
	if i < len(f.free) && f.free[i].off < b.Off+b.Size {
		return fmt.Errorf("free [%d, +%d): overlaps free space at %d: %w", b.Off, b.Size, f.free[i].off, errNotLive)
	}
	if i > 0 && f.free[i-1].off+f.free[i-1].size > b.Off {
		return fmt.Errorf("free [%d, +%d): overlaps free space at %d: %w", b.Off, b.Size, f.free[i-1].off, errNotLive)
	}
	left := i > 0 && f.free[i-1].off+f.free[i-1].size == b.Off
	right := i < len(f.free) && b.Off+b.Size == f.free[i].off
	switch {
	case left && right:
		f.free[i-1].size += b.Size + f.free[i].size
		f.free = append(f.free[:i], f.free[i+1:]...)
	case left:
		f.free[i-1].size += b.Size
	case right:
		f.free[i].off = b.Off
		f.free[i].size += b.Size
	default:
		f.free = append(f.free, extent{})
		copy(f.free[i+1:], f.free[i:])
		f.free[i] = extent{b.Off, b.Size}
	}
	delete(f.live, b.Off)
	f.used -= b.Size
	return nil
}

func (f *firstFit) Stats() AllocStats {
	s := AllocStats{Total: f.total, Free: f.total - f.used, Live: len(f.live)}
	for _, e := range f.free {
		s.Largest = max(s.Largest, e.size)
	}
	return s
}

// freeExtents lists the free space in address order (for invariant checks).
func (f *firstFit) freeExtents() []extent { return append([]extent(nil), f.free...) }
