package moe

import (
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
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

// The Hopper static table up to 32 slots per touched expert (ChooseConfigFor,
// NOTES v45) against the tunes it was fitted to, from their recorded GEMM
// times: each batch's pick, gemm1 plus gemm2, over the fastest gemm1 plus
// the fastest gemm2 any candidate ran: 1.020, 1.020 and 1.015 (geometric
// mean) with the worst batch at 1.10, 1.14 and 1.10, where the table before
// it reads 1.096, 1.057 and 1.032, worst 2.04, 1.30 and 1.20. A change to
// the table that drifts from these tunes fails here.
func TestStaticTableFitsTunes(t *testing.T) {
	sets := []struct {
		tuneSet
		geomean, wors float64
	}{
		{tuneSets[0], 1.03, 1.12},
		{tuneSets[1], 1.035, 1.15},
		{tuneSets[2], 1.02, 1.12},
	}
	for _, set := range sets {
		var ratios, before []float64
		batches := 0
		for _, g := range set.globs {
			for _, p := range tuneDocs(t, g) {
				for _, b := range tuneBatches(t, p) {
					if perExpert(b.shape, b.m) > 32 {
						continue
					}
					batches++
					pick := ChooseConfigFor(GPU{CC: Hopper, SMs: 132}, b.shape, b.m)
					// Where the tune timed no self-aligning twin of the pick, its plain twin;
					// the GEMMs alone were timed without programmatic launch.
					lookup := func(c Config) ([2]float64, bool) {
						c.PL = 0
						g, ok := b.gemm[c.String()]
						if !ok && c.SA != 0 {
							c.SA = 0
							g, ok = b.gemm[c.String()]
						}
						return g, ok
					}
					ratio := func(c Config) (float64, bool) {
						g1, ok1 := lookup(c.Gemm(1))
						g2, ok2 := lookup(c.Gemm(2))
						return (g1[0] + g2[1]) / (b.best[0] + b.best[1]), ok1 && ok2
					}
					r, ok := ratio(pick)
					was, wasOK := ratio(tableBeforeV45(b.shape, b.m))
					if !ok || !wasOK {
						continue
					}
					ratios = append(ratios, r)
					before = append(before, was)
				}
			}
		}
		if len(ratios) < batches*3/4 {
			t.Errorf("%s: the picks were timed in %d of %d batches", set.name, len(ratios), batches)
			continue
		}
		geo, worst := geomeanMax(ratios)
		geoWas, worstWas := geomeanMax(before)
		t.Logf("%s: %d batches, the picks' GEMMs %.3f of the best (geometric mean), worst %.3f; before v45 %.3f, worst %.3f",
			set.name, len(ratios), geo, worst, geoWas, worstWas)
		if geo > set.geomean || worst > set.wors || geo >= geoWas {
			t.Errorf("%s: the static table's GEMMs at %.3f of the best (worst %.3f), want at most %.3f (%.2f) and under the table before v45's %.3f",
				set.name, geo, worst, set.geomean, set.wors, geoWas)
		}
	}
}

func geomeanMax(xs []float64) (geo, worst float64) {
	logs := 0.0
	for _, x := range xs {
		logs += math.Log(x)
		worst = max(worst, x)
	}
	return math.Exp(logs / float64(len(xs))), worst
}

// tableBeforeV45 is the Hopper static table's tc rows before v45: 16×256
// tiles up to 8 slots per touched expert from 32 slots in all, the skinny
// kernel below 32 (its warps as chooseConfig sets them), 32×256 up to 32.
func tableBeforeV45(s Shape, m int) Config {
	switch per := perExpert(s, m); {
	case per >= 32:
		return ChooseConfigFor(GPU{CC: Hopper}, s, m)
	case per > 8:
		return tcTable["32x256k128s3w8"]
	case m*s.K >= 32:
		return tcTable["16x256k128s3w8ov"]
	}
	return chooseConfig(s, m)
}

// tuneBatch is one batch of a tune document: the shape, each single
// configuration's median gemm1 and gemm2 times (its pl=1 twin's folded
// in), and the fastest of each.
type tuneBatch struct {
	shape Shape
	m     int
	gemm  map[string][2]float64
	best  [2]float64
	pass  map[string]float64 // each single configuration's median pass, pl=1 twins apart
}

// tuneSet is committed tune documents the static table is checked against.
type tuneSet struct {
	name  string
	globs []string // under reports/measured
}

var tuneSets = []tuneSet{
	{"H200 v34 and the odd shape (H100)", []string{"h200/moe-v34/tune/docs/tune-*.json.gz", "h100/moe-general/tuned13/tune-odd.json.gz"}},
	{"H200 v38", []string{"h200/moe-v38/tune/docs/tune-*.json.gz"}},
	{"H100 v29 and v32", []string{"h100/moe-v29/tune/docs/tune-*.json.gz", "h100/moe-v32/tune/docs/tune-*.json.gz"}},
}

// tuneDocs are the committed documents glob names; none is a failure.
func tuneDocs(t *testing.T, glob string) []string {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join("..", "..", "reports", "measured", glob))
	if len(paths) == 0 {
		t.Fatalf("no tune documents at %s", glob)
	}
	return paths
}

func tuneBatches(t *testing.T, path string) []tuneBatch {
	t.Helper()
	doc, err := results.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	by := map[int]*tuneBatch{}
	var order []int
	for _, r := range doc.Results {
		cfg := r.Params["config"]
		if r.Name != "moe_tune" || strings.Contains(cfg, "+") {
			continue
		}
		num := func(k string) int { n, _ := strconv.Atoi(r.Params[k]); return n }
		var g [2]float64
		pass := 0.0
		for _, m := range r.Metrics {
			if i := slices.Index([]string{"tune_gemm1", "tune_gemm2"}, m.Name); i >= 0 && m.Measured() {
				g[i] = results.Median(m.Samples)
			}
			if m.Name == "tune_latency" && m.Measured() {
				pass = results.Median(m.Samples)
			}
		}
		if pass == 0 && (g[0] == 0 || g[1] == 0) {
			continue // rejected
		}
		m := num("batch")
		b := by[m]
		if b == nil {
			b = &tuneBatch{shape: Shape{E: num("experts"), K: num("topk"), H: num("hidden"), I: num("inter")}, m: m,
				gemm: map[string][2]float64{}, best: [2]float64{math.Inf(1), math.Inf(1)}, pass: map[string]float64{}}
			by[m] = b
			order = append(order, m)
		}
		if pass > 0 {
			b.pass[cfg] = pass
		}
		if g[0] == 0 || g[1] == 0 {
			continue // not timed alone
		}
		key := strings.Replace(cfg, ",pl=1", "", 1)
		if old, ok := b.gemm[key]; ok {
			g = [2]float64{min(old[0], g[0]), min(old[1], g[1])}
		}
		b.gemm[key] = g
		b.best = [2]float64{min(b.best[0], g[0]), min(b.best[1], g[1])}
	}
	out := make([]tuneBatch, 0, len(order))
	for _, m := range order {
		out = append(out, *by[m])
	}
	return out
}

// The Hopper static table's 16×64 pick launches both GEMMs programmatically
// (pl=1, NOTES v46) because the tunes say so: wherever a tune timed a 16×64
// configuration (one kernel for both GEMMs) with and without pl=1, the pass
// with it was faster in every one of the 16 batches that timed both (by
// 0.3–1.7 µs, up to 12% of the pass: the odd shape E60 k4 H1536 I352 at M = 1).
// A re-tune that stops saying so fails here.
func TestStaticNarrowPickLaunchesProgrammatically(t *testing.T) {
	var gains []float64 // µs saved by pl=1, one per (document, batch, config)
	for _, set := range tuneSets {
		for _, g := range set.globs {
			for _, p := range tuneDocs(t, g) {
				for _, b := range tuneBatches(t, p) {
					for c, with := range b.pass {
						plain, isPL := strings.CutSuffix(c, ",pl=1")
						if !isPL || !strings.HasPrefix(plain, "tc:bm=16,bn=64,") {
							continue
						}
						if without, ok := b.pass[plain]; ok {
							gains = append(gains, without-with)
						}
					}
				}
			}
		}
	}
	faster := 0
	for _, g := range gains {
		if g > 0 {
			faster++
		}
	}
	slices.Sort(gains)
	if len(gains) < 12 || faster < len(gains)*9/10 {
		t.Fatalf("pl=1 on the 16×64 tiles faster in %d of %d pairs (gains %v µs): the tunes no longer support the static pick's pl=1", faster, len(gains), gains)
	}
	t.Logf("pl=1 on the 16×64 tiles: faster in %d of %d pairs, %.1f to %.1f µs, median %.1f", faster, len(gains), gains[0], gains[len(gains)-1], gains[len(gains)/2])
}
