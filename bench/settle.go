package bench

import (
	"fmt"
	"slices"
	"time"
)

// Settle says when a warm-up is over. A fixed number of warm-up calls is
// not enough: on a shared CPU the first timed samples of a pass ran 2–4×
// slower than the rest (page faults, thread pools, clocks ramping), and on
// a GPU the clocks and caches take their own time. A warm-up has settled
// when it has run at least MinCalls calls for at least MinTime and its
// timing stopped moving: the median of the last Window call times is
// within Tol of the median of the Window before them — neither still
// getting faster (caches, page faults, clocks ramping) nor still getting
// slower (a GPU reaching its power cap). MaxTime ends a warm-up that never
// settles (a drifting machine); the samples that follow then say how noisy
// they are through their interval.
type Settle struct {
	MinCalls int           // at least this many calls (0: 2*Window)
	MinTime  time.Duration // and at least this long
	MaxTime  time.Duration // at most this long (0: 10 s)
	Window   int           // calls per compared window (0: 3)
	Tol      float64       // relative improvement still counted as settling (0: 0.05)
}

// DefaultSettle is the warm-up of the CPU suites: a quarter of a second at
// least, until the timing is stable, at most 3 s.
var DefaultSettle = Settle{MinTime: 250 * time.Millisecond, MaxTime: 3 * time.Second}

func (s Settle) norm() Settle {
	if s.Window <= 0 {
		s.Window = 3
	}
	if s.MinCalls <= 0 {
		s.MinCalls = 2 * s.Window
	}
	s.MinCalls = max(s.MinCalls, 2*s.Window)
	if s.MaxTime <= 0 {
		s.MaxTime = 10 * time.Second
	}
	if s.Tol <= 0 {
		s.Tol = 0.05
	}
	return s
}

// Settler follows one warm-up: Add each warm-up call's time until it says
// the warm-up is done. The zero Settle fields take their defaults.
type Settler struct {
	cfg     Settle
	times   []float64
	elapsed time.Duration
	start   time.Time
	why     string
}

// NewSettler starts following a warm-up.
func NewSettler(s Settle) *Settler {
	return &Settler{cfg: s.norm(), start: time.Now()}
}

// Add records one warm-up call that took sec seconds (as the caller times
// it: device time on CUDA) and reports whether the warm-up is over.
func (s *Settler) Add(sec float64) (done bool) {
	s.times = append(s.times, sec)
	s.elapsed = time.Since(s.start)
	n, w := len(s.times), s.cfg.Window
	if s.elapsed >= s.cfg.MaxTime && n >= 1 {
		s.why = fmt.Sprintf("not settled after %d calls in %v (still moving): the samples' interval says how noisy they are", n, s.elapsed.Round(time.Millisecond))
		return true
	}
	if n < s.cfg.MinCalls || s.elapsed < s.cfg.MinTime {
		return false
	}
	last, before := medianOf(s.times[n-w:]), medianOf(s.times[n-2*w:n-w])
	if last >= before*(1-s.cfg.Tol) && last <= before*(1+s.cfg.Tol) {
		s.why = fmt.Sprintf("settled after %d calls in %v", n, s.elapsed.Round(time.Millisecond))
		return true
	}
	return false
}

// Calls is the number of warm-up calls recorded.
func (s *Settler) Calls() int { return len(s.times) }

// Times are the warm-up calls' times, in order.
func (s *Settler) Times() []float64 { return s.times }

// Note says how the warm-up ended ("" while it runs).
func (s *Settler) Note() string { return s.why }

// Settled reports whether the warm-up ended because the timing stopped
// improving (false when MaxTime ended it, or while it runs).
func (s *Settler) Settled() bool { return s.why != "" && s.why[:7] == "settled" }

func medianOf(v []float64) float64 {
	c := slices.Clone(v)
	slices.Sort(c)
	n := len(c)
	if n%2 == 1 {
		return c[n/2]
	}
	return (c[n/2-1] + c[n/2]) / 2
}

// SettleCalls warms up by calling timeOne, which makes one call and
// returns its time in seconds, until s says the warm-up is over. It returns
// the settler, for its note.
func SettleCalls(s Settle, timeOne func() (float64, error)) (*Settler, error) {
	st := NewSettler(s)
	for {
		sec, err := timeOne()
		if err != nil {
			return st, fmt.Errorf("warm-up: %w", err)
		}
		if st.Add(sec) {
			return st, nil
		}
	}
}
