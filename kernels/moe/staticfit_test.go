package moe

import (
	"strconv"
	"strings"
	"testing"
)

// scripts/moe-static-fit.py ranks the single configurations timed in every
// batch of a slots-per-expert range by their worst ratio to the batch's
// best (splits count as a batch's best, pl=1 twins as their plain twin,
// rejected runs not at all): the fit behind ChooseConfigOn's Hopper rows.
func TestStaticFitScript(t *testing.T) {
	run := func(m int, config string, us, relL2 float64) docResult {
		return docResult{Name: "moe_tune", Params: map[string]string{"batch": strconv.Itoa(m), "config": config, "experts": "8", "topk": "2"},
			Metrics: []docMetric{{"tune_latency", []float64{us, us}}, {"rel_l2", []float64{relL2}}}}
	}
	// M=256 and 512 at top-2 over 8 experts: 64 and 128 slots per expert.
	// c is 256's best (99 µs, ahead of the split) but wrong at 512
	// (rejected, so not timed in every batch); a is 1.111 and 1.000 of the
	// best, b 1.061 and 1.050 (its pl=1 twin timed at 512).
	path := writeDoc(t, "tune-x.json", []docResult{
		run(256, "a", 110, 0.003), run(256, "b", 105, 0.003), run(256, "c", 99, 0.003), run(256, "a+b", 100, 0.003),
		run(512, "a", 200, 0.003), run(512, "b,pl=1", 210, 0.003), run(512, "c", 150, 0.5),
		run(4096, "c", 1, 0.003), // 1024 slots per expert: out of range
	})
	out, err := runScript(t, "moe-static-fit.py", "32", "256", path)
	if err != nil {
		t.Fatalf("moe-static-fit.py: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "2 batches") ||
		!strings.Contains(lines[1], "worst 1.061") || !strings.HasSuffix(lines[1], " b") ||
		!strings.Contains(lines[2], "worst 1.111") || !strings.HasSuffix(lines[2], " a") {
		t.Errorf("want b (worst 1.061) ranked over a (1.111), c left out:\n%s", out)
	}
	if out, err := runScript(t, "moe-static-fit.py", "2000", "3000", path); err == nil {
		t.Errorf("a range with no batch exits 0:\n%s", out)
	}
}
