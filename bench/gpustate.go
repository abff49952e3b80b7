package bench

import (
	"github.com/mstar-dev/mstar/internal/gpu"
	"github.com/mstar-dev/mstar/internal/gpu/nvmlinfo"
	"github.com/mstar-dev/mstar/internal/hoststate"
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

// newStateSampler samples dev's state, or returns nil and why not (nil
// and "" for no device or the CPU backend).
func newStateSampler(dev gpu.Device) (*stateSampler, string) {
	if dev == nil {
		return nil, ""
	}
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

// MachineState is what a StateSampler saw while a measurement ran: the
// GPU's state (nil on the CPU backend or without NVML) and how busy the
// host's CPUs were (nil where /proc cannot be read).
type MachineState struct {
	GPU  *results.GPUState
	Host *results.HostState
}

// Set records the state on a result.
func (m MachineState) Set(r *results.Result) { r.GPUState, r.HostState = m.GPU, m.Host }

// StateSampler samples the machine while a measurement runs: a GPU's
// clocks, power, temperature and throttle reasons, and the host's CPU
// time taken by the hypervisor or other processes. A nil *StateSampler
// samples nothing; its methods are no-ops.
type StateSampler struct {
	gpu  *stateSampler
	host hoststate.Sampler
}

// NewStateSampler samples dev's machine (only the host's for a nil dev);
// the note says why the GPU's state is not sampled ("" on the CPU backend
// or without a device, where there is no GPU to sample).
func NewStateSampler(dev gpu.Device) (*StateSampler, string) {
	s, note := newStateSampler(dev)
	return &StateSampler{gpu: s}, note
}

// Start begins a measurement's range.
func (s *StateSampler) Start() {
	if s != nil {
		s.gpu.start()
		s.host.Start()
	}
}

// Stop ends it and returns the state seen.
func (s *StateSampler) Stop() MachineState {
	if s == nil {
		return MachineState{}
	}
	m := MachineState{GPU: s.gpu.stop()}
	if u, ok := s.host.Stop(); ok {
		m.Host = &results.HostState{Seconds: u.Seconds, CPUs: u.CPUs, StealPct: u.StealPct, OtherPct: u.OtherPct, Busy: u.Busy()}
	}
	return m
}

// Close releases NVML.
func (s *StateSampler) Close() {
	if s != nil {
		s.gpu.shutdown()
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
