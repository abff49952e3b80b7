// Package hoststate reads how busy the host's CPUs were while a measurement
// ran: the time the hypervisor took (steal) and the time other processes
// used. On a shared virtual machine these can be most of a CPU timing's
// noise (the 2-vCPU machine this repo is developed on: 7–46% steal during
// `make run` on 2026-12-02, ~1% idle).
package hoststate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Snapshot is the host's cumulative CPU counters at one moment, in clock
// ticks (USER_HZ) summed over all CPUs.
type Snapshot struct {
	At    time.Time
	Total uint64 // every state, steal included
	Busy  uint64 // user, nice, system, irq, softirq (not idle, iowait or steal)
	Steal uint64 // time a virtual CPU waited for the hypervisor
	Self  uint64 // user and system time of this process and its descendants
	CPUs  int
}

// Usage is what happened between two snapshots, in percent of all CPUs'
// time over the window.
type Usage struct {
	Seconds  float64
	CPUs     int
	StealPct float64
	OtherPct float64 // busy time of processes other than this one
	Ticks    uint64  // the window's total ticks (all CPUs): its resolution
}

// procRoot is where /proc is; tests point it at fixtures.
var procRoot = "/proc"

// Read takes a snapshot; it fails where /proc/stat is not Linux's.
func Read() (Snapshot, error) {
	s := Snapshot{At: time.Now()}
	stat, err := os.ReadFile(procRoot + "/stat")
	if err != nil {
		return s, err
	}
	if err := parseStat(stat, &s); err != nil {
		return s, err
	}
	self, err := os.ReadFile(procRoot + "/self/stat")
	if err != nil {
		return s, err
	}
	me, err := parseProc(self)
	if err != nil {
		return s, err
	}
	// The measurement's own helpers (a spill tier's holder process, a
	// peer script) are not other processes: add the live descendants, and
	// the reaped children's time that the kernel already counts as ours.
	s.Self = me.cpu + me.children + descendantsCPU(me.pid)
	return s, nil
}

// proc is what one /proc/<pid>/stat says.
type proc struct {
	pid, ppid     int
	cpu, children uint64 // utime+stime; cutime+cstime of reaped children
}

// descendantsCPU sums utime+stime over the live descendants of pid.
func descendantsCPU(pid int) uint64 {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return 0
	}
	kids := map[int][]proc{}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(procRoot + "/" + e.Name() + "/stat")
		if err != nil {
			continue // gone since the listing
		}
		if p, err := parseProc(b); err == nil {
			kids[p.ppid] = append(kids[p.ppid], p)
		}
	}
	var sum uint64
	queue := []int{pid}
	for len(queue) > 0 {
		for _, k := range kids[queue[0]] {
			sum += k.cpu
			queue = append(queue, k.pid)
		}
		queue = queue[1:]
	}
	return sum
}

// parseStat reads the aggregate "cpu" line and counts the "cpuN" lines.
func parseStat(b []byte, s *Snapshot) error {
	sc := bufio.NewScanner(bytes.NewReader(b))
	found := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		if f[0] != "cpu" {
			s.CPUs++
			continue
		}
		// user nice system idle iowait irq softirq steal [guest guest_nice]:
		// guest time is already inside user and nice.
		if len(f) < 9 {
			return fmt.Errorf("/proc/stat: cpu line has %d fields, want at least 8 counters", len(f)-1)
		}
		var v [8]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return fmt.Errorf("/proc/stat: cpu counter %d: %w", i+1, err)
			}
			v[i] = n
		}
		s.Busy = v[0] + v[1] + v[2] + v[5] + v[6]
		s.Steal = v[7]
		s.Total = s.Busy + v[3] + v[4] + s.Steal
		found = true
	}
	if !found {
		return errors.New("/proc/stat: no cpu line")
	}
	return nil
}

// parseProc reads a /proc/<pid>/stat line: the pid, then the command name
// in parentheses (it may hold spaces and ')'), so the other fields count
// from the last ')': ppid is field 4, utime..cstime fields 14–17.
func parseProc(b []byte) (proc, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return proc{}, errors.New("/proc stat: no ')'")
	}
	j := bytes.IndexByte(b, '(')
	if j < 0 || j > i {
		return proc{}, errors.New("/proc stat: no '('")
	}
	var p proc
	var err error
	if p.pid, err = strconv.Atoi(strings.TrimSpace(string(b[:j]))); err != nil {
		return proc{}, fmt.Errorf("/proc stat: pid: %w", err)
	}
	f := strings.Fields(string(b[i+1:]))
	// After the name: state is field 3, so field k is f[k-3].
	if len(f) < 15 {
		return proc{}, fmt.Errorf("/proc stat: %d fields after the name, want at least 15", len(f))
	}
	var v [5]uint64
	for j, k := range []int{4, 14, 15, 16, 17} {
		x, err := strconv.ParseInt(f[k-3], 10, 64)
		if err != nil || x < 0 {
			return proc{}, fmt.Errorf("/proc stat: field %d: %q", k, f[k-3])
		}
		v[j] = uint64(x)
	}
	p.ppid, p.cpu, p.children = int(v[0]), v[1]+v[2], v[3]+v[4]
	return p, nil
}

// Between is the usage from a to b (b taken later).
func Between(a, b Snapshot) Usage {
	u := Usage{Seconds: b.At.Sub(a.At).Seconds(), CPUs: b.CPUs}
	if b.Total <= a.Total {
		return u
	}
	u.Ticks = b.Total - a.Total
	tot := float64(u.Ticks)
	u.StealPct = 100 * float64(sub(b.Steal, a.Steal)) / tot
	other := float64(sub(b.Busy, a.Busy)) - float64(sub(b.Self, a.Self))
	u.OtherPct = 100 * max(other, 0) / tot
	return u
}

func sub(b, a uint64) uint64 {
	if b < a {
		return 0
	}
	return b - a
}

// MinTicks is the shortest window Busy judges: half a CPU-second, so that
// the 10 ms tick resolution moves a percentage by at most 2 points.
const MinTicks = 50

// Thresholds of a busy host: steal takes turns from every core the
// measurement runs on; other processes share its cores and caches.
const (
	StealBusyPct = 5
	OtherBusyPct = 10
)

// Busy reports whether the host was too busy for CPU timings to be the
// code's alone; false for a window too short to tell.
func (u Usage) Busy() bool {
	return u.Ticks >= MinTicks && (u.StealPct >= StealBusyPct || u.OtherPct >= OtherBusyPct)
}

// Sampler brackets a measurement with two snapshots. Its zero value is
// ready; where /proc cannot be read it records nothing.
type Sampler struct {
	start Snapshot
	ok    bool
}

// Start takes the first snapshot.
func (s *Sampler) Start() {
	var err error
	s.start, err = Read()
	s.ok = err == nil
}

// Stop takes the second and returns the usage between them; ok is false
// when either snapshot failed.
func (s *Sampler) Stop() (Usage, bool) {
	if !s.ok {
		return Usage{}, false
	}
	s.ok = false
	end, err := Read()
	if err != nil {
		return Usage{}, false
	}
	return Between(s.start, end), true
}

// Spin keeps every CPU the process may use busy for d and returns how much
// of the host's CPU time went elsewhere meanwhile: the hypervisor steals
// from a virtual CPU that wants to run, so an idle reading says little.
func Spin(d time.Duration) (Usage, bool) {
	var s Sampler
	s.Start()
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
			}
		}()
	}
	wg.Wait()
	return s.Stop()
}
