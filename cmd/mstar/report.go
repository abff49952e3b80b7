package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mstar-dev/mstar/internal/limits"
	"github.com/mstar-dev/mstar/kernels/router"
	"github.com/mstar-dev/mstar/reports"
	"github.com/mstar-dev/mstar/reports/results"
	"github.com/mstar-dev/mstar/trace"
	"github.com/spf13/cobra"
)

func init() {
	register(func(a *app) *cobra.Command {
		cmd := &cobra.Command{
			Use:   "report",
			Short: "Tables, statistical diffs, exports, merges and plots of results documents",
			Long: `report reads the results documents that measuring commands write (--out), in
either form: one JSON document, or the NDJSON stream a long run writes as it
goes; a FILE of "-" is read from stdin. It never measures anything itself.

  show    tables: one per environment, a row per result, median ± 95% CI
  diff    compare two documents (Mann-Whitney U test, noise between rounds);
          exit 1 on a failed gate, a missing result or a regression (for CI)
  export  the Go benchmark format, for benchstat and other golang.org/x/perf tools
  merge   join documents from several machines or shards into one
  plot    a metric against a numeric parameter, PNG or SVG

Exit codes: 0 ok; 1 a failed gate, a missing result or a regression (diff
only); 2 bad usage or bad input (a missing, empty or malformed file, a wrong
schema version, a merge of one run twice).`,
			Example: `  mstar report show results.json
  mstar report diff base.json new.json --threshold 5
  mstar report export --format gobench base.json > base.txt
  mstar report merge -o all.json host1.json host2.json
  mstar report plot --metric latency --x batch --logx -o latency.png results.json`,
			// Without this, cobra prints help and exits 0 for "report typo".
			Args: cobra.ArbitraryArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usageErr("unknown command %q for %q (see 'mstar report --help')", args[0], cmd.CommandPath())
				}
				return cmd.Help()
			},
		}
		cmd.AddCommand(reportShowCmd(a), reportDiffCmd(a), reportExportCmd(a), reportMergeCmd(a), reportPlotCmd(a))
		return cmd
	})
}

// readDocs reads results documents, "-" from stdin; any problem is bad
// input (exit 2).
func (a *app) readDocs(paths []string) ([]*results.Document, error) {
	docs := make([]*results.Document, 0, len(paths))
	stdin := false
	for _, p := range paths {
		var d *results.Document
		var err error
		if p == "-" {
			if stdin {
				return nil, usageErr("- (stdin) given twice")
			}
			stdin = true
			var b []byte
			if b, err = limits.ReadAll(a.stdin, true); err != nil {
				return nil, badInput(fmt.Errorf("reading stdin: %w", err))
			}
			if d, err = results.Read(bytes.NewReader(b), "stdin"); err != nil {
				if hint := otherKind(b); hint != "" {
					return nil, usageErr("stdin: %s", hint)
				}
			}
		} else {
			// A run killed before it wrote FILE left its finished results
			// in FILE.partial.ndjson.
			if _, serr := os.Stat(p); errors.Is(serr, fs.ErrNotExist) {
				if _, perr := os.Stat(p + partialSuffix); perr == nil {
					say(a.stderr, "%s does not exist; reading %s, the results its run finished", p, p+partialSuffix)
					p += partialSuffix
				}
			}
			d, err = results.ReadFile(p)
			if err != nil {
				// The kinds of file are easy to mix up; the JSON error about
				// one read as another would not say so.
				if f, ferr := os.Open(p); ferr == nil {
					b, _ := limits.ReadAll(f, true)
					f.Close()
					if hint := otherKind(b); hint != "" {
						return nil, usageErr("%s: %s", p, hint)
					}
				}
			}
		}
		if err != nil {
			return nil, badInput(err)
		}
		if slices.Contains(d.Warnings, results.WarnInterrupted) {
			name := p
			if p == "-" {
				name = "stdin"
			}
			say(a.stderr, "warning: %s: %s", name, results.WarnInterrupted)
		}
		docs = append(docs, d)
	}
	return docs, nil
}

// otherKind says what b is when it is one of mstar's other files, a
// regulator trace or a routing file, and which command reads it; "" else.
func otherKind(b []byte) string {
	if f, err := trace.Read(bytes.NewReader(b), ""); err == nil && len(f.Records) > 0 {
		return "this is a trace; use mstar trace summarize"
	}
	if _, err := router.ReadTrace(bytes.NewReader(b)); err == nil {
		return "this is a routing file; replay it with bench moe --routing-file or ablate router --routing-file"
	}
	return ""
}

func oneOf(flag, v string, allowed []string) error {
	if !slices.Contains(allowed, v) {
		return usageErr("--%s %q: want one of %s", flag, v, strings.Join(allowed, ", "))
	}
	return nil
}

func reportShowCmd(a *app) *cobra.Command {
	var format string
	var asRun, gpus bool
	var params, metrics []string
	var wide bool
	cmd := &cobra.Command{
		Use:   "show FILE...",
		Short: "Print results as tables: median ± 95% CI per metric, gates, one table per environment",
		Long: `show prints the results of one or more documents as tables. Results are
grouped by the environment they were measured in (host, GPU, driver,
versions, ...): the environment lines all tables share are printed once at
the top, then above each table the lines that tell it apart, as benchstat
prints configuration.

Each row is a result; the columns are its parameters, its metrics (the
median of all samples ± the half-width of the 95% confidence interval as a
percentage of the median, the unit in the header), and its gates (PASS or
FAIL). Below a table come the reasons of failed gates, why metrics were not
measured, and warnings. A metric that was not measured shows "unmeasured",
never 0; an interval that needs more samples shows ±∞. Interrupted runs and
failed gates are flagged at the top.

Text tables fit 100 columns: a wider one is split into tables of fewer
metric columns, each repeating the name and parameters, and a result with
many columns is printed as a block of "column  value" lines; --wide prints
each table whole.

--params and --metrics choose and order the columns; results with none of
the chosen metrics are left out. Formats: text (default), markdown (for a
PR comment), csv (one table, a column per environment key that differs,
median/ci_lo/ci_hi/n per metric), json (the summaries).

--run prints each document as the command that measured it printed it when
it finished (the same code draws both), one after the other.

--gpus prints, per document, the per-GPU summary of a run on several GPUs
(--devices) or of shards merged from many machines: a row per GPU (host,
device, UUID, PCIe link, results) with the flags — a copy bandwidth more
than 10% below its peers' median, a PCIe link below its max.`,
		Example: `  mstar report show results.json
  mstar report show --params batch,model --metrics latency,throughput a.json b.json
  mstar report show --format markdown results.json >> $GITHUB_STEP_SUMMARY
  mstar report show --format csv results.json > results.csv
  mstar report show --wide results.json
  ssh gpu-box cat results.json | mstar report show -
  mstar report show --run moe.json                     # the table bench moe printed
  mstar report show --gpus results.json                # which GPU is the outlier`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := oneOf("format", format, reports.TableFormats); err != nil {
				return err
			}
			docs, err := a.readDocs(args)
			if err != nil {
				return err
			}
			if gpus {
				if asRun || cmd.Flags().Changed("format") || cmd.Flags().Changed("params") || cmd.Flags().Changed("metrics") || wide {
					return usageErr("--gpus prints the per-GPU summary alone: leave out --run, --format, --params, --metrics and --wide")
				}
				for _, d := range docs {
					rows, _ := reports.SummarizeGPUs(d)
					if err := reports.WriteGPUSummary(a.stdout, rows); err != nil {
						return err
					}
				}
				return nil
			}
			if asRun {
				if cmd.Flags().Changed("format") || cmd.Flags().Changed("params") || cmd.Flags().Changed("metrics") || wide {
					return usageErr("--run prints the run's own text table: leave out --format, --params, --metrics and --wide")
				}
				for _, d := range docs {
					if err := reports.RunTable(a.stdout, d); err != nil {
						return badInput(err)
					}
				}
				return nil
			}
			opt := reports.TableOptions{Wide: wide}
			if cmd.Flags().Changed("params") {
				opt.Params = nonEmpty(params)
			}
			if cmd.Flags().Changed("metrics") {
				opt.Metrics = nonEmpty(metrics)
			}
			if err := reports.Render(a.stdout, docs, format, opt); err != nil {
				return badInput(err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", reports.FormatText, "output format: "+strings.Join(reports.TableFormats, ", "))
	cmd.Flags().StringSliceVar(&params, "params", nil, "parameter columns, in order (comma-separated; empty for none)")
	cmd.Flags().StringSliceVar(&metrics, "metrics", nil, "metric columns, in order (comma-separated)")
	cmd.Flags().BoolVar(&wide, "wide", false, "text: whole tables, however wide (default: fitted into 100 columns)")
	cmd.Flags().BoolVar(&asRun, "run", false, "print the table the measuring command printed when it finished")
	cmd.Flags().BoolVar(&gpus, "gpus", false, "print the per-GPU summary (several GPUs or machines merged) and its flags")
	return cmd
}

// nonEmpty drops empty names and returns a non-nil slice: a selection.
func nonEmpty(ss []string) []string {
	out := []string{}
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func reportDiffCmd(a *app) *cobra.Command {
	var format string
	var threshold, alpha float64
	var metrics []string
	var allowMissing, failNoisy, wide bool
	cmd := &cobra.Command{
		Use:   "diff BASE NEW",
		Short: "Compare two results documents; exit 1 on a failed gate, missing result or regression",
		Long: `diff pairs the results of NEW with those of BASE by name and parameters and,
for every metric of every pair, prints both medians with their 95% CIs, the
change in percent, the p-value of the Mann-Whitney U test — the same
statistics as benchstat (golang.org/x/perf/benchmath) — and each side's noise
between rounds. A change that is not significant prints "~". A geometric-mean
row summarises each deciding metric. Either file may be a merged document
(mstar report merge); results with the same name and parameters on one side
are pooled, with a warning when they come from different machines. A result
whose kernel configuration changed (params config, config_source, and a
stage's kernel) pairs with the one it replaces; its row reads "config=A → B".

What decides (the output says which metrics did):
  gates        a gate that failed in NEW (correctness first) fails the diff,
               whatever the statistics say
  missing      a result of BASE that NEW lacks, or an interrupted NEW, fails
               it (--allow-missing accepts them)
  metrics      one verdict per measured quantity: metrics derived from
               another (throughput and bandwidth from latency, every % of a
               ceiling or floor) are shown but do not decide, and neither do
               context results (the ceilings, memcpy references, tuning
               candidates); --metrics names the metrics that decide instead,
               wherever they appear

A deciding metric regressed when all of these hold, and the verdict says which
did not:
  worse        it moved the wrong way for its direction (lower/higher is better)
  significant  p <= --alpha
  material     the change is larger than --threshold percent
  enough       there are enough samples to tell at all (at alpha 0.05 the
               U test needs at least 4 a side; fewer can never be significant;
               the medians are shown anyway)
  quiet        neither side's noise is wider than --threshold: noise is the
               spread of the medians of a document's rounds (--rounds of the
               measuring commands) or of the runs merged into one side; a
               change within wider noise is "too noisy to tell at X%", with
               the numbers (exit 0, or 1 with --fail-noisy)

Formats: text (tables fitted into 100 columns, metrics that do not decide in
one line each; --wide for all their tables), markdown (a PR comment), csv
(one row per verdict, raw numbers), json (every verdict with its numbers, and
the outcome).

Exit codes: 0 no failure; 1 a failed gate in NEW, a missing result or an
interrupted NEW, a regression of a deciding metric (or a noisy change with
--fail-noisy); 2 bad usage or input, or nothing to compare (no deciding
metric is measured on both sides), so a CI gate never passes by comparing
nothing. The reasons go to stderr in at most three lines.`,
		Example: `  mstar report diff base.json new.json
  mstar report diff --threshold 2 --alpha 0.01 base.json new.json
  mstar report diff --metrics latency,pct_floor base.json new.json
  mstar report diff --format markdown base.json new.json > comment.md
  mstar report diff --format json base.json new.json > verdicts.json`,
		Args: func(cmd *cobra.Command, args []string) error {
			// Several runs a side is the common mistake: say how.
			if len(args) > 2 {
				return badInput(fmt.Errorf("%saccepts 2 arguments (BASE NEW), received %d\n"+
					"  for several runs a side, merge each side first: mstar report merge -o base.json RUN ...", subcommand(cmd), len(args)))
			}
			return cobra.ExactArgs(2)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := oneOf("format", format, reports.DiffFormats); err != nil {
				return err
			}
			if err := atLeast("threshold", threshold, 0, "a percentage"); err != nil {
				return err
			}
			if !(alpha > 0 && alpha < 1) {
				return usageErr("--alpha %v: want a level between 0 and 1", alpha)
			}
			docs, err := a.readDocs(args)
			if err != nil {
				return err
			}
			opt := reports.DiffOptions{Threshold: threshold, Alpha: alpha, AllowMissing: allowMissing, FailNoisy: failNoisy}
			if cmd.Flags().Changed("metrics") {
				opt.Metrics = nonEmpty(metrics)
				if len(opt.Metrics) == 0 {
					return usageErr("--metrics: name at least one metric")
				}
				if err := knownMetrics(docs, opt.Metrics); err != nil {
					return err
				}
			}
			c := reports.Diff(docs[:1], docs[1:], opt)
			failures := c.Failures()
			if c.Compared() == 0 && len(failures) == 0 {
				// A CI gate that compared nothing must not pass quietly;
				// no table either, whose "ok" would read as a pass.
				why := fmt.Sprintf("%d result(s) only in base, %d only in new, %d metric(s) compared, none deciding and measured on both sides",
					len(c.OnlyBase), len(c.OnlyNew), len(c.Metrics))
				if _, shown := c.Deciding(); len(shown) > 0 && opt.Metrics == nil {
					why += "; name the metrics that should decide with --metrics"
				}
				return usageErr("nothing to compare: %s", why)
			}
			if err := reports.RenderDiffWide(a.stdout, c, format, wide); err != nil {
				return err
			}
			if ct := c.CannotTell(); len(ct) > 0 {
				say(a.stderr, "warning: cannot tell whether %d metric(s) changed: too few samples (at least %d a side needed): %s",
					len(ct), c.SamplesNeeded(), brief(strings.Join(c.CannotTellSummary(), "; "), 160))
			}
			if noisy := c.Noisy(); len(noisy) > 0 && !failNoisy {
				say(a.stderr, "warning: %d change(s) too noisy to tell at %s%% (see the verdicts; --fail-noisy fails them)", len(noisy), strconv.FormatFloat(threshold, 'g', -1, 64))
			}
			if len(failures) > 0 {
				return failed("%s", brief(strings.Join(failures, "; "), 400))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&format, "format", reports.FormatText, "output format: "+strings.Join(reports.DiffFormats, ", "))
	f.Float64Var(&threshold, "threshold", 5, "smallest change (%) that counts, on top of the wider side's noise; also the noise bar")
	f.Float64Var(&alpha, "alpha", 0.05, "significance level of the Mann-Whitney U test")
	f.StringSliceVar(&metrics, "metrics", nil, "metrics that decide, wherever they are (default: measured, not derived or context)")
	f.BoolVar(&allowMissing, "allow-missing", false, "pass although NEW lacks results of BASE or was interrupted")
	f.BoolVar(&failNoisy, "fail-noisy", false, "exit 1 also for a change within noise wider than --threshold")
	f.BoolVar(&wide, "wide", false, "all tables, as wide as their cells (default: 100 columns)")
	return cmd
}

// knownMetrics refuses a --metrics name that no document has.
func knownMetrics(docs []*reports.Document, names []string) error {
	have := map[string]bool{}
	for _, d := range docs {
		for _, r := range d.Results {
			for _, m := range r.Metrics {
				have[m.Name] = true
			}
		}
	}
	for _, n := range names {
		if !have[n] {
			all := make([]string, 0, len(have))
			for k := range have {
				all = append(all, k)
			}
			slices.Sort(all)
			return usageErr("--metrics: no metric named %q (have: %s)", n, strings.Join(all, ", "))
		}
	}
	return nil
}

// brief cuts s to about n characters, saying so.
func brief(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := strings.LastIndex(s[:n], " ")
	if cut < n/2 {
		cut = n
	}
	return s[:cut] + " … (see the report)"
}

func reportExportCmd(a *app) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "export --format gobench FILE...",
		Short: "Write results in the Go benchmark format, for benchstat",
		Long: `export writes the results of the documents to stdout in the Go benchmark
format (golang.org/design/14313-benchmark-format), so benchstat and the other
golang.org/x/perf tools read them:

  - the environment becomes configuration lines ("host: gpu-a"), keys lower
    case without spaces or colons;
  - each sample of each metric is one line
    "Benchmark<Name>/<param>=<value>...-1  1  <sample> <metric>-<unit>",
    e.g. "BenchmarkMoe/batch=64/model=qwen3-1 1 312.5 latency-us";
  - the unit joins metric name and unit because benchstat keeps one column
    per unit; a "Unit latency-us better=lower" line before it carries the
    metric's direction;
  - unmeasured metrics are left out (unmeasured is not zero).

benchstat puts documents whose environments differ (another commit, another
host) into separate tables; compare them in one with -table '' or -ignore.`,
		Example: `  mstar report export --format gobench base.json > base.txt
  mstar report export --format gobench new.json > new.txt
  benchstat base.txt new.txt`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := oneOf("format", format, []string{"gobench"}); err != nil {
				return err
			}
			docs, err := a.readDocs(args)
			if err != nil {
				return err
			}
			return reports.ExportGoBench(a.stdout, docs)
		},
	}
	cmd.Flags().StringVar(&format, "format", "gobench", "export format: gobench")
	return cmd
}

func reportMergeCmd(a *app) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "merge -o OUT FILE...",
		Short: "Join results documents from several machines or shards into one",
		Long: `merge joins documents into one, written atomically to OUT. Every result keeps
the environment it was measured in: the merged document's environment holds
the keys all results share, and each result records the keys in which it
differs (its host, GPU, commit, ...), and the run it came from (its run id),
so two runs of one host stay distinguishable. 'mstar report show' on the
merged document prints the same tables, grouped by environment, as on its
parts; 'mstar report diff' accepts it on either side, and takes the runs
merged into one side as rounds: their spread is that side's noise. Merged
documents merge again.

Refused (exit 2): an OUT that is one of the inputs, and one run given twice
(the same file, a copy, or a document already inside a merged input): its
samples would count twice.

Shards (documents of --shard I/N runs) must cover their sweep exactly once:
refused (exit 2) are a shard given twice or a cell in two shards (overlap),
a shard I of N missing or interrupted (gap), shards of one command that
split different cell lists, and a whole run beside its own shards. Shards of
one sweep are the documents whose command lines agree but for --shard, --out,
--dir, --device and the other output paths. Each row keeps its run id and
environment (host, device, GPU and its UUID), so 'report show' tells which
machine measured it.`,
		Example: `  mstar report merge -o all.json shard-1-of-3.json shard-2-of-3.json shard-3-of-3.json
  mstar report merge -o fleet.json h200-*.json h100-*.json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return usageErr("merge: -o OUT is required")
			}
			for _, in := range args {
				if sameFile(in, out) {
					// Writing over an input would lose it if anything went wrong.
					return usageErr("merge: -o %s is also an input: write the merged document to a new file", out)
				}
			}
			docs, err := a.readDocs(args)
			if err != nil {
				return err
			}
			m, notes, err := reports.MergeNamed(func(i int) string { return args[i] }, docs...)
			if err != nil {
				return badInput(err)
			}
			if err := results.WriteFile(out, m); err != nil {
				return badInput(err)
			}
			envs := map[string]bool{}
			for i := range m.Results {
				envs[m.EnvOf(&m.Results[i]).Key()] = true
			}
			for _, n := range notes {
				say(a.stderr, "%s", n)
			}
			say(a.stderr, "merged %d document(s), %d result(s) from %d environment(s) into %s", len(docs), len(m.Results), len(envs), out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "file to write the merged document to")
	return cmd
}

// sameFile reports whether paths a and b name one file: the same path, or
// two names of one existing file (a link, ./x and x).
func sameFile(a, b string) bool {
	if a == "-" || b == "-" {
		return false
	}
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

func reportPlotCmd(a *app) *cobra.Command {
	var opt reports.PlotOptions
	var out string
	var where map[string]string
	cmd := &cobra.Command{
		Use:   "plot --metric M --x PARAM -o OUT.png|OUT.svg FILE...",
		Short: "Plot a metric against a numeric parameter, one line per series",
		Long: `plot draws the median of a metric against a numeric parameter, with the 95%
confidence interval of each median as an error bar. There is one line per
series: by default per result name and combination of the other parameters,
or per value of --series. --where keeps only results with the given
parameter values. With several files, each line is labelled with its file;
results from different environments are told apart by the keys that differ.
Unmeasured points are left out, with a warning, never drawn as 0.

The image format follows OUT's extension: .png or .svg.`,
		Example: `  mstar report plot --metric latency --x batch --logx -o latency.png results.json
  mstar report plot --metric throughput --x batch --series model -o throughput.svg results.json
  mstar report plot --metric bandwidth --x size --where dir=h2d --logx -o h2d.png sw1.json sw2.json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var missing []string
			for _, f := range []struct{ flag, v string }{{"--metric", opt.Metric}, {"--x", opt.X}, {"-o", out}} {
				if f.v == "" {
					missing = append(missing, f.flag)
				}
			}
			switch len(missing) {
			case 0:
			case 1:
				return usageErr("plot: %s is required (see 'mstar report plot --help')", missing[0])
			default:
				return usageErr("plot: %s and %s are required (see 'mstar report plot --help')",
					strings.Join(missing[:len(missing)-1], ", "), missing[len(missing)-1])
			}
			if _, err := reports.PlotFormat(out); err != nil {
				return usageErr("%v", err)
			}
			docs, err := a.readDocs(args)
			if err != nil {
				return err
			}
			opt.Where = where
			for _, p := range args {
				opt.Labels = append(opt.Labels, filepath.Base(p))
			}
			warnings, err := reports.PlotFile(out, docs, opt)
			for _, w := range warnings {
				say(a.stderr, "warning: %s", w)
			}
			if err != nil {
				return badInput(err)
			}
			say(a.stderr, "wrote %s", out)
			return nil
		},
	}
	cmd.Flags().StringVar(&opt.Metric, "metric", "", "metric to plot (y)")
	cmd.Flags().StringVar(&opt.X, "x", "", "numeric parameter on the x axis")
	cmd.Flags().StringVar(&opt.Series, "series", "", "parameter whose values name the lines (default: name and all other parameters)")
	cmd.Flags().StringToStringVar(&where, "where", nil, "keep only results with these parameter values (k=v,k2=v2)")
	cmd.Flags().BoolVar(&opt.LogX, "logx", false, "logarithmic x axis")
	cmd.Flags().BoolVar(&opt.LogY, "logy", false, "logarithmic y axis")
	cmd.Flags().StringVar(&opt.Title, "title", "", "plot title (default: METRIC vs X)")
	cmd.Flags().StringVarP(&out, "out", "o", "", "image to write: .png or .svg")
	return cmd
}
