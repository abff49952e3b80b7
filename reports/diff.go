package reports

import (
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
	"golang.org/x/perf/benchmath"
)

// DiffOptions are the thresholds of a comparison and what decides it.
type DiffOptions struct {
	// Threshold is the smallest change, in percent, that counts as a
	// regression (5 means 5%), on top of the wider side's noise (NoisyMargin
	// times it where a side's rounds spread wider than the threshold, and a
	// change short of that is too noisy to tell). Zero counts any
	// significant change.
	Threshold float64
	// Alpha is the significance level of the Mann-Whitney U test; zero
	// means 0.05.
	Alpha float64
	// Metrics, when not nil, are the metrics that decide, wherever they
	// appear (derived metrics and context results included); nil means
	// every measured metric of a result under test, none derived.
	Metrics []string
	// AllowMissing lets a new side that lacks results of base, or that was
	// interrupted, pass.
	AllowMissing bool
	// FailNoisy fails a comparison in which a deciding metric changed by
	// more than the threshold but its noise was wider still.
	FailNoisy bool
}

// Comparison is the result of Diff: every metric of every result present on
// both sides, a geometric-mean row per metric, and what is on one side only.
type Comparison struct {
	Options  DiffOptions
	Metrics  []MetricDiff // in order of first appearance on the base side
	Geomeans []GeomeanDiff
	OnlyBase []string // result keys present only in base
	OnlyNew  []string // result keys present only in new
	Warnings []string // problems with the comparison as a whole

	// FailedGates are the gates that failed in new ("key: gate: reason"):
	// each fails the comparison whatever the statistics say.
	FailedGates []string
	// BaseFailedGates failed in base: reported, not deciding.
	BaseFailedGates []string
	// Missing are results of base that new lacks (context results aside)
	// and deciding metrics measured in base but not in new.
	Missing []string
	// Interrupted names the new documents that stopped before they
	// completed.
	Interrupted []string
}

// MetricDiff compares one metric of one result.
type MetricDiff struct {
	Key    string // Result.Key()
	Name   string // the result's name and parameters, as in Key
	Params Params
	// NewParams are new's parameters when they differ from base's only in
	// settingParams (the pair was made across a changed setting); else nil.
	NewParams Params
	Metric    string
	Unit      string
	Better    Direction

	// Decides says whether this metric can fail the comparison; Role says
	// why or why not: "measured", "derived from latency", "context".
	Decides bool
	Role    string

	Base, New Summary
	// Unmeasured says why there is no comparison (a side is unmeasured, or
	// the sides disagree on unit or direction); the fields below are then zero.
	Unmeasured string

	Delta float64 // percent change of the median, new vs base, of |base|; NaN if base is 0
	P     float64 // Mann-Whitney U p-value (benchmath.AssumeNothing.Compare)

	// The four conditions of a regression; the metric regressed only when
	// all four hold (and its noise allows telling, below).
	Worse         bool // the median moved the wrong way for Better
	Significant   bool // P <= Alpha (benchstat's rule: otherwise it prints "~")
	OverThreshold bool // |Delta| - Margin() > Threshold
	EnoughSamples bool // the sample counts can reach significance at Alpha at all

	// BaseNoise and NewNoise are each side's spread between rounds (or
	// runs): the range of the per-round medians as a percentage of the
	// median, NaN with fewer than two rounds. BaseRounds and NewRounds
	// count the rounds.
	BaseNoise, NewNoise   float64
	BaseRounds, NewRounds int
	// Noisy: a side's noise is wider than the threshold and the change,
	// over the threshold, does not clear it by NoisyMargin times that
	// noise: it cannot be told from the noise. (A change that clears it
	// decides however noisy the sides: a 2× slowdown is not hidden by 18%
	// rounds.)
	Noisy bool

	Warnings []string // too few samples, with how many are needed

	same   bool    // every sample of both sides is one value
	margin float64 // Margin's value, set with the verdict's fields
}

// NoisyMargin is how many times its noise a change must clear, on top of
// the threshold, where a side's rounds spread wider than the threshold.
// Once was not enough on a loaded host: A/A pairs of this repository's
// 2-core machine (reports/measured/aa-cpu) failed 3 and 5 of 20 at 1×
// noise, 1 and 0 at 3× (the one a run 5.6× slower than its twin at 52%
// noise), while a 2× slowdown at 18% noise is still caught.
const NoisyMargin = 3

// Regression reports whether the metric got significantly and materially
// worse, by more than its noise allows telling.
func (m *MetricDiff) Regression() bool {
	return m.changed() && m.Worse && !m.Noisy
}

// Improvement reports whether it got significantly and materially better.
func (m *MetricDiff) Improvement() bool {
	return m.changed() && !m.Worse && m.Delta != 0 && !m.Noisy
}

// TooNoisy reports whether the metric moved significantly by more than the
// threshold, but not by threshold + noise, with a side's noise wider than
// the threshold.
func (m *MetricDiff) TooNoisy() bool {
	return m.Unmeasured == "" && m.Significant && m.EnoughSamples && m.Noisy && m.Delta != 0
}

func (m *MetricDiff) changed() bool {
	return m.Unmeasured == "" && m.Significant && m.OverThreshold && m.EnoughSamples
}

// Margin is what a change must clear on top of the threshold: the wider
// side's noise, NoisyMargin times it where that is wider than the
// threshold, 0 when unknown.
func (m *MetricDiff) Margin() float64 { return m.margin }

// Noise is the wider of the two sides' noise (NaN when neither is known).
func (m *MetricDiff) Noise() float64 {
	switch {
	case math.IsNaN(m.BaseNoise):
		return m.NewNoise
	case math.IsNaN(m.NewNoise):
		return m.BaseNoise
	}
	return math.Max(m.BaseNoise, m.NewNoise)
}

// Verdict says in a few words which conditions held.
func (m *MetricDiff) Verdict(opt DiffOptions) string {
	opt = opt.withDefaults()
	switch {
	case m.Unmeasured != "":
		return "not compared: " + m.Unmeasured
	case !m.EnoughSamples:
		return fmt.Sprintf("cannot tell: too few samples (n=%d+%d)", m.Base.N, m.New.N)
	case !m.Significant:
		return fmt.Sprintf("no significant change (p=%s > %s)", formatP(m.P), formatP(opt.Alpha))
	case m.Noisy:
		return fmt.Sprintf("too noisy to tell at %s%%: %s %s, but the rounds spread %s (base, %s) and %s (new, %s)",
			trimFloat(opt.Threshold), m.change(), m.direction(), formatNoise(m.BaseNoise), units.Plural(m.BaseRounds, "round"), formatNoise(m.NewNoise), units.Plural(m.NewRounds, "round"))
	case !m.OverThreshold && m.Margin() > 0 && math.Abs(m.Delta) > opt.Threshold:
		return fmt.Sprintf("significant but within threshold and noise (%s, threshold %s%% + noise %s)", formatDelta(m.Delta), trimFloat(opt.Threshold), formatNoise(m.Margin()))
	case !m.OverThreshold:
		return fmt.Sprintf("significant but within threshold (%s, threshold %s%%)", formatDelta(m.Delta), trimFloat(opt.Threshold))
	case m.Worse:
		return fmt.Sprintf("REGRESSION: %s worse, p=%s, n=%d+%d, threshold %s%%%s", m.change(), formatP(m.P), m.Base.N, m.New.N, trimFloat(opt.Threshold), m.noiseNote())
	}
	return fmt.Sprintf("improvement: %s better, p=%s%s", m.change(), formatP(m.P), m.noiseNote())
}

// change is the delta, or the two medians when base is zero.
func (m *MetricDiff) change() string {
	if math.IsNaN(m.Delta) {
		return fmt.Sprintf("from %s to %s", FormatQuantity(m.Base.Median, m.Unit), FormatQuantity(m.New.Median, m.Unit))
	}
	return formatDelta(m.Delta)
}

func (m *MetricDiff) direction() string {
	if m.Worse {
		return "worse"
	}
	return "better"
}

func (m *MetricDiff) noiseNote() string {
	if n := m.Noise(); !math.IsNaN(n) {
		return ", noise " + formatNoise(n)
	}
	return ""
}

func formatNoise(p float64) string {
	if math.IsNaN(p) {
		return "unknown"
	}
	if p < 10 {
		return strconv.FormatFloat(p, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(p, 'f', 0, 64) + "%"
}

// GeomeanDiff is the geometric mean of the medians of one metric over the
// results compared on both sides. It has no p-value and never regresses.
type GeomeanDiff struct {
	Metric string  `json:"metric"`
	Unit   string  `json:"unit"`
	Base   float64 `json:"base"`
	New    float64 `json:"new"`
	Delta  float64 `json:"delta_pct"`
	N      int     `json:"n"` // results in the mean
}

func (o DiffOptions) withDefaults() DiffOptions {
	if o.Alpha == 0 {
		o.Alpha = benchmath.DefaultThresholds.CompareAlpha
	}
	return o
}

// side holds one side's metrics by result key, pooling the samples of a
// result that appears several times.
type side struct {
	keys    []string
	metrics map[string][]*pooled
	envs    map[string]map[string]bool
	ids     map[string]Result // name and parameters of each key
	context map[string]bool   // the result is context (Result.Role, or the name rule)
}

type pooled struct {
	Metric
	unmeasured []string
	// groups holds the samples of each round of each run: "run\x00round".
	groups map[string][]float64
	order  []string
}

func collect(docs []*Document) *side {
	s := &side{metrics: map[string][]*pooled{}, envs: map[string]map[string]bool{}, ids: map[string]Result{}, context: map[string]bool{}}
	for di, d := range docs {
		for i := range d.Results {
			r := &d.Results[i]
			k := r.Key()
			context, derived := roles(d, r)
			if _, ok := s.metrics[k]; !ok {
				s.keys = append(s.keys, k)
				s.metrics[k] = nil
				s.envs[k] = map[string]bool{}
				s.ids[k] = Result{Name: r.Name, Params: r.Params}
			}
			s.context[k] = s.context[k] || context
			s.envs[k][d.EnvOf(r).Key()] = true
			run := d.RunOf(r)
			if run == "" {
				run = fmt.Sprintf("document %d", di+1) // documents before run ids: one run each
			}
			for _, m := range r.Metrics {
				var p *pooled
				for _, q := range s.metrics[k] {
					if q.Name == m.Name {
						p = q
					}
				}
				if p == nil {
					p = &pooled{Metric: Metric{Name: m.Name, Unit: m.Unit, Better: m.Better}, groups: map[string][]float64{}}
					s.metrics[k] = append(s.metrics[k], p)
				}
				if p.DerivedFrom == "" {
					p.DerivedFrom = derived[m.Name]
				}
				if m.Measured() {
					p.Samples = append(p.Samples, m.Samples...)
					for j, v := range m.Samples {
						round := 0
						if len(m.Rounds) == len(m.Samples) {
							round = m.Rounds[j]
						}
						g := run + "\x00" + strconv.Itoa(round)
						if _, ok := p.groups[g]; !ok {
							p.order = append(p.order, g)
						}
						p.groups[g] = append(p.groups[g], v)
					}
				} else {
					p.unmeasured = append(p.unmeasured, m.Unmeasured)
				}
				if p.Unit != m.Unit || p.Better != m.Better {
					p.unmeasured = append(p.unmeasured, fmt.Sprintf("appears with unit %q/%q and direction %q/%q", p.Unit, m.Unit, p.Better, m.Better))
				}
			}
		}
	}
	return s
}

// noise is the spread of the per-round medians: their range as a
// percentage of the median of all samples; NaN with fewer than two rounds.
func (p *pooled) noise() (float64, int) {
	if len(p.order) < 2 {
		return math.NaN(), len(p.order)
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, g := range p.order {
		m := results.Summarize(p.groups[g]).Median
		lo, hi = math.Min(lo, m), math.Max(hi, m)
	}
	med := math.Abs(results.Summarize(p.Samples).Median)
	if med == 0 {
		if hi == lo {
			return 0, len(p.order)
		}
		return math.Inf(1), len(p.order)
	}
	return 100 * (hi - lo) / med, len(p.order)
}

// Diff compares the results of new against those of base. Results pair by
// Result.Key(); several results with the same key on one side are pooled
// (with a warning when they come from different environments). For each
// metric it reports both medians with their 95% CIs, the change and the
// Mann-Whitney U p-value, each side's noise between rounds, and whether it
// is a regression: worse for its direction AND significant AND larger than
// the threshold AND from enough samples to tell AND not drowned in noise.
// Only deciding metrics (see DiffOptions.Metrics) fail a comparison, and
// so do failed gates and missing results of new (see Failures).
func Diff(base, new []*Document, opt DiffOptions) *Comparison {
	opt = opt.withDefaults()
	c := &Comparison{Options: opt}
	b, n := collect(base), collect(new)
	// A result measured while the GPU throttled is slower for a reason the
	// code did not cause: say so beside the verdict.
	for _, s := range []struct {
		name string
		docs []*Document
	}{{"base", base}, {"new", new}} {
		var all []results.Result
		for _, d := range s.docs {
			for i := range d.Results {
				if note := d.Results[i].ThrottleNote(); note != "" {
					c.Warnings = append(c.Warnings, fmt.Sprintf("%s: %s %s", s.name, d.Results[i].Key(), note))
				}
			}
			all = append(all, d.Results...)
		}
		if note := results.BusyHostNote(all); note != "" {
			c.Warnings = append(c.Warnings, s.name+": "+note)
		}
	}
	for _, s := range []struct {
		name string
		side *side
	}{{"base", b}, {"new", n}} {
		for _, k := range s.side.keys {
			if len(s.side.envs[k]) > 1 {
				c.Warnings = append(c.Warnings, fmt.Sprintf("%s: %s pools samples from %d environments", s.name, k, len(s.side.envs[k])))
			}
		}
	}
	for i, d := range new {
		c.FailedGates = append(c.FailedGates, d.Failed()...)
		if d.Interrupted() {
			c.Interrupted = append(c.Interrupted, fmt.Sprintf("new document %d (%s) is interrupted: its results are the part that ran", i+1, d.Suite))
		}
	}
	baseRuns := map[string]bool{}
	for _, d := range base {
		for i := range d.Results {
			if run := d.RunOf(&d.Results[i]); run != "" {
				baseRuns[run] = true
			}
		}
	}
	for _, d := range new {
		for i := range d.Results {
			if run := d.RunOf(&d.Results[i]); baseRuns[run] {
				c.Warnings = append(c.Warnings, fmt.Sprintf("base and new both hold run %s: a run compared with itself shows no change", run))
				delete(baseRuns, run)
			}
		}
	}
	c.Warnings = append(c.Warnings, pairAcrossSettings(b, n)...)
	if w := otherCards(base, new); w != "" {
		c.Warnings = append(c.Warnings, w)
	}
	for i, d := range base {
		c.BaseFailedGates = append(c.BaseFailedGates, d.Failed()...)
		if d.Interrupted() {
			c.Warnings = append(c.Warnings, fmt.Sprintf("base document %d (%s) is interrupted: results it lacks are not compared", i+1, d.Suite))
		}
	}
	for _, k := range b.keys {
		if _, ok := n.metrics[k]; !ok {
			c.OnlyBase = append(c.OnlyBase, k)
			if !b.context[k] {
				c.Missing = append(c.Missing, k)
			}
			continue
		}
		for _, bm := range b.metrics[k] {
			var nm *pooled
			for _, q := range n.metrics[k] {
				if q.Name == bm.Name {
					nm = q
				}
			}
			decides, role := decides(opt, b.context[k] || n.context[k], bm, nm)
			if nm == nil {
				c.Warnings = append(c.Warnings, fmt.Sprintf("%s: metric %s is only in base", k, bm.Name))
				if decides && bm.Measured() {
					c.Missing = append(c.Missing, k+": "+bm.Name)
				}
				continue
			}
			m := compareMetric(k, bm, nm, opt)
			m.Name, m.Params = b.ids[k].Name, b.ids[k].Params
			if np := n.ids[k].Params; !maps.Equal(np, m.Params) {
				m.NewParams = np
			}
			m.Decides, m.Role = decides, role
			if decides && m.Unmeasured != "" && len(bm.Samples) > 0 && len(bm.unmeasured) == 0 && len(nm.Samples) == 0 {
				c.Missing = append(c.Missing, k+": "+bm.Name+" (unmeasured in new: "+unmeasuredWhy(nm)+")")
			}
			c.Metrics = append(c.Metrics, m)
		}
		for _, nm := range n.metrics[k] {
			if !slices.ContainsFunc(b.metrics[k], func(q *pooled) bool { return q.Name == nm.Name }) {
				c.Warnings = append(c.Warnings, fmt.Sprintf("%s: metric %s is only in new", k, nm.Name))
			}
		}
	}
	for _, k := range n.keys {
		if _, ok := b.metrics[k]; !ok {
			c.OnlyNew = append(c.OnlyNew, k)
		}
	}
	c.Geomeans = geomeans(c.Metrics)
	return c
}

// decides says whether a metric decides, and its role in words.
func decides(opt DiffOptions, context bool, bm, nm *pooled) (bool, string) {
	role := "measured"
	from := bm.DerivedFrom
	if from == "" && nm != nil {
		from = nm.DerivedFrom
	}
	switch {
	case context:
		role = "context"
	case from != "":
		role = "derived from " + from
	}
	if opt.Metrics != nil {
		return slices.Contains(opt.Metrics, bm.Name), role
	}
	return role == "measured", role
}

func compareMetric(key string, bm, nm *pooled, opt DiffOptions) MetricDiff {
	d := MetricDiff{Key: key, Metric: bm.Name, Unit: bm.Unit, Better: bm.Better, BaseNoise: math.NaN(), NewNoise: math.NaN()}
	switch {
	case len(bm.unmeasured) > 0 || len(bm.Samples) == 0:
		d.Unmeasured = "base: " + unmeasuredWhy(bm)
		return d
	case len(nm.unmeasured) > 0 || len(nm.Samples) == 0:
		d.Unmeasured = "new: " + unmeasuredWhy(nm)
		return d
	case bm.Unit != nm.Unit:
		d.Unmeasured = fmt.Sprintf("unit changed from %q to %q", bm.Unit, nm.Unit)
		return d
	case bm.Better != nm.Better:
		d.Unmeasured = fmt.Sprintf("direction changed from %q to %q", bm.Better, nm.Better)
		return d
	}
	d.Base, d.New = results.Summarize(bm.Samples), results.Summarize(nm.Samples)
	d.same = !slices.ContainsFunc(append(slices.Clone(bm.Samples), nm.Samples...), func(v float64) bool { return v != bm.Samples[0] })
	bs, ns := results.NewSample(bm.Samples, opt.Alpha), results.NewSample(nm.Samples, opt.Alpha)
	cmp := benchmath.AssumeNothing.Compare(bs, ns)
	d.P = cmp.P
	for _, w := range cmp.Warnings {
		d.Warnings = append(d.Warnings, w.Error())
	}
	for _, w := range []string{d.Base.Warning, d.New.Warning} {
		if w != "" && !slices.Contains(d.Warnings, w) {
			d.Warnings = append(d.Warnings, w)
		}
	}
	switch {
	case d.Base.Median == d.New.Median:
		d.Delta = 0
	case d.Base.Median == 0:
		d.Delta = math.NaN()
	default:
		// Of |base|, so that the sign says which way the median moved even
		// for negative values.
		d.Delta = (d.New.Median - d.Base.Median) / math.Abs(d.Base.Median) * 100
	}
	if d.Better == HigherIsBetter {
		d.Worse = d.New.Median < d.Base.Median
	} else {
		d.Worse = d.New.Median > d.Base.Median
	}
	d.Significant = cmp.P <= opt.Alpha
	d.EnoughSamples = d.Significant || minUTestP(len(bm.Samples), len(nm.Samples)) <= opt.Alpha
	d.BaseNoise, d.BaseRounds = bm.noise()
	d.NewNoise, d.NewRounds = nm.noise()
	// The rounds of one run spread by the noise, so two runs of the same
	// code can sit that far apart: a change counts only when it clears the
	// threshold by more than that (H200 A/A: +5.18% at noise 2.0%).
	if n := d.Noise(); !math.IsNaN(n) {
		d.margin = n
		if n > opt.Threshold {
			d.margin = NoisyMargin * n
		}
	}
	d.OverThreshold = math.IsNaN(d.Delta) || math.Abs(d.Delta)-d.Margin() > opt.Threshold
	d.Noisy = d.Noise() > opt.Threshold && !d.OverThreshold && math.Abs(d.Delta) > opt.Threshold
	return d
}

func unmeasuredWhy(p *pooled) string {
	if len(p.unmeasured) > 0 {
		return strings.Join(p.unmeasured, "; ")
	}
	return "no samples"
}

// minUTestP is the smallest two-sided p-value the Mann-Whitney U test can
// give for samples of n1 and n2 values (complete separation, no ties):
// 2 / C(n1+n2, n1). Below alpha no difference, however large, can show.
func minUTestP(n1, n2 int) float64 {
	if n1 == 0 || n2 == 0 {
		return 1
	}
	lg := func(x int) float64 { v, _ := math.Lgamma(float64(x + 1)); return v }
	return math.Min(1, 2*math.Exp(lg(n1)+lg(n2)-lg(n1+n2)))
}

func geomeans(ms []MetricDiff) []GeomeanDiff {
	type acc struct {
		g          GeomeanDiff
		base, next []float64
	}
	var order []string
	by := map[string]*acc{}
	for _, m := range ms {
		if m.Unmeasured != "" || m.Base.Median <= 0 || m.New.Median <= 0 {
			continue // the geometric mean needs positive values
		}
		k := m.Metric + "\x00" + m.Unit
		a := by[k]
		if a == nil {
			a = &acc{g: GeomeanDiff{Metric: m.Metric, Unit: m.Unit}}
			by[k] = a
			order = append(order, k)
		}
		a.base = append(a.base, m.Base.Median)
		a.next = append(a.next, m.New.Median)
	}
	var out []GeomeanDiff
	for _, k := range order {
		a := by[k]
		a.g.Base, a.g.New, a.g.N = geomean(a.base), geomean(a.next), len(a.base)
		a.g.Delta = (a.g.New/a.g.Base - 1) * 100
		out = append(out, a.g)
	}
	return out
}

func geomean(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += math.Log(x)
	}
	return math.Exp(sum / float64(len(xs)))
}

// Regressions returns the deciding metrics that regressed.
func (c *Comparison) Regressions() []*MetricDiff {
	return c.filter(func(m *MetricDiff) bool { return m.Decides && m.Regression() })
}

// Noisy returns the deciding metrics that changed by more than the
// threshold within noise wider than it: too noisy to tell.
func (c *Comparison) Noisy() []*MetricDiff {
	return c.filter(func(m *MetricDiff) bool { return m.Decides && m.TooNoisy() })
}

// Compared counts the deciding metrics measured on both sides.
func (c *Comparison) Compared() int {
	return len(c.filter(func(m *MetricDiff) bool { return m.Decides && m.Unmeasured == "" }))
}

func (c *Comparison) filter(keep func(*MetricDiff) bool) []*MetricDiff {
	var out []*MetricDiff
	for i := range c.Metrics {
		if keep(&c.Metrics[i]) {
			out = append(out, &c.Metrics[i])
		}
	}
	return out
}

// Failures are the reasons the comparison fails (exit 1), one per kind,
// most important first: gates that failed in new, results missing from
// new or an interrupted new document (unless AllowMissing), regressions,
// and changes too noisy to tell (with FailNoisy). None: it passed.
func (c *Comparison) Failures() []string {
	var out []string
	if n := len(c.FailedGates); n > 0 {
		out = append(out, fmt.Sprintf("%s failed in new: %s", units.Plural(n, "gate"), listSome(c.FailedGates, 2)))
	}
	if !c.Options.AllowMissing {
		if n := len(c.Interrupted); n > 0 {
			out = append(out, strings.Join(c.Interrupted, "; ")+" (--allow-missing to accept)")
		}
		if n := len(c.Missing); n > 0 {
			out = append(out, fmt.Sprintf("%s of base missing from new: %s (--allow-missing to accept)", units.Plural(n, "result"), listSome(c.Missing, 3)))
		}
	}
	if regs := c.Regressions(); len(regs) > 0 {
		out = append(out, fmt.Sprintf("%s: %s", units.Plural(len(regs), "regression"), listSome(briefs(regs), 3)))
	}
	if noisy := c.Noisy(); c.Options.FailNoisy && len(noisy) > 0 {
		out = append(out, fmt.Sprintf("%s too noisy to tell at %s%% (--fail-noisy): %s", units.Plural(len(noisy), "metric"), trimFloat(c.Options.Threshold), listSome(briefs(noisy), 3)))
	}
	return out
}

// briefs are "key latency +10.2% (p=0.002, noise 1.2%)", for one-line summaries.
func briefs(ms []*MetricDiff) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = fmt.Sprintf("%s %s %s (p=%s, noise %s)", m.Key, m.Metric, m.change(), formatP(m.P), formatNoise(m.Noise()))
	}
	return out
}

// Deciding lists the metric names that decide in at least one compared
// result, and those shown only, each with why ("derived from latency",
// "context"), in order of first appearance.
func (c *Comparison) Deciding() (decide, shown []string) {
	for _, m := range c.Metrics {
		if m.Decides {
			if !slices.Contains(decide, m.Metric) {
				decide = append(decide, m.Metric)
			}
			continue
		}
		what := m.Metric + " (" + m.Role + ")"
		if m.Role == "context" {
			what = m.Name + " results (context)"
		} else if m.Role == "measured" {
			what = m.Metric + " (not in --metrics)"
		}
		if !slices.Contains(shown, what) {
			shown = append(shown, what)
		}
	}
	return decide, shown
}

// roles are what a document declares of a result: whether it is context,
// and what each metric is derived from. Documents from before run ids
// declared nothing; for them a rule by name stands in.
func roles(d *Document, r *Result) (context bool, derived map[string]string) {
	derived = map[string]string{}
	if d.RunID != "" || r.Run != "" || r.Role != RoleMeasured || slices.ContainsFunc(r.Metrics, func(m Metric) bool { return m.DerivedFrom != "" }) {
		for _, m := range r.Metrics {
			derived[m.Name] = m.DerivedFrom
		}
		return r.Role == RoleContext, derived
	}
	return contextByName(r), derivedByName(r)
}

// contextByName: the ceilings, the uniform-routing reference, tuning
// candidates and the memcpy rows of the arena sweep.
func contextByName(r *Result) bool {
	switch r.Name {
	case "ceiling", "spill-ceiling", "router/uniform-reference", "moe_tune":
		return true
	}
	t := r.Params["transport"]
	return r.Name == "transport" && (t == "memcpy" || t == "memcpy-2t")
}

// derivedByName: percentages, and rates where the result has the time
// they are computed from.
func derivedByName(r *Result) map[string]string {
	out := map[string]string{}
	var source string
	for _, name := range []string{"latency", "time", "kernel_time"} {
		if r.Metric(name) != nil {
			source = name
			break
		}
	}
	for _, m := range r.Metrics {
		switch {
		case m.Name == source:
		case strings.HasSuffix(m.Name, "_of_ceiling") && r.Metric(strings.TrimSuffix(m.Name, "_of_ceiling")) != nil:
			out[m.Name] = strings.TrimSuffix(m.Name, "_of_ceiling")
		case source != "" && (strings.HasPrefix(m.Name, "pct_") || m.Name == "share"):
			out[m.Name] = source
		case source != "" && slices.Contains([]string{"throughput", "bandwidth", "tensors_per_s", "vs_file", "slowdown", "tflops", "gbps"}, m.Name):
			out[m.Name] = source
		}
	}
	if r.Metric("register") != nil && r.Metric("register_per_gib") != nil {
		out["register_per_gib"] = "register"
	}
	return out
}

// CannotTell returns the metrics whose sample counts are too small to show
// any change at Alpha (and whose samples are not all one value).
func (c *Comparison) CannotTell() []*MetricDiff {
	var out []*MetricDiff
	for i := range c.Metrics {
		// Samples all one value on both sides leave nothing to tell.
		if m := &c.Metrics[i]; m.Unmeasured == "" && !m.EnoughSamples && !m.same {
			out = append(out, m)
		}
	}
	return out
}

func formatP(p float64) string {
	return strconv.FormatFloat(p, 'f', 3, 64)
}

func trimFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func formatDelta(d float64) string {
	if math.IsNaN(d) {
		return "?"
	}
	return fmt.Sprintf("%+.2f%%", d)
}

// deltaCell is the change as benchstat prints it: "~" when not significant.
func (m *MetricDiff) deltaCell() string {
	switch {
	case m.Unmeasured != "":
		return "unmeasured"
	case !m.Significant:
		return "~"
	}
	return formatDelta(m.Delta)
}

// summaryCell is the median with its unit and, when bounded, the
// half-width of its interval; without an interval (too few samples) the
// median alone, since the n column says why.
func summaryCell(s Summary, unit string) string {
	v := FormatQuantity(s.Median, unit)
	if p := s.HalfWidthPct(); !math.IsInf(p, 0) && s.Lo != s.Hi {
		v += " " + formatPct(p)
	}
	return v
}

// CannotTellSummary describes, one entry per metric, the comparisons whose
// samples are too few to show any change: "rel_l2 in 13 results (n=1+1)".
func (c *Comparison) CannotTellSummary() []string { return cannotTellSummary(c.CannotTell()) }

func cannotTellSummary(ms []*MetricDiff) []string {
	type acc struct {
		n  int
		ns []string
	}
	var order []string
	by := map[string]*acc{}
	for _, m := range ms {
		a := by[m.Metric]
		if a == nil {
			a = &acc{}
			by[m.Metric] = a
			order = append(order, m.Metric)
		}
		a.n++
		if n := fmt.Sprintf("%d+%d", m.Base.N, m.New.N); !slices.Contains(a.ns, n) {
			a.ns = append(a.ns, n)
		}
	}
	out := make([]string, 0, len(order))
	for _, name := range order {
		a := by[name]
		out = append(out, fmt.Sprintf("%s in %s (n=%s)", name, units.Plural(a.n, "result"), strings.Join(a.ns, ", ")))
	}
	return out
}

// SamplesNeeded is the fewest samples a side with which the U test can
// show a change at all at the comparison's alpha (4 at 0.05).
func (c *Comparison) SamplesNeeded() int {
	alpha := c.Options.withDefaults().Alpha
	n := 1
	for minUTestP(n, n) > alpha && n < 1000 {
		n++
	}
	return n
}

// listSome joins the first n names and counts the rest.
func listSome(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// maxLabel is the longest row label rowLabels leaves alone.
const maxLabel = 40

// rowLabels names the rows of one table briefly. Per result name, the
// parameters all its rows share go into a line above the table; where the
// labels are still long, the fewest parameters that tell the rows apart
// stay and each row's others go into a line of their own. Short labels of a
// lone result stay whole.
func rowLabels(rs []Result) (lines, labels []string) { return rowLabelsWithin(rs, maxLabel) }

// rowLabelsWithin is rowLabels with labels of at most limit characters
// where the parameters allow.
func rowLabelsWithin(rs []Result, limit int) (lines, labels []string) {
	labels = make([]string, len(rs))
	var names []string
	byName := map[string][]int{}
	for i, r := range rs {
		if _, ok := byName[r.Name]; !ok {
			names = append(names, r.Name)
		}
		byName[r.Name] = append(byName[r.Name], i)
	}
	label := func(r Result, keep []string) string {
		parts := []string{r.Name}
		for _, k := range keep {
			if v, ok := r.Params[k]; ok {
				parts = append(parts, k+"="+v)
			}
		}
		return strings.Join(parts, "/")
	}
	for _, name := range names {
		idx := byName[name]
		all := map[string]bool{}
		for _, i := range idx {
			for k := range rs[i].Params {
				all[k] = true
			}
		}
		var shared, varying []string
		for _, k := range sortedKeys(all) {
			v, ok := rs[idx[0]].Params[k]
			same := ok
			for _, i := range idx[1:] {
				if w, ok := rs[i].Params[k]; !ok || w != v {
					same = false
				}
			}
			if same {
				shared = append(shared, k)
			} else {
				varying = append(varying, k)
			}
		}
		if len(idx) == 1 && len(rs[idx[0]].Key()) <= limit {
			labels[idx[0]] = rs[idx[0]].Key()
			continue
		}
		keep := varying
		if longest(rs, idx, keep, label) > limit {
			keep = fewestTellingApart(rs, idx, varying)
		}
		if len(shared) > 0 {
			kv := make([]string, len(shared))
			for j, k := range shared {
				kv[j] = k + "=" + rs[idx[0]].Params[k]
			}
			switch {
			case len(names) == 1:
				lines = append(lines, "every result has "+strings.Join(kv, "/"))
			case len(idx) == 1:
				lines = append(lines, name+" has "+strings.Join(kv, "/"))
			default:
				lines = append(lines, "every "+name+" result has "+strings.Join(kv, "/"))
			}
		}
		for _, i := range idx {
			labels[i] = label(rs[i], keep)
			var rest []string
			for _, k := range varying {
				if v, ok := rs[i].Params[k]; ok && !slices.Contains(keep, k) {
					rest = append(rest, k+"="+v)
				}
			}
			if len(rest) > 0 {
				lines = append(lines, labels[i]+" has "+strings.Join(rest, "/"))
			}
		}
	}
	return lines, labels
}

func longest(rs []Result, idx []int, keep []string, label func(Result, []string) string) int {
	n := 0
	for _, i := range idx {
		n = max(n, len(label(rs[i], keep)))
	}
	return n
}

// fewestTellingApart is the smallest set of params (the shortest labels
// among sets of one size) whose values tell the rows apart; all of params
// when no smaller set does or there are too many to try.
func fewestTellingApart(rs []Result, idx []int, params []string) []string {
	if len(params) > 8 {
		return params
	}
	var best []string
	bestLen := 0
	for size := 1; size < len(params) && best == nil; size++ {
		for mask := 0; mask < 1<<len(params); mask++ {
			if bits.OnesCount(uint(mask)) != size {
				continue
			}
			var set []string
			for j, p := range params {
				if mask&(1<<j) != 0 {
					set = append(set, p)
				}
			}
			seen := map[string]bool{}
			n := 0
			for _, i := range idx {
				var vals []string
				for _, p := range set {
					vals = append(vals, p+"="+rs[i].Params[p])
				}
				k := strings.Join(vals, "/")
				seen[k] = true
				n += len(k)
			}
			if len(seen) == len(idx) && (best == nil || n < bestLen) {
				best, bestLen = set, n
			}
		}
	}
	if best == nil {
		return params
	}
	return best
}

// LabelParams are the parameters a row is labelled by: base's, with each
// setting that changed written "base → new".
func (m MetricDiff) LabelParams() Params {
	if m.NewParams == nil {
		return m.Params
	}
	p := maps.Clone(m.Params)
	for _, k := range settingParams {
		if bv, nv := m.Params[k], m.NewParams[k]; bv != nv {
			p[k] = orNone(bv) + " → " + orNone(nv)
		}
	}
	return p
}

func orNone(v string) string {
	if v == "" {
		return "(none)"
	}
	return v
}

// settingParams say how a result was obtained (the kernel configuration,
// where it came from, and the kernel it ran: a stage of bench moe --stages
// names its kernel, which a changed config renames; ablate router's kernel
// run, its tokens and baseline, which a host too small for the kernel
// leaves out), not what was measured: a result of base whose exact key new
// lacks pairs with the one result of new that differs from it only in
// these, so that a changed --config is compared (and can be a regression)
// instead of reading as a missing result.
var settingParams = []string{"config", "config_source", "kernel", "kernel_tokens", "baseline"}

func settingsFree(r Result) string {
	p := Params{}
	for k, v := range r.Params {
		if !slices.Contains(settingParams, k) {
			p[k] = v
		}
	}
	return Result{Name: r.Name, Params: p}.Key()
}

// pairAcrossSettings renames, on the new side, each result that has no
// exact partner in base but exactly one partner there once settingParams
// are left out (and is the only such result of new), to the base key. It
// returns one note per pair naming what changed.
func pairAcrossSettings(b, n *side) []string {
	loose := func(s *side, other *side) map[string][]string {
		m := map[string][]string{}
		for _, k := range s.keys {
			if _, ok := other.metrics[k]; !ok {
				lk := settingsFree(s.ids[k])
				m[lk] = append(m[lk], k)
			}
		}
		return m
	}
	lb, ln := loose(b, n), loose(n, b)
	var notes []string
	for _, bk := range b.keys {
		if _, ok := n.metrics[bk]; ok {
			continue
		}
		lk := settingsFree(b.ids[bk])
		if len(lb[lk]) != 1 || len(ln[lk]) != 1 {
			continue
		}
		nk := ln[lk][0]
		var changed []string
		for _, p := range settingParams {
			if bv, nv := b.ids[bk].Params[p], n.ids[nk].Params[p]; bv != nv {
				changed = append(changed, fmt.Sprintf("%s %q → %q", p, bv, nv))
			}
		}
		n.metrics[bk], n.envs[bk], n.context[bk] = n.metrics[nk], n.envs[nk], n.context[nk]
		n.ids[bk] = n.ids[nk] // new's own settings, for the rows' labels
		delete(n.metrics, nk)
		delete(n.envs, nk)
		delete(n.context, nk)
		delete(n.ids, nk)
		n.keys[slices.Index(n.keys, nk)] = bk
		notes = append(notes, fmt.Sprintf("%s: compared across a changed setting: %s", lk, strings.Join(changed, ", ")))
	}
	return notes
}

// otherCards warns when base and new were measured on different physical
// GPUs (env gpu.uuid) with nothing in common: a diff between cards of one
// model also holds the spread between the cards. On lent H200s, where nearly
// every call lands on another card, one small-batch MoE configuration read
// up to 8% apart from card to card (242 against 262 µs) (kernels/moe/NOTES.md).
func otherCards(base, new []*Document) string {
	cards := func(docs []*Document) ([]string, map[string]string) {
		var ids []string
		model := map[string]string{}
		for _, d := range docs {
			for i := range d.Results {
				e := d.EnvOf(&d.Results[i])
				id := e["gpu.uuid"]
				if id == "" {
					continue
				}
				if _, ok := model[id]; !ok {
					ids = append(ids, id)
				}
				model[id] = e["gpu"]
			}
		}
		return ids, model
	}
	b, bm := cards(base)
	n, nm := cards(new)
	if len(b) == 0 || len(n) == 0 {
		return ""
	}
	for _, id := range b {
		if _, ok := nm[id]; ok {
			return ""
		}
	}
	name := func(ids []string, model map[string]string) string {
		s := ids[0]
		if m := model[ids[0]]; m != "" {
			s += " (" + m + ")"
		}
		if len(ids) > 1 {
			s += fmt.Sprintf(" and %d more", len(ids)-1)
		}
		return s
	}
	return fmt.Sprintf("base ran on %s, new on %s: no card in common, so the differences include the spread between cards "+
		"(to separate them, measure both builds in one run on one card)", name(b, bm), name(n, nm))
}
