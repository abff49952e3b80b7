package arena

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

var allocKinds = []AllocatorKind{TLSF, FirstFit}

type extentLister interface{ freeExtents() []extent }

// checkInvariants verifies what every allocator promises: live blocks lie
// inside the region and never overlap each other or free space; free space
// is fully coalesced; the accounting adds up.
func checkInvariants(t testing.TB, a Allocator, live []Block) {
	t.Helper()
	st := a.Stats()
	free := a.(extentLister).freeExtents()
	type span struct {
		off, size int64
		free      bool
	}
	var all []span
	var liveBytes, freeBytes, largest int64
	for _, b := range live {
		all = append(all, span{b.Off, b.Size, false})
		liveBytes += b.Size
	}
	for _, e := range free {
		all = append(all, span{e.off, e.size, true})
		freeBytes += e.size
		largest = max(largest, e.size)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].off < all[j].off })
	var end int64
	for i, s := range all {
		if s.size <= 0 || s.off%Align != 0 || s.size%Align != 0 {
			t.Fatalf("span %+v: not a positive multiple of %d", s, Align)
		}
		if s.off < end {
			t.Fatalf("span %+v overlaps the previous one (ends at %d)", s, end)
		}
		if i > 0 && s.free && all[i-1].free && all[i-1].off+all[i-1].size == s.off {
			t.Fatalf("free spans at %d and %d are adjacent: not coalesced", all[i-1].off, s.off)
		}
		end = s.off + s.size
	}
	if end > st.Total {
		t.Fatalf("spans end at %d, past the region's %d bytes", end, st.Total)
	}
	if liveBytes+freeBytes != st.Total {
		t.Fatalf("live %d + free %d = %d bytes, want total %d", liveBytes, freeBytes, liveBytes+freeBytes, st.Total)
	}
	want := AllocStats{Total: st.Total, Free: freeBytes, Largest: largest, Live: len(live)}
	if st != want {
		t.Fatalf("stats (-want +got):\n-%+v\n+%+v", want, st)
	}
}

// driveOps runs a byte-coded sequence of reserves and frees against one
// allocator, checking invariants after every operation.
func driveOps(t testing.TB, kind AllocatorKind, total int64, ops []byte) {
	a, err := NewAllocator(kind, total)
	if err != nil {
		t.Fatal(err)
	}
	var live []Block
	for len(ops) >= 3 {
		op, arg := ops[0], binary.LittleEndian.Uint16(ops[1:3])
		ops = ops[3:]
		switch op % 4 {
		case 0, 1: // reserve: sizes from 1 byte to a quarter of the region, log-spread
			n := int64(math.Pow(float64(total/4), float64(arg)/65535))
			b, ok := a.Reserve(n)
			if !ok {
				if st := a.Stats(); st.Largest >= granules(n)*Align {
					t.Fatalf("%s: reserve %d failed although the largest free block is %d", kind, n, st.Largest)
				}
				break
			}
			if b.Size < n {
				t.Fatalf("%s: reserve %d returned only %d bytes", kind, n, b.Size)
			}
			live = append(live, b)
		case 2: // free a live block
			if len(live) == 0 {
				break
			}
			i := int(arg) % len(live)
			if err := a.Free(live[i]); err != nil {
				t.Fatalf("%s: freeing live block %+v: %v", kind, live[i], err)
			}
			live = append(live[:i], live[i+1:]...)
		case 3: // double free of a freed block must be refused
			if len(live) == 0 {
				break
			}
			i := int(arg) % len(live)
			b := live[i]
			if err := a.Free(b); err != nil {
				t.Fatalf("%s: freeing live block %+v: %v", kind, b, err)
			}
			live = append(live[:i], live[i+1:]...)
			if err := a.Free(b); !errors.Is(err, errNotLive) {
				t.Fatalf("%s: second free of %+v: got %v, want errNotLive", kind, b, err)
			}
		}
		checkInvariants(t, a, live)
	}
	for _, b := range live {
		if err := a.Free(b); err != nil {
			t.Fatalf("%s: final free of %+v: %v", kind, b, err)
		}
	}
	checkInvariants(t, a, nil)
	if st := a.Stats(); st.Largest != st.Total {
		t.Fatalf("%s: after freeing everything the largest block is %d of %d: not fully coalesced", kind, st.Largest, st.Total)
	}
}

func FuzzAllocator(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 255, 255, 2, 0, 0})
	f.Add([]byte{0, 1, 200, 0, 2, 100, 0, 3, 100, 1, 0, 9, 1, 0, 0, 2, 1, 0, 2, 0, 0})
	r := rand.New(rand.NewPCG(1, 2))
	for range 4 {
		b := make([]byte, 3*200)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 3*512 { // invariant checks are O(n) per op: keep inputs short
			ops = ops[:3*512]
		}
		for _, k := range allocKinds {
			driveOps(t, k, 1<<20, ops)
		}
	})
}

func TestAllocatorRandomOps(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 3000
	}
	for _, k := range allocKinds {
		t.Run(string(k), func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, uint64(len(k))))
			ops := make([]byte, 3*n)
			for i := range ops {
				ops[i] = byte(r.IntN(256))
			}
			driveOps(t, k, 8<<20, ops)
		})
	}
}

func TestAllocatorEdges(t *testing.T) {
	for _, k := range allocKinds {
		t.Run(string(k), func(t *testing.T) {
			a, err := NewAllocator(k, 4096)
			if err != nil {
				t.Fatal(err)
			}
			tests := []struct {
				name string
				n    int64
				ok   bool
				size int64
			}{
				{"zero rounds up to one granule", 0, true, Align},
				{"one byte", 1, true, Align},
				{"exact granule", Align, true, Align},
				{"granule plus one", Align + 1, true, 2 * Align},
				{"more than remains", 4096, false, 0},
			}
			for _, tc := range tests {
				b, ok := a.Reserve(tc.n)
				if ok != tc.ok || (ok && b.Size != tc.size) {
					t.Errorf("%s: Reserve(%d) = (%d bytes, %v), want (%d bytes, %v)", tc.name, tc.n, b.Size, ok, tc.size, tc.ok)
				}
			}
			if err := a.Free(Block{Off: 4096 * 2, Size: 64, id: 999}); err == nil {
				t.Error("freeing a block outside the region succeeded")
			}
		})
	}
	if _, err := NewAllocator("buddy", 1<<20); err == nil {
		t.Error("unknown allocator kind accepted")
	}
	if _, err := NewAllocator(TLSF, 10); err == nil {
		t.Error("region smaller than a granule accepted")
	}
}

// TestAllocatorFitsExactClass checks the corner TLSF's rounded-up search
// misses: the only free block fits the request exactly but sits in the
// request's own size class.
func TestAllocatorFitsExactClass(t *testing.T) {
	for _, k := range allocKinds {
		t.Run(string(k), func(t *testing.T) {
			const n = 17 * Align // class 1 in TLSF, not a class boundary
			a, _ := NewAllocator(k, 3*n)
			b1, _ := a.Reserve(n)
			b2, _ := a.Reserve(n)
			_, _ = a.Reserve(n)
			_ = a.Free(b1)
			_ = b2
			if _, ok := a.Reserve(n); !ok {
				t.Fatalf("reserve of %d failed with a free block of exactly that size", n)
			}
		})
	}
}

// benchSizes draws log-uniform sizes from 64 B to 64 KiB.
func benchSizes(r *rand.Rand, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(math.Exp(math.Log(64) + r.Float64()*(math.Log(64<<10)-math.Log(64))))
	}
	return out
}

// BenchmarkAllocator measures reserve+free pairs per second with 10 000 live
// blocks of log-uniform sizes (64 B-64 KiB) in a 1 GiB region: each
// iteration frees a random live block and reserves a new one in its place.
func BenchmarkAllocator(b *testing.B) {
	const liveN = 10000
	for _, k := range allocKinds {
		b.Run(string(k), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			a, _ := NewAllocator(k, 1<<30)
			live := make([]Block, liveN)
			for i := range live {
				blk, ok := a.Reserve(benchSizes(r, 1)[0])
				if !ok {
					b.Fatal("warm-up reserve failed")
				}
				live[i] = blk
			}
			// Churn until placement reaches a steady state.
			const pre = 1 << 16
			sizes := benchSizes(r, pre)
			idx := make([]int, pre)
			for i := range idx {
				idx[i] = r.IntN(liveN)
			}
			churn := func(n int) {
				for i := range n {
					j := idx[i&(pre-1)]
					if err := a.Free(live[j]); err != nil {
						b.Fatal(err)
					}
					blk, ok := a.Reserve(sizes[i&(pre-1)])
					if !ok {
						b.Fatalf("reserve failed: %+v", a.Stats())
					}
					live[j] = blk
				}
			}
			churn(pre)
			b.ResetTimer()
			start := time.Now()
			churn(b.N)
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
			b.ReportMetric(a.Stats().Fragmentation(), "frag")
		})
	}
}

func ExampleNewAllocator() {
	a, _ := NewAllocator(TLSF, 1<<20)
	x, _ := a.Reserve(1000)
	y, _ := a.Reserve(5000)
	_ = a.Free(x)
	st := a.Stats()
	fmt.Println(x.Off, x.Size, y.Off, y.Size, st.Live, st.Free)
	// Output: 0 1024 1024 5056 1 1043520
}
