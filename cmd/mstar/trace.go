package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/mstar-dev/mstar/internal/units"
	"github.com/mstar-dev/mstar/reports/results"
	"github.com/mstar-dev/mstar/reports/traceplot"
	"github.com/mstar-dev/mstar/trace"
	"github.com/spf13/cobra"
)

// maxBadLines is how many bad lines of a trace are shown one by one; the
// rest are counted.
const maxBadLines = 5

// readTrace reads a trace file, reports its bad lines on stderr and fails
// only when nothing in it could be used (or any bad line, with strict).
// A path of "-" reads standard input, as the report commands do.
func (a *app) readTrace(path string, strict bool) (*trace.File, error) {
	var f *trace.File
	var err error
	var data []byte // what stdin held, kept to tell a results document apart
	if path == "-" {
		// trace.Read reads (and limits) stdin; the tee keeps what it read.
		var seen bytes.Buffer
		path = "stdin"
		f, err = trace.Read(io.TeeReader(a.stdin, &seen), path)
		data = seen.Bytes()
	} else {
		f, err = trace.ReadFile(path)
	}
	if err != nil {
		return nil, badInput(err)
	}
	if len(f.Records) == 0 {
		// Every line of a results document is a "bad line" of a trace.
		isDoc := false
		if data != nil {
			_, derr := results.Read(bytes.NewReader(data), path)
			isDoc = derr == nil
		} else {
			_, derr := results.ReadFile(path)
			isDoc = derr == nil
		}
		if isDoc {
			return nil, usageErr("%s: this is a results document; use mstar report show", path)
		}
	}
	what := " (skipped)"
	if strict {
		what = ""
	}
	for i, b := range f.Bad {
		if i == maxBadLines {
			break
		}
		say(a.stderr, "%s: %s%s", path, b, what)
	}
	if f.BadCount > maxBadLines {
		say(a.stderr, "%s: %s%s", path, units.Plural(f.BadCount-maxBadLines, "more bad line"), what)
	}
	if strict && f.BadCount > 0 {
		return nil, badInput(fmt.Errorf("%s: %s (--strict)", path, units.Plural(f.BadCount, "bad line")))
	}
	if len(f.Records) == 0 {
		return nil, badInput(fmt.Errorf("%s: no valid trace records", path))
	}
	return f, nil
}

func init() {
	register(func(a *app) *cobra.Command {
		cmd := &cobra.Command{
			Use:   "trace",
			Short: "Summarise and plot regulator traces (NDJSON, from spill-matrix --trace)",
			Long: `A regulator trace has one JSON record per kept tick: session, tick, time,
effective interval, tick cost, headroom, the binding constraint, host-tail
bytes, rung, action and bytes moved. The writer throttles each session but
never drops a rung change or an overrun, and counts what it dropped.

'trace summarize' prints per session: ticks, tick cost p50/p99/max, interval
jitter, time per rung, rung changes (and the most inside one cooldown),
flaps and the peak host tail. 'trace plot' draws headroom, rung and host tail
against time. Both report a torn or garbled line with its number and go on
with the rest.`,
			Example: `  mstar spill-matrix --cells ladder --trace trace.jsonl
  mstar trace summarize trace.jsonl
  mstar trace plot trace.jsonl -o trace.png`,
			Args: cobra.ArbitraryArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usageErr("unknown command %q for %q (see 'mstar trace --help')", args[0], cmd.CommandPath())
				}
				return cmd.Help()
			},
		}

		var format string
		var strict bool
		var flapWindow time.Duration
		sum := &cobra.Command{
			Use:   "summarize FILE",
			Short: "Ticks, tick cost percentiles, jitter, time per rung, rung changes, flaps, host tail",
			Long: `summarize reads a trace (FILE, or - for stdin) and prints one summary per session. Percentiles are
over the records kept in the file; ticks counts the suppressed ones too. A
flap is a rung change that undoes the previous one within the flap window
(default twice the cooldown the records carry). Bad lines are reported on
stderr with their line numbers and skipped; --strict makes them an error.`,
			Example: `  mstar trace summarize trace.jsonl
  mstar trace summarize trace.jsonl --format json --flap-window 500ms
  gzip -dc trace.jsonl.gz | mstar trace summarize -`,
			Aliases: []string{"summarise"},
			Args:    cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if format != "text" && format != "json" {
					return usageErr("--format %q: want text or json", format)
				}
				if err := atLeast("flap-window", flapWindow, 0, "0: twice the cooldown"); err != nil {
					return err
				}
				f, err := a.readTrace(args[0], strict)
				if err != nil {
					return err
				}
				s := trace.Summarize(f, trace.SummaryOptions{FlapWindow: flapWindow})
				if format == "json" {
					enc := json.NewEncoder(a.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(s)
				}
				if err := s.WriteText(a.stdout); err != nil {
					return err
				}
				if f.BadCount > 0 {
					fmt.Fprintf(a.stdout, "\n%d bad line(s) skipped; the summary covers the other %d records\n", f.BadCount, len(f.Records))
				}
				return nil
			},
		}
		sum.Flags().StringVar(&format, "format", "text", "text or json")
		sum.Flags().BoolVar(&strict, "strict", false, "exit 2 on any bad line")
		sum.Flags().DurationVar(&flapWindow, "flap-window", 0, "a reversal within this is a flap (0: twice the cooldown the records carry)")

		var outPath, title string
		var sessions []string
		plot := &cobra.Command{
			Use:   "plot FILE -o OUT.png",
			Short: "Timeline of headroom, rung and host tail (PNG or SVG)",
			Long: `plot draws three panels against time since each session's first tick:
headroom (free / budget), rung (0 resident, 1 pinned, 2 deep, 3 refuse) and
the host tail in MiB, one line per session. The format follows -o's
extension: .png or .svg.`,
			Example: `  mstar trace plot trace.jsonl -o trace.png
  mstar trace plot trace.jsonl -o spike.svg --session ladder/file/64MiB/spike`,
			Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if outPath == "" {
					return usageErr("-o is required (a .png or .svg path)")
				}
				f, err := a.readTrace(args[0], false)
				if err != nil {
					return err
				}
				if err := traceplot.Plot(f, outPath, traceplot.PlotOptions{Sessions: sessions, Title: title}); err != nil {
					return badInput(err)
				}
				n := 0 // the records plotted: --session's only
				for _, r := range f.Records {
					if len(sessions) == 0 || slices.Contains(sessions, r.Session) {
						n++
					}
				}
				fmt.Fprintf(a.stdout, "wrote %s (%s)\n", outPath, units.Plural(n, "record"))
				return nil
			},
		}
		plot.Flags().StringVarP(&outPath, "out", "o", "", "output file, .png or .svg")
		plot.Flags().StringSliceVar(&sessions, "session", nil, "only these sessions")
		plot.Flags().StringVar(&title, "title", "", "title of the plot")
		cmd.AddCommand(sum, plot)
		return cmd
	})
}
