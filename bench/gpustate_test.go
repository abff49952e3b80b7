package bench

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/gpu/nvmlinfo"
	"github.com/mstar-dev/mstar/reports/results"
)

// cudaInfo is a CPU device that says it is a GPU, for the sampler's wiring.
type cudaInfo struct{ gpu.Device }

func (d cudaInfo) Info() gpu.Info {
	i := d.Device.Info()
	i.Backend, i.PCIBusID = gpu.CUDA, "0000:19:00.0"
	return i
}

type oneState nvmlinfo.State

func (s oneState) Read() (nvmlinfo.State, error) { return nvmlinfo.State(s), nil }

// A result measured under a power cap carries the state's range and says
// so; a sampler that cannot open NVML says why, and samples nothing.
func TestStateSamplerRecordsThrottling(t *testing.T) {
	defer func(f func(string) (nvmlinfo.Source, func(), error)) { openSource = f }(openSource)
	var opened string
	openSource = func(bus string) (nvmlinfo.Source, func(), error) {
		opened = bus
		return oneState{SMClockMHz: 1755, PowerW: 699, PowerLimitW: 700, TempC: 60, Reasons: nvml.ClocksEventReasonSwPowerCap}, func() {}, nil
	}
	s, note := newStateSampler(cudaInfo{gpu.NewCPU()})
	if s == nil || note != "" || opened != "0000:19:00.0" {
		t.Fatalf("sampler %v, note %q, opened %q", s, note, opened)
	}
	s.start()
	st := s.stop()
	if st == nil || !st.PowerThrottled || st.ThermalThrottled || st.SMClockMHz != [2]float64{1755, 1755} || st.Reasons[0] != "sw_power_cap" {
		t.Fatalf("state %+v", st)
	}

	openSource = func(string) (nvmlinfo.Source, func(), error) { return nil, nil, errors.New("NVML not available") }
	s, note = newStateSampler(cudaInfo{gpu.NewCPU()})
	if s != nil || !strings.Contains(note, "not sampled: NVML not available") {
		t.Errorf("without NVML: sampler %v, note %q", s, note)
	}
	s.start() // a nil sampler is a no-op
	if s.stop() != nil {
		t.Error("a nil sampler returned a state")
	}
	if s, note := newStateSampler(gpu.NewCPU()); s != nil || note != "" {
		t.Errorf("the CPU backend: sampler %v, note %q", s, note)
	}
	// The exported sampler on the CPU: no GPU state, no note, and on Linux
	// the host's state.
	ps, note := NewStateSampler(gpu.NewCPU())
	ps.Start()
	ms := ps.Stop()
	if ps == nil || note != "" || ms.GPU != nil {
		t.Errorf("NewStateSampler on the CPU: %v %q %+v", ps, note, ms)
	}
	if _, err := os.Stat("/proc/stat"); err == nil && (ms.Host == nil || ms.Host.CPUs < 1) {
		t.Errorf("on Linux the host's state was not read: %+v", ms.Host)
	}
	var r results.Result
	ms.Set(&r)
	if r.HostState != ms.Host || r.GPUState != nil {
		t.Errorf("Set: %+v", r)
	}
	ps.Close()
	// No device: the host's state alone (the transport sweep's).
	hs, note := NewStateSampler(nil)
	hs.Start()
	_, procErr := os.Stat("/proc/stat")
	if ms := hs.Stop(); note != "" || ms.GPU != nil || (ms.Host == nil) != (procErr != nil) {
		t.Errorf("NewStateSampler(nil): %q %+v", note, ms)
	}
	var none *StateSampler // nil-safe
	none.Start()
	if st := none.Stop(); st.GPU != nil || st.Host != nil {
		t.Errorf("a nil sampler returned %+v", st)
	}
	none.Close()
}
