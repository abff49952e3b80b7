package reports

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/mstar-dev/mstar/internal/units"
)

// stressTable is arena stress's run table: per transport, the end-of-run
// summary and its gates; with two transports, how they compare.
func stressTable(w io.Writer, d *Document) error {
	var runs []Result
	for _, r := range d.Results {
		if r.Name == "stress" {
			runs = append(runs, r)
		}
	}
	for i := range runs {
		fmt.Fprintln(w, units.Comment("arena stress: transport "+runs[i].Params["transport"]))
		if err := stressSummary(w, &runs[i]); err != nil {
			return err
		}
	}
	if len(runs) == 2 {
		a, b := &runs[0], &runs[1]
		if one(b, "delivered") > 0 && one(a, "elapsed") > 0 && one(b, "elapsed") > 0 {
			r0 := one(a, "delivered") / one(a, "elapsed")
			r1 := one(b, "delivered") / one(b, "elapsed")
			fmt.Fprintf(w, "# %s vs %s: %.2fx the tensors/s, %.2fx the GB/s\n", a.Params["transport"], b.Params["transport"],
				r0/r1, (one(a, "bytes")/one(a, "elapsed"))/(one(b, "bytes")/one(b, "elapsed")))
		}
	}
	return nil
}

// one is a single-sample metric's value, 0 when it is missing.
func one(r *Result, metric string) float64 {
	if m := r.Metric(metric); m != nil && len(m.Samples) > 0 {
		return m.Samples[0]
	}
	return 0
}

func stressSummary(w io.Writer, r *Result) error {
	p := r.Params
	n := func(metric string) int64 { return int64(one(r, metric)) }
	secs := one(r, "elapsed")
	lo, hi, _ := strings.Cut(p["sizes"], "-")
	minSize, _ := strconv.ParseInt(lo, 10, 64)
	maxSize, _ := strconv.ParseInt(hi, 10, 64)
	producers, _ := strconv.Atoi(p["producers"])
	consumers, _ := strconv.Atoi(p["consumers"])
	stopped := "--duration reached"
	if strings.HasSuffix(p["run"], " tensors") {
		stopped = "--count reached"
	}
	for _, warn := range r.Warnings {
		if s, ok := strings.CutPrefix(warn, "stopped: "); ok {
			stopped = s
		}
	}
	// A long value wraps under itself, clear of the names.
	var aligned strings.Builder
	tw := tabwriter.NewWriter(&aligned, 0, 0, 2, ' ', 0)
	var vals []string
	line := func(k, format string, a ...any) {
		fmt.Fprintf(tw, "%s\t\n", k)
		vals = append(vals, fmt.Sprintf(format, a...))
	}
	line("transport", "%s, %s x %s, fan-out %s, sizes %s-%s log-uniform", p["transport"], units.Plural(producers, "producer"),
		units.Plural(consumers, "consumer"), p["fanout"], units.Bytes(minSize), units.Bytes(maxSize))
	line("run", "%.1fs (%s), kill rate %s", secs, stopped, p["kill_rate"])
	line("delivered", "%d tensors (%.1f tensors/s), %d abandoned by a killed consumer, %d lost with a killed producer",
		n("delivered"), one(r, "delivered")/secs, n("abandoned"), n("lost"))
	line("throughput", "%.3f GB/s copied out by consumers (%d copies, %s)", one(r, "bytes")/secs/1e9, n("copies"), units.Bytes(n("bytes")))
	if r.Metric("latency_max") != nil {
		line("send->ack latency", "p50 %s, p99 %s, max %s (%d tensors)", usText(one(r, "latency_p50")), usText(one(r, "latency_p99")),
			usText(one(r, "latency_max")), n("acked"))
	}
	line("spills", "%d (fragmentation failures %d, peak fragmentation %.1f%%)", n("spills"), n("frag_fails"), one(r, "peak_frag"))
	line("kills", "%d SIGKILLs, %d restarts; orphans reclaimed: %d by restarted producers, %d by the final sweep",
		n("kills"), n("restarts"), n("orphans_at_restart"), n("orphans_swept")-n("orphans_at_restart"))
	line("corrupted payloads", "%d", n("corrupted"))
	line("leaked slots", "%d slots, %d spill files", n("leaked_slots"), n("leaked_spill_files"))
	line("leftover files", "%d before the sweep, %d after", n("leftover_before_sweep"), n("leftover_files"))
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeTails(w, aligned.String(), vals); err != nil {
		return err
	}
	for _, g := range r.Gates {
		mark := "PASS"
		if !g.Pass {
			mark = "FAIL"
		}
		text := fmt.Sprintf("%s  %s", mark, g.Name)
		if g.Reason != "" {
			text += ": " + g.Reason
		}
		if _, err := fmt.Fprintln(w, wrap(text, TextWidth, "      ")); err != nil {
			return err
		}
	}
	return nil
}

func usText(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2f s", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.2f ms", v/1e3)
	}
	return fmt.Sprintf("%.0f us", v)
}
