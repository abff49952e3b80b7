package main

import (
	"bytes"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/reports/results"
)

var updateReport = flag.Bool("update-report", false, "rewrite cmd/mstar/testdata/report*.golden")

// mstarReport runs the CLI in-process.
func mstarReport(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(""), &out, &errb)
	if s := errb.String(); strings.Contains(s, "panic") || strings.Contains(s, "goroutine ") {
		t.Fatalf("mstar %s: stderr shows a Go panic:\n%s", strings.Join(args, " "), s)
	}
	return out.String(), errb.String(), code
}

// latencyDoc writes a document whose results each have n latency samples
// around center (scaled per result) with relative noise, from a seeded RNG.
func latencyDoc(t *testing.T, dir, name string, seed uint64, n int, center, noise float64) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 99))
	d := results.NewDocument("bench moe", []string{"mstar", "bench", "moe"}, results.Env{"host": "gpu-a", "gpu": "NVIDIA H200"})
	d.Start = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	for _, batch := range []int{1, 16, 64} {
		var s []float64
		for range n {
			s = append(s, math.Round(center*float64(batch)*(1+noise*rng.NormFloat64())*1000)/1000)
		}
		d.Results = append(d.Results, results.Result{
			Name: "moe", Params: results.Params{"batch": strconv.Itoa(batch)},
			Metrics: []results.Metric{{Name: "latency", Unit: "us", Better: results.LowerIsBetter, Samples: s}},
		})
	}
	d.Finish()
	path := filepath.Join(dir, name)
	if err := results.WriteFile(path, d); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReportDiffExitCodes(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name       string
		base, next string
		wantCode   int
		wantErr    []string // on stderr
		wantOut    []string // on stdout
	}{
		{
			name:     "A/A from one distribution passes",
			base:     latencyDoc(t, dir, "a1.json", 1, 10, 50, 0.01),
			next:     latencyDoc(t, dir, "a2.json", 2, 10, 50, 0.01),
			wantCode: exitOK,
			wantOut:  []string{"no regressions"},
		},
		{
			name:     "10% slower with 10 samples at 1% noise fails",
			base:     latencyDoc(t, dir, "b1.json", 3, 10, 50, 0.01),
			next:     latencyDoc(t, dir, "b2.json", 4, 10, 55, 0.01),
			wantCode: exitFailed,
			wantErr:  []string{"3 regression(s)", "moe/batch=1: latency: REGRESSION: +", "moe/batch=64: latency: REGRESSION", "p=0.000, n=10+10, threshold 5%"},
			wantOut:  []string{"3 regression(s)"},
		},
		{
			name:     "3 samples a side cannot tell",
			base:     latencyDoc(t, dir, "c1.json", 5, 3, 50, 0.01),
			next:     latencyDoc(t, dir, "c2.json", 6, 3, 75, 0.01),
			wantCode: exitOK,
			wantErr:  []string{"cannot tell whether 3 metric(s) changed: too few samples (at least 4 a side needed)", "(n=3+3)"},
			wantOut:  []string{"the U test needs at least 4 a side", "latency in 3 results (n=3+3)", "no regressions"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := mstarReport(t, "report", "diff", tc.base, tc.next)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, out, stderr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
		})
	}
	// A large threshold turns the slowdown into "within threshold".
	_, stderr, code := mstarReport(t, "report", "diff", "--threshold", "15", filepath.Join(dir, "b1.json"), filepath.Join(dir, "b2.json"))
	if code != exitOK {
		t.Errorf("--threshold 15: exit %d, stderr %s", code, stderr)
	}
	out, _, code := mstarReport(t, "report", "diff", "--format", "markdown", filepath.Join(dir, "b1.json"), filepath.Join(dir, "b2.json"))
	if code != exitFailed || !strings.Contains(out, "### latency (us)") || !strings.Contains(out, "| moe/batch=1 ") {
		t.Errorf("markdown diff: exit %d\n%s", code, out)
	}
}

func TestReportBadInput(t *testing.T) {
	good := filepath.Join("testdata", "report-results.json")
	missing := filepath.Join(t.TempDir(), "missing.json")
	for _, tc := range []struct {
		name string
		args []string
		want string // the whole stderr
	}{
		{"malformed JSON", []string{"report", "show", "testdata/report-malformed.json"},
			"mstar: reading testdata/report-malformed.json: line 5, column 3: invalid character '\"' after object key:value pair\n"},
		{"wrong schema version", []string{"report", "show", "testdata/report-schema99.json"},
			"mstar: reading testdata/report-schema99.json: unsupported schema version 99 (this mstar reads version 1)\n"},
		{"empty file", []string{"report", "show", "testdata/report-empty.json"},
			"mstar: reading testdata/report-empty.json: empty file\n"},
		{"missing file", []string{"report", "show", missing},
			"mstar: reading " + missing + ": no such file or directory\n"},
		{"malformed stream line", []string{"report", "show", "testdata/report-badline.ndjson"},
			"mstar: reading testdata/report-badline.ndjson: line 3, column 43: unexpected end of input (truncated file?)\n"},
		{"diff with a bad side", []string{"report", "diff", good, "testdata/report-empty.json"},
			"mstar: reading testdata/report-empty.json: empty file\n"},
		{"export of a missing file", []string{"report", "export", missing},
			"mstar: reading " + missing + ": no such file or directory\n"},
		{"merge of a wrong schema", []string{"report", "merge", "-o", filepath.Join(t.TempDir(), "m.json"), good, "testdata/report-schema99.json"},
			"mstar: reading testdata/report-schema99.json: unsupported schema version 99 (this mstar reads version 1)\n"},
		{"plot of malformed JSON", []string{"report", "plot", "--metric", "latency", "--x", "batch", "-o", filepath.Join(t.TempDir(), "p.png"), "testdata/report-malformed.json"},
			"mstar: reading testdata/report-malformed.json: line 5, column 3: invalid character '\"' after object key:value pair\n"},
		{"unknown format", []string{"report", "show", "--format", "html", good},
			"mstar: --format \"html\": want one of text, markdown, csv, json\n"},
		{"unknown metric", []string{"report", "show", "--metrics", "latencyy", good},
			"mstar: no metric named \"latencyy\" (have: latency, tflops)\n"},
		{"diff needs two files", []string{"report", "diff", good},
			"mstar: report diff: accepts 2 arguments, received 1 (usage: mstar report diff BASE NEW; see 'mstar report diff --help')\n"},
		{"bad alpha", []string{"report", "diff", "--alpha", "2", good, good},
			"mstar: --alpha 2: want a level between 0 and 1\n"},
		{"negative threshold", []string{"report", "diff", "--threshold", "-1", good, good},
			"mstar: --threshold -1: must be at least 0 (a percentage)\n"},
		{"NaN threshold", []string{"report", "diff", "--threshold", "NaN", good, good},
			"mstar: --threshold NaN: must be at least 0 (a percentage)\n"},
		{"merge without -o", []string{"report", "merge", good},
			"mstar: merge: -o OUT is required\n"},
		{"plot to a gif", []string{"report", "plot", "--metric", "latency", "--x", "batch", "-o", "p.gif", good},
			"mstar: plot: p.gif: cannot tell the image format from the extension \".gif\" (want .png or .svg)\n"},
		{"export format", []string{"report", "export", "--format", "csv", good},
			"mstar: --format \"csv\": want one of gobench\n"},
		{"typo subcommand", []string{"report", "shwo", good},
			"mstar: unknown command \"shwo\" for \"mstar report\" (see 'mstar report --help')\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := mstarReport(t, tc.args...)
			if code != exitBadInput {
				t.Errorf("exit code %d, want %d", code, exitBadInput)
			}
			if stderr != tc.want {
				t.Errorf("stderr (-want +got):\n-%q\n+%q", tc.want, stderr)
			}
			if strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr is not one line: %q", stderr)
			}
			if out != "" {
				t.Errorf("stdout not empty: %q", out)
			}
		})
	}
}

func TestReportShowGolden(t *testing.T) {
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"report-show.txt.golden", []string{"report", "show", "testdata/report-results.json"}},
		{"report-show-selected.md.golden", []string{"report", "show", "--format", "markdown", "--params", "batch", "--metrics", "latency", "testdata/report-results.json"}},
		{"report-show-noparams.csv.golden", []string{"report", "show", "--format", "csv", "--params", "", "testdata/report-results.json"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			out, stderr, code := mstarReport(t, tc.args...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			path := filepath.Join("testdata", tc.golden)
			if *updateReport {
				if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update-report)", err)
			}
			if string(want) != out {
				t.Errorf("%s (-want +got):\n-%s\n+%s", path, want, out)
			}
		})
	}
}

func TestReportMergeExportPlot(t *testing.T) {
	dir := t.TempDir()
	a := latencyDoc(t, dir, "a.json", 1, 6, 50, 0.01)
	b0, err := results.ReadFile(latencyDoc(t, dir, "b0.json", 2, 6, 50, 0.01))
	if err != nil {
		t.Fatal(err)
	}
	b0.Env["host"] = "gpu-b"
	b := filepath.Join(dir, "b.json")
	if err := results.WriteFile(b, b0); err != nil {
		t.Fatal(err)
	}
	merged := filepath.Join(dir, "m.json")
	_, stderr, code := mstarReport(t, "report", "merge", "-o", merged, a, b)
	if code != exitOK || !strings.Contains(stderr, "merged 2 document(s), 6 result(s) from 2 environment(s)") {
		t.Fatalf("merge: exit %d, stderr %q", code, stderr)
	}
	show, _, code := mstarReport(t, "report", "show", merged)
	parts, _, _ := mstarReport(t, "report", "show", a, b)
	if code != exitOK || show != parts || !strings.Contains(show, "host: gpu-b") {
		t.Errorf("show of the merged document differs from its parts:\n%s\n---\n%s", show, parts)
	}
	out, _, code := mstarReport(t, "report", "export", "--format", "gobench", merged)
	if code != exitOK || strings.Count(out, " latency-us\n") != 36 || !strings.Contains(out, "host: gpu-b\n") || !strings.Contains(out, "Unit latency-us better=lower\n") {
		t.Errorf("export: exit %d\n%s", code, out)
	}
	png := filepath.Join(dir, "p.png")
	_, stderr, code = mstarReport(t, "report", "plot", "--metric", "latency", "--x", "batch", "--logx", "-o", png, merged)
	if code != exitOK {
		t.Fatalf("plot: exit %d: %s", code, stderr)
	}
	if img, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(img, []byte("\x89PNG")) {
		t.Errorf("plot wrote no PNG: %v", err)
	}
	_, stderr, code = mstarReport(t, "report", "plot", "--metric", "nope", "--x", "batch", "-o", png, merged)
	if code != exitBadInput || !strings.Contains(stderr, `no result has parameter "batch" and metric "nope"`) {
		t.Errorf("plot of a missing metric: exit %d: %s", code, stderr)
	}
}

// A diff whose sides share no result compared nothing: exit 2, not a pass.
func TestReportDiffNothingCompared(t *testing.T) {
	dir := t.TempDir()
	base := latencyDoc(t, dir, "base.json", 1, 10, 50, 0.01)
	doc, err := results.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	for i := range doc.Results {
		doc.Results[i].Params["batch"] += "0" // renamed parameter values
	}
	renamed := filepath.Join(dir, "renamed.json")
	if err := results.WriteFile(renamed, doc); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runMstar(t, "report", "diff", base, renamed)
	if code != exitBadInput || !strings.Contains(stderr, "nothing to compare") {
		t.Errorf("exit %d, stderr %q; want exit 2 saying nothing to compare", code, stderr)
	}
	if stdout != "" {
		t.Errorf("printed a comparison of nothing (\"no regressions\" reads as a pass):\n%s", stdout)
	}
}

// The README's diff: narrow tables, rel_l2 (one sample a run) in one line,
// one short warning on stderr.
func TestReportDiffReadmeExampleReadable(t *testing.T) {
	stdout, stderr, code := runMstar(t, "report", "diff", "../../reports/measured/h200/moe-v3-qwen3-30b-a3b.json", "../../reports/measured/h200/moe-qwen3-30b-a3b.json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, l := range strings.Split(stdout, "\n") {
		if n := len([]rune(l)); n > 140 {
			t.Errorf("line of %d columns: %s", n, l)
		}
	}
	if strings.Contains(stdout, "rel_l2 (lower") || !strings.Contains(stdout, "rel_l2 in 13 results (n=1+1)") {
		t.Errorf("rel_l2 not summarised in one line:\n%s", stdout)
	}
	if n := strings.Count(stdout, "samples are equal") + strings.Count(stdout, "need >= "); n > 0 {
		t.Errorf("%d per-result warnings about rel_l2:\n%s", n, stdout)
	}
	if lines := strings.Split(strings.TrimSpace(stderr), "\n"); len(lines) != 1 || len(lines[0]) > 200 {
		t.Errorf("stderr, want one short line:\n%s", stderr)
	}
}
