package nvmlinfo

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// State is one reading of a GPU's state while it works: clocks, power,
// temperature and NVML's clock-event (throttle) reasons. A GPU's maximum
// clocks say little about a measurement; its clocks and power while the
// samples ran do (the H200's first GEMM samples reached ~790 TFLOP/s before
// a power cap set in and held it near 690).
type State struct {
	SMClockMHz  int
	MemClockMHz int
	PowerW      float64
	PowerLimitW float64
	TempC       int
	Reasons     uint64 // NVML clock-event reason bits
}

// Source reads the state of one GPU: NVML, or a fake in tests.
type Source interface {
	Read() (State, error)
}

// NVML's clock-event reasons, by bit.
var reasonNames = []struct {
	bit  uint64
	name string
}{
	{nvml.ClocksEventReasonGpuIdle, "gpu_idle"},
	{nvml.ClocksEventReasonApplicationsClocksSetting, "applications_clocks"},
	{nvml.ClocksEventReasonSwPowerCap, "sw_power_cap"},
	{nvml.ClocksThrottleReasonHwSlowdown, "hw_slowdown"},
	{nvml.ClocksEventReasonSyncBoost, "sync_boost"},
	{nvml.ClocksEventReasonSwThermalSlowdown, "sw_thermal_slowdown"},
	{nvml.ClocksThrottleReasonHwThermalSlowdown, "hw_thermal_slowdown"},
	{nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, "hw_power_brake"},
	{nvml.ClocksEventReasonDisplayClockSetting, "display_clocks"},
	{nvml.ClocksEventReasonBoardLimit, "board_limit"},
	{nvml.ClocksEventReasonReliability, "reliability"},
}

const (
	powerBits   = nvml.ClocksEventReasonSwPowerCap | nvml.ClocksThrottleReasonHwPowerBrakeSlowdown | nvml.ClocksThrottleReasonHwSlowdown
	thermalBits = nvml.ClocksEventReasonSwThermalSlowdown | nvml.ClocksThrottleReasonHwThermalSlowdown
)

// ReasonNames names the reason bits set in mask, in NVML's order; unknown
// bits are named by value.
func ReasonNames(mask uint64) []string {
	var out []string
	for _, r := range reasonNames {
		if mask&r.bit != 0 {
			out = append(out, r.name)
			mask &^= r.bit
		}
	}
	if mask != 0 {
		out = append(out, fmt.Sprintf("0x%x", mask))
	}
	return out
}

// Span is the least and greatest value seen.
type Span struct{ Min, Max float64 }

func (s *Span) add(v float64, first bool) {
	if first {
		s.Min, s.Max = v, v
		return
	}
	s.Min, s.Max = math.Min(s.Min, v), math.Max(s.Max, v)
}

// Range is what a sampler saw while a measurement ran: the range of each
// reading and every reason that was set in any sample.
type Range struct {
	Samples                    int
	SMClockMHz, MemClockMHz    Span
	PowerW, PowerLimitW, TempC Span
	Reasons                    uint64
	Errors                     int    // readings that failed
	Err                        string // the first failure
}

// PowerThrottled reports whether a power cap or power brake slowed the
// clocks in any sample.
func (r Range) PowerThrottled() bool { return r.Reasons&powerBits != 0 }

// ThermalThrottled reports whether a thermal slowdown was set in any sample.
func (r Range) ThermalThrottled() bool { return r.Reasons&thermalBits != 0 }

// Add records one reading.
func (r *Range) Add(s State) {
	first := r.Samples == 0
	r.SMClockMHz.add(float64(s.SMClockMHz), first)
	r.MemClockMHz.add(float64(s.MemClockMHz), first)
	r.PowerW.add(s.PowerW, first)
	r.PowerLimitW.add(s.PowerLimitW, first)
	r.TempC.add(float64(s.TempC), first)
	r.Reasons |= s.Reasons
	r.Samples++
}

// Sampler reads a Source every Every while a measurement runs, from Start
// to Stop, and always once at each end, so that a measurement shorter than
// Every still has its state.
type Sampler struct {
	src   Source
	every time.Duration
	mu    sync.Mutex
	r     Range
	stop  chan struct{}
	done  chan struct{}
}

// NewSampler samples src every every (0: 50 ms).
func NewSampler(src Source, every time.Duration) *Sampler {
	if every <= 0 {
		every = 50 * time.Millisecond
	}
	return &Sampler{src: src, every: every}
}

func (s *Sampler) read() {
	st, err := s.src.Read()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.r.Errors == 0 {
			s.r.Err = err.Error()
		}
		s.r.Errors++
		return
	}
	s.r.Add(st)
}

// Start begins sampling a new range. Calling Start while sampling
// restarts the range.
func (s *Sampler) Start() {
	if s.stop != nil {
		s.Stop()
	}
	s.mu.Lock()
	s.r = Range{}
	s.mu.Unlock()
	s.read()
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go func(stop, done chan struct{}) {
		defer close(done)
		t := time.NewTicker(s.every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				s.read()
			}
		}
	}(s.stop, s.done)
}

// Stop ends sampling and returns the range seen since Start.
func (s *Sampler) Stop() Range {
	if s.stop == nil {
		return Range{}
	}
	close(s.stop)
	<-s.done
	s.stop, s.done = nil, nil
	s.read()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r
}

// nvmlSource reads one device through NVML.
type nvmlSource struct{ d nvml.Device }

// OpenSource opens the GPU at PCI bus id busID ("0000:19:00.0", as
// gpu.Info.PCIBusID names it) for sampling; close shuts NVML down.
func OpenSource(busID string) (src Source, close func(), err error) {
	defer func() {
		if p := recover(); p != nil {
			src, close, err = nil, nil, fmt.Errorf("nvml: %v", p)
		}
	}()
	if busID == "" {
		return nil, nil, errors.New("no PCI bus id to find the GPU in NVML by")
	}
	if ret := initNVML(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, nil, errors.New("NVML not available: libnvidia-ml.so.1 not found")
		}
		return nil, nil, errOf("nvmlInit", ret)
	}
	d, ret := nvml.DeviceGetHandleByPciBusId(busID)
	if ret != nvml.SUCCESS {
		nvml.Shutdown()
		return nil, nil, errOf(fmt.Sprintf("nvmlDeviceGetHandleByPciBusId(%s)", busID), ret)
	}
	return nvmlSource{d}, func() { nvml.Shutdown() }, nil
}

func (n nvmlSource) Read() (State, error) {
	var s State
	var ret nvml.Return
	var v uint32
	if v, ret = n.d.GetClockInfo(nvml.CLOCK_SM); ret != nvml.SUCCESS {
		return s, errOf("nvmlDeviceGetClockInfo(SM)", ret)
	}
	s.SMClockMHz = int(v)
	if v, ret = n.d.GetClockInfo(nvml.CLOCK_MEM); ret == nvml.SUCCESS {
		s.MemClockMHz = int(v)
	}
	if v, ret = n.d.GetPowerUsage(); ret == nvml.SUCCESS {
		s.PowerW = float64(v) / 1000
	}
	if v, ret = n.d.GetEnforcedPowerLimit(); ret == nvml.SUCCESS {
		s.PowerLimitW = float64(v) / 1000
	}
	if v, ret = n.d.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		s.TempC = int(v)
	}
	reasons, ret := n.d.GetCurrentClocksEventReasons()
	if ret != nvml.SUCCESS {
		reasons, ret = n.d.GetCurrentClocksThrottleReasons() // drivers before the rename
	}
	if ret == nvml.SUCCESS {
		s.Reasons = reasons
	}
	return s, nil
}
