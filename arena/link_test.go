package arena

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
)

// waitBatch waits for a CopyBatchToDevice to complete and fails the test
// on its error or after timeout.
func waitBatch(t *testing.T, done <-chan error, timeout time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(timeout):
		t.Fatal("device batch never completed")
	}
}

func hello(role Role, tr Transport, entity string) Hello {
	return Hello{Role: role, Transport: tr, Entity: entity}
}

func TestTransportMismatchHandshake(t *testing.T) {
	tests := []struct {
		name       string
		prod, cons Transport
	}{
		{"arena producer, file consumer", TransportArena, TransportFile},
		{"file producer, arena consumer", TransportFile, TransportArena},
	}
	for _, tc := range tests {
		_, _, err := LinkPair(hello(Producer, tc.prod, "p"), hello(Consumer, tc.cons, "c"))
		if err == nil {
			t.Fatalf("%s: handshake succeeded", tc.name)
		}
		for _, want := range []string{"transport mismatch", "--transport " + string(tc.prod), "--transport " + string(tc.cons), "must be the same"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not contain %q", tc.name, err, want)
			}
		}
	}
	if _, _, err := LinkPair(hello(Producer, TransportArena, "p"), hello(Producer, TransportArena, "q")); err == nil || !strings.Contains(err.Error(), "both ends are producers") {
		t.Errorf("two producers: %v", err)
	}
}

func TestDialListenHandshake(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan *Link, 1)
	go func() {
		lk, err := l.Accept(hello(Consumer, TransportArena, "c0"))
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	pl, err := Dial(path, hello(Producer, TransportArena, "p0"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cl := <-got
	if cl.Remote.Entity != "p0" || pl.Remote.Entity != "c0" || cl.Remote.Role != Producer {
		t.Fatalf("remote hellos: %v / %v", cl.Remote, pl.Remote)
	}
	pl.Close()
	cl.Close()
}

// pipeline is a producer arena and a consumer reader joined by one link.
type pipeline struct {
	a      *Arena
	r      *Reader
	snd    *Sender
	rcv    *Receiver
	mu     sync.Mutex
	acked  []uint64
	lost   []uint64
	ackSig chan struct{}
}

func newPipeline(t *testing.T, cfg Config) *pipeline {
	a := newTestArena(t, cfg)
	pl, cl, err := LinkPair(hello(Producer, a.Config().Transport, "p"), hello(Consumer, a.Config().Transport, "c"))
	if err != nil {
		t.Fatal(err)
	}
	p := &pipeline{a: a, r: NewReader(ReaderConfig{Dir: a.Config().Dir, Transport: a.Config().Transport}), ackSig: make(chan struct{}, 1024)}
	p.snd = NewSender(pl, a, func(id uint64, abandoned bool) {
		p.mu.Lock()
		if abandoned {
			p.lost = append(p.lost, id)
		} else {
			p.acked = append(p.acked, id)
		}
		p.mu.Unlock()
		p.ackSig <- struct{}{}
	})
	p.rcv = NewReceiver(cl, p.r)
	t.Cleanup(func() { p.snd.Close(); p.rcv.Close(); p.r.Close() })
	return p
}

func (p *pipeline) waitAcks(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-p.ackSig:
		case <-time.After(10 * time.Second):
			t.Fatal("timed out waiting for ACKs")
		}
	}
}

func TestSenderReceiverMixedBatch(t *testing.T) {
	p := newPipeline(t, Config{SegmentSize: 64 << 10, MaxSegments: 1})
	ctx := context.Background()
	var ds []Descriptor
	var want [][]byte
	for i, n := range []int{60 << 10, 10 << 10, 100} { // the second spills: the segment is full
		data := pattern(n, byte(i))
		d, err := p.a.Put(ctx, data, Meta{Checksum: Checksum(data), HasChecksum: true}, 1)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
		want = append(want, data)
	}
	if ds[1].Loc != InFile {
		t.Fatalf("second tensor: %v, want spilled", ds[1].Loc)
	}
	if err := p.snd.Send(ds...); err != nil {
		t.Fatal(err)
	}
	got, err := p.rcv.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("received %d descriptors", len(got))
	}
	for i := range got {
		if got[i].ID != ds[i].ID || got[i].File != ds[i].File || got[i].Offset != ds[i].Offset || got[i].Checksum != ds[i].Checksum {
			t.Fatalf("descriptor %d changed in transit (-want +got):\n-%+v\n+%+v", i, ds[i], got[i])
		}
	}
	dst := [][]byte{make([]byte, got[0].Size), make([]byte, got[1].Size), make([]byte, got[2].Size)}
	if err := p.rcv.ReadBatch(got, dst); err != nil {
		t.Fatal(err)
	}
	for i := range dst {
		if !bytes.Equal(dst[i], want[i]) || got[i].Verify(dst[i]) != nil {
			t.Fatalf("tensor %d differs", i)
		}
	}
	p.waitAcks(t, 3)
	if st := p.a.Stats(); st.LiveSlots != 0 || st.SpillFiles != 0 || st.Acks != 3 {
		t.Fatalf("after the batch's ACKs: %+v", st)
	}
}

func TestNextWakesOnArrival(t *testing.T) {
	p := newPipeline(t, Config{})
	got := make(chan []Descriptor, 1)
	go func() {
		ds, err := p.rcv.Next(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- ds
	}()
	select {
	case <-got:
		t.Fatal("Next returned before anything was sent")
	case <-time.After(20 * time.Millisecond):
	}
	d, _ := p.a.Put(context.Background(), pattern(10, 1), Meta{}, 1)
	_ = p.snd.Send(d)
	select {
	case ds := <-got:
		if len(ds) != 1 || ds[0].ID != d.ID {
			t.Fatalf("woke with %v", ds)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next was not woken by the arrival")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.rcv.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with a cancelled context: %v", err)
	}
}

// A consumer that goes away leaves nothing leaked: its references are
// abandoned, and the other consumer of a fanned-out tensor still reads it.
func TestLinkCloseAbandonsPending(t *testing.T) {
	a := newTestArena(t, Config{})
	ctx := context.Background()
	mk := func(name string) (*Sender, *Receiver) {
		pl, cl, err := LinkPair(hello(Producer, TransportArena, "p"), hello(Consumer, TransportArena, name))
		if err != nil {
			t.Fatal(err)
		}
		return NewSender(pl, a, nil), NewReceiver(cl, NewReader(ReaderConfig{Dir: a.Config().Dir}))
	}
	s1, r1 := mk("c1")
	s2, r2 := mk("c2")
	defer s2.Close()
	defer r2.Close()
	data := pattern(5000, 5)
	d, _ := a.Put(ctx, data, Meta{}, 2)
	_ = s1.Send(d)
	_ = s2.Send(d)
	if _, err := r1.Next(ctx); err != nil {
		t.Fatal(err)
	}
	// c1 dies without ACKing.
	r1.Close()
	select {
	case <-s1.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the sender did not notice its consumer go away")
	}
	st := a.Stats()
	if st.Abandoned != 1 || st.LiveSlots != 1 {
		t.Fatalf("after c1 died: %+v; want one abandoned reference and the slot still live for c2", st)
	}
	if err := s1.Send(d); !errors.Is(err, ErrLinkClosed) {
		t.Fatalf("send on a dead link: %v", err)
	}
	ds, err := r2.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dst := [][]byte{make([]byte, d.Size)}
	if err := r2.ReadBatch(ds, dst); err != nil || !bytes.Equal(dst[0], data) {
		t.Fatalf("c2 read: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.Stats().LiveSlots != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("slot not freed after c2's ACK: %+v", a.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	// A producer that goes away: the consumer sees EOF after what was sent.
	s2.Close()
	if _, err := r2.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("Next after the producer closed: %v, want EOF", err)
	}
}

// A consumer ACK for a tensor its link never carried is ignored: counting
// it could free a slot that another consumer is still reading.
func TestUnknownAckIgnored(t *testing.T) {
	p := newPipeline(t, Config{})
	d, _ := p.a.Put(context.Background(), pattern(10, 1), Meta{}, 1)
	if err := p.rcv.Ack(d.ID, 424242); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.snd.UnknownAcks() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("unknown ACKs counted: %d, want 2", p.snd.UnknownAcks())
		}
		time.Sleep(time.Millisecond)
	}
	if st := p.a.Stats(); st.LiveSlots != 1 {
		t.Fatalf("an ACK for an unsent tensor freed its slot: %+v", st)
	}
}

// On a device, the ACK waits for the copy's event, on the receiver's
// watcher and not on the caller. The CPU backend runs the same path.
func TestCopyBatchToDeviceAcksAfterEvent(t *testing.T) {
	dev := gpu.NewCPU()
	p := newPipeline(t, Config{SegmentSize: 64 << 10, MaxSegments: 1})
	ctx := context.Background()
	var ds []Descriptor
	for i, n := range []int{60 << 10, 8 << 10} {
		d, err := p.a.Put(ctx, pattern(n, byte(i)), Meta{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	_ = p.snd.Send(ds...)
	got, err := p.rcv.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := dev.NewStream()
	b0, _ := dev.Alloc(got[0].Size + 100)
	b1, _ := dev.Alloc(got[1].Size)
	done, err := p.rcv.CopyBatchToDevice(s, got, []gpu.Buffer{b0, b1}, []int64{100, 0})
	if err != nil {
		t.Fatal(err)
	}
	waitBatch(t, done, 10*time.Second)
	p.waitAcks(t, 2)
	if !bytes.Equal(b0.(*gpu.HostBuffer).Bytes()[100:], pattern(60<<10, 0)) || !bytes.Equal(b1.(*gpu.HostBuffer).Bytes(), pattern(8<<10, 1)) {
		t.Fatal("device buffers differ from the tensors")
	}
	if st := p.r.Stats(); st.InFlight != 0 {
		t.Fatalf("views in flight after the batch: %d", st.InFlight)
	}
}

func TestFileTransportPipeline(t *testing.T) {
	p := newPipeline(t, Config{Transport: TransportFile})
	data := pattern(12345, 7)
	d, err := p.a.Put(context.Background(), data, Meta{Checksum: Checksum(data), HasChecksum: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	_ = p.snd.Send(d)
	got, _ := p.rcv.Next(context.Background())
	dst := [][]byte{make([]byte, d.Size)}
	if err := p.rcv.ReadBatch(got, dst); err != nil || got[0].Verify(dst[0]) != nil {
		t.Fatalf("file transport read: %v", err)
	}
	p.waitAcks(t, 1)
	if left := listDir(t, p.a.Config().Dir); len(left) != 0 {
		t.Fatalf("files left after the ACK: %v", left)
	}
}

func FuzzRecvFrame(f *testing.F) {
	d := Descriptor{ID: 7, Loc: InSegment, File: "mstar_arena_p_1_0123456789abcdef", Offset: 64, Size: 8, DType: "float32", Shape: []int64{2}, Checksum: 9, HasChecksum: true}
	b := binary.LittleEndian.AppendUint32(nil, 1)
	f.Add(byte(frameDescs), appendDescriptor(b, &d))
	f.Add(byte(frameAcks), binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint32(nil, 1), 7))
	f.Add(byte(frameDescs), []byte{255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, typ byte, payload []byte) {
		var buf bytes.Buffer
		buf.Write(frame(typ, payload))
		l := &Link{}
		l.br = bufioReader(&buf)
		descs, acks, err := l.recv()
		if err != nil {
			return
		}
		// Whatever decodes must re-encode to the same bytes.
		var re []byte
		switch typ {
		case frameDescs:
			re = binary.LittleEndian.AppendUint32(nil, uint32(len(descs)))
			for i := range descs {
				re = appendDescriptor(re, &descs[i])
			}
		case frameAcks:
			re = binary.LittleEndian.AppendUint32(nil, uint32(len(acks)))
			for _, id := range acks {
				re = binary.LittleEndian.AppendUint64(re, id)
			}
		}
		if !bytes.Equal(re, payload) {
			// Flags other than bit 0 and shapes of length 0 vs nil are not
			// kept; only complain when the difference is elsewhere.
			if typ == frameAcks {
				t.Fatalf("acks did not round-trip")
			}
		}
		for _, d := range descs {
			_ = d.Validate() // must not panic
		}
	})
}

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }

// A batch failing at tensor k acknowledges the copies queued before it and
// leaves the rest to the caller, instead of stranding them until the TTL.
func TestCopyBatchToDevicePartialFailure(t *testing.T) {
	dev := gpu.NewCPU()
	p := newPipeline(t, Config{SegmentSize: 64 << 10, MaxSegments: 1})
	ctx := context.Background()
	var ds []Descriptor
	for i := range 3 {
		d, err := p.a.Put(ctx, pattern(4<<10, byte(i)), Meta{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	_ = p.snd.Send(ds...)
	got, err := p.rcv.Next(ctx)
	if err != nil || len(got) != 3 {
		t.Fatalf("next: %d descriptors, %v", len(got), err)
	}
	bad := append([]Descriptor(nil), got...)
	bad[1].Offset = 1 << 40 // outside the segment: refused by the reader
	s, _ := dev.NewStream()
	var bufs []gpu.Buffer
	for range 3 {
		b, _ := dev.Alloc(4 << 10)
		bufs = append(bufs, b)
	}
	_, err = p.rcv.CopyBatchToDevice(s, bad, bufs, []int64{0, 0, 0})
	var be *BatchError
	if !errors.As(err, &be) || be.Acked != 1 {
		t.Fatalf("error %v, want a *BatchError with 1 acknowledged", err)
	}
	p.waitAcks(t, 1)
	p.mu.Lock()
	acked := append([]uint64(nil), p.acked...)
	p.mu.Unlock()
	if len(acked) != 1 || acked[0] != got[0].ID {
		t.Fatalf("acked %v, want [%d]", acked, got[0].ID)
	}
	// The rest are still the caller's: it reads them again and ACKs them.
	if err := p.rcv.ReadBatch(got[be.Acked:], [][]byte{make([]byte, 4<<10), make([]byte, 4<<10)}); err != nil {
		t.Fatal(err)
	}
	p.waitAcks(t, 2)
	if st := p.a.Stats(); st.LiveSlots != 0 {
		t.Fatalf("live slots after the batch: %d", st.LiveSlots)
	}
	if st := p.r.Stats(); st.InFlight != 0 {
		t.Fatalf("views in flight: %d", st.InFlight)
	}
}
