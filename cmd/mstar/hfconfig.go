package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/kernels/router"
)

const hfConfigHelp = "read the shape from a Hugging Face config.json `FILE` (or its folder): experts, experts per token, hidden and MoE intermediate size"

// addHFConfigFlag adds --hf-config.
func addHFConfigFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "hf-config", "", hfConfigHelp)
}

// readHFConfig reads --hf-config; a missing, malformed or contradictory key
// is bad input (exit 2), named in the message.
func readHFConfig(path string) (moe.HFConfig, error) {
	c, err := moe.ReadHFConfig(path)
	if err != nil {
		return moe.HFConfig{}, badInput(fmt.Errorf("--hf-config: %w", err))
	}
	return c, nil
}

// hfRouterModel is ablate router's model for a config.json: its shape, and
// the router its model_type uses with the settings the config gives.
func hfRouterModel(c moe.HFConfig) (router.Model, string) {
	m := router.Model{Name: c.Name, E: c.Shape.E, K: c.Shape.K, H: c.Shape.H, I: c.Shape.I}
	m.Config = router.Config{NGroup: c.NGroup, TopKGroup: c.TopKGroup, Scaling: c.Scaling, Renormalize: c.NormTopKProb}
	switch c.ModelType {
	case "deepseek_v3":
		m.Router = "deepseek-v3"
	case "deepseek_v2":
		m.Router = "deepseek-v2"
	case "mixtral":
		m.Router = "mixtral"
	default:
		m.Router = "softmax-topk"
		if c.NormTopKProb != nil && *c.NormTopKProb {
			m.Router = "softmax-topk-norm"
		}
		if c.ModelType != "qwen3_moe" && c.ModelType != "qwen2_moe" && c.ModelType != "qwen3_omni_moe" {
			return m, fmt.Sprintf("--hf-config: model_type %q: taking %s as its own router (softmax over all experts, top-k)", c.ModelType, m.Router)
		}
	}
	return m, ""
}
