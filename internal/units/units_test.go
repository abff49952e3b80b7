package units

import (
	"strings"
	"testing"
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
