package moe

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/bench/ceilings"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/kernels/routing"
	"github.com/mstar-dev/mstar/reports"
	"github.com/mstar-dev/mstar/reports/results"
)

// fakeCandidates stand in for kernels: "auto" is the CPU's correct forward
// pass, timed slow; the others are fast and wrong in one way each.
type fakeCandidates struct {
	cpu   cpuCandidates
	calls *[]int // batch sizes Run was called for
}

var (
	wrongScale = moe.Config{Kernel: "skinny", NT: 2}                       // every output ×1.5: finite, plausible, wrong
	unwritten  = moe.Config{Kernel: "skinny", NT: 4}                       // the last token never written
	noCompile  = moe.Config{Kernel: "tiled", Tile: "m16", BM: 16, BN: 128} // fails to "compile"
	brokenOnes = []moe.Config{wrongScale, unwritten, noCompile}
)

func (f fakeCandidates) Prepare(c moe.Config) (string, error) {
	if c.String() == noCompile.String() {
		return "", errors.New("nvrtc: error: too many resources requested\nmore")
	}
	return "", nil
}

func (f fakeCandidates) Run(c moe.Config) (CandidateRun, error) {
	if f.calls != nil {
		*f.calls = append(*f.calls, f.cpu.r.M)
	}
	run, err := f.cpu.Run(moe.Config{})
	if err != nil {
		return nil, err
	}
	out := run.Output()
	us := 100.0
	switch c.String() {
	case wrongScale.String():
		for i := range out {
			out[i] *= 1.5
		}
		us = 1
	case unwritten.String():
		h := f.cpu.g.Layer().Shape.H
		for i := len(out) - h; i < len(out); i++ {
			out[i] = float32(nanF())
		}
		us = 1
	}
	return fixedRun{out: out, us: us}, nil
}

func nanF() float64 { z := 0.0; return z / z }

type fixedRun struct {
	out []float32
	us  float64
}

func (r fixedRun) Output() []float32 { return r.out }
func (r fixedRun) Free()             {}
func (r fixedRun) Time(samples int) ([]float64, error) {
	v := make([]float64, samples)
	for i := range v {
		v[i] = r.us + float64(i)*0.01
	}
	return v, nil
}

func tuneOpts(dir string, batches []int, cands []moe.Config, calls *[]int) MoETuneOptions {
	return MoETuneOptions{
		MoE: MoEOptions{Shape: moe.Shape{E: 8, K: 2, H: 32, I: 16}, Batches: batches, Samples: 2, TuneSamples: 3, Seed: 3, Ceilings: fakeCeilings()},
		Dir: dir,
		Runner: func(m int, l *moe.Layer, x []float32, r routing.Routing) (CandidateRunner, []moe.Config) {
			g, err := moe.NewRunner(gpu.NewCPU(), l, nil)
			if err != nil {
				panic(err) // the CPU runner has nothing to fail on
			}
			return fakeCandidates{cpu: cpuCandidates{ctx: context.Background(), g: g, x: x, r: r}, calls: calls}, cands
		},
	}
}

// A candidate that returns wrong numbers, one that leaves an element
// unwritten and one that does not compile are rejected with the reason,
// however fast; the correct one is chosen and written.
func TestTuneRejectsBrokenCandidate(t *testing.T) {
	dir := t.TempDir()
	rep, err := RunMoETune(t.Context(), gpu.NewCPU(), tuneOpts(dir, []int{5}, append(slices.Clone(brokenOnes), moe.Config{}), nil))
	if err != nil {
		t.Fatal(err)
	}
	outs := rep.Outcomes[5]
	if len(outs) != 4 {
		t.Fatalf("%d outcomes, want 4", len(outs))
	}
	for _, tt := range []struct {
		i      int
		reject string
	}{{0, "> 0.01 against the float64 reference"}, {1, "never written or not finite"}, {2, "compile: nvrtc: error: too many resources requested"}} {
		if o := outs[tt.i]; !strings.Contains(o.Reject, tt.reject) || o.Chosen || o.Latency != nil {
			t.Errorf("candidate %v: reject %q, chosen %v, latency %v; want rejected with %q and never timed", o.Config, o.Reject, o.Chosen, o.Latency, tt.reject)
		}
	}
	if !outs[3].Chosen || outs[3].Reject != "" {
		t.Errorf("the correct candidate: %+v", outs[3])
	}
	f, err := os.ReadFile(filepath.Join(dir, rep.Key.FileName()))
	if err != nil {
		t.Fatal(err)
	}
	tf, err := moe.ParseTunedFile(f, "x")
	if err != nil {
		t.Fatal(err)
	}
	b := tf.Batches["5"]
	if b.Config != "auto" || b.LatencyUS != 100.01 || len(b.Rejected) != 3 || tf.KernelVersion != moe.KernelVersion {
		t.Errorf("file batch 5: %+v (kernels %s)", b, tf.KernelVersion)
	}
	// Every candidate is a moe_tune result; the rejected ones say why.
	n := 0
	for _, r := range rep.Results {
		if r.Name == MoETuneResult && r.Params[MoEConfigParam] == wrongScale.String() {
			n++
			if lat := r.Metric(MoETuneLatency); lat.Measured() || !strings.Contains(lat.Unmeasured, "rejected: rel L2") {
				t.Errorf("wrong candidate's latency: %+v", lat)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d moe_tune results for the wrong candidate", n)
	}
}

// When every candidate is wrong, nothing is written for the batch and the
// tune says which batch failed.
func TestTuneNoCandidatePasses(t *testing.T) {
	dir := t.TempDir()
	rep, err := RunMoETune(t.Context(), gpu.NewCPU(), tuneOpts(dir, []int{2, 4}, brokenOnes[:2], nil))
	if !errors.Is(err, ErrNoCandidate) || !strings.Contains(err.Error(), "at M=2,4") {
		t.Fatalf("err %v, want ErrNoCandidate at M=2,4", err)
	}
	if rep == nil || len(rep.File.Batches) != 0 || len(rep.NoCandidate) != 2 {
		t.Fatalf("report %+v", rep)
	}
	if _, err := os.Stat(filepath.Join(dir, rep.Key.FileName())); !os.IsNotExist(err) {
		t.Errorf("a file was written: %v", err)
	}
}

// A tune interrupted after its first batch keeps that batch in the file; run
// again, it measures only the remaining batches. --force measures all.
func TestTuneResumes(t *testing.T) {
	dir := t.TempDir()
	var calls []int
	opt := tuneOpts(dir, []int{1, 3, 6}, []moe.Config{{}}, &calls)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	opt.MoE.Progress = func(s string) {
		if s == "saved M=1" {
			cancel()
		}
	}
	rep, err := RunMoETune(ctx, gpu.NewCPU(), opt)
	if !errors.Is(err, context.Canceled) || rep == nil {
		t.Fatalf("err %v, want the cancellation", err)
	}
	if !slices.Equal(rep.Tuned, []int{1}) || !slices.Equal(calls, []int{1}) {
		t.Fatalf("interrupted run tuned %v (runs at %v), want [1]", rep.Tuned, calls)
	}
	b, _ := os.ReadFile(filepath.Join(dir, rep.Key.FileName()))
	if tf, err := moe.ParseTunedFile(b, "x"); err != nil || !slices.Equal(tf.TunedBatchSizes(), []int{1}) {
		t.Fatalf("file after the interrupt: %v, %v", tf, err)
	}

	calls = nil
	opt.MoE.Progress = nil
	rep, err = RunMoETune(t.Context(), gpu.NewCPU(), opt)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Skipped, []int{1}) || !slices.Equal(rep.Tuned, []int{3, 6}) || !slices.Equal(calls, []int{3, 6}) {
		t.Errorf("resumed run: skipped %v, tuned %v, runs at %v; want skipped [1], tuned and run [3 6]", rep.Skipped, rep.Tuned, calls)
	}
	if got := rep.File.TunedBatchSizes(); !slices.Equal(got, []int{1, 3, 6}) {
		t.Errorf("file has %v", got)
	}
	// The comparison covers every batch, pairing the two sweeps by batch:
	// each round of each side has the same three latency results.
	if len(rep.StaticDocs) == 0 || len(rep.TunedDocs) != len(rep.StaticDocs) {
		t.Fatalf("comparison rounds: %d static, %d tuned", len(rep.StaticDocs), len(rep.TunedDocs))
	}
	for i := range rep.StaticDocs {
		s, tu := rep.StaticDocs[i], rep.TunedDocs[i]
		if len(s.Results) != 3 || len(tu.Results) != 3 {
			t.Fatalf("round %d: %d static and %d tuned results, want 3 each", i, len(s.Results), len(tu.Results))
		}
		for j := range s.Results {
			if s.Results[j].Key() != tu.Results[j].Key() || s.Results[j].Metric(MoELatency) == nil {
				t.Errorf("round %d: %s does not pair with %s by batch, or has no latency", i, s.Results[j].Key(), tu.Results[j].Key())
			}
		}
	}

	if slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.HasPrefix(w, "--rounds 1") }) {
		t.Errorf("two rounds warned of one: %q", rep.Warnings)
	}

	calls = nil
	opt.Force = true
	opt.Rounds = 1
	if rep, err = RunMoETune(t.Context(), gpu.NewCPU(), opt); err != nil || len(rep.Skipped) != 0 || !slices.Equal(calls, []int{1, 3, 6}) {
		t.Errorf("--force: skipped %v, runs at %v, err %v", rep.Skipped, calls, err)
	}
	if !slices.ContainsFunc(rep.Warnings, func(w string) bool {
		return strings.HasPrefix(w, "--rounds 1: the comparison sees no noise between sweeps")
	}) {
		t.Errorf("--rounds 1: warnings %q, want the one on noise between sweeps", rep.Warnings)
	}
}

// A file of another moe.cu in the folder is not resumed from: the tune
// says so and starts a new one.
func TestTuneIgnoresStaleFile(t *testing.T) {
	dir := t.TempDir()
	opt := tuneOpts(dir, []int{2}, []moe.Config{{}}, nil)
	key := moe.KeyFor(opt.MoE.Shape, gpu.NewCPU().Info().Name)
	old := moe.NewTunedFile(key, fixedNow)
	old.KernelVersion = "moe.cu-0123456789ab"
	old.Set(2, moe.TunedBatch{Config: "auto", Date: fixedNow})
	if _, err := moe.WriteTunedFile(dir, old); err != nil {
		t.Fatal(err)
	}
	rep, err := RunMoETune(t.Context(), gpu.NewCPU(), opt)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Tuned, []int{2}) || rep.File.KernelVersion != moe.KernelVersion {
		t.Errorf("tuned %v, file kernels %s", rep.Tuned, rep.File.KernelVersion)
	}
	if !slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, "tuned for kernels moe.cu-0123456789ab") }) {
		t.Errorf("warnings %q do not name the stale file", rep.Warnings)
	}
}

// A file whose batches name the kernels they were tuned on: a batch on
// kernels this build still has (the base source: no wg candidate) is kept,
// one on kernels that changed is tuned again, and the file then names this
// build's kernels.
func TestTuneKeepsBatchesOfUnchangedKernels(t *testing.T) {
	dir := t.TempDir()
	opt := tuneOpts(dir, []int{2, 3}, []moe.Config{{}}, nil)
	key := moe.KeyFor(opt.MoE.Shape, gpu.NewCPU().Info().Name)
	old := moe.NewTunedFile(key, fixedNow)
	old.KernelVersion = "moe.cu-0123456789ab" // the wg section differed
	old.Set(2, moe.TunedBatch{Config: "auto", Date: fixedNow, Kernels: moe.BaseKernelVersion})
	old.Set(3, moe.TunedBatch{Config: "auto", Date: fixedNow, Kernels: "moe.cu-0123456789ab"})
	if _, err := moe.WriteTunedFile(dir, old); err != nil {
		t.Fatal(err)
	}
	rep, err := RunMoETune(t.Context(), gpu.NewCPU(), opt)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Skipped, []int{2}) || !slices.Equal(rep.Tuned, []int{3}) {
		t.Errorf("skipped %v, tuned %v; want 2 kept and 3 re-tuned", rep.Skipped, rep.Tuned)
	}
	if rep.File.KernelVersion != moe.KernelVersion || rep.File.Batches["3"].Kernels != moe.BaseKernelVersion ||
		rep.File.Batches["2"].Kernels != moe.BaseKernelVersion {
		t.Errorf("file kernels %s, batches %+v", rep.File.KernelVersion, rep.File.Batches)
	}
	if !slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, "ignored M=3 of tuned config file") }) {
		t.Errorf("warnings %q do not name the stale batch", rep.Warnings)
	}
}

// bench moe on an H200 takes the shipped file for a reference shape, and
// its results name the configuration and the file.
func TestBenchPicksShippedFile(t *testing.T) {
	t.Setenv(moe.EnvConfigDir, t.TempDir())           // an empty user folder
	shape := moe.Shape{E: 128, K: 8, H: 2048, I: 768} // qwen3-30b-a3b
	name := moe.KeyFor(shape, "NVIDIA H200").FileName()
	configs, warns, err := ResolveMoEConfigs(shape, gpu.Info{Name: "NVIDIA H200"}, DefaultGPUBatches, MoEOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "from the tuned embedded configs/"+name) {
		t.Errorf("warnings %q", warns)
	}
	shipped, _, _, _ := moe.TunedLookup{Embedded: moe.ShippedConfigs()}.Find(moe.KeyFor(shape, "NVIDIA H200"))
	for _, m := range DefaultGPUBatches {
		bc := configs[m]
		if bc.Source != "embedded:"+name || bc.Note != "" || bc.Config.String() != mustConfig(t, shipped.Batches[itoa(m)].Config).String() {
			t.Errorf("M=%d: %+v", m, bc)
		}
		res := withConfigSource(reports.Result{Name: MoEResult, Params: reports.Params{"batch": itoa(m)}}, bc)
		if res.Params[MoEConfigSourceParam] != "embedded:"+name || res.Params[MoEConfigParam] != bc.Config.String() {
			t.Errorf("M=%d result params %v", m, res.Params)
		}
	}

	// A batch the file lacks: the nearest tuned one, said so.
	configs, _, _ = ResolveMoEConfigs(shape, gpu.Info{Name: "NVIDIA H200"}, []int{48, 100000}, MoEOptions{})
	if bc := configs[48]; bc.Source != "embedded:"+name || bc.Note != "nearest tuned batch 64 (M=48 not tuned)" {
		t.Errorf("M=48: %+v", bc)
	}
	if bc := configs[100000]; bc.Source != "static" || !strings.Contains(bc.Note, "no tuned batch within 2×") || bc.Config.String() != moe.ChooseConfig(shape, 100000).String() {
		t.Errorf("M=100000: %+v", bc)
	}
	res := withConfigSource(reports.Result{Params: reports.Params{}}, configs[48])
	if len(res.Warnings) != 1 || res.Warnings[0] != "config: nearest tuned batch 64 (M=48 not tuned)" {
		t.Errorf("result warnings %q", res.Warnings)
	}

	// The user's folder comes first.
	user := os.Getenv(moe.EnvConfigDir)
	f := moe.NewTunedFile(moe.KeyFor(shape, "NVIDIA H200"), fixedNow)
	f.Set(64, moe.TunedBatch{Config: "tc:64x128k64s4b2", Date: fixedNow})
	if _, err := moe.WriteTunedFile(user, f); err != nil {
		t.Fatal(err)
	}
	configs, _, _ = ResolveMoEConfigs(shape, gpu.Info{Name: "NVIDIA H200"}, []int{64}, MoEOptions{})
	if bc := configs[64]; bc.Source != "cache:"+name || bc.Config.String() != mustConfig(t, "tc:64x128k64s4b2").String() {
		t.Errorf("user file: %+v", bc)
	}
	// --config overrides; another device gets the static table, saying so.
	configs, _, _ = ResolveMoEConfigs(shape, gpu.Info{Name: "NVIDIA H200"}, []int{64}, MoEOptions{Config: mustConfig(t, "skinny:nt=2")})
	if bc := configs[64]; bc.Source != "--config" || bc.Config.String() != "skinny:nt=2" {
		t.Errorf("--config: %+v", bc)
	}
	configs, warns, _ = ResolveMoEConfigs(shape, gpu.Info{Name: "NVIDIA A100"}, []int{64}, MoEOptions{})
	if bc := configs[64]; bc.Source != "static" || len(warns) != 1 || !strings.Contains(warns[0], "no tuned config file") ||
		!strings.HasSuffix(warns[0], "'mstar tune moe' makes one") {
		t.Errorf("other device: %+v, %q", bc, warns)
	}
	// Without a file, the tune command it names is the run's: its routing
	// and EP setting.
	for _, tt := range []struct {
		opt  MoEOptions
		want string
	}{
		{MoEOptions{Routing: "zipf:1.2", EP: 4}, "'mstar tune moe --routing zipf:1.2 --ep 4' makes one"},
		{MoEOptions{TraceName: "/runs/rec.jsonl", Trace: &routing.Routing{}}, "'mstar tune moe --routing-file rec.jsonl' makes one"},
	} {
		if _, warns, _ = ResolveMoEConfigs(shape, gpu.Info{Name: "NVIDIA A100"}, []int{64}, tt.opt); len(warns) != 1 || !strings.HasSuffix(warns[0], tt.want) {
			t.Errorf("no file under %s ep %d: warnings %q, want one ending %q", tt.opt.routingName(), tt.opt.EP, warns, tt.want)
		}
	}
	// A Hopper without a tuned file: the static table for its architecture
	// (the wg kernel from 128 slots per touched expert: M=2048 here; 16-row
	// tc tiles up to 8: M=64 here).
	configs, _, _ = ResolveMoEConfigs(shape, gpu.Info{Name: "NVIDIA H100 80GB HBM3", CCMajor: 9}, []int{64, 2048}, MoEOptions{})
	if bc := configs[2048]; bc.Source != "static" || bc.Config.Kernel != "wg" {
		t.Errorf("Hopper M=2048 without a file: %+v", bc)
	}
	if bc := configs[64]; bc.Config != moe.ChooseConfigOn(moe.Hopper, shape, 64) || bc.Config.BM != 16 {
		t.Errorf("Hopper M=64 without a file: %+v", bc)
	}
}

// The shipped files were tuned under uniform routing: a run under another
// says which batches, and how to tune them for it; a uniform run says
// nothing of routing.
func TestBenchWarnsOfTunedRouting(t *testing.T) {
	t.Setenv(moe.EnvConfigDir, t.TempDir())
	shape := moe.Shape{E: 128, K: 8, H: 2048, I: 768} // qwen3-30b-a3b
	h200 := gpu.Info{Name: "NVIDIA H200"}
	_, warns, err := ResolveMoEConfigs(shape, h200, []int{16, 256, 300}, MoEOptions{Routing: "zipf:1.2"})
	if err != nil {
		t.Fatal(err)
	}
	// M=300 takes M=256's pick, the nearest: it is named too.
	want := "M=16,256,300 take picks tuned under uniform routing, run under zipf:1.2: 'mstar tune moe --routing zipf:1.2 --batch 16,256,300'"
	if len(warns) != 2 || !strings.Contains(warns[1], want) {
		t.Errorf("zipf run: warnings %q, want one with %q", warns, want)
	}
	for _, opt := range []MoEOptions{{}, {Routing: "uniform"}} {
		if _, warns, _ := ResolveMoEConfigs(shape, h200, []int{16, 256}, opt); len(warns) != 1 {
			t.Errorf("routing %q: warnings %q, want only the file's", opt.Routing, warns)
		}
	}
}

func mustConfig(t *testing.T, s string) moe.Config {
	t.Helper()
	c, err := moe.ParseConfig(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var fixedNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// gemmCandidates time their GEMMs alone: a split configuration takes
// gemm1's time from its first half and gemm2's from its second.
type gemmCandidates struct {
	fakeCandidates
	gemm1, gemm2 map[string]float64 // µs by plain configuration
	wrongSplit   bool               // the split's output is corrupted
}

type gemmRun struct {
	fixedRun
	g1, g2 float64
}

func (r gemmRun) TimeGEMMs(samples int) ([]float64, []float64, error) {
	a, b := make([]float64, samples), make([]float64, samples)
	for i := range a {
		a[i], b[i] = r.g1, r.g2
	}
	return a, b, nil
}

func (f gemmCandidates) Run(c moe.Config) (CandidateRun, error) {
	run, err := f.fakeCandidates.Run(moe.Config{})
	if err != nil {
		return nil, err
	}
	out := run.Output()
	g1, g2 := f.gemm1[c.Gemm(1).String()], f.gemm2[c.Gemm(2).String()]
	if c.IsSplit() && f.wrongSplit {
		for i := range out {
			out[i] *= 1.5
		}
	}
	return gemmRun{fixedRun: fixedRun{out: out, us: g1 + g2 + 5}, g1: g1, g2: g2}, nil
}

// The fastest gemm1 and gemm2 come from different candidates: their split
// is tried, checked like any candidate, and picked when it is fastest; a
// wrong split is rejected.
func TestTuneTriesSplit(t *testing.T) {
	a, b := moe.Config{Kernel: "skinny", NT: 1}, moe.Config{Kernel: "skinny", NT: 2}
	times := func(wrong bool) gemmCandidates {
		return gemmCandidates{
			gemm1:      map[string]float64{a.String(): 10, b.String(): 40},
			gemm2:      map[string]float64{a.String(): 50, b.String(): 15},
			wrongSplit: wrong,
		}
	}
	for _, wrong := range []bool{false, true} {
		opt := tuneOpts(t.TempDir(), []int{5}, []moe.Config{a, b}, nil)
		inner := opt.Runner
		opt.Runner = func(m int, l *moe.Layer, x []float32, r routing.Routing) (CandidateRunner, []moe.Config) {
			run, cands := inner(m, l, x, r)
			g := times(wrong)
			g.fakeCandidates = run.(fakeCandidates)
			return g, cands
		}
		rep, err := RunMoETune(t.Context(), gpu.NewCPU(), opt)
		if err != nil {
			t.Fatal(err)
		}
		outs := rep.Outcomes[5]
		if len(outs) != 3 {
			t.Fatalf("wrong=%v: %d outcomes, want the two and their split", wrong, len(outs))
		}
		split := outs[2]
		if want := moe.Split(a, b).String(); split.Config.String() != want {
			t.Fatalf("wrong=%v: third candidate %v, want %s", wrong, split.Config, want)
		}
		if wrong {
			if split.Reject == "" || split.Chosen || !outs[1].Chosen {
				t.Errorf("a wrong split: reject %q, chosen %v; b chosen %v", split.Reject, split.Chosen, outs[1].Chosen)
			}
			continue
		}
		if !split.Chosen || split.Median() != 30.01 {
			t.Errorf("split: chosen %v, median %v; want chosen at 30.01 µs (10 + 15 + 5, the third of 3 samples)", split.Chosen, split.Median())
		}
	}
}

// Rounds after a tuned first round run its choices: tunedConfigs reads them
// back from the round's batch results, and only tuned ones.
func TestTunedConfigsFromRound(t *testing.T) {
	split := moe.Split(moe.Config{Kernel: "skinny", NT: 1}, moe.Config{Kernel: "skinny", NT: 2})
	rs := []results.Result{
		{Name: MoEResult, Params: map[string]string{"batch": "16", MoEConfigParam: split.String(), MoEConfigSourceParam: "--tune"}},
		{Name: MoEResult, Params: map[string]string{"batch": "32", MoEConfigParam: "skinny:nt=1", MoEConfigSourceParam: "static"}},
		{Name: MoETuneResult, Params: map[string]string{"batch": "64", MoEConfigParam: "skinny:nt=4", MoEConfigSourceParam: "--tune"}},
	}
	got := tunedConfigs(rs)
	if len(got) != 1 || got[16].Config.String() != split.String() || got[16].Source != "--tune" {
		t.Errorf("tunedConfigs = %+v, want batch 16's split from --tune only", got)
	}
}

// Two skinny candidates that differ only in their warps per GEMM combine
// into one configuration, not a split, and it is tried unless it was
// already a candidate.
func TestBestSplitCombinesSkinnyWarps(t *testing.T) {
	fast := []float64{10}
	slow := []float64{40}
	a := moe.Config{Kernel: "skinny", NT: 1}
	b := moe.Config{Kernel: "skinny", NT: 1, W1: 16, W2: 16}
	outs := []TuneOutcome{
		{Config: a, Latency: fast, Gemm1: fast, Gemm2: slow},
		{Config: b, Latency: fast, Gemm1: slow, Gemm2: fast},
	}
	cs := bestSplits(outs)
	want := moe.Config{Kernel: "skinny", NT: 1, W2: 16}
	if len(cs) != 1 || cs[0].IsSplit() || cs[0].String() != want.String() {
		t.Fatalf("bestSplits = %v; want %v alone, not split", cs, want)
	}
	outs = append(outs, TuneOutcome{Config: want, Latency: fast, Gemm1: fast, Gemm2: fast})
	if cs := bestSplits(outs); len(cs) != 0 {
		t.Errorf("bestSplits = %v again, though %v was timed", cs, want)
	}
}

// A gemm2 on other token blocks than gemm1's costs an alignment launch
// that neither GEMM's time shows, so besides the fastest pair the tuner
// tries the fastest gemm2 on the fastest gemm1's blocks (and the other way
// round): gv's gemm1 (blocks of 8) with skinny's gemm2, not only with the
// 16-row tc gemm2 that is faster alone (an H100, deepseek-v3 tp8 M=1).
func TestBestSplitsShareTheAlignment(t *testing.T) {
	ms := func(v float64) []float64 { return []float64{v} }
	gv := moe.Config{Kernel: "skinny", NT: 1, GV: 1, SA: 1}
	sk := moe.Config{Kernel: "skinny", NT: 1, W1: 16, SA: 1}
	tc16 := moe.Config{Kernel: "tc", BM: 16, BN: 128, BK: 128, WM: 1, WN: 4, Stages: 3, GM: 8, MinBlocks: 2, OV: 2}
	tc32 := moe.Config{Kernel: "tc", BM: 32, BN: 256, BK: 128, WM: 1, WN: 8, Stages: 3, GM: 8, MinBlocks: 1, OV: 2}
	outs := []TuneOutcome{
		{Config: gv, Latency: ms(50), Gemm1: ms(22), Gemm2: ms(25)},
		{Config: sk, Latency: ms(41), Gemm1: ms(26), Gemm2: ms(12)},
		{Config: tc16, Latency: ms(45), Gemm1: ms(28), Gemm2: ms(11)},
		{Config: tc32, Latency: ms(60), Gemm1: ms(27), Gemm2: ms(30)},
	}
	var got []string
	for _, c := range bestSplits(outs) {
		got = append(got, c.String())
	}
	want := []string{moe.Split(gv, tc16).String(), moe.Split(gv, sk).String()}
	if !slices.Equal(got, want) {
		t.Errorf("bestSplits:\n got %q\nwant %q", got, want)
	}
	// The fastest gemm2's blocks (16) have no other gemm1 but its own
	// candidate's: no third split. A 16-row gemm1 faster than tc16's own
	// gives one.
	outs = append(outs, TuneOutcome{Config: moe.Config{Kernel: "skinny", NT: 2}, Latency: ms(70), Gemm1: ms(24), Gemm2: ms(40)})
	if cs := bestSplits(outs); len(cs) != 3 || cs[2].String() != moe.Split(moe.Config{Kernel: "skinny", NT: 2}, tc16).String() {
		t.Errorf("with a 16-row skinny gemm1: %v", cs)
	}
}

// plCandidates can launch programmatically: gemm2 alone so is fastest, both
// GEMMs so slowest (the early blocks can cost more than they save).
type plCandidates struct{ fakeCandidates }

func (plCandidates) ProgrammaticLaunch() bool { return true }

func (p plCandidates) Run(c moe.Config) (CandidateRun, error) {
	run, err := p.fakeCandidates.Run(c)
	if err != nil {
		return nil, err
	}
	r := run.(fixedRun)
	switch pl1, pl2 := c.Gemm(1).PL == 1, c.Gemm(2).PL == 1; {
	case pl1 && pl2:
		r.us = 120
	case pl2:
		r.us = 80
	}
	return r, nil
}

// Where the kernels can be launched programmatically the tuner tries the
// fastest configuration's three other launch modes, each checked and timed,
// and keeps the fastest; where they cannot, it tries none.
func TestTuneTriesLaunchModes(t *testing.T) {
	a := moe.Config{Kernel: "skinny", NT: 1}
	for _, can := range []bool{true, false} {
		opt := tuneOpts(t.TempDir(), []int{5}, []moe.Config{a}, nil)
		inner := opt.Runner
		opt.Runner = func(m int, l *moe.Layer, x []float32, r routing.Routing) (CandidateRunner, []moe.Config) {
			run, cands := inner(m, l, x, r)
			if can {
				return plCandidates{run.(fakeCandidates)}, cands
			}
			return run, cands
		}
		rep, err := RunMoETune(t.Context(), gpu.NewCPU(), opt)
		if err != nil {
			t.Fatal(err)
		}
		outs := rep.Outcomes[5]
		if !can {
			if len(outs) != 1 {
				t.Errorf("no programmatic launch: %d outcomes, want the one candidate", len(outs))
			}
			continue
		}
		var names []string
		chosen := ""
		for _, o := range outs {
			names = append(names, o.Config.String())
			if o.Reject != "" {
				t.Errorf("%v rejected: %s", o.Config, o.Reject)
			}
			if o.Chosen {
				chosen = o.Config.String()
			}
		}
		want := []string{a.String(), a.WithProgrammatic(true, false).String(), a.WithProgrammatic(false, true).String(), a.WithProgrammatic(true, true).String()}
		if !slices.Equal(names, want) {
			t.Errorf("outcomes %q, want %q", names, want)
		}
		if chosen != want[2] {
			t.Errorf("chose %q, want %q (80 µs against 100 and 120)", chosen, want[2])
		}
	}
}

// A resumed tune carries an earlier document's candidates only for the
// batches it skips, and only from the same kernels and parameters.
func TestEarlierCandidates(t *testing.T) {
	mo := MoEOptions{Model: "m", Shape: moe.Shape{E: 8, K: 2, H: 32, I: 16}, Seed: 3}
	local := mo.Shape
	cand := func(m int, cfg string) results.Result {
		p := MoEParams(mo, local, m, "mstar")
		p[MoEConfigParam] = cfg
		return results.Result{Name: MoETuneResult, Params: p}
	}
	other := cand(2, "auto")
	other.Params["seed"] = "9"
	doc := &results.Document{Suite: "tune moe", Env: results.Env{EnvKernelsVersion: moe.KernelVersion},
		Results: []results.Result{cand(1, "auto"), cand(1, "skinny:nt=2"), cand(2, "auto"), other, cand(4, "auto"),
			{Name: MoELatency, Params: MoEParams(mo, local, 1, "mstar")}}}
	got, from := earlierCandidates(doc, mo, local, []int{1, 2})
	if len(got) != 3 || !slices.Equal(from, []int{1, 2}) {
		t.Errorf("carried %d records of batches %v, want 3 of [1 2]", len(got), from)
	}
	doc.Env[EnvKernelsVersion] = "moe.cu-other"
	if got, _ := earlierCandidates(doc, mo, local, []int{1, 2}); len(got) != 0 {
		t.Errorf("carried %d records from another moe.cu", len(got))
	}
}

// The tune says where its pick's time as a candidate and the tuned sweep's
// median part by more than the gap, and only there.
func TestSweepGaps(t *testing.T) {
	f := moe.NewTunedFile(moe.TunedKey{E: 8, N: 32, K: 16, TopK: 2, DType: "bf16", Device: "x"}, time.Now())
	f.Set(4, moe.TunedBatch{Config: "tc:a", LatencyUS: 242.3, Samples: []float64{242.2, 242.3, 242.5}})
	f.Set(8, moe.TunedBatch{Config: "tc:b", LatencyUS: 442.4, Samples: []float64{442.2, 442.6}})
	f.Set(16, moe.TunedBatch{Config: "tc:c", LatencyUS: 100}) // not in the sweep
	// 10% apart by the medians, but the samples overlap: noise, not a level.
	f.Set(32, moe.TunedBatch{Config: "tc:d", LatencyUS: 100, Samples: []float64{80, 100, 130}})
	res := func(m int, us ...float64) results.Result {
		return results.Result{Name: MoEResult, Params: results.Params{"batch": strconv.Itoa(m)},
			Metrics: []results.Metric{{Name: MoELatency, Unit: "µs", Samples: us}}}
	}
	docs := []*results.Document{
		{Results: []results.Result{res(4, 260.6, 260.4), res(8, 445.0), res(32, 90, 125, 110)}},
		{Results: []results.Result{res(4, 260.8), res(8, 446.0, 444.0)}},
	}
	got := SweepGaps(f, moe.Uniform, docs, TuneSweepGap)
	if len(got) != 1 || !strings.HasPrefix(got[0], "M=4: tc:a timed 242.3 µs as a candidate and 260.6 µs in the tuned sweep (+7.6%)") {
		t.Fatalf("gaps %q, want one for M=4 at +7.6%%", got)
	}
	if got := SweepGaps(f, moe.Uniform, docs, 0.10); len(got) != 0 {
		t.Errorf("a 10%% gap flags %q", got)
	}
	if got := SweepGaps(nil, moe.Uniform, docs, TuneSweepGap); got != nil {
		t.Errorf("no file: %q", got)
	}
}

// timedCandidates are correct candidates (the CPU forward pass) that the
// tuner's process times at us[config].
type timedCandidates struct {
	cpu cpuCandidates
	us  map[string]float64
}

func (f timedCandidates) Prepare(moe.Config) (string, error) { return "", nil }
func (f timedCandidates) Run(c moe.Config) (CandidateRun, error) {
	run, err := f.cpu.Run(moe.Config{})
	if err != nil {
		return nil, err
	}
	return fixedRun{out: run.Output(), us: f.us[c.String()]}, nil
}

// fakeFresh times a configuration "in a new process" at us[config], or
// fails for those in fail, and records the order of its calls.
type fakeFresh struct {
	us    map[string]float64
	fail  map[string]bool
	calls []string
}

func (f *fakeFresh) TimeFresh(_ context.Context, m int, c moe.Config, ceil *ceilings.Ceilings) (float64, error) {
	if ceil == nil {
		return 0, errors.New("no ceilings given")
	}
	f.calls = append(f.calls, c.String())
	if f.fail[c.String()] {
		return 0, errors.New("bench moe: exit 1\nmore")
	}
	return f.us[c.String()] + float64(len(f.calls))*0.001, nil
}

// --finalists: the candidates within 5% of the tuner's fastest are timed
// again in fresh processes, alternated round by round, and the fastest
// there is picked and written, with each finalist's times; one outside the
// gap is not run again, and a finalist that fails there cannot be picked.
func TestTuneFinalistsInFreshProcesses(t *testing.T) {
	a := moe.Config{Kernel: "skinny", NT: 1}
	b := moe.Config{Kernel: "skinny", NT: 1, W1: 16, W2: 16}
	c := moe.Config{Kernel: "skinny", NT: 1, W1: 8, W2: 8}
	inProcess := map[string]float64{a.String(): 100, b.String(): 103, c.String(): 120}
	opts := func(dir string, fresh *fakeFresh) MoETuneOptions {
		o := tuneOpts(dir, []int{5}, []moe.Config{a, b, c}, nil)
		o.Runner = func(m int, l *moe.Layer, x []float32, r routing.Routing) (CandidateRunner, []moe.Config) {
			g, err := moe.NewRunner(gpu.NewCPU(), l, nil)
			if err != nil {
				panic(err)
			}
			return timedCandidates{cpu: cpuCandidates{ctx: context.Background(), g: g, x: x, r: r}, us: inProcess}, []moe.Config{a, b, c}
		}
		o.Finalists, o.Fresh = 3, fresh
		return o
	}

	fresh := &fakeFresh{us: map[string]float64{a.String(): 110, b.String(): 105, c.String(): 90}}
	rep, err := RunMoETune(t.Context(), gpu.NewCPU(), opts(t.TempDir(), fresh))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{a.String(), b.String(), b.String(), a.String()}; !slices.Equal(fresh.calls, want) {
		t.Errorf("fresh runs %q, want %q (the two finalists, the order turned in round 2; %v is 20%% off)", fresh.calls, want, c)
	}
	bt := rep.File.Batches["5"]
	if bt.Config != b.String() || bt.LatencyUS != round3(results.Median([]float64{103, 103.01, 103.02})) || !(bt.FreshUS > 105 && bt.FreshUS < 105.01) {
		t.Errorf("file: %s at %v µs in the tuner, %v fresh; want %v, 103.01 and 105.00x", bt.Config, bt.LatencyUS, bt.FreshUS, b)
	}
	if len(bt.Finalists) != 2 || !strings.HasPrefix(bt.Finalists[0], a.String()+": 110.00") || !strings.Contains(bt.Finalists[1], "in the tuner 103.01") {
		t.Errorf("file's finalists %q", bt.Finalists)
	}
	outs := rep.Outcomes[5]
	if outs[0].Chosen || !outs[1].Chosen || len(outs[2].Fresh) != 0 {
		t.Errorf("chosen %v %v %v, fresh times of the third %v: want the second chosen, the third never run", outs[0].Chosen, outs[1].Chosen, outs[2].Chosen, outs[2].Fresh)
	}
	var chosenNote, freshMetric bool
	for _, r := range rep.Results {
		if r.Name == MoETuneResult && r.Params[MoEConfigParam] == b.String() {
			chosenNote = slices.Contains(r.Warnings, "chosen: the fastest finalist in fresh processes")
			freshMetric = r.Metric(MoETuneFresh) != nil && len(r.Metric(MoETuneFresh).Samples) == 2
		}
	}
	if !chosenNote || !freshMetric {
		t.Errorf("the chosen candidate's result: chosen note %v, two fresh samples %v", chosenNote, freshMetric)
	}

	// The fresh-fastest finalist fails there: the one timed in every round wins.
	fresh = &fakeFresh{us: map[string]float64{a.String(): 110, b.String(): 105}, fail: map[string]bool{b.String(): true}}
	rep, err = RunMoETune(t.Context(), gpu.NewCPU(), opts(t.TempDir(), fresh))
	if err != nil {
		t.Fatal(err)
	}
	if bt := rep.File.Batches["5"]; bt.Config != a.String() || !strings.Contains(strings.Join(bt.Finalists, "\n"), b.String()+": not timed (bench moe: exit 1)") {
		t.Errorf("with %v failing fresh: picked %s, finalists %q", b, bt.Config, bt.Finalists)
	}
	if want := []string{a.String(), b.String(), a.String()}; !slices.Equal(fresh.calls, want) {
		t.Errorf("fresh runs %q, want %q (a failed finalist is not run again)", fresh.calls, want)
	}
	if !slices.ContainsFunc(rep.Warnings, func(w string) bool {
		return strings.Contains(w, "M=5: finalist "+b.String()+": not timed in a fresh process")
	}) {
		t.Errorf("no warning names the failed finalist: %q", rep.Warnings)
	}
}

func TestFinalistsOf(t *testing.T) {
	outs := []TuneOutcome{
		{Config: moe.Config{Kernel: "skinny", NT: 1}, Latency: []float64{104}, RelL2: 0.003},
		{Config: moe.Config{Kernel: "skinny", NT: 2}, Latency: []float64{1}, Reject: "wrong"},
		{Config: moe.Config{Kernel: "skinny", NT: 4}, Latency: []float64{100}, RelL2: 0.003},
		{Config: moe.Config{Kernel: "skinny", NT: 1, W1: 4}, Latency: []float64{106}, RelL2: 0.003},
		{Config: moe.Config{Kernel: "skinny", NT: 1, W1: 8}, Latency: []float64{102}, RelL2: 0.003},
	}
	for _, tt := range []struct {
		n    int
		want []int
	}{{3, []int{2, 4, 0}}, {8, []int{2, 4, 0}}, {1, []int{2}}, {0, nil}} {
		if got := finalistsOf(outs, tt.n, 0.05); !slices.Equal(got, tt.want) {
			t.Errorf("finalistsOf(n=%d) = %v, want %v (fastest first, within 5%%, never a rejected one)", tt.n, got, tt.want)
		}
	}
}

// saCandidates can fuse the alignment into a tc gemm1 (moe.SelfAligning on
// the test's shape): the self-aligning configuration runs 10 µs faster, or
// (wrong) writes wrong numbers.
type saCandidates struct {
	fakeCandidates
	shape moe.Shape
	m     int
	wrong bool
}

func (s saCandidates) SelfAligning(c moe.Config) (moe.Config, bool) {
	return moe.SelfAligning(c, s.shape, s.m)
}

func (s saCandidates) Run(c moe.Config) (CandidateRun, error) {
	run, err := s.fakeCandidates.Run(c)
	if err != nil || c.Gemm(1).SA == 0 {
		return run, err
	}
	return adjusted(run, -10, s.wrong), nil
}

// adjusted is run (a fixedRun) dus µs slower, and with wrong numbers
// (doubled) where wrong.
func adjusted(run CandidateRun, dus float64, wrong bool) CandidateRun {
	r := run.(fixedRun)
	r.us += dus
	if wrong {
		out := make([]float32, len(r.out))
		for i, v := range r.out {
			out[i] = 2 * v
		}
		r.out = out
	}
	return r
}

// Where gemm1 can fuse the alignment, the tuner tries the fastest candidate
// so, checks it like any other and keeps it when it is faster; a wrong one
// is rejected and the plain configuration stays; past 64 slots it is not
// tried.
func TestTuneTriesSelfAligning(t *testing.T) {
	tc16 := moe.Config{Kernel: "tc", BM: 16, BN: 128, BK: 64, WM: 1, WN: 4, Stages: 4, GM: 8, MinBlocks: 2, OV: 2}
	for _, tt := range []struct {
		name  string
		m     int
		wrong bool
		want  int // outcomes
	}{{"fused", 5, false, 2}, {"wrong", 5, true, 2}, {"too many slots", 40, false, 1}} {
		opt := tuneOpts(t.TempDir(), []int{tt.m}, []moe.Config{tc16}, nil)
		inner := opt.Runner
		opt.Runner = func(m int, l *moe.Layer, x []float32, r routing.Routing) (CandidateRunner, []moe.Config) {
			run, cands := inner(m, l, x, r)
			return saCandidates{fakeCandidates: run.(fakeCandidates), shape: l.Shape, m: m, wrong: tt.wrong}, cands
		}
		rep, err := RunMoETune(t.Context(), gpu.NewCPU(), opt)
		if err != nil {
			t.Fatal(err)
		}
		outs := rep.Outcomes[tt.m]
		if len(outs) != tt.want {
			t.Fatalf("%s: %d outcomes, want %d", tt.name, len(outs), tt.want)
		}
		if tt.want == 1 {
			continue
		}
		sa := outs[1]
		want := tc16
		want.SA = 1
		if sa.Config.String() != want.String() {
			t.Fatalf("%s: tried %v, want %v", tt.name, sa.Config, want)
		}
		if tt.wrong {
			if sa.Reject == "" || sa.Chosen || !outs[0].Chosen {
				t.Errorf("a wrong self-aligning gemm1: reject %q, chosen %v; plain chosen %v", sa.Reject, sa.Chosen, outs[0].Chosen)
			}
			continue
		}
		if sa.Reject != "" || !sa.Chosen {
			t.Errorf("self-aligning: reject %q, chosen %v; want chosen (90 µs against 100)", sa.Reject, sa.Chosen)
		}
	}
}

// trafficCandidates has the wg GEMMs' traffic twins (moe.TrafficVariants
// on the test's shape): gemm1 with the L2 window runs 5 µs faster, gemm2
// in mc=2 clusters 8 µs faster, gemm1 in clusters 3 µs slower, or (wrong)
// writes wrong numbers.
type trafficCandidates struct {
	fakeCandidates
	shape moe.Shape
	m     int
	wrong bool
}

func (s trafficCandidates) TrafficVariants(c moe.Config) []moe.Config {
	return moe.TrafficVariants(c, s.shape, s.m)
}

func (s trafficCandidates) Run(c moe.Config) (CandidateRun, error) {
	run, err := s.fakeCandidates.Run(c)
	if err != nil {
		return nil, err
	}
	dus := 0.0
	if c.Gemm(1).L2 == 4 {
		dus -= 5
	}
	if c.Gemm(2).MC == 2 {
		dus -= 8
	}
	if c.Gemm(1).MC == 2 {
		dus += 3
	}
	return adjusted(run, dus, s.wrong && c.Gemm(1).MC == 2), nil
}

// After the fastest candidate, the tuner times its wg GEMMs' traffic twins
// (window and mc=2; gemm1's, gemm2's, both), checks each like any other
// candidate, then the new fastest's twins not yet timed, and keeps the
// fastest: here gemm1 windowed and gemm2 clustered, which neither round
// alone holds. A wrong twin is rejected.
func TestTuneTriesTrafficVariants(t *testing.T) {
	// 64-row (nc=1): the tuner offers mc=2 on both of its GEMMs
	// (moe.TrafficVariants leaves out a cooperative gemm1's).
	coop, err := moe.ParseConfig("wg:nc=1,bn=256,stages=4,gm=8,tma=1")
	if err != nil {
		t.Fatal(err)
	}
	shape := moe.Shape{E: 8, K: 2, H: 512, I: 256} // two n-tiles in each GEMM
	g := coop.Gemm(1)
	g1l2, g2mc := g, withMC(g, 2)
	g1l2.L2 = 4
	round1 := moe.TrafficVariants(coop, shape, 6)
	var round2 []moe.Config // the twins of round 1's fastest (gemm2 clustered) not yet timed
	for _, v := range moe.TrafficVariants(moe.Split(coop, g2mc), shape, 6) {
		if !slices.ContainsFunc(round1, func(c moe.Config) bool { return c.String() == v.String() }) {
			round2 = append(round2, v)
		}
	}
	want := append(append([]moe.Config{coop}, round1...), round2...)
	for _, wrong := range []bool{false, true} {
		opt := tuneOpts(t.TempDir(), []int{6}, []moe.Config{coop}, nil)
		opt.MoE.Shape = shape
		inner := opt.Runner
		opt.Runner = func(m int, l *moe.Layer, x []float32, r routing.Routing) (CandidateRunner, []moe.Config) {
			run, cands := inner(m, l, x, r)
			return trafficCandidates{fakeCandidates: run.(fakeCandidates), shape: l.Shape, m: m, wrong: wrong}, cands
		}
		rep, err := RunMoETune(t.Context(), gpu.NewCPU(), opt)
		if err != nil {
			t.Fatal(err)
		}
		outs := rep.Outcomes[6]
		if len(round1) != 6 || len(round2) != 3 || len(outs) != len(want) {
			t.Fatalf("wrong=%v: %d outcomes, want %d (the candidate, 6 twins, then 3 of the fastest's)", wrong, len(outs), len(want))
		}
		chosen := ""
		for i, o := range outs {
			if o.Config.String() != want[i].String() {
				t.Errorf("wrong=%v: outcome %d %v, want %v", wrong, i, o.Config, want[i])
			}
			if wrong && o.Config.Gemm(1).MC == 2 && o.Reject == "" {
				t.Errorf("wrong=%v: %v passed the check", wrong, o.Config)
			}
			if o.Chosen {
				chosen = o.Config.String()
			}
		}
		// gemm1 windowed, gemm2 clustered: 100 − 5 − 8 = 87 µs.
		if w := moe.Split(g1l2, g2mc).String(); chosen != w {
			t.Errorf("wrong=%v: chose %q, want %s", wrong, chosen, w)
		}
	}
}

func withMC(c moe.Config, mc int) moe.Config { c.MC = mc; return c }

// A batch in the file that never met this build's candidates for it (its
// kernels version is not what they compile from: a kernel family added
// since) is tuned again without --force; the others are skipped.
func TestTuneRetunesBatchesBeforeNewCandidates(t *testing.T) {
	dir := t.TempDir()
	sk := moe.Config{Kernel: "skinny", NT: 1}
	gv := moe.Config{Kernel: "skinny", NT: 1, GV: 1}
	old := func(int) []moe.Config { return []moe.Config{sk} }
	run := func(cands func(int) []moe.Config) *MoETuneReport {
		t.Helper()
		opt := tuneOpts(dir, []int{2, 5}, nil, nil)
		inner := opt.Runner
		opt.Runner = func(m int, l *moe.Layer, x []float32, r routing.Routing) (CandidateRunner, []moe.Config) {
			run, _ := inner(m, l, x, r)
			return run, cands(m)
		}
		opt.Candidates = cands
		rep, err := RunMoETune(t.Context(), gpu.NewCPU(), opt)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := run(old); !slices.Equal(rep.Tuned, []int{2, 5}) {
		t.Fatalf("first run tuned %v", rep.Tuned)
	}
	if rep := run(old); len(rep.Tuned) != 0 || !slices.Equal(rep.Skipped, []int{2, 5}) {
		t.Fatalf("same candidates: tuned %v, skipped %v; want none, both", rep.Tuned, rep.Skipped)
	}
	withGV := func(m int) []moe.Config {
		if m == 2 {
			return []moe.Config{sk, gv}
		}
		return old(m)
	}
	rep := run(withGV)
	if !slices.Equal(rep.Tuned, []int{2}) || !slices.Equal(rep.Skipped, []int{5}) {
		t.Fatalf("gv added at M=2: tuned %v, skipped %v; want [2], [5]", rep.Tuned, rep.Skipped)
	}
	if got := rep.File.Batches["2"].Kernels; got != moe.GVKernelVersion {
		t.Errorf("M=2 re-tuned for kernels %s, want %s", got, moe.GVKernelVersion)
	}
	if !slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, "re-tuning M=2: tuned before") }) {
		t.Errorf("warnings %q do not say why M=2 was tuned again", rep.Warnings)
	}
}

// Tuning under a skewed routing what the file has tuned under uniform does
// not skip the batches (the advice bench gives) nor replace the uniform
// picks: both stay, each routing's run takes its own, and the skewed tune
// resumes like any other.
func TestTuneKeepsUniformPicksBesideSkewed(t *testing.T) {
	dir := t.TempDir()
	var calls []int
	uni := tuneOpts(dir, []int{2, 5}, []moe.Config{{}}, &calls)
	if _, err := RunMoETune(t.Context(), gpu.NewCPU(), uni); err != nil {
		t.Fatal(err)
	}
	calls = nil
	zipf := tuneOpts(dir, []int{5}, []moe.Config{{}}, &calls)
	zipf.MoE.Routing = "Zipf:1.20"
	rep, err := RunMoETune(t.Context(), gpu.NewCPU(), zipf)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Skipped) != 0 || !slices.Equal(rep.Tuned, []int{5}) || !slices.Contains(calls, 5) {
		t.Fatalf("zipf tune: skipped %v, tuned %v; want M=5 tuned", rep.Skipped, rep.Tuned)
	}
	b, err := os.ReadFile(rep.Path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := moe.ParseTunedFile(b, rep.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.TunedBatchSizes(), []int{2, 5}) || !slices.Equal(f.TunedBatchSizesUnder("zipf:1.2"), []int{5}) {
		t.Errorf("file: uniform %v, zipf:1.2 %v; want [2 5] and [5]", f.TunedBatchSizes(), f.TunedBatchSizesUnder("zipf:1.2"))
	}
	if z, _ := f.Get(5, "zipf:1.2"); z.Routing != "zipf:1.2" {
		t.Errorf("zipf batch records routing %q", z.Routing)
	}
	calls = nil
	if rep, err = RunMoETune(t.Context(), gpu.NewCPU(), zipf); err != nil || !slices.Equal(rep.Skipped, []int{5}) {
		t.Errorf("zipf tune again: skipped %v, err %v; want M=5 skipped", rep.Skipped, err)
	}
	// --force re-tunes the batches asked for, under the run's routing; the
	// rest of the file, every routing's, stays.
	uni.MoE.Batches, uni.Force = []int{2}, true
	if rep, err = RunMoETune(t.Context(), gpu.NewCPU(), uni); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.File.TunedBatchSizes(), []int{2, 5}) || !slices.Equal(rep.File.TunedBatchSizesUnder("zipf:1.2"), []int{5}) {
		t.Errorf("after --force of uniform M=2: uniform %v, zipf:1.2 %v; want [2 5] and [5]", rep.File.TunedBatchSizes(), rep.File.TunedBatchSizesUnder("zipf:1.2"))
	}
	if !slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.HasPrefix(w, "--force: re-tuning M=2 under uniform routing in ") }) {
		t.Errorf("--force warnings %q", rep.Warnings)
	}
}

// bench takes a batch's pick under its own routing when the file has one,
// names it in config_source and gives no routing warning for it; the
// batches the routing lacks take the uniform pick, with the warning.
func TestBenchPicksRoutingsOwnBatch(t *testing.T) {
	dir := t.TempDir()
	shape := moe.Shape{E: 128, K: 8, H: 2048, I: 768}
	h200 := gpu.Info{Name: "NVIDIA H200"}
	f := moe.NewTunedFile(moe.KeyFor(shape, h200.Name), fixedNow)
	uniPick, zipfPick := "tc:bm=16,bn=128,bk=128,wm=1,wn=4,stages=3,gm=8,minb=2,ov=2", "tc:bm=32,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1,ov=2"
	f.Set(16, moe.TunedBatch{Config: uniPick, Date: fixedNow, Routing: "uniform"})
	f.Set(256, moe.TunedBatch{Config: uniPick, Date: fixedNow, Routing: "uniform"})
	f.Set(256, moe.TunedBatch{Config: zipfPick, Date: fixedNow, Routing: "zipf:1.2"})
	if _, err := moe.WriteTunedFile(dir, f); err != nil {
		t.Fatal(err)
	}
	lookup := moe.TunedLookup{Dirs: []string{dir}}
	opt := MoEOptions{Shape: shape, Batches: []int{16, 256}, Routing: "zipf:1.20", ConfigLookup: &lookup}
	if _, err := PrepareMoE(&opt); err != nil {
		t.Fatal(err)
	}
	got, warns, err := ResolveMoEConfigs(shape, h200, []int{16, 256}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if got[256].Config.String() != mustConfig(t, zipfPick).String() || !strings.HasSuffix(got[256].Source, " [zipf:1.2]") || got[256].Note != "" {
		t.Errorf("zipf M=256: %+v, want %s from the file's zipf:1.2 batch", got[256], zipfPick)
	}
	if got[16].Config.String() != mustConfig(t, uniPick).String() || strings.Contains(got[16].Source, "[") {
		t.Errorf("zipf M=16: %+v, want the uniform pick", got[16])
	}
	if w := strings.Join(warns, "\n"); !strings.Contains(w, "M=16 take picks tuned under uniform routing, run under zipf:1.2") || strings.Contains(w, "M=16,256") {
		t.Errorf("warnings %q, want the routing warning for M=16 alone", warns)
	}
	// A routing file's picks are its own (trace:NAME), with the same fallback.
	tracePick := "tc:bm=64,bn=128,bk=64,wm=2,wn=4,stages=4,gm=8,minb=1,ov=2"
	f.Set(256, moe.TunedBatch{Config: tracePick, Date: fixedNow, Routing: "trace:rec.jsonl"})
	if _, err := moe.WriteTunedFile(dir, f); err != nil {
		t.Fatal(err)
	}
	rec := moe.ZipfRouting(64, shape.E, shape.K, 1.2, 1)
	tr := opt
	tr.Routing, tr.Trace, tr.TraceName = "", &rec, "/runs/rec.jsonl"
	got, warns, err = ResolveMoEConfigs(shape, h200, []int{16, 256}, tr)
	if err != nil {
		t.Fatal(err)
	}
	if got[256].Config.String() != mustConfig(t, tracePick).String() || !strings.HasSuffix(got[256].Source, " [trace:rec.jsonl]") {
		t.Errorf("trace M=256: %+v, want %s from the file's trace:rec.jsonl batch", got[256], tracePick)
	}
	if w := strings.Join(warns, "\n"); !strings.Contains(w, "'mstar tune moe --routing-file rec.jsonl --batch 16' tunes them") {
		t.Errorf("warnings %q, want tune's --routing-file for M=16", warns)
	}
	opt.Routing = ""
	got, warns, _ = ResolveMoEConfigs(shape, h200, []int{256}, opt)
	if got[256].Config.String() != mustConfig(t, uniPick).String() || len(warns) != 1 {
		t.Errorf("uniform M=256: %+v, warnings %q; want the uniform pick and the file's line alone", got[256], warns)
	}
}

// A file in the folder that is not a tuned file (a hand edit gone wrong) is
// moved aside, not overwritten, and the tune says where; a second one goes
// beside the first.
func TestTuneKeepsUnreadableFile(t *testing.T) {
	dir := t.TempDir()
	opt := tuneOpts(dir, []int{2}, []moe.Config{{}}, nil)
	path := filepath.Join(dir, moe.KeyFor(opt.MoE.Shape, gpu.NewCPU().Info().Name).FileName())
	for i, want := range []string{path + ".bad", path + ".bad.2"} {
		broken := `{"format": "mstar.moe-configs", "batches": {"2": {"config": "tc:bm=16" ` + strconv.Itoa(i)
		if err := os.WriteFile(path, []byte(broken), 0o644); err != nil {
			t.Fatal(err)
		}
		rep, err := RunMoETune(t.Context(), gpu.NewCPU(), opt)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(want); err != nil || string(got) != broken {
			t.Errorf("run %d: %s holds %q (%v), want the broken file", i+1, want, got, err)
		}
		if !slices.ContainsFunc(rep.Warnings, func(w string) bool {
			return strings.Contains(w, "moved "+path+", which is not a tuned file for") && strings.Contains(w, " to "+want+":")
		}) {
			t.Errorf("run %d: warnings %q do not say where the file went", i+1, rep.Warnings)
		}
		if b, _ := os.ReadFile(path); !strings.Contains(string(b), `"2": {`) {
			t.Errorf("run %d: no new tuned file:\n%s", i+1, b)
		}
	}
	// A tuned file for another shape (a hand edit, a copy) is kept too.
	other := moe.NewTunedFile(moe.TunedKey{E: 16, N: 16, K: 32, TopK: 2, DType: "bf16", Device: gpu.NewCPU().Info().Name}, fixedNow)
	other.Set(9, moe.TunedBatch{Config: "auto", Date: fixedNow})
	b, _ := other.Marshal()
	os.WriteFile(path, b, 0o644)
	if _, err := RunMoETune(t.Context(), gpu.NewCPU(), opt); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path + ".bad.3"); string(got) != string(b) {
		t.Errorf("a file of another key was not kept as %s.bad.3", path)
	}
	// A folder where the file goes is refused before any tuning.
	os.Remove(path)
	os.Mkdir(path, 0o755)
	if _, err := RunMoETune(t.Context(), gpu.NewCPU(), opt); err == nil || !strings.Contains(err.Error(), "is a directory, where the tuned file goes") {
		t.Errorf("a folder in the file's place: err %v", err)
	}
}

// Under --ep N a tune keeps its picks under "uniform@epN": a model without
// EP whose local shape is the same tunes its own batch beside them, and
// bench takes each run's own pick, or the static table (at the rank's
// load) where the file has none under its EP setting.
func TestTuneKeepsEPPicksApart(t *testing.T) {
	dir := t.TempDir()
	var calls []int
	ep := tuneOpts(dir, []int{4}, []moe.Config{{}}, &calls)
	ep.MoE.EP = 2 // E=8 over 2 ranks: the local shape E=4
	rep, err := RunMoETune(t.Context(), gpu.NewCPU(), ep)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Key.E != 4 || !slices.Equal(rep.File.TunedBatchSizesUnder("uniform@ep2"), []int{4}) || len(rep.File.TunedBatchSizes()) != 0 {
		t.Fatalf("--ep 2 tune: key %v, uniform@ep2 %v, uniform %v; want E=4, [4], []", rep.Key, rep.File.TunedBatchSizesUnder("uniform@ep2"), rep.File.TunedBatchSizes())
	}
	if b, _ := rep.File.Get(4, "uniform@ep2"); b.Routing != "uniform@ep2" {
		t.Errorf("EP batch records routing %q", b.Routing)
	}
	calls = nil
	plain := tuneOpts(dir, []int{4}, []moe.Config{{}}, &calls)
	plain.MoE.Shape.E = 4 // the same local shape, no EP
	if rep, err = RunMoETune(t.Context(), gpu.NewCPU(), plain); err != nil {
		t.Fatal(err)
	}
	if len(rep.Skipped) != 0 || !slices.Contains(calls, 4) {
		t.Errorf("tune without EP of the same local shape: skipped %v; want M=4 tuned, not taken from the EP batch", rep.Skipped)
	}
	if !slices.Equal(rep.File.TunedBatchSizes(), []int{4}) || !slices.Equal(rep.File.TunedBatchSizesUnder("uniform@ep2"), []int{4}) {
		t.Errorf("file: uniform %v, uniform@ep2 %v; want [4] and [4]", rep.File.TunedBatchSizes(), rep.File.TunedBatchSizesUnder("uniform@ep2"))
	}
}

// bench under --ep N takes the file's picks tuned under that EP setting,
// never those of a model without EP whose local shape is the same: without
// its own it runs the static table at the rank's load, saying why; its
// skewed-routing warning names --ep.
func TestBenchPicksEPsOwnBatch(t *testing.T) {
	dir := t.TempDir()
	global := moe.Shape{E: 512, K: 8, H: 2048, I: 768}
	local := moe.Shape{E: 128, K: 8, H: 2048, I: 768}
	h200 := gpu.Info{Name: "NVIDIA H200"}
	f := moe.NewTunedFile(moe.KeyFor(local, h200.Name), fixedNow)
	uniPick, epPick := "tc:bm=16,bn=128,bk=128,wm=1,wn=4,stages=3,gm=8,minb=2,ov=2", "tc:bm=32,bn=256,bk=128,wm=1,wn=8,stages=3,gm=8,minb=1,ov=2"
	f.Set(256, moe.TunedBatch{Config: uniPick, Date: fixedNow})
	f.Set(64, moe.TunedBatch{Config: uniPick, Date: fixedNow})
	f.Set(256, moe.TunedBatch{Config: epPick, Date: fixedNow, Routing: moe.TunedRouting("", 4)})
	if _, err := moe.WriteTunedFile(dir, f); err != nil {
		t.Fatal(err)
	}
	lookup := moe.TunedLookup{Dirs: []string{dir}}
	opt := MoEOptions{Shape: global, EP: 4, TP: 1, Batches: []int{64, 256}, ConfigLookup: &lookup}
	got, warns, err := ResolveMoEConfigs(local, h200, []int{64, 256}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if got[256].Config.String() != mustConfig(t, epPick).String() || !strings.HasSuffix(got[256].Source, " [uniform@ep4]") {
		t.Errorf("--ep 4 M=256: %+v, want %s from the file's uniform@ep4 batch", got[256], epPick)
	}
	static := moe.ChooseConfigOnRank(tableGPU(h200), local, 64, 4)
	if got[64].Config.String() != static.String() || got[64].Source != "static" || !strings.Contains(got[64].Note, "not tuned under uniform@ep4") {
		t.Errorf("--ep 4 M=64: %+v, want the static table's %v, with a note, not the file's batch without EP", got[64], static)
	}
	opt.Routing = "zipf:1.2"
	if _, err := PrepareMoE(&opt); err != nil {
		t.Fatal(err)
	}
	_, warns, _ = ResolveMoEConfigs(local, h200, []int{256}, opt)
	if w := strings.Join(warns, "\n"); !strings.Contains(w, "'mstar tune moe --routing zipf:1.2 --ep 4 --batch 256' tunes them") {
		t.Errorf("zipf under --ep 4: warnings %q, want tune's command with --ep 4", warns)
	}
}
