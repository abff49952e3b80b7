package main

import (
	"errors"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/mstar-dev/mstar/internal/doctor"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// number is a numeric flag's type (time.Duration is an int64).
type number interface{ ~int | ~int64 | ~float64 }

// atLeast refuses a flag value below lo (or NaN, or infinite), naming the
// flag, its value and the range, one way for every command (exit 2). zero,
// when lo is 0, says what 0 means: "0: one batch".
func atLeast[T number](flag string, v, lo T, zero string) error {
	if f := float64(v); v >= lo && !math.IsNaN(f) && !math.IsInf(f, 0) {
		return nil
	}
	if zero != "" {
		return usageErr("--%s %v: must be at least %v (%s)", flag, v, lo, zero)
	}
	return usageErr("--%s %v: must be at least %v", flag, v, lo)
}

// above refuses a flag value that is not more than lo: a duration or rate
// where 0 means nothing useful.
func above[T number](flag string, v, lo T) error {
	if f := float64(v); v > lo && !math.IsInf(f, 0) {
		return nil
	}
	return usageErr("--%s %v: must be more than %v", flag, v, lo)
}

// within refuses a flag value outside [lo, hi].
func within[T number](flag string, v, lo, hi T, zero string) error {
	if v >= lo && v <= hi {
		return nil
	}
	if zero != "" {
		return usageErr("--%s %v: must be in [%v, %v] (%s)", flag, v, lo, hi, zero)
	}
	return usageErr("--%s %v: must be in [%v, %v]", flag, v, lo, hi)
}

// firstErr returns the first non-nil error, so a command checks its flags in
// one statement.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkShmDir checks, before a run, that a --shm-dir value is a writable
// directory; found later, a bad one fails the run deep inside (exit 3) or
// its cells (exit 1) without naming the flag.
func checkShmDir(flag, dir string, write bool) error {
	st, err := os.Stat(dir)
	if err != nil {
		return usageErr("--%s %s: %v", flag, dir, errors.Unwrap(err))
	}
	if !st.IsDir() {
		return usageErr("--%s %s: not a directory", flag, dir)
	}
	if write {
		if err := doctor.CanCreateIn(dir); err != nil {
			return usageErr("--%s %s: cannot write there: %v", flag, dir, err)
		}
	}
	return nil
}

// errIf is cond's usage error, else nil: a check that fits no helper above.
func errIf(cond bool, format string, a ...any) error {
	if cond {
		return usageErr(format, a...)
	}
	return nil
}

// checkHostFits refuses, as bad input, work that needs more host memory
// than is available (gpu.CheckFits, as bench moe does), before it starts.
func checkHostFits(what string, need int64, hint string) error {
	return badInput(gpu.CheckFits(gpu.NewCPU(), what, need, hint))
}

// checkNoRepeats refuses a list flag naming one value twice: its results
// would share a key, and report would merge them as one.
func checkNoRepeats[T comparable](flag string, xs []T) error {
	if x, ok := firstRepeat(xs); ok {
		return usageErr("--%s: %v is listed twice", flag, x)
	}
	return nil
}

// firstRepeat is the first value xs holds a second time.
func firstRepeat[T comparable](xs []T) (T, bool) {
	for i, x := range xs {
		if slices.Contains(xs[:i], x) {
			return x, true
		}
	}
	var zero T
	return zero, false
}

// checkEmptyFlags refuses a string flag given an empty value (--dir ”,
// often an unset shell variable): leaving the flag out is how its default
// is asked for, so an empty one is a mistake, not a choice.
func checkEmptyFlags(cmd *cobra.Command) error {
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if err == nil && f.Value.Type() == "string" && f.Value.String() == "" {
			err = usageErr("%s--%s: empty value; give one, or leave the flag out for its default", subcommand(cmd), f.Name)
		}
	})
	return err
}

// maxSamples bounds every --*samples flag: each sample is kept (and some
// suites make room for all of them up front), so 1e11 ran the Go runtime
// out of memory; a million is past any use (a µs kernel at 20 a batch).
const maxSamples = 1_000_000

// checkSampleFlags refuses a --*samples value over maxSamples, for every
// command, before any work.
func checkSampleFlags(cmd *cobra.Command) error {
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if err != nil || !strings.HasSuffix(f.Name, "samples") || f.Value.Type() != "int" {
			return
		}
		if v, perr := strconv.Atoi(f.Value.String()); perr == nil && v > maxSamples {
			err = usageErr("%s--%s %d: at most %d", subcommand(cmd), f.Name, v, maxSamples)
		}
	})
	return err
}
