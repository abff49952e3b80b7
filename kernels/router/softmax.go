package router

import (
	"math"

	"github.com/mstar-dev/mstar/kernels/routing"
)

// SoftmaxTopK is the router of Qwen2-MoE, Qwen3-MoE and most others:
//
//	p = softmax(logits)                       over the E experts
//	S = the k experts with the largest p      (ties: the lower expert id)
//	w_e = p_e                                 e ∈ S
//	w_e = p_e / Σ_{j∈S} p_j                   when Renormalize (norm_topk_prob)
//	w_e ×= Scaling                            (0 is taken as 1)
//
// Slots are ordered by p, largest first. Registered as "softmax-topk"
// (Renormalize default false) and "softmax-topk-norm" (default true, as in
// Qwen3-MoE's config).
type SoftmaxTopK struct {
	Renormalize bool
	Scaling     float64
}

func (r SoftmaxTopK) Name() string {
	if r.Renormalize {
		return "softmax-topk-norm"
	}
	return "softmax-topk"
}

func (r SoftmaxTopK) Route(in Input, _ State) (routing.Routing, State, error) {
	return softmaxTopK(in, in.Logits, r.Renormalize, r.Scaling), nil, nil
}

// softmaxTopK routes logits (T×E, possibly not in.Logits) by SoftmaxTopK's formula.
func softmaxTopK(in Input, logits []float32, renorm bool, scaling float64) routing.Routing {
	scaling = orDefault(scaling, 1)
	out := routing.New(in.T, in.K)
	p := make([]float64, in.E)
	for t := 0; t < in.T; t++ {
		softmaxRow(p, logits[t*in.E:(t+1)*in.E])
		ids := out.IDs[t*in.K : (t+1)*in.K]
		topK(ids, p, nil)
		var sum float64
		for _, e := range ids {
			sum += p[e]
		}
		for j, e := range ids {
			w := p[e]
			if renorm {
				w /= sum
			}
			out.Weights[t*in.K+j] = float32(w * scaling)
		}
	}
	return out
}

// Mixtral is Mixtral-8x7B's router: top-k on the logits, then a softmax over
// the kept logits only:
//
//	S = the k experts with the largest logit  (ties: the lower expert id)
//	w_e = exp(l_e) / Σ_{j∈S} exp(l_j)         e ∈ S
//
// Mathematically it equals softmax-topk with renormalisation; it is kept
// apart because implementations compute it this way round (and so round
// differently). Registered as "mixtral".
type Mixtral struct{}

func (Mixtral) Name() string { return "mixtral" }

func (Mixtral) Route(in Input, _ State) (routing.Routing, State, error) {
	out := routing.New(in.T, in.K)
	l := make([]float64, in.E)
	for t := 0; t < in.T; t++ {
		for e, v := range in.row(t) {
			l[e] = float64(v)
		}
		ids := out.IDs[t*in.K : (t+1)*in.K]
		topK(ids, l, nil)
		m := l[ids[0]]
		var sum float64
		for _, e := range ids {
			sum += math.Exp(l[e] - m)
		}
		for j, e := range ids {
			out.Weights[t*in.K+j] = float32(math.Exp(l[e]-m) / sum)
		}
	}
	return out, nil, nil
}

func init() {
	Register("softmax-topk", "softmax over experts, top-k by probability (Qwen2/Qwen3-MoE with norm_topk_prob=false); --renormalize turns on renormalisation",
		func(c Config) (Router, error) {
			return SoftmaxTopK{Renormalize: c.renorm(false), Scaling: c.Scaling}, nil
		})
	Register("softmax-topk-norm", "softmax-topk with the top-k weights renormalised to sum to 1 (Qwen3-MoE, norm_topk_prob=true)",
		func(c Config) (Router, error) {
			return SoftmaxTopK{Renormalize: c.renorm(true), Scaling: c.Scaling}, nil
		})
	Register("mixtral", "top-k on the logits, then softmax over the kept logits (Mixtral)",
		func(c Config) (Router, error) { return Mixtral{}, nil })
}
