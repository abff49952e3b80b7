package main

import (
	"path/filepath"
	"slices"
	"testing"
)

// The table a measuring command prints is drawn from the results it writes:
// 'report show --run' of the file prints it again, byte for byte.
func TestLiveTableIsReportShowRun(t *testing.T) {
	shm := arenaShmDir(t)
	for _, tc := range []struct {
		suite string
		args  []string
		codes []int // exit codes the run may end with besides 0 (timing gates)
	}{
		{"bench ceilings", []string{"bench", "ceilings", "--device", "cpu", "--quick", "--samples", "2"}, nil},
		{"bench moe", []string{"bench", "moe", "--device", "cpu", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32",
			"--batch", "1,3", "--samples", "2", "--stages"}, nil},
		{"arena sweep", []string{"arena", "sweep", "--device", "cpu", "--mode", "all", "--max-size", "16KiB", "--samples", "2", "--shm-dir", shm}, nil},
		{"arena stress", []string{"arena", "stress", "--duration", "0", "--count", "20", "--producers", "1", "--consumers", "1", "--fanout", "1",
			"--max-size", "16KiB", "--segment-size", "1MiB", "--max-segments", "2", "--shm-dir", shm}, nil},
		{"ablate router", append([]string{"ablate", "router", "--layers", "2", "--tokens", "64",
			"--kernel-tokens", "8", "--kernel-samples", "2"}, tinyModel...), nil},
		{"tune moe", []string{"tune", "moe", "--device", "cpu", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32",
			"--batch", "1,3", "--samples", "2", "--rounds", "1", "--dir", t.TempDir()}, nil},
		{"spill-matrix", append(quick(t), "--cells", "hibernate,partial/file,ladder/file,abort/pageable", "--tiers", "pageable,file"),
			[]int{exitFailed, exitCannot}},
	} {
		t.Run(tc.suite, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "r.json")
			live, stderr, code := runMstar(t, append(tc.args, "--out", out)...)
			if code != exitOK && !slices.Contains(tc.codes, code) {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			shown, stderr, code := runMstar(t, "report", "show", "--run", out)
			if code != exitOK {
				t.Fatalf("report show --run: exit %d: %s", code, stderr)
			}
			if live != shown {
				t.Errorf("the live table and report show --run differ:\n--- live\n%s\n--- report show --run\n%s", live, shown)
			}
			if len(live) < 100 {
				t.Errorf("live table too short to be the suite's:\n%s", live)
			}
		})
	}
}
