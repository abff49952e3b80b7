package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/reports/results"
)

const runAsMstarEnv = "MSTAR_CMD_RUN_AS_MSTAR"

// With runAsMstarEnv set, this test binary is mstar itself: the arguments
// after "--" are its command line. Tests that need real signals and process
// groups run it so.
func init() {
	if os.Getenv(runAsMstarEnv) == "1" {
		os.Exit(run(afterDashes(os.Args[1:]), os.Stdin, os.Stdout, os.Stderr))
	}
}

// interruptWith makes the commands' interrupt context ctx for one test.
func interruptWith(t *testing.T, ctx context.Context) {
	t.Helper()
	orig := interruptContext
	t.Cleanup(func() { interruptContext = orig })
	interruptContext = func() (context.Context, context.CancelFunc) { return ctx, func() {} }
}

// interruptAtOnce is as if SIGINT came as the run started.
func interruptAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	interruptWith(t, ctx)
}

// Every measuring command stops on an interrupt with exit 3, says so, and
// still writes its results document, marked as interrupted.
func TestInterruptedCommandsWriteTheirDocument(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		stdout string
	}{
		{"bench ceilings", []string{"bench", "ceilings", "--device", "cpu", "--quick"}, "ceiling"},
		{"bench moe", []string{"bench", "moe", "--experts", "8", "--topk", "2", "--hidden", "64", "--inter", "32", "--batch", "1,9", "--device", "cpu"}, "# mstar bench moe"},
		{"ablate router", append([]string{"ablate", "router", "--tokens", "128", "--layers", "2"}, tinyModel...), "# ablate router: no router finished"},
		{"arena sweep", []string{"arena", "sweep", "--device", "cpu", "--max-size", "16KiB", "--shm-dir", arenaShmDir(t)}, "# arena sweep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			interruptAtOnce(t)
			out := filepath.Join(t.TempDir(), "out.json")
			stdout, stderr, code := runMstar(t, append(tc.args, "--out", out)...)
			if code != exitBroken || !strings.Contains(stderr, tc.name+" ") || !strings.Contains(stderr, "interrupted before it completed") {
				t.Fatalf("exit %d, stderr %q; want exit 3 saying %s was interrupted", code, stderr, tc.name)
			}
			if !strings.Contains(stdout, tc.stdout) {
				t.Errorf("stdout lacks %q:\n%s", tc.stdout, stdout)
			}
			doc, err := results.ReadFile(out)
			if err != nil {
				t.Fatalf("no results document after the interrupt: %v", err)
			}
			if !slices.Contains(doc.Warnings, results.WarnInterrupted) {
				t.Errorf("document warnings %q do not say the run was interrupted", doc.Warnings)
			}
		})
	}
}

// Interrupted between batches, bench moe prints and writes the batches done.
// The interrupt comes while the first batch's output is being dumped into a
// FIFO larger than a pipe holds: that batch is then done measuring, and the
// next has not begun.
func TestBenchMoEInterruptedKeepsFinishedBatches(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	interruptWith(t, ctx)
	dir := t.TempDir()
	dump := filepath.Join(dir, "dump")
	if err := os.Mkdir(dump, 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dump, "out-M4096.bf16") // 4096 tokens × 128 × 2 bytes = 1 MiB
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	read := make(chan error, 1)
	go func() {
		f, err := os.Open(fifo) // waits for the dump to open it
		if err == nil {
			_, err = f.Read(make([]byte, 1)) // the writer is now inside its 1 MiB write
			cancel()
			if err == nil {
				_, err = io.Copy(io.Discard, f)
			}
			f.Close()
		}
		read <- err
	}()
	out := filepath.Join(dir, "moe.json")
	stdout, stderr, code := runMstar(t, "bench", "moe", "--experts", "4", "--topk", "2", "--hidden", "128", "--inter", "16",
		"--batch", "4096,8192", "--samples", "1", "--device", "cpu", "--dump-dir", dump, "--out", out)
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if code != exitBroken || !strings.Contains(stderr, "1 of 2 batches done") {
		t.Fatalf("exit %d, stderr %q; want exit 3 with 1 of 2 batches done", code, stderr)
	}
	if !strings.Contains(stdout, "M=4096 kernels") || strings.Contains(stdout, "M=8192") {
		t.Errorf("stdout should have batch 4096 and not 8192:\n%s", stdout)
	}
	doc, err := results.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var batches []string
	for _, r := range doc.Results {
		if r.Name == "moe" {
			batches = append(batches, r.Params["batch"])
		}
	}
	if !slices.Equal(batches, []string{"4096"}) || !slices.Contains(doc.Warnings, results.WarnInterrupted) {
		t.Errorf("document has batches %v and warnings %q; want batch 4096 and the interrupted warning", batches, doc.Warnings)
	}
}

// A terminal's Ctrl-C sends SIGINT to the whole foreground process group.
// The stress workers are not in it: the parent alone gets the signal and
// stops them in order, so no worker "exits on its own".
func TestArenaStressWorkersSurviveGroupSIGINT(t *testing.T) {
	shm := arenaShmDir(t)
	cmd, stdout, stderr := startStress(t, shm)
	waitForWorkers(t, cmd.Process.Pid, shm)
	signaled := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) == nil
	err := cmd.Wait()
	var ee *exec.ExitError
	if !signaled || !errors.As(err, &ee) || ee.ExitCode() != exitBroken {
		t.Fatalf("signaled %v, %v; want exit 3 after the SIGINT\nstderr:\n%s", signaled, err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "PASS  no unexpected worker exits") {
		t.Errorf("a worker died of the group's SIGINT:\n%s", stdout.String())
	}
}

// Killing the stress parent outright (SIGKILL: no cleanup of its own) ends
// its workers too: their stdin closes, they stop and remove their files.
func TestArenaStressWorkersStopWhenParentDies(t *testing.T) {
	shm := arenaShmDir(t)
	cmd, _, _ := startStress(t, shm)
	workers := waitForWorkers(t, cmd.Process.Pid, shm)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// Each worker must exit by itself; the test's own timeout catches one
	// that never does.
	for _, pid := range workers {
		for running(pid) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	var left []string
	filepath.WalkDir(shm, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) != 0 {
		t.Errorf("the workers left %d files: %v", len(left), left)
	}
}

// mstarProcess is an mstar command line as a separate process: this test
// binary, run as mstar (runAsMstarEnv).
func mstarProcess(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), runAsMstarEnv+"=1")
	return cmd
}

// startStress starts a long arena stress run over shm as a separate mstar
// process, in a process group of its own (the group a terminal would
// signal), its output collected; it is killed when the test ends.
func startStress(t *testing.T, shm string) (cmd *exec.Cmd, stdout, stderr *bytes.Buffer) {
	t.Helper()
	cmd = mstarProcess("arena", "stress", "--duration", "5m", "--producers", "2", "--consumers", "2",
		"--max-size", "64KiB", "--segment-size", "1MiB", "--max-segments", "2", "--interval", "100ms", "--shm-dir", shm)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, stderr = new(bytes.Buffer), new(bytes.Buffer)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, stdout, stderr
}

// waitForWorkers waits until stress run pid has its four workers and its
// producers have made their segments under shm (progress lines, which would
// say so, go to terminals only), and returns the workers' pids. The test's
// own timeout catches a run that never gets there.
func waitForWorkers(t *testing.T, pid int, shm string) []int {
	t.Helper()
	for {
		files := 0
		filepath.WalkDir(shm, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				files++
			}
			return nil
		})
		if w := childrenOf(t, pid); len(w) == 4 && files >= 2 {
			return w
		}
		if !running(pid) {
			t.Fatalf("stress run %d ended before its workers were up", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// childrenOf lists the live processes whose parent is pid.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	es, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var out []int
	for _, e := range es {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, state := procStat(child); ppid == pid && state != "Z" {
			out = append(out, child)
		}
	}
	return out
}

// running reports whether pid is alive and not a zombie.
func running(pid int) bool {
	_, state := procStat(pid)
	return state != "" && state != "Z"
}

// procStat reads a process's parent and state from /proc; "" when gone.
func procStat(pid int) (ppid int, state string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, ""
	}
	// The command name is in parentheses and may hold spaces.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 2 {
		return 0, ""
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0]
}
