package moe

import (
	"strconv"
	"strings"
	"testing"
)

// scripts/moe-ratios.py --targets asks at M >= 1024 for 1.20× triton-ref
// or 90% of the GEMM ceiling, whichever is the lower bar (the longer
// time), and shows the read-ceiling share at 16 <= M <= 512.
func TestRatiosTargetsScript(t *testing.T) {
	row := func(m int, impl string, us, gemmPct, readPct float64) docResult {
		return docResult{Name: "moe", Params: map[string]string{"model": "x", "batch": strconv.Itoa(m), "impl": impl},
			Metrics: []docMetric{{"latency", []float64{us}}, {"pct_floor", []float64{50}},
				{"pct_compute_ceiling", []float64{gemmPct}}, {"pct_bw_ceiling", []float64{readPct}}},
			Gates: []docGate{{true}}}
	}
	path := writeDoc(t, "peers-x.json", []docResult{
		// 1.20× asks 91.7 µs; 95% of the GEMM ceiling now, so 90% is
		// 105.6 µs: the lower bar, met.
		row(1024, "mstar", 100, 95, 30), row(1024, "triton-ref", 110, 0, 0),
		// 50% of the GEMM ceiling: 90% would be 55.6 µs, so 1.20× (91.7)
		// is the lower bar: 8.3% to go.
		row(2048, "mstar", 100, 50, 30), row(2048, "triton-ref", 110, 0, 0),
		row(64, "mstar", 100, 5, 96.04), row(64, "triton-ref", 100, 0, 0),
	})
	out, err := runScript(t, "moe-ratios.py", "--targets", path)
	if err != nil {
		t.Fatalf("moe-ratios.py --targets: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a header and 3 rows:\n%s", out)
	}
	for i, want := range [][]string{{"1024", "105.6", "met", "-"}, {"2048", "91.7", "8.3%", "-"}, {"64", "100.0", "met", "96.0"}} {
		f := strings.Fields(lines[i+1])
		if len(f) != 9 || f[1] != want[0] || f[4] != want[1] || f[5] != want[2] || f[8] != want[3] {
			t.Errorf("row %d: %q, want M=%s target %s, to go %s, %% read %s", i, f, want[0], want[1], want[2], want[3])
		}
	}
}
