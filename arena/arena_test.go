package arena

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
	"golang.org/x/sys/unix"
)

// shmDir returns a fresh directory under /dev/shm (tmpfs, like production),
// or under the test's temp dir where there is no /dev/shm.
func shmDir(t testing.TB) string {
	t.Helper()
	base := DefaultDir
	if st, err := os.Stat(base); err != nil || !st.IsDir() {
		return t.TempDir()
	}
	d, err := os.MkdirTemp(base, "mstar-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func newTestArena(t testing.TB, cfg Config) *Arena {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = shmDir(t)
	}
	if cfg.Entity == "" {
		cfg.Entity = "test"
	}
	if cfg.SegmentSize == 0 {
		cfg.SegmentSize = 1 << 20
	}
	if cfg.MaxSegments == 0 {
		cfg.MaxSegments = 4
	}
	cfg.NoSignalHandler = true
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func listDir(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestPutReadRoundTrip(t *testing.T) {
	a := newTestArena(t, Config{})
	r := NewReader(ReaderConfig{Dir: a.Config().Dir})
	defer r.Close()
	for _, n := range []int{0, 1, 63, 64, 4096, 100000} {
		data := pattern(n, byte(n))
		d, err := a.Put(context.Background(), data, Meta{Checksum: Checksum(data), HasChecksum: true}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Loc != InSegment {
			t.Fatalf("size %d: location %v, want segment", n, d.Loc)
		}
		got := make([]byte, n)
		if err := r.ReadInto(d, got); err != nil {
			t.Fatal(err)
		}
		if err := d.Verify(got); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("size %d: payload differs (verify: %v)", n, err)
		}
		if err := a.Ack(d.ID); err != nil {
			t.Fatal(err)
		}
	}
	if st := a.Stats(); st.LiveSlots != 0 || st.Free != st.Total {
		t.Fatalf("after all ACKs: %s", st.Summary())
	}
}

func TestSegmentFiles(t *testing.T) {
	a := newTestArena(t, Config{})
	names := a.SegmentNames()
	if len(names) != 1 {
		t.Fatalf("segments at start: %v, want one", names)
	}
	n, err := ParseName(names[0])
	if err != nil {
		t.Fatal(err)
	}
	if n.Kind != KindSegment || n.Entity != "test" || n.PID != os.Getpid() {
		t.Fatalf("segment name %+v: want kind arena, entity test, our pid", n)
	}
	st, err := os.Stat(filepath.Join(a.Config().Dir, names[0]))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("segment mode %v, want 0600", st.Mode().Perm())
	}
	var sys unix.Stat_t
	_ = unix.Stat(filepath.Join(a.Config().Dir, names[0]), &sys)
	if sys.Blocks*512 < a.Config().SegmentSize {
		t.Errorf("segment has %d bytes allocated, want the whole %d committed by fallocate", sys.Blocks*512, a.Config().SegmentSize)
	}
	// O_EXCL: creating over an existing name fails instead of truncating it.
	if _, err := createFile(a.Config().Dir, names[0], 4096, true); err == nil || !errors.Is(err, unix.EEXIST) {
		t.Errorf("creating over a live segment: %v, want EEXIST", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if left := listDir(t, a.Config().Dir); len(left) != 0 {
		t.Errorf("after Close: files left %v", left)
	}
}

// Two arenas with the same entity (here even in the same process, so the
// same pid) must never touch each other's segments.
func TestSameEntityArenasAreIsolated(t *testing.T) {
	dir := shmDir(t)
	a1 := newTestArena(t, Config{Dir: dir, Entity: "worker"})
	data := pattern(5000, 1)
	d, err := a1.Put(context.Background(), data, Meta{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	a2 := newTestArena(t, Config{Dir: dir, Entity: "worker"})
	if a1.SegmentNames()[0] == a2.SegmentNames()[0] {
		t.Fatal("two arenas of one entity got the same segment name")
	}
	if rep := a2.StartupClean(); len(rep.Removed) != 0 {
		t.Fatalf("the second arena's startup sweep removed %v", rep.Removed)
	}
	// Fill the second arena completely.
	for {
		s, err := a2.Reserve(context.Background(), 64<<10)
		if err != nil {
			t.Fatal(err)
		}
		if s.Spilled() {
			a2.Release(s)
			break
		}
		for i := range s.Bytes() {
			s.Bytes()[i] = 0xff
		}
	}
	r := NewReader(ReaderConfig{Dir: dir})
	defer r.Close()
	got := make([]byte, len(data))
	if err := r.ReadInto(d, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the first arena's staged tensor changed when the second filled up")
	}
	if err := a2.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range a1.SegmentNames() {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Fatalf("closing the second arena removed the first's segment %s: %v", n, err)
		}
	}
}

func TestGrowthCapAndDedicated(t *testing.T) {
	const seg = 64 << 10
	a := newTestArena(t, Config{SegmentSize: seg, MaxSegments: 4})
	ctx := context.Background()
	var slots []*Slot
	for range 3 {
		s, err := a.Reserve(ctx, seg) // each fills a segment
		if err != nil || s.Spilled() {
			t.Fatalf("reserve: %v (spilled %v)", err, s != nil && s.Spilled())
		}
		slots = append(slots, s)
	}
	if st := a.Stats(); st.Segments != 3 || st.Dedicated != 0 {
		t.Fatalf("after three segment-sized tensors: %s, want 3 segments", st.Summary())
	}
	// Larger than a segment: a dedicated one, which only fits if the cap allows.
	big, err := a.Reserve(ctx, seg+1)
	if err != nil {
		t.Fatal(err)
	}
	if !big.Spilled() {
		t.Fatalf("a %d-byte tensor fit although 3 of 4 segments' worth are used and it needs 2: %s", seg+1, a.Stats().Summary())
	}
	a.Release(big)
	a.Release(slots[0])
	a.Release(slots[1])
	big, err = a.Reserve(ctx, seg+1)
	if err != nil || big.Spilled() {
		t.Fatalf("oversized tensor with room under the cap: err %v, spilled %v", err, big != nil && big.Spilled())
	}
	if st := a.Stats(); st.Dedicated != 1 {
		t.Fatalf("want one dedicated segment: %s", st.Summary())
	}
	// A normal tensor never lands in the dedicated segment.
	small, _ := a.Reserve(ctx, 100)
	if small.seg.dedicated {
		t.Fatal("a small tensor was placed in a dedicated segment")
	}
	a.Release(small)
	a.Release(big)
	a.Release(slots[2])
	if st := a.Stats(); st.LiveSlots != 0 || st.Free != st.Total {
		t.Fatalf("after releasing everything: %s", st.Summary())
	}
}

func TestSpillAtCapAndMixedBatch(t *testing.T) {
	a := newTestArena(t, Config{SegmentSize: 64 << 10, MaxSegments: 1})
	ctx := context.Background()
	in, err := a.Put(ctx, pattern(60<<10, 1), Meta{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	data := pattern(10<<10, 2)
	sp, err := a.Put(ctx, data, Meta{Checksum: Checksum(data), HasChecksum: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if in.Loc != InSegment || sp.Loc != InFile {
		t.Fatalf("locations %v, %v: want segment then file", in.Loc, sp.Loc)
	}
	st := a.Stats()
	if st.Spills != 1 || st.SpillFiles != 1 {
		t.Fatalf("after one spill: %+v", st)
	}
	r := NewReader(ReaderConfig{Dir: a.Config().Dir})
	defer r.Close()
	// One batch with both kinds.
	dst := [][]byte{make([]byte, in.Size), make([]byte, sp.Size)}
	for i, d := range []Descriptor{in, sp} {
		if err := r.ReadInto(d, dst[i]); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(dst[0], pattern(60<<10, 1)) || sp.Verify(dst[1]) != nil {
		t.Fatal("mixed batch: payloads differ")
	}
	spillPath := filepath.Join(a.Config().Dir, sp.File)
	if _, err := os.Stat(spillPath); err != nil {
		t.Fatal(err)
	}
	if err := a.Ack(sp.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(spillPath); !os.IsNotExist(err) {
		t.Fatalf("spill file still there after its last ACK: %v", err)
	}
	if st := a.Stats(); st.SpillFiles != 0 {
		t.Fatalf("spill files after reclaim: %d", st.SpillFiles)
	}
}

func TestBackPressureWakesOnFree(t *testing.T) {
	a := newTestArena(t, Config{SegmentSize: 64 << 10, MaxSegments: 1, SpillAfter: time.Minute})
	ctx := context.Background()
	d, err := a.Put(ctx, pattern(64<<10, 1), Meta{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Slot, 1)
	go func() {
		s, err := a.Reserve(ctx, 1000)
		if err != nil {
			t.Error(err)
		}
		got <- s
	}()
	select {
	case s := <-got:
		t.Fatalf("reserve at the cap returned before anything freed (spilled %v)", s.Spilled())
	case <-time.After(50 * time.Millisecond):
	}
	if err := a.Ack(d.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s.Spilled() {
			t.Fatal("waiting reservation spilled although space freed within its grace")
		}
		a.Release(s)
	case <-time.After(10 * time.Second):
		t.Fatal("waiting reservation was not woken by the free")
	}
}

func TestStrictModeFails(t *testing.T) {
	a := newTestArena(t, Config{SegmentSize: 64 << 10, MaxSegments: 1, Strict: true, FullTimeout: 30 * time.Millisecond})
	ctx := context.Background()
	if _, err := a.Put(ctx, pattern(64<<10, 1), Meta{}, 1); err != nil {
		t.Fatal(err)
	}
	_, err := a.Put(ctx, pattern(100, 1), Meta{}, 1)
	if !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "strict") {
		t.Fatalf("strict arena at the cap: %v, want ErrFull naming strict mode", err)
	}
	if st := a.Stats(); st.SpillFiles != 0 || st.Spills != 0 {
		t.Fatalf("strict arena spilled: %+v", st)
	}
	ctx2, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := a.Reserve(ctx2, 10); !errors.Is(err, context.Canceled) {
		t.Fatalf("reserve with a cancelled context: %v", err)
	}
}

func TestFanOutAndDoubleAck(t *testing.T) {
	a := newTestArena(t, Config{})
	d, err := a.Put(context.Background(), pattern(1000, 3), Meta{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if st := a.Stats(); st.LiveSlots != 1 {
			t.Fatalf("after %d of 3 ACKs: %d live slots, want 1", i, st.LiveSlots)
		}
		if err := a.Ack(d.ID); err != nil {
			t.Fatal(err)
		}
	}
	if st := a.Stats(); st.LiveSlots != 0 {
		t.Fatalf("after 3 of 3 ACKs: %d live slots", st.LiveSlots)
	}
	if err := a.Ack(d.ID); err == nil || !strings.Contains(err.Error(), "not live") {
		t.Fatalf("fourth ACK: %v, want a not-live error", err)
	}
	if _, err := a.Put(context.Background(), nil, Meta{}, 0); err == nil {
		t.Fatal("fan-out 0 accepted")
	}
	if st := a.Stats(); st.LiveSlots != 0 {
		t.Fatalf("a refused publish leaked its slot: %d live", st.LiveSlots)
	}
}

func TestTTLBackstop(t *testing.T) {
	var mu sync.Mutex
	var warns []string
	a := newTestArena(t, Config{SlotTTL: time.Hour, Warn: func(m string) { mu.Lock(); warns = append(warns, m); mu.Unlock() }})
	d, err := a.Put(context.Background(), pattern(1000, 3), Meta{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if n := a.ReclaimExpired(); n != 0 {
		t.Fatalf("reclaimed %d slots younger than the TTL", n)
	}
	a.mu.Lock()
	a.cfg.SlotTTL = time.Millisecond
	a.mu.Unlock()
	time.Sleep(5 * time.Millisecond)
	a.mu.Lock()
	n := a.reclaimExpiredLocked()
	a.mu.Unlock()
	if n != 1 {
		t.Fatalf("reclaimed %d expired slots, want 1", n)
	}
	st := a.Stats()
	if st.TTLReclaims != 1 || st.LiveSlots != 0 {
		t.Fatalf("after TTL reclaim: %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(warns) != 1 || !strings.Contains(warns[0], "TTL backstop") || !strings.Contains(warns[0], "1 reclaimed by TTL so far") {
		t.Fatalf("warnings %q: want one loud TTL warning with the running total", warns)
	}
	if err := a.Ack(d.ID); err == nil {
		t.Fatal("a late ACK for a TTL-reclaimed tensor was accepted")
	}
}

func TestTTLLoopReclaimsByItself(t *testing.T) {
	a := newTestArena(t, Config{SlotTTL: 20 * time.Millisecond, Warn: func(string) {}})
	if _, err := a.Put(context.Background(), pattern(100, 1), Meta{}, 1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.Stats().LiveSlots != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the TTL loop never reclaimed the abandoned slot")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The fragmentation signature, built deterministically: fill the cap, free
// alternate slots (much free space, small largest block), then reserve
// something that fits the total but no block.
func TestFragmentationWarning(t *testing.T) {
	var warns []string
	a := newTestArena(t, Config{SegmentSize: 64 << 10, MaxSegments: 1, Warn: func(m string) { warns = append(warns, m) }})
	ctx := context.Background()
	var slots []*Slot
	for range 16 {
		s, err := a.Reserve(ctx, 4<<10)
		if err != nil || s.Spilled() {
			t.Fatal("filling the segment", err)
		}
		slots = append(slots, s)
	}
	for i := 0; i < 16; i += 2 {
		a.Release(slots[i])
	}
	st := a.Stats()
	if st.Free != 32<<10 || st.Largest != 4<<10 {
		t.Fatalf("after freeing alternate slots: free %d largest %d", st.Free, st.Largest)
	}
	s, err := a.Reserve(ctx, 8<<10)
	if err != nil || !s.Spilled() {
		t.Fatalf("8 KiB with only 4 KiB holes: err %v, want a spill", err)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "fragmentation") || !strings.Contains(warns[0], "largest free block is 4 KiB") || !strings.Contains(warns[0], "32 KiB of 64 KiB is free") {
		t.Fatalf("warnings %q: want one fragmentation warning with the numbers", warns)
	}
	small, err := a.Reserve(ctx, 4<<10)
	if err != nil || small.Spilled() {
		t.Fatal("a tensor that fits a hole did not land in it")
	}
	if st := a.Stats(); st.FragFails != 1 || st.Frag <= 0 {
		t.Fatalf("stats after: %+v", st)
	}
}

// fakeDevice counts registrations; fail makes Register fail.
type fakeDevice struct {
	gpu.Device
	mu         sync.Mutex
	registered int64
	calls      int
	fail       bool
}

func (f *fakeDevice) Register(mem []byte) (func() error, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return nil, errors.New("cuMemHostRegister: out of memory")
	}
	f.calls++
	f.registered += int64(len(mem))
	return func() error {
		f.mu.Lock()
		f.registered -= int64(len(mem))
		f.mu.Unlock()
		return nil
	}, nil
}

func TestPinningBudget(t *testing.T) {
	dev := &fakeDevice{Device: gpu.NewCPU()}
	var warns []string
	const seg = 64 << 10
	a := newTestArena(t, Config{SegmentSize: seg, MaxSegments: 4, Device: dev, PinBudget: 2 * seg, Warn: func(m string) { warns = append(warns, m) }})
	ctx := context.Background()
	for range 3 {
		if _, err := a.Put(ctx, make([]byte, seg), Meta{}, 1); err != nil {
			t.Fatal(err)
		}
	}
	st := a.Stats()
	if st.Segments != 3 || st.Pinned != 2*seg || dev.calls != 2 || dev.registered != 2*seg {
		t.Fatalf("3 segments with a 2-segment budget: %d segments, %d pinned, %d Register calls (%d bytes)", st.Segments, st.Pinned, dev.calls, dev.registered)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "budget") {
		t.Fatalf("warnings %q: want one about the pinned budget", warns)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if dev.registered != 0 {
		t.Fatalf("after Close %d bytes are still registered", dev.registered)
	}

	failing := &fakeDevice{Device: gpu.NewCPU(), fail: true}
	warns = nil
	b := newTestArena(t, Config{Device: failing, Warn: func(m string) { warns = append(warns, m) }})
	if st := b.Stats(); st.Pinned != 0 || len(warns) != 1 || !strings.Contains(warns[0], "stays pageable") {
		t.Fatalf("failed registration: pinned %d, warnings %q", st.Pinned, warns)
	}
}

func TestCheckCeilings(t *testing.T) {
	fs := FSInfo{Path: "/dev/shm", Total: 10 << 30, Free: 4 << 30}
	dev := gpu.NewCPU()
	tests := []struct {
		name     string
		cfg      Config
		mem      int64
		wantErr  string
		wantWarn []string
	}{
		{"fits", Config{MaxSegments: 2, SegmentSize: 1 << 30}, 64 << 30, "", nil},
		{"exceeds free", Config{MaxSegments: 8, SegmentSize: 1 << 30}, 64 << 30, "", []string{"8 segments x 1 GiB = 8 GiB exceeds the free space of /dev/shm (4 GiB of 10 GiB free)"}},
		{"exceeds size", Config{MaxSegments: 11, SegmentSize: 1 << 30}, 64 << 30, "cap 11 segments x 1 GiB = 11 GiB exceeds the size of /dev/shm (10 GiB)", nil},
		{"overflow", Config{MaxSegments: 1 << 40, SegmentSize: 1 << 40}, 64 << 30, "overflows", nil},
		{"pin budget vs memory", Config{MaxSegments: 2, SegmentSize: 1 << 30, Device: dev, PinBudget: 4 << 30}, 3 << 30, "", []string{"pinned budget 2 GiB"}},
		{"file transport has no segments", Config{MaxSegments: 100, SegmentSize: 1 << 30, Transport: TransportFile}, 64 << 30, "", nil},
	}
	for _, tc := range tests {
		warns, err := CheckLimits(tc.cfg, fs, tc.mem)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if len(warns) != len(tc.wantWarn) {
			t.Errorf("%s: warnings %q, want %d", tc.name, warns, len(tc.wantWarn))
			continue
		}
		for i, w := range tc.wantWarn {
			if !strings.Contains(warns[i], w) {
				t.Errorf("%s: warning %q does not contain %q", tc.name, warns[i], w)
			}
		}
	}
	// And New refuses to start on the real file system.
	_, err := New(Config{Dir: shmDir(t), Entity: "x", SegmentSize: 1 << 40, MaxSegments: 1 << 10, NoSignalHandler: true})
	if err == nil || !strings.Contains(err.Error(), "exceeds the size of") {
		t.Fatalf("New with a cap beyond the file system: %v", err)
	}
}

func TestFileTransport(t *testing.T) {
	a := newTestArena(t, Config{Transport: TransportFile})
	if st := a.Stats(); st.Segments != 0 {
		t.Fatalf("file transport created %d segments", st.Segments)
	}
	data := pattern(3000, 9)
	d, err := a.Put(context.Background(), data, Meta{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if d.Loc != InFile {
		t.Fatalf("file transport: location %v", d.Loc)
	}
	if st := a.Stats(); st.Spills != 0 || st.SpillFiles != 1 {
		t.Fatalf("file transport is not spilling, it is its normal path: %+v", st)
	}
	got := make([]byte, len(data))
	r := NewReader(ReaderConfig{Dir: a.Config().Dir, Transport: TransportFile})
	if err := r.ReadInto(d, got); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read: %v", err)
	}
	_ = a.Ack(d.ID)
	_ = a.Ack(d.ID)
	if left := listDir(t, a.Config().Dir); len(left) != 0 {
		t.Fatalf("files left after both ACKs: %v", left)
	}
}

func TestConcurrentPutAck(t *testing.T) {
	a := newTestArena(t, Config{SegmentSize: 256 << 10, MaxSegments: 2})
	r := NewReader(ReaderConfig{Dir: a.Config().Dir})
	defer r.Close()
	var wg sync.WaitGroup
	n := 200
	if testing.Short() {
		n = 50
	}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 70<<10)
			for i := range n {
				data := pattern(100+(i*997+g*31)%(60<<10), byte(g))
				d, err := a.Put(context.Background(), data, Meta{Checksum: Checksum(data), HasChecksum: true}, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if err := r.ReadInto(d, buf); err != nil {
					t.Error(err)
					return
				}
				if err := d.Verify(buf[:d.Size]); err != nil {
					t.Error(err)
				}
				if err := a.Ack(d.ID); err != nil {
					t.Error(err)
				}
				_ = a.Stats()
			}
		}()
	}
	wg.Wait()
	if st := a.Stats(); st.LiveSlots != 0 || st.SpillFiles != 0 || st.Free != st.Total {
		t.Fatalf("after concurrent put/ack: %s", st.Summary())
	}
}

func TestCloseThenReserve(t *testing.T) {
	a := newTestArena(t, Config{})
	_ = a.Close()
	if _, err := a.Reserve(context.Background(), 10); err == nil {
		t.Fatal("reserve on a closed arena succeeded")
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	dir := shmDir(t)
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no entity", Config{Dir: dir}, "entity"},
		{"entity with a slash", Config{Dir: dir, Entity: "a/b"}, "entity"},
		{"tiny segment", Config{Dir: dir, Entity: "x", SegmentSize: 100}, "below one page"},
		{"bad transport", Config{Dir: dir, Entity: "x", Transport: "rdma"}, "transport"},
		{"bad allocator", Config{Dir: dir, Entity: "x", Allocator: "buddy"}, "allocator"},
		{"missing dir", Config{Dir: filepath.Join(dir, "nope"), Entity: "x"}, "statfs"},
	}
	for _, tc := range tests {
		tc.cfg.NoSignalHandler = true
		a, err := New(tc.cfg)
		if err == nil {
			a.Close()
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not mention %q", tc.name, err, tc.want)
		}
	}
}

func ExampleArena() {
	dir, _ := os.MkdirTemp("", "arena-example-")
	defer os.RemoveAll(dir)
	a, err := New(Config{Dir: dir, Entity: "producer", SegmentSize: 1 << 20, MaxSegments: 2, NoSignalHandler: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	payload := []byte("hello, consumer")
	d, _ := a.Put(context.Background(), payload, Meta{Checksum: Checksum(payload), HasChecksum: true}, 1)

	r := NewReader(ReaderConfig{Dir: dir})
	got := make([]byte, d.Size)
	_ = r.ReadInto(d, got)
	fmt.Println(string(got), d.Verify(got) == nil, a.Stats().LiveSlots)
	_ = a.Ack(d.ID) // after the copy: the slot may now be reused
	_ = r.Close()
	fmt.Println(a.Stats().LiveSlots)
	// Output:
	// hello, consumer true 1
	// 0
}

// A full file system fails growth at segment creation; the arena then
// behaves as at its cap (here: spills) instead of failing the tensor.
func TestGrowthFailureSpills(t *testing.T) {
	var warns []string
	a := newTestArena(t, Config{SegmentSize: 64 << 10, MaxSegments: 4, Warn: func(m string) { warns = append(warns, m) }})
	orig := createSegmentFile
	createSegmentFile = func(dir, name string, size int64, mapped bool) (*shmFile, error) {
		return nil, fmt.Errorf("committing %d bytes: %s is full: %w", size, dir, unix.ENOSPC)
	}
	defer func() { createSegmentFile = orig }()
	if _, err := a.Put(context.Background(), pattern(60<<10, 1), Meta{}, 1); err != nil {
		t.Fatal(err)
	}
	d, err := a.Put(context.Background(), pattern(10<<10, 2), Meta{}, 1)
	if err != nil {
		t.Fatalf("reservation after a failed growth: %v", err)
	}
	if d.Loc != InFile {
		t.Fatalf("location %v, want a spill", d.Loc)
	}
	if len(warns) == 0 || !strings.Contains(warns[0], "is full") || !strings.Contains(warns[0], "treating it as full") {
		t.Fatalf("warnings %q", warns)
	}
}
