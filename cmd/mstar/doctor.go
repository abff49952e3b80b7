package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/mstar-dev/mstar/internal/doctor"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/spf13/cobra"
)

func init() {
	register(func(a *app) *cobra.Command {
		var asJSON bool
		var shmDir string
		cmd := &cobra.Command{
			Use:   "doctor",
			Short: "Tell whether this machine is ready for mstar, and what its limits are",
			Long: `doctor checks the GPU (through NVML: name, memory, driver, PCIe link and its
theoretical bandwidth), the CUDA libraries mstar loads at run time (libcuda,
NVRTC, cuBLAS, the CUDA headers — and where it looked for each), and the host
limits that the arena and the spill tiers depend on: /dev/shm size and free
space, RLIMIT_MEMLOCK, hugepages and the cgroup memory limit; and the CPU
features the CPU backend's kernels use (AVX512-BF16, AVX2+FMA, else Go
loops).

Each check prints OK, WARN or FAIL with a one-line fix. A machine without a
GPU is fine (mstar runs on the CPU backend): doctor says so and exits 0. It
exits 1 only when a check FAILs.`,
			Example: `  mstar doctor
  mstar doctor --json | jq '.checks[] | select(.status != "OK")'`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				checks := doctor.Run(doctor.Gather(libraryFindings(), shmDir))
				worst := doctor.Worst(checks)
				if asJSON {
					enc := json.NewEncoder(a.stdout)
					enc.SetIndent("", "  ")
					if err := enc.Encode(struct {
						Status doctor.Status  `json:"status"`
						Checks []doctor.Check `json:"checks"`
					}{worst, checks}); err != nil {
						return err
					}
				} else {
					printChecks(a, checks)
				}
				if worst == doctor.Fail {
					return failed("doctor: %d check(s) failed", countStatus(checks, doctor.Fail))
				}
				return nil
			},
		}
		cmd.Flags().BoolVar(&asJSON, "json", false, "print the checks as JSON")
		cmd.Flags().StringVar(&shmDir, "shm-dir", "/dev/shm", "shared-memory directory the arena would use")
		return cmd
	})
}

// printChecks prints a check a line, its detail and fix wrapped at the
// help width under the detail column (the search paths run long).
func printChecks(a *app, checks []doctor.Check) {
	statusW, nameW := 0, 0
	for _, c := range checks {
		statusW = max(statusW, len(c.Status))
		nameW = max(nameW, utf8.RuneCountInString(c.Name))
	}
	indent := strings.Repeat(" ", statusW+2+nameW+2)
	width := helpWidth()
	for _, c := range checks {
		head := fmt.Sprintf("%-*s  %-*s  ", statusW, c.Status, nameW, c.Name)
		fmt.Fprintln(a.stdout, units.Wrap(head+c.Detail, width, indent))
		if c.Fix != "" {
			fmt.Fprintln(a.stdout, units.Wrap(indent+"fix: "+c.Fix, width, indent+"     "))
		}
	}
}

func countStatus(checks []doctor.Check, s doctor.Status) int {
	n := 0
	for _, c := range checks {
		if c.Status == s {
			n++
		}
	}
	return n
}
