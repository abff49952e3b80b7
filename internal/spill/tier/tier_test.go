package tier

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/mstar-dev/mstar/arena"
	"github.com/mstar-dev/mstar/internal/gpu"
)

// The peer tier's holder is this test binary, re-executed.
func TestMain(m *testing.M) {
	ServeIfTestHolder()
	os.Exit(m.Run())
}

func open(t *testing.T, k Kind, capacity int64) (gpu.Device, Tier) {
	t.Helper()
	dev := gpu.NewCPU()
	tr, err := Open(k, Options{Dev: dev, Capacity: capacity, Chunk: 1 << 20, ShmDir: t.TempDir(), Holder: TestBinaryHolder()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("close %s: %v", k, err)
		}
	})
	return dev, tr
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, k := range Kinds {
		t.Run(string(k), func(t *testing.T) {
			dev, tr := open(t, k, 8<<20)
			s, _ := dev.NewStream()
			lens := []int64{3 << 20, 1<<20 + 123, 4096 + 8}
			pool, err := NewPool(dev, lens)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			if err := pool.FillAll(s, 7); err != nil {
				t.Fatal(err)
			}
			before, _ := pool.Hashes(s)
			var slots []Slot
			for i, b := range pool.Blocks() {
				sl, err := tr.Alloc(b.Len)
				if err != nil {
					t.Fatal(err)
				}
				n, err := sl.Spill(ctx, s, pool.Buffer(), b.Off)
				if err != nil || n != b.Len || sl.Filled() != b.Len {
					t.Fatalf("block %d: spilled %d of %d (filled %d): %v", i, n, b.Len, sl.Filled(), err)
				}
				slots = append(slots, sl)
			}
			if tr.Used() < pool.Bytes() {
				t.Errorf("tier uses %d bytes, holding %d", tr.Used(), pool.Bytes())
			}
			if k == Peer {
				for i, sl := range slots {
					h, err := PeerHash(tr, sl)
					if err != nil || h != before[i] {
						t.Errorf("block %d: holder hashes %x (%v), want %x", i, h, err, before[i])
					}
				}
			}
			for i, b := range pool.Blocks() {
				pool.Poison(s, i)
				if c, _ := pool.Check(s, i); c.Reached != 0 {
					t.Fatalf("poisoned block %d reaches %d", i, c.Reached)
				}
				n, err := slots[i].Restore(ctx, s, pool.Buffer(), b.Off, slots[i].Filled())
				if err != nil || n != b.Len {
					t.Fatalf("block %d: restored %d of %d: %v", i, n, b.Len, err)
				}
				c, _ := pool.Check(s, i)
				if c.Hash != before[i] || c.Reached != b.Len {
					t.Errorf("block %d: hash %x reached %d, want %x and %d", i, c.Hash, c.Reached, before[i], b.Len)
				}
			}
			for _, sl := range slots {
				if err := sl.Free(); err != nil {
					t.Fatal(err)
				}
			}
			if tr.Used() != 0 {
				t.Errorf("%d bytes still used after freeing every slot", tr.Used())
			}
		})
	}
}

func TestCapacity(t *testing.T) {
	for _, k := range []Kind{Pinned, Peer, Pageable, File, Device} {
		t.Run(string(k), func(t *testing.T) {
			_, tr := open(t, k, 1<<20)
			a, err := tr.Alloc(512 << 10)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tr.Alloc(768 << 10); !errors.Is(err, ErrFull) {
				t.Errorf("over capacity: %v, want ErrFull", err)
			}
			a.Free()
			b, err := tr.Alloc(1 << 20)
			if err != nil {
				t.Errorf("after free, the whole capacity: %v", err)
			} else {
				b.Free()
			}
		})
	}
}

func TestSegmentTiersNeedCapacity(t *testing.T) {
	for _, k := range []Kind{Pinned, Peer} {
		if _, err := Open(k, Options{Dev: gpu.NewCPU()}); err == nil || !strings.Contains(err.Error(), "capacity is required") {
			t.Errorf("%s without capacity: %v", k, err)
		}
	}
	if _, err := Open(Peer, Options{Dev: gpu.NewCPU(), Capacity: 1 << 20}); err == nil || !strings.Contains(err.Error(), "no holder") {
		t.Errorf("peer without holder: %v", err)
	}
}

func TestRanges(t *testing.T) {
	r := newRanges(16 * page)
	a, _ := r.alloc(4 * page)
	b, _ := r.alloc(4 * page)
	c, _ := r.alloc(4 * page)
	r.release(a, 4*page)
	r.release(c, 4*page)
	if _, err := r.alloc(12 * page); err == nil {
		t.Fatal("12 pages fit in two 4-page holes and a 4-page tail")
	}
	r.release(b, 4*page)
	if len(r.free) != 1 || r.free[0] != (span{0, 16 * page}) || r.inUse() != 0 {
		t.Errorf("after freeing everything: %+v used %d, want one hole of 16 pages", r.free, r.inUse())
	}
}

// cancelStream cancels a context after n copies.
type cancelStream struct {
	gpu.Stream
	n      int
	cancel func()
}

func (c *cancelStream) CopyDtoH(dst []byte, src gpu.Buffer, off int64) error {
	if c.n--; c.n == 0 {
		c.cancel()
	}
	return c.Stream.CopyDtoH(dst, src, off)
}

func TestSpillCancelledMidFlight(t *testing.T) {
	dev, tr := open(t, Pinned, 8<<20)
	s, _ := dev.NewStream()
	pool, _ := NewPool(dev, []int64{4 << 20})
	defer pool.Close()
	ctx, cancel := context.WithCancel(context.Background())
	sl, _ := tr.Alloc(4 << 20)
	n, err := sl.Spill(ctx, &cancelStream{Stream: s, n: 2, cancel: cancel}, pool.Buffer(), 0)
	if !errors.Is(err, context.Canceled) || n != 2<<20 || sl.Filled() != 2<<20 {
		t.Errorf("cancelled after two 1 MiB chunks: spilled %d, filled %d, err %v", n, sl.Filled(), err)
	}
	l := NewLedger(time.Minute)
	now := time.Now()
	l.Strand(sl, "cancelled", now)
	if st := l.Stranded(); st.Bytes != 4<<20 || st.Written != 2<<20 || st.Slots != 1 {
		t.Errorf("stranded %+v, want 4 MiB reserved, 2 MiB written", st)
	}
	if freed, _ := l.Reclaim(now.Add(time.Second)); freed.Slots != 0 || tr.Used() == 0 {
		t.Errorf("reclaimed %+v before the TTL", freed)
	}
	if freed, err := l.Reclaim(now.Add(time.Minute)); err != nil || freed.Bytes != 4<<20 || l.Stranded().Bytes != 0 || tr.Used() != 0 {
		t.Errorf("after the TTL: freed %+v (%v), still stranded %+v, tier uses %d", freed, err, l.Stranded(), tr.Used())
	}
}

func TestFaults(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name        string
		f           Faults
		wantReached int64 // of 1 MiB
		wantSame    bool
		minTime     time.Duration
	}{
		{"none", Faults{}, 1 << 20, true, 0},
		{"short restore", Faults{ShortRestore: 4096}, 1<<20 - 4096, false, 0},
		{"corrupt", Faults{Corrupt: true}, 1 << 20, false, 0},
		{"stall", Faults{Stall: 20 * time.Millisecond}, 1 << 20, true, 40 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev, base := open(t, Pageable, 0)
			tr := Inject(base, tt.f)
			s, _ := dev.NewStream()
			pool, _ := NewPool(dev, []int64{1 << 20})
			defer pool.Close()
			pool.FillAll(s, 1)
			before, _ := pool.Check(s, 0)
			start := time.Now()
			sl, _ := tr.Alloc(1 << 20)
			sl.Spill(ctx, s, pool.Buffer(), 0)
			pool.Poison(s, 0)
			got, err := sl.Restore(ctx, s, pool.Buffer(), 0, sl.Filled())
			took := time.Since(start)
			c, _ := pool.Check(s, 0)
			// The measured reach may be a few bytes shorter than what the
			// tier reported when the last delivered bytes equal the poison.
			if err != nil || c.Reached > got || got-c.Reached > 8 || c.Reached < tt.wantReached-8 || c.Reached > tt.wantReached {
				t.Errorf("reached %d (tier said %d, %v), want %d", c.Reached, got, err, tt.wantReached)
			}
			if (c.Hash == before.Hash) != tt.wantSame {
				t.Errorf("hash unchanged = %v, want %v", c.Hash == before.Hash, tt.wantSame)
			}
			if took < tt.minTime {
				t.Errorf("took %v, a stalled spill and restore take at least %v", took, tt.minTime)
			}
			if Unwrap(tr) != base {
				t.Error("Unwrap does not return the tier under the faults")
			}
		})
	}
}

func TestHolderLifecycle(t *testing.T) {
	dir := t.TempDir()
	tr, err := Open(Peer, Options{Dev: gpu.NewCPU(), Capacity: 1 << 20, ShmDir: dir, Holder: TestBinaryHolder()})
	if err != nil {
		t.Fatal(err)
	}
	pid, ok := HolderPID(tr)
	if !ok || pid == os.Getpid() {
		t.Fatalf("holder pid %d (ours %d)", pid, os.Getpid())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || !strings.Contains(ents[0].Name(), fmt.Sprintf("mstar_spill_peer_%d_", pid)) {
		t.Fatalf("segment files %v, want one named for holder pid %d", ents, pid)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("segment left after close: %v", ents)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("holder pid %d still running after close", pid)
	}
}

func TestHolderMainProtocol(t *testing.T) {
	dir := t.TempDir()
	in := strings.NewReader("hash 0 4096\nhash 0 99999999\nbogus\n")
	var out strings.Builder
	if err := HolderMain([]string{"--dir", dir, "--size", "8192"}, in, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	zero := make([]byte, 4096)
	want := []string{"ready ", fmt.Sprintf("ok %x", xxhash.Sum64(zero)), "err bad range", "err unknown command"}
	if len(lines) != len(want) {
		t.Fatalf("holder said %q", lines)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("line %d: %q, want prefix %q", i, lines[i], want[i])
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("holder left %v at end of input", ents)
	}
	if err := HolderMain([]string{"--size", "0"}, strings.NewReader(""), &out); err == nil {
		t.Error("size 0 accepted")
	}
}

func TestParseKinds(t *testing.T) {
	got, err := ParseKinds("pinned, file")
	if err != nil || len(got) != 2 || got[0] != Pinned || got[1] != File {
		t.Errorf("got %v %v", got, err)
	}
	if _, err := ParseKinds("nvme"); err == nil || !strings.Contains(err.Error(), `unknown tier "nvme"`) {
		t.Errorf("nvme: %v", err)
	}
}

// A segment is named as arena names its spill files, so arena clean finds
// it when a killed run leaves it behind (12-digit tokens once did not parse).
func TestSegmentNameParses(t *testing.T) {
	seg, err := createSegment(t.TempDir(), "pinned", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.close()
	n, err := arena.ParseName(filepath.Base(seg.path))
	if err != nil {
		t.Fatalf("arena.ParseName(%q): %v", filepath.Base(seg.path), err)
	}
	if n.Kind != arena.KindSpill || n.Entity != "pinned" || n.PID != os.Getpid() {
		t.Errorf("parsed %+v, want kind spill, entity pinned, pid %d", n, os.Getpid())
	}
}
