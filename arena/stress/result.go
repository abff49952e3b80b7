package stress

import (
	"fmt"
	"github.com/mstar-dev/mstar/internal/units"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/mstar-dev/mstar/reports"
)

// Percentile returns the p-th percentile (0-100) of xs by nearest rank, or
// NaN when xs is empty.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// MaxLatencySamples bounds the latency samples a result keeps: a long run
// measures hundreds of thousands. Beyond it an evenly strided subset (in
// time order) is kept; latency_p50 and latency_p99 come from all of them.
const MaxLatencySamples = 20000

func thin(xs []float64, n int) []float64 {
	if len(xs) <= n {
		return xs
	}
	out := make([]float64, 0, n)
	for i := range n {
		out = append(out, xs[i*len(xs)/n])
	}
	return out
}

// Gates are the run's pass/fail checks.
func (s *Summary) Gates() []reports.Gate {
	gate := func(name string, pass bool, format string, a ...any) reports.Gate {
		g := reports.Gate{Name: name, Pass: pass}
		if !pass {
			g.Reason = fmt.Sprintf(format, a...)
		}
		return g
	}
	left := s.LeftAfterSweep
	orderly := s.Options.KillRate == 0 && len(s.LeftBeforeSweep) > 0
	return []reports.Gate{
		gate("no corrupted payloads", s.Corrupt == 0, "%d payloads failed their checksum or header", s.Corrupt),
		gate("no leaked slots", s.LeakedSlots == 0 && s.LeakedSpillFiles == 0, "%d slots and %d spill files still live when the producers stopped", s.LeakedSlots, s.LeakedSpillFiles),
		gate("no leftover files", len(left) == 0 && !orderly, "%s", leftReason(s, orderly)),
		gate("no read errors", s.ReadErrors == 0, "%d descriptors from live producers could not be read", s.ReadErrors),
		gate("no unexpected worker exits", len(s.Unexpected) == 0, "%s", strings.Join(s.Unexpected, "; ")),
		gate("tensors delivered", s.Delivered > 0, "no tensor was delivered"),
	}
}

func leftReason(s *Summary, orderly bool) string {
	if len(s.LeftAfterSweep) > 0 {
		return fmt.Sprintf("%d files left after the sweep: %s", len(s.LeftAfterSweep), clipList(s.LeftAfterSweep))
	}
	if orderly {
		return fmt.Sprintf("no worker was killed, yet %d files were left for the sweep: %s", len(s.LeftBeforeSweep), clipList(s.LeftBeforeSweep))
	}
	return ""
}

func clipList(xs []string) string {
	if len(xs) > 5 {
		return strings.Join(xs[:5], ", ") + fmt.Sprintf(" and %d more", len(xs)-5)
	}
	return strings.Join(xs, ", ")
}

// Result is the run as one results-document result: every interval's
// rates and every latency as samples, the counts as single samples, and
// the gates.
func (s *Summary) Result() reports.Result {
	o := s.Options
	var gbps, rate []float64
	for _, iv := range s.Interval {
		gbps = append(gbps, iv.GBps)
		rate = append(rate, iv.TensorsPerS)
	}
	one := func(name, unit string, better reports.Direction, v float64) reports.Metric {
		return reports.Metric{Name: name, Unit: unit, Better: better, Samples: []float64{v}}
	}
	lower, higher := reports.LowerIsBetter, reports.HigherIsBetter
	metrics := []reports.Metric{
		{Name: "throughput", Unit: "GB/s", Better: higher, Samples: gbps},
		{Name: "tensors_per_s", Unit: "tensors/s", Better: higher, Samples: rate, DerivedFrom: "throughput"}, // the same intervals, counted in tensors
		{Name: "latency", Unit: "us", Better: lower, Samples: thin(s.Latencies, MaxLatencySamples)},
	}
	if len(s.Latencies) > 0 {
		metrics = append(metrics,
			one("latency_p50", "us", lower, Percentile(s.Latencies, 50)),
			one("latency_p99", "us", lower, Percentile(s.Latencies, 99)))
	} else {
		metrics[2].Unmeasured = "no tensor was delivered"
	}
	if len(gbps) == 0 {
		metrics[0].Unmeasured = "the run was shorter than one interval"
		metrics[1].Unmeasured = metrics[0].Unmeasured
	}
	metrics = append(metrics,
		one("delivered", "tensors", higher, float64(s.Delivered)),
		one("abandoned", "tensors", lower, float64(s.Abandoned)),
		one("spills", "tensors", lower, float64(s.Spills)),
		one("peak_frag", "%", lower, 100*s.PeakFrag),
		one("corrupted", "payloads", lower, float64(s.Corrupt)),
		one("leaked_slots", "slots", lower, float64(s.LeakedSlots)),
		one("leftover_files", "files", lower, float64(len(s.LeftAfterSweep))),
		one("lost", "tensors", lower, float64(s.Lost)),
		one("kills", "workers", higher, float64(s.Kills)),
		one("orphans_swept", "files", lower, float64(len(s.Swept.Removed)+s.SweptAtStartup)),
	)
	what := o.Duration.String()
	if o.Count > 0 {
		what = fmt.Sprintf("%d tensors", o.Count)
	}
	r := reports.Result{
		Name: "stress",
		Params: reports.Params{
			"transport": string(o.Transport), "producers": fmt.Sprint(o.Producers), "consumers": fmt.Sprint(o.Consumers),
			"fanout": fmt.Sprint(o.Fanout), "sizes": fmt.Sprintf("%d-%d", o.MinSize, o.MaxSize),
			"kill_rate": fmt.Sprint(o.KillRate), "run": what,
		},
		Metrics: metrics,
		Gates:   s.Gates(),
	}
	for _, e := range s.Errors {
		if len(r.Warnings) < 20 {
			r.Warnings = append(r.Warnings, e)
		}
	}
	return r
}

// stopReason says why a run ended (Summary.Stopped) in words.
func stopReason(stopped string) string {
	switch stopped {
	case "duration":
		return "--duration reached"
	case "count":
		return "--count reached"
	case "count sent":
		return "--count sent, but not all delivered: deliveries stopped"
	}
	return stopped
}

// plural is "1 producer", "4 producers".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// WriteSummary prints the end-of-run summary and the gates.
func (s *Summary) WriteSummary(w io.Writer) error {
	o := s.Options
	secs := s.Elapsed.Seconds()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, a...)) }
	p("transport", "%s, %s x %s, fan-out %d, sizes %s-%s log-uniform", o.Transport, plural(o.Producers, "producer"), plural(o.Consumers, "consumer"), o.Fanout, units.Bytes(o.MinSize), units.Bytes(o.MaxSize))
	p("run", "%.1fs (%s), kill rate %v", secs, stopReason(s.Stopped), o.KillRate)
	p("delivered", "%d tensors (%.1f tensors/s), %d abandoned by a killed consumer, %d lost with a killed producer", s.Delivered, float64(s.Delivered)/secs, s.Abandoned, s.Lost)
	p("throughput", "%.3f GB/s copied out by consumers (%d copies, %s)", float64(s.Bytes)/secs/1e9, s.Received, units.Bytes(s.Bytes))
	if len(s.Latencies) > 0 {
		p("send->ack latency", "p50 %s, p99 %s, max %s (%d tensors)", us(Percentile(s.Latencies, 50)), us(Percentile(s.Latencies, 99)), us(Percentile(s.Latencies, 100)), len(s.Latencies))
	}
	p("spills", "%d (fragmentation failures %d, peak fragmentation %.1f%%)", s.Spills, s.FragFails, 100*s.PeakFrag)
	p("kills", "%d SIGKILLs, %d restarts; orphans reclaimed: %d by restarted producers, %d by the final sweep", s.Kills, s.Restarts, s.SweptAtStartup, len(s.Swept.Removed))
	p("corrupted payloads", "%d", s.Corrupt)
	p("leaked slots", "%d slots, %d spill files", s.LeakedSlots, s.LeakedSpillFiles)
	p("leftover files", "%d before the sweep, %d after", len(s.LeftBeforeSweep), len(s.LeftAfterSweep))
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, g := range s.Gates() {
		mark := "PASS"
		if !g.Pass {
			mark = "FAIL"
		}
		line := fmt.Sprintf("%s  %s", mark, g.Name)
		if g.Reason != "" {
			line += ": " + g.Reason
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

func us(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2f s", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.2f ms", v/1e3)
	}
	return fmt.Sprintf("%.0f us", v)
}
