package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mstar-dev/mstar/reports"
)

// interruptWith makes the commands' interrupt context ctx for one test.
func interruptWith(t *testing.T, ctx context.Context) {
	t.Helper()
	orig := interruptContext
	t.Cleanup(func() { interruptContext = orig })
	interruptContext = func() (context.Context, context.CancelFunc) { return ctx, func() {} }
}

// interruptAtOnce is as if SIGINT came as the run started.
func interruptAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	interruptWith(t, ctx)
}

// Every measuring command stops on an interrupt with exit 3, says so, and
// still writes its results document, marked as interrupted.
func TestInterruptedCommandsWriteTheirDocument(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		stdout string
	}{
		{"bench ceilings", []string{"bench", "ceilings", "--device", "cpu", "--quick"}, "ceiling"},
		{"bench moe", []string{"bench", "moe", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32", "--batch", "1,9", "--device", "cpu"}, "# mstar bench moe"},
		{"ablate router", append([]string{"ablate", "router", "--tokens", "128", "--layers", "2"}, tinyModel...), "# qwen3-30b-a3b"},
		{"arena sweep", []string{"arena", "sweep", "--device", "cpu", "--max-size", "16KiB", "--shm-dir", arenaShmDir(t)}, "# arena sweep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			interruptAtOnce(t)
			out := filepath.Join(t.TempDir(), "out.json")
			stdout, stderr, code := runMstar(t, append(tc.args, "--out", out)...)
			if code != exitBroken || !strings.Contains(stderr, tc.name+" ") || !strings.Contains(stderr, "interrupted before it completed") {
				t.Fatalf("exit %d, stderr %q; want exit 3 saying %s was interrupted", code, stderr, tc.name)
			}
			if !strings.Contains(stdout, tc.stdout) {
				t.Errorf("stdout lacks %q:\n%s", tc.stdout, stdout)
			}
			doc, err := reports.ReadFile(out)
			if err != nil {
				t.Fatalf("no results document after the interrupt: %v", err)
			}
			if !slices.Contains(doc.Warnings, reports.WarnInterrupted) {
				t.Errorf("document warnings %q do not say the run was interrupted", doc.Warnings)
			}
		})
	}
}

// Interrupted between batches, bench moe prints and writes the batches done.
// The interrupt comes while the first batch's output is being dumped into a
// FIFO larger than a pipe holds: that batch is then done measuring, and the
// next has not begun.
func TestBenchMoEInterruptedKeepsFinishedBatches(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	interruptWith(t, ctx)
	dir := t.TempDir()
	dump := filepath.Join(dir, "dump")
	if err := os.Mkdir(dump, 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dump, "out-M4096.bf16") // 4096 tokens × 128 × 2 bytes = 1 MiB
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	read := make(chan error, 1)
	go func() {
		f, err := os.Open(fifo) // waits for the dump to open it
		if err == nil {
			_, err = f.Read(make([]byte, 1)) // the writer is now inside its 1 MiB write
			cancel()
			if err == nil {
				_, err = io.Copy(io.Discard, f)
			}
			f.Close()
		}
		read <- err
	}()
	out := filepath.Join(dir, "moe.json")
	stdout, stderr, code := runMstar(t, "bench", "moe", "--experts", "4", "--topk", "2", "--hidden", "128", "--inter", "16",
		"--batch", "4096,8192", "--samples", "1", "--device", "cpu", "--dump-dir", dump, "--out", out)
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if code != exitBroken || !strings.Contains(stderr, "1 of 2 batches done") {
		t.Fatalf("exit %d, stderr %q; want exit 3 with 1 of 2 batches done", code, stderr)
	}
	if !strings.Contains(stdout, "M=4096 kernels") || strings.Contains(stdout, "M=8192") {
		t.Errorf("stdout should have batch 4096 and not 8192:\n%s", stdout)
	}
	doc, err := reports.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var batches []string
	for _, r := range doc.Results {
		if r.Name == "moe" {
			batches = append(batches, r.Params["batch"])
		}
	}
	if !slices.Equal(batches, []string{"4096"}) || !slices.Contains(doc.Warnings, reports.WarnInterrupted) {
		t.Errorf("document has batches %v and warnings %q; want batch 4096 and the interrupted warning", batches, doc.Warnings)
	}
}
