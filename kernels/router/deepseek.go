package router

import (
	"fmt"
	"math"

	"github.com/mstar-dev/mstar/kernels/routing"
)

// checkGroups validates group-limited routing settings the way the models'
// configs constrain them.
func checkGroups(E, K, nGroup, topkGroup, minPerGroup int) error {
	if nGroup <= 0 {
		return fmt.Errorf("n_group must be at least 1 (got %d)", nGroup)
	}
	if E%nGroup != 0 {
		return fmt.Errorf("n_group %d does not divide the %d experts", nGroup, E)
	}
	if topkGroup <= 0 || topkGroup > nGroup {
		return fmt.Errorf("topk_group %d must be in [1, n_group=%d]", topkGroup, nGroup)
	}
	if per := E / nGroup; per < minPerGroup {
		return fmt.Errorf("%d experts per group (E=%d / n_group=%d); the group score needs at least %d", per, E, nGroup, minPerGroup)
	}
	if kept := topkGroup * (E / nGroup); K > kept {
		return fmt.Errorf("top-k %d exceeds the %d experts in the %d kept groups", K, kept, topkGroup)
	}
	return nil
}

// groupLimitedTopK picks, for one token, the top-k experts by sel among the
// topkGroup groups with the largest group score (ties: the lower group id,
// then the lower expert id). groupScore maps a group's sel values to its score.
func groupLimitedTopK(dst []int32, sel []float64, nGroup, topkGroup int, groupScore func([]float64) float64, gs []float64, gi []int32, skip []bool) {
	per := len(sel) / nGroup
	for g := 0; g < nGroup; g++ {
		gs[g] = groupScore(sel[g*per : (g+1)*per])
	}
	topK(gi, gs, nil)
	for i := range skip {
		skip[i] = true
	}
	for _, g := range gi {
		for e := int(g) * per; e < int(g+1)*per; e++ {
			skip[e] = false
		}
	}
	topK(dst, sel, skip)
}

func groupMax(x []float64) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	return m
}

// groupTop2Sum is the sum of the two largest values.
func groupTop2Sum(x []float64) float64 {
	a, b := math.Inf(-1), math.Inf(-1)
	for _, v := range x {
		if v > a {
			a, b = v, a
		} else if v > b {
			b = v
		}
	}
	return a + b
}

// DeepSeekV2 is DeepSeek-V2's group-limited greedy router
// (topk_method="group_limited_greedy"):
//
//	p = softmax(logits)                              over the E experts
//	groups: experts split into NGroup equal groups of E/NGroup consecutive ids
//	group score g = max_{e∈group} p_e
//	keep the TopKGroup groups with the largest g     (ties: the lower group id)
//	S = the k experts with the largest p among the kept groups (ties: lower id)
//	w_e = p_e × Scaling                              e ∈ S
//	w_e = p_e / (Σ_{j∈S} p_j + 1e-20)                instead, when Renormalize and k > 1
//
// As in DeepSeek-V2's modelling code, renormalised weights are not scaled.
// With the max as group score the limit only bites when TopKGroup < k: a
// token's top-k experts always lie in its top-k groups.
// Defaults: NGroup 1 and TopKGroup 1 (no group limit: plain greedy),
// Scaling 1, Renormalize false; DeepSeek-V2 itself uses n_group 8,
// topk_group 3, routed_scaling_factor 16. Errors: NGroup not dividing E,
// TopKGroup outside [1,NGroup], k larger than the experts in the kept groups.
// Registered as "deepseek-v2".
type DeepSeekV2 struct {
	NGroup, TopKGroup int
	Scaling           float64
	Renormalize       bool
}

func (DeepSeekV2) Name() string { return "deepseek-v2" }

func (r DeepSeekV2) Route(in Input, _ State) (routing.Routing, State, error) {
	ng, tg := orDefaultInt(r.NGroup, 1), orDefaultInt(r.TopKGroup, 1)
	if err := checkGroups(in.E, in.K, ng, tg, 1); err != nil {
		return routing.Routing{}, nil, err
	}
	scaling := orDefault(r.Scaling, 1)
	out := routing.New(in.T, in.K)
	p := make([]float64, in.E)
	gs, gi, skip := make([]float64, ng), make([]int32, tg), make([]bool, in.E)
	for t := 0; t < in.T; t++ {
		softmaxRow(p, in.row(t))
		ids := out.IDs[t*in.K : (t+1)*in.K]
		groupLimitedTopK(ids, p, ng, tg, groupMax, gs, gi, skip)
		var sum float64
		for _, e := range ids {
			sum += p[e]
		}
		for j, e := range ids {
			w := p[e] * scaling
			if r.Renormalize && in.K > 1 {
				w = p[e] / (sum + 1e-20)
			}
			out.Weights[t*in.K+j] = float32(w)
		}
	}
	return out, nil, nil
}

// DeepSeekV3 is DeepSeek-V3's router (noaux_tc):
//
//	s = sigmoid(logits)                              the scores
//	c = s + b                                        b = e_score_correction_bias (Input.Bias; zeros when nil)
//	groups: NGroup equal groups of E/NGroup consecutive ids
//	group score g = sum of the 2 largest c in the group
//	keep the TopKGroup groups with the largest g     (ties: the lower group id)
//	S = the k experts with the largest c among the kept groups (ties: lower id)
//	w_e = s_e                                        the unbiased score, e ∈ S
//	w_e = s_e / (Σ_{j∈S} s_j + 1e-20)                when Renormalize (norm_topk_prob)
//	w_e ×= Scaling                                   routed_scaling_factor
//
// The bias steers selection only; the weights come from the unbiased scores.
// Experts of dropped groups are excluded outright (as sglang does with -inf;
// the HF reference fills them with 0, which differs only when a kept
// expert's biased score is negative). Defaults are DeepSeek-V3's: NGroup 8,
// TopKGroup 4, Scaling 2.5, Renormalize true. Errors: NGroup not dividing E,
// fewer than 2 experts per group, TopKGroup outside [1,NGroup], k larger
// than the experts in the kept groups. Registered as "deepseek-v3".
type DeepSeekV3 struct {
	NGroup, TopKGroup int
	Scaling           float64
	Renormalize       bool
}

func (DeepSeekV3) Name() string { return "deepseek-v3" }

func (r DeepSeekV3) Route(in Input, _ State) (routing.Routing, State, error) {
	return r.route(in, in.Bias)
}

func (r DeepSeekV3) route(in Input, bias []float32) (routing.Routing, State, error) {
	ng, tg := orDefaultInt(r.NGroup, 8), orDefaultInt(r.TopKGroup, 4)
	if err := checkGroups(in.E, in.K, ng, tg, 2); err != nil {
		return routing.Routing{}, nil, err
	}
	scaling := orDefault(r.Scaling, 2.5)
	out := routing.New(in.T, in.K)
	s, c := make([]float64, in.E), make([]float64, in.E)
	gs, gi, skip := make([]float64, ng), make([]int32, tg), make([]bool, in.E)
	for t := 0; t < in.T; t++ {
		for e, v := range in.row(t) {
			s[e] = sigmoid(float64(v))
			c[e] = s[e]
			if bias != nil {
				c[e] += float64(bias[e])
			}
		}
		ids := out.IDs[t*in.K : (t+1)*in.K]
		groupLimitedTopK(ids, c, ng, tg, groupTop2Sum, gs, gi, skip)
		var sum float64
		for _, e := range ids {
			sum += s[e]
		}
		for j, e := range ids {
			w := s[e]
			if r.Renormalize {
				w /= sum + 1e-20
			}
			out.Weights[t*in.K+j] = float32(w * scaling)
		}
	}
	return out, nil, nil
}

// DeepSeekV3LossFree is DeepSeek-V3's router with the auxiliary-loss-free
// load balancing of Wang et al. (2024) run online: after routing a batch at
// a layer, that layer's bias moves toward balance,
//
//	b_i ← b_i + Rate · sign(mean load − load_i)
//
// (load_i = tokens routed to expert i in this batch, mean = Σ load / E,
// sign(0) = 0), and the next batch at that layer routes with the new bias.
// The biases live in the state, one vector per layer, starting from
// Input.Bias (zeros when nil); dropping the state restarts them. Rate
// defaults to 0.001, the paper's update speed. Registered as
// "deepseek-v3-lossfree".
type DeepSeekV3LossFree struct {
	DeepSeekV3
	Rate float64
}

func (DeepSeekV3LossFree) Name() string { return "deepseek-v3-lossfree" }

// lossFreeState maps a layer to its current bias. Never mutated once returned.
type lossFreeState map[int][]float32

func (r DeepSeekV3LossFree) Route(in Input, st State) (routing.Routing, State, error) {
	prev, _ := st.(lossFreeState)
	bias := prev[in.Layer]
	if bias == nil {
		bias = in.Bias
	}
	out, _, err := r.route(in, bias)
	if err != nil {
		return out, nil, err
	}
	load := out.Loads(in.E)
	total := 0
	for _, l := range load {
		total += l
	}
	mean := float64(total) / float64(in.E)
	rate := orDefault(r.Rate, 1e-3)
	nb := make([]float32, in.E)
	for i := range nb {
		var b float64
		if bias != nil {
			b = float64(bias[i])
		}
		switch l := float64(load[i]); {
		case l < mean:
			b += rate
		case l > mean:
			b -= rate
		}
		nb[i] = float32(b)
	}
	next := make(lossFreeState, len(prev)+1)
	for k, v := range prev {
		next[k] = v
	}
	next[in.Layer] = nb
	return out, next, nil
}

// LossFreeBias returns the bias a deepseek-v3-lossfree state holds for a
// layer (nil when it has none), for reports and tests.
func LossFreeBias(st State, layer int) []float32 {
	m, _ := st.(lossFreeState)
	return m[layer]
}

func init() {
	Register("deepseek-v2", "DeepSeek-V2 group-limited greedy: softmax, group score = max, keep topk_group of n_group groups, × scaling (no renormalisation by default)",
		func(c Config) (Router, error) {
			return DeepSeekV2{NGroup: c.NGroup, TopKGroup: c.TopKGroup, Scaling: c.Scaling, Renormalize: c.renorm(false)}, nil
		})
	Register("deepseek-v3", "DeepSeek-V3: sigmoid scores + correction bias for selection, group score = sum of top-2, keep 4 of 8 groups, renormalised unbiased scores × 2.5",
		func(c Config) (Router, error) {
			return DeepSeekV3{NGroup: c.NGroup, TopKGroup: c.TopKGroup, Scaling: c.Scaling, Renormalize: c.renorm(true)}, nil
		})
	Register("deepseek-v3-lossfree", "deepseek-v3 with the loss-free bias update b += u·sign(mean load − load) after every batch (stateful)",
		func(c Config) (Router, error) {
			return DeepSeekV3LossFree{
				DeepSeekV3: DeepSeekV3{NGroup: c.NGroup, TopKGroup: c.TopKGroup, Scaling: c.Scaling, Renormalize: c.renorm(true)},
				Rate:       c.BiasUpdateRate,
			}, nil
		})
}
