// Package routing is the one routing type: which experts each token goes
// to, with what weight. Routers (kernels/router) return it, the fused-MoE
// kernels (kernels/moe) compute it, and routing files (router.Trace) hold
// it per layer. It imports nothing of mstar, so both sides can use it.
package routing

import (
	"fmt"
	"math"
)

// Routing is the routing of M tokens, K slots each: token m's j-th slot is
// expert IDs[m*K+j] with weight Weights[m*K+j].
//
// A slot of id Empty computes nothing: a token routed to fewer than K
// experts (expert choice gives tokens a varying number; K is the most any
// got), or an expert on another rank (expert parallelism, see Localize).
// A Dropped slot names the expert the token chose but that was over
// capacity: its weight is 0, it computes nothing, and the residual carries
// the token past that expert; Dropped is nil when nothing was dropped.
type Routing struct {
	M, K    int
	IDs     []int32
	Weights []float32
	Dropped []bool
}

// Empty is the id of a slot that computes nothing here.
const Empty = -1

// New returns a routing of m tokens × k slots, all empty.
func New(m, k int) Routing {
	r := Routing{M: m, K: k, IDs: make([]int32, m*k), Weights: make([]float32, m*k)}
	for i := range r.IDs {
		r.IDs[i] = Empty
	}
	return r
}

// Live reports whether slot i sends its token to an expert.
func (r Routing) Live(i int) bool {
	return r.IDs[i] >= 0 && (r.Dropped == nil || !r.Dropped[i])
}

// Validate checks that r is well formed over e experts: sizes agree, ids
// are in [0,e) or Empty, and every weight is finite. A token may name an
// expert twice (the kernels compute it twice); Distinct refuses that.
func (r Routing) Validate(e int) error {
	if r.M < 0 || r.K < 0 || (r.M > 0 && r.K == 0) {
		return fmt.Errorf("routing of %d tokens × %d slots: bad size", r.M, r.K)
	}
	if len(r.IDs) != r.M*r.K || len(r.Weights) != r.M*r.K {
		return fmt.Errorf("routing of %d tokens × %d slots holds %d ids and %d weights (want %d each)", r.M, r.K, len(r.IDs), len(r.Weights), r.M*r.K)
	}
	if r.Dropped != nil && len(r.Dropped) != len(r.IDs) {
		return fmt.Errorf("routing drop mask holds %d values, want %d", len(r.Dropped), len(r.IDs))
	}
	for i, id := range r.IDs {
		if id != Empty && (id < 0 || int(id) >= e) {
			return fmt.Errorf("token %d slot %d: expert id %d out of range [0,%d)", i/r.K, i%r.K, id, e)
		}
		if w := r.Weights[i]; math.IsNaN(float64(w)) || math.IsInf(float64(w), 0) {
			return fmt.Errorf("token %d slot %d: weight %v is not finite", i/r.K, i%r.K, w)
		}
	}
	return nil
}

// Distinct checks that no token names an expert of e twice, as a router's
// top-k never does. Call it on a routing that Validate(e) accepted.
func (r Routing) Distinct(e int) error {
	seen := make([]int, e) // token+1 that last named the expert
	for t := 0; t < r.M; t++ {
		for j := 0; j < r.K; j++ {
			id := r.IDs[t*r.K+j]
			if id == Empty {
				continue
			}
			if seen[id] == t+1 {
				return fmt.Errorf("token %d: expert %d chosen twice", t, id)
			}
			seen[id] = t + 1
		}
	}
	return nil
}

// Row returns token t's live experts and their weights, in slot order.
func (r Routing) Row(t int) (ids []int32, weights []float32) {
	for j := 0; j < r.K; j++ {
		if i := t*r.K + j; r.Live(i) {
			ids = append(ids, r.IDs[i])
			weights = append(weights, r.Weights[i])
		}
	}
	return ids, weights
}

// Loads returns how many live (token, expert) assignments each of e experts got.
func (r Routing) Loads(e int) []int {
	load := make([]int, e)
	for i, id := range r.IDs {
		if r.Live(i) {
			load[id]++
		}
	}
	return load
}

// Slots is the number of live slots: those that compute.
func (r Routing) Slots() int {
	n := 0
	for i := range r.IDs {
		if r.Live(i) {
			n++
		}
	}
	return n
}

// Touched is the number of distinct experts of e that live slots use.
func (r Routing) Touched(e int) int {
	seen := make([]bool, e)
	n := 0
	for i, id := range r.IDs {
		if r.Live(i) && !seen[id] {
			seen[id] = true
			n++
		}
	}
	return n
}

// TokenDrops returns how many tokens are routed to no expert at all.
func (r Routing) TokenDrops() int {
	n := 0
	for t := 0; t < r.M; t++ {
		if ids, _ := r.Row(t); len(ids) == 0 {
			n++
		}
	}
	return n
}

// DroppedSlots returns how many slots were dropped for capacity.
func (r Routing) DroppedSlots() int {
	n := 0
	for i, d := range r.Dropped {
		if d && r.IDs[i] >= 0 {
			n++
		}
	}
	return n
}

// Computed is r as the kernels compute it: every slot that is not live is
// Empty, and there is no drop mask. r itself when nothing was dropped.
func (r Routing) Computed() Routing {
	if r.Dropped == nil {
		return r
	}
	out := Routing{M: r.M, K: r.K, IDs: make([]int32, len(r.IDs)), Weights: make([]float32, len(r.Weights))}
	for i := range r.IDs {
		if r.Live(i) {
			out.IDs[i], out.Weights[i] = r.IDs[i], r.Weights[i]
		} else {
			out.IDs[i] = Empty
		}
	}
	return out
}

// Tokens returns tokens from … from+n−1 of r (shared, not copied).
func (r Routing) Tokens(from, n int) Routing {
	lo, hi := from*r.K, (from+n)*r.K
	out := Routing{M: n, K: r.K, IDs: r.IDs[lo:hi], Weights: r.Weights[lo:hi]}
	if r.Dropped != nil {
		out.Dropped = r.Dropped[lo:hi]
	}
	return out
}

// Localize maps a routing over globalE experts to rank `rank` of ep ranks:
// experts [rank·E/ep, (rank+1)·E/ep) become local ids 0..E/ep-1 and every
// other slot becomes Empty. Weights are kept as they are: the other ranks'
// slots are summed on their own ranks.
func (r Routing) Localize(globalE, ep, rank int) Routing {
	if ep <= 1 {
		return r
	}
	r = r.Computed()
	local := globalE / ep
	lo := int32(rank * local)
	out := Routing{IDs: make([]int32, len(r.IDs)), Weights: append([]float32(nil), r.Weights...), M: r.M, K: r.K}
	for i, id := range r.IDs {
		if id >= lo && id < lo+int32(local) {
			out.IDs[i] = id - lo
		} else {
			out.IDs[i] = Empty
		}
	}
	return out
}

// Repeat returns the first m tokens of r, cycling through its rows when m is
// larger: a recorded routing replays at any batch size.
func (r Routing) Repeat(m int) Routing {
	out := Routing{IDs: make([]int32, m*r.K), Weights: make([]float32, m*r.K), M: m, K: r.K}
	if r.Dropped != nil {
		out.Dropped = make([]bool, m*r.K)
	}
	for t := 0; t < m; t++ {
		src := t % r.M
		copy(out.IDs[t*r.K:(t+1)*r.K], r.IDs[src*r.K:(src+1)*r.K])
		copy(out.Weights[t*r.K:(t+1)*r.K], r.Weights[src*r.K:(src+1)*r.K])
		if r.Dropped != nil {
			copy(out.Dropped[t*r.K:(t+1)*r.K], r.Dropped[src*r.K:(src+1)*r.K])
		}
	}
	return out
}

// Concat joins routings of consecutive batches (the tokens of one after the
// other's), padding each token to the widest K with empty slots.
func Concat(rs []Routing) Routing {
	if len(rs) == 1 {
		return rs[0]
	}
	m, k, drops := 0, 0, false
	for _, r := range rs {
		m += r.M
		k = max(k, r.K)
		drops = drops || r.Dropped != nil
	}
	c := New(m, k)
	if drops {
		c.Dropped = make([]bool, m*k)
	}
	t0 := 0
	for _, r := range rs {
		for t := 0; t < r.M; t++ {
			for j := 0; j < r.K; j++ {
				src, dst := t*r.K+j, (t0+t)*k+j
				c.IDs[dst], c.Weights[dst] = r.IDs[src], r.Weights[src]
				if r.Dropped != nil {
					c.Dropped[dst] = r.Dropped[src]
				}
			}
		}
		t0 += r.M
	}
	return c
}
