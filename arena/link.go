package arena

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
	"golang.org/x/sys/unix"
)

// The control channel is a stream Unix socket carrying frames:
//
//	u32 length | u8 type | payload
//
// Each side opens with HELLO (role, transport, entity, pid); producers send
// DESCS (a batch of descriptors), consumers answer with ACKS (tensor ids).
// Writes are coalesced: a frame queued while an earlier write is in flight
// goes out with the next, so a busy channel batches by itself and an idle
// one sends at once.
const (
	frameHello = 1
	frameDescs = 2
	frameAcks  = 3

	helloMagic   = 0x4d535441 // "MSTA"
	protoVersion = 1
	maxFrame     = 16 << 20
	maxHello     = 1 << 10  // a hello is under 600 bytes: a peer cannot make us allocate before it says who it is
	frameChunk   = 64 << 10 // frames above this are read as their bytes arrive
	maxPerFrame  = 4096     // descriptors or ids per frame
)

// Role is a side of a link.
type Role uint8

const (
	Producer Role = 1
	Consumer Role = 2
)

func (r Role) String() string {
	switch r {
	case Producer:
		return "producer"
	case Consumer:
		return "consumer"
	}
	return fmt.Sprintf("role(%d)", r)
}

// Hello is what each side of a link says about itself.
type Hello struct {
	Role      Role
	Transport Transport
	Entity    string
	PID       int
}

func (h Hello) String() string {
	return fmt.Sprintf("%s %s (pid %d, --transport %s)", h.Role, h.Entity, h.PID, h.Transport)
}

// Link is one control connection between a producer and a consumer.
type Link struct {
	c             *net.UnixConn
	Local, Remote Hello
	br            *bufio.Reader

	framesOut, writes, framesIn atomic.Uint64

	wmu      sync.Mutex
	wcond    *sync.Cond
	wbuf     []byte
	werr     error
	closed   bool
	writerOK chan struct{}
}

// Listener accepts control connections on a Unix socket path.
type Listener struct {
	l    *net.UnixListener
	path string
	ino  uint64 // the socket file this listener made: Close removes only it
	uid  int
}

// ErrAddrInUse is Listen's error when a live listener holds the path.
var ErrAddrInUse = errors.New("a live listener holds this socket path")

// Listen listens on path. A socket file left by a dead process is replaced;
// one that a live listener answers on is not (ErrAddrInUse). The socket is
// made mode 0600 whatever the umask, and Accept admits only peers of our
// own uid: the uid is the trust boundary.
func Listen(path string) (*Listener, error) {
	if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSocket != 0 {
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("listening on %s: %w", path, ErrAddrInUse)
		}
		if errors.Is(err, unix.ECONNREFUSED) { // nobody listens: stale
			_ = os.Remove(path)
		}
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	// Close removes the file only if it is still ours (by inode), never a
	// socket another listener has made at the same path since.
	l.SetUnlinkOnClose(false)
	// bind(2) applies the umask; the mode must not depend on it. Peers are
	// checked by SO_PEERCRED as well, so the instant before the chmod
	// admits nobody else either.
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		l.Close()
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	return &Listener{l: l, path: path, ino: st.Ino, uid: os.Getuid()}, nil
}

// Accept waits for a connection and completes the handshake. A peer of
// another uid, or one whose hello names a pid that is not its own
// (SO_PEERCRED), is refused: the error says why, and the caller should log
// it and accept again.
func (l *Listener) Accept(local Hello) (*Link, error) {
	c, err := l.l.AcceptUnix()
	if err != nil {
		return nil, fmt.Errorf("accepting on %s: %w", l.path, err)
	}
	cred, err := peerCred(c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("accepting on %s: %w", l.path, err)
	}
	if int(cred.Uid) != l.uid {
		c.Close()
		return nil, fmt.Errorf("accepting on %s: peer pid %d is uid %d, not %d: refused", l.path, cred.Pid, cred.Uid, l.uid)
	}
	lk, err := handshake(c, local)
	if err != nil {
		return nil, err
	}
	if lk.Remote.PID != int(cred.Pid) {
		lk.Close()
		return nil, fmt.Errorf("accepting on %s: peer says it is %s but its pid is %d: refused", l.path, lk.Remote, cred.Pid)
	}
	return lk, nil
}

// peerCred is the kernel's word on who the peer is.
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("reading the peer's credentials: %w", cerr)
	}
	return cred, nil
}

// Close stops listening and removes the socket file, if it is still the
// one this listener made.
func (l *Listener) Close() error {
	var st unix.Stat_t
	if unix.Lstat(l.path, &st) == nil && st.Ino == l.ino {
		_ = unix.Unlink(l.path)
	}
	return l.l.Close()
}

// Dial connects to a listener and completes the handshake. A listener of
// another uid is refused before anything is sent.
func Dial(path string, local Hello, timeout time.Duration) (*Link, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("unix", path)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", path, err)
	}
	uc := c.(*net.UnixConn)
	cred, err := peerCred(uc)
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("connecting to %s: %w", path, err)
	}
	if uid := os.Getuid(); int(cred.Uid) != uid {
		uc.Close()
		return nil, fmt.Errorf("connecting to %s: listener pid %d is uid %d, not %d: refused", path, cred.Pid, cred.Uid, uid)
	}
	return handshake(uc, local)
}

// LinkPair returns the two ends of a connected socket pair, handshaken: for
// a producer and a consumer in one process (sweeps and tests).
func LinkPair(a, b Hello) (*Link, *Link, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	conn := func(fd int) (*net.UnixConn, error) {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			return nil, err
		}
		return c.(*net.UnixConn), nil
	}
	ca, err := conn(fds[0])
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, err
	}
	cb, err := conn(fds[1])
	if err != nil {
		ca.Close()
		return nil, nil, err
	}
	type res struct {
		l   *Link
		err error
	}
	ch := make(chan res, 1)
	go func() { l, err := handshake(cb, b); ch <- res{l, err} }()
	la, errA := handshake(ca, a)
	rb := <-ch
	if err := errors.Join(errA, rb.err); err != nil {
		if la != nil {
			la.Close()
		}
		if rb.l != nil {
			rb.l.Close()
		}
		return nil, nil, err
	}
	return la, rb.l, nil
}

func handshake(c *net.UnixConn, local Hello) (*Link, error) {
	if local.PID == 0 {
		local.PID = os.Getpid()
	}
	l := &Link{c: c, Local: local, br: bufio.NewReaderSize(c, 256<<10), writerOK: make(chan struct{})}
	l.wcond = sync.NewCond(&l.wmu)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	b := binary.LittleEndian.AppendUint32(nil, helloMagic)
	b = binary.LittleEndian.AppendUint16(b, protoVersion)
	b = append(b, byte(local.Role))
	b = appendString(b, string(local.Transport))
	b = appendString(b, local.Entity)
	b = binary.LittleEndian.AppendUint32(b, uint32(local.PID))
	if _, err := c.Write(frame(frameHello, b)); err != nil {
		c.Close()
		return nil, fmt.Errorf("handshake: sending hello: %w", err)
	}
	typ, p, err := l.readFrameMax(maxHello)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("handshake: %w", err)
	}
	if typ != frameHello {
		c.Close()
		return nil, fmt.Errorf("handshake: first frame is type %d, not hello", typ)
	}
	r := decoder{b: p}
	magic, ver := r.u32(), r.u16()
	var h Hello
	h.Role = Role(r.u8())
	h.Transport = Transport(r.str())
	h.Entity = r.str()
	h.PID = int(r.u32())
	if r.err != nil || magic != helloMagic {
		c.Close()
		return nil, errors.New("handshake: peer is not an mstar arena endpoint")
	}
	if ver != protoVersion {
		c.Close()
		return nil, fmt.Errorf("handshake: peer speaks protocol version %d, this mstar %d", ver, protoVersion)
	}
	l.Remote = h
	if h.Role == local.Role {
		c.Close()
		return nil, fmt.Errorf("handshake: both ends are %ss", h.Role)
	}
	if h.Transport != local.Transport {
		c.Close()
		return nil, fmt.Errorf("transport mismatch: this %s uses --transport %s but %s; the transport setting (--transport, Config.Transport) must be the same across the deployment",
			local.Role, local.Transport, h)
	}
	_ = c.SetDeadline(time.Time{})
	go l.writer()
	return l, nil
}

func frame(typ byte, payload []byte) []byte {
	b := binary.LittleEndian.AppendUint32(make([]byte, 0, 5+len(payload)), uint32(1+len(payload)))
	b = append(b, typ)
	return append(b, payload...)
}

func (l *Link) readFrame() (byte, []byte, error) { return l.readFrameMax(maxFrame) }

// readFrameMax reads a frame of at most limit bytes; the length is checked
// before the buffer is allocated.
func (l *Link) readFrameMax(limit uint32) (byte, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(l.br, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n == 0 || n > limit {
		return 0, nil, fmt.Errorf("frame of %d bytes refused (at most %d)", n, limit)
	}
	if n <= frameChunk {
		buf := make([]byte, n)
		if _, err := io.ReadFull(l.br, buf); err != nil {
			return 0, nil, fmt.Errorf("reading frame: %w", err)
		}
		l.framesIn.Add(1)
		return buf[0], buf[1:], nil
	}
	// A large frame grows as its bytes arrive: a 4-byte header claiming
	// 16 MiB does not make us allocate 16 MiB.
	var b bytes.Buffer
	b.Grow(frameChunk)
	if got, err := io.CopyN(&b, l.br, int64(n)); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, fmt.Errorf("reading frame: %d of %d bytes: %w", got, n, err)
	}
	buf := b.Bytes()
	l.framesIn.Add(1)
	return buf[0], buf[1:], nil
}

// frameBuffered reports whether a whole frame is already in the read
// buffer, so reading it will not block.
func (l *Link) frameBuffered() bool {
	if l.br.Buffered() < 4 {
		return false
	}
	hdr, _ := l.br.Peek(4)
	n := binary.LittleEndian.Uint32(hdr)
	return n > 0 && n <= maxFrame && l.br.Buffered() >= 4+int(n)
}

// LinkStats counts a link's traffic: frames against write syscalls shows
// how much the writer coalesced.
type LinkStats struct {
	FramesOut uint64 // frames queued
	Writes    uint64 // write syscalls that carried them
	FramesIn  uint64 // frames read
}

// Stats returns the link's traffic counts.
func (l *Link) Stats() LinkStats {
	return LinkStats{FramesOut: l.framesOut.Load(), Writes: l.writes.Load(), FramesIn: l.framesIn.Load()}
}

// queue appends a frame for the writer goroutine.
func (l *Link) queue(typ byte, build func([]byte) []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.werr != nil {
		return l.werr
	}
	start := len(l.wbuf)
	l.wbuf = append(l.wbuf, 0, 0, 0, 0, typ)
	l.wbuf = build(l.wbuf)
	binary.LittleEndian.PutUint32(l.wbuf[start:], uint32(len(l.wbuf)-start-4))
	l.framesOut.Add(1)
	l.wcond.Signal()
	return nil
}

func (l *Link) writer() {
	defer close(l.writerOK)
	var out []byte
	l.wmu.Lock()
	for {
		for len(l.wbuf) == 0 && !l.closed {
			l.wcond.Wait()
		}
		if len(l.wbuf) == 0 && l.closed {
			l.wmu.Unlock()
			return
		}
		out, l.wbuf = l.wbuf, out[:0]
		l.wmu.Unlock()
		_, err := l.c.Write(out)
		l.writes.Add(1)
		l.wmu.Lock()
		if err != nil {
			if l.werr == nil {
				l.werr = fmt.Errorf("control channel to %s: %w", l.Remote, err)
			}
			l.wbuf = nil
			l.wmu.Unlock()
			l.c.Close()
			return
		}
	}
}

// SendDescriptors queues descriptors for the consumer.
func (l *Link) SendDescriptors(ds []Descriptor) error {
	for len(ds) > 0 {
		n := min(len(ds), maxPerFrame)
		batch := ds[:n]
		ds = ds[n:]
		if err := l.queue(frameDescs, func(b []byte) []byte {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(batch)))
			for i := range batch {
				b = appendDescriptor(b, &batch[i])
			}
			return b
		}); err != nil {
			return err
		}
	}
	return nil
}

// SendAcks queues acknowledgements for the producer.
func (l *Link) SendAcks(ids []uint64) error {
	for len(ids) > 0 {
		n := min(len(ids), maxPerFrame)
		batch := ids[:n]
		ids = ids[n:]
		if err := l.queue(frameAcks, func(b []byte) []byte {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(batch)))
			for _, id := range batch {
				b = binary.LittleEndian.AppendUint64(b, id)
			}
			return b
		}); err != nil {
			return err
		}
	}
	return nil
}

// recv reads the next frame and decodes it.
func (l *Link) recv() (descs []Descriptor, acks []uint64, err error) {
	typ, p, err := l.readFrame()
	if err != nil {
		return nil, nil, err
	}
	r := decoder{b: p}
	n := int(r.u32())
	if r.err != nil || n > maxPerFrame {
		return nil, nil, fmt.Errorf("frame from %s: bad count", l.Remote)
	}
	switch typ {
	case frameDescs:
		descs = make([]Descriptor, 0, n)
		for range n {
			descs = append(descs, r.descriptor())
		}
	case frameAcks:
		acks = make([]uint64, 0, n)
		for range n {
			acks = append(acks, r.u64())
		}
	default:
		return nil, nil, fmt.Errorf("frame from %s: unknown type %d", l.Remote, typ)
	}
	if r.err != nil {
		return nil, nil, fmt.Errorf("frame from %s: %w", l.Remote, r.err)
	}
	if len(r.b) != 0 {
		return nil, nil, fmt.Errorf("frame from %s: %d trailing bytes", l.Remote, len(r.b))
	}
	return descs, acks, nil
}

// PeerGone reports whether a link error only means that the other end
// closed or died (a reset: it died with data we had sent still unread).
func PeerGone(err error) bool { return peerGone(err) }

func peerGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.EPIPE)
}

// Close flushes what is queued and closes the connection.
func (l *Link) Close() error {
	l.wmu.Lock()
	if l.closed {
		l.wmu.Unlock()
		return nil
	}
	l.closed = true
	l.wcond.Broadcast()
	l.wmu.Unlock()
	select {
	case <-l.writerOK:
	case <-time.After(5 * time.Second):
	}
	return l.c.Close()
}

// Sender is a producer's end of one link: it sends descriptors and turns
// the consumer's ACKs into Arena.Ack. When the link closes, every tensor
// the consumer had not acknowledged is abandoned — the consumer is gone
// and its copies with it — so its slots are not leaked.
type Sender struct {
	link  *Link
	arena *Arena
	onAck func(id uint64, abandoned bool)

	mu      sync.Mutex
	pending map[uint64]struct{}
	closed  bool
	err     error
	bogus   uint64
	done    chan struct{}
}

// NewSender starts serving ACKs from the link. onAck, if set, is called
// after each Arena.Ack or Abandon (on the link's goroutine).
func NewSender(l *Link, a *Arena, onAck func(id uint64, abandoned bool)) *Sender {
	s := &Sender{link: l, arena: a, onAck: onAck, pending: make(map[uint64]struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

// ErrLinkClosed is returned when sending on a link whose peer is gone.
var ErrLinkClosed = errors.New("link closed")

// Send sends descriptors already published with this consumer counted in
// their fan-out. From then on the Sender owns this consumer's reference to
// each: it is ACKed, or abandoned when the link goes down. Only when Send
// returns ErrLinkClosed does the caller still hold the references (and
// must Abandon them).
func (s *Sender) Send(ds ...Descriptor) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("sending to %s: %w", s.link.Remote, ErrLinkClosed)
	}
	for _, d := range ds {
		s.pending[d.ID] = struct{}{}
	}
	s.mu.Unlock()
	if err := s.link.SendDescriptors(ds); err != nil {
		// The loop abandons everything pending once it sees the close.
		s.link.c.Close()
	}
	return nil
}

func (s *Sender) loop() {
	defer close(s.done)
	var err error
	var okb []bool
	for {
		var descs []Descriptor
		var acks []uint64
		descs, acks, err = s.link.recv()
		if err != nil {
			break
		}
		if len(descs) > 0 {
			err = fmt.Errorf("protocol: consumer %s sent descriptors", s.link.Remote)
			break
		}
		// One lock of each for the whole frame, not per id.
		ours := acks[:0]
		s.mu.Lock()
		for _, id := range acks {
			if _, ok := s.pending[id]; !ok {
				s.bogus++
				continue // not ours to count: it could free another consumer's reference
			}
			delete(s.pending, id)
			ours = append(ours, id)
		}
		s.mu.Unlock()
		okb = append(okb[:0], make([]bool, len(ours))...)
		_ = s.arena.AckBatch(ours, okb)
		if s.onAck != nil {
			for i, id := range ours {
				if okb[i] {
					s.onAck(id, false)
				}
			}
		}
	}
	s.link.c.Close()
	s.mu.Lock()
	s.closed = true
	if !peerGone(err) {
		s.err = err
	}
	ids := make([]uint64, 0, len(s.pending))
	for id := range s.pending {
		ids = append(ids, id)
	}
	s.pending = nil
	s.mu.Unlock()
	for _, id := range ids {
		if e := s.arena.Abandon(id); e == nil && s.onAck != nil {
			s.onAck(id, true)
		}
	}
}

// Pending is how many sent tensors the consumer has not acknowledged.
func (s *Sender) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// Done is closed once the link is down and its pending tensors abandoned.
func (s *Sender) Done() <-chan struct{} { return s.done }

// Err is why the link went down, nil for an orderly close.
func (s *Sender) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// UnknownAcks counts ACKs for tensors this link never sent (ignored).
func (s *Sender) UnknownAcks() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bogus
}

// Close closes the link; pending tensors are abandoned.
func (s *Sender) Close() error {
	err := s.link.Close()
	<-s.done
	return err
}

// Receiver is a consumer's end of one link. Next blocks until descriptors
// arrive — the socket read wakes it, there is no polling tick — and the
// Read/Copy methods acknowledge each tensor only once its copy out of the
// slot has completed, because the producer reuses the slot on the ACK.
type Receiver struct {
	link   *Link
	reader *Reader
	in     chan []Descriptor
	queued atomic.Int64 // descriptors handed to in so far (tests wait on it)
	err    error
	done   chan struct{}
	quit   chan struct{}

	wmu     sync.Mutex
	waiting []pendingCopy
	wcond   *sync.Cond
	wclosed bool
	wdone   chan struct{}
}

type pendingCopy struct {
	ev      gpu.Event
	release []func()
	ids     []uint64
	done    chan error
}

// NewReceiver starts receiving on the link.
func NewReceiver(l *Link, r *Reader) *Receiver {
	rc := &Receiver{link: l, reader: r, in: make(chan []Descriptor, 64), done: make(chan struct{}), quit: make(chan struct{}), wdone: make(chan struct{})}
	rc.wcond = sync.NewCond(&rc.wmu)
	if !r.claim(l.Remote.Entity, l.Remote.PID) {
		// Refused: Next reports why, and nothing of the real producer's
		// state in the Reader is touched when this link goes.
		rc.err = fmt.Errorf("link from %s refused: that producer already has a live link to this reader", l.Remote)
		_ = l.Close()
		close(rc.in)
		close(rc.done)
		close(rc.wdone)
		rc.wclosed = true
		return rc
	}
	go rc.loop()
	go rc.watch()
	return rc
}

// Remote is the producer on the other end.
func (rc *Receiver) Remote() Hello { return rc.link.Remote }

func (rc *Receiver) loop() {
	defer close(rc.done)
	defer close(rc.in)
	for {
		descs, acks, err := rc.link.recv()
		if err != nil {
			if !peerGone(err) {
				rc.err = err
			}
			break
		}
		if len(acks) > 0 {
			rc.err = fmt.Errorf("protocol: producer %s sent acks", rc.link.Remote)
			break
		}
		// Frames that arrived together are handed over together: one wake-up
		// of the consumer, one batch.
		for len(descs) < maxPerFrame && rc.link.frameBuffered() {
			more, acks, err := rc.link.recv()
			if err == nil && len(acks) > 0 {
				err = fmt.Errorf("protocol: producer %s sent acks", rc.link.Remote)
			}
			if err != nil {
				rc.err = err
				break
			}
			descs = append(descs, more...)
		}
		if rc.err != nil {
			break
		}
		select {
		case rc.in <- descs:
			rc.queued.Add(int64(len(descs)))
		case <-rc.quit:
		}
	}
	rc.link.c.Close()
	rc.reader.unclaim(rc.link.Remote.Entity, rc.link.Remote.PID)
}

// Next returns the next batch of descriptors, blocking until one arrives.
// It returns io.EOF once the producer has closed the link (or died), after
// every batch that arrived before.
func (rc *Receiver) Next(ctx context.Context) ([]Descriptor, error) {
	select {
	case ds, ok := <-rc.in:
		if ok {
			// Take whatever else is already waiting: a busy consumer gets
			// bigger batches (and ACKs them in one frame).
			for len(ds) < maxPerFrame {
				select {
				case more, ok := <-rc.in:
					if !ok {
						return ds, nil // the next call reports the close
					}
					ds = append(ds, more...)
					continue
				default:
				}
				break
			}
			return ds, nil
		}
		<-rc.done
		if rc.err != nil {
			return nil, rc.err
		}
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Ack acknowledges tensors whose copies have completed.
func (rc *Receiver) Ack(ids ...uint64) error { return rc.link.SendAcks(ids) }

// ReadBatch copies each tensor into dst[i] — in-arena and spilled alike —
// and acknowledges those that were read. It returns the first error; the
// tensors that failed are not acknowledged.
func (rc *Receiver) ReadBatch(ds []Descriptor, dst [][]byte) error {
	if len(dst) < len(ds) {
		return fmt.Errorf("read batch: %d destinations for %d tensors", len(dst), len(ds))
	}
	ids := make([]uint64, 0, len(ds))
	errs := make([]error, len(ds))
	rc.reader.ReadBatchInto(ds, dst, errs)
	var first error
	for i, d := range ds {
		if errs[i] != nil {
			if first == nil {
				first = errs[i]
			}
			continue
		}
		ids = append(ids, d.ID)
	}
	if err := rc.Ack(ids...); err != nil && first == nil {
		first = err
	}
	return first
}

// BatchError is CopyBatchToDevice's error when the batch could not be
// queued: the tensors ds[:Acked] were copied and acknowledged, and ds[Acked:]
// were not — they are still the caller's to read again, ACK or drop.
type BatchError struct {
	Acked int
	Err   error
}

func (e *BatchError) Error() string {
	if e.Acked == 0 {
		return e.Err.Error()
	}
	return fmt.Sprintf("%v (the %d tensors before it were copied and acknowledged)", e.Err, e.Acked)
}

func (e *BatchError) Unwrap() error { return e.Err }

// CopyBatchToDevice queues each tensor's copy into dst[i] at off[i] on the
// stream, records one event after them, and returns at once: a watcher
// acknowledges the batch when the event completes, without blocking the
// caller. The returned channel yields the outcome (nil once ACKed; on an
// error there nothing was acknowledged). An error returned at once is a
// *BatchError: the copies queued before the failing tensor are waited for
// and acknowledged, so the caller owns only ds[Acked:].
func (rc *Receiver) CopyBatchToDevice(s gpu.Stream, ds []Descriptor, dst []gpu.Buffer, off []int64) (<-chan error, error) {
	var rel []func()
	releaseAll := func() {
		for _, f := range rel {
			f()
		}
	}
	ids := make([]uint64, 0, len(ds))
	for i, d := range ds {
		f, err := rc.reader.CopyToDevice(s, dst[i], off[i], d)
		if err != nil {
			// Copies already queued still read the slots: wait for them
			// before letting the views go, then acknowledge them — the
			// producer would otherwise hold those slots until its TTL.
			synced := false
			if ev, e := s.Record(); e == nil {
				synced = ev.Sync() == nil
				_ = ev.Close()
			}
			releaseAll()
			if !synced || len(ids) == 0 {
				return nil, &BatchError{Err: err}
			}
			if e := rc.Ack(ids...); e != nil {
				return nil, &BatchError{Err: errors.Join(err, e)}
			}
			return nil, &BatchError{Acked: len(ids), Err: err}
		}
		rel = append(rel, f)
		ids = append(ids, d.ID)
	}
	// A blocking-sync event: the watcher sleeps on it rather than spinning
	// a core for as long as the copies take.
	ev, err := gpu.RecordBlocking(s)
	if err != nil {
		_ = s.Sync()
		releaseAll()
		return nil, &BatchError{Err: fmt.Errorf("recording the copy event: %w", err)}
	}
	done := make(chan error, 1)
	rc.wmu.Lock()
	if rc.wclosed {
		rc.wmu.Unlock()
		_ = ev.Sync()
		releaseAll()
		return nil, &BatchError{Err: errors.New("receiver is closed")}
	}
	rc.waiting = append(rc.waiting, pendingCopy{ev: ev, release: rel, ids: ids, done: done})
	rc.wcond.Signal()
	rc.wmu.Unlock()
	return done, nil
}

// watch completes device batches in order: copies on one stream finish in
// the order they were queued, so waiting on each event in turn is exact.
func (rc *Receiver) watch() {
	defer close(rc.wdone)
	for {
		rc.wmu.Lock()
		for len(rc.waiting) == 0 && !rc.wclosed {
			rc.wcond.Wait()
		}
		if len(rc.waiting) == 0 {
			rc.wmu.Unlock()
			return
		}
		p := rc.waiting[0]
		rc.waiting = rc.waiting[1:]
		rc.wmu.Unlock()
		err := p.ev.Sync()
		_ = p.ev.Close()
		for _, f := range p.release {
			f()
		}
		if err == nil {
			err = rc.Ack(p.ids...)
		} else {
			err = fmt.Errorf("waiting for the copy event: %w", err)
		}
		p.done <- err
	}
}

// Close finishes pending device batches and closes the link.
func (rc *Receiver) Close() error {
	rc.wmu.Lock()
	rc.wclosed = true
	rc.wcond.Broadcast()
	rc.wmu.Unlock()
	<-rc.wdone
	close(rc.quit)
	err := rc.link.Close()
	<-rc.done
	return err
}
