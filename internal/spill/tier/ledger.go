package tier

import (
	"errors"
	"sync"
	"time"
)

// Ledger holds slots that nobody owns any more — a spill cancelled mid-flight
// leaves its slot reserved and partly written — and reports them as
// stranded until a TTL passes and Reclaim frees them. Stranded bytes are a
// measurement (the slots' sizes), never assumed zero.
type Ledger struct {
	mu      sync.Mutex
	ttl     time.Duration
	entries []strandedSlot
}

type strandedSlot struct {
	slot  Slot
	since time.Time
	why   string
}

// Stranded describes what a ledger holds.
type Stranded struct {
	Slots   int
	Bytes   int64 // reserved by the stranded slots
	Written int64 // of which a cancelled spill had written
}

// NewLedger returns a ledger whose entries may be reclaimed after ttl.
func NewLedger(ttl time.Duration) *Ledger { return &Ledger{ttl: ttl} }

// TTL is how long a stranded slot is kept before Reclaim frees it.
func (l *Ledger) TTL() time.Duration { return l.ttl }

// Strand records s as owned by nobody since now.
func (l *Ledger) Strand(s Slot, why string, now time.Time) {
	l.mu.Lock()
	l.entries = append(l.entries, strandedSlot{s, now, why})
	l.mu.Unlock()
}

// Stranded returns what the ledger holds now.
func (l *Ledger) Stranded() Stranded {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s Stranded
	for _, e := range l.entries {
		s.Slots++
		s.Bytes += e.slot.Size()
		s.Written += e.slot.Filled()
	}
	return s
}

// Reclaim frees the slots stranded for at least the TTL at now, and returns
// what it freed.
func (l *Ledger) Reclaim(now time.Time) (Stranded, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var freed Stranded
	var errs []error
	keep := l.entries[:0]
	for _, e := range l.entries {
		if now.Sub(e.since) < l.ttl {
			keep = append(keep, e)
			continue
		}
		freed.Slots++
		freed.Bytes += e.slot.Size()
		freed.Written += e.slot.Filled()
		errs = append(errs, e.slot.Free())
	}
	l.entries = keep
	return freed, errors.Join(errs...)
}
