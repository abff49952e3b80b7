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
	"github.com/mstar-dev/mstar/reports/results"
)

// Collect returns the environment of this process on dev (nil: host only).
// Facts that cannot be read are left out rather than written as empty.
func Collect(dev gpu.Device) results.Env {
	env := results.Env{}
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
		// Match NVML's GPU to this device by PCI bus id: CUDA_VISIBLE_DEVICES
		// and CUDA_DEVICE_ORDER renumber CUDA's devices, not NVML's.
		if g, ok := nvmlGPU(r, info); ok {
			set("pcie", linkOf(g).String())
			// Which card it was, when shards or workers of many GPUs merge.
			set("gpu.uuid", g.UUID)
			set("gpu.bus", g.BusID)
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

// nvmlGPU finds the NVML entry of a CUDA device by PCI bus id; without bus
// ids, only a machine's single GPU of the same name is taken for it.
// PCIe is a GPU's PCIe link as NVML reports it: now, and at most (an idle
// link trains down).
type PCIe struct{ Gen, Width, MaxGen, MaxWidth int }

func (l PCIe) String() string {
	return fmt.Sprintf("gen%d x%d (max gen%d x%d)", l.Gen, l.Width, l.MaxGen, l.MaxWidth)
}

func linkOf(g nvmlinfo.GPU) PCIe {
	return PCIe{Gen: g.PCIeGen, Width: g.PCIeWidth, MaxGen: g.PCIeMaxGen, MaxWidth: g.PCIeMaxWidth}
}

// PCIeLink is dev's PCIe link, when dev is a CUDA device NVML reports on.
func PCIeLink(dev gpu.Device) (PCIe, bool) {
	if dev == nil || dev.Info().Backend != gpu.CUDA {
		return PCIe{}, false
	}
	r, err := nvmlinfo.Query()
	if err != nil {
		return PCIe{}, false
	}
	g, ok := nvmlGPU(r, dev.Info())
	if !ok || g.PCIeGen == 0 {
		return PCIe{}, false
	}
	return linkOf(g), true
}

func nvmlGPU(r *nvmlinfo.Report, info gpu.Info) (nvmlinfo.GPU, bool) {
	if want, ok := busKey(info.PCIBusID); ok {
		for _, g := range r.GPUs {
			if k, ok := busKey(g.BusID); ok && k == want {
				return g, true
			}
		}
	}
	if len(r.GPUs) == 1 && r.GPUs[0].Name == info.Name {
		return r.GPUs[0], true
	}
	return nvmlinfo.GPU{}, false
}

// busKey normalises "0000:19:00.0" and "00000000:19:00.0" alike.
func busKey(id string) ([4]uint64, bool) {
	var k [4]uint64
	n, err := fmt.Sscanf(strings.ToLower(strings.TrimSpace(id)), "%x:%x:%x.%x", &k[0], &k[1], &k[2], &k[3])
	return k, err == nil && n == 4
}
