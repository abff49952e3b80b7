package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mstar-dev/mstar/internal/doctor"
	"github.com/spf13/cobra"
)

// runMstar drives the whole CLI in-process and returns what it printed and
// its exit code; stderr with each message on one line again (unsay), for
// tests of what a message says rather than how it wraps.
func runMstar(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	stdout, stderr, code = runMstarWrapped(t, args...)
	return stdout, unsay(stderr), code
}

// runMstarWrapped is runMstar with stderr as mstar wrote it: messages
// wrapped at the help width.
func runMstarWrapped(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), code
}

// containsWrapped says whether out holds want once the 100-column wrapping
// of its "# " comments is undone: where a comment breaks depends on the
// host (its CPU's name, the temp folder's), and a long word is cut after
// its separators, so both are compared without whitespace.
func containsWrapped(out, want string) bool {
	flat := func(s string) string {
		return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n#   ", " ")), "")
	}
	return strings.Contains(flat(out), flat(want))
}

// afterDashes is what follows the first "--" in args (all of args when there
// is none): a test binary re-executed as a worker or holder gets its own
// arguments after the test flags.
func afterDashes(args []string) []string {
	for i, a := range args {
		if a == "--" {
			return args[i+1:]
		}
	}
	return args
}

func TestRootExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"help", []string{"--help"}, exitOK, ""},
		{"version", []string{"version"}, exitOK, ""},
		{"unknown command is bad usage", []string{"frobnicate"}, exitBadInput, "unknown command"},
		{"unknown flag is bad usage", []string{"version", "--nope"}, exitBadInput, "unknown flag"},
		{"extra argument is bad usage", []string{"version", "extra"}, exitBadInput, "extra"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runMstar(t, tc.args...)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; stderr: %s", code, tc.wantCode, stderr)
			}
			if !strings.Contains(stderr, tc.wantErr) {
				t.Errorf("stderr %q does not contain %q", stderr, tc.wantErr)
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Errorf("stderr shows a Go panic: %s", stderr)
			}
		})
	}
}

// Usage errors say which command, what is wrong in words, and where help
// is, once prefixed with "mstar:".
func TestUsageMessages(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the whole of stderr
	}{
		{[]string{"bench", "ceilings", "--samples", strings.Repeat("7", 5000) + "x"},
			"mstar: bench ceilings: --samples: invalid value \"" + strings.Repeat("7", 60) + "…\": not an integer (see 'mstar bench ceilings --help')\n"},
		{[]string{"bench", "moe", "--experts", "8", "--topk", "2", "--hidden", "256", "--inter", "128", "--device", "cpu", "--batch", "576460752303423488"},
			"mstar: --batch: 576460752303423488 tokens: at most 1073741824\n"},
		{[]string{"bench", "ceilings", "--samples", "abc"},
			"mstar: bench ceilings: --samples: invalid value \"abc\": not an integer (see 'mstar bench ceilings --help')\n"},
		{[]string{"arena", "stress", "--interval", "soon"},
			"mstar: arena stress: --interval: invalid value \"soon\": not a duration (like 500ms, 2s or 1m) (see 'mstar arena stress --help')\n"},
		{[]string{"trace", "summarize"},
			"mstar: trace summarize: accepts 1 argument, received 0 (usage: mstar trace summarize FILE; see 'mstar trace summarize --help')\n"},
		{[]string{"report", "diff", "a.json"},
			"mstar: report diff: accepts 2 arguments, received 1 (usage: mstar report diff BASE NEW; see 'mstar report diff --help')\n"},
		{[]string{"report", "diff", "a1.json", "a2.json", "b.json"},
			"mstar: report diff: accepts 2 arguments (BASE NEW), received 3\n" +
				"  for several runs a side, merge each side first: mstar report merge -o base.json RUN ...\n"},
		{[]string{"tune", "moe", "--device", "cpu", "--dir", ""},
			"mstar: tune moe: --dir: empty value; give one, or leave the flag out for its default\n"},
		{[]string{"bench", "ceilings", "--device", "cpu", "--quick", "--samples", "99999999999"},
			"mstar: bench ceilings: --samples 99999999999: at most 1000000\n"},
		{[]string{"ablate", "router", "--layers", "1", "--tokens", "64", "--kernel-samples", "2000000"},
			"mstar: ablate router: --kernel-samples 2000000: at most 1000000\n"},
		{[]string{"ablate", "router", "--layers", "1", "--tokens", "64", "--routers", ""},
			"mstar: ablate router: --routers: empty value; give one, or leave the flag out for its default\n"},
		{[]string{"bench", "moe", "--batch=", "--device", "cpu"},
			"mstar: bench moe: --batch: empty value; give one, or leave the flag out for its default\n"},
		{[]string{"bench", "moe", "--model", "qwen3-30b-a3b", "--batch", "1,4,1", "--device", "cpu"},
			"mstar: --batch: 1 is listed twice\n"},
		{[]string{"arena", "stress", "--transport", "arena,arena"},
			"mstar: --transport: arena is listed twice\n"},
		{[]string{"ablate", "router", "--layers", "1", "--kernel-layers", "5"},
			"mstar: --kernel-layers 5 exceeds the 1 layers routed (--layers)\n"},
		{[]string{"ablate", "router", "--routers", "switch,switch"},
			"mstar: --routers: switch is listed twice\n"},
		{[]string{"completion", "nosuch"},
			"mstar: unknown shell \"nosuch\" for 'mstar completion': want bash, zsh, fish or powershell\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := runMstar(t, tc.args...)
			if code != exitBadInput || stderr != tc.want || stdout != "" {
				t.Errorf("exit %d, stdout %q\nstderr %q\nwant   %q", code, stdout, stderr, tc.want)
			}
		})
	}
	// The shells still work, and plain 'completion' is its help.
	if out, _, code := runMstar(t, "completion", "bash"); code != exitOK || !strings.Contains(out, "bash completion") {
		t.Errorf("completion bash: exit %d", code)
	}
	if _, _, code := runMstar(t, "completion"); code != exitOK {
		t.Errorf("completion: exit %d", code)
	}
}

func TestVersionNamesCommit(t *testing.T) {
	out, _, _ := runMstar(t, "version")
	if !strings.HasPrefix(out, "mstar ") || !strings.Contains(out, "commit ") {
		t.Errorf("version output %q lacks module version or commit", out)
	}
}

func TestDoctorWithoutGPUExitsZero(t *testing.T) {
	out, stderr, code := runMstar(t, "doctor", "--json")
	var rep struct {
		Status string
		Checks []struct{ Name, Status, Detail, Fix string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --json is not JSON: %v\n%s", err, out)
	}
	if len(rep.Checks) == 0 {
		t.Fatalf("doctor printed no checks")
	}
	// Without a GPU the GPU and CUDA checks may warn, never fail; only the
	// host's own limits (shm, say) may fail on a badly set up machine.
	hostFailed := false
	for _, c := range rep.Checks {
		if c.Status != "FAIL" {
			continue
		}
		switch c.Name {
		case "shm", "memlock", "cgroup memory", "hugepages":
			hostFailed = true
		default:
			t.Errorf("check %q FAILs on a machine without a GPU: %s", c.Name, c.Detail)
		}
	}
	if want := exitOK; !hostFailed && code != want {
		t.Errorf("doctor exit %d with status %s, want %d; stderr %s", code, rep.Status, want, stderr)
	}
	if hostFailed && code != exitFailed {
		t.Errorf("doctor exit %d with a failing host check, want %d", code, exitFailed)
	}
	names := map[string]bool{}
	for _, c := range rep.Checks {
		names[c.Name] = true
	}
	for _, want := range []string{"shm", "memlock", "hugepages", "cgroup memory"} {
		if !names[want] {
			t.Errorf("doctor has no %q check: %v", want, names)
		}
	}
}

func TestCompletion(t *testing.T) {
	out, stderr, code := runMstar(t, "completion", "bash")
	if code != exitOK || !strings.Contains(out, "mstar") {
		t.Errorf("completion bash: exit %d, stderr %q, %d bytes", code, stderr, len(out))
	}
}

// --cpuprofile writes a pprof profile (gzip-compressed protobuf) of any
// command, and an unwritable profile path is refused before the run.
func TestCPUProfileFlag(t *testing.T) {
	if f := flag.Lookup("test.cpuprofile"); f != nil && f.Value.String() != "" {
		t.Skip("the test binary is being profiled: one CPU profile per process")
	}
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	_, stderr, code := runMstar(t, "--cpuprofile", path, "version")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile %s: %d bytes (err %v), want a gzip stream", path, len(b), err)
	}
	if !strings.Contains(stderr, "wrote "+path) {
		t.Errorf("stderr %q does not say where the profile went", stderr)
	}
	_, stderr, code = runMstar(t, "--cpuprofile", "/nonexistent/dir/cpu.pprof", "version")
	if code != exitBadInput || !strings.Contains(stderr, "--cpuprofile") {
		t.Errorf("unwritable profile: exit %d, stderr %q; want 2 naming --cpuprofile", code, stderr)
	}
}

// An --out that is an existing directory is refused before the run (exit
// 2), not after it when the results file cannot replace the directory.
func TestOutputDirectoryRefused(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"bench", "ceilings", "--device", "cpu", "--quick"},
		oneCell(),
		sweepSmall(),
		{"arena", "stress", "--duration", "200ms", "--producers", "1", "--consumers", "1", "--fanout", "1", "--max-size", "4KiB", "--segment-size", "1MiB"},
	} {
		stdout, stderr, code := runMstar(t, append(args, "--out", dir)...)
		if code != exitBadInput || !strings.Contains(stderr, "--out "+dir+": is a directory") || stdout != "" {
			t.Errorf("%v --out DIR: exit %d, stderr %q, stdout %d bytes; want exit 2 naming --out, before any output", args, code, stderr, len(stdout))
		}
	}
}

// "Cannot tell" has an exit code of its own, apart from pass, fail, bad
// usage and a broken run.
func TestCannotTellExitCode(t *testing.T) {
	var ee *exitError
	if !errors.As(cannotTell("x"), &ee) || ee.code != 4 {
		t.Fatalf("cannotTell exits %v, want 4", ee)
	}
	for _, c := range []int{exitOK, exitFailed, exitBadInput, exitBroken} {
		if c == exitCannot {
			t.Errorf("exit %d is shared with another outcome", c)
		}
	}
	out, _, _ := runMstar(t, "--help")
	if !strings.Contains(out, "4 no\ngate failed but one could not tell") && !strings.Contains(strings.Join(strings.Fields(out), " "), "4 no gate failed but one could not tell") {
		t.Errorf("--help does not document exit 4:\n%s", out)
	}
}

// Every command's --help reads at 100 columns: flag descriptions wrap
// there, and prose, lists and examples are kept under it.
func TestHelpFitsIn100Columns(t *testing.T) {
	t.Setenv("COLUMNS", "")
	var walk func(c *cobra.Command)
	var paths [][]string
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		var path []string
		for p := c; p.HasParent(); p = p.Parent() {
			path = append([]string{p.Name()}, path...)
		}
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(&app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}))
	if len(paths) < 20 {
		t.Fatalf("walked %d commands; the tree should have more", len(paths))
	}
	for _, p := range paths {
		stdout, stderr, code := runMstar(t, append(p, "--help")...)
		if code != exitOK {
			t.Errorf("mstar %s --help: exit %d: %s", strings.Join(p, " "), code, stderr)
			continue
		}
		for _, line := range strings.Split(stdout, "\n") {
			if n := utf8.RuneCountInString(line); n > 100 {
				t.Errorf("mstar %s --help: a line of %d columns: %q", strings.Join(p, " "), n, line)
			}
		}
	}
}

// doctor's text keeps to 100 columns however long a detail runs (the
// library checks list every path they searched), and loses no word.
func TestDoctorTextFitsIn100Columns(t *testing.T) {
	t.Setenv("COLUMNS", "")
	long := "not found (searched MSTAR_NVRTC (unset), /usr/local/cuda/lib64, " +
		"/usr/local/lib/python3.11/dist-packages/nvidia/cuda_nvrtc/lib, /usr/lib/python3/dist-packages/nvidia/cu13/lib, " +
		"libnvrtc.so.13, libnvrtc.so.12 via the dynamic loader (LD_LIBRARY_PATH, ld.so.cache))"
	checks := []doctor.Check{
		{Name: "NVRTC", Status: doctor.Warn, Detail: long, Fix: "install it (CUDA toolkit or the nvidia pip wheels) or set MSTAR_NVRTC to its path"},
		{Name: "cgroup memory", Status: doctor.OK, Detail: "no limit"},
	}
	var buf bytes.Buffer
	printChecks(&app{stdout: &buf}, checks)
	for _, line := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n") {
		if n := utf8.RuneCountInString(line); n > 100 {
			t.Errorf("%d columns: %q", n, line)
		}
	}
	// Wrapping only adds line breaks and indents: the text without its
	// white space is the checks' without theirs.
	squeeze := func(s string) string { return strings.Join(strings.Fields(s), "") }
	got := squeeze(buf.String())
	for _, want := range []string{"WARN NVRTC " + long, "fix: " + checks[0].Fix, "OK cgroup memory no limit"} {
		if !strings.Contains(got, squeeze(want)) {
			t.Errorf("doctor text lost %q:\n%s", want, buf.String())
		}
	}
}
