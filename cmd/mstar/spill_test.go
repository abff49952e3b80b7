package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/internal/spill/tier"
	"github.com/mstar-dev/mstar/reports/results"
	"github.com/mstar-dev/mstar/trace"
)

const spillHolderEnv = "MSTAR_CMD_SPILL_HOLDER"

// The peer tier's holder is this test binary re-executed into the hidden
// spill-holder command.
func init() {
	if os.Getenv(spillHolderEnv) == "1" {
		os.Exit(run(append([]string{"spill-holder"}, afterDashes(os.Args[1:])...), os.Stdin, os.Stdout, os.Stderr))
	}
	spillHolder = tier.Holder{Argv: []string{os.Args[0], "-test.run=^$", "--"}, Env: []string{spillHolderEnv + "=1"}}
}

// quick are the flags of a fast matrix: 1 MiB pools, one timed sample, a
// fast regulator tick.
func quick(t *testing.T) []string {
	return []string{"spill-matrix", "--device", "cpu", "--sizes", "1MiB", "--blocks", "8", "--samples", "1",
		"--interval", "3ms", "--ttl", "10ms", "--shm-dir", t.TempDir()}
}

// timingGate: whether a gate's outcome depends on the machine's load. Tests
// never require those to pass.
func timingGate(name string) bool {
	return strings.HasPrefix(name, "bandwidth.") || name == "cost-model" || name == "tick-cost"
}

func TestSpillMatrixWritesDocumentAndTrace(t *testing.T) {
	dir := t.TempDir()
	out, tr := filepath.Join(dir, "spill.json"), filepath.Join(dir, "trace.jsonl")
	stdout, stderr, code := runMstar(t, append(quick(t), "--out", out, "--trace", tr, "--trace-every", "0")...)
	if code != exitOK && code != exitFailed && code != exitCannot {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"spill matrix, pool 1MiB in 8 blocks", "hibernate", "co-residency", "peer", "n/a", "tier ceilings"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("matrix lacks %q:\n%s", want, stdout)
		}
	}
	// One sample a figure: the gates judge a range, and the run says so.
	if !strings.Contains(stderr, "--samples 1: below 6 the bandwidth gates judge the samples' range") {
		t.Errorf("no warning about --samples 1:\n%s", stderr)
	}
	doc, err := results.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Suite != "spill-matrix" || doc.Env["backend"] != "cpu" {
		t.Errorf("suite %q env %v", doc.Suite, doc.Env)
	}
	scen, ceilings := map[string]bool{}, 0
	for _, r := range doc.Results {
		if r.Name == "spill-ceiling" {
			ceilings++
			continue
		}
		scen[r.Name] = true
		for _, g := range r.Gates {
			if !g.Pass && !timingGate(g.Name) {
				t.Errorf("%s: %s: %s", r.Key(), g.Name, g.Reason)
			}
		}
	}
	// Per tier: the pool's size, the partial cells' 25/50/75% shares, and
	// the uneven cell's shards moved at once.
	if ceilings != 5*5 || len(scen) != 9 {
		t.Errorf("%d ceilings and %d scenarios in the document, want %d and 9", ceilings, len(scen), 5*5)
	}
	if code == exitFailed && !strings.Contains(stderr, "failed their gates") {
		t.Errorf("exit 1 without saying why: %s", stderr)
	}
	// The trace: valid NDJSON, one session per ladder cell and curve.
	f, err := os.Open(tr)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sessions := map[string]bool{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		var rec trace.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("trace line %d: %v", n, err)
		}
		sessions[rec.Session] = true
	}
	if len(sessions) != 9 || !sessions["ladder/file/1MiB/spike"] {
		t.Errorf("trace sessions %v, want 3 tiers × 3 curves", sessions)
	}
	sum, stderr, code := runMstar(t, "trace", "summarize", tr)
	if code != exitOK || !strings.Contains(sum, "ladder/peer/1MiB/oscillation") || !strings.Contains(sum, "per cooldown") {
		t.Errorf("summarize: exit %d %s\n%s", code, stderr, sum)
	}
}

func TestSpillMatrixInject(t *testing.T) {
	for _, tt := range []struct {
		inject, cells, gate string
	}{
		{"short-restore", "hibernate/pageable", "reached"},
		{"corrupt", "partial/file", "identical"},
		{"stall", "hibernate/pinned", "bandwidth.spill"},
		{"stall", "ladder/pageable", "tick-cost"},
	} {
		t.Run(tt.inject+" "+tt.cells, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "r.json")
			stdout, stderr, code := runMstar(t, append(quick(t), "--cells", tt.cells, "--inject", tt.inject, "--out", out)...)
			if code != exitFailed {
				t.Fatalf("exit %d, want 1; stderr: %s", code, stderr)
			}
			if !strings.Contains(stdout+stderr, tt.gate) || !strings.Contains(stderr, "failed their gates") {
				t.Errorf("output does not name gate %s:\n%s\n%s", tt.gate, stdout, stderr)
			}
			doc, err := results.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, f := range doc.Failed() {
				if strings.Contains(f, ": "+tt.gate+": ") {
					found = true
				}
			}
			if !found {
				t.Errorf("document's failures %v lack gate %s", doc.Failed(), tt.gate)
			}
			if len(doc.Warnings) == 0 || !strings.Contains(doc.Warnings[0], tt.inject) {
				t.Errorf("document does not say faults were injected: %v", doc.Warnings)
			}
		})
	}
}

// oneCell is a one-cell matrix that would end in a blink, with extra flags.
func oneCell(extra ...string) []string {
	return append([]string{"spill-matrix", "--device", "cpu", "--cells", "hibernate/pageable", "--sizes", "1MiB"}, extra...)
}

func TestSpillMatrixBadUsage(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown fault", []string{"spill-matrix", "--inject", "meteor"}, "want short-restore, corrupt or stall"},
		{"no such cell", []string{"spill-matrix", "--device", "cpu", "--cells", "warp"}, "no cell matches"},
		{"ladder has no device column", []string{"spill-matrix", "--device", "cpu", "--cells", "ladder/device"}, "no cell matches"},
		{"bad size", []string{"spill-matrix", "--device", "cpu", "--sizes", "lots"}, "bad size"},
		{"bad tier", []string{"spill-matrix", "--tiers", "nvme"}, `unknown tier "nvme"`},
		{"a tier twice", []string{"spill-matrix", "--tiers", "pageable,pageable"}, "--tiers: pageable is listed twice"},
		{"a size twice", []string{"spill-matrix", "--device", "cpu", "--sizes", "1MiB,1024KiB"}, "--sizes: 1MiB is listed twice"},
		{"floor out of range", []string{"spill-matrix", "--floor", "2"}, "--floor"},
		{"no such device", []string{"spill-matrix", "--device", "cuda:7"}, "cuda:7"},
		{"holder without a size", []string{"spill-holder", "--size", "0"}, "--size must be positive"},
		// No value is quietly replaced by a default: each names its flag and range.
		{"negative blocks", oneCell("--blocks", "-3"), "--blocks -3: must be at least 1"},
		{"no samples", oneCell("--samples", "0"), "--samples 0: must be at least 1"},
		{"negative sessions", oneCell("--sessions", "-1"), "--sessions -1: must be at least 1"},
		{"negative cooldown", oneCell("--cooldown", "-5"), "--cooldown -5: must be at least 1"},
		{"negative interval", oneCell("--interval", "-1s"), "--interval -1s: must be more than 0s"},
		{"zero TTL", oneCell("--ttl", "0"), "--ttl 0s: must be more than 0s"},
		{"zero floor", oneCell("--floor", "0"), "--floor 0: must be in (0, 1]"},
		{"negative trace throttle", oneCell("--trace-every", "-1s"), "--trace-every -1s: must be at least 0s"},
		{"negative ping-pong tolerance", oneCell("--pingpong-tol", "-1"), "--pingpong-tol -1: must be at least 0"},
		// Bad input found up front (exit 2), not counted as a failed cell (exit 1).
		{"shm dir missing", []string{"spill-matrix", "--device", "cpu", "--cells", "hibernate/pinned", "--sizes", "1MiB", "--shm-dir", "/nonexistent"}, "--shm-dir /nonexistent: no such file or directory"},
		{"shm dir a file", []string{"spill-matrix", "--device", "cpu", "--cells", "hibernate/pinned", "--sizes", "1MiB", "--shm-dir", "/etc/passwd"}, "--shm-dir /etc/passwd: not a directory"},
		{"size beyond memory", []string{"spill-matrix", "--device", "cpu", "--cells", "hibernate/pageable", "--sizes", "1024TiB"}, "try smaller --sizes"},
		// Found before any cell or ceiling runs: a usage error, not FAIL.
		{"a billion blocks", []string{"spill-matrix", "--device", "cpu", "--blocks", "1000000000"}, "--sizes 64MiB with --blocks 1000000000: too small for the layout of hibernate/device/64MiB, hibernate/pinned/64MiB, hibernate/pageable/64MiB and 35 more cells"},
		{"pool too small for its layout", []string{"spill-matrix", "--device", "cpu", "--cells", "uneven/pageable", "--sizes", "64KiB"}, "--sizes 64KiB with --blocks 16: too small for the layout of uneven/pageable/64KiB"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runMstar(t, tt.args...)
			if code != exitBadInput || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tt.want)
			}
			if stdout != "" {
				t.Errorf("bad input, yet something ran (a matrix or its ceilings printed):\n%s", stdout)
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Errorf("crashed: %s", stderr)
			}
		})
	}
}

// The committed results of spill-matrix runs (the CPU acceptance run and the
// H200 run the README quotes) are valid documents whose every gate passed,
// and they hold every cell of the matrix.
func TestCommittedSpillResults(t *testing.T) {
	cpu, _ := filepath.Glob("../../reports/measured/spill/*.json")
	h200, _ := filepath.Glob("../../reports/measured/h200/spill*.json")
	paths := append(cpu, h200...)
	if len(cpu) == 0 || len(h200) == 0 {
		t.Fatalf("committed spill-matrix results missing: %d CPU, %d H200", len(cpu), len(h200))
	}
	for _, p := range paths {
		doc, err := results.ReadFile(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if doc.Suite != "spill-matrix" {
			t.Errorf("%s: suite %q", p, doc.Suite)
		}
		if f := doc.Failed(); len(f) > 0 {
			t.Errorf("%s: failing gates: %v", p, f)
		}
		if len(doc.Results) < 40 {
			t.Errorf("%s: %d results, want the whole matrix (43 cells)", p, len(doc.Results))
		}
	}
}

// With the default --samples every spill figure has a bounded 95% interval
// (5 samples gave ±∞ everywhere), and --help states the size default once.
func TestSpillMatrixDefaultSamplesGiveIntervals(t *testing.T) {
	out := filepath.Join(t.TempDir(), "spill.json")
	args := []string{"spill-matrix", "--device", "cpu", "--sizes", "1MiB", "--blocks", "8", "--cells", "hibernate/pageable",
		"--shm-dir", t.TempDir(), "--out", out}
	if _, stderr, code := runMstar(t, args...); code != exitOK && code != exitFailed && code != exitCannot {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	stdout, stderr, code := runMstar(t, "report", "show", "--metrics", "spill,restore", out)
	if code != exitOK || strings.Contains(stdout, "±∞") || !strings.Contains(stdout, "%") {
		t.Errorf("report show (exit %d, %s):\n%s", code, stderr, stdout)
	}
	help, _, _ := runMstar(t, "spill-matrix", "--help")
	if !strings.Contains(help, "(default 64MiB; 1GiB on CUDA)") || strings.Contains(help, `(default "64MiB")`) || !strings.Contains(help, "--out FILE") {
		t.Errorf("help:\n%s", help)
	}
}
