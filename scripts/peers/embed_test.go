package peers

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
)

func moeResult(impl string, batch string, us []float64, unmeasured string, pass bool) results.Result {
	r := results.Result{Name: "moe", Params: results.Params{"batch": batch, "impl": impl, "model": "m"}}
	lat := results.Metric{Name: "latency", Unit: "µs", Better: results.LowerIsBetter, Samples: us, Unmeasured: unmeasured}
	r.Metrics = []results.Metric{lat}
	if impl == "mstar" {
		r.Metrics = append(r.Metrics, results.Metric{Name: "pct_floor", Unit: "%", Better: results.HigherIsBetter, Samples: []float64{80}})
	}
	if unmeasured == "" {
		r.Gates = []results.Gate{{Name: "correctness", Pass: pass, Reason: "rel L2 0.5 against the float64 reference"}}
	}
	return r
}

func TestCompare(t *testing.T) {
	rs := []results.Result{
		moeResult("mstar", "1", []float64{10, 10, 10}, "", true),
		moeResult("mstar", "64", []float64{100, 100, 100}, "", true),
		moeResult("triton-ref", "1", []float64{12, 12, 12}, "", true),
		moeResult("triton-ref", "64", []float64{90, 90, 90}, "", true),
		moeResult("triton-fused_moe", "1", nil, "neither sglang nor vLLM is importable", true),
		moeResult("triton-fused_moe", "64", nil, "neither sglang nor vLLM is importable", true),
		moeResult("cublas-bmm", "1", []float64{5, 5, 5}, "", true),
		moeResult("cublas-bmm", "64", []float64{50, 50, 50}, "", true),
		moeResult("torch-loop", "1", []float64{8, 8, 8}, "", false), // fast but wrong
		moeResult("torch-loop", "64", []float64{200, 200, 200}, "", true),
	}
	c := Compare(rs)
	if strings.Join(c.Impls, ",") != "triton-ref,triton-fused_moe,cublas-bmm,torch-loop" || len(c.Ratios) != 2 {
		t.Fatalf("impls %v, %d batches", c.Impls, len(c.Ratios))
	}
	r1, r64 := c.Ratios[0], c.Ratios[1]
	if r1.Batch != 1 || math.Abs(r1.Against(0)-1.2) > 1e-9 || math.Abs(r64.Against(0)-0.9) > 1e-9 {
		t.Errorf("ratios vs triton-ref: %v at M=1, %v at M=64; want 1.2 and 0.9 (peer/mstar)", r1.Against(0), r64.Against(0))
	}
	// The best peer: measured, passing, not the bound.
	if r1.Peers[r1.Best].Impl != "triton-ref" || r64.Peers[r64.Best].Impl != "triton-ref" {
		t.Errorf("best at M=1 %s, at M=64 %s; want triton-ref (torch-loop failed its gate at M=1; cublas-bmm is a bound)", r1.Peers[r1.Best].Impl, r64.Peers[r64.Best].Impl)
	}
	if !math.IsNaN(r1.Against(1)) || r1.Peers[1].Unmeasured == "" {
		t.Errorf("an unmeasured peer has ratio %v", r1.Against(1))
	}
	var b strings.Builder
	c.Render(&b)
	out := b.String()
	for _, want := range []string{"cublas-bmm (bound) us", "1.20×", "0.90×", "8.0 FAIL", "unmeasured",
		"triton-fused_moe: neither sglang nor vLLM is importable\n", "torch-loop: correctness gate failed", "80%"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "neither sglang") != 1 {
		t.Errorf("the unmeasured reason is not said once:\n%s", out)
	}
}

// fakePython writes an executable that stands in for python: "-c" is the
// torch check (answer); a script run prints its arguments and writes doc to
// the --out argument.
func fakePython(t *testing.T, answer string, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "python")
	script := "#!/bin/sh\nif [ \"$1\" = -c ]; then\n" + answer + "\nfi\necho \"args: $*\"\nout=\nwhile [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=$2; shift; done\n" +
		"echo 'M=1 triton-ref 12.0 us'\ncat > \"$out\" <<'EOF'\n" + doc + "\nEOF\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunWithFakePython(t *testing.T) {
	mdoc := &results.Document{Format: results.Format, Schema: results.SchemaVersion, Suite: "bench moe",
		Results: []results.Result{moeResult("mstar", "1", []float64{10}, "", true)}}
	peerDoc := `{"format": "mstar.results", "schema": 1, "suite": "bench moe peers", "start": "2026-12-01T00:00:00Z", "end": "2026-12-01T00:00:01Z",
"env": {}, "results": [{"name": "moe", "params": {"batch": "1", "impl": "triton-ref"}, "metrics": [{"name": "latency", "unit": "µs", "better": "lower", "samples": [12]}],
"gates": [{"name": "correctness", "pass": true}]}]}`
	var log strings.Builder
	py := fakePython(t, "echo 2.9.0 13.0 True; exit 0", peerDoc)
	doc, err := Run(t.Context(), Options{Python: py, Log: &log}, mdoc, "routing.json", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Results) != 1 || doc.Results[0].Params["impl"] != "triton-ref" || !strings.Contains(log.String(), "peers: M=1 triton-ref 12.0 us") {
		t.Errorf("doc %+v, log %q", doc, log.String())
	}
	if strings.Contains(log.String(), "--min-copies") {
		t.Errorf("--min-copies passed without MinCopies: %q", log.String())
	}
	log.Reset()
	if _, err := Run(t.Context(), Options{Python: py, Log: &log, MinCopies: 3}, mdoc, "routing.json", ""); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "--min-copies 3") {
		t.Errorf("MinCopies 3 not passed on: %q", log.String())
	}

	for _, tt := range []struct{ name, answer, want string }{
		{"no torch", "echo \"ModuleNotFoundError: No module named 'torch'\" >&2; exit 1", "cannot import torch (ModuleNotFoundError: No module named 'torch')"},
		{"no gpu", "echo 2.9.0 None False; exit 0", "torch 2.9.0 (CUDA None) sees no GPU"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(t.Context(), Options{Python: fakePython(t, tt.answer, peerDoc)}, mdoc, "routing.json", "")
			var ue *UnavailableError
			if !errors.As(err, &ue) || !strings.Contains(ue.Reason, tt.want) {
				t.Errorf("err %v, want unavailable: %q", err, tt.want)
			}
		})
	}
	if _, err := Run(t.Context(), Options{Python: filepath.Join(t.TempDir(), "none")}, mdoc, "r.json", ""); !strings.Contains(err.Error(), "no python") {
		t.Errorf("missing python: %v", err)
	}
	// A script that dies without a document: its last lines say why.
	broken := fakePython(t, "echo 2.9.0 13.0 True; exit 0", "")
	os.WriteFile(broken, []byte("#!/bin/sh\n[ \"$1\" = -c ] && { echo 2.9.0 13.0 True; exit 0; }\necho 'Traceback: boom' >&2\nexit 1\n"), 0o755)
	if _, err := Run(t.Context(), Options{Python: broken}, mdoc, "r.json", ""); err == nil || !strings.Contains(err.Error(), "Traceback: boom") {
		t.Errorf("broken script: %v", err)
	}
}

func TestVisibleDevice(t *testing.T) {
	for _, tt := range []struct {
		cur  string
		n    int
		want string
	}{{"", 0, "0"}, {"", 3, "3"}, {"2,5", 1, "5"}, {"GPU-abc, GPU-def", 1, "GPU-def"}} {
		if got := visibleDevice(tt.cur, tt.n); got != tt.want {
			t.Errorf("visibleDevice(%q, %d) = %q, want %q", tt.cur, tt.n, got, tt.want)
		}
	}
}

// The embedded script compiles (python3 here has no torch; the syntax is
// what can be checked).
func TestScriptCompiles(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "moe_peers.py")
	os.WriteFile(p, Script, 0o644)
	cmd := exec.Command(py, "-m", "py_compile", p)
	cmd.Env = append(os.Environ(), "PYTHONPYCACHEPREFIX="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("py_compile: %v\n%s", err, out)
	}
	if out, err := exec.Command(py, p, "--selftest").CombinedOutput(); err != nil || !strings.Contains(string(out), "match") {
		t.Errorf("--selftest: %v\n%s", err, out)
	}
}

// cancelOn is a log that ends a run when the script prints a line.
type cancelOn struct {
	line   string
	cancel context.CancelFunc
	strings.Builder
}

func (c *cancelOn) Write(p []byte) (int, error) {
	if strings.Contains(string(p), c.line) {
		c.cancel()
	}
	return c.Builder.Write(p)
}

// An interrupted run keeps the batches the script finished: the script
// rewrites its document after each batch, and a stop between batches leaves
// the last one.
func TestRunInterruptedKeepsFinishedBatches(t *testing.T) {
	mdoc := &results.Document{Format: results.Format, Schema: results.SchemaVersion, Suite: "bench moe",
		Results: []results.Result{moeResult("mstar", "1", []float64{10}, "", true), moeResult("mstar", "2", []float64{12}, "", true)}}
	partial := `{"format": "mstar.results", "schema": 1, "suite": "bench moe peers", "start": "2026-12-01T00:00:00Z", "end": "2026-12-01T00:00:01Z",
"env": {}, "warnings": ["peers stopped early: 1 of 2 batches measured (up to M=1)"], "results": [{"name": "moe", "params": {"batch": "1", "impl": "triton-ref"},
"metrics": [{"name": "latency", "unit": "µs", "better": "lower", "samples": [12]}], "gates": [{"name": "correctness", "pass": true}]}]}`
	dir := t.TempDir()
	py := filepath.Join(dir, "python")
	// The second batch never ends; its child sleeps too (the whole process group is stopped).
	script := "#!/bin/sh\n[ \"$1\" = -c ] && { echo 2.9.0 13.0 True; exit 0; }\nout=\nwhile [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=$2; shift; done\n" +
		"cat > \"$out\" <<'EOF'\n" + partial + "\nEOF\necho 'batch 1 done'\nsleep 600 &\nwait\n"
	if err := os.WriteFile(py, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	log := &cancelOn{line: "batch 1 done", cancel: cancel}
	doc, err := Run(ctx, Options{Python: py, Log: log}, mdoc, "routing.json", "")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want the context's", err)
	}
	if doc == nil || len(doc.Results) != 1 || doc.Results[0].Params["batch"] != "1" {
		t.Fatalf("doc %+v, want batch 1's result", doc)
	}
	if len(doc.Warnings) != 1 || !strings.Contains(doc.Warnings[0], "1 of 2 batches") {
		t.Errorf("warnings %q, want the partial document's", doc.Warnings)
	}

	// Stopped before any batch: no document, the context's error.
	os.WriteFile(py, []byte("#!/bin/sh\n[ \"$1\" = -c ] && { echo 2.9.0 13.0 True; exit 0; }\necho started\nexec sleep 600\n"), 0o755)
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	doc, err = Run(ctx, Options{Python: py, Log: &cancelOn{line: "started", cancel: cancel}}, mdoc, "routing.json", "")
	if doc != nil || !errors.Is(err, context.Canceled) {
		t.Errorf("doc %v, err %v: want none and the context's error", doc, err)
	}
}
