package regulator

import (
	"fmt"
	"math"
)

// Ramp rises linearly from `from` to `to` over up ticks, holds for hold,
// falls back over down, and stays at `from` for settle ticks.
func Ramp(from, to float64, up, hold, down, settle int) Curve {
	return Curve{
		Name:  "ramp",
		Ticks: up + hold + down + settle,
		Demand: func(t int) float64 {
			switch {
			case t < up:
				return from + (to-from)*float64(t+1)/float64(up)
			case t < up+hold:
				return to
			case t < up+hold+down:
				return to - (to-from)*float64(t-up-hold+1)/float64(down)
			}
			return from
		},
	}
}

// Spike holds base, jumps to peak for width ticks, then returns to base.
func Spike(base, peak float64, before, width, after int) Curve {
	return Curve{
		Name:  "spike",
		Ticks: before + width + after,
		Demand: func(t int) float64 {
			if t >= before && t < before+width {
				return peak
			}
			return base
		},
	}
}

// Oscillation swings around center by ±amp with the given period for
// cycles periods, then settles at rest for settle ticks.
func Oscillation(center, amp float64, period, cycles int, rest float64, settle int) Curve {
	n := period * cycles
	return Curve{
		Name:  "oscillation",
		Ticks: n + settle,
		Demand: func(t int) float64 {
			if t >= n {
				return rest
			}
			return center + amp*math.Sin(2*math.Pi*float64(t)/float64(period))
		},
	}
}

// String describes a curve by its name and length.
func (c Curve) String() string { return fmt.Sprintf("%s (%d ticks)", c.Name, c.Ticks) }
