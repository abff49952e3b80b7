package reports

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mstar-dev/mstar/internal/units"
)

// DiffFormats lists the formats RenderDiff accepts.
var DiffFormats = []string{FormatText, FormatMarkdown, FormatCSV, FormatJSON}

// TextWidth is the width text tables are fitted into unless asked to be
// wide: a 100-column terminal's.
const TextWidth = units.TextWidth

// RenderDiff writes the comparison in one of DiffFormats. Text and
// markdown: what decides, failed gates and missing results first, a table
// per metric (deciding metrics first) with a geomean row, what is on one
// side only, warnings, and the outcome with the verdict of each regression.
// Text tables fit TextWidth columns unless wide. CSV: one row per verdict
// (metrics, failed gates, missing results) with raw numbers. JSON: every
// verdict with its numbers and the outcome.
func RenderDiff(w io.Writer, c *Comparison, format string) error {
	return RenderDiffWide(w, c, format, false)
}

// RenderDiffWide is RenderDiff; wide leaves text tables as wide as their
// cells make them.
func RenderDiffWide(w io.Writer, c *Comparison, format string, wide bool) error {
	switch format {
	case FormatText, FormatMarkdown:
		return renderDiffText(w, c, format == FormatMarkdown, wide)
	case FormatCSV:
		return renderDiffCSV(w, c)
	case FormatJSON:
		return renderDiffJSON(w, c)
	}
	return fmt.Errorf("unknown diff format %q (want one of %s)", format, strings.Join(DiffFormats, ", "))
}

// groupByWhy turns "a (why)", "b (why)" into "why: a, b", whys in order
// of first appearance and "; " between them.
func groupByWhy(items []string) string {
	var whys []string
	by := map[string][]string{}
	for _, it := range items {
		i := strings.LastIndex(it, " (")
		if i < 0 || !strings.HasSuffix(it, ")") {
			by[""] = append(by[""], it)
			continue
		}
		what, why := it[:i], it[i+2:len(it)-1]
		if _, ok := by[why]; !ok {
			whys = append(whys, why)
		}
		by[why] = append(by[why], what)
	}
	var parts []string
	for _, why := range whys {
		parts = append(parts, why+": "+strings.Join(by[why], ", "))
	}
	if len(by[""]) > 0 {
		parts = append(parts, strings.Join(by[""], ", "))
	}
	return strings.Join(parts, "; ")
}

// shortVerdict is the verdict column: a word or two; the reasons of the
// rows that matter follow the tables.
func (m *MetricDiff) shortVerdict() string {
	switch {
	case m.Unmeasured != "":
		return "not compared"
	case !m.EnoughSamples:
		return "too few samples"
	case !m.Significant:
		return "~"
	case m.Noisy:
		return "too noisy"
	case !m.OverThreshold:
		return "within threshold"
	case m.Delta == 0:
		return "~"
	case m.Worse && m.Decides:
		return "REGRESSION"
	case m.Worse:
		return "worse"
	}
	return "better"
}

func (m *MetricDiff) noiseCell() string {
	if n := m.Noise(); !math.IsNaN(n) {
		return formatNoise(n)
	}
	return "-"
}

// Outcome is the comparison's last line: what failed, or that it passed
// and what it checked.
func (c *Comparison) Outcome() string {
	if f := c.Failures(); len(f) > 0 {
		return "FAIL: " + strings.Join(f, "; ")
	}
	var notes []string
	if n := len(c.Noisy()); n > 0 {
		notes = append(notes, fmt.Sprintf("%s too noisy to tell at %s%%", units.Plural(n, "change"), trimFloat(c.Options.Threshold)))
	}
	if c.Options.AllowMissing && (len(c.Missing) > 0 || len(c.Interrupted) > 0) {
		notes = append(notes, fmt.Sprintf("%s missing, allowed", units.Plural(len(c.Missing), "result")))
	}
	cannot := len(c.filter(func(m *MetricDiff) bool { return m.Decides && m.Unmeasured == "" && !m.EnoughSamples && !m.same }))
	if cannot > 0 && cannot == c.Compared() {
		return fmt.Sprintf("ok: no regression, but no deciding comparison could tell (%s with too few samples)", units.Plural(cannot, "comparison"))
	}
	if cannot > 0 {
		notes = append(notes, fmt.Sprintf("%d more with too few samples to tell", cannot))
	}
	s := fmt.Sprintf("ok: no regression in %s", units.Plural(c.Compared()-cannot, "deciding comparison"))
	if len(notes) > 0 {
		s += " (" + strings.Join(notes, "; ") + ")"
	}
	return s
}

type diffGroup struct {
	col     MetricColumn
	decides bool
	role    string
	rows    []*MetricDiff
}

// diffGroups is one table per metric name, unit and whether it decides:
// deciding ones first, each in order of first appearance.
func diffGroups(c *Comparison) []*diffGroup {
	var groups []*diffGroup
	for i := range c.Metrics {
		m := &c.Metrics[i]
		j := slices.IndexFunc(groups, func(g *diffGroup) bool {
			return g.col.Name == m.Metric && g.col.Unit == m.Unit && g.decides == m.Decides
		})
		if j < 0 {
			groups = append(groups, &diffGroup{col: MetricColumn{Name: m.Metric, Unit: m.Unit, Better: m.Better}, decides: m.Decides, role: m.Role})
			j = len(groups) - 1
		}
		g := groups[j]
		if g.role != m.Role && !strings.Contains(g.role, m.Role) {
			g.role += ", " + m.Role
		}
		g.rows = append(g.rows, m)
	}
	slices.SortStableFunc(groups, func(a, b *diffGroup) int {
		switch {
		case a.decides == b.decides:
			return 0
		case a.decides:
			return -1
		}
		return 1
	})
	return groups
}

func renderDiffText(w io.Writer, c *Comparison, markdown, wide bool) error {
	var b strings.Builder
	width := TextWidth
	if wide || markdown {
		width = 0
	}
	item := func(s string) {
		if markdown {
			b.WriteString("- " + s + "\n")
			return
		}
		b.WriteString(wrap(s, width, "    ") + "\n")
	}
	heading := func(s string) {
		if markdown {
			b.WriteString("### " + s + "\n\n")
			return
		}
		b.WriteString(wrap(s, width, "    ") + "\n")
	}
	opt := c.Options
	item(fmt.Sprintf("alpha %s, threshold %s%% + noise (%d× the noise where rounds spread past %s%%)", trimFloat(opt.Alpha), trimFloat(opt.Threshold), NoisyMargin, trimFloat(opt.Threshold)))
	decide, shown := c.Deciding()
	how := "every measured metric of the results under test"
	if opt.Metrics != nil {
		how = "named by --metrics"
	}
	if len(decide) == 0 {
		item("deciding: none (" + how + ")")
	} else {
		item("deciding: " + strings.Join(decide, ", ") + " (" + how + ")")
	}
	if len(shown) > 0 {
		item("shown, not deciding: " + groupByWhy(shown))
	}
	top := []struct {
		title string
		lines []string
	}{
		{"FAILED GATES in new (each fails the diff)", c.FailedGates},
		{"INTERRUPTED", c.Interrupted},
		{"MISSING from new", c.Missing},
	}
	for _, s := range top {
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

	labels := map[*MetricDiff]string{}
	var untabled []*MetricDiff
	var condensed, unchanged []string
	tabled := 0
	for _, g := range diffGroups(c) {
		if !g.decides && !wide {
			condensed = append(condensed, condense(g))
			continue
		}
		// A counter that read one value throughout (no wrong copies, no
		// spills) is one line, not a table of zeros.
		if v, one, ok := constant(g); ok && !wide {
			what := "each one value throughout, the same on both sides"
			if one {
				what = "every sample " + FormatQuantity(v, g.col.Unit) + " on both sides"
			}
			unchanged = append(unchanged, fmt.Sprintf("%s: %s, %s", g.col.Name, units.Plural(len(g.rows), "result"), what))
			continue
		}
		// Single values that cannot tell (a correctness figure measured
		// once a run) would fill a table with "too few samples"; one line
		// below lists them instead. Several samples a side keep their
		// table: the medians are worth seeing even when untestable.
		if !slices.ContainsFunc(g.rows, func(m *MetricDiff) bool {
			return m.Unmeasured != "" || m.EnoughSamples || (m.Base.N > 1 && m.New.N > 1)
		}) {
			untabled = append(untabled, g.rows...)
			continue
		}
		if tabled > 0 {
			b.WriteString("\n")
		}
		tabled++
		title := fmt.Sprintf("%s (%s is better)", g.col.Name, g.col.Better)
		if !g.decides {
			title = fmt.Sprintf("%s (%s is better; shown, not deciding: %s)", g.col.Name, g.col.Better, g.role)
		}
		heading(title)
		table, lines, short, err := diffTable(c, g, markdown, width)
		if err != nil {
			return err
		}
		for _, l := range lines {
			item(l)
		}
		if len(lines) > 0 && markdown {
			b.WriteString("\n")
		}
		b.WriteString(table)
		for j, m := range g.rows {
			labels[m] = short[j]
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
	if len(c.BaseFailedGates) > 0 {
		warnings = append(warnings, fmt.Sprintf("%s failed in base (not deciding): %s", units.Plural(len(c.BaseFailedGates), "gate"), listSome(c.BaseFailedGates, 2)))
	}
	// Of the deciding metrics only: the ceilings (context) are one round in
	// any run, and two runs of other shapes compare nothing else.
	deciding := slices.ContainsFunc(c.Metrics, func(m MetricDiff) bool { return m.Decides })
	if deciding && !slices.ContainsFunc(c.Metrics, func(m MetricDiff) bool { return m.Decides && (m.BaseRounds > 1 || m.NewRounds > 1) }) {
		warnings = append(warnings, "noise between rounds unknown: each side is one round of one run (measure with --rounds 3, or merge several runs)")
	}
	var cannot []string
	if ct := cannotTellSummary(untabled); len(ct) > 0 {
		cannot = []string{strings.Join(ct, "; ")}
	}
	var verdicts []string
	for _, m := range c.Regressions() {
		verdicts = append(verdicts, m.Key+": "+m.Metric+": "+m.Verdict(opt))
	}
	for _, m := range c.Noisy() {
		verdicts = append(verdicts, m.Key+": "+m.Metric+": "+m.Verdict(opt))
	}
	sections := []struct {
		title string
		lines []string
	}{
		{"unchanged", unchanged},
		{"not deciding, in brief (--wide for their tables)", condensed},
		{fmt.Sprintf("cannot tell, too few samples (at alpha %s the U test needs at least %d a side)", trimFloat(opt.Alpha), c.SamplesNeeded()), cannot},
		{"only in base", c.OnlyBase},
		{"only in new", c.OnlyNew},
		{"warnings", warnings},
		{"verdicts", verdicts},
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
	if markdown {
		b.WriteString("**" + c.Outcome() + "**\n")
	} else {
		b.WriteString(wrap(c.Outcome(), width, "    ") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// constant reports whether every row of g read one value throughout, the
// same on both sides, and that value when it is one for all rows.
func constant(g *diffGroup) (v float64, one, ok bool) {
	for i, m := range g.rows {
		if m.Unmeasured != "" || !m.same {
			return 0, false, false
		}
		if i == 0 {
			v, one = m.Base.Median, true
		} else if m.Base.Median != v {
			one = false
		}
	}
	return v, one, true
}

// condense is one line for a table of metrics that do not decide: how
// many moved which way, naming the first that got worse.
func condense(g *diffGroup) string {
	var better, worse, same, other int
	var worst []string
	for _, m := range g.rows {
		switch v := m.shortVerdict(); v {
		case "better":
			better++
		case "worse", "REGRESSION":
			worse++
			worst = append(worst, fmt.Sprintf("%s %s", m.Key, m.change()))
		case "~", "within threshold":
			same++
		default:
			other++
		}
	}
	s := fmt.Sprintf("%s (%s): %d compared: %d ~ or within threshold, %d better, %d worse", g.col.Name, g.role, len(g.rows), same, better, worse)
	if other > 0 {
		s += fmt.Sprintf(", %d noisy or untestable", other)
	}
	if len(worst) > 0 {
		s += " (" + listSome(worst, 2) + ")"
	}
	return s
}

// diffTable renders one group's table, fitted into width (0: any): with
// shorter labels first, then without the noise column where no row has a
// noise figure (the warnings say why), then with verdicts over two lines in
// their cells, else one row per line.
func diffTable(c *Comparison, g *diffGroup, markdown bool, width int) (table string, lines, labels []string, err error) {
	ids := make([]Result, len(g.rows))
	noNoise := true
	for j, m := range g.rows {
		ids[j] = Result{Name: m.Name, Params: m.LabelParams()}
		if n := m.noiseCell(); n != "-" && n != "" && m.Unmeasured == "" {
			noNoise = false
		}
	}
	for _, try := range []struct {
		limit   int
		dropped bool // the noise column left out (only where noNoise)
		verdict int  // the width verdicts wrap at; 0: not wrapped
	}{{maxLabel, false, 0}, {24, false, 0}, {maxLabel, true, 0}, {24, true, 0}, {maxLabel, false, 9}, {24, false, 9}} {
		if try.dropped && !noNoise {
			continue
		}
		lines, labels = rowLabelsWithin(ids, try.limit)
		var b strings.Builder
		tab := newTableWriter(&b, markdown)
		// cells drops the noise column (index 6) from a row where asked.
		cells := func(row []string) []string {
			if try.dropped {
				return append(row[:6:6], row[7:]...)
			}
			return row
		}
		tab.Header(cells([]string{"result", "base", "new", "delta", "p", "n", "noise", "verdict"}))
		for j, m := range g.rows {
			row := []string{labels[j], "", "", m.deltaCell(), "", "", m.noiseCell(), wrap(m.shortVerdict(), try.verdict, "")}
			if m.Unmeasured == "" {
				row[1], row[2] = summaryCell(m.Base, m.Unit), summaryCell(m.New, m.Unit)
				row[4], row[5] = formatP(m.P), fmt.Sprintf("%d+%d", m.Base.N, m.New.N)
			} else {
				row[6] = ""
			}
			if err := tab.Append(cells(row)); err != nil {
				return "", nil, nil, err
			}
		}
		for _, gm := range c.Geomeans {
			if gm.Metric == g.col.Name && gm.Unit == g.col.Unit && g.decides {
				row := []string{"geomean", FormatQuantity(gm.Base, gm.Unit), FormatQuantity(gm.New, gm.Unit), formatDelta(gm.Delta), "", strconv.Itoa(gm.N), "", ""}
				if err := tab.Append(cells(row)); err != nil {
					return "", nil, nil, err
				}
			}
		}
		if err := tab.Render(); err != nil {
			return "", nil, nil, err
		}
		if width == 0 || maxWidth(b.String()) <= width {
			return b.String(), lines, labels, nil
		}
	}
	// Still too wide: one line per row.
	var b strings.Builder
	for j, m := range g.rows {
		if m.Unmeasured != "" {
			b.WriteString(wrap(fmt.Sprintf("%s: not compared: %s", labels[j], m.Unmeasured), width, "    ") + "\n")
			continue
		}
		b.WriteString(wrap(fmt.Sprintf("%s: %s -> %s, delta %s, p=%s, n=%d+%d, noise %s: %s", labels[j], summaryCell(m.Base, m.Unit), summaryCell(m.New, m.Unit),
			m.deltaCell(), formatP(m.P), m.Base.N, m.New.N, m.noiseCell(), m.shortVerdict()), width, "    ") + "\n")
	}
	return b.String(), lines, labels, nil
}

// maxWidth is the widest line of s, in runes.
func maxWidth(s string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		n = max(n, utf8.RuneCountInString(l))
	}
	return n
}

// wrap is units.Wrap.
func wrap(s string, width int, indent string) string { return units.Wrap(s, width, indent) }

func num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return ""
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func renderDiffCSV(w io.Writer, c *Comparison) error {
	cw := csv.NewWriter(w)
	head := []string{"key", "name", "params", "metric", "unit", "better", "role", "decides",
		"base_median", "base_ci_lo", "base_ci_hi", "base_n", "base_noise_pct", "base_rounds",
		"new_median", "new_ci_lo", "new_ci_hi", "new_n", "new_noise_pct", "new_rounds",
		"delta_pct", "p", "verdict", "reason"}
	if err := cw.Write(head); err != nil {
		return err
	}
	for i := range c.Metrics {
		m := &c.Metrics[i]
		rec := []string{m.Key, m.Name, paramsText(m.Params), m.Metric, m.Unit, string(m.Better), m.Role, strconv.FormatBool(m.Decides)}
		if m.Unmeasured == "" {
			rec = append(rec, num(m.Base.Median), num(m.Base.Lo), num(m.Base.Hi), strconv.Itoa(m.Base.N), num(m.BaseNoise), strconv.Itoa(m.BaseRounds),
				num(m.New.Median), num(m.New.Lo), num(m.New.Hi), strconv.Itoa(m.New.N), num(m.NewNoise), strconv.Itoa(m.NewRounds),
				num(m.Delta), num(m.P))
		} else {
			rec = append(rec, make([]string, 14)...)
		}
		rec = append(rec, m.shortVerdict(), m.Verdict(c.Options))
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	extra := func(key, verdict, reason string) error {
		rec := make([]string, len(head))
		rec[0], rec[len(head)-2], rec[len(head)-1] = key, verdict, reason
		return cw.Write(rec)
	}
	for _, g := range c.FailedGates {
		key, _, _ := strings.Cut(g, ": ")
		if err := extra(key, "GATE FAILED", g); err != nil {
			return err
		}
	}
	for _, k := range c.Missing {
		if err := extra(k, "MISSING", "in base, not in new"); err != nil {
			return err
		}
	}
	for _, s := range c.Interrupted {
		if err := extra("", "INTERRUPTED", s); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func paramsText(p Params) string {
	return strings.TrimPrefix(Result{Params: p}.Key(), "/")
}

type jsonSide struct {
	Median   *float64 `json:"median"`
	Lo       *float64 `json:"ci_lo"`
	Hi       *float64 `json:"ci_hi"`
	N        int      `json:"n"`
	NoisePct *float64 `json:"noise_pct"` // spread of the round medians; null with one round
	Rounds   int      `json:"rounds"`
}

type jsonVerdict struct {
	Key           string    `json:"key"`
	Name          string    `json:"name"`
	Params        Params    `json:"params,omitempty"`
	NewParams     Params    `json:"new_params,omitempty"` // new's, when a setting changed
	Metric        string    `json:"metric"`
	Unit          string    `json:"unit"`
	Better        Direction `json:"better"`
	Role          string    `json:"role"`
	Decides       bool      `json:"decides"`
	Base          *jsonSide `json:"base,omitempty"`
	New           *jsonSide `json:"new,omitempty"`
	DeltaPct      *float64  `json:"delta_pct"`
	P             *float64  `json:"p"`
	Worse         bool      `json:"worse"`
	Significant   bool      `json:"significant"`
	OverThreshold bool      `json:"over_threshold"`
	MarginPct     float64   `json:"margin_pct"` // the noise a change must clear on top of the threshold
	EnoughSamples bool      `json:"enough_samples"`
	Noisy         bool      `json:"noisy"`
	Regression    bool      `json:"regression"`
	Verdict       string    `json:"verdict"`
	Reason        string    `json:"reason"`
	Unmeasured    string    `json:"unmeasured,omitempty"`
	Warnings      []string  `json:"warnings,omitempty"`
}

type jsonDiff struct {
	Alpha        float64       `json:"alpha"`
	Threshold    float64       `json:"threshold_pct"`
	Deciding     []string      `json:"deciding"`
	Shown        []string      `json:"shown_not_deciding"`
	Pass         bool          `json:"pass"`
	Outcome      string        `json:"outcome"`
	Failures     []string      `json:"failures"`
	FailedGates  []string      `json:"failed_gates"`
	BaseFailed   []string      `json:"base_failed_gates,omitempty"`
	Missing      []string      `json:"missing"`
	Interrupted  []string      `json:"interrupted"`
	OnlyBase     []string      `json:"only_base"`
	OnlyNew      []string      `json:"only_new"`
	Verdicts     []jsonVerdict `json:"verdicts"`
	Geomeans     []GeomeanDiff `json:"geomeans"`
	Warnings     []string      `json:"warnings"`
	AllowMissing bool          `json:"allow_missing"`
	FailNoisy    bool          `json:"fail_noisy"`
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func renderDiffJSON(w io.Writer, c *Comparison) error {
	decide, shown := c.Deciding()
	out := jsonDiff{Alpha: c.Options.Alpha, Threshold: c.Options.Threshold, Deciding: orEmpty(decide), Shown: orEmpty(shown),
		Failures: orEmpty(c.Failures()), Outcome: c.Outcome(), FailedGates: orEmpty(c.FailedGates), BaseFailed: c.BaseFailedGates,
		Missing: orEmpty(c.Missing), Interrupted: orEmpty(c.Interrupted), OnlyBase: orEmpty(c.OnlyBase), OnlyNew: orEmpty(c.OnlyNew),
		Verdicts: []jsonVerdict{}, Geomeans: c.Geomeans, Warnings: orEmpty(c.Warnings),
		AllowMissing: c.Options.AllowMissing, FailNoisy: c.Options.FailNoisy}
	out.Pass = len(out.Failures) == 0
	if out.Geomeans == nil {
		out.Geomeans = []GeomeanDiff{}
	}
	for i := range c.Metrics {
		m := &c.Metrics[i]
		v := jsonVerdict{Key: m.Key, Name: m.Name, Params: m.Params, NewParams: m.NewParams, Metric: m.Metric, Unit: m.Unit, Better: m.Better, Role: m.Role, Decides: m.Decides,
			Worse: m.Worse, Significant: m.Significant, OverThreshold: m.OverThreshold, MarginPct: m.Margin(), EnoughSamples: m.EnoughSamples, Noisy: m.Noisy,
			Regression: m.Decides && m.Regression(), Verdict: m.shortVerdict(), Reason: m.Verdict(c.Options), Unmeasured: m.Unmeasured, Warnings: m.Warnings}
		if m.Unmeasured == "" {
			v.Base = &jsonSide{finite(m.Base.Median), finite(m.Base.Lo), finite(m.Base.Hi), m.Base.N, finite(m.BaseNoise), m.BaseRounds}
			v.New = &jsonSide{finite(m.New.Median), finite(m.New.Lo), finite(m.New.Hi), m.New.N, finite(m.NewNoise), m.NewRounds}
			v.DeltaPct, v.P = finite(m.Delta), finite(m.P)
		}
		out.Verdicts = append(out.Verdicts, v)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}
