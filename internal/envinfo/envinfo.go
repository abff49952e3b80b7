// Package envinfo collects the environment a measurement ran in — host, OS,
// CPU, memory, Go and mstar versions, and the GPU's facts from the device and
// from NVML — as the key/value pairs a results document carries, so results
// group and compare by where they were measured.
package envinfo

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/gpu/nvmlinfo"
	"github.com/mstar-dev/mstar/internal/version"
	"github.com/mstar-dev/mstar/reports"
)

// Collect returns the environment of this process on dev (nil: host only).
// Facts that cannot be read are left out rather than written as empty.
func Collect(dev gpu.Device) reports.Env {
	env := reports.Env{}
	set := func(k, v string) {
		if v = strings.TrimSpace(v); v != "" {
			env[k] = v
		}
	}
	host, _ := os.Hostname()
	set("host", host)
	set("os", runtime.GOOS+"/"+runtime.GOARCH)
	set("kernel", firstLine("/proc/sys/kernel/osrelease"))
	set("cpu", gpu.HostCPUModel())
	set("cores", fmt.Sprint(runtime.NumCPU()))
	if total := gpu.HostMemBytes(); total > 0 {
		set("mem", fmt.Sprintf("%.1f GiB", float64(total)/(1<<30)))
	}
	v := version.Get()
	set("go", runtime.Version())
	set("mstar", v.Module)
	commit := v.Commit
	if v.Modified {
		commit += "+dirty"
	}
	set("mstar.commit", commit)
	if dev == nil {
		return env
	}
	info := dev.Info()
	set("device", info.ID)
	set("backend", string(info.Backend))
	if info.Backend != gpu.CUDA {
		return env
	}
	set("gpu", info.Name)
	set("gpu.arch", info.Arch)
	if info.SMs > 0 {
		set("gpu.sms", fmt.Sprint(info.SMs))
	}
	if info.MemBytes > 0 {
		set("gpu.mem", fmt.Sprintf("%.1f GiB", float64(info.MemBytes)/(1<<30)))
	}
	set("cuda.driver_api", info.Driver)
	if r, err := nvmlinfo.Query(); err == nil {
		set("driver", r.Driver)
		set("cuda.driver", r.CUDADriver)
		var idx int
		fmt.Sscanf(info.ID, "cuda:%d", &idx)
		// NVML and CUDA enumerate in the same order unless CUDA_VISIBLE_DEVICES
		// or CUDA_DEVICE_ORDER say otherwise; record the link only when the
		// names agree.
		if idx < len(r.GPUs) && r.GPUs[idx].Name == info.Name {
			g := r.GPUs[idx]
			set("pcie", fmt.Sprintf("gen%d x%d (max gen%d x%d)", g.PCIeGen, g.PCIeWidth, g.PCIeMaxGen, g.PCIeMaxWidth))
			if g.SMMaxMHz > 0 {
				set("gpu.sm_clock_max", fmt.Sprintf("%d MHz", g.SMMaxMHz))
			}
			if g.MemMaxMHz > 0 {
				set("gpu.mem_clock_max", fmt.Sprintf("%d MHz", g.MemMaxMHz))
			}
		}
	}
	return env
}

func firstLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return line
}
