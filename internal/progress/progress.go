// Package progress shows progress of long work on a terminal. It draws only
// when its writer is a terminal, so piped output and CI logs stay clean, and
// it never writes to stdout: pass it stderr.
package progress

import (
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Bar is a progress bar, or nothing when its writer is not a terminal.
// The zero value and a nil *Bar are valid and draw nothing.
type Bar struct {
	bar         *progressbar.ProgressBar
	w           io.Writer
	description string
}

// New returns a bar over total steps, drawn on w only when w is a terminal.
func New(w io.Writer, total int, description string) *Bar {
	if !IsTerminal(w) {
		return &Bar{}
	}
	if total <= 0 {
		return &Bar{w: w, description: description}
	}
	return &Bar{w: w, description: description, bar: progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(description),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)}
}

// SetTotal sets the number of steps, for work that learns it late; a bar
// made with none starts drawing then.
func (b *Bar) SetTotal(total int) {
	if b == nil || b.w == nil || total <= 0 {
		return
	}
	if b.bar == nil {
		*b = *New(b.w, total, b.description)
		return
	}
	b.bar.ChangeMax(total)
}

// Describe changes the text shown beside the bar (the step now running).
func (b *Bar) Describe(s string) {
	if b != nil && b.bar != nil {
		b.bar.Describe(s)
	}
}

// Add advances the bar by n steps.
func (b *Bar) Add(n int) {
	if b != nil && b.bar != nil {
		_ = b.bar.Add(n)
	}
}

// Finish clears the bar.
func (b *Bar) Finish() {
	if b != nil && b.bar != nil {
		_ = b.bar.Finish()
	}
}

// IsTerminal reports whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
