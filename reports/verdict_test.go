package reports

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
)

// moeDoc is a bench-moe-like document of this build: a run id, latency
// with throughput and a percentage derived from it, a correctness gate, and
// a ceiling result as context. Each batch's latency has rounds rounds of n
// samples, round r centred at center*(1+r*spread).
func moeDoc(rng *rand.Rand, run string, rounds, n int, center, spread float64) *Document {
	d := &Document{Format: results.Format, Schema: results.SchemaVersion, Suite: "bench moe", Start: t0, End: t0, Env: Env{"host": "h"}, RunID: run, Rounds: rounds}
	for _, batch := range []string{"1", "16"} {
		var lat, tput, pct []float64
		var rs []int
		for r := range rounds {
			for _, v := range noisy(rng, n, center*(1+float64(r)*spread), 0.002) {
				lat = append(lat, v)
				tput = append(tput, 1e6/v)
				pct = append(pct, 1e4/v)
				rs = append(rs, r)
			}
		}
		d.Results = append(d.Results, Result{Name: "moe", Params: Params{"batch": batch}, Metrics: []Metric{
			{Name: "latency", Unit: "us", Better: LowerIsBetter, Samples: lat, Rounds: rs},
			{Name: "throughput", Unit: "TFLOP/s", Better: HigherIsBetter, Samples: tput, Rounds: rs, DerivedFrom: "latency"},
			{Name: "pct_floor", Unit: "%", Better: HigherIsBetter, Samples: pct, Rounds: rs, DerivedFrom: "latency"},
		}, Gates: []Gate{{Name: "correct", Pass: true, Reason: "rel L2 0.001"}}})
	}
	d.Results = append(d.Results, Result{Name: "ceiling", Role: RoleContext, Params: Params{"what": "gemm"}, Metrics: []Metric{
		{Name: "throughput", Unit: "TFLOP/s", Better: HigherIsBetter, Samples: noisy(rng, 6, 700, 0.001)}}})
	return d
}

func diffOf(base, next *Document, opt DiffOptions) *Comparison {
	if opt.Threshold == 0 {
		opt.Threshold = 5
	}
	return Diff([]*Document{base}, []*Document{next}, opt)
}

func metricOf(t *testing.T, c *Comparison, key, metric string) *MetricDiff {
	t.Helper()
	for i := range c.Metrics {
		if c.Metrics[i].Key == key && c.Metrics[i].Metric == metric {
			return &c.Metrics[i]
		}
	}
	t.Fatalf("no comparison of %s %s", key, metric)
	return nil
}

func TestDiffWhatDecides(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := moeDoc(rng, "run-a", 1, 10, 100, 0)
	next := moeDoc(rng, "run-b", 1, 10, 100, 0)
	// Only the derived percentage and the context ceiling move: not a regression.
	for i := range next.Results {
		r := &next.Results[i]
		for j := range r.Metrics {
			if r.Metrics[j].Name == "pct_floor" || r.Name == "ceiling" {
				for k := range r.Metrics[j].Samples {
					r.Metrics[j].Samples[k] *= 0.8
				}
			}
		}
	}
	c := diffOf(base, next, DiffOptions{})
	if f := c.Failures(); len(f) != 0 {
		t.Errorf("derived and context metrics decided: %q", f)
	}
	pct := metricOf(t, c, "moe/batch=1", "pct_floor")
	if pct.Decides || pct.Role != "derived from latency" || !pct.Regression() {
		t.Errorf("pct_floor: decides %v, role %q, regression %v; want a regression that does not decide", pct.Decides, pct.Role, pct.Regression())
	}
	if ce := metricOf(t, c, "ceiling/what=gemm", "throughput"); ce.Decides || ce.Role != "context" {
		t.Errorf("ceiling: decides %v, role %q", ce.Decides, ce.Role)
	}
	decide, shown := c.Deciding()
	if !slices.Equal(decide, []string{"latency"}) || !slices.Contains(shown, "pct_floor (derived from latency)") || !slices.Contains(shown, "ceiling results (context)") {
		t.Errorf("Deciding() = %q, %q", decide, shown)
	}
	// Named with --metrics, they decide.
	c = diffOf(base, next, DiffOptions{Metrics: []string{"pct_floor"}})
	if f := c.Failures(); len(f) != 1 || !strings.Contains(f[0], "2 regressions: moe/batch=1 pct_floor -20.") {
		t.Errorf("--metrics pct_floor: failures %q", f)
	}
	if metricOf(t, c, "moe/batch=1", "latency").Decides {
		t.Error("latency decides although --metrics names only pct_floor")
	}
}

// An old document (no run id, nothing declared) gets the rule by name.
func TestDiffRolesByNameForOldDocuments(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	base, next := moeDoc(rng, "", 1, 10, 100, 0), moeDoc(rng, "", 1, 10, 100, 0)
	for _, d := range []*Document{base, next} {
		for i := range d.Results {
			d.Results[i].Role = RoleMeasured
			for j := range d.Results[i].Metrics {
				d.Results[i].Metrics[j].DerivedFrom = ""
			}
		}
	}
	c := diffOf(base, next, DiffOptions{})
	for _, tc := range []struct {
		key, metric, role string
		decides           bool
	}{
		{"moe/batch=16", "latency", "measured", true},
		{"moe/batch=16", "throughput", "derived from latency", false},
		{"moe/batch=16", "pct_floor", "derived from latency", false},
		{"ceiling/what=gemm", "throughput", "context", false},
	} {
		m := metricOf(t, c, tc.key, tc.metric)
		if m.Role != tc.role || m.Decides != tc.decides {
			t.Errorf("%s %s: role %q decides %v; want %q %v", tc.key, tc.metric, m.Role, m.Decides, tc.role, tc.decides)
		}
	}
}

func TestDiffGatesAndMissingDecide(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	base := moeDoc(rng, "run-a", 1, 10, 100, 0)
	t.Run("failed gate in new", func(t *testing.T) {
		next := moeDoc(rng, "run-b", 1, 10, 100, 0)
		next.Results[1].Gates[0] = Gate{Name: "correct", Pass: false, Reason: "rel L2 0.5 (limit 0.01)"}
		c := diffOf(base, next, DiffOptions{})
		f := c.Failures()
		if len(f) != 1 || !strings.Contains(f[0], "1 gate failed in new: moe/batch=16: correct: rel L2 0.5") {
			t.Errorf("failures %q", f)
		}
		if len(c.Regressions()) != 0 {
			t.Errorf("the statistics found regressions: the gate alone must fail it")
		}
		// --allow-missing does not excuse a wrong result.
		c = diffOf(base, next, DiffOptions{AllowMissing: true})
		if len(c.Failures()) != 1 {
			t.Errorf("--allow-missing let a failed gate pass: %q", c.Failures())
		}
	})
	t.Run("failed gate in base only", func(t *testing.T) {
		b := moeDoc(rng, "run-c", 1, 10, 100, 0)
		b.Results[0].Gates[0].Pass = false
		c := diffOf(b, moeDoc(rng, "run-d", 1, 10, 100, 0), DiffOptions{})
		if len(c.Failures()) != 0 || len(c.BaseFailedGates) != 1 {
			t.Errorf("failures %q, base failed %q", c.Failures(), c.BaseFailedGates)
		}
	})
	t.Run("missing result", func(t *testing.T) {
		next := moeDoc(rng, "run-e", 1, 10, 100, 0)
		next.Results = slices.Delete(next.Results, 1, 2) // batch 16
		c := diffOf(base, next, DiffOptions{})
		if f := c.Failures(); len(f) != 1 || !strings.Contains(f[0], "1 result of base missing from new: moe/batch=16") {
			t.Errorf("failures %q", f)
		}
		if c = diffOf(base, next, DiffOptions{AllowMissing: true}); len(c.Failures()) != 0 {
			t.Errorf("--allow-missing: failures %q", c.Failures())
		}
	})
	t.Run("missing context result", func(t *testing.T) {
		next := moeDoc(rng, "run-f", 1, 10, 100, 0)
		next.Results = next.Results[:2] // no ceiling
		if c := diffOf(base, next, DiffOptions{}); len(c.Failures()) != 0 || len(c.OnlyBase) != 1 {
			t.Errorf("a missing ceiling failed the diff: %q", c.Failures())
		}
	})
	t.Run("deciding metric unmeasured in new", func(t *testing.T) {
		next := moeDoc(rng, "run-g", 1, 10, 100, 0)
		next.Results[0].Metrics[0].Samples, next.Results[0].Metrics[0].Rounds = nil, nil
		next.Results[0].Metrics[0].Unmeasured = "kernel failed to launch"
		if f := diffOf(base, next, DiffOptions{}).Failures(); len(f) != 1 || !strings.Contains(f[0], "moe/batch=1: latency (unmeasured in new: kernel failed to launch)") {
			t.Errorf("failures %q", f)
		}
	})
	t.Run("interrupted new", func(t *testing.T) {
		next := moeDoc(rng, "run-h", 1, 10, 100, 0)
		next.Warnings = []string{results.WarnInterrupted}
		c := diffOf(base, next, DiffOptions{})
		if f := c.Failures(); len(f) != 1 || !strings.Contains(f[0], "interrupted") {
			t.Errorf("failures %q", f)
		}
		if c = diffOf(base, next, DiffOptions{AllowMissing: true}); len(c.Failures()) != 0 {
			t.Errorf("--allow-missing: failures %q", c.Failures())
		}
	})
}

func TestDiffNoise(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	// Base's three rounds (100, 110, 120) spread 18%; new is 10% slower.
	base := moeDoc(rng, "run-a", 3, 6, 100, 0.10)
	next := moeDoc(rng, "run-b", 3, 6, 121, 0)
	c := diffOf(base, next, DiffOptions{})
	m := metricOf(t, c, "moe/batch=1", "latency")
	if m.BaseRounds != 3 || m.NewRounds != 3 || m.BaseNoise < 17 || m.BaseNoise > 19 || m.NewNoise > 2 {
		t.Fatalf("noise %v%% (%d rounds) / %v%% (%d rounds); want ~18%% (20 of 110) and ~0%%", m.BaseNoise, m.BaseRounds, m.NewNoise, m.NewRounds)
	}
	if !m.Noisy || m.Regression() || !m.TooNoisy() {
		t.Errorf("noisy %v regression %v too noisy %v", m.Noisy, m.Regression(), m.TooNoisy())
	}
	if v := m.Verdict(c.Options); !strings.HasPrefix(v, "too noisy to tell at 5%: +") || !strings.Contains(v, "the rounds spread 18%") || !strings.Contains(v, "(base, 3 rounds)") {
		t.Errorf("verdict %q", v)
	}
	if f := c.Failures(); len(f) != 0 {
		t.Errorf("noise failed the diff without --fail-noisy: %q", f)
	}
	c = diffOf(base, next, DiffOptions{FailNoisy: true})
	if f := c.Failures(); len(f) != 1 || !strings.Contains(f[0], "2 metrics too noisy to tell at 5% (--fail-noisy)") {
		t.Errorf("--fail-noisy: failures %q", f)
	}
	// A change that clears threshold + noise decides however noisy the
	// rounds: 2× slower against 18% rounds is a regression, not "too noisy".
	twice := moeDoc(rng, "run-2x", 3, 6, 220, 0.10)
	c = diffOf(base, twice, DiffOptions{})
	m = metricOf(t, c, "moe/batch=1", "latency")
	if m.Noisy || m.TooNoisy() || !m.Regression() || !strings.HasPrefix(m.Verdict(c.Options), "REGRESSION: +") ||
		!strings.Contains(m.Verdict(c.Options), ", noise 1") {
		t.Errorf("2× slower, noisy rounds: noisy %v too noisy %v regression %v, verdict %q", m.Noisy, m.TooNoisy(), m.Regression(), m.Verdict(c.Options))
	}
	if f := c.Failures(); len(f) == 0 {
		t.Errorf("2× slower with noisy rounds did not fail the diff")
	}
	// Quiet rounds: the same slowdown is a regression, naming the noise.
	quiet := moeDoc(rng, "run-c", 3, 6, 100, 0.005)
	c = diffOf(quiet, next, DiffOptions{})
	m = metricOf(t, c, "moe/batch=1", "latency")
	if !m.Regression() || !strings.Contains(m.Verdict(c.Options), ", noise 1.") {
		t.Errorf("quiet base: regression %v, verdict %q", m.Regression(), m.Verdict(c.Options))
	}
	// Runs merged into one side count as its rounds.
	a1, a2 := moeDoc(rng, "run-1", 1, 6, 100, 0), moeDoc(rng, "run-2", 1, 6, 120, 0)
	c = Diff([]*Document{a1, a2}, []*Document{next}, DiffOptions{Threshold: 5})
	if m := metricOf(t, c, "moe/batch=1", "latency"); m.BaseRounds != 2 || !m.Noisy {
		t.Errorf("two runs on base: %d rounds, noisy %v", m.BaseRounds, m.Noisy)
	}
}

// #15 item 11: a negative or zero base says which way it moved.
func TestVerdictSigns(t *testing.T) {
	mk := func(vals ...float64) *Document {
		return &Document{Format: results.Format, Schema: results.SchemaVersion, Env: Env{}, RunID: "x",
			Results: []Result{{Name: "r", Metrics: []Metric{{Name: "offset", Unit: "us", Better: LowerIsBetter, Samples: vals}}}}}
	}
	c := diffOf(mk(-3, -3.1, -2.9, -3, -3.05, -2.95), mk(1, 1.1, 0.9, 1, 1.05, 0.95), DiffOptions{})
	if v := c.Metrics[0].Verdict(c.Options); !strings.HasPrefix(v, "REGRESSION: +133.33% worse") {
		t.Errorf("negative base: %q", v)
	}
	c = diffOf(mk(0, 0, 0, 0, 0, 0), mk(1, 1.1, 0.9, 1, 1.05, 0.95), DiffOptions{})
	if v := c.Metrics[0].Verdict(c.Options); !strings.HasPrefix(v, "REGRESSION: from 0 us to 1 µs worse") {
		t.Errorf("zero base: %q", v)
	}
}

func TestJoinRounds(t *testing.T) {
	round := func(v float64, pass bool) []Result {
		return []Result{{Name: "moe", Params: Params{"batch": "1"}, Warnings: []string{"w"},
			Metrics: []Metric{{Name: "latency", Unit: "us", Better: LowerIsBetter, Samples: []float64{v, v + 1}}},
			Gates:   []Gate{{Name: "correct", Pass: pass, Reason: "round " + FormatValue(v)}}}}
	}
	rs := results.JoinRounds([][]Result{round(10, true), round(20, false), round(30, true)})
	if len(rs) != 1 {
		t.Fatalf("%d results, want 1", len(rs))
	}
	m := rs[0].Metrics[0]
	if !slices.Equal(m.Samples, []float64{10, 11, 20, 21, 30, 31}) || !slices.Equal(m.Rounds, []int{0, 0, 1, 1, 2, 2}) {
		t.Errorf("samples %v rounds %v", m.Samples, m.Rounds)
	}
	if g := rs[0].Gates[0]; g.Pass || g.Reason != "round 20" {
		t.Errorf("gate %+v: a failing round must win", g)
	}
	if len(rs[0].Warnings) != 1 {
		t.Errorf("warnings %q", rs[0].Warnings)
	}
	d := &Document{Format: results.Format, Schema: results.SchemaVersion, Results: rs}
	if err := d.Validate(); err != nil {
		t.Errorf("joined rounds do not validate: %v", err)
	}
	d.Results[0].Metrics[0].Rounds = []int{0}
	if err := d.Validate(); err == nil || !strings.Contains(err.Error(), "6 samples but 1 rounds") {
		t.Errorf("rounds not parallel to samples: %v", err)
	}
}

func TestMergeKeepsRunsAndRefusesTwice(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	a, b := moeDoc(rng, "run-a", 1, 6, 100, 0), moeDoc(rng, "run-b", 1, 6, 100, 0)
	m, err := Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if m.RunID == "" || m.RunID == "run-a" || m.RunID == "run-b" {
		t.Errorf("merged run id %q: want a fresh one", m.RunID)
	}
	runs := map[string]int{}
	for i := range m.Results {
		runs[m.RunOf(&m.Results[i])]++
	}
	if runs["run-a"] != 3 || runs["run-b"] != 3 {
		t.Errorf("runs of the merged results: %v", runs)
	}
	var dup *DuplicateRunError
	if _, err := Merge(a, b, a); !errors.As(err, &dup) || dup.First != 1 || dup.Second != 3 || dup.Run != "run-a" {
		t.Errorf("Merge(a, b, a): %v", err)
	}
	if _, err := Merge(m, b); !errors.As(err, &dup) || dup.Run != "run-b" {
		t.Errorf("Merge(merged, b): %v", err)
	}
	// An old document's roles travel declared into the merged one.
	old := moeDoc(rng, "", 1, 6, 100, 0)
	for i := range old.Results {
		old.Results[i].Role = RoleMeasured
		for j := range old.Results[i].Metrics {
			old.Results[i].Metrics[j].DerivedFrom = ""
		}
	}
	m, err = Merge(old)
	if err != nil {
		t.Fatal(err)
	}
	if m.Results[0].Metric("throughput").DerivedFrom != "latency" || m.Results[2].Role != RoleContext {
		t.Errorf("merged old document: throughput from %q, ceiling role %q", m.Results[0].Metric("throughput").DerivedFrom, m.Results[2].Role)
	}
}

func TestFormatQuantity(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		unit string
		want string
	}{
		{5799.7, "us", "5.8 ms"},
		{5799.7, "µs", "5.8 ms"},
		{0.25, "us", "250 ns"},
		{64075.9, "µs", "64.08 ms"},
		{2.5e6, "us", "2.5 s"},
		{1370, "MB/s", "1.37 GB/s"},
		{0.5, "GB/s", "500 MB/s"},
		{30.6, "%", "30.6%"},
		{0.0017, "", "0.0017"},
		{12, "tensors/s", "12 tensors/s"},
		{0, "us", "0 us"},
	} {
		if got := FormatQuantity(tc.v, tc.unit); got != tc.want {
			t.Errorf("FormatQuantity(%v, %q) = %q, want %q", tc.v, tc.unit, got, tc.want)
		}
	}
}

// Every format of one comparison, with a failed gate, a missing result, a
// noisy change and derived metrics, against its golden file.
func TestRenderDiffFormatsGolden(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	base := moeDoc(rng, "run-a", 3, 6, 100, 0.002)
	next := moeDoc(rng, "run-b", 3, 6, 112, 0.002)
	next.Results[1].Gates[0] = Gate{Name: "correct", Pass: false, Reason: "rel L2 0.5 (limit 0.01)"}
	noisyBase := moeDoc(rng, "run-c", 3, 6, 100, 0.2)
	extra := noisyBase.Results[0]
	extra.Params = Params{"batch": "64"}
	base.Results = append(base.Results, extra, Result{Name: "moe", Params: Params{"batch": "256"}, Metrics: []Metric{{Name: "latency", Unit: "us", Better: LowerIsBetter, Samples: []float64{1, 2}}}})
	quiet := moeDoc(rng, "run-d", 3, 6, 130, 0.002).Results[0]
	quiet.Params = Params{"batch": "64"}
	next.Results = append(next.Results, quiet)
	c := diffOf(base, next, DiffOptions{})
	for _, format := range DiffFormats {
		t.Run(format, func(t *testing.T) {
			var b bytes.Buffer
			if err := RenderDiff(&b, c, format); err != nil {
				t.Fatal(err)
			}
			golden(t, "diff-formats."+format+".golden", b.Bytes())
			if format == FormatText && maxWidth(b.String()) > TextWidth {
				t.Errorf("text is %d columns wide, want at most %d", maxWidth(b.String()), TextWidth)
			}
			if format == FormatJSON {
				var out struct {
					Pass     bool
					Failures []string
					Verdicts []struct {
						Key, Metric, Verdict string
						Decides              bool
						Base                 *struct{ Median *float64 }
					}
				}
				if err := json.Unmarshal(b.Bytes(), &out); err != nil {
					t.Fatal(err)
				}
				if out.Pass || len(out.Failures) != 3 || len(out.Verdicts) != len(c.Metrics) {
					t.Errorf("json: pass %v, %d failures, %d verdicts (want false, 3, %d)", out.Pass, len(out.Failures), len(out.Verdicts), len(c.Metrics))
				}
			}
		})
	}
	var wide bytes.Buffer
	if err := RenderDiffWide(&wide, c, FormatText, true); err != nil {
		t.Fatal(err)
	}
	golden(t, "diff-formats.wide.golden", wide.Bytes())
	if !strings.Contains(wide.String(), "pct_floor (higher is better; shown, not deciding: derived from latency)") {
		t.Errorf("--wide lacks the table of a derived metric:\n%s", wide.String())
	}
	if f := c.Failures(); len(f) != 3 || !strings.Contains(f[0], "gate") || !strings.Contains(f[1], "missing") || !strings.Contains(f[2], "regression") {
		t.Errorf("failures %q: want the gate, the missing result and the regressions, in that order", f)
	}
}

// report show of real documents fits TextWidth (100) columns and loses no
// column; Wide gives the whole tables.
func TestRenderFitsWidth(t *testing.T) {
	for _, path := range []string{"measured/h200/moe-qwen3-30b-a3b.json", "measured/h200/spill.json", "measured/arena/stress-30s.json.gz", "measured/h200/ablate-router.json",
		"measured/h200/ceilings.json"} {
		t.Run(path, func(t *testing.T) {
			d, err := results.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var fit, wide bytes.Buffer
			if err := Render(&fit, []*Document{d}, FormatText, TableOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := Render(&wide, []*Document{d}, FormatText, TableOptions{Wide: true}); err != nil {
				t.Fatal(err)
			}
			if n := maxWidth(fit.String()); n > TextWidth {
				t.Errorf("%d columns wide, want at most %d", n, TextWidth)
			}
			if n := maxWidth(wide.String()); n <= TextWidth {
				t.Errorf("--wide is only %d columns: the fixture does not test fitting", n)
			}
			for _, r := range d.Results {
				for _, m := range r.Metrics {
					if !strings.Contains(fit.String(), m.Name) {
						t.Errorf("metric %s lost in the fitted table", m.Name)
					}
				}
			}
		})
	}
}

func TestRenderFlagsInterruptedAndFailed(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	d := moeDoc(rng, "run-x", 1, 6, 100, 0)
	d.Warnings = []string{results.WarnInterrupted}
	d.Results[1].Gates[0] = Gate{Name: "correct", Pass: false, Reason: "rel L2 0.5"}
	var b bytes.Buffer
	if err := Render(&b, []*Document{d}, FormatText, TableOptions{}); err != nil {
		t.Fatal(err)
	}
	// The alerts come first, before the first blank line (a long one
	// wraps onto indented lines).
	top, _, _ := strings.Cut(b.String(), "\n\n")
	alert := strings.Join(strings.Fields(top), " ")
	if !strings.HasPrefix(alert, "INTERRUPTED: document 1 (bench moe run run-x) stopped before it completed") ||
		!strings.Contains(top, "\nFAILED: 1 gate (moe/batch=16: correct)") {
		t.Errorf("the top lines do not flag the run:\n%s", b.String())
	}
}

// Two runs of one host, merged, stay two rows told apart by their run.
func TestRenderMergedRunsOfOneHost(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	m, err := Merge(moeDoc(rng, "run-a", 1, 6, 100, 0), moeDoc(rng, "run-b", 1, 6, 100, 0))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Render(&b, []*Document{m}, FormatText, TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "│ run ") || strings.Count(b.String(), "│ run-a ") < 2 || strings.Count(b.String(), "│ run-b ") < 2 {
		t.Errorf("the runs are not told apart:\n%s", b.String())
	}
}

// A counter that read one value throughout is one line, and no "cannot tell".
func TestRenderDiffUnchangedCounters(t *testing.T) {
	mk := func(lat float64) *Document {
		d := &Document{Format: results.Format, Schema: results.SchemaVersion, Env: Env{}, RunID: "r"}
		for _, size := range []string{"4096", "65536"} {
			d.Results = append(d.Results, Result{Name: "transport", Params: Params{"size": size}, Metrics: []Metric{
				{Name: "time", Unit: "us", Better: LowerIsBetter, Samples: []float64{lat, lat * 1.01, lat * 0.99, lat, lat * 1.02, lat * 0.98}},
				{Name: "wrong", Unit: "copies", Better: LowerIsBetter, Samples: []float64{0, 0, 0}},
			}})
		}
		return d
	}
	c := diffOf(mk(10), mk(10), DiffOptions{})
	var b bytes.Buffer
	if err := RenderDiff(&b, c, FormatText); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "wrong: 2 results, every sample 0 copies on both sides") || strings.Contains(out, "wrong (lower") {
		t.Errorf("the zero counter got a table:\n%s", out)
	}
	if n := len(c.CannotTell()); n != 0 {
		t.Errorf("CannotTell() = %d: a constant cannot change", n)
	}
}

func TestDiffWarnsOfSameRunAndInterruptedBase(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	a := moeDoc(rng, "run-a", 1, 6, 100, 0)
	b := moeDoc(rng, "run-b", 1, 6, 100, 0)
	b.Warnings = []string{results.WarnInterrupted}
	c := diffOf(a, a, DiffOptions{})
	if !slices.ContainsFunc(c.Warnings, func(w string) bool { return strings.Contains(w, "base and new both hold run run-a") }) {
		t.Errorf("warnings %q", c.Warnings)
	}
	c = diffOf(b, a, DiffOptions{})
	if len(c.Failures()) != 0 || !slices.ContainsFunc(c.Warnings, func(w string) bool { return strings.Contains(w, "base document 1 (bench moe) is interrupted") }) {
		t.Errorf("interrupted base: failures %q, warnings %q", c.Failures(), c.Warnings)
	}
}

// A change must clear the threshold by more than the spread of the rounds:
// +6% with rounds 2% apart is two runs of the same code as far as the
// run can tell; +6% with quiet rounds, and +10% with those 2%, are not.
func TestDiffChangeMustClearNoise(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ratio      float64
		spread     float64 // between consecutive rounds
		regression bool
	}{
		{"+6%, rounds 2% apart", 1.06, 0.01, false},
		{"+6%, quiet rounds", 1.06, 0, true},
		{"+10%, rounds 2% apart", 1.10, 0.01, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 8))
			base := moeDoc(rng, "run-a", 3, 10, 100, tc.spread)
			next := moeDoc(rng, "run-b", 3, 10, 100*tc.ratio, tc.spread)
			c := diffOf(base, next, DiffOptions{})
			m := metricOf(t, c, "moe/batch=1", "latency")
			if m.Regression() != tc.regression {
				t.Errorf("regression %v, want %v: %s (margin %.2f%%)", m.Regression(), tc.regression, m.Verdict(c.Options), m.Margin())
			}
			if !tc.regression && !strings.Contains(m.Verdict(c.Options), "within threshold and noise") {
				t.Errorf("verdict %q does not say the noise covers it", m.Verdict(c.Options))
			}
		})
	}
}

// Runs of other shapes compare only their one-round ceilings (context):
// the diff does not tell them to measure with --rounds 3, which they did.
func TestDiffNoRoundsNoteForContextOnly(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	ceiling := Result{Name: "ceiling", Role: results.RoleContext, Params: Params{"what": "read"},
		Metrics: []Metric{{Name: "bandwidth", Unit: "GB/s", Better: HigherIsBetter, Samples: []float64{50, 51, 52, 50, 51, 52}}}}
	base, next := moeDoc(rng, "run-a", 3, 6, 100, 0.01), moeDoc(rng, "run-b", 3, 6, 100, 0.01)
	for i := range next.Results {
		next.Results[i].Params["hidden"] = "1024" // another shape: nothing pairs
	}
	base.Results = append(base.Results, ceiling)
	next.Results = append(next.Results, ceiling)
	var b bytes.Buffer
	if err := RenderDiff(&b, diffOf(base, next, DiffOptions{}), "text"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "measure with --rounds 3") {
		t.Errorf("a diff of two 3-round runs says to measure with --rounds 3:\n%s", b.String())
	}
}
