package reports

import (
	"math"
	"testing"
)

func TestSweepNum(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{{0, "0"}, {0.99999, "1.00"}, {1, "1.00"}, {12.345, "12.35"}, {123.45, "123.5"}, {0.0123, "0.0123"}, {123456, "123456"}, {math.NaN(), "NaN"}} {
		if got := sweepNum(tc.v); got != tc.want {
			t.Errorf("sweepNum(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}
