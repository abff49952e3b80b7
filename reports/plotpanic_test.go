package reports

import "testing"

// gonum's own "plot: " is not said twice ("plot: plot: illegal range").
func TestDrawPanicSaysPlotOnce(t *testing.T) {
	for _, r := range []any{"plot: illegal range", "illegal range"} {
		if got, want := drawPanicError(r).Error(), "plot: cannot draw these values: illegal range"; got != want {
			t.Errorf("panic %q: error %q, want %q", r, got, want)
		}
	}
}
