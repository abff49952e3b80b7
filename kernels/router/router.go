package router

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/mstar-dev/mstar/kernels/routing"
)

// Router turns one layer's router logits into a per-token choice of experts.
//
// Route receives the state the same router returned for the previous call
// of the run (nil at the start of a run) and returns the state for the next
// one. Stateless routers return nil. A router must not modify in, nor keep
// references to its slices, nor mutate a state it has returned: drivers may
// hold on to old states (that is how "drop the state" ablations work).
type Router interface {
	Name() string
	Route(in Input, st State) (routing.Routing, State, error)
}

// State is a router's private carry from one call to the next (the previous
// layer's logits, per-layer biases, ...). Only the router that made it
// looks inside.
type State any

// Input is what a router sees for one batch of tokens at one layer.
//
// Logits are the primitive: logits = hidden · gateᵀ is computed by the
// driver (see Logits), so routers can be checked from logits alone
// (`mstar route --logits`).
type Input struct {
	Logits []float32 // T×E row-major router logits
	T, E   int       // tokens, experts
	K      int       // experts per token requested (top-k)
	// Bias is the score-correction bias of models that have one (DeepSeek-V3's
	// e_score_correction_bias), E values; nil means zeros.
	Bias []float32
	// TokenIDs are the vocabulary ids of the tokens, T values, for hash
	// routing; nil means the token's position in the run (Offset + t).
	TokenIDs []int64
	Layer    int // layer index within the run, from 0
	Step     int // batch index within the run, from 0
	Offset   int // index in the run of this batch's first token
	// Hidden (T×H) and Gate (E×H) are what the logits were computed from,
	// when the driver has them, for routers that look past the logits (a
	// learned projection of their own, say). nil when routing from logits alone.
	Hidden []float32
	Gate   []float32
	H      int
}

// NewInput makes a layer's input from hidden states [T×H] and gate weights
// [E×H]: the logits are hidden · gateᵀ, and both stay in the input.
func NewInput(hidden []float32, T, H int, gate []float32, E, K int) (Input, error) {
	if T <= 0 || H <= 0 || E <= 0 {
		return Input{}, fmt.Errorf("sizes must be positive (T=%d H=%d E=%d)", T, H, E)
	}
	if len(hidden) != T*H {
		return Input{}, fmt.Errorf("hidden states hold %d values, want T×H = %d×%d = %d", len(hidden), T, H, T*H)
	}
	if len(gate) != E*H {
		return Input{}, fmt.Errorf("gate weights hold %d values, want E×H = %d×%d = %d", len(gate), E, H, E*H)
	}
	return Input{Logits: Logits(hidden, T, H, gate, E), T: T, E: E, K: K, Hidden: hidden, Gate: gate, H: H}, nil
}

// Validate checks the input's shape and that every logit is finite.
func (in Input) Validate() error {
	switch {
	case in.T <= 0:
		return fmt.Errorf("no tokens (T=%d)", in.T)
	case in.E <= 0:
		return fmt.Errorf("no experts (E=%d)", in.E)
	case in.K <= 0:
		return fmt.Errorf("top-k must be at least 1 (k=%d)", in.K)
	case in.K > in.E:
		return fmt.Errorf("top-k %d exceeds the %d experts", in.K, in.E)
	case len(in.Logits) != in.T*in.E:
		return fmt.Errorf("logits hold %d values, want T×E = %d×%d = %d", len(in.Logits), in.T, in.E, in.T*in.E)
	case in.Bias != nil && len(in.Bias) != in.E:
		return fmt.Errorf("bias holds %d values, want one per expert (%d)", len(in.Bias), in.E)
	case in.TokenIDs != nil && len(in.TokenIDs) != in.T:
		return fmt.Errorf("token ids hold %d values, want one per token (%d)", len(in.TokenIDs), in.T)
	case in.Hidden != nil && len(in.Hidden) != in.T*in.H:
		return fmt.Errorf("hidden states hold %d values, want T×H = %d×%d", len(in.Hidden), in.T, in.H)
	case in.Gate != nil && len(in.Gate) != in.E*in.H:
		return fmt.Errorf("gate weights hold %d values, want E×H = %d×%d", len(in.Gate), in.E, in.H)
	}
	for i, v := range in.Logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("logit of token %d, expert %d is %v", i/in.E, i%in.E, v)
		}
	}
	for i, v := range in.Bias {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("bias of expert %d is %v", i, v)
		}
	}
	return nil
}

// row returns token t's logits.
func (in Input) row(t int) []float32 { return in.Logits[t*in.E : (t+1)*in.E] }

// A router's decision for one batch at one layer is a routing.Routing of
// in.T tokens. Each token has K slots; an id of routing.Empty marks an
// empty slot (expert choice gives tokens a varying number of experts, so its
// K is the most any token got). A dropped slot (Routing.Dropped) names the
// expert the token chose but that was over capacity: its weight is 0 and the
// token's hidden state passes that expert by (the residual carries it).

// Drive routes one batch through consecutive layers, handing each call the
// state the previous one returned (st for the first), and returns the
// outputs and the state after the last layer. Every input is validated, and
// every output is checked (ids in range, no repeats) so a faulty router
// fails here, not inside a kernel.
func Drive(r Router, inputs []Input, st State) ([]routing.Routing, State, error) {
	outs := make([]routing.Routing, len(inputs))
	for i, in := range inputs {
		if err := in.Validate(); err != nil {
			return nil, nil, fmt.Errorf("%s: layer %d: %w", r.Name(), in.Layer, err)
		}
		out, next, err := r.Route(in, st)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: layer %d: %w", r.Name(), in.Layer, err)
		}
		if out.M != in.T {
			return nil, nil, fmt.Errorf("%s: layer %d: routed %d tokens, want %d", r.Name(), in.Layer, out.M, in.T)
		}
		if err := CheckRouting(out, in.E); err != nil {
			return nil, nil, fmt.Errorf("%s: layer %d: %w", r.Name(), in.Layer, err)
		}
		outs[i], st = out, next
	}
	return outs, st, nil
}

// CheckRouting checks a router's routing over e experts: well formed (see
// routing.Routing.Validate), and no token names an expert twice.
func CheckRouting(r routing.Routing, e int) error {
	if err := r.Validate(e); err != nil {
		return err
	}
	return r.Distinct(e)
}

// Config carries the settings of the built-in routers. Zero values mean
// "this router's default", which each router's doc comment states.
type Config struct {
	NGroup, TopKGroup int     // group-limited routing (DeepSeek): n_group, topk_group
	Scaling           float64 // routed_scaling_factor
	Renormalize       *bool   // renormalise the top-k weights to sum to 1 (norm_topk_prob)
	CapacityFactor    float64 // switch, expert-choice
	Seed              uint64  // random, random-skewed, hash
	BiasUpdateRate    float64 // deepseek-v3-lossfree: u in b += u·sign(mean load − load)
	Mix               float64 // cross-layer: weight of the previous layer's logits
	Skew              float64 // random-skewed: σ of the experts' log-affinity
}

func (c Config) renorm(def bool) bool {
	if c.Renormalize == nil {
		return def
	}
	return *c.Renormalize
}

func orDefault(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}

func orDefaultInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Factory builds a router from a Config.
// Setting is one field of Config by the name its flag has, with a way to
// give it two different values.
type Setting struct {
	Name string
	set  func(c *Config, i int)
}

// Settings are Config's fields that a router may use.
var Settings = []Setting{
	{"n-group", func(c *Config, i int) { c.NGroup = i + 1 }},
	{"topk-group", func(c *Config, i int) { c.TopKGroup = i + 1 }},
	{"scaling", func(c *Config, i int) { c.Scaling = float64(i + 1) }},
	{"renormalize", func(c *Config, i int) { b := i == 1; c.Renormalize = &b }},
	{"capacity-factor", func(c *Config, i int) { c.CapacityFactor = float64(i + 1) }},
	{"bias-rate", func(c *Config, i int) { c.BiasUpdateRate = 0.001 * float64(i+1) }},
	{"mix", func(c *Config, i int) { c.Mix = 0.25 * float64(i+1) }},
	{"skew", func(c *Config, i int) { c.Skew = float64(i + 1) }},
	{"seed", func(c *Config, i int) { c.Seed = uint64(i + 1) }},
}

// Uses reports whether router name depends on setting s: built with two
// different values of it (the rest from cfg), the routers differ. It asks
// the routers themselves, so routers added with Register are judged too.
func Uses(name string, cfg Config, s Setting) bool {
	var rs [2]Router
	for i := range rs {
		c := cfg
		s.set(&c, i)
		r, err := New(name, c)
		if err != nil {
			return true // cannot tell: assume it does
		}
		rs[i] = r
	}
	return !reflect.DeepEqual(rs[0], rs[1])
}

// UsesBias reports whether router name's selection depends on Input.Bias:
// routed on in (its Bias replaced) with a bias that strongly favours the
// last expert and with none, the outputs differ. Like Uses, it asks the
// router, so registered routers are judged too.
func UsesBias(name string, cfg Config, in Input) bool {
	probe := make([]float32, in.E)
	probe[in.E-1] = 1e3
	var outs [2]routing.Routing
	for i, bias := range [][]float32{nil, probe} {
		r, err := New(name, cfg)
		if err != nil {
			return true // cannot tell: assume it does
		}
		in := in
		in.Bias = bias
		if outs[i], _, err = r.Route(in, nil); err != nil {
			return true
		}
	}
	return !reflect.DeepEqual(outs[0], outs[1])
}

type Factory func(Config) (Router, error)

type entry struct {
	doc string
	f   Factory
}

var (
	regMu    sync.RWMutex
	registry = map[string]entry{}
)

// Register makes a router available by name to New (and so to `mstar route`
// and `mstar ablate router` in a build that registers it). It panics when
// the name is taken, as http.Handle does.
func Register(name, doc string, f Factory) {
	regMu.Lock()
	defer regMu.Unlock()
	if name == "" || f == nil {
		panic("router: Register with an empty name or nil factory")
	}
	if _, dup := registry[name]; dup {
		panic("router: Register called twice for " + name)
	}
	registry[name] = entry{doc: doc, f: f}
}

// ErrUnknown is returned (wrapped) by New for a name nobody registered.
var ErrUnknown = errors.New("unknown router")

// New returns the router registered under name, configured by cfg.
func New(name string, cfg Config) (Router, error) {
	regMu.RLock()
	e, ok := registry[name]
	regMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknown, name, strings.Join(Names(), ", "))
	}
	r, err := e.f(cfg)
	if err != nil {
		return nil, fmt.Errorf("router %s: %w", name, err)
	}
	return r, nil
}

// Names lists the registered routers, sorted.
func Names() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Doc returns the one-line description a router was registered with.
func Doc(name string) string {
	regMu.RLock()
	defer regMu.RUnlock()
	return registry[name].doc
}

// topK writes into dst the indices of the len(dst) largest scores, largest
// first. Ties go to the lower index, so results never depend on sort
// stability. Indices where skip is true (skip may be nil) are never chosen;
// the caller guarantees enough remain.
func topK(dst []int32, scores []float64, skip []bool) {
	k := len(dst)
	if k == 0 {
		return
	}
	better := func(a, b int32) bool { // a ranks before b
		if scores[a] != scores[b] {
			return scores[a] > scores[b]
		}
		return a < b
	}
	if k > 16 {
		idx := make([]int32, 0, len(scores))
		for i := range scores {
			if skip == nil || !skip[i] {
				idx = append(idx, int32(i))
			}
		}
		slices.SortFunc(idx, func(a, b int32) int {
			if better(a, b) {
				return -1
			}
			if better(b, a) {
				return 1
			}
			return 0
		})
		copy(dst, idx[:k])
		return
	}
	n := 0 // insertion into a sorted list of the best n so far
	for i := range scores {
		if skip != nil && skip[i] {
			continue
		}
		c := int32(i)
		if n == k && !better(c, dst[k-1]) {
			continue
		}
		p := n
		if n < k {
			n++
		} else {
			p = k - 1
		}
		for p > 0 && better(c, dst[p-1]) {
			dst[p] = dst[p-1]
			p--
		}
		dst[p] = c
	}
}

// softmaxRow writes softmax(x) into dst, in float64 with the max subtracted.
func softmaxRow(dst []float64, x []float32) {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, float64(v))
	}
	var s float64
	for i, v := range x {
		dst[i] = math.Exp(float64(v) - m)
		s += dst[i]
	}
	for i := range dst {
		dst[i] /= s
	}
}

// LogSumExp returns log Σ exp(x_i), computed stably.
func LogSumExp(x []float32) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - m)
	}
	return m + math.Log(s)
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
