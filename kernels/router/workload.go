package router

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
)

// Workload describes synthetic router inputs for a run of several layers.
//
// Each token has a preferred expert per layer. Preferences follow a Zipf
// law over a per-layer random ranking of the experts: the expert of rank r
// (1-based) is preferred with probability ∝ r^−Alpha, so Alpha = 0 is
// uniform and Alpha ≈ 1 leaves a few experts far more attractive than the
// rest. A token's hidden state at layer l is
//
//	x = z + Strength · ĝ_e        ĝ_e = the preferred expert's gate row, normalised
//	z = Correlation · z_{l−1} + √(1 − Correlation²) · ε,   ε ~ Normal(0, I)
//
// so the preferred expert's logit is raised by Strength standard deviations
// of the logit noise. Between layers a token keeps its preferred rank with
// probability Correlation (and redraws it otherwise): tokens that route
// together at one layer tend to route together at the next.
type Workload struct {
	Tokens      int     // T
	Alpha       float64 // Zipf exponent of expert affinity; 0 = uniform
	Strength    float64 // logit boost of the preferred expert, in noise standard deviations
	Correlation float64 // in [0,1]: inter-layer correlation of preferences and noise
	Seed        uint64
}

// Validate checks the workload's settings.
func (w Workload) Validate() error {
	switch {
	case w.Tokens <= 0:
		return fmt.Errorf("workload: tokens must be positive (got %d)", w.Tokens)
	case w.Alpha < 0 || math.IsNaN(w.Alpha):
		return fmt.Errorf("workload: zipf alpha must be ≥ 0 (got %v)", w.Alpha)
	case w.Strength < 0 || math.IsNaN(w.Strength):
		return fmt.Errorf("workload: affinity strength must be ≥ 0 (got %v)", w.Strength)
	case !(w.Correlation >= 0 && w.Correlation <= 1):
		return fmt.Errorf("workload: correlation must be in [0,1] (got %v)", w.Correlation)
	}
	return nil
}

// RandomGate returns a gate weight matrix [E×H] with entries ~ Normal(0, 1/H),
// so logits of unit-normal hidden states have unit variance. It depends only
// on (E, H, seed, layer).
func RandomGate(E, H int, seed uint64, layer int) []float32 {
	rng := rand.New(rand.NewPCG(mix(seed, 0x9a7e), uint64(layer)))
	g := make([]float32, E*H)
	s := 1 / math.Sqrt(float64(H))
	for i := range g {
		g[i] = float32(rng.NormFloat64() * s)
	}
	return g
}

// zipfCDF returns the cumulative distribution of ranks 1..E under r^−alpha.
func zipfCDF(E int, alpha float64) []float64 {
	c := make([]float64, E)
	var s float64
	for r := 1; r <= E; r++ {
		s += math.Pow(float64(r), -alpha)
		c[r-1] = s
	}
	for i := range c {
		c[i] /= s
	}
	return c
}

func sampleCDF(cdf []float64, u float64) int {
	lo, hi := 0, len(cdf)-1
	for lo < hi {
		m := (lo + hi) / 2
		if cdf[m] < u {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Hidden generates the hidden states of every layer, [T×H] each, for the
// given gate matrices ([E×H] each, one per layer). It also returns each
// token's preferred expert per layer, for tests and reports.
func (w Workload) Hidden(gates [][]float32, E, H int) (hidden [][]float32, preferred [][]int32, err error) {
	if err := w.Validate(); err != nil {
		return nil, nil, err
	}
	for l, g := range gates {
		if len(g) != E*H {
			return nil, nil, fmt.Errorf("workload: layer %d gate holds %d values, want E×H = %d×%d", l, len(g), E, H)
		}
	}
	T := w.Tokens
	cdf := zipfCDF(E, w.Alpha)
	rng := rand.New(rand.NewPCG(mix(w.Seed, 0x41dde), 1))
	rank := make([]int, T)
	for t := range rank {
		rank[t] = sampleCDF(cdf, rng.Float64())
	}
	z := make([]float32, T*H)
	rho := w.Correlation
	fresh := math.Sqrt(1 - rho*rho)
	hidden = make([][]float32, len(gates))
	preferred = make([][]int32, len(gates))
	for l, g := range gates {
		// Which expert holds which rank at this layer.
		perm := rand.New(rand.NewPCG(mix(w.Seed, 0x9e6), uint64(l))).Perm(E)
		if l > 0 {
			for t := range rank {
				if rng.Float64() >= rho {
					rank[t] = sampleCDF(cdf, rng.Float64())
				}
			}
		}
		noise := rand.New(rand.NewPCG(mix(w.Seed, 0x2015e), uint64(l)))
		for i := range z {
			e := noise.NormFloat64()
			if l == 0 {
				z[i] = float32(e)
			} else {
				z[i] = float32(rho*float64(z[i]) + fresh*e)
			}
		}
		x := make([]float32, T*H)
		pref := make([]int32, T)
		norms := make([]float64, E)
		for e := 0; e < E; e++ {
			var s float64
			for _, v := range g[e*H : (e+1)*H] {
				s += float64(v) * float64(v)
			}
			norms[e] = math.Sqrt(s)
		}
		for t := 0; t < T; t++ {
			e := perm[rank[t]]
			pref[t] = int32(e)
			row, ge := x[t*H:(t+1)*H], g[e*H:(e+1)*H]
			scale := 0.0
			if norms[e] > 0 {
				scale = w.Strength / norms[e]
			}
			for h := range row {
				row[h] = z[t*H+h] + float32(scale*float64(ge[h]))
			}
		}
		hidden[l], preferred[l] = x, pref
	}
	return hidden, preferred, nil
}

// Logits returns hidden · gateᵀ: [T×H] × [E×H]ᵀ → [T×E], accumulated in
// float32 and spread over the CPU's cores.
func Logits(hidden []float32, T, H int, gate []float32, E int) []float32 {
	out := make([]float32, T*E)
	workers := min(runtime.GOMAXPROCS(0), T)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for t := w; t < T; t += workers {
				x := hidden[t*H : (t+1)*H]
				for e := 0; e < E; e++ {
					out[t*E+e] = dot(x, gate[e*H:(e+1)*H])
				}
			}
		}(w)
	}
	wg.Wait()
	return out
}

// dot is a float32 dot product unrolled by four (independent accumulators
// let the CPU overlap the adds).
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}
