package moe

import (
	"math"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/bench/ceilings"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/kernels/routing"
	"github.com/mstar-dev/mstar/reports/results"
)

// Stage results: shares, and each GEMM's throughput, bandwidth and floor
// from its own work, by hand for round numbers.
func TestStageResults(t *testing.T) {
	s := moe.Shape{E: 4, K: 2, H: 100, I: 50}
	r := routing.Routing{M: 2, K: 2, IDs: []int32{0, 1, 0, 2}, Weights: []float32{.5, .5, .5, .5}}
	opt := MoEOptions{Model: "tiny", TP: 1, EP: 1, Ceilings: fakeCeilings()} // d2d 10 GB/s, gemm 0.01 TFLOP/s
	stages := []moe.StageTime{
		{Stage: "align", Kernel: "moe_align", US: []float64{10, 10, 10}},
		{Stage: "gemm1", Kernel: "moe_gemm1_x", US: []float64{40, 40, 40}},
		{Stage: "gemm2", Kernel: "moe_gemm2_x", US: []float64{40, 40, 40}},
		{Stage: "combine", Kernel: "moe_combine", US: []float64{10, 10, 10}},
	}
	res := stageResults(opt, s, 2, r, stages)
	if len(res) != 4 {
		t.Fatalf("%d results; want 4", len(res))
	}
	// 4 slots over 3 touched experts.
	g1Flops := 4.0 * 2 * 100 * 2 * 50                      // 80 000
	g1Bytes := 3.0*2*50*100*2 + 4*100*2 + 4*50*2           // 61 200
	g1Floor := math.Max(g1Bytes/10e9, g1Flops/(0.01*1e12)) // 8 µs (flops)
	want := map[string][3]float64{                         // share %, TFLOP/s, % of floor
		"align":   {10, math.NaN(), math.NaN()},
		"gemm1":   {40, g1Flops / 40e-6 / 1e12, 100 * g1Floor / 40e-6},
		"combine": {10, math.NaN(), math.NaN()},
	}
	median := func(r results.Result, name string) float64 {
		if m := r.Metric(name); m != nil && m.Measured() {
			return results.Median(m.Samples)
		}
		return math.NaN()
	}
	for i, st := range stages {
		if res[i].Name != MoEStageResult || res[i].Params["stage"] != st.Stage || res[i].Params["kernel"] != st.Kernel || res[i].Params["batch"] != "2" {
			t.Errorf("result %d: %s %v", i, res[i].Name, res[i].Params)
		}
		w, ok := want[st.Stage]
		if !ok {
			continue
		}
		close := func(a, b float64) bool {
			return math.IsNaN(a) && math.IsNaN(b) || math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b))
		}
		share, tflops, floor := median(res[i], MoEStageShare), median(res[i], MoEThroughput), median(res[i], MoEPctFloor)
		if !close(share, w[0]) || !close(tflops, w[1]) || !close(floor, w[2]) {
			t.Errorf("%s: share %v TFLOP/s %v %%floor %v; want %v", st.Stage, share, tflops, floor, w)
		}
		hasFloor := res[i].Metric(MoEPctFloor) != nil
		if hasFloor != (st.Stage == "gemm1" || st.Stage == "gemm2") {
			t.Errorf("%s: %% of floor metric present = %v", st.Stage, hasFloor)
		}
	}
	// Without a gemm ceiling the floor is unmeasured, not zero.
	opt.Ceilings.GEMM = ceilings.Ceiling{Unmeasured: "no GPU"}
	res = stageResults(opt, s, 2, r, stages)
	if m := res[1].Metric(MoEPctFloor); m == nil || m.Measured() {
		t.Errorf("gemm1 floor without a gemm ceiling: %+v", m)
	}
}

// --stages on the CPU times the four stages within further passes: one
// result each, with its samples and its share, and the GEMMs' rates.
func TestRunMoEStagesOnCPU(t *testing.T) {
	opt := MoEOptions{Model: "tiny", Shape: moe.Shape{E: 4, K: 2, H: 32, I: 16}, Batches: []int{3}, Samples: 2, Seed: 1,
		Ceilings: fakeCeilings(), Stages: true}
	rep, err := RunMoE(t.Context(), gpu.NewCPU(), opt)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	share := 0.0
	for _, r := range rep.Results {
		if r.Name != MoEStageResult {
			continue
		}
		names = append(names, r.Params["stage"])
		if m := r.Metric(MoELatency); m == nil || len(m.Samples) != 2 {
			t.Errorf("%s: latency %+v, want 2 samples", r.Params["stage"], m)
		}
		share += r.Metric(MoEStageShare).Samples[0]
		hasRate := r.Metric(MoEThroughput) != nil
		if g := strings.HasPrefix(r.Params["stage"], "gemm"); hasRate != g {
			t.Errorf("%s: throughput metric present = %v", r.Params["stage"], hasRate)
		}
	}
	if strings.Join(names, ",") != "align,gemm1,gemm2,combine" {
		t.Errorf("stages %v", names)
	}
	if !(math.Abs(share-100) < 1e-6) {
		t.Errorf("shares sum to %v%%, want 100", share)
	}
}
