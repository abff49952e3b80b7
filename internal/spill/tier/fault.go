package tier

import (
	"context"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
)

// Faults are deliberate failures, to prove that the gates catch them.
type Faults struct {
	ShortRestore int64         // every restore stops this many bytes short
	Corrupt      bool          // every restore delivers one flipped byte
	Stall        time.Duration // every spill and restore first sleeps this long
}

// Any reports whether any fault is set.
func (f Faults) Any() bool { return f.ShortRestore > 0 || f.Corrupt || f.Stall > 0 }

// Inject wraps t so that its slots misbehave as f says.
func Inject(t Tier, f Faults) Tier {
	if !f.Any() {
		return t
	}
	return &faultTier{Tier: t, f: f}
}

// Unwrap returns the tier under any fault injection.
func Unwrap(t Tier) Tier {
	if ft, ok := t.(*faultTier); ok {
		return ft.Tier
	}
	return t
}

// UnwrapSlot returns the slot under any fault injection.
func UnwrapSlot(s Slot) Slot {
	if fs, ok := s.(*faultSlot); ok {
		return fs.Slot
	}
	return s
}

type faultTier struct {
	Tier
	f Faults
}

func (t *faultTier) Alloc(n int64) (Slot, error) {
	s, err := t.Tier.Alloc(n)
	if err != nil {
		return nil, err
	}
	return &faultSlot{Slot: s, f: t.f}, nil
}

type faultSlot struct {
	Slot
	f Faults
}

func (s *faultSlot) Spill(ctx context.Context, st gpu.Stream, src gpu.Buffer, off int64) (int64, error) {
	time.Sleep(s.f.Stall)
	return s.Slot.Spill(ctx, st, src, off)
}

func (s *faultSlot) Restore(ctx context.Context, st gpu.Stream, dst gpu.Buffer, off, n int64) (int64, error) {
	time.Sleep(s.f.Stall)
	n = max(0, n-s.f.ShortRestore)
	got, err := s.Slot.Restore(ctx, st, dst, off, n)
	if err == nil && s.f.Corrupt && got > 0 {
		var b [1]byte
		at := off + got/2
		if err = st.CopyDtoH(b[:], dst, at); err == nil {
			if err = st.Sync(); err == nil {
				b[0] ^= 0x40
				if err = st.CopyHtoD(dst, at, b[:]); err == nil {
					err = st.Sync()
				}
			}
		}
	}
	return got, err
}
