package reports

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
)

// The environment keys of a tune moe document that its run table reads:
// the tuned file's key and path, the key its batches are kept under in the
// file (a routing, "@epN" under EP), and the comparison's --threshold.
const (
	EnvTunedKey       = "moe_tuned_key"
	EnvTunedFile      = "moe_tuned_file"
	EnvTunedRouting   = "moe_tuned_routing"
	EnvTuneThreshold  = "moe_tune_threshold"
	envKernelsVersion = "moe_kernels_version"
)

// What tune moe's candidate results say in their warnings.
const (
	tuneRejected = "rejected: "
	tuneChosen   = "chosen: "
	tuneStatic   = "static table: "
)

// tuneTable is tune moe's run table: what was tuned into which file, a row
// per batch (the chosen candidate, the static table's, how many were tried
// and rejected), the rejections, then the comparison of the tuned file with
// the static table, each side a bench moe sweep, through report diff.
func tuneTable(w io.Writer, d *Document) error {
	var cands []Result
	var batches []string
	sides := map[string]map[string]*Document{} // side → round → its latencies
	var rounds, swept []string
	var p Params
	for _, r := range d.Results {
		switch r.Name {
		case "moe_tune":
			cands = append(cands, r)
			if !slices.Contains(batches, r.Params["batch"]) {
				batches = append(batches, r.Params["batch"])
			}
			if p == nil {
				p = r.Params
			}
		case "moe":
			if !slices.Contains(swept, r.Params["batch"]) {
				swept = append(swept, r.Params["batch"])
			}
			side, round := r.Params["configs"], r.Params["round"]
			if side == "" {
				continue
			}
			if p == nil {
				p = r.Params
			}
			if sides[side] == nil {
				sides[side] = map[string]*Document{}
			}
			if !slices.Contains(rounds, round) {
				rounds = append(rounds, round)
			}
			doc := sides[side][round]
			if doc == nil {
				doc = &Document{Format: results.Format, Schema: results.SchemaVersion, Suite: d.Suite}
				sides[side][round] = doc
			}
			// The sides pair by batch: their configurations differ by design,
			// and only latency gets a verdict.
			cmp := Result{Name: r.Name, Params: Params{}}
			for k, v := range r.Params {
				if k != "config" && k != "config_source" && k != "configs" && k != "round" {
					cmp.Params[k] = v
				}
			}
			if lat := r.Metric("latency"); lat != nil {
				cmp.Metrics = []Metric{*lat}
			}
			doc.Results = append(doc.Results, cmp)
		}
	}
	model := p["model"]
	if model == "" {
		model = "custom"
	}
	tp, ep := p["tp"], p["ep"]
	if tp == "" {
		tp = "1"
	}
	if ep == "" {
		ep = "1"
	}
	fmt.Fprintln(w, units.Comment(fmt.Sprintf("mstar tune moe: %s (tp %s, ep %s) on %s: %s", model, tp, ep, deviceLine(d), d.Env[EnvTunedKey])))
	file := fmt.Sprintf("file %s (kernels %s)", d.Env[EnvTunedFile], d.Env[envKernelsVersion])
	if r := d.Env[EnvTunedRouting]; r != "" && r != "uniform" {
		file += ", its picks kept under " + r
	}
	fmt.Fprintln(w, units.Comment(file))
	for _, warn := range d.Warnings {
		if warn == results.WarnInterrupted {
			continue // said on stderr, as every measuring command does
		}
		writeWarning(w, warn)
	}
	if len(cands) > 0 {
		tuneRows(w, cands, batches)
	}
	var base, tuned []*Document
	for _, round := range rounds {
		if doc := sides["static"][round]; doc != nil {
			base = append(base, doc)
		}
		if doc := sides["tuned"][round]; doc != nil {
			tuned = append(tuned, doc)
		}
	}
	if len(base) == 0 || len(tuned) == 0 {
		return nil
	}
	threshold := 5.0
	if t, err := strconv.ParseFloat(d.Env[EnvTuneThreshold], 64); err == nil {
		threshold = t
	}
	fmt.Fprintln(w, "#")
	fmt.Fprintln(w, "# tuned file (new) versus the static table (base), each a bench moe sweep:")
	c := Diff(base, tuned, DiffOptions{Threshold: threshold})
	if err := RenderDiff(w, c, FormatText); err != nil {
		return err
	}
	if chosenIsStatic(cands, swept) {
		fmt.Fprintln(w, "# each batch ran one configuration on both sides (an A/A pair): a difference is this host's noise")
	}
	if len(c.Failures()) > 0 {
		fmt.Fprintln(w, "# the exit code does not depend on this comparison: it says how the file did against the")
		fmt.Fprintln(w, "#   static table in this run")
	}
	return nil
}

// chosenIsStatic says whether every one of batches chose the static table's
// pick in this run, so that both sides of the comparison ran the same
// kernels (a batch resumed from the file, with no candidates here, may not).
func chosenIsStatic(cands []Result, batches []string) bool {
	same := map[string]bool{}
	for i := range cands {
		if c := readCandidate(&cands[i]); c.chosen {
			same[cands[i].Params["batch"]] = c.config != "" && c.config == c.static
		}
	}
	for _, b := range batches {
		if !same[b] {
			return false
		}
	}
	return len(batches) > 0
}

// tuneCandidate is what a candidate's result says about it.
type tuneCandidate struct {
	config, reject, static string
	chosen                 bool
	latencyUS              float64 // the median, in the tuned file's rounding; 0 when not timed
	freshUS                float64 // a finalist's median over fresh processes; 0 when none
}

func readCandidate(r *Result) tuneCandidate {
	c := tuneCandidate{config: r.Params["config"]}
	for _, w := range r.Warnings {
		switch {
		case strings.HasPrefix(w, tuneRejected):
			c.reject = strings.TrimPrefix(w, tuneRejected)
		case strings.HasPrefix(w, tuneChosen):
			c.chosen = true
		case strings.HasPrefix(w, tuneStatic):
			c.static = strings.TrimPrefix(w, tuneStatic)
		}
	}
	if m := r.Metric("tune_latency"); m != nil && len(m.Samples) > 0 {
		c.latencyUS = math.Round(results.Summarize(m.Samples).Median*1000) / 1000
	}
	if m := r.Metric("tune_fresh_latency"); m != nil && len(m.Samples) > 0 {
		c.freshUS = results.Median(m.Samples)
	}
	return c
}

// tuneRows prints a row per batch, the tuned ones first, then each tuned
// batch's rejected candidates.
func tuneRows(w io.Writer, cands []Result, batches []string) {
	byBatch := map[string][]tuneCandidate{}
	chosen := map[string]*tuneCandidate{}
	for i := range cands {
		b := cands[i].Params["batch"]
		byBatch[b] = append(byBatch[b], readCandidate(&cands[i]))
	}
	var tunedBatches, none []string
	for _, b := range batches {
		for i, c := range byBatch[b] {
			if c.chosen {
				chosen[b] = &byBatch[b][i]
			}
		}
		if chosen[b] != nil {
			tunedBatches = append(tunedBatches, b)
		} else {
			none = append(none, b)
		}
	}
	// Configurations are long (a split one ~120 characters): the table has
	// the numbers, and each batch's configurations follow it, wrapped.
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	io.WriteString(tw, "#\tbatch\tchosen us\tstatic us\tspeedup\tcandidates\trejected\t\n")
	for _, b := range append(append([]string{}, tunedBatches...), none...) {
		outs := byBatch[b]
		rejected := 0
		for _, c := range outs {
			if c.reject != "" {
				rejected++
			}
		}
		c := chosen[b]
		if c == nil {
			fmt.Fprintf(tw, "\t%s\tnone passed\t-\t-\t%d\t%d\t\n", b, len(outs), rejected)
			continue
		}
		staticUS, speedup := "-", "-"
		for _, o := range outs {
			if o.config == c.static && o.latencyUS != 0 {
				staticUS = fmt.Sprintf("%.1f", o.latencyUS)
				speedup = fmt.Sprintf("%.2f×", o.latencyUS/c.latencyUS)
			}
		}
		fmt.Fprintf(tw, "\t%s\t%.1f\t%s\t%s\t%d\t%d\t\n", b, c.latencyUS, staticUS, speedup, len(outs), rejected)
	}
	tw.Flush()
	for _, b := range tunedBatches {
		c := chosen[b]
		line := fmt.Sprintf("# M=%s chosen %s", b, strings.ReplaceAll(c.config, "+", " + "))
		if c.static != "" && c.static != c.config {
			line += "; static table " + strings.ReplaceAll(c.static, "+", " + ")
		} else if c.static != "" {
			line += " (the static table's pick)"
		}
		fmt.Fprintln(w, wrap(line, TextWidth, "#     "))
		// tune moe --finalists: how each finalist read in fresh processes.
		var fin []string
		for _, o := range byBatch[b] {
			if o.freshUS > 0 {
				mark := ""
				if o.chosen {
					mark = " (chosen)"
				}
				fin = append(fin, fmt.Sprintf("%s %.1f µs, in the tuner %.1f%s", strings.ReplaceAll(o.config, "+", " + "), o.freshUS, o.latencyUS, mark))
			}
		}
		if len(fin) > 0 {
			fmt.Fprintln(w, wrap(fmt.Sprintf("# M=%s in fresh processes: %s", b, strings.Join(fin, "; ")), TextWidth, "#     "))
		}
	}
	for _, b := range tunedBatches {
		for _, c := range byBatch[b] {
			if c.reject != "" {
				fmt.Fprintln(w, units.Comment(fmt.Sprintf("M=%s rejected %s: %s", b, c.config, c.reject)))
			}
		}
	}
}
