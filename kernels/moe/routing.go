package moe

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"

	"github.com/mstar-dev/mstar/kernels/routing"
)

// UniformRouting gives each of m tokens k distinct experts drawn uniformly
// from e, with softmax weights over k random logits (they sum to one).
func UniformRouting(m, e, k int, seed uint64) routing.Routing {
	return sampleRouting(m, e, k, nil, seed)
}

// ZipfRouting is UniformRouting with skewed expert popularity: the expert of
// popularity rank r (a seeded random permutation of the experts) is drawn
// with probability proportional to 1/(r+1)^alpha, without replacement.
func ZipfRouting(m, e, k int, alpha float64, seed uint64) routing.Routing {
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
func sampleRouting(m, e, k int, pop []float64, seed uint64) routing.Routing {
	rng := rand.New(rand.NewPCG(seed, 0x40a7e))
	r := routing.Routing{IDs: make([]int32, m*k), Weights: make([]float32, m*k), M: m, K: k}
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
