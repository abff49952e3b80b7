// Package shard splits a suite's cells among N independent jobs, so that
// jobs 1/N … N/N together run every cell exactly once (--shard I/N).
//
// A cell is the unit a suite can run alone: one batch size of bench moe,
// one (mode, size) point of arena sweep, one (scenario, tier, size) cell of
// spill-matrix. The split is round-robin over the suite's ordered cell
// list (cell i belongs to shard i mod N + 1), so every shard gets small and
// large cells alike, and it depends on nothing but the list: the same
// command line on any machine picks the same cells.
package shard

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/mstar-dev/mstar/internal/badinput"
)

// Shard is part Index (1-based) of Count. The zero value is the whole
// suite.
type Shard struct {
	Index, Count int
}

// MaxCount bounds N: more shards than this is a typo, not a cluster.
const MaxCount = 100000

// Parse reads "I/N" (1 ≤ I ≤ N); "" is the whole suite. Errors are bad
// input.
func Parse(s string) (Shard, error) {
	if s == "" {
		return Shard{}, nil
	}
	i, n, ok := strings.Cut(s, "/")
	if !ok {
		return Shard{}, badinput.Errorf("--shard %q: want I/N, e.g. 2/3 (the second of three shards)", s)
	}
	index, err1 := strconv.Atoi(strings.TrimSpace(i))
	count, err2 := strconv.Atoi(strings.TrimSpace(n))
	switch {
	case err1 != nil || err2 != nil:
		return Shard{}, badinput.Errorf("--shard %q: I and N must be whole numbers, e.g. 2/3", s)
	case count < 1 || count > MaxCount:
		return Shard{}, badinput.Errorf("--shard %q: N must be from 1 to %d", s, MaxCount)
	case index == 0:
		return Shard{}, badinput.Errorf("--shard %q: shards count from 1 (1/%d to %d/%d)", s, count, count, count)
	case index < 1 || index > count:
		return Shard{}, badinput.Errorf("--shard %q: I must be from 1 to N (%d)", s, count)
	}
	return Shard{Index: index, Count: count}, nil
}

// Whole reports whether s is the whole suite (no --shard, or 1/1).
func (s Shard) Whole() bool { return s.Count <= 1 }

// String is "I/N", or "" for the whole suite.
func (s Shard) String() string {
	if s.Count == 0 {
		return ""
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// Owns reports whether cell i (0-based, of the suite's ordered list)
// belongs to s.
func (s Shard) Owns(i int) bool {
	return s.Whole() || i%s.Count == s.Index-1
}

// Pick returns the cells of all that belong to s, in order.
func Pick[T any](s Shard, all []T) []T {
	if s.Whole() {
		return all
	}
	var out []T
	for i, c := range all {
		if s.Owns(i) {
			out = append(out, c)
		}
	}
	return out
}

// ListKey names an ordered cell list by a short hash, so that merge can
// tell whether shards split the same list (the same sweep, the same
// defaults on each machine).
func ListKey(names []string) string {
	h := fnv.New64a()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// Sub is part k (1-based) of g of s: s's cells split again among g
// workers (one per GPU), as one shard of the whole suite (Count·g parts),
// so that a worker's document records its cells like any shard's.
func (s Shard) Sub(k, g int) Shard {
	i, n := 1, 1
	if !s.Whole() {
		i, n = s.Index, s.Count
	}
	return Shard{Index: i + n*(k-1), Count: n * g}
}
