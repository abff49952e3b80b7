package tier

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/mstar-dev/mstar/arena"
)

// DefaultShmDir is where shared segments live: /dev/shm when it exists.
func DefaultShmDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// segment is an mmapped file in a shared-memory folder. The package maps its
// own segments rather than using arena/ (written concurrently); the
// mechanics are the same: O_EXCL create, fallocate so that a full /dev/shm
// fails here and not as SIGBUS later, MAP_SHARED, flock held while mapped.
type segment struct {
	path  string
	f     *os.File
	mem   []byte
	owner bool // created it: unlinks it on close
}

// createSegment creates and maps a new segment of size bytes in dir, named
// as arena names its spill files, so that arena clean finds it after a
// crash (its 12-digit tokens once left killed runs' segments behind).
func createSegment(dir, entity string, size int64) (*segment, error) {
	if size <= 0 {
		return nil, fmt.Errorf("segment of %d bytes", size)
	}
	path := filepath.Join(dir, arena.NewName(arena.KindSpill, entity).String())
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating segment: %w", err)
	}
	seg := &segment{path: path, f: f, owner: true}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		seg.close()
		return nil, fmt.Errorf("reserving %d bytes for %s: %w (is %s full?)", size, path, err, dir)
	}
	if err := seg.mmap(size); err != nil {
		seg.close()
		return nil, err
	}
	return seg, nil
}

// openSegment maps an existing segment another process created.
func openSegment(path string, size int64) (*segment, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening peer segment: %w", err)
	}
	seg := &segment{path: path, f: f}
	st, err := f.Stat()
	if err != nil || st.Size() < size {
		seg.close()
		return nil, fmt.Errorf("peer segment %s: %d bytes, want %d (%v)", path, st.Size(), size, err)
	}
	if err := seg.mmap(size); err != nil {
		seg.close()
		return nil, err
	}
	return seg, nil
}

func (s *segment) mmap(size int64) error {
	// A shared lock says "mapped by someone" to sweepers; it cannot be
	// fooled by pid reuse.
	if err := unix.Flock(int(s.f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return fmt.Errorf("locking %s: %w", s.path, err)
	}
	mem, err := unix.Mmap(int(s.f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mapping %s (%d bytes): %w", s.path, size, err)
	}
	s.mem = mem
	return nil
}

func (s *segment) close() error {
	var first error
	if s.mem != nil {
		if err := unix.Munmap(s.mem); err != nil {
			first = fmt.Errorf("unmapping %s: %w", s.path, err)
		}
		s.mem = nil
	}
	if s.owner {
		if err := os.Remove(s.path); err != nil && first == nil && !os.IsNotExist(err) {
			first = err
		}
	}
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	return first
}
