package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"

	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/internal/doctor"
	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes, documented in README.md.
const (
	exitOK       = 0 // everything ran and every gate passed
	exitFailed   = 1 // a gate, a correctness check or a regression failed
	exitBadInput = 2 // bad usage or bad input
	exitBroken   = 3 // the run could not complete: I/O, device or internal error
	exitCannot   = 4 // the run completed but cannot tell: no gate failed, one could not decide (arena stress too short, a spill-matrix interval across its floor)
)

// app carries what every command shares: where to write, and the command
// line that results documents record.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	args           []string
	cpuProfile     string   // --cpuprofile: where the CPU profile goes
	profileFile    *os.File // open while the profile is being taken
}

// commandFactories holds one constructor per top-level command. Each command
// lives in its own file and registers itself from init, so the tree grows
// without touching this file.
var commandFactories []func(*app) *cobra.Command

func register(f func(*app) *cobra.Command) { commandFactories = append(commandFactories, f) }

// exitError carries an exit code up to run.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErr is bad usage or bad input (exit 2, mapped in run).
func usageErr(format string, a ...any) error { return badinput.Errorf(format, a...) }

// badInput marks an error about the user's input (a file, a flag value).
func badInput(err error) error { return badinput.Wrap(err) }

// cannotTell marks a run in which no gate failed but one could not tell
// pass from fail: exit 4.
func cannotTell(format string, a ...any) error {
	return &exitError{code: exitCannot, err: fmt.Errorf(format, a...)}
}

// failed marks a failed gate or regression: exit 1.
func failed(format string, a ...any) error {
	return &exitError{code: exitFailed, err: fmt.Errorf(format, a...)}
}

func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "mstar",
		Short: "Benchmarks and diagnostics for Mixture-of-Experts inference on NVIDIA GPUs",
		Long: `mstar measures the hot paths of a Mixture-of-Experts inference server — fused-MoE
kernels, host<->device transport through a shared-memory arena, routing
functions, spill/restore across memory tiers — checks correctness in every
run, and reports speed against the hardware's measured ceilings.

Every measuring command writes a results document (--out); 'mstar report'
turns results documents into tables, diffs them with statistics for CI, and
plots them.

Exit codes: 0 ok; 1 a gate, a correctness check or a regression failed;
2 bad usage or bad input (a --device that cannot be opened included); 3 the
run could not complete (an I/O, device or internal error during it), so a CI
job can tell a failed gate from a broken run; 4 no
gate failed but one could not tell (arena stress: too few tensors to judge;
spill-matrix: a bandwidth interval that straddles its floor, more --samples
decide it).`,
		Example: `  mstar doctor                       # ready? GPU, CUDA libraries, /dev/shm, memlock
  mstar report show results.json     # tables from results documents
  mstar report diff base.json new.json --threshold 5   # exit 1 on a significant regression`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.CompletionOptions.HiddenDefaultCmd = false
	for _, f := range commandFactories {
		root.AddCommand(f(a))
	}
	// cobra's completion command prints help and exits 0 for an unknown
	// shell; like every other parent command here, that is bad usage.
	root.InitDefaultCompletionCmd()
	if comp, _, err := root.Find([]string{"completion"}); err == nil && comp != root {
		comp.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErr("unknown shell %q for 'mstar completion': want bash, zsh, fish or powershell", args[0])
			}
			return nil
		}
		comp.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
	}
	// An output path that cannot be written is bad input, found before a
	// long run rather than after it.
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if err := checkEmptyFlags(cmd); err != nil {
			return err
		}
		if err := checkSampleFlags(cmd); err != nil {
			return err
		}
		if err := checkOutputFlags(cmd); err != nil {
			return err
		}
		return a.startProfile()
	}
	root.PersistentFlags().StringVar(&a.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to `FILE` when the command ends (an interrupted run leaves none); read it with 'go tool pprof bin/mstar FILE'")
	// Flag help wraps at the help width (long descriptions otherwise run
	// past 200 columns).
	cobra.AddTemplateFunc("wrappedFlagUsages", func(fs *pflag.FlagSet) string { return fs.FlagUsagesWrapped(helpWidth()) })
	tmpl := root.UsageTemplate()
	for _, set := range []string{"LocalFlags", "InheritedFlags"} {
		tmpl = strings.ReplaceAll(tmpl, "."+set+".FlagUsages", "wrappedFlagUsages ."+set)
	}
	root.SetUsageTemplate(tmpl)
	// Flag parse errors are usage errors: exit 2.
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErr("%s%s (see '%s --help')", subcommand(c), flagErrorText(err), c.CommandPath())
	})
	return root
}

// helpTextWidth is the width of the help texts made from lists (routers,
// models), like the hand-wrapped prose beside them.
const helpTextWidth = 80

// helpWidth is the column --help and mstar's messages wrap at: $COLUMNS
// when it is set to something sane, else units.TextWidth.
func helpWidth() int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n >= 60 && n <= 400 {
		return n
	}
	return units.TextWidth
}

// sayIndent starts the lines a message of say wraps onto.
const sayIndent = "    "

// say prints one of mstar's messages to w: "mstar: " and the message,
// wrapped at the help width, so that a long path or reason stays readable
// in the terminal.
func say(w io.Writer, format string, a ...any) {
	fmt.Fprintln(w, units.Wrap("mstar: "+fmt.Sprintf(format, a...), helpWidth(), sayIndent))
}

// unsay undoes say's wrapping in s, text mstar wrote to stderr: each
// message, and each line of a message of several, on one line again. (A
// line say broke after a "/" of a long path comes back with a space.)
func unsay(s string) string {
	var out []string
	said := false // the line before belongs to a message of say's
	for _, l := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(l, sayIndent); ok && said {
			out[len(out)-1] += " " + rest
			continue
		}
		said = strings.HasPrefix(l, "mstar: ") || (said && strings.HasPrefix(l, " "))
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// run is main without the process: it takes the arguments and the streams
// and returns the exit code, so tests can drive the whole CLI.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// A closed stdout (mstar … | head) must not end a run before it writes
	// --out: writes to it fail instead, and the run goes on.
	signal.Ignore(syscall.SIGPIPE)
	// The failed writes are dropped rather than returned, so no command
	// stops at its table, before its --out, and the reader's leaving is not
	// an error (exit 0, as for a reader that read everything).
	stdout = &pipeGuard{w: stdout}
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, args: append([]string{"mstar"}, args...)}
	root := newRoot(a)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if perr := a.stopProfile(); err == nil {
		err = perr
	}
	if err == nil {
		return exitOK
	}
	// The one place that turns errors into exit codes: bad input from any
	// package (badinput, wrapped with %w) is 2, a failed gate or an
	// interrupted run carries its code, anything else is 3.
	if badinput.Is(err) {
		say(stderr, "%v", err)
		return exitBadInput
	}
	var ee *exitError
	if errors.As(err, &ee) {
		say(stderr, "%v", err)
		return ee.code
	}
	// A wrong argument count, from cobra, says which command and how to
	// call it.
	if n := argCount.FindStringSubmatch(err.Error()); n != nil && cmd != nil {
		msg := argCount.ReplaceAllStringFunc(err.Error(), func(m string) string {
			k, _ := strconv.Atoi(argCount.FindStringSubmatch(m)[1])
			return units.Plural(k, "argument")
		})
		say(stderr, "%s%s (usage: %s; see '%s --help')", subcommand(cmd), msg, strings.TrimSuffix(cmd.UseLine(), " [flags]"), cmd.CommandPath())
		return exitBadInput
	}
	say(stderr, "%v", err)
	// cobra's own errors (unknown command, wrong argument count) are usage errors.
	if strings.Contains(err.Error(), "unknown command") || strings.Contains(err.Error(), "arg(s)") ||
		strings.Contains(err.Error(), "unknown flag") || strings.Contains(err.Error(), "required flag") {
		return exitBadInput
	}
	// Exit 1 means a gate or a regression failed, and only that.
	return exitBroken
}

// pipeGuard is stdout once its reader may have gone: after a write fails
// with EPIPE every write "succeeds" unwritten.
type pipeGuard struct {
	w    io.Writer
	gone bool
}

func (g *pipeGuard) Write(p []byte) (int, error) {
	if g.gone {
		return len(p), nil
	}
	n, err := g.w.Write(p)
	if errors.Is(err, syscall.EPIPE) {
		g.gone = true
		return len(p), nil
	}
	return n, err
}

// argCount finds "N arg(s)" in cobra's argument-count errors.
var argCount = regexp.MustCompile(`(\d+) arg\(s\)`)

// subcommand is "bench ceilings: " for a subcommand and "" for the root:
// messages start with "mstar: " already.
func subcommand(c *cobra.Command) string {
	if !c.HasParent() {
		return ""
	}
	return strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ") + ": "
}

// flagErrorText says what is wrong with a flag in words, not with Go's
// parser error ("strconv.ParseInt: parsing ...").
func flagErrorText(err error) string {
	var ive *pflag.InvalidValueError
	if !errors.As(err, &ive) {
		return err.Error()
	}
	f := ive.GetFlag()
	want := ""
	switch f.Value.Type() {
	case "int", "int8", "int16", "int32", "int64":
		want = "not an integer"
	case "uint", "uint8", "uint16", "uint32", "uint64":
		want = "not a whole number >= 0"
	case "float32", "float64":
		want = "not a number"
	case "bool":
		want = "want true or false"
	case "duration":
		want = "not a duration (like 500ms, 2s or 1m)"
	case "intSlice":
		want = "want integers, comma-separated"
	case "stringToString":
		want = "want KEY=VALUE pairs, comma-separated"
	default:
		if c := errors.Unwrap(ive); c != nil {
			want = c.Error()
		}
	}
	v := ive.GetValue()
	if r := []rune(v); len(r) > 60 { // a pasted file, not a typo: the start is enough
		v = string(r[:60]) + "…"
	}
	return fmt.Sprintf("--%s: invalid value %q: %s", f.Name, v, want)
}

// writeResults writes a results document atomically and says where.
func (a *app) writeResults(path string, doc *results.Document) error {
	if err := results.WriteFile(path, doc); err != nil {
		return err
	}
	say(a.stderr, "wrote %s", path)
	return nil
}

// deprecatedAlias makes old another name of the flag new: hidden, and
// deprecated with a note on stderr, so scripts that use it keep working.
func deprecatedAlias(f *pflag.FlagSet, old, new string) {
	nf := f.Lookup(new)
	f.Var(nf.Value, old, nf.Usage)
	f.MarkDeprecated(old, "use --"+new)
}

// outputFlags are the flags that name a file mstar writes, in every command.
var outputFlags = []string{"out", "plot", "heatmap", "routing-out", "record-trace", "cpuprofile"}

// startProfile starts the CPU profile that --cpuprofile asked for.
func (a *app) startProfile() error {
	if a.cpuProfile == "" {
		return nil
	}
	f, err := os.Create(a.cpuProfile)
	if err != nil {
		return usageErr("--cpuprofile: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	a.profileFile = f
	return nil
}

// stopProfile ends a CPU profile, if one is being taken, and says where it is.
func (a *app) stopProfile() error {
	if a.profileFile == nil {
		return nil
	}
	pprof.StopCPUProfile()
	err := a.profileFile.Close()
	a.profileFile = nil
	if err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	say(a.stderr, "wrote %s", a.cpuProfile)
	return nil
}

// checkOutputFlags checks that each output file a command was given can be
// created: it is not a directory (the final rename would fail after the
// run) nor another non-regular file (it would be replaced), and its folder
// exists and is writable.
func checkOutputFlags(cmd *cobra.Command) error {
	for _, name := range outputFlags {
		f := cmd.Flags().Lookup(name)
		if f == nil || !f.Changed || f.Value.String() == "" {
			continue
		}
		if st, err := os.Stat(f.Value.String()); err == nil && st.IsDir() {
			return usageErr("--%s %s: is a directory; give a file path", name, f.Value.String())
		} else if err == nil && !st.Mode().IsRegular() {
			// The file is written beside and renamed over: a device or a
			// FIFO would be replaced by a regular file (/dev/full was).
			return usageErr("--%s %s: is not a regular file (%s); give a file path", name, f.Value.String(), doctor.FileKind(st.Mode()))
		}
		if err := doctor.CanCreateIn(filepath.Dir(f.Value.String())); err != nil {
			return usageErr("--%s %s: cannot write there: %v", name, f.Value.String(), err)
		}
	}
	return nil
}
