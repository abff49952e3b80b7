package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
)

// scripts/ab-builds.sh alternates the two sides' runs, merges each side's
// runs into one document (its rounds) and exits with report diff's code:
// 0 for two runs of one build, 1 when B lost a result A has, 2 for bad
// input before anything runs.
func TestABBuildsScript(t *testing.T) {
	path := launcherPath(t, nil)
	mstar := filepath.Join(strings.SplitN(path, string(os.PathListSeparator), 2)[0], "mstar")
	script := filepath.Join(scripts, "ab-builds.sh")
	bench := []string{"bench", "moe", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32", "--device", "cpu", "--rounds", "1", "--samples", "6"}
	exitOf := func(err error) int {
		if err == nil {
			return 0
		}
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		t.Fatalf("running the script: %v", err)
		return -1
	}

	// The A/A pair is judged on rel_l2 alone (-d): its latencies are this
	// host's noise, which on a busy CI machine can pass any threshold,
	// and the plumbing under test is the same.
	dir := filepath.Join(t.TempDir(), "same")
	args := append([]string{"-n", "2", "-o", dir, "-a", mstar, "-b", mstar, "-d", "--metrics rel_l2", "--"}, append(bench, "--batch", "1,2")...)
	out, err := runScript(t, nil, script, args...)
	if code := exitOf(err); code != 0 {
		t.Fatalf("A/A: exit %d\n%s", code, out)
	}
	summary, err := os.ReadFile(filepath.Join(dir, "summary.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// Alternated: a, b, a, b.
	var order []string
	for _, l := range strings.Split(strings.TrimSpace(string(summary)), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == "run" {
			order = append(order, f[2])
		}
	}
	if strings.Join(order, "") != "abab" {
		t.Errorf("runs in the order %v, want a b a b\n%s", order, summary)
	}
	for _, side := range []string{"a", "b"} {
		doc, err := results.ReadFile(filepath.Join(dir, side+".json"))
		if err != nil {
			t.Fatalf("merged %s: %v", side, err)
		}
		runs := map[string]bool{}
		for _, r := range doc.Results {
			runs[r.Run] = true
		}
		if len(runs) != 2 {
			t.Errorf("merged %s holds %d runs, want 2", side, len(runs))
		}
	}

	// B without batch 2: the diff names the missing result and fails.
	dir = filepath.Join(t.TempDir(), "lost")
	fake := filepath.Join(t.TempDir(), "mstar-b")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nargs=\"\"\nfor a in \"$@\"; do [ \"$a\" = 1,2 ] && a=1; args=\"$args '$a'\"; done\neval exec \""+mstar+"\" $args\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"-n", "2", "-o", dir, "-a", mstar, "-b", fake, "--"}, append(bench, "--batch", "1,2")...)
	out, err = runScript(t, nil, script, args...)
	if code := exitOf(err); code != 1 || !strings.Contains(out, "batch=2") {
		t.Errorf("B lost batch 2: exit %d (want 1, naming it)\n%s", code, out)
	}

	for _, bad := range [][]string{
		{"-n", "1", "-a", mstar, "-b", mstar, "--", "bench", "moe"},
		{"-n", "2", "-a", mstar, "--", "bench", "moe"},
		{"-n", "2", "-a", mstar, "-b", mstar},
	} {
		out, err := runScript(t, nil, script, bad...)
		if code := exitOf(err); code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", bad, code, out)
		}
	}
}
