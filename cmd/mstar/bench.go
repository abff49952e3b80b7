package main

import (
	"github.com/spf13/cobra"
)

// benchSubcommands holds one constructor per `mstar bench` subcommand. Each
// lives in its own file and appends itself from init, as top-level
// commands do with register.
var benchSubcommands []func(*app) *cobra.Command

func init() {
	register(func(a *app) *cobra.Command {
		cmd := &cobra.Command{
			Use:   "bench",
			Short: "Measure kernels and hardware limits; each run writes a results document",
			Long: `bench runs one benchmark suite. Every suite warms up, takes several samples
(timed with CUDA events on a GPU, the wall clock on the CPU backend), prints a
table, and with --out writes a results document holding every sample, which
'mstar report' shows, diffs and plots.

  ceilings  the limits the other suites report against: device memory
            copy and streaming-read bandwidth, pinned host<->device bandwidth
            and the dense GEMM rate (on the CPU: memcpy, a read loop and the
            multiply-add peak)
  moe       the fused-MoE layer over batch sizes, checked against a float64
            reference in every run, as % of the ceilings and of the floor;
            --tune picks tile configurations, --stages times each kernel`,
			Example: `  mstar bench ceilings --device cuda:0 --out ceilings.json
  mstar bench ceilings --device cpu --quick
  mstar bench moe --model qwen3-30b-a3b --batch 1,16 --device cpu`,
			// A parent without RunE would print help and exit 0 for a
			// mistyped suite; that is bad usage.
			Args: cobra.ArbitraryArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usageErr("unknown command %q for %q (see 'mstar bench --help')", args[0], cmd.CommandPath())
				}
				return cmd.Help()
			},
		}
		for _, f := range benchSubcommands {
			cmd.AddCommand(f(a))
		}
		return cmd
	})
}
