package bench

import (
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/gpu/nvmlinfo"
	"github.com/mstar-dev/mstar/reports/results"
)

// stateSampler samples a GPU's clocks, power, temperature and throttle
// reasons while a result's samples run. A nil *stateSampler samples
// nothing (the CPU backend, or no NVML): its methods are no-ops.
type stateSampler struct {
	s     *nvmlinfo.Sampler
	close func()
}

// openSource finds a device in NVML; a variable so that tests can fake it.
var openSource = nvmlinfo.OpenSource

// newStateSampler samples dev's state, or returns nil and why not.
func newStateSampler(dev gpu.Device) (*stateSampler, string) {
	info := dev.Info()
	if info.Backend != gpu.CUDA {
		return nil, ""
	}
	src, closeFn, err := openSource(info.PCIBusID)
	if err != nil {
		return nil, "GPU state (clocks, power, throttling) not sampled: " + err.Error()
	}
	return &stateSampler{s: nvmlinfo.NewSampler(src, 0), close: closeFn}, ""
}

func (s *stateSampler) start() {
	if s != nil {
		s.s.Start()
	}
}

// StateSampler samples a GPU's state (clocks, power, temperature,
// throttle reasons) while a measurement runs, for suites outside package
// bench. A nil *StateSampler samples nothing; its methods are no-ops.
type StateSampler struct{ s *stateSampler }

// NewStateSampler samples dev's state, or returns nil and why not ("" on
// the CPU backend, where there is nothing to sample).
func NewStateSampler(dev gpu.Device) (*StateSampler, string) {
	s, note := newStateSampler(dev)
	if s == nil {
		return nil, note
	}
	return &StateSampler{s}, ""
}

// Start begins a measurement's range.
func (s *StateSampler) Start() {
	if s != nil {
		s.s.start()
	}
}

// Stop ends it and returns the state seen (nil when nothing was read).
func (s *StateSampler) Stop() *results.GPUState {
	if s == nil {
		return nil
	}
	return s.s.stop()
}

// Close releases NVML.
func (s *StateSampler) Close() {
	if s != nil {
		s.s.shutdown()
	}
}

// stop ends the sampling and returns what it saw (nil when nothing).
func (s *stateSampler) stop() *results.GPUState {
	if s == nil {
		return nil
	}
	return gpuStateOf(s.s.Stop())
}

func (s *stateSampler) shutdown() {
	if s != nil && s.close != nil {
		s.close()
	}
}

// gpuStateOf is a sampled range as a result's GPU state; nil when no
// reading succeeded.
func gpuStateOf(r nvmlinfo.Range) *results.GPUState {
	if r.Samples == 0 {
		return nil
	}
	pair := func(s nvmlinfo.Span) [2]float64 { return [2]float64{s.Min, s.Max} }
	return &results.GPUState{
		Samples:          r.Samples,
		SMClockMHz:       pair(r.SMClockMHz),
		MemClockMHz:      pair(r.MemClockMHz),
		PowerW:           pair(r.PowerW),
		PowerLimitW:      pair(r.PowerLimitW),
		TempC:            pair(r.TempC),
		Reasons:          nvmlinfo.ReasonNames(r.Reasons),
		PowerThrottled:   r.PowerThrottled(),
		ThermalThrottled: r.ThermalThrottled(),
	}
}
