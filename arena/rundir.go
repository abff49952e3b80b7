package arena

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A run directory holds one run's segments, spill files or sockets
// (`mstar arena stress` makes one under --shm-dir and one for its sockets).
// Its owner holds a shared flock on the directory for as long as it runs —
// the same liveness signal segments carry — so a sweep can tell a dead
// run's directory from a live one's however the owner died.
//
// The directory is made under a hidden name, locked, and only then renamed
// to its final name, so a sweep never sees a live run's directory unlocked.
const (
	runDirPrefix = "mstar-"
	hiddenPrefix = "."
)

// RunDir is a locked run directory.
type RunDir struct {
	Path string
	fd   int
}

// MakeRunDir makes a fresh directory mstar-<kind>-<random> under parent,
// mode 0700 whatever the umask, holding its lock until Remove.
func MakeRunDir(parent, kind string) (*RunDir, error) {
	if err := ValidEntity(kind); err != nil || strings.Contains(kind, "-") {
		return nil, fmt.Errorf("run directory kind %q: want [a-z0-9]+", kind)
	}
	tmp, err := os.MkdirTemp(parent, hiddenPrefix+runDirPrefix+kind+"-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*RunDir, error) {
		_ = os.Remove(tmp)
		return nil, err
	}
	if err := os.Chmod(tmp, 0o700); err != nil {
		return fail(err)
	}
	fd, err := unix.Open(tmp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fail(err)
	}
	if err := unix.Flock(fd, unix.LOCK_SH); err != nil {
		unix.Close(fd)
		return fail(fmt.Errorf("locking %s: %w", tmp, err))
	}
	final := filepath.Join(parent, strings.TrimPrefix(filepath.Base(tmp), hiddenPrefix))
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE); err != nil {
		unix.Close(fd)
		return fail(fmt.Errorf("naming run directory %s: %w", final, err))
	}
	return &RunDir{Path: final, fd: fd}, nil
}

// Remove deletes the directory and what is in it, then drops the lock.
func (d *RunDir) Remove() error {
	err := os.RemoveAll(d.Path)
	if d.fd >= 0 {
		_ = unix.Close(d.fd)
		d.fd = -1
	}
	return err
}

// isRunDirName reports whether name is a run directory's (hidden: one not
// renamed yet) for one of kinds: mstar-<kind>-<digits>, the digits
// os.MkdirTemp adds. Nothing else is touched, so the directories of other
// tools, or of tests named mstar-<kind>-test-N, are never swept.
func isRunDirName(name string, kinds []string) (hidden, ok bool) {
	if rest, cut := strings.CutPrefix(name, hiddenPrefix); cut {
		name, hidden = rest, true
	}
	for _, k := range kinds {
		rest, cut := strings.CutPrefix(name, runDirPrefix+k+"-")
		if !cut || rest == "" {
			continue
		}
		for i := 0; i < len(rest); i++ {
			if rest[i] < '0' || rest[i] > '9' {
				return false, false
			}
		}
		return hidden, true
	}
	return false, false
}

// RunDirKinds are the run directories CleanRunDirs knows.
var RunDirKinds = []string{"stress"}

// CleanRunDirs removes the run directories under parent whose owner is
// dead (nobody holds the directory's lock): their orphaned segments and
// spill files (judged as CleanOrphans judges them), their sockets, and the
// directory itself. A directory holding anything else, or a file that is
// still in use, stays and is reported. Names in the report are
// "<dir>/<file>" for files and "<dir>/" for directories.
func CleanRunDirs(parent string, opt CleanOptions) (CleanReport, error) {
	var rep CleanReport
	opt, uid := opt.resolved()
	entries, err := os.ReadDir(parent)
	if err != nil {
		return rep, fmt.Errorf("sweeping %s: %w", parent, err)
	}
	for _, e := range entries {
		hidden, ok := isRunDirName(e.Name(), RunDirKinds)
		if !ok {
			continue
		}
		sweepRunDir(parent, e.Name(), hidden, uid, opt, &rep)
	}
	return rep, nil
}

func sweepRunDir(parent, name string, hidden bool, uid int, opt CleanOptions, rep *CleanReport) {
	path := filepath.Join(parent, name)
	label := name + "/"
	left := func(why string) { rep.Left = append(rep.Left, LeftFile{label, why}) }
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOENT):
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
			left("not a directory")
		default:
			left("cannot open: " + err.Error())
		}
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		left("cannot stat: " + err.Error())
		return
	}
	if int(st.Uid) != uid {
		left(fmt.Sprintf("owned by uid %d, not %d", st.Uid, uid))
		return
	}
	// A hidden one may be in the instant between its mkdir and its lock.
	if hidden && time.Since(time.Unix(st.Mtim.Unix())) < opt.Grace {
		left("being created (younger than the grace period)")
		return
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			rep.InUseDirs = append(rep.InUseDirs, label)
			return
		}
		left("cannot lock: " + err.Error())
		return
	}
	// Its owner is dead. Its files are judged one by one: a worker of the
	// dead run may still be alive and holding its own.
	inner, err := CleanOrphans(path, opt)
	if err != nil {
		left(err.Error())
		return
	}
	for _, n := range inner.Removed {
		rep.Removed = append(rep.Removed, label+n)
	}
	rep.RemovedBytes += inner.RemovedBytes
	for _, n := range inner.InUse {
		rep.InUse = append(rep.InUse, label+n)
	}
	for _, l := range inner.Left {
		rep.Left = append(rep.Left, LeftFile{label + l.Name, l.Reason})
	}
	blocked := len(inner.InUse) + len(inner.Left)
	es, _ := os.ReadDir(path)
	for _, e := range es {
		if _, err := ParseName(e.Name()); err == nil {
			continue // judged above
		}
		p := filepath.Join(path, e.Name())
		var fst unix.Stat_t
		if unix.Lstat(p, &fst) == nil && fst.Mode&unix.S_IFMT == unix.S_IFSOCK && int(fst.Uid) == uid {
			if opt.DryRun {
				rep.Left = append(rep.Left, LeftFile{label + e.Name(), "socket of a dead run (dry run: not removed)"})
				blocked++
				continue
			}
			if err := unix.Unlink(p); err == nil || errors.Is(err, unix.ENOENT) {
				rep.Removed = append(rep.Removed, label+e.Name())
				continue
			}
		}
		rep.Left = append(rep.Left, LeftFile{label + e.Name(), "not an arena file or socket"})
		blocked++
	}
	switch {
	case blocked > 0:
		left(fmt.Sprintf("run directory of a dead run, kept: %d entries in it stay", blocked))
	case opt.DryRun:
		left("run directory of a dead run (dry run: not removed)")
	default:
		if err := unix.Rmdir(path); err != nil && !errors.Is(err, unix.ENOENT) {
			left("cannot remove: " + err.Error())
			return
		}
		rep.RemovedDirs = append(rep.RemovedDirs, label)
	}
}
