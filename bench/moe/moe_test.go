package moe

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/bench/ceilings"
	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/kernels/routing"
	"github.com/mstar-dev/mstar/reports/results"
)

// fakeCeilings are round numbers so the percentages can be checked by hand.
func fakeCeilings() *ceilings.Ceilings {
	return &ceilings.Ceilings{
		Device: "cpu", Backend: gpu.CPU,
		D2D:  ceilings.Ceiling{Value: 10, Unit: ceilings.UnitGBps, Samples: []float64{10}},
		GEMM: ceilings.Ceiling{Value: 0.01, Unit: ceilings.UnitTFLOPs, Samples: []float64{0.01}},
		H2D:  ceilings.Ceiling{Unmeasured: "not needed"}, D2H: ceilings.Ceiling{Unmeasured: "not needed"},
	}
}

func TestRunMoECPU(t *testing.T) {
	opt := MoEOptions{
		Model: "tiny", Shape: moe.Shape{E: 8, K: 2, H: 64, I: 40}, EP: 2,
		Batches: []int{1, 7, 70}, Samples: 3, Seed: 5, Ceilings: fakeCeilings(),
		DumpDir: t.TempDir(),
	}
	rep, err := RunMoE(t.Context(), gpu.NewCPU(), opt)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Local != (moe.Shape{E: 4, K: 2, H: 64, I: 40}) {
		t.Errorf("local shape %v, want E4 k2 H64 I40 under --ep 2", rep.Local)
	}
	if len(rep.Results) != 3 || rep.Failed() {
		t.Fatalf("%d results, failed=%v; want 3 passing", len(rep.Results), rep.Failed())
	}
	for i, r := range rep.Results {
		m := opt.Batches[i]
		wantParams := results.Params{"model": "tiny", "experts": "4", "topk": "2", "hidden": "64", "inter": "40",
			"tp": "1", "ep": "2", "batch": itoa(m), "routing": "uniform", "seed": "5", "impl": "mstar"}
		if r.Key() != (results.Result{Name: MoEResult, Params: wantParams}).Key() {
			t.Errorf("result key %s, want params %v", r.Key(), wantParams)
		}
		lat := r.Metric(MoELatency)
		if lat == nil || len(lat.Samples) != 3 {
			t.Fatalf("M=%d: latency %+v, want 3 samples", m, lat)
		}
		// Each rate sample is work / that sample's latency, and the
		// percentages are of the fake ceilings.
		// The gate's reason names the slots computed here (the run table reads it).
		var nSlots, nTouched int
		if _, err := fmt.Sscanf(r.Gates[0].Reason[strings.Index(r.Gates[0].Reason, "); ")+3:], "%d slots on %d experts", &nSlots, &nTouched); err != nil || nSlots <= 0 || nTouched <= 0 {
			t.Fatalf("M=%d: gate reason %q does not say the slots and experts (%v)", m, r.Gates[0].Reason, err)
		}
		slots := rep.Local.Flops(nSlots)
		tf := r.Metric(MoEThroughput).Samples[0]
		if want := slots / (lat.Samples[0] * 1e-6) / 1e12; math.Abs(tf-want) > 1e-9*want {
			t.Errorf("M=%d: throughput %g, want %g", m, tf, want)
		}
		if p := r.Metric(MoEPctCompute).Samples[0]; math.Abs(p-100*tf/0.01) > 1e-6*p {
			t.Errorf("M=%d: %% of compute %g, want %g", m, p, 100*tf/0.01)
		}
		bw := r.Metric(MoEBandwidth).Samples[0]
		floor := r.Metric(MoEPctFloor).Samples[0]
		wantFloor := 100 * math.Max(bw/10, tf/0.01)
		if math.Abs(floor-wantFloor) > 1e-6*wantFloor {
			t.Errorf("M=%d: %% of floor %g, want max(%% bw, %% compute) = %g", m, floor, wantFloor)
		}
		if e := r.Metric(MoERelL2).Samples[0]; !(e < MoEMaxRelL2) || !r.Passed() {
			t.Errorf("M=%d: rel L2 %g, gates %+v", m, e, r.Gates)
		}
		if _, err := os.Stat(filepath.Join(opt.DumpDir, "out-M"+itoa(m)+".bf16")); err != nil {
			t.Errorf("dump: %v", err)
		}
	}
	// Smaller batches use the first tokens of the largest batch's routing.
	if rep.Routing.M != 70 || rep.Routing.K != 2 {
		t.Errorf("routing M=%d K=%d, want 70×2", rep.Routing.M, rep.Routing.K)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestRunMoEGateFails(t *testing.T) {
	testCorruptOutput = func(out []float32) { out[len(out)-1] = float32(math.NaN()) }
	defer func() { testCorruptOutput = nil }()
	rep, err := RunMoE(t.Context(), gpu.NewCPU(), MoEOptions{Shape: moe.Shape{E: 4, K: 2, H: 16, I: 8}, Batches: []int{3}, Samples: 1, Ceilings: fakeCeilings()})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Failed() || rep.Results[0].Passed() {
		t.Fatalf("a NaN in the output passed the gate: %+v", rep.Results[0].Gates)
	}
	if m := rep.Results[0].Metric(MoERelL2); m.Measured() || !strings.Contains(m.Unmeasured, "not finite") {
		t.Errorf("rel_l2 metric %+v, want unmeasured: not finite", m)
	}
}

func TestRunMoEBadInput(t *testing.T) {
	trace := routing.Routing{IDs: []int32{0, 9}, Weights: []float32{.5, .5}, M: 1, K: 2}
	for _, tt := range []struct {
		name, want string
		opt        MoEOptions
	}{
		{"k > E", "top-k 5 is larger", MoEOptions{Shape: moe.Shape{E: 4, K: 5, H: 8, I: 8}}},
		{"zero inter", "inter must be positive", MoEOptions{Shape: moe.Shape{E: 4, K: 2, H: 8, I: 0}}},
		{"ep does not divide", "--ep 3 does not divide", MoEOptions{Shape: moe.Shape{E: 4, K: 2, H: 8, I: 8}, EP: 3}},
		{"bad batch", "--batch 0", MoEOptions{Shape: moe.Shape{E: 4, K: 2, H: 8, I: 8}, Batches: []int{0}}},
		{"bad routing", "want uniform or zipf", MoEOptions{Shape: moe.Shape{E: 4, K: 2, H: 8, I: 8}, Routing: "hot"}},
		{"trace out of range", "expert id 9 out of range", MoEOptions{Shape: moe.Shape{E: 8, K: 2, H: 8, I: 8}, Trace: &trace, TraceName: "t.json"}},
		{"does not fit", "needs", MoEOptions{Shape: moe.Shape{E: 1 << 14, K: 2, H: 1 << 13, I: 1 << 13}, Batches: []int{1}, Ceilings: fakeCeilings()}},
		{"negative weight copies", "--weight-copies -1", MoEOptions{Shape: moe.Shape{E: 4, K: 2, H: 8, I: 8}, WeightCopies: -1}},
		{"too many weight copies", "to 8", MoEOptions{Shape: moe.Shape{E: 4, K: 2, H: 8, I: 8}, WeightCopies: 9}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := RunMoE(t.Context(), gpu.NewCPU(), tt.opt)
			if err == nil || !badinput.Is(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v (input error: %v), want an input error containing %q", err, badinput.Is(err), tt.want)
			}
		})
	}
}

func TestPickFastest(t *testing.T) {
	cfg := func(s string) moe.Config {
		c, err := moe.ParseConfig(s)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tests := []struct {
		name string
		outs []TuneOutcome
		want int
	}{
		{"fastest correct wins", []TuneOutcome{
			{Config: cfg("tiled:m64"), Latency: []float64{10, 11, 12}, RelL2: 3e-3},
			{Config: cfg("tc:64x128k64s4b2"), Latency: []float64{7, 8, 9}, RelL2: 3e-3},
			{Config: cfg("tc:128x128k64s4"), Latency: []float64{8, 9, 10}, RelL2: 3e-3},
		}, 1},
		{"a wrong configuration is never picked, however fast", []TuneOutcome{
			{Config: cfg("tiled:m64"), Latency: []float64{10}, RelL2: 3e-3},
			{Config: cfg("tc:64x128k64s4b2"), Latency: []float64{1}, RelL2: 0.5, Reject: "rel L2 0.5 > 0.01"},
		}, 0},
		{"rel L2 over the limit without a reject note is still not picked", []TuneOutcome{
			{Config: cfg("tc:64x128k64s4b2"), Latency: []float64{1}, RelL2: 0.5},
			{Config: cfg("tiled:m64"), Latency: []float64{10}, RelL2: 3e-3},
		}, 1},
		{"NaN error is not picked", []TuneOutcome{
			{Config: cfg("tc:64x128k64s4b2"), Latency: []float64{1}, RelL2: math.NaN()},
		}, -1},
		{"nothing passes", []TuneOutcome{
			{Config: cfg("tc:64x128k64s4b2"), RelL2: math.NaN(), Reject: "compile: error"},
		}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := pickFastest(tt.outs)
			if got != tt.want {
				t.Fatalf("pickFastest = %d, want %d", got, tt.want)
			}
			for i, o := range tt.outs {
				if o.Chosen != (i == tt.want) {
					t.Errorf("outcome %d chosen = %v, want %v", i, o.Chosen, i == tt.want)
				}
			}
		})
	}
}

func TestTuneResults(t *testing.T) {
	local := moe.Shape{E: 128, K: 8, H: 2048, I: 768}
	opt := MoEOptions{Model: "qwen3-30b-a3b", TP: 1, EP: 1, Seed: 1, Ceilings: fakeCeilings()}
	good, _ := moe.ParseConfig("tc:128x256k64s3")
	slow, _ := moe.ParseConfig("tiled:w128x128")
	bad, _ := moe.ParseConfig("tc:128x128k64s4")
	outs := []TuneOutcome{
		{Config: slow, Latency: []float64{640, 642, 650}, RelL2: 2.9e-3, Compile: "cubin, cache hit true, 0.01 s"},
		{Config: good, Latency: []float64{400, 401, 405}, RelL2: 2.9e-3},
		{Config: bad, RelL2: 0.7, Reject: "rel L2 0.7 > 0.01 against the float64 reference"},
	}
	if pickFastest(outs) != 1 {
		t.Fatal("want the tc candidate chosen")
	}
	r := moe.UniformRouting(1024, 128, 8, 1)
	res := moeResult(opt, local, 1024, r, []float64{401, 402}, 2.9e-3, good.String(), 64)
	res = withTuning(moe.ChooseConfigFor(moe.GPU{}, local, 1024), res, outs)
	if res.Params[MoEConfigParam] != good.String() {
		t.Errorf("config param %q, want %q", res.Params[MoEConfigParam], good.String())
	}
	var tuneWarn string
	for _, w := range res.Warnings {
		if strings.HasPrefix(w, "tuned over") {
			tuneWarn = w
		}
	}
	if !strings.Contains(tuneWarn, "chose "+good.String()) ||
		!strings.Contains(tuneWarn, bad.String()+" rejected (rel L2 0.7") || !strings.Contains(tuneWarn, slow.String()+" 642.0 µs") {
		t.Errorf("warnings %q", res.Warnings)
	}
	for i, o := range outs {
		tr := tuneResult(opt, local, 1024, o)
		if tr.Name != MoETuneResult || tr.Params[MoEConfigParam] != o.Config.String() || tr.Params["batch"] != "1024" {
			t.Errorf("candidate %d: result %s %v", i, tr.Name, tr.Params)
		}
		lat := tr.Metric(MoETuneLatency)
		if o.Reject != "" {
			if lat.Measured() || !strings.Contains(lat.Unmeasured, "rejected: rel L2 0.7") {
				t.Errorf("rejected candidate's latency %+v, want unmeasured with the reason", lat)
			}
			if rel := tr.Metric(MoERelL2); rel.Samples[0] != 0.7 {
				t.Errorf("rejected candidate's rel_l2 %+v, want 0.7", rel)
			}
		} else if len(lat.Samples) != 3 {
			t.Errorf("candidate %d: %d latency samples, want 3", i, len(lat.Samples))
		}
		if got := slices.Contains(tr.Warnings, "chosen: the fastest candidate that passed"); got != o.Chosen {
			t.Errorf("candidate %d: chosen warning %v, want %v", i, got, o.Chosen)
		}
		if len(tr.Gates) != 0 {
			t.Errorf("candidate %d has gates %+v: a rejected candidate is not a failed run", i, tr.Gates)
		}
	}
}

func TestRunMoETuneOptions(t *testing.T) {
	c, _ := moe.ParseConfig("tc:128x128k64s4")
	_, err := RunMoE(t.Context(), gpu.NewCPU(), MoEOptions{Shape: moe.Shape{E: 4, K: 2, H: 16, I: 8}, Tune: true, Config: c, Batches: []int{1}})
	if !badinput.Is(err) || !strings.Contains(err.Error(), "excludes --config") {
		t.Errorf("--tune with --config: %v, want an input error", err)
	}
	// On the CPU there is nothing to tune: a warning, and the sweep runs.
	rep, err := RunMoE(t.Context(), gpu.NewCPU(), MoEOptions{Shape: moe.Shape{E: 4, K: 2, H: 16, I: 8}, Tune: true, Batches: []int{3}, Samples: 1, Ceilings: fakeCeilings()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 || !slices.ContainsFunc(rep.Warnings, func(w string) bool { return strings.Contains(w, "nothing to tune") }) {
		t.Errorf("%d results, warnings %q; want 1 result and a nothing-to-tune warning", len(rep.Results), rep.Warnings)
	}
	if _, ok := rep.Results[0].Params[MoEConfigParam]; ok {
		t.Errorf("untuned result has a config param: %v", rep.Results[0].Params)
	}
}

func TestRunMoEGateSeesUncheckedTokens(t *testing.T) {
	// 200 tokens: 64 are checked against the reference; a NaN in token 1
	// (not among them) still fails the gate.
	if slices.Contains(checkTokens(200), 1) {
		t.Fatal("token 1 is checked; pick another")
	}
	h := 16
	testCorruptOutput = func(out []float32) { out[1*h+3] = float32(math.Inf(1)) }
	defer func() { testCorruptOutput = nil }()
	rep, err := RunMoE(t.Context(), gpu.NewCPU(), MoEOptions{Shape: moe.Shape{E: 4, K: 2, H: h, I: 8}, Batches: []int{200}, Samples: 1, Ceilings: fakeCeilings()})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Failed() || !strings.Contains(rep.Results[0].Gates[0].Reason, "(token 1) is +Inf") {
		t.Errorf("gate %+v, want a failure naming token 1", rep.Results[0].Gates)
	}
	if firstNonFinite([]float32{1, 2, float32(math.NaN())}) != 2 || firstNonFinite([]float32{1, -3e38}) != -1 {
		t.Error("firstNonFinite")
	}
}

// An interrupt between batches keeps the batches done and leaves the rest
// out: the report comes back with ctx's error.
func TestRunMoEInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	opt := MoEOptions{Shape: moe.Shape{E: 4, K: 2, H: 16, I: 8}, Batches: []int{1, 4, 16}, Samples: 2, Ceilings: fakeCeilings(),
		Progress: func(step string) {
			if step == "M=4" {
				cancel() // as if SIGINT came while batch 4 starts
			}
		}}
	rep, err := RunMoE(ctx, gpu.NewCPU(), opt)
	if !errors.Is(err, context.Canceled) || rep == nil {
		t.Fatalf("err %v, report %v; want the partial report and context.Canceled", err, rep)
	}
	if rep.Batches != 1 || len(rep.Results) != 1 || rep.Results[0].Params["batch"] != "1" {
		t.Fatalf("%d batches, results %v; want batch 1 only", rep.Batches, rep.Results)
	}
	if rep.Ceilings == nil {
		t.Error("no ceilings in the partial report")
	}
}

// Interrupted while measuring its own ceilings, the report carries them
// (unmeasured, saying why) and no batch.
func TestRunMoEInterruptedInCeilings(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	rep, err := RunMoE(ctx, gpu.NewCPU(), MoEOptions{Shape: moe.Shape{E: 4, K: 2, H: 16, I: 8}, Batches: []int{1}, Samples: 1})
	if !errors.Is(err, context.Canceled) || rep == nil || rep.Ceilings == nil {
		t.Fatalf("err %v, report %+v; want a report with ceilings and context.Canceled", err, rep)
	}
	if rep.Batches != 0 || rep.Ceilings.D2D.Measured() || !strings.Contains(rep.Ceilings.GEMM.Unmeasured, "interrupted") {
		t.Errorf("batches %d, d2d %+v, gemm %+v; want none and unmeasured ceilings saying why", rep.Batches, rep.Ceilings.D2D, rep.Ceilings.GEMM)
	}
}

// Weight streaming is bounded by the read ceiling, not by the copy's: the
// floor and %bw use it when measured, and a percentage above 105 warns
// with the ceiling's name and figures.
func TestMoEFloorUsesReadCeiling(t *testing.T) {
	local := moe.Shape{E: 8, K: 2, H: 64, I: 40}
	opt := MoEOptions{Model: "tiny", Shape: local, TP: 1, EP: 1, Ceilings: fakeCeilings()}
	r := moe.UniformRouting(4, 8, 2, 1)
	bytes := local.Bytes(4, r.Touched(8), r.Slots())
	us := bytes / 12e9 * 1e6 // 12 GB/s: 120% of the 10 GB/s copy ceiling
	lat := []float64{us, us, us}

	median := func(res results.Result, name string) float64 {
		m := res.Metric(name)
		if m == nil || !m.Measured() {
			return math.NaN()
		}
		return results.Median(m.Samples)
	}
	res := moeResult(opt, local, 4, r, lat, 1e-3, "cfg", 4)
	if pct := median(res, MoEPctBW); math.Abs(pct-120) > 0.01 {
		t.Fatalf("without a read ceiling, %%bw %.2f, want 120 of the d2d ceiling", pct)
	}
	// The floor is the compute term here (the fake GEMM ceiling is tiny):
	// one warning names both.
	if len(res.Warnings) != 2 || !strings.Contains(res.Warnings[0], "M=4: %bw 120.0% of the d2d ceiling") || strings.Contains(res.Warnings[0], "busy host") ||
		!strings.Contains(res.Warnings[1], "M=4: %compute and %floor 240.2% of the gemm ceiling") {
		t.Errorf("120%% of the d2d ceiling without one warning naming it: %q", res.Warnings)
	}
	// A ceiling measured on a busy host says so: the likely reason it is low.
	opt.Ceilings.D2D.State.Host = &results.HostState{CPUs: 2, StealPct: 31, OtherPct: 2, Busy: true}
	res = moeResult(opt, local, 4, r, lat, 1e-3, "cfg", 4)
	if len(res.Warnings) != 2 || !strings.Contains(res.Warnings[0], "(it was measured on a busy host: 31% steal, 2% other processes)") {
		t.Errorf("a busy host's ceiling: %q", res.Warnings)
	}
	opt.Ceilings.D2D.State.Host = nil

	opt.Ceilings.Read = ceilings.Ceiling{Value: 15, Unit: ceilings.UnitGBps, Samples: []float64{15}, Size: "256 MiB", Method: "read loop"}
	res = moeResult(opt, local, 4, r, lat, 1e-3, "cfg", 4)
	if pct := median(res, MoEPctBW); math.Abs(pct-80) > 0.01 {
		t.Errorf("%%bw %.2f, want 80 of the 15 GB/s read ceiling", pct)
	}
	floorSec := math.Max(bytes/15e9, local.Flops(r.Slots())/0.01e12)
	if want, got := 100*floorSec/(us*1e-6), median(res, MoEPctFloor); math.Abs(got-want) > 0.01 {
		t.Errorf("%%floor %.2f, want %.2f (bytes at the read ceiling)", got, want)
	}
	for _, w := range res.Warnings {
		if strings.Contains(w, "%bw") {
			t.Errorf("80%% of the read ceiling warned: %s", w)
		}
	}
}

// Over several rounds the over-ceiling warnings are those of the joined
// result, one a batch and figure, at the median the table shows: not one
// per round at that round's median.
func TestOverCeilingWarningsOfJoinedRounds(t *testing.T) {
	c := fakeCeilings()
	c.D2D = ceilings.Ceiling{Value: 1e-6, Unit: ceilings.UnitGBps, Samples: []float64{1e-6}, Size: "1 KiB", Method: "fake"} // every batch far above it
	c.GEMM = ceilings.Ceiling{Value: 1e3, Unit: ceilings.UnitTFLOPs, Samples: []float64{1e3}, Size: "8192", Method: "fake"}
	opt := MoEOptions{Model: "tiny", Shape: moe.Shape{E: 8, K: 2, H: 64, I: 40}, Batches: []int{1, 7}, Samples: 3, Rounds: 3, Seed: 5, Ceilings: c}
	rep, err := RunMoE(t.Context(), gpu.NewCPU(), opt)
	if err != nil {
		t.Fatal(err)
	}
	var over []string
	for _, w := range rep.Warnings {
		if strings.Contains(w, ceilings.OverCeilingMark) {
			over = append(over, w)
		}
	}
	if len(over) != 2 {
		t.Fatalf("over-ceiling warnings %q, want one for each of the 2 batches", over)
	}
	for _, r := range rep.Results {
		if r.Name != MoEResult {
			continue
		}
		want := fmt.Sprintf("M=%s: %%bw and %%floor %.1f%% of the d2d ceiling", r.Params["batch"], results.Median(r.Metric(MoEPctBW).Samples))
		if len(r.Metric(MoELatency).Samples) != 9 || !slices.ContainsFunc(over, func(w string) bool { return strings.HasPrefix(w, want) }) {
			t.Errorf("M=%s (%d samples): no warning starting %q in %q", r.Params["batch"], len(r.Metric(MoELatency).Samples), want, over)
		}
		if n := len(slices.DeleteFunc(slices.Clone(r.Warnings), func(w string) bool { return !strings.Contains(w, ceilings.OverCeilingMark) })); n != 1 {
			t.Errorf("M=%s: %d over-ceiling warnings on the joined result, want 1: %q", r.Params["batch"], n, r.Warnings)
		}
	}
}

// On the CPU --weight-copies changes nothing, and the run says so once.
func TestRunMoEWeightCopiesOnCPU(t *testing.T) {
	rep, err := RunMoE(t.Context(), gpu.NewCPU(), MoEOptions{Shape: moe.Shape{E: 4, K: 2, H: 16, I: 8}, Batches: []int{1, 3}, Samples: 1, Rounds: 2,
		WeightCopies: 3, Ceilings: fakeCeilings()})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, w := range rep.Warnings {
		if strings.Contains(w, "--weight-copies: the CPU backend times its one copy") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d CPU weight-copies warnings in %q, want 1", n, rep.Warnings)
	}
}

// --routing is recorded as parsed: " Zipf:1.2" and "Uniform" read as
// zipf:1.2 and uniform, so their results pair with other runs' in a diff.
func TestPrepareMoERoutingCanonical(t *testing.T) {
	for in, want := range map[string]string{" Zipf:1.2": "zipf:1.2", "Uniform": "uniform"} {
		opt := MoEOptions{Shape: moe.Shape{E: 4, K: 2, H: 8, I: 8}, Routing: in}
		if _, err := PrepareMoE(&opt); err != nil {
			t.Fatal(err)
		}
		if opt.routingName() != want {
			t.Errorf("--routing %q recorded as %q, want %q", in, opt.routingName(), want)
		}
	}
}

// Under EP the static table sees the rank's load where that load is in its
// tc range: --ep 4 over deepseek-v3 tp8 at M=256 puts ~8 slots on each of
// rank 0's 64 experts, as M=64 does without EP, not the 32 that M=256
// reads over 64 experts. In the wg range it keeps the pick at M, and the
// tuner tries the families of both loads. A self-aligning pick for the
// rank's load runs without self-alignment where M has more slots than it
// sorts.
func TestConfigAtRanksLoad(t *testing.T) {
	h := moe.GPU{CC: moe.Hopper, SMs: 132}
	global := moe.Shape{E: 256, K: 8, H: 7168, I: 2048}
	opt := MoEOptions{Shape: global, TP: 8, EP: 4}
	local, err := global.Shard(8, 4)
	if err != nil {
		t.Fatal(err)
	}
	atM, atLoad := moe.ChooseConfigFor(h, local, 256), moe.ChooseConfigFor(h, local, 64)
	if atM.Kernel != "wg" || atLoad.Kernel != "tc" {
		t.Fatalf("the table's picks at M=256 (%v) and 64 (%v) are not a wg and a tc tile: this test shows nothing", atM, atLoad)
	}
	if got := opt.staticConfig(h, local, 256); got.String() != atLoad.String() {
		t.Errorf("--ep 4 M=256: static %v, want the table's pick at the rank's load (M=64), %v", got, atLoad)
	}
	for _, m := range []int{1024, 4096} { // the rank's load is in the wg range
		if got, want := opt.staticConfig(h, local, m), moe.ChooseConfigFor(h, local, m); got.String() != want.String() {
			t.Errorf("--ep 4 M=%d: static %v, want the table's pick at M, %v", m, got, want)
		}
	}
	cs := opt.candidates(h, local, 256)
	if cs[0].String() != atLoad.String() {
		t.Errorf("--ep 4 M=256: candidates start with %v, want the static pick %v", cs[0], atLoad)
	}
	seen := map[string]bool{}
	for _, c := range cs {
		if err := moe.CheckConfigShape(c, local, 256); err != nil {
			t.Errorf("--ep 4 M=256: candidate %v does not run there: %v", c, err)
		}
		if seen[c.String()] {
			t.Errorf("--ep 4 M=256: candidate %v listed twice", c)
		}
		seen[c.String()] = true
	}
	if !seen[atM.String()] || !slices.ContainsFunc(cs, func(c moe.Config) bool { return c.Kernel == "tc" && c.BM == 16 }) {
		t.Errorf("--ep 4 M=256: want both the pick at M (%v) and 16-row tc tiles among the candidates: %v", atM, cs)
	}

	// --ep 8 at M=16: two tokens' load, whose self-aligning pick cannot
	// sort M=16's 128 slots: the same tile without it.
	opt8 := MoEOptions{Shape: global, TP: 8, EP: 8}
	local8, _ := global.Shard(8, 8)
	small := moe.ChooseConfigFor(h, local8, 2)
	if small.Gemm(1).SA == 0 {
		t.Fatalf("the table's pick at M=2 is not self-aligning (%v): this part shows nothing", small)
	}
	got := opt8.staticConfig(h, local8, 16)
	if got.Gemm(1).SA != 0 || got.Gemm(1).BM != small.Gemm(1).BM || got.Gemm(1).BN != small.Gemm(1).BN || moe.CheckConfigShape(got, local8, 16) != nil {
		t.Errorf("--ep 8 M=16: static %v, want %v without self-alignment", got, small)
	}

	// Without EP nothing changes.
	one := MoEOptions{Shape: global, TP: 8, EP: 1}
	local1, _ := global.Shard(8, 1)
	for _, m := range []int{1, 256, 4096} {
		if one.staticConfig(h, local1, m).String() != moe.ChooseConfigFor(h, local1, m).String() ||
			fmt.Sprint(one.candidates(h, local1, m)) != fmt.Sprint(moe.CandidatesFor(h, local1, m)) {
			t.Errorf("--ep 1 M=%d: the pick or the candidates differ from the table's", m)
		}
	}
}
