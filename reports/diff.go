package reports

import (
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
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
	Name   string // the result's name and parameters, as in Key
	Params Params
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
	ids     map[string]Result // name and parameters of each key
}

type pooled struct {
	Metric
	unmeasured []string
}

func collect(docs []*Document) *side {
	s := &side{metrics: map[string][]*pooled{}, envs: map[string]map[string]bool{}, ids: map[string]Result{}}
	for _, d := range docs {
		for i := range d.Results {
			r := &d.Results[i]
			k := r.Key()
			if _, ok := s.metrics[k]; !ok {
				s.keys = append(s.keys, k)
				s.metrics[k] = nil
				s.envs[k] = map[string]bool{}
				s.ids[k] = Result{Name: r.Name, Params: r.Params}
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
	// A result measured while the GPU throttled is slower for a reason the
	// code did not cause: say so beside the verdict.
	for _, s := range []struct {
		name string
		docs []*Document
	}{{"base", base}, {"new", new}} {
		for _, d := range s.docs {
			for i := range d.Results {
				if note := d.Results[i].ThrottleNote(); note != "" {
					c.Warnings = append(c.Warnings, fmt.Sprintf("%s: %s %s", s.name, d.Results[i].Key(), note))
				}
			}
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
			m := compareMetric(k, bm, nm, opt)
			m.Name, m.Params = b.ids[k].Name, b.ids[k].Params
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
	d.Base, d.New = results.Summarize(bm.Samples), results.Summarize(nm.Samples)
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

// RenderDiff writes the comparison as text or markdown: a table per metric
// with a geomean row, then what is on one side only, warnings, and the
// verdict of each regression. A metric none of whose results has enough
// samples to tell gets one line instead of a table.
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
	labels := map[*MetricDiff]string{}
	var untabled []*MetricDiff
	tabled := 0
	for _, g := range groups {
		// Rows that all cannot tell would fill a table with "cannot
		// tell"; one line below lists them instead.
		if !slices.ContainsFunc(g.rows, func(m *MetricDiff) bool { return m.Unmeasured != "" || m.EnoughSamples }) {
			untabled = append(untabled, g.rows...)
			continue
		}
		if tabled > 0 {
			b.WriteString("\n")
		}
		tabled++
		heading(fmt.Sprintf("%s (%s is better)", g.col.Header(), g.col.Better))
		ids := make([]Result, len(g.rows))
		for j, m := range g.rows {
			ids[j] = Result{Name: m.Name, Params: m.Params}
		}
		lines, short := rowLabels(ids)
		for _, l := range lines {
			item(l)
		}
		if len(lines) > 0 && markdown {
			b.WriteString("\n")
		}
		tab := newTableWriter(&b, markdown)
		tab.Header([]string{"result", "base", "new", "delta", "p", "n", "verdict"})
		for j, m := range g.rows {
			labels[m] = short[j]
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
	// A warning shared by many results is one line naming a few of them.
	type warning struct {
		text string
		who  []string
	}
	var warns []*warning
	for i := range c.Metrics {
		m := &c.Metrics[i]
		who, ok := labels[m]
		if !ok {
			continue // summarised as "cannot tell"
		}
		for _, w := range m.Warnings {
			text := m.Metric + ": " + w
			j := slices.IndexFunc(warns, func(x *warning) bool { return x.text == text })
			if j < 0 {
				warns = append(warns, &warning{text: text})
				j = len(warns) - 1
			}
			warns[j].who = append(warns[j].who, who)
		}
	}
	var warnings []string
	for _, w := range warns {
		warnings = append(warnings, w.text+" ("+listSome(w.who, 3)+")")
	}
	warnings = append(warnings, c.Warnings...)
	var cannot []string
	if ct := cannotTellSummary(untabled); len(ct) > 0 {
		cannot = []string{strings.Join(ct, "; ")}
	}
	sections := []struct {
		title string
		lines []string
	}{
		{fmt.Sprintf("cannot tell, too few samples (at alpha %s the U test needs at least %d a side)", trimFloat(c.Options.Alpha), c.SamplesNeeded()), cannot},
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
func rowLabels(rs []Result) (lines, labels []string) {
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
		if len(idx) == 1 && len(rs[idx[0]].Key()) <= maxLabel {
			labels[idx[0]] = rs[idx[0]].Key()
			continue
		}
		keep := varying
		if longest(rs, idx, keep, label) > maxLabel {
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
