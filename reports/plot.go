package reports

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// PlotOptions says what to plot: one metric against one numeric parameter.
type PlotOptions struct {
	Metric string // metric name (y)
	X      string // numeric parameter (x)
	// Series is the parameter whose values name the lines. Empty: a line per
	// result name and combination of the other parameters.
	Series string
	Where  Params // plot only results with these parameter values
	LogX   bool
	LogY   bool
	Title  string
	// Labels name the documents (file names); with several documents, each
	// line is prefixed with its document's label.
	Labels []string
}

// Series is one line of a plot.
type Series struct {
	Label  string
	Points []Point // sorted by X
}

// Point is the median (with its CI) of a metric at one x.
type Point struct {
	X float64
	Summary
}

// PlotSeries computes the lines of a plot without drawing it, and the
// metric's unit. Results without the metric, or with it unmeasured, are left
// out with a warning (unmeasured is not zero). Results of several
// environments are told apart by the environment keys that differ.
func PlotSeries(docs []*Document, opt PlotOptions) (series []Series, unit string, warnings []string, err error) {
	if opt.Metric == "" || opt.X == "" {
		return nil, "", nil, fmt.Errorf("plot: a metric and an x parameter are needed")
	}
	var items []plotItem
	leftOut, leftOutOrder := map[string]int{}, []string(nil)
	units := map[string]bool{}
	for di, d := range docs {
	results:
		for i := range d.Results {
			r := &d.Results[i]
			for k, v := range opt.Where {
				if r.Params[k] != v {
					continue results
				}
			}
			xs, ok := r.Params[opt.X]
			if !ok {
				continue
			}
			if opt.Series != "" {
				if _, ok := r.Params[opt.Series]; !ok {
					continue
				}
			}
			m := r.Metric(opt.Metric)
			if m == nil {
				continue
			}
			x, err := strconv.ParseFloat(strings.TrimSpace(xs), 64)
			if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
				return nil, "", nil, fmt.Errorf("plot: %s: parameter %s=%q is not a number", r.Key(), opt.X, xs)
			}
			if opt.LogX && x <= 0 {
				return nil, "", nil, fmt.Errorf("plot: %s: %s=%v cannot be on a log axis", r.Key(), opt.X, x)
			}
			if !m.Measured() {
				who := r.Name
				if opt.Series != "" {
					who = opt.Series + "=" + r.Params[opt.Series]
				}
				k := fmt.Sprintf("%s: %s unmeasured (%s): left out", who, m.Name, m.Unmeasured)
				if leftOut[k] == 0 {
					leftOutOrder = append(leftOutOrder, k)
				}
				leftOut[k]++
				continue
			}
			units[m.Unit] = true
			unit = m.Unit
			items = append(items, plotItem{doc: di, r: r, m: m, env: d.EnvOf(r), x: x})
		}
	}
	// One warning per series and reason, not one per point.
	for _, k := range leftOutOrder {
		warnings = append(warnings, fmt.Sprintf("%s at %d point(s)", k, leftOut[k]))
	}
	if len(items) == 0 {
		return nil, "", warnings, emptyPlotError(docs, opt, len(warnings) > 0)
	}
	if len(units) > 1 {
		return nil, "", nil, fmt.Errorf("plot: metric %s comes in several units (%s)", opt.Metric, strings.Join(sortedKeys(units), ", "))
	}

	// Environment keys that differ between the plotted results.
	varying := map[string]bool{}
	for _, it := range items {
		for k, v := range it.env {
			for _, o := range items {
				if o.env[k] != v {
					varying[k] = true
				}
			}
		}
	}
	envKeys := sortedKeys(varying)

	// A document's label prefixes its lines only where the lines of two
	// documents would otherwise read the same.
	base := make([]string, len(items))
	docsOf := map[string]map[int]bool{}
	for i := range items {
		base[i] = seriesLabel(&items[i], opt, envKeys)
		if docsOf[base[i]] == nil {
			docsOf[base[i]] = map[int]bool{}
		}
		docsOf[base[i]][items[i].doc] = true
	}
	prefix := false
	for _, ds := range docsOf {
		prefix = prefix || len(ds) > 1
	}

	byLabel := map[string]*Series{}
	var order []string
	for i := range items {
		it := &items[i]
		var parts []string
		if prefix && len(docs) > 1 {
			l := fmt.Sprintf("#%d", it.doc+1)
			if it.doc < len(opt.Labels) {
				l = opt.Labels[it.doc]
			}
			parts = append(parts, l)
		}
		label := strings.Join(append(parts, base[i]), " ")
		s := byLabel[label]
		if s == nil {
			s = &Series{Label: label}
			byLabel[label] = s
			order = append(order, label)
		}
		for _, p := range s.Points {
			if p.X == it.x {
				return nil, "", nil, fmt.Errorf("plot: series %q has several results at %s=%v (%s among them): narrow it with --where or choose --series", label, opt.X, it.x, it.r.Key())
			}
		}
		s.Points = append(s.Points, Point{X: it.x, Summary: results.Summarize(it.m.Samples)})
	}
	for _, l := range order {
		s := byLabel[l]
		sort.Slice(s.Points, func(i, j int) bool { return s.Points[i].X < s.Points[j].X })
		if opt.LogY {
			for _, p := range s.Points {
				if p.Median <= 0 {
					return nil, "", nil, fmt.Errorf("plot: series %q: median %v at %s=%v cannot be on a log axis", l, p.Median, opt.X, p.X)
				}
			}
		}
		series = append(series, *s)
	}
	return series, unit, warnings, nil
}

// emptyPlotError says why nothing is left to plot: no result has the
// metric and x, or which --where or --series filter removed them all and
// what values there are instead.
func emptyPlotError(docs []*Document, opt PlotOptions, unmeasured bool) error {
	var left []*Result
	for _, d := range docs {
		for i := range d.Results {
			r := &d.Results[i]
			if _, ok := r.Params[opt.X]; ok && r.Metric(opt.Metric) != nil {
				left = append(left, r)
			}
		}
	}
	if len(left) == 0 {
		return fmt.Errorf("plot: no result has parameter %q and metric %q", opt.X, opt.Metric)
	}
	what := func() string {
		return fmt.Sprintf("%s with %s and %s", units.Plural(len(left), "result"), opt.Metric, opt.X)
	}
	have := func() string {
		if len(left) == 1 {
			return "has"
		}
		return "have"
	}
	values := func(k string) string {
		seen := map[string]bool{}
		for _, r := range left {
			if v, ok := r.Params[k]; ok {
				seen[v] = true
			}
		}
		return listSome(sortedKeys(seen), 8)
	}
	params := func() string {
		seen := map[string]bool{}
		for _, r := range left {
			for k := range r.Params {
				seen[k] = true
			}
		}
		return strings.Join(sortedKeys(seen), ", ")
	}
	where := make([]string, 0, len(opt.Where))
	for k := range opt.Where {
		where = append(where, k)
	}
	sort.Strings(where)
	for _, k := range where {
		v := opt.Where[k]
		var kept []*Result
		has := false
		for _, r := range left {
			w, ok := r.Params[k]
			has = has || ok
			if ok && w == v {
				kept = append(kept, r)
			}
		}
		if len(kept) == 0 {
			if !has {
				return fmt.Errorf("plot: --where %s=%s left nothing: none of the %s has parameter %s (theirs: %s)", k, v, what(), k, params())
			}
			return fmt.Errorf("plot: --where %s=%s left nothing: the %s %s %s=%s", k, v, what(), have(), k, values(k))
		}
		left = kept
	}
	if opt.Series != "" && !slices.ContainsFunc(left, func(r *Result) bool { _, ok := r.Params[opt.Series]; return ok }) {
		return fmt.Errorf("plot: --series %s left nothing: none of the %s has parameter %s (theirs: %s)", opt.Series, what(), opt.Series, params())
	}
	if unmeasured {
		return fmt.Errorf("plot: %s is unmeasured in every one of the %s", opt.Metric, what())
	}
	return fmt.Errorf("plot: no result has parameter %q and metric %q", opt.X, opt.Metric)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// PlotFormats are the image formats Plot writes.
var PlotFormats = []string{"png", "svg"}

// PlotFormat is the image format a file name asks for, from its extension.
func PlotFormat(path string) (string, error) {
	ext := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	for _, f := range PlotFormats {
		if ext == f {
			return f, nil
		}
	}
	return "", fmt.Errorf("plot: %s: cannot tell the image format from the extension %q (want .png or .svg)", path, filepath.Ext(path))
}

// Plot draws the metric against the parameter, a line per series with the
// 95% CI of each median as error bars, and writes the image in format
// ("png" or "svg"). It returns the warnings of PlotSeries.
func Plot(w io.Writer, format string, docs []*Document, opt PlotOptions) ([]string, error) {
	series, unit, warnings, err := PlotSeries(docs, opt)
	if err != nil {
		return warnings, err
	}
	p := plot.New()
	p.Title.Text = opt.Title
	if p.Title.Text == "" && len(docs) > 0 {
		p.Title.Text = fmt.Sprintf("%s vs %s", opt.Metric, opt.X)
	}
	p.X.Label.Text = opt.X
	p.Y.Label.Text = MetricColumn{Name: opt.Metric, Unit: unit}.Header()
	if opt.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if opt.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	// Latency and bandwidth both rise to the right: the top left is the
	// corner lines leave free.
	p.Legend.Top = true
	p.Legend.Left = true
	for i, s := range series {
		pts := make(plotter.XYs, len(s.Points))
		errs := make(plotter.YErrors, len(s.Points))
		for j, pt := range s.Points {
			pts[j] = plotter.XY{X: pt.X, Y: pt.Median}
			// An unbounded interval (too few samples) gets no bar.
			if !math.IsInf(pt.Lo, 0) && !math.IsInf(pt.Hi, 0) {
				lo := pt.Lo
				if opt.LogY && lo <= 0 {
					// A log axis cannot show an interval reaching 0: cut
					// the bar just under the median rather than fail.
					lo = pt.Median * (1 - 1e-9)
				}
				errs[j] = struct{ Low, High float64 }{pt.Median - lo, pt.Hi - pt.Median}
			}
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return warnings, fmt.Errorf("plot: series %q: %w", s.Label, err)
		}
		c := plotutil.Color(i)
		line.Color = c
		line.Dashes = plotutil.Dashes(i / 7)
		points.Color = c
		points.Shape = plotutil.Shape(i)
		bars, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{pts, errs})
		if err != nil {
			return warnings, fmt.Errorf("plot: series %q: %w", s.Label, err)
		}
		bars.Color = c
		bars.LineStyle.Width = vg.Points(0.75)
		p.Add(line, points, bars)
		p.Legend.Add(s.Label, line, points)
	}
	wt, err := writerTo(p, format)
	if err != nil {
		return warnings, fmt.Errorf("plot: %w", err)
	}
	_, err = wt.WriteTo(w)
	return warnings, err
}

// PlotFile draws the plot into path (format from its extension), written
// atomically.
func PlotFile(path string, docs []*Document, opt PlotOptions) ([]string, error) {
	format, err := PlotFormat(path)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	warnings, err := Plot(&buf, format, docs, opt)
	if err != nil {
		return warnings, err
	}
	if err := results.WriteFileAtomic(path, buf.Bytes()); err != nil {
		return warnings, fmt.Errorf("writing %s: %w", path, err)
	}
	return warnings, nil
}

// plotItem is one result's point before it joins a line.
type plotItem struct {
	doc int
	r   *Result
	m   *Metric
	env Env
	x   float64
}

// seriesLabel names an item's line by the --series parameter, or by the
// result's name and every parameter but the x axis, plus the environment
// keys that differ between documents.
func seriesLabel(it *plotItem, opt PlotOptions, envKeys []string) string {
	var parts []string
	if opt.Series != "" {
		parts = append(parts, opt.Series+"="+it.r.Params[opt.Series])
	} else {
		rest := Result{Name: it.r.Name, Params: Params{}}
		for k, v := range it.r.Params {
			if k != opt.X {
				rest.Params[k] = v
			}
		}
		parts = append(parts, rest.Key())
	}
	for _, k := range envKeys {
		parts = append(parts, k+"="+it.env[k])
	}
	return strings.Join(parts, " ")
}

// writerTo renders the plot; gonum panics on some degenerate data (a log
// axis given a value <= 0), which becomes an error here.
func writerTo(p *plot.Plot, format string) (wt io.WriterTo, err error) {
	defer func() {
		if r := recover(); r != nil {
			wt, err = nil, fmt.Errorf("plot: %v", r)
		}
	}()
	return p.WriterTo(8*vg.Inch, 5*vg.Inch, format)
}
