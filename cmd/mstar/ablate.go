package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mstar-dev/mstar/bench/ablate"
	"github.com/mstar-dev/mstar/internal/shard"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/kernels/router"
	"github.com/mstar-dev/mstar/reports"
	"github.com/mstar-dev/mstar/reports/results"
)

func init() {
	reports.RegisterRunTable(ablate.AblationSuite, ablate.Table)
	register(func(a *app) *cobra.Command {
		cmd := &cobra.Command{
			Use:   "ablate",
			Short: "Compare design choices of an MoE layer side by side (routers)",
			Long: `ablate runs one ablation study. 'ablate router' routes the same tokens with
many routers and measures what each routing does to expert load and to the
fused-MoE kernel.`,
			Example: `  mstar ablate router --model qwen3-30b-a3b --layers 4`,
			Args:    cobra.ArbitraryArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usageErr("unknown command %q for %q (see 'mstar ablate --help')", args[0], cmd.CommandPath())
				}
				return cmd.Help()
			},
		}
		cmd.AddCommand(newAblateRouter(a))
		return cmd
	})
}

func newAblateRouter(a *app) *cobra.Command {
	var (
		model, device, out, heatmap, gates, tracePath, baseline string
		recordPath, hfConfig, shardSpec                         string
		routers                                                 []string
		gateLayers                                              []int
		experts, topk, hidden, inter                            int
		layers, tokens, batch                                   int
		kTokens, kLayers, kSamples                              int
		zipf, strength, corr                                    float64
		rf                                                      routerFlags
	)
	cmd := &cobra.Command{
		Use:   "router",
		Short: "Routers × metrics: expert load, losses, routing time, fused-MoE time per routing",
		Long: units.Wrap(`ablate router routes one workload — --layers layers of --tokens tokens — with every router (--routers; by default `+
			strings.Join(ablate.DefaultAblationRouters, ", ")+`) and prints a routers × metrics table:`, helpTextWidth, "") + `

  MaxVio     max expert load / mean load − 1 (0 = perfectly balanced)
  balance    mean load / max load (1 = perfectly balanced)
  CV         coefficient of variation of the expert loads
  entropy    entropy of the load distribution / ln E (1 = uniform)
  drop%      (token, expert) assignments dropped for capacity (switch)
  tok-drop%  tokens routed to no expert (switch capacity, expert choice)
  aux        Switch auxiliary loss E·Σ f_i·P_i (1 = balanced)
  z-loss     mean over tokens of (logsumexp of the logits)²
  route µs   time spent in the router for all tokens of a layer
  kernel ms  fused-MoE layer time under this routing (median of every
             sample, after a warm-up that settles); ±95% its interval
  ×uniform   kernel time / kernel time under perfectly uniform routing
  relL2      ‖out − out_baseline‖/‖out_baseline‖ of the MoE output vs --baseline

--hf-config FILE takes the shape from a Hugging Face config.json (as bench
moe does) and the model's own router from its model_type (deepseek_v3,
deepseek_v2, mixtral; softmax-topk, or softmax-topk-norm with norm_topk_prob,
otherwise) with n_group, topk_group, routed_scaling_factor and norm_topk_prob.

Router settings come from the flags (--n-group, --scaling, ...), else from the
model's config for its own router, else the router's defaults; on models
other than DeepSeek-V2, deepseek-v2 takes DeepSeek-V2's 8 groups, keep 3.

Load metrics are means over the layers (each layer's loads count all tokens);
in the results document (--out) result "router" holds each layer's value as a
sample, so 'report show' gives their median, and result "router/layer" each
layer's values, with the expert loads as metric expert_load. --heatmap draws
the loads, layers × experts, one panel per router, as PNG.

The workload: hidden states with a Zipf-skewed expert affinity (--zipf: 0 is
uniform, 1 leaves a few experts far more attractive), the preferred expert's
logit raised by --strength standard deviations, and --correlation between
consecutive layers; gate weights random or read from a safetensors checkpoint
(--gates: model.layers.N.mlp.gate.weight, and DeepSeek-V3's
e_score_correction_bias where present). --routing-file replays a recorded routing
(JSON Lines: a header {"format":"mstar.routing-trace","experts":E,"topk":K},
then one line {"layer":L,"ids":[...],"weights":[...]} per token per layer) as
router "trace"; --routing-out writes the --baseline router's routing in that
format. Tokens are routed in batches of --batch, in order, so stateful
routers (deepseek-v3-lossfree, cross-layer) carry their state from layer to
layer and from batch to batch.

Kernel time is the fused-MoE layer of the model's shape run on the last
--kernel-tokens tokens of the last --kernel-layers layers, --kernel-samples
times, interleaved across routers: on a CUDA device the kernels of 'bench moe'
(device time per call of CUDA-graph replays), else the CPU path
(moe.ForwardCPU, wall clock) — keep --kernel-tokens small there; the table
says how many tokens were used. --kernel-tokens 0 skips the kernel.

Bad input exits 2: k above the experts, groups that do not divide the experts,
a safetensors file that lacks a gate or has the wrong shape, a trace with an
out-of-range expert id.`,
		Example: `  mstar ablate router --model qwen3-30b-a3b --layers 4
  mstar ablate router --model deepseek-v3 --layers 2 --zipf 1.2 --out ablate.json --heatmap load.png
  mstar ablate router --model mixtral-8x7b --routers switch,expert-choice --capacity-factor 1
  mstar ablate router --hf-config testdata/hf/deepseek-v3/config.json --layers 2 --kernel-tokens 0
  mstar ablate router --model qwen3-30b-a3b --gates /models/Qwen3-30B --gate-layers 0,47 --layers 2
  mstar ablate router --model qwen3-30b-a3b --kernel-tokens 0 --routing-out routing.jsonl
  mstar ablate router --model qwen3-30b-a3b --routing-file r.jsonl --routers trace,softmax-topk-norm`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// The heat map is PNG only; another extension would mislabel it.
			if heatmap != "" && strings.ToLower(filepath.Ext(heatmap)) != ".png" {
				return usageErr("--heatmap %s: the heat map is a PNG image: name it .png", heatmap)
			}
			var m router.Model
			var err error
			if hfConfig != "" {
				if cmd.Flags().Changed("model") {
					return usageErr("--hf-config and --model both give the shape: give one")
				}
				c, err := readHFConfig(hfConfig)
				if err != nil {
					return err
				}
				var note string
				if m, note = hfRouterModel(c); note != "" {
					say(a.stderr, "%s", note)
				}
			} else if m, err = router.ModelByName(model); err != nil {
				return usageErr("--model: %v", err)
			}
			custom := false
			for _, o := range []struct {
				flag string
				v    int
				dst  *int
			}{{"experts", experts, &m.E}, {"topk", topk, &m.K}, {"hidden", hidden, &m.H}, {"inter", inter, &m.I}} {
				if cmd.Flags().Changed(o.flag) {
					if err := atLeast(o.flag, o.v, 1, ""); err != nil {
						return err
					}
					*o.dst, custom = o.v, true
				}
			}
			if custom {
				m.Name = fmt.Sprintf("%s(E%d,k%d,H%d,I%d)", m.Name, m.E, m.K, m.H, m.I)
			}
			if m.K > m.E {
				return usageErr("--topk %d exceeds the %d experts", m.K, m.E)
			}
			// 0 layers or tokens are all of a --routing-file's; without one, nothing.
			layersOK, tokensOK := atLeast("layers", layers, 1, ""), atLeast("tokens", tokens, 1, "")
			if tracePath != "" {
				layersOK, tokensOK = atLeast("layers", layers, 0, "0: every layer of --routing-file"), atLeast("tokens", tokens, 0, "0: every token of --routing-file")
			}
			if err := firstErr(layersOK, tokensOK, atLeast("batch", batch, 0, "0: one batch"),
				atLeast("kernel-tokens", kTokens, 0, "0: skip the kernel"), atLeast("kernel-layers", kLayers, 1, ""),
				atLeast("kernel-samples", kSamples, 1, ""), atLeast("zipf", zipf, 0, "0: uniform"),
				atLeast("strength", strength, 0, ""), within("correlation", corr, 0, 1, "")); err != nil {
				return err
			}
			if layers > 0 && kLayers > layers && cmd.Flags().Changed("kernel-layers") {
				return usageErr("--kernel-layers %d exceeds the %d layers routed (--layers)", kLayers, layers)
			}
			cfg, err := rf.config(cmd)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("routers") && len(routers) == 0 { // --routers '' is not "all"
				return usageErr("ablate router: --routers: empty value; give one, or leave the flag out for its default")
			}
			if err := checkNoRepeats("routers", routers); err != nil {
				return err
			}
			// A router setting that no router compared uses would
			// silently not apply. (--seed seeds the workload too.)
			compared := append(append([]string{}, routers...), baseline, m.Router)
			if len(routers) == 0 && tracePath == "" {
				compared = append(compared, ablate.DefaultAblationRouters...)
			}
			for _, s := range router.Settings {
				if s.Name == "seed" || !cmd.Flags().Changed(s.Name) {
					continue
				}
				if !slices.ContainsFunc(compared, func(n string) bool { return n != "" && router.Uses(n, cfg, s) }) {
					say(a.stderr, "warning: --%s: none of the routers compared uses it", s.Name)
				}
			}
			opt := ablate.AblationOptions{
				Model: m, Routers: routers, Config: cfg, Baseline: baseline,
				Layers: layers, Tokens: tokens, Batch: batch,
				Workload:     router.Workload{Alpha: zipf, Strength: strength, Correlation: corr, Seed: rf.seed},
				KernelTokens: kTokens, KernelLayers: kLayers, KernelSamples: kSamples,
				Seed: rf.seed,
			}
			if w := opt.Workload; true {
				w.Tokens = 1 // checked by the suite
				if err := w.Validate(); err != nil {
					return usageErr("%v", err)
				}
			}
			if gates != "" {
				if tracePath != "" {
					return usageErr("--gates and --routing-file: give one (a trace is routing already done)")
				}
				gs, err := router.LoadGates(gates, m.E, m.H, gateLayers, layers)
				if err != nil {
					return badInput(fmt.Errorf("--gates: %w", err))
				}
				opt.Gates = gs
				opt.Layers = len(gs.Layers)
			} else if len(gateLayers) > 0 {
				return usageErr("--gate-layers needs --gates")
			}
			kernelK := m.K
			if tracePath != "" {
				tr, err := a.readTraceFile(tracePath)
				if err != nil {
					return err
				}
				opt.Trace = tr
				kernelK = tr.TopK
				if !cmd.Flags().Changed("layers") {
					opt.Layers = 0 // every layer of the trace
				}
				if !cmd.Flags().Changed("tokens") {
					opt.Tokens = 0 // every token of the trace
				} else if opt.Tokens > tr.Tokens() {
					return usageErr("--tokens %d exceeds the %d tokens of --routing-file %s (0 or leave it out: all of them)", opt.Tokens, tr.Tokens(), tracePath)
				}
			}
			need := opt.HostBytes()
			if kTokens > 0 {
				need += ablate.KernelHostBytes(moe.Shape{E: m.E, K: min(kernelK, m.E), H: m.H, I: m.I})
			}
			if L, T, _ := opt.Dims(); true {
				what := fmt.Sprintf("routing %d layers × %d tokens with %d experts", L, T, m.E)
				if err := checkHostFits(what, need, "try fewer --tokens, --layers or experts"); err != nil {
					return err
				}
			}
			withKernel := kTokens > 0 && kSamples > 0 && kLayers > 0
			sh, err := shard.Parse(shardSpec)
			if err != nil {
				return err
			}
			var res *ablate.Ablation
			run := measurement{suite: ablate.AblationSuite, out: out, shard: sh,
				run: func(ctx context.Context, ms *measuring) (*outcome, error) {
					if !sh.Whole() {
						if opt.Only = pickCells(ms, opt.Cells(), func(r string) string { return "router=" + r }); len(opt.Only) == 0 {
							res = &ablate.Ablation{}
							return &outcome{}, nil
						}
					}
					if withKernel {
						k, note, release := ablate.KernelFor(ms.dev, moe.Shape{E: m.E, K: min(kernelK, m.E), H: m.H, I: m.I}, rf.seed)
						defer release()
						if k == nil {
							opt.KernelTokens, opt.KernelSkipped = 0, note
						}
						opt.UseKernel(k, cmd.Flags().Changed("kernel-tokens"), cmd.Flags().Changed("kernel-samples"))
						if note != "" {
							say(a.stderr, "%s", note)
						}
					}
					last := 0
					opt.Progress = func(what string, done, total int) {
						ms.bar.SetTotal(total)
						ms.bar.Describe(what)
						ms.bar.Add(done - last)
						last = done
					}
					// On an interrupt the router or kernel layer in flight is
					// left out; those done are still printed and written.
					var err error
					if res, err = ablate.RunAblation(ctx, opt); res == nil {
						return nil, err
					}
					// The results are finished together: kernel figures
					// compare every router with the uniform reference.
					o := &outcome{results: res.Results(), warnings: res.Warnings,
						done: units.Plural(len(res.Runs), "router") + " done"}
					ms.sink.Send(o.results...)
					if opt.KernelSkipped != "" {
						o.warnings = append(o.warnings, opt.KernelSkipped)
					}
					return o, err
				},
				table: reports.RunTable,
				after: func(doc *results.Document) error {
					if len(res.Runs) == 0 && doc.Shard != nil {
						return nil // a shard that owns no router
					}
					stopped := slices.Contains(doc.Warnings, results.WarnInterrupted)
					if heatmap != "" && len(res.Runs) > 0 { // none when interrupted in the first router
						f, err := os.Create(heatmap)
						if err != nil {
							return badInput(fmt.Errorf("--heatmap: %w", err))
						}
						if err := reports.WriteLoadHeatMap(f, doc.Results); err != nil {
							f.Close()
							return fmt.Errorf("writing %s: %w", heatmap, err)
						}
						if err := f.Close(); err != nil {
							return fmt.Errorf("writing %s: %w", heatmap, err)
						}
						say(a.stderr, "wrote %s", heatmap)
					}
					if recordPath == "" {
						return nil
					}
					name := baseline
					if name == "" {
						name = m.Router
						if opt.Trace != nil {
							name = ablate.TraceRouter
						}
					}
					tr, err := res.Trace(name)
					switch {
					case err != nil && stopped: // interrupted before that router ran
						say(a.stderr, "--routing-out: not written: %v", err)
						return nil
					case err != nil:
						return badInput(fmt.Errorf("--routing-out: %w", err))
					}
					f, err := os.Create(recordPath)
					if err != nil {
						return badInput(fmt.Errorf("--routing-out: %w", err))
					}
					if err := tr.Write(f); err != nil {
						f.Close()
						return fmt.Errorf("writing %s: %w", recordPath, err)
					}
					if err := f.Close(); err != nil {
						return fmt.Errorf("writing %s: %w", recordPath, err)
					}
					say(a.stderr, "wrote %s (%s's routing)", recordPath, name)
					return nil
				},
				failed: func(*results.Document) error { return nil }, // no gates: the table is the answer
			}
			if withKernel {
				run.device = device
			}
			return a.measure(run)
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "qwen3-30b-a3b", "model preset: "+strings.Join(router.ModelNames(), ", "))
	addHFConfigFlag(cmd, &hfConfig)
	f.IntVar(&experts, "experts", 0, "override the model's number of experts")
	f.IntVar(&topk, "topk", 0, "override the model's experts per token")
	f.IntVar(&hidden, "hidden", 0, "override the model's hidden size")
	f.IntVar(&inter, "inter", 0, "override the model's expert intermediate size")
	f.StringSliceVar(&routers, "routers", nil, "routers to compare, comma-separated (default: all built-ins; 'trace' replays --routing-file)")
	f.StringVar(&baseline, "baseline", "", "router whose MoE output the others are compared with (default: the model's own router; the trace with --routing-file)")
	f.IntVar(&layers, "layers", 4, "layers to route (with --routing-file, 0: all of its layers)")
	f.IntVar(&tokens, "tokens", 4096, "tokens per layer (with --routing-file, 0: all of its tokens)")
	f.IntVar(&batch, "batch", 512, "tokens per batch (stateful routers adapt batch by batch; 0: one batch)")
	f.Float64Var(&zipf, "zipf", 1.0, "Zipf exponent of the experts' affinity (0: uniform)")
	f.Float64Var(&strength, "strength", 2.0, "logit boost of a token's preferred expert, in standard deviations")
	f.Float64Var(&corr, "correlation", 0.5, "correlation of preferences and hidden states between consecutive layers, in [0,1]")
	f.StringVar(&gates, "gates", "", "read gate weights from a safetensors `FILE` or a directory of shards")
	f.IntSliceVar(&gateLayers, "gate-layers", nil, "model layer numbers to read from --gates (default: the first --layers that have a gate)")
	f.StringVar(&tracePath, "routing-file", "", "replay a recorded routing `FILE` as router 'trace'")
	f.StringVar(&recordPath, "routing-out", "", "write the --baseline router's routing of every layer as a routing `FILE`")
	deprecatedAlias(f, "trace", "routing-file")
	deprecatedAlias(f, "record-trace", "routing-out")
	f.IntVar(&kTokens, "kernel-tokens", 16, "tokens per layer timed through the fused-MoE kernel (0: skip the kernel; a GPU takes 1024 unless set)")
	f.IntVar(&kLayers, "kernel-layers", 1, "layers (the last ones) timed through the fused-MoE kernel (--kernel-tokens 0 skips it)")
	f.IntVar(&kSamples, "kernel-samples", 6, "kernel timings per router and layer, after a warm-up that settles (6: the fewest with a 95% interval; a GPU takes 10 unless set)")
	f.StringVarP(&out, "out", "o", "", "write the results document to `FILE`")
	f.StringVar(&heatmap, "heatmap", "", "write the expert-load heat map (layers × experts, a panel per router) as PNG to `FILE`")
	addDeviceFlag(cmd, &device)
	addShardFlag(cmd, &shardSpec, "one router of those compared, the baseline included; every shard runs the baseline as its reference")
	rf.add(cmd)
	return cmd
}
