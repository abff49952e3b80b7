package bench

import (
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu"
)

// GPU tests: they skip without a CUDA device. Build for the GPU machine with
// go test -c -o bin/bench.test ./bench.

func openCUDA(t *testing.T) gpu.Device {
	t.Helper()
	d, _, err := gpu.Open(gpu.Spec{Backend: gpu.CUDA})
	if err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestCUDACeilingsQuick(t *testing.T) {
	d := openCUDA(t)
	c, err := MeasureCeilings(d, CeilingOptions{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ceilingKinds {
		ce := c.byKind(k)
		t.Logf("%s: %.1f %s (%s; %s)", k, ce.Value, ce.Unit, ce.Size, ce.Method)
		if !ce.Measured() || len(ce.Samples) != 6 {
			t.Errorf("%s: measured %v with %d samples (%s); want 6", k, ce.Measured(), len(ce.Samples), ce.Unmeasured)
		}
	}
}

func TestCUDATimeGraph(t *testing.T) {
	d := openCUDA(t)
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 64 << 20
	buf, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	calls := 0
	memset := func() error { calls++; return s.Memset(buf, 0, n, byte(calls)) }
	graph, err := TimeGraph(s, Timing{Warmup: 1, Samples: 5, Reps: 10}, memset)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 10 {
		t.Errorf("fn called %d times; a graph of 10 reps should capture it 10 times and replay it", calls)
	}
	plain, err := Time(s, Timing{Warmup: 1, Samples: 5, Reps: 10}, memset)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("memset %d MiB: graph %.2f µs, stream %.2f µs per call (medians %v / %v)", n>>20, median(graph)*1e6, median(plain)*1e6, graph, plain)
	for i, v := range graph {
		if v <= 0 {
			t.Errorf("graph sample %d = %v", i, v)
		}
	}
	// The last replay wrote the last captured value.
	back := make([]byte, 1)
	s.Sync()
	if err := s.CopyDtoH(back, buf, n-1); err != nil {
		t.Fatal(err)
	}
	s.Sync()
	if back[0] != byte(calls) {
		t.Errorf("buffer holds %d after the timed stream runs, want %d", back[0], byte(calls))
	}
}
