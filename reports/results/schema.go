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
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
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

// WarnNoFooter is the warning a reader adds to a stream that ends without
// its footer: the run died (SIGKILL, OOM) before it finished.
const WarnNoFooter = "stream has no footer: the run did not finish, results may be missing"

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
	// RunID names this run (NewDocument sets it), so that two documents of
	// one host stay distinguishable after a merge; empty in documents
	// written before run ids existed.
	RunID string `json:"run_id,omitempty"`
	// Rounds is how many times the command repeated its whole sweep
	// (--rounds); 0 or 1 is once. Metric.Rounds says which round each
	// sample belongs to.
	Rounds int `json:"rounds,omitempty"`
	// Shard, set by a run of one shard of a suite (--shard I/N), says
	// which cells it ran, so that merge can refuse overlaps and gaps.
	Shard *Shard `json:"shard,omitempty"`
}

// Shard is the part of a suite's cells that one --shard I/N run owns.
type Shard struct {
	Index int `json:"index"` // I, from 1
	Count int `json:"count"` // N
	// Total is the number of cells of the whole suite, and List a hash of
	// their ordered names (shard.ListKey): shards of one sweep agree on both.
	Total int    `json:"total"`
	List  string `json:"list"`
	// Cells names the cells this shard owns, all of which it ran unless
	// the document is interrupted.
	Cells []string `json:"cells"`
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
	Env Env `json:"env,omitempty"`
	// Run is the run id of the document this result came from when Merge
	// joined it into a document of several runs (see Document.RunOf).
	Run string `json:"run,omitempty"`
	// Role is RoleMeasured (empty) for the code under test, or
	// RoleContext for what a run measures only to put its results in
	// context (hardware ceilings, a memcpy reference): a diff shows
	// context but does not let it decide.
	Role     Role     `json:"role,omitempty"`
	Metrics  []Metric `json:"metrics"`
	Gates    []Gate   `json:"gates,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// GPUState is the GPU's state while the result's samples ran, sampled
	// through NVML; absent where nothing was sampled (the CPU backend).
	GPUState *GPUState `json:"gpu_state,omitempty"`
	// HostState is how busy the host's CPUs were while the samples ran
	// (Linux); absent where it could not be read.
	HostState *HostState `json:"host_state,omitempty"`
}

// HostState is the host's CPU time over a result's samples that was not
// the measurement's: taken by the hypervisor (steal) or used by other
// processes, in percent of all CPUs' time.
type HostState struct {
	Seconds  float64 `json:"seconds"`
	CPUs     int     `json:"cpus"`
	StealPct float64 `json:"steal_pct"`
	OtherPct float64 `json:"other_pct"`
	// Busy is set when the host was too busy for CPU timings to be the
	// code's alone (hoststate.Usage.Busy).
	Busy bool `json:"busy,omitempty"`
}

// BusyHostNote says how many of these results were measured on a busy
// host, and how busy, in one line for a whole run; "" when none was.
func BusyHostNote(rs []Result) string {
	n, busy, cpus := 0, 0, 0
	var steal, other [2]float64
	for i := range rs {
		h := rs[i].HostState
		if h == nil {
			continue
		}
		n++
		if !h.Busy {
			continue
		}
		if busy == 0 {
			steal, other = [2]float64{h.StealPct, h.StealPct}, [2]float64{h.OtherPct, h.OtherPct}
		}
		steal = [2]float64{min(steal[0], h.StealPct), max(steal[1], h.StealPct)}
		other = [2]float64{min(other[0], h.OtherPct), max(other[1], h.OtherPct)}
		cpus = max(cpus, h.CPUs)
		busy++
	}
	if busy == 0 {
		return ""
	}
	pct := func(v [2]float64) string {
		lo, hi := fmt.Sprintf("%.0f", v[0]), fmt.Sprintf("%.0f", v[1])
		if lo == hi {
			return lo + "%"
		}
		return lo + "–" + hi + "%"
	}
	return fmt.Sprintf("%d of %d results measured on a busy host (%d CPUs): the hypervisor took %s of the CPU time (steal), other processes used %s; CPU-side timings are noisier than the code makes them",
		busy, n, cpus, pct(steal), pct(other))
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
	// NVML's power is a 1-second average on GPUs after the A100 (Hopper
	// included): idle gaps between short samples pull it far below the
	// peaks a power cap acts on.
	return fmt.Sprintf("measured while %s-throttled (%s): SM clock %s, power %s of a %s limit (NVML's power: a 1 s average on Hopper), %s, over %d GPU samples",
		strings.Join(kinds, " and "), strings.Join(g.Reasons, ", "), span(g.SMClockMHz, "MHz"), span(g.PowerW, "W"), span(g.PowerLimitW, "W"), span(g.TempC, "°C"), g.Samples)
}

// Role says what a result is for; see Result.Role.
type Role string

const (
	RoleMeasured Role = ""
	RoleContext  Role = "context"
)

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

// roundKey is what the rounds of one result share: its key within its run
// (a merged document's results carry their runs, which stay apart).
func (r Result) roundKey() string { return r.Run + "\x00" + r.Key() }

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
	// DerivedFrom names the metric of the same result that this one is
	// computed from (throughput from latency, a percentage of a ceiling):
	// one measured quantity, so a diff shows it but lets only the source
	// decide.
	DerivedFrom string `json:"derived_from,omitempty"`
	// Rounds, when set, is parallel to Samples: the round (0-based) of the
	// repeated sweep each sample was measured in.
	Rounds []int `json:"rounds,omitempty"`
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
	if s := d.Shard; s != nil && (s.Count < 1 || s.Index < 1 || s.Index > s.Count || len(s.Cells) > s.Total) {
		return fmt.Errorf("shard %d/%d lists %d cells of %d: not a shard of a suite", s.Index, s.Count, len(s.Cells), s.Total)
	}
	for i, r := range d.Results {
		if r.Name == "" {
			return fmt.Errorf("result %d has no name", i)
		}
		if r.Role != RoleMeasured && r.Role != RoleContext {
			return fmt.Errorf("result %q: role %q is neither empty (measured) nor %q", r.Key(), r.Role, RoleContext)
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
			if len(m.Rounds) > 0 && len(m.Rounds) != len(m.Samples) {
				return fmt.Errorf("result %q: metric %q has %d samples but %d rounds", r.Key(), m.Name, len(m.Samples), len(m.Rounds))
			}
			for k, v := range m.Samples {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					return fmt.Errorf("result %q: metric %q: sample %d is %v (JSON cannot carry it; mark the metric unmeasured instead)", r.Key(), m.Name, k, v)
				}
				if v < 0 && timeUnits[m.Unit] {
					return fmt.Errorf("result %q: metric %q: sample %d is %v %s: a time cannot be negative", r.Key(), m.Name, k, v, m.Unit)
				}
			}
		}
		for _, m := range r.Metrics {
			if m.DerivedFrom != "" && (m.DerivedFrom == m.Name || !seen[m.DerivedFrom]) {
				return fmt.Errorf("result %q: metric %q is derived from %q, which is not another metric of the result", r.Key(), m.Name, m.DerivedFrom)
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

// Interrupted reports whether the run stopped before it completed (its
// results are the part that ran).
func (d *Document) Interrupted() bool {
	for _, w := range d.Warnings {
		if w == WarnInterrupted || w == WarnNoFooter {
			return true
		}
	}
	return false
}

// RunOf is the run id of result r: its own (a merged document's results
// keep theirs) or its document's.
func (d *Document) RunOf(r *Result) string {
	if r.Run != "" {
		return r.Run
	}
	return d.RunID
}

// NewRunID is a fresh run id: the UTC start time to the second and 32
// random bits, e.g. "20261201T212619Z-3fa2b1c4".
func NewRunID(start time.Time) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		// Without randomness the nanoseconds still tell two runs apart.
		return start.UTC().Format("20060102T150405.000000000Z")
	}
	return start.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// JoinRounds joins the results of a sweep repeated in rounds (rounds[i] is
// round i's results) into one result per key, in order of first
// appearance: samples are concatenated and each metric's Rounds records
// the round of every sample; a gate passes only when it passed in every
// round (a failing round's reason wins); warnings are kept once. Results
// of one round only (a tuned configuration, an interrupted last round)
// stay as they are, with their round recorded.
func JoinRounds(rounds [][]Result) []Result {
	var out []Result
	index := map[string]int{}
	for round, rs := range rounds {
		for _, r := range rs {
			k := r.roundKey()
			i, ok := index[k]
			if !ok {
				i = len(out)
				index[k] = i
				c := r
				c.Metrics, c.Gates, c.Warnings = nil, nil, nil
				out = append(out, c)
			}
			joinResult(&out[i], r, round)
		}
	}
	return out
}

func joinResult(dst *Result, r Result, round int) {
	for _, m := range r.Metrics {
		j := slices.IndexFunc(dst.Metrics, func(x Metric) bool { return x.Name == m.Name })
		if j < 0 {
			c := m
			c.Samples, c.Rounds = nil, nil
			dst.Metrics = append(dst.Metrics, c)
			j = len(dst.Metrics) - 1
		}
		d := &dst.Metrics[j]
		if !m.Measured() {
			if d.Unmeasured == "" {
				d.Unmeasured = fmt.Sprintf("round %d: %s", round, m.Unmeasured)
			}
			continue
		}
		for range m.Samples {
			d.Rounds = append(d.Rounds, round)
		}
		d.Samples = append(d.Samples, m.Samples...)
	}
	for j := range dst.Metrics {
		// A metric unmeasured in one round but measured in another keeps
		// its samples: Validate allows only one of the two.
		if d := &dst.Metrics[j]; len(d.Samples) > 0 {
			d.Unmeasured = ""
		}
	}
	for _, g := range r.Gates {
		j := slices.IndexFunc(dst.Gates, func(x Gate) bool { return x.Name == g.Name })
		switch {
		case j < 0:
			dst.Gates = append(dst.Gates, g)
		case dst.Gates[j].Pass && (!g.Pass || round > 0):
			dst.Gates[j] = g // a pass says what the last round checked; a failure stays
		}
	}
	for _, w := range r.Warnings {
		if !slices.Contains(dst.Warnings, w) {
			dst.Warnings = append(dst.Warnings, w)
		}
	}
	if round > 0 {
		dst.GPUState = joinGPUState(dst.GPUState, r.GPUState)
		// The busiest round's: a note then says how bad it got.
		if h := r.HostState; h != nil && (dst.HostState == nil || h.StealPct+h.OtherPct > dst.HostState.StealPct+dst.HostState.OtherPct) {
			dst.HostState = h
		}
	}
}

// joinGPUState is the range over both states.
func joinGPUState(a, b *GPUState) *GPUState {
	if a == nil || b == nil {
		return cmp.Or(a, b)
	}
	span := func(x, y [2]float64) [2]float64 { return [2]float64{min(x[0], y[0]), max(x[1], y[1])} }
	j := *a
	j.Samples += b.Samples
	j.SMClockMHz, j.MemClockMHz = span(a.SMClockMHz, b.SMClockMHz), span(a.MemClockMHz, b.MemClockMHz)
	j.PowerW, j.PowerLimitW, j.TempC = span(a.PowerW, b.PowerW), span(a.PowerLimitW, b.PowerLimitW), span(a.TempC, b.TempC)
	j.Reasons = slices.Clone(a.Reasons)
	for _, r := range b.Reasons {
		if !slices.Contains(j.Reasons, r) {
			j.Reasons = append(j.Reasons, r)
		}
	}
	j.PowerThrottled, j.ThermalThrottled = a.PowerThrottled || b.PowerThrottled, a.ThermalThrottled || b.ThermalThrottled
	return &j
}

// timeUnits are the units of durations, which no sample may take below 0.
var timeUnits = map[string]bool{"ns": true, "us": true, "µs": true, "ms": true, "s": true}
