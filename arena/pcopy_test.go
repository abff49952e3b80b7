package arena

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
)

func TestParallelCopyAndFileIO(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       int
		threads int
		pieces  int
	}{
		{"small stays on one thread", 4096, 8, 1},
		{"one thread asked", 4 << 20, 1, 1},
		{"below two minimum chunks", chunkMin*2 - 1, 8, 1},
		{"two chunks", chunkMin * 2, 8, 2},
		{"uneven tail", 3*chunkMin + 12345, 3, 3},
		{"capped by threads", 16 << 20, 4, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size, count := chunks(int64(tc.n), tc.threads)
			if count != tc.pieces || (count > 1 && size%pageSize != 0) || size*int64(count) < int64(tc.n) {
				t.Fatalf("chunks(%d, %d) = %d x %d, want %d pieces of whole pages covering it", tc.n, tc.threads, count, size, tc.pieces)
			}
			src := pattern(tc.n, 7)
			dst := make([]byte, tc.n)
			pcopy(dst, src, tc.threads)
			if !bytes.Equal(dst, src) {
				t.Fatal("pcopy: copy differs from its source")
			}
			f, err := os.Create(filepath.Join(t.TempDir(), "x"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := ppwrite(int(f.Fd()), src, tc.threads); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, tc.n)
			if short, err := ppread(int(f.Fd()), got, tc.threads); err != nil || short {
				t.Fatalf("ppread: short %v, err %v", short, err)
			}
			if !bytes.Equal(got, src) {
				t.Fatal("ppwrite/ppread: file round trip differs from its source")
			}
			if short, _ := ppread(int(f.Fd()), make([]byte, tc.n+1), tc.threads); !short {
				t.Fatal("ppread past the end of the file did not report a short read")
			}
		})
	}
}

func TestReadBatchIntoMixedOutcomes(t *testing.T) {
	a := newTestArena(t, Config{SegmentSize: 1 << 20, MaxSegments: 1})
	ctx := context.Background()
	p1, p2 := pattern(5000, 1), pattern(3000, 2)
	d1, err := a.Put(ctx, p1, Meta{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := a.Put(ctx, p2, Meta{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	bad := d2
	bad.Offset = 1 << 20 // past the end
	rd := NewReader(ReaderConfig{Dir: a.Config().Dir})
	defer rd.Close()
	ds := []Descriptor{d1, bad, d2, d1}
	dst := [][]byte{make([]byte, 5000), make([]byte, 3000), make([]byte, 3000), make([]byte, 10)}
	errs := make([]error, len(ds))
	rd.ReadBatchInto(ds, dst, errs)
	wantErr := []bool{false, true, false, true}
	for i, e := range errs {
		if (e != nil) != wantErr[i] {
			t.Errorf("tensor %d of the batch: error %v, want error %v", i, e, wantErr[i])
		}
	}
	if !bytes.Equal(dst[0], p1) || !bytes.Equal(dst[2], p2) {
		t.Error("a good tensor of a mixed batch was not copied intact")
	}
	if st := rd.Stats(); st.InFlight != 0 {
		t.Errorf("%d views still in flight after the batch", st.InFlight)
	}
}

func TestAckBatch(t *testing.T) {
	a := newTestArena(t, Config{SegmentSize: 1 << 20, MaxSegments: 1})
	ctx := context.Background()
	var ids []uint64
	for i := range 3 {
		d, err := a.Put(ctx, pattern(4096, byte(i)), Meta{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	ok := make([]bool, 4)
	err := a.AckBatch([]uint64{ids[0], ids[1], ids[0], ids[2]}, ok)
	if err == nil {
		t.Error("a doubled ACK in a batch was not refused")
	}
	if want := []bool{true, true, false, true}; !equalBools(ok, want) {
		t.Errorf("AckBatch ok = %v, want %v", ok, want)
	}
	if st := a.Stats(); st.LiveSlots != 0 || st.Acks != 3 {
		t.Errorf("after the batch: %d live slots, %d acks; want 0 and 3", st.LiveSlots, st.Acks)
	}
}

func equalBools(a, b []bool) bool {
	return len(a) == len(b) && string(boolBytes(a)) == string(boolBytes(b))
}

func boolBytes(a []bool) []byte {
	out := make([]byte, len(a))
	for i, v := range a {
		if v {
			out[i] = 1
		}
	}
	return out
}

// Descriptors sent as separate frames while the consumer is not reading
// reach it as one batch, and its one ReadBatch answers them in one frame.
func TestNextMergesWaitingFrames(t *testing.T) {
	a := newTestArena(t, Config{SegmentSize: 1 << 20, MaxSegments: 1})
	pl, cl, err := LinkPair(Hello{Role: Producer, Transport: TransportArena, Entity: "p"}, Hello{Role: Consumer, Transport: TransportArena, Entity: "c"})
	if err != nil {
		t.Fatal(err)
	}
	acked := make(chan uint64, 16)
	snd := NewSender(pl, a, func(id uint64, _ bool) { acked <- id })
	defer snd.Close()
	rd := NewReader(ReaderConfig{Dir: a.Config().Dir})
	rcv := NewReceiver(cl, rd)
	defer func() { rcv.Close(); rd.Close() }()
	const n = 8
	for i := range n {
		d, err := a.Put(context.Background(), pattern(4096, byte(i)), Meta{}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := snd.Send(d); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until every descriptor has been queued for Next (a frame is
	// counted in FramesIn before its batch is queued).
	deadline := time.Now().Add(10 * time.Second)
	for rcv.queued.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d descriptors queued (%d frames in)", rcv.queued.Load(), cl.Stats().FramesIn)
		}
		runtime.Gosched()
	}
	ds, err := rcv.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != n {
		t.Fatalf("Next returned %d descriptors, want all %d that were waiting", len(ds), n)
	}
	dst := make([][]byte, n)
	for i := range dst {
		dst[i] = make([]byte, 4096)
	}
	framesBefore := cl.Stats().FramesOut
	if err := rcv.ReadBatch(ds, dst); err != nil {
		t.Fatal(err)
	}
	if got := cl.Stats().FramesOut - framesBefore; got != 1 {
		t.Errorf("ReadBatch of %d tensors queued %d ACK frames, want 1", n, got)
	}
	for range n {
		<-acked
	}
	for i := range n {
		if !bytes.Equal(dst[i], pattern(4096, byte(i))) {
			t.Errorf("tensor %d differs from its source", i)
		}
	}
}

// RecordBlocking works on every backend: on the CPU one, a plain event.
func TestRecordBlockingCPU(t *testing.T) {
	s, err := gpu.NewCPU().NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev, err := gpu.RecordBlocking(s)
	if err != nil {
		t.Fatal(err)
	}
	if done, err := ev.Done(); !done || err != nil {
		t.Fatalf("CPU completion event: done %v, err %v", done, err)
	}
	if err := errors.Join(ev.Sync(), ev.Close()); err != nil {
		t.Fatal(err)
	}
}
