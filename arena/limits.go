package arena

import (
	"fmt"
	"os"
	"strings"

	"github.com/mstar-dev/mstar/internal/units"

	"golang.org/x/sys/unix"
)

// FSInfo is the size of the file system segments live on.
type FSInfo struct {
	Path  string
	Total int64 // bytes
	Free  int64 // bytes available to us
}

// StatFS reads the size and free space of the file system holding dir.
func StatFS(dir string) (FSInfo, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return FSInfo{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return FSInfo{Path: dir, Total: int64(st.Blocks) * st.Bsize, Free: int64(st.Bavail) * st.Bsize}, nil
}

// CheckLimits checks one arena's configuration against the file system
// and the host's memory. It refuses a cap that cannot fit the file system
// even when empty, and warns, with the arithmetic, when the cap exceeds the
// free space now or the pinned budget is a large share of memory. Limits
// are per arena: every process with an arena multiplies them, and a
// consumer pins peers' segments on top of its own.
func CheckLimits(cfg Config, fs FSInfo, memTotal int64) (warnings []string, err error) {
	if cfg.Transport == TransportFile {
		return nil, nil
	}
	segs, size := int64(cfg.MaxSegments), cfg.SegmentSize
	capBytes := segs * size
	if size != 0 && capBytes/size != segs {
		return nil, fmt.Errorf("cap %d segments x %d bytes overflows", segs, size)
	}
	if capBytes > fs.Total {
		return nil, fmt.Errorf("limit: cap %d segments x %s = %s exceeds the size of %s (%s); lower the segment count or size",
			segs, units.Bytes(size), units.Bytes(capBytes), fs.Path, units.Bytes(fs.Total))
	}
	if capBytes > fs.Free {
		warnings = append(warnings, fmt.Sprintf("limit: cap %d segments x %s = %s exceeds the free space of %s (%s of %s free); growth past that will fail at segment creation, and tensors then spill",
			segs, units.Bytes(size), units.Bytes(capBytes), fs.Path, units.Bytes(fs.Free), units.Bytes(fs.Total)))
	}
	if cfg.Device != nil && memTotal > 0 {
		pin := min(cfg.PinBudget, capBytes)
		if pin > memTotal/2 {
			warnings = append(warnings, fmt.Sprintf("limit: pinned budget %s (min of budget %s and cap %s) is more than half of host memory (%s); page-locked memory comes out of the pageable pool of the whole machine",
				units.Bytes(pin), units.Bytes(cfg.PinBudget), units.Bytes(capBytes), units.Bytes(memTotal)))
		}
	}
	return warnings, nil
}

func hostMemTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb * 1024
		}
	}
	return 0
}
