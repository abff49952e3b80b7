package spill

import (
	"testing"

	"github.com/mstar-dev/mstar/bench/spill/tier"
	"github.com/mstar-dev/mstar/internal/gpu"
)

// lazyDev is the CPU backend with CUDA's ordering and nothing more: a
// stream's copies and memsets run only when that stream is synced, in the
// order queued. A cell that reads a byte before waiting for the copy that
// writes it, or that lets a copy overwrite a slot another copy has yet to
// read, sees wrong bytes here, as it would on a GPU.
type lazyDev struct{ gpu.Device }

func (d lazyDev) NewStream() (gpu.Stream, error) {
	s, err := d.Device.NewStream()
	return &lazyStream{Stream: s}, err
}

type lazyStream struct {
	gpu.Stream
	pending []func() error
}

func (l *lazyStream) CopyHtoD(dst gpu.Buffer, off int64, src []byte) error {
	l.pending = append(l.pending, func() error { return l.Stream.CopyHtoD(dst, off, src) })
	return nil
}

func (l *lazyStream) CopyDtoH(dst []byte, src gpu.Buffer, off int64) error {
	l.pending = append(l.pending, func() error { return l.Stream.CopyDtoH(dst, src, off) })
	return nil
}

func (l *lazyStream) CopyDtoD(dst gpu.Buffer, dstOff int64, src gpu.Buffer, srcOff, n int64) error {
	l.pending = append(l.pending, func() error { return l.Stream.CopyDtoD(dst, dstOff, src, srcOff, n) })
	return nil
}

func (l *lazyStream) Memset(dst gpu.Buffer, off, n int64, v byte) error {
	l.pending = append(l.pending, func() error { return l.Stream.Memset(dst, off, n, v) })
	return nil
}

func (l *lazyStream) Sync() error {
	p := l.pending
	l.pending = nil
	for _, f := range p {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// The cells that batch their copies (and ping-pong, which queues a whole
// turn) restore every byte when copies are asynchronous.
func TestCellsWithAsyncStreams(t *testing.T) {
	cfg := small(t)
	cfg.Dev = lazyDev{cfg.Dev}
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
