package router

import (
	"math"
	"math/rand/v2"

	"github.com/mstar-dev/mstar/kernels/routing"
)

// splitmix64 is a fixed, well-mixed 64-bit hash (Steele et al.), so hash
// routing and seeds are the same on every machine and Go version.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// mix hashes several values into one.
func mix(vs ...uint64) uint64 {
	h := uint64(0x6a09e667f3bcc908)
	for _, v := range vs {
		h = splitmix64(h ^ v)
	}
	return h
}

// Hash is hash routing (Roller et al. 2021, "Hash Layers"): a token's
// experts are a fixed function of its vocabulary id, whatever the logits.
//
//	slot j of token t: e = mix(Seed, layer, id_t, j, attempt) mod E,
//	attempt counting up from 0 until e differs from the token's earlier slots
//	w_e = 1/k
//
// mix is a chain of splitmix64; id_t is Input.TokenIDs[t], or the token's
// position in the run (Offset + t) when there are none. The same token id
// always goes to the same experts at a layer. Registered as "hash".
type Hash struct {
	Seed uint64
}

func (Hash) Name() string { return "hash" }

func (r Hash) Route(in Input, _ State) (routing.Routing, State, error) {
	out := routing.New(in.T, in.K)
	w := float32(1 / float64(in.K))
	for t := 0; t < in.T; t++ {
		id := int64(in.Offset + t)
		if in.TokenIDs != nil {
			id = in.TokenIDs[t]
		}
		ids := out.IDs[t*in.K : (t+1)*in.K]
		for j := range ids {
			for attempt := uint64(0); ; attempt++ {
				e := int32(mix(r.Seed, uint64(in.Layer), uint64(id), uint64(j), attempt) % uint64(in.E))
				if !containsID(ids[:j], e) {
					ids[j] = e
					break
				}
			}
			out.Weights[t*in.K+j] = w
		}
	}
	return out, nil, nil
}

func containsID(ids []int32, e int32) bool {
	for _, x := range ids {
		if x == e {
			return true
		}
	}
	return false
}

// batchRNG is the random source of a stateless random router for one call:
// a function of the seed, layer and batch, so a run is reproducible.
func batchRNG(seed uint64, in Input) *rand.Rand {
	return rand.New(rand.NewPCG(mix(seed, uint64(in.Layer)), mix(seed, uint64(in.Step), uint64(in.Offset))))
}

// Random is uniform random routing, the balanced-in-expectation baseline of
// performance ablations: each token gets k distinct experts drawn uniformly
// without replacement (a partial Fisher–Yates shuffle from PCG seeded by
// Seed, layer, batch), each with weight 1/k. Logits are ignored.
// Registered as "random".
type Random struct {
	Seed uint64
}

func (Random) Name() string { return "random" }

func (r Random) Route(in Input, _ State) (routing.Routing, State, error) {
	rng := batchRNG(r.Seed, in)
	out := routing.New(in.T, in.K)
	perm := make([]int32, in.E)
	for i := range perm {
		perm[i] = int32(i)
	}
	w := float32(1 / float64(in.K))
	for t := 0; t < in.T; t++ {
		for j := 0; j < in.K; j++ {
			s := j + rng.IntN(in.E-j)
			perm[j], perm[s] = perm[s], perm[j]
			out.IDs[t*in.K+j] = perm[j]
			out.Weights[t*in.K+j] = w
		}
	}
	return out, nil, nil
}

// RandomSkewed is random routing with skewed expert popularity, the
// "skewed normal" load of performance ablations: each layer draws a
// log-affinity a_e ~ Normal(0, Skew²) per expert once (from Seed and the
// layer), and each token draws k distinct experts with probability ∝ exp(a_e)
// without replacement (Gumbel top-k: the k largest a_e + Gumbel noise),
// each with weight 1/k. Skew defaults to 1; larger is more skewed, and the
// hot experts stay hot across batches. Logits are ignored. Registered as
// "random-skewed".
type RandomSkewed struct {
	Seed uint64
	Skew float64
}

func (RandomSkewed) Name() string { return "random-skewed" }

func (r RandomSkewed) Route(in Input, _ State) (routing.Routing, State, error) {
	sigma := orDefault(r.Skew, 1)
	aff := rand.New(rand.NewPCG(mix(r.Seed, 0x5eed), uint64(in.Layer)))
	a := make([]float64, in.E)
	for e := range a {
		a[e] = sigma * aff.NormFloat64()
	}
	rng := batchRNG(r.Seed, in)
	out := routing.New(in.T, in.K)
	key := make([]float64, in.E)
	w := float32(1 / float64(in.K))
	for t := 0; t < in.T; t++ {
		for e := range key {
			key[e] = a[e] - math.Log(-math.Log(1-rng.Float64())) // + Gumbel(0,1)
		}
		topK(out.IDs[t*in.K:(t+1)*in.K], key, nil)
		for j := 0; j < in.K; j++ {
			out.Weights[t*in.K+j] = w
		}
	}
	return out, nil, nil
}

// Balanced is perfectly uniform routing, the reference a routing's kernel
// time is compared against: slot j of token t (counting tokens from
// Input.Offset) goes to expert (t·k + j) mod E, weight 1/k. Over a batch
// whose T·k is a multiple of E every expert gets exactly T·k/E tokens, and
// otherwise loads differ by at most one. Logits are ignored. Registered as
// "balanced".
type Balanced struct{}

func (Balanced) Name() string { return "balanced" }

func (Balanced) Route(in Input, _ State) (routing.Routing, State, error) {
	out := routing.New(in.T, in.K)
	w := float32(1 / float64(in.K))
	for t := 0; t < in.T; t++ {
		for j := 0; j < in.K; j++ {
			out.IDs[t*in.K+j] = int32(((in.Offset+t)*in.K + j) % in.E)
			out.Weights[t*in.K+j] = w
		}
	}
	return out, nil, nil
}

// CrossLayer is a stateful router that carries routing information down the
// layers: it mixes the previous layer's (already mixed) logits into this
// layer's, then routes as softmax-topk:
//
//	m_0 = l_0                                    the first layer of a batch, or no state
//	m_l = (1 − Mix) · l_l + Mix · m_{l−1}        when the state is the same batch's layer l−1
//	then softmax-topk on m_l, renormalised when Renormalize
//
// The state is m of the last layer routed. Dropping it (routing each layer
// with a nil state) turns the router into plain softmax-topk, which is what
// makes it a test of the state path. Mix defaults to 0.5, Renormalize to
// true. Registered as "cross-layer".
type CrossLayer struct {
	Mix         float64
	Renormalize bool
}

func (CrossLayer) Name() string { return "cross-layer" }

type crossLayerState struct {
	layer, step, offset, T, E int
	m                         []float32
}

func (r CrossLayer) Route(in Input, st State) (routing.Routing, State, error) {
	mix := orDefault(r.Mix, 0.5)
	m := in.Logits
	if prev, ok := st.(*crossLayerState); ok && prev.layer == in.Layer-1 && prev.step == in.Step &&
		prev.offset == in.Offset && prev.T == in.T && prev.E == in.E {
		m = make([]float32, len(in.Logits))
		for i, l := range in.Logits {
			m[i] = float32((1-mix)*float64(l) + mix*float64(prev.m[i]))
		}
	}
	out := softmaxTopK(in, m, r.Renormalize, 1)
	return out, &crossLayerState{layer: in.Layer, step: in.Step, offset: in.Offset, T: in.T, E: in.E, m: m}, nil
}

func init() {
	Register("hash", "hash routing: a token id's experts are a fixed hash of the id (Hash Layers), weights 1/k",
		func(c Config) (Router, error) { return Hash{Seed: c.Seed}, nil })
	Register("random", "uniform random: k distinct experts per token, weights 1/k (ignores the logits)",
		func(c Config) (Router, error) { return Random{Seed: c.Seed}, nil })
	Register("random-skewed", "random with skewed-normal popularity: experts' log-affinity ~ N(0, σ²) (σ 1), k drawn without replacement",
		func(c Config) (Router, error) { return RandomSkewed{Seed: c.Seed, Skew: c.Skew}, nil })
	Register("balanced", "perfectly uniform: slot j of token t → expert (t·k+j) mod E (the kernel-time reference)",
		func(c Config) (Router, error) { return Balanced{}, nil })
	Register("cross-layer", "stateful: the previous layer's logits mixed into this layer's (mix 0.5), then softmax-topk renormalised",
		func(c Config) (Router, error) {
			return CrossLayer{Mix: c.Mix, Renormalize: c.renorm(true)}, nil
		})
}
