package doctor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mstar-dev/mstar/internal/gpu/nvmlinfo"
	"github.com/mstar-dev/mstar/internal/hoststate"
)

func h200() *nvmlinfo.Report {
	return &nvmlinfo.Report{Driver: "580.159.04", CUDADriver: "13.0", GPUs: []nvmlinfo.GPU{{
		Name: "NVIDIA H200", MemTotal: 143771 << 20, MemFree: 143000 << 20,
		PCIeGen: 5, PCIeWidth: 16, PCIeMaxGen: 5, PCIeMaxWidth: 16,
	}}}
}

func base() Sources {
	return Sources{ShmDir: "/dev/shm", Shm: &Statfs{Total: 128 << 30, Free: 127 << 30},
		MemlockKB: -1, Meminfo: map[string]int64{"Hugepagesize": 2 << 20}, CgroupMax: -1}
}

func find(t *testing.T, cs []Check, name string) Check {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, cs)
	return Check{}
}

func TestChecks(t *testing.T) {
	found := Library{Name: "NVRTC", Path: "/usr/local/cuda/lib64/libnvrtc.so.13", EnvVar: "MSTAR_NVRTC"}
	missing := Library{Name: "NVRTC", EnvVar: "MSTAR_NVRTC", Searched: []string{"/usr/local/cuda/lib64", "$MSTAR_NVRTC"}}
	for _, tc := range []struct {
		name     string
		mod      func(*Sources)
		check    string
		want     Status
		contains string
	}{
		{"no GPU is a warning that says the CPU is used", func(s *Sources) { s.NVMLErr = errors.New("libnvidia-ml.so.1 not found") }, "gpu", Warn, "CPU backend"},
		{"H200 named with driver", func(s *Sources) { s.NVML = h200() }, "gpu 0", OK, "NVIDIA H200"},
		{"gen5 x16 link and its theoretical rate", func(s *Sources) { s.NVML = h200() }, "pcie 0", OK, "63.0 GB/s"},
		{"idle link trained down is fine", func(s *Sources) { s.NVML = h200(); s.NVML.GPUs[0].PCIeGen = 1 }, "pcie 0", OK, "train down when idle"},
		{"narrow link warns", func(s *Sources) { s.NVML = h200(); s.NVML.GPUs[0].PCIeWidth = 8 }, "pcie 0", Warn, "x8 of x16"},
		{"library found", func(s *Sources) { s.Libraries = []Library{found} }, "NVRTC", OK, "libnvrtc.so.13"},
		{"library missing without GPU warns and lists where it looked", func(s *Sources) { s.Libraries = []Library{missing} }, "NVRTC", Warn, "/usr/local/cuda/lib64"},
		{"library missing with a GPU fails", func(s *Sources) { s.NVML = h200(); s.Libraries = []Library{missing} }, "NVRTC", Fail, "not found"},
		{"a broken override fails and says why", func(s *Sources) {
			s.Libraries = []Library{{Name: "NVRTC", EnvVar: "MSTAR_NVRTC", Override: "/bogus", Err: "no libnvrtc.so* in /bogus"}}
		}, "NVRTC", Fail, "MSTAR_NVRTC=/bogus: no libnvrtc.so* in /bogus"},
		{"no /dev/shm fails", func(s *Sources) { s.Shm = nil; s.ShmErr = errors.New("no such file") }, "shm", Fail, "no such file"},
		{"full /dev/shm warns", func(s *Sources) { s.Shm.Free = 10 << 20 }, "shm", Warn, "10 MiB free"},
		{"small memlock warns", func(s *Sources) { s.MemlockKB = 64 }, "memlock", Warn, "64 KiB"},
		{"cgroup below shm warns", func(s *Sources) { s.CgroupMax = 8 << 30 }, "cgroup memory", Warn, "8 GiB"},
		{"AVX512-BF16 named", func(s *Sources) { s.CPU = CPU{Model: "AMD EPYC", Cores: 2, AVX2: true, AVX512BF16: true} }, "cpu", OK, "AVX512-BF16 and AVX2+FMA"},
		{"AVX2 alone says what is missing", func(s *Sources) { s.CPU = CPU{Model: "Intel Xeon", Cores: 16, AVX2: true} }, "cpu", OK, "no AVX512-BF16"},
		{"no AVX2 warns: Go loops", func(s *Sources) { s.CPU = CPU{Model: "Neoverse", Cores: 64} }, "cpu", Warn, "Go loops"},
		{"hugepages reported", func(s *Sources) { s.THP = "always [madvise] never" }, "hugepages", OK, "madvise"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			tc.mod(&s)
			c := find(t, Run(s), tc.check)
			if c.Status != tc.want || !strings.Contains(c.Detail+" "+c.Fix, tc.contains) {
				t.Errorf("got %s %q (fix %q), want %s containing %q", c.Status, c.Detail, c.Fix, tc.want, tc.contains)
			}
			if c.Status != OK && c.Fix == "" && c.Name != "gpu 0" {
				t.Errorf("%s check %q has no fix", c.Status, c.Name)
			}
		})
	}
}

func TestWorst(t *testing.T) {
	if got := Worst([]Check{{Status: OK}, {Status: Warn}}); got != Warn {
		t.Errorf("Worst = %s, want WARN", got)
	}
	if got := Worst([]Check{{Status: Warn}, {Status: Fail}, {Status: OK}}); got != Fail {
		t.Errorf("Worst = %s, want FAIL", got)
	}
}

func TestGatherThisMachine(t *testing.T) {
	s := Gather(nil, "/dev/shm")
	if s.HostMem <= 0 {
		t.Errorf("HostMem = %d; /proc/meminfo unread", s.HostMem)
	}
	cs := Run(s)
	if len(cs) < 5 {
		t.Errorf("only %d checks: %+v", len(cs), cs)
	}
	for _, c := range cs {
		if c.Status != OK && c.Status != Warn && c.Status != Fail {
			t.Errorf("check %q has status %q", c.Name, c.Status)
		}
	}
}

// A --shm-dir that is a regular file is no shared-memory directory, even
// though statfs reports the file system it lives on.
func TestGatherShmDirNotADirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range Run(Gather(nil, file)) {
		if c.Name == "shm" {
			found = true
			if c.Status != Fail || !strings.Contains(c.Detail, file+": not a directory") {
				t.Errorf("shm check on a regular file: %s %q", c.Status, c.Detail)
			}
		}
	}
	if !found {
		t.Error("no shm check")
	}
}

// A host whose hypervisor takes a busy core's turns warns, with the numbers;
// a quiet one is OK, and one that could not be read says so.
func TestHostCheck(t *testing.T) {
	busy := hostCheck(Sources{Host: &hoststate.Usage{Seconds: 0.5, CPUs: 2, StealPct: 38, OtherPct: 1, Ticks: 100}})
	if busy.Status != Warn || !strings.Contains(busy.Detail, "took 38% of their time (steal)") || busy.Fix == "" {
		t.Errorf("busy: %+v", busy)
	}
	quiet := hostCheck(Sources{Host: &hoststate.Usage{Seconds: 0.5, CPUs: 2, StealPct: 1, OtherPct: 2, Ticks: 100}})
	if quiet.Status != OK || quiet.Fix != "" {
		t.Errorf("quiet: %+v", quiet)
	}
	if c := hostCheck(Sources{}); c.Status != OK || !strings.Contains(c.Detail, "not measured") {
		t.Errorf("unread: %+v", c)
	}
}

// A folder no file can be created in (/proc, which root may write by its
// mode bits) fails the shm check, its fix naming that folder.
func TestGatherShmDirNotWritable(t *testing.T) {
	if _, err := os.Stat("/proc/self"); err != nil {
		t.Skip("no /proc here")
	}
	for _, c := range Run(Gather(nil, "/proc")) {
		if c.Name == "shm" {
			if c.Status != Fail || !strings.Contains(c.Detail, "/proc: cannot create files there") || !strings.Contains(c.Fix, "tmpfs /proc") {
				t.Errorf("shm check on /proc: %s %q, fix %q", c.Status, c.Detail, c.Fix)
			}
			return
		}
	}
	t.Error("no shm check")
}
