// Package doctor tells whether a machine is ready for mstar: the GPU and its
// link, the CUDA libraries mstar loads at run time, and the host limits the
// arena and the spill tiers depend on (/dev/shm, locked memory, hugepages,
// cgroup memory), and the CPU features the CPU backend's kernels use. Each check is OK, WARN or FAIL with a one-line fix.
package doctor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/gpu/nvmlinfo"
	"github.com/mstar-dev/mstar/internal/hoststate"
	"github.com/mstar-dev/mstar/internal/units"
)

// Status of a check.
type Status string

const (
	OK   Status = "OK"
	Warn Status = "WARN"
	Fail Status = "FAIL"
)

// Check is one line of the doctor's report.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"` // one line; empty when OK
}

// Library is what run-time discovery found for one library or header set,
// as the device layer reports it.
type Library struct {
	Name     string   // "libcuda", "NVRTC", "cuBLAS", "CUDA headers"
	Path     string   // where it was found; "" when not found
	EnvVar   string   // the environment variable that overrides the search
	Searched []string // every place looked, in order
	Version  string   // when known
	Err      string   // why it is unusable: not found, or found but broken
	Override string   // the value of EnvVar, when the user set it
}

// Sources are the facts the checks judge. Tests fill them by hand; Gather
// reads them from this machine.
type Sources struct {
	NVML      *nvmlinfo.Report
	NVMLErr   error
	Libraries []Library
	ShmDir    string
	Shm       *Statfs // nil when ShmDir cannot be read
	ShmErr    error
	MemlockKB int64 // -1 for unlimited
	Meminfo   map[string]int64
	THP       string // transparent hugepage mode, "[always] madvise never"
	CgroupMax int64  // bytes; -1 for no limit; 0 unknown
	HostMem   int64
	CPU       CPU
	// Host is the CPU time the hypervisor and other processes took while
	// every core spun for HostProbe; nil where /proc cannot be read.
	Host *hoststate.Usage
}

// HostProbe is how long Gather keeps every core busy to see how much CPU
// time the host takes away: an idle virtual CPU is seldom stolen from.
const HostProbe = 500 * time.Millisecond

// CPU is what the CPU backend's kernels depend on.
type CPU struct {
	Model            string
	Cores            int
	AVX2, AVX512BF16 bool // AVX2+FMA; AVX512F+AVX512-BF16
}

// Statfs is the part of statfs(2) the checks use.
type Statfs struct{ Total, Free int64 }

// Gather reads Sources from this machine. libs comes from the device layer's
// discovery, which the caller passes in so this package stays free of it.
func Gather(libs []Library, shmDir string) Sources {
	s := Sources{Libraries: libs, ShmDir: shmDir, MemlockKB: -2}
	s.NVML, s.NVMLErr = nvmlinfo.Query()
	// statfs reports a regular file's file system too: the arena needs a
	// directory it can write in.
	var st unix.Statfs_t
	if fi, err := os.Stat(shmDir); err == nil && !fi.IsDir() {
		s.ShmErr = errors.New("not a directory")
	} else if err := unix.Statfs(shmDir, &st); err != nil {
		s.ShmErr = err
	} else if err := CanCreateIn(shmDir); err != nil {
		// A probe file, not access(2): root passes W_OK on /proc and
		// read-only mounts, where the arena then fails (as arena sweep
		// and stress do refuse).
		s.ShmErr = fmt.Errorf("cannot create files there: %w", err)
	} else {
		s.Shm = &Statfs{Total: int64(st.Blocks) * st.Bsize, Free: int64(st.Bavail) * st.Bsize}
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err == nil {
		if rl.Cur == unix.RLIM_INFINITY {
			s.MemlockKB = -1
		} else {
			s.MemlockKB = int64(rl.Cur / 1024)
		}
	}
	s.Meminfo = readMeminfo()
	s.HostMem = s.Meminfo["MemTotal"]
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err == nil {
		s.THP = strings.TrimSpace(string(b))
	}
	s.CgroupMax = cgroupMemMax()
	if u, ok := hoststate.Spin(HostProbe); ok {
		s.Host = &u
	}
	s.CPU = CPU{Model: gpu.HostCPUModel(), Cores: runtime.NumCPU(),
		AVX2:       cpu.X86.HasAVX2 && cpu.X86.HasFMA,
		AVX512BF16: cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16}
	return s
}

// Run judges the sources.
func Run(s Sources) []Check {
	var out []Check
	out = append(out, gpuChecks(s)...)
	for _, l := range s.Libraries {
		out = append(out, libraryCheck(l, s.NVML != nil && len(s.NVML.GPUs) > 0))
	}
	out = append(out, cpuCheck(s), hostCheck(s), shmCheck(s), memlockCheck(s), hugepageCheck(s), cgroupCheck(s))
	return out
}

// hostCheck says whether CPU timings here are the code's alone: on a
// shared virtual machine the hypervisor takes turns from busy cores.
func hostCheck(s Sources) Check {
	c := Check{Name: "host load", Status: OK}
	h := s.Host
	if h == nil {
		c.Detail = "not measured (no /proc/stat)"
		return c
	}
	c.Detail = fmt.Sprintf("while %d CPUs spun for %.1f s the hypervisor took %.0f%% of their time (steal) and other processes %.0f%%",
		h.CPUs, h.Seconds, h.StealPct, h.OtherPct)
	if h.Busy() {
		c.Status = Warn
		c.Detail += ": CPU-side timings here (the CPU backend, host copies, launch overheads) carry that noise"
		c.Fix = "time on a dedicated or idle machine; results note a busy host while they ran"
	}
	return c
}

// cpuCheck says which kernels the CPU backend (bench moe, ablate router on
// the CPU) gets here: without AVX2+FMA it falls back to Go loops.
func cpuCheck(s Sources) Check {
	c := Check{Name: "cpu", Status: OK}
	head := fmt.Sprintf("%s, %d cores: ", s.CPU.Model, s.CPU.Cores)
	switch {
	case s.CPU.AVX512BF16 && s.CPU.AVX2:
		c.Detail = head + "AVX512-BF16 and AVX2+FMA kernels for the CPU backend"
	case s.CPU.AVX2:
		c.Detail = head + "AVX2+FMA kernels for the CPU backend (no AVX512-BF16: its prefill runs about half as fast)"
	default:
		c.Status = Warn
		c.Detail = head + "no AVX2+FMA: the CPU backend runs its MoE layer in Go loops, 3-6x slower"
		c.Fix = "for CPU runs, use an x86-64 CPU with AVX2 and FMA (x86-64-v3)"
	}
	return c
}

// Worst returns the most severe status among checks.
func Worst(checks []Check) Status {
	w := OK
	for _, c := range checks {
		switch {
		case c.Status == Fail:
			return Fail
		case c.Status == Warn:
			w = Warn
		}
	}
	return w
}

func gpuChecks(s Sources) []Check {
	if s.NVMLErr != nil || s.NVML == nil || len(s.NVML.GPUs) == 0 {
		why := "no GPU reported"
		if s.NVMLErr != nil {
			why = s.NVMLErr.Error()
		}
		return []Check{{Name: "gpu", Status: Warn,
			Detail: "no NVIDIA GPU: " + why + "; mstar will use the CPU backend",
			Fix:    "install the NVIDIA driver on a GPU machine, or run with --device cpu"}}
	}
	var out []Check
	for _, g := range s.NVML.GPUs {
		out = append(out, Check{Name: fmt.Sprintf("gpu %d", g.Index), Status: OK,
			Detail: fmt.Sprintf("%s, %s (%s free), driver %s, CUDA %s", g.Name, units.Bytes(int64(g.MemTotal)), units.Bytes(int64(g.MemFree)), s.NVML.Driver, s.NVML.CUDADriver)})
		link := Check{Name: fmt.Sprintf("pcie %d", g.Index), Status: OK}
		maxBW := nvmlinfo.PCIeGBps(g.PCIeMaxGen, g.PCIeMaxWidth)
		link.Detail = fmt.Sprintf("gen%d x%d now, gen%d x%d max: %.1f GB/s per direction theoretical",
			g.PCIeGen, g.PCIeWidth, g.PCIeMaxGen, g.PCIeMaxWidth, maxBW)
		switch {
		case g.PCIeWidth > 0 && g.PCIeWidth < g.PCIeMaxWidth:
			link.Status = Warn
			link.Fix = fmt.Sprintf("the link trained to x%d of x%d lanes: reseat the card or check the slot; host<->device copies are capped at %.1f GB/s",
				g.PCIeWidth, g.PCIeMaxWidth, nvmlinfo.PCIeGBps(g.PCIeMaxGen, g.PCIeWidth))
		case g.PCIeGen > 0 && g.PCIeGen < g.PCIeMaxGen:
			// Links drop to a lower generation when idle to save power; that is normal.
			link.Detail += fmt.Sprintf(" (gen%d now: links train down when idle)", g.PCIeGen)
		}
		out = append(out, link)
	}
	return out
}

func libraryCheck(l Library, haveGPU bool) Check {
	c := Check{Name: l.Name}
	where := ""
	if len(l.Searched) > 0 {
		where = " (searched " + strings.Join(l.Searched, ", ") + ")"
	}
	switch {
	case l.Path != "" && l.Err == "":
		c.Status = OK
		c.Detail = l.Path
		if l.Version != "" {
			c.Detail += " (" + l.Version + ")"
		}
	case l.Path != "":
		c.Status = Fail
		c.Detail = l.Path + ": " + l.Err
		c.Fix = fmt.Sprintf("point %s at a working copy", l.EnvVar)
	case l.Override != "":
		// The user named a place and it did not work: say why, and fail.
		c.Status = Fail
		c.Detail = l.Err
		if !strings.Contains(l.Err, l.EnvVar) {
			c.Detail = fmt.Sprintf("%s=%s: %s", l.EnvVar, l.Override, l.Err)
		}
		c.Fix = fmt.Sprintf("point %s at the library (or its folder), or unset it to search the usual places", l.EnvVar)
	default:
		// Without a GPU the CUDA libraries are not expected: WARN, not FAIL.
		c.Status = Warn
		if haveGPU {
			c.Status = Fail
		}
		c.Detail = "not found" + where
		c.Fix = fmt.Sprintf("install it (CUDA toolkit or the nvidia pip wheels) or set %s to its path", l.EnvVar)
	}
	return c
}

func shmCheck(s Sources) Check {
	c := Check{Name: "shm"}
	if s.Shm == nil {
		c.Status, c.Detail = Fail, fmt.Sprintf("%s: %v", s.ShmDir, s.ShmErr)
		c.Fix = fmt.Sprintf("mount a tmpfs there (mount -t tmpfs -o size=16g tmpfs %s) or pass --shm-dir", s.ShmDir)
		return c
	}
	c.Detail = fmt.Sprintf("%s: %s total, %s free", s.ShmDir, units.Bytes(s.Shm.Total), units.Bytes(s.Shm.Free))
	c.Status = OK
	if s.Shm.Free < 1<<30 {
		c.Status = Warn
		c.Fix = "the arena needs room for its segments: enlarge the tmpfs (docker: --shm-size=16g) or remove stale files"
	}
	return c
}

func memlockCheck(s Sources) Check {
	c := Check{Name: "memlock", Status: OK}
	switch {
	case s.MemlockKB == -1:
		c.Detail = "RLIMIT_MEMLOCK unlimited"
	case s.MemlockKB < 0:
		c.Status, c.Detail = Warn, "RLIMIT_MEMLOCK unreadable"
	default:
		c.Detail = fmt.Sprintf("RLIMIT_MEMLOCK %d KiB", s.MemlockKB)
		if s.MemlockKB < 1<<20 {
			c.Status = Warn
			c.Fix = "pinning large host buffers may fail: raise it (ulimit -l unlimited, or LimitMEMLOCK=infinity / docker --ulimit memlock=-1)"
		}
	}
	return c
}

func hugepageCheck(s Sources) Check {
	total, size := s.Meminfo["HugePages_Total"], s.Meminfo["Hugepagesize"]
	c := Check{Name: "hugepages", Status: OK,
		Detail: fmt.Sprintf("%d reserved of %d KiB", total, size/1024)}
	if s.THP != "" {
		c.Detail += "; transparent: " + s.THP
	}
	return c
}

func cgroupCheck(s Sources) Check {
	c := Check{Name: "cgroup memory", Status: OK}
	switch {
	case s.CgroupMax < 0:
		c.Detail = "no limit"
	case s.CgroupMax == 0:
		c.Detail = "unknown (no cgroup memory controller found)"
	default:
		c.Detail = "limit " + units.Bytes(s.CgroupMax)
		// tmpfs pages count against the cgroup: a limit under /dev/shm's size
		// turns a full arena into an OOM kill instead of ENOSPC.
		if s.Shm != nil && s.CgroupMax < s.Shm.Total {
			c.Status = Warn
			c.Fix = fmt.Sprintf("/dev/shm (%s) is larger than the cgroup limit: /dev/shm pages count against it, so cap the arena below %s", units.Bytes(s.Shm.Total), units.Bytes(s.CgroupMax))
		}
	}
	return c
}

func readMeminfo() map[string]int64 {
	m := map[string]int64{}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) > 1 && fields[1] == "kB" {
			n *= 1024
		}
		m[k] = n
	}
	return m
}

// cgroupMemMax reads the cgroup v2 (memory.max) or v1 limit: bytes, -1 for
// none, 0 when unknown.
func cgroupMemMax() int64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return -1
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		if n >= 1<<62 { // v1 reports "no limit" as a huge number
			return -1
		}
		return n
	}
	return 0
}

// CanCreateIn probes that a file can be created in dir, by creating and
// removing one: permission bits alone do not tell (read-only mounts, /proc,
// root). The doctor's shm check and the commands' output and --shm-dir
// checks share it.
func CanCreateIn(dir string) error {
	f, err := os.CreateTemp(dir, ".mstar-check-*")
	if err != nil {
		return errors.Unwrap(err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// FileKind names a non-regular file's type for a message ("a directory",
// "a named pipe"): where mstar would write a file, such a one is refused.
func FileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	}
	return m.Type().String()
}
