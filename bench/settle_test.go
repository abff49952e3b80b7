package bench

import (
	"strings"
	"testing"
	"time"
)

// The warm-up of the issue (mixtral M=16 on the CPU: 890, 803, 591, 257,
// then ~190 ms) must not end while the calls still get faster, and must end
// once they stopped.
func TestSettlerWaitsForTheTimingToStopImproving(t *testing.T) {
	calls := []float64{0.890, 0.803, 0.591, 0.257, 0.192, 0.190, 0.191, 0.189, 0.190, 0.191}
	s := NewSettler(Settle{})
	done := -1
	for i, c := range calls {
		if s.Add(c) {
			done = i
			break
		}
	}
	// Window 3: [0.191 0.189 0.190] (median 0.190) against [0.257 0.192
	// 0.190] (median 0.192) is the first pair of windows without a 5%
	// improvement.
	if done != 8 {
		t.Fatalf("warm-up ended after call %d, want 8 (times %v)", done, s.Times())
	}
	if !s.Settled() || !strings.HasPrefix(s.Note(), "settled after 9 calls") {
		t.Errorf("note %q, settled %v", s.Note(), s.Settled())
	}
}

// A GPU that slows as it reaches its power cap (the H200's GEMM: ~790
// TFLOP/s first, ~690 sustained) has not settled while it slows.
func TestSettlerWaitsForAPowerCap(t *testing.T) {
	calls := []float64{1.00, 1.00, 1.01, 1.08, 1.14, 1.15, 1.14, 1.15, 1.15, 1.14}
	s := NewSettler(Settle{})
	done := -1
	for i, c := range calls {
		if s.Add(c) {
			done = i
			break
		}
	}
	// [1.14 1.15 1.15] against [1.08 1.14 1.15] (medians 1.15, 1.14): the
	// first windows within 5% of each other; a rule that only waited for
	// the calls to stop getting faster would have stopped at the third.
	if done != 8 {
		t.Fatalf("warm-up ended after call %d, want 8 (times %v)", done, s.Times())
	}
}

func TestSettlerMinCallsAndMaxTime(t *testing.T) {
	s := NewSettler(Settle{MinCalls: 10})
	for i := 0; i < 9; i++ {
		if s.Add(1) {
			t.Fatalf("ended after %d calls, before MinCalls 10", i+1)
		}
	}
	if !s.Add(1) {
		t.Error("flat timing at MinCalls did not settle")
	}
	// A warm-up that keeps improving ends at MaxTime, saying so.
	s = NewSettler(Settle{MaxTime: time.Nanosecond})
	time.Sleep(time.Millisecond)
	if !s.Add(5) || s.Settled() || !strings.Contains(s.Note(), "not settled") {
		t.Errorf("MaxTime passed: note %q settled %v", s.Note(), s.Settled())
	}
}

// Time and TimeWall keep warming up past Warmup until the timing settles:
// with a flat workload that is 2 windows of calls, more than Warmup 1.
func TestTimeWallSettles(t *testing.T) {
	n := 0
	samples, err := TimeWall(Timing{Warmup: 1, Samples: 2, Settle: &Settle{}}, func() error { n++; return nil })
	if err != nil || len(samples) != 2 {
		t.Fatal(err, samples)
	}
	if n < 1+6+2 {
		t.Errorf("%d calls; want at least 1 warm-up, 6 settling and 2 samples", n)
	}
}
