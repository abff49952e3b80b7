package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/internal/shard"
	"github.com/mstar-dev/mstar/reports/results"
)

func fourGPUs() ([]gpuSlot, error) {
	return []gpuSlot{{"cuda:0", "0000:19:00.0"}, {"cuda:1", "0000:3b:00.0"}, {"cuda:2", ""}, {"cuda:3", ""}}, nil
}

func TestPickGPUs(t *testing.T) {
	for _, tc := range []struct {
		spec, want, bad string
	}{
		{"all", "cuda:0 cuda:1 cuda:2 cuda:3", ""},
		{"1,3", "cuda:1 cuda:3", ""},
		{" 2 ", "cuda:2", ""},
		{"4", "", "there is no GPU 4: the CUDA driver sees 4 GPUs (0 to 3)"},
		{"1,1", "", "GPU 1 given twice"},
		{"one", "", "want all, or GPU numbers such as 0,1,3"},
		{"-1", "", "want all"},
	} {
		got, err := pickGPUs(tc.spec, fourGPUs)
		var specs []string
		for _, g := range got {
			specs = append(specs, g.Spec)
		}
		if tc.bad == "" && (err != nil || strings.Join(specs, " ") != tc.want) {
			t.Errorf("--devices %q: %v, %v; want %s", tc.spec, specs, err, tc.want)
		}
		if tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)) {
			t.Errorf("--devices %q: error %v, want %q", tc.spec, err, tc.bad)
		}
	}
	_, err := pickGPUs("all", func() ([]gpuSlot, error) { return nil, errors.New("no CUDA driver: libcuda.so.1 not found") })
	if err == nil || err.Error() != "--devices all: no GPU found: no CUDA driver: libcuda.so.1 not found" {
		t.Errorf("no driver: %v", err)
	}
	if _, err := pickGPUs("0", func() ([]gpuSlot, error) { return nil, nil }); err == nil || !strings.Contains(err.Error(), "no GPU found: the CUDA driver sees none") {
		t.Errorf("no device: %v", err)
	}
}

func TestWorkerArgs(t *testing.T) {
	args := []string{"arena", "sweep", "--devices", "all", "--replicate", "--out=x.json", "-o", "y.json", "--plot", "p.png", "--shard", "2/3", "--samples", "2", "--mode=copy"}
	got := workerArgs(args, "cuda:1", shard.Shard{Index: 5, Count: 6}, "/tmp/w/gpu-1.json")
	want := []string{"arena", "sweep", "--samples", "2", "--mode=copy", "--device", "cuda:1", "--out", "/tmp/w/gpu-1.json", "--shard", "5/6"}
	if !slices.Equal(got, want) {
		t.Errorf("workerArgs:\n got %q\nwant %q", got, want)
	}
	if got := workerArgs([]string{"bench", "moe", "--devices=0,1"}, "cuda:0", shard.Shard{}, "w.json"); !slices.Equal(got, []string{"bench", "moe", "--device", "cuda:0", "--out", "w.json"}) {
		t.Errorf("a replicated worker: %q", got)
	}
	if s := cpuList([]int{0, 1, 2, 3, 8, 10, 11}); s != "0-3,8,10-11" {
		t.Errorf("cpuList = %q", s)
	}
}

// A worker started pinned runs on those CPUs; this process keeps its own.
func TestStartPinned(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc/self/status to read a CPU mask from")
	}
	cmd := exec.Command("grep", "Cpus_allowed_list", "/proc/self/status")
	var out strings.Builder
	cmd.Stdout = &out
	note, err := startPinned(cmd, []int{0})
	if err != nil || note != "" {
		t.Fatalf("startPinned: %q, %v", note, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(out.String()); len(got) != 2 || got[1] != "0" {
		t.Errorf("the worker's CPUs: %q, want 0", out.String())
	}
	mine, _ := os.ReadFile("/proc/self/status")
	if !strings.Contains(string(mine), "Cpus_allowed_list") {
		t.Fatal("no mask in /proc/self/status")
	}
}

// fakeGPUs makes --devices see GPUs that are the devices given ("cpu"),
// the workers this test binary as mstar, and the CPUs near each GPU CPU 0.
func fakeGPUs(t *testing.T, specs ...string) {
	t.Helper()
	saved, savedCPUs, savedEnv := listGPUs, gpuCPUs, workerEnv
	t.Cleanup(func() { listGPUs, gpuCPUs, workerEnv = saved, savedCPUs, savedEnv })
	listGPUs = func() ([]gpuSlot, error) {
		var out []gpuSlot
		for _, s := range specs {
			out = append(out, gpuSlot{Spec: s, BusID: "test-bus"})
		}
		return out, nil
	}
	gpuCPUs = func(string) ([]int, error) { return []int{0}, nil }
	workerEnv = []string{runAsMstarEnv + "=1"}
}

// --devices spreads a suite's cells over one worker per GPU and merges
// them into the whole run, each row from the worker that measured it;
// with --shard it is that shard, which merges with the others; with
// --replicate every GPU runs every cell.
func TestDevicesSpreadAndMerge(t *testing.T) {
	fakeGPUs(t, "cpu", "cpu")
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole.json")
	if _, stderr, code := runMstar(t, sweepArgs(dir, "--out", whole)...); code != exitOK {
		t.Fatalf("whole run: exit %d: %s", code, stderr)
	}
	_, want := keysOf(t, whole)

	spread := filepath.Join(dir, "spread.json")
	stdout, stderr, code := runMstar(t, multiGPUSweep(dir, "--devices", "all", "--out", spread)...)
	if code != exitOK || !strings.Contains(stderr, "arena sweep on 2 GPUs: cpu (pid") || !strings.Contains(stderr, "CPUs 0)") {
		t.Fatalf("--devices all: exit %d:\n%s", code, stderr)
	}
	if !strings.Contains(stdout, "per-GPU summary") || !strings.Contains(stdout, "transport") {
		t.Errorf("the table or the per-GPU summary is missing:\n%s", stdout)
	}
	m, got := keysOf(t, spread)
	if !slices.Equal(got, want) {
		t.Errorf("the workers' merge differs from the whole run:\n got %v\nwant %v", got, want)
	}
	runs := map[string]int{}
	for i := range m.Results {
		runs[m.RunOf(&m.Results[i])]++
	}
	if len(runs) != 2 || m.Shard != nil || m.Suite != "arena sweep" || !slices.Contains(m.Command, "--devices") {
		t.Errorf("merged: results of %d runs (want 2), shard %+v, suite %q, command %q", len(runs), m.Shard, m.Suite, m.Command)
	}

	// Shard 2/3 of the suite on 2 GPUs, merged with shards 1/3 and 3/3.
	parts := []string{filepath.Join(dir, "p1.json"), filepath.Join(dir, "p2.json"), filepath.Join(dir, "p3.json")}
	for i, extra := range [][]string{{"--shard", "1/3"}, {"--shard", "2/3", "--devices", "all"}, {"--shard", "3/3"}} {
		args := sweepArgs(dir, append(extra, "--out", parts[i])...)
		if i == 1 {
			args = multiGPUSweep(dir, append(extra, "--out", parts[i])...)
		}
		if _, stderr, code := runMstar(t, args...); code != exitOK {
			t.Fatalf("%v: exit %d: %s", extra, code, stderr)
		}
	}
	if d, _ := keysOf(t, parts[1]); d.Shard == nil || d.Shard.Index != 2 || d.Shard.Count != 3 || len(d.Shard.Cells) != 2 {
		t.Fatalf("shard 2/3 on 2 GPUs records %+v, want 2/3 with its 2 cells", d.Shard)
	}
	merged := filepath.Join(dir, "merged.json")
	if _, stderr, code := runMstar(t, append([]string{"report", "merge", "-o", merged}, parts...)...); code != exitOK {
		t.Fatalf("merge: exit %d: %s", code, stderr)
	}
	if _, got := keysOf(t, merged); !slices.Equal(got, want) {
		t.Errorf("shards with a multi-GPU one merged differ from the whole run:\n got %v\nwant %v", got, want)
	}

	rep := filepath.Join(dir, "replicated.json")
	if _, stderr, code := runMstar(t, multiGPUSweep(dir, "--devices", "0,1", "--replicate", "--out", rep)...); code != exitOK {
		t.Fatalf("--replicate: exit %d: %s", code, stderr)
	}
	_, got = keysOf(t, rep)
	var twice []string
	for _, k := range want {
		twice = append(twice, k, k)
	}
	if !slices.Equal(got, twice) {
		t.Errorf("--replicate: every GPU should run every cell:\n got %v\nwant %v", got, twice)
	}
	// --replicate within a shard: both GPUs run the shard's cells; the
	// document is that shard.
	if _, stderr, code := runMstar(t, multiGPUSweep(dir, "--devices", "all", "--replicate", "--shard", "1/2", "--out", rep)...); code != exitOK {
		t.Fatalf("--replicate --shard 1/2: exit %d: %s", code, stderr)
	}
	if d, got := keysOf(t, rep); d.Shard == nil || d.Shard.Index != 1 || d.Shard.Count != 2 || len(d.Shard.Cells) != 3 || len(got) != 2*3*4 {
		t.Errorf("--replicate --shard 1/2: shard %+v, %d results; want 1/2 of its 3 cells, each on both GPUs (24)", d.Shard, len(got))
	}
}

// One GPU (the H200 machine) runs the whole suite in its one worker.
func TestDevicesOneGPU(t *testing.T) {
	fakeGPUs(t, "cpu")
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole.json")
	if _, stderr, code := runMstar(t, sweepArgs(dir, "--out", whole)...); code != exitOK {
		t.Fatalf("whole run: exit %d: %s", code, stderr)
	}
	_, want := keysOf(t, whole)
	one := filepath.Join(dir, "one.json")
	stdout, stderr, code := runMstar(t, multiGPUSweep(dir, "--devices", "all", "--out", one)...)
	if code != exitOK || !strings.Contains(stdout, "per-GPU summary (1 GPU)") {
		t.Fatalf("--devices all on one GPU: exit %d:\n%s", code, stderr)
	}
	if d, got := keysOf(t, one); !slices.Equal(got, want) || d.Shard != nil {
		t.Errorf("one GPU: shard %+v, keys %v; want the whole run's %v", d.Shard, got, want)
	}
}

// A worker that fails is named with its last line and its log kept (exit
// 3); the same bad input in every worker is bad input (exit 2).
func TestDevicesWorkerFailure(t *testing.T) {
	dir := t.TempDir()
	fakeGPUs(t, "cuda:7", "cuda:7")
	_, stderr, code := runMstar(t, multiGPUSweep(dir, "--devices", "all")...)
	if code != exitBadInput || strings.Contains(stderr, "exited 2") || !strings.Contains(stderr, "--device cuda:7") {
		t.Errorf("bad input in every worker: exit %d:\n%s", code, stderr)
	}
	fakeGPUs(t, "cpu", "cuda:7")
	_, stderr, code = runMstar(t, multiGPUSweep(dir, "--devices", "all")...)
	if code != exitBroken || !strings.Contains(stderr, "--devices: cuda:7 exited 2: --device cuda:7") || !strings.Contains(stderr, "logs are in") {
		t.Errorf("one worker failed: exit %d:\n%s", code, stderr)
	}
}

// multiGPUSweep is sweepArgs without its --device.
func multiGPUSweep(dir string, extra ...string) []string {
	args := sweepArgs(dir, extra...)
	i := slices.Index(args, "--device")
	return slices.Delete(args, i, i+2)
}

// tune moe on two GPUs: each worker tunes its batches in a folder of its
// own, and --dir's file ends up with every batch; a second run resumes
// (nothing left to tune) and keeps them.
func TestTuneDevices(t *testing.T) {
	fakeGPUs(t, "cpu", "cpu")
	gpuCPUs = func(string) ([]int, error) { return nil, errors.New("unpinned: both on one CPU is slow") }
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cfg")
	args := []string{"tune", "moe", "--experts", "4", "--topk", "2", "--hidden", "32", "--inter", "16", "--batch", "1,2,4", "--rounds", "1",
		"--dir", cfg, "--devices", "all", "--out", filepath.Join(dir, "tune.json")}
	_, stderr, code := runMstar(t, args...)
	if code != exitOK || !strings.Contains(stderr, "mstar: wrote "+cfg) {
		t.Fatalf("tune moe --devices all: exit %d:\n%s", code, stderr)
	}
	files, err := tunedFiles(cfg)
	if err != nil || len(files) != 1 {
		t.Fatalf("%s holds %d tuned files (%v), want 1", cfg, len(files), err)
	}
	for _, f := range files {
		if got := f.TunedBatchSizes(); !slices.Equal(got, []int{1, 2, 4}) {
			t.Errorf("tuned batches %v, want [1 2 4] from both workers", got)
		}
	}
	d, _ := keysOf(t, filepath.Join(dir, "tune.json"))
	tuned := map[string]bool{}
	for _, r := range d.Results {
		if r.Name == "moe_tune" {
			tuned[r.Params["batch"]] = true
		}
	}
	if len(tuned) != 3 {
		t.Errorf("candidates of batches %v in the merged document, want 1, 2 and 4", tuned)
	}
	if _, stderr, code := runMstar(t, args...); code != exitOK {
		t.Fatalf("the second run: exit %d:\n%s", code, stderr)
	}
	if again, _ := tunedFiles(cfg); len(again) != 1 {
		t.Errorf("after the resumed run: %d files", len(again))
	} else {
		for _, f := range again {
			if got := f.TunedBatchSizes(); !slices.Equal(got, []int{1, 2, 4}) {
				t.Errorf("after the resumed run: batches %v", got)
			}
		}
	}
}

// bench p2p needs two GPUs, and says so.
func TestP2PNeedsTwoGPUs(t *testing.T) {
	fakeGPUs(t, "cuda:0")
	_, stderr, code := runMstar(t, "bench", "p2p")
	if code != exitBadInput || !strings.Contains(stderr, "bench p2p needs two GPUs or more: --devices all gives 1 GPU") {
		t.Errorf("one GPU: exit %d: %s", code, stderr)
	}
}

// An interrupt stops every worker with one SIGINT: each writes what it
// finished, and the run exits 3 saying where their documents are.
func TestDevicesInterrupted(t *testing.T) {
	fakeGPUs(t, "cpu", "cpu")
	ctx, cancel := context.WithCancel(context.Background())
	interruptWith(t, ctx)
	time.AfterFunc(500*time.Millisecond, cancel)
	dir := t.TempDir()
	args := multiGPUSweep(dir, "--devices", "all", "--max-size", "256MiB", "--samples", "50")
	_, stderr, code := runMstar(t, args...)
	if code != exitBroken || !strings.Contains(stderr, "interrupted before it completed") {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	i := strings.Index(stderr, "documents and logs are in ")
	if i < 0 {
		t.Fatalf("no folder named:\n%s", stderr)
	}
	folder := strings.Fields(stderr[i+len("documents and logs are in "):])[0]
	folder = strings.TrimSuffix(folder, ")")
	t.Cleanup(func() { os.RemoveAll(folder) })
	for k := range 2 {
		d, err := results.ReadFile(filepath.Join(folder, fmt.Sprintf("gpu-%d.json", k)))
		if err != nil || !d.Interrupted() {
			t.Errorf("worker %d: %v (interrupted %v); its log:\n%s", k, err, err == nil && d.Interrupted(), readOr(filepath.Join(folder, fmt.Sprintf("gpu-%d.log", k))))
		}
	}
}

func readOr(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// report show --gpus prints a merged document's per-GPU summary, flags
// and all; with other table flags it is refused.
func TestReportShowGPUs(t *testing.T) {
	dir := t.TempDir()
	d := results.NewDocument("arena sweep", []string{"mstar"}, results.Env{"host": "n1"})
	for k, gbps := range []float64{55, 55.2, 40} {
		d.Results = append(d.Results, results.Result{Name: "ceiling", Params: results.Params{"what": "h2d"},
			Env:     results.Env{"device": fmt.Sprintf("cuda:%d", k), "pcie": "gen5 x16 (max gen5 x16)"},
			Metrics: []results.Metric{{Name: "bandwidth", Unit: "GB/s", Better: results.HigherIsBetter, Samples: []float64{gbps}}}})
	}
	d.Finish()
	p := filepath.Join(dir, "fleet.json")
	if err := results.WriteFile(p, d); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runMstar(t, "report", "show", "--gpus", p)
	if code != exitOK || !strings.Contains(out, "per-GPU summary (3 GPUs)") || strings.Count(out, "FLAG: h2d ceiling 40.0 GB/s") != 1 {
		t.Errorf("exit %d: %s\n%s", code, stderr, out)
	}
	if _, stderr, code := runMstar(t, "report", "show", "--gpus", "--run", p); code != exitBadInput || !strings.Contains(stderr, "--gpus prints the per-GPU summary alone") {
		t.Errorf("--gpus --run: exit %d: %s", code, stderr)
	}
}
