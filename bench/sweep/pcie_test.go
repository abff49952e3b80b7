package sweep

import (
	"math"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/internal/envinfo"
)

func TestPCIeCeiling(t *testing.T) {
	tests := []struct {
		name  string
		link  envinfo.PCIe
		known bool
		want  float64
		note  string
	}{
		{"gen5 x16 at idle downtrained", envinfo.PCIe{Gen: 1, Width: 16, MaxGen: 5, MaxWidth: 16}, true, 63.0, "gen5 x16"},
		{"gen4 x8", envinfo.PCIe{Gen: 4, Width: 8, MaxGen: 4, MaxWidth: 8}, true, 15.75, "gen4 x8"},
		{"no maximum reported", envinfo.PCIe{Gen: 3, Width: 16}, true, 15.75, "gen3 x16"},
		{"not reported", envinfo.PCIe{}, false, 0, "--pcie-gbps"},
		{"unknown generation", envinfo.PCIe{Gen: 9, Width: 16, MaxGen: 9, MaxWidth: 16}, true, 0, "generation 9 unknown"},
	}
	for _, tc := range tests {
		got, note := PCIeCeiling(tc.link, tc.known)
		if math.Abs(got-tc.want) > 0.05 || !strings.Contains(note, tc.note) {
			t.Errorf("%s: %.2f GB/s, %q; want %.2f and a note with %q", tc.name, got, note, tc.want, tc.note)
		}
	}
}
