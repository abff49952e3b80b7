package arena

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
)

// cudaDevice opens cuda:0 or skips: these tests run on the GPU machine
// (scripts/arena-gpu.sh).
func cudaDevice(t *testing.T) gpu.Device {
	t.Helper()
	d, _, err := gpu.Open(gpu.Spec{Backend: gpu.CUDA})
	if err != nil {
		t.Skip("no CUDA device: " + err.Error())
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// The whole device path: the producer copies D2H straight into a
// registered segment slot, the consumer H2D straight out of its own
// registered mapping, and the ACK waits for the copy's event.
func TestCUDAArenaDeviceRoundTrip(t *testing.T) {
	dev := cudaDevice(t)
	const seg = 64 << 20
	a := newTestArena(t, Config{Device: dev, SegmentSize: seg, MaxSegments: 2, PinBudget: 2 * seg})
	if st := a.Stats(); st.Pinned != seg {
		t.Fatalf("segment not registered: %s; warnings %v", st.Summary(), a.Warnings())
	}
	pl, cl, err := LinkPair(Hello{Role: Producer, Transport: TransportArena, Entity: "p"}, Hello{Role: Consumer, Transport: TransportArena, Entity: "c"})
	if err != nil {
		t.Fatal(err)
	}
	acked := make(chan uint64, 16)
	snd := NewSender(pl, a, func(id uint64, abandoned bool) { acked <- id })
	defer snd.Close()
	rd := NewReader(ReaderConfig{Dir: a.Config().Dir, Device: dev, PinBudget: 2 * seg})
	rcv := NewReceiver(cl, rd)
	defer rcv.Close()

	ps, _ := dev.NewStream()
	cs, _ := dev.NewStream()
	defer ps.Close()
	defer cs.Close()
	ctx := context.Background()
	for _, n := range []int64{4 << 10, 1 << 20, 16 << 20} {
		src := pattern(int(n), byte(n>>10))
		dsrc, err := dev.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		ddst, _ := dev.Alloc(n)
		if err := ps.CopyHtoD(dsrc, 0, src); err != nil {
			t.Fatal(err)
		}
		slot, err := a.Reserve(ctx, n)
		if err != nil || slot.Spilled() {
			t.Fatalf("reserve %d: %v", n, err)
		}
		if err := ps.CopyDtoH(slot.Bytes(), dsrc, 0); err != nil {
			t.Fatal(err)
		}
		ev, _ := ps.Record()
		if err := ev.Sync(); err != nil { // the descriptor must not ship ahead of its bytes
			t.Fatal(err)
		}
		ev.Close()
		d, err := a.Publish(slot, Meta{Checksum: Checksum(src), HasChecksum: true}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := snd.Send(d); err != nil {
			t.Fatal(err)
		}
		ds, err := rcv.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		done, err := rcv.CopyBatchToDevice(cs, ds, []gpu.Buffer{ddst}, []int64{0})
		if err != nil {
			t.Fatal(err)
		}
		waitBatch(t, done, 30*time.Second)
		select {
		case id := <-acked:
			if id != d.ID {
				t.Fatalf("ACK for %d, want %d", id, d.ID)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no ACK")
		}
		back := make([]byte, n)
		if err := cs.CopyDtoH(back, ddst, 0); err != nil {
			t.Fatal(err)
		}
		if err := cs.Sync(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back, src) {
			t.Fatalf("%d bytes: device round trip through the arena differs", n)
		}
		dsrc.Free()
		ddst.Free()
	}
	if st := rd.Stats(); st.Pinned == 0 || st.InFlight != 0 {
		t.Fatalf("consumer side: %+v; want its mapping registered and nothing in flight", st)
	}
	if st := a.Stats(); st.LiveSlots != 0 {
		t.Fatalf("producer side after the ACKs: %s", st.Summary())
	}
}
