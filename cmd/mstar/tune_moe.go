package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	ceilbench "github.com/mstar-dev/mstar/bench/ceilings"
	moebench "github.com/mstar-dev/mstar/bench/moe"
	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/shard"
	"github.com/mstar-dev/mstar/internal/version"
	"github.com/mstar-dev/mstar/kernels/moe"
	"github.com/mstar-dev/mstar/reports"
	"github.com/mstar-dev/mstar/reports/results"
)

func init() {
	register(func(a *app) *cobra.Command {
		cmd := &cobra.Command{
			Use:   "tune",
			Short: "Tune kernel settings for this device and write them where bench finds them (moe)",
			Long: `tune searches kernel settings on this device and writes them to files that
'mstar bench' loads by itself. 'tune moe' tunes the fused-MoE kernels.`,
			Example: `  mstar tune moe --model qwen3-30b-a3b --device cuda:0`,
			Args:    cobra.ArbitraryArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usageErr("unknown command %q for %q (see 'mstar tune --help')", args[0], cmd.CommandPath())
				}
				return cmd.Help()
			},
		}
		cmd.AddCommand(newTuneMoE(a))
		return cmd
	})
}

func newTuneMoE(a *app) *cobra.Command {
	var (
		sf                                                                   shapeFlags
		device, out, batches, routing, routingFile, dir, ceilings, shardSpec string
		shortlist                                                            string
		samples, tuneSamples, rounds, finalists, shortlistKeep               int
		weightCopies                                                         int
		seed                                                                 uint64
		force                                                                bool
		threshold                                                            float64
		fo                                                                   fanOut
	)
	cmd := &cobra.Command{
		Use:   "moe",
		Short: "Tune the fused-MoE kernels' tile settings per batch size and save them for bench moe",
		Long: `moe tunes the fused-MoE layer of one shape on --device, batch by batch: every
candidate configuration (moe.Candidates: decode kernels, 16- to 256-token
tiles of the tiled and tc families) runs once on NaN-poisoned buffers and is
checked against the float64 reference (rel L2 ≤ 1e-2, every element
written) — a wrong candidate is rejected with the reason and never chosen —
and the others are timed (--tune-samples each, CUDA-graph replays with the
weights rotated past L2, as bench moe times them). On CUDA two more steps
follow, each candidate checked the same way: the split of the fastest gemm1
and the fastest gemm2 (GEMM1+GEMM2), and of each with the fastest other GEMM
on its own token blocks (a gemm2 on other blocks adds an alignment launch
that no GEMM's own time shows), and, on sm_90 and newer, the fastest so
far with gemm1, gemm2 and both launched programmatically (pl=1: a kernel's
blocks start while the one before it finishes). The fastest is written to
a JSON file for (E, N = local intermediate size, K = hidden size, top-k,
dtype, device name), holding per batch the configuration, its timings, the
static table's, what was rejected, the date, the mstar commit and the
kernels' version: a hash of the parts of moe.cu its candidates compile
from (the wgmma and the gv sections only where such a configuration was a
candidate). Batches tuned on other kernels are ignored, with a warning
saying which, and tuned again; so a change to the wgmma kernels alone
re-tunes only the batches they ran in. A batch that is valid but never met
this build's candidates (a kernel family added since) is tuned again too.

The file is saved after every batch: an interrupted tune resumes where it
stopped, skipping the batches already in the file (--force re-tunes them).
It goes to --dir, by default $MSTAR_MOE_CONFIG_DIR, else
$XDG_CACHE_HOME/mstar/moe-configs, else ~/.cache/mstar/moe-configs: where
'bench moe' looks first, before the files shipped in the binary
(kernels/moe/configs: the H200's, for the four reference shapes).

A file keeps each routing's picks apart: --routing zipf:1.2 tunes and
resumes its own batches beside the uniform ones (it neither skips a batch
tuned under uniform nor replaces it), and 'bench moe' under that routing
takes them, falling back to the uniform pick, with a warning, for a batch
its routing lacks. On an H100, picks tuned under zipf:1.2 ran 1.3-2.8%
faster under it than the uniform ones (reports/measured/h100/moe-zipf-picks).
--routing-file FILE tunes under a recorded routing (its first layer, as
'bench moe --routing-file' replays it); its picks are kept as trace:NAME
(the file's base name), which a bench replaying a file of that name takes.
Under --ep N the picks are kept as ROUTING@epN (uniform@ep4): a rank's
experts see N times fewer slots per token than a model without EP of the
same local shape (the file's key), so neither takes the other's picks.

It ends by measuring the static table against the tuned file over every
batch, each as a 'bench moe' sweep (--samples per batch), in --rounds
interleaved rounds pooled per side (so the diff sees some of the noise
between sweeps), and prints their latencies through the statistics of
'report diff' (medians, 95% CIs, Mann-Whitney U; '~' when not significant).
A "regression" there only says the file lost to the static table in this
run; it does not change the exit code. --out writes every candidate
("moe_tune" results) and every sweep ("moe", params configs=static|tuned
and round).

--finalists N judges the closest candidates as bench moe will run them.
A small-M time depends on where a process's upload of the weights lands (on
the H200, one configuration read 247.6 µs in the tuner and 265–267 in fresh
processes, and two configurations changed order between the two), so the
up to N fastest candidates within 5% of the fastest each run twice more, as
'bench moe --batch M --config C' in a new process, alternated, and the
fastest median there is picked. The file records each finalist's times. It
costs 2·N processes a batch (a few seconds each).

On the CPU there is one implementation, so there is nothing to choose: the
command checks and times it, writes its file (which bench moe does not
need) and compares it with itself — an A/A pair, which should read '~'.

--shortlist DOC re-tunes after a kernel change with fewer candidates: DOC
is an earlier tune's --out document of the same shape, model name,
sharding, routing and seed (any kernels; another is refused), and a batch
it holds tries only the static table's pick, the candidates DOC did not
time (new ones), and the --shortlist-keep fastest of the rest there by
pass and by each GEMM alone. Over two kernel changes
of the H200 tunings (v19, v25; four shapes, 13 batches) the earlier tune's
six fastest held 301 of the 312 later winners by pass, gemm1 or gemm2, and
each of the 11 it missed was within 2.1% of the best it kept; they were
64–70% of the candidates there, fewer where the change adds fewer.

On Hopper the candidates the H200 tunings found dominated (never within 3%
of the best) are left out; MSTAR_MOE_TUNE_ALL=1 tries them too, and
MSTAR_MOE_TUNE_FILTER=REGEXP keeps only the candidates it matches (the
static table's pick always runs, as the baseline).

Shapes as in 'bench moe': --model NAME, --hf-config FILE, or --experts
--topk --hidden --inter; --tp and --ep shard it (rank 0's share is tuned).
Exit 1 when every candidate of some batch was rejected.`,
		Example: `  mstar tune moe --model qwen3-30b-a3b --device cuda:0
  mstar tune moe --model deepseek-v3 --tp 8 --batch 1,64,4096 --device cuda:0 --out tune-ds.json
  mstar tune moe --hf-config /models/Qwen3-30B-A3B/config.json --device cuda:0 --force
  mstar tune moe --model qwen3-235b-a22b --batch 1,2,4,8 --finalists 3 --device cuda:0
  mstar tune moe --model qwen3-30b-a3b --shortlist old/tune-q30.json.gz --device cuda:0
  mstar tune moe --model qwen3-30b-a3b --routing-file routing.jsonl --batch 256 --device cuda:0
  mstar tune moe --experts 8 --topk 2 --hidden 256 --inter 128 --batch 1 --device cpu --dir /tmp/cfg`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			name, shape, err := sf.resolve(cmd, "tune moe")
			if err != nil {
				return err
			}
			if err := firstErr(atLeast("threshold", threshold, 0, ""), atLeast("rounds", rounds, 1, ""), atLeast("finalists", finalists, 0, ""),
				atLeast("shortlist-keep", shortlistKeep, 1, "")); err != nil {
				return err
			}
			var shortDoc *results.Document
			if shortlist != "" {
				d, err := results.ReadFile(shortlist)
				if err != nil {
					return badInput(fmt.Errorf("--shortlist: %w", err))
				}
				if d.Suite != "tune moe" {
					return badInput(fmt.Errorf("--shortlist %s: a %q document, not a 'tune moe' one (its --out)", shortlist, d.Suite))
				}
				shortDoc = d
			} else if cmd.Flags().Changed("shortlist-keep") {
				return usageErr("--shortlist-keep: needs --shortlist")
			}
			if finalists > moebench.MaxFinalists {
				return usageErr("--finalists %d: at most %d (each costs two processes a batch)", finalists, moebench.MaxFinalists)
			}
			sh, err := shard.Parse(shardSpec)
			if err != nil {
				return err
			}
			mo := moebench.MoEOptions{Model: name, Shape: shape, TP: sf.tp, EP: sf.ep, Routing: routing, Samples: samples, Seed: seed, TuneSamples: tuneSamples, WeightCopies: weightCopies}
			if routingFile != "" {
				if cmd.Flags().Changed("routing") {
					return usageErr("--routing and --routing-file exclude each other")
				}
				r, err := a.readRoutingFile(routingFile, shape.E)
				if err != nil {
					return err
				}
				mo.Trace, mo.TraceName = &r, routingFile
			}
			if batches != "" {
				bs, err := parseBatches(batches)
				if err != nil {
					return usageErr("--batch: %v", err)
				}
				mo.Batches = bs
			}
			if _, err := moebench.PrepareMoE(&mo); err != nil {
				return badInput(err)
			}
			if dir == "" {
				d, err := moe.UserConfigDir()
				if err != nil {
					return badInput(fmt.Errorf("--dir: %w", err))
				}
				dir = d
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return badInput(fmt.Errorf("--dir: %w", err))
			}
			if err := checkShmDir("dir", dir, true); err != nil {
				return err
			}
			if err := fo.check(cmd); err != nil {
				return err
			}
			if fo.devices != "" {
				fo.spec = shardSpec
				return a.tuneFanOut(fo, dir, out)
			}
			if ceilings != "" {
				c, err := ceilbench.ReadCeilings(ceilings)
				if err != nil {
					return badInput(fmt.Errorf("--ceilings: %w", err))
				}
				mo.Ceilings = c
			}
			batchesOn := func(dev gpu.Device) []int {
				if len(mo.Batches) > 0 {
					return mo.Batches
				}
				if dev.Info().Backend == gpu.CUDA {
					return moebench.DefaultGPUBatches
				}
				return moebench.DefaultCPUBatches
			}
			// Read before the run replaces it: an interrupted run's document
			// (or its partial stream, after a kill) holds the candidates of
			// the batches this run will skip.
			earlier, earlierFrom, earlierErr := earlierDocument(out)
			var noCandidate error
			return a.measure(measurement{suite: "tune moe", device: device, out: out, shard: sh,
				steps: func(dev gpu.Device) int { return len(shard.Pick(sh, batchesOn(dev))) + 1 + 2*rounds },
				run: func(ctx context.Context, m *measuring) (*outcome, error) {
					if mo.Ceilings != nil {
						if err := mo.Ceilings.Matches(m.dev.Info()); err != nil {
							return nil, badInput(fmt.Errorf("--ceilings %s: %w", ceilings, err))
						}
					}
					if m.dev.Info().Backend != gpu.CUDA {
						say(m.note, "tune moe on the CPU: one implementation, nothing to choose; it is checked, timed and compared with itself")
					}
					// A cell is one batch size; each shard writes its part of
					// the tuned file to its own --dir.
					all := batchesOn(m.dev)
					mo.Batches = all
					if !sh.Whole() {
						if mo.Batches = pickCells(m, all, func(b int) string { return fmt.Sprintf("batch=%d", b) }); len(mo.Batches) == 0 {
							return &outcome{}, nil
						}
					}
					mo.Sink = m.sink // each batch's candidates reach the stream beside --out as it ends
					mo.Progress = func(step string) {
						m.bar.Describe(step)
						if strings.HasPrefix(step, "saved ") || strings.HasPrefix(step, "compare ") || step == "weights" {
							m.bar.Add(1)
						}
					}
					if earlierErr != nil {
						say(m.note, "warning: %s is not an earlier tune document (%v): its candidates are not carried over", earlierFrom, earlierErr)
					}
					topt := moebench.MoETuneOptions{MoE: mo, Dir: dir, Force: force, Commit: version.Get().Commit, Rounds: rounds, Earlier: earlier,
						Shortlist: shortDoc, ShortlistKeep: shortlistKeep}
					if finalists > 1 && m.dev.Info().Backend != gpu.CUDA {
						// The CPU backend tunes its one configuration: no candidates to judge.
						say(m.note, "warning: --finalists: the CPU backend has one configuration to tune, none to judge again")
						finalists = 0
					}
					if finalists > 1 {
						fresh, cleanup, err := newFreshBench(mo, m.dev.Info().ID)
						if err != nil {
							return nil, err
						}
						defer cleanup()
						topt.Finalists, topt.Fresh = finalists, fresh
					}
					rep, err := moebench.RunMoETune(ctx, m.dev, topt)
					stopped := err != nil && ctx.Err() != nil && rep != nil
					if errors.Is(err, moebench.ErrNoCandidate) {
						noCandidate, err = err, nil
					}
					if err != nil && !stopped {
						if badinput.Is(err) {
							return nil, badInput(err)
						}
						return nil, err
					}
					o := &outcome{results: rep.Results, warnings: rep.Warnings, env: results.Env{
						moebench.EnvKernelsVersion: moe.KernelVersion,
						// What the run table says beside the results: the tuned
						// file and the comparison's threshold.
						reports.EnvTunedKey:      rep.Key.String(),
						reports.EnvTunedFile:     rep.Path,
						reports.EnvTunedRouting:  rep.Routing,
						reports.EnvTuneThreshold: strconv.FormatFloat(threshold, 'g', -1, 64),
					}}
					if rep.Static != nil && rep.Static.Ceilings != nil {
						o.results = append(o.results, rep.Static.Ceilings.Results()...)
					}
					if stopped {
						if rep.File != nil && rep.File.Len() > 0 {
							say(m.note, "%s keeps the %d batch(es) tuned so far; run the same command again to resume", rep.Path, rep.File.Len())
						} else {
							say(m.note, "no batch was tuned before the interrupt, so no tuned file was written; run the same command again to start")
						}
						o.done = fmt.Sprintf("%d of %d batches tuned", len(rep.Tuned), len(mo.Batches)-len(rep.Skipped))
					}
					return o, err
				},
				table: func(w io.Writer, doc *results.Document) error {
					if len(doc.Results) == 0 {
						return nil // a shard with no batch: its note said so
					}
					return reports.RunTable(w, doc)
				},
				failed: func(doc *results.Document) error {
					if noCandidate != nil {
						return failed("tune moe: %v", noCandidate)
					}
					return nil
				},
			})
		},
	}
	f := cmd.Flags()
	sf.add(cmd, "model preset (see 'mstar bench moe --help')")
	f.StringVar(&batches, "batch", "", "comma-separated token counts (default 1,2,4,…,4096 on a GPU; 1,4,16,64 on the CPU)")
	addDeviceFlag(cmd, &device)
	f.StringVarP(&out, "out", "o", "", "write the results document (every candidate, and both sweeps of the comparison) to `FILE`")
	f.StringVar(&routing, "routing", "uniform", "routing while tuning: uniform or zipf:ALPHA")
	f.StringVar(&routingFile, "routing-file", "", "tune under the routing recorded in `FILE` (as bench moe --routing-file replays it; its picks are kept as trace:NAME)")
	f.Uint64Var(&seed, "seed", 1, "seed of weights, inputs and routing")
	f.IntVar(&samples, "samples", 0, "samples per batch of the tuned-versus-static comparison (0: 20 on CUDA, 6 on the CPU)")
	f.IntVar(&tuneSamples, "tune-samples", 6, "timed samples per candidate (6, also for 0: the fewest that give a 95% interval)")
	f.IntVar(&weightCopies, "weight-copies", 0, weightCopiesUsage)
	f.StringVar(&dir, "dir", "", "folder of the tuned files (default: $"+moe.EnvConfigDir+", else the user cache's mstar/moe-configs)")
	f.BoolVar(&force, "force", false, "re-tune batches that the file already has")
	f.StringVar(&ceilings, "ceilings", "", "read the device's ceilings from a results `FILE` of 'mstar bench ceilings' instead of measuring them")
	f.IntVar(&rounds, "rounds", 2, "interleaved rounds of the tuned-versus-static comparison")
	f.IntVar(&finalists, "finalists", 0, "time up to `N` of the fastest candidates (within 5% of the fastest) again in fresh 'bench moe' processes, twice each, alternated, and pick the fastest there (0: the tuner's own times decide)")
	f.StringVar(&shortlist, "shortlist", "", "try per batch only the static pick, new candidates and the fastest of an earlier tune's results `DOC` (its --out)")
	f.IntVar(&shortlistKeep, "shortlist-keep", moebench.DefaultShortlistKeep, "with --shortlist: how many of DOC's fastest to keep, by pass and by each GEMM")
	addShardFlag(cmd, &shardSpec, "one batch size")
	fo.add(cmd)
	f.Float64Var(&threshold, "threshold", 5, "the comparison: smallest change, in percent, that counts (as in report diff)")
	return cmd
}

// earlierDocument reads what an earlier run left at out: the document, or
// when a kill left none, its partial stream. Nothing there is no error.
func earlierDocument(out string) (*results.Document, string, error) {
	if out == "" {
		return nil, "", nil
	}
	for _, p := range []string{out, out + partialSuffix} {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		d, err := results.ReadFile(p)
		return d, p, err
	}
	return nil, "", nil
}
