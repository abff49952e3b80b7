package ceilings

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/bench"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/reports/results"
)

// small keeps the CPU measurements to milliseconds.
var small = CeilingOptions{Samples: 3, CopyBytes: 4 << 20, ReadBytes: 4 << 20, HostBytes: 2 << 20, GEMMSize: 64}

func TestCPUCeilingsMeasured(t *testing.T) {
	var steps []string
	opt := small
	opt.Progress = func(s string) { steps = append(steps, s) }
	c, err := MeasureCeilings(t.Context(), gpu.NewCPU(), opt)
	if err != nil {
		t.Fatal(err)
	}
	if c.Device != "cpu" || c.Backend != gpu.CPU {
		t.Errorf("device %q backend %q", c.Device, c.Backend)
	}
	for _, k := range ceilingKinds {
		ce := c.byKind(k)
		t.Logf("%s: %.4g %s (%s, %s)", k, ce.Value, ce.Unit, ce.Size, ce.Method)
		if !ce.Measured() {
			t.Errorf("%s unmeasured: %s", k, ce.Unmeasured)
			continue
		}
		if len(ce.Samples) != 3 {
			t.Errorf("%s: %d samples, want 3", k, len(ce.Samples))
		}
		lo, hi := slices.Min(ce.Samples), slices.Max(ce.Samples)
		if ce.Value <= 0 || ce.Value < lo || ce.Value > hi {
			t.Errorf("%s: value %v outside its samples [%v, %v]", k, ce.Value, lo, hi)
		}
		want := UnitGBps
		if k == "gemm" {
			want = UnitTFLOPs
		}
		if ce.Unit != want {
			t.Errorf("%s: unit %q, want %q", k, ce.Unit, want)
		}
	}
	if want := []string{"d2d", "read", "h2d", "d2h", "gemm"}; !slices.Equal(steps, want) {
		t.Errorf("progress steps %v, want %v", steps, want)
	}
	if c.D2D.Size != "4 MiB" || c.GEMM.Size != cpuGEMMSize("64") {
		t.Errorf("sizes %q, %q", c.D2D.Size, c.GEMM.Size)
	}
}

// cpuGEMMSize is the size the CPU's GEMM ceiling reports: "registers" for
// the FMA peak, else the gonum GEMM's n.
func cpuGEMMSize(n string) string {
	if cpuPeak() {
		return "registers"
	}
	return n
}

// Without a peak kernel the CPU's compute ceiling is gonum's Dgemm.
func TestCPUGEMMCeilingFallback(t *testing.T) {
	defer func(f func() bool) { cpuPeak = f }(cpuPeak)
	cpuPeak = func() bool { return false }
	c := measureGEMMCPU(64, bench.Timing{Samples: 2})
	if !c.Measured() || c.Size != "64" || !strings.Contains(c.Method, "gonum") || len(c.Samples) != 2 {
		t.Errorf("fallback ceiling %+v", c)
	}
}

func TestCeilingsDefaults(t *testing.T) {
	if _, err := MeasureCeilings(t.Context(), gpu.NewCPU(), CeilingOptions{Samples: -1}); err == nil {
		t.Error("negative samples accepted")
	}
	if testing.Short() {
		t.Skip("the CPU defaults move a few hundred MiB")
	}
	c, err := MeasureCeilings(t.Context(), gpu.NewCPU(), CeilingOptions{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.D2D.Samples) != 6 || c.D2D.Size != "32 MiB" || c.GEMM.Size != cpuGEMMSize("256") {
		t.Errorf("quick CPU defaults: %d samples, size %s, gemm %s", len(c.D2D.Samples), c.D2D.Size, c.GEMM.Size)
	}
}

// failingDevice is the CPU backend whose allocations above a size fail.
type failingDevice struct {
	gpu.Device
	limit int64
}

func (d failingDevice) Alloc(n int64) (gpu.Buffer, error) {
	if n > d.limit {
		return nil, errors.New("out of memory (test)")
	}
	return d.Device.Alloc(n)
}

func TestCeilingUnmeasuredIsNotZero(t *testing.T) {
	opt := small
	opt.CopyBytes = 8 << 20
	c, err := MeasureCeilings(t.Context(), failingDevice{gpu.NewCPU(), 4 << 20}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if c.D2D.Measured() || !strings.Contains(c.D2D.Unmeasured, "out of memory (test)") || c.D2D.Value != 0 || c.D2D.Samples != nil {
		t.Errorf("D2D = %+v; want unmeasured with the allocation's reason", c.D2D)
	}
	if _, ok := c.D2D.Fraction(1); ok {
		t.Error("Fraction of an unmeasured ceiling is ok")
	}
	if !c.H2D.Measured() {
		t.Errorf("H2D should still be measured: %s", c.H2D.Unmeasured)
	}
	res := c.Results()
	m := res[0].Metrics[0]
	if res[0].Params["what"] != "d2d" || m.Measured() || m.Unmeasured == "" || len(m.Samples) != 0 {
		t.Errorf("d2d result %+v; want an unmeasured metric with its reason", res[0])
	}
}

func TestCeilingsResultsRoundTrip(t *testing.T) {
	c, err := MeasureCeilings(t.Context(), gpu.NewCPU(), small)
	if err != nil {
		t.Fatal(err)
	}
	c.GEMM = Ceiling{Unit: UnitTFLOPs, Size: "64", Method: "none", Unmeasured: "cuBLAS unavailable (test)"}
	doc := results.NewDocument("bench ceilings", []string{"mstar", "bench", "ceilings"}, results.Env{"device": "cpu", "backend": "cpu"})
	doc.Results = c.Results()
	doc.Finish()
	if err := doc.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(doc.Results) != 5 {
		t.Fatalf("%d results, want 5", len(doc.Results))
	}
	for _, r := range doc.Results {
		if r.Name != CeilingResult || r.Metrics[0].Better != results.HigherIsBetter {
			t.Errorf("result %+v", r)
		}
	}
	path := filepath.Join(t.TempDir(), "ceilings.json")
	if err := results.WriteFile(path, doc); err != nil {
		t.Fatal(err)
	}
	back, err := ReadCeilings(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ceilingKinds {
		a, b := c.byKind(k), back.byKind(k)
		if a.Value != b.Value || a.Unit != b.Unit || a.Unmeasured != b.Unmeasured || !slices.Equal(a.Samples, b.Samples) || a.Size != b.Size {
			t.Errorf("%s: wrote %+v, read %+v", k, *a, *b)
		}
	}
	if back.Device != "cpu" {
		t.Errorf("device %q", back.Device)
	}
	if f, ok := back.D2D.Fraction(back.D2D.Value / 2); !ok || f != 0.5 {
		t.Errorf("Fraction = %v, %v; want 0.5", f, ok)
	}
}

func TestCeilingsFromBadDocuments(t *testing.T) {
	tests := []struct {
		name    string
		results []results.Result
		want    string
	}{
		{"no ceilings", []results.Result{{Name: "moe"}}, "no ceiling results"},
		{"unknown kind", []results.Result{{Name: CeilingResult, Params: results.Params{"what": "nvlink"}, Metrics: []results.Metric{{Name: "bandwidth", Unit: UnitGBps}}}}, "want what="},
		{"wrong unit", []results.Result{{Name: CeilingResult, Params: results.Params{"what": "gemm"}, Metrics: []results.Metric{{Name: "throughput", Unit: "GFLOP/s", Samples: []float64{1}}}}}, `unit "GFLOP/s"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CeilingsFrom(&results.Document{Results: tt.results})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
	// A document with only some kinds: the rest say they are missing.
	c, err := CeilingsFrom(&results.Document{Results: []results.Result{{Name: CeilingResult, Params: results.Params{"what": "h2d"},
		Metrics: []results.Metric{{Name: "bandwidth", Unit: UnitGBps, Samples: []float64{50, 55, 52}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if c.H2D.Value != 52 || c.D2D.Measured() || !strings.Contains(c.D2D.Unmeasured, "no d2d ceiling") {
		t.Errorf("partial document: H2D %+v, D2D %+v", c.H2D, c.D2D)
	}
}

// The H200 document in the repo must stay readable as --ceilings input.
func TestReadH200Ceilings(t *testing.T) {
	c, err := ReadCeilings(filepath.Join("..", "..", "reports", "measured", "h200", "ceilings.json"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Device != "cuda:0" || c.Backend != gpu.CUDA {
		t.Errorf("device %q backend %q", c.Device, c.Backend)
	}
	for _, k := range ceilingKinds {
		if k == "read" {
			continue // measured since: that document predates it
		}
		if ce := c.byKind(k); !ce.Measured() || len(ce.Samples) != 20 {
			t.Errorf("%s: measured %v, %d samples", k, ce.Measured(), len(ce.Samples))
		}
	}
	// Without a read ceiling, streaming work falls back to the copy ceiling
	// and says that it is no upper bound.
	if ce, name, note := c.Stream(); name != "d2d" || ce.Value != c.D2D.Value || !strings.Contains(note, "reads can beat") {
		t.Errorf("Stream() of a document without a read ceiling: %s %v %q", name, ce.Value, note)
	}
	if c.GEMM.Unit != UnitTFLOPs || c.D2D.Unit != UnitGBps {
		t.Errorf("units %q %q", c.GEMM.Unit, c.D2D.Unit)
	}
}

func TestCeilingsMatches(t *testing.T) {
	h200 := &Ceilings{Backend: gpu.CUDA, Name: "NVIDIA H200"}
	for _, tc := range []struct {
		name string
		c    *Ceilings
		info gpu.Info
		ok   bool
	}{
		{"same GPU", h200, gpu.Info{Backend: gpu.CUDA, Name: "NVIDIA H200"}, true},
		{"other GPU", h200, gpu.Info{Backend: gpu.CUDA, Name: "NVIDIA H100 80GB HBM3"}, false},
		{"GPU ceilings on the CPU", h200, gpu.Info{Backend: gpu.CPU, Name: "AMD EPYC"}, false},
		{"unnamed document", &Ceilings{Backend: gpu.CUDA}, gpu.Info{Backend: gpu.CUDA, Name: "NVIDIA H200"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.c.Matches(tc.info); (err == nil) != tc.ok {
				t.Errorf("Matches = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// An interrupt stops the measurement between ceilings: those done keep their
// samples, the rest are unmeasured saying why, and every one still makes a
// valid result.
func TestCeilingsInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	c, err := MeasureCeilings(ctx, gpu.NewCPU(), CeilingOptions{Quick: true, Samples: 2, CopyBytes: 1 << 20, HostBytes: 1 << 20,
		Progress: func(what string) {
			if what == "h2d" {
				cancel()
			}
		}})
	if !errors.Is(err, context.Canceled) || c == nil {
		t.Fatalf("err %v, ceilings %v; want the partial ceilings and context.Canceled", err, c)
	}
	if !c.D2D.Measured() {
		t.Errorf("d2d %+v: measured before the interrupt, want its samples", c.D2D)
	}
	if c.GEMM.Measured() || !strings.Contains(c.GEMM.Unmeasured, "interrupted") {
		t.Errorf("gemm %+v: want unmeasured, saying it was interrupted", c.GEMM)
	}
	doc := results.NewDocument("bench ceilings", nil, results.Env{})
	doc.Results = c.Results()
	doc.Finish()
	if err := doc.Validate(); err != nil {
		t.Errorf("partial ceilings make an invalid document: %v", err)
	}
}

// Quick on CUDA keeps the device buffers at full size (a 256 MiB pass read
// 7–8% under the 1 GiB one on the H200) and shrinks only the host copies;
// on the CPU it shrinks the copies, and every read still spans 4× the cache.
func TestSizesFor(t *testing.T) {
	const l2 = 60 << 20
	full, quick := sizesFor(true, false, l2), sizesFor(true, true, l2)
	if quick.ReadBytes != full.ReadBytes || quick.CopyBytes != full.CopyBytes || quick.ReadBytes < 1<<30 {
		t.Errorf("CUDA quick read %d, copy %d; full read %d, copy %d", quick.ReadBytes, quick.CopyBytes, full.ReadBytes, full.CopyBytes)
	}
	if quick.HostBytes >= full.HostBytes {
		t.Errorf("CUDA quick host copies %d, full %d: quick should shrink them", quick.HostBytes, full.HostBytes)
	}
	if big := sizesFor(true, true, 512<<20); big.ReadBytes != 4*(512<<20) {
		t.Errorf("a 512 MiB L2: read %d, want 4× the L2", big.ReadBytes)
	}
	cpu, cpuQuick := sizesFor(false, false, 32<<20), sizesFor(false, true, 32<<20)
	if cpuQuick.CopyBytes >= cpu.CopyBytes || cpuQuick.ReadBytes < 4*(32<<20) {
		t.Errorf("CPU quick copy %d (full %d), read %d", cpuQuick.CopyBytes, cpu.CopyBytes, cpuQuick.ReadBytes)
	}
}

// Document is what CeilingsFrom reads back: the device, its backend and
// name (which Matches checks), and every measured ceiling's samples.
func TestDocumentRoundTrip(t *testing.T) {
	for _, c := range []*Ceilings{
		{Device: "cuda:0", Backend: gpu.CUDA, Name: "NVIDIA H200", Read: Ceiling{Unit: UnitGBps, Samples: []float64{4500, 4558}, Value: 4529},
			GEMM: Ceiling{Unit: UnitTFLOPs, Samples: []float64{680}, Value: 680}},
		{Device: "cpu", Backend: gpu.CPU, Name: "AMD EPYC", D2D: Ceiling{Unit: UnitGBps, Samples: []float64{64}, Value: 64}},
	} {
		for _, k := range ceilingKinds { // as MeasureCeilings leaves them: a unit each, unmeasured when not run
			if ce := c.byKind(k); ce.Unit == "" {
				ce.Unit, ce.Unmeasured = UnitGBps, "not run"
				if k == "gemm" {
					ce.Unit = UnitTFLOPs
				}
			}
		}
		back, err := CeilingsFrom(c.Document())
		if err != nil {
			t.Fatalf("%s: %v", c.Device, err)
		}
		if back.Device != c.Device || back.Backend != c.Backend || back.Name != c.Name {
			t.Errorf("read back as %s %s %q, want %s %s %q", back.Device, back.Backend, back.Name, c.Device, c.Backend, c.Name)
		}
		if err := back.Matches(gpu.Info{Backend: c.Backend, Name: c.Name}); err != nil {
			t.Errorf("%s: the read-back ceilings do not match their own device: %v", c.Device, err)
		}
		for _, k := range []string{"read", "gemm", "d2d"} {
			want, got := c.byKind(k), back.byKind(k)
			if want.Measured() != got.Measured() || (want.Measured() && got.Value != results.Median(want.Samples)) {
				t.Errorf("%s %s: read back %+v from %+v", c.Device, k, *got, *want)
			}
		}
	}
}
