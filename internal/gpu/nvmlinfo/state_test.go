package nvmlinfo

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// fakeSource replays readings, the last one repeated, and counts reads.
type fakeSource struct {
	mu    sync.Mutex
	seq   []State
	fail  int // the first fail reads return an error
	reads int
}

func (f *fakeSource) Read() (State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.reads <= f.fail {
		return State{}, errors.New("nvml: GPU is lost")
	}
	i := min(f.reads-f.fail-1, len(f.seq)-1)
	return f.seq[i], nil
}

func (f *fakeSource) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// The sampler records the range of every reading between Start and Stop,
// the union of the throttle reasons, and says power-throttled when a power
// cap was set in any sample (the H200's GEMM ceiling: 790 then ~690).
func TestSamplerRecordsTheRangeAndThrottling(t *testing.T) {
	src := &fakeSource{seq: []State{
		{SMClockMHz: 1980, MemClockMHz: 3201, PowerW: 420, PowerLimitW: 700, TempC: 41},
		{SMClockMHz: 1755, MemClockMHz: 3201, PowerW: 699, PowerLimitW: 700, TempC: 55, Reasons: nvml.ClocksEventReasonSwPowerCap},
		{SMClockMHz: 1830, MemClockMHz: 3201, PowerW: 690, PowerLimitW: 700, TempC: 57},
	}}
	s := NewSampler(src, time.Millisecond)
	s.Start()
	for src.count() < 3 {
		time.Sleep(time.Millisecond)
	}
	r := s.Stop()
	if r.Samples < 3 || r.Errors != 0 {
		t.Fatalf("samples %d errors %d", r.Samples, r.Errors)
	}
	if r.SMClockMHz != (Span{1755, 1980}) || r.PowerW != (Span{420, 699}) || r.TempC != (Span{41, 57}) || r.PowerLimitW != (Span{700, 700}) {
		t.Errorf("range %+v", r)
	}
	if !r.PowerThrottled() || r.ThermalThrottled() {
		t.Errorf("power %v thermal %v, want power only", r.PowerThrottled(), r.ThermalThrottled())
	}
	if got := ReasonNames(r.Reasons); !slices.Equal(got, []string{"sw_power_cap"}) {
		t.Errorf("reasons %q", got)
	}
	// A new Start begins a new range: an unthrottled measurement after a
	// throttled one is not marked.
	src2 := &fakeSource{seq: []State{{SMClockMHz: 1980, PowerW: 300, PowerLimitW: 700, TempC: 40, Reasons: nvml.ClocksEventReasonGpuIdle}}}
	s = NewSampler(src2, time.Hour)
	s.Start()
	r = s.Stop()
	if r.Samples != 2 || r.PowerThrottled() || r.ThermalThrottled() {
		t.Errorf("an idle reading: %+v (want 2 samples, one at each end, not throttled)", r)
	}
}

func TestSamplerCountsFailedReads(t *testing.T) {
	src := &fakeSource{fail: 1, seq: []State{{SMClockMHz: 1000, Reasons: nvml.ClocksEventReasonSwThermalSlowdown}}}
	s := NewSampler(src, time.Hour)
	s.Start()
	r := s.Stop()
	if r.Errors != 1 || r.Err != "nvml: GPU is lost" || r.Samples != 1 || !r.ThermalThrottled() {
		t.Errorf("range %+v", r)
	}
	if (&Sampler{}).Stop().Samples != 0 {
		t.Error("Stop without Start sampled")
	}
}

func TestReasonNames(t *testing.T) {
	got := ReasonNames(nvml.ClocksEventReasonSwPowerCap | nvml.ClocksThrottleReasonHwThermalSlowdown | 1<<40)
	if !slices.Equal(got, []string{"sw_power_cap", "hw_thermal_slowdown", "0x10000000000"}) {
		t.Errorf("%q", got)
	}
}
