package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
)

// A run whose stdout is a pipe closed by its reader (mstar … | head -1)
// still writes --out: the writes to stdout fail, the run goes on.
func TestClosedStdoutKeepsOut(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.json")
	cmd := exec.Command(os.Args[0], "-test.run=^$", "--", "bench", "moe", "--experts", "8", "--topk", "2", "--hidden", "256",
		"--inter", "128", "--batch", "1", "--rounds", "1", "--device", "cpu", "--out", out)
	cmd.Env = append(os.Environ(), runAsMstarEnv+"=1")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // the reader is gone before the first write
	cmd.Stdout = w
	runErr := cmd.Run()
	w.Close()
	doc, err := results.ReadFile(out)
	if err != nil {
		t.Fatalf("--out not written (run: %v): %v", runErr, err)
	}
	if len(doc.Results) == 0 {
		t.Errorf("--out has no results")
	}
	if runErr != nil {
		t.Errorf("run with a closed stdout: %v, want exit 0", runErr)
	}
}
