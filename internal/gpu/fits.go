package gpu

import (
	"fmt"

	"github.com/mstar-dev/mstar/internal/units"
)

// FitError is work that needs more of a device's memory than is free: a
// size or shape the user chose that cannot fit, so bad input (exit 2).
type FitError struct {
	What       string // what needs the memory: "shape E128 k8 … at M=4096"
	Device     string // the device's ID: "cpu", "cuda:0"
	Need, Free int64
	Hint       string // what to change: "try --tp/--ep or smaller --batch"
}

func (e *FitError) Error() string {
	s := fmt.Sprintf("%s needs %s of %s memory, only %s is free", e.What, units.Bytes(e.Need), e.Device, units.Bytes(e.Free))
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

// CheckFits returns a *FitError when need bytes exceed dev's free memory
// (MemAvailable on the CPU), so that work too large to run is refused with
// the numbers before anything is allocated, not killed by the allocator.
// Memory that cannot be read refuses nothing: the result is a *FitError or
// nil.
func CheckFits(dev Device, what string, need int64, hint string) error {
	free, _, err := dev.MemInfo()
	if err != nil {
		return nil
	}
	if need > free {
		return &FitError{What: what, Device: dev.Info().ID, Need: need, Free: free, Hint: hint}
	}
	return nil
}
