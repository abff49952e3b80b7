package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mstar-dev/mstar/bench/p2p"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports"
)

func init() {
	benchSubcommands = append(benchSubcommands, func(a *app) *cobra.Command {
		var (
			devices, out, size, small string
			samples, repeat           int
		)
		cmd := &cobra.Command{
			Use:   "p2p",
			Short: "GPU-to-GPU copy bandwidth and latency, every pair, peer access on and off",
			Long: `p2p measures copies between the GPUs of this host, for every ordered pair
(src, dst) of --devices: the bandwidth of one --size copy and the latency of
a --small copy (the mean of --repeat back-to-back ones), --samples times
each, timed with CUDA events on the source GPU's stream
(cuMemcpyPeerAsync). With peer access on, the copy goes directly over NVLink
or PCIe peer-to-peer where the pair can (else "n/a" with the reason); off,
the driver stages it through host memory. Each pair's first copy is
verified byte for byte; a wrong copy fails the run (exit 1).

It needs two GPUs or more: with fewer it says so and exits 2.`,
			Example: `  mstar bench p2p --devices all --out p2p.json
  mstar bench p2p --devices 0,1 --size 1GiB --samples 20`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				sz, err := units.Parse(size)
				if err != nil {
					return usageErr("--size: %v", err)
				}
				sm, err := units.Parse(small)
				if err != nil {
					return usageErr("--small: %v", err)
				}
				gpus, err := pickGPUs(devices, listGPUs)
				if err != nil {
					return err
				}
				if len(gpus) < 2 {
					return usageErr("bench p2p needs two GPUs or more: --devices %s gives %s", devices, units.Plural(len(gpus), "GPU"))
				}
				opt := p2p.Options{Size: sz, Small: sm, Samples: samples, Repeat: repeat}
				for _, g := range gpus {
					k, err := strconv.Atoi(strings.TrimPrefix(g.Spec, "cuda:"))
					if err != nil {
						return usageErr("bench p2p: %s is not a CUDA device", g.Spec)
					}
					opt.Devices = append(opt.Devices, k)
				}
				if err := opt.Check(); err != nil {
					return err
				}
				return a.measure(measurement{suite: "bench p2p", out: out,
					steps: func(gpu.Device) int { return 2 * len(opt.Pairs()) },
					run: func(ctx context.Context, m *measuring) (*outcome, error) {
						opt.Sink = m.sink
						opt.Progress = func(step string) { m.bar.Describe(step); m.bar.Add(1) }
						rs, err := p2p.Run(ctx, opt)
						return &outcome{results: rs, done: fmt.Sprintf("%d of %d pairs and modes done", len(rs), 2*len(opt.Pairs()))}, err
					},
					table: reports.RunTable,
				})
			},
		}
		f := cmd.Flags()
		f.StringVar(&devices, "devices", "all", "GPUs to pair: all, or numbers such as 0,1,3")
		f.StringVar(&size, "size", "256MiB", "bytes of the bandwidth copy")
		f.StringVar(&small, "small", "4KiB", "bytes of the latency copy")
		f.IntVar(&samples, "samples", 10, "samples per pair and mode")
		f.IntVar(&repeat, "repeat", 100, "small copies per latency sample")
		f.StringVarP(&out, "out", "o", "", "write the results document to `FILE`")
		return cmd
	})
}
