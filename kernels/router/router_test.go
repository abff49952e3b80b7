package router

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/kernels/routing"
)

// Expected weights below were worked out from each router's formula in
// float64 (python: math.exp, 1/(1+exp(-x))) and are written out here.
// softmax([1,2,3,0]) = [0.08714431874203257, 0.23688281808991013, 0.6439142598879724, 0.03205860328008499]
// e^3/(e^3+e^2) = sigmoid(1) = 0.7310585786300049.

const tol = 1e-6

func in1(E, K int, rows ...[]float32) Input {
	var l []float32
	for _, r := range rows {
		l = append(l, r...)
	}
	return Input{Logits: l, T: len(rows), E: E, K: K}
}

type routeCase struct {
	name    string
	r       Router
	in      Input
	ids     []int32
	weights []float64
	dropped []bool // nil: nothing dropped
	err     string // substring of the expected error
}

func runCases(t *testing.T, cases []routeCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			outs, _, err := Drive(c.r, []Input{c.in}, nil)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error = %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			out := outs[0]
			if !reflect.DeepEqual(out.IDs, c.ids) {
				t.Errorf("ids (-want +got):\n-%v\n+%v", c.ids, out.IDs)
			}
			if len(out.Weights) != len(c.weights) {
				t.Fatalf("%d weights, want %d", len(out.Weights), len(c.weights))
			}
			for i, w := range c.weights {
				if math.Abs(float64(out.Weights[i])-w) > tol*math.Max(1, math.Abs(w)) {
					t.Errorf("weight %d (token %d slot %d) = %.9f, want %.9f", i, i/out.K, i%out.K, out.Weights[i], w)
				}
			}
			var dropped []bool
			if out.DroppedSlots() > 0 {
				dropped = out.Dropped
			}
			if !reflect.DeepEqual(dropped, c.dropped) {
				t.Errorf("dropped (-want +got):\n-%v\n+%v", c.dropped, dropped)
			}
		})
	}
}

func TestSoftmaxTopKAndMixtral(t *testing.T) {
	p := []float64{0.08714431874203257, 0.23688281808991013, 0.6439142598879724, 0.03205860328008499}
	row := []float32{1, 2, 3, 0}
	runCases(t, []routeCase{
		{name: "top2 plain: the two largest probabilities", r: SoftmaxTopK{}, in: in1(4, 2, row),
			ids: []int32{2, 1}, weights: []float64{p[2], p[1]}},
		{name: "top2 renormalised: e^3/(e^3+e^2)", r: SoftmaxTopK{Renormalize: true}, in: in1(4, 2, row),
			ids: []int32{2, 1}, weights: []float64{0.7310585786300049, 1 - 0.7310585786300049}},
		{name: "scaling multiplies the weights", r: SoftmaxTopK{Scaling: 2}, in: in1(4, 1, row),
			ids: []int32{2}, weights: []float64{2 * p[2]}},
		{name: "k = E returns every expert, largest first", r: SoftmaxTopK{}, in: in1(4, 4, row),
			ids: []int32{2, 1, 0, 3}, weights: []float64{p[2], p[1], p[0], p[3]}},
		{name: "k = E renormalised is the softmax itself", r: SoftmaxTopK{Renormalize: true}, in: in1(4, 4, row),
			ids: []int32{2, 1, 0, 3}, weights: []float64{p[2], p[1], p[0], p[3]}},
		{name: "all tied: lower expert ids win", r: SoftmaxTopK{}, in: in1(4, 2, []float32{1, 1, 1, 1}),
			ids: []int32{0, 1}, weights: []float64{0.25, 0.25}},
		{name: "tie for the last slot: lower id wins", r: SoftmaxTopK{Renormalize: true}, in: in1(4, 2, []float32{0, 2, 1, 2}),
			ids: []int32{1, 3}, weights: []float64{0.5, 0.5}},
		{name: "two tokens route independently", r: SoftmaxTopK{Renormalize: true}, in: in1(4, 1, row, []float32{5, 0, 0, 0}),
			ids: []int32{2, 0}, weights: []float64{1, 1}},
		{name: "k > E rejected", r: SoftmaxTopK{}, in: in1(4, 5, row), err: "top-k 5 exceeds the 4 experts"},
		{name: "NaN logit rejected", r: SoftmaxTopK{}, in: in1(4, 1, []float32{0, float32(math.NaN()), 0, 0}), err: "logit of token 0, expert 1 is NaN"},
		{name: "mixtral: softmax over the kept logits", r: Mixtral{}, in: in1(4, 2, row),
			ids: []int32{2, 1}, weights: []float64{0.7310585786300049, 1 - 0.7310585786300049}},
		{name: "mixtral k=1 weight is 1", r: Mixtral{}, in: in1(4, 1, row), ids: []int32{2}, weights: []float64{1}},
		{name: "mixtral ties: lower ids", r: Mixtral{}, in: in1(4, 3, []float32{7, 7, 7, 7}),
			ids: []int32{0, 1, 2}, weights: []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}},
	})
}

func TestDeepSeekV2(t *testing.T) {
	// logits [0,5,4,4.5,1,1,3,0]; p = softmax =
	p := []float64{0.003119632856738803, 0.4629945675088016, 0.17032618276055156, 0.2808204004744788,
		0.008480041305936869, 0.008480041305936869, 0.06265950093081665, 0.003119632856738803}
	row := []float32{0, 5, 4, 4.5, 1, 1, 3, 0}
	// Groups of 2: {0,1} max p 0.463, {2,3} 0.281, {4,5} 0.0085, {6,7} 0.063.
	runCases(t, []routeCase{
		{name: "keep 1 of 4 groups: both experts of group 0, × 16", r: DeepSeekV2{NGroup: 4, TopKGroup: 1, Scaling: 16}, in: in1(8, 2, row),
			ids: []int32{1, 0}, weights: []float64{16 * p[1], 16 * p[0]}},
		{name: "no group limit: plain greedy picks across groups", r: DeepSeekV2{NGroup: 1, TopKGroup: 1, Scaling: 16}, in: in1(8, 2, row),
			ids: []int32{1, 3}, weights: []float64{16 * p[1], 16 * p[3]}},
		{name: "keep 2 groups: 0 and 1", r: DeepSeekV2{NGroup: 4, TopKGroup: 2, Scaling: 1}, in: in1(8, 3, row),
			ids: []int32{1, 3, 2}, weights: []float64{p[1], p[3], p[2]}},
		{name: "renormalised weights are not scaled (as in DeepSeek-V2)", r: DeepSeekV2{NGroup: 4, TopKGroup: 1, Scaling: 16, Renormalize: true}, in: in1(8, 2, row),
			ids: []int32{1, 0}, weights: []float64{p[1] / (p[1] + p[0]), p[0] / (p[1] + p[0])}},
		{name: "renormalisation skipped at k=1: scaled instead", r: DeepSeekV2{NGroup: 4, TopKGroup: 1, Scaling: 16, Renormalize: true}, in: in1(8, 1, row),
			ids: []int32{1}, weights: []float64{16 * p[1]}},
		{name: "tied groups: lower group id kept", r: DeepSeekV2{NGroup: 4, TopKGroup: 1}, in: in1(8, 2, make([]float32, 8)),
			ids: []int32{0, 1}, weights: []float64{0.125, 0.125}},
		{name: "k = E with every group kept", r: DeepSeekV2{NGroup: 4, TopKGroup: 4}, in: in1(8, 8, row),
			ids: []int32{1, 3, 2, 6, 4, 5, 0, 7}, weights: []float64{p[1], p[3], p[2], p[6], p[4], p[5], p[0], p[7]}},
		{name: "n_group not dividing E rejected", r: DeepSeekV2{NGroup: 3, TopKGroup: 1}, in: in1(8, 2, row), err: "n_group 3 does not divide the 8 experts"},
		{name: "topk_group above n_group rejected", r: DeepSeekV2{NGroup: 4, TopKGroup: 5}, in: in1(8, 2, row), err: "topk_group 5 must be in [1, n_group=4]"},
		{name: "k above the kept experts rejected", r: DeepSeekV2{NGroup: 4, TopKGroup: 1}, in: in1(8, 3, row), err: "top-k 3 exceeds the 2 experts in the 1 kept groups"},
	})
}

func TestDeepSeekV3(t *testing.T) {
	// logits l = [2,-1,0.5,0.4,1.5,1.4,-2,3]; s = sigmoid(l) =
	// [0.88080, 0.26894, 0.62246, 0.59869, 0.81757, 0.80218, 0.11920, 0.95257].
	// With bias b = [0,0,0,0,0,0,0.9,-0.5]: c6 = 1.01920, c7 = 0.45257.
	// Group scores (top-2 sums of c, groups of 2): 1.14974, 1.22115, 1.61976, 1.47178
	// → keep groups 2 and 3; top-3 of c over {4,5,6,7} = 6, 4, 5;
	// weights s6, s4, s5 renormalised × 2.5:
	withBias := []float64{0.17137086795536288, 1.175377626879477, 1.15325150516516}
	// Without bias group 3 scores 1.07178 → keep groups 2 and 1; top-3 of s over
	// {2,3,4,5} = 4, 5, 2 (expert 0, second largest overall, is in a dropped group):
	noBias := []float64{0.9115690212294036, 0.8944090152419909, 0.6940219635286056}
	row := []float32{2, -1, 0.5, 0.4, 1.5, 1.4, -2, 3}
	bias := []float32{0, 0, 0, 0, 0, 0, 0.9, -0.5}
	biased := in1(8, 3, row)
	biased.Bias = bias
	v3 := DeepSeekV3{NGroup: 4, TopKGroup: 2, Scaling: 2.5, Renormalize: true}
	s := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	runCases(t, []routeCase{
		{name: "bias steers selection, weights from unbiased scores", r: v3, in: biased, ids: []int32{6, 4, 5}, weights: withBias},
		{name: "no bias", r: v3, in: in1(8, 3, row), ids: []int32{4, 5, 2}, weights: noBias},
		{name: "no renormalisation: s × 2.5", r: DeepSeekV3{NGroup: 4, TopKGroup: 2, Scaling: 2.5}, in: in1(8, 3, row),
			ids: []int32{4, 5, 2}, weights: []float64{2.5 * s(1.5), 2.5 * s(1.4), 2.5 * s(0.5)}},
		{name: "defaults are DeepSeek-V3's (8 groups, keep 4, × 2.5)", r: DeepSeekV3{Renormalize: true}, in: in1(16, 1, []float32{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4}),
			ids: []int32{15}, weights: []float64{2.5}},
		{name: "all tied: lower groups, then lower ids", r: v3, in: in1(8, 3, make([]float32, 8)),
			ids: []int32{0, 1, 2}, weights: []float64{2.5 / 3, 2.5 / 3, 2.5 / 3}},
		{name: "k = E with every group kept: all experts", r: DeepSeekV3{NGroup: 4, TopKGroup: 4, Scaling: 1, Renormalize: true}, in: in1(8, 8, make([]float32, 8)),
			ids: []int32{0, 1, 2, 3, 4, 5, 6, 7}, weights: []float64{0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125}},
		{name: "n_group not dividing E rejected", r: DeepSeekV3{NGroup: 3, TopKGroup: 2}, in: in1(8, 2, row), err: "n_group 3 does not divide the 8 experts"},
		{name: "one expert per group rejected (top-2 group score)", r: DeepSeekV3{NGroup: 8, TopKGroup: 4}, in: in1(8, 2, row), err: "1 experts per group"},
		{name: "k above the kept experts rejected", r: v3, in: in1(8, 5, row), err: "top-k 5 exceeds the 4 experts in the 2 kept groups"},
	})
}

func TestDeepSeekV3LossFree(t *testing.T) {
	// E=4 in one group, k=1, u=0.1. Every token prefers expert 0 slightly:
	// s0 = sigmoid(0.1) = 0.52498, the others 0.5. Batch 1: loads [4,0,0,0],
	// mean 1 → b = [−0.1, +0.1, +0.1, +0.1]. Batch 2 with that state: c0 =
	// 0.42498 < c1..3 = 0.6, ties → expert 1 for every token.
	r := DeepSeekV3LossFree{DeepSeekV3: DeepSeekV3{NGroup: 1, TopKGroup: 1, Scaling: 1, Renormalize: true}, Rate: 0.1}
	row := []float32{0.1, 0, 0, 0}
	in := in1(4, 1, row, row, row, row)
	outs, st, err := Drive(r, []Input{in}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{0, 0, 0, 0}; !reflect.DeepEqual(outs[0].IDs, want) {
		t.Fatalf("batch 1 ids = %v, want %v", outs[0].IDs, want)
	}
	if got, want := LossFreeBias(st, 0), []float32{-0.1, 0.1, 0.1, 0.1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("bias after batch 1 (-want +got):\n-%v\n+%v", want, got)
	}
	in.Step = 1
	outs2, st2, err := Drive(r, []Input{in}, st)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{1, 1, 1, 1}; !reflect.DeepEqual(outs2[0].IDs, want) {
		t.Errorf("batch 2 ids with state = %v, want %v", outs2[0].IDs, want)
	}
	// Loads [0,4,0,0] → b += [+0.1, −0.1, +0.1, +0.1].
	want2 := []float32{0, 0, 0.2, 0.2}
	for i, b := range LossFreeBias(st2, 0) {
		if math.Abs(float64(b-want2[i])) > 1e-6 {
			t.Errorf("bias after batch 2 = %v, want %v", LossFreeBias(st2, 0), want2)
			break
		}
	}
	// The old state is untouched (states are values).
	if got := LossFreeBias(st, 0); got[1] != 0.1 {
		t.Errorf("routing batch 2 mutated the batch-1 state: %v", got)
	}
	dropped, _, err := Drive(r, []Input{in}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(dropped[0].IDs, outs2[0].IDs) {
		t.Errorf("dropping the state gave the same routing %v; the bias should have moved it", dropped[0].IDs)
	}
	// Biases are per layer: layer 1 starts from Input.Bias.
	in.Layer = 1
	in.Bias = []float32{0, 0, 0, 0.5}
	o3, st3, err := Drive(r, []Input{in}, st)
	if err != nil {
		t.Fatal(err)
	}
	if o3[0].IDs[0] != 3 {
		t.Errorf("layer 1 routed to %d, want 3 (its own input bias)", o3[0].IDs[0])
	}
	if LossFreeBias(st3, 0)[0] != -0.1 {
		t.Errorf("layer 1's update touched layer 0's bias")
	}
}

func TestCrossLayer(t *testing.T) {
	// Layer 0 logits [0,3]; layer 1 logits [1,0]. With state, layer 1 routes
	// m = 0.5·[1,0] + 0.5·[0,3] = [0.5,1.5] → expert 1, weight sigmoid(1)
	// unnormalised; without state → expert 0.
	l0 := in1(2, 1, []float32{0, 3})
	l1 := in1(2, 1, []float32{1, 0})
	l1.Layer = 1
	r := CrossLayer{Mix: 0.5}
	outs, _, err := Drive(r, []Input{l0, l1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if outs[1].IDs[0] != 1 || math.Abs(float64(outs[1].Weights[0])-0.7310585786300049) > tol {
		t.Errorf("layer 1 with state: expert %d weight %v, want expert 1 weight 0.7310586", outs[1].IDs[0], outs[1].Weights[0])
	}
	alone, _, err := Drive(r, []Input{l1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if alone[0].IDs[0] != 0 {
		t.Errorf("layer 1 without state: expert %d, want 0", alone[0].IDs[0])
	}
	// A state from another batch is not mixed in.
	l1.Step = 1
	_, st0, _ := Drive(r, []Input{l0}, nil)
	o, _, err := Drive(r, []Input{l1}, st0)
	if err != nil {
		t.Fatal(err)
	}
	if o[0].IDs[0] != 0 {
		t.Errorf("a state from step 0 was mixed into step 1")
	}
}

func TestSwitch(t *testing.T) {
	// T=4, E=2, k=1, cf=1: C = ⌈1·4·1/2⌉ = 2. Every token prefers expert 0
	// (p0 = sigmoid(ln 3) = 0.75): tokens 0 and 1 are admitted, 2 and 3 dropped.
	l3 := float32(math.Log(3))
	row := []float32{l3, 0}
	runCases(t, []routeCase{
		{name: "capacity 2 of 4: last two dropped", r: Switch{CapacityFactor: 1}, in: in1(2, 1, row, row, row, row),
			ids: []int32{0, 0, 0, 0}, weights: []float64{0.75, 0.75, 0, 0}, dropped: []bool{false, false, true, true}},
		{name: "default capacity factor 1.25: C = ⌈2.5⌉ = 3", r: Switch{}, in: in1(2, 1, row, row, row, row),
			ids: []int32{0, 0, 0, 0}, weights: []float64{0.75, 0.75, 0.75, 0}, dropped: []bool{false, false, false, true}},
		{name: "balanced tokens: nothing dropped", r: Switch{CapacityFactor: 1}, in: in1(2, 1, row, []float32{0, l3}),
			ids: []int32{0, 1}, weights: []float64{0.75, 0.75}},
		// k=2, T=2, E=2, cf=0.5: C = ⌈0.5·2·2/2⌉ = 1. First choices go first:
		// token 0 → 0, token 1 → 1; second choices (1 and 0) find both full.
		{name: "top-2: first choices before second choices", r: Switch{CapacityFactor: 0.5}, in: in1(2, 2, row, []float32{0, l3}),
			ids: []int32{0, 1, 1, 0}, weights: []float64{0.75, 0, 0.75, 0}, dropped: []bool{false, true, false, true}},
	})
	out, _, _ := Switch{CapacityFactor: 1}.Route(in1(2, 1, row, row, row, row), nil)
	if got := out.TokenDrops(); got != 2 {
		t.Errorf("token drops = %d, want 2", got)
	}
	if got := out.Loads(2); !reflect.DeepEqual(got, []int{2, 0}) {
		t.Errorf("loads = %v, want [2 0] (dropped slots do not count)", got)
	}
}

func TestExpertChoice(t *testing.T) {
	// T=3, E=2, k=1, cf=1: C = ⌈3/2⌉ = 2. Softmax rows: [.5,.5], [.75,.25], [.25,.75].
	// Expert 0 takes tokens 1 (.75) and 0 (.5); expert 1 takes 2 (.75) and 0 (.5).
	l3 := float32(math.Log(3))
	runCases(t, []routeCase{
		{name: "token 0 gets both experts, the others one", r: ExpertChoice{}, in: in1(2, 1, []float32{0, 0}, []float32{l3, 0}, []float32{0, l3}),
			ids: []int32{0, 1, 0, -1, 1, -1}, weights: []float64{0.5, 0.5, 0.75, 0, 0.75, 0}},
		// All tied, T=4, C=2: both experts take tokens 0 and 1; 2 and 3 get none.
		{name: "ties: lower token ids taken, the rest dropped", r: ExpertChoice{}, in: in1(2, 1, []float32{0, 0}, []float32{0, 0}, []float32{0, 0}, []float32{0, 0}),
			ids: []int32{0, 1, 0, 1, -1, -1, -1, -1}, weights: []float64{0.5, 0.5, 0.5, 0.5, 0, 0, 0, 0}},
	})
	out, _, _ := ExpertChoice{}.Route(in1(2, 1, []float32{0, 0}, []float32{0, 0}, []float32{0, 0}, []float32{0, 0}), nil)
	if got := out.TokenDrops(); got != 2 {
		t.Errorf("token drops = %d, want 2", got)
	}
	if got := out.Loads(2); !reflect.DeepEqual(got, []int{2, 2}) {
		t.Errorf("loads = %v, want [2 2]: expert choice is balanced by construction", got)
	}
}

func TestSplitmix64KnownVector(t *testing.T) {
	// The first output of SplitMix64 from state 0 (Vigna's reference code).
	if got := splitmix64(0); got != 0xe220a8397b1dcdaf {
		t.Fatalf("splitmix64(0) = %#x, want 0xe220a8397b1dcdaf", got)
	}
}

func TestHash(t *testing.T) {
	in := in1(16, 3, make([]float32, 16), make([]float32, 16), make([]float32, 16))
	in.TokenIDs = []int64{7, 7, 3}
	out, _, err := Hash{Seed: 1}.Route(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Validate(16); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out.IDs[0:3], out.IDs[3:6]) {
		t.Errorf("same token id routed differently: %v vs %v", out.IDs[0:3], out.IDs[3:6])
	}
	if reflect.DeepEqual(out.IDs[0:3], out.IDs[6:9]) {
		t.Errorf("token ids 7 and 3 got the same experts %v (possible, but not for this seed)", out.IDs[0:3])
	}
	// Slot 0 is mix(seed, layer, id, 0, 0) mod E: nothing else can collide with it.
	if want := int32(mix(1, 0, 7, 0, 0) % 16); out.IDs[0] != want {
		t.Errorf("slot 0 of token id 7 = %d, want %d", out.IDs[0], want)
	}
	for _, w := range out.Weights {
		if math.Abs(float64(w)-1.0/3) > tol {
			t.Fatalf("weight %v, want 1/3", w)
		}
	}
	// k = E: a permutation of all experts.
	full := in1(5, 5, make([]float32, 5))
	o, _, _ := Hash{}.Route(full, nil)
	if err := o.Validate(5); err != nil {
		t.Fatalf("k = E: %v", err)
	}
	// Without token ids, the position in the run is the id.
	a := in1(4, 1, make([]float32, 4), make([]float32, 4))
	a.Offset = 10
	b := in1(4, 1, make([]float32, 4))
	b.TokenIDs = []int64{11}
	oa, _, _ := Hash{}.Route(a, nil)
	ob, _, _ := Hash{}.Route(b, nil)
	if oa.IDs[1] != ob.IDs[0] {
		t.Errorf("position 11 routed to %d, token id 11 to %d", oa.IDs[1], ob.IDs[0])
	}
}

func TestRandomRouters(t *testing.T) {
	const T, E, K = 20000, 16, 2
	in := Input{Logits: make([]float32, T*E), T: T, E: E, K: K}
	tests := []struct {
		name           string
		r              Router
		minVio, maxVio float64
	}{
		// Uniform: loads of 2500 ± ~50 per expert.
		{"random is nearly balanced", Random{Seed: 3}, 0, 0.1},
		// σ = 1 log-normal popularity over 16 experts: the hottest expert far above the mean.
		{"random-skewed is skewed", RandomSkewed{Seed: 3}, 0.5, math.Inf(1)},
		{"balanced is exactly balanced", Balanced{}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := tc.r.Route(in, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := out.Validate(E); err != nil {
				t.Fatal(err)
			}
			st := Load(out.Loads(E))
			if st.MaxVio < tc.minVio || st.MaxVio > tc.maxVio {
				t.Errorf("MaxVio = %.3f, want in [%v, %v]", st.MaxVio, tc.minVio, tc.maxVio)
			}
			again, _, _ := tc.r.Route(in, nil)
			if !reflect.DeepEqual(out.IDs, again.IDs) {
				t.Errorf("same seed, same input: different routing")
			}
			next := in
			next.Step = 1
			other, _, _ := tc.r.Route(next, nil)
			if _, ok := tc.r.(Balanced); !ok && reflect.DeepEqual(out.IDs, other.IDs) {
				t.Errorf("another batch got the very same random routing")
			}
		})
	}
}

func TestLoadMetrics(t *testing.T) {
	tests := []struct {
		name string
		load []int
		want LoadStats
	}{
		{"perfect balance", []int{3, 3, 3, 3}, LoadStats{MaxVio: 0, Balancedness: 1, CV: 0, Entropy: 1}},
		// mean 1, max 4; std = √((9+1+1+1)/4) = √3; entropy 0.
		{"all on one expert", []int{4, 0, 0, 0}, LoadStats{MaxVio: 3, Balancedness: 0.25, CV: math.Sqrt(3), Entropy: 0}},
		// mean 1, max 2; std = √((1+0+0+1)/4) = √0.5; H = 1.5 ln 2, / ln 4 = 0.75.
		{"mixed", []int{2, 1, 1, 0}, LoadStats{MaxVio: 1, Balancedness: 0.5, CV: math.Sqrt(0.5), Entropy: 0.75}},
		{"one expert is balanced by definition", []int{5}, LoadStats{MaxVio: 0, Balancedness: 1, CV: 0, Entropy: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Load(tc.load)
			g := []float64{got.MaxVio, got.Balancedness, got.CV, got.Entropy}
			w := []float64{tc.want.MaxVio, tc.want.Balancedness, tc.want.CV, tc.want.Entropy}
			for i := range g {
				if math.Abs(g[i]-w[i]) > 1e-12 {
					t.Errorf("(-want +got):\n-%+v\n+%+v", tc.want, got)
					break
				}
			}
		})
	}
	if st := Load([]int{0, 0}); !math.IsNaN(st.MaxVio) {
		t.Errorf("no assignments: MaxVio = %v, want NaN", st.MaxVio)
	}
}

func TestAuxAndZLoss(t *testing.T) {
	l3 := float32(math.Log(3))
	// Two tokens, softmax [.75,.25] each → P = [.75,.25]; both routed to 0 →
	// f = [1,0]; aux = 2·(1·.75 + 0·.25) = 1.5.
	logits := []float32{l3, 0, l3, 0}
	out := routing.Routing{M: 2, K: 1, IDs: []int32{0, 0}, Weights: []float32{1, 1}}
	if got := AuxLoss(logits, 2, 2, out); math.Abs(got-1.5) > 1e-6 {
		t.Errorf("aux loss = %v, want 1.5", got)
	}
	// Balanced routing of uniform probabilities: exactly 1.
	out2 := routing.Routing{M: 2, K: 1, IDs: []int32{0, 1}, Weights: []float32{1, 1}}
	if got := AuxLoss(make([]float32, 4), 2, 2, out2); math.Abs(got-1) > 1e-12 {
		t.Errorf("balanced aux loss = %v, want 1", got)
	}
	// z-loss of [0,0] = (ln 2)²; of [ln 3, 0] = (ln 4)²; mean of the two.
	z := ZLoss([]float32{0, 0, l3, 0}, 2, 2)
	if want := (math.Pow(math.Log(2), 2) + math.Pow(math.Log(4), 2)) / 2; math.Abs(z-want) > 1e-6 {
		t.Errorf("z-loss = %v, want %v", z, want)
	}
}

// recorder is a stateful router that counts calls in its state and routes
// every token to expert (count mod E), so the state path is observable.
type recorder struct{ seen *[]any }

func (recorder) Name() string { return "recorder" }
func (r recorder) Route(in Input, st State) (routing.Routing, State, error) {
	*r.seen = append(*r.seen, st)
	n, _ := st.(int)
	out := routing.New(in.T, in.K)
	for t := 0; t < in.T; t++ {
		for j := 0; j < in.K; j++ {
			out.IDs[t*in.K+j] = int32((n + j) % in.E)
			out.Weights[t*in.K+j] = 1
		}
	}
	return out, n + 1, nil
}

func TestDriveThreadsState(t *testing.T) {
	var seen []any
	r := recorder{&seen}
	ins := []Input{in1(3, 1, []float32{0, 0, 0}), in1(3, 1, []float32{0, 0, 0}), in1(3, 1, []float32{0, 0, 0})}
	outs, st, err := Drive(r, ins, 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := []any{10, 11, 12}; !reflect.DeepEqual(seen, want) {
		t.Errorf("states handed in (-want +got):\n-%v\n+%v", want, seen)
	}
	if st != 13 {
		t.Errorf("final state %v, want 13", st)
	}
	if got := []int32{outs[0].IDs[0], outs[1].IDs[0], outs[2].IDs[0]}; !reflect.DeepEqual(got, []int32{1, 2, 0}) {
		t.Errorf("routing %v, want [1 2 0]", got)
	}
}

// badRouter names an expert out of range.
type badRouter struct{}

func (badRouter) Name() string { return "bad" }
func (badRouter) Route(in Input, _ State) (routing.Routing, State, error) {
	out := routing.New(in.T, in.K)
	for i := range out.IDs {
		out.IDs[i] = int32(in.E)
	}
	return out, nil, nil
}

func TestDriveRejectsBadOutput(t *testing.T) {
	_, _, err := Drive(badRouter{}, []Input{in1(2, 1, []float32{0, 0})}, nil)
	if err == nil || !strings.Contains(err.Error(), "expert id 2 out of range [0,2)") {
		t.Fatalf("error = %v, want an out-of-range expert id", err)
	}
}

func TestRegistry(t *testing.T) {
	want := []string{"balanced", "cross-layer", "deepseek-v2", "deepseek-v3", "deepseek-v3-lossfree", "expert-choice",
		"hash", "mixtral", "random", "random-skewed", "softmax-topk", "softmax-topk-norm", "switch"}
	names := Names()
	for _, n := range want {
		if Doc(n) == "" {
			t.Errorf("router %q not registered (have %v)", n, names)
			continue
		}
		r, err := New(n, Config{})
		if err != nil {
			t.Errorf("New(%q): %v", n, err)
			continue
		}
		// Every built-in routes a small random batch into a valid output.
		in := Input{Logits: RandomGate(5, 16, 1, 0)[:5*16], T: 5, E: 16, K: 2}
		if _, _, err := Drive(r, []Input{in}, nil); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if _, err := New("nope", Config{}); err == nil || !strings.Contains(err.Error(), `unknown router "nope"`) {
		t.Errorf("New(nope) = %v, want an unknown-router error", err)
	}
	f := false
	r, _ := New("deepseek-v3", Config{Renormalize: &f, Scaling: 1, NGroup: 1, TopKGroup: 1})
	if v3 := r.(DeepSeekV3); v3.Renormalize || v3.NGroup != 1 {
		t.Errorf("config not applied: %+v", v3)
	}
}

func TestStatefulDeterministicAndStateMatters(t *testing.T) {
	const E, H, K, L = 32, 32, 4, 4
	gates := make([][]float32, L)
	for l := range gates {
		gates[l] = RandomGate(E, H, 5, l)
	}
	w := Workload{Tokens: 256, Alpha: 1.2, Strength: 2, Correlation: 0.3, Seed: 9}
	hidden, _, err := w.Hidden(gates, E, H)
	if err != nil {
		t.Fatal(err)
	}
	inputs := func(step int) []Input {
		ins := make([]Input, L)
		for l := range ins {
			ins[l] = Input{Logits: Logits(hidden[l], w.Tokens, H, gates[l], E), T: w.Tokens, E: E, K: K, Layer: l, Step: step}
		}
		return ins
	}
	routers := []Router{
		CrossLayer{Mix: 0.5, Renormalize: true},
		DeepSeekV3LossFree{DeepSeekV3: DeepSeekV3{NGroup: 4, TopKGroup: 2, Scaling: 2.5, Renormalize: true}, Rate: 0.05},
	}
	run := func(r Router, keep bool) [][]int32 {
		var ids [][]int32
		var st State
		for step := 0; step < 3; step++ {
			ins := inputs(step)
			for _, in := range ins {
				if !keep {
					st = nil
				}
				outs, next, err := Drive(r, []Input{in}, st)
				if err != nil {
					t.Fatal(err)
				}
				st = next
				ids = append(ids, outs[0].IDs)
			}
		}
		return ids
	}
	for _, r := range routers {
		t.Run(r.Name(), func(t *testing.T) {
			a, b := run(r, true), run(r, true)
			if !reflect.DeepEqual(a, b) {
				t.Errorf("two runs with the same seed differ")
			}
			if c := run(r, false); reflect.DeepEqual(a, c) {
				t.Errorf("dropping the state changed nothing")
			}
		})
	}
}

func TestInputValidate(t *testing.T) {
	tests := []struct {
		name string
		in   Input
		want string
	}{
		{"k above E", in1(2, 3, []float32{0, 0}), "top-k 3 exceeds the 2 experts"},
		{"k zero", in1(2, 0, []float32{0, 0}), "top-k must be at least 1"},
		{"short logits", Input{Logits: []float32{0}, T: 1, E: 2, K: 1}, "logits hold 1 values, want T×E = 1×2 = 2"},
		{"bias length", Input{Logits: []float32{0, 0}, T: 1, E: 2, K: 1, Bias: []float32{0}}, "bias holds 1 values"},
		{"infinite bias", Input{Logits: []float32{0, 0}, T: 1, E: 2, K: 1, Bias: []float32{0, float32(math.Inf(1))}}, "bias of expert 1 is +Inf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.in.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestNewInput(t *testing.T) {
	// hidden [[1,2],[0,1]] · gate [[1,0],[0,1],[1,1]]ᵀ = [[1,2,3],[0,1,1]].
	in, err := NewInput([]float32{1, 2, 0, 1}, 2, 2, []float32{1, 0, 0, 1, 1, 1}, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{1, 2, 3, 0, 1, 1}; !reflect.DeepEqual(in.Logits, want) {
		t.Errorf("logits (-want +got):\n-%v\n+%v", want, in.Logits)
	}
	if err := in.Validate(); err != nil {
		t.Error(err)
	}
	outs, _, err := Drive(Mixtral{}, []Input{in}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{2, 1}; !reflect.DeepEqual(outs[0].IDs, want) {
		t.Errorf("ids %v, want %v (token 1 ties experts 1 and 2: the lower id)", outs[0].IDs, want)
	}
	if _, err := NewInput([]float32{1, 2, 0}, 2, 2, []float32{1, 0, 0, 1, 1, 1}, 3, 1); err == nil || !strings.Contains(err.Error(), "hidden states hold 3 values") {
		t.Errorf("short hidden: %v", err)
	}
	if _, err := NewInput([]float32{1, 2, 0, 1}, 2, 2, []float32{1, 0}, 3, 1); err == nil || !strings.Contains(err.Error(), "gate weights hold 2 values") {
		t.Errorf("short gate: %v", err)
	}
	bad := in
	bad.Hidden = bad.Hidden[:3]
	if err := bad.Validate(); err == nil {
		t.Errorf("Validate accepted 3 hidden values for T×H = 4")
	}
}

func TestModels(t *testing.T) {
	for _, n := range ModelNames() {
		m, err := ModelByName(n)
		if err != nil {
			t.Fatal(err)
		}
		r, err := New(m.Router, m.Config)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		in := Input{Logits: make([]float32, 3*m.E), T: 3, E: m.E, K: m.K}
		if _, _, err := Drive(r, []Input{in}, nil); err != nil {
			t.Errorf("%s's native router rejects its own shape: %v", n, err)
		}
	}
	if _, err := ModelByName("gpt-5"); err == nil || !strings.Contains(err.Error(), "qwen3-30b-a3b") {
		t.Errorf("unknown model error %v should list the known ones", err)
	}
	if m, err := ModelByName("DeepSeek-V3"); err != nil || m.E != 256 || m.Note == "" {
		t.Errorf("case-insensitive lookup: %+v, %v", m, err)
	}
	seen := map[string]bool{}
	for _, m := range Models() {
		if seen[m.Name] || m.E <= 0 || m.K <= 0 || m.K > m.E || m.H <= 0 || m.I <= 0 {
			t.Errorf("preset %+v: duplicate or invalid shape", m)
		}
		seen[m.Name] = true
	}
}

func ExampleDrive() {
	// Two tokens, four experts, the Qwen3 router (softmax, top-2, renormalised).
	r, _ := New("softmax-topk-norm", Config{})
	in := Input{T: 2, E: 4, K: 2, Logits: []float32{
		1, 2, 3, 0,
		0, 0, 5, 5,
	}}
	outs, _, _ := Drive(r, []Input{in}, nil)
	for t := 0; t < in.T; t++ {
		ids, ws := outs[0].Row(t)
		fmt.Printf("token %d: experts %v weights %.4f\n", t, ids, ws)
	}
	// Output:
	// token 0: experts [2 1] weights [0.7311 0.2689]
	// token 1: experts [2 3] weights [0.5000 0.5000]
}

func TestUses(t *testing.T) {
	byName := map[string]Setting{}
	for _, s := range Settings {
		byName[s.Name] = s
	}
	for _, tc := range []struct {
		router, setting string
		want            bool
	}{{"deepseek-v3", "n-group", true}, {"hash", "n-group", false}, {"switch", "capacity-factor", true}, {"hash", "scaling", false}, {"random", "seed", true}} {
		if got := Uses(tc.router, Config{}, byName[tc.setting]); got != tc.want {
			t.Errorf("Uses(%s, --%s) = %v, want %v", tc.router, tc.setting, got, tc.want)
		}
	}
}
