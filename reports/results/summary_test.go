package results

import (
	"math"
	"slices"
	"testing"
)

func TestSummarize(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name    string
		samples []float64
		want    Summary
	}{
		// For n=10 the 95% CI of the median is [x(2), x(9)] (98% actual).
		{"ten", []float64{7, 3, 10, 1, 5, 9, 2, 8, 6, 4}, Summary{Median: 5.5, Lo: 2, Hi: 9, N: 10}},
		{"six is the least with an interval", []float64{6, 1, 2, 3, 4, 5}, Summary{Median: 3.5, Lo: 1, Hi: 6, N: 6}},
		{"five has none", []float64{5, 1, 2, 3, 4}, Summary{Median: 3, Lo: -inf, Hi: 5, N: 5,
			Warning: "need >= 6 samples for confidence interval at level 0.95"}},
		{"one", []float64{42}, Summary{Median: 42, Lo: -inf, Hi: inf, N: 1,
			Warning: "need >= 6 samples for confidence interval at level 0.95"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.samples)
			got := Summarize(in)
			if got != tc.want {
				t.Errorf("Summarize(%v) (-want +got):\n-%+v\n+%+v", tc.samples, tc.want, got)
			}
			if !slices.Equal(in, tc.samples) {
				t.Errorf("Summarize reordered its input: %v", in)
			}
		})
	}
	if s := Summarize(nil); !math.IsNaN(s.Median) || s.N != 0 || s.Warning == "" {
		t.Errorf("Summarize(nil) = %+v, want NaN median, N 0 and a warning", s)
	}
}

func TestHalfWidthPct(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name string
		s    Summary
		want float64 // NaN matches NaN
	}{
		{"symmetric", Summary{Median: 100, Lo: 98, Hi: 102}, 2},
		{"wider above", Summary{Median: 100, Lo: 99, Hi: 105}, 5},
		{"wider below", Summary{Median: 100, Lo: 90, Hi: 101}, 10},
		{"negative", Summary{Median: -100, Lo: -110, Hi: -95}, 10},
		{"unbounded", Summary{Median: 1, Lo: -inf, Hi: inf}, inf},
		{"straddles zero", Summary{Median: 1, Lo: -1, Hi: 2}, math.NaN()},
		{"all zero", Summary{}, 0},
	} {
		got := tc.s.HalfWidthPct()
		if !(got == tc.want || math.IsNaN(got) && math.IsNaN(tc.want)) && math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: HalfWidthPct(%+v) = %v, want %v", tc.name, tc.s, got, tc.want)
		}
	}
}
