package router

import (
	"fmt"
	"math"
	"slices"

	"github.com/mstar-dev/mstar/kernels/routing"
)

// capacity is ⌈factor · T · K / E⌉, at least 1 and at most limit.
func capacity(factor float64, T, K, E, limit int) int {
	// Clamp in floating point: a huge factor would overflow int.
	f := math.Ceil(factor * float64(T) * float64(K) / float64(E))
	if !(f < float64(limit)) {
		return max(1, limit)
	}
	return max(1, int(f))
}

// Switch is the Switch Transformer router (Fedus et al. 2021) with expert
// capacity and token dropping:
//
//	p = softmax(logits)
//	each token chooses the k experts with the largest p (ties: the lower id)
//	C = ⌈CapacityFactor · T · k / E⌉             tokens an expert accepts per batch
//	assignments are admitted in order — every token's first choice in token
//	order, then every token's second choice, ... — and an expert that already
//	holds C drops the rest
//	w_e = p_e for an admitted assignment, 0 for a dropped one (the token's
//	hidden state then passes that expert by, through the residual)
//
// k = 1 is the paper's router; k > 1 is the GShard-style extension (first
// choices before second). CapacityFactor defaults to 1.25. Registered as "switch".
type Switch struct {
	CapacityFactor float64
}

func (Switch) Name() string { return "switch" }

func (r Switch) Route(in Input, _ State) (routing.Routing, State, error) {
	cf := orDefault(r.CapacityFactor, 1.25)
	if cf < 0 {
		return routing.Routing{}, nil, fmt.Errorf("capacity factor %v is negative", cf)
	}
	out := routing.New(in.T, in.K)
	out.Dropped = make([]bool, in.T*in.K)
	p := make([]float64, in.E)
	for t := 0; t < in.T; t++ {
		softmaxRow(p, in.row(t))
		ids := out.IDs[t*in.K : (t+1)*in.K]
		topK(ids, p, nil)
		for j, e := range ids {
			out.Weights[t*in.K+j] = float32(p[e])
		}
	}
	c := capacity(cf, in.T, in.K, in.E, in.T)
	held := make([]int, in.E)
	for j := 0; j < in.K; j++ {
		for t := 0; t < in.T; t++ {
			i := t*in.K + j
			e := out.IDs[i]
			if held[e] < c {
				held[e]++
				continue
			}
			out.Dropped[i] = true
			out.Weights[i] = 0
		}
	}
	return out, nil, nil
}

// ExpertChoice is expert-choice routing (Zhou et al. 2022): experts pick
// tokens instead of tokens picking experts.
//
//	S = softmax(logits)                          per token, over the E experts
//	C = ⌈CapacityFactor · T · k / E⌉ (at most T) tokens each expert takes
//	expert e takes the C tokens with the largest S[t,e] (ties: the lower token id)
//	w_{t,e} = S[t,e]                             for every expert e that took t
//
// Every expert gets exactly C tokens (perfect balance by construction); a
// token gets anywhere from 0 experts (it is dropped) to E. The output's K is
// the most experts any token got; a token's slots are ordered by weight,
// largest first (ties: the lower expert id), and the rest are empty (-1).
// CapacityFactor defaults to 1 (on average k experts per token). Registered
// as "expert-choice".
type ExpertChoice struct {
	CapacityFactor float64
}

func (ExpertChoice) Name() string { return "expert-choice" }

func (r ExpertChoice) Route(in Input, _ State) (routing.Routing, State, error) {
	cf := orDefault(r.CapacityFactor, 1)
	if cf < 0 {
		return routing.Routing{}, nil, fmt.Errorf("capacity factor %v is negative", cf)
	}
	S := make([]float64, in.T*in.E)
	for t := 0; t < in.T; t++ {
		softmaxRow(S[t*in.E:(t+1)*in.E], in.row(t))
	}
	c := capacity(cf, in.T, in.K, in.E, in.T)
	col := make([]float64, in.T)
	picked := make([]int32, c)
	byToken := make([][]int32, in.T)
	for e := 0; e < in.E; e++ {
		for t := range col {
			col[t] = S[t*in.E+e]
		}
		topK(picked, col, nil)
		for _, t := range picked {
			byToken[t] = append(byToken[t], int32(e))
		}
	}
	k := 1
	for _, es := range byToken {
		k = max(k, len(es))
	}
	out := routing.New(in.T, k)
	for t, es := range byToken {
		row := S[t*in.E : (t+1)*in.E]
		slices.SortFunc(es, func(a, b int32) int {
			switch {
			case row[a] > row[b]:
				return -1
			case row[a] < row[b]:
				return 1
			}
			return int(a - b)
		})
		for j, e := range es {
			out.IDs[t*k+j] = e
			out.Weights[t*k+j] = float32(row[e])
		}
	}
	return out, nil, nil
}

func init() {
	Register("switch", "Switch Transformer: softmax top-k (k=1 in the paper) with expert capacity ⌈cf·T·k/E⌉ (cf 1.25) and token dropping",
		func(c Config) (Router, error) { return Switch{CapacityFactor: c.CapacityFactor}, nil })
	Register("expert-choice", "expert choice: each expert takes its top ⌈cf·T·k/E⌉ tokens by softmax score (cf 1); tokens may get 0..E experts",
		func(c Config) (Router, error) { return ExpertChoice{CapacityFactor: c.CapacityFactor}, nil })
}
