package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/reports/results"
)

// A run killed by SIGKILL (the OOM killer, a cgroup kill) keeps what it
// finished: each result is in FILE.partial.ndjson as soon as it is done, and
// the report commands read that stream as an interrupted document.
func TestSIGKILLMidSweepKeepsFinishedBatches(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "moe.json")
	partial := out + partialSuffix
	// The last batch takes seconds on the CPU: the kill lands before it.
	cmd := mstarProcess("bench", "moe", "--device", "cpu",
		"--experts", "16", "--topk", "2", "--hidden", "512", "--inter", "512",
		"--batch", "1,2,4,8,16,4096", "--samples", "20", "--out", out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, _ := os.ReadFile(partial)
		if bytes.Contains(b, []byte(`"name":"moe"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no batch result streamed to %s within 60 s; stderr:\n%s", partial, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the run was not killed by SIGKILL (%v): it finished first", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatalf("%s exists: the run finished before the kill", out)
	}

	// report show reads FILE's stream (named or not), marks it interrupted.
	for _, arg := range []string{partial, out} {
		stdout, stderr, code := runMstar(t, "report", "show", arg)
		if code != exitOK || !strings.Contains(stdout, "moe") || !strings.Contains(stderr, results.WarnInterrupted) {
			t.Errorf("report show %s: exit %d, stderr %q; want exit 0, the moe rows and the interrupted warning:\n%s", arg, code, stderr, stdout)
		}
	}
	d, err := results.ReadFile(partial)
	if err != nil {
		t.Fatal(err)
	}
	batches := map[string]bool{}
	for _, r := range d.Results {
		if r.Name == "moe" {
			batches[r.Params["batch"]] = true
		}
	}
	if len(batches) == 0 || batches["4096"] {
		t.Errorf("streamed batches %v: want the finished small ones, not 4096", batches)
	}
	// diff and merge take it as well.
	if _, stderr, code := runMstar(t, "report", "merge", "-o", filepath.Join(dir, "m.json"), partial); code != exitOK {
		t.Errorf("report merge of the stream: exit %d: %s", code, stderr)
	}
	if _, stderr, code := runMstar(t, "report", "diff", partial, partial); code == exitBadInput || !strings.Contains(stderr, "interrupted") {
		t.Errorf("report diff of the stream: exit %d, stderr %q: want it read and marked interrupted", code, stderr)
	}
}

// A finished run leaves the document and no stream; a run refused for bad
// input leaves neither.
func TestPartialStreamRemoved(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "c.json")
	if _, stderr, code := runMstar(t, "bench", "ceilings", "--device", "cpu", "--quick", "--samples", "2", "--out", out); code != exitOK ||
		!strings.Contains(stderr, "wrote "+out) {
		t.Fatalf("bench ceilings: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(out + partialSuffix); err == nil {
		t.Errorf("%s left after a finished run", out+partialSuffix)
	}
	bad := filepath.Join(dir, "bad.json")
	if _, _, code := runMstar(t, "arena", "sweep", "--device", "cpu", "--min-size", "1TiB", "--max-size", "1TiB", "--out", bad); code != exitBadInput {
		t.Fatalf("sweep of 1 TiB: exit %d, want %d", code, exitBadInput)
	}
	if m, _ := filepath.Glob(bad + "*"); len(m) > 0 {
		t.Errorf("a refused run left %v", m)
	}
}
