package router

import (
	"fmt"
	"sort"
	"strings"
)

// Model is a real model's MoE layer shape and its native router.
type Model struct {
	Name       string
	E, K, H, I int    // experts, top-k, hidden size, expert intermediate size
	Router     string // the registered name of its router
	Config     Config // the router's settings in the model's config.json
}

func yes() *bool { t := true; return &t }
func no() *bool  { f := false; return &f }

// models come from each model's config.json on the Hugging Face hub
// (num_experts / n_routed_experts, num_experts_per_tok, hidden_size,
// moe_intermediate_size, norm_topk_prob, n_group, topk_group,
// routed_scaling_factor); the Qwen3-Omni thinker and talker shapes are
// those of kernels/moe's presets of the same names (the thinker's MoE is
// Qwen3-30B-A3B's; the talker's E128 k6 H1024 I384).
var models = map[string]Model{
	"qwen3-30b-a3b":      {Name: "qwen3-30b-a3b", E: 128, K: 8, H: 2048, I: 768, Router: "softmax-topk-norm", Config: Config{Renormalize: yes()}},
	"qwen3-235b-a22b":    {Name: "qwen3-235b-a22b", E: 128, K: 8, H: 4096, I: 1536, Router: "softmax-topk-norm", Config: Config{Renormalize: yes()}},
	"qwen3-omni-thinker": {Name: "qwen3-omni-thinker", E: 128, K: 8, H: 2048, I: 768, Router: "softmax-topk-norm", Config: Config{Renormalize: yes()}},
	"qwen3-omni-talker":  {Name: "qwen3-omni-talker", E: 128, K: 6, H: 1024, I: 384, Router: "softmax-topk-norm", Config: Config{Renormalize: yes()}},
	"deepseek-v3":        {Name: "deepseek-v3", E: 256, K: 8, H: 7168, I: 2048, Router: "deepseek-v3", Config: Config{NGroup: 8, TopKGroup: 4, Scaling: 2.5, Renormalize: yes()}},
	"deepseek-v2":        {Name: "deepseek-v2", E: 160, K: 6, H: 5120, I: 1536, Router: "deepseek-v2", Config: Config{NGroup: 8, TopKGroup: 3, Scaling: 16, Renormalize: no()}},
	"mixtral-8x7b":       {Name: "mixtral-8x7b", E: 8, K: 2, H: 4096, I: 14336, Router: "mixtral"},
}

// ModelByName returns a preset, or an error listing the known ones.
func ModelByName(name string) (Model, error) {
	m, ok := models[name]
	if !ok {
		return Model{}, fmt.Errorf("unknown model %q (known: %s)", name, strings.Join(ModelNames(), ", "))
	}
	return m, nil
}

// ModelNames lists the presets, sorted.
func ModelNames() []string {
	var ns []string
	for n := range models {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}
