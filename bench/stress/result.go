package stress

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/mstar-dev/mstar/reports/results"
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
func (s *Summary) Gates() []results.Gate {
	gate := func(name string, pass bool, format string, a ...any) results.Gate {
		g := results.Gate{Name: name, Pass: pass}
		if !pass {
			g.Reason = fmt.Sprintf(format, a...)
		}
		return g
	}
	left := s.LeftAfterSweep
	orderly := s.Options.KillRate == 0 && len(s.LeftBeforeSweep) > 0
	return []results.Gate{
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
func (s *Summary) Result() results.Result {
	o := s.Options
	var gbps, rate []float64
	for _, iv := range s.Interval {
		gbps = append(gbps, iv.GBps)
		rate = append(rate, iv.TensorsPerS)
	}
	one := func(name, unit string, better results.Direction, v float64) results.Metric {
		return results.Metric{Name: name, Unit: unit, Better: better, Samples: []float64{v}}
	}
	lower, higher := results.LowerIsBetter, results.HigherIsBetter
	metrics := []results.Metric{
		{Name: "throughput", Unit: "GB/s", Better: higher, Samples: gbps},
		{Name: "tensors_per_s", Unit: "tensors/s", Better: higher, Samples: rate},
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
		// What the run table says beside the figures above.
		one("elapsed", "s", lower, s.Elapsed.Seconds()),
		one("bytes", "bytes", higher, float64(s.Bytes)),
		one("copies", "copies", higher, float64(s.Received)),
		one("frag_fails", "failures", lower, float64(s.FragFails)),
		one("restarts", "workers", higher, float64(s.Restarts)),
		one("orphans_at_restart", "files", lower, float64(s.SweptAtStartup)),
		one("leaked_spill_files", "files", lower, float64(s.LeakedSpillFiles)),
		one("leftover_before_sweep", "files", lower, float64(len(s.LeftBeforeSweep))),
	)
	if len(s.Latencies) > 0 {
		metrics = append(metrics, one("latency_max", "us", lower, Percentile(s.Latencies, 100)),
			one("acked", "tensors", higher, float64(len(s.Latencies))))
	}
	what := o.Duration.String()
	if o.Count > 0 {
		what = fmt.Sprintf("%d tensors", o.Count)
	}
	r := results.Result{
		Name: "stress",
		Params: results.Params{
			"transport": string(o.Transport), "producers": fmt.Sprint(o.Producers), "consumers": fmt.Sprint(o.Consumers),
			"fanout": fmt.Sprint(o.Fanout), "sizes": fmt.Sprintf("%d-%d", o.MinSize, o.MaxSize),
			"kill_rate": fmt.Sprint(o.KillRate), "run": what,
		},
		Metrics: metrics,
		Gates:   s.Gates(),
	}
	if s.Stopped != "duration" && s.Stopped != "count" {
		r.Warnings = append(r.Warnings, StoppedWarning+stopReason(s.Stopped))
	}
	for _, e := range s.Errors {
		if len(r.Warnings) < 20 {
			r.Warnings = append(r.Warnings, e)
		}
	}
	return r
}

// StoppedWarning starts a result's warning saying why a run ended other
// than by its --duration or --count.
const StoppedWarning = "stopped: "

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
