package stress

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/arena"
)

const (
	workerEnv = "MSTAR_STRESS_TEST_WORKER"
	failEnv   = "MSTAR_STRESS_TEST_FAIL_AT_START"
)

// TestMain turns this test binary into a stress worker when re-executed.
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		if os.Getenv(failEnv) == "1" {
			fmt.Fprintln(os.Stderr, "worker: failing at startup, as told")
			os.Exit(1)
		}
		if err := RunWorker(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func shmDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/dev/shm", "mstar-stress-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func testOptions(t *testing.T) Options {
	return Options{
		Producers: 2, Consumers: 2, Duration: 1500 * time.Millisecond,
		MinSize: 1 << 10, MaxSize: 256 << 10, Fanout: 2,
		ShmDir: shmDir(t), SegmentSize: 1 << 20, MaxSegments: 2, Interval: 250 * time.Millisecond,
		Seed: 42, Exe: os.Args[0], Env: []string{workerEnv + "=1"}, DrainTimeout: 5 * time.Second,
	}
}

func gateMap(s *Summary) map[string]bool {
	m := map[string]bool{}
	for _, g := range s.Gates() {
		m[g.Name] = g.Pass
	}
	return m
}

func run(t *testing.T, opt Options) (*Summary, string) {
	t.Helper()
	var live bytes.Buffer
	opt.Live = &live
	s, err := Run(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("live:\n%s\nsummary: %+v\nerrors: %q", live.String(), s.Result(), s.Errors)
	if entries, _ := os.ReadDir(opt.ShmDir); len(entries) != 0 {
		t.Errorf("the run directory was not removed: %d entries in %s", len(entries), opt.ShmDir)
	}
	return s, live.String()
}

func TestStressPasses(t *testing.T) {
	for _, tr := range []arena.Transport{arena.TransportArena, arena.TransportFile} {
		t.Run(string(tr), func(t *testing.T) {
			opt := testOptions(t)
			opt.Transport = tr
			s, live := run(t, opt)
			for name, pass := range gateMap(s) {
				if !pass {
					t.Errorf("gate %q failed", name)
				}
			}
			if s.Delivered == 0 || s.Received < s.Delivered || len(s.Latencies) == 0 {
				t.Errorf("delivered %d, received %d, %d latencies", s.Delivered, s.Received, len(s.Latencies))
			}
			if len(s.LeftBeforeSweep) != 0 {
				t.Errorf("orderly exits left files: %v", s.LeftBeforeSweep)
			}
			if !strings.Contains(live, "tensors/s") || strings.Count(live, "\n") < 3 {
				t.Errorf("live output has no progress lines:\n%s", live)
			}
			r := s.Result()
			if r.Metric("latency_p99") == nil || !r.Passed() {
				t.Errorf("result: %+v", r.Gates)
			}
		})
	}
}

func TestStressWithKills(t *testing.T) {
	opt := testOptions(t)
	opt.Duration = 3 * time.Second
	opt.KillRate = 0.02
	s, _ := run(t, opt)
	if s.Kills == 0 || s.Restarts == 0 {
		t.Fatalf("kill rate %v: %d kills, %d restarts", opt.KillRate, s.Kills, s.Restarts)
	}
	for name, pass := range gateMap(s) {
		if !pass {
			t.Errorf("gate %q failed with kills", name)
		}
	}
}

// The gates must fail when the bugs they exist for are injected.
func TestStressGatesCatchInjectedFaults(t *testing.T) {
	tests := []struct {
		name   string
		faults Faults
		count  int64 // a few strikes of the fault; leaked slots fill the arena past ~100
		gate   string
	}{
		{"corrupted payloads", Faults{CorruptEvery: 5}, 200, "no corrupted payloads"},
		{"missing ACKs leak slots", Faults{SkipAckEvery: 7}, 50, "no leaked slots"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A count, not a duration: the faults strike every few tensors,
			// and a slow machine must still deliver enough of them. The
			// duration only bounds a run that stalls.
			opt := testOptions(t)
			opt.Count, opt.Duration = tc.count, time.Minute
			opt.DrainTimeout = 500 * time.Millisecond
			opt.Faults = tc.faults
			s, _ := run(t, opt)
			if gateMap(s)[tc.gate] {
				t.Fatalf("gate %q passed although %s were injected", tc.gate, tc.name)
			}
			if s.Result().Passed() {
				t.Fatal("the result passed")
			}
		})
	}
}

func TestOptionsRejected(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Options)
		want string
	}{
		{"fanout above consumers", func(o *Options) { o.Fanout = 3 }, "fan-out"},
		{"kill rate above one", func(o *Options) { o.KillRate = 2 }, "kill rate"},
		{"inverted sizes", func(o *Options) { o.MinSize = 10; o.MaxSize = 5 }, "sizes"},
		{"no executable", func(o *Options) { o.Exe = "" }, "executable"},
		{"bad transport", func(o *Options) { o.Transport = "rdma" }, "transport"},
		{"segment below a page", func(o *Options) { o.SegmentSize = 100 }, "segment size"},
		{"negative segment size", func(o *Options) { o.SegmentSize = -1 }, "segment size"},
		{"negative max segments", func(o *Options) { o.MaxSegments = -1 }, "max segments"},
		{"negative producers", func(o *Options) { o.Producers = -1 }, "producers"},
		{"arena bytes overflow", func(o *Options) { o.Producers = 1 << 20; o.MaxSegments = 1 << 20; o.SegmentSize = 1 << 40 }, "overflows"},
	}
	for _, tc := range tests {
		opt := testOptions(t)
		tc.mod(&opt)
		if _, err := Run(context.Background(), opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestThin(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(i)
	}
	got := thin(xs, 10)
	if len(got) != 10 || got[0] != 0 || got[9] != 90 {
		t.Fatalf("thin 100 to 10: %v", got)
	}
	if got := thin(xs[:5], 10); len(got) != 5 {
		t.Fatalf("thin below the bound changed the samples: %v", got)
	}
}

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	for _, tc := range []struct {
		p, want float64
	}{{50, 3}, {100, 5}, {0, 1}, {99, 5}, {20, 1}} {
		if got := Percentile(xs, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
}

// A worker that fails before its first report is not restarted: a broken
// configuration would otherwise respawn it as fast as it dies.
func TestWorkerFailingAtStartupIsNotRestarted(t *testing.T) {
	opt := testOptions(t)
	opt.Duration = time.Minute // ended by the failure, not by this
	opt.Env = append(opt.Env, failEnv+"=1")
	s, _ := run(t, opt)
	if s.Restarts != 0 {
		t.Errorf("%d restarts of workers that never started", s.Restarts)
	}
	if s.Stopped != "a worker failed at startup" {
		t.Errorf("stopped: %q", s.Stopped)
	}
	if s.Result().Passed() {
		t.Error("the result passed")
	}
}

// The progress header is words over right-aligned columns (it was
// underscores), and the summary reads as English for one worker.
func TestProgressHeaderAndSummaryWording(t *testing.T) {
	var live bytes.Buffer
	r := &runner{opt: Options{Live: &live}}
	r.printHeader()
	r.printLine(IntervalStat{At: 1500 * time.Millisecond, TensorsPerS: 1234.5, GBps: 1.5, Delivered: 100, Received: 200, Spills: 3, LiveSlots: 4, Kills: 5})
	lines := strings.Split(strings.TrimSuffix(live.String(), "\n"), "\n")
	if len(lines) != 2 || strings.Contains(lines[0], "_") || len(lines[0]) != len(lines[1]) {
		t.Fatalf("header and line do not line up:\n%s", live.String())
	}
	// Every header word ends where its column's number ends.
	from := 0
	for _, word := range strings.Fields(lines[0]) {
		end := from + strings.Index(lines[0][from:], word) + len(word)
		from = end
		if lines[1][end-1] == ' ' || (end < len(lines[1]) && lines[1][end] != ' ') {
			t.Errorf("column %q is not right-aligned with its numbers:\n%s", word, live.String())
		}
	}
	s := &Summary{Options: Options{Producers: 1, Consumers: 1, Fanout: 1, Transport: arena.TransportArena}, Stopped: "interrupted", Elapsed: time.Second}
	res := s.Result()
	if !slices.Contains(res.Warnings, StoppedWarning+"interrupted") || res.Metric("elapsed").Samples[0] != 1 {
		t.Errorf("interrupted run: warnings %q, elapsed %+v", res.Warnings, res.Metric("elapsed"))
	}
	s.Stopped = "duration"
	if r := s.Result(); len(r.Warnings) != 0 {
		t.Errorf("a run that reached --duration warns %q", r.Warnings)
	}
}

// A count stops the run at the count: each producer sends its share and no
// more, so without kills exactly that many are delivered.
func TestStressStopsAtCount(t *testing.T) {
	for _, count := range []int64{1, 3, 500} {
		t.Run(fmt.Sprint(count), func(t *testing.T) {
			opt := testOptions(t)
			opt.Duration, opt.Count = 0, count
			s, _ := run(t, opt)
			if s.Stopped != "count" || s.Delivered != count || s.Sent != count {
				t.Errorf("stopped by %s with %d sent and %d delivered, want stopped by count with %d of each", s.Stopped, s.Sent, s.Delivered, count)
			}
			for name, pass := range gateMap(s) {
				if !pass {
					t.Errorf("gate %q failed", name)
				}
			}
		})
	}
}

func TestQuotaOf(t *testing.T) {
	for _, tc := range []struct {
		count int64
		n     int
		want  []int64
	}{{1, 3, []int64{1, 0, 0}}, {10, 4, []int64{3, 3, 2, 2}}, {8, 2, []int64{4, 4}}} {
		var got []int64
		for i := range tc.n {
			got = append(got, quotaOf(tc.count, tc.n, i))
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("quotaOf(%d over %d) = %v, want %v", tc.count, tc.n, got, tc.want)
		}
	}
}
