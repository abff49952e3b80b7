package hoststate

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeProc writes a fake /proc: stat, self/stat and, per extra pid, its
// stat line.
func writeProc(t *testing.T, dir, stat, self string, procs ...string) {
	t.Helper()
	files := map[string]string{"stat": stat, "self/stat": self}
	for _, p := range procs {
		files[strings.Fields(p)[0]+"/stat"] = p
	}
	for name, body := range files {
		f := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// procLine is a /proc/<pid>/stat line with the given ppid and times.
func procLine(pid, ppid, utime, stime, cutime int) string {
	return fmt.Sprintf("%d (m star) x) R %d 1 1 0 -1 0 0 0 0 0 %d %d %d 0 20 0 8 0\n", pid, ppid, utime, stime, cutime)
}

const statA = `cpu  1000 0 200 5000 10 0 0 100 0 0
cpu0 500 0 100 2500 5 0 0 50 0 0
cpu1 500 0 100 2500 5 0 0 50 0 0
intr 1 2 3
`

// Two CPUs over 400 ticks: 60 of them stolen, 200 busy of which this
// process used 150, so other processes 50.
const statB = `cpu  1180 0 220 5140 10 0 0 160 0 0
cpu0 590 0 110 2570 5 0 0 80 0 0
cpu1 590 0 110 2570 5 0 0 80 0 0
`

func TestBetweenCountsStealAndOthers(t *testing.T) {
	defer func(r string) { procRoot = r }(procRoot)
	dir := t.TempDir()
	procRoot = dir
	// A command name with spaces and a ')' must not shift the fields. Pid
	// 42 has a child 77 and a grandchild 78 (its helpers: its own time)
	// and a reaped child's 5 ticks; 90 is another process.
	writeProc(t, dir, statA, procLine(42, 1, 300, 35, 5), procLine(77, 42, 10, 0, 0), procLine(78, 77, 4, 0, 0), procLine(90, 1, 500, 0, 0))
	a, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if a.CPUs != 2 || a.Total != 6310 || a.Busy != 1200 || a.Steal != 100 || a.Self != 354 {
		t.Fatalf("snapshot %+v", a)
	}
	// 150 more ticks of its own: 110 in 42, 30 in 77, 10 in 78.
	writeProc(t, dir, statB, procLine(42, 1, 400, 45, 5), procLine(77, 42, 40, 0, 0), procLine(78, 77, 14, 0, 0), procLine(90, 1, 550, 0, 0))
	b, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	b.At = a.At.Add(2 * time.Second)
	u := Between(a, b)
	if u.Ticks != 400 || u.StealPct != 15 || u.OtherPct != 12.5 || u.Seconds != 2 || u.CPUs != 2 {
		t.Fatalf("usage %+v", u)
	}
	if !u.Busy() {
		t.Error("15% steal not busy")
	}
	if (Usage{Ticks: 400, StealPct: 4, OtherPct: 9}).Busy() {
		t.Error("4% steal and 9% others called busy")
	}
	if (Usage{Ticks: MinTicks - 1, StealPct: 90}).Busy() {
		t.Error("a window under MinTicks judged")
	}
	// Counters that went backwards (a snapshot from another boot) give zeros.
	if u := Between(b, a); u.Ticks != 0 || u.StealPct != 0 {
		t.Errorf("backwards: %+v", u)
	}
}

func TestReadRefusesMalformedProc(t *testing.T) {
	defer func(r string) { procRoot = r }(procRoot)
	for name, c := range map[string]struct{ stat, self, want string }{
		"no cpu line":    {"intr 1\n", "1 (a) R " + strings.Repeat("0 ", 15), "no cpu line"},
		"short cpu line": {"cpu 1 2 3\n", "1 (a) R " + strings.Repeat("0 ", 15), "want at least 8"},
		"bad counter":    {"cpu 1 2 3 4 5 6 7 x\n", "1 (a) R " + strings.Repeat("0 ", 15), "counter 8"},
		"short self":     {statA, "1 (a) R 0 0\n", "fields after the name"},
		"no name":        {statA, "1 a R\n", "no ')'"},
		"bad pid":        {statA, "x (a) R " + strings.Repeat("0 ", 15), "pid"},
		"negative time":  {statA, "1 (a) R " + strings.Repeat("-1 ", 15), "field 4"},
	} {
		dir := t.TempDir()
		procRoot = dir
		writeProc(t, dir, c.stat, c.self)
		if _, err := Read(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	procRoot = t.TempDir() // no files at all
	var s Sampler
	s.Start()
	if _, ok := s.Stop(); ok {
		t.Error("a sampler without /proc returned a usage")
	}
}

// On Linux the real /proc parses, and Spin's busy cores are this process's,
// not another's.
func TestSamplerOnThisMachine(t *testing.T) {
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skip("no /proc/stat here:", err)
	}
	u, ok := Spin(300 * time.Millisecond)
	if !ok || u.CPUs < 1 || u.Seconds <= 0 || u.StealPct < 0 || u.StealPct > 100 || u.OtherPct < 0 || u.OtherPct > 100 {
		t.Fatalf("usage %+v ok %v", u, ok)
	}
	t.Logf("%d CPUs over %.2f s: steal %.1f%%, others %.1f%% (%d ticks)", u.CPUs, u.Seconds, u.StealPct, u.OtherPct, u.Ticks)
}
