package reports

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// Table formats accepted by Render.
const (
	FormatText     = "text"
	FormatMarkdown = "markdown"
	FormatCSV      = "csv"
	FormatJSON     = "json"
)

// TableFormats lists the formats Render accepts.
var TableFormats = []string{FormatText, FormatMarkdown, FormatCSV, FormatJSON}

// TableOptions selects the columns of a table. A nil list means all.
type TableOptions struct {
	Params  []string // parameter columns, in this order
	Metrics []string // metric columns, in this order
	// Wide leaves text tables as wide as their cells; otherwise a table
	// wider than TextWidth is split into tables of fewer metric columns
	// (each repeating the result's name and parameters), or printed one
	// result per block where even that does not fit.
	Wide bool
}

// Table is the results of one environment: one row per result, columns for
// the parameters, the metrics (median with a 95% CI) and the gates.
type Table struct {
	Env     Env            // the environment all rows were measured in
	Params  []string       // parameter columns
	Metrics []MetricColumn // metric columns
	Gates   []string       // gate columns
	Rows    []Row
	// ShowRun: two rows have one name and parameters but come from
	// different runs (a merge of two runs of one host), so the run is a
	// column that tells them apart.
	ShowRun bool
}

// MetricColumn is one metric column: results pair into it by name and unit.
type MetricColumn struct {
	Name   string
	Unit   string
	Better Direction
}

// Header is "name (unit)".
func (c MetricColumn) Header() string {
	if c.Unit == "" {
		return c.Name
	}
	return c.Name + " (" + c.Unit + ")"
}

// Row is one result.
type Row struct {
	Name     string
	Params   Params
	Cells    []Cell  // parallel to Table.Metrics
	Gates    []*Gate // parallel to Table.Gates; nil where the result has no such gate
	Warnings []string
	Run      string             // the run it came from (Document.RunOf)
	Host     *results.HostState // how busy the host was; noted once a table
}

// Cell is one metric of one result: a summary, or why it was not measured.
type Cell struct {
	Present    bool   // the result has this metric
	Unmeasured string // why not, when it was not measured
	Summary    Summary
	Constant   bool // every sample is the same value (a count, say): no interval to show
}

// Tables groups the results of docs into one table per distinct environment
// (Document.EnvOf) and result name, in order of first appearance, and
// selects columns.
// Selecting a parameter or metric that no result has is an error that lists
// what there is.
func Tables(docs []*Document, opt TableOptions) ([]*Table, error) {
	var tables []*Table
	byEnv := map[string]*Table{}
	type pending struct {
		t   *Table
		r   *Result
		run string
	}
	var all []pending
	allParams, allMetrics := map[string]bool{}, map[string]bool{}
	for _, d := range docs {
		for i := range d.Results {
			r := &d.Results[i]
			for _, m := range r.Metrics {
				allMetrics[m.Name] = true
			}
			// With a metric selection, a result with none of them is no row.
			if opt.Metrics != nil && !slices.ContainsFunc(r.Metrics, func(m Metric) bool { return slices.Contains(opt.Metrics, m.Name) }) {
				continue
			}
			env := d.EnvOf(r)
			// One table per environment and result name, as benchstat
			// gives each benchmark its own table: rows of one kind share
			// their columns.
			k := env.Key() + "\x00" + r.Name
			t := byEnv[k]
			if t == nil {
				t = &Table{Env: env}
				byEnv[k] = t
				tables = append(tables, t)
			}
			all = append(all, pending{t, r, d.RunOf(r)})
			for p := range r.Params {
				allParams[p] = true
			}
		}
	}
	if err := checkSelected("parameter", opt.Params, allParams); err != nil {
		return nil, err
	}
	if err := checkSelected("metric", opt.Metrics, allMetrics); err != nil {
		return nil, err
	}

	// Columns, per table: what its results have, or the selection.
	for _, t := range tables {
		params := map[string]bool{}
		for _, p := range all {
			if p.t != t {
				continue
			}
			for k := range p.r.Params {
				params[k] = true
			}
			for _, m := range p.r.Metrics {
				if opt.Metrics != nil && !slices.Contains(opt.Metrics, m.Name) {
					continue
				}
				c := MetricColumn{Name: m.Name, Unit: m.Unit, Better: m.Better}
				if !slices.ContainsFunc(t.Metrics, func(x MetricColumn) bool { return x.Name == c.Name && x.Unit == c.Unit }) {
					t.Metrics = append(t.Metrics, c)
				}
			}
			for _, g := range p.r.Gates {
				if !slices.Contains(t.Gates, g.Name) {
					t.Gates = append(t.Gates, g.Name)
				}
			}
		}
		if opt.Params != nil {
			for _, p := range opt.Params {
				if params[p] {
					t.Params = append(t.Params, p)
				}
			}
		} else {
			for p := range params {
				t.Params = append(t.Params, p)
			}
			sort.Strings(t.Params)
		}
		if opt.Metrics != nil {
			slices.SortStableFunc(t.Metrics, func(a, b MetricColumn) int {
				return slices.Index(opt.Metrics, a.Name) - slices.Index(opt.Metrics, b.Name)
			})
		}
	}

	for _, p := range all {
		t, r := p.t, p.r
		row := Row{Name: r.Name, Params: r.Params, Warnings: r.Warnings, Run: p.run, Host: r.HostState}
		if note := r.ThrottleNote(); note != "" {
			row.Warnings = append(slices.Clip(row.Warnings), note)
		}
		for _, c := range t.Metrics {
			var cell Cell
			for _, m := range r.Metrics {
				if m.Name == c.Name && m.Unit == c.Unit {
					cell.Present = true
					if m.Measured() {
						cell.Summary = results.Summarize(m.Samples)
						cell.Constant = !slices.ContainsFunc(m.Samples, func(v float64) bool { return v != m.Samples[0] })
					} else {
						cell.Unmeasured = m.Unmeasured
						if cell.Unmeasured == "" {
							cell.Unmeasured = "no samples"
						}
					}
				}
			}
			row.Cells = append(row.Cells, cell)
		}
		for _, name := range t.Gates {
			var gate *Gate
			for i := range r.Gates {
				if r.Gates[i].Name == name {
					gate = &r.Gates[i]
				}
			}
			row.Gates = append(row.Gates, gate)
		}
		t.Rows = append(t.Rows, row)
	}
	for _, t := range tables {
		runs := map[string]string{}
		for _, r := range t.Rows {
			k := Result{Name: r.Name, Params: r.Params}.Key()
			if other, ok := runs[k]; ok && other != r.Run {
				t.ShowRun = true
			}
			runs[k] = r.Run
		}
	}
	return tables, nil
}

func checkSelected(what string, sel []string, have map[string]bool) error {
	for _, s := range sel {
		if !have[s] {
			names := make([]string, 0, len(have))
			for k := range have {
				names = append(names, k)
			}
			sort.Strings(names)
			if len(names) == 0 {
				return fmt.Errorf("no %s named %q: the results have no %ss", what, s, what)
			}
			return fmt.Errorf("no %s named %q (have: %s)", what, s, strings.Join(names, ", "))
		}
	}
	return nil
}

// Render writes the tables of docs in one of TableFormats.
func Render(w io.Writer, docs []*Document, format string, opt TableOptions) error {
	tables, err := Tables(docs, opt)
	if err != nil {
		return err
	}
	switch format {
	case FormatText:
		width := TextWidth
		if opt.Wide {
			width = 0
		}
		return renderText(w, docs, tables, false, width)
	case FormatMarkdown:
		return renderText(w, docs, tables, true, 0)
	case FormatCSV:
		return renderCSV(w, tables)
	case FormatJSON:
		return renderJSON(w, tables)
	}
	return fmt.Errorf("unknown table format %q (want one of %s)", format, strings.Join(TableFormats, ", "))
}

// envLines splits the environments of the tables as benchstat prints
// configuration: the lines every table shares once at the top, then above
// each table the lines that tell it apart.
func envLines(tables []*Table) (common []string, per [][]string) {
	shared := map[string]string{}
	if len(tables) > 0 {
		for k, v := range tables[0].Env {
			shared[k] = v
		}
	}
	for _, t := range tables[1:] {
		for k, v := range shared {
			if tv, ok := t.Env[k]; !ok || tv != v {
				delete(shared, k)
			}
		}
	}
	common = sortedLines(shared)
	for _, t := range tables {
		rest := map[string]string{}
		for k, v := range t.Env {
			if _, ok := shared[k]; !ok {
				rest[k] = v
			}
		}
		per = append(per, sortedLines(rest))
	}
	return common, per
}

func sortedLines(e map[string]string) []string {
	keys := make([]string, 0, len(e))
	for k := range e {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	lines := make([]string, len(keys))
	for i, k := range keys {
		lines[i] = k + ": " + oneLine(e[k])
	}
	return lines
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// FormatValue prints a number with about four significant digits (see
// results.FormatValue, where producers' warnings get it too).
func FormatValue(v float64) string { return results.FormatValue(v) }

// formatPct prints a CI half-width: "±2%", "±0.4%", "±∞", "±?".
func formatPct(p float64) string {
	switch {
	case math.IsInf(p, 0):
		return "±∞"
	case math.IsNaN(p):
		return "±?"
	case p < 10:
		return "±" + strconv.FormatFloat(p, 'f', 1, 64) + "%"
	}
	return "±" + strconv.FormatFloat(p, 'f', 0, 64) + "%"
}

// String is what a table cell shows.
func (c Cell) String() string {
	switch {
	case !c.Present:
		return ""
	case c.Unmeasured != "":
		return "unmeasured"
	}
	if c.Summary.N == 1 || c.Constant {
		// One sample, or samples all alike, is a value, not an estimate.
		return FormatValue(c.Summary.Median)
	}
	return FormatValue(c.Summary.Median) + " " + formatPct(c.Summary.HalfWidthPct())
}

func gateText(g *Gate) string {
	switch {
	case g == nil:
		return ""
	case g.Pass:
		return "PASS"
	case g.Undecided:
		return "CANNOT TELL"
	}
	return "FAIL"
}

// factorParams moves the parameters that every row shares out of the
// columns into one "k=v k=v" line, so a person's table shows only what
// varies. Machines' formats (CSV, JSON) keep every column.
func (t *Table) factorParams() (*Table, string) {
	if len(t.Rows) < 2 {
		return t, ""
	}
	var keep, shared []string
	for _, p := range t.Params {
		v, ok := t.Rows[0].Params[p]
		same := ok
		for _, r := range t.Rows[1:] {
			if w, ok := r.Params[p]; !ok || w != v {
				same = false
				break
			}
		}
		if same {
			shared = append(shared, p+"="+v)
		} else {
			keep = append(keep, p)
		}
	}
	if len(shared) == 0 {
		return t, ""
	}
	view := *t
	view.Params = keep
	return &view, strings.Join(shared, " ")
}

func (t *Table) header() []string {
	h := []string{"name"}
	if t.ShowRun {
		h = append(h, "run")
	}
	h = append(h, t.Params...)
	for _, c := range t.Metrics {
		h = append(h, c.Header())
	}
	return append(h, t.Gates...)
}

func (t *Table) cells(r Row) []string {
	out := []string{r.Name}
	if t.ShowRun {
		out = append(out, r.Run)
	}
	for _, p := range t.Params {
		out = append(out, r.Params[p])
	}
	for _, c := range r.Cells {
		out = append(out, c.String())
	}
	for _, g := range r.Gates {
		out = append(out, gateText(g))
	}
	return out
}

// notes are the lines below a table: failed gates with their reasons,
// unmeasured metrics with theirs, warnings, and why an interval is ±∞.
func (t *Table) notes() []string {
	var notes []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			notes = append(notes, s)
		}
	}
	for _, r := range t.Rows {
		key := Result{Name: r.Name, Params: r.Params}.Key()
		for _, g := range r.Gates {
			if g != nil && g.Undecided {
				add(fmt.Sprintf("CANNOT TELL %s: %s: %s", key, g.Name, oneLine(g.Reason)))
			} else if g != nil && !g.Pass {
				add(fmt.Sprintf("FAIL %s: %s: %s", key, g.Name, oneLine(g.Reason)))
			}
		}
		for i, c := range r.Cells {
			if c.Unmeasured != "" {
				add(fmt.Sprintf("unmeasured %s: %s: %s", key, t.Metrics[i].Name, oneLine(c.Unmeasured)))
			}
		}
		for _, w := range r.Warnings {
			// A producer's warning may start with the result's key already.
			add(fmt.Sprintf("warning %s: %s", key, strings.TrimPrefix(oneLine(w), key+": ")))
		}
	}
	for _, r := range t.Rows {
		for _, c := range r.Cells {
			if c.Present && c.Unmeasured == "" && c.Summary.N > 1 && !c.Constant && c.Summary.Warning != "" {
				add("±∞: " + c.Summary.Warning)
			}
		}
	}
	hosts := make([]results.Result, len(t.Rows))
	for i, r := range t.Rows {
		hosts[i].HostState = r.Host
	}
	if note := results.BusyHostNote(hosts); note != "" {
		add(note)
	}
	return notes
}

func newTableWriter(w io.Writer, markdown bool) *tablewriter.Table {
	left := tw.CellAlignment{Global: tw.AlignLeft}
	cfg := tablewriter.Config{
		Header: tw.CellConfig{Formatting: tw.CellFormatting{AutoFormat: tw.Off}, Alignment: left},
		Row:    tw.CellConfig{Alignment: left},
	}
	var r tw.Renderer = renderer.NewBlueprint()
	if markdown {
		r = renderer.NewMarkdown()
	}
	return tablewriter.NewTable(w, tablewriter.WithRenderer(r), tablewriter.WithConfig(cfg))
}

// alerts are the lines a reader must see first: interrupted runs and
// failed gates (whose reasons follow their tables).
func alerts(docs []*Document) []string {
	var out, failed []string
	for i, d := range docs {
		if d.Interrupted() {
			what := d.Suite
			if d.RunID != "" {
				what += " run " + d.RunID
			}
			out = append(out, fmt.Sprintf("INTERRUPTED: document %d (%s) stopped before it completed: its results are the part that ran", i+1, what))
		}
		for _, f := range d.Failed() {
			key, rest, _ := strings.Cut(f, ": ")
			gate, _, _ := strings.Cut(rest, ": ")
			failed = append(failed, key+": "+gate)
		}
	}
	if len(failed) > 0 {
		var names []string
		for _, f := range failed {
			if !slices.Contains(names, f) {
				names = append(names, f)
			}
		}
		for i, n := range names {
			if k := strings.Count(strings.Join(failed, "\x00")+"\x00", n+"\x00"); k > 1 {
				names[i] = fmt.Sprintf("%s (%d documents)", n, k)
			}
		}
		out = append(out, fmt.Sprintf("FAILED: %s (%s); the reasons follow the tables", units.Plural(len(failed), "gate"), listSome(names, 3)))
	}
	return out
}

func renderText(w io.Writer, docs []*Document, tables []*Table, markdown bool, width int) error {
	var b strings.Builder
	for _, a := range alerts(docs) {
		if markdown {
			a = "**" + a + "**"
		}
		b.WriteString(wrap(a, width, "    ") + "\n")
	}
	if b.Len() > 0 {
		b.WriteString("\n")
	}
	if len(tables) == 0 {
		b.WriteString("no results\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	common, per := envLines(tables)
	writeEnv := func(lines []string) {
		for _, l := range lines {
			if markdown {
				b.WriteString("- ")
			}
			b.WriteString(wrap(l, width, "    "))
			b.WriteString("\n")
		}
	}
	writeEnv(common)
	for i, t := range tables {
		if i > 0 || len(common) > 0 {
			b.WriteString("\n")
		}
		if len(per[i]) > 0 {
			writeEnv(per[i])
			if markdown {
				b.WriteString("\n")
			}
		}
		t, shared := t.factorParams()
		if shared != "" {
			if markdown {
				b.WriteString("- ")
			}
			b.WriteString(wrap(shared, width, "    ") + "\n")
			if markdown {
				b.WriteString("\n")
			}
		}
		if err := t.render(&b, markdown, width); err != nil {
			return err
		}
		if notes := t.notes(); len(notes) > 0 {
			if markdown {
				b.WriteString("\n")
			}
			for _, n := range notes {
				if markdown {
					b.WriteString("- ")
				}
				b.WriteString(wrap(n, width, "    ") + "\n")
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// render writes the table, fitted into width columns (0: any): split into
// several tables of fewer metric and gate columns, each repeating the name
// and parameter columns; where even one such column does not fit, one
// block per result with a line per value.
func (t *Table) render(b *strings.Builder, markdown bool, width int) error {
	header := t.header()
	rows := make([][]string, len(t.Rows))
	for i, r := range t.Rows {
		rows[i] = t.cells(r)
	}
	colWidth := make([]int, len(header))
	for j := range header {
		colWidth[j] = utf8.RuneCountInString(header[j])
		for _, r := range rows {
			colWidth[j] = max(colWidth[j], utf8.RuneCountInString(r[j]))
		}
		colWidth[j] += 3 // "│ " and " "
	}
	ident := len(t.header()) - len(t.Metrics) - len(t.Gates)
	sum := func(cols []int) int {
		n := 1
		for _, j := range cols {
			n += colWidth[j]
		}
		return n
	}
	identCols := make([]int, ident)
	for j := range identCols {
		identCols[j] = j
	}
	all := make([]int, len(header))
	for j := range all {
		all[j] = j
	}
	blocks := rows // blocks say each value whole
	if width > 0 && ident < len(header) {
		widest := 0
		for j := ident; j < len(header); j++ {
			widest = max(widest, colWidth[j])
		}
		rows = narrowIdent(header, rows, colWidth, ident, sum(identCols)+widest-width)
	}
	if width == 0 || sum(all) <= width {
		return writeTable(b, markdown, header, rows, all)
	}
	var groups [][]int
	cur := slices.Clone(identCols)
	for j := ident; j < len(header); j++ {
		if sum(append(cur, j)) > width && len(cur) > ident {
			groups = append(groups, cur)
			cur = slices.Clone(identCols)
		}
		cur = append(cur, j)
	}
	groups = append(groups, cur)
	// A few results over many tables read better as blocks.
	if slices.ContainsFunc(groups, func(g []int) bool { return sum(g) > width }) || len(groups) > 3 || (len(groups) > 1 && len(rows) <= 2) {
		return writeBlocks(b, header, blocks, ident, width)
	}
	for i, g := range groups {
		if i > 0 {
			b.WriteString("\n")
		}
		if err := writeTable(b, markdown, header, rows, g); err != nil {
			return err
		}
	}
	return nil
}

// minWrapped is the narrowest a column's text is wrapped to.
const minWrapped = 16

// narrowIdent wraps the cells of the widest parameter column onto lines
// cut runes shorter, so that the columns that name a row leave room for a
// value column: a long description (a ceiling's method) then reads over
// two lines rather than pushing the table into blocks. It returns the rows
// with that column wrapped and sets its colWidth; a cut that would leave
// the column under minWrapped runes is not made.
func narrowIdent(header []string, rows [][]string, colWidth []int, ident, cut int) [][]string {
	if cut <= 0 || ident < 2 {
		return rows
	}
	j := 1 // the name column stays whole
	for k := 2; k < ident; k++ {
		if colWidth[k] > colWidth[j] {
			j = k
		}
	}
	text := colWidth[j] - 3 - cut
	if text < minWrapped {
		return rows
	}
	wrapped := make([][]string, len(rows))
	colWidth[j] = utf8.RuneCountInString(header[j])
	for i, r := range rows {
		wrapped[i] = slices.Clone(r)
		wrapped[i][j] = units.Wrap(r[j], text, "")
		colWidth[j] = max(colWidth[j], maxWidth(wrapped[i][j]))
	}
	colWidth[j] += 3
	return wrapped
}

func writeTable(b *strings.Builder, markdown bool, header []string, rows [][]string, cols []int) error {
	pick := func(r []string) []string {
		out := make([]string, len(cols))
		for i, j := range cols {
			out[i] = r[j]
		}
		return out
	}
	tab := newTableWriter(b, markdown)
	tab.Header(pick(header))
	for _, r := range rows {
		if err := tab.Append(pick(r)); err != nil {
			return err
		}
	}
	return tab.Render()
}

// writeBlocks prints each row as its name and parameters, then one
// indented "column: value" line per non-empty value.
func writeBlocks(b *strings.Builder, header []string, rows [][]string, ident, width int) error {
	for i, r := range rows {
		if i > 0 {
			b.WriteString("\n")
		}
		id := r[0]
		for j := 1; j < ident; j++ {
			id += "/" + header[j] + "=" + r[j]
		}
		b.WriteString(wrap(id+":", width, "    ") + "\n")
		pad := 0
		for j := ident; j < len(header); j++ {
			pad = max(pad, utf8.RuneCountInString(header[j]))
		}
		for j := ident; j < len(header); j++ {
			if r[j] == "" {
				continue
			}
			line := "  " + header[j] + strings.Repeat(" ", pad-utf8.RuneCountInString(header[j])) + "  " + r[j]
			b.WriteString(wrap(line, width, strings.Repeat(" ", pad+4)) + "\n")
		}
	}
	return nil
}

// renderCSV writes one rectangular table for machines: a column for each
// environment key that differs between tables, the name, the parameters,
// then per metric its median, CI bounds and sample count, then the gates.
func renderCSV(w io.Writer, tables []*Table) error {
	_, per := envLines(tables)
	var envKeys, params, gates []string
	var metrics []MetricColumn
	for i, t := range tables {
		for _, l := range per[i] {
			k, _, _ := strings.Cut(l, ": ")
			if !slices.Contains(envKeys, k) {
				envKeys = append(envKeys, k)
			}
		}
		for _, p := range t.Params {
			if !slices.Contains(params, p) {
				params = append(params, p)
			}
		}
		for _, m := range t.Metrics {
			if !slices.Contains(metrics, m) {
				metrics = append(metrics, m)
			}
		}
		for _, g := range t.Gates {
			if !slices.Contains(gates, g) {
				gates = append(gates, g)
			}
		}
	}
	sort.Strings(envKeys)
	cw := csv.NewWriter(w)
	var head []string
	for _, k := range envKeys {
		head = append(head, "env:"+k)
	}
	head = append(head, "name")
	head = append(head, params...)
	for _, m := range metrics {
		h := m.Header()
		head = append(head, h+" median", h+" ci_lo", h+" ci_hi", h+" n")
	}
	head = append(head, gates...)
	if err := cw.Write(head); err != nil {
		return err
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	for _, t := range tables {
		for _, r := range t.Rows {
			var rec []string
			for _, k := range envKeys {
				rec = append(rec, t.Env[k])
			}
			rec = append(rec, r.Name)
			for _, p := range params {
				rec = append(rec, r.Params[p])
			}
			for _, m := range metrics {
				i := slices.Index(t.Metrics, m)
				switch {
				case i < 0 || !r.Cells[i].Present:
					rec = append(rec, "", "", "", "")
				case r.Cells[i].Unmeasured != "":
					rec = append(rec, "unmeasured", "", "", "0")
				default:
					s := r.Cells[i].Summary
					rec = append(rec, num(s.Median), num(s.Lo), num(s.Hi), strconv.Itoa(s.N))
				}
			}
			for _, g := range gates {
				i := slices.Index(t.Gates, g)
				if i < 0 {
					rec = append(rec, "")
				} else {
					rec = append(rec, gateText(r.Gates[i]))
				}
			}
			if err := cw.Write(rec); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// The JSON table form: summaries, not samples (the document itself has
// those). An unbounded interval end is null.
type jsonTable struct {
	Env  Env       `json:"env"`
	Rows []jsonRow `json:"rows"`
}

type jsonRow struct {
	Name     string       `json:"name"`
	Run      string       `json:"run,omitempty"`
	Params   Params       `json:"params,omitempty"`
	Metrics  []jsonMetric `json:"metrics"`
	Gates    []Gate       `json:"gates,omitempty"`
	Warnings []string     `json:"warnings,omitempty"`
}

type jsonMetric struct {
	Name       string    `json:"name"`
	Unit       string    `json:"unit"`
	Better     Direction `json:"better"`
	Median     *float64  `json:"median,omitempty"`
	Lo         *float64  `json:"ci_lo"`
	Hi         *float64  `json:"ci_hi"`
	N          int       `json:"n"`
	Unmeasured string    `json:"unmeasured,omitempty"`
}

func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func renderJSON(w io.Writer, tables []*Table) error {
	out := make([]jsonTable, 0, len(tables))
	for _, t := range tables {
		jt := jsonTable{Env: t.Env, Rows: []jsonRow{}}
		for _, r := range t.Rows {
			jr := jsonRow{Name: r.Name, Run: r.Run, Params: r.Params, Metrics: []jsonMetric{}, Warnings: r.Warnings}
			for i, c := range r.Cells {
				if !c.Present {
					continue
				}
				m := t.Metrics[i]
				jm := jsonMetric{Name: m.Name, Unit: m.Unit, Better: m.Better, Unmeasured: c.Unmeasured}
				if c.Unmeasured == "" {
					jm.Median, jm.Lo, jm.Hi, jm.N = finite(c.Summary.Median), finite(c.Summary.Lo), finite(c.Summary.Hi), c.Summary.N
				}
				jr.Metrics = append(jr.Metrics, jm)
			}
			for _, g := range r.Gates {
				if g != nil {
					jr.Gates = append(jr.Gates, *g)
				}
			}
			jt.Rows = append(jt.Rows, jr)
		}
		out = append(out, jt)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}

// scaledUnit is a unit FormatQuantity rescales: its size in seconds (or
// bytes per second).
type scaledUnit struct {
	name  string
	scale float64
}

var (
	timeUnits = []scaledUnit{{"ns", 1e-9}, {"µs", 1e-6}, {"ms", 1e-3}, {"s", 1}}
	rateUnits = []scaledUnit{{"B/s", 1}, {"kB/s", 1e3}, {"MB/s", 1e6}, {"GB/s", 1e9}, {"TB/s", 1e12}}
)

// unitFamily finds unit among the rescalable units ("us" is µs): its
// family and its size, or nil.
func unitFamily(unit string) ([]scaledUnit, float64) {
	if unit == "us" {
		unit = "µs"
	}
	for _, family := range [][]scaledUnit{timeUnits, rateUnits} {
		for _, u := range family {
			if u.name == unit {
				return family, u.scale
			}
		}
	}
	return nil, 1
}

// FormatQuantity prints a value with its unit, times rescaled to ns, µs,
// ms or s and byte rates to B/s … TB/s so that about four digits show:
// "5.8 ms", "1.37 GB/s", "30.6%", "0.0017".
func FormatQuantity(v float64, unit string) string {
	family, scale := unitFamily(unit)
	if family != nil && v != 0 && !math.IsNaN(v) && !math.IsInf(v, 0) {
		base := v * scale
		best := family[0]
		for _, u := range family {
			if math.Abs(base)/u.scale >= 1 {
				best = u
			}
		}
		return FormatValue(base/best.scale) + " " + best.name
	}
	switch unit {
	case "":
		return FormatValue(v)
	case "%":
		return FormatValue(v) + "%"
	}
	return FormatValue(v) + " " + unit
}
