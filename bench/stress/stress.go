// Package stress drives a multi-process stress test of the shared-memory
// arena: P producer and C consumer processes (this binary re-executed as
// workers) move checksummed tensors of log-uniform sizes, fanned out to
// several consumers, for a duration or a count, while workers are
// optionally SIGKILLed at random and restarted. It prints a live line per
// interval and ends with throughput, send->ack latency, spills, peak
// fragmentation, and the gates: no corrupted payload, no leaked slot, no
// file left in the run directory after the orphan sweep.
package stress

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mstar-dev/mstar/arena"
	"github.com/mstar-dev/mstar/internal/badinput"
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/units"
)

// Options configures a stress run.
type Options struct {
	Producers, Consumers int           // default 4 and 4
	Duration             time.Duration // run this long (default 30s unless Count is set)
	Count                int64         // or until this many are delivered (each producer sends its share; see arena/README.md)
	MinSize, MaxSize     int64         // log-uniform payload sizes, default 1 KiB-64 MiB
	Fanout               int           // consumers per tensor, default 2 (at most Consumers)
	KillRate             float64       // SIGKILLs per delivered tensor (0.01: one per hundred), workers restarted
	Transport            arena.Transport
	ShmDir               string // the run directory is made under it; default /dev/shm
	SegmentSize          int64  // producer arenas; default 256 MiB
	MaxSegments          int    // default 4
	Inflight             int    // tensors in flight per producer, default 8
	Interval             time.Duration
	Seed                 uint64
	DrainTimeout         time.Duration // how long stopping producers wait for ACKs; default 20s
	Faults               Faults        // injected bugs, for testing the gates

	// How to start a worker: Exe with Args, then "--role R --index I";
	// Env is added to the environment. The worker reads its WorkerConfig
	// from stdin and must call RunWorker.
	Exe  string
	Args []string
	Env  []string

	// Live receives one progress line per interval (stderr); nil: none.
	Live io.Writer
}

func (o *Options) defaults() error {
	if o.Producers == 0 {
		o.Producers = 4
	}
	if o.Consumers == 0 {
		o.Consumers = 4
	}
	if o.Duration == 0 && o.Count == 0 {
		o.Duration = 30 * time.Second
	}
	if o.MinSize == 0 {
		o.MinSize = 1 << 10
	}
	if o.MaxSize == 0 {
		o.MaxSize = 64 << 20
	}
	if o.Fanout == 0 {
		o.Fanout = min(2, o.Consumers)
	}
	if o.Transport == "" {
		o.Transport = arena.TransportArena
	}
	if o.ShmDir == "" {
		o.ShmDir = arena.DefaultDir
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = 256 << 20
	}
	if o.MaxSegments == 0 {
		o.MaxSegments = 4
	}
	if o.Inflight == 0 {
		o.Inflight = 8
	}
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	switch {
	case o.Producers < 1 || o.Consumers < 1:
		return fmt.Errorf("stress: %d producers and %d consumers: want at least one of each", o.Producers, o.Consumers)
	case o.Fanout < 1 || o.Fanout > o.Consumers:
		return fmt.Errorf("stress: fan-out %d: want 1 to %d (the consumer count)", o.Fanout, o.Consumers)
	case o.MinSize < 1 || o.MaxSize < o.MinSize:
		return fmt.Errorf("stress: sizes %d-%d: want 1 <= min <= max", o.MinSize, o.MaxSize)
	case o.KillRate < 0 || o.KillRate > 1:
		return fmt.Errorf("stress: kill rate %v: want 0 to 1 (kills per delivered tensor)", o.KillRate)
	case o.Duration < 0 || o.Count < 0:
		return fmt.Errorf("stress: negative duration or count")
	case o.Exe == "":
		return errors.New("stress: no worker executable")
	case o.Inflight < 1:
		return fmt.Errorf("stress: in-flight %d: want at least 1", o.Inflight)
	case o.SegmentSize < 4096:
		return fmt.Errorf("stress: segment size %d: want at least one page (4096 bytes)", o.SegmentSize)
	case o.MaxSegments < 1:
		return fmt.Errorf("stress: max segments %d: want at least 1", o.MaxSegments)
	}
	if _, ok := o.arenaBytes(); !ok {
		return fmt.Errorf("stress: %d producers x %d segments x %d bytes overflows", o.Producers, o.MaxSegments, o.SegmentSize)
	}
	if _, err := arena.ParseTransport(string(o.Transport)); err != nil {
		return fmt.Errorf("stress: %w", err)
	}
	return nil
}

// checkFits refuses, before any worker starts, payloads too large for free
// host memory (gpu.CheckFits): at least each worker's buffer of MaxSize and
// one tensor in flight per producer. A worker out of memory is killed by
// the Go runtime, which the gates would count as a failed run.
func (o *Options) checkFits() error {
	need := int64(math.MaxInt64)
	if f := (2*float64(o.Producers) + float64(o.Consumers)) * float64(o.MaxSize); f < math.MaxInt64 {
		need = int64(f)
	}
	what := fmt.Sprintf("--max-size %s over %d producers and %d consumers", units.Bytes(o.MaxSize), o.Producers, o.Consumers)
	if err := gpu.CheckFits(gpu.NewCPU(), what, need, "try a smaller --max-size or fewer workers"); err != nil {
		return fmt.Errorf("stress: %w", err)
	}
	return nil
}

// arenaBytes is the segment space all producers may hold, and whether it
// fits an int64.
func (o *Options) arenaBytes() (int64, bool) {
	p, m, z := int64(o.Producers), int64(o.MaxSegments), o.SegmentSize
	if p <= 0 || m <= 0 || z <= 0 || p > math.MaxInt64/m || p*m > math.MaxInt64/z {
		return 0, false
	}
	return p * m * z, true
}

// Summary is what a run measured.
type Summary struct {
	Options              Options
	Elapsed              time.Duration
	Stopped              string // why it ended: "duration", "count", "count sent" (never all delivered), "interrupted"
	Sent                 int64
	Delivered, Abandoned int64
	Received             int64     // consumer copies (a tensor counts once per consumer)
	Bytes                int64     // payload bytes copied out by consumers
	Latencies            []float64 // send->last-ACK, microseconds
	Interval             []IntervalStat

	Spills, FragFails uint64
	PeakFrag          float64
	Corrupt           int64
	Lost              int64 // tensors whose producer died before they were read
	ReadErrors        int64 // unreadable although the producer was alive
	LeakedSlots       int   // live slots at the producers' orderly exit
	LeakedSpillFiles  int
	LeftBeforeSweep   []string // files in the run directory after every worker exited
	Swept             arena.CleanReport
	LeftAfterSweep    []string
	SweptAtStartup    int // orphans removed by restarted producers' startup sweeps
	Kills, Restarts   int
	Unexpected        []string // workers that died without being killed
	Errors            []string // worker-reported errors (first ones)
}

// IntervalStat is one live line.
type IntervalStat struct {
	At                  time.Duration
	TensorsPerS, GBps   float64
	Delivered, Received int64
	Spills              uint64
	LiveSlots           int
	Kills               int
}

// slot is one worker position (role, index) across its restarts.
type slot struct {
	role    string
	index   int
	gen     int
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	pid     int
	base    Report // sums of earlier generations
	cur     Report // the latest report of this generation
	final   bool   // this generation sent its final report
	started bool   // this generation sent a report: it got past its setup
	killed  bool   // we SIGKILLed this generation
	tail    *tailBuf
	exited  chan struct{}
	exitErr error
}

type event struct {
	s       *slot
	gen     int
	rep     *Report
	exited  bool
	exitErr error
}

// Run runs the stress test. A canceled ctx stops it early (the run still
// drains, sweeps and reports).
func Run(ctx context.Context, opt Options) (*Summary, error) {
	if err := opt.defaults(); err != nil {
		return nil, badinput.Wrap(err)
	}
	if err := opt.checkFits(); err != nil {
		return nil, badinput.Wrap(err)
	}
	runDir, err := os.MkdirTemp(opt.ShmDir, "mstar-stress-")
	if err != nil {
		return nil, badinput.Errorf("stress: run directory: %w", err)
	}
	defer os.RemoveAll(runDir)
	sockDir, err := os.MkdirTemp("", "mstar-stress-")
	if err != nil {
		return nil, fmt.Errorf("stress: socket directory: %w", err)
	}
	defer os.RemoveAll(sockDir)
	if fs, err := arena.StatFS(runDir); err == nil {
		need, _ := opt.arenaBytes()
		if opt.Transport == arena.TransportArena && need > fs.Total {
			return nil, badinput.Errorf("stress: %d producers x %d segments x %d bytes = %d bytes exceeds %s (%d bytes)", opt.Producers, opt.MaxSegments, opt.SegmentSize, need, opt.ShmDir, fs.Total)
		}
	}
	r := &runner{opt: opt, runDir: runDir, sockDir: sockDir, events: make(chan event, 1024), rng: rand.New(rand.NewPCG(opt.Seed, 99))}
	return r.run(ctx)
}

type runner struct {
	opt             Options
	runDir, sockDir string
	slots           []*slot
	events          chan event
	rng             *rand.Rand
	sum             Summary
	broken          bool // a worker failed before its first report
}

func (r *runner) config(s *slot) WorkerConfig {
	o := r.opt
	c := WorkerConfig{Role: s.role, Index: s.index, Generation: s.gen, RunDir: r.runDir, SockDir: r.sockDir,
		Producers: o.Producers, Consumers: o.Consumers, Transport: string(o.Transport), MinSize: o.MinSize, MaxSize: o.MaxSize,
		Fanout: o.Fanout, Inflight: o.Inflight, SegmentSize: o.SegmentSize, MaxSegments: o.MaxSegments,
		Seed: o.Seed, ReportEvery: 100 * time.Millisecond, DrainTimeout: o.DrainTimeout, Faults: o.Faults}
	if o.Count > 0 && s.role == "producer" {
		// Each producer delivers its share of the count, less what its
		// earlier generations reported delivered.
		c.Limited = true
		c.Quota = max(quotaOf(o.Count, o.Producers, s.index)-s.base.Delivered, 0)
	}
	return c
}

// quotaOf is producer i's share of count tensors over n producers.
func quotaOf(count int64, n, i int) int64 {
	q := count / int64(n)
	if int64(i) < count%int64(n) {
		q++
	}
	return q
}

// maxConfigBytes is PIPE_BUF: the least a pipe buffers without a reader.
const maxConfigBytes = 4096

func (r *runner) start(s *slot) error {
	args := append(append([]string{}, r.opt.Args...), "--role", s.role, "--index", fmt.Sprint(s.index))
	cmd := exec.Command(r.opt.Exe, args...)
	cmd.Env = append(os.Environ(), r.opt.Env...)
	// Its own process group: a terminal's Ctrl-C (SIGINT to the foreground
	// group) reaches only the parent, which stops the workers in order. A
	// worker whose parent dies sees its stdin close and stops.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	b, _ := json.Marshal(r.config(s))
	if len(b) >= maxConfigBytes {
		return fmt.Errorf("configuring %s %d: configuration is %d bytes, over the %d a pipe holds unread", s.role, s.index, len(b), maxConfigBytes)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		stdin.Close()
		return err
	}
	s.tail = &tailBuf{max: 8 << 10}
	cmd.Stderr = s.tail
	// The configuration goes into the pipe before the worker starts: the
	// read end is still open here, so a worker that dies at once shows up
	// as an exit before its first report, never as a broken pipe.
	if _, err := stdin.Write(append(b, '\n')); err != nil {
		stdin.Close()
		stdout.Close()
		return fmt.Errorf("configuring %s %d: %w", s.role, s.index, err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s %d: %w", s.role, s.index, err)
	}
	s.cmd, s.stdin, s.pid = cmd, stdin, cmd.Process.Pid
	s.cur, s.final, s.killed, s.started = Report{}, false, false, false
	s.exited = make(chan struct{})
	gen := s.gen
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var rep Report
			if err := json.Unmarshal(sc.Bytes(), &rep); err != nil {
				continue
			}
			r.events <- event{s: s, gen: gen, rep: &rep}
		}
		err := cmd.Wait()
		r.events <- event{s: s, gen: gen, exited: true, exitErr: err}
	}()
	return nil
}

func (r *runner) run(ctx context.Context) (*Summary, error) {
	o := r.opt
	r.sum.Options = o
	for i := 0; i < o.Consumers; i++ {
		r.slots = append(r.slots, &slot{role: "consumer", index: i})
	}
	for i := 0; i < o.Producers; i++ {
		r.slots = append(r.slots, &slot{role: "producer", index: i})
	}
	for _, s := range r.slots {
		if err := r.start(s); err != nil {
			r.killAll()
			return nil, err
		}
	}
	t0 := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastLine := t0
	var lastDelivered, lastBytes int64
	// A count run whose producers have sent it all but whose deliveries
	// stopped (acknowledgements lost: the leak the gates exist for) ends
	// after DrainTimeout without progress, rather than never.
	var stallDelivered int64
	stallSince := t0
	killCredit := 0.0
	killedSeen := int64(0)
	var deadline <-chan time.Time
	if o.Duration > 0 {
		deadline = time.After(o.Duration)
	}
	r.printHeader()
	lines := 0
loop:
	for {
		select {
		case ev := <-r.events:
			r.handle(ev, true)
			if r.broken {
				r.sum.Stopped = "a worker failed at startup"
				break loop
			}
			if o.Count > 0 && ev.rep != nil && r.totals().Delivered >= o.Count {
				r.sum.Stopped = "count"
				break loop
			}
		case <-deadline:
			r.sum.Stopped = "duration"
			break loop
		case <-ctx.Done():
			r.sum.Stopped = "interrupted"
			break loop
		case now := <-tick.C:
			tot := r.totals()
			if o.Count > 0 && tot.Delivered >= o.Count {
				r.sum.Stopped = "count"
				break loop
			}
			if tot.Delivered != stallDelivered {
				stallDelivered, stallSince = tot.Delivered, now
			}
			if o.Count > 0 && tot.Sent >= o.Count && now.Sub(stallSince) >= o.DrainTimeout {
				r.sum.Stopped = "count sent"
				break loop
			}
			if o.KillRate > 0 {
				killCredit += float64(tot.Delivered-killedSeen) * o.KillRate
				killedSeen = tot.Delivered
				for killCredit >= 1 {
					killCredit--
					r.killOne()
				}
			}
			if now.Sub(lastLine) >= o.Interval {
				dt := now.Sub(lastLine).Seconds()
				st := IntervalStat{At: now.Sub(t0), Delivered: tot.Delivered, Received: tot.Received, Spills: tot.Spills, LiveSlots: r.liveSlots(), Kills: r.sum.Kills}
				st.TensorsPerS = float64(tot.Delivered-lastDelivered) / dt
				st.GBps = float64(tot.Bytes-lastBytes) / dt / 1e9
				r.sum.Interval = append(r.sum.Interval, st)
				if lines > 0 && lines%20 == 0 {
					r.printHeader()
				}
				lines++
				r.printLine(st)
				lastLine, lastDelivered, lastBytes = now, tot.Delivered, tot.Bytes
			}
		}
	}
	r.sum.Elapsed = time.Since(t0)
	r.stop()
	return &r.sum, nil
}

// handle applies one event; restart says whether exits may restart workers.
func (r *runner) handle(ev event, restart bool) {
	s := ev.s
	if ev.gen != s.gen {
		return // a report from an earlier generation, already accounted
	}
	if ev.rep != nil {
		s.started = true
		s.cur = *ev.rep
		if ev.rep.Final {
			s.final = true
		}
		r.sum.Latencies = append(r.sum.Latencies, ev.rep.Latencies...)
		for _, e := range ev.rep.Errors {
			if len(r.sum.Errors) < 50 {
				r.sum.Errors = append(r.sum.Errors, fmt.Sprintf("%s %d: %s", s.role, s.index, e))
			}
		}
		return
	}
	// Exited.
	s.exitErr = ev.exitErr
	close(s.exited)
	if !s.killed && !s.final {
		r.sum.Unexpected = append(r.sum.Unexpected, fmt.Sprintf("%s %d (pid %d) exited on its own: %v; stderr: %s", s.role, s.index, s.pid, ev.exitErr, strings.TrimSpace(s.tail.String())))
	}
	if !restart || s.final {
		return
	}
	if !s.killed && !s.started {
		// It failed during its setup, and so would every restart: a broken
		// configuration must not turn into a fork loop. End the run.
		r.sum.Unexpected = append(r.sum.Unexpected, fmt.Sprintf("%s %d not restarted: it exited before its first report", s.role, s.index))
		r.broken = true
		return
	}
	// Fold this generation into the base and start the next.
	addReport(&s.base, s.cur)
	s.gen++
	r.sum.Restarts++
	if err := r.start(s); err != nil {
		r.sum.Unexpected = append(r.sum.Unexpected, fmt.Sprintf("restarting %s %d: %v", s.role, s.index, err))
		s.cmd = nil
	}
}

func addReport(dst *Report, r Report) {
	dst.Sent += r.Sent
	dst.Delivered += r.Delivered
	dst.Abandoned += r.Abandoned
	dst.Spills += r.Spills
	dst.FragFails += r.FragFails
	dst.PeakFrag = max(dst.PeakFrag, r.PeakFrag)
	dst.Swept += r.Swept
	dst.Received += r.Received
	dst.Bytes += r.Bytes
	dst.Corrupt += r.Corrupt
	dst.Lost += r.Lost
	dst.ReadErrors += r.ReadErrors
}

func (r *runner) totals() Report {
	var t Report
	for _, s := range r.slots {
		addReport(&t, s.base)
		addReport(&t, s.cur)
	}
	return t
}

func (r *runner) liveSlots() int {
	n := 0
	for _, s := range r.slots {
		if s.role == "producer" {
			n += s.cur.LiveSlots
		}
	}
	return n
}

// killOne SIGKILLs a random running worker; it is restarted when its exit
// is seen.
func (r *runner) killOne() {
	var running []*slot
	for _, s := range r.slots {
		if s.cmd != nil && !s.killed && !s.final {
			running = append(running, s)
		}
	}
	if len(running) == 0 {
		return
	}
	s := running[r.rng.IntN(len(running))]
	s.killed = true
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	r.sum.Kills++
}

func (r *runner) killAll() {
	for _, s := range r.slots {
		if s.cmd != nil && s.cmd.Process != nil {
			_ = s.cmd.Process.Kill()
		}
	}
}

// stop ends the run in order: producers stop and drain (consumers keep
// acknowledging), then consumers; then every file left in the run
// directory is listed, the orphan sweep runs, and what is left after it is
// listed.
func (r *runner) stop() {
	wait := func(role string, timeout time.Duration) {
		// Workers killed just before the stop are restarted, to stop cleanly.
		for _, s := range r.slots {
			if s.role == role && s.cmd != nil {
				_ = s.stdin.Close()
			}
		}
		deadline := time.After(timeout)
		for {
			pending := 0
			for _, s := range r.slots {
				if s.role == role && s.cmd != nil && !isClosed(s.exited) {
					pending++
				}
			}
			if pending == 0 {
				return
			}
			select {
			case ev := <-r.events:
				wasKilled := ev.exited && ev.gen == ev.s.gen && ev.s.killed
				r.handle(ev, wasKilled) // a worker killed right before the stop comes back to stop cleanly
				if wasKilled && ev.s.cmd != nil && ev.s.role == role {
					_ = ev.s.stdin.Close()
				}
			case <-deadline:
				for _, s := range r.slots {
					if s.role == role && s.cmd != nil && !isClosed(s.exited) {
						r.sum.Unexpected = append(r.sum.Unexpected, fmt.Sprintf("%s %d (pid %d) did not stop within %s; killed", s.role, s.index, s.pid, timeout))
						s.killed = true
						_ = s.cmd.Process.Kill()
					}
				}
				deadline = time.After(10 * time.Second)
			}
		}
	}
	wait("producer", 60*time.Second)
	wait("consumer", 60*time.Second)
	// Late reports (finals) may still be queued.
	for {
		select {
		case ev := <-r.events:
			r.handle(ev, false)
			continue
		default:
		}
		break
	}
	tot := r.totals()
	r.sum.Sent, r.sum.Delivered, r.sum.Abandoned = tot.Sent, tot.Delivered, tot.Abandoned
	r.sum.Received, r.sum.Bytes, r.sum.Corrupt, r.sum.Lost, r.sum.ReadErrors = tot.Received, tot.Bytes, tot.Corrupt, tot.Lost, tot.ReadErrors
	r.sum.Spills, r.sum.FragFails, r.sum.PeakFrag, r.sum.SweptAtStartup = tot.Spills, tot.FragFails, tot.PeakFrag, tot.Swept
	for _, s := range r.slots {
		if s.role == "producer" {
			if s.final {
				r.sum.LeakedSlots += s.cur.LiveSlots
				r.sum.LeakedSpillFiles += s.cur.SpillFiles
			} else {
				r.sum.Unexpected = append(r.sum.Unexpected, fmt.Sprintf("producer %d sent no final report: its leaked slots are unknown", s.index))
			}
		}
	}
	r.sum.LeftBeforeSweep = listDir(r.runDir)
	rep, err := arena.CleanOrphans(r.runDir, arena.CleanOptions{Grace: -1})
	if err != nil {
		r.sum.Errors = append(r.sum.Errors, err.Error())
	}
	r.sum.Swept = rep
	r.sum.LeftAfterSweep = listDir(r.runDir)
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func listDir(dir string) []string {
	es, _ := os.ReadDir(dir)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func (r *runner) printHeader() {
	if r.opt.Live != nil {
		fmt.Fprintf(r.opt.Live, "%11s %11s %8s %10s %10s %7s %5s %6s\n", "elapsed", "tensors/s", "GB/s", "delivered", "received", "spills", "live", "kills")
	}
}

func (r *runner) printLine(s IntervalStat) {
	if r.opt.Live != nil {
		fmt.Fprintf(r.opt.Live, "%10.1fs %11.1f %8.3f %10d %10d %7d %5d %6d\n", s.At.Seconds(), s.TensorsPerS, s.GBps, s.Delivered, s.Received, s.Spills, s.LiveSlots, s.Kills)
	}
}

// tailBuf keeps the last max bytes written to it (a worker's stderr).
type tailBuf struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuf) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuf) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
