package results

import (
	"math"
	"slices"

	"golang.org/x/perf/benchmath"
)

// Confidence is the confidence level of every interval mstar reports.
const Confidence = 0.95

// Summary is the median of a set of samples with its 95% confidence
// interval. With too few samples for an interval (fewer than 6 at 95%), Lo
// and Hi are -Inf and +Inf and Warning says how many are needed.
type Summary struct {
	Median, Lo, Hi float64
	N              int
	Warning        string `json:",omitempty"`
}

// Summarize computes the median and its 95% confidence interval, making no
// assumption about the distribution (benchmath.AssumeNothing, the same
// statistics as benchstat). samples is not modified. With no samples the
// median is NaN.
func Summarize(samples []float64) Summary {
	if len(samples) == 0 {
		return Summary{Median: math.NaN(), Lo: math.Inf(-1), Hi: math.Inf(1), Warning: "no samples"}
	}
	s := benchmath.AssumeNothing.Summary(NewSample(samples, 0), Confidence)
	out := Summary{Median: s.Center, Lo: s.Lo, Hi: s.Hi, N: len(samples)}
	if len(s.Warnings) > 0 {
		out.Warning = s.Warnings[0].Error()
	}
	return out
}

// NewSample copies samples (benchmath sorts in place) into a benchmath
// sample compared at alpha (0 for the default, 0.05).
func NewSample(samples []float64, alpha float64) *benchmath.Sample {
	t := benchmath.DefaultThresholds
	if alpha > 0 {
		t.CompareAlpha = alpha
	}
	return benchmath.NewSample(append([]float64(nil), samples...), &t)
}

// HalfWidthPct is the larger distance from the median to either end of the
// interval, as a percentage of the median, as benchstat prints it after
// "±". It is +Inf when the interval is unbounded and NaN when the median
// is zero or the interval straddles zero.
func (s Summary) HalfWidthPct() float64 {
	if math.IsInf(s.Lo, 0) || math.IsInf(s.Hi, 0) {
		return math.Inf(1)
	}
	if s.Median == 0 {
		if s.Lo == 0 && s.Hi == 0 {
			return 0
		}
		return math.NaN()
	}
	if math.Signbit(s.Lo) != math.Signbit(s.Median) || math.Signbit(s.Hi) != math.Signbit(s.Median) {
		return math.NaN()
	}
	return 100 * math.Max(s.Hi-s.Median, s.Median-s.Lo) / math.Abs(s.Median)
}

// Median is the middle of samples (the mean of the two middle ones for an
// even count), NaN for none; samples is not modified.
func Median(samples []float64) float64 {
	if len(samples) == 0 {
		return math.NaN()
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
