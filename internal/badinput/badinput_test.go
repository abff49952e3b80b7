package badinput

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestWrapAndIs(t *testing.T) {
	base := fmt.Errorf("--sizes 8: %w", fs.ErrInvalid)
	err := fmt.Errorf("spill-matrix: %w", Wrap(base))
	if !Is(err) {
		t.Errorf("%v: wrapped twice, not seen as bad input", err)
	}
	if !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("%v: the cause is lost", err)
	}
	if err.Error() != "spill-matrix: --sizes 8: invalid argument" {
		t.Errorf("message %q changed by the wrapping", err)
	}
	if Is(base) || Is(nil) || Wrap(nil) != nil {
		t.Error("an unmarked error or nil counts as bad input")
	}
	if e := Errorf("k %d above %d experts", 9, 8); !Is(e) || e.Error() != "k 9 above 8 experts" {
		t.Errorf("Errorf: %v", e)
	}
	if w := Wrap(Errorf("x")); w.(*Error).Err.Error() != "x" {
		t.Error("Wrap of bad input nests it again")
	}
}
