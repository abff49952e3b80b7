package spill

import (
	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/internal/units"

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
