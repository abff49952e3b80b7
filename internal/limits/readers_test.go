package limits_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/internal/limits"
	"github.com/mstar-dev/mstar/kernels/router"
	"github.com/mstar-dev/mstar/reports/results"
	"github.com/mstar-dev/mstar/trace"
)

// Every reader stops at the limit: an input that starts well but goes on
// past MSTAR_MAX_INPUT is refused with ErrTooLarge, having read no more.
func TestEveryReaderStopsAtTheLimit(t *testing.T) {
	t.Setenv(limits.EnvMaxInput, "4KiB")
	long := func(start string) *bytes.Reader {
		return bytes.NewReader(append([]byte(start), bytes.Repeat([]byte(" "), 8192)...))
	}
	readers := map[string]func() error{
		"results document": func() error { _, err := results.Read(long(`{"format":"mstar.results",`), "x"); return err },
		"results stream": func() error {
			_, err := results.Read(long(`{"record":"header","format":"mstar.results","schema":1}`+"\n"), "x")
			return err
		},
		"regulator trace": func() error { _, err := trace.Read(long(`{"session":"s"`), "x"); return err },
		"routing trace": func() error {
			_, err := router.ReadTrace(long(`{"format":"mstar.routing-trace","experts":4,"topk":2}` + "\n"))
			return err
		},
	}
	for name, read := range readers {
		if err := read(); !errors.Is(err, limits.ErrTooLarge) || !strings.Contains(err.Error(), limits.EnvMaxInput) {
			t.Errorf("%s: %v, want ErrTooLarge naming %s", name, err, limits.EnvMaxInput)
		}
	}
}
