package moe

import (
	"fmt"
)

// Shape is one MoE layer's geometry as one rank computes it: E experts held
// locally, top-K routing, hidden size H, intermediate size I.
type Shape struct {
	E, K, H, I int
}

func (s Shape) String() string {
	return fmt.Sprintf("E%d k%d H%d I%d", s.E, s.K, s.H, s.I)
}

// Validate checks a whole (unsharded) shape: all sizes positive and K ≤ E.
func (s Shape) Validate() error {
	if err := s.validateSizes(); err != nil {
		return err
	}
	if s.K > s.E {
		return fmt.Errorf("shape %v: top-k %d is larger than the number of experts %d", s, s.K, s.E)
	}
	return nil
}

func (s Shape) validateSizes() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"experts", s.E}, {"topk", s.K}, {"hidden", s.H}, {"inter", s.I}} {
		if f.v <= 0 {
			return fmt.Errorf("shape %v: %s must be positive, got %d", s, f.name, f.v)
		}
	}
	return nil
}

// Shard returns the shape one rank computes under tensor parallelism tp
// (I split tp ways) and expert parallelism ep (E split ep ways). K stays the
// global top-k: under EP a token's slots that land on other ranks are dropped
// locally (see routing.Routing.Localize), so K may exceed the local E.
func (s Shape) Shard(tp, ep int) (Shape, error) {
	if err := s.Validate(); err != nil {
		return Shape{}, err
	}
	if tp < 1 || ep < 1 {
		return Shape{}, fmt.Errorf("--tp and --ep must be at least 1, got tp=%d ep=%d", tp, ep)
	}
	if s.I%tp != 0 {
		return Shape{}, fmt.Errorf("--tp %d does not divide the intermediate size %d", tp, s.I)
	}
	if s.E%ep != 0 {
		return Shape{}, fmt.Errorf("--ep %d does not divide the number of experts %d", ep, s.E)
	}
	return Shape{E: s.E / ep, K: s.K, H: s.H, I: s.I / tp}, nil
}

// ExpertBytes is the bf16 weight bytes of one expert (W1 and W2).
func (s Shape) ExpertBytes() int64 { return 3 * int64(s.I) * int64(s.H) * 2 }

// WeightBytes is the bf16 weight bytes of all local experts.
func (s Shape) WeightBytes() int64 { return int64(s.E) * s.ExpertBytes() }

// Flops counts the useful floating-point operations of one forward pass for
// a routing with `slots` computed (token, expert) pairs (M·K minus dropped
// slots): per slot 2·H·2I for W1, 2·I·H for W2 (a multiply-add is 2), plus
// the element-wise SiLU·mul (counted as 4 per intermediate element: the
// exponential counts as one), the routing-weight scale (1 per output element)
// and the top-k combine (1 add per output element per slot).
func (s Shape) Flops(slots int) float64 {
	h, i := float64(s.H), float64(s.I)
	perSlot := 2*h*2*i + 2*i*h + 4*i + h + h
	return float64(slots) * perSlot
}

// Bytes counts the device-memory bytes a forward pass must move at the
// least: the weights of each touched expert read once, x[M,H] read once,
// out[M,H] written once (all bf16), and the routing read once (4-byte ids
// and 4-byte weights). The intermediate buffers of an unfused implementation
// are not counted: this is the floor's byte count, the same for every
// implementation.
func (s Shape) Bytes(m, touchedExperts, slots int) float64 {
	return float64(touchedExperts)*float64(s.ExpertBytes()) +
		2*float64(m)*float64(s.H)*2 + float64(slots)*8
}
