package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// children returns the pids whose parent is pid (from /proc).
func children(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 {
			if pp, _ := strconv.Atoi(f[1]); pp == pid {
				out = append(out, c)
			}
		}
	}
	return out
}

// A stress run SIGKILLed whole — the parent's group and every worker at
// once, as a cgroup or container kill does — leaves segments, spill files,
// sockets and two directories; `arena clean` removes all of it.
func TestArenaCleanAfterStressKilledWhole(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real stress run (-short)")
	}
	shm := arenaShmDir(t) // also a private $TMPDIR for the socket directory
	tmp := os.Getenv("TMPDIR")
	cmd := exec.Command(os.Args[0], "-test.run=^$", "--", "arena", "stress", "--duration", "1m", "--producers", "2", "--consumers", "2",
		"--max-size", "256KiB", "--segment-size", "1MiB", "--max-segments", "2", "--shm-dir", shm)
	cmd.Env = append(os.Environ(), asMstarEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var outb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outb, &outb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait for segments in the run directory: the run is under way.
	deadline := time.Now().Add(30 * time.Second)
	for {
		segs, _ := filepath.Glob(filepath.Join(shm, "mstar-stress-*", "mstar_arena_*"))
		socks, _ := filepath.Glob(filepath.Join(tmp, "mstar-stress-*", "*.sock"))
		if len(segs) >= 2 && len(socks) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			t.Fatalf("no segments after 30s: %v %v", segs, socks)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// All at once, as a cgroup kill: stopped first, so that no worker sees
	// its parent die and stops in order before its own SIGKILL lands.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGSTOP)
	workers := children(cmd.Process.Pid)
	for _, w := range workers {
		_ = syscall.Kill(w, syscall.SIGSTOP)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	for _, w := range workers {
		_ = syscall.Kill(w, syscall.SIGKILL)
	}
	_ = cmd.Wait()
	// SIGKILL is asynchronous: wait until every worker is dead (gone, or a
	// zombie, which has already closed its files and dropped its locks).
	for _, w := range workers {
		for i := 0; alive(w); i++ {
			if i == 3000 {
				t.Fatalf("worker %d still alive 30s after SIGKILL", w)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	left, _ := filepath.Glob(filepath.Join(shm, "mstar-stress-*", "*"))
	if len(left) == 0 {
		all, _ := exec.Command("find", shm, tmp).CombinedOutput()
		t.Fatalf("the kill (of %d workers) left nothing: the test did not test anything; the run said:\n%s\n%s", len(workers), outb.String(), all)
	}
	stdout, stderr, code := runMstar(t, "arena", "clean", "--shm-dir", shm)
	if code != exitOK {
		t.Fatalf("clean: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, dir := range []string{shm, tmp} {
		var names []string
		filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
			if p != dir && err == nil {
				names = append(names, p)
			}
			return nil
		})
		if len(names) != 0 {
			t.Errorf("after clean, under %s: %v\nclean said:\n%s\nthe run said:\n%s", dir, names, stdout, outb.String())
		}
	}
	if !strings.Contains(stdout, "(run directory of a dead run)") {
		t.Errorf("clean output does not name the run directories:\n%s", stdout)
	}
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) || b[i+2] != 'Z' {
		return true
	}
	// A zombie leader whose other threads still exit still holds the files.
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	return err == nil && len(tasks) > 1
}
