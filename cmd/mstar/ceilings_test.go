package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	benchceil "github.com/mstar-dev/mstar/bench/ceilings"
	"github.com/mstar-dev/mstar/internal/gpu/cuda"
	"github.com/mstar-dev/mstar/reports/results"
)

func runCeilingsCLI(args ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(""), &out, &errb)
	return out.String(), unsay(errb.String()), code
}

func TestBenchCeilingsCPUWritesDocument(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ceilings.json")
	stdout, stderr, code := runCeilingsCLI("bench", "ceilings", "--device", "cpu", "--quick", "--samples", "2", "--out", path)
	if code != exitOK {
		t.Fatalf("exit %d; stderr: %s", code, stderr)
	}
	for _, want := range []string{"device: cpu", "d2d", "read", "h2d", "d2h", "gemm", "GB/s", "TFLOP/s"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	doc, err := results.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Suite != "bench ceilings" || len(doc.Results) != 5 || doc.Env["backend"] != "cpu" || doc.End.IsZero() {
		t.Errorf("document: suite %q, %d results, env %v, end %v", doc.Suite, len(doc.Results), doc.Env, doc.End)
	}
	if got := strings.Join(doc.Command, " "); !strings.Contains(got, "bench ceilings") {
		t.Errorf("command %q", got)
	}
	c, err := benchceil.CeilingsFrom(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, ce := range []benchceil.Ceiling{c.D2D, c.H2D, c.D2H, c.GEMM} {
		if !ce.Measured() || len(ce.Samples) != 2 {
			t.Errorf("ceiling %+v: want measured with 2 samples", ce)
		}
	}
	// Its own ceilings are what it measured: report diff judges them, and
	// a document against itself passes.
	if out, errOut, code := runMstar(t, "report", "diff", path, path); code != exitOK || !strings.Contains(out, "deciding: bandwidth, throughput") {
		t.Errorf("report diff of a ceilings document against itself: exit %d\n%s%s", code, out, errOut)
	}
}

func TestBenchCeilingsBadInput(t *testing.T) {
	_, gpuErr := cuda.DeviceCount()
	tests := []struct {
		name string
		args []string
		want string
		skip bool
	}{
		{"negative samples", []string{"bench", "ceilings", "--device", "cpu", "--samples", "-1"}, "--samples", false},
		{"bad device", []string{"bench", "ceilings", "--device", "tpu:0"}, "bad device", false},
		{"cuda without a driver", []string{"bench", "ceilings", "--device", "cuda:0"}, "no CUDA driver", gpuErr == nil},
		{"unknown bench suite", []string{"bench", "nope"}, "unknown command", false},
		{"stray argument", []string{"bench", "ceilings", "extra"}, "extra", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.skip {
				t.Skip("this machine has a CUDA driver")
			}
			_, stderr, code := runCeilingsCLI(tt.args...)
			if code != exitBadInput {
				t.Errorf("exit %d, want %d; stderr: %s", code, exitBadInput, stderr)
			}
			if !strings.Contains(stderr, tt.want) || strings.Contains(stderr, "goroutine ") {
				t.Errorf("stderr %q lacks %q (or shows a panic)", stderr, tt.want)
			}
		})
	}
}
