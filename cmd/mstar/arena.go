package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mstar-dev/mstar/internal/envinfo"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"

	"github.com/spf13/cobra"

	"github.com/mstar-dev/mstar/arena"
	"github.com/mstar-dev/mstar/bench"
	"github.com/mstar-dev/mstar/bench/stress"
	"github.com/mstar-dev/mstar/bench/sweep"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/progress"
	"github.com/mstar-dev/mstar/internal/shard"
	"github.com/mstar-dev/mstar/reports"
)

// arenaWorkerCmd is how `arena stress` starts its workers: this binary's
// hidden `arena worker` command unless a test points it elsewhere.
var arenaWorkerCmd struct {
	Exe  string
	Args []string
	Env  []string
}

func init() {
	register(func(a *app) *cobra.Command {
		cmd := &cobra.Command{
			Use:   "arena",
			Short: "Measure and stress the shared-memory tensor arena",
			Long: `arena measures the shared-memory tensor arena: producer processes stage tensors
in persistently mapped /dev/shm segments, consumers copy straight out of them,
and a descriptor over a Unix socket is all that travels per tensor.

  sweep    copy bandwidth and latency over sizes for pageable, /dev/shm,
           registered-arena and pinned host memory (with a GPU), and the
           arena against per-tensor files (anywhere)
  stress   producer and consumer processes for a duration or a count, with
           checksummed payloads, optional SIGKILLs, and gates that fail the
           run on corruption, leaked slots or leftover files
  clean    remove segments and spill files whose owner is dead`,
			Example: `  mstar arena sweep --device cuda:0 --out arena-sweep.json --plot arena-sweep.png
  mstar arena stress --duration 30s --kill-rate 0.01
  mstar arena clean --dry-run`,
			Args: cobra.ArbitraryArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usageErr("unknown command %q for %q (see 'mstar arena --help')", args[0], cmd.CommandPath())
				}
				return cmd.Help()
			},
		}
		cmd.AddCommand(arenaSweepCmd(a), arenaStressCmd(a), arenaWorkerCommand(a), arenaCleanCmd(a))
		return cmd
	})
}

// parseSizeBounds parses --min-size and --max-size; a bad one is a usage
// error naming its flag.
func parseSizeBounds(minSize, maxSize string) (lo, hi int64, err error) {
	if lo, err = units.Parse(minSize); err != nil {
		return 0, 0, usageErr("--min-size: %v", err)
	}
	if hi, err = units.Parse(maxSize); err != nil {
		return 0, 0, usageErr("--max-size: %v", err)
	}
	if hi < lo {
		return 0, 0, usageErr("--max-size %s: must be at least --min-size (%s)", maxSize, minSize)
	}
	return lo, hi, nil
}

func arenaSweepCmd(a *app) *cobra.Command {
	var (
		device, mode, minSize, maxSize, shmDir, out, plot, shardSpec string
		factor                                                       int64
		fo                                                           fanOut
		samples, tensors, rounds                                     int
		pcie                                                         float64
	)
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Copy bandwidth and latency by size, per kind of host memory, arena vs file transport",
		Long: `sweep measures, for sizes from --min-size to --max-size in steps of --factor:

With a GPU (copy mode): D2H, H2D and both at once (two streams) between device
memory and four kinds of host memory — pageable Go memory, a pageable /dev/shm
mapping, a registered arena segment (cuMemHostRegister), and cuMemHostAlloc
pinned memory — timed with CUDA events; and the cost of registering a fresh,
committed /dev/shm segment of each size. Rates are given as a fraction of
pinned memory at the same size (%pinned), of the best pinned rate of the run
(%ceil), and of the PCIe link's theoretical rate from NVML (%PCIe; or
--pcie-gbps; "n/a" with the reason when unknown).

Anywhere (transport mode): a producer and a consumer moving tensors through
the arena (memcpy into a slot, descriptor over a Unix socket, memcpy out,
ACK) and through per-tensor files, next to one thread (and two threads) of
memcpy. --mode all does both; the default is all with a GPU and transport
without one.

Every point is the median of --samples samples per round, of --rounds
rounds (the whole sweep repeated, so that 'report diff' sees the noise
between rounds); every timed copy is verified
(destinations poisoned before, compared after) and #wrong counts those that
differ — any wrong copy fails the run (exit 1). The table prints to stdout;
--out writes the results document (every sample), --plot a PNG or SVG of
bandwidth against size (with both modes, the transport plot goes next to it
with "-transport" added to its name).`,
		Example: `  mstar arena sweep --device cuda:0 --out arena-sweep.json --plot arena-sweep.png
  mstar arena sweep --device cpu --max-size 64MiB
  mstar arena sweep --mode transport --min-size 4KiB --max-size 1GiB --samples 5`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			lo, hi, err := parseSizeBounds(minSize, maxSize)
			if err != nil {
				return err
			}
			md := sweep.Mode(mode)
			switch md {
			case "auto":
				md = ""
			case sweep.ModeCopy, sweep.ModeTransport, sweep.ModeAll:
			default:
				return usageErr("--mode %q: want auto, copy, transport or all", mode)
			}
			if plot != "" {
				if _, err := reports.PlotFormat(plot); err != nil {
					return usageErr("--plot: %v", err)
				}
			}
			if err := firstErr(atLeast("min-size", lo, 16, ""), atLeast("factor", factor, 2, ""), atLeast("samples", samples, 1, ""),
				atLeast("tensors", tensors, 0, "0: picked by size"), atLeast("pcie-gbps", pcie, 0, "0: from NVML"), atLeast("rounds", rounds, 1, ""),
				checkShmDir("shm-dir", shmDir, true)); err != nil {
				return err
			}
			sh, err := shard.Parse(shardSpec)
			if err != nil {
				return err
			}
			if err := fo.check(cmd); err != nil {
				return err
			}
			if fo.devices != "" {
				fo.spec = shardSpec
				return a.runFanOut(fo, "arena sweep", out, func(doc *results.Document) error {
					if plot != "" {
						return arenaPlots(a, plot, doc)
					}
					return nil
				})
			}
			return a.measure(measurement{suite: "arena sweep", device: device, out: out, shard: sh,
				run: func(ctx context.Context, m *measuring) (*outcome, error) {
					opt := sweep.Options{Device: m.dev, Mode: md, MinSize: lo, MaxSize: hi, Factor: factor, Samples: samples, Tensors: tensors, Dir: shmDir,
						Sink: m.sink}
					if !sh.Whole() {
						cells, err := opt.Cells()
						if err != nil {
							return nil, err
						}
						if opt.Only = pickCells(m, cells, sweep.Cell.Name); len(opt.Only) == 0 {
							return &outcome{}, nil
						}
					}
					if pcie > 0 {
						opt.PCIeGBps, opt.PCIeNote = pcie, fmt.Sprintf("PCIe theoretical %.1f GB/s per direction (--pcie-gbps)", pcie)
					} else if m.dev.Info().Backend == gpu.CUDA {
						opt.PCIeGBps, opt.PCIeNote = sweep.PCIeCeiling(envinfo.PCIeLink(m.dev))
					}
					// On an interrupt the point in flight stops and removes its
					// segments and files; the points done are still written.
					var res *sweep.Outcome
					points := 0
					joined, done, err := bench.Rounds(rounds, func(round int) ([]results.Result, error) {
						opt.Progress = func(step string) { m.bar.Describe(fmt.Sprintf("round %d/%d %s", round+1, rounds, step)) }
						r, err := sweep.Run(ctx, opt)
						if r == nil {
							return nil, err
						}
						if res == nil {
							res = r
						}
						for _, w := range r.Warnings {
							if !slices.Contains(res.Warnings, w) {
								res.Warnings = append(res.Warnings, w)
							}
						}
						points = len(r.Results)
						return r.Results, err
					})
					if res == nil {
						return nil, err
					}
					o := &outcome{results: joined, warnings: res.Warnings, rounds: done}
					if opt.PCIeNote != "" {
						o.warnings = append(o.warnings, opt.PCIeNote)
					}
					o.done = units.Plural(points, "point") + " done"
					if rounds > 1 {
						o.done = fmt.Sprintf("%s in round %d of %d", o.done, done+1, rounds)
					}
					return o, err
				},
				table: func(w io.Writer, doc *results.Document) error {
					if err := reports.RunTable(w, doc); err != nil {
						return err
					}
					for _, w := range doc.Warnings {
						say(a.stderr, "warning: %s", w)
					}
					return nil
				},
				after: func(doc *results.Document) error {
					if plot != "" {
						return arenaPlots(a, plot, doc)
					}
					return nil
				},
				failed: func(doc *results.Document) error {
					if bad := doc.Failed(); len(bad) > 0 {
						return failed("%d sweep points had wrong copies: %s", len(bad), strings.Join(bad, "; "))
					}
					return nil
				},
			})
		},
	}
	addDeviceFlag(cmd, &device)
	f := cmd.Flags()
	f.StringVar(&mode, "mode", "auto", "what to measure: copy (host<->device per memory kind), transport (arena vs files), all, or auto (all with a GPU, transport without)")
	f.StringVar(&minSize, "min-size", "4KiB", "smallest size")
	f.StringVar(&maxSize, "max-size", "1GiB", "largest size")
	f.Int64Var(&factor, "factor", 4, "size step: each size is this many times the last")
	f.IntVar(&samples, "samples", 10, "timed samples per point and round (the table shows medians)")
	f.IntVar(&rounds, "rounds", bench.DefaultRounds, "repeat the whole sweep this many times, interleaved, so that 'report diff' sees the noise between rounds")
	f.IntVar(&tensors, "tensors", 0, "tensors per transport sample (0: up to 4096 small tensors, 64 MiB's worth, at least 16)")
	f.StringVar(&shmDir, "shm-dir", arena.DefaultDir, "directory for segments and tensor files")
	f.Float64Var(&pcie, "pcie-gbps", 0, "the PCIe link's theoretical GB/s per direction (0: from NVML)")
	f.StringVarP(&out, "out", "o", "", "write the results document to `FILE`")
	f.StringVar(&plot, "plot", "", "draw bandwidth against size into `FILE` (.png or .svg)")
	addShardFlag(cmd, &shardSpec, "one size of one part: copy, register or transport")
	fo.add(cmd)
	return cmd
}

// arenaPlots draws the copy and transport results, each in its own image.
func arenaPlots(a *app, path string, doc *results.Document) error {
	parts := map[string]*results.Document{}
	for _, r := range doc.Results {
		if r.Name != "copy" && r.Name != "transport" {
			continue
		}
		d := parts[r.Name]
		if d == nil {
			c := *doc
			c.Results = nil
			d = &c
			parts[r.Name] = d
		}
		d.Results = append(d.Results, r)
	}
	for _, name := range []string{"copy", "transport"} {
		d := parts[name]
		if d == nil {
			continue
		}
		p := path
		if name == "transport" && parts["copy"] != nil {
			ext := filepath.Ext(path)
			p = strings.TrimSuffix(path, ext) + "-transport" + ext
		}
		title := "arena sweep: host<->device copy bandwidth"
		if name == "transport" {
			title = "arena sweep: producer->consumer bandwidth, arena vs files vs memcpy"
		}
		// Transport rates span decades; copy rates mostly sit within one.
		warns, err := reports.PlotFile(p, []*results.Document{d}, reports.PlotOptions{Metric: sweep.MetricBandwidth, X: "size", LogX: true, LogY: name == "transport", Title: title})
		for _, w := range warns {
			say(a.stderr, "plot: %s", w)
		}
		if err != nil {
			return fmt.Errorf("plotting %s: %w", p, err)
		}
		say(a.stderr, "wrote %s", p)
	}
	return nil
}

func arenaStressCmd(a *app) *cobra.Command {
	var (
		minSize, maxSize, segSize, transports, shmDir, out, shardSpec string
		producers, consumers, fanout, maxSegs, inflight               int
		duration, interval                                            time.Duration
		count                                                         int64
		killRate                                                      float64
		seed                                                          uint64
	)
	cmd := &cobra.Command{
		Use:   "stress",
		Short: "Producer and consumer processes through the arena, with fault injection and gates",
		Long: `stress re-executes mstar as --producers producer and --consumers consumer
processes (hidden 'arena worker' command) that talk over Unix sockets and
share segments in a fresh directory under --shm-dir, for --duration or until
--count tensors are delivered.

Each producer draws sizes log-uniformly from --min-size to --max-size, writes
a payload with a header and its CRC-32C (computed from the source, not the
slot) into a slot, and sends the descriptor to --fanout consumers, which copy
the tensor out, acknowledge it (the producer then reuses the slot), and
verify it. With --kill-rate R, about R x (tensors delivered) workers are
SIGKILLed at random and restarted: a restarted producer's startup sweep
reclaims its predecessor's orphaned segments, and a producer whose consumer
died abandons that consumer's references, so nothing leaks.

On a terminal, a line per --interval shows progress on stderr. At the end:
throughput, tensors/s, send->ack latency p50/p99, spills, peak
fragmentation, and the gates — no corrupted payload, no leaked slot, no
file left in the run directory after the final orphan sweep (and none at
all when nothing was killed), no read error, no unexpected worker exit. A
failed gate exits 1. A run ended by --duration that delivered fewer than 20
tensors (e.g. --max-size 1GiB --duration 2s) cannot tell: it says so
("CANNOT TELL") and exits 4, not 1.
--transport arena,file runs both, one after the other, and prints the
ratio.`,
		Example: `  mstar arena stress --duration 30s
  mstar arena stress --duration 30s --kill-rate 0.01
  mstar arena stress --producers 4 --consumers 4 --count 100000 --kill-rate 0.01  # ~9 min, 2 cores
  mstar arena stress --duration 20s --max-size 1MiB --transport arena,file`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			lo, hi, err := parseSizeBounds(minSize, maxSize)
			if err != nil {
				return err
			}
			seg, err := units.Parse(segSize)
			if err != nil {
				return usageErr("--segment-size: %v", err)
			}
			var trs []arena.Transport
			for _, t := range strings.Split(transports, ",") {
				tr, err := arena.ParseTransport(strings.TrimSpace(t))
				if err != nil {
					return usageErr("--transport: %v", err)
				}
				trs = append(trs, tr)
			}
			if err := checkNoRepeats("transport", trs); err != nil {
				return err
			}
			if cmd.Flags().Changed("count") && !cmd.Flags().Changed("duration") {
				duration = 0
			}
			exe, wargs, wenv := arenaWorkerCmd.Exe, arenaWorkerCmd.Args, arenaWorkerCmd.Env
			if exe == "" {
				if exe, err = os.Executable(); err != nil {
					return fmt.Errorf("finding this executable to start workers: %w", err)
				}
				wargs = []string{"arena", "worker"}
			}
			if err := firstErr(atLeast("producers", producers, 1, ""), atLeast("consumers", consumers, 1, ""),
				atLeast("max-segments", maxSegs, 1, ""), atLeast("fanout", fanout, 1, ""),
				errIf(fanout > consumers, "--fanout %d: must be at most --consumers (%d)", fanout, consumers),
				atLeast("inflight", inflight, 1, ""), atLeast("duration", duration, 0, "0: no time limit, with --count"),
				atLeast("count", count, 0, "0: no count limit, with --duration"),
				errIf(duration == 0 && count == 0, "--duration %v --count %d: give a duration above 0s or a count above 0", duration, count),
				within("kill-rate", killRate, 0, 1, "kills per delivered tensor"), above("interval", interval, 0)); err != nil {
				return err
			}
			if seg < 4096 {
				return usageErr("--segment-size %s: want at least one page (4KiB)", segSize)
			}
			if err := checkShmDir("shm-dir", shmDir, true); err != nil {
				return err
			}
			// Progress lines follow the rule of every command's progress
			// (internal/progress): on a terminal only, so logs stay clean.
			var live io.Writer
			if progress.IsTerminal(a.stderr) {
				live = a.stderr
			}
			sh, err := shard.Parse(shardSpec)
			if err != nil {
				return err
			}
			var sums []*stress.Summary
			return a.measure(measurement{suite: "arena stress", out: out, shard: sh,
				run: func(ctx context.Context, m *measuring) (*outcome, error) {
					o := &outcome{}
					if !sh.Whole() {
						trs = pickCells(m, trs, func(t arena.Transport) string { return "transport=" + string(t) })
					}
					for _, tr := range trs {
						opt := stress.Options{
							Producers: producers, Consumers: consumers, Duration: duration, Count: count,
							MinSize: lo, MaxSize: hi, Fanout: fanout, KillRate: killRate, Transport: tr,
							ShmDir: shmDir, SegmentSize: seg, MaxSegments: maxSegs, Inflight: inflight,
							Interval: interval, Seed: seed, Exe: exe, Args: wargs, Env: wenv, Live: live,
						}
						if len(trs) > 1 { // which one's progress follows
							say(a.stderr, "arena stress, transport %s", tr)
						}
						s, err := stress.Run(ctx, opt)
						if err != nil {
							return nil, err
						}
						sums = append(sums, s)
						r := s.Result()
						m.sink(r)
						o.results = append(o.results, r)
						if ctx.Err() != nil {
							// The run could not complete (exit 3); its gates
							// judged a part run, which fails "delivered" by itself.
							return o, ctx.Err()
						}
					}
					return o, nil
				},
				table: reports.RunTable,
				failed: func(doc *results.Document) error {
					if bad := doc.Failed(); len(bad) > 0 {
						return failed("arena stress failed %d gate(s): %s", len(bad), strings.Join(bad, "; "))
					}
					for _, s := range sums {
						if why := s.CannotTell(); why != "" {
							return &exitError{code: exitCannot, err: fmt.Errorf("arena stress (transport %s): %s", s.Options.Transport, why)}
						}
					}
					return nil
				},
			})

		},
	}
	f := cmd.Flags()
	f.IntVar(&producers, "producers", 4, "producer processes")
	f.IntVar(&consumers, "consumers", 4, "consumer processes")
	f.DurationVar(&duration, "duration", 30*time.Second, "run this long (ignored when only --count is given; 0: no time limit, with --count)")
	f.Int64Var(&count, "count", 0, "or run until this many tensors are delivered (0: no count limit)")
	f.StringVar(&minSize, "min-size", "1KiB", "smallest payload (sizes are log-uniform)")
	f.StringVar(&maxSize, "max-size", "64MiB", "largest payload")
	f.IntVar(&fanout, "fanout", 2, "consumers each tensor goes to")
	f.Float64Var(&killRate, "kill-rate", 0, "SIGKILL a random worker this often per delivered tensor (0.01 = one per hundred), and restart it")
	f.StringVar(&transports, "transport", "arena", "arena, file, or arena,file for both one after the other")
	f.StringVar(&shmDir, "shm-dir", arena.DefaultDir, "where the run directory of segments and files is made")
	f.StringVar(&segSize, "segment-size", "256MiB", "producer arena segment size")
	f.IntVar(&maxSegs, "max-segments", 4, "producer arena segment cap (then tensors spill to files)")
	f.IntVar(&inflight, "inflight", 8, "tensors in flight per producer")
	f.DurationVar(&interval, "interval", time.Second, "progress line interval (progress shows on a terminal only)")
	f.Uint64Var(&seed, "seed", 0, "random seed (0: from the clock)")
	f.StringVarP(&out, "out", "o", "", "write the results document to `FILE`")
	addShardFlag(cmd, &shardSpec, "one --transport")
	return cmd
}

func arenaWorkerCommand(a *app) *cobra.Command {
	var role string
	var index int
	cmd := &cobra.Command{
		Use:     "worker --role producer|consumer --index N",
		Short:   "A process of 'arena stress' (internal)",
		Long:    "worker is started by 'mstar arena stress': it reads its configuration as one JSON line on stdin, works until stdin closes, and writes JSON report lines on stdout.",
		Example: "  mstar arena worker --role producer --index 0 < config.json",
		Hidden:  true,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return stress.RunWorker(a.stdin, a.stdout)
		},
	}
	cmd.Flags().StringVar(&role, "role", "", "producer or consumer (informational: the configuration on stdin decides)")
	cmd.Flags().IntVar(&index, "index", 0, "worker index (informational)")
	return cmd
}

// prefixSweep names the entries of a sweep of parent by their full path
// (the socket directories are not under --shm-dir); directories keep
// their trailing slash.
func prefixSweep(r *arena.CleanReport, parent string) {
	join := func(name string) string {
		p := filepath.Join(parent, name)
		if strings.HasSuffix(name, "/") {
			p += "/"
		}
		return p
	}
	for _, xs := range [][]string{r.Removed, r.InUse, r.RemovedDirs, r.InUseDirs} {
		for i := range xs {
			xs[i] = join(xs[i])
		}
	}
	for i := range r.Left {
		r.Left[i].Name = join(r.Left[i].Name)
	}
}

func arenaCleanCmd(a *app) *cobra.Command {
	var dir string
	var dry bool
	cmd := &cobra.Command{
		Use:   "clean",
		Short: "Remove orphaned arena segments, spill files and run directories whose owner is dead",
		Long: `clean runs the arena's orphan sweep on --shm-dir: a segment or spill file
(named mstar_arena_* or mstar_spill_*) that no live process holds a lock on is
removed. Files of other users, files whose names do not match, and young files
whose creator is alive are left alone and listed with the reason. Every
arena also runs this sweep when it starts.

It also removes the run directories of 'arena stress' runs that were killed
(mstar-stress-N under --shm-dir, and its socket directory mstar-stress-N under
$TMPDIR or /tmp): a live run holds a lock on each; a dead run's directory goes
with its orphaned files and sockets, and empty ones go too. --dry-run lists
what would go.`,
		Example: `  mstar arena clean
  mstar arena clean --dry-run --shm-dir /dev/shm`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkShmDir("shm-dir", dir, !dry); err != nil {
				return err
			}
			rep, err := arena.CleanOrphans(dir, arena.CleanOptions{DryRun: dry})
			if err != nil {
				return badInput(err)
			}
			for _, parent := range []string{dir, os.TempDir()} {
				if parent != dir && filepath.Clean(parent) == filepath.Clean(dir) {
					continue
				}
				r, err := arena.CleanRunDirs(parent, arena.CleanOptions{DryRun: dry})
				if err != nil {
					if parent == dir {
						return badInput(err)
					}
					say(a.stderr, "warning: %v", err)
					continue
				}
				if parent != dir {
					prefixSweep(&r, parent)
				}
				rep.Add(r)
			}
			for _, n := range rep.Removed {
				fmt.Fprintln(a.stdout, "removed  "+n)
			}
			for _, n := range rep.RemovedDirs {
				fmt.Fprintln(a.stdout, "removed  "+n+" (run directory of a dead run)")
			}
			for _, n := range rep.InUse {
				fmt.Fprintln(a.stdout, "in use   "+n)
			}
			for _, n := range rep.InUseDirs {
				fmt.Fprintln(a.stdout, "in use   "+n+" (run directory of a live run)")
			}
			would := 0 // --dry-run: what a run without it removes
			for _, l := range rep.Left {
				if what, ok := strings.CutSuffix(l.Reason, " (dry run: not removed)"); ok {
					would++
					fmt.Fprintf(a.stdout, "would remove  %s (%s)\n", l.Name, what)
					continue
				}
				fmt.Fprintf(a.stdout, "left     %s: %s\n", l.Name, l.Reason)
			}
			if dry {
				fmt.Fprintf(a.stdout, "dry run: %d would be removed, %d in use, %d left alone\n",
					would, len(rep.InUse)+len(rep.InUseDirs), len(rep.Left)-would)
				return nil
			}
			fmt.Fprintln(a.stdout, rep.String())
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "shm-dir", arena.DefaultDir, "directory to sweep")
	cmd.Flags().BoolVar(&dry, "dry-run", false, "judge but remove nothing")
	return cmd
}
