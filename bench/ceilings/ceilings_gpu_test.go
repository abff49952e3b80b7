package ceilings

import (
	"slices"
	"testing"

	"github.com/mstar-dev/mstar/bench"
	"github.com/mstar-dev/mstar/internal/gpu/cuda"
	"github.com/mstar-dev/mstar/internal/gpu/gputest"
	"github.com/mstar-dev/mstar/reports/results"
)

// GPU tests: they skip without a CUDA device. Build for the GPU machine with
// go test -c -o bin/bench.test ./bench.

func TestCUDACeilingsQuick(t *testing.T) {
	d := gputest.OpenCUDA(t)
	c, err := MeasureCeilings(t.Context(), d, CeilingOptions{Quick: true})
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
	d := gputest.OpenCUDA(t)
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
	graph, err := bench.TimeGraph(s, bench.Timing{Warmup: 1, Samples: 5, Reps: 10}, memset)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 10 {
		t.Errorf("fn called %d times; a graph of 10 reps should capture it 10 times and replay it", calls)
	}
	plain, err := bench.Time(s, bench.Timing{Warmup: 1, Samples: 5, Reps: 10}, memset)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("memset %d MiB: graph %.2f µs, stream %.2f µs per call (medians %v / %v)", n>>20, results.Median(graph)*1e6, results.Median(plain)*1e6, graph, plain)
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

// TestCUDAGEMMVariants compares ways of running the GEMM ceiling, to show
// which choices matter on this GPU (logged; the ceiling keeps the default).
func TestCUDAGEMMVariants(t *testing.T) {
	d := gputest.OpenCUDA(t)
	if testing.Short() {
		t.Skip("a diagnostic: several hundred 8192³ GEMMs")
	}
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tt := range []struct {
		name   string
		warmup int
		v      gemmVariant
	}{
		{"default", 30, defaultGEMM},
		{"long warm-up", 400, defaultGEMM},
		{"32 MiB workspace", 30, gemmVariant{outType: cuda.DataBF16, fill: "uniform", workspace: 32 << 20}},
		{"fp32 output", 30, gemmVariant{outType: cuda.DataF32, fill: "uniform"}},
		{"normal data", 30, gemmVariant{outType: cuda.DataBF16, fill: "normal"}},
		{"zeros", 30, gemmVariant{outType: cuda.DataBF16, fill: "zero"}},
		{"default again", 30, defaultGEMM},
	} {
		c := measureGEMMCUDAWith(d, s, 8192, bench.Timing{Warmup: tt.warmup, Samples: 20, Reps: 5}, tt.v)
		if !c.Measured() {
			t.Errorf("%s: %s", tt.name, c.Unmeasured)
			continue
		}
		t.Logf("%-18s %6.1f TFLOP/s (min %.1f max %.1f)", tt.name, c.Value, slices.Min(c.Samples), slices.Max(c.Samples))
	}
}
