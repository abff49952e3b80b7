package arena

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultDir is where segments live unless a Config says otherwise.
const DefaultDir = "/dev/shm"

// shmFile is one mapped file: a segment (whole-file mapping) or an open
// spill file (fd only). Every process that has it open holds a shared flock
// on it for as long as it does — the liveness signal the orphan sweep reads,
// which, unlike the pid in the name, cannot be fooled by pid reuse.
type shmFile struct {
	name string
	path string
	fd   int
	mem  []byte // nil for spill files
	size int64
	ino  uint64
}

// createFile makes a new file of size bytes with O_EXCL and mode 0600, takes
// its shared lock, commits the bytes with fallocate — so a full tmpfs fails
// here and never as SIGBUS on a later write — and maps it when mapped is set.
func createFile(dir, name string, size int64, mapped bool) (*shmFile, error) {
	path := filepath.Join(dir, name)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	f := &shmFile{name: name, path: path, fd: fd, size: size}
	fail := func(err error) (*shmFile, error) {
		_ = unix.Unlink(path)
		_ = unix.Close(fd)
		return nil, err
	}
	// The creation-to-lock window is microseconds; the sweep never removes a
	// file younger than its grace period whose pid is alive, which covers it.
	if err := unix.Flock(fd, unix.LOCK_SH); err != nil {
		return fail(fmt.Errorf("locking %s: %w", path, err))
	}
	if size > 0 {
		if err := unix.Fallocate(fd, 0, 0, size); err != nil {
			if errors.Is(err, unix.ENOSPC) {
				return fail(fmt.Errorf("committing %d bytes for %s: %s is full: %w", size, path, dir, err))
			}
			return fail(fmt.Errorf("committing %d bytes for %s: %w", size, path, err))
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail(fmt.Errorf("stat %s: %w", path, err))
	}
	f.ino = st.Ino
	if mapped {
		mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return fail(fmt.Errorf("mapping %s (%d bytes): %w", path, size, err))
		}
		f.mem = mem
	}
	track(path)
	return f, nil
}

// DefaultLockTimeout bounds how long a consumer waits for a segment's
// shared lock. Only a sweep holds the exclusive lock, for the instant it
// takes to judge an orphan; a wait longer than this is another process
// holding it on purpose or by mistake, and the read fails instead of hanging.
const DefaultLockTimeout = 5 * time.Second

// ErrLockTimeout is the error of a lock wait that ran out of time.
var ErrLockTimeout = errors.New("timed out waiting for the shared lock")

// lockWaitHook, when set (by tests), runs each time a lock wait finds the
// lock held.
var lockWaitHook func()

// lockShared takes fd's shared lock, waiting at most timeout.
func lockShared(fd int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	pause := 50 * time.Microsecond
	for {
		err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
		if err == nil || !errors.Is(err, unix.EWOULDBLOCK) {
			return err
		}
		if lockWaitHook != nil {
			lockWaitHook()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w (%s): another process holds it exclusively", ErrLockTimeout, timeout)
		}
		time.Sleep(pause)
		pause = min(2*pause, 10*time.Millisecond)
	}
}

// openFile opens a peer's file after checking, before mapping or reading a
// byte, that it is a regular file (not a symlink: O_NOFOLLOW), owned by uid,
// still linked, and locked by us in shared mode (waiting at most lockWait).
func openFile(dir, name string, uid int, mapped bool, lockWait time.Duration) (*shmFile, error) {
	path := filepath.Join(dir, name)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("opening %s: is a symbolic link: refused", path)
		}
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	f := &shmFile{name: name, path: path, fd: fd}
	fail := func(err error) (*shmFile, error) {
		_ = unix.Close(fd)
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail(fmt.Errorf("stat %s: %w", path, err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fail(fmt.Errorf("%s is not a regular file: refused", path))
	}
	if int(st.Uid) != uid {
		return fail(fmt.Errorf("%s is owned by uid %d, not %d: refused", path, st.Uid, uid))
	}
	if mapped {
		// Waits only while a sweep holds the exclusive lock, for the
		// instant it takes to judge and unlink an orphan.
		if err := lockShared(fd, lockWait); err != nil {
			return fail(fmt.Errorf("locking %s: %w", path, err))
		}
		if err := unix.Fstat(fd, &st); err != nil {
			return fail(fmt.Errorf("stat %s: %w", path, err))
		}
		if st.Nlink == 0 {
			return fail(fmt.Errorf("opening %s: %w", path, os.ErrNotExist))
		}
	}
	f.size, f.ino = st.Size, st.Ino
	if mapped {
		if st.Size <= 0 {
			return fail(fmt.Errorf("%s is empty: refused", path))
		}
		mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return fail(fmt.Errorf("mapping %s (%d bytes): %w", path, st.Size, err))
		}
		f.mem = mem
	}
	return f, nil
}

// linked reports whether the path still names this file (it was neither
// unlinked nor replaced).
func (f *shmFile) linked() bool {
	var st unix.Stat_t
	if err := unix.Stat(f.path, &st); err != nil {
		return false
	}
	return st.Ino == f.ino
}

// unlink removes the name; mappings stay valid until closed.
func (f *shmFile) unlink() error {
	untrack(f.path)
	if err := unix.Unlink(f.path); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("removing %s: %w", f.path, err)
	}
	return nil
}

// close unmaps and closes, which drops the lock.
func (f *shmFile) close() error {
	var err error
	if f.mem != nil {
		if e := unix.Munmap(f.mem); e != nil {
			err = fmt.Errorf("unmapping %s: %w", f.path, e)
		}
		f.mem = nil
	}
	if f.fd >= 0 {
		_ = unix.Close(f.fd)
		f.fd = -1
	}
	return err
}

// The process-wide set of files this process created and has not removed
// yet: unlinked on SIGINT/SIGTERM (and by CleanupAll) even when the code that
// owns them never gets to run its Close.
var (
	liveMu    sync.Mutex
	liveFiles = map[string]struct{}{}
	sigOnce   sync.Once
)

func track(path string) {
	liveMu.Lock()
	liveFiles[path] = struct{}{}
	liveMu.Unlock()
}

func untrack(path string) {
	liveMu.Lock()
	delete(liveFiles, path)
	liveMu.Unlock()
}

// CleanupAll unlinks every segment and spill file this process created and
// still holds. Programs that handle SIGINT/SIGTERM themselves (and so set
// Config.NoSignalHandler) call it from their handler.
func CleanupAll() (removed int) {
	liveMu.Lock()
	defer liveMu.Unlock()
	for p := range liveFiles {
		if unix.Unlink(p) == nil {
			removed++
		}
		delete(liveFiles, p)
	}
	return removed
}

// installSignalCleanup makes SIGINT and SIGTERM unlink this process's files
// and then die of the same signal, as they would have without us.
func installSignalCleanup() {
	sigOnce.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			sig := <-ch
			CleanupAll()
			signal.Reset(sig)
			_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
		}()
	})
}

// MapScratch creates, commits and maps a segment-named file of size bytes
// that is not part of any arena: for measuring what a /dev/shm mapping
// costs (registration, pageable copies). remove unmaps and unlinks it.
func MapScratch(dir, entity string, size int64) (mem []byte, remove func() error, err error) {
	if err := ValidEntity(entity); err != nil {
		return nil, nil, err
	}
	if size <= 0 {
		return nil, nil, fmt.Errorf("scratch mapping of %d bytes", size)
	}
	name := NewName(KindSegment, entity).String()
	f, err := createFile(dir, name, size, true)
	if err != nil {
		return nil, nil, err
	}
	var once sync.Once
	return f.mem, func() error {
		var err error
		once.Do(func() { err = errors.Join(f.unlink(), f.close()) })
		return err
	}, nil
}
