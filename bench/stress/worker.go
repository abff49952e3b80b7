package stress

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mstar-dev/mstar/arena"
	"golang.org/x/sys/unix"
)

// WorkerConfig is what the parent tells a worker, as one JSON line on its
// stdin. Closing stdin afterwards asks the worker to stop.
type WorkerConfig struct {
	Role        string        `json:"role"` // "producer" or "consumer"
	Index       int           `json:"index"`
	Generation  int           `json:"generation"` // restarts of this slot so far
	RunDir      string        `json:"run_dir"`    // segments and spill files
	SockDir     string        `json:"sock_dir"`   // consumers' sockets
	Producers   int           `json:"producers"`
	Consumers   int           `json:"consumers"`
	Transport   string        `json:"transport"`
	MinSize     int64         `json:"min_size"`
	MaxSize     int64         `json:"max_size"`
	Fanout      int           `json:"fanout"`
	Inflight    int           `json:"inflight"`
	SegmentSize int64         `json:"segment_size"`
	MaxSegments int           `json:"max_segments"`
	Seed        uint64        `json:"seed"`
	ReportEvery time.Duration `json:"report_every"`
	// DrainTimeout bounds how long a stopping producer waits for ACKs.
	DrainTimeout time.Duration `json:"drain_timeout"`
	Faults       Faults        `json:"faults"`
	// Quota, when Limited, is how many tensors a producer delivers: it
	// sends while those delivered and in flight are fewer (an abandoned
	// one is sent again), reports at once when they are all delivered,
	// then idles until stdin closes. A run with a count splits it.
	Limited bool  `json:"limited,omitempty"`
	Quota   int64 `json:"quota,omitempty"`
}

// Faults inject the bugs the gates exist to catch, to prove that they do.
type Faults struct {
	CorruptEvery int `json:"corrupt_every,omitempty"`  // producer: flip a byte of every Nth payload after checksumming it
	SkipAckEvery int `json:"skip_ack_every,omitempty"` // consumer: never acknowledge every Nth tensor
}

// Report is one line a worker writes on stdout: its counters since it
// started (cumulative), and the latencies measured since its last report.
type Report struct {
	Role  string `json:"role"`
	Index int    `json:"index"`
	PID   int    `json:"pid"`
	Final bool   `json:"final,omitempty"`

	// Producer.
	Sent       int64     `json:"sent,omitempty"`      // tensors published
	Delivered  int64     `json:"delivered,omitempty"` // tensors every consumer acknowledged
	Abandoned  int64     `json:"abandoned,omitempty"` // tensors a consumer went away from
	Spills     uint64    `json:"spills,omitempty"`
	LiveSlots  int       `json:"live_slots,omitempty"`
	SpillFiles int       `json:"spill_files,omitempty"`
	PeakFrag   float64   `json:"peak_frag,omitempty"`
	FragFails  uint64    `json:"frag_fails,omitempty"`
	Swept      int       `json:"swept,omitempty"` // orphans its startup sweep removed
	Latencies  []float64 `json:"lat_us,omitempty"`

	// Consumer.
	Received   int64 `json:"received,omitempty"`
	Bytes      int64 `json:"bytes,omitempty"` // payload bytes copied out and verified
	Corrupt    int64 `json:"corrupt,omitempty"`
	Lost       int64 `json:"lost,omitempty"`        // unreadable because their producer died
	ReadErrors int64 `json:"read_errors,omitempty"` // unreadable although the producer was alive

	Errors []string `json:"errors,omitempty"` // new since the last report
}

// header is the first bytes of every payload: who sent it, which one, how
// big. A consumer checks it against the descriptor, and the CRC-32C of the
// whole payload against the one the producer computed from its source.
const (
	headerLen = 32
	magic     = 0x4d535452 // "MSTR"
)

// RunWorker is a stress worker's whole life: read the config line from
// stdin, work until stdin closes (or the quota is met), write reports to
// stdout. The CLI's hidden `mstar arena worker` calls it.
func RunWorker(stdin io.Reader, stdout io.Writer) error {
	br := bufio.NewReader(stdin)
	line, err := br.ReadBytes('\n')
	if err != nil && len(line) == 0 {
		return fmt.Errorf("worker: reading config from stdin: %w", err)
	}
	var cfg WorkerConfig
	if err := json.Unmarshal(line, &cfg); err != nil {
		return fmt.Errorf("worker: config: %w", err)
	}
	if cfg.ReportEvery <= 0 {
		cfg.ReportEvery = 100 * time.Millisecond
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 20 * time.Second
	}
	// A parent that died leaves a broken stdout: reports fail with EPIPE
	// instead of killing the worker before it removes its files.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { // EOF (or the parent's death) on stdin: stop.
		_, _ = io.Copy(io.Discard, br)
		stop()
	}()
	w := &worker{cfg: cfg, out: json.NewEncoder(stdout)}
	switch cfg.Role {
	case "producer":
		return w.produce(ctx)
	case "consumer":
		return w.consume(ctx)
	}
	return fmt.Errorf("worker: role %q: want producer or consumer", cfg.Role)
}

type worker struct {
	cfg   WorkerConfig
	outMu sync.Mutex
	out   *json.Encoder
	mu    sync.Mutex
	rep   Report
	errs  []string
	lat   []float64
}

func (w *worker) errorf(format string, a ...any) {
	w.mu.Lock()
	if len(w.errs) < 20 {
		w.errs = append(w.errs, fmt.Sprintf(format, a...))
	}
	w.mu.Unlock()
}

// emit writes a report line; fill adds role-specific live numbers.
func (w *worker) emit(final bool, fill func(*Report)) {
	w.mu.Lock()
	r := w.rep
	r.Role, r.Index, r.PID, r.Final = w.cfg.Role, w.cfg.Index, os.Getpid(), final
	r.Errors, w.errs = w.errs, nil
	r.Latencies, w.lat = w.lat, nil
	w.mu.Unlock()
	if fill != nil {
		fill(&r)
	}
	w.outMu.Lock()
	_ = w.out.Encode(&r)
	w.outMu.Unlock()
}

func (w *worker) reportLoop(ctx context.Context, fill func(*Report)) {
	t := time.NewTicker(w.cfg.ReportEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.emit(false, fill)
		}
	}
}

// sizeFor draws a log-uniform size in [MinSize, MaxSize].
func sizeFor(r *rand.Rand, lo, hi int64) int64 {
	if hi <= lo {
		return lo
	}
	v := math.Exp(math.Log(float64(lo)) + r.Float64()*(math.Log(float64(hi))-math.Log(float64(lo))))
	return min(max(int64(v), lo), hi)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type pendingTensor struct {
	t0        time.Time
	size      int64
	left      int
	abandoned bool
}

func (w *worker) produce(parent context.Context) error {
	cfg := w.cfg
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	a, err := arena.New(arena.Config{
		Dir: cfg.RunDir, Entity: fmt.Sprintf("p%d", cfg.Index), Transport: arena.Transport(cfg.Transport),
		SegmentSize: cfg.SegmentSize, MaxSegments: cfg.MaxSegments,
		Warn: func(m string) { w.errorf("arena: %s", m) },
	})
	if err != nil {
		return err
	}
	defer a.Close()
	w.rep.Swept = len(a.StartupClean().Removed)

	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Index)<<32|uint64(cfg.Generation)))
	pool := make([]byte, cfg.MaxSize+4096)
	for i := 0; i+8 <= len(pool); i += 8 {
		binary.LittleEndian.PutUint64(pool[i:], rng.Uint64())
	}

	var (
		pmu     sync.Mutex
		pending = map[uint64]*pendingTensor{}
		landed  int64 // delivered, counted under pmu with pending: the quota reads both at once
		tokens  = make(chan struct{}, cfg.Inflight)
		drained = make(chan struct{}, 1)
		settled = make(chan struct{}, 1) // a tensor was delivered or abandoned
	)
	finish := func(id uint64, abandoned bool) {
		pmu.Lock()
		p := pending[id]
		if p == nil {
			pmu.Unlock()
			return
		}
		p.left--
		p.abandoned = p.abandoned || abandoned
		done := p.left == 0
		if done {
			delete(pending, id)
			if !p.abandoned {
				landed++
			}
		}
		empty := len(pending) == 0
		pmu.Unlock()
		if !done {
			return
		}
		w.mu.Lock()
		if p.abandoned {
			w.rep.Abandoned++
		} else {
			w.rep.Delivered++
			w.lat = append(w.lat, float64(time.Since(p.t0).Microseconds()))
		}
		w.mu.Unlock()
		<-tokens
		select {
		case settled <- struct{}{}:
		default:
		}
		if empty {
			select {
			case drained <- struct{}{}:
			default:
			}
		}
	}

	// One link per consumer, redialled whenever it drops (the consumer was
	// killed and restarted).
	senders := make([]*arena.Sender, cfg.Consumers)
	var all []*arena.Sender
	var smu sync.Mutex
	var wg sync.WaitGroup
	hello := arena.Hello{Role: arena.Producer, Transport: arena.Transport(cfg.Transport), Entity: fmt.Sprintf("p%d", cfg.Index)}
	for c := 0; c < cfg.Consumers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := filepath.Join(cfg.SockDir, fmt.Sprintf("c%d.sock", c))
			for ctx.Err() == nil {
				l, err := arena.Dial(path, hello, time.Second)
				if err != nil {
					if strings.Contains(err.Error(), "transport mismatch") {
						w.errorf("%v", err)
					}
					select {
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
					continue
				}
				s := arena.NewSender(l, a, finish)
				smu.Lock()
				senders[c] = s
				all = append(all, s)
				smu.Unlock()
				select {
				case <-s.Done():
				case <-ctx.Done():
				}
				smu.Lock()
				senders[c] = nil
				smu.Unlock()
			}
		}()
	}

	fill := func(r *Report) {
		st := a.Stats()
		r.Spills, r.LiveSlots, r.SpillFiles, r.PeakFrag, r.FragFails = st.Spills, st.LiveSlots, st.SpillFiles, st.PeakFrag, st.FragFails
	}
	repCtx, stopReports := context.WithCancel(context.Background())
	go w.reportLoop(repCtx, fill)

	// underQuota waits until one more tensor may go out under the quota;
	// false: the run is stopping. The report that shows the quota met goes
	// out at once, so the parent stops without waiting for a tick.
	told := false
	underQuota := func() bool {
		for {
			// Read together: a tensor leaving pending is already in landed.
			pmu.Lock()
			inFlight, delivered := int64(len(pending)), landed
			pmu.Unlock()
			if delivered+inFlight < cfg.Quota {
				return true
			}
			if delivered >= cfg.Quota && !told {
				told = true
				w.emit(false, fill)
			}
			select {
			case <-settled:
			case <-ctx.Done():
				return false
			}
		}
	}

	var seq uint64
	hdr := make([]byte, headerLen)
	perm := make([]int, cfg.Consumers)
produce:
	for ctx.Err() == nil {
		if cfg.Limited && !underQuota() {
			break
		}
		select {
		case tokens <- struct{}{}:
		case <-ctx.Done():
			break produce
		}
		// Pick the consumers among those connected now.
		smu.Lock()
		var targets []*arena.Sender
		for i := range perm {
			perm[i] = i
		}
		rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		for _, c := range perm {
			if s := senders[c]; s != nil && len(targets) < cfg.Fanout {
				targets = append(targets, s)
			}
		}
		smu.Unlock()
		if len(targets) == 0 {
			<-tokens
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		size := sizeFor(rng, cfg.MinSize, cfg.MaxSize)
		seq++
		off := rng.Int64N(int64(len(pool)) - size + 1)
		body := pool[off : off+size-min(size, headerLen)]
		binary.LittleEndian.PutUint32(hdr[0:], magic)
		binary.LittleEndian.PutUint32(hdr[4:], uint32(cfg.Index))
		binary.LittleEndian.PutUint64(hdr[8:], seq)
		binary.LittleEndian.PutUint64(hdr[16:], uint64(size))
		binary.LittleEndian.PutUint64(hdr[24:], uint64(os.Getpid()))
		h := hdr[:min(size, headerLen)]
		// The checksum comes from the source, not from the slot: a slot
		// overwritten by someone else before or after the copy shows.
		sum := crc32.Update(crc32.Checksum(h, castagnoli), castagnoli, body)
		slot, err := a.Reserve(ctx, size)
		if err != nil {
			<-tokens
			if ctx.Err() != nil {
				break
			}
			w.errorf("reserve %d bytes: %v", size, err)
			continue
		}
		b := slot.Bytes()
		copy(b, h)
		copy(b[len(h):], body)
		if f := cfg.Faults.CorruptEvery; f > 0 && seq%uint64(f) == 0 {
			b[len(b)/2] ^= 0x40
		}
		d, err := a.Publish(slot, arena.Meta{Checksum: sum, HasChecksum: true}, len(targets))
		if err != nil {
			<-tokens
			w.errorf("publish: %v", err)
			continue
		}
		pmu.Lock()
		pending[d.ID] = &pendingTensor{t0: time.Now(), size: size, left: len(targets)}
		pmu.Unlock()
		w.mu.Lock()
		w.rep.Sent++
		w.mu.Unlock()
		for _, s := range targets {
			if err := s.Send(d); err != nil {
				// The link died before taking the reference: drop it here.
				if a.Abandon(d.ID) == nil {
					finish(d.ID, true)
				}
			}
		}
	}
	// Stop: wait for what is in flight to be acknowledged (or abandoned by
	// links that go down), then report what is left: leaked slots.
	deadline := time.After(cfg.DrainTimeout)
drain:
	for {
		pmu.Lock()
		n := len(pending)
		pmu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-drained:
		case <-deadline:
			w.errorf("drain: %d tensors still unacknowledged after %s", n, cfg.DrainTimeout)
			break drain
		case <-time.After(50 * time.Millisecond):
		}
	}
	stopReports()
	w.emit(true, fill)
	// Close the links so that consumers drop their mappings of our segments.
	cancel()
	wg.Wait()
	for _, s := range all {
		s.Close()
	}
	return nil
}

func (w *worker) consume(ctx context.Context) error {
	cfg := w.cfg
	tr := arena.Transport(cfg.Transport)
	rd := arena.NewReader(arena.ReaderConfig{Dir: cfg.RunDir, Transport: tr})
	path := filepath.Join(cfg.SockDir, fmt.Sprintf("c%d.sock", cfg.Index))
	l, err := arena.Listen(path)
	if err != nil {
		return err
	}
	hello := arena.Hello{Role: arena.Consumer, Transport: tr, Entity: fmt.Sprintf("c%d", cfg.Index)}
	repCtx, stopReports := context.WithCancel(context.Background())
	go w.reportLoop(repCtx, nil)

	var wg sync.WaitGroup
	var lmu sync.Mutex
	var links []*arena.Receiver
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			lk, err := l.Accept(hello)
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, os.ErrClosed) || strings.Contains(err.Error(), "use of closed") {
					return
				}
				if !arena.PeerGone(err) { // a producer killed mid-handshake is not news
					w.errorf("%v", err)
				}
				continue
			}
			rc := arena.NewReceiver(lk, rd)
			lmu.Lock()
			links = append(links, rc)
			lmu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.serve(rc, rd)
			}()
		}
	}()
	<-ctx.Done()
	// Producers stop first; their links end with EOF once drained.
	l.Close()
	<-acceptDone
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		w.errorf("stop: links still open after 20s")
		lmu.Lock()
		for _, rc := range links {
			rc.Close()
		}
		lmu.Unlock()
	}
	stopReports()
	if st := rd.Stats(); st.InFlight != 0 {
		w.errorf("%d views still in flight at exit", st.InFlight)
	}
	_ = rd.Close()
	w.emit(true, nil)
	return nil
}

// serve reads one producer's tensors: copy out, ACK (the copy has
// completed, so the producer may reuse the slot), then verify the copy.
func (w *worker) serve(rc *arena.Receiver, rd *arena.Reader) {
	defer rc.Close()
	var buf []byte
	var n int
	remote := rc.Remote()
	for {
		ds, err := rc.Next(context.Background())
		if err != nil {
			if !errors.Is(err, io.EOF) {
				w.errorf("link from %s: %v", remote, err)
			}
			return
		}
		for _, d := range ds {
			if int64(cap(buf)) < d.Size {
				buf = make([]byte, d.Size)
			}
			b := buf[:d.Size]
			if err := rd.ReadInto(d, b); err != nil {
				w.mu.Lock()
				if !alive(remote.PID) || strings.Contains(err.Error(), "gone") {
					w.rep.Lost++
					w.mu.Unlock()
				} else {
					w.rep.ReadErrors++
					w.mu.Unlock()
					w.errorf("reading tensor %d from %s: %v", d.ID, remote, err)
				}
				continue
			}
			n++
			if f := w.cfg.Faults.SkipAckEvery; f == 0 || n%f != 0 {
				_ = rc.Ack(d.ID)
			}
			bad := d.Verify(b) != nil
			if !bad && d.Size >= 16 {
				bad = binary.LittleEndian.Uint32(b[0:]) != magic || (d.Size >= 24 && int64(binary.LittleEndian.Uint64(b[16:])) != d.Size)
			}
			w.mu.Lock()
			w.rep.Received++
			w.rep.Bytes += d.Size
			if bad {
				w.rep.Corrupt++
			}
			w.mu.Unlock()
			if bad {
				w.errorf("corrupt payload: tensor %d (%d bytes) from %s", d.ID, d.Size, remote)
				w.emit(false, nil) // at once: a kill must not lose it
			}
		}
	}
}

func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}
