package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
)

// Shards 1/3, 2/3, 3/3 merged hold exactly the whole run's results, each
// once, each keeping the run of the shard that measured it.
func TestShardsMergeToTheWholeRun(t *testing.T) {
	dir := t.TempDir()
	whole := filepath.Join(dir, "whole.json")
	if _, stderr, code := runMstar(t, sweepArgs(dir, "--out", whole)...); code != exitOK {
		t.Fatalf("whole sweep: exit %d: %s", code, stderr)
	}
	var shards []string
	runOfCell := map[string]string{} // "size" param -> run id
	for i := 1; i <= 3; i++ {
		p := filepath.Join(dir, fmt.Sprintf("shard-%d.json", i))
		_, stderr, code := runMstar(t, sweepArgs(dir, "--shard", fmt.Sprintf("%d/3", i), "--out", p)...)
		if code != exitOK || !strings.Contains(stderr, fmt.Sprintf("shard %d/3 runs", i)) {
			t.Fatalf("shard %d/3: exit %d: %s", i, code, stderr)
		}
		d, _ := keysOf(t, p)
		if d.Shard == nil || d.Shard.Index != i || d.Shard.Count != 3 || d.Shard.Total != 5 {
			t.Fatalf("shard %d/3 records %+v", i, d.Shard)
		}
		for _, r := range d.Results {
			runOfCell[r.Params["size"]] = d.RunID
		}
		shards = append(shards, p)
	}
	merged := filepath.Join(dir, "merged.json")
	_, stderr, code := runMstar(t, append([]string{"report", "merge", "-o", merged}, shards...)...)
	if code != exitOK || !strings.Contains(stderr, `shards 1/3 to 3/3 of "arena sweep" cover its 5 cells once`) {
		t.Fatalf("merge: exit %d: %s", code, stderr)
	}
	_, want := keysOf(t, whole)
	m, got := keysOf(t, merged)
	if !slices.Equal(got, want) {
		t.Errorf("merged keys differ from the whole run's:\n got %v\nwant %v", got, want)
	}
	if m.Shard != nil {
		t.Errorf("the merged document still says it is shard %+v", m.Shard)
	}
	for i := range m.Results {
		r := &m.Results[i]
		if run := m.RunOf(r); run != runOfCell[r.Params["size"]] {
			t.Errorf("%s: run %q, want the run of the shard that measured it (%q)", r.Key(), run, runOfCell[r.Params["size"]])
		}
	}
}

// Overlaps, gaps and mismatched shards are refused with exit 2 and one
// line that says which.
func TestMergeRefusesBadShards(t *testing.T) {
	dir := t.TempDir()
	run := func(name string, extra ...string) string {
		p := filepath.Join(dir, name)
		if _, stderr, code := runMstar(t, sweepArgs(dir, append(extra, "--out", p)...)...); code != exitOK {
			t.Fatalf("%s: exit %d: %s", name, code, stderr)
		}
		return p
	}
	s1, s2, s3 := run("s1.json", "--shard", "1/3"), run("s2.json", "--shard", "2/3"), run("s3.json", "--shard", "3/3")
	again2 := run("again2.json", "--shard", "2/3")
	whole := run("whole.json")
	other := run("other-n.json", "--shard", "1/2")
	edit := func(name, from string, change func(d *results.Document)) string {
		d, err := results.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		change(d)
		d.RunID += "-edited" // a run of its own, so that only the shards decide
		p := filepath.Join(dir, name)
		if err := results.WriteFile(p, d); err != nil {
			t.Fatal(err)
		}
		return p
	}
	d1, _ := keysOf(t, s1)
	stolen := edit("s2-steals.json", s2, func(d *results.Document) { d.Shard.Cells = append(d.Shard.Cells, d1.Shard.Cells[0]) })
	lost := edit("s2-loses.json", s2, func(d *results.Document) { d.Shard.Cells = d.Shard.Cells[:0] })
	cut := edit("s2-cut.json", s2, func(d *results.Document) { d.Warnings = append(d.Warnings, results.WarnInterrupted) })
	relisted := edit("s2-list.json", s2, func(d *results.Document) { d.Shard.List = "0000000000000000" })
	killed := edit("s2-killed.json", s2, func(d *results.Document) { d.Shard = nil }) // as its stream reads
	for _, tc := range []struct {
		name   string
		inputs []string
		want   string
	}{
		{"a shard missing", []string{s1, s3}, "shard 2/3 of \"arena sweep\""},
		{"a shard twice", []string{s1, s2, again2, s3}, "s2.json and " + again2 + " are both shard 2/3"},
		{"a cell in two shards", []string{s1, stolen, s3}, "is in " + s1 + " (shard 1/3) and in " + stolen},
		{"a shard's cells short", []string{s1, lost, s3}, "hold 3 of its 5 cells"},
		{"an interrupted shard", []string{s1, cut, s3}, cut + " (shard 2/3 of \"arena sweep\") did not complete"},
		{"a killed shard's stream", []string{s1, killed, s3}, killed + " is a run of --shard that did not finish"},
		{"another cell list", []string{s1, relisted, s3}, "split different cell lists"},
		{"another N", []string{s1, s2, s3, other}, "split different cell lists"},
		{"the whole run beside its shards", []string{s1, s2, s3, whole}, whole + " is a whole run of the command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runMstar(t, append([]string{"report", "merge", "-o", filepath.Join(dir, "m.json")}, tc.inputs...)...)
			// One refusal line (a reader's warning about the input may come before it).
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if last := lines[len(lines)-1]; code != exitBadInput || !strings.Contains(last, tc.want) || strings.Count(stderr, "mstar: merge:") != 1 {
				t.Errorf("exit %d, stderr %q; want exit 2 and one line with %q", code, stderr, tc.want)
			}
		})
	}
}
