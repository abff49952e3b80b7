package arena

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const runDirChildEnv = "MSTAR_ARENA_TEST_RUNDIR"

// runDirChild makes a run directory with a segment and a socket in it and
// waits to be killed.
func runDirChild(parent string) {
	rd, err := MakeRunDir(parent, "stress")
	if err != nil {
		os.Stdout.WriteString("error: " + err.Error() + "\n")
		os.Exit(3)
	}
	f, err := createFile(rd.Path, Name{KindSegment, "p0", os.Getpid(), newToken()}.String(), 4096, true)
	if err != nil {
		os.Stdout.WriteString("error: " + err.Error() + "\n")
		os.Exit(3)
	}
	_ = f
	l, err := Listen(filepath.Join(rd.Path, "c0.sock"))
	if err != nil {
		os.Stdout.WriteString("error: " + err.Error() + "\n")
		os.Exit(3)
	}
	_ = l
	os.Stdout.WriteString("ready " + rd.Path + "\n")
	select {}
}

func TestRunDirNames(t *testing.T) {
	for name, want := range map[string]bool{
		"mstar-stress-123":        true,
		".mstar-stress-123":       true,
		"mstar-stress-":           false,
		"mstar-stress-test-123":   false, // a test's directory, not a run's
		"mstar-stress-12a":        false,
		"mstar-moe-emu-313071665": false,
		"mstar":                   false,
	} {
		if _, ok := isRunDirName(name, RunDirKinds); ok != want {
			t.Errorf("isRunDirName(%q) = %v, want %v", name, ok, want)
		}
	}
}

func TestRunDirModeUnderUmask0(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	rd, err := MakeRunDir(t.TempDir(), "stress")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Remove()
	st, err := os.Stat(rd.Path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("run directory mode %v under umask 0, want 0700", st.Mode().Perm())
	}
	if !strings.HasPrefix(filepath.Base(rd.Path), "mstar-stress-") {
		t.Errorf("run directory %s", rd.Path)
	}
}

// A live run's directory is in use; once its owner is SIGKILLed, the sweep
// removes its segment, its socket and the directory; an empty dead one
// goes too; a dry run lists them and removes nothing.
func TestSweepRunDirs(t *testing.T) {
	parent := shmDir(t)
	live, err := MakeRunDir(parent, "stress")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Remove()
	empty := filepath.Join(parent, "mstar-stress-42") // an old run's, with nobody's lock
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(parent, "mstar-stress-test-1") // not a run directory: never touched
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), runDirChildEnv+"="+parent)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	n, _ := out.Read(buf)
	line := strings.TrimSpace(string(buf[:n]))
	dead, ok := strings.CutPrefix(line, "ready ")
	if !ok {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q", line)
	}
	rep, err := CleanRunDirs(parent, CleanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !contains(rep.InUseDirs, filepath.Base(dead)+"/") || !contains(rep.InUseDirs, filepath.Base(live.Path)+"/") {
		t.Fatalf("with both owners alive: in use %q", rep.InUseDirs)
	}
	if len(rep.RemovedDirs) != 1 || rep.RemovedDirs[0] != "mstar-stress-42/" || len(rep.Removed) != 0 {
		t.Fatalf("with both owners alive: removed %q and %q, want only the empty dead directory", rep.RemovedDirs, rep.Removed)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()

	rep, err = CleanRunDirs(parent, CleanOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.RemovedDirs) != 0 || len(rep.Removed) != 0 || len(rep.Left) != 3 {
		t.Fatalf("dry run: removed %q %q, listed %v; want the segment, the socket and the directory listed", rep.RemovedDirs, rep.Removed, rep.Left)
	}
	if _, err := os.Stat(dead); err != nil {
		t.Fatal("the dry run removed a directory")
	}
	rep, err = CleanRunDirs(parent, CleanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Base(dead) + "/"
	if len(rep.RemovedDirs) != 1 || rep.RemovedDirs[0] != base || len(rep.Removed) != 2 {
		t.Fatalf("after the kill: %q %q %q (%s)", rep.RemovedDirs, rep.Removed, rep.InUseDirs, base)
	}
	if !contains(rep.InUseDirs, filepath.Base(live.Path)+"/") {
		t.Errorf("the live run's directory: %+v", rep)
	}
	left := listDir(t, parent)
	if len(left) != 2 || !contains(left, filepath.Base(live.Path)) || !contains(left, "mstar-stress-test-1") {
		t.Errorf("left under %s: %v", parent, left)
	}
}
