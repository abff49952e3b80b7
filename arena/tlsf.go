package arena

import (
	"fmt"
	"math/bits"
)

// tlsf is a two-level segregated-fit allocator (Masmano et al., "TLSF: a new
// dynamic memory allocator for real-time systems"): free blocks sit in lists
// by size class — a first level per power of two, split into 16 linear
// second-level classes — with a bitmap per level, so finding a fitting class
// is two count-trailing-zeros. Reserve and Free are O(1); blocks merge with
// their physical neighbours on free, so free space is always fully coalesced.
//
// The metadata lives out of band (a slab indexed by Block.id), never in the
// shared region: consumers in other processes read that memory, and a crash
// mid-update must not leave a corrupt header in it.
type tlsf struct {
	total  int64 // granules
	used   int64 // granules
	live   int
	flMap  uint64
	slMap  [flCount]uint32
	heads  [flCount][slCount]int32
	blocks []tblock
	spare  []int32 // recycled slab entries
}

const (
	slLog2  = 4
	slCount = 1 << slLog2
	flCount = 64 - slLog2 + 1
	nilBlk  = -1
)

type tblock struct {
	off, size          int64 // granules
	prevPhys, nextPhys int32
	prevFree, nextFree int32
	gen                uint32
	free, used         bool
}

func newTLSF(size int64) *tlsf {
	t := &tlsf{total: size / Align}
	for i := range t.heads {
		for j := range t.heads[i] {
			t.heads[i][j] = nilBlk
		}
	}
	b := t.newBlock(0, t.total)
	t.insert(b)
	return t
}

// mapping returns the size class holding blocks of size granules.
func mapping(size int64) (fl, sl int) {
	if size < slCount {
		return 0, int(size)
	}
	l := bits.Len64(uint64(size)) - 1
	return l - slLog2 + 1, int(size>>(l-slLog2)) - slCount
}

// mappingSearch returns the smallest class whose every block holds size.
func mappingSearch(size int64) (fl, sl int) {
	if size >= slCount {
		l := bits.Len64(uint64(size)) - 1
		size += (1 << (l - slLog2)) - 1
	}
	return mapping(size)
}

func (t *tlsf) newBlock(off, size int64) int32 {
	var id int32
	if n := len(t.spare); n > 0 {
		id = t.spare[n-1]
		t.spare = t.spare[:n-1]
	} else {
		t.blocks = append(t.blocks, tblock{})
		id = int32(len(t.blocks) - 1)
	}
	b := &t.blocks[id]
	gen := b.gen + 1
	*b = tblock{off: off, size: size, prevPhys: nilBlk, nextPhys: nilBlk, prevFree: nilBlk, nextFree: nilBlk, gen: gen}
	return id
}

func (t *tlsf) recycle(id int32) {
	t.blocks[id].free, t.blocks[id].used = false, false
	t.blocks[id].gen++
	t.spare = append(t.spare, id)
}

func (t *tlsf) insert(id int32) {
	b := &t.blocks[id]
	fl, sl := mapping(b.size)
	h := t.heads[fl][sl]
	b.prevFree, b.nextFree, b.free = nilBlk, h, true
	if h != nilBlk {
		t.blocks[h].prevFree = id
	}
	t.heads[fl][sl] = id
	t.flMap |= 1 << fl
	t.slMap[fl] |= 1 << sl
}

func (t *tlsf) remove(id int32) {
	b := &t.blocks[id]
	fl, sl := mapping(b.size)
	if b.prevFree != nilBlk {
		t.blocks[b.prevFree].nextFree = b.nextFree
	} else {
		t.heads[fl][sl] = b.nextFree
		if b.nextFree == nilBlk {
			t.slMap[fl] &^= 1 << sl
			if t.slMap[fl] == 0 {
				t.flMap &^= 1 << fl
			}
		}
	}
	if b.nextFree != nilBlk {
		t.blocks[b.nextFree].prevFree = b.prevFree
	}
	b.prevFree, b.nextFree, b.free = nilBlk, nilBlk, false
}

// find returns a free block of at least size granules, or nilBlk.
func (t *tlsf) find(size int64) int32 {
	fl, sl := mappingSearch(size)
	if fl < flCount {
		if m := t.slMap[fl] & (^uint32(0) << sl); m != 0 {
			return t.heads[fl][bits.TrailingZeros32(m)]
		}
		if fl+1 < flCount {
			if m := t.flMap & (^uint64(0) << (fl + 1)); m != 0 {
				f := bits.TrailingZeros64(m)
				return t.heads[f][bits.TrailingZeros32(t.slMap[f])]
			}
		}
	}
	// The rounded-up search skips the request's own class, whose blocks may
	// or may not fit; look there before failing, so a reservation fails only
	// when no free block is large enough.
	fl, sl = mapping(size)
	for id := t.heads[fl][sl]; id != nilBlk; id = t.blocks[id].nextFree {
		if t.blocks[id].size >= size {
			return id
		}
	}
	return nilBlk
}

func (t *tlsf) Reserve(n int64) (Block, bool) {
	if n > t.total*Align {
		return Block{}, false // and granules(n) could overflow
	}
	size := granules(n)
	id := t.find(size)
	if id == nilBlk {
		return Block{}, false
	}
	t.remove(id)
	b := &t.blocks[id]
	if rest := b.size - size; rest > 0 {
		r := t.newBlock(b.off+size, rest)
		b = &t.blocks[id] // the slab may have moved
		rb := &t.blocks[r]
		rb.prevPhys, rb.nextPhys = id, b.nextPhys
		if b.nextPhys != nilBlk {
			t.blocks[b.nextPhys].prevPhys = r
		}
		b.nextPhys = r
		b.size = size
		t.insert(r)
		b = &t.blocks[id]
	}
	b.used = true
	t.used += size
	t.live++
	return Block{Off: b.off * Align, Size: size * Align, id: id, gen: b.gen}, true
}

// absorb merges block r into l, its physical predecessor, and recycles r.
func (t *tlsf) absorb(l, r int32) {
	lb, rb := &t.blocks[l], &t.blocks[r]
	lb.size += rb.size
	lb.nextPhys = rb.nextPhys
	if rb.nextPhys != nilBlk {
		t.blocks[rb.nextPhys].prevPhys = l
	}
	t.recycle(r)
}

func (t *tlsf) Free(blk Block) error {
	id := blk.id
	if id < 0 || int(id) >= len(t.blocks) {
		return fmt.Errorf("free [%d, +%d): %w", blk.Off, blk.Size, errNotLive)
	}
	b := &t.blocks[id]
	if !b.used || b.gen != blk.gen || b.off*Align != blk.Off || b.size*Align != blk.Size {
		return fmt.Errorf("free [%d, +%d): %w", blk.Off, blk.Size, errNotLive)
	}
	b.used = false
	t.used -= b.size
	t.live--
	if p := b.prevPhys; p != nilBlk && t.blocks[p].free {
		t.remove(p)
		t.absorb(p, id)
		id = p
	}
	if nx := t.blocks[id].nextPhys; nx != nilBlk && t.blocks[nx].free {
		t.remove(nx)
		t.absorb(id, nx)
	}
	t.insert(id)
	return nil
}

func (t *tlsf) Stats() AllocStats {
	s := AllocStats{Total: t.total * Align, Free: (t.total - t.used) * Align, Live: t.live}
	if t.flMap == 0 {
		return s
	}
	// The largest block is in the highest non-empty class; that list holds
	// a range of sizes, so scan it.
	fl := 63 - bits.LeadingZeros64(t.flMap)
	sl := 31 - bits.LeadingZeros32(t.slMap[fl])
	for id := t.heads[fl][sl]; id != nilBlk; id = t.blocks[id].nextFree {
		s.Largest = max(s.Largest, t.blocks[id].size*Align)
	}
	return s
}

// freeExtents lists the free space in address order (for invariant checks).
func (t *tlsf) freeExtents() []extent {
	var out []extent
	// Walk the physical chain from the block at offset 0.
	start := int32(nilBlk)
	for id := range t.blocks {
		b := &t.blocks[id]
		if (b.free || b.used) && b.off == 0 {
			start = int32(id)
			break
		}
	}
	for id := start; id != nilBlk; id = t.blocks[id].nextPhys {
		if b := t.blocks[id]; b.free {
			out = append(out, extent{b.off * Align, b.size * Align})
		}
	}
	return out
}
