package cuda

import (
	"errors"
	"testing"
	"time"
)

// A stream held by a gate runs nothing queued after the hold until the
// gate opens, and the gate holds again once opened.
func TestGPUGateHoldsUntilOpen(t *testing.T) {
	c := openForTest(t)
	g, err := c.NewGate()
	if errors.Is(err, ErrNotSupported) || errors.Is(err, ErrNoStreamMemOps) {
		t.Skipf("no stream memory operations: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	for round := 1; round <= 2; round++ {
		ev, err := c.NewEvent(false)
		if err != nil {
			t.Fatal(err)
		}
		defer ev.Destroy()
		if err := g.Hold(s); err != nil {
			t.Fatalf("round %d: hold: %v", round, err)
		}
		if err := s.Record(ev); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if done, err := ev.Query(); done || err != nil {
			t.Fatalf("round %d: an event recorded after the hold: done %v, err %v, before the gate opened", round, done, err)
		}
		if err := g.Open(); err != nil {
			t.Fatalf("round %d: open: %v", round, err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if done, err := ev.Query(); !done || err != nil {
			t.Fatalf("round %d: after the gate opened and the stream synced: done %v, err %v", round, done, err)
		}
	}
}
