package spill

import (
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu/gputest"
	"github.com/mstar-dev/mstar/internal/spill/tier"
)

// The cells that batch their copies (and ping-pong, which queues a whole
// turn) restore every byte when copies are asynchronous.
func TestCellsWithAsyncStreams(t *testing.T) {
	cfg := small(t)
	cfg.Dev = gputest.LazyDevice{Device: cfg.Dev}
	size := int64(2 << 20)
	cells, err := Match(Cells(Scenarios, []tier.Kind{tier.Device, tier.Pinned, tier.File}, []int64{size}),
		"hibernate,partial,restore-gate,uneven,ping-pong")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Run(t.Context(), cfg, cells, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range m.Outcomes {
		if o.Err != nil {
			t.Errorf("%s: %v", o.Cell.Name(), o.Err)
		}
		for _, r := range o.Results {
			for _, g := range r.Gates {
				if !g.Pass && !timingGate(g.Name) {
					t.Errorf("%s: %s: %s", o.Cell.Name(), g.Name, g.Reason)
				}
			}
		}
	}
	for _, c := range m.Ceilings {
		if c.Unmeasured != "" {
			t.Errorf("ceiling %s unmeasured: %s", c.Tier, c.Unmeasured)
		}
	}
}
