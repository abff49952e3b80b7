package moe

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

// Routing is the router's decision for M tokens: token m's j-th expert is
// IDs[m*K+j] with weight Weights[m*K+j]. An id of -1 marks a slot computed on
// another rank (expert parallelism, see Localize): it contributes nothing here.
type Routing struct {
	IDs     []int32
	Weights []float32
	M, K    int
}

// Dropped is the id of a slot whose expert lives on another rank.
const Dropped = -1

// Validate checks that the routing is well formed for e local experts.
func (r Routing) Validate(e int) error {
	if r.M < 0 || r.K <= 0 {
		return fmt.Errorf("routing: bad size M=%d K=%d", r.M, r.K)
	}
	if len(r.IDs) != r.M*r.K || len(r.Weights) != r.M*r.K {
		return fmt.Errorf("routing: %d ids and %d weights for M=%d K=%d (want %d each)", len(r.IDs), len(r.Weights), r.M, r.K, r.M*r.K)
	}
	for i, id := range r.IDs {
		if id < Dropped || int(id) >= e {
			return fmt.Errorf("routing: token %d slot %d: expert id %d out of range [0, %d)", i/r.K, i%r.K, id, e)
		}
		if w := r.Weights[i]; math.IsNaN(float64(w)) || math.IsInf(float64(w), 0) {
			return fmt.Errorf("routing: token %d slot %d: weight %v is not finite", i/r.K, i%r.K, w)
		}
	}
	return nil
}

// Slots is the number of slots computed locally (not dropped).
func (r Routing) Slots() int {
	n := 0
	for _, id := range r.IDs {
		if id >= 0 {
			n++
		}
	}
	return n
}

// Touched is the number of distinct local experts the routing uses.
func (r Routing) Touched(e int) int {
	seen := make([]bool, e)
	n := 0
	for _, id := range r.IDs {
		if id >= 0 && !seen[id] {
			seen[id] = true
			n++
		}
	}
	return n
}

// Localize maps a routing over globalE experts to rank `rank` of ep ranks:
// experts [rank·E/ep, (rank+1)·E/ep) become local ids 0..E/ep-1 and every
// other slot becomes Dropped. Weights are kept as they are: the dropped
// slots' contributions are summed on their own ranks.
func (r Routing) Localize(globalE, ep, rank int) Routing {
	if ep <= 1 {
		return r
	}
	local := globalE / ep
	lo := int32(rank * local)
	out := Routing{IDs: make([]int32, len(r.IDs)), Weights: append([]float32(nil), r.Weights...), M: r.M, K: r.K}
	for i, id := range r.IDs {
		if id >= lo && id < lo+int32(local) {
			out.IDs[i] = id - lo
		} else {
			out.IDs[i] = Dropped
		}
	}
	return out
}

// UniformRouting gives each of m tokens k distinct experts drawn uniformly
// from e, with softmax weights over k random logits (they sum to one).
func UniformRouting(m, e, k int, seed uint64) Routing {
	return sampleRouting(m, e, k, nil, seed)
}

// ZipfRouting is UniformRouting with skewed expert popularity: the expert of
// popularity rank r (a seeded random permutation of the experts) is drawn
// with probability proportional to 1/(r+1)^alpha, without replacement.
func ZipfRouting(m, e, k int, alpha float64, seed uint64) Routing {
	rng := rand.New(rand.NewPCG(seed, 0x5a1f))
	perm := rng.Perm(e)
	pop := make([]float64, e)
	for r, ex := range perm {
		pop[ex] = 1 / math.Pow(float64(r+1), alpha)
	}
	return sampleRouting(m, e, k, pop, seed)
}

// sampleRouting draws k distinct experts per token, by weight pop (nil:
// uniform), with the Efraimidis–Spirakis keys u^(1/p).
func sampleRouting(m, e, k int, pop []float64, seed uint64) Routing {
	rng := rand.New(rand.NewPCG(seed, 0x40a7e))
	r := Routing{IDs: make([]int32, m*k), Weights: make([]float32, m*k), M: m, K: k}
	type keyed struct {
		key float64
		id  int32
	}
	keys := make([]keyed, e)
	logits := make([]float64, k)
	for t := 0; t < m; t++ {
		for ex := 0; ex < e; ex++ {
			u := rng.Float64()
			if pop != nil {
				u = math.Log(u) / pop[ex] // log of u^(1/p): same order
			}
			keys[ex] = keyed{u, int32(ex)}
		}
		// Top k by key, descending, deterministic on ties by id.
		sort.Slice(keys, func(a, b int) bool {
			if keys[a].key != keys[b].key {
				return keys[a].key > keys[b].key
			}
			return keys[a].id < keys[b].id
		})
		var sum, max float64
		for j := 0; j < k; j++ {
			logits[j] = rng.NormFloat64()
			if j == 0 || logits[j] > max {
				max = logits[j]
			}
		}
		for j := 0; j < k; j++ {
			logits[j] = math.Exp(logits[j] - max)
			sum += logits[j]
		}
		for j := 0; j < k; j++ {
			r.IDs[t*k+j] = keys[j].id
			r.Weights[t*k+j] = float32(logits[j] / sum)
		}
	}
	return r
}

// ParseRoutingSpec parses --routing: "uniform" or "zipf:ALPHA" (ALPHA > 0).
// It returns alpha = 0 for uniform.
func ParseRoutingSpec(s string) (alpha float64, err error) {
	s = strings.TrimSpace(strings.ToLower(s))
	if s == "" || s == "uniform" {
		return 0, nil
	}
	if a, ok := strings.CutPrefix(s, "zipf:"); ok {
		v, err := strconv.ParseFloat(a, 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return 0, fmt.Errorf("bad routing %q: zipf's alpha must be a positive number", s)
		}
		return v, nil
	}
	return 0, fmt.Errorf("bad routing %q: want uniform or zipf:ALPHA", s)
}

// Repeat returns the first m tokens of r, cycling through its rows when m is
// larger: a recorded trace replays at any batch size.
func (r Routing) Repeat(m int) Routing {
	out := Routing{IDs: make([]int32, m*r.K), Weights: make([]float32, m*r.K), M: m, K: r.K}
	for t := 0; t < m; t++ {
		src := t % r.M
		copy(out.IDs[t*r.K:(t+1)*r.K], r.IDs[src*r.K:(src+1)*r.K])
		copy(out.Weights[t*r.K:(t+1)*r.K], r.Weights[src*r.K:(src+1)*r.K])
	}
	return out
}
