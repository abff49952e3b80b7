package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/reports/results"
)

// On the CPU, tune moe checks and times the one implementation, writes the
// file, compares it with itself; run again it skips the batches it has.
func TestTuneMoECPU(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(moe.EnvConfigDir, dir)
	out := filepath.Join(dir, "tune.json")
	args := []string{"tune", "moe", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32", "--batch", "1,5",
		"--device", "cpu", "--samples", "4", "--tune-samples", "2", "--finalists", "3"}
	stdout, stderr, code := runMstar(t, append(args, "--out", out)...)
	// --finalists judges candidates again; the CPU has one: said, not run.
	if !strings.Contains(stderr, "--finalists: the CPU backend has one configuration to tune") {
		t.Errorf("no --finalists warning on the CPU: %s", stderr)
	}
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "E=8,N=32,K=64,topk=2,dtype=bf16,device=*.json"))
	if len(files) != 1 {
		t.Fatalf("tuned files in $%s: %v", moe.EnvConfigDir, files)
	}
	for _, want := range []string{"# file " + files[0], "tuned file (new) versus the static table (base)", "moe/batch=5", "one implementation, nothing to choose"} {
		if !containsWrapped(stdout+stderr, want) {
			t.Errorf("output lacks %q:\n%s\n%s", want, stdout, stderr)
		}
	}
	d, err := results.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	sides := map[string]int{}
	for _, r := range d.Results {
		if r.Name == "moe" {
			sides[r.Params["configs"]]++
		}
	}
	if sides["static"] != 4 || sides["tuned"] != 4 { // 2 batches × 2 rounds
		t.Errorf("results document sweeps: %v", sides)
	}
	if containsWrapped(stdout, "its picks kept under") {
		t.Errorf("a uniform tune without EP names where its picks are kept:\n%s", stdout)
	}
	// Under --ep the picks go under uniform@epN, and the header says so.
	epStdout, stderr, code := runMstar(t, "tune", "moe", "--experts", "16", "--topk", "2", "--hidden", "64", "--inter", "32",
		"--ep", "2", "--batch", "3", "--device", "cpu", "--samples", "2", "--tune-samples", "2")
	if code != exitOK || !containsWrapped(epStdout, "its picks kept under uniform@ep2") {
		t.Errorf("--ep 2: exit %d, stdout:\n%s\nstderr: %s", code, epStdout, stderr)
	}
	stdout, stderr, code = runMstar(t, args...)
	if code != exitOK || !strings.Contains(stdout, "already in the file, not re-tuned (--force re-tunes): M=1,5") {
		t.Errorf("second run: exit %d, stdout:\n%s\nstderr: %s", code, stdout, stderr)
	}

	// A run that skips every batch, writing to the same --out, keeps the
	// candidates the earlier run recorded there.
	stdout, stderr, code = runMstar(t, append(args, "--out", out)...)
	if code != exitOK || !strings.Contains(stdout, "candidate record(s) of M=1,5 carried from the earlier run's document") {
		t.Errorf("run into the same --out: exit %d, stdout:\n%s\nstderr: %s", code, stdout, stderr)
	}
	if d, err = results.ReadFile(out); err != nil {
		t.Fatal(err)
	}
	cands := map[string]int{}
	for _, r := range d.Results {
		if r.Name == "moe_tune" {
			cands[r.Params["batch"]]++
		}
	}
	if cands["1"] == 0 || cands["5"] == 0 {
		t.Errorf("candidates per batch in the rewritten document: %v, want batches 1 and 5", cands)
	}

	// Something else at --out is said, not carried, and the run goes on.
	junk := filepath.Join(dir, "junk.json")
	os.WriteFile(junk, []byte("not json"), 0o644)
	stdout, stderr, code = runMstar(t, append(args, "--out", junk)...)
	if code != exitOK || !strings.Contains(stdout+stderr, "is not an earlier tune document") {
		t.Errorf("run into a junk --out: exit %d, stdout:\n%s\nstderr: %s", code, stdout, stderr)
	}
}

func TestTuneMoEBadInput(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	os.WriteFile(notDir, []byte("x"), 0o644)
	benchDoc := filepath.Join(dir, "bench.json")
	os.WriteFile(benchDoc, []byte(`{"format":"mstar.results","schema":1,"suite":"bench moe","start":"2026-12-06T00:00:00Z","end":"2026-12-06T00:00:01Z","env":{},"results":[]}`), 0o644)
	small := []string{"--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32", "--device", "cpu", "--dir", dir}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"no shape", []string{"--device", "cpu"}, "give --model NAME, --hf-config FILE or all of"},
		{"model and file", []string{"--model", "qwen3-30b-a3b", "--hf-config", "x.json"}, "--hf-config and --model both give the shape"},
		{"bad batch", append(small, "--batch", "0"), "--batch"},
		{"tp", []string{"--model", "qwen3-30b-a3b", "--tp", "5", "--device", "cpu"}, "--tp 5 does not divide"},
		{"dir is a file", []string{"--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32", "--device", "cpu", "--dir", notDir}, "--dir"},
		{"negative threshold", append(small, "--threshold", "-1"), "--threshold -1"},
		{"no rounds", append(small, "--rounds", "0"), "--rounds 0: must be at least 1"},
		{"routing", append(small, "--routing", "pareto"), "want uniform or zipf"},
		{"shortlist missing", append(small, "--shortlist", filepath.Join(dir, "none.json")), "--shortlist: reading"},
		{"shortlist not json", append(small, "--shortlist", notDir), "--shortlist"},
		{"shortlist of a bench", append(small, "--shortlist", benchDoc), `a "bench moe" document, not a 'tune moe' one`},
		{"keep without shortlist", append(small, "--shortlist-keep", "3"), "--shortlist-keep: needs --shortlist"},
		{"keep zero", append(small, "--shortlist-keep", "0"), "--shortlist-keep 0: must be at least 1"},
		{"routing and file", append(small, "--routing", "zipf:1.2", "--routing-file", notDir), "--routing and --routing-file exclude each other"},
		{"routing file missing", append(small, "--routing-file", filepath.Join(dir, "none.jsonl")), "--routing-file: "},
		{"routing file not jsonl", append(small, "--routing-file", notDir), "--routing-file: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := runMstar(t, append([]string{"tune", "moe"}, tt.args...)...)
			if code != exitBadInput || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr, tt.want)
			}
		})
	}
}

// An interrupt before the first batch is tuned says that nothing was saved
// (and saves nothing), instead of naming a file that keeps 0 batches.
func TestTuneMoEInterruptedBeforeABatch(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(moe.EnvConfigDir, dir)
	interruptAtOnce(t)
	_, stderr, code := runMstar(t, "tune", "moe", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32",
		"--batch", "1,5", "--device", "cpu", "--samples", "4", "--tune-samples", "2", "--out", filepath.Join(dir, "tune.json"))
	if code != exitBroken {
		t.Fatalf("exit %d, want %d (an interrupted run): %s", code, exitBroken, stderr)
	}
	if !strings.Contains(stderr, "no batch was tuned before the interrupt") || strings.Contains(stderr, "keeps the 0 batch") {
		t.Errorf("stderr does not say that nothing was saved:\n%s", stderr)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "E=*.json")); len(files) != 0 {
		t.Errorf("tuned files written with no batch tuned: %v", files)
	}
}

// tune moe --routing-file tunes under a recorded routing: its picks go
// beside the uniform ones as trace:NAME, and a second run skips them.
func TestTuneMoERoutingFile(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(moe.EnvConfigDir, dir)
	shape := []string{"--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32", "--device", "cpu", "--samples", "2"}
	rec := filepath.Join(dir, "rec.jsonl")
	if _, stderr, code := runMstar(t, append([]string{"bench", "moe", "--batch", "8", "--routing", "zipf:1.2", "--routing-out", rec}, shape...)...); code != exitOK {
		t.Fatalf("recording the routing: exit %d: %s", code, stderr)
	}
	args := append([]string{"tune", "moe", "--batch", "1,5", "--tune-samples", "2", "--rounds", "1", "--routing-file", rec}, shape...)
	if _, stderr, code := runMstar(t, args...); code != exitOK {
		t.Fatalf("tune --routing-file: exit %d: %s", code, stderr)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "E=8,N=32,K=64,topk=2,dtype=bf16,device=*.json"))
	if len(files) != 1 {
		t.Fatalf("tuned files: %v", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	f, err := moe.ParseTunedFile(b, files[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := f.TunedBatchSizesUnder("trace:rec.jsonl"); len(got) != 2 || len(f.TunedBatchSizes()) != 0 {
		t.Errorf("file: trace:rec.jsonl %v, uniform %v; want [1 5] and none", got, f.TunedBatchSizes())
	}
	if stdout, stderr, code := runMstar(t, args...); code != exitOK || !strings.Contains(stdout, "already in the file") {
		t.Errorf("second run: exit %d, stdout:\n%s\nstderr: %s", code, stdout, stderr)
	}
	// bench moe's pick under the file: TestBenchPicksRoutingsOwnBatch (the
	// CPU backend has no configurations to pick).
}
