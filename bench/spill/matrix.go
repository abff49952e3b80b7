package spill

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/internal/units"

	"github.com/mstar-dev/mstar/internal/spill/tier"
	"github.com/mstar-dev/mstar/reports/results"
)

// Matrix is a run's outcomes and the tier ceilings they were gated against.
type Matrix struct {
	Config   Config
	Outcomes []Outcome
	Ceilings []Ceiling
}

// Passed reports whether every cell passed.
func (m *Matrix) Passed() bool {
	for _, o := range m.Outcomes {
		if !o.Passed() {
			return false
		}
	}
	return true
}

// FailedCells counts the cells that failed a gate.
func (m *Matrix) FailedCells() int {
	n := 0
	for _, o := range m.Outcomes {
		if !o.Passed() {
			n++
		}
	}
	return n
}

// BadInputCells names the cells that could not run for bad input (a pool
// too small for the cell's layout): the caller's fault, not a failed gate.
func (m *Matrix) BadInputCells() []string {
	var names []string
	for _, o := range m.Outcomes {
		if badinput.Is(o.Err) {
			names = append(names, o.Cell.Name())
		}
	}
	return names
}

// Failures lists every failing gate as "cell: gate: reason".
func (m *Matrix) Failures() []string {
	var out []string
	for _, o := range m.Outcomes {
		for _, f := range o.Failures() {
			out = append(out, o.Cell.Name()+": "+f)
		}
	}
	return out
}

// Undecided lists every gate that could not tell, as "cell: gate: reason".
func (m *Matrix) Undecided() []string {
	var out []string
	for _, o := range m.Outcomes {
		for _, f := range o.Undecided() {
			out = append(out, o.Cell.Name()+": "+f)
		}
	}
	return out
}

// Results returns the ceilings and every cell's results, for a results
// document. A cell that could not run becomes a result whose "ran" gate
// fails with the error, so the document says what happened to every cell.
func (m *Matrix) Results() []results.Result {
	var out []results.Result
	for _, c := range m.Ceilings {
		out = append(out, c.Result())
	}
	for _, o := range m.Outcomes {
		out = append(out, o.results()...)
	}
	return out
}

// results are one cell's results; a cell that could not run is one result
// whose "ran" gate says why.
func (o *Outcome) results() []results.Result {
	out := append([]results.Result(nil), o.Results...)
	if o.Err != nil {
		out = append(out, results.Result{
			Name:    string(o.Cell.Scenario),
			Params:  results.Params{"scenario": string(o.Cell.Scenario), "tier": string(o.Cell.Tier), "size": units.Size(o.Cell.Size, ""), "status": "error"},
			Metrics: []results.Metric{},
			Gates:   []results.Gate{fail("ran", "%v", o.Err)},
		})
	}
	return out
}

// cellText is what the matrix prints for an outcome.
func cellText(o *Outcome) string {
	if o == nil {
		return "·"
	}
	if o.Passed() {
		if u := o.Undecided(); len(u) > 0 {
			gate, _, _ := strings.Cut(u[0], ":")
			return "CANNOT-TELL " + gate
		}
		return "PASS " + o.Figure
	}
	f := o.Failures()
	first := f[0]
	if gate, _, ok := strings.Cut(first, ":"); ok {
		first = gate
	}
	if len(f) > 1 {
		return fmt.Sprintf("FAIL %s +%d", first, len(f)-1)
	}
	return "FAIL " + first
}

// WriteText prints one matrix per size — scenario rows × tier columns, PASS
// or FAIL with the key figure or the first failing gate — then the ceilings
// and every failure with its reason.
func (m *Matrix) WriteText(w io.Writer) error {
	var sizes []int64
	seen := map[int64]bool{}
	tiersUsed := map[tier.Kind]bool{}
	scUsed := map[Scenario]bool{}
	at := map[Cell]*Outcome{}
	for i := range m.Outcomes {
		o := &m.Outcomes[i]
		if !seen[o.Cell.Size] {
			seen[o.Cell.Size] = true
			sizes = append(sizes, o.Cell.Size)
		}
		tiersUsed[o.Cell.Tier] = true
		scUsed[o.Cell.Scenario] = true
		at[o.Cell] = o
	}
	var tiers []tier.Kind
	for _, k := range tier.Kinds {
		if tiersUsed[k] {
			tiers = append(tiers, k)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, size := range sizes {
		fmt.Fprintf(tw, "spill matrix, pool %s in %d blocks\n", units.Size(size, ""), m.Config.Blocks)
		fmt.Fprint(tw, "scenario")
		for _, k := range tiers {
			fmt.Fprintf(tw, "\t%s", k)
		}
		fmt.Fprintln(tw)
		var na []string // "why: cells", in order of first appearance
		naCells := map[string][]string{}
		for _, sc := range Scenarios {
			if !scUsed[sc] {
				continue
			}
			fmt.Fprint(tw, sc)
			for _, k := range tiers {
				c := Cell{sc, k, size}
				txt := cellText(at[c])
				if ok, why := c.Applicable(); !ok {
					txt = "n/a"
					if naCells[why] == nil {
						na = append(na, why)
					}
					naCells[why] = append(naCells[why], string(sc)+"/"+string(k))
				}
				fmt.Fprintf(tw, "\t%s", txt)
			}
			fmt.Fprintln(tw)
		}
		for _, why := range na {
			fmt.Fprintf(tw, "n/a: %s: %s\n", strings.Join(naCells[why], ", "), why)
		}
		fmt.Fprintln(tw)
	}
	if len(m.Ceilings) > 0 {
		fmt.Fprintln(tw, "tier ceilings (best of samples, same run)\ttier\tsize\tspill GB/s\trestore GB/s\twhere")
		for _, c := range m.Ceilings {
			size := fmt.Sprintf("%s, %d blocks", units.Size(c.Size, ""), c.Blocks)
			if len(c.Shards) > 1 {
				size += fmt.Sprintf(" in %d shards at once", len(c.Shards))
			}
			if c.Unmeasured != "" {
				fmt.Fprintf(tw, "\t%s\t%s\tunmeasured\tunmeasured\t%s\n", c.Tier, size, c.Unmeasured)
				continue
			}
			fmt.Fprintf(tw, "\t%s\t%s\t%.2f\t%.2f\t%s\n", c.Tier, size, best(c.Spill), best(c.Restore), c.Where)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var warns []string
	for _, o := range m.Outcomes {
		for _, r := range o.Results {
			for _, w := range r.Warnings {
				warns = append(warns, o.Cell.Name()+": "+w)
			}
			if note := r.ThrottleNote(); note != "" && !slices.Contains(warns, o.Cell.Name()+": "+note) {
				warns = append(warns, o.Cell.Name()+": "+note)
			}
		}
	}
	if len(warns) > 0 {
		fmt.Fprintf(w, "\n%d warning(s):\n", len(warns))
		for _, s := range warns {
			fmt.Fprintln(w, "  "+s)
		}
	}
	if u := m.Undecided(); len(u) > 0 {
		fmt.Fprintf(w, "\n%d gate(s) that cannot tell (neither pass nor fail; more --samples would decide):\n", len(u))
		for _, s := range u {
			fmt.Fprintln(w, "  "+s)
		}
	}
	if f := m.Failures(); len(f) > 0 {
		fmt.Fprintf(w, "\n%d failing gate(s):\n", len(f))
		for _, s := range f {
			fmt.Fprintln(w, "  "+s)
		}
	}
	return nil
}
