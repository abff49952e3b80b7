package arena

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// deadPID returns a pid no process has: above Linux's PID_MAX_LIMIT (2^22),
// where an exited child's pid could be reused by the time it is judged.
func deadPID(t *testing.T) int {
	t.Helper()
	return 1<<22 + 12345
}

func ageFile(t *testing.T, path string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
}

func TestSweepOrphans(t *testing.T) {
	dir := shmDir(t)
	live := newTestArena(t, Config{Dir: dir, Entity: "live"})
	liveSeg := live.SegmentNames()[0]
	ageFile(t, filepath.Join(dir, liveSeg))

	mk := func(n Name, age bool) string {
		p := filepath.Join(dir, n.String())
		if err := os.WriteFile(p, make([]byte, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
		if age {
			ageFile(t, p)
		}
		return n.String()
	}
	dead := deadPID(t)
	deadOwner := mk(Name{KindSegment, "w", dead, "1111111111111111"}, false)
	deadSpill := mk(Name{KindSpill, "w", dead, "2222222222222222"}, false)
	// A reused pid: the name's pid is alive (it is ours), but nobody holds
	// the lock and the file is old: an orphan all the same.
	reused := mk(Name{KindSegment, "w", os.Getpid(), "3333333333333333"}, true)
	// Young, with a live pid: possibly being created right now.
	young := mk(Name{KindSegment, "w", os.Getpid(), "4444444444444444"}, false)
	malformed := "mstar_arena_bad"
	_ = os.WriteFile(filepath.Join(dir, malformed), nil, 0o600)
	unrelated := "sem.other-program"
	_ = os.WriteFile(filepath.Join(dir, unrelated), nil, 0o600)
	foreign := mk(Name{KindSegment, "w", dead, "5555555555555555"}, true)
	otherUID := os.Getuid() + 1
	// The grace period is far from both ages (seconds for the young file,
	// an hour for the aged ones), so a slow machine cannot tip either.
	opt := CleanOptions{Grace: 10 * time.Minute}
	if os.Getuid() == 0 {
		_ = os.Chown(filepath.Join(dir, foreign), 65534, 65534)
	} else {
		opt.UID = &otherUID // judge as another user: then all our files are foreign
		foreign = ""
	}

	// A dry run judges but removes nothing.
	dry := opt
	dry.DryRun = true
	rep, err := CleanOrphans(dir, dry)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Removed) != 0 || len(listDir(t, dir)) != 8 {
		t.Fatalf("dry run removed files: %s", rep)
	}
	if os.Getuid() != 0 {
		t.Skip("not root: cannot chown a file to another user; the foreign-owner path is covered by the dry run")
	}

	rep, err = CleanOrphans(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	wantRemoved := []string{deadOwner, reused, deadSpill}
	for _, w := range wantRemoved {
		if !contains(rep.Removed, w) {
			t.Errorf("orphan %s was not removed: %s", w, rep)
		}
		if _, err := os.Stat(filepath.Join(dir, w)); !os.IsNotExist(err) {
			t.Errorf("orphan %s still exists", w)
		}
	}
	if len(rep.Removed) != len(wantRemoved) {
		t.Errorf("removed %v, want exactly %v", rep.Removed, wantRemoved)
	}
	if !contains(rep.InUse, liveSeg) {
		t.Errorf("the live arena's segment is not reported in use: %s %v", rep, rep.InUse)
	}
	left := map[string]string{}
	for _, l := range rep.Left {
		left[l.Name] = l.Reason
	}
	for name, reason := range map[string]string{young: "grace", malformed: "does not match", foreign: "owned by uid 65534"} {
		if !strings.Contains(left[name], reason) {
			t.Errorf("%s: left with reason %q, want one containing %q", name, left[name], reason)
		}
	}
	if _, ok := left[unrelated]; ok {
		t.Errorf("an unrelated program's file was reported: %v", rep.Left)
	}
	for _, keep := range []string{liveSeg, young, malformed, unrelated, foreign} {
		if _, err := os.Stat(filepath.Join(dir, keep)); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
	// The live arena still works.
	if _, err := live.Put(context.Background(), pattern(100, 1), Meta{}, 1); err != nil {
		t.Fatal(err)
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// A new arena's startup sweep reclaims a killed predecessor's segments.
func TestStartupSweep(t *testing.T) {
	dir := shmDir(t)
	dead := deadPID(t)
	orphan := Name{KindSegment, "worker", dead, "6666666666666666"}.String()
	if err := os.WriteFile(filepath.Join(dir, orphan), make([]byte, 1<<16), 0o600); err != nil {
		t.Fatal(err)
	}
	a := newTestArena(t, Config{Dir: dir, Entity: "worker"})
	if rep := a.StartupClean(); len(rep.Removed) != 1 || rep.Removed[0] != orphan {
		t.Fatalf("startup sweep: %s %v", rep, rep.Removed)
	}
}

const childEnv = "MSTAR_ARENA_TEST_CHILD"

// TestMain lets a test re-execute this binary as a child process that
// builds an arena and waits to be signalled.
func TestMain(m *testing.M) {
	if path := os.Getenv(dialChildEnv); path != "" {
		dialChild(path)
	}
	if parent := os.Getenv(runDirChildEnv); parent != "" {
		runDirChild(parent)
	}
	if dir := os.Getenv(childEnv); dir != "" {
		a, err := New(Config{Dir: dir, Entity: "child", SegmentSize: 1 << 20, MaxSegments: 2})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		if _, err := a.Put(context.Background(), make([]byte, 100), Meta{}, 1); err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		// and one spilled tensor
		s := a.spillSlot(10, true, true)
		if _, err := a.Publish(s, Meta{}, 1); err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		fmt.Println("ready")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestSignalCleanup(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := shmDir(t)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+dir)
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64)
			n, _ := out.Read(buf)
			if !strings.Contains(string(buf[:n]), "ready") {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("child said %q", buf[:n])
			}
			if got := len(listDir(t, dir)); got != 2 {
				t.Fatalf("child made %d files, want a segment and a spill file", got)
			}
			_ = cmd.Process.Signal(sig)
			err := cmd.Wait()
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != sig {
				t.Fatalf("child exit: %v; want death by %v (the handler re-raises)", err, sig)
			}
			files := listDir(t, dir)
			if sig == syscall.SIGKILL {
				// Nothing runs on SIGKILL: the files stay, and the sweep reclaims them.
				if len(files) != 2 {
					t.Fatalf("after SIGKILL: %v", files)
				}
				rep, err := CleanOrphans(dir, CleanOptions{})
				if err != nil || len(rep.Removed) != 2 {
					t.Fatalf("sweep after SIGKILL: %v %s", err, rep)
				}
				return
			}
			if len(files) != 0 {
				t.Fatalf("after %v the child left %v", sig, files)
			}
		})
	}
}

func TestCleanupAll(t *testing.T) {
	dir := shmDir(t)
	f, err := createFile(dir, Name{KindSpill, "x", os.Getpid(), "7777777777777777"}.String(), 10, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	if n := CleanupAll(); n < 1 {
		t.Fatalf("CleanupAll removed %d files", n)
	}
	var st unix.Stat_t
	if err := unix.Stat(f.path, &st); err == nil {
		t.Fatal("file survived CleanupAll")
	}
}

// The summary fits 100 columns however large its counts.
func TestCleanReportFits100Columns(t *testing.T) {
	many := make([]string, 123456)
	r := CleanReport{Removed: many, RemovedBytes: 1 << 50, InUse: many, RemovedDirs: many, InUseDirs: many}
	r.Left = make([]LeftFile, 123456)
	for _, line := range strings.Split(r.String(), "\n") {
		if len(line) > 100 {
			t.Errorf("%d columns: %q", len(line), line)
		}
	}
	if !strings.Contains(r.String(), "removed 123456 run directories") {
		t.Errorf("summary lacks the run directories: %q", r.String())
	}
}
