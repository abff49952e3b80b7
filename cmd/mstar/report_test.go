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

// mstarReport runs the CLI in-process; stderr as runMstar gives it.
func mstarReport(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(""), &out, &errb)
	if s := errb.String(); strings.Contains(s, "panic") || strings.Contains(s, "goroutine ") {
		t.Fatalf("mstar %s: stderr shows a Go panic:\n%s", strings.Join(args, " "), s)
	}
	return out.String(), unsay(errb.String()), code
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
			wantOut:  []string{"ok: no regression in 3 deciding comparisons"},
		},
		{
			name:     "10% slower with 10 samples at 1% noise fails",
			base:     latencyDoc(t, dir, "b1.json", 3, 10, 50, 0.01),
			next:     latencyDoc(t, dir, "b2.json", 4, 10, 55, 0.01),
			wantCode: exitFailed,
			wantErr:  []string{"3 regressions: moe/batch=1 latency +", "moe/batch=16 latency +"},
			wantOut:  []string{"moe/batch=1: latency: REGRESSION: +", "moe/batch=64: latency: REGRESSION", "p=0.000, n=10+10, threshold 5%", "FAIL: 3 regressions"},
		},
		{
			name:     "3 samples a side cannot tell",
			base:     latencyDoc(t, dir, "c1.json", 5, 3, 50, 0.01),
			next:     latencyDoc(t, dir, "c2.json", 6, 3, 75, 0.01),
			wantCode: exitOK,
			wantErr:  []string{"cannot tell whether 3 metric(s) changed: too few samples (at least 4 a side needed)", "(n=3+3)"},
			wantOut:  []string{"│ moe/batch=1  │ 49.34 µs │ 75.23 µs │", "│ 3+3 │ -     │ too few samples │", "ok: no regression, but no deciding comparison could tell (3 comparisons with too few samples)"},
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
	if code != exitFailed || !strings.Contains(out, "### latency (lower is better)") || !strings.Contains(out, "| moe/batch=1 ") {
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
	// Every result of base is missing from new: that alone fails.
	_, stderr, code := runMstar(t, "report", "diff", base, renamed)
	if code != exitFailed || !strings.Contains(stderr, "3 results of base missing from new: moe/batch=1, moe/batch=16, moe/batch=64") {
		t.Errorf("exit %d, stderr %q; want exit 1 naming the missing results", code, stderr)
	}
	stdout, stderr, code := runMstar(t, "report", "diff", "--allow-missing", base, renamed)
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
		if n := len([]rune(l)); n > 100 {
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

// editDoc reads a document, changes it and writes it under a new name.
func editDoc(t *testing.T, from, to string, edit func(d *results.Document)) string {
	t.Helper()
	d, err := results.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	edit(d)
	if err := results.WriteFile(to, d); err != nil {
		t.Fatal(err)
	}
	return to
}

// What fails a CI diff besides the statistics, and how it says so.
func TestReportDiffGatesMissingFormats(t *testing.T) {
	dir := t.TempDir()
	base := latencyDoc(t, dir, "base.json", 1, 10, 50, 0.01)
	same := latencyDoc(t, dir, "same.json", 2, 10, 50, 0.01)
	gate := editDoc(t, same, filepath.Join(dir, "gate.json"), func(d *results.Document) {
		d.Results[2].Gates = []results.Gate{{Name: "correctness", Pass: false, Reason: "rel L2 0.5 against the float64 reference (limit 0.01)"}}
	})
	missing := editDoc(t, same, filepath.Join(dir, "missing.json"), func(d *results.Document) { d.Results = d.Results[:2] })
	interrupted := editDoc(t, missing, filepath.Join(dir, "interrupted.json"), func(d *results.Document) { d.Warnings = append(d.Warnings, results.WarnInterrupted) })
	// Three quiet rounds a side (what --rounds 3 records), 10% slower.
	inRounds := func(d *results.Document) {
		d.Rounds = 3
		for i := range d.Results {
			m := &d.Results[i].Metrics[0]
			m.Rounds = nil
			for j := range m.Samples {
				m.Rounds = append(m.Rounds, j*3/len(m.Samples))
			}
		}
	}
	quietBase := editDoc(t, latencyDoc(t, dir, "qb.json", 7, 12, 50, 0.01), filepath.Join(dir, "quiet-base.json"), inRounds)
	slower := editDoc(t, latencyDoc(t, dir, "qn.json", 8, 12, 55, 0.01), filepath.Join(dir, "slower.json"), inRounds)
	noisyBase := editDoc(t, quietBase, filepath.Join(dir, "noisy-base.json"), func(d *results.Document) {
		for i := range d.Results {
			m := &d.Results[i].Metrics[0]
			for j := range m.Samples {
				m.Samples[j] *= 1 + 0.07*float64(m.Rounds[j]-1) // rounds 7% apart
			}
		}
	})
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
		wantOut  string
	}{
		{"failed gate in new", []string{gate}, exitFailed, "mstar: 1 gate failed in new: moe/batch=64: correctness: rel L2 0.5", "FAILED GATES in new"},
		{"failed gate in new, missing allowed", []string{"--allow-missing", gate}, exitFailed, "1 gate failed in new", ""},
		{"missing result", []string{missing}, exitFailed, "1 result of base missing from new: moe/batch=64 (--allow-missing to accept)", "MISSING from new:\nmoe/batch=64"},
		{"missing result allowed", []string{"--allow-missing", missing}, exitOK, "", "1 result missing, allowed"},
		{"interrupted new", []string{interrupted}, exitFailed, "new document 1 (bench moe) is interrupted", "INTERRUPTED:"},
		{"10% slower, quiet rounds", []string{slower}, exitFailed, "mstar: 3 regressions: moe/batch=1 latency +", "noise 0."},
		{"10% slower, noisy rounds", []string{slower}, exitOK, "3 change(s) too noisy to tell at 5%", "too noisy to tell at 5%: +"},
		{"10% slower, noisy rounds, --fail-noisy", []string{"--fail-noisy", slower}, exitFailed, "3 metrics too noisy to tell at 5% (--fail-noisy)", ""},
		{"json", []string{"--format", "json", gate}, exitFailed, "1 gate failed", `"pass": false`},
		{"csv", []string{"--format", "csv", gate}, exitFailed, "1 gate failed", "moe/batch=64,,,,,,,,,,,,,,,,,,,,,,GATE FAILED,"},
		{"unknown metric", []string{"--metrics", "nope", same}, exitBadInput, `--metrics: no metric named "nope" (have: latency)`, ""},
		{"bad format", []string{"--format", "xml", same}, exitBadInput, `--format "xml": want one of text, markdown, csv, json`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Flags, then BASE and the case's NEW (its last argument).
			b := base
			switch {
			case strings.Contains(tc.name, "quiet rounds"):
				b = quietBase
			case strings.Contains(tc.name, "noisy rounds"):
				b = noisyBase
			}
			args := append(append([]string{"report", "diff"}, tc.args[:len(tc.args)-1]...), b, tc.args[len(tc.args)-1])
			out, stderr, code := mstarReport(t, args...)
			if code != tc.wantCode || !strings.Contains(stderr, tc.wantErr) || !strings.Contains(out, tc.wantOut) {
				t.Errorf("exit %d (want %d)\nstderr (want %q):\n%s\nstdout (want %q):\n%s", code, tc.wantCode, tc.wantErr, stderr, tc.wantOut, out)
			}
			if n := strings.Count(strings.TrimSpace(stderr), "\n") + 1; stderr != "" && n > 3 {
				t.Errorf("stderr has %d lines, want at most 3:\n%s", n, stderr)
			}
		})
	}
}

func TestReportMergeRefusals(t *testing.T) {
	dir := t.TempDir()
	a := latencyDoc(t, dir, "a.json", 1, 6, 50, 0.01)
	b := latencyDoc(t, dir, "b.json", 2, 6, 50, 0.01)
	copyOfA := filepath.Join(dir, "copy-of-a.json")
	if raw, err := os.ReadFile(a); err != nil || os.WriteFile(copyOfA, raw, 0o644) != nil {
		t.Fatal(err)
	}
	merged := filepath.Join(dir, "m.json")
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"-o is an input", []string{"-o", a, a, b}, "merge: -o " + a + " is also an input"},
		{"-o is an input by another name", []string{"-o", filepath.Join(dir, ".", "b.json"), a, b}, "is also an input"},
		{"same file twice", []string{"-o", merged, a, b, a}, "merge: documents 1 and 3 hold the same run"},
		{"a copy of a run", []string{"-o", merged, copyOfA, b, a}, "documents 1 and 3 hold the same run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := mstarReport(t, append([]string{"report", "merge"}, tc.args...)...)
			if code != exitBadInput || !strings.Contains(stderr, tc.wantErr) {
				t.Errorf("exit %d, stderr %q; want exit 2 with %q", code, stderr, tc.wantErr)
			}
		})
	}
	if raw, _ := os.ReadFile(a); !bytes.Contains(raw, []byte(`"run_id"`)) {
		t.Fatalf("an -o refusal changed its input, or documents have no run id:\n%s", raw)
	}
	// Two runs of one host merge, keep their runs, and diff as two rounds.
	if _, stderr, code := mstarReport(t, "report", "merge", "-o", merged, a, b); code != exitOK {
		t.Fatalf("merge: exit %d: %s", code, stderr)
	}
	m, err := results.ReadFile(merged)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]bool{}
	for i := range m.Results {
		runs[m.RunOf(&m.Results[i])] = true
	}
	if len(runs) != 2 || m.RunID == "" {
		t.Errorf("merged document: run id %q, results from %d runs; want 2", m.RunID, len(runs))
	}
	out, _, _ := mstarReport(t, "report", "diff", "--format", "json", merged, b)
	if !strings.Contains(out, `"rounds": 2`) {
		t.Errorf("the merged runs are not the base's two rounds:\n%s", out)
	}
}

// Every example in the help of the report commands runs: on real
// documents of this repository, in a folder of its own, without exit 2.
func TestReportHelpExamplesRun(t *testing.T) {
	dir := t.TempDir()
	copyTo := func(from, to string) {
		raw, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, to), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	moe, moeOld := "../../reports/measured/h200/moe-qwen3-30b-a3b.json", "../../reports/measured/h200/moe-v3-qwen3-30b-a3b.json"
	copyTo(moeOld, "base.json")
	copyTo(moe, "new.json")
	copyTo(moe, "results.json")
	copyTo(moe, "moe.json")
	copyTo(moeOld, "a.json")
	copyTo(moe, "b.json")
	copyTo("../../reports/measured/h200/arena-sweep.json", "sw1.json")
	copyTo("../../reports/measured/h200/arena-sweep.json", "sw2.json")
	for i, n := range []string{"shard-1-of-3.json", "shard-2-of-3.json", "shard-3-of-3.json", "host1.json", "host2.json"} {
		latencyDoc(t, dir, n, uint64(i+1), 6, 50, 0.01)
	}
	root := newRoot(&app{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	report, _, err := root.Find([]string{"report"})
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	ran := 0
	for _, cmd := range append(report.Commands(), report) {
		for _, line := range strings.Split(cmd.Example, "\n") {
			line = strings.TrimSpace(line)
			if i := strings.Index(line, "   #"); i > 0 {
				line = strings.TrimSpace(line[:i])
			}
			// Pipes, globs and other programs are the shell's, not mstar's.
			if !strings.HasPrefix(line, "mstar ") || strings.ContainsAny(line, "|*$") {
				continue
			}
			line, _, _ = strings.Cut(line, " >")
			args := strings.Fields(line)[1:]
			_, stderr, code := mstarReport(t, args...)
			if code != exitOK && code != exitFailed {
				t.Errorf("%s: exit %d: %s", line, code, stderr)
			}
			ran++
		}
	}
	if ran < 10 {
		t.Errorf("ran %d examples: the parsing broke", ran)
	}
}

// Ceilings are context: a diff of two ceilings documents decides nothing
// unless --metrics names what should.
func TestReportDiffContextOnly(t *testing.T) {
	c := "../../reports/measured/h200/ceilings.json"
	_, stderr, code := mstarReport(t, "report", "diff", c, c)
	if code != exitBadInput || !strings.Contains(stderr, "nothing to compare") || !strings.Contains(stderr, "--metrics") {
		t.Errorf("exit %d, stderr %q; want exit 2 pointing at --metrics", code, stderr)
	}
	out, stderr, code := mstarReport(t, "report", "diff", "--metrics", "bandwidth", c, c)
	if code != exitOK || !strings.Contains(out, "deciding: bandwidth (named by --metrics)") {
		t.Errorf("--metrics bandwidth: exit %d, stderr %q\n%s", code, stderr, out)
	}
}
