package moe

import (
	"fmt"
	"sort"
	"strings"
)

// Shape is one MoE layer's geometry as one rank computes it: E experts held
// locally, top-K routing, hidden size H, intermediate size I.
type Shape struct {
	E, K, H, I int
}

func (s Shape) String() string {
	return fmt.Sprintf("E%d k%d H%d I%d", s.E, s.K, s.H, s.I)
}

// Validate checks a whole (unsharded) shape: all sizes positive and K ≤ E.
func (s Shape) Validate() error {
	if err := s.validateSizes(); err != nil {
		return err
	}
	if s.K > s.E {
		return fmt.Errorf("shape %v: top-k %d is larger than the number of experts %d", s, s.K, s.E)
	}
	return nil
}

func (s Shape) validateSizes() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"experts", s.E}, {"topk", s.K}, {"hidden", s.H}, {"inter", s.I}} {
		if f.v <= 0 {
			return fmt.Errorf("shape %v: %s must be positive, got %d", s, f.name, f.v)
		}
	}
	return nil
}

// Shard returns the shape one rank computes under tensor parallelism tp
// (I split tp ways) and expert parallelism ep (E split ep ways). K stays the
// global top-k: under EP a token's slots that land on other ranks are dropped
// locally (see Routing.Localize), so K may exceed the local E.
func (s Shape) Shard(tp, ep int) (Shape, error) {
	if err := s.Validate(); err != nil {
		return Shape{}, err
	}
	if tp < 1 || ep < 1 {
		return Shape{}, fmt.Errorf("--tp and --ep must be at least 1, got tp=%d ep=%d", tp, ep)
	}
	if s.I%tp != 0 {
		return Shape{}, fmt.Errorf("--tp %d does not divide the intermediate size %d", tp, s.I)
	}
	if s.E%ep != 0 {
		return Shape{}, fmt.Errorf("--ep %d does not divide the number of experts %d", ep, s.E)
	}
	return Shape{E: s.E / ep, K: s.K, H: s.H, I: s.I / tp}, nil
}

// ExpertBytes is the bf16 weight bytes of one expert (W1 and W2).
func (s Shape) ExpertBytes() int64 { return 3 * int64(s.I) * int64(s.H) * 2 }

// WeightBytes is the bf16 weight bytes of all local experts.
func (s Shape) WeightBytes() int64 { return int64(s.E) * s.ExpertBytes() }

// Flops counts the useful floating-point operations of one forward pass for
// a routing with `slots` computed (token, expert) pairs (M·K minus dropped
// slots): per slot 2·H·2I for W1, 2·I·H for W2 (a multiply-add is 2), plus
// the element-wise SiLU·mul (counted as 4 per intermediate element: the
// exponential counts as one), the routing-weight scale (1 per output element)
// and the top-k combine (1 add per output element per slot).
func (s Shape) Flops(slots int) float64 {
	h, i := float64(s.H), float64(s.I)
	perSlot := 2*h*2*i + 2*i*h + 4*i + h + h
	return float64(slots) * perSlot
}

// Bytes counts the device-memory bytes a forward pass must move at the
// least: the weights of each touched expert read once, x[M,H] read once,
// out[M,H] written once (all bf16), and the routing read once (4-byte ids
// and 4-byte weights). The intermediate buffers of an unfused implementation
// are not counted: this is the floor's byte count, the same for every
// implementation.
func (s Shape) Bytes(m, touchedExperts, slots int) float64 {
	return float64(touchedExperts)*float64(s.ExpertBytes()) +
		2*float64(m)*float64(s.H)*2 + float64(slots)*8
}

// Preset is a model's MoE layer.
type Preset struct {
	Name  string
	Shape Shape
	Note  string // where the numbers come from
}

// Sources: Qwen3 model configs (num_experts, num_experts_per_tok, hidden_size,
// moe_intermediate_size); DeepSeek-V3 config (n_routed_experts 256,
// num_experts_per_tok 8, hidden 7168, moe_intermediate_size 2048); Mixtral
// 8x7B (8 experts, top-2, hidden 4096, intermediate 14336). Qwen3-Omni-30B-A3B:
// thinker text_config E128 k8 H2048 I768, talker text_config E128 k6 H1024
// I384 (shared_expert_intermediate_size 768, not part of this layer), as
// transformers' qwen3_omni_moe configs and vLLM-Omni's configs list them.
var presets = []Preset{
	{"qwen3-30b-a3b", Shape{E: 128, K: 8, H: 2048, I: 768}, "Qwen3-30B-A3B"},
	{"qwen3-235b-a22b", Shape{E: 128, K: 8, H: 4096, I: 1536}, "Qwen3-235B-A22B"},
	{"deepseek-v3", Shape{E: 256, K: 8, H: 7168, I: 2048}, "DeepSeek-V3 routed experts (the shared expert is not part of this layer); use --tp 8 for one GPU's share"},
	{"mixtral-8x7b", Shape{E: 8, K: 2, H: 4096, I: 14336}, "Mixtral-8x7B"},
	{"qwen3-omni-thinker", Shape{E: 128, K: 8, H: 2048, I: 768}, "Qwen3-Omni-30B-A3B thinker"},
	{"qwen3-omni-talker", Shape{E: 128, K: 6, H: 1024, I: 384}, "Qwen3-Omni-30B-A3B talker (routed experts)"},
}

// Presets returns the known model shapes.
func Presets() []Preset { return append([]Preset(nil), presets...) }

// LookupPreset returns the preset with the given name (case-insensitive).
func LookupPreset(name string) (Preset, error) {
	for _, p := range presets {
		if strings.EqualFold(p.Name, name) {
			return p, nil
		}
	}
	names := make([]string, len(presets))
	for i, p := range presets {
		names[i] = p.Name
	}
	sort.Strings(names)
	return Preset{}, fmt.Errorf("unknown model %q: known models are %s (or give --experts --topk --hidden --inter)", name, strings.Join(names, ", "))
}
