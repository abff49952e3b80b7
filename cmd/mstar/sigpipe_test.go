package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
)

// A run whose stdout is a pipe closed by its reader (mstar … | head -1)
// still writes --out and exits 0: the writes to stdout are dropped, the
// run goes on. Every suite whose table is printed before --out is written.
func TestClosedStdoutKeepsOut(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"bench moe", []string{"bench", "moe", "--experts", "8", "--topk", "2", "--hidden", "256", "--inter", "128", "--batch", "1", "--rounds", "1", "--device", "cpu"}},
		{"arena sweep", []string{"arena", "sweep", "--device", "cpu", "--max-size", "4KiB", "--samples", "1", "--rounds", "1"}},
		{"ablate router", []string{"ablate", "router", "--layers", "1", "--tokens", "64", "--experts", "8", "--topk", "2", "--kernel-tokens", "0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "r.json")
			runErr, _ := runClosedStdout(t, append(c.args, "--out", out)...)
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
		})
	}
}

// A command that only prints (report show) exits 0 when its reader leaves,
// saying nothing about the pipe.
func TestClosedStdoutIsNotAnError(t *testing.T) {
	runErr, stderr := runClosedStdout(t, "report", "show", "../../reports/measured/h200/ceilings.json")
	if runErr != nil {
		t.Errorf("report show with a closed stdout: %v (stderr %q), want exit 0", runErr, stderr)
	}
	if strings.Contains(stderr, "broken pipe") {
		t.Errorf("stderr mentions the pipe: %q", stderr)
	}
}

// runClosedStdout runs mstar with args, its stdout a pipe whose reader is
// gone before the first write; it returns the run's error and its stderr.
func runClosedStdout(t *testing.T, args ...string) (error, string) {
	t.Helper()
	cmd := mstarProcess(args...)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	cmd.Stdout = w
	var stderr strings.Builder
	cmd.Stderr = &stderr
	runErr := cmd.Run()
	w.Close()
	return runErr, stderr.String()
}

// A stdout that cannot take the table (a full disk: /dev/full) fails the
// run, but after --out is written.
func TestFullStdoutKeepsOut(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full here: %v", err)
	}
	defer full.Close()
	out := filepath.Join(t.TempDir(), "r.json")
	cmd := mstarProcess("arena", "sweep", "--device", "cpu", "--max-size", "4KiB", "--samples", "1", "--rounds", "1", "--out", out)
	cmd.Stdout = full
	runErr := cmd.Run()
	if runErr == nil {
		t.Errorf("a table written to /dev/full: exit 0, want a failure")
	}
	if doc, err := results.ReadFile(out); err != nil || len(doc.Results) == 0 {
		t.Errorf("--out not written before the table failed: %v", err)
	}
}

// An --out that exists and is no regular file (a named pipe here; /dev/full
// was replaced by a JSON file) is refused before the run.
func TestOutNotARegularFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no mkfifo here: %v", err)
	}
	_, stderr, code := runMstar(t, "bench", "moe", "--experts", "8", "--topk", "2", "--hidden", "256", "--inter", "128",
		"--batch", "1", "--device", "cpu", "--out", fifo)
	if code != exitBadInput || !strings.Contains(stderr, "is not a regular file (a named pipe)") {
		t.Errorf("exit %d, stderr %q; want 2, not a regular file", code, stderr)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v", err)
	}
}
