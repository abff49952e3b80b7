package arena

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mstar-dev/mstar/internal/gpu"
	"golang.org/x/sys/unix"
)

// Sizes a hostile descriptor may claim are checked against the real file
// or segment before anything is allocated: 2^40 used to be an out-of-memory
// death in CopyToDevice, 2^62 a makeslice panic.
func TestHugeSizeDescriptors(t *testing.T) {
	a := newTestArena(t, Config{SegmentSize: 1 << 20})
	ctx := context.Background()
	seg, err := a.Put(ctx, pattern(4096, 1), Meta{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	spill := a.spillSlot(4096, true, true)
	copy(spill.Bytes(), pattern(4096, 2))
	file, err := a.Publish(spill, Meta{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if file.Loc != InFile {
		t.Fatalf("spill slot published as %v", file.Loc)
	}
	dev := gpu.NewCPU()
	s, _ := dev.NewStream()
	buf, _ := dev.Alloc(4096)
	r := NewReader(ReaderConfig{Dir: a.Config().Dir})
	defer r.Close()
	for _, base := range []Descriptor{seg, file} {
		for _, size := range []int64{1 << 40, 1 << 62} {
			d := base
			d.Size = size
			name := fmt.Sprintf("%v size 2^%d", d.Loc, map[int64]int{1 << 40: 40, 1 << 62: 62}[size])
			if _, err := r.CopyToDevice(s, buf, 0, d); err == nil || !strings.Contains(err.Error(), "refused") {
				t.Errorf("%s: CopyToDevice: %v, want a refusal", name, err)
			}
			if err := r.CheckSize(d); err == nil || !strings.Contains(err.Error(), "refused") {
				t.Errorf("%s: CheckSize: %v, want a refusal", name, err)
			}
		}
	}
	// The real ones still read.
	for _, d := range []Descriptor{seg, file} {
		if err := r.CheckSize(d); err != nil {
			t.Errorf("%v: %v", d.Loc, err)
		}
	}
}

// A second Listen on a path a live listener holds fails, and closing a
// listener never removes a socket that another listener made at its path.
func TestListenRefusesLivePathAndClosesOnlyItsOwn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.sock")
	l1, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := Listen(path); !errors.Is(err, ErrAddrInUse) {
		if l != nil {
			l.Close()
		}
		t.Fatalf("second Listen on a live path: %v, want ErrAddrInUse", err)
	}
	// Someone removes l1's file and listens anew at the path.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	l2, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	l1.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("closing the first listener removed the second's socket: %v", err)
	}
	go func() {
		if lk, err := l2.Accept(hello(Consumer, TransportArena, "c")); err == nil {
			lk.Close()
		}
	}()
	lk, err := Dial(path, hello(Producer, TransportArena, "p"), time.Second)
	if err != nil {
		t.Fatalf("dialing the second listener: %v", err)
	}
	lk.Close()
	// A stale socket (nobody listens) is still replaced.
	l2.l.SetUnlinkOnClose(false)
	l2.l.Close()
	l3, err := Listen(path)
	if err != nil {
		t.Fatalf("listening over a stale socket: %v", err)
	}
	l3.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("Close left its own socket: %v", err)
	}
}

func TestSocketModeUnderUmask0(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "c.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Errorf("socket mode %v under umask 0, want 0600", got)
	}
}

// A hello naming a pid that is not the peer's own is refused by Accept.
func TestSpoofedHelloPIDRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	errc := make(chan error, 1)
	go func() {
		lk, err := l.Accept(hello(Consumer, TransportArena, "c"))
		if lk != nil {
			lk.Close()
		}
		errc <- err
	}()
	h := hello(Producer, TransportArena, "p0")
	h.PID = os.Getpid() + 1
	if lk, err := Dial(path, h, time.Second); err == nil {
		defer lk.Close()
	}
	err = <-errc
	if err == nil || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), fmt.Sprint(os.Getpid())) {
		t.Fatalf("spoofed hello: %v, want a refusal naming the real pid", err)
	}
}

const dialChildEnv = "MSTAR_ARENA_TEST_DIAL"

// dialChild is the child of TestOtherUIDRefused: it dials and says how it went.
func dialChild(path string) {
	lk, err := Dial(path, Hello{Role: Producer, Transport: TransportArena, Entity: "intruder"}, time.Second)
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(0)
	}
	lk.Close()
	fmt.Println("dial: ok")
	os.Exit(0)
}

// A process of another uid is refused by Accept even where the socket's
// mode would let it connect (SO_PEERCRED), with the reason in the error.
func TestOtherUIDRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to start a child of another uid (syscall.Credential)")
	}
	dir, err := os.MkdirTemp("", "mstar-uid-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// The child (uid 65534) must reach the socket and this binary.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "arena.test")
	if err := copyFile(os.Args[0], exe); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "c.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Chmod(path, 0o777); err != nil { // as a umask-0 bind without the chmod would leave it
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		lk, err := l.Accept(hello(Consumer, TransportArena, "c"))
		if lk != nil {
			lk.Close()
		}
		errc <- err
	}()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), dialChildEnv+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "uid 65534") || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("accept from uid 65534: %v, want a refusal naming the uid", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("accept never returned; child said %s", out)
	}
	if strings.Contains(string(out), "dial: ok") {
		t.Errorf("the child's dial succeeded: %s", out)
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// A second link claiming a live producer's (entity, pid) is refused, and
// closing it leaves the real producer's link working.
func TestDuplicateProducerLinkRefused(t *testing.T) {
	a := newTestArena(t, Config{})
	r := NewReader(ReaderConfig{Dir: a.Config().Dir})
	defer r.Close()
	ph := hello(Producer, TransportArena, "test")
	pl1, cl1, err := LinkPair(ph, hello(Consumer, TransportArena, "c"))
	if err != nil {
		t.Fatal(err)
	}
	snd := NewSender(pl1, a, nil)
	defer snd.Close()
	real := NewReceiver(cl1, r)
	defer real.Close()
	pl2, cl2, err := LinkPair(ph, hello(Consumer, TransportArena, "c"))
	if err != nil {
		t.Fatal(err)
	}
	defer pl2.Close()
	fake := NewReceiver(cl2, r)
	if _, err := fake.Next(context.Background()); err == nil || !strings.Contains(err.Error(), "already has a live link") {
		t.Fatalf("second link for the same producer: %v, want a refusal", err)
	}
	fake.Close()
	d, err := a.Put(context.Background(), pattern(1000, 3), Meta{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(d); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ds, err := real.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := real.ReadBatch(ds, [][]byte{make([]byte, 1000)}); err != nil {
		t.Fatalf("the real producer's tensor after the impostor closed: %v", err)
	}
}

// A segment whose lock another open file holds exclusively does not stall
// reads of another segment, and the wait on it ends in ErrLockTimeout.
func TestLockWaitBoundedAndOutsideTheMutex(t *testing.T) {
	dir := shmDir(t)
	locked := newTestArena(t, Config{Dir: dir, Entity: "locked"})
	free := newTestArena(t, Config{Dir: dir, Entity: "free"})
	ctx := context.Background()
	dl, err := locked.Put(ctx, pattern(100, 1), Meta{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	df, err := free.Put(ctx, pattern(100, 2), Meta{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The producer holds its shared lock: release it here, so that another
	// open file can take the exclusive lock a hostile peer would hold.
	for _, seg := range locked.segs {
		if err := unix.Flock(seg.file.fd, unix.LOCK_UN); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.Open(filepath.Join(dir, dl.File), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{})
	var once sync.Once
	lockWaitHook = func() { once.Do(func() { close(waiting) }) }
	defer func() { lockWaitHook = nil }()

	r := NewReader(ReaderConfig{Dir: dir, LockTimeout: time.Second})
	defer r.Close()
	lockedDone := make(chan error, 1)
	go func() { lockedDone <- r.ReadInto(dl, make([]byte, 100)) }()
	<-waiting // the read of the locked segment is in its lock wait now
	if err := r.ReadInto(df, make([]byte, 100)); err != nil {
		t.Fatalf("reading the unlocked segment: %v", err)
	}
	select {
	case err := <-lockedDone:
		t.Fatalf("the locked read ended (%v) before the unlocked one could finish: the wait held up the reader", err)
	default:
	}
	if err := <-lockedDone; !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("read of the locked segment: %v, want ErrLockTimeout", err)
	}
}
