package gpu

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckFits(t *testing.T) {
	dev := NewCPU()
	free, _, err := dev.MemInfo()
	if err != nil {
		t.Skipf("no host memory figures here: %v", err)
	}
	if err := CheckFits(dev, "a byte", 1, "hint"); err != nil {
		t.Errorf("one byte does not fit: %v", err)
	}
	err = CheckFits(dev, "the work", free+1<<40, "try less")
	var fe *FitError
	if !errors.As(err, &fe) || fe.Need != free+1<<40 || fe.Device != "cpu" {
		t.Fatalf("%v: want a *FitError for the cpu needing %d", err, free+1<<40)
	}
	for _, want := range []string{"the work needs ", " of cpu memory, only ", " is free (try less)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
}

// noMemInfo is a device whose free memory cannot be read.
type noMemInfo struct{ Device }

func (noMemInfo) MemInfo() (int64, int64, error) { return 0, 0, errors.New("no figures") }

// Memory that cannot be read refuses nothing: callers need not tell that
// case from a refusal.
func TestCheckFitsUnreadableMemory(t *testing.T) {
	if err := CheckFits(noMemInfo{NewCPU()}, "the work", 1<<60, "try less"); err != nil {
		t.Errorf("unreadable memory refused the work: %v", err)
	}
}
