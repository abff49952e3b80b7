package reports

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
	"github.com/mstar-dev/mstar/scripts/peers"
)

// moeGateFacts reads what bench moe's correctness gate records beside the
// error: the slots computed, the experts they touched and the kernels that
// ran ("...(limit 0.01); 8 slots on 8 experts; cpu:forward-f32").
var moeGateFacts = regexp.MustCompile(`\); (\d+) slots on (\d+) experts; (.*)$`)

// moeStatic reads the static table's pick from a tuned batch's warning.
var moeStatic = regexp.MustCompile(`\(static table: ([^)]*)\)`)

// moeTable is bench moe's run table: nccl-tests-like, a commented header,
// one aligned row per batch, then each batch's kernels, stages and tuning.
func moeTable(w io.Writer, d *Document) error {
	// A merged document may hold runs of other shapes, routings or seeds:
	// a table each, so that no row sits under another run's header.
	if groups := moeRunGroups(d); len(groups) > 1 {
		for i, g := range groups {
			if i > 0 {
				fmt.Fprintln(w)
			}
			if err := moeTable(w, g); err != nil {
				return err
			}
		}
		return nil
	}
	var batches, stages, tuned []Result
	peered := false
	var ceil = map[string]Result{}
	for _, r := range d.Results {
		switch r.Name {
		case "moe":
			// The peers' rows (--peers) have a table of their own.
			if impl := r.Params["impl"]; impl != "" && impl != "mstar" {
				peered = true
				continue
			}
			batches = append(batches, r)
		case "moe_stage":
			stages = append(stages, r)
		case "moe_tune":
			tuned = append(tuned, r)
		case "ceiling":
			ceil[r.Params["what"]] = r
		}
	}
	var p Params
	if len(batches) > 0 {
		p = batches[0].Params
	} else if len(stages) > 0 {
		p = stages[0].Params
	}
	if p == nil {
		// Stopped before its first batch: no result names the shape, so
		// the command does.
		fmt.Fprintln(w, units.Comment("mstar bench moe: no batch finished ("+strings.Join(d.Command, " ")+")"))
	} else {
		fmt.Fprintln(w, units.Comment(fmt.Sprintf("mstar bench moe: %s, local shape E%s k%s H%s I%s (tp %s, ep %s)",
			p["model"], p["experts"], p["topk"], p["hidden"], p["inter"], p["tp"], p["ep"])))
		fmt.Fprintln(w, units.Comment(fmt.Sprintf("routing %s, seed %s", p["routing"], p["seed"])))
	}
	fmt.Fprintln(w, units.Comment("device "+deviceLine(d)))
	fmt.Fprintln(w, units.Comment(fmt.Sprintf("ceilings: read %s, d2d %s, gemm %s", ceilingText(ceil["read"]), ceilingText(ceil["d2d"]), ceilingText(ceil["gemm"]))))
	for _, warn := range d.Warnings {
		writeWarning(w, warn)
	}
	fmt.Fprintln(w, "#")
	// One space between columns: two take the table past 100 columns.
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', tabwriter.AlignRight)
	io.WriteString(tw, "#\tbatch\tslots\texperts\tlatency(us)\t±95%\tTFLOP/s\tGB/s\t%bw\t%compute\t%floor\trel_l2\tgate\t\n")
	kernels := make([]string, len(batches))
	for i, r := range batches {
		gate, slots, touched := "pass", "?", "?"
		if g := gateNamed(&r, "correctness"); g != nil {
			if !g.Pass {
				gate = "FAIL"
			}
			if m := moeGateFacts.FindStringSubmatch(g.Reason); m != nil {
				slots, touched, kernels[i] = m[1], m[2], m[3]
			}
		}
		lat := summaryOf(&r, "latency")
		rel := math.NaN()
		if m := r.Metric("rel_l2"); m != nil && m.Measured() {
			rel = m.Samples[0]
		}
		fmt.Fprintf(tw, "\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%.2g\t%s\t\n",
			r.Params["batch"], slots, touched, lat.Median, ciText(lat), dashIfNaN(medianOf(&r, "throughput")), dashIfNaN(medianOf(&r, "bandwidth")),
			pctText(medianOf(&r, "pct_bw_ceiling")), pctText(medianOf(&r, "pct_compute_ceiling")), pctText(medianOf(&r, "pct_floor")), rel, gate)
	}
	tw.Flush()
	fmt.Fprintln(w, "#")
	// The configuration file is usually one for every batch: name it once.
	const from = "; config from "
	source := ""
	for i, k := range kernels {
		_, src, ok := strings.Cut(k, from)
		if !ok || (i > 0 && src != source) {
			source = ""
			break
		}
		source = src
	}
	if source != "" {
		fmt.Fprintln(w, units.Comment(fmt.Sprintf("kernels (configurations from %s):", source)))
	}
	for i, r := range batches {
		k := kernels[i]
		if source != "" {
			k = strings.TrimSuffix(k, from+source)
		}
		fmt.Fprintln(w, units.Comment(fmt.Sprintf("M=%s kernels: %s", r.Params["batch"], k)))
	}
	for _, b := range batches {
		var rows []Result
		for _, s := range stages {
			if s.Params["batch"] == b.Params["batch"] {
				rows = append(rows, s)
			}
		}
		if len(rows) == 0 {
			continue
		}
		how := "their kernels timed alone"
		if strings.HasPrefix(rows[0].Params["kernel"], "cpu:") {
			how = "each timed within further passes"
		}
		fmt.Fprintln(w, "#")
		fmt.Fprintln(w, units.Comment(fmt.Sprintf("M=%s stages, %s (a GEMM's %%floor is of its own bytes and flops):", b.Params["batch"], how)))
		// The kernel, last, is left to run on after the aligned columns:
		// a fused kernel's long name wraps under itself.
		var aligned strings.Builder
		tw := tabwriter.NewWriter(&aligned, 0, 4, 1, ' ', tabwriter.AlignRight)
		io.WriteString(tw, "#\tstage\tlatency(us)\t±95%\tshare\tTFLOP/s\tGB/s\t%floor\t\t\n")
		kernels := []string{"kernel"}
		for _, s := range rows {
			lat := summaryOf(&s, "latency")
			share := "-"
			if v := medianOf(&s, "pct_of_pass"); !math.IsNaN(v) {
				share = fmt.Sprintf("%.0f%%", v)
			}
			fmt.Fprintf(tw, "\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t\t\n", s.Params["stage"], lat.Median, ciText(lat), share,
				dashIfNaN(medianOf(&s, "throughput")), dashIfNaN(medianOf(&s, "bandwidth")), pctText(medianOf(&s, "pct_floor")))
			kernels = append(kernels, s.Params["kernel"])
		}
		tw.Flush()
		writeTails(w, aligned.String(), kernels)
	}
	for _, b := range batches {
		var cands []Result
		for _, t := range tuned {
			if t.Params["batch"] == b.Params["batch"] {
				cands = append(cands, t)
			}
		}
		if len(cands) == 0 {
			continue
		}
		static := "?"
		for _, warn := range b.Warnings {
			if m := moeStatic.FindStringSubmatch(warn); m != nil {
				static = m[1]
			}
		}
		fmt.Fprintln(w, "#")
		fmt.Fprintln(w, units.Comment(fmt.Sprintf("M=%s tuned (static table: %s):", b.Params["batch"], static)))
		for _, c := range cands {
			// A split configuration is two halves: the first on a line
			// of its own, so that the rows keep within 100 columns.
			name := c.Params["config"]
			if a, b, ok := strings.Cut(name, "+"); ok && len(name) > tuneConfigWidth {
				fmt.Fprintf(w, "#   %s +\n", a)
				name = "  " + b
			}
			reject, chosen := "", false
			for _, warn := range c.Warnings {
				if r, ok := strings.CutPrefix(warn, "rejected: "); ok {
					reject = r
				}
				chosen = chosen || strings.HasPrefix(warn, "chosen: ")
			}
			if reject != "" {
				fmt.Fprintln(w, wrap(fmt.Sprintf("#   %-*s rejected: %s", tuneConfigWidth, name, reject), TextWidth, "#       "))
				continue
			}
			mark := ""
			if chosen {
				mark = " <- chosen"
			}
			rel := math.NaN()
			if m := c.Metric("rel_l2"); m != nil && m.Measured() {
				rel = m.Samples[0]
			}
			fmt.Fprintln(w, wrap(fmt.Sprintf("#   %-*s %9.1f us rel_l2 %.2g%s", tuneConfigWidth, name, medianOf(&c, "tune_latency"), rel, mark), TextWidth, "#       "))
		}
	}
	if peered {
		fmt.Fprintf(w, "#\n# mstar against its peers, same layer, weights and routing (µs, median):\n")
		peers.Compare(d.Results).Render(w)
	}
	return nil
}

// tuneConfigWidth is the column of a candidate's configuration in the
// tuned batches' lists (a plain tc configuration fits).
const tuneConfigWidth = 58

func gateNamed(r *Result, name string) *Gate {
	for i := range r.Gates {
		if r.Gates[i].Name == name {
			return &r.Gates[i]
		}
	}
	return nil
}

// summaryOf summarizes a metric's samples (NaN median when unmeasured).
func summaryOf(r *Result, metric string) Summary {
	if m := r.Metric(metric); m != nil && m.Measured() {
		return results.Summarize(m.Samples)
	}
	return Summary{Median: math.NaN(), Lo: math.NaN(), Hi: math.NaN()}
}

// medianOf is a metric's median, NaN when it is missing or unmeasured.
func medianOf(r *Result, metric string) float64 {
	if m := r.Metric(metric); m != nil && m.Measured() {
		return results.Median(m.Samples)
	}
	return math.NaN()
}

// ceilingText is a ceiling result's median and unit, or why it is
// unmeasured.
func ceilingText(r Result) string {
	if len(r.Metrics) == 0 {
		return "unmeasured (not in the document)"
	}
	m := r.Metrics[0]
	if !m.Measured() {
		return "unmeasured (" + m.Unmeasured + ")"
	}
	return fmt.Sprintf("%s %s", FormatValue(results.Median(m.Samples)), m.Unit)
}

// dashIfNaN formats a value, "-" where it does not apply.
func dashIfNaN(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return FormatValue(v)
}

func pctText(p float64) string {
	if math.IsNaN(p) {
		return "-"
	}
	return strconv.FormatFloat(p, 'f', 1, 64)
}

// writeWarning prints a run table's "# warning:" line, wrapped at 100
// columns, each line of warn and each wrap continued under "#   ".
func writeWarning(w io.Writer, warn string) {
	for i, l := range strings.Split(warn, "\n") {
		lead := "# warning: "
		if i > 0 {
			lead = "#   "
		}
		fmt.Fprintln(w, wrap(lead+l, TextWidth, "#   "))
	}
}

// moeHeaderParams are the parameters bench moe's table header states once.
var moeHeaderParams = []string{"model", "experts", "topk", "hidden", "inter", "tp", "ep", "routing", "seed"}

// moeRunGroups splits d by its results' header parameters, in order of first
// appearance: one document when they agree (a run, or its shards merged).
// Each group keeps the ceilings of its own runs (all of them when the
// ceilings name no run of the group) and the first keeps d's warnings.
func moeRunGroups(d *Document) []*Document {
	key := func(r *Result) string {
		var b strings.Builder
		for _, k := range moeHeaderParams {
			b.WriteString(r.Params[k] + "\x00")
		}
		return b.String()
	}
	var order []string
	members := map[string][]Result{}
	runs := map[string]map[string]bool{}
	var ceilings, other []Result
	for _, r := range d.Results {
		switch r.Name {
		case "moe", "moe_stage", "moe_tune":
			k := key(&r)
			if _, ok := members[k]; !ok {
				order = append(order, k)
				runs[k] = map[string]bool{}
			}
			members[k] = append(members[k], r)
			runs[k][r.Run] = true
		case "ceiling":
			ceilings = append(ceilings, r)
		default:
			other = append(other, r)
		}
	}
	if len(order) < 2 {
		return nil
	}
	out := make([]*Document, len(order))
	for i, k := range order {
		sub := *d
		sub.Results = members[k]
		var own []Result
		for _, c := range ceilings {
			if runs[k][c.Run] {
				own = append(own, c)
			}
		}
		if len(own) == 0 {
			own = ceilings
		}
		sub.Results = append(sub.Results, own...)
		if i == 0 {
			sub.Results = append(sub.Results, other...)
		} else {
			sub.Warnings = nil
		}
		out[i] = &sub
	}
	return out
}
