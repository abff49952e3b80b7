// Package nvmlinfo reads GPU facts from NVML (github.com/NVIDIA/go-nvml):
// names, memory, driver, PCIe link and clocks. NVML is loaded at run time
// (libnvidia-ml.so.1), so a machine without the NVIDIA driver gets an error,
// not a crash, and the binary builds anywhere.
package nvmlinfo

import (
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/mstar-dev/mstar/internal/sigstack"
)

// GPU is what mstar reports about one device.
type GPU struct {
	Index        int    `json:"index"`
	Name         string `json:"name"`
	UUID         string `json:"uuid,omitempty"`
	BusID        string `json:"bus_id,omitempty"`
	MemTotal     uint64 `json:"mem_total_bytes"`
	MemFree      uint64 `json:"mem_free_bytes"`
	PCIeGen      int    `json:"pcie_gen"`       // current link generation
	PCIeWidth    int    `json:"pcie_width"`     // current link width (lanes)
	PCIeMaxGen   int    `json:"pcie_max_gen"`   // what the link can train to
	PCIeMaxWidth int    `json:"pcie_max_width"` //
	SMClockMHz   int    `json:"sm_clock_mhz"`
	SMMaxMHz     int    `json:"sm_max_clock_mhz"`
	MemClockMHz  int    `json:"mem_clock_mhz"`
	MemMaxMHz    int    `json:"mem_max_clock_mhz"`
}

// Report is the system's NVML view.
type Report struct {
	Driver     string `json:"driver"`      // "580.159.04"
	CUDADriver string `json:"cuda_driver"` // "13.0": the CUDA version the driver supports
	GPUs       []GPU  `json:"gpus"`
}

var (
	once    sync.Once
	cached  *Report
	loadErr error
)

// Query returns the NVML report, reading it once per process.
func Query() (*Report, error) {
	once.Do(func() { cached, loadErr = query() })
	return cached, loadErr
}

func errOf(call string, ret nvml.Return) error {
	return fmt.Errorf("%s: %s", call, nvml.ErrorString(ret))
}

func query() (r *Report, err error) {
	// go-nvml panics on some broken installs; turn that into an error.
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("nvml: %v", p)
		}
	}()
	if ret := initNVML(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, fmt.Errorf("NVML not available: libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)")
		}
		return nil, errOf("nvmlInit", ret)
	}
	defer nvml.Shutdown()
	r = &Report{}
	if v, ret := nvml.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		r.Driver = v
	}
	if v, ret := nvml.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		r.CUDADriver = fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
	}
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, errOf("nvmlDeviceGetCount", ret)
	}
	for i := 0; i < n; i++ {
		d, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, errOf(fmt.Sprintf("nvmlDeviceGetHandleByIndex(%d)", i), ret)
		}
		g := GPU{Index: i}
		g.Name, _ = d.GetName()
		g.UUID, _ = d.GetUUID()
		if pci, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
			g.BusID = cString(pci.BusIdLegacy[:])
		}
		if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.MemTotal, g.MemFree = m.Total, m.Free
		}
		g.PCIeGen, _ = d.GetCurrPcieLinkGeneration()
		g.PCIeWidth, _ = d.GetCurrPcieLinkWidth()
		g.PCIeMaxGen, _ = d.GetMaxPcieLinkGeneration()
		g.PCIeMaxWidth, _ = d.GetMaxPcieLinkWidth()
		g.SMClockMHz = clock(d.GetClockInfo(nvml.CLOCK_SM))
		g.SMMaxMHz = clock(d.GetMaxClockInfo(nvml.CLOCK_SM))
		g.MemClockMHz = clock(d.GetClockInfo(nvml.CLOCK_MEM))
		g.MemMaxMHz = clock(d.GetMaxClockInfo(nvml.CLOCK_MEM))
		r.GPUs = append(r.GPUs, g)
	}
	return r, nil
}

func clock(v uint32, ret nvml.Return) int {
	if ret != nvml.SUCCESS {
		return 0
	}
	return int(v)
}

func cString[T ~int8 | ~uint8](b []T) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// PCIeGBps is the theoretical one-direction bandwidth of a PCIe link in GB/s
// (10^9 bytes/s) after line encoding: 8b/10b for Gen1-2, 128b/130b for
// Gen3-5, and Gen6's 242/256 FLIT efficiency. 0 for an unknown generation.
func PCIeGBps(gen, width int) float64 {
	var gtps, eff float64
	switch gen {
	case 1:
		gtps, eff = 2.5, 8.0/10
	case 2:
		gtps, eff = 5, 8.0/10
	case 3:
		gtps, eff = 8, 128.0/130
	case 4:
		gtps, eff = 16, 128.0/130
	case 5:
		gtps, eff = 32, 128.0/130
	case 6:
		gtps, eff = 64, 242.0/256
	default:
		return 0
	}
	return gtps * eff / 8 * float64(width)
}

// initNVML is nvml.Init, then the signal handlers it may have installed
// put on the alternate signal stack (a Ctrl-C would otherwise crash Go).
func initNVML() nvml.Return {
	ret := nvml.Init()
	sigstack.Fix()
	return ret
}
