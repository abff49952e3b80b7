package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mstar-dev/mstar/internal/jsonpos"
	"github.com/mstar-dev/mstar/internal/limits"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/kernels/router"
	"github.com/mstar-dev/mstar/kernels/routing"
)

func init() {
	register(func(a *app) *cobra.Command {
		var (
			name, logitsPath, biasPath, idsPath string
			rf                                  routerFlags
			topk                                int
		)
		cmd := &cobra.Command{
			Use:   "route",
			Short: "Route router logits with a named router and print each token's experts and weights",
			Long: `route applies one router to logits you give it and prints the routing, so a
router can be checked against another implementation token by token.

--logits is a JSON array of T rows of E numbers (one row per token; "-" reads
stdin); --bias an optional JSON array of E numbers (DeepSeek-V3's
e_score_correction_bias: it steers selection, not the weights). The output is
one JSON object, one row per token, experts in the router's order (largest
score first; ties go to the lower expert id):

  {"experts": 4, "topk": 2, "ids": [[2,1], ...], "weights": [[0.7310586,0.26894143], ...]}

Routers that drop assignments for capacity (switch) add "dropped": [[false,true],
...] (a dropped slot names the expert it was meant for and weighs 0); expert
choice gives tokens a varying number of experts, so its rows vary in length.
The output is a routing file: bench moe and ablate router replay it with
--routing-file (dropped slots compute nothing), except expert choice's rows
shorter than topk.

` + units.Wrap("Routers: "+strings.Join(router.Names(), ", ")+".", helpTextWidth, "") + `
Unset flags take the router's defaults (deepseek-v3: --n-group 8 --topk-group 4
--scaling 2.5 --renormalize; deepseek-v2: one group, scaling 1, no
renormalisation). --topk defaults to 2.

Bad input — k above the number of experts, groups that do not divide the
experts, rows of unequal length, a bias of the wrong length, a setting the
router does not use (--n-group for hash, say) — exits 2 with the problem
named.`,
			Example: `  echo '[[1,2,3,0],[0,0,5,5]]' | mstar route --router softmax-topk --logits - --topk 2 --renormalize
  mstar route --router deepseek-v3 --logits l.json --bias b.json --topk 8 --n-group 8 --topk-group 4
  mstar route --router switch --logits logits.json --topk 1 --capacity-factor 1.0`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				if name == "" {
					return usageErr("route: --router is required (one of %s)", strings.Join(router.Names(), ", "))
				}
				if logitsPath == "" {
					return usageErr("route: --logits is required (a JSON array of T rows of E numbers)")
				}
				if err := atLeast("topk", topk, 1, ""); err != nil {
					return err
				}
				cfg, err := rf.config(cmd)
				if err != nil {
					return err
				}
				r, err := router.New(name, cfg)
				if err != nil {
					return badInput(err)
				}
				// A setting the router ignores would silently not apply.
				if unused, uses := routerFlagUse(cmd, name, cfg); len(unused) > 0 {
					takes := "no router settings"
					if len(uses) > 0 {
						takes = "only " + strings.Join(uses, ", ")
					}
					return usageErr("route: router %s does not use %s (it takes %s)", name, strings.Join(unused, ", "), takes)
				}
				logits, T, E, err := readLogits(a, logitsPath)
				if err != nil {
					return badInput(fmt.Errorf("--logits: %w", err))
				}
				in := router.Input{Logits: logits, T: T, E: E, K: topk}
				if biasPath != "" {
					if in.Bias, err = readVector(biasPath); err != nil {
						return badInput(fmt.Errorf("--bias: %w", err))
					}
					if len(in.Bias) != E {
						return badInput(fmt.Errorf("--bias: %s: %d bias values, want one per expert (%d, the logits' row length)", biasPath, len(in.Bias), E))
					}
				}
				if idsPath != "" {
					data, err := os.ReadFile(idsPath)
					if err != nil {
						return badInput(fmt.Errorf("--token-ids: %w", err))
					}
					if err := json.Unmarshal(data, &in.TokenIDs); err != nil {
						return badInput(fmt.Errorf("--token-ids: %s: want a JSON array of integer token ids: %v", idsPath, err))
					}
					if len(in.TokenIDs) != T {
						return badInput(fmt.Errorf("--token-ids: %s: %d token ids, want one per token (%d)", idsPath, len(in.TokenIDs), T))
					}
				}
				// Drive's steps without its "layer N:" prefix: route has no layers.
				if err := in.Validate(); err != nil {
					return badInput(fmt.Errorf("%s: %w", name, err))
				}
				// A bias the router ignores would silently not apply.
				if in.Bias != nil && !router.UsesBias(name, cfg, in) {
					return usageErr("route: router %s does not use --bias: it routes these logits the same with and without one (deepseek-v3 and deepseek-v3-lossfree steer by a bias)", name)
				}
				out, _, err := r.Route(in, nil)
				if err == nil && out.M != T {
					err = fmt.Errorf("routed %d tokens, want %d", out.M, T)
				}
				if err == nil {
					err = router.CheckRouting(out, E)
				}
				if err != nil {
					return badInput(fmt.Errorf("%s: %w", name, err))
				}
				return writeRouting(a.stdout, out, E)
			},
		}
		f := cmd.Flags()
		f.StringVar(&name, "router", "", "router `NAME` (see the list above)")
		f.StringVar(&logitsPath, "logits", "", "router logits: a JSON array of T rows of E numbers (`FILE`, - for stdin)")
		f.StringVar(&biasPath, "bias", "", "score-correction bias: a JSON array of E numbers (`FILE`)")
		f.StringVar(&idsPath, "token-ids", "", "token vocabulary ids for hash routing: a JSON array of T integers (`FILE`; default: positions)")
		f.IntVar(&topk, "topk", 2, "experts per token (k)")
		rf.add(cmd)
		return cmd
	})
}

// routerFlags are the router settings shared by `route` and `ablate router`.
type routerFlags struct {
	nGroup, topkGroup int
	scaling, cf, rate float64
	mix, skew         float64
	renorm            bool
	seed              uint64
}

func (rf *routerFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&rf.nGroup, "n-group", 0, "group-limited routing: number of expert groups (0: the router's default)")
	f.IntVar(&rf.topkGroup, "topk-group", 0, "group-limited routing: groups kept per token (0: the router's default)")
	f.Float64Var(&rf.scaling, "scaling", 0, "routed_scaling_factor multiplying the weights (0: the router's default)")
	f.BoolVar(&rf.renorm, "renormalize", false, "renormalise the top-k weights to sum to 1 (norm_topk_prob; unset: the router's default)")
	f.Float64Var(&rf.cf, "capacity-factor", 0, "switch / expert-choice capacity factor (0: 1.25 / 1)")
	f.Float64Var(&rf.rate, "bias-rate", 0, "deepseek-v3-lossfree bias update speed u (0: 0.001)")
	f.Float64Var(&rf.mix, "mix", 0, "cross-layer: weight of the previous layer's logits (0: 0.5)")
	f.Float64Var(&rf.skew, "skew", 0, "random-skewed: σ of the experts' log-affinity (0: 1)")
	f.Uint64Var(&rf.seed, "seed", 1, "seed of random, random-skewed and hash routing (and of synthetic workloads)")
}

func (rf *routerFlags) config(cmd *cobra.Command) (router.Config, error) {
	for _, c := range []struct {
		name string
		v    float64
	}{{"n-group", float64(rf.nGroup)}, {"topk-group", float64(rf.topkGroup)}, {"scaling", rf.scaling},
		{"capacity-factor", rf.cf}, {"bias-rate", rf.rate}, {"mix", rf.mix}, {"skew", rf.skew}} {
		if err := atLeast(c.name, c.v, 0, "0: the router's default"); err != nil {
			return router.Config{}, err
		}
	}
	if err := within("mix", rf.mix, 0, 1, "0: 0.5"); err != nil {
		return router.Config{}, err
	}
	cfg := router.Config{NGroup: rf.nGroup, TopKGroup: rf.topkGroup, Scaling: rf.scaling, CapacityFactor: rf.cf,
		Seed: rf.seed, BiasUpdateRate: rf.rate, Mix: rf.mix, Skew: rf.skew}
	if cmd.Flags().Changed("renormalize") {
		r := rf.renorm
		cfg.Renormalize = &r
	}
	return cfg, nil
}

// routerFlagUse splits the router flags into those given on the command
// line that router name ignores, and all it uses ("--seed").
func routerFlagUse(cmd *cobra.Command, name string, cfg router.Config) (unused, uses []string) {
	for _, s := range router.Settings {
		if router.Uses(name, cfg, s) {
			uses = append(uses, "--"+s.Name)
		} else if cmd.Flags().Changed(s.Name) {
			unused = append(unused, "--"+s.Name)
		}
	}
	return unused, uses
}

func readInput(a *app, path string) ([]byte, error) {
	if path == "-" {
		return limits.ReadAll(a.stdin, true)
	}
	return limits.ReadFile(path, true)
}

// readLogits reads a JSON array of T rows of E numbers.
func readLogits(a *app, path string) ([]float32, int, int, error) {
	data, err := readInput(a, path)
	if err != nil {
		return nil, 0, 0, err
	}
	name := path
	if path == "-" {
		name = "stdin"
	}
	var rows [][]float64
	if err := json.Unmarshal(data, &rows); err != nil {
		return nil, 0, 0, fmt.Errorf("%s: want a JSON array of rows of numbers (one row per token): %v", name, jsonpos.Error(data, 0, err))
	}
	if err := jsonpos.NullError(data, 0, "a logit"); err != nil {
		return nil, 0, 0, fmt.Errorf("%s: %v", name, err)
	}
	if len(rows) == 0 {
		return nil, 0, 0, fmt.Errorf("%s: no rows (no tokens)", name)
	}
	E := len(rows[0])
	if E == 0 {
		return nil, 0, 0, fmt.Errorf("%s: row 0 is empty (no experts)", name)
	}
	logits := make([]float32, 0, len(rows)*E)
	for t, r := range rows {
		if len(r) != E {
			return nil, 0, 0, fmt.Errorf("%s: row %d has %s, row 0 has %d: every token needs one logit per expert", name, t, units.Plural(len(r), "number"), E)
		}
		for j, v := range r {
			if math.Abs(v) > math.MaxFloat32 {
				return nil, 0, 0, fmt.Errorf("%s: row %d, column %d: %g is outside float32's range (±%g)", name, t, j, v, math.MaxFloat32)
			}
			logits = append(logits, float32(v))
		}
	}
	return logits, len(rows), E, nil
}

// readVector reads a JSON array of numbers.
func readVector(path string) ([]float32, error) {
	data, err := limits.ReadFile(path, true)
	if err != nil {
		return nil, err
	}
	var v []float64
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("%s: want a JSON array of numbers: %v", path, jsonpos.Error(data, 0, err))
	}
	if err := jsonpos.NullError(data, 0, "a number"); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	out := make([]float32, len(v))
	for i, x := range v {
		if math.Abs(x) > math.MaxFloat32 {
			return nil, fmt.Errorf("%s: element %d: %g is outside float32's range (±%g)", path, i, x, math.MaxFloat32)
		}
		out[i] = float32(x)
	}
	return out, nil
}

// writeRouting prints a routing over e experts as a routing file (the
// one-object form that router.ReadTrace reads), one token per line, weights
// in float32's shortest form. Empty slots (expert choice) are left out.
func writeRouting(w io.Writer, o routing.Routing, e int) error {
	bw := bufio.NewWriter(w)
	rows := func(key string, cell func(i int) string) {
		fmt.Fprintf(bw, "  %q: [\n", key)
		for t := 0; t < o.M; t++ {
			var cells []string
			for j := 0; j < o.K; j++ {
				if i := t*o.K + j; o.IDs[i] >= 0 {
					cells = append(cells, cell(i))
				}
			}
			sep := ","
			if t == o.M-1 {
				sep = ""
			}
			fmt.Fprintf(bw, "    [%s]%s\n", strings.Join(cells, ", "), sep)
		}
		bw.WriteString("  ]")
	}
	fmt.Fprintf(bw, "{\n  \"experts\": %d,\n  \"topk\": %d,\n", e, o.K)
	rows("ids", func(i int) string { return strconv.Itoa(int(o.IDs[i])) })
	bw.WriteString(",\n")
	rows("weights", func(i int) string { return strconv.FormatFloat(float64(o.Weights[i]), 'g', -1, 32) })
	if o.DroppedSlots() > 0 {
		bw.WriteString(",\n")
		rows("dropped", func(i int) string { return strconv.FormatBool(o.Dropped[i]) })
	}
	bw.WriteString("\n}\n")
	return bw.Flush()
}
