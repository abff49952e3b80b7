package reports

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mstar-dev/mstar/internal/badinput"
)

// shardFreeFlags are the flags that may differ between the shards of one
// sweep: where each writes and runs, not what it measures.
var shardFreeFlags = []string{"shard", "out", "o", "dir", "device", "devices", "plot", "trace", "heatmap", "routing-out", "dump-dir"}

// shardFreeSwitches are such flags without a value.
var shardFreeSwitches = []string{"replicate"}

// SweepOf is the command line of a sharded run without the flags that
// differ between its shards: the shards of one sweep share it.
func SweepOf(command []string) string {
	var kept []string
	for i := 0; i < len(command); i++ {
		a := command[i]
		name, _, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case !strings.HasPrefix(a, "-") || a == "-" || a == "--":
		case slices.Contains(shardFreeSwitches, name):
			continue
		case slices.Contains(shardFreeFlags, name):
			if !inline && i+1 < len(command) {
				i++ // its value
			}
			continue
		case strings.HasPrefix(a, "-o") && !strings.HasPrefix(a, "--"): // -oFILE
			continue
		}
		kept = append(kept, a)
	}
	return strings.Join(kept, " ")
}

// CheckShards refuses sharded documents (Document.Shard) that would not
// join into whole sweeps: a cell in two shards or a shard given twice
// (overlap), a shard I of N missing or interrupted (gap), shards of one
// command that split different cell lists, and a whole run given beside
// the shards of its own command. name labels document i in messages (nil:
// "document i+1"). Documents without a shard pass as they are. Refusals
// are bad input; what passed is said in one note per sweep.
func CheckShards(docs []*Document, name func(i int) string) (notes []string, err error) {
	if name == nil {
		name = func(i int) string { return fmt.Sprintf("document %d", i+1) }
	}
	type sweep struct {
		docs  []int // by shard index - 1; -1 when missing
		first int   // the document that opened it
	}
	sweeps := map[string]*sweep{}
	var order []string
	for i, d := range docs {
		s := d.Shard
		if s == nil {
			continue
		}
		key := d.Suite + "\x00" + SweepOf(d.Command)
		w := sweeps[key]
		if w == nil {
			w = &sweep{docs: slices.Repeat([]int{-1}, s.Count), first: i}
			sweeps[key] = w
			order = append(order, key)
		}
		f := docs[w.first].Shard
		if s.Count != f.Count || s.Total != f.Total || s.List != f.List {
			return nil, badinput.Errorf("merge: %s (shard %d/%d of %d cells) and %s (shard %d/%d of %d cells) are shards of one command that split different cell lists (a default that differs between machines? give the cells explicitly)",
				name(w.first), f.Index, f.Count, f.Total, name(i), s.Index, s.Count, s.Total)
		}
		if k := w.docs[s.Index-1]; k >= 0 {
			return nil, badinput.Errorf("merge: %s and %s are both shard %d/%d of %q: their cells overlap", name(k), name(i), s.Index, s.Count, d.Suite)
		}
		w.docs[s.Index-1] = i
	}
	for i, d := range docs {
		if d.Shard != nil {
			continue
		}
		if slices.ContainsFunc(d.Command, func(a string) bool { return a == "--shard" || strings.HasPrefix(a, "--shard=") }) {
			// A run of --shard records its part when it finishes: this one
			// did not (the stream of a killed run).
			return nil, badinput.Errorf("merge: %s is a run of --shard that did not finish (it records no part): run that shard again", name(i))
		}
		if w := sweeps[d.Suite+"\x00"+SweepOf(d.Command)]; w != nil {
			return nil, badinput.Errorf("merge: %s is a whole run of the command that %s is a shard of: their cells overlap", name(i), name(w.first))
		}
	}
	for _, key := range order {
		w := sweeps[key]
		f := docs[w.first]
		var missing []string
		for j, k := range w.docs {
			if k < 0 {
				missing = append(missing, fmt.Sprintf("%d/%d", j+1, len(w.docs)))
			}
		}
		if len(missing) > 0 {
			return nil, badinput.Errorf("merge: shard %s of %q (%s) missing: the merge would have a gap", strings.Join(missing, ", "), f.Suite, SweepOf(f.Command))
		}
		owner := map[string]int{}
		for _, k := range w.docs {
			d := docs[k]
			if d.Interrupted() {
				return nil, badinput.Errorf("merge: %s (shard %d/%d of %q) did not complete: its cells are incomplete; run that shard again", name(k), d.Shard.Index, d.Shard.Count, d.Suite)
			}
			for _, c := range d.Shard.Cells {
				if j, ok := owner[c]; ok {
					return nil, badinput.Errorf("merge: cell %s is in %s (shard %d/%d) and in %s (shard %d/%d): the shards overlap", c, name(j), docs[j].Shard.Index, d.Shard.Count, name(k), d.Shard.Index, d.Shard.Count)
				}
				owner[c] = k
			}
		}
		if len(owner) != f.Shard.Total {
			return nil, badinput.Errorf("merge: the %d shards of %q hold %d of its %d cells: the merge would have a gap", len(w.docs), f.Suite, len(owner), f.Shard.Total)
		}
		notes = append(notes, fmt.Sprintf("shards 1/%d to %d/%d of %q cover its %d cells once", len(w.docs), len(w.docs), len(w.docs), f.Suite, f.Shard.Total))
	}
	return notes, nil
}
