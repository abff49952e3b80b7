package reports

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/mstar-dev/mstar/reports/results"
)

// A run table is the table a measuring command prints as it finishes,
// rendered from its document alone: the command prints it from the results
// it is about to write, and 'report show --run FILE' prints the same table
// from the file. A new suite registers its own here, keyed by the
// document's suite.
var runTables = map[string]func(w io.Writer, d *Document) error{
	"bench ceilings": ceilingsTable,
	"arena sweep":    sweepTable,
	"bench moe":      moeTable,
	"arena stress":   stressTable,
	"tune moe":       tuneTable,
}

// RegisterRunTable makes table the run table of suite's documents, for a
// suite whose package draws its own (from the document alone).
func RegisterRunTable(suite string, table func(w io.Writer, d *Document) error) {
	runTables[suite] = table
}

// HasRunTable reports whether documents of suite have a run table.
func HasRunTable(suite string) bool { return runTables[suite] != nil }

// RunTable prints d as the command that made it printed it; a suite without
// a table of its own gets the generic text tables.
func RunTable(w io.Writer, d *Document) error {
	if f := runTables[d.Suite]; f != nil {
		return f(w, d)
	}
	return Render(w, []*Document{d}, FormatText, TableOptions{})
}

// deviceLine names the device a document was measured on, as "ID (NAME)".
func deviceLine(d *Document) string {
	name := d.Env["gpu"]
	if name == "" {
		name = d.Env["cpu"]
	}
	return fmt.Sprintf("%s (%s)", d.Env["device"], name)
}

// ciText is a summary's 95% interval as ± % of its median, "±?" when
// there are too few samples.
func ciText(s Summary) string {
	if p := s.HalfWidthPct(); p == p && p < 1e9 {
		return fmt.Sprintf("±%.1f%%", p)
	}
	return "±?"
}

// writeTails writes each line of aligned, a tabwriter's output, followed
// by its tail: free text in the last column, like a kernel's name, that
// wraps under itself rather than pass TextWidth.
func writeTails(w io.Writer, aligned string, tails []string) error {
	for i, l := range strings.Split(strings.TrimSuffix(aligned, "\n"), "\n") {
		if _, err := fmt.Fprintln(w, wrap(l+tails[i], TextWidth, strings.Repeat(" ", utf8.RuneCountInString(l)))); err != nil {
			return err
		}
	}
	return nil
}

func ceilingsTable(w io.Writer, d *Document) error {
	fmt.Fprintf(w, "device: %s\n", deviceLine(d))
	// The method, last, wraps under itself.
	var aligned strings.Builder
	tw := tabwriter.NewWriter(&aligned, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ceiling\tmedian\t±95% CI\tunit\tsamples\tsize\t")
	methods := []string{"method"}
	for _, r := range d.Results {
		if r.Name != "ceiling" || len(r.Metrics) == 0 {
			continue
		}
		m := r.Metrics[0]
		what := r.Params["what"]
		if !m.Measured() {
			fmt.Fprintf(tw, "%s\tunmeasured\t\t%s\t0\t%s\t\n", what, m.Unit, r.Params["size"])
			methods = append(methods, m.Unmeasured)
			continue
		}
		s := results.Summarize(m.Samples)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t\n", what, FormatValue(s.Median), ciText(s), m.Unit, s.N, r.Params["size"])
		methods = append(methods, r.Params["method"])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeTails(w, aligned.String(), methods); err != nil {
		return err
	}
	// The GPU's state: ceilings measured while throttled, or why it was
	// not sampled (the document's warnings).
	for _, r := range d.Results {
		if note := r.ThrottleNote(); r.Name == "ceiling" && note != "" {
			fmt.Fprintln(w, wrap(fmt.Sprintf("note: %s %s", r.Params["what"], note), TextWidth, "    "))
		}
	}
	var ceils []results.Result
	for _, r := range d.Results {
		if r.Name == "ceiling" {
			ceils = append(ceils, r)
		}
	}
	if note := results.BusyHostNote(ceils); note != "" {
		fmt.Fprintln(w, wrap("note: ceilings: "+note, TextWidth, "    "))
	}
	for _, warn := range d.Warnings {
		fmt.Fprintln(w, wrap("note: "+warn, TextWidth, "    "))
	}
	return nil
}
