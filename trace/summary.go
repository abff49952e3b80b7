package trace

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mstar-dev/mstar/internal/units"
)

// Quantiles of a set of values (microseconds here). N is how many values
// they were computed from; with N = 0 they are unmeasured, not zero.
type Quantiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func quantiles(v []float64) Quantiles {
	if len(v) == 0 {
		return Quantiles{}
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	at := func(q float64) float64 {
		// Nearest rank: a percentile is a value that was observed.
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return Quantiles{N: len(s), P50: at(0.50), P99: at(0.99), Max: s[len(s)-1]}
}

func (q Quantiles) String() string {
	if q.N == 0 {
		return "unmeasured"
	}
	return fmt.Sprintf("p50 %s  p99 %s  max %s", fmtUS(q.P50), fmtUS(q.P99), fmtUS(q.Max))
}

func fmtUS(us float64) string {
	return time.Duration(us * float64(time.Microsecond)).Round(time.Microsecond).String()
}

// SessionSummary describes one session of a trace.
type SessionSummary struct {
	Session string `json:"session"`
	Records int    `json:"records"` // kept in the file
	// Ticks counts kept and suppressed records: the ticks the session ran.
	Ticks      int64         `json:"ticks"`
	Suppressed int64         `json:"suppressed"`
	Span       time.Duration `json:"span_ns"`
	Cost       Quantiles     `json:"cost_us"` // over the kept records
	Overruns   int           `json:"overruns"`
	// Jitter is |effective interval − target| over the kept records that
	// have an interval.
	Jitter      Quantiles                `json:"jitter_us"`
	Interval    Quantiles                `json:"interval_us"`
	TimePerRung map[string]time.Duration `json:"time_per_rung_ns"`
	RungChanges int                      `json:"rung_changes"`
	// Flaps are changes that undo the previous change after a dwell shorter
	// than FlapWindow.
	Flaps      int           `json:"flaps"`
	FlapWindow time.Duration `json:"flap_window_ns"`
	// MaxChangesPerCooldown is the most rung changes inside any window of one
	// cooldown; 0 with Cooldown 0 when the trace does not say its cooldown.
	Cooldown              time.Duration `json:"cooldown_ns"`
	MaxChangesPerCooldown int           `json:"max_changes_per_cooldown"`
	PeakHostTail          int64         `json:"peak_host_tail_bytes"`
	MinHeadroom           float64       `json:"min_headroom"`
	BytesMoved            int64         `json:"bytes_moved"` // by the kept records
}

// Summary is a whole trace.
type Summary struct {
	Sessions []SessionSummary `json:"sessions"`
	Bad      []BadLine        `json:"bad_lines,omitempty"`
}

// SummaryOptions tune Summarize.
type SummaryOptions struct {
	// FlapWindow overrides the flap window; zero means twice the cooldown the
	// records carry, or one second when they carry none.
	FlapWindow time.Duration
}

// Summarize summarises a trace per session, sessions sorted by name.
func Summarize(f *File, opt SummaryOptions) Summary {
	by := map[string][]Record{}
	for _, r := range f.Records {
		by[r.Session] = append(by[r.Session], r)
	}
	out := Summary{Bad: f.Bad}
	for name, recs := range by {
		out.Sessions = append(out.Sessions, summarizeSession(name, recs, opt))
	}
	sort.Slice(out.Sessions, func(i, j int) bool { return out.Sessions[i].Session < out.Sessions[j].Session })
	return out
}

func summarizeSession(name string, recs []Record, opt SummaryOptions) SessionSummary {
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Tick < recs[j].Tick })
	s := SessionSummary{Session: name, Records: len(recs), TimePerRung: map[string]time.Duration{}, MinHeadroom: math.Inf(1)}
	var costs, jitter, intervals []float64
	var changes []time.Time
	for i, r := range recs {
		s.Suppressed += r.Suppressed
		costs = append(costs, r.CostUS)
		if r.Overrun() {
			s.Overruns++
		}
		if r.IntervalUS != nil {
			intervals = append(intervals, *r.IntervalUS)
			if r.TargetUS > 0 {
				jitter = append(jitter, math.Abs(*r.IntervalUS-r.TargetUS))
			}
		}
		s.PeakHostTail = max(s.PeakHostTail, r.HostTail)
		s.MinHeadroom = math.Min(s.MinHeadroom, r.Headroom)
		s.BytesMoved += r.Moved
		if c := time.Duration(r.CooldownUS * float64(time.Microsecond)); c > s.Cooldown {
			s.Cooldown = c
		}
		if i > 0 {
			p := recs[i-1]
			s.TimePerRung[RungName(p.Rung)] += r.Time.Sub(p.Time)
			if r.Rung != p.Rung {
				s.RungChanges++
				changes = append(changes, r.Time)
			}
		}
	}
	s.Ticks = int64(len(recs)) + s.Suppressed
	if len(recs) > 0 {
		s.Span = recs[len(recs)-1].Time.Sub(recs[0].Time)
		// The last record's rung holds for one interval past its tick.
		last := recs[len(recs)-1]
		s.TimePerRung[RungName(last.Rung)] += time.Duration(last.TargetUS * float64(time.Microsecond))
	} else {
		s.MinHeadroom = math.NaN()
	}
	s.Cost, s.Jitter, s.Interval = quantiles(costs), quantiles(jitter), quantiles(intervals)

	s.FlapWindow = opt.FlapWindow
	if s.FlapWindow == 0 {
		s.FlapWindow = time.Second
		if s.Cooldown > 0 {
			s.FlapWindow = 2 * s.Cooldown
		}
	}
	// A flap: A→B, then B→A within the window.
	prevFrom, prevTo, prevAt := -1, -1, time.Time{}
	for i := 1; i < len(recs); i++ {
		from, to := recs[i-1].Rung, recs[i].Rung
		if from == to {
			continue
		}
		if prevFrom == to && prevTo == from && recs[i].Time.Sub(prevAt) < s.FlapWindow {
			s.Flaps++
		}
		prevFrom, prevTo, prevAt = from, to, recs[i].Time
	}
	if s.Cooldown > 0 {
		s.MaxChangesPerCooldown = maxInWindow(changes, s.Cooldown)
	}
	return s
}

// maxInWindow is the most times inside any half-open window [t, t+w).
func maxInWindow(ts []time.Time, w time.Duration) int {
	best, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// WriteText renders a summary for a person.
func (s Summary) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, ss := range s.Sessions {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintf(tw, "session\t%s\n", ss.Session)
		fmt.Fprintf(tw, "ticks\t%d (%d kept, %d suppressed by the throttle) over %s\n", ss.Ticks, ss.Records, ss.Suppressed, ss.Span.Round(time.Millisecond))
		fmt.Fprintf(tw, "tick cost\t%s  (kept ticks; %d overran the interval)\n", ss.Cost, ss.Overruns)
		fmt.Fprintf(tw, "interval\t%s\n", ss.Interval)
		fmt.Fprintf(tw, "interval jitter\t%s\n", ss.Jitter)
		var rungs []string
		for r := 0; r < NumRungs; r++ {
			if d, ok := ss.TimePerRung[RungName(r)]; ok {
				rungs = append(rungs, fmt.Sprintf("%s %s", RungName(r), d.Round(time.Millisecond)))
			}
		}
		fmt.Fprintf(tw, "time per rung\t%s\n", strings.Join(rungs, ", "))
		per := "cooldown not recorded"
		if ss.Cooldown > 0 {
			per = fmt.Sprintf("at most %d per cooldown of %s", ss.MaxChangesPerCooldown, ss.Cooldown)
		}
		fmt.Fprintf(tw, "rung changes\t%d (%s)\n", ss.RungChanges, per)
		fmt.Fprintf(tw, "flaps\t%d (reversal within %s)\n", ss.Flaps, ss.FlapWindow)
		fmt.Fprintf(tw, "peak host tail\t%s\n", units.Bytes(ss.PeakHostTail))
		if !math.IsNaN(ss.MinHeadroom) {
			fmt.Fprintf(tw, "min headroom\t%.3f\n", ss.MinHeadroom)
		}
		fmt.Fprintf(tw, "bytes moved\t%s (kept ticks)\n", units.Bytes(ss.BytesMoved))
	}
	if len(s.Sessions) == 0 {
		fmt.Fprintln(tw, "no records")
	}
	return tw.Flush()
}
