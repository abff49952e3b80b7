package moe

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/kernels/router"
)

// The saved config.json files (their published values) give the presets'
// shapes, and name the keys they came from.
func TestHFConfigPresets(t *testing.T) {
	for _, tt := range []struct {
		dir, preset, expertsKey, interKey string
	}{
		{"qwen3-30b-a3b", "qwen3-30b-a3b", "num_experts", "moe_intermediate_size"},
		{"qwen3-235b-a22b", "qwen3-235b-a22b", "num_experts", "moe_intermediate_size"},
		{"deepseek-v3", "deepseek-v3", "n_routed_experts", "moe_intermediate_size"},
		{"mixtral-8x7b", "mixtral-8x7b", "num_local_experts", "intermediate_size"},
	} {
		t.Run(tt.dir, func(t *testing.T) {
			c, err := ReadHFConfig(filepath.Join("..", "..", "testdata", "hf", tt.dir, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			m, err := router.ModelByName(tt.preset)
			if err != nil {
				t.Fatal(err)
			}
			if want := (Shape{E: m.E, K: m.K, H: m.H, I: m.I}); c.Shape != want {
				t.Errorf("shape %v, preset %s is %v", c.Shape, tt.preset, want)
			}
			if c.Name != tt.dir {
				t.Errorf("name %q, want %q (the folder)", c.Name, tt.dir)
			}
			if c.From["experts"] != tt.expertsKey || c.From["inter"] != tt.interKey {
				t.Errorf("keys %v, want experts from %s and inter from %s", c.From, tt.expertsKey, tt.interKey)
			}
		})
	}
	// A folder works as well as its config.json; DeepSeek's router settings come along.
	c, err := ReadHFConfig(filepath.Join("..", "..", "testdata", "hf", "deepseek-v3"))
	if err != nil {
		t.Fatal(err)
	}
	if c.NGroup != 8 || c.TopKGroup != 4 || c.Scaling != 2.5 || c.NormTopKProb == nil || !*c.NormTopKProb || c.ScoringFunc != "sigmoid" || c.ModelType != "deepseek_v3" {
		t.Errorf("deepseek-v3 router settings: %+v", c)
	}
	// With --tp 8 the shape shards as the preset does.
	local, err := c.Shape.Shard(8, 1)
	if err != nil || local != (Shape{E: 256, K: 8, H: 7168, I: 256}) {
		t.Errorf("deepseek-v3 tp 8: %v, %v", local, err)
	}
}

func TestHFConfigBad(t *testing.T) {
	for _, tt := range []struct {
		name, json, key, msg string
	}{
		{"not moe", `{"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32}`, "num_experts", "missing: the config has none of num_experts, num_local_experts, n_routed_experts (is it a mixture-of-experts model?)"},
		{"no topk", `{"num_experts": 64, "hidden_size": 1024, "moe_intermediate_size": 512}`, "num_experts_per_tok", "missing"},
		{"no hidden", `{"num_experts": 64, "num_experts_per_tok": 4, "moe_intermediate_size": 512}`, "hidden_size", "missing"},
		{"no inter", `{"num_experts": 64, "num_experts_per_tok": 4, "hidden_size": 1024}`, "moe_intermediate_size", "none of moe_intermediate_size, intermediate_size"},
		{"synonyms disagree", `{"num_experts": 64, "num_local_experts": 32, "num_experts_per_tok": 4, "hidden_size": 1024, "intermediate_size": 512}`, "num_experts/num_local_experts", "contradictory: num_experts is 64 but num_local_experts is 32"},
		{"topk synonyms disagree", `{"num_local_experts": 32, "num_experts_per_tok": 4, "experts_per_token": 2, "hidden_size": 1024, "intermediate_size": 512}`, "num_experts_per_tok/experts_per_token", "contradictory"},
		{"k above E", `{"num_experts": 4, "num_experts_per_tok": 8, "hidden_size": 1024, "intermediate_size": 512}`, "num_experts_per_tok/num_experts", "8 experts per token of 4 experts"},
		{"groups", `{"n_routed_experts": 64, "num_experts_per_tok": 4, "hidden_size": 1024, "moe_intermediate_size": 512, "n_group": 6}`, "n_group/n_routed_experts", "6 groups do not divide 64 experts"},
		{"not an integer", `{"num_experts": "many", "num_experts_per_tok": 4, "hidden_size": 1024, "intermediate_size": 512}`, "num_experts", `want a positive integer, got "many"`},
		{"fraction", `{"num_experts": 64, "num_experts_per_tok": 4, "hidden_size": 1024.5, "intermediate_size": 512}`, "hidden_size", "want a positive integer"},
		{"zero", `{"num_experts": 64, "num_experts_per_tok": 0, "hidden_size": 1024, "intermediate_size": 512}`, "num_experts_per_tok", "want a positive integer, got 0"},
		{"not json", `{"num_experts": 64,`, "(file)", "not one JSON object: line 1, column 20: unexpected end of input"},
		{"array", `[1, 2]`, "(file)", "not one JSON object: line 1, column 1: the document: expected an object, found array"},
		{"trailing data", "{\"num_experts\": 64}\n xx", "(file)", "not one JSON object: line 2, column 2: unexpected data after the object"},
		// A repeated key is refused, not read as its last value; nested too.
		{"duplicate key", "{\"num_experts\": 128,\n \"num_experts\": 64, \"num_experts_per_tok\": 8, \"hidden_size\": 1024, \"intermediate_size\": 512}",
			"num_experts", "line 2, column 2: duplicate key (first at line 1, column 2)"},
		{"duplicate nested key", `{"num_experts": 64, "num_experts_per_tok": 8, "hidden_size": 1024, "intermediate_size": 512,
			"rope_scaling": {"factor": 4.0, "type": "yarn", "factor": 8.0}}`, "rope_scaling.factor", "line 2, column 52: duplicate key (first at line 2, column 21)"},
		{"nested missing", `{"text_config": {"num_experts": 64, "hidden_size": 1024, "moe_intermediate_size": 512}}`, "text_config.num_experts_per_tok", "missing"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseHFConfig([]byte(tt.json), "x/config.json")
			var he *HFConfigError
			if !errors.As(err, &he) {
				t.Fatalf("err %v, want an *HFConfigError", err)
			}
			if he.Key != tt.key || !strings.Contains(he.Msg, tt.msg) || !strings.HasPrefix(err.Error(), "x/config.json: "+tt.key+": ") {
				t.Errorf("got key %q msg %q (%v), want key %q and a message with %q", he.Key, he.Msg, err, tt.key, tt.msg)
			}
		})
	}
}

func TestHFConfigNestedAndFloats(t *testing.T) {
	c, err := ParseHFConfig([]byte(`{"model_type": "qwen3_omni_moe", "_name_or_path": "Org/Omni-Thinker/",
		"text_config": {"num_experts": 128, "num_experts_per_tok": 8, "hidden_size": 2048.0, "moe_intermediate_size": 768, "num_local_experts": null}}`), "c.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.Shape != (Shape{E: 128, K: 8, H: 2048, I: 768}) || c.From["hidden"] != "text_config.hidden_size" || c.Name != "omni-thinker" {
		t.Errorf("got %+v", c)
	}
}

// The same key in two different objects is not a duplicate.
func TestHFConfigSiblingKeys(t *testing.T) {
	c, err := ParseHFConfig([]byte(`{"num_experts": 64, "num_experts_per_tok": 8, "hidden_size": 1024, "intermediate_size": 512,
		"rope_scaling": {"factor": 4.0, "type": "yarn"}, "quantization_config": {"factor": 2, "type": "fp8", "modules": [{"type": "a"}, {"type": "b"}]},
		"text_config": {"num_experts": 64}}`), "c.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.Shape != (Shape{E: 64, K: 8, H: 1024, I: 512}) {
		t.Errorf("shape %v", c.Shape)
	}
}
