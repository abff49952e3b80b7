package main

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/bench/ceilings"
	moebench "github.com/mstar-dev/mstar/bench/moe"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/kernels/moe"
)

// tune moe --finalists' fresh runs: this binary's bench moe in a new
// process over the same layer and routing (here the test binary, run as
// mstar), its batch's median latency read from the document it writes, with
// the tune's ceilings handed over in a file; a run that fails says why.
func TestFreshBenchRunsBenchMoE(t *testing.T) {
	saved := workerEnv
	t.Cleanup(func() { workerEnv = saved })
	workerEnv = []string{runAsMstarEnv + "=1"}
	opt := moebench.MoEOptions{Shape: moe.Shape{E: 8, K: 2, H: 64, I: 32}, TP: 2, Routing: "zipf:1.2", Seed: 7, Samples: 3}
	args := freshShapeArgs(opt)
	for _, want := range [][]string{{"--experts", "8"}, {"--inter", "32"}, {"--tp", "2"}, {"--ep", "1"}, {"--routing", "zipf:1.2"}, {"--seed", "7"}, {"--samples", "3"}} {
		if i := slices.Index(args, want[0]); i < 0 || i+1 >= len(args) || args[i+1] != want[1] {
			t.Errorf("fresh run flags %q: want %s %s", args, want[0], want[1])
		}
	}
	// A routing file replays in the child as it does in the tune.
	rec := moe.UniformRouting(4, 8, 2, 1)
	traced := opt
	traced.Trace, traced.TraceName = &rec, "/runs/rec.jsonl"
	if a := freshShapeArgs(traced); !slices.Contains(a, "/runs/rec.jsonl") || slices.Contains(a, "--routing") {
		t.Errorf("fresh run flags under a routing file %q: want --routing-file /runs/rec.jsonl, no --routing", a)
	}
	f, cleanup, err := newFreshBench(opt, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	ceil, err := ceilings.MeasureCeilings(t.Context(), gpu.NewCPU(), ceilings.CeilingOptions{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	us, err := f.TimeFresh(t.Context(), 3, moe.Config{}, ceil)
	if err != nil || !(us > 0) {
		t.Fatalf("fresh run: %v µs, %v", us, err)
	}
	if _, err := os.Stat(f.ceilPath); err != nil {
		t.Errorf("the ceilings file for the children: %v", err)
	}
	// A configuration the child refuses: the error carries its message.
	_, err = f.TimeFresh(t.Context(), 3, moe.Config{Kernel: "tc", BM: 16, BN: 64, BK: 48, WM: 1, WN: 1, Stages: 2, GM: 1, MinBlocks: 1}, ceil)
	if err == nil || !strings.Contains(err.Error(), "bench moe: exit status 2") || !strings.Contains(err.Error(), "bk") {
		t.Errorf("a refused configuration: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := f.TimeFresh(ctx, 3, moe.Config{}, ceil); err == nil {
		t.Error("a canceled context still timed a fresh run")
	}
}

// --finalists is checked before anything runs.
func TestTuneFinalistsFlag(t *testing.T) {
	for _, tt := range []struct {
		v, want string
	}{{"-1", "--finalists"}, {"9", "at most 8"}} {
		_, stderr, code := runMstar(t, "tune", "moe", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32", "--device", "cpu",
			"--dir", t.TempDir(), "--finalists", tt.v)
		if code != exitBadInput || !strings.Contains(stderr, tt.want) {
			t.Errorf("--finalists %s: exit %d, %q; want %d naming %q", tt.v, code, stderr, exitBadInput, tt.want)
		}
	}
}
