package tier

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu/gputest"
)

func batchFixture(t *testing.T, k Kind, f Faults) (*gputest.LazyStream, *Pool, []Slot, []uint64) {
	t.Helper()
	lens := []int64{64 << 10, 100 << 10, 64 << 10, 3 << 20} // the last one spans chunks
	dev, tr := open(t, k, 8<<20)
	tr = Inject(tr, f)
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	ls := &gputest.LazyStream{Stream: s}
	p, err := NewPool(dev, lens)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.FillAll(ls, 42); err != nil {
		t.Fatal(err)
	}
	want, err := p.Hashes(ls)
	if err != nil {
		t.Fatal(err)
	}
	var slots []Slot
	for _, n := range lens {
		sl, err := tr.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sl.Free() })
		slots = append(slots, sl)
	}
	return ls, p, slots, want
}

// A batch queues every copy and waits once; the bytes count, and the
// restored blocks hash as before, only after that wait.
func TestBatchWaitsOnce(t *testing.T) {
	ctx := context.Background()
	for _, k := range Kinds {
		t.Run(string(k), func(t *testing.T) {
			ls, p, slots, want := batchFixture(t, k, Faults{})
			_, queues := asQueuer(slots[0])
			ls.Syncs = 0
			b := NewBatch(ls)
			b.Collect()
			for i, sl := range slots {
				b.Spill(ctx, sl, p.Buffer(), p.Blocks()[i].Off)
			}
			if queues {
				// Device-to-device copies are collected and issued as one
				// batch at Wait; the others are queued as they come.
				if k == Device {
					if ls.Syncs != 0 || ls.Pending() != 0 {
						t.Errorf("before Wait: %d syncs, %d copies pending; want the device copies held for one batch", ls.Syncs, ls.Pending())
					}
				} else if ls.Syncs != 0 || ls.Pending() == 0 {
					t.Errorf("before Wait: %d syncs, %d copies pending; want 0 syncs and the copies queued", ls.Syncs, ls.Pending())
				}
				for i, sl := range slots {
					if sl.Filled() != 0 {
						t.Errorf("slot %d claims %d bytes before the wait", i, sl.Filled())
					}
				}
			}
			got, err := b.Wait()
			if err != nil {
				t.Fatal(err)
			}
			for i, sl := range slots {
				if l := p.Blocks()[i].Len; got[i] != l || sl.Filled() != l {
					t.Errorf("spill %d: got %d, filled %d, want %d", i, got[i], sl.Filled(), l)
				}
			}
			if queues && ls.Syncs != 1 {
				t.Errorf("spill batch synced %d times, want 1", ls.Syncs)
			}
			if want := map[bool]int{true: 1, false: 0}[k == Device && len(slots) > 1]; ls.Batches() != want {
				t.Errorf("spill of %d blocks made %d copy batches, want %d", len(slots), ls.Batches(), want)
			}
			for i := range slots {
				if err := p.Poison(ls, i); err != nil {
					t.Fatal(err)
				}
			}
			ls.Syncs = 0
			for i, sl := range slots {
				b.Restore(ctx, sl, p.Buffer(), p.Blocks()[i].Off, sl.Filled())
			}
			if _, err := b.Wait(); err != nil {
				t.Fatal(err)
			}
			if queues && ls.Syncs != 1 {
				t.Errorf("restore batch synced %d times, want 1", ls.Syncs)
			}
			after, err := p.Hashes(ls)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if after[i] != want[i] {
					t.Errorf("block %d: hash %016x after the round trip, want %016x", i, after[i], want[i])
				}
			}
		})
	}
}

func TestBatchQueuePaths(t *testing.T) {
	tests := []struct {
		kind   Kind
		faults Faults
		queues bool
	}{
		{Device, Faults{}, true},
		{Pinned, Faults{}, true},
		{Pageable, Faults{}, true},
		{Peer, Faults{}, true},
		{File, Faults{}, false},
		{Device, Faults{ShortRestore: 7}, true},
		{Pinned, Faults{Corrupt: true}, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %+v", tt.kind, tt.faults), func(t *testing.T) {
			_, _, slots, _ := batchFixture(t, tt.kind, tt.faults)
			if _, ok := asQueuer(slots[0]); ok != tt.queues {
				t.Errorf("queues = %v, want %v", ok, tt.queues)
			}
		})
	}
}

// A failed wait delivers nothing: no byte counts, no slot claims to hold any.
func TestBatchFailedWait(t *testing.T) {
	ctx := context.Background()
	ls, p, slots, _ := batchFixture(t, Device, Faults{})
	ls.FailSync = errors.New("device lost")
	b := NewBatch(ls)
	for i, sl := range slots {
		b.Spill(ctx, sl, p.Buffer(), p.Blocks()[i].Off)
	}
	got, err := b.Wait()
	if err == nil || !errors.Is(err, ls.FailSync) {
		t.Fatalf("Wait: %v, want the sync's error", err)
	}
	for i, sl := range slots {
		if got[i] != 0 || sl.Filled() != 0 {
			t.Errorf("slot %d: got %d, filled %d after a failed wait, want 0", i, got[i], sl.Filled())
		}
	}
}

// Faults hold on the queue path: a short restore arrives short.
func TestBatchShortRestore(t *testing.T) {
	ctx := context.Background()
	ls, p, slots, _ := batchFixture(t, Device, Faults{ShortRestore: 4109})
	b := NewBatch(ls)
	for i, sl := range slots {
		b.Spill(ctx, sl, p.Buffer(), p.Blocks()[i].Off)
	}
	if _, err := b.Wait(); err != nil {
		t.Fatal(err)
	}
	for i := range slots {
		p.Poison(ls, i)
	}
	for i, sl := range slots {
		b.Restore(ctx, sl, p.Buffer(), p.Blocks()[i].Off, sl.Filled())
	}
	got, err := b.Wait()
	if err != nil {
		t.Fatal(err)
	}
	for i := range slots {
		c, err := p.Check(ls, i)
		if err != nil {
			t.Fatal(err)
		}
		want := p.Blocks()[i].Len - 4109
		if got[i] != want || c.Reached != want {
			t.Errorf("block %d: reported %d, reached %d, want %d", i, got[i], c.Reached, want)
		}
	}
}

// Without Collect, device copies are queued as they come (in order with
// whatever else the caller queues on the stream), never held back.
func TestBatchWithoutCollectQueuesAtOnce(t *testing.T) {
	ls, p, slots, _ := batchFixture(t, Device, Faults{})
	b := NewBatch(ls)
	for i, sl := range slots {
		b.Spill(context.Background(), sl, p.Buffer(), p.Blocks()[i].Off)
	}
	if ls.Pending() < len(slots) || ls.Batches() != 0 {
		t.Errorf("%d copies pending, %d batches; want %d queued one by one", ls.Pending(), ls.Batches(), len(slots))
	}
	if _, err := b.Wait(); err != nil {
		t.Fatal(err)
	}
}

// Only slots whose moves queue and nothing more may go behind a gate: not
// files (copied through the host), not a corrupting fault (it syncs to read
// the restored bytes), not a stall (the host sleeps, which a gate would
// keep out of a device-timed move).
func TestQueueOnly(t *testing.T) {
	tests := []struct {
		kind Kind
		f    Faults
		want bool
	}{
		{Device, Faults{}, true},
		{Pinned, Faults{}, true},
		{Device, Faults{ShortRestore: 4096}, true},
		{Device, Faults{Corrupt: true}, false},
		{Device, Faults{Stall: time.Millisecond}, false},
		{File, Faults{}, false},
	}
	for _, tt := range tests {
		_, tr := open(t, tt.kind, 1<<20)
		sl, err := Inject(tr, tt.f).Alloc(4096)
		if err != nil {
			t.Fatal(err)
		}
		if got := QueueOnly(sl); got != tt.want {
			t.Errorf("%s with faults %+v: QueueOnly = %v, want %v", tt.kind, tt.f, got, tt.want)
		}
		sl.Free()
	}
}
