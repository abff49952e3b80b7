package moe

import (
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu/gputest"
	"github.com/mstar-dev/mstar/kernels/moe"
)

// GPU tests of tuned configurations: they skip without a CUDA device. On
// the GPU machine: bin/bench.test -test.run CUDATuned.

// bench moe on the device loads its tuned file (on an H200, the shipped
// one for qwen3-30b-a3b) and every result names the configuration and the
// file; on another device the static table, named as such.
func TestCUDATunedConfigsNamed(t *testing.T) {
	dev := gputest.OpenCUDA(t)
	t.Setenv(moe.EnvConfigDir, t.TempDir())
	shape := moe.Shape{E: 128, K: 8, H: 2048, I: 768} // qwen3-30b-a3b
	rep, err := RunMoE(t.Context(), dev, MoEOptions{Model: "qwen3-30b-a3b", Shape: shape, Batches: []int{1, 48, 256}, Samples: 3, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := "static"
	if dev.Info().Name == "NVIDIA H200" {
		want = "embedded:" + moe.KeyFor(shape, "NVIDIA H200").FileName()
	}
	for _, r := range rep.Results {
		if r.Name != MoEResult {
			continue
		}
		if r.Params[MoEConfigSourceParam] != want || r.Params[MoEConfigParam] == "" || !r.Passed() {
			t.Errorf("%s: config %q from %q (want %q), gates %+v", r.Key(), r.Params[MoEConfigParam], r.Params[MoEConfigSourceParam], want, r.Gates)
		}
		if r.Params["batch"] == "48" && want != "static" && !strings.Contains(strings.Join(r.Warnings, " "), "nearest tuned batch 64") {
			t.Errorf("M=48 does not say it took the nearest tuned batch: %q", r.Warnings)
		}
	}
}

// tune moe on the device over two batches of a small shape: a file with
// both, every chosen candidate correct, and the comparison over both.
func TestCUDATunedSmallShape(t *testing.T) {
	dev := gputest.OpenCUDA(t)
	dir := t.TempDir()
	rep, err := RunMoETune(t.Context(), dev, MoETuneOptions{Dir: dir,
		MoE: MoEOptions{Shape: moe.Shape{E: 16, K: 4, H: 256, I: 128}, Batches: []int{1, 256}, Samples: 6, TuneSamples: 3, Seed: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.File.TunedBatchSizes(); len(got) != 2 || len(rep.StaticDocs) == 0 || len(rep.TunedDocs) != len(rep.StaticDocs) {
		t.Fatalf("file batches %v, comparison rounds %d static, %d tuned", got, len(rep.StaticDocs), len(rep.TunedDocs))
	}
	for m, outs := range rep.Outcomes {
		for _, o := range outs {
			if o.Chosen && !(o.RelL2 <= MoEMaxRelL2) {
				t.Errorf("M=%d chose %v with rel L2 %g", m, o.Config, o.RelL2)
			}
		}
	}
}
