package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/arena"
	"github.com/mstar-dev/mstar/reports/results"
)

const (
	arenaWorkerEnv = "MSTAR_CMD_ARENA_WORKER"
	asMstarEnv     = "MSTAR_CMD_AS_MSTAR" // the test binary runs as mstar with the arguments after --
)

// Stress workers are this test binary re-executed into the hidden
// 'arena worker' command.
func init() {
	if os.Getenv(arenaWorkerEnv) == "1" {
		os.Exit(run(append([]string{"arena", "worker"}, afterDashes(os.Args[1:])...), os.Stdin, os.Stdout, os.Stderr))
	}
	if os.Getenv(asMstarEnv) == "1" {
		defer func() { os.Exit(run(afterDashes(os.Args[1:]), os.Stdin, os.Stdout, os.Stderr)) }()
	}
	arenaWorkerCmd.Exe = os.Args[0]
	arenaWorkerCmd.Args = []string{"-test.run=^$", "--"}
	arenaWorkerCmd.Env = []string{arenaWorkerEnv + "=1"}
}

func arenaShmDir(t *testing.T) string {
	t.Helper()
	// Socket directories go under $TMPDIR: a private one keeps the runs'
	// sweeps away from everyone else's.
	// (short: a socket's path must fit in 108 bytes).
	tmp, err := os.MkdirTemp("", "ms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	t.Setenv("TMPDIR", tmp)
	d, err := os.MkdirTemp("/dev/shm", "mstar-cmd-arena-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestArenaUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown subcommand", []string{"arena", "frob"}, "unknown command"},
		{"bad size", []string{"arena", "sweep", "--max-size", "huge"}, "--max-size"},
		{"bad plot format", []string{"arena", "sweep", "--plot", "x.gif"}, "--plot"},
		{"bad mode", []string{"arena", "sweep", "--device", "cpu", "--mode", "fast", "--max-size", "4KiB"}, "mode"},
		{"bad transport", []string{"arena", "stress", "--transport", "rdma"}, "--transport"},
		{"fan-out above consumers", []string{"arena", "stress", "--consumers", "2", "--fanout", "3"}, "--fanout 3: must be at most --consumers (2)"},
		{"bad device", []string{"arena", "sweep", "--device", "tpu"}, "--device"},
		{"segment below a page", []string{"arena", "stress", "--segment-size", "100"}, "--segment-size"},
		{"no segments", []string{"arena", "stress", "--max-segments", "0"}, "--max-segments"},
		{"negative segments", []string{"arena", "stress", "--max-segments", "-3"}, "--max-segments"},
		{"no producers", []string{"arena", "stress", "--producers", "0"}, "--producers"},
		{"no consumers", []string{"arena", "stress", "--consumers", "0"}, "--consumers"},
		{"arena bytes overflow", []string{"arena", "stress", "--producers", "1048576", "--max-segments", "1048576", "--segment-size", "1TiB"}, "overflows"},
		{"too few samples", []string{"arena", "sweep", "--device", "cpu", "--samples", "-1"}, "samples"},
		// No value is quietly replaced by a default: each names its flag and range.
		{"zero factor", sweepSmall("--factor", "0"), "--factor 0: must be at least 2"},
		{"factor one", sweepSmall("--factor", "1"), "--factor 1: must be at least 2"},
		{"zero samples", sweepSmall("--samples", "0"), "--samples 0: must be at least 1"},
		{"negative tensors", sweepSmall("--tensors", "-1"), "--tensors -1: must be at least 0"},
		{"negative PCIe rate", sweepSmall("--pcie-gbps", "-5"), "--pcie-gbps -5: must be at least 0 (0: from NVML)"},
		{"min size below 16 bytes", sweepSmall("--min-size", "8"), "--min-size 8: must be at least 16"},
		{"max size below min size", sweepSmall("--min-size", "64KiB"), "--max-size 16KiB: must be at least --min-size (64KiB)"},
		{"zero duration", []string{"arena", "stress", "--duration", "0"}, "--duration 0s --count 0"},
		{"negative duration", []string{"arena", "stress", "--duration", "-1s"}, "--duration -1s: must be at least 0s"},
		{"negative count", []string{"arena", "stress", "--count", "-1"}, "--count -1: must be at least 0"},
		{"zero fan-out", []string{"arena", "stress", "--fanout", "0"}, "--fanout 0: must be at least 1"},
		{"kill rate above 1", []string{"arena", "stress", "--kill-rate", "2"}, "--kill-rate 2: must be in [0, 1]"},
		{"zero in flight", []string{"arena", "stress", "--inflight", "0"}, "--inflight 0: must be at least 1"},
		{"zero interval", []string{"arena", "stress", "--interval", "0"}, "--interval 0s: must be more than 0s"},
		// Sizes that cannot fit are refused with the numbers, not a Go crash.
		{"stress too large for memory", []string{"arena", "stress", "--min-size", "1024TiB", "--max-size", "1024TiB"}, "try a smaller --max-size or fewer workers"},
		{"sweep too large for memory", sweepSmall("--min-size", "1024TiB", "--max-size", "1024TiB"), "try a smaller --max-size"},
		// A bad --shm-dir is refused before the run, naming the flag.
		{"sweep shm dir missing", sweepSmall("--shm-dir", "/nonexistent"), "--shm-dir /nonexistent: no such file or directory"},
		{"sweep shm dir a file", sweepSmall("--shm-dir", "/etc/passwd"), "--shm-dir /etc/passwd: not a directory"},
		{"stress shm dir missing", []string{"arena", "stress", "--shm-dir", "/nonexistent"}, "--shm-dir /nonexistent: no such file or directory"},
		{"clean shm dir a file", []string{"arena", "clean", "--shm-dir", "/etc/passwd"}, "--shm-dir /etc/passwd: not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runMstar(t, tc.args...)
			if code != exitBadInput || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 mentioning %q", code, stderr, tc.want)
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Errorf("stderr shows a Go panic: %s", stderr)
			}
		})
	}
}

// sweepSmall is a CPU sweep that would end in a blink, with extra flags.
func sweepSmall(extra ...string) []string {
	return append([]string{"arena", "sweep", "--device", "cpu", "--max-size", "16KiB", "--samples", "1"}, extra...)
}

func TestArenaSweepCPU(t *testing.T) {
	dir := t.TempDir()
	out, plot := filepath.Join(dir, "sweep.json"), filepath.Join(dir, "sweep.png")
	stdout, stderr, code := runMstar(t, "arena", "sweep", "--device", "cpu", "--mode", "all", "--max-size", "16KiB", "--samples", "2",
		"--shm-dir", arenaShmDir(t), "--out", out, "--plot", plot)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"# copy:", "# transport:", "# register:", "%pinned", "tensors/s", "vs file", "#wrong", "# note: CPU backend: the copy rows time memcpy"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	doc, err := results.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Suite != "arena sweep" || len(doc.Results) == 0 || len(doc.Failed()) != 0 {
		t.Fatalf("document: suite %q, %d results, failed %v", doc.Suite, len(doc.Results), doc.Failed())
	}
	for _, p := range []string{plot, filepath.Join(dir, "sweep-transport.png")} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("plot %s: %v", p, err)
		}
	}
	// The default three rounds: each sample knows its round; the memcpy
	// reference is context and the rates are derived from the time.
	if doc.Rounds != 3 || !strings.Contains(stdout, "in each of 3 rounds") {
		t.Errorf("rounds %d; stdout:\n%s", doc.Rounds, stdout)
	}
	for _, r := range doc.Results {
		if r.Name != "transport" {
			continue
		}
		if tm := r.Metric("time"); tm == nil || len(tm.Rounds) != 6 || tm.Rounds[5] != 2 {
			t.Errorf("%s time: %+v", r.Key(), tm)
		}
		if bw := r.Metric("bandwidth"); bw == nil || bw.DerivedFrom != "time" {
			t.Errorf("%s bandwidth: %+v", r.Key(), bw)
		}
		if memcpy := strings.HasPrefix(r.Params["transport"], "memcpy"); memcpy != (r.Role == results.RoleContext) {
			t.Errorf("%s: role %q", r.Key(), r.Role)
		}
	}
}

func TestArenaStressCLI(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "stress.json")
	stdout, stderr, code := runMstar(t, "arena", "stress", "--duration", "1500ms", "--producers", "2", "--consumers", "2",
		"--max-size", "256KiB", "--segment-size", "1MiB", "--max-segments", "2", "--interval", "250ms", "--kill-rate", "0.002",
		"--transport", "arena,file", "--shm-dir", arenaShmDir(t), "--seed", "7", "--out", out)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"PASS  no corrupted payloads", "PASS  no leaked slots", "PASS  no leftover files", "send->ack latency", "arena vs file:"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	// Progress shows on a terminal only, as every command's does.
	if strings.Contains(stderr, "tensors/s") {
		t.Errorf("progress lines on stderr that is not a terminal:\n%s", stderr)
	}
	doc, err := results.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Results) != 2 || doc.Results[0].Params["transport"] != "arena" || doc.Results[1].Params["transport"] != "file" {
		t.Fatalf("results: %+v", doc.Results)
	}
	for _, r := range doc.Results {
		if !r.Passed() || r.Metric("latency_p99") == nil {
			t.Errorf("%s: gates %v", r.Key(), r.Gates)
		}
	}
}

func TestArenaClean(t *testing.T) {
	dir := arenaShmDir(t)
	orphan := arena.Name{Kind: arena.KindSegment, Entity: "gone", PID: 999999999, Token: "0123456789abcdef"}.String()
	if err := os.WriteFile(filepath.Join(dir, orphan), make([]byte, 100), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, _, code := runMstar(t, "arena", "clean", "--shm-dir", dir, "--dry-run")
	if code != exitOK || !strings.Contains(stdout, "would remove  "+orphan+" (orphan)") ||
		!strings.Contains(stdout, "dry run: 1 would be removed, 0 in use, 0 left alone") {
		t.Fatalf("dry run: exit %d\n%s", code, stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, orphan)); err != nil {
		t.Fatal("the dry run removed the orphan")
	}
	stdout, _, code = runMstar(t, "arena", "clean", "--shm-dir", dir)
	if code != exitOK || !strings.Contains(stdout, "removed  "+orphan) {
		t.Fatalf("clean: exit %d\n%s", code, stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, orphan)); !os.IsNotExist(err) {
		t.Fatal("the orphan is still there")
	}
	if _, stderr, code := runMstar(t, "arena", "clean", "--shm-dir", filepath.Join(dir, "missing")); code != exitBadInput {
		t.Fatalf("missing directory: exit %d, %s", code, stderr)
	}
}

// An interrupted stress run could not complete: exit 3, not a failed gate.
func TestArenaStressInterrupted(t *testing.T) {
	interruptAtOnce(t)
	out := filepath.Join(t.TempDir(), "stress.json")
	_, stderr, code := runMstar(t, "arena", "stress", "--duration", "1m", "--producers", "1", "--consumers", "1", "--fanout", "1",
		"--max-size", "64KiB", "--segment-size", "1MiB", "--max-segments", "2", "--shm-dir", arenaShmDir(t), "--out", out)
	if code != exitBroken || !strings.Contains(stderr, "interrupted") {
		t.Fatalf("exit %d, stderr %q; want exit 3 saying it was interrupted", code, stderr)
	}
	doc, err := results.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(doc.Warnings, results.WarnInterrupted) {
		t.Errorf("document warnings %q do not say the run was interrupted", doc.Warnings)
	}
}
