package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
	"github.com/mstar-dev/mstar/scripts/peers"
)

// Without a python that has torch, --peers says why once and mstar's rows
// still run, print and are written.
func TestBenchMoEPeersWithoutTorch(t *testing.T) {
	dir := t.TempDir()
	py := filepath.Join(dir, "python")
	os.WriteFile(py, []byte("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n"), 0o755)
	t.Setenv(peers.EnvPython, py)
	out := filepath.Join(dir, "moe.json")
	stdout, stderr, code := runMstar(t, "bench", "moe", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32",
		"--batch", "1,3", "--device", "cpu", "--samples", "1", "--peers", "--out", out)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	why := py + " cannot import torch (ModuleNotFoundError: No module named 'torch')"
	unwrapped := strings.ReplaceAll(stdout, "\n#   ", " ") // warnings wrap at 100 columns
	if strings.Count(unwrapped, why) != 1 || !strings.Contains(stdout, "M=3 kernels: cpu:") {
		t.Errorf("stdout does not say why once, or lacks mstar's rows:\n%s", stdout)
	}
	d, err := results.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range d.Results {
		if r.Name == "moe" {
			n++
		}
	}
	if n != 2 || !strings.Contains(strings.Join(d.Warnings, "\n"), why) {
		t.Errorf("%d moe results, warnings %q", n, d.Warnings)
	}
}
