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

// The ratio table keeps a model's runs under other routings and the custom
// shapes (--experts ...) in rows of their own, so a generality run (zipf,
// EP, an odd shape) beside the reference table never merges into it.
func TestRatiosRowsPerRoutingAndShape(t *testing.T) {
	row := func(p map[string]string, impl string, us float64) docResult {
		q := map[string]string{"batch": "64", "impl": impl}
		for k, v := range p {
			q[k] = v
		}
		return docResult{Name: "moe", Params: q, Metrics: []docMetric{{"latency", []float64{us}}}, Gates: []docGate{{true}}}
	}
	uniform := map[string]string{"model": "qwen3-30b-a3b", "routing": "uniform"}
	zipf := map[string]string{"model": "qwen3-30b-a3b", "routing": "zipf:1.2", "ep": "4"}
	odd := map[string]string{"model": "custom", "experts": "60", "topk": "4", "hidden": "1536", "inter": "352"}
	path := writeDoc(t, "peers.json", []docResult{
		row(uniform, "mstar", 100), row(uniform, "triton-ref", 110),
		row(zipf, "mstar", 100), row(zipf, "triton-ref", 90),
		row(odd, "mstar", 50), row(odd, "triton-ref", 50),
	})
	out, err := runScript(t, "moe-ratios.py", path)
	if err != nil {
		t.Fatalf("moe-ratios.py: %v\n%s", err, out)
	}
	want := map[string]string{"qwen3-30b-a3b": "1.10", "qwen3-30b-a3b-ep4-zipf:1.2": "0.90", "E60k4H1536I352": "1.00"}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 5 && want[f[0]] != "" {
			if f[4] != want[f[0]] {
				t.Errorf("%s: ratio %s, want %s", f[0], f[4], want[f[0]])
			}
			delete(want, f[0])
		}
	}
	if len(want) != 0 {
		t.Errorf("rows missing: %v\n%s", want, out)
	}
}
