package tier

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Holder says how to start the process that holds the peer tier's bytes:
// Argv runs HolderMain with the holder's flags appended (--dir, --size).
// mstar uses its own binary ("mstar spill-holder"); tests re-execute the
// test binary with an environment switch.
type Holder struct {
	Argv []string
	Env  []string // added to this process's environment
}

// holderStart bounds how long a holder may take to say it is ready.
const holderStart = 15 * time.Second

type holderProc struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *bytes.Buffer
	mu     sync.Mutex
	path   string
}

func newPeerTier(opt Options) (*segTier, error) {
	if opt.Capacity <= 0 {
		return nil, errors.New("peer tier: a capacity is required (the holder makes its segment at that size)")
	}
	if len(opt.Holder.Argv) == 0 {
		return nil, errors.New("peer tier: no holder command configured")
	}
	size := roundUp(opt.Capacity, page)
	h, err := startHolder(opt.Holder, opt.ShmDir, size)
	if err != nil {
		return nil, fmt.Errorf("peer tier: %w", err)
	}
	seg, err := openSegment(h.path, size)
	if err != nil {
		h.stop()
		return nil, fmt.Errorf("peer tier: %w", err)
	}
	t := &segTier{kind: Peer, opt: opt, seg: seg, r: newRanges(size), peer: h}
	if err := t.register(); err != nil {
		seg.close()
		h.stop()
		return nil, err
	}
	return t, nil
}

func startHolder(hd Holder, dir string, size int64) (*holderProc, error) {
	args := append(append([]string(nil), hd.Argv[1:]...), "--dir", dir, "--size", strconv.FormatInt(size, 10))
	cmd := exec.Command(hd.Argv[0], args...)
	cmd.Env = append(os.Environ(), hd.Env...)
	h := &holderProc{cmd: cmd, stderr: &bytes.Buffer{}}
	cmd.Stderr = h.stderr
	var err error
	if h.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	h.out = bufio.NewReader(stdout)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting holder %s: %w", hd.Argv[0], err)
	}
	type ready struct {
		line string
		err  error
	}
	ch := make(chan ready, 1)
	go func() {
		l, err := h.out.ReadString('\n')
		ch <- ready{l, err}
	}()
	select {
	case r := <-ch:
		f := strings.Fields(r.line)
		if r.err != nil || len(f) != 3 || f[0] != "ready" {
			h.kill()
			return nil, fmt.Errorf("holder did not start: %q %v: %s", r.line, r.err, strings.TrimSpace(h.stderr.String()))
		}
		h.path = f[1]
	case <-time.After(holderStart):
		h.kill()
		return nil, fmt.Errorf("holder not ready after %s: %s", holderStart, strings.TrimSpace(h.stderr.String()))
	}
	return h, nil
}

// request sends one command line and returns the holder's answer.
func (h *holderProc) request(cmd string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := io.WriteString(h.in, cmd+"\n"); err != nil {
		return "", fmt.Errorf("holder pid %d: %w", h.cmd.Process.Pid, err)
	}
	l, err := h.out.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("holder pid %d: %w: %s", h.cmd.Process.Pid, err, strings.TrimSpace(h.stderr.String()))
	}
	l = strings.TrimSpace(l)
	if rest, ok := strings.CutPrefix(l, "ok "); ok {
		return rest, nil
	}
	return "", fmt.Errorf("holder pid %d: %s", h.cmd.Process.Pid, l)
}

func (h *holderProc) stop() error {
	h.mu.Lock()
	io.WriteString(h.in, "quit\n")
	h.in.Close()
	h.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		h.cmd.Process.Kill()
		err = fmt.Errorf("holder pid %d did not exit; killed", h.cmd.Process.Pid)
		<-done
	}
	// The holder unlinks its segment; make sure of it if it died first.
	if h.path != "" {
		if rerr := os.Remove(h.path); rerr == nil && err == nil {
			err = fmt.Errorf("holder pid %d left its segment %s behind (removed)", h.cmd.Process.Pid, h.path)
		}
	}
	return err
}

func (h *holderProc) kill() {
	h.cmd.Process.Kill()
	h.cmd.Wait()
}

// PeerHash asks the process holding a peer slot's bytes to hash them from
// its own mapping: proof that another process holds what was spilled.
func PeerHash(t Tier, s Slot) (uint64, error) {
	t, s = Unwrap(t), UnwrapSlot(s)
	st, ok := t.(*segTier)
	if !ok || st.peer == nil {
		return 0, fmt.Errorf("tier %s has no holder process", t.Kind())
	}
	off, ok := st.segmentOffset(s)
	if !ok {
		return 0, errors.New("slot is not in the peer segment")
	}
	ans, err := st.peer.request(fmt.Sprintf("hash %d %d", off, s.Filled()))
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(ans, 16, 64)
}

// HolderPID returns the pid of a peer tier's holder process.
func HolderPID(t Tier) (int, bool) {
	st, ok := Unwrap(t).(*segTier)
	if !ok || st.peer == nil {
		return 0, false
	}
	return st.peer.cmd.Process.Pid, true
}

// HolderMain is the holder process: it creates a segment of --size bytes in
// --dir, says "ready PATH SIZE" on stdout, and answers "hash OFF LEN" with
// the xxhash of that range of its own mapping until "quit" or the end of
// stdin (its parent gone), then unmaps and unlinks the segment.
func HolderMain(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("spill-holder", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dir := fs.String("dir", DefaultShmDir(), "folder for the segment")
	size := fs.Int64("size", 0, "segment size in bytes")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("spill-holder: %w", err)
	}
	if *size <= 0 {
		return errors.New("spill-holder: --size must be positive")
	}
	seg, err := createSegment(*dir, "peer", *size)
	if err != nil {
		return fmt.Errorf("spill-holder: %w", err)
	}
	defer seg.close()
	for i := 0; i < len(seg.mem); i += page {
		seg.mem[i] = 0
	}
	w := bufio.NewWriter(stdout)
	reply := func(format string, a ...any) {
		fmt.Fprintf(w, format+"\n", a...)
		w.Flush()
	}
	reply("ready %s %d", seg.path, len(seg.mem))
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 1 && f[0] == "quit":
			return nil
		case len(f) == 3 && f[0] == "hash":
			off, err1 := strconv.ParseInt(f[1], 10, 64)
			n, err2 := strconv.ParseInt(f[2], 10, 64)
			if err1 != nil || err2 != nil || off < 0 || n < 0 || off+n > int64(len(seg.mem)) {
				reply("err bad range %s %s", f[1], f[2])
				continue
			}
			reply("ok %x", xxhash.Sum64(seg.mem[off:off+n]))
		default:
			reply("err unknown command %q", sc.Text())
		}
	}
	return nil
}

// testHolderEnv marks a test binary re-executed as the peer tier's holder.
const testHolderEnv = "MSTAR_SPILL_TEST_HOLDER"

// TestBinaryHolder is the Holder that re-executes this test binary as the
// holder; its TestMain calls ServeIfTestHolder first.
func TestBinaryHolder() Holder {
	return Holder{Argv: []string{os.Args[0], "-test.run=^$", "--"}, Env: []string{testHolderEnv + "=1"}}
}

// ServeIfTestHolder, called from a TestMain, serves as the holder and exits
// when this test binary was started by TestBinaryHolder; otherwise it
// returns at once.
func ServeIfTestHolder() {
	if os.Getenv(testHolderEnv) != "1" {
		return
	}
	args := os.Args[1:]
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	if err := HolderMain(args, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}
