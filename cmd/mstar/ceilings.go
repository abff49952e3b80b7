package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/mstar-dev/mstar/bench"
	"github.com/mstar-dev/mstar/internal/envinfo"
	"github.com/mstar-dev/mstar/internal/progress"
	"github.com/mstar-dev/mstar/reports"
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
--quick uses smaller buffers and 6 samples. With --out the results document
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
				dev, err := a.openDevice(device)
				if err != nil {
					return err
				}
				defer dev.Close()
				doc := reports.NewDocument("bench ceilings", a.args, envinfo.Collect(dev))
				bar := progress.New(a.stderr, 5, "ceilings")
				// On an interrupt the ceilings not measured yet are left
				// unmeasured; those done are still printed and written.
				ctx, stop := interruptContext()
				defer stop()
				c, err := bench.MeasureCeilings(ctx, dev, bench.CeilingOptions{
					Quick:   quick,
					Samples: samples,
					Progress: func(what string) {
						bar.Describe(what)
						if what != "d2d" {
							bar.Add(1)
						}
					},
				})
				bar.Finish()
				stopped := err != nil && ctx.Err() != nil && c != nil
				if stopped {
					noteInterrupted(doc)
				} else if err != nil {
					return err
				}
				doc.Results = c.Results()
				doc.Finish()
				printCeilings(a, dev.Info().ID, dev.Info().Name, c)
				if out != "" {
					if err := a.writeResults(out, doc); err != nil {
						return err
					}
				}
				if stopped {
					return errInterrupted("bench ceilings", nil)
				}
				return nil
			},
		}
		addDeviceFlag(cmd, &device)
		cmd.Flags().StringVarP(&out, "out", "o", "", "write the results document to `FILE`")
		cmd.Flags().IntVar(&samples, "samples", 0, "samples per ceiling (0: 20 on CUDA, 10 on the CPU, 6 with --quick)")
		cmd.Flags().BoolVar(&quick, "quick", false, "smaller buffers and fewer samples")
		return cmd
	})
}

func printCeilings(a *app, id, name string, c *bench.Ceilings) {
	fmt.Fprintf(a.stdout, "device: %s (%s)\n", id, name)
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ceiling\tmedian\t±95% CI\tunit\tsamples\tsize\tmethod")
	for _, r := range c.Results() {
		m := r.Metrics[0]
		what := r.Params["what"]
		if !m.Measured() {
			fmt.Fprintf(tw, "%s\tunmeasured\t\t%s\t0\t%s\t%s\n", what, m.Unit, r.Params["size"], m.Unmeasured)
			continue
		}
		s := reports.Summarize(m.Samples)
		ci := "±?"
		if p := s.HalfWidthPct(); p == p && p < 1e9 {
			ci = fmt.Sprintf("±%.1f%%", p)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", what, reports.FormatValue(s.Median), ci, m.Unit, s.N, r.Params["size"], r.Params["method"])
	}
	tw.Flush()
	for _, r := range c.Results() {
		if note := r.ThrottleNote(); note != "" {
			fmt.Fprintf(a.stdout, "note: %s %s\n", r.Params["what"], note)
		}
	}
	if c.StateNote != "" {
		fmt.Fprintln(a.stdout, "note: "+c.StateNote)
	}
}
