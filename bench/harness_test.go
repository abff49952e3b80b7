package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
)

func TestTimeCountsCallsAndDividesByReps(t *testing.T) {
	tests := []struct {
		name   string
		timing Timing
		calls  int
	}{
		{"one rep", Timing{Warmup: 2, Samples: 3, Reps: 1}, 2 + 3},
		{"reps", Timing{Warmup: 1, Samples: 4, Reps: 3}, 1 + 12},
		{"zero reps means one", Timing{Samples: 2}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := gpu.NewCPU().NewStream()
			for _, timer := range []struct {
				name string
				run  func(func() error) ([]float64, error)
			}{
				{"Time", func(fn func() error) ([]float64, error) { return Time(s, tt.timing, fn) }},
				{"TimeWall", func(fn func() error) ([]float64, error) { return TimeWall(tt.timing, fn) }},
				{"TimeGraph on the CPU", func(fn func() error) ([]float64, error) { return TimeGraph(s, tt.timing, fn) }},
			} {
				calls := 0
				const nap = time.Millisecond
				got, err := timer.run(func() error { calls++; time.Sleep(nap); return nil })
				if err != nil {
					t.Fatalf("%s: %v", timer.name, err)
				}
				if calls != tt.calls {
					t.Errorf("%s: %d calls, want %d", timer.name, calls, tt.calls)
				}
				if len(got) != tt.timing.Samples {
					t.Errorf("%s: %d samples, want %d", timer.name, len(got), tt.timing.Samples)
				}
				// Sleep lasts at least nap, so a sample below it means the
				// harness divided by the wrong count.
				for i, sec := range got {
					if sec < nap.Seconds() {
						t.Errorf("%s: sample %d = %v s per call, below the %v each call sleeps", timer.name, i, sec, nap)
					}
				}
			}
		})
	}
}

func TestTimeErrors(t *testing.T) {
	s, _ := gpu.NewCPU().NewStream()
	boom := errors.New("boom")
	if _, err := Time(s, Timing{Samples: 0}, func() error { return nil }); err == nil {
		t.Error("zero samples accepted")
	}
	if _, err := TimeWall(Timing{Samples: 1, Warmup: -1}, func() error { return nil }); err == nil {
		t.Error("negative warm-up accepted")
	}
	_, err := Time(s, Timing{Warmup: 1, Samples: 2}, func() error { return boom })
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "warm-up") {
		t.Errorf("warm-up failure: %v", err)
	}
	n := 0
	got, err := Time(s, Timing{Samples: 3}, func() error {
		n++
		if n == 2 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "sample 1") || len(got) != 1 {
		t.Errorf("sample failure: %v, %d samples kept", err, len(got))
	}
}

func TestRates(t *testing.T) {
	got, err := Rates([]float64{0.5, 2}, 4e9, 1e9)
	if err != nil || got[0] != 8 || got[1] != 2 {
		t.Errorf("rates = %v, %v; want [8 2]", got, err)
	}
	if _, err := Rates([]float64{1, 0}, 1, 1); err == nil {
		t.Error("a zero-time sample gave a rate")
	}
	if _, err := Rates(nil, 1, 1); err == nil {
		t.Error("no samples gave rates")
	}
}

// A cancelled Ctx ends the samples between two of them: the ones taken
// come back with its error, the rest are not run.
func TestTimingStopsAtCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	fn := func() error {
		calls++
		if calls == 5 {
			cancel()
		}
		return nil
	}
	out, err := TimeWall(Timing{Warmup: 1, Samples: 1_000_000, Ctx: ctx}, fn)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if len(out) != 4 || calls != 5 {
		t.Errorf("%d samples after %d calls, want 4 after 5 (1 warm-up)", len(out), calls)
	}
}
