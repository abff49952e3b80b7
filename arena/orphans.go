package arena

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// CleanOptions tunes CleanOrphans.
type CleanOptions struct {
	// Grace protects files younger than this whose creator's pid is alive:
	// a creator holds its lock microseconds after O_EXCL, and this window
	// covers that. Default 2s.
	Grace time.Duration
	// UID is the owner whose files may be removed (default: ours). Files of
	// other users are left alone and reported.
	UID *int
	// DryRun judges but removes nothing.
	DryRun bool
}

// CleanReport says what a sweep did and what it left, and why.
type CleanReport struct {
	Removed      []string // orphans: nobody holds their lock
	RemovedBytes int64
	InUse        []string   // a live process maps or holds them
	Left         []LeftFile // files it could not or would not judge
	RemovedDirs  []string   // run directories of dead runs (CleanRunDirs)
	InUseDirs    []string   // run directories whose owner is alive
}

// Add appends another sweep's report to r.
func (r *CleanReport) Add(o CleanReport) {
	r.Removed = append(r.Removed, o.Removed...)
	r.RemovedBytes += o.RemovedBytes
	r.InUse = append(r.InUse, o.InUse...)
	r.Left = append(r.Left, o.Left...)
	r.RemovedDirs = append(r.RemovedDirs, o.RemovedDirs...)
	r.InUseDirs = append(r.InUseDirs, o.InUseDirs...)
}

// LeftFile is a file the sweep left alone, with the reason.
type LeftFile struct {
	Name   string
	Reason string
}

func (r CleanReport) String() string {
	s := fmt.Sprintf("removed %d orphaned files (%d bytes), %d in use, %d left alone", len(r.Removed), r.RemovedBytes, len(r.InUse), len(r.Left))
	if len(r.RemovedDirs)+len(r.InUseDirs) > 0 {
		// A line of its own: one line would run past 100 columns.
		s += fmt.Sprintf("\nremoved %d run directories of dead runs, %d of live runs in use", len(r.RemovedDirs), len(r.InUseDirs))
	}
	return s
}

// CleanOrphans removes segments and spill files in dir whose owner is dead.
//
// The judgement is the lock: every process that maps a segment (or owns a
// spill file) holds a shared flock on it, and the kernel drops that lock when
// the process dies however it dies. A file on which a non-blocking exclusive
// lock succeeds is held by nobody: an orphan. The pid in the name is only a
// hint — a reused pid can look alive, and in another pid namespace a live one
// can look dead — so it decides nothing alone; it only shields young files
// (see CleanOptions.Grace). Files that are not ours by name or owner, or
// that cannot be opened, are left alone and reported, never guessed at.
func CleanOrphans(dir string, opt CleanOptions) (CleanReport, error) {
	var rep CleanReport
	opt, uid := opt.resolved()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return rep, fmt.Errorf("sweeping %s: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		n, err := ParseName(name)
		if err != nil {
			if strings.HasPrefix(name, namePrefix) {
				rep.Left = append(rep.Left, LeftFile{name, "name does not match the arena pattern"})
			}
			continue // not an mstar file at all: not ours to report
		}
		reason, removed, size := sweepOne(dir, n, uid, opt)
		switch {
		case reason == goneMeanwhile:
			// Its owner (or another sweep) removed it: nothing to judge.
		case removed:
			rep.Removed = append(rep.Removed, name)
			rep.RemovedBytes += size
		case reason == "":
			rep.InUse = append(rep.InUse, name)
		default:
			rep.Left = append(rep.Left, LeftFile{name, reason})
		}
	}
	sort.Strings(rep.Removed)
	sort.Strings(rep.InUse)
	return rep, nil
}

// sweepOne judges one file: removed, or in use (reason ""), or left with a reason.
func sweepOne(dir string, n Name, uid int, opt CleanOptions) (reason string, removed bool, size int64) {
	path := filepath.Join(dir, n.String())
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return goneMeanwhile, false, 0
		}
		return "cannot open: " + err.Error(), false, 0
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "cannot stat: " + err.Error(), false, 0
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "not a regular file", false, 0
	}
	if int(st.Uid) != uid {
		return fmt.Sprintf("owned by uid %d, not %d", st.Uid, uid), false, 0
	}
	young := time.Since(time.Unix(st.Mtim.Unix())) < opt.Grace
	if young && pidAlive(n.PID) {
		return "younger than the grace period and its pid is alive", false, 0
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return "", false, 0 // held: in use
		}
		return "cannot lock: " + err.Error(), false, 0
	}
	// Nobody holds it. Unlink only if the name still points at what we locked.
	var cur unix.Stat_t
	if err := unix.Stat(path, &cur); err != nil || cur.Ino != st.Ino {
		return "replaced while being judged", false, 0
	}
	if opt.DryRun {
		return "orphan (dry run: not removed)", false, 0
	}
	if err := unix.Unlink(path); err != nil {
		return "cannot remove: " + err.Error(), false, 0
	}
	return "", true, st.Blocks * 512
}

const goneMeanwhile = "removed by someone else meanwhile"

// pidAlive reports whether a process with this pid exists (in our
// namespace) and is not a zombie: a killed process not yet reaped has
// already closed its files, and so dropped its locks.
func pidAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	if err != nil && !errors.Is(err, unix.EPERM) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // no /proc: the signal said it exists
	}
	// "pid (comm) S ...": comm may hold spaces and parentheses. The leader
	// of a threaded process shows Z while its other threads still exit
	// (and hold its files): dead only once it is the last task.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
		tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		return err == nil && len(tasks) > 1
	}
	return true
}

// resolved fills in the default grace period and the uid files must be owned by.
func (opt CleanOptions) resolved() (CleanOptions, int) {
	if opt.Grace == 0 {
		opt.Grace = 2 * time.Second
	}
	uid := os.Getuid()
	if opt.UID != nil {
		uid = *opt.UID
	}
	return opt, uid
}
