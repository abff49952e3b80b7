package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mstar-dev/mstar/bench"
	benchceil "github.com/mstar-dev/mstar/bench/ceilings"
	moebench "github.com/mstar-dev/mstar/bench/moe"
	"github.com/mstar-dev/mstar/internal/envinfo"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/shard"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/kernels/router"
	"github.com/mstar-dev/mstar/kernels/routing"
	"github.com/mstar-dev/mstar/reports"
	"github.com/mstar-dev/mstar/reports/results"
)

func init() {
	benchSubcommands = append(benchSubcommands, newBenchMoE)
}

func newBenchMoE(a *app) *cobra.Command {
	var (
		sf                                                                                     shapeFlags
		device, out, batches, routing, traceIn, traceOut, config, ceilings, dumpDir, shardSpec string
		samples, tuneSamples, rounds                                                           int
		weightCopies                                                                           int
		seed                                                                                   uint64
		tune, stages                                                                           bool
		pf                                                                                     peerFlags
		fo                                                                                     fanOut
	)
	names := []string{}
	for _, m := range router.Models() {
		lead := fmt.Sprintf("  %-20s %v  ", m.Name, moe.Shape{E: m.E, K: m.K, H: m.H, I: m.I})
		names = append(names, units.Wrap(lead+m.Note, helpTextWidth, strings.Repeat(" ", len(lead))))
	}
	cmd := &cobra.Command{
		Use:   "moe",
		Short: "Benchmark the fused-MoE layer over batch sizes, checked against a float64 reference",
		Long: `moe measures one Mixture-of-Experts layer — for x[M,H] and top-k routing,
out[m] = Σ_j w[m,j]·W2[e]·(silu(W1_gate[e]·x[m]) ⊙ W1_up[e]·x[m]) — in bf16 with
fp32 accumulation, for each batch size M of --batch, on --device.

On CUDA the layer is mstar's own kernels (kernels/moe/moe.cu, compiled by NVRTC
for the device): token-to-expert alignment, a grouped GEMM for W1 with SiLU·mul
fused, a grouped GEMM for W2 with the routing weight fused, and a
deterministic top-k combine, on bf16 tensor cores: a decode kernel streams the
touched experts' weights through registers for small M, mma.sync tiles with a
cp.async pipeline serve the middle, and on Hopper (sm_90a) wgmma tiles fed by
a producer warpgroup (weight tiles by TMA) serve large M. --config picks the
kernels for every batch; without it each batch takes its configuration from
the tuned file for the local shape and the device ('mstar tune moe' writes
them to $MSTAR_MOE_CONFIG_DIR, else $XDG_CACHE_HOME/mstar/moe-configs; the
H200's for the four reference shapes ship in the binary), the nearest tuned
batch within 2× when the file lacks it, else a static table by tokens per
expert; a file tuned on another moe.cu is ignored, saying so. CUDA results
name both in params config and config_source ("--config", "--tune",
"static", "cache:FILE" or "embedded:FILE"). The timed region is all four
launches (alignment included), replayed from a CUDA graph; weights rotate
among copies when the touched experts would fit in L2, and among at least
--weight-copies N copies when given (a small-M time is one draw of where
the weights land; N copies average N draws, and the peers rotate as many).
On the CPU the layer
is moe.ForwardCPU (float32 sums on all cores, AVX512-BF16 or AVX2 where the
CPU has them, the intermediate rounded to bf16 as on the GPU), timed by the
wall clock.

Every batch first runs once on NaN-poisoned buffers and is compared with the
float64 reference (all tokens up to 64, else 64 spread over the batch); a
relative L2 error above 1e-2 fails the batch's correctness gate and the
command exits 1 (after writing --out).

--tune (CUDA) tunes each batch instead of using the static table: every
candidate configuration that applies at that many tokens per expert (decode
kernels, 16- to 256-token tiles of the tiled and tc families) runs once on
poisoned buffers and is checked against the reference as above — a wrong
configuration is rejected with the reason and never picked — the others are
timed (--tune-samples each, and on CUDA each GEMM alone too), then the split
configuration of the fastest gemm1 and the fastest gemm2 (GEMM1+GEMM2) is
checked and timed the same way, and the batch is measured with the fastest.
With --rounds above 1 the first round tunes; later rounds measure its picks.
The batch's result then has a "config" param naming it and a warning listing
what it was chosen over, and every candidate gets a "moe_tune" result (its
tune_latency samples, or why it was rejected, its rel_l2, and on CUDA
tune_gemm1 and tune_gemm2):
  mstar report show --params batch,config --metrics latency,pct_floor tuned.json
  mstar report show --params batch,config --metrics tune_latency,rel_l2 tuned.json

--peers (CUDA) runs the peers in the same call, over the same layer, weights
and routing: the python script scripts/peers/moe_peers.py (embedded) runs
with --python, else $MSTAR_PYTHON, else python3 — which must import torch —
and times torch-loop, torch-grouped_mm, sglang's or vLLM's Triton fused_moe
(when importable), triton-ref (the fused_experts of --triton-peer PATH, e.g.
shared/peers' triton_moe_ref.py) and cublas-bmm (a bound, not a layer: the
two GEMMs as cuBLAS batched GEMMs over balanced slots, GEMMs only). Every
peer passes the same correctness gate (rel L2 ≤ 1e-2 against float64). The
table after mstar's gives per batch each peer's µs and peer/mstar (above 1:
mstar is faster), the best peer, and mstar's % of floor; a peer that cannot
run is "unmeasured" with the reason, never a zero. Without a python that
has torch it says why, once, and mstar's rows stand. --out holds the
peers' results too (param impl).

--stages also times each stage of the pass — alignment, gemm1 (W1 with
SiLU·mul), gemm2 (W2 with the routing weight), combine — as "moe_stage"
results with a "stage" param: each one's latency, its share of the pass, and
for the GEMMs TFLOP/s, GB/s and % of its own floor (its weights and
activations at the read ceiling, its flops at the gemm ceiling): which kernel
leaves time on the table. On CUDA each stage's kernels are replayed alone,
the same way as the pass (a graph of back-to-back calls, weights rotated);
on the CPU each stage is timed within further full passes.

Per batch: latency (µs, median and 95% CI), TFLOP/s, GB/s, each as % of the
device's ceilings (measured quickly first, or read from --ceilings FILE), and
% of floor = max(bytes / read ceiling, flops / gemm ceiling) / latency. %bw
is of the streaming-read ceiling (the d2d copy ceiling, with a warning, when a
--ceilings FILE has no read ceiling); a % above 105 warns, naming its ceiling.
Flops: per computed (token, expert) slot 2·H·2I (W1) + 2·I·H (W2) + 4·I
(SiLU·mul) + 2·H (weight, combine). Bytes: the weights of each touched expert
once, x and out (bf16) once, the routing ids and weights once.

Shapes: --model NAME, --hf-config FILE (a Hugging Face config.json: the
expert count from num_experts, num_local_experts or n_routed_experts, top-k
from num_experts_per_tok, hidden_size, and moe_intermediate_size, else
intermediate_size as in Mixtral; a missing or contradictory key exits 2
naming it), or --experts --topk --hidden --inter (these also override a
preset's or a file's values). --tp N splits the intermediate size over N
ranks and --ep N the experts (rank 0 is measured: it holds experts
[0, E/N); a token's slots on other ranks are dropped from the local compute).

Routing: uniform random by default (k distinct experts per token, softmax
weights), --routing zipf:ALPHA for skewed expert load, or --routing-file
FILE to replay recorded routing, in the routing file format of ablate router
(JSON Lines: a header {"format":"mstar.routing-trace","experts":E,"topk":k},
then one {"layer":L,"ids":[e,...],"weights":[w,...]} per token; the first
layer replays) or as one object
  {"experts": E, "topk": k, "ids": [[e, ...], ...], "weights": [[w, ...], ...]}
with one row of k distinct global expert ids per token ("weights" optional:
1/k; "dropped" optional, slots a router dropped for capacity, which compute
nothing), as 'mstar route' prints it. Batch M uses the first M tokens (a
file repeats when shorter). --routing-out FILE writes the routing used as a
routing file (JSON Lines; ablate router --routing-file and the peers in
scripts/peers replay it); a routing with dropped slots is not written.

Models:
` + strings.Join(names, "\n"),
		Example: `  mstar bench moe --model qwen3-30b-a3b --batch 1,16 --device cpu
  mstar bench moe --model deepseek-v3 --tp 8 --device cuda:0 --out ds-tp8.json
  mstar bench moe --hf-config testdata/hf/qwen3-30b-a3b/config.json --batch 1,16 --device cpu
  mstar bench moe --model qwen3-30b-a3b --routing zipf:1.2 --batch 64,1024 --out zipf.json
  mstar bench moe --experts 64 --topk 4 --hidden 1024 --inter 512 --routing-file routing.jsonl
  mstar bench moe --model mixtral-8x7b --batch 4096 --config tiled:bm=128,bn=128,bk=32,wm=2,wn=4
  mstar bench moe --model qwen3-30b-a3b --batch 256,4096 --config tc:128x256k64s3 --device cuda:0
  mstar bench moe --model qwen3-235b-a22b --batch 1,64,4096 --tune --device cuda:0 --out tuned.json
  mstar bench moe --model mixtral-8x7b --batch 256,4096 --stages --device cuda:0
  mstar bench moe --model qwen3-235b-a22b --batch 1,4,8 --weight-copies 4 --device cuda:0
  mstar bench moe --model deepseek-v3 --tp 8 --batch 1 --device cuda:0 --config skinny:nt=1,gv=1
  mstar bench moe --model qwen3-30b-a3b --peers --triton-peer .dev/peers/triton_moe_ref.py`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			name, shape, err := sf.resolve(cmd, "bench moe")
			if err != nil {
				return err
			}
			if err := atLeast("rounds", rounds, 1, ""); err != nil {
				return err
			}
			sh, err := shard.Parse(shardSpec)
			if err != nil {
				return err
			}
			if err := fo.check(cmd, "routing-out", "dump-dir"); err != nil {
				return err
			}
			opt := moebench.MoEOptions{Model: name, Shape: shape, TP: sf.tp, EP: sf.ep, Routing: routing, Samples: samples, Seed: seed, DumpDir: dumpDir,
				Tune: tune, TuneSamples: tuneSamples, Stages: stages, Rounds: rounds, WeightCopies: weightCopies}
			if batches != "" {
				bs, err := parseBatches(batches)
				if err != nil {
					return usageErr("--batch: %v", err)
				}
				opt.Batches = bs
			}
			if config != "" {
				c, err := moe.ParseConfig(config)
				if err != nil {
					return usageErr("--config: %v", err)
				}
				opt.Config = c
			}
			if tune && opt.Config.Kernel != "" {
				return usageErr("--tune tries every candidate configuration: leave --config out (or auto)")
			}
			if traceIn != "" {
				if f.Changed("routing") {
					return usageErr("--routing and --routing-file exclude each other")
				}
				r, err := a.readRoutingFile(traceIn, opt.Shape.E)
				if err != nil {
					return err
				}
				if traceOut != "" && r.DroppedSlots() > 0 {
					// Said before the run, not after it.
					return usageErr("--routing-out: routing file %s has %d dropped slots, which --routing-out does not record (it replays as it is)", traceIn, r.DroppedSlots())
				}
				opt.Trace, opt.TraceName = &r, traceIn
			}
			if _, err := moebench.PrepareMoE(&opt); err != nil {
				return badInput(err)
			}
			dumpDir, err := pf.prepare(dumpDir)
			if err != nil {
				return err
			}
			defer pf.cleanup()
			opt.DumpDir = dumpDir
			if dumpDir != "" {
				if err := os.MkdirAll(dumpDir, 0o755); err != nil {
					return badInput(fmt.Errorf("--dump-dir: %w", err))
				}
			}
			if ceilings != "" {
				c, err := benchceil.ReadCeilings(ceilings)
				if err != nil {
					return badInput(fmt.Errorf("--ceilings: %w", err))
				}
				opt.Ceilings = c
			}
			if fo.devices != "" {
				fo.spec = shardSpec
				return a.runFanOut(fo, "bench moe", out, nil)
			}
			var rep *moebench.MoEReport
			batches := func(dev gpu.Device) int {
				if len(opt.Batches) > 0 {
					return len(opt.Batches)
				}
				if dev.Info().Backend == gpu.CUDA {
					return len(moebench.DefaultGPUBatches)
				}
				return len(moebench.DefaultCPUBatches)
			}
			var extra []results.Result // the peers' rows
			var peerWarnings []string
			return a.measure(measurement{suite: "bench moe", device: device, out: out, shard: sh,
				// Before the run picks the shard's batches: its part of the whole.
				steps: func(dev gpu.Device) int { return rounds*(len(shard.Pick(sh, make([]struct{}, batches(dev))))+1) + 1 },
				run: func(ctx context.Context, m *measuring) (*outcome, error) {
					if !sh.Whole() {
						// A cell is one batch size of the whole sweep.
						all := opt.Batches
						if len(all) == 0 {
							all = moebench.DefaultCPUBatches
							if m.dev.Info().Backend == gpu.CUDA {
								all = moebench.DefaultGPUBatches
							}
						}
						opt.Batches = pickCells(m, all, func(b int) string { return "batch=" + strconv.Itoa(b) })
						if len(opt.Batches) == 0 {
							rep = &moebench.MoEReport{}
							return &outcome{}, nil
						}
					}
					if opt.Ceilings != nil {
						if err := opt.Ceilings.Matches(m.dev.Info()); err != nil {
							return nil, badInput(fmt.Errorf("--ceilings %s: %w", ceilings, err))
						}
					}
					if len(opt.Batches) == 0 && m.dev.Info().Backend != gpu.CUDA {
						say(a.stderr, "on the CPU the default sweep is --batch %s (the GPU's goes to 4096)", moe.JoinBatches(moebench.DefaultCPUBatches))
					}
					total := batches(m.dev)
					opt.Sink = m.sink
					opt.Progress = func(step string) {
						m.bar.Describe(step)
						if strings.HasPrefix(step, "M=") || step == "weights" {
							m.bar.Add(1)
						}
					}
					var err error
					rep, err = moebench.RunMoE(ctx, m.dev, opt)
					if rep == nil {
						return nil, err
					}
					if err == nil && pf.on {
						// The peers over the same layer, weights and routing,
						// as results of the same document; their comparison
						// is printed after mstar's table.
						peerDoc := results.NewDocument("bench moe", a.args, envinfo.Collect(m.dev))
						peerDoc.Results = append(append(peerDoc.Results, rep.Results...), rep.Ceilings.Results()...)
						n := len(peerDoc.Results)
						perr := pf.run(ctx, a, m.dev.Info(), opt, rep, peerDoc, dumpDir)
						extra = peerDoc.Results[n:]
						peerWarnings = peerDoc.Warnings
						if perr != nil {
							if ctx.Err() == nil {
								return nil, perr
							}
							err = perr // interrupted in the peers: mstar's rows are still written
						}
					}
					if rep.Compile != "" {
						say(a.stderr, "%s", rep.Compile)
					}
					o := &outcome{warnings: rep.Warnings, rounds: rep.Rounds, done: fmt.Sprintf("%d of %d batches done", rep.Batches, total)}
					if rounds > 1 {
						o.done = fmt.Sprintf("%d of %d batches done in round %d of %d", rep.Batches, total, min(rep.Rounds+1, rounds), rounds)
					}
					// The ceilings the percentages are of, measured or read,
					// travel with the results (the peers read them from here too).
					o.results = append(append(rep.Results, rep.Ceilings.Results()...), extra...)
					o.warnings = append(o.warnings, peerWarnings...)
					if rep.KernelsID != "" {
						o.env = results.Env{"moe_kernels": rep.KernelsID}
					}
					return o, err
				},
				table: reports.RunTable,
				after: func(doc *results.Document) error {
					if traceOut != "" && rep.Routing.M > 0 { // none when interrupted before it was drawn
						return writeRoutingFile(traceOut, rep.Routing, opt.Shape.E)
					}
					return nil
				},
				failed: func(doc *results.Document) error {
					if rep.Failed() {
						return failed("correctness gate failed:\n  %s", strings.Join(doc.Failed(), "\n  "))
					}
					return nil
				},
			})
		},
	}
	f := cmd.Flags()
	sf.add(cmd, "model preset (see the list above)")
	f.StringVar(&batches, "batch", "", "comma-separated token counts (default 1,2,4,…,4096 on a GPU; 1,4,16,64 on the CPU)")
	addDeviceFlag(cmd, &device)
	f.StringVarP(&out, "out", "o", "", "write the results document to `FILE`")
	f.StringVar(&routing, "routing", "uniform", "routing: uniform or zipf:ALPHA")
	f.StringVar(&traceIn, "routing-file", "", "replay routing from `FILE` (format above)")
	deprecatedAlias(f, "routing-trace", "routing-file")
	f.StringVar(&traceOut, "routing-out", "", "write the routing used to `FILE`")
	f.IntVar(&samples, "samples", 0, "timed samples per batch and round (0: 20 on CUDA, 6 on the CPU)")
	f.IntVar(&rounds, "rounds", bench.DefaultRounds, "repeat the whole sweep this many times, interleaved, so that 'report diff' sees the noise between rounds")
	f.Uint64Var(&seed, "seed", 1, "seed of weights, inputs and routing")
	f.StringVar(&config, "config", "auto", "kernels: auto, skinny:nt=1|2|4[,fc=1][,sa=1][,gv=1], tiled:NAME|bm=…,bn=…,bk=…,wm=…,wn=…,stages=…, tc:NAME|bm=…,…,gm=…,minb=…, (Hopper) wg:nc=1|2,bn=…,stages=…,gm=…[,pp=1][,tma=1][,mc=1|2][,l2=4], or GEMM1+GEMM2, each GEMM its own; ,pl=1 on a GEMM (sm_90+) launches it programmatically")
	f.BoolVar(&tune, "tune", false, "CUDA: per batch, check and time every candidate configuration and measure with the fastest correct one")
	f.BoolVar(&stages, "stages", false, "also time each stage of the pass (align, gemm1, gemm2, combine), each GEMM against its own floor")
	f.IntVar(&tuneSamples, "tune-samples", 6, "timed samples per candidate under --tune (6, also for 0: the fewest that give a 95% interval)")
	f.IntVar(&weightCopies, "weight-copies", 0, weightCopiesUsage)
	f.StringVar(&ceilings, "ceilings", "", "read the device's ceilings from a results `FILE` of 'mstar bench ceilings' instead of measuring them")
	pf.add(cmd)
	addShardFlag(cmd, &shardSpec, "one batch size")
	fo.add(cmd)
	f.StringVar(&dumpDir, "dump-dir", "", "write each batch's output as raw bf16 to `DIR`/out-M<batch>.bf16 (for the peers' cross-check)")
	return cmd
}

// maxBatch bounds --batch: past it the memory estimates overflow int64
// (2^59 tokens panicked in the routing instead of failing the check), and
// no layer runs 2^30 tokens at once.
const maxBatch = 1 << 30

func parseBatches(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		n, err := strconv.Atoi(p)
		if errors.Is(err, strconv.ErrRange) || err == nil && n > maxBatch {
			return nil, fmt.Errorf("%s tokens: at most %d", p, maxBatch)
		}
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive token count", p)
		}
		out = append(out, n)
	}
	if n, ok := firstRepeat(out); ok {
		return nil, fmt.Errorf("%d is listed twice", n) // two results of one key would merge in report
	}
	return out, nil
}

// readTraceFile reads --routing-file path, saying the file's warnings on
// stderr.
func (a *app) readTraceFile(path string) (*router.Trace, error) {
	tr, err := router.ReadTraceFile(path)
	if err != nil {
		return nil, badInput(fmt.Errorf("--routing-file: %w", err))
	}
	for _, w := range tr.Warnings {
		say(a.stderr, "warning: --routing-file: %s", w)
	}
	return tr, nil
}

// readRoutingFile is the routing of --routing-file path's first layer, for a
// layer of e experts (global ids), as bench and tune moe replay it.
func (a *app) readRoutingFile(path string, e int) (routing.Routing, error) {
	tr, err := a.readTraceFile(path)
	if err != nil {
		return routing.Routing{}, err
	}
	if tr.Experts != e {
		return routing.Routing{}, usageErr("routing file %s is over %d experts, the shape has %d", path, tr.Experts, e)
	}
	if len(tr.Layers) > 1 {
		say(a.stderr, "routing file %s has %d layers; replaying its first (layer %d)", path, len(tr.Layers), tr.Layers[0])
	}
	return tr.Routings[0], nil
}

// writeRoutingFile writes a routing over e experts as a one-layer routing file.
func writeRoutingFile(path string, r routing.Routing, e int) error {
	tr, err := router.TraceFromRoutings(e, []routing.Routing{r})
	if err != nil {
		return fmt.Errorf("writing routing file %s: %w", path, err)
	}
	f, err := os.Create(path)
	if err != nil {
		return badInput(fmt.Errorf("--routing-out: %w", err))
	}
	if err := tr.Write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing routing file %s: %w", path, err)
	}
	return f.Close()
}

// weightCopiesUsage is --weight-copies' help, shared by bench moe and tune moe.
const weightCopiesUsage = "time each batch over at least `N` copies of the weights at other device addresses, every sample rotating through them " +
	"(CUDA; 0: as many as keep the touched experts out of L2): a small-M time is one draw of where the weights land, and N of 3 or more averages the draws"
