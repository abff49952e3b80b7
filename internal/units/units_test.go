package units

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{64 << 20: "64 MiB", 1 << 30: "1 GiB", 4 << 10: "4 KiB", 4097: "4097 B", 3 << 29: "1536 MiB", 0: "0 B"} {
		if got := Size(n, " "); got != want {
			t.Errorf("Size(%d, \" \") = %q, want %q", n, got, want)
		}
	}
	if got := Size(64<<20, ""); got != "64MiB" {
		t.Errorf("Size(64 MiB, \"\") = %q", got)
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{512: "512 B", -512: "-512 B", 1536: "1.5 KiB", 160 << 20: "160 MiB", 3 << 29: "1.5 GiB", -(1 << 20): "-1 MiB", 1 << 60: "1 EiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"4096", 4096}, {"4KiB", 4 << 10}, {"64MiB", 64 << 20}, {"1GiB", 1 << 30}, {"1g", 1 << 30},
		{"512K", 512 << 10}, {"1.5KiB", 1536}, {"1.5GiB", 3 << 29}, {" 2 MiB ", 2 << 20},
	} {
		if got, err := Parse(tc.in); err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "x", "0", "-1KiB", "1.3B", "lots", "4KB2", "2PiB"} {
		if _, err := Parse(bad); err == nil || !strings.Contains(err.Error(), "bad size") {
			t.Errorf("Parse(%q): %v, want a bad size error", bad, err)
		}
	}
	for _, n := range []int64{64 << 20, 1 << 30, 4097} { // what Size prints reads back
		if got, err := Parse(Size(n, "")); err != nil || got != n {
			t.Errorf("Parse(Size(%d)) = %d, %v", n, got, err)
		}
	}
}

func TestWrap(t *testing.T) {
	squeeze := func(s string) string { return strings.Join(strings.Fields(s), "") }
	for _, tc := range []struct {
		in, indent string
		width      int
		want       string
	}{
		{"short stays", "  ", 20, "short stays"},
		{"one two three four five", "  ", 10, "one two\n  three\n  four\n  five"},
		// Each line of a message wraps on its own; its breaks stay.
		{"first line is long enough\nsecond", "> ", 12, "first line\n> is long\n> enough\nsecond"},
		// A long word breaks after its "/" or ",".
		{"see a/b/c/d/e", "  ", 8, "see a/b/\n  c/d/e"},
		{"k moe_align+moe_scan+moe_scatter", "  ", 20, "k moe_align+\n  moe_scan+\n  moe_scatter"},
		// A word longer than a line gets a line of its own, never an
		// empty line before it.
		{"x abcdefghijkl y", "    ", 6, "x\n    abcdefghijkl\n    y"},
		{"width 0 leaves it", "", 0, "width 0 leaves it"},
	} {
		got := Wrap(tc.in, tc.width, tc.indent)
		if got != tc.want {
			t.Errorf("Wrap(%q, %d, %q) =\n%q, want\n%q", tc.in, tc.width, tc.indent, got, tc.want)
		}
		if tc.indent != "" && squeeze(strings.ReplaceAll(got, "\n"+tc.indent, "\n")) != squeeze(tc.in) {
			t.Errorf("Wrap(%q) lost or added words: %q", tc.in, got)
		}
	}
}

func TestComment(t *testing.T) {
	long := strings.Repeat("µs and ±95% ", 20)
	got := Comment(long)
	lines := strings.Split(got, "\n")
	if len(lines) < 3 {
		t.Fatalf("Comment of %d runes gave %d lines", utf8.RuneCountInString(long), len(lines))
	}
	for i, l := range lines {
		if n := utf8.RuneCountInString(l); n > TextWidth {
			t.Errorf("line %d is %d runes: %q", i, n, l)
		}
		if want := "#   "; i > 0 && !strings.HasPrefix(l, want) {
			t.Errorf("continuation line %d lacks %q: %q", i, want, l)
		}
	}
	if !strings.HasPrefix(got, "# µs") {
		t.Errorf("Comment = %q, want it to start with \"# \"", got)
	}
}
