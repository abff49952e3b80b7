package reports

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
)

// oneMetric is a document with one result whose latency has the samples.
func oneMetric(better Direction, samples []float64) *Document {
	return &Document{Format: results.Format, Schema: results.SchemaVersion, Suite: "s", Start: t0, End: t0, Env: Env{"host": "h"},
		Results: []Result{{Name: "moe", Params: Params{"batch": "64"},
			Metrics: []Metric{{Name: "latency", Unit: "us", Better: better, Samples: samples}}}}}
}

func TestDiffDecisions(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	type want struct {
		regression, worse, significant, over, enough bool
		warn                                         string // a warning containing this, "" for none
	}
	for _, tc := range []struct {
		name      string
		better    Direction
		n         int
		ratio     float64
		noise     float64
		threshold float64
		want      want
	}{
		{"A/A", LowerIsBetter, 10, 1.0, 0.01, 5, want{significant: false, enough: true}},
		{"10% slower", LowerIsBetter, 10, 1.10, 0.01, 5, want{regression: true, worse: true, significant: true, over: true, enough: true}},
		{"10% slower, threshold 20", LowerIsBetter, 10, 1.10, 0.01, 20, want{worse: true, significant: true, enough: true}},
		{"10% faster", LowerIsBetter, 10, 0.90, 0.01, 5, want{significant: true, over: true, enough: true}},
		{"higher is better, 10% lower", HigherIsBetter, 10, 0.90, 0.01, 5, want{regression: true, worse: true, significant: true, over: true, enough: true}},
		{"3 samples cannot tell", LowerIsBetter, 3, 1.5, 0.01, 5, want{worse: true, over: true, warn: "need >= 4 samples to detect a difference at alpha level 0.05"}},
		{"4 samples can", LowerIsBetter, 4, 1.5, 0.01, 5, want{regression: true, worse: true, significant: true, over: true, enough: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := oneMetric(tc.better, noisy(rng, tc.n, 100, tc.noise))
			next := oneMetric(tc.better, noisy(rng, tc.n, 100*tc.ratio, tc.noise))
			c := Diff([]*Document{base}, []*Document{next}, DiffOptions{Threshold: tc.threshold})
			if len(c.Metrics) != 1 {
				t.Fatalf("%d metrics compared, want 1", len(c.Metrics))
			}
			m := c.Metrics[0]
			got := want{m.Regression(), m.Worse, m.Significant, m.OverThreshold, m.EnoughSamples, ""}
			for _, w := range m.Warnings {
				if tc.want.warn != "" && strings.Contains(w, tc.want.warn) {
					got.warn = tc.want.warn
				}
			}
			if !tc.want.significant && tc.want.enough {
				// Which way noise moved the median, and how far, does not matter.
				got.worse, got.over = tc.want.worse, tc.want.over
			}
			if got != tc.want {
				t.Errorf("(-want +got):\n-%+v\n+%+v\n(p=%v delta=%v warnings=%q)", tc.want, got, m.P, m.Delta, m.Warnings)
			}
			if (len(c.Regressions()) == 1) != tc.want.regression {
				t.Errorf("Regressions() = %d", len(c.Regressions()))
			}
			if (len(c.CannotTell()) == 1) == tc.want.enough {
				t.Errorf("CannotTell() = %d, enough samples %v", len(c.CannotTell()), tc.want.enough)
			}
			v := m.Verdict(c.Options)
			if tc.want.regression != strings.HasPrefix(v, "REGRESSION") {
				t.Errorf("verdict %q", v)
			}
		})
	}
}

func TestDiffPairing(t *testing.T) {
	base, next := fixture("gpu-a", 1), fixture("gpu-a", 2)
	next.Results = append(next.Results[1:], Result{Name: "new one",
		Metrics: []Metric{{Name: "x", Unit: "s", Better: LowerIsBetter, Samples: []float64{1}}}})
	c := Diff([]*Document{base}, []*Document{next}, DiffOptions{Threshold: 5})
	if want := []string{"moe/batch=1/model=qwen3-30b-a3b"}; strings.Join(c.OnlyBase, ",") != strings.Join(want, ",") {
		t.Errorf("OnlyBase %q, want %q", c.OnlyBase, want)
	}
	if want := []string{"new one"}; strings.Join(c.OnlyNew, ",") != strings.Join(want, ",") {
		t.Errorf("OnlyNew %q, want %q", c.OnlyNew, want)
	}
	var unmeasured *MetricDiff
	for i, m := range c.Metrics {
		if m.Metric == "tflops" {
			unmeasured = &c.Metrics[i]
		}
	}
	if unmeasured == nil || unmeasured.Unmeasured != "base: no GPU: cuBLAS not found" || unmeasured.Regression() {
		t.Errorf("unmeasured tflops: %+v", unmeasured)
	}
	if c.Options.Alpha != 0.05 {
		t.Errorf("default alpha %v", c.Options.Alpha)
	}
}

func TestDiffPoolsAndWarns(t *testing.T) {
	a, b := oneMetric(LowerIsBetter, []float64{1, 2, 3}), oneMetric(LowerIsBetter, []float64{4, 5, 6})
	b.Env = Env{"host": "other"}
	c := Diff([]*Document{a, b}, []*Document{a}, DiffOptions{})
	if len(c.Metrics) != 1 || c.Metrics[0].Base.N != 6 {
		t.Fatalf("pooled base: %+v", c.Metrics)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "pools samples from 2 environments") {
		t.Errorf("warnings %q", c.Warnings)
	}
}

func TestDiffUnitChange(t *testing.T) {
	a, b := oneMetric(LowerIsBetter, []float64{1, 2, 3}), oneMetric(LowerIsBetter, []float64{1, 2, 3})
	b.Results[0].Metrics[0].Unit = "ms"
	c := Diff([]*Document{a}, []*Document{b}, DiffOptions{})
	if c.Metrics[0].Unmeasured != `unit changed from "us" to "ms"` {
		t.Errorf("unit change: %q", c.Metrics[0].Unmeasured)
	}
}

func TestGeomean(t *testing.T) {
	mk := func(vals ...float64) *Document {
		d := &Document{Format: results.Format, Schema: results.SchemaVersion, Env: Env{}}
		for i, v := range vals {
			d.Results = append(d.Results, Result{Name: "r", Params: Params{"i": string(rune('a' + i))},
				Metrics: []Metric{{Name: "t", Unit: "s", Better: LowerIsBetter, Samples: []float64{v, v, v, v, v, v}}}})
		}
		return d
	}
	c := Diff([]*Document{mk(1, 4)}, []*Document{mk(2, 8)}, DiffOptions{})
	if len(c.Geomeans) != 1 {
		t.Fatalf("geomeans %+v", c.Geomeans)
	}
	g := c.Geomeans[0]
	if math.Abs(g.Base-2) > 1e-12 || math.Abs(g.New-4) > 1e-12 || math.Abs(g.Delta-100) > 1e-9 || g.N != 2 {
		t.Errorf("geomean %+v, want 2 -> 4, +100%%, n 2", g)
	}
}

func TestMinUTestP(t *testing.T) {
	// The table benchmath keeps for equal sizes.
	for n, want := range map[int]float64{1: 1, 2: 1.0 / 3, 3: 0.1, 4: 0.02857142857142857, 5: 0.007936507936507936} {
		if got := minUTestP(n, n); math.Abs(got-want) > 1e-12 {
			t.Errorf("minUTestP(%d, %d) = %v, want %v", n, n, got, want)
		}
	}
	if got := minUTestP(0, 5); got != 1 {
		t.Errorf("minUTestP(0, 5) = %v", got)
	}
}

func TestRenderDiffGolden(t *testing.T) {
	base, next := abPair()
	next.Results = next.Results[1:]
	next.Results = append(next.Results, Result{Name: "new one",
		Metrics: []Metric{{Name: "x", Unit: "s", Better: LowerIsBetter, Unmeasured: "skipped"}}})
	c := Diff([]*Document{base}, []*Document{next}, DiffOptions{Threshold: 5})
	for _, tc := range []struct{ name, format string }{{"diff.txt", FormatText}, {"diff.md", FormatMarkdown}} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := RenderDiff(&b, c, tc.format); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".golden", b.Bytes())
		})
	}
	if err := RenderDiff(&bytes.Buffer{}, c, "xml"); err == nil {
		t.Error("RenderDiff accepted xml")
	}
}

func TestRowLabels(t *testing.T) {
	r := func(name string, kv ...string) Result {
		p := Params{}
		for i := 0; i < len(kv); i += 2 {
			p[kv[i]] = kv[i+1]
		}
		return Result{Name: name, Params: p}
	}
	long := "cuMemHostAlloc'd memory, cuMemcpy*Async"
	for _, tc := range []struct {
		name   string
		rs     []Result
		lines  []string
		labels []string
	}{
		{"shared parameters move out", []Result{r("moe", "batch", "1", "model", "m"), r("moe", "batch", "16", "model", "m")},
			[]string{"every result has model=m"}, []string{"moe/batch=1", "moe/batch=16"}},
		{"one short key stays whole", []Result{r("moe", "batch", "1")}, nil, []string{"moe/batch=1"}},
		{"nothing shared", []Result{r("a", "x", "1"), r("b", "x", "2")}, nil, []string{"a/x=1", "b/x=2"}},
		{"a shared name alone stays", []Result{r("moe", "x", "1"), r("moe", "x", "2")}, nil, []string{"moe/x=1", "moe/x=2"}},
		{"another result's row does not break the shared line",
			[]Result{r("moe", "batch", "1", "model", "m"), r("moe", "batch", "16", "model", "m"), r("ceiling", "method", long, "what", "gemm")},
			[]string{"every moe result has model=m", "ceiling has method=" + long + "/what=gemm"},
			[]string{"moe/batch=1", "moe/batch=16", "ceiling"}},
		{"long labels keep what tells rows apart",
			[]Result{r("ceiling", "method", "d2d copy", "size", "1 GiB", "what", "d2d"), r("ceiling", "method", long, "size", "256 MiB", "what", "h2d"), r("ceiling", "method", long, "size", "256 MiB", "what", "d2h")},
			[]string{"ceiling/what=d2d has method=d2d copy/size=1 GiB", "ceiling/what=h2d has method=" + long + "/size=256 MiB", "ceiling/what=d2h has method=" + long + "/size=256 MiB"},
			[]string{"ceiling/what=d2d", "ceiling/what=h2d", "ceiling/what=d2h"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines, labels := rowLabels(tc.rs)
			if strings.Join(lines, "|") != strings.Join(tc.lines, "|") || strings.Join(labels, "|") != strings.Join(tc.labels, "|") {
				t.Errorf("rowLabels = %q, %q; want %q, %q", lines, labels, tc.lines, tc.labels)
			}
		})
	}
}

// A metric that no result can test is one line, not a table of "cannot
// tell", and its per-result warnings are not repeated.
func TestRenderDiffSummarisesUntestable(t *testing.T) {
	mk := func(scale float64) *Document {
		d := &Document{Format: results.Format, Schema: results.SchemaVersion, Suite: "s", Start: t0, End: t0, Env: Env{"host": "h"}}
		for i, batch := range []string{"1", "16", "64", "256"} {
			lat := make([]float64, 10)
			for j := range lat {
				lat[j] = float64(100*(i+1)+j) * scale
			}
			d.Results = append(d.Results, Result{Name: "moe", Params: Params{"batch": batch, "model": "m"}, Metrics: []Metric{
				{Name: "latency", Unit: "us", Better: LowerIsBetter, Samples: lat},
				{Name: "rel_l2", Better: LowerIsBetter, Samples: []float64{0.003 * scale}},
			}})
		}
		return d
	}
	c := Diff([]*Document{mk(1)}, []*Document{mk(1.001)}, DiffOptions{Threshold: 5})
	var b bytes.Buffer
	if err := RenderDiff(&b, c, FormatText); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "rel_l2 (lower") || strings.Contains(out, "cannot tell: too few") {
		t.Errorf("rel_l2 got a table:\n%s", out)
	}
	if !strings.Contains(out, "rel_l2 in 4 results (n=1+1)") {
		t.Errorf("no one-line summary of rel_l2:\n%s", out)
	}
	if strings.Contains(out, "all samples are equal") || strings.Contains(out, "confidence interval") {
		t.Errorf("warnings of the summarised metric repeated:\n%s", out)
	}
	if !strings.Contains(out, "latency (lower is better)") {
		t.Errorf("latency table missing:\n%s", out)
	}
}

// A --config change pairs with the run it replaces (and a 10% slowdown from
// it is a regression), where exact keys alone would call it missing.
func TestDiffPairsAcrossChangedConfig(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	withConfig := func(config, source string, mean float64) *Document {
		d := oneMetric(LowerIsBetter, noisy(rng, 20, mean, 0.01))
		d.Results[0].Params["config"], d.Results[0].Params["config_source"] = config, source
		return d
	}
	base := withConfig("wg:nc=2,bn=256,stages=4,gm=8,pp=1", "tuned", 100)
	next := withConfig("wg:nc=2,bn=256,stages=4,gm=8", "--config", 110)
	c := Diff([]*Document{base}, []*Document{next}, DiffOptions{Threshold: 5})
	if len(c.Missing) != 0 || len(c.OnlyBase) != 0 || len(c.OnlyNew) != 0 {
		t.Fatalf("missing %q, only base %q, only new %q: want the two paired", c.Missing, c.OnlyBase, c.OnlyNew)
	}
	if len(c.Regressions()) != 1 {
		t.Errorf("%d regressions, want the 10%% slowdown", len(c.Regressions()))
	}
	if !slices.ContainsFunc(c.Warnings, func(w string) bool {
		return strings.Contains(w, `config "wg:nc=2,bn=256,stages=4,gm=8,pp=1" → "wg:nc=2,bn=256,stages=4,gm=8"`)
	}) {
		t.Errorf("no note of the changed config in %q", c.Warnings)
	}
	// The table's labels name both sides' settings, not base's alone.
	var b bytes.Buffer
	if err := RenderDiff(&b, c, "text"); err != nil {
		t.Fatal(err)
	}
	if out := strings.Join(strings.Fields(b.String()), " "); !strings.Contains(out, "config=wg:nc=2,bn=256,stages=4,gm=8,pp=1 → wg:nc=2,bn=256,stages=4,gm=8") ||
		!strings.Contains(out, "config_source=tuned → --config") {
		t.Errorf("the labels do not show the changed settings:\n%s", out)
	}
	var js bytes.Buffer
	if err := RenderDiff(&js, c, "json"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `"new_params"`) || !strings.Contains(js.String(), `"config_source": "--config"`) {
		t.Errorf("the JSON verdict lacks new's params:\n%s", js.String())
	}
	// ablate router on a host too small for the kernel leaves out its
	// kernel, tokens and baseline: its load metrics still pair with a run
	// that timed the kernel.
	ablated := func(kernel bool) *Document {
		d := oneMetric(HigherIsBetter, noisy(rng, 20, 0.9, 0.01))
		d.Results[0].Params["router"] = "softmax-topk"
		if kernel {
			d.Results[0].Params["kernel"], d.Results[0].Params["kernel_tokens"], d.Results[0].Params["baseline"] = "cpu", "16", "softmax-topk-norm"
		} else {
			d.Results[0].Params["kernel"] = "not run: kernel skipped: exceeds half of this host's memory"
		}
		return d
	}
	if ac := Diff([]*Document{ablated(true)}, []*Document{ablated(false)}, DiffOptions{Threshold: 5}); len(ac.Missing) != 0 || ac.Compared() != 1 {
		t.Errorf("ablate with and without its kernel: missing %q, %d compared; want the load metric paired", ac.Missing, ac.Compared())
	}
	// A stage of bench moe --stages names its kernel, which the new config
	// renames: it pairs too.
	stage := func(config, kernel string, mean float64) *Document {
		d := withConfig(config, "--config", mean)
		d.Results[0].Name, d.Results[0].Params["stage"], d.Results[0].Params["kernel"] = "moe_stage", "gemm2", kernel
		return d
	}
	sc := Diff([]*Document{stage("skinny:nt=1", "moe_gemm2_skinny_nt1_w4", 100)},
		[]*Document{stage("skinny:nt=1,pf=1", "moe_gemm2_skinny_nt1_w4_pf", 90)}, DiffOptions{Threshold: 5})
	if len(sc.Missing) != 0 || len(sc.OnlyNew) != 0 || sc.Compared() != 1 || sc.Metrics[0].Delta > -5 {
		t.Errorf("a stage whose kernel changed with its config: missing %q, only new %q, %d compared; want it paired and 10%% faster",
			sc.Missing, sc.OnlyNew, sc.Compared())
	}
	if !slices.ContainsFunc(sc.Warnings, func(w string) bool {
		return strings.Contains(w, `kernel "moe_gemm2_skinny_nt1_w4" → "moe_gemm2_skinny_nt1_w4_pf"`)
	}) {
		t.Errorf("no note of the changed kernel in %q", sc.Warnings)
	}
	// Two candidates of new for one base result: ambiguous, left unpaired.
	two := withConfig("a", "--config", 100)
	two.Results = append(two.Results, withConfig("b", "--config", 100).Results...)
	if c := Diff([]*Document{base}, []*Document{two}, DiffOptions{Threshold: 5}); len(c.Missing) != 1 {
		t.Errorf("ambiguous pairing: missing %q, want the base result", c.Missing)
	}
}

func TestDiffWarnsOnOtherCards(t *testing.T) {
	card := func(uuid string) *Document {
		d := oneMetric(LowerIsBetter, []float64{1, 2, 3})
		d.Env = Env{"host": "h", "gpu": "NVIDIA H200", "gpu.uuid": uuid}
		return d
	}
	has := func(c *Comparison) bool {
		for _, w := range c.Warnings {
			if strings.Contains(w, "no card in common") {
				return true
			}
		}
		return false
	}
	c := Diff([]*Document{card("GPU-a")}, []*Document{card("GPU-b")}, DiffOptions{})
	if !has(c) {
		t.Errorf("different cards, no warning: %q", c.Warnings)
	}
	if w := otherCards([]*Document{card("GPU-a")}, []*Document{card("GPU-b")}); !strings.Contains(w, "base ran on GPU-a (NVIDIA H200), new on GPU-b (NVIDIA H200)") {
		t.Errorf("warning %q", w)
	}
	if c := Diff([]*Document{card("GPU-a")}, []*Document{card("GPU-a")}, DiffOptions{}); has(c) {
		t.Errorf("same card warned: %q", c.Warnings)
	}
	if c := Diff([]*Document{card("GPU-a"), card("GPU-b")}, []*Document{card("GPU-b")}, DiffOptions{}); has(c) {
		t.Errorf("a card in common warned: %q", c.Warnings)
	}
	if c := Diff([]*Document{card("")}, []*Document{card("GPU-b")}, DiffOptions{}); has(c) {
		t.Errorf("unknown card warned: %q", c.Warnings)
	}
}
