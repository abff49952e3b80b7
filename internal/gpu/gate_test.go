package gpu

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// The CPU backend's streams run inside the call: nothing there can be held.
func TestCPUIsNoGater(t *testing.T) {
	if _, ok := NewCPU().(Gater); ok {
		t.Error("the CPU backend claims it can hold streams")
	}
}

// On CUDA the work a timed spill move queues behind a gate (the eviction,
// a batched copy, an event) waits for Open and then runs, twice over.
// Skips without a GPU.
func TestGateHoldsEvictionAndBatchCUDA(t *testing.T) {
	if ok, why := cudaAvailable(); !ok {
		t.Skip("no CUDA device: " + why)
	}
	d, err := openCUDA(0)
	if err != nil {
		t.Skip(err)
	}
	defer d.Close()
	g, err := d.(Gater).NewGate()
	if errors.Is(err, ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	const n = 1 << 20
	src, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Free()
	dst, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Free()
	s, _ := d.NewStream()
	defer s.Close()
	host := make([]byte, n)
	for round := byte(1); round <= 2; round++ {
		for i := range host {
			host[i] = byte(i) ^ round
		}
		if err := s.CopyHtoD(src, 0, host); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := g.Hold(s); err != nil {
			t.Fatal(err)
		}
		if err := s.(CacheEvicter).EvictCache(); err != nil {
			t.Fatal(err)
		}
		if err := s.(BatchCopier).CopyDtoDBatch([]DtoDCopy{{dst, 0, src, 0, n / 2}, {dst, n / 2, src, n / 2, n / 2}}); err != nil {
			t.Fatal(err)
		}
		ev, err := s.Record()
		if err != nil {
			t.Fatal(err)
		}
		defer ev.Close()
		time.Sleep(20 * time.Millisecond)
		if done, err := ev.Done(); done || err != nil {
			t.Fatalf("round %d: work behind the hold done %v (err %v) before the gate opened", round, done, err)
		}
		if err := g.Open(); err != nil {
			t.Fatal(err)
		}
		if err := ev.Sync(); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, n)
		if err := s.CopyDtoH(got, dst, 0); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, host) {
			t.Fatalf("round %d: the copies behind the gate did not deliver the bytes", round)
		}
	}
}
