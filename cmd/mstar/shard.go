package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mstar-dev/mstar/internal/shard"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
)

// addShardFlag adds --shard to a measuring command; what a cell is, the
// command's help says (cell names it in its own words).
func addShardFlag(cmd *cobra.Command, dst *string, cell string) {
	cmd.Flags().StringVar(dst, "shard", "", "run only part `I/N` of the cells (a cell is "+cell+"); N jobs 1/N … N/N cover the suite once, 'mstar report merge' joins them")
}

// shardPart is the record of shard s's part of a suite's ordered cells
// (named by names), for the document; nil for the whole suite.
func shardPart(s shard.Shard, names []string) *results.Shard {
	if s.Whole() {
		return nil
	}
	own := append([]string{}, shard.Pick(s, names)...) // [] rather than null when none
	return &results.Shard{Index: s.Index, Count: s.Count, Total: len(names), List: shard.ListKey(names), Cells: own}
}

// pickCells returns the run's part of the suite's ordered cells all (each
// named by name) and records it for the document.
func pickCells[T any](m *measuring, all []T, name func(T) string) []T {
	names := make([]string, len(all))
	for i, c := range all {
		names[i] = name(c)
	}
	m.part = shardPart(m.shard, names)
	if m.part != nil && m.note != nil {
		say(m.note, "%s", shardNote(m.suite, m.part))
	}
	return shard.Pick(m.shard, all)
}

// shardNote is what a sharded run says on stderr about its part.
func shardNote(suite string, p *results.Shard) string {
	if len(p.Cells) == 0 {
		return fmt.Sprintf("%s: shard %d/%d owns no cell (the suite has %s): nothing to run; its document still counts for the merge", suite, p.Index, p.Count, units.Plural(p.Total, "cell"))
	}
	return fmt.Sprintf("%s: shard %d/%d runs %d of %d cells", suite, p.Index, p.Count, len(p.Cells), p.Total)
}
