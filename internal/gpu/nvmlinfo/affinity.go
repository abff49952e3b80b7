package nvmlinfo

import (
	"fmt"
	"math/bits"
	"runtime"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// CPUAffinity is the CPUs of the NUMA node nearest the GPU at PCI bus id
// busID, as NVML reports them: where a process that feeds that GPU should
// run. An error says why it is unknown (no NVML, no such GPU, no answer).
func CPUAffinity(busID string) (cpus []int, err error) {
	defer func() {
		if p := recover(); p != nil {
			cpus, err = nil, fmt.Errorf("nvml: %v", p)
		}
	}()
	if ret := initNVML(); ret != nvml.SUCCESS {
		return nil, errOf("nvmlInit", ret)
	}
	defer nvml.Shutdown()
	d, ret := nvml.DeviceGetHandleByPciBusId(busID)
	if ret != nvml.SUCCESS {
		return nil, errOf("nvmlDeviceGetHandleByPciBusId("+busID+")", ret)
	}
	n := max(runtime.NumCPU(), 64)
	mask, ret := d.GetCpuAffinityWithinScope(n, nvml.AFFINITY_SCOPE_NODE)
	if ret != nvml.SUCCESS {
		if mask, ret = d.GetCpuAffinity(n); ret != nvml.SUCCESS {
			return nil, errOf("nvmlDeviceGetCpuAffinity", ret)
		}
	}
	if cpus = CPUsOfMask(mask); len(cpus) == 0 {
		return nil, fmt.Errorf("NVML reports no CPU near GPU %s", busID)
	}
	return cpus, nil
}

// CPUsOfMask lists the CPUs set in an NVML CPU mask: bit b of word w is
// CPU w·64+b (words of the platform's unsigned long).
func CPUsOfMask(mask []uint) []int {
	var out []int
	for w, word := range mask {
		for word != 0 {
			b := bits.TrailingZeros(word)
			out = append(out, w*bits.UintSize+b)
			word &^= 1 << b
		}
	}
	return out
}
