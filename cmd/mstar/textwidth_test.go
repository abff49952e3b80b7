package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mstar-dev/mstar/internal/units"
)

// checkFits fails t for every line of text wider than a 100-column
// terminal.
func checkFits(t *testing.T, what, text string) {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if n := utf8.RuneCountInString(l); n > units.TextWidth {
			t.Errorf("%s: a line of %d columns: %q", what, n, l)
		}
	}
}

// Every line mstar prints as text, on stdout and on stderr, fits a
// 100-column terminal: the commands' tables and comments, the reports of
// their documents (these made here, and real GPU ones) and the messages.
func TestTextFitsIn100Columns(t *testing.T) {
	t.Setenv("COLUMNS", "")
	shm := arenaShmDir(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	measured := filepath.Join("..", "..", "reports", "measured", "h200")
	for _, tc := range []struct {
		name  string
		args  []string
		codes []int // exit codes the run may end with besides 0
	}{
		{"bench moe", []string{"bench", "moe", "--device", "cpu", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32",
			"--batch", "1,9", "--samples", "2", "--rounds", "1", "--stages", "--out", a}, nil},
		{"report show", []string{"report", "show", a}, nil},
		{"report diff", []string{"report", "diff", a, b}, nil},
		{"ablate router", append([]string{"ablate", "router", "--layers", "2", "--tokens", "64",
			"--kernel-tokens", "8", "--kernel-samples", "2"}, tinyModel...), nil},
		{"arena sweep", []string{"arena", "sweep", "--device", "cpu", "--mode", "all", "--max-size", "16KiB", "--samples", "2", "--shm-dir", shm}, nil},
		{"arena stress", []string{"arena", "stress", "--duration", "0", "--count", "20", "--producers", "1", "--consumers", "1", "--fanout", "1",
			"--max-size", "16KiB", "--segment-size", "1MiB", "--max-segments", "2", "--shm-dir", shm}, nil},
		{"tune moe", []string{"tune", "moe", "--device", "cpu", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32",
			"--batch", "1", "--samples", "2", "--rounds", "1", "--dir", t.TempDir()}, nil},
		{"spill-matrix", oneCell("--inject", "corrupt", "--shm-dir", t.TempDir()), []int{exitFailed, exitCannot}},
		{"report show --run of a GPU bench moe", []string{"report", "show", "--run", filepath.Join(measured, "moe-qwen3-30b-a3b.json")}, nil},
		{"report show of a GPU ablation", []string{"report", "show", filepath.Join(measured, "ablate-router.json")}, nil},
		{"report diff of GPU sweeps", []string{"report", "diff", filepath.Join(measured, "moe-v3-qwen3-30b-a3b.json"),
			filepath.Join(measured, "moe-qwen3-30b-a3b.json")}, nil},
	} {
		if tc.name == "report show" {
			// report diff's other side: the same run under another name.
			doc, err := os.ReadFile(a)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(b, doc, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		stdout, stderr, code := runMstarWrapped(t, tc.args...)
		if code != exitOK && !slices.Contains(tc.codes, code) {
			t.Fatalf("%s: exit %d: %s", tc.name, code, stderr)
		}
		if len(stdout) < 100 {
			t.Errorf("%s: too little output to test:\n%s", tc.name, stdout)
		}
		checkFits(t, tc.name, stdout)
		checkFits(t, tc.name+" (stderr)", stderr)
	}
}

// auto's fallback to the CPU, said by every measuring command, fits one
// line: where the CUDA driver was looked for is doctor's to list.
func TestAutoDeviceNoteFits(t *testing.T) {
	t.Setenv("COLUMNS", "")
	var stderr bytes.Buffer
	dev, err := (&app{stderr: &stderr}).openDevice("auto")
	if err != nil {
		t.Fatal(err)
	}
	dev.Close()
	if !strings.HasPrefix(stderr.String(), "mstar: auto: using ") {
		t.Errorf("auto said %q; want which device it uses", stderr.String())
	}
	checkFits(t, "auto's note", stderr.String())
}

// say wraps a long message at the help width, its continuation lines
// indented and no word lost, and unsay puts it back on one line.
func TestSayWrapsAndUnsayJoins(t *testing.T) {
	msg := "warning: transport/size=1073741824/transport=memcpy-2t: pct_memcpy 188% of a one-thread memcpy " +
		"of the same bytes (16.46 GB/s) is above 105%: that reference is not an upper bound for this work"
	for _, tc := range []struct {
		columns string
		width   int
	}{{"", 100}, {"80", 80}, {"20", 100}} { // COLUMNS too small to be sane is ignored
		t.Run("COLUMNS="+tc.columns, func(t *testing.T) {
			t.Setenv("COLUMNS", tc.columns)
			var b bytes.Buffer
			say(&b, "%s", msg)
			lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
			if len(lines) < 2 {
				t.Fatalf("a %d-column message on %d line(s): %q", len(msg), len(lines), b.String())
			}
			for i, l := range lines {
				if n := utf8.RuneCountInString(l); n > tc.width {
					t.Errorf("line %d is %d columns, want at most %d: %q", i, n, tc.width, l)
				}
				if i > 0 && !strings.HasPrefix(l, sayIndent) {
					t.Errorf("continuation line %d not indented: %q", i, l)
				}
			}
			if got, want := unsay(b.String()), "mstar: "+msg+"\n"; got != want {
				t.Errorf("unsay =\n%q, want\n%q", got, want)
			}
		})
	}
	// A message of several lines keeps them; what another writer put on
	// stderr is left alone.
	in := "mstar: gates failed:\n  a: b\n    c\nprogress 3/4\n    indented"
	if got, want := unsay(in), "mstar: gates failed:\n  a: b c\nprogress 3/4\n    indented"; got != want {
		t.Errorf("unsay(%q) = %q, want %q", in, got, want)
	}
	if got, want := lastLine("mstar: one\nmstar: two is\n    long\n"), "two is long"; got != want {
		t.Errorf("lastLine = %q, want %q", got, want)
	}
}
