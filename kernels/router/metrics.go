package router

import (
	"math"

	"github.com/mstar-dev/mstar/kernels/routing"
)

// LoadStats describes how evenly a routing spreads over the experts. Loads
// count live (token, expert) assignments; dropped and empty slots do not count.
type LoadStats struct {
	// MaxVio = max_i load_i / mean load − 1 (DeepSeek's maximal violation):
	// 0 is perfect balance.
	MaxVio float64
	// Balancedness = mean load / max load, in (0,1]: 1 is perfect balance
	// (the fraction of the hottest expert's time the average expert is busy).
	Balancedness float64
	// CV = population standard deviation of the loads / their mean.
	CV float64
	// Entropy = −Σ p_i ln p_i / ln E with p_i = load_i / Σ load: 1 is
	// perfect balance, 0 all on one expert. (1 by definition when E = 1.)
	Entropy float64
}

// Load returns the balance statistics of a load vector. With no
// assignments at all every statistic is NaN: there is no balance to speak of.
func Load(load []int) LoadStats {
	E := len(load)
	total, mx := 0, 0
	for _, l := range load {
		total += l
		mx = max(mx, l)
	}
	if E == 0 || total == 0 {
		nan := math.NaN()
		return LoadStats{nan, nan, nan, nan}
	}
	mean := float64(total) / float64(E)
	var ss, h float64
	for _, l := range load {
		d := float64(l) - mean
		ss += d * d
		if l > 0 {
			p := float64(l) / float64(total)
			h -= p * math.Log(p)
		}
	}
	ent := 1.0
	if E > 1 {
		ent = h / math.Log(float64(E))
	}
	return LoadStats{
		MaxVio:       float64(mx)/mean - 1,
		Balancedness: mean / float64(mx),
		CV:           math.Sqrt(ss/float64(E)) / mean,
		Entropy:      ent,
	}
}

// AuxLoss is the Switch Transformer load-balancing loss for one layer,
//
//	E · Σ_i f_i · P_i
//
// with f_i the fraction of chosen (token, expert) assignments that went to
// expert i — dropped ones included, as Switch counts the router's choice
// before capacity — and P_i the mean over tokens of softmax(logits)_i. It is
// 1 for perfectly balanced routing and up to E when everything goes to one
// expert the router is sure of.
func AuxLoss(logits []float32, T, E int, out routing.Routing) float64 {
	chosen := make([]float64, E)
	n := 0
	for _, id := range out.IDs {
		if id >= 0 {
			chosen[id]++
			n++
		}
	}
	if n == 0 || T == 0 {
		return math.NaN()
	}
	P := make([]float64, E)
	p := make([]float64, E)
	for t := 0; t < T; t++ {
		softmaxRow(p, logits[t*E:(t+1)*E])
		for i, v := range p {
			P[i] += v
		}
	}
	var s float64
	for i := range P {
		s += chosen[i] / float64(n) * P[i] / float64(T)
	}
	return float64(E) * s
}

// ZLoss is the router z-loss of ST-MoE (Zoph et al. 2022) for one layer:
// the mean over tokens of (log Σ_e exp(logit_e))².
func ZLoss(logits []float32, T, E int) float64 {
	if T == 0 {
		return math.NaN()
	}
	var s float64
	for t := 0; t < T; t++ {
		z := LogSumExp(logits[t*E : (t+1)*E])
		s += z * z
	}
	return s / float64(T)
}
