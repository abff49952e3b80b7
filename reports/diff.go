package reports

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/perf/benchmath"
)

// DiffOptions are the thresholds of a comparison.
type DiffOptions struct {
	// Threshold is the smallest change, in percent, that counts as a
	// regression (5 means 5%). Zero counts any significant change.
	Threshold float64
	// Alpha is the significance level of the Mann-Whitney U test; zero
	// means 0.05.
	Alpha float64
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
}

// MetricDiff compares one metric of one result.
type MetricDiff struct {
	Key    string // Result.Key()
	Metric string
	Unit   string
	Better Direction

	Base, New Summary
	// Unmeasured says why there is no comparison (a side is unmeasured, or
	// the sides disagree on unit or direction); the fields below are then zero.
	Unmeasured string

	Delta float64 // percent change of the median, new vs base; NaN if base is 0
	P     float64 // Mann-Whitney U p-value (benchmath.AssumeNothing.Compare)

	// The four conditions of a regression; the metric regressed only when
	// all four hold.
	Worse         bool // the median moved the wrong way for Better
	Significant   bool // P <= Alpha (benchstat's rule: otherwise it prints "~")
	OverThreshold bool // |Delta| > Threshold
	EnoughSamples bool // the sample counts can reach significance at Alpha at all

	Warnings []string // too few samples, with how many are needed
}

// Regression reports whether the metric got significantly and materially worse.
func (m *MetricDiff) Regression() bool {
	return m.Unmeasured == "" && m.Worse && m.Significant && m.OverThreshold && m.EnoughSamples
}

// Improvement reports whether it got significantly and materially better.
func (m *MetricDiff) Improvement() bool {
	return m.Unmeasured == "" && !m.Worse && m.Delta != 0 && m.Significant && m.OverThreshold && m.EnoughSamples
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
	case !m.OverThreshold:
		return fmt.Sprintf("significant but within threshold (%s, threshold %s%%)", formatDelta(m.Delta), trimFloat(opt.Threshold))
	case m.Worse:
		return fmt.Sprintf("REGRESSION: %s worse, p=%s, n=%d+%d, threshold %s%%", formatDelta(m.Delta), formatP(m.P), m.Base.N, m.New.N, trimFloat(opt.Threshold))
	}
	return fmt.Sprintf("improvement: %s better, p=%s", formatDelta(m.Delta), formatP(m.P))
}

// GeomeanDiff is the geometric mean of the medians of one metric over the
// results compared on both sides. It has no p-value and never regresses.
type GeomeanDiff struct {
	Metric    string
	Unit      string
	Base, New float64
	Delta     float64 // percent
	N         int     // results in the mean
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
}

type pooled struct {
	Metric
	unmeasured []string
}

func collect(docs []*Document) *side {
	s := &side{metrics: map[string][]*pooled{}, envs: map[string]map[string]bool{}}
	for _, d := range docs {
		for i := range d.Results {
			r := &d.Results[i]
			k := r.Key()
			if _, ok := s.metrics[k]; !ok {
				s.keys = append(s.keys, k)
				s.metrics[k] = nil
				s.envs[k] = map[string]bool{}
			}
			s.envs[k][d.EnvOf(r).Key()] = true
			for _, m := range r.Metrics {
				var p *pooled
				for _, q := range s.metrics[k] {
					if q.Name == m.Name {
						p = q
					}
				}
				if p == nil {
					p = &pooled{Metric: Metric{Name: m.Name, Unit: m.Unit, Better: m.Better}}
					s.metrics[k] = append(s.metrics[k], p)
				}
				if m.Measured() {
					p.Samples = append(p.Samples, m.Samples...)
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

// Diff compares the results of new against those of base. Results pair by
// Result.Key(); several results with the same key on one side are pooled
// (with a warning when they come from different environments). For each
// metric it reports both medians with their 95% CIs, the change and the
// Mann-Whitney U p-value, and whether it is a regression: worse for its
// direction AND significant AND larger than the threshold AND from enough
// samples to tell.
func Diff(base, new []*Document, opt DiffOptions) *Comparison {
	opt = opt.withDefaults()
	c := &Comparison{Options: opt}
	b, n := collect(base), collect(new)
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
	for _, k := range b.keys {
		if _, ok := n.metrics[k]; !ok {
			c.OnlyBase = append(c.OnlyBase, k)
			continue
		}
		for _, bm := range b.metrics[k] {
			var nm *pooled
			for _, q := range n.metrics[k] {
				if q.Name == bm.Name {
					nm = q
				}
			}
			if nm == nil {
				c.Warnings = append(c.Warnings, fmt.Sprintf("%s: metric %s is only in base", k, bm.Name))
				continue
			}
			c.Metrics = append(c.Metrics, compareMetric(k, bm, nm, opt))
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

func compareMetric(key string, bm, nm *pooled, opt DiffOptions) MetricDiff {
	d := MetricDiff{Key: key, Metric: bm.Name, Unit: bm.Unit, Better: bm.Better}
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
	d.Base, d.New = Summarize(bm.Samples), Summarize(nm.Samples)
	bs, ns := newSample(bm.Samples, opt.Alpha), newSample(nm.Samples, opt.Alpha)
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
		d.Delta = (d.New.Median/d.Base.Median - 1) * 100
	}
	if d.Better == HigherIsBetter {
		d.Worse = d.New.Median < d.Base.Median
	} else {
		d.Worse = d.New.Median > d.Base.Median
	}
	d.Significant = cmp.P <= opt.Alpha
	d.OverThreshold = math.IsNaN(d.Delta) || math.Abs(d.Delta) > opt.Threshold
	d.EnoughSamples = d.Significant || minUTestP(len(bm.Samples), len(nm.Samples)) <= opt.Alpha
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

// Regressions returns the metrics that regressed.
func (c *Comparison) Regressions() []*MetricDiff {
	var out []*MetricDiff
	for i := range c.Metrics {
		if c.Metrics[i].Regression() {
			out = append(out, &c.Metrics[i])
		}
	}
	return out
}

// CannotTell returns the metrics whose sample counts are too small to show
// any change at Alpha.
func (c *Comparison) CannotTell() []*MetricDiff {
	var out []*MetricDiff
	for i := range c.Metrics {
		if c.Metrics[i].Unmeasured == "" && !c.Metrics[i].EnoughSamples {
			out = append(out, &c.Metrics[i])
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

func summaryCell(s Summary) string {
	return FormatValue(s.Median) + " " + formatPct(s.HalfWidthPct())
}

// RenderDiff writes the comparison as text or markdown: a table per metric
// with a geomean row, then what is on one side only, warnings, and the
// verdict of each regression.
func RenderDiff(w io.Writer, c *Comparison, format string) error {
	markdown := false
	switch format {
	case FormatText:
	case FormatMarkdown:
		markdown = true
	default:
		return fmt.Errorf("unknown diff format %q (want %s or %s)", format, FormatText, FormatMarkdown)
	}
	var b strings.Builder
	item := func(s string) {
		if markdown {
			b.WriteString("- ")
		}
		b.WriteString(s + "\n")
	}
	heading := func(s string) {
		if markdown {
			b.WriteString("### ")
		}
		b.WriteString(s + "\n")
		if markdown {
			b.WriteString("\n")
		}
	}
	// One table per metric name and unit, in order of first appearance.
	type group struct {
		col  MetricColumn
		rows []*MetricDiff
	}
	var groups []*group
	for i := range c.Metrics {
		m := &c.Metrics[i]
		var g *group
		for _, x := range groups {
			if x.col.Name == m.Metric && x.col.Unit == m.Unit {
				g = x
			}
		}
		if g == nil {
			g = &group{col: MetricColumn{Name: m.Metric, Unit: m.Unit, Better: m.Better}}
			groups = append(groups, g)
		}
		g.rows = append(g.rows, m)
	}
	fmt.Fprintf(&b, "alpha %s, threshold %s%%\n\n", trimFloat(c.Options.Alpha), trimFloat(c.Options.Threshold))
	for i, g := range groups {
		if i > 0 {
			b.WriteString("\n")
		}
		heading(fmt.Sprintf("%s (%s is better)", g.col.Header(), g.col.Better))
		keys := make([]string, len(g.rows))
		for j, m := range g.rows {
			keys[j] = m.Key
		}
		shared, short := factorKeys(keys)
		if shared != "" {
			item("every result has " + shared)
			if markdown {
				b.WriteString("\n")
			}
		}
		tab := newTableWriter(&b, markdown)
		tab.Header([]string{"result", "base", "new", "delta", "p", "n", "verdict"})
		for j, m := range g.rows {
			row := []string{short[j], "", "", m.deltaCell(), "", "", m.Verdict(c.Options)}
			if m.Unmeasured == "" {
				row[1], row[2] = summaryCell(m.Base), summaryCell(m.New)
				row[4], row[5] = formatP(m.P), fmt.Sprintf("%d+%d", m.Base.N, m.New.N)
			}
			if err := tab.Append(row); err != nil {
				return err
			}
		}
		for _, gm := range c.Geomeans {
			if gm.Metric == g.col.Name && gm.Unit == g.col.Unit {
				row := []string{"geomean", FormatValue(gm.Base), FormatValue(gm.New), formatDelta(gm.Delta), "", strconv.Itoa(gm.N), ""}
				if err := tab.Append(row); err != nil {
					return err
				}
			}
		}
		if err := tab.Render(); err != nil {
			return err
		}
	}
	var warnings []string
	for _, m := range c.Metrics {
		for _, w := range m.Warnings {
			warnings = append(warnings, m.Key+": "+m.Metric+": "+w)
		}
	}
	warnings = append(warnings, c.Warnings...)
	sections := []struct {
		title string
		lines []string
	}{
		{"only in base", c.OnlyBase},
		{"only in new", c.OnlyNew},
		{"warnings", warnings},
	}
	for _, s := range sections {
		if len(s.lines) == 0 {
			continue
		}
		b.WriteString("\n")
		heading(s.title + ":")
		for _, l := range s.lines {
			item(l)
		}
	}
	b.WriteString("\n")
	regs := c.Regressions()
	if len(regs) == 0 {
		b.WriteString("no regressions\n")
	} else {
		heading(fmt.Sprintf("%d regression(s):", len(regs)))
		for _, m := range regs {
			item(m.Key + ": " + m.Metric + ": " + m.Verdict(c.Options))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// factorKeys takes the parameters ("/"-separated parts after the result
// name) that every key shares out into one line, so a table's rows show the
// name and what tells them apart. With one key, or nothing shared, the keys
// stay whole.
func factorKeys(keys []string) (shared string, short []string) {
	if len(keys) < 2 {
		return "", keys
	}
	parts := make([][]string, len(keys))
	count := map[string]int{}
	for i, k := range keys {
		parts[i] = strings.Split(k, "/")
		seen := map[string]bool{}
		for _, p := range parts[i] {
			if !seen[p] {
				seen[p] = true
				count[p]++
			}
		}
	}
	var common []string
	for _, p := range parts[0][1:] {
		if count[p] == len(keys) {
			common = append(common, p)
		}
	}
	if len(common) == 0 {
		return "", keys
	}
	short = make([]string, len(keys))
	for i, ps := range parts {
		rest := ps[:1:1] // the result's name always stays
		for _, p := range ps[1:] {
			if count[p] != len(keys) {
				rest = append(rest, p)
			}
		}
		short[i] = strings.Join(rest, "/")
	}
	return strings.Join(common, "/"), short
}
