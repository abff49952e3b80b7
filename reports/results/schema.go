// Package results defines mstar's results document — the one file format that
// every measuring command writes and every table, diff, export and plot reads —
// with its validation, atomic writer, NDJSON stream and summaries. It imports
// nothing heavy, so every producer can depend on it; the tables, diffs, merges
// and plots built on it live in package reports, which only the CLI imports.
//
// The shape follows benchfmt and vegeta: measuring and reporting are separate
// steps joined by this format. A document carries the environment it was
// measured in as key/value pairs, and each result carries every raw sample,
// not only a summary, so that later comparisons can do real statistics.
//
// # Writing
//
// A measuring command makes a document with NewDocument, appends results,
// calls Finish and writes it with WriteFile, which is atomic (temporary file,
// fsync, rename, fsync of the folder). A long run may instead stream it with
// CreateStream: NDJSON, a header record, one record per result as it is
// measured, and a footer; an interrupted stream still reads. Both writers
// validate first: a metric has samples or says why it is unmeasured
// (unmeasured is never 0), samples are finite, directions are "lower" or
// "higher".
//
// # Reading
//
// ReadFile and Read take either form, told apart by the bytes alone, and
// reject a missing, empty or malformed file, a wrong format or schema version
// with one line that names the file and, for syntax, the line and column.
//
// # Summaries
//
// Summarize gives the median and its 95% confidence interval (through
// golang.org/x/perf/benchmath).
package results

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// SchemaVersion is the version of the results document written by this build.
// Readers reject any other version with a clear error.
const SchemaVersion = 1

// Format names the document kind inside the file, so that a stray JSON file is
// recognised as "not an mstar results document" rather than as empty results.
const Format = "mstar.results"

// WarnInterrupted is the run-level warning (Document.Warnings) of a run
// that SIGINT or SIGTERM stopped before it completed: its results are the
// part that ran, and a reader must not take them for the whole run.
const WarnInterrupted = "interrupted: the run stopped before it completed; its results cover the part that ran"

// Sink receives each result as soon as it is finished, so that a run
// killed later keeps it (the CLI streams it beside --out). A nil Sink
// drops them.
type Sink func(Result)

// Send hands rs to the sink, if there is one.
func (s Sink) Send(rs ...Result) {
	if s == nil {
		return
	}
	for _, r := range rs {
		s(r)
	}
}

// Document is one run of one measuring command.
type Document struct {
	Format   string    `json:"format"`  // always Format
	Schema   int       `json:"schema"`  // SchemaVersion
	Suite    string    `json:"suite"`   // "bench moe", "arena sweep", "spill-matrix", ...
	Command  []string  `json:"command"` // the command line that produced it
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Env      Env       `json:"env"` // where it ran: host, cpu, gpu, driver, versions ...
	Results  []Result  `json:"results"`
	Warnings []string  `json:"warnings,omitempty"` // run-level, non-fatal problems
}

// Env is the environment a document was measured in, as benchfmt
// configuration lines are: results group and compare by it.
type Env map[string]string

// Key is a canonical string for grouping documents by environment.
func (e Env) Key() string {
	keys := make([]string, 0, len(e))
	for k := range e {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, e[k])
	}
	return b.String()
}

// Result is one measured configuration: a name, its parameters, metrics with
// all their samples, the gates it passed or failed, and warnings.
type Result struct {
	Name   string `json:"name"`
	Params Params `json:"params,omitempty"`
	// Env holds the environment keys in which this result differs from its
	// document's Env. Measuring commands leave it empty; Merge sets it when
	// it joins documents from several machines, so that every result keeps
	// where it was measured (see Document.EnvOf).
	Env      Env      `json:"env,omitempty"`
	Metrics  []Metric `json:"metrics"`
	Gates    []Gate   `json:"gates,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// GPUState is the GPU's state while the result's samples ran, sampled
	// through NVML; absent where nothing was sampled (the CPU backend).
	GPUState *GPUState `json:"gpu_state,omitempty"`
}

// GPUState is the range of a GPU's state over a result's samples: each
// pair is the least and greatest reading.
type GPUState struct {
	Samples     int        `json:"samples"`
	SMClockMHz  [2]float64 `json:"sm_clock_mhz"`
	MemClockMHz [2]float64 `json:"mem_clock_mhz"`
	PowerW      [2]float64 `json:"power_w"`
	PowerLimitW [2]float64 `json:"power_limit_w"`
	TempC       [2]float64 `json:"temp_c"`
	// Reasons are NVML's clock-event (throttle) reasons set in any sample.
	Reasons          []string `json:"reasons,omitempty"`
	PowerThrottled   bool     `json:"power_throttled,omitempty"`
	ThermalThrottled bool     `json:"thermal_throttled,omitempty"`
}

// ThrottleNote says how a result measured while power- or thermally-
// throttled was slowed, with the state's ranges; "" when it was not.
func (r *Result) ThrottleNote() string {
	g := r.GPUState
	if g == nil || !(g.PowerThrottled || g.ThermalThrottled) {
		return ""
	}
	var kinds []string
	if g.PowerThrottled {
		kinds = append(kinds, "power")
	}
	if g.ThermalThrottled {
		kinds = append(kinds, "thermally")
	}
	span := func(v [2]float64, unit string) string {
		if v[0] == v[1] {
			return fmt.Sprintf("%.0f %s", v[0], unit)
		}
		return fmt.Sprintf("%.0f–%.0f %s", v[0], v[1], unit)
	}
	return fmt.Sprintf("measured while %s-throttled (%s): SM clock %s, power %s of a %s limit, %s, over %d GPU samples",
		strings.Join(kinds, " and "), strings.Join(g.Reasons, ", "), span(g.SMClockMHz, "MHz"), span(g.PowerW, "W"), span(g.PowerLimitW, "W"), span(g.TempC, "°C"), g.Samples)
}

// Params are a result's parameters ("batch": "64", "model": "qwen3-30b-a3b").
// Values are strings so that they print, pair and export without loss.
type Params map[string]string

// Key is "name/k1=v1/k2=v2" with keys sorted: results pair across documents by it.
func (r Result) Key() string {
	keys := make([]string, 0, len(r.Params))
	for k := range r.Params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(r.Name)
	for _, k := range keys {
		fmt.Fprintf(&b, "/%s=%s", k, r.Params[k])
	}
	return b.String()
}

// Metric returns the metric with the given name, or nil.
func (r *Result) Metric(name string) *Metric {
	for i := range r.Metrics {
		if r.Metrics[i].Name == name {
			return &r.Metrics[i]
		}
	}
	return nil
}

// Passed reports whether no gate of the result failed (an undecided gate
// is not a failure: see Undecided).
func (r Result) Passed() bool {
	for _, g := range r.Gates {
		if g.Failed() {
			return false
		}
	}
	return true
}

// Undecided reports whether a gate of the result could not tell.
func (r Result) Undecided() bool {
	for _, g := range r.Gates {
		if g.Undecided {
			return true
		}
	}
	return false
}

// Direction says which way a metric improves.
type Direction string

const (
	LowerIsBetter  Direction = "lower"
	HigherIsBetter Direction = "higher"
)

// Metric is one measured quantity with every raw sample. A metric that could
// not be measured has no samples and says why in Unmeasured: "unmeasured" is
// never written as zero.
type Metric struct {
	Name       string    `json:"name"`
	Unit       string    `json:"unit"`
	Better     Direction `json:"better"`
	Samples    []float64 `json:"samples,omitempty"`
	Unmeasured string    `json:"unmeasured,omitempty"`
}

// Measured reports whether the metric has samples.
func (m Metric) Measured() bool { return len(m.Samples) > 0 && m.Unmeasured == "" }

// Gate is a hard pass/fail check of a result, with the reason when it fails
// (and, when it passes, optionally what it checked).
type Gate struct {
	Name   string `json:"name"`
	Pass   bool   `json:"pass"`
	Reason string `json:"reason,omitempty"`
	// Undecided marks a gate that could not tell pass from fail: its
	// measured interval straddles the limit (Pass is false). It is not a
	// failure; more samples would decide it.
	Undecided bool `json:"undecided,omitempty"`
}

// Failed reports whether the gate decided that its check failed.
func (g Gate) Failed() bool { return !g.Pass && !g.Undecided }

// EnvOf is the environment result r was measured in: the document's Env
// overlaid with the result's own Env.
func (d *Document) EnvOf(r *Result) Env {
	if len(r.Env) == 0 {
		return d.Env
	}
	e := make(Env, len(d.Env)+len(r.Env))
	for k, v := range d.Env {
		e[k] = v
	}
	for k, v := range r.Env {
		e[k] = v
	}
	return e
}

// Failed returns every failing gate in the document as "result key: gate: reason".
func (d *Document) Failed() []string {
	var out []string
	for _, r := range d.Results {
		for _, g := range r.Gates {
			if g.Failed() {
				out = append(out, fmt.Sprintf("%s: %s: %s", r.Key(), g.Name, g.Reason))
			}
		}
	}
	return out
}

// Undecided lists the gates that could not tell, as Failed does.
func (d *Document) Undecided() []string {
	var out []string
	for _, r := range d.Results {
		for _, g := range r.Gates {
			if g.Undecided {
				out = append(out, fmt.Sprintf("%s: %s: %s", r.Key(), g.Name, g.Reason))
			}
		}
	}
	return out
}

// Validate checks the invariants a reader relies on.
func (d *Document) Validate() error {
	if d.Format != Format {
		return fmt.Errorf("not an mstar results document (format %q, want %q)", d.Format, Format)
	}
	if d.Schema != SchemaVersion {
		return fmt.Errorf("unsupported schema version %d (this mstar reads version %d)", d.Schema, SchemaVersion)
	}
	for i, r := range d.Results {
		if r.Name == "" {
			return fmt.Errorf("result %d has no name", i)
		}
		seen := make(map[string]bool, len(r.Metrics))
		for j, m := range r.Metrics {
			if m.Name == "" {
				return fmt.Errorf("result %q: metric %d has no name", r.Key(), j)
			}
			if seen[m.Name] {
				return fmt.Errorf("result %q: metric %q appears twice", r.Key(), m.Name)
			}
			seen[m.Name] = true
			if m.Better != LowerIsBetter && m.Better != HigherIsBetter {
				return fmt.Errorf("result %q: metric %q: direction %q is neither %q nor %q", r.Key(), m.Name, m.Better, LowerIsBetter, HigherIsBetter)
			}
			// Unmeasured is never zero: a metric either has samples or says why not.
			if len(m.Samples) == 0 && m.Unmeasured == "" {
				return fmt.Errorf("result %q: metric %q has neither samples nor an unmeasured reason", r.Key(), m.Name)
			}
			if len(m.Samples) > 0 && m.Unmeasured != "" {
				return fmt.Errorf("result %q: metric %q has samples but is marked unmeasured (%s)", r.Key(), m.Name, m.Unmeasured)
			}
			for k, v := range m.Samples {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					return fmt.Errorf("result %q: metric %q: sample %d is %v (JSON cannot carry it; mark the metric unmeasured instead)", r.Key(), m.Name, k, v)
				}
			}
		}
		for _, g := range r.Gates {
			if g.Pass && g.Undecided {
				return fmt.Errorf("result %q: gate %q both passed and undecided", r.Key(), g.Name)
			}
		}
	}
	return nil
}
