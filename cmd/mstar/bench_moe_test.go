package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
)

func TestBenchMoECPU(t *testing.T) {
	dir := t.TempDir()
	out, trace := filepath.Join(dir, "moe.json"), filepath.Join(dir, "routing.json")
	stdout, stderr, code := runMstar(t, "bench", "moe", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32",
		"--batch", "1,9", "--device", "cpu", "--samples", "2", "--out", out, "--routing-out", trace)
	if code != exitOK {
		t.Fatalf("exit %d; stderr: %s", code, stderr)
	}
	for _, want := range []string{"# mstar bench moe: custom, local shape E8 k2 H64 I32", "latency(us)", "pass", "M=9 kernels: cpu: ", "float32 sums"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	d, err := results.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	moeRows := 0
	for _, r := range d.Results {
		if r.Name == "moe" {
			moeRows++
			if !r.Passed() || r.Params["impl"] != "mstar" {
				t.Errorf("result %s: gates %+v", r.Key(), r.Gates)
			}
		}
	}
	if moeRows != 2 || d.Suite != "bench moe" {
		t.Errorf("document suite %q with %d moe results, want bench moe with 2", d.Suite, moeRows)
	}
	// The written routing replays.
	_, stderr, code = runMstar(t, "bench", "moe", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32",
		"--batch", "3", "--device", "cpu", "--samples", "1", "--routing-file", trace)
	if code != exitOK || strings.Contains(stderr, "warning: --routing-file") {
		t.Errorf("replaying --routing-out: exit %d: %s", code, stderr)
	}
	// A negative weight replays, with the reader's warning.
	neg := filepath.Join(t.TempDir(), "neg.jsonl")
	os.WriteFile(neg, []byte(`{"format":"mstar.routing-trace","experts":8,"topk":2}
{"layer":0,"ids":[3,4],"weights":[0.5,0.5]}
{"layer":0,"ids":[0,5],"weights":[1.5,-0.5]}
`), 0o644)
	_, stderr, code = runMstar(t, "bench", "moe", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32",
		"--batch", "2", "--device", "cpu", "--samples", "1", "--routing-file", neg)
	if want := "warning: --routing-file: " + neg + ": 1 of 4 weights is negative"; code != exitOK || !strings.Contains(stderr, want) {
		t.Errorf("negative weight: exit %d, stderr lacks %q:\n%s", code, want, stderr)
	}
}

func TestBenchMoEBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("{\"experts\": 8, \"topk\": 2,\n\"ids\": [[0, 1],\n[2 3]]}"), 0o644)
	small := func(extra ...string) []string {
		return append([]string{"--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32", "--device", "cpu"}, extra...)
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"k > E", []string{"--experts", "4", "--topk", "5", "--hidden", "8", "--inter", "8", "--device", "cpu"}, "top-k 5 is larger than the number of experts 4"},
		{"zero size", []string{"--experts", "4", "--topk", "2", "--hidden", "0", "--inter", "8", "--device", "cpu"}, "hidden must be positive"},
		{"no shape", []string{"--device", "cpu"}, "give --model NAME, --hf-config FILE or all of"},
		{"unknown model", []string{"--model", "gpt-5", "--device", "cpu"}, "unknown model"},
		{"tp does not divide", []string{"--model", "qwen3-30b-a3b", "--tp", "5", "--device", "cpu"}, "--tp 5 does not divide the intermediate size 768"},
		{"ep does not divide", []string{"--model", "mixtral-8x7b", "--ep", "3", "--device", "cpu"}, "--ep 3 does not divide the number of experts 8"},
		{"does not fit", []string{"--model", "deepseek-v3", "--experts", "4096", "--device", "cpu", "--batch", "1"}, "needs"},
		{"does not fit: says what to change", []string{"--model", "deepseek-v3", "--experts", "4096", "--device", "cpu", "--batch", "1"}, "is free (try --tp/--ep or smaller --batch)"},
		{"malformed trace", small("--batch", "1", "--routing-trace", bad), "line 3"},
		{"missing trace", small("--batch", "1", "--routing-trace", filepath.Join(dir, "none.json")), "no such file"},
		{"bad batch", small("--batch", "1,x"), "--batch"},
		{"bad routing", small("--batch", "1", "--routing", "pareto"), "want uniform or zipf"},
		{"bad config", small("--batch", "1", "--config", "tiled:bm=3"), "bm must be a multiple"},
		{"bad tc config", small("--batch", "1", "--config", "tc:bk=48"), "bk must be 32, 64 or 128"},
		{"tune with a config", small("--batch", "1", "--tune", "--config", "tc:128x256k64s3"), "--tune tries every candidate"},
		{"bad tune samples", small("--batch", "1", "--tune", "--tune-samples", "-1"), "--tune-samples -1: must be at least 0 (0: 6)"},
		{"negative samples", small("--batch", "1", "--samples", "-1"), "--samples -1: must be at least 0"},
		{"no tensor parallelism", small("--batch", "1", "--tp", "0"), "--tp 0: must be at least 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := runMstar(t, append([]string{"bench", "moe"}, tt.args...)...)
			if code != exitBadInput || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 mentioning %q", code, stderr, tt.want)
			}
		})
	}
}

func TestBenchMoETuneOnCPU(t *testing.T) {
	stdout, stderr, code := runMstar(t, "bench", "moe", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32",
		"--batch", "5", "--device", "cpu", "--samples", "1", "--tune")
	if code != exitOK {
		t.Fatalf("exit %d; stderr: %s", code, stderr)
	}
	if !strings.Contains(stdout, "# warning: --tune: the CPU has one implementation; nothing to tune") {
		t.Errorf("stdout lacks the nothing-to-tune warning:\n%s", stdout)
	}
}

// --config on the CPU is said to do nothing, as --tune is, not ignored silently.
func TestBenchMoEConfigOnCPU(t *testing.T) {
	stdout, stderr, code := runMstar(t, "bench", "moe", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32",
		"--batch", "5", "--device", "cpu", "--samples", "1", "--config", "tiled:bm=128")
	if code != exitOK {
		t.Fatalf("exit %d; stderr: %s", code, stderr)
	}
	if !strings.Contains(stdout, "# warning: --config tiled") || !strings.Contains(stdout, "applies to CUDA kernels only") {
		t.Errorf("stdout lacks the --config warning:\n%s", stdout)
	}
}

// --rounds repeats the sweep: every sample knows its round, the ceilings are
// measured once, and the printed table summarises every round.
func TestBenchMoERounds(t *testing.T) {
	out := filepath.Join(t.TempDir(), "moe.json")
	stdout, stderr, code := runMstar(t, "bench", "moe", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32",
		"--batch", "1,9", "--device", "cpu", "--samples", "2", "--rounds", "3", "--out", out)
	if code != exitOK {
		t.Fatalf("exit %d; stderr: %s", code, stderr)
	}
	d, err := results.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if d.Rounds != 3 || d.RunID == "" {
		t.Errorf("document rounds %d, run id %q", d.Rounds, d.RunID)
	}
	moeRows, ceilings := 0, 0
	for _, r := range d.Results {
		switch r.Name {
		case "moe":
			moeRows++
			lat := r.Metric("latency")
			if want := []int{0, 0, 1, 1, 2, 2}; lat == nil || !slices.Equal(lat.Rounds, want) || len(lat.Samples) != 6 {
				t.Errorf("%s latency: %d samples, rounds %v; want 6 in rounds %v", r.Key(), len(lat.Samples), lat.Rounds, want)
			}
			if tp := r.Metric("throughput"); tp == nil || tp.DerivedFrom != "latency" || len(tp.Rounds) != 6 {
				t.Errorf("%s throughput: %+v", r.Key(), tp)
			}
		case "ceiling":
			ceilings++
			if r.Role != results.RoleContext {
				t.Errorf("ceiling %s has role %q", r.Key(), r.Role)
			}
		}
	}
	// d2d, read, h2d, d2h and gemm: measured once, not once a round.
	if moeRows != 2 || ceilings != 5 {
		t.Errorf("%d moe results and %d ceilings; want 2 and 5 (measured once)", moeRows, ceilings)
	}
	if strings.Count(stdout, "# mstar bench moe:") != 1 {
		t.Errorf("want one table for all rounds:\n%s", stdout)
	}
}
