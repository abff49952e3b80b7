package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
)

// sweepArgs is a CPU arena sweep of five cells (transport at 4 KiB to
// 64 KiB) that takes well under a second.
func sweepArgs(dir string, extra ...string) []string {
	return append([]string{"arena", "sweep", "--device", "cpu", "--mode", "transport", "--min-size", "4KiB", "--max-size", "64KiB",
		"--factor", "2", "--samples", "1", "--rounds", "1", "--tensors", "16", "--shm-dir", dir}, extra...)
}

func keysOf(t *testing.T, path string) (*results.Document, []string) {
	t.Helper()
	d, err := results.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range d.Results {
		keys = append(keys, r.Key())
	}
	slices.Sort(keys)
	return d, keys
}

// Every suite with --shard records its part, also when it owns no cell
// (its document still counts for the merge), and refuses a bad --shard.
func TestEverySuiteShards(t *testing.T) {
	dir := t.TempDir()
	tiny := []string{"--experts", "4", "--topk", "2", "--hidden", "32", "--inter", "16", "--batch", "1", "--device", "cpu"}
	for _, tc := range []struct {
		name  string
		args  []string
		total int
	}{
		{"bench moe", append([]string{"bench", "moe"}, tiny...), 1},
		{"tune moe", append(append([]string{"tune", "moe"}, tiny...), "--dir", dir), 1},
		{"arena sweep", sweepArgs(dir), 5},
		{"arena stress", []string{"arena", "stress", "--transport", "arena", "--duration", "1s", "--shm-dir", dir}, 1},
		{"ablate router", []string{"ablate", "router", "--tokens", "64", "--layers", "1", "--kernel-tokens", "0", "--routers", "hash"}, 2},
		{"spill-matrix", []string{"spill-matrix", "--device", "cpu", "--cells", "hibernate/pageable", "--sizes", "1MiB", "--shm-dir", dir}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Shard 9/9 of a suite of fewer cells owns none: nothing runs.
			out := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".json")
			_, stderr, code := runMstar(t, append(tc.args, "--shard", "9/9", "--out", out)...)
			if code != exitOK || !strings.Contains(stderr, "shard 9/9 owns no cell") {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			d, err := results.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if s := d.Shard; s == nil || s.Index != 9 || s.Count != 9 || s.Total != tc.total || len(s.Cells) != 0 || len(d.Results) != 0 {
				t.Errorf("document: shard %+v, %d results; want 9/9 of %d cells, none run", s, len(d.Results), tc.total)
			}
			_, stderr, code = runMstar(t, append(tc.args, "--shard", "0/3")...)
			if code != exitBadInput || !strings.Contains(stderr, "shards count from 1") {
				t.Errorf("--shard 0/3: exit %d: %s", code, stderr)
			}
		})
	}
}
