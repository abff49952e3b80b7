// Package limits bounds what mstar reads: every input (results documents,
// traces, routing traces, logits) is read through a Reader that refuses
// more than MaxInput bytes and, for text formats, input that starts with a
// NUL byte — so
// /dev/zero or an endless stdin end in one line of error at once, not in
// an exhausted memory.
package limits

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/mstar-dev/mstar/internal/units"
)

// EnvMaxInput is the variable that sets the byte limit of every input
// ("4GiB"); DefaultMaxInput applies when it is unset.
const (
	EnvMaxInput     = "MSTAR_MAX_INPUT"
	DefaultMaxInput = 256 << 20
)

// MaxInput is the byte limit of one input: $MSTAR_MAX_INPUT, or 256 MiB.
func MaxInput() (int64, error) {
	v := os.Getenv(EnvMaxInput)
	if v == "" {
		return DefaultMaxInput, nil
	}
	n, err := units.Parse(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %v", EnvMaxInput, err)
	}
	return n, nil
}

// ErrTooLarge and ErrBinary are the Reader's refusals.
var (
	ErrTooLarge = errors.New("input too large")
	ErrBinary   = errors.New("binary data")
)

// Reader reads at most Limit bytes of R; past that, or when Text is set and
// the first byte is NUL, Read fails.
type Reader struct {
	R     io.Reader
	Limit int64
	Text  bool
	n     int64
}

// NewReader wraps r with the limit of MaxInput; text refuses NUL bytes.
func NewReader(r io.Reader, text bool) (*Reader, error) {
	max, err := MaxInput()
	if err != nil {
		return nil, err
	}
	return &Reader{R: r, Limit: max, Text: text}, nil
}

func (l *Reader) Read(p []byte) (int, error) {
	if l.n > l.Limit {
		return 0, l.tooLarge()
	}
	if int64(len(p)) > l.Limit-l.n+1 {
		p = p[:l.Limit-l.n+1]
	}
	n, err := l.R.Read(p)
	// Text that starts with a NUL is no text (/dev/zero, an image, a core
	// file). NULs later on are left to the parser: a torn write after a
	// crash can leave a run of them in the middle of a good file.
	if l.Text && l.n == 0 && n > 0 && p[0] == 0 {
		return 0, fmt.Errorf("%w: the first byte is NUL, and this format is text", ErrBinary)
	}
	l.n += int64(n)
	if l.n > l.Limit {
		return n - int(l.n-l.Limit), l.tooLarge()
	}
	return n, err
}

func (l *Reader) tooLarge() error {
	return fmt.Errorf("%w: more than %s (the limit; %s raises it)", ErrTooLarge, units.Bytes(l.Limit), EnvMaxInput)
}

// ReadAll reads all of r within the limit.
func ReadAll(r io.Reader, text bool) ([]byte, error) {
	lr, err := NewReader(r, text)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(lr)
}

// ReadFile reads a file within the limit; a regular file larger than it is
// refused before a byte is read.
func ReadFile(path string, text bool) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	lr, err := NewReader(f, text)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > lr.Limit {
		return nil, fmt.Errorf("%s is %s: %w", path, units.Bytes(st.Size()), lr.tooLarge())
	}
	return io.ReadAll(lr)
}
