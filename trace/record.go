// Package trace records what a memory-pressure regulator did, tick by tick,
// as NDJSON: one JSON object per line, one line per tick that was kept.
//
// A record says which session ticked, when, how long after its previous tick
// it actually ran (the effective interval) and how long its own work took
// (the tick cost), the headroom it measured, which constraint bound its
// decision, how many bytes sat in the host tail, the rung it chose, what it
// did and how many bytes it moved.
//
// Tracing is pure logging: a regulator decides the same with or without a
// writer. The Writer throttles each session to at most one record per
// Options.Every of trace time, but never drops a record that changes rung or
// whose cost exceeded its interval, and always keeps a session's last record.
// Every record it drops is counted, in the next kept record of that session
// (field "suppressed") and in Writer.Stats, so kept + suppressed = ticks.
//
// Read keeps going past a line it cannot use and reports it with its line
// number; Summarize turns records into tick-cost percentiles, interval
// jitter, time per rung, rung changes, flaps and the peak host tail; Plot
// draws headroom, rung and host tail against time.
package trace

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Rungs of the regulator's ladder, in order of pressure.
const (
	RungResident = 0 // every block on the device
	RungPinned   = 1 // cold blocks spilled to pinned host memory
	RungDeep     = 2 // spilled further, to pageable memory, a file or a peer
	RungRefuse   = 3 // new admissions refused
	NumRungs     = 4
)

var rungNames = [NumRungs]string{"resident", "spill-pinned", "spill-deep", "refuse"}

// RungName names a rung ("resident", "spill-pinned", "spill-deep", "refuse").
func RungName(r int) string {
	if r < 0 || r >= NumRungs {
		return fmt.Sprintf("rung%d", r)
	}
	return rungNames[r]
}

// Record is one regulator tick. Durations are microseconds so that the file
// reads without a decoder. IntervalUS is nil on a session's first tick: there
// is no previous tick to measure from, and "unmeasured" is not zero.
type Record struct {
	Session    string    `json:"session"`
	Tick       int64     `json:"tick"`
	Time       time.Time `json:"time"`                  // when the tick began
	IntervalUS *float64  `json:"interval_us,omitempty"` // since the previous tick began
	TargetUS   float64   `json:"target_us"`             // the interval the regulator asked for
	CostUS     float64   `json:"cost_us"`               // the tick's own work, measurement and moves
	Headroom   float64   `json:"headroom"`              // free / budget after the tick
	Binding    string    `json:"binding"`               // the constraint that bound the decision
	HostTail   int64     `json:"host_tail_bytes"`       // bytes beyond pinned memory
	Rung       int       `json:"rung"`
	RungName   string    `json:"rung_name"`
	Action     string    `json:"action"` // "none", "spill 2 → pinned", "restore 1", "refuse 64 MiB" ...
	Moved      int64     `json:"bytes_moved"`
	Demand     int64     `json:"demand_bytes"`   // admitted demand
	Resident   int64     `json:"resident_bytes"` // pool bytes on the device
	Budget     int64     `json:"budget_bytes"`
	Refused    int64     `json:"refused_bytes,omitempty"`
	CooldownUS float64   `json:"cooldown_us,omitempty"` // the regulator's cooldown after a rung change
	Suppressed int64     `json:"suppressed,omitempty"`  // records of this session dropped just before this one
}

// Overrun reports whether the tick's cost exceeded its target interval.
func (r *Record) Overrun() bool { return r.TargetUS > 0 && r.CostUS > r.TargetUS }

// Bounds of a plausible record: beyond them a summary's sums, durations and
// plot axes would overflow, so such a record is refused as garbled.
const (
	maxUS       = 1e12    // about 11.6 days, in microseconds
	maxHeadroom = 1e6     // headroom is a ratio of free to budget
	maxBytes    = 1 << 60 // any byte count
	maxRecords  = 1 << 40 // records suppressed before one record
)

// Validate checks what a summary relies on.
func (r *Record) Validate() error {
	badUS := func(v float64) bool { return v < 0 || v > maxUS || math.IsNaN(v) }
	switch {
	case r.Session == "":
		return errors.New("no session")
	case r.Tick < 0:
		return fmt.Errorf("negative tick %d", r.Tick)
	case r.Time.IsZero():
		return errors.New("no time")
	case r.Rung < 0 || r.Rung >= NumRungs:
		return fmt.Errorf("rung %d outside 0..%d", r.Rung, NumRungs-1)
	case badUS(r.CostUS):
		return fmt.Errorf("bad cost_us %v", r.CostUS)
	case r.IntervalUS != nil && badUS(*r.IntervalUS):
		return fmt.Errorf("bad interval_us %v", *r.IntervalUS)
	case badUS(r.TargetUS):
		return fmt.Errorf("bad target_us %v", r.TargetUS)
	case badUS(r.CooldownUS):
		return fmt.Errorf("bad cooldown_us %v", r.CooldownUS)
	case math.IsNaN(r.Headroom) || math.Abs(r.Headroom) > maxHeadroom:
		return fmt.Errorf("bad headroom %v", r.Headroom)
	case r.Suppressed < 0 || r.Suppressed > maxRecords:
		return fmt.Errorf("bad suppressed count %d", r.Suppressed)
	}
	for _, b := range []struct {
		name string
		v    int64
	}{{"host_tail_bytes", r.HostTail}, {"bytes_moved", r.Moved}, {"demand_bytes", r.Demand},
		{"resident_bytes", r.Resident}, {"budget_bytes", r.Budget}, {"refused_bytes", r.Refused}} {
		if b.v < 0 || b.v > maxBytes {
			return fmt.Errorf("bad %s %d", b.name, b.v)
		}
	}
	return nil
}

// US converts a duration to microseconds, as records hold them.
func US(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// Ptr returns a pointer to v, for IntervalUS.
func Ptr(v float64) *float64 { return &v }
