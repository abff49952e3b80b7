package arena

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// Close while a reserved slot is being filled must not unmap the memory
// under the writer: the segment is unlinked at once and unmapped when the
// last such slot is published or released.
func TestCloseKeepsFillingSlotMapped(t *testing.T) {
	dir := shmDir(t)
	a := newTestArena(t, Config{Dir: dir, SegmentSize: 64 << 10, MaxSegments: 1})
	s, err := a.Reserve(context.Background(), 32<<10)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got := listDir(t, dir); len(got) != 0 {
		t.Fatalf("files left after Close: %q", got)
	}
	b := s.Bytes()
	for i := range b { // SIGSEGV here if Close unmapped the segment
		b[i] = byte(i)
	}
	if _, err := a.Publish(s, Meta{}, 1); err == nil || !strings.Contains(err.Error(), "released") {
		t.Fatalf("publish after Close: %v", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.retired) != 0 {
		t.Fatalf("%d segments still mapped after the last slot finished", len(a.retired))
	}
}

// The reported crash: Put of a large tensor in a loop, Close a few ms in.
func TestCloseDuringPut(t *testing.T) {
	a := newTestArena(t, Config{SegmentSize: 8 << 20, MaxSegments: 1, CopyThreads: 2})
	data := pattern(8<<20, 3)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			d, err := a.Put(context.Background(), data, Meta{}, 1)
			if err != nil {
				return
			}
			_ = a.Ack(d.ID)
		}
	}()
	time.Sleep(3 * time.Millisecond)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// A spilled tensor published after Close (or a concurrent Release) must not
// leave its file behind.
func TestPublishAfterCloseRemovesSpill(t *testing.T) {
	dir := shmDir(t)
	a := newTestArena(t, Config{Dir: dir, Transport: TransportFile})
	s, err := a.Reserve(context.Background(), 4096)
	if err != nil {
		t.Fatal(err)
	}
	copy(s.Bytes(), pattern(4096, 1))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Publish(s, Meta{}, 1); err == nil {
		t.Fatal("publish after Close succeeded")
	}
	if got := listDir(t, dir); len(got) != 0 {
		t.Fatalf("spill file leaked: %q", got)
	}
}

func TestReserveHugeSize(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"tlsf", Config{SegmentSize: 64 << 10, MaxSegments: 1}},
		{"first fit", Config{SegmentSize: 64 << 10, MaxSegments: 1, Allocator: FirstFit}},
		{"strict", Config{SegmentSize: 64 << 10, MaxSegments: 1, Strict: true, FullTimeout: time.Hour}},
		{"file transport", Config{Transport: TransportFile}},
		// Above the cap a strict arena can only wait, in vain: it fails now.
		{"strict above the cap", Config{SegmentSize: 64 << 10, MaxSegments: 1, Strict: true, FullTimeout: time.Hour}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestArena(t, tc.cfg)
			sizes := []int64{math.MaxInt64, math.MaxInt64 - 10, math.MaxInt64 - pageSize, 1 << 62}
			if tc.name == "strict above the cap" {
				sizes = []int64{1 << 20}
			}
			for _, n := range sizes {
				s, err := a.Reserve(context.Background(), n)
				if err == nil {
					a.Release(s)
					t.Fatalf("reserve %d bytes succeeded", n)
				}
				if !strings.Contains(err.Error(), "too large") {
					t.Errorf("reserve %d: error %q does not say why", n, err)
				}
			}
		})
	}
}

func TestAllocatorHugeReserve(t *testing.T) {
	for _, kind := range []AllocatorKind{TLSF, FirstFit} {
		al, err := NewAllocator(kind, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int64{math.MaxInt64, math.MaxInt64 - 10, 1 << 62, 1<<20 + 1} {
			if _, ok := al.Reserve(n); ok {
				t.Errorf("%s: reserve %d of a 1 MiB region succeeded", kind, n)
			}
		}
		if _, ok := al.Reserve(1 << 20); !ok {
			t.Errorf("%s: reserving the whole region failed", kind)
		}
	}
}
