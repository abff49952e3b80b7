package shard

import (
	"slices"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/internal/badinput"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Shard
		bad  string // part of the error, "" when it parses
	}{
		{"", Shard{}, ""},
		{"1/1", Shard{1, 1}, ""},
		{"2/3", Shard{2, 3}, ""},
		{" 3 / 3 ", Shard{3, 3}, ""},
		{"0/3", Shard{}, "shards count from 1 (1/3 to 3/3)"},
		{"4/3", Shard{}, "I must be from 1 to N (3)"},
		{"1/0", Shard{}, "N must be from 1"},
		{"-1/3", Shard{}, "I must be from 1"},
		{"2", Shard{}, "want I/N"},
		{"a/3", Shard{}, "whole numbers"},
		{"1/3/4", Shard{}, "whole numbers"},
		{"1/1000000", Shard{}, "N must be from 1 to 100000"},
	} {
		got, err := Parse(tc.in)
		if tc.bad == "" {
			if err != nil || got != tc.want {
				t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.bad) {
			t.Errorf("Parse(%q): error %v, want one saying %q", tc.in, err, tc.bad)
		}
		if !badinput.Is(err) {
			t.Errorf("Parse(%q): %v is not bad input (exit 2)", tc.in, err)
		}
	}
}

// Every cell lands in exactly one shard, for every N, and the split is
// round-robin (balanced within one cell).
func TestPickCoversOnce(t *testing.T) {
	for cells := 0; cells <= 13; cells++ {
		all := make([]int, cells)
		for i := range all {
			all[i] = i
		}
		for n := 1; n <= 5; n++ {
			seen := make([]int, cells)
			for i := 1; i <= n; i++ {
				part := Pick(Shard{i, n}, all)
				if len(part) < cells/n || len(part) > cells/n+1 {
					t.Errorf("%d cells, shard %d/%d: %d cells, want %d or %d", cells, i, n, len(part), cells/n, cells/n+1)
				}
				for _, c := range part {
					seen[c]++
				}
			}
			for c, k := range seen {
				if k != 1 {
					t.Errorf("%d cells over %d shards: cell %d is in %d shards", cells, n, c, k)
				}
			}
		}
	}
	if got := Pick(Shard{}, []string{"a", "b"}); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("the whole suite picked %v", got)
	}
	if got := Pick(Shard{2, 3}, []string{"a", "b", "c", "d", "e"}); !slices.Equal(got, []string{"b", "e"}) {
		t.Errorf("2/3 of a..e = %v, want [b e]", got)
	}
}

func TestListKey(t *testing.T) {
	a := ListKey([]string{"batch=1", "batch=4"})
	if a != ListKey([]string{"batch=1", "batch=4"}) {
		t.Error("the same list keys differently")
	}
	for _, other := range [][]string{{"batch=4", "batch=1"}, {"batch=1"}, {"batch=1batch=4"}, {"batch=1", "batch=4", ""}} {
		if ListKey(other) == a {
			t.Errorf("%q keys as [batch=1 batch=4]", other)
		}
	}
	if s := (Shard{2, 3}).String(); s != "2/3" {
		t.Errorf("String = %q", s)
	}
}

// The g parts of a shard hold its cells exactly once, whole suite or not.
func TestSubSplitsAShard(t *testing.T) {
	all := make([]int, 23)
	for i := range all {
		all[i] = i
	}
	for _, s := range []Shard{{}, {1, 1}, {1, 3}, {3, 3}, {2, 4}} {
		for g := 1; g <= 4; g++ {
			var got []int
			for k := 1; k <= g; k++ {
				got = append(got, Pick(s.Sub(k, g), all)...)
			}
			slices.Sort(got)
			if want := Pick(s, all); !slices.Equal(got, want) {
				t.Errorf("shard %v split in %d: %v, want %v", s, g, got, want)
			}
		}
	}
	if s := (Shard{2, 3}).Sub(2, 4); s != (Shard{5, 12}) {
		t.Errorf("2/3 part 2 of 4 = %v, want 5/12", s)
	}
}
