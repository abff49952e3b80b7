package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/reports/results"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// exampleCommands splits a help example into the mstar command lines it
// runs: comments dropped, "&&", "|" and ";" separating commands,
// redirections and what follows them dropped, single quotes honoured.
func exampleCommands(line string) [][]string {
	var cmds [][]string
	var cur []string
	var tok strings.Builder
	inTok, quoted, skip := false, false, false
	flush := func() {
		if inTok && !skip {
			cur = append(cur, tok.String())
		}
		tok.Reset()
		inTok = false
	}
	end := func() {
		flush()
		if len(cur) > 0 {
			cmds = append(cmds, cur)
		}
		cur, skip = nil, false
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted:
			if c == '\'' {
				quoted = false
			} else {
				tok.WriteByte(c)
			}
		case c == '\'':
			quoted, inTok = true, true
		case c == '#' && !inTok:
			end()
			return cmds
		case c == ' ' || c == '\t':
			flush()
		case c == '&' || c == '|' || c == ';':
			end()
		case c == '>' || c == '<':
			flush()
			skip = true // the redirection's target is not an argument
		default:
			tok.WriteByte(c)
			inTok = true
		}
	}
	end()
	return cmds
}

// committedMetrics are the metric names of the results documents kept in
// reports/measured: what an example's --metric or --metrics may name.
func committedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	root := filepath.Join("..", "..", "reports", "measured")
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".json") {
			return nil
		}
		doc, err := results.ReadFile(p)
		if err != nil {
			return nil // not a results document (a trace, a doctor report)
		}
		for _, r := range doc.Results {
			for _, m := range r.Metrics {
				known[m.Name] = true
			}
		}
		return nil
	})
	if len(known) < 10 {
		t.Fatalf("only %d metric names found under %s", len(known), root)
	}
	return known
}

// Every example in every command's help must parse: the command exists,
// its flags exist and take the values given, and the metrics it names
// exist in results documents (the help once said --metric tflops).
func TestHelpExamplesAreValid(t *testing.T) {
	known := committedMetrics(t)
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
	var visit func(c *cobra.Command)
	checked := 0
	visit = func(c *cobra.Command) {
		for _, line := range strings.Split(c.Example, "\n") {
			for _, args := range exampleCommands(line) {
				if args[0] != "mstar" {
					continue
				}
				root := newRoot(a)
				cmd, rest, err := root.Find(args[1:])
				if err != nil || cmd == root {
					t.Errorf("%s: example %q: no such command (%v)", c.CommandPath(), line, err)
					continue
				}
				if !cmd.DisableFlagParsing {
					if err := cmd.ParseFlags(rest); err != nil {
						t.Errorf("%s: example %q: %v", c.CommandPath(), line, err)
						continue
					}
				}
				// A flag naming a file of the repo (an example runs from its
				// root) must name one that is there: fixtures move.
				cmd.Flags().Visit(func(f *pflag.Flag) {
					v := f.Value.String()
					for _, dir := range []string{"testdata/", "reports/", "kernels/", "scripts/"} {
						if strings.HasPrefix(v, dir) {
							if _, err := os.Stat(filepath.Join("..", "..", v)); err != nil {
								t.Errorf("%s: example %q: --%s %s: %v", c.CommandPath(), line, f.Name, v, err)
							}
						}
					}
				})
				for _, name := range []string{"metric", "metrics"} {
					f := cmd.Flags().Lookup(name)
					if f == nil || !f.Changed {
						continue
					}
					for _, m := range strings.Split(strings.Trim(f.Value.String(), "[]"), ",") {
						if m = strings.TrimSpace(m); m != "" && !known[m] {
							t.Errorf("%s: example %q: --%s %s: no results document has a metric %q", c.CommandPath(), line, name, m, m)
						}
					}
				}
				checked++
			}
		}
		for _, sub := range c.Commands() {
			visit(sub)
		}
	}
	visit(newRoot(a))
	if checked < 20 {
		t.Errorf("checked only %d example commands", checked)
	}
}

func TestExampleCommandsSplitsShellLines(t *testing.T) {
	got := exampleCommands(`mstar spill-matrix --cells 'ladder*' --trace t.jsonl && mstar trace summarize t.jsonl   # a comment`)
	if len(got) != 2 || strings.Join(got[0], " ") != "mstar spill-matrix --cells ladder* --trace t.jsonl" || strings.Join(got[1], " ") != "mstar trace summarize t.jsonl" {
		t.Errorf("got %q", got)
	}
	got = exampleCommands(`mstar report diff a.json b.json --format markdown >> pr.md`)
	if len(got) != 1 || len(got[0]) != 7 {
		t.Errorf("redirection: got %q", got)
	}
}
