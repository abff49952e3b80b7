package main

import (
	"github.com/spf13/cobra"

	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/kernels/router"
)

// shapeFlags are the MoE shape flags that bench moe and tune moe share:
// a preset, a Hugging Face config.json, or the four sizes (which also
// override a preset's), and the parallel split.
type shapeFlags struct {
	model, hfConfig                      string
	experts, topk, hidden, inter, tp, ep int
}

func (s *shapeFlags) add(cmd *cobra.Command, modelHelp string) {
	f := cmd.Flags()
	f.StringVar(&s.model, "model", "", modelHelp)
	addHFConfigFlag(cmd, &s.hfConfig)
	f.IntVar(&s.experts, "experts", 0, "number of experts E (custom shape, or override)")
	f.IntVar(&s.topk, "topk", 0, "experts per token k")
	f.IntVar(&s.hidden, "hidden", 0, "hidden size H")
	f.IntVar(&s.inter, "inter", 0, "expert intermediate size I")
	f.IntVar(&s.tp, "tp", 1, "tensor-parallel ranks: each holds I/N")
	f.IntVar(&s.ep, "ep", 1, "expert-parallel ranks: each holds E/N experts")
}

// resolve returns the model's name and global shape from the flags; cmdName
// goes into the usage hint.
func (s *shapeFlags) resolve(cmd *cobra.Command, cmdName string) (string, moe.Shape, error) {
	f := cmd.Flags()
	if err := firstErr(atLeast("tp", s.tp, 1, ""), atLeast("ep", s.ep, 1, "")); err != nil {
		return "", moe.Shape{}, err
	}
	var name string
	var shape moe.Shape
	switch {
	case s.hfConfig != "" && s.model != "":
		return "", moe.Shape{}, usageErr("--hf-config and --model both give the shape: give one")
	case s.hfConfig != "":
		c, err := readHFConfig(s.hfConfig)
		if err != nil {
			return "", moe.Shape{}, err
		}
		name, shape = c.Name, c.Shape
	case s.model != "":
		m, err := router.ModelByName(s.model)
		if err != nil {
			return "", moe.Shape{}, usageErr("--model: %v (or give --experts --topk --hidden --inter)", err)
		}
		name, shape = m.Name, moe.Shape{E: m.E, K: m.K, H: m.H, I: m.I}
	case !f.Changed("experts") || !f.Changed("topk") || !f.Changed("hidden") || !f.Changed("inter"):
		return "", moe.Shape{}, usageErr("give --model NAME, --hf-config FILE or all of --experts --topk --hidden --inter (see 'mstar %s --help')", cmdName)
	}
	custom := false
	for _, o := range []struct {
		name string
		v    int
		dst  *int
	}{{"experts", s.experts, &shape.E}, {"topk", s.topk, &shape.K}, {"hidden", s.hidden, &shape.H}, {"inter", s.inter, &shape.I}} {
		if f.Changed(o.name) {
			*o.dst, custom = o.v, true
		}
	}
	if custom && name != "" {
		name += "-custom"
	}
	return name, shape, nil
}
