package main

import (
	"context"

	"github.com/spf13/cobra"

	benchceil "github.com/mstar-dev/mstar/bench/ceilings"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/reports"
	"github.com/mstar-dev/mstar/reports/results"
)

func init() {
	benchSubcommands = append(benchSubcommands, func(a *app) *cobra.Command {
		var (
			device  string
			out     string
			samples int
			quick   bool
		)
		cmd := &cobra.Command{
			Use:   "ceilings",
			Short: "Measure the device's copy and read bandwidths and GEMM rate",
			Long: `ceilings measures the hardware limits that other suites report "% of ceiling"
against, on the device chosen by --device:

  d2d   device memory copy, GB/s counting bytes read plus written
        (CUDA: cuMemcpyDtoDAsync of 1 GiB; CPU: a copy on every core)
  read  streaming read of device memory, GB/s of bytes read, over at least
        4× the L2 (CUDA: read.cu, 16-byte loads, 1 GiB; CPU: an AVX2 read
        loop on every core, 256 MiB): what bounds weight streaming
  h2d   page-locked host to device, GB/s (CUDA: 256 MiB from cuMemHostAlloc)
  d2h   device to page-locked host, GB/s
  gemm  dense GEMM, TFLOP/s (CUDA: cuBLAS bf16 in/out with fp32 compute,
        8192³ on random data; CPU: the bf16 multiply-add peak on every
        core, VDPBF16PS with AVX512-BF16, else float32 FMA with AVX2, else
        gonum float64 Dgemm, 512³)

Each is the median of --samples samples, timed with CUDA events on a GPU and
the wall clock on the CPU, after a warm-up that runs until the timing is
stable. On a GPU each also records the GPU's clocks, power, temperature and
throttle reasons while it ran, and says when it was power- or thermally-
throttled. A ceiling that cannot be measured (no cuBLAS, too little memory)
is reported as unmeasured with the reason, never as zero.
--quick uses 6 samples and smaller host copies (on the CPU smaller copies
too); a GPU's device passes stay at 1 GiB, since shorter ones read up to 8%
low. With --out the results document
(every sample, the environment) is written atomically; other suites read it
with --ceilings FILE.`,
			Example: `  mstar bench ceilings --device cuda:0 --out ceilings.json
  mstar bench ceilings --quick
  mstar report show ceilings.json`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := atLeast("samples", samples, 0, "0: 20 on CUDA, 10 on the CPU, 6 with --quick"); err != nil {
					return err
				}
				return a.measure(measurement{suite: "bench ceilings", device: device, out: out, steps: func(gpu.Device) int { return 5 },
					run: func(ctx context.Context, m *measuring) (*outcome, error) {
						c, err := benchceil.MeasureCeilings(ctx, m.dev, benchceil.CeilingOptions{
							Quick: quick, Samples: samples, Sink: m.sink,
							Progress: func(what string) {
								m.bar.Describe(what)
								if what != "d2d" {
									m.bar.Add(1)
								}
							},
						})
						if c == nil {
							return nil, err
						}
						// On an interrupt the ceilings not measured yet are
						// left unmeasured; those done are still written.
						// Here the ceilings are what is measured, not context
						// for another run: report diff judges them.
						res := c.Results()
						for i := range res {
							res[i].Role = results.RoleMeasured
						}
						return &outcome{results: res, warnings: stateWarnings(c.StateNote)}, err
					},
					table: reports.RunTable,
				})
			},
		}
		addDeviceFlag(cmd, &device)
		cmd.Flags().StringVarP(&out, "out", "o", "", "write the results document to `FILE`")
		cmd.Flags().IntVar(&samples, "samples", 0, "samples per ceiling (0: 20 on CUDA, 10 on the CPU, 6 with --quick)")
		cmd.Flags().BoolVar(&quick, "quick", false, "smaller buffers and fewer samples")
		return cmd
	})
}

// stateWarnings is why the GPU's state was not sampled, as the document's
// warnings (none when it was, or on the CPU).
func stateWarnings(note string) []string {
	if note == "" {
		return nil
	}
	return []string{note}
}
