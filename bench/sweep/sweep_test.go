package sweep

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mstar-dev/mstar/arena"
	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
)

func shmDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/dev/shm", "mstar-sweep-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func small(dir string, mode Mode) Options {
	return Options{Mode: mode, MinSize: 4 << 10, MaxSize: 64 << 10, Factor: 4, Samples: 3, Dir: dir, SampleBytes: 256 << 10}
}

func find(t *testing.T, rs []results.Result, name string, params map[string]string) results.Result {
	t.Helper()
next:
	for _, r := range rs {
		if r.Name != name {
			continue
		}
		for k, v := range params {
			if r.Params[k] != v {
				continue next
			}
		}
		return r
	}
	t.Fatalf("no %s result with %v", name, params)
	return results.Result{}
}

func TestSizes(t *testing.T) {
	tests := []struct {
		name          string
		min, max, fac int64
		want          []int64
	}{
		{"default range", 4 << 10, 1 << 30, 4, []int64{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30}},
		{"one size", 1 << 20, 1 << 20, 2, []int64{1 << 20}},
		{"max not on a step", 4 << 10, 100 << 10, 4, []int64{4 << 10, 16 << 10, 64 << 10}},
	}
	for _, tc := range tests {
		got := Options{MinSize: tc.min, MaxSize: tc.max, Factor: tc.fac}.Sizes()
		if len(got) != len(tc.want) {
			t.Errorf("%s: sizes %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: sizes %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
}

func TestOptionsRejected(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
		want string
	}{
		{"bad mode", Options{Mode: "fast"}, "mode"},
		{"tiny size", Options{MinSize: 8}, "min size"},
		{"inverted range", Options{MinSize: 1 << 20, MaxSize: 4096}, "below min size"},
		{"factor one", Options{Factor: 1}, "factor"},
		{"no samples", Options{Samples: -1}, "samples"},
		{"negative tensors", Options{Tensors: -3}, "tensors per sample"},
		{"destinations past 4 GiB", Options{Tensors: 10, MaxSize: 1 << 30}, "4 GiB"},
	}
	for _, tc := range tests {
		if _, err := Run(t.Context(), tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
}

// Sizes whose buffers cannot fit in memory are refused before anything is
// allocated, with the numbers.
func TestSizesBeyondMemoryRejected(t *testing.T) {
	for _, mode := range []Mode{ModeCopy, ModeTransport} {
		_, err := Run(t.Context(), Options{Mode: mode, MinSize: 1 << 50, MaxSize: 1 << 50, Dir: t.TempDir()})
		var fe *gpu.FitError
		if !badinput.Is(err) || !errors.As(err, &fe) || fe.Need < 4<<50 {
			t.Errorf("%s at 1 PiB: %v; want bad input holding a FitError of at least 4 PiB", mode, err)
		}
	}
}

// A transport sample streams enough tensors that fill and drain do not
// dominate: thousands of small ones, at least 16 large ones, within 4 GiB;
// --tensors overrides.
func TestTransportCount(t *testing.T) {
	opt := Options{}
	if err := opt.defaults(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		size int64
		want int
	}{{4 << 10, 4096}, {64 << 10, 1024}, {1 << 20, 64}, {64 << 20, 16}, {1 << 30, 4}} {
		if got := transportCount(tc.size, opt); got != tc.want {
			t.Errorf("transportCount(%d) = %d, want %d", tc.size, got, tc.want)
		}
	}
	opt.Tensors = 100
	if got := transportCount(4<<10, opt); got != 100 {
		t.Errorf("with Tensors 100: %d tensors", got)
	}
}

// A window smaller than the sample: the producer sleeps on a full window
// and the ACKs wake it; every tensor still arrives intact.
func TestTransportSweepSmallWindow(t *testing.T) {
	opt := small(t.TempDir(), ModeTransport)
	opt.MaxSize, opt.Tensors, opt.window = 16<<10, 64, 2
	out, err := Run(t.Context(), opt)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range out.Results {
		if tr := r.Params["transport"]; tr != TrArena && tr != TrFile {
			continue
		}
		n++
		if m := r.Metric(MetricWrong); m == nil || slices.Max(m.Samples) != 0 {
			t.Errorf("%v: wrong copies %v", r.Params, m)
		}
		if c := r.Metric(MetricCount); c == nil || c.Samples[0] != 64 {
			t.Errorf("%v: tensors per sample %v, want 64", r.Params, c)
		}
	}
	if n != 4 {
		t.Errorf("%d arena and file results, want 4 (2 sizes × 2 transports)", n)
	}
}

func TestTransportSweep(t *testing.T) {
	opt := small(shmDir(t), ModeTransport)
	out, err := Run(t.Context(), opt)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(out.Results), 4*len(opt.Sizes()); got != want {
		t.Fatalf("%d results, want %d (4 transports x %d sizes)", got, want, len(opt.Sizes()))
	}
	_, procErr := os.Stat("/proc/stat")
	for _, r := range out.Results {
		if !r.Passed() {
			t.Errorf("%s: gate failed: %v", r.Key(), r.Gates)
		}
		if procErr == nil && (r.HostState == nil || r.HostState.CPUs < 1) {
			t.Errorf("%s: no host state on Linux: %+v", r.Key(), r.HostState)
		}
		for _, m := range r.Metrics {
			if !m.Measured() {
				t.Errorf("%s: %s unmeasured: %s", r.Key(), m.Name, m.Unmeasured)
			} else if m.Name != MetricCount && len(m.Samples) != opt.Samples {
				t.Errorf("%s: %s has %d samples, want %d", r.Key(), m.Name, len(m.Samples), opt.Samples)
			}
		}
	}
	for _, size := range []string{"4096", "65536"} {
		arenaR := find(t, out.Results, "transport", map[string]string{"transport": TrArena, "size": size})
		for _, name := range []string{MetricVsFile, MetricPctMemcpy, MetricSpills} {
			if arenaR.Metric(name) == nil {
				t.Errorf("arena at %s: no %s metric", size, name)
			}
		}
		if s := arenaR.Metric(MetricSpills).Samples; results.Median(s) != 0 {
			t.Errorf("arena at %s spilled %v tensors: the sweep must measure the arena, not its spill path", size, s)
		}
		file := find(t, out.Results, "transport", map[string]string{"transport": TrFile, "size": size})
		if v := results.Median(file.Metric(MetricVsFile).Samples); math.Abs(v-1) > 1e-9 && len(file.Metric(MetricVsFile).Samples)%2 == 1 {
			t.Errorf("file vs itself at %s: median %v, want 1", size, v)
		}
	}
}

func TestCopySweepCPU(t *testing.T) {
	opt := small(shmDir(t), ModeCopy)
	opt.Device = gpu.NewCPU()
	out, err := Run(t.Context(), opt)
	if err != nil {
		t.Fatal(err)
	}
	sizes := opt.Sizes()
	copies, regs := 0, 0
	for _, r := range out.Results {
		switch r.Name {
		case "copy":
			copies++
			if !r.Passed() {
				t.Errorf("%s: %v", r.Key(), r.Gates)
			}
			if _, err := os.Stat("/proc/stat"); err == nil && (r.HostState == nil || r.GPUState != nil) {
				t.Errorf("%s: want the host's state and no GPU state on the CPU backend: %+v %+v", r.Key(), r.HostState, r.GPUState)
			}
			if m := r.Metric(MetricPctPCIe); m.Measured() || !strings.Contains(m.Unmeasured, "CPU backend") {
				t.Errorf("%s: pct_pcie on the CPU backend: %+v, want unmeasured with the reason", r.Key(), m)
			}
			if r.Params["memory"] == MemPinned && opt.Samples%2 == 1 {
				if v := results.Median(r.Metric(MetricPctPinned).Samples); math.Abs(v-100) > 1e-9 {
					t.Errorf("%s: pinned vs pinned median %v%%, want 100", r.Key(), v)
				}
			}
		case "register":
			regs++
			if m := r.Metric(MetricRegister); m.Measured() || m.Unmeasured == "" {
				t.Errorf("register on the CPU backend: %+v, want unmeasured with a reason", m)
			}
		}
	}
	if copies != len(Memory)*len(Directions)*len(sizes) || regs != len(sizes) {
		t.Fatalf("%d copy and %d register results, want %d and %d", copies, regs, len(Memory)*len(Directions)*len(sizes), len(sizes))
	}
}

// lossyDevice drops every seventh D2H copy: #wrong must see it.
type lossyDevice struct{ gpu.Device }
type lossyStream struct {
	gpu.Stream
	n *atomic.Int64
}

func (d lossyDevice) NewStream() (gpu.Stream, error) {
	s, err := d.Device.NewStream()
	return lossyStream{s, new(atomic.Int64)}, err
}

func (s lossyStream) CopyDtoH(dst []byte, src gpu.Buffer, off int64) error {
	if s.n.Add(1)%7 == 0 {
		return nil
	}
	return s.Stream.CopyDtoH(dst, src, off)
}

func TestCopySweepCountsWrongCopies(t *testing.T) {
	opt := small(shmDir(t), ModeCopy)
	opt.Device = lossyDevice{gpu.NewCPU()}
	opt.MaxSize = opt.MinSize
	out, err := Run(t.Context(), opt)
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for _, r := range out.Results {
		if r.Name != "copy" || r.Params["dir"] != DirD2H {
			continue
		}
		if r.Passed() {
			t.Errorf("%s: passed although D2H copies were dropped", r.Key())
		}
		for _, s := range r.Metric(MetricWrong).Samples {
			bad += int(s)
		}
	}
	if bad == 0 {
		t.Fatal("no wrong copies counted")
	}
}

func TestVerifyDetectsStaleAndTorn(t *testing.T) {
	src := make([]byte, 64)
	pattern(src, 3)
	dst := [][]byte{make([]byte, 64), make([]byte, 64), make([]byte, 64)}
	for i := range dst {
		stamp(src, 5, i)
		copy(dst[i], src)
	}
	if w := verify(dst, src, 5); w != 0 {
		t.Fatalf("clean copies: %d wrong", w)
	}
	if w := verify(dst, src, 6); w != 3 {
		t.Fatalf("stale copies (previous sample): %d wrong, want 3", w)
	}
	dst[1][40] ^= 1
	if w := verify(dst, src, 5); w != 1 {
		t.Fatalf("one torn copy: %d wrong, want 1", w)
	}
}

// An interrupt in the middle of a file-transport sample, with tensor files
// in flight, stops the sweep: the points done are kept, the one in flight
// is dropped, and no segment or file is left in the directory.
func TestTransportSweepInterruptedCleansUp(t *testing.T) {
	dir := shmDir(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	opt := small(dir, ModeTransport)
	opt.MaxSize, opt.Tensors, opt.window = 16<<10, 64, 32
	var inFlight int
	opt.putHook = func(tr arena.Transport, i int) {
		if tr == arena.TransportFile && i == 40 {
			inFlight = len(entries(t, dir))
			cancel()
		}
	}
	out, err := Run(ctx, opt)
	if !errors.Is(err, context.Canceled) || out == nil {
		t.Fatalf("err %v; want the partial outcome and context.Canceled", err)
	}
	if inFlight == 0 {
		t.Fatal("no tensor file in flight when the interrupt came: the test proves nothing")
	}
	if left := entries(t, dir); len(left) != 0 {
		t.Errorf("%d files left behind after the interrupt: %v", len(left), left)
	}
	// At the first size memcpy, memcpy-2t and arena finished; file did not.
	var got []string
	for _, r := range out.Results {
		got = append(got, r.Params["transport"]+"/"+r.Params["size"])
	}
	if want := []string{"memcpy/4096", "memcpy-2t/4096", "arena/4096"}; !slices.Equal(got, want) {
		t.Errorf("results %v, want %v", got, want)
	}
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// An interrupt during the copy sweep keeps the copy points done and leaves
// no scratch mapping behind.
func TestCopySweepInterrupted(t *testing.T) {
	dir := shmDir(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	opt := small(dir, ModeCopy)
	opt.Device = gpu.NewCPU()
	opt.Progress = func(step string) {
		if step == "copy arena 4KiB" {
			cancel()
		}
	}
	out, err := Run(ctx, opt)
	if !errors.Is(err, context.Canceled) || out == nil {
		t.Fatalf("err %v; want the partial outcome and context.Canceled", err)
	}
	if left := entries(t, dir); len(left) != 0 {
		t.Errorf("%d files left behind after the interrupt: %v", len(left), left)
	}
	for _, r := range out.Results {
		if r.Name != "copy" || (r.Params["memory"] != MemPageable && r.Params["memory"] != MemShm) {
			t.Errorf("result %s: only pageable and shm copies were done before the interrupt", r.Key())
		}
	}
	if len(out.Results) != 2*len(Directions) {
		t.Errorf("%d results, want %d (pageable and shm, each direction)", len(out.Results), 2*len(Directions))
	}
}

// A percentage above 105 of its reference warns, naming the reference.
func TestWarnOverReference(t *testing.T) {
	r := results.Result{Name: "copy", Params: results.Params{"memory": "pageable", "dir": "h2d", "size": "1024"},
		Metrics: []results.Metric{{Name: MetricPctCeiling, Unit: "%", Better: results.HigherIsBetter, Samples: []float64{120, 130, 140}}}}
	warnOver(&r, MetricPctCeiling, "the run's best pinned median", 7.5)
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "pct_ceiling 130% of the run's best pinned median (7.50 GB/s) is above 105%") {
		t.Fatalf("warnings %q", r.Warnings)
	}
	if got := overWarnings([]results.Result{r}); len(got) != 1 {
		t.Errorf("overWarnings %q", got)
	}
	r.Warnings = nil
	r.Metrics[0].Samples = []float64{100, 104, 105}
	if warnOver(&r, MetricPctCeiling, "x", 1); len(r.Warnings) != 0 {
		t.Errorf("104%% warned: %q", r.Warnings)
	}
}

// Cells lists every part at every size in run order; Only runs those
// cells and no others (a --shard's part).
func TestCellsAndOnly(t *testing.T) {
	opt := small(shmDir(t), ModeAll)
	cells, err := opt.Cells()
	if err != nil {
		t.Fatal(err)
	}
	sizes := opt.Sizes()
	if len(cells) != 3*len(sizes) || cells[0] != (Cell{PartCopy, sizes[0]}) || cells[len(sizes)] != (Cell{PartRegister, sizes[0]}) ||
		cells[len(cells)-1] != (Cell{PartTransport, sizes[len(sizes)-1]}) {
		t.Fatalf("cells of mode all over %v: %v", sizes, cells)
	}
	if c, _ := small(shmDir(t), ModeTransport).Cells(); len(c) != len(sizes) || c[0].Part != PartTransport {
		t.Errorf("transport cells: %v", c)
	}
	if _, err := (Options{Mode: "bogus"}).Cells(); err == nil {
		t.Error("a bad mode listed cells")
	}

	opt = small(shmDir(t), ModeTransport)
	last := sizes[len(sizes)-1]
	opt.Only = []Cell{{PartTransport, last}}
	out, err := Run(t.Context(), opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Results) != 4 {
		t.Fatalf("%d results, want the 4 transports of one cell", len(out.Results))
	}
	for _, r := range out.Results {
		if r.Params["size"] != sizeParam(last) {
			t.Errorf("%s ran outside the one cell of size %d", r.Key(), last)
		}
	}
	if got := Cell.Name(Cell{PartCopy, 4096}); got != "copy/size=4096" {
		t.Errorf("cell name %q", got)
	}
}

// Two threads' memcpy beats one thread's by design: the reference rows
// above one another warn of nothing; a transport above one-thread memcpy
// still does.
func TestTransportWarnsOnlyForTransports(t *testing.T) {
	pt := func(tr string, secs float64) *transportPoint {
		return &transportPoint{transport: tr, size: 1 << 20, count: 10, secs: []float64{secs, secs, secs}}
	}
	rs := transportResults([]*transportPoint{pt(TrMemcpy, 0.010), pt(TrMemcpy2, 0.005), pt(TrArena, 0.004)})
	warned := map[string]bool{}
	for _, w := range overWarnings(rs) {
		for _, tr := range []string{TrMemcpy2, TrArena} {
			if strings.Contains(w, "transport="+tr+":") {
				warned[tr] = true
			}
		}
	}
	if warned[TrMemcpy2] || !warned[TrArena] {
		t.Errorf("warnings %q: want the arena's only", overWarnings(rs))
	}
}

// The sink gets each size's four results as soon as that size is done, not
// at the end of the sweep: a killed run keeps its finished sizes.
func TestTransportSweepStreamsEachSize(t *testing.T) {
	opt := small(shmDir(t), ModeTransport)
	var sent []string // the size of each result, in the order the sink got them
	var started []string
	opt.Sink = func(r results.Result) { sent = append(sent, r.Params["size"]) }
	opt.Progress = func(step string) {
		// By the time a size's first transport starts, every earlier
		// size's results are in the sink.
		started = append(started, fmt.Sprintf("%s after %d sent", step, len(sent)))
	}
	if _, err := Run(t.Context(), opt); err != nil {
		t.Fatal(err)
	}
	sizes := opt.Sizes()
	if len(sent) != 4*len(sizes) {
		t.Fatalf("sink got %d results, want %d", len(sent), 4*len(sizes))
	}
	for i, size := range sizes {
		want := fmt.Sprintf("transport memcpy %s after %d sent", units.Size(size, ""), 4*i)
		if !slices.Contains(started, want) {
			t.Errorf("no progress step %q in %q", want, started)
		}
	}
}
