package spill

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/mstar-dev/mstar/internal/spill/tier"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
)

// Suite is the suite name of a spill-matrix results document.
const Suite = "spill-matrix"

// EnvBlocks is the document's environment key for the pool's block count
// (--blocks): the matrix's heading, which not every cell's results name.
const EnvBlocks = "spill_blocks"

// Env is what the run adds to its document's environment.
func (m *Matrix) Env() results.Env {
	return results.Env{EnvBlocks: strconv.Itoa(m.Config.Blocks)}
}

// tableCell is one cell of a document: its results, as Run wrote them.
type tableCell struct {
	cell    Cell
	size    string // the size parameter, as written
	results []results.Result
	err     *results.Result // the "ran" result of a cell that could not run
}

func (c *tableCell) name() string {
	return string(c.cell.Scenario) + "/" + string(c.cell.Tier) + "/" + c.size
}

// failures are the cell's failing gates, "gate: reason", a cell that could
// not run first with "error: why".
func (c *tableCell) failures() []string {
	var out []string
	if c.err != nil {
		for _, g := range c.err.Gates {
			out = append(out, "error: "+g.Reason)
		}
	}
	for _, r := range c.results {
		for _, g := range r.Gates {
			if g.Failed() {
				out = append(out, g.Name+": "+g.Reason)
			}
		}
	}
	return out
}

func (c *tableCell) undecided() []string {
	var out []string
	for _, r := range c.results {
		for _, g := range r.Gates {
			if g.Undecided {
				out = append(out, g.Name+": "+g.Reason)
			}
		}
	}
	return out
}

// text is what the matrix prints for the cell: PASS with its key figure,
// CANNOT-TELL with the first undecided gate, or FAIL with the first
// failing gate.
func (c *tableCell) text() string {
	if c == nil {
		return "·"
	}
	if f := c.failures(); len(f) > 0 || len(c.results) == 0 {
		if len(f) == 0 {
			return "FAIL no result"
		}
		first, _, _ := strings.Cut(f[0], ":")
		if len(f) > 1 {
			return fmt.Sprintf("FAIL %s +%d", first, len(f)-1)
		}
		return "FAIL " + first
	}
	if u := c.undecided(); len(u) > 0 {
		gate, _, _ := strings.Cut(u[0], ":")
		return "CANNOT-TELL " + gate
	}
	return "PASS " + c.figure()
}

// samples are a metric's samples, nil when the result lacks it.
func samples(r *results.Result, name string) []float64 {
	if m := r.Metric(name); m != nil {
		return m.Samples
	}
	return nil
}

// first is a metric's first sample (NaN when it has none).
func first(r *results.Result, name string) float64 {
	if s := samples(r, name); len(s) > 0 {
		return s[0]
	}
	return math.NaN()
}

// mib turns a figure in MiB back into the bytes it was measured as.
func mib(v float64) int64 { return int64(math.Round(v * (1 << 20))) }

// bandwidthFigure is "spill/restore GB/s" of the best samples and, when
// the tier's ceiling was measured, the lesser of the two as % of it.
func bandwidthFigure(r *results.Result) string {
	f := fmt.Sprintf("%.1f/%.1f GB/s", best(samples(r, "spill")), best(samples(r, "restore")))
	so, ro := samples(r, "spill_of_ceiling"), samples(r, "restore_of_ceiling")
	if len(so) > 0 && len(ro) > 0 {
		f += fmt.Sprintf(" %.0f%%", min(best(so), best(ro)))
	}
	return f
}

// figure is the cell's key figure, computed from its results alone.
func (c *tableCell) figure() string {
	rs := c.results
	r := &rs[0]
	switch c.cell.Scenario {
	case Hibernate:
		return bandwidthFigure(r)
	case Partial:
		var figs []string
		for i := range rs {
			figs = append(figs, fmt.Sprintf("%.1f", best(samples(&rs[i], "restore"))))
		}
		return "R " + strings.Join(figs, "/") + " GB/s"
	case RestoreGate:
		missing := samples(r, "short_missing")
		if len(missing) == 0 {
			return "short restore not caught"
		}
		return fmt.Sprintf("caught −%d B, verify %.1f ms", int64(missing[0]), -best(negate(samples(r, "verify"))))
	case Uneven:
		return fmt.Sprintf("%d shards ", len(strings.Split(r.Params["shares"], ":"))) + bandwidthFigure(r)
	case PingPong:
		return fmt.Sprintf("pred %.2f/meas %.2f ms (error %.0f%%, median of turns)", results.Median(samples(r, "predicted")), results.Median(samples(r, "turn")), results.Median(samples(r, "model_error")))
	case MultiSession:
		return fmt.Sprintf("%s sessions, %.0f ops, %.0f switches", r.Params["sessions"], first(r, "operations"), first(r, "switches"))
	case Ladder:
		var figs []string
		worstChanges, worstCost := 0.0, 0.0
		for i := range rs {
			figs = append(figs, fmt.Sprintf("%.0f", first(&rs[i], "rung_changes")))
			worstChanges = max(worstChanges, first(&rs[i], "changes_per_cooldown"))
			worstCost = max(worstCost, best(samples(&rs[i], "tick_cost"))/(first(&rs[i], "interval")*1e3))
		}
		return fmt.Sprintf("changes %s, ≤%.0f/cooldown, tick ≤%.0f%% of interval", strings.Join(figs, "/"), worstChanges, 100*worstCost)
	case Abort:
		after := time.Duration(math.Round(first(r, "reclaim_after") * float64(time.Millisecond)))
		return fmt.Sprintf("stranded %s → reclaimed after %s", units.Bytes(mib(first(r, "stranded"))), after.Round(time.Millisecond))
	case CoResidency:
		return fmt.Sprintf("claimed %s, 1 refused, floor held", units.Bytes(mib(first(r, "claimed"))))
	}
	return ""
}

// tableCells groups a document's cell results by cell, in the order they
// were run; ceilings and results of other kinds are left out.
func tableCells(d *results.Document) []*tableCell {
	var out []*tableCell
	at := map[string]*tableCell{}
	for _, r := range d.Results {
		p := r.Params
		sc := Scenario(p["scenario"])
		if r.Name != string(sc) || !slices.Contains(Scenarios, sc) {
			continue
		}
		key := p["scenario"] + "/" + p["tier"] + "/" + p["size"]
		c := at[key]
		if c == nil {
			c = &tableCell{cell: Cell{Scenario: sc, Tier: tier.Kind(p["tier"])}, size: p["size"]}
			at[key] = c
			out = append(out, c)
		}
		if p["status"] == "error" {
			c.err = &r
			continue
		}
		c.results = append(c.results, r)
	}
	return out
}

// blocksOf is the pool's block count: the document's, or for a document
// written before it said so, the blocks of a cell of that size that names
// them ("" when none does).
func blocksOf(d *results.Document, size string) string {
	if b := d.Env[EnvBlocks]; b != "" {
		return b
	}
	for _, r := range d.Results {
		if r.Params["size"] == size && r.Params["scenario"] != "" && r.Params["blocks"] != "" {
			return r.Params["blocks"]
		}
	}
	return ""
}

// Table prints a spill-matrix document as the run printed it: one matrix
// per size — scenario rows × tier columns, PASS with the key figure,
// CANNOT-TELL, or FAIL with the first failing gate — then the tier
// ceilings, the cells' warnings, the gates that could not tell and every
// failure with its reason. It reads the document alone, so 'report show
// --run' prints the same table.
func Table(w io.Writer, d *results.Document) error {
	cells := tableCells(d)
	var sizes []string
	tiersUsed := map[tier.Kind]bool{}
	scUsed := map[Scenario]bool{}
	at := map[string]*tableCell{}
	for _, c := range cells {
		if !slices.Contains(sizes, c.size) {
			sizes = append(sizes, c.size)
		}
		tiersUsed[c.cell.Tier] = true
		scUsed[c.cell.Scenario] = true
		at[c.name()] = c
	}
	var tiers []tier.Kind
	for _, k := range tier.Kinds {
		if tiersUsed[k] {
			tiers = append(tiers, k)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, size := range sizes {
		fmt.Fprintf(tw, "spill matrix, pool %s", size)
		if b := blocksOf(d, size); b != "" {
			fmt.Fprintf(tw, " in %s blocks", b)
		}
		fmt.Fprintln(tw)
		var rows [][]string // scenario, then one text per tier
		var na []string     // "why: cells", in order of first appearance
		naCells := map[string][]string{}
		for _, sc := range Scenarios {
			if !scUsed[sc] {
				continue
			}
			row := []string{string(sc)}
			for _, k := range tiers {
				txt := at[string(sc)+"/"+string(k)+"/"+size].text()
				if ok, why := (Cell{Scenario: sc, Tier: k}).Applicable(); !ok {
					txt = "n/a"
					if naCells[why] == nil {
						na = append(na, why)
					}
					naCells[why] = append(naCells[why], string(sc)+"/"+string(k))
				}
				row = append(row, txt)
			}
			rows = append(rows, row)
		}
		writeMatrix(tw, tiers, rows)
		for _, why := range na {
			fmt.Fprintln(tw, units.Wrap(fmt.Sprintf("n/a: %s: %s", strings.Join(naCells[why], ", "), why), matrixWidth, "    "))
		}
		fmt.Fprintln(tw)
	}
	ceilingsTable(tw, d)
	if err := tw.Flush(); err != nil {
		return err
	}
	var warns, undecided, failures []string
	for _, c := range cells {
		for _, r := range c.results {
			for _, w := range r.Warnings {
				warns = append(warns, c.name()+": "+w)
			}
			if note := r.ThrottleNote(); note != "" && !slices.Contains(warns, c.name()+": "+note) {
				warns = append(warns, c.name()+": "+note)
			}
		}
		for _, s := range c.undecided() {
			undecided = append(undecided, c.name()+": "+s)
		}
		for _, s := range c.failures() {
			failures = append(failures, c.name()+": "+s)
		}
	}
	if note := results.BusyHostNote(d.Results); note != "" {
		warns = append(warns, note)
	}
	for _, l := range []struct {
		head  string
		lines []string
	}{
		{"%d warning(s):", warns},
		{"%d gate(s) that cannot tell (neither pass nor fail; more --samples would decide):", undecided},
		{"%d failing gate(s):", failures},
	} {
		if len(l.lines) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n"+l.head+"\n", len(l.lines))
		for _, s := range l.lines {
			fmt.Fprintln(w, units.Wrap("  "+s, matrixWidth, "      "))
		}
	}
	return nil
}

// ceilingsTable lists the tier ceilings the cells were gated against.
func ceilingsTable(tw io.Writer, d *results.Document) {
	head := false
	for _, r := range d.Results {
		if r.Name != "spill-ceiling" {
			continue
		}
		if !head {
			fmt.Fprintln(tw, "tier ceilings (best of samples, same run):")
			fmt.Fprintln(tw, "\ttier\tsize\tspill GB/s\trestore GB/s")
			head = true
		}
		p := r.Params
		size := p["size"]
		if p["blocks"] != "" { // documents before the ceilings named their blocks lack it
			size += ", " + p["blocks"] + " blocks"
		}
		if sh := p["shards"]; sh != "" {
			size += fmt.Sprintf(" in %d shards at once", len(strings.Split(sh, "+")))
		}
		sp, rs := r.Metric("spill"), r.Metric("restore")
		if sp == nil || rs == nil || !sp.Measured() || !rs.Measured() {
			why := ""
			if sp != nil {
				why = sp.Unmeasured
			}
			fmt.Fprintf(tw, "\t%s\t%s\tunmeasured\tunmeasured\t%s\n", p["tier"], size, why)
			continue
		}
		fmt.Fprintf(tw, "\t%s\t%s\t%.2f\t%.2f\n", p["tier"], size, best(sp.Samples), best(rs.Samples))
	}
}

// matrixWidth is the widest a scenario × tier grid may print; a wider one
// (five tiers of 30–46 columns each) prints a line per cell instead.
const matrixWidth = units.TextWidth

// writeMatrix writes rows (scenario, then one text per tier) as a grid
// when it fits matrixWidth, else as one line per cell under its scenario.
func writeMatrix(tw io.Writer, tiers []tier.Kind, rows [][]string) {
	width := make([]int, len(tiers)+1)
	width[0] = len("scenario")
	for i, k := range tiers {
		width[i+1] = len(k)
	}
	for _, row := range rows {
		for i, txt := range row {
			width[i] = max(width[i], utf8.RuneCountInString(txt))
		}
	}
	total := 2 * (len(width) - 1)
	for _, n := range width {
		total += n
	}
	if total <= matrixWidth {
		fmt.Fprint(tw, "scenario")
		for _, k := range tiers {
			fmt.Fprintf(tw, "\t%s", k)
		}
		fmt.Fprintln(tw)
		for _, row := range rows {
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		return
	}
	fmt.Fprintln(tw, "scenario\ttier\tresult")
	for _, row := range rows {
		for i, k := range tiers {
			sc := ""
			if i == 0 {
				sc = row[0]
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", sc, k, row[i+1])
		}
	}
}
