package tier

import (
	"fmt"
	"sort"
	"sync"
)

// page is the alignment of sub-allocations inside a segment, so that every
// slot starts on a page and copies to it are DMA-friendly.
const page = 4096

func roundUp(n, to int64) int64 { return (n + to - 1) / to * to }

// ranges is a first-fit allocator of [0, size) with coalescing on free.
// Segments hold at most a few thousand blocks, so a sorted slice is enough.
type ranges struct {
	mu   sync.Mutex
	size int64
	free []span // sorted by off, never adjacent
	used int64
}

type span struct{ off, n int64 }

func newRanges(size int64) *ranges {
	return &ranges{size: size, free: []span{{0, size}}}
}

func (r *ranges) alloc(n int64) (int64, error) {
	n = roundUp(n, page)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, f := range r.free {
		if f.n < n {
			continue
		}
		off := f.off
		if f.n == n {
			r.free = append(r.free[:i], r.free[i+1:]...)
		} else {
			r.free[i] = span{f.off + n, f.n - n}
		}
		r.used += n
		return off, nil
	}
	return 0, fmt.Errorf("%w: %d bytes wanted, %d of %d free (largest hole %d)", ErrFull, n, r.size-r.used, r.size, r.largest())
}

func (r *ranges) largest() int64 {
	var m int64
	for _, f := range r.free {
		m = max(m, f.n)
	}
	return m
}

func (r *ranges) release(off, n int64) {
	n = roundUp(n, page)
	r.mu.Lock()
	defer r.mu.Unlock()
	i := sort.Search(len(r.free), func(i int) bool { return r.free[i].off > off })
	r.free = append(r.free, span{})
	copy(r.free[i+1:], r.free[i:])
	r.free[i] = span{off, n}
	// Coalesce with the next, then with the previous.
	if i+1 < len(r.free) && r.free[i].off+r.free[i].n == r.free[i+1].off {
		r.free[i].n += r.free[i+1].n
		r.free = append(r.free[:i+1], r.free[i+2:]...)
	}
	if i > 0 && r.free[i-1].off+r.free[i-1].n == r.free[i].off {
		r.free[i-1].n += r.free[i].n
		r.free = append(r.free[:i], r.free[i+1:]...)
	}
	r.used -= n
}

func (r *ranges) inUse() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.used
}
