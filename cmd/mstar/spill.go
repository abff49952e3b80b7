package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/mstar-dev/mstar/bench/spill"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/shard"
	"github.com/mstar-dev/mstar/internal/spill/tier"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports"
	"github.com/mstar-dev/mstar/reports/results"
	"github.com/mstar-dev/mstar/trace"
	"github.com/spf13/cobra"
)

// spillHolder is how the peer tier starts its holder process; empty means
// this binary's hidden 'spill-holder' command. Tests point it at the test
// binary.
var spillHolder tier.Holder

// stallFor is how long --inject stall holds every spill and restore: far
// longer than a block's copy, so the bandwidth floor and the ladder's tick
// budget are both missed (the ladder stretches it to twice its interval
// where a slow calibration made that longer).
const stallFor = 25 * time.Millisecond

// parseInject turns --inject values into faults.
func parseInject(vals []string) (tier.Faults, error) {
	var f tier.Faults
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			switch strings.TrimSpace(s) {
			case "":
			case "short-restore":
				f.ShortRestore = 4096
			case "corrupt":
				f.Corrupt = true
			case "stall":
				f.Stall = stallFor
			default:
				return f, fmt.Errorf("--inject %q: want short-restore, corrupt or stall", s)
			}
		}
	}
	return f, nil
}

func init() {
	reports.RegisterRunTable(spill.Suite, spill.Table)
	register(func(a *app) *cobra.Command {
		var (
			device, cells, sizes, tiers, out, tracePath, shmDir, shardSpec string
			inject                                                         []string
			blocks, samples, cooldown, sessions                            int
			floor, pinnedFloor, ppTol                                      float64
			interval, traceEvery, ttl                                      time.Duration
			seed                                                           uint64
			fo                                                             fanOut
		)
		cmd := &cobra.Command{
			Use:   "spill-matrix",
			Short: "Spill and restore across memory tiers, cell by cell, with hard gates",
			Long: `spill-matrix runs scenarios × tiers × sizes. Each cell moves a device pool's
blocks out to a tier and back and checks, with gates that fail with a reason:

  identical    every block hashes the same after the restore as before
  reached      the bytes a restore delivered, measured by reading the device
               back, equal the bytes requested (never the request reported)
  stranded     no tier holds bytes at the end of the cell
  unmeasured   every figure is measured or says why not; never a silent zero
  bandwidth    spill and restore reach --floor of the tier's ceiling, measured
               in the same run by the same moves of the same blocks; a cell
               queues all its blocks' copies (each stream's) and waits once
               per stream, as a real spill does (hashing is outside the
               timing); on a GPU device-tier moves are timed by CUDA events

Scenarios (rows): hibernate (the whole pool out and back, device memory freed
in between), partial (25/50/75% of the blocks, the freed memory overwritten
by another tenant), restore-gate (compute waits for a verified restore; a
deliberately short restore must be caught with the bytes that arrived),
uneven (shards of unequal size at once), ping-pong (two models take turns on
a budget that holds one; each move priced max(0, transfer − overlapped
compute) plus the measured fixed cost of a turn, predicted against measured;
turns last at least 4 ms, each layer's moves repeated when a tier is that
fast), multi-session (random interleavings
through one tier), ladder (the memory-pressure regulator on ramp, spike and
oscillating demand, pinned first and then this tier; --trace records it),
abort (a spill cancelled mid-flight: stranded bytes, measured, until a TTL
reclaims them), co-residency (tenants on one budget: cold releases with
per-source reports, hot growth read back, unfundable asks refused whole,
floor refusals not retried, freed bytes claimed).

Tiers (columns): device memory (host memory on the CPU backend), pinned (a
registered /dev/shm segment), pageable (Go heap), file (a temporary folder),
peer (a /dev/shm segment created and held by another process: this binary,
re-executed).

--inject makes the matching gate fail on purpose: short-restore (reached),
corrupt (identical), stall (bandwidth, and the ladder's tick cost: each move
sleeps 25 ms, or twice the ladder's tick interval where that is longer).

Prints the matrix (PASS with the key figure, or FAIL with the first failing
gate), writes a results document with --out, exits 1 when any gate fails.
A bandwidth gate decides on the 95% interval of its median: it passes when
the interval's lower end reaches the floor, fails when its upper end is
below it, and otherwise cannot tell (CANNOT-TELL in the matrix, the numbers
listed below it); a run with no failure but such a gate exits 4. A figure
above 105% of its tier's ceiling is listed with a warning naming the ceiling.`,
			Example: `  mstar spill-matrix                                  # every cell, default size
  mstar spill-matrix --cells hibernate,ping-pong --sizes 64MiB,256MiB
  mstar spill-matrix --cells '*/pinned' --device cuda:0 --sizes 1GiB --out spill.json
  mstar spill-matrix --cells ladder --trace trace.jsonl && mstar trace summarize trace.jsonl
  mstar spill-matrix --cells hibernate/pageable --inject corrupt   # exits 1: identical`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				faults, err := parseInject(inject)
				if err != nil {
					return usageErr("%v", err)
				}
				kinds, err := tier.ParseKinds(tiers)
				if err != nil {
					return usageErr("--tiers: %v", err)
				}
				if err := checkNoRepeats("tiers", kinds); err != nil {
					return err
				}
				if err := firstErr(errIf(!(floor > 0 && floor <= 1), "--floor %v: must be in (0, 1]", floor),
					within("hibernate-pinned-floor", pinnedFloor, 0, 1, "0: 0.9 on CUDA, --floor on the CPU"),
					atLeast("pingpong-tol", ppTol, 0, "0: 0.10 on CUDA, 0.25 on the CPU"),
					atLeast("blocks", blocks, 1, ""), atLeast("samples", samples, 1, ""), atLeast("sessions", sessions, 1, ""),
					atLeast("cooldown", cooldown, 1, ""), above("interval", interval, 0), above("ttl", ttl, 0),
					atLeast("trace-every", traceEvery, 0, "0: keep every record")); err != nil {
					return err
				}
				if samples < 6 {
					say(a.stderr, "warning: --samples %d: below 6 the bandwidth gates judge the samples' range, not a 95%% interval, so a pass or a fail can differ from run to run", samples)
				}
				if shmDir != "" {
					if err := checkShmDir("shm-dir", shmDir, true); err != nil {
						return err
					}
				}
				sh, err := shard.Parse(shardSpec)
				if err != nil {
					return err
				}
				if err := fo.check(cmd, "trace"); err != nil {
					return err
				}
				if fo.devices != "" {
					fo.spec = shardSpec
					return a.runFanOut(fo, "spill-matrix", out, nil)
				}
				var m *spill.Matrix
				return a.measure(measurement{suite: spill.Suite, device: device, out: out, shard: sh,
					run: func(ctx context.Context, ms *measuring) (*outcome, error) {
						dev := ms.dev
						if !cmd.Flags().Changed("sizes") {
							sizes = "64MiB"
							if dev.Info().Backend == gpu.CUDA {
								sizes = "1GiB"
							}
						}
						sz, err := spill.ParseSizes(sizes)
						if err != nil {
							return nil, usageErr("--sizes: %v", err)
						}
						if x, ok := firstRepeat(sz); ok {
							return nil, usageErr("--sizes: %s is listed twice", units.Size(x, ""))
						}
						list, err := spill.Match(spill.Cells(spill.Scenarios, kinds, sz), cells)
						if err != nil {
							return nil, usageErr("--cells: %v", err)
						}
						if list = pickCells(ms, list, spill.Cell.Name); len(list) == 0 {
							m = &spill.Matrix{}
							return &outcome{}, nil
						}
						if small := spill.SmallLayouts(list, blocks); len(small) > 0 {
							which := strings.Join(small, ", ")
							switch {
							case len(small) == len(list) && len(list) > 1:
								which = "every cell"
							case len(small) > 4:
								which = strings.Join(small[:3], ", ") + fmt.Sprintf(" and %d more cells", len(small)-3)
							}
							return nil, usageErr("--sizes %s with --blocks %d: too small for the layout of %s (blocks of 8 bytes or less); give larger --sizes or fewer --blocks", sizes, blocks, which)
						}
						if err := spill.CheckFits(dev, list); err != nil {
							return nil, badInput(err)
						}
						holder := spillHolder
						if len(holder.Argv) == 0 {
							exe, err := os.Executable()
							if err != nil {
								return nil, fmt.Errorf("finding this binary for the peer tier's holder: %w", err)
							}
							holder = tier.Holder{Argv: []string{exe, "spill-holder"}}
						}
						cfg := spill.Config{Dev: dev, Sink: ms.sink, Blocks: blocks, Samples: samples, Floor: floor, HibernatePinnedFloor: pinnedFloor, PingPongTol: ppTol,
							Faults: faults, ShmDir: shmDir, Holder: holder, Seed: seed, TTL: ttl,
							Interval: interval, Cooldown: cooldown, Sessions: sessions}
						o := &outcome{}
						var tw *trace.Writer
						if tracePath != "" {
							f, err := os.Create(tracePath)
							if err != nil {
								return nil, badInput(fmt.Errorf("--trace: %w", err))
							}
							tw = trace.NewWriter(f, trace.Options{Every: traceEvery})
							cfg.Trace = tw
						}
						// On an interrupt the cell in flight stops between copies and
						// cleans up (segments unlinked, holders told to quit); the
						// cells done so far are still printed and written.
						ms.bar.SetTotal(len(list))
						m, err = spill.Run(ctx, cfg, list, func(i int, c spill.Cell) {
							if i > 0 {
								ms.bar.Add(1)
							}
							ms.bar.Describe(c.Name())
						})
						if tw != nil {
							if err := tw.Close(); err != nil {
								o.warnings = append(o.warnings, err.Error())
							}
							var kept, dropped int64
							for _, s := range tw.Stats() {
								kept += s.Written
								dropped += s.Suppressed
							}
							say(a.stderr, "trace %s: %d records kept, %d suppressed by the throttle (--trace-every %s)", tracePath, kept, dropped, traceEvery)
						}
						if m == nil {
							return nil, err
						}
						if err != nil && ctx.Err() == nil {
							return nil, fmt.Errorf("spill-matrix stopped after %d of %d cells: %w", len(m.Outcomes), len(list), err)
						}
						if faults.Any() {
							o.warnings = append(o.warnings, "faults injected on purpose: "+strings.Join(inject, ","))
						}
						o.results, o.env = m.Results(), m.Env()
						o.done = fmt.Sprintf("%d of %d cells done", len(m.Outcomes), len(list))
						return o, err
					},
					table: reports.RunTable,
					failed: func(doc *results.Document) error {
						if small := m.BadInputCells(); len(small) > 0 {
							return usageErr("--sizes %s with --blocks %d: too small for the layout of %s (blocks of 8 bytes or less); give larger --sizes or fewer --blocks", sizes, blocks, strings.Join(small, ", "))
						}
						if n := m.FailedCells(); n > 0 {
							return failed("%d of %d cells failed their gates", n, len(m.Outcomes))
						}
						if u := m.Undecided(); len(u) > 0 {
							return cannotTell("no gate failed, but %d could not tell (exit 4): run more --samples", len(u))
						}
						return nil
					},
				})
			},
		}
		f := cmd.Flags()
		addDeviceFlag(cmd, &device)
		addShardFlag(cmd, &shardSpec, "one scenario/tier/size of the --cells selected")
		fo.add(cmd)
		f.StringVar(&cells, "cells", "", "cells to run: comma-separated globs over scenario/tier/size, e.g. 'hibernate', '*/pinned', 'ladder/file' (default all)")
		// No flag default: it would print beside, and contradict, the CUDA one.
		f.StringVar(&sizes, "sizes", "", "pool sizes, comma-separated (default 64MiB; 1GiB on CUDA)")
		f.StringVar(&tiers, "tiers", "device,pinned,pageable,file,peer", "tiers (columns) to run")
		f.IntVar(&blocks, "blocks", 16, "blocks per pool")
		// 6: the fewest samples that give a 95% interval of the median; with
		// 5 every figure's interval would be unbounded (±∞ in report show).
		f.IntVar(&samples, "samples", 6, "timed repetitions per bandwidth figure, after warm-up rounds that settle (6 is the fewest that give a 95% interval)")
		f.Float64Var(&floor, "floor", 0.5, "bandwidth floor as a fraction of the tier's ceiling measured in the same run")
		f.Float64Var(&pinnedFloor, "hibernate-pinned-floor", 0, "floor of hibernate through pinned memory (default 0.9 on CUDA, --floor on the CPU)")
		f.Float64Var(&ppTol, "pingpong-tol", 0, "ping-pong cost model tolerance, |predicted − measured| / measured (default 0.10 on CUDA, 0.25 on the CPU)")
		f.StringVar(&out, "out", "", "write the results document to `FILE`")
		f.StringVar(&tracePath, "trace", "", "write the ladder cells' regulator ticks to `FILE` as NDJSON")
		f.DurationVar(&traceEvery, "trace-every", 50*time.Millisecond, "least trace time between two kept records of a session (rung changes and overruns are always kept; 0 keeps all)")
		f.StringSliceVar(&inject, "inject", nil, "faults to inject on purpose: short-restore, corrupt, stall")
		f.StringVar(&shmDir, "shm-dir", "", "folder for shared-memory segments (default /dev/shm)")
		f.DurationVar(&interval, "interval", 20*time.Millisecond, "regulator tick interval")
		f.IntVar(&cooldown, "cooldown", 8, "regulator cooldown after a rung change, in ticks")
		f.IntVar(&sessions, "sessions", 4, "sessions of the multi-session cells")
		f.DurationVar(&ttl, "ttl", 50*time.Millisecond, "how long stranded bytes are held before they are reclaimed")
		f.Uint64Var(&seed, "seed", 0x5eed, "seed for block contents and random interleavings (0: 0x5eed)")
		return cmd
	})

	// The peer tier's holder: another process that creates and holds the
	// segment the bytes live in. Hidden; spill-matrix starts it.
	register(func(a *app) *cobra.Command {
		return &cobra.Command{
			Use:                "spill-holder --dir DIR --size BYTES",
			Short:              "Hold a shared-memory segment for the spill matrix's peer tier (internal)",
			Long:               "spill-holder creates a segment, says 'ready PATH SIZE', answers 'hash OFF LEN' and exits on 'quit' or when its parent goes away, removing the segment.",
			Example:            "  mstar spill-holder --dir /dev/shm --size 67108864",
			Hidden:             true,
			DisableFlagParsing: true,
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := tier.HolderMain(args, a.stdin, a.stdout); err != nil {
					return usageErr("%v", err)
				}
				return nil
			},
		}
	})
}
