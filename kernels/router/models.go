package router

import (
	"fmt"
	"sort"
	"strings"
)

// Model is a real model's MoE layer shape and its native router: the one
// table of model presets, for bench moe (the shape) and ablate router (the
// shape and the router).
type Model struct {
	Name       string
	E, K, H, I int    // experts, top-k, hidden size, expert intermediate size
	Router     string // the registered name of its router
	Config     Config // the router's settings in the model's config.json
	Note       string // which model and which of its layers
}

func yes() *bool { t := true; return &t }
func no() *bool  { f := false; return &f }

// models come from each model's config.json on the Hugging Face hub
// (num_experts / n_routed_experts, num_experts_per_tok, hidden_size,
// moe_intermediate_size, norm_topk_prob, n_group, topk_group,
// routed_scaling_factor). Qwen3-Omni-30B-A3B: thinker text_config E128 k8
// H2048 I768 (Qwen3-30B-A3B's MoE), talker text_config E128 k6 H1024 I384
// (shared_expert_intermediate_size 768, not part of this layer), as
// transformers' qwen3_omni_moe configs and vLLM-Omni's configs list them.
// DeepSeek's shared experts are not part of the layer either.
var models = []Model{
	{Name: "qwen3-30b-a3b", E: 128, K: 8, H: 2048, I: 768, Router: "softmax-topk-norm", Config: Config{Renormalize: yes()}, Note: "Qwen3-30B-A3B"},
	{Name: "qwen3-235b-a22b", E: 128, K: 8, H: 4096, I: 1536, Router: "softmax-topk-norm", Config: Config{Renormalize: yes()}, Note: "Qwen3-235B-A22B"},
	{Name: "deepseek-v3", E: 256, K: 8, H: 7168, I: 2048, Router: "deepseek-v3", Config: Config{NGroup: 8, TopKGroup: 4, Scaling: 2.5, Renormalize: yes()},
		Note: "DeepSeek-V3 routed experts (the shared expert is not part of this layer); use --tp 8 for one GPU's share"},
	{Name: "deepseek-v2", E: 160, K: 6, H: 5120, I: 1536, Router: "deepseek-v2", Config: Config{NGroup: 8, TopKGroup: 3, Scaling: 16, Renormalize: no()},
		Note: "DeepSeek-V2 routed experts (the shared experts are not part of this layer)"},
	{Name: "mixtral-8x7b", E: 8, K: 2, H: 4096, I: 14336, Router: "mixtral", Note: "Mixtral-8x7B"},
	{Name: "qwen3-omni-thinker", E: 128, K: 8, H: 2048, I: 768, Router: "softmax-topk-norm", Config: Config{Renormalize: yes()}, Note: "Qwen3-Omni-30B-A3B thinker"},
	{Name: "qwen3-omni-talker", E: 128, K: 6, H: 1024, I: 384, Router: "softmax-topk-norm", Config: Config{Renormalize: yes()}, Note: "Qwen3-Omni-30B-A3B talker (routed experts)"},
}

// Models returns the presets in the table's order.
func Models() []Model { return append([]Model(nil), models...) }

// ModelByName returns a preset (the name is case-insensitive), or an error
// listing the known ones.
func ModelByName(name string) (Model, error) {
	for _, m := range models {
		if strings.EqualFold(m.Name, name) {
			return m, nil
		}
	}
	return Model{}, fmt.Errorf("unknown model %q: known models are %s", name, strings.Join(ModelNames(), ", "))
}

// ModelNames lists the presets, sorted.
func ModelNames() []string {
	var ns []string
	for _, m := range models {
		ns = append(ns, m.Name)
	}
	sort.Strings(ns)
	return ns
}
